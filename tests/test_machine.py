"""This machine's ceilings: every kernel measured within its budget, rates from counted bytes and FLOPs, look-ups
by device, dtype and a whole number of threads, and a table no machine could produce refused."""

import math
import time

import numpy as np
import pandas as pd
import pytest
import torch

import synthetic
from lib import machine
from lib.device import UnsupportedDtype
from lib.timing import Timing

CPU = torch.device("cpu")


def test_budget_policy():
    full, quick = machine.budget(CPU), machine.budget(CPU, quick=True)
    assert full.stream_bytes >= 256 << 20 and quick.stream_bytes < full.stream_bytes
    assert full.rounds >= 2 and quick.rounds == 1  # a full build spreads each ceiling's repeats over time
    assert quick.seconds * quick.rounds < full.seconds * full.rounds
    assert quick.max_repeats * quick.rounds <= full.max_repeats * full.rounds


@pytest.mark.parametrize("layout, calls", [("conv1d", 4), ("linear", 7)])
def test_model_matrices_are_the_models_own_layout(layout, calls, monkeypatch):
    shape, _ = machine.MODELS["smollm2-135m" if layout == "linear" else "tiny-gpt2"]
    seen = []
    real_addmm, real_linear = torch.addmm, torch.nn.functional.linear
    monkeypatch.setattr(torch, "addmm", lambda b, x, w: seen.append(("addmm", tuple(w.shape))) or real_addmm(b, x, w))
    monkeypatch.setattr(torch.nn.functional, "linear", lambda x, w: seen.append(("linear", tuple(w.shape))) or
                        real_linear(x, w))
    run = machine.model_matrices(shape, layout, CPU, torch.float32, layers=1)
    run({n: torch.zeros(1, n) for n in (shape.d_model, shape.d_ff)})
    assert len(seen) == calls
    if layout == "conv1d":  # GPT-2's Conv1D: [in, out]
        assert seen[0] == ("addmm", (shape.d_model, 3 * shape.d_model))
    else:  # a Llama's Linear: [out, in]; k and v sized for grouped-query attention
        assert seen[1] == ("linear", (shape.kv_heads * shape.head_dim, shape.d_model))
    assert sum(np.prod(s) for _, s in seen) == shape.block_params


@pytest.mark.slow
def test_measure_ceilings_quick_has_every_kernel_and_consistent_rates():
    table = machine.measure_ceilings(CPU, ("fp32",), (1,), models=("tiny-gpt2",), quick=True, log=lambda _: None)
    assert {"read", "read_max", "copy", "fresh_copy", "triad", "square_matmul", "blocks", "head", "attention_prefill",
            "attention_decode", "attention_decode_masked", "dispatch"} <= set(table.kernel)
    ok = table[table.status == "ok"]
    assert (ok.best_s <= ok.median_s).all() and (ok.median_s <= ok.worst_s).all() and (ok.threads == 1).all()
    read = ok[ok.kernel == "read"].iloc[0]
    assert read.gb_s == pytest.approx(read.bytes_per_call / read.best_s / 1e9)
    assert ok[ok.kernel == "triad"].iloc[0].bytes_per_call == 3 * read.bytes_per_call
    c = machine.Ceilings(machine.check_ceilings(table), "cpu")
    assert c.threads() == [1] and c.dispatch("tiny-gpt2", "fp32", 1).best > 0
    ops, us = c.operations("tiny-gpt2", "fp32", 1)
    assert ops > 50 and us > 0
    assert c.weight_rate("tiny-gpt2", "fp32", 1) > 0
    steps = ok[(ok.kernel == "dispatch") & (ok.pass_kind == "decode") & (ok.setting == "between weight streams")]
    assert sorted(zip(steps.rows, steps.context)) == [(1, 16), (1, 64), (4, 16)], "a step from a longer cache too"
    grown = c.rest_growth("tiny-gpt2", "fp32", 1, "decode", 1, 64)
    assert grown is not None and grown.best >= 0
    assert c.dispatch("tiny-gpt2", "fp32", 1, "decode", positions=64).best == pytest.approx(
        c.dispatch("tiny-gpt2", "fp32", 1, "decode").best + grown.best)
    with pytest.raises(ValueError, match=r"measured no read in bf16 at 1 thread\(s\) on cpu"):
        c.stream_bandwidth("bf16", 1)
    with pytest.raises(ValueError, match="measured no read in fp32 at 2 thread"):
        c.stream_bandwidth("fp32", 2)


def test_a_slow_kernel_gets_a_short_sweep_within_its_budget(monkeypatch):
    """A dtype without hardware instructions can be 60 times slower; the sweep must follow the rate it finds:
    a 1 GFLOP/s product is timed on part of the model, and what would not fit is skipped with the reason."""
    real = torch.nn.functional.linear

    def slow(x, w, *args):
        time.sleep(2 * x.shape[0] * w.numel() / 1e9)
        return real(x, w, *args)

    monkeypatch.setattr(torch.nn.functional, "linear", slow)
    plan = machine.Budget(seconds=0.3, min_repeats=2, max_repeats=3, stream_bytes=1 << 20)
    started = time.perf_counter()
    rows = machine.matrices("smollm2-135m", CPU, torch.float32, plan, dict(device="cpu"), rows=(1, 4, 64, 1024),
                            head_rows=(1, 64), slow=True)
    assert time.perf_counter() - started < 30
    table = pd.DataFrame(rows)
    assert (table.status.str.startswith("skipped") | (table.measured_fraction < 1)).any()
    skipped = table[table.status != "ok"]
    assert skipped.note.str.contains("predicted").all()


def test_unsupported_dtype_is_a_row_not_a_crash(monkeypatch):
    def refuse(name, device):
        raise UnsupportedDtype("fp16 matrix products are not supported")

    monkeypatch.setattr(machine, "resolve_dtype", refuse)
    table = machine.measure_ceilings(CPU, ("fp16",), (1,), quick=True, log=lambda _: None)
    assert len(table) == 1 and table.status.iloc[0].startswith("unsupported")


def test_unknown_model_is_refused():
    with pytest.raises(ValueError, match="knows the matrices of gpt2-small"):
        machine.measure_ceilings(CPU, models=("gpt5",))


def test_hardware_support_reads_cpu_flags(monkeypatch):
    monkeypatch.setattr(machine, "cpu_flags", lambda: {"avx2"})
    assert machine.hardware_support(CPU, torch.float32)
    assert not machine.hardware_support(CPU, torch.bfloat16)
    monkeypatch.setattr(machine, "cpu_flags", lambda: {"avx512_bf16"})
    assert machine.hardware_support(CPU, torch.bfloat16)


def test_look_ups_interpolate_between_measured_rows():
    c = synthetic.ceilings()
    one, sixteen = (c.matrices("gpt2-small", "fp32", 2, "blocks", m).best for m in (1, 16))
    assert one == pytest.approx(sixteen)  # flat while the bytes dominate
    big = c.matrices("gpt2-small", "fp32", 2, "blocks", 512).best
    assert c.matrix_rate("gpt2-small", "fp32", 2, 512) == pytest.approx(synthetic.PEAK, rel=1e-6)
    assert c.matrices("gpt2-small", "fp32", 2, "blocks", 2048).best == pytest.approx(2 * c.matrices(
        "gpt2-small", "fp32", 2, "blocks", 1024).best)  # past the last row count: the last rate, held
    assert big > sixteen
    assert c.weight_rate("gpt2-small", "fp32", 2) == pytest.approx(synthetic.WEIGHT_RATE)


def test_check_ceilings_refuses_what_no_machine_produces():
    good = synthetic.table()
    machine.check_ceilings(good)
    fast = good.copy()
    fast.loc[fast.kernel == "read", "best_s"] = 1e-9
    with pytest.raises(machine.CorruptCeilings, match="beyond any memory system.*re-measure it with"):
        machine.check_ceilings(fast)
    outside = good.copy()
    outside.loc[0, "median_s"] = outside.loc[0, "worst_s"] * 2
    with pytest.raises(machine.CorruptCeilings, match="median within the range"):
        machine.check_ceilings(outside)
    with pytest.raises(machine.CorruptCeilings, match="not a ceilings table of this version"):
        machine.check_ceilings(good.drop(columns=["best_s"]))


def test_load_ceilings_names_the_chapter_and_the_device(monkeypatch, tmp_path):
    import lib.results
    monkeypatch.setattr(lib.results, "load_table", lambda *a, **k: None)
    with pytest.raises(FileNotFoundError, match="python -m lib.make.book 00_machine"):
        machine.load_ceilings(CPU)
    monkeypatch.setattr(lib.results, "load_table", lambda *a, **k: synthetic.table())
    assert machine.load_ceilings(CPU).device == "cpu"
    with pytest.raises(ValueError, match="chapter 0 measured cpu, not cuda:0: run chapter 0 with device='cuda:0'"):
        machine.load_ceilings(torch.device("cuda", 0))


def test_rounds_merge_into_one_row_per_measurement():
    """Each round's samples of a measurement join in one row: the fastest of all, the note of the fastest round;
    a measurement skipped in one round but made in another is made."""
    base = dict(device="cpu", dtype="fp32", threads=1)
    slow = machine._row(base, "blocks", Timing.of([0.30, 0.32]), model="m", rows=8, flops=8e9, note="timed on 1/2")
    fast = machine._row(base, "blocks", Timing.of([0.20, 0.40]), model="m", rows=8, flops=8e9, note="whole")
    skipped = dict(base, kernel="blocks", model="m", rows=16, status="skipped: over its time budget", note="predicted")
    made = machine._row(base, "blocks", Timing.of([0.5]), model="m", rows=16, flops=16e9)
    rows = pd.DataFrame(machine._merged([slow, skipped, fast, made])).set_index("rows")
    assert len(rows) == 2 and "samples" not in rows.columns
    assert rows.loc[8, "repeats"] == 4 and rows.loc[8, "best_s"] == 0.20 and rows.loc[8, "worst_s"] == 0.40
    assert rows.loc[8, "median_s"] == pytest.approx(0.31) and rows.loc[8, "note"] == "whole"
    assert rows.loc[8, "gflop_s"] == pytest.approx(40.0)
    assert rows.loc[16, "status"] == "ok"


def test_two_rounds_measure_every_ceiling_once(monkeypatch):
    monkeypatch.setattr(machine, "budget", lambda device, quick: machine.Budget(0.01, 1, 2, 1 << 20, rounds=2))
    table = machine.measure_ceilings(CPU, ("fp32",), (1,), models=("tiny-gpt2",), quick=True, log=lambda _: None)
    ok = table[table.status == "ok"]
    keys = ok[[k for k in machine._SAME if k in ok.columns]].astype(str)
    assert not keys.duplicated().any()
    assert (ok.repeats >= 2).all() and (ok.best_s <= ok.median_s).all()


def test_a_difference_is_floored_by_its_fastest_halves_not_by_its_noise():
    """Dispatch is a pass less the weights' reads timed just before it. A read that ran slow once must not make
    the pass look free: the fastest is the fastest pass less the fastest read; the median is the paired
    differences'; two rounds join both halves. Where the two estimates disagree (the fastest read came in a quick
    spell the passes did not share), the row spans both, its spread not clamped to 0."""
    base = dict(device="cpu", dtype="fp32", threads=1)
    passes, reads = [0.024, 0.027, 0.026], [0.020, 0.026, 0.021]  # the second read was slow: 1 ms left
    row = machine._row(base, "dispatch", Timing.of(passes), rows=1, reads=reads, operations=100)
    assert row["best_s"] == pytest.approx(0.004) and row["median_s"] == pytest.approx(0.004)
    assert row["worst_s"] == pytest.approx(0.005) and row["us_per_operation"] == pytest.approx(40.0)
    again = machine._row(base, "dispatch", Timing.of([0.023]), rows=1, reads=[0.0205], operations=100)
    merged = machine._merged([row, again])[0]
    assert merged["repeats"] == 4 and merged["best_s"] == pytest.approx(0.023 - 0.020)
    assert "reads" not in merged
    quick_read = machine._row(base, "dispatch", Timing.of([0.030, 0.031, 0.032]), rows=1,
                              reads=[0.020, 0.027, 0.027], operations=100)  # paired: 10, 4 and 5 ms
    assert quick_read["best_s"] == pytest.approx(0.005) and quick_read["median_s"] == pytest.approx(0.010)
    assert quick_read["spread"] == pytest.approx(1.0)
    plain = machine._row(base, "read", Timing.of([0.02, 0.03]), bytes_=1e9)
    assert plain["best_s"] == 0.02 and plain["gb_s"] == pytest.approx(50.0)


def test_pace_times_chapter_0s_kernel_and_its_claim_can_fail_both_ways():
    from lib import claims
    table = machine.measure_ceilings(CPU, ("fp32",), (1,), models=("tiny-gpt2",), quick=True, log=lambda _: None)
    now = machine.pace(machine.Ceilings(table, "cpu"), "tiny-gpt2", "fp32", 1, CPU, calls=9)
    assert now.calls == 9 and len(now.ratio.runs) == 9 and 0 < now.ratio.low <= now.ratio.high and now.fastest > 0
    slow_chapter_0 = table.assign(median_s=table.median_s * 1000, best_s=table.best_s * 1000)  # now 1000x faster
    far = machine.pace(machine.Ceilings(slow_chapter_0, "cpu"), "tiny-gpt2", "fp32", 1, CPU, calls=9)
    machine.release_pace()
    register = claims.Claims()
    sentence = machine.pace_claim(register, {"before": far, "after": far}, "the sweep")
    assert register.frame().verdict.tolist() == [claims.NOT_HELD] and "before" in sentence and "another speed" in sentence
    plain, folded = sentence.split("\n\n", 1)  # the finding first, the intervals that decided it folded below
    assert "another speed" in plain and "95 % intervals" not in plain and "<summary>How this run decided it" in folded
    assert list(machine.pace_table({"before": far}).columns) == ["when", "ratio", "ratio_low", "ratio_high",
                                                                 "fastest_ratio", "calls", "chapter0_fastest_over_median"]
    assert 0 < now.reference_best <= 1 and now.expected().low == now.reference_best and now.expected().high == 1
    same = machine.Pace(ratio=claims.Spread.of([0.98, 1.0, 1.02] * 3), fastest=1.0, calls=9)
    register = claims.Claims()
    machine.pace_claim(register, {"before": same, "after": same}, "the sweep")
    assert register.frame().verdict.tolist() == [claims.HELD]
    assert machine.pace_note({"before": same, "after": same}) == ""  # within the tolerance: nothing to say
    slow = machine.Pace(ratio=claims.Spread.of([1.6, 1.65, 1.7] * 3), fastest=1.6, calls=9)
    slower = machine.Pace(ratio=claims.Spread.of([1.8, 1.85, 1.9] * 3), fastest=1.8, calls=9)
    note = machine.pace_note({"before": slow, "after": slower})
    assert "took 1.65x to 1.85x their chapter 0 time" in note and "may run up to that much too low." in note and note.endswith("hardly affected.")
    fast = machine.Pace(ratio=claims.Spread.of([0.5, 0.52, 0.55] * 3), fastest=0.5, calls=9)
    assert "much too high." in machine.pace_note({"before": same, "after": fast})
    # held to chapter 0's own span of calls, fastest to median: a machine running at chapter 0's fastest call, whose
    # median call was a slow one, kept its pace; against the median alone it would not have
    at_fastest = machine.Pace(ratio=claims.Spread.of([0.77, 0.78, 0.79] * 3), fastest=1.02, calls=9,
                              reference_best=0.75)
    register = claims.Claims()
    machine.pace_claim(register, {"before": at_fastest}, "the sweep")
    assert register.frame().verdict.tolist() == [claims.HELD] and machine.pace_note({"before": at_fastest}) == ""
    register = claims.Claims()
    machine.pace_claim(register, {"before": machine.Pace(at_fastest.ratio, 1.02, 9)}, "the sweep")
    assert register.frame().verdict.tolist() == [claims.NOT_HELD]
    register = claims.Claims()  # and it still fails both ways: faster than chapter 0's fastest call beyond the tolerance
    machine.pace_claim(register, {"before": machine.Pace(claims.Spread.of([0.5, 0.52] * 4), 0.6, 8, 0.75)}, "x")
    assert register.frame().verdict.tolist() == [claims.NOT_HELD]
    edge = machine.Pace(ratio=claims.Spread(1.18, 1.23, 1.29), fastest=1.18, calls=9)  # straddles 1.25x: not resolved
    note = machine.pace_note({"before": same, "after": edge})
    assert "took 1.23x their chapter 0 time here, and its interval reaches 1.29x" in note and "may run up to that much too low." in note
    # each moment inside chapter 0's band (0.68x to 1.25x), but the machine sped up by more than the tolerance
    # between them (chapter 2 of build 89: 0.78x before its sweep, 0.98x after): it did not keep one pace
    early = machine.Pace(ratio=claims.Spread(0.70, 0.71, 0.72), fastest=0.8, calls=9, reference_best=0.85)
    late = machine.Pace(ratio=claims.Spread(0.97, 0.98, 0.99), fastest=1.1, calls=9, reference_best=0.85)
    said = {}
    for moments, verdict in (({"before": early, "after": late}, claims.NOT_HELD),
                             ({"before": late, "after": late}, claims.HELD)):
        register = claims.Claims()
        said[verdict] = machine.pace_claim(register, moments, "the sweep")
        assert register.frame().verdict.tolist() == [verdict]
        if verdict == claims.NOT_HELD:  # the evidence table's measured column carries the change between moments
            assert register.frame().measured.iloc[0].endswith("; after over before: 1.38x (1.35–1.41)")
    assert "After, they took 1.38x (1.35–1.41) their time before" in said[claims.NOT_HELD]
    assert "the machine changed speed while the chapter ran" in said[claims.NOT_HELD]
    assert "the machine changed speed: " in said[claims.NOT_HELD].split("\n\n")[0]
    assert "kept the speed chapter 0 measured" in said[claims.HELD].split("\n\n")[0]
    assert "another speed than chapter 0" not in said[claims.NOT_HELD]  # each moment alone was within the band
    # the change between moments straddles the tolerance: the machine only may have changed speed (chapter 2 of
    # build 99 said "changed speed" beside its pace claim's "not resolved")
    edgy = machine.Pace(ratio=claims.Spread(0.70, 0.85, 0.95), fastest=0.9, calls=9, reference_best=0.85)
    register = claims.Claims()
    machine.pace_claim(register, {"before": late, "after": edgy}, "the sweep")
    assert register.frame().verdict.tolist() == [claims.UNRESOLVED]
    note = machine.pace_note({"before": late, "after": edgy})
    assert note.startswith("The machine may have changed speed while the chapter ran") and "their intervals allow" in note
    moved = machine.pace_moved({"before": early, "after": late})
    assert moved[:2] == ("before", "after") and moved[2].low == pytest.approx(0.97 / 0.72)
    assert machine.pace_moved({"before": early}) is None


def test_a_pacer_checks_its_moments_claims_on_them_and_writes_its_evidence():
    """The chapters' one watch on the machine's speed: two moments timed, one claim on both, ``pace.csv`` written
    through the chapter's results; a model chapter 0 did not time at one row is neither timed nor claimed."""
    from lib import claims
    table = machine.measure_ceilings(CPU, ("fp32",), (1,), models=("tiny-gpt2",), quick=True, log=lambda _: None)
    slow_chapter_0 = table.assign(median_s=table.median_s * 1000, best_s=table.best_s * 1000)  # now 1000x faster

    class Written:
        def __init__(self):
            self.tables = {}

        def table(self, frame, name):
            self.tables[name] = frame

    pacer, results, register = machine.Pacer(machine.Ceilings(slow_chapter_0, "cpu"), "tiny-gpt2", "fp32", 1, CPU), \
        Written(), claims.Claims()
    assert pacer.check("before the sweep") is not None and pacer.check("after it") is not None
    assert not [k for k in machine._KEPT if isinstance(k, tuple) and k[0] == "pace"]  # its weights dropped
    sentence = pacer.claim(register, results, "the sweep")
    assert register.frame().verdict.tolist() == [claims.NOT_HELD] and "before the sweep" in sentence
    assert results.tables["pace"].when.tolist() == ["before the sweep", "after it"]
    assert "much too high." in pacer.note()  # 1000 times faster than chapter 0: the prices ran too high
    absent, results, register = machine.Pacer(machine.Ceilings(table, "cpu"), "gpt2-small", "fp32", 1, CPU), \
        Written(), claims.Claims()
    assert absent.check("before the sweep") is None and absent.moments == {}
    assert "not checked" in absent.claim(register, results, "the sweep") and register.frame().empty
    assert results.tables == {} and absent.note() == ""


def test_a_cache_kernel_is_timed_after_the_weights_stream_past_it(monkeypatch):
    """On a host with a 480 MiB last-level cache, chapter 0 timed attention over a 75 MB cache that the cache held
    between calls (38 GB/s against a streaming read of 24): each call now follows a read of the model's weights'
    bytes, untimed, as a step's does."""
    calls = []
    timing_ = machine._timed(lambda: calls.append("kernel"), CPU, machine.budget(CPU, quick=True),
                             before=lambda: calls.append("flush"))
    assert calls[0::2] == ["flush"] * (len(calls) // 2) and calls[1::2] == ["kernel"] * (len(calls) // 2)
    assert len(timing_.samples) == len(calls) // 2 - 1, "the first call warms up"
    flush = machine._flush("tiny-gpt2", CPU, torch.float32)
    flush()
    fp32_bytes = machine.MODELS["tiny-gpt2"][0].with_dtype("fp32").weight_bytes
    kept = [v for k, v in machine._KEPT.items() if k[:2] == ("flush", "tiny-gpt2")]
    assert [v.numel() * 4 for v in kept] == [pytest.approx(fp32_bytes, abs=4)], "as many bytes as its weights"


def test_streamed_arrays_are_four_times_the_last_level_cache(monkeypatch):
    monkeypatch.setattr(machine, "last_level_cache_bytes", lambda: 480 << 20)
    assert machine.budget(CPU).stream_bytes == 4 * (480 << 20)
    monkeypatch.setattr(machine, "last_level_cache_bytes", lambda: 32 << 20)
    assert machine.budget(CPU).stream_bytes == 256 << 20, "never below 256 MiB"
    monkeypatch.setattr(machine, "last_level_cache_bytes", lambda: None)
    assert machine.budget(CPU).stream_bytes == 256 << 20


def test_read_through_reads_every_byte_as_whole_numbers_of_its_width():
    """A flush reads a tensor's bits as integers of its own width (a bf16 maximum over values runs at a fraction of
    the memory's rate on a CPU); an integer tensor is read as it is; a strided view is read whole."""
    values = torch.arange(1, 13, dtype=torch.float32).reshape(3, 4).t()  # positive, not contiguous
    for dtype, bits in ((torch.float32, torch.int32), (torch.bfloat16, torch.int16), (torch.float16, torch.int16),
                        (torch.int8, torch.int8)):
        t = values.to(dtype)
        out = machine.read_through(t)
        assert out.dtype == bits and out.numel() == 1
        # positive floats order as their bit patterns do, so the largest bits are the largest value's
        assert out.item() == (t.max().view(bits).item() if dtype.is_floating_point else t.max().item())


def test_products_between_times_the_products_alone_and_with_a_steps_small_kernels_between():
    """Per product call, in microseconds: back to back (chapter 0's way) and with a layer norm, an add and a GELU
    between each, less those kernels alone; one count of products per layer in GPT-2's layout."""
    shape, layout = machine.MODELS["tiny-gpt2"]
    got = machine.products_between(shape, torch.device("cpu"), torch.float32, layout, calls=20)
    assert got["products"] == 4 * shape.layers
    assert got["alone_us"] > 0 and got["small_us"] > 0 and math.isfinite(got["between_us"])
    for bad in (0, -3, 2.5):
        with pytest.raises(ValueError, match="at least 1"):
            machine.products_between(shape, torch.device("cpu"), torch.float32, layout, calls=bad)
