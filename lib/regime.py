"""The one rule that labels a measured point: compute-, memory- or launch-bound, or not explained.

Every lower bound on a pass (the roofline's compute and memory terms from :mod:`lib.roofline`, the
launch floor :mod:`lib.machine` measures) is a floor: the largest one limits the pass. A measured
time near it is in that regime; one far above it is not explained by any bound; one below it means a
ceiling was measured wrong. Every chapter that labels a point calls :func:`regime`.

Introduced in section 2 (the regime of each prefill point); sections 3 and 6 label every point with it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from lib.roofline import positive_seconds

__all__ = ["REGIME_SLACK", "FLOOR_TOLERANCE", "Regime", "regime"]

#: A measured pass more than this many times its largest lower bound is not explained by any bound.
REGIME_SLACK = 2.0
#: A measured pass faster than this fraction of a lower bound means that bound's ceiling is wrong.
FLOOR_TOLERANCE = 0.9


@dataclass(frozen=True)
class Regime:
    """Which regime a measured pass is in: ``label`` (``"compute-bound"``, ``"memory-bound"``,
    ``"launch-bound"``, ``"unexplained overhead"`` or ``"below a bound: a ceiling is wrong"``), the
    largest lower bound ``limit`` and its time ``bound_s`` (seconds), and ``ratio = measured /
    bound_s``.

    Introduced in section 2.
    """

    label: str
    limit: str
    bound_s: float
    ratio: float

    @property
    def explained(self) -> bool:
        """True when a bound explains the time (the label names a bound)."""
        return self.label.endswith("-bound")


def regime(measured_s: float, bounds: Mapping[str, float], *, slack: float = REGIME_SLACK,
           tolerance: float = FLOOR_TOLERANCE) -> Regime:
    """The one rule that labels a measured point, used by every chapter.

    ``bounds`` maps a name (``"compute"``, ``"memory"``, ``"launch"``) to a lower bound on the pass in
    seconds: the roofline's two terms and, where measured, the launch floor (the same pass with
    negligible bytes and FLOPs). NaN bounds are skipped. Every bound is a floor, so the largest one
    limits the pass:

    * measured below ``tolerance`` times the largest bound: ``"below a bound: a ceiling is wrong"``
      (a measured ceiling understates the machine, or a count overstates the work);
    * measured above ``slack`` times the largest bound: ``"unexplained overhead"`` (no bound explains
      it: measure further before optimising);
    * otherwise ``"<name>-bound"`` for the largest bound.

    Introduced in section 2; section 6 labels every measured point with it.
    """
    measured_s = positive_seconds("measured time", measured_s)
    if not slack >= 1:
        raise ValueError(f"slack must be at least 1 (a pass cannot beat its bound), got {slack!r}")
    if not 0 < tolerance <= 1:
        raise ValueError(f"tolerance must be in (0, 1], got {tolerance!r}")
    known = {}
    for name, seconds in bounds.items():
        if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
            continue
        known[name] = positive_seconds(f"bound {name!r}", seconds)
    if not known:
        raise ValueError("regime needs at least one known lower bound (compute, memory or launch)")
    limit = max(known, key=known.get)
    ratio = measured_s / known[limit]
    if ratio < tolerance:
        label = "below a bound: a ceiling is wrong"
    elif ratio > slack:
        label = "unexplained overhead"
    else:
        label = f"{limit}-bound"
    return Regime(label, limit, known[limit], ratio)
