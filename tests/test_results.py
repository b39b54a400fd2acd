import json

import matplotlib
import pandas as pd
import pytest

from lib import results

matplotlib.use("Agg")


def test_table_figure_and_provenance(tmp_path):
    import matplotlib.pyplot as plt

    r = results.Results("99_test", root=tmp_path, params={"n": 3}, model="tiny-gpt2")
    path = r.table(pd.DataFrame({"a": [1, 2]}), "numbers")
    assert path == tmp_path / "data" / "99_test" / "numbers.csv"
    assert pd.read_csv(path)["a"].tolist() == [1, 2]
    fig, ax = plt.subplots()
    ax.plot([1, 2])
    png = r.figure(fig, "line")
    assert png.read_bytes()[:4] == b"\x89PNG"
    record = json.loads((tmp_path / "data" / "99_test" / "provenance.json").read_text())
    for key in ("device", "device_name", "torch_threads", "torch", "git_commit", "date", "wall_time_s"):
        assert key in record
    assert record["parameters"] == {"n": 3}
    assert record["files"] == ["data/99_test/numbers.csv", "figures/99_test/line.png"]
    assert not list((tmp_path / "data" / "99_test").glob(".*tmp"))  # no temporary files left behind


def test_failed_write_keeps_the_old_file(tmp_path):
    r = results.Results("99_test", root=tmp_path)
    r.table(pd.DataFrame({"a": [1]}), "t")

    class Broken(pd.DataFrame):
        def to_csv(self, *args, **kwargs):
            raise OSError("disk full")

    with pytest.raises(OSError):
        r.table(Broken({"a": [2]}), "t")
    assert pd.read_csv(tmp_path / "data" / "99_test" / "t.csv")["a"].tolist() == [1]
    assert len(list((tmp_path / "data" / "99_test").iterdir())) == 2  # t.csv and provenance.json


def test_output_roots(monkeypatch, tmp_path):
    monkeypatch.delenv(results.OUTPUT_ROOT_ENV, raising=False)
    assert results.output_root() == results.REPO_ROOT
    assert results.output_root(quick=True) == results.REPO_ROOT / "build" / "quick"
    monkeypatch.setenv(results.OUTPUT_ROOT_ENV, str(tmp_path))
    assert results.output_root() == tmp_path
    assert results.Results("01_x").root == tmp_path


def test_bad_section_name():
    with pytest.raises(ValueError, match="plain name"):
        results.Results("a/b")


def test_reference_tables_are_there():
    table = results.load_reference("ch09_prefill_gpu_cpu")
    assert table["prompt_tokens"].tolist() == [1, 16, 128, 256, 512, 1024]
    with pytest.raises(ValueError, match="available: .*ch09_facts"):
        results.load_reference("nope")


def test_load_table_of_a_section_not_run():
    assert results.load_table("77_never_run", "x") is None
