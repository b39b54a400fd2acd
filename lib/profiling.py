"""One layer down: a pass's operators under ``torch.profiler``, set beside the cost model's terms.

When a measured pass and its prediction (:mod:`lib.costmodel`) disagree, the chapter does not guess why: it
runs the pass under ``torch.profiler``, adds up each operator's own time (``self`` time: its children are
counted once, under their own names), sorts the operators into the cost model's terms (:data:`TERMS`), and
shows both side by side; the part whose operators took more than the model gave it is what the prediction
missed. The profiler costs a few microseconds per operator itself, so the profiled pass runs a little long;
compare parts, not the total.

Introduced in chapter 2.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator

import pandas as pd
import torch
from torch.profiler import ProfilerActivity, profile

from lib.costmodel import Prediction

__all__ = ["TERMS", "BETWEEN", "term_of", "operators", "beside_prediction", "cost_per_operator"]

#: The operator name of the time between operators (Python issuing the next one).
BETWEEN = "(between operators)"

#: Which cost-model term an operator's time belongs to; every other operator is part of dispatch (issuing the
#: pass's many small operations).
TERMS = {
    "matrices": ("aten::addmm", "aten::mm", "aten::bmm", "aten::linear", "aten::matmul", "aten::addmv", "aten::mv",
                 "aten::_weight_int8pack_mm"),
    "attention": ("aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_attention_math",
                  "aten::_scaled_dot_product_efficient_attention", "aten::_scaled_dot_product_flash_attention",
                  "aten::_scaled_dot_product_cudnn_attention", "aten::_efficient_attention_forward",
                  "aten::_flash_attention_forward"),
    "cache copy": ("aten::cat", "aten::index_copy_"),
    "copies": ("aten::copy_", "aten::clone", "aten::contiguous", "aten::_to_copy"),
}


def term_of(operator: str) -> str:
    """The cost-model term an operator's time belongs to (:data:`TERMS`), ``"dispatch"`` for the rest."""
    return next((term for term, names in TERMS.items() if operator in names), "dispatch")


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """The profiler's C++ library writes start and stop lines to the process's own stderr, which a notebook shows
    as an error box: send them nowhere while it runs."""
    sys.stderr.flush()
    saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def operators(fn: Callable[[], object], passes: int = 3, warmup: int = 1,
              device: torch.device | None = None) -> pd.DataFrame:
    """Run ``fn`` ``warmup`` times, then ``passes`` times under ``torch.profiler``; return one row per operator:
    ``operator``, ``term`` (:func:`term_of`), ``calls`` and ``self_ms`` per pass (on a GPU, its kernels' own time
    is in ``device_ms``), sorted by time. One row, :data:`BETWEEN`, is the pass's wall time that no operator
    holds: Python and the dispatcher issuing the next operator (part of dispatch).

    Introduced in chapter 2.
    """
    for _ in range(warmup):
        fn()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device is not None and device.type == "cuda"
                                           else [])
    with _quiet_stderr(), profile(activities=activities) as prof:
        started = time.perf_counter()
        for _ in range(passes):
            fn()
        if device is not None and device.type == "cuda":
            torch.cuda.synchronize(device)
        wall_ms = (time.perf_counter() - started) * 1e3 / passes
    rows = []
    for e in prof.key_averages():
        row = dict(operator=e.key, term=term_of(e.key), calls=e.count / passes, self_ms=e.self_cpu_time_total / 1e3 / passes)
        if device is not None and device.type == "cuda":
            row["device_ms"] = getattr(e, "self_device_time_total", 0) / 1e3 / passes
        rows.append(row)
    frame = pd.DataFrame(rows)
    frame = frame[frame.self_ms > 0]
    between = wall_ms - frame.self_ms.sum()  # Python and the dispatcher between operators: issuing the pass
    frame = pd.concat([frame, pd.DataFrame([dict(operator=BETWEEN, term="dispatch", calls=1.0, self_ms=max(between, 0.0))])])
    return frame.sort_values("self_ms", ascending=False).reset_index(drop=True)


def beside_prediction(ops: pd.DataFrame, prediction: Prediction) -> pd.DataFrame:
    """The profiled time of each cost-model term beside what the model predicted for it (ms per pass), with the
    difference, largest excess first, and the operator calls each term's time came from (``calls`` per pass). The
    model's block matrices and LM head are one ``matrices`` term here (the profiler sees the same operators for
    both), and its page faults are part of ``cache copy``: the operating system maps a page inside the operator
    that first writes it, which in a decode step is the growing cache's concatenation.

    Introduced in chapter 2.
    """
    predicted = {"matrices": prediction.term("block matrices").best + prediction.term("LM head").best,
                 "attention": prediction.term("attention").best,
                 "cache copy": prediction.term("cache copy").best + prediction.term("page faults").best,
                 "copies": 0.0, "dispatch": prediction.term("dispatch").best}
    measured, calls = ops.groupby("term").self_ms.sum(), ops.groupby("term").calls.sum()
    table = pd.DataFrame([dict(term=t, predicted_ms=p * 1e3, profiled_ms=float(measured.get(t, 0.0)),
                               calls=float(calls.get(t, 0.0))) for t, p in predicted.items()])
    table["excess_ms"] = table.profiled_ms - table.predicted_ms
    return table.sort_values("excess_ms", ascending=False).reset_index(drop=True)


def cost_per_operator(device: torch.device | None = None, calls: int = 2000, repeats: int = 3) -> float:
    """What the profiler adds to one operator call, in ms: ``calls`` one-element additions timed with and without
    it (the faster of ``repeats`` each), the difference per call, at least 0. A part of many short calls reads
    long under the profiler by about its calls times this.

    Introduced in chapter 2; chapter 3 uses it too.
    """
    x = torch.zeros(1, device=device)

    def loop() -> None:
        for _ in range(calls):
            torch.add(x, 1)

    def fastest(under_profiler: bool) -> float:
        best = float("inf")
        for _ in range(repeats):
            with contextlib.ExitStack() as stack:
                if under_profiler:
                    stack.enter_context(_quiet_stderr())
                    stack.enter_context(profile(activities=[ProfilerActivity.CPU]))
                started = time.perf_counter()
                loop()
                best = min(best, time.perf_counter() - started)
        return best

    loop()
    return max(fastest(True) - fastest(False), 0.0) / calls * 1e3
