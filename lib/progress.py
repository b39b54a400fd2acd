"""Progress bars that suit where a chapter runs (chapter 2, where the first long sweep is).

``progress(iterable, desc="prefill")`` is used like ``tqdm``. What it draws depends on the reader:

* **In JupyterLab** (an IPython kernel with ipywidgets installed): tqdm's notebook widget.
* **In a terminal** (stderr is a TTY): tqdm's text bar.
* **In a build** (``make book``, ``make quick``, the tests, papermill): no bar at all, and when the loop
  ends **one line** on stdout, such as ``prefill: 11 of 11 in 26.3 s``. A bar's carriage-return updates
  would otherwise be stored in the executed notebook as dozens of stderr outputs.

A build is recognised by the environment variable ``PREFILL_DECODE_BATCH`` (any value but ``""`` or
``"0"``), or by ``PREFILL_DECODE_OUTPUT_ROOT``, which ``lib.make.book`` sets for every chapter it executes.
Setting ``PREFILL_DECODE_BATCH=0`` forces the interactive choice even under a build.

This module never imports ``tqdm.auto``: that import warns ("IProgress not found") on stderr when
ipywidgets is missing. Without ipywidgets a kernel gets the text bar, silently.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

from lib.paths import OUTPUT_ROOT_ENV

T = TypeVar("T")

BATCH_ENV = "PREFILL_DECODE_BATCH"
"""Set to ``1`` by the build (and tests) so bars print one line; ``0`` forces interactive bars."""



def batch_mode() -> bool:
    """True when a build runs the code (see the module docstring), so nobody watches a bar."""
    flag = os.environ.get(BATCH_ENV)
    if flag is not None:
        return flag.strip() not in ("", "0")
    return bool(os.environ.get(OUTPUT_ROOT_ENV))


def _in_kernel() -> bool:
    """True inside a Jupyter kernel (JupyterLab, or papermill), False in a plain interpreter."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def _have_widgets() -> bool:
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


def style() -> str:
    """Which kind of progress this process gets: ``"line"`` (a build), ``"widget"`` (a Jupyter kernel
    with ipywidgets), ``"text"`` (a terminal, or a kernel without ipywidgets) or ``"line"`` again when
    stderr is not a terminal and no kernel is attached (output captured by a pipe or a test)."""
    if batch_mode():
        return "line"
    if _in_kernel():
        return "widget" if _have_widgets() else "text"
    return "text" if sys.stderr.isatty() else "line"


def _length(iterable: Iterable, total: int | None) -> int | None:
    if total is not None:
        return total
    try:
        return len(iterable)  # type: ignore[arg-type]
    except TypeError:
        return None


def _one_line(iterable: Iterable[T], desc: str, total: int | None) -> Iterator[T]:
    """Yield from ``iterable``; print one summary line when the loop ends, or when it stops early."""
    started = time.perf_counter()
    done = 0
    finished = False
    try:
        for item in iterable:
            done += 1  # items handed out, so a loop left at its fourth item reports 4
            yield item
        finished = True
    finally:
        seconds = time.perf_counter() - started
        of = f" of {total}" if total is not None else ""
        verb = "" if finished else " (stopped early)"
        print(f"{desc or 'progress'}: {done}{of} in {seconds:.1f} s{verb}", flush=True)


def progress(iterable: Iterable[T], desc: str = "", total: int | None = None, **tqdm_options) -> Iterable[T]:
    """Iterate over ``iterable`` with a progress display that suits the reader (see the module docstring).

    ``desc`` labels the bar and the summary line; ``total`` is needed only when ``iterable`` has no
    length; other keyword arguments (``leave=False``, ``unit="run"``) go to tqdm and are ignored in a
    build. Introduced in chapter 2.
    """
    total = _length(iterable, total)
    kind = style()
    if kind == "line":
        return _one_line(iterable, desc, total)
    if kind == "widget":
        from tqdm.notebook import tqdm
    else:
        from tqdm.std import tqdm
    return tqdm(iterable, desc=desc or None, total=total, **tqdm_options)


def quiet_library_bars() -> None:
    """In a build, switch off the bars that libraries draw themselves (transformers' "Loading weights",
    huggingface_hub's downloads), which would otherwise fill a chapter's outputs with stderr lines.
    Interactive sessions keep them. Call before loading a model (``lib.models`` does)."""
    if not batch_mode():
        return
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        return
    hf_logging.disable_progress_bar()
