"""Where the book's files are: the one definition of the repository's root and of the chapter every other
reads its ceilings from. Imports nothing heavy, so the build can use it without loading torch.

Introduced in chapter 0.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The book's folder: ``notebooks/``, ``lib/``, ``data/``, ``figures/`` and ``build/`` lie in it.
REPO_ROOT = Path(__file__).resolve().parents[1]

#: The chapter that measures the machine; every later chapter reads its ``ceilings`` table.
MACHINE_SECTION = "00_machine"

OUTPUT_ROOT_ENV = "PREFILL_DECODE_OUTPUT_ROOT"
"""Set by :mod:`lib.make.book` for each chapter it runs: the staging folder its outputs go to."""
WRITE_COMMITTED_ENV = "PREFILL_DECODE_WRITE_COMMITTED"
"""Set to ``1`` by a reader who wants a hand run to write the committed ``data/`` and ``figures/``."""


def output_root(quick: bool = False) -> Path:
    """The root under which ``data/`` and ``figures/`` are written: ``$PREFILL_DECODE_OUTPUT_ROOT`` when
    the build sets it, else ``build/quick`` in quick mode, else the book's root if
    ``$PREFILL_DECODE_WRITE_COMMITTED`` is ``1``, else ``build/scratch`` (a hand run)."""
    root = os.environ.get(OUTPUT_ROOT_ENV)
    if root:
        return Path(root)
    if quick:
        return REPO_ROOT / "build" / "quick"
    if os.environ.get(WRITE_COMMITTED_ENV, "").strip() == "1":
        return REPO_ROOT
    return REPO_ROOT / "build" / "scratch"
