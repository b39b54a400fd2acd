"""Class results: two real quick runs of the book (1 and 2 threads, classroom/runs/) gathered and compared."""

import json
import shutil
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from lib.make import classroom, teaching

RUNS = sorted(p for p in classroom.EXAMPLE_RUNS.glob("*") if p.is_dir())


def test_the_example_runs_are_two_real_runs_with_different_threads():
    assert len(RUNS) >= 2
    threads = set()
    for run in RUNS:
        provenance = [json.loads(p.read_text()) for p in run.glob("data/*/provenance.json")]
        assert len(provenance) >= 6, f"{run.name}: every chapter's provenance"
        threads |= {frozenset(p["torch_threads"] for p in provenance)}
    assert {frozenset({1}), frozenset({2})} <= threads


def test_gather_compares_folders_and_zips(tmp_path):
    packed = classroom.pack(RUNS[1], tmp_path / "sent" / "student-b.zip")
    comparison = classroom.gather([RUNS[0], packed], tmp_path / "class")
    assert list(comparison.run) == [RUNS[0].name, "student-b"]
    assert list(comparison.threads) == ["1", "2"]
    assert comparison.book_run_s.notna().all(), "a re-packed run keeps its chapters' run times"
    for column in ("bandwidth_gb_s", "matmul_gflop_s", "ttft_ms", "decode_step_ms", "prefill_tokens_per_s"):
        assert comparison[column].notna().all() and (comparison[column] > 0).all(), column
    assert (comparison.claims_recorded > 0).all() and (comparison.claims_held <= comparison.claims_recorded).all()
    for name in ("comparison.csv", "sources.csv", "claims.csv", "comparison.png"):
        assert (tmp_path / "class" / name).exists()
    sources = pd.read_csv(tmp_path / "class" / "sources.csv")
    assert not sources.source.str.contains("not measured").any()


def test_a_number_comes_from_the_run_s_own_table(tmp_path):
    """The comparison's TTFT is the median of chapter 1's request_metrics of that run, in ms."""
    comparison = classroom.gather(RUNS[:1], tmp_path)
    metrics = pd.read_csv(RUNS[0] / "data" / "01_two_phases" / "request_metrics.csv")
    assert comparison.ttft_ms.iloc[0] == pytest.approx(metrics.ttft_ms.median())
    claims = pd.concat(pd.read_csv(p) for p in (RUNS[0] / "data").glob("*/claims.csv"))
    assert comparison.claims_held.iloc[0] == (claims.verdict == "held").sum()


def test_claims_held_are_counted_per_machine(tmp_path):
    run = tmp_path / "with-claims"
    shutil.copytree(RUNS[0], run)
    extra = run / "data" / "09_extra"  # a chapter of three claims beside the run's own
    extra.mkdir()
    pd.DataFrame({"claim": ["a", "b", "c"], "statement": ["", "", ""], "predicted": [1, 2, 3],
                  "measured": [1, 5, None], "verdict": ["held", "did not hold", "not measured"],
                  "evidence": ["", "", ""]}).to_csv(extra / "claims.csv", index=False)
    comparison = classroom.gather([run, RUNS[1]], tmp_path / "class")
    base = classroom.gather([RUNS[0]], tmp_path / "base")
    assert comparison.claims_held.iloc[0] == base.claims_held.iloc[0] + 1
    assert comparison.claims_recorded.iloc[0] == base.claims_recorded.iloc[0] + 3
    claims = pd.read_csv(tmp_path / "class" / "claims.csv")
    assert {"a", "b", "c"} <= set(claims.claim) and "with-claims" in claims.columns
    assert claims.set_index("claim").loc["b", "with-claims"] == "did not hold"


def test_a_missing_table_is_left_empty_and_said_so(tmp_path):
    run = tmp_path / "partial"
    shutil.copytree(RUNS[0], run)
    shutil.rmtree(run / "data" / "02_prefill_sweep")
    classroom.gather([run], tmp_path / "class")
    comparison = pd.read_csv(tmp_path / "class" / "comparison.csv")
    assert pd.isna(comparison.prefill_tokens_per_s.iloc[0])
    sources = pd.read_csv(tmp_path / "class" / "sources.csv").set_index("metric")
    assert sources.loc["prefill_tokens_per_s", "source"] == "not measured in this run"


def test_bad_inputs_fail_with_a_clear_message(tmp_path):
    with pytest.raises(ValueError, match="no data/NN_chapter/"):
        classroom.gather([tmp_path], tmp_path / "out")
    evil = tmp_path / "evil.zip"
    with zipfile.ZipFile(evil, "w") as archive:
        archive.writestr("../escape.txt", "x")
    with pytest.raises(ValueError, match="unsafe path"):
        classroom.gather([evil], tmp_path / "out")
    with pytest.raises(ValueError, match="run make book or make quick"):
        classroom.pack(tmp_path, tmp_path / "x.zip")


def test_pack_holds_data_and_timings_but_no_reference_or_notebook(tmp_path):
    root = tmp_path / "book"
    shutil.copytree(RUNS[0] / "data", root / "data")
    (root / "data" / "reference").mkdir()
    (root / "data" / "reference" / "big.csv").write_text("x\n1\n")
    names = zipfile.ZipFile(classroom.pack(root, tmp_path / "me.zip")).namelist()
    assert "timings.csv" in names and any(n.startswith("data/01_two_phases/") for n in names)
    assert not any(n.startswith("data/reference/") or n.endswith(".ipynb") for n in names)


def test_sessions_are_packed_in_order_within_the_budget():
    need = {"01": 20.0, "02": 15.0, "03": 30.0, "04": 50.0}
    assert teaching.plan_sessions(need, 45) == [["01", "02"], ["03"], ["04"]]
    assert teaching.plan_sessions(need, 90) == [["01", "02", "03"], ["04"]]


def test_public_drops_the_build_machine_s_folders():
    home = Path("~").expanduser()
    root = classroom.REPO_ROOT
    assert teaching.public(f"run `{root}/.venv/bin/python -m pip`") == "run `.venv/bin/python -m pip`"
    assert teaching.public(f"cached in {home}/.cache/x", root=Path("/elsewhere")) == "cached in ~/.cache/x"
    assert teaching.public(f"{sys.prefix}/bin/python", root=Path("/elsewhere")) == ".venv/bin/python"


def test_chapter_0_s_ceilings_are_preferred_when_a_run_has_them(tmp_path):
    run = tmp_path / "with-chapter-0"
    shutil.copytree(RUNS[0], run)
    (run / "data" / "00_machine").mkdir(exist_ok=True)
    pd.DataFrame({"dtype": ["fp32"] * 4 + ["bf16"], "threads": [2, 2, 1, 2, 2],
                  "kernel": ["read", "matmul", "read", "copy", "read"], "status": ["ok"] * 5,
                  "bandwidth_gb_s": [20.0, None, 11.0, 30.0, 99.0], "gflop_s": [None, 150.0, None, None, None]}
                 ).to_csv(run / "data" / "00_machine" / "ceilings.csv", index=False)
    comparison = classroom.gather([run], tmp_path / "class")
    assert comparison.bandwidth_gb_s.iloc[0] == 20.0  # STREAM read, fp32, most threads
    assert comparison.matmul_gflop_s.iloc[0] == 150.0
    sources = pd.read_csv(tmp_path / "class" / "sources.csv").set_index("metric")
    assert sources.loc["bandwidth_gb_s", "source"].startswith("00_machine/ceilings.csv")
