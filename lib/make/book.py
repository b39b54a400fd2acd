"""The build behind ``make book`` and ``make quick``: run every notebook with papermill.

For each ``notebooks/NN_*.py`` (the py:percent source, read with jupytext), in order:

1. Work out its *input hash* (:mod:`lib.make.staleness`): its source, the library modules it imports (directly
   or through another module), ``constraints.txt``, the data it reads from earlier chapters and the machine
   it runs on (the *resolved* device, its name, the torch and CUDA versions, so ``DEVICE=cpu`` and ``auto``
   on a CPU-only machine are the same build). A chapter is up to date when its executed ``.ipynb`` records
   that hash **and** its committed ``data/<stem>/`` and ``figures/<stem>/`` still match the SHA-256
   manifest recorded beside it; anything else re-runs it.
2. Execute it with papermill into ``build/staging/<stem>/`` (``PREFILL_DECODE_OUTPUT_ROOT`` points its
   :class:`lib.results.Results` there), then record in its ``provenance.json`` the parameters read from
   its tagged ``parameters`` cell and papermill's injected one.
3. Only if every cell succeeded, replace ``data/<stem>/``, ``figures/<stem>/`` and the executed notebook
   as one unit (:func:`commit`): the new outputs are first put beside the old ones, a journal in
   ``build/journal/`` is written, then each is swapped in by renaming. An interrupted swap is completed
   (or, if it cannot be, rolled back) by the next build, so a chapter is always wholly old or wholly new.

Only one build runs in a checkout at a time (a lock on ``build/book.lock``). Every failure, in a cell or
not (a dead kernel, Ctrl-C, a full disk, a read-only folder), ends in one line naming the chapter, the
cell's position in the source and what happened, saying the previous outputs were kept; the traceback
goes to ``build/logs/<stem>.log``.

Quick mode (``--quick``) runs every notebook with ``quick=True``, writes everything under ``build/quick/``
and never touches the committed outputs. Run ``python -m lib.make.book --help`` for the options.
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
import sys
import time
import traceback
from pathlib import Path

import jupytext
import nbformat
import papermill

from lib.make.outputs import BuildBusy, HalfReplaced, build_lock, commit, recover
from lib.params import parameter_values
from lib.paths import OUTPUT_ROOT_ENV, REPO_ROOT
from lib.make.staleness import HASH_KEY, input_hash, output_hashes, run_environment, sources, stale_reason

#: The book's named kernel (``make env`` installs it into .venv); plain ``python3`` where it is missing.
KERNEL_NAME, KERNEL_DISPLAY = "prefill-decode", "Prefill and Decode (.venv)"
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # papermill's tracebacks are coloured; the logs are plain text


def kernel() -> tuple[str, str]:
    """(name, display name) of the kernel chapters run in: the book's own when installed, else python3."""
    from jupyter_client.kernelspec import KernelSpecManager

    if KERNEL_NAME in KernelSpecManager().find_kernel_specs():
        return KERNEL_NAME, KERNEL_DISPLAY
    return "python3", "Python 3"


def strip_run_metadata(path: Path) -> None:
    """Remove papermill's per-cell timing metadata from an executed notebook, so it stays paired with its
    py:percent source (jupytext in JupyterLab refuses a pair whose cells differ, metadata included), and the
    build machine's paths papermill records (a published notebook carries none)."""
    notebook = nbformat.read(path, as_version=4)
    for key in ("input_path", "output_path"):
        notebook.metadata.get("papermill", {}).pop(key, None)
    for cell in notebook.cells:
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)
        if cell.metadata.get("tags") == []:
            del cell.metadata["tags"]
    nbformat.write(notebook, path)


class NotebookFailed(RuntimeError):
    """A chapter failed; ``str()`` is the one line for the reader, ``log`` the file with the details."""

    def __init__(self, line: str, log: Path | None = None, interrupted: bool = False):
        super().__init__(line)
        self.log, self.interrupted = log, interrupted


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


def _failure(stem: str, where: str, what: str, details: str, logs: Path, interrupted=False,
             kept=True) -> NotebookFailed:
    log = logs / f"{stem}.log"
    line = (f"{stem} failed in {where}: {what}." + (f" The previous outputs of {stem} were kept;" if kept else "")
            + f" details in {log}")
    try:
        logs.mkdir(parents=True, exist_ok=True)
        plain = ANSI.sub("", details)  # papermill's tracebacks are coloured
        log.write_text(f"{_dt.datetime.now().isoformat(timespec='seconds')}\n{line}\n\n{plain}\n")
    except OSError as error:  # a full disk cannot take the log either: say so in the line
        line = line.replace(f"details in {log}", f"no log written ({error.strerror})")
    return NotebookFailed(line, log, interrupted)


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
            digest: str | None = None, logs: Path | None = None) -> float:
    """Execute one notebook with papermill; return its wall time in seconds. Any failure raises
    :class:`NotebookFailed` with one line (chapter, cell position, what happened)."""
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
        with _stderr_to(stderr):
            papermill.execute_notebook(str(unexecuted), str(executed), parameters=parameters,
                                       kernel_name=name, cwd=str(source.parent), progress_bar=False,
                                       log_output=False)
        strip_run_metadata(executed)
    except papermill.PapermillExecutionError as error:
        raise _failure(source.stem, _where(executed, error.cell_index), f"{error.ename}: {error.evalue}",
                       "\n".join(error.traceback) + _captured(stderr), logs) from None
    except KeyboardInterrupt:
        raise _failure(source.stem, _where(executed), "interrupted (Ctrl-C)",
                       traceback.format_exc() + _captured(stderr), logs, interrupted=True) from None
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


def record_parameters(executed: Path, provenance: Path) -> None:
    """Write into ``provenance.json`` the parameters the chapter ran with, read from the executed
    notebook's tagged ``parameters`` cell and papermill's ``injected-parameters`` cell."""
    if not provenance.exists():
        return
    values, injected = {}, {}
    for cell in nbformat.read(executed, as_version=4).cells:
        tags = cell.metadata.get("tags", [])
        if "parameters" in tags:
            values.update(parameter_values(cell.source))
        if "injected-parameters" in tags:
            injected = parameter_values(cell.source)
    record = json.loads(provenance.read_text())
    record["parameters"] = {**values, **injected}
    record["parameters_injected"] = sorted(injected)
    provenance.write_text(json.dumps(record, indent=2, default=str) + "\n")


def _run_chapter(source: Path, root: Path, device, environment, force, log) -> None:
    stem = source.stem
    digest = input_hash(source, device, environment)
    reason = "forced" if force else stale_reason(source, root, digest)
    if reason is None:
        log(f"{stem}: up to date")
        return
    staging = root / "build" / "staging" / stem
    logs = root / "build" / "logs"
    log(f"{stem}: running ({reason}) ...")
    shutil.rmtree(staging, ignore_errors=True)
    executed = staging / f"{stem}.ipynb"
    seconds = execute(source, quick=False, device=device, out_root=staging, executed=executed,
                      digest=digest, logs=logs)
    try:
        strays = sorted({p.name for kind in ("data", "figures") for p in (staging / kind).glob("*")} - {stem})
        if strays:
            raise ValueError(f"it wrote outputs for {', '.join(strays)}; Results(...) must be named {stem!r}")
        record_parameters(executed, staging / "data" / stem / "provenance.json")
        notebook = nbformat.read(executed, as_version=4)
        notebook.metadata[HASH_KEY] = {"input_hash": digest, "outputs": output_hashes(staging, stem)}
        nbformat.write(notebook, executed)
        commit(staging, root, stem)
    except KeyboardInterrupt:
        raise _failure(stem, "replacing its outputs", "interrupted (Ctrl-C)", traceback.format_exc(), logs,
                       interrupted=True) from None
    except Exception as error:
        raise _failure(stem, "replacing its outputs", f"{type(error).__name__}: {error}",
                       traceback.format_exc(), logs, kept=not isinstance(error, HalfReplaced)) from None
    shutil.rmtree(staging, ignore_errors=True)
    log(f"{stem}: executed in {seconds:.1f} s; {claims_held(root, stem)}")


def claims_held(root: Path, stem: str) -> str:
    """``"k of n claims held"`` from ``root/data/<stem>/claims.csv`` (claims that do not hold never fail
    the build: another machine may legitimately differ)."""
    path = root / "data" / stem / "claims.csv"
    if not path.exists():
        return "no claims recorded"
    import pandas as pd

    verdicts = pd.read_csv(path).verdict.tolist()
    missing = verdicts.count("not measured")
    return (f"{verdicts.count('held')} of {len(verdicts)} claims held"
            + (f", {missing} not measured" if missing else ""))


def build(*, quick: bool = False, device: str | None = None, only: list[str] | None = None,
          force: bool = False, root: Path = REPO_ROOT, log=print) -> int:
    """Build the book (or the quick book) whose notebooks are in ``root/notebooks``; return 0 on
    success, 1 if a chapter failed, 2 if ``only`` matched nothing, 3 if another build holds the lock,
    130 if interrupted."""
    available = sources(root / "notebooks")
    chosen = [s for s in available if not only or any(s.stem.startswith(o) for o in only)]
    if only and not chosen:
        log(f"no notebook matches {only}; notebooks are: {', '.join(s.stem for s in available)}")
        return 2
    try:
        with build_lock(root):
            environment = run_environment(device)
            log(f"building with torch {environment['torch']}, CUDA {environment['cuda']}, device "
                f"{environment['device']} ({environment['device_name']})")
            recover(root, log)
            for source in chosen:
                if quick:
                    quick_root = root / "build" / "quick"
                    executed = quick_root / "notebooks" / f"{source.stem}.ipynb"
                    executed.parent.mkdir(parents=True, exist_ok=True)
                    seconds = execute(source, quick=True, device=device, out_root=quick_root, executed=executed,
                                      logs=root / "build" / "logs")
                    log(f"{source.stem}: quick run in {seconds:.1f} s -> {executed.relative_to(root)}; "
                        f"{claims_held(quick_root, source.stem)}")
                else:
                    _run_chapter(source, root, device, environment, force, log)
    except BuildBusy as error:
        log(f"FAILED: {error}")
        return 3
    except NotebookFailed as error:
        log(f"FAILED: {error}")
        return 130 if error.interrupted else 1
    except HalfReplaced as error:  # an earlier build's half-done replacement that recover() cannot settle
        log(f"FAILED: {error}")
        return 1
    except KeyboardInterrupt:
        log("FAILED: interrupted between chapters; every chapter's outputs are whole (old or new)")
        return 130
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
    if args.device:
        from lib.device import resolve_device
        try:
            resolve_device(args.device)
        except ValueError as error:
            print(f"make book: {error}", file=sys.stderr)
            return 2
    if args.recover:
        try:
            with build_lock(args.root):
                recover(args.root)
        except (BuildBusy, HalfReplaced) as error:
            print(f"FAILED: {error}")
            return 3
        return 0
    started = time.perf_counter()
    status = build(quick=args.quick, device=args.device, only=args.only, force=args.force, root=args.root)
    print(f"{'quick book' if args.quick else 'book'}: {'done' if status == 0 else 'FAILED'} "
          f"in {time.perf_counter() - started:.1f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
