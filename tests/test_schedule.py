import pytest
import torch

from lib import schedule
from lib.models import random_prompt
from lib.phases import prefill


@pytest.mark.parametrize("length,chunk", [(1, 1), (7, 3), (1000, 64), (1000, 1000), (1000, 5000), (256, 256)])
def test_chunk_schedule_covers_the_prompt_in_order(length, chunk):
    spans = schedule.chunk_schedule(length, chunk)
    assert spans[0][0] == 0 and spans[-1][1] == length
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))  # contiguous, no overlap
    assert all(0 < end - start <= chunk for start, end in spans)
    assert len(spans) == -(-length // chunk)


@pytest.mark.parametrize("length,chunk,message", [
    (100, 0, "chunk must be at least 1"), (0, 8, "prompt_len must be at least 1"),
    (100, -4, "chunk must be at least 1"), (100, 2.5, "whole number"), (100, True, "whole number"),
    ("100", 8, "whole number")])
def test_chunk_schedule_bad_arguments(length, chunk, message):
    with pytest.raises(ValueError, match=message):
        schedule.chunk_schedule(length, chunk)


@pytest.mark.parametrize("chunk", [1, 7, 32, 100])
def test_chunked_prefill_equals_a_full_pass(tiny, chunk):
    ids = random_prompt(100, tiny.vocab_size, seed=4)
    full, _ = prefill(tiny, ids)
    chunked, cache = schedule.chunked_prefill(tiny, ids, chunk)
    assert cache.get_seq_length() == 100
    torch.testing.assert_close(chunked, full, rtol=1e-4, atol=1e-4)


def test_chunked_prefill_refuses_overflow(tiny):
    with pytest.raises(ValueError, match="positions"):
        schedule.chunked_prefill(tiny, random_prompt(1100, tiny.vocab_size), 64)


def test_interference_traces_are_complete_and_ordered(tiny):
    run = schedule.interference(tiny, chunk=64, b_prompt_len=300, a_tokens=20, arrival_step=5)
    times = run.a_token_times
    assert len(times) == 20 and list(times) == sorted(times)
    assert [(c.start, c.end) for c in run.chunks] == schedule.chunk_schedule(300, 64)
    assert all(c.t_start <= c.t_end for c in run.chunks)
    assert all(a.t_end <= b.t_start for a, b in zip(run.chunks, run.chunks[1:]))
    assert times[4] <= run.b_request_time <= run.chunks[0].t_start
    assert run.chunks[-1].t_end <= run.b_first_token_time
    # one A step runs before every B chunk: B's TTFT includes its queueing behind A
    for chunk in run.chunks:
        assert any(run.b_request_time <= t <= chunk.t_start for t in times)
    a_steps_during_b = [t for t in times if run.b_request_time < t < run.b_first_token_time]
    assert len(a_steps_during_b) == len(run.chunks)
    assert run.b_metrics.ttft > sum(c.t_end - c.t_start for c in run.chunks)
    assert run.a_metrics.n_tokens == 20 and run.b_metrics.n_tokens == 1
    assert len(run.a_gaps_during_b) == len(run.chunks)


def test_interference_unchunked_and_several_streams(tiny):
    run = schedule.interference(tiny, chunk=None, b_prompt_len=200, a_tokens=12, arrival_step=3, a_streams=4)
    assert len(run.chunks) == 1 and run.chunk == 200 and run.a_streams == 4
    assert len(run.a_token_times) == 12


def test_interference_logits_match_a_full_pass(tiny):
    chunked = schedule.interference(tiny, chunk=50, b_prompt_len=200, a_tokens=8, arrival_step=2)
    whole, _ = prefill(tiny, random_prompt(200, tiny.vocab_size, seed=1))
    torch.testing.assert_close(chunked.b_last_logits, whole[:, -1], rtol=1e-4, atol=1e-4)


def test_interference_bad_arguments(tiny):
    with pytest.raises(ValueError, match="arrival_step .* less than a_tokens"):
        schedule.interference(tiny, a_tokens=10, arrival_step=10)
    with pytest.raises(ValueError, match="chunk must be at least 1"):
        schedule.interference(tiny, chunk=0)
    with pytest.raises(ValueError, match="positions"):
        schedule.interference(tiny, b_prompt_len=1024)
