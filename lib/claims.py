"""The claims register: every conclusion a chapter draws from a measurement, decided by this run's data.

A chapter never types a measured conclusion into markdown. It declares a claim once, where the claim is
introduced: its statement (one constant, the same on every machine) and the sentence for each outcome, with
``{placeholders}`` for the numbers. Later a few lines decide it from the data and pass the numbers::

    register = Claims()
    register.claim(
        "decode_at_its_cost",
        "Every decode step takes the time the cost model predicts from chapter 0's kernels.",
        held="every step took {low:.2f} to {high:.2f} times its predicted time.",
        not_held="the steps took {low:.2f} to {high:.2f} times their predicted time: {why}",
    )
    ...
    show(register.decide("decode_at_its_cost", claims.every(claims.within(s, p, PREDICTED_TIME) for ...),
                         predicted="...", measured="...", evidence="decode_sweep.csv", low=..., high=..., why=...))
    results.table(register.frame(), "claims")     # data/<chapter>/claims.csv

**Verdicts that noise cannot flip.** A measurement is a :class:`Spread` over runs (lowest, median, highest),
and every predicate is decided on the whole spread: ``held`` when all of it satisfies the prediction, ``did not
hold`` when none of it does, and ``not resolved`` when the spread straddles the threshold: this run cannot tell.
A claim a run does not measure (no GPU, one dtype only) is ``not measured``; a declared claim that is never
decided is recorded so, with its declared reason.

**Tolerances** are named once per kind of prediction, here (:data:`PREDICTED_TIME`, :data:`PREDICTED_RATIO`,
:data:`NOISE`), never per claim. A claim that does not hold never fails the build (another machine may
legitimately differ); an arithmetic invariant that breaks does (:func:`invariant`).

Introduced in section 0.
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import pandas as pd

__all__ = ["HELD", "NOT_HELD", "UNRESOLVED", "NOT_MEASURED", "VERDICTS", "PREDICTED_TIME", "PREDICTED_RATIO",
           "NOISE", "Spread", "Claim", "Claims", "InvariantBroken", "invariant", "within", "at_most", "at_least",
           "below", "every", "some", "increasing", "flat", "ranges_overlap", "verdict_of"]

HELD, NOT_HELD, UNRESOLVED, NOT_MEASURED = "held", "did not hold", "not resolved", "not measured"
VERDICTS = (HELD, NOT_HELD, UNRESOLVED, NOT_MEASURED)
_COLUMNS = ["claim", "statement", "predicted", "measured", "verdict", "evidence"]
_LABELS = {HELD: "Held", NOT_HELD: "Did not hold on this machine", UNRESOLVED: "Not resolved by this run",
           NOT_MEASURED: "Not measured"}

#: A time predicted from chapter 0's measured ceilings (the cost model) must lie within this factor of the
#: measured one. Parts timed alone run with the caches and the cores to themselves; inside a pass they share
#: them, so the sum is not exact.
PREDICTED_TIME = 1.25
#: A ratio of two measured times (a speed-up, a saving) predicted from the ratio of two ceilings.
PREDICTED_RATIO = 1.25
#: A trend (rising, flat) is allowed this much relative noise between neighbouring points.
NOISE = 0.05


@dataclass(frozen=True)
class Spread:
    """A measured value over runs: its ``low``, ``mid`` (median) and ``high``; a single number has no spread."""

    low: float
    mid: float
    high: float

    def __post_init__(self) -> None:
        _finite("Spread", self.low, self.mid, self.high)
        if not self.low <= self.mid <= self.high:
            raise ValueError(f"a spread needs low <= mid <= high, got {self.low}, {self.mid}, {self.high}")

    @classmethod
    def of(cls, values: Iterable[float]) -> "Spread":
        """The spread of a non-empty set of runs: lowest, median, highest."""
        values = sorted(float(v) for v in values)
        if not values:
            raise ValueError("a spread needs at least one run")
        n = len(values)
        mid = values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2
        return cls(values[0], mid, values[-1])

    @classmethod
    def at(cls, value: float) -> "Spread":
        """One number as a spread of none."""
        return cls(value, value, value)

    def __truediv__(self, other: float) -> "Spread":
        if isinstance(other, Spread):  # the widest ratio the two spreads allow
            return Spread(self.low / other.high, self.mid / other.mid, self.high / other.low)
        return Spread(self.low / other, self.mid / other, self.high / other)

    def __mul__(self, k: float) -> "Spread":
        return Spread(self.low * k, self.mid * k, self.high * k) if k >= 0 else \
            Spread(self.high * k, self.mid * k, self.low * k)

    __rmul__ = __mul__

    def __sub__(self, other: "Spread") -> "Spread":
        if isinstance(other, Spread):
            return Spread(self.low - other.high, self.mid - other.mid, self.high - other.low)
        return Spread(self.low - other, self.mid - other, self.high - other)

    def text(self, fmt: str = ".1f", unit: str = "") -> str:
        """``"mid (low-high) unit"``, or one number when the ends print alike."""
        lo, mid, hi = (format(v, fmt) for v in (self.low, self.mid, self.high))
        return (f"{mid} {unit}" if lo == hi else f"{mid} {unit} ({lo}–{hi})").replace("  ", " ").strip()


def _spread(value) -> Spread:
    return value if isinstance(value, Spread) else Spread.at(float(value))


def _finite(name: str, *values: float) -> None:
    for v in values:
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            raise ValueError(f"{name}: values must be finite numbers, got {v!r}")


def verdict_of(all_true: bool, none_true: bool) -> str:
    """``held`` when the whole spread satisfies a prediction, ``did not hold`` when none of it does, else
    ``not resolved``."""
    return HELD if all_true else NOT_HELD if none_true else UNRESOLVED


def within(measured: Spread | float, predicted: Spread | float, factor: float) -> str:
    """Whether the measured spread lies within ``factor`` (>= 1) of ``predicted`` (both positive). A predicted
    :class:`Spread` (a prediction from ceilings that have a spread of their own, e.g. the cost model at its
    ceilings' fastest and median calls) allows its whole range: from its low over ``factor`` to its high times
    ``factor``."""
    m, p = _spread(measured), _spread(predicted)
    _finite("within", factor)
    if factor < 1 or m.low <= 0 or p.low <= 0:
        raise ValueError(f"within needs positive values and factor >= 1, got {m}, {p}, {factor}")
    lo, hi = p.low / factor, p.high * factor
    return verdict_of(lo <= m.low and m.high <= hi, m.high < lo or m.low > hi)


def at_most(measured: Spread | float, limit: float) -> str:
    """Whether the measured spread is at most ``limit``."""
    m = _spread(measured)
    _finite("at_most", limit)
    return verdict_of(m.high <= limit, m.low > limit)


def at_least(measured: Spread | float, limit: float) -> str:
    """Whether the measured spread is at least ``limit``."""
    m = _spread(measured)
    _finite("at_least", limit)
    return verdict_of(m.low >= limit, m.high < limit)


def below(a: Spread | float, b: Spread | float) -> str:
    """Whether ``a`` is below ``b`` beyond both spreads (held), above or equal beyond them (did not hold), or
    neither (their spreads overlap: not resolved)."""
    a, b = _spread(a), _spread(b)
    return verdict_of(a.high < b.low, a.low >= b.high)


def every(verdicts: Iterable[str]) -> str:
    """All held: held; any did not hold: did not hold; else not resolved. Needs at least one verdict."""
    v = list(verdicts)
    if not v or any(x not in (HELD, NOT_HELD, UNRESOLVED) for x in v):
        raise ValueError(f"every needs one or more decided verdicts, got {v}")
    return NOT_HELD if NOT_HELD in v else HELD if all(x == HELD for x in v) else UNRESOLVED


def some(verdicts: Iterable[str]) -> str:
    """Any held: held; all did not hold: did not hold; else not resolved."""
    v = list(verdicts)
    if not v or any(x not in (HELD, NOT_HELD, UNRESOLVED) for x in v):
        raise ValueError(f"some needs one or more decided verdicts, got {v}")
    return HELD if HELD in v else NOT_HELD if all(x == NOT_HELD for x in v) else UNRESOLVED


def increasing(values: Sequence[Spread | float], tolerance: float = NOISE) -> str:
    """Whether each value is at least the one before it, less ``tolerance`` (relative): held when every
    neighbouring pair rises beyond their spreads (allowing that noise), did not hold when some pair falls beyond
    them. Needs two values or more."""
    s = [_spread(v) for v in values]
    _finite("increasing", tolerance)
    if len(s) < 2:
        raise ValueError("increasing needs at least two values")
    pairs = [verdict_of(b.low >= a.high * (1 - tolerance), b.high < a.low * (1 - tolerance)) for a, b in zip(s, s[1:])]
    return every(pairs)


def flat(values: Sequence[Spread | float], rel: float) -> str:
    """Whether the largest value is at most ``1 + rel`` times the smallest (all positive), on the spreads."""
    s = [_spread(v) for v in values]
    _finite("flat", rel)
    if not s or min(v.low for v in s) <= 0:
        raise ValueError("flat needs positive values")
    return verdict_of(max(v.high for v in s) <= (1 + rel) * min(v.low for v in s),
                      max(v.low for v in s) > (1 + rel) * min(v.high for v in s))


def ranges_overlap(low_a: float, high_a: float, low_b: float, high_b: float) -> bool:
    """True when the ranges [low_a, high_a] and [low_b, high_b] overlap (a plain fact, not a verdict)."""
    _finite("ranges_overlap", low_a, high_a, low_b, high_b)
    if low_a > high_a or low_b > high_b:
        raise ValueError("each range needs low <= high")
    return low_a <= high_b and low_b <= high_a


@dataclass(frozen=True)
class Claim:
    """One row of ``claims.csv``: ``claim`` (a short id), ``statement`` (what is claimed: one constant per id),
    ``predicted`` and ``measured`` (as text, with units), ``verdict`` (one of :data:`VERDICTS`) and ``evidence``
    (which data decided it)."""

    claim: str
    statement: str
    predicted: str
    measured: str
    verdict: str
    evidence: str


@dataclass(frozen=True)
class _Declared:
    statement: str
    held: str
    not_held: str
    unresolved: str
    not_measured: str


_GENERIC_UNRESOLVED = "the runs' spread straddles the prediction ({measured} against {predicted}): this run cannot tell."


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


class Claims:
    """The register of one chapter's claims: :meth:`claim` declares, :meth:`decide` decides. Introduced in
    section 0."""

    def __init__(self) -> None:
        self.declared: dict[str, _Declared] = {}
        self.rows: dict[str, Claim] = {}

    def claim(self, claim: str, statement: str, *, held: str, not_held: str, unresolved: str = "",
              not_measured: str = "this run did not measure it.") -> None:
        """Declare ``claim``: its ``statement`` (no placeholders: the same text on every machine) and the sentence
        for each outcome (``str.format`` templates; ``{predicted}`` and ``{measured}`` are always available)."""
        if not re.fullmatch(r"[a-z0-9_]+", claim or "") or claim in self.declared:
            raise ValueError(f"claim ids must be unique snake_case names, got {claim!r}")
        if "{" in statement or not statement.strip():
            raise ValueError(f"claim {claim}: the statement is one constant sentence (no placeholders), got {statement!r}")
        self.declared[claim] = _Declared(statement, held, not_held, unresolved or _GENERIC_UNRESOLVED, not_measured)

    def decide(self, claim: str, verdict: str | None, *, predicted: str = "", measured: str = "",
               evidence: str = "", **values) -> str:
        """Record the ``verdict`` (``None``: not measured) of a declared claim and return the markdown sentence
        for it, prefixed with the verdict in bold; ``values`` fill the sentence's placeholders."""
        if claim not in self.declared:
            raise ValueError(f"claim {claim!r} was never declared; declared: {', '.join(self.declared) or 'none'}")
        if claim in self.rows:
            raise ValueError(f"claim {claim!r} was already decided")
        verdict = NOT_MEASURED if verdict is None else verdict
        if verdict not in VERDICTS:
            raise ValueError(f"claim {claim}: verdict must be one of {VERDICTS}, got {verdict!r}")
        d = self.declared[claim]
        template = {HELD: d.held, NOT_HELD: d.not_held, UNRESOLVED: d.unresolved, NOT_MEASURED: d.not_measured}[verdict]
        missing = _fields(template) - set(values) - {"predicted", "measured"}
        if missing:
            raise ValueError(f"claim {claim}: the {verdict!r} sentence needs {', '.join(sorted(missing))}")
        text = template.format(predicted=predicted, measured=measured, **values)
        self.rows[claim] = Claim(claim, d.statement, predicted, measured, verdict, evidence)
        return f"**{_LABELS[verdict]}:** {text}"

    def frame(self) -> pd.DataFrame:
        """The register as a DataFrame with the columns of ``claims.csv``: every declared claim, in the order
        declared; one never decided is ``not measured``."""
        rows = [self.rows.get(c) or Claim(c, d.statement, "", "", NOT_MEASURED, d.not_measured)
                for c, d in self.declared.items()]
        return pd.DataFrame([asdict(r) for r in rows], columns=_COLUMNS)

    def summary(self) -> str:
        """``"k of n decided claims held"``, with how many were not resolved and not measured."""
        verdicts = list(self.frame().verdict)
        decided = sum(v in (HELD, NOT_HELD, UNRESOLVED) for v in verdicts)
        text = f"{verdicts.count(HELD)} of {decided} decided claims held"
        for v in (UNRESOLVED, NOT_MEASURED):
            if verdicts.count(v):
                text += f", {verdicts.count(v)} {v}"
        return text


class InvariantBroken(AssertionError):
    """An arithmetic invariant failed: the chapter's numbers contradict each other, not the machine."""


def invariant(condition: bool, message: str) -> None:
    """Fail the chapter (and the build) when an arithmetic invariant breaks. Use it for what must hold on every
    machine (a sum of parts equals the whole, a count matches its formula, no pass beats the floor it is priced
    at), never for a measured conclusion. Introduced in section 1."""
    if not condition:
        raise InvariantBroken(message)
