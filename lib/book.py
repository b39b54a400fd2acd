"""The build behind ``make book`` and ``make quick``: run every notebook with papermill.

For each ``notebooks/NN_*.py`` (the py:percent source, read with jupytext), in order:

1. Work out the notebook's *input hash*: its source, the library it imports (``lib/*.py`` but this
   runner), ``constraints.txt``, the data it reads from earlier chapters (see :func:`upstream_data`) and
   the device asked for. A full build skips a notebook whose executed ``.ipynb`` records the same hash, so
   a second ``make book`` with nothing changed does no work.
2. Execute it with papermill into ``build/staging/<stem>/``, with ``PREFILL_DECODE_OUTPUT_ROOT`` pointing
   the notebook's :class:`lib.results.Results` at that staging folder.
3. Only if every cell succeeded, move its ``data/<stem>/``, ``figures/<stem>/`` and executed notebook into
   place. A failure exits non-zero naming the notebook and the cell, and leaves the last good outputs
   untouched (the failed run stays in ``build/staging/`` to inspect).

Quick mode (``--quick``) runs every notebook with ``quick=True``, writes everything under
``build/quick/`` and never touches the committed outputs.

Run ``python -m lib.book --help`` for the options.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import time
from pathlib import Path

import jupytext
import nbformat
import papermill

from lib.results import OUTPUT_ROOT_ENV, REPO_ROOT

NOTEBOOKS = REPO_ROOT / "notebooks"
KERNEL = "python3"
HASH_KEY = "prefill_decode"


def sources(root: Path = NOTEBOOKS) -> list[Path]:
    """The notebooks' py:percent sources, in reading order."""
    return sorted(p for p in root.glob("[0-9][0-9]_*.py"))


def upstream_data(source: Path) -> list[Path]:
    """The data files a notebook reads from earlier chapters: every file under ``data/<stem>/`` of each
    other chapter whose stem its source names (as in ``load_table("02_prefill_sweep", ...)``)."""
    root = source.parent.parent
    text = source.read_text()
    files = []
    for other in sources(source.parent):
        if other != source and other.stem in text:
            files += sorted(p for p in (root / "data" / other.stem).glob("*") if p.name != "provenance.json")
    return files


def input_hash(source: Path, device: str | None) -> str:
    """SHA-256 over what a notebook's outputs depend on: its source, the library, the pinned versions,
    the data it reads from earlier chapters and the device asked for."""
    digest = hashlib.sha256()
    library = [p for p in sorted((REPO_ROOT / "lib").glob("*.py")) if p.name != "book.py"]  # not the runner
    inputs = [source, *library, REPO_ROOT / "constraints.txt", *upstream_data(source)]
    for path in inputs:
        digest.update(path.name.encode())
        digest.update(path.read_bytes() if path.exists() else b"")
    digest.update(f"device={device or 'auto'}".encode())
    return digest.hexdigest()


def recorded_hash(executed: Path) -> str | None:
    """The input hash stored in an executed notebook's metadata, if any."""
    if not executed.exists():
        return None
    try:
        notebook = nbformat.read(executed, as_version=4)
    except Exception:  # an unreadable notebook is simply out of date
        return None
    return notebook.metadata.get(HASH_KEY, {}).get("input_hash")


def _replace_dir(new: Path, target: Path) -> None:
    """Put ``new`` at ``target``, replacing what was there, with the old copy removed only afterwards."""
    target.parent.mkdir(parents=True, exist_ok=True)
    old = target.with_name(target.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)
    shutil.move(str(new), str(target))
    shutil.rmtree(old, ignore_errors=True)


def strip_run_metadata(path: Path) -> None:
    """Remove papermill's per-cell timing metadata from an executed notebook, so it stays paired with its
    py:percent source (jupytext in JupyterLab refuses a pair whose cells differ, metadata included)."""
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)
        if cell.metadata.get("tags") == []:
            del cell.metadata["tags"]
    nbformat.write(notebook, path)


class NotebookFailed(RuntimeError):
    """A notebook raised; the message names the notebook and the cell."""


def execute(source: Path, *, quick: bool, device: str | None, out_root: Path, executed: Path,
            digest: str | None = None) -> float:
    """Execute one notebook with papermill; return its wall time in seconds."""
    parameters: dict[str, object] = {}
    if quick:
        parameters["quick"] = True
    if device:
        parameters["device"] = device
    out_root.mkdir(parents=True, exist_ok=True)
    notebook = jupytext.read(source)
    notebook.metadata["kernelspec"] = {"name": KERNEL, "display_name": "Python 3", "language": "python"}
    if digest:
        notebook.metadata[HASH_KEY] = {"input_hash": digest}
    unexecuted = out_root / f"{source.stem}.input.ipynb"
    nbformat.write(notebook, unexecuted)
    previous = os.environ.get(OUTPUT_ROOT_ENV)
    os.environ[OUTPUT_ROOT_ENV] = str(out_root)
    started = time.perf_counter()
    try:
        papermill.execute_notebook(str(unexecuted), str(executed), parameters=parameters,
                                   kernel_name=KERNEL, cwd=str(source.parent), progress_bar=False,
                                   log_output=False)
    except papermill.PapermillExecutionError as error:
        raise NotebookFailed(
            f"{source.name} failed in cell {error.exec_count} ({error.ename}: {error.evalue}); "
            f"the partial run is in {executed}"
        ) from None
    finally:
        if previous is None:
            os.environ.pop(OUTPUT_ROOT_ENV, None)
        else:
            os.environ[OUTPUT_ROOT_ENV] = previous
        unexecuted.unlink(missing_ok=True)
    strip_run_metadata(executed)
    return time.perf_counter() - started


def build(*, quick: bool = False, device: str | None = None, only: list[str] | None = None,
          force: bool = False, root: Path = REPO_ROOT, log=print) -> int:
    """Build the book (or the quick book) whose notebooks are in ``root/notebooks``; return 0 on
    success, 1 if a notebook failed, 2 if ``only`` matched nothing."""
    available = sources(root / "notebooks")
    chosen = [s for s in available if not only or any(s.stem.startswith(o) for o in only)]
    if only and not chosen:
        log(f"no notebook matches {only}; notebooks are: {', '.join(s.stem for s in available)}")
        return 2
    for source in chosen:
        if quick:
            quick_root = root / "build" / "quick"
            executed = quick_root / "notebooks" / f"{source.stem}.ipynb"
            executed.parent.mkdir(parents=True, exist_ok=True)
            try:
                seconds = execute(source, quick=True, device=device, out_root=quick_root, executed=executed)
            except NotebookFailed as error:
                log(f"FAILED: {error}")
                return 1
            log(f"{source.stem}: quick run in {seconds:.1f} s -> {executed.relative_to(root)}")
            continue
        target = source.with_suffix(".ipynb")
        digest = input_hash(source, device)
        if not force and recorded_hash(target) == digest:
            log(f"{source.stem}: up to date")
            continue
        staging = root / "build" / "staging" / source.stem
        shutil.rmtree(staging, ignore_errors=True)
        executed = staging / f"{source.stem}.ipynb"
        log(f"{source.stem}: running ...")
        try:
            seconds = execute(source, quick=False, device=device, out_root=staging, executed=executed,
                              digest=digest)
        except NotebookFailed as error:
            log(f"FAILED: {error}\nThe previous outputs of {source.stem} were kept.")
            return 1
        for kind in ("data", "figures"):
            produced = staging / kind / source.stem
            if produced.exists():
                _replace_dir(produced, root / kind / source.stem)
        os.replace(executed, target)
        shutil.rmtree(staging, ignore_errors=True)
        log(f"{source.stem}: executed in {seconds:.1f} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lib.book", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="quick mode, into build/quick/")
    parser.add_argument("--device", default=os.environ.get("DEVICE") or None,
                        help="force a device (cpu, cuda, cuda:N); default: auto")
    parser.add_argument("--force", action="store_true", help="re-run notebooks even if up to date")
    parser.add_argument("only", nargs="*", help="notebook stems or prefixes to build (default: all)")
    args = parser.parse_args(argv)
    if args.device:
        from lib.device import resolve_device
        try:
            resolve_device(args.device)
        except ValueError as error:
            print(f"make book: {error}", file=sys.stderr)
            return 2
    started = time.perf_counter()
    status = build(quick=args.quick, device=args.device, only=args.only, force=args.force)
    print(f"{'quick book' if args.quick else 'book'}: {'done' if status == 0 else 'FAILED'} "
          f"in {time.perf_counter() - started:.1f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
