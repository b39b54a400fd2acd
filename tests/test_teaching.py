"""The teacher's and the class's pages: session plans whose sums are shown, timings labelled with their load,
messages produced by the library, and every text from a student's files inert in the built pages."""

import ast
import json
import re
import shutil
from pathlib import Path

import nbformat
import pandas as pd
import pytest
from bs4 import BeautifulSoup

from lib import models
from lib.make import classroom, teaching
from lib.make.site import build as site, linkcheck

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = "<script>alert('device')</script>"
IMAGE = "<img src=y onerror=alert(2)>"
RUN = "<img src=x onerror=alert(1)>"


def test_a_session_s_sum_is_written_out_and_a_chapter_too_long_says_by_how_much():
    need = {"00_machine": 9.2, "01_two_phases": 16.4, "03_decode_sweep": 36.0, "04_request_split": 18.0}
    assert teaching.session_lines(need, 45) == [
        "session 1: 00_machine 9 + 01_two_phases 16 = 26 min of 35 (9 to spare)",
        "session 2: 03_decode_sweep 36 min: over the 35 min by 1. Run it in quick mode, set its reading as "
        "homework before the session, or give it two sessions",
        "session 3: 04_request_split 18 min of 35 (17 to spare)"]
    assert teaching.session_lines(need, 45, quick=True)[1].endswith(
        "over the 35 min by 1. Set its reading as homework before the session, or give it two sessions")
    assert teaching.session_lines({"07_x": 24.0}, 45, frozenset({"07_x"})) == [
        "session 1: 07_x 24 (reading only: no run time measured) min of 35 (11 to spare)"]
    assert teaching.SESSION_OVERHEAD_MIN == teaching.START_MIN + teaching.DISCUSS_MIN


def test_reading_time_counts_what_the_code_prints_its_tables_and_figures_but_not_folded_listings(tmp_path):
    v4 = nbformat.v4
    printed = v4.new_output("display_data", data={"text/markdown": "word " * 300 + "<details><summary>The code"
                                                  "</summary>\n\n```python\n" + "x = 1\n" * 50 + "```\n</details>"})
    table = v4.new_output("display_data", data={"text/html": "<table><tr><th>a</th></tr>" + "<tr><td>1</td></tr>" * 19
                                                + "</table>", "text/plain": "a"})
    figure = v4.new_output("display_data", data={"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"})
    stream = v4.new_output("stream", name="stdout", text="one two three four\n")
    code = v4.new_code_cell("show()")
    code.outputs = [printed, table, figure, stream]
    path = tmp_path / "chapter.ipynb"
    nbformat.write(v4.new_notebook(cells=[v4.new_markdown_cell("word " * 100), code]), path)
    page = teaching.page(path)
    assert page == teaching.Page(words=100 + 300 + 4, table_rows=20, figures=1, code_cells=1)
    assert page.minutes == pytest.approx(404 / teaching.READING_WORDS_PER_MINUTE + 20 * teaching.SECONDS_PER_TABLE_ROW / 60
                                         + teaching.SECONDS_PER_FIGURE / 60 + teaching.MINUTES_PER_CODE_CELL)
    assert teaching.reading_minutes(path) == page.minutes


def test_the_example_runs_quick_times_are_labelled_with_their_load(tmp_path):
    facts = teaching.runs_conditions(ROOT)
    assert {"measured", "machine", "load"} <= set(facts) and "load average" in facts["load"]
    label = teaching._load_label(ROOT)
    assert "measured under load" in label and "load average" in label
    assert "not recorded" in teaching._load_label(tmp_path)


def test_the_missing_model_s_message_is_the_library_s_own_and_nothing_is_patched():
    failures = {what: message for what, _, message in teaching._failure_messages()}
    message = next(m for w, m in failures.items() if "without the embedded model" in w)
    assert message == f"ValueError: {models.missing_smollm2_message()}"
    imported = {n.names[0].name if isinstance(n, ast.Import) else n.module
                for n in ast.walk(ast.parse(Path(teaching.__file__).read_text()))
                if isinstance(n, (ast.Import, ast.ImportFrom))}
    assert not {name for name in imported if name and name.startswith("unittest")}


def test_install_notes_give_a_cpu_only_linux_machine_torch_cpu():
    text = BeautifulSoup(teaching._installing(ROOT, pd.DataFrame()), "html.parser").get_text(" ")
    assert "make env TORCH=cpu" in text and "CUDA build" in text


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """A one-chapter book whose provenance and claims, and a class whose student's run (its folder's name,
    device name and a claim), hold HTML that would run in a browser; the site built from them."""
    root = tmp_path_factory.mktemp("hostile")
    (root / "notebooks").mkdir()
    (root / "notebooks" / "01_demo.py").write_text("# %% [markdown]\n# # 1. Demo\n")
    metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                "language_info": {"name": "python", "pygments_lexer": "ipython3"}}
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# 1. Demo\n\nText.")],
                                            metadata=metadata), root / "notebooks" / "01_demo.ipynb")
    data = root / "data" / "01_demo"
    data.mkdir(parents=True)
    (data / "provenance.json").write_text(json.dumps({"device": "cpu", "device_name": SCRIPT, "torch": IMAGE,
                                                      "git_commit": "unknown"}))
    (data / "claims.csv").write_text(f'claim,statement,verdict\na,"{IMAGE}",held\n')
    student = root / "runs" / RUN
    shutil.copytree(classroom.EXAMPLE_RUNS / "dev-cpu-1-thread", student)
    for provenance in student.glob("data/*/provenance.json"):
        record = json.loads(provenance.read_text())
        provenance.write_text(json.dumps({**record, "device_name": SCRIPT}))
    claims = student / "data" / "00_machine" / "claims.csv"
    frame = pd.read_csv(claims)
    frame.loc[0, "claim"] = IMAGE
    frame.to_csv(claims, index=False)
    classroom.gather([student], root / "build" / "class")
    out = root / "build" / "site"
    warnings = site.build(out, root=root, log=lambda *_: None)
    return root, out, warnings


@pytest.mark.parametrize("page", ["class.html", "status.html"])
def test_text_from_a_student_s_files_is_inert_in_the_built_pages(hostile, page):
    root, out, warnings = hostile
    assert warnings == [] and linkcheck.check(out, root) == []
    soup = BeautifulSoup((out / page).read_text(encoding="utf-8"), "html.parser")
    article = soup.select_one("article")
    assert not [s for s in soup.find_all("script") if "alert" in s.get_text() + str(s.get("src"))]
    assert not soup.find_all(attrs={"onerror": True}) and not article.find_all("img", src=["x", "y"])
    shown = article.get_text(" ")
    assert SCRIPT in shown and IMAGE in shown, "the text is shown, as text"
    if page == "class.html":
        assert RUN in shown


def test_objectives_and_key_terms_are_read_from_the_chapter_and_listed_on_the_teacher_s_page(tmp_path):
    v4 = nbformat.v4
    path = tmp_path / "03_x.ipynb"
    nbformat.write(v4.new_notebook(cells=[
        v4.new_markdown_cell("# 3. A chapter\n\nIt measures."),
        v4.new_markdown_cell(f"{teaching.OBJECTIVES}\n\n* compute a step's `floor`;\n* say which **regime** it is in."),
        v4.new_markdown_cell(f"{teaching.KEY_TERMS}\n\n[Floor](glossary.md#floor), [Regimes](glossary.md#regimes)."),
    ]), path)
    assert teaching.objectives(path) == ["compute a step's `floor`;", "say which **regime** it is in."]
    assert teaching.key_terms(path) == [("Floor", "floor"), ("Regimes", "regimes")]
    chapter = type("C", (), {"stem": "03_x", "title": "3. A chapter", "notebook": path})
    text = BeautifulSoup(teaching._objectives_section([chapter]), "html.parser")
    assert [li.get_text() for li in text.find_all("li")] == ["compute a step's floor;", "say which regime it is in."]
    assert [a["href"] for a in text.find_all("a")] == ["03_x.html", "glossary.html#floor", "glossary.html#regimes"]


@pytest.mark.parametrize("notebook", sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.stem)
def test_every_chapter_states_three_to_five_objectives_and_its_key_terms(notebook):
    from mdit_py_plugins.anchors.index import slugify

    glossary = (ROOT / "notebooks" / "glossary.md").read_text()
    anchors = {slugify(line.lstrip("#").strip()) for line in glossary.splitlines() if line.startswith("## ")}
    assert 3 <= len(teaching.objectives(notebook)) <= 5
    terms = teaching.key_terms(notebook)
    assert len(terms) >= 3 and {a for _, a in terms} <= anchors


@pytest.mark.parametrize("notebook", sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.stem)
def test_every_committed_chapter_opens_with_a_paragraph_of_at_most_the_limit(notebook):
    """The committed book is held to the opening's limit here; a reader's run only warns (lib.prose.Opening)."""
    from lib import prose

    text = teaching.opening(notebook)
    assert text and text != prose.OPENING_PENDING
    assert prose.opening_words(text) <= prose.OPENING_WORDS, text


@pytest.mark.parametrize("notebook", sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.stem)
def test_every_try_it_exercise_has_one_hidden_answer_and_a_computed_one_printed_it(notebook):
    found = teaching.exercises(notebook)
    assert found, "a chapter ends with Try it exercises"
    for exercise in found:
        assert exercise.answers == 1, exercise.text
        for printed in exercise.computed:
            assert "<details>" in printed and "</details>" in printed, exercise.text


@pytest.mark.parametrize("source", sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py")), ids=lambda p: p.stem)
def test_every_predict_first_step_asks_the_student_a_question_before_the_book_answers(source):
    """A step tagged ``predict`` asks for a number or a direction (a ``**Predict first.**`` paragraph ending in a
    question); the student copy puts the student's cell right after it, so the book's own prediction, in the
    cells that follow, comes after the student's. At most six steps a chapter (its teaching questions)."""
    import jupytext
    from lib.make import student

    notebook = jupytext.read(source)
    steps = [c for c in notebook.cells if student.PREDICT_TAG in c.metadata.get("tags", [])]
    assert 1 <= len(steps) <= 6
    for cell in steps:
        assert cell.cell_type == "markdown", cell.source[:80]
        asked = cell.source.split("**Predict first.**", 1)
        assert len(asked) == 2, cell.source[:120]
        assert "?" in asked[1], asked[1][:200]


def test_a_try_it_answer_belongs_to_the_bullet_above_it_typed_or_computed(tmp_path):
    from nbformat import v4

    typed = "<details><summary>What to expect</summary>\n\nIt falls.\n</details>"
    cells = [v4.new_markdown_cell("## Check yourself\n\n1. Q?\n\n" + typed),
             v4.new_markdown_cell("## Try it\n\n* Set `a = 1`: what\n  happens?\n\n" + typed + "\n\n* Set `b = 2`."),
             v4.new_code_cell("show_answer()", metadata={"tags": ["answer"]},
                              outputs=[v4.new_output("display_data", {"text/markdown": typed})]),
             v4.new_markdown_cell("* Set `c = 3`.\n\n## Key terms\n\n* not an exercise")]
    path = tmp_path / "x.ipynb"
    nbformat.write(v4.new_notebook(cells=cells), path)
    found = teaching.exercises(path)
    assert [e.text for e in found] == ["Set `a = 1`: what happens?", "Set `b = 2`.", "Set `c = 3`."]
    assert [(len(e.typed), len(e.computed)) for e in found] == [(1, 0), (0, 1), (0, 0)]
    assert "It falls." in found[1].computed[0]


def test_every_session_plan_names_sections_and_questions_the_chapters_have_and_fits_its_minutes():
    notebooks = {p.stem: p for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}
    quick, how = teaching.quiet_quick_times(ROOT)
    assert set(quick) == set(notebooks) and how, "every chapter's quick run is measured, and the file says how"
    assert {s.minutes for s in teaching.SESSIONS} >= {45, 90}
    for session in teaching.SESSIONS:
        for stem, sections in session.read:
            assert set(sections or ()) <= set(teaching.headings(notebooks[stem])), (session.title, stem)
        for stem, n in session.discuss:
            assert n in teaching.check_questions(notebooks[stem]), (session.title, stem, n)
        minutes = teaching.session_minutes(session, notebooks, quick)
        assert minutes["total"] == pytest.approx(sum(v for k, v in minutes.items() if k != "total"))
        assert minutes["total"] <= session.minutes, (session.title, minutes)
        page = teaching._plan_html(session, notebooks, quick)  # what the teacher reads adds up as printed
        parts, total = re.search(r"Adds up to</b> ([\d. +]+) = <b>([\d.]+) min", page).groups()
        assert sum(map(float, parts.split(" + "))) == pytest.approx(float(total)), page
        read = float(parts.split(" + ")[3])
        chapters = re.search(r"Read in class</b>.*?: (.*?)\. Each chapter", page).group(1)
        assert sum(map(int, re.findall(r"\((\d+) min\)", chapters))) == read, chapters
        assert float(total) <= session.minutes


def test_a_section_s_reading_time_counts_only_its_cells(tmp_path):
    v4 = nbformat.v4
    code = v4.new_code_cell("show()")
    code.outputs = [v4.new_output("display_data", data={"text/markdown": "word " * 50})]
    path = tmp_path / "c.ipynb"
    nbformat.write(v4.new_notebook(cells=[
        v4.new_markdown_cell("# 1. Title\n\nten words " * 1), v4.new_markdown_cell("## A\n\none two three"), code,
        v4.new_markdown_cell("Four five.\n\n## B\n\nsix seven"), v4.new_code_cell("x = 1"),
        v4.new_markdown_cell("## Check yourself\n\n1. Why so?\n\n<details><summary>Answer</summary>\n\nBecause.\n</details>\n\n"
                             "2. And\n   this?\n"),
    ]), path)
    assert teaching.headings(path) == ["A", "B", "Check yourself"]
    # the title's 5 words always; "## A" and its 3 words, the 50 its code prints, "Four five." before "## B"
    assert teaching.page(path, ("A",)) == teaching.Page(words=5 + 5 + 50 + 2, table_rows=0, figures=0, code_cells=1)
    assert teaching.page(path, ("B",)) == teaching.Page(words=5 + 4, table_rows=0, figures=0, code_cells=1)
    assert teaching.check_questions(path) == {1: "Why so?", 2: "And this?"}
