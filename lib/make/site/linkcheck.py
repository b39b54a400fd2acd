"""The check ``make html`` runs on the site it built: what a reader's browser would find broken, or fetch.

:func:`check` reads every page of a built site and lists, one line each:

* a missing chapter page or one of the pages beside them (:data:`lib.make.site.pages.NAV_PAGES`);
* a link (``href``, with its ``#id``), image, script or stylesheet of the site that does not resolve to a
  file in it;
* anything a page would fetch from another host (a script, stylesheet, image, frame or font from an
  ``http(s)://`` or ``//`` address, in a page or in a stylesheet), and a script or stylesheet of the site
  that names a CDN (the offline MathJax's fallbacks for old browsers, :data:`FALLBACKS`, excepted);
* a stderr output block, a path of the build machine shown on a page;
* an answer in plain view: the code of a cell tagged ``answer``, or its output outside a closed block.

Plain links to other sites in the text (``<a href="https://...">``) are the reader's to follow, not
fetches. :func:`parse` gives a page's links, resources, ids, stderr blocks and ``<details>`` count. No
chapter imports this module.
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

from lib.make.site.chapters import load_chapters
from lib.make.site.pages import NAV_PAGES
from lib.paths import REPO_ROOT

CDN = re.compile(r"(?:https?:)?//(?:cdn\.jsdelivr\.net|unpkg\.com|cdnjs\.cloudflare\.com|code\.jquery\.com|"
                 r"fonts\.googleapis\.com|fonts\.gstatic\.com|www\.googletagmanager\.com|"
                 r"www\.google-analytics\.com|cdn\.plot\.ly|stackpath\.bootstrapcdn\.com|use\.fontawesome\.com|"
                 r"polyfill\.io|ajax\.googleapis\.com|raw\.githubusercontent\.com|cdn\.[a-z0-9.-]+)[^\s\"'`)]*")
"""An address on a content-delivery network, where a page's scripts, styles and fonts come from when a site is
not self-contained."""
FALLBACKS = {
    "https://cdn.jsdelivr.net/npm/speech-rule-engine@",
    "https://cdn.jsdelivr.net/npm/sre-mathmaps-ie@",
    "https://cdn.jsdelivr.net/npm/wicked-good-xpath@1.3.0/dist/wgxpath.install.js",
}
"""Addresses inside MathJax's own bundle (``_static/mathjax/``) that it never fetches here: the speech rule
engine's locale files (used only by the speech explorer of MathJax's menu, which the site switches off), and
two polyfills for Internet Explorer."""
FETCHING = {"script": "src", "img": "src", "iframe": "src", "source": "src", "video": "src", "audio": "src",
            "embed": "src", "track": "src", "object": "data", "input": "src"}
"""The elements whose attribute makes a browser fetch a resource (``<link>`` is handled on its own)."""
CSS_URL = re.compile(r"""(?:url\(\s*['"]?|@import\s+['"])([^'")\s]+)""")


class _Page(HTMLParser):
    """Collects a page's links, fetched resources, element ids, stderr output blocks, ``<details>`` count,
    and the cells tagged ``answer``: how many, and how many show their code, or text outside a closed
    ``<details>`` block."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.links, self.resources, self.ids, self.stderr, self.details = [], [], set(), 0, 0
        self.images: list[str] = []
        self.answers, self.answers_shown = 0, 0
        self._stack: list[tuple[str, str]] = []  # (tag, role) of the open elements
        self._answer_open = False  # the current answer cell was already counted as shown

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = (attrs.get("class") or "").split()
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])
        if tag == "link" and attrs.get("href") and not {"canonical", "alternate"} & set((attrs.get("rel") or "").split()):
            self.resources.append(attrs["href"])
        if tag in FETCHING and attrs.get(FETCHING[tag]):
            self.resources.append(attrs[FETCHING[tag]])
            if tag == "img":
                self.images.append(attrs["src"])
        for srcset in (attrs.get("srcset"),):
            if srcset:
                self.resources += [part.split()[0] for part in srcset.split(",") if part.strip()]
        if attrs.get("style"):
            self.resources += CSS_URL.findall(attrs["style"])
        if attrs.get("data-mime-type") == "application/vnd.jupyter.stderr" or ("stderr" in classes and "output" in classes):
            self.stderr += 1
        if tag == "details":
            self.details += 1
        role = ""
        if "cell" in classes and "tag_answer" in classes:
            role = "answer"
            self.answers += 1
            self._answer_open = False
        elif self._within("answer") and "cell_input" in classes:
            role = "shown"
            self._show()
        if tag not in ("br", "img", "input", "link", "meta", "hr", "source", "track", "wbr", "area", "col", "embed"):
            self._stack.append((tag, "details" if tag == "details" else role))

    def handle_data(self, data):
        if data.strip() and self._within("answer") and not self._within("details"):
            self._show()  # text of an answer cell outside a closed block

    def _show(self) -> None:
        if not self._answer_open:
            self._answer_open, self.answers_shown = True, self.answers_shown + 1

    def handle_endtag(self, tag):
        for i in range(len(self._stack) - 1, -1, -1):
            if self._stack[i][0] == tag:
                del self._stack[i:]
                break

    def _within(self, role: str) -> bool:
        return any(r == role for _, r in self._stack)


def parse(path: Path) -> _Page:
    """A built page's links, resources, ids, stderr blocks, ``<details>`` count and answer cells (:class:`_Page`)."""
    parser = _Page()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def _external(url: str) -> bool:
    return url.startswith("//") or urlparse(url).scheme in ("http", "https")


def _resolves(page: Path, url: str) -> Path | None:
    """The file in the site that ``url`` (relative to ``page``) names, or ``None``."""
    parsed = urlparse(url)
    if not parsed.path:
        return page
    target = (page.parent / unquote(parsed.path))
    if target.is_dir():
        target = target / "index.html"
    return target if target.is_file() else None


def check(out: Path, root: Path = REPO_ROOT) -> list[str]:
    """Everything wrong with a built site, one line each (an empty list: nothing)."""
    problems = []
    for chapter in load_chapters(root):
        if chapter.notebook is not None and not (out / chapter.page).exists():
            problems.append(f"{chapter.page}: missing (is {chapter.stem}.ipynb executed?)")
    for name, _ in NAV_PAGES:
        if not (out / name).exists():
            problems.append(f"{name}: missing")
    machine_paths = [p for p in {str(root.resolve()), str(Path.home()), str(Path(sys.prefix))} if len(p) > 1]
    ids: dict[Path, set[str]] = {}
    for path in sorted(out.rglob("*.html")):
        if "_static" in path.relative_to(out).parts:
            continue
        name = str(path.relative_to(out))
        found = parse(path)
        text = path.read_text(encoding="utf-8")
        for machine_path in machine_paths:
            if machine_path + "/" in text:
                problems.append(f"{name}: shows a path of the build machine ({machine_path}/...)")
        if found.stderr:
            problems.append(f"{name}: {found.stderr} stderr output block(s)")
        if found.answers_shown:
            problems.append(f"{name}: {found.answers_shown} part(s) of a cell tagged answer in plain view")
        for url in found.resources:
            if url.startswith("data:"):
                continue
            if _external(url):
                problems.append(f"{name}: fetches {url[:100]!r} from another host")
            elif _resolves(path, url) is None:
                problems.append(f"{name}: {url[:100]!r} does not resolve to a file in the site")
        for href in found.links:
            url = urlparse(href)
            if url.scheme in ("http", "https", "mailto") or href.startswith("//"):
                continue  # a plain link to another site: the reader's to follow
            if url.scheme:
                problems.append(f"{name}: link {href[:100]!r} has an unexpected scheme")
                continue
            target = _resolves(path, href)
            if target is None:
                problems.append(f"{name}: link {href!r} does not resolve")
            elif url.fragment and target.suffix == ".html":
                if target not in ids:
                    ids[target] = parse(target).ids
                if url.fragment not in ids[target]:
                    problems.append(f"{name}: link {href!r}: no element with that id")
    for path in sorted(p for p in out.rglob("*") if p.suffix in (".js", ".css", ".mjs") and p.is_file()):
        name = str(path.relative_to(out))
        text = path.read_text(encoding="utf-8", errors="replace")
        allowed = FALLBACKS if "mathjax" in path.relative_to(out).parts else set()
        for url in sorted(set(CDN.findall(text)) - allowed):
            problems.append(f"{name}: names {url[:100]!r} on a CDN")
        if path.suffix == ".css":
            for url in CSS_URL.findall(text):
                if _external(url):
                    problems.append(f"{name}: fetches {url[:100]!r} from another host")
    return problems
