"""Serving engines on loopback: start one, wait until it is healthy, and always stop it (chapter 7).

:class:`Engine` starts a server process on ``127.0.0.1`` at a free port, waits until its health endpoint
answers, and always stops it: on ``stop()``, on leaving a ``with`` block (even when the block raised), at
interpreter exit (``atexit``), when the object is collected (``weakref.finalize``), and when the process that
started it dies (the child is launched under ``prctl(PR_SET_PDEATHSIG)`` on Linux). It runs in its own process
group, and stopping kills the whole group (SIGTERM, then SIGKILL), so an engine's worker processes go with it,
also when the engine itself has already died. A start that fails raises :class:`EngineFailed` with the end of
the engine's log. Every wait is bounded: each health probe (2 s, however the engine answers), the start as a
whole (``start_timeout_s``), and the stop (SIGTERM, a grace period, SIGKILL). :func:`transformers_engine` and
:func:`vllm_engine` build the two engines of chapter 7; ``lib.client`` talks to them. Plain standard library.

Introduced in chapter 7 (over the wire).
"""

from __future__ import annotations

import atexit
import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lib.client import http_get
from lib.paths import REPO_ROOT

__all__ = ["EngineFailed", "Engine", "free_port", "transformers_engine", "vllm_engine", "vllm_python",
           "vllm_unavailable", "compute_threads", "REPO_ROOT", "LOOPBACK"]

LOOPBACK = "127.0.0.1"


class EngineFailed(RuntimeError):
    """An engine did not start (it exited, or was not healthy in time); the message ends with its log."""


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port on ``host`` that nothing listens on now (the kernel picks it; another process could still
    take it before the engine binds it, which :class:`Engine` reports as a failed start)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


# The child runs this before exec'ing the engine: ask Linux to SIGTERM it when its parent dies, so a
# killed notebook kernel cannot leave an engine behind. The setting survives exec.
_DEATH_SIGNAL = ("import ctypes, os, signal, sys\n"
                 "try:\n    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)\n"
                 "except Exception:\n    pass\n"
                 "os.execvp(sys.argv[1], sys.argv[1:])\n")

_RUNNING: set[int] = set()   # process-group ids of engines started by this process and not yet stopped
_LOCK = threading.Lock()


def _kill_group(pgid: int, grace_s: float = 10.0) -> None:
    """SIGTERM the process group ``pgid``, wait up to ``grace_s`` for its leader, then SIGKILL the group."""
    with _LOCK:
        if pgid not in _RUNNING:
            return
        _RUNNING.discard(pgid)
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pgid, os.WNOHANG)
        except ChildProcessError:  # not our child (or already reaped): poll the group instead
            done = 0
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
        if done:
            break
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)  # the leader's workers, or a leader that ignored SIGTERM
    except ProcessLookupError:
        pass


def _stop_all() -> None:
    for pgid in list(_RUNNING):
        _kill_group(pgid, grace_s=5.0)


atexit.register(_stop_all)


@dataclass
class Engine:
    """A server process on loopback. ``argv`` may hold ``{port}`` and ``{host}``, filled in at start.

    Use it as a context manager (``with Engine(...) as engine:``) or call :meth:`start` and :meth:`stop`;
    ``base_url`` is ``http://127.0.0.1:PORT`` once started. ``health_path`` must answer 200 when the engine
    can serve. ``log_path`` (default: a temporary file) receives the engine's stdout and stderr.
    ``start_timeout_s`` bounds the wait for health (a first vLLM start compiles for minutes).
    ``startup_s`` is how long the last start took. Chapter 7 builds its engines with
    :func:`transformers_engine` and :func:`vllm_engine`.
    """

    name: str
    argv: Sequence[str]
    env: dict[str, str] | None = None
    health_path: str = "/health"
    start_timeout_s: float = 300.0
    log_path: Path | None = None
    port: int | None = None
    startup_s: float | None = field(default=None, init=False)
    _proc: subprocess.Popen | None = field(default=None, init=False, repr=False)

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise RuntimeError(f"{self.name} has not been started")
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, lines: int = 25) -> str:
        """The last ``lines`` lines of the engine's log ('' if there is none)."""
        if self.log_path is None or not Path(self.log_path).exists():
            return ""
        text = Path(self.log_path).read_text(errors="replace").replace("\r", "\n")
        return "\n".join([ln for ln in text.splitlines() if ln.strip()][-lines:])

    def start(self) -> Engine:
        """Start the process, wait until ``health_path`` answers 200, return ``self``.

        Raises :class:`EngineFailed` (after stopping whatever started) if the process exits or is not
        healthy within ``start_timeout_s``; the message names the engine, says which, and ends with the
        end of its log.
        """
        if self.running:
            return self
        self.port = self.port or free_port()
        if self.log_path is None:
            self.log_path = Path(tempfile.mkstemp(prefix=f"engine-{self.name}-", suffix=".log")[1])
        argv = [str(a).format(port=self.port, host=LOOPBACK) for a in self.argv]
        if shutil.which(argv[0]) is None and not Path(argv[0]).exists():
            raise EngineFailed(f"{self.name}: cannot start {argv[0]!r}: no such program")
        env = {**os.environ, **(self.env or {})}
        started = time.monotonic()
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen([sys.executable, "-c", _DEATH_SIGNAL, *argv], stdin=subprocess.DEVNULL,
                                          stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        with _LOCK:
            _RUNNING.add(self._proc.pid)
        weakref.finalize(self, _kill_group, self._proc.pid)
        try:
            self._wait_healthy(started)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - started
        return self

    def _wait_healthy(self, started: float) -> None:
        deadline, said = started + self.start_timeout_s, 0
        while True:
            code = self._proc.poll()
            if code is not None:
                raise EngineFailed(f"{self.name} exited with code {code} before it was healthy. "
                                   f"End of its log ({self.log_path}):\n{self.log_tail()}")
            try:
                status, _ = http_get(self.base_url + self.health_path, timeout_s=2.0)
                if status == 200:
                    return
            except (OSError, http.client.HTTPException):  # not listening yet, or not speaking HTTP yet
                pass
            waited = time.monotonic() - started
            if time.monotonic() > deadline:
                tail = self.log_tail()
                raise EngineFailed(f"{self.name} was not healthy after {self.start_timeout_s:.0f} s (the parameter "
                                   f"start_timeout_s; GET {self.health_path} on port {self.port}). End of its log "
                                   f"({self.log_path}):\n{tail if tail.strip() else '(empty: it wrote nothing)'}")
            if waited >= said + 30:  # a long start shows that it is still waited for, and for how long at most
                said = int(waited // 30) * 30
                print(f"{self.name}: not answering GET {self.health_path} yet after {said} s (start_timeout_s = "
                      f"{self.start_timeout_s:.0f})", flush=True)
            time.sleep(0.25)

    def stop(self) -> None:
        """Stop the engine and every process of its group (SIGTERM, then SIGKILL). Safe to call twice."""
        if self._proc is not None:
            _kill_group(self._proc.pid)
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass

    def __enter__(self) -> Engine:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def transformers_engine(model_dir: str | Path, *, max_batch_tokens: int = 256, num_blocks: int = 16,
                        dtype: str = "float32", env: dict[str, str] | None = None,
                        start_timeout_s: float = 300.0) -> Engine:
    """``transformers serve`` with continuous batching (paged attention), from this environment, serving the
    model in ``model_dir`` on the CPU.

    ``num_blocks`` KV-cache blocks of 256 tokens (the default, 16, holds 4,096 tokens: without it the engine
    sizes its cache from free memory, gigabytes on a CPU); ``max_batch_tokens`` tokens at most in one
    forward pass, which also chunks a long prompt's prefill. Requests name the model by ``str(model_dir)``.
    Introduced in chapter 7.
    """
    script = Path(sys.executable).with_name("transformers")
    argv = [str(script), "serve", str(model_dir), "--continuous-batching", "--device", "cpu", "--dtype", dtype,
            "--host", "{host}", "--port", "{port}", "--cb-num-blocks", str(num_blocks),
            "--cb-max-batch-tokens", str(max_batch_tokens), "--log-level", "info"]
    return Engine("transformers serve", argv, env=env, start_timeout_s=start_timeout_s)


def vllm_python(root: Path = REPO_ROOT) -> Path:
    """The interpreter of chapter 7's vLLM environment (``make .venv-vllm`` creates it)."""
    return root / ".venv-vllm" / "bin" / "python"


def vllm_unavailable(root: Path = REPO_ROOT) -> str | None:
    """Why vLLM cannot run here, in one sentence, or ``None`` when it can."""
    machine = os.uname().machine if hasattr(os, "uname") else "unknown"
    if not sys.platform.startswith("linux") or machine not in ("x86_64", "aarch64"):
        return (f"vLLM's CPU build runs on Linux x86-64 and aarch64; this is {sys.platform} {machine}, so "
                "only transformers serve is measured")
    if not vllm_python(root).exists() or not (root / ".venv-vllm" / ".installed").exists():
        return ("vLLM's environment .venv-vllm is absent (create it with `make .venv-vllm`, about 3.5 GB), so "
                "only transformers serve is measured")
    return None


def compute_threads(engine: str, threads: int) -> int:
    """The threads ``engine`` (a name as the chapters give it: ``"vLLM"``, ``"vLLM (budget 512)"``,
    ``"transformers serve"``) computes its passes on when started with ``threads`` (at least 1). vLLM's CPU
    build keeps one core of them for its scheduler process (``OMPProcessManager.reserve_cpu_num`` in
    ``vllm.utils.ompmultiprocessing``: one per local worker on x86, ARM and RISC-V) and binds its worker's
    OpenMP threads to the rest, never fewer than one; transformers serve computes on all of them.

    Introduced in chapter 7.
    """
    if threads < 1:
        raise ValueError(f"an engine computes on at least one thread, got {threads}")
    return max(threads - 1, 1) if engine.startswith("vLLM") else threads


def vllm_engine(model_dir: str | Path, *, served_name: str = "smollm2", max_num_batched_tokens: int | None = None,
                max_model_len: int = 2048, threads: int | None = None, kv_cache_gib: int = 1,
                prefix_caching: bool = False, extra_args: Sequence[str] = (), root: Path = REPO_ROOT,
                start_timeout_s: float = 1200.0) -> Engine:
    """vLLM's OpenAI-compatible server (CPU build, from ``.venv-vllm``) serving ``model_dir`` as ``served_name``.

    ``max_num_batched_tokens`` is the scheduler's token budget per step (chunked prefill splits a longer
    prompt); ``threads`` sets ``OMP_NUM_THREADS`` (vLLM uses one thread when it is unset; default: every
    core); ``kv_cache_gib`` is the CPU KV cache (``VLLM_CPU_KVCACHE_SPACE``). ``prefix_caching`` is off by
    default: a repeated prompt would otherwise skip its prefill, and a measurement that repeats a request
    would time the cache. The first start with a given budget compiles (about a minute on 2 cores) and caches
    the result under ``~/.cache/vllm``; later starts load it (about 40 s in all on 2 cores).
    Introduced in chapter 7.
    """
    argv = [str(vllm_python(root)), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
            "--served-model-name", served_name, "--dtype", "float32", "--max-model-len", str(max_model_len),
            "--host", "{host}", "--port", "{port}", *extra_args]
    if not prefix_caching:
        argv.append("--no-enable-prefix-caching")
    if max_num_batched_tokens is not None:
        argv += ["--max-num-batched-tokens", str(max_num_batched_tokens)]
    env = {"OMP_NUM_THREADS": str(threads or os.cpu_count() or 1), "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib),
           # vLLM 0.32.0's CPU build cannot load its own AOT-compiled artifacts ("'function' object has no
           # attribute 'finalize_loading'") and recompiles at every start; its older compile cache loads.
           "VLLM_USE_AOT_COMPILE": "0"}
    name = "vLLM" + ("" if max_num_batched_tokens is None else f" (budget {max_num_batched_tokens})")
    return Engine(name, argv, env=env, start_timeout_s=start_timeout_s)
