"""Where a notebook's tables and figures go, written atomically with their provenance (section 1).

A full build writes ``data/<section>/<name>.csv`` and ``figures/<section>/<name>.png`` under the book's
root, plus ``data/<section>/provenance.json``. Quick mode writes the same tree under ``build/quick/``,
so it never touches the committed outputs. ``make book`` points a notebook at a staging folder through
the environment variable ``PREFILL_DECODE_OUTPUT_ROOT`` and moves the results into place only when the
whole notebook succeeded, so a failed run never replaces good outputs.

Every file is written to a temporary name in its folder and renamed into place, so a reader never
sees half a CSV.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch

from lib.device import describe_environment

REPO_ROOT = Path(__file__).resolve().parents[1]
OUTPUT_ROOT_ENV = "PREFILL_DECODE_OUTPUT_ROOT"


def output_root(quick: bool = False) -> Path:
    """The root under which ``data/`` and ``figures/`` are written: the folder named by
    ``$PREFILL_DECODE_OUTPUT_ROOT`` when the build sets it, else ``build/quick`` in quick mode, else the
    book's root."""
    root = os.environ.get(OUTPUT_ROOT_ENV)
    if root:
        return Path(root)
    return REPO_ROOT / "build" / "quick" if quick else REPO_ROOT


def _atomic_write(path: Path, write) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)  # mkstemp makes files private; tables and figures are for everyone to read
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def git_commit() -> str:
    """The book's current git commit (with ``-dirty`` if the work tree has changes), or ``unknown``."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                                text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "lib", "notebooks"], cwd=REPO_ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (commit + ("-dirty" if dirty else "")) if commit else "unknown"


class Results:
    """Saves one section's tables and figures and keeps its provenance.

    ``Results("01_two_phases", quick=quick, device=device, dtype=dtype, params={...})``; then
    :meth:`table` and :meth:`figure` as the notebook goes, and :meth:`provenance` at the end (it is also
    rewritten after every save, so it is never stale). Introduced in section 1.
    """

    def __init__(self, section: str, *, quick: bool = False, device: torch.device | str = "cpu",
                 dtype: torch.dtype | None = None, model: str | None = None,
                 params: dict | None = None, root: Path | str | None = None):
        if not section or "/" in section:
            raise ValueError(f"section must be a plain name such as '01_two_phases', got {section!r}")
        self.section = section
        self.quick = quick
        self.root = Path(root) if root is not None else output_root(quick)
        self.data_dir = self.root / "data" / section
        self.figure_dir = self.root / "figures" / section
        self.environment = describe_environment(device, dtype, model)
        self.params = dict(params or {})
        self.started = time.perf_counter()
        self.files: list[str] = []

    def table(self, frame: pd.DataFrame, name: str) -> Path:
        """Write ``frame`` to ``data/<section>/<name>.csv`` atomically; return the path."""
        path = _atomic_write(self.data_dir / f"{name}.csv", lambda tmp: frame.to_csv(tmp, index=False))
        self._record(path)
        return path

    def figure(self, fig, name: str, dpi: int = 120) -> Path:
        """Write a matplotlib figure to ``figures/<section>/<name>.png`` atomically; return the path."""
        path = _atomic_write(self.figure_dir / f"{name}.png",
                             lambda tmp: fig.savefig(tmp, dpi=dpi, bbox_inches="tight", format="png"))
        self._record(path)
        return path

    def _record(self, path: Path) -> None:
        relative = str(path.relative_to(self.root))
        if relative not in self.files:
            self.files.append(relative)
        self.provenance()

    def provenance(self) -> Path:
        """Write ``data/<section>/provenance.json``: device, dtype, threads, versions, git commit,
        parameters, date, wall time so far (s) and the files written."""
        record = {
            "section": self.section,
            "quick": self.quick,
            **self.environment,
            "git_commit": git_commit(),
            "parameters": self.params,
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "wall_time_s": round(time.perf_counter() - self.started, 2),
            "files": self.files,
        }
        return _atomic_write(self.data_dir / "provenance.json",
                             lambda tmp: Path(tmp).write_text(json.dumps(record, indent=2, default=str) + "\n"))


def load_table(section: str, name: str, quick: bool = False) -> pd.DataFrame | None:
    """Read another section's committed table ``data/<section>/<name>.csv``, or ``None`` if that section
    has not been run. In quick mode the quick tree is tried first. Introduced in section 5."""
    candidates = ([output_root(True)] if quick else []) + [REPO_ROOT]
    for root in candidates:
        path = root / "data" / section / f"{name}.csv"
        if path.exists():
            return pd.read_csv(path)
    return None


def load_reference(name: str) -> pd.DataFrame:
    """A published reference run from ``data/reference/<name>.csv`` (comment lines start with ``#``)."""
    path = REPO_ROOT / "data" / "reference" / f"{name}.csv"
    if not path.exists():
        raise ValueError(f"no reference table {name!r}; available: "
                         f"{', '.join(sorted(p.stem for p in path.parent.glob('*.csv')))}")
    return pd.read_csv(path, comment="#")
