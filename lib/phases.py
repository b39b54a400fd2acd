"""The two phases of a request, on a real model (chapter 1).

* :func:`prefill` runs the whole prompt in one pass, writes the KV cache, and returns the logits of the
  last position (the first token's distribution) or, for comparison, of every position.
* :func:`decode` feeds one token per pass through the cache, choosing greedily and reading each token
  id back to the host before stamping its time.
* :func:`run_request` is both: a request's prefill, its first token, then its decode steps, with the host
  time of every token, ready for :func:`lib.metrics.request_metrics`.

The KV cache is transformers' ``DynamicCache``, which grows by concatenation (every step copies the whole
cache into a tensor one position longer); :func:`static_cache` gives the preallocated ``StaticCache``,
written in place, for comparison. Everything runs under ``torch.inference_mode``.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field

import torch
import transformers
from transformers import DynamicCache, StaticCache

from lib.models import LoadedModel, max_positions
from lib.timing import now, page_faults


def check_fits(model: LoadedModel | torch.nn.Module, prompt_tokens: int, new_tokens: int = 0) -> None:
    """Refuse, before any work, a prompt plus output that runs off the model's position table.

    A request of ``prompt_tokens`` that chooses ``new_tokens`` holds at most ``prompt_tokens + new_tokens``
    positions; that must not exceed the table (GPT-2: 1,024). Raises ``ValueError`` saying by how much it
    overflows and what would fit. Introduced in chapter 1.
    """
    module = model.model if isinstance(model, LoadedModel) else model
    limit = max_positions(module)
    if prompt_tokens < 1:
        raise ValueError(f"a prompt needs at least one token, got {prompt_tokens}")
    if new_tokens < 0:
        raise ValueError(f"the number of new tokens cannot be negative, got {new_tokens}")
    if prompt_tokens + new_tokens > limit:
        raise ValueError(
            f"prompt of {prompt_tokens} tokens plus {new_tokens} new tokens needs "
            f"{prompt_tokens + new_tokens} positions, but this model has {limit}; "
            f"use at most {max(limit - new_tokens, 0)} prompt tokens for {new_tokens} new ones"
        )


def _module(model: LoadedModel | torch.nn.Module) -> torch.nn.Module:
    return model.model if isinstance(model, LoadedModel) else model


@torch.inference_mode()  # a static cache's length counter is an inference tensor
def truncate_cache(cache: DynamicCache, length: int) -> DynamicCache:
    """Roll ``cache`` back to its first ``length`` positions, in place, so a decode run can be repeated
    from the same context without a new prefill."""
    excess = int(cache.get_seq_length()) - length
    if length < 0 or excess < 0:
        raise ValueError(f"cannot truncate a cache of {cache.get_seq_length()} positions to {length}")
    if excess:
        cache.crop(-excess)  # transformers 5: a negative count removes that many positions from the end
    return cache


def cast_cache(cache: DynamicCache, dtype: torch.dtype) -> DynamicCache:
    """Convert every cached key and value to ``dtype``, in place. Lets a fast fp32 prefill build the
    cache that a slow dtype then decodes from (a step's cost depends on the cache's shape and dtype, not
    its values)."""
    for layer in cache.layers:
        if layer.is_initialized:
            layer.keys, layer.values = layer.keys.to(dtype), layer.values.to(dtype)
    return cache


def cache_bytes(cache: DynamicCache) -> int:
    """Bytes the KV cache holds right now: every layer's keys and values. Introduced in chapter 3."""
    return sum(layer.keys.numel() * layer.keys.element_size() + layer.values.numel() * layer.values.element_size()
               for layer in cache.layers if layer.is_initialized)


@torch.inference_mode()
def static_cache(model: LoadedModel | torch.nn.Module, source: DynamicCache, max_len: int) -> StaticCache:
    """A preallocated cache (transformers' ``StaticCache``) of ``max_len`` positions per sequence holding a
    copy of ``source``'s keys and values (same batch, heads and dtype). A decode step then writes its new
    position in place instead of copying the whole cache into a longer one, as ``DynamicCache`` does;
    attention runs over all ``max_len`` positions, the unwritten ones masked. ``source`` is left as it
    was.
    """
    module = _module(model)
    length = int(source.get_seq_length())
    if length < 1:
        raise ValueError("static_cache needs a filled source cache (run a prefill first)")
    if not length <= max_len <= max_positions(module):
        raise ValueError(f"max_len must hold the source's {length} positions and fit the model's "
                         f"{max_positions(module)}, got {max_len}")
    cache = StaticCache(config=module.config, max_cache_len=max_len)
    for static, layer in zip(cache.layers, source.layers):
        static.update(layer.keys, layer.values)
    return cache


def new_cache(model: LoadedModel | torch.nn.Module) -> DynamicCache:
    """An empty KV cache for ``model``."""
    return DynamicCache(config=_module(model).config)


@functools.cache
def _takes_cache(model_class: type) -> bool:
    return "cache" in inspect.signature(model_class.forward).parameters


def _check_cache_argument(module: torch.nn.Module) -> None:
    """Raise unless ``module``'s forward takes the ``cache=`` argument the book passes. transformers before 5.24
    named it ``past_key_values`` and swallowed an unknown ``cache=`` in its keyword arguments: every pass would
    then run without the book's cache and every decode step would see one token. Checked on the class's
    signature, once per class: no tensor is touched (chapter 0 counts the operations a pass issues)."""
    if not _takes_cache(type(module)):
        raise RuntimeError(
            f"{type(module).__name__}.forward takes no argument cache= (transformers {transformers.__version__}: "
            f"it was past_key_values before 5.24), so the book's KV cache would stay empty: install the book's pins "
            f"with `pip install -c constraints.txt -e .` (make env does)")


@torch.inference_mode()
def prefill(model: LoadedModel | torch.nn.Module, input_ids: torch.Tensor, logits: str = "last",
            cache: DynamicCache | None = None) -> tuple[torch.Tensor, DynamicCache]:
    """One parallel pass over ``input_ids`` (shape ``(batch, T)``), writing the KV cache.

    ``logits="last"`` computes the LM head for the last position only, shape ``(batch, 1, vocab)``;
    ``"all"`` for every position, ``(batch, T, vocab)``. Pass ``cache`` to continue a cache (chunked
    prefill); otherwise a new one is made. Returns ``(logits, cache)``. Introduced in chapter 1.
    """
    if logits not in ("last", "all"):
        raise ValueError(f"logits must be 'last' or 'all', got {logits!r}")
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must have shape (batch, tokens), got {tuple(input_ids.shape)}")
    module = _module(model)
    cache = new_cache(module) if cache is None else cache
    _check_cache_argument(module)
    check_fits(module, cache.get_seq_length() + input_ids.shape[1])
    out = module(input_ids=input_ids, cache=cache, use_cache=True,
                 logits_to_keep=1 if logits == "last" else 0)
    return out.logits, cache


@dataclass
class DecodeTrace:
    """Greedy tokens chosen by a decode loop and the host time (s, ``time.perf_counter``) each was read.

    ``start`` is the host time the loop began; for a batch, ``token_ids`` holds the first sequence's ids
    (every sequence's id is read back at every step); ``last_token`` is the ``(batch, 1)`` tensor of the
    last chosen ids, to continue from. ``faults`` holds the process's page-fault count at the start and at each
    stamp (:func:`lib.timing.page_faults`)."""

    start: float = 0.0
    token_ids: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    last_token: torch.Tensor | None = None
    faults: list[int] = field(default_factory=list)

    @property
    def step_times(self) -> list[float]:
        """Duration of each step in seconds, from the previous token's readback to this one's."""
        stamps = [self.start, *self.times]
        return [b - a for a, b in zip(stamps, stamps[1:])]

    @property
    def step_faults(self) -> list[int]:
        """Page faults each step took (the pages its new tensors were given fresh); empty if not counted."""
        return [b - a for a, b in zip(self.faults, self.faults[1:])]


@torch.inference_mode()
def decode(model: LoadedModel | torch.nn.Module, last_token: torch.Tensor, cache: DynamicCache,
           steps: int, eos_token_id: int | None = None) -> DecodeTrace:
    """``steps`` cached greedy decode steps after ``last_token`` (shape ``(batch, 1)``).

    Each step runs one position per sequence through every layer against the cache, picks the argmax,
    reads the chosen ids back to the host and only then stamps the time (and the page faults so far, which
    cost about a microsecond). With batch 1 it stops early
    after ``eos_token_id``. Checks the position table first. Introduced in chapter 1; batches in
    chapter 3.
    """
    module = _module(model)
    if steps < 0:
        raise ValueError(f"steps cannot be negative, got {steps}")
    token = last_token.reshape(-1, 1)
    held = cache.layers[0].keys  # a quantized cache holds its keys elsewhere and leaves this one empty
    if cache.get_seq_length() and held.dim() == 4 and held.shape[0] != token.shape[0]:
        raise ValueError(f"the cache holds {cache.layers[0].keys.shape[0]} sequences but "
                         f"{token.shape[0]} last tokens were given")
    check_fits(module, cache.get_seq_length() + 1, max(steps - 1, 0))
    trace = DecodeTrace(start=now(token.device))  # queued work (a prefill) finishes before the clock starts
    trace.faults.append(page_faults())
    _check_cache_argument(module)
    for _ in range(steps):
        logits = module(input_ids=token, cache=cache, use_cache=True).logits
        token = logits[:, -1:].argmax(dim=-1)
        ids = token[:, 0].tolist()  # the host readback a serving loop needs before it can send
        trace.times.append(now())
        trace.faults.append(page_faults())
        trace.token_ids.append(ids[0])
        trace.last_token = token
        if len(ids) == 1 and ids[0] == eos_token_id:
            break
    return trace


@dataclass(frozen=True)
class RequestTrace:
    """One whole request: when it started, every output token id and the host time each was ready.
    Times are seconds on ``time.perf_counter``'s clock."""

    request_time: float
    prefill_done: float
    token_ids: tuple[int, ...]
    token_times: tuple[float, ...]
    prompt_tokens: int


@torch.inference_mode()
def run_request(model: LoadedModel | torch.nn.Module, prompt_ids: torch.Tensor, max_new_tokens: int,
                eos_token_id: int | None = None) -> RequestTrace:
    """Prefill ``prompt_ids`` (``(1, T)``), choose the first token from its last-position logits, then
    decode until ``max_new_tokens`` tokens or ``eos_token_id``.

    TTFT is the prefill plus choosing the first token, not a prefill plus a decode step: the prefill's
    last position already is the first token's distribution. Refuses a request that would run off the
    position table before doing any work. Introduced in chapter 1.
    """
    module = _module(model)
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
    check_fits(module, prompt_ids.shape[1], max_new_tokens)
    device = prompt_ids.device
    request_time = now(device)
    logits, cache = prefill(module, prompt_ids, logits="last")
    prefill_done = now(device)
    first = logits[:, -1:].argmax(dim=-1)
    first_id = first[0, 0].item()
    first_time = now()
    ids, times = [first_id], [first_time]
    if first_id != eos_token_id and max_new_tokens > 1:
        rest = decode(module, first, cache, max_new_tokens - 1, eos_token_id=eos_token_id)
        ids += rest.token_ids
        times += rest.times
    return RequestTrace(request_time, prefill_done, tuple(ids), tuple(times), int(prompt_ids.shape[1]))


@torch.inference_mode()
def greedy_uncached(model: LoadedModel | torch.nn.Module, prompt_ids: torch.Tensor, steps: int) -> list[int]:
    """Greedy tokens by recomputing the whole sequence at every step, with no cache: the slow reference
    the cached loop must agree with (tests). Introduced in chapter 1."""
    module = _module(model)
    check_fits(module, prompt_ids.shape[1], steps)
    ids, out = prompt_ids, []
    for _ in range(steps):
        logits = module(input_ids=ids, use_cache=False).logits
        token = logits[:, -1:].argmax(dim=-1)
        out.append(token[0, 0].item())
        ids = torch.cat([ids, token], dim=1)
    return out
