"""The one rule that labels a measured pass: which part of it sets its time, or that nothing explains it.

The cost model (:mod:`lib.costmodel`) prices a pass as a sum of terms, each at a ceiling chapter 0 measured for
the kernel that does the work. A measured pass is labelled by that prediction:

* faster than its floor (its largest term alone, at the ceilings' fastest calls) by more than that ceiling's own
  spread: ``"below its floor: a ceiling is wrong"``: chapter 0 understated this machine;
* slower than ``slack`` times the predicted sum (at the ceilings' median calls): ``"unexplained overhead"``: some
  work the model does not price;
  measure one layer down before optimising;
* otherwise ``"<limit>-bound"`` for the largest term's limit: ``memory`` (weights or cache streamed),
  ``compute`` (matrix FLOPs at the rate the rows reach), ``slow-kernel`` (a dtype without hardware instructions),
  ``dispatch`` (issuing the operations and running the small kernels between the matrices: on a GPU, the kernel
  launches) or ``page-faults`` (the operating system mapping pages the pass touches for
  the first time); except that a pass whose largest term is its FLOPs but whose arithmetic intensity lies left of
  the balance point (given by the chapter) is ``"few-row-kernel-bound"``: the roofline says its bytes should set
  its time, so what costs is the matrix kernel's slow rate for that few rows, not the arithmetic.

Every chapter that labels a point calls :func:`regime`. Introduced in chapter 2; chapters 3 and 6 label every
point with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from lib.claims import PREDICTED_TIME, Spread, invariant
from lib.costmodel import Prediction

__all__ = ["REGIME_SLACK", "Regime", "regime", "check_floors"]

#: A pass slower than this many times its predicted time is not explained by the cost model: the same
#: tolerance the claims give a time predicted from measured ceilings.
REGIME_SLACK = PREDICTED_TIME


@dataclass(frozen=True)
class Regime:
    """The regime of one measured pass: ``label``, the largest term (``term``, ``limit``), the predicted time
    (``predicted_s``, at the ceilings' fastest calls), the floor (``floor_s``) and ``ratio``: measured (median
    over runs) over predicted.

    Returned by :func:`regime`; chapter 2.
    """

    label: str
    term: str
    limit: str
    predicted_s: float
    floor_s: float
    ratio: float

    @property
    def explained(self) -> bool:
        """True when the cost model explains the pass (the label names a limit)."""
        return self.label.endswith("-bound")


def regime(measured: Spread | float, prediction: Prediction, *, slack: float = REGIME_SLACK,
           floor_spread: float | None = None, intensity: float | None = None,
           balance: float | None = None) -> Regime:
    """Label a measured pass (seconds; a :class:`~lib.claims.Spread` over runs, or one number) by its
    :class:`~lib.costmodel.Prediction`. ``floor_spread`` is the relative spread of the ceiling the floor is priced
    at (a pass may beat the fastest call by that much before the ceiling is called wrong); by default the
    largest term's own (its median over its fastest call). ``intensity`` (the pass's FLOPs over the bytes it
    moves) and ``balance`` (the machine's FLOP rate over its bandwidth), both in FLOP/byte, given together, turn
    "compute-bound" into "few-row-kernel-bound" for a pass left of the balance point.

    Introduced in chapter 2.
    """
    m = measured if isinstance(measured, Spread) else Spread.at(float(measured))
    if not m.low > 0:
        raise ValueError(f"a measured time must be positive seconds, got {m}")
    if not slack >= 1:
        raise ValueError(f"slack must be at least 1, got {slack!r}")
    if (intensity is None) != (balance is None) or any(x is not None and not x > 0 for x in (intensity, balance)):
        raise ValueError(f"intensity and balance go together, each a positive FLOP/byte; got {intensity!r} and "
                         f"{balance!r}")
    top = prediction.dominant
    if floor_spread is None:  # the spread of the term the floor is priced at (never the page faults: a count)
        base = max((t for t in prediction.terms if t.limit != "page faults"), key=lambda t: t.best, default=top)
        floor_spread = base.median / base.best - 1 if base.best > 0 else 0.0
    limit = top.limit.replace(" ", "-")
    ratio = m.mid / prediction.best
    if m.low < prediction.floor * (1 - floor_spread):
        label = "below its floor: a ceiling is wrong"
    elif m.mid > slack * max(prediction.median, prediction.best):
        label = "unexplained overhead"
    elif limit == "compute" and intensity is not None and intensity < balance:
        label = "few-row-kernel-bound"
    else:
        label = f"{limit}-bound"
    return Regime(label, top.name, limit, prediction.best, prediction.floor, ratio)


def check_floors(regimes: dict[str, Regime], strict: bool) -> str:
    """Stop the build when a pass beat the floor it is priced at (``regimes`` by the pass's name): a ceiling of
    chapter 0 is then wrong. With ``strict`` false (quick mode, or ceilings measured on another machine) the same
    finding is returned as a sentence to show instead. Returns ``""`` when no pass beat its floor.

    Introduced in chapter 2.
    """
    below = [name for name, r in regimes.items() if r.label.startswith("below")]
    if not below:
        return ""
    passes = "1 pass" if len(below) == 1 else f"{len(below)} passes"
    message = (f"{passes} ran faster than the floor chapter 0's ceilings put under them ({', '.join(below[:5])}): a "
               "ceiling understates this machine. Re-run chapter 0 on a quiet machine")
    invariant(not strict, message)
    return f"**Warning:** {message} (not a full build on the machine chapter 0 measured, so this run goes on)."
