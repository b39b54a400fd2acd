"""make html: the site built from the committed notebooks, parsed as a reader's browser would see it."""

import os
import re
from pathlib import Path

import nbformat
import pandas as pd
import pytest
from bs4 import BeautifulSoup

from lib.make.site import build as site, chapters, linkcheck, pages
from lib.device import describe_environment

ROOT = Path(__file__).resolve().parents[1]
EXECUTED = sorted(p for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The site, built once for this module from the committed notebooks."""
    out = tmp_path_factory.mktemp("site")
    site.build(out, log=lambda *_: None)
    return out


def _table(path, index=0) -> pd.DataFrame:
    """The ``index``-th table of a page, as text cells."""
    rows = BeautifulSoup(path.read_text(), "html.parser").find_all("table")[index].find_all("tr")
    header = [c.get_text(strip=True) for c in rows[0].find_all(["th", "td"])]
    return pd.DataFrame([[c.get_text(strip=True) for c in r.find_all(["th", "td"])] for r in rows[1:]],
                        columns=header)


def _problems(out, kind):
    return [p for p in linkcheck.check(out) if kind in p]


def test_every_chapter_has_a_page_and_the_site_its_other_pages(built):
    assert not _problems(built, "missing")
    for notebook in EXECUTED:
        assert (built / f"{notebook.stem}.html").stat().st_size > 10_000
    for name, _ in pages.NAV_PAGES:
        assert (built / name).exists()


def test_every_image_resolves_and_every_figure_is_on_its_page(built):
    assert not _problems(built, "image")
    for notebook in EXECUTED:
        figures = sum("image/png" in o.get("data", {}) for c in nbformat.read(notebook, as_version=4).cells
                      for o in c.get("outputs", []))
        found = linkcheck.parse(built / f"{notebook.stem}.html")
        assert len([s for s in found.images if s.startswith("data:image/png")]) >= figures > 0


def test_every_internal_link_resolves_and_chapters_link_to_their_neighbours(built):
    assert not _problems(built, "link")
    pages = [f"{n.stem}.html" for n in EXECUTED]
    for i, name in enumerate(pages):
        links = linkcheck.parse(built / name).links
        assert "index.html" in links
        if i > 0:
            assert pages[i - 1] in links
        if i + 1 < len(pages):
            assert pages[i + 1] in links
    index_links = linkcheck.parse(built / "index.html").links
    assert all(p in index_links for p in pages)


def test_no_chapter_shows_a_stderr_block(built):
    """Warnings and progress bars printed to stderr show as red boxes in the pages. The cure is in the
    chapters and lib (lib.progress, quiet_library_bars), then re-running them with make book."""
    assert not _problems(built, "stderr")


def test_no_page_shows_a_path_of_the_build_machine(built):
    assert not _problems(built, "path of the build machine")


def test_hidden_answers_are_real_details_elements_and_takeaways_are_shown(built):
    takeaways = (built / "takeaways.html").read_text()
    for notebook in EXECUTED:
        nb = nbformat.read(notebook, as_version=4)
        markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        shown = "\n".join(o.get("data", {}).get("text/markdown", "") for c in nb.cells for o in c.get("outputs", []))
        page = (built / f"{notebook.stem}.html").read_text()
        assert linkcheck.parse(built / f"{notebook.stem}.html").details == (markdown + shown).count("<details>")
        soup = BeautifulSoup(page, "html.parser")
        for details in soup.find_all("details"):  # the answer is inside, hidden until the summary is clicked
            summary = details.find("summary")
            assert summary is not None and len(details.get_text(strip=True)) > len(summary.get_text(strip=True)) + 5
        prose = soup.select(".jp-RenderedMarkdown, .jp-RenderedHTMLCommon")
        assert not any("<details>" in p.get_text() for p in prose), "answers must render, not show as text"
        if re.search(r"^#+\s*Takeaways", markdown, re.MULTILINE):
            assert re.search(r"<h2[^>]*>Takeaways", page)
            assert f'href="{notebook.stem}.html"' in takeaways


def test_pages_load_nothing_from_the_network(built):
    for path in built.glob("*.html"):
        text = path.read_text()
        assert not re.search(r"<script[^>]+src=", text), f"{path.name} loads a script"
        assert not re.search(r"<link[^>]+href=\"https?:", text), f"{path.name} loads a stylesheet"


def test_status_page_has_a_row_per_chapter_with_its_machine(built):
    status = _table(built / "status.html")
    assert len(status) == len(chapters.load_chapters(ROOT))
    executed = status[status["Mode"] != "—"]
    assert executed["Device"].str.len().gt(3).all() and executed["Commit"].ne("—").all()


def test_teacher_page_plans_45_and_90_minute_sessions_and_prints_real_failures(built):
    text = (built / "teacher.html").read_text()
    assert "45-minute sessions, quick mode" in text and "90-minute sessions, full mode" in text
    messages = re.findall(r'<pre class="message">(.*?)</pre>', text, re.S)
    assert len(messages) >= 5 and not any("no error on this machine" in m for m in messages)


def test_class_page_compares_the_example_runs(built):
    assert "<b>Example.</b>" in (built / "class.html").read_text(), "the example runs are labelled as such"
    comparison = _table(built / "class.html")
    assert set(comparison["run"]) >= {"dev-cpu-1-thread", "dev-cpu-2-threads"}
    assert (built / "class" / "comparison.png").exists()


def test_describe_environment_hides_the_home_folder():
    import torch
    home = os.path.expanduser("~")
    facts = describe_environment(torch.device("cpu"), None, os.path.join(home, "models", "mine"))
    assert facts["model"] == os.path.join("~", "models", "mine")
    assert describe_environment(torch.device("cpu"), None, "gpt2-small")["model"] == "gpt2-small"
