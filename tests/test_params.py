"""The shared parameter checker: clear errors naming the parameter, lists from strings, quick mode that
shrinks and says so, and 0 kept as a value (issue 13, items 3 and 5)."""

import pytest
import torch

from lib import params, paths
from lib.models import KNOWN_MODELS

SPEC = {
    "runs": params.integer(min=1, quick=2),
    "contexts": params.int_list(min=1, max=1024, quick=[16, 128]),
    "device": params.device(),
    "dtypes": params.dtype_list(allow_none=True),
    "model_name": params.choice(KNOWN_MODELS, quick="tiny-gpt2"),
    "ttft_slo_ms": params.number(min=0, allow_none=True),
}


def ns(**changes):
    base = dict(runs=3, contexts=[16, 128, 512, 960], device="auto", dtypes=None, model_name="gpt2-small",
                ttft_slo_ms=None)
    return {**base, **changes}


def test_good_values_pass_and_are_written_back():
    namespace = ns(dtypes=["fp32", "bf16"])
    P = params.check(namespace, SPEC)
    assert P.runs == 3 and P.contexts == [16, 128, 512, 960] and P.dtypes == ["fp32", "bf16"]
    assert namespace["model_name"] == "gpt2-small" and P.quick_changes == []
    assert P.given["device"] == "auto" and isinstance(P.device, torch.device)


@pytest.mark.parametrize("name, value, message", [
    ("runs", 0, r"parameter runs=0 is not valid; expected an integer >= 1"),
    ("runs", 2.5, r"runs=2.5 .*an integer >= 1"),
    ("runs", True, r"runs=True"),
    ("runs", "three", r"runs='three'"),
    ("contexts", [], r"contexts=\[\] .*0 item\(s\).*one or more distinct items .* an integer >= 1 and <= 1024"),
    ("contexts", [16, 128, 16], r"contexts=\[16, 128, 16\] is not valid \(16 repeated\)"),
    ("contexts", [16, 2000], r"contexts=\[16, 2000\]"),
    ("contexts", "[16, x]", r"contexts='\[16, x\]'"),
    ("device", "tpu", r"device='tpu' .*'auto', 'cpu', 'cuda' or 'cuda:N'"),
    ("dtypes", "[fp32, int3]", r"dtypes=.*one of 'fp32', 'bf16', 'fp16'"),
    ("dtypes", "[", r"dtypes='\['"),
    ("model_name", "gpt2-smal", r"model_name='gpt2-smal' .*'gpt2-small', 'tiny-gpt2', 'smollm2-135m'"),
    ("ttft_slo_ms", -1, r"ttft_slo_ms=-1 .*a number >= 0 or None"),
    ("ttft_slo_ms", float("nan"), r"ttft_slo_ms=nan"),
])
def test_bad_values_name_the_parameter_the_value_and_what_is_right(name, value, message):
    with pytest.raises(ValueError, match=message):
        params.check(ns(**{name: value}), SPEC)


def test_cuda_without_a_gpu_is_refused_clearly(monkeypatch):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(ValueError, match=r"device='cuda:1' .*CUDA is not available"):
        params.check(ns(device="cuda:1"), SPEC)


@pytest.mark.parametrize("given, expected", [
    ("[16, 128]", [16, 128]), ("16,128", [16, 128]), (" 16 , 128 ", [16, 128]), ("(16, 128)", [16, 128]),
    (16, [16]), ("16", [16]), ((16, 128), [16, 128]),
])
def test_a_list_from_papermill_p_is_parsed_never_read_character_by_character(given, expected):
    assert params.check(ns(contexts=given), SPEC).contexts == expected


def test_dtype_lists_from_strings():
    assert params.check(ns(dtypes="fp32,bf16"), SPEC).dtypes == ["fp32", "bf16"]
    assert params.check(ns(dtypes="['fp16']"), SPEC).dtypes == ["fp16"]
    assert params.check(ns(dtypes="fp32"), SPEC).dtypes == ["fp32"]
    # names left unquoted, as `papermill -p dtypes [fp32, bf16]` passes them (the hostile pass after d3d7a80)
    assert params.check(ns(dtypes="[fp32, bf16]"), SPEC).dtypes == ["fp32", "bf16"]
    assert params.check(ns(dtypes="[bf16]"), SPEC).dtypes == ["bf16"]


def test_zero_is_a_value_not_the_default():
    assert params.check(ns(ttft_slo_ms=0), SPEC).ttft_slo_ms == 0
    assert params.check(ns(ttft_slo_ms=None), SPEC).ttft_slo_ms is None


def test_quick_mode_shrinks_the_chapters_values_and_says_exactly_what_changed():
    lines = []
    P = params.check(ns(), SPEC, quick=True, log=lines.append)
    assert (P.runs, P.contexts, P.model_name) == (2, [16, 128], "tiny-gpt2")
    assert lines == ["quick mode changed: runs 3 -> 2; contexts [16, 128, 512, 960] -> [16, 128]; "
                     "model_name 'gpt2-small' -> 'tiny-gpt2'"]


def test_quick_mode_never_grows_a_value_and_is_silent_when_nothing_changes():
    lines = []
    P = params.check(ns(runs=1, contexts=[16], model_name="tiny-gpt2"), SPEC, quick=True, log=lines.append)
    assert (P.runs, P.contexts) == (1, [16]) and lines == []


def test_quick_mode_keeps_what_the_reader_set(tmp_path, monkeypatch):
    chapter = tmp_path / "notebooks" / "03_demo.py"
    chapter.parent.mkdir()
    chapter.write_text('# %% [markdown]\n# text\n\n# %% tags=["parameters"]\nruns = 3\n'
                       'contexts = [16, 128, 512, 960]  # comment\nmodel_name = "gpt2-small"\ndevice = "auto"\n'
                       'dtypes = None\nttft_slo_ms = None\n\n# %%\nx = 1\n')
    monkeypatch.setattr(params, "REPO_ROOT", tmp_path)
    assert params.defaults("03_demo")["contexts"] == [16, 128, 512, 960]
    lines = []
    P = params.check(ns(contexts=[1000, 16, 64], model_name="smollm2-135m"), SPEC, quick=True,
                     chapter="03_demo", log=lines.append)
    # the reader's own list is truncated (not replaced), the reader's model is kept
    assert P.contexts == [1000, 16] and P.model_name == "smollm2-135m" and P.runs == 2
    assert lines == ["quick mode changed: runs 3 -> 2; contexts [1000, 16, 64] -> [1000, 16]"]
    assert P.reader_set == ["contexts", "model_name"]
    assert P.given["contexts"] == [1000, 16, 64]


def test_a_missing_parameter_is_named():
    namespace = ns()
    del namespace["runs"]
    with pytest.raises(ValueError, match="parameter runs is not defined"):
        params.check(namespace, SPEC)


def test_pairs_text_and_booleans():
    spec = {"pairs": params.listof(params.tuple_of(params.integer(min=1), params.integer(min=1))),
            "question": params.text(), "flag": params.boolean(), "slack": params.number(min=1)}
    P = params.check({"pairs": "[(16, 64), (128, 8)]", "question": "Why?", "flag": "true", "slack": 1},
                     spec)
    assert P.pairs == [(16, 64), (128, 8)] and P.flag is True
    with pytest.raises(ValueError, match=r"pairs=\[\(16, 0\)\]"):
        params.check({"pairs": [(16, 0)], "question": "q", "flag": False, "slack": 1}, spec)
    with pytest.raises(ValueError, match=r"question=42 .*non-empty string"):
        params.check({"pairs": [(1, 1)], "question": 42, "flag": False, "slack": 1}, spec)
    with pytest.raises(ValueError, match=r"slack=0.5 .*a number >= 1"):
        params.check({"pairs": [(1, 1)], "question": "q", "flag": False, "slack": 0.5}, spec)


def test_choice_from_a_callers_list():
    spec = {"course_gpu": params.choice({"H100 SXM": 1, "A100 80GB": 2})}
    with pytest.raises(ValueError, match=r"course_gpu='H100' .*'H100 SXM', 'A100 80GB'"):
        params.check({"course_gpu": "H100"}, spec)


def test_the_device_is_resolved_once_into_a_torch_device():
    P = params.check(ns(device="CPU "), SPEC)
    assert P.device == torch.device("cpu")
    assert params.check(ns(device=torch.device("cpu")), SPEC).device == torch.device("cpu")


def test_threads_are_whole_numbers_from_the_check_on():
    from lib.device import ALL_THREADS
    spec = {"device": params.device(), "threads": params.threads()}
    assert params.check({"device": "cpu", "threads": None}, spec).threads == sorted({ALL_THREADS, 1}, reverse=True)
    assert params.check({"device": "cpu", "threads": "1"}, spec).threads == [1]
    one = {"device": params.device(), "threads": params.threads(many=False)}
    assert params.check({"device": "cpu", "threads": None}, one).threads == ALL_THREADS
    with pytest.raises(ValueError, match=r"threads=\[0\] is not valid; expected .*>= 1"):
        params.check({"device": "cpu", "threads": [0]}, spec)
    with pytest.raises(ValueError, match=r"threads=\[1, 1\] is not valid \(1 repeated\)"):
        params.check({"device": "cpu", "threads": [1, 1]}, spec)
    with pytest.raises(ValueError, match="needs the device parameter"):
        params.check({"threads": None}, {"threads": params.threads()})


def test_lists_with_a_size_and_an_order():
    rule = {"lengths": params.int_list(min=1, min_items=2, max_items=3, ascending=True)}
    assert params.check({"lengths": [64, 1, 16]}, rule).lengths == [1, 16, 64]
    with pytest.raises(ValueError, match=r"lengths=\[16\] is not valid \(1 item\(s\) given\); expected a list of 2 to 3"):
        params.check({"lengths": [16]}, rule)
    with pytest.raises(ValueError, match=r"4 item\(s\) given"):
        params.check({"lengths": [1, 2, 3, 4]}, rule)


def test_bounds_and_sizes_read_as_a_reader_would_say_them():
    """The hostile pass of 2026-12-05: 'a number <= 64 above 0' and 'a list of at least 0 distinct items'."""
    rules = {"rate": params.number(above=0, max=64), "engines": params.listof(params.choice(["a", "b"]), min_items=0)}
    with pytest.raises(ValueError, match=r"rate=-1 is not valid; expected a number above 0 and <= 64$"):
        params.check({"rate": -1, "engines": []}, rules)
    with pytest.raises(ValueError, match=r"expected a list of zero or more distinct items"):
        params.check({"rate": 1, "engines": ["c"]}, rules)


def _chapter_7_checks(**changes) -> None:
    """Chapter 7's parameter and check cells, run as a reader's edit of the parameters would run them."""
    source = (paths.REPO_ROOT / "notebooks" / "07_over_the_wire.py").read_text()
    cells = source[:source.index("# %%\nimport http.server")]
    namespace = {"__name__": "chapter"}
    exec(compile(cells, "07_over_the_wire.py", "exec"), namespace)  # the shipped values first
    namespace.update(changes)
    checks = cells[cells.index("# %%\nimport json"):]
    exec(compile(checks, "07_over_the_wire.py", "exec"), namespace)


def test_chapter_7_refuses_arrival_rates_its_budget_cannot_wait_for():
    """Issue 30: arrival_rates=[0.001] was accepted and the open loop slept past 1,020 s; now one line says the
    slowest rate the budget allows."""
    _chapter_7_checks(arrival_rates=[1.0, 2.0])  # fast enough: 24 arrivals in about 24 s of the 60
    with pytest.raises(ValueError, match=r"arrival_rates=\[0\.001\]: at 0\.001 requests/s, 24 arrivals take about "
                                         r"24,000 s, past arrivals_budget_s=60; use rates of at least 0\.4 per second"):
        _chapter_7_checks(arrival_rates=[0.001])


def _chapter_4_checks(**changes) -> None:
    """Chapter 4's parameter and check cells, run as a reader's edit of the parameters would run them."""
    source = (paths.REPO_ROOT / "notebooks" / "04_request_split.py").read_text()
    cells = source[:source.index("# %% [markdown]\n# The model, checked against every pair")]
    namespace = {"__name__": "chapter"}
    params_cell = cells[:cells.index("# %%\nimport ast")]
    exec(compile(params_cell, "04_request_split.py", "exec"), namespace)  # the shipped values first
    namespace.update(changes)
    exec(compile(cells[cells.index("# %%\nimport ast"):], "04_request_split.py", "exec"), namespace)


def test_chapter_4_names_the_workload_whose_lengths_are_wrong():
    """The hostile pass after d3d7a80: archetypes with a zero length got only "expected a non-empty dict"."""
    _chapter_4_checks()  # the shipped values pass
    with pytest.raises(ValueError, match=r"\('chat': \(100, 0\) is not a \(prompt tokens, output tokens\) pair of "
                                         r"whole numbers from 1 to 1024\); expected a non-empty dict"):
        _chapter_4_checks(archetypes={"chat": (100, 0)})


@pytest.mark.parametrize("quick", ["False", 1, None])
def test_quick_must_be_true_or_false(quick):
    """The hostile pass after bbc6bbe: papermill -r quick False passed the text 'False', which ran quick mode and
    wrote "quick": "False" into the provenance a teacher's gather then refused."""
    with pytest.raises(ValueError, match=r"parameter quick=.* is not valid; expected True or False"):
        params.check({"n": 1}, {"n": params.integer(min=1)}, quick=quick)
