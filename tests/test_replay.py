"""The replay of chapter 9 against queues computed by hand, and the cost model's mixed step."""

import pytest

from lib import costmodel, machine
from lib.replay import Arrival, Step, priced_step, replay


def cost(step: Step) -> float:
    """A hand-priced step: 0.01 s a prompt token, 0.1 s a decoding sequence."""
    return 0.01 * sum(t for t, _ in step.pieces) + 0.1 * len(step.contexts)


def times(served) -> list[tuple[float, ...]]:
    return [tuple(round(t, 9) for t in s.token_times) for s in served]


def test_one_request_is_its_prefill_then_one_step_a_token():
    [one] = replay([Arrival(0.0, 100, 3)], cost)
    assert times([one]) == [(1.0, 1.1, 1.2)]
    assert (one.wait, one.prefill) == (0.0, 1.0)
    m = one.metrics()
    assert m.ttft == pytest.approx(1.0) and m.tpot == pytest.approx(0.1)


def test_a_request_arriving_during_a_prefill_waits_for_the_step_or_the_whole_request():
    arrivals = [Arrival(0.0, 100, 2), Arrival(0.5, 100, 2)]
    first_come = replay(arrivals, cost, max_seqs=1)  # B starts when A has its last token, at 1.1
    assert times(first_come) == [(1.0, 1.1), (2.1, 2.2)]
    assert first_come[1].wait == pytest.approx(0.6) and first_come[1].prefill == pytest.approx(1.0)
    batched = replay(arrivals, cost)  # B joins at the next step: A's decode beside B's whole prompt, 1.1 s
    assert times(batched) == [(1.0, 2.1), (2.1, 2.2)]
    assert batched[1].wait == pytest.approx(0.5) and batched[1].prefill == pytest.approx(1.1)
    assert batched[0].metrics().worst_gap == pytest.approx(1.1)


def test_a_budget_splits_a_prompt_into_pieces_after_the_decodes():
    seen = []
    served = replay([Arrival(0.0, 100, 1)], lambda s: seen.append(s) or cost(s), budget=40)
    assert [s.pieces for s in seen] == [((40, 0),), ((40, 40),), ((20, 80),)]
    assert times(served) == [(1.0,)]
    seen.clear()
    served = replay([Arrival(0.0, 10, 3), Arrival(0.05, 100, 1)], lambda s: seen.append(s) or cost(s), budget=40)
    # step 1: A's prompt (0.1 s); then each step A's decode takes one token of the budget and B 39
    assert [(s.pieces, s.contexts) for s in seen[:3]] == [(((10, 0),), ()), (((39, 0),), (10,)), (((39, 39),), (11,))]
    assert times(served)[0] == (0.1, 0.59, 1.08)
    assert served[1].token_times[0] == pytest.approx(1.08 + 0.22)


def test_a_cap_on_running_requests_queues_the_rest_in_arrival_order():
    served = replay([Arrival(0.2, 10, 1), Arrival(0.0, 10, 1), Arrival(0.1, 10, 1)], cost, max_seqs=1)
    assert times(served) == [(0.3,), (0.1,), (0.2,)]
    assert [s.started for s in served] == pytest.approx([0.2, 0.0, 0.1])


def test_bad_settings_are_refused_early():
    with pytest.raises(ValueError, match="budget"):
        replay([Arrival(0.0, 1, 1)], cost, budget=0)
    with pytest.raises(ValueError, match="max_seqs"):
        replay([Arrival(0.0, 1, 1)], cost, max_seqs=0)
    with pytest.raises(ValueError, match="output >= 1"):
        Arrival(0.0, 10, 0)


def test_a_priced_step_is_a_prefill_or_a_decode_when_it_holds_only_one():
    ceilings = machine.load_ceilings(machine.torch.device("cpu"))
    shape = machine.MODELS["gpt2-small"][0].with_dtype("fp32")
    model = costmodel.CostModel(ceilings, "gpt2-small", shape, "fp32", 2)
    prefill, step = model.prefill(64), priced_step(model, Step(((64, 0),)))
    assert step.best == pytest.approx(prefill.best)
    decode, step = model.decode(100), priced_step(model, Step(contexts=(100,)))
    assert step.best == pytest.approx(decode.best - decode.term("cache copy").best)  # a paged cache copies nothing
    batch = priced_step(model, Step(contexts=(100,) * 4))  # the rest of the pass: a 4-row pass's dispatch
    assert batch.term("dispatch").best == pytest.approx(ceilings.dispatch("gpt2-small", "fp32", 2, "prefill", 4).best)
    assert batch.term("attention").best == pytest.approx(model.decode(100, batch=4).term("attention").best)
    mixed = priced_step(model, Step(((64, 0),), (100,) * 4))
    assert mixed.best > max(prefill.best, step.best) and mixed.tokens == 68
    with pytest.raises(ValueError, match="at least one"):
        priced_step(model, Step())
