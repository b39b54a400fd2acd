import time

import pytest
import torch

from lib import timing


def test_measure_counts_warmup_and_repeats():
    calls = []
    result = timing.measure(lambda: calls.append(1), warmup=2, repeats=5)
    assert len(calls) == 7
    assert len(result.samples) == 5
    assert result.low <= result.median <= result.high


def test_measure_sees_a_sleep():
    result = timing.measure(lambda: time.sleep(0.01), repeats=3)
    assert 0.009 < result.median < 0.5
    assert result.median_ms == pytest.approx(result.median * 1e3)


def test_timing_of_summarises():
    t = timing.Timing.of([3.0, 1.0, 2.0])
    assert (t.median, t.low, t.high) == (2.0, 1.0, 3.0)
    with pytest.raises(ValueError, match="no samples"):
        timing.Timing.of([])


def test_bad_arguments():
    with pytest.raises(ValueError, match="repeats must be at least 1"):
        timing.measure(lambda: None, repeats=0)
    with pytest.raises(ValueError, match="warmup cannot be negative"):
        timing.measure(lambda: None, warmup=-1)


def test_now_is_monotonic_on_cpu():
    a = timing.now("cpu")
    b = timing.now("cpu")
    assert b >= a


@pytest.mark.cuda
def test_cuda_timing_waits_for_the_gpu():
    x = torch.randn(4096, 4096, device="cuda")
    synced = timing.measure(lambda: x @ x, "cuda", repeats=3)
    events = timing.measure(lambda: x @ x, "cuda", repeats=3, use_cuda_events=True)
    # a 4096^3 product is ~137 GFLOP: even an H200 needs well over 0.1 ms; an unsynchronised clock sees ~10 us
    assert synced.median > 1e-4 and events.median > 1e-4


def test_median_range_keeps_group_order_and_names_columns():
    import pandas as pd

    frame = pd.DataFrame({"chunk": [1000, 128, 1000, 128, 1000], "gap_ms": [5.0, 1.0, 7.0, 2.0, 6.0]})
    out = timing.median_range(frame, "chunk", ["gap_ms"])
    assert list(out.chunk) == [1000, 128]  # not sorted: the unchunked row stays first
    assert list(out.columns) == ["chunk", "gap_ms", "gap_ms_low", "gap_ms_high"]
    assert out.iloc[0].tolist() == [1000, 6.0, 5.0, 7.0]
    # nine runs or more: the 95 % interval of the median, which leaves out one slow run
    many = pd.DataFrame({"chunk": [8] * 9, "gap_ms": [1.0, 1.1, 1.2, 1.0, 1.1, 1.2, 1.1, 1.0, 50.0]})
    assert timing.median_range(many, "chunk", ["gap_ms"]).iloc[0].tolist() == [8, 1.1, 1.0, 1.2]
    with pytest.raises(ValueError, match="no column"):
        timing.median_range(frame, "chunk", ["ttft_ms"])


def test_overhead_is_measured_and_small():
    cost = timing.overhead("cpu", repeats=20)
    assert set(cost) == {"clock", "readback"}
    assert all(0 < v < 0.01 for v in cost.values())


def test_measure_calls_before_untimed_before_each_sample():
    calls = []
    t = timing.measure(lambda: calls.append("fn"), warmup=1, repeats=3, before=lambda: calls.append("before"))
    assert calls == ["fn"] + ["before", "fn"] * 3
    assert len(t.samples) == 3
