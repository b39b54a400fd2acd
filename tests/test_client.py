"""lib.client: the streaming client and the loads against a fake server (tests/fake_openai.py, standard
library, loopback). No model, no engine package needed."""

import time

import pytest
from fake_openai import TOKENS, FakeServer, serve_in_thread

from lib import client
from lib.engines import free_port


@pytest.fixture(scope="module")
def server():
    base, httpd = serve_in_thread()
    yield base
    httpd.shutdown()


def _ask(base, mode, timeout_s=10.0):
    return client.stream_chat(base, mode, [{"role": "user", "content": "hi"}], 5, timeout_s=timeout_s)


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
    # The server sleeps gap_s before every token, so the k-th token cannot reach the client before k sleeps have
    # passed since the request was sent: a bound no busy scheduler can break (a chunk delivered late shortens the
    # gap after it, so a gap itself has no lower bound), and one that fails if chunks were stamped at the end.
    for k, arrived in enumerate(chunks, start=1):
        assert arrived - trace.sent >= k * FakeServer.gap_s, (k, arrived - trace.sent)
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
    events = tuple(client.Event(t, True, "x") for t in (1.0, 2.0, 3.0))
    assert client.Trace(0, 0.5, 3.0, events).token_times() == (1.0, 2.0, 3.0)
    short = client.Trace(0, 0.5, 3.0, events, output_tokens=2)
    assert short.usage_mismatch and short.token_times() == (1.0, 2.0, 3.0)
    one = client.Trace(0, 0.5, 3.0, events[:1], output_tokens=3)
    assert one.token_times() == (1.0, 1.0, 1.0)
    # an uneven split: 7 tokens over 3 chunks -> 1, then 3 and 3
    uneven = client.Trace(0, 0.5, 3.0, events, output_tokens=7)
    assert uneven.token_times() == (1.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0)
    uneven8 = client.Trace(0, 0.5, 3.0, events, output_tokens=8)
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
    assert time.perf_counter() - started < 10  # bounded (the pause is 3 s), with room for a busy machine
    assert len(trace.chunk_times) == 2  # what arrived before the stall is kept


def test_refused_port_and_unreachable_base_url():
    port = free_port()
    trace = client.stream_chat(f"http://127.0.0.1:{port}", "m", [], 3)
    assert trace.error_kind == "refused"
    with pytest.raises(client.Unreachable, match=f"127.0.0.1:{port}") as caught:
        client.check_reachable(f"http://127.0.0.1:{port}")
    assert "\n" not in str(caught.value)
    with pytest.raises(client.Unreachable, match="http://"):
        client.check_reachable("localhost:8000")


def test_loads_keep_every_request_in_order(server):
    port = free_port()
    dead = f"http://127.0.0.1:{port}"

    def send(i):
        base = dead if i == 3 else server
        return client.stream_chat(base, "ok", [], 5, request_id=i, timeout_s=10)

    traces = client.closed_loop(send, 6, concurrency=3)
    assert [t.request_id for t in traces] == list(range(6))
    assert client.failures(traces) == {"refused": 1}
    offsets = client.poisson_offsets(20.0, 4, seed=1)
    assert offsets[0] == 0 and list(offsets) == sorted(offsets)
    assert list(offsets) == list(client.poisson_offsets(20.0, 4, seed=1))
    opened = client.open_loop(lambda i, at: client.stream_chat(server, "ok", [], 5, request_id=i, scheduled=at),
                               offsets)
    assert [t.request_id for t in opened] == [0, 1, 2, 3] and all(t.ok for t in opened)
    assert all(t.sent >= t.scheduled - 1e-3 for t in opened)
    with pytest.raises(ValueError):
        client.poisson_offsets(0, 3)


def test_served_model_and_metrics_scrape(server):
    assert client.served_model(server) == "fake-model"
    assert client.scrape_metrics(f"http://127.0.0.1:{free_port()}") == {}


# ------------------------------------------------------------------------------------------------------
# Every wait is bounded (issue 20, item 3)
# ------------------------------------------------------------------------------------------------------

@pytest.fixture()
def listener():
    """A port whose kernel accepts connections (the handshake completes) that nobody ever reads."""
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()


@pytest.mark.parametrize("mode, bounds, said", [
    ("silent", dict(first_byte_timeout_s=1.0), "the server accepted the connection but sent no reply within 1 s"),
    ("stall", dict(stall_timeout_s=1.0), "the stream stalled: nothing for 1 s after 3 events"),
    ("trickle", dict(timeout_s=1.5), "no end of stream after 1.5 s"),
], ids=["never-answers", "stalls-mid-stream", "trickles"])
def test_a_server_that_stops_answering_is_a_timed_out_request_within_its_bound(server, mode, bounds, said):
    started = time.perf_counter()
    trace = client.stream_chat(server, mode, [{"role": "user", "content": "hi"}], 5, **bounds)
    waited = time.perf_counter() - started
    assert trace.error_kind == "timeout" and said in trace.error, trace.error
    assert waited < max(bounds.values()) + 8.0, waited  # bounded: the server holds on for 30 s
    if mode == "stall":
        assert len(trace.chunk_times) == 2  # what arrived before the stall is kept


def test_a_socket_that_accepts_and_never_reads_is_bounded_too(listener):
    started = time.perf_counter()
    trace = client.stream_chat(listener, "m", [], 3, first_byte_timeout_s=1.0)
    assert trace.error_kind == "timeout" and "sent no reply within 1 s" in trace.error
    assert time.perf_counter() - started < 10  # bounded: the socket never answers
    started = time.perf_counter()
    with pytest.raises(client.Unreachable, match=r"cannot reach .*: no whole reply within 1 s"):
        client.check_reachable(listener, timeout_s=1.0)
    assert time.perf_counter() - started < 10


def test_the_default_bounds_end_a_dead_request_in_about_a_minute():
    """What chapter 7 waits, at most, for a server that answers /v1/models and never a chat request."""
    assert client.CONNECT_TIMEOUT_S <= 10 and client.FIRST_BYTE_TIMEOUT_S <= 60 and client.STALL_TIMEOUT_S <= 60
    assert client.REQUEST_TIMEOUT_S <= 300
    import inspect

    defaults = inspect.signature(client.stream_chat).parameters
    assert defaults["first_byte_timeout_s"].default == client.FIRST_BYTE_TIMEOUT_S
    assert defaults["stall_timeout_s"].default == client.STALL_TIMEOUT_S


def test_a_failed_warm_up_is_one_line_naming_the_server(server):
    dead = client.stream_chat(server, "silent", [], 5, first_byte_timeout_s=0.5)
    with pytest.raises(client.RequestFailed) as caught:
        client.require_ok(dead, f"server at {server}", "the warm-up request")
    line = str(caught.value)
    assert line.startswith(f"server at {server}: the warm-up request failed: timeout: the server accepted") and "\n" not in line
    good = _ask(server, "ok")
    assert client.require_ok(good, server) is good


def test_a_models_list_that_is_not_one_is_one_line(monkeypatch, server):
    monkeypatch.setattr(client, "http_get", lambda url, timeout_s=5.0: (200, b"<html>hello</html>"))
    with pytest.raises(client.Unreachable, match=r"answered GET /v1/models without a model list"):
        client.served_model(server)


# ------------------------------------------------------------------------------------------------------
# The client counts as the engines' own tools count; any conforming stream works (issue 30, items 5 and 6)
# ------------------------------------------------------------------------------------------------------

def test_an_empty_content_chunk_is_a_token_and_ends_ttft(server):
    """vLLM sends a chunk with empty content for a special token or half a UTF-8 character: it is the first
    token here, so TTFT ends at it, and no token is spread onto another chunk (no invented 0 ms gap)."""
    trace = _ask(server, "empty_first")
    assert trace.ok and trace.output_tokens == 5 and not trace.usage_mismatch, trace.usage_problem
    first_content = trace.content_times[0]
    assert len(trace.chunk_times) == 5 and trace.chunk_times[0] < first_content
    assert trace.token_times() == trace.chunk_times and len(set(trace.token_times())) == 5
    m = trace.metrics()
    assert m.ttft == pytest.approx(trace.chunk_times[0] - trace.sent) and 0.0 not in m.gaps
    assert trace.chunk_times[0] - trace.sent >= FakeServer.gap_s  # the server slept once before it


def test_a_stream_shaped_as_vllm_s_counts_every_choice_after_the_role_chunk(server):
    trace = _ask(server, "vllm")
    assert trace.ok and trace.text == "The is blue."
    assert trace.events[0].is_role_chunk and not trace.events[0] in trace.token_events
    assert len(trace.chunk_times) == 5 == trace.n_tokens and trace.token_events[-1].finish_reason == "length"
    assert trace.token_times() == trace.chunk_times and trace.usage_problem is None


def test_tokens_are_spread_over_chunks_only_when_the_usage_counts_more():
    role = client.Event(0.9, True, "", role="assistant")
    chunks = tuple(client.Event(t, True, c) for t, c in ((1.0, "a"), (2.0, ""), (3.0, "b")))
    finish = client.Event(3.1, True, None, "stop")
    same = client.Trace(0, 0.5, 3.2, (role, *chunks, finish), output_tokens=3, max_tokens=10)
    assert same.chunk_times == (1.0, 2.0, 3.0) and same.token_times() == (1.0, 2.0, 3.0)
    more = client.Trace(0, 0.5, 3.2, (role, *chunks, finish), output_tokens=5, max_tokens=10)
    assert more.token_times() == (1.0, 2.0, 2.0, 3.0, 3.0) and not more.usage_mismatch


@pytest.mark.parametrize("mode, said", [
    ("usage_short", "the server counted 2 completion tokens and streamed 5 token chunks"),
    ("usage_text", "usage counts completion_tokens '5': not a whole number of at least 0"),
    ("usage_over", "counted 999 completion tokens for a request of at most 5"),
    ("usage_prompt_huge", "counted 1,000,000,000,000 prompt tokens for a request of"),
])
def test_usage_that_contradicts_the_stream_is_flagged_and_not_used(server, mode, said):
    trace = _ask(server, mode)
    assert trace.ok and trace.usage_mismatch and said in trace.usage_problem, trace.usage_problem
    assert trace.n_tokens == 5 and trace.token_times() == trace.chunk_times  # one token a chunk: what was seen


def test_connections_are_kept_alive_and_reused(server):
    client.close_idle()
    before = FakeServer.connections
    traces = [_ask(server, "ok") for _ in range(3)]
    assert all(t.ok for t in traces) and FakeServer.connections - before == 1
    assert traces[0].connect_s is not None and traces[0].connect_s >= 0
    assert traces[1].connect_s is None and traces[2].connect_s is None  # reused: nothing to connect
    client.close_idle()
    before = FakeServer.connections
    loaded = client.closed_loop(lambda i: client.stream_chat(server, "ok", [], 5, request_id=i), 6, concurrency=2)
    assert all(t.ok for t in loaded) and FakeServer.connections - before <= 2  # one per user in flight


def _close_the_idle_connections():
    import socket

    for idle in client._POOL.idle.values():  # as an idle timeout of the server would
        for conn in idle:
            conn.sock.shutdown(socket.SHUT_RDWR)


def test_a_connection_closed_while_idle_is_not_reused(server):
    client.close_idle()
    assert _ask(server, "ok").ok
    _close_the_idle_connections()
    trace = _ask(server, "ok")
    assert trace.ok and trace.connect_s is not None, trace.error


def test_a_request_on_a_connection_that_died_unnoticed_is_sent_again_once_on_a_new_one(server, monkeypatch):
    client.close_idle()
    assert _ask(server, "ok").ok
    _close_the_idle_connections()
    monkeypatch.setattr(client.select, "select", lambda r, w, x, t: ([], [], []))  # the close goes unseen
    trace = _ask(server, "ok")
    assert trace.ok and trace.connect_s is not None and trace.text == "".join(TOKENS), trace.error


def test_the_connect_is_reported_apart_and_not_in_ttft(server, monkeypatch):
    import socket

    client.close_idle()
    real = socket.create_connection

    def slow_connect(*args, **kwargs):  # a distant server: the handshake takes 0.3 s
        time.sleep(0.3)
        return real(*args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", slow_connect)
    called = time.perf_counter()
    trace = _ask(server, "ok")
    assert trace.ok and trace.connect_s >= 0.3
    assert trace.sent - called >= 0.3  # TTFT's clock started after the connect
    assert trace.metrics().ttft == pytest.approx(trace.chunk_times[0] - trace.sent)
    client.close_idle()


@pytest.mark.parametrize("mode", ["close", "http10"])
def test_a_server_that_closes_each_connection_or_speaks_http_1_0_works(server, mode):
    client.close_idle()
    traces = [_ask(server, mode) for _ in range(2)]
    for trace in traces:
        assert trace.ok, trace.error
        assert trace.text == "".join(TOKENS) and trace.n_tokens == 5 and trace.usage_problem is None
        assert trace.connect_s is not None  # never reused: the server closed it
    assert not any(client._POOL.idle.values())


def test_which_models_a_server_serves_and_refusing_another(server, monkeypatch):
    monkeypatch.setattr(FakeServer, "models", ["/models/SmolLM2-135M-Instruct", "tiny"])
    assert client.served_models(server) == ("/models/SmolLM2-135M-Instruct", "tiny")
    assert client.require_model(server, ["HuggingFaceTB/SmolLM2-135M-Instruct"]) == "/models/SmolLM2-135M-Instruct"
    assert client.same_model("smollm2-135m-instruct.gguf", ["SmolLM2-135M-Instruct"])
    assert not client.same_model("smollm2-135m-instruct-q4_1.gguf", ["SmolLM2-135M-Instruct"])
    with pytest.raises(client.WrongModel) as caught:
        client.require_model(server, ["gpt2"])
    line = str(caught.value)
    assert line.startswith(f"{server} serves '/models/SmolLM2-135M-Instruct', 'tiny', not 'gpt2'") and "\n" not in line
    monkeypatch.setattr(FakeServer, "models", [""])
    with pytest.raises(client.Unreachable, match="not all names"):
        client.served_models(server)


def test_a_scrape_waits_until_the_histogram_has_counted_the_requests_and_no_longer():
    """A server that records a request's TTFT a moment after its stream ends (as vLLM's front end can): the
    scrape after the runs waits for the count it expects; one without the histogram returns at once."""
    import http.server
    import threading
    import time

    scrapes = []

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            scrapes.append(1)
            late = len(scrapes) >= 3  # the last request's observation arrives by the third scrape
            body = (f"# TYPE vllm:time_to_first_token_seconds histogram\n"
                    f"vllm:time_to_first_token_seconds_count{{model_name=\"m\"}} {4 if late else 3}.0\n"
                    f"vllm:time_to_first_token_seconds_sum{{model_name=\"m\"}} {0.4 if late else 0.3}\n").encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        metric = "vllm:time_to_first_token_seconds"
        assert client.scrape_metrics(url)[f"{metric}_count"] == 3  # too early
        assert client.scrape_counted(url, metric, count=4, timeout_s=10)[f"{metric}_count"] == 4
        assert client.scrape_counted(url, metric, count=9, timeout_s=0.5)[f"{metric}_count"] == 4  # bounded
        began = time.monotonic()
        # an absent metric answers at once, not after the 10 s it may wait for a count
        assert client.scrape_counted(url, "vllm:absent", count=1, timeout_s=10) and time.monotonic() - began < 8
    finally:
        httpd.shutdown()


# ----------------------------------------------------------------------------------------------------------
# ServerBudget: a slow server stops a chapter within its budget, in one line (issue 30 item 3)
# ----------------------------------------------------------------------------------------------------------

def _budget(seconds):
    return client.ServerBudget(seconds, "the server at X", "server_budget_s", "runs, max_new_tokens")


def test_a_budget_counts_busy_time_once_however_many_requests_overlap(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(client.time, "monotonic", lambda: now[0])
    budget = _budget(10)
    a, b = budget.request(), budget.request()
    a.__enter__()
    now[0] = 1.0
    b.__enter__()  # A and B in flight together from 1 s to 3 s: counted once
    now[0] = 3.0
    a.__exit__(None, None, None)
    now[0] = 4.0
    b.__exit__(None, None, None)
    now[0] = 9.0  # the chapter's own work between requests is not the server's time
    assert budget.busy_s() == pytest.approx(4.0)
    assert budget.timeout_s() == pytest.approx(6.0)
    with budget.request():
        now[0] = 16.0
    with pytest.raises(client.TooSlow, match=r"^the server at X is too slow for this chapter: its requests used all "
                                             r"of server_budget_s=10 s \(no token yet\); make its requests fewer or "
                                             r"shorter \(runs, max_new_tokens\) or raise server_budget_s$"):
        budget.timeout_s()


def test_a_request_that_runs_out_of_the_budget_stops_the_chapter(server):
    budget = _budget(0.3)  # 200 tokens 0.05 s apart take 10 s: the request's bound is the budget's 0.3 s
    with budget.request():
        trace = client.stream_chat(server, "long", [], 200, timeout_s=budget.timeout_s())
    assert trace.error_kind == "timeout"
    with pytest.raises(client.TooSlow, match="used all of server_budget_s=0.3 s"):
        budget.check(trace)


def test_the_first_request_s_pace_stops_the_chapter_before_the_rest_is_sent(server, monkeypatch):
    """A server 0.5 s between tokens: 20 more requests of 200 tokens need at least 100 s, past a 30 s budget,
    so the chapter stops at the first request's second token, not after it (a slower machine only raises the
    estimate)."""
    monkeypatch.setattr(FakeServer, "gap_s", 0.5)
    budget = _budget(30)
    started = time.perf_counter()
    with pytest.raises(client.TooSlow, match=r"its first request took [\d.]+ s to the first token and [\d.]+ s "
                                             r"between tokens; at that pace the chapter's 20 further requests "
                                             r"\(200 tokens\) need at least \d+ s one after another"):
        with budget.request():
            client.stream_chat(server, "long", [], 200, timeout_s=budget.timeout_s(),
                               on_event=budget.watch(20, 200, 200))
    assert time.perf_counter() - started < 30  # it did not wait for the 200 tokens (100 s)


def test_a_server_fast_enough_for_the_budget_is_not_stopped(server):
    budget = _budget(600)
    with budget.request():
        trace = client.stream_chat(server, "ok", [], 5, timeout_s=budget.timeout_s(), on_event=budget.watch(2, 10, 5))
    assert budget.check(trace).ok
    assert budget.gap_s > 0 and budget.ttft_s > 0


def test_a_base_url_ending_in_v1_is_told_to_drop_it(monkeypatch):
    """The hostile pass after bbc6bbe: base_url http://host/v1 asked for /v1/v1/models and was told only that the
    server might not be OpenAI-compatible."""
    monkeypatch.setattr(client, "http_get", lambda url, timeout_s: (404, b""))
    with pytest.raises(client.Unreachable, match=r"without /v1 \(the book adds it\): try http://127.0.0.1:9$"):
        client.check_reachable("http://127.0.0.1:9/v1")
