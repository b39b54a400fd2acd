"""The book's one dtype vocabulary: short names, torch dtypes, bytes per value and table labels.

Every module that names a dtype uses this table: :mod:`lib.device` checks a dtype on a device,
:mod:`lib.shapes` sizes weights and caches with it, and tables print its labels. A dtype can be
given as a torch dtype (``torch.bfloat16``), a name or alias (``"bf16"``, ``"bfloat16"``) or, for
the roofline arithmetic only, a number of bytes per value (``2``).

Introduced in chapter 1 (the parameter cell's ``dtype``); its byte counts are used from chapter 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Real
from typing import Any

import torch


@dataclass(frozen=True)
class Dtype:
    """One entry of the vocabulary: ``short`` name for parameters and file names, the ``torch``
    dtype (``None`` for formats torch does not run here), ``bytes`` per value and a table ``label``."""

    short: str
    torch: torch.dtype | None
    bytes: float
    label: str


_ENTRIES = (
    Dtype("fp64", torch.float64, 8, "FP64"),
    Dtype("fp32", torch.float32, 4, "FP32"),
    Dtype("bf16", torch.bfloat16, 2, "BF16"),
    Dtype("fp16", torch.float16, 2, "FP16"),
    Dtype("fp8", None, 1, "FP8"),
    Dtype("int8", torch.int8, 1, "INT8"),
    Dtype("int4", None, 0.5, "INT4"),
)
_ALIASES = {"float64": "fp64", "double": "fp64", "float32": "fp32", "float": "fp32",
            "bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float8": "fp8"}
_BY_SHORT = {d.short: d for d in _ENTRIES}

#: The dtypes a chapter can run a model in, by the short names its parameters use.
MODEL_DTYPES: dict[str, torch.dtype] = {s: _BY_SHORT[s].torch for s in ("fp32", "bf16", "fp16")}

_BYTES_LABELS = {8: "FP64", 4: "FP32", 2: "16-bit", 1: "8-bit", 0.5: "4-bit"}


def lookup(dtype: str | torch.dtype) -> Dtype:
    """The vocabulary entry for a torch dtype or a name (any alias, any case, ``torch.`` prefix
    allowed). Raises ``ValueError`` listing the known names."""
    if isinstance(dtype, torch.dtype):
        for entry in _ENTRIES:
            if entry.torch == dtype:
                return entry
        name = str(dtype).removeprefix("torch.")
        if name.startswith("float8"):
            return _BY_SHORT["fp8"]
        return Dtype(name, dtype, dtype.itemsize, name.upper())
    if isinstance(dtype, str):
        key = dtype.strip().lower().removeprefix("torch.")
        key = "float8" if key.startswith("float8") else key
        key = _ALIASES.get(key, key)
        if key in _BY_SHORT:
            return _BY_SHORT[key]
    known = sorted(set(_BY_SHORT) | set(_ALIASES))
    raise ValueError(f"unknown dtype {dtype!r}; use a torch dtype or one of {', '.join(known)}")


def bytes_and_label(dtype: Any) -> tuple[float, str]:
    """(bytes per value, table label) for a torch dtype, a name or a positive number of bytes."""
    if isinstance(dtype, Real) and not isinstance(dtype, bool):
        if not dtype > 0:
            raise ValueError(f"bytes per value must be positive, got {dtype!r}")
        value = int(dtype) if float(dtype).is_integer() else float(dtype)
        return value, _BYTES_LABELS.get(value, f"{value:g}-byte")
    if isinstance(dtype, (str, torch.dtype)):
        entry = lookup(dtype)
        return entry.bytes, entry.label
    raise TypeError(f"dtype must be a torch dtype, a dtype name or a number of bytes, "
                    f"got {type(dtype).__name__}")


def dtype_name(dtype: torch.dtype | str) -> str:
    """Short name of a dtype (``fp32``, ``bf16``, ``fp16``), for tables and file names."""
    return lookup(dtype).short
