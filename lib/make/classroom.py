"""Class results: what each student's machine measured, gathered into one comparison (for teachers).

A student runs the book (``make book``, or ``make quick`` in class) and sends one file::

    make class-zip            # writes build/class/<name>.zip from data/ (QUICK=1: from build/quick/)

The zip holds the run's ``data/<chapter>/`` tables with their ``provenance.json`` (and ``claims.csv``
where a chapter records claims), plus ``timings.csv``: each chapter's run time, read from its executed
notebook. No notebook, figure or path of the student's machine is included.

The teacher gathers any number of zips or folders (a folder may be a run's root, holding ``data/``, or a
``data/`` folder itself)::

    make class DIRS="alice.zip bob.zip lab-pc-3/"   # or: python -m lib.make.classroom gather ...

and gets, under ``build/class/``, ``comparison.csv`` (one row per machine: device, threads, measured
bandwidth and FLOP rate, TTFT, decode step, prefill rate, claims held), ``sources.csv`` (which table each
number came from), ``claims.csv`` (every claim's verdict on every machine) and ``comparison.png``.
``make html`` then adds them to the site as ``class.html``.

Every number is read from the run's own tables; a number a run did not measure is left empty and said
so, never filled in.

**Every file a student sends is treated as hostile.** A zip is unpacked into a folder of its own (two
``alice.zip`` from different folders never mix), member by member, refusing any path that would land outside
it and any zip that would expand past :data:`ZIP_LIMITS` (bytes, files, folder depth), counting the bytes
actually written, not the sizes the zip declares. Every bad input (a path that does not exist, a file that
is not a zip, an empty zip, a ``provenance.json`` or ``timings.csv`` that cannot be read, a table that does
not parse) stops the gathering with one line naming the file and what was wrong (:class:`BadRun`; exit
status 2). Every CSV written is spreadsheet-safe: a text cell (or header) beginning with ``=``, ``+``, ``-``,
``@``, a tab or a carriage return is prefixed with ``'`` so a spreadsheet shows it as text instead of running
it; numbers, negative ones included, stay numbers (:func:`spreadsheet_safe`). ``make class-zip`` refuses a run
whose chapter replacement is unfinished (:func:`lib.make.outputs.check_finished`).

**Numbers from a student are checked like text from a student.** Before a run is used: each
``provenance.json`` field the comparison reads has the type and range a run of the book writes
(:data:`PROVENANCE_FIELDS`), a chapter records at most :data:`MAX_CLAIMS` claims and none twice, ``timings.csv``
names each chapter once, and a chapter whose provenance lists its files holds exactly those, unchanged
(:func:`lib.runs.folder_problem`); a run that fails is one line naming the file (:class:`BadRun`). Every number the
comparison shows must be a finite number within :data:`PLAUSIBLE` (a time above 0 and below an hour, a
bandwidth below any machine's, ...): a text cell in a numeric column, an infinite or negative time, a
bandwidth of 1e12 GB/s is not shown as measured but **flagged** (the ``flags`` column, the class page, one line
on stderr naming the file), and so is a run whose files are the same as an earlier one's. Symbolic links are
never followed: a folder run holding one is refused, and ``make class-zip`` leaves out a chapter holding one.

**Written whole, under a lock.** ``make class-zip`` leaves out, and names with the reason, each chapter whose
folder is not exactly the files its provenance lists (a run that mixed two runs' tables, a symbolic link), and
writes its zip to a temporary name, renamed into place, under a lock on that zip (a second ``make class-zip``
of the same name waits for the first). ``make class`` writes its four files into a folder of its own, then
renames them into place under a lock, with ``gather.json`` (each file's SHA-256) last: a gather that fails
leaves the earlier gather's files as they were, and ``make html`` refuses a folder whose files are not the
ones its ``gather.json`` records (:func:`gathered_problem`).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import functools
import hashlib
import io
import json
import math
import os
import re
import shutil
import stat
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from filelock import FileLock, Timeout

from lib.claims import VERDICTS
from lib.make.outputs import check_finished
from lib.paths import REPO_ROOT
from lib.runs import folder_problem, read_provenance

CLASS_DIR = REPO_ROOT / "build" / "class"
EXAMPLE_RUNS = REPO_ROOT / "data" / "classroom" / "runs"
"""Two real quick-mode runs of the book on the development machine (1 and 2 threads), committed as an
example of class results and used by the tests."""

CHAPTER = re.compile(r"^\d\d_[a-z0-9_]+$")

ZIP_LIMITS = {"bytes": 64 * 2**20, "files": 2000, "depth": 6}
"""The most a student's zip may expand to: 64 MiB, 2,000 files, paths 6 folders deep. A whole book's run is
about 1 MiB in about 150 files, ``data/<chapter>/<table>.csv`` 3 deep."""
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")

MAX_CLAIMS = 50
"""The most claims one chapter's ``claims.csv`` may hold (a chapter of the book records at most about 20)."""

BOOK_CHAPTERS = frozenset([p.stem for p in (REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.py")]
                          + ["00_machine", "01_two_phases", "02_prefill_sweep", "03_decode_sweep", "04_request_split",
                             "05_interference", "06_roofline", "07_over_the_wire", "08_cheaper_decode",
                             "09_many_requests"])
"""The chapters a run of the book can hold (this checkout's, and the ten it has had since chapter 0)."""

PROVENANCE_FIELDS: dict[str, tuple] = {
    "section": (str,), "device": (str,), "device_name": (str,), "torch": (str,), "git_commit": (str,),
    "model": (str,), "date": (str,), "quick": (bool,), "torch_threads": (int, 1, 100_000),
    "cpu_count": (int, 1, 100_000), "wall_time_s": (float, 0.0, 1e6), "files": (list,),
}
PROVENANCE_PATTERNS: dict[str, tuple[re.Pattern, str]] = {
    "git_commit": (re.compile(r"[0-9a-f]{7,40}(\+dirty| \(.*\))?|unknown|none"), "a commit's hex digits"),
    "date": (re.compile(r"\d{4}-\d\d-\d\d([ T][0-9:.+\-Z]*)?"), "an ISO date (2026-12-04T21:50:00)"),
    "torch": (re.compile(r"\d{1,3}\.\d{1,3}(\.\d{1,3})?([.+\-]?[0-9A-Za-z.]+)?"), "a torch version (2.13.0+cpu)"),
}
"""What a text field of the provenance looks like when a run of the book wrote it."""
"""The provenance fields a class comparison reads, with their type (and for a number, its lowest and highest
plausible value); a text field holds at most :data:`TEXT_MAX` characters."""
TEXT_MAX = 300
_KIND_NAMES = {int: "a whole number", float: "a number"}

PLAUSIBLE: dict[str, tuple[float, float, str]] = {
    "bandwidth_gb_s": (0.1, 2e4, "GB/s: a bandwidth is above 0.1 (a machine slower cannot run the book) and at "
                                 "most 20,000, above any machine's (an H200's memory streams 4,800)"),
    "matmul_gflop_s": (0.1, 1e7, "GFLOP/s: above 0.1 and at most 10,000,000 (10 PFLOP/s), above any machine's peak"),
    "ttft_ms": (0.05, 3.6e6, "ms: a request's first token takes more than 0.05 ms (a whole forward pass of the "
                             "model) and under an hour"),
    "decode_step_ms": (0.01, 3.6e6, "ms: a step takes more than 0.01 ms (a whole forward pass) and under an hour"),
    "tpot_ms": (0.01, 3.6e6, "ms: a step takes more than 0.01 ms (a whole forward pass) and under an hour"),
    "prefill_tokens_per_s": (0.0, 1e9, "tokens/s: above 0 and at most 1,000,000,000"),
    "book_run_s": (0.0, 7 * 86400.0, "s: a book's run takes more than 0 s and less than a week"),
}
"""For each number the comparison shows: (above, at most, unit and why); a value outside, or not finite, is
flagged instead of shown."""
ON_A_CPU: dict[str, tuple[float, str]] = {
    "bandwidth_gb_s": (2e3, "GB/s on a CPU: at most 2,000, above any CPU's memory (a socket with 12 channels of "
                            "DDR5 streams about 600, one with on-package HBM about 1,000)"),
    "matmul_gflop_s": (1e5, "GFLOP/s on a CPU: at most 100,000, above any CPU's peak"),
}
"""A tighter ceiling for a number measured on a CPU (the run's provenance says ``device`` is ``cpu``)."""


TORCH_PIN = re.search(r'"torch==([^"]+)"', (REPO_ROOT / "pyproject.toml").read_text()).group(1)
"""The torch this book pins (``pyproject.toml``): a run on another is flagged, its numbers from another build."""


class BadRun(ValueError):
    """A student's file that cannot be gathered: ``str()`` is one line naming the file and what was wrong."""


@dataclass
class Run:
    """One machine's results: its name and its ``data/`` folder (with ``timings.csv`` beside it)."""

    name: str
    data: Path
    timings: pd.DataFrame | None = None
    provenance: dict[str, dict] = field(default_factory=dict)
    source: Path | None = None  # what the teacher named: the zip or folder
    excluded: dict[str, str] = field(default_factory=dict)  # chapter: why its tables are not used
    flags: list[str] = field(default_factory=list)  # what was not believed, one line each
    unknown_claims: dict[str, set[str]] = field(default_factory=dict)  # chapter: claims no chapter of the book decides

    def table(self, chapter: str, name: str) -> pd.DataFrame | None:
        """``data/<chapter>/<name>.csv``, ``None`` when the run has no such table (or its chapter was left
        out: :attr:`excluded`); :class:`BadRun` naming the file when it is there but is not a table."""
        path = self.data / chapter / f"{name}.csv"
        if chapter in self.excluded or not path.is_file() or path.is_symlink():
            return None
        return _read_table(path, self._shown(path))

    def _shown(self, path: Path) -> str:
        """``path`` as the teacher knows it: inside the zip or folder they named."""
        if self.source is None:
            return str(path)
        inside = path.relative_to(self.data.parent).as_posix() if path.is_relative_to(self.data.parent) else path.name
        return f"{self.source}: {inside}"

    def chapters(self) -> list[str]:
        return sorted(p.name for p in self.data.iterdir() if p.is_dir() and not p.is_symlink()
                      and CHAPTER.match(p.name) and p.name not in self.excluded)


# ---------------------------------------------------------------------------------------------------
# Packing one run (the student's side)


def chapter_times(notebooks: Path) -> pd.DataFrame:
    """Each executed notebook's run time in seconds, from papermill's ``duration`` in its metadata."""
    import nbformat

    rows = []
    for path in sorted(notebooks.glob("[0-9][0-9]_*.ipynb")):
        if path.is_symlink():
            continue
        try:
            meta = nbformat.read(path, as_version=4).metadata.get("papermill", {})
        except Exception:  # an unreadable notebook has no time to report
            continue
        if meta.get("duration") is not None:
            rows.append(dict(chapter=path.stem, seconds=round(float(meta["duration"]), 2),
                             started=meta.get("start_time")))
    return pd.DataFrame(rows, columns=["chapter", "seconds", "started"])


PACK_WAIT_S = 120.0
"""How long ``make class-zip`` waits for another one writing the same zip before it says so and stops."""


def _stderr(line: str) -> None:
    print(f"lib.make.classroom: {line}", file=sys.stderr)


def _chapter_files(chapter: Path) -> list[Path]:
    """The plain files of a chapter's folder, in order (no link is followed: :func:`lib.runs.folder_problem`
    has refused any)."""
    found = []
    for directory, _, names in os.walk(chapter):
        found += [Path(directory, n) for n in names if not (n.startswith(".") and n.endswith(".tmp"))]
    return sorted(p for p in found if p.is_file() and not p.is_symlink())


def _committed_run(root: Path) -> str | None:
    """Where ``root`` is the book's own checkout and its ``data/`` is exactly as committed (no chapter re-run
    here), the committed run's machine and date, in a few words; else ``None``."""
    import subprocess

    if Path(root).resolve() != REPO_ROOT.resolve():
        return None
    try:
        changed = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--", "data"], capture_output=True,
                                 text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if changed.returncode != 0 or changed.stdout.strip():
        return None
    records = [read_provenance(p)[0] for p in sorted((root / "data").glob("[0-9][0-9]_*")) if p.is_dir()]
    records = [r for r in records if isinstance(r, dict)]
    if not records:
        return None
    return f"measured on {records[0].get('device_name', 'another machine')}, {str(records[0].get('date', ''))[:10]}"


def _snapshot(chapter: Path, tries: int = 5) -> tuple[dict[str, bytes] | None, str | None]:
    """The chapter's files as bytes, read at one moment, and ``None``; or ``None`` and why the chapter cannot be
    sent. The bytes read are checked as a whole, copied apart, against the provenance read with them
    (:func:`lib.runs.folder_problem`): a run of the chapter that finished while they were read leaves two runs'
    files, and they are read again, up to ``tries`` times."""
    problem = folder_problem(chapter)
    if problem:
        return None, problem
    for _ in range(tries):
        try:
            files = {p.relative_to(chapter).as_posix(): p.read_bytes() for p in _chapter_files(chapter)}
        except OSError as error:  # a file replaced between listing and reading it
            problem = f"{_first_line(error)} while it was read"
        else:
            with tempfile.TemporaryDirectory() as tmp:
                copy = Path(tmp) / chapter.name
                for name, content in files.items():
                    (copy / name).parent.mkdir(parents=True, exist_ok=True)
                    (copy / name).write_bytes(content)
                problem = folder_problem(copy)
            if problem is None:
                return files, None
        time.sleep(0.2)
    return None, f"{problem} (a run of it was finishing while it was read: pack again once it has)"


def pack(root: Path, out: Path, log=_stderr) -> Path:
    """Zip a run's ``data/`` (not ``data/reference``) and ``timings.csv`` into ``out``; return ``out``.

    ``root`` is the book's folder after ``make book``, or ``build/quick`` after ``make quick``. Refused
    (:class:`lib.make.outputs.Unfinished`) while a chapter's replacement there is unfinished. A chapter whose
    folder is not exactly the files its provenance lists (:func:`lib.runs.folder_problem`: tables of two runs,
    a symbolic link) is left out, and ``log`` gets one line naming it and why. The zip is written whole: to a
    temporary name, renamed into place, under a lock on ``out`` (a second pack of the same zip waits)."""
    check_finished(root, "make class-zip")
    data = root / "data"
    committed = _committed_run(root)
    if committed:
        raise ValueError(f"{data} holds the book's committed run ({committed}), not a run of this machine: after "
                         "make quick, send make class-zip QUICK=1; after make book, make class-zip packs your run")
    if data.is_symlink():
        raise ValueError(f"{data} is a symbolic link; make class-zip packs a run's own folder, never a link's target")
    chapters = sorted(p for p in data.glob("[0-9][0-9]_*") if p.is_dir() or p.is_symlink()) if data.is_dir() else []
    if not chapters:
        raise ValueError(f"{data} holds no chapter results (data/NN_name/); run make book or make quick first")
    packed, left_out, snapshots = [], [], {}
    for chapter in chapters:
        snapshots[chapter], problem = _snapshot(chapter)
        if problem:
            left_out.append(f"left {chapter.name} out of the zip: {problem}; run the chapter again to send it")
        else:
            packed.append(chapter)
    if not packed:
        raise ValueError(f"{data}: no chapter can be sent ({left_out[0]})")
    times = chapter_times(root / "notebooks")
    if times.empty and (root / "timings.csv").is_file() and not (root / "timings.csv").is_symlink():
        times = _timings(root / "timings.csv", str(root / "timings.csv"))  # re-packing a run that was sent before
    times = times[times.chapter.isin([c.name for c in packed])]
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with FileLock(out.with_name(f".{out.name}.lock"), timeout=PACK_WAIT_S, thread_local=False):
            fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
            os.close(fd)
            try:
                with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
                    for chapter in packed:  # the bytes checked, not the folder as it is now
                        for name, content in sorted(snapshots[chapter].items()):
                            archive.writestr(f"data/{chapter.name}/{name}", content)
                    archive.writestr("timings.csv", spreadsheet_safe(times).to_csv(index=False))
                os.chmod(tmp, 0o644)
                os.replace(tmp, out)
            finally:
                if os.path.exists(tmp):
                    os.remove(tmp)
    except Timeout:
        raise ValueError(f"{out}: another make class-zip has been writing this zip for {PACK_WAIT_S:.0f} s; wait "
                         f"for it to finish, or give this one another name (NAME=...)") from None
    for line in left_out:
        log(line)
    return out


# ---------------------------------------------------------------------------------------------------
# Reading runs (the teacher's side)


def _find_data(folder: Path) -> Path | None:
    """The ``data/`` folder of a run: ``folder/data``, ``folder`` itself, or one level down. :class:`BadRun` for a
    folder that holds several runs one level down (each is gathered on its own, not the first of them)."""
    def is_run(candidate: Path) -> bool:
        return candidate.is_dir() and any(CHAPTER.match(p.name) for p in candidate.iterdir() if p.is_dir())

    for candidate in (folder / "data", folder):
        if is_run(candidate):
            return candidate
    below = [p / "data" for p in sorted(folder.iterdir()) if p.is_dir() and is_run(p / "data")]
    if len(below) > 1:
        raise BadRun(f"{_text(str(folder))}: holds {len(below)} runs ({', '.join(_text(p.parent.name) for p in below[:4])}"
                     f"{' ...' if len(below) > 4 else ''}); give each folder or zip to make class on its own")
    return below[0] if below else None


def _read_table(path: Path, shown: str) -> pd.DataFrame:
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise BadRun(f"{shown}: an empty file, not a table") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError, OSError) as error:
        raise BadRun(f"{shown}: not a readable table ({_first_line(error)})") from None


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:200]


def _timings(path: Path, shown: str) -> pd.DataFrame:
    """A run's ``timings.csv`` (chapter, seconds), checked."""
    frame = _read_table(path, shown)
    missing = {"chapter", "seconds"} - set(frame.columns)
    if missing:
        raise BadRun(f"{shown}: no {', '.join(sorted(missing))} column (it has {', '.join(map(str, frame.columns))})")
    seconds = pd.to_numeric(frame["seconds"], errors="coerce")
    if seconds.isna().any() or (seconds < 0).any() or not seconds.map(math.isfinite).all():
        raise BadRun(f"{shown}: its seconds are not all finite numbers of at least 0")
    twice = frame.chapter[frame.chapter.duplicated()]
    if len(twice):
        raise BadRun(f"{shown}: chapter {twice.iloc[0]!r} is timed twice; a run times each chapter once")
    return frame.assign(seconds=seconds)


def _unpack(path: Path, folder: Path) -> None:
    """Unpack the zip ``path`` into ``folder`` (new, empty), member by member, within :data:`ZIP_LIMITS`;
    :class:`BadRun` naming the zip for anything else."""
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise BadRun(f"{path}: not a zip file (make class-zip writes one)") from None
    except UnicodeDecodeError:
        raise BadRun(f"{path}: a file name inside it says it is UTF-8 and is not; make class-zip writes plain "
                     f"ASCII names") from None
    with archive:
        members = archive.infolist()
        if not any(not m.is_dir() for m in members):
            raise BadRun(f"{path}: an empty zip (no files inside)")
        files = [m for m in members if not m.is_dir()]
        names = [m.filename.replace("\\", "/") for m in files]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise BadRun(f"{path}: holds {twice[0]!r} more than once; which copy is the run's? make class-zip "
                         f"writes each file once")
        if len(files) > ZIP_LIMITS["files"]:
            raise BadRun(f"{path}: holds {len(files):,} files, more than the {ZIP_LIMITS['files']:,} a run may have")
        declared = sum(m.file_size for m in files)
        if declared > ZIP_LIMITS["bytes"]:
            raise BadRun(f"{path}: would expand to {declared / 2**20:,.0f} MiB, more than the "
                         f"{ZIP_LIMITS['bytes'] / 2**20:.0f} MiB a run may have")
        root, written = folder.resolve(), 0
        for member in members:
            parts = Path(member.filename.replace("\\", "/")).parts
            if member.filename.startswith(("/", "\\")) or ".." in parts or (parts and ":" in parts[0]):
                raise BadRun(f"{path}: unsafe path {member.filename!r} in the zip (it would be written outside "
                             f"the folder it is unpacked into)")
            if len(parts) > ZIP_LIMITS["depth"]:
                raise BadRun(f"{path}: {member.filename!r} is {len(parts)} levels deep, more than the "
                             f"{ZIP_LIMITS['depth']} a run's files are")
            target = (folder / Path(*parts)) if parts else folder
            if not target.resolve().is_relative_to(root):
                raise BadRun(f"{path}: unsafe path {member.filename!r} in the zip")
            if member.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            if stat.S_ISLNK(member.external_attr >> 16):
                raise BadRun(f"{path}: {member.filename!r} is a symbolic link; a run's files are plain files")
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                with archive.open(member) as source, open(target, "wb") as sink:
                    for block in iter(lambda: source.read(1 << 20), b""):
                        written += len(block)
                        if written > ZIP_LIMITS["bytes"]:
                            raise BadRun(f"{path}: expands past {ZIP_LIMITS['bytes'] / 2**20:.0f} MiB (more "
                                         f"than it declares), more than a run may have")
                        sink.write(block)
            except (zipfile.BadZipFile, EOFError, NotImplementedError, RuntimeError, ValueError) as error:
                if isinstance(error, BadRun):
                    raise
                raise BadRun(f"{path}: {member.filename!r} cannot be unpacked ({_first_line(error)})") from None


def load_run(path: Path, scratch: Path) -> Run:
    """Read a zip or folder a student sent; a zip is unpacked into a new folder of its own under
    ``scratch``. Raises :class:`BadRun` (one line naming the file) for anything that is not a readable run."""
    path = Path(path)
    if not path.exists():
        raise BadRun(f"{path}: no such file or folder")
    name = _text(path.stem if path.is_file() else path.name)
    try:
        if path.is_file():
            folder = Path(tempfile.mkdtemp(prefix=f"{re.sub(r'[^A-Za-z0-9_.-]+', '-', name)[:40]}-", dir=scratch))
            _unpack(path, folder)
        elif path.is_dir():
            folder = path
        else:
            raise BadRun(f"{path}: neither a folder nor a .zip of a run")
        data = _find_data(folder)
    except OSError as error:
        raise BadRun(f"{path}: cannot be read ({error.strerror or _first_line(error)})") from None
    if data is None:
        raise BadRun(f"{path}: no data/NN_chapter/ folders inside; is this a run of the book?")
    link = next((p for p in [data, data.parent / "timings.csv", *_walk(data)] if p.is_symlink()), None)
    if link is not None:
        raise BadRun(f"{_text(str(link))}: a symbolic link in the run; a run's files are plain files, and no link "
                     f"is followed")
    if name == "data":
        name = data.parent.name
    run = Run(name=name, data=data, source=path)
    timings_path = data.parent / "timings.csv"
    if timings_path.is_file():
        run.timings = _timings(timings_path, run._shown(timings_path))
    for chapter in run.chapters():
        prov = data / chapter / "provenance.json"
        problem = (f"no chapter of the book is named {chapter}" if chapter not in BOOK_CHAPTERS else
                   None if prov.is_file() else "no provenance.json, so nothing says which run wrote its tables")
        if problem:  # none of its numbers or claims is used
            run.excluded[chapter] = problem
            run.flags.append(f"{run._shown(data / chapter)}: left out: {problem}")
            continue
        try:
            record = json.loads(prov.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError, OSError) as error:
            raise BadRun(f"{run._shown(prov)}: not readable JSON ({_first_line(error)})") from None
        if not isinstance(record, dict):
            raise BadRun(f"{run._shown(prov)}: not a provenance record (a JSON object of device, threads, ...), "
                         f"but a JSON {type(record).__name__}")
        _check_provenance(record, run._shown(prov))
        problem = folder_problem(data / chapter)
        if problem:  # the chapter is not one run's files: none of its numbers is used
            run.excluded[chapter] = problem
            run.flags.append(f"{run._shown(data / chapter)}: left out: {problem}")
            continue
        run.provenance[chapter] = record
    if run.timings is not None:  # a time for a chapter this run does not hold, or holds unusable, is not its book's
        absent = sorted(set(run.timings.chapter) - set(run.provenance) - set(run.excluded))  # those left out: flagged
        if absent:
            run.flags.append(f"{run._shown(timings_path)}: left out of the book's time: "
                             f"{', '.join(_text(str(c)) for c in absent[:4])}{' ...' if len(absent) > 4 else ''} (no "
                             "results of that chapter in this run)")
        run.timings = run.timings[run.timings.chapter.isin(list(run.provenance))]
    for chapter in run.chapters():
        claims_path = data / chapter / "claims.csv"
        if claims_path.is_file():
            frame = _read_table(claims_path, run._shown(claims_path))
            _check_claims(frame, run._shown(claims_path))
            unknown = sorted({_text(str(c)) for c in frame.claim if not book_claims(chapter).fullmatch(str(c))})
            if unknown:  # a claim the book never decides is not counted nor shown as the book's
                run.unknown_claims[chapter] = set(unknown)
                run.flags.append(f"{run._shown(claims_path)}: left out: {len(unknown)} claim(s) no chapter of the "
                                 f"book decides ({', '.join(repr(c[:40]) for c in unknown[:3])}"
                                 f"{' ...' if len(unknown) > 3 else ''})")
    return run


@functools.lru_cache(maxsize=None)
def book_claims(chapter: str) -> re.Pattern:
    """The claim ids a run of ``chapter`` can record: those of the book's committed run and example runs (made by
    earlier versions of the book, some under names since changed), and every id its source
    (or the library) decides, an f-string's ``{...}`` standing for any snake_case part (``engine_adds_to_ttft_{tag}``)."""
    names: set[str] = set()
    for committed in [REPO_ROOT / "data" / chapter / "claims.csv", *EXAMPLE_RUNS.glob(f"*/data/{chapter}/claims.csv")]:
        names |= {re.escape(str(c)) for c in pd.read_csv(committed).claim}
    sources = [REPO_ROOT / "notebooks" / f"{chapter}.py", *sorted((REPO_ROOT / "lib").glob("*.py"))]
    for source in sources:
        if source.is_file():
            names |= {_pattern_of(literal) for literal in re.findall(r'decide\(\s*f?"([^"]+)"', source.read_text())}
    return re.compile("|".join(sorted(names)) or "(?!)")


def _pattern_of(literal: str) -> str:
    """A ``decide`` literal as a pattern: its text as is, each ``{...}`` any snake_case part."""
    parts = re.split(r"\{[^}]*\}", literal)
    return "[a-z0-9_]+".join(re.escape(part) for part in parts)


def _walk(folder: Path):
    """Every path under ``folder``, links included and never followed."""
    for directory, dirs, names in os.walk(folder):
        for name in [*dirs, *names]:
            yield Path(directory, name)


def _text(value: str) -> str:
    """``value`` as text every file can hold: a name the file system gave as undecodable bytes, or a lone
    surrogate from a JSON escape, becomes U+FFFD."""
    return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace") if isinstance(value, str) else value


def _check_provenance(record: dict, shown: str) -> None:
    """:class:`BadRun` naming the field unless each field of :data:`PROVENANCE_FIELDS` that ``record`` has is
    of its type and within its range."""
    for key, (kind, *limits) in PROVENANCE_FIELDS.items():
        if key not in record or record[key] is None:
            continue
        value = record[key]
        if kind is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        elif kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = isinstance(value, kind)
        if not ok:
            raise BadRun(f"{shown}: {key} is {_text(repr(value))[:60]} (a JSON {type(value).__name__}); a run of the "
                         f"book writes {_KIND_NAMES.get(kind) or 'a ' + kind.__name__} there")
        if limits and not (math.isfinite(value) and limits[0] <= value <= limits[1]):
            raise BadRun(f"{shown}: {key} is {value!r}, outside {limits[0]:g} to {limits[1]:g}, what any run writes")
        if kind is str and len(value) > TEXT_MAX:
            raise BadRun(f"{shown}: {key} is {len(value):,} characters long; a run of the book writes at most "
                         f"{TEXT_MAX}")
        if kind is list and key == "files" and not all(isinstance(f, str) for f in value):
            raise BadRun(f"{shown}: files is not a list of file names")
        pattern = PROVENANCE_PATTERNS.get(key)
        if pattern and not pattern[0].fullmatch(value):
            raise BadRun(f"{shown}: {key} is {_text(value)[:60]!r}; a run of the book writes {pattern[1]} there")
    threads, cores = record.get("torch_threads"), record.get("cpu_count")
    if isinstance(threads, int) and isinstance(cores, int) and not isinstance(threads, bool) and 0 < cores < threads:
        raise BadRun(f"{shown}: torch_threads is {threads} on a machine whose cpu_count is {cores}; a run of the book "
                     "uses at most the cores it has")
    date = record.get("date")
    if isinstance(date, str) and date[:10] > (_dt.date.today() + _dt.timedelta(days=1)).isoformat():
        raise BadRun(f"{shown}: date is {_text(date)[:30]!r}, after today; a run of the book writes the day it ran")


def _check_claims(frame: pd.DataFrame, shown: str) -> None:
    """:class:`BadRun` for a ``claims.csv`` of more than :data:`MAX_CLAIMS` claims, or naming a claim twice."""
    if len(frame) > MAX_CLAIMS:
        raise BadRun(f"{shown}: {len(frame):,} claims, more than the {MAX_CLAIMS} a chapter of the book records")
    if not {"claim", "verdict"} <= set(frame.columns):
        raise BadRun(f"{shown}: no {' and no '.join(sorted({'claim', 'verdict'} - set(frame.columns)))} column; a "
                     f"chapter's claims.csv names each claim and its verdict")
    odd = frame.verdict[~frame.verdict.isin(VERDICTS)]
    if len(odd):
        raise BadRun(f"{shown}: verdict {_text(str(odd.iloc[0]))[:60]!r} is not one of the book's "
                     f"({', '.join(VERDICTS)})")
    if "claim" in frame.columns:
        twice = frame.claim[frame.claim.duplicated()]
        if len(twice):
            raise BadRun(f"{shown}: claim {_text(str(twice.iloc[0]))[:60]!r} is recorded twice; a chapter decides "
                         f"each claim once")


def run_digest(run: Run) -> str:
    """SHA-256 over every file of a run's ``data/`` (its path inside and its bytes): two runs with the same
    digest are the same results sent twice."""
    digest = hashlib.sha256()
    for path in sorted(p for p in _walk(run.data) if p.is_file() and not p.is_symlink()):
        digest.update(path.relative_to(run.data).as_posix().encode(errors="replace") + b"\0" + path.read_bytes())
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------------
# What to compare, and where each number comes from


def _numeric(frame: pd.DataFrame, pattern: str) -> tuple[str | None, str | None]:
    """(the first column whose name matches ``pattern``, case-insensitive, that holds numbers; what is wrong
    when that column also holds a text cell, naming the cell). A column of text only is no number's: where no
    matching column holds a number, the first of text is returned with what is wrong with it."""
    all_text = None
    for column in frame.columns:
        if not re.search(pattern, str(column), re.IGNORECASE):
            continue
        if pd.api.types.is_numeric_dtype(frame[column]) and not pd.api.types.is_bool_dtype(frame[column]):
            return column, None
        values = pd.to_numeric(frame[column], errors="coerce")
        text = frame[column][values.isna() & frame[column].notna()]
        if values.notna().any() and len(text):
            return column, (f"{column} holds text ({_text(str(text.iloc[0]))[:40]!r} in row {int(text.index[0]) + 2}) "
                            f"among its numbers")
        if len(text) and all_text is None:
            all_text = (column, f"{column} holds text only ({_text(str(text.iloc[0]))[:40]!r} in row "
                                f"{int(text.index[0]) + 2}), where a run of the book writes numbers")
    if all_text:
        return all_text
    return None, None


def _main_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of the book's main configuration: fp32 (or float32) at the most threads measured."""
    if "dtype" in frame.columns:
        fp32 = frame[frame["dtype"].astype(str).isin(["fp32", "float32"])]
        frame = fp32 if len(fp32) else frame
    if "threads" in frame.columns and frame["threads"].notna().any():
        frame = frame[frame["threads"] == frame["threads"].max()]
    return frame


def _plausible(metric: str, values: pd.Series, on_cpu: bool = False) -> str | None:
    """What is implausible in ``values`` for ``metric`` (:data:`PLAUSIBLE`; on a CPU, :data:`ON_A_CPU` where it
    has the metric), naming the first value; ``None``."""
    low, high, why = PLAUSIBLE[metric]
    if on_cpu and metric in ON_A_CPU and any(math.isfinite(v) and low < v <= high and v > ON_A_CPU[metric][0]
                                             for v in values):
        high, why = ON_A_CPU[metric]  # within any machine's bounds, beyond any CPU's
    for index, value in values.items():
        if not (math.isfinite(value) and low < value <= high):
            return f"{value:g} in row {int(index) + 2} is implausible ({why})" if math.isfinite(value) else \
                f"{value} in row {int(index) + 2} is not a finite number"
    return None


def _from_tables(run: Run, candidates: list[tuple], metric: str | None = None) -> tuple[float | None, str]:
    """Try ``(chapter, table, column pattern, how, scale, where)`` in order: keep the rows matching
    ``where`` (column: value), then the main rows (see :func:`_main_rows`), reduce the column with ``how``
    (``max``, ``min``, ``median``) and multiply by ``scale``. Return (value, where it came from). A column
    holding text among its numbers, or a value that :data:`PLAUSIBLE` does not allow for ``metric``, gives
    no value but a source that starts with ``flagged:`` and says why."""
    for chapter, table, pattern, how, scale, where in candidates:
        frame = run.table(chapter, table)
        if frame is None or frame.empty:
            continue
        column, problem = _numeric(frame, pattern)
        if column is None or any(key not in frame.columns for key in where):
            continue
        if problem:
            return None, f"flagged: {chapter}/{table}.csv: {problem}"
        for key, value in where.items():
            frame = frame[frame[key].astype(str) == value]
        rows = _main_rows(frame).dropna(subset=[column])
        if rows.empty:
            continue
        if metric in PLAUSIBLE:
            on_cpu = str((run.provenance.get(chapter) or {}).get("device", "")).startswith("cpu")
            problem = _plausible(metric, rows[column].astype(float) * scale, on_cpu)
            if problem:
                return None, f"flagged: {chapter}/{table}.csv: {column}: {problem}"
        value = float(getattr(rows[column], how)()) * scale
        condition = "".join(f", {k}={v}" for k, v in where.items())
        return value, f"{chapter}/{table}.csv: {column} ({how}{condition})"
    return None, "not measured in this run"


# (column in the comparison, unit, candidates); the first table that has the number wins, so chapter 0's
# one measurement of the machine is preferred, and older runs (before chapter 0 existed) still compare.
METRICS: list[tuple[str, str, list[tuple]]] = [
    ("bandwidth_gb_s", "GB/s", [
        ("00_machine", "ceilings", r"^gb_s$", "max", 1.0, {"kernel": "read"}),  # chapter 0 as it writes it now
        ("00_machine", "ceilings", r"^bandwidth_gb_s$", "max", 1.0, {"kernel": "read"}),
        ("06_roofline", "machine", r"^bandwidth_gb_s$", "max", 1.0, {}),
        ("03_decode_sweep", "ceilings", r"bandwidth", "max", 1.0, {}),
    ]),
    ("matmul_gflop_s", "GFLOP/s", [
        ("00_machine", "ceilings", r"^gflop_s$", "max", 1.0, {"kernel": "square_matmul"}),  # as it writes it now
        ("00_machine", "ceilings", r"^gflop_s$", "max", 1.0, {"kernel": "matmul"}),
        ("06_roofline", "machine", r"^gflop_s$", "max", 1.0, {}),
        ("03_decode_sweep", "ceilings", r"gflop", "max", 1.0, {}),
    ]),
    ("ttft_ms", "ms", [("01_two_phases", "request_metrics", r"^ttft_ms$", "median", 1.0, {}),
                       ("01_two_phases", "request_metrics", r"^ttft$", "median", 1e3, {})]),
    ("decode_step_ms", "ms", [("03_decode_sweep", "decode_sweep", r"^step_ms$", "median", 1.0, {})]),
    ("tpot_ms", "ms", [("01_two_phases", "request_metrics", r"^tpot_ms$", "median", 1.0, {}),
                       ("01_two_phases", "request_metrics", r"^tpot$", "median", 1e3, {})]),
    ("prefill_tokens_per_s", "tokens/s", [("02_prefill_sweep", "prefill_sweep", r"tokens_per_s", "max", 1.0, {})]),
]
"""What the comparison reports. Bandwidth is STREAM's read and the FLOP rate a large matrix product, at the
most threads in fp32 (chapter 0). TTFT and TPOT are SmolLM2's (chapter 1); the decode step is the median
over the contexts chapter 3 measured, and the prefill rate the best tokens per second of chapter 2, both fp32
at the most threads, on GPT-2 small (the tiny GPT-2 in quick mode)."""


def claims(run: Run) -> pd.DataFrame:
    """Every claim the run recorded: chapter, claim, verdict (``held``, ``did not hold``, ``not measured``)."""
    frames = []
    for chapter in run.chapters():
        frame = run.table(chapter, "claims")
        if frame is not None and {"claim", "verdict"} <= set(frame.columns):
            frame = frame[~frame.claim.astype(str).map(_text).isin(run.unknown_claims.get(chapter, set()))]
            frames.append(frame.assign(chapter=chapter)[["chapter", "claim", "verdict"]])
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["chapter", "claim", "verdict"])


def machine(run: Run) -> dict[str, object]:
    """Device, its name, threads, CPU count, torch version, mode and commit, from the run's provenance
    (the most common value across its chapters; threads as the distinct values seen)."""
    records = list(run.provenance.values())

    def common(key):
        values = [_text(r.get(key)) for r in records if r.get(key) is not None]
        return max(set(map(str, values)), key=[str(v) for v in values].count) if values else None

    threads = sorted({str(r["torch_threads"]) for r in records if r.get("torch_threads") is not None},
                     key=lambda t: (not t.isdigit(), int(t) if t.isdigit() else 0, t))
    return dict(run=run.name, device=common("device"), device_name=common("device_name"),
                threads=",".join(map(str, threads)) or None, cpu_count=common("cpu_count"),
                torch=common("torch"), quick=common("quick"), commit=common("git_commit"),
                chapters=len(run.chapters()))


def compare(runs: list[Run]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(comparison, sources, claims): one row per run; where each number came from; every claim's
    verdict per run (runs as columns)."""
    rows, sources, verdicts, seen = [], [], [], {}
    for run in runs:
        digest = run_digest(run)
        if digest in seen:
            run.flags.append(f"{run.source or run.data}: the same files as {seen[digest]}'s: sent twice, not "
                             f"another machine")
        seen.setdefault(digest, run.name)
        try:
            row, run_sources, found = _compare_one(run)
        except BadRun:
            raise
        except Exception as error:  # a table whose contents no run of the book writes
            raise BadRun(f"{run.source or run.data}: its tables cannot be compared ({type(error).__name__}: "
                         f"{_first_line(error)})") from None
        rows.append(row)
        sources += run_sources
        verdicts.append(found.assign(run=run.name))
    comparison = pd.DataFrame(rows)
    all_claims = pd.concat(verdicts, ignore_index=True) if verdicts else pd.DataFrame()
    if len(all_claims):
        all_claims = all_claims.pivot_table(index=["chapter", "claim"], columns="run", values="verdict",
                                            aggfunc="first").reset_index()
    return comparison, pd.DataFrame(sources), all_claims


def _compare_one(run: Run) -> tuple[dict, list[dict], pd.DataFrame]:
    """One run's row of the comparison, where each number came from, and its claims."""
    sources, row, flagged = [], machine(run), []
    for column, unit, candidates in METRICS:
        value, source = _from_tables(run, candidates, column)
        row[column] = value
        sources.append(dict(run=run.name, metric=column, unit=unit, source=source))
        if source.startswith("flagged: "):
            flagged.append(column)
            run.flags.append(f"{run.source or run.data}: {column}: {source.removeprefix('flagged: ')}")
    torch_version = row.get("torch")
    if torch_version is not None and str(torch_version).split("+")[0] != TORCH_PIN:
        flagged.append("torch")
        run.flags.append(f"{run.source or run.data}: torch: {torch_version} is not the torch {TORCH_PIN} this book pins "
                         f"(pyproject.toml), so its numbers came from another build of the library")
    found = claims(run)
    row["claims_held"] = int((found.verdict == "held").sum())
    row["claims_recorded"] = len(found)
    if run.timings is not None and len(run.timings):
        total = float(run.timings["seconds"].sum())
        problem = _plausible("book_run_s", pd.Series([total]))
        if problem:
            flagged.append("book_run_s")
            run.flags.append(f"{run.source or run.data}: timings.csv: its chapters' seconds add up to {total:g}, "
                             f"implausible ({PLAUSIBLE['book_run_s'][2]})")
        row["book_run_s"] = None if problem else total
    row["flagged"] = ", ".join(flagged)
    row["flags"] = "; ".join(flag.split(": ", 1)[1] if flag.startswith(str(run.source or run.data)) else flag
                             for flag in run.flags)
    return row, sources, found


def plot(comparison: pd.DataFrame, path: Path) -> Path | None:
    """One bar chart per measured quantity, one bar per machine; ``None`` if nothing was measured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(c, u) for c, u, _ in METRICS if c in comparison and comparison[c].notna().any()]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3.4), squeeze=False)
    labels = [f"{r.run}\n({r.threads} thr)".replace("$", r"\$") for r in comparison.itertuples()]  # no mathtext
    for ax, (column, unit) in zip(axes[0], panels):
        ax.bar(labels, comparison[column].fillna(0.0), color="tab:blue")
        ax.set_title(column.replace("_", " "), fontsize=10)
        ax.set_ylabel(unit)
        ax.tick_params(axis="x", labelsize=7, rotation=30)
    fig.suptitle("What each machine in the class measured (missing bars: not measured)", fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def _safe_cell(value):
    value = _text(value)
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        try:
            float(value)  # "-1.5", "+3": a number written as text stays as it is
            return value
        except ValueError:
            return "'" + value
    return value


def spreadsheet_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every text cell and header that a spreadsheet would run as a formula (beginning with
    ``=``, ``+``, ``-``, ``@``, a tab or a carriage return) prefixed with ``'``; numbers, negative ones
    included, are left as numbers."""
    safe = frame.copy()
    safe.columns = [_safe_cell(str(c)) if isinstance(c, str) else c for c in safe.columns]
    for column in safe.columns:
        if safe[column].dtype == object or pd.api.types.is_string_dtype(safe[column]):
            safe[column] = safe[column].map(_safe_cell)
    return safe


def write_csv(frame: pd.DataFrame, path: Path) -> Path:
    """Write ``frame`` to ``path`` spreadsheet-safe (:func:`spreadsheet_safe`), without the index."""
    spreadsheet_safe(frame).to_csv(path, index=False)
    return path


GATHERED = ("comparison.csv", "sources.csv", "claims.csv", "comparison.png")
"""What ``make class`` writes, with ``gather.json`` (each one's SHA-256) beside them."""
GATHER_WAIT_S = 120.0


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def gathered_problem(folder: Path) -> str | None:
    """Why the class results in ``folder`` are not one gather's, or ``None``: each file ``gather.json`` records
    must be there with the bytes it records, and no other gathered file beside them (a folder without
    ``gather.json``, gathered before it was written, is not checked)."""
    record_path = folder / "gather.json"
    if not record_path.exists():
        return None
    try:
        record = json.loads(record_path.read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"{record_path} cannot be read; run make class again"
    for name in GATHERED:
        path = folder / name
        if name in record and (not path.is_file() or _sha256(path) != record[name]):
            return f"{path} is not the file of the gather {record_path.name} records; run make class again"
        if name not in record and path.exists():
            return f"{path} is left from another gather; run make class again"
    return None


def gather(paths: list[Path], out: Path = CLASS_DIR, log=None) -> pd.DataFrame:
    """Read every run in ``paths`` and write the comparison under ``out``; return the comparison.

    Each zip is unpacked into a folder of its own; two runs with the same name (two ``alice.zip`` from
    different folders, two ``data`` folders) get a number appended. :class:`BadRun` for a bad input, and then
    nothing under ``out`` has changed. ``log(line)`` gets one line per flagged number. The files are written
    whole and together (this module's docstring)."""
    if not paths:
        raise BadRun("name at least one run: a zip from make class-zip, or a folder holding data/")
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="class-", dir=out))
    try:
        runs, seen = [], {}
        for i, path in enumerate(paths):
            if not Path(path).exists():  # make splits DIRS at spaces: a name with one arrives in pieces
                joined = next((" ".join(map(str, paths[i:j])) for j in range(i + 2, len(paths) + 1)
                               if Path(" ".join(map(str, paths[i:j]))).exists()), None)
                if joined:
                    raise BadRun(f"{path}: no such file or folder, but {joined!r} is: a name with a space reaches "
                                 f"make class in pieces; rename it, or run python -m lib.make.classroom gather "
                                 f"\"{joined}\"")
            run = load_run(Path(path), scratch)
            count = seen[run.name] = seen.get(run.name, 0) + 1
            if count > 1:
                run.name = f"{run.name}-{count}"
            runs.append(run)
        comparison, sources, all_claims = compare(runs)
        for run in runs:
            for flag in run.flags:
                (log or _stderr)(f"{_text(flag)}; flagged, not shown as measured")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    try:
        with FileLock(out / ".gather.lock", timeout=GATHER_WAIT_S, thread_local=False):
            staging = Path(tempfile.mkdtemp(prefix=".gather-", dir=out))
            try:
                write_csv(comparison, staging / "comparison.csv")
                write_csv(sources, staging / "sources.csv")
                write_csv(all_claims, staging / "claims.csv")
                plot(comparison, staging / "comparison.png")
                files = {name: _sha256(staging / name) for name in GATHERED if (staging / name).exists()}
                (staging / "gather.json").write_text(json.dumps({"files": files}, indent=1) + "\n")
                for name in GATHERED:  # every file is ready: each rename is one step, gather.json last
                    if name in files:
                        os.replace(staging / name, out / name)
                    else:
                        (out / name).unlink(missing_ok=True)
                os.replace(staging / "gather.json", out / "gather.json")
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    except Timeout:
        raise BadRun(f"{out}: another make class has been writing here for {GATHER_WAIT_S:.0f} s; wait for it to "
                     f"finish") from None
    return comparison


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lib.make.classroom", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_pack = sub.add_parser("pack", help="zip this machine's results for the teacher")
    p_pack.add_argument("--root", type=Path, default=REPO_ROOT,
                        help="the run's root: the book (default) or build/quick")
    p_pack.add_argument("--name", default=None, help="the zip's name (default: the machine's host name)")
    p_pack.add_argument("--out", type=Path, default=None, help="the folder the zip goes to (default: build/class)")
    p_gather = sub.add_parser("gather", help="compare the runs of a class")
    p_gather.add_argument("runs", nargs="*", type=Path, help="zips or folders (default: build/class/*.zip)")
    p_gather.add_argument("--out", type=Path, default=CLASS_DIR)
    args = parser.parse_args(argv)
    try:
        if args.command == "pack":
            import socket

            name = re.sub(r"[^A-Za-z0-9_.-]+", "-", args.name or socket.gethostname()) or "run"
            path = pack(args.root, (args.out or CLASS_DIR) / f"{name}.zip")
            print(f"wrote {path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path}: "
                  f"send this file to your teacher")
        else:
            runs = args.runs or sorted(args.out.glob("*.zip"))
            comparison = gather(runs, args.out)
            with io.StringIO() as text:
                comparison.to_string(text, index=False)
                print(text.getvalue())
            print(f"wrote comparison.csv, sources.csv, claims.csv, comparison.png under {args.out}")
    except (ValueError, OSError) as error:  # BadRun, Unfinished, an unwritable output folder
        text = str(error) if isinstance(error, ValueError) else f"{getattr(error, 'filename', '') or ''}: " \
            f"{error.strerror or error}"
        print(f"lib.make.classroom: {text.splitlines()[0] if text else type(error).__name__}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
