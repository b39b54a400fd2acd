"""make lab: a reader's hand run, saved the way JupyterLab saves it or run by papermill, never changes a tracked
file, and the reader's notebook, tables and figures are kept where the README says (build/scratch/)."""

import asyncio
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import jupytext
import nbformat
import papermill
import pytest
from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager
from jupytext import build_async_jupytext_contents_manager_class
from nbclient import NotebookClient

from lib.make import lab

ROOT = Path(__file__).resolve().parents[1]
CHAPTER = "06_roofline"  # reads chapters 0, 2 and 3's tables and the reference runs
#: The reader's edit before Run all: the size sweep's budget, so that the full run takes seconds (about 20 s on 2
#: cores, against about 3 minutes for the book's 100 s budget and the weights' building) and skips the costly
#: sizes with their reasons, as a reader with less patience would see it.
BUDGET = ("size_budget_s = 100", "size_budget_s = 1")
#: The chapter papermill runs in quick mode beside the hand run: another one, so that the two runs' outputs are
#: told apart by chapter as well as by folder, and a quick one (about 12 s on 2 cores).
PAPERMILL_CHAPTER = "04_request_split"


def _contents_manager(root: Path):
    """The contents manager JupyterLab serves files with, wrapped by jupytext's (its server extension does
    the same), with the root ``make lab`` gives it."""
    manager = build_async_jupytext_contents_manager_class(AsyncLargeFileManager)
    return manager(root_dir=str(root / "build"))


def _set_parameter(model: dict, old: str, new: str) -> None:
    cell = next(c for c in model["content"]["cells"] if "parameters" in c["metadata"].get("tags", []))
    assert old in cell["source"]
    cell["source"] = cell["source"].replace(old, new)


def _save(manager, model: dict, path: str) -> dict:
    return asyncio.run(manager.save({"type": "notebook", "format": "json", "content": model["content"]}, path))


def _digests(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and "build" not in p.relative_to(root).parts
            and ".git" not in p.relative_to(root).parts}


@pytest.fixture
def book(tmp_path):
    """The book's chapters, tables and library in a git repository of their own, committed: what a
    reader's clone holds."""
    for name in ("lib", "notebooks", "data", "figures"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("jupytext.toml", ".gitignore"):
        shutil.copy2(ROOT / name, tmp_path / name)
    git = ["git", "-c", "user.name=reader", "-c", "user.email=reader@example.org", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([*git, "add", "."], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "clone"], cwd=tmp_path, check=True)
    return tmp_path


def _git_status(root: Path) -> str:
    return subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True,
                          check=True).stdout


def test_jupyterlab_cannot_reach_a_tracked_file_and_its_save_stays_in_build(book):
    """The reader sets quick = True and saves (Ctrl+S, or the autosave): jupytext writes both files of the
    pair, and both are the reader's copies."""
    lab.prepare(book, log=lambda *_: None)
    before = _digests(book)
    manager = _contents_manager(book)
    with pytest.raises(Exception, match="outside root"):
        asyncio.run(manager.get(f"../notebooks/{CHAPTER}.py"))
    model = asyncio.run(manager.get(f"scratch/notebooks/{CHAPTER}.py"))
    assert model["type"] == "notebook"
    assert any(c.get("outputs") for c in model["content"]["cells"]), "the copy opens with the book's outputs"
    _set_parameter(model, "quick = False", "quick = True")
    _save(manager, model, f"scratch/notebooks/{CHAPTER}.py")
    copies = lab.copies_dir(book)
    assert "quick = True" in (copies / f"{CHAPTER}.py").read_text()
    assert "quick = True" in json.dumps(nbformat.read(copies / f"{CHAPTER}.ipynb", as_version=4).cells[1:4])
    assert _digests(book) == before and _git_status(book) == ""


def test_a_hand_run_run_all_and_saved_or_run_by_papermill_leaves_git_status_clean(book, monkeypatch):
    """Run every cell of the reader's copy (as JupyterLab's "Run all" does, in a kernel that imports this
    clone's lib), save it through JupyterLab's contents manager, then run the committed notebook with
    papermill into build/: git sees nothing, and the runs' tables, figures and notebooks are in build/."""
    monkeypatch.setenv("PYTHONPATH", str(book))  # the kernels import this clone's lib, as the reader's would
    monkeypatch.delenv("PREFILL_DECODE_OUTPUT_ROOT", raising=False)
    monkeypatch.delenv("PREFILL_DECODE_WRITE_COMMITTED", raising=False)
    subprocess.run([sys.executable, "-m", "lib.make.lab", "--prepare-only"], cwd=book, check=True,
                   capture_output=True)
    manager = _contents_manager(book)
    path = f"scratch/notebooks/{CHAPTER}.py"
    model = asyncio.run(manager.get(path))
    _set_parameter(model, *BUDGET)
    notebook = nbformat.from_dict(model["content"])
    NotebookClient(notebook, kernel_name="python3", timeout=600,
                   resources={"metadata": {"path": str(lab.copies_dir(book))}}).execute()
    papermill.execute_notebook(str(book / "notebooks" / f"{PAPERMILL_CHAPTER}.ipynb"),
                               str(book / "build" / "scratch" / f"{PAPERMILL_CHAPTER}.papermill.ipynb"),
                               parameters={"quick": True}, kernel_name="python3", progress_bar=False,
                               cwd=str(book / "notebooks"))
    model["content"] = json.loads(json.dumps(notebook))  # what JupyterLab sends: sources as strings
    _save(manager, model, path)
    assert _git_status(book) == ""
    scratch, quick = book / "build" / "scratch", book / "build" / "quick"
    hand = json.loads((scratch / "data" / CHAPTER / "provenance.json").read_text())  # Run all, full mode
    assert hand["quick"] is False and hand["parameters"]["size_budget_s"] == 1, "the run is the reader's edited copy"
    assert list((scratch / "figures" / CHAPTER).glob("*.png"))
    assert json.loads((quick / "data" / PAPERMILL_CHAPTER / "provenance.json").read_text())["quick"] is True  # papermill
    assert not (quick / "data" / CHAPTER).exists() and not (scratch / "data" / PAPERMILL_CHAPTER).exists()
    saved = nbformat.read(lab.copies_dir(book) / f"{CHAPTER}.ipynb", as_version=4)
    said = "\n".join(o.get("text", "") for c in saved.cells for o in c.get("outputs", []) if o.get("name") == "stdout")
    assert f"{CHAPTER}: outputs go to {scratch}/" in said, "the run says where its tables and figures went"


def test_a_copy_follows_the_book_until_the_reader_saves_it(tmp_path):
    (tmp_path / "notebooks").mkdir()
    source = tmp_path / "notebooks" / "09_x.py"
    source.write_text('# %% [markdown]\n# # 9. X\n\n# %% tags=["parameters"]\nquick = False\n')
    said = []
    copies = lab.prepare(tmp_path, log=said.append)
    assert (copies / "09_x.py").read_text().endswith("quick = False\n") and "copied 1 chapter" in said[0]
    source.write_text(source.read_text() + "\n# %%\nprint('new in the book')\n")
    lab.prepare(tmp_path, log=said.append)
    assert "new in the book" in (copies / "09_x.py").read_text(), "an unsaved copy is brought up to date"
    mine = (copies / "09_x.py").read_text().replace("quick = False", "quick = True")
    (copies / "09_x.py").write_text(mine)
    source.write_text(source.read_text() + "\n# %%\nprint('newer still')\n")
    said.clear()
    lab.prepare(tmp_path, log=said.append)
    assert (copies / "09_x.py").read_text() == mine, "the reader's saved copy is never overwritten"
    assert len(said) == 1 and "kept your copy of 09_x" in said[0]


def test_copies_open_clean_and_collapse_a_computed_answer(tmp_path):
    """JupyterLab marks a notebook modified when its kernel reports another language_info; the copies carry
    the kernel's. A cell tagged answer opens with its code collapsed; the pair stays a pair."""
    (tmp_path / "notebooks").mkdir()
    source = tmp_path / "notebooks" / "09_x.py"
    source.write_text('# ---\n# jupyter:\n#   jupytext:\n#     formats: ipynb,py:percent\n# ---\n\n'
                      '# %% [markdown]\n# # 9. X\n\n# %% tags=["parameters"]\nquick = False\n\n'
                      '# %% tags=["answer"]\nprint("<details><summary>Answer</summary>42</details>")\n')
    nbformat.write(jupytext.read(source), source.with_suffix(".ipynb"))
    copies = lab.prepare(tmp_path, log=lambda *_: None)
    notebook = nbformat.read(copies / "09_x.ipynb", as_version=4)
    assert notebook.metadata.language_info == lab.language_info()
    assert notebook.metadata.language_info["version"] == ".".join(map(str, sys.version_info[:3]))
    answer = notebook.cells[-1]
    assert answer.metadata.jupyter == {"source_hidden": True}
    assert jupytext.read(copies / "09_x.py").cells[-1].metadata["jupyter"] == {"source_hidden": True}
    assert (copies / "09_x.py").stat().st_mtime > (copies / "09_x.ipynb").stat().st_mtime


def test_make_lab_serves_build_and_opens_the_copies():
    arguments = lab.server_arguments(ROOT, allow_root=True)
    assert f"--ServerApp.root_dir={ROOT / 'build'}" in arguments and "--allow-root" in arguments
    assert "--FileContentsManager.preferred_dir=scratch/notebooks" in arguments  # relative to the root
    tracked = subprocess.run(["git", "ls-files", "build"], cwd=ROOT, capture_output=True, text=True).stdout
    assert tracked == "" and "build/" in (ROOT / ".gitignore").read_text().split()
    assert "lib.make.lab" in (ROOT / "Makefile").read_text()


def test_the_glossary_is_copied_beside_the_chapters_that_link_it(tmp_path):
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "09_x.py").write_text('# %% tags=["parameters"]\nquick = False\n')
    (tmp_path / "notebooks" / "glossary.md").write_text("# Glossary\n\n## Floor\n\nThe least time.\n")
    copies = lab.prepare(tmp_path, log=lambda *_: None)
    assert (copies / "glossary.md").read_text().endswith("The least time.\n")
    (tmp_path / "notebooks" / "glossary.md").write_text("# Glossary\n\n## Floor\n\nNewer.\n")
    lab.prepare(tmp_path, log=lambda *_: None)
    assert (copies / "glossary.md").read_text().endswith("Newer.\n"), "the glossary is the book's, never the reader's"


@pytest.mark.parametrize("record", ["deleted", "{garbage", '{"08_y": 5}'])
def test_a_lost_copy_record_never_calls_an_unsaved_copy_the_reader_s(tmp_path, record):
    """The hostile pass after d3d7a80: with .copies.json deleted or unreadable, every chapter got "kept your copy
    ... (you saved it); the book's chapter has changed since", both halves false, on every later run; an entry
    that is not an object was a traceback. A copy equal to the book's own is recognised and recorded again; one
    that differs is kept, and the line says the record was lost, not that the reader saved it."""
    (tmp_path / "notebooks").mkdir()
    for stem in ("08_y", "09_x"):
        (tmp_path / "notebooks" / f"{stem}.py").write_text(f'# %% [markdown]\n# # {stem}\n\n# %% tags=["parameters"]\nquick = False\n')
    copies = lab.prepare(tmp_path, log=lambda _: None)
    mine = (copies / "09_x.py").read_text().replace("quick = False", "quick = True")
    (copies / "09_x.py").write_text(mine)
    state = copies / lab.STATE
    state.unlink() if record == "deleted" else state.write_text(record)
    said = []
    lab.prepare(tmp_path, log=said.append)
    assert (copies / "09_x.py").read_text() == mine
    assert len(said) == 1 and said[0].startswith("lab: kept your copies of 09_x: they differ from the book's"), said
    assert "you saved it" not in said[0]
    said.clear()
    lab.prepare(tmp_path, log=said.append)  # 08_y is recorded again as the book's; 09_x is still said, once
    assert len(said) == 1 and "09_x" in said[0] and "08_y" not in said[0], said
