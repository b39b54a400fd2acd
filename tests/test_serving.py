"""lib.serving: the streaming client against a fake server written here (standard library, loopback), and
the engine lifecycle against trivial processes. No model, no engine package needed."""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lib import serving

TOKENS = ["The", " sky", " is", " blue", "."]


def _event(content=None, role=None, finish=None, usage=None, choices=True):
    delta = {}
    if role:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    body = {"object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if choices else []}
    if usage:
        body["usage"] = usage
    return f"data: {json.dumps(body)}\n\n".encode()


class FakeServer(BaseHTTPRequestHandler):
    """Behaviour chosen by the request's model name: ok, grouped, http500, reset, slow, error_event, cut."""

    protocol_version = "HTTP/1.1"
    gap_s = 0.05

    def log_message(self, *args):
        pass

    def do_GET(self):
        body = json.dumps({"data": [{"id": "fake-model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _send(self, chunk: bytes):
        self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        self.wfile.flush()

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        mode = request["model"]
        if mode == "http500":
            body = b'{"error": "engine exploded"}'
            self.send_response(500)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._send(_event(role="assistant", content=""))
        usage = {"prompt_tokens": 7, "completion_tokens": len(TOKENS), "total_tokens": 7 + len(TOKENS)}
        if mode == "grouped":  # tokens 2-3 and 4-5 in one write each: 3 content chunks for 5 tokens
            for group in (TOKENS[:1], TOKENS[1:3], TOKENS[3:]):
                time.sleep(self.gap_s)
                self._send(_event(content="".join(group)))
        else:
            for i, token in enumerate(TOKENS):
                time.sleep(self.gap_s)
                if mode == "slow" and i == 2:
                    time.sleep(3)
                if mode == "reset" and i == 2:
                    # linger 0, then close every handle of the socket: the kernel sends a reset (RST)
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    self.wfile.close()
                    self.rfile.close()
                    self.connection.close()
                    return
                if mode == "error_event" and i == 2:
                    self._send(b'data: {"error": {"message": "out of blocks"}}\n\n')
                    self._send(b"")
                    return
                if mode == "cut" and i == 2:
                    self._send(b"")  # a clean end of the body, but no finish reason
                    return
                self._send(_event(content=token))
        self._send(_event(content="", finish="length"))
        self._send(_event(choices=False, usage=usage))
        self._send(b"data: [DONE]\n\n")
        self._send(b"")


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), FakeServer)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def _ask(base, mode, timeout_s=10.0):
    return serving.stream_chat(base, mode, [{"role": "user", "content": "hi"}], 5, timeout_s=timeout_s)


def test_chunk_times_usage_and_metrics(server):
    trace = _ask(server, "ok")
    assert trace.ok, trace.error
    assert trace.text == "".join(TOKENS)
    assert (trace.prompt_tokens, trace.output_tokens) == (7, 5)
    chunks = trace.chunk_times
    assert len(chunks) == 5 and list(chunks) == sorted(chunks)
    assert trace.sent < chunks[0] <= trace.end
    m = trace.metrics()
    assert m.n_tokens == 5
    assert m.ttft == pytest.approx(chunks[0] - trace.sent)
    # the server waits gap_s before every token: each gap is at least that, and TTFT too
    assert min(m.gaps) >= FakeServer.gap_s * 0.9 and m.ttft >= FakeServer.gap_s * 0.9
    assert m.tpot == pytest.approx((chunks[-1] - chunks[0]) / 4)


def test_several_tokens_in_one_chunk_are_stamped_with_the_chunk(server):
    trace = _ask(server, "grouped")
    assert trace.ok and len(trace.chunk_times) == 3 and trace.output_tokens == 5
    c = trace.chunk_times
    # first chunk one token; the 4 others spread over the 2 later chunks, two each
    assert trace.token_times() == (c[0], c[1], c[1], c[2], c[2])
    m = trace.metrics()
    assert m.n_tokens == 5 and m.gaps[1] == 0.0 and m.gaps[3] == 0.0
    assert m.tpot == pytest.approx((c[2] - c[0]) / 4)


def test_attribution_without_usage_and_with_too_little_usage():
    events = tuple(serving.Event(t, True, "x") for t in (1.0, 2.0, 3.0))
    assert serving.Trace(0, 0.5, 3.0, events).token_times() == (1.0, 2.0, 3.0)
    short = serving.Trace(0, 0.5, 3.0, events, output_tokens=2)
    assert short.usage_mismatch and short.token_times() == (1.0, 2.0, 3.0)
    one = serving.Trace(0, 0.5, 3.0, events[:1], output_tokens=3)
    assert one.token_times() == (1.0, 1.0, 1.0)
    # an uneven split: 7 tokens over 3 chunks -> 1, then 3 and 3
    uneven = serving.Trace(0, 0.5, 3.0, events, output_tokens=7)
    assert uneven.token_times() == (1.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0)
    uneven8 = serving.Trace(0, 0.5, 3.0, events, output_tokens=8)
    assert uneven8.token_times().count(2.0) == 4 and uneven8.token_times().count(3.0) == 3


@pytest.mark.parametrize("mode, kind", [("http500", "http 500"), ("reset", "reset"),
                                        ("error_event", "error event"), ("cut", "incomplete")])
def test_failed_requests_are_counted_with_their_error(server, mode, kind):
    trace = _ask(server, mode)
    assert not trace.ok and trace.error_kind == kind, trace.error
    with pytest.raises(ValueError, match="failed"):
        trace.metrics()
    if mode == "http500":
        assert "engine exploded" in trace.error


def test_timeout_is_a_failed_request(server):
    started = time.perf_counter()
    trace = _ask(server, "slow", timeout_s=1.0)
    assert trace.error_kind == "timeout", trace.error
    assert time.perf_counter() - started < 2.5
    assert len(trace.chunk_times) == 2  # what arrived before the stall is kept


def test_refused_port_and_unreachable_base_url():
    port = serving.free_port()
    trace = serving.stream_chat(f"http://127.0.0.1:{port}", "m", [], 3)
    assert trace.error_kind == "refused"
    with pytest.raises(serving.Unreachable, match=f"127.0.0.1:{port}") as caught:
        serving.check_reachable(f"http://127.0.0.1:{port}")
    assert "\n" not in str(caught.value)
    with pytest.raises(serving.Unreachable, match="http://"):
        serving.check_reachable("localhost:8000")


def test_loads_keep_every_request_in_order(server):
    port = serving.free_port()
    dead = f"http://127.0.0.1:{port}"

    def send(i):
        base = dead if i == 3 else server
        return serving.stream_chat(base, "ok", [], 5, request_id=i, timeout_s=10)

    traces = serving.closed_loop(send, 6, concurrency=3)
    assert [t.request_id for t in traces] == list(range(6))
    assert serving.failures(traces) == {"refused": 1}
    offsets = serving.poisson_offsets(20.0, 4, seed=1)
    assert offsets[0] == 0 and list(offsets) == sorted(offsets)
    assert list(offsets) == list(serving.poisson_offsets(20.0, 4, seed=1))
    opened = serving.open_loop(lambda i, at: serving.stream_chat(server, "ok", [], 5, request_id=i, scheduled=at),
                               offsets)
    assert [t.request_id for t in opened] == [0, 1, 2, 3] and all(t.ok for t in opened)
    assert all(t.sent >= t.scheduled - 1e-3 for t in opened)
    with pytest.raises(ValueError):
        serving.poisson_offsets(0, 3)


def test_served_model_and_metrics_scrape(server):
    assert serving.served_model(server) == "fake-model"
    assert serving.scrape_metrics(f"http://127.0.0.1:{serving.free_port()}") == {}


# ------------------------------------------------------------------------------------------------------
# Engine lifecycle, with trivial processes standing in for an engine
# ------------------------------------------------------------------------------------------------------

def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _http_server(**kw):
    return serving.Engine("toy", [sys.executable, "-m", "http.server", "{port}", "--bind", "{host}"],
                          health_path="/", start_timeout_s=30, **kw)


def test_engine_starts_healthy_and_stops():
    with _http_server() as engine:
        assert engine.running and engine.startup_s > 0
        assert serving._get(engine.base_url + "/")[0] == 200
        pid = engine._proc.pid
    assert not engine.running and not _alive(pid)
    assert serving.stream_chat(engine.base_url, "m", [], 1).error_kind == "refused"


def test_engine_is_stopped_when_the_block_raises():
    engine = _http_server()
    with pytest.raises(RuntimeError, match="notebook failed"):
        with engine:
            pid = engine._proc.pid
            raise RuntimeError("notebook failed")
    assert not _alive(pid)


def test_failed_start_shows_the_end_of_the_log():
    engine = serving.Engine("broken", [sys.executable, "-c", "print('loading model'); print('boom: no such model'); "
                                                             "import sys; sys.exit(3)"], start_timeout_s=30)
    with pytest.raises(serving.EngineFailed, match="(?s)exited with code 3.*boom: no such model"):
        engine.start()
    assert not engine.running


def test_engine_that_never_gets_healthy_is_killed():
    engine = serving.Engine("sleepy", [sys.executable, "-c", "import time; print('compiling'); time.sleep(60)"],
                            start_timeout_s=1.5)
    started = time.monotonic()
    with pytest.raises(serving.EngineFailed, match="(?s)not healthy after 2 s.*compiling"):
        engine.start()
    assert time.monotonic() - started < 15
    assert not engine.running


def test_missing_program_is_named():
    with pytest.raises(serving.EngineFailed, match="no such program"):
        serving.Engine("ghost", ["/nonexistent/engine"]).start()


def test_stop_kills_the_whole_process_group(tmp_path):
    child_pid = tmp_path / "child.pid"
    script = textwrap.dedent(f"""
        import subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        open({str(child_pid)!r}, "w").write(str(child.pid))
        sys.argv = ["http.server", sys.argv[1], "--bind", "127.0.0.1"]
        import runpy; runpy.run_module("http.server", run_name="__main__")
    """)
    with serving.Engine("with-worker", [sys.executable, "-c", script, "{port}"], health_path="/",
                        start_timeout_s=30):
        worker = int(child_pid.read_text())
        assert _alive(worker)
    deadline = time.monotonic() + 10
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(worker)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal (prctl) is Linux's")
def test_engine_dies_with_the_process_that_started_it(tmp_path):
    """A notebook kernel killed outright (no atexit, no finalizer) must not leave its engine running."""
    pid_file = tmp_path / "engine.pid"
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(serving.REPO_ROOT)!r})
        from lib import serving
        e = serving.Engine("orphan", [sys.executable, "-m", "http.server", "{{port}}", "--bind", "{{host}}"],
                           health_path="/", start_timeout_s=30).start()
        open({str(pid_file)!r}, "w").write(str(e._proc.pid))
        time.sleep(120)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 30
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline and parent.poll() is None, "the engine did not start"
            time.sleep(0.1)
        engine_pid = int(pid_file.read_text())
        assert _alive(engine_pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 10
        while _alive(engine_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(engine_pid)
    finally:
        if parent.poll() is None:
            parent.kill()


def test_interference_sends_b_while_a_streams(server):
    a, b = serving.stall_experiment(server, "ok", [], 5, [], arrive_after=2, timeout_s=10)
    assert a.ok and b.ok and a.label == "A" and b.label == "B"
    chunks = a.chunk_times
    assert chunks[1] <= b.sent < chunks[-1]          # B arrived after A's second chunk, before A ended
    with pytest.raises(ValueError, match="arrive_after"):
        serving.stall_experiment(server, "ok", [], 5, [], arrive_after=5)
