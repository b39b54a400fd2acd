"""Prefill and decode on separate workers, one core each, the cache handed over in shared memory (chapter 9).

Chapter 5's scenario (stream A decoding when request B arrives with a long prompt), served the way DistServe,
Splitwise and Mooncake serve it, in miniature: a **decode worker** process pinned to one core decodes A; a
**prefill worker** process pinned to another core waits for B. When A has its ``arrival_step``-th token, B
arrives: the prefill worker prefills B's prompt, chooses B's first token, and writes B's cache into a buffer
of shared memory both processes mapped at start (``torch``'s shared storage, touched once by each so that no
page is first mapped during the hand-over). The decode worker, between two of A's steps, reads the cache from
that buffer into its own tensors: from then on B could decode there. Each worker runs one torch thread.

:func:`separated` runs it and returns a :class:`Separated` per run, with every time on one clock
(``time.perf_counter`` is the system's monotonic clock on Linux, the same in every process). The decode worker
also decodes B's second token from the cache it read, and the prefill worker from its own: the two must agree,
or the hand-over lost something. Linux only (``os.sched_setaffinity``).
"""

from __future__ import annotations

import os
import queue
import time
from dataclasses import dataclass

import torch

from lib.metrics import RequestMetrics, request_metrics
from lib.timing import page_faults

__all__ = ["Separated", "separated", "usable_cores", "separation_unavailable"]

_START_TIMEOUT_S = 300.0


def usable_cores() -> list[int]:
    """The cores this process may run on, in order (``os.sched_getaffinity``); every core elsewhere."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


def separation_unavailable() -> str | None:
    """Why two pinned workers cannot run here, in one sentence, or ``None`` when they can."""
    if not hasattr(os, "sched_setaffinity"):
        return "pinning a process to a core needs Linux's sched_setaffinity, which this system lacks"
    if len(usable_cores()) < 2:
        return f"two workers need two cores, and this process may use {len(usable_cores())}"
    return None


@dataclass(frozen=True)
class Separated:
    """One run of the two workers. Times are seconds on ``time.perf_counter``'s clock.

    ``a_request_time``/``a_token_times``: A's request and every token (the decode worker); ``b_arrival``: when B
    arrived (A's ``arrival_step``-th token); ``b_prefill_start``: when the prefill worker began; ``b_first_token``:
    B's first token chosen; ``write_s``: the prefill worker copying the cache into shared memory; ``handed``: when
    it was there; ``read_s``: the decode worker copying it out, between A's steps, into new tensors;
    ``reread_s``: the same copy again after A's stream, into those tensors (their pages mapped by then), to tell
    the copy from the mapping of new pages; ``read_after``: the A token
    that preceded the read; ``write_faults``, ``read_faults``, ``reread_faults``: the page faults each copy took in
    its worker (:func:`lib.timing.page_faults`); ``cache_bytes``: the cache's bytes; ``same_next_token``: whether
    both workers decode the same second token of B from their copies; ``cores``: (prefill core, decode core)."""

    a_request_time: float
    a_token_times: tuple[float, ...]
    b_arrival: float
    b_prefill_start: float
    b_first_token: float
    write_s: float
    handed: float
    read_s: float
    reread_s: float
    read_after: int
    cache_bytes: int
    same_next_token: bool
    cores: tuple[int, int]
    write_faults: int = 0
    read_faults: int = 0
    reread_faults: int = 0

    @property
    def a_metrics(self) -> RequestMetrics:
        return request_metrics(self.a_request_time, self.a_token_times)

    @property
    def b_ttft(self) -> float:
        """B's TTFT: from its arrival to its first token (s), as chapter 5 counts it."""
        return self.b_first_token - self.b_arrival


def _pin(core: int) -> None:
    os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)


def _prompt(model, n: int, seed: int) -> torch.Tensor:
    from lib.models import random_prompt

    return random_prompt(n, model.model.config.vocab_size, seed=seed)


def _to_buffer(cache, buffer: torch.Tensor) -> None:
    """Every layer's keys then values, one after another, into the flat shared ``buffer``."""
    offset = 0
    for layer in cache.layers:
        for part in (layer.keys, layer.values):
            buffer[offset:offset + part.numel()].view(part.shape).copy_(part)
            offset += part.numel()


def _from_buffer(lm, buffer: torch.Tensor, like) -> object:
    """A new cache for ``lm`` holding what :func:`_to_buffer` wrote, shaped as ``like``'s layers (same model)."""
    from lib import phases

    cache, layers = phases.new_cache(lm), len(like.layers)
    batch, heads, _, head_dim = like.layers[0].keys.shape
    per = batch * heads * head_dim
    length = buffer.numel() // (2 * layers * per)
    for i in range(layers):
        base = 2 * i * per * length
        keys = buffer[base:base + per * length].view(batch, heads, length, head_dim)
        values = buffer[base + per * length:base + 2 * per * length].view(batch, heads, length, head_dim)
        cache.update(keys, values, i)  # copied out of the shared buffer into this worker's own tensors
    return cache


@torch.inference_mode()
def _prefill_worker(name, core, buffer, b_prompt_len, seed, first_id, ready, arrived, handed, results) -> None:
    """One round per entry of ``arrived``: wait for B, prefill it, hand its cache over (``handed``)."""
    from lib import phases
    from lib.models import load_model

    try:
        _pin(core)
        lm = load_model(name, torch.device("cpu"), torch.float32)
        b_ids = _prompt(lm, b_prompt_len, seed + 1)  # the prompt chapter 5's B gets for this seed
        phases.prefill(lm, b_ids[:, :16])  # warm-up
        buffer.zero_()  # map every page of the buffer for writing now, not during the hand-over
        ready.set()
        for b_arrived, b_handed in zip(arrived, handed):
            b_arrived.wait()
            start = time.perf_counter()
            logits, cache = phases.prefill(lm, b_ids)
            token = logits[:, -1:].argmax(dim=-1)
            first_id.value = int(token.item())
            faults, first = page_faults(), time.perf_counter()
            _to_buffer(cache, buffer)
            done, faults = time.perf_counter(), page_faults() - faults
            b_handed.set()
            results.put(("prefill", dict(b_prefill_start=start, b_first_token=first, write_s=done - first,
                                         write_faults=faults,
                                         handed=done, cache_bytes=phases.cache_bytes(cache),
                                         b_next_id=phases.decode(lm, token, cache, 1).token_ids[0])))
    except BaseException as error:  # the parent reports it; a worker must not leave its partner waiting
        results.put(("error", f"prefill worker: {type(error).__name__}: {error}"))
        ready.set()
        for event in handed:
            event.set()


@torch.inference_mode()
def _decode_worker(name, core, buffer, a_prompt_len, a_tokens, arrival_step, seed, first_id, ready, go, arrived,
                   handed, results) -> None:
    """One round per entry of ``go``: decode A, announce B (``arrived``), read B's cache once it is handed over."""
    from lib import phases
    from lib.models import load_model

    try:
        _pin(core)
        lm = load_model(name, torch.device("cpu"), torch.float32)
        a_ids = _prompt(lm, a_prompt_len, seed)
        logits, cache = phases.prefill(lm, a_ids)  # warm-up
        phases.decode(lm, logits[:, -1:].argmax(dim=-1), cache, 2)
        float(buffer.sum())  # map every page of the buffer now
        del _from_buffer(lm, buffer, cache).layers  # a warm-up read (each round's read still maps new pages: chapter 9)
        ready.set()
        for a_go, b_arrived, b_handed in zip(go, arrived, handed):
            a_go.wait()
            results.put(("decode", _decode_round(lm, buffer, a_ids, a_tokens, arrival_step, first_id, b_arrived,
                                                 b_handed)))
    except BaseException as error:
        results.put(("error", f"decode worker: {type(error).__name__}: {error}"))
        ready.set()
        for event in arrived:
            event.set()


def _decode_round(lm, buffer, a_ids, a_tokens, arrival_step, first_id, arrived, handed) -> dict:
    from lib import phases

    request = time.perf_counter()
    logits, cache = phases.prefill(lm, a_ids)
    token = logits[:, -1:].argmax(dim=-1)
    token.item()
    times, arrival, read_s, read_after, b_cache, read_faults = [time.perf_counter()], None, None, None, None, 0

    def read() -> None:
        nonlocal b_cache, read_s, read_after, read_faults
        faults, start = page_faults(), time.perf_counter()
        b_cache = _from_buffer(lm, buffer, cache)
        read_s, read_after, read_faults = time.perf_counter() - start, len(times), page_faults() - faults

    while len(times) < a_tokens:
        if len(times) == arrival_step and arrival is None:
            arrival = time.perf_counter()
            arrived.set()
        if b_cache is None and handed.is_set():
            read()  # between two of A's steps: it lengthens one of A's gaps
        step = phases.decode(lm, token, cache, 1)
        token = step.last_token
        times.append(step.times[0])
    if b_cache is None:  # B's prefill outlasted A's stream: the cache is read after A's last token
        if not handed.wait(_START_TIMEOUT_S):
            raise TimeoutError(f"no cache was handed over within {_START_TIMEOUT_S:.0f} s")
        read()
    faults, start = page_faults(), time.perf_counter()  # after A's stream: the same read again, into the same tensors
    offset = 0
    for layer in b_cache.layers:
        for part in (layer.keys, layer.values):
            part.copy_(buffer[offset:offset + part.numel()].view(part.shape))
            offset += part.numel()
    reread_s, reread_faults = time.perf_counter() - start, page_faults() - faults
    b_next = phases.decode(lm, torch.tensor([[first_id.value]]), b_cache, 1).token_ids[0]
    return dict(a_request_time=request, a_token_times=tuple(times), b_arrival=arrival, read_s=read_s,
                reread_s=reread_s, read_after=read_after, b_next_id=b_next, read_faults=read_faults,
                reread_faults=reread_faults)


def separated(name: str, *, b_prompt_len: int = 1000, a_prompt_len: int = 16, a_tokens: int = 40,
              arrival_step: int = 10, seed: int = 0, runs: int = 1, cores: tuple[int, int] | None = None,
              timeout_s: float = _START_TIMEOUT_S) -> list[Separated]:
    """Chapter 5's scenario on two pinned workers (the module's docstring says how): model ``name`` (one of
    the book's, fp32, CPU), B's prompt of ``b_prompt_len`` random tokens (seed ``seed + 1``, as chapter 5's), A's
    of ``a_prompt_len`` (seed ``seed``) decoding ``a_tokens`` tokens, B arriving after A's ``arrival_step``-th.
    ``runs`` rounds, the workers started (and the model loaded) once; one :class:`Separated` each.
    ``cores``: (prefill core, decode core), by default the first two this process may use. Raises
    ``RuntimeError`` naming the worker that failed, or the wait that ran past ``timeout_s``."""
    why = separation_unavailable()
    if why:
        raise RuntimeError(f"the two-worker experiment cannot run here: {why}")
    if not 1 <= arrival_step < a_tokens:
        raise ValueError(f"B must arrive while A decodes: need 1 <= arrival_step < a_tokens, got {arrival_step} and "
                         f"{a_tokens}")
    if runs < 1:
        raise ValueError(f"runs must be at least 1, got {runs}")
    from lib import phases
    from lib.models import load_model

    cores = tuple(cores or usable_cores()[:2])
    lm = load_model(name, torch.device("cpu"), torch.float32)  # converts and caches it once, before the workers
    phases.check_fits(lm, a_prompt_len, a_tokens)
    phases.check_fits(lm, b_prompt_len, 2)
    config = lm.model.config
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    buffer = torch.zeros(2 * config.num_hidden_layers * heads * head_dim * b_prompt_len).share_memory_()
    del lm
    mp = torch.multiprocessing.get_context("spawn")
    ready_p, ready_d = mp.Event(), mp.Event()
    go, arrived, handed = ([mp.Event() for _ in range(runs)] for _ in range(3))
    first_id, results = mp.Value("q", -1), mp.Queue()
    workers = [mp.Process(target=_prefill_worker, daemon=True,
                          args=(name, cores[0], buffer, b_prompt_len, seed, first_id, ready_p, arrived, handed,
                                results)),
               mp.Process(target=_decode_worker, daemon=True,
                          args=(name, cores[1], buffer, a_prompt_len, a_tokens, arrival_step, seed, first_id, ready_d,
                                go, arrived, handed, results))]
    started = []

    def alive_or_fail(what: str, deadline: float, waiting_for=("prefill", "decode")) -> None:
        """Fail when a worker whose answer is still awaited has stopped (one that has answered its last round
        exits normally), or when the wait has run past its deadline."""
        dead = [f"{kind} worker (exit code {w.exitcode})" for kind, w in zip(("prefill", "decode"), started)
                if kind in waiting_for and not w.is_alive()]
        if dead:
            raise RuntimeError(f"{' and '.join(dead)} stopped before {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the two workers did not finish {what} within {timeout_s:.0f} s")

    try:
        for w in workers:
            w.start()
            started.append(w)
        deadline = time.monotonic() + timeout_s
        while not (ready_p.wait(0.2) and ready_d.wait(0.2)):
            alive_or_fail("loading the model", deadline)
        out = []
        for a_go in go:
            a_go.set()
            got: dict[str, dict] = {}
            deadline = time.monotonic() + timeout_s
            while len(got) < 2:
                try:
                    kind, value = results.get(timeout=0.5)
                except queue.Empty:
                    alive_or_fail("a run", deadline, [k for k in ("prefill", "decode") if k not in got])
                    continue
                if kind == "error":
                    raise RuntimeError(value)
                got[kind] = value
            p, d = got["prefill"], got["decode"]
            out.append(Separated(
                a_request_time=d["a_request_time"], a_token_times=d["a_token_times"], b_arrival=d["b_arrival"],
                b_prefill_start=p["b_prefill_start"], b_first_token=p["b_first_token"], write_s=p["write_s"],
                handed=p["handed"], read_s=d["read_s"], reread_s=d["reread_s"], read_after=d["read_after"],
                cache_bytes=p["cache_bytes"], same_next_token=d["b_next_id"] == p["b_next_id"], cores=cores,
                write_faults=p["write_faults"], read_faults=d["read_faults"], reread_faults=d["reread_faults"]))
        return out
    finally:
        for w in started:
            w.join(timeout=10)
            if w.is_alive():
                w.kill()
                w.join()
