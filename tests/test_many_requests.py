"""Chapter 9's library: a reused prefix (lib.reuse) and the two pinned workers (lib.separation)."""

import pytest
import torch

from lib import phases, reuse, separation
from lib.models import load_model, random_prompt


def test_an_engine_reuses_whole_blocks_only_and_leaves_one_token_to_compute():
    assert reuse.reusable_tokens(200, 128) == 128
    assert reuse.reusable_tokens(100, 128) == 0
    assert reuse.reusable_tokens(512, 256) == 512
    assert reuse.reusable_tokens(512, 256, prompt=512) == 256  # the last token is computed, so its block is not reused
    with pytest.raises(ValueError, match="block"):
        reuse.reusable_tokens(10, 0)


def test_shared_prefix_counts_the_leading_tokens_in_common():
    assert reuse.shared_prefix([1, 2, 3, 4], [1, 2, 5]) == 2
    assert reuse.shared_prefix([1, 2], [1, 2, 3]) == 2
    assert reuse.shared_prefix([], [1]) == 0


def test_a_reused_prefix_chooses_the_cold_prefills_token_and_leaves_the_kept_cache_as_it_was():
    lm = load_model("tiny-gpt2", torch.device("cpu"))
    prompt = random_prompt(40, lm.model.config.vocab_size, seed=3)
    kept = reuse.prefix_cache(lm, prompt[:, :32])
    before = kept.get_seq_length()
    cold, _ = reuse.first_token_cold(lm, prompt)
    warm, seconds = reuse.first_token_reusing(lm, kept, prompt[:, 32:])
    assert warm == cold and seconds > 0
    assert kept.get_seq_length() == before == 32


@pytest.mark.skipif(separation.separation_unavailable() is not None, reason="needs Linux and two cores")
def test_two_pinned_workers_hand_the_whole_cache_over():
    runs = separation.separated("tiny-gpt2", b_prompt_len=64, a_tokens=12, arrival_step=3, runs=2)
    lm = load_model("tiny-gpt2", torch.device("cpu"))
    _, cache = phases.prefill(lm, random_prompt(64, lm.model.config.vocab_size, seed=1))
    for r in runs:
        assert r.same_next_token and r.cache_bytes == phases.cache_bytes(cache)
        assert r.b_arrival < r.b_prefill_start < r.b_first_token < r.handed
        assert len(r.a_token_times) == 12 and r.a_token_times[2] <= r.b_arrival <= r.a_token_times[3]
        assert r.write_s > 0 and r.read_s > 0 and r.reread_s > 0 and r.cores == tuple(separation.usable_cores()[:2])


def test_the_workers_refuse_bad_settings_before_starting():
    with pytest.raises(ValueError, match="arrival_step"):
        separation.separated("tiny-gpt2", a_tokens=4, arrival_step=4)
    with pytest.raises(ValueError, match="runs"):
        separation.separated("tiny-gpt2", runs=0)
