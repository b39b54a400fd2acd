"""Chunked prefill and the interference between two requests (chapters 4 and 5).

* :func:`chunk_schedule` splits a prompt into the ``(start, end)`` spans a chunked prefill processes.
* :func:`chunked_prefill` runs those spans one after another through one KV cache; its last-position
  logits equal a single full pass's, to rounding.
* :func:`interference` is the smallest shared server there is: stream A is decoding when request B
  arrives with a long prompt, and one process alternates one A decode step with one B prefill chunk
  until B's first token is chosen. Every token's host time is recorded for both, so both are scored with
  :mod:`lib.metrics`, and every B chunk's start and end are kept so plots can mark them.

This is one process alternating two streams, not a serving system with queues: it shows the mechanism
and the trade-off, not what a particular server does.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral

import torch
from transformers import DynamicCache

from lib import phases
from lib.metrics import RequestMetrics, request_metrics
from lib.models import LoadedModel, random_prompt
from lib.timing import now, page_faults


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ValueError(f"{name} must be a whole number of tokens, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be at least 1 token, got {value}")
    return int(value)


def chunk_schedule(prompt_len: int, chunk: int) -> list[tuple[int, int]]:
    """The ``(start, end)`` token spans, end exclusive, that cover a prompt of ``prompt_len`` tokens in
    chunks of at most ``chunk`` tokens, in order. ``chunk >= prompt_len`` gives one span (unchunked).
    Raises ``ValueError`` for a length or chunk below 1 or not a whole number. Introduced in chapter 5."""
    prompt_len = _positive_int("prompt_len", prompt_len)
    chunk = _positive_int("chunk", chunk)
    return [(start, min(start + chunk, prompt_len)) for start in range(0, prompt_len, chunk)]


@torch.inference_mode()
def chunked_prefill(model: LoadedModel | torch.nn.Module, input_ids: torch.Tensor, chunk: int,
                    cache: DynamicCache | None = None) -> tuple[torch.Tensor, DynamicCache]:
    """Prefill ``input_ids`` (``(batch, T)``) one chunk at a time through one cache; return the
    last-position logits ``(batch, 1, vocab)`` and the cache. Checks the position table first."""
    spans = chunk_schedule(input_ids.shape[1], chunk)
    module = model.model if isinstance(model, LoadedModel) else model
    cache = phases.new_cache(module) if cache is None else cache
    phases.check_fits(module, cache.get_seq_length() + input_ids.shape[1])
    logits = None
    for start, end in spans:
        logits, cache = phases.prefill(module, input_ids[:, start:end], logits="last", cache=cache)
    return logits, cache


@dataclass(frozen=True)
class ChunkSpan:
    """One B prefill chunk: its tokens ``[start, end)``, host times (s) it began and ended, and the page faults
    the process took meanwhile (``faults``: pages its new tensors were mapped afresh at, each zeroed on first touch)."""

    start: int
    end: int
    t_start: float
    t_end: float
    faults: int = 0


@dataclass(frozen=True)
class Interference:
    """Both streams of one interference run. Times are host seconds (``time.perf_counter``).

    ``a_metrics``/``b_metrics`` score A's whole stream (from A's request) and B's request (B has one
    token here: its TTFT runs from its arrival to its first token, queueing behind A included).
    ``a_streams`` A sequences decode as one batch and share A's timestamps."""

    a_request_time: float
    a_token_times: tuple[float, ...]
    b_request_time: float
    b_first_token_time: float
    chunks: tuple[ChunkSpan, ...]
    chunk: int
    b_prompt_len: int
    arrival_step: int
    a_streams: int
    b_last_logits: torch.Tensor

    @property
    def a_metrics(self) -> RequestMetrics:
        return request_metrics(self.a_request_time, self.a_token_times)

    @property
    def b_metrics(self) -> RequestMetrics:
        return request_metrics(self.b_request_time, [self.b_first_token_time])

    @property
    def a_gaps_during_b(self) -> tuple[float, ...]:
        """A's gaps that ended after B arrived and before B's first token (s)."""
        times = self.a_token_times
        return tuple(b - a for a, b in zip(times, times[1:])
                     if self.b_request_time < b <= self.b_first_token_time + 1e-12)


@torch.inference_mode()
def interference(model: LoadedModel, *, chunk: int | None = None, b_prompt_len: int = 1000,
                 a_prompt_len: int = 16, a_tokens: int = 40, arrival_step: int = 10, a_streams: int = 1,
                 seed: int = 0) -> Interference:
    """Stream A (``a_streams`` sequences as one batch, ``a_prompt_len`` prompt tokens) decodes
    ``a_tokens`` tokens; after A's token number ``arrival_step``, request B arrives with a
    ``b_prompt_len``-token prompt. Then every iteration runs one A decode step followed by one B
    prefill chunk of at most ``chunk`` tokens (``None``: the whole prompt at once), until B's prefill is
    done and B's first token has been chosen and read back; then A decodes alone to the end.

    Both requests are checked against the position table, and the arguments validated, before any work.
    Returns an :class:`Interference`. Introduced in chapter 5.
    """
    module = model.model if isinstance(model, LoadedModel) else model
    vocab = module.config.vocab_size
    b_prompt_len = _positive_int("b_prompt_len", b_prompt_len)
    chunk = b_prompt_len if chunk is None else _positive_int("chunk", chunk)
    a_tokens = _positive_int("a_tokens", a_tokens)
    a_streams = _positive_int("a_streams", a_streams)
    arrival_step = _positive_int("arrival_step", arrival_step)
    if arrival_step >= a_tokens:
        raise ValueError(f"B must arrive while A is still decoding: arrival_step ({arrival_step}) must be "
                         f"less than a_tokens ({a_tokens})")
    phases.check_fits(module, a_prompt_len, a_tokens)
    phases.check_fits(module, b_prompt_len, 1)
    spans = chunk_schedule(b_prompt_len, chunk)
    device = next(module.parameters()).device
    a_ids = random_prompt(a_prompt_len, vocab, seed=seed, device=device).repeat(a_streams, 1)
    b_ids = random_prompt(b_prompt_len, vocab, seed=seed + 1, device=device)

    a_request = now(device)
    logits, a_cache = phases.prefill(module, a_ids)
    a_token = logits[:, -1:].argmax(dim=-1)
    a_token.tolist()
    a_times = [now()]

    def a_step() -> None:
        nonlocal a_token
        step = phases.decode(module, a_token, a_cache, 1)
        a_token = step.last_token
        a_times.append(step.times[0])

    while len(a_times) < arrival_step:
        a_step()
    b_request = now(device)
    b_cache = phases.new_cache(module)
    chunks, b_logits = [], None
    for start, end in spans:
        if len(a_times) < a_tokens:
            a_step()
        t_start, f_start = now(device), page_faults()
        b_logits, b_cache = phases.prefill(module, b_ids[:, start:end], logits="last", cache=b_cache)
        chunks.append(ChunkSpan(start, end, t_start, now(device), page_faults() - f_start))
    b_logits[:, -1:].argmax(dim=-1).item()  # B's first token chosen and read back
    b_first = now()
    while len(a_times) < a_tokens:
        a_step()
    return Interference(a_request, tuple(a_times), b_request, b_first, tuple(chunks), chunk, b_prompt_len,
                        arrival_step, a_streams, b_logits[:, -1].float().cpu())
