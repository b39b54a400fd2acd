"""``make html``: the executed book as a static site, built offline without re-running anything.

Two steps:

1. :func:`lib.make.site.pages.write_sources` writes Sphinx's sources under ``build/site-source/``: each
   committed executed notebook (``notebooks/NN_*.ipynb``) prepared for MyST-NB, its downloads (the ``.py``,
   the ``.ipynb``, its ``data/<chapter>/*.csv`` one by one and zipped), and the contents, takeaways, status,
   teacher and class pages as MyST markdown (read from ``data/<chapter>/provenance.json``, ``claims.csv``
   and ``data/classroom/``, :mod:`lib.make.site.chapters`, :mod:`lib.make.teaching`);
2. Sphinx builds them into ``build/site/`` with the configuration in this folder (``conf.py``: MyST-NB with
   execution off, the book theme, sphinx-togglebutton, sphinx-mathjax-offline), in a subprocess.

It refuses to publish while a chapter's outputs are half replaced (an interrupted ``make book``,
:func:`lib.make.outputs.check_finished`). Then :func:`lib.make.site.linkcheck.check` reads the built site as
a browser would and lists what is wrong: a missing page, a link or image that does not resolve, anything
fetched from another host, a stderr block, an answer in plain view, a path of the build machine. Sphinx's
own warnings are listed too, and any of these makes ``make html`` exit 1.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from lib.make.outputs import check_finished
from lib.make.site.chapters import load_chapters
from lib.make.site.linkcheck import check
from lib.make.site.pages import write_sources
from lib.paths import REPO_ROOT

SITE_DIR = REPO_ROOT / "build" / "site"
CONF_DIR = Path(__file__).resolve().parent
"""Sphinx's configuration directory: ``conf.py`` and ``static/`` (the book's CSS)."""


class SiteFailed(ValueError):
    """Sphinx stopped without a site; the message holds its last lines."""


def sphinx(src: Path, out: Path, warnings: Path) -> None:
    """Build ``src`` into ``out`` with Sphinx (HTML, this folder's ``conf.py``); its warnings go to
    ``warnings``. Raises :class:`SiteFailed` when Sphinx fails."""
    command = [sys.executable, "-m", "sphinx", "-b", "html", "-q", "-E", "-c", str(CONF_DIR),
               "-d", str(src / ".doctrees"), "-w", str(warnings), str(src), str(out)]
    env = {**os.environ, "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=src)
    if done.returncode != 0:
        lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        raise SiteFailed("Sphinx failed: " + " | ".join(lines[-5:]))


def build(out: Path = SITE_DIR, root: Path = REPO_ROOT, log=print) -> list[str]:
    """Write the whole site under ``out`` (emptied first), from ``root``'s committed notebooks and tables;
    return Sphinx's warnings, one line each (an empty list: none)."""
    started = time.perf_counter()
    check_finished(root, "make html")  # a half-replaced chapter is never published
    chapters = load_chapters(root)
    if not any(c.notebook for c in chapters):
        raise ValueError(f"no executed notebooks in {root / 'notebooks'}; run make book first")
    src = out.parent / f"{out.name}-source"
    write_sources(chapters, root, src)
    shutil.rmtree(out, ignore_errors=True)
    warnings = src / "warnings.txt"
    sphinx(src, out, warnings)
    # MathJax's "latest.js" only loads MathJax from a CDN; the pages load _static/mathjax/tex-chtml.js.
    (out / "_static" / "mathjax" / "latest.js").unlink(missing_ok=True)
    found = [line for line in warnings.read_text().splitlines() if line.strip()] if warnings.exists() else []
    pages = len(list(out.glob("*.html")))
    log(f"site: {pages} pages in {out} ({time.perf_counter() - started:.1f} s)")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lib.make.site", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=SITE_DIR)
    args = parser.parse_args(argv)
    try:
        warnings = build(args.out)
    except ValueError as error:
        print(f"make html: {error}", file=sys.stderr)
        return 2
    problems = [f"Sphinx: {w}" for w in warnings] + check(args.out)
    for problem in problems:
        print(f"  site check: {problem}")
    print(f"open {args.out / 'index.html'}" + (f" ({len(problems)} problem(s) above)" if problems else ""))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
