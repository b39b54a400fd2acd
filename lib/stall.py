"""Chapter 5's stall through a server: a newcomer's long prompt arrives while another stream decodes
(chapter 7).

:func:`stall_experiment` runs it: stream A decodes, and once A's ``arrive_after``-th chunk has arrived, request
B (a long prompt, one output token) is sent on a second connection. :func:`stall_case` then reads, from the
two traces alone, what the server did with B's prefill while A streamed. It takes A's **ordinary gap** (the
median gap between A's chunks before B arrived) and looks at the gaps of A that overlap B's wait (from B's
arrival to B's first token). A gap is **elevated** when it is more than ``factor`` times the ordinary gap; its
**excess** is what it holds beyond the ordinary gap. Exactly one case holds:

* ``"after_a"``: B arrived when A had already sent its last chunk, so nothing was measured (A's reply was
  shorter than ``arrive_after`` chunks).
* ``"one_stall"``: B's prefill ran inside A's stream as one stall: one elevated gap holds at least
  ``one_share`` of A's whole excess (with B's whole prompt in one step, A's worst gap is close to B's TTFT).
* ``"pieces"``: B's prefill ran in pieces interleaved with A: several elevated gaps, none holding
  ``one_share`` of the excess; their excesses add up to about B's prefill.
* ``"queued"``: B waited until A finished: no gap of A is elevated and B's first token came after A's last.
* ``"undisturbed"``: B was served while A streamed, and no gap of A is elevated (a prefill too short, or a
  machine with room to spare, for A to notice).

A failed request, an A with fewer than two token chunks (:attr:`lib.client.Trace.chunk_times`) or a B with none
gives ``"not_measured"``. Plain standard library.

Introduced in chapter 7 (over the wire).
"""

from __future__ import annotations

import itertools
import statistics
import threading
import time
from dataclasses import dataclass

from lib.client import REQUEST_TIMEOUT_S, Event, Trace, stream_chat

__all__ = ["CASES", "StallCase", "stall_case", "stall_experiment"]

CASES = ("after_a", "one_stall", "pieces", "queued", "undisturbed", "not_measured")


@dataclass(frozen=True)
class StallCase:
    """What happened to A while B's prompt was prefilled. Times in seconds.

    ``case``: one of :data:`CASES`; ``ordinary_gap``: A's median gap before B arrived; ``worst_gap``: A's
    longest gap overlapping B's wait; ``elevated``: how many of those gaps exceeded ``factor`` x the ordinary
    gap; ``excess``: the time those gaps held beyond the ordinary gap, summed; ``worst_share``: the share of
    ``excess`` in the largest one; ``b_ttft``: B's TTFT; ``b_after_a``: B's first token came after A's last
    chunk. Unmeasured fields are ``nan``.
    """

    case: str
    ordinary_gap: float = float("nan")
    worst_gap: float = float("nan")
    elevated: int = 0
    excess: float = float("nan")
    worst_share: float = float("nan")
    b_ttft: float = float("nan")
    b_after_a: bool = False


def stall_case(a: Trace, b: Trace, factor: float = 2.0, one_share: float = 0.8) -> StallCase:
    """Which case of this module's docstring the traces ``a`` and ``b`` of :func:`stall_experiment` show,
    with the numbers that decide it. Introduced in chapter 7."""
    chunks = a.chunk_times
    if not (a.ok and b.ok) or len(chunks) < 2 or not b.chunk_times:
        return StallCase("not_measured")
    b_first = b.chunk_times[0]
    b_ttft = b_first - b.sent
    b_after_a = b_first > chunks[-1]
    if b.sent >= chunks[-1]:
        return StallCase("after_a", b_ttft=b_ttft, b_after_a=True)
    gaps = list(itertools.pairwise(chunks))
    before = [end - start for start, end in gaps if end <= b.sent]
    during = [end - start for start, end in gaps if end > b.sent and start < b_first]
    others = [end - start for start, end in gaps if not (end > b.sent and start < b_first)]
    ordinary = statistics.median(before or others or during)
    elevated = [g - ordinary for g in during if g > factor * ordinary]
    worst = max(during, default=float("nan"))
    excess = sum(elevated)
    share = max(elevated) / excess if elevated else float("nan")
    if not elevated:
        case = "queued" if b_after_a else "undisturbed"
    elif share >= one_share:
        case = "one_stall"
    else:
        case = "pieces"
    return StallCase(case, ordinary, worst, len(elevated), excess, share, b_ttft, b_after_a)


def stall_experiment(base_url: str, model: str, a_messages: list[dict], a_tokens: int, b_messages: list[dict],
                     arrive_after: int, *, extra: dict | None = None,
                     timeout_s: float = REQUEST_TIMEOUT_S) -> tuple[Trace, Trace]:
    """Chapter 5's experiment through a server: stream A decodes ``a_tokens`` tokens; as soon as A's
    ``arrive_after``-th token chunk has arrived, request B (``b_messages``, one output token) is sent on a
    second connection. Returns ``(a, b)``; B's ``sent`` marks its arrival on A's clock, so A's gaps after it
    show the stall (:func:`stall_case` reads them). If A ends before it reaches ``arrive_after`` chunks, B is
    sent when A ends. Every wait is bounded: each request by :func:`lib.client.stream_chat`'s bounds (a
    stalled server fails A within :data:`lib.client.STALL_TIMEOUT_S`, which releases B), ``timeout_s`` each
    request as a whole. Introduced in chapter 7."""
    if arrive_after < 1 or arrive_after >= a_tokens:
        raise ValueError(f"arrive_after must be from 1 to a_tokens - 1 = {a_tokens - 1}, got {arrive_after}")
    reached = threading.Event()
    seen = [0]

    def count(event: Event) -> None:
        if event.choices and not event.is_role_chunk and not event.is_bare_finish:  # a token, as Trace counts them
            seen[0] += 1
            if seen[0] >= arrive_after:
                reached.set()

    box: list[Trace] = []

    def run_a() -> None:
        box.append(stream_chat(base_url, model, a_messages, a_tokens, request_id=0, timeout_s=timeout_s,
                               extra=extra, label="A", on_event=count))
        reached.set()

    thread = threading.Thread(target=run_a, daemon=True)
    thread.start()
    reached.wait(timeout_s)
    b = stream_chat(base_url, model, b_messages, 1, request_id=1, timeout_s=timeout_s, extra=extra, label="B")
    thread.join(timeout_s)
    if not box:
        return Trace(0, b.sent, time.perf_counter(), error="timeout: stream A did not finish", label="A"), b
    return box[0], b
