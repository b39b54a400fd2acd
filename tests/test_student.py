"""make student: copies without outputs or answers, a prediction cell before each measurement, and every
student copy runs top to bottom in quick mode (the ones that run the book's own code through test_notebooks)."""

from pathlib import Path

import jupytext
import nbformat
import papermill
import pytest

from lib.make import lab, student

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))


@pytest.fixture(scope="module")
def handed_out(tmp_path_factory):
    """Every chapter's copies, written one by one (make student itself refuses to write any while a copy
    would hold an answer: test_no_student_copy_holds_an_answer says which)."""
    base = tmp_path_factory.mktemp("class")
    for folder in ("student", "teacher"):
        (base / folder).mkdir()
    for source in SOURCES:
        kid, teacher = student.copies(source)
        nbformat.write(kid, base / "student" / f"{source.stem}.ipynb")
        nbformat.write(teacher, base / "teacher" / f"{source.stem}.ipynb")
    return base


def _tags(cell):
    return cell.metadata.get("tags", [])


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_copies_have_no_outputs_and_only_the_teacher_s_keeps_answers(handed_out, source):
    kid = nbformat.read(handed_out / "student" / f"{source.stem}.ipynb", as_version=4)
    teacher = nbformat.read(handed_out / "teacher" / f"{source.stem}.ipynb", as_version=4)
    cells = jupytext.read(source).cells
    typed = sum(c.source.count("<details>") for c in cells if c.cell_type == "markdown")
    computed = sum(student.ANSWER_TAG in _tags(c) for c in cells)
    assert all(c.outputs == [] and c.execution_count is None for c in kid.cells if c.cell_type == "code")
    assert not any("<details>" in c.source for c in kid.cells if c.cell_type == "markdown")
    assert sum(c.source.count(student.ASK_ANSWER) for c in kid.cells) == typed + computed
    assert sum(c.source.count("<details>") for c in teacher.cells if c.cell_type == "markdown") == typed
    assert sum(student.ANSWER_TAG in _tags(c) for c in teacher.cells) == computed
    assert kid.metadata.kernelspec["name"] == "prefill-decode"
    assert "parameters" in _tags(next(c for c in kid.cells if c.cell_type == "code"))


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_no_student_copy_holds_an_answer(handed_out, source):
    """Neither typed (a <details> block) nor computed: a code cell that writes a <details> block must be
    tagged answer, so that the student copy asks for the student's answer in its place."""
    kid = nbformat.read(handed_out / "student" / f"{source.stem}.ipynb", as_version=4)
    assert student.answers_left(kid) == []


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_every_chapter_has_a_predict_first_step(handed_out, source):
    kid = nbformat.read(handed_out / "student" / f"{source.stem}.ipynb", as_version=4)
    assert any(c.source == student.PREDICTION_CODE for c in kid.cells), (
        f"{source.stem}: tag the cell that asks for a prediction with 'predict'")


@pytest.mark.parametrize("folder", ["student", "teacher"])
def test_copies_open_unmodified_in_jupyterlab(handed_out, folder):
    """JupyterLab marks a notebook modified as soon as its kernel reports a language_info other than the one
    the notebook holds; the copies hold this environment's kernel's, and no jupytext pairing."""
    for source in SOURCES:
        copy = nbformat.read(handed_out / folder / f"{source.stem}.ipynb", as_version=4)
        assert copy.metadata.language_info == lab.language_info()
        assert "jupytext" not in copy.metadata


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_each_tagged_step_gets_a_prediction_cell_before_its_measurement(handed_out, source):
    kid = nbformat.read(handed_out / "student" / f"{source.stem}.ipynb", as_version=4)
    for i, cell in enumerate(kid.cells):
        if student.PREDICT_TAG not in _tags(cell):
            continue
        if cell.cell_type == "markdown":  # the question; the student answers it right after
            assert [c.source for c in kid.cells[i + 1:i + 3]] == [student.ASK_PREDICTION, student.PREDICTION_CODE]
        else:  # the measuring cell; the prediction comes first
            assert [c.source for c in kid.cells[i - 2:i]] == [student.ASK_PREDICTION, student.PREDICTION_CODE]


def test_without_tags_the_prose_marks_the_steps():
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# 9. X\n\nIntro.\n\n## What arithmetic predicts\n\nThe bound.\n\n## Next\n\nMore."),
        nbformat.v4.new_code_cell("bound = 1"),
        nbformat.v4.new_markdown_cell("Text.\n\n**Predict first:** twice the bytes?\n\nAfter."),
        nbformat.v4.new_code_cell("measured = 2"),
        nbformat.v4.new_markdown_cell("## Check yourself\n\nWhy?\n\n<details><summary>Answer</summary>\n\nBecause.\n</details>"),
    ])
    ask = [student.ASK_PREDICTION, student.PREDICTION_CODE]
    assert [c.source for c in student.predict_steps(notebook)] == [
        "# 9. X\n\nIntro.\n\n## What arithmetic predicts\n\nThe bound.", *ask, "## Next\n\nMore.", "bound = 1",
        "Text.\n\n**Predict first:** twice the bytes?", *ask, "After.", "measured = 2", notebook.cells[-1].source]
    assert student.remove_answers(notebook.cells[-1].source) == f"## Check yourself\n\nWhy?\n\n{student.ASK_ANSWER}"


def test_a_tag_takes_over_from_the_prose():
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("## What arithmetic predicts"),
        nbformat.v4.new_code_cell("measure()", metadata={"tags": ["predict"]}),
        nbformat.v4.new_markdown_cell("How fast? Guess.", metadata={"tags": ["predict"]}),
        nbformat.v4.new_code_cell("time_it()"),
    ])
    ask = [student.ASK_PREDICTION, student.PREDICTION_CODE]
    assert [c.source for c in student.predict_steps(notebook)] == [
        "## What arithmetic predicts", *ask, "measure()", "How fast? Guess.", *ask, "time_it()"]


def _code(notebook) -> list[str]:
    return [c.source for c in notebook.cells if c.cell_type == "code"]


def _drops_code(source: Path) -> bool:
    """Whether the student copy leaves out a code cell of the chapter (one tagged answer)."""
    return any(c.cell_type == "code" and student.ANSWER_TAG in _tags(c) for c in jupytext.read(source).cells)


#: The student copy run again here in quick mode, without its answer cells: one chapter's, as the proof that a
#: copy without them runs (about 15 s). Every student copy runs the chapter's own code less its answer cells,
#: with inert prediction cells between (checked below, per chapter), and no answer cell binds or changes what a
#: later cell reads (checked from the code, per chapter); test_notebooks runs the chapters themselves in quick
#: mode. Running every copy that leaves out an answer cell again would cost the suite about 10 minutes.
CHANGED = [s for s in SOURCES if s.stem == "04_request_split"]


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_a_student_copy_runs_the_chapter_s_code_and_its_prediction_cells(handed_out, source):
    kid = nbformat.read(handed_out / "student" / f"{source.stem}.ipynb", as_version=4)
    book_code = [c.source for c in jupytext.read(source).cells
                 if c.cell_type == "code" and student.ANSWER_TAG not in _tags(c)]
    assert [c for c in _code(kid) if c != student.PREDICTION_CODE] == book_code
    exec(compile(student.PREDICTION_CODE, "prediction", "exec"), {})  # the student's cell runs as handed out


def test_the_student_copy_run_again_leaves_out_code():
    assert CHANGED and all(_drops_code(s) for s in CHANGED), "the copy run again must be one without answer cells"


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.stem)
def test_no_answer_cell_binds_or_changes_what_a_later_cell_reads(source):
    assert student.answer_leaks(jupytext.read(source)) == []


def test_an_answer_cell_that_a_later_cell_depends_on_is_found():
    from nbformat import v4

    answer = {"tags": [student.ANSWER_TAG]}
    notebook = v4.new_notebook(cells=[
        v4.new_code_cell("x = 1\ntable = {}"),
        v4.new_code_cell("_a = [i for i in range(3)]\nx = 2\ntable['k'] = 3\nregister.decide('c', None)\n"
                         "def _f():\n    y = 1\n    return y", metadata=answer),
        v4.new_code_cell("%matplotlib inline\nprint(x, table, i, y, _f)"),
    ])
    assert student.answer_leaks(notebook) == ["answer cell 2 calls register.decide",
                                              "answer cell 2 binds '_f', which a later cell reads",
                                              "answer cell 2 binds 'table', which a later cell reads",
                                              "answer cell 2 binds 'x', which a later cell reads"]


@pytest.fixture(scope="module")
def student_run(tmp_path_factory):
    """One output folder for the class run (a later chapter reads the tables an earlier one wrote there, or
    the book's when none did), as in a student's own copy of the book."""
    return tmp_path_factory.mktemp("student-run")


@pytest.mark.slow
@pytest.mark.parametrize("source", CHANGED, ids=lambda p: p.stem)
def test_a_student_copy_without_its_answers_runs_top_to_bottom_in_quick_mode(handed_out, student_run, source,
                                                                             monkeypatch):
    """As a student would run it, with quick=True; results go to a scratch folder, not the book's data/."""
    monkeypatch.setenv("PREFILL_DECODE_OUTPUT_ROOT", str(student_run))
    monkeypatch.setenv("PREFILL_DECODE_BATCH", "1")
    executed = student_run / f"{source.stem}.ipynb"
    papermill.execute_notebook(str(handed_out / "student" / f"{source.stem}.ipynb"), str(executed),
                               parameters={"quick": True, "device": "cpu"}, kernel_name="python3",
                               cwd=str(student_run), progress_bar=False)
    ran = nbformat.read(executed, as_version=4)
    assert not any(o.get("output_type") == "error" for c in ran.cells for o in c.get("outputs", []))
    assert all(c.execution_count is not None for c in ran.cells if c.cell_type == "code" and c.source.strip())
    assert any(c.source == student.PREDICTION_CODE for c in ran.cells)
    assert (student_run / "data" / source.stem / "provenance.json").exists()


def test_a_code_cell_tagged_answer_stays_only_in_the_teacher_s_copy(tmp_path):
    source = tmp_path / "notebooks" / "09_x.py"
    source.parent.mkdir()
    source.write_text('# %% [markdown]\n# # 9. X\n\n# %% tags=["parameters"]\nquick = False\n\n'
                      '# %% [markdown]\n# 2. How much?\n\n'
                      '# %% tags=["answer"]\nshow(f"<details><summary>Answer</summary>{6 * 7}</details>")\n')
    student.build(tmp_path, tmp_path / "s", tmp_path / "t", log=lambda *_: None)
    kid = nbformat.read(tmp_path / "s" / "09_x.ipynb", as_version=4)
    teacher = nbformat.read(tmp_path / "t" / "09_x.ipynb", as_version=4)
    assert not any("6 * 7" in c.source for c in kid.cells) and any("6 * 7" in c.source for c in teacher.cells)
    assert [c.source for c in kid.cells[-2:]] == ["2. How much?", student.ASK_ANSWER]
    assert teacher.cells[-1].metadata.jupyter == {"source_hidden": True}  # collapsed, as in make lab


def test_make_student_refuses_a_copy_that_would_still_hold_an_answer(tmp_path):
    """An answer computed in code but not tagged: the copy would print it. Nothing is written."""
    source = tmp_path / "notebooks" / "09_x.py"
    source.parent.mkdir()
    source.write_text('# %% tags=["parameters"]\nquick = False\n\n'
                      '# %%\nshow(f"<details><summary>Answer</summary>{6 * 7}</details>")\n')
    with pytest.raises(ValueError, match="09_x: cell 2: code that writes a <details> block"):
        student.build(tmp_path, tmp_path / "s", tmp_path / "t", log=lambda *_: None)
    assert not (tmp_path / "s").exists()
    kid, _ = student.copies(source)
    kid.cells.append(nbformat.v4.new_markdown_cell("<details><summary>A</summary>typed</details>"))
    kid.cells.append(nbformat.v4.new_code_cell("x", metadata={"tags": ["answer"]}))
    assert [line.split(":")[1].strip() for line in student.answers_left(kid)] == [
        "code that writes a <details> block (tag the cell 'answer')", "a <details> block in its prose",
        "tagged 'answer'"]


def test_the_handed_out_folders_hold_the_glossary_every_chapter_links_to(tmp_path):
    import re

    student.build(student_dir=tmp_path / "student", teacher_dir=tmp_path / "teacher", log=lambda _: None)
    for folder in ("student", "teacher"):
        glossary = (tmp_path / folder / "glossary.md").read_text()
        anchors = {re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
                   for h in re.findall(r"^#+ (.+)$", glossary, re.M)}
        linked = {a for p in (tmp_path / folder).glob("*.ipynb") for c in nbformat.read(p, as_version=4).cells
                  for a in re.findall(r"glossary\.md#([\w-]+)", c.source)}
        assert linked and linked <= anchors, sorted(linked - anchors)
