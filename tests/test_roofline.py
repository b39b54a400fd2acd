"""Tests of lib.roofline: the course's printed table, the FLOP and byte conventions, the
source chapter's arithmetic, configs, the hardware table and the machine measurement."""

from __future__ import annotations

import csv
import dataclasses
import math
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from lib import roofline as rl
from lib.roofline import (
    GPT2_SMALL,
    HARDWARE,
    LLAMA3_8B,
    LLAMA3_70B,
    SMOLLM2_135M,
    Hardware,
    ModelShape,
    course_tables,
    decode_cost,
    last_logits_saving,
    prefill_cost,
    request_split,
    roofline,
)

REFERENCE = Path(__file__).parents[1] / "data" / "reference"
COURSE_FILE = REFERENCE / "course_roofline_llama3_8b_h100.txt"
H100 = HARDWARE["H100 SXM"]


def _course_lines() -> list[str]:
    return [line for line in COURSE_FILE.read_text().splitlines() if not line.startswith("#")]


def _facts() -> dict[str, float]:
    with open(REFERENCE / "ch09_facts.csv", newline="") as f:
        rows = [r for r in csv.reader(f) if r and not r[0].startswith("#")]
    return {r[0]: float(r[1]) for r in rows[1:]}


def _same_shape(a: ModelShape, b: ModelShape) -> bool:
    """Equal in every number (the name may differ)."""
    return dataclasses.replace(a, name="x") == dataclasses.replace(b, name="x")


# --- the course's table, every figure ---------------------------------------------------------


def test_course_tables_reproduce_reference_exactly():
    expected = _course_lines()
    got = course_tables().splitlines()
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g == e, f"line {i}: got {g!r}, reference {e!r}"


def _numbers(line: str) -> list[str]:
    return re.findall(r"[-+]?\d+(?:\.\d+)?", line)


def test_row_records_round_to_the_reference_figures():
    """The structured rows (what a notebook tabulates) carry the same numbers as the printout."""
    lines = _course_lines()
    pre_start = lines.index("Prefill of one prompt (roofline lower bound on TTFT)") + 2
    dec_start = [i for i, l in enumerate(lines) if l.startswith("One decode step")][0] + 2
    pre_lines = lines[pre_start:pre_start + len(rl.COURSE_PROMPTS)]
    dec_lines = lines[dec_start:dec_start + len(rl.COURSE_CONTEXTS)]

    def check(value: float, printed: str) -> None:
        decimals = len(printed.split(".")[1]) if "." in printed else 0
        assert f"{value:.{decimals}f}" == printed

    for row, line in zip(rl.prefill_rows(LLAMA3_8B, H100), pre_lines, strict=True):
        p, gflop, gb, inten, tc, tm, tps = _numbers(line)
        assert row["prompt"] == int(p)
        check(row["flops"] / 1e9, gflop)
        check(row["bytes"] / 1e9, gb)
        check(row["intensity"], inten)
        check(row["t_compute_s"] * 1e3, tc)
        check(row["t_memory_s"] * 1e3, tm)
        check(row["tokens_per_s"], tps)
        assert row["bound"] == line.split()[6]
    for row, line in zip(rl.decode_rows(LLAMA3_8B, H100), dec_lines, strict=True):
        c, gflop, gb, inten, tc, tm, tps = _numbers(line)
        assert row["context"] == int(c)
        check(row["flops"] / 1e9, gflop)
        check(row["bytes"] / 1e9, gb)
        check(row["intensity"], inten)
        check(row["t_compute_s"] * 1e3, tc)
        check(row["t_memory_s"] * 1e3, tm)
        check(row["tokens_per_s"], tps)
        assert row["bound"] == "memory"


def test_llama3_8b_counts_by_hand():
    blocks = 32 * (4096 * (2 * 4096 + 2 * 8 * 128) + 3 * 4096 * 14336)
    assert LLAMA3_8B.matmul_params == blocks + 4096 * 128256
    assert LLAMA3_8B.head_dim == 128
    assert LLAMA3_8B.kv_bytes_per_token == 128 * 1024  # GQA: 8 of 32 heads cached
    assert LLAMA3_8B.weight_bytes == 2 * LLAMA3_8B.matmul_params
    assert f"{LLAMA3_8B.matmul_params / 1e9:.2f}" == "7.50"
    assert f"{H100.ridge:.0f}" == "295"


def test_request_split_reproduces_course_line():
    split = request_split(LLAMA3_8B, H100, 2000, 500)
    assert split.decode_steps == 500
    assert f"{split.prefill_s * 1e3:.0f}" == "31"
    assert f"{split.decode_s * 1e3:.0f}" == "2284"
    assert f"{100 * split.decode_share:.0f}" == "99"
    assert split.prefill_share + split.decode_share == pytest.approx(1.0)
    # The course's decode sum: one step per output token at contexts 2000 .. 2499.
    by_hand = sum(roofline(H100, decode_cost(LLAMA3_8B, 1, c)).time for c in range(2000, 2500))
    assert split.decode_s == pytest.approx(by_hand, rel=1e-12)


def test_request_split_first_token_from_prefill_drops_one_step():
    course = request_split(LLAMA3_8B, H100, 2000, 500)
    serving = request_split(LLAMA3_8B, H100, 2000, 500, first_token_from_prefill=True)
    assert serving.decode_steps == 499
    last_step = roofline(H100, decode_cost(LLAMA3_8B, 1, 2499)).time
    assert course.decode_s - serving.decode_s == pytest.approx(last_step)
    assert request_split(LLAMA3_8B, H100, 10, 1, first_token_from_prefill=True).decode_s == 0


# --- the conventions --------------------------------------------------------------------------


def test_prefill_cost_formula_and_causal_halving():
    s = 300
    c = prefill_cost(LLAMA3_8B, s)
    assert c.flops == 2 * LLAMA3_8B.matmul_params * s + 32 * 2 * 4096 * s * s
    assert c.bytes == LLAMA3_8B.weight_bytes + LLAMA3_8B.kv_bytes_per_token * s
    assert c.intensity == c.flops / c.bytes
    assert c.tokens == s
    # Attention grows with the square of the prompt: doubling it quadruples the attention part.
    attn = lambda n: prefill_cost(LLAMA3_8B, n).flops - 2 * LLAMA3_8B.matmul_params * n  # noqa: E731
    assert attn(2 * s) == 4 * attn(s)


def test_prefill_chunk_with_past_and_batch():
    past, chunk = 512, 128
    c = prefill_cost(GPT2_SMALL, chunk, past=past)
    d = GPT2_SMALL.d_model
    assert c.flops == (2 * GPT2_SMALL.matmul_params * chunk
                       + 12 * (2 * d * chunk**2 + 4 * d * chunk * past))
    assert c.bytes == GPT2_SMALL.weight_bytes + GPT2_SMALL.kv_bytes_per_token * (chunk + past)
    b = prefill_cost(GPT2_SMALL, chunk, batch=4)
    one = prefill_cost(GPT2_SMALL, chunk)
    assert b.flops == 4 * one.flops and b.tokens == 4 * chunk
    assert b.bytes == GPT2_SMALL.weight_bytes + 4 * GPT2_SMALL.kv_bytes_per_token * chunk


def test_decode_cost_formula_weights_shared_cache_per_sequence():
    c = decode_cost(SMOLLM2_135M, batch=16, context=512)
    assert c.flops == 16 * (2 * SMOLLM2_135M.matmul_params + 30 * 4 * 576 * 512)
    assert c.bytes == SMOLLM2_135M.weight_bytes + SMOLLM2_135M.kv_bytes_per_token * 512 * 16
    assert c.tokens == 16
    # Batch-1 decode sits near 1 FLOP per byte in BF16, whatever the context.
    assert 0.9 < decode_cost(LLAMA3_8B, 1, 0).intensity < 1.1
    # Intensity grows with batch (weights shared) but stops short of the batch size (KV is not).
    assert decode_cost(LLAMA3_8B, 64, 4096).intensity < 64 * decode_cost(LLAMA3_8B, 1, 4096).intensity
    assert decode_cost(GPT2_SMALL, 1, 0).bytes == GPT2_SMALL.weight_bytes


@pytest.mark.parametrize(
    "call",
    [
        lambda: prefill_cost(GPT2_SMALL, 0),
        lambda: prefill_cost(GPT2_SMALL, -3),
        lambda: prefill_cost(GPT2_SMALL, 1.5),
        lambda: prefill_cost(GPT2_SMALL, True),
        lambda: prefill_cost(GPT2_SMALL, 8, logits="first"),
        lambda: prefill_cost(GPT2_SMALL, 8, past=-1),
        lambda: decode_cost(GPT2_SMALL, 0, 16),
        lambda: decode_cost(GPT2_SMALL, 1, -1),
        lambda: decode_cost(GPT2_SMALL, "4", 16),
        lambda: decode_cost(GPT2_SMALL, 1, 16.0),
        lambda: request_split(GPT2_SMALL, H100, 16, 0),
    ],
)
def test_bad_arguments_raise_value_error(call):
    with pytest.raises(ValueError, match="must be"):
        call()


def test_numpy_integers_are_accepted():
    np = pytest.importorskip("numpy")
    assert decode_cost(GPT2_SMALL, np.int64(2), np.int64(16)) == decode_cost(GPT2_SMALL, 2, 16)
    assert decode_cost(GPT2_SMALL, 1, 0).flops == 2 * GPT2_SMALL.matmul_params


def test_roofline_bound_and_time():
    small = roofline(H100, prefill_cost(LLAMA3_8B, 16))
    big = roofline(H100, prefill_cost(LLAMA3_8B, 4096))
    assert small.bound == "memory" and small.time == small.t_memory > small.t_compute
    assert big.bound == "compute" and big.time == big.t_compute > big.t_memory
    assert small.tokens_per_s == pytest.approx(16 / small.time)
    assert small.fraction_reached(2 * small.time) == pytest.approx(0.5)
    assert rl.prefill_crossover(LLAMA3_8B, H100) == round(H100.ridge)
    assert rl.prefill_crossover(LLAMA3_8B, HARDWARE["A100 80GB"]) == 153
    with pytest.raises(ValueError, match="no FLOP rate"):
        roofline(HARDWARE["Source chapter GPU"], decode_cost(GPT2_SMALL, 1, 16))


def test_attainable_flops_and_regime():
    hw = Hardware("toy", flops=100e9, bandwidth=10e9, source="test")
    assert hw.ridge == 10
    assert rl.attainable_flops(hw, 1) == 10e9
    assert rl.attainable_flops(hw, 1000) == 100e9
    step = roofline(hw, decode_cost(GPT2_SMALL, 1, 512))
    assert step.bound == "memory"
    assert rl.regime(step.time * 1.2, step) == "memory-bound"
    assert rl.regime(step.time * 8, step) == "launch-bound"
    pre = roofline(hw, prefill_cost(GPT2_SMALL, 1024))
    assert rl.regime(pre.time, pre) == "compute-bound"
    with pytest.raises(ValueError):
        rl.regime(0.0, step)


# --- the source chapter's arithmetic ----------------------------------------------------------


def test_last_logits_saving_gpt2_small_about_31_percent():
    predicted = _facts()["last_position_logits_saving_predicted"] / 100  # 0.31
    for prompt in (32, 64, 128, 256):
        assert last_logits_saving(GPT2_SMALL, prompt) == pytest.approx(predicted, abs=0.01)
    # The saving is (S - 1) of S LM-head passes, diluted as attention grows.
    assert last_logits_saving(GPT2_SMALL, 1) == 0
    assert last_logits_saving(GPT2_SMALL, 1024) < last_logits_saving(GPT2_SMALL, 256)
    last = prefill_cost(GPT2_SMALL, 64, logits="last")
    full = prefill_cost(GPT2_SMALL, 64, logits="all")
    assert full.flops - last.flops == 2 * 768 * 50257 * 63
    assert last.bytes == full.bytes  # the LM head's weights are still read once


def test_seven_b_fp16_decode_floor_at_303_gbs():
    facts = _facts()
    gpu = HARDWARE["Source chapter GPU"]
    assert gpu.bandwidth == facts["gpu_memory_bandwidth"] * 1e9
    floor = rl.memory_time(7e9 * 2, gpu)  # 7B parameters, 2 bytes each
    assert round(floor * 1e3) == facts["seven_b_fp16_decode_floor_at_303gbs"] == 46


def test_gpt2_small_fp32_weights_and_decode_floor():
    # 475 MiB in the source counts every parameter; matmul weights leave out the position table,
    # biases and norms (about 1 per cent).
    mib = GPT2_SMALL.weight_bytes / 2**20
    assert mib == pytest.approx(_facts()["gpt2_small_fp32_weight_bytes"], rel=0.01)
    assert GPT2_SMALL.matmul_params == 12 * (4 * 768**2 + 2 * 768 * 3072) + 768 * 50257
    floor = rl.decode_floor(GPT2_SMALL, HARDWARE["Source chapter GPU"], context=16)
    assert 1.5e-3 < floor < 1.7e-3  # the source: 1.6 ms at the shortest context


def test_kv_bytes_per_token_mha_versus_gqa():
    assert GPT2_SMALL.kv_bytes_per_token == 2 * 12 * 12 * 64 * 4
    assert SMOLLM2_135M.kv_bytes_per_token == 2 * 30 * 3 * 64 * 2
    # Per layer and value byte, GQA with 3 of 9 heads caches a third of what MHA would.
    mha = dataclasses.replace(SMOLLM2_135M, kv_heads=9)
    assert mha.kv_bytes_per_token == 3 * SMOLLM2_135M.kv_bytes_per_token


def test_word_factory_machine_balance():
    with open(REFERENCE / "wordfactory_part3_cpu.csv", newline="") as f:
        rows = [r for r in csv.reader(line for line in f if not line.startswith("#"))]
    machine = {r[2]: float(r[3]) for r in rows if r[0] == "machine"}
    hw = Hardware("word factory CPU", machine["matmul_gflop_s"] * 1e9,
                  machine["memory_bandwidth_gb_s"] * 1e9, "seed 003")
    assert round(hw.ridge, 1) == machine["balance_flop_per_byte"]


# --- shapes and configs -----------------------------------------------------------------------


def test_from_config_gpt2_matches_preset():
    from transformers import GPT2Config

    shape = ModelShape.from_config(GPT2Config(), bytes_per_param=4)
    assert _same_shape(shape, GPT2_SMALL)
    assert shape.d_ff == 4 * 768 and not shape.gated_ffn and shape.tied_lm_head
    assert shape.matmul_params == GPT2_SMALL.matmul_params
    # No dtype in the config and none given: FP32.
    assert ModelShape.from_config(GPT2Config()).bytes_per_param == 4
    explicit = ModelShape.from_config(GPT2Config(n_inner=1000, n_layer=2), name="tiny")
    assert explicit.name == "tiny" and explicit.d_ff == 1000 and explicit.layers == 2


def test_from_config_llama_smollm2_matches_preset():
    from transformers import LlamaConfig

    config = LlamaConfig(
        num_hidden_layers=30, hidden_size=576, num_attention_heads=9, num_key_value_heads=3,
        intermediate_size=1536, vocab_size=49152, tie_word_embeddings=True,
    )
    shape = ModelShape.from_config(config, name="SmolLM2-135M", bytes_per_param=torch.bfloat16)
    assert shape == SMOLLM2_135M
    assert shape.dtype_name == "BF16"
    assert shape.kv_bytes_per_token == SMOLLM2_135M.kv_bytes_per_token
    # A model object works too (its .config is read).
    assert _same_shape(ModelShape.from_config(SimpleNamespace(config=config), bytes_per_param=2),
                       SMOLLM2_135M)


def test_from_config_llama3_8b_matches_preset():
    from transformers import LlamaConfig

    config = LlamaConfig(
        num_hidden_layers=32, hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
        intermediate_size=14336, vocab_size=128256, tie_word_embeddings=False,
    )
    assert _same_shape(ModelShape.from_config(config, bytes_per_param="bf16"), LLAMA3_8B)


def test_from_config_rejects_unknown_types():
    from transformers import BertConfig, LlamaConfig

    with pytest.raises(ValueError, match="'gpt2'.*'llama'"):
        ModelShape.from_config(BertConfig())
    with pytest.raises(ValueError, match="head_dim"):
        ModelShape.from_config(LlamaConfig(hidden_size=1024, num_attention_heads=16, head_dim=128))


def test_presets_and_with_dtype():
    assert LLAMA3_70B.head_dim == 128 and LLAMA3_70B.kv_bytes_per_token == 2 * 80 * 8 * 128 * 2
    assert f"{LLAMA3_70B.weight_bytes / 1e9:.0f}" == "139"  # more than one 80 GB GPU holds
    half = GPT2_SMALL.with_dtype(torch.float16)
    assert half.bytes_per_param == 2 and half.dtype_name == "FP16"
    assert half.weight_bytes == GPT2_SMALL.weight_bytes / 2
    assert half.matmul_params == GPT2_SMALL.matmul_params
    assert GPT2_SMALL.with_dtype(4) == GPT2_SMALL
    assert set(rl.PRESETS) == {"Llama-3-8B", "Llama-3-70B", "GPT-2 small", "SmolLM2-135M"}
    with pytest.raises(ValueError, match="unknown dtype"):
        GPT2_SMALL.with_dtype("float7")
    with pytest.raises(ValueError, match="multiple of"):
        ModelShape("bad", 2, 100, 3, 3, 400, 10)
    with pytest.raises(ValueError, match="kv_heads"):
        ModelShape("bad", 2, 96, 12, 5, 400, 10)
    with pytest.raises(ValueError, match="positive integer"):
        ModelShape("bad", 0, 96, 12, 12, 400, 10)


# --- the hardware table -----------------------------------------------------------------------


def test_hardware_table_has_sources_and_dense_peaks():
    for name, hw in HARDWARE.items():
        assert hw.name == name
        assert hw.source.strip()
        assert hw.bandwidth > 0
        if math.isfinite(hw.flops):
            assert hw.flops < 1.5e15  # dense BF16 peaks, not the doubled sparse figures
    assert HARDWARE["H100 SXM"].flops == 989e12 and HARDWARE["H100 SXM"].bandwidth == 3.35e12
    assert HARDWARE["H200"].flops == 989e12 and HARDWARE["H200"].bandwidth == 4.8e12
    a100 = HARDWARE["A100 80GB"]
    assert a100.flops == 312e12
    # The datasheet's 2,039 GB/s and the course's rounded 2.04 TB/s give the same ridge.
    assert round(a100.ridge) == round(312e12 / 2.04e12) == 153


def test_try_it_answers_a100_and_70b():
    a100 = HARDWARE["A100 80GB"]
    assert f"{rl.decode_floor(LLAMA3_8B, a100) * 1e3:.2f}" == "7.36"
    assert f"{rl.decode_floor(LLAMA3_70B, H100) * 1e3:.1f}" == "41.5"
    # Prefill leaves the memory roof sooner on the A100: 256 tokens is already compute-bound.
    assert roofline(a100, prefill_cost(LLAMA3_8B, 256)).bound == "compute"
    assert roofline(H100, prefill_cost(LLAMA3_8B, 256)).bound == "memory"


# --- measuring this machine -------------------------------------------------------------------


def test_measure_machine_cpu_small():
    detail = rl.measure_machine_detail("cpu", torch.float32, matvec_bytes=8 << 20, matmul_n=128,
                                       repeats=3, warmup=1)
    hw = detail.hardware
    assert isinstance(hw, Hardware)
    for value in (hw.flops, hw.bandwidth, hw.ridge):
        assert math.isfinite(value) and value > 0
    assert hw.ridge == hw.flops / hw.bandwidth
    assert detail.bandwidth_low <= hw.bandwidth <= detail.bandwidth_high
    assert detail.flops_low <= hw.flops <= detail.flops_high
    assert detail.matvec_bytes == 8 << 20 and detail.matmul_n == 128
    assert "measured" in hw.source
    quick = rl.measure_machine(torch.device("cpu"), matvec_bytes=1 << 20, matmul_n=64, repeats=1)
    assert isinstance(quick, Hardware) and quick.bandwidth > 0
    named = rl.measure_machine_detail("auto" if not torch.cuda.is_available() else "cpu", "bf16",
                                      matvec_bytes=1 << 20, matmul_n=32, repeats=1)
    assert named.dtype == "bfloat16" and named.hardware.flops > 0


@pytest.mark.parametrize("device", ["tpu", "gpu", "", "meta"])
def test_measure_machine_unknown_device(device):
    with pytest.raises(ValueError, match="device"):
        rl.measure_machine(device, matvec_bytes=1 << 20, matmul_n=16, repeats=1)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_measure_machine_cuda_absent():
    with pytest.raises(ValueError, match="CUDA is not available"):
        rl.measure_machine("cuda", matvec_bytes=1 << 20, matmul_n=16, repeats=1)


def test_measure_machine_bad_dtype():
    with pytest.raises(ValueError, match="floating-point"):
        rl.measure_machine("cpu", torch.int32, matvec_bytes=1 << 20, matmul_n=16, repeats=1)
    with pytest.raises(ValueError, match="unknown dtype"):
        rl.measure_machine("cpu", "fp12", matvec_bytes=1 << 20, matmul_n=16, repeats=1)


def test_measure_machine_unsupported_dtype_caught_early(monkeypatch):
    """A dtype the device cannot multiply fails on the tiny probe, with a clear message."""
    real_mv = torch.Tensor.__matmul__

    def refuse(a, b):
        if a.dtype == torch.float16:
            raise RuntimeError('"addmm_impl_cpu_" not implemented for \'Half\'')
        return real_mv(a, b)

    monkeypatch.setattr(torch.Tensor, "__matmul__", refuse)
    with pytest.raises(rl.UnsupportedDtype, match="not supported on cpu"):
        rl.measure_machine("cpu", torch.float16, matvec_bytes=1 << 20, matmul_n=16, repeats=1)
