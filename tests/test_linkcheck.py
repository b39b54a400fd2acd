"""The site's checker: it reports each kind of fault on a broken site, and nothing on a sound one."""

from pathlib import Path

import nbformat

from lib.make.site import linkcheck
from lib.make.site.pages import NAV_PAGES


def _book(tmp_path: Path) -> Path:
    book = tmp_path / "book"
    (book / "notebooks").mkdir(parents=True)
    (book / "notebooks" / "01_demo.py").write_text("# %%\n")
    nbformat.write(nbformat.v4.new_notebook(), book / "notebooks" / "01_demo.ipynb")
    return book


def test_the_checker_finds_what_is_broken(tmp_path):
    """The site's checks pass only because the site is right: on a broken site they report each fault."""
    book = _book(tmp_path)
    site = tmp_path / "site"
    (site / "_static").mkdir(parents=True)
    (site / "index.html").write_text(
        '<a href="nowhere.html">x</a><img src="figures/none.png">'
        '<div class="output stderr">oops</div>'
        f'<pre>{book}/lib/x.py</pre><a href="index.html#no-such-id">y</a>'
        '<script src="https://cdn.example.org/lib.js"></script>'
        '<link rel="stylesheet" href="//fonts.googleapis.com/css?family=X">'
        '<div style="background: url(https://example.org/bg.png)"></div>'
        '<div class="cell tag_answer"><div class="cell_input"><pre>answer = 42</pre></div></div>'
        '<div class="cell tag_answer"><div class="cell_output"><p>42, openly</p></div></div>')
    (site / "_static" / "theme.js").write_text('load("https://unpkg.com/thing@1/x.js")')
    (site / "_static" / "theme.css").write_text('@import url("https://example.org/font.css");')
    problems = linkcheck.check(site, book)
    for kind in ("01_demo.html: missing", "status.html: missing", "nowhere.html", "figures/none.png", "stderr",
                 "path of the build machine", "no-such-id", "fetches 'https://cdn.example.org/lib.js'",
                 "fetches '//fonts.googleapis.com", "fetches 'https://example.org/bg.png'",
                 "2 part(s) of a cell tagged answer in plain view", "theme.js: names 'https://unpkg.com/thing@1/x.js'",
                 "theme.css: fetches 'https://example.org/font.css'"):
        assert any(kind in p for p in problems), kind


def test_a_sound_site_has_no_problems_and_is_parsed(tmp_path):
    book = _book(tmp_path)
    site = tmp_path / "site"
    (site / "_static" / "mathjax").mkdir(parents=True)
    (site / "figure.png").write_bytes(b"")
    (site / "_static" / "book.css").write_text("a { color: red; background: url(figure.png); }")
    (site / "_static" / "mathjax" / "tex-chtml.js").write_text(  # MathJax's own fallbacks are not fetched here
        'r.url="https://cdn.jsdelivr.net/npm/speech-rule-engine@"+r.VERSION;x="http://www.w3.org/1998/Math/MathML"')
    body = ('<link rel="stylesheet" href="_static/book.css"><script src="_static/mathjax/tex-chtml.js"></script>'
            '<h2 id="top">T</h2><a href="01_demo.html#top">a</a><a href="https://example.org">b</a>'
            '<img src="figure.png"><img src="data:image/png;base64,AA=="><details><summary>s</summary>x</details>'
            '<div class="cell tag_answer"><div class="cell_output"><details><summary>Answer</summary>'
            '<p>42</p></details></div></div>')
    for name in ["01_demo.html", *(name for name, _ in NAV_PAGES)]:
        (site / name).write_text(body)
    assert linkcheck.check(site, book) == []
    found = linkcheck.parse(site / "index.html")
    assert found.links == ["01_demo.html#top", "https://example.org"] and found.ids == {"top"}
    assert found.images == ["figure.png", "data:image/png;base64,AA=="] and found.details == 2 and found.stderr == 0
    assert found.answers == 1 and found.answers_shown == 0
    (site / "_static" / "other.js").write_text('x="https://cdn.jsdelivr.net/npm/speech-rule-engine@"')
    assert linkcheck.check(site, book) == [
        "_static/other.js: names 'https://cdn.jsdelivr.net/npm/speech-rule-engine@' on a CDN"], \
        "MathJax's fallbacks are excused inside MathJax only"
