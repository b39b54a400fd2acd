"""The one regime rule: each label reached, including a point below every bound."""

import math

import pytest

from lib import roofline
from lib.regime import REGIME_SLACK, regime
from lib.shapes import GPT2_SMALL

TOY = roofline.Hardware("toy", flops=100e9, bandwidth=10e9, source="test")


def test_largest_bound_names_the_regime():
    step = roofline.bound(TOY, roofline.decode_cost(GPT2_SMALL, 1, 512))
    bounds = {"compute": step.t_compute, "memory": step.t_memory, "launch": step.t_memory / 10}
    r = regime(step.t_memory * 1.2, bounds)
    assert (r.label, r.limit, r.explained) == ("memory-bound", "memory", True)
    assert r.ratio == pytest.approx(1.2)
    pre = roofline.bound(TOY, roofline.prefill_cost(GPT2_SMALL, 1024))
    assert regime(pre.time, {"compute": pre.t_compute, "memory": pre.t_memory}).label == "compute-bound"
    assert regime(0.010, {"memory": 0.001, "launch": 0.008}).label == "launch-bound"


def test_far_above_every_bound_is_unexplained():
    r = regime(0.1, {"compute": 0.001, "memory": 0.02, "launch": 0.005})
    assert r.label == "unexplained overhead" and not r.explained and r.ratio == pytest.approx(5)
    assert regime(0.02 * REGIME_SLACK, {"memory": 0.02}).label == "memory-bound"  # the edge is inside


def test_below_every_bound_means_a_ceiling_is_wrong():
    r = regime(0.001, {"compute": 0.004, "memory": 0.005, "launch": 0.002})
    assert r.label == "below a bound: a ceiling is wrong" and r.limit == "memory"
    # below the largest bound only is just as impossible
    assert regime(0.003, {"memory": 0.005, "launch": 0.002}).label.startswith("below a bound")


def test_unknown_bounds_are_skipped_and_nonsense_refused():
    assert regime(0.01, {"compute": math.nan, "memory": 0.008}).limit == "memory"
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="measured time"):
            regime(bad, {"memory": 0.01})
    with pytest.raises(ValueError, match="slack"):
        regime(0.01, {"memory": 0.01}, slack=0.5)
    with pytest.raises(ValueError, match="bound 'memory'"):
        regime(0.01, {"memory": -0.01})
    with pytest.raises(ValueError, match="at least one"):
        regime(0.01, {"compute": math.nan})
