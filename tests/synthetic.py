"""Synthetic ceilings for tests of the cost model and the regime rule: every rate chosen by hand, so a test can
compute what the model must predict and make a measured pass go either way."""

import pandas as pd

from lib.machine import MODELS, Ceilings

#: The hand-chosen rates: weights stream at 10 GB/s at one row, F(M) grows as M up to 16 rows (flat time) and
#: then at 100 GFLOP/s; attention at 50 GFLOP/s; caches read at 20 GB/s; copies at 20 GB/s (fresh: 5 GB/s).
WEIGHT_RATE, PEAK, ATTENTION_RATE, CACHE_RATE, COPY, FRESH_COPY = 10e9, 100e9, 50e9, 20e9, 20e9, 5e9
DISPATCH = {"prefill": 3e-3, "decode": 2e-3, "decode_static": 1.5e-3}


#: With ``long_caches``: the hollowed step from a longer cache takes this long beyond its step from 16 tokens, per
#: GB of cache beyond 16 tokens (a growing cache: on top of its concatenation, which copies at ``COPY``).
REST_GROWTH_S_PER_GB = {"decode": 4e-3, "decode_static": 1e-3}


def table(model: str = "gpt2-small", dtype: str = "fp32", threads: int = 2, spread: float = 0.1,
          hardware: bool = True, long_caches: bool = False) -> pd.DataFrame:
    """A ceilings table for ``model`` with the rates above; ``best_s`` at the rate, the median ``spread`` slower.
    ``long_caches``: with a growing cache's concatenation and the hollowed steps from a cache of (1, 1000) and
    (16, 512) (:data:`REST_GROWTH_S_PER_GB`)."""
    shape, _ = MODELS[model]
    size = 4 if dtype == "fp32" else 2
    base = dict(device="cpu", device_name="synthetic", dtype=dtype, threads=threads, hardware_support=hardware,
                status="ok", note="", spread=spread, setting="")
    rows = []

    def add(kernel, seconds, **extra):
        rows.append(dict(base, kernel=kernel, best_s=seconds, median_s=seconds * (1 + spread),
                         worst_s=seconds * (1 + 2 * spread), **extra))

    for kernel, rate in (("read", CACHE_RATE), ("read_max", CACHE_RATE), ("copy", COPY), ("fresh_copy", FRESH_COPY),
                         ("triad", COPY)):
        add(kernel, 1e9 / rate, model="", rows=0, bytes_per_call=1e9, flops_per_call=float("nan"))
    add("square_matmul", 1e9 / PEAK, model="", rows=1000, bytes_per_call=float("nan"), flops_per_call=1e9)
    for kernel, params in (("blocks", shape.layers * shape.block_params), ("head", shape.lm_head_params)):
        nbytes = params * size
        for m in (1, 2, 4, 16, 64, 256, 1024):
            seconds = max(nbytes / WEIGHT_RATE, 2 * params * m / PEAK)
            add(kernel, seconds, model=model, rows=m, bytes_per_call=nbytes, flops_per_call=2.0 * params * m)
    for t in (1, 16, 256, 1024):
        flops = shape.layers * 2 * shape.d_model * t * t
        add("attention_prefill", flops / ATTENTION_RATE + 1e-5, model=model, rows=t, bytes_per_call=float("nan"),
            flops_per_call=float(flops))
    for kernel in ("attention_decode", "attention_decode_masked"):
        for b, c in ((1, 16), (1, 1024), (16, 512)):
            nbytes = b * c * shape.with_dtype(dtype).kv_bytes_per_token
            add(kernel, nbytes / CACHE_RATE, model=model, rows=b, context=c, bytes_per_call=nbytes,
                flops_per_call=float("nan"))
    kv = shape.with_dtype(dtype).kv_bytes_per_token
    if long_caches:
        for b, c in ((1, 16), (1, 1024), (16, 512)):
            add("cache_concatenation", 2 * b * c * kv / COPY, model=model, rows=b, context=c,
                bytes_per_call=2 * b * c * kv, flops_per_call=float("nan"))
    for kind, seconds in DISPATCH.items():
        for setting, sizes in (("between weight streams", (1, 64)), ("alone", (1,))):
            for rows_ in sizes:
                extra = dict(context=16 if kind == "decode" else 24) if long_caches and kind != "prefill" else {}
                add("dispatch", seconds, model=model, rows=rows_, pass_kind=kind, operations=500, setting=setting,
                    us_per_operation=seconds / 500 * 1e6, bytes_per_call=float("nan"), flops_per_call=float("nan"),
                    **extra)
        if long_caches and kind != "prefill":
            short_at = 16 if kind == "decode" else 24
            for b, c in ((1, 1000), (16, 512)):
                positions = c if kind == "decode" else c + 8
                grown = REST_GROWTH_S_PER_GB[kind] * b * (positions - short_at) * kv / 1e9
                if kind == "decode":  # the hollowed step still concatenates its cache
                    grown += 2 * b * (positions - short_at) * kv / COPY
                add("dispatch", seconds + grown, model=model, rows=b, pass_kind=kind, operations=500,
                    setting="between weight streams", context=positions, bytes_per_call=float("nan"),
                    flops_per_call=float("nan"))
    if long_caches:  # a batch measured from 16 tokens too
        for kind in ("decode", "decode_static"):
            add("dispatch", DISPATCH[kind], model=model, rows=16, pass_kind=kind, operations=500,
                setting="between weight streams", context=16 if kind == "decode" else 24,
                bytes_per_call=float("nan"), flops_per_call=float("nan"))
    return pd.DataFrame(rows)


def ceilings(**kwargs) -> Ceilings:
    return Ceilings(table(**kwargs), "cpu")
