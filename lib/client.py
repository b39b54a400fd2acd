"""A streaming client that times every chunk of an OpenAI-compatible server's reply, and the loads that
send many requests (chapter 7). Plain standard library: no asyncio, no HTTP package.

:func:`stream_chat` sends one OpenAI-style streaming chat request and records, on ``time.perf_counter``'s
clock, when it was sent and when every server-sent event arrived (an event is stamped when its line has been
read from the socket), with the event's content, finish reason and the server's ``usage`` report. The result
is a :class:`Trace`. A request that fails (connection refused, reset, timed out, an HTTP error, an error
event, a stream that ends before the reply finished) is a ``Trace`` with ``error`` set, never an exception
and never dropped: :func:`failures` counts them. :func:`closed_loop` and :func:`open_loop` send many requests
and return every trace, failed ones included, in request order. The engines it talks to are in
``lib.engines``.

**Every wait is bounded.** Connecting (:data:`CONNECT_TIMEOUT_S`), the first byte of the reply after the
request is sent (:data:`FIRST_BYTE_TIMEOUT_S`), every gap between two reads of the stream
(:data:`STALL_TIMEOUT_S`) and the whole request (:data:`REQUEST_TIMEOUT_S`, enforced by a watchdog that shuts
the socket, so even a server that trickles a byte at a time is cut off) each have a bound, and a request
that passes one is a failed trace whose error says which (``"timeout: ..."``). A server whose ``/v1/models``
answers but whose chat requests never do is therefore a failed trace after about a minute, and
:func:`require_ok` turns a failed request that must succeed (a warm-up) into one line naming the server and
what it did (:class:`RequestFailed`).

**Which chunks are tokens.** Every streamed choice after the role chunk is a token, whether its content is
text or empty: vLLM sends a chunk with empty content for a special token, or for a token that ends inside a
UTF-8 character, as ``vllm bench serve`` counts it. Two choices are not tokens: the role chunk (a ``role`` and
no text), and a choice that carries nothing but its finish reason (``transformers serve``'s last chunk, with the
usage). :attr:`Trace.chunk_times` are the token chunks' arrivals.

**How time is attributed to tokens.** A chunk may carry several tokens (a server that falls behind writes
several tokens at once; the client cannot see inside a chunk). The count of tokens is the server's
``usage.completion_tokens`` when it is believable. :meth:`Trace.token_times` gives the first token chunk one
token (the first token: TTFT ends there); only when the usage counts more tokens than there were chunks are the
remaining ones spread as evenly as possible over the later chunks (earlier chunks take the remainder), every
token stamped with the arrival of its chunk, because the reader sees none of them earlier. The gaps inside a
chunk are therefore 0 and the whole wait is charged to the chunk's first token. Without usage every token
chunk is one token. **A usage report that contradicts the stream** (fewer tokens than token chunks, more than
the request allowed, a count that is not a whole number of at least 0) is not used: each chunk is one token,
and :attr:`Trace.usage_problem` says what was wrong, for a chapter to check before it tables the counts.
Other benchmark tools attribute differently: see ``lib.conventions``.

**Connections are kept alive and reused** (HTTP/1.1), one per request in flight, as a benchmark client does: a
request takes an idle connection to its server, or opens one, and gives it back when its reply was read to the
end and the server keeps it open (:func:`close_idle` closes them). TTFT's clock starts when the request is
written (:attr:`Trace.sent`), after the connection is open: the TCP connect, where there is one, is
:attr:`Trace.connect_s`, reported apart. A server that closes each connection (``Connection: close``, HTTP/1.0)
is read to its end the same way.

Introduced in chapter 7 (over the wire).
"""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import re
import select
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from lib import metrics

__all__ = ["Event", "Trace", "Unreachable", "RequestFailed", "WrongModel", "http_get", "check_reachable",
           "served_model", "served_models", "same_model", "require_model", "scrape_metrics", "scrape_counted", "stream_chat",
           "close_idle", "require_ok", "failures", "TooSlow", "ServerBudget", "closed_loop", "poisson_offsets", "open_loop",
           "CONNECT_TIMEOUT_S", "FIRST_BYTE_TIMEOUT_S", "STALL_TIMEOUT_S", "REQUEST_TIMEOUT_S"]

#: Seconds to open a TCP connection: loopback or a LAN answers in milliseconds.
CONNECT_TIMEOUT_S = 10.0
#: Seconds from sending a request to the first byte of the reply (its status line): an engine sends its
#: headers before it has run the prompt, so this bounds queueing in the HTTP server, not the prefill.
FIRST_BYTE_TIMEOUT_S = 60.0
#: Seconds between two reads of a streamed reply: the longest a client waits for the next event (the first
#: one comes after the prefill, which on a 2-core CPU takes seconds for the book's longest prompt).
STALL_TIMEOUT_S = 60.0
#: Seconds for a whole request, however its events trickle in.
REQUEST_TIMEOUT_S = 300.0


class Unreachable(ConnectionError):
    """A server's address does not answer; the message is one line naming it."""


class RequestFailed(RuntimeError):
    """A request that had to succeed (a warm-up) failed; the message is one line naming the server and what
    it did."""


class TooSlow(RuntimeError):
    """A server too slow for a chapter's budget (:class:`ServerBudget`); the message is one line naming it,
    how slow it was, and which parameters would make the chapter fit."""


class WrongModel(ValueError):
    """A server serves another model than the one a chapter compares with; the message is one line naming the
    server, what it serves and what was expected."""


class _Watchdog:
    """Shut a connection's socket down once ``seconds`` have passed, so that a read blocked on it returns:
    a socket's own timeout bounds one read, not a stream that trickles. ``sock``: the socket to shut (once
    the connection is open; a reply that closes its connection takes the socket off the connection object)."""

    def __init__(self, conn: http.client.HTTPConnection | None, seconds: float):
        self.conn, self.fired, self.sock = conn, False, None
        self.timer = threading.Timer(max(seconds, 0.0), self._fire)
        self.timer.daemon = True

    def _fire(self) -> None:
        self.fired = True
        sock = self.sock or (self.conn.sock if self.conn is not None else None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> "_Watchdog":
        self.timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self.timer.cancel()


# ----------------------------------------------------------------------------------------------------------
# HTTP helpers
# ----------------------------------------------------------------------------------------------------------

def _split(url: str) -> tuple[str, int, str]:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"{url!r}: give an http:// address such as http://127.0.0.1:8000")
    return parts.hostname, parts.port or 80, parts.path.rstrip("/")


def http_get(url: str, timeout_s: float = 5.0, max_bytes: int = 4 * 2**20) -> tuple[int, bytes]:
    """``GET url``: (HTTP status, body, at most ``max_bytes``). ``timeout_s`` bounds the whole exchange.
    Raises ``OSError`` when nothing answers in time (``TimeoutError``), ``http.client.HTTPException`` for a
    reply that is not HTTP, ``ValueError`` for a URL that is not ``http://``."""
    host, port, path = _split(url)
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        with _Watchdog(conn, timeout_s) as watchdog:
            try:
                conn.request("GET", path or "/")
                response = conn.getresponse()
                body = response.read(max_bytes)
            except (OSError, http.client.HTTPException) as error:
                if watchdog.fired or isinstance(error, TimeoutError):  # the socket's own timeout can fire first
                    raise TimeoutError(f"no whole reply within {timeout_s:g} s") from None
                raise
            if watchdog.fired:
                raise TimeoutError(f"no whole reply within {timeout_s:g} s")
            return response.status, body
    finally:
        conn.close()


def check_reachable(base_url: str, timeout_s: float = 5.0) -> None:
    """Raise :class:`Unreachable` (one line naming ``base_url``) unless ``GET /v1/models`` answers 200."""
    try:
        status, _ = http_get(base_url.rstrip("/") + "/v1/models", timeout_s)
    except ValueError as error:
        raise Unreachable(str(error)) from None
    except (OSError, http.client.HTTPException) as error:
        raise Unreachable(f"cannot reach {base_url}: {_describe(error)}") from None
    if status != 200:
        hint = (f" base_url is the server's root, without /v1 (the book adds it): try "
                f"{base_url.rstrip('/').removesuffix('/v1')}" if base_url.rstrip("/").endswith("/v1") else
                " is it an OpenAI-compatible server?")
        raise Unreachable(f"{base_url} answered HTTP {status} to GET {base_url.rstrip('/')}/v1/models;{hint}")


def served_models(base_url: str, timeout_s: float = 5.0) -> tuple[str, ...]:
    """The ids of every model ``base_url`` serves, in the order ``GET /v1/models`` lists them (an
    OpenAI-compatible server's ``{"data": [{"id": ...}, ...]}``). ``timeout_s`` (seconds) bounds each of the
    two requests. Raises :class:`Unreachable`, one line, when the server does not answer, or answers with
    no list of models, or with ids that are not names (not text, empty, over 500 characters, more than 1,000)."""
    check_reachable(base_url, timeout_s)
    try:
        _, body = http_get(base_url.rstrip("/") + "/v1/models", timeout_s)
        entries = json.loads(body)["data"]
        ids = tuple(entry["id"] for entry in entries)
    except (OSError, http.client.HTTPException) as error:
        raise Unreachable(f"cannot reach {base_url}: {_describe(error)}") from None
    except (ValueError, KeyError, IndexError, TypeError):
        raise Unreachable(f"{base_url} answered GET /v1/models without a model list ({{\"data\": [{{\"id\": ...}}]}}); "
                          f"is it an OpenAI-compatible server?") from None
    if not ids or len(ids) > 1000 or not all(isinstance(i, str) and 0 < len(i) <= 500 for i in ids):
        raise Unreachable(f"{base_url} answered GET /v1/models with {len(ids)} model ids that are not all names "
                          f"(text of 1 to 500 characters); is it an OpenAI-compatible server?")
    return ids


def served_model(base_url: str, timeout_s: float = 5.0) -> str:
    """The id of the first model ``base_url`` serves (:func:`served_models`); :class:`Unreachable`, one line,
    when it does not answer or its answer names no model."""
    return served_models(base_url, timeout_s)[0]


def _model_key(name: str) -> str:
    """A model's name as :func:`same_model` compares it: its last path part, lower case, without a weights
    file's extension (``/models/SmolLM2-135M-Instruct`` and ``HuggingFaceTB/SmolLM2-135M-Instruct`` match)."""
    last = re.split(r"[/\\]", str(name).strip().rstrip("/\\"))[-1].lower()
    return re.sub(r"\.(gguf|safetensors|bin|pt)$", "", last)


def same_model(served: str, names: Iterable[str]) -> bool:
    """Whether the id a server gives (``served``) names the same model as one of ``names``: the same last
    path part, case aside, a weights file's extension aside. A quantized file (``...-q4_1.gguf``) is not the
    same model as the one it was made from."""
    return _model_key(served) in {_model_key(n) for n in names}


def require_model(base_url: str, names: Iterable[str], timeout_s: float = 5.0) -> str:
    """The id under which ``base_url`` serves one of the models ``names`` (:func:`same_model`), for requests
    to it; raises :class:`WrongModel`, one line naming what it serves instead, so that a chapter compares a
    server only with the model it measured in-process. :class:`Unreachable` as :func:`served_models`."""
    names = [str(n) for n in names]
    served = served_models(base_url, timeout_s)
    for model in served:
        if same_model(model, names):
            return model
    shown = ", ".join(repr(m[:80]) for m in served[:5]) + (" ..." if len(served) > 5 else "")
    raise WrongModel(f"{base_url} serves {shown}, not {' or '.join(map(repr, names))}: its numbers cannot be set "
                     f"beside the in-process model's; point base_url at a server of that model")


def scrape_metrics(base_url: str) -> dict[str, float]:
    """The server's Prometheus metrics (``GET /metrics``) as ``{name: value}``, summed over label sets
    (so a histogram's ``_sum`` and ``_count`` are totals); ``{}`` where the server has none."""
    try:
        status, body = http_get(base_url.rstrip("/") + "/metrics")
    except (OSError, http.client.HTTPException):
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


def scrape_counted(base_url: str, metric: str, *, count: float | None = None, timeout_s: float = 5.0,
                   poll_s: float = 0.2) -> dict[str, float]:
    """:func:`scrape_metrics` once the server's histogram ``metric`` has counted what it will: its ``_count`` equal
    to ``count`` where given, else the same in two scrapes ``poll_s`` apart. A server may record a request's
    observations after the client has its tokens (vLLM's front end records them in the loop that also hands the
    tokens out), so a scrape right after the last token can miss the last request, and a scrape right after a
    warm-up can miss the warm-up, which then lands in the next difference (chapter 7's build 13: a server mean
    TTFT of 871 ms against the client's 183, the warm-up's in place of a timed request's). Waits at most ``timeout_s`` seconds;
    returns the last scrape either way (the caller compares the counts), at once where the histogram is absent."""
    key = f"{metric}_count"
    deadline = time.monotonic() + timeout_s
    last = scrape_metrics(base_url)
    if key not in last:  # a server without this histogram (or without /metrics) has nothing to wait for
        return last
    while time.monotonic() < deadline:
        if count is not None and last.get(key) == count:
            return last
        time.sleep(poll_s)
        now = scrape_metrics(base_url)
        if count is None and now.get(key) == last.get(key):
            return now
        last = now
    return last


# ----------------------------------------------------------------------------------------------------------
# The streaming client
# ----------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Event:
    """One server-sent event: when its line was read (seconds, ``perf_counter``), whether it carried a
    ``choices`` list, its delta's content (``None`` when it had no content field), its finish reason, its
    ``usage`` report, its delta's ``role`` and whether the delta carried anything else (a tool call, reasoning
    text)."""

    time: float
    choices: bool
    content: str | None
    finish_reason: str | None = None
    usage: dict | None = None
    role: str | None = None
    other: bool = False

    @property
    def is_role_chunk(self) -> bool:
        """A choice that announces the role and carries no text: not a token."""
        return self.choices and self.role is not None and not self.content and not self.other

    @property
    def is_bare_finish(self) -> bool:
        """A choice that carries nothing but its finish reason (no content field, role or other field): the end
        of the reply, not a token."""
        return (self.choices and self.finish_reason is not None and self.content is None and self.role is None
                and not self.other)


def _count(value) -> int | None:
    """A usage count, when it is a whole number of at least 0 (``True`` and ``5.0`` are not)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


@dataclass(frozen=True)
class Trace:
    """One request as the client saw it. Times are seconds on ``time.perf_counter``'s clock.

    ``sent``: just before the request was written, after the connection was open (TTFT's clock starts here);
    ``scheduled``: when an open-loop load meant to send it (``None`` for closed loops); ``end``: when the
    stream closed (or failed); ``events``: every event; ``prompt_tokens``/``output_tokens``: the server's
    usage report (``None`` if it sent none); ``error``: ``None`` for a good request, else ``"refused: ..."``,
    ``"reset: ..."``, ``"timeout: ..."``, ``"http 500: ..."``, ``"error event: ..."`` or ``"incomplete:
    ..."``; ``connect_s``: seconds the TCP connect took before ``sent`` (``None``: a kept-alive connection was
    reused, or none was opened); ``max_tokens``: the most tokens the request allowed; ``usage_note``: what
    was wrong with the usage report as it arrived (see :attr:`usage_problem`).

    Introduced in chapter 7.
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
    connect_s: float | None = None
    max_tokens: int | None = None
    usage_note: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def error_kind(self) -> str | None:
        return None if self.error is None else self.error.split(":", 1)[0]

    @property
    def token_events(self) -> tuple[Event, ...]:
        """The events that are tokens: every choice but the role chunk and a bare finish (module docstring)."""
        return tuple(e for e in self.events if e.choices and not e.is_role_chunk and not e.is_bare_finish)

    @property
    def chunk_times(self) -> tuple[float, ...]:
        """Arrival of every token chunk (:attr:`token_events`), empty content included."""
        return tuple(e.time for e in self.token_events)

    @property
    def content_times(self) -> tuple[float, ...]:
        """Arrival of every chunk whose content is non-empty text (what tools that drop empty responses time)."""
        return tuple(e.time for e in self.events if e.content)

    @property
    def text(self) -> str:
        return "".join(e.content or "" for e in self.events)

    @property
    def usage_problem(self) -> str | None:
        """What contradicts the stream in the server's usage report, in one line, or ``None``: a count that is
        not a whole number of at least 0, fewer completion tokens than token chunks were streamed, or more than
        the request allowed. A chapter checks it before it puts the server's counts in a table."""
        if self.usage_note:
            return self.usage_note
        chunks = len(self.chunk_times)
        if self.output_tokens is not None and self.output_tokens < chunks:
            return f"the server counted {self.output_tokens} completion tokens and streamed {chunks} token chunks"
        if self.output_tokens is not None and self.max_tokens is not None and self.output_tokens > self.max_tokens:
            return (f"the server counted {self.output_tokens} completion tokens for a request of at most "
                    f"{self.max_tokens}")
        return None

    @property
    def usage_mismatch(self) -> bool:
        """Whether :attr:`usage_problem` found one."""
        return self.usage_problem is not None

    @property
    def n_tokens(self) -> int:
        """Tokens of the reply: the server's count when it is believable and exceeds the token chunks, else
        the token chunks."""
        chunks = len(self.chunk_times)
        if self.output_tokens is None or self.usage_mismatch:
            return chunks
        return max(self.output_tokens, chunks)

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
        ``ValueError`` for a failed request or one without tokens."""
        if not self.ok:
            raise ValueError(f"request {self.request_id} failed ({self.error}); it has no latency metrics")
        times = self.token_times()
        if not times:
            raise ValueError(f"request {self.request_id} received no tokens")
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


class _Pool:
    """Idle kept-alive connections by (host, port), shared by every thread: a request takes one, or opens a
    new one, and gives it back when its reply was read to the end and the server keeps it open."""

    def __init__(self, per_server: int = 256):
        self.idle: dict[tuple[str, int], list[http.client.HTTPConnection]] = {}
        self.lock, self.per_server = threading.Lock(), per_server

    def take(self, host: str, port: int) -> http.client.HTTPConnection | None:
        while True:
            with self.lock:
                idle = self.idle.get((host, port))
                conn = idle.pop() if idle else None
            if conn is None:
                return None
            if conn.sock is not None and not select.select([conn.sock], [], [], 0)[0]:
                return conn  # nothing to read on an idle connection: the server has not closed it
            conn.close()  # closed by the server (or it sent something unasked): never reused

    def give(self, host: str, port: int, conn: http.client.HTTPConnection) -> None:
        with self.lock:
            idle = self.idle.setdefault((host, port), [])
            if len(idle) < self.per_server:
                idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self.lock:
            every = [c for idle in self.idle.values() for c in idle]
            self.idle.clear()
        for conn in every:
            conn.close()


_POOL = _Pool()


def close_idle() -> None:
    """Close every kept-alive connection no request is using (the next request to a server opens a new one)."""
    _POOL.close()


#: What a reused connection that the server closed while it was idle raises before any byte of the reply: the
#: request is sent again once, on a new connection.
_STALE = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


#: The most tokens a chat template adds to a prompt's own (its role markers and system text): a usage report of more
#: prompt tokens than the request's bytes and these is not a count of this request.
PROMPT_TEMPLATE_TOKENS = 512


def stream_chat(base_url: str, model: str, messages: list[dict], max_tokens: int, *, request_id: int = 0,
                timeout_s: float = REQUEST_TIMEOUT_S, extra: dict | None = None, scheduled: float | None = None,
                label: str = "", on_event: Callable[[Event], None] | None = None,
                connect_timeout_s: float = CONNECT_TIMEOUT_S, first_byte_timeout_s: float = FIRST_BYTE_TIMEOUT_S,
                stall_timeout_s: float = STALL_TIMEOUT_S) -> Trace:
    """Send one streaming chat completion (greedy: temperature 0, ``stream_options.include_usage``) to
    ``base_url`` and return its :class:`Trace`; never raises for a failed request.

    The request goes on a kept-alive connection when one is idle, else on a new one, whose connect time is
    the trace's ``connect_s`` (seconds), not part of TTFT (this module's docstring). Every wait is bounded:
    ``connect_timeout_s`` the connection, ``first_byte_timeout_s`` the reply's first byte, ``stall_timeout_s``
    each gap between reads of the stream, ``timeout_s`` the whole request (all in seconds). ``extra`` is
    merged into the request body (e.g. ``{"ignore_eos": True}`` for vLLM). ``on_event(event)`` is called in
    the reading thread as each event arrives (``lib.stall.stall_experiment`` uses it to send a second
    request mid-stream). Introduced in chapter 7.
    """
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, **(extra or {})}
    payload = json.dumps(body).encode()
    events: list[Event] = []
    usage = None  # the last usage report, as the server sent it
    finished = False
    host, port, prefix = _split(base_url)
    started = time.perf_counter()
    deadline = started + timeout_s
    sent = started
    connect_s = None
    ended = None
    phase = "connect"

    def result(error: str | None) -> Trace:
        prompt, output, note = None, None, None
        if usage is not None and not isinstance(usage, dict):
            note = f"the server's usage is {str(usage)[:60]!r}, not an object of counts"
        elif usage is not None:
            prompt, output = _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))
            counted = (("completion_tokens", output), ("prompt_tokens", prompt))
            bad = [f"{key} {usage.get(key)!r}" for key, value in counted if usage.get(key) is not None and value is None]
            if bad:
                note = f"the server's usage counts {', '.join(bad)}: not a whole number of at least 0"
            elif prompt is not None and prompt > len(payload) + PROMPT_TEMPLATE_TOKENS:
                note = (f"the server counted {prompt:,} prompt tokens for a request of {len(payload):,} bytes: a token "
                        "is at least a byte of text, beside the chat template's few")
        return Trace(request_id, sent, ended or time.perf_counter(), tuple(events), prompt, output, error, scheduled,
                     label, connect_s, max_tokens, note)

    def timed_out() -> str:
        if watchdog.fired or time.perf_counter() >= deadline:
            return f"timeout: no end of stream after {timeout_s:g} s ({len(events)} events)"
        if phase == "connect":
            return f"timeout: connecting to {host}:{port} took over {connect_timeout_s:g} s"
        if phase == "first byte":
            return (f"timeout: the server accepted the connection but sent no reply within "
                    f"{first_byte_timeout_s:g} s of the request")
        return f"timeout: the stream stalled: nothing for {stall_timeout_s:g} s after {len(events)} events"

    conn = _POOL.take(host, port)
    watchdog = _Watchdog(conn, timeout_s)
    response = None
    keep = False
    try:
        with watchdog:
            for attempt in (1, 2):
                reused = conn is not None
                if conn is None:
                    phase = "connect"
                    conn = http.client.HTTPConnection(host, port, timeout=min(connect_timeout_s, timeout_s))
                    watchdog.conn = conn
                    opening = time.perf_counter()
                    conn.connect()
                    connect_s = time.perf_counter() - opening
                sock = watchdog.sock = conn.sock
                phase = "first byte"
                sock.settimeout(min(first_byte_timeout_s, timeout_s))
                sent = time.perf_counter()
                try:
                    conn.request("POST", prefix + "/v1/chat/completions", body=payload,
                                 headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
                    response = conn.getresponse()
                    break
                except _STALE:
                    if not reused or attempt == 2 or watchdog.fired:
                        raise
                    conn.close()  # the server closed it while it was idle: once more, on a new connection
                    conn = None
            phase = "stream"
            sock.settimeout(min(stall_timeout_s, timeout_s))
            if response.status != 200:
                text = response.read(400).decode(errors="replace").replace("\n", " ")
                return result(f"http {response.status}: {text}")
            while True:
                if time.perf_counter() > deadline:
                    return result(timed_out())
                line = response.readline(1 << 20)
                arrived = time.perf_counter()
                if watchdog.fired:
                    return result(timed_out())
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
                if not isinstance(event, dict):
                    return result(f"incomplete: an event that is not a JSON object: {data[:100]!r}")
                if "error" in event:
                    return result(f"error event: {json.dumps(event['error'])[:200]}")
                choices = event.get("choices") or []
                first = choices[0] if choices and isinstance(choices[0], dict) else {}
                delta = first.get("delta") if isinstance(first.get("delta"), dict) else {}
                content = delta.get("content")
                if event.get("usage"):
                    usage = event["usage"]
                role = delta.get("role")
                other = any(v not in (None, "", []) for k, v in delta.items() if k not in ("content", "role"))
                events.append(Event(arrived, bool(choices), content if isinstance(content, str) else None,
                                    first.get("finish_reason"), usage if isinstance(event.get("usage"), dict) else None,
                                    role if isinstance(role, str) else None, other))
                if on_event is not None:
                    on_event(events[-1])
                finished = finished or first.get("finish_reason") is not None
            ended = time.perf_counter()
            if not finished:
                return result("incomplete: the stream ended before the reply finished")
            keep = _drained(response, sock) and not watchdog.fired
            return result(None)
    except (socket.timeout, TimeoutError):
        return result(timed_out())
    except TooSlow:  # raised by on_event (ServerBudget.watch): the chapter stops, the request with it
        raise
    except Exception as error:  # every failure becomes a counted, failed trace
        if watchdog.fired:
            return result(timed_out())
        return result(f"{_kind(error)}: {_describe(error)}")
    finally:
        if keep:
            _POOL.give(host, port, conn)
        else:
            if response is not None:
                response.close()
            if conn is not None:
                conn.close()


#: Seconds to read what is left of a finished reply (the end of its last chunk) before its connection is reused.
DRAIN_TIMEOUT_S = 5.0


def _drained(response: http.client.HTTPResponse, sock: socket.socket) -> bool:
    """Read what is left of a finished reply within :data:`DRAIN_TIMEOUT_S`; whether the connection can then
    carry the next request (the server keeps it open and nothing is left unread)."""
    if response.will_close:
        return False
    try:
        sock.settimeout(DRAIN_TIMEOUT_S)
        response.read(1 << 16)
        sock.settimeout(None)
    except (OSError, http.client.HTTPException):
        return False
    return response.isclosed()


def require_ok(trace: Trace, server: str, what: str = "a request") -> Trace:
    """``trace`` when it succeeded; else :class:`RequestFailed`, one line: ``"<server>: <what> failed:
    <its error>"`` (a chapter's warm-up: a server that cannot answer it cannot be measured).
    Introduced in chapter 7."""
    if not trace.ok:
        raise RequestFailed(f"{server}: {what} failed: {trace.error}")
    return trace


def failures(traces: Sequence[Trace]) -> dict[str, int]:
    """How many requests failed, by kind (``refused``, ``reset``, ``timeout``, ``http 500``, ...)."""
    counts: dict[str, int] = {}
    for t in traces:
        if not t.ok:
            counts[t.error_kind] = counts.get(t.error_kind, 0) + 1
    return counts


class ServerBudget:
    """The seconds a chapter may wait on one server's requests, so that a slow server stops the chapter
    within its budget, in one line saying what was slow (:class:`TooSlow`), instead of keeping it silent for
    many minutes. Thread-safe: concurrent requests share it.

    The budget counts the server's **busy time**: the wall-clock seconds during which at least one request to
    it is in flight (a closed loop of 8 users counts its wall time once, not 8 times); the chapter's own work
    between requests does not count. ``seconds``: the budget; ``server``: how the message names the server;
    ``param``: the chapter parameter that sets the budget; ``fewer``: the parameters that make the chapter's
    requests fewer or shorter. Use:

    * ``timeout_s()``: the bound for the next request (what is left, at most :data:`REQUEST_TIMEOUT_S`);
      :class:`TooSlow` when nothing is left.
    * ``check(trace)``: ``trace``, after noting its pace (TTFT, seconds between tokens); :class:`TooSlow` when
      the budget ran out while it was in flight.
    * ``watch(requests, tokens)``: an ``on_event`` for :func:`stream_chat` that raises :class:`TooSlow` as soon
      as the pace this request shows makes its own remaining tokens plus ``requests`` more requests of
      ``tokens`` tokens in all, one after another, need more than is left: a lower bound, since a chapter
      cannot send those requests faster than one chain of them.
    * ``request()``: a context manager around a request, which counts its busy time.

    Introduced in chapter 7.
    """

    def __init__(self, seconds: float, server: str, param: str, fewer: str):
        if not seconds > 0:
            raise ValueError(f"{param}={seconds!r} is not a number of seconds above 0")
        self.seconds, self.server, self.param, self.fewer = float(seconds), server, param, fewer
        self._lock = threading.Lock()
        self._busy = 0.0  # seconds of busy time already ended
        self._in_flight = 0
        self._since = 0.0  # when the current busy stretch began (monotonic)
        self.ttft_s = 0.0  # the slowest TTFT and seconds between tokens seen so far
        self.gap_s = 0.0

    def busy_s(self) -> float:
        """Seconds of busy time so far, the stretch in progress included."""
        with self._lock:
            return self._busy + (time.monotonic() - self._since if self._in_flight else 0.0)

    def left_s(self) -> float:
        """Seconds of the budget left (negative once it is spent)."""
        return self.seconds - self.busy_s()

    def _pace(self) -> str:
        return (f"up to {self.ttft_s:,.1f} s to the first token and {self.gap_s:,.2f} s between tokens"
                if self.ttft_s or self.gap_s else "no token yet")

    def _advice(self) -> str:
        return f"make its requests fewer or shorter ({self.fewer}) or raise {self.param}"

    def timeout_s(self) -> float:
        left = self.left_s()
        if left <= 0:
            raise TooSlow(f"{self.server} is too slow for this chapter: its requests used all of {self.param}="
                          f"{self.seconds:g} s ({self._pace()}); {self._advice()}")
        return min(REQUEST_TIMEOUT_S, left)

    def request(self) -> "_InFlight":
        return _InFlight(self)

    def _note(self, ttft_s: float | None, gap_s: float | None) -> None:
        with self._lock:
            self.ttft_s = max(self.ttft_s, ttft_s or 0.0)
            self.gap_s = max(self.gap_s, gap_s or 0.0)

    def check(self, trace: Trace) -> Trace:
        if trace.chunk_times:
            gaps = np.diff(trace.chunk_times)
            self._note(trace.chunk_times[0] - trace.sent, float(np.median(gaps)) if len(gaps) else None)
        if not trace.ok and self.left_s() <= 0:
            self.timeout_s()  # raises TooSlow
        return trace

    def watch(self, requests: int, tokens: int, max_tokens: int) -> Callable[[Event], None]:
        """``on_event`` for a request of ``max_tokens`` tokens followed by ``requests`` requests of ``tokens``
        tokens in all (see the class docstring)."""
        started = time.perf_counter()
        seen: list[float] = []

        def on_event(event: Event) -> None:
            if not event.choices or event.is_role_chunk or event.is_bare_finish:
                return
            seen.append(event.time)
            ttft = seen[0] - started
            gap = (seen[-1] - seen[0]) / (len(seen) - 1) if len(seen) > 1 else 0.0
            self._note(ttft, gap or None)
            need = (max_tokens - len(seen)) * gap + requests * ttft + max(tokens - requests, 0) * gap
            left = self.left_s()
            if len(seen) > 1 and need > left:
                raise TooSlow(f"{self.server} is too slow for this chapter: its first request took {ttft:,.1f} s to "
                              f"the first token and {gap:,.2f} s between tokens; at that pace the chapter's "
                              f"{requests} further requests ({tokens:,} tokens) need at least {need:,.0f} s one "
                              f"after another, and {max(left, 0):,.0f} s of {self.param}={self.seconds:g} s are "
                              f"left; {self._advice()}")
        return on_event


class _InFlight:
    """One request's share of a :class:`ServerBudget`'s busy time (its ``request()``)."""

    def __init__(self, budget: ServerBudget):
        self.budget = budget

    def __enter__(self) -> None:
        b = self.budget
        with b._lock:
            if not b._in_flight:
                b._since = time.monotonic()
            b._in_flight += 1

    def __exit__(self, *exc) -> None:
        b = self.budget
        with b._lock:
            b._in_flight -= 1
            if not b._in_flight:
                b._busy += time.monotonic() - b._since


# ----------------------------------------------------------------------------------------------------------
# Loads
# ----------------------------------------------------------------------------------------------------------

def closed_loop(send: Callable[[int], Trace], n_requests: int, concurrency: int) -> list[Trace]:
    """``n_requests`` requests, ``concurrency`` at a time: each of ``concurrency`` users sends its next request
    as soon as its last one ends. ``send(i)`` sends request ``i`` and returns its trace. Returns the traces in
    request order (failed ones included). Introduced in chapter 7."""
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
    request order. Introduced in chapter 7."""
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(offsets))) as pool:
        futures = []
        for i, offset in enumerate(offsets):
            delay = start + float(offset) - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            futures.append(pool.submit(send, i, start + float(offset)))
        return [f.result() for f in futures]
