"""The site's checker: it reports each kind of fault on a broken site, and nothing on a sound one."""

from pathlib import Path

from lib.make.site import linkcheck
from lib.make.site.pages import NAV_PAGES

ROOT = Path(__file__).resolve().parents[1]


def test_the_checker_finds_what_is_broken(tmp_path):
    """The site's checks pass only because the site is right: on a broken site they report each fault."""
    (tmp_path / "index.html").write_text(
        '<a href="nowhere.html">x</a><img src="figures/none.png">'
        '<div data-mime-type="application/vnd.jupyter.stderr">oops</div>'
        f'<pre>{ROOT}/lib/x.py</pre><a href="index.html#no-such-id">y</a>')
    problems = linkcheck.check(tmp_path, ROOT)
    for kind in ("missing", "nowhere.html", "figures/none.png", "stderr", "path of the build machine", "no-such-id"):
        assert any(kind in p for p in problems), kind


def test_a_sound_page_has_no_problems_and_is_parsed(tmp_path):
    book = tmp_path / "book"
    (book / "notebooks").mkdir(parents=True)
    (book / "notebooks" / "01_demo.py").write_text("# %%\n")
    site = tmp_path / "site"
    site.mkdir()
    (site / "figure.png").write_bytes(b"")
    body = ('<h2 id="top">T</h2><a href="01_demo.html#top">a</a><a href="https://example.org">b</a>'
            '<img src="figure.png"><img src="data:image/png;base64,AA=="><details><summary>s</summary>x</details>')
    for name in ["01_demo.html", *(name for name, _ in NAV_PAGES)]:
        (site / name).write_text(body)
    assert linkcheck.check(site, book) == []
    found = linkcheck.parse(site / "index.html")
    assert found.links == ["01_demo.html#top", "https://example.org"] and found.ids == {"top"}
    assert found.images == ["figure.png", "data:image/png;base64,AA=="] and found.details == 1 and found.stderr == 0
