"""The check ``make html`` runs on the site it built: what a reader's browser would find broken.

:func:`check` parses every page of a built site and lists, one line each, a missing chapter or navigation
page, an image or internal link (or ``#id``) that does not resolve, a stderr output block and a path of
the build machine shown on a page. :func:`parse` gives a page's links, images, ids, stderr blocks and
``<details>`` count. No chapter imports this module.
"""

from __future__ import annotations

import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

from lib.make.site.chapters import load_chapters
from lib.make.site.pages import NAV_PAGES
from lib.paths import REPO_ROOT


class _Links(HTMLParser):
    """Collects a page's links, image sources, element ids, stderr output blocks and ``<details>`` count."""

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
    """A built page's links, images, ids, stderr blocks and ``<details>`` count (:class:`_Links`)."""
    parser = _Links()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def check(out: Path, root: Path = REPO_ROOT) -> list[str]:
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
