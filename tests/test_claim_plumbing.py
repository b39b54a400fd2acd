"""Issue 29's bound on the claims' plumbing: in every chapter, the statements that declare, decide or record a claim,
and the assignments whose values only those statements read, are at most 15 % of the chapter's code lines (the
finding itself is the chapter's prose)."""

import ast
import re
from pathlib import Path

import jupytext
import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))
REGISTER = re.compile(r"register\.(claim|decide|record)\(")
LIMIT = 0.15


def plumbing(source: Path) -> tuple[int, int]:
    """(code lines, plumbing lines) of a chapter's code cells: blank and comment-only lines not counted."""
    cells = [c.source for c in jupytext.read(source).cells if c.cell_type == "code"]
    parsed = []
    for text in cells:
        try:
            parsed.append((text, ast.parse(text)))
        except SyntaxError:  # a cell magic: not the chapter's Python
            continue
    inside, outside = set(), set()
    for text, tree in parsed:
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
                 and REGISTER.match(ast.get_source_segment(text, n) or "")]
        in_calls = {id(x) for c in calls for x in ast.walk(c)}
        for n in ast.walk(tree):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                (inside if id(n) in in_calls else outside).add(n.id)
    only_claims = inside - outside
    code = plumb = 0
    for text, tree in parsed:
        lines = text.splitlines()
        real = {i + 1 for i, line in enumerate(lines) if line.strip() and not line.strip().startswith("#")}
        marked = set()
        for node in ast.walk(tree):
            if not isinstance(node, ast.stmt) or isinstance(node, (ast.FunctionDef, ast.If, ast.For, ast.With,
                                                                   ast.Try, ast.While, ast.ClassDef)):
                continue
            hit = bool(REGISTER.search(ast.get_source_segment(text, node) or ""))
            if not hit and isinstance(node, ast.Assign):
                names = {t.id for target in node.targets for t in ast.walk(target) if isinstance(t, ast.Name)}
                hit = bool(names) and names <= only_claims
            if hit:
                marked |= set(range(node.lineno, node.end_lineno + 1))
        code += len(real)
        plumb += len(marked & real)
    return code, plumb


@pytest.mark.parametrize("source", CHAPTERS, ids=lambda p: p.stem)
def test_claim_plumbing_is_at_most_15_percent_of_a_chapters_code(source):
    code, plumb = plumbing(source)
    assert code and plumb / code <= LIMIT, f"{source.name}: {plumb} of {code} code lines are claim plumbing"


def test_the_count_sees_plumbing():
    """A chapter made of nothing but a claim's declaration and its recording is all plumbing."""
    fake = ROOT / "build" / "scratch" / "plumbing_probe.py"
    fake.parent.mkdir(parents=True, exist_ok=True)
    fake.write_text('# %%\nx = 3\nregister.claim("c", "C.")\nv = register.record("c", None, evidence=f"{x}")\n'
                    '# %%\nshow(v)\n')
    try:
        assert plumbing(fake) == (4, 3)  # x is read only by the record call; show(v) is prose
    finally:
        fake.unlink()
