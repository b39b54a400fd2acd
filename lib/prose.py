"""Numbers written for sentences, and code and tables shown on the page.

Every number in a chapter's prose is computed (``display(Markdown(f"..."))``), so the same few ways of writing one
are kept here: a time in milliseconds with the digits its size deserves (:func:`ms`), a count of tokens
(:func:`tokens`), a range (:func:`span`). :func:`source` shows a library function's code where a chapter measures
it, so the reader sees what was timed; :func:`table` shows a text table whole, wrapped, markdown rendered.

Introduced in section 0.
"""

from __future__ import annotations

import html
import inspect
import re

import pandas as pd

__all__ = ["ms", "tokens", "span", "source", "table", "show"]


def ms(seconds: float) -> str:
    """A time given in **seconds**, written in milliseconds: ``"123 ms"``, ``"12.3 ms"``, ``"1.23 ms"``."""
    x = seconds * 1e3
    return f"{x:,.0f} ms" if abs(x) >= 100 else f"{x:.1f} ms" if abs(x) >= 1 else f"{x:.2f} ms"


def tokens(n: int) -> str:
    """``"1 token"``, ``"1,024 tokens"``."""
    return f"{int(n):,} token{'s' if int(n) != 1 else ''}"


def span(low: float, high: float, fmt: str = ".1f", unit: str = "") -> str:
    """``"low–high unit"`` for a range, or one number when both ends print the same."""
    a, b = format(low, fmt), format(high, fmt)
    text = a if a == b else f"{a}–{b}"
    return f"{text} {unit}".rstrip()


def source(*functions) -> "object":
    """The source of library functions as a highlighted code block (IPython ``Markdown``), to display where a
    chapter measures them."""
    from IPython.display import Markdown

    return Markdown("\n\n".join(f"```python\n{inspect.getsource(f).rstrip()}\n```" for f in functions))


_BOLD = re.compile(r"\*\*(.+?)\*\*")


def table(frame: pd.DataFrame, digits: int = 2) -> "object":
    """A text table shown whole (no column cut to "…"), its long cells wrapped and ``**bold**`` rendered, as
    IPython ``HTML``."""
    from IPython.display import HTML

    def cell(value) -> str:
        if isinstance(value, float):
            return f"{value:,.{digits}f}"
        return _BOLD.sub(r"<b>\1</b>", html.escape(str(value)))

    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>"
                   for row in frame.itertuples(index=False))
    style = "white-space: normal; word-break: break-word; text-align: left; vertical-align: top"
    return HTML(f'<table class="book-table" style="table-layout: auto; max-width: 100%"><thead><tr>{head}</tr>'
                f'</thead><tbody>{body}</tbody></table>'.replace("<td>", f'<td style="{style}">'))


def show(text: str) -> None:
    """Display a sentence (markdown) the chapter computed."""
    from IPython.display import Markdown, display

    display(Markdown(text))
