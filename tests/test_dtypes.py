"""The one dtype vocabulary."""

import pytest
import torch

from lib import dtypes


def test_names_aliases_and_torch_dtypes_agree():
    for name in ("bf16", "bfloat16", "BF16", "torch.bfloat16", torch.bfloat16):
        assert dtypes.lookup(name).short == "bf16"
    assert dtypes.dtype_name(torch.float32) == "fp32"
    assert dtypes.bytes_and_label("fp16") == (2, "FP16")
    assert dtypes.bytes_and_label(torch.float8_e4m3fn) == (1, "FP8")
    assert dtypes.bytes_and_label(0.5) == (0.5, "4-bit")
    assert set(dtypes.MODEL_DTYPES) == {"fp32", "bf16", "fp16"}


def test_unknown_and_nonsense_dtypes_say_what_is_known():
    with pytest.raises(ValueError, match="fp32"):
        dtypes.lookup("fp12")
    with pytest.raises(ValueError, match="positive"):
        dtypes.bytes_and_label(0)
    with pytest.raises(TypeError):
        dtypes.bytes_and_label([2])
