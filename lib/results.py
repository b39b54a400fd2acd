"""Where a notebook's tables and figures go, written atomically with their provenance (chapter 1).

Only the build writes the committed outputs: ``make book`` points each chapter at a staging folder through
``PREFILL_DECODE_OUTPUT_ROOT`` and replaces ``data/<section>/``, ``figures/<section>/`` and the executed
notebook as one unit when the whole chapter succeeded (:mod:`lib.make.book`). A chapter run by hand (JupyterLab,
``papermill``) writes under ``build/scratch/`` instead, and says so, unless the reader sets
``PREFILL_DECODE_WRITE_COMMITTED=1`` (then the build notices the changed outputs and re-runs the chapter
at the next ``make book``). Quick mode writes under ``build/quick/``.

**A hand run is one unit too** (:mod:`lib.runs`): from its :class:`Results` to :meth:`Results.finish` it holds
its chapter's lock in that folder (a second run of the chapter there, by hand or by ``make quick``, is
refused with one line naming it) and writes into a staging folder of its own; :meth:`Results.finish`, the
chapter's last step, swaps its tables and figures in together. A run that fails or stops before it leaves
the folder as the last finished run left it.

Every file is written to a temporary name in its folder and renamed into place, so a reader never
sees half a CSV. ``provenance.json`` records each file's size, SHA-256 and, for a table, its rows
(``written``); :func:`load_table` refuses a table that is not what its run wrote, in one line naming it and
the command that restores it.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import subprocess
import tempfile
import time
import weakref
from pathlib import Path

import pandas as pd
import torch

from lib.device import describe_environment
from lib.params import Parameters
from lib.paths import OUTPUT_ROOT_ENV, REPO_ROOT, WRITE_COMMITTED_ENV, output_root
from lib.runs import (PROVENANCE, ChapterLock, RunBusy, file_record, listed_files, new_staging, read_provenance,
                      settle, swap_in, table_problem)


class CorruptTable(ValueError):
    """A table a later chapter reads is not what its run wrote; ``str()`` is one line naming the file and the
    command that restores it."""


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


#: The hand runs this process holds, by (root, section): a later Results of the same chapter in the same
#: kernel (its setup cell run again) takes the lock over, and the earlier, unfinished run is dropped.
_HELD: dict[tuple[str, str], tuple[ChapterLock, str]] = {}


def _release(key: tuple[str, str], run_id: str) -> None:
    held = _HELD.get(key)
    if held and held[1] == run_id:
        del _HELD[key]
        held[0].release()


class Results:
    """Saves one section's tables and figures and keeps its provenance.

    ``Results("01_two_phases", params=P, quick=quick, dtype=dtype)``, where ``P`` is what
    :func:`lib.params.check` returned: its device is the page's, and its parameters (as given, as used,
    and what quick mode changed) go into ``provenance.json`` (the build later records the notebook's
    parameter cells there too). Then :meth:`table` and :meth:`figure` as the notebook goes, and
    :meth:`finish` as its last step; the provenance is rewritten after every save, so it is never stale.
    Introduced in chapter 0.

    A hand run (no ``root`` given, outside ``make book``) is *staged*: it holds its chapter's lock in its
    output folder and writes into a staging folder until :meth:`finish` swaps everything in at once
    (:mod:`lib.runs`); :class:`lib.runs.RunBusy`, one line, when another run of the chapter holds that folder.
    Under the build, or with ``root`` given (the caller owns that folder), files go straight to
    ``root``; ``staged`` forces either.
    """

    def __init__(self, section: str, *, params: Parameters | None = None, quick: bool = False,
                 device: torch.device | None = None, dtype: torch.dtype | None = None, model: str | None = None,
                 root: Path | str | None = None, staged: bool | None = None):
        if not section or "/" in section or section.startswith("."):
            raise ValueError(f"section must be a plain name such as '01_two_phases', got {section!r}")
        self.section = section
        _PINNED.clear()  # a new run of a chapter reads the earlier chapters' latest runs afresh
        self.quick = quick
        self.root = Path(root) if root is not None else output_root(quick)
        self.staged = (root is None and not os.environ.get(OUTPUT_ROOT_ENV)) if staged is None else bool(staged)
        if device is None:
            device = params.device if params is not None and "device" in params.values else torch.device("cpu")
        self.environment = describe_environment(device, dtype, model)
        self.params = params
        self.started = time.perf_counter()
        self.files: list[str] = []
        self.written: dict[str, dict] = {}
        self.finished = False
        self.git = git_state()
        self.staging: Path | None = None
        self.run_id = f"{os.getpid()}-{time.time_ns():x}"
        if self.staged:
            self._key = (str(self.root.resolve()), section)
            held = _HELD.get(self._key)
            lock = held[0] if held and held[0].held else ChapterLock(self.root, section, "a hand run").acquire()
            _HELD[self._key] = (lock, self.run_id)
            weakref.finalize(self, _release, self._key, self.run_id)
            settle(self.root, section, held=True)  # a killed run's swap finished, unfinished runs' folders removed
            self.staging = new_staging(self.root, section)
        out = self.staging or self.root
        self.data_dir = out / "data" / section
        self.figure_dir = out / "figures" / section
        if root is None and not os.environ.get(OUTPUT_ROOT_ENV):
            where = "the committed data/ and figures/ (the next make book will re-run this chapter)" \
                if self.root == REPO_ROOT else f"{self.root}/ (a run outside make book: data/ and figures/ " \
                f"are left alone; set {WRITE_COMMITTED_ENV}=1 to write them)"
            print(f"{section}: outputs go to {where}, all at once when the chapter's last cell has run")

    def _check_open(self, what: str) -> None:
        if self.finished:
            raise ValueError(f"{self.section}: this run finished (Results.finish()); {what} belongs to a new "
                             f"run: Results({self.section!r}, ...) again")
        if self.staged and _HELD.get(self._key, (None, None))[1] != self.run_id:
            raise RunBusy(f"{self.section}: a later Results({self.section!r}) in this process took over its "
                          f"folder; this run's outputs were dropped: use the later one")

    def table(self, frame: pd.DataFrame, name: str) -> Path:
        """Write ``frame`` to ``data/<section>/<name>.csv`` atomically (in the run's staging folder until
        :meth:`finish`, for a staged run); return the path."""
        _check_name(name)
        if not isinstance(frame, pd.DataFrame):
            raise ValueError(f"table {name!r}: expected a pandas DataFrame, got {type(frame).__name__}")
        self._check_open(f"table {name!r}")
        path = _atomic_write(self.data_dir / f"{name}.csv", lambda tmp: frame.to_csv(tmp, index=False))
        self._record(path, rows=len(frame))
        return path

    def figure(self, fig, name: str, dpi: int = 120) -> Path:
        """Write a matplotlib figure to ``figures/<section>/<name>.png`` atomically (staged as :meth:`table`
        is); return the path."""
        _check_name(name)
        if not hasattr(fig, "savefig"):
            raise ValueError(f"figure {name!r}: expected a matplotlib figure, got {type(fig).__name__}")
        self._check_open(f"figure {name!r}")
        path = _atomic_write(self.figure_dir / f"{name}.png",
                             lambda tmp: fig.savefig(tmp, dpi=dpi, bbox_inches="tight", format="png"))
        self._record(path)
        return path

    def _record(self, path: Path, rows: int | None = None) -> None:
        relative = path.relative_to(self.staging or self.root).as_posix()
        if relative not in self.files:
            self.files.append(relative)
        self.written[relative] = file_record(path, rows)
        self.provenance()

    def provenance(self) -> Path:
        """Write ``data/<section>/provenance.json``: device, dtype, threads, versions, git commit,
        parameters, date, wall time so far (s), the files written (``files``) with each one's size in bytes,
        SHA-256 and a table's rows (``written``), this run's id and whether it finished."""
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
            "run_id": self.run_id,
            "finished": self.finished,
            "files": self.files,
            "written": self.written,
        }
        return _atomic_write(self.data_dir / "provenance.json",
                             lambda tmp: Path(tmp).write_text(json.dumps(record, indent=2, default=str) + "\n"))

    def finish(self) -> None:
        """End this run, as a chapter's last step: record it as finished and, for a staged run, swap its
        tables and figures into ``data/<section>/`` and ``figures/<section>/`` as one unit (the earlier
        run's files all go, none are kept beside the new ones) and release the chapter's folder.
        Introduced in chapter 0."""
        self._check_open("finish()")
        self.finished = True
        self.provenance()
        if self.staged:
            try:
                swap_in(self.staging, self.root, self.section)
            finally:
                _release(self._key, self.run_id)
            print(f"{self.section}: this run's {len(self.files)} files replaced {self.root}/data/{self.section}/ "
                  f"and figures/{self.section}/ as one unit")


def _restore_command(root: Path, section: str) -> str:
    """How a reader gets a good copy of ``section``'s tables under ``root`` back."""
    number = section.split("_", 1)[0]
    if root == REPO_ROOT:
        return f"git checkout -- data/{section} (the committed run), or python -m lib.make.book --force {number}"
    if root == REPO_ROOT / "build" / "quick" or root.parent == REPO_ROOT / "build" / "staging-quick":
        return f"python -m lib.make.book --quick {number}"
    return f"run chapter {section} again by hand, or delete {root / 'data' / section}/ to read the book's own"


#: For each (tree, section) this run has read a table of: the run that wrote it (its provenance's ``run_id``).
_PINNED: dict[tuple[str, str], str] = {}

#: Columns whose name ends so hold a duration, a rate or a size: never negative, never infinite.
MAGNITUDE_SUFFIXES = ("_ms", "_s", "_seconds", "gb_s", "gflop_s", "per_s", "_bytes", "_mb")
#: ... unless the name says the column is a difference of two of them, which may have either sign: a rest (a step
#: less its parts), a saving, a profile less the profiler's own cost.
SIGNED_WORDS = ("difference", "excess", "miss", "saving", "saved", "gain", "growth", "slope", "change", "delta",
                "added", "shift", "rest", "profiled")


def value_problem(frame: pd.DataFrame) -> str | None:
    """What is wrong with a table's values, or ``None``: a column of durations, rates or sizes
    (:data:`MAGNITUDE_SUFFIXES`, not a difference: :data:`SIGNED_WORDS`) holding a negative or infinite number,
    or one holding text. Missing values (not measured) pass."""
    import numpy as np

    for column in frame.columns:
        name = str(column)
        if not name.endswith(MAGNITUDE_SUFFIXES) or any(w in name for w in SIGNED_WORDS):
            continue
        values = pd.to_numeric(frame[column], errors="coerce")
        text = int((values.isna() & frame[column].notna()).sum())
        if text:
            return f"column {name} holds {text} value(s) that are not numbers"
        wrong = int(((values < 0) | np.isinf(values)).sum())
        if wrong:
            return f"column {name} holds {wrong} negative or infinite value(s), which a duration, rate or size cannot be"
    return None


def load_table(section: str, name: str, quick: bool = False, *, committed_too: bool | None = None
               ) -> pd.DataFrame | None:
    """Read another section's committed table ``data/<section>/<name>.csv``, or ``None`` if that section
    has not been run. The tree this run writes to (quick, scratch or staging) is tried first, so a hand run
    reads the hand runs before it; a quick run reads only the quick runs (``None`` where that section has no
    quick run: the committed tables are of other models and sizes), unless ``committed_too`` (chapter 0's
    ceilings, which the committed run measured for the quick model too). Introduced in chapter 4.

    The table is checked against its ``provenance.json`` first: :class:`CorruptTable` (one line naming the
    file and the command that restores it) for a table its run did not write, one that is cut short or
    changed since (its size or SHA-256 is not the recorded one), one with other rows than recorded, a
    symbolic link, one that does not parse, or one whose durations, rates or sizes are negative, infinite or
    text (:func:`value_problem`); and for a table its run's provenance lists that is missing,
    or one with no provenance beside it (no run says it wrote it), rather than falling back to the committed
    table of another run. The model its run measured is in the frame's ``attrs["model"]``."""
    committed_too = not quick if committed_too is None else committed_too
    candidates = list(dict.fromkeys([output_root(quick)] + ([REPO_ROOT] if committed_too else [])))
    for root in candidates:
        path = root / "data" / section / f"{name}.csv"
        if not (path.exists() or path.is_symlink()):
            record, _ = read_provenance(path.parent)
            if record is not None and path.name in (listed_files(record, "data", section) or ()):
                raise CorruptTable(f"{path}: refused: missing, though its run's {PROVENANCE} lists it; restore it "
                                   f"with: {_restore_command(root, section)}")
            continue
        if not (path.parent / PROVENANCE).exists() and not (path.parent / PROVENANCE).is_symlink():
            raise CorruptTable(f"{path}: refused: no {PROVENANCE} beside it, so no run of the book says it wrote "
                               f"it; restore it with: {_restore_command(root, section)}")
        problem, rows = table_problem(path)
        frame = None
        if problem is None:
            try:
                frame = pd.read_csv(path)
            except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as error:
                problem = f"{name}.csv does not parse as a table ({str(error).strip().splitlines()[0][:120]})"
        if problem is None and rows is not None and len(frame) != rows:
            problem = f"{name}.csv has {len(frame)} rows where its run wrote {rows}"
        if problem is None:
            problem = value_problem(frame)
        if problem:
            raise CorruptTable(f"{path}: refused: {problem}; restore it with: {_restore_command(root, section)}")
        record, _ = read_provenance(path.parent)
        frame.attrs["model"] = (record or {}).get("model")  # the model the table was measured on
        writer = str((record or {}).get("run_id", ""))
        first = _PINNED.setdefault((str(root), section), writer)
        if writer and first and writer != first:  # another run replaced the chapter between two of this run's reads
            raise CorruptTable(f"{path}: refused: chapter {section} was replaced by another run while this one read "
                               f"its tables (first run {first}, now {writer}), so they would mix two runs; run this "
                               "chapter again")
        return frame
    return None


def load_reference(name: str) -> pd.DataFrame:
    """A published reference run from ``data/reference/<name>.csv`` (comment lines start with ``#``)."""
    path = REPO_ROOT / "data" / "reference" / f"{name}.csv"
    if not path.exists():
        raise ValueError(f"no reference table {name!r}; available: "
                         f"{', '.join(sorted(p.stem for p in path.parent.glob('*.csv')))}")
    return pd.read_csv(path, comment="#")
