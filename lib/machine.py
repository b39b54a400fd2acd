"""This machine's ceilings, measured once per build: memory bandwidth, matrix rate, launch floor.

The roofline needs two ceilings and a small model needs a third floor. Chapter 0 measures them once
(:func:`measure_ceilings`) and writes ``data/00_machine/ceilings.csv``; every later chapter reads that
one table (:func:`load_ceilings`) instead of measuring again, so the same ceiling never drifts between
chapters built minutes apart.

* **Streaming bandwidth**, the way STREAM measures it: a *read* (sum of an array), a *copy*
  (``b = a``) and a *triad* (``a = b + s * c``) over arrays far larger than any cache, with every
  thread, bytes counted per kernel (read: one array; copy: two; triad: three; write-allocate
  traffic not counted, as STREAM does not).
* **Matrix-vector rate**: what the model's own matrix-vector products reach. Every matmul weight of a
  model shape (one matrix per projection, per layer, plus the LM head) multiplied by a one-row input:
  weight bytes over time. On the development CPU this rate is lower than the streaming one because a
  GEMV does not use the second thread, so a decode step is explained against both.
* **Matrix rate**: an ``n x n`` matrix product on random data, ``2 n**3`` FLOPs over time.
* **Launch floor**: a decode step of a GPT-2 with the model's 12 layers and the same operations but a
  width of 64, so its bytes and FLOPs are negligible: what issuing the operations costs.

Every figure is the median of repeats, with the low and high, after warm-up and device
synchronisation (:mod:`lib.timing`). Introduced in section 0 (this machine).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
import torch
import torch.nn.functional as F
import transformers

from lib import sweeps
from lib.device import UnsupportedDtype, cpu_flags, device_name, resolve_device, resolve_dtype
from lib.dtypes import dtype_name
from lib.models import LoadedModel
from lib.paths import MACHINE_SECTION
from lib.roofline import Hardware
from lib.shapes import GPT2_SMALL, ModelShape
from lib.timing import Timing, measure

__all__ = ["Sizes", "sizes", "cpu_flags", "hardware_support", "stream", "matvec", "model_matmuls",
           "matmul", "launch_floor", "measure_ceilings", "load_ceilings", "Ceilings", "MACHINE_SECTION"]



@dataclass(frozen=True)
class Sizes:
    """How big each measurement is: ``stream_bytes`` per array, the ``matmul_n`` of the square
    product, ``repeats`` and ``warmup`` samples. One policy for every chapter (:func:`sizes`)."""

    stream_bytes: int
    matmul_n: int
    repeats: int
    warmup: int


def sizes(device: torch.device | str, quick: bool = False) -> Sizes:
    """The measurement sizes for ``device``: arrays of 256 MiB on a CPU and 1 GiB on a GPU (far past
    any cache), a 2048-square product on a CPU and 8192 on a GPU, 7 repeats; quick mode shrinks all.

    Introduced in section 2.
    """
    gpu = torch.device(device).type == "cuda"
    if quick:
        return Sizes(stream_bytes=32 << 20, matmul_n=512, repeats=3, warmup=1)
    return Sizes(stream_bytes=(1 << 30) if gpu else (256 << 20), matmul_n=8192 if gpu else 2048,
                 repeats=7, warmup=2)


def hardware_support(device: torch.device | str, dtype: torch.dtype) -> bool:
    """Whether ``device`` has instructions for matrix products in ``dtype``: always for fp32; for
    bf16 on a CPU, AVX-512 BF16 or AMX; for fp16 on a CPU, AVX-512 FP16 or AMX-FP16; on a GPU,
    bf16 from compute capability 8.0 and fp16 from 5.3. Without it the rate is a slow kernel's, not
    the hardware's arithmetic.

    Introduced in section 0.
    """
    device = torch.device(device)
    if dtype == torch.float32:
        return True
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        return (major, minor) >= ((8, 0) if dtype == torch.bfloat16 else (5, 3))
    flags = cpu_flags()
    if dtype == torch.bfloat16:
        return bool(flags & {"avx512_bf16", "amx_bf16"})
    if dtype == torch.float16:
        return bool(flags & {"avx512_fp16", "amx_fp16"})
    return False


def _timing(fn, device: torch.device, size: Sizes) -> Timing:
    return measure(fn, device, warmup=size.warmup, repeats=size.repeats)


def stream(device: torch.device, dtype: torch.dtype, size: Sizes) -> dict[str, tuple[int, Timing]]:
    """STREAM's kernels over arrays of ``size.stream_bytes``: ``{"read": (bytes, Timing), "copy": ...,
    "triad": ...}``, the bytes each call moves and its timing in seconds.
    """
    n = max(1, size.stream_bytes // dtype.itemsize)
    a, b, c = (torch.rand(n, dtype=dtype, device=device) for _ in range(3))
    out = torch.empty((), dtype=dtype, device=device)
    nbytes = n * dtype.itemsize
    kernels = {
        "read": (nbytes, lambda: torch.sum(a, dim=0, out=out)),
        "copy": (2 * nbytes, lambda: b.copy_(a)),
        "triad": (3 * nbytes, lambda: torch.add(b, c, alpha=3.0, out=a)),
    }
    return {name: (moved, _timing(fn, device, size)) for name, (moved, fn) in kernels.items()}


def model_matmuls(shape: ModelShape, device: torch.device, dtype: torch.dtype) -> list[torch.Tensor]:
    """One random weight matrix per matmul of ``shape`` (q, k, v, o and the feed-forward matrices of
    every layer, then the LM head), laid out as ``F.linear`` takes them: ``(out, in)``.

    Introduced in section 2.
    """
    kv = shape.kv_heads * shape.head_dim
    ffn = [(shape.d_ff, shape.d_model)] * (2 if shape.gated_ffn else 1) + [(shape.d_model, shape.d_ff)]
    per_layer = [(shape.d_model, shape.d_model), (kv, shape.d_model), (kv, shape.d_model),
                 (shape.d_model, shape.d_model)] + ffn
    dims = per_layer * shape.layers + [(shape.vocab, shape.d_model)]
    return [torch.randn(o, i, dtype=dtype, device=device) / math.sqrt(i) for o, i in dims]


def matvec(weights: list[torch.Tensor], rows: int, device: torch.device, size: Sizes) -> Timing:
    """Time one pass of ``rows`` input rows through every matrix in ``weights`` (``F.linear``): with
    ``rows=1`` a decode step's weight reads, with more the matrix products of a prefill.

    Introduced in section 2.
    """
    d_in = {w.shape[1] for w in weights}
    inputs = {d: torch.randn(rows, d, dtype=weights[0].dtype, device=device) for d in d_in}

    def run() -> None:
        for w in weights:
            F.linear(inputs[w.shape[1]], w)

    return _timing(run, device, size)


def matmul(device: torch.device, dtype: torch.dtype, size: Sizes) -> tuple[float, Timing]:
    """Time an ``n x n`` product of random matrices; return (FLOPs per call, Timing).
    """
    n = size.matmul_n
    a = torch.randn(n, n, dtype=dtype, device=device)
    b = torch.randn(n, n, dtype=dtype, device=device)
    return 2.0 * n**3, _timing(lambda: a @ b, device, size)


def launch_floor(device: torch.device, dtype: torch.dtype, layers: int = GPT2_SMALL.layers, *,
                 steps: int = 20, context: int = 16) -> Timing:
    """Step time of a narrow GPT-2 (``layers`` layers, width 64, 4 heads, vocabulary 1,024, random
    weights): the cost of issuing a decode step's operations, with negligible bytes and FLOPs.
    """
    config = transformers.GPT2Config(n_layer=layers, n_embd=64, n_head=4, vocab_size=1024, n_positions=1024,
                                    bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    module = transformers.GPT2LMHeadModel(config).eval().to(device=device, dtype=dtype)
    narrow = LoadedModel(module, None, "narrow GPT-2", "random weights", device, dtype)
    table = sweeps.decode_sweep(narrow, [context], steps=steps, runs=3, label="launch floor")
    per_run = table.median_s.tolist()
    return Timing.of(per_run)


def measure_ceilings(device: str | torch.device = "auto", dtypes=("fp32",), threads=(None,), *,
                     shape: ModelShape = GPT2_SMALL, quick: bool = False) -> pd.DataFrame:
    """Measure every ceiling for each dtype and thread count (``None``: all threads; ignored on a GPU).

    Returns one row per (dtype, threads, kernel): ``kernel`` (read, copy, triad, matvec, matmul,
    launch), ``bytes_per_call`` or ``flops_per_call``, ``median_s``, ``low_s``, ``high_s``, and the
    rate it implies: ``bandwidth_gb_s`` (median, ``_low``, ``_high``) or ``gflop_s`` (likewise), plus
    ``hardware_support`` for the dtype. A dtype the device cannot run gets one row with
    ``status="unsupported"``.

    Introduced in section 0.
    """
    dev = resolve_device(device)
    size = sizes(dev, quick)
    rows = []
    for dt in dtypes:
        try:
            torch_dtype = resolve_dtype(dt, dev)
        except UnsupportedDtype as error:
            rows.append(dict(dtype=dt, kernel="matmul", status=f"unsupported: {error}"))
            continue
        support = hardware_support(dev, torch_dtype)
        for n in (threads if dev.type == "cpu" else (None,)):
            with sweeps.torch_threads(n):
                used = torch.get_num_threads() if dev.type == "cpu" else 0
                base = dict(device=str(dev), device_name=device_name(dev), dtype=dtype_name(torch_dtype),
                            threads=used, hardware_support=support, status="ok")
                for kernel, (moved, t) in stream(dev, torch_dtype, size).items():
                    rows.append(_rate_row(base, kernel, t, bytes_per_call=moved))
                weights = model_matmuls(shape.with_dtype(torch_dtype), dev, torch_dtype)
                moved = sum(w.numel() for w in weights) * torch_dtype.itemsize
                rows.append(_rate_row(base, "matvec", matvec(weights, 1, dev, size), bytes_per_call=moved))
                del weights
                flops, t = matmul(dev, torch_dtype, size)
                rows.append(_rate_row(base, "matmul", t, flops_per_call=flops))
                rows.append(dict(_rate_row(base, "launch", launch_floor(dev, torch_dtype, shape.layers)),
                                 layers=shape.layers))
    return pd.DataFrame(rows)


def _rate_row(base: dict, kernel: str, t: Timing, *, bytes_per_call: float = math.nan,
              flops_per_call: float = math.nan) -> dict:
    row = dict(base, kernel=kernel, bytes_per_call=bytes_per_call, flops_per_call=flops_per_call,
               median_s=t.median, low_s=t.low, high_s=t.high)
    # The fastest sample gives the highest rate.
    row["bandwidth_gb_s"] = bytes_per_call / t.median / 1e9
    row["bandwidth_gb_s_low"] = bytes_per_call / t.high / 1e9
    row["bandwidth_gb_s_high"] = bytes_per_call / t.low / 1e9
    row["gflop_s"] = flops_per_call / t.median / 1e9
    row["gflop_s_low"] = flops_per_call / t.high / 1e9
    row["gflop_s_high"] = flops_per_call / t.low / 1e9
    return row


@dataclass(frozen=True)
class Ceilings:
    """The table of :func:`measure_ceilings`, with the look-ups chapters need. Introduced in section 0."""

    table: pd.DataFrame

    def _row(self, dtype: str, threads: int | None, kernel: str) -> pd.Series:
        t = self.table[(self.table.kernel == kernel) & (self.table.dtype == dtype) & (self.table.status == "ok")]
        if threads is not None and (t.threads > 0).any():
            t = t[t.threads == threads]
        elif (t.threads > 0).any():
            t = t[t.threads == t.threads.max()]
        if t.empty:
            raise ValueError(f"chapter 0 measured no {kernel} for {dtype} at {threads or 'all'} threads; "
                             f"it has: {sorted(set(zip(self.table.dtype, self.table.threads)))}")
        return t.iloc[0]

    def bandwidth(self, dtype: str = "fp32", threads: int | None = None, kernel: str = "read") -> float:
        """Measured bandwidth in bytes/s: ``kernel`` is ``read``, ``copy``, ``triad`` or ``matvec``."""
        return float(self._row(dtype, threads, kernel).bandwidth_gb_s) * 1e9

    def flops(self, dtype: str = "fp32", threads: int | None = None) -> float:
        """Measured matrix rate in FLOP/s."""
        return float(self._row(dtype, threads, "matmul").gflop_s) * 1e9

    def launch_s(self, dtype: str = "fp32", threads: int | None = None, layers: int | None = None) -> float:
        """Measured launch floor of one pass, seconds: chapter 0's narrow GPT-2 step, scaled to ``layers``
        transformer blocks when given (issuing a pass's operations costs about the same per block)."""
        row = self._row(dtype, threads, "launch")
        measured = int(row.layers) if "layers" in row and row.layers == row.layers else GPT2_SMALL.layers
        return float(row.median_s) * (layers / measured if layers else 1.0)

    def hardware_support(self, dtype: str = "fp32") -> bool:
        """Whether the dtype's matrix products run on hardware instructions here."""
        return bool(self._row(dtype, None, "matmul").hardware_support)

    def threads(self, dtype: str = "fp32") -> list[int]:
        """The thread counts measured for ``dtype`` (``[0]`` on a GPU)."""
        t = self.table[(self.table.dtype == dtype) & (self.table.status == "ok")]
        return sorted(set(int(n) for n in t.threads))

    def hardware(self, dtype: str = "fp32", threads: int | None = None, bandwidth: str = "read") -> Hardware:
        """This machine as a ``Hardware`` record: the matrix rate and the ``bandwidth`` kernel's rate."""
        row = self._row(dtype, threads, "matmul")
        where = row.device_name + (f", {int(row.threads)} threads" if row.threads else "")
        return Hardware(f"this machine ({where}, {dtype})", self.flops(dtype, threads),
                        self.bandwidth(dtype, threads, bandwidth),
                        f"measured in chapter 0: {bandwidth} bandwidth and an {row.kernel} rate, median of repeats")


def load_ceilings(quick: bool = False) -> Ceilings:
    """The ceilings chapter 0 measured in this build. Raises ``FileNotFoundError`` with the one
    command to run when chapter 0 has not been built.

    Introduced in section 0; read by sections 1 to 6.
    """
    from lib.results import load_table  # results imports device; keep this module's import light

    table = load_table(MACHINE_SECTION, "ceilings", quick=quick)
    if table is None:
        raise FileNotFoundError(
            f"this chapter reads the machine's ceilings from chapter 0: run `python -m lib.make.book {MACHINE_SECTION}`"
            f"{' --quick' if quick else ''} (or `make book`) first")
    return Ceilings(table)
