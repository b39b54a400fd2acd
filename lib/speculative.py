"""More tokens per pass: speculative decoding by prompt lookup, counted and predicted; two greedy outputs compared.

Prompt lookup (transformers' ``generate(prompt_lookup_num_tokens=k)``) guesses the next ``k`` tokens by finding
the last few generated tokens earlier in the prompt and copying what followed them; one pass of the model over
the guesses checks them all, keeps the ones greedy decoding would have chosen, and adds its own next token. With
no match it guesses nothing and the pass is an ordinary one-token step. So the answer is greedy decoding's,
token for token, and its time is the sum of the passes it made (:func:`counted_passes` records them):
:func:`predicted_seconds` prices each pass by its length from passes timed alone. Introduced in chapter 8.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import torch

__all__ = ["counted_passes", "acceptance_length", "predicted_seconds", "tokens_agreeing"]


@contextmanager
def counted_passes(model: torch.nn.Module) -> Iterator[list[int]]:
    """Inside the block, every forward pass of ``model`` appends the number of positions it fed (the prompt for
    the first pass of a ``generate``, then 1 for a plain step, 1 + the guesses for a checking step) to the list
    it yields."""
    lengths: list[int] = []

    def record(_module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            ids = kwargs["inputs_embeds"]
        lengths.append(int(ids.shape[1]))

    handle = model.register_forward_pre_hook(record, with_kwargs=True)
    try:
        yield lengths
    finally:
        handle.remove()


def acceptance_length(new_tokens: int, pass_lengths: Sequence[int]) -> float:
    """Tokens gained per pass (AIPerf's mean acceptance length: 1 + the guesses accepted, averaged over the
    passes): ``new_tokens`` over the passes that made them. The first pass (the prompt, with guesses when the
    prompt already matches) gains its token like any other. Plain greedy decoding scores exactly 1."""
    if new_tokens < 1 or not pass_lengths:
        raise ValueError(f"acceptance length needs new tokens and passes, got {new_tokens} tokens over "
                         f"{len(pass_lengths)} passes")
    return new_tokens / len(pass_lengths)


def predicted_seconds(pass_lengths: Sequence[int], seconds_of: Mapping[int, float]) -> float:
    """The time of a generation's passes, each priced by its length: ``seconds_of[n]`` is the measured time of one
    pass feeding ``n`` positions (the prompt's own lengths for the first pass; 1 to k + 1 over a cache of the run's
    middle context for the others). Raises ``ValueError`` naming a length not priced."""
    missing = sorted(set(pass_lengths) - set(seconds_of))
    if missing:
        raise ValueError(f"no measured pass of {missing} positions; measured: {sorted(seconds_of)}")
    return sum(seconds_of[n] for n in pass_lengths)


def tokens_agreeing(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens two answers share before their first difference."""
    n = 0
    for x, y in zip(a, b):
        if int(x) != int(y):
            break
        n += 1
    return n
