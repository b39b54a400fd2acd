"""The build: incremental, fails loudly naming the notebook, and never replaces good outputs."""

import nbformat
import pytest

from lib import book

GOOD = '''# %% tags=["parameters"]
quick = False
value = 1

# %%
import pandas as pd
from lib.results import Results

r = Results("01_demo", quick=quick)
r.table(pd.DataFrame({"value": [value]}), "v")
'''

BAD = GOOD + '''
# %%
raise RuntimeError("boom in the last cell")
'''


@pytest.fixture()
def demo(tmp_path):
    (tmp_path / "notebooks").mkdir()
    source = tmp_path / "notebooks" / "01_demo.py"
    source.write_text(GOOD)
    return tmp_path, source


def test_build_then_skip_then_rebuild(demo):
    root, source = demo
    logs = []
    assert book.build(root=root, log=logs.append) == 0
    executed = root / "notebooks" / "01_demo.ipynb"
    assert (root / "data" / "01_demo" / "v.csv").read_text().splitlines() == ["value", "1"]
    assert (root / "data" / "01_demo" / "provenance.json").exists()
    assert book.recorded_hash(executed) == book.input_hash(source, None)
    cells = nbformat.read(executed, as_version=4).cells
    assert not any("papermill" in c.metadata or "execution" in c.metadata for c in cells)
    assert not (root / "build" / "staging" / "01_demo").exists()

    assert book.build(root=root, log=logs.append) == 0
    assert logs[-1] == "01_demo: up to date"

    source.write_text(GOOD.replace("value = 1", "value = 2"))
    assert book.build(root=root, log=logs.append) == 0
    assert "executed" in logs[-1]
    assert (root / "data" / "01_demo" / "v.csv").read_text().splitlines() == ["value", "2"]


def test_failure_names_the_notebook_and_keeps_good_outputs(demo):
    root, source = demo
    assert book.build(root=root, log=lambda _: None) == 0
    good_notebook = (root / "notebooks" / "01_demo.ipynb").read_text()
    source.write_text(BAD.replace("value = 1", "value = 5"))
    logs = []
    assert book.build(root=root, log=logs.append) == 1
    assert "01_demo.py failed in cell" in logs[-1] and "boom in the last cell" in logs[-1]
    assert "previous outputs of 01_demo were kept" in logs[-1]
    # the failed run wrote value 5 into staging only: the committed table and notebook are untouched
    assert (root / "data" / "01_demo" / "v.csv").read_text().splitlines() == ["value", "1"]
    assert (root / "notebooks" / "01_demo.ipynb").read_text() == good_notebook
    assert (root / "build" / "staging" / "01_demo" / "data" / "01_demo" / "v.csv").exists()


def test_quick_mode_writes_under_build_quick_only(demo):
    root, _ = demo
    assert book.build(root=root, quick=True, log=lambda _: None) == 0
    assert (root / "build" / "quick" / "data" / "01_demo" / "v.csv").exists()
    executed = nbformat.read(root / "build" / "quick" / "notebooks" / "01_demo.ipynb", as_version=4)
    assert any("injected-parameters" in c.metadata.get("tags", []) for c in executed.cells)
    assert not (root / "data").exists() and not (root / "notebooks" / "01_demo.ipynb").exists()


def test_unknown_selection_and_device(demo):
    root, _ = demo
    logs = []
    assert book.build(root=root, only=["42"], log=logs.append) == 2
    assert "notebooks are: 01_demo" in logs[-1]
    assert book.main(["--device", "tpu"]) == 2


def test_a_chapter_reruns_when_the_data_it_reads_changes(demo):
    root, source = demo
    reader = root / "notebooks" / "02_reader.py"
    reader.write_text('# %% tags=["parameters"]\nquick = False\n\n# %%\nfrom lib.results import load_table\n'
                      'print("reads 01_demo")\n')
    logs = []
    assert book.build(root=root, log=logs.append) == 0
    assert book.upstream_data(reader) == [root / "data" / "01_demo" / "v.csv"]
    assert book.build(root=root, log=logs.append) == 0
    assert logs[-2:] == ["01_demo: up to date", "02_reader: up to date"]
    source.write_text(GOOD.replace("value = 1", "value = 3"))
    assert book.build(root=root, log=logs.append) == 0
    assert "executed" in logs[-1], "02_reader reads 01_demo's data, which changed"
