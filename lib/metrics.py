"""Latency metrics of one request, scored from timestamps alone.

Every time here is in seconds, in and out. The module knows nothing about models: a toy loop, an
engine or an HTTP client that records when a request was sent and when each token arrived can be
scored by the same functions.

The metrics, for a request sent at ``t_req`` whose n tokens arrive at ``t_1 <= ... <= t_n``:

* TTFT (time to first token): ``t_1 - t_req``, how long the user waits before anything appears.
* ITL (inter-token latency): the gaps ``t_{i+1} - t_i``, a distribution of n - 1 values.
* TPOT (time per output token): ``(t_n - t_1) / (n - 1)``, the mean gap; undefined for n = 1.
* Worst gap: the largest ITL, the longest time the stream froze; undefined for n = 1.
* End-to-end latency (e2e): ``t_n - t_req``, from the request to its last token.
* Phase share: the fractions of e2e spent before the first token (TTFT) and after it (decode).
* Goodput: the fraction of requests that meet every stated objective (TTFT, TPOT, worst gap).

TTFT is prefill plus choosing the first token, **not** prefill plus a decode step. The prefill
pass already produces the distribution of the first generated token at the prompt's last position;
picking a token from it ends the wait. Adding a decode step would count a forward pass the first
token never needed. (TTFT as a client measures it also holds queueing, tokenisation and the
network; what it holds depends on where ``request_time`` was taken.)

TPOT is a mean, so it hides a stall: one 50 ms freeze among 10 ms gaps barely moves it. Report TPOT
and the worst gap together, with the prompt and output lengths they were measured at.

Introduced in chapter 1 (two phases).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from numbers import Real

import numpy as np
import pandas as pd

__all__ = [
    "RequestMetrics",
    "request_metrics",
    "meets_slo",
    "goodput",
    "phase_share",
    "summarize",
    "to_frame",
]


@dataclass(frozen=True)
class RequestMetrics:
    """The latency record of one request; every time is in seconds.

    ``tpot``, ``worst_gap`` and ``median_gap`` are ``None`` for a one-token request (it has no gap),
    and ``gaps`` is then empty.
    """

    ttft: float
    gaps: tuple[float, ...]
    tpot: float | None
    e2e: float
    worst_gap: float | None
    median_gap: float | None
    n_tokens: int


def _fmt(x: float) -> str:
    """A time in seconds, short enough for an error message."""
    return f"{x:.6g} s"


def _checked_trace(request_time: float, token_times: Sequence[float]) -> tuple[float, np.ndarray]:
    """``(request_time, token_times)`` as a float and a 1-D float array, or a ``ValueError`` naming what is
    wrong: not a number, not finite, an empty trace, a token before the request, or a time earlier than the one
    before it (the message names the index at fault)."""
    if isinstance(request_time, bool) or not isinstance(request_time, Real):
        raise ValueError(f"request_time must be a number of seconds, got {request_time!r} "
                         f"({type(request_time).__name__})")
    t_req = float(request_time)
    if not math.isfinite(t_req):
        raise ValueError(f"request_time is {t_req}; it must be a finite number of seconds")
    if isinstance(token_times, (str, bytes)):
        raise ValueError("token_times must be a sequence of seconds, not a string")
    try:
        times = np.asarray(token_times, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"token_times must be a 1-D sequence of numbers (seconds); could not read it: {exc}") from exc
    if times.ndim != 1:
        raise ValueError(f"token_times must be a 1-D sequence of seconds, got an array of shape {times.shape}")
    if times.size == 0:
        raise ValueError("token_times is empty; a request needs at least one token time (the arrival of its first "
                         "token)")
    bad = np.flatnonzero(~np.isfinite(times))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"token_times[{i}] is {times[i]}; every token time must be a finite number of seconds")
    early = np.flatnonzero(times < t_req)
    if early.size:
        i = int(early[0])
        raise ValueError(f"token_times[{i}] = {_fmt(times[i])} is {_fmt(t_req - times[i])} before request_time = "
                         f"{_fmt(t_req)}; a token cannot arrive before its request (are both times on the same "
                         "clock?)")
    back = np.flatnonzero(np.diff(times) < 0)
    if back.size:
        i = int(back[0]) + 1
        raise ValueError(f"token times decrease at index {i}: token_times[{i}] = {_fmt(times[i])} is "
                         f"{_fmt(times[i - 1] - times[i])} earlier than token_times[{i - 1}] = {_fmt(times[i - 1])}; "
                         "times must be non-decreasing, in arrival order")
    return t_req, times


def request_metrics(request_time: float, token_times: Sequence[float]) -> RequestMetrics:
    """Score one request from when it was sent and when each of its tokens arrived.

    ``request_time`` and ``token_times`` are in seconds on the same clock (any origin); ``token_times`` is any
    1-D sequence of floats (list, tuple, NumPy array) in arrival order. Equal consecutive times are allowed and
    give a gap of 0. Returns a :class:`RequestMetrics` whose times are in seconds. Bad input raises
    ``ValueError`` (:func:`_checked_trace`).

    Introduced in chapter 1 (two phases).
    """
    t_req, times = _checked_trace(request_time, token_times)
    gaps = tuple(float(g) for g in np.diff(times))
    n, first, last = int(times.size), float(times[0]), float(times[-1])
    return RequestMetrics(
        ttft=first - t_req,                                    # waiting for the prefill and the first choice
        gaps=gaps,                                             # ITL: every wait between two tokens
        tpot=(last - first) / (n - 1) if n > 1 else None,     # the mean of those waits
        e2e=last - t_req,                                      # the whole request
        worst_gap=max(gaps) if gaps else None,                 # the longest freeze
        median_gap=float(np.median(gaps)) if gaps else None,
        n_tokens=n,
    )


def _check_slo(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a positive, finite number of seconds, got {v}")
    return v


def _as_list(metrics: RequestMetrics | Iterable[RequestMetrics], who: str) -> list[RequestMetrics]:
    items = [metrics] if isinstance(metrics, RequestMetrics) else list(metrics)
    for i, m in enumerate(items):
        if not isinstance(m, RequestMetrics):
            raise TypeError(
                f"{who} expects RequestMetrics records (from request_metrics); "
                f"item {i} is a {type(m).__name__}"
            )
    return items


def meets_slo(
    m: RequestMetrics,
    ttft_slo: float,
    tpot_slo: float,
    worst_gap_slo: float | None = None,
) -> bool:
    """Whether one request meets every stated objective (each a bound in seconds, met when ``<=``).

    ``worst_gap_slo=None`` states no objective on the worst gap. A one-token request has no TPOT and
    no gap, so it meets the decode objectives vacuously and is judged on TTFT alone.

    Returns a bool. Introduced in chapter 1 (two phases).
    """
    if not isinstance(m, RequestMetrics):
        raise TypeError(f"meets_slo expects a RequestMetrics record, got a {type(m).__name__}")
    ttft_slo = _check_slo("ttft_slo", ttft_slo)
    tpot_slo = _check_slo("tpot_slo", tpot_slo)
    if worst_gap_slo is not None:
        worst_gap_slo = _check_slo("worst_gap_slo", worst_gap_slo)
    return _meets(m, ttft_slo, tpot_slo, worst_gap_slo)


def _meets(
    m: RequestMetrics, ttft_slo: float, tpot_slo: float, worst_gap_slo: float | None
) -> bool:
    if m.ttft > ttft_slo:
        return False
    if m.tpot is not None and m.tpot > tpot_slo:
        return False
    if worst_gap_slo is not None and m.worst_gap is not None and m.worst_gap > worst_gap_slo:
        return False
    return True


def goodput(
    metrics: RequestMetrics | Iterable[RequestMetrics],
    ttft_slo: float,
    tpot_slo: float,
    worst_gap_slo: float | None = None,
) -> float:
    """The fraction of requests (0 to 1) that meet every stated objective.

    ``metrics`` is one :class:`RequestMetrics` or an iterable of them. The objectives are bounds in
    seconds, met when ``<=``; ``worst_gap_slo=None`` states none on the worst gap. Multiply the
    fraction by the request rate to get goodput in requests per second.

    The choice for a one-token request: it has no TPOT and no gap, so it is judged on TTFT and
    nothing else (it meets the decode objectives vacuously).

    Raises ``ValueError`` for no requests or an objective that is not a positive, finite number.

    Introduced in chapter 1 (two phases).
    """
    items = _as_list(metrics, "goodput")
    if not items:
        raise ValueError("goodput needs at least one request; got none")
    ttft_slo = _check_slo("ttft_slo", ttft_slo)
    tpot_slo = _check_slo("tpot_slo", tpot_slo)
    if worst_gap_slo is not None:
        worst_gap_slo = _check_slo("worst_gap_slo", worst_gap_slo)
    met = sum(_meets(m, ttft_slo, tpot_slo, worst_gap_slo) for m in items)
    return met / len(items)


def phase_share(m: RequestMetrics) -> tuple[float, float]:
    """The fractions of end-to-end time spent before and after the first token.

    Returns ``(ttft / e2e, (e2e - ttft) / e2e)``, dimensionless, summing to 1: the prefill share
    (with whatever else precedes the first token) and the decode share.

    Raises ``ValueError`` when ``e2e`` is 0 (there is no time to share).

    Introduced in chapter 4.
    """
    if not isinstance(m, RequestMetrics):
        raise TypeError(f"phase_share expects a RequestMetrics record, got a {type(m).__name__}")
    if m.e2e <= 0:
        raise ValueError(
            f"phase_share needs a positive end-to-end time; e2e = {_fmt(m.e2e)}, so there is "
            "nothing to share (the request and all its tokens have the same timestamp)"
        )
    return m.ttft / m.e2e, (m.e2e - m.ttft) / m.e2e


def _check_percentiles(percentiles: Iterable[float]) -> list[float]:
    qs = []
    for q in percentiles:
        if isinstance(q, bool) or not isinstance(q, Real) or not 0 <= float(q) <= 100:
            raise ValueError(f"percentiles must be numbers from 0 to 100, got {q!r}")
        qs.append(float(q))
    names = [f"p{q:g}" for q in qs]
    if len(set(names)) != len(names):
        raise ValueError(f"percentiles must not repeat, got {qs!r}")
    return qs


def summarize(
    metrics_list: Iterable[RequestMetrics],
    percentiles: Iterable[float] = (50, 90, 99),
) -> pd.DataFrame:
    """Distribution of each metric over many requests, in seconds.

    Returns a DataFrame indexed by metric, rows ``ttft``, ``tpot``, ``itl`` (every gap of every
    request pooled), ``worst_gap`` and ``e2e``; columns ``count``, ``mean``, ``min``, one ``p<q>``
    per requested percentile (``p50``, ``p90``, ``p99`` by default; NumPy's linear
    interpolation) and ``max``. All values but ``count`` are seconds. A one-token request has no
    TPOT, gap or worst gap and is left out of those rows; a row with nothing in it has count 0 and
    NaN elsewhere.

    Raises ``ValueError`` for no requests or a percentile outside 0 to 100.

    Introduced in chapter 1 (two phases).
    """
    items = _as_list(metrics_list, "summarize")
    if not items:
        raise ValueError("summarize needs at least one request; got none")
    qs = _check_percentiles(percentiles)
    columns = ["count", "mean", "min", *[f"p{q:g}" for q in qs], "max"]

    values = {
        "ttft": [m.ttft for m in items],
        "tpot": [m.tpot for m in items if m.tpot is not None],
        "itl": [g for m in items for g in m.gaps],
        "worst_gap": [m.worst_gap for m in items if m.worst_gap is not None],
        "e2e": [m.e2e for m in items],
    }
    rows = {}
    for name, vals in values.items():
        a = np.asarray(vals, dtype=float)
        if a.size:
            pcts = np.percentile(a, qs).tolist() if qs else []
            rows[name] = [int(a.size), float(a.mean()), float(a.min()), *pcts, float(a.max())]
        else:
            rows[name] = [0, *[math.nan] * (len(columns) - 1)]
    frame = pd.DataFrame.from_dict(rows, orient="index", columns=columns)
    frame["count"] = frame["count"].astype(int)
    frame.index.name = "metric"
    frame.attrs["units"] = "s"
    return frame


def to_frame(metrics_list: RequestMetrics | Iterable[RequestMetrics]) -> pd.DataFrame:
    """One row per request, for tables and plots.

    Returns a DataFrame indexed by request number (0, 1, ...) with columns ``ttft``, ``tpot``,
    ``worst_gap``, ``median_gap``, ``e2e`` (seconds), ``n_tokens``, and ``prefill_share``,
    ``decode_share`` (fractions of e2e, as :func:`phase_share`). Values a request does not have
    (TPOT and gaps of a one-token request, shares when e2e is 0) are NaN.

    Introduced in chapter 0.
    """
    items = _as_list(metrics_list, "to_frame")
    nan = math.nan
    records = []
    for m in items:
        shares = phase_share(m) if m.e2e > 0 else (nan, nan)
        records.append(
            {
                "ttft": m.ttft,
                "tpot": nan if m.tpot is None else m.tpot,
                "worst_gap": nan if m.worst_gap is None else m.worst_gap,
                "median_gap": nan if m.median_gap is None else m.median_gap,
                "e2e": m.e2e,
                "n_tokens": m.n_tokens,
                "prefill_share": shares[0],
                "decode_share": shares[1],
            }
        )
    columns = ["ttft", "tpot", "worst_gap", "median_gap", "e2e", "n_tokens",
               "prefill_share", "decode_share"]
    frame = pd.DataFrame.from_records(records, columns=columns)
    frame["n_tokens"] = frame["n_tokens"].astype(int)
    frame.index.name = "request"
    frame.attrs["units"] = "s"
    return frame
