"""A chapter's outputs replaced as one unit, one build at a time in a checkout, and only by the build itself.

A chapter's outputs are ``data/<stem>/``, ``figures/<stem>/`` and ``notebooks/<stem>.ipynb`` under a book's
root (the checkout for ``make book``, ``build/quick`` for quick mode). :func:`commit` puts the new ones
beside the old (``.<name>.book-new``), writes a journal in ``build/journal/<stem>.json``, then swaps each in
by renaming, the old one kept as ``.book-old`` until every new one is in. Ctrl-C and SIGTERM are held back
during the renames. A build killed half way leaves the journal, and :func:`recover` (the next build's first
step, and ``make clean``'s) finishes the swap, or undoes it when it cannot: each chapter is always wholly old
or wholly new.

**A journal is acted on only when the build wrote it.** Each journal is signed: an HMAC-SHA256, with a
random key the build keeps in ``build/journal.key`` (readable by its owner only), over everything the
journal says: the chapter, the state, which outputs have a new version, and the SHA-256 of each new
version's content. :func:`recover` refuses, in one line, and leaves alone, a journal that is unsigned or
signed with another key (hand-written, or copied from another checkout), names a stem that is not a
chapter's (``reference``), or whose new outputs are not the ones it signed. A journal can only ever name
its own chapter's three outputs, so no journal can touch ``data/reference/`` or another chapter.

:func:`unfinished` lists the chapters whose replacement is unfinished (a journal, a ``.book-new`` copy, or
an old copy whose output is missing); :func:`check_finished` is what ``make html``, ``make student`` and
``make class-zip`` call before publishing: it raises :class:`Unfinished` naming the command that finishes
it. :func:`build_lock` lets one build run in a checkout at a time.

A hand run's replacement (:mod:`lib.runs`, unsigned: it swaps only its own chapter's ``data/`` and
``figures/`` folders, from a staging folder under ``build/runs/``) counts as unfinished here too while its
intent file is there, and :func:`recover` finishes it, under that chapter's lock.

Used by :mod:`lib.make.book` and the publishing tools; no chapter imports it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
import shutil
import signal
import time
from pathlib import Path

from lib import runs

#: What a chapter's stem looks like (``03_decode_sweep``): the only names a journal may carry.
CHAPTER_STEM = re.compile(r"^[0-9]{2}_[A-Za-z0-9_-]+$")
#: The command that finishes (or undoes) an interrupted replacement; ``make clean`` runs it first.
RECOVER_COMMAND = "python -m lib.make.book --recover"
_STATES = ("swap", "done")


class HalfReplaced(OSError):
    """A chapter's outputs could neither be replaced nor put back; the journal makes the next build finish."""


class BuildBusy(RuntimeError):
    """Another build holds this checkout's lock."""


class ForeignJournal(ValueError):
    """A journal the build did not write (or whose outputs are not the ones it signed): left alone."""


class Unfinished(ValueError):
    """Publishing refused: a chapter's replacement is unfinished. ``str()`` is one line with the fix."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C's KeyboardInterrupt (see :func:`raise_on_sigterm`)."""


def raise_on_sigterm() -> None:
    """Make SIGTERM raise :class:`Terminated` in the main thread, so a terminated build ends the way an
    interrupted one does (its one FAILED line, its kernel stopped)."""
    def handler(*_):
        raise Terminated

    signal.signal(signal.SIGTERM, handler)


def _side(target: Path, kind: str) -> Path:
    return target.with_name(f".{target.name}.book-{kind}")


def _targets(root: Path, stem: str) -> list[Path]:
    return [root / "data" / stem, root / "figures" / stem, root / "notebooks" / f"{stem}.ipynb"]


def _name(root: Path, target: Path) -> str:
    """How a journal names an output: its path under the book's root (``data/03_decode_sweep``)."""
    return target.relative_to(root).as_posix()


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _shown(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


@contextlib.contextmanager
def _no_interrupt():
    """Hold Ctrl-C and SIGTERM back for the few renames of a swap (re-raised right after)."""
    caught: list[int] = []
    previous = {}
    try:
        for number in (signal.SIGINT, signal.SIGTERM):
            previous[number] = signal.signal(number, lambda n, _: caught.append(n))
    except ValueError:  # not the main thread: nothing to hold back
        for number, handler in previous.items():
            signal.signal(number, handler)
        yield
        return
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if signal.SIGTERM in caught:
            raise Terminated
        if caught:
            raise KeyboardInterrupt


# ----------------------------------------------------------------------------------------------------------
# Journals: written, signed and read back by the build only
# ----------------------------------------------------------------------------------------------------------

def journal_dir(root: Path) -> Path:
    """Where a book's journals are: ``root/build/journal``."""
    return root / "build" / "journal"


def _journal(root: Path, stem: str) -> Path:
    return journal_dir(root) / f"{stem}.json"


def _key_path(root: Path) -> Path:
    return root / "build" / "journal.key"


def _key(root: Path, create: bool = False) -> bytes | None:
    """The build's signing key for this book (made, owner-readable only, the first time one is needed)."""
    path = _key_path(root)
    if create and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32))
    try:
        return path.read_bytes().strip() or None
    except OSError:
        return None


def _signature(key: bytes, record: dict) -> str:
    body = json.dumps({k: v for k, v in record.items() if k != "signature"}, sort_keys=True).encode()
    return hmac.new(key, body, hashlib.sha256).hexdigest()


def content_digest(path: Path) -> str | None:
    """SHA-256 over a file's bytes, or a folder's every file (its name inside the folder and its bytes, in
    order); ``None`` when ``path`` does not exist."""
    if not path.exists():
        return None
    digest = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for file in files:  # a file's own name is not hashed: the same bytes under its side name and its own
        digest.update((file.relative_to(path).as_posix() if file != path else "").encode() + b"\0")
        with open(file, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()


def _write_journal(root: Path, stem: str, state: str, with_new: list[str], digests: dict[str, str]) -> None:
    record = {"chapter": stem, "state": state, "with_new": with_new, "digests": digests}
    record["signature"] = _signature(_key(root, create=True), record)
    journal = _journal(root, stem)
    journal.parent.mkdir(parents=True, exist_ok=True)
    tmp = journal.with_suffix(".tmp")
    try:
        tmp.write_text(json.dumps(record) + "\n")
        os.replace(tmp, journal)
    finally:
        tmp.unlink(missing_ok=True)


def read_journal(root: Path, journal: Path) -> dict:
    """The record of a journal this build wrote; :class:`ForeignJournal` saying why, for any other."""
    stem = journal.stem
    if not CHAPTER_STEM.match(stem):
        raise ForeignJournal(f"{stem!r} is not a chapter's name (NN_name), and a journal only ever names "
                             f"its own chapter's outputs")
    try:
        record = json.loads(journal.read_text())
    except (OSError, ValueError) as error:
        raise ForeignJournal(f"it cannot be read as JSON ({error})") from None
    if not isinstance(record, dict) or not isinstance(record.get("signature"), str):
        raise ForeignJournal("it carries no signature")
    key = _key(root)
    if key is None:
        raise ForeignJournal(f"this build holds no key to check it with ({_shown(_key_path(root), root)} is "
                             f"missing)")
    if not hmac.compare_digest(record["signature"], _signature(key, record)):
        raise ForeignJournal("its signature is not this build's (written by hand, edited, or copied from "
                             "another checkout)")
    names = {_name(root, t) for t in _targets(root, stem)}
    with_new, digests = record.get("with_new"), record.get("digests")
    if (record.get("chapter") != stem or record.get("state") not in _STATES or not isinstance(with_new, list)
            or not set(with_new) <= names or not isinstance(digests, dict) or set(digests) != set(with_new)):
        raise ForeignJournal("it names outputs that are not its chapter's own")
    return record


def _check_new_versions(root: Path, stem: str, record: dict) -> None:
    """Raise :class:`ForeignJournal` unless each new version (still beside its output, or already swapped
    in) holds what the journal signed."""
    for target in _targets(root, stem):
        if _name(root, target) not in record["with_new"]:
            continue
        new = _side(target, "new")
        found = content_digest(new) if new.exists() else content_digest(target)
        if found != record["digests"][_name(root, target)]:
            raise ForeignJournal(f"{_shown(target, root)}'s new version is not the one it signed")


# ----------------------------------------------------------------------------------------------------------
# The swap
# ----------------------------------------------------------------------------------------------------------

def _roll_forward(root: Path, stem: str, with_new: list[str]) -> None:
    """Swap every prepared ``.book-new`` in, moving what it replaces to ``.book-old``. Idempotent, so a
    swap cut short is finished by the next build. ``with_new``: the targets that have a new version, by
    their paths under ``root`` (a target without one, e.g. figures the new run no longer draws, is moved aside too)."""
    for target in _targets(root, stem):
        old, new = _side(target, "old"), _side(target, "new")
        if _name(root, target) in with_new and not new.exists():
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


def _discard(path: Path, root: Path, stem: str) -> str | None:
    """Remove an old copy, or, when it cannot be removed (an immutable file inside it), rename it out of the
    way (``.<name>.book-trash-<n>``), so that no later build trips over it. Return a note when it is still
    there."""
    try:
        _remove(path)
        return None
    except OSError as error:
        why = error.strerror or str(error)
    where = path
    if ".book-trash-" not in path.name:
        with contextlib.suppress(OSError):
            where = path.with_name(f"{path.name.rsplit('.book-', 1)[0]}.book-trash-{secrets.token_hex(4)}")
            os.rename(path, where)
    if not where.exists():
        where = path
    return (f"{stem}: its outputs are whole, but an old copy, {_shown(where, root)}, could not be removed "
            f"({why}); remove it by hand (chattr -i first, if a file in it is immutable)")


def _finish(root: Path, stem: str) -> list[str]:
    """Drop the old versions once every new one is in (the journal says so first), then the journal.
    Never raises: the chapter is wholly new whatever happens here. Return a note for each old copy that
    could not be removed (renamed out of the way, a stray that the next build tries to remove again)."""
    with contextlib.suppress(OSError):  # a journal still saying "swap" is finished just the same
        _write_journal(root, stem, "done", [], {})
    notes = [note for target in _targets(root, stem) if _side(target, "old").exists()
             for note in [_discard(_side(target, "old"), root, stem)] if note]
    try:
        _journal(root, stem).unlink(missing_ok=True)
    except OSError as error:
        notes.append(f"{stem}: its outputs are whole, but its journal {_shown(_journal(root, stem), root)} could not "
                     f"be removed ({error.strerror or error})")
    return notes


def commit(staging: Path, root: Path, stem: str) -> list[str]:
    """Replace a chapter's outputs under ``root`` by those in ``staging`` as one unit (see the module doc);
    return notes (old copies that could not be removed, the new outputs being in place). On an OSError the
    old outputs are put back and the error re-raised; :class:`HalfReplaced` when they cannot be put back;
    :class:`ForeignJournal` (nothing touched) when a journal the build did not write is in the way. A
    Ctrl-C or SIGTERM during the swap is raised once it is over, with ``outputs_replaced`` set on it."""
    journal = _journal(root, stem)
    if journal.exists():
        raise ForeignJournal(f"{_shown(journal, root)} is in the way (a journal this build did not write, left "
                             f"alone); look at it, and delete it to replace {stem}'s outputs")
    news = [staging / "data" / stem, staging / "figures" / stem, staging / f"{stem}.ipynb"]
    with_new, digests, notes = [], {}, []
    try:
        for new, target in zip(news, _targets(root, stem)):
            _remove(_side(target, "new"))
            if target.exists() and _side(target, "old").exists():
                note = _discard(_side(target, "old"), root, stem)
                if note:
                    notes.append(note)
            if new.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(new), str(_side(target, "new")))
                with_new.append(_name(root, target))
                digests[_name(root, target)] = content_digest(_side(target, "new"))
        _write_journal(root, stem, "swap", with_new, digests)
    except BaseException:
        for target in _targets(root, stem):
            with contextlib.suppress(OSError):
                _remove(_side(target, "new"))
        raise
    swapped = False
    try:
        with _no_interrupt():
            try:
                _roll_forward(root, stem, with_new)
            except OSError as error:
                try:
                    _roll_back(root, stem)
                except OSError as again:
                    raise HalfReplaced(f"{error}; putting the old outputs back failed too ({again}). Fix that "
                                       f"and run the build again: its journal {journal} makes it "
                                       f"finish the replacement") from error
                journal.unlink(missing_ok=True)
                raise
            swapped = True
            notes += _finish(root, stem)
    except KeyboardInterrupt as interrupt:  # held back until the swap was done: say which state it left
        interrupt.outputs_replaced = swapped
        raise
    return notes


def recover(root: Path, log=print) -> list[str]:
    """Finish (or, if that fails, undo) any replacement a killed build left half done, and drop stray
    ``.book-new`` copies of a build that died before writing its journal. A journal the build did not
    write is reported in one line and left alone, with its chapter's side copies; return those
    journals' names. Raises :class:`HalfReplaced` when a replacement can be neither finished nor undone."""
    foreign = []
    for note in runs.settle(root):  # hand runs killed while swapping their outputs in
        log(note)
    for journal in sorted(journal_dir(root).glob("*.json")):
        stem = journal.stem
        try:
            record = read_journal(root, journal)
            if record["state"] == "swap":
                _check_new_versions(root, stem, record)
        except ForeignJournal as why:
            foreign.append(stem)
            log(f"{_shown(journal, root)}: not a journal this build wrote ({why}); it was left alone, and so "
                f"were {stem}'s outputs: look at it, and delete it")
            continue
        try:
            if record["state"] == "swap":
                try:
                    _roll_forward(root, stem, record["with_new"])
                    log(f"{stem}: completed the replacement of its outputs that an interrupted build began")
                except OSError as error:
                    _roll_back(root, stem)
                    log(f"{stem}: could not complete an interrupted replacement ({error}); "
                        f"its previous outputs are back")
            for note in _finish(root, stem):
                log(note)
        except OSError as error:
            raise HalfReplaced(f"{stem}: an interrupted replacement of its outputs can be neither finished "
                               f"nor undone ({error}); fix that and run the build again (journal: {journal})") from error
    for kind in ("data", "figures", "notebooks"):
        for stray in sorted((root / kind).glob(".*.book-*")):
            target = stray.with_name(stray.name[1:].rsplit(".book-", 1)[0])
            if target.name.removesuffix(".ipynb") in foreign:
                continue
            if stray.name.endswith(".book-old") and not target.exists():
                try:
                    os.rename(stray, target)  # never drop the only copy of an output
                except OSError as error:
                    log(f"{_shown(stray, root)}: the only copy of {_shown(target, root)} could not be put back "
                        f"({error.strerror or error}); rename it by hand")
                continue
            note = _discard(stray, root, target.name.removesuffix(".ipynb"))
            if note:
                log(note)
    return foreign


def side_copies(root: Path, stem: str) -> list[Path]:
    """The ``.book-new`` and ``.book-old`` copies of ``stem``'s outputs under ``root`` (a swap in some state)."""
    return [side for target in _targets(root, stem) for side in (_side(target, "new"), _side(target, "old"))
            if side.exists() or side.is_symlink()]


# ----------------------------------------------------------------------------------------------------------
# Before publishing
# ----------------------------------------------------------------------------------------------------------

def unfinished(root: Path) -> list[str]:
    """The chapters of the book under ``root`` whose replacement is unfinished: a journal names them
    (signed or not), a new version waits beside an output (``.book-new``), or an old copy stands where
    its output is missing (an old copy that could not be removed, ``.book-trash-*``, is not: the chapter is
    whole), or a hand run's swap was cut short (:func:`lib.runs.pending`). Sorted; empty when every chapter
    is wholly old or wholly new."""
    names = {p.stem for p in journal_dir(root).glob("*.json")} | set(runs.pending(root))
    for kind in ("data", "figures", "notebooks"):
        for side in (root / kind).glob(".*.book-*"):
            target = side.with_name(side.name[1:].rsplit(".book-", 1)[0])
            if side.name.endswith(".book-new") or (side.name.endswith(".book-old") and not target.exists()):
                names.add(target.name.removesuffix(".ipynb"))
    return sorted(names)


def check_finished(root: Path, command: str) -> None:
    """Raise :class:`Unfinished` if a chapter under ``root`` is half replaced (:func:`unfinished`): one
    line, ``"refused to publish: the outputs of ... are half replaced ...; finish it with `make clean` or
    `python -m lib.make.book --recover`, then run <command> again"`` (and the journal to look at when the
    build did not write it). ``command`` names the tool that refuses (``"make html"``); the caller prefixes
    the line with its own name, as it does its other errors."""
    names = unfinished(root)
    if not names:
        return
    foreign = []
    for name in names:
        journal = _journal(root, name)
        if journal.exists():
            try:
                read_journal(root, journal)
            except ForeignJournal:
                foreign.append(_shown(journal, root))
    line = (f"refused to publish: the outputs of {', '.join(names)} under {root} are half replaced (a build "
            f"was interrupted while replacing them); finish it with `make clean` or `{RECOVER_COMMAND}`, "
            f"then run {command} again")
    if foreign:
        line += f" ({', '.join(foreign)}: not written by the build; look at it, and delete it)"
    raise Unfinished(line)


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
