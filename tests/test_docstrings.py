"""Every "Introduced in chapter N" tag in lib is true: chapter N uses the name and no earlier chapter does."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TAG = re.compile(r"Introduced in chapter (\d+)")


def _chapters() -> dict[int, str]:
    return {int(p.name[:2]): p.read_text() for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))}


def _tagged() -> list[tuple[str, str, int]]:
    found = []
    for path in sorted((ROOT / "lib").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                match = TAG.search(ast.get_docstring(node) or "")
                if match:
                    found.append((path.stem, node.name, int(match.group(1))))
    return found


def _uses(text: str, name: str) -> bool:
    """A call, an attribute use or an import of ``name`` (not the word in prose)."""
    return bool(re.search(rf"(\.{name}\b|\b{name}\(|^from lib\S* import .*\b{name}\b)", text, re.M))


@pytest.mark.parametrize("module, name, section", _tagged(), ids=lambda x: str(x))
def test_section_tag_is_true(module, name, section):
    chapters = _chapters()
    assert section in chapters, f"lib.{module}.{name} says chapter {section}, which has no chapter"
    first = min((n for n, text in chapters.items() if _uses(text, name)), default=None)
    assert first == section, (f"lib.{module}.{name} says 'Introduced in chapter {section}' but it is first used "
                              f"in chapter {first}")
