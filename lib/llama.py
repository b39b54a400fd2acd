"""llama.cpp, the engine a laptop user would pick, run on the book's own Q4_1 GGUF file from chapter 8.

llama-cpp-python compiles llama.cpp from source with this machine's compiler, so it lives in its own
environment, ``.venv-llama`` (``make .venv-llama``; ``make book`` builds it unless ``LLAMA=0``; ``make test``
never needs it). The chapter talks to it through :class:`LlamaWorker`: one process of that environment's Python
running ``lib/llama_worker.py``, which loads the file once and answers requests (decode steps, a greedy
answer), so its runs can take turns with the PyTorch ones. Introduced in chapter 8.
"""

from __future__ import annotations

import json
import select
import signal
import subprocess
import tempfile
from pathlib import Path

from lib import llama_worker
from lib.paths import REPO_ROOT

__all__ = ["llama_python", "llama_unavailable", "LlamaWorker", "LlamaFailed", "server_command"]

WORKER = Path(llama_worker.__file__)  # imported so that editing it re-runs the chapters that use it


class LlamaFailed(RuntimeError):
    """The llama.cpp worker did not start, or a request failed; the message carries what it said."""


def llama_python(root: Path = REPO_ROOT) -> Path:
    """The interpreter of ``.venv-llama``."""
    return root / ".venv-llama" / "bin" / "python"


def llama_unavailable(root: Path = REPO_ROOT) -> str | None:
    """Why llama.cpp cannot run here, in one sentence, or ``None`` when it can."""
    if not llama_python(root).exists() or not (root / ".venv-llama" / ".installed").exists():
        return ("llama.cpp's environment .venv-llama is absent (make .venv-llama builds it from source: about 6 to 13 "
                "minutes on 2 cores; make book does it unless LLAMA=0), so the Q4_1 file is not run")
    return None


def server_command(gguf: str | Path, port: int = 8000, threads: int = 2, root: Path = REPO_ROOT) -> str:
    """The command that serves ``gguf`` with llama-cpp-python's OpenAI-compatible server on loopback (chapter 7's
    ``base_url`` can point at ``http://127.0.0.1:<port>``). The server runs one request at a time; by default a new
    request interrupts the one streaming (its reply ends with no content), so the command queues them instead."""
    gguf = Path(gguf)
    shown = gguf.relative_to(root) if gguf.is_relative_to(root) else gguf  # a published page names no build path
    return (f"{llama_python(root).relative_to(root)} -m llama_cpp.server --model {shown} --host 127.0.0.1 "
            f"--port {port} --n_threads {threads} --n_ctx 2048 --interrupt_requests False")


class LlamaWorker:
    """One llama.cpp process holding ``gguf`` with ``threads`` threads and a context of ``n_ctx`` positions; use it
    as a context manager (the process always stops), or :meth:`start` and :meth:`close`. :meth:`request` sends one
    request of ``lib/llama_worker.py``'s protocol and returns its reply. A worker that has not loaded the file within
    ``start_timeout_s`` seconds is stopped, with what it said."""

    def __init__(self, gguf: str | Path, threads: int, n_ctx: int, root: Path = REPO_ROOT,
                 start_timeout_s: float = 120.0):
        why = llama_unavailable(root)
        if why:
            raise LlamaFailed(why)
        self.argv = [str(llama_python(root)), str(WORKER), str(gguf), str(int(threads)), str(int(n_ctx))]
        self.start_timeout_s = start_timeout_s
        self.process: subprocess.Popen | None = None
        self._log = None  # the worker's stderr (llama.cpp logs there), kept for a failure's message

    def __enter__(self) -> LlamaWorker:
        return self.start()

    def start(self) -> LlamaWorker:
        """Start the process and wait until it has loaded the file; raises :class:`LlamaFailed` with what it said."""
        self._log = tempfile.TemporaryFile("w+")
        self.process = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self._log, text=True, bufsize=1)
        started, _, _ = select.select([self.process.stdout], [], [], self.start_timeout_s)  # a hung load cannot hang us
        line = self.process.stdout.readline() if started else ""
        if not started:
            self.process.kill()
        if not line.strip().startswith('{"ready"'):
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            said = line.strip() or self._stderr_tail(status=started) or f"nothing within {self.start_timeout_s:g} s"
            self.close()
            raise LlamaFailed(f"llama.cpp did not start: {said}")
        return self

    def _exit_status(self) -> str:
        """How the process ended, for a failure's message: ``"exit status -11, SIGSEGV"``, or ``""`` while it runs."""
        code = self.process.poll() if self.process is not None else None
        if code is None:
            return ""
        if code < 0:
            try:
                return f"exit status {code}, {signal.Signals(-code).name}"
            except ValueError:
                return f"exit status {code}"
        return f"exit status {code}"

    def _stderr_tail(self, lines: int = 10, status: bool = True) -> str:
        """The worker's last ``lines`` lines of stderr and (``status``), once it has ended, its exit status."""
        ended = self._exit_status() if status else ""
        said = ""
        if self._log is not None:
            self._log.seek(0)
            said = " | ".join(self._log.read().strip().splitlines()[-lines:])
        return "; ".join(filter(None, [said, ended])) or ("no output" if status else "")

    def request(self, **request) -> dict:
        """Send ``request`` (its ``kind`` and fields) and return the reply; a failed request raises
        :class:`LlamaFailed` with the worker's message."""
        if self.process is None or self.process.poll() is not None:
            raise LlamaFailed("the llama.cpp worker is not running")
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            self.process.wait(timeout=10)
            raise LlamaFailed(f"the llama.cpp worker stopped: {self._stderr_tail()}")
        reply = json.loads(line)
        if "error" in reply:
            raise LlamaFailed(f"llama.cpp: {reply['error']}")
        return reply

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop the process (it also stops by itself when its parent's end of the pipe closes)."""
        if self.process is not None and self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
