"""Fewer bytes per token: int8 weights for PyTorch's own weight-only kernel, and the bytes a decode step reads.

A decode step reads every matrix of the model once (the LM head included; the input embedding is a lookup of
one row), so its bytes are counted from the tensors it multiplies by: :func:`step_weight_bytes` for a PyTorch
model (whatever its dtype, int8 included), :func:`gguf_step_bytes` for a GGUF file as llama.cpp reads it.

:func:`int8_weights` stores every linear layer's weight as int8 with one scale per output row (symmetric,
rounded to nearest), multiplied by ``aten._weight_int8pack_mm``, PyTorch's CPU kernel for int8 weights and
floating-point activations (the one torchao's int8 weight-only mode also calls on a CPU). The activations and
everything else (norms, attention, the cache) stay in the model's dtype.

Fewer bytes per cached token: :func:`fp8_cache` is transformers' quantized cache with its fp8 backend, and
:func:`cache_traffic` counts what a step moves per cached value, read from how that cache is implemented.
Introduced in chapter 8.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from lib.device import UnsupportedDtype
from lib.models import LoadedModel

if TYPE_CHECKING:
    from transformers import QuantizedCache

__all__ = ["Int8Linear", "int8_weights", "int8_kernel_runs", "step_weight_bytes", "gguf_step_bytes",
           "gguf_tensor_types", "matrix_layers", "in_width", "fp8_cache", "stored_cache_bytes", "cache_traffic", "INT8_KERNEL"]

INT8_KERNEL = "aten::_weight_int8pack_mm"
"""The operator an :class:`Int8Linear` runs, as ``torch.profiler`` names it."""


class Int8Linear(torch.nn.Module):
    """A linear layer with int8 weights ``[out, in]`` and one scale per output row, in the activations' dtype:
    ``y = (x @ weight_int8.T) * scales + bias``, computed by ``aten._weight_int8pack_mm`` without ever
    widening the weights in memory."""

    def __init__(self, layer: torch.nn.Module):
        super().__init__()
        # nn.Linear holds [out, in]; GPT-2's Conv1D holds [in, out] and computes x @ W + b
        weight = (layer.weight.T if _is_conv1d(layer) else layer.weight).detach().float()
        scales = (weight.abs().amax(dim=1) / 127).clamp(min=torch.finfo(torch.float32).tiny)
        self.register_buffer("weight_int8", torch.round(weight / scales[:, None]).clamp(-127, 127).to(torch.int8).contiguous())
        self.register_buffer("scales", scales.to(layer.weight.dtype))
        self.bias = None if layer.bias is None else torch.nn.Parameter(layer.bias.detach().clone(), requires_grad=False)
        self.out_features, self.in_features = weight.shape

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)
        y = torch.ops.aten._weight_int8pack_mm(rows.contiguous(), self.weight_int8, self.scales)
        y = y.reshape(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 weights"


def _is_conv1d(layer: torch.nn.Module) -> bool:
    return type(layer).__name__ == "Conv1D"


def _is_matrix(layer: torch.nn.Module) -> bool:
    return isinstance(layer, torch.nn.Linear) or _is_conv1d(layer)


def matrix_layers(module: torch.nn.Module) -> list[torch.nn.Module]:
    """Every matrix a step multiplies by: ``nn.Linear``, GPT-2's ``Conv1D`` and :class:`Int8Linear` layers."""
    return [m for m in module.modules() if _is_matrix(m) or isinstance(m, Int8Linear)]


def in_width(layer: torch.nn.Module) -> int:
    """The width of the rows a matrix layer takes."""
    return layer.weight.shape[0] if _is_conv1d(layer) else layer.in_features


def int8_kernel_runs(device: torch.device, dtype: torch.dtype = torch.float32) -> str | None:
    """``None`` when ``aten._weight_int8pack_mm`` runs on ``device`` for ``dtype`` activations, else why not
    (one sentence)."""
    try:
        x = torch.ones((1, 64), dtype=dtype, device=device)
        w = torch.ones((8, 64), dtype=torch.int8, device=device)
        torch.ops.aten._weight_int8pack_mm(x, w, torch.ones(8, dtype=dtype, device=device))
    except (RuntimeError, NotImplementedError) as error:
        return (f"PyTorch {torch.__version__} has no int8 weight-only kernel for {dtype} activations on "
                f"{device.type} ({str(error).splitlines()[0][:120]})")
    return None


def int8_weights(model: LoadedModel) -> LoadedModel:
    """A copy of ``model`` whose every matrix (``nn.Linear``, GPT-2's ``Conv1D``, the LM head included, untied
    from the input embedding, which stays a lookup in the model's dtype) holds int8 weights
    (:class:`Int8Linear`). Raises :class:`~lib.device.UnsupportedDtype` where the kernel does not run."""
    why = int8_kernel_runs(model.device, model.dtype)
    if why:
        raise UnsupportedDtype(why)
    module = copy.deepcopy(model.model)
    for child in list(module.modules()):
        for attr, layer in list(child.named_children()):
            if _is_matrix(layer):
                setattr(child, attr, Int8Linear(layer))
    module.config.tie_word_embeddings = False  # the head is its own int8 copy now
    return LoadedModel(model=module.eval(), tokenizer=model.tokenizer, name=model.name,
                       source=f"{model.source}; int8 weights, one scale per row", device=model.device,
                       dtype=model.dtype)


def step_weight_bytes(module: torch.nn.Module) -> int:
    """Bytes of the weights one decode step reads: every matrix it multiplies by (``nn.Linear``, GPT-2's
    ``Conv1D``, :class:`Int8Linear` with its scales), with their biases, counted once each (a head tied to the
    embedding is read in full as the head). The input embedding's lookup and the norms are not counted (one row,
    and a few KB)."""
    seen, total = set(), 0
    for m in module.modules():
        if isinstance(m, Int8Linear):
            tensors = [m.weight_int8, m.scales, m.bias]
        elif _is_matrix(m):
            tensors = [m.weight, m.bias]
        else:
            continue
        for t in tensors:
            if t is not None and t.data_ptr() not in seen:
                seen.add(t.data_ptr())
                total += t.numel() * t.element_size()
    return total


def gguf_tensor_types(path: str | Path) -> dict[str, int]:
    """Bytes of a GGUF file's tensors by storage type (``{"Q4_1": ..., "Q8_0": ..., "F32": ...}``)."""
    import gguf  # transformers' GGUF loader needs it, so .venv has it

    totals: dict[str, int] = {}
    for t in gguf.GGUFReader(str(path)).tensors:
        totals[t.tensor_type.name] = totals.get(t.tensor_type.name, 0) + int(t.n_bytes)
    return totals


def gguf_step_bytes(path: str | Path) -> int:
    """Bytes a llama.cpp decode step reads of a GGUF model: every tensor in the file once. A file without an
    ``output.weight`` (SmolLM2's) uses ``token_embd`` as its LM head, read in full; the norms (a few KB) are
    counted too."""
    return sum(gguf_tensor_types(path).values())


def fp8_cache(model: LoadedModel | torch.nn.Module, source) -> QuantizedCache:
    """transformers' ``QuantizedCache`` with its ``fp8`` backend (float8 e4m3, one scale per layer's keys and one
    per its values, frozen at the first update), holding ``source``'s keys and values (``source`` is left as it
    was). It needs no extra package."""
    from transformers import QuantizedCache

    module = model.model if isinstance(model, LoadedModel) else model
    cache = QuantizedCache(backend="fp8", config=module.config)
    for layer, kept in zip(cache.layers, source.layers):
        layer.update(kept.keys, kept.values)
    return cache


def stored_cache_bytes(cache) -> int:
    """Bytes a cache holds in its tensors: keys and values, quantized ones and their scales included."""
    total = 0
    for layer in cache.layers:
        for value in vars(layer).values():
            for t in value if isinstance(value, tuple) else (value,):
                if isinstance(t, torch.Tensor):
                    total += t.numel() * t.element_size()
    return total


def cache_traffic(kind: str, value_bytes: int) -> int:
    """Bytes a decode step moves per cached value outside attention's own read (which reads each value once, in
    the activations' dtype, ``value_bytes``), as transformers implements the cache:

    * ``"dynamic"``: ``torch.cat`` copies the cache into a tensor one position longer: read and write, ``2 x
      value_bytes``;
    * ``"fp8"``: ``torch.cat`` of the fp8 tensors (1 + 1), then dequantising all of it for attention:
      ``.float()`` (1 read, 4 written), the scale's multiply (4 + 4) and, for activations narrower than fp32, the
      cast back (4 + ``value_bytes``)."""
    if kind == "dynamic":
        return 2 * value_bytes
    if kind == "fp8":
        return 2 + 5 + 8 + (0 if value_bytes == 4 else 4 + value_bytes)
    raise ValueError(f"cache kind must be 'dynamic' or 'fp8', got {kind!r}")
