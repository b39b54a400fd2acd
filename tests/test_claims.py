"""The claims register and its predicates: declared once, decided on the whole spread of the runs, each predicate
going every way on data built for it."""

import math

import numpy as np
import pandas as pd
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
    assert r.decide("a", HELD, predicted="1 ms", measured="1.1 ms", evidence="run 1", x=3) == "It held at 3"
    assert r.decide("b", None) == "B holds. This run does not decide it: not in quick mode"
    frame = r.frame()
    assert list(frame.columns) == ["claim", "statement", "predicted", "measured", "verdict", "evidence"]
    assert list(frame.verdict) == [HELD, NOT_MEASURED] and frame.statement.tolist() == ["A holds.", "B holds."]
    assert r.summary() == "2 claims: 1 held, 1 not measured"
    assert r.evidence().to_dict("records") == [
        {"Claim": "A holds.", "Predicted": "1 ms", "Measured": "1.1 ms", "Verdict": HELD, "From": "run 1"},
        {"Claim": "B holds.", "Predicted": "", "Measured": "", "Verdict": NOT_MEASURED, "From": ""}]


def test_a_finding_is_written_once_and_each_outcome_adds_its_tail():
    def declared():
        r = Claims()
        r.claim("c", "C is fast.", finding="the step took {t} ms", held=", under the {limit} ms allowed.",
                not_held="against {limit} allowed: {why}.", unresolved="- the interval reaches {limit}.",
                not_measured="no step in quick mode.")
        return r
    values = dict(t=3, limit=4, why="the cache")
    assert declared().decide("c", HELD, **values) == "The step took 3 ms, under the 4 ms allowed."
    assert declared().decide("c", NOT_HELD, **values) == "The step took 3 ms against 4 allowed: the cache."
    assert declared().decide("c", UNRESOLVED, **values) == "The step took 3 ms - the interval reaches 4."
    assert declared().decide("c", None) == "C is fast. This run does not decide it: no step in quick mode."
    with pytest.raises(ValueError, match="needs t"):  # the finding's placeholders are the outcome's too
        declared().decide("c", HELD, limit=4)
    with pytest.raises(ValueError, match="unresolved tail"):
        Claims().claim("d", "D.", finding="it took {t}", held=".", not_held=".")


def test_a_claim_declared_by_its_statement_is_recorded_and_its_words_picked():
    r = Claims()
    r.claim("e", "E holds.")
    r.claim("f", "F holds.")
    words = dict(held=", as predicted.", not_held=": the cache.", unresolved=": leaning high.")
    assert claims.pick(r.record("e", NOT_HELD, predicted="1 ms", measured="2 ms", evidence="t.csv"), **words) == ": the cache."
    assert r.record("f", None, evidence="quick mode") == NOT_MEASURED
    assert r.frame().set_index("claim").loc["f"].evidence == "quick mode"
    assert r.evidence().iloc[0].to_dict() == {"Claim": "E holds.", "Predicted": "1 ms", "Measured": "2 ms",
                                             "Verdict": NOT_HELD, "From": "t.csv"}
    with pytest.raises(ValueError, match="no words"):
        claims.pick(NOT_MEASURED, **words)
    assert r.undecided("f", "quick mode.") == "F holds. This run does not decide it: quick mode."
    with pytest.raises(ValueError, match="say why"):
        r.undecided("f", " ")
    with pytest.raises(ValueError, match="already decided"):
        r.record("e", HELD)
    with pytest.raises(ValueError, match="decide it with decide"):
        register().record("a", HELD)
    with pytest.raises(ValueError, match="verdict must be"):
        claims.pick("maybe", **words)


def test_an_unresolved_verdict_has_its_own_sentence():
    r = register()
    text = r.decide("a", UNRESOLVED, predicted="10 ms", measured="9-12 ms", x=1)
    assert text.startswith("The 95 % interval") and "(9-12 ms) lies partly inside and partly outside what was predicted (10 ms" in text
    assert r.summary() == "2 claims: 1 not resolved, 1 not measured"


def test_a_claim_never_decided_is_recorded_as_not_measured():
    r = register()
    r.decide("a", NOT_HELD, x=2)
    assert r.summary() == "2 claims: 1 did not hold, 1 not measured"
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


def test_the_interval_is_the_medians_and_one_slow_run_cannot_move_it():
    """Nine runs: the 95 % interval of the median leaves out the fastest and the slowest run, so one interruption
    (a run of 13 ms among runs of 3.0-3.4 ms) cannot stretch it to itself; three runs have no such interval, only
    their range."""
    quiet = [3.0, 3.3, 3.1, 3.2, 3.4, 3.2, 3.1, 3.3, 3.2]
    slow = quiet[:-1] + [13.0]
    assert (Spread.of(quiet).low, Spread.of(quiet).high) == (3.1, 3.3)
    assert (Spread.of(slow).low, Spread.of(slow).high) == (3.1, 3.4)  # one order statistic along, not to 13
    assert claims.within(Spread.of(slow), 3.0, claims.PREDICTED_TIME) == HELD
    assert claims.within(Spread.of([3.0, 3.3, 13.0]), 3.0, claims.PREDICTED_TIME) == UNRESOLVED  # the old rule's case
    # a systematic miss is still a miss, however many runs
    assert claims.within(Spread.of([x * 1.5 for x in slow]), 3.0, claims.PREDICTED_TIME) == NOT_HELD


@pytest.mark.parametrize("n, k", [(1, 1), (5, 1), (8, 1), (9, 2), (11, 2), (12, 3), (17, 5), (20, 6)])
def test_the_interval_takes_the_order_statistics_of_the_sign_test(n, k):
    low, mid, high = claims.median_interval(range(1, n + 1))
    assert (low, high) == (k, n + 1 - k) and mid == (n + 1) / 2


def test_the_interval_covers_the_median_as_often_as_it_says():
    """Drawn from a lopsided distribution (a shared machine's: most runs fast, a few very slow), the interval
    covers the true median at least 95 % of the time."""
    rng = np.random.default_rng(0)
    true_median = 1.0 + np.log(2) * 0.05  # of 1 + exponential(0.05), before the slow spells
    covered = 0
    for _ in range(2000):
        runs = 1.0 + rng.exponential(0.05, 11)
        runs[rng.random(11) < 0.05] *= 3  # interruptions
        low, _, high = claims.median_interval(runs)
        covered += low <= true_median <= high
    assert covered / 2000 >= 0.94


def test_paired_runs_decide_a_difference_that_the_two_intervals_cannot():
    """Two configurations measured in the same nine runs: each run is slow or fast for both, so their intervals
    overlap, but every run's own difference is about 2 ms."""
    base = [30.0, 31.0, 35.0, 30.5, 40.0, 30.2, 33.0, 30.8, 31.5]
    a, b = Spread.of(base), Spread.of([x + 2 for x in base])
    assert claims.below(a, b) == UNRESOLVED
    difference = Spread.paired(b, a, lambda x, y: x - y)
    assert difference.low == pytest.approx(2) and difference.high == pytest.approx(2)
    assert claims.within(difference, 2.0, claims.PREDICTED_TIME) == HELD
    with pytest.raises(ValueError, match="same runs"):
        Spread.paired(a, Spread.of([1, 2]), lambda x, y: x - y)


def test_geomean_over_points_decides_what_a_conjunction_could_not():
    """Eleven points, each 1.1x its prediction in every run, one of them noisy (0.9x to 1.6x): the conjunction of
    per-point verdicts was unresolved; the runs' geometric mean is within the tolerance, and a point wholly
    outside would show in it."""
    rng = np.random.default_rng(1)
    per_run = [[1.1] * 10 + [float(rng.uniform(0.9, 1.6))] for _ in range(9)]
    noisy_point = Spread.of(r[-1] for r in per_run)
    assert claims.within(noisy_point, 1.0, claims.PREDICTED_TIME) != HELD
    ratio = Spread.of(claims.geomean(r) for r in per_run)
    assert claims.within(ratio, 1.0, claims.PREDICTED_TIME) == HELD
    assert claims.within(Spread.of(claims.geomean([1.5] * 11) for _ in range(9)), 1.0, claims.PREDICTED_TIME) == NOT_HELD
    with pytest.raises(ValueError):
        claims.geomean([1.0, 0.0])


def test_pooled_and_extreme_points_keep_each_points_interval():
    points = {1: Spread(1.0, 1.1, 1.2), 2: Spread(1.05, 1.1, 1.6), 4: Spread(1.3, 1.4, 1.5)}
    pooled = claims.geomean_of(points.values())
    assert pooled.mid == pytest.approx(claims.geomean([1.1, 1.1, 1.4]))
    assert pooled.low == pytest.approx(claims.geomean([1.0, 1.05, 1.3]))
    worst = claims.extreme(points.values())
    assert (worst.low, worst.mid, worst.high) == (1.3, 1.4, 1.6)
    assert claims.at_most(worst, 1.25) == NOT_HELD  # one point wholly beyond decides "every point"
    assert claims.extreme(points.values(), largest=False).low == 1.0
    out, straddling = claims.outside(points, 0.8, 1.25)
    assert out == [4] and straddling == [2]


def test_a_trend_is_its_fitted_slope_run_by_run():
    prompts = [16, 128, 256, 512, 768, 1000]
    rising = pd.DataFrame([dict(run=r, prompt=p, ttft=t * (1 + 0.4 * (r == 2 and p == 512)))
                           for r in (1, 2, 3) for p, t in zip(prompts, [101, 208, 379, 885, 1089, 1560])])
    slope = claims.trend(rising, "prompt", "ttft")
    assert slope.n == 3 and claims.at_least(slope, 0.5) == HELD  # one noisy point does not undo a rise
    flat = rising.assign(ttft=lambda d: 50 + (d.run * 7 + d.prompt) % 3)
    assert claims.within(claims.trend(flat, "prompt", "ttft") + 1, 1.0, 1.05) == HELD
    falling = rising.assign(ttft=lambda d: 1e5 / d.prompt)
    assert claims.at_least(claims.trend(falling, "prompt", "ttft"), 0) == NOT_HELD
    with pytest.raises(ValueError, match="no column"):
        claims.trend(rising, "prompt", "tpot")
    with pytest.raises(ValueError, match="positive"):
        claims.trend(rising.assign(ttft=-1.0), "prompt", "ttft")


def test_theil_sen_is_the_median_pair_slope_and_one_wild_point_barely_moves_it():
    rng = np.random.default_rng(2)
    x = np.repeat([16, 128, 256, 512, 768, 1000], 3).astype(float)
    y = 30 + 0.01 * x + rng.normal(0, 0.3, len(x))
    clean = claims.theil_sen(x, y)
    assert clean.low < 0.01 < clean.high and clean.high - clean.low < 0.004
    y[5] += 40  # one request 40 ms slow
    wild = claims.theil_sen(x, y)
    assert abs(wild.mid - clean.mid) < 0.002 and claims.at_least(wild, 0.0) == HELD
    flat = claims.theil_sen(x, 30 + rng.normal(0, 0.3, len(x)))
    assert flat.low < 0 < flat.high
    assert claims.theil_sen([1, 2, 4, 8], [3, 6, 12, 24], log=True).mid == pytest.approx(1.0)
    with pytest.raises(ValueError):
        claims.theil_sen([1, 1, 1], [1, 2, 3])


def test_settle_measures_again_until_decided_or_out_of_budget():
    runs = [5.0, 1.0, 9.0]
    decided = lambda: claims.within(Spread.of(runs), 3.0, 2.0) != UNRESOLVED  # noqa: E731
    assert not decided()
    made = claims.settle(lambda: runs.append(3.0), decided, budget_s=10, max_runs=20)
    assert decided() and made == len(runs) - 3 and claims.within(Spread.of(runs), 3.0, 2.0) == HELD
    stuck = [1.0, 9.0]
    assert claims.settle(lambda: stuck.append(5.0) or stuck.append(9.0), lambda: False, budget_s=10, max_runs=4) == 4
    assert claims.settle(lambda: None, lambda: False, budget_s=0.0, max_runs=4) <= 1
    with pytest.raises(ValueError):
        claims.settle(lambda: None, lambda: False, budget_s=-1, max_runs=1)


def test_leaning_says_which_side_the_median_is_on():
    assert claims.leaning(Spread(0.8, 1.1, 1.4), 0.9, 1.25) == "on the held side"
    assert claims.leaning(Spread(1.0, 1.3, 1.5), 0.8, 1.25) == "above what would hold"


def test_ranges_overlap():
    assert claims.ranges_overlap(1, 2, 1.5, 3)
    assert not claims.ranges_overlap(1, 2, 2.5, 3)
    with pytest.raises(ValueError):
        claims.ranges_overlap(2, 1, 0, 3)


def test_tolerances_are_named_once():
    assert claims.PREDICTED_TIME >= 1 and claims.PREDICTED_RATIO >= 1 and 0 < claims.NOISE < 1
    assert claims.PREDICTED_LENGTH >= 1 and claims.ACROSS_MACHINES >= 1 and 0.5 < claims.CONFIDENCE < 1


def test_within_a_predicted_spread():
    """A prediction from ceilings with a spread of their own allows its whole range, times the tolerance."""
    predicted = Spread(1.0, 1.0, 1.2)
    assert claims.within(Spread(1.3, 1.4, 1.45), predicted, 1.25) == HELD       # under 1.2 x 1.25
    assert claims.within(Spread(1.3, 1.4, 1.45), 1.0, 1.25) == NOT_HELD          # the fastest alone: too slow
    assert claims.within(Spread(1.4, 1.5, 1.6), predicted, 1.25) == UNRESOLVED
    assert claims.within(Spread(0.5, 0.6, 0.7), predicted, 1.25) == NOT_HELD
    assert claims.allowed(predicted, 1.25) == pytest.approx((1.0 / 1.25, 1.2 * 1.25))  # what within allowed here
    assert claims.allowed(2.0, 1.25) == pytest.approx((1.6, 2.5))


def test_a_finding_starts_with_a_capital_unless_it_starts_with_a_name():
    def sentence(who: str) -> str:
        r = Claims()
        r.claim("x", "X holds.", held="{who} took 1.5x its prediction.", not_held="no")
        return r.decide("x", HELD, who=who)

    assert sentence("the step") == "The step took 1.5x its prediction."
    assert sentence("bf16, 2 threads") == "bf16, 2 threads took 1.5x its prediction."
    assert sentence("vLLM") == "vLLM took 1.5x its prediction."
    assert sentence("gpt2-large") == "gpt2-large took 1.5x its prediction."


def test_a_finding_says_how_it_stood_against_its_prediction():
    r = Claims()
    for c in "abcd":
        r.claim(c, f"{c.upper()} holds.", held="yes", not_held="no")
    r.decide("a", HELD, predicted="10 ms")
    r.decide("b", NOT_HELD, predicted="10 ms")
    r.decide("c", UNRESOLVED, predicted="10 ms")
    assert [r.against(c) for c in "abcd"] == [
        "as predicted (10 ms)", "where 10 ms was predicted", "against 10 ms predicted: this run's interval reaches both sides of it",
        "not measured here"]
    assert r.verdict("d") == NOT_MEASURED and r.verdict("a") == HELD
    with pytest.raises(ValueError, match="never declared"):
        r.verdict("e")


def test_a_summary_tables_three_columns_read_back_as_one_spread_from_any_kind_of_row():
    from lib.timing import median_range

    runs = pd.DataFrame({"way": ["a"] * 9, "ttft_ms": [100, 101, 102, 103, 104, 105, 106, 107, 400]})
    table = median_range(runs, "way", ["ttft_ms"])
    expected = Spread.of(runs.ttft_ms)
    for row in (table.iloc[0], next(table.itertuples()), table.iloc[0].to_dict()):
        got = Spread.in_row(row, "ttft_ms")
        assert (got.low, got.mid, got.high) == (expected.low, expected.mid, expected.high)
        seconds = Spread.in_row(row, "ttft_ms", 1e-3)  # a table's milliseconds as the seconds a time is kept in
        assert seconds.mid == pytest.approx(0.104) and seconds.high == pytest.approx(expected.high / 1e3)
    with pytest.raises(ValueError, match="tpot_ms_low"):
        Spread.in_row(table.iloc[0], "tpot_ms")


def test_an_opening_counts_the_misses_in_one_wording():
    """Every chapter's opening counts its misses with :meth:`Claims.misses`: failed first, then left open, the noun
    said once; nothing when every claim held."""
    def register_of(*verdicts):
        r = Claims()
        for i, v in enumerate(verdicts):
            r.claim(f"c{i}", "A statement.")
            r.record(f"c{i}", v, predicted="1", measured="2", evidence="a table")
        return r
    assert register_of(HELD, HELD).misses() == ""
    assert register_of(HELD, NOT_HELD).misses() == "One prediction failed: see the evidence table."
    assert register_of(UNRESOLVED).misses() == "One prediction was left open: see the evidence table."
    assert (register_of(NOT_HELD, NOT_HELD, UNRESOLVED).misses()
            == "Two predictions failed and one was left open: see the evidence table.")
    assert register_of(NOT_HELD, UNRESOLVED, UNRESOLVED).misses() == \
        "One prediction failed and two were left open: see the evidence table."


def test_an_opening_names_each_miss_when_the_chapter_names_its_claims():
    """Chapters 8 and 9 name what failed in their openings ("Two predictions failed: A and B. Left open: C."), a
    claim without a reader's name by its id in words; nothing when every claim held."""
    r = Claims()
    for cid, v in (("step_follows_its_bytes", NOT_HELD), ("machine_kept_its_pace", UNRESOLVED),
                   ("fp8_cache_is_no_faster", NOT_HELD), ("speculation_is_greedy", HELD)):
        r.claim(cid, "A statement.")
        r.record(cid, v, predicted="1", measured="2", evidence="a table")
    names = {"step_follows_its_bytes": "the steps' time from their bytes", "machine_kept_its_pace": "the machine's speed"}
    assert r.misses(names) == ("Two predictions failed: the steps' time from their bytes and fp8 cache is no faster. "
                               "Left open: the machine's speed.")
    assert r.misses(names, only_named=True) == "One prediction failed: the steps' time from their bytes. Left open: the machine's speed."
    held = Claims()
    held.claim("a", "A statement.")
    held.record("a", HELD, predicted="1", measured="1", evidence="a table")
    assert held.misses(names) == ""
