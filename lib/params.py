"""One checker for a chapter's parameters, called in the cell right after the tagged ``parameters`` cell.

Usage (in a chapter)::

    from lib import params
    from lib.models import KNOWN_MODELS

    P = params.check(globals(), {
        "runs": params.integer(min=1, quick=2),                     # quick mode caps it at 2
        "contexts": params.int_list(min=1, max=1024, quick=[16, 128]),
        "device": params.device(),
        "dtypes": params.dtype_list(allow_none=True),
        "model_name": params.choice(KNOWN_MODELS, quick="tiny-gpt2"),
        "course_gpu": params.choice(roofline.HARDWARE),              # a choice list from the caller
        "ttft_slo_ms": params.number(min=0, allow_none=True),        # 0 is a value, None is "default"
    }, quick=quick, chapter="03_decode_sweep")

The checked values are written back into the namespace (so the code below keeps using ``runs``,
``contexts``, ...) and returned as a namespace (``P.runs``). A bad value raises one ``ValueError``
naming the parameter, what was given and what is accepted. A list given as a string by
``papermill -p`` (``"[16, 128]"`` or ``"16,128"``) is parsed, never read character by character.

Quick mode shrinks, and says so in one printed line: a number is capped at its ``quick`` value; a list
or name the chapter ships (its value in the parameters cell of ``notebooks/<chapter>.py``) becomes the
``quick`` one; a list the reader set is only truncated to as many items, and a name the reader set is
kept. Without ``chapter``, every value counts as the chapter's own.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from lib.paths import REPO_ROOT


@dataclass(frozen=True)
class Rule:
    """How one parameter is checked: ``convert(value) -> value`` raises ``ValueError(expected)``."""

    expected: str
    convert: Callable[[Any], Any]
    allow_none: bool = False
    quick: Any = None
    is_list: bool = False
    shrink: Callable[[Any, Any], Any] | None = field(default=None, compare=False)
    finish: Callable[[Any, dict], Any] | None = field(default=None, compare=False)
    """Applied once every parameter is converted, with the converted values (e.g. ``threads`` needs the
    resolved ``device``)."""


class Parameters:
    """What :func:`check` returns: the checked values as attributes (``P.runs``), plus ``given`` (as the
    chapter or reader wrote them), ``reader_set`` (names the reader changed from the chapter's own) and
    ``quick_changes`` (what quick mode changed). :class:`lib.results.Results` records them in
    ``provenance.json``."""

    def __init__(self, values: dict, given: dict, reader_set: list[str], quick_changes: list[str]):
        self.values, self.given = dict(values), dict(given)
        self.reader_set, self.quick_changes = list(reader_set), list(quick_changes)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["values"][name]
        except KeyError:
            raise AttributeError(f"no parameter {name!r}; checked: {', '.join(self.__dict__['values'])}") from None


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError):
        return text.strip()


def _int(lo, hi):
    def convert(v):
        v = _literal(v) if isinstance(v, str) else v
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            raise ValueError
        return v
    return convert


def _range(kind, lo, hi):
    bounds = [f">= {lo}" if lo is not None else "", f"<= {hi}" if hi is not None else ""]
    return f"{kind} {' and '.join(b for b in bounds if b)}".strip()


def integer(*, min: int | None = None, max: int | None = None, allow_none=False, quick: int | None = None) -> Rule:
    """A whole number in ``[min, max]``; ``quick`` caps it in quick mode."""
    return Rule(_range("an integer", min, max), _int(min, max), allow_none, quick,
                shrink=lambda v, q: v if v <= q else q)


def number(*, min: float | None = None, max: float | None = None, above: float | None = None,
           allow_none=False, quick: float | None = None) -> Rule:
    """A finite real number in ``[min, max]`` (``above``: strictly greater); ``quick`` caps it."""
    def convert(v):
        v = _literal(v) if isinstance(v, str) else v
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError
        if (min is not None and v < min) or (max is not None and v > max) or (above is not None and v <= above):
            raise ValueError
        return v
    bounds = [f"above {above}" if above is not None else "", f">= {min}" if min is not None else "",
              f"<= {max}" if max is not None else ""]
    expected = f"a number {' and '.join(b for b in bounds if b)}".strip()
    return Rule(expected, convert, allow_none, quick, shrink=lambda v, q: v if v <= q else q)


def boolean() -> Rule:
    """``True`` or ``False`` (also the strings ``"true"``/``"false"``)."""
    def convert(v):
        v = {"true": True, "false": False}.get(v.strip().lower(), v) if isinstance(v, str) else v
        if not isinstance(v, bool):
            raise ValueError
        return v
    return Rule("True or False", convert)


def text(*, allow_none=False) -> Rule:
    """A non-empty string."""
    def convert(v):
        if not isinstance(v, str) or not v.strip():
            raise ValueError
        return v
    return Rule("a non-empty string", convert, allow_none)


def choice(names, *, allow_none=False, quick: str | None = None) -> Rule:
    """One of ``names`` (any iterable of strings, e.g. a dict's keys)."""
    names = tuple(names)
    def convert(v):
        if v not in names:
            raise ValueError
        return v
    return Rule(f"one of {', '.join(map(repr, names))}", convert, allow_none, quick)


def device() -> Rule:
    """``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:N"``, available here; checked into the ``torch.device``
    the chapter runs on. This is the one place a chapter resolves its device: everything after reads it
    from this value (or from the tensors and models that carry it)."""
    def convert(v):
        import torch

        from lib.device import resolve_device
        if isinstance(v, torch.device):
            v = str(v)
        if not isinstance(v, str) or not re.fullmatch(r"auto|cpu|cuda(:\d+)?", v.strip().lower()):
            raise ValueError
        return resolve_device(v)  # its own message says what is missing (CUDA, or that many GPUs)
    return Rule("'auto', 'cpu', 'cuda' or 'cuda:N'", convert)


def threads(*, many: bool = True) -> Rule:
    """CPU thread counts, checked into a list of whole numbers from 1 to this machine's cores (``many``) or
    one such number. ``None`` (the usual default) means all cores and one (``many``) or all cores: see
    :func:`lib.device.thread_counts`. On a GPU it becomes the host's one count, which its kernels do not use.
    Needs a ``device`` parameter checked in the same call."""
    import os

    cores = os.cpu_count() or 1
    item = integer(min=1, max=cores)
    rule = listof(item) if many else item

    def finish(v, values):
        from lib.device import thread_counts
        if "device" not in values:
            raise ValueError("a threads parameter needs the device parameter in the same params.check")
        counts = thread_counts(values["device"], v if v is None or many else [v])
        return counts if many else counts[0]
    return Rule(rule.expected, rule.convert, True, is_list=many, shrink=rule.shrink, finish=finish)


def dtype(*, allow_none=False) -> Rule:
    """A dtype short name: ``fp32``, ``bf16`` or ``fp16``."""
    from lib.device import DTYPES
    return choice(DTYPES, allow_none=allow_none)


def listof(item: Rule, *, allow_none=False, quick: list | None = None, min_items: int = 1,
           max_items: int | None = None, ascending: bool = False) -> Rule:
    """A list of ``min_items`` to ``max_items`` distinct items, each passing ``item``; a string is parsed as a
    list (``[1, 2]``, ``1,2``, or names left unquoted as a shell passes them, ``[vllm, transformers]``). A repeated item is refused (it would measure the same point twice and make a curve's steps
    ambiguous). ``ascending``: the checked list is sorted (a sweep's order)."""
    def convert(v):
        if isinstance(v, str):
            text_ = v.strip()
            parsed = _literal(text_) if text_[:1] in "[(" else [_literal(p) for p in text_.split(",")]
            if isinstance(parsed, str) and text_[:1] + text_[-1:] in ("[]", "()"):  # [vllm]: names left unquoted
                parsed = [_literal(p) for p in text_[1:-1].split(",") if p.strip()]
            v = parsed if isinstance(parsed, (list, tuple)) else [parsed]
        elif not isinstance(v, (list, tuple)):
            v = [v]  # a single value, as papermill -p gives for "16"
        if len(v) < min_items or (max_items is not None and len(v) > max_items):
            raise ValueError(f"{len(v)} item(s) given")
        out = [item.convert(x) for x in v]
        repeated = sorted({repr(x) for x in out if out.count(x) > 1})
        if repeated:
            raise ValueError(f"{', '.join(repeated)} repeated")
        return sorted(out) if ascending else out
    count = {(1, None): "one or more", (0, None): "zero or more"}.get(
        (min_items, max_items), f"{min_items} to {max_items}" if max_items is not None else f"at least {min_items}")
    return Rule(f"a list of {count} distinct items (like [1, 2] or '1,2'), each {item.expected}", convert,
                allow_none, quick, is_list=True, shrink=lambda v, q: v[:len(q)])


def int_list(*, min: int | None = None, max: int | None = None, allow_none=False, quick: list | None = None,
             min_items: int = 1, max_items: int | None = None, ascending: bool = False) -> Rule:
    """A list of distinct integers in ``[min, max]`` (see :func:`listof`)."""
    return listof(integer(min=min, max=max), allow_none=allow_none, quick=quick, min_items=min_items,
                  max_items=max_items, ascending=ascending)


def dtype_list(*, allow_none=False, quick: list | None = None) -> Rule:
    """A list of distinct dtype short names."""
    return listof(dtype(), allow_none=allow_none, quick=quick)


def tuple_of(*items: Rule) -> Rule:
    """A fixed-length tuple, one rule per position, e.g. ``tuple_of(integer(min=1), integer(min=1))``."""
    def convert(v):
        v = _literal(v) if isinstance(v, str) else v
        if not isinstance(v, (list, tuple)) or len(v) != len(items):
            raise ValueError
        return tuple(rule.convert(x) if not (x is None and rule.allow_none) else None for rule, x in zip(items, v))
    return Rule(f"a ({', '.join(r.expected for r in items)}) pair" if len(items) == 2 else
                f"a tuple ({', '.join(r.expected for r in items)})", convert)


def defaults(chapter: str, root: Path | None = None) -> dict[str, Any]:
    """The values a chapter ships: the literal assignments in the tagged ``parameters`` cell of
    ``root/notebooks/<chapter>.py`` (``{}`` if the file or cell is missing)."""
    path = (root or REPO_ROOT) / "notebooks" / f"{chapter}.py"
    if not path.exists():
        return {}
    match = re.search(r'^# %%[^\n]*tags=\[[^\]\n]*"parameters"[^\n]*\n(.*?)(?=^# %%|\Z)', path.read_text(), re.M | re.S)
    if not match:
        return {}
    return parameter_values(match.group(1))


def parameter_values(source: str) -> dict[str, Any]:
    """``name: value`` for every ``name = <literal>`` in a cell's source (other lines are skipped)."""
    values = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                values[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return values


def check(namespace: dict, spec: dict[str, Rule], *, quick: bool = False, chapter: str | None = None,
          log: Callable[[str], None] = print) -> Parameters:
    """Check every parameter in ``spec`` against ``namespace`` (a chapter's ``globals()``), apply quick
    mode, write the checked values back into ``namespace`` and return them as :class:`Parameters` (pass it
    to :class:`lib.results.Results`, which records it in ``provenance.json``)."""
    if not isinstance(quick, bool):  # papermill's -r passes text: "False" would be true
        raise ValueError(f"parameter quick={quick!r} is not valid; expected True or False (papermill -p quick True, "
                         "not -r, which passes the text)")
    shipped = defaults(chapter) if chapter else {}
    values, given, changes, reader_set = {}, {}, [], []
    for name, rule in spec.items():
        if name not in namespace:
            raise ValueError(f"parameter {name} is not defined; the parameters cell must set it")
        value = given[name] = namespace[name]
        if not (value is None and rule.allow_none):
            try:
                value = rule.convert(value)
            except ValueError as error:
                detail = f" ({error})" if str(error) else ""
                raise ValueError(f"parameter {name}={value!r} is not valid{detail}; expected "
                                 f"{rule.expected}{' or None' if rule.allow_none else ''}") from None
        own = name in shipped and shipped[name] != given[name]
        if own:
            reader_set.append(name)
        if quick and rule.quick is not None and value is not None:
            if rule.is_list:  # the chapter's list becomes the quick one; the reader's is truncated
                new = rule.quick if not own and len(rule.quick) <= len(value) else rule.shrink(value, rule.quick)
            else:  # a number is capped; a name the chapter ships becomes the quick one
                new = rule.shrink(value, rule.quick) if rule.shrink else (value if own else rule.quick)
            if new != value:
                changes.append(f"{name} {value!r} -> {new!r}")
                value = new
        values[name] = value
    for name, rule in spec.items():
        if rule.finish is not None:
            try:
                values[name] = rule.finish(values[name], values)
            except ValueError as error:
                raise ValueError(f"parameter {name}={given[name]!r} is not valid ({error})") from None
    if changes:
        log("quick mode changed: " + "; ".join(changes))
    namespace.update(values)
    return Parameters(values, given, reader_set, changes)
