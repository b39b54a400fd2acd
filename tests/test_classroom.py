"""Class results: two real quick runs of the book (1 and 2 threads, classroom/runs/) gathered and compared."""

import io
import json
import shutil
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from lib.make import classroom, teaching
from lib.paths import REPO_ROOT as ROOT

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
    extra = run / "data" / "09_many_requests"  # a chapter of three claims beside the run's own
    extra.mkdir()
    (extra / "provenance.json").write_text('{"files": ["data/09_many_requests/claims.csv"]}')
    a, b, c = "reuse_saves_the_prefix_prefill", "engine_reuses_whole_blocks", "handover_costs_its_bytes"
    pd.DataFrame({"claim": [a, b, c], "statement": ["", "", ""], "predicted": [1, 2, 3],
                  "measured": [1, 5, None], "verdict": ["held", "did not hold", "not measured"],
                  "evidence": ["", "", ""]}).to_csv(extra / "claims.csv", index=False)
    comparison = classroom.gather([run, RUNS[1]], tmp_path / "class")
    base = classroom.gather([RUNS[0]], tmp_path / "base")
    assert comparison.claims_held.iloc[0] == base.claims_held.iloc[0] + 1
    assert comparison.claims_recorded.iloc[0] == base.claims_recorded.iloc[0] + 3
    claims = pd.read_csv(tmp_path / "class" / "claims.csv")
    assert {a, b, c} <= set(claims.claim) and "with-claims" in claims.columns
    assert claims.set_index("claim").loc[b, "with-claims"] == "did not hold"


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


# ---------------------------------------------------------------------------------------------------
# Every file from a student is hostile (issue 20, item 1)
# ---------------------------------------------------------------------------------------------------

def _zip(path, files: dict[str, bytes | str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, content in files.items():
            archive.writestr(name, content)
    return path


def _run_files(root=RUNS[0]) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _refused(tmp_path, capsys, inputs) -> str:
    """gather() through main(): exit status 2 and exactly one line on stderr, no traceback."""
    assert classroom.main(["gather", *map(str, inputs), "--out", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err + captured.out, captured.err
    return lines[0]


def test_two_zips_of_the_same_name_are_two_students(tmp_path):
    first = classroom.pack(RUNS[0], tmp_path / "monday" / "alice.zip")
    second = classroom.pack(RUNS[1], tmp_path / "tuesday" / "alice.zip")
    comparison = classroom.gather([first, second], tmp_path / "class").set_index("run")
    alone = [classroom.gather([run], tmp_path / f"alone-{i}").iloc[0] for i, run in enumerate(RUNS[:2])]
    assert list(comparison.index) == ["alice", "alice-2"]
    for name, own in zip(["alice", "alice-2"], alone):
        for column in ("threads", "bandwidth_gb_s", "ttft_ms", "decode_step_ms", "claims_held"):
            assert comparison.loc[name, column] == own[column], (name, column)
    assert comparison.loc["alice", "threads"] != comparison.loc["alice-2", "threads"]


@pytest.mark.parametrize("files, said", [
    ({"data/01_two_phases/big.csv": b"0" * (classroom.ZIP_LIMITS["bytes"] + 1)}, "would expand to 64 MiB, more than"),
    ({f"data/01_two_phases/t{i}.csv": "x\n1\n" for i in range(classroom.ZIP_LIMITS["files"] + 1)},
     "holds 2,001 files, more than the 2,000"),
    ({"data/01_two_phases/" + "d/" * 6 + "x.csv": "x\n1\n"}, "9 levels deep, more than the 6"),
    ({"/etc/passwd": "x"}, "unsafe path '/etc/passwd'"),
    ({"data/../../escape.csv": "x"}, "unsafe path 'data/../../escape.csv'"),
    ({"..\\..\\escape.csv": "x"}, "unsafe path"),
], ids=["bomb", "too-many-files", "too-deep", "absolute", "climbs-out", "climbs-out-backslashes"])
def test_a_zip_that_expands_too_far_or_climbs_out_is_refused_naming_it(tmp_path, capsys, files, said):
    bad = _zip(tmp_path / "sent" / "mallory.zip", files)
    line = _refused(tmp_path, capsys, [bad])
    assert line.startswith(f"lib.make.classroom: {bad}: ") and said in line, line
    assert not (tmp_path / "escape.csv").exists() and not (tmp_path / "sent" / "escape.csv").exists()
    assert not list((tmp_path / "out").glob("class-*")), "the unpacked copy is removed"


def test_a_zip_that_lies_about_its_size_is_stopped_at_the_limit(tmp_path, monkeypatch):
    """The sizes the zip declares are not trusted: what is written is counted, and zipfile itself stops at the
    declared size and fails the file's CRC."""
    monkeypatch.setitem(classroom.ZIP_LIMITS, "bytes", 10_000)
    bad = _zip(tmp_path / "liar.zip", {"data/01_two_phases/a.csv": b"0" * 9_000, "data/01_two_phases/b.csv": b"0" * 900})
    real = zipfile.ZipFile.infolist

    def small(self):  # the central directory claims each file is one byte
        infos = real(self)
        for info in infos:
            info.file_size = 1
        return infos

    monkeypatch.setattr(zipfile.ZipFile, "infolist", small)
    monkeypatch.setitem(classroom.ZIP_LIMITS, "bytes", 5_000)
    with pytest.raises(classroom.BadRun, match=r"liar.zip: .*(expands past|cannot be unpacked \(Bad CRC-32)"):
        classroom.gather([bad], tmp_path / "out")


@pytest.mark.parametrize("case", ["missing", "not-a-zip", "empty-zip", "folder-not-a-run", "provenance-not-json",
                                  "provenance-a-list", "timings-not-a-table", "timings-without-seconds",
                                  "timings-not-numbers", "table-not-csv"])
def test_every_bad_input_is_one_line_naming_the_file(tmp_path, capsys, case):
    files = _run_files()
    if case == "missing":
        path, said = tmp_path / "nowhere.zip", "no such file or folder"
    elif case == "not-a-zip":
        path, said = tmp_path / "notes.zip", "not a zip file"
        path.write_text("these are my notes, not a zip")
    elif case == "empty-zip":
        path, said = _zip(tmp_path / "empty.zip", {}), "an empty zip"
    elif case == "folder-not-a-run":
        path, said = tmp_path / "holiday-photos", "no data/NN_chapter/ folders inside"
        path.mkdir()
        (path / "beach.jpg").write_bytes(b"\xff\xd8")
    else:
        target, content, said = {
            "provenance-not-json": ("data/01_two_phases/provenance.json", "{device: cpu", "not readable JSON"),
            "provenance-a-list": ("data/01_two_phases/provenance.json", "[1, 2]", "not a provenance record"),
            "timings-not-a-table": ("timings.csv", b"\x00\xff\xfe\x00garbage", "timings.csv: not a readable table"),
            "timings-without-seconds": ("timings.csv", "chapter,minutes\n01,3\n", "timings.csv: no seconds column"),
            "timings-not-numbers": ("timings.csv", "chapter,seconds\n01,soon\n", "timings.csv: its seconds are not all"),
            "table-not-csv": ("data/01_two_phases/request_metrics.csv", b"\xff\xfe\x00\x01", "not a readable table"),
        }[case]
        path = _zip(tmp_path / "student.zip", {**files, target: content})
        said = f"{target}: {said}" if not said.startswith("timings.csv") else said
    line = _refused(tmp_path, capsys, [RUNS[1], path])
    assert line.startswith(f"lib.make.classroom: {path}") and said in line, line


def test_csv_cells_are_spreadsheet_safe_and_numbers_stay_numbers(tmp_path):
    run = tmp_path / "=HYPERLINK(x)"
    shutil.copytree(RUNS[0], run)
    for prov in (run / "data").glob("*/provenance.json"):
        record = json.loads(prov.read_text())
        prov.write_text(json.dumps({**record, "device_name": "@SUM(A1:A9)", "device": "+cmd|' /C calc'!A0"}))
    extra = run / "data" / "09_many_requests"
    extra.mkdir()
    (extra / "provenance.json").write_text('{"files": ["data/09_many_requests/claims.csv"]}')
    plain = "reuse_saves_the_prefix_prefill"  # a claim of the book; the others no chapter decides (left out, flagged)
    pd.DataFrame({"claim": ["=1+2", "-2+3", "\tx", plain], "verdict": ["held", "did not hold", "held", "held"]}
                 ).to_csv(extra / "claims.csv", index=False)
    classroom.gather([run, RUNS[1]], tmp_path / "class")
    text = {name: (tmp_path / "class" / name).read_text() for name in ("comparison.csv", "sources.csv", "claims.csv")}
    comparison = pd.read_csv(tmp_path / "class" / "comparison.csv")
    assert comparison.run.iloc[0] == "'=HYPERLINK(x)" and "'@SUM(A1:A9)" in text["comparison.csv"]
    assert "'+cmd|' /C calc'!A0" in text["comparison.csv"]
    claims = pd.read_csv(tmp_path / "class" / "claims.csv")
    assert "'=HYPERLINK(x)" in claims.columns and plain in set(claims.claim)
    assert not {"=1+2", "'=1+2", "-2+3", "'-2+3"} & set(claims.claim)
    assert "3 claim(s) no chapter of the book decides" in comparison["flags"].iloc[0]
    assert pd.api.types.is_numeric_dtype(comparison.ttft_ms)  # a number stays a number
    for name, body in text.items():
        frame = pd.read_csv(io.StringIO(body))
        for row in [list(frame.columns), *frame.itertuples(index=False)]:
            for cell in map(str, row):
                assert not cell.startswith(("=", "+", "@", "\t", "\r")) and not (
                    cell.startswith("-") and not _number(cell)), (name, cell)
    assert (comparison.bandwidth_gb_s > 0).all() and pd.api.types.is_float_dtype(comparison.bandwidth_gb_s)
    assert classroom.spreadsheet_safe(pd.DataFrame({"x": ["-3.5", "-3+4", "=A1", 7]})).x.tolist() == [
        "-3.5", "'-3+4", "'=A1", 7]


def _number(text):
    try:
        float(text)
        return True
    except ValueError:
        return False


def test_pack_refuses_a_run_whose_replacement_is_unfinished(tmp_path, capsys, monkeypatch):
    root = tmp_path / "book"
    shutil.copytree(RUNS[0] / "data", root / "data")
    (root / "data" / ".01_two_phases.book-new").mkdir()  # a build killed in the middle of a swap
    (root / "build" / "journal").mkdir(parents=True)
    (root / "build" / "journal" / "01_two_phases.json").write_text("{}")
    with pytest.raises(ValueError, match=r"^refused to publish: the outputs of 01_two_phases .*make clean.*then run make class-zip again"):
        classroom.pack(root, tmp_path / "me.zip")
    monkeypatch.setattr(classroom, "CLASS_DIR", tmp_path / "class")
    assert classroom.main(["pack", "--root", str(root), "--name", "me"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "python -m lib.make.book --recover" in err
    assert not (tmp_path / "me.zip").exists() and not (tmp_path / "class" / "me.zip").exists()


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


def test_chapter_0_s_ceilings_as_it_writes_them_now_give_the_bandwidth_and_flop_rate(tmp_path):
    """The hostile pass after d3d7a80: chapter 0 writes ``gb_s`` and ``gflop_s`` (kernels ``read`` and
    ``square_matmul``), and the comparison looked for ``bandwidth_gb_s`` and ``matmul``: every current run's
    bandwidth and FLOP rate showed as not measured. The committed chapter 0's table, as a run's, gives both."""
    run = tmp_path / "current"
    shutil.copytree(RUNS[0], run)
    shutil.copy(ROOT / "data" / "00_machine" / "ceilings.csv", run / "data" / "00_machine" / "ceilings.csv")
    table = pd.read_csv(run / "data" / "00_machine" / "ceilings.csv")
    main = table[(table.dtype == "fp32") & (table.threads == table.threads.max())]
    comparison = classroom.gather([run], tmp_path / "class")
    assert comparison.bandwidth_gb_s.iloc[0] == pytest.approx(main[main.kernel == "read"].gb_s.max())
    assert comparison.matmul_gflop_s.iloc[0] == pytest.approx(main[main.kernel == "square_matmul"].gflop_s.max())
