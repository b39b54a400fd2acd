"""Where a notebook's tables and figures go, written atomically with their provenance (section 1).

Only the build writes the committed outputs: ``make book`` points each chapter at a staging folder through
``PREFILL_DECODE_OUTPUT_ROOT`` and replaces ``data/<section>/``, ``figures/<section>/`` and the executed
notebook as one unit when the whole chapter succeeded (:mod:`lib.make.book`). A chapter run by hand (JupyterLab,
``papermill``) writes under ``build/scratch/`` instead, and says so, unless the reader sets
``PREFILL_DECODE_WRITE_COMMITTED=1`` (then the build notices the changed outputs and re-runs the chapter
at the next ``make book``). Quick mode writes under ``build/quick/``.

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
from lib.params import Parameters
from lib.paths import OUTPUT_ROOT_ENV, REPO_ROOT, WRITE_COMMITTED_ENV, output_root

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


def git_state(root: Path = REPO_ROOT) -> dict[str, object]:
    """``git_commit``: the HEAD commit (a hash ``git show`` finds, or ``unknown``) and ``git_dirty``: the
    files under ``lib/``, ``notebooks/`` and the pins that differ from it (the executed ``.ipynb`` files,
    which the build itself rewrites, are not counted)."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True,
                                text=True, timeout=10).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--", "lib", "notebooks", "constraints.txt",
                                 "pyproject.toml"], cwd=root, capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return {"git_commit": "unknown", "git_dirty": []}
    dirty = sorted(line[3:] for line in status.splitlines() if not line.endswith(".ipynb"))
    return {"git_commit": commit or "unknown", "git_dirty": dirty}


def git_commit() -> str:
    """The HEAD commit (see :func:`git_state`)."""
    return str(git_state()["git_commit"])


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
        raise ValueError(f"an output name must be a plain file name such as 'prefill_sweep', got {name!r}")


class Results:
    """Saves one section's tables and figures and keeps its provenance.

    ``Results("01_two_phases", params=P, quick=quick, dtype=dtype)``, where ``P`` is what
    :func:`lib.params.check` returned: its device is the page's, and its parameters (as given, as used,
    and what quick mode changed) go into ``provenance.json`` (the build later records the notebook's
    parameter cells there too). Then :meth:`table` and :meth:`figure` as the notebook goes; the provenance
    is rewritten after every save, so it is never stale. Introduced in section 0.
    """

    def __init__(self, section: str, *, params: Parameters | None = None, quick: bool = False,
                 device: torch.device | None = None, dtype: torch.dtype | None = None, model: str | None = None,
                 root: Path | str | None = None):
        if not section or "/" in section:
            raise ValueError(f"section must be a plain name such as '01_two_phases', got {section!r}")
        self.section = section
        self.quick = quick
        self.root = Path(root) if root is not None else output_root(quick)
        self.data_dir = self.root / "data" / section
        self.figure_dir = self.root / "figures" / section
        if device is None:
            device = params.device if params is not None and "device" in params.values else torch.device("cpu")
        self.environment = describe_environment(device, dtype, model)
        self.params = params
        self.started = time.perf_counter()
        self.files: list[str] = []
        self.git = git_state()
        if root is None and not os.environ.get(OUTPUT_ROOT_ENV):
            where = "the committed data/ and figures/ (the next make book will re-run this chapter)" \
                if self.root == REPO_ROOT else f"{self.root}/ (a run outside make book: data/ and figures/ " \
                f"are left alone; set {WRITE_COMMITTED_ENV}=1 to write them)"
            print(f"{section}: outputs go to {where}")

    def table(self, frame: pd.DataFrame, name: str) -> Path:
        """Write ``frame`` to ``data/<section>/<name>.csv`` atomically; return the path."""
        _check_name(name)
        if not isinstance(frame, pd.DataFrame):
            raise ValueError(f"table {name!r}: expected a pandas DataFrame, got {type(frame).__name__}")
        path = _atomic_write(self.data_dir / f"{name}.csv", lambda tmp: frame.to_csv(tmp, index=False))
        self._record(path)
        return path

    def figure(self, fig, name: str, dpi: int = 120) -> Path:
        """Write a matplotlib figure to ``figures/<section>/<name>.png`` atomically; return the path."""
        _check_name(name)
        if not hasattr(fig, "savefig"):
            raise ValueError(f"figure {name!r}: expected a matplotlib figure, got {type(fig).__name__}")
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
        checked = self.params
        record = {
            "section": self.section,
            "quick": self.quick,
            **self.environment,
            **self.git,
            "parameters": checked.given if checked else {},
            "parameters_used": checked.values if checked else {},
            "quick_changes": checked.quick_changes if checked else [],
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "wall_time_s": round(time.perf_counter() - self.started, 2),
            "files": self.files,
        }
        return _atomic_write(self.data_dir / "provenance.json",
                             lambda tmp: Path(tmp).write_text(json.dumps(record, indent=2, default=str) + "\n"))


def load_table(section: str, name: str, quick: bool = False) -> pd.DataFrame | None:
    """Read another section's committed table ``data/<section>/<name>.csv``, or ``None`` if that section
    has not been run. The tree this run writes to (quick, scratch or staging) is tried first, so a hand run
    reads the hand runs before it. Introduced in section 5."""
    candidates = list(dict.fromkeys([output_root(quick), REPO_ROOT]))
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
