"""The claims register: every conclusion a chapter draws from a measurement, decided by its data.

A chapter never types a measured conclusion into markdown. It names a claim, states it, computes a
predicate on this run's data, and shows the sentence for the outcome the data gave; both outcomes
are written in the chapter, so the page is true on any machine::

    claims = Claims()
    text = claims.decide(
        "decode_memory_bound", "A decode step takes about its bytes over the streaming bandwidth.",
        held=within(step_ms, floor_ms, factor=2), predicted=f"{floor_ms:.1f} ms", measured=f"{step_ms:.1f} ms",
        evidence="fp32, all threads, context 16",
        if_held="the step is within 2x of its memory floor",
        if_not=f"the step is {step_ms / floor_ms:.1f}x its memory floor: something else costs time")
    display(Markdown(text))
    ...
    results.table(claims.frame(), "claims")     # data/<chapter>/claims.csv

A claim that does not hold never fails the build (another machine may legitimately differ); an
arithmetic invariant that breaks does (:func:`invariant`). The predicates below are small, named and
unit-tested on data that makes each go both ways.

Introduced in section 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import pandas as pd

__all__ = ["HELD", "NOT_HELD", "NOT_MEASURED", "Claim", "Claims", "InvariantBroken", "invariant",
           "within", "at_most", "at_least", "increasing", "flat", "ranges_overlap"]

HELD, NOT_HELD, NOT_MEASURED = "held", "did not hold", "not measured"
_COLUMNS = ["claim", "statement", "predicted", "measured", "verdict", "evidence"]


@dataclass(frozen=True)
class Claim:
    """One row of ``claims.csv``: ``claim`` (a short id), ``statement`` (what is claimed),
    ``predicted`` and ``measured`` (as text, with units), ``verdict`` (held / did not hold / not
    measured) and ``evidence`` (which data decided it)."""

    claim: str
    statement: str
    predicted: str
    measured: str
    verdict: str
    evidence: str


class Claims:
    """The register of one chapter's claims. Introduced in section 0."""

    def __init__(self) -> None:
        self.rows: list[Claim] = []

    def decide(self, claim: str, statement: str, held: bool | None, *, if_held: str, if_not: str,
               predicted: str = "", measured: str = "", evidence: str = "",
               if_not_measured: str = "") -> str:
        """Record ``claim`` with the verdict ``held`` gives (``None``: not measured in this run) and
        return the markdown sentence for that outcome, prefixed with the verdict in bold."""
        if not claim or any(c.claim == claim for c in self.rows):
            raise ValueError(f"claim ids must be unique and non-empty, got {claim!r}")
        if held is None:
            verdict, text = NOT_MEASURED, if_not_measured or "this run did not measure it."
        else:
            verdict, text = (HELD, if_held) if bool(held) else (NOT_HELD, if_not)
        self.rows.append(Claim(claim, statement, predicted, measured, verdict, evidence))
        label = {HELD: "Held", NOT_HELD: "Did not hold on this machine", NOT_MEASURED: "Not measured"}[verdict]
        return f"**{label}:** {text}"

    def frame(self) -> pd.DataFrame:
        """The register as a DataFrame with the columns of ``claims.csv``."""
        return pd.DataFrame([asdict(c) for c in self.rows], columns=_COLUMNS)

    def summary(self) -> str:
        """``"k of n claims held"`` (and how many were not measured)."""
        held = sum(c.verdict == HELD for c in self.rows)
        missing = sum(c.verdict == NOT_MEASURED for c in self.rows)
        return f"{held} of {len(self.rows)} claims held" + (f", {missing} not measured" if missing else "")


class InvariantBroken(AssertionError):
    """An arithmetic invariant failed: the chapter's numbers contradict each other, not the machine."""


def invariant(condition: bool, message: str) -> None:
    """Fail the chapter (and the build) when an arithmetic invariant breaks. Use it for what must
    hold on every machine (a sum of parts equals the whole, a count matches its formula), never for
    a measured conclusion. Introduced in section 1."""
    if not condition:
        raise InvariantBroken(message)


def _finite(name: str, *values: float) -> None:
    for v in values:
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            raise ValueError(f"{name}: values must be finite numbers, got {v!r}")


def within(measured: float, predicted: float, factor: float) -> bool:
    """True when ``measured`` is within ``factor`` (>= 1) of ``predicted`` either way (both positive)."""
    _finite("within", measured, predicted, factor)
    if factor < 1 or measured <= 0 or predicted <= 0:
        raise ValueError(f"within needs positive values and factor >= 1, got {measured}, {predicted}, {factor}")
    return predicted / factor <= measured <= predicted * factor


def at_most(value: float, limit: float) -> bool:
    """True when ``value <= limit``."""
    _finite("at_most", value, limit)
    return value <= limit


def at_least(value: float, limit: float) -> bool:
    """True when ``value >= limit``."""
    _finite("at_least", value, limit)
    return value >= limit


def increasing(values: Sequence[float], tolerance: float = 0.0) -> bool:
    """True when every value is at least the one before it less ``tolerance`` (relative): a rising
    series allowing noise of that size. Needs two values or more."""
    _finite("increasing", *values, tolerance)
    if len(values) < 2:
        raise ValueError("increasing needs at least two values")
    return all(b >= a * (1 - tolerance) for a, b in zip(values, values[1:]))


def flat(values: Sequence[float], rel: float) -> bool:
    """True when the largest value is at most ``1 + rel`` times the smallest (all positive)."""
    _finite("flat", *values, rel)
    if not values or min(values) <= 0:
        raise ValueError("flat needs positive values")
    return max(values) <= (1 + rel) * min(values)


def ranges_overlap(low_a: float, high_a: float, low_b: float, high_b: float) -> bool:
    """True when the ranges [low_a, high_a] and [low_b, high_b] overlap: the difference between two
    measurements is within their spread over runs, i.e. not shown by this run."""
    _finite("ranges_overlap", low_a, high_a, low_b, high_b)
    if low_a > high_a or low_b > high_b:
        raise ValueError("each range needs low <= high")
    return low_a <= high_b and low_b <= high_a
