"""lib.conventions: each tool's definitions on hand-made traces, and lib.metrics against vLLM's own metric code
(where chapter 7's vLLM environment exists)."""

import json
import math
import subprocess

import numpy as np
import pytest

from lib import conventions, engines, metrics
from lib.client import Event, Trace


def _trace(request_id=0, sent=10.0, role_at=None, chunks=((10.5, "a"), (10.6, "b"), (10.8, "c")), tokens=None,
           usage_in_choices=False, end_gap=0.01, error=None, finish_chunk=True):
    """A streamed request: optional role chunk, content chunks, a finish chunk (the finish reason and nothing
    else), then usage."""
    events = []
    if role_at is not None:
        events.append(Event(role_at, True, "", role="assistant"))
    events += [Event(t, True, text) for t, text in chunks]
    last = chunks[-1][0] if chunks else sent
    n = len(chunks) if tokens is None else tokens
    usage = {"prompt_tokens": 9, "completion_tokens": n}
    if usage_in_choices:  # transformers serve: the finish chunk carries the usage
        events.append(Event(last + 0.001, True, None, "length", usage))
    else:  # vLLM: a finish chunk, then a chunk with usage and no choices
        if finish_chunk:
            events.append(Event(last + 0.001, True, None, "length"))
        events.append(Event(last + 0.002, False, None, None, usage))
    return Trace(request_id, sent, last + end_gap, tuple(events), 9, n, error)


def test_book_convention_is_lib_metrics():
    t = _trace()
    row = conventions.per_request([t], "book").iloc[0]
    m = metrics.request_metrics(10.0, [10.5, 10.6, 10.8])
    assert row.ttft == pytest.approx(m.ttft) and row.tpot == pytest.approx(m.tpot) and row.e2e == pytest.approx(m.e2e)
    assert row.itl == pytest.approx(list(m.gaps))


def test_vllm_counts_a_role_chunk_as_the_first_token_and_chunks_as_gaps():
    t = _trace(role_at=10.01)
    row = conventions.per_request([t], "vllm").iloc[0]
    assert row.ttft == pytest.approx(0.01)                     # the empty role chunk ended "TTFT"
    assert row.itl[0] == pytest.approx(0.49)                   # the prefill became a gap
    assert row.e2e == pytest.approx(10.801 - 10.0)             # the finish chunk (choices, no content) ends it
    assert row.tpot == pytest.approx((0.801 - 0.01) / 2)
    book = conventions.per_request([t], "book").iloc[0]
    assert book.ttft == pytest.approx(0.5)


def test_vllm_reads_usage_only_from_a_chunk_without_choices():
    t = _trace(chunks=((10.5, "ab"), (10.9, "cd")), tokens=4, usage_in_choices=True)
    assert conventions.per_request([t], "vllm").iloc[0].n == 1                      # no tokenizer: 1
    assert conventions.per_request([t], "vllm", count_tokens=lambda s: len(s)).iloc[0].n == 4
    t2 = _trace(chunks=((10.5, "ab"), (10.9, "cd")), tokens=4)
    assert conventions.per_request([t2], "vllm").iloc[0].n == 4


def test_vllm_scores_a_usage_count_that_is_not_a_number_as_no_usage():
    """The hostile pass after d3d7a80: a server that sent completion_tokens as the text "5" made chapter 7's
    scoring fail with a TypeError; the count is not used (the client flags it too: Trace.usage_problem)."""
    t = _trace(chunks=((10.5, "ab"), (10.9, "cd")))
    usage = Event(11.0, False, None, usage={"prompt_tokens": 3, "completion_tokens": "5"})
    t = Trace(t.request_id, t.sent, t.end, (*[e for e in t.events if not e.usage], usage))
    row = conventions.per_request([t], "vllm", count_tokens=lambda s: len(s)).iloc[0]
    assert row.n == 4 and row.tpot == pytest.approx((10.901 - 10.5) / 3)  # to the finish chunk, over 3 gaps


def test_guidellm_llmperf_genai_perf_definitions():
    t = _trace(chunks=((10.5, "a"), (10.6, "b"), (10.7, "c"), (11.0, "d")))   # 4 tokens, TTFT 0.5
    g = conventions.per_request([t], "guidellm").iloc[0]
    assert g.tpot == pytest.approx(1.0 / 4)                                   # TTFT included
    assert g.inter_token == pytest.approx(0.5 / 3)                            # the book's TPOT
    assert g.e2e == pytest.approx(1.01)
    lp = conventions.per_request([t], "llmperf").iloc[0]
    assert lp.inter_token == pytest.approx(1.0 / 4) and math.isnan(lp.tpot)    # TTFT included
    assert conventions.per_request([t], "llmperf", count_tokens=lambda s: 8).iloc[0].inter_token == pytest.approx(1 / 8)
    gp = conventions.per_request([t], "genai-perf").iloc[0]
    assert gp.inter_token == pytest.approx(0.5 / 3) and gp.e2e == pytest.approx(1.0)
    book = conventions.per_request([t], "book").iloc[0]
    assert gp.inter_token == pytest.approx(book.tpot)


def test_grouped_tokens_book_gaps_are_zero_vllm_gaps_are_chunks():
    t = _trace(chunks=((10.5, "a"), (10.9, "bcd")), tokens=4)
    book = conventions.per_request([t], "book").iloc[0]
    vllm = conventions.per_request([t], "vllm").iloc[0]
    assert book.itl == pytest.approx([0.4, 0.0, 0.0])
    assert vllm.itl == pytest.approx([0.4, 0.001])
    assert book.tpot == pytest.approx(0.4 / 3)


def test_goodput_units_and_one_token_requests():
    fast = _trace(0, chunks=((10.1, "a"), (10.15, "b")))
    slow = _trace(1, chunks=((12.0, "a"), (12.05, "b")))
    single = _trace(2, chunks=((10.1, "a"),))
    failed = Trace(3, 10.0, 10.2, (), error="refused: nope")
    traces = [fast, slow, single, failed]
    table = conventions.compare(traces, ttft_slo=1.0, tpot_slo=0.1).set_index("convention")
    assert table.loc["book", "goodput"] == pytest.approx(2 / 3)                # single judged on TTFT alone
    assert table.loc["guidellm", "goodput"] == pytest.approx(1 / 2)            # single undetermined
    duration = 12.06 - 10.0
    assert table.loc["vllm", "goodput"] == pytest.approx(2 / duration)         # requests per second
    assert table.loc["vllm", "goodput_unit"] == "requests/s"
    assert math.isnan(table.loc["llmperf", "goodput"])
    assert (table.failed == 1).all() and (table.completed == 3).all()
    with pytest.raises(ValueError, match="unknown convention"):
        conventions.per_request(traces, "mlperf")


def _synthetic(n_requests=300, seed=0):
    rng = np.random.default_rng(seed)
    traces = []
    for i in range(n_requests):
        sent = float(rng.uniform(0, 30))
        n = int(rng.integers(1, 40))
        times = sent + rng.exponential(0.3) + np.cumsum(np.r_[0.0, rng.exponential(0.05, n - 1)])
        traces.append(_trace(i, sent, chunks=tuple((float(t), "x") for t in times), end_gap=0.002,
                             finish_chunk=False))
    return traces


VLLM_SCRIPT = r"""
import json, sys
from vllm.benchmarks.serve import calculate_metrics
from vllm.benchmarks.lib.endpoint_request_func import RequestFuncOutput
data = json.load(sys.stdin)
outs = [RequestFuncOutput(success=True, latency=o["latency"], output_tokens=o["n"], ttft=o["ttft"], itl=o["itl"],
                          prompt_len=9, start_time=o["start"]) for o in data["outputs"]]
m, _ = calculate_metrics([], outs, data["duration"], None, [99.0], data["goodput"])
print(json.dumps({k: getattr(m, k) for k in ("mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms", "mean_e2el_ms",
    "percentiles_ttft_ms", "percentiles_tpot_ms", "percentiles_itl_ms", "percentiles_e2el_ms", "request_goodput",
    "completed")}))
"""


@pytest.mark.slow
@pytest.mark.skipif(engines.vllm_unavailable() is not None,
                    reason=f"vLLM's own metric code is needed: {engines.vllm_unavailable()}")
def test_lib_metrics_agree_with_vllms_metric_code():
    traces = _synthetic()
    scored = [t.metrics() for t in traces]
    outputs = [dict(latency=m.e2e, n=m.n_tokens, ttft=m.ttft, itl=list(m.gaps), start=t.sent)
               for t, m in zip(traces, scored)]
    duration = max(t.end for t in traces) - min(t.sent for t in traces)
    slo_ms = {"ttft": 400.0, "tpot": 60.0}
    run = subprocess.run([str(engines.vllm_python()), "-c", VLLM_SCRIPT], input=json.dumps(
        {"outputs": outputs, "duration": duration, "goodput": slo_ms}), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    theirs = json.loads(run.stdout.strip().splitlines()[-1])
    ours = metrics.summarize(scored, percentiles=(99,)) * 1e3
    for name, row in (("ttft", "ttft"), ("tpot", "tpot"), ("itl", "itl"), ("e2el", "e2e")):
        assert theirs[f"mean_{name}_ms"] == pytest.approx(ours.loc[row, "mean"], rel=1e-9), name
        assert theirs[f"percentiles_{name}_ms"][0][1] == pytest.approx(ours.loc[row, "p99"], rel=1e-9), name
    fraction = metrics.goodput(scored, slo_ms["ttft"] / 1e3, slo_ms["tpot"] / 1e3)
    assert theirs["request_goodput"] == pytest.approx(fraction * len(traces) / duration, rel=1e-9)
    # and lib.conventions' re-implementation of vLLM's rules, run on the raw events, gives vLLM's numbers
    mine = conventions.summary(traces, "vllm", slo_ms["ttft"] / 1e3, slo_ms["tpot"] / 1e3)
    assert mine["ttft_mean"] * 1e3 == pytest.approx(theirs["mean_ttft_ms"], rel=1e-9)
    assert mine["tpot_mean"] * 1e3 == pytest.approx(theirs["mean_tpot_ms"], rel=1e-9)


def test_meets_and_bootstrap_fraction():
    fast, slow = _trace(0, chunks=((10.1, "a"), (10.15, "b"))), _trace(1, chunks=((12.0, "a"), (12.05, "b")))
    failed = Trace(2, 10.0, 10.2, (), error="reset: gone")
    assert [conventions.meets(t, 1.0, 0.1) for t in (fast, slow, failed)] == [True, False, False]
    frac, low, high = conventions.bootstrap_fraction([True] * 30 + [False] * 10, resamples=2000, seed=3)
    assert frac == 0.75 and 0.55 < low < 0.75 < high < 0.9
    assert conventions.bootstrap_fraction([True, True]) == (1.0, 1.0, 1.0)
    assert conventions.bootstrap_fraction([True, False], seed=1) == conventions.bootstrap_fraction([True, False], seed=1)
    with pytest.raises(ValueError):
        conventions.bootstrap_fraction([])
