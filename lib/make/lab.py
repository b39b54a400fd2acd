"""``make lab``: JupyterLab on the reader's own copies of the chapters, so a hand run never changes a tracked file.

The committed ``notebooks/NN_*.py`` (the source) and ``NN_*.ipynb`` (the build's executed copy, every output
in it) are the book's: only ``make book`` rewrites them. JupyterLab saves what it opens (Ctrl+S, and its
autosave a minute or two after any change), and jupytext saves both files of a pair, so a reader who sets
``quick = True`` in a committed chapter and runs it would rewrite both. ``make lab`` therefore:

1. copies each chapter's pair into ``build/scratch/notebooks/`` (:func:`prepare`): the first time, and again
   when the book's chapter changed and the reader has not saved their copy since it was made (a copy the
   reader saved is kept, and the line printed for it says how to get the book's new version);
2. starts JupyterLab with ``build/`` as its root, its file browser open on ``scratch/notebooks/``
   (:func:`server_arguments`): nothing tracked is within its reach.

A reader's run of a copy writes its tables and figures where :func:`lib.paths.output_root` says: under
``build/scratch/`` (``data/<chapter>/``, ``figures/<chapter>/``), or ``build/quick/`` with ``quick = True``;
JupyterLab saves the notebook itself in ``build/scratch/notebooks/``. All of it is in ``build/``, which git
ignores, and stays there until the reader deletes it (``make clean`` removes ``build/``).

The record of the copies (``.copies.json``: which copy is the reader's) is read, updated and rewritten under a
lock (``.copies.json.lock``), and written to a temporary name renamed into place: two ``make lab`` at once
take turns, and neither loses what the other recorded.

In the copies, a cell tagged ``answer`` (a "Check yourself" answer a chapter computes) opens with its code
collapsed, as a typed answer sits closed in its ``<details>`` block, and the notebook carries the
``language_info`` of this environment's kernel, so that JupyterLab does not mark it modified the moment the
kernel starts. No chapter imports this module.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import jupytext
import nbformat
from filelock import FileLock, Timeout

from lib.paths import REPO_ROOT

ANSWER_TAG = "answer"
"""The cell tag of a "Check yourself" answer a chapter computes in code (see :mod:`lib.make.student`)."""
STATE = ".copies.json"
"""In the copies' folder: for each chapter, the digest of the book's pair and of the copies when made."""
LOCK_WAIT_S = 120.0
"""How long a ``make lab`` waits for another one making the copies before it says so and stops."""


def scratch(root: Path = REPO_ROOT) -> Path:
    """``build/scratch``: where a hand run's tables and figures go (:func:`lib.paths.output_root`)."""
    return root / "build" / "scratch"


def copies_dir(root: Path = REPO_ROOT) -> Path:
    """``build/scratch/notebooks``: the reader's copies of the chapters, the ones ``make lab`` opens."""
    return scratch(root) / "notebooks"


def _digest(*paths: Path) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.read_bytes() if path.exists() else b"\0missing")
    return digest.hexdigest()


def _same_pair(a: Path, b: Path, py_name: str, nb_name: str) -> bool:
    """Whether folders ``a`` and ``b`` hold the same working pair: the same text, and notebooks alike but for
    their cells' random ids."""
    def cells(folder: Path) -> object:
        try:
            notebook = json.loads((folder / nb_name).read_text())
        except (OSError, ValueError):
            return None
        for cell in notebook.get("cells", []) if isinstance(notebook, dict) else []:
            if isinstance(cell, dict):
                cell.pop("id", None)
        return notebook

    return _digest(a / py_name) == _digest(b / py_name) and cells(a) == cells(b)


def collapse_answers(notebook) -> int:
    """Collapse the code of every cell tagged ``answer`` (JupyterLab's ``jupyter.source_hidden``); return
    how many cells were tagged."""
    found = 0
    for cell in notebook.cells:
        if ANSWER_TAG in cell.metadata.get("tags", []):
            cell.metadata.setdefault("jupyter", {})["source_hidden"] = True
            found += 1
    return found


def language_info() -> dict:
    """The ``language_info`` the book's kernel reports in this environment (ipykernel's: this Python's
    version). JupyterLab writes it into a notebook when the kernel starts, and a notebook whose record
    differed opens already marked modified; a copy that carries it opens clean."""
    from ipykernel.ipkernel import IPythonKernel

    return json.loads(json.dumps(IPythonKernel.language_info))


def _write_pair(source: Path, executed: Path, folder: Path) -> None:
    """Write one chapter's working pair into ``folder``: the executed notebook (its outputs are what a reader
    reads first) and the py:percent text, both with answers collapsed; the text is written last, so jupytext
    finds it newer than the notebook and opens the pair without complaint."""
    text = jupytext.read(source)
    if executed.exists():
        notebook = nbformat.read(executed, as_version=4)
        notebook.metadata.pop("prefill_decode", None)  # the build's re-run record; a copy is not a build
    else:  # a chapter never executed: the reader's copy starts without outputs
        notebook = nbformat.from_dict(text)
    notebook.metadata["language_info"] = language_info()
    if collapse_answers(text):
        collapse_answers(notebook)
    folder.mkdir(parents=True, exist_ok=True)
    nb_copy, py_copy = folder / executed.name, folder / source.name
    nbformat.write(notebook, nb_copy)
    if any(ANSWER_TAG in c.metadata.get("tags", []) for c in text.cells):
        jupytext.write(text, py_copy, fmt="py:percent")
    else:
        py_copy.write_bytes(source.read_bytes())
    now = time.time()
    os.utime(nb_copy, (now, now))
    os.utime(py_copy, (now + 1, now + 1))


def prepare(root: Path = REPO_ROOT, log=print) -> Path:
    """Make or refresh the reader's copies of every chapter in ``build/scratch/notebooks/``; return it.

    A missing copy is made. A copy the reader has not saved since it was made follows the book (it is
    rewritten when the chapter changed). A copy the reader saved is never overwritten; when the book's
    chapter changed since, the line printed says so and how to get the new one."""
    folder = copies_dir(root)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        with FileLock(folder / f"{STATE}.lock", timeout=LOCK_WAIT_S, thread_local=False):
            return _prepare(root, folder, log)
    except Timeout:
        raise RuntimeError(f"lab: another make lab has been making the copies in {folder} for {LOCK_WAIT_S:.0f} s; "
                           f"wait for it to finish") from None


def _write_state(path: Path, state: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(state, indent=1) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _prepare(root: Path, folder: Path, log) -> Path:
    state_path = folder / STATE
    if state_path.exists() and not state_path.is_file():
        raise RuntimeError(f"lab: {state_path} is not a file but a {'link' if state_path.is_symlink() else 'folder'}, "
                           "where make lab keeps its record of which copies you saved; move it away (your copies "
                           "are not in it) and run make lab again")
    try:
        state = json.loads(state_path.read_text())
    except (OSError, ValueError):
        state = None
    lost = not isinstance(state, dict)  # no record (deleted, cut short, not an object): which copies were saved?
    state = {k: v for k, v in state.items() if isinstance(v, dict)} if isinstance(state, dict) else {}
    made, updated, kept, unknown = [], [], [], []
    for source in sorted((root / "notebooks").glob("[0-9][0-9]_*.py")):
        executed = source.with_suffix(".ipynb")
        py_copy, nb_copy = folder / source.name, folder / executed.name
        book = _digest(source, executed)
        record = state.get(source.stem)
        if not py_copy.exists() and not nb_copy.exists():
            made.append(source.stem)
        elif record is None:  # no record of this copy: the book's own copy, or the reader's work?
            with tempfile.TemporaryDirectory() as fresh:
                _write_pair(source, executed, Path(fresh))
                if not _same_pair(Path(fresh), folder, source.name, executed.name):
                    unknown.append(source.stem)  # it differs from the book's: kept, as the reader's
                    continue
            state[source.stem] = {"book": book, "copy": _digest(py_copy, nb_copy)}  # the book's, as it is now
            _write_state(state_path, state)
            continue
        elif record.get("copy") == _digest(py_copy, nb_copy):  # the reader has not saved it
            if record.get("book") == book:
                continue
            updated.append(source.stem)
        else:  # the reader's own work, whether or not the book moved on
            if record.get("book") != book:
                kept.append(source.stem)
            continue
        _write_pair(source, executed, folder)
        state[source.stem] = {"book": book, "copy": _digest(py_copy, nb_copy)}
        _write_state(state_path, state)  # after each copy: a make lab stopped half way keeps what it made
    _write_state(state_path, state)
    glossary = root / "notebooks" / "glossary.md"
    if glossary.exists():  # the chapters link their terms to it, beside them (the book's: copied every time)
        shutil.copyfile(glossary, folder / glossary.name)
    shown = folder.relative_to(root) if folder.is_relative_to(root) else folder
    if made:
        log(f"lab: copied {len(made)} chapter(s) into {shown}/ (your copies: change, run and save them there)")
    if updated:
        log(f"lab: brought your unchanged copies of {', '.join(updated)} up to date with notebooks/")
    for stem in kept:
        log(f"lab: kept your copy of {stem} (you saved it); the book's chapter has changed since. To get the "
            f"new one, move your {shown}/{stem}.py and .ipynb away and run make lab again")
    if unknown:
        log(f"lab: kept your copies of {', '.join(unknown)}: they differ from the book's chapters, and "
            f"{shown}/{STATE} " + ("was missing or unreadable" if lost else "had no record of them")
            + ", so nothing says whether you changed them or the book did. To get the book's, move your copies "
            f"away and run make lab again")
    return folder


def server_arguments(root: Path = REPO_ROOT, allow_root: bool = False) -> list[str]:
    """JupyterLab's command-line options: ``build/`` as the root of what it can open and save, its file
    browser on the reader's copies."""
    build = root / "build"
    arguments = [f"--ServerApp.root_dir={build}",
                 f"--FileContentsManager.preferred_dir={copies_dir(root).relative_to(build).as_posix()}"]
    return arguments + (["--allow-root"] if allow_root else [])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lib.make.lab", description=__doc__.split("\n\n")[0])
    parser.add_argument("--prepare-only", action="store_true", help="make the copies; do not start JupyterLab")
    parser.add_argument("--allow-root", action="store_true", help="passed to JupyterLab (running as root)")
    args, jupyterlab_options = parser.parse_known_args(argv)  # the rest (--port=9999, --no-browser) is JupyterLab's
    try:
        prepare()
    except RuntimeError as busy:
        print(busy, file=sys.stderr)
        return 3
    print("lab: a run of a copy writes its tables and figures under build/scratch/ (build/quick/ with "
          "quick = True); the book's notebooks/, data/ and figures/ are never touched (make book rewrites them)")
    if args.prepare_only:
        return 0
    command = [sys.executable, "-m", "jupyterlab", *server_arguments(allow_root=args.allow_root), *jupyterlab_options]
    os.execv(sys.executable, command)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
