"""``make html``: the executed book as a static site, built offline without re-running anything.

Reads the committed ``notebooks/NN_*.ipynb`` (the build's executed copies), ``data/<chapter>/provenance.json``
and ``data/<chapter>/claims.csv`` (:mod:`lib.make.site.chapters`), and writes under ``build/site/`` (the pages'
HTML: :mod:`lib.make.site.pages`):

* ``index.html``: the chapter table (title, what it measures, run time, claims held);
* ``NN_chapter.html``: each chapter with its outputs, figures embedded in the page, hidden answers as
  ``<details>`` blocks that open with a click, and links to the previous and next chapter;
* ``takeaways.html``: every chapter's takeaways on one page;
* ``status.html``: per chapter, the machine, dtype, threads, versions, commit and run time that produced
  it, and how many of its claims held;
* ``teacher.html``: sessions that fit 45 and 90 minutes, installing, what a GPU changes, common failures
  (:mod:`lib.make.teaching`);
* ``class.html``: class results (``make class``), or the committed example runs when there are none.

The pages need no network at build time or to be read. After building, :func:`lib.make.site.linkcheck.check` parses
the site and lists what is wrong: a missing chapter page, an image or internal link that does not resolve,
a stderr output block.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from lib.make import classroom, teaching
from lib.make.site.chapters import load_chapters
from lib.make.site.linkcheck import check
from lib.make.site.pages import class_page, index_page, page, render_chapter, status_page, takeaways_page
from lib.paths import REPO_ROOT

SITE_DIR = REPO_ROOT / "build" / "site"


def class_results(root: Path, scratch: Path) -> Path | None:
    """The class results to publish: ``build/class`` when gathered, else the example runs gathered now."""
    gathered = root / "build" / "class"
    if (gathered / "comparison.csv").exists():
        return gathered
    examples = sorted(p for p in (root / "data" / "classroom" / "runs").glob("*") if p.is_dir())
    if not examples:
        return None
    classroom.gather(examples, scratch)
    return scratch


def build(out: Path = SITE_DIR, root: Path = REPO_ROOT, log=print) -> list[Path]:
    """Write the whole site under ``out`` (emptied first); return the pages written."""
    started = time.perf_counter()
    chapters = load_chapters(root)
    if not any(c.notebook for c in chapters):
        raise ValueError(f"no executed notebooks in {root / 'notebooks'}; run make book first")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    written = []

    def write(name: str, text: str) -> None:
        (out / name).write_text(text, encoding="utf-8")
        written.append(out / name)

    executed = [c for c in chapters if c.notebook]
    stems = {c.stem for c in executed}
    for i, chapter in enumerate(executed):
        prev = executed[i - 1] if i > 0 else None
        next_ = executed[i + 1] if i + 1 < len(executed) else None
        write(chapter.page, render_chapter(chapter, prev, next_, stems))
    write("index.html", index_page(chapters))
    write("status.html", status_page(chapters))
    write("takeaways.html", takeaways_page(chapters))
    write("teacher.html", page("For teachers", teaching.teacher_body(chapters, root)))
    results = class_results(root, out / "class")
    example = results == out / "class"  # gathered just now from data/classroom/runs/
    if results is not None and not example:
        shutil.copytree(results, out / "class", ignore=shutil.ignore_patterns("class-*", "*.zip"))
    write("class.html", class_page(out / "class" if results else None, example))
    log(f"site: {len(written)} pages in {out} ({time.perf_counter() - started:.1f} s)")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lib.make.site", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=SITE_DIR)
    args = parser.parse_args(argv)
    try:
        build(args.out)
    except ValueError as error:
        print(f"make html: {error}", file=sys.stderr)
        return 2
    problems = check(args.out)
    for problem in problems:
        print(f"  site check: {problem}")
    print(f"open {args.out / 'index.html'}" + (f" ({len(problems)} problem(s) above)" if problems else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
