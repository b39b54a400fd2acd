"""Every chapter runs, in quick mode, through papermill, with its own assertions (predict, then measure)."""

from pathlib import Path

import nbformat
import pytest

from lib.make import book

SOURCES = book.sources()


@pytest.mark.slow
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_notebook_runs_in_quick_mode(source: Path, tmp_path):
    executed = tmp_path / f"{source.stem}.ipynb"
    book.execute(source, quick=True, device="cpu", out_root=tmp_path, executed=executed)
    notebook = nbformat.read(executed, as_version=4)
    assert not any(o.get("output_type") == "error" for c in notebook.cells for o in c.get("outputs", []))
    assert (tmp_path / "data" / source.stem / "provenance.json").exists()
    assert list((tmp_path / "figures" / source.stem).glob("*.png")), "every chapter draws at least one figure"
