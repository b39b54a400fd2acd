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
"""

from __future__ import annotations

import argparse
import io
import json
import math
import re
import shutil
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from lib.make.outputs import check_finished
from lib.paths import REPO_ROOT

CLASS_DIR = REPO_ROOT / "build" / "class"
EXAMPLE_RUNS = REPO_ROOT / "data" / "classroom" / "runs"
"""Two real quick-mode runs of the book on the development machine (1 and 2 threads), committed as an
example of class results and used by the tests."""

CHAPTER = re.compile(r"^\d\d_[a-z0-9_]+$")

ZIP_LIMITS = {"bytes": 64 * 2**20, "files": 2000, "depth": 6}
"""The most a student's zip may expand to: 64 MiB, 2,000 files, paths 6 folders deep. A whole book's run is
about 1 MiB in about 150 files, ``data/<chapter>/<table>.csv`` 3 deep."""
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


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

    def table(self, chapter: str, name: str) -> pd.DataFrame | None:
        """``data/<chapter>/<name>.csv``, ``None`` when the run has no such table; :class:`BadRun` naming the
        file when it is there but is not a table."""
        path = self.data / chapter / f"{name}.csv"
        if not path.is_file():
            return None
        return _read_table(path, self._shown(path))

    def _shown(self, path: Path) -> str:
        """``path`` as the teacher knows it: inside the zip or folder they named."""
        if self.source is None:
            return str(path)
        inside = path.relative_to(self.data.parent).as_posix() if path.is_relative_to(self.data.parent) else path.name
        return f"{self.source}: {inside}"

    def chapters(self) -> list[str]:
        return sorted(p.name for p in self.data.iterdir() if p.is_dir() and CHAPTER.match(p.name))


# ---------------------------------------------------------------------------------------------------
# Packing one run (the student's side)


def chapter_times(notebooks: Path) -> pd.DataFrame:
    """Each executed notebook's run time in seconds, from papermill's ``duration`` in its metadata."""
    import nbformat

    rows = []
    for path in sorted(notebooks.glob("[0-9][0-9]_*.ipynb")):
        try:
            meta = nbformat.read(path, as_version=4).metadata.get("papermill", {})
        except Exception:  # an unreadable notebook has no time to report
            continue
        if meta.get("duration") is not None:
            rows.append(dict(chapter=path.stem, seconds=round(float(meta["duration"]), 2),
                             started=meta.get("start_time")))
    return pd.DataFrame(rows, columns=["chapter", "seconds", "started"])


def pack(root: Path, out: Path) -> Path:
    """Zip a run's ``data/`` (not ``data/reference``) and ``timings.csv`` into ``out``; return ``out``.

    ``root`` is the book's folder after ``make book``, or ``build/quick`` after ``make quick``. Refused
    (:class:`lib.make.outputs.Unfinished`) while a chapter's replacement there is unfinished."""
    check_finished(root, "make class-zip")
    data = root / "data"
    chapters = sorted(p for p in data.glob("[0-9][0-9]_*") if p.is_dir()) if data.is_dir() else []
    if not chapters:
        raise ValueError(f"{data} holds no chapter results (data/NN_name/); run make book or make quick first")
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for chapter in chapters:
            for path in sorted(chapter.rglob("*")):
                if path.is_file():
                    archive.write(path, f"data/{chapter.name}/{path.relative_to(chapter)}")
        times = chapter_times(root / "notebooks")
        if times.empty and (root / "timings.csv").exists():  # re-packing a run that was sent before
            times = _timings(root / "timings.csv", str(root / "timings.csv"))
        archive.writestr("timings.csv", spreadsheet_safe(times).to_csv(index=False))
    return out


# ---------------------------------------------------------------------------------------------------
# Reading runs (the teacher's side)


def _find_data(folder: Path) -> Path | None:
    """The ``data/`` folder of a run: ``folder/data``, ``folder`` itself, or one level down."""
    for candidate in (folder / "data", folder, *sorted(p / "data" for p in folder.iterdir() if p.is_dir())):
        if candidate.is_dir() and any(CHAPTER.match(p.name) for p in candidate.iterdir() if p.is_dir()):
            return candidate
    return None


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
    return frame.assign(seconds=seconds)


def _unpack(path: Path, folder: Path) -> None:
    """Unpack the zip ``path`` into ``folder`` (new, empty), member by member, within :data:`ZIP_LIMITS`;
    :class:`BadRun` naming the zip for anything else."""
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise BadRun(f"{path}: not a zip file (make class-zip writes one)") from None
    with archive:
        members = archive.infolist()
        if not any(not m.is_dir() for m in members):
            raise BadRun(f"{path}: an empty zip (no files inside)")
        files = [m for m in members if not m.is_dir()]
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
    name = path.stem if path.is_file() else path.name
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
    if name == "data":
        name = data.parent.name
    run = Run(name=name, data=data, source=path)
    timings_path = data.parent / "timings.csv"
    if timings_path.is_file():
        run.timings = _timings(timings_path, run._shown(timings_path))
    for chapter in run.chapters():
        prov = data / chapter / "provenance.json"
        if not prov.is_file():
            continue
        try:
            record = json.loads(prov.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError, OSError) as error:
            raise BadRun(f"{run._shown(prov)}: not readable JSON ({_first_line(error)})") from None
        if not isinstance(record, dict):
            raise BadRun(f"{run._shown(prov)}: not a provenance record (a JSON object of device, threads, ...), "
                         f"but a JSON {type(record).__name__}")
        run.provenance[chapter] = record
    return run


# ---------------------------------------------------------------------------------------------------
# What to compare, and where each number comes from


def _numeric(frame: pd.DataFrame, pattern: str) -> str | None:
    """The first numeric column whose name matches ``pattern`` (case-insensitive)."""
    for column in frame.columns:
        if re.search(pattern, str(column), re.IGNORECASE) and pd.api.types.is_numeric_dtype(frame[column]):
            return column
    return None


def _main_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of the book's main configuration: fp32 (or float32) at the most threads measured."""
    if "dtype" in frame.columns:
        fp32 = frame[frame["dtype"].astype(str).isin(["fp32", "float32"])]
        frame = fp32 if len(fp32) else frame
    if "threads" in frame.columns and frame["threads"].notna().any():
        frame = frame[frame["threads"] == frame["threads"].max()]
    return frame


def _from_tables(run: Run, candidates: list[tuple]) -> tuple[float | None, str]:
    """Try ``(chapter, table, column pattern, how, scale, where)`` in order: keep the rows matching
    ``where`` (column: value), then the main rows (see :func:`_main_rows`), reduce the column with ``how``
    (``max``, ``min``, ``median``) and multiply by ``scale``. Return (value, where it came from)."""
    for chapter, table, pattern, how, scale, where in candidates:
        frame = run.table(chapter, table)
        if frame is None or frame.empty:
            continue
        column = _numeric(frame, pattern)
        if column is None or any(key not in frame.columns for key in where):
            continue
        for key, value in where.items():
            frame = frame[frame[key].astype(str) == value]
        rows = _main_rows(frame).dropna(subset=[column])
        if rows.empty:
            continue
        value = float(getattr(rows[column], how)()) * scale
        condition = "".join(f", {k}={v}" for k, v in where.items())
        return value, f"{chapter}/{table}.csv: {column} ({how}{condition})"
    return None, "not measured in this run"


# (column in the comparison, unit, candidates); the first table that has the number wins, so chapter 0's
# one measurement of the machine is preferred, and older runs (before chapter 0 existed) still compare.
METRICS: list[tuple[str, str, list[tuple]]] = [
    ("bandwidth_gb_s", "GB/s", [
        ("00_machine", "ceilings", r"^bandwidth_gb_s$", "max", 1.0, {"kernel": "read"}),
        ("06_roofline", "machine", r"^bandwidth_gb_s$", "max", 1.0, {}),
        ("03_decode_sweep", "ceilings", r"bandwidth", "max", 1.0, {}),
    ]),
    ("matmul_gflop_s", "GFLOP/s", [
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
            frames.append(frame.assign(chapter=chapter)[["chapter", "claim", "verdict"]])
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["chapter", "claim", "verdict"])


def machine(run: Run) -> dict[str, object]:
    """Device, its name, threads, CPU count, torch version, mode and commit, from the run's provenance
    (the most common value across its chapters; threads as the distinct values seen)."""
    records = list(run.provenance.values())

    def common(key):
        values = [r.get(key) for r in records if r.get(key) is not None]
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
    rows, sources, verdicts = [], [], []
    for run in runs:
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
    sources, row = [], machine(run)
    for column, unit, candidates in METRICS:
        value, source = _from_tables(run, candidates)
        row[column] = value
        sources.append(dict(run=run.name, metric=column, unit=unit, source=source))
    found = claims(run)
    row["claims_held"] = int((found.verdict == "held").sum())
    row["claims_recorded"] = len(found)
    if run.timings is not None and len(run.timings):
        row["book_run_s"] = float(run.timings["seconds"].sum())
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


def gather(paths: list[Path], out: Path = CLASS_DIR) -> pd.DataFrame:
    """Read every run in ``paths`` and write the comparison under ``out``; return the comparison.

    Each zip is unpacked into a folder of its own; two runs with the same name (two ``alice.zip`` from
    different folders, two ``data`` folders) get a number appended. :class:`BadRun` for a bad input."""
    if not paths:
        raise BadRun("name at least one run: a zip from make class-zip, or a folder holding data/")
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="class-", dir=out))
    try:
        runs, seen = [], {}
        for path in paths:
            run = load_run(Path(path), scratch)
            count = seen[run.name] = seen.get(run.name, 0) + 1
            if count > 1:
                run.name = f"{run.name}-{count}"
            runs.append(run)
        comparison, sources, all_claims = compare(runs)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    write_csv(comparison, out / "comparison.csv")
    write_csv(sources, out / "sources.csv")
    write_csv(all_claims, out / "claims.csv")
    plot(comparison, out / "comparison.png")
    return comparison


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lib.make.classroom", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_pack = sub.add_parser("pack", help="zip this machine's results for the teacher")
    p_pack.add_argument("--root", type=Path, default=REPO_ROOT,
                        help="the run's root: the book (default) or build/quick")
    p_pack.add_argument("--name", default=None, help="the zip's name (default: the machine's host name)")
    p_gather = sub.add_parser("gather", help="compare the runs of a class")
    p_gather.add_argument("runs", nargs="*", type=Path, help="zips or folders (default: build/class/*.zip)")
    p_gather.add_argument("--out", type=Path, default=CLASS_DIR)
    args = parser.parse_args(argv)
    try:
        if args.command == "pack":
            import socket

            name = re.sub(r"[^A-Za-z0-9_.-]+", "-", args.name or socket.gethostname()) or "run"
            path = pack(args.root, CLASS_DIR / f"{name}.zip")
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
