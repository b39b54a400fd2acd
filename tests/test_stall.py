"""lib.stall: each case of what a server did with B's prefill, decided on synthetic traces, and the
experiment itself against the fake server (tests/fake_openai.py)."""

import pytest
from fake_openai import serve_in_thread

from lib import stall
from lib.client import Event, Trace


def _a(chunks, error=None):
    return Trace(0, 0.0, chunks[-1] + 0.01, tuple(Event(t, True, "x") for t in chunks), error=error, label="A")


def _b(sent, first):
    return Trace(1, sent, first + 0.01, (Event(first, True, "y"),), label="B")


STEADY = [0.1 * i for i in range(1, 5)]  # A's chunks before B arrives, 100 ms apart


def test_one_stall_b_prefill_inside_one_gap_of_a():
    a = _a(STEADY + [1.5, 1.6, 1.7])
    case = stall.stall_case(a, _b(0.45, 1.49))
    assert case.case == "one_stall"
    assert case.ordinary_gap == pytest.approx(0.1) and case.worst_gap == pytest.approx(1.1)
    assert case.elevated == 1 and case.excess == pytest.approx(1.0) and case.worst_share == 1.0
    assert case.b_ttft == pytest.approx(1.04) and not case.b_after_a


def test_one_stall_tolerates_a_slightly_slow_step_beside_it():
    a = _a(STEADY + [1.5, 1.75, 1.85])  # one 1.1 s gap, then one of 250 ms
    case = stall.stall_case(a, _b(0.45, 1.6))
    assert case.case == "one_stall" and case.elevated == 2 and case.worst_share > 0.8


def test_pieces_interleaved_with_a():
    a = _a(STEADY + [0.9, 1.4, 1.9, 2.0, 2.1])  # three 500 ms gaps, then ordinary ones
    case = stall.stall_case(a, _b(0.45, 1.95))
    assert case.case == "pieces"
    assert case.elevated == 3 and case.excess == pytest.approx(1.2) and case.worst_share == pytest.approx(1 / 3)


def test_queued_b_waits_until_a_finished():
    a = _a([0.1 * i for i in range(1, 11)])  # A undisturbed to its end at 1.0 s
    case = stall.stall_case(a, _b(0.45, 1.6))
    assert case.case == "queued" and case.b_after_a and case.elevated == 0
    assert case.worst_gap == pytest.approx(0.1) and case.b_ttft == pytest.approx(1.15)


def test_undisturbed_b_served_while_a_streams_unslowed():
    case = stall.stall_case(_a([0.1 * i for i in range(1, 11)]), _b(0.45, 0.62))
    assert case.case == "undisturbed" and not case.b_after_a and case.elevated == 0


def test_after_a_b_arrived_when_a_had_finished():
    case = stall.stall_case(_a(STEADY), _b(0.41, 1.5))
    assert case.case == "after_a" and case.b_after_a and case.b_ttft == pytest.approx(1.09)


def test_not_measured_for_a_failed_or_empty_request():
    assert stall.stall_case(_a(STEADY, error="reset: gone"), _b(0.2, 0.5)).case == "not_measured"
    assert stall.stall_case(_a(STEADY), Trace(1, 0.2, 0.5)).case == "not_measured"
    assert {c for c in stall.CASES} >= {"after_a", "one_stall", "pieces", "queued", "undisturbed", "not_measured"}


def test_the_factor_decides_what_is_elevated():
    a = _a(STEADY + [0.65, 0.75, 0.85])  # a 250 ms gap: 2.5x the ordinary one
    assert stall.stall_case(a, _b(0.45, 0.7)).case == "one_stall"
    assert stall.stall_case(a, _b(0.45, 0.7), factor=3.0).case == "undisturbed"


def test_interference_sends_b_while_a_streams():
    server, httpd = serve_in_thread()
    try:
        a, b = stall.stall_experiment(server, "ok", [], 5, [], arrive_after=2, timeout_s=10)
        assert a.ok and b.ok and a.label == "A" and b.label == "B"
        chunks = a.chunk_times
        assert chunks[1] <= b.sent < chunks[-1]          # B arrived after A's second chunk, before A ended
        assert stall.stall_case(a, b).case != "after_a"
        with pytest.raises(ValueError, match="arrive_after"):
            stall.stall_experiment(server, "ok", [], 5, [], arrive_after=5)
    finally:
        httpd.shutdown()


def test_a_server_that_stalls_a_mid_stream_fails_the_experiment_within_its_bounds(monkeypatch):
    """A stalls after two chunks (arrive_after 4 is never reached): A fails at the stall bound, B is sent
    then and fails at its first-byte bound; nothing waits longer."""
    import time

    from lib import client

    server, httpd = serve_in_thread()
    real = client.stream_chat
    monkeypatch.setattr(stall, "stream_chat", lambda *a, **kw: real(*a, **kw, stall_timeout_s=1.0,
                                                                       first_byte_timeout_s=1.0))
    try:
        started = time.perf_counter()
        a, b = stall.stall_experiment(server, "stall", [], 5, [], arrive_after=4)
        assert time.perf_counter() - started < 15  # bounded: the stalled stream never ends by itself
        assert a.error_kind == "timeout" and "stalled" in a.error and len(a.chunk_times) == 2
        assert stall.stall_case(a, b).case == "not_measured"
    finally:
        httpd.shutdown()
