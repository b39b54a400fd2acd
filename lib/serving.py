"""Serving engines on loopback, and a streaming client that times every chunk (section 7).

Two halves, both plain standard library (no asyncio, no HTTP package):

* **Engines.** :class:`Engine` starts a server process on ``127.0.0.1`` at a free port, waits until its
  health endpoint answers, and always stops it: on ``stop()``, on leaving a ``with`` block (even when the
  block raised), at interpreter exit (``atexit``), when the object is collected (``weakref.finalize``), and
  when the process that started it dies (the child is launched under ``prctl(PR_SET_PDEATHSIG)`` on
  Linux). It runs in its own process group, and stopping kills the whole group (SIGTERM, then SIGKILL), so
  an engine's worker processes go with it. A start that fails raises :class:`EngineFailed` with the end of
  the engine's log. :func:`transformers_engine` and :func:`vllm_engine` build the two engines of
  chapter 7.

* **The client.** :func:`stream_chat` sends one OpenAI-style streaming chat request and records, on
  ``time.perf_counter``'s clock, when it was sent and when every server-sent event arrived (an event is
  stamped when its line has been read from the socket), with the event's content, finish reason and the
  server's ``usage`` report. The result is a :class:`Trace`. A request that fails (connection refused,
  reset, timed out, an HTTP error, an error event, a stream that ends before the reply finished) is a
  ``Trace`` with ``error`` set, never an exception and never dropped: :func:`failures` counts them.

**How time is attributed to tokens.** A content chunk may carry several tokens (a server that falls behind
writes several tokens at once; the client cannot see inside a chunk). The count of tokens is the server's
``usage.completion_tokens``. :meth:`Trace.token_times` gives the first content chunk one token (the first
token: TTFT ends there), spreads the remaining tokens as evenly as possible over the later chunks
(earlier chunks take the remainder), and stamps every token with the arrival of its chunk, because the
reader sees none of them earlier. The gaps inside a chunk are therefore 0 and the whole wait is charged
to the chunk's first token. When the server reports no usage, every content chunk counts as one token;
when it reports fewer tokens than content chunks, the chunks are kept (one token each) and
``Trace.usage_mismatch`` says so. Other benchmark tools attribute differently: see ``lib.conventions``.

Introduced in section 7 (over the wire).
"""

from __future__ import annotations

import atexit
import concurrent.futures
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lib import metrics

__all__ = [
    "Event", "Trace", "EngineFailed", "Unreachable", "Engine", "free_port", "transformers_engine",
    "vllm_engine", "vllm_python", "vllm_unavailable", "check_reachable", "served_model", "stream_chat",
    "closed_loop", "poisson_offsets", "open_loop", "failures", "scrape_metrics", "stall_experiment", "REPO_ROOT",
]

REPO_ROOT = Path(__file__).resolve().parents[1]
LOOPBACK = "127.0.0.1"


# ----------------------------------------------------------------------------------------------------------
# Engines
# ----------------------------------------------------------------------------------------------------------

class EngineFailed(RuntimeError):
    """An engine did not start (it exited, or was not healthy in time); the message ends with its log."""


class Unreachable(ConnectionError):
    """A server's address does not answer; the message is one line naming it."""


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
    ``startup_s`` is how long the last start took. Section 7 builds its engines with
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
        deadline = started + self.start_timeout_s
        while True:
            code = self._proc.poll()
            if code is not None:
                raise EngineFailed(f"{self.name} exited with code {code} before it was healthy. "
                                   f"End of its log ({self.log_path}):\n{self.log_tail()}")
            try:
                status, _ = _get(self.base_url + self.health_path, timeout_s=2.0)
                if status == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise EngineFailed(f"{self.name} was not healthy after {self.start_timeout_s:.0f} s "
                                   f"(GET {self.health_path} on port {self.port}). End of its log "
                                   f"({self.log_path}):\n{self.log_tail()}")
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
    Introduced in section 7.
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


def vllm_engine(model_dir: str | Path, *, served_name: str = "smollm2", max_num_batched_tokens: int | None = None,
                max_model_len: int = 2048, threads: int | None = None, kv_cache_gib: int = 1,
                prefix_caching: bool = False, extra_args: Sequence[str] = (), root: Path = REPO_ROOT,
                start_timeout_s: float = 1200.0) -> Engine:
    """vLLM's OpenAI-compatible server (CPU build, from ``.venv-vllm``) serving ``model_dir`` as ``served_name``.

    ``max_num_batched_tokens`` is the scheduler's token budget per step (chunked prefill splits a longer
    prompt); ``threads`` sets ``OMP_NUM_THREADS`` (vLLM uses one thread when it is unset; default: every
    core); ``kv_cache_gib`` is the CPU KV cache (``VLLM_CPU_KVCACHE_SPACE``). ``prefix_caching`` is off by
    default: a repeated prompt would otherwise skip its prefill, and a measurement that repeats a request
    would time the cache. The first start compiles for minutes and caches under ``~/.cache/vllm``.
    Introduced in section 7.
    """
    argv = [str(vllm_python(root)), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
            "--served-model-name", served_name, "--dtype", "float32", "--max-model-len", str(max_model_len),
            "--host", "{host}", "--port", "{port}", *extra_args]
    if not prefix_caching:
        argv.append("--no-enable-prefix-caching")
    if max_num_batched_tokens is not None:
        argv += ["--max-num-batched-tokens", str(max_num_batched_tokens)]
    env = {"OMP_NUM_THREADS": str(threads or os.cpu_count() or 1), "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib)}
    name = "vLLM" + ("" if max_num_batched_tokens is None else f" (budget {max_num_batched_tokens})")
    return Engine(name, argv, env=env, start_timeout_s=start_timeout_s)


# ----------------------------------------------------------------------------------------------------------
# HTTP helpers
# ----------------------------------------------------------------------------------------------------------

def _split(url: str) -> tuple[str, int, str]:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"{url!r}: give an http:// address such as http://127.0.0.1:8000")
    return parts.hostname, parts.port or 80, parts.path.rstrip("/")


def _get(url: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
    host, port, path = _split(url)
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request("GET", path or "/")
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def check_reachable(base_url: str, timeout_s: float = 5.0) -> None:
    """Raise :class:`Unreachable` (one line naming ``base_url``) unless ``GET /v1/models`` answers 200."""
    try:
        status, _ = _get(base_url.rstrip("/") + "/v1/models", timeout_s)
    except ValueError as error:
        raise Unreachable(str(error)) from None
    except OSError as error:
        raise Unreachable(f"cannot reach {base_url}: {_describe(error)}") from None
    if status != 200:
        raise Unreachable(f"{base_url} answered HTTP {status} to GET /v1/models; is it an OpenAI-compatible server?")


def served_model(base_url: str) -> str:
    """The id of the first model ``base_url`` serves (``GET /v1/models``)."""
    check_reachable(base_url)
    _, body = _get(base_url.rstrip("/") + "/v1/models")
    return json.loads(body)["data"][0]["id"]


def scrape_metrics(base_url: str) -> dict[str, float]:
    """The server's Prometheus metrics (``GET /metrics``) as ``{name: value}``, summed over label sets
    (so a histogram's ``_sum`` and ``_count`` are totals); ``{}`` where the server has none."""
    try:
        status, body = _get(base_url.rstrip("/") + "/metrics")
    except OSError:
        return {}
    if status != 200:
        return {}
    values: dict[str, float] = {}
    for line in body.decode(errors="replace").splitlines():
        if not line or line.startswith("#"):
            continue
        name_part, _, value = line.rpartition(" ")
        name = name_part.split("{", 1)[0].strip()
        try:
            values[name] = values.get(name, 0.0) + float(value)
        except ValueError:
            continue
    return values


# ----------------------------------------------------------------------------------------------------------
# The streaming client
# ----------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Event:
    """One server-sent event: when its line was read (seconds, ``perf_counter``), whether it carried a
    ``choices`` list, its delta's content (``None`` when it had no content field), its finish reason and
    its ``usage`` report."""

    time: float
    choices: bool
    content: str | None
    finish_reason: str | None = None
    usage: dict | None = None


@dataclass(frozen=True)
class Trace:
    """One request as the client saw it. Times are seconds on ``time.perf_counter``'s clock.

    ``sent``: just before the request was written; ``scheduled``: when an open-loop load meant to send it
    (``None`` for closed loops); ``end``: when the stream closed (or failed); ``events``: every event;
    ``prompt_tokens``/``output_tokens``: the server's usage report (``None`` if it sent none); ``error``:
    ``None`` for a good request, else ``"refused: ..."``, ``"reset: ..."``, ``"timeout: ..."``,
    ``"http 500: ..."``, ``"error event: ..."`` or ``"incomplete: ..."``.

    Introduced in section 7.
    """

    request_id: int
    sent: float
    end: float
    events: tuple[Event, ...] = ()
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    error: str | None = None
    scheduled: float | None = None
    label: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def error_kind(self) -> str | None:
        return None if self.error is None else self.error.split(":", 1)[0]

    @property
    def chunk_times(self) -> tuple[float, ...]:
        """Arrival of every content chunk (an event whose content is a non-empty string)."""
        return tuple(e.time for e in self.events if e.content)

    @property
    def text(self) -> str:
        return "".join(e.content or "" for e in self.events)

    @property
    def n_tokens(self) -> int:
        """Tokens of the reply: the server's count, or the content chunks where it sent none."""
        chunks = len(self.chunk_times)
        return chunks if self.output_tokens is None else max(self.output_tokens, chunks)

    @property
    def usage_mismatch(self) -> bool:
        return self.output_tokens is not None and self.output_tokens < len(self.chunk_times)

    def token_times(self) -> tuple[float, ...]:
        """One time per token, by the attribution rule of this module's docstring."""
        chunks = self.chunk_times
        n, k = self.n_tokens, len(chunks)
        if k == 0:
            return ()
        extra = n - k
        per_chunk = [1] * k
        if k > 1:
            base, rest = divmod(extra, k - 1)
            for i in range(1, k):
                per_chunk[i] += base + (1 if i - 1 < rest else 0)
        else:
            per_chunk[0] += extra
        return tuple(t for t, c in zip(chunks, per_chunk) for _ in range(c))

    def metrics(self) -> metrics.RequestMetrics:
        """The book's metrics of this request (``lib.metrics``), from :meth:`token_times`. Raises
        ``ValueError`` for a failed request or one without content."""
        if not self.ok:
            raise ValueError(f"request {self.request_id} failed ({self.error}); it has no latency metrics")
        times = self.token_times()
        if not times:
            raise ValueError(f"request {self.request_id} received no content")
        return metrics.request_metrics(self.sent, times)


def _describe(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return text.splitlines()[0][:200]


def _kind(error: BaseException) -> str:
    if isinstance(error, ConnectionRefusedError):
        return "refused"
    if isinstance(error, (socket.timeout, TimeoutError)):
        return "timeout"
    if isinstance(error, (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected,
                          http.client.IncompleteRead, ConnectionAbortedError)):
        return "reset"
    if isinstance(error, (http.client.HTTPException, ValueError)):
        return "incomplete"
    return "reset" if isinstance(error, OSError) else "incomplete"


def stream_chat(base_url: str, model: str, messages: list[dict], max_tokens: int, *, request_id: int = 0,
                timeout_s: float = 300.0, extra: dict | None = None, scheduled: float | None = None,
                label: str = "", on_event: Callable[[Event], None] | None = None) -> Trace:
    """Send one streaming chat completion (greedy: temperature 0, ``stream_options.include_usage``) to
    ``base_url`` and return its :class:`Trace`; never raises for a failed request.

    ``timeout_s`` bounds the whole request and every read. ``extra`` is merged into the request body
    (e.g. ``{"ignore_eos": True}`` for vLLM). ``on_event(event)`` is called in the reading thread as each
    event arrives (:func:`stall_experiment` uses it to send a second request mid-stream). Introduced in section 7.
    """
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, **(extra or {})}
    payload = json.dumps(body).encode()
    events: list[Event] = []
    usage: dict | None = None
    finished = False
    host, port, prefix = _split(base_url)
    sent = time.perf_counter()
    deadline = sent + timeout_s
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)

    def result(error: str | None) -> Trace:
        return Trace(request_id, sent, time.perf_counter(), tuple(events),
                     None if usage is None else usage.get("prompt_tokens"),
                     None if usage is None else usage.get("completion_tokens"), error, scheduled, label)

    try:
        conn.request("POST", prefix + "/v1/chat/completions", body=payload,
                     headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
        response = conn.getresponse()
        if response.status != 200:
            text = response.read(400).decode(errors="replace").replace("\n", " ")
            return result(f"http {response.status}: {text}")
        while True:
            if time.perf_counter() > deadline:
                return result(f"timeout: no end of stream after {timeout_s:g} s")
            line = response.readline()
            arrived = time.perf_counter()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                finished = True
                break
            event = json.loads(data)
            if "error" in event:
                return result(f"error event: {json.dumps(event['error'])[:200]}")
            choices = event.get("choices") or []
            delta = choices[0].get("delta", {}) if choices else {}
            reason = choices[0].get("finish_reason") if choices else None
            if event.get("usage"):
                usage = event["usage"]
            events.append(Event(arrived, bool(choices), delta.get("content"), reason, event.get("usage")))
            if on_event is not None:
                on_event(events[-1])
            finished = finished or reason is not None
        if not finished:
            return result("incomplete: the stream ended before the reply finished")
        return result(None)
    except Exception as error:  # every failure becomes a counted, failed trace
        return result(f"{_kind(error)}: {_describe(error)}")
    finally:
        conn.close()


def failures(traces: Sequence[Trace]) -> dict[str, int]:
    """How many requests failed, by kind (``refused``, ``reset``, ``timeout``, ``http 500``, ...)."""
    counts: dict[str, int] = {}
    for t in traces:
        if not t.ok:
            counts[t.error_kind] = counts.get(t.error_kind, 0) + 1
    return counts


# ----------------------------------------------------------------------------------------------------------
# Loads
# ----------------------------------------------------------------------------------------------------------

def closed_loop(send: Callable[[int], Trace], n_requests: int, concurrency: int) -> list[Trace]:
    """``n_requests`` requests, ``concurrency`` at a time: each of ``concurrency`` users sends its next request
    as soon as its last one ends. ``send(i)`` sends request ``i`` and returns its trace. Returns the traces in
    request order (failed ones included). Introduced in section 7."""
    if n_requests < 1 or concurrency < 1:
        raise ValueError(f"need n_requests >= 1 and concurrency >= 1, got {n_requests} and {concurrency}")
    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
        return list(pool.map(send, range(n_requests)))


def poisson_offsets(rate_per_s: float, n_requests: int, seed: int = 0) -> np.ndarray:
    """Send times (seconds after the start) of ``n_requests`` arrivals of a Poisson process of ``rate_per_s``
    requests a second: exponential gaps of mean ``1 / rate_per_s`` from a seeded generator, the first at 0."""
    if not rate_per_s > 0 or n_requests < 1:
        raise ValueError(f"need rate_per_s > 0 and n_requests >= 1, got {rate_per_s} and {n_requests}")
    gaps = np.random.default_rng(seed).exponential(1.0 / rate_per_s, n_requests)
    gaps[0] = 0.0
    return np.cumsum(gaps)


def open_loop(send: Callable[[int, float], Trace], offsets: Sequence[float]) -> list[Trace]:
    """Send request ``i`` at ``offsets[i]`` seconds after now, whether or not earlier ones have finished (an
    open loop: arrivals do not wait for the server). ``send(i, scheduled)`` sends it. Returns the traces in
    request order. Introduced in section 7."""
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(offsets))) as pool:
        futures = []
        for i, offset in enumerate(offsets):
            delay = start + float(offset) - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            futures.append(pool.submit(send, i, start + float(offset)))
        return [f.result() for f in futures]


def stall_experiment(base_url: str, model: str, a_messages: list[dict], a_tokens: int, b_messages: list[dict],
                 arrive_after: int, *, extra: dict | None = None, timeout_s: float = 600.0) -> tuple[Trace, Trace]:
    """Chapter 5's experiment through a server: stream A decodes ``a_tokens`` tokens; as soon as A's
    ``arrive_after``-th content chunk has arrived, request B (``b_messages``, one output token) is sent on a
    second connection. Returns ``(a, b)``; B's ``sent`` marks its arrival on A's clock, so A's gaps after it
    show the stall. If A ends before it reaches ``arrive_after`` chunks, B is sent when A ends.
    Introduced in section 7."""
    if arrive_after < 1 or arrive_after >= a_tokens:
        raise ValueError(f"arrive_after must be from 1 to a_tokens - 1 = {a_tokens - 1}, got {arrive_after}")
    reached = threading.Event()
    seen = [0]

    def count(event: Event) -> None:
        if event.content:
            seen[0] += 1
            if seen[0] >= arrive_after:
                reached.set()

    box: list[Trace] = []

    def run_a() -> None:
        box.append(stream_chat(base_url, model, a_messages, a_tokens, request_id=0, timeout_s=timeout_s,
                               extra=extra, label="A", on_event=count))
        reached.set()

    thread = threading.Thread(target=run_a, daemon=True)
    thread.start()
    reached.wait(timeout_s)
    b = stream_chat(base_url, model, b_messages, 1, request_id=1, timeout_s=timeout_s, extra=extra, label="B")
    thread.join(timeout_s)
    if not box:
        return Trace(0, b.sent, time.perf_counter(), error="timeout: stream A did not finish", label="A"), b
    return box[0], b
