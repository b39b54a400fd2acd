"""The HTML of the published site's pages (``make html``, :mod:`lib.make.site`): the navigation bar, a plain page,
each chapter converted by nbconvert, and the contents, status, takeaways and class pages.

Chapters are converted with nbconvert's bundled ``lab`` template, with the blocks that load MathJax,
require.js, mermaid and widget scripts from CDNs switched off (the chapters use no maths, diagrams or
saved widgets), so the pages need no network at build time or to be read. Each function returns a page's
text; :mod:`lib.make.site` writes them. No chapter imports this module.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import nbformat
import pandas as pd

from lib.make.site.chapters import Chapter, takeaways

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


def nav(prev: Chapter | None = None, next_: Chapter | None = None, pages: list[tuple[str, str]] = NAV_PAGES) -> str:
    """The navigation bar: a link to each of ``pages``, and to the previous and next chapter when given."""
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
    """``frame`` as an HTML table, its cells' HTML kept (escape what is not HTML first); missing values "—"."""
    return frame.to_html(index=False, border=0, na_rep="—", escape=False)


def _minutes(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


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


def _markdown_html(text: str) -> str:
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    return markdown2html_mistune(text)


def index_page(chapters: list[Chapter]) -> str:
    """The contents page: each chapter's title, what it does, run time and claims held."""
    rows = [{"Chapter": f'<a href="{c.page}">{html.escape(c.title)}</a>' if c.notebook else html.escape(c.stem),
             "What it does": html.escape(c.summary) or '<span class="muted">not executed yet</span>',
             "Run time": _minutes(c.run_seconds), "Claims": c.claims_summary()} for c in chapters]
    intro = ("<p>An executable book about why a request to a language model is two jobs with different "
             "bottlenecks: <b>prefill</b> reads the whole prompt in one parallel pass; <b>decode</b> makes one "
             "token per pass. Every chapter below was executed on the machine named on its "
             '<a href="status.html">status</a> line; run times are that run\'s.</p>')
    return page("Prefill and Decode", intro + table(pd.DataFrame(rows)))


def status_page(chapters: list[Chapter]) -> str:
    """The status page: what produced each chapter's numbers (provenance) and each claim's verdict."""
    rows, details = [], []
    for c in chapters:
        p = c.provenance or {}
        params = p.get("parameters", {}) if isinstance(p.get("parameters"), dict) else {}
        listed = params.get("dtypes") or [c[0] for c in params.get("configs") or [] if isinstance(c, (list, tuple)) and c]
        dtype = p.get("dtype") or ", ".join(dict.fromkeys(map(str, listed))) or ", ".join(c.measured_dtypes) or None
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
    """Every chapter's "Takeaways" section on one page, each under a link to its chapter."""
    parts = []
    for c in chapters:
        text = takeaways(c)
        if text:
            parts.append(f'<h2><a href="{c.page}">{html.escape(c.title)}</a></h2>{_markdown_html(text)}')
    return page("Takeaways, chapter by chapter", "".join(parts) or "<p>No chapter has a takeaways section yet.</p>")


def class_page(results: Path | None, example: bool = False) -> str:
    """The class comparison from ``results`` (a folder written by ``lib.make.classroom.gather``); ``example``
    when it is the committed example runs rather than a class's."""
    if results is None or not (results / "comparison.csv").exists():
        return page("Class results", "<p>No class results yet. Students run <code>make class-zip</code> and send "
                    "the zip; the teacher runs <code>make class DIRS=\"a.zip b.zip ...\"</code>, then "
                    "<code>make html</code>.</p>")
    comparison = pd.read_csv(results / "comparison.csv")
    body = []
    if example:
        body.append("<p><b>Example.</b> No class results were gathered on this machine, so this page shows the "
                    "book's two example runs (<code>data/classroom/runs/</code>): the development machine in quick "
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
