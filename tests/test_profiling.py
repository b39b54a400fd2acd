"""One layer down: a real pass profiled, its operators sorted into the cost model's terms."""

import pytest
import torch

import synthetic
from lib import phases, profiling
from lib.costmodel import CostModel
from lib.machine import MODELS
from lib.models import random_prompt


def test_operators_are_sorted_into_terms():
    assert profiling.term_of("aten::addmm") == "matrices" and profiling.term_of("aten::cat") == "cache copy"
    assert profiling.term_of("aten::_scaled_dot_product_flash_attention_for_cpu") == "attention"
    assert profiling.term_of("aten::layer_norm") == "dispatch"


def test_a_profiled_pass_lands_beside_its_prediction(tiny):
    ids = random_prompt(8, tiny.vocab_size, device=tiny.device)
    ops = profiling.operators(lambda: phases.prefill(tiny, ids), passes=2, device=tiny.device)
    assert {"matrices", "dispatch"} <= set(ops.term)
    assert profiling.BETWEEN in set(ops.operator) and (ops.self_ms >= 0).all()
    model = CostModel(synthetic.ceilings(model="tiny-gpt2"), "tiny-gpt2", MODELS["tiny-gpt2"][0].with_dtype("fp32"),
                      "fp32", 2)
    table = profiling.beside_prediction(ops, model.prefill(8))
    assert set(table.term) == {"matrices", "attention", "cache copy", "copies", "dispatch"}
    assert table.excess_ms.tolist() == sorted(table.excess_ms, reverse=True)
    assert table.profiled_ms.sum() == pytest.approx(ops.self_ms.sum())
    assert (table.calls >= 0).all() and table.set_index("term").calls["matrices"] > 0


def test_the_profilers_own_cost_per_operator_is_measured():
    """A part of many short calls reads long under the profiler: its cost per call is measured, and small."""
    per_call_ms = profiling.cost_per_operator(calls=500)
    assert 0 <= per_call_ms < 0.2  # microseconds, not a fifth of a millisecond
