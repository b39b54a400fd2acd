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
    assert d.resolve_dtype("fp32") is torch.float32
    assert d.resolve_dtype("bf16", "cpu") is torch.bfloat16
    assert d.resolve_dtype(torch.float32) is torch.float32
    assert d.dtype_name(torch.bfloat16) == "bf16"
    with pytest.raises(ValueError, match="dtype 'int4' is not one a model runs in.*fp32, bf16, fp16"):
        d.resolve_dtype("int4")


def test_unsupported_dtype_is_a_value_error_with_advice(monkeypatch):
    def refuse(*args, **kwargs):
        raise RuntimeError('"addmm_impl_cpu_" not implemented for Half')

    monkeypatch.setattr(torch.Tensor, "__matmul__", refuse)
    with pytest.raises(d.UnsupportedDtype, match="fp16 matrix products are not supported.*use fp32"):
        d.resolve_dtype("fp16", "cpu")


def test_describe_environment():
    facts = d.describe_environment("cpu", torch.float32, "tiny-gpt2")
    assert facts["dtype"] == "fp32" and facts["model"] == "tiny-gpt2"
    assert facts["torch_threads"] >= 1 and facts["torch"] != "not installed"
    assert facts["device_name"]


@pytest.mark.cuda
def test_cuda_device_and_fp16():
    assert d.resolve_device("cuda").type == "cuda"
    assert d.resolve_dtype("fp16", "cuda") is torch.float16
