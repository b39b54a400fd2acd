"""Chapter 8's library: int8 weights and the bytes a step reads (lib.quantize), prompt lookup counted and predicted
(lib.speculative), and llama.cpp's worker (lib.llama; its live tests skip without .venv-llama)."""

import math

import pytest
import torch
import transformers

from lib import phases, quantize, speculative, sweeps
from lib.llama import LlamaFailed, LlamaWorker, llama_unavailable, server_command
from lib.models import load_model, random_prompt
from lib.paths import REPO_ROOT
from lib.shapes import ModelShape

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def tiny():
    return load_model("tiny-gpt2", CPU)


def test_int8_linear_is_the_rounded_matrix_product():
    torch.manual_seed(0)
    layer = torch.nn.Linear(64, 24)
    q = quantize.Int8Linear(layer)
    x = torch.randn(3, 5, 64)
    dequantized = q.weight_int8.float() * q.scales[:, None]
    assert torch.allclose(q(x), x @ dequantized.T + layer.bias, atol=1e-4)
    assert (dequantized - layer.weight).abs().max() <= q.scales.max() / 2 + 1e-6  # rounded to nearest
    assert q.weight_int8.dtype == torch.int8 and q.weight_int8.shape == (24, 64)


def test_int8_linear_reads_gpt2_conv1d_as_in_out():
    conv = transformers.pytorch_utils.Conv1D(24, 64)  # nf=24 outputs, nx=64 inputs: weight [64, 24]
    torch.nn.init.normal_(conv.weight)
    q = quantize.Int8Linear(conv)
    x = torch.randn(2, 64)
    assert (q.in_features, q.out_features) == (64, 24)
    assert torch.allclose(q(x), conv(x), atol=0.05 * conv(x).abs().max().item())


def test_int8_weights_replace_every_matrix_and_keep_the_answer(tiny):
    q = quantize.int8_weights(tiny)
    assert not any(type(m).__name__ == "Conv1D" or isinstance(m, torch.nn.Linear) for m in q.model.modules())
    assert sum(isinstance(m, quantize.Int8Linear) for m in q.model.modules()) == 4 * tiny.config.n_layer + 1
    ids = random_prompt(12, tiny.vocab_size)
    with torch.inference_mode():
        a, b = tiny.model(ids).logits, q.model(ids).logits
    assert (a - b).abs().max() < 0.05 * a.abs().max()
    assert isinstance(next(tiny.model.modules()), transformers.GPT2LMHeadModel)  # the original is left alone
    assert quantize.matrix_layers(tiny.model) and all(not isinstance(m, quantize.Int8Linear)
                                                      for m in quantize.matrix_layers(tiny.model))


def test_step_weight_bytes_counts_matrices_once(tiny):
    shape = ModelShape.from_config(tiny.config).with_dtype("fp32")
    counted = quantize.step_weight_bytes(tiny.model)
    biases = sum(m.bias.numel() * 4 for m in quantize.matrix_layers(tiny.model) if m.bias is not None)
    assert counted == shape.weight_bytes + biases  # the tied head once, the embedding lookup not at all
    q = quantize.int8_weights(tiny)
    params = shape.matmul_params
    rows = sum(m.out_features for m in quantize.matrix_layers(q.model))
    assert quantize.step_weight_bytes(q.model) == params + 4 * rows + biases


def test_int8_kernel_runs_on_this_cpu():
    assert quantize.int8_kernel_runs(CPU) is None


def test_gguf_bytes_are_the_files_tensors():
    from lib.models import smollm2_gguf

    path = smollm2_gguf()
    types = quantize.gguf_tensor_types(path)
    assert set(types) >= {"Q4_1", "F32"}
    total = quantize.gguf_step_bytes(path)
    assert total == sum(types.values()) and 0.9 * path.stat().st_size < total < path.stat().st_size


def test_cache_traffic_counts_bytes_per_value():
    assert quantize.cache_traffic("dynamic", 4) == 8 and quantize.cache_traffic("dynamic", 2) == 4
    assert quantize.cache_traffic("fp8", 4) == 15 and quantize.cache_traffic("fp8", 2) == 21
    with pytest.raises(ValueError, match="dynamic' or 'fp8"):
        quantize.cache_traffic("int4", 4)


def test_fp8_cache_stores_a_quarter_and_decodes(tiny):
    kv, first = sweeps.prefilled(tiny, None, 40, 0)
    q = quantize.fp8_cache(tiny, kv)
    assert q.get_seq_length() == 40
    assert quantize.stored_cache_bytes(q) < 0.3 * quantize.stored_cache_bytes(kv)
    trace = phases.decode(tiny, first, q, 3)
    assert len(trace.token_ids) == 3 and q.get_seq_length() == 43
    assert kv.get_seq_length() == 40  # the source is left as it was


def test_acceptance_length_and_its_bad_input():
    assert speculative.acceptance_length(10, [30] + [1] * 9) == 1.0
    assert speculative.acceptance_length(12, [30, 5, 5, 1]) == 3.0
    with pytest.raises(ValueError, match="new tokens and passes"):
        speculative.acceptance_length(5, [])


def test_predicted_seconds_prices_each_pass_by_its_length():
    assert math.isclose(speculative.predicted_seconds([30, 1, 5, 5], {30: 0.2, 1: 0.01, 5: 0.02}), 0.25)
    with pytest.raises(ValueError, match=r"no measured pass of \[3\] positions"):
        speculative.predicted_seconds([30, 3], {30: 0.2, 1: 0.01})


def test_tokens_agreeing():
    assert speculative.tokens_agreeing([1, 2, 3], [1, 2, 4]) == 2
    assert speculative.tokens_agreeing([1, 2], [1, 2, 3]) == 2
    assert speculative.tokens_agreeing([], [1]) == 0


def test_counted_passes_and_prompt_lookup_equals_greedy(tiny):
    ids = random_prompt(20, tiny.vocab_size, seed=3)
    ids = torch.cat([ids, ids[:, :6]], dim=1)  # the prompt repeats itself, so lookup finds guesses
    kw = dict(max_new_tokens=10, min_new_tokens=10, do_sample=False, pad_token_id=0,
              attention_mask=torch.ones_like(ids))
    with speculative.counted_passes(tiny.model) as plain_passes:
        plain = tiny.model.generate(ids, **kw)
    with speculative.counted_passes(tiny.model) as lookup_passes:
        lookup = tiny.model.generate(ids, prompt_lookup_num_tokens=3, **kw)
    assert plain_passes == [26] + [1] * 9
    assert torch.equal(plain, lookup)
    assert len(lookup_passes) <= len(plain_passes) and max(lookup_passes[1:]) <= 4
    with speculative.counted_passes(tiny.model) as after:
        pass
    assert after == [] and not tiny.model._forward_pre_hooks  # the hook is removed


def test_llama_unavailable_names_the_command(tmp_path):
    why = llama_unavailable(tmp_path)
    assert ".venv-llama" in why and "make .venv-llama" in why
    with pytest.raises(LlamaFailed, match=".venv-llama is absent"):
        LlamaWorker("model.gguf", 1, 64, root=tmp_path)


def test_server_command_names_no_build_path():
    command = server_command(REPO_ROOT / ".venv/lib/model.gguf", port=8123, threads=2)
    assert str(REPO_ROOT) not in command and "--port 8123" in command and ".venv/lib/model.gguf" in command


needs_llama = pytest.mark.skipif(llama_unavailable() is not None, reason="llama.cpp's .venv-llama is absent")


@needs_llama
def test_llama_worker_decodes_and_answers():
    from lib.models import smollm2_gguf

    with LlamaWorker(smollm2_gguf(), 1, 256) as worker:
        assert worker.request(kind="about")["version"]
        long = worker.request(kind="decode", context=64, steps=3)["step_s"]
        short = worker.request(kind="decode", context=8, steps=3)["step_s"]  # restores the cache, then cuts it
        again = worker.request(kind="decode", context=64, steps=2)["step_s"]
        assert len(long) == 3 and len(short) == 3 and len(again) == 2 and min(long + short + again) > 0
        reply = worker.request(kind="greedy", prompt=[1, 2, 3], new_tokens=5, ignore_eos=True)
        assert len(reply["tokens"]) == 5 and len(reply["step_s"]) == 4 and len(reply["logits"]) == 49152
        with pytest.raises(LlamaFailed, match="unknown request kind"):
            worker.request(kind="nothing")
        assert worker.request(kind="about")  # still up after a failed request
    assert worker.process.poll() is not None


def test_a_worker_that_never_loads_is_stopped_with_a_message(tmp_path):
    python = tmp_path / ".venv-llama" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\necho 'loading the model' >&2\nexec sleep 30\n")
    python.chmod(0o755)
    (tmp_path / ".venv-llama" / ".installed").touch()
    worker = LlamaWorker("model.gguf", 1, 64, root=tmp_path, start_timeout_s=1)
    with pytest.raises(LlamaFailed, match="did not start: loading the model"):
        worker.start()
    assert worker.process.poll() is not None  # stopped, not left sleeping
