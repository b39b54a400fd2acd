"""The build behind ``make book`` and ``make quick``: run every notebook with papermill.

For each ``notebooks/NN_*.py`` (the py:percent source, read with jupytext), in order:

1. Work out its *input hash* (:mod:`lib.make.staleness`): its source, the library modules it imports (directly
   or through another module), ``constraints.txt``, the data it reads from earlier chapters and the machine
   it runs on (the *resolved* device, its name, the torch and CUDA versions and the machine's identity: CPU
   model, instruction sets and cores, GPU name, memory and capability; so ``DEVICE=cpu`` and ``auto`` on a
   CPU-only machine are the same build, and a host whose CPU has the same name but other instruction sets is
   not). The machine is probed once per build, in a subprocess: the build itself never imports torch. A
   chapter is up to date when its executed ``.ipynb`` records that hash **and** its committed
   ``data/<stem>/`` and ``figures/<stem>/`` still match the SHA-256 manifest recorded beside it; anything
   else re-runs it.
2. Execute it with papermill into ``build/staging/<stem>/`` (``PREFILL_DECODE_OUTPUT_ROOT`` points its
   :class:`lib.results.Results` there), then record in its ``provenance.json`` the parameters read from
   its tagged ``parameters`` cell and papermill's injected one, and in the notebook's metadata
   (``prefill_decode``) the hash, the machine's record (``environment``) and the manifest.
3. Only if every cell succeeded, replace ``data/<stem>/``, ``figures/<stem>/`` and the executed notebook
   as one unit (:func:`commit`): the new outputs are first put beside the old ones, a signed journal in
   ``build/journal/`` is written, then each is swapped in by renaming. An interrupted swap is completed
   (or, if it cannot be, rolled back) by the next build, so a chapter is always wholly old or wholly new;
   a journal the build did not write is reported and left alone (:mod:`lib.make.outputs`).

Only one build runs in a checkout at a time (a lock on ``build/book.lock``), and while it runs a chapter it
holds that chapter's lock in the folder its outputs go to (:class:`lib.runs.ChapterLock`): a hand run of the
same chapter into the same folder (papermill or JupyterLab, with ``quick = True`` for ``make quick``, or
``PREFILL_DECODE_WRITE_COMMITTED=1`` for ``make book``) is refused while the build runs it, and the build
refuses the chapter, in its one FAILED line naming the hand run, while a hand run holds it. Every failure, in a cell or
not (a dead kernel, Ctrl-C, SIGTERM, a full disk, a read-only folder), ends in one line naming the chapter,
the cell's position in the source and what happened, saying truly what became of the previous outputs; the
traceback goes to ``build/logs/<stem>.log``.

Quick mode (``--quick``) runs every notebook with ``quick=True`` and writes everything under ``build/quick/``,
each chapter replaced there as one unit in the same way (it runs in ``build/staging-quick/<stem>/``); it
never touches the committed outputs. Run ``python -m lib.make.book --help`` for the options.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import logging
import os
import re
import shutil
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

import jupytext
import nbformat
import papermill

from lib.make.outputs import (BuildBusy, HalfReplaced, Terminated, build_lock, commit, journal_dir,
                              raise_on_sigterm, recover, side_copies)
from lib.make.staleness import (HASH_KEY, input_hash, output_hashes, run_environment, sources, stale_reason,
                                upstream_chapters)
from lib.params import parameter_values
from lib.paths import OUTPUT_ROOT_ENV, REPO_ROOT
from lib.runs import PROVENANCE, ChapterLock, RunBusy

#: The book's named kernel (``make env`` installs it into .venv); plain ``python3`` where it is missing.
KERNEL_NAME, KERNEL_DISPLAY = "prefill-decode", "Prefill and Decode (.venv)"
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # papermill's tracebacks are coloured; the logs are plain text


def kernel() -> tuple[str, str]:
    """(name, display name) of the kernel chapters run in: the book's own when installed, else python3."""
    from jupyter_client.kernelspec import KernelSpecManager

    if KERNEL_NAME in KernelSpecManager().find_kernel_specs():
        return KERNEL_NAME, KERNEL_DISPLAY
    return "python3", "Python 3"


def strip_run_metadata(path: Path, timings: Path | None = None) -> None:
    """Remove papermill's per-cell timing metadata from an executed notebook, so it stays paired with its
    py:percent source (jupytext in JupyterLab refuses a pair whose cells differ, metadata included), and the
    build machine's paths papermill records (a published notebook carries none). With ``timings``, each code
    cell's seconds are first written there (a CSV of cell position, seconds and the cell's first line), so a
    build says where a chapter spends its time without the notebook carrying it."""
    notebook = nbformat.read(path, as_version=4)
    if timings is not None:
        rows = ["cell,seconds,first_line"]
        for i, cell in enumerate(notebook.cells):
            seconds = cell.metadata.get("papermill", {}).get("duration")
            if cell.cell_type == "code" and seconds is not None:
                first = next((line for line in cell.source.splitlines() if line and not line.startswith("#")), "")
                rows.append(f'{i},{seconds:.2f},"{first[:80].replace(chr(34), chr(39))}"')
        timings.parent.mkdir(parents=True, exist_ok=True)
        timings.write_text("\n".join(rows) + "\n", encoding="utf-8")
    for key in ("input_path", "output_path"):
        notebook.metadata.get("papermill", {}).pop(key, None)
    for cell in notebook.cells:
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)
        if cell.metadata.get("tags") == []:
            del cell.metadata["tags"]
    nbformat.write(notebook, path)


class NotebookFailed(RuntimeError):
    """A chapter failed; ``str()`` is the one line for the reader, ``log`` the file with the details,
    ``status`` the build's exit status (1; 130 after Ctrl-C; 143 after SIGTERM)."""

    def __init__(self, line: str, log: Path | None = None, status: int = 1):
        super().__init__(line)
        self.log, self.status = log, status


def _stopped(interrupt: KeyboardInterrupt) -> tuple[str, int]:
    """What stopped the build, for its line, and the exit status: Ctrl-C (130) or SIGTERM (143). From here on the
    build is ending: a reader pressing Ctrl-C again while it stops its kernel and writes its line must not cut
    that short, so later SIGINTs and SIGTERMs are ignored."""
    for number in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError):  # not the main thread: nothing to change
            signal.signal(number, signal.SIG_IGN)
    return ("terminated (SIGTERM)", 143) if isinstance(interrupt, Terminated) else ("interrupted (Ctrl-C)", 130)


#: What a failure's line says became of the chapter's outputs.
KEPT, REPLACED, UNSETTLED = "kept", "replaced", "unsettled"


def _where(executed: Path, cell_index: int | None = None) -> str:
    """'cell N of M' counted in the chapter's source (papermill's injected cell not counted)."""
    try:
        cells = [c for c in nbformat.read(executed, as_version=4).cells  # as run: no error banners
                 if "papermill-error-cell-tag" not in c.metadata.get("tags", [])]
    except Exception:
        return "cell unknown (no partial notebook)"
    if cell_index is None:  # the last cell started is the one that was running
        running = [i for i, c in enumerate(cells) if c.metadata.get("papermill", {}).get("start_time")]
        if not running:
            return "before the first cell ran"
        cell_index = running[-1]
    injected = [i for i, c in enumerate(cells) if "injected-parameters" in c.metadata.get("tags", [])]
    position = cell_index + 1 - sum(1 for i in injected if i < cell_index)
    return f"cell {position} of {len(cells) - len(injected)}"


HEARTBEAT_S = 60.0
"""Seconds between the lines a running chapter prints (:func:`_heartbeat`)."""


@contextlib.contextmanager
def _heartbeat(stem: str, executed: Path, log, every_s: float | None = None):
    """While a chapter runs, a line every ``every_s`` seconds saying for how long and in which cell (papermill
    saves the notebook as each cell starts): a long wait (a large sweep, a slow server) is never silent."""
    if log is None:
        yield
        return
    every_s = HEARTBEAT_S if every_s is None else every_s
    done, started = threading.Event(), time.perf_counter()

    def beat() -> None:
        while not done.wait(every_s):
            took = time.perf_counter() - started
            log(f"{stem}: still running after {f'{took:.0f} s' if took < 120 else f'{took / 60:.0f} min'}, "
                f"{_where(executed)}")

    thread = threading.Thread(target=beat, name=f"heartbeat {stem}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _failure(stem: str, where: str, what: str, details: str, logs: Path, status: int = 1,
             outputs: str = KEPT) -> NotebookFailed:
    """The one line of a failure. ``outputs``: :data:`KEPT` (the previous outputs are whole and in place),
    :data:`REPLACED` (the new ones are, the failure came after the swap) or :data:`UNSETTLED` (neither: the
    line's ``what`` says how the next build settles it)."""
    log = logs / f"{stem}.log"
    said = {KEPT: f" The previous outputs of {stem} were kept;", REPLACED: f" The new outputs of {stem} are in place;",
            UNSETTLED: ""}[outputs]
    line = f"{stem} failed {where if where.startswith('before') else 'in ' + where}: {what}.{said} details in {log}"
    try:
        logs.mkdir(parents=True, exist_ok=True)
        plain = ANSI.sub("", details)  # papermill's tracebacks are coloured
        log.write_text(f"{_dt.datetime.now().isoformat(timespec='seconds')}\n{line}\n\n{plain}\n")
    except OSError as error:  # a full disk cannot take the log either: say so in the line
        line = line.replace(f"details in {log}", f"no log written ({error.strerror})")
    return NotebookFailed(line, log, status)


@contextlib.contextmanager
def _stderr_to(path: Path):
    """Send this process's stderr, and so the kernel's (it inherits it), to ``path`` for a while: a
    kernel's own tracebacks (on Ctrl-C, on death) belong in the log, not in the reader's terminal."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(target, 2)
    os.close(target)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _captured(path: Path) -> str:
    try:
        text = path.read_text(errors="replace")
        path.unlink()
    except OSError:
        return ""
    return f"\n---- stderr of the build and the kernel ----\n{text}" if text.strip() else ""


def execute(source: Path, *, quick: bool, device: str | None, out_root: Path, executed: Path,
            digest: str | None = None, logs: Path | None = None, log=None) -> float:
    """Execute one notebook with papermill; return its wall time in seconds. Any failure raises
    :class:`NotebookFailed` with one line (chapter, cell position, what happened). With ``log``, a line every
    :data:`HEARTBEAT_S` seconds while it runs (:func:`_heartbeat`)."""
    parameters: dict[str, object] = {"quick": True} if quick else {}
    if device:
        parameters["device"] = device
    logs = logs or out_root / "logs"
    previous = os.environ.get(OUTPUT_ROOT_ENV)
    started = time.perf_counter()
    unexecuted = out_root / f"{source.stem}.input.ipynb"
    stderr = logs / f"{source.stem}.stderr"
    try:
        out_root.mkdir(parents=True, exist_ok=True)
        notebook = jupytext.read(source)
        name, display = kernel()
        notebook.metadata["kernelspec"] = {"name": name, "display_name": display, "language": "python"}
        if digest:
            notebook.metadata[HASH_KEY] = {"input_hash": digest}
        nbformat.write(notebook, unexecuted)
        os.environ[OUTPUT_ROOT_ENV] = str(out_root)
        with _stderr_to(stderr), _heartbeat(source.stem, executed, log):
            papermill.execute_notebook(str(unexecuted), str(executed), parameters=parameters,
                                       kernel_name=name, cwd=str(source.parent), progress_bar=False,
                                       log_output=False)
        strip_run_metadata(executed, logs / f"{source.stem}.cells.csv")
    except papermill.PapermillExecutionError as error:
        raise _failure(source.stem, _where(executed, error.cell_index), f"{error.ename}: {error.evalue}",
                       "\n".join(error.traceback) + _captured(stderr), logs) from None
    except KeyboardInterrupt as interrupt:  # Ctrl-C, or SIGTERM (lib.make.outputs.raise_on_sigterm)
        what, status = _stopped(interrupt)
        raise _failure(source.stem, _where(executed), what, traceback.format_exc() + _captured(stderr), logs,
                       status) from None
    except Exception as error:  # a dead kernel, a full disk, a read-only folder, ...
        what = "the kernel died (out of memory?)" if type(error).__name__ == "DeadKernelError" else \
            f"{type(error).__name__}: {error}"
        raise _failure(source.stem, _where(executed), what, traceback.format_exc() + _captured(stderr),
                       logs) from None
    finally:
        if previous is None:
            os.environ.pop(OUTPUT_ROOT_ENV, None)
        else:
            os.environ[OUTPUT_ROOT_ENV] = previous
        with contextlib.suppress(OSError):
            unexecuted.unlink(missing_ok=True)
            stderr.unlink(missing_ok=True)
    return time.perf_counter() - started


def record_parameters(executed: Path, provenance: Path, parameters: bool = True) -> None:
    """Write into ``provenance.json`` the parameters the chapter ran with, read from the executed
    notebook's tagged ``parameters`` cell and papermill's ``injected-parameters`` cell (``parameters``
    false: leave them), and that the run finished: every cell ran."""
    if not provenance.exists():
        return
    record = json.loads(provenance.read_text())
    if parameters:
        values, injected = {}, {}
        for cell in nbformat.read(executed, as_version=4).cells:
            tags = cell.metadata.get("tags", [])
            if "parameters" in tags:
                values.update(parameter_values(cell.source))
            if "injected-parameters" in tags:
                injected = parameter_values(cell.source)
        record["parameters"] = {**values, **injected}
        record["parameters_injected"] = sorted(injected)
    record["finished"] = True
    provenance.write_text(json.dumps(record, indent=2, default=str) + "\n")


@contextlib.contextmanager
def _chapter_lock(root: Path, stem: str, what: str, logs: Path):
    """Hold ``stem``'s lock in ``root`` for the chapter's run and swap; a hand run holding it fails the
    chapter before its first cell, in one line naming that run."""
    lock = ChapterLock(root, stem, what)
    try:
        lock.acquire()
    except RunBusy as busy:
        raise _failure(stem, "before its first cell", str(busy).removeprefix(f"{stem}: "), "", logs) from None
    try:
        yield
    finally:
        lock.release()


def _refuse_foreign_journal(root: Path, stem: str, logs: Path) -> None:
    """Fail the chapter before any work when a journal the build did not write names it (recover() left it
    alone): its outputs cannot be replaced until someone has looked at it."""
    journal = journal_dir(root) / f"{stem}.json"
    if journal.exists():
        raise _failure(stem, "before its first cell",
                       f"{journal} is not a journal this build wrote, and was left alone; look at it, and "
                       f"delete it to build {stem}", "", logs)


def _replace(staging: Path, root: Path, stem: str, logs: Path, log) -> None:
    """commit() the staged outputs of ``stem`` into ``root``; every failure one line that says truly what
    became of the outputs."""
    try:
        for note in commit(staging, root, stem):
            log(note)
    except KeyboardInterrupt as interrupt:
        what, status = _stopped(interrupt)
        raise _failure(stem, "replacing its outputs", what, traceback.format_exc(), logs, status,
                       REPLACED if getattr(interrupt, "outputs_replaced", False) else KEPT) from None
    except Exception as error:
        raise _failure(stem, "replacing its outputs", f"{type(error).__name__}: {error}", traceback.format_exc(),
                       logs, outputs=UNSETTLED if isinstance(error, HalfReplaced) else KEPT) from None


def _strays(staging: Path, stem: str, seeded: dict[str, str]) -> None:
    """Raise ValueError if the run wrote outputs of another chapter (or changed the ones it was given)."""
    names = {p.name for kind in ("data", "figures") for p in (staging / kind).glob("*")}
    strays = sorted(names - {stem} - set(seeded))
    strays += sorted(name for name, digest in seeded.items()
                     if output_hashes(staging, name) != json.loads(digest))
    if strays:
        raise ValueError(f"it wrote outputs for {', '.join(strays)}; Results(...) must be named {stem!r}")


def _run_chapter(source: Path, root: Path, device, environment, force, log) -> None:
    stem = source.stem
    digest = input_hash(source, device, environment)
    reason = "forced" if force else stale_reason(source, root, digest, environment)
    if reason is None:
        log(f"{stem}: up to date")
        return
    staging = root / "build" / "staging" / stem
    logs = root / "build" / "logs"
    _refuse_foreign_journal(root, stem, logs)
    with _chapter_lock(root, stem, "make book", logs):
        log(f"{stem}: running ({reason}) ...")
        shutil.rmtree(staging, ignore_errors=True)
        executed = staging / f"{stem}.ipynb"
        seconds = execute(source, quick=False, device=device, out_root=staging, executed=executed,
                          digest=digest, logs=logs, log=log)
        try:
            _strays(staging, stem, {})
            record_parameters(executed, staging / "data" / stem / "provenance.json")
            notebook = nbformat.read(executed, as_version=4)
            notebook.metadata[HASH_KEY] = {"input_hash": digest, "environment": environment,
                                           "outputs": output_hashes(staging, stem)}
            nbformat.write(notebook, executed)
        except Exception as error:
            raise _failure(stem, "replacing its outputs", f"{type(error).__name__}: {error}",
                           traceback.format_exc(), logs) from None
        _replace(staging, root, stem, logs, log)
    shutil.rmtree(staging, ignore_errors=True)
    log(f"{stem}: executed in {seconds:.1f} s; {claims_held(root, stem)}")


def _run_quick(source: Path, root: Path, device, environment, log) -> None:
    """One chapter in quick mode, into ``build/quick/``, replaced as one unit as ``make book`` does: it runs
    in ``build/staging-quick/<stem>/``, which holds a copy of the earlier quick chapters' data (what it
    reads), and only its own outputs are swapped in."""
    stem, quick_root = source.stem, root / "build" / "quick"
    staging, logs = root / "build" / "staging-quick" / stem, root / "build" / "logs"
    _refuse_foreign_journal(quick_root, stem, logs)
    with _chapter_lock(quick_root, stem, "make quick", logs):
        _run_quick_locked(source, root, device, environment, log, staging, logs)


def _run_quick_locked(source: Path, root: Path, device, environment, log, staging: Path, logs: Path) -> None:
    stem, quick_root = source.stem, root / "build" / "quick"
    shutil.rmtree(staging, ignore_errors=True)
    seeded = {}
    try:
        for folder in sorted(p for p in (quick_root / "data").glob("*") if p.is_dir() and p.name != stem):
            shutil.copytree(folder, staging / "data" / folder.name)
            seeded[folder.name] = json.dumps(output_hashes(staging, folder.name), sort_keys=True)
    except OSError as error:
        raise _failure(stem, "before its first cell", f"the earlier quick chapters' data could not be staged "
                       f"({type(error).__name__}: {error})", traceback.format_exc(), logs) from None
    executed = staging / f"{stem}.ipynb"
    seconds = execute(source, quick=True, device=device, out_root=staging, executed=executed, logs=logs, log=log)
    try:
        _strays(staging, stem, seeded)
        for name in seeded:
            shutil.rmtree(staging / "data" / name)
        record_parameters(executed, staging / "data" / stem / "provenance.json", parameters=False)
        notebook = nbformat.read(executed, as_version=4)
        notebook.metadata[HASH_KEY] = {"environment": environment}
        nbformat.write(notebook, executed)
    except Exception as error:
        raise _failure(stem, "replacing its outputs", f"{type(error).__name__}: {error}",
                       traceback.format_exc(), logs) from None
    _replace(staging, quick_root, stem, logs, log)
    shutil.rmtree(staging, ignore_errors=True)
    shown = quick_root.relative_to(root) / "notebooks" / f"{stem}.ipynb"
    log(f"{stem}: quick run in {seconds:.1f} s -> {shown}; {claims_held(quick_root, stem)}")


def claims_held(root: Path, stem: str) -> str:
    """How many claims ``root/data/<stem>/claims.csv`` records and each outcome's count
    (:func:`lib.claims.tally`; claims that do not hold never fail the build: another machine may legitimately
    differ)."""
    path = root / "data" / stem / "claims.csv"
    if not path.exists():
        return "no claims recorded"
    import pandas as pd

    from lib.claims import tally

    return tally(pd.read_csv(path).verdict.tolist())


def _with_missing_upstream(chosen: list[Path], available: list[Path], root: Path, log) -> list[Path]:
    """``chosen`` and, before them, every chapter they read whose quick run is missing from ``build/quick/``
    (a quick run reads only quick runs: the committed book measured other models and sizes)."""
    wanted, quick_data = set(chosen), root / "build" / "quick" / "data"
    for source in reversed(available):  # a later chapter's upstream may need its own upstream
        if source not in wanted:
            continue
        for other in upstream_chapters(source, available):
            if other not in wanted and not (quick_data / other.stem / PROVENANCE).exists():
                log(f"{source.stem} reads {other.stem}, which has no quick run in build/quick/: running it first")
                wanted.add(other)
    return [s for s in available if s in wanted]


def build(*, quick: bool = False, device: str | None = None, only: list[str] | None = None,
          force: bool = False, root: Path = REPO_ROOT, log=print) -> int:
    """Build the book (or the quick book) whose notebooks are in ``root/notebooks``; return 0 on
    success, 1 if a chapter failed, 2 if ``only`` matched nothing or the device is unknown or absent,
    3 if another build holds the lock, 130 if interrupted, 143 if terminated (SIGTERM)."""
    available = sources(root / "notebooks")
    chosen = [s for s in available if not only or any(s.stem.startswith(o) for o in only)]
    if only and not chosen:
        log(f"no notebook matches {only}; notebooks are: {', '.join(s.stem for s in available)}")
        return 2
    if quick:
        chosen = _with_missing_upstream(chosen, available, root, log)
    try:
        with build_lock(root):
            try:
                environment = run_environment(device)  # once per build, in a subprocess: no torch here
            except ValueError as error:
                log(f"FAILED: make book: {error}")
                return 2
            log(f"building with torch {environment['torch']}, CUDA {environment['cuda']}, device "
                f"{environment['device']} ({environment['device_name']})")
            recover(root / "build" / "quick" if quick else root, log)
            for source in chosen:
                if quick:
                    _run_quick(source, root, device, environment, log)
                else:
                    _run_chapter(source, root, device, environment, force, log)
    except BuildBusy as error:
        log(f"FAILED: {error}")
        return 3
    except NotebookFailed as error:
        log(f"FAILED: {error}")
        return error.status
    except HalfReplaced as error:  # an earlier build's half-done replacement that recover() cannot settle
        log(f"FAILED: {error}")
        return 1
    except KeyboardInterrupt as interrupt:
        what, status = _stopped(interrupt)
        log(f"FAILED: {what} between chapters; every chapter's outputs are whole (old or new)")
        return status
    except OSError as error:  # build/ itself cannot be written (the lock, the journal): nothing was replaced
        log(f"FAILED: the build cannot write under {root / 'build'} ({error}); every chapter's previous "
            f"outputs were kept")
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    # A kernel killed by Ctrl-C or out of memory leaves nbclient's pending task failed with DeadKernelError;
    # asyncio would print its traceback when the loop is collected, after the one-line FAILED message that
    # already reported it (the details are in build/logs/).
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    parser = argparse.ArgumentParser(prog="python -m lib.make.book", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="quick mode, into build/quick/")
    parser.add_argument("--device", default=os.environ.get("DEVICE") or None,
                        help="force a device (cpu, cuda, cuda:N); default: auto")
    parser.add_argument("--force", action="store_true", help="re-run notebooks even if up to date")
    parser.add_argument("--recover", action="store_true",
                        help="only finish (or undo) a replacement an interrupted build left half done")
    parser.add_argument("--root", type=Path, default=REPO_ROOT, help=argparse.SUPPRESS)  # tests' demo books
    parser.add_argument("only", nargs="*", help="notebook stems or prefixes to build (default: all)")
    args = parser.parse_args(argv)
    raise_on_sigterm()  # SIGTERM ends the build as Ctrl-C does: one FAILED line, the kernel stopped
    if args.recover:  # make clean's first step: the book's outputs and the quick book's
        try:
            with build_lock(args.root):
                roots = (args.root, args.root / "build" / "quick", args.root / "build" / "scratch")
                for root in roots:  # a hand run writing into build/ would lose the files it has not swapped in
                    for held in sorted((root / "build" / "locks").glob("*.lock")):
                        ChapterLock(root, held.stem, "make clean").acquire().release()
                unsettled = [side for root in roots for stem in recover(root) for side in side_copies(root, stem)]
        except RunBusy as error:
            print(f"FAILED: {error}; make clean deleted nothing")
            return 3
        except (BuildBusy, HalfReplaced) as error:
            print(f"FAILED: {error}")
            return 3
        except KeyboardInterrupt as interrupt:
            what, status = _stopped(interrupt)
            print(f"FAILED: {what} while recovering; run it again to finish")
            return status
        if unsettled:  # a swap in some state under a journal the build cannot trust: make clean stops here
            print(f"FAILED: a journal the build did not write names outputs with copies beside them "
                  f"({', '.join(str(p) for p in unsettled[:3])}); nothing was touched: look at them and the journal, "
                  f"settle them by hand, and delete the journal")
            return 4
        return 0
    started = time.perf_counter()
    status = build(quick=args.quick, device=args.device, only=args.only, force=args.force, root=args.root)
    print(f"{'quick book' if args.quick else 'book'}: {'done' if status == 0 else 'FAILED'} "
          f"in {time.perf_counter() - started:.1f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
