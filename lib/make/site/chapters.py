"""The book's chapters as the published site shows them (``make html``, :mod:`lib.make.site`).

:func:`load_chapters` reads, for every chapter with a py:percent source, its executed notebook (the
build's committed copy), ``data/<chapter>/provenance.json`` and ``data/<chapter>/claims.csv``, into one
:class:`Chapter`: title, one-sentence summary, run time, claims held. :func:`takeaways` finds a chapter's
"Takeaways" section, including takeaways its code wrote as markdown from the run's data. Nothing is
re-run. No chapter imports this module.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pandas as pd

from lib.paths import REPO_ROOT



@dataclass
class Chapter:
    """One chapter of the book as the site shows it."""

    stem: str
    title: str
    summary: str
    notebook: Path | None  # the executed .ipynb, None if the chapter was never executed
    provenance: dict | None
    claims: pd.DataFrame | None
    run_seconds: float | None  # papermill's duration, else provenance's wall time
    measured_dtypes: tuple[str, ...] = ()  # the dtype column's values across the chapter's tables

    @property
    def page(self) -> str:
        return f"{self.stem}.html"

    def claims_summary(self) -> str:
        """``"6 claims: 5 held, 1 did not hold"`` (:func:`lib.claims.tally`), or ``"no claims recorded"``."""
        if self.claims is None or "verdict" not in self.claims:
            return "no claims recorded"
        from lib.claims import tally

        return tally(self.claims["verdict"].astype(str))


def _markdown_text(cell) -> str:
    return cell.source if cell.cell_type == "markdown" else ""


def _markdown_outputs(cell) -> str:
    """The markdown a code cell displayed: takeaways decided by the run's data are written by code."""
    if cell.cell_type != "code":
        return ""
    return "\n\n".join(o["data"]["text/markdown"] for o in cell.get("outputs", [])
                        if "text/markdown" in o.get("data", {}))


def _title_and_summary(notebook) -> tuple[str, str]:
    """The first ``#`` heading, and the first sentence of the paragraph after it."""
    for cell in notebook.cells:
        lines = _markdown_text(cell).strip().splitlines()
        if lines and lines[0].startswith("# "):
            title = lines[0][2:].strip()
            body = " ".join(line.strip() for line in lines[1:] if line.strip()).strip()
            first = re.split(r"(?<=[.!?])\s", body, maxsplit=1)[0] if body else ""
            return title, re.sub(r"[*_`]", "", first)
    return "", ""


def measured_dtypes(data: Path) -> tuple[str, ...]:
    """The dtypes a chapter's tables name (their ``dtype`` columns), in order of first appearance: what it
    ran with when its parameters left the choice to the run (``dtypes = None``). Rows of a table with a
    ``source`` column count only where the source is ``"this machine"`` (the others are reference runs)."""
    found: dict[str, None] = {}
    for table in sorted(data.glob("*.csv")):
        try:
            frame = pd.read_csv(table)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError):
            continue
        if "dtype" in frame:
            ours = frame[frame["source"] == "this machine"] if "source" in frame else frame
            found.update(dict.fromkeys(str(d) for d in ours["dtype"].dropna() if str(d).strip()))
    return tuple(found)


def load_chapters(root: Path = REPO_ROOT) -> list[Chapter]:
    """Every chapter that has a py:percent source, with its executed notebook, provenance and claims."""
    chapters = []
    for source in sorted((root / "notebooks").glob("[0-9][0-9]_*.py")):
        executed = source.with_suffix(".ipynb")
        notebook = nbformat.read(executed, as_version=4) if executed.exists() else None
        title, summary = _title_and_summary(notebook) if notebook else ("", "")
        data = root / "data" / source.stem
        provenance = json.loads((data / "provenance.json").read_text()) if (data / "provenance.json").exists() else None
        claims = None
        if (data / "claims.csv").exists():
            try:
                claims = pd.read_csv(data / "claims.csv")
            except (pd.errors.ParserError, pd.errors.EmptyDataError):
                claims = None
        seconds = (notebook.metadata.get("papermill", {}).get("duration") if notebook else None)
        if seconds is None and provenance:
            seconds = provenance.get("wall_time_s")
        chapters.append(Chapter(source.stem, title or source.stem, summary, executed if notebook else None,
                                provenance, claims, float(seconds) if seconds is not None else None,
                                measured_dtypes(data)))
    return chapters


def takeaways(chapter: Chapter) -> str:
    """The markdown of the chapter's "Takeaways" section: from its heading to the next heading of the
    same or a higher level, across cells."""
    if chapter.notebook is None:
        return ""
    notebook = nbformat.read(chapter.notebook, as_version=4)
    lines = "\n\n".join(_markdown_text(c) + _markdown_outputs(c) for c in notebook.cells).splitlines()
    for i, line in enumerate(lines):
        heading = re.match(r"^(#+)\s*Takeaways?\b", line, re.IGNORECASE)
        if heading:
            level = len(heading.group(1))
            section = []
            for following in lines[i + 1:]:
                if re.match(rf"^#{{1,{level}}}\s", following):
                    break
                section.append(following)
            return "\n".join(section).strip()
    return ""
