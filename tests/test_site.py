"""make html: the site Sphinx builds from the committed notebooks, read as a reader's browser would, offline."""

import os
import re
import shutil
import zipfile
from pathlib import Path

import nbformat
import pandas as pd
import pytest
import torch
from bs4 import BeautifulSoup

from lib.device import describe_environment
from lib.make.site import build as site, chapters, linkcheck, pages

ROOT = Path(__file__).resolve().parents[1]
EXECUTED = sorted(p for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The site, built once for this module from the committed notebooks, with Sphinx's warnings."""
    out = tmp_path_factory.mktemp("site") / "site"
    warnings = site.build(out, log=lambda *_: None)
    return out, warnings


def _soup(path: Path) -> BeautifulSoup:
    return BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")


def _tables(path: Path) -> list[pd.DataFrame]:
    """The page's tables, as text cells."""
    found = []
    for table in _soup(path).select("article table"):
        rows = table.find_all("tr")
        header = [c.get_text(strip=True) for c in rows[0].find_all(["th", "td"])]
        found.append(pd.DataFrame([[c.get_text(strip=True) for c in r.find_all(["th", "td"])] for r in rows[1:]],
                                  columns=header))
    return found


def test_sphinx_builds_the_site_without_a_warning_and_the_checker_finds_nothing(built):
    out, warnings = built
    assert warnings == []
    assert linkcheck.check(out) == []


def test_every_chapter_has_a_page_with_its_figures_and_the_pages_beside_them(built):
    out, _ = built
    for notebook in EXECUTED:
        page = out / f"{notebook.stem}.html"
        figures = sum("image/png" in o.get("data", {}) for c in nbformat.read(notebook, as_version=4).cells
                      for o in c.get("outputs", []))
        assert len([s for s in linkcheck.parse(page).images if "_images/" in s]) >= figures > 0
    for name, _ in pages.NAV_PAGES:
        assert (out / name).stat().st_size > 5_000


def test_every_page_has_the_book_s_contents_beside_it_and_its_own(built):
    out, _ = built
    for page in [*(f"{n.stem}.html" for n in EXECUTED), *(name for name, _ in pages.NAV_PAGES)]:
        soup = _soup(out / page)
        sidebar = {a.get("href") for a in soup.select(".bd-sidebar-primary nav a")}
        assert {f"{n.stem}.html" for n in EXECUTED} - {page} <= {h.split("#")[0] for h in sidebar if h}
        assert soup.select_one("form.bd-search, .search-button-field"), f"{page} has no search"
        assert soup.select_one(".theme-switch-button"), f"{page} cannot switch between light and dark"
    chapter = _soup(out / f"{EXECUTED[1].stem}.html")
    assert len(chapter.select("#pst-page-toc-nav a")) >= 3, "a chapter lists its own sections beside it"


def test_search_indexes_every_chapter(built):
    out, _ = built
    index = (out / "searchindex.js").read_text()
    assert (out / "search.html").exists()
    for notebook in EXECUTED:
        assert f'"{notebook.stem}"' in index


def test_code_is_folded_behind_a_button_and_the_parameters_stay_open(built):
    out, _ = built
    for notebook in EXECUTED:
        cells = nbformat.read(notebook, as_version=4).cells
        code = [c for c in cells if c.cell_type == "code"]
        folded = [c for c in code if not {"parameters", pages.ANSWER_TAG} & set(c.metadata.get("tags", []))]
        soup = _soup(out / f"{notebook.stem}.html")
        assert len(soup.select("details.hide.above-input")) == len(folded)
        parameters = soup.select_one(".cell.tag_parameters .cell_input")
        assert parameters is not None and parameters.find_parent("details") is None


def test_each_chapter_links_its_source_notebook_and_tables_for_download(built):
    out, _ = built
    for notebook in EXECUTED:
        stem = notebook.stem
        links = [a["href"] for a in _soup(out / f"{stem}.html").select("a.download")]
        names = {Path(h).name: out / h for h in links}
        assert (names[f"{stem}.py"]).read_bytes() == (ROOT / "notebooks" / f"{stem}.py").read_bytes()
        assert (names[f"{stem}.ipynb"]).read_bytes() == notebook.read_bytes()
        tables = sorted(p.name for p in (ROOT / "data" / stem).glob("*.csv"))
        assert tables and set(tables) <= set(names)
        with zipfile.ZipFile(names[f"{stem}-tables.zip"]) as archive:
            assert sorted(Path(n).name for n in archive.namelist()) == tables


def test_hidden_answers_are_closed_details_with_their_answer_inside(built):
    out, _ = built
    for notebook in EXECUTED:
        nb = nbformat.read(notebook, as_version=4)
        markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        shown = "\n".join(o.get("data", {}).get("text/markdown", "") for c in nb.cells for o in c.get("outputs", []))
        soup = _soup(out / f"{notebook.stem}.html")
        answers = [d for d in soup.select("article details") if "hide" not in (d.get("class") or [])]
        assert len(answers) == (markdown + shown).count("<details>")
        for details in answers:
            summary = details.find("summary")
            assert "open" not in details.attrs
            assert summary is not None and len(details.get_text(strip=True)) > len(summary.get_text(strip=True)) + 5
        for code in soup.select("div.cell_input"):
            code.decompose()
        assert "&lt;details" not in str(soup.select_one("article")), "answers must render, not show as text"


def test_takeaways_page_links_every_chapter_that_has_them(built):
    out, _ = built
    links = {a.get("href", "").split("#")[0] for a in _soup(out / "takeaways.html").select("article a")}
    for notebook in EXECUTED:
        markdown = "\n".join(c.source for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "markdown")
        if re.search(r"^#+\s*Takeaways", markdown, re.MULTILINE):
            assert f"{notebook.stem}.html" in links


def test_nothing_is_fetched_from_another_host(built):
    """The same rule linkcheck applies, read here once more from the raw pages: no script, stylesheet, font
    or image from another host, and no CDN named in the site's own scripts and styles."""
    out, _ = built
    for path in out.rglob("*.html"):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"<(script|img|iframe)[^>]+src=[\"'](https?:)?//", text), path.name
        assert not re.search(r"<link[^>]+href=[\"'](https?:)?//", text), path.name
    assert not [p for p in linkcheck.check(out) if "another host" in p or "CDN" in p]
    assert (out / "_static" / "mathjax" / "tex-chtml.js").exists() and not (out / "_static" / "mathjax" / "latest.js").exists()


def test_no_page_shows_a_stderr_block_or_a_path_of_the_build_machine(built):
    """Warnings and progress bars printed to stderr would show as red boxes. The cure is in the chapters and
    lib (lib.progress), then re-running them with make book."""
    out, _ = built
    for path in out.glob("*.html"):
        assert linkcheck.parse(path).stderr == 0, path.name
        assert str(ROOT) + "/" not in path.read_text(encoding="utf-8"), path.name


def test_status_page_states_each_version_once_and_why_chapters_name_other_commits(built):
    out, _ = built
    soup = _soup(out / "status.html")
    article = soup.select_one("article").get_text(" ", strip=True)
    for key in pages.VERSIONS:
        assert len(re.findall(rf"\b{key}\s*:", article)) == 1, f"{key} not stated exactly once"
    assert "re-runs a chapter only when" in article
    commits, runs = _tables(out / "status.html")[:2]
    assert len(runs) == len(chapters.load_chapters(ROOT))
    ran = commits[commits["Ran at"].str.len() > 6]
    assert len(ran) == len(commits) and commits["Now"].str.match(r"up to date|would re-run|not checked").all()


def test_teacher_page_shows_its_arithmetic_and_prints_real_failures(built):
    out, _ = built
    soup = _soup(out / "teacher.html")
    text = soup.select_one("article").get_text(" ", strip=True)
    assert "45 − 10 = 35 min for chapters" in text and "90 − 10 = 80 min for chapters" in text
    assert "TORCH=cpu" in text and "measured under load" in text
    messages = [m.get_text() for m in soup.select("pre.message")]
    assert len(messages) >= 5 and not any("no error on this machine" in m for m in messages)


def test_class_page_compares_the_example_runs_in_tables_a_laptop_can_show(built):
    out, _ = built
    text = _soup(out / "class.html").select_one("article").get_text(" ", strip=True)
    assert "Example." in text and "Load:" in text
    tables = _tables(out / "class.html")
    assert {"dev-cpu-1-thread", "dev-cpu-2-threads"} <= set(tables[0]["run"])
    assert all(len(t.columns) <= 10 for t in tables[:-1]), "no table of many columns but the claims per machine"
    assert list((out / "_images").glob("comparison*.png"))


def test_describe_environment_hides_the_home_folder():
    home = os.path.expanduser("~")
    facts = describe_environment(torch.device("cpu"), None, os.path.join(home, "models", "mine"))
    assert facts["model"] == os.path.join("~", "models", "mine")
    assert describe_environment(torch.device("cpu"), None, "gpt2-small")["model"] == "gpt2-small"


def _demo_book(root: Path) -> Path:
    """A one-chapter book: a formula and a typed answer in the prose, a parameters cell, a code cell, an
    answer computed in code (displayed in <details>) and one that only prints."""
    (root / "notebooks").mkdir(parents=True)
    (root / "notebooks" / "01_demo.py").write_text("# %% [markdown]\n# # 1. Demo\n")
    out = nbformat.v4.new_output
    cells = [
        nbformat.v4.new_markdown_cell("# 1. Demo\n\nA pass takes $t = \\max(F / P, B / W)$, the roofline.\n\n"
                                      "$$\nI = \\frac{F}{B}\n$$\n\n<details><summary>Answer</summary>\n\nTyped.\n</details>"),
        nbformat.v4.new_code_cell("quick = False", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("print('measured')", outputs=[out("stream", name="stdout", text="measured\n")]),
        nbformat.v4.new_markdown_cell("## Check yourself\n\n2. How much?"),
        nbformat.v4.new_code_cell("secret = 6 * 7\nshow(secret)", metadata={"tags": ["answer"]}, outputs=[
            out("display_data", data={"text/markdown": "<details><summary>Answer</summary>\n\nComputed: 42.\n</details>",
                                      "text/plain": "<Markdown>"})]),
        nbformat.v4.new_code_cell("print(6 * 9)", metadata={"tags": ["answer"]},
                                  outputs=[out("stream", name="stdout", text="54\n")]),
    ]
    metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                "language_info": {"name": "python", "pygments_lexer": "ipython3"}}
    nbformat.write(nbformat.v4.new_notebook(cells=cells, metadata=metadata), root / "notebooks" / "01_demo.ipynb")
    (root / "data" / "01_demo").mkdir(parents=True)
    (root / "data" / "01_demo" / "sweep.csv").write_text("tokens,ms\n1,2\n")
    return root


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = _demo_book(tmp_path_factory.mktemp("demo"))
    out = root / "build" / "site"
    return out, site.build(out, root=root, log=lambda *_: None), root


def test_formulas_render_from_the_site_s_own_mathjax(demo):
    out, warnings, root = demo
    assert warnings == [] and linkcheck.check(out, root) == []
    soup = _soup(out / "01_demo.html")
    scripts = [s.get("src", "") for s in soup.find_all("script")]
    assert any(s.endswith("_static/mathjax/tex-chtml.js") for s in scripts)
    assert (out / "_static" / "mathjax" / "tex-chtml.js").exists()
    assert len(soup.select("article .math")) == 2  # inline and display, left for MathJax to typeset


def test_an_answer_computed_in_code_shows_no_code_and_stays_closed(demo):
    out, _, _ = demo
    soup = _soup(out / "01_demo.html")
    answers = soup.select(".cell.tag_answer")
    assert len(answers) == 2 and not soup.select(".cell.tag_answer .cell_input")
    assert "secret = 6 * 7" not in str(soup) and "print(6 * 9)" not in str(soup)
    shown, printed = answers
    assert shown.select_one(".cell_output details") is not None  # its own <details>
    assert printed.select_one(".cell_output").find_parent("details") is not None  # folded by the site
    assert len(soup.select("article details:not(.hide)")) == 2  # the typed answer and the computed one


def test_the_checker_sees_an_answer_cell_whose_code_is_shown(demo, tmp_path):
    out, _, root = demo
    broken = tmp_path / "site"
    shutil.copytree(out, broken)
    page = broken / "01_demo.html"
    text = page.read_text()
    page.write_text(text.replace('<div class="cell tag_parameters', '<div class="cell tag_answer', 1))
    assert any("tagged answer in plain view" in p for p in linkcheck.check(broken, root))
