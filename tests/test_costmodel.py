"""The cost model on synthetic ceilings: every term computed by hand, both ways a measured pass can go."""

import pandas as pd
import pytest

import synthetic
from lib.costmodel import FRESH_PAGES_BYTES, CostModel
from lib.machine import MODELS, Ceilings
from lib.timing import PAGE_BYTES

SHAPE = MODELS["gpt2-small"][0].with_dtype("fp32")


def model(**kwargs):
    return CostModel(synthetic.ceilings(**kwargs), "gpt2-small", SHAPE, "fp32", 2)


def test_a_one_token_prefill_is_its_weights_plus_dispatch():
    p = model().prefill(1)
    weights = SHAPE.weight_bytes / synthetic.WEIGHT_RATE
    assert p.term("block matrices").best + p.term("LM head").best == pytest.approx(weights)
    assert p.term("dispatch").best == synthetic.DISPATCH["prefill"]
    assert p.best == pytest.approx(weights + synthetic.DISPATCH["prefill"] + p.term("attention").best)
    assert p.term("block matrices").limit == "memory" and p.dominant.name == "block matrices"
    assert p.median > p.best  # the medians are slower by the synthetic spread


def test_a_long_prefill_is_priced_by_its_flops_at_the_rate_of_its_rows():
    p = model().prefill(1024)
    blocks = p.term("block matrices")
    assert blocks.limit == "compute"
    assert blocks.best == pytest.approx(2 * SHAPE.layers * SHAPE.block_params * 1024 / synthetic.PEAK)
    assert p.term("LM head").best == pytest.approx(SHAPE.lm_head_params * 4 / synthetic.WEIGHT_RATE)  # last only
    everywhere = model().prefill(1024, logits="all")
    assert everywhere.term("LM head").best == pytest.approx(2 * SHAPE.lm_head_params * 1024 / synthetic.PEAK)
    attention = SHAPE.layers * 2 * SHAPE.d_model * 1024 ** 2 / synthetic.ATTENTION_RATE + 1e-5
    assert p.term("attention").best == pytest.approx(attention, rel=1e-3)


def test_a_chunk_after_cached_tokens_pays_for_attending_to_them_and_copying_them():
    alone, chunk = model().prefill(256), model().prefill(256, past=512)
    assert chunk.term("attention").best == pytest.approx(alone.term("attention").best * (1 + 2 * 512 / 256))
    moved = 2 * 512 * SHAPE.kv_bytes_per_token
    assert chunk.term("cache copy").best == pytest.approx(moved / synthetic.COPY)
    assert alone.term("cache copy").best == 0


def test_a_decode_step_reads_and_copies_a_growing_cache_but_not_a_preallocated_one():
    dynamic = model().decode(512)
    static = model().decode(512, cache="static", max_len=1024)
    read = 512 * SHAPE.kv_bytes_per_token
    assert dynamic.term("attention").best == pytest.approx(read / synthetic.CACHE_RATE, rel=1e-3)
    assert dynamic.term("cache copy").best == pytest.approx(2 * read / synthetic.COPY)
    assert static.term("cache copy").best == 0
    assert static.term("attention").best == pytest.approx(2 * read / synthetic.CACHE_RATE, rel=1e-3)  # all 1,024
    assert static.term("dispatch").best == synthetic.DISPATCH["decode_static"]


def test_the_rest_of_a_step_grows_with_its_cache_as_chapter_0_measured_it():
    """Chapter 3 on the Intel host: a growing cache's step grew 7.6 ms from 16 to 960 tokens, the cache's read and
    copy priced 5.8; under the profiler the rest of the step (matrices, dispatch, between operators) grew +1.7 ms.
    Chapter 0 now times the hollowed step from a longer cache, and the dispatch term grows by what it measured,
    less the concatenation (priced on its own), linearly in the cache's bytes, in proportion past the largest."""
    grown = synthetic.ceilings(long_caches=True)
    plain = CostModel(grown, "gpt2-small", SHAPE, "fp32", 2)
    kv = SHAPE.kv_bytes_per_token
    for kind, base in (("dynamic", 16), ("static", 24)):
        rate = synthetic.REST_GROWTH_S_PER_GB["decode" if kind == "dynamic" else "decode_static"]
        for batch, positions in ((1, 500), (1, 1000), (4, 700), (16, 512), (64, 512)):
            step = plain.decode(positions, batch=batch, cache=kind, max_len=positions)
            growth = rate * batch * (positions - base) * kv / 1e9
            short = model().decode(positions, batch=batch, cache=kind, max_len=positions).term("dispatch").best
            assert step.term("dispatch").best == pytest.approx(short + growth, rel=1e-6), (kind, batch, positions)
    assert grown.rest_growth("gpt2-small", "fp32", 2, "decode", 1, 16).best == 0.0
    assert model().decode(1000).term("dispatch").best == synthetic.DISPATCH["decode"], "no longer cache measured"


def test_the_rest_s_growth_is_never_negative():
    table = synthetic.table(long_caches=True)
    long_ = (table.kernel == "dispatch") & (table.context == 1000)
    table.loc[long_, ["best_s", "median_s"]] = 1e-4  # a noisy long step faster than the short one
    growth = Ceilings(table, "cpu").rest_growth("gpt2-small", "fp32", 2, "decode", 1, 800)
    assert growth.best >= 0 and growth.median >= growth.best


def test_a_large_cache_is_copied_into_fresh_pages_and_pays_a_fault_per_page():
    """Chapter 0's cost per page is a fresh copy less the same copy into mapped memory: a copy priced at the copy
    rate plus its destination's faults is the fresh copy's time again."""
    batch = 64
    per_layer_tensor = batch * 513 * SHAPE.kv_bytes_per_token / (2 * SHAPE.layers)
    assert per_layer_tensor >= FRESH_PAGES_BYTES
    step = model().decode(512, batch=batch)
    moved = 2 * batch * 512 * SHAPE.kv_bytes_per_token
    assert step.term("cache copy").best == pytest.approx(moved / synthetic.COPY)
    assert step.term("cache copy").best + step.term("page faults").best == pytest.approx(
        moved / synthetic.FRESH_COPY, rel=0.01)  # the new tensors are one position longer than the copied ones
    assert step.dominant.name == "page faults" and step.dominant.limit == "page faults"
    assert model().decode(512).term("page faults").best == 0  # a small cache: no faults expected before counting


def test_counted_faults_price_what_the_pass_did():
    fault = model().ceilings.fault_cost("fp32", 2)
    assert fault == pytest.approx((1 / synthetic.FRESH_COPY - 1 / synthetic.COPY) * 1e9 / (1e9 / 2 / PAGE_BYTES))
    small = model().decode(512, fresh_pages=10_000)
    assert small.term("page faults").best == pytest.approx(10_000 * fault)
    assert "counted" in small.term("page faults").how
    assert model().decode(512, batch=64, fresh_pages=0).term("page faults").best == 0  # counted: none this time
    assert model().prefill(512, fresh_pages=2_000).term("page faults").best == pytest.approx(2_000 * fault)
    assert model().decode(512, cache="static", max_len=1024).term("page faults").best == 0


def test_faults_inside_a_ceiling_are_not_counted_twice():
    """The LM head at many rows writes a large output, which chapter 0's own calls faulted in: those faults are in
    the head's time already."""
    table = synthetic.table()
    table["faults_per_call"] = [3_000.0 if (k == "head" and r == 1024) else 0.0 for k, r in zip(table.kernel, table.rows)]
    m = CostModel(Ceilings(table, "cpu"), "gpt2-small", SHAPE, "fp32", 2)
    fault = m.ceilings.fault_cost("fp32", 2)
    assert m.prefill(1024, logits="all", fresh_pages=5_000).term("page faults").best == pytest.approx(2_000 * fault)
    assert m.prefill(1024, logits="all", fresh_pages=1_000).term("page faults").best == 0


def test_batching_shares_the_weights():
    one, many = model().decode(16), model().decode(16, batch=16)
    assert many.term("block matrices").best == pytest.approx(one.term("block matrices").best)  # flat to 16 rows
    assert many.term("attention").best > one.term("attention").best


def test_a_slow_kernel_is_labelled_so():
    p = model(hardware=False).prefill(1024)
    assert p.term("block matrices").limit == "slow kernel"


def test_bad_passes_are_refused():
    for call in (lambda m: m.prefill(0), lambda m: m.prefill(4, logits="some"), lambda m: m.decode(-1),
                 lambda m: m.decode(16, cache="static"), lambda m: m.decode(16, cache="paged")):
        with pytest.raises(ValueError):
            call(model())


def test_terms_frame_has_shares_that_add_up():
    frame = model().decode(960).frame()
    assert frame.share.sum() == pytest.approx(1.0)
    assert {"term", "best_ms", "median_ms", "share", "limit", "priced_as"} <= set(frame.columns)


def test_a_growing_cache_is_copied_at_chapter_0s_concatenation_of_caches_that_size():
    """Small cache tensors copy more slowly than one long array: where chapter 0 timed the model's own
    concatenation, the copy is priced at it (interpolated over the cache's bytes), not at the streaming copy."""
    table = synthetic.table()
    kv = SHAPE.kv_bytes_per_token
    rows = [dict(table.iloc[0].to_dict(), kernel="cache_concatenation", model="gpt2-small", rows=1, context=c,
                 bytes_per_call=2 * c * kv, best_s=2 * c * kv / 5e9, median_s=2 * c * kv / 4e9,
                 worst_s=2 * c * kv / 3e9) for c in (16, 1024)]
    m = CostModel(Ceilings(pd.concat([table, pd.DataFrame(rows)], ignore_index=True), "cpu"), "gpt2-small", SHAPE,
                  "fp32", 2)
    step = m.decode(512)
    assert step.term("cache copy").best == pytest.approx(2 * 512 * kv / 5e9, rel=1e-6)
    assert step.term("cache copy").median == pytest.approx(2 * 512 * kv / 4e9, rel=1e-6)
    assert "concatenation" in step.term("cache copy").how
    assert model().decode(512).term("cache copy").best == pytest.approx(2 * 512 * kv / synthetic.COPY)  # none: copy



def test_a_batch_step_measured_at_one_sequence_only_widens_as_a_prefill_not_in_proportion():
    """Chapter 0 times some models' decode dispatch at one sequence only; a step of 8 issues the same operations,
    so its dispatch is the one-sequence step's plus a prefill's growth from 1 to 8 rows (chapter 7's price of 8
    users' step once came out at 8 times one sequence's dispatch)."""
    t = synthetic.table()
    dispatch = t.kernel == "dispatch"
    t = t[~(dispatch & (t.pass_kind == "decode") & (t.rows > 1))].copy()
    t.loc[(t.kernel == "dispatch") & (t.pass_kind == "prefill") & (t.rows == 64), ["best_s", "median_s"]] = [6e-3, 6.6e-3]
    c = Ceilings(t, "cpu")
    wide = c.dispatch("gpt2-small", "fp32", 2, "prefill", 8).best - c.dispatch("gpt2-small", "fp32", 2, "prefill", 1).best
    assert wide > 0
    assert c.dispatch("gpt2-small", "fp32", 2, "decode", 8).best == pytest.approx(synthetic.DISPATCH["decode"] + wide)
    assert c.dispatch("gpt2-small", "fp32", 2, "decode", 8).best < 2 * synthetic.DISPATCH["decode"]  # not 8 times
    assert c.dispatch("gpt2-small", "fp32", 2, "decode", 1).best == synthetic.DISPATCH["decode"]
