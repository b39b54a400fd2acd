"""The claims register and its predicates: declared once, decided on the whole spread of the runs, each predicate
going every way on data built for it."""

import math

import pytest

from lib import claims
from lib.claims import HELD, NOT_HELD, NOT_MEASURED, UNRESOLVED, Claims, Spread


def register():
    r = Claims()
    r.claim("a", "A holds.", held="it held at {x}", not_held="it did not: {x}")
    r.claim("b", "B holds.", held="yes", not_held="no, because {why}", not_measured="not in quick mode")
    return r


def test_a_claim_is_declared_once_and_decided_with_values():
    r = register()
    assert r.decide("a", HELD, predicted="1 ms", measured="1.1 ms", evidence="run 1", x=3) == "**Held:** it held at 3"
    assert r.decide("b", None) == "**Not measured:** not in quick mode"
    frame = r.frame()
    assert list(frame.columns) == ["claim", "statement", "predicted", "measured", "verdict", "evidence"]
    assert list(frame.verdict) == [HELD, NOT_MEASURED] and frame.statement.tolist() == ["A holds.", "B holds."]
    assert r.summary() == "1 of 1 decided claims held, 1 not measured"


def test_an_unresolved_verdict_has_its_own_sentence():
    r = register()
    text = r.decide("a", UNRESOLVED, predicted="10 ms", measured="9-12 ms", x=1)
    assert text.startswith("**Not resolved by this run:**") and "9-12 ms against 10 ms" in text
    assert r.summary() == "0 of 1 decided claims held, 1 not resolved, 1 not measured"


def test_a_claim_never_decided_is_recorded_as_not_measured():
    r = register()
    r.decide("a", NOT_HELD, x=2)
    row = r.frame().set_index("claim").loc["b"]
    assert row.verdict == NOT_MEASURED and row.evidence == "not in quick mode"


def test_mistakes_are_refused():
    r = register()
    with pytest.raises(ValueError, match="unique"):
        r.claim("a", "Again.", held="", not_held="")
    with pytest.raises(ValueError, match="no placeholders"):
        r.claim("c", "C holds at {x} ms.", held="", not_held="")
    with pytest.raises(ValueError, match="never declared"):
        r.decide("z", HELD)
    with pytest.raises(ValueError, match="needs x"):
        r.decide("a", HELD)
    r.decide("b", HELD)
    with pytest.raises(ValueError, match="already decided"):
        r.decide("b", HELD)
    with pytest.raises(ValueError, match="verdict must be one of"):
        r.decide("a", "maybe", x=1)


def test_invariant_fails_only_when_broken():
    claims.invariant(1 + 1 == 2, "arithmetic")
    with pytest.raises(claims.InvariantBroken, match="parts"):
        claims.invariant(False, "the parts do not add up")


@pytest.mark.parametrize("measured, expected", [
    (Spread(1.2, 1.5, 1.9), HELD), (Spread(2.1, 2.5, 3.0), NOT_HELD), (Spread(0.3, 0.4, 0.45), NOT_HELD),
    (Spread(1.5, 1.9, 2.3), UNRESOLVED), (1.0, HELD)])
def test_within_on_a_spread(measured, expected):
    assert claims.within(measured, 1.0, 2.0) == expected


def test_within_refuses_nonsense():
    for args in ((1.0, 1.0, 0.5), (0.0, 1.0, 2.0), (math.nan, 1.0, 2.0)):
        with pytest.raises(ValueError):
            claims.within(*args)


def test_at_most_at_least_below():
    assert claims.at_most(Spread(1, 1.5, 2), 2) == HELD and claims.at_most(Spread(2.5, 3, 3.5), 2) == NOT_HELD
    assert claims.at_most(Spread(1, 2, 3), 2) == UNRESOLVED
    assert claims.at_least(3, 2) == HELD and claims.at_least(1, 2) == NOT_HELD
    assert claims.below(Spread(1, 1.5, 2), Spread(3, 4, 5)) == HELD
    assert claims.below(Spread(3, 4, 5), Spread(1, 2, 3)) == NOT_HELD
    assert claims.below(Spread(1, 2, 3.5), Spread(3, 4, 5)) == UNRESOLVED


def test_every_and_some():
    assert claims.every([HELD, HELD]) == HELD and claims.every([HELD, NOT_HELD, UNRESOLVED]) == NOT_HELD
    assert claims.every([HELD, UNRESOLVED]) == UNRESOLVED
    assert claims.some([NOT_HELD, HELD]) == HELD and claims.some([NOT_HELD]) == NOT_HELD
    assert claims.some([NOT_HELD, UNRESOLVED]) == UNRESOLVED
    with pytest.raises(ValueError):
        claims.every([])
    with pytest.raises(ValueError):
        claims.every([NOT_MEASURED])


def test_increasing_and_flat_on_spreads():
    assert claims.increasing([1, 2, 3]) == HELD
    assert claims.increasing([1, 3, 2]) == NOT_HELD
    assert claims.increasing([1, 3, 2.9]) == HELD  # within the 5 % of noise allowed
    assert claims.increasing([Spread(1, 1, 1), Spread(0.9, 1.0, 1.2)], tolerance=0.0) == UNRESOLVED
    with pytest.raises(ValueError):
        claims.increasing([1])
    assert claims.flat([10, 10.5, 10.9], rel=0.1) == HELD
    assert claims.flat([10, 12], rel=0.1) == NOT_HELD
    assert claims.flat([Spread(10, 10, 10), Spread(10.5, 11, 11.5)], rel=0.1) == UNRESOLVED
    with pytest.raises(ValueError):
        claims.flat([0, 1], rel=0.1)


def test_spreads():
    s = Spread.of([3, 1, 2])
    assert (s.low, s.mid, s.high) == (1, 2, 3) and Spread.of([1, 2]).mid == 1.5
    assert (s / 2).high == 1.5 and (Spread(2, 3, 4) / Spread(1, 1, 2)).low == 1
    assert s.text(".0f", "ms") == "2 ms (1–3)" and Spread.at(2).text(".0f", "ms") == "2 ms"
    with pytest.raises(ValueError):
        Spread(2, 1, 3)
    with pytest.raises(ValueError):
        Spread.of([])


def test_ranges_overlap():
    assert claims.ranges_overlap(1, 2, 1.5, 3)
    assert not claims.ranges_overlap(1, 2, 2.5, 3)
    with pytest.raises(ValueError):
        claims.ranges_overlap(2, 1, 0, 3)


def test_tolerances_are_named_once():
    assert claims.PREDICTED_TIME >= 1 and claims.PREDICTED_RATIO >= 1 and 0 < claims.NOISE < 1


def test_within_a_predicted_spread():
    """A prediction from ceilings with a spread of their own allows its whole range, times the tolerance."""
    predicted = Spread(1.0, 1.0, 1.2)
    assert claims.within(Spread(1.3, 1.4, 1.45), predicted, 1.25) == HELD       # under 1.2 x 1.25
    assert claims.within(Spread(1.3, 1.4, 1.45), 1.0, 1.25) == NOT_HELD          # the fastest alone: too slow
    assert claims.within(Spread(1.4, 1.5, 1.6), predicted, 1.25) == UNRESOLVED
    assert claims.within(Spread(0.5, 0.6, 0.7), predicted, 1.25) == NOT_HELD
