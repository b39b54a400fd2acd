"""FLOPs and bytes of prefill and decode, the hardware they run on, and the roofline bound.

A pass through a decoder-only transformer costs arithmetic (FLOPs) and memory traffic (bytes).
A chip does at most ``flops`` FLOP/s and moves at most ``bandwidth`` bytes/s, so a pass takes at
least ``max(FLOPs / flops, bytes / bandwidth)`` seconds: the roofline bound. Which of the two terms
is larger says whether the pass is compute-bound or memory-bound. This module counts both terms
for the two phases of a request, keeps the published hardware peaks in one table, and measures the
machine it runs on.

Conventions (the ones the course roofline of ``data/reference/course_roofline_llama3_8b_h100.txt``
uses, and which reproduce its every printed figure):

* **Which weights count.** ``matmul_params`` holds the weights that take part in a matrix product
  for every token: in each transformer block the attention projections q, k, v, o (k and v sized
  for grouped-query attention, ``kv_heads * head_dim`` columns each) and the feed-forward network
  (three ``d_model x d_ff`` matrices when gated, as in SwiGLU: gate, up, down; two when plain, as
  in GPT-2), plus the LM head (``d_model x vocab``). The input embedding is a lookup, not a matrix
  product, so it is left out (and so are learned position embeddings). A tied LM head shares its
  matrix with the embedding, but it is still a full matrix product, so it counts. Norms and biases
  are ignored: they are a fraction of a per cent of the weights.
* **Two FLOPs per weight per token** (a multiply and an add).
* **Attention** costs ``4 * d_model`` FLOPs per (query, key) pair per layer: ``2 * d_model`` for
  ``Q K^T`` and ``2 * d_model`` for ``A V``, summed over heads. In prefill the causal mask halves
  it, so a prompt of S tokens costs ``2 * d_model * S**2`` per layer (the course's convention; the
  exact count, ``S (S + 1) / 2`` pairs, differs by a term linear in S). A decode step at context C
  costs ``4 * d_model * C`` per layer and sequence.
* **Bytes** are what a pass must move to or from memory at least once: every matmul weight
  (``weight_bytes``), plus the KV cache. Prefill writes ``kv_bytes_per_token * S``; a decode step
  reads ``kv_bytes_per_token * C`` per sequence. With grouped-query attention the cache holds
  ``kv_heads`` heads, not ``heads``: ``kv_bytes_per_token = 2 * layers * kv_heads * head_dim *
  bytes_per_param`` (the 2 is K and V). Activations, the single new KV entry a decode step writes,
  and the few embedding rows a pass looks up are left out.
* **Logits.** By default a prefill computes logits at every position (``logits="all"``), as the
  course table does; ``logits="last"`` counts the LM head once per sequence, which is what a
  serving prefill needs (section 2 measures the saving; ``last_logits_saving`` predicts it).
* **Units.** FLOPs, bytes, seconds, FLOP/s and bytes/s throughout; intensity in FLOP/byte. Tables
  print GFLOP and GB (10**9) like the course, and KiB (1024 bytes) per token of KV cache.

The roofline is a lower bound: real kernels reach a fraction of either peak, and a small model is
often bound by neither, but by the fixed cost of launching its many small operations. Find out
which regime you are in before optimising (``regime`` decides it from a measured time).

Introduced in section 6 (roofline); its FLOP counts are used from section 2 and its byte counts
from section 3.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from numbers import Integral, Real
from typing import Any, Literal

import torch

from lib.device import UnsupportedDtype, resolve_device, resolve_dtype
from lib.timing import measure


__all__ = [
    "ModelShape",
    "LLAMA3_8B",
    "LLAMA3_70B",
    "GPT2_SMALL",
    "SMOLLM2_135M",
    "PRESETS",
    "Hardware",
    "HARDWARE",
    "Cost",
    "prefill_cost",
    "decode_cost",
    "last_logits_saving",
    "prefill_crossover",
    "Roofline",
    "roofline",
    "memory_time",
    "decode_floor",
    "attainable_flops",
    "regime",
    "RequestSplit",
    "request_split",
    "prefill_rows",
    "decode_rows",
    "course_tables",
    "COURSE_PROMPTS",
    "COURSE_CONTEXTS",
    "COURSE_REQUEST",
    "MachineMeasurement",
    "measure_machine",
    "measure_machine_detail",
    "UnsupportedDtype",
]


# --------------------------------------------------------------------------------------------
# Data types: how many bytes a parameter takes, and what to call it
# --------------------------------------------------------------------------------------------

_DTYPE_NAMES: dict[str, tuple[float, str]] = {
    "float64": (8, "FP64"), "fp64": (8, "FP64"), "double": (8, "FP64"),
    "float32": (4, "FP32"), "fp32": (4, "FP32"), "float": (4, "FP32"),
    "bfloat16": (2, "BF16"), "bf16": (2, "BF16"),
    "float16": (2, "FP16"), "fp16": (2, "FP16"), "half": (2, "FP16"),
    "float8": (1, "FP8"), "fp8": (1, "FP8"), "int8": (1, "INT8"),
    "int4": (0.5, "INT4"),
}
_BYTES_LABELS: dict[float, str] = {8: "FP64", 4: "FP32", 2: "16-bit", 1: "8-bit", 0.5: "4-bit"}


def _dtype_bytes_and_label(dtype: Any) -> tuple[float, str]:
    """(bytes per parameter, label) for a torch dtype, a dtype name or a number of bytes."""
    if isinstance(dtype, torch.dtype):
        name = str(dtype).removeprefix("torch.")
        if name.startswith("float8"):
            return 1, "FP8"
        if name in _DTYPE_NAMES:
            return _DTYPE_NAMES[name]
        return dtype.itemsize, name.upper()
    if isinstance(dtype, str):
        key = dtype.lower().removeprefix("torch.")
        if key.startswith("float8"):
            key = "float8"
        if key not in _DTYPE_NAMES:
            raise ValueError(
                f"unknown dtype name {dtype!r}; use a torch dtype, a number of bytes per "
                f"parameter, or one of {sorted(_DTYPE_NAMES)}"
            )
        return _DTYPE_NAMES[key]
    if isinstance(dtype, Real) and not isinstance(dtype, bool):
        if not dtype > 0:
            raise ValueError(f"bytes per parameter must be positive, got {dtype!r}")
        value = int(dtype) if float(dtype).is_integer() else float(dtype)
        return value, _BYTES_LABELS.get(value, f"{value:g}-byte")
    raise TypeError(
        f"dtype must be a torch dtype, a dtype name or a number of bytes, got {type(dtype).__name__}"
    )


def _check_count(name: str, value: Any, minimum: int) -> int:
    """``value`` as an int, or a ValueError saying what was wrong with it."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ValueError(f"{name} must be an integer number of tokens, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return int(value)


# --------------------------------------------------------------------------------------------
# Model shapes
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelShape:
    """The numbers of a decoder-only transformer that set its FLOPs and bytes.

    ``gated_ffn`` is True for a SwiGLU feed-forward network (three ``d_model x d_ff`` matrices:
    gate, up, down; Llama, SmolLM2) and False for a plain one (two matrices; GPT-2).
    ``bytes_per_param`` is the size of one weight and one cached K or V value (2 for BF16/FP16,
    4 for FP32). ``tied_lm_head`` records whether the LM head shares the embedding matrix; it does
    not change the counts (a tied head is still a matrix product). ``dtype_name`` is a label for
    tables (derived from ``bytes_per_param`` when empty) and takes no part in equality.

    Introduced in section 6 (roofline); used from section 2.
    """

    name: str
    layers: int
    d_model: int
    heads: int
    kv_heads: int
    d_ff: int
    vocab: int
    gated_ffn: bool = True
    bytes_per_param: float = 2
    tied_lm_head: bool = False
    dtype_name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        for attr in ("layers", "d_model", "heads", "kv_heads", "d_ff", "vocab"):
            value = getattr(self, attr)
            if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
                raise ValueError(f"ModelShape.{attr} must be a positive integer, got {value!r}")
        if self.d_model % self.heads:
            raise ValueError(
                f"d_model ({self.d_model}) must be a multiple of heads ({self.heads})"
            )
        if self.heads % self.kv_heads:
            raise ValueError(
                f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads}) "
                "for grouped-query attention"
            )
        bpp, label = _dtype_bytes_and_label(self.bytes_per_param)
        object.__setattr__(self, "bytes_per_param", bpp)
        if not self.dtype_name:
            object.__setattr__(self, "dtype_name", label)

    @property
    def head_dim(self) -> int:
        """Width of one attention head, ``d_model // heads``."""
        return self.d_model // self.heads

    @property
    def lm_head_params(self) -> int:
        """Weights of the LM head, ``d_model * vocab`` (counted whether tied or not)."""
        return self.d_model * self.vocab

    @property
    def block_params(self) -> int:
        """Matmul weights of one transformer block: attention q, k, v, o plus the FFN."""
        kv_width = self.kv_heads * self.head_dim
        attention = self.d_model * (2 * self.d_model + 2 * kv_width)  # q and o; k and v (GQA)
        ffn = (3 if self.gated_ffn else 2) * self.d_model * self.d_ff
        return attention + ffn

    @property
    def matmul_params(self) -> int:
        """Weights that take part in a matrix product for every token: all blocks plus the LM
        head; the input embedding (a lookup), norms and biases are not counted."""
        return self.layers * self.block_params + self.lm_head_params

    @property
    def weight_bytes(self) -> float:
        """Bytes of the matmul weights, which every pass reads at least once."""
        return self.matmul_params * self.bytes_per_param

    @property
    def kv_bytes_per_token(self) -> float:
        """Bytes of KV cache one token occupies: ``2 * layers * kv_heads * head_dim *
        bytes_per_param`` (K and V, every layer, grouped-query heads only)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.bytes_per_param

    def with_dtype(self, dtype: Any) -> ModelShape:
        """A copy stored in another dtype: a torch dtype (``torch.float16``), a name
        (``"bf16"``) or a number of bytes per parameter (``4``).

        Introduced in section 6 (roofline); used from section 2.
        """
        bpp, label = _dtype_bytes_and_label(dtype)
        return dataclasses.replace(self, bytes_per_param=bpp, dtype_name=label)

    @classmethod
    def from_config(
        cls, config: Any, name: str | None = None, bytes_per_param: Any = None
    ) -> ModelShape:
        """The shape of a Hugging Face model, read from its config (or from a model's ``.config``).

        Supported: GPT-2 configs (``model_type == "gpt2"``: ``n_layer``, ``n_embd``, ``n_head``,
        ``n_inner`` or ``4 * n_embd``, ``vocab_size``; plain FFN, multi-head attention) and
        Llama-family configs (``model_type == "llama"``, which includes SmolLM2:
        ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``, ``num_key_value_heads``,
        ``intermediate_size``, ``vocab_size``, ``tie_word_embeddings``; gated FFN). Anything else
        raises ``ValueError``.

        ``bytes_per_param`` (a torch dtype, a name or a number of bytes) should be the dtype you
        run in; when omitted it is the config's ``dtype`` if set, else FP32 (4 bytes).

        Introduced in section 6 (roofline); used from section 2.
        """
        if not hasattr(config, "model_type") and hasattr(config, "config"):
            config = config.config  # a model was passed
        model_type = getattr(config, "model_type", None)
        if bytes_per_param is None:
            bytes_per_param = (
                getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or 4
            )
        bpp, label = _dtype_bytes_and_label(bytes_per_param)
        default_name = getattr(config, "name_or_path", "") or str(model_type)
        if model_type == "gpt2":
            d_model = config.n_embd
            return cls(
                name=name or default_name,
                layers=config.n_layer,
                d_model=d_model,
                heads=config.n_head,
                kv_heads=config.n_head,
                d_ff=config.n_inner if config.n_inner is not None else 4 * d_model,
                vocab=config.vocab_size,
                gated_ffn=False,
                bytes_per_param=bpp,
                tied_lm_head=bool(getattr(config, "tie_word_embeddings", True)),
                dtype_name=label,
            )
        if model_type == "llama":
            d_model, heads = config.hidden_size, config.num_attention_heads
            head_dim = getattr(config, "head_dim", None)
            if head_dim is not None and head_dim * heads != d_model:
                raise ValueError(
                    f"config has head_dim {head_dim} with {heads} heads and hidden_size {d_model}; "
                    "ModelShape assumes head_dim == hidden_size // num_attention_heads"
                )
            kv_heads = getattr(config, "num_key_value_heads", None) or heads
            return cls(
                name=name or default_name,
                layers=config.num_hidden_layers,
                d_model=d_model,
                heads=heads,
                kv_heads=kv_heads,
                d_ff=config.intermediate_size,
                vocab=config.vocab_size,
                gated_ffn=True,
                bytes_per_param=bpp,
                tied_lm_head=bool(getattr(config, "tie_word_embeddings", False)),
                dtype_name=label,
            )
        raise ValueError(
            f"unsupported model config type {model_type!r}: ModelShape.from_config reads "
            "'gpt2' (GPT-2) and 'llama' (Llama family, including SmolLM2) configs; for another "
            "architecture build a ModelShape by hand"
        )


#: Llama-3-8B in BF16 (published config; the course table's model). Section 6.
LLAMA3_8B = ModelShape("Llama-3-8B", 32, 4096, 32, 8, 14336, 128256,
                       gated_ffn=True, bytes_per_param=2, tied_lm_head=False, dtype_name="BF16")
#: Llama-3-70B in BF16 (the course's "try it"). Section 6.
LLAMA3_70B = ModelShape("Llama-3-70B", 80, 8192, 64, 8, 28672, 128256,
                        gated_ffn=True, bytes_per_param=2, tied_lm_head=False, dtype_name="BF16")
#: GPT-2 small in FP32, the book's measured model (plain FFN, tied head, multi-head attention).
GPT2_SMALL = ModelShape("GPT-2 small", 12, 768, 12, 12, 3072, 50257,
                        gated_ffn=False, bytes_per_param=4, tied_lm_head=True, dtype_name="FP32")
#: SmolLM2-135M in BF16, the book's real pretrained model (GQA: 9 query heads, 3 KV heads).
SMOLLM2_135M = ModelShape("SmolLM2-135M", 30, 576, 9, 3, 1536, 49152,
                          gated_ffn=True, bytes_per_param=2, tied_lm_head=True, dtype_name="BF16")

#: The presets by name.
PRESETS: dict[str, ModelShape] = {
    s.name: s for s in (LLAMA3_8B, LLAMA3_70B, GPT2_SMALL, SMOLLM2_135M)
}


# --------------------------------------------------------------------------------------------
# Hardware
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hardware:
    """A chip's two ceilings: ``flops`` (FLOP/s, dense) and ``bandwidth`` (bytes/s), and where
    the figures come from. ``flops`` is NaN when only the bandwidth is known.

    Introduced in section 6 (roofline).
    """

    name: str
    flops: float
    bandwidth: float
    source: str

    @property
    def ridge(self) -> float:
        """The ridge point (machine balance) in FLOP/byte: ``flops / bandwidth``. A pass with a
        lower intensity is memory-bound, a higher one compute-bound."""
        return self.flops / self.bandwidth


#: Published peaks, dense (not 2:4 sparse), in FLOP/s and bytes/s. Nothing else in the book
#: hard-codes a chip's numbers.
HARDWARE: dict[str, Hardware] = {
    hw.name: hw
    for hw in (
        Hardware(
            "H100 SXM", 989e12, 3.35e12,
            "NVIDIA H100 Tensor Core GPU datasheet, SXM5: 989 TFLOP/s dense BF16 "
            "(1,979 with sparsity), 3.35 TB/s HBM3; the course table's GPU",
        ),
        Hardware(
            "A100 80GB", 312e12, 2.039e12,
            "NVIDIA A100 Tensor Core GPU datasheet, 80GB SXM: 312 TFLOP/s dense BF16 "
            "(624 with sparsity), 2,039 GB/s HBM2e (the course rounds it to 2.04 TB/s; "
            "both give a ridge of 153 FLOP/byte)",
        ),
        Hardware(
            "H200", 989e12, 4.8e12,
            "NVIDIA H200 Tensor Core GPU datasheet, SXM: 989 TFLOP/s dense BF16 "
            "(1,979 with sparsity), 4.8 TB/s HBM3e",
        ),
        Hardware(
            "Source chapter GPU", math.nan, 303e9,
            "the source chapter's consumer GPU: 303 GB/s memory bandwidth as quoted there; "
            "its FLOP rate is not given, so only bandwidth bounds (decode_floor) apply",
        ),
    )
}


# --------------------------------------------------------------------------------------------
# Costs of the two phases
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cost:
    """The FLOPs and bytes of one pass, and how many tokens it produces or processes
    (``tokens``: prompt tokens for a prefill, sequences for a decode step).

    Introduced in section 6 (roofline); used from section 2.
    """

    phase: str
    flops: float
    bytes: float
    tokens: int

    @property
    def intensity(self) -> float:
        """Arithmetic intensity in FLOP/byte."""
        return self.flops / self.bytes


def prefill_cost(
    shape: ModelShape,
    prompt: int,
    *,
    logits: Literal["all", "last"] = "all",
    batch: int = 1,
    past: int = 0,
) -> Cost:
    """FLOPs and bytes of a prefill of ``prompt`` tokens (for each of ``batch`` sequences).

    ``flops = batch * (2 * matmul_params * prompt + layers * 2 * d_model * prompt**2)``: two FLOPs
    per weight per token plus causal attention (half of ``4 * d_model`` per token pair).
    ``bytes = weight_bytes + kv_bytes_per_token * prompt * batch`` (weights read once, KV written).

    ``logits="all"`` (the default, the course table's convention) runs the LM head at every
    position; ``"last"`` runs it once per sequence, as a serving prefill does. ``past`` cached
    tokens make this the cost of one chunk of a chunked prefill: each new token also attends to
    the ``past`` cached ones (``4 * d_model`` FLOPs per pair, no mask) and their KV is read.

    Returns a ``Cost`` in FLOPs and bytes, ``tokens = batch * prompt``.
    Introduced in section 2 (prefill sweep); section 6 puts it on the roofline.
    """
    prompt = _check_count("prompt", prompt, 1)
    batch = _check_count("batch", batch, 1)
    past = _check_count("past", past, 0)
    if logits not in ("all", "last"):
        raise ValueError(f"logits must be 'all' or 'last', got {logits!r}")
    s = shape
    if logits == "all":
        matmul = 2 * s.matmul_params * prompt
    else:
        matmul = 2 * (s.matmul_params - s.lm_head_params) * prompt + 2 * s.lm_head_params
    attention = s.layers * 2 * s.d_model * prompt * prompt + s.layers * 4 * s.d_model * prompt * past
    flops = batch * (matmul + attention)
    nbytes = s.weight_bytes + s.kv_bytes_per_token * (prompt + past) * batch
    return Cost("prefill", flops, nbytes, batch * prompt)


def decode_cost(shape: ModelShape, batch: int, context: int) -> Cost:
    """FLOPs and bytes of one decode step: ``batch`` sequences, each with ``context`` cached tokens.

    ``flops = batch * (2 * matmul_params + layers * 4 * d_model * context)``;
    ``bytes = weight_bytes + kv_bytes_per_token * context * batch``: the weights are read once
    and shared by the batch, every sequence's cache is read in full.

    Returns a ``Cost`` in FLOPs and bytes, ``tokens = batch`` (one new token per sequence).
    Introduced in section 3 (decode sweep); section 6 puts it on the roofline.
    """
    batch = _check_count("batch", batch, 1)
    context = _check_count("context", context, 0)
    s = shape
    flops = batch * (2 * s.matmul_params + s.layers * 4 * s.d_model * context)
    nbytes = s.weight_bytes + s.kv_bytes_per_token * context * batch
    return Cost("decode", flops, nbytes, batch)


def last_logits_saving(shape: ModelShape, prompt: int) -> float:
    """The fraction of a prefill's FLOPs saved by computing logits at the last position only:
    ``1 - flops(logits="last") / flops(logits="all")``, a number between 0 and 1.

    For GPT-2 small, whose LM head is about 31 per cent of its matmul weights, it is about 0.31
    for short prompts and falls slowly as attention grows with the prompt.
    Introduced in section 2 (prefill sweep).
    """
    full = prefill_cost(shape, prompt, logits="all").flops
    last = prefill_cost(shape, prompt, logits="last").flops
    return 1.0 - last / full


def prefill_crossover(
    shape: ModelShape, hardware: Hardware, *, logits: Literal["all", "last"] = "all"
) -> int:
    """The shortest prompt (in tokens) whose prefill is compute-bound on ``hardware``: where the
    prefill leaves the memory roof. A weight matmul over S rows does about S FLOPs per byte, so
    this lands near the ridge point (295 tokens for Llama-3-8B in BF16 on an H100).

    Introduced in section 6 (roofline).
    """

    def compute_bound(s: int) -> bool:
        return roofline(hardware, prefill_cost(shape, s, logits=logits)).bound == "compute"

    hi = 1
    while not compute_bound(hi):
        hi *= 2
        if hi > 1 << 40:
            raise ValueError(f"prefill of {shape.name} never turns compute-bound on {hardware.name}")
    lo = hi // 2  # memory-bound (or 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if compute_bound(mid):
            hi = mid
        else:
            lo = mid
    return hi


# --------------------------------------------------------------------------------------------
# The roofline
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Roofline:
    """The roofline bound of one pass on one chip, in seconds.

    ``t_compute = flops / hardware.flops``, ``t_memory = bytes / hardware.bandwidth``,
    ``time = max`` of the two, ``bound`` is ``"compute"`` when ``t_compute`` is the larger and
    ``"memory"`` otherwise.

    Introduced in section 6 (roofline).
    """

    hardware: str
    t_compute: float
    t_memory: float
    time: float
    bound: str
    tokens: int
    intensity: float

    @property
    def tokens_per_s(self) -> float:
        """Tokens per second at the bound: ``tokens / time`` (all sequences together)."""
        return self.tokens / self.time

    def fraction_reached(self, measured_s: float) -> float:
        """How much of the bound a measured time reached: ``time / measured_s`` (1.0 = at the
        roofline, 0.25 = four times slower than the bound)."""
        if not measured_s > 0:
            raise ValueError(f"measured time must be positive seconds, got {measured_s!r}")
        return self.time / measured_s


def roofline(hardware: Hardware, cost: Cost) -> Roofline:
    """The roofline bound of ``cost`` on ``hardware``: a ``Roofline`` with times in seconds.

    Raises ``ValueError`` when the hardware has no FLOP rate (use ``memory_time`` or
    ``decode_floor`` for a bandwidth-only bound).
    Introduced in section 6 (roofline).
    """
    if not math.isfinite(hardware.flops) or hardware.flops <= 0:
        raise ValueError(
            f"{hardware.name} has no FLOP rate in the table ({hardware.flops}); a full roofline "
            "needs both ceilings: use memory_time() or decode_floor() for its bandwidth bound"
        )
    t_c = cost.flops / hardware.flops
    t_m = cost.bytes / hardware.bandwidth
    bound = "compute" if t_c > t_m else "memory"
    return Roofline(hardware.name, t_c, t_m, max(t_c, t_m), bound, cost.tokens, cost.intensity)


def memory_time(bytes_: float, hardware: Hardware) -> float:
    """Seconds to move ``bytes_`` at ``hardware.bandwidth``: the memory floor of a pass.

    Introduced in section 3 (decode sweep).
    """
    return bytes_ / hardware.bandwidth


def decode_floor(shape: ModelShape, hardware: Hardware, context: int = 0, batch: int = 1) -> float:
    """The memory floor of one decode step in seconds: its bytes (weights plus ``batch`` caches of
    ``context`` tokens) over the bandwidth. With ``context=0`` it is the single-stream
    inter-token latency floor, weight bytes / bandwidth.

    Introduced in section 3 (decode sweep).
    """
    return memory_time(decode_cost(shape, batch, context).bytes, hardware)


def attainable_flops(hardware: Hardware, intensity: float) -> float:
    """The roofline curve: the highest FLOP/s a pass of ``intensity`` FLOP/byte can reach,
    ``min(hardware.flops, intensity * hardware.bandwidth)``.

    Introduced in section 6 (roofline).
    """
    return min(hardware.flops, intensity * hardware.bandwidth)


def regime(measured_s: float, bound: Roofline, slack: float = 2.0) -> str:
    """Which regime a measured pass is in, decided from the numbers.

    Returns ``"launch-bound"`` when the measured time is more than ``slack`` times the roofline
    bound (neither arithmetic nor memory traffic explains it: the fixed cost of launching
    operations does), else the roofline's ``"compute"``/``"memory"`` as ``"compute-bound"`` or
    ``"memory-bound"``.
    Introduced in section 3 (decode sweep); used in section 6.
    """
    if not measured_s > 0:
        raise ValueError(f"measured time must be positive seconds, got {measured_s!r}")
    if measured_s > slack * bound.time:
        return "launch-bound"
    return f"{bound.bound}-bound"


# --------------------------------------------------------------------------------------------
# A whole request
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestSplit:
    """Roofline time of one request's two phases, in seconds.

    Introduced in section 4 (request split); the course's figure is reproduced in section 6.
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


def request_split(
    shape: ModelShape,
    hw: Hardware,
    prompt: int,
    output: int,
    batch: int = 1,
    *,
    first_token_from_prefill: bool = False,
    logits: Literal["all", "last"] = "all",
) -> RequestSplit:
    """Roofline lower bound on a request's prefill and decode time (``batch`` identical requests
    served together).

    Prefill: one pass over ``prompt`` tokens per sequence. Decode: the sum of per-step roofline
    times, the step for output token ``i`` (0-based) reading a context of ``prompt + i``. By
    default there is one step per output token, contexts ``prompt .. prompt + output - 1``: the
    course's convention, which reproduces its "2000 in, 500 out: decode 2284 ms". With
    ``first_token_from_prefill=True`` the prefill's last position gives the first token (as a
    serving loop does, and as ``lib.metrics`` defines TTFT), so there are ``output - 1`` steps.

    Returns a ``RequestSplit`` in seconds.
    Introduced in section 4 (request split); section 6 reproduces the course's figure.
    """
    prompt = _check_count("prompt", prompt, 1)
    output = _check_count("output", output, 1)
    batch = _check_count("batch", batch, 1)
    t_prefill = roofline(hw, prefill_cost(shape, prompt, batch=batch, logits=logits)).time
    steps = output - 1 if first_token_from_prefill else output
    t_decode = sum(roofline(hw, decode_cost(shape, batch, prompt + i)).time for i in range(steps))
    return RequestSplit(prompt, output, batch, steps, t_prefill, t_decode)


# --------------------------------------------------------------------------------------------
# The course's tables
# --------------------------------------------------------------------------------------------

#: The prompt lengths, decode contexts and request of the course's table.
COURSE_PROMPTS: tuple[int, ...] = (1, 16, 128, 256, 512, 2048, 8192, 32768)
COURSE_CONTEXTS: tuple[int, ...] = (128, 2048, 8192, 32768)
COURSE_REQUEST: tuple[int, int] = (2000, 500)


def _row(cost: Cost, hw: Hardware) -> dict[str, Any]:
    r = roofline(hw, cost)
    return {
        "flops": cost.flops, "bytes": cost.bytes, "intensity": cost.intensity,
        "t_compute_s": r.t_compute, "t_memory_s": r.t_memory, "time_s": r.time,
        "bound": r.bound, "tokens_per_s": r.tokens_per_s,
    }


def prefill_rows(
    shape: ModelShape, hw: Hardware, prompts: Iterable[int] = COURSE_PROMPTS, **kwargs: Any
) -> list[dict[str, Any]]:
    """One record per prompt length: ``prompt``, ``flops``, ``bytes``, ``intensity`` (FLOP/byte),
    ``t_compute_s``, ``t_memory_s``, ``time_s`` (seconds), ``bound`` and ``tokens_per_s``;
    ``kwargs`` go to ``prefill_cost``. Ready for ``pandas.DataFrame``.

    Introduced in section 6 (roofline).
    """
    return [{"prompt": p, **_row(prefill_cost(shape, p, **kwargs), hw)} for p in prompts]


def decode_rows(
    shape: ModelShape, hw: Hardware, contexts: Iterable[int] = COURSE_CONTEXTS, batch: int = 1
) -> list[dict[str, Any]]:
    """One record per context: ``context``, ``batch`` and the fields of ``prefill_rows``, for one
    decode step; ``tokens_per_s`` counts all ``batch`` sequences.

    Introduced in section 6 (roofline).
    """
    return [
        {"context": c, "batch": batch, **_row(decode_cost(shape, batch, c), hw)}
        for c in contexts
    ]


def course_tables(
    shape: ModelShape = LLAMA3_8B,
    hw: Hardware | None = None,
    prompts: Sequence[int] = COURSE_PROMPTS,
    contexts: Sequence[int] = COURSE_CONTEXTS,
    request: tuple[int, int] = COURSE_REQUEST,
) -> str:
    """The course's roofline printout for ``shape`` on ``hw`` (default: the H100 SXM), as text:
    a summary of the model and chip, the prefill table, the batch-1 decode table and the
    request line. With the defaults it matches ``data/reference/course_roofline_llama3_8b_h100.txt``
    line for line (its ``#`` comment lines aside).

    Introduced in section 6 (roofline).
    """
    hw = HARDWARE["H100 SXM"] if hw is None else hw
    head = (f"{'GFLOP':>9} {'GB':>6} {'FLOP/B':>7} {'t_comp ms':>10}"
            f" {'t_mem ms':>9} {'bound':>8} {'tok/s':>9}")
    lines = [
        f"{shape.name}: {shape.matmul_params / 1e9:.2f}B matmul weights, "
        f"{shape.weight_bytes / 1e9:.1f} GB in {shape.dtype_name}, "
        f"KV {shape.kv_bytes_per_token / 1024:g} KiB/token",
        f"{hw.name}: ridge point {hw.ridge:.0f} FLOP/byte",
        "",
        "Prefill of one prompt (roofline lower bound on TTFT)",
        f"{'prompt':>7} {head}",
    ]
    for r in prefill_rows(shape, hw, prompts):
        lines.append(
            f"{r['prompt']:>7} {r['flops'] / 1e9:>9.0f} {r['bytes'] / 1e9:>6.1f}"
            f" {r['intensity']:>7.0f} {r['t_compute_s'] * 1e3:>10.2f}"
            f" {r['t_memory_s'] * 1e3:>9.2f} {r['bound']:>8} {r['tokens_per_s']:>9.0f}"
        )
    lines += ["", "One decode step, batch 1 (roofline lower bound on inter-token latency)",
              f"{'context':>7} {head}"]
    for r in decode_rows(shape, hw, contexts, batch=1):
        lines.append(
            f"{r['context']:>7} {r['flops'] / 1e9:>9.1f} {r['bytes'] / 1e9:>6.2f}"
            f" {r['intensity']:>7.1f} {r['t_compute_s'] * 1e3:>10.3f}"
            f" {r['t_memory_s'] * 1e3:>9.2f} {r['bound']:>8} {r['tokens_per_s']:>9.0f}"
        )
    p, out = request
    split = request_split(shape, hw, p, out)
    lines += [
        "",
        f"Request of {p} in, {out} out at batch 1: prefill {split.prefill_s * 1e3:.0f} ms,"
        f" decode {split.decode_s * 1e3:.0f} ms ({100 * split.decode_share:.0f}% of the time)",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Measuring this machine
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MachineMeasurement:
    """What ``measure_machine_detail`` measured: the ``hardware`` record (medians) with the
    low and high of the repeats, in FLOP/s and bytes/s, and the sizes used.

    Introduced in section 3 (decode sweep); section 6 draws its roofline.
    """

    hardware: Hardware
    bandwidth_low: float
    bandwidth_high: float
    flops_low: float
    flops_high: float
    device: str
    dtype: str
    threads: int
    matvec_bytes: int
    matmul_n: int
    repeats: int


def _time_op(op: Any, dev: torch.device, warmup: int, repeats: int, inner: int = 1) -> list[float]:
    """Seconds per call of ``op``: ``repeats`` samples, each the mean of ``inner`` back-to-back calls
    between two device synchronisations (``lib.timing.measure``), after ``warmup`` untimed samples."""

    def calls() -> None:
        for _ in range(inner):
            op()

    return [t / inner for t in measure(calls, dev, warmup=warmup, repeats=repeats).samples]


def measure_machine_detail(
    device: str | torch.device = "cpu",
    dtype: torch.dtype | str = torch.float32,
    *,
    matvec_bytes: int | None = None,
    matmul_n: int | None = None,
    repeats: int = 5,
    warmup: int = 2,
) -> MachineMeasurement:
    """Measure this machine's memory bandwidth and matrix FLOP rate on ``device`` in ``dtype``.

    Bandwidth: a matrix-vector product over a matrix of ``matvec_bytes`` bytes (default 256 MiB
    on CPU, 1 GiB on a GPU, far beyond any cache), each weight read once: bytes of the matrix /
    time. FLOP rate: an ``n x n`` by ``n x n`` matrix product (default n = 2048 on CPU, 8192 on a
    GPU): ``2 * n**3`` / time. Each is warmed up, synchronised on the device, repeated and
    reported as the median with low and high. The ridge of the result is this machine's balance.

    ``device`` is a ``torch.device`` or ``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:N"``;
    ``dtype`` a torch dtype or ``"fp32"``, ``"bf16"``, ``"fp16"``. Raises ``ValueError`` for an
    unknown or absent device, and ``UnsupportedDtype`` (a ``ValueError``, from ``lib.device``)
    for a dtype the device cannot multiply, checked with a tiny product before any large
    allocation.
    Returns a ``MachineMeasurement`` in FLOP/s and bytes/s.
    Introduced in section 3 (decode sweep); section 6 draws its roofline.
    """
    dev = resolve_device(device)
    if isinstance(dtype, torch.dtype) and not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating-point dtype, got {dtype}")
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got {repeats} and {warmup}")
    dtype = resolve_dtype(dtype, dev)  # multiplies a tiny matrix first: UnsupportedDtype if it cannot
    gpu = dev.type != "cpu"
    if matvec_bytes is None:
        matvec_bytes = (1 << 30) if gpu else (256 << 20)
    if matmul_n is None:
        matmul_n = 8192 if gpu else 2048
    if matvec_bytes < 1 or matmul_n < 1:
        raise ValueError(f"sizes must be positive, got matvec_bytes={matvec_bytes}, matmul_n={matmul_n}")

    itemsize = dtype.itemsize
    cols = min(4096, max(1, matvec_bytes // itemsize))
    rows = max(1, matvec_bytes // (itemsize * cols))
    matrix = torch.full((rows, cols), 1.0 / cols, dtype=dtype, device=dev)
    vector = torch.ones(cols, dtype=dtype, device=dev)
    nbytes = matrix.numel() * itemsize
    # On a GPU one product takes well under a millisecond: time several per sample so the
    # synchronisation and Python overhead stay a small fraction.
    inner = 10 if gpu else 1
    mv_times = _time_op(lambda: torch.mv(matrix, vector), dev, warmup, repeats, inner)
    del matrix, vector

    a = torch.full((matmul_n, matmul_n), 1.0 / matmul_n, dtype=dtype, device=dev)
    b = torch.full((matmul_n, matmul_n), 1.0, dtype=dtype, device=dev)
    mm_times = _time_op(lambda: a @ b, dev, warmup, repeats, inner)
    del a, b
    flop = 2.0 * matmul_n**3

    bandwidth = nbytes / statistics.median(mv_times)
    flops = flop / statistics.median(mm_times)
    threads = torch.get_num_threads()
    dtype_name = str(dtype).removeprefix("torch.")
    where = f"{dev}" + (f", {threads} threads" if dev.type == "cpu" else "")
    if dev.type == "cuda":
        where = f"{dev} ({torch.cuda.get_device_name(dev)})"
    hw = Hardware(
        name=f"this machine ({where}, {dtype_name})",
        flops=flops,
        bandwidth=bandwidth,
        source=(
            f"measured here: median of {repeats} samples of a matrix-vector product over "
            f"{nbytes / 2**20:.0f} MiB (bandwidth) and of a {matmul_n}x{matmul_n} matrix product "
            f"(FLOP rate), in {dtype_name}"
        ),
    )
    return MachineMeasurement(
        hardware=hw,
        bandwidth_low=nbytes / max(mv_times),
        bandwidth_high=nbytes / min(mv_times),
        flops_low=flop / max(mm_times),
        flops_high=flop / min(mm_times),
        device=str(dev),
        dtype=dtype_name,
        threads=threads,
        matvec_bytes=nbytes,
        matmul_n=matmul_n,
        repeats=repeats,
    )


def measure_machine(
    device: str | torch.device = "cpu",
    dtype: torch.dtype | str = torch.float32,
    **sizes: Any,
) -> Hardware:
    """This machine as a ``Hardware`` record: median matrix FLOP rate (FLOP/s) and memory
    bandwidth (bytes/s) measured on ``device`` in ``dtype``; its ``ridge`` is the machine's
    balance point. ``sizes`` (``matvec_bytes``, ``matmul_n``, ``repeats``, ``warmup``) go to
    ``measure_machine_detail``, which also returns the low and high of the repeats.

    Introduced in section 3 (decode sweep); section 6 draws its roofline.
    """
    return measure_machine_detail(device, dtype, **sizes).hardware
