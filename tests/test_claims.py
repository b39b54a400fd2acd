"""The claims register and its predicates: each predicate goes both ways on data built for it."""

import math

import pytest

from lib import claims
from lib.claims import Claims


def test_decide_records_the_verdict_and_returns_the_matching_sentence():
    register = Claims()
    yes = register.decide("a", "A holds.", True, if_held="it held", if_not="it did not", predicted="1 ms",
                          measured="1.1 ms", evidence="run 1")
    no = register.decide("b", "B holds.", False, if_held="it held", if_not="it did not, because x")
    skip = register.decide("c", "C holds.", None, if_held="x", if_not="y", if_not_measured="not in quick mode")
    assert yes == "**Held:** it held"
    assert no == "**Did not hold on this machine:** it did not, because x"
    assert skip == "**Not measured:** not in quick mode"
    frame = register.frame()
    assert list(frame.columns) == ["claim", "statement", "predicted", "measured", "verdict", "evidence"]
    assert list(frame.verdict) == [claims.HELD, claims.NOT_HELD, claims.NOT_MEASURED]
    assert register.summary() == "1 of 3 claims held, 1 not measured"
    with pytest.raises(ValueError, match="unique"):
        register.decide("a", "again", True, if_held="", if_not="")


def test_empty_register_has_the_columns():
    assert list(Claims().frame().columns) == ["claim", "statement", "predicted", "measured", "verdict", "evidence"]


def test_invariant_fails_only_when_broken():
    claims.invariant(1 + 1 == 2, "arithmetic")
    with pytest.raises(claims.InvariantBroken, match="parts"):
        claims.invariant(False, "the parts do not add up")


@pytest.mark.parametrize("args, expected", [
    ((1.5, 1.0, 2.0), True), ((2.5, 1.0, 2.0), False), ((0.6, 1.0, 2.0), True), ((0.4, 1.0, 2.0), False)])
def test_within(args, expected):
    assert claims.within(*args) is expected


def test_within_refuses_nonsense():
    for args in ((1.0, 1.0, 0.5), (0.0, 1.0, 2.0), (math.nan, 1.0, 2.0)):
        with pytest.raises(ValueError):
            claims.within(*args)


def test_at_most_at_least():
    assert claims.at_most(1, 2) and not claims.at_most(3, 2)
    assert claims.at_least(3, 2) and not claims.at_least(1, 2)


def test_increasing_with_and_without_noise():
    assert claims.increasing([1, 2, 3])
    assert not claims.increasing([1, 3, 2])
    assert claims.increasing([1, 3, 2.9], tolerance=0.05)
    with pytest.raises(ValueError):
        claims.increasing([1])


def test_flat():
    assert claims.flat([10, 10.5, 10.9], rel=0.1)
    assert not claims.flat([10, 12], rel=0.1)
    with pytest.raises(ValueError):
        claims.flat([0, 1], rel=0.1)


def test_ranges_overlap():
    assert claims.ranges_overlap(1, 2, 1.5, 3)
    assert not claims.ranges_overlap(1, 2, 2.5, 3)
    with pytest.raises(ValueError):
        claims.ranges_overlap(2, 1, 0, 3)
