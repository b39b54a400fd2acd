"""The build on a small demo book: incremental, all-or-nothing, locked, and every failure one clear line
(issue 13, items 1, 2 and 7; issue 12, item 1; issue 8, item 7)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import nbformat
import pandas as pd
import pytest

from lib.make import book, outputs, staleness
from lib.paths import REPO_ROOT
from processes import alive

GOOD = '''# %% tags=["parameters"]
quick = False
value = 1
sizes = [1, 2]

# %%
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from lib import params
from lib.results import Results

P = params.check(globals(), {"value": params.integer(min=0), "sizes": params.int_list(min=1)})
r = Results("01_demo", quick=quick, params=P)
r.table(pd.DataFrame({"value": [value]}), "v")
fig, ax = plt.subplots()
r.figure(fig, "f")
'''


def with_cell(code: str, value: int = 5) -> str:
    return GOOD.replace("value = 1", f"value = {value}") + f"\n# %%\n{code}\n"


@pytest.fixture()
def demo(tmp_path, monkeypatch):
    # the real library changes under concurrent edits; the demo book's builds must not see that
    monkeypatch.setattr(staleness, "library_digest", lambda source: "fixed library")
    (tmp_path / "notebooks").mkdir()
    source = tmp_path / "notebooks" / "01_demo.py"
    source.write_text(GOOD)
    return tmp_path, source


def table(root):
    return (root / "data" / "01_demo" / "v.csv").read_text().splitlines()


def snapshot(root):
    """Every committed output file of the demo chapter and its bytes."""
    files = [p for kind in ("data", "figures") for p in (root / kind).rglob("*") if p.is_file()]
    files.append(root / "notebooks" / "01_demo.ipynb")
    return {str(p.relative_to(root)): p.read_bytes() for p in files}


#: The demo book as one build of GOOD left it (filled by the first :func:`built` of this module's run).
BUILT: dict[str, object] = {}


@pytest.fixture(scope="module", autouse=True)
def _built_once(tmp_path_factory):
    BUILT["dir"] = tmp_path_factory.mktemp("built-demo") / "book"
    yield
    BUILT.clear()


def built(demo):
    """The demo book built from GOOD, as a test's starting point: the module's first call builds it; the others
    copy that build's tree in, which a build then finds up to date (checked here), so a test that takes a build
    apart starts from a real one without paying a kernel of its own for it."""
    root, source = demo
    template = BUILT["dir"]
    assert source.read_text() == GOOD, "built() starts from GOOD"
    if template.exists():
        shutil.copytree(template, root, symlinks=True, dirs_exist_ok=True)
        logs = []
        assert book.build(root=root, log=logs.append) == 0 and logs[-1] == "01_demo: up to date"
    else:
        assert book.build(root=root, log=lambda _: None) == 0
        shutil.copytree(root, template, symlinks=True)
    return snapshot(root)


def test_build_then_skip_then_rebuild(demo):
    root, source = demo
    logs = []
    assert book.build(root=root, log=logs.append) == 0
    assert logs[0].startswith("building with torch ") and "CUDA" in logs[0] and "device cpu" in logs[0]
    executed = root / "notebooks" / "01_demo.ipynb"
    assert table(root) == ["value", "1"]
    assert staleness.recorded_hash(executed) == staleness.input_hash(source, None)
    cells = nbformat.read(executed, as_version=4).cells
    assert not any("papermill" in c.metadata or "execution" in c.metadata for c in cells)
    timings = pd.read_csv(root / "build" / "logs" / "01_demo.cells.csv")  # where the chapter spent its time
    assert len(timings) == sum(c.cell_type == "code" for c in cells) and (timings.seconds >= 0).all()
    assert timings.first_line.iloc[0] == "quick = False"
    assert not (root / "build" / "staging" / "01_demo").exists()
    assert not list(root.glob("*/.*.book-*")) and not list((root / "build" / "journal").glob("*"))
    machine = nbformat.read(executed, as_version=4).metadata[staleness.HASH_KEY]["environment"]["machine"]
    assert machine["cpu"] and machine["cpu_count"] >= 1 and isinstance(machine["cpu_flags"], str)

    assert book.build(root=root, log=logs.append) == 0
    assert logs[-1] == "01_demo: up to date"

    source.write_text(GOOD.replace("value = 1", "value = 2"))
    assert book.build(root=root, log=logs.append) == 0
    assert "executed" in logs[-1] and "inputs changed" in logs[-2]
    assert table(root) == ["value", "2"]


def test_provenance_records_the_parameter_cells_and_a_real_commit(demo):
    root, _ = demo
    assert book.build(root=root, device="cpu", log=lambda _: None) == 0
    record = json.loads((root / "data" / "01_demo" / "provenance.json").read_text())
    assert record["parameters"] == {"quick": False, "value": 1, "sizes": [1, 2], "device": "cpu"}
    assert record["parameters_injected"] == ["device"]
    assert record["parameters_used"] == {"value": 1, "sizes": [1, 2]}  # as lib.params checked them
    found = subprocess.run(["git", "cat-file", "-t", record["git_commit"]], cwd=REPO_ROOT,
                           capture_output=True, text=True).stdout.strip()
    assert found == "commit" and isinstance(record["git_dirty"], list)


def test_changed_committed_outputs_make_the_chapter_rerun(demo):
    root, _ = demo
    built(demo)
    (root / "data" / "01_demo" / "v.csv").write_text("value\n99\n")  # a hand run into data/, say
    logs = []
    assert book.build(root=root, log=logs.append) == 0
    assert "committed outputs differ" in logs[-2] and "data/01_demo/v.csv" in logs[-2]
    assert table(root) == ["value", "1"]
    (root / "figures" / "01_demo" / "f.png").unlink()
    assert book.build(root=root, log=logs.append) == 0
    assert "figures/01_demo/f.png" in logs[-2] and (root / "figures" / "01_demo" / "f.png").exists()


@pytest.mark.parametrize("code, what", [
    ('raise RuntimeError("boom in the last cell")', "RuntimeError: boom in the last cell"),
    ("import os\nos._exit(1)", "the kernel died"),
    ('raise OSError(28, "No space left on device")', "OSError: [Errno 28] No space left on device"),
    ('raise PermissionError(13, "Read-only file system")', "PermissionError: [Errno 13] Read-only file"),
], ids=["cell-error", "dead-kernel", "full-disk-in-cell", "read-only-in-cell"])
def test_every_failure_is_one_line_naming_chapter_cell_and_cause_and_keeps_outputs(demo, code, what):
    root, source = demo
    before = built(demo)
    source.write_text(with_cell(code))
    logs = []
    assert book.build(root=root, log=logs.append) == 1
    line = logs[-1]
    assert line.startswith("FAILED: 01_demo failed in cell 3 of 3: ") and what in line, line
    assert "previous outputs of 01_demo were kept" in line and "\n" not in line
    log = root / "build" / "logs" / "01_demo.log"
    assert f"details in {log}" in line and "Traceback" in log.read_text() or "Error" in log.read_text()
    assert snapshot(root) == before  # wholly old
    assert (root / "build" / "staging" / "01_demo" / "data" / "01_demo" / "v.csv").exists()


def test_interrupt_during_a_cell_is_one_line_and_keeps_outputs(demo):
    root, source = demo
    before = built(demo)
    marker = root / "in-the-cell"
    source.write_text(with_cell(f"import pathlib, time\npathlib.Path({str(marker)!r}).touch()\ntime.sleep(60)"))
    # A shell starts a background job with Ctrl-C ignored, and a child inherits that: give the build a terminal's.
    build = subprocess.Popen([sys.executable, "-m", "lib.make.book", "--root", str(root)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while not marker.exists() and build.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    while build.poll() is None and time.monotonic() < deadline:  # Ctrl-C from the terminal, as a reader presses it
        build.send_signal(signal.SIGINT)
        time.sleep(2)
    stdout, stderr = build.communicate(timeout=30)
    run = subprocess.CompletedProcess(build.args, build.returncode, stdout, stderr)
    assert marker.exists() and run.returncode == 130, run.stdout + run.stderr
    lines = [line for line in run.stdout.splitlines() if line.startswith("FAILED")]
    assert len(lines) == 1 and "01_demo failed in cell 3 of 3: interrupted (Ctrl-C)" in lines[0]
    assert "Traceback" not in run.stdout + run.stderr
    assert snapshot(root) == before


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"), PermissionError(13, "Permission denied")],
                         ids=["full-disk", "read-only-figures"])
def test_a_failed_move_into_place_keeps_the_old_outputs(demo, monkeypatch, error):
    root, source = demo
    before = built(demo)
    source.write_text(GOOD.replace("value = 1", "value = 7"))
    real = shutil.move

    def move(a, b):  # root ignores file modes, so the read-only folder or full disk is simulated
        if "figures" in str(b):
            raise error
        return real(a, b)

    monkeypatch.setattr(shutil, "move", move)
    logs = []
    assert book.build(root=root, log=logs.append) == 1
    monkeypatch.setattr(shutil, "move", real)
    assert logs[-1].startswith("FAILED: 01_demo failed in replacing its outputs: ")
    assert error.strerror in logs[-1] and "previous outputs of 01_demo were kept" in logs[-1]
    assert snapshot(root) == before and not list(root.glob("*/.*.book-*"))
    assert book.build(root=root, log=logs.append) == 0 and table(root) == ["value", "7"]


@pytest.mark.parametrize("failures, kept", [(1, True), (2, False)], ids=["swap-undone", "undo-fails-too"])
def test_a_failed_swap_is_undone_or_left_for_the_next_build(demo, monkeypatch, failures, kept):
    root, source = demo
    before = built(demo)
    source.write_text(GOOD.replace("value = 1", "value = 6"))
    real, seen = os.rename, []

    def rename(a, b):
        if str(b).endswith(os.path.join("figures", "01_demo")) and len(seen) < failures:
            seen.append(b)
            raise PermissionError(13, "Permission denied")
        return real(a, b)

    monkeypatch.setattr(os, "rename", rename)
    logs = []
    assert book.build(root=root, log=logs.append) == 1
    monkeypatch.setattr(os, "rename", real)
    assert ("previous outputs of 01_demo were kept" in logs[-1]) == kept
    if kept:
        assert snapshot(root) == before and not list(root.glob("*/.*.book-*"))
    else:
        assert "putting the old outputs back failed too" in logs[-1] and "build/journal/01_demo.json" in logs[-1]
        book.recover(root, log=logs.append)  # the next build's first step: the chapter is wholly new
        assert "completed the replacement" in logs[-1] and staleness.stale_reason(
            source, root, staleness.input_hash(source, None)) is None and table(root) == ["value", "6"]
    assert book.build(root=root, log=logs.append) == 0 and table(root) == ["value", "6"]
    assert not list(root.glob("*/.*.book-*")) and not list((root / "build" / "journal").glob("*"))


class Killed(BaseException):
    """Stands for SIGKILL or a power cut: nothing in the build can catch it."""


def _crash_in_the_swap(root, monkeypatch, renames: int = 1):
    """Run a build that dies after ``renames`` renames of the swap; leave its journal."""
    real, forward = os.rename, outputs._roll_forward

    def killed_forward(*args):
        count = []

        def rename(a, b):
            if len(count) == renames:
                raise Killed
            count.append(1)
            real(a, b)
        monkeypatch.setattr(os, "rename", rename)
        try:
            forward(*args)
        finally:
            monkeypatch.setattr(os, "rename", real)

    monkeypatch.setattr(outputs, "_roll_forward", killed_forward)
    with pytest.raises(Killed):
        book.build(root=root, log=lambda _: None)
    monkeypatch.setattr(outputs, "_roll_forward", forward)


@pytest.mark.parametrize("renames", [1, 2, 3, 5])
def test_a_replacement_killed_half_way_is_completed_by_the_next_build(demo, monkeypatch, renames):
    root, source = demo
    built(demo)
    source.write_text(GOOD.replace("value = 1", "value = 8"))
    _crash_in_the_swap(root, monkeypatch, renames)
    assert (root / "build" / "journal" / "01_demo.json").exists()
    logs = []
    assert book.build(root=root, log=logs.append) == 0
    assert "completed the replacement" in logs[1]
    assert logs[-1] == "01_demo: up to date"  # wholly new, and matching its manifest
    assert table(root) == ["value", "8"] and not list(root.glob("*/.*.book-*"))


def test_interrupt_while_replacing_is_held_back_until_the_swap_is_done(demo, monkeypatch):
    root, source = demo
    built(demo)
    source.write_text(GOOD.replace("value = 1", "value = 9"))
    forward = outputs._roll_forward

    def interrupted_forward(*args):
        os.kill(os.getpid(), 2)  # Ctrl-C arrives in the middle of the swap
        forward(*args)

    monkeypatch.setattr(outputs, "_roll_forward", interrupted_forward)
    logs = []
    assert book.build(root=root, log=logs.append) == 130
    assert "interrupted" in logs[-1] and table(root) == ["value", "9"]  # the swap finished first
    monkeypatch.setattr(outputs, "_roll_forward", forward)
    assert book.build(root=root, log=logs.append) == 0 and logs[-1] == "01_demo: up to date"


def test_strays_of_a_build_killed_before_its_journal_are_cleaned(demo):
    root, _ = demo
    before = built(demo)
    (root / "data" / ".01_demo.book-new").mkdir()
    (root / "figures" / "01_demo").rename(root / "figures" / ".01_demo.book-old")
    assert book.main(["--recover", "--root", str(root)]) == 0  # what make clean runs first
    assert snapshot(root) == before and not list(root.glob("*/.*.book-*"))


def test_a_second_build_in_the_same_checkout_is_refused(demo):
    root, _ = demo
    logs = []
    with book.build_lock(root):
        assert book.build(root=root, log=logs.append) == 3
    assert logs[-1].startswith("FAILED: another build is already running in this checkout (pid ")
    assert book.build(root=root, log=logs.append) == 0  # released


def test_two_real_builds_at_once_one_refused_nothing_mixed(demo):
    root, source = demo
    release = root / "release"  # the first build's last cell waits for it: no timing assumed
    source.write_text(with_cell(f"import pathlib, time\nwhile not pathlib.Path({str(release)!r}).exists():\n"
                                f"    time.sleep(0.1)", value=3))
    command = [sys.executable, "-m", "lib.make.book", "--root", str(root)]
    first = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        lock = root / "build" / "book.lock"
        for _ in range(1200):  # the first build has taken the lock when it wrote its pid there
            if lock.exists() and lock.read_text().startswith("pid"):
                break
            time.sleep(0.1)
        second = subprocess.run(command, capture_output=True, text=True, timeout=300)
    finally:
        release.write_text("")
        out, _ = first.communicate(timeout=300)
    assert first.returncode == 0, out
    assert second.returncode == 3 and "another build is already running in this checkout (pid" in second.stdout
    assert table(root) == ["value", "3"]


def test_an_unwritable_build_folder_is_one_line(demo):
    root, _ = demo
    (root / "build").write_text("a file where the build folder should be")
    logs = []
    assert book.build(root=root, log=logs.append) == 1
    assert logs[-1].startswith(f"FAILED: the build cannot write under {root / 'build'} (") and "kept" in logs[-1]


def test_quick_mode_writes_under_build_quick_only(demo):
    """...and a quick chapter reads the quick data of the chapters before it (it runs in a staging folder
    that holds a copy of them)."""
    root, _ = demo
    reader = root / "notebooks" / "02_reader.py"
    reader.write_text('# %% tags=["parameters"]\nquick = False\n\n# %%\nfrom lib.results import Results, load_table\n'
                      'seen = load_table("01_demo", "v", quick=quick)\n'
                      'Results("02_reader", quick=quick).table(seen, "seen")\n')
    assert book.build(root=root, quick=True, log=lambda _: None) == 0
    quick = root / "build" / "quick"
    assert (quick / "data" / "01_demo" / "v.csv").exists()
    executed = nbformat.read(quick / "notebooks" / "01_demo.ipynb", as_version=4)
    assert any("injected-parameters" in c.metadata.get("tags", []) for c in executed.cells)
    assert not (root / "data").exists() and not (root / "notebooks" / "01_demo.ipynb").exists()
    assert (quick / "data" / "02_reader" / "seen.csv").read_text().splitlines() == ["value", "1"]
    assert sorted(p.name for p in (quick / "data").iterdir()) == ["01_demo", "02_reader"]
    assert not (root / "build" / "staging-quick" / "02_reader").exists()


def test_a_chapter_writing_another_sections_outputs_fails_clearly(demo):
    root, source = demo
    source.write_text(GOOD.replace('Results("01_demo"', 'Results("02_other"'))
    logs = []
    assert book.build(root=root, log=logs.append) == 1
    assert "it wrote outputs for 02_other; Results(...) must be named '01_demo'" in logs[-1]
    assert not (root / "data" / "02_other").exists()


def test_unknown_selection_and_device(demo):
    root, _ = demo
    logs = []
    assert book.build(root=root, only=["42"], log=logs.append) == 2
    assert "notebooks are: 01_demo" in logs[-1]
    assert book.build(root=root, device="tpu", log=logs.append) == 2  # the probe's one line, before any work
    assert logs[-1] == "FAILED: make book: unknown device 'tpu'; choose one of auto, cpu, cuda, cuda:N"


def test_a_chapter_reruns_when_the_data_it_reads_changes(demo):
    root, source = demo
    reader = root / "notebooks" / "02_reader.py"
    reader.write_text('# %% tags=["parameters"]\nquick = False\n\n# %%\nfrom lib.results import load_table\n'
                      'print("reads 01_demo")\n')
    logs = []
    assert book.build(root=root, log=logs.append) == 0
    assert staleness.upstream_data(reader) == [root / "data" / "01_demo" / "v.csv"]
    assert book.build(root=root, log=logs.append) == 0
    assert logs[-2:] == ["01_demo: up to date", "02_reader: up to date"]
    (root / "data" / "reference").mkdir()
    (root / "data" / "reference" / "published_run.csv").write_text("x\n1\n")
    assert staleness.upstream_data(reader)[-1:] == [root / "data" / "01_demo" / "v.csv"], "not named: not read"
    reader.write_text(reader.read_text() + '# compare with load_reference("published_run")\n')
    assert staleness.upstream_data(reader)[-1] == root / "data" / "reference" / "published_run.csv"
    source.write_text(GOOD.replace("value = 1", "value = 3"))
    assert book.build(root=root, log=logs.append) == 0
    assert "executed" in logs[-1], "02_reader reads 01_demo's data, which changed"


def test_a_quick_run_runs_first_the_quick_chapters_it_reads_that_are_missing(demo):
    """The hostile pass of 2026-12-05: a quick chapter 5 with no quick chapter 2 read the committed full run's
    GPT-2 prices for its tiny model. Now a quick run reads only quick runs, and --quick runs what it reads first."""
    root, source = demo
    reader = root / "notebooks" / "02_reader.py"
    reader.write_text('# %% tags=["parameters"]\nquick = False\n\n# %%\nfrom lib.results import load_table\n'
                      'assert load_table("01_demo", "v", quick=quick) is not None\n')
    logs = []
    assert book.build(quick=True, only=["02"], root=root, log=logs.append) == 0, logs
    assert "02_reader reads 01_demo, which has no quick run in build/quick/: running it first" in logs
    assert [line.split(":")[0] for line in logs if ": quick run in " in line] == ["01_demo", "02_reader"]
    logs.clear()
    assert book.build(quick=True, only=["02"], root=root, log=logs.append) == 0
    assert [line.split(":")[0] for line in logs if ": quick run in " in line] == ["02_reader"], "01_demo's is there"


# ------------------------------------------------------------------------------------------------------
# The build trusts only what it wrote (issue 20, item 2)
# ------------------------------------------------------------------------------------------------------

def test_sigterm_is_one_failed_line_and_stops_the_kernel(demo):
    root, source = demo
    before = built(demo)
    pid_file = root / "kernel.pid"
    source.write_text(with_cell(f"import os, signal, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
                                f"os.kill(os.getppid(), signal.SIGTERM)\ntime.sleep(60)"))
    run = subprocess.run([sys.executable, "-m", "lib.make.book", "--root", str(root)], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 143, run.stdout + run.stderr
    lines = [line for line in run.stdout.splitlines() if line.startswith("FAILED")]
    assert len(lines) == 1 and "01_demo failed in cell 3 of 3: terminated (SIGTERM)" in lines[0], run.stdout
    assert "previous outputs of 01_demo were kept" in lines[0] and "Traceback" not in run.stdout + run.stderr
    assert snapshot(root) == before
    kernel = int(pid_file.read_text())
    deadline = time.monotonic() + 30  # the kernel sleeps 60 s: only a kill ends it sooner
    while alive(kernel) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(kernel), "the kernel outlived the terminated build"


def test_a_journal_the_build_did_not_write_is_refused_and_left_alone(demo):
    root, source = demo
    built(demo)
    reference = root / "data" / "reference"
    reference.mkdir()
    (reference / "published.csv").write_text("x\n1\n")
    before = snapshot(root)
    journal = root / "build" / "journal"
    journal.mkdir(parents=True, exist_ok=True)
    (journal / "reference.json").write_text('{"state": "swap", "with_new": []}')  # the example
    (journal / "01_demo.json").write_text(json.dumps({"chapter": "01_demo", "state": "swap", "with_new": [],
                                                      "digests": {}, "signature": "0" * 64}))
    logs = []
    assert outputs.recover(root, log=logs.append) == ["01_demo", "reference"]
    assert len(logs) == 2 and all("not a journal this build wrote" in line and "left alone" in line for line in logs)
    assert "signature is not this build's" in logs[0] and "not a chapter's name" in logs[1]
    assert (reference / "published.csv").read_text() == "x\n1\n" and snapshot(root) == before
    assert book.main(["--recover", "--root", str(root)]) == 0  # make clean's first step: nothing deleted
    assert (reference / "published.csv").exists() and snapshot(root) == before
    assert outputs.unfinished(root) == ["01_demo", "reference"]
    with pytest.raises(outputs.Unfinished, match=r"^refused to publish: .*01_demo, reference.*make clean.*--recover"
                                                 r".*not written by the build"):
        outputs.check_finished(root, "make html")
    source.write_text(GOOD.replace("value = 1", "value = 4"))  # a chapter that must re-run cannot, until it is gone
    assert book.build(root=root, log=logs.append) == 1
    assert logs[-1].startswith("FAILED: 01_demo failed before its first cell: ") and "left alone" in logs[-1]
    assert snapshot(root) == before
    (journal / "01_demo.json").unlink()
    assert book.build(root=root, log=logs.append) == 0 and table(root) == ["value", "4"]


def test_a_signed_journal_is_trusted_only_unchanged_with_its_own_key_and_content(demo, monkeypatch):
    root, source = demo
    built(demo)
    source.write_text(GOOD.replace("value = 1", "value = 8"))
    _crash_in_the_swap(root, monkeypatch)
    record = json.loads((root / "build" / "journal" / "01_demo.json").read_text())
    assert set(record["with_new"]) == {"data/01_demo", "figures/01_demo", "notebooks/01_demo.ipynb"}
    for forgery in ("edited", "other-key", "swapped-content"):
        copy = root.parent / forgery
        shutil.copytree(root, copy)
        journal = copy / "build" / "journal" / "01_demo.json"
        if forgery == "edited":
            journal.write_text(json.dumps({**record, "with_new": record["with_new"][:1]}))
        elif forgery == "other-key":
            (copy / "build" / "journal.key").write_text("another checkout's key")
        else:
            (copy / "figures" / ".01_demo.book-new" / "f.png").write_bytes(b"not the figure the build made")
        sides = sorted(str(p.relative_to(copy)) for p in copy.glob("*/.*.book-*"))
        logs = []
        assert outputs.recover(copy, log=logs.append) == ["01_demo"], forgery
        assert len(logs) == 1 and "left alone" in logs[0], (forgery, logs)
        assert sorted(str(p.relative_to(copy)) for p in copy.glob("*/.*.book-*")) == sides, forgery  # untouched
        assert outputs.unfinished(copy) == ["01_demo"]
        assert book.main(["--recover", "--root", str(copy)]) == 4  # make clean stops before deleting the journal
        assert sorted(str(p.relative_to(copy)) for p in copy.glob("*/.*.book-*")) == sides
    logs = []
    outputs.recover(root, log=logs.append)  # the journal as the build wrote it: finished
    assert "completed the replacement" in logs[0] and table(root) == ["value", "8"]


def test_publishing_is_refused_while_a_replacement_is_unfinished(demo, monkeypatch):
    root, source = demo
    built(demo)
    assert outputs.unfinished(root) == []
    outputs.check_finished(root, "make html")  # a whole chapter: nothing to say
    source.write_text(GOOD.replace("value = 1", "value = 8"))
    _crash_in_the_swap(root, monkeypatch)
    assert outputs.unfinished(root) == ["01_demo"]
    with pytest.raises(outputs.Unfinished) as refused:
        outputs.check_finished(root, "make student")
    line = str(refused.value)
    assert line.startswith("refused to publish: the outputs of 01_demo under ") and "\n" not in line
    assert "`make clean` or `python -m lib.make.book --recover`, then run make student again" in line
    assert "not written" not in line
    assert book.main(["--recover", "--root", str(root)]) == 0
    assert outputs.unfinished(root) == [] and table(root) == ["value", "8"]
    outputs.check_finished(root, "make student")


def test_an_old_copy_that_cannot_be_removed_is_no_false_kept_and_blocks_no_later_build(demo, monkeypatch):
    """An immutable file inside an output folder: the swap succeeds, the old copy cannot be deleted."""
    root, source = demo
    built(demo)
    source.write_text(GOOD.replace("value = 1", "value = 5"))
    real = shutil.rmtree

    def rmtree(path, *args, **kwargs):  # root ignores file modes: chattr +i is simulated
        if ".book-old" in str(path) or ".book-trash" in str(path):
            raise PermissionError(1, "Operation not permitted", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", rmtree)
    logs = []
    assert book.build(root=root, log=logs.append) == 0
    assert table(root) == ["value", "5"] and not any("kept" in line for line in logs)
    notes = [line for line in logs if "could not be removed" in line]
    assert notes and all("outputs are whole" in line and "remove it by hand" in line for line in notes)
    assert outputs.unfinished(root) == [] and not (root / "build" / "journal" / "01_demo.json").exists()
    source.write_text(GOOD.replace("value = 1", "value = 6"))  # later builds and make clean still work
    assert book.build(root=root, log=logs.append) == 0 and table(root) == ["value", "6"]
    assert book.main(["--recover", "--root", str(root)]) == 0
    monkeypatch.setattr(shutil, "rmtree", real)
    assert book.main(["--recover", "--root", str(root)]) == 0 and not list(root.glob("*/.*.book-*"))


QUICK_FAILS = '''
# %%
import pathlib
if quick and pathlib.Path({flag!r}).exists():
    raise RuntimeError("half way")
r.table(pd.DataFrame({{"after": [value]}}), "w")
'''


def test_quick_mode_replaces_a_chapter_as_one_unit(demo):
    root, source = demo
    flag = root / "fail"
    source.write_text(GOOD + QUICK_FAILS.format(flag=str(flag)))
    assert book.build(root=root, quick=True, log=lambda _: None) == 0
    quick = root / "build" / "quick"
    files = {str(p.relative_to(quick)): p.read_bytes() for p in quick.rglob("*") if p.is_file()
             and "journal" not in p.parts}
    assert {"data/01_demo/v.csv", "data/01_demo/w.csv", "notebooks/01_demo.ipynb"} <= set(files)
    source.write_text(GOOD.replace("value = 1", "value = 2") + QUICK_FAILS.format(flag=str(flag)))
    flag.write_text("")  # v.csv is written, then the chapter fails before w.csv
    logs = []
    assert book.build(root=root, quick=True, log=logs.append) == 1
    assert "previous outputs of 01_demo were kept" in logs[-1] and "RuntimeError: half way" in logs[-1]
    assert {str(p.relative_to(quick)): p.read_bytes() for p in quick.rglob("*") if p.is_file()
            and "journal" not in p.parts} == files  # wholly old: v.csv is not the new one
    flag.unlink()
    assert book.build(root=root, quick=True, log=logs.append) == 0
    assert (quick / "data" / "01_demo" / "v.csv").read_text().splitlines() == ["value", "2"]


def test_the_build_process_never_imports_torch(demo):
    root, _ = demo
    code = ("import sys\nfrom pathlib import Path\nfrom lib.make import book, staleness\n"
            "staleness.library_digest = lambda source: 'fixed library'\n"
            f"status = book.build(root=Path({str(root)!r}), log=lambda _: None)\n"
            "print(status, 'torch' in sys.modules)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert run.stdout.split() == ["0", "False"], run.stdout + run.stderr


def test_outputs_from_another_machine_of_the_same_name_are_re_run(demo, monkeypatch):
    root, _ = demo
    built(demo)
    here = staleness.run_environment(None)
    flags = "avx avx2 f16c fma" if here["machine"]["cpu_flags"] != "avx avx2 f16c fma" else "avx avx2 avx512f f16c fma"
    other = {**here, "machine": {**here["machine"], "cpu_flags": flags}}  # the same name, other instruction sets
    monkeypatch.setattr(book, "run_environment", lambda device: other)
    logs = []
    assert book.build(root=root, log=logs.append) == 0
    assert logs[-2].startswith("01_demo: running (its outputs came from another machine (cpu_flags: ")
    assert f"-> {flags})" in logs[-2]
    assert book.build(root=root, log=logs.append) == 0 and logs[-1] == "01_demo: up to date"


def test_a_replacement_killed_after_the_notebook_was_swapped_in_is_still_its_own(demo, monkeypatch):
    """The journal's digests hold for a new version whether it still waits beside its output or is in."""
    root, source = demo
    built(demo)
    source.write_text(GOOD.replace("value = 1", "value = 8"))
    real, forward = os.rename, outputs._roll_forward

    def killed_after_the_notebook(*args):
        def rename(a, b):
            real(a, b)
            if str(b).endswith("01_demo.ipynb"):
                raise Killed
        monkeypatch.setattr(os, "rename", rename)
        try:
            forward(*args)
        finally:
            monkeypatch.setattr(os, "rename", real)

    monkeypatch.setattr(outputs, "_roll_forward", killed_after_the_notebook)
    with pytest.raises(Killed):
        book.build(root=root, log=lambda _: None)
    monkeypatch.setattr(outputs, "_roll_forward", forward)
    logs = []
    assert outputs.recover(root, log=logs.append) == [] and "completed the replacement" in logs[0]
    assert table(root) == ["value", "8"] and outputs.unfinished(root) == []


def test_a_long_chapter_says_every_so_often_which_cell_it_is_in(demo, monkeypatch):
    """A wait is never silent: while a cell runs, the build prints a line naming the chapter and the cell."""
    root, source = demo
    source.write_text(with_cell("import time\ntime.sleep(2.5)"))
    monkeypatch.setattr(book, "HEARTBEAT_S", 1.0)
    logs = []
    assert book.build(root=root, log=logs.append) == 0
    beats = [line for line in logs if "still running" in line]
    assert beats and all(line.startswith("01_demo: still running after ") for line in beats), logs
    assert any(line.endswith("cell 3 of 3") for line in beats), beats  # the sleeping cell, counted as written
    assert logs[-1].startswith("01_demo: executed in ")
