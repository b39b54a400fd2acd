"""One set of traces scored the way five tools define TTFT, ITL, TPOT and goodput (chapter 7).

The same streamed requests are quoted with different numbers depending on which tool scored them, because
the tools do not agree on what the words mean. Each function below re-implements one tool's definitions on
the events a :class:`lib.client.Trace` recorded (every server-sent event, stamped when its line was
read), citing the code it follows. The client's timestamps are the same for all of them; only the
definitions differ.

* ``book`` (``lib.metrics``, chapter 1): TTFT ends at the first token chunk (every choice after the role
  chunk, empty content included: ``lib.client``); the gaps are between tokens, a chunk carrying several
  tokens giving gaps of 0 (``lib.client``'s attribution rule); TPOT is
  ``(t_last - t_first) / (n - 1)``; goodput is the fraction of requests meeting every objective (a one-token
  request judged on TTFT alone).
* ``vllm``: vLLM's ``vllm bench serve`` (``vllm/benchmarks/lib/endpoint_request_func.py``, the
  chat-completions request function, and ``vllm/benchmarks/serve.py: calculate_metrics``, vLLM 0.32.0).
  TTFT ends at the first event that carries ``choices``, **even one with no content** (a server that sends
  its ``role`` chunk before the prefill gets a TTFT of a few milliseconds); ITL is the list of gaps between
  consecutive ``choices`` events (chunks, not tokens); latency ends at the last ``choices`` event; the output
  length is ``usage.completion_tokens`` when the usage arrives in an event *without* ``choices``, else the
  tokenizer's count of the text; TPOT per request is ``(latency - TTFT) / (output_len - 1)`` for
  ``output_len > 1``; goodput counts requests meeting the ``ttft``, ``tpot`` (0 for a one-token request)
  and ``e2el`` objectives and divides by the run's duration: **requests per second**, not a fraction.
* ``guidellm``: GuideLLM's ``GenerativeRequestStats`` (``src/guidellm/schemas/request_stats.py``) and
  ``GoodputSLO`` (``src/guidellm/schemas/benchmark/goodput.py``). ``time_per_output_token_ms`` is
  ``(t_last - t_start) / output_tokens``: it **includes TTFT**; ``inter_token_latency_ms`` is
  ``(t_last - t_first) / (output_tokens - 1)``, the book's TPOT; goodput compares ``tpot`` objectives with
  ``inter_token_latency_ms`` and leaves a one-token request undetermined (out of the count).
* ``llmperf``: Ray's LLMPerf (``src/llmperf/ray_clients/openai_chat_completions_client.py`` and
  ``token_benchmark_ray.py``). TTFT ends at the first chunk with content; ``inter_token_latency`` is the sum
  of the times to each content chunk, **TTFT included**, divided by the number of output tokens (re-counted
  with a tokenizer from the text), which is ``(t_last_chunk - t_start) / n``; end-to-end runs to the end of
  the stream. It defines no goodput.
* ``genai-perf``: NVIDIA GenAI-Perf (``genai-perf/genai_perf/profile_data_parser/llm_profile_data_parser.py``
  in ``triton-inference-server/perf_analyzer``). Responses without content are dropped; TTFT ends at the
  first remaining one and request latency at the last; ``inter_token_latency`` is
  ``(request_latency - TTFT) / (output_tokens - 1)``, **the book's TPOT** under another name, with the
  output tokens re-counted by a tokenizer. That parser defines no goodput.

All times are seconds in and out; failed traces are left out of every latency, as every tool does, and
counted in ``failed``. Introduced in chapter 7.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from lib import metrics
from lib.client import Trace

__all__ = ["CONVENTIONS", "SOURCES", "per_request", "summary", "compare", "meets", "bootstrap_fraction"]

CONVENTIONS = ("book", "vllm", "guidellm", "llmperf", "genai-perf")

SOURCES = {
    "book": "lib/metrics.py and lib/client.py (this book)",
    "vllm": "vllm 0.32.0: vllm/benchmarks/lib/endpoint_request_func.py, vllm/benchmarks/serve.py calculate_metrics",
    "guidellm": "guidellm: src/guidellm/schemas/request_stats.py, src/guidellm/schemas/benchmark/goodput.py",
    "llmperf": "llmperf: src/llmperf/ray_clients/openai_chat_completions_client.py, token_benchmark_ray.py",
    "genai-perf": "perf_analyzer: genai-perf/genai_perf/profile_data_parser/llm_profile_data_parser.py",
}

#: What each tool calls its numbers, in the order of the columns ``ttft``, ``itl``, ``tpot``.
NAMES = {
    "book": ("TTFT", "ITL (every gap between tokens)", "TPOT (t_last - t_first) / (n - 1)"),
    "vllm": ("TTFT", "ITL (every gap between chunks)", "TPOT (latency - TTFT) / (n - 1)"),
    "guidellm": ("time_to_first_token_ms", "inter_token_latency_ms (t_last - t_first) / (n - 1)",
                 "time_per_output_token_ms (t_last - t_start) / n, TTFT included"),
    "llmperf": ("ttft_s", "inter_token_latency_s (t_last - t_start) / n, TTFT included", None),
    "genai-perf": ("time_to_first_token", "inter_token_latency (latency - TTFT) / (n - 1)", None),
}


def _check(convention: str) -> None:
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown convention {convention!r}; known: {', '.join(CONVENTIONS)}")


def _row(trace: Trace, convention: str, count_tokens: Callable[[str], int] | None) -> dict:
    """One request scored by ``convention``: ttft, itl (list), tpot, e2e (seconds; NaN where undefined),
    n (output tokens as that tool counts them)."""
    nan = float("nan")
    retokenized = count_tokens(trace.text) if count_tokens else trace.n_tokens
    if convention == "book":
        m = trace.metrics()
        return dict(ttft=m.ttft, itl=list(m.gaps), tpot=nan if m.tpot is None else m.tpot, e2e=m.e2e, n=m.n_tokens)
    if convention == "vllm":
        timed = [e.time for e in trace.events if e.choices]
        usage = next((e.usage for e in trace.events if e.usage and not e.choices), None)
        n = usage.get("completion_tokens") if usage else None
        if not (isinstance(n, int) and not isinstance(n, bool) and n >= 0):  # none, or not a count: as without usage
            n = count_tokens(trace.text) if count_tokens else 1
        ttft, latency = timed[0] - trace.sent, timed[-1] - trace.sent
        return dict(ttft=ttft, itl=list(np.diff(timed)), tpot=(latency - ttft) / (n - 1) if n > 1 else nan,
                    e2e=latency, n=n)
    chunks = trace.content_times  # these three tools time the chunks that carry text
    first, last = chunks[0], chunks[-1]
    if convention == "guidellm":
        n = trace.n_tokens  # usage when the server sends it (GuideLLM's fallback: one token per iteration)
        return dict(ttft=first - trace.sent, itl=[], tpot=(last - trace.sent) / n, e2e=trace.end - trace.sent, n=n,
                    inter_token=(last - first) / (n - 1) if n > 1 else nan)
    if convention == "llmperf":
        n = retokenized
        return dict(ttft=first - trace.sent, itl=[], tpot=nan, e2e=trace.end - trace.sent, n=n,
                    inter_token=(last - trace.sent) / n if n else 0.0)
    n = retokenized  # genai-perf
    latency = last - trace.sent
    return dict(ttft=first - trace.sent, itl=[], tpot=nan, e2e=latency, n=n,
                inter_token=(latency - (first - trace.sent)) / (n - 1) if n > 1 else nan)


def per_request(traces: Sequence[Trace], convention: str,
                count_tokens: Callable[[str], int] | None = None) -> pd.DataFrame:
    """Every successful request of ``traces`` scored by ``convention``: one row per request with ``ttft``,
    ``itl`` (a list of gaps; the book's and vLLM's only), ``tpot``, ``inter_token`` (GuideLLM's, LLMPerf's
    and GenAI-Perf's per-request ITL), ``e2e`` in seconds and ``n`` tokens. ``count_tokens(text)`` is the
    tokenizer count the tools that re-tokenize use (LLMPerf, GenAI-Perf, vLLM without usage); without it,
    the server's usage count stands in. Chapter 7 reads it through :func:`compare`."""
    _check(convention)
    rows = [dict(request_id=t.request_id, **_row(t, convention, count_tokens))
            for t in traces if t.ok and t.chunk_times and t.content_times]
    frame = pd.DataFrame(rows, columns=["request_id", "ttft", "itl", "tpot", "e2e", "n", "inter_token"])
    frame.attrs["units"] = "s"
    return frame


def _goodput(frame: pd.DataFrame, convention: str, ttft_slo: float, tpot_slo: float,
             duration_s: float) -> tuple[float, str]:
    if convention in ("llmperf", "genai-perf") or frame.empty:
        return float("nan"), "not defined"
    if convention == "vllm":  # tpot counts as 0 for one-token requests
        tpot = frame.tpot.fillna(0.0)
        good = int(((frame.ttft <= ttft_slo) & (tpot <= tpot_slo)).sum())
        return good / duration_s, "requests/s"
    if convention == "guidellm":  # one-token requests undetermined: out of the count
        known = frame.dropna(subset=["inter_token"])
        if known.empty:
            return float("nan"), "fraction"
        return float(((known.ttft <= ttft_slo) & (known.inter_token <= tpot_slo)).mean()), "fraction"
    records = [metrics.RequestMetrics(r.ttft, tuple(r.itl), None if np.isnan(r.tpot) else r.tpot, r.e2e,
                                      max(r.itl) if r.itl else None, None, int(r.n)) for r in frame.itertuples()]
    return metrics.goodput(records, ttft_slo, tpot_slo), "fraction"


def summary(traces: Sequence[Trace], convention: str, ttft_slo: float, tpot_slo: float,
            count_tokens: Callable[[str], int] | None = None, percentile: float = 99) -> dict:
    """The headline numbers of ``traces`` as ``convention`` reports them: mean and p``percentile`` of TTFT,
    of its ITL and of its TPOT (each as that tool defines them, seconds, NaN where it has none), mean
    end-to-end, goodput against ``ttft_slo`` and ``tpot_slo`` (seconds) in that tool's unit, completed and
    failed counts, the run's duration (first send to last end). Chapter 7 reads it through :func:`compare`."""
    frame = per_request(traces, convention, count_tokens)
    done = [t for t in traces if t.ok]
    duration = (max(t.end for t in traces) - min(t.sent for t in traces)) if traces else float("nan")
    if convention in ("book", "vllm"):
        itl = np.asarray([g for gaps in frame.itl for g in gaps], float)
    else:
        itl = frame.inter_token.dropna().to_numpy(float)
    tpot = frame.tpot.dropna().to_numpy(float)

    def stat(a, fn):
        return float(fn(a)) if a.size else float("nan")

    good, unit = _goodput(frame, convention, ttft_slo, tpot_slo, duration)
    names = NAMES[convention]
    return dict(convention=convention, ttft_mean=stat(frame.ttft.to_numpy(float), np.mean),
                ttft_p=stat(frame.ttft.to_numpy(float), lambda a: np.percentile(a, percentile)),
                itl_mean=stat(itl, np.mean), itl_p=stat(itl, lambda a: np.percentile(a, percentile)),
                tpot_mean=stat(tpot, np.mean), tpot_p=stat(tpot, lambda a: np.percentile(a, percentile)),
                e2e_mean=stat(frame.e2e.to_numpy(float), np.mean), goodput=good, goodput_unit=unit,
                completed=len(done), failed=len(traces) - len(done), duration_s=duration,
                ttft_name=names[0], itl_name=names[1], tpot_name=names[2] or "(none)", source=SOURCES[convention])


def compare(traces: Sequence[Trace], ttft_slo: float, tpot_slo: float,
            count_tokens: Callable[[str], int] | None = None) -> pd.DataFrame:
    """:func:`summary` for every convention, one row each (seconds; goodput in each tool's unit).
    Introduced in chapter 7."""
    return pd.DataFrame([summary(traces, c, ttft_slo, tpot_slo, count_tokens) for c in CONVENTIONS])


def meets(trace: Trace, ttft_slo: float, tpot_slo: float, worst_gap_slo: float | None = None) -> bool:
    """Whether one request met every objective by the book's definitions (``lib.metrics.meets_slo``); a
    failed request, or one that received no token, met none. Introduced in chapter 7."""
    if not trace.ok or not trace.chunk_times:
        return False
    return metrics.meets_slo(trace.metrics(), ttft_slo, tpot_slo, worst_gap_slo)


def bootstrap_fraction(flags: Sequence[bool], resamples: int = 1000, level: float = 0.95,
                       seed: int = 0) -> tuple[float, float, float]:
    """The fraction of true ``flags`` (e.g. goodput: requests that met their objectives) and a percentile
    bootstrap confidence interval at ``level``: ``resamples`` resamplings of the requests with
    replacement, from a seeded generator. Returns ``(fraction, low, high)``. With every flag equal the
    interval is that single value: more requests, not more resamples, would widen or narrow it.
    Introduced in chapter 7."""
    a = np.asarray(list(flags), dtype=float)
    if a.size == 0:
        raise ValueError("bootstrap_fraction needs at least one request")
    if resamples < 1 or not 0 < level < 1:
        raise ValueError(f"need resamples >= 1 and 0 < level < 1, got {resamples} and {level}")
    rng = np.random.default_rng(seed)
    means = a[rng.integers(0, a.size, size=(resamples, a.size))].mean(axis=1)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(a.mean()), float(low), float(high)
