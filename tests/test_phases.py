import pytest
import torch
import transformers

from lib import metrics, phases
from lib.models import gpt2_config, random_prompt


@pytest.fixture(scope="module")
def lively():
    """A tiny GPT-2 with large random weights, so greedy decoding picks varied tokens (a test that always
    sees the same token could not tell a broken cache from a working one)."""
    torch.manual_seed(0)
    config = gpt2_config("tiny-gpt2")
    config.initializer_range = 1.0
    return transformers.GPT2LMHeadModel(config).eval()


def test_cached_decode_matches_uncached_recompute(lively):
    prompt = random_prompt(21, lively.config.vocab_size, seed=1)
    cached = phases.run_request(lively, prompt, 24)
    assert len(set(cached.token_ids)) > 5, "the test model must not be degenerate"
    assert list(cached.token_ids) == phases.greedy_uncached(lively, prompt, 24)


def test_prefill_last_equals_last_row_of_all(tiny):
    prompt = random_prompt(30, tiny.vocab_size)
    last, cache = phases.prefill(tiny, prompt, logits="last")
    full, _ = phases.prefill(tiny, prompt, logits="all")
    assert last.shape == (1, 1, tiny.vocab_size) and full.shape == (1, 30, tiny.vocab_size)
    torch.testing.assert_close(last[:, -1], full[:, -1], rtol=1e-5, atol=1e-5)
    assert cache.get_seq_length() == 30


def test_prefill_continues_a_cache(tiny):
    prompt = random_prompt(12, tiny.vocab_size)
    _, cache = phases.prefill(tiny, prompt[:, :8])
    logits, cache = phases.prefill(tiny, prompt[:, 8:], cache=cache)
    whole, _ = phases.prefill(tiny, prompt)
    assert cache.get_seq_length() == 12
    torch.testing.assert_close(logits, whole, rtol=1e-4, atol=1e-4)


def test_bad_prefill_arguments(tiny):
    with pytest.raises(ValueError, match="'last' or 'all'"):
        phases.prefill(tiny, random_prompt(3, tiny.vocab_size), logits="first")
    with pytest.raises(ValueError, match=r"shape \(batch, tokens\)"):
        phases.prefill(tiny, torch.tensor([1, 2, 3]))


def test_request_trace_is_ordered_and_scored(tiny):
    trace = phases.run_request(tiny, random_prompt(16, tiny.vocab_size), 10)
    assert len(trace.token_ids) == len(trace.token_times) == 10
    assert trace.request_time <= trace.prefill_done <= trace.token_times[0]
    m = metrics.request_metrics(trace.request_time, trace.token_times)
    assert m.n_tokens == 10 and m.ttft > 0 and m.tpot > 0


def test_request_stops_at_eos(lively):
    prompt = random_prompt(9, lively.config.vocab_size, seed=1)
    tokens = phases.run_request(lively, prompt, 10).token_ids
    stopped = phases.run_request(lively, prompt, 10, eos_token_id=tokens[3])
    assert stopped.token_ids == tokens[: tokens.index(tokens[3]) + 1]


def test_too_long_is_refused_before_any_work(tiny, monkeypatch):
    def must_not_run(*args, **kwargs):
        raise AssertionError("the model ran before the length check")

    monkeypatch.setattr(tiny.model, "forward", must_not_run)
    prompt = random_prompt(1000, tiny.vocab_size)
    with pytest.raises(ValueError, match=r"1000 tokens plus 40 new tokens needs 1040 positions.*has 1024.*at most 984"):
        phases.run_request(tiny, prompt, 40)
    with pytest.raises(ValueError, match="1025 positions"):
        phases.prefill(tiny, random_prompt(1025, tiny.vocab_size))


def test_decode_refuses_running_off_the_table(tiny):
    prompt = random_prompt(1020, tiny.vocab_size)
    logits, cache = phases.prefill(tiny, prompt)
    with pytest.raises(ValueError, match="positions"):
        phases.decode(tiny, logits.argmax(-1), cache, steps=10)
    trace = phases.decode(tiny, logits.argmax(-1), cache, steps=4)  # 1020 + 4 fits exactly
    assert len(trace.token_ids) == 4


def test_check_fits_arguments(tiny):
    phases.check_fits(tiny, 1000, 24)
    with pytest.raises(ValueError, match="at least one token"):
        phases.check_fits(tiny, 0)
    with pytest.raises(ValueError, match="cannot be negative"):
        phases.check_fits(tiny, 5, -1)
    with pytest.raises(ValueError, match="at least 1"):
        phases.run_request(tiny, random_prompt(4, tiny.vocab_size), 0)


def test_static_cache_decodes_the_same_tokens_in_place(lively):
    prompt = random_prompt(21, lively.config.vocab_size, seed=1)
    logits, growing = phases.prefill(lively, prompt)
    first = logits[:, -1:].argmax(dim=-1)
    fixed = phases.static_cache(lively, growing, 21 + 12)
    assert int(fixed.get_seq_length()) == 21 and int(growing.get_seq_length()) == 21
    address = fixed.layers[0].keys.data_ptr()
    static_ids = phases.decode(lively, first, fixed, 12).token_ids
    assert len(set(static_ids)) > 3, "the test model must not be degenerate"
    assert static_ids == phases.decode(lively, first, growing, 12).token_ids
    assert fixed.layers[0].keys.data_ptr() == address  # written in place, never reallocated
    assert phases.cache_bytes(fixed) == phases.cache_bytes(growing)  # 33 positions each
    phases.truncate_cache(fixed, 21)
    assert phases.decode(lively, first, fixed, 12).token_ids == static_ids  # a repeated run from the context


def test_static_cache_refuses_bad_sizes(tiny):
    _, cache = phases.prefill(tiny, random_prompt(10, tiny.vocab_size))
    with pytest.raises(ValueError, match="max_len"):
        phases.static_cache(tiny, cache, 9)
    with pytest.raises(ValueError, match="max_len"):
        phases.static_cache(tiny, cache, 5000)
    with pytest.raises(ValueError, match="filled"):
        phases.static_cache(tiny, phases.new_cache(tiny), 16)


class _IgnoresCache(torch.nn.Module):
    """A model whose forward has no ``cache`` argument and swallows it in its keyword arguments, as transformers
    before 5.24 did (it named the argument ``past_key_values``): a pass would run, the book's cache stay empty."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.config = inner, inner.config

    def forward(self, **kwargs):
        kwargs.pop("cache", None)
        return self.inner(**kwargs)


def test_a_model_that_would_ignore_the_cache_is_refused_before_any_pass(lively):
    old = _IgnoresCache(lively)
    prompt = random_prompt(5, lively.config.vocab_size)
    with pytest.raises(RuntimeError, match=r"_IgnoresCache.forward takes no argument cache= \(transformers .*"
                                           r"past_key_values before 5.24\)"):
        phases.prefill(old, prompt)
    _, cache = phases.prefill(lively, prompt)
    with pytest.raises(RuntimeError, match="takes no argument cache="):
        phases.decode(old, prompt[:, -1:], cache, 3)
    assert cache.get_seq_length() == 5  # refused before any pass ran
    assert phases.decode(lively, prompt[:, -1:], cache, 3).token_ids  # the book's model takes it: no error
