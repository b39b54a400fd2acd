"""The course's roofline printout: Llama-3-8B on an H100, as tables and as text.

:func:`course_tables` prints, line for line, ``data/reference/course_roofline_llama3_8b_h100.txt``
from the arithmetic of :mod:`lib.roofline`; :func:`prefill_rows` and :func:`decode_rows` give the
same figures as records for a DataFrame. Formatting only: every number comes from ``lib.roofline``.

Introduced in chapter 6 (roofline).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from lib.roofline import HARDWARE, Cost, Hardware, bound, decode_cost, prefill_cost, request_split
from lib.shapes import LLAMA3_8B, ModelShape

__all__ = ["COURSE_PROMPTS", "COURSE_CONTEXTS", "COURSE_REQUEST", "prefill_rows", "decode_rows",
           "course_tables"]

#: The prompt lengths, decode contexts and request (prompt, output tokens) of the course's table.
COURSE_PROMPTS: tuple[int, ...] = (1, 16, 128, 256, 512, 2048, 8192, 32768)
COURSE_CONTEXTS: tuple[int, ...] = (128, 2048, 8192, 32768)
COURSE_REQUEST: tuple[int, int] = (2000, 500)


def _row(cost: Cost, hw: Hardware) -> dict[str, Any]:
    b = bound(hw, cost)
    return {
        "flops": cost.flops, "bytes": cost.bytes, "intensity_flop_per_byte": cost.intensity,
        "t_compute_s": b.t_compute, "t_memory_s": b.t_memory, "time_s": b.time,
        "limit": b.limit, "tokens_per_s": b.tokens_per_s,
    }


def prefill_rows(shape: ModelShape, hw: Hardware, prompts: Iterable[int] = COURSE_PROMPTS,
                 **kwargs: Any) -> list[dict[str, Any]]:
    """One record per prompt length: ``prompt_tokens``, ``flops``, ``bytes``,
    ``intensity_flop_per_byte``, ``t_compute_s``, ``t_memory_s``, ``time_s`` (seconds), ``limit``
    (compute or memory) and ``tokens_per_s``; ``kwargs`` go to ``lib.roofline.prefill_cost``.

    Introduced in chapter 6 (roofline).
    """
    return [{"prompt_tokens": p, **_row(prefill_cost(shape, p, **kwargs), hw)} for p in prompts]


def decode_rows(shape: ModelShape, hw: Hardware, contexts: Iterable[int] = COURSE_CONTEXTS,
                batch: int = 1) -> list[dict[str, Any]]:
    """One record per context: ``context_tokens``, ``batch`` and the fields of ``prefill_rows``, for
    one decode step; ``tokens_per_s`` counts all ``batch`` sequences.

    Introduced in chapter 6 (roofline).
    """
    return [{"context_tokens": c, "batch": batch, **_row(decode_cost(shape, batch, c), hw)}
            for c in contexts]


def course_tables(shape: ModelShape = LLAMA3_8B, hw: Hardware | None = None,
                  prompts: Sequence[int] = COURSE_PROMPTS, contexts: Sequence[int] = COURSE_CONTEXTS,
                  request: tuple[int, int] = COURSE_REQUEST) -> str:
    """The course's roofline printout for ``shape`` on ``hw`` (default: the H100 SXM), as text: a
    summary of the model and chip, the prefill table, the batch-1 decode table and the request line.
    With the defaults it matches ``data/reference/course_roofline_llama3_8b_h100.txt`` line for line
    (its ``#`` comment lines aside).

    Introduced in chapter 6 (roofline).
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
            f"{r['prompt_tokens']:>7} {r['flops'] / 1e9:>9.0f} {r['bytes'] / 1e9:>6.1f}"
            f" {r['intensity_flop_per_byte']:>7.0f} {r['t_compute_s'] * 1e3:>10.2f}"
            f" {r['t_memory_s'] * 1e3:>9.2f} {r['limit']:>8} {r['tokens_per_s']:>9.0f}"
        )
    lines += ["", "One decode step, batch 1 (roofline lower bound on inter-token latency)",
              f"{'context':>7} {head}"]
    for r in decode_rows(shape, hw, contexts, batch=1):
        lines.append(
            f"{r['context_tokens']:>7} {r['flops'] / 1e9:>9.1f} {r['bytes'] / 1e9:>6.2f}"
            f" {r['intensity_flop_per_byte']:>7.1f} {r['t_compute_s'] * 1e3:>10.3f}"
            f" {r['t_memory_s'] * 1e3:>9.2f} {r['limit']:>8} {r['tokens_per_s']:>9.0f}"
        )
    p, out = request
    split = request_split(shape, hw, p, out)
    lines += [
        "",
        f"Request of {p} in, {out} out at batch 1: prefill {split.prefill_s * 1e3:.0f} ms,"
        f" decode {split.decode_s * 1e3:.0f} ms ({100 * split.decode_share:.0f}% of the time)",
    ]
    return "\n".join(lines)
