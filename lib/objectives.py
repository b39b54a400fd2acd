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

**Under load** (chapters 7 and 9) the question is not what a person tolerates but when a server is
overloaded, and that depends on the machine's speed, so no typed number can stand for it. There the
objectives are taken from the machine (:func:`scaled`): ``SLO_SCALE`` times what one user alone measured on
the same engine, DistServe's "SLO scale"; and the arrival rates are fractions of the capacity the engine showed
in the same run (:func:`load_rates`, after GuideLLM's sweep from a synchronous and a throughput run), so that the
load at which goodput collapses lies inside the sweep on any machine.

Introduced in chapter 1 (two phases); used again in chapter 4 (request split) and, scaled, in chapter 7.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real

__all__ = ["Objectives", "DEFAULTS", "WORST_GAP_FACTOR", "SLO_SCALE", "RATE_FRACTIONS", "default_objectives",
           "objectives", "scaled", "load_rates"]

#: The default objectives in seconds, ``(ttft_slo_s, tpot_slo_s)``, by device type.
DEFAULTS: dict[str, tuple[float, float]] = {"cpu": (1.0, 0.100), "cuda": (0.025, 0.015)}
#: The default worst-gap objective is this many times the TPOT objective.
WORST_GAP_FACTOR = 2.0
#: Under load, a request meets its objectives while its TTFT and TPOT are at most this many times what one user
#: alone measured on the same engine (DistServe's SLO scale).
SLO_SCALE = 3.0
#: The arrival rates of a goodput sweep, as fractions of the engine's measured capacity (requests per second at
#: its most concurrent closed loop): two below it, at it, and one beyond it, where queues must grow.
RATE_FRACTIONS = (0.25, 0.5, 1.0, 2.0)


def _device_type(device) -> str:
    kind = getattr(device, "type", None) or str(device).strip().lower().split(":")[0]
    if kind not in DEFAULTS:
        raise ValueError(f"no default objectives for device {device!r}; known device types: "
                         f"{', '.join(DEFAULTS)} (resolve 'auto' to one of them first)")
    return kind


def default_objectives(device) -> tuple[float, float]:
    """The default ``(ttft_slo_s, tpot_slo_s)`` in seconds for ``device`` (a ``torch.device`` or a
    name such as ``"cpu"`` or ``"cuda:0"``). Raises ``ValueError`` for an unknown device type.

    Introduced in chapter 1.
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

    Introduced in chapter 1.
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


def scaled(one_user_ttft_s: float, one_user_tpot_s: float, scale: float = SLO_SCALE,
           ttft_slo_ms: float | None = None, tpot_slo_ms: float | None = None) -> Objectives:
    """Objectives under load, from this machine: ``scale`` times one user's TTFT and TPOT on the same engine (in
    seconds), each replaced by the reader's value where one is given (ms). ``defaults`` names those taken from
    the measurement. Raises ``ValueError`` for a non-positive measurement or scale.

    Introduced in chapter 7.
    """
    for name, value in (("one_user_ttft_s", one_user_ttft_s), ("one_user_tpot_s", one_user_tpot_s), ("scale", scale)):
        if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name}={value!r}: scaled objectives need a positive, finite number")
    ttft, tpot = _given_ms("ttft_slo_ms", ttft_slo_ms), _given_ms("tpot_slo_ms", tpot_slo_ms)
    used = tuple(n for n, given in (("ttft", ttft), ("tpot", tpot)) if given is None)
    return Objectives(scale * one_user_ttft_s if ttft is None else ttft / 1e3,
                      scale * one_user_tpot_s if tpot is None else tpot / 1e3, None, used)


def load_rates(capacity_per_s: float, fractions=RATE_FRACTIONS, most_per_s: float | None = None) -> list[float]:
    """The arrival rates (requests per second) of a goodput sweep: ``fractions`` of the engine's measured
    ``capacity_per_s``, rounded to three significant figures, each at most ``most_per_s`` where given (a budget).
    Raises ``ValueError`` for a capacity that is not a positive number.

    Introduced in chapter 7.
    """
    if isinstance(capacity_per_s, bool) or not isinstance(capacity_per_s, Real) or not math.isfinite(capacity_per_s) \
            or capacity_per_s <= 0:
        raise ValueError(f"capacity_per_s={capacity_per_s!r}: a goodput sweep needs a measured capacity above 0")
    rates = [float(f"{f * capacity_per_s:.3g}") for f in fractions]
    if most_per_s is not None:
        rates = [min(r, most_per_s) for r in rates]
    return list(dict.fromkeys(r for r in rates if r > 0))
