import pytest
import torch

from lib import objectives as obj


def test_defaults_differ_by_device_type_and_accept_names_and_devices():
    cpu, gpu = obj.default_objectives("cpu"), obj.default_objectives("cuda")
    assert cpu == (1.0, 0.1)
    assert gpu[0] < cpu[0] and gpu[1] < cpu[1]
    assert obj.default_objectives("cuda:3") == gpu
    assert obj.default_objectives(torch.device("cpu")) == cpu
    assert obj.default_objectives(torch.device("cuda", 1)) == gpu


def test_unknown_device_is_refused_with_the_known_types():
    with pytest.raises(ValueError, match="known device types: cpu, cuda"):
        obj.default_objectives("auto")
    with pytest.raises(ValueError, match="mps"):
        obj.default_objectives("mps")


def test_none_takes_the_default_and_given_values_are_kept():
    o = obj.objectives("cpu")
    assert (o.ttft_s, o.tpot_s, o.worst_gap_s) == (1.0, 0.1, None)
    assert o.defaults == ("ttft", "tpot")
    o = obj.objectives("cpu", ttft_slo_ms=300, tpot_slo_ms=None)
    assert o.ttft_s == pytest.approx(0.3) and o.tpot_s == 0.1 and o.defaults == ("tpot",)
    assert o.ttft_ms == pytest.approx(300) and o.worst_gap_ms is None


def test_worst_gap_defaults_to_a_multiple_of_the_tpot_objective():
    o = obj.objectives("cuda", tpot_slo_ms=20, worst_gap=True)
    assert o.worst_gap_s == pytest.approx(obj.WORST_GAP_FACTOR * 0.020)
    assert o.defaults == ("ttft", "worst_gap")
    o = obj.objectives("cuda", worst_gap_slo_ms=7)
    assert o.worst_gap_s == pytest.approx(0.007) and "worst_gap" not in o.defaults


@pytest.mark.parametrize("bad", [0, 0.0, -5, float("nan"), float("inf"), "100", True])
def test_zero_and_nonsense_are_refused_not_replaced_by_the_default(bad):
    # issue 13: `ttft_slo_ms=0` used to become 1000 ms through `x or default`
    with pytest.raises(ValueError, match="ttft_slo_ms"):
        obj.objectives("cpu", ttft_slo_ms=bad)
    with pytest.raises(ValueError, match="worst_gap_slo_ms"):
        obj.objectives("cpu", worst_gap_slo_ms=bad)


def test_scaled_objectives_come_from_one_user_and_keep_the_readers_values():
    o = obj.scaled(0.2, 0.05)
    assert (o.ttft_s, o.tpot_s) == (pytest.approx(obj.SLO_SCALE * 0.2), pytest.approx(obj.SLO_SCALE * 0.05))
    assert o.defaults == ("ttft", "tpot") and o.worst_gap_s is None
    mine = obj.scaled(0.2, 0.05, scale=2, tpot_slo_ms=80)
    assert mine.ttft_s == pytest.approx(0.4) and mine.tpot_s == pytest.approx(0.08) and mine.defaults == ("ttft",)
    for bad in (0, -1, float("nan"), True):
        with pytest.raises(ValueError):
            obj.scaled(bad, 0.05)


def test_load_rates_are_fractions_of_the_measured_capacity():
    assert obj.load_rates(4.0) == [1.0, 2.0, 4.0, 8.0]
    assert obj.load_rates(4.0, most_per_s=5.0) == [1.0, 2.0, 4.0, 5.0]
    assert obj.load_rates(0.333) == [0.0833, 0.167, 0.333, 0.666]
    with pytest.raises(ValueError, match="capacity"):
        obj.load_rates(0.0)
