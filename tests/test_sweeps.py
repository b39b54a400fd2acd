import numpy as np
import pytest
import torch

from lib import sweeps


def test_fit_floor_recovers_a_line():
    tokens = np.array([1, 4, 16, 64, 256])
    fit = sweeps.fit_floor(tokens, 0.012 + 0.0005 * tokens)
    assert fit.fixed_s == pytest.approx(0.012) and fit.per_token_s == pytest.approx(0.0005)
    assert fit.knee_tokens == pytest.approx(24) and fit.max_relative_error < 1e-9
    assert fit.predict([100])[0] == pytest.approx(0.062)


def test_fit_floor_bad_input():
    with pytest.raises(ValueError, match="two or more prompt lengths"):
        sweeps.fit_floor([8, 8], [0.1, 0.2])
    with pytest.raises(ValueError, match="positive"):
        sweeps.fit_floor([1, 2], [0.1, -0.2])


def test_prefill_sweep_rows_and_budget(tiny):
    table = sweeps.prefill_sweep(tiny, [1, 8, 64], repeats=2)
    assert table["prompt_tokens"].tolist() == [1, 8, 64]
    assert (table["status"] == "ok").all()
    assert (table["low_s"] <= table["median_s"]).all() and (table["median_s"] <= table["high_s"]).all()
    skipped = sweeps.prefill_sweep(tiny, [1, 1000], repeats=1, budget_s=1e-9)
    assert skipped["status"].iloc[1].startswith("skipped: predicted")
    assert np.isnan(skipped["median_s"].iloc[1]) and skipped["predicted_s"].iloc[1] > 0


def test_prefill_sweep_repeats_short_passes_within_min_seconds(tiny):
    # A tiny model's passes take well under a millisecond: a second of passes is more than five of them,
    # so every length gets max_repeats; with no min_seconds, just `repeats`.
    many = sweeps.prefill_sweep(tiny, [1, 8], repeats=1, warmup=0, min_seconds=1.0, max_repeats=4)
    assert many["passes"].tolist() == [4, 4]
    few = sweeps.prefill_sweep(tiny, [1, 8], repeats=2, warmup=0)
    assert few["passes"].tolist() == [2, 2]


def test_prefill_sweep_refuses_too_long(tiny):
    with pytest.raises(ValueError, match="positions"):
        sweeps.prefill_sweep(tiny, [2000])


def test_decode_sweep(tiny):
    table = sweeps.decode_sweep(tiny, [4, 32], steps=5, runs=2)
    assert len(table) == 4 and set(table["steps"]) == {5}
    assert (table["median_s"] > 0).all()
    assert table[["context_tokens", "run"]].values.tolist() == [[4, 1], [4, 2], [32, 1], [32, 2]]
    per_token = 2 * tiny.config.n_layer * tiny.config.n_embd * 4
    assert table.loc[table.context_tokens == 32, "cache_bytes"].iloc[0] == (32 + 5) * per_token
    with pytest.raises(ValueError, match="positions"):
        sweeps.decode_sweep(tiny, [1000], steps=40)


def test_decode_sweep_keeps_its_caches_between_calls(tiny):
    kept = {}
    sweeps.decode_sweep(tiny, [4, 32], steps=3, runs=1, caches=kept)
    first = {c: id(kv) for c, (kv, _) in kept.items()}
    again = sweeps.decode_sweep(tiny, [4, 32], steps=3, runs=1, caches=kept)
    assert {c: id(kv) for c, (kv, _) in kept.items()} == first and set(first) == {4, 32}
    assert again.cache_bytes.tolist() == sorted(again.cache_bytes.tolist())  # each cache at its own context


def test_batched_decode_sweep_and_out_of_memory(tiny, monkeypatch):
    table = sweeps.batched_decode_sweep(tiny, 16, [1, 3], steps=3)
    assert table["status"].tolist() == ["ok", "ok"]
    per_token = 2 * tiny.config.n_layer * tiny.config.n_embd * 4
    assert table["cache_bytes"].tolist() == [(16 + 3) * per_token, 3 * (16 + 3) * per_token]

    real = sweeps.phases.decode

    def oom_for_big(model, tokens, cache, steps, **kw):
        if tokens.shape[0] > 2:
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 10 GB")
        return real(model, tokens, cache, steps, **kw)

    monkeypatch.setattr(sweeps.phases, "decode", oom_for_big)
    table = sweeps.batched_decode_sweep(tiny, 16, [1, 4, 2], steps=2)
    assert table["status"].tolist() == ["ok", "out of memory", "ok"]


def test_decode_sweep_with_a_cache_built_in_another_dtype(tiny):
    from lib.models import load_model

    bf16 = load_model("tiny-gpt2", "cpu", torch.bfloat16)
    table = sweeps.decode_sweep(bf16, [8], steps=3, runs=1, prefill_model=tiny)
    per_token_bf16 = 2 * tiny.config.n_layer * tiny.config.n_embd * 2
    assert table["cache_bytes"].iloc[0] == (8 + 3) * per_token_bf16


def test_sweeps_over_a_static_cache(tiny):
    per_token = 2 * tiny.config.n_layer * tiny.config.n_embd * 4
    table = sweeps.decode_sweep(tiny, [4, 32], steps=5, runs=2, cache="static")
    assert len(table) == 4
    assert table.loc[table.context_tokens == 32, "cache_bytes"].iloc[0] == (32 + 5) * per_token
    batched = sweeps.batched_decode_sweep(tiny, 16, [1, 3], steps=3, cache="static")
    assert batched["status"].tolist() == ["ok", "ok"]
    assert batched["cache_bytes"].tolist() == [(16 + 3) * per_token, 3 * (16 + 3) * per_token]
    with pytest.raises(ValueError, match="dynamic"):
        sweeps.decode_sweep(tiny, [4], steps=2, cache="paged")


def test_floor_and_knee_on_a_cpu_like_curve():
    # time rises from the second token (no flat floor); time per token stops falling near 128
    tokens = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    ms = np.array([42.0, 60.7, 73.7, 81.9, 94.2, 103.0, 147.7, 227.1, 414.0, 757.7])
    floor = sweeps.floor_and_knee(tokens, ms / 1e3, ms / 1e3 - 0.001, ms / 1e3 + 0.002, margin=0.25)
    assert floor.floor_tokens == 1 and floor.floor_s == pytest.approx(0.042)
    assert floor.floor_low_s == pytest.approx(0.041) and floor.floor_high_s == pytest.approx(0.044)
    assert floor.flat_until_tokens == 1
    assert floor.best_tokens == 512 and floor.best_per_token_s == pytest.approx(0.7577 / 512)
    assert floor.knee_tokens == 128 and floor.knee_s == pytest.approx(0.2271) and floor.knee_confirmed
    wider = sweeps.floor_and_knee(tokens, ms / 1e3, margin=0.6)  # a wider margin moves both, as stated
    assert wider.flat_until_tokens == 2 and wider.knee_tokens == 64


def test_floor_and_knee_on_a_gpu_like_curve():
    # the reference GPU: flat to 256 tokens, where time per token has also stopped falling
    tokens = [1, 16, 128, 256, 512, 1024]
    ms = np.array([11.85, 12.05, 12.15, 13.8, 24.45, 48.55])
    floor = sweeps.floor_and_knee(tokens, ms, [11.5, 11.6, 11.8, 12.2, 22.6, 45.1],
                                  [12.2, 12.5, 12.5, 15.4, 26.3, 52.0], margin=0.25)
    assert floor.flat_until_tokens == 256 and floor.knee_tokens == 256 and floor.knee_confirmed
    # still falling per token at the longest prompt: the knee is the last point, not confirmed
    wide = sweeps.floor_and_knee(tokens, ms, np.array(ms) * 0.5, np.array(ms) * 1.5, margin=0.25)
    assert wide.flat_until_tokens == 256, "the floor's spread does not lengthen it: medians against its median"
    last = sweeps.floor_and_knee([1, 2, 4], [1.0, 1.0, 1.0])
    assert last.flat_until_tokens == 4 and last.knee_tokens == 4 and not last.knee_confirmed


def test_floor_and_knee_skips_nan_and_sorts():
    floor = sweeps.floor_and_knee([4, 1, 2, 8], [0.02, 0.01, np.nan, 0.04])
    assert floor.floor_tokens == 1 and floor.flat_until_tokens == 1 and floor.knee_tokens == 4


def test_floor_and_knee_bad_input():
    with pytest.raises(ValueError, match="two or more distinct"):
        sweeps.floor_and_knee([8, 8], [0.1, 0.2])
    with pytest.raises(ValueError, match="two or more distinct"):
        sweeps.floor_and_knee([1, 2], [0.1, np.nan])
    with pytest.raises(ValueError, match="positive"):
        sweeps.floor_and_knee([1, 2], [0.1, -0.2])
    with pytest.raises(ValueError, match="low_s <= seconds"):
        sweeps.floor_and_knee([1, 2], [0.1, 0.2], [0.1, 0.3], [0.1, 0.3])
    with pytest.raises(ValueError, match="margin"):
        sweeps.floor_and_knee([1, 2], [0.1, 0.2], margin=-1)


def test_cache_costs_time_attention_and_growth(tiny):
    import dataclasses

    from lib.shapes import ModelShape

    shape = ModelShape.from_config(tiny.config, name="tiny")
    costs = sweeps.cache_costs(shape, 2, 16, tiny.device, repeats=2, warmup=1)
    assert set(costs) == {"attention", "concatenation"}
    assert all(len(t.samples) == 2 and min(t.samples) > 0 for t in costs.values())
    gqa = dataclasses.replace(shape, heads=4, kv_heads=2)
    assert set(sweeps.cache_costs(gqa, 1, 8, tiny.device, repeats=1)) == {"attention", "concatenation"}
    with pytest.raises(ValueError, match="at least 1"):
        sweeps.cache_costs(shape, 0, 16, tiny.device)


def test_cache_costs_flush_before_each_concatenation_only(tiny, monkeypatch):
    from lib.shapes import ModelShape

    befores = {}
    real = sweeps.measure

    def recording(fn, device, **options):
        befores[fn.__name__] = options.get("before")
        return real(fn, device, **options)

    monkeypatch.setattr(sweeps, "measure", recording)
    shape = ModelShape.from_config(tiny.config, name="tiny")
    sweeps.cache_costs(shape, 1, 8, tiny.device, repeats=1, flush_bytes=1 << 20)
    assert befores["attention"] is None and callable(befores["concatenation"])  # attention reads what was written
    sweeps.cache_costs(shape, 1, 8, tiny.device, repeats=1)
    assert befores["concatenation"] is None
    with pytest.raises(ValueError, match="flush_bytes"):
        sweeps.cache_costs(shape, 1, 8, tiny.device, flush_bytes=-1)


def test_cache_costs_use_cuda_events_exactly_on_a_gpu(tiny, monkeypatch):
    from lib.shapes import ModelShape

    asked = []
    real = sweeps.measure

    def recording(fn, device, **options):
        asked.append(options["use_cuda_events"])
        return real(fn, device, **options)

    monkeypatch.setattr(sweeps, "measure", recording)
    sweeps.cache_costs(ModelShape.from_config(tiny.config, name="tiny"), 1, 8, tiny.device, repeats=1)
    assert asked == [tiny.device.type == "cuda"] * 2


def test_cublas_allocation_failure_counts_as_out_of_memory():
    assert sweeps._out_of_memory(RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate"))
    assert sweeps._out_of_memory(MemoryError())
    assert not sweeps._out_of_memory(RuntimeError("shape mismatch"))
