"""This machine's ceilings: every kernel measured, rates from counted bytes and FLOPs, clear errors."""


import pandas as pd
import pytest
import torch

from lib import machine
from lib.device import UnsupportedDtype
from lib.shapes import GPT2_SMALL, ModelShape

TINY = ModelShape("tiny", 2, 64, 4, 2, 128, 256, gated_ffn=True, bytes_per_param=4)


def test_sizes_policy_is_one_for_every_chapter():
    full, quick = machine.sizes("cpu"), machine.sizes("cpu", quick=True)
    assert full.stream_bytes >= 256 << 20 and quick.stream_bytes < full.stream_bytes
    assert quick.repeats <= full.repeats


def test_model_matmuls_hold_exactly_the_shape_weights():
    weights = machine.model_matmuls(TINY, torch.device("cpu"), torch.float32)
    assert sum(w.numel() for w in weights) == TINY.matmul_params
    gpt2 = GPT2_SMALL
    dims = machine.model_matmuls(ModelShape("g", 1, 64, 4, 4, 256, 100, gated_ffn=False), torch.device("cpu"),
                                 torch.float32)
    assert len(dims) == 4 + 2 + 1 and gpt2.gated_ffn is False


@pytest.mark.slow
def test_measure_ceilings_cpu_quick():
    table = machine.measure_ceilings("cpu", ("fp32",), (1,), shape=TINY, quick=True)
    assert set(table.kernel) == {"read", "copy", "triad", "matvec", "matmul", "launch"}
    assert (table.status == "ok").all() and (table.threads == 1).all()
    read = table[table.kernel == "read"].iloc[0]
    assert read.bandwidth_gb_s == pytest.approx(read.bytes_per_call / read.median_s / 1e9)
    assert read.bandwidth_gb_s_low <= read.bandwidth_gb_s <= read.bandwidth_gb_s_high
    triad = table[table.kernel == "triad"].iloc[0]
    assert triad.bytes_per_call == 3 * read.bytes_per_call
    mm = table[table.kernel == "matmul"].iloc[0]
    assert mm.flops_per_call == 2 * machine.sizes("cpu", True).matmul_n ** 3 and mm.gflop_s > 0
    ceilings = machine.Ceilings(table)
    hw = ceilings.hardware("fp32", 1, bandwidth="triad")
    assert hw.bandwidth == pytest.approx(triad.bandwidth_gb_s * 1e9) and hw.flops == pytest.approx(mm.gflop_s * 1e9)
    assert ceilings.threads("fp32") == [1] and ceilings.launch_s("fp32", 1) > 0
    with pytest.raises(ValueError, match="measured no"):
        ceilings.bandwidth("bf16")


def test_unsupported_dtype_is_a_row_not_a_crash(monkeypatch):
    def refuse(name, device):
        raise UnsupportedDtype("no fp16 here")
    monkeypatch.setattr(machine, "resolve_dtype", refuse)
    table = machine.measure_ceilings("cpu", ("fp16",), (1,), shape=TINY, quick=True)
    assert len(table) == 1 and table.status.iloc[0].startswith("unsupported")


@pytest.mark.parametrize("device", ["tpu", "gpu", ""])
def test_unknown_device(device):
    with pytest.raises(ValueError, match="device"):
        machine.measure_ceilings(device, quick=True)


def test_hardware_support_reads_cpu_flags(monkeypatch):
    monkeypatch.setattr(machine, "cpu_flags", lambda: {"avx2"})
    assert machine.hardware_support("cpu", torch.float32)
    assert not machine.hardware_support("cpu", torch.bfloat16)
    monkeypatch.setattr(machine, "cpu_flags", lambda: {"avx512_bf16"})
    assert machine.hardware_support("cpu", torch.bfloat16)


def test_load_ceilings_says_which_chapter_to_run(monkeypatch, tmp_path):
    monkeypatch.setattr("lib.results.load_table", lambda *a, **k: None)
    with pytest.raises(FileNotFoundError, match="00_machine"):
        machine.load_ceilings()


def test_launch_floor_scales_with_the_blocks_of_the_model():
    base = dict(dtype="fp32", threads=2, status="ok", device_name="cpu", hardware_support=True)
    table = pd.DataFrame([dict(base, kernel="launch", median_s=0.012, layers=12)])
    ceilings = machine.Ceilings(table)
    assert ceilings.launch_s("fp32", 2) == pytest.approx(0.012)
    assert ceilings.launch_s("fp32", 2, layers=30) == pytest.approx(0.030)
    assert ceilings.launch_s("fp32", 2, layers=2) == pytest.approx(0.002)
