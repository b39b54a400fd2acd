"""Model shapes: counts by hand, configs read, presets."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from lib.roofline import HARDWARE
from lib.shapes import GPT2_SMALL, LLAMA3_8B, LLAMA3_70B, PRESETS, SMOLLM2_135M, ModelShape

REFERENCE = Path(__file__).parents[1] / "data" / "reference"
COURSE_FILE = REFERENCE / "course_roofline_llama3_8b_h100.txt"
H100 = HARDWARE["H100 SXM"]

def _same_shape(a: ModelShape, b: ModelShape) -> bool:
    """Equal in every number (the name may differ)."""
    return dataclasses.replace(a, name="x") == dataclasses.replace(b, name="x")



def test_llama3_8b_counts_by_hand():
    blocks = 32 * (4096 * (2 * 4096 + 2 * 8 * 128) + 3 * 4096 * 14336)
    assert LLAMA3_8B.matmul_params == blocks + 4096 * 128256
    assert LLAMA3_8B.head_dim == 128
    assert LLAMA3_8B.kv_bytes_per_token == 128 * 1024  # GQA: 8 of 32 heads cached
    assert LLAMA3_8B.weight_bytes == 2 * LLAMA3_8B.matmul_params
    assert f"{LLAMA3_8B.matmul_params / 1e9:.2f}" == "7.50"
    assert f"{H100.ridge:.0f}" == "295"


def test_kv_bytes_per_token_mha_versus_gqa():
    assert GPT2_SMALL.kv_bytes_per_token == 2 * 12 * 12 * 64 * 4
    assert SMOLLM2_135M.kv_bytes_per_token == 2 * 30 * 3 * 64 * 2
    # Per layer and value byte, GQA with 3 of 9 heads caches a third of what MHA would.
    mha = dataclasses.replace(SMOLLM2_135M, kv_heads=9)
    assert mha.kv_bytes_per_token == 3 * SMOLLM2_135M.kv_bytes_per_token


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
    assert set(PRESETS) == {"Llama-3-8B", "Llama-3-70B", "GPT-2 small", "SmolLM2-135M"}
    with pytest.raises(ValueError, match="unknown dtype"):
        GPT2_SMALL.with_dtype("float7")
    with pytest.raises(ValueError, match="multiple of"):
        ModelShape("bad", 2, 100, 3, 3, 400, 10)
    with pytest.raises(ValueError, match="kv_heads"):
        ModelShape("bad", 2, 96, 12, 5, 400, 10)
    with pytest.raises(ValueError, match="positive integer"):
        ModelShape("bad", 0, 96, 12, 12, 400, 10)
