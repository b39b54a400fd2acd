import json
import shutil

import matplotlib
import pandas as pd
import pytest

from lib import paths, results

matplotlib.use("Agg")


def test_table_figure_and_provenance(tmp_path):
    import matplotlib.pyplot as plt

    from lib import params
    P = params.check({"n": 3}, {"n": params.integer(min=1)})
    r = results.Results("99_test", root=tmp_path, params=P, model="tiny-gpt2")
    path = r.table(pd.DataFrame({"a": [1, 2]}), "numbers")
    assert path == tmp_path / "data" / "99_test" / "numbers.csv"
    assert pd.read_csv(path)["a"].tolist() == [1, 2]
    fig, ax = plt.subplots()
    ax.plot([1, 2])
    png = r.figure(fig, "line")
    assert png.read_bytes()[:4] == b"\x89PNG"
    record = json.loads((tmp_path / "data" / "99_test" / "provenance.json").read_text())
    for key in ("device", "device_name", "torch_threads", "torch", "git_commit", "git_dirty", "date",
                "wall_time_s"):
        assert key in record
    assert record["parameters"] == {"n": 3} == record["parameters_used"]
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


def test_output_roots(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv(paths.OUTPUT_ROOT_ENV, raising=False)
    monkeypatch.delenv(paths.WRITE_COMMITTED_ENV, raising=False)
    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(results, "REPO_ROOT", tmp_path)
    assert results.output_root() == tmp_path / "build" / "scratch"  # a hand run leaves data/ alone
    assert results.output_root(quick=True) == tmp_path / "build" / "quick"
    r = results.Results("01_x")
    assert r.root == tmp_path / "build" / "scratch"
    assert f"01_x: outputs go to {tmp_path}/build/scratch/ (a run outside make book" in capsys.readouterr().out
    monkeypatch.setenv(results.WRITE_COMMITTED_ENV, "1")
    assert results.output_root() == tmp_path and results.output_root(quick=True) == tmp_path / "build" / "quick"
    results.Results("01_x")
    assert "committed data/ and figures/ (the next make book will re-run" in capsys.readouterr().out
    monkeypatch.setenv(results.OUTPUT_ROOT_ENV, str(tmp_path / "staging"))  # the build
    assert results.output_root() == tmp_path / "staging"
    assert results.Results("01_x").root == tmp_path / "staging" and capsys.readouterr().out == ""


def test_provenance_takes_the_checked_parameters(tmp_path):
    from lib import params
    P = params.check({"runs": 3, "sizes": [1, 2, 3]}, {"runs": params.integer(min=1, quick=1),
                                                       "sizes": params.int_list(quick=[1])}, quick=True,
                     log=lambda _: None)
    r = results.Results("99_test", root=tmp_path, params=P)
    record = json.loads(r.provenance().read_text())
    assert record["parameters"] == {"runs": 3, "sizes": [1, 2, 3]}
    assert record["parameters_used"] == {"runs": 1, "sizes": [1]}
    assert record["quick_changes"] == ["runs 3 -> 1", "sizes [1, 2, 3] -> [1]"]


def test_git_state_names_a_real_commit_and_the_dirty_files():
    import subprocess
    state = results.git_state()
    assert "-dirty" not in state["git_commit"]
    assert subprocess.run(["git", "cat-file", "-t", state["git_commit"]], cwd=results.REPO_ROOT,
                          capture_output=True, text=True).stdout.strip() == "commit"
    assert all(not f.endswith(".ipynb") for f in state["git_dirty"])


def test_load_table_reads_this_runs_tree_first(monkeypatch, tmp_path):
    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(results, "REPO_ROOT", tmp_path)
    monkeypatch.delenv(results.OUTPUT_ROOT_ENV, raising=False)
    monkeypatch.delenv(results.WRITE_COMMITTED_ENV, raising=False)
    for root, value in [(tmp_path, 1), (tmp_path / "build" / "scratch", 2)]:
        (root / "data" / "02_x").mkdir(parents=True)
        (root / "data" / "02_x" / "t.csv").write_text(f"a\n{value}\n")
        (root / "data" / "02_x" / "provenance.json").write_text('{"files": ["data/02_x/t.csv"]}')
    assert results.load_table("02_x", "t")["a"].tolist() == [2]
    monkeypatch.setenv(results.OUTPUT_ROOT_ENV, str(tmp_path / "staging"))
    assert results.load_table("02_x", "t")["a"].tolist() == [1]


def test_load_table_never_falls_back_to_another_run_s_table(monkeypatch, tmp_path):
    """The hostile pass after d3d7a80: a quick run's table deleted (its provenance still listing it), or its
    provenance deleted, and a later chapter read the committed full run's table, or the quick one unchecked,
    as if it were the quick run's. Both are refused in one line naming the file and the command that restores it."""
    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(results, "REPO_ROOT", tmp_path)
    monkeypatch.delenv(results.WRITE_COMMITTED_ENV, raising=False)
    quick = tmp_path / "build" / "quick"
    monkeypatch.setenv(results.OUTPUT_ROOT_ENV, str(quick))
    for root in (tmp_path, quick):
        (root / "data" / "02_x").mkdir(parents=True)
        (root / "data" / "02_x" / "t.csv").write_text("a\n1\n")
        (root / "data" / "02_x" / "provenance.json").write_text('{"files": ["data/02_x/t.csv"]}')
    assert results.load_table("02_x", "t", quick=True)["a"].tolist() == [1]
    (quick / "data" / "02_x" / "t.csv").unlink()
    with pytest.raises(results.CorruptTable, match=r"t\.csv: refused: missing, though its run's provenance\.json "
                                                   r"lists it; restore it with: "):
        results.load_table("02_x", "t", quick=True)
    (quick / "data" / "02_x" / "t.csv").write_text("a\n1\n")
    (quick / "data" / "02_x" / "provenance.json").unlink()
    with pytest.raises(results.CorruptTable, match=r"t\.csv: refused: no provenance\.json beside it"):
        results.load_table("02_x", "t", quick=True)
    assert results.load_table("02_x", "other", quick=True) is None  # a table no run wrote: none
    shutil.rmtree(quick / "data" / "02_x")  # no quick run of that chapter at all: the full run's table is not it
    assert results.load_table("02_x", "t", quick=True) is None
    assert results.load_table("02_x", "t")["a"].tolist() == [1], "a full hand run still reads the committed one"


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


@pytest.mark.parametrize("call, message", [
    (lambda r: r.table([1, 2], "t"), "expected a pandas DataFrame, got list"),
    (lambda r: r.table(pd.DataFrame({"a": [1]}), "../t"), "plain file name"),
    (lambda r: r.table(pd.DataFrame({"a": [1]}), ""), "plain file name"),
    (lambda r: r.figure("not a figure", "f"), "expected a matplotlib figure, got str"),
])
def test_nonsense_outputs_are_refused(tmp_path, call, message):
    with pytest.raises(ValueError, match=message):
        call(results.Results("99_test", root=tmp_path))
    assert not (tmp_path / "data" / "99_test").exists()


def test_load_table_refuses_a_duration_that_is_negative_infinite_or_text(monkeypatch, tmp_path):
    """Numbers a later chapter reads are checked like text from outside: a time or rate below zero, infinite or
    not a number is refused in one line naming the file and the column; a difference (a rest, a saving) may be
    negative, and a value not measured may be missing."""
    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(results, "REPO_ROOT", tmp_path)
    monkeypatch.delenv(results.OUTPUT_ROOT_ENV, raising=False)
    monkeypatch.delenv(results.WRITE_COMMITTED_ENV, raising=False)
    folder = tmp_path / "data" / "02_x"
    folder.mkdir(parents=True)
    (folder / "provenance.json").write_text('{"files": ["data/02_x/t.csv"]}')
    for body, problem in [("step_ms,rest_ms\n3.0,-0.5\n,1\n", None),
                          ("step_ms,rest_ms\n-3.0,0.5\n", "column step_ms holds 1 negative or infinite"),
                          ("read_gb_s\ninf\n", "column read_gb_s holds 1 negative or infinite"),
                          ("ttft_ms\n12\nfast\n", "column ttft_ms holds 1 value\\(s\\) that are not numbers")]:
        (folder / "t.csv").write_text(body)
        results._PINNED.clear()
        if problem is None:
            assert results.load_table("02_x", "t").rest_ms.tolist() == [-0.5, 1.0]
        else:
            with pytest.raises(results.CorruptTable, match=rf"t\.csv: refused: {problem}.*restore it with"):
                results.load_table("02_x", "t")
