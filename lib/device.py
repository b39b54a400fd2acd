"""The device, its thread counts and its dtypes, and what a page was run with (chapter 0).

A chapter resolves its device once, in its parameter check (``params.device()`` calls
:func:`resolve_device`); everything after takes that ``torch.device`` (or reads it off the model and tensors
that carry it). Thread counts have one meaning from the parameters cell to the timer: whole numbers of CPU
threads (:func:`thread_counts` turns a chapter's ``None`` into all cores and one; :func:`use_threads` sets
one for a block of code). Every chapter prints :func:`describe_environment`, so a reader can tell which
machine, dtype, thread count and library versions produced the numbers on the page.
"""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Iterator, Sequence
from importlib import metadata

import torch

from lib.dtypes import MODEL_DTYPES as DTYPES, dtype_name, lookup  # the one dtype vocabulary

KNOWN_DEVICES = ("auto", "cpu", "cuda", "cuda:N")


class UnsupportedDtype(ValueError):
    """Raised when a device cannot run matrix products in a dtype; notebooks skip such a row with a note."""


def resolve_device(name: str | torch.device = "auto") -> torch.device:
    """Return the torch device the book should run on.

    ``"auto"`` picks CUDA when a GPU is present and the CPU otherwise; ``"cpu"``, ``"cuda"`` and
    ``"cuda:N"`` force one. An unknown name, or CUDA on a machine without it, raises ``ValueError``
    naming the valid choices. Called once per chapter by ``lib.params.device``; chapter 0.
    """
    if isinstance(name, torch.device):
        name = str(name)
    if not isinstance(name, str):
        raise ValueError(f"device must be a string such as 'auto' or 'cpu', got {name!r}")
    key = name.strip().lower()
    if key == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if key == "cpu":
        return torch.device("cpu")
    if key == "cuda" or (key.startswith("cuda:") and key[5:].isdigit()):
        if not torch.cuda.is_available():
            raise ValueError(
                f"device {name!r} asked for, but CUDA is not available here (torch {torch.__version__} "
                f"sees no GPU); use device='cpu' or 'auto'"
            )
        index = int(key[5:]) if ":" in key else 0
        if index >= torch.cuda.device_count():
            raise ValueError(f"device {name!r}: only {torch.cuda.device_count()} CUDA device(s) here")
        return torch.device("cuda", index)
    raise ValueError(f"unknown device {name!r}; choose one of {', '.join(KNOWN_DEVICES)}")


#: How many threads torch uses by default here (all physical cores): what "all threads" means in the book.
ALL_THREADS = torch.get_num_threads()


def thread_counts(device: torch.device, threads: Sequence[int] | None = None) -> list[int]:
    """The CPU thread counts a chapter measures, as whole numbers: ``threads`` as given, or all cores
    (:data:`ALL_THREADS`) and one, most first. On a GPU the host's one count: a GPU's kernels do not use the
    host's threads, so it is recorded but never varied.

    Introduced in chapter 3.
    """
    if device.type == "cuda":
        return [ALL_THREADS]
    if threads is None:
        return sorted({ALL_THREADS, 1}, reverse=True)
    if not threads or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in threads):
        raise ValueError(f"thread counts must be whole numbers of at least 1, got {threads!r}")
    return list(threads)


@contextlib.contextmanager
def use_threads(n: int) -> Iterator[None]:
    """Run the body with ``torch.set_num_threads(n)``, restoring the previous count afterwards.

    Introduced in chapter 0.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"a thread count must be a whole number of at least 1, got {n!r}")
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def resolve_dtype(name: str | torch.dtype, device: torch.device) -> torch.dtype:
    """Return the torch dtype for a short name (``fp32``, ``bf16``, ``fp16``), checked on ``device`` (the
    chapter's resolved ``torch.device``).

    The check multiplies two small matrices in that dtype, so a device that cannot run it fails here,
    early, with :class:`UnsupportedDtype` rather than deep inside a model. Introduced in chapter 1.
    """
    if isinstance(name, torch.dtype):
        dtype = name
    else:
        short = lookup(name).short  # ValueError listing the known names
        if short not in DTYPES:
            raise ValueError(f"dtype {name!r} is not one a model runs in here; choose one of {', '.join(DTYPES)}")
        dtype = DTYPES[short]
    _check_device(device, "resolve_dtype")
    try:
        a = torch.ones(8, 8, dtype=dtype, device=device)
        (a @ a).sum().item()
    except (RuntimeError, TypeError) as error:
        raise UnsupportedDtype(
            f"{dtype_name(dtype)} matrix products are not supported on {device} here ({error}); "
            f"use fp32 instead"
        ) from error
    return dtype


def _check_device(device: object, where: str) -> None:
    if not isinstance(device, torch.device):
        raise ValueError(f"{where} takes the chapter's resolved torch.device (from params.device() or "
                         f"resolve_device), got {device!r}")


def device_name(device: torch.device) -> str:
    """A human name for the device: the GPU's marketing name, or the CPU model from /proc/cpuinfo."""
    _check_device(device, "device_name")
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


#: The CPU instruction sets that change which kernels PyTorch runs (and so the book's numbers).
KERNEL_FLAGS = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
                "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16",
                "asimd", "sve", "sve2", "bf16", "i8mm", "fphp", "asimdhp")


def cpu_flags() -> set[str]:
    """The CPU's feature flags from ``/proc/cpuinfo`` (``flags`` on x86, ``Features`` on ARM; empty where
    there is none, e.g. macOS).

    Used by :func:`machine_identity` and :func:`lib.machine.hardware_support`; chapter 0.
    """
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def machine_identity(device: torch.device) -> dict[str, object]:
    """What identifies a machine for the book's numbers: on a CPU its model name, the instruction sets that
    change kernels (:data:`KERNEL_FLAGS`) and its core count; on a GPU its name, memory (GiB) and compute
    capability. Two machines with the same identity run the same kernels; a machine that reports the same
    name but other instruction sets (AVX2 only against AVX-512 BF16) does not.

    Used by the build's re-run hash and by provenance; chapter 0.
    """
    identity: dict[str, object] = {"cpu": device_name(torch.device("cpu")),
                                   "cpu_flags": " ".join(sorted(cpu_flags() & set(KERNEL_FLAGS))),
                                   "cpu_count": os.cpu_count()}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        identity.update(gpu=torch.cuda.get_device_name(device), gpu_memory_gib=round(props.total_memory / 2**30, 1),
                        compute_capability=f"{props.major}.{props.minor}")
    return identity


def package_versions() -> dict[str, str]:
    """Versions of the packages whose behaviour the measurements depend on."""
    versions = {"python": platform.python_version()}
    for package in ("torch", "transformers", "numpy", "pandas", "matplotlib", "papermill"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return versions


def describe_environment(device: torch.device, dtype: torch.dtype | None = None,
                         model: str | None = None) -> dict[str, object]:
    """What produced a page: device and its name, the machine's identity (:func:`machine_identity`), dtype,
    torch threads and versions (CUDA's and the driver's on a GPU).

    A model given as a local path is shown relative to the home folder (``~/models/x``), never as the
    build machine's absolute path, since these facts are printed in the published pages and saved in
    ``provenance.json``."""
    _check_device(device, "describe_environment")
    facts: dict[str, object] = {
        "device": str(device),
        "device_name": device_name(device),
        "torch_threads": torch.get_num_threads(),
        **machine_identity(device),
    }
    if dtype is not None:
        facts["dtype"] = dtype_name(dtype)
    if model is not None:
        home = os.path.expanduser("~")
        text = str(model)
        if home not in ("", "/") and (text == home or text.startswith(home + os.sep)):
            text = "~" + text[len(home):]
        facts["model"] = text
    if device.type == "cuda":
        facts.update(cuda=torch.version.cuda, cuda_driver=_driver_version())
    facts.update(package_versions())
    return facts


def _driver_version() -> str:
    """The NVIDIA driver's version from ``nvidia-smi``, or ``"unknown"``."""
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.strip().splitlines()[0] if out.strip() else "unknown"
