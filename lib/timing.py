"""Timing that is right on the CPU and on CUDA (chapter 1).

A GPU runs asynchronously: a Python call returns when the work is *queued*, not done. Every clock read
here therefore synchronises the device first (:func:`now`), and :func:`measure` warms up before it
repeats, then reports the median with the lowest and highest repeat. All times are in seconds.

Beside each sample :func:`measure` counts the **page faults** it took (:func:`page_faults`): memory the process
touches for the first time (a tensor the allocator placed on pages newly mapped from the operating system) costs
the kernel a fault per page, which chapter 0 prices, and which a pass may or may not take from one run to the
next (the allocator decides).

Per-token timestamps in the decode loops (:mod:`lib.phases`) are taken right after the chosen token id
has been read back to the host with ``.item()``, as a serving loop must before it can send the token.
"""

from __future__ import annotations

import statistics
import time

try:
    import resource
except ImportError:  # Windows: no getrusage
    resource = None
from dataclasses import dataclass
from typing import Callable, Sequence

import pandas as pd
import torch


def synchronize(device: torch.device | str | None) -> None:
    """Wait until all queued work on ``device`` is done (a no-op on the CPU)."""
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def now(device: torch.device | str | None = None) -> float:
    """Host time in seconds (``time.perf_counter``), read after ``device`` has finished its queued work."""
    synchronize(device)
    return time.perf_counter()


#: Bytes in one page of memory (what one page fault maps).
PAGE_BYTES = resource.getpagesize() if resource else 4096


def page_faults() -> int:
    """Minor page faults this process (every thread) has taken so far: each maps a page of memory touched for the
    first time. Counted by the operating system (``getrusage``); 0 where it does not count them. Introduced in
    chapter 0."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_minflt) if resource else 0


@dataclass(frozen=True)
class Timing:
    """Repeated timings of one operation, in seconds: median, lowest, highest and every sample, and the page faults
    each sample took (``faults``, in the samples' order; empty when they were not counted)."""

    median: float
    low: float
    high: float
    samples: tuple[float, ...]
    faults: tuple[int, ...] = ()

    @property
    def fastest_faults(self) -> int:
        """The page faults of the fastest sample (0 when not counted)."""
        return self.faults[self.samples.index(self.low)] if self.faults else 0

    @property
    def median_ms(self) -> float:
        return self.median * 1e3

    @property
    def low_ms(self) -> float:
        return self.low * 1e3

    @property
    def high_ms(self) -> float:
        return self.high * 1e3

    @classmethod
    def of(cls, samples, faults=()) -> "Timing":
        """Summarise a non-empty sequence of durations in seconds (and the page faults of each, if counted)."""
        samples, faults = tuple(float(s) for s in samples), tuple(int(f) for f in faults)
        if not samples:
            raise ValueError("no samples to summarise: time at least one repeat")
        if faults and len(faults) != len(samples):
            raise ValueError(f"{len(faults)} fault counts for {len(samples)} samples")
        return cls(statistics.median(samples), min(samples), max(samples), samples, faults)


def measure(fn: Callable[[], object], device: torch.device | str | None = None, *, warmup: int = 1,
            repeats: int = 5, use_cuda_events: bool = False, before: Callable[[], object] | None = None) -> Timing:
    """Time ``fn()`` ``repeats`` times after ``warmup`` untimed calls; return a :class:`Timing` (with each
    sample's page faults). ``before``, if given, is called untimed before each call (a flush of the CPU's caches,
    say).

    The device is synchronised before and after each call. On CUDA, ``use_cuda_events=True`` times
    with CUDA events instead of the host clock (device time only, no launch latency seen by the host).
    Introduced in chapter 2.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    if warmup < 0:
        raise ValueError(f"warmup cannot be negative, got {warmup}")
    for _ in range(warmup):
        fn()
    samples, faults = [], []
    events = use_cuda_events and device is not None and torch.device(device).type == "cuda"
    for _ in range(repeats):
        if before is not None:
            before()
        faults_before = page_faults()
        if events:
            with torch.cuda.device(torch.device(device)):  # events record on the stream of `device`
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                synchronize(device)
                start.record()
                fn()
                end.record()
                end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = now(device)
            fn()
            samples.append(now(device) - t0)
        faults.append(page_faults() - faults_before)
    return Timing.of(samples, faults)


def overhead(device: torch.device | str | None = None, repeats: int = 200) -> dict[str, float]:
    """What the harness itself costs, in seconds (medians of ``repeats``): ``clock`` (two synchronised
    clock reads around nothing, what :func:`measure` adds to every sample) and ``readback`` (reading
    one token id back to the host with ``.item()``, what every decode step adds). Compare them with
    the shortest step a chapter times.

    Introduced in chapter 0 (this machine).
    """
    empty = measure(lambda: None, device, warmup=5, repeats=repeats).median
    token = torch.zeros(1, dtype=torch.long, device=device)
    readback = measure(token.item, device, warmup=5, repeats=repeats).median
    return {"clock": empty, "readback": readback}


def median_range(frame: pd.DataFrame, by: str | Sequence[str], columns: Sequence[str]) -> pd.DataFrame:
    """Summarise repeated runs: one row per ``by`` group with, for each column ``c``, its median as ``c`` and the
    ends of its 95 % interval (:func:`lib.claims.median_interval`: distribution-free, the whole range with five runs
    or fewer) as ``c_low`` and ``c_high`` (``c`` keeps its unit suffix, e.g. ``tpot_ms``, ``tpot_ms_low``,
    ``tpot_ms_high``). Groups keep their first appearance's order.

    Introduced in chapter 1.
    """
    from lib.claims import median_interval

    keys = [by] if isinstance(by, str) else list(by)
    missing = [c for c in [*keys, *columns] if c not in frame.columns]
    if missing:
        raise ValueError(f"median_range: no column(s) {missing}; the table has {list(frame.columns)}")
    rows = []
    for key, g in frame.groupby(keys, sort=False):
        row = dict(zip(keys, key if isinstance(key, tuple) else (key,)))
        for c in columns:
            values = g[c].dropna()
            low, mid, high = median_interval(values) if len(values) else (float("nan"),) * 3
            row.update({c: mid, f"{c}_low": low, f"{c}_high": high})
        rows.append(row)
    return pd.DataFrame(rows, columns=[*keys, *[x for c in columns for x in (c, f"{c}_low", f"{c}_high")]])
