"""GPT-2's architecture at other sizes, with seeded random weights: where a decode step leaves its floor.

The source chapter found GPT-2 small on its GPU in neither textbook regime: a step cost about 11 ms whatever the
context and the precision, the cost of issuing its operations, and it argued (by arithmetic only) that a model
with far more weight bytes would leave that floor and follow its bytes. Chapter 6 measures the transition on the
reader's machine by sweeping the model's size in GPT-2's architecture: :data:`SIZES`, from ``tiny-gpt2``
through 12-layer models of growing width (the floor stays, the bytes grow) to GPT-2 small, medium, large and XL.
Their weights are random (:func:`build`): a step's time does not depend on the values.

Chapter 0 measured the kernels of GPT-2 small and of ``tiny-gpt2`` (in a full build); the other sizes are priced
from those (:func:`price_decode`, :func:`price_prefill`), each term scaled by what it is proportional to:

* the weights at the rate GPT-2 small's own matrices run at the same number of rows, scaled by the size's weights
  (at one row: its bytes at that matrix-vector rate);
* attention and a growing cache's copy at chapter 0's rates for the same bytes of cache;
* dispatch (issuing the operations and running the small kernels): the operations the size's own step issues
  (counted, :func:`operations`) at a cost per operation that grows with the weight bytes streamed between them
  (:func:`operation_cost`, drawn between the GPT-2s chapter 0 measured).

A model chapter 0 measured itself (``tiny-gpt2``) is priced from its own rows, every term.

Introduced in chapter 6.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace

import numpy as np
import psutil
import torch
import transformers
from transformers import DynamicCache

from lib.costmodel import Prediction, Term
from lib.machine import MODELS, Ceilings, count_operations, hollowed, read_through
from lib.models import LoadedModel
from lib.timing import synchronize
from lib.shapes import GPT2_SMALL, ModelShape

__all__ = ["SIZES", "build", "random_cache", "operations", "price_decode", "price_prefill", "memory_needed",
           "free_memory", "transition_bytes", "operations_line", "build_seconds", "anchors", "operation_cost", "floor_paid"]


def _gpt2(name: str, layers: int, width: int, vocab: int = 50257) -> ModelShape:
    return ModelShape(name, layers, width, max(1, width // 64), max(1, width // 64), 4 * width, vocab,
                      gated_ffn=False, bytes_per_param=4, tied_lm_head=True, dtype_name="FP32")


#: The sizes the sweep can run, in ascending weight bytes: ``tiny-gpt2`` (the book's two-layer test model),
#: 12-layer models 128 to 512 wide (GPT-2 small's depth, so its floor, with fewer bytes), and GPT-2's published
#: small (124M parameters), medium (355M), large (774M) and XL (1.56B) shapes. Heads are 64 wide, as in GPT-2.
SIZES: dict[str, ModelShape] = {
    "tiny-gpt2": replace(MODELS["tiny-gpt2"][0], bytes_per_param=4, tied_lm_head=True),
    **{f"gpt2-12x{w}": _gpt2(f"GPT-2, 12 layers x {w}", 12, w) for w in (128, 256, 384, 512)},
    "gpt2-small": GPT2_SMALL,
    "gpt2-medium": _gpt2("GPT-2 medium", 24, 1024),
    "gpt2-large": _gpt2("GPT-2 large", 36, 1280),
    "gpt2-xl": _gpt2("GPT-2 XL", 48, 1600),
}


def build(name: str | ModelShape, device: torch.device, dtype: torch.dtype, seed: int = 0) -> LoadedModel:
    """The size ``name`` of :data:`SIZES` (or any GPT-2 ``ModelShape``) as a transformers GPT-2 in ``dtype`` on
    ``device``, in eval mode, its weights seeded random values (one block of 2**20 uniform values of at most 0.02,
    repeated: drawing GPT-2 XL's 1.6 billion one by one would take longer than timing it)."""
    from transformers.initialization import no_init_weights

    if isinstance(name, str) and name not in SIZES:
        raise ValueError(f"unknown size {name!r}: the sweep knows {', '.join(SIZES)}")
    s = SIZES[name] if isinstance(name, str) else name
    config = transformers.GPT2Config(n_layer=s.layers, n_embd=s.d_model, n_head=s.heads, n_inner=s.d_ff,
                                     vocab_size=s.vocab, n_positions=1024, bos_token_id=0, eos_token_id=0)
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        with no_init_weights():
            module = transformers.GPT2LMHeadModel(config)
        module.lm_head.weight = module.transformer.wte.weight  # tied, as GPT-2's are: one copy in memory
        module = module.to(device=device, dtype=dtype)
        block = torch.empty(1 << 20, dtype=dtype, device=device).uniform_(-0.02, 0.02)
        with torch.no_grad():
            for parameter in module.parameters():  # the block repeated, written in place: no second copy
                flat, n = parameter.view(-1), parameter.numel()
                whole = n // block.numel() * block.numel()
                flat[:whole].view(-1, block.numel()).copy_(block)
                flat[whole:].copy_(block[:n - whole])
    finally:
        torch.random.set_rng_state(state)
    return LoadedModel(module.eval(), None, s.name, f"random weights, seed {seed}", torch.device(device), dtype)


@torch.inference_mode()
def random_cache(model: LoadedModel, context: int, seed: int = 0) -> tuple[DynamicCache, torch.Tensor]:
    """A growing cache (``DynamicCache``) of ``context`` positions of random keys and values in the model's dtype,
    and a token to decode after it: a step's cost depends on the cache's shape and dtype, not its values, and a
    prefill of 512 tokens would cost GPT-2 XL seconds."""
    if context < 1 or context >= model.max_positions:
        raise ValueError(f"a context needs 1 to {model.max_positions - 1} positions, got {context}")
    config = model.config
    heads, width = config.n_head, config.n_embd // config.n_head
    cache = DynamicCache(config=config)
    generator = torch.Generator().manual_seed(seed)
    for layer in range(config.n_layer):
        k, v = (torch.rand(1, heads, context, width, generator=generator).to(model.device, model.dtype)
                for _ in range(2))
        cache.update(k, v, layer)
    return cache, torch.zeros(1, 1, dtype=torch.long, device=model.device)


def operations(model: LoadedModel, context: int = 16) -> int:
    """The torch operations one decode step of ``model`` issues from Python, counted as chapter 0 counts them
    (:func:`lib.machine.count_operations` on the :func:`lib.machine.hollowed` step, token read back included), so
    the count compares with chapter 0's ``operations``."""
    from lib import phases

    cache, token = random_cache(model, context)
    with hollowed():
        return count_operations(lambda: phases.decode(model, token, cache, 1))


def floor_paid(model: LoadedModel, context: int, repeats: int) -> dict[str, list[float]]:
    """One layer down from a decode step of ``model`` from ``context`` cached tokens: its operations issued
    :func:`lib.machine.hollowed` (every matrix product and attention a zero tensor) with the caches to themselves
    (``"alone"``), and between its own weights' streams (``"between"``: each product still reads its weights once),
    with those reads timed alone just before (``"reads"``); ``repeats`` of each, in turn, seconds. ``between``
    less ``reads`` is the floor the step pays as a real step pays it: what chapter 0 measured on its models, here
    on any size."""
    from transformers.pytorch_utils import Conv1D

    from lib import phases

    cache, token = random_cache(model, context)
    weights = list({id(m.weight): m.weight for m in model.model.modules() if isinstance(m, (Conv1D, torch.nn.Linear))}
                   .values())

    def clocked(fn) -> float:
        synchronize(model.device)
        started = time.perf_counter()
        fn()
        synchronize(model.device)
        return time.perf_counter() - started

    def step() -> None:
        phases.truncate_cache(cache, context)
        phases.decode(model, token, cache, 1)

    def reads() -> None:
        for w in weights:
            read_through(w)

    out: dict[str, list[float]] = {"alone": [], "between": [], "reads": []}
    with torch.inference_mode():
        for setting, streams in (("alone", False), ("between", True)):
            with hollowed(stream_weights=streams):
                step()  # warm
                for _ in range(repeats):
                    if streams:
                        out["reads"].append(clocked(reads))
                    out[setting].append(clocked(step))
    return out


def build_seconds(ceilings: Ceilings, name: str, dtype: str, threads: int) -> float:
    """A prediction of :func:`build`'s time for size ``name`` (seconds): its weights written once into fresh memory,
    at chapter 0's copy rate and its cost per page fault (the allocator maps a model's tensors afresh)."""
    nbytes = (SIZES[name].with_dtype(dtype).weight_bytes + 1024 * SIZES[name].d_model * 4)
    return nbytes * (ceilings.faults_per_byte(dtype, threads) * ceilings.fault_cost(dtype, threads)
                     + 1 / ceilings.stream_bandwidth(dtype, threads, "copy"))


def memory_needed(name: str, dtypes: list[str], contexts: list[int]) -> float:
    """Bytes the sweep holds at once for size ``name``: its weights in every dtype (embeddings included), one
    cache per context, and a quarter more for what the library allocates beside them."""
    s = SIZES[name]
    per_param = {"fp32": 4, "bf16": 2, "fp16": 2}
    weights = sum((s.matmul_params + 1024 * s.d_model) * per_param[d] for d in dtypes)
    caches = sum(replace(s, bytes_per_param=per_param[d]).kv_bytes_per_token * c for d in dtypes for c in contexts)
    return 1.25 * (weights + caches)


def free_memory(device: torch.device) -> float:
    """Bytes free for new tensors on ``device`` now (the system's available memory on a CPU)."""
    if torch.device(device).type == "cuda":
        return float(torch.cuda.mem_get_info(device)[0])
    return float(psutil.virtual_memory().available)


def _scaled(shape: ModelShape, reference: ModelShape) -> tuple[float, float, float]:
    """How many times the reference's block weights, head weights and attention work (layers x width) ``shape``
    has."""
    return (shape.layers * shape.block_params / (reference.layers * reference.block_params),
            shape.lm_head_params / reference.lm_head_params,
            shape.layers * shape.d_model / (reference.layers * reference.d_model))


def anchors(ceilings: Ceilings, dtype: str, threads: int) -> list[tuple[str, float, int]]:
    """The GPT-2s chapter 0 measured a step's dispatch of, smallest first: ``(model, weight bytes in dtype,
    operations a step issues)``. Their cost per operation differs by the bytes streamed between the operations."""
    out = []
    for model, (shape, layout) in MODELS.items():
        if layout != "conv1d":
            continue
        try:
            ops = ceilings.operations(model, dtype, threads)[0]
        except ValueError:  # chapter 0 did not measure it (a quick run measures one model)
            continue
        out.append((model, float(shape.with_dtype(dtype).weight_bytes), ops))
    return sorted(out, key=lambda a: a[1])


def operation_cost(ceilings: Ceilings, weight_bytes: float, dtype: str, threads: int, kind: str, rows: float,
                   reference: str) -> tuple[float, float, str]:
    """What one issued operation of a pass costs (seconds: fastest, median) when ``weight_bytes`` of weights stream
    between the operations, and where that comes from. Chapter 0 timed each GPT-2 it measured hollowed between its
    own weights' streams: the more bytes stream between two small operations, the more of their data (the
    interpreter's, the small kernels') is evicted, so the cost per operation grows with the model's bytes
    (``tiny-gpt2``'s 0.7 MB evict almost nothing, GPT-2 small's 494 MB nearly a whole last-level cache). Between
    the models measured the cost is drawn on a straight line in the bytes; below the smallest and above the
    largest it is held at theirs. With one model measured (a quick run), its cost at every size."""
    found = anchors(ceilings, dtype, threads) or [(reference, 0.0, ceilings.operations(reference, dtype, threads)[0])]
    per = [(b, ceilings.dispatch(m, dtype, threads, kind, rows), ops) for m, b, ops in found]
    xs = [b for b, _, _ in per]
    best = float(np.interp(weight_bytes, xs, [d.best / ops for _, d, ops in per]))
    median = float(np.interp(weight_bytes, xs, [d.median / ops for _, d, ops in per]))
    names = [m for m, _, _ in found]
    source = (f"{names[0]}'s cost per operation" if len(names) == 1 else
              "the cost per operation drawn between " + " and ".join(f"{m}'s ({b / 1e6:,.1f} MB)" for m, b, _ in found)
              + f" at {weight_bytes / 1e6:,.1f} MB of weights")
    return best, median, source


def _own(ceilings: Ceilings, name: str, reference: str) -> bool:
    """Whether chapter 0 measured size ``name`` itself (the reference, or a model of :data:`lib.machine.MODELS` in
    its table): it is then priced from its own rows, unscaled."""
    return name == reference or (name in MODELS and name in set(ceilings.table.model.dropna()))


def _dispatch(ceilings: Ceilings, name: str, reference: str, ops: int, ops_reference: int, dtype: str, threads: int,
              kind: str, rows: int, cache_bytes: float | None = None) -> Term:
    """Issuing the pass: its ``ops`` operations at :func:`operation_cost` for its weight bytes; a decode step's at
    its cache of ``cache_bytes`` (its rest grows with the cache's bytes, :meth:`lib.machine.Ceilings.rest_growth`,
    read at the cache of the same bytes). ``ops_reference``: the operations the reference's step issues, checked
    against chapter 0's count."""
    own = _own(ceilings, name, reference)
    measured = name if own else reference
    positions = None if cache_bytes is None else \
        cache_bytes / MODELS[measured][0].with_dtype(dtype).kv_bytes_per_token
    if own:
        d = ceilings.dispatch(name, dtype, threads, kind, rows, positions=positions)
        return Term("dispatch", d.best, d.median, "dispatch", f"chapter 0's own measurement of {name}")
    if ops_reference != ceilings.operations(reference, dtype, threads)[0]:
        raise ValueError(f"{reference}'s step issues {ceilings.operations(reference, dtype, threads)[0]} operations "
                         f"in chapter 0's count, not {ops_reference}: count them as chapter 0 does (lib.sizes.operations)")
    best, median, source = operation_cost(ceilings, SIZES[name].with_dtype(dtype).weight_bytes, dtype, threads, kind,
                                          rows, reference)
    grown = ceilings.rest_growth(reference, dtype, threads, kind, rows, positions) if positions else None
    g = (0.0, 0.0) if grown is None else (grown.best, grown.median)
    return Term("dispatch", best * ops + g[0], median * ops + g[1], "dispatch",
                f"its {ops:,} operations at {source}"
                + (f", and {reference}'s rest grown with its cache's bytes" if grown is not None else ""))


def price_decode(ceilings: Ceilings, name: str, reference: str, ops: int, ops_reference: int, dtype: str,
                 threads: int, context: int) -> Prediction:
    """One decode step of size ``name`` in ``dtype`` on ``threads`` threads over a growing cache of ``context``
    positions, priced from chapter 0's measurements of ``reference`` (see the module's docstring); ``ops`` and
    ``ops_reference``: the operations one step of each issues. Seconds, term by term."""
    s, r = SIZES[name].with_dtype(dtype), MODELS[reference][0]
    own = _own(ceilings, name, reference)
    blocks, head, _ = (1.0, 1.0, 1.0) if own else _scaled(s, r)
    args = (name if own else reference, dtype, threads)  # a size chapter 0 measured: its own cache's rates
    terms = []
    for kernel, label, k in (("blocks", "block matrices", blocks), ("head", "LM head", head)):
        t = ceilings.matrices(name if own else reference, dtype, threads, kernel, 1)
        terms.append(Term(label, t.best * k, t.median * k, "memory",
                          f"chapter 0's own {kernel} of {name} at one row" if own else
                          f"its bytes at the rate {reference}'s {kernel} stream at one row"))
    cache_bytes = context * s.kv_bytes_per_token
    attention = ceilings.attention_decode(*args, cache_bytes)
    terms.append(Term("attention", attention.best, attention.median, "memory",
                      f"{cache_bytes / 1e6:.1f} MB of cache at chapter 0's rate for that size"
                      + (f" of {name}'s own cache" if own and name != reference else "")))
    copy = ceilings.cache_concatenation(*args, cache_bytes) or ceilings.cache_concatenation(reference, dtype, threads,
                                                                                           cache_bytes)
    if copy is None:
        rate = ceilings.stream_bandwidth(dtype, threads, "copy")
        terms.append(Term("cache copy", 2 * cache_bytes / rate, 2 * cache_bytes / rate, "memory", "chapter 0's copy"))
    else:
        terms.append(Term("cache copy", copy.best, copy.median, "memory", "chapter 0's concatenation of that size"))
    terms.append(_dispatch(ceilings, name, reference, ops, ops_reference, dtype, threads, "decode", 1, cache_bytes))
    return Prediction("decode", 1, 1, context, tuple(terms))


def price_prefill(ceilings: Ceilings, name: str, reference: str, ops: int, ops_reference: int, dtype: str,
                  threads: int, tokens: int) -> Prediction:
    """A prefill of ``tokens`` tokens of size ``name`` (logits at the last position), priced as
    :func:`price_decode`: the block matrices at the time ``reference``'s take at that many rows (its bytes at one
    row, its FLOPs at ``F(rows)`` beyond), scaled by the size's weights; attention at chapter 0's rate for that
    length, scaled by layers x width; dispatch at the reference's prefill of that length, scaled by operations."""
    s, r = SIZES[name].with_dtype(dtype), MODELS[reference][0]
    own = _own(ceilings, name, reference)
    blocks, head, work = (1.0, 1.0, 1.0) if own else _scaled(s, r)
    args = (name if own else reference, dtype, threads)
    b, h = ceilings.matrices(*args, "blocks", tokens), ceilings.matrices(*args, "head", 1)
    a = ceilings.attention_prefill(*args, tokens)
    terms = [Term("block matrices", b.best * blocks, b.median * blocks, "memory" if tokens == 1 else "compute",
                  f"{reference}'s block matrices at {tokens} rows, scaled by the weights"),
             Term("LM head", h.best * head, h.median * head, "memory", "the last position only"),
             Term("attention", a.best * work, a.median * work, "compute", f"{reference}'s, scaled by layers x width"),
             _dispatch(ceilings, name, reference, ops, ops_reference, dtype, threads, "prefill", tokens)]
    return Prediction("prefill", tokens, 1, 0, tuple(terms))


def transition_bytes(floor_s: float, rate: float) -> float:
    """The weight bytes at which a step's weights, streamed at ``rate`` bytes/s, take as long as its floor of
    ``floor_s`` seconds: a model with fewer sits on the floor, one with many more follows its bytes."""
    if not (floor_s > 0 and rate > 0 and math.isfinite(floor_s * rate)):
        raise ValueError(f"a transition needs a positive floor and rate, got {floor_s!r} s and {rate!r} B/s")
    return floor_s * rate


def operations_line(device: torch.device) -> tuple[float, float]:
    """``(fixed, per_layer)``: the operations a GPT-2 decode step issues, as a line in its layers, from two
    one-token steps of 64-wide GPT-2s of one and two layers, counted as :func:`operations` counts them (every
    block issues the same operations, whatever its width). Lets a page predict each size's operations before it
    builds it."""
    counts = [operations(build(replace(SIZES["tiny-gpt2"], layers=n), device, torch.float32)) for n in (1, 2)]
    return float(2 * counts[0] - counts[1]), float(counts[1] - counts[0])
