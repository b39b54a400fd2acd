"""FLOPs and bytes of prefill and decode, the chips they run on, and the roofline bound.

A pass through a decoder-only transformer costs arithmetic (FLOPs) and memory traffic (bytes). A
chip does at most ``flops`` FLOP/s and moves at most ``bandwidth`` bytes/s, so a pass takes at least
``max(FLOPs / flops, bytes / bandwidth)`` seconds: the roofline bound. Which term is larger says
whether the pass is compute-bound or memory-bound. This module is arithmetic only: it counts both
terms for the two phases of a request (shapes come from :mod:`lib.shapes`), keeps the published
hardware peaks and capacities in one table, and gives the lower bounds that :mod:`lib.regime` compares a measured
point with. It measures nothing: this machine's ceilings come from :mod:`lib.machine`.

Conventions (those of the course roofline, ``data/reference/course_roofline_llama3_8b_h100.txt``,
which :mod:`lib.course` reproduces figure for figure):

* **Two FLOPs per matmul weight per token** (a multiply and an add); which weights count is
  ``ModelShape.matmul_params`` (:mod:`lib.shapes`).
* **Attention** costs ``4 * d_model`` FLOPs per (query, key) pair per layer (``Q K^T`` and ``A V``).
  In prefill the causal mask halves it: ``2 * d_model * S**2`` per layer for S tokens (the exact
  count, ``S (S + 1) / 2`` pairs, differs by a term linear in S). A decode step at context C costs
  ``4 * d_model * C`` per layer and sequence.
* **Bytes** are what a pass must move at least once: every matmul weight, plus the KV cache
  (prefill writes ``kv_bytes_per_token * S``; a decode step reads ``kv_bytes_per_token * C`` per
  sequence). Activations, the one new KV entry of a decode step and embedding lookups are left out.
* **Logits.** ``logits="all"`` (the course's convention) runs the LM head at every position;
  ``"last"`` once per sequence, as a serving prefill does.
* **Units.** FLOPs, bytes, seconds, FLOP/s and bytes/s; intensity in FLOP/byte.

The roofline is a lower bound. A small model is often bound by neither term but by the fixed cost
of launching its many small operations, a third lower bound that only a measurement gives; find out
which regime you are in before optimising.

Introduced in chapter 1 (the cost of each phase); the roofline itself is drawn in chapter 6.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral
from typing import Any, Literal

from lib.shapes import ModelShape

__all__ = [
    "Hardware", "HARDWARE", "Cost", "prefill_cost", "decode_cost", "prefill_attention_flops",
    "last_logits_saving", "prefill_crossover", "Bound", "bound", "memory_time", "decode_floor",
    "attainable_flops", "decode_intensity_limit", "batch_to_reach_ridge", "batch_that_fits",
    "RequestSplit", "request_split",
]


def _count(name: str, value: Any, minimum: int) -> int:
    """``value`` as an int, or a ValueError saying what was wrong with it."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ValueError(f"{name} must be an integer number of tokens, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return int(value)


def positive_seconds(name: str, value: Any) -> float:
    """``value`` as a float of seconds, or a ValueError when it is not positive and finite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or not math.isfinite(value):
        raise ValueError(f"{name} must be a positive, finite number of seconds, got {value!r}")
    return float(value)


# --------------------------------------------------------------------------------------------
# Hardware
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hardware:
    """A chip's two ceilings, ``flops`` (FLOP/s, dense) and ``bandwidth`` (bytes/s), its memory
    capacity ``memory_bytes`` and where the figures come from. ``flops`` or ``memory_bytes`` is NaN
    when not known; the bandwidth must be known. Non-positive figures raise ``ValueError``.
    """

    name: str
    flops: float
    bandwidth: float
    source: str
    memory_bytes: float = math.nan

    def __post_init__(self) -> None:
        if not (self.bandwidth > 0 and math.isfinite(self.bandwidth)):
            raise ValueError(f"{self.name}: bandwidth must be a positive number of bytes/s, got {self.bandwidth!r}")
        for attr in ("flops", "memory_bytes"):
            value = getattr(self, attr)
            if not (math.isnan(value) or (value > 0 and math.isfinite(value))):
                raise ValueError(f"{self.name}: {attr} must be positive (or NaN when unknown), got {value!r}")

    @property
    def ridge(self) -> float:
        """The ridge point (machine balance) in FLOP/byte, ``flops / bandwidth``: a pass of lower
        intensity is memory-bound, of higher intensity compute-bound."""
        return self.flops / self.bandwidth


#: Published peaks, dense (not 2:4 sparse), in FLOP/s and bytes/s, and memory as marketed, in bytes.
#: Nothing else in the book types a chip's numbers.
HARDWARE: dict[str, Hardware] = {
    hw.name: hw
    for hw in (
        Hardware(
            "H100 SXM", 989e12, 3.35e12,
            "NVIDIA H100 Tensor Core GPU datasheet, SXM5: 989 TFLOP/s dense BF16 "
            "(1,979 with sparsity), 3.35 TB/s and 80 GB of HBM3; the course table's GPU",
            memory_bytes=80e9,
        ),
        Hardware(
            "A100 80GB", 312e12, 2.039e12,
            "NVIDIA A100 Tensor Core GPU datasheet, 80GB SXM: 312 TFLOP/s dense BF16 "
            "(624 with sparsity), 2,039 GB/s and 80 GB of HBM2e (the course rounds the bandwidth "
            "to 2.04 TB/s; both give a ridge of 153 FLOP/byte)",
            memory_bytes=80e9,
        ),
        Hardware(
            "H200", 989e12, 4.8e12,
            "NVIDIA H200 Tensor Core GPU datasheet, SXM: 989 TFLOP/s dense BF16 "
            "(1,979 with sparsity), 4.8 TB/s and 141 GB of HBM3e",
            memory_bytes=141e9,
        ),
        Hardware(
            "Source chapter GPU", math.nan, 303e9,
            "the source chapter's consumer GPU: 303 GB/s memory bandwidth as quoted there; its "
            "FLOP rate and capacity are not given, so only bandwidth bounds (decode_floor) apply",
        ),
    )
}


# --------------------------------------------------------------------------------------------
# Costs of the two phases
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cost:
    """The FLOPs and bytes of one pass, and ``tokens``: prompt tokens for a prefill, sequences
    (one new token each) for a decode step.

    Returned by :func:`prefill_cost` and :func:`decode_cost`; chapter 1.
    """

    phase: str
    flops: float
    bytes: float
    tokens: int

    @property
    def intensity(self) -> float:
        """Arithmetic intensity in FLOP/byte."""
        return self.flops / self.bytes


def prefill_attention_flops(shape: ModelShape, prompt: int, past: int = 0) -> float:
    """Attention FLOPs of a prefill of ``prompt`` tokens for one sequence: causal pairs among the new
    tokens (``2 * d_model * prompt**2`` per layer) plus every new token against ``past`` cached ones
    (``4 * d_model * prompt * past`` per layer).

    Introduced in chapter 6 (prefill sweep); chapter 6 shows its share of the FLOPs.
    """
    prompt, past = _count("prompt", prompt, 1), _count("past", past, 0)
    return shape.layers * (2 * shape.d_model * prompt * prompt + 4 * shape.d_model * prompt * past)


def prefill_cost(shape: ModelShape, prompt: int, *, logits: Literal["all", "last"] = "all",
                 batch: int = 1, past: int = 0) -> Cost:
    """FLOPs and bytes of a prefill of ``prompt`` tokens for each of ``batch`` sequences.

    ``flops = batch * (2 * matmul_params * prompt + prefill_attention_flops)``;
    ``bytes = weight_bytes + kv_bytes_per_token * (prompt + past) * batch`` (weights read once, KV
    written, and the ``past`` cached tokens of a chunked prefill read). ``logits="last"`` runs the LM
    head once per sequence instead of at every position.

    Returns a ``Cost`` in FLOPs and bytes, ``tokens = batch * prompt``.
    Introduced in chapter 1.
    """
    prompt, batch = _count("prompt", prompt, 1), _count("batch", batch, 1)
    if logits not in ("all", "last"):
        raise ValueError(f"logits must be 'all' or 'last', got {logits!r}")
    s = shape
    if logits == "all":
        matmul = 2 * s.matmul_params * prompt
    else:
        matmul = 2 * (s.matmul_params - s.lm_head_params) * prompt + 2 * s.lm_head_params
    flops = batch * (matmul + prefill_attention_flops(s, prompt, past))
    nbytes = s.weight_bytes + s.kv_bytes_per_token * (prompt + past) * batch
    return Cost("prefill", flops, nbytes, batch * prompt)


def decode_cost(shape: ModelShape, batch: int, context: int) -> Cost:
    """FLOPs and bytes of one decode step: ``batch`` sequences, each with ``context`` cached tokens.

    ``flops = batch * (2 * matmul_params + layers * 4 * d_model * context)``;
    ``bytes = weight_bytes + kv_bytes_per_token * context * batch``: the weights are read once and
    shared by the batch, every sequence's cache is read in full.

    Returns a ``Cost`` in FLOPs and bytes, ``tokens = batch``.
    Introduced in chapter 1.
    """
    batch, context = _count("batch", batch, 1), _count("context", context, 0)
    s = shape
    flops = batch * (2 * s.matmul_params + s.layers * 4 * s.d_model * context)
    nbytes = s.weight_bytes + s.kv_bytes_per_token * context * batch
    return Cost("decode", flops, nbytes, batch)


def last_logits_saving(shape: ModelShape, prompt: int) -> float:
    """The fraction of a prefill's FLOPs saved by computing logits at the last position only,
    ``1 - flops(logits="last") / flops(logits="all")``, between 0 and 1 (about 0.31 for GPT-2 small's
    short prompts, whose LM head is about 31 per cent of the matmul weights).

    Introduced in chapter 2 (prefill sweep).
    """
    full = prefill_cost(shape, prompt, logits="all").flops
    return 1.0 - prefill_cost(shape, prompt, logits="last").flops / full


# --------------------------------------------------------------------------------------------
# The bound
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bound:
    """The roofline bound of one pass on one chip, in seconds: ``t_compute = flops / hardware.flops``,
    ``t_memory = bytes / hardware.bandwidth``, ``time`` the larger, ``limit`` which one
    (``"compute"`` or ``"memory"``).
    """

    hardware: str
    t_compute: float
    t_memory: float
    time: float
    limit: str
    tokens: int
    intensity: float

    @property
    def tokens_per_s(self) -> float:
        """Tokens per second at the bound (all sequences together)."""
        return self.tokens / self.time

    def fraction_reached(self, measured_s: float) -> float:
        """How much of the bound a measured time reached, ``time / measured_s`` (1.0 at the roof)."""
        return self.time / positive_seconds("measured time", measured_s)


def bound(hardware: Hardware, cost: Cost) -> Bound:
    """The roofline bound of ``cost`` on ``hardware``, a ``Bound`` in seconds. Raises ``ValueError``
    when the chip has no FLOP rate (use ``memory_time`` or ``decode_floor`` for its bandwidth bound).

    Introduced in chapter 6 (prefill sweep).
    """
    if math.isnan(hardware.flops):
        raise ValueError(f"{hardware.name} has no FLOP rate in the table; a full roofline needs both "
                         "ceilings: use memory_time() or decode_floor() for its bandwidth bound")
    t_c = cost.flops / hardware.flops
    t_m = cost.bytes / hardware.bandwidth
    return Bound(hardware.name, t_c, t_m, max(t_c, t_m), "compute" if t_c > t_m else "memory",
                 cost.tokens, cost.intensity)


def memory_time(bytes_: float, hardware: Hardware) -> float:
    """Seconds to move ``bytes_`` (non-negative) at ``hardware.bandwidth``.
    """
    if not bytes_ >= 0:
        raise ValueError(f"bytes must be non-negative, got {bytes_!r}")
    return bytes_ / hardware.bandwidth


def decode_floor(shape: ModelShape, hardware: Hardware, context: int = 0, batch: int = 1) -> float:
    """The memory floor of one decode step in seconds: weights plus ``batch`` caches of ``context``
    tokens, over the bandwidth (``context=0``: the single-stream floor, weight bytes / bandwidth).

    Introduced in chapter 6.
    """
    return memory_time(decode_cost(shape, batch, context).bytes, hardware)


def attainable_flops(hardware: Hardware, intensity: float) -> float:
    """The roofline curve: ``min(hardware.flops, intensity * hardware.bandwidth)`` in FLOP/s.

    Introduced in chapter 6 (roofline).
    """
    if not intensity > 0:
        raise ValueError(f"intensity must be positive FLOP/byte, got {intensity!r}")
    return min(hardware.flops, intensity * hardware.bandwidth)


def prefill_crossover(shape: ModelShape, hardware: Hardware, *,
                      logits: Literal["all", "last"] = "all") -> int:
    """The shortest prompt (tokens) whose prefill is compute-bound on ``hardware``. A weight matmul
    over S rows does about S FLOPs per byte, so this lands near the ridge point.

    Introduced in chapter 6 (roofline).
    """

    def compute_bound(s: int) -> bool:
        return bound(hardware, prefill_cost(shape, s, logits=logits)).limit == "compute"

    hi = 1
    while not compute_bound(hi):
        hi *= 2
        if hi > 1 << 40:
            raise ValueError(f"prefill of {shape.name} never turns compute-bound on {hardware.name}")
    lo = hi // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        hi, lo = (mid, lo) if compute_bound(mid) else (hi, mid)
    return hi


def decode_intensity_limit(shape: ModelShape, context: int) -> float:
    """The intensity (FLOP/byte) a decode step approaches as the batch grows without bound: FLOPs
    per sequence over cache bytes per sequence, ``(2 * matmul_params + 4 * layers * d_model * C) /
    (kv_bytes_per_token * C)``. Where it is below a chip's ridge, no batch makes decode compute-bound.

    Introduced in chapter 6 (roofline).
    """
    context = _count("context", context, 1)
    per_sequence = decode_cost(shape, 1, context).flops
    return per_sequence / (shape.kv_bytes_per_token * context)


def batch_to_reach_ridge(shape: ModelShape, hardware: Hardware, context: int) -> float:
    """The smallest batch whose decode step at ``context`` reaches ``hardware``'s ridge, or ``inf``
    when ``decode_intensity_limit`` is below it.

    Introduced in chapter 6 (roofline).
    """
    context = _count("context", context, 0)
    per_sequence = decode_cost(shape, 1, context).flops
    denominator = per_sequence - hardware.ridge * shape.kv_bytes_per_token * context
    return math.ceil(hardware.ridge * shape.weight_bytes / denominator) if denominator > 0 else math.inf


def batch_that_fits(shape: ModelShape, hardware: Hardware, context: int) -> int:
    """How many sequences' caches of ``context`` tokens fit beside the weights in the chip's memory
    (0 when the weights alone do not fit). Raises ``ValueError`` when the capacity is not known.

    Introduced in chapter 6 (roofline).
    """
    context = _count("context", context, 1)
    if math.isnan(hardware.memory_bytes):
        raise ValueError(f"{hardware.name} has no memory capacity in the table")
    room = hardware.memory_bytes - shape.weight_bytes
    return max(0, int(room // (shape.kv_bytes_per_token * context)))


# --------------------------------------------------------------------------------------------
# A whole request
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestSplit:
    """Roofline time of one request's two phases, in seconds.
    """

    prompt: int
    output: int
    batch: int
    decode_steps: int
    prefill_s: float
    decode_s: float

    @property
    def total_s(self) -> float:
        """Prefill plus decode, seconds."""
        return self.prefill_s + self.decode_s

    @property
    def prefill_share(self) -> float:
        """Fraction of the request's time spent in prefill."""
        return self.prefill_s / self.total_s

    @property
    def decode_share(self) -> float:
        """Fraction of the request's time spent in decode."""
        return self.decode_s / self.total_s


def request_split(shape: ModelShape, hw: Hardware, prompt: int, output: int, batch: int = 1, *,
                  first_token_from_prefill: bool = False,
                  logits: Literal["all", "last"] = "all") -> RequestSplit:
    """Roofline lower bound on a request's prefill and decode time (``batch`` identical requests).

    Prefill is one pass over ``prompt`` tokens; decode sums the per-step bounds, the step for output
    token ``i`` reading a context of ``prompt + i``. By default there is one step per output token
    (the course's convention, which gives its "2000 in, 500 out: decode 2284 ms"); with
    ``first_token_from_prefill=True`` the prefill gives the first token, as ``lib.metrics`` defines
    TTFT, and there are ``output - 1`` steps.

    Returns a ``RequestSplit`` in seconds.
    Introduced in chapter 6 (roofline).
    """
    prompt, output = _count("prompt", prompt, 1), _count("output", output, 1)
    batch = _count("batch", batch, 1)
    t_prefill = bound(hw, prefill_cost(shape, prompt, batch=batch, logits=logits)).time
    steps = output - 1 if first_token_from_prefill else output
    t_decode = sum(bound(hw, decode_cost(shape, batch, prompt + i)).time for i in range(steps))
    return RequestSplit(prompt, output, batch, steps, t_prefill, t_decode)
