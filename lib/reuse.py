"""A shared prompt prefix prefilled once and reused: transformers' recipe, and what a paged engine can reuse
(chapter 9).

Many requests start alike (a system prompt, a document); only their ends differ. :func:`prefix_cache`
prefills the shared part once; :func:`first_token_reusing` answers one request from it: it copies that cache
(``copy.deepcopy``, as transformers' documentation does, so the shared cache stays as it was for the next
request) and prefills only the request's own tokens on top. :func:`shared_prefix` counts the tokens two
prompts share, :func:`reusable_tokens` how many of them an engine that caches whole blocks can reuse.
"""

from __future__ import annotations

import copy

import torch
from transformers import DynamicCache

from lib import phases
from lib.models import LoadedModel
from lib.timing import now

__all__ = ["prefix_cache", "first_token_reusing", "first_token_cold", "shared_prefix", "reusable_tokens"]


@torch.inference_mode()
def prefix_cache(model: LoadedModel, prefix_ids: torch.Tensor) -> DynamicCache:
    """The cache of ``prefix_ids`` (``(1, P)``), prefilled once, to be reused by every request that starts with it."""
    return phases.prefill(model, prefix_ids)[1]


@torch.inference_mode()
def first_token_reusing(model: LoadedModel, cache: DynamicCache, suffix_ids: torch.Tensor) -> tuple[int, float]:
    """A request's first token from a shared prefix's ``cache``: the cache copied, then only ``suffix_ids``
    (``(1, S)``, the tokens after the prefix) prefilled on top. Returns (the token, seconds it took)."""
    start = now()
    own = copy.deepcopy(cache)
    logits, _ = phases.prefill(model, suffix_ids, cache=own)
    token = int(logits[:, -1].argmax(dim=-1).item())
    return token, now() - start


@torch.inference_mode()
def first_token_cold(model: LoadedModel, prompt_ids: torch.Tensor) -> tuple[int, float]:
    """The same request's first token with nothing reused: its whole prompt prefilled. (token, seconds)."""
    start = now()
    logits, _ = phases.prefill(model, prompt_ids)
    token = int(logits[:, -1].argmax(dim=-1).item())
    return token, now() - start


def shared_prefix(a: list[int], b: list[int]) -> int:
    """How many leading tokens the token lists ``a`` and ``b`` have in common."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def reusable_tokens(shared: int, block: int, prompt: int | None = None) -> int:
    """Tokens of a ``shared``-token prefix that an engine caching whole blocks of ``block`` tokens can reuse: the
    full blocks only. With ``prompt`` (the request's length), at least one token is left to compute, as vLLM
    leaves it (a request must run one position to get its logits)."""
    if block < 1 or shared < 0:
        raise ValueError(f"need block >= 1 and shared >= 0, got {block} and {shared}")
    usable = shared if prompt is None else min(shared, prompt - 1)
    return usable // block * block
