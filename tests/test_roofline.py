"""Roofline arithmetic: costs, bounds, hardware table, request split, reference facts."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from lib import roofline as rl
from lib.roofline import HARDWARE, Hardware, decode_cost, last_logits_saving, prefill_cost, request_split
from lib.shapes import GPT2_SMALL, LLAMA3_8B, LLAMA3_70B, SMOLLM2_135M

REFERENCE = Path(__file__).parents[1] / "data" / "reference"
COURSE_FILE = REFERENCE / "course_roofline_llama3_8b_h100.txt"
H100 = HARDWARE["H100 SXM"]

def _facts() -> dict[str, float]:
    with open(REFERENCE / "ch09_facts.csv", newline="") as f:
        rows = [r for r in csv.reader(f) if r and not r[0].startswith("#")]
    return {r[0]: float(r[1]) for r in rows[1:]}



def test_request_split_first_token_from_prefill_drops_one_step():
    course = request_split(LLAMA3_8B, H100, 2000, 500)
    serving = request_split(LLAMA3_8B, H100, 2000, 500, first_token_from_prefill=True)
    assert serving.decode_steps == 499
    last_step = rl.bound(H100, decode_cost(LLAMA3_8B, 1, 2499)).time
    assert course.decode_s - serving.decode_s == pytest.approx(last_step)
    assert request_split(LLAMA3_8B, H100, 10, 1, first_token_from_prefill=True).decode_s == 0


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
    small = rl.bound(H100, prefill_cost(LLAMA3_8B, 16))
    big = rl.bound(H100, prefill_cost(LLAMA3_8B, 4096))
    assert small.limit == "memory" and small.time == small.t_memory > small.t_compute
    assert big.limit == "compute" and big.time == big.t_compute > big.t_memory
    assert small.tokens_per_s == pytest.approx(16 / small.time)
    assert small.fraction_reached(2 * small.time) == pytest.approx(0.5)
    assert rl.prefill_crossover(LLAMA3_8B, H100) == round(H100.ridge)
    assert rl.prefill_crossover(LLAMA3_8B, HARDWARE["A100 80GB"]) == 153
    with pytest.raises(ValueError, match="no FLOP rate"):
        rl.bound(HARDWARE["Source chapter GPU"], decode_cost(GPT2_SMALL, 1, 16))


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


def test_word_factory_machine_balance():
    with open(REFERENCE / "wordfactory_part3_cpu.csv", newline="") as f:
        rows = [r for r in csv.reader(line for line in f if not line.startswith("#"))]
    machine = {r[2]: float(r[3]) for r in rows if r[0] == "machine"}
    hw = Hardware("word factory CPU", machine["matmul_gflop_s"] * 1e9,
                  machine["memory_bandwidth_gb_s"] * 1e9, "seed 003")
    assert round(hw.ridge, 1) == machine["balance_flop_per_byte"]


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
    assert rl.bound(a100, prefill_cost(LLAMA3_8B, 256)).limit == "compute"
    assert rl.bound(H100, prefill_cost(LLAMA3_8B, 256)).limit == "memory"
