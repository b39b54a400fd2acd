"""The site's pages as Sphinx sources: escaped tables, a chapter's notebook as the site shows it, its downloads,
and the status page's versions and commits."""

import re
import zipfile

import nbformat
import pandas as pd
from bs4 import BeautifulSoup

from lib.make.site import pages
from lib.make.site.chapters import Chapter

PAYLOADS = ["<script>alert('x')</script>", '<img src=x onerror="alert(1)">', "```{raw} html\n<script>1</script>\n```"]


def _chapter(stem, title, **kw):
    return Chapter(stem, title, "", kw.get("notebook"), kw.get("provenance"), kw.get("claims"), kw.get("seconds"))


def test_every_cell_and_header_of_a_table_is_escaped_and_nothing_else_is():
    frame = pd.DataFrame({PAYLOADS[0]: PAYLOADS, "link": ['<a href="x.html">x</a>'] * 3, "ms": [1.23456, None, 1e6]})
    text = pages.html_table(frame, raw=("link",))
    soup = BeautifulSoup(text, "html.parser")
    assert soup.find("script") is None and not soup.find_all(attrs={"onerror": True})
    assert [td.get_text() for td in soup.select("tbody tr td:first-child")] == PAYLOADS[:2] + [PAYLOADS[2].replace("\n", "")]
    assert "\n```" not in text, "no line of a table can close the raw block it stands in"
    assert len(soup.select("a[href='x.html']")) == 3
    assert [td.get_text() for td in soup.select("tbody tr td:last-child")] == ["1.23", "—", "1,000,000"]


def test_a_page_keeps_html_in_a_file_the_raw_directive_reads(tmp_path):
    page = pages.Page(tmp_path, "demo", "Demo").md("Some *text*.").html("<p>kept</p>")
    text = page.write().read_text()
    assert text.startswith("# Demo\n") and "```{raw} html\n:file: _fragments/demo-1.html\n```" in text
    assert (tmp_path / "_fragments" / "demo-1.html").read_text() == "<p>kept</p>"


def test_a_chapter_s_code_folds_its_parameters_stay_open_and_its_computed_answer_shows_no_code(tmp_path):
    cells = [nbformat.v4.new_markdown_cell("# 9. X"),
             nbformat.v4.new_code_cell("quick = False", metadata={"tags": ["parameters"]}),
             nbformat.v4.new_code_cell("x = 1"),
             nbformat.v4.new_code_cell("show()", metadata={"tags": ["answer"]}, outputs=[nbformat.v4.new_output(
                 "display_data", data={"text/markdown": "<details><summary>Answer</summary>1</details>"})]),
             nbformat.v4.new_code_cell("print(2)", metadata={"tags": ["answer"]})]
    path = tmp_path / "09_x.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=cells, metadata={"widgets": {"state": {}}}), path)
    shown = pages.chapter_notebook(_chapter("09_x", "9. X", notebook=path), "BOX")
    assert [c.source for c in shown.cells[:2]] == ["# 9. X", "BOX"] and "widgets" not in shown.metadata
    tags = [c.metadata.get("tags") for c in shown.cells[2:]]
    assert tags == [["parameters"], ["hide-input"], ["answer", "remove-input"], ["answer", "remove-input", "hide-output"]]
    assert shown.cells[-1].metadata["mystnb"]["code_prompt_show"] == "Show the answer"


def test_downloads_copy_the_chapter_s_files_and_zip_its_tables(tmp_path):
    root, src = tmp_path / "book", tmp_path / "src"
    (root / "notebooks").mkdir(parents=True)
    (root / "data" / "09_x").mkdir(parents=True)
    (root / "notebooks" / "09_x.py").write_text("# %%\n")
    nbformat.write(nbformat.v4.new_notebook(), root / "notebooks" / "09_x.ipynb")
    for name in ("b", "a"):
        (root / "data" / "09_x" / f"{name}.csv").write_text("x\n1\n")
    box = pages.downloads(_chapter("09_x", "9. X", notebook=root / "notebooks" / "09_x.ipynb"), root, src)
    for name in ("09_x.py", "09_x.ipynb", "09_x-tables.zip", "a.csv", "b.csv"):
        assert f"<downloads/09_x/{name}>`" in box and (src / "downloads" / "09_x" / name).is_file()
    with zipfile.ZipFile(src / "downloads" / "09_x" / "09_x-tables.zip") as archive:
        assert archive.namelist() == ["data/09_x/a.csv", "data/09_x/b.csv"]


def test_status_page_states_a_shared_version_once_and_names_the_chapters_that_differ(tmp_path):
    same = {"device": "cpu", "device_name": "AMD EPYC", "python": "3.11.7", "torch": "2.13.0", "git_commit": "unknown"}
    a = _chapter("01_a", "1. A", provenance=dict(same, numpy="2.4"))
    b = _chapter("02_b", "2. B", provenance=dict(same, numpy="2.5", device_name="<b>bold</b>"))
    page = pages.status_page([a, b], tmp_path, tmp_path)
    fragments = "".join(p.read_text() for p in sorted((tmp_path / "_fragments").glob("*.html")))
    soup = BeautifulSoup(fragments, "html.parser")
    facts = {li.b.get_text(): li.get_text() for li in soup.select("ul li")}
    assert facts["torch"] == "torch: 2.13.0" and facts["python"] == "python: 3.11.7"
    assert "2.4 (chapters 01)" in facts["numpy"] and "2.5 (chapters 02)" in facts["numpy"]
    assert "&lt;b&gt;bold&lt;/b&gt;" in fragments and "<b>bold</b>" not in fragments
    assert "re-runs a chapter only when" in "\n".join(page.parts)


def test_status_page_shows_each_claim_and_its_verdict(tmp_path):
    claims = pd.DataFrame({"claim": list("abcd"), "statement": ["<i>x</i>"] * 4,
                           "verdict": ["held", "held", "did not hold", "not measured"]})
    pages.status_page([_chapter("09_x", "9. X", claims=claims, provenance={"device": "cpu"})], tmp_path, tmp_path)
    text = "".join(p.read_text() for p in (tmp_path / "_fragments").glob("*.html"))
    assert "4 claims: 2 held, 1 did not hold, 1 not measured" in text and 'class="not-held">did not hold' in text and 'class="held">held' in text
    assert "<i>x</i>" not in text


def test_status_page_names_the_dtypes_a_chapter_chose_at_run_time(tmp_path):
    chapter = _chapter("09_x", "9. X", provenance={"parameters": {"dtypes": None}})
    chapter.measured_dtypes = ("fp32", "bf16")
    pages.status_page([chapter], tmp_path, tmp_path)
    assert any("<td>fp32, bf16</td>" in p.read_text() for p in (tmp_path / "_fragments").glob("*.html"))


def test_the_pages_beside_the_chapters_are_in_the_contents(tmp_path):
    page = pages.index_page([_chapter("01_a", "1. A & B", notebook=tmp_path / "01_a.ipynb")], tmp_path)
    text = "\n".join(page.parts)
    assert "```{toctree}" in text and all(name[:-5] in text for name, _ in pages.NAV_PAGES if name != "index.html")
    assert '<a href="01_a.html">1. A &amp; B</a>' in (tmp_path / "_fragments" / "index-1.html").read_text()


def test_every_link_to_the_glossary_names_one_of_its_headings():
    """The chapters link a term's first use to notebooks/glossary.md#<anchor>; the anchors are MyST's slugs of
    the glossary's headings (myst_heading_anchors), so a renamed heading cannot leave a link dangling."""
    import jupytext
    from mdit_py_plugins.anchors.index import slugify

    from lib.paths import REPO_ROOT

    glossary = (REPO_ROOT / "notebooks" / pages.GLOSSARY).read_text()
    anchors = {slugify(line.lstrip("#").strip()) for line in glossary.splitlines() if line.startswith("## ")}
    linked = []
    for source in sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]_*.py")):
        for cell in jupytext.read(source).cells:
            if cell.cell_type == "markdown":
                linked += [(source.stem, a) for a in re.findall(r"\]\(glossary\.md#([^)\s]+)\)", cell.source)]
    assert linked, "the chapters link their terms to the glossary"
    assert [(stem, a) for stem, a in linked if a not in anchors] == []
