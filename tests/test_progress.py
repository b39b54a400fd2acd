"""Progress bars: a widget in JupyterLab, one clean line in a build, never a warning on stderr."""

import nbformat
import pytest
from nbclient import NotebookClient

from lib import progress as pg


@pytest.mark.parametrize("env, expected", [
    ({}, False),
    ({"PREFILL_DECODE_BATCH": "1"}, True),
    ({"PREFILL_DECODE_BATCH": "0"}, False),
    ({"PREFILL_DECODE_BATCH": ""}, False),
    ({"PREFILL_DECODE_OUTPUT_ROOT": "/tmp/x"}, True),
    ({"PREFILL_DECODE_OUTPUT_ROOT": "/tmp/x", "PREFILL_DECODE_BATCH": "0"}, False),
])
def test_batch_mode_reads_the_build_variables(monkeypatch, env, expected):
    monkeypatch.delenv("PREFILL_DECODE_BATCH", raising=False)
    monkeypatch.delenv("PREFILL_DECODE_OUTPUT_ROOT", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert pg.batch_mode() is expected


def test_a_build_prints_one_line_and_passes_every_item(monkeypatch, capsys):
    monkeypatch.setenv("PREFILL_DECODE_BATCH", "1")
    assert list(pg.progress(iter([3, 1, 2]), desc="sweep", total=3)) == [3, 1, 2]
    captured = capsys.readouterr()
    assert captured.err == ""
    lines = captured.out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("sweep: 3 of 3 in ") and lines[0].endswith(" s")
    assert "\r" not in captured.out


def test_a_loop_left_early_says_so(monkeypatch, capsys):
    monkeypatch.setenv("PREFILL_DECODE_BATCH", "1")
    bar = pg.progress(range(10), desc="runs")
    for i in bar:
        if i == 3:
            break
    bar.close()  # what garbage collection does to a generator left early
    line = capsys.readouterr().out.strip()
    assert line.startswith("runs: 4 of 10 in ") and line.endswith("(stopped early)")


def _run_in_kernel(monkeypatch, batch: str):
    """Execute a two-line notebook in a real kernel and return its one code cell's outputs."""
    monkeypatch.setenv("PREFILL_DECODE_BATCH", batch)
    monkeypatch.delenv("PREFILL_DECODE_OUTPUT_ROOT", raising=False)
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "from lib.progress import progress, style\n"
        "for _ in progress(range(5), desc='demo'):\n    pass\n"
        "print(style())")])
    NotebookClient(notebook, timeout=120, kernel_name="python3").execute()
    return notebook.cells[0].outputs


@pytest.mark.slow
def test_in_a_papermill_style_kernel_run_the_output_is_one_clean_stdout_line(monkeypatch):
    outputs = _run_in_kernel(monkeypatch, "1")
    assert [o.get("name") for o in outputs] == ["stdout"] * len(outputs)
    text = "".join(o.text for o in outputs)
    assert text.splitlines()[0].startswith("demo: 5 of 5 in ") and text.splitlines()[1] == "line"
    assert "\r" not in text


@pytest.mark.slow
def test_in_an_interactive_kernel_the_bar_is_a_widget_without_a_warning(monkeypatch):
    pytest.importorskip("ipywidgets")
    outputs = _run_in_kernel(monkeypatch, "0")
    assert not [o for o in outputs if o.get("name") == "stderr"], "no TqdmWarning or text bar on stderr"
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs)
    assert "widget" in "".join(o.get("text", "") for o in outputs)


def test_quiet_library_bars_switches_off_transformers_bars_only_in_a_build(monkeypatch):
    from transformers.utils import logging as hf_logging
    monkeypatch.setenv("PREFILL_DECODE_BATCH", "0")
    hf_logging.enable_progress_bar()
    pg.quiet_library_bars()
    assert hf_logging.is_progress_bar_enabled()
    monkeypatch.setenv("PREFILL_DECODE_BATCH", "1")
    pg.quiet_library_bars()
    try:
        assert not hf_logging.is_progress_bar_enabled()
    finally:
        hf_logging.enable_progress_bar()
