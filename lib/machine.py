"""This machine's ceilings: the rates the kernels of a pass actually meet, measured once per build.

A pass of an eager model is a row of kernels issued one after another from Python, so its time is the sum of
what each kernel takes plus the cost of issuing them (:mod:`lib.costmodel` adds them up). Chapter 0 measures
every rate that sum needs, once, with simple code (:func:`measure_ceilings`), and writes
``data/00_machine/ceilings.csv``; every later chapter reads that one table (:func:`load_ceilings`), so the same
ceiling never drifts between chapters built minutes apart. For each dtype and thread count:

* **Streaming** (``read``, ``read_max``, ``copy``, ``fresh_copy``, ``triad``), the way STREAM measures it: arrays
  at least four times the last-level cache (:func:`budget`), bytes counted per kernel (write-allocate traffic not counted, as in STREAM). The
  read is a sum; ``read_max`` cross-checks it with a kernel that does almost no arithmetic (a running maximum over the bits as whole numbers);
  ``fresh_copy`` copies into newly allocated memory, as a cache that grows by concatenation does.
* **The model's matrices in its own layout** (``blocks`` and ``head``, per model and number of rows): GPT-2's
  ``Conv1D`` calls ``addmm`` on ``[in, out]`` weights with a bias, a Llama's ``Linear`` calls ``F.linear`` on
  ``[out, in]``; the LM head is ``F.linear`` in both. At one row this is the rate a decode step streams its
  weights at (bytes over time); at ``M`` rows it is ``F(M)``, the FLOP rate the model's shapes reach with ``M``
  rows, from one row to the longest prompt.
* **Attention** (``attention_prefill`` over ``T`` tokens, causal; ``attention_decode``, one new token per
  sequence over a cache), with the model's heads, for every layer.
* **Dispatch** (``dispatch``, per model, pass and size): the model at its own size with its matrix products and
  attention :func:`hollowed` out (each returns zeros of its output's shape), so a pass issues every operation and
  runs its small kernels (norms, activations, residual adds, the cache's bookkeeping) at the model's own width,
  and nothing else. The operations are counted (:class:`torch.overrides.TorchFunctionMode`), so the cost per
  operation is stated.
* **The square product** (``square_matmul``): a large ``n x n`` product on random data, the peak the textbook
  roofline uses; ``n`` follows the rate the machine shows, so a slow kernel gets a small product.

**The statistic.** Every ceiling is the *fastest* of its repeats, after warm-up and device synchronisation: other
programs on a shared machine only ever slow a kernel down, so the fastest sample is the one closest to what the
kernel can do, and the one a slow spell moves least (a host whose own speed drifts moves it all the same:
between two quiet builds 24 minutes apart every ceiling moved 10-25 %, and the chapters' measurements 5-12 %,
the same way). The median of the same repeats is kept beside it, and
``spread = median / fastest - 1`` says how noisy the machine was. The repeats are taken in ``rounds`` (three
in a full build): every ceiling of a dtype is measured once per round, at every thread count, before the next
round begins, so a slow spell of a shared machine that lasts a few seconds lands on one round of everything rather than
on every repeat of the few ceilings measured during it. Every measurement has a time budget
(:class:`Budget`): a kernel that runs slowly (a dtype without hardware instructions, say) is measured on fewer
layers, or fewer rows, and the table says so.

Introduced in chapter 0 (this machine).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import mmap
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
import transformers

from lib.device import UnsupportedDtype, cpu_flags, device_name, resolve_dtype, use_threads
from lib.dtypes import dtype_name
from lib.paths import MACHINE_SECTION
from lib.shapes import GPT2_SMALL, SMOLLM2_135M, ModelShape
from lib.timing import PAGE_BYTES, Timing, page_faults, synchronize

if TYPE_CHECKING:
    from lib.claims import Spread

__all__ = ["last_level_cache_bytes", "Pace", "pace", "pace_table", "pace_claim", "release_pace", "Budget", "budget", "hardware_support", "MODELS", "ROWS", "HEAD_ROWS", "ATTENTION_ROWS", "STREAM_KERNELS", "measure_ceilings", "read_through",
           "Ceilings", "KernelTime", "load_ceilings", "check_ceilings", "CorruptCeilings", "count_operations"]

#: The models chapter 0 can measure: their shape and how their layers call their matrices.
MODELS: dict[str, tuple[ModelShape, str]] = {
    "gpt2-small": (GPT2_SMALL, "conv1d"),
    "smollm2-135m": (SMOLLM2_135M, "linear"),
    "tiny-gpt2": (ModelShape("tiny GPT-2", 2, 64, 4, 4, 256, 1024, gated_ffn=False), "conv1d"),
}
#: Rows through the model's block matrices: one (a decode step) to the longest prompt the chapters run; its LM
#: head (which a prefill runs at one row) and its attention need fewer points.
ROWS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
HEAD_ROWS = (1, 4, 16, 64, 256)
ATTENTION_ROWS = (1, 4, 16, 64, 256, 1024)
QUICK_ROWS = (1, 4, 16)
#: A tensor at least this large gets fresh pages from the allocator each time it is made (glibc's largest mmap
#: threshold on 64-bit Linux), so each of its pages faults once (:mod:`lib.costmodel` counts these before measuring).
FRESH_PAGES_BYTES = 32 << 20
#: The longer caches (sequences, cached tokens) a decode step's dispatch is timed from beside 16 tokens, where
#: chapters 3 and 4 decode one stream from up to 1,000 tokens and chapter 3 batches 16 at 512
#: (:meth:`Ceilings.rest_growth`); a batch measured from 16 tokens only is timed from 16 only.
LONG_CACHES = ((1, 1000), (16, 512))  # batch 64 in proportion past 16: timing its 2.4 GB steps cost 2 minutes
STREAM_KERNELS = ("read", "read_max", "copy", "fresh_copy", "triad")
#: The most a pass of a memory system can stream, in bytes/s: a table above it was not measured here.
_FASTEST_MEMORY = 20e12
#: The tensors and models of the dtype being measured, kept across its thread counts and rounds
#: (:func:`measure_ceilings` keeps one such dict per dtype and empties them at its end): making 500 MB of random
#: weights costs more than timing them.
_KEPT: dict = {}
#: What :func:`measure_ceilings` makes again in each dtype's turn of a round rather than keep across rounds: arrays
#: of random values, quick to make and large (a long context's caches run to gigabytes; both dtypes' at once
#: exhausted a 24 GiB host). The models and their operation counts, slower to make, are kept.
_REMADE = ("caches", "stream", "flush", "square")


def _kept(key, make):
    """``make()``, once per key while one dtype is measured."""
    if key not in _KEPT:
        _KEPT[key] = make()
    return _KEPT[key]


def random_values(*shape: int, scale: float = 1.0, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """A tensor of ``shape`` holding uniform random values in ``[-scale, scale]``: one random block of at most
    2**20 values, repeated to fill it (a kernel's time does not depend on the values, and drawing hundreds of
    megabytes of random numbers takes longer than timing them).

    Used by :mod:`lib.machine` and :func:`lib.sweeps.cache_costs`; chapter 0.
    """
    n = math.prod(shape)
    block = torch.empty(min(n, 1 << 20), dtype=dtype, device=device).uniform_(-scale, scale)
    out = torch.empty(n, dtype=dtype, device=device)
    whole = n // block.numel() * block.numel()
    out[:whole].view(-1, block.numel()).copy_(block)
    out[whole:].copy_(block[:n - whole])
    return out.view(*shape)


_BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def read_through(t: torch.Tensor) -> torch.Tensor:
    """Read every byte of ``t`` once with almost no arithmetic: a running maximum over its bits seen as whole
    numbers of its width. Used where a pass's weights must stream past the CPU's caches (a flush, a hollowed
    pass). A maximum over the values themselves would do: on this CPU a bf16 one runs at 2 GB/s on one thread
    against 11.6 GB/s for the same bytes as 16-bit integers, which made chapter 0's bf16 runs the slowest part of
    the book without changing what they measure (the bytes that pass through the caches).

    Used by :mod:`lib.machine`, :mod:`lib.sizes` and :func:`lib.sweeps.cache_costs`; chapter 0.
    """
    return torch.amax(t.view(_BITS[t.element_size()]) if t.is_floating_point() else t)


@dataclass(frozen=True)
class Budget:
    """How long one ceiling may take to measure in one round (``seconds``, warm-up included), how many repeats it
    gets in a round at least and at most, in how many ``rounds``, whether a call warms up before its repeats
    (``warm_up``: the first round's; a later round's kernels are already warm, and its first call is a sample),
    and how large the streamed arrays are (``stream_bytes``). One policy for the book (:func:`budget`)."""

    seconds: float
    min_repeats: int
    max_repeats: int
    stream_bytes: int
    rounds: int = 1
    warm_up: bool = True


def last_level_cache_bytes() -> int | None:
    """This host's last-level CPU cache in bytes (the largest level Linux's ``/sys`` lists for CPU 0; on a virtual
    machine, the host socket's, shared), or ``None`` where it does not say."""
    from pathlib import Path

    sizes = {}
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            level, size = (index / "level").read_text().strip(), (index / "size").read_text().strip()
            sizes[int(level)] = int(size.rstrip("KMG")) * {"K": 2**10, "M": 2**20, "G": 2**30}.get(size[-1], 1)
        except (OSError, ValueError):
            continue
    return sizes[max(sizes)] if sizes else None


def budget(device: torch.device, quick: bool = False) -> Budget:
    """Measurement sizes for ``device``: streamed arrays of 1 GiB on a GPU and, on a CPU, of 256 MiB or four times
    its last-level cache, whichever is larger (STREAM's rule: a host with a 480 MiB cache held a 256 MiB array
    between calls); three rounds of 0.06 s per ceiling with 2 to 3 repeats each (6 to 9 samples: with two rounds'
    4 to 6, the fastest call of the noisiest small kernels moved by up to a half between two quiet builds); quick
    mode shrinks both, in one round.

    Used by :func:`measure_ceilings`; chapter 0.
    """
    if quick:
        return Budget(seconds=0.08, min_repeats=3, max_repeats=5, stream_bytes=32 << 20)
    cache = last_level_cache_bytes() or 0
    return Budget(seconds=0.06, min_repeats=2, max_repeats=3, rounds=3,
                  stream_bytes=(1 << 30) if device.type == "cuda" else max(256 << 20, 4 * cache))


def hardware_support(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether ``device`` has instructions for matrix products in ``dtype``: always for fp32; for bf16 on a CPU,
    AVX-512 BF16, AMX or ARM's BF16; for fp16 on a CPU, AVX-512 FP16, AMX-FP16 or ARM's half-precision vectors;
    on a GPU, bf16 from compute capability 8.0 and fp16 from 5.3. Without it the rate is a slow kernel's, not the
    hardware's arithmetic.

    Introduced in chapter 0.
    """
    if dtype == torch.float32:
        return True
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return (major, minor) >= ((8, 0) if dtype == torch.bfloat16 else (5, 3))
    flags = cpu_flags()
    if dtype == torch.bfloat16:
        return bool(flags & {"avx512_bf16", "amx_bf16", "bf16"})
    if dtype == torch.float16:
        return bool(flags & {"avx512_fp16", "amx_fp16", "asimdhp"})
    return False


# --------------------------------------------------------------------------------------------
# Timing within a budget
# --------------------------------------------------------------------------------------------


def _clocked(fn: Callable[[], object], device: torch.device) -> float:
    """One call of ``fn``, synchronised, in seconds."""
    synchronize(device)
    t0 = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - t0


def _repeats(first: float, plan: Budget) -> int:
    """How many repeats fit ``plan.seconds`` after a first call of ``first`` seconds, within the plan's bounds."""
    return int(min(plan.max_repeats, max(plan.min_repeats, plan.seconds / max(first, 1e-6))))


def _faulting(fn: Callable[[], object], device: torch.device) -> tuple[float, int]:
    """One call of ``fn``, synchronised: its seconds and the page faults it took."""
    before = page_faults()
    seconds = _clocked(fn, device)
    return seconds, page_faults() - before


def _timed(fn: Callable[[], object], device: torch.device, plan: Budget,
           before: Callable[[], object] | None = None) -> Timing:
    """Time ``min_repeats`` to ``max_repeats`` calls of ``fn`` within ``plan.seconds``; the first call sets the
    number, and is a warm-up (``plan.warm_up``) or the first sample. Each sample's page faults are counted.
    ``before``, when given, runs before every call, untimed (:func:`_flush`: the caches emptied as a pass empties
    them)."""
    def call() -> tuple[float, int]:
        if before is not None:
            before()
        return _faulting(fn, device)

    first = call()
    calls = [] if plan.warm_up else [first]
    calls += [call() for _ in range(_repeats(first[0], plan) - len(calls))]
    return Timing.of([c[0] for c in calls], [c[1] for c in calls])


def _flush(model: str, device: torch.device, dtype: torch.dtype) -> Callable[[], object]:
    """A read of as many bytes as ``model``'s weights in ``dtype`` (an array of its own, kept): what passes
    between two uses of one layer's cache in a decode step, which streams every weight once. Run before a cache
    kernel is timed, it leaves the CPU's caches as a step leaves them, on a CPU whose last-level cache would
    otherwise hold a small KV cache from one call to the next."""
    shape, _ = MODELS[model]
    n = max(1, int(shape.with_dtype(dtype).weight_bytes) // dtype.itemsize)
    weights = _kept(("flush", model, n), lambda: random_values(n, dtype=dtype, device=device))
    return lambda: read_through(weights)


def _row(base: dict, kernel: str, t: Timing, *, model: str = "", rows: int = 0, bytes_: float = math.nan,
         flops: float = math.nan, scale: float = 1.0, note: str = "", reads: Sequence[float] | None = None,
         **extra) -> dict:
    """One row of the table: the fastest and median call (scaled by ``scale`` when only a part was timed) and
    the rates they give; with ``reads``, of the calls less those reads (:func:`_summarised`)."""
    row = dict(base, kernel=kernel, model=model, rows=rows, bytes_per_call=bytes_, flops_per_call=flops,
               measured_fraction=1 / scale, note=note, status="ok",
               faults_per_call=t.fastest_faults * scale if t.faults else math.nan, **extra)
    return _summarised(row, [s * scale for s in t.samples], reads)


def _summarised(row: dict, samples: Sequence[float], reads: Sequence[float] | None = None) -> dict:
    """``row`` with the statistics of its (whole-pass) ``samples``: the fastest, median and slowest call, their
    rates and the spread; the samples kept for :func:`_merged` (dropped from the table).

    With ``reads`` the row is a difference: each sample less the read timed just before it. It has two estimates
    of its ceiling: the fastest sample less the fastest read (each the statistic of a ceiling; the fastest of a
    noisy difference would be the noise, not the floor: a read that ran slow makes a pass look free) and the
    paired differences' median. Its fastest and median are the lower and the higher of the two, so where they
    disagree (the fastest read came in a quick spell the passes did not share) the row's spread says by how much,
    and a price built on its fastest and median calls spans both; its slowest is the paired differences'."""
    if reads is None:
        t = Timing.of(samples)
        best, median, worst, n = t.low, t.median, t.high, len(t.samples)
    else:
        differences = [s - r for s, r in zip(samples, reads, strict=True)]
        floor, paired = min(samples) - min(reads), statistics.median(differences)
        best, median = max(min(floor, paired), 1e-6), max(floor, paired, 1e-6)
        worst, n = max(max(differences), median), len(differences)
    row = dict(row, best_s=best, median_s=median, worst_s=worst, repeats=n, spread=median / best - 1,
               gb_s=row["bytes_per_call"] / best / 1e9, gb_s_median=row["bytes_per_call"] / median / 1e9,
               gflop_s=row["flops_per_call"] / best / 1e9, gflop_s_median=row["flops_per_call"] / median / 1e9,
               samples=tuple(samples), reads=None if reads is None else tuple(reads))
    if "operations" in row:
        row["us_per_operation"] = best / row["operations"] * 1e6
    return row


_SAME = ("device", "dtype", "threads", "kernel", "model", "rows", "context", "pass_kind", "setting", "layout")


def _merged(rows: Sequence[dict]) -> list[dict]:
    """The rows of every round as one row per measurement (the same :data:`_SAME` fields): all rounds' samples
    together, the note of the round that ran fastest. A measurement no round could make keeps its reason."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault(tuple(row.get(k) for k in _SAME), []).append(row)
    out = []
    for group in groups.values():
        ok = [r for r in group if r["status"] == "ok"]
        if not ok:
            out.append(group[0])
            continue
        fastest = min(ok, key=lambda r: r["best_s"])
        reads = None if fastest.get("reads") is None else [x for r in ok for x in r["reads"]]
        out.append(_summarised(fastest, [s for r in ok for s in r["samples"]], reads))
    return [{k: v for k, v in r.items() if k not in ("samples", "reads")} for r in out]


# --------------------------------------------------------------------------------------------
# The kernels
# --------------------------------------------------------------------------------------------


def fresh_memory(like: torch.Tensor) -> torch.Tensor:
    """A tensor shaped like ``like`` on pages newly mapped from the operating system (an anonymous ``mmap``, on a
    CPU), so that writing it faults every page once, whatever the allocator would have done: glibc hands a new
    tensor fresh pages or reuses freed ones depending on what was freed before. On a GPU, a new tensor (the caching
    allocator reuses its memory). The pages are unmapped when the tensor is freed. Introduced in chapter 0."""
    if like.device.type != "cpu":
        return torch.empty_like(like)
    size = max(like.numel() * like.element_size(), 1)
    private = getattr(mmap, "MAP_PRIVATE", None)  # private anonymous pages, as malloc maps them (not shared memory)
    pages = mmap.mmap(-1, size, flags=private | mmap.MAP_ANONYMOUS) if private is not None else mmap.mmap(-1, size)
    return torch.frombuffer(pages, dtype=like.dtype, count=like.numel()).view(like.shape)


def stream(device: torch.device, dtype: torch.dtype, plan: Budget, base: dict, fresh: bool = True) -> list[dict]:
    """STREAM's kernels over arrays of ``plan.stream_bytes``: a read (sum), a read with almost no arithmetic
    (a running maximum over the bits as whole numbers, :func:`read_through`), a copy, a copy into fresh memory
    (:func:`fresh_memory`, whose every page faults once; only with ``fresh``) and a triad; one row each."""
    n = max(1, plan.stream_bytes // dtype.itemsize)
    a, b, c = _kept(("stream", n), lambda: [random_values(n, dtype=dtype, device=device) for _ in range(3)])
    out = torch.empty((), dtype=dtype, device=device)
    nbytes = n * dtype.itemsize
    kernels = {
        "read": (nbytes, lambda: torch.sum(a, dim=0, out=out)),
        "read_max": (nbytes, lambda: read_through(a)),  # as whole numbers: a bf16 maximum is arithmetic here
        "copy": (2 * nbytes, lambda: b.copy_(a)),
        "fresh_copy": (2 * nbytes, lambda: fresh_memory(a).copy_(a)),
        "triad": (3 * nbytes, lambda: torch.add(b, c, alpha=3.0, out=a)),
    }
    return [_row(base, name, _timed(fn, device, plan), bytes_=moved) for name, (moved, fn) in kernels.items()
            if fresh or name != "fresh_copy"]


def square_matmul(device: torch.device, dtype: torch.dtype, plan: Budget, base: dict) -> dict:
    """The largest square product that fits the budget (at most 2048 on a CPU, 8192 on a GPU): ``2 n**3`` FLOPs
    over the fastest call. A 256-square probe in the first round sets ``n``, so a slow kernel gets a small product
    (and every round the same one)."""

    def sized() -> tuple[torch.Tensor, torch.Tensor]:
        n = 256
        probe = torch.randn(n, n, dtype=dtype, device=device)
        rate = 2 * n**3 / _timed(lambda: probe @ probe, device, Budget(0.05, 3, 5, 0)).low
        limit = 8192 if device.type == "cuda" else 2048
        while n * 2 <= limit and 2 * (2 * n) ** 3 / rate < plan.seconds / (2 * plan.min_repeats):
            n *= 2
        return torch.randn(n, n, dtype=dtype, device=device), torch.randn(n, n, dtype=dtype, device=device)

    a, b = _kept(("square", torch.get_num_threads()), sized)
    n = a.shape[0]
    return _row(base, "square_matmul", _timed(lambda: a @ b, device, plan), rows=n, flops=2.0 * n**3,
                note=f"{n} x {n}")


def model_matrices(shape: ModelShape, layout: str, device: torch.device, dtype: torch.dtype, layers: int):
    """Random weights of ``layers`` of the model's blocks, as its layers call them (``layout``: ``"conv1d"``,
    GPT-2's ``addmm(bias, x, W)`` on ``[in, out]``, or ``"linear"``, ``F.linear(x, W)`` on ``[out, in]``); returns
    ``(run, weights)`` where ``run(inputs)`` applies them all to a dict of inputs by width."""
    kv = shape.kv_heads * shape.head_dim
    d, ff = shape.d_model, shape.d_ff
    if layout == "conv1d":
        dims = [(d, 3 * d), (d, d), (d, ff), (ff, d)]  # c_attn (q, k and v in one), c_proj, c_fc, mlp.c_proj
        mats = [(random_values(i, o, scale=1 / math.sqrt(i), dtype=dtype, device=device),
                 torch.zeros(o, dtype=dtype, device=device)) for _ in range(layers) for i, o in dims]

        def run(x: dict) -> None:
            for w, b in mats:
                torch.addmm(b, x[w.shape[0]], w)
    elif layout == "linear":
        dims = [(d, d), (kv, d), (kv, d), (d, d)] + [(ff, d)] * (2 if shape.gated_ffn else 1) + [(d, ff)]
        mats = [random_values(o, i, scale=1 / math.sqrt(i), dtype=dtype, device=device) for _ in range(layers) for o, i in dims]

        def run(x: dict) -> None:
            for w in mats:
                F.linear(x[w.shape[1]], w)
    else:
        raise ValueError(f"layout must be 'conv1d' or 'linear', got {layout!r}")
    return run


def matrices(model: str, device: torch.device, dtype: torch.dtype, plan: Budget, base: dict,
             rows: Sequence[int] = ROWS, head_rows: Sequence[int] = HEAD_ROWS, slow: bool = False) -> list[dict]:
    """The model's block matrices and its LM head at each number of ``rows``, in its own layout: one row per
    (``blocks`` or ``head``, rows). Each call is priced for the whole model: where all layers (or the whole head)
    would take too long for the budget, a part is timed and scaled by the FLOPs it left out (``measured_fraction``).
    Up to 16 rows every layer is timed, so the weights stream from memory as in a pass, unless the kernel is
    ``slow`` (no hardware instructions: its time is its arithmetic); a part of the layers is timed after a read of
    the whole model's weights' bytes (:func:`_flush`), since a part small enough to stay in the caches between
    calls would not stream (on a host with a 480 MiB last-level cache, two layers of twelve ran 1.5 times as fast
    as all twelve). A row count that would not fit the budget even on a sixty-fourth of the work is recorded as
    skipped, with the reason."""
    shape, layout = MODELS[model]
    out = []
    widths = {shape.d_model, shape.d_ff}
    block_bytes = shape.layers * shape.block_params * dtype.itemsize
    head_bytes = shape.lm_head_params * dtype.itemsize
    for kernel, n_bytes, n_flops, counts in (("blocks", block_bytes, 2 * shape.layers * shape.block_params, rows),
                                             ("head", head_bytes, 2 * shape.lm_head_params, head_rows)):
        per_row, last = None, None  # seconds per row at the last count measured, to keep within the budget
        for m in counts:
            target = plan.seconds / (plan.min_repeats + 1)
            guess = per_row * m if per_row else None
            # The head is always timed whole: a slice of it would write a smaller output than the pass does.
            whole = guess is None or guess <= target or (m <= 16 and not slow) or (kernel == "head" and not slow)
            part = 1.0 if whole else max(target / guess, 1 / 64)
            if not whole and guess * part > plan.seconds:  # even a sixty-fourth would not fit
                out.append(dict(base, kernel=kernel, model=model, rows=m, status="skipped: over its time budget",
                                note=f"predicted {guess:.1f} s a call at the rate {last} rows reached"))
                continue
            x = {w: torch.randn(m, w, dtype=dtype, device=device) for w in widths}
            if kernel == "blocks":
                layers = max(1, round(shape.layers * part))
                run = _kept(("blocks", model, layers), lambda: model_matrices(shape, layout, device, dtype, layers))
                scale = shape.layers / layers
                t = _timed(lambda: run(x), device, plan, None if scale == 1 else _flush(model, device, dtype))
            else:
                vocab = max(64, round(shape.vocab * part))
                head = _kept(("head", model), lambda: random_values(shape.vocab, shape.d_model, scale=shape.d_model ** -0.5,
                                                              dtype=dtype, device=device))[:vocab]
                scale = shape.vocab / vocab
                logits = torch.zeros(m, vocab, dtype=dtype, device=device)  # mapped now: no page faults in the time
                t = _timed(lambda: torch.mm(x[shape.d_model], head.t(), out=logits), device, plan)
            out.append(_row(base, kernel, t, model=model, rows=m, bytes_=n_bytes, flops=n_flops * m, scale=scale,
                            note="" if scale == 1 else f"timed on 1/{scale:.0f} of it, scaled",
                            layout=layout))
            per_row, last = t.low * scale / m, m
    return out


def attention(model: str, device: torch.device, dtype: torch.dtype, plan: Budget, base: dict,
              rows: Sequence[int] = ATTENTION_ROWS,
              contexts: Sequence[tuple[int, int]] = ((1, 16), (1, 1024), (16, 512), (64, 512))) -> list[dict]:
    """``scaled_dot_product_attention`` with the model's heads, every layer: a causal prefill of each of ``rows``
    tokens (``attention_prefill``; FLOPs ``2 d T**2`` per layer), and one new token per sequence over a cache of
    each ``(batch, context)``, as a growing cache calls it (``attention_decode``, no mask) and as a preallocated one
    does (``attention_decode_masked``, a mask over every position); bytes: the caches read. Beside each decode, the
    growing cache's own copy (``cache_concatenation``: every layer's keys and values concatenated with one more
    position, as ``DynamicCache`` does, into memory already mapped so that page faults stay out of it; bytes: read
    and written). A prefill is timed on
    one layer and priced for all (its inputs are activations, written just before); a decode over a separate cache
    per layer, as a step reads them, on as many layers as fit in ``plan.stream_bytes``, priced for all. The masked
    decode and the concatenation are timed after a read of as many bytes as the model's weights (:func:`_flush`,
    untimed), as a step reaches a cache it last touched a step ago, after streaming its weights: on a host whose
    last-level cache holds a small KV cache, timing them warm priced them well under what the step paid. A growing
    cache's attention is timed warm: it reads the tensor its concatenation has just written."""
    shape, _ = MODELS[model]
    h, kvh, hd, layers = shape.heads, shape.kv_heads, shape.head_dim, shape.layers
    gqa = {"enable_gqa": True} if h != kvh else {}
    out = []
    for t_len in rows:
        q = torch.randn(1, h, t_len, hd, dtype=dtype, device=device)
        k, v = (torch.randn(1, kvh, t_len, hd, dtype=dtype, device=device) for _ in range(2))
        t = _timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa), device, plan)
        out.append(_row(base, "attention_prefill", t, model=model, rows=t_len, scale=layers,
                        flops=layers * 2 * shape.d_model * t_len * t_len, note="one layer timed, priced for all"))
    for batch, context in contexts:
        q = torch.randn(batch, h, 1, hd, dtype=dtype, device=device)
        layer_bytes = 2 * batch * kvh * context * hd * dtype.itemsize
        timed = max(1, min(layers, plan.stream_bytes // layer_bytes))  # caches far past the CPU's, not more
        # caches that a last-level cache could hold between calls are flushed before each; larger ones need not be
        flush = _flush(model, device, dtype) if timed * layer_bytes * 2 < plan.stream_bytes else None
        caches = _kept(("caches", model, batch, context), lambda: [
            random_values(batch, kvh, context, hd, dtype=dtype, device=device) for _ in range(2 * timed)])

        mask = torch.ones(batch, 1, 1, context, dtype=torch.bool, device=device)
        for kernel, extra in (("attention_decode", {}), ("attention_decode_masked", {"attn_mask": mask})):
            def run() -> None:
                for k, v in zip(caches[0::2], caches[1::2]):
                    F.scaled_dot_product_attention(q, k, v, **extra, **gqa)

            # A growing cache's attention reads the tensor its concatenation has just written (warm); a preallocated
            # cache's was last touched a step ago, before the weights streamed past it (cold).
            out.append(_row(base, kernel, _timed(run, device, plan, flush if extra else None), model=model, rows=batch,
                            context=context,
                            bytes_=layers * layer_bytes, flops=batch * layers * 4 * shape.d_model * context,
                            scale=layers / timed,
                            note="" if timed == layers else f"{timed} of {layers} layers timed, priced for all"))
        new = torch.randn(batch, kvh, 1, hd, dtype=dtype, device=device)
        longer = [torch.empty(batch, kvh, context + 1, hd, dtype=dtype, device=device) for _ in range(2 * timed)]
        for t in longer:
            t.zero_()  # mapped before timing: this kernel's time is the copy's, not the page faults'

        def grow() -> None:
            for old_, new_ in zip(caches, longer):
                torch.cat([old_, new], dim=-2, out=new_)

        out.append(_row(base, "cache_concatenation", _timed(grow, device, plan, flush), model=model, rows=batch,
                        context=context, bytes_=2 * layers * layer_bytes, scale=layers / timed,
                        note="into memory already mapped" + ("" if timed == layers else
                                                             f"; {timed} of {layers} layers timed, priced for all")))
        del longer
    return out


def full_model(model: str, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    """The model's architecture at its own size (layers, width, heads, vocabulary) with random weights."""
    from transformers.initialization import no_init_weights  # its values are set below, in one pass

    shape, layout = MODELS[model]
    torch.manual_seed(0)
    if layout == "conv1d":
        config = transformers.GPT2Config(n_layer=shape.layers, n_embd=shape.d_model, n_head=shape.heads,
                                         n_inner=shape.d_ff, vocab_size=shape.vocab, n_positions=1024,
                                         bos_token_id=0, eos_token_id=0)
        with no_init_weights():
            module = transformers.GPT2LMHeadModel(config)
    else:
        config = transformers.LlamaConfig(hidden_size=shape.d_model, intermediate_size=shape.d_ff,
                                          num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
                                          num_key_value_heads=shape.kv_heads, vocab_size=shape.vocab,
                                          max_position_embeddings=8192, tie_word_embeddings=True,
                                          bos_token_id=0, eos_token_id=0)
        with no_init_weights():
            module = transformers.LlamaForCausalLM(config)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(random_values(*parameter.shape, scale=0.02, dtype=parameter.dtype, device=parameter.device))
    return module.eval().to(device=device, dtype=dtype)


@contextlib.contextmanager
def hollowed(stream_weights: bool = False) -> Iterator[None]:
    """Inside the block, every weight matrix product (GPT-2's ``Conv1D``, any ``nn.Linear``) and every
    ``scaled_dot_product_attention`` returns zeros of its output's shape instead of computing it: a pass then
    issues all its operations and runs its small kernels (norms, activations, residual adds, the cache's
    bookkeeping) at the model's own width, without the work chapter 0 prices on its own. With
    ``stream_weights``, each product still reads its weights once with a kernel that does almost no arithmetic
    (a running maximum), so the caches are flushed between the small operations as a real pass flushes them."""
    from transformers.pytorch_utils import Conv1D

    def touch(weight: torch.Tensor) -> None:
        if stream_weights:
            read_through(weight)

    saved = Conv1D.forward, torch.nn.Linear.forward, F.scaled_dot_product_attention
    Conv1D.forward = lambda self, x: (touch(self.weight), x.new_zeros(*x.shape[:-1], self.nf))[1]
    torch.nn.Linear.forward = lambda self, x: (touch(self.weight), x.new_zeros(*x.shape[:-1], self.out_features))[1]
    F.scaled_dot_product_attention = lambda query, *args, **kwargs: torch.zeros_like(query)
    try:
        yield
    finally:
        Conv1D.forward, torch.nn.Linear.forward, F.scaled_dot_product_attention = saved


class _Counter(torch.overrides.TorchFunctionMode):
    """Counts the torch functions and tensor methods a block of Python code calls."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        return func(*args, **(kwargs or {}))


def count_operations(fn: Callable[[], object]) -> int:
    """How many torch operations ``fn()`` issues from Python (functions and tensor methods, each counted once
    where Python calls it; what they call inside is not counted).

    Used by :func:`dispatch`; chapter 0.
    """
    counter = _Counter()
    with counter, torch.inference_mode():
        fn()
    return counter.calls


def _filled_cache(module: torch.nn.Module, model: str, batch: int, context: int, dtype: torch.dtype,
                  device: torch.device):
    """A growing cache of ``context`` positions for each of ``batch`` sequences, every layer, its values written
    (ones: a step's cost depends on the cache's shape, and a page never written would be read from the one
    shared page of zeros). Built directly: the prefill that would fill it costs far more than the steps timed."""
    from lib import phases

    shape, _ = MODELS[model]
    cache = phases.new_cache(module)
    for layer in range(shape.layers):
        k, v = (torch.ones(batch, shape.kv_heads, context, shape.head_dim, dtype=dtype, device=device) for _ in range(2))
        cache.update(k, v, layer)
    return cache


def dispatch(model: str, device: torch.device, dtype: torch.dtype, plan: Budget, base: dict, steps: int = 4,
             prompts: Sequence[int] = (1, 64, 256, 1024), batches: Sequence[int] = (1, 16, 64),
             caches: Sequence[str] = ("decode", "decode_static"),
             long_caches: Sequence[tuple[int, int]] = ()) -> list[dict]:
    """The cost of a pass beyond its matrices and attention: the model at its own size, :func:`hollowed`, so it
    issues every operation and runs its small kernels at its own width, with each product still reading its
    weights (``setting="between weight streams"``, as in a real pass, whose weights flush the caches the
    interpreter and the small kernels work from), less the time those reads take alone. Measured for a prefill of
    each of ``prompts`` tokens (the small kernels' activations outgrow the CPU's caches on the way, so their cost
    is not proportional to the tokens below a few hundred; past the longest it is priced in proportion) and a
    decode step
    (:func:`lib.phases.decode`, token read back included) of each of ``batches`` sequences over a growing cache
    (``"decode"``) and over a preallocated one (``"decode_static"``), as ``caches`` lists, at context 16, and again
    between weight streams at each ``(batch, context)`` of ``long_caches``: the rest of a step grows with its cache
    (a growing cache's new tensors take memory the next weights' reads and small kernels then miss, a
    preallocated one's mask grows), which :meth:`Ceilings.dispatch` prices from these rows. One row each
    (``pass_kind``; ``rows``: tokens or sequences; ``context``: the positions a step attends over, a preallocated
    cache's whole length), with the operations the pass issues (``operations``) and the cost of one
    (``us_per_operation``). A one-token prefill and a one-sequence step are also timed hollowed
    without the reads (``setting="alone"``): the pure cost of issuing the operations. A decode step's time is the
    median of ``steps`` steps in a run. Between weight streams the ceiling is the fastest pass less the fastest read,
    and the median the paired differences' (:func:`_summarised`)."""
    from transformers.pytorch_utils import Conv1D

    from lib import phases

    module = _kept(("hollowed", model), lambda: full_model(model, device, dtype))
    weights = [m.weight for m in module.modules() if isinstance(m, (Conv1D, torch.nn.Linear))]
    out = []

    def read_weights() -> None:
        for w in weights:
            read_through(w)

    def less_reads(time_pass: Callable[[], float], repeats: int, streams: bool) -> dict:
        """``repeats`` runs of the pass, each after a run of the weights' reads alone (so a slow spell of a shared
        machine lands on both halves of a difference, not on one): the fields of :func:`_row`."""
        passes, reads = [], []
        for _ in range(repeats):
            reads.append(_clocked(read_weights, device) if streams else 0.0)
            passes.append(time_pass())
        return dict(t=Timing.of(passes), reads=reads if streams else None)

    def steps_of(cache, token, context: int) -> Callable[[], float]:
        def run() -> float:
            phases.truncate_cache(cache, context)
            return float(np.median(phases.decode(module, token, cache, steps).step_times))
        return run

    for setting, streams, sizes, kinds in (("alone", False, (1,), [("decode", 1)]),
                                           ("between weight streams", True, prompts,
                                            [(kind, b) for kind in caches for b in batches])):
        less = ", less the weights' reads alone before each" if streams else ""
        with hollowed(stream_weights=streams), torch.inference_mode():
            for t_len in sizes:
                ids = torch.zeros(1, t_len, dtype=torch.long, device=device)
                ops = _kept(("operations", model, "prefill", t_len, streams), lambda: count_operations(lambda: phases.prefill(module, ids)))
                repeats = _repeats(_clocked(lambda: phases.prefill(module, ids), device), plan) if plan.warm_up \
                    else plan.min_repeats  # the first round's call warmed it up and set the repeats
                timed = less_reads(lambda: _clocked(lambda: phases.prefill(module, ids), device), repeats, streams)
                out.append(_row(base, "dispatch", **timed, model=model, rows=t_len, pass_kind="prefill", operations=ops,
                                setting=setting, note=less.lstrip(", ")))
            longer = [(kind, b, c) for kind in caches for b, c in long_caches if b in batches] if streams else []
            for name, b, context in [(kind, b, 16) for kind, b in kinds] + longer:
                cache = phases.prefill(module, torch.zeros(b, context, dtype=torch.long, device=device))[1] \
                    if context == 16 else _filled_cache(module, model, b, context, dtype, device)
                positions = context
                if name == "decode_static":
                    positions = context + 2 * steps
                    cache = phases.static_cache(module, cache, positions)
                token = torch.zeros(b, 1, dtype=torch.long, device=device)
                ops = _kept(("operations", model, name, b, streams), lambda: count_operations(lambda: phases.decode(module, token, cache, 1)))
                phases.truncate_cache(cache, context)
                run = steps_of(cache, token, context)
                if plan.warm_up:
                    run()
                out.append(_row(base, "dispatch", **less_reads(run, plan.min_repeats, streams), model=model, rows=b,
                                pass_kind=name, operations=ops, setting=setting, context=positions,
                                note=f"median of {steps} steps a run from {context} cached tokens{less}"))
                del cache
    return out


# --------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------


def measure_ceilings(device: torch.device, dtypes: Sequence[str] = ("fp32",), threads: Sequence[int] = (1,), *,
                     models: Sequence[str] = ("gpt2-small",), models_one_stream: Sequence[str] = (),
                     quick: bool = False, log: Callable[[str], None] = print) -> pd.DataFrame:
    """Measure every ceiling for each dtype and thread count (whole numbers, :func:`lib.device.thread_counts`):
    the streaming kernels and the square product, and for each of ``models`` its matrices (at :data:`ROWS`, and
    :data:`HEAD_ROWS` for the LM head), attention (:data:`ATTENTION_ROWS`) and dispatch (a decode step of 64 sequences at
    the most threads only, where the chapters batch that far); ``models_one_stream`` at the head's fewer rows and
    their dispatch for one stream (the chapters run those models one request at a time, with all threads or, as
    vLLM's CPU build computes, on one). Quick mode measures :data:`QUICK_ROWS` only. Each round times every dtype
    in turn, so a slow spell of the host lands on all of them alike, not on one dtype's minutes (chapter 3 prices
    bf16's step against fp32's from these rows).
    Returns one row per measurement (see the module docstring): ``device``, ``dtype``, ``threads``,
    ``kernel``, ``model``, ``rows``, bytes and FLOPs per call, the fastest, median and slowest call (``best_s``,
    ``median_s``, ``worst_s``), the rates of the fastest and the median (``gb_s``, ``gflop_s`` and their
    ``_median``), ``spread``, ``repeats``, ``hardware_support`` and ``status``. A dtype the device cannot run gets
    one row with ``status`` saying so.

    Introduced in chapter 0.
    """
    plan = budget(device, quick)
    rows, head_rows, attention_rows = (QUICK_ROWS,) * 3 if quick else (ROWS, HEAD_ROWS, ATTENTION_ROWS)
    unknown = [m for m in [*models, *models_one_stream] if m not in MODELS]
    if unknown:
        raise ValueError(f"chapter 0 knows the matrices of {', '.join(MODELS)}, not {', '.join(unknown)}")
    runnable, out = {}, []
    for name in dtypes:
        try:
            runnable[name] = resolve_dtype(name, device)
        except UnsupportedDtype as error:
            out.append(dict(device=str(device), dtype=name, kernel="square_matmul", status=f"unsupported: {error}"))
    global _KEPT
    kept = {name: {} for name in runnable}  # each dtype's tensors, kept across its thread counts and rounds
    measured = {name: [] for name in runnable}
    took = {(name, n): 0.0 for name in runnable for n in threads}
    # every dtype once per round, so a slow spell lands on all of them alike, not on one dtype's minutes
    for round_ in range(plan.rounds):
        step = plan if round_ == 0 else dataclasses.replace(plan, warm_up=False)
        for name, dtype in runnable.items():
            _KEPT = kept[name]
            support = hardware_support(device, dtype)
            for n in threads:
                started = time.perf_counter()
                with use_threads(n), torch.inference_mode():
                    base = dict(device=str(device), device_name=device_name(device), dtype=dtype_name(dtype),
                                threads=n, hardware_support=support)
                    # a page fault costs the kernel's work, whatever the dtype: the first dtype's copy prices them
                    measured[name] += stream(device, dtype, step, base, fresh=name == dtypes[0])
                    measured[name].append(square_matmul(device, dtype, step, base))
                    for model in [*models, *models_one_stream]:
                        few = head_rows if model in models_one_stream else rows  # chapters 1, 7 and 9 need fewer
                        measured[name] += matrices(model, device, dtype, step, base, few, head_rows, slow=not support)
                        if quick:  # a one-stream model's dispatch as in a full run: one stream, a growing cache
                            measured[name] += attention(model, device, dtype, step, base, attention_rows,
                                                        ((1, 16), (4, 64)))
                            measured[name] += dispatch(model, device, dtype, step, base, prompts=(1, 16),
                                                       long_caches=((1, 64),),
                                                       **({"batches": (1,), "caches": ("decode",)}
                                                          if model in models_one_stream else {"batches": (1, 4)}))
                        elif model in models_one_stream:  # chapters 1, 7 and 9 price one stream's passes
                            measured[name] += attention(model, device, dtype, step, base, attention_rows,
                                                        contexts=((1, 16), (1, 1024)))
                            measured[name] += dispatch(model, device, dtype, step, base, batches=(1,),
                                                       caches=("decode",), long_caches=LONG_CACHES[:1])
                        else:  # the chapters batch decode steps at the most threads; fewer points elsewhere
                            measured[name] += attention(model, device, dtype, step, base, attention_rows)
                            measured[name] += dispatch(model, device, dtype, step, base, long_caches=LONG_CACHES,
                                                       **({} if n == max(threads) else {"batches": (1, 16)}))
                took[name, n] += time.perf_counter() - started
            for key in [k for k in _KEPT if k[0] in _REMADE]:  # the next dtype's turn needs the memory
                del _KEPT[key]
    _KEPT = {}
    for name in runnable:
        out += _merged(measured[name])
    for (name, n), seconds in took.items():
        log(f"{name}, {n} thread{'s' * (n > 1)}: measured in {seconds:.1f} s ({plan.rounds} round"
            f"{'s' * (plan.rounds > 1)})")
    return pd.DataFrame(out)


class CorruptCeilings(ValueError):
    """The ceilings table holds values no measurement could have produced."""


def check_ceilings(table: pd.DataFrame, where: str = "data/00_machine/ceilings.csv") -> pd.DataFrame:
    """Refuse a ceilings table no machine could have produced: a missing column, a non-positive or non-finite
    time, a median outside its own range, or a streaming rate beyond any memory system (20 TB/s). The message
    names the file and the command that measures it again. Returns the table.

    Introduced in chapter 0.
    """
    again = f"re-measure it with `python -m lib.make.book --force {MACHINE_SECTION}`"
    needed = {"device", "dtype", "threads", "kernel", "model", "rows", "best_s", "median_s", "worst_s", "status",
              "pass_kind", "setting"}
    missing = needed - set(table.columns)
    if missing:
        raise CorruptCeilings(f"{where} is not a ceilings table of this version of the book (no column "
                              f"{', '.join(sorted(missing))}): {again}")
    ok = table[table.status == "ok"]
    times = ok[["best_s", "median_s", "worst_s"]].to_numpy(dtype=float)
    bad = ~np.isfinite(times).all(axis=1) | (times <= 0).any(axis=1) | (times[:, 0] > times[:, 1]) | \
        (times[:, 1] > times[:, 2])
    if bad.any():
        row = ok[bad].iloc[0]
        raise CorruptCeilings(f"{where} is corrupt: {row.kernel} ({row.dtype}, {row.threads} threads) has fastest, "
                              f"median and slowest times {row.best_s}, {row.median_s}, {row.worst_s} s (each must "
                              f"be positive and the median within the range): {again}")
    fast = ok[(ok.kernel.isin(STREAM_KERNELS)) & (ok.bytes_per_call / ok.best_s > _FASTEST_MEMORY)]
    if len(fast):
        row = fast.iloc[0]
        raise CorruptCeilings(f"{where} is corrupt: {row.kernel} streams {row.bytes_per_call / row.best_s / 1e9:,.0f} "
                              f"GB/s, beyond any memory system: {again}")
    return table


@dataclass(frozen=True)
class KernelTime:
    """What chapter 0 measured for one kernel call, in seconds: ``best`` (the ceiling) and ``median``, and
    the row it came from (``source``: kernel, model, rows)."""

    best: float
    median: float
    source: str

    def __mul__(self, k: float) -> "KernelTime":
        return KernelTime(self.best * k, self.median * k, self.source)

    __rmul__ = __mul__

    @property
    def spread(self) -> float:
        """``median / best - 1``: how much slower a typical call ran than the fastest."""
        return self.median / self.best - 1


def _interpolate(xs: np.ndarray, ys: np.ndarray, x: float) -> float:
    """``y`` at ``x`` on a log-log line through the points (extended flat in rate past the ends)."""
    order = np.argsort(xs)
    xs, ys = xs[order], ys[order]
    if x <= xs[0]:
        return float(ys[0] * x / xs[0]) if len(xs) > 1 and x < xs[0] else float(ys[0])
    if x >= xs[-1]:
        return float(ys[-1] * x / xs[-1])  # the last rate, held
    return float(np.exp(np.interp(np.log(x), np.log(xs), np.log(ys))))


@dataclass(frozen=True)
class Ceilings:
    """The table of :func:`measure_ceilings` for one device, with the look-ups the cost model needs. Every
    look-up takes the dtype and a whole number of threads, and says in one line what chapter 0 measured when it
    has no such row. Introduced in chapter 0."""

    table: pd.DataFrame
    device: str
    #: Whether these ceilings were measured on this machine (its :func:`lib.device.machine_identity`) in a full
    #: build: only then may a pass beating its floor stop the build (:func:`lib.regime.check_floors`).
    strict: bool = False
    _found: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def _rows(self, dtype: str, threads: int, kernel: str, model: str | None = None, **match) -> pd.DataFrame:
        key = (dtype, threads, kernel, model, tuple(sorted(match.items())))
        if key not in self._found:  # a chapter prices thousands of passes from the same few rows
            self._found[key] = self._select(dtype, threads, kernel, model, **match)
        return self._found[key]

    def _select(self, dtype: str, threads: int, kernel: str, model: str | None = None, **match) -> pd.DataFrame:
        t = self.table
        t = t[(t.kernel == kernel) & (t.dtype == dtype) & (t.status == "ok") & (t.threads == threads)]
        if model is not None:
            t = t[t.model == model]
        for key, value in match.items():
            t = t[t[key] == value]
        if t.empty:
            have = sorted(set(zip(self.table.dtype, self.table.threads)))
            what = f"{kernel}{f' of {model}' if model else ''}"
            raise ValueError(f"chapter 0 measured no {what} in {dtype} at {threads} thread(s) on {self.device}; it "
                             f"has (dtype, threads) {have}: run chapter 0 with that dtype and thread count first")
        return t

    def stream_bandwidth(self, dtype: str, threads: int, kernel: str = "memory") -> float:
        """A streaming kernel's rate in bytes/s (the fastest call): ``read``, ``read_max``, ``copy``,
        ``fresh_copy`` or ``triad``; by default (``memory``, "the streaming read" of every chapter) the faster of
        the two reads, the sum and the maximum over whole numbers: a sum is arithmetic too, and in a dtype whose
        adder is slow (bf16 on a CPU) it reads slower than the memory gives, so the faster read is the better
        measure of the memory (chapter 0's cross-check)."""
        row = self._rows(dtype, threads, self.read_kernel(dtype, threads) if kernel == "memory" else kernel).iloc[0]
        return float(row.bytes_per_call / row.best_s)

    def stream_spread(self, dtype: str, threads: int, kernel: str = "memory") -> float:
        kernel = self.read_kernel(dtype, threads) if kernel == "memory" else kernel
        return float(self._rows(dtype, threads, kernel).iloc[0].spread)

    def read_kernel(self, dtype: str, threads: int) -> str:
        """``read`` or ``read_max``, whichever read the memory faster in ``dtype`` (``read`` where chapter 0 has
        only the sum): the kernel of "the streaming read" (:meth:`stream_bandwidth`)."""
        rate = {}
        for k in ("read", "read_max"):
            try:
                row = self._rows(dtype, threads, k).iloc[0]
            except ValueError:
                continue
            rate[k] = float(row.bytes_per_call / row.best_s)
        return max(rate, key=rate.get) if rate else "read"

    def fault_cost(self, dtype: str, threads: int) -> float:
        """Seconds one page fault adds (the kernel mapping and zeroing memory the process touches for the first
        time): a copy into fresh memory less the same copy into memory already mapped (fastest calls), over the
        faults the fresh copy took (counted; one per page where they were not), in the dtype chapter 0 measured
        it in (:meth:`_fresh_dtype`). On a GPU there are none: 0."""
        if self.device.startswith("cuda"):
            return 0.0
        dtype = self._fresh_dtype(dtype, threads)
        fresh, copy = (self._rows(dtype, threads, k).iloc[0] for k in ("fresh_copy", "copy"))
        extra = max(float(fresh.best_s - copy.best_s * fresh.bytes_per_call / copy.bytes_per_call), 0.0)
        return extra / (self.faults_per_byte(dtype, threads) * fresh.bytes_per_call / 2)

    def _fresh_dtype(self, dtype: str, threads: int) -> str:
        """``dtype`` where chapter 0 copied into fresh memory in it, else the dtype it did (page faults are the
        kernel's work, whatever the values' type: chapter 0 times them in its first dtype only)."""
        t = self.table
        has = t[(t.kernel == "fresh_copy") & (t.threads == threads) & (t.status == "ok")].dtype.unique().tolist()
        return dtype if dtype in has or not has else ("fp32" if "fp32" in has else has[0])

    def faults_per_byte(self, dtype: str, threads: int) -> float:
        """Page faults per byte of fresh memory written: what chapter 0's copy into fresh memory counted over its
        destination's bytes (one per page of :data:`lib.timing.PAGE_BYTES`, or fewer where the system maps huge
        pages), or one per page where it did not count them."""
        fresh = self._rows(self._fresh_dtype(dtype, threads), threads, "fresh_copy").iloc[0]
        counted = float(getattr(fresh, "faults_per_call", math.nan))
        return counted / (fresh.bytes_per_call / 2) if counted > 0 else 1 / PAGE_BYTES

    def square_flops(self, dtype: str, threads: int) -> float:
        """The square product's rate in FLOP/s (the fastest call): the textbook roofline's peak."""
        row = self._rows(dtype, threads, "square_matmul").iloc[0]
        return float(row.flops_per_call / row.best_s)

    def hardware_support(self, dtype: str) -> bool:
        """Whether the dtype's matrix products run on hardware instructions here."""
        t = self.table[(self.table.dtype == dtype) & (self.table.status == "ok")]
        if t.empty:
            raise ValueError(f"chapter 0 measured nothing in {dtype} on {self.device}")
        return bool(t.hardware_support.iloc[0])

    def threads(self, dtype: str = "fp32") -> list[int]:
        """The thread counts measured for ``dtype``, most first."""
        t = self.table[(self.table.dtype == dtype) & (self.table.status == "ok")]
        return sorted({int(n) for n in t.threads}, reverse=True)

    def dtypes(self) -> list[str]:
        """The dtypes measured (not those the device refused)."""
        return list(dict.fromkeys(self.table[self.table.status == "ok"].dtype))

    def matrices(self, model: str, dtype: str, threads: int, kernel: str, rows: float) -> KernelTime:
        """One call of the model's ``blocks`` (every layer) or ``head`` at ``rows`` rows, interpolated between the
        row counts measured (log-log), at the last rate measured beyond them."""
        t = self._rows(dtype, threads, kernel, model)
        best = _interpolate(t.rows.to_numpy(float), t.best_s.to_numpy(float), rows)
        median = _interpolate(t.rows.to_numpy(float), t.median_s.to_numpy(float), rows)
        return KernelTime(best, median, f"{kernel} of {model} at {rows:g} rows")

    def rows_measured(self, model: str, dtype: str, threads: int, kernel: str) -> list[int]:
        """The row counts chapter 0 timed the model's ``blocks`` or ``head`` at (:meth:`matrices` interpolates
        between them)."""
        return sorted(int(r) for r in self._rows(dtype, threads, kernel, model).rows)

    def row_steps(self, model: str, dtype: str, threads: int, up_to: int = 16) -> tuple[str, str]:
        """How the model's block matrices' time grows with their rows, from the row counts chapter 0 timed up to
        ``up_to`` (fastest calls): ``(shape, told)``. ``shape`` is ``"one-off"`` (the step from one row to two is
        more than twice every later step between timed row counts: another kernel path for more than one row),
        ``"per row"`` (each added row costs within 2x of every other's share), ``"steps"`` (uneven steps between
        row counts: the kernel changes its path with the row count) or ``""`` (fewer than three row counts from
        1 and 2). ``told``: the times and steps in a sentence, for chapters 0 and 2. Introduced in chapter 0."""
        rows = [r for r in self.rows_measured(model, dtype, threads, "blocks") if r <= up_to]
        if len(rows) < 3 or rows[:2] != [1, 2]:
            return "", ""
        t = {r: self.matrices(model, dtype, threads, "blocks", r).best * 1e3 for r in rows}  # ms
        steps = [(a, b, t[b] - t[a]) for a, b in zip(rows, rows[1:])]
        per_row = [d / (b - a) for a, b, d in steps]
        times = ", ".join(f"{t[r]:.1f} ms at {r} row{'s' * (r > 1)}" if r == 1 else f"{t[r]:.1f} at {r}" for r in rows)
        steps_told = ", ".join(f"{d:+.1f} ms from {a} to {b}" if i == 0 else f"{d:+.1f} from {a} to {b}"
                               for i, (a, b, d) in enumerate(steps))
        if steps[0][2] > 2 * max(max(d for *_, d in steps[1:]), 0):
            shape = "one-off"
        elif min(per_row) > 0 and max(per_row) <= 2 * min(per_row):
            shape = "per row"
        else:
            shape = "steps"
        return shape, f"The block matrices took {times}: steps of {steps_told}"

    def dispatch_rows_measured(self, model: str, dtype: str, threads: int, pass_kind: str = "prefill") -> list[int]:
        """The sizes (a prefill's tokens, a decode step's sequences) chapter 0 timed the hollowed pass at
        (:meth:`dispatch` interpolates between them, and goes on in proportion beyond the largest)."""
        return sorted(int(r) for r in self._dispatch_rows(model, dtype, threads, pass_kind)[0].rows.unique())

    def matrix_faults(self, model: str, dtype: str, threads: int, kernel: str, rows: float) -> float:
        """The page faults one call of the model's ``blocks`` or ``head`` took at ``rows`` rows in chapter 0 (its
        output, where the allocator mapped it afresh), interpolated between the rows measured: already inside
        that kernel's time, so a pass priced at it does not count them twice. 0 where not counted."""
        t = self._rows(dtype, threads, kernel, model)
        if "faults_per_call" not in t or t.faults_per_call.isna().all():
            return 0.0
        t = t.dropna(subset=["faults_per_call"]).sort_values("rows")
        return float(np.interp(rows, t.rows.to_numpy(float), t.faults_per_call.to_numpy(float)))

    def weight_rate(self, model: str, dtype: str, threads: int) -> float:
        """The rate, in bytes/s, at which one row streams the model's weights (blocks and head, fastest calls):
        what a decode step's matrix-vector products reach."""
        b, h = (self._rows(dtype, threads, k, model, rows=1).iloc[0] for k in ("blocks", "head"))
        return float((b.bytes_per_call + h.bytes_per_call) / (b.best_s + h.best_s))

    def matrix_rate(self, model: str, dtype: str, threads: int, rows: float) -> float:
        """``F(rows)``: the FLOP rate of the model's block matrices at ``rows`` rows (FLOP/s, fastest calls)."""
        t = self._rows(dtype, threads, "blocks", model).iloc[0]
        flops = t.flops_per_call / t.rows * rows
        return float(flops / self.matrices(model, dtype, threads, "blocks", rows).best)

    def attention_prefill(self, model: str, dtype: str, threads: int, tokens: float) -> KernelTime:
        """A causal attention over ``tokens`` tokens, every layer (interpolated over the lengths measured)."""
        t = self._rows(dtype, threads, "attention_prefill", model)
        xs = t.rows.to_numpy(float)
        return KernelTime(_interpolate(xs, t.best_s.to_numpy(float), tokens),
                          _interpolate(xs, t.median_s.to_numpy(float), tokens), "attention_prefill")

    def attention_decode(self, model: str, dtype: str, threads: int, cache_bytes: float,
                         masked: bool = False) -> KernelTime:
        """One new token per sequence attending over caches of ``cache_bytes`` in all, every layer (interpolated
        over the cache sizes measured); ``masked``: with a mask over every position, as a preallocated cache
        calls it."""
        kernel = "attention_decode_masked" if masked else "attention_decode"
        t = self._rows(dtype, threads, kernel, model)
        xs = t.bytes_per_call.to_numpy(float)
        return KernelTime(_interpolate(xs, t.best_s.to_numpy(float), cache_bytes),
                          _interpolate(xs, t.median_s.to_numpy(float), cache_bytes), kernel)

    def cache_concatenation(self, model: str, dtype: str, threads: int, cache_bytes: float) -> KernelTime | None:
        """A growing cache's copy of ``cache_bytes`` in all (read, then written one position longer, every layer),
        interpolated over the cache sizes measured, into memory already mapped (page faults are priced apart);
        ``None`` where chapter 0 did not measure it (an older table: the copy is then priced at the streaming copy)."""
        t = self.table[(self.table.kernel == "cache_concatenation") & (self.table.model == model)
                       & (self.table.dtype == dtype) & (self.table.threads == threads) & (self.table.status == "ok")]
        if t.empty:
            return None
        xs = t.bytes_per_call.to_numpy(float) / 2  # the cache's bytes: the copy reads them and writes them again
        return KernelTime(_interpolate(xs, t.best_s.to_numpy(float), cache_bytes),
                          _interpolate(xs, t.median_s.to_numpy(float), cache_bytes), "cache_concatenation")

    def _dispatch_rows(self, model: str, dtype: str, threads: int, pass_kind: str) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The hollowed passes between weight streams: those from the shortest cache measured at each size (a
        prefill's, a decode step's from 16 cached tokens) and those from a longer cache."""
        t = self._rows(dtype, threads, "dispatch", model, pass_kind=pass_kind, setting="between weight streams")
        if "context" not in t or t.context.isna().all():
            return t, t.iloc[:0]
        short = t.context.isna() | (t.context == t.groupby("rows").context.transform("min"))
        return t[short], t[~short]

    def rest_growth(self, model: str, dtype: str, threads: int, pass_kind: str, rows: float,
                    positions: float) -> KernelTime | None:
        """How much longer the rest of a decode step (all but its matrices and attention) takes with ``rows``
        sequences attending over ``positions`` each (a growing cache's context, a preallocated cache's whole
        length) than from the shortest cache chapter 0 measured (16 tokens): its hollowed step at a longer cache
        less at the short one, and for a growing cache (``pass_kind="decode"``) less the growth of the
        concatenation timed alone and the page faults of its new tensors where they are large enough to be mapped
        afresh (the cost model prices both on their own). Linear in the cache's bytes beyond
        the short cache, through zero, between the sizes measured, in proportion past the largest; never below
        zero. ``None`` where chapter 0 measured no longer cache (an older table)."""
        short, long_ = self._dispatch_rows(model, dtype, threads, pass_kind)
        if long_.empty:
            return None
        shape = MODELS[model][0]
        kv = shape.with_dtype(dtype).kv_bytes_per_token
        base = short.set_index("rows")
        points = []
        for r in long_.itertuples():
            if r.rows not in base.index:
                continue
            b = base.loc[r.rows]
            grown = [r.best_s - b.best_s, r.median_s - b.median_s]
            copy = [self.cache_concatenation(model, dtype, threads, r.rows * c * kv) for c in (r.context, b.context)]
            if pass_kind == "decode" and None not in copy:
                grown = [grown[0] - (copy[0].best - copy[1].best), grown[1] - (copy[0].median - copy[1].median)]
            if pass_kind == "decode" and not self.device.startswith("cuda"):  # its new tensors' page faults, which
                layer_bytes = r.rows * r.context * kv / (2 * shape.layers)  # the cost model prices on their own
                faults = 2 * shape.layers * layer_bytes * self.faults_per_byte(dtype, threads) \
                    if layer_bytes >= FRESH_PAGES_BYTES else 0.0
                grown = [g - faults * self.fault_cost(dtype, threads) for g in grown]
            best = max(grown[0], 0.0)
            points.append((r.rows * (r.context - b.context) * kv, best, max(grown[1], best)))
        if not points:
            return None
        points.sort()
        extra = rows * (positions - short.context.min()) * kv
        if extra <= 0:
            return KernelTime(0.0, 0.0, f"the rest of a {pass_kind} step at {positions:g} positions")
        xs, best, median = (np.array([0.0] + [p[i] for p in points]) for i in range(3))
        scale = max(extra / xs[-1], 1.0)  # past the largest cache measured: in proportion to its bytes
        at = min(extra, xs[-1])
        return KernelTime(float(np.interp(at, xs, best)) * scale, float(np.interp(at, xs, median)) * scale,
                          f"the rest of a {pass_kind} step grown to {positions:g} positions")

    def dispatch(self, model: str, dtype: str, threads: int, pass_kind: str = "decode", rows: float = 1,
                 positions: float | None = None) -> KernelTime:
        """One pass beyond its matrices and attention (``prefill`` of ``rows`` tokens, ``decode`` of ``rows``
        sequences, or ``decode_static``): the hollowed model's pass between its weights' reads, interpolated over
        the sizes measured (and in proportion to the size beyond the largest). A decode step measured at one
        sequence only is priced for more as that step plus a prefill's growth from one row to as many. With
        ``positions`` (a decode step's cache, per sequence), plus what the rest of the step grows to that cache
        from the shortest measured (:meth:`rest_growth`)."""
        short = self._short_dispatch(model, dtype, threads, pass_kind, rows)
        growth = None if positions is None or pass_kind == "prefill" else \
            self.rest_growth(model, dtype, threads, pass_kind, rows, positions)
        if growth is None:
            return short
        return KernelTime(short.best + growth.best, short.median + growth.median,
                          f"{short.source}, grown to a cache of {positions:g} positions")

    def _short_dispatch(self, model: str, dtype: str, threads: int, pass_kind: str, rows: float) -> KernelTime:
        t, _ = self._dispatch_rows(model, dtype, threads, pass_kind)
        xs = t.rows.to_numpy(float)
        if pass_kind != "prefill" and len(xs) == 1 and rows > xs[0]:
            # A step measured at one sequence only. An eager step of more issues the same operations, so it is
            # not that step in proportion; its small kernels widen as a prefill's do over as many rows.
            one = KernelTime(float(t.best_s.iloc[0]), float(t.median_s.iloc[0]), f"the rest of a {pass_kind} pass")
            try:
                wide, narrow = (self._short_dispatch(model, dtype, threads, "prefill", n) for n in (rows, xs[0]))
            except ValueError:  # no prefill measured either: the same operations, held
                return one
            return KernelTime(one.best + max(wide.best - narrow.best, 0.0),
                              one.median + max(wide.median - narrow.median, 0.0),
                              f"the rest of a {pass_kind} pass, widened as a prefill's over {rows:g} rows")
        return KernelTime(_interpolate(xs, t.best_s.to_numpy(float), rows),
                          _interpolate(xs, t.median_s.to_numpy(float), rows), f"the rest of a {pass_kind} pass")

    def operations(self, model: str, dtype: str, threads: int, pass_kind: str = "decode") -> tuple[int, float]:
        """(operations issued by one pass of one token or sequence, microseconds each when issued alone)."""
        row = self._rows(dtype, threads, "dispatch", model, pass_kind=pass_kind, rows=1, setting="alone").iloc[0]
        return int(row.operations), float(row.us_per_operation)


@dataclass(frozen=True)
class Pace:
    """How fast this machine runs a chapter-0 kernel now, against chapter 0: the model's block matrices at one
    row (a decode step's largest term, the matrix-vector products), each call's seconds over chapter 0's median
    call (``ratio``, a :class:`lib.claims.Spread` of the calls: 1 is the machine chapter 0 measured, 1.2 a
    fifth slower now), and the fastest call over chapter 0's fastest (``fastest``), the ratio of the ceilings a
    price is made of; ``reference_best``: chapter 0's own fastest call over its median (1 or less), so that
    ``reference_best`` to 1 is the span of chapter 0's calls every price is made of (fastest to median)."""

    ratio: "Spread"
    fastest: float
    calls: int
    reference_best: float = 1.0

    def expected(self) -> "Spread":
        """The ratio chapter 0's own calls span, from its fastest to its median: the machine it measured."""
        from lib.claims import Spread

        return Spread(self.reference_best, self.reference_best, 1.0)

    def text(self) -> str:
        """``"1.08x (1.02–1.15) of chapter 0's median call, fastest 1.03x"``."""
        return f"{self.ratio.text('.2f', 'x')} of chapter 0's median call, its fastest {self.fastest:.2f}x chapter 0's"


def products_between(shape: ModelShape, device: torch.device, dtype: torch.dtype, layout: str = "conv1d",
                     calls: int = 200) -> dict[str, float]:
    """Microseconds per call of ``shape``'s block matrix products at one row (every layer's, :func:`model_matrices`,
    as chapter 0 times them), median of ``calls`` runs: back to back (``alone_us``, chapter 0's way), and with the
    small kernels a step runs between two products (a layer norm, a residual add and a GELU at the model's width)
    before each (``between_us``: that run less the small kernels run alone, ``small_us``, per product). On a model
    whose products are tiny, their cost is a kernel's fixed cost per call, and what other kernels leave behind
    between calls can change it: chapter 0's prices carry ``alone_us`` only. Introduced in chapter 6."""
    if not isinstance(calls, int) or calls < 1:
        raise ValueError(f"products_between: calls is how many timed runs to take the median of, a whole number of "
                         f"at least 1; got {calls!r}")
    run = model_matrices(shape, layout, device, dtype, shape.layers)
    per_pass = 4 * shape.layers if layout == "conv1d" else (6 + shape.gated_ffn) * shape.layers
    x = {w: torch.randn(1, w, dtype=dtype, device=device) for w in (shape.d_model, shape.d_ff)}
    h = x[shape.d_model]
    norm = torch.nn.LayerNorm(shape.d_model, device=device, dtype=dtype)

    def small() -> None:
        F.gelu(torch.add(norm(h), h))

    def interleaved() -> None:  # the same products, each followed by the small kernels
        for _ in range(per_pass):
            small()

    with torch.inference_mode():
        class _Each(dict):  # hands each product its input, then runs the small kernels
            def __getitem__(self, width):
                small()
                return x[width]
        each = _Each()
        med = {}
        for name, fn in (("alone", lambda: run(x)), ("small", interleaved), ("both", lambda: run(each))):
            for _ in range(max(3, calls // 10)):
                fn()
            med[name] = float(np.median([_clocked(fn, device) for _ in range(calls)]))
    return dict(alone_us=med["alone"] / per_pass * 1e6, between_us=(med["both"] - med["small"]) / per_pass * 1e6,
                small_us=med["small"] / per_pass * 1e6, products=per_pass)


def pace(ceilings: "Ceilings", model: str, dtype: str, threads: int, device: torch.device, calls: int = 9) -> Pace:
    """Time the model's block matrices at one row ``calls`` times (after one warm-up call), on ``threads``
    threads, the way chapter 0 timed them (:func:`model_matrices`), and compare them with chapter 0's row:
    whether the machine still runs at the speed every price of the chapter is made of. A shared machine's
    speed drifts (another tenant, the clock): a chapter calls this before and after its sweep, and the page says
    how far the machine moved while it ran. Costs about ``calls + 1`` decode steps' matrices and the weights'
    creation (GPT-2 small in fp32: 340 MB, about a second)."""
    from lib.claims import Spread  # lib.claims imports nothing of this module

    row = ceilings._rows(dtype, threads, "blocks", model, rows=1).iloc[0]
    shape, layout = MODELS[model]
    torch_dtype = resolve_dtype(dtype, device)
    with use_threads(threads), torch.inference_mode():
        run = _kept(("pace", model, dtype), lambda: model_matrices(shape, layout, device, torch_dtype, shape.layers))
        x = {w: torch.randn(1, w, dtype=torch_dtype, device=device) for w in (shape.d_model, shape.d_ff)}
        _clocked(lambda: run(x), device)
        seconds = [_clocked(lambda: run(x), device) for _ in range(calls)]
    return Pace(ratio=Spread.of(s / float(row.median_s) for s in seconds), fastest=min(seconds) / float(row.best_s),
                calls=calls, reference_best=min(float(row.best_s) / float(row.median_s), 1.0))


def pace_table(paced: dict[str, Pace]) -> pd.DataFrame:
    """One row per moment of :func:`pace` (``when``): the median ratio and its 95 % interval, the fastest call's
    ratio, the calls, and chapter 0's fastest call over its median (the low end of the span the ratio is held to)."""
    return pd.DataFrame([dict(when=when, ratio=p.ratio.mid, ratio_low=p.ratio.low, ratio_high=p.ratio.high,
                              fastest_ratio=p.fastest, calls=p.calls, chapter0_fastest_over_median=p.reference_best)
                         for when, p in paced.items()])


#: What a pace that did not hold changes, and what it leaves alone: the sentence :func:`pace_claim` adds.
SCALED_BY_PACE = ("It scales what is priced or measured in absolute units (milliseconds, GB/s, a share of the "
                  "streaming read) by about that much. A ratio of two times taken together in the same runs (one "
                  "point against another, paired runs) moves only where its parts slowed unalike, and a miss far "
                  "larger than that has another cause.")


def pace_claim(register, paced: dict[str, Pace], what: str, model: str = "") -> str:
    """Declare and decide ``machine_kept_its_pace`` in a chapter's ``register`` (a :class:`lib.claims.Claims`):
    at every moment of ``paced`` the kernel ran within :data:`lib.claims.PREDICTED_TIME` of chapter 0's calls, from
    its fastest to its median (:meth:`Pace.expected`), the span and the tolerance every price of the chapter is
    held to, and the moments ran within that tolerance of each other (:func:`pace_moved`: a machine that sped up
    or slowed down by more during the chapter held none of its speeds throughout, though each moment alone may
    lie inside chapter 0's band). Chapter 0's median alone is one of a few calls and moved by a quarter between
    quiet builds; a pace read against it alone called a machine running at chapter 0's fastest call "faster".
    Returns the finding (markdown): a plain sentence, and the intervals that decided it folded below it
    (:func:`lib.prose.show`'s ``how``)."""
    from lib import claims
    from lib.prose import HOW_DECIDED

    moments = "; ".join(f"{p.ratio.text('.2f', 'x')} {when}" for when, p in paced.items())
    slowest = max(paced.values(), key=lambda p: p.ratio.mid).ratio.mid
    drift = (f" At the median it ran up to {slowest - 1:.0%} slower than chapter 0's median call, and a price made of chapter 0's "
             "ceilings is then about that much too low." if slowest > 1 + claims.NOISE else "")
    moved = pace_moved(paced)
    kept = [claims.within(p.ratio, p.expected(), claims.PREDICTED_TIME) for p in paced.values()]
    steady = claims.HELD if moved is None else claims.within(moved[2], 1.0, claims.PREDICTED_TIME)
    between = "" if moved is None else (
        f" {moved[1][:1].upper()}{moved[1][1:]}, they took {moved[2].text('.2f', 'x')} their time {moved[0]} (the "
        "widest ratio the two intervals allow): " + ("within the tolerance." if steady == claims.HELD else
                                "beyond the tolerance: the machine changed speed while the chapter ran." if
                                steady == claims.NOT_HELD else "too near the tolerance's edge to say it held still."))
    register.claim(
        "machine_kept_its_pace",
        f"While {what} ran, this machine ran the model's matrices at one row at the speed chapter 0 measured, within "
        "the tolerance for a time predicted from measured ceilings, and at about one speed throughout: the "
        "chapter's prices describe the machine it ran on.")
    verdict = claims.every([*kept, steady])
    fastest = min(p.reference_best for p in paced.values())
    register.record("machine_kept_its_pace", verdict,
                    predicted=f"within {claims.PREDICTED_TIME:g}x of chapter 0's calls ({fastest:.2f}x to 1)"
                              + ("" if moved is None else ", and of each other"),
                    measured=moments + ("" if moved is None else
                                        f"; {moved[1]} over {moved[0]}: {moved[2].text('.2f', 'x')}"),
                    evidence="pace.csv")
    items = list(paced.items())
    took = (f"{model or 'the model'}'s one-row matrices took {items[0][1].ratio.mid:.2f}x chapter 0's time {items[0][0]}"
            + "".join(f" and {p.ratio.mid:.2f}x {when}" for when, p in items[1:]))
    off_band = claims.NOT_HELD in kept
    if verdict == claims.HELD:
        plain = f"While {what} ran, the machine kept the speed chapter 0 measured: {took}."
    elif verdict == claims.NOT_HELD and (off_band or moved is None):
        plain = f"While {what} ran, the machine ran at another speed than chapter 0 measured: {took}. {SCALED_BY_PACE}"
    elif verdict == claims.NOT_HELD:
        plain = (f"While {what} ran, the machine changed speed: {took}: {moved[2].mid:.2f}x as long {moved[1]} as "
                 f"{moved[0]}. A price made of chapter 0's ceilings can fit one of these moments at best.")
    else:
        plain = (f"While {what} ran, the machine ran at about the speed chapter 0 measured, too close to call whether "
                 f"it kept it: {took}.")
    how = (f"Against chapter 0's median call, {model or 'the model'}'s matrices at one row took {moments} (95 % "
           f"intervals of {', '.join(str(p.calls) for p in paced.values())} calls), where chapter 0's fastest call "
           f"was {fastest:.2f}x its median: each moment is held to that span, within the tolerance of "
           f"{claims.PREDICTED_TIME:g}x every price here is held to" + (
               ", and one moment's interval lies beyond it." if off_band else
               ", and one moment's interval reaches across its edge." if claims.UNRESOLVED in kept else
               ", and every moment lies within it.") + between + drift)
    return f"{plain}\n\n<details><summary>{HOW_DECIDED}</summary>\n\n{how}\n\n</details>"


def pace_moved(paced: dict[str, Pace]) -> tuple[str, str, "Spread"] | None:
    """The two moments of ``paced`` furthest apart in speed, earlier first, and the later's ratio over the
    earlier's (a :class:`lib.claims.Spread`, the widest ratio their intervals allow: they are different calls);
    ``None`` with fewer than two moments."""
    import itertools

    pairs = list(itertools.combinations(paced.items(), 2))
    if not pairs:
        return None
    (a, pa), (b, pb) = max(pairs, key=lambda ab: abs(math.log(ab[1][1].ratio.mid / ab[0][1].ratio.mid)))
    return a, b, pb.ratio / pa.ratio


def pace_note(paced: dict[str, Pace]) -> str:
    """The sentence a chapter's opening adds when the machine's pace (:func:`pace`, at the moments of ``paced``)
    was not within the tolerance every price is held to at every moment, as :func:`pace_claim` decides it: how
    far, at which moments when not at all, and which way the chapter's prices miss for it; where no moment lies
    wholly outside but one straddles the tolerance's edge, the furthest such moment, with its interval, as what the
    prices may be off by; where every moment lies inside but the machine changed speed between them
    (:func:`pace_moved`) by more than the tolerance, or by an amount across its edge, that change. Empty when the
    pace held or was not measured."""
    from lib import claims

    verdicts = {k: claims.within(p.ratio, p.expected(), claims.PREDICTED_TIME) for k, p in paced.items()}
    outside = {k: paced[k].ratio.mid for k, v in verdicts.items() if v == claims.NOT_HELD}
    tail = ". A ratio of two times from the same runs is hardly affected."
    if outside:
        low, high = min(outside.values()), max(outside.values())
        times = f"{low:.2f}x" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f}x to {high:.2f}x"
        way = f"{'slower' if high > 1 else 'faster'} than when chapter 0 measured it"
        miss = f"times priced from chapter 0 may run up to that much too {'low' if high > 1 else 'high'}"
        if len(outside) == len(paced):
            return f"The machine ran {way}: the model's one-row matrices took {times} their chapter 0 time, so {miss}{tail}"
        others = ", ".join(f"{paced[k].ratio.mid:.2f}x {k}" for k in paced if k not in outside)
        when = " and ".join(outside)
        return (f"{when[:1].upper()}{when[1:]}, the model's one-row matrices took {times} their chapter 0 time "
                f"({others}): the machine ran {way} for part of the chapter, so {miss}{tail}")
    near = [paced[k].ratio for k, v in verdicts.items() if v == claims.UNRESOLVED]
    if near:
        worst = max(near, key=lambda r: max(abs(math.log(r.low)), abs(math.log(r.high))))
        slow = abs(math.log(worst.high)) >= abs(math.log(worst.low))
        edge = worst.high if slow else worst.low
        return (f"The model's one-row matrices took {worst.mid:.2f}x their chapter 0 time here, and its interval "
                f"reaches {edge:.2f}x, so times priced from chapter 0 may run up to that much too {'low' if slow else 'high'}{tail}")
    moved = pace_moved(paced)
    changed = None if moved is None else claims.within(moved[2], 1.0, claims.PREDICTED_TIME)
    if changed in (None, claims.HELD):
        return ""
    a, b, r = moved
    if changed == claims.UNRESOLVED:  # the change's runs reach past the tolerance, its median not: say how far
        edge = max((r.low, r.high), key=lambda x: abs(math.log(x)))
        return (f"The machine may have changed speed while the chapter ran: the model's one-row matrices took "
                f"{r.mid:.2f}x as long {b} as {a}, and their intervals allow {edge:.2f}x, so prices made of chapter 0's ceilings "
                f"may fit one part of the chapter and miss the other by up to that much{tail}")
    return (f"The machine changed speed while the chapter ran: the model's one-row matrices took {r.mid:.2f}x as long "
            f"{b} as {a}, so prices made of chapter 0's ceilings may fit one part of the chapter and miss the other by "
            f"up to that much{tail}")


def release_pace() -> None:
    """Drop the weights :func:`pace` keeps between its calls."""
    for key in [k for k in _KEPT if isinstance(k, tuple) and k and k[0] == "pace"]:
        del _KEPT[key]


@dataclass
class Pacer:
    """A chapter's watch on the machine's speed: :meth:`check` times :func:`pace` at a moment (before its
    measurements, after them), :meth:`claim` decides ``machine_kept_its_pace`` on every moment and writes its
    evidence, ``pace.csv``, and :meth:`note` is the sentence the chapter's opening adds when the pace did not
    hold. Where chapter 0 has no one-row matrices of ``model`` at these ``threads`` (a quick chapter 0 of another
    model), nothing is timed and the claim is not made."""

    ceilings: "Ceilings"
    model: str
    dtype: str
    threads: int
    device: torch.device
    moments: dict[str, Pace] = dataclasses.field(default_factory=dict)

    def check(self, when: str) -> Pace | None:
        """Time the pace now, as the moment ``when`` ("before the sweep"); its weights are dropped after."""
        try:
            self.ceilings._rows(self.dtype, self.threads, "blocks", self.model, rows=1)
        except ValueError:  # chapter 0 has no such row
            return None
        try:
            self.moments[when] = pace(self.ceilings, self.model, self.dtype, self.threads, self.device)
        finally:
            release_pace()
        return self.moments[when]

    def claim(self, register, results, what: str) -> str:
        """Decide ``machine_kept_its_pace`` in ``register`` for the moments checked, while ``what`` ran ("the
        sweep"), and write ``pace.csv`` through the chapter's ``results``; the sentence to show."""
        if not self.moments:
            return (f"Chapter 0 has no one-row matrices of {self.model} at {self.threads} thread"
                    f"{'s' * (self.threads != 1)}: the machine's pace is not checked.")
        results.table(pace_table(self.moments), "pace")  # the claim's evidence; kept, not shown
        return pace_claim(register, self.moments, what, self.model)

    def note(self) -> str:
        """The opening's sentence when the pace did not hold (:func:`pace_note`), else empty."""
        return pace_note(self.moments)


def load_ceilings(device: torch.device, quick: bool = False) -> Ceilings:
    """The ceilings chapter 0 measured in this build on ``device``, checked (:func:`check_ceilings`). Raises
    ``FileNotFoundError`` with the one command to run when chapter 0 has not been built, and ``ValueError`` in one
    line when it measured another device (a chapter run by hand with ``device="cpu"`` on a GPU machine, say).
    A quick run reads a quick chapter 0's ceilings, else the committed run's (they hold the quick model's rows
    too), and prices from them leniently (``strict=False``).

    Introduced in chapter 0; read by every later chapter.
    """
    import json

    from lib.device import machine_identity
    from lib.paths import REPO_ROOT, output_root
    from lib.results import load_table  # results imports device; keep this module's import light

    table = load_table(MACHINE_SECTION, "ceilings", quick=quick, committed_too=True)  # rows for the quick model too
    if table is None:
        raise FileNotFoundError(
            f"this chapter reads the machine's ceilings from chapter 0: run `python -m lib.make.book "
            f"{'--quick ' if quick else ''}{MACHINE_SECTION}` (or `make book`) first")
    check_ceilings(table)
    mine = table[table.device == str(device)]
    if mine.empty:
        raise ValueError(f"chapter 0 measured {', '.join(sorted(set(table.device)))}, not {device}: run chapter 0 "
                         f"with device='{device}' first (this chapter's predictions need this device's ceilings)")
    root = next(r for r in (output_root(quick), REPO_ROOT) if (r / "data" / MACHINE_SECTION / "ceilings.csv").exists())
    try:
        record = json.loads((root / "data" / MACHINE_SECTION / "provenance.json").read_text())
    except (OSError, ValueError):
        record = {}
    here = machine_identity(device)
    same = all(record.get(k) == v for k, v in here.items()) and not record.get("quick", False)
    if quick and root != output_root(quick):  # said once per run: every price below comes from another run
        print(f"chapter 0 has no quick run here, so this quick run prices from the book's committed ceilings "
              f"(measured on {record.get('device_name', 'another machine')}"
              f"{'' if same else ', not this machine'}); `python -m lib.make.book --quick 00` measures this one's")
    return Ceilings(mine.reset_index(drop=True), str(device), strict=same and not quick)
