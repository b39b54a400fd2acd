"""``make html``: the executed book as a static site, built offline without re-running anything.

Reads the committed ``notebooks/NN_*.ipynb`` (the build's executed copies), ``data/<chapter>/provenance.json``
and ``data/<chapter>/claims.csv``, and writes under ``build/site/``:

* ``index.html``: the chapter table (title, what it measures, run time, claims held);
* ``NN_chapter.html``: each chapter with its outputs, figures embedded in the page, hidden answers as
  ``<details>`` blocks that open with a click, and links to the previous and next chapter;
* ``takeaways.html``: every chapter's takeaways on one page;
* ``status.html``: per chapter, the machine, dtype, threads, versions, commit and run time that produced
  it, and how many of its claims held;
* ``teacher.html``: sessions that fit 45 and 90 minutes, installing, what a GPU changes, common failures;
* ``class.html``: class results (``make class``), or the committed example runs when there are none.

Chapters are converted with nbconvert's bundled ``lab`` template, with the blocks that load MathJax,
require.js, mermaid and widget scripts from CDNs switched off (the chapters use no maths, diagrams or
saved widgets), so the pages need no network at build time or to be read. :func:`check` parses a built
site and lists what is wrong: a missing chapter page, an image or internal link that does not resolve,
a stderr output block.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import sys
import time
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

import nbformat
import pandas as pd

from lib import classroom, teaching

REPO_ROOT = Path(__file__).resolve().parents[1]
SITE_DIR = REPO_ROOT / "build" / "site"
NAV_PAGES = [("index.html", "Contents"), ("takeaways.html", "Takeaways"), ("status.html", "Status"),
             ("teacher.html", "For teachers"), ("class.html", "Class results")]

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0; color: #1b1b1b; }
nav.book { background: #f3f4f6; border-bottom: 1px solid #d0d4da; padding: 0.5em 1.5em; font-size: 0.95em; }
nav.book a { margin-right: 1.2em; text-decoration: none; color: #0b5394; }
nav.book .step { float: right; }
nav.book .step a { margin: 0 0 0 1.2em; }
main.page { max-width: 64em; margin: 1.5em auto; padding: 0 1.5em; line-height: 1.5; }
main.page table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.92em; }
main.page th, main.page td { border: 1px solid #d0d4da; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
main.page th { background: #f3f4f6; }
.held { color: #137333; } .not-held { color: #b3261e; } .muted { color: #666; }
details { margin: 0.4em 0; } summary { cursor: pointer; color: #0b5394; }
pre.message { background: #fdf3f2; border-left: 3px solid #b3261e; padding: 0.5em; white-space: pre-wrap; }
"""

CHAPTER_TEMPLATE = """{%- extends 'index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{% block jupyter_widgets %}{% endblock jupyter_widgets %}
{% block extra_css %}<style type="text/css">{{ resources.book_css }}</style>{% endblock extra_css %}
{%- block body_header -%}
{{ super() }}
{{ resources.book_nav }}
{%- endblock body_header -%}
{% block body_footer %}
{{ resources.book_nav }}
{{ super() }}
{% endblock body_footer %}
"""


@dataclass
class Chapter:
    """One chapter of the book as the site shows it."""

    stem: str
    title: str
    summary: str
    notebook: Path | None  # the executed .ipynb, None if the chapter was never executed
    provenance: dict | None
    claims: pd.DataFrame | None
    run_seconds: float | None  # papermill's duration, else provenance's wall time

    @property
    def page(self) -> str:
        return f"{self.stem}.html"

    def claims_summary(self) -> str:
        """``"5 of 6 held"``, or ``"no claims recorded"``."""
        if self.claims is None or "verdict" not in self.claims:
            return "no claims recorded"
        verdicts = self.claims["verdict"].astype(str).str.strip().str.lower()
        held, total = int((verdicts == "held").sum()), len(verdicts)
        rest = [f"{n} {v}" for v, n in verdicts[verdicts != "held"].value_counts().items()]
        return f"{held} of {total} held" + (f" ({', '.join(rest)})" if rest else "")


def _markdown_text(cell) -> str:
    return cell.source if cell.cell_type == "markdown" else ""


def _markdown_outputs(cell) -> str:
    """The markdown a code cell displayed: takeaways decided by the run's data are written by code."""
    if cell.cell_type != "code":
        return ""
    return "\n\n".join(o["data"]["text/markdown"] for o in cell.get("outputs", [])
                        if "text/markdown" in o.get("data", {}))


def _title_and_summary(notebook) -> tuple[str, str]:
    """The first ``#`` heading, and the first sentence of the paragraph after it."""
    for cell in notebook.cells:
        lines = _markdown_text(cell).strip().splitlines()
        if lines and lines[0].startswith("# "):
            title = lines[0][2:].strip()
            body = " ".join(line.strip() for line in lines[1:] if line.strip()).strip()
            first = re.split(r"(?<=[.!?])\s", body, maxsplit=1)[0] if body else ""
            return title, re.sub(r"[*_`]", "", first)
    return "", ""


def load_chapters(root: Path = REPO_ROOT) -> list[Chapter]:
    """Every chapter that has a py:percent source, with its executed notebook, provenance and claims."""
    chapters = []
    for source in sorted((root / "notebooks").glob("[0-9][0-9]_*.py")):
        executed = source.with_suffix(".ipynb")
        notebook = nbformat.read(executed, as_version=4) if executed.exists() else None
        title, summary = _title_and_summary(notebook) if notebook else ("", "")
        data = root / "data" / source.stem
        provenance = json.loads((data / "provenance.json").read_text()) if (data / "provenance.json").exists() else None
        claims = None
        if (data / "claims.csv").exists():
            try:
                claims = pd.read_csv(data / "claims.csv")
            except (pd.errors.ParserError, pd.errors.EmptyDataError):
                claims = None
        seconds = (notebook.metadata.get("papermill", {}).get("duration") if notebook else None)
        if seconds is None and provenance:
            seconds = provenance.get("wall_time_s")
        chapters.append(Chapter(source.stem, title or source.stem, summary, executed if notebook else None,
                                provenance, claims, float(seconds) if seconds is not None else None))
    return chapters


# ---------------------------------------------------------------------------------------------------
# Page furniture


def nav(prev: Chapter | None = None, next_: Chapter | None = None, pages: list[tuple[str, str]] = NAV_PAGES) -> str:
    links = "".join(f'<a href="{href}">{label}</a>' for href, label in pages)
    step = ""
    if prev or next_:
        step = '<span class="step">'
        if prev:
            step += f'<a href="{prev.page}" rel="prev">&larr; {html.escape(prev.title)}</a>'
        if next_:
            step += f'<a href="{next_.page}" rel="next">{html.escape(next_.title)} &rarr;</a>'
        step += "</span>"
    return f'<nav class="book">{links}{step}</nav>'


def page(title: str, body: str, pages: list[tuple[str, str]] = NAV_PAGES) -> str:
    """A plain page of the site (not a chapter): the navigation bar, a title and ``body``."""
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1.0">\n'
            f"<title>{html.escape(title)} - Prefill and Decode</title>\n<style>{CSS}</style>\n</head>\n"
            f'<body>\n{nav(pages=pages)}\n<main class="page">\n<h1>{html.escape(title)}</h1>\n{body}\n'
            f"</main>\n</body>\n</html>\n")


def table(frame: pd.DataFrame) -> str:
    return frame.to_html(index=False, border=0, na_rep="—", escape=False)


def _minutes(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


# ---------------------------------------------------------------------------------------------------
# Chapters


def _chapter_links(text: str, stems: set[str]) -> str:
    """Point links to another chapter's notebook or source at its page."""
    def swap(match):
        stem = match.group(2)
        return f'{match.group(1)}{stem}.html' if stem in stems else match.group(0)
    return re.sub(r'(href=")(?:\.\./notebooks/|\./)?(\d\d_[a-z0-9_]+)\.(?:ipynb|py)', swap, text)


def render_chapter(chapter: Chapter, prev: Chapter | None, next_: Chapter | None, stems: set[str],
                   pages: list[tuple[str, str]] = NAV_PAGES) -> str:
    """The chapter's executed notebook as one self-contained HTML page (figures embedded)."""
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter

    # embed_images stays off: it re-parses each HTML block on its own, which closes a <details> before the
    # answer inside it. Output figures are data URIs anyway; a prose image must lie beside the page (check()).
    exporter = HTMLExporter(template_name="lab", extra_loaders=[DictLoader({"book.html.j2": CHAPTER_TEMPLATE})])
    exporter.template_file = "book.html.j2"
    notebook = nbformat.read(chapter.notebook, as_version=4)
    notebook.metadata.pop("widgets", None)  # no widget state is published; the pages load no scripts
    resources = {"book_css": CSS, "book_nav": nav(prev, next_, pages),
                 "metadata": {"name": chapter.title, "path": str(chapter.notebook.parent)}}
    body, _ = exporter.from_notebook_node(notebook, resources=resources)
    return _chapter_links(body, stems)


def takeaways(chapter: Chapter) -> str:
    """The markdown of the chapter's "Takeaways" section: from its heading to the next heading of the
    same or a higher level, across cells."""
    if chapter.notebook is None:
        return ""
    notebook = nbformat.read(chapter.notebook, as_version=4)
    lines = "\n\n".join(_markdown_text(c) + _markdown_outputs(c) for c in notebook.cells).splitlines()
    for i, line in enumerate(lines):
        heading = re.match(r"^(#+)\s*Takeaways?\b", line, re.IGNORECASE)
        if heading:
            level = len(heading.group(1))
            section = []
            for following in lines[i + 1:]:
                if re.match(rf"^#{{1,{level}}}\s", following):
                    break
                section.append(following)
            return "\n".join(section).strip()
    return ""


def _markdown_html(text: str) -> str:
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    return markdown2html_mistune(text)


# ---------------------------------------------------------------------------------------------------
# The other pages


def index_page(chapters: list[Chapter]) -> str:
    rows = [{"Chapter": f'<a href="{c.page}">{html.escape(c.title)}</a>' if c.notebook else html.escape(c.stem),
             "What it does": html.escape(c.summary) or '<span class="muted">not executed yet</span>',
             "Run time": _minutes(c.run_seconds), "Claims": c.claims_summary()} for c in chapters]
    intro = ("<p>An executable book about why a request to a language model is two jobs with different "
             "bottlenecks: <b>prefill</b> reads the whole prompt in one parallel pass; <b>decode</b> makes one "
             "token per pass. Every chapter below was executed on the machine named on its "
             '<a href="status.html">status</a> line; run times are that run\'s.</p>')
    return page("Prefill and Decode", intro + table(pd.DataFrame(rows)))


def status_page(chapters: list[Chapter]) -> str:
    rows, details = [], []
    for c in chapters:
        p = c.provenance or {}
        params = p.get("parameters", {}) if isinstance(p.get("parameters"), dict) else {}
        listed = params.get("dtypes") or [c[0] for c in params.get("configs") or [] if isinstance(c, (list, tuple)) and c]
        dtype = p.get("dtype") or ", ".join(dict.fromkeys(map(str, listed))) or None
        versions = ", ".join(f"{k} {p[k]}" for k in ("python", "torch", "transformers", "numpy", "pandas",
                                                    "matplotlib") if p.get(k))
        device = " ".join(str(x) for x in (p.get("device"), f"({p['device_name']})" if p.get("device_name") else None) if x)
        rows.append({"Chapter": f'<a href="{c.page}">{c.stem}</a>' if c.notebook else c.stem,
                     "Run time": _minutes(c.run_seconds), "Date": p.get("date", "—"),
                     "Device": html.escape(device) or "—", "dtype": dtype or "—",
                     "Threads": p.get("torch_threads", "—"), "Versions": html.escape(versions) or "—",
                     "Commit": p.get("git_commit", "—"),
                     "Mode": "quick" if p.get("quick") else ("full" if p else "—"),
                     "Claims": c.claims_summary()})
        if c.claims is not None and len(c.claims):
            shown = c.claims.copy()
            if "verdict" in shown:
                shown["verdict"] = [f'<span class="{"held" if str(v).strip() == "held" else "not-held"}">'
                                    f"{html.escape(str(v))}</span>" for v in shown["verdict"]]
            for column in shown.columns:
                if column != "verdict":
                    shown[column] = shown[column].map(lambda v: html.escape(str(v)) if pd.notna(v) else v)
            details.append(f"<details><summary>{c.stem}: {c.claims_summary()}</summary>{table(shown)}</details>")
    body = ("<p>What produced each chapter's numbers, read from <code>data/&lt;chapter&gt;/provenance.json</code>, "
            "and how many of the chapter's claims held on that run (<code>data/&lt;chapter&gt;/claims.csv</code>). "
            "Run time is the whole notebook's execution, from papermill's record in the executed notebook.</p>"
            + table(pd.DataFrame(rows)))
    if details:
        body += "<h2>Claims, chapter by chapter</h2>" + "".join(details)
    return page("Status of this build", body)


def takeaways_page(chapters: list[Chapter]) -> str:
    parts = []
    for c in chapters:
        text = takeaways(c)
        if text:
            parts.append(f'<h2><a href="{c.page}">{html.escape(c.title)}</a></h2>{_markdown_html(text)}')
    return page("Takeaways, chapter by chapter", "".join(parts) or "<p>No chapter has a takeaways section yet.</p>")


def class_page(results: Path | None, example: bool = False) -> str:
    """The class comparison from ``results`` (a folder written by ``lib.classroom.gather``); ``example``
    when it is the committed example runs rather than a class's."""
    if results is None or not (results / "comparison.csv").exists():
        return page("Class results", "<p>No class results yet. Students run <code>make class-zip</code> and send "
                    "the zip; the teacher runs <code>make class DIRS=\"a.zip b.zip ...\"</code>, then "
                    "<code>make html</code>.</p>")
    comparison = pd.read_csv(results / "comparison.csv")
    body = []
    if example:
        body.append("<p><b>Example.</b> No class results were gathered on this machine, so this page shows the "
                    "book's two example runs (<code>classroom/runs/</code>): the development machine in quick "
                    "mode with one thread and with two. Quick mode uses the tiny GPT-2 for the sweeps, so its "
                    "rates are not the full book's. Other jobs shared the machine while they ran (a load average "
                    "of about 14 on its 2 cores, read with <code>uptime</code>), and the 2-thread run, which "
                    "needs both cores, suffered most: read them as an example of this page, not as the machine's "
                    "speed. <code>make class DIRS=...</code> replaces them.</p>")
    body.append("<p>One row per machine; every number comes from that run's own tables "
                "(the table under <i>Where each number comes from</i> says which); empty means not measured.</p>")
    shown = comparison.copy()
    for column in shown.select_dtypes("float").columns:
        shown[column] = shown[column].map(lambda v: f"{v:,.3g}" if pd.notna(v) else v)
    body.append(table(shown))
    if (results / "comparison.png").exists():
        body.append('<p><img src="class/comparison.png" alt="Bar charts of what each machine measured" '
                    'style="max-width:100%"></p>')
    if (results / "claims.csv").exists():
        claims = pd.read_csv(results / "claims.csv")
        body.append("<h2>Claims on each machine</h2>" + (table(claims) if len(claims) else
                    "<p>No run recorded claims (<code>data/&lt;chapter&gt;/claims.csv</code>).</p>"))
    if (results / "sources.csv").exists():
        body.append("<details><summary>Where each number comes from</summary>"
                    + table(pd.read_csv(results / "sources.csv")) + "</details>")
    return page("Class results", "".join(body))


# ---------------------------------------------------------------------------------------------------
# Build and check


def class_results(root: Path, scratch: Path) -> Path | None:
    """The class results to publish: ``build/class`` when gathered, else the example runs gathered now."""
    gathered = root / "build" / "class"
    if (gathered / "comparison.csv").exists():
        return gathered
    examples = sorted(p for p in (root / "classroom" / "runs").glob("*") if p.is_dir())
    if not examples:
        return None
    classroom.gather(examples, scratch)
    return scratch


def build(out: Path = SITE_DIR, root: Path = REPO_ROOT, log=print) -> list[Path]:
    """Write the whole site under ``out`` (emptied first); return the pages written."""
    started = time.perf_counter()
    chapters = load_chapters(root)
    if not any(c.notebook for c in chapters):
        raise ValueError(f"no executed notebooks in {root / 'notebooks'}; run make book first")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    written = []

    def write(name: str, text: str) -> None:
        (out / name).write_text(text, encoding="utf-8")
        written.append(out / name)

    executed = [c for c in chapters if c.notebook]
    stems = {c.stem for c in executed}
    for i, chapter in enumerate(executed):
        prev = executed[i - 1] if i > 0 else None
        next_ = executed[i + 1] if i + 1 < len(executed) else None
        write(chapter.page, render_chapter(chapter, prev, next_, stems))
    write("index.html", index_page(chapters))
    write("status.html", status_page(chapters))
    write("takeaways.html", takeaways_page(chapters))
    write("teacher.html", page("For teachers", teaching.teacher_body(chapters, root)))
    results = class_results(root, out / "class")
    example = results == out / "class"  # gathered just now from classroom/runs/
    if results is not None and not example:
        shutil.copytree(results, out / "class", ignore=shutil.ignore_patterns("class-*", "*.zip"))
    write("class.html", class_page(out / "class" if results else None, example))
    log(f"site: {len(written)} pages in {out} ({time.perf_counter() - started:.1f} s)")
    return written


class _Links(HTMLParser):
    """Collects a page's links, image sources, element ids and stderr output blocks."""

    def __init__(self):
        super().__init__()
        self.links, self.images, self.ids, self.stderr, self.details = [], [], set(), 0, 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])
        if tag == "img" and attrs.get("src") is not None:
            self.images.append(attrs["src"])
        if attrs.get("data-mime-type") == "application/vnd.jupyter.stderr":
            self.stderr += 1
        if tag == "details":
            self.details += 1


def parse(path: Path) -> _Links:
    parser = _Links()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def check(out: Path = SITE_DIR, root: Path = REPO_ROOT) -> list[str]:
    """Everything wrong with a built site, one line each (an empty list: nothing)."""
    problems = []
    for chapter in load_chapters(root):
        if not (out / chapter.page).exists():
            problems.append(f"{chapter.page}: missing (is {chapter.stem}.ipynb executed?)")
    for name, _ in NAV_PAGES:
        if not (out / name).exists():
            problems.append(f"{name}: missing")
    machine_paths = [p for p in {str(root.resolve()), str(Path.home()), str(Path(sys.prefix))} if len(p) > 1]
    for path in sorted(out.glob("*.html")):
        found = parse(path)
        text = path.read_text(encoding="utf-8")
        for machine_path in machine_paths:
            if machine_path + "/" in text:
                problems.append(f"{path.name}: shows a path of the build machine ({machine_path}/...)")
        if found.stderr:
            problems.append(f"{path.name}: {found.stderr} stderr output block(s)")
        for src in found.images:
            if src.startswith("data:image/"):
                continue
            if urlparse(src).scheme or not (path.parent / unquote(src)).is_file():
                problems.append(f"{path.name}: image {src[:80]!r} does not resolve to a file in the site")
        for href in found.links:
            url = urlparse(href)
            if url.scheme in ("http", "https", "mailto"):
                continue  # external links are the reader's business, not the build's
            target = path if not url.path else path.parent / unquote(url.path)
            if not target.is_file():
                problems.append(f"{path.name}: link {href!r} does not resolve")
            elif url.fragment and target.suffix == ".html" and url.fragment not in parse(target).ids:
                problems.append(f"{path.name}: link {href!r}: no element with that id")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lib.site", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=SITE_DIR)
    args = parser.parse_args(argv)
    try:
        build(args.out)
    except ValueError as error:
        print(f"make html: {error}", file=sys.stderr)
        return 2
    problems = check(args.out)
    for problem in problems:
        print(f"  site check: {problem}")
    print(f"open {args.out / 'index.html'}" + (f" ({len(problems)} problem(s) above)" if problems else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
