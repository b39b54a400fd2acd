"""One run of a chapter at a time into an output folder, each replaced there as one unit, and the check that a
chapter's folder holds the files of one run and nothing else.

A chapter's outputs under a book's root (the checkout, ``build/quick``, ``build/scratch``) are
``data/<chapter>/`` and ``figures/<chapter>/``. Two rules keep them whole:

* **One run at a time.** A run of a chapter holds ``<root>/build/locks/<chapter>.lock`` (:class:`ChapterLock`,
  a ``filelock`` lock) from its start to its end: ``make book`` and ``make quick`` for the chapter's whole
  execution and swap, a hand run (papermill, JupyterLab) from its :class:`lib.results.Results` to
  ``Results.finish()``. A second run of the same chapter into the same root is refused with one line naming
  the run that holds it (:class:`RunBusy`). The operating system drops the lock when its holder dies.
* **One unit.** A hand run writes into a staging folder of its own, ``<root>/build/runs/<chapter>.<id>/``,
  and only when it finishes are its folders swapped in (:func:`swap_in`): an intent file
  ``<root>/build/runs/<chapter>.swap`` names the staging folder; each old folder is moved into that staging
  folder (``old/``) and each new one into place; then the staging folder, the old versions with it, is
  removed, and the intent file last. A run killed during the swap leaves the intent file, and :func:`settle`
  (the next run of the chapter, the build's recovery, ``make clean``) finishes the swap. A run that never
  finishes leaves only its staging folder, which the next run of the chapter removes: the chapter's folder
  keeps the last run that finished.

:func:`folder_problem` says why a chapter's ``data/`` folder is not one run's: a file its ``provenance.json``
does not list, one it lists that is missing, one whose bytes are not those the run wrote (provenance records
each file's size and SHA-256, and each table's rows: :func:`file_record`), a symbolic link. ``make class-zip``
packs only the chapters it finds nothing wrong with; :func:`lib.results.load_table` checks a table the same
way (:func:`table_problem`).

Standard library and ``filelock`` only: the build imports it without importing torch.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import time
from pathlib import Path

from filelock import FileLock, Timeout

#: A chapter's output folders, in the order they are swapped.
KINDS = ("data", "figures")
PROVENANCE = "provenance.json"


class RunBusy(RuntimeError):
    """Another run of the chapter holds its folder; ``str()`` is one line naming that run and what to do."""


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _atomic_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


# ----------------------------------------------------------------------------------------------------------
# One run at a time
# ----------------------------------------------------------------------------------------------------------

def lock_path(root: Path, stem: str) -> Path:
    """``<root>/build/locks/<stem>.lock``: what a run of chapter ``stem`` into ``root`` holds."""
    return Path(root) / "build" / "locks" / f"{stem}.lock"


class ChapterLock:
    """The lock of one chapter's outputs under ``root``, held by one run (``what`` says which, for the line
    another run is refused with: ``"make quick"``, ``"a hand run"``). :meth:`acquire` raises :class:`RunBusy`
    at once when another run holds it; the holder's process id, what it is and since when are kept beside
    the lock (``.holder``) while it is held."""

    def __init__(self, root: Path, stem: str, what: str):
        self.root, self.stem, self.what = Path(root), stem, what
        self.path = lock_path(root, stem)
        self.holder = self.path.with_suffix(".holder")
        self._lock: FileLock | None = None

    @property
    def held(self) -> bool:
        return self._lock is not None and self._lock.is_locked

    def acquire(self) -> "ChapterLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(self.path, timeout=0, thread_local=False)
        try:
            lock.acquire()
        except Timeout:
            raise RunBusy(f"{self.stem}: refused: another run of this chapter is writing its outputs under "
                          f"{_shown(self.root)}/ ({self._other()}); wait for it to finish, or stop it, then run "
                          f"this one again") from None
        self._lock = lock
        _atomic_text(self.holder, json.dumps({"pid": os.getpid(), "what": self.what,
                                              "since": time.strftime("%H:%M:%S")}))
        return self

    def _other(self) -> str:
        try:
            record = json.loads(self.holder.read_text())
            return f"{record['what']}, pid {int(record['pid'])}, since {record['since']}"
        except (OSError, ValueError, KeyError, TypeError):
            return "a run that has not said what it is"

    def release(self) -> None:
        if self._lock is not None:
            self.holder.unlink(missing_ok=True)
            self._lock.release(force=True)
            self._lock = None

    def __enter__(self) -> "ChapterLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


# ----------------------------------------------------------------------------------------------------------
# One unit: staging, the swap, and settling a swap a killed run left
# ----------------------------------------------------------------------------------------------------------

def runs_dir(root: Path) -> Path:
    """``<root>/build/runs``: the hand runs' staging folders and intent files."""
    return Path(root) / "build" / "runs"


def new_staging(root: Path, stem: str) -> Path:
    """A new, empty staging folder for one run of ``stem`` into ``root``: ``<root>/build/runs/<stem>.<id>/``."""
    folder = runs_dir(root) / f"{stem}.{os.getpid()}-{secrets.token_hex(4)}"
    folder.mkdir(parents=True)
    return folder


def _intent(root: Path, stem: str) -> Path:
    return runs_dir(root) / f"{stem}.swap"


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _roll_forward(root: Path, stem: str, staging: Path, with_new: list[str]) -> None:
    """Move each old folder into ``staging/old/`` and each new one into place; idempotent, so a swap cut
    short is finished by running it again. A kind without a new version (a run that drew no figure) has
    its old folder moved aside too: the chapter's folders then hold this run's files only."""
    for kind in KINDS:
        target, new, old = root / kind / stem, staging / kind / stem, staging / "old" / kind / stem
        if kind in with_new and not new.exists():
            continue  # already in place
        if target.exists() or target.is_symlink():
            if old.exists():
                _remove(target)
            else:
                old.parent.mkdir(parents=True, exist_ok=True)
                os.rename(target, old)
        if new.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            os.rename(new, target)


def swap_in(staging: Path, root: Path, stem: str) -> None:
    """Replace ``root``'s ``data/<stem>/`` and ``figures/<stem>/`` by those in ``staging`` as one unit (this
    module's docstring); the caller holds the chapter's :class:`ChapterLock`. Raises ``OSError`` when a
    rename fails: the intent file stays, and :func:`settle` finishes the swap."""
    root = Path(root)
    with_new = [kind for kind in KINDS if (staging / kind / stem).exists()]
    intent = _intent(root, stem)
    _atomic_text(intent, json.dumps({"staging": staging.name, "with_new": with_new}) + "\n")
    _roll_forward(root, stem, staging, with_new)
    shutil.rmtree(staging, ignore_errors=True)
    intent.unlink(missing_ok=True)


def pending(root: Path) -> list[str]:
    """The chapters under ``root`` whose hand-run swap a killed run left unfinished (an intent file)."""
    return sorted(p.stem for p in runs_dir(root).glob("*.swap"))


def _settle_one(root: Path, stem: str, keep: Path | None) -> str | None:
    intent = _intent(root, stem)
    note = None
    if intent.exists():
        try:
            record = json.loads(intent.read_text())
            staging = runs_dir(root) / str(record["staging"])
            with_new = [k for k in record["with_new"] if k in KINDS]
            if not re.fullmatch(rf"{re.escape(stem)}\.[0-9]+-[0-9a-f]{{8}}", staging.name):
                raise ValueError(f"it names {staging.name!r}, not a staging folder of {stem}")
        except (OSError, ValueError, KeyError, TypeError) as error:
            return (f"{_shown(intent)}: not an intent file a run of {stem} wrote ({error}); it was left alone: "
                    f"look at it, and delete it")
        _roll_forward(root, stem, staging, with_new)
        shutil.rmtree(staging, ignore_errors=True)
        intent.unlink(missing_ok=True)
        note = f"{stem}: finished replacing its outputs under {_shown(root)}/ that an interrupted run began"
    for stale in runs_dir(root).glob(f"{glob_escape(stem)}.*"):
        if stale.is_dir() and stale != keep:  # a run that never finished: its outputs were never swapped in
            shutil.rmtree(stale, ignore_errors=True)
    return note


def glob_escape(text: str) -> str:
    """``text`` with glob's special characters escaped."""
    return re.sub(r"([*?\[])", r"[\1]", text)


def settle(root: Path, stem: str | None = None, *, held: bool = False, keep: Path | None = None) -> list[str]:
    """Finish every hand-run swap a killed run left under ``root`` (or only ``stem``'s), and remove the
    staging folders of runs that never finished (but ``keep``). Each chapter is settled under its
    :class:`ChapterLock` (``held``: the caller holds it already); a chapter another run holds now is left to
    that run. Returns one note per chapter settled or left alone."""
    root = Path(root)
    stems = [stem] if stem else sorted({p.name.split(".", 1)[0] for p in runs_dir(root).glob("*.*")})
    notes = []
    for name in stems:
        if held:
            note = _settle_one(root, name, keep)
        else:
            try:
                with ChapterLock(root, name, "settling an interrupted run"):
                    note = _settle_one(root, name, keep)
            except RunBusy:
                continue  # its run is alive and will swap in itself
        if note:
            notes.append(note)
    return notes


# ----------------------------------------------------------------------------------------------------------
# What a folder holds against what its provenance says
# ----------------------------------------------------------------------------------------------------------

def file_record(path: Path, rows: int | None = None) -> dict[str, object]:
    """What provenance records of a file a run wrote: ``bytes``, ``sha256`` and, for a table, ``rows``."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    record: dict[str, object] = {"bytes": path.stat().st_size, "sha256": digest.hexdigest()}
    if rows is not None:
        record["rows"] = int(rows)
    return record


def read_provenance(folder: Path) -> tuple[dict | None, str | None]:
    """(record, None), or (None, what is wrong) for ``folder/provenance.json``; (None, None) when absent."""
    path = folder / PROVENANCE
    if path.is_symlink():
        return None, f"{PROVENANCE} is a symbolic link"
    if not path.exists():
        return None, None
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        return None, f"{PROVENANCE} cannot be read as JSON ({str(error).splitlines()[0][:120]})"
    if not isinstance(record, dict):
        return None, f"{PROVENANCE} is a JSON {type(record).__name__}, not a record"
    return record, None


def _listed(record: dict, kind: str, stem: str) -> tuple[set[str] | None, dict]:
    """The files of ``kind/stem/`` the record lists (names inside the folder), and their recorded facts."""
    files, written = record.get("files"), record.get("written")
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return None, {}
    prefix = f"{kind}/{stem}/"
    facts = written if isinstance(written, dict) else {}
    return ({f[len(prefix):] for f in files if f.startswith(prefix)},
            {f[len(prefix):]: v for f, v in facts.items() if isinstance(f, str) and f.startswith(prefix)
             and isinstance(v, dict)})


def listed_files(record: dict, kind: str, stem: str) -> set[str] | None:
    """The names of the files in ``kind/stem/`` that a provenance record lists (``None``: it lists none)."""
    return _listed(record, kind, stem)[0]


def _ignored(name: str) -> bool:
    return name.startswith(".") and name.endswith(".tmp")  # an atomic write a killed run left half done


def _content_problem(path: Path, fact: dict) -> str | None:
    size = fact.get("bytes")
    if isinstance(size, int) and path.stat().st_size != size:
        return (f"{path.name} holds {path.stat().st_size:,} bytes where its run wrote {size:,} (cut short or "
                f"changed since)")
    digest = fact.get("sha256")
    if isinstance(digest, str) and file_record(path)["sha256"] != digest:
        return f"{path.name} is not the file its run wrote (its SHA-256 differs from the one recorded)"
    return None


def folder_problem(folder: Path, kind: str = "data") -> str | None:
    """Why ``folder`` (a chapter's ``data/<stem>/``, whose ``provenance.json`` lists its files; or its
    ``figures/<stem>/`` with ``kind="figures"``, checked against the ``data`` folder's provenance) is not
    one run's files, in a few words; ``None`` when it is. A folder whose provenance predates the recorded
    sizes and digests is checked for its list of files only."""
    folder = Path(folder)
    stem = folder.name
    if folder.is_symlink():
        return f"{kind}/{stem} is a symbolic link"
    data = folder if kind == "data" else folder.parent.parent / "data" / stem
    record, problem = read_provenance(data)
    if problem:
        return problem
    if record is None:
        return f"no {PROVENANCE}: not the outputs of a run of the book (lib.results writes one)"
    listed, facts = _listed(record, kind, stem)
    if listed is None:
        return f"{PROVENANCE} has no list of files (\"files\": [...])"
    present, links = set(), []
    for directory, dirs, names in os.walk(folder):
        for name in [*names, *[d for d in dirs if Path(directory, d).is_symlink()]]:
            path = Path(directory, name)
            inside = path.relative_to(folder).as_posix()
            if path.is_symlink():
                links.append(inside)
            elif not (kind == "data" and inside == PROVENANCE) and not _ignored(name):
                present.add(inside)
    if links:
        return f"{', '.join(sorted(links)[:3])}: a symbolic link, never followed out of a run"
    unlisted, missing = sorted(present - listed), sorted(listed - present)
    if unlisted:
        return (f"it holds {', '.join(unlisted[:3])}{' ...' if len(unlisted) > 3 else ''}, which its "
                f"{PROVENANCE} does not list: files of another run")
    if missing:
        return f"{', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''} listed in its {PROVENANCE} missing"
    for name in sorted(present):
        problem = _content_problem(folder / name, facts.get(name, {}))
        if problem:
            return problem
    return None


def table_problem(path: Path) -> tuple[str | None, int | None]:
    """(what is wrong with the table ``path`` against its folder's provenance, or ``None``; the rows its run
    wrote, when recorded and its content was not checked byte for byte). A table without provenance beside
    it (not written by :class:`lib.results.Results`) is not checked."""
    path = Path(path)
    if path.is_symlink():
        return f"{path.name} is a symbolic link, never followed", None
    record, problem = read_provenance(path.parent)
    if problem:
        return problem, None
    if record is None:
        return None, None
    listed, facts = _listed(record, "data", path.parent.name)
    if listed is not None and path.name not in listed:
        return f"{path.name} is not among the files its {PROVENANCE} lists: a file of another run", None
    fact = facts.get(path.name, {})
    problem = _content_problem(path, fact)
    rows = fact.get("rows") if "sha256" not in fact and isinstance(fact.get("rows"), int) else None
    return problem, rows
