"""The claims register: every conclusion a chapter draws from a measurement, decided by this run's data.

A chapter never types a measured conclusion into markdown. It declares a claim once, where the claim is
introduced: its statement (one constant, the same on every machine) and the sentence for each outcome, with
``{placeholders}`` for the numbers. Later a few lines decide it from the data and pass the numbers::

    register = Claims()
    register.claim(
        "decode_at_its_cost",
        "Decode steps take the time the cost model predicts from chapter 0's kernels.",
        held="the steps took {ratio} times their predicted time.",
        not_held="the steps took {ratio} times their predicted time: {why}",
    )
    ...
    ratio = Spread.of(per_run_geometric_means)               # one value per run
    show(register.decide("decode_at_its_cost", claims.within(ratio, 1.0, PREDICTED_TIME), ...))
    results.table(register.frame(), "claims")     # data/<chapter>/claims.csv

**The interval a verdict is decided on.** A measurement is a :class:`Spread`: the value of every run and, from
them, the median and a **95 % confidence interval of the median** (:func:`median_interval`). The interval is
distribution-free: it is the pair of order statistics ``x(k)`` and ``x(n+1-k)`` that covers the median with at
least 95 % probability whatever the distribution of the runs (the sign test's interval), so it needs no
assumption about a shared machine's noise, which is lopsided (interruptions only ever slow a run down). With nine
runs or more it leaves out at least the fastest and the slowest run: **one slow run cannot move it**, where the
range of three runs (the book's earlier rule) moved with every interruption. With five runs or fewer no pair of
order statistics reaches 95 %, and the interval is the runs' whole range; a chapter gives cheap quantities (a short
pass, a ratio of two passes in the same run) many runs, and says where an expensive one (a whole request grid)
has few. A point whose interval straddles a threshold is measured again, interleaved as before, while the
chapter's budget for it lasts (:func:`settle`).

Every predicate decides on that interval: ``held`` when all of it satisfies the prediction, ``did not hold`` when
none of it does, ``not resolved`` only when the interval straddles the threshold (the sentence then says which way
the median leans). A claim over many points is decided on one quantity about them, not on a conjunction of
per-point verdicts (one straddling point of eleven would leave such a claim unresolved forever): the run-by-run
**geometric mean** of measured over predicted (:func:`geomean`, with the worst point named), a **trend**'s
fitted slope, run by run (:func:`trend`), or a **difference or ratio taken within each run** (a paired
comparison: :meth:`Spread.paired`). A claim a run does not measure (no GPU, one dtype only) is ``not measured``; a
declared claim that is never decided is recorded so, with its declared reason.

**Tolerances** are named once per kind of prediction, here, never per claim: :data:`PREDICTED_TIME` (a time
from measured ceilings), :data:`PREDICTED_RATIO` (a ratio of two such times), :data:`PREDICTED_LENGTH` (a length
read off a sweep whose points are a factor of two apart), :data:`ACROSS_MACHINES` (a run set beside a published
one, scaled by the two machines' rates), :data:`NOISE` (how far a trend may dip and still be rising) and
:data:`HARNESS` (what the timer may add to a step), :data:`DATASHEET` (a measured ceiling against a vendor's
peak) and :data:`SAME_QUANTITY` (two instruments scoring the same requests). A claim
that does not hold never fails the build (another machine may legitimately differ); an arithmetic invariant that
breaks does (:func:`invariant`).

Introduced in chapter 0.
"""

from __future__ import annotations

import math
import re
import string
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from lib import prose

__all__ = ["HELD", "NOT_HELD", "UNRESOLVED", "NOT_MEASURED", "VERDICTS", "EVIDENCE_COLUMNS", "CONFIDENCE", "PREDICTED_TIME",
           "PREDICTED_RATIO", "PREDICTED_LENGTH", "ACROSS_MACHINES", "NOISE", "HARNESS", "DATASHEET", "SAME_QUANTITY", "median_interval", "Spread", "Claim",
           "Claims", "InvariantBroken", "invariant", "within", "allowed", "at_most", "at_least", "below", "every", "some",
           "tally", "geomean", "geomean_of", "extreme", "outside", "trend", "theil_sen", "settle", "leaning", "ranges_overlap",
           "verdict_of"]

HELD, NOT_HELD, UNRESOLVED, NOT_MEASURED = "held", "did not hold", "not resolved", "not measured"
VERDICTS = (HELD, NOT_HELD, UNRESOLVED, NOT_MEASURED)
_COLUMNS = ["claim", "statement", "predicted", "measured", "verdict", "evidence"]
#: The evidence table's column labels (:meth:`Claims.evidence`), for the columns of ``claims.csv`` it shows.
EVIDENCE_COLUMNS = {"statement": "Claim", "predicted": "Predicted", "measured": "Measured", "verdict": "Verdict",
                    "evidence": "From"}

#: The confidence of the interval every verdict is decided on (:func:`median_interval`).
CONFIDENCE = 0.95
#: A time predicted from chapter 0's measured ceilings (the cost model) must lie within this factor of the
#: measured one. Parts timed alone run with the caches and the cores to themselves; inside a pass they share
#: them, so the sum is not exact.
PREDICTED_TIME = 1.25
#: A ratio of two measured times (a speed-up, a saving) predicted from the ratio of two ceilings.
PREDICTED_RATIO = 1.25
#: A length read off a sweep (where a pass leaves its floor, where time per token stops falling) against the one
#: read off the cost model's curve: the sweep's lengths are a factor of two apart, so one step of its grid.
PREDICTED_LENGTH = 2.0
#: A measurement on this machine, scaled by the ratio of two machines' measured rates, against a published run on
#: the other: the scaling accounts for one ceiling, not for the rest of two different programs and machines.
ACROSS_MACHINES = 1.5
#: A trend (rising, flat) is allowed this much relative noise between neighbouring points.
NOISE = 0.05
#: What the timing harness may add to the shortest step the book times (the book's budget for its own clock).
HARNESS = 0.01
#: A ceiling measured with simple kernels against the vendor's datasheet peak for the same hardware.
DATASHEET = 2.0
#: Two instruments scoring the same requests by the same definitions (the book's client and an engine's own
#: benchmark): their ratio may differ from 1 by this factor, what one tool's clock placement and parsing can add.
SAME_QUANTITY = 1.05


def _below_k(n: int, k: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2)."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n


def median_interval(values: Iterable[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """``(low, median, high)`` of a set of runs: the median and its distribution-free ``confidence`` interval, the
    order statistics ``x(k)`` and ``x(n+1-k)`` with the largest ``k`` whose coverage,
    ``1 - 2 P(Binomial(n, 1/2) <= k - 1)``, is at least ``confidence``. With too few runs for any ``k`` to reach it
    (five or fewer at 95 %) the interval is the whole range, ``k = 1``. Needs one value or more."""
    xs = sorted(float(v) for v in values)
    n = len(xs)
    if not n:
        raise ValueError("an interval needs at least one run")
    _finite("median_interval", *xs)
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie between 0 and 1, got {confidence!r}")
    k = 1
    while k + 1 <= (n + 1) // 2 and 1 - 2 * _below_k(n, k) >= confidence:
        k += 1
    mid = xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2
    return xs[k - 1], mid, xs[n - k]


@dataclass(frozen=True)
class Spread:
    """A measured value: its ``low``, ``mid`` (median) and ``high``, where ``low`` and ``high`` are the interval a
    verdict is decided on (:func:`median_interval`, when the value comes from runs), and ``runs``, the value of
    every run (empty for a number computed from other spreads, whose interval is then their widest combination).
    One unit throughout (seconds for a time); convert for display only."""

    low: float
    mid: float
    high: float
    runs: tuple[float, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        _finite("Spread", self.low, self.mid, self.high)
        if not self.low <= self.mid <= self.high:
            raise ValueError(f"a spread needs low <= mid <= high, got {self.low}, {self.mid}, {self.high}")

    @classmethod
    def of(cls, values: Iterable[float]) -> "Spread":
        """The median of a non-empty set of runs and its 95 % interval (:func:`median_interval`), the runs kept."""
        runs = tuple(float(v) for v in values)
        return cls(*median_interval(runs), runs=runs)

    @classmethod
    def at(cls, value: float) -> "Spread":
        """One number (a count, a computed constant) as a spread of none."""
        return cls(value, value, value, runs=(float(value),))

    @classmethod
    def in_row(cls, row, column: str, scale: float = 1.0) -> "Spread":
        """The spread a summary table keeps in three columns (:func:`lib.timing.median_range`): ``column``, its
        median, and ``column_low`` and ``column_high``, the ends of its interval, read from one ``row`` (a pandas
        row, a ``DataFrame.itertuples()`` tuple or a dict) and multiplied by ``scale`` (``1e-3`` turns a table's
        milliseconds into the seconds a time is kept in). The runs stay in the table: the spread has none."""
        get = (lambda name: row[name]) if hasattr(row, "__getitem__") and not isinstance(row, tuple) else \
            (lambda name: getattr(row, name))
        try:
            low, mid, high = (float(get(name)) for name in (f"{column}_low", column, f"{column}_high"))
        except (KeyError, AttributeError) as missing:
            raise ValueError(f"Spread.in_row: the row has no {missing} column; a summary table keeps {column!r} "
                             f"with {column}_low and {column}_high (lib.timing.median_range)") from None
        return cls(low, mid, high) * scale

    @classmethod
    def paired(cls, a: "Spread", b: "Spread", how: Callable[[float, float], float]) -> "Spread":
        """``how(a_i, b_i)`` run by run, for two spreads measured in the same runs (their ``i``-th runs ran together,
        so a slow spell lands on both): a difference or a ratio taken within each run, with its own interval."""
        if not a.runs or len(a.runs) != len(b.runs):
            raise ValueError(f"paired spreads need the same runs, got {len(a.runs)} and {len(b.runs)}")
        return cls.of(how(x, y) for x, y in zip(a.runs, b.runs))

    @property
    def n(self) -> int:
        """How many runs the value has (0 for a value computed from other spreads)."""
        return len(self.runs)

    def __truediv__(self, other: "Spread | float") -> "Spread":
        if isinstance(other, Spread):  # not paired: the widest ratio the two intervals allow
            return Spread(self.low / other.high, self.mid / other.mid, self.high / other.low)
        return self * (1 / other)

    def __mul__(self, k: float) -> "Spread":
        runs = tuple(r * k for r in self.runs)
        return Spread(self.low * k, self.mid * k, self.high * k, runs) if k >= 0 else \
            Spread(self.high * k, self.mid * k, self.low * k, runs)

    __rmul__ = __mul__

    def __add__(self, k: float) -> "Spread":
        if isinstance(k, Spread):
            raise TypeError("add two spreads with Spread.paired (same runs) or by their intervals explicitly")
        return Spread(self.low + k, self.mid + k, self.high + k, tuple(r + k for r in self.runs))

    def __sub__(self, other: "Spread | float") -> "Spread":
        if isinstance(other, Spread):  # not paired: the widest difference the two intervals allow
            return Spread(self.low - other.high, self.mid - other.mid, self.high - other.low)
        return self + (-other)

    def text(self, fmt: str = ".1f", unit: str = "") -> str:
        """``"mid unit (low-high)"``, or one number when the ends print alike; a factor's ``"x"`` is written
        against its number (``"1.08x (1.02–1.15)"``)."""
        lo, mid, hi = (format(v, fmt) for v in (self.low, self.mid, self.high))
        value = f"{mid}{unit}" if unit == "x" else f"{mid} {unit}".strip()
        return value if lo == hi else f"{value} ({lo}–{hi})"


def _spread(value) -> Spread:
    return value if isinstance(value, Spread) else Spread.at(float(value))


def _finite(name: str, *values: float) -> None:
    for v in values:
        if not isinstance(v, (int, float, np.floating, np.integer)) or isinstance(v, bool) or not math.isfinite(v):
            raise ValueError(f"{name}: values must be finite numbers, got {v!r}")


def verdict_of(all_true: bool, none_true: bool) -> str:
    """``held`` when the whole interval satisfies a prediction, ``did not hold`` when none of it does, else
    ``not resolved``."""
    return HELD if all_true else NOT_HELD if none_true else UNRESOLVED


def within(measured: Spread | float, predicted: Spread | float, factor: float) -> str:
    """Whether the measured interval lies within ``factor`` (>= 1) of ``predicted`` (both positive). A predicted
    :class:`Spread` (a prediction from ceilings that have a spread of their own, e.g. the cost model at its
    ceilings' fastest and median calls) allows its whole range: from its low over ``factor`` to its high times
    ``factor``."""
    m, p = _spread(measured), _spread(predicted)
    _finite("within", factor)
    if factor < 1 or m.low <= 0 or p.low <= 0:
        raise ValueError(f"within needs positive values and factor >= 1, got {m}, {p}, {factor}")
    lo, hi = allowed(p, factor)
    return verdict_of(lo <= m.low and m.high <= hi, m.high < lo or m.low > hi)


def allowed(predicted: Spread | float, factor: float) -> tuple[float, float]:
    """The range :func:`within` allows a measurement around ``predicted`` (same units): its low over ``factor``
    to its high times ``factor``, for a page or an evidence table to print beside the verdict."""
    p = _spread(predicted)
    return p.low / factor, p.high * factor


def at_most(measured: Spread | float, limit: float) -> str:
    """Whether the measured interval is at most ``limit``."""
    m = _spread(measured)
    _finite("at_most", limit)
    return verdict_of(m.high <= limit, m.low > limit)


def at_least(measured: Spread | float, limit: float) -> str:
    """Whether the measured interval is at least ``limit``."""
    m = _spread(measured)
    _finite("at_least", limit)
    return verdict_of(m.low >= limit, m.high < limit)


def below(a: Spread | float, b: Spread | float) -> str:
    """Whether ``a`` is below ``b`` beyond both intervals (held), above or equal beyond them (did not hold), or
    neither (their intervals overlap: not resolved). Two values measured in the same runs compare better as one
    paired difference (:meth:`Spread.paired`, then :func:`at_most` 0)."""
    a, b = _spread(a), _spread(b)
    return verdict_of(a.high < b.low, a.low >= b.high)


def every(verdicts: Iterable[str]) -> str:
    """All held: held; any did not hold: did not hold; else not resolved. For a claim that is the conjunction of a
    few different conditions, never for one condition over many points (decide those on :func:`geomean` or
    :func:`trend`). Needs at least one verdict."""
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


def geomean(values: Iterable[float]) -> float:
    """The geometric mean of positive numbers (one run's ratios over many points, say): the ratio that, applied to
    every point, gives the same product. Decide "the points are as predicted" on the :class:`Spread` of the
    runs' geometric means, and name the worst point beside it."""
    v = [float(x) for x in values]
    _finite("geomean", *v)
    if not v or min(v) <= 0:
        raise ValueError(f"a geometric mean needs one or more positive values, got {v}")
    return math.exp(sum(math.log(x) for x in v) / len(v))


def geomean_of(spreads: Sequence[Spread | float]) -> Spread:
    """The geometric mean of several measured ratios (the points of a sweep, each over its own runs), with the
    interval their intervals allow together (the geometric means of their lows and of their highs): one slow run
    of one point moves it by that point's share only. Name the worst point beside it."""
    s = [_spread(v) for v in spreads]
    if not s:
        raise ValueError("geomean_of needs one or more spreads")
    return Spread(geomean(v.low for v in s), geomean(v.mid for v in s), geomean(v.high for v in s))


def extreme(spreads: Sequence[Spread | float], largest: bool = True) -> Spread:
    """The largest (or smallest) of several measured values, with its interval: from the largest low to the largest
    high (each point's interval covers it, so theirs covers the extreme). "Every point at most x" is this interval
    at most x: a straddling point leaves it open only when no point is wholly beyond."""
    s = [_spread(v) for v in spreads]
    if not s:
        raise ValueError("extreme needs one or more spreads")
    pick = max if largest else min
    return Spread(pick(v.low for v in s), pick(v.mid for v in s), pick(v.high for v in s))


def outside(spreads: dict, low: float, high: float = math.inf) -> tuple[list, list]:
    """The keys of ``spreads`` whose interval lies wholly outside ``[low, high]``, and those whose interval
    straddles an end of it: a sentence counts the first and names the second apart."""
    out, straddling = [], []
    for key, value in spreads.items():
        v = _spread(value)
        if v.high < low or v.low > high:
            out.append(key)
        elif v.low < low or v.high > high:
            straddling.append(key)
    return out, straddling


def trend(frame: pd.DataFrame, x: str, y: str, run: str = "run") -> Spread:
    """How ``y`` grows with ``x``: in each run, the least-squares slope of ``log y`` against ``log x`` (the
    exponent of a power law: 1 doubles ``y`` when ``x`` doubles, 0 is flat, negative falls), and the :class:`Spread`
    of those slopes over the runs. A run with fewer than two distinct ``x`` is left out; needs one run with two."""
    missing = [c for c in (x, y, run) if c not in frame.columns]
    if missing:
        raise ValueError(f"trend: no column(s) {missing}; the table has {list(frame.columns)}")
    slopes = []
    for _, g in frame.dropna(subset=[x, y]).groupby(run, sort=True):
        if g[x].nunique() < 2:
            continue
        if (g[x] <= 0).any() or (g[y] <= 0).any():
            raise ValueError(f"trend: {x} and {y} must be positive, to take their logarithms")
        slopes.append(float(np.polyfit(np.log(g[x].astype(float)), np.log(g[y].astype(float)), 1)[0]))
    if not slopes:
        raise ValueError(f"trend: no run of the table has two distinct values of {x}")
    return Spread.of(slopes)


def theil_sen(x: Sequence[float], y: Sequence[float], log: bool = False) -> Spread:
    """The slope of ``y`` against ``x`` over every point (every request of a grid, say), by Theil and Sen: the
    median of the slopes between all pairs of points, with its distribution-free 95 % interval (the pair slopes
    ranked at ``(N -/+ 1.96 sqrt(Var S)) / 2``, ``Var S = n(n-1)(2n+5)/18`` of Kendall's statistic). One point far
    off moves it by its share of the pairs only, so it suits a claim whose points have few runs each. ``log``:
    the slope of log y against log x (an exponent). Needs three points with two distinct ``x`` at least."""
    xs, ys = (np.log(np.asarray(v, float)) if log else np.asarray(v, float) for v in (x, y))
    keep = np.isfinite(xs) & np.isfinite(ys)
    xs, ys = xs[keep], ys[keep]
    n = len(xs)
    i, j = np.triu_indices(n, 1)
    dx = xs[j] - xs[i]
    pairs = np.sort((ys[j] - ys[i])[dx != 0] / dx[dx != 0])
    if n < 3 or not len(pairs):
        raise ValueError(f"theil_sen needs three points or more with two distinct x, got {n}")
    half = 1.959964 * math.sqrt(n * (n - 1) * (2 * n + 5) / 18)
    lo = int(max(0, math.floor((len(pairs) - half) / 2)))
    hi = int(min(len(pairs) - 1, math.ceil((len(pairs) + half) / 2)))
    return Spread(float(pairs[lo]), float(np.median(pairs)), float(pairs[hi]))


def settle(run_once: Callable[[], object], decided: Callable[[], bool], *, budget_s: float, max_runs: int) -> int:
    """Measure again while the verdict is open: call ``run_once()`` (one more interleaved run of the points that
    straddle) until ``decided()`` is true, ``max_runs`` more runs were made, or they took ``budget_s`` seconds
    (the next run is not started when the last one suggests it would end past the budget). Returns how many runs
    it made. This keeps a straddling point from being "not resolved" for want of runs, within a budget a chapter
    states, so the book's time stays bounded."""
    if budget_s < 0 or max_runs < 0:
        raise ValueError(f"settle needs budget_s >= 0 and max_runs >= 0, got {budget_s} and {max_runs}")
    made, started, last = 0, time.perf_counter(), 0.0
    while made < max_runs and not decided():
        spent = time.perf_counter() - started
        if spent + last > budget_s:
            break
        t0 = time.perf_counter()
        run_once()
        last = time.perf_counter() - t0
        made += 1
    return made


def leaning(measured: Spread, low: float, high: float = math.inf) -> str:
    """For an unresolved verdict, which way its median leans against a band ``[low, high]`` of what would hold:
    ``"inside"`` or ``"below"``/``"above"``, as a phrase for a sentence."""
    m = _spread(measured)
    if m.mid < low:
        return "below what would hold"
    if m.mid > high:
        return "above what would hold"
    return "on the held side"


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
    finding: str
    held: str
    not_held: str
    unresolved: str
    not_measured: str


_GENERIC_UNRESOLVED = ("the 95 % interval of the measurement ({measured}) lies partly inside and partly outside what "
                       "was predicted ({predicted}, with its tolerance): this run cannot tell which side it is on, "
                       "and more runs would narrow it.")


_NOT_MEASURED = "this run did not measure it."


def tally(verdicts: Iterable[str]) -> str:
    """``"17 claims: 7 held, 2 did not hold, 8 not resolved"`` (the outcomes that occur, in :data:`VERDICTS`
    order), or ``"no claims recorded"``."""
    verdicts = [str(v).strip().lower() for v in verdicts]
    if not verdicts:
        return "no claims recorded"
    counts = [f"{verdicts.count(v)} {v}" for v in VERDICTS if verdicts.count(v)]
    other = len(verdicts) - sum(verdicts.count(v) for v in VERDICTS)
    return f"{len(verdicts)} claim{'s' * (len(verdicts) != 1)}: " + ", ".join(counts + [f"{other} unreadable"] * bool(other))


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


class Claims:
    """The register of one chapter's claims: :meth:`claim` declares, :meth:`decide` decides. Introduced in
    chapter 0."""

    def __init__(self) -> None:
        self.declared: dict[str, _Declared] = {}
        self.rows: dict[str, Claim] = {}

    def claim(self, claim: str, statement: str, *, finding: str = "", held: str = "", not_held: str = "",
              unresolved: str = "", not_measured: str = _NOT_MEASURED) -> None:
        """Declare ``claim``: its ``statement`` (no placeholders: the same text on every machine), the ``finding``
        (what was measured, the same words whatever the outcome) and each outcome's tail, what the finding means
        when the claim held, did not hold or was not resolved. The sentence a chapter shows is the finding followed
        by the outcome's tail (joined by a space unless the tail opens with punctuation); without a finding, each
        tail is the whole sentence. All are ``str.format`` templates; ``{predicted}`` and ``{measured}`` are always
        available. The not-measured sentence is never joined to the finding: nothing was found.

        A claim declared with its statement alone is decided by :meth:`record`, and the chapter writes the finding
        itself, as prose, with :func:`pick` for the words that depend on the verdict."""
        if not re.fullmatch(r"[a-z0-9_]+", claim or "") or claim in self.declared:
            raise ValueError(f"claim ids must be unique snake_case names, got {claim!r}")
        if "{" in statement or not statement.strip():
            raise ValueError(f"claim {claim}: the statement is one constant sentence (no placeholders), got {statement!r}")
        if finding and not unresolved:
            raise ValueError(f"claim {claim}: a finding needs its unresolved tail too (which way the median leans, "
                             f"what would decide it)")
        self.declared[claim] = _Declared(statement, finding, held, not_held, unresolved or _GENERIC_UNRESOLVED,
                                         not_measured)

    def _open(self, claim: str, verdict: str | None) -> tuple["_Declared", str]:
        """The declaration of ``claim``, which must be declared and not yet decided, and ``verdict`` checked
        (``None`` read as not measured): what :meth:`decide` and :meth:`record` both require."""
        if claim not in self.declared:
            raise ValueError(f"claim {claim!r} was never declared; declared: {', '.join(self.declared) or 'none'}")
        if claim in self.rows:
            raise ValueError(f"claim {claim!r} was already decided")
        verdict = NOT_MEASURED if verdict is None else verdict
        if verdict not in VERDICTS:
            raise ValueError(f"claim {claim}: verdict must be one of {VERDICTS}, got {verdict!r}")
        return self.declared[claim], verdict

    def decide(self, claim: str, verdict: str | None, *, predicted: str = "", measured: str = "",
               evidence: str = "", **values) -> str:
        """Record the ``verdict`` (``None``: not measured) of a declared claim and return the sentence for it
        (markdown, its first letter capitalised unless its first word is a name such as ``bf16`` or ``vLLM``), which the chapter shows as a finding in its body: the verdict
        itself is shown only in the evidence table at the chapter's end (:meth:`evidence`). ``values`` fill the
        sentence's placeholders."""
        d, verdict = self._open(claim, verdict)
        if not (d.held or d.not_held) and verdict != NOT_MEASURED:
            raise ValueError(f"claim {claim!r} was declared with its statement alone: record it with record()")
        template = {HELD: d.held, NOT_HELD: d.not_held, UNRESOLVED: d.unresolved, NOT_MEASURED: d.not_measured}[verdict]
        if d.finding and verdict != NOT_MEASURED:
            template = d.finding + ("" if template[:1] in ",.:;)" else " ") + template
        missing = _fields(template) - set(values) - {"predicted", "measured"}
        if missing:
            raise ValueError(f"claim {claim}: the {verdict!r} sentence needs {', '.join(sorted(missing))}")
        text = template.format(predicted=predicted, measured=measured, **values)
        self.rows[claim] = Claim(claim, d.statement, predicted, measured, verdict, evidence)
        if verdict == NOT_MEASURED:  # the sentence gives the reason only: the statement says what was not measured
            return d.statement + (" This run did not measure it." if template == _NOT_MEASURED
                                  else f" This run does not decide it: {text}")
        first = re.match(r"[\w-]*", text).group()
        keep = any(c.isdigit() for c in first) or first[1:] != first[1:].lower()  # a name: "bf16", "gpt2-small", "vLLM"
        return text if keep else text[:1].upper() + text[1:]

    def record(self, claim: str, verdict: str | None, *, predicted: str = "", measured: str = "",
               evidence: str = "") -> str:
        """Record the ``verdict`` (``None``: not measured, with ``evidence`` saying why) of a claim declared with
        its statement alone, and return the verdict (one of :data:`VERDICTS`) for :func:`pick`: the chapter's
        finding is its own prose, and the verdict is shown only in the evidence table (:meth:`evidence`)."""
        d, verdict = self._open(claim, verdict)
        if d.held or d.not_held or d.finding:
            raise ValueError(f"claim {claim!r} was declared with its sentences: decide it with decide()")
        self.rows[claim] = Claim(claim, d.statement, predicted, measured, verdict, evidence)
        return verdict

    def undecided(self, claim: str, reason: str) -> str:
        """The sentence a chapter shows where this run does not decide ``claim``: its statement, then "This run does
        not decide it: " and ``reason`` (a clause, e.g. "one thread count only."). Text only, the same words
        :meth:`decide` gives: :meth:`record` records the verdict."""
        if claim not in self.declared:
            raise ValueError(f"claim {claim!r} was never declared; declared: {', '.join(self.declared) or 'none'}")
        if not reason.strip():
            raise ValueError(f"claim {claim}: say why this run does not decide it")
        return f"{self.declared[claim].statement} This run does not decide it: {reason}"

    def frame(self) -> pd.DataFrame:
        """The register as a DataFrame with the columns of ``claims.csv``: every declared claim, in the order
        declared; one never decided is ``not measured``."""
        rows = [self.rows.get(c) or Claim(c, d.statement, "", "", NOT_MEASURED, d.not_measured)
                for c, d in self.declared.items()]
        return pd.DataFrame([asdict(r) for r in rows], columns=_COLUMNS)

    def verdict(self, claim: str) -> str:
        """The verdict recorded for ``claim`` (``not measured`` while it is undecided)."""
        if claim not in self.declared:
            raise ValueError(f"claim {claim!r} was never declared; declared: {', '.join(self.declared) or 'none'}")
        row = self.rows.get(claim)
        return row.verdict if row else NOT_MEASURED

    def against(self, claim: str) -> str:
        """How this run's measurement of ``claim`` stood against its prediction, as a phrase for a sentence
        (the chapter's opening paragraph): ``"as predicted (P)"``, ``"where P was predicted"``, ``"against P
        predicted: this run's interval reaches both sides of it"``, ``"not measured here"``. The unresolved phrase
        says only what the interval did: the claim's own sentence says which way the median leans."""
        verdict, row = self.verdict(claim), self.rows.get(claim)
        if verdict == HELD:
            return f"as predicted ({row.predicted})" if row.predicted else "as predicted"
        if verdict == NOT_HELD:
            return f"where {row.predicted} was predicted" if row.predicted else "not as predicted"
        if verdict == UNRESOLVED:
            return f"against {row.predicted} predicted: this run's interval reaches both sides of it"
        return "not measured here"

    def evidence(self) -> pd.DataFrame:
        """The chapter's evidence table: each claim's statement, what was predicted, what this run measured, the
        verdict and the data it came from, with readable column labels (:data:`EVIDENCE_COLUMNS`)."""
        return self.frame()[list(EVIDENCE_COLUMNS)].rename(columns=EVIDENCE_COLUMNS)

    def summary(self) -> str:
        """How many claims and each outcome's count (:func:`tally`)."""
        return tally(self.frame().verdict)

    def misses(self, names: dict[str, str] | None = None, only_named: bool = False) -> str:
        """The chapter's misses for its opening paragraph, in the one wording the book uses. With ``names`` (each
        claim's id to what a reader calls it, "the step's growth with its cache"), each miss named: "Two predictions
        failed: A and B. Left open: C." (a claim without a name is named by its id in words, or with
        ``only_named`` left out: the opening says it itself); without, counted:
        "2 predictions failed and 1 was left open: see the evidence table." Empty when every claim held.
        Introduced in chapter 3."""
        frame = self.frame()
        verdicts = frame.verdict
        if names is not None:
            named = {v: [names.get(c, c.replace("_", " ")) for c in frame[verdicts == v].claim
                         if c in names or not only_named] for v in (NOT_HELD, UNRESOLVED)}
            return " ".join(filter(None, [
                f"{prose.count(len(named[NOT_HELD]), 'prediction').capitalize()} failed: "
                f"{prose.and_list(named[NOT_HELD])}." if named[NOT_HELD] else "",
                f"Left open: {prose.and_list(named[UNRESOLVED])}." if named[UNRESOLVED] else ""]))
        failed, left = int((verdicts == NOT_HELD).sum()), int((verdicts == UNRESOLVED).sum())
        parts = [f"{prose.count(failed, 'prediction')} failed"] if failed else []
        if left:  # "two failed and one was left open", the noun said once
            parts.append(f"{prose.count(left, 'prediction').split()[0] if failed else prose.count(left, 'prediction')} "
                         f"{'was' if left == 1 else 'were'} left open")
        told = " and ".join(parts)
        return f"{told[:1].upper()}{told[1:]}: see the evidence table." if told else ""


def pick(verdict: str, *, held: str, not_held: str, unresolved: str, not_measured: str = "") -> str:
    """The words for ``verdict`` (as :meth:`Claims.record` returns it): what the finding means when the claim
    held, did not hold (why, from data one layer down) or was not resolved (which way the median leans, what
    would decide it). Every outcome's words are written, and so computed, on every machine: a mistake in one
    shows wherever the chapter runs, not only where that outcome happens."""
    if verdict not in VERDICTS:
        raise ValueError(f"verdict must be one of {VERDICTS}, got {verdict!r}")
    if verdict == NOT_MEASURED and not not_measured:
        raise ValueError("this claim was not measured, and no words were given for that (not_measured=...)")
    return {HELD: held, NOT_HELD: not_held, UNRESOLVED: unresolved, NOT_MEASURED: not_measured}[verdict]


class InvariantBroken(AssertionError):
    """An arithmetic invariant failed: the chapter's numbers contradict each other, not the machine."""


def invariant(condition: bool, message: str) -> None:
    """Fail the chapter (and the build) when an arithmetic invariant breaks. Use it for what must hold on every
    machine (a sum of parts equals the whole, a count matches its formula, no pass beats the floor it is priced
    at), never for a measured conclusion. Introduced in chapter 1."""
    if not condition:
        raise InvariantBroken(message)
