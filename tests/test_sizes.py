"""GPT-2 at other sizes (chapter 6's sweep): the shapes, the seeded and tied models, the operations they issue,
and their prices from a reference model's synthetic ceilings, every term computed by hand."""

import pandas as pd
import pytest
import torch

from lib import phases, sizes
from lib.costmodel import CostModel
from lib.machine import MODELS, Ceilings
from tests import synthetic

CPU = torch.device("cpu")


def test_sizes_are_gpt2s_published_shapes_smallest_first():
    shapes = list(sizes.SIZES.values())
    assert [s.weight_bytes for s in shapes] == sorted(s.weight_bytes for s in shapes)
    published = {"gpt2-small": (12, 768), "gpt2-medium": (24, 1024), "gpt2-large": (36, 1280), "gpt2-xl": (48, 1600)}
    assert {n: (sizes.SIZES[n].layers, sizes.SIZES[n].d_model) for n in published} == published
    # GPT-2's published parameter counts (embeddings of positions and the biases aside): 124M to 1.56B
    for name, millions in (("gpt2-medium", 354), ("gpt2-large", 773), ("gpt2-xl", 1557)):
        assert sizes.SIZES[name].matmul_params / 1e6 == pytest.approx(millions, rel=0.01)
    assert all(s.head_dim == 64 for n, s in sizes.SIZES.items() if n != "tiny-gpt2")


def test_a_built_size_is_seeded_tied_and_issues_the_predicted_operations():
    a = sizes.build("gpt2-12x128", CPU, torch.float32)
    b = sizes.build("gpt2-12x128", CPU, torch.float32)
    assert torch.equal(a.model.transformer.h[3].mlp.c_fc.weight, b.model.transformer.h[3].mlp.c_fc.weight)
    assert a.model.lm_head.weight.data_ptr() == a.model.transformer.wte.weight.data_ptr()
    assert a.model.transformer.h[0].attn.c_attn.weight.abs().max() <= 0.02
    fixed, per_layer = sizes.operations_line(CPU)
    assert per_layer > 0 and sizes.operations(a) == fixed + 12 * per_layer
    cache, token = sizes.random_cache(a, 40)
    assert cache.get_seq_length() == 40 and phases.cache_bytes(cache) == 40 * sizes.SIZES["gpt2-12x128"].kv_bytes_per_token
    trace = phases.decode(a, token, cache, 3)
    assert len(trace.step_times) == 3 and cache.get_seq_length() == 43
    half = sizes.build("gpt2-12x128", CPU, torch.bfloat16)
    assert half.model.transformer.h[0].mlp.c_proj.weight.dtype == torch.bfloat16


def test_price_of_the_reference_is_the_cost_models_own():
    c = synthetic.ceilings()
    ours = sizes.price_decode(c, "gpt2-small", "gpt2-small", 500, 500, "fp32", 2, 16)
    theirs = CostModel(c, "gpt2-small", MODELS["gpt2-small"][0].with_dtype("fp32"), "fp32", 2).decode(16)
    for term in ("block matrices", "LM head", "dispatch"):
        assert ours.term(term).best == pytest.approx(theirs.term(term).best)
    assert ours.term("dispatch").best == synthetic.DISPATCH["decode"]


def test_a_size_is_priced_by_its_weights_and_its_operations():
    c = synthetic.ceilings()
    shape = sizes.SIZES["gpt2-medium"]
    p = sizes.price_decode(c, "gpt2-medium", "gpt2-small", 1100, 500, "fp32", 2, 16)
    weights = p.term("block matrices").best + p.term("LM head").best
    assert weights == pytest.approx(shape.weight_bytes / synthetic.WEIGHT_RATE)  # its bytes at the kernel's rate
    assert p.term("dispatch").best == pytest.approx(synthetic.DISPATCH["decode"] * 1100 / 500)
    assert "1,100 operations at gpt2-small's cost per operation" in p.term("dispatch").how
    # a prefill of many rows is its FLOPs at the reference's F(rows); of one row, its bytes
    long_ = sizes.price_prefill(c, "gpt2-medium", "gpt2-small", 1100, 500, "fp32", 2, 256)
    assert long_.term("block matrices").best == pytest.approx(2 * shape.layers * shape.block_params * 256 / synthetic.PEAK)
    one = sizes.price_prefill(c, "gpt2-medium", "gpt2-small", 1100, 500, "fp32", 2, 1)
    assert one.term("block matrices").best == pytest.approx(shape.layers * shape.block_params * 4 / synthetic.WEIGHT_RATE)
    # the transition: the weight bytes whose time at the rate equals the floor
    assert sizes.transition_bytes(2e-3, 10e9) == pytest.approx(20e6)


def test_the_cost_per_operation_follows_the_bytes_streamed_between_the_models_measured():
    # two GPT-2s measured: tiny-gpt2 at 1 ms a step of 500 operations, gpt2-small at 2 ms (its weights evict more)
    tiny = synthetic.table("tiny-gpt2")
    tiny.loc[tiny.kernel == "dispatch", ["best_s", "median_s"]] /= synthetic.DISPATCH["decode"] / 1e-3
    c = Ceilings(pd.concat([synthetic.table(), tiny], ignore_index=True), "cpu")
    assert [a[0] for a in sizes.anchors(c, "fp32", 2)] == ["tiny-gpt2", "gpt2-small"]
    small, little = (MODELS[m][0].with_dtype("fp32").weight_bytes for m in ("gpt2-small", "tiny-gpt2"))
    halfway = (small + little) / 2
    best, _, how = sizes.operation_cost(c, halfway, "fp32", 2, "decode", 1, "gpt2-small")
    assert best == pytest.approx((1e-3 + 2e-3) / 2 / 500)  # on the straight line between the two
    assert "tiny-gpt2's" in how and "gpt2-small's" in how
    assert sizes.operation_cost(c, 10 * small, "fp32", 2, "decode", 1, "gpt2-small")[0] == pytest.approx(2e-3 / 500)
    assert sizes.operation_cost(c, 0.0, "fp32", 2, "decode", 1, "gpt2-small")[0] == pytest.approx(1e-3 / 500)
    # a 12-layer size of fewer bytes than GPT-2 small pays less per operation; the reference its own
    narrow = sizes.price_decode(c, "gpt2-12x256", "gpt2-small", 500, 500, "fp32", 2, 16).term("dispatch").best
    assert 1e-3 < narrow < 2e-3
    assert sizes.price_decode(c, "gpt2-small", "gpt2-small", 500, 500, "fp32", 2, 16).term("dispatch").best == 2e-3
    with pytest.raises(ValueError, match="lib.sizes.operations"):
        sizes.price_decode(c, "gpt2-12x256", "gpt2-small", 500, 499, "fp32", 2, 16)


def test_bad_sizes_and_transitions_are_refused_with_what_would_do():
    with pytest.raises(ValueError, match="gpt2-xl"):
        sizes.build("gpt2-huge", CPU, torch.float32)
    with pytest.raises(ValueError, match="positive floor"):
        sizes.transition_bytes(0.0, 10e9)
    tiny = sizes.build("tiny-gpt2", CPU, torch.float32)
    with pytest.raises(ValueError, match="1 to 1023"):
        sizes.random_cache(tiny, 1024)
    assert sizes.memory_needed("gpt2-xl", ["fp32", "bf16"], [16, 512]) > 1.25 * 1.5 * sizes.SIZES["gpt2-xl"].weight_bytes
    assert sizes.free_memory(CPU) > 0


def test_the_floor_a_size_pays_is_timed_alone_and_between_its_own_weights_streams():
    model = sizes.build("tiny-gpt2", CPU, torch.float32)
    paid = sizes.floor_paid(model, 16, repeats=3)
    assert {k: len(v) for k, v in paid.items()} == {"alone": 3, "between": 3, "reads": 3}
    assert all(t > 0 for v in paid.values() for t in v)
    with torch.inference_mode():  # the products compute again afterwards
        assert model.model(torch.zeros(1, 1, dtype=torch.long)).logits.abs().sum() > 0


def test_a_model_chapter_0_measured_itself_is_priced_from_its_own_rows():
    tiny = synthetic.table("tiny-gpt2", long_caches=True)
    tiny.loc[tiny.kernel == "blocks", ["best_s", "median_s"]] = 7e-3  # its small matrices, slower than their bytes
    tiny.loc[tiny.kernel.isin(["attention_decode", "cache_concatenation"]), ["best_s", "median_s"]] = 3e-6  # in cache
    c = Ceilings(pd.concat([synthetic.table(), tiny], ignore_index=True), "cpu")
    p = sizes.price_decode(c, "tiny-gpt2", "gpt2-small", 132, 500, "fp32", 2, 16)
    assert p.term("block matrices").best == 7e-3
    assert "own" in p.term("block matrices").how and "own" in p.term("dispatch").how
    assert sizes.price_prefill(c, "tiny-gpt2", "gpt2-small", 132, 500, "fp32", 2, 4).term("block matrices").best \
        == pytest.approx(7e-3)
    # its cache's attention and copy too: a small cache that stays in the CPU's caches is not read at the rate of
    # the reference's megabytes
    cache = sizes.SIZES["tiny-gpt2"].with_dtype("fp32").kv_bytes_per_token * 16
    assert c.cache_concatenation("tiny-gpt2", "fp32", 2, cache) is not None
    assert p.term("attention").best == pytest.approx(3e-6) and p.term("cache copy").best == pytest.approx(3e-6)
    assert c.attention_decode("gpt2-small", "fp32", 2, cache).best == pytest.approx(cache / synthetic.CACHE_RATE)


def test_the_sweeps_gpu_path_on_a_cpu(monkeypatch):
    """What chapter 6's sweep does differently on a GPU, exercised without one: the free memory is the device's,
    the 16-bit dtype is fp16, priced from a GPU's fp16 rows, and the floor's timings synchronise the device."""
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (7e9, 80e9))
    assert sizes.free_memory(torch.device("cuda")) == 7e9
    gpu = Ceilings(synthetic.table(dtype="fp16").assign(device="cuda", device_name="NVIDIA H100"), "cuda")
    p = sizes.price_decode(gpu, "gpt2-medium", "gpt2-small", 1100, 500, "fp16", 2, 16)
    weights = p.term("block matrices").best + p.term("LM head").best
    assert weights == pytest.approx(sizes.SIZES["gpt2-medium"].with_dtype("fp16").weight_bytes / synthetic.WEIGHT_RATE)
    assert p.term("dispatch").best == pytest.approx(synthetic.DISPATCH["decode"] * 1100 / 500)
    synced = []
    monkeypatch.setattr(sizes, "synchronize", lambda device: synced.append(device))
    sizes.floor_paid(sizes.build("tiny-gpt2", CPU, torch.float32), 8, repeats=2)
    assert len(synced) == 2 * (2 + 2 + 2)  # before and after each timed call: alone, reads, between
