"""``make student``: copies of every chapter to hand out, and the teacher's copies beside them.

``build/student/NN_chapter.ipynb`` is the chapter from its py:percent source with

* no outputs (the student's run makes them);
* the "Check yourself" answers and the "Try it" outcomes ("What to expect") removed: every
  ``<details>...</details>`` block in the prose becomes a line
  that asks for the student's answer, and so does every cell tagged ``answer`` (an answer a chapter must
  compute, so it cannot sit in the prose: the question stays in the markdown before it, the cell displays
  the answer in a ``<details>`` block). :func:`answers_left` finds any answer a copy still holds, typed or
  computed (a code cell that writes a ``<details>`` block), and ``make student`` refuses to write such a copy;
* a **predict first** step before each measurement the chapter marks: a markdown cell asking for a
  prediction and a code cell, ``my_prediction = ...``, where the student writes it before the cells that
  measure run, and before the book's own prediction (the tagged cell asks, with what to predict from; the
  book's answer is in the cells after it).

``build/teacher/NN_chapter.ipynb`` is the same with the answers kept (an answer cell's code collapsed, as in
``make lab``'s copies).

Both open in JupyterLab unmodified: they carry the ``language_info`` of the kernel that will run them (this
environment's Python; JupyterLab rewrites a notebook's ``language_info`` when its kernel starts, and marks a
notebook whose record differed as modified), and no jupytext pairing.

How a chapter marks a predict-first step: tag the cell that asks for the prediction with ``predict``
(``# %% [markdown] tags=["predict"]`` in the source): the prediction cells go just after a tagged markdown
cell (the question is in it, the measuring code follows), or just before a tagged code cell. A chapter with
no such tag falls back to its prose: after a paragraph starting ``**Predict`` (``**Predict first:**``), or
after the section under a heading containing "predict" (``## What arithmetic predicts``), splitting a cell
there if it must.

The copies keep the chapter's parameters cell, so ``papermill -p quick True`` (or editing it) runs them
in quick mode, and they name the book's kernel, ``prefill-decode`` (``make lab`` registers it).
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import time
from pathlib import Path

import jupytext
import nbformat

from lib.make.lab import collapse_answers, language_info
from lib.paths import REPO_ROOT
from lib.make.outputs import check_finished

STUDENT_DIR = REPO_ROOT / "build" / "student"
TEACHER_DIR = REPO_ROOT / "build" / "teacher"
KERNELSPEC = {"name": "prefill-decode", "display_name": "Prefill and Decode (.venv)", "language": "python"}

PREDICT_TAG = "predict"
"""The cell tag a chapter puts on the cell where a predict-first step begins."""
ANSWER_TAG = "answer"
"""The cell tag for a "Check yourself" answer built by code: the student copy drops the cell."""
PREDICTION_TAG = "student-prediction"
"""The tag on the cells this module adds, so a later tool can find the students' predictions."""

DETAILS = re.compile(r"<details>.*?</details>", re.DOTALL | re.IGNORECASE)
PROSE_MARKER = re.compile(r"^(#{2,4}\s.*\bpredict|\*\*predict\b)", re.IGNORECASE)

ASK_ANSWER = "*Your answer:* (write it here, then compare in class)"
ASK_PREDICTION = ("**Your prediction.** Before you run the next cells, write down what you expect them to show "
                  "(the question above): a number with its unit, or a sentence, and why. The cells after it "
                  "measure it; compare then.")
PREDICTION_CODE = "my_prediction = ...  # replace ... with your prediction (a number, or a sentence in quotes)"


def prediction_cells() -> list:
    """The two cells a student fills in before a measurement."""
    return [nbformat.v4.new_markdown_cell(ASK_PREDICTION, metadata={"tags": [PREDICTION_TAG]}),
            nbformat.v4.new_code_cell(PREDICTION_CODE, metadata={"tags": [PREDICTION_TAG]})]


def _split_at_markers(cell) -> list:
    """A markdown cell split so that each predict-first step in its prose ends a part: a ``**Predict``
    paragraph, or a section under a heading that says "predict". Returns ``[(ends_a_step, cell), ...]``."""
    lines = cell.source.splitlines()
    ends = []
    for i, line in enumerate(lines):
        if PROSE_MARKER.match(line.strip()):
            stop = i + 1  # the step runs to the end of its paragraph, or of its section for a heading
            while stop < len(lines) and (lines[stop].strip() or line.startswith("#")) and not lines[stop].startswith("#"):
                stop += 1
            ends.append(stop)
    if not ends:
        return [(False, cell)]
    parts, bounds = [], [0, *sorted(set(ends))]
    if bounds[-1] < len(lines):
        bounds.append(len(lines))
    for a, b in zip(bounds, bounds[1:]):
        text = "\n".join(lines[a:b]).strip()
        if text:
            parts.append((b in ends, nbformat.v4.new_markdown_cell(text, metadata=dict(cell.metadata))))
    return parts


def predict_steps(notebook) -> list:
    """The cells with the prediction cells inserted at each predict-first step (by tag, or else by
    prose, see the module docstring)."""
    tagged = any(PREDICT_TAG in c.metadata.get("tags", []) for c in notebook.cells)
    cells = []
    for cell in notebook.cells:
        marked = PREDICT_TAG in cell.metadata.get("tags", [])
        if tagged and marked and cell.cell_type == "code":
            cells += prediction_cells() + [cell]
        elif tagged:
            cells += [cell] + (prediction_cells() if marked else [])
        elif cell.cell_type == "markdown":
            for ends, part in _split_at_markers(cell):
                cells += [part] + (prediction_cells() if ends else [])
        else:
            cells.append(cell)
    return cells


def remove_answers(text: str) -> str:
    """Markdown with every ``<details>`` block replaced by a line asking for the student's answer."""
    return DETAILS.sub(ASK_ANSWER, text)


def is_answer(cell) -> bool:
    """A cell tagged ``answer``."""
    return ANSWER_TAG in cell.metadata.get("tags", [])


def answers_left(notebook) -> list[str]:
    """Where a notebook still holds a "Check yourself" answer, one line each: a ``<details>`` block in its
    prose, a cell tagged ``answer``, or a code cell whose source writes a ``<details>`` block (an answer
    computed in code; running it would print the answer). An empty list: none."""
    found = []
    for i, cell in enumerate(notebook.cells, 1):
        if is_answer(cell):
            found.append(f"cell {i}: tagged {ANSWER_TAG!r}")
        elif cell.cell_type == "markdown" and re.search(r"<details", cell.source, re.IGNORECASE):
            found.append(f"cell {i}: a <details> block in its prose")
        elif cell.cell_type == "code" and re.search(r"<details", cell.source, re.IGNORECASE):
            found.append(f"cell {i}: code that writes a <details> block (tag the cell {ANSWER_TAG!r})")
    return found


#: Calls an answer cell must not make: the ones that declare or decide a claim, write a result or the opening (a
#: student copy, which leaves the cell out, would then decide or write less than the book). Reading a verdict
#: (``register.verdict``) is allowed.
_WRITES = {"register": {"claim", "decide", "record"}, "results": None, "opening": None}


def _code_text(cell) -> str:
    return "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))


def answer_leaks(notebook) -> list[str]:
    """Where leaving out a chapter's answer cells (as the student copy does) would change what the rest of it
    computes, one line each: a name an answer cell binds or changes (``x = ...``, ``x[k] = ...``, ``x.a = ...``,
    ``import x``, ``def x``) that a later code cell reads, or a call on the chapter's register or results. Read
    from the code, not run; an empty list: none."""
    import ast

    cells = [c for c in notebook.cells if c.cell_type == "code"]
    found = []
    for i, cell in enumerate(cells):
        if not is_answer(cell):
            continue
        tree = ast.parse(_code_text(cell))
        bound: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                bound.add(node.id)
            elif isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, ast.Store):
                base = node
                while isinstance(base, (ast.Attribute, ast.Subscript)):
                    base = base.value
                if isinstance(base, ast.Name):
                    bound.add(base.id)
            elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, ast.alias):
                bound.add((node.asname or node.name).split(".")[0])
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and isinstance(node.func.value, ast.Name) and node.func.value.id in _WRITES
                  and (_WRITES[node.func.value.id] is None or node.func.attr in _WRITES[node.func.value.id])):
                found.append(f"answer cell {i + 1} calls {node.func.value.id}.{node.func.attr}")
        # names local to a function or comprehension in the cell are not the chapter's
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp,
                                 ast.GeneratorExp)):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Name) and isinstance(inner.ctx, ast.Store):
                        bound.discard(inner.id)
                if isinstance(node, ast.FunctionDef):
                    bound.add(node.name)
        later = {n.id for c in cells[i + 1:] if not is_answer(c)
                 for n in ast.walk(ast.parse(_code_text(c))) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        found += [f"answer cell {i + 1} binds {name!r}, which a later cell reads" for name in sorted(bound & later)]
    return found


def clean(notebook) -> None:
    """Clear outputs, execution counts and run metadata; name the book's kernel and its language."""
    for cell in notebook.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)
    for key in ("papermill", "widgets", "prefill_decode"):
        notebook.metadata.pop(key, None)
    notebook.metadata["kernelspec"] = dict(KERNELSPEC)
    notebook.metadata["language_info"] = language_info()
    notebook.metadata.pop("jupytext", None)  # a handed-out copy is not paired with the book's source


def copies(source: Path) -> tuple:
    """(student, teacher) notebooks for one chapter's py:percent source."""
    notebook = jupytext.read(source)
    clean(notebook)
    notebook.cells = predict_steps(notebook)
    teacher = nbformat.from_dict(notebook)
    collapse_answers(teacher)
    student = nbformat.from_dict(notebook)
    student.cells = [nbformat.v4.new_markdown_cell(ASK_ANSWER) if is_answer(c) else c for c in student.cells]
    for cell in student.cells:
        if cell.cell_type == "markdown":
            cell.source = remove_answers(cell.source)
    for book in (teacher, student):
        nbformat.validate(book)
    return student, teacher


README = """# Prefill and Decode: {who} copies

One notebook per chapter, without outputs{answers}. Before each measurement the chapter marks, a cell
asks for your prediction (`my_prediction = ...`): write it before running the cells after it.

Open them from the book's folder with `make lab` (it builds the environment the first time, registers the
book's kernel and opens JupyterLab on `build/`, where this folder is). What a run writes goes to
`build/scratch/` (`build/quick/` with `quick = True` in a chapter's first cell, the fast way to run it in
class); the book's own files are never changed.
"""


def build(root: Path = REPO_ROOT, student_dir: Path = STUDENT_DIR, teacher_dir: Path = TEACHER_DIR,
          log=print) -> list[Path]:
    """Write every chapter's student and teacher copy; return the student copies' paths. Refuses (``Unfinished``,
    a ``ValueError``) while a chapter's replacement is unfinished: a copy must not mix old and new."""
    check_finished(root, "make student")
    started = time.perf_counter()
    sources = sorted((root / "notebooks").glob("[0-9][0-9]_*.py"))
    if not sources:
        raise ValueError(f"no chapter sources (NN_name.py) in {root / 'notebooks'}")
    copied = [(source, *copies(source)) for source in sources]
    left = [f"{source.stem}: {where}" for source, student, _ in copied for where in answers_left(student)]
    if left:
        raise ValueError("a student copy would still hold an answer: " + "; ".join(left))
    leaks = [f"{source.stem}: {where}" for source in sources for where in answer_leaks(jupytext.read(source))]
    if leaks:
        raise ValueError("a student copy, without its answer cells, would compute something else: "
                         + "; ".join(leaks) + " (give the answer cell's names a leading underscore of their own)")
    written = []
    for folder, who, answers in ((student_dir, "student", ' and without the "Check yourself" answers'),
                                 (teacher_dir, "teacher", "; the answers are kept")):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        (folder / "README.md").write_text(README.format(who=who, answers=answers))
        glossary = root / "notebooks" / "glossary.md"
        if glossary.is_file():  # every chapter links its terms to it (glossary.md#...)
            shutil.copy2(glossary, folder / glossary.name)
    counts = []
    for source, student, teacher in copied:
        nbformat.write(student, student_dir / f"{source.stem}.ipynb")
        nbformat.write(teacher, teacher_dir / f"{source.stem}.ipynb")
        written.append(student_dir / f"{source.stem}.ipynb")
        steps = sum(1 for c in student.cells if c.cell_type == "code" and PREDICTION_TAG in c.metadata.get("tags", []))
        counts.append(f"{source.stem} ({steps} prediction{'s' if steps != 1 else ''})")
    log(f"student: {len(written)} chapters in {student_dir} and {teacher_dir}: {', '.join(counts)} "
        f"({time.perf_counter() - started:.1f} s)")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lib.make.student", description=__doc__.split("\n\n")[0])
    parser.parse_args(argv)
    try:
        build()
    except ValueError as error:
        print(f"make student: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
