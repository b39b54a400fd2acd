"""Tests for lib.metrics: exact checks on small hand-made traces (seconds throughout)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

from lib.metrics import (
    RequestMetrics,
    goodput,
    meets_slo,
    phase_share,
    request_metrics,
    summarize,
    to_frame,
)

MS = 1e-3


def trace(request_time: float, first_after: float, gaps: list[float]) -> list[float]:
    """Token times: the first token ``first_after`` seconds after the request, then the gaps."""
    times = [request_time + first_after]
    for g in gaps:
        times.append(times[-1] + g)
    return times


# --- request_metrics -------------------------------------------------------------------------


def test_request_metrics_basic_values():
    m = request_metrics(10.0, [10.5, 10.6, 10.8, 11.1])
    assert m.n_tokens == 4
    assert m.ttft == pytest.approx(0.5)
    assert m.gaps == pytest.approx((0.1, 0.2, 0.3))
    assert isinstance(m.gaps, tuple)
    assert m.tpot == pytest.approx((11.1 - 10.5) / 3)
    assert m.e2e == pytest.approx(1.1)
    assert m.worst_gap == pytest.approx(0.3)
    assert m.median_gap == pytest.approx(0.2)


def test_tpot_is_mean_of_gaps_and_e2e_is_ttft_plus_gaps():
    rng = np.random.default_rng(0)
    times = 3.0 + 0.2 + np.cumsum(rng.uniform(0.005, 0.05, size=50))
    m = request_metrics(3.0, times)
    assert m.tpot == pytest.approx(np.mean(m.gaps))
    assert m.e2e == pytest.approx(m.ttft + sum(m.gaps))
    assert m.median_gap == pytest.approx(np.median(np.diff(times)))
    assert len(m.gaps) == m.n_tokens - 1 == 49


@pytest.mark.parametrize("container", [list, tuple, np.array])
def test_request_metrics_accepts_sequences(container):
    m = request_metrics(0.0, container([0.1, 0.2, 0.4]))
    assert m.n_tokens == 3
    assert m.ttft == pytest.approx(0.1)
    assert m.worst_gap == pytest.approx(0.2)
    assert all(type(g) is float for g in m.gaps)
    assert type(m.ttft) is float and type(m.tpot) is float


def test_one_token_request_has_no_decode_metrics():
    m = request_metrics(1.0, [1.25])
    assert m.n_tokens == 1
    assert m.ttft == pytest.approx(0.25)
    assert m.e2e == pytest.approx(0.25)
    assert m.gaps == ()
    assert m.tpot is None
    assert m.worst_gap is None
    assert m.median_gap is None


def test_equal_consecutive_times_give_zero_gap():
    m = request_metrics(0.0, [0.0, 0.0, 0.01, 0.01])
    assert m.ttft == 0.0
    assert m.gaps == pytest.approx((0.0, 0.01, 0.0))
    assert m.worst_gap == pytest.approx(0.01)
    assert m.tpot == pytest.approx(0.01 / 3)


def test_request_metrics_is_frozen():
    m = request_metrics(0.0, [0.1, 0.2])
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.ttft = 0.0  # type: ignore[misc]


def test_empty_trace_rejected():
    with pytest.raises(ValueError, match=r"token_times is empty.*at least one token"):
        request_metrics(0.0, [])
    with pytest.raises(ValueError, match="empty"):
        request_metrics(0.0, np.array([]))


def test_token_before_request_names_index_and_amount():
    with pytest.raises(
        ValueError, match=r"token_times\[0\] = 0\.9 s is 0\.1 s before request_time"
    ):
        request_metrics(1.0, [0.9, 1.1])
    # A later index is named too (the times also decrease; the early token is what is reported).
    with pytest.raises(ValueError, match=r"token_times\[2\] = 0\.5 s is 0\.5 s before"):
        request_metrics(1.0, [1.1, 1.2, 0.5])


def test_decreasing_times_name_index():
    with pytest.raises(
        ValueError,
        match=r"decrease at index 2: token_times\[2\] = 1\.15 s is 0\.05 s earlier than "
        r"token_times\[1\] = 1\.2 s; times must be non-decreasing",
    ):
        request_metrics(1.0, [1.1, 1.2, 1.15, 1.3])


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_token_time_rejected(bad):
    with pytest.raises(ValueError, match=r"token_times\[1\] is .*finite number of seconds"):
        request_metrics(0.0, [0.1, bad, 0.3])


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_request_time_rejected(bad):
    with pytest.raises(ValueError, match="request_time is .*finite"):
        request_metrics(bad, [0.1])


def test_malformed_inputs_rejected():
    with pytest.raises(ValueError, match="1-D"):
        request_metrics(0.0, [[0.1, 0.2], [0.3, 0.4]])
    with pytest.raises(ValueError, match="1-D"):
        request_metrics(0.0, 0.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not a string"):
        request_metrics(0.0, "0.1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="request_time must be a number"):
        request_metrics("0", [0.1])  # type: ignore[arg-type]


# --- the spec's example: same TPOT, different stall ---------------------------------------------


def test_same_tpot_but_worst_gap_tells_stall_from_slowness():
    # A: 10 ms gaps with one 50 ms stall. B: every gap 14 ms (every token a little late).
    # Both spend 140 ms over 10 gaps, so their TPOT is equal.
    gaps_a = [10 * MS] * 4 + [50 * MS] + [10 * MS] * 5
    gaps_b = [14 * MS] * 10
    assert sum(gaps_a) == pytest.approx(sum(gaps_b))
    a = request_metrics(0.0, trace(0.0, 0.1, gaps_a))
    b = request_metrics(0.0, trace(0.0, 0.1, gaps_b))

    assert a.tpot == pytest.approx(b.tpot)
    assert a.tpot == pytest.approx(14 * MS)
    assert a.e2e == pytest.approx(b.e2e)
    assert a.worst_gap == pytest.approx(50 * MS)
    assert b.worst_gap == pytest.approx(14 * MS)
    assert a.worst_gap > 3 * b.worst_gap
    # The median gap says the opposite: A's typical token is faster.
    assert a.median_gap == pytest.approx(10 * MS)
    assert b.median_gap == pytest.approx(14 * MS)
    # A TPOT objective cannot separate them; a worst-gap objective can.
    assert goodput([a, b], ttft_slo=0.2, tpot_slo=15 * MS) == 1.0
    assert goodput([a, b], ttft_slo=0.2, tpot_slo=15 * MS, worst_gap_slo=30 * MS) == 0.5
    assert not meets_slo(a, 0.2, 15 * MS, worst_gap_slo=30 * MS)
    assert meets_slo(b, 0.2, 15 * MS, worst_gap_slo=30 * MS)


# --- goodput and meets_slo ---------------------------------------------------------------------


def test_goodput_fraction_and_boundaries():
    fast = request_metrics(0.0, trace(0.0, 0.05, [0.01] * 5))
    slow_first = request_metrics(0.0, trace(0.0, 0.5, [0.01] * 5))
    slow_decode = request_metrics(0.0, trace(0.0, 0.05, [0.03] * 5))
    ms = [fast, slow_first, slow_decode, fast]
    assert goodput(ms, ttft_slo=0.1, tpot_slo=0.02) == pytest.approx(0.5)
    assert goodput(ms, ttft_slo=1.0, tpot_slo=0.02) == pytest.approx(0.75)
    assert goodput(ms, ttft_slo=1.0, tpot_slo=1.0) == 1.0
    assert goodput(ms, ttft_slo=0.01, tpot_slo=0.001) == 0.0
    # An objective is met when the metric equals it exactly.
    exact = request_metrics(0.0, [0.25, 0.5, 0.75])
    assert goodput(exact, ttft_slo=0.25, tpot_slo=0.25, worst_gap_slo=0.25) == 1.0
    assert goodput(exact, ttft_slo=0.2499, tpot_slo=0.25) == 0.0


def test_goodput_accepts_one_record_and_generators():
    m = request_metrics(0.0, [0.1, 0.2])
    assert goodput(m, 1.0, 1.0) == 1.0
    assert goodput((x for x in [m, m]), 1.0, 1.0) == 1.0


def test_one_token_request_judged_on_ttft_only():
    one = request_metrics(0.0, [0.05])
    # No TPOT and no gap: the decode objectives are met vacuously, however tight.
    assert goodput([one], ttft_slo=0.1, tpot_slo=1e-9, worst_gap_slo=1e-9) == 1.0
    assert meets_slo(one, ttft_slo=0.1, tpot_slo=1e-9, worst_gap_slo=1e-9)
    # ...but a late first token still fails.
    assert goodput([one], ttft_slo=0.01, tpot_slo=10.0) == 0.0
    assert not meets_slo(one, ttft_slo=0.01, tpot_slo=10.0)
    # Mixed with a multi-token request that misses its TPOT.
    slow = request_metrics(0.0, [0.05, 0.5])
    assert goodput([one, slow], ttft_slo=0.1, tpot_slo=0.1) == 0.5


def test_goodput_rejects_no_requests():
    with pytest.raises(ValueError, match="at least one request"):
        goodput([], 0.1, 0.1)


@pytest.mark.parametrize("bad", [0, -0.1, math.nan, math.inf, None, True, "0.1"])
def test_goodput_rejects_bad_objectives(bad):
    m = request_metrics(0.0, [0.1, 0.2])
    with pytest.raises(ValueError, match="ttft_slo must be a positive"):
        goodput([m], bad, 0.1)
    with pytest.raises(ValueError, match="tpot_slo must be a positive"):
        goodput([m], 0.1, bad)
    with pytest.raises(ValueError, match="tpot_slo must be a positive"):
        meets_slo(m, 0.1, bad)
    if bad is not None:  # None means "no worst-gap objective"
        with pytest.raises(ValueError, match="worst_gap_slo must be a positive"):
            goodput([m], 0.1, 0.1, worst_gap_slo=bad)


def test_goodput_rejects_wrong_items():
    with pytest.raises(TypeError, match="item 1 is a float"):
        goodput([request_metrics(0.0, [0.1]), 0.3], 0.1, 0.1)
    with pytest.raises(TypeError, match="RequestMetrics"):
        meets_slo(0.3, 0.1, 0.1)  # type: ignore[arg-type]


# --- phase_share -------------------------------------------------------------------------------


def test_phase_share_values():
    m = request_metrics(0.0, trace(0.0, 0.3, [0.1] * 7))  # ttft 0.3, e2e 1.0
    pre, dec = phase_share(m)
    assert pre == pytest.approx(0.3)
    assert dec == pytest.approx(0.7)
    assert pre + dec == pytest.approx(1.0)


def test_phase_share_one_token_is_all_prefill():
    assert phase_share(request_metrics(0.0, [0.2])) == pytest.approx((1.0, 0.0))


def test_phase_share_instant_first_token_is_all_decode():
    assert phase_share(request_metrics(1.0, [1.0, 1.5])) == pytest.approx((0.0, 1.0))


def test_phase_share_rejects_zero_e2e():
    m = request_metrics(2.0, [2.0, 2.0])
    with pytest.raises(ValueError, match="e2e = 0 s, so there is nothing to share"):
        phase_share(m)


# --- summarize ---------------------------------------------------------------------------------


def _fleet() -> list[RequestMetrics]:
    rng = np.random.default_rng(42)
    out = []
    for k in range(20):
        n = int(rng.integers(2, 30))
        gaps = rng.uniform(0.005, 0.06, size=n - 1).tolist()
        out.append(request_metrics(float(k), trace(float(k), float(rng.uniform(0.02, 0.4)), gaps)))
    out.append(request_metrics(100.0, [100.07]))  # one-token request
    return out


def test_summarize_matches_numpy_percentiles():
    ms = _fleet()
    df = summarize(ms)
    assert isinstance(df, pd.DataFrame)
    assert list(df.index) == ["ttft", "tpot", "itl", "worst_gap", "e2e"]
    assert list(df.columns) == ["count", "mean", "min", "p50", "p90", "p99", "max"]
    assert df.attrs["units"] == "s"

    multi = [m for m in ms if m.n_tokens > 1]
    expected = {
        "ttft": [m.ttft for m in ms],
        "tpot": [m.tpot for m in multi],
        "itl": [g for m in ms for g in m.gaps],
        "worst_gap": [m.worst_gap for m in multi],
        "e2e": [m.e2e for m in ms],
    }
    for name, vals in expected.items():
        row = df.loc[name]
        assert row["count"] == len(vals)
        for q in (50, 90, 99):
            assert row[f"p{q}"] == pytest.approx(np.percentile(vals, q), rel=1e-12)
        assert row["mean"] == pytest.approx(np.mean(vals))
        assert row["min"] == pytest.approx(min(vals))
        assert row["max"] == pytest.approx(max(vals))
    # The one-token request counts for TTFT and e2e but not for TPOT or worst gap.
    assert df.loc["ttft", "count"] == 21
    assert df.loc["tpot", "count"] == 20
    assert df.loc["itl", "count"] == sum(m.n_tokens - 1 for m in ms)


def test_summarize_known_small_input():
    ms = [request_metrics(0.0, [t]) for t in (0.1, 0.2, 0.3, 0.4, 0.5)]
    df = summarize(ms, percentiles=(0, 25, 50, 100, 99.9))
    assert list(df.columns) == ["count", "mean", "min", "p0", "p25", "p50", "p100", "p99.9", "max"]
    row = df.loc["ttft"]
    assert row["p0"] == pytest.approx(0.1)
    assert row["p25"] == pytest.approx(0.2)
    assert row["p50"] == pytest.approx(0.3)
    assert row["p100"] == pytest.approx(0.5)
    assert row["p99.9"] == pytest.approx(np.percentile([0.1, 0.2, 0.3, 0.4, 0.5], 99.9))
    # Only one-token requests: the decode rows are empty, not an error.
    for name in ("tpot", "itl", "worst_gap"):
        assert df.loc[name, "count"] == 0
        assert df.loc[name, ["mean", "p50", "max"]].isna().all()


def test_summarize_without_percentiles():
    df = summarize([request_metrics(0.0, [0.1, 0.2])], percentiles=())
    assert list(df.columns) == ["count", "mean", "min", "max"]


@pytest.mark.parametrize("bad", [(-1,), (101,), (50, math.nan), ("50",), (50, 50)])
def test_summarize_rejects_bad_percentiles(bad):
    with pytest.raises(ValueError, match="percentiles must"):
        summarize([request_metrics(0.0, [0.1, 0.2])], percentiles=bad)


def test_summarize_rejects_no_requests():
    with pytest.raises(ValueError, match="at least one request"):
        summarize([])


# --- to_frame ----------------------------------------------------------------------------------


def test_to_frame_one_row_per_request():
    ms = [
        request_metrics(0.0, trace(0.0, 0.3, [0.1] * 7)),
        request_metrics(0.0, [0.2]),
        request_metrics(5.0, [5.0, 5.0]),
    ]
    df = to_frame(ms)
    assert list(df.columns) == [
        "ttft", "tpot", "worst_gap", "median_gap", "e2e", "n_tokens",
        "prefill_share", "decode_share",
    ]
    assert len(df) == 3
    assert df.loc[0, "ttft"] == pytest.approx(0.3)
    assert df.loc[0, "tpot"] == pytest.approx(0.1)
    assert df.loc[0, "n_tokens"] == 8
    assert df.loc[0, "prefill_share"] == pytest.approx(0.3)
    assert df.loc[0, "decode_share"] == pytest.approx(0.7)
    # One-token request: no decode metrics, all prefill.
    assert df.loc[1, ["tpot", "worst_gap", "median_gap"]].isna().all()
    assert df.loc[1, "prefill_share"] == pytest.approx(1.0)
    # Zero end-to-end time: shares are undefined, not an error.
    assert df.loc[2, ["prefill_share", "decode_share"]].isna().all()
    assert df["n_tokens"].dtype.kind == "i"
    # A single record works too.
    assert len(to_frame(ms[0])) == 1


def test_metrics_module_stays_model_free():
    import lib.metrics as metrics

    source = open(metrics.__file__, encoding="utf-8").read()
    assert "import torch" not in source and "import transformers" not in source
    # the section each function is introduced in is checked by tests/test_docstrings.py
