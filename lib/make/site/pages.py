"""The site's pages as Sphinx sources (``make html``, :mod:`lib.make.site.build`): each chapter's executed
notebook prepared for MyST-NB, its downloads, and the contents, takeaways, status, teacher and class pages
as MyST markdown.

A chapter's notebook is shown as the build executed it, with three changes made on the way: its code
cells fold behind a "Show the code" button (the prose and the outputs come first; the parameters cell stays
open, it is what a reader changes), a cell tagged ``answer`` shows no code at all (its answer, in a
``<details>`` block, opens on a click like a typed one; an answer cell that displays anything else is
folded too), and a box after the title links the chapter's ``.py``, its executed ``.ipynb`` and its tables.

Tables on the generated pages are HTML written here, every cell escaped (:func:`escape`), and put on the
page by Sphinx's ``raw`` directive from a file, so no text from a student's results is ever read as
markdown or HTML. No chapter imports this module.
"""

from __future__ import annotations

import html
import json
import math
import re
import shutil
import subprocess
import zipfile
from pathlib import Path

import nbformat
import pandas as pd

from lib.make import classroom, teaching
from lib.make.site.chapters import Chapter, takeaways
from lib.paths import REPO_ROOT

NAV_PAGES = [("index.html", "Contents"), ("takeaways.html", "Takeaways"), ("glossary.html", "Glossary"),
             ("status.html", "Status"),
             ("teacher.html", "For teachers"), ("class.html", "Class results")]
"""The pages beside the chapters, as the site names them."""
GLOSSARY = "glossary.md"
"""The glossary, beside the chapters in ``notebooks/`` (the chapters link a term's first use to it)."""
ANSWER_TAG = "answer"
"""The cell tag of a "Check yourself" answer a chapter computes in code (as in :mod:`lib.make.student`)."""
VERSIONS = ("python", "torch", "transformers", "numpy", "pandas", "matplotlib", "papermill")
"""The versions a chapter's ``provenance.json`` records, in the order the status page names them."""


# ---------------------------------------------------------------------------------------------- HTML pieces

def escape(value) -> str:
    """``value`` as text safe inside HTML that Sphinx's raw directive passes on: ``&``, ``<``, ``>`` and both
    quotes escaped, backticks too, line breaks as ``<br>``; a missing value is a dash."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    text = html.escape(str(value), quote=True).replace("`", "&#96;")
    return "<br>".join(text.splitlines()) if "\n" in text or "\r" in text else text


def number(value: float) -> str:
    """A measured float as a table shows it: three significant figures, thousands written out
    (``8,562``, not ``8.56e+03``)."""
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def breakable(text: str) -> str:
    """Escaped ``text`` that may break after an underscore (a long snake_case name in a narrow column)."""
    return text.replace("_", "_<wbr>")


def html_table(frame: pd.DataFrame, raw: tuple[str, ...] = ()) -> str:
    """``frame`` as an HTML table in its own scrolling box: every header and cell escaped, except the cells
    of the columns in ``raw`` (HTML this module wrote); floats written by :func:`number`."""
    def cell(column, value):
        if column in raw:
            return str(value)
        if isinstance(value, float) and not math.isnan(value):
            return escape(number(value))
        return breakable(escape(value))

    head = "".join(f"<th>{breakable(escape(c))}</th>" for c in frame.columns)
    rows = "".join("<tr>" + "".join(f"<td>{cell(c, v)}</td>" for c, v in zip(frame.columns, row)) + "</tr>"
                   for row in frame.itertuples(index=False))
    return f'<div class="book-table"><table class="table"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>'


class Page:
    """One generated page: MyST markdown, with HTML pieces kept in files beside it (``_fragments/``)."""

    def __init__(self, src: Path, name: str, title: str):
        self.src, self.name, self.parts, self.fragments = src, name, [f"# {title}\n"], 0

    def md(self, text: str) -> Page:
        self.parts.append(text.strip() + "\n")
        return self

    def html(self, text: str) -> Page:
        """Put ``text`` on the page as it is (it must be HTML this module built, its data escaped)."""
        self.fragments += 1
        fragment = self.src / "_fragments" / f"{self.name}-{self.fragments}.html"
        fragment.parent.mkdir(parents=True, exist_ok=True)
        fragment.write_text(text, encoding="utf-8")
        self.parts.append(f"```{{raw}} html\n:file: _fragments/{fragment.name}\n```\n")
        return self

    def write(self) -> Path:
        path = self.src / f"{self.name}.md"
        path.write_text("\n".join(self.parts), encoding="utf-8")
        return path


def _minutes(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


# ------------------------------------------------------------------------------------------------ chapters

def downloads(chapter: Chapter, root: Path, src: Path) -> str:
    """Copy the chapter's ``.py``, executed ``.ipynb`` and tables (one by one, and all in a zip) under
    ``src/downloads/<chapter>/``; return the markdown box that links them."""
    folder = src / "downloads" / chapter.stem
    folder.mkdir(parents=True, exist_ok=True)
    source = root / "notebooks" / f"{chapter.stem}.py"
    shutil.copy2(source, folder / source.name)
    shutil.copy2(chapter.notebook, folder / chapter.notebook.name)
    tables = sorted((root / "data" / chapter.stem).glob("*.csv"))
    for table in tables:
        shutil.copy2(table, folder / table.name)
    link = lambda name: f"{{download}}`{name} <downloads/{chapter.stem}/{name}>`"  # noqa: E731
    lines = [f"{link(source.name)}: the chapter's source (py:percent; opens as a notebook with jupytext)",
             f"{link(chapter.notebook.name)}: the executed notebook, every output in it"]
    if tables:
        archive = folder / f"{chapter.stem}-tables.zip"
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zipped:
            for table in tables:
                zipped.write(table, f"data/{chapter.stem}/{table.name}")
        each = ", ".join(link(t.name) for t in tables)
        lines.append(f"{link(archive.name)}: its {len(tables)} tables "
                     f"(`data/{chapter.stem}/*.csv`), or one by one: {each}")
    items = "\n".join(f"* {line}" for line in lines)
    return f":::{{admonition}} Download this chapter\n:class: book-downloads\n\n{items}\n:::\n"


def _shows_details(cell) -> bool:
    return any("<details" in str(o.get("data", {}).get(kind, "")) for o in cell.get("outputs", [])
               for kind in ("text/markdown", "text/html"))


def chapter_notebook(chapter: Chapter, box: str):
    """The chapter's executed notebook as the site shows it (see the module docstring)."""
    notebook = nbformat.read(chapter.notebook, as_version=4)
    notebook.metadata.pop("widgets", None)  # no widget state is published; the pages load no widget scripts
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        tags = list(cell.metadata.get("tags", []))
        if ANSWER_TAG in tags:
            tags.append("remove-input")
            if not _shows_details(cell):
                tags.append("hide-output")
                cell.metadata["mystnb"] = {"code_prompt_show": "Show the answer", "code_prompt_hide": "Hide the answer"}
        elif "parameters" not in tags:
            tags.append("hide-input")
        cell.metadata["tags"] = tags
    first = 1 if notebook.cells and notebook.cells[0].cell_type == "markdown" else 0
    notebook.cells.insert(first, nbformat.v4.new_markdown_cell(box))
    return notebook


def index_page(chapters: list[Chapter], src: Path) -> Page:
    """The contents page: what the book is, how to use the site, each chapter's summary, run time and claims."""
    page = Page(src, "index", "Prefill and Decode")
    page.md("An executable book about why a request to a language model is two jobs with different "
            "bottlenecks: **prefill** reads the whole prompt in one parallel pass and writes the KV cache; "
            "**decode** then makes one token per pass, reading the weights and the cache every time. Each "
            "chapter measured this on the machine named on the [status page](status.md), and puts every "
            "measurement beside what arithmetic predicts and beside published reference runs.")
    page.md("Every page here is the chapter as the book's build executed it: the prose and the outputs come "
            "first, and each code cell opens with its **Show the code** button. The \"Check yourself\" answers "
            "open with a click. Each chapter links its source, its executed notebook and its tables. To run a "
            "chapter yourself, `make lab` opens your own copy of it in JupyterLab.")
    rows = [{"Chapter": f'<a href="{c.page}">{escape(c.title)}</a>' if c.notebook else escape(c.stem),
             "What it measures": escape(c.summary) if c.notebook else '<span class="muted">not executed yet</span>',
             "Run time": _minutes(c.run_seconds), "Claims": escape(c.claims_summary())} for c in chapters]
    page.html(html_table(pd.DataFrame(rows), raw=("Chapter", "What it measures")))
    executed = "\n".join(c.stem for c in chapters if c.notebook)
    page.md(f"```{{toctree}}\n:hidden:\n:caption: Chapters\n\n{executed}\n```")
    page.md("```{toctree}\n:hidden:\n:caption: Around the book\n\ntakeaways\nglossary\nstatus\nteacher\nclass\n```")
    return page


def takeaways_page(chapters: list[Chapter], src: Path) -> Page:
    """Every chapter's "Takeaways" section on one page, each under a link to its chapter."""
    page = Page(src, "takeaways", "Takeaways, chapter by chapter")
    found = False
    for c in chapters:
        text = takeaways(c)
        if text:
            found = True
            page.md(f"## [{c.title}]({c.stem}.ipynb)\n\n{text}")
    if not found:
        page.md("No chapter has a takeaways section yet.")
    return page


# -------------------------------------------------------------------------------------------------- status

def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def rerun_check(chapter: Chapter, root: Path) -> str:
    """What ``make book`` would do with the chapter now, by the build's own rule (:mod:`lib.make.staleness`):
    ``"up to date"`` when nothing its outputs depend on changed since it ran, else the reason it would re-run.
    The machine compared is the one its outputs recorded, where they did, else this one."""
    from lib.make.staleness import HASH_KEY, input_hash, run_environment, stale_reason

    source = root / "notebooks" / f"{chapter.stem}.py"
    try:
        record = nbformat.read(chapter.notebook, as_version=4).metadata.get(HASH_KEY, {})
        environment = record.get("environment") or run_environment(None)
        reason = stale_reason(source, root, input_hash(source, None, environment))
    except Exception as error:  # a page that cannot say is still a page; it says why
        return f"not checked ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})"
    return "up to date" if reason is None else f"would re-run: {reason}"


def _once(chapters: list[Chapter], key) -> tuple[str, list[str]]:
    """The value ``key(provenance)`` takes, written once, and, where chapters differ, which has which."""
    values: dict[str, list[str]] = {}
    for c in chapters:
        if c.provenance:
            value = key(c.provenance)
            if value:
                values.setdefault(str(value), []).append(c.stem[:2])
    if len(values) <= 1:
        return next(iter(values), "—"), []
    return "differs between chapters", [f"{v} (chapters {', '.join(s)})" for v, s in values.items()]


def status_page(chapters: list[Chapter], root: Path, src: Path) -> Page:
    """What produced each chapter's numbers: the machine and versions (each stated once), the commit each
    chapter ran at and why it is not the checkout's, each run's settings, and every claim's verdict."""
    page = Page(src, "status", "Status of this build")
    ran = [c for c in chapters if c.provenance]
    page.md("What produced each chapter's numbers, read from `data/<chapter>/provenance.json`, and how many of "
            "its claims held on that run (`data/<chapter>/claims.csv`).")
    page.md("## The machine and the versions")
    device = lambda p: " ".join(str(x) for x in (p.get("device"), f"({p['device_name']})" if p.get("device_name") else None) if x)
    cores = lambda p: f"{p['cpu_count']} cores" if p.get("cpu_count") else None
    facts = [("Device", device), ("CPU cores", cores)] + [(name, lambda p, n=name: p.get(n)) for name in VERSIONS]
    items = []
    for label, key in facts:
        value, differs = _once(ran, key)
        items.append(f"<li><b>{escape(label)}</b>: {escape(value)}"
                     + (f" ({escape('; '.join(differs))})" if differs else "") + "</li>")
    page.md(f"Every chapter below ran on the same machine with the same versions unless a line says otherwise "
            f"({len(ran)} chapters recorded):")
    page.html("<ul>" + "".join(items) + "</ul>")

    page.md("## Which commit each chapter ran at")
    head = _git(root, "rev-parse", "--short=12", "HEAD") or "unknown"
    page.md(f"This site was built from the checkout at commit `{head}`. A chapter's numbers name the commit "
            "at which it last ran, usually an earlier one, and chapters name different ones: `make book` "
            "re-runs a chapter only when something its outputs depend on changes (its source, a library module "
            "it imports, the pinned versions, a table it reads from another chapter or from `data/reference/`, "
            "or the machine), so a commit that changed only other files (another chapter, the README, the site, "
            "or the commit that saved the chapter's own outputs) leaves its numbers, and the commit they name, "
            "as they were. The last column applies that rule now, as `make book` would.")
    rows = []
    for c in ran:
        commit = str(c.provenance.get("git_commit", "—"))
        dirty = c.provenance.get("git_dirty") or []
        described = _git(root, "log", "-1", "--format=%cs: %s", commit) if commit not in ("—", "unknown") else None
        if described and len(described) > 100:
            described = described[:99].rsplit(" ", 1)[0] + " …"
        rows.append({"Chapter": f'<a href="{c.page}">{escape(c.stem)}</a>' if c.notebook else escape(c.stem),
                     "Ran at": commit + (f" (with uncommitted {', '.join(dirty)})" if dirty else ""),
                     "That commit": described or "not in this checkout's history",
                     "Now": rerun_check(c, root) if c.notebook else "not executed"})
    page.html(html_table(pd.DataFrame(rows), raw=("Chapter",)))

    page.md("## Each chapter's run")
    page.md("Run time is the whole notebook's execution, from papermill's record in the executed notebook.")
    rows = []
    for c in chapters:
        p = c.provenance or {}
        params = p.get("parameters", {}) if isinstance(p.get("parameters"), dict) else {}
        listed = params.get("dtypes") or [x[0] for x in params.get("configs") or [] if isinstance(x, (list, tuple)) and x]
        dtype = p.get("dtype") or ", ".join(dict.fromkeys(map(str, listed))) or ", ".join(c.measured_dtypes) or None
        rows.append({"Chapter": f'<a href="{c.page}">{escape(c.stem)}</a>' if c.notebook else escape(c.stem),
                     "Run time": _minutes(c.run_seconds), "Date": p.get("date", "—"),
                     "Mode": "quick" if p.get("quick") else ("full" if p else "—"), "dtype": dtype or "—",
                     "Threads": p.get("torch_threads", "—"), "Model": p.get("model") or "—",
                     "Claims": c.claims_summary()})
    page.html(html_table(pd.DataFrame(rows), raw=("Chapter",)))

    claimed = [c for c in chapters if c.claims is not None and len(c.claims)]
    if claimed:
        page.md("## Claims, chapter by chapter")
        blocks = []
        for c in claimed:
            shown = c.claims.copy()
            if "verdict" in shown:
                shown["verdict"] = [f'<span class="{"held" if str(v).strip() == "held" else "not-held"}">'
                                    f"{escape(v)}</span>" for v in shown["verdict"]]
            blocks.append(f"<details><summary>{escape(c.stem)}: {escape(c.claims_summary())}</summary>"
                          f"{html_table(shown, raw=('verdict',))}</details>")
        page.html("".join(blocks))
    return page


# --------------------------------------------------------------------------------------- teacher and class

def teacher_page(chapters: list[Chapter], root: Path, src: Path) -> Page:
    """The teacher's page (:mod:`lib.make.teaching`), one section under each of its headings."""
    page = Page(src, "teacher", "For teachers")
    for heading, body in teaching.teacher_sections(chapters, root):
        page.md(f"## {heading}")
        page.html(body)
    return page


CLASS_GROUPS = [
    ("The machines", ["device", "device_name", "threads", "cpu_count", "torch", "quick", "commit", "chapters"]),
    ("What each measured", ["bandwidth_gb_s", "matmul_gflop_s", "ttft_ms", "decode_step_ms", "tpot_ms",
                            "prefill_tokens_per_s"]),
    ("Claims held and time taken", ["claims_held", "claims_recorded", "book_run_s"]),
    ("Flagged: not believed", ["flags"]),
]
"""The class comparison's columns, a table each, so no table is wider than a laptop's screen."""


def _flagged_shown(comparison: pd.DataFrame) -> pd.DataFrame:
    """``comparison`` with each flagged number (its name in the row's ``flagged``) shown as the word
    *flagged*, never as a measured value or a dash; without the ``flagged`` column itself, and without an
    empty ``flags`` column."""
    if "flagged" not in comparison.columns:
        return comparison
    shown = comparison.astype(object)
    for index, names in comparison["flagged"].items():
        for name in (n.strip() for n in str(names).split(",") if isinstance(names, str)):
            if name in shown.columns:
                shown.loc[index, name] = "flagged"
    shown = shown.drop(columns="flagged")
    if "flags" in shown.columns and comparison["flags"].isna().all():
        shown = shown.drop(columns="flags")
    return shown


def class_results(root: Path, scratch: Path) -> tuple[Path | None, bool]:
    """The class results to publish and whether they are the book's example: ``build/class`` when
    ``make class`` gathered some, else the committed example runs gathered now into ``scratch``."""
    gathered = root / "build" / "class"
    if (gathered / "comparison.csv").exists():
        problem = classroom.gathered_problem(gathered)
        if problem:
            raise classroom.BadRun(f"refused to publish the class results: {problem}")
        return gathered, False
    examples = sorted(p for p in (root / "data" / "classroom" / "runs").glob("*") if p.is_dir())
    if not examples:
        return None, False
    classroom.gather(examples, scratch)
    return scratch, True


def class_page(results: Path | None, src: Path, example: bool = False, root: Path = REPO_ROOT) -> Page:
    """The class comparison from ``results`` (a folder :func:`lib.make.classroom.gather` wrote), as tables of
    a few columns each; every text in it came from a student's files and is escaped."""
    page = Page(src, "class", "Class results")
    if results is None or not (results / "comparison.csv").exists():
        return page.md('No class results yet. Students run `make class-zip` and send the zip; the teacher runs '
                       '`make class DIRS="a.zip b.zip ..."`, then `make html`.')
    comparison = _flagged_shown(pd.read_csv(results / "comparison.csv", dtype={"commit": str}))
    if example:
        facts = teaching.runs_conditions(root)
        page.md("**Example.** No class results were gathered on this machine, so this page shows the book's "
                "example runs (`data/classroom/runs/`), one thread and two. Quick mode uses the tiny GPT-2 for "
                "the sweeps, so its rates are not the full book's.")
        if facts:
            page.html(f"<p>Measured {escape(facts.get('measured', ''))} on {escape(facts.get('machine', ''))}. "
                      f"Load: {escape(facts.get('load', 'not recorded'))}. Read them as an example of this "
                      "page, not as the machine's speed; <code>make class DIRS=...</code> replaces them.</p>")
    page.md("One row per machine in each table; every number comes from that run's own tables (*Where each "
            "number comes from*, below, says which); a dash means not measured, and *flagged* a number the run "
            "sent that is not believed (why: *Flagged*, below).")
    key = comparison.columns[0]
    placed = {key}
    for heading, columns in CLASS_GROUPS:
        present = [c for c in columns if c in comparison.columns]
        if present:
            placed |= set(present)
            page.md(f"## {heading}")
            page.html(html_table(comparison[[key, *present]]))
    rest = [c for c in comparison.columns if c not in placed]
    if rest:
        page.md("## Other columns")
        page.html(html_table(comparison[[key, *rest]]))
    if (results / "comparison.png").exists():
        (src / "class").mkdir(parents=True, exist_ok=True)
        shutil.copy2(results / "comparison.png", src / "class" / "comparison.png")
        page.md("```{image} class/comparison.png\n:alt: Bar charts of what each machine measured\n:width: 100%\n```")
    if (results / "claims.csv").exists():
        claims = pd.read_csv(results / "claims.csv")
        page.md("## Claims on each machine")
        page.html(html_table(claims) if len(claims) else
                  "<p>No run recorded claims (<code>data/&lt;chapter&gt;/claims.csv</code>).</p>")
    if (results / "sources.csv").exists():
        page.md("## Where each number comes from")
        page.html("<details><summary>Each number's table and column</summary>"
                  + html_table(pd.read_csv(results / "sources.csv")) + "</details>")
    return page


# ------------------------------------------------------------------------------------------------- all of it

def write_sources(chapters: list[Chapter], root: Path, src: Path) -> list[Path]:
    """Write the whole site's Sphinx sources under ``src`` (emptied first); return the pages written."""
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    written = []
    for chapter in chapters:
        if chapter.notebook is None:
            continue
        notebook = chapter_notebook(chapter, downloads(chapter, root, src))
        path = src / f"{chapter.stem}.ipynb"
        nbformat.write(notebook, path)
        written.append(path)
    glossary = root / "notebooks" / GLOSSARY
    if glossary.exists():  # the chapters link it as glossary.md, beside them, in the site as in JupyterLab
        shutil.copy2(glossary, src / GLOSSARY)
    else:
        Page(src, "glossary", "Glossary").md(f"This checkout has no `notebooks/{GLOSSARY}`.").write()
    written.append(src / GLOSSARY)
    results, example = class_results(root, src / "_class")
    for page in (index_page(chapters, src), takeaways_page(chapters, src), status_page(chapters, root, src),
                 teacher_page(chapters, root, src), class_page(results, src, example, root)):
        written.append(page.write())
    return written
