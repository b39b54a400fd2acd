"""Numbers written for sentences, and code and tables shown on the page.

Every number in a chapter's prose is computed (``display(Markdown(f"..."))``), so the same few ways of writing one
are kept here: a time in milliseconds with the digits its size deserves (:func:`ms`), a count of tokens
(:func:`tokens`), a range (:func:`span`). :func:`source` shows a library function's code where a chapter measures
it, so the reader sees what was timed (folded: the reader opens it); :func:`table` shows a text table whole,
wrapped, markdown rendered. :class:`Opening` is the paragraph a chapter opens with, "What this run found",
written when the chapter's findings are known.

Introduced in chapter 0.
"""

from __future__ import annotations

import html
import inspect
import re
import warnings

import pandas as pd

__all__ = ["ms", "tokens", "count", "and_list", "label", "shown", "span", "beside", "source", "table", "show", "machine", "Opening", "OpeningTooLong", "opening_words",
           "OPENING_PENDING", "OPENING_WORDS", "HOW_DECIDED"]


def ms(seconds: float) -> str:
    """A time given in **seconds**, written in milliseconds: ``"123 ms"``, ``"12.3 ms"``, ``"1.23 ms"``."""
    x = seconds * 1e3
    return f"{x:,.0f} ms" if abs(x) >= 100 else f"{x:.1f} ms" if abs(x) >= 1 else f"{x:.2f} ms"


def tokens(n: int) -> str:
    """``"1 token"``, ``"1,024 tokens"``."""
    return f"{int(n):,} token{'s' if int(n) != 1 else ''}"


def count(n: int, noun: str) -> str:
    """``"one setting"``, ``"two settings"``, ``"12 settings"``: a count in words up to ten, with its noun."""
    words = ["no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
    n = int(n)
    return f"{words[n] if 0 <= n <= 10 else f'{n:,}'} {noun}{'s' if n != 1 else ''}"


def and_list(items) -> str:
    """``"16"``, ``"16 and 128"``, ``"16, 128 and 512"``: items (anything printable) joined as a sentence lists them."""
    words = [str(x) for x in items]
    return " and ".join(words) if len(words) < 3 else f"{', '.join(words[:-1])} and {words[-1]}"


_UNITS = {"ms": "ms", "s": "s", "us": "µs", "gb": "GB", "mb": "MB", "kb": "kB", "mib": "MiB", "kib": "KiB",
          "gflop": "GFLOP", "flop": "FLOP", "pct": "%", "m": "millions"}  # a column's last word, as a unit
_WORDS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "end-to-end", "kv": "KV", "lm": "LM", "gpu": "GPU",
          "gpus": "GPUs", "cpu": "CPU", "gflop": "GFLOP", "flop": "FLOP", "gb": "GB", "mb": "MB", "mib": "MiB",
          "kib": "KiB", "kb": "kB", "1thread": "1 thread", "pct": "%"}  # words a reader knows in capitals
_ENDS = {"low": "low", "high": "high", "lo": "low", "hi": "high"}  # an interval's edge, told before the unit


def label(column) -> str:
    """A table's column name as a reader reads it, its unit in parentheses: ``"predicted_ttft_ms"`` is
    ``"predicted TTFT (ms)"``, ``"tpot_ms_high"`` ``"TPOT, high (ms)"``, ``"streaming_read_gb_s"``
    ``"streaming read (GB/s)"``, ``"tpot_slope_ms_per_1k_tokens"`` ``"TPOT slope (ms per 1k tokens)"``, a ratio
    ``"over_predicted"`` ``"x predicted"`` and ``"last_over_first"`` ``"last / first"``. A name that
    is not one snake_case word (``"A worst gap, ms"``, a number, a tuple) is returned as it is."""
    if not isinstance(column, str) or not re.fullmatch(r"[A-Za-z0-9]+(_[A-Za-z0-9]+)+", column):
        return column
    words = column.split("_")
    end = _ENDS.get(words[-1]) if len(words) > 1 else None
    words = words[:-1] if end else words
    unit = None
    if len(words) > 2 and [w.lower() for w in words[-2:]] == ["per", "s"] and words[-3].lower() not in _UNITS:
        unit = f"{words[-3]}/s" if words[-3] in ("tokens", "requests") else "per s"  # a rate: tokens_per_s
        words = words[:-3] if words[-3] in ("tokens", "requests") else words[:-2]
    for i in range(len(words) if unit is None else 0):  # the first unit word followed only by "per ..." or "s"
        w, rest = words[i].lower(), [x.lower() for x in words[i + 1:]]
        if i and words[i - 1].lower() == "per":  # "faults per MiB": a denominator, not the unit
            continue
        if w in _UNITS and (not rest or rest == ["s"] or rest[0] == "per"):
            unit = _UNITS[w] + ("/s" if rest == ["s"] else "".join(f" {_WORDS.get(x, x)}" for x in rest))
            words = words[:i]
            break
    if len(words) > 1:  # request A, request B, wherever they stand ("predicted_a_worst_gap_ms")
        words = [w.upper() if w in ("a", "b") else w for w in words]
    words = [("x" if i == 0 else "/") if w == "over" else w for i, w in enumerate(words)]  # a ratio: "x predicted"
    text = " ".join(_WORDS.get(w.lower(), w) for w in words)
    text = text + (f", {end}" if end and text else end or "")
    return f"{text} ({unit})" if text and unit else unit or text


def _number(x) -> str:
    """One cell of a merged interval column: a whole number without its ".0", else up to six figures."""
    if pd.isna(x):
        return ""
    x = float(x)
    return f"{int(x):,}" if x.is_integer() and abs(x) < 1e15 else f"{x:,.6g}"


def _intervals(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with each column that has its interval beside it (``x`` with ``x_low`` and ``x_high``, or ``_lo``
    and ``_hi``) written as one column of text, ``"median (low–high)"``, the way the sentences write a measured
    value, and the two edge columns dropped."""
    out = frame.copy()
    for column in list(frame.columns):
        if not isinstance(column, str):
            continue
        for lo, hi in (("low", "high"), ("lo", "hi")):
            low, high = f"{column}_{lo}", f"{column}_{hi}"
            if low in out.columns and high in out.columns and pd.api.types.is_numeric_dtype(out[column]):
                out[column] = [_number(m) if (_number(a), _number(b)) == (_number(m), _number(m)) or _number(m) == ""
                               else f"{_number(m)} ({_number(a)}–{_number(b)})"
                               for m, a, b in zip(out[column], out[low], out[high])]
                out = out.drop(columns=[low, high])
                break
    return out


def shown(frame: pd.DataFrame, digits: int | dict | None = None) -> pd.DataFrame:
    """``frame`` as a reader sees it: rounded to ``digits`` (a number, or one per column as
    :meth:`pandas.DataFrame.round` takes it), each value kept with its interval (``x``, ``x_low``, ``x_high``)
    written as one column, ``"median (low–high)"``, and its columns' and index's names (and a transposed table's
    row names) through :func:`label`. The data are unchanged; the chapter keeps the names its code uses."""
    out = frame.round(digits) if digits is not None else frame.copy()
    out = _intervals(out)
    out = out.rename(columns=label)
    if out.index.nlevels == 1 and out.index.dtype == object:  # a transposed table: its rows are the columns' names
        out = out.rename(index=label)
    out.index = out.index.rename([label(n) for n in out.index.names] if out.index.nlevels > 1 else label(out.index.name))
    if isinstance(out.columns.name, str):
        out.columns.name = label(out.columns.name)
    return out


def span(low: float, high: float, fmt: str = ".1f", unit: str = "") -> str:
    """``"low–high unit"`` for a range, or one number when both ends print the same; a factor's ``"x"`` is
    written against its number (``"1.23–1.38x"``)."""
    a, b = format(low, fmt), format(high, fmt)
    text = a if a == b else f"{a}–{b}"
    return f"{text}{unit}" if unit == "x" else f"{text} {unit}".rstrip()


def beside(x: float, edge: float) -> str:
    """A factor ``x`` printed with two decimals, or three where two would print it as ``edge`` (a tolerance it is
    set against): ``beside(1.2534, 1.25)`` is ``"1.253"``, so "1.253x, outside the tolerance of 1.25x" reads true."""
    two = format(x, ".2f")
    return format(x, ".3f") if two == format(edge, ".2f") and x != edge else two


def source(*functions) -> "object":
    """The source of library functions, each a highlighted code block folded under a line naming it and its
    length (IPython ``Markdown`` holding a ``<details>`` block: the site and JupyterLab show the line, the reader
    opens it), to display where a chapter measures them."""
    from IPython.display import Markdown

    def folded(f) -> str:
        code = inspect.getsource(f).rstrip()
        lines = code.count("\n") + 1
        return (f"<details><summary>The code: <code>{f.__module__}.{f.__qualname__}</code> ({lines} lines)</summary>"
                f"\n\n```python\n{code}\n```\n\n</details>")

    return Markdown("\n\n".join(folded(f) for f in functions))


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


#: The summary line of a finding's folded detail (:func:`show`'s ``how``).
HOW_DECIDED = "How this run decided it"


def show(text: str, how: str | None = None) -> None:
    """Display a finding (markdown) the chapter computed. ``how``, if given, is the detail a reader needs only to
    check the finding (intervals, the tolerance, which calls were compared), folded under :data:`HOW_DECIDED`
    right below it (an HTML ``<details>`` element, opened by the reader in JupyterLab and on the site alike), so
    that the page reads as the finding and the evidence table at the chapter's end keeps the verdict."""
    from IPython.display import Markdown, display

    display(Markdown(text if not how else f"{text}\n\n<details><summary>{HOW_DECIDED}</summary>\n\n{how}\n\n</details>"))


#: What a folded prediction's summary line asks of the reader.
FOLDED_ASK = "open it once you have written yours"


def prediction(text: str, summary: str = "The book's prediction") -> None:
    """Display the book's answer to a "Predict first" question (markdown the chapter computed) folded, under
    ``summary``, so that a reader makes their own guess before reading it: opened in JupyterLab and on the site
    alike (an HTML ``<details>`` element). Introduced in chapter 2."""
    show(f"<details><summary>{summary} ({FOLDED_ASK})</summary>\n\n{text}\n\n</details>")


def machine(device, dtype: str | None = None) -> str:
    """The machine a run measured, for a sentence: ``"Intel Xeon Processor, 2 CPU threads, fp32"`` (on a GPU,
    its name); ``device`` a ``torch.device``, ``dtype`` a name or ``None``."""
    import torch

    from lib.device import device_name

    name = re.sub(r"\s*\((R|TM|tm|r)\)", "", device_name(device)).strip()
    name = re.sub(r"\s+", " ", name)
    where = name if device.type == "cuda" else f"{name}, {torch.get_num_threads()} CPU thread" + \
        "s" * (torch.get_num_threads() != 1)
    return f"{where}, {dtype}" if dtype else where


#: What the opening paragraph says until the chapter has run to its end.
OPENING_PENDING = "*What this run found is written here when the chapter has run to its end.*"
#: The opening paragraph's length at most, in words (about 120: the source chapter's opening is 90).
OPENING_WORDS = 120


class OpeningTooLong(UserWarning):
    """An opening paragraph longer than :data:`OPENING_WORDS` words."""


def opening_words(text: str) -> int:
    """The words of an opening paragraph (markdown): numbers with their signs and separators count as one."""
    return len(re.findall(r"[\w.,–%+-]+", re.sub(r"[*`]", "", text)))


class Opening:
    """The paragraph a chapter opens with, under its heading **What this run found**: the machine, the few numbers
    that matter and the chapter's answer, computed at the chapter's end from its findings (so it agrees with every
    verdict below it) and shown at its top. Created where it is shown (a line saying it is pending), written with
    :meth:`write`, which replaces that output in place (IPython's display update: papermill, nbclient and
    JupyterLab keep the replaced output in the saved notebook)."""

    def __init__(self) -> None:
        from IPython.display import Markdown, display

        self.text, self.note = "", ""
        self._handle = display(Markdown(OPENING_PENDING), display_id=True)
        self._note_handle = display(Markdown(""), display_id=True)  # the pace note, where the paragraph has no room

    def write(self, *tellings: str, after: str = "") -> None:
        """Show the first of ``tellings`` (markdown, the longest telling first) that fits :data:`OPENING_WORDS`
        words as the opening paragraph; ``after`` (a sentence such as :func:`lib.machine.pace_note`'s) ends
        the first telling it fits in, and where it fits in none, it is shown as a paragraph of its own right under
        the opening (:attr:`note`): never left out. When no telling fits, the last is shown all the same,
        with a warning: which telling fits depends on the verdicts this run reached, and a reader's run must not
        fail over a sentence's length; the committed book is held to the limit by its tests."""
        from IPython.display import Markdown

        if not tellings:
            raise ValueError("an opening needs at least one telling")
        self.note = ""
        if after:
            with_after = [f"{t.rstrip()} {after}" for t in tellings]
            if any(opening_words(t) <= OPENING_WORDS for t in with_after):
                tellings = tuple(with_after)
            else:
                self.note = f"**While this chapter ran.** {after}"
        text = next((t for t in tellings if opening_words(t) <= OPENING_WORDS), tellings[-1])
        if (words := opening_words(text)) > OPENING_WORDS:
            warnings.warn(f"the opening paragraph has {words} words; it is a paragraph of at most {OPENING_WORDS}",
                          OpeningTooLong, stacklevel=2)
        self.text = text
        if self._handle is not None:  # None outside IPython
            self._handle.update(Markdown(text))
            self._note_handle.update(Markdown(self.note))
