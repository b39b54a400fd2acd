import pytest
import torch

from lib import device as d


def test_auto_and_cpu():
    assert d.resolve_device("cpu") == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert d.resolve_device("auto").type == expected
    assert d.resolve_device(torch.device("cpu")).type == "cpu"


def test_unknown_device_lists_choices():
    with pytest.raises(ValueError, match=r"unknown device 'tpu'.*auto, cpu, cuda"):
        d.resolve_device("tpu")
    with pytest.raises(ValueError, match="must be a string"):
        d.resolve_device(3)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_gpu_is_refused_early():
    with pytest.raises(ValueError, match="CUDA is not available"):
        d.resolve_device("cuda")


def test_dtypes():
    cpu = torch.device("cpu")
    assert d.resolve_dtype("fp32", cpu) is torch.float32
    assert d.resolve_dtype("bf16", cpu) is torch.bfloat16
    assert d.resolve_dtype(torch.float32, cpu) is torch.float32
    assert d.dtype_name(torch.bfloat16) == "bf16"
    with pytest.raises(ValueError, match="dtype 'int4' is not one a model runs in.*fp32, bf16, fp16"):
        d.resolve_dtype("int4", cpu)
    with pytest.raises(ValueError, match="takes the chapter's resolved torch.device"):
        d.resolve_dtype("fp32", "cpu")  # a string would be resolved a second time


def test_unsupported_dtype_is_a_value_error_with_advice(monkeypatch):
    def refuse(*args, **kwargs):
        raise RuntimeError('"addmm_impl_cpu_" not implemented for Half')

    monkeypatch.setattr(torch.Tensor, "__matmul__", refuse)
    with pytest.raises(d.UnsupportedDtype, match="fp16 matrix products are not supported.*use fp32"):
        d.resolve_dtype("fp16", torch.device("cpu"))


def test_describe_environment():
    facts = d.describe_environment(torch.device("cpu"), torch.float32, "tiny-gpt2")
    assert facts["dtype"] == "fp32" and facts["model"] == "tiny-gpt2"
    assert facts["torch_threads"] >= 1 and facts["torch"] != "not installed"
    assert facts["device_name"] and facts["cpu"] and facts["cpu_count"] >= 1


@pytest.mark.cuda
def test_cuda_device_and_fp16():
    assert d.resolve_device("cuda").type == "cuda"
    assert d.resolve_dtype("fp16", d.resolve_device("cuda")) is torch.float16


def test_thread_counts_and_use_threads():
    cpu = torch.device("cpu")
    assert d.thread_counts(cpu) == sorted({d.ALL_THREADS, 1}, reverse=True)
    assert d.thread_counts(cpu, [2, 1]) == [2, 1]
    with pytest.raises(ValueError, match="whole numbers of at least 1"):
        d.thread_counts(cpu, [0])
    before = torch.get_num_threads()
    with d.use_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="at least 1"):
        with d.use_threads(0):
            pass


def test_machine_identity_names_the_instruction_sets(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(d, "cpu_flags", lambda: {"avx2", "fma", "sse2", "avx512_bf16"})
    assert d.machine_identity(cpu)["cpu_flags"] == "avx2 avx512_bf16 fma"
    monkeypatch.setattr(d, "cpu_flags", lambda: {"avx2", "fma"})
    assert d.machine_identity(cpu)["cpu_flags"] == "avx2 fma"  # the same name, other kernels
