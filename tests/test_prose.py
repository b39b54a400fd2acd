"""Numbers written for sentences, code and tables shown on the page."""

import pandas as pd
import pytest

from lib import prose


def test_span_prints_one_number_when_the_ends_agree():
    assert prose.span(1.04, 1.06) == "1.0\u20131.1"
    assert prose.span(2.0, 2.04, unit="ms") == "2.0 ms"


def test_ms_and_tokens():
    assert prose.ms(0.1234) == "123 ms" and prose.ms(0.01234) == "12.3 ms" and prose.ms(0.001234) == "1.2 ms" and prose.ms(0.000567) == "0.57 ms"
    assert prose.tokens(1) == "1 token" and prose.tokens(1024) == "1,024 tokens"


def test_count_in_words():
    assert [prose.count(n, "setting") for n in (0, 1, 2, 11)] == ["no settings", "one setting", "two settings",
                                                                  "11 settings"]


def test_and_list_reads_as_a_sentence():
    assert [prose.and_list(x) for x in ([], [16], [16, 128], [16, 128, 512])] == ["", "16", "16 and 128",
                                                                                 "16, 128 and 512"]


def test_a_column_reads_as_words_with_its_unit():
    cases = {"predicted_ttft_ms": "predicted TTFT (ms)", "tpot_ms_high": "TPOT, high (ms)",
             "streaming_read_gb_s": "streaming read (GB/s)", "tpot_slope_ms_per_1k_tokens": "TPOT slope (ms per 1k tokens)",
             "a_worst_gap_ms_low": "A worst gap, low (ms)", "predicted_a_worst_gap_ms": "predicted A worst gap (ms)", "tokens_per_s": "tokens/s", "faults_per_mib": "faults per MiB",
             "gb_s": "GB/s", "regime": "regime", "over_streaming_floor": "x streaming floor",
             "measured_over_predicted": "measured / predicted", "A worst gap, ms": "A worst gap, ms", 16: 16}
    assert {c: prose.label(c) for c in cases} == cases


def test_shown_renames_for_the_reader_and_keeps_the_frame():
    frame = pd.DataFrame({"step_ms": [1.234], "over_predicted": [0.987]}).rename_axis("context_tokens")
    out = prose.shown(frame, 1)
    assert list(out.columns) == ["step (ms)", "x predicted"] and out.index.name == "context tokens"
    assert out.iloc[0, 0] == 1.2 and list(frame.columns) == ["step_ms", "over_predicted"]


def test_shown_writes_an_interval_as_one_column():
    frame = pd.DataFrame({"gap_ms": [902.0, 26.0, None], "gap_ms_low": [780.0, 26.0, None],
                          "gap_ms_high": [970.5, 26.0, None], "share_lo": [0.1, 0.2, 0.3], "share": [0.15, 0.2, 0.3],
                          "share_hi": [0.2, 0.2, 0.4], "runs": [9, 9, 9]})
    out = prose.shown(frame, 1)
    assert list(out.columns) == ["gap (ms)", "share", "runs"]
    assert list(out["gap (ms)"]) == ["902 (780–970.5)", "26", ""]
    assert list(out["share"]) == ["0.2 (0.1–0.2)", "0.2", "0.3 (0.3–0.4)"]
    assert list(frame.columns)[:3] == ["gap_ms", "gap_ms_low", "gap_ms_high"]  # the chapter's frame is unchanged


def test_table_is_whole_escaped_and_renders_bold():
    long = "x" * 300
    html = prose.table(pd.DataFrame({"claim": ["a"], "measured": [f"**166 ms** <script>{long}"]})).data
    assert "<b>166 ms</b>" in html and "&lt;script&gt;" in html and long in html and "…" not in html


def test_source_shows_the_function():
    assert "def span" in prose.source(prose.span).data


def test_source_is_folded_under_a_line_naming_it():
    import inspect
    data, lines = prose.source(prose.span).data, len(inspect.getsource(prose.span).splitlines())
    assert data.startswith(f"<details><summary>The code: <code>lib.prose.span</code> ({lines} lines)</summary>")
    assert data.rstrip().endswith("</details>") and "```python\ndef span" in data


def test_a_finding_shows_its_deciding_detail_folded_below_it(monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda m: shown.append(m.data))
    prose.show("A step took **27 ms**.")
    prose.show("A step took **27 ms**, as priced.", how="95 % interval 26-28 ms against 22-34 ms allowed.")
    assert shown[0] == "A step took **27 ms**."
    plain, folded = shown[1].split("\n\n", 1)
    assert plain == "A step took **27 ms**, as priced."
    assert folded.startswith(f"<details><summary>{prose.HOW_DECIDED}</summary>") and folded.endswith("</details>")
    assert "26-28 ms" in folded


def test_the_opening_is_written_in_place_at_the_top_when_the_chapter_ends(tmp_path):
    """papermill keeps the display update: the saved notebook's first output is the paragraph, not the pending
    line, as JupyterLab shows it after Run all."""
    import nbformat
    import papermill

    from lib.paths import REPO_ROOT

    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("from lib import prose\nopening = prose.Opening()"),
        nbformat.v4.new_code_cell("x = 6 * 7"),
        nbformat.v4.new_code_cell("opening.write(f'The answer is **{x}**.')"),
    ])
    nbformat.write(notebook, tmp_path / "in.ipynb")
    papermill.execute_notebook(str(tmp_path / "in.ipynb"), str(tmp_path / "out.ipynb"), kernel_name="python3",
                               cwd=str(REPO_ROOT), progress_bar=False)
    first = nbformat.read(tmp_path / "out.ipynb", as_version=4).cells[0].outputs
    assert [o["data"]["text/markdown"] for o in first] == ["The answer is **42**.", ""]  # the second: a note


def test_an_opening_is_a_paragraph():
    opening = prose.Opening()
    over = prose.OPENING_WORDS + 1
    with pytest.warns(prose.OpeningTooLong, match=f"has {over} words"):
        opening.write(" ".join(["word"] * over))
    assert opening.text.startswith("word word")  # shown all the same: a reader's run does not fail over it
    opening.write(" ".join(["long"] * over), "The shorter telling.")  # the first telling that fits is shown
    assert opening.text == "The shorter telling."
    assert prose.opening_words("A step takes **12.3 ms** at `gpt2`, +8.6 %.") == 9
    opening.write("On this machine a step takes 12.3 ms (11.0–13.1).")
    assert opening.text.startswith("On this machine")
    opening.write("Short.", after="The machine ran slower.")  # a sentence after, where it fits
    assert opening.text == "Short. The machine ran slower."
    opening.write(" ".join(["long"] * (prose.OPENING_WORDS - 2)), after="The machine ran slower.")  # else a paragraph of its own
    assert opening.text.endswith("long long") and "slower" not in opening.text
    assert opening.note.endswith("The machine ran slower.")
    opening.write("Short.")
    assert opening.note == ""


def test_a_factor_beside_its_tolerance_never_prints_as_the_tolerance():
    assert prose.beside(1.2534, 1.25) == "1.253"
    assert prose.beside(1.2466, 1.25) == "1.247"
    assert prose.beside(1.25, 1.25) == "1.25"
    assert prose.beside(1.31, 1.25) == "1.31"
