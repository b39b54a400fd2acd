"""Issue 30's hostile cases, kept as tests: nothing mixed (a run is one unit, every state file and output is
written whole under a lock) and nothing believed blindly (numbers from a student, a table a later chapter reads).
The client's own cases (streams, usage, keep-alive, another model) are in test_client.py."""

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from lib import paths, results, runs
from lib.make import book, classroom, lab, outputs
from lib.make.site import pages

EXAMPLES = sorted(p for p in classroom.EXAMPLE_RUNS.glob("*") if p.is_dir())


@pytest.fixture()
def hand(monkeypatch, tmp_path):
    """A book's root for hand runs (``Results`` with no root, outside make book): tmp_path."""
    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(results, "REPO_ROOT", tmp_path)
    monkeypatch.delenv(paths.OUTPUT_ROOT_ENV, raising=False)
    monkeypatch.delenv(paths.WRITE_COMMITTED_ENV, raising=False)
    return tmp_path


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------------------------------------------
# 1. Every run is one unit
# ------------------------------------------------------------------------------------------------------

BUILD_CHAPTER = '''# %% tags=["parameters"]
quick = False

# %%
import pathlib, time
import pandas as pd
from lib.results import Results

r = Results("01_demo", quick=quick)
r.table(pd.DataFrame({{"by": ["make quick"]}}), "v")
r.table(pd.DataFrame({{"claim": ["c"], "verdict": ["held"]}}), "claims")
while not pathlib.Path({release!r}).exists():  # the test lets the build finish
    time.sleep(0.05)
'''


def test_make_quick_and_a_hand_quick_run_of_the_same_chapter_never_mix(hand):
    """The issue's first harmful case: a make quick of a chapter and a hand quick run started seconds apart
    left the build's tables beside the hand run's provenance and claims. Now the later one is refused, in one
    line naming the other, and the folder holds one run's files."""
    root, release = hand, hand / "release"
    (root / "notebooks").mkdir()
    (root / "notebooks" / "01_demo.py").write_text(BUILD_CHAPTER.format(release=str(release)))
    build = subprocess.Popen([sys.executable, "-m", "lib.make.book", "--quick", "--root", str(root)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    quick = root / "build" / "quick"
    holder = runs.lock_path(quick, "01_demo").with_suffix(".holder")
    try:
        deadline = time.monotonic() + 300  # the build holds the chapter from before its kernel starts
        while not holder.exists() and build.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(runs.RunBusy) as caught:
            results.Results("01_demo", quick=True)
    finally:
        release.write_text("")
        out, _ = build.communicate(timeout=300)
    line = str(caught.value)
    assert line.startswith("01_demo: refused: another run of this chapter is writing its outputs under ") and \
        f"(make quick, pid {build.pid}, since " in line and "\n" not in line, line
    assert build.returncode == 0, out
    data = quick / "data" / "01_demo"
    assert runs.folder_problem(data) is None
    assert set(_files(data)) == {"v.csv", "claims.csv", "provenance.json"}
    assert json.loads((data / "provenance.json").read_text())["finished"] is True
    # After it, a hand run of the chapter replaces the build's outputs whole when it finishes
    mine = results.Results("01_demo", quick=True)
    mine.table(pd.DataFrame({"by": ["hand"]}), "w")
    assert set(_files(data)) == {"v.csv", "claims.csv", "provenance.json"}  # nothing until it finishes
    mine.finish()
    assert set(_files(data)) == {"w.csv", "provenance.json"} and runs.folder_problem(data) is None


def test_a_hand_run_in_progress_makes_the_build_refuse_that_chapter_in_one_line(hand):
    root = hand
    (root / "notebooks").mkdir()
    (root / "notebooks" / "01_demo.py").write_text(BUILD_CHAPTER.format(release="/"))
    mine = results.Results("01_demo", quick=True)
    logs = []
    assert book.build(quick=True, root=root, log=logs.append) == 1
    line = logs[-1]
    assert line.startswith("FAILED: 01_demo failed before its first cell: refused: another run of this chapter") \
        and f"(a hand run, pid {os.getpid()}, since " in line and "previous outputs of 01_demo were kept" in line, line
    assert not (root / "build" / "quick" / "data" / "01_demo").exists()
    mine.table(pd.DataFrame({"by": ["hand"]}), "w")
    mine.finish()
    assert book.build(quick=True, root=root, log=logs.append) == 0, logs[-1]  # the chapter is free again


def test_the_same_chapter_s_setup_cell_run_twice_in_one_kernel_takes_the_folder_over(hand):
    first = results.Results("02_demo")
    first.table(pd.DataFrame({"a": [1]}), "t")
    second = results.Results("02_demo")  # JupyterLab: the reader runs the setup cell again
    with pytest.raises(runs.RunBusy, match="a later Results"):
        first.table(pd.DataFrame({"a": [2]}), "t")
    second.table(pd.DataFrame({"a": [3]}), "t")
    second.finish()
    assert pd.read_csv(hand / "build" / "scratch" / "data" / "02_demo" / "t.csv").a.tolist() == [3]
    with pytest.raises(ValueError, match="this run finished"):
        second.table(pd.DataFrame({"a": [4]}), "t")


FAILS_MIDWAY = '''
import pandas as pd
from lib.results import Results
r = Results("07_demo", root={root!r}, staged=True)
r.table(pd.DataFrame({{"run": [2]}}), "a")
raise RuntimeError("cell 20 failed")
'''


def test_a_hand_run_that_fails_midway_leaves_the_last_finished_run_and_class_zip_sends_only_it(tmp_path):
    """The issue's second harmful case: a hand run that failed in cell 20 left tables of two runs, and
    make class-zip shipped them with exit status 0."""
    root = tmp_path / "quick"
    for stem in ("01_demo", "07_demo"):
        finished = results.Results(stem, root=root, staged=True)
        finished.table(pd.DataFrame({"run": [1]}), "a")
        finished.table(pd.DataFrame({"run": [1]}), "b")
        finished.finish()
    before = _files(root / "data")
    failed = subprocess.run([sys.executable, "-c", FAILS_MIDWAY.format(root=str(root))], capture_output=True,
                            text=True, timeout=120)
    assert failed.returncode == 1 and "cell 20 failed" in failed.stderr
    assert _files(root / "data") == before  # the failed run never reached the folder
    packed = zipfile.ZipFile(classroom.pack(root, tmp_path / "me.zip", log=pytest.fail))
    assert sorted(n for n in packed.namelist() if n.startswith("data/07_demo/")) == [
        "data/07_demo/a.csv", "data/07_demo/b.csv", "data/07_demo/provenance.json"]
    # a folder that does hold two runs' tables (a run written straight into it, as every hand run was before)
    direct = results.Results("07_demo", root=root)
    direct.table(pd.DataFrame({"run": [3]}), "a")
    said = []
    names = zipfile.ZipFile(classroom.pack(root, tmp_path / "me.zip", log=said.append)).namelist()
    assert not any(n.startswith("data/07_demo/") for n in names) and any(n.startswith("data/01_demo/") for n in names)
    assert len(said) == 1 and said[0].startswith("left 07_demo out of the zip: it holds b.csv, which its "
                                                 "provenance.json does not list: files of another run"), said


def test_class_zip_never_packs_a_symbolic_link_s_target(tmp_path):
    root = tmp_path / "book"
    shutil.copytree(EXAMPLES[0] / "data", root / "data")
    (root / "data" / "01_two_phases" / "answer_trace.csv").unlink()
    (root / "data" / "01_two_phases" / "answer_trace.csv").symlink_to("/etc/passwd")
    said = []
    archive = zipfile.ZipFile(classroom.pack(root, tmp_path / "me.zip", log=said.append))
    assert not any(n.startswith("data/01_two_phases/") for n in archive.namelist())
    assert not any(b"root:" in archive.read(n) for n in archive.namelist())
    assert said == ["left 01_two_phases out of the zip: answer_trace.csv: a symbolic link, never followed out "
                    "of a run; run the chapter again to send it"]


# ------------------------------------------------------------------------------------------------------
# 2. Every state file and every output written whole, under a lock
# ------------------------------------------------------------------------------------------------------

def _slow(monkeypatch, owner, name, seconds):
    real = getattr(owner, name)

    def slowed(*args, **kwargs):
        time.sleep(seconds)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, slowed)


def test_two_class_zips_of_the_same_name_at_once_leave_one_whole_zip(tmp_path, monkeypatch):
    _slow(monkeypatch, zipfile.ZipFile, "writestr", 0.002)  # each pack takes a while: the two overlap
    out, done, errors = tmp_path / "class" / "host.zip", [], []

    def pack(run):
        try:
            done.append(classroom.pack(run, out))
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=pack, args=(run,)) for run in EXAMPLES[:2]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors and len(done) == 2
    with zipfile.ZipFile(out) as archive:
        assert archive.testzip() is None
        names = archive.namelist()
    one = {f"data/{p.relative_to(r / 'data').as_posix()}" for r in EXAMPLES[:2] for p in (r / "data").rglob("*")
           if p.is_file()}
    assert "timings.csv" in names and set(names) - {"timings.csv"} <= one and len(names) == len(set(names))
    assert not list(out.parent.glob(".host.zip.*.tmp"))


def test_two_copy_steps_of_make_lab_at_once_lose_no_entry(tmp_path, monkeypatch):
    """One make lab copies the first chapter and is held there; a second runs meanwhile. Before the lock, the
    second found a copy without its record, took it for the reader's own and wrote the record without it."""
    import nbformat

    (tmp_path / "notebooks").mkdir()
    for stem in ("01_a", "02_b", "03_c"):
        (tmp_path / "notebooks" / f"{stem}.py").write_text(f"# %%\nprint({stem!r})\n")
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(f"print({stem!r})")]),
                       tmp_path / "notebooks" / f"{stem}.ipynb")
    real, first_copied, second_done = lab._write_pair, threading.Event(), threading.Event()

    def write_pair(source, executed, folder):
        real(source, executed, folder)
        if threading.current_thread().name == "first" and source.stem == "01_a":
            first_copied.set()
            second_done.wait(timeout=1.5)  # with the lock, the second cannot run now: the wait runs out

    monkeypatch.setattr(lab, "_write_pair", write_pair)
    first = threading.Thread(target=lab.prepare, args=(tmp_path,), kwargs={"log": lambda _: None}, name="first")
    first.start()
    assert first_copied.wait(timeout=60)
    second = threading.Thread(target=lambda: (lab.prepare(tmp_path, log=lambda _: None), second_done.set()))
    second.start()
    first.join(timeout=60)
    second.join(timeout=60)
    state = json.loads((lab.copies_dir(tmp_path) / lab.STATE).read_text())
    assert sorted(state) == ["01_a", "02_b", "03_c"]
    said = []
    lab.prepare(tmp_path, log=said.append)
    assert not any("kept your copy" in line for line in said), said


def _gathered(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in (*classroom.GATHERED, "gather.json") if (out / name).exists()}


def test_a_zip_whose_file_name_is_not_utf_8_is_gathered_whole(tmp_path):
    """The issue's case: a zip named in bytes that are not UTF-8 half-rewrote comparison.csv."""
    out = tmp_path / "class"
    classroom.gather(EXAMPLES[:1], out)
    odd = classroom.pack(EXAMPLES[1], tmp_path / (os.fsdecode(b"caf\xe9") + ".zip"))
    comparison = classroom.gather([EXAMPLES[0], odd], out, log=lambda _: None)
    assert list(comparison.run) == [EXAMPLES[0].name, "caf\ufffd"]
    assert classroom.gathered_problem(out) is None
    assert pd.read_csv(out / "comparison.csv").run.tolist() == [EXAMPLES[0].name, "caf\ufffd"]


def test_a_gather_that_fails_leaves_the_earlier_gather_whole(tmp_path, monkeypatch, capsys):
    out = tmp_path / "class"
    classroom.gather(EXAMPLES[:2], out)
    before = _gathered(out)
    assert set(before) == {*classroom.GATHERED, "gather.json"}
    # a zip whose member name says it is UTF-8 and is not
    bad = tmp_path / "bad.zip"
    with zipfile.ZipFile(bad, "w") as archive:
        archive.writestr("data/01_two_phases/caf\u00e9.csv", "x\n1\n")
    bad.write_bytes(bad.read_bytes().replace("caf\u00e9".encode(), b"caf\xff\xfe"))
    assert classroom.main(["gather", str(EXAMPLES[0]), str(bad), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"lib.make.classroom: {bad}: a file name inside it says it is UTF-8 and is not; make class-zip "
                   f"writes plain ASCII names"]
    assert _gathered(out) == before
    # a failure while writing (a full disk, say)
    real = classroom.plot

    def full_disk(comparison, path):
        real(comparison, path)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(classroom, "plot", full_disk)
    with pytest.raises(OSError):
        classroom.gather(EXAMPLES[:1], out)
    assert _gathered(out) == before and classroom.gathered_problem(out) is None
    assert not [p for p in out.iterdir() if p.name.startswith(".gather-")]


def test_make_html_refuses_class_results_of_two_gathers(tmp_path):
    out = tmp_path / "build" / "class"
    classroom.gather(EXAMPLES[:2], out)
    assert pages.class_results(tmp_path, tmp_path / "src")[0] == out
    (out / "comparison.csv").write_text("run\nsomeone else\n")  # a gather cut short between its renames
    with pytest.raises(classroom.BadRun, match=r"refused to publish the class results: .*comparison.csv is not "
                                               r"the file of the gather gather.json records; run make class again"):
        pages.class_results(tmp_path, tmp_path / "src")


# ------------------------------------------------------------------------------------------------------
# 3. Numbers from outside are checked like text from outside
# ------------------------------------------------------------------------------------------------------

def _edit(run: Path, chapter: str, table: str, edit) -> None:
    path = run / "data" / chapter / f"{table}.csv"
    frame = pd.read_csv(path)
    edit(frame)
    frame.to_csv(path, index=False)


ABSURD = {
    "bandwidth": ("bandwidth_gb_s", lambda r: _edit(r, "00_machine", "ceilings",
                                                     lambda f: f.__setitem__("bandwidth_gb_s", 1e12)),
                  "1e+12 in row 2 is implausible (GB/s: a bandwidth is above 0.1"),
    "tiny-bandwidth": ("bandwidth_gb_s", lambda r: _edit(r, "00_machine", "ceilings",
                                                          lambda f: f.__setitem__("bandwidth_gb_s", 1e-9)),
                       "1e-09 in row 2 is implausible (GB/s: a bandwidth is above 0.1"),
    "tiny-ttft": ("ttft_ms", lambda r: _edit(r, "01_two_phases", "request_metrics",
                                             lambda f: f.__setitem__("ttft_ms", 1e-6)),
                  "1e-06 in row 2 is implausible (ms: a request's first token takes more than 0.05 ms"),
    "negative-ttft": ("ttft_ms", lambda r: _edit(r, "01_two_phases", "request_metrics",
                                                 lambda f: f.__setitem__("ttft_ms", -5000.0)),
                      "-5000 in row 2 is implausible (ms: a request's first token takes more than 0.05 ms"),
    "infinite-step": ("decode_step_ms", lambda r: _edit(r, "03_decode_sweep", "decode_sweep",
                                                        lambda f: f.__setitem__("step_ms", float("inf"))),
                      "inf in row 2 is not a finite number"),
    "text-in-numbers": ("prefill_tokens_per_s", lambda r: _edit(
        r, "02_prefill_sweep", "prefill_sweep", lambda f: f.__setitem__(
            "tokens_per_s", f.tokens_per_s.astype(object).where(f.index != 1, "fast"))),
        "tokens_per_s holds text ('fast' in row 3) among its numbers"),
    "text-column": ("ttft_ms", lambda r: _edit(r, "01_two_phases", "request_metrics",
                                               lambda f: f.__setitem__("ttft_ms", "fast")),
                    "ttft_ms holds text only ('fast' in row 2), where a run of the book writes numbers"),
    "book-time": ("book_run_s", lambda r: (r / "timings.csv").write_text(
        (r / "timings.csv").read_text().replace("35.57", "1e300")), "add up to 1e+300, implausible"),
}


@pytest.mark.parametrize("case", sorted(ABSURD))
def test_an_absurd_number_is_flagged_not_shown_as_measured(tmp_path, case):
    metric, spoil, said = ABSURD[case]
    run = tmp_path / "student"
    shutil.copytree(EXAMPLES[0], run)
    spoil(run)
    lines = []
    comparison = classroom.gather([run, EXAMPLES[1]], tmp_path / "class", log=lines.append)
    row = comparison.iloc[0]
    assert pd.isna(row[metric]) and row["flagged"] == metric and said in row["flags"], row["flags"]
    assert comparison.iloc[1][metric] > 0 and comparison.iloc[1]["flags"] == ""
    assert len(lines) == 1 and lines[0].startswith((f"{run}: {metric}: ", f"{run}: timings.csv: ")), lines
    assert said in lines[0] and lines[0].endswith("; flagged, not shown as measured")
    sources = pd.read_csv(tmp_path / "class" / "sources.csv")
    if metric != "book_run_s":
        source = sources[(sources.run == "student") & (sources.metric == metric)].source.iloc[0]
        assert source.startswith("flagged: ") and "not measured" not in source
    page = pages.class_page(tmp_path / "class", tmp_path / "src")
    page.write()
    shown = "".join(p.read_text() for p in sorted((tmp_path / "src" / "_fragments").glob("class-*.html")))
    assert "<td>flagged</td>" in shown and pages.breakable(pages.escape(said.split(" (")[0])) in shown


def test_the_same_run_sent_twice_is_flagged(tmp_path):
    copy = classroom.pack(EXAMPLES[0], tmp_path / "again.zip")
    comparison = classroom.gather([EXAMPLES[0], copy], tmp_path / "class", log=lambda _: None)
    flags = comparison["flags"]
    assert flags.iloc[0] == "" and f"the same files as {EXAMPLES[0].name}'s" in flags.iloc[1]


@pytest.mark.parametrize("case, said", [
    ("threads-text", "00_machine/provenance.json: torch_threads is 'lots' (a JSON str); a run of the book writes "
                     "a whole number"),
    ("threads-bool", "torch_threads is True (a JSON bool)"),
    ("cpus-huge", "cpu_count is 1e+300 (a JSON float)"),
    ("quick-text", "quick is 'yes' (a JSON str); a run of the book writes a bool"),
    ("name-huge", "device_name is 100,000 characters long"),
    ("claims-10000", "claims.csv: 10,000 claims, more than the 50"),
    ("claim-twice", "claims.csv: claim 'c' is recorded twice"),
    ("timings-twice", "timings.csv: chapter '00_machine' is timed twice"),
    ("folder-symlink", "a symbolic link in the run"),
    # the hostile pass after d3d7a80
    ("commit-junk", "git_commit is 'not-a-commit'; a run of the book writes a commit's hex digits there"),
    ("date-junk", "date is 'yesterday'; a run of the book writes an ISO date"),
    ("claims-200", "claims.csv: 200 claims, more than the 50"),
    ("no-verdict", "claims.csv: no verdict column"),
    ("verdict-odd", "claims.csv: verdict 'HELD (trust me)' is not one of the book's (held, did not hold, "),
    ("torch-junk", "torch is 'latest'; a run of the book writes a torch version (2.13.0+cpu) there"),
])
def test_a_run_that_is_not_what_the_book_writes_is_one_line_naming_the_file(tmp_path, capsys, case, said):
    run = tmp_path / "student"
    shutil.copytree(EXAMPLES[0], run)
    prov = run / "data" / "00_machine" / "provenance.json"
    record = json.loads(prov.read_text())
    claims = run / "data" / "01_two_phases" / "claims.csv"
    if case.startswith(("threads", "cpus", "quick", "name", "commit", "date", "torch")):
        key, value = {"threads-text": ("torch_threads", "lots"), "threads-bool": ("torch_threads", True),
                      "cpus-huge": ("cpu_count", 1e300), "quick-text": ("quick", "yes"),
                      "name-huge": ("device_name", "x" * 100_000), "commit-junk": ("git_commit", "not-a-commit"),
                      "date-junk": ("date", "yesterday"), "torch-junk": ("torch", "latest")}[case]
        prov.write_text(json.dumps({**record, key: value}))
    elif case in ("claims-10000", "claims-200"):
        n = int(case.split("-")[1])
        pd.DataFrame({"claim": [f"c{i}" for i in range(n)], "verdict": "held"}).to_csv(claims, index=False)
    elif case == "no-verdict":
        pd.DataFrame({"claim": ["c"], "measured": [1]}).to_csv(claims, index=False)
    elif case == "verdict-odd":
        pd.DataFrame({"claim": ["c"], "verdict": ["HELD (trust me)"]}).to_csv(claims, index=False)
    elif case == "claim-twice":
        pd.DataFrame({"claim": ["c", "c"], "verdict": ["held", "held"]}).to_csv(claims, index=False)
    elif case == "timings-twice":
        with open(run / "timings.csv", "a") as f:
            f.write("00_machine,3.0,\n")
    else:
        (run / "data" / "01_two_phases" / "answer_trace.csv").unlink()
        (run / "data" / "01_two_phases" / "answer_trace.csv").symlink_to("/etc/passwd")
    assert classroom.main(["gather", str(run), "--out", str(tmp_path / "out")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"lib.make.classroom: {run}") and said in lines[0], lines


def test_a_run_on_another_torch_is_flagged(tmp_path):
    """The hostile pass after d3d7a80: torch "99.99" was shown like the book's own."""
    run = tmp_path / "student"
    shutil.copytree(EXAMPLES[0], run)
    for prov in (run / "data").glob("*/provenance.json"):
        prov.write_text(json.dumps({**json.loads(prov.read_text()), "torch": "99.99"}))
    lines = []
    comparison = classroom.gather([run, EXAMPLES[1]], tmp_path / "class", log=lines.append)
    said = f"torch: 99.99 is not the torch {classroom.TORCH_PIN} this book pins (pyproject.toml)"
    flags = comparison["flags"]
    assert comparison["flagged"].iloc[0] == "torch" and said in flags.iloc[0], flags.iloc[0]
    assert flags.iloc[1] == "" and len(lines) == 1 and said in lines[0]


@pytest.mark.parametrize("case, said", [
    ("no-provenance", "02_prefill_sweep: left out: no provenance.json, so nothing says which run wrote its tables"),
    ("made-up", "99_fake: left out: no chapter of the book is named 99_fake"),
])
def test_a_chapter_no_run_of_the_book_wrote_is_left_out(tmp_path, case, said):
    """The hostile pass after d3d7a80: a chapter without provenance (its tables used as measured) and a made-up
    chapter (its claims counted) are left out, each with one flag."""
    run = tmp_path / "student"
    shutil.copytree(EXAMPLES[0], run)
    if case == "no-provenance":
        (run / "data" / "02_prefill_sweep" / "provenance.json").unlink()
    else:
        shutil.copytree(run / "data" / "01_two_phases", run / "data" / "99_fake")
    lines = []
    comparison = classroom.gather([run], tmp_path / "class", log=lines.append)
    assert said in comparison["flags"].iloc[0] and len(lines) == 1, lines
    if case == "no-provenance":
        assert pd.isna(comparison.prefill_tokens_per_s.iloc[0])
    else:
        base = classroom.gather([EXAMPLES[0]], tmp_path / "base")
        assert comparison.claims_recorded.iloc[0] == base.claims_recorded.iloc[0]


def test_a_claim_no_chapter_of_the_book_decides_is_left_out_and_flagged(tmp_path):
    """The hostile pass after bbc6bbe (S11): a claims.csv with a made-up claim held was counted and shown as the
    book's."""
    run = tmp_path / "student"
    shutil.copytree(EXAMPLES[0], run)
    path = run / "data" / "01_two_phases" / "claims.csv"
    frame = pd.read_csv(path)
    pd.concat([frame, pd.DataFrame({"claim": ["gpu_beats_every_cpu"], "verdict": ["held"]})]).to_csv(path, index=False)
    lines = []
    comparison = classroom.gather([run], tmp_path / "class", log=lines.append)
    said = "claims.csv: left out: 1 claim(s) no chapter of the book decides ('gpu_beats_every_cpu')"
    assert said in comparison["flags"].iloc[0] and len(lines) == 1 and said in lines[0], lines
    base = classroom.gather([EXAMPLES[0]], tmp_path / "base")
    assert comparison.claims_held.iloc[0] == base.claims_held.iloc[0]
    gathered = pd.read_csv(tmp_path / "class" / "claims.csv")
    assert "gpu_beats_every_cpu" not in set(gathered.claim)
    assert classroom.book_claims("07_over_the_wire").fullmatch("engine_adds_to_ttft_vllm")  # an f-string's id


def test_a_zip_holding_a_file_twice_is_refused(tmp_path):
    """The hostile pass after d3d7a80: the second copy of a file named twice in a zip silently won."""
    with zipfile.ZipFile(tmp_path / "twice.zip", "w") as z:
        z.writestr("data/00_machine/ceilings.csv", "kernel,gb_s\nread,35.2\n")
        with pytest.warns(UserWarning, match="Duplicate name"):
            z.writestr("data/00_machine/ceilings.csv", "kernel,gb_s\nread,45000\n")
    (tmp_path / "scratch").mkdir()
    with pytest.raises(classroom.BadRun, match=r"twice\.zip: holds 'data/00_machine/ceilings\.csv' more than once"):
        classroom.load_run(tmp_path / "twice.zip", tmp_path / "scratch")


def test_a_chapter_holding_another_run_s_table_is_left_out_of_the_comparison(tmp_path):
    run = tmp_path / "student"
    shutil.copytree(EXAMPLES[0], run)
    (run / "data" / "02_prefill_sweep" / "stray.csv").write_text("tokens_per_s\n1\n")
    lines = []
    comparison = classroom.gather([run], tmp_path / "class", log=lines.append)
    assert pd.isna(comparison.prefill_tokens_per_s.iloc[0])
    assert "02_prefill_sweep: left out: it holds stray.csv, which its provenance.json does not list" in \
        comparison["flags"].iloc[0] and len(lines) == 1


# ------------------------------------------------------------------------------------------------------
# The tables a later chapter reads
# ------------------------------------------------------------------------------------------------------

def _written(root: Path, stem: str = "02_demo", rows: int = 12) -> Path:
    run = results.Results(stem, root=root, staged=True)
    run.table(pd.DataFrame({"tokens": range(rows), "ms": [1.5 * i for i in range(rows)]}), "sweep")
    run.finish()
    return root / "data" / stem / "sweep.csv"


def test_a_truncated_or_corrupt_table_is_refused_naming_it_and_what_restores_it(hand):
    quick = hand / "build" / "quick"
    path = _written(quick)
    assert len(results.load_table("02_demo", "sweep", quick=True)) == 12
    text = path.read_bytes()
    path.write_bytes(text[:30])  # cut short (the probe cut one to 300 bytes)
    with pytest.raises(results.CorruptTable) as caught:
        results.load_table("02_demo", "sweep", quick=True)
    line = str(caught.value)
    assert line.startswith(f"{path}: refused: sweep.csv holds 30 bytes where its run wrote {len(text)}")
    assert line.endswith("restore it with: python -m lib.make.book --quick 02") and "\n" not in line
    path.write_bytes(text.replace(b"1.5", b"9.5"))  # same size, other bytes
    with pytest.raises(results.CorruptTable, match="sweep.csv is not the file its run wrote"):
        results.load_table("02_demo", "sweep", quick=True)


def test_a_table_with_fewer_rows_than_its_provenance_records_is_refused(hand):
    path = _written(hand)  # the committed tree: its restore is git's
    prov = path.parent / "provenance.json"
    record = json.loads(prov.read_text())
    record["written"]["data/02_demo/sweep.csv"] = {"rows": 12}  # rows recorded, no digest to compare
    prov.write_text(json.dumps(record))
    path.write_text("tokens,ms\n0,0.0\n")
    with pytest.raises(results.CorruptTable, match=r"sweep.csv has 1 rows where its run wrote 12; restore it with: "
                                                   r"git checkout -- data/02_demo"):
        results.load_table("02_demo", "sweep")


def test_a_table_its_provenance_does_not_list_or_a_link_is_refused(hand):
    path = _written(hand / "build" / "scratch")
    (path.parent / "other.csv").write_text("a\n1\n")
    with pytest.raises(results.CorruptTable, match="other.csv is not among the files its provenance.json lists"):
        results.load_table("02_demo", "other")
    path.unlink()
    path.symlink_to("/etc/passwd")
    with pytest.raises(results.CorruptTable, match="sweep.csv is a symbolic link, never followed"):
        results.load_table("02_demo", "sweep")


def test_provenance_records_each_file_s_size_digest_and_rows(tmp_path):
    path = _written(tmp_path, rows=7)
    record = json.loads((path.parent / "provenance.json").read_text())
    fact = record["written"]["data/02_demo/sweep.csv"]
    assert fact["rows"] == 7 and fact["bytes"] == path.stat().st_size and len(fact["sha256"]) == 64
    assert record["finished"] is True and record["files"] == ["data/02_demo/sweep.csv"]


def test_an_interrupted_hand_swap_makes_publishing_refuse_until_recovered(tmp_path, monkeypatch):
    root = tmp_path / "quick"
    _written(root)
    run = results.Results("02_demo", root=root, staged=True)
    run.table(pd.DataFrame({"tokens": [1]}), "sweep")
    real, calls = os.rename, []

    def killed(src, dst):
        calls.append(src)
        if len(calls) == 2:  # the old folder is aside, the new one not yet in: the process dies
            raise KeyboardInterrupt
        real(src, dst)

    monkeypatch.setattr(os, "rename", killed)
    with pytest.raises(KeyboardInterrupt):
        run.finish()
    monkeypatch.setattr(os, "rename", real)
    assert outputs.unfinished(root) == ["02_demo"]
    with pytest.raises(outputs.Unfinished, match="refused to publish: the outputs of 02_demo"):
        classroom.pack(root, tmp_path / "me.zip")
    outputs.recover(root, log=lambda _: None)
    assert outputs.unfinished(root) == []
    assert pd.read_csv(root / "data" / "02_demo" / "sweep.csv").tokens.tolist() == [1]


# ------------------------------------------------------------------------------------------------------
# 3. Every wait bounded: a slow server stops a chapter within its budget, in one line
# ------------------------------------------------------------------------------------------------------

def _run_against_fake_server(chapter: str, tmp_path: Path, monkeypatch, gap_s: float,
                             model: str = "SmolLM2-135M-Instruct") -> Path:
    """Run ``chapter`` in quick mode with ``base_url`` at a fake server of ``model`` (SmolLM2, the model the
    chapters run, unless told) ``gap_s`` between tokens; return the executed notebook (papermill's error
    propagates)."""
    import jupytext
    import nbformat
    import papermill
    from fake_openai import FakeServer, serve_in_thread

    monkeypatch.setattr(FakeServer, "gap_s", gap_s)
    monkeypatch.setattr(FakeServer, "models", [model])
    monkeypatch.setenv(paths.OUTPUT_ROOT_ENV, str(tmp_path))
    source = jupytext.read(paths.REPO_ROOT / "notebooks" / f"{chapter}.py")
    source.metadata["kernelspec"] = {"name": book.kernel()[0], "display_name": book.kernel()[1], "language": "python"}
    nbformat.write(source, tmp_path / "in.ipynb")
    base, httpd = serve_in_thread()
    try:
        papermill.execute_notebook(str(tmp_path / "in.ipynb"), str(tmp_path / "out.ipynb"),
                                   parameters={"quick": True, "base_url": base}, kernel_name=book.kernel()[0],
                                   cwd=str(paths.REPO_ROOT / "notebooks"), progress_bar=False)
    finally:
        httpd.shutdown()
    return tmp_path / "out.ipynb"


@pytest.mark.slow
def test_chapter_7_against_a_server_3_s_between_tokens_stops_at_its_first_request(tmp_path, monkeypatch):
    """Issue 30: a server with 10 s between tokens kept a quick run silent past 5 minutes. At 3 s a token, the
    first warm-up's second token shows that the chapter's requests cannot fit its 120 s quick budget: the
    chapter stops there, in one line naming the server, its pace and the parameters to change."""
    import papermill

    with pytest.raises(papermill.PapermillExecutionError) as failed:
        _run_against_fake_server("07_over_the_wire", tmp_path, monkeypatch, gap_s=3.0)
    error = failed.value
    assert error.ename == "TooSlow", (error.ename, error.evalue)
    assert "server at http://127.0.0.1:" in error.evalue and " is too slow for this chapter: its first request " \
        "took " in error.evalue
    assert "server_budget_s=120 s are left; make its requests fewer or shorter (" in error.evalue


@pytest.mark.slow
def test_chapter_9_refuses_a_deployment_of_another_model_in_one_line(tmp_path, monkeypatch):
    """The hostile pass after bbc6bbe (S5): chapter 9 replayed and priced a deployment of another model as if it
    were SmolLM2, though its page says another model stops the chapter."""
    import papermill

    with pytest.raises(papermill.PapermillExecutionError) as failed:
        _run_against_fake_server("09_many_requests", tmp_path, monkeypatch, gap_s=0.0, model="Qwen2-0.5B")
    error = failed.value
    assert error.ename == "WrongModel", (error.ename, error.evalue)
    assert " serves 'Qwen2-0.5B', not 'smollm2' or " in error.evalue and "\n" not in error.evalue


@pytest.mark.slow
def test_chapter_9_measures_a_deployment_at_base_url_to_its_last_cell(tmp_path, monkeypatch):
    """The hostile pass after d3d7a80: chapter 9 with any base_url failed at the deployment's stall (a later
    cell had rebound the servers' budgets to the engines' token budgets). Against a fake SmolLM2 server it runs
    to its end and tables the deployment's stall."""
    _run_against_fake_server("09_many_requests", tmp_path, monkeypatch, gap_s=0.05)
    stall = pd.read_csv(tmp_path / "data" / "09_many_requests" / "deployment_stall.csv")
    assert "error" not in stall.columns, stall.to_dict("records")
    assert stall.b_ttft_ms.iloc[0] > 0


def test_make_clean_during_a_hand_run_deletes_nothing_and_names_the_run(tmp_path, capsys):
    """The hostile pass after d3d7a80: make clean during a hand run deleted the run's staging folder, and the run
    then swapped in a chapter folder missing two of the tables its provenance lists. make clean's first step now
    refuses while any run holds a chapter's lock, under the book, build/quick/ or build/scratch/."""
    from lib.runs import ChapterLock

    hand_run = ChapterLock(tmp_path / "build" / "quick", "03_decode_sweep", "a hand run").acquire()
    try:
        assert book.main(["--recover", "--root", str(tmp_path)]) == 3
        said = capsys.readouterr().out
        assert said.startswith("FAILED: 03_decode_sweep: refused: another run of this chapter is writing its outputs ")
        assert "(a hand run, pid " in said and said.rstrip().endswith("make clean deleted nothing")
    finally:
        hand_run.release()
    assert book.main(["--recover", "--root", str(tmp_path)]) == 0  # the run ended: make clean goes on


# ------------------------------------------------------------------------------------------------------
# The hostile pass after bbc6bbe (105 cases): what it found harmful or silent, kept
# ------------------------------------------------------------------------------------------------------

def test_a_chapter_replaced_while_it_is_packed_is_read_again_not_mixed(tmp_path, monkeypatch):
    """Harmful: a hand run that finished while make class-zip read its chapter left one run's tables beside the
    other's provenance in 56 of 4,131 packs, each reported as written. The pack now zips the bytes it checked."""
    root = tmp_path / "book"
    run = results.Results("01_demo", root=root, staged=True)  # a run that records its files' digests
    run.table(pd.DataFrame({"run": [1, 2]}), "a")
    run.finish()
    table = root / "data" / "01_demo" / "a.csv"
    good, reads = table.read_bytes(), []
    real = Path.read_bytes

    def racing(self):  # the first read of the table meets another run's bytes; the run then settles
        content = real(self)
        if self == table and not reads:
            reads.append(1)
            return content + b"another run's row\n"
        return content

    monkeypatch.setattr(Path, "read_bytes", racing)
    packed = zipfile.ZipFile(classroom.pack(root, tmp_path / "me.zip", log=pytest.fail))
    assert reads == [1] and packed.read("data/01_demo/a.csv") == good


def test_the_book_s_committed_run_is_not_sent_as_a_student_s(tmp_path, monkeypatch):
    """Silent: make class-zip after make quick, without QUICK=1, packed the book's committed run and said to send
    it to the teacher."""
    root = tmp_path / "book"
    shutil.copytree(EXAMPLES[0] / "data", root / "data")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", "data"], check=True)
    subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "run"],
                   check=True)
    monkeypatch.setattr(classroom, "REPO_ROOT", root)
    with pytest.raises(ValueError, match=r"holds the book's committed run \(measured on .*\), not a run of this "
                                         r"machine: after make quick, send make class-zip QUICK=1"):
        classroom.pack(root, tmp_path / "me.zip")
    (root / "data" / "01_two_phases" / "answer_trace.csv").write_text("step,ms\n1,2\n")  # a chapter re-run here
    assert classroom._committed_run(root) is None


def test_a_folder_of_two_runs_is_refused_not_read_as_its_first(tmp_path):
    for name in ("alice", "bob"):
        shutil.copytree(EXAMPLES[0] / "data", tmp_path / "two" / name / "data")
    with pytest.raises(classroom.BadRun, match=r"two: holds 2 runs \(alice, bob\); give each folder or zip"):
        classroom.gather([tmp_path / "two"], tmp_path / "class")


def test_a_time_for_a_chapter_the_run_does_not_hold_is_not_added_to_its_book(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(EXAMPLES[0], run)
    timings = pd.read_csv(run / "timings.csv")
    pd.concat([timings, pd.DataFrame({"chapter": ["99_fake"], "seconds": [86000.0]})]).to_csv(run / "timings.csv",
                                                                                              index=False)
    loaded = classroom.load_run(run, tmp_path)
    assert "99_fake" not in set(loaded.timings.chapter)
    assert any("left out of the book's time: 99_fake" in f for f in loaded.flags), loaded.flags


@pytest.mark.parametrize("field, value, message", [
    ("torch_threads", 100000, r"torch_threads is 100000 on a machine whose cpu_count is \d+"),
    ("date", "9999-12-31T00:00:00+00:00", r"date is '9999-12-31.*', after today"),
])
def test_a_provenance_no_run_could_write_is_refused(tmp_path, field, value, message):
    run = tmp_path / "run"
    shutil.copytree(EXAMPLES[0], run)
    prov = run / "data" / "01_two_phases" / "provenance.json"
    record = json.loads(prov.read_text())
    record[field] = value
    prov.write_text(json.dumps(record))
    with pytest.raises(classroom.BadRun, match=message):
        classroom.load_run(run, tmp_path)


def test_a_cpu_s_bandwidth_above_any_cpu_s_is_flagged():
    values = pd.Series([15000.0])
    assert classroom._plausible("bandwidth_gb_s", values) is None, "a GPU's HBM could"
    assert "on a CPU: at most 2,000" in classroom._plausible("bandwidth_gb_s", values, on_cpu=True)


def test_a_run_name_with_a_space_split_by_make_says_so(tmp_path):
    zipped = tmp_path / "Alice Smith.zip"
    shutil.copy(classroom.pack(EXAMPLES[0], tmp_path / "a.zip"), zipped)
    with pytest.raises(classroom.BadRun, match=r"Alice: no such file or folder, but '.*Alice Smith.zip' is: a name "
                                               r"with a space reaches make class in pieces"):
        classroom.gather([tmp_path / "Alice", Path("Smith.zip")], tmp_path / "class")


def test_make_lab_s_record_that_is_a_folder_is_one_line(tmp_path):
    folder = tmp_path / "copies"
    (folder / lab.STATE).mkdir(parents=True)
    with pytest.raises(RuntimeError, match=r"is not a file but a folder, where make lab keeps its record"):
        lab._prepare(paths.REPO_ROOT, folder, print)


def test_a_chapter_never_reads_two_runs_of_an_earlier_one(hand):
    """Harmful: chapter 6 read three tables of one run of chapter 3 and two of the next, which finished between its
    reads, and said nothing. A run now pins the run it first read of each chapter and refuses a table of another."""
    def run_of(value):  # chapter 3 run by another process, as make quick or a second kernel runs it
        code = ("import pandas as pd\nfrom lib import results\n"
                f"r = results.Results('03_x', root={str(hand / 'build' / 'quick')!r}, quick=True, staged=True)\n"
                f"r.table(pd.DataFrame({{'v': [{value}]}}), 'a')\nr.table(pd.DataFrame({{'v': [{value}]}}), 'b')\n"
                "r.finish()\n")
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=120)

    run_of(1)
    results.Results("06_y", root=hand / "build" / "quick" / "elsewhere", quick=True)  # a new run: nothing pinned
    assert results.load_table("03_x", "a", quick=True)["v"].tolist() == [1]
    run_of(2)  # chapter 3 finishes again between two reads
    with pytest.raises(results.CorruptTable, match=r"chapter 03_x was replaced by another run while this one read its "
                                                   r"tables .*; run this chapter again"):
        results.load_table("03_x", "b", quick=True)
    results.Results("06_y", root=hand / "build" / "quick" / "elsewhere", quick=True)  # run again: reads the new run
    assert results.load_table("03_x", "b", quick=True)["v"].tolist() == [2]
