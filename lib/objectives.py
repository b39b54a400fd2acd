"""Goodput objectives: the one default per kind of device, and a reader's own values kept as given.

A goodput figure means nothing without the objectives it was scored against, and two chapters that
score requests must not pick different defaults for the same device. The defaults are for the
book's small models (about 130M parameters), one request at a time:

* **CPU**: the first token within 1 s and then at most 100 ms a token (10 tokens a second, faster
  than anyone reads); a reply that starts within a second feels interactive.
* **GPU** (CUDA): the first token within 25 ms and then at most 15 ms a token (above 60 tokens a
  second). A GPU is bought to be fast: on the source chapter's GPU
  (``data/reference/ch09_request_split_gpu.csv``) GPT-2 small decoded at about 11 ms a token, within
  this TPOT objective, and took 12 to 44 ms to its first token, so its 1,000-token prompts miss the
  TTFT objective while its short ones meet it.

The worst gap, when a chapter states an objective on it, defaults to ``WORST_GAP_FACTOR`` times the
TPOT objective: one pause of two ordinary tokens' time is tolerated, a longer stall is not.

An objective the reader sets is used as given; ``None`` means "the default". Zero or a negative
number is refused (no request can meet it), never replaced by the default. This module knows no
model and imports no torch: a device is a ``torch.device`` or its name (``"cpu"``, ``"cuda:1"``).

Introduced in section 1 (two phases); used again in section 4 (request split).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real

__all__ = ["Objectives", "DEFAULTS", "WORST_GAP_FACTOR", "default_objectives", "objectives"]

#: The default objectives in seconds, ``(ttft_slo_s, tpot_slo_s)``, by device type.
DEFAULTS: dict[str, tuple[float, float]] = {"cpu": (1.0, 0.100), "cuda": (0.025, 0.015)}
#: The default worst-gap objective is this many times the TPOT objective.
WORST_GAP_FACTOR = 2.0


def _device_type(device) -> str:
    kind = getattr(device, "type", None) or str(device).strip().lower().split(":")[0]
    if kind not in DEFAULTS:
        raise ValueError(f"no default objectives for device {device!r}; known device types: "
                         f"{', '.join(DEFAULTS)} (resolve 'auto' to one of them first)")
    return kind


def default_objectives(device) -> tuple[float, float]:
    """The default ``(ttft_slo_s, tpot_slo_s)`` in seconds for ``device`` (a ``torch.device`` or a
    name such as ``"cpu"`` or ``"cuda:0"``). Raises ``ValueError`` for an unknown device type.

    Introduced in section 1.
    """
    return DEFAULTS[_device_type(device)]


@dataclass(frozen=True)
class Objectives:
    """The objectives a chapter scores goodput against, in seconds (``worst_gap_s`` may be ``None``:
    no objective on the worst gap), and ``defaults``: the names of those that are the device's
    default rather than the reader's. ``ttft_ms`` etc. give milliseconds for prose. Returned by
    :func:`objectives`.
    """

    ttft_s: float
    tpot_s: float
    worst_gap_s: float | None
    defaults: tuple[str, ...]

    @property
    def ttft_ms(self) -> float:
        return self.ttft_s * 1e3

    @property
    def tpot_ms(self) -> float:
        return self.tpot_s * 1e3

    @property
    def worst_gap_ms(self) -> float | None:
        return None if self.worst_gap_s is None else self.worst_gap_s * 1e3


def _given_ms(name: str, value) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name}={value!r}: an objective must be a positive number of milliseconds "
                         "(None picks the device's default)")
    return float(value)


def objectives(device, ttft_slo_ms: float | None = None, tpot_slo_ms: float | None = None,
               worst_gap_slo_ms: float | None = None, *, worst_gap: bool = False) -> Objectives:
    """The objectives for ``device``, from a chapter's parameters in **milliseconds**: each one the
    reader set is kept, each ``None`` takes the default (:func:`default_objectives`; the worst gap
    ``WORST_GAP_FACTOR`` times the TPOT objective). With ``worst_gap=False`` and no
    ``worst_gap_slo_ms`` there is no worst-gap objective. Zero, negative or non-numeric values raise
    ``ValueError`` naming the parameter.

    Introduced in section 1.
    """
    ttft, tpot = _given_ms("ttft_slo_ms", ttft_slo_ms), _given_ms("tpot_slo_ms", tpot_slo_ms)
    gap = _given_ms("worst_gap_slo_ms", worst_gap_slo_ms)
    default_ttft_s, default_tpot_s = default_objectives(device)
    used = []
    if ttft is None:
        used.append("ttft")
    if tpot is None:
        used.append("tpot")
    ttft_s = default_ttft_s if ttft is None else ttft / 1e3
    tpot_s = default_tpot_s if tpot is None else tpot / 1e3
    if gap is not None:
        gap_s = gap / 1e3
    elif worst_gap:
        gap_s = WORST_GAP_FACTOR * tpot_s
        used.append("worst_gap")
    else:
        gap_s = None
    return Objectives(ttft_s, tpot_s, gap_s, tuple(used))
