"""The measurement loops behind the sweeps of chapters 2 and 3, and the fixed-cost floor they find.

Each sweep returns a tidy pandas DataFrame, one row per measured point, times in seconds. A point whose
predicted cost would blow the sweep's time budget is recorded as skipped, with the prediction, rather
than silently left out; a batch that runs out of memory is recorded as out of memory and the sweep goes
on. Long sweeps show a progress bar (lib.progress).
"""

from __future__ import annotations

import copy
import statistics
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from lib.progress import progress

from lib import phases
from lib.machine import random_values, read_through
from lib.models import LoadedModel, random_prompt
from lib.shapes import ModelShape
from lib.timing import Timing, measure


@dataclass(frozen=True)
class FloorFit:
    """A pass's time as a fixed cost plus a cost per token: ``t(T) = fixed_s + per_token_s * T``.

    ``knee_tokens = fixed_s / per_token_s`` is where the per-token work equals the fixed cost: below it
    the pass is mostly floor, above it mostly work. Chapter 5 uses it as the best chunk size.
    """

    fixed_s: float
    per_token_s: float
    max_relative_error: float

    @property
    def knee_tokens(self) -> float:
        return self.fixed_s / self.per_token_s if self.per_token_s > 0 else float("inf")

    def predict(self, tokens) -> np.ndarray:
        return self.fixed_s + self.per_token_s * np.asarray(tokens, dtype=float)


def fit_floor(tokens, seconds) -> FloorFit:
    """Fit ``t = fixed + per_token * T`` to measured pass times, weighting each point by ``1 / t`` so
    short and long passes count alike (a least-squares fit of relative error). Needs two or more
    distinct token counts. Introduced in chapter 2; chapter 5 predicts a chunk size from it."""
    tokens = np.asarray(tokens, dtype=float)
    seconds = np.asarray(seconds, dtype=float)
    keep = np.isfinite(seconds)
    tokens, seconds = tokens[keep], seconds[keep]
    if len(np.unique(tokens)) < 2:
        raise ValueError(f"a floor fit needs times at two or more prompt lengths, got {tokens.tolist()}")
    if (seconds <= 0).any():
        raise ValueError("times must be positive seconds")
    per_token, fixed = np.polyfit(tokens, seconds, 1, w=1 / seconds)
    fixed = max(float(fixed), 0.0)
    error = np.abs((fixed + per_token * tokens) - seconds) / seconds
    return FloorFit(fixed, float(per_token), float(error.max()))


@dataclass(frozen=True)
class Floor:
    """A prefill's floor and knee read off measured points, no fit (seconds, prompt tokens).

    ``floor_s`` (``floor_low_s``, ``floor_high_s``): the pass of the shortest prompt measured,
    ``floor_tokens`` long (1 in the book). ``flat_until_tokens``: the longest prompt up to which every
    pass takes at most ``(1 + margin) * floor_s``: a longer prompt costs no more than the floor. The rule reads
    medians against a median; a chapter that wants the reading's own spread reads it again off each end of the
    points' intervals (chapter 2), so that one rule gives every number the page shows.
    ``knee_tokens``: the shortest prompt whose time per token is at most ``(1 + margin)`` times the
    lowest measured (``best_per_token_s``, at ``best_tokens``): where time per token stops falling.
    ``knee_confirmed``: a longer prompt than the knee was measured (else the knee may lie beyond).
    """

    floor_tokens: int
    floor_s: float
    floor_low_s: float
    floor_high_s: float
    flat_until_tokens: int
    knee_tokens: int
    knee_s: float
    best_per_token_s: float
    best_tokens: int
    knee_confirmed: bool
    margin: float


def floor_and_knee(tokens, seconds, low_s=None, high_s=None, *, margin: float = 0.25) -> Floor:
    """Find a prefill's :class:`Floor` from measured medians ``seconds`` at prompt lengths ``tokens``
    (``low_s``/``high_s``: each point's range, default the median). NaN times (skipped points) are
    dropped; needs two or more distinct lengths. Introduced in chapter 2; chapter 5 reads its knee."""
    tokens = np.asarray(tokens, dtype=float)
    seconds = np.asarray(seconds, dtype=float)
    low = seconds if low_s is None else np.asarray(low_s, dtype=float)
    high = seconds if high_s is None else np.asarray(high_s, dtype=float)
    if not (len(tokens) == len(seconds) == len(low) == len(high)):
        raise ValueError("tokens, seconds, low_s and high_s must have the same length")
    if not (margin >= 0 and np.isfinite(margin)):
        raise ValueError(f"margin must be a finite number >= 0, got {margin!r}")
    keep = np.isfinite(seconds)
    order = np.argsort(tokens[keep], kind="stable")
    tokens, seconds, low, high = (a[keep][order] for a in (tokens, seconds, low, high))
    if len(np.unique(tokens)) < 2 or len(np.unique(tokens)) < len(tokens):
        raise ValueError(f"a floor needs times at two or more distinct prompt lengths, got {tokens.tolist()}")
    if (tokens < 1).any() or (seconds <= 0).any():
        raise ValueError("prompt lengths must be at least 1 and times positive seconds")
    if (low > seconds).any() or (high < seconds).any():
        raise ValueError("each point needs low_s <= seconds <= high_s")
    over = seconds > (1 + margin) * seconds[0]
    flat_until = tokens[np.argmax(over) - 1] if over.any() else tokens[-1]
    per_token = seconds / tokens
    best = int(np.argmin(per_token))
    knee = int(np.argmax(per_token <= (1 + margin) * per_token[best]))
    return Floor(int(tokens[0]), float(seconds[0]), float(low[0]), float(high[0]), int(flat_until),
                 int(tokens[knee]), float(seconds[knee]), float(per_token[best]), int(tokens[best]),
                 bool(knee < len(tokens) - 1), float(margin))


def prefill_sweep(model: LoadedModel, prompts, *, logits: str = "last", repeats: int = 3, warmup: int = 1,
                  min_seconds: float = 0.0, max_repeats: int = 5, budget_s: float | None = None, seed: int = 0,
                  label: str = "") -> pd.DataFrame:
    """Time a prefill of each prompt length in ``prompts`` (ascending): median, low and high of
    ``repeats`` passes after ``warmup``, and of more while the passes add up to less than ``min_seconds`` (at
    most ``max_repeats``): a short pass then gets several tries, and its fastest (``low_s``) is the machine's
    time for it with the least of a shared machine's interruptions in it. Returns one row per length with
    ``prompt_tokens``, ``median_s``, ``low_s``, ``high_s``, ``passes`` and ``status``.

    With ``budget_s``, a length whose predicted time (the last measured time scaled by the ratio of
    lengths) times ``warmup + repeats`` exceeds the budget is not run; its row says so and carries the
    prediction in ``predicted_s``. Introduced in chapter 2.
    """
    rows, last = [], None
    for n in progress(list(prompts), desc=label or "prefill", leave=False):
        phases.check_fits(model, n)
        if budget_s is not None and last is not None:
            predicted = last[1] * n / last[0]
            if predicted * (warmup + repeats) > budget_s:
                rows.append(dict(prompt_tokens=n, median_s=np.nan, low_s=np.nan, high_s=np.nan, passes=0,
                                 faults=np.nan, predicted_s=predicted,
                                 status=f"skipped: predicted {predicted:.1f} s a pass, over the budget"))
                continue
        ids = random_prompt(n, model.vocab_size, seed=seed, device=model.device)
        first = measure(lambda: phases.prefill(model, ids, logits=logits), model.device, warmup=warmup, repeats=repeats)
        samples, faults = list(first.samples), list(first.faults)
        while sum(samples) < min_seconds and len(samples) < max_repeats:
            more = measure(lambda: phases.prefill(model, ids, logits=logits), model.device, warmup=0, repeats=1)
            samples, faults = samples + list(more.samples), faults + list(more.faults)
        t = Timing.of(samples, faults)
        rows.append(dict(prompt_tokens=n, median_s=t.median, low_s=t.low, high_s=t.high, passes=len(samples),
                         faults=t.fastest_faults, predicted_s=np.nan, status="ok"))
        last = (n, t.median)
    return pd.DataFrame(rows)


def prefilled(model: LoadedModel, prefill_model: LoadedModel | None, context: int, seed: int):
    """A cache of ``context`` random tokens for ``model`` and the greedy token after them. The cache is
    built by ``prefill_model`` (default: ``model``) and cast to ``model``'s dtype."""
    ids = random_prompt(context, model.vocab_size, seed=seed, device=model.device)
    logits, cache = phases.prefill(prefill_model or model, ids)
    return phases.cast_cache(cache, model.dtype), logits[:, -1:].argmax(dim=-1)


def decode_sweep(model: LoadedModel, contexts, *, steps: int = 40, runs: int = 3, seed: int = 0,
                 prefill_model: LoadedModel | None = None, label: str = "", cache: str = "dynamic",
                 caches: dict | None = None, warmup_steps: int = 5) -> pd.DataFrame:
    """Cached greedy decode from each context length: one prefill builds each context's cache, then ``runs``
    runs, each of ``steps`` steps from every context in turn (the cache cropped back to its context first), so
    a slow spell of a shared machine lands on every context of a run, and a difference between two contexts is
    taken within one run. One short warm-up run first (``warmup_steps`` steps from each context). Every step reads its token back to the host. Returns one
    row per (context, run) with the run's median, lowest and highest step time in seconds. Checks the position
    table first. ``prefill_model`` (same architecture, another dtype) may build the cache when ``model``'s own
    prefill would be slow. ``cache="static"`` decodes over a preallocated cache of ``context + steps``
    positions (:func:`lib.phases.static_cache`) instead of the growing ``DynamicCache``. ``caches``: a dict that
    keeps the prefilled caches between calls, so a chapter can interleave one-run calls across configurations
    without prefilling again. ``faults_per_step`` is the run's median page faults a step (the pages a growing
    cache's new tensors got fresh from the operating system). Introduced in chapter 3."""
    _check_cache_kind(cache)
    for c in contexts:
        phases.check_fits(model, c, steps)
    caches = {} if caches is None else caches
    for c in contexts:
        if c not in caches:
            kv, first = prefilled(model, prefill_model, c, seed)
            caches[c] = (phases.static_cache(model, kv, c + steps) if cache == "static" else kv, first)
    for c in contexts:
        kv, first = caches[c]
        phases.truncate_cache(kv, c)
        phases.decode(model, first, kv, min(steps, warmup_steps))  # warm-up
    rows = []
    for run in progress(range(runs), desc=label or "decode", leave=False):
        for c in contexts:
            kv, first = caches[c]
            phases.truncate_cache(kv, c)
            trace = phases.decode(model, first, kv, steps)
            step = trace.step_times
            rows.append(dict(context_tokens=c, run=run + 1, steps=len(step), median_s=statistics.median(step),
                             low_s=min(step), high_s=max(step), faults_per_step=statistics.median(trace.step_faults),
                             cache_bytes=phases.cache_bytes(kv)))
    return pd.DataFrame(rows).sort_values(["context_tokens", "run"], ignore_index=True)


def cache_costs(shape: ModelShape, batch: int, context: int, device: torch.device | str,
                dtype: torch.dtype = torch.float32, *, repeats: int = 3, warmup: int = 1,
                flush_bytes: int = 0) -> dict[str, Timing]:
    """Time, alone, what one decode step does with the KV cache of ``batch`` sequences of ``context``
    positions, over every layer of ``shape``; returns ``{"attention": Timing, "concatenation": Timing}``
    in seconds per step:

    * ``attention``: each sequence's one new query per head attends over its cache
      (``scaled_dot_product_attention``, no mask), every layer: the whole cache is read once;
    * ``concatenation``: how ``DynamicCache`` grows: every layer's keys and values are copied into new
      tensors one position longer (so the cache grows by one position per call, as in a decode run). With
      ``flush_bytes`` (the model's weight bytes, say), each call comes after a read of that many bytes of
      another array, untimed: a step reaches a layer's cache after streaming the whole model's weights since it
      last touched it, and on a CPU whose last-level cache would otherwise hold the cache from one call to the
      next, the copy alone ran faster than inside a step. Attention is timed warm: in a step it reads the
      tensors the concatenation has just written.

    The cache has a real one's size and layout (2 x layers tensors, written before timing), so where it
    is larger than the CPU's caches it is read from memory, as in a decode step. The tensors hold random
    values (a GPU's kernels can run faster on constants). On a GPU each sample is timed with CUDA events
    on ``device``'s stream (a few microseconds of copies per layer would be swamped by the host clock and
    its two synchronisations). Introduced in chapter 3.
    """
    if batch < 1 or context < 1:
        raise ValueError(f"cache_costs needs batch and context of at least 1, got {batch} and {context}")
    dims = (batch, shape.kv_heads, context, shape.head_dim)
    kv = [random_values(*dims, dtype=dtype, device=device) for _ in range(2 * shape.layers)]
    query = torch.randn((batch, shape.heads, 1, shape.head_dim), dtype=dtype, device=device)
    new = torch.randn((batch, shape.kv_heads, 1, shape.head_dim), dtype=dtype, device=device)
    gqa = {"enable_gqa": True} if shape.heads != shape.kv_heads else {}

    def attention() -> None:
        for k, v in zip(kv[0::2], kv[1::2]):
            torch.nn.functional.scaled_dot_product_attention(query, k, v, **gqa)

    def concatenation() -> None:
        for i, t in enumerate(kv):
            kv[i] = torch.cat([t, new], dim=-2)

    if flush_bytes < 0:
        raise ValueError(f"flush_bytes cannot be negative, got {flush_bytes}")
    events = torch.device(device).type == "cuda"
    flush = None
    if flush_bytes:
        other = random_values(max(1, flush_bytes // dtype.itemsize), dtype=dtype, device=device)
        flush = lambda: read_through(other)  # noqa: E731
    with torch.inference_mode():
        return {"attention": measure(attention, device, warmup=warmup, repeats=repeats, use_cuda_events=events),
                "concatenation": measure(concatenation, device, warmup=warmup, repeats=repeats,
                                         use_cuda_events=events, before=flush)}


def _check_cache_kind(cache: str) -> None:
    if cache not in ("dynamic", "static"):
        raise ValueError(f"cache must be 'dynamic' (grows by concatenation) or 'static' (preallocated), got {cache!r}")


def _out_of_memory(error: BaseException) -> bool:
    text = str(error).lower()
    return (isinstance(error, (torch.OutOfMemoryError, MemoryError)) or "out of memory" in text
            or "can't allocate" in text or "cublas_status_alloc_failed" in text)


def batched_decode_sweep(model: LoadedModel, context: int, batches, *, steps: int = 8, seed: int = 0,
                         prefill_model: LoadedModel | None = None, label: str = "",
                         cache: str = "dynamic") -> pd.DataFrame:
    """Decode ``steps`` steps for each batch size in ``batches``, every sequence at ``context`` tokens.

    One prompt is prefilled once and its cache copied to every sequence of the batch (a decode step's
    cost depends on the cache's shape, not its values). Returns one row per batch size: the median,
    lowest and highest step time (s) and its median page faults a step, or ``status="out of memory"`` when the
    batch did not fit.
    ``cache="static"``: a preallocated cache of ``context + steps`` positions, written in place
    (:func:`lib.phases.static_cache`), so a step copies no cache. Introduced in chapter 3."""
    _check_cache_kind(cache)
    phases.check_fits(model, context, steps)
    base, first = prefilled(model, prefill_model, context, seed)
    rows = []
    for b in progress(list(batches), desc=label or "batched decode", leave=False):
        if b < 1:
            raise ValueError(f"batch sizes must be at least 1, got {b}")
        kv = None
        try:
            kv = copy.deepcopy(base)
            kv.batch_repeat_interleave(b)
            kv = phases.static_cache(model, kv, context + steps) if cache == "static" else kv
            tokens = first.repeat(b, 1)
            phases.decode(model, tokens, kv, 1)  # warm-up step
            phases.truncate_cache(kv, context)
            trace = phases.decode(model, tokens, kv, steps)
            step = trace.step_times
            rows.append(dict(batch=b, context_tokens=context, steps=steps, median_s=statistics.median(step),
                             low_s=min(step), high_s=max(step), faults_per_step=statistics.median(trace.step_faults),
                             cache_bytes=phases.cache_bytes(kv), status="ok"))
        except (RuntimeError, MemoryError) as error:
            if not _out_of_memory(error):
                raise
            rows.append(dict(batch=b, context_tokens=context, steps=steps, median_s=np.nan, low_s=np.nan,
                             high_s=np.nan, faults_per_step=np.nan, cache_bytes=np.nan, status="out of memory"))
        finally:
            del kv
            if model.device.type == "cuda":
                torch.cuda.empty_cache()
    return pd.DataFrame(rows)
