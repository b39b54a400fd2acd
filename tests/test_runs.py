"""lib.runs: one run of a chapter at a time into a folder, swapped in as one unit, and the check that a chapter's
folder holds one run's files (issue 30, item 1)."""

import json
import os
import subprocess
import sys

import pytest

from lib import runs

STEM = "06_demo"


def _folder(root, kind, files: dict[str, str]):
    folder = root / kind / STEM
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def _provenance(folder, names, written=None):
    record = {"files": [f"data/{STEM}/{n}" for n in names]}
    if written is not None:
        record["written"] = {f"data/{STEM}/{n}": v for n, v in written.items()}
    (folder / "provenance.json").write_text(json.dumps(record))


def test_a_second_run_of_the_chapter_is_refused_in_one_line_naming_the_first(tmp_path):
    with runs.ChapterLock(tmp_path, STEM, "make quick"):
        with pytest.raises(runs.RunBusy) as caught:
            runs.ChapterLock(tmp_path, STEM, "a hand run").acquire()
        line = str(caught.value)
        assert line.startswith(f"{STEM}: refused: another run of this chapter is writing its outputs under")
        assert f"(make quick, pid {os.getpid()}, since " in line and "\n" not in line
        runs.ChapterLock(tmp_path, "07_other", "a hand run").acquire().release()  # another chapter is free
    runs.ChapterLock(tmp_path, STEM, "a hand run").acquire().release()  # released


def test_the_lock_of_a_killed_run_is_free_again(tmp_path):
    code = (f"import os; from lib import runs; runs.ChapterLock({str(tmp_path)!r}, {STEM!r}, 'a hand run').acquire(); "
            f"os._exit(9)")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 9
    runs.ChapterLock(tmp_path, STEM, "make quick").acquire().release()


def test_a_swap_replaces_both_folders_and_leaves_nothing_of_the_old_run(tmp_path):
    _folder(tmp_path, "data", {"old.csv": "a\n1\n", "provenance.json": "{}"})
    _folder(tmp_path, "figures", {"old.png": "png"})
    staging = runs.new_staging(tmp_path, STEM)
    _folder(staging, "data", {"new.csv": "a\n2\n", "provenance.json": "{}"})
    runs.swap_in(staging, tmp_path, STEM)
    assert sorted(p.name for p in (tmp_path / "data" / STEM).iterdir()) == ["new.csv", "provenance.json"]
    assert not (tmp_path / "figures" / STEM).exists()  # the new run drew no figure: the old ones went with it
    assert not staging.exists() and runs.pending(tmp_path) == []


def test_a_swap_cut_short_is_finished_by_settle(tmp_path, monkeypatch):
    _folder(tmp_path, "data", {"old.csv": "a\n1\n"})
    _folder(tmp_path, "figures", {"old.png": "png"})
    staging = runs.new_staging(tmp_path, STEM)
    _folder(staging, "data", {"new.csv": "a\n2\n"})
    _folder(staging, "figures", {"new.png": "png2"})
    real, calls = os.rename, []

    def dies_on_the_third(src, dst):  # data's old aside, data's new in, then the process "dies"
        calls.append(src)
        if len(calls) == 3:
            raise OSError("killed")
        real(src, dst)

    monkeypatch.setattr(os, "rename", dies_on_the_third)
    with pytest.raises(OSError):
        runs.swap_in(staging, tmp_path, STEM)
    monkeypatch.setattr(os, "rename", real)
    assert runs.pending(tmp_path) == [STEM]
    notes = runs.settle(tmp_path)
    assert notes and "finished replacing its outputs" in notes[0]
    assert [p.name for p in (tmp_path / "data" / STEM).iterdir()] == ["new.csv"]
    assert [p.name for p in (tmp_path / "figures" / STEM).iterdir()] == ["new.png"]
    assert runs.pending(tmp_path) == [] and not list(runs.runs_dir(tmp_path).iterdir())


def test_settle_leaves_a_live_run_alone_and_removes_unfinished_runs_folders(tmp_path):
    abandoned = runs.new_staging(tmp_path, STEM)
    with runs.ChapterLock(tmp_path, STEM, "a hand run"):
        assert runs.settle(tmp_path) == [] and abandoned.exists()  # its run may still be writing
    runs.settle(tmp_path)
    assert not abandoned.exists()


def test_an_intent_file_naming_another_folder_is_left_alone(tmp_path):
    runs.runs_dir(tmp_path).mkdir(parents=True)
    (runs.runs_dir(tmp_path) / f"{STEM}.swap").write_text(json.dumps({"staging": "../../etc", "with_new": ["data"]}))
    notes = runs.settle(tmp_path)
    assert len(notes) == 1 and "not an intent file a run of 06_demo wrote" in notes[0]


def test_folder_problem_names_what_is_not_one_run_s(tmp_path):
    folder = _folder(tmp_path, "data", {"a.csv": "x\n1\n", "b.csv": "x\n2\n"})
    _provenance(folder, ["a.csv", "b.csv"], {"a.csv": runs.file_record(folder / "a.csv", rows=1)})
    assert runs.folder_problem(folder) is None
    (folder / "c.csv").write_text("x\n3\n")
    assert "it holds c.csv, which its provenance.json does not list" in runs.folder_problem(folder)
    (folder / "c.csv").unlink()
    (folder / "b.csv").unlink()
    assert runs.folder_problem(folder) == "b.csv listed in its provenance.json missing"
    (folder / "b.csv").write_text("x\n2\n")
    (folder / "a.csv").write_text("x\n")
    assert "a.csv holds 2 bytes where its run wrote 4" in runs.folder_problem(folder)
    (folder / "a.csv").write_text("x\n9\n")
    assert "a.csv is not the file its run wrote" in runs.folder_problem(folder)
    (folder / "a.csv").write_text("x\n1\n")
    (folder / "b.csv").unlink()
    (folder / "b.csv").symlink_to("/etc/hostname")
    assert "b.csv: a symbolic link, never followed" in runs.folder_problem(folder)
    (folder / "provenance.json").unlink()
    assert runs.folder_problem(folder).startswith("no provenance.json")
