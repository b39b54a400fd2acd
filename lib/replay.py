"""A queue of requests replayed through a scheduler, every pass priced: predicted latencies (chapter 9).

A serving engine's latencies follow from two things: what its scheduler puts into each step, and what each
step costs. :func:`replay` plays a list of :class:`Arrival` s through one scheduler, step by step, and asks
``step_seconds`` what each :class:`Step` costs (:func:`priced_step` prices one from the book's cost model);
it returns one :class:`Replayed` per request, with the time every token
was chosen, so the predictions are scored with :mod:`lib.metrics` like a measured trace.

One algorithm covers both schedulers of chapter 9, as vLLM's and transformers' continuous batching do it:

* every step, each sequence that is decoding gets one token (decodes first, one token of the budget each);
* then prompts are prefilled in arrival order, the one already started first, each piece as large as the
  step's remaining ``budget`` of tokens allows (``None``: no limit, so a prompt is never split);
* a new request joins only at a step's boundary, and only while fewer than ``max_seqs`` are running.

``max_seqs=1, budget=None`` is the **first-come** scheduler (one request at a time, to its last token);
``max_seqs=None`` with a budget is the **token-budget** scheduler (continuous batching with chunked prefill).
A request's first token is chosen by the step that prefills its prompt's last piece; every later token by a
decode step. Times are seconds from the first arrival's clock (whatever ``Arrival.at`` counts from).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lib.costmodel import CostModel, Prediction, Term
from lib.metrics import RequestMetrics, request_metrics

__all__ = ["Arrival", "Step", "Replayed", "replay", "priced_step", "FIRST_COME", "TOKEN_BUDGET"]

FIRST_COME = "first-come"
TOKEN_BUDGET = "token budget"


@dataclass(frozen=True)
class Arrival:
    """One request: it arrives at ``at`` (s), with ``prompt`` prompt tokens, and wants ``output`` tokens (>= 1)."""

    at: float
    prompt: int
    output: int

    def __post_init__(self) -> None:
        if not (math.isfinite(self.at) and self.prompt >= 1 and self.output >= 1):
            raise ValueError(f"an arrival needs a finite time, prompt >= 1 and output >= 1, got {self}")


@dataclass(frozen=True)
class Step:
    """What one step runs: ``pieces``, the ``(tokens, past)`` of each prompt piece it prefills (``past`` tokens of
    that prompt already cached), and ``contexts``, the cached tokens of each sequence it decodes one token for."""

    pieces: tuple[tuple[int, int], ...] = ()
    contexts: tuple[int, ...] = ()

    @property
    def tokens(self) -> int:
        """Tokens through the weights in this step: every piece's plus one per decoding sequence."""
        return sum(t for t, _ in self.pieces) + len(self.contexts)


@dataclass(frozen=True)
class Replayed:
    """One request as the replay served it: its arrival, the start of the step that began its prefill, and
    when each of its tokens was chosen (s)."""

    arrival: Arrival
    started: float
    token_times: tuple[float, ...]

    @property
    def wait(self) -> float:
        """Seconds in the queue: from arrival to the start of its first prefill step."""
        return self.started - self.arrival.at

    @property
    def prefill(self) -> float:
        """Seconds from its first prefill step's start to its first token (every step its pieces shared)."""
        return self.token_times[0] - self.started

    def metrics(self) -> RequestMetrics:
        """TTFT, TPOT and the gaps of this request (:mod:`lib.metrics`)."""
        return request_metrics(self.arrival.at, self.token_times)


@dataclass
class _Running:
    index: int
    arrival: Arrival
    started: float
    prefilled: int = 0
    tokens: list[float] | None = None


def replay(arrivals: Sequence[Arrival], step_seconds: Callable[[Step], float], *, budget: int | None = None,
           max_seqs: int | None = None) -> list[Replayed]:
    """Serve ``arrivals`` step by step (the module's docstring says how) and return one :class:`Replayed` per
    arrival, in the order given. ``budget``: tokens at most in one step (``None``: no limit); ``max_seqs``:
    requests at most running at once (``None``: no limit). ``step_seconds(step)`` is a step's time (s)."""
    if budget is not None and budget < 1:
        raise ValueError(f"budget must be at least 1 token or None, got {budget}")
    if max_seqs is not None and max_seqs < 1:
        raise ValueError(f"max_seqs must be at least 1 or None, got {max_seqs}")
    order = sorted(range(len(arrivals)), key=lambda i: (arrivals[i].at, i))
    done: dict[int, Replayed] = {}
    running: list[_Running] = []
    t = arrivals[order[0]].at if order else 0.0
    nxt = 0
    while len(done) < len(arrivals):
        if not running and arrivals[order[nxt]].at > t:
            t = arrivals[order[nxt]].at  # idle until the next arrival
        left = math.inf if budget is None else budget
        decoding = [r for r in running if r.tokens]
        decoding = decoding[:int(min(len(decoding), left))]
        left -= len(decoding)
        pieces: list[tuple[_Running, int]] = []
        for r in [r for r in running if not r.tokens]:  # prompts already started go first
            if left < 1:
                break
            take = int(min(r.arrival.prompt - r.prefilled, left))
            pieces.append((r, take))
            left -= take
        while left >= 1 and nxt < len(order) and arrivals[order[nxt]].at <= t and (
                max_seqs is None or len(running) < max_seqs):
            i = order[nxt]
            nxt += 1
            r = _Running(i, arrivals[i], started=t)
            running.append(r)
            take = int(min(r.arrival.prompt, left))
            pieces.append((r, take))
            left -= take
        step = Step(tuple((take, r.prefilled) for r, take in pieces),
                    tuple(r.arrival.prompt + len(r.tokens) - 1 for r in decoding))
        if not step.pieces and not step.contexts:
            raise RuntimeError(f"the replay stalled at t={t} with {len(running)} running: a budget of {budget} "
                               "tokens leaves no room")  # cannot happen with budget >= 1; a guard, not a path
        t += float(step_seconds(step))
        for r in decoding:
            r.tokens.append(t)
        for r, take in pieces:
            r.prefilled += take
            if r.prefilled == r.arrival.prompt:
                r.tokens = [t]
        for r in [r for r in running if r.tokens and len(r.tokens) == r.arrival.output]:
            done[r.index] = Replayed(r.arrival, r.started, tuple(r.tokens))
            running.remove(r)
    return [done[i] for i in range(len(arrivals))]


def priced_step(cost: CostModel, step: Step) -> Prediction:
    """One step of a continuous-batching engine over a paged cache, priced term by term as
    :class:`lib.costmodel.CostModel` prices a pass: every row of the step goes through the weights in one pass
    (the block matrices at all its rows, the LM head at each sequence's last position, each at the rate chapter
    0 measured for that many rows or, where one row is quicker, the weights streamed once); each prompt piece
    attends causally over itself and its cached part; each decoding sequence reads its cache; the rest of the
    pass is chapter 0's dispatch of a pass of that many rows: an eager pass issues the same operations whatever
    its batch, and its small kernels each run over every row, so a step of ``b`` decoding sequences is priced as
    chapter 0's dispatch of a ``b``-token prefill (chapter 0 measures some models' decode dispatch at one
    sequence only). A paged cache is
    written in place, so, unlike ``DynamicCache``, nothing is copied. A step of one whole prompt is
    :meth:`CostModel.prefill`; one of a single decoding sequence is :meth:`CostModel.decode` less its cache
    copy."""
    if not step.pieces and not step.contexts:
        raise ValueError("a step needs at least one prompt piece or one decoding sequence")
    if any(t < 1 or p < 0 for t, p in step.pieces) or any(c < 0 for c in step.contexts):
        raise ValueError(f"pieces need tokens >= 1 and past >= 0, contexts >= 0; got {step}")
    c, args = cost.ceilings, (cost.model, cost.dtype, cost.threads)
    terms = []
    for kernel, name, rows in (("blocks", "block matrices", step.tokens),
                               ("head", "LM head", len(step.pieces) + len(step.contexts))):
        one, many = cost.kernel(kernel, 1), cost.kernel(kernel, rows)
        t, how = (one, "its bytes, streamed once") if rows == 1 or many.best <= one.best else (many, f"F({rows} rows)")
        terms.append(Term(name, t.best, t.median, "memory" if t is one else "compute", how))
    best = median = 0.0
    for tokens, past in step.pieces:
        a = c.attention_prefill(*args, tokens) * (1 + 2 * past / tokens)
        best, median = best + a.best, median + a.median
    if step.contexts:
        a = c.attention_decode(*args, sum(step.contexts) * cost.shape.kv_bytes_per_token)
        best, median = best + a.best, median + a.median
    terms.append(Term("attention", best, median, "compute" if step.pieces else "memory",
                      f"{len(step.pieces)} prompt pieces attending causally, {len(step.contexts)} caches read"))
    lone = not step.pieces and len(step.contexts) == 1
    d = c.dispatch(*args, "decode", 1, positions=step.contexts[0]) if lone else c.dispatch(*args, "prefill", step.tokens)
    terms.append(Term("dispatch", d.best, d.median, "dispatch",
                      f"chapter 0's hollowed {'decode step' if lone else f'pass of {step.tokens} rows'}"))
    return Prediction("step", step.tokens, len(step.pieces) + len(step.contexts), sum(step.contexts), tuple(terms))
