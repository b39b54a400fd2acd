"""Every chapter runs, in quick mode, through papermill, with its own assertions (predict, then measure)."""

from pathlib import Path

import nbformat
import pandas as pd
import pytest

from lib import claims
from lib.make import book
from lib.paths import REPO_ROOT as ROOT

SOURCES = book.sources()


@pytest.fixture(scope="module")
def quick_book(tmp_path_factory) -> Path:
    """One output root for the chapters after chapter 0, run in order as `make quick` runs them: a quick chapter
    reads only the quick runs of the chapters before it (the committed tables are of other models and sizes).
    Chapter 0 runs apart, so the later chapters price from the committed ceilings (which hold the quick model's
    rows): a quick chapter 0 on a busy machine gives other prices at every run, and the suite must not depend on
    them."""
    return tmp_path_factory.mktemp("quick_book")


@pytest.mark.slow
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_notebook_runs_in_quick_mode(source: Path, quick_book, tmp_path):
    tmp_path = tmp_path if source.stem == "00_machine" else quick_book
    executed = tmp_path / f"{source.stem}.ipynb"
    book.execute(source, quick=True, device="cpu", out_root=tmp_path, executed=executed)
    notebook = nbformat.read(executed, as_version=4)
    assert not any(o.get("output_type") == "error" for c in notebook.cells for o in c.get("outputs", []))
    assert (tmp_path / "data" / source.stem / "provenance.json").exists()
    assert list((tmp_path / "figures" / source.stem).glob("*.png")), "every chapter draws at least one figure"
    quick_claims = pd.read_csv(tmp_path / "data" / source.stem / "claims.csv")
    assert set(quick_claims.verdict) <= set(claims.VERDICTS)
    committed = ROOT / "data" / source.stem / "claims.csv"
    if committed.exists():  # a claim's statement is one constant, whatever the machine and the parameters
        full = pd.read_csv(committed).set_index("claim").statement
        same = quick_claims.set_index("claim").statement
        shared = sorted(set(full.index) & set(same.index))
        assert [c for c in shared if full[c] != same[c]] == [], "a claim's statement changed with the run"
