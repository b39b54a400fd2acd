"""The one regime rule on synthetic predictions: each label reached, on data made for it."""

import pytest

import synthetic
from lib.claims import Spread
from lib.costmodel import CostModel
from lib.machine import MODELS
from lib.regime import REGIME_SLACK, regime

MODEL = CostModel(synthetic.ceilings(), "gpt2-small", MODELS["gpt2-small"][0].with_dtype("fp32"), "fp32", 2)


def test_near_its_prediction_a_pass_is_in_its_largest_terms_regime():
    short, long_ = MODEL.prefill(1), MODEL.prefill(1024)
    assert regime(short.best * 1.1, short).label == "memory-bound"
    assert regime(long_.best * 1.1, long_).label == "compute-bound"
    big = MODEL.decode(512, batch=64)
    large = regime(Spread(big.best, big.best * 1.05, big.best * 1.2), big)
    assert large.term == "page faults" and large.label == "page-faults-bound"  # not the memory: the kernel


def test_far_above_its_prediction_a_pass_is_unexplained():
    p = MODEL.decode(16)
    r = regime(p.median * (REGIME_SLACK + 0.1), p)
    assert r.label == "unexplained overhead" and not r.explained and r.ratio > REGIME_SLACK


def test_below_its_floor_means_a_ceiling_is_wrong():
    p = MODEL.prefill(1)
    assert regime(p.floor * 0.8, p).label == "below its floor: a ceiling is wrong"
    assert regime(p.floor * 0.95, p, floor_spread=0.1).label != "below its floor: a ceiling is wrong"


def test_nonsense_is_refused():
    p = MODEL.prefill(1)
    with pytest.raises(ValueError):
        regime(0.0, p)
    with pytest.raises(ValueError):
        regime(1.0, p, slack=0.5)


def test_a_pass_that_took_no_page_faults_is_not_below_its_floor():
    """Expected page faults are a count, not a ceiling: a batched step the allocator served from freed memory runs
    well under its a-priori price without any ceiling being wrong."""
    big = MODEL.decode(512, batch=64)
    assert big.dominant.name == "page faults"
    without = big.best - big.term("page faults").best
    assert big.floor == max(t.best for t in big.terms if t.name != "page faults")
    assert not regime(without, big).label.startswith("below")


def test_a_few_row_pass_left_of_the_balance_point_is_bound_by_its_kernel_not_its_arithmetic():
    long_ = MODEL.prefill(1024)
    assert long_.dominant.limit == "compute"
    at = long_.best * 1.1
    assert regime(at, long_, intensity=5.0, balance=12.0).label == "few-row-kernel-bound"
    assert regime(at, long_, intensity=300.0, balance=12.0).label == "compute-bound"
    assert regime(at, long_).label == "compute-bound"  # no balance point given: the largest term's limit
    short = MODEL.prefill(1)
    assert regime(short.best * 1.1, short, intensity=0.5, balance=12.0).label == "memory-bound"  # bytes, not FLOPs
    for bad in (dict(intensity=5.0), dict(balance=12.0), dict(intensity=-1.0, balance=12.0)):
        with pytest.raises(ValueError, match="intensity and balance go together"):
            regime(at, long_, **bad)
