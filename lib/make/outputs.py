"""A chapter's outputs replaced as one unit, and one build at a time in a checkout.

A chapter's outputs are ``data/<stem>/``, ``figures/<stem>/`` and ``notebooks/<stem>.ipynb``.
:func:`commit` puts the new ones beside the old (``.<name>.book-new``), writes a journal in
``build/journal/<stem>.json``, then swaps each in by renaming, the old one kept as ``.book-old`` until
every new one is in. Ctrl-C is held back during the renames. A build killed half way leaves the journal,
and :func:`recover` (the next build's first step, and ``make clean``'s) finishes the swap, or undoes it
when it cannot: each chapter is always wholly old or wholly new. :func:`build_lock` lets one build run
in a checkout at a time.

Used by :mod:`lib.make.book`; no chapter imports it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import time
from pathlib import Path


class HalfReplaced(OSError):
    """A chapter's outputs could neither be replaced nor put back; the journal makes the next build finish."""


class BuildBusy(RuntimeError):
    """Another build holds this checkout's lock."""


def _side(target: Path, kind: str) -> Path:
    return target.with_name(f".{target.name}.book-{kind}")


def _targets(root: Path, stem: str) -> list[Path]:
    return [root / "data" / stem, root / "figures" / stem, root / "notebooks" / f"{stem}.ipynb"]


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


@contextlib.contextmanager
def _no_interrupt():
    """Hold Ctrl-C back for the few renames of a swap (re-raised right after)."""
    caught = []
    try:
        previous = signal.signal(signal.SIGINT, lambda *_: caught.append(1))
    except ValueError:  # not the main thread: nothing to hold back
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            raise KeyboardInterrupt


def _journal(root: Path, stem: str) -> Path:
    return root / "build" / "journal" / f"{stem}.json"


def _write_journal(journal: Path, record: dict) -> None:
    journal.parent.mkdir(parents=True, exist_ok=True)
    tmp = journal.with_suffix(".tmp")
    try:
        tmp.write_text(json.dumps(record) + "\n")
        os.replace(tmp, journal)
    finally:
        tmp.unlink(missing_ok=True)


def _roll_forward(root: Path, stem: str, with_new: list[str]) -> None:
    """Swap every prepared ``.book-new`` in, moving what it replaces to ``.book-old``. Idempotent, so a
    swap cut short is finished by the next build. ``with_new``: the targets that have a new version
    (a target without one, e.g. figures the new run no longer draws, is moved aside too)."""
    for target in _targets(root, stem):
        old, new = _side(target, "old"), _side(target, "new")
        if target.name in with_new and not new.exists():
            continue  # already swapped in
        if target.exists() and not old.exists():
            os.rename(target, old)
        if new.exists():
            if target.exists():
                _remove(target)
            os.rename(new, target)


def _roll_back(root: Path, stem: str) -> None:
    """Put every ``.book-old`` back, then drop the ``.book-new`` ones (kept until every old one is back,
    so a roll-back cut short can still be rolled forward)."""
    for target in _targets(root, stem):
        old, new = _side(target, "old"), _side(target, "new")
        if old.exists():
            if target.exists():  # the new version, already swapped in: back to its side name
                _remove(new)
                os.rename(target, new)
            os.rename(old, target)
    for target in _targets(root, stem):
        _remove(_side(target, "new"))


def _finish(root: Path, stem: str) -> None:
    """Drop the old versions once every new one is in (the journal says so first)."""
    journal = _journal(root, stem)
    _write_journal(journal, {"chapter": stem, "state": "done"})
    for target in _targets(root, stem):
        _remove(_side(target, "old"))
    journal.unlink(missing_ok=True)


def commit(staging: Path, root: Path, stem: str) -> None:
    """Replace a chapter's committed outputs by those in ``staging`` as one unit (see the module doc).
    On an OSError the old outputs are put back and the error re-raised."""
    news = [staging / "data" / stem, staging / "figures" / stem, staging / f"{stem}.ipynb"]
    with_new = []
    try:
        for new, target in zip(news, _targets(root, stem)):
            _remove(_side(target, "new"))
            _remove(_side(target, "old"))
            if new.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(new), str(_side(target, "new")))
                with_new.append(target.name)
        _write_journal(_journal(root, stem), {"chapter": stem, "state": "swap", "with_new": with_new})
    except BaseException:
        for target in _targets(root, stem):
            with contextlib.suppress(OSError):
                _remove(_side(target, "new"))
        raise
    with _no_interrupt():
        try:
            _roll_forward(root, stem, with_new)
        except OSError as error:
            try:
                _roll_back(root, stem)
            except OSError as again:
                raise HalfReplaced(f"{error}; putting the old outputs back failed too ({again}). Fix that "
                                   f"and run the build again: its journal {_journal(root, stem)} makes it "
                                   f"finish the replacement") from error
            _journal(root, stem).unlink(missing_ok=True)
            raise
        _finish(root, stem)


def recover(root: Path, log=print) -> None:
    """Finish (or, if that fails, undo) any replacement a killed build left half done, and drop stray
    ``.book-new`` copies of a build that died before writing its journal."""
    for journal in sorted((root / "build" / "journal").glob("*.json")):
        stem = journal.stem
        try:
            record = json.loads(journal.read_text())
        except (OSError, ValueError):
            record = {}
        try:
            if record.get("state") == "swap":
                try:
                    _roll_forward(root, stem, record.get("with_new", []))
                    log(f"{stem}: completed the replacement of its outputs that an interrupted build began")
                except OSError as error:
                    _roll_back(root, stem)
                    log(f"{stem}: could not complete an interrupted replacement ({error}); "
                        f"its previous outputs are back")
            elif record.get("state") != "done":
                _roll_back(root, stem)
            _finish(root, stem)
        except OSError as error:
            raise HalfReplaced(f"{stem}: an interrupted replacement of its outputs can be neither finished "
                               f"nor undone ({error}); fix that and run the build again (journal: {journal})") from error
    for kind in ("data", "figures", "notebooks"):
        for stray in (root / kind).glob(".*.book-*"):
            target = stray.with_name(stray.name[1:].rsplit(".book-", 1)[0])
            if stray.name.endswith(".book-old") and not target.exists():
                os.rename(stray, target)  # never drop the only copy of an output
            else:
                _remove(stray)


@contextlib.contextmanager
def build_lock(root: Path):
    """Hold ``root/build/book.lock`` for one build; raise :class:`BuildBusy` if another build has it.
    The kernel drops the lock when its holder dies, so a killed build never leaves it stuck."""
    path = root / "build" / "book.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 200).decode(errors="replace").strip() or "unknown process"
        os.close(fd)
        raise BuildBusy(f"another build is already running in this checkout ({holder}); wait for it to "
                        f"finish (lock: {path})") from None
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()}, started {time.strftime('%H:%M:%S')}".encode())
        yield
    finally:
        os.close(fd)
