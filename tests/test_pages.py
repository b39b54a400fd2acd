"""The site's pages as HTML: navigation, the status page's claims, links between chapters."""

import pandas as pd

from lib.make.site import pages
from lib.make.site.chapters import Chapter


def _chapter(stem, title):
    return Chapter(stem, title, "", None, None, None, None)


def test_status_page_shows_each_claim_and_its_verdict():
    chapter = _chapter("09_x", "9. X")
    chapter.claims = pd.DataFrame({"claim": list("abcd"), "verdict": ["held", "held", "did not hold", "not measured"]})
    html = pages.status_page([chapter])
    assert "2 of 4 held" in html and 'class="not-held">did not hold' in html and 'class="held">held' in html


def test_status_page_names_the_dtypes_a_chapter_chose_at_run_time():
    chapter = _chapter("09_x", "9. X")
    chapter.provenance = {"parameters": {"dtypes": None}}
    chapter.measured_dtypes = ("fp32", "bf16")
    assert "<td>fp32, bf16</td>" in pages.status_page([chapter])


def test_navigation_links_every_page_and_the_neighbouring_chapters():
    bar = pages.nav(_chapter("01_a", "1. A & B"), _chapter("03_c", "3. C"))
    assert all(f'href="{name}"' in bar for name, _ in pages.NAV_PAGES)
    assert 'href="01_a.html" rel="prev">&larr; 1. A &amp; B' in bar and 'href="03_c.html" rel="next"' in bar
    assert 'class="step"' not in pages.nav()


def test_links_to_a_chapter_s_notebook_or_source_point_at_its_page():
    text = '<a href="../notebooks/02_prefill_sweep.ipynb">x</a> <a href="./03_decode.py">y</a> <a href="09_none.py">z</a>'
    assert pages._chapter_links(text, {"02_prefill_sweep", "03_decode"}) == (
        '<a href="02_prefill_sweep.html">x</a> <a href="03_decode.html">y</a> <a href="09_none.py">z</a>')
