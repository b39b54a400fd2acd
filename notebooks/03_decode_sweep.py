# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Prefill and Decode (.venv)
#     language: python
#     name: prefill-decode
# ---

# %% [markdown]
# # 3. Decode: one token per pass, every weight every time
#
# A decode step feeds one new position through every layer. Its arithmetic is small, about `2 x weights` FLOPs, but
# it must read every weight and the whole KV cache to do it. The textbook says such a step is
# **bandwidth-bound**: its time is its bytes divided by the memory's bandwidth (its *streaming floor*), so it should
# barely depend on the context until the cache is large, and it should halve when the bytes halve. This chapter
# names each step's [regime](glossary.md#regimes) by what its time is made of.
#
# This chapter tests that with the cost model (`lib.costmodel`): the weights at the rate the model's own
# matrix-vector products stream them (chapter 0), attention's read of the cache, the copy a growing cache makes
# at every step, and the cost of issuing the step. It times cached greedy decode of GPT-2 small from a short
# context to one near its 1,024 positions. Then it asks what makes a step grow with the context, whether a second
# thread helps, and what batching does when the batch shares the weights but not the caches.

# %% [markdown]
# **After this chapter you can**
#
# * Compute a decode step's streaming floor from the model's bytes, and say from its parts which regime a measured step is in.
# * Explain why a step grows with the context (the cache's read and its copy), in milliseconds per 1,000 tokens.
# * Predict what batching does to the step and to tokens per second, and what stops the gain.
# * Compute the KV cache's bytes per token for multi-head and grouped-query attention.

# %% tags=["parameters"]
quick = False
device = "auto"                  # "auto", "cpu", "cuda", "cuda:N"
model_name = "gpt2-small"
contexts = [16, 128, 512, 960]   # GPT-2 has 1,024 positions: context + steps must fit
steps = 8                        # greedy steps per run, each read back to the host (a run is the median of its steps)
runs = 9                         # runs per point of the decode sweep; a point is their median (nine: see lib.claims)
warmup_steps = 2                 # untimed steps from each context before each run's steps
settle_s = 8.0                   # at most this long re-measuring the points whose interval straddles their prediction
batch_runs = 3                   # runs of the batched sweep (a large batch's step is long: few runs, their range)
profiled_runs = 5                # profiled steps, one layer down
configs = None                   # [(dtype, threads)]; None: fp32 on all threads and on 1, and the 2-byte dtype
batches = [1, 4, 16, 64]
batch_context = 512
batch_steps = 6

# %%
import os

from lib import params
from lib.machine import MODELS

P = params.check(globals(), {
    "device": params.device(),
    "model_name": params.choice([m for m in MODELS if m != "smollm2-135m"], quick="tiny-gpt2"),
    "contexts": params.int_list(min=1, max=1023, quick=[16, 128], min_items=2, ascending=True),
    "steps": params.integer(min=2, max=256, quick=8),
    "runs": params.integer(min=1, max=30, quick=2),
    "warmup_steps": params.integer(min=0, max=32),
    "settle_s": params.number(min=0, max=600, quick=0),
    "batch_runs": params.integer(min=1, max=30, quick=2),
    "profiled_runs": params.integer(min=1, max=20, quick=2),
    "configs": params.listof(params.tuple_of(params.dtype(), params.integer(min=1, max=os.cpu_count() or 1,
                                                                            allow_none=True)), allow_none=True),
    "batches": params.int_list(min=1, max=256, quick=[1, 4], min_items=2, ascending=True),
    "batch_context": params.integer(min=1, max=1000, quick=64),
    "batch_steps": params.integer(min=2, max=64, quick=3),
}, quick=quick, chapter="03_decode_sweep")

# %%
import contextlib
import io

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from IPython.display import Markdown, display

from lib import claims, costmodel, machine, phases, profiling, prose, regime, sweeps, timing
from lib.claims import Spread
from lib.device import UnsupportedDtype, describe_environment, resolve_dtype, thread_counts, use_threads
from lib.models import load_model
from lib.progress import progress
from lib.prose import show
from lib.results import Results, load_reference
from lib.shapes import ModelShape

# %% [markdown]
# The configurations (dtype and threads), their models and their cost models. By default, fp32 runs on all
# threads and on one. The 2-byte dtype (bf16 on a CPU, fp16 on a GPU) runs at its fastest thread count in chapter 0.

# %%
on_gpu = device.type == "cuda"
ceilings = machine.load_ceilings(device, quick=quick)  # chapter 0's one measurement of this machine
most = max(thread_counts(device))
if configs is None:
    low = "fp16" if on_gpu else "bf16"
    fast = max(ceilings.threads(low), key=lambda n: ceilings.weight_rate(model_name, low, n), default=None) \
        if low in ceilings.dtypes() else None
    configs = [("fp32", most)] + ([("fp32", 1)] if most > 1 else []) + ([(low, fast)] if fast else [])
configs = [(dt, most if on_gpu or n is None else n) for dt, n in configs]
models, not_run = {}, []
for dt in dict.fromkeys(["fp32"] + [dt for dt, _ in configs]):
    try:
        models[dt] = load_model(model_name, device, resolve_dtype(dt, device))
    except UnsupportedDtype as error:
        not_run.append(f"{dt}: {error}")
configs = [c for c in configs if c[0] in models]
fp32 = models["fp32"]
shape = ModelShape.from_config(fp32.config, name=model_name).with_dtype("fp32")
main = ("fp32", most)
pacer = machine.Pacer(ceilings, model_name, *main, device)  # the machine's speed, watched
pacer.check("before the sweep")
cost = {(dt, n): costmodel.CostModel(ceilings, model_name, shape.with_dtype(dt), dt, n) for dt, n in configs}
for c in cost.values():
    c.decode(16)  # says which run of chapter 0 is missing, before any work
results = Results("03_decode_sweep", params=P, quick=quick, model=model_name)
register = claims.Claims()


def label(dt: str, n: int) -> str:
    """How a configuration is named on the page: its dtype and, on a CPU, its threads."""
    return f"{dt}, GPU" if on_gpu else f"{dt}, {n} thread{'s' if n > 1 else ''}"


def tag(dt: str, n: int) -> str:
    """A configuration in a claim's id."""
    return f"{dt}_gpu" if on_gpu else f"{dt}_{n}t"


pd.Series({**describe_environment(device, None, model_name), "configurations": [label(*c) for c in configs],
           "not run": not_run or "none"}).to_frame("this run")

# %% [markdown]
# ## What this run found

# %%
opening = prose.Opening()

# %% [markdown]
# ## Predict first
#
# The cost model prices a step at the middle of its run (the context plus half the steps), term by term, at
# chapter 0's rates. The weights cost their bytes at the rate the model's matrix-vector products stream them (the
# same as their FLOPs at [`F(1)`](glossary.md#matrix-rate-fm)). Attention reads the cache, a growing cache is
# copied, and [dispatch](glossary.md#dispatch) is the same step with its matrices and attention hollowed out. The
# textbook's streaming floor, the same bytes over the streaming read, stands beside it. What a step reads, and
# chapter 0's rates for each configuration:

# %%
mid_first = contexts[0] + steps // 2  # the shortest context's step, priced at the middle of its run


def cache_read_gb_s(dt: str, n: int, tokens_: int) -> float:
    """Chapter 0's rate for attention's read of a cache of ``tokens_`` tokens (GB/s)."""
    nbytes = shape.with_dtype(dt).kv_bytes_per_token * tokens_
    return nbytes / ceilings.attention_decode(model_name, dt, n, nbytes).best / 1e9


def cache_copy_gb_s(dt: str, n: int, tokens_: int) -> float:
    """Chapter 0's rate for a growing cache's copy of ``tokens_`` tokens, its bytes read and written (GB/s); its
    streaming copy where chapter 0 timed no concatenation of this model's caches."""
    nbytes = shape.with_dtype(dt).kv_bytes_per_token * tokens_
    c = ceilings.cache_concatenation(model_name, dt, n, nbytes)
    return 2 * nbytes / c.best / 1e9 if c is not None else ceilings.stream_bandwidth(dt, n, "copy") / 1e9


step_inputs = pd.DataFrame([dict(configuration=label(dt, n), weights_mb=shape.with_dtype(dt).weight_bytes / 1e6,
                                 cache_kib_per_token=shape.with_dtype(dt).kv_bytes_per_token / 1024,
                                 matrix_vector_gb_s=ceilings.weight_rate(model_name, dt, n) / 1e9,
                                 cache_read_gb_s=cache_read_gb_s(dt, n, mid_first),
                                 cache_copy_gb_s=cache_copy_gb_s(dt, n, mid_first),
                                 streaming_read_gb_s=ceilings.stream_bandwidth(dt, n) / 1e9,
                                 dispatch_ms=ceilings.dispatch(model_name, dt, n, "decode", positions=mid_first).best * 1e3)
                            for dt, n in configs])
show(f"The shortest context is {contexts[0]} tokens and a run takes `steps` = {steps} steps, so its step is priced at "
     f"**{mid_first} cached tokens**. *Cache read (GB/s)* is chapter 0's rate for attention reading a cache that size; "
     "*cache copy (GB/s)* its rate for copying it into a longer one, as a growing cache does every step.")
prose.shown(step_inputs.round(2))

# %% [markdown] tags=["predict"]
# **Predict first.** A step reads every weight once and its cache (*cache (KiB per token)* times the cached tokens
# above). The table gives each part's rate: the weights at *matrix vector (GB/s)*, attention at *cache read (GB/s)*,
# the copy (the cache moved twice) at *cache copy (GB/s)*; issuing the step costs *dispatch (ms)*. For the
# first configuration at the shortest context, which part is largest, and how many milliseconds should a step
# take? Is that close to its bytes at the streaming read, or well above them?

# %% [markdown]
# The cost model's price, term by term, for every configuration and context, with the streaming floor beside it
# (folded: open it once you have written your answer).

# %%
display(prose.source(costmodel.CostModel.decode))
def price_rows(cost: dict) -> pd.DataFrame:
    """Every configuration's step at every context, priced term by term (ms at the fastest calls), with its bytes
    and its streaming floor."""
    rows = []
    for dt, n in configs:
        for c in contexts:
            p = cost[(dt, n)].decode(c + steps // 2)
            nbytes = shape.with_dtype(dt).weight_bytes + shape.with_dtype(dt).kv_bytes_per_token * (c + steps // 2)
            rows.append(dict(dtype=dt, threads=n, context_tokens=c, bytes_per_step=nbytes, predicted_ms=p.best * 1e3,
                             **{f"{t.name.replace(' ', '_')}_ms": t.best * 1e3 for t in p.terms},
                             streaming_floor_ms=nbytes / ceilings.stream_bandwidth(dt, n) * 1e3,
                             largest_term=p.dominant.name))
    return pd.DataFrame(rows)


predicted = price_rows(cost)
first = predicted[(predicted.dtype == main[0]) & (predicted.threads == main[1])].iloc[0]
price_table = prose.shown(predicted[["dtype", "threads", "context_tokens", "block_matrices_ms", "LM_head_ms", "attention_ms",
                                     "cache_copy_ms", "dispatch_ms", "predicted_ms", "streaming_floor_ms"]].round(2))
prose.prediction(f"Prediction ({label(*main)}, context {first.context_tokens}): a step reads "
                 f"{first.bytes_per_step / 2**20:.0f} MiB. Its weights cost **{prose.ms((first.block_matrices_ms + first.LM_head_ms) / 1e3)}** "
                 f"at the model's own matrix-vector rate, its cache {prose.ms((first.attention_ms + first.cache_copy_ms) / 1e3)}, "
                 f"issuing it {prose.ms(first.dispatch_ms / 1e3)}: **{prose.ms(first.predicted_ms / 1e3)}** in all, against "
                 f"{prose.ms(first.streaming_floor_ms / 1e3)} for its bytes at the streaming read. Every configuration and "
                 f"context, term by term:\n\n{price_table.to_html(index=False)}", "The cost model's prediction")

# %% [markdown]
# ## The sweep
#
# Each run times `steps` greedy steps from every context of every configuration in turn, and the sweep takes
# `runs` runs. Taking turns puts a slow spell of a shared machine on one run of everything, not on one
# configuration, so a difference or a ratio between two points is taken within a run. A point is the median of its
# runs, with the 95 % interval of that median.
#
# <details><summary>How the sweep was run</summary>
#
# For each context, one prefill builds the cache; each run crops it back to its context and takes `warmup_steps`
# untimed steps first. A step's time runs from one token's host readback to the next, and its page faults are
# counted; a run's step time is the median of its steps. Each run is set beside its own price, with the page
# faults its steps took (chapter 0's cost per fault), so a point's ratio to its prediction is taken run by run too.
# A point whose interval straddles its tolerance is timed again while `settle_s` seconds last
# (`lib.claims.settle`). For a dtype other than fp32 the cache is built by the fp32 model and cast: a step's cost
# depends on the cache's shape and dtype, not its values. The fp32 configurations also decode over a preallocated
# cache in each run, in turn with the others (read in "Why the step grows with the context", below).
#
# </details>
#
# The loop that decodes and stamps each step, as it runs (folded).

# %%
display(prose.source(phases.decode))
growth_configs = [(dt, n) for dt, n in configs if dt == "fp32"]
rows, static_rows, alone_runs, kept = [], [], [], {}
keys = ["dtype", "threads", "context_tokens"]


def made_of(k: tuple) -> dict:
    """A step's price split into its weights (at the kernel's rate), its cache and dispatch (ms), its streaming
    floor, and which part is largest and which is most of its time above that floor."""
    p, (dt, n, c), s = step_price[k], k, shape.with_dtype(k[0])
    ms_ = lambda *names: sum(p.term(t).best for t in names) * 1e3  # noqa: E731
    w, kv, d = ms_("block matrices", "LM head"), ms_("attention", "cache copy", "page faults"), ms_("dispatch")
    w_floor, kv_floor = (b / ceilings.stream_bandwidth(dt, n) * 1e3
                         for b in (s.weight_bytes, s.kv_bytes_per_token * (c + steps // 2)))
    above = {"dispatch": d, "the kernel's rate below the streaming read": w - w_floor,
             "the cache's work beyond its bytes": kv - kv_floor}
    parts_ = {"weights": w, "dispatch": d, "cache": kv}
    excess = {"dispatch": d, "the kernel (its rate against the streaming read)": w - w_floor,
              "the cache's work beyond its bytes": kv - kv_floor}
    excess["the rest of the price"] = p.best * 1e3 - (w_floor + kv_floor) - sum(excess.values())
    if abs(excess["the rest of the price"]) < 0.05:  # ms: every term is one of the three above
        del excess["the rest of the price"]
    return dict(weights=w, cache=kv, dispatch=d, total=p.best * 1e3, floor=w_floor + kv_floor, excess=excess,
                largest=max(parts_, key=parts_.get), above=max(above, key=above.get), above_ms=max(above.values()),
                slow_kernel=w_floor * regime.REGIME_SLACK < w)  # its kernel far below the streaming read


ABOVE_NAMES = {"dispatch": "dispatch", "the cache's work beyond its bytes": "cache work",
               "the kernel's rate below the streaming read": "the kernel's rate"}  # the label's short names


def wholly_above(m: dict, step: Spread) -> bool:
    """True when a step's whole interval over runs (seconds) lies above the slack times its streaming floor: one
    whose interval straddles it keeps the rule's label, as a claim that straddles its threshold is not decided."""
    return step.low * 1e3 > regime.REGIME_SLACK * m["floor"]


def plain_bound(m: dict, dt: str, n: int) -> str:
    """What a step's parts say bounds it, in plain words (no regime label), with the kernel's rate against the
    streaming read when that is what bounds it."""
    if m["largest"] == "weights" and m["slow_kernel"]:
        return (f"bound by the matrix-vector kernel's rate ({ceilings.weight_rate(model_name, dt, n) / 1e9:.1f} GB/s "
                f"against the streaming read's {ceilings.stream_bandwidth(dt, n) / 1e9:.1f})")
    return {"weights": f"held above its streaming floor by {ABOVE_NAMES[m['above']]} most of all",
            "dispatch": "bound by dispatch, the cost of issuing it", "cache": "bound by its cache's work"}[m["largest"]]


def bound_by(m: dict, step: Spread) -> str:
    """The regime the parts say of a step measured at ``step`` (seconds, over runs), in words a reader of the
    roofline literature reads correctly (the table's labels, :func:`by_parts`)."""
    near = not wholly_above(m, step)
    return {"weights": "[bound by the kernel's rate](glossary.md#regimes), with the weights its largest part"
            if m["slow_kernel"] else "[memory-bound](glossary.md#regimes), with the weights its largest part" if near
            else f"[above its streaming floor](glossary.md#regimes) by {ABOVE_NAMES[m['above']]} most of all, though "
                 "the weights are its largest part",
            "dispatch": "[dispatch-bound](glossary.md#regimes), with dispatch its largest part",
            "cache": "bound by its cache's work"}[m["largest"]]

# %%
def by_parts(k: tuple, rule: str, step: Spread) -> str:
    """A point's label: the regime rule's, unless it calls "memory-bound" a step whose whole interval (seconds, over
    runs) lies more than the slack above its streaming floor; then its parts name it (the glossary's Regimes): its
    largest part where that is dispatch or a slow kernel, else what adds most above the floor."""
    m = made_of(k)
    if rule != "memory-bound" or not wholly_above(m, step):
        return rule
    if m["largest"] == "dispatch":
        return "dispatch-bound"
    if m["largest"] == "weights" and m["slow_kernel"]:
        return "bound by the kernel's rate"
    return "above its streaming floor: " + ABOVE_NAMES[m["above"]]


def decode_run(run: int, only: set | None = None) -> None:
    """One run of every configuration and context in turn (``only``: just these (dtype, threads, context) points,
    with their preallocated-cache twins)."""
    for dt, n in configs:
        for kind in ("dynamic", "static") if (dt, n) in growth_configs else ("dynamic",):
            chosen = [c for c in contexts if only is None or (dt, n, c) in only]
            if not chosen:
                continue
            with use_threads(n), contextlib.redirect_stdout(io.StringIO()):  # no line per configuration and run
                table = sweeps.decode_sweep(models[dt], chosen, steps=steps, runs=1, prefill_model=fp32, cache=kind,
                                            label=f"{label(dt, n)}, {kind} cache", caches=kept.setdefault((dt, n, kind), {}),
                                            warmup_steps=warmup_steps)
                if kind == "dynamic" and (dt, n) in growth_configs:  # the cache's parts alone, in the same minutes
                    for c in chosen:
                        parts = sweeps.cache_costs(shape, 1, c + steps // 2, device, models[dt].dtype, repeats=3,
                                                   flush_bytes=int(shape.with_dtype(dt).weight_bytes))
                        alone_runs.append(dict(run=run, dtype=dt, threads=n, context_tokens=c,
                                               **{f"{part}_{what}": getattr(parts[part], what) * 1e3
                                                  for part in ("attention", "concatenation")
                                                  for what in ("median", "low")}))
            (rows if kind == "dynamic" else static_rows).append(
                table.assign(run=run, dtype=dt, threads=n, **{"step_ms" if kind == "dynamic" else "static_step_ms":
                                                              table.median_s * 1e3}))


def priced_runs() -> pd.DataFrame:
    """Every run of the growing cache beside its price, its own page faults counted, and its ratio to it."""
    frame = pd.concat(rows, ignore_index=True)
    price = [cost[(r.dtype, r.threads)].decode(r.context_tokens + steps // 2, fresh_pages=r.faults_per_step).best * 1e3
             for r in frame.itertuples()]
    return frame.assign(priced_ms=price, ratio=frame.step_ms / np.array(price))


def spreads() -> tuple[dict, dict]:
    """Per point: its step (s) and its ratio to its price, each a Spread over its runs."""
    groups = decode_runs.groupby(keys, sort=False)
    return {k: Spread.of(g.step_ms / 1e3) for k, g in groups}, {k: Spread.of(g.ratio) for k, g in groups}

# %% [markdown]
# The sweep itself, then each point beside its price and its streaming floor.

# %%
def band_top(k: tuple) -> float:
    """The top of a point's band before the tolerance: its price at the median calls over the fastest."""
    q = cost[k[:2]].decode(k[2] + steps // 2)
    return q.median / q.best


def straddlers() -> set:
    """The points whose ratio's interval straddles an edge of their band."""
    return {k for k, v in ratio.items()
            if claims.within(v, Spread(1.0, 1.0, band_top(k)), claims.PREDICTED_TIME) == claims.UNRESOLVED}


def measure_again() -> None:
    """One more run of the straddling points, then every point's spreads again."""
    global decode_runs, spread, ratio
    decode_run(int(decode_runs.run.max()) + 1, only=straddlers())
    decode_runs = priced_runs()
    spread, ratio = spreads()


with contextlib.redirect_stdout(io.StringIO()):  # a build's progress lines; a reader's bar still shows
    for run in progress(range(1, runs + 1), desc="decode runs"):
        decode_run(run)
    pacer.check("after it")
    decode_runs = priced_runs()
    spread, ratio = spreads()
    before = len(straddlers())
    again = claims.settle(measure_again, lambda: not straddlers(), budget_s=settle_s, max_runs=20)
settled = (f"After {runs} runs, {before} of {len(ratio)} points straddled their band; {again} more run"
           f"{'s' * (again != 1)} of those (within {settle_s:g} s) left {len(straddlers())}.")  # folded below
static_runs = pd.concat(static_rows, ignore_index=True)
results.table(decode_runs, "decode_runs")
faults = decode_runs.groupby(keys, sort=False).faults_per_step.median()
decode = (timing.median_range(decode_runs, keys, ["step_ms", "ratio"]).merge(predicted, on=keys)
          .merge(faults.reset_index(), on=keys))
step_price = {k: cost[k[:2]].decode(k[2] + steps // 2, fresh_pages=faults[k]) for k in spread}
labels = {k: regime.regime(s, step_price[k]) for k, s in spread.items()}
decode["regime"] = [by_parts(k, labels[k].label, spread[k])  # by the rule, then by its parts
                    for k in map(tuple, decode[keys].itertuples(index=False))]
decode["over_predicted"] = decode.ratio
decode["over_streaming_floor"] = decode.step_ms / decode.streaming_floor_ms
decode["implied_gb_s"] = decode.bytes_per_step / (decode.step_ms / 1e3) / 1e9
results.table(decode, "decode_sweep")
warning = regime.check_floors({f"{label(*k[:2])} at context {k[2]}": r for k, r in labels.items()}, ceilings.strict)
if warning:
    show(warning)

# %%
for (dt, n), g in decode[decode.over_streaming_floor < 1].groupby(["dtype", "threads"], sort=False):  # under it
    kernel, read = ceilings.weight_rate(model_name, dt, n) / 1e9, ceilings.stream_bandwidth(dt, n) / 1e9
    show(f"{label(dt, n)} took {prose.span(g.over_streaming_floor.min(), g.over_streaming_floor.max(), '.2f', 'x')} its "
         f"streaming floor at context {', '.join(map(str, g.context_tokens))}: " + (
             f"a step can beat it because its kernel reads the weights at {kernel:.1f} GB/s here, faster than the "
             f"streaming read's {read:.1f} (the processor's caches feed the kernel faster than one streaming pass)."
             if kernel > read else f"faster than its bytes at the streaming read's {read:.1f} GB/s allow, though its "
             f"kernel reads only {kernel:.1f}: one of chapter 0's ceilings is off."))
prose.shown(decode[["dtype", "threads", "context_tokens", "step_ms", "step_ms_low", "step_ms_high", "predicted_ms",
        "over_predicted", "over_streaming_floor", "implied_gb_s", "regime"]].round(2))

# %%
fig, (ax_s, ax_b) = plt.subplots(1, 2, figsize=(12, 4.5))
for (dt, n), g in decode.groupby(["dtype", "threads"], sort=False):
    line = ax_s.errorbar(g.context_tokens, g.step_ms, yerr=[g.step_ms - g.step_ms_low, g.step_ms_high - g.step_ms],
                         marker="o", capsize=3, label=label(dt, n))
    color = line[0].get_color()
    ax_s.plot(g.context_tokens, g.predicted_ms, "--", color=color, lw=1, label=f"{label(dt, n)}: cost model")
    ax_s.plot(g.context_tokens, g.streaming_floor_ms, ":", color=color, label=f"{label(dt, n)}: bytes at the streaming read")
    ax_b.plot(g.context_tokens, g.implied_gb_s, "o-", color=color, label=f"{label(dt, n)}: implied")
    ax_b.axhline(ceilings.stream_bandwidth(dt, n) / 1e9, ls=":", lw=1, color=color)
    ax_b.axhline(ceilings.weight_rate(model_name, dt, n) / 1e9, ls="--", lw=1, color=color)
mine = decode[(decode.dtype == main[0]) & (decode.threads == main[1])]
ax_s.set(xscale="log", yscale="log", xlabel="context tokens at the start of the run", ylabel="decode step (ms)")
ax_s.set_title(f"{label(*main)}: a step is {prose.span(mine.over_predicted.min(), mine.over_predicted.max(), '.2f')}x its cost "
               f"model,\n{prose.span(mine.over_streaming_floor.min(), mine.over_streaming_floor.max())}x its streaming floor",
               fontsize=10)
ax_b.set(xscale="log", xlabel="context tokens", ylabel="bytes a step must read / step time (GB/s)")
ax_b.set_title("Implied bandwidth\n(dotted: streaming read; dashed: matrix-vector rate)", fontsize=10)
for ax in (ax_s, ax_b):
    ax.set_xscale("log", base=2)
    ax.legend(fontsize=6)
fig.tight_layout()
results.figure(fig, "decode_step")
plt.show()

# %% [markdown]
# Read the regimes, not the textbook. The rule, shown once (every chapter that labels a point calls it).

# %%
display(prose.source(regime.regime))
register.claim(
    "decode_memory_bound",
    "Every decode step of the first configuration is bandwidth-bound in the source chapter's sense: it takes at most "
    f"{regime.REGIME_SLACK:g} times its streaming floor (its weights' and cache's bytes at the streaming read), so "
    "halving its bytes would nearly halve it (decided on the interval of each point's step over its floor).")
mine_labels = [labels[(*main, c)] for c in contexts]
floor_s = {c: float(mine.set_index("context_tokens").streaming_floor_ms[c]) / 1e3 for c in contexts}
over_floor = {c: spread[(*main, c)] / floor_s[c] for c in contexts}  # each point's step over its floor, runs
floor_span = prose.span(min(o.mid for o in over_floor.values()), max(o.mid for o in over_floor.values()), ".1f", "x")
side = {c: "over" if o.low > regime.REGIME_SLACK else "within" if o.high <= regime.REGIME_SLACK else "straddle"
        for c, o in over_floor.items()}  # each context's interval against the slack


def at_contexts(which: str, verb: str) -> str:
    """The steps on one side of the slack, their contexts and ratios, as a clause ("" when none)."""
    cs = [c for c in contexts if side[c] == which]
    return "" if not cs else (f"at context{'s' * (len(cs) > 1)} {prose.and_list(cs)} the step{'s' * (len(cs) > 1)} "
                              f"{verb} {prose.and_list(over_floor[c].text('.2f', 'x') for c in cs)}")


c_far = max(contexts, key=lambda c: over_floor[c].mid)  # the step furthest above its floor
kind_first = made_of((*main, c_far))
why_far = (f" At {c_far} tokens, the furthest above, the price's parts beyond its bytes' time: "  # the plain why
           + "; ".join(f"{name} {'adds' if v >= 0 else 'saves'} {prose.ms(abs(v) / 1e3)}"
                       for name, v in kind_first["excess"].items()) + " (split below).")
rest = "; ".join(f"{at_contexts(w, 'took')}, {t}" for w, t in (("within", "within it"), ("straddle", "straddling it"))
                 if at_contexts(w, "took"))

# %%
slack = regime.REGIME_SLACK
verdict = register.record("decode_memory_bound", claims.verdict_of(all(o.high <= slack for o in over_floor.values()),
                                                                   any(o.low > slack for o in over_floor.values())),
                          predicted=f"at most {slack:g}x the streaming floor at every context",
                          measured=", ".join(f"{c}: {o.text('.2f', 'x')}" for c, o in over_floor.items()),
                          evidence=f"decode_sweep.csv (over_streaming_floor), {label(*main)}")
within_slack = at_contexts("within", "took")
rule_says = list(dict.fromkeys(r.label for r in mine_labels))  # the regime rule's labels, by the largest term
table_says = list(dict.fromkeys(mine.regime))  # the table's regime column: the rule's, or by the parts above the floor
said = {k: prose.and_list(f"*{x}*" for x in v) for k, v in (("rule", rule_says), ("table", table_says))}
named_as = (f"The table's regime column names these steps by their parts, {said['table']}"
            + ("" if table_says == rule_says else f": a step whose whole interval lies over {slack:g}x its streaming "
               "floor is named there by what adds most above its streaming floor (the glossary's Regimes)"))


def other_threads(dt: str, n: int) -> str:
    """The same test for another fp32 configuration (fewer threads), in plain words from the table's regimes."""
    g = decode[(decode.dtype == dt) & (decode.threads == n)].set_index("context_tokens")
    near = [c for c in contexts if g.regime[c] == "memory-bound"]
    times = prose.and_list(f"{g.over_streaming_floor[c]:.2f}x" for c in near)
    rest_ = [c for c in contexts if c not in near]
    where_ = (f"up to {near[-1]} tokens" if near == contexts[:len(near)] and len(near) > 1 else
              f"at {prose.and_list(near)} tokens")
    core = "on one core" if n == 1 else f"on {n} threads"
    if not near:
        took = prose.span(g.over_streaming_floor.min(), g.over_streaming_floor.max(), ".2f", "x")
        return (f"With {label(dt, n)}, the steps took {took} their streaming floor, none of them within {slack:g}x of "
                "it: none is bandwidth-bound.")
    return (f"With {label(dt, n)}, the steps took {times} their streaming floor {where_}"
            + (f", within {slack:g}x of it" if all(g.over_streaming_floor[c] <= slack for c in near) else "")
            + f": memory-bound in the table above, the textbook's regime {core}"
            + ("." if not rest_ else "; " + "; ".join(f"at {c} tokens {g.over_streaming_floor[c]:.2f}x, "
                                                                 f"{g.regime[c].replace('floor: ', 'floor, by ')}"
                                                       for c in rest_) + "."))
over_cs = [c for c in contexts if side[c] == "over"]
show(f"With {label(*main)}, the steps took **{floor_span}** the time their bytes take at the streaming read "
     f"({ceilings.stream_bandwidth(*main) / 1e9:.1f} GB/s)" + claims.pick(
         verdict, held=f", every one within {slack:g}x: bandwidth-bound, as the textbook says.",
         not_held=f". {'Every step' if len(over_cs) == len(contexts) else 'At ' + prose.and_list(over_cs) + ' tokens the steps'}"
                  f" took more than {slack:g}x, so {'none is' if len(over_cs) == len(contexts) else 'those are not'} "
                  f"bandwidth-bound in the source chapter's sense: fewer bytes would not speed them in proportion.",
         unresolved=f"; whether every step is within {slack:g}x of it is too close to call in this run (the median "
                    f"{'under' if max(o.mid for o in over_floor.values()) <= slack else 'over'} it)."),
     how="Each context's step over its streaming floor (the 95 % interval of the median over runs): "
         + "; ".join(f"{c} tokens {o.text('.2f', 'x')}" for c, o in over_floor.items())
         + f". The source chapter's rule calls a step bandwidth-bound when it takes at most {slack:g}x that streaming floor; "
         + claims.pick(verdict, held="every interval lies within it.", not_held=f"{at_contexts('over', 'took')}, wholly over it"
                       f"{f'; {rest}' if rest else ''}.", unresolved=f"{at_contexts('straddle', 'took')}, straddling it"
                       f"{f'; {within_slack}, within it' if within_slack else ''}.")
         + f" {named_as}; by its parts the step at {c_far} tokens is {bound_by(kind_first, spread[(*main, c_far)])}."
         + claims.pick(verdict, held="", not_held=why_far, unresolved=why_far))
for other in [c for c in growth_configs if c != main]:  # the other thread counts, told plainly
    show(other_threads(*other))

kind_of = made_of(k_first := (*main, contexts[0]))
w_rate, s_rate = ceilings.weight_rate(model_name, *main) / 1e9, ceilings.stream_bandwidth(*main) / 1e9
step_first = spread[k_first]  # the measured step, seconds, over runs
kernel_fast = w_rate >= s_rate / (1 + claims.NOISE)  # the kernel streams the weights as fast as the read, or faster
show(f"What a step is made of ({label(*main)}, context {contexts[0]}): the cost model prices the weights at the kernel's "
     f"rate at **{prose.ms(kind_of['weights'] / 1e3)}**, dispatch at **{prose.ms(kind_of['dispatch'] / 1e3)}** and the "
     f"cache at {prose.ms(kind_of['cache'] / 1e3)}, {prose.ms(kind_of['total'] / 1e3)} in all; the step took "
     f"{prose.ms(step_first.mid)}. Its bytes at the streaming read would take {prose.ms(kind_of['floor'] / 1e3)}, and "
     f"the price lies {prose.ms(abs(kind_of['total'] - kind_of['floor']) / 1e3)} "
     f"{'above' if kind_of['total'] >= kind_of['floor'] else 'below'} that: "
     + "; ".join(f"{name} {'adds' if v >= 0 else 'saves'} {prose.ms(abs(v) / 1e3)}" for name, v in kind_of["excess"].items())
     + f". The matrix-vector kernel reads the weights at {w_rate:.1f} GB/s against the streaming read's {s_rate:.1f}"
     + (", so the kernel is not what keeps the step above its bytes' time" if kernel_fast
        and wholly_above(kind_of, step_first) else "")
     + (f". The step is {plain_bound(kind_of, *main).split(' (')[0]}, "
        f"{step_first.mid * 1e3 / kind_of['floor']:.1f}x its streaming floor, not bound by the memory's bandwidth."
        if wholly_above(kind_of, step_first) else
        ": the step is near its streaming floor, bandwidth-bound in the roofline's sense." if w_rate < s_rate else
        ": the step is near its streaming floor only because a kernel faster than the streaming read offsets dispatch, "
        "a nearness the two parts make, not the memory's bound."),
     how=f"The measured step took {step_first.mid * 1e3 / kind_of['total']:.2f} times the price"
         + (", close enough for the split to describe it" if step_first.mid * 1e3 <= regime.REGIME_SLACK * kind_of['total']
            else f", more than {regime.REGIME_SLACK:g} times: the split describes the price, not all of the step")
         + f". The kernel's rate against the streaming read is taken as equal within {claims.NOISE:.0%}. By its parts "
         f"the step is {bound_by(kind_of, step_first)}; its price is {kind_of['total'] / kind_of['floor']:.1f}x its "
         f"streaming floor and the measured step {step_first.mid * 1e3 / kind_of['floor']:.1f}x, against the "
         f"{regime.REGIME_SLACK:g}x the source chapter's rule allows a bandwidth-bound step.")

# %%
register.claim(
    "decode_as_predicted",
    "Decode steps take the time the cost model predicts, within the tolerance for a time predicted from measured "
    "ceilings (the geometric mean of every configuration's points).")
pooled = claims.geomean_of(ratio.values())
top_band = claims.geomean(band_top(k) for k in ratio)
out, open_ = ([k for k in ratio if claims.within(ratio[k], Spread(1.0, 1.0, band_top(k)), claims.PREDICTED_TIME) == v]
              for v in (claims.NOT_HELD, claims.UNRESOLVED))
name = lambda k: f"{label(*k[:2])} at {k[2]} ({ratio[k].mid:.2f}x)"  # noqa: E731
detail = ((f"; {len(out)} of {len(ratio)} points {'lies' if len(out) == 1 else 'lie'} wholly outside it: "
            f"{', '.join(map(name, out))}" if out else "; no point lies wholly outside it")
          + (f"; {len(open_)} {'straddles' if len(open_) == 1 else 'straddle'} its edge ({', '.join(map(name, open_))})"
             if open_ else "") + ".")
band = f"{1 / claims.PREDICTED_TIME:.2f}x to {top_band * claims.PREDICTED_TIME:.2f}x"  # what the tolerance allows
verdict = register.record("decode_as_predicted",
                          claims.within(pooled, Spread(1.0, 1.0, top_band), claims.PREDICTED_TIME),
                          predicted=f"{band} (within {claims.PREDICTED_TIME:g}x of the fastest to the median calls' price)",
                          measured=pooled.text(".2f", "x"), evidence=f"decode_sweep.csv, {len(ratio)} points")
show(f"Over all {len(ratio)} points, the steps took **{pooled.mid:.2f}x** their predicted time (the geometric mean)"
     + claims.pick(verdict, held=f": the cost model predicts them, with the weights at the model's matrix-vector rate "
                                 f"({w_rate:.1f} GB/s in {label(*main)}), not at the streaming read's {s_rate:.1f}, plus "
                                 "the cache and the cost of issuing the step.",
                   not_held=": further from its price than a time predicted from measured rates may lie. The section "
                            "below takes the furthest step apart.",
                   unresolved=f": too close to call, the mean "
                              f"{claims.leaning(pooled, 1 / claims.PREDICTED_TIME, top_band * claims.PREDICTED_TIME)}."),
     how=f"The geometric mean's 95 % interval is {pooled.text('.2f', 'x')}; a price runs from chapter 0's fastest calls "
         f"to its median ones, and the tolerance of {claims.PREDICTED_TIME:g}x around that allows {band}. Each point "
         f"is priced with the page faults its steps took{detail} {settled}")

# %% [markdown]
# These prices are made of chapter 0's ceilings, measured minutes earlier, and a shared machine's speed drifts. So
# the chapter timed the kernel a step spends most of its time in, the model's matrices at one row, before the sweep
# and after it (`lib.machine.Pacer`). If the machine ran it at another speed, a price above is off by about as much.

# %%
show(pacer.claim(register, results, "the sweep"))

# %% [markdown]
# ### What limits a narrower dtype
#
# Halving the bytes should halve a step. It does where the step's time is its bytes and its kernels keep their
# rate. The cost model prices the 2-byte dtype's step at that dtype's own rates from chapter 0, so it predicts the
# ratio of the two steps.

# %%
narrow_claim = ("The 2-byte dtype's step takes the time relative to fp32's that the cost model predicts (each run's own "
                "ratio, against the predicted one, their geometric mean over the contexts); it does not hold either if, "
                "at every context where the cost model priced it faster than fp32's, its step was slower, its whole "
                "interval above 1x and more than 5 % above the priced ratio, or the reverse.")
register.claim("narrow_dtype_as_priced", narrow_claim)
narrow = [(dt, n) for dt, n in configs if dt != "fp32" and ("fp32", n) in configs]
if narrow:
    nc = narrow[0]
    in_runs = decode_runs.pivot_table(index="run", columns=["dtype", "threads", "context_tokens"], values="step_ms")
    pairs = [(Spread.of((in_runs[(*nc, c)] / in_runs[("fp32", nc[1], c)]).dropna()),  # both ran in every run
              cost[nc].decode(c + steps // 2).best / cost[("fp32", nc[1])].decode(c + steps // 2).best) for c in contexts]
    vs_predicted = claims.geomean_of(m / p for m, p in pairs)
    slow = decode_runs[(decode_runs.dtype == nc[0]) & (decode_runs.threads == nc[1])]
    two_modes = (slow.ratio > claims.PREDICTED_TIME).mean()
    over_, under_ = slow.ratio[slow.ratio > claims.PREDICTED_TIME], slow.ratio[slow.ratio <= claims.PREDICTED_TIME]
    apart = len(over_) and len(under_) and over_.min() > 1.1 * under_.max()  # two groups with a gap, not one spread
    modes = (f" The {label(*nc)} runs are of two kinds: {two_modes:.0%} of them ran over {claims.PREDICTED_TIME:g}x their "
             f"price, more than a tenth above the slowest of the rest. A second core that is there for some runs and not "
             f"others (another program's, on a shared host) leaves a step on one core's rate: chapter 0 prices {nc[0]}'s "
             f"one-row products at {ceilings.weight_rate(model_name, nc[0], 1) / 1e9:.1f} GB/s on one thread against "
             f"{ceilings.weight_rate(model_name, *nc) / 1e9:.1f} on {nc[1]}." if 0.1 < two_modes < 0.9 and apart and nc[1] > 1
             and 1 in ceilings.threads(nc[0]) else "")
    # The tolerance for a ratio is wider than the difference the two dtypes are priced at: at every context priced
    # faster than fp32 (a ratio under 1x), a step measured slower (its whole interval above 1x) and more than the
    # noise from the price did not do what was predicted, whatever the factor (and the reverse).
    priced_faster = [(c, m, p) for c, (m, p) in zip(contexts, pairs) if p < 1]
    priced_slower = [(c, m, p) for c, (m, p) in zip(contexts, pairs) if p > 1]
    wrong_way = ("slower" if priced_faster and all(m.low > 1 and m.low > p * (1 + claims.NOISE)
                                                   for _, m, p in priced_faster) else
                 "faster" if priced_slower and all(m.high < 1 and m.high < p / (1 + claims.NOISE)
                                                   for _, m, p in priced_slower) else "")
    against = priced_faster if wrong_way == "slower" else priced_slower if wrong_way else []
    if wrong_way:
        modes = (f" At {prose.and_list(c for c, _, _ in against)} tokens, where the cost model priced {nc[0]}'s step "
                 f"{'faster' if wrong_way == 'slower' else 'slower'} than fp32's ("
                 + ", ".join(f"{p:.2f}x" for _, _, p in against) + f"), it was {wrong_way} ("
                 + ", ".join(f"{m.mid:.2f}x" for _, m, _ in against) + "): the price got the direction wrong." + modes)
    verdict = register.record("narrow_dtype_as_priced", claims.NOT_HELD if wrong_way else
                              claims.within(vs_predicted, 1.0, claims.PREDICTED_RATIO),
                              predicted=", ".join(f"{p:.2f}x" for _, p in pairs),
                              measured=", ".join(f"{m.mid:.2f}x" for m, _ in pairs),
                              evidence=f"decode_sweep.csv, {label(*nc)} against fp32")
    priced_span = f"{min(p for _, p in pairs):.2f} to {max(p for _, p in pairs):.2f}"
    way_how = ("" if not priced_faster + priced_slower else " Its direction, context by context: "
               + "; ".join(f"{c} tokens priced {p:.2f}x, measured {m.text('.2f', 'x')}" for c, (m, p) in zip(contexts, pairs))
               + f". The step went the wrong way if, at every context priced faster than fp32 (under 1x), its whole "
               f"interval lies above 1x and more than {claims.NOISE:.0%} above the price, or the reverse: "
               + ("so it did." if wrong_way else "not so here."))
    support = f"chapter 0: this device {'has' if ceilings.hardware_support(nc[0]) else 'has no'} {nc[0]} instructions"
    ratio_ok = claims.within(vs_predicted, 1.0, claims.PREDICTED_RATIO) == claims.HELD
    show(f"Over the contexts, {nc[0]} steps took {min(m.mid for m, _ in pairs):.2f} to "
         f"{max(m.mid for m, _ in pairs):.2f} times fp32's, where the cost model, from each dtype's own kernel rates, "
         f"predicted {priced_span}" + claims.pick(
             verdict, held=": close enough to the price for a predicted ratio.",
             not_held=(": close to the price in size, but" + modes[:2].lower() + modes[2:] if wrong_way and ratio_ok else
                       f": further from it than a predicted ratio may lie.{modes}"),
             unresolved=f": too close to call, the mean of measured over predicted "
                        f"{claims.leaning(vs_predicted, 1 / claims.PREDICTED_RATIO, claims.PREDICTED_RATIO)}.{modes}"),
         how=f"Measured over predicted, each run's own ratio, their geometric mean over the contexts: "
             f"{vs_predicted.text('.2f', 'x')}, against the tolerance for a ratio of {claims.PREDICTED_RATIO:g}x "
             f"({support}).{way_how}")
else:
    register.record("narrow_dtype_as_priced", None, evidence="no 2-byte dtype beside fp32 at the same thread count")
    show(f"{narrow_claim} This run does not decide it: no 2-byte dtype beside fp32 at the same thread count in this run.")

# %% [markdown]
# The source chapter's regime test asks the same from the bytes alone: the 2-byte step against fp32's, beside the
# ratio of their two streaming floors.

# %%
if narrow:
    lo32, lo16 = made_of(("fp32", nc[1], contexts[0])), made_of((*nc, contexts[0]))
    by_bytes = lo16["floor"] / lo32["floor"]  # what the bytes alone predict: the two streaming floors
    halved = (lo32["dispatch"] + (lo32["weights"] + lo32["cache"]) / 2) / lo32["total"]
    rates = [ceilings.weight_rate(model_name, dt_, nc[1]) / 1e9 for dt_ in (nc[0], "fp32")]
    followed = claims.within(pairs[0][0], by_bytes, claims.PREDICTED_RATIO) == claims.HELD
    show(f"The regime test, at context {contexts[0]}: the bytes alone (the two streaming floors) put {nc[0]}'s step at "
         f"**{by_bytes:.2f}x** fp32's, and it took **{pairs[0][0].text('.2f', 'x')}**. "
         + ("The step followed its bytes: halving them did what a bandwidth-bound step does." if followed else
            f"The step did not follow its bytes: {nc[0]}'s weights "
            f"at its kernel's {rates[0]:.1f} GB/s (fp32's: {rates[1]:.1f}) cost {prose.ms(lo16['weights'] / 1e3)} against "
            f"fp32's {prose.ms(lo32['weights'] / 1e3)}, and its dispatch ({prose.ms(lo16['dispatch'] / 1e3)} against "
            f"{prose.ms(lo32['dispatch'] / 1e3)}) is not priced by the bytes at all. ")
         + f"Even at fp32's kernel rate, half the bytes would take fp32's step only to {halved:.2f}x its time: the "
         f"dispatch ({lo32['dispatch'] / lo32['total']:.0%} of it) stays, so the more of a step dispatch is, the less "
         f"its cost follows the precision.")

# %% [markdown]
# **Takeaway: price a decode step's weights at its matrix-vector kernel's rate, add dispatch and the cache, and set
# the sum beside the streaming floor: the gap is what halving the bytes cannot remove.**
#
# ## Why the step grows with the context
#
# The textbook counts the cache's bytes once per step. Attention reads them, but transformers' `DynamicCache`,
# which this loop uses, also grows by concatenation: every step builds new key and value tensors for every layer,
# one position longer, and copies the whole cache into them. The cost model prices both the read and the copy. Two
# more measurements check it: the same decode over a **preallocated** cache (transformers' `StaticCache`, written
# in place), and the **attention** and the **concatenation** timed alone on a cache of each context's size
# (`lib.sweeps.cache_costs`).
#
# <details><summary>How the parts were timed alone</summary>
#
# A preallocated cache is not copied, but its attention reads every preallocated position, masked. The
# concatenation is timed each time after as many bytes as the weights have streamed past, as a step reaches a
# cache it last touched a step ago (a cache this small, timed warm, would stay in a large last-level cache
# between calls). Both parts were timed in the sweep above, three calls in each run right after that run's steps,
# so they share the sweep's minutes: a part's time is the median of its runs' median calls, its fastest the
# fastest call of all.
#
# </details>

# %%
alone = (pd.DataFrame(alone_runs).groupby(keys, sort=False)  # each run's median call, and the fastest of all
         .agg(attention_ms=("attention_median", "median"), concatenation_ms=("concatenation_median", "median"),
              attention_fastest_ms=("attention_low", "min"), concatenation_fastest_ms=("concatenation_low", "min"))
         .reset_index())
results.table(static_runs, "static_decode_runs")  # decoded in the sweep above, in turn with the growing cache
growth = (decode.merge(timing.median_range(static_runs, keys, ["static_step_ms"]), on=keys)
          .merge(alone.rename(columns={"attention_ms": "attention_alone_ms"}), on=keys))
growth["predicted_static_ms"] = [cost[(r.dtype, r.threads)].decode(r.context_tokens + steps // 2, cache="static",
                                                                   max_len=r.context_tokens + steps).best * 1e3
                                 for r in growth.itertuples()]
results.table(growth, "growth_with_context")
prose.shown(growth[["dtype", "threads", "context_tokens", "step_ms", "predicted_ms", "static_step_ms", "predicted_static_ms",
        "attention_ms", "cache_copy_ms", "attention_alone_ms", "concatenation_ms"]].round(2))

# %% [markdown]
# From the shortest context to the longest, each fp32 configuration's growth is set against what the cost model
# adds for its cache and against the parts timed alone. At the longest context, the preallocated cache's saving is
# set against its price. Each is a difference between two points decoded seconds apart in the same run, so a slow
# spell of the machine lands on both.
#
# <details><summary>How the growth and the saving are decided, and what runs under the profiler</summary>
#
# The growth is the median of the runs' own differences, decided on its 95 % interval, from the same runs as the
# parts timed alone and as the table above; the cost model's growth counts the page faults the steps took. One
# layer down, both caches' steps at the shortest and the longest context run under the profiler, in turn, so the
# saving's parts (the copy it avoids, the masked attention it adds) and the growth's parts can be read inside the
# steps.
#
# </details>

# %%
def per_run(dt: str, n: int, c: int, table: pd.DataFrame | None = None, column: str = "step_ms") -> pd.Series:
    """One configuration's step (or its price) at one context, in seconds, one value per run (indexed by run)."""
    table = decode_runs if table is None else table
    g = table[(table.dtype == dt) & (table.threads == n) & (table.context_tokens == c)]
    return g.set_index("run")[column] / 1e3


def inside_steps(dt: str, n: int, at: tuple[int, ...]) -> dict[int, pd.DataFrame]:
    """Both caches' steps at each context of ``at`` under the profiler, ``profiled_runs`` times, the contexts and
    caches in turn within each run: per context, each term's median (ms), one column per cache."""
    found = {(c, kind): [] for c in at for kind in ("dynamic", "static")}
    with use_threads(n), torch.inference_mode():
        for _ in range(profiled_runs):
            for c, kind in found:
                kv, first = kept[(dt, n, kind)][c]

                def one_step() -> None:
                    phases.truncate_cache(kv, c)
                    phases.decode(models[dt], first, kv, 1)

                found[(c, kind)].append(profiling.operators(one_step, passes=3, device=device).groupby("term").self_ms.sum())
    return {c: pd.DataFrame({kind: pd.concat(found[(c, kind)], axis=1).median(axis=1)
                             for kind in ("dynamic", "static")}).fillna(0.0) for c in at}


def growth_reason(grew_inside: pd.DataFrame, rest_grew: dict, rest_priced: float, cache_ops_grew: float,
                  cache_ops_priced: float, copied_mb: float, w_gbs: float, s_gbs: float, missed: float) -> str:
    """Why the step grew beyond its price, from what grew under the profiler (ms) against what the cost model adds
    for it: the cache's own operators (attention and the copy), and the rest of the step (which the cost model grows
    as chapter 0's hollowed step grew from a longer cache)."""
    missed_text = f"the {missed:.1f} ms by which the step outgrew its price"
    parts = {"the cache's own operators (attention and the copy)": (cache_ops_grew, cache_ops_priced),
             "the rest of the step (the matrices, dispatch and the time between operators)": (rest_grew["dynamic"],
                                                                                               rest_priced)}
    beyond = {name: grown - priced for name, (grown, priced) in parts.items()}
    top = max(beyond, key=beyond.get)
    grown, priced = parts[top]
    if beyond[top] <= 0.25 or grown <= max(priced, 0.0) * claims.PREDICTED_TIME:
        return (f"under the profiler each part grew about as priced, so {missed_text} did not show there, and the "
                "profiler does not say where it went.")
    text = f"{top} grew {grown:+.1f} ms against {priced:+.1f} ms priced: that is what the cost model misses ({missed_text})."
    if (top.startswith("the rest") and grew_inside.dynamic["matrices"] > 0.5 * rest_grew["dynamic"]
            and w_gbs > s_gbs * (1 + claims.NOISE)):
        evicts = rest_grew["static"] < 0.5 * rest_grew["dynamic"]  # the cache that copies nothing grew far less
        text += (f" Most of it is the matrix products, which read the same weights at every context: chapter 0's kernel "
                 f"read them at {w_gbs:.1f} GB/s, faster than the streaming read's {s_gbs:.1f}, so part of them can stay "
                 "in the processor's caches between steps; "
                 + (f"the preallocated cache, which copies nothing, grew its rest only {rest_grew['static']:+.1f} ms, "
                    f"so the growing cache's {copied_mb:,.0f} MB copied a step are what push them out."
                    if evicts else
                    f"but the preallocated cache, which copies nothing, grew its rest {rest_grew['static']:+.1f} ms "
                    "too, so the copy's traffic does not explain it, and this chapter does not say what does."))
    elif top.startswith("the cache") and rest_grew["static"] > 0.25:
        text += (f" With the preallocated cache, which copies nothing, the rest grew {rest_grew['static']:+.1f} ms too.")
    return text

# %%
def lean(measured: Spread, predicted: float) -> str:
    """Which way a growth's or a saving's median leans against its price's tolerance (for a verdict not resolved)."""
    return (claims.leaning(measured, predicted / claims.PREDICTED_TIME, predicted * claims.PREDICTED_TIME)
            if predicted > 0 else claims.leaning(measured, 0.0))


c0, c1 = contexts[0], contexts[-1]
across = "the interval reaches across the edge of the tolerance, and its median lies"


def spread_of_runs(ms: pd.Series) -> str:
    """How a difference's runs (ms) spread, for a sentence: their range, and where they fall in two groups with a gap
    between them (the gap at least twice the median step between neighbouring runs and 0.6 of the wider group's
    range, each group at least two runs), the two groups: an interval of the median can hide such a split."""
    x = np.sort(np.asarray(ms, dtype=float))
    text = f"the {len(x)} runs spread {prose.span(x[0], x[-1], '+.1f', 'ms')}" if len(x) > 1 else f"one run, {x[0]:+.1f} ms"
    if len(x) < 4:
        return text
    gaps = np.diff(x)
    cut = max(range(1, len(x) - 2), key=lambda i: gaps[i])  # both sides at least two runs
    low, high = x[:cut + 1], x[cut + 1:]
    if gaps[cut] < 2 * np.median(gaps) or gaps[cut] < 0.6 * max(np.ptp(low), np.ptp(high)):
        return text
    return (f"the runs fell in two groups: {len(low)} from {low[0]:+.1f} to {low[-1]:+.1f} ms, {len(high)} from "
            f"{high[0]:+.1f} to {high[-1]:+.1f}")


def copy_share(g: pd.DataFrame) -> str:
    """The copy's part of the cost model's growth from the shortest context to the longest, for a sentence."""
    return f"(the copy {prose.ms((g.cache_copy_ms[c1] - g.cache_copy_ms[c0]) / 1e3)} of it)"


def within_runs(a: pd.Series, b: pd.Series, comparison: str) -> pd.DataFrame:
    """Two points' steps (s, indexed by run) side by side in the runs that timed both, and ``b - a`` in each."""
    both = pd.DataFrame({"a_s": a, "b_s": b}).dropna()  # a point measured again by itself has no partner
    return both.assign(difference_s=both.b_s - both.a_s, comparison=comparison).rename_axis("run").reset_index()

# %% [markdown]
# For each fp32 configuration, the growth and the saving run by run, and both caches' steps under the profiler at
# both ends.

# %%
inside, inside_growth, run_rows, found = {}, {}, [], {}
for dt, n in growth_configs:
    g = growth[(growth.dtype == dt) & (growth.threads == n)].set_index("context_tokens")
    grow_runs = within_runs(per_run(dt, n, c0), per_run(dt, n, c1), f"context {c0} against {c1}")
    save_runs = within_runs(per_run(dt, n, c1, static_runs, "static_step_ms"), per_run(dt, n, c1),
                            f"preallocated against growing, {c1}")
    run_rows.append(pd.concat([grow_runs, save_runs]).assign(dtype=dt, threads=n))
    mid = steps // 2
    grew = Spread.of(grow_runs.difference_s)  # each run's own difference: two points decoded seconds apart
    model_growth = (cost[(dt, n)].decode(c1 + mid, fresh_pages=faults[(dt, n, c1)]).best
                    - cost[(dt, n)].decode(c0 + mid, fresh_pages=faults[(dt, n, c0)]).best)
    # the parts timed alone, priced as chapter 0 prices: from their fastest calls to their median ones (s)
    alone_growth = ((g.attention_fastest_ms + g.concatenation_fastest_ms)[c1]
                    - (g.attention_fastest_ms + g.concatenation_fastest_ms)[c0]) / 1e3
    alone_median = ((g.attention_alone_ms + g.concatenation_ms)[c1] - (g.attention_alone_ms + g.concatenation_ms)[c0]) / 1e3
    alone_span = Spread(min(alone_growth, alone_median), alone_growth, max(alone_growth, alone_median))
    saved = Spread.of(save_runs.difference_s)  # growing less preallocated, run by run
    model_saved = (cost[(dt, n)].decode(c1 + mid, fresh_pages=faults[(dt, n, c1)]).best
                   - cost[(dt, n)].decode(c1 + mid, cache="static", max_len=c1 + steps).best)
    both = inside_steps(dt, n, (c0, c1))  # one layer down: both caches at both contexts, profiled
    inside[(dt, n)] = both[c1]
    inside_growth[(dt, n)] = pd.concat({c: both[c] for c in (c0, c1)}, axis=1)
    found[(dt, n)] = dict(g=g, grow_runs=grow_runs, save_runs=save_runs, grew=grew, model_growth=model_growth,
                          alone_growth=alone_growth, alone_span=alone_span, saved=saved, model_saved=model_saved)

# %% [markdown]
# Where the growth or the saving misses its price, the profiled steps say which part made the difference.

# %%
for dt, n in growth_configs:
    grew, model_growth, alone_span = (found[(dt, n)][k] for k in ("grew", "model_growth", "alone_span"))
    parts, mid = inside[(dt, n)], steps // 2
    grew_inside = (inside_growth[(dt, n)][c1] - inside_growth[(dt, n)][c0]).reindex(
        ["attention", "cache copy", "matrices", "dispatch", "copies"]).fillna(0.0)
    rest_grew = {k: grew_inside[k][["matrices", "dispatch", "copies"]].sum() for k in ("dynamic", "static")}
    missed = grew.mid * 1e3 - model_growth * 1e3  # the growth the cost model does not have, unprofiled (ms)
    priced_growth = {t: (cost[(dt, n)].decode(c1 + mid).term(t).best - cost[(dt, n)].decode(c0 + mid).term(t).best) * 1e3
                     for t in ("attention", "cache copy", "dispatch")}
    copied_mb = 2 * shape.with_dtype(dt).kv_bytes_per_token * (c1 + mid) / 1e6  # read and written, every step
    cache_ops_grew = grew_inside.dynamic["attention"] + grew_inside.dynamic["cache copy"]  # under the profiler, ms
    cache_ops_priced = priced_growth["attention"] + priced_growth["cache copy"]
    w_gbs, s_gbs = ceilings.weight_rate(model_name, dt, n) / 1e9, ceilings.stream_bandwidth(dt, n) / 1e9
    rest_text = (f"the rest of the step {rest_grew['dynamic']:+.1f} ms (the matrices {grew_inside.dynamic['matrices']:+.1f}, "
                 f"dispatch and the time between operators {grew_inside.dynamic['dispatch']:+.1f})")
    why_grew = (f"One layer down ({label(dt, n)}): " + growth_reason(  # (the finding, its numbers for the fold)
        grew_inside, rest_grew, priced_growth["dispatch"], cache_ops_grew, cache_ops_priced, copied_mb, w_gbs, s_gbs, missed),
        f"Both caches at both contexts ran under the profiler, in turn, {profiled_runs} times. From {c0} to {c1} tokens the "
        f"growing cache's attention grew {grew_inside.dynamic['attention']:+.1f} ms and its copy "
        f"{grew_inside.dynamic['cache copy']:+.1f} ms (the cost model adds {priced_growth['attention']:+.1f} and "
        f"{priced_growth['cache copy']:+.1f}); {rest_text}, where the cost model adds {priced_growth['dispatch']:+.1f} ms "
        f"from chapter 0's hollowed step timed from both caches. With the preallocated cache, which copies nothing, the "
        f"rest grew {rest_grew['static']:+.1f} ms.")
    inside_more = cache_ops_grew > claims.PREDICTED_TIME * alone_span.high * 1e3
    alone_text = prose.span(alone_span.low * 1e3, alone_span.high * 1e3, '.1f', 'ms')
    why_alone = (f"One layer down ({label(dt, n)}): " + (
        f"the cache's own work grew more inside the profiled steps ({cache_ops_grew:+.1f} ms) than alone ({alone_text})."
        if inside_more else f"the rest of the step, which the parts timed alone leave out, grew too ("
        f"{rest_grew['dynamic']:+.1f} ms under the profiler)." if rest_grew["dynamic"] > 0.25 else
        "no part grew much beyond its time alone, so the profiler does not show where the difference went."),
        f"Timed alone, attention and the concatenation grew {alone_text}. Inside the profiled steps (the profiler adds its "
        f"own cost to every call) they grew {cache_ops_grew:+.1f} ms (attention {grew_inside.dynamic['attention']:+.1f}, "
        f"the copy {grew_inside.dynamic['cache copy']:+.1f}), and {rest_text}.")
    priced_dyn, priced_stat = (cost[(dt, n)].decode(c1 + steps // 2, cache=k, max_len=c1 + steps,
                                                    fresh_pages=faults[(dt, n, c1)] if k == "dynamic" else None)
                               for k in ("dynamic", "static"))
    copy_in, copy_priced = parts.dynamic.get("cache copy", 0.0), (priced_dyn.term("cache copy").best
                                                                 + priced_dyn.term("page faults").best) * 1e3
    attn = parts.loc["attention"] if "attention" in parts.index else pd.Series({"dynamic": 0.0, "static": 0.0})
    disp = parts.loc["dispatch"] if "dispatch" in parts.index else pd.Series({"dynamic": 0.0, "static": 0.0})
    # the saving, part by part: profiled inside the two steps against priced (ms; positive: the growing cache's more)
    saving_parts = {
        "the copy and its page faults": (copy_in, copy_priced),
        "attention (the preallocated cache's masked positions)": (
            attn.dynamic - attn.static, (priced_dyn.term("attention").best - priced_stat.term("attention").best) * 1e3),
        "dispatch and the time between operators": (
            disp.dynamic - disp.static, (priced_dyn.term("dispatch").best - priced_stat.term("dispatch").best) * 1e3)}
    saved_got = found[(dt, n)]["saved"] * 1e3  # the saving measured without the profiler, ms, over runs
    sum_in, sum_priced = (sum(v[i] for v in saving_parts.values()) for i in (0, 1))  # the parts together, ms
    gap = saved_got.mid - found[(dt, n)]["model_saved"] * 1e3  # the unprofiled saving against its price
    same_way = {k: m - p_ for k, (m, p_) in saving_parts.items() if (m - p_) * gap > 0}  # parts off as the saving is
    off_most = max(same_way, key=lambda k: abs(same_way[k])) if same_way else None
    saved_parts = (f" Under the profiler, inside the two steps at context {c1}, the saving's parts: "
                   + "; ".join(f"{k} {m:+.1f} ms (priced {p_:+.1f})" for k, (m, p_) in saving_parts.items())
                   + f". Together they come to {sum_in:+.2f} ms (priced {sum_priced:+.2f}), "
                   + ("within the range of" if saved_got.low <= sum_in <= saved_got.high else "more than"
                      if sum_in > saved_got.high else "less than")
                   + f" the saving measured without the profiler ({saved_got.text('.2f', 'ms')}).")
    why_saved = (f" Under the profiler, the part that lies off its price the way the saving does is {off_most}, "
                 f"{same_way[off_most]:+.1f} ms against it." if off_most else
                 f" Under the profiler, no part lies off its price the way the saving does ({gap:+.1f} ms against its price).")
    found[(dt, n)].update(missed=missed, why_grew=why_grew, why_alone=why_alone, why_saved=why_saved,
                          saved_parts=saved_parts)

# %% [markdown]
# The findings, configuration by configuration.

# %%
for dt, n in growth_configs:
    got = found[(dt, n)]  # what the two cells above measured and wrote for this configuration
    grew, model_growth, alone_growth, alone_span, saved, model_saved = (got[k] for k in (
        "grew", "model_growth", "alone_growth", "alone_span", "saved", "model_saved"))
    grew_ms, saved_ms = (grew * 1e3).text("+.1f", "ms"), (saved * 1e3).text(".1f", "ms")
    by_cache = f"the {prose.ms(model_growth)} the cost model adds for its cache {copy_share(got['g'])}"
    alone_ms = prose.span(alone_span.low * 1e3, alone_span.high * 1e3, '.1f', 'ms')
    runs_of = {k: spread_of_runs(got[r].difference_s * 1e3) for k, r in (("grew", "grow_runs"), ("saved", "save_runs"))}
    beside_alone = ("above" if grew.mid > alone_span.high else "below" if grew.mid < alone_span.low else "about")
    for claim, statement, verdict, pred, meas, held, not_held, unresolved, how, lean_ in (
        (f"growth_follows_bytes_{tag(dt, n)}", "From the shortest context to the longest, the step grows by what the "
         "cost model adds for its cache (the read by attention, the copy by concatenation and its page faults, and the "
         "rest of the step's growth, from chapter 0's hollowed step).",
         claims.within(grew, model_growth, claims.PREDICTED_TIME) if grew.low > 0 and model_growth > 0 else
         claims.NOT_HELD if grew.high <= 0 < model_growth else claims.UNRESOLVED, model_growth, grew,
         f"the step grew **{prose.ms(grew.mid)}**, as {by_cache} predicts.",
         f"the step grew **{prose.ms(grew.mid)}**, not {by_cache}.",
         f"the step grew **{prose.ms(grew.mid)}**, against {by_cache}: too close to call.",
         f"The growth is each run's own difference between the two contexts, decoded seconds apart ({runs_of['grew']}): "
         f"median {grew_ms} with its 95 % interval, against {prose.ms(model_growth)} and the tolerance for a predicted time, "
         f"{claims.PREDICTED_TIME:g}x", f"; {across} {lean(grew, model_growth)}"),
        (f"growth_is_cache_work_{tag(dt, n)}", "From the shortest context to the longest, the step's growth is the "
         "attention and the concatenation timed alone in this chapter.",
         claims.within(grew, alone_span, claims.PREDICTED_TIME) if grew.low > 0 and alone_span.low > 0 else
         claims.NOT_HELD if grew.high <= 0 < alone_growth else claims.UNRESOLVED, alone_span, grew,
         f"That is {beside_alone} what attention and the concatenation grow timed alone here ({alone_ms})"
         + ("." if beside_alone == "about" else ", yet near enough to be theirs."),
         f"That is more than attention and the concatenation grow timed alone here ({alone_ms}), each with the cores "
         "to itself.",
         f"Timed alone here, attention and the concatenation grow {alone_ms}: too close to call against the step's growth.",
         f"The parts alone run from their fastest calls to their median ones ({alone_ms}); the step's growth, {grew_ms}, "
         f"is set against that span widened by the tolerance of {claims.PREDICTED_TIME:g}x",
         f"; {across} {claims.leaning(grew, *claims.allowed(alone_span, claims.PREDICTED_TIME))}"),
        (f"static_cache_saves_the_copy_{tag(dt, n)}", "At the longest context, the preallocated cache saves what the "
         "cost model predicts (the copy and its page faults, and the difference between the two caches' dispatch in "
         "chapter 0's hollowed steps, less attention over the unwritten positions).",
         claims.within(saved, model_saved, claims.PREDICTED_TIME) if saved.low > 0 and model_saved > 0 else
         claims.NOT_HELD if saved.high < 0 < model_saved else claims.UNRESOLVED, model_saved, saved,
         f"At {c1} tokens the preallocated cache's step was **{prose.ms(saved.mid)}** shorter than the growing cache's, "
         f"about the {prose.ms(model_saved)} the cost model predicted.",
         f"At {c1} tokens the preallocated cache's step was **{prose.ms(saved.mid)}** shorter than the growing cache's, "
         f"not the {prose.ms(model_saved)} the cost model predicted.{got['why_saved']}",
         f"At {c1} tokens the preallocated cache's step was **{prose.ms(saved.mid)}** shorter than the growing cache's, "
         f"against the {prose.ms(model_saved)} the cost model predicted: too close to call."
         f"{got['why_saved']}",
         f"The saving is each run's own difference, the two caches decoded in the same runs ({runs_of['saved']}): "
         f"median {saved_ms} with its 95 % interval, against the {prose.ms(model_saved)} predicted (the copy, the "
         f"difference in the two caches' dispatch, less attention over the unwritten positions) and the tolerance, "
         f"{claims.PREDICTED_TIME:g}x", f"; {across} {lean(saved, model_saved)}")):
        register.claim(claim, statement)
        verdict = register.record(claim, verdict, measured=(meas * 1e3).text("+.1f", "ms"),
                                  predicted=(pred * 1e3).text(".1f", "ms") if isinstance(pred, Spread) else prose.ms(pred),
                                  evidence=f"growth_by_run.csv, {label(dt, n)}")
        show((f"With {label(dt, n)}, from {c0} to {c1} tokens " if claim.startswith("growth_follows") else "")
             + claims.pick(verdict, held=held, not_held=not_held, unresolved=unresolved),
             how=how + claims.pick(verdict, held=".", not_held=".", unresolved=f"{lean_}.")
             + (got["saved_parts"] if claim.startswith("static") else ""))
    if register.verdict(f"growth_follows_bytes_{tag(dt, n)}") != claims.HELD and got["missed"] > 0:
        show(*got["why_grew"])  # the finding, its numbers folded
    elif register.verdict(f"growth_is_cache_work_{tag(dt, n)}") != claims.HELD:
        show(*got["why_alone"])

# %%
results.table(pd.concat({f"{dt}, {n} threads": t for (dt, n), t in inside.items()}).rename_axis(["configuration", "term"])
              .reset_index(), "steps_inside")
results.table(pd.concat({f"{dt}, {n} threads": t for (dt, n), t in inside_growth.items()})
              .set_axis([f"{kind}_{c}_ms" for c, kind in next(iter(inside_growth.values())).columns], axis=1)
              .rename_axis(["configuration", "term"]).reset_index(), "steps_inside_by_context")
_ = results.table(pd.concat(run_rows, ignore_index=True), "growth_by_run")  # not shown: a path

# %% [markdown]
# Chapter 4 measures the same growth another way, over whole requests whose caches grow as they decode, rather than
# one cache cropped back to each context as here, and sets its slope beside this chapter's growth per 1,000 tokens.
#
# **Takeaway: the roofline's bytes are not all a step moves: a cache that grows by concatenation is copied at
# every step as well as read; price the copy, or preallocate the cache.**
#
# ## Does a second thread help?
#
# Chapter 0 timed the model's matrix-vector products and the streaming read on one thread and on all. The cost
# model prices each configuration's step at its own thread count's rates, so it predicts the step's gain from the
# threads. The thread counts took turns within every run, so each run gives its own measured gain.

# %%
threads_claim = ("A step gains from more threads what the cost model predicts from chapter 0's kernels at each thread "
                 "count (each run's own gain against the predicted one, their geometric mean over the contexts).")
register.claim("thread_gain_follows_gemv", threads_claim)
pair = sorted(n for dt, n in configs if dt == "fp32")
if on_gpu or len(pair) < 2:
    register.record("thread_gain_follows_gemv", None, evidence="one thread count only")
    show(f"{threads_claim} This run does not decide it: one thread count only (a GPU, or one configuration of fp32).")
else:
    few, many = pair[0], pair[-1]
    gains = [Spread.of((per_run("fp32", few, c) / per_run("fp32", many, c)).dropna()) for c in contexts]  # within each run
    model_gains = [cost[("fp32", few)].decode(c + steps // 2).best / cost[("fp32", many)].decode(c + steps // 2).best
                   for c in contexts]
    results.table(pd.DataFrame(dict(context_tokens=contexts, step_gain=[g.mid for g in gains], predicted_gain=model_gains)),
                  "thread_speedup")
    vs_gemv = claims.geomean_of(g / p for g, p in zip(gains, model_gains))
    verdict = register.record("thread_gain_follows_gemv", claims.within(vs_gemv, 1.0, claims.PREDICTED_RATIO),
                              predicted=", ".join(f"{p:.2f}x" for p in model_gains),
                              measured=", ".join(f"{g.mid:.2f}x" for g in gains),
                              evidence="decode_sweep.csv; chapter 0 at each thread count")
    gemv_gain = ceilings.weight_rate(model_name, "fp32", many) / ceilings.weight_rate(model_name, "fp32", few)
    read_gain = ceilings.stream_bandwidth("fp32", many) / ceilings.stream_bandwidth("fp32", few)
    show(f"{many} threads against {few}: at context {contexts[0]} the step ran **{gains[0].mid:.2f}x** as fast, where "
         f"the cost model predicted {model_gains[0]:.2f}x (the model's matrix-vector products gain {gemv_gain:.2f}x, a "
         f"streaming read {read_gain:.2f}x)" + claims.pick(
             verdict, held=". Over the contexts the gain is the one predicted.",
             not_held=f". Over the contexts the gain is {vs_gemv.mid:.2f}x the predicted one, further than a predicted "
                      "ratio may lie.",
             unresolved=f". Over the contexts the gain is {vs_gemv.mid:.2f}x the predicted one, too close to call, "
                        f"{claims.leaning(vs_gemv, 1 / claims.PREDICTED_RATIO, claims.PREDICTED_RATIO)}."),
         how=f"Each run's own gain (the thread counts took turns within every run), at {contexts[0]} tokens "
             f"{gains[0].text('.2f', 'x')}; over the contexts, the geometric mean of measured over predicted is "
             f"{vs_gemv.text('.2f', 'x')}, against the tolerance for a ratio of {claims.PREDICTED_RATIO:g}x.")

# %% [markdown]
# ## One layer down: the step furthest from its prediction
#
# The profiler splits the step furthest from the cost model into its operators and sorts them into the model's
# terms (`lib.profiling`). The part furthest from what the model gave it is what the model missed. The step is
# profiled `profiled_runs` times, so each part has an interval.
#
# <details><summary>Which step, and how the profiler's own cost is taken off</summary>
#
# The step furthest from the cost model is the one whose ratio's interval lies furthest from 1, above or below:
# furthest beyond doubt, not the one a single slow run pushed. The profiler's own cost per operator call is
# measured and taken off each part's profiled time (a part of many small calls reads long under it by their number
# times that cost). After each profiled run the same step is timed without the profiler. The profiled step, its
# per-call cost taken off, need not take what the step takes without it (the profiler's cost is not only per
# call), so each part is counted as its share of the profiled step times the step timed beside it. Parts whose
# predicted time is under ten times the profiler's own cost for them are too short to compare.
#
# </details>

# %%
worst_key = max(ratio, key=lambda k: max(np.log(ratio[k].low), -np.log(ratio[k].high)))  # furthest from 1, either way
w_dt, w_n, w_c = worst_key
w_model = models[w_dt]
with use_threads(w_n), torch.inference_mode():
    cache, token = sweeps.prefilled(w_model, fp32, w_c, 0)

    def one_step() -> None:
        phases.decode(w_model, token, cache, 1)
        phases.truncate_cache(cache, w_c)

    profiled, plain_ms = [], []
    for _ in range(profiled_runs):  # each profiled run, then the same step without the profiler, beside it
        profiled.append(profiling.operators(one_step, passes=5, device=device))
        plain_ms.append(timing.measure(one_step, device, warmup=0, repeats=5).median * 1e3)
    per_call_ms = profiling.cost_per_operator(device)
ops = profiled[0]
w_price = cost[(w_dt, w_n)].decode(w_c, fresh_pages=faults[worst_key])
tables = [profiling.beside_prediction(o, w_price).set_index("term") for o in profiled]
corrected = pd.concat([t.profiled_ms - t.calls * per_call_ms for t in tables], axis=1)  # the profiler's cost taken off
inflation = corrected.sum().to_numpy() / np.array(plain_ms)  # each run's profiled step over the same step without the profiler
corrected = corrected / inflation  # each part's share of its profiled step, times the step timed beside it
apart = tables[0].assign(profiled_ms=corrected.median(axis=1), low_ms=corrected.min(axis=1), high_ms=corrected.max(axis=1),
                         profiler_ms=tables[0].calls * per_call_ms)
apart = apart.assign(excess_ms=apart.profiled_ms - apart.predicted_ms).sort_values("excess_ms", ascending=False).reset_index()
results.table(apart, "worst_step_parts")
profiler_cost = (f"The profiler's own cost: {per_call_ms * 1e3:.1f} us per operator call; the profiled step, that cost "
                 f"taken off, ran {prose.span(inflation.min(), inflation.max(), '.2f')}x the same step timed beside it "
                 f"({prose.span(min(plain_ms), max(plain_ms), '.1f', 'ms')}).")  # folded below
display(prose.shown(ops.head(8).round(3)))
prose.shown(apart.round(2))

# %%
apart_claim = ("In the step furthest from its prediction, each profiled part (less the profiler's own cost) takes the "
               "time its cost-model term gives it, within the tolerance for a predicted time.")
register.claim("worst_step_taken_apart", apart_claim)
timed = {t: Spread.of((corrected.loc[t] / apart.set_index("term").predicted_ms[t]).clip(lower=1e-6))
         for t in apart.term if apart.set_index("term").predicted_ms[t] > 10 * apart.set_index("term").profiler_ms[t]}
hi, lo = (claims.extreme(timed.values(), largest=x) for x in (True, False)) if timed else (None, None)
verdict = claims.every([claims.at_most(hi, claims.PREDICTED_TIME), claims.at_least(lo, 1 / claims.PREDICTED_TIME)]) \
    if timed else None
outside_parts = [t for t, v in timed.items() if v.low > claims.PREDICTED_TIME or v.high < 1 / claims.PREDICTED_TIME]
miss_ms = apart.set_index("term").excess_ms
top_part = (max(outside_parts, key=lambda t: abs(miss_ms[t])) if outside_parts else  # the most milliseconds missed
            max(timed, key=lambda t: abs(np.log(timed[t].mid))) if timed else apart.term.iloc[0])
row = apart.set_index("term").loc[top_part]
most_ms = miss_ms.idxmax()  # the part holding most of the step's milliseconds over its price, judged or not
most = ("" if most_ms == top_part or miss_ms[most_ms] <= 0 else
        f". The part holding most of the step's excess is {most_ms}, +{prose.ms(miss_ms[most_ms] / 1e3)} over its price"
        + (f" yet near its own price ({timed[most_ms].mid:.2f}x): many parts a little over add up"
           if most_ms in timed and most_ms not in outside_parts else ""))
by_term = apart.set_index("term")
_short = [f"{t} ({by_term.profiled_ms[t]:.1f} ms against {by_term.predicted_ms[t]:.1f} priced; "
          f"{by_term.calls[t]:,.0f} calls a step, {by_term.profiler_ms[t]:.1f} ms of the profiler's own)"
          for t in apart.term if t not in timed and by_term.predicted_ms[t] > 0]
_one = len(_short) == 1
unjudged = (f" {prose.and_list(_short)[:1].upper()}{prose.and_list(_short)[1:]} {'is' if _one else 'are'} left out of "
            f"this comparison: the profiler's own cost for {'its' if _one else 'their'} calls is more than a tenth of "
            f"{'its' if _one else 'their'} price, so what it reads for {'it' if _one else 'them'} is too much its own to "
            "judge." if _short else "")
verdict = register.record("worst_step_taken_apart", verdict, predicted="each part within tolerance",
                          measured=f"{top_part}: {row.profiled_ms:.1f} ms against {row.predicted_ms:.1f}",
                          evidence=f"worst_step_parts.csv, torch.profiler, {profiled_runs} runs" if timed else
                          "every part of this step is too short to compare under the profiler")
multiples = ", ".join(f"{t} {v.text('.2f', 'x')}" for t, v in timed.items())
step_text = (f"The step furthest from its price, {label(w_dt, w_n)} at context {w_c}, took {ratio[worst_key].mid:.2f}x "
             "its prediction; under the profiler ")
show(claims.pick(
    verdict, held=f"{step_text}each part it can judge took about what the model gave it.",
    not_held=f"{step_text}**{top_part}** took {prose.ms(row.profiled_ms / 1e3)} against the "
             f"{prose.ms(row.predicted_ms / 1e3)} the cost model gave it, the largest miss in milliseconds of the parts "
             f"the profiler can judge.{most.removeprefix('.')}" + ("." if most else ""),
    unresolved=f"{step_text}no part it can judge is clearly off its price, but at least one is too close to call.",
    not_measured=f"{step_text}every part of this step is too short to set against its price."),
     how=profiler_cost + (f" Each judged part's profiled time over its term, over {profiled_runs} profiled runs: "
                          f"{multiples}; the tolerance for a predicted time is {claims.PREDICTED_TIME:g}x. A part is judged "
                          "only where its price is at least ten times the profiler's own cost for its calls."
                          if timed else "") + unjudged)
worst_miss = (f"the worst step's {top_part} ({label(w_dt, w_n)}, context {w_c}) took {row.profiled_ms:.1f} ms, priced "
              f"{row.predicted_ms:.1f}")  # for the opening, if this claim missed
alone_ms = None  # the same work timed alone in this chapter, where it was (the growing configurations' cache parts)

# %%
if (w_dt, w_n) in growth_configs and top_part in ("cache copy", "attention"):
    alone_ms = float(growth.set_index(keys).loc[worst_key, "concatenation_ms" if top_part == "cache copy"
                                                 else "attention_alone_ms"])
if verdict == claims.NOT_HELD:
    not_alone = (f"This chapter timed the cache's parts alone only for {prose.and_list(label(*c) for c in growth_configs)}"
                 if top_part in ("cache copy", "attention") else f"This chapter did not time the {top_part} alone")
    of_part = ops[ops.term == top_part]
    op = of_part.sort_values("self_ms").iloc[-1] if len(of_part) and of_part.self_ms.sum() > 0 else None
    off = row.profiled_ms - row.predicted_ms
    show(f"What the miss exposed: the cost model priced this step's {top_part} at {prose.ms(row.predicted_ms / 1e3)}, "
         f"from chapter 0's rate for that work, and the profiler measured {prose.ms(row.profiled_ms / 1e3)} of it inside "
         f"the step" + (f", {op.self_ms / of_part.self_ms.sum():.0%} of it in `{op.operator}` ({op.calls:.0f} calls a step)"
                        if op is not None else "")
         + ". " + (f"{not_alone}, so this run cannot tell two causes apart. If, timed alone, it took about its price, the "
                   "extra time comes from running inside the step, among its other work. If it took what it took in the "
                   "step, chapter 0's rate for this work is wrong at this size." if alone_ms is None else
                   f"Timed alone in this chapter on a cache of that size, the same work took {prose.ms(alone_ms / 1e3)}, "
                   + (f"about its price. So the price is right for the {top_part} by itself; the {prose.ms(abs(off) / 1e3)} "
                      f"{'more' if off > 0 else 'less'} appears only inside the step, where it shares the caches and cores "
                      "with the step's other work."
                      if claims.within(alone_ms, row.predicted_ms, claims.PREDICTED_TIME) == claims.HELD else
                      f"off its price too: chapter 0's rate for this work is what the model has wrong at this size.")))

# %% [markdown]
# ## Beside the reference runs
#
# The source chapter timed the same decode on a GPU and on one CPU thread. Its numbers are loaded from
# `data/reference/`; ours are this run's, the median over runs and its 95 % interval.

# %%
ref = load_reference("ch09_decode_gpu_cpu")
facts = load_reference("ch09_facts").set_index("fact")["value"]
ours = decode[(decode.dtype == "fp32") & (decode.threads == (1 if ("fp32", 1) in configs else main[1]))]
beside = ref.merge(ours[["context_tokens", "step_ms", "step_ms_low", "step_ms_high"]]
                   .rename(columns=lambda c: c if c == "context_tokens" else f"this_{c}"), on="context_tokens", how="outer")
results.table(beside, "beside_reference")
display(prose.shown(beside.round(1)))
show(f"This run ({label('fp32', int(ours.threads.iloc[0]))}): "
     + ", ".join(f"context {r.context_tokens}: {prose.span(r.step_ms_low, r.step_ms_high, '.1f', 'ms')}" for r in ours.itertuples())
     + f". The source's CPU took {ref.cpu_1thread_ms_lo.min():.0f} to {ref.cpu_1thread_ms_hi.max():.0f} ms a step with one "
     f"thread. Its GPU took {ref.gpu_fp32_ms_lo.min():.1f} to {ref.gpu_fp32_ms_hi.max():.1f} ms at every context, which implies "
     f"{facts['decode_implied_bandwidth_fp32_lo']:.0f} to {facts['decode_implied_bandwidth_fp32_hi']:.0f} GB/s of "
     f"its {facts['gpu_memory_bandwidth']:.0f} GB/s.")

# %% [markdown]
# ## Batched decode: shared weights, private caches
#
# Decode `B` sequences at once and the step still reads every weight once, now shared by `B` tokens. But it reads
# `B` caches (and copies them, if they grow), and its matrices run with `B` rows, at the rate `F(B)` chapter 0
# measured for that many rows. Below, the bytes a step reads at context `batch_context` for each batch, and chapter
# 0's rates for the memory a growing cache copies into (fresh memory each step, mapped a page at a time).
#
# <details><summary>The table's columns</summary>
#
# *Matrices (ms)* is chapter 0's time for the weights' products at `batch` rows (blocks and LM head). *Cache read
# (GB/s)* is its rate for attention reading the batch's caches, and *masked read (GB/s)* for reading every position
# of a preallocated cache (masked). *Dispatch (ms)* and *dispatch static (ms)* are its times for issuing a step of
# that many sequences over each cache. *Layer tensor (MiB)* is one layer's new key or value tensor in a growing
# cache.
#
# </details>

# %%
kv_mid = batch_context + batch_steps // 2  # each sequence's cache at the middle of the run, as it is priced
read_of = {b: b * kv_mid * shape.kv_bytes_per_token for b in batches}  # bytes attention reads, growing cache
read_static = {b: b * (batch_context + batch_steps) * shape.kv_bytes_per_token for b in batches}  # every position
layer_tensor_mb = {b: b * (kv_mid + 1) * shape.kv_bytes_per_token / (2 * shape.layers) / 2**20 for b in batches}
batch_inputs = pd.DataFrame(dict(
    batch=batches, weights_mb=shape.weight_bytes / 1e6,
    caches_mb=[b * batch_context * shape.kv_bytes_per_token / 1e6 for b in batches],
    # chapter 0's times for the weights' products at B rows (blocks and LM head) and for issuing a step of B
    matrices_ms=[sum(ceilings.matrices(model_name, *main, k, b).best for k in ("blocks", "head")) * 1e3 for b in batches],
    cache_read_gb_s=[read_of[b] / ceilings.attention_decode(model_name, *main, read_of[b]).best / 1e9 for b in batches],
    masked_read_gb_s=[read_static[b] / ceilings.attention_decode(model_name, *main, read_static[b], masked=True).best
                      / 1e9 for b in batches],
    layer_tensor_mib=[layer_tensor_mb[b] for b in batches],
    dispatch_ms=[ceilings.dispatch(model_name, *main, "decode", b, positions=kv_mid).best * 1e3 for b in batches],
    dispatch_static_ms=[ceilings.dispatch(model_name, *main, "decode_static", b, positions=batch_context + batch_steps
                                          ).best * 1e3 for b in batches]))
fresh_from = next((b for b in batches if layer_tensor_mb[b] * 2**20 >= costmodel.FRESH_PAGES_BYTES), None)
fault_ms_per_mb = ceilings.fault_cost(*main) * ceilings.faults_per_byte(*main) * 1e6 * 1e3
show(f"Chapter 0 ({label(*main)}): the streaming read **{ceilings.stream_bandwidth(*main) / 1e9:.1f} GB/s**, the copy "
     f"**{ceilings.stream_bandwidth(*main, 'copy') / 1e9:.1f} GB/s**, and mapping fresh memory **{fault_ms_per_mb:.2f} ms "
     f"per MB** (page faults, on top of the copy), at batch 1 the matrix-vector rate of the weights "
     f"**{ceilings.weight_rate(model_name, *main) / 1e9:.1f} GB/s**. Each sequence's cache holds `batch_context` = "
     f"{batch_context} tokens (a preallocated one {batch_context + batch_steps}), and a step is priced at the middle of "
     f"its run, {kv_mid} tokens. A growing cache's *layer tensor* gets fresh pages from the operating system every step "
     f"once it is {costmodel.FRESH_PAGES_BYTES >> 20} MiB or more, "
     + (f"here from batch {fresh_from}" if fresh_from else "at none of these batches")
     + "; a smaller one may or may not, as the allocator decides (the runs below count them).")
prose.shown(batch_inputs.round(1))

# %% [markdown] tags=["predict"]
# **Predict first.** Batch 1 is one sequence's step, as in the sweep above. In a batch the weights' bytes stay the
# same while the caches' grow with it, and a growing cache is also copied at every step. From the table and the
# rates above it: at the largest batch, how many times batch 1's tokens per second should the machine give with a
# growing cache, and how many with a preallocated one? Close to the batch, or far less?

# %% [markdown]
# The cost model's terms for each batch, over both caches (folded: open it once you have written your answer). Its
# *predicted gain* is the batch's tokens per second over one sequence's.

# %%
rows = []
for kind in ("dynamic", "static"):
    for b in batches:
        p = cost[main].decode(batch_context + batch_steps // 2, batch=b, cache=kind, max_len=batch_context + batch_steps)
        rows.append(dict(cache=kind, batch=b, predicted_ms=p.best * 1e3, largest_term=p.dominant.name,
                         **{f"{t.name.replace(' ', '_')}_ms": t.best * 1e3 for t in p.terms},
                         cache_mb=b * batch_context * shape.kv_bytes_per_token / 1e6, weight_mb=shape.weight_bytes / 1e6))
batch_pred = pd.DataFrame(rows).fillna(0.0)
batch_pred["predicted_gain"] = batch_pred.batch / batch_pred.predicted_ms * batch_pred.groupby("cache").predicted_ms.transform("first")
_at_top = batch_pred[batch_pred.batch == batches[-1]].set_index("cache").predicted_gain
prose.prediction(f"At batch {batches[-1]} the cost model gives **{_at_top['dynamic']:.1f}x** batch {batches[0]}'s tokens "
                 f"per second with a growing cache and **{_at_top['static']:.1f}x** with a preallocated one, against "
                 f"the {batches[-1] // batches[0]}x of the batch itself. Each batch, term by term:\n\n"
                 f"{prose.shown(batch_pred.round(1)).to_html(index=False)}", "The cost model's prediction")

# %% [markdown]
# ### Measured: a growing cache and a preallocated one
#
# One prompt is prefilled and its cache copied to every sequence (a step's cost depends on the cache's shape, not
# its values). Each batch decodes `batch_steps` steps over the growing `DynamicCache` and over a preallocated
# `StaticCache` of the same contents, in `batch_runs` interleaved runs. A large batch's step is long, so this sweep
# has fewer runs than the one above, and its intervals are the ranges of its runs.
#
# <details><summary>How the batched runs are priced</summary>
#
# A batch that does not fit in memory is recorded as such. Each run is priced with the page faults its steps took:
# a growing cache's new tensors get pages from the operating system afresh, or reuse freed ones, as the allocator
# decides.
#
# </details>

# %%
rows = []
with use_threads(main[1]), contextlib.redirect_stdout(io.StringIO()):  # a build's progress lines; a reader's bar shows
    for run in progress(range(batch_runs), desc="batched runs"):
        for kind in ("dynamic", "static"):
            t = sweeps.batched_decode_sweep(fp32, batch_context, batches, steps=batch_steps, seed=run, cache=kind,
                                            label=f"batched, {kind} cache")
            rows.append(t.assign(cache=kind, run=run + 1, step_ms=t.median_s * 1e3))
batched_runs = pd.concat(rows, ignore_index=True)
fits = batched_runs.groupby("batch").status.agg(lambda s: (s == "ok").all())
ok_batches = [b for b in batches if fits[b]]
batched_runs = batched_runs[batched_runs.batch.isin(ok_batches)].reset_index(drop=True)


def batch_price(cache_kind: str, b: int, pages: float | None = None):
    """The cost model's batched step at ``batch_context`` (its page faults counted, when given)."""
    return cost[main].decode(batch_context + batch_steps // 2, batch=b, cache=cache_kind,
                             max_len=batch_context + batch_steps, fresh_pages=pages)


batched_runs["priced_ms"] = [batch_price(r.cache, r.batch, r.faults_per_step).best * 1e3 for r in batched_runs.itertuples()]
batched_runs["ratio"] = batched_runs.step_ms / batched_runs.priced_ms
results.table(batched_runs, "batched_decode_runs")
batched = timing.median_range(batched_runs, ["cache", "batch"], ["step_ms", "ratio", "faults_per_step"])
batched = batched.merge(batch_pred, on=["cache", "batch"])
batched = batched.assign(tokens_per_s=batched.batch / batched.step_ms * 1e3, dtype="fp32", threads=main[1],
                         context_tokens=batch_context, over_predicted=batched.ratio)
results.table(batched, "batched_decode")
bgroups = batched_runs.groupby(["cache", "batch"], sort=False)
bspread = {k: Spread.of(g.step_ms / 1e3) for k, g in bgroups}
bratio = {k: Spread.of(g.ratio) for k, g in bgroups}
bfaults = {k: float(g.faults_per_step.median()) for k, g in bgroups}
display(prose.shown(batched[["cache", "batch", "step_ms", "step_ms_low", "step_ms_high", "predicted_ms", "over_predicted",
                             "largest_term", "tokens_per_s"]].round(2)))

# %%
def fresh_pages_text(g: pd.DataFrame) -> tuple[str, str]:
    """Where the growing cache's runs took fresh pages (``g.fresh``), batch by batch, from the faults they counted:
    a sentence, and the detail for its fold."""
    every = [b for b, r in g.groupby("batch") if r.fresh.all()]
    some = [(b, r) for b, r in g.groupby("batch") if r.fresh.any() and not r.fresh.all()]
    none = [b for b, r in g.groupby("batch") if not r.fresh.any()]
    told = ([f"in every run at batch{'es' * (len(every) > 1)} {prose.and_list(every)}"] if every else []) + [
        f"at batch {b} in {int(r.fresh.sum())} of {len(r)} runs" for b, r in some]
    detail = ("A run took fresh pages when it counted a tenth or more of the faults its new tensors would take if all "
              "were mapped afresh. " + "".join(
                  f"At batch {b}, {'the run' if r.fresh.sum() == 1 else 'the runs'} that took them "
                  f"({r[r.fresh].faults_per_step.median():,.0f} faults a step) took "
                  f"{prose.ms(r[r.fresh].step_ms.median() / 1e3)} against {prose.ms(r[~r.fresh].step_ms.median() / 1e3)} "
                  "in the others. " for b, r in some) + "Each run is priced with the faults it took.")
    if not told:
        return "Counted in the runs, the growing cache took no fresh pages at any batch.", detail
    return ("Counted in the runs, the growing cache took fresh pages from the operating system " + "; ".join(told)
            + (f"; in no run at batch{'es' * (len(none) > 1)} {prose.and_list(none)}" if none else "") + "."), detail


def one_slow_run(runs_: pd.DataFrame) -> str:
    """Where one run alone sets the top of a batch's range (three runs or more, the slowest more than the tolerance
    for a predicted time above the next slowest), named with its time against the others', for a fold."""
    told = []
    for (kind, b), r in runs_.groupby(["cache", "batch"], sort=False):
        t = r.sort_values("step_ms")
        if len(t) < 3 or t.step_ms.iloc[-1] <= claims.PREDICTED_TIME * t.step_ms.iloc[-2]:
            continue
        slow, others = t.iloc[-1], t.iloc[:-1]
        fmt = ".0f" if others.step_ms.max() >= 100 else ".1f"
        told.append(f"the {'growing' if kind == 'dynamic' else 'preallocated'} cache at batch {b} took "
                    f"{prose.ms(slow.step_ms / 1e3)} in run {int(slow.run)}, against "
                    f"{prose.span(others.step_ms.min(), others.step_ms.max(), fmt, 'ms')} in the others"
                    + (", with no more page faults than they took" if slow.faults_per_step <= others.faults_per_step.max()
                       else ""))
    return "" if not told else (f" One run alone sets the top of {'a range' if len(told) == 1 else 'these ranges'}: "
                                + "; ".join(told) + ".")


grow_runs = batched_runs[batched_runs.cache == "dynamic"]
afresh = grow_runs.batch * (kv_mid + 1) * shape.kv_bytes_per_token * ceilings.faults_per_byte(*main)  # all mapped afresh
grow_runs = grow_runs.assign(fresh=grow_runs.faults_per_step >= 0.1 * afresh)  # a tenth of that or more: fresh pages
fresh_text, fresh_detail = fresh_pages_text(grow_runs)
show(fresh_text, how=fresh_detail + one_slow_run(batched_runs))  # a wide range's one slow run, named

# %%
dyn, stat = (batched[batched.cache == k].set_index("batch") for k in ("dynamic", "static"))
top, one = ok_batches[-1], ok_batches[0]


def gain(cache_kind: str) -> Spread:
    """Each run's tokens per second at the largest batch over the smallest, with one cache (both ran in the run)."""
    g = batched_runs[batched_runs.cache == cache_kind].pivot_table(index="run", columns="batch", values="step_ms")
    return Spread.of((g[one] / g[top] * top / one).dropna())


waits = batched_runs[batched_runs.cache == "dynamic"].pivot_table(index="run", columns="batch", values="step_ms")
waits = Spread.of((waits[top] / waits[one]).dropna())  # each run's own: the largest batch's step over the smallest's
wf = load_reference("wordfactory_part3_cpu")
wf_table = next(t for t in wf.table.unique() if t.startswith("batched_decode_ctx"))
ref_context = int(wf_table.removeprefix("batched_decode_ctx"))
wf = wf[wf.table == wf_table].assign(batch=lambda d: d.x.astype(int)).reset_index(drop=True)
fig, ax = plt.subplots(figsize=(8, 4.5))
for frame, name, style in ((dyn, "growing cache (DynamicCache)", "o-"), (stat, "preallocated cache (StaticCache)", "s-")):
    line = ax.errorbar(frame.index, frame.tokens_per_s, capsize=3, fmt=style, label=f"this machine, {name}",
                       yerr=[frame.tokens_per_s - frame.index / frame.step_ms_high * 1e3,
                             frame.index / frame.step_ms_low * 1e3 - frame.tokens_per_s])
    ax.plot(frame.index, frame.index / frame.predicted_ms * 1e3, ":", color=line[0].get_color(), label=f"cost model, {name}")
ax.plot(wf.batch, wf.tokens_per_s, "d--", label=f"reference: Word Factory, GPT-2 small at context {ref_context}, 2-core NumPy")
ax.set(xscale="log", yscale="log", xlabel="sequences decoded together (batch)", ylabel="tokens per second, all sequences")
ax.set_xscale("log", base=2)
ax.set_title(f"Batch {top}: {gain('dynamic').mid:.1f}x the tokens of batch {one} with a growing cache, "
             f"{gain('static').mid:.1f}x preallocated; each user waits {waits.mid:.1f}x longer\n(medians of the runs' "
             "own ratios; points: medians of the runs, bars: their range)", fontsize=10)
ax.legend(fontsize=7)
ax.grid(True, alpha=0.3)
results.figure(fig, "batched_decode")
plt.show()

# %% [markdown]
# Whether batching pays as priced: from batch 1 to the largest, the machine's tokens per second against the gain
# the cost model gives each cache.

# %%
register.claim(
    "batching_follows_its_bound",
    "Tokens per second grow with the batch as the cost model predicts: from the smallest batch to the largest, with "
    "either cache, the measured gain is the predicted one, within the tolerance for a ratio (each run's gain against "
    "the gain its own prices give, page faults counted).")


def predicted_gain(cache_kind: str) -> float:
    """The same gain from the cost model, each batch priced with its median page faults."""
    return (batch_price(cache_kind, one, bfaults[(cache_kind, one)]).best /
            batch_price(cache_kind, top, bfaults[(cache_kind, top)]).best * top / one)


def gain_over_priced(cache_kind: str) -> Spread:
    """Each run's gain over the gain its own prices give (each batch priced with the page faults it took)."""
    g = batched_runs[batched_runs.cache == cache_kind]
    t, p_ = (g.pivot_table(index="run", columns="batch", values=v) for v in ("step_ms", "priced_ms"))
    return Spread.of(((t[one] / t[top]) / (p_[one] / p_[top])).dropna())


gains = {k: (gain(k), predicted_gain(k)) for k in ("dynamic", "static")}
per_cache = {k: claims.within(gain_over_priced(k), 1.0, claims.PREDICTED_RATIO) for k in gains}
gain_verdict = claims.every(per_cache.values())
worse = next((k for k, v in per_cache.items() if v == claims.NOT_HELD), "dynamic")  # a cache whose gain missed
short = gain_over_priced(worse).mid < 1

# %%
verdict = register.record("batching_follows_its_bound", gain_verdict,
                          predicted=", ".join(f"{k}: {p_:.1f}x" for k, (_, p_) in gains.items()),
                          measured=", ".join(f"{k}: {m.text('.1f', 'x')}" for k, (m, _) in gains.items()),
                          evidence="batched_decode_runs.csv")
show(f"At batch {top} the machine gave **{gains['dynamic'][0].mid:.1f}x** the tokens per second of batch {one} with a "
     f"growing cache (predicted {gains['dynamic'][1]:.1f}x) and **{gains['static'][0].mid:.1f}x** with a preallocated one "
     f"(predicted {gains['static'][1]:.1f}x)" + claims.pick(
         verdict, held=": both as predicted.",
         not_held=f". The {'growing' if worse == 'dynamic' else 'preallocated'} cache's batch-{top} steps ran "
                  f"{'slower' if short else 'faster'} than priced against its batch-{one} steps (below: where their "
                  "time goes).",
         unresolved=": at least one of them too close to its prediction to call."),
     how="Each run's gain against the gain its own prices give (each batch priced with the page faults it took): "
         + ", ".join(f"{'growing' if k == 'dynamic' else 'preallocated'} {gain_over_priced(k).text('.2f', 'x')}"
                     for k in gains)
         + f", against the tolerance for a ratio of {claims.PREDICTED_RATIO:g}x. The measured gains over the runs: "
         + ", ".join(f"{'growing' if k == 'dynamic' else 'preallocated'} {m.text('.1f', 'x')}" for k, (m, _) in gains.items())
         + ".")


def peak_text(frame: pd.DataFrame, name: str) -> str:
    """Where one cache's tokens per second peaked over the batches, and whether it fell after, beyond the runs' ranges."""
    best = int(frame.tokens_per_s.idxmax())
    after = frame[frame.index > best]
    if after.empty:
        return (f"With a {name} cache throughput peaked at the largest batch tried ({top}: "
                f"{frame.tokens_per_s[top]:.1f} tokens/s).")
    fell = (after.index / after.step_ms_low).max() < best / frame.step_ms_high[best]  # the ranges' ends
    return (f"With a {name} cache throughput peaked at batch {best} ({frame.tokens_per_s[best]:.1f} tokens/s) and "
            + (f"fell to {frame.tokens_per_s[top]:.1f} at batch {top}, beyond the runs' ranges." if fell else
               f"no larger batch was lower beyond the runs' ranges ({frame.tokens_per_s[top]:.1f} at batch {top})."))


outweigh = next((b for b in ok_batches if b * batch_context * shape.kv_bytes_per_token > shape.weight_bytes), None)
rose_past = [k for k, f in (("preallocated", stat), ("growing", dyn)) if outweigh is not None
             and f.index.max() > outweigh and f.tokens_per_s[f.index > outweigh].min() > f.tokens_per_s[outweigh]]
show(" ".join(peak_text(f, k) for f, k in ((dyn, "growing"), (stat, "preallocated")))
     + " " + ("Every batch's caches weighed less than the weights." if outweigh is None else
               f"The caches outweigh the weights from batch {outweigh} on ({outweigh * batch_context * shape.kv_bytes_per_token / 1e6:.0f} "
               f"MB against {shape.weight_bytes / 1e6:.0f} MB)" + (
                   f". Yet with a {' and a '.join(rose_past)} cache throughput kept rising past it: from batch "
                   f"{outweigh} to {top} " + " and ".join(
                       f"the {k} cache's step grew {f.step_ms[top] / f.step_ms[outweigh]:.1f}x"
                       for k, f in (("preallocated", stat), ("growing", dyn)) if k in rose_past)
                   + f" while the batch grew {top / outweigh:g}x." if rose_past else ".")),
     how=one_slow_run(batched_runs).strip() or None)  # the runs' ranges above, where one run sets their top

# %% [markdown]
# ## Where the batched step's time goes
#
# The measured step beside the cost model's terms, for each batch. The rest is what the terms leave unexplained. At
# the largest batch, the attention and the concatenation are also timed alone on caches of that size, as a check on
# chapter 0's. Its growing-cache step also runs under the profiler, so what the caches cost inside it is measured.

# %%
big = int(top)
alone_big = sweeps.cache_costs(shape, big, batch_context + batch_steps // 2, device, fp32.dtype, repeats=5)
parts = batched[batched.cache == "dynamic"][["batch", "step_ms", "predicted_ms", "block_matrices_ms", "LM_head_ms",
                                             "attention_ms", "cache_copy_ms", "dispatch_ms", "cache_mb", "weight_mb",
                                             "faults_per_step"]].copy()
parts["page_faults_ms"] = [batch_price("dynamic", b, bfaults[("dynamic", b)]).term("page faults").best * 1e3
                           for b in parts.batch]
parts["priced_ms"] = [batch_price("dynamic", b, bfaults[("dynamic", b)]).best * 1e3 for b in parts.batch]
parts["static_step_ms"] = [stat.step_ms[b] for b in parts.batch]
parts["rest_ms"] = parts.step_ms - parts.priced_ms
results.table(parts, "batched_parts")
names = {"block_matrices_ms": "block matrices", "LM_head_ms": "LM head", "attention_ms": "attention",
         "cache_copy_ms": "cache copy", "page_faults_ms": "page faults", "dispatch_ms": "dispatch", "rest_ms": "rest"}
fig, ax = plt.subplots(figsize=(9, 4.5))
x, bottom = np.arange(len(parts)), np.zeros(len(parts))
whole = np.maximum(parts.step_ms, parts.priced_ms)  # the step, or its price where the price is the longer
for column, name in names.items():
    share = (parts[column].clip(lower=0) / whole).to_numpy()
    ax.bar(x, share, bottom=bottom, label=name)
    bottom += share
ax.plot(x, parts.static_step_ms / whole, "k_", ms=30, mew=2, label="preallocated cache's step")
ax.set_xticks(x, [f"B={b}\n{prose.ms(t / 1e3)}" for b, t in zip(parts.batch, parts.step_ms)])
ax.set(ylabel="share of the step (of its price\nwhere the price is longer)", xlabel="batch and its measured step")
last = parts.iloc[-1]
over = last.priced_ms > last.step_ms
ax.set_title(f"Batch {big}, as shares of its {'price (' + format(last.priced_ms / last.step_ms, '.2f') + 'x the step)' if over else 'step'}: "
             + ", ".join(f"{n} {max(last[c], 0) / max(last.step_ms, last.priced_ms):.0%}" for c, n in names.items()
                         if last[c] > 0), fontsize=9)
ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
fig.tight_layout()
results.figure(fig, "batched_parts")
plt.show()

# %%
register.claim(
    "static_cache_isolates_the_copy",
    "At the largest batch, the preallocated cache saves what the cost model prices the growing cache's copy and its "
    "page faults at, within the tolerance for a predicted time (each run's own difference against its own price, its "
    "faults counted).")
top_runs = batched_runs[batched_runs.batch == big]
both = top_runs.pivot_table(index="run", columns="cache", values="step_ms").dropna()
saved = Spread.of((both["dynamic"] - both["static"]) / 1e3)  # each run's own difference
dyn_big = batch_price("dynamic", big, bfaults[("dynamic", big)])
model_saved = dyn_big.best - batch_price("static", big, bfaults[("static", big)]).best
priced_saving = top_runs.pivot_table(index="run", columns="cache", values="priced_ms").dropna()
saving_ratio = Spread.of((both["dynamic"] - both["static"]) / (priced_saving["dynamic"] - priced_saving["static"]))
verdict = register.record("static_cache_isolates_the_copy",  # each run against its own price: its faults are its own
                          claims.within(saving_ratio, 1.0, claims.PREDICTED_TIME) if saving_ratio.low > 0 else
                          claims.NOT_HELD if saving_ratio.high <= 0 else claims.UNRESOLVED,
                          predicted=prose.ms(model_saved), measured=(saved * 1e3).text(".0f", "ms"),
                          evidence="batched_decode_runs.csv")
saved_ms = (saved * 1e3).text(".0f", "ms")
show(f"At batch {big} the growing cache's step takes {prose.ms(bspread[('dynamic', big)].mid)}, the preallocated one's "
     f"{prose.ms(bspread[('static', big)].mid)}: **{prose.ms(saved.mid)}** apart, " + claims.pick(
         verdict, held="about", not_held="not", unresolved="against")
     + f" the {prose.ms(model_saved)} the model gives the difference (the copy "
     f"{prose.ms(dyn_big.term('cache copy').best)}, its {bfaults[('dynamic', big)]:,.0f} page faults a step "
     f"{prose.ms(dyn_big.term('page faults').best)}). The concatenation timed alone here took "
     f"{prose.ms(alone_big['concatenation'].median)}." + claims.pick(
         verdict, held="", not_held="", unresolved=" Too close to call"
         + (f": the concatenation timed alone also lies below the least the price allows, "
            f"{prose.ms(model_saved / claims.PREDICTED_TIME)}, so the price of the copy leans high, not only the runs too "
            "few." if alone_big['concatenation'].median < model_saved / claims.PREDICTED_TIME
            else ": more runs of the batched steps would decide it.")),
     how=f"The saving is each run's own difference ({saved_ms}); run by run against its own price (its faults are its "
         f"own), it is {saving_ratio.text('.2f', 'x')} of it, against the tolerance for a predicted time of "
         f"{claims.PREDICTED_TIME:g}x" + claims.pick(verdict, held=".", not_held=".", unresolved=", the median "
         f"{claims.leaning(saving_ratio, 1 / claims.PREDICTED_TIME, claims.PREDICTED_TIME)}."))

# %% [markdown]
# At that batch, the caches' work against the matrices the batch shares, measured inside the step under the
# profiler, `profiled_runs` times (the growing cache's concatenation holds its page faults).

# %%
register.claim("cache_outweighs_shared_weights", "At the largest batch, the cache's work (attention plus copying) "
               "costs more than the shared matrices, inside the step (each profiled step's own ratio).")
with use_threads(main[1]), torch.inference_mode():
    big_cache, big_first = sweeps.prefilled(fp32, None, batch_context, 0)
    big_cache.batch_repeat_interleave(big)
    big_tokens = big_first.repeat(big, 1)
    phases.decode(fp32, big_tokens, big_cache, 1)

    def big_step() -> None:
        phases.truncate_cache(big_cache, batch_context)
        phases.decode(fp32, big_tokens, big_cache, 1)

    big_terms = [profiling.operators(big_step, passes=1, warmup=1, device=device).groupby("term").self_ms.sum()
                 for _ in range(profiled_runs)]
    del big_cache
inside_big = pd.DataFrame(big_terms).fillna(0.0)
cache_share = Spread.of((inside_big.get("attention", 0) + inside_big.get("cache copy", 0)) / inside_big["matrices"])
verdict = register.record("cache_outweighs_shared_weights", claims.at_least(cache_share, 1.0),
                          predicted=f"cache bytes {last.cache_mb:.0f} MB against weights {last.weight_mb:.0f} MB",
                          measured=f"cache work {cache_share.text('.2f', 'x')} the matrices' (profiled)",
                          evidence=f"torch.profiler, batch {big}, {profiled_runs} steps")
attention_ms, copy_ms, matrices_ms = (prose.ms(inside_big.get(t, pd.Series([0.0])).median() / 1e3)
                                      for t in ("attention", "cache copy", "matrices"))
show(claims.pick(
    verdict, held=f"Under the profiler attention takes {attention_ms} and copying {copy_ms} a step, against "
                  f"{matrices_ms} for every matrix product (medians over the profiled steps): the private caches cost "
                  f"**{cache_share.mid:.2f}x** what the products that share the weights cost.",
    not_held=f"Under the profiler attention ({attention_ms}) and copying ({copy_ms}) cost {cache_share.text('.2f', 'x')} "
             f"what the {big}-row matrix products ({matrices_ms}) cost: less than the products that share the weights.",
    unresolved=f"Under the profiler attention ({attention_ms}) and copying ({copy_ms}) cost "
               f"{cache_share.text('.2f', 'x')} what the {big}-row matrix products ({matrices_ms}) cost: too close to 1x "
               "for this run to say which costs more."),
     how=f"Each profiled step's own ratio of the caches' work to the matrices', {cache_share.text('.2f', 'x')} over "
         f"{profiled_runs} steps: so not quite the ratio of the medians above.")

# %%
register.claim(
    "parts_add_up",
    "The cost model's terms, its page faults counted, add up to the growing cache's batched steps, within the tolerance "
    "for a predicted time (the geometric mean over the batches of each step's ratio to its price).")
dyn_keys = [("dynamic", b) for b in ok_batches]
pooled_b = claims.geomean_of(bratio[k] for k in dyn_keys)
top_b = claims.geomean(batch_price(*k).median / batch_price(*k).best for k in dyn_keys)
worst_b = max(dyn_keys, key=lambda k: bratio[k].mid)
least_b = min(dyn_keys, key=lambda k: bratio[k].mid)
extremes = (f"the highest and lowest are batch {worst_b[1]} at {bratio[worst_b].mid:.2f}x and batch {least_b[1]} at "
            f"{bratio[least_b].mid:.2f}x" if worst_b != least_b else f"its one point is batch {worst_b[1]}")
_lo_b, _hi_b = claims.allowed(Spread(1.0, 1.0, top_b), claims.PREDICTED_TIME)
allowed_b = f"{_lo_b:.2f}x to {_hi_b:.2f}x"  # the price's fastest to median calls, each side widened by the tolerance
verdict = register.record("parts_add_up", claims.within(pooled_b, Spread(1.0, 1.0, top_b), claims.PREDICTED_TIME),
                          predicted=f"{allowed_b} (1.00x to {top_b:.2f}x, the price's fastest to median calls, within "
                                    f"{claims.PREDICTED_TIME:g}x)", measured=pooled_b.text(".2f", "x"),
                          evidence="batched_decode_runs.csv, page faults counted")
shares = ", ".join(f"B={k[1]}: {bratio[k].text('.2f', 'x')}" for k in dyn_keys)
may_take = f"the {allowed_b} (the price's span widened by the tolerance) a predicted time may take"
rests = ("A positive rest is work no term covers (the parts timed alone run with the caches and the cores to "
         "themselves), a negative one parts that cost more alone than inside the step.")
show(f"Over the batches, the growing cache's steps took **{pooled_b.mid:.2f}x** their priced time (the geometric mean; "
     f"{extremes})" + claims.pick(
         verdict, held=": the cost model's terms add up to the step.",
         not_held=f": the terms do not add up to the step. {rests}",
         unresolved=f": too close to call, the mean {claims.leaning(pooled_b, _lo_b, _hi_b)}. {rests}"),
     how=f"Each step's ratio to its price, page faults counted ({shares}); the geometric mean's interval "
         f"{pooled_b.text('.2f', 'x')} against {may_take}" + claims.pick(
             verdict, held=".", not_held=".", unresolved=f", the median {claims.leaning(pooled_b, _lo_b, _hi_b)}: more "
             "runs of the batched steps would decide it."))

# %% [markdown]
# Last, attention timed alone here, against chapter 0's kernel for caches of that size.

# %%
register.claim("attention_at_its_bytes", "At the largest batch, attention timed alone here reads the caches at "
               "chapter 0's rate for caches of that size.")
attention_term = cost[main].decode(batch_context + batch_steps // 2, batch=big).term("attention")
a = alone_big["attention"]
_attention_band = claims.allowed(Spread(attention_term.best, attention_term.best, attention_term.median),
                                 claims.PREDICTED_TIME)
verdict = register.record("attention_at_its_bytes", claims.within(Spread.of(a.samples), Spread(
                              attention_term.best, attention_term.best, attention_term.median), claims.PREDICTED_TIME),
                          predicted=prose.ms(attention_term.best), measured=prose.ms(a.median),
                          evidence="lib.sweeps.cache_costs")
around = (f"the {prose.span(*(x * 1e3 for x in _attention_band), '.1f', 'ms')} allowed around the "
          f"{prose.ms(attention_term.best)} chapter 0's kernel at that size predicts")
show(f"Attention over {big} caches ({last.cache_mb:.0f} MB) takes {prose.ms(a.median)} alone here, " + claims.pick(
    verdict, held=f"about the {prose.ms(attention_term.best)} chapter 0's kernel at that size predicts "
                  f"({last.cache_mb * 1e6 / attention_term.best / 1e9:.1f} GB/s; the streaming read: "
                  f"{ceilings.stream_bandwidth(*main) / 1e9:.1f} GB/s).",
    not_held=f"not the {prose.ms(attention_term.best)} chapter 0's kernel at that size predicts.",
    unresolved=f"against the {prose.ms(attention_term.best)} chapter 0's kernel at that size predicts: too close to "
               "call. More repeats of attention alone would decide it."),
     how=f"Its calls, against {around}" + claims.pick(verdict, held=".", not_held=".", unresolved=", the median "
         f"{claims.leaning(Spread.of(a.samples), *_attention_band)}."))

# %% [markdown]
# ### Beside the Word Factory reference
#
# The reference ran a NumPy model of GPT-2 small's shape on a 2-core CPU at context 512, with the same batches
# (`data/reference/wordfactory_part3_cpu.csv`). Its bytes column says what its step read: the weights once plus
# each user's cache, so the weights it counted are read off the batch-1 and largest-batch rows. Its machine's
# "memory bandwidth" was measured by pushing one token through the model's weight table: a matrix-vector
# product's rate, like this chapter's weight rate, not a streaming read.

# %%
ref_machine = load_reference("wordfactory_part3_cpu").query("table == 'machine'").set_index("x").time_ms
per_user_mb = (wf.mb_read.iloc[-1] - wf.mb_read.iloc[0]) / (wf.batch.iloc[-1] - wf.batch.iloc[0])
head_mb = shape.lm_head_params * shape.bytes_per_param / 1e6
comparison = pd.DataFrame([
    dict(machine="reference", weights_counted_mb=wf.mb_read.iloc[0] - per_user_mb * wf.batch.iloc[0],
         cache_mb_per_user=per_user_mb, matrix_vector_gb_s=ref_machine["memory_bandwidth_gb_s"],
         matmul_gflop_s=ref_machine["matmul_gflop_s"]),
    dict(machine="this run", weights_counted_mb=shape.weight_bytes / 1e6,
         cache_mb_per_user=shape.kv_bytes_per_token * batch_context / 1e6,
         matrix_vector_gb_s=ceilings.weight_rate(model_name, *main) / 1e9,
         matmul_gflop_s=ceilings.square_flops(*main) / 1e9)])
ref_weights_mb, blocks_mb = comparison.weights_counted_mb.iloc[0], shape.weight_bytes / 1e6 - head_mb
head_left_out = abs(ref_weights_mb - blocks_mb) < abs(ref_weights_mb - shape.weight_bytes / 1e6)
results.table(comparison, "beside_word_factory")
prose.shown(comparison.round(1))

# %%
gap_claim = ("At the largest batch both ran, this machine's step without the cache copy and the work the reference left "
             "out, scaled by the two machines' matrix-vector rates, is the reference's step, within the tolerance "
             "across machines.")
register.claim("reference_gap_is_head_and_copy", gap_claim)
same_shape = model_name == "gpt2-small" and batch_context == ref_context and top in set(wf.batch)
if same_shape:
    ref_ms = float(wf.set_index("batch").time_ms[top])
    head_ms = cost[main].decode(batch_context, batch=top).term("LM head").best * 1e3 if head_left_out else 0.0
    like_ref = (bspread[("static", top)] * 1e3 - head_ms) * (comparison.matrix_vector_gb_s.iloc[1]
                                                             / comparison.matrix_vector_gb_s.iloc[0])
    static_top = batch_price("static", top)  # its price's parts: what runs at the matrix-vector rate, and the rest
    not_gemv = (static_top.best - static_top.term("block matrices").best - static_top.term("LM head").best) / (
        static_top.best - (static_top.term("LM head").best if head_left_out else 0.0))
    scaled = (f"scaled by the two machines' matrix-vector rates ({comparison.matrix_vector_gb_s.iloc[1]:.1f} over "
              f"{comparison.matrix_vector_gb_s.iloc[0]:.1f} GB/s)")
    where = (f"This machine's preallocated step at batch {top} took {prose.ms(bspread[('static', top)].mid)} (no copy). "
             + (f"Less its LM head ({prose.ms(head_ms / 1e3)}), which the reference's {ref_weights_mb:.0f} MB of weights "
                f"leave out, and {scaled}" if head_left_out else scaled[:1].upper() + scaled[1:])
             + f", it gives **{prose.ms(like_ref.mid / 1e3)}**")
    assumes = (f"its attention and dispatch ({not_gemv:.0%} of its price) slowed on the reference as much as the "
               "weights' products")  # what scaling the whole step by the matrix-vector rates assumes
    verdict = register.record("reference_gap_is_head_and_copy", claims.within(like_ref, ref_ms, claims.ACROSS_MACHINES),
                              predicted=f"{prose.ms(ref_ms / 1e3)} (reference)", measured=like_ref.text(".0f", "ms"),
                              evidence="batched_decode.csv; wordfactory_part3_cpu.csv")
    against_ref = f"{like_ref.mid / ref_ms:.1f}x the reference's {prose.ms(ref_ms / 1e3)}"
    show(f"{where}, " + claims.pick(
        verdict, held=f"within {claims.ACROSS_MACHINES:g}x of the reference's {prose.ms(ref_ms / 1e3)}. If {assumes}, "
                      "the copy, the head and the matrix-vector rates account for the difference.",
        not_held=f"{against_ref}, further apart than two machines' times may be: the rest is not "
                 "separated here (NumPy against PyTorch's eager loop, and machines whose other ceilings differ).",
        unresolved=f"{against_ref}: too close to call, the median "
                   f"{claims.leaning(like_ref, ref_ms / claims.ACROSS_MACHINES, ref_ms * claims.ACROSS_MACHINES)}; more "
                   "runs of the batched steps would decide it."),
        how=f"The step over the runs, {like_ref.text('.0f', 'ms')} (the 95 % interval of the median), against the "
            f"reference's {prose.ms(ref_ms / 1e3)} within the {claims.ACROSS_MACHINES:g}x allowed across machines."
            + claims.pick(verdict, held="", not_held=f" The scaling assumes {assumes}.",
                          unresolved=f" The scaling assumes {assumes}."))
else:
    register.record("reference_gap_is_head_and_copy", None, evidence="not the reference's model, context or batch")
    show("The reference machine's batched step is not set beside this run's: the reference ran GPT-2 small at its "
         "context up to its largest batch, and this run is not the same shape.")

# %% [markdown]
# **Takeaway: a batched step reads the weights once but every user's cache; throughput rises only while the step
# grows more slowly than the batch.**
#
# ## Multi-head against grouped-query attention: bytes of cache per token
#
# GPT-2 keeps a key and a value per head: 12 heads in each of 12 layers. SmolLM2-135M has 9 query heads but
# only 3 key-value heads (grouped-query attention): each KV head serves three query heads. Both shapes come from
# the models' configurations; the measured column divides a real cache's bytes by its length.

# %%
smol = load_model("smollm2-135m", device, torch.float32)
rows = []
for lm in (fp32, smol):
    s = ModelShape.from_config(lm.config, name=lm.name)
    _, kv_cache = phases.prefill(lm, torch.randint(0, lm.vocab_size, (1, 32), device=device))
    rows.append(dict(model=lm.name, layers=s.layers, query_heads=s.heads, kv_heads=s.kv_heads, head_dim=s.head_dim,
                     predicted_fp32_bytes_per_token=s.kv_bytes_per_token,
                     measured_fp32_bytes_per_token=phases.cache_bytes(kv_cache) / 32,
                     bf16_kib_per_token=s.with_dtype("bf16").kv_bytes_per_token / 1024,
                     kv_mb_per_1000_tokens_bf16=s.with_dtype("bf16").kv_bytes_per_token * 1000 / 1e6,
                     tokens_until_cache_equals_weights=s.weight_bytes / s.kv_bytes_per_token))
kv = pd.DataFrame(rows)
claims.invariant((kv.predicted_fp32_bytes_per_token == kv.measured_fp32_bytes_per_token).all(),
                 f"the cache's bytes per token differ from the shape's formula: {kv.to_dict('records')}")
results.table(kv, "kv_bytes_per_token")
g, sm = kv.iloc[0], kv.iloc[1]
show(f"{g.model} stores **{g.bf16_kib_per_token:.1f} KiB** per token in bf16; SmolLM2 stores **{sm.bf16_kib_per_token:.1f} KiB**, "
     f"with {sm.layers / g.layers:.1f} times as many layers. With {int(sm.kv_heads)} KV heads instead of "
     f"{int(sm.query_heads)}, its cache is {sm.kv_heads / sm.query_heads:.2f} of what multi-head attention would need. In "
     f"batched decode the caches outweigh the weights once the batch holds {g.tokens_until_cache_equals_weights:,.0f} "
     f"cached tokens in all for {g.model} and {sm.tokens_until_cache_equals_weights:,.0f} for SmolLM2.")
prose.shown(kv.round(1))

# %% [markdown]
# ## The timer's own cost
#
# Every step above includes the harness: a clock read after the token's readback, and the readback itself.
# `lib.timing.overhead` times both with nothing around them; they must be small beside the shortest step this
# chapter timed.

# %%
register.claim("timer_under_one_percent", "The harness adds under 1 % to the shortest step this chapter timed.")
harness = timing.overhead(device)
shortest = min(decode_runs.low_s.min(), static_runs.low_s.min())
share = (harness["clock"] + harness["readback"]) / shortest
verdict = register.record("timer_under_one_percent", claims.at_most(share, claims.HARNESS), predicted="under 1 %",
                          measured=f"{share:.3%}", evidence=f"timing.overhead; shortest step {prose.ms(shortest)}")
show(f"A clock read and a token readback cost {(harness['clock'] + harness['readback']) * 1e6:.1f} us together, "
     + claims.pick(verdict, held=f"{share:.3%} of the fastest single step timed ({prose.ms(shortest)}).",
                   not_held=f"{share:.1%} of the fastest single step timed ({prose.ms(shortest)}): the shortest steps "
                            "read that much long.",
                   unresolved=f"{share:.3%} of the fastest single step timed ({prose.ms(shortest)}): too close to the "
                              "1 % allowed for this run to call."))

# %%
found = register.frame().set_index("claim")  # each claim's verdict, prediction and measurement, as the table shows
k0, k1 = (*main, contexts[0]), (*main, contexts[-1])
grew_id = f"growth_follows_bytes_{tag(*main)}"  # how the first configuration's step grew with the context
grew_row = found.loc[grew_id] if grew_id in found.index else None
grew_text = "" if grew_row is None else {
    claims.HELD: f", growing {grew_row.measured} as predicted",
    claims.NOT_HELD: f", growing {grew_row.measured}, not the {grew_row.predicted} predicted",
    claims.UNRESOLVED: f", growing {grew_row.measured} against {grew_row.predicted} predicted",
}.get(grew_row.verdict, "")
over_c = [c for c in contexts if side[c] == "over"]
over_bound = [plain_bound(made_of((*main, c)), *main) for c in over_c]  # what bounds each, by its parts
over_words = "" if not over_bound else (
    f"{'each is' if len(over_c) == len(contexts) else 'those are'} {over_bound[0]}" if len(set(over_bound)) == 1
    else f"at {over_c[0]} tokens the step is {over_bound[0]}")


def rule(that: str) -> str:
    """The regime verdict of the first configuration's steps, in a clause; ``that`` names their streaming floor."""
    return {claims.NOT_HELD: ("every step" if len(over_c) == len(contexts) else f"at {prose.and_list(over_c)} tokens "
                                                                                 "the steps")
            + f" took over {regime.REGIME_SLACK:g}x {that}: "
            + over_words
            + ", so halving the bytes would not halve them",
            claims.HELD: f"every step took at most {regime.REGIME_SLACK:g}x {that}: bandwidth-bound, as the textbook says",
            claims.UNRESOLVED: f"whether every step took at most {regime.REGIME_SLACK:g}x {that}, bandwidth-bound, is too "
                               "close to call"}[register.verdict("decode_memory_bound")]


price = {claims.HELD: f"The cost model predicted them ({pooled.mid:.2f}x its price). ",
         claims.NOT_HELD: f"They took {pooled.mid:.2f}x the cost model's price (the body says why). ",
         claims.UNRESOLVED: f"They took {pooled.mid:.2f}x the cost model's price, too close to call. ",
         }[register.verdict("decode_as_predicted")]
head = (f"On this machine ({prose.machine(device, main[0])}), a {model_name} decode step took "
        f"**{(spread[k0] * 1e3).text('.1f', 'ms')}** at context {contexts[0]} and "
        f"**{(spread[k1] * 1e3).text('.1f', 'ms')}** at {contexts[-1]}")
excess_names = {"dispatch": "issuing the step", "the kernel (its rate against the streaming read)": "the kernel",
                "the cache's work beyond its bytes": "the cache's work", "the rest of the price": "the rest"}
top_excess = max(kind_of["excess"], key=kind_of["excess"].get)
parts_text = (f"At {contexts[0]} tokens that is **{over_floor[contexts[0]].text('.2f', 'x')}** its bytes' time at the "
              "memory's streaming rate"
              + (f", mostly for {excess_names[top_excess]} ({prose.ms(kind_of['excess'][top_excess] / 1e3)})"
                 if kind_of["excess"][top_excess] > 0 and not (over_bound and "kernel" in over_bound[0]) else "")
              + f"; {rule('that')}. ")

# %%
narrow_text = ""
if narrow:
    spans = [prose.span(min(x), max(x), ".2f", "x") for x in ([m.mid for m, _ in pairs], [p_ for _, p_ in pairs])]
    no_faster = all(m.mid >= 1 for m, _ in pairs)  # the narrower dtype gained nothing at any context
    narrow_text = f"{nc[0]}, half the bytes, took **{spans[0]}** fp32's time" + {
        claims.HELD: (", no faster, " if no_faster else ", ") + f"near the {spans[1]} priced. ",
        claims.NOT_HELD: (f": {wrong_way} at {prose.and_list(c for c, _, _ in against)} tokens, where priced "
                          f"{'faster' if wrong_way == 'slower' else 'slower'}. " if wrong_way else
                          f", where {spans[1]} was priced. "),
        claims.UNRESOLVED: f", against {spans[1]} priced (too close to call). "}[register.verdict("narrow_dtype_as_priced")]
batch_text = "" if top == one else (
    f"Batch {top} gave **{gains['dynamic'][0].mid:.1f}x** batch {one}'s throughput (growing cache), "
    f"**{gains['static'][0].mid:.1f}x** preallocated" + {
        claims.HELD: ", as predicted. ",
        claims.NOT_HELD: f", where {gains['dynamic'][1]:.1f}x and {gains['static'][1]:.1f}x were predicted. ",
        claims.UNRESOLVED: " (against the prediction, too close to call). ",
    }[register.verdict("batching_follows_its_bound")])
topics = {"thread_gain_follows_gemv": "a second thread's gain",
          "worst_step_taken_apart": "the parts of the step furthest from its price",
          **{f"growth_follows_bytes_{tag(*c)}": f"the step's growth with its context" + ("" if c == main else f" on {label(*c)}") for c in configs},
          **{f"growth_is_cache_work_{tag(*c)}": f"that growth as the cache's work" + ("" if c == main else f" on {label(*c)}") for c in configs},
          **{f"static_cache_saves_the_copy_{tag(*c)}": f"the preallocated cache's saving" + ("" if c == main else f" on {label(*c)}") for c in configs},
          "batching_follows_its_bound": "the batch's gain in tokens per second",
          "attention_at_its_bytes": "attention at its bytes' price",
          "static_cache_isolates_the_copy": "the batched copy's saving", "parts_add_up": "the batched step's price",
          "cache_outweighs_shared_weights": "the caches' work against the shared matrices",
          "reference_gap_is_head_and_copy": "the gap to the reference machine"}  # each claim the opening may not say
if not pacer.note():
    topics["machine_kept_its_pace"] = "the machine keeping chapter 0's speed"
counted = f"{m} " if (m := register.misses(topics, only_named=True)) else ""  # each miss named, not counted
opening.write(head + grew_text + ". " + price + parts_text + narrow_text + batch_text + counted,  # the longest that fits
              head + ". " + price + parts_text + narrow_text + batch_text + counted,
              head + ". " + price + parts_text + batch_text + counted,
              head + ". " + price + parts_text + counted,
              head + ". " + parts_text + counted,
              head + ". " + counted,
              head + "; " + rule("the time their bytes take at the memory's streaming rate") + ".",  # times and regime
              after=pacer.note())  # why the prices missed, when the machine itself ran at another speed

# %% [markdown]
# ## What these numbers do not show
#
# * **An eager PyTorch loop.** Every step runs Python, transformers' cache bookkeeping and hundreds of small
#   operations. `torch.compile` or CUDA graphs would lower the cost of issuing them (not measured here).
# * **One small model.** Only GPT-2 small's steps were timed. For a larger model chapter 6 has arithmetic, not
#   measurements: the roofline of Llama-3-8B's batch-1 decode step on a GPU, from the model's shape and the chip's
#   datasheet.
# * **A copied cache in batched decode.** Every sequence's cache has the same contents; the bytes and shapes are
#   real, the text is not.
# * **Parts timed alone.** Chapter 0 timed each part by itself, with the caches and the CPU to itself; inside a
#   step they share both, so their sum need not equal the step (the rest says by how much).
# * **A shared machine.** Ranges are across runs of this notebook in one process; other programs' load shows in
#   them.
#
# ## Takeaways
#
# * A decode step reads every weight and the whole cache to make one token.
# * Price its weights at the rate the model's own matrix-vector products read them (chapter 0), and set the
#   streaming floor beside that price. A step well above its streaming floor spends the rest on a slow kernel, on
#   dispatch or on its cache's work, so fewer bytes will not speed it in proportion.
# * A growing cache is copied at every step; a preallocated one is written in place. Measure which you have.
# * Batching shares weight bytes between users, while each user's cache still has to be read (and copied, if it
#   grows). Throughput rises only while the step grows more slowly than the batch (price each batch's step to
#   know where that stops), and each user waits for the whole batch's step.
# * Before halving the bytes, split the step: the part priced at the bytes (weights and cache at their kernels'
#   rates) is all a narrower dtype can shrink; dispatch stays, and a slower 2-byte kernel can cost more than the
#   bytes save.
# * Grouped-query attention shrinks the cache by the ratio of query heads to KV heads.
#
# ## Check yourself
#
# 1. A decode step reads 500 MB and takes 50 ms on a machine that streams 20 GB/s, whose matrix-vector products
#    reach 12 GB/s. What sets its time, and what would a better kernel gain?
#
# <details><summary>Answer</summary>
#
# At the kernels' 12 GB/s the bytes take about 42 ms, so the step is near what its kernels allow (the rest is
# the cost of issuing it and the cache). A kernel that streamed like the read loop could take the weights
# toward 25 ms.
# </details>
#
# 2. Why can halving the bytes (fp32 to a 2-byte dtype) fail to speed up a decode step?
#
# <details><summary>Answer</summary>
#
# If the step is dispatch-bound, halving the bytes shortens a part that was not the bottleneck. And the bytes are
# read by the dtype's own matrix-vector kernel, whose rate need not be fp32's: without instructions for the dtype
# it is a slow conversion kernel, and even with them (this chapter's bf16 on a CPU with bf16 instructions, its
# kernel's rate in the table of rates above) it can read fewer bytes more slowly, so the step can even slow down.
# </details>
#
# 3. At batch 64 and context 512, how many bytes of GPT-2 small's fp32 cache does one step read, and how many does
#    a growing cache copy?
#
# <details><summary>Answer</summary>
#
# 64 x 512 tokens x 72 KiB per token (2 x 12 layers x 768 x 4 bytes) = 2.25 GiB read by attention, about five
# times the weights. A cache that grows by concatenation also reads and writes all of it once more: another
# 4.5 GiB of traffic, into freshly allocated memory.
# </details>
#
# ## Try it
#
# * On a machine with four cores or more, run chapter 0 with `threads = [1, 2, 4]`, then this chapter with
#   `configs = [("fp32", 1), ("fp32", 2), ("fp32", 4)]`. Does the step follow the cost model as threads are added?

# %% jupyter={"source_hidden": true} tags=["answer"]
_fp32 = sorted(n for dt, n in configs if dt == "fp32")
_measured = sorted(ceilings.threads("fp32"))  # the thread counts chapter 0 measured here
_four = ("" if on_gpu or 4 in _measured else
         f" Chapter 0 measured fp32 at {' and '.join(map(str, _measured))} thread{'s' * (_measured != [1])} on this "
         "machine, so the 4-thread configuration needs chapter 0 run with 4 threads first: without it this chapter "
         "stops in its first cells, naming chapter 0's missing run.")
if on_gpu or len(_fp32) < 2:
    _text = ("This run had no two fp32 thread counts to compare (" + ("on a GPU the chapter gives every configuration "
             "the host's threads" if on_gpu else "one configuration of fp32") + "), so `thread_gain_follows_gemv` "
             "reads *not measured*. With two, the book expects the step to gain what its price gains from chapter 0's "
             "rates at each thread count; a gain beyond the tolerance of that would show it wrong.")
else:
    _few, _many, _c = _fp32[0], _fp32[-1], contexts[0]
    _gain = Spread.of((per_run("fp32", _few, _c) / per_run("fp32", _many, _c)).dropna())
    _pred = cost[("fp32", _few)].decode(_c + steps // 2).best / cost[("fp32", _many)].decode(_c + steps // 2).best
    _gemv = ceilings.weight_rate(model_name, "fp32", _many) / ceilings.weight_rate(model_name, "fp32", _few)
    _issue = (ceilings.dispatch(model_name, "fp32", _few, "decode").best
              / ceilings.dispatch(model_name, "fp32", _many, "decode").best)
    _text = (f"This run compared {_many} threads with {_few}: at context {_c} the step ran {_gain.text('.2f', 'x')} as "
             f"fast, where the cost model predicted {_pred:.2f}x from chapter 0's rates at both counts (its "
             f"matrix-vector products gained {_gemv:.2f}x, its dispatch {_issue:.2f}x; `thread_gain_follows_gemv`: "
             f"*{register.verdict('thread_gain_follows_gemv')}*). On more cores, if the book is right, each step keeps "
             f"to the price of its own thread count, and it gains less than the kernels do wherever dispatch gains "
             f"less; a measured gain beyond the tolerance of the predicted one would show that chapter 0's kernels do "
             f"not carry their rates into the step.")
display(Markdown(f"<details><summary>What to expect</summary>\n\n{_text}{_four}\n</details>"))

# %% [markdown]
# * Raise `batches` to 128 and 256 until a row reports out of memory (or the step becomes compute-bound).

# %% jupyter={"source_hidden": true} tags=["answer"]
import os as _os

_ctx, _len = batch_context + batch_steps // 2, batch_context + batch_steps
_priced = {(_k, _b): cost[main].decode(_ctx, batch=_b, cache=_k, max_len=_len)
           for _k in ("dynamic", "static") for _b in (128, 256)}
_tps = {_key: _key[1] / _p.best for _key, _p in _priced.items()}  # tokens per second, priced
_cache_bytes = 256 * _len * shape.kv_bytes_per_token  # batch 256's caches at their longest
try:
    _memory = (torch.cuda.get_device_properties(device).total_memory if on_gpu
               else _os.sysconf("SC_PAGE_SIZE") * _os.sysconf("SC_PHYS_PAGES"))
except (AttributeError, ValueError, OSError):  # a system that does not say
    _memory = None
_size = f"{_cache_bytes / 1e9:.1f} GB" if _cache_bytes >= 1e8 else f"{_cache_bytes / 1e6:.0f} MB"
_fit = ("" if _memory is None else
        f" Batch 256's caches hold {_size} against the {_memory / 1e9:.0f} GB this machine reports, so "
        + ("they should fit and every row report ok (a container's limit may be lower)." if 2 * _cache_bytes < _memory
           else "the batch-256 row should report out of memory." if _cache_bytes > _memory
           else "they fit only just: a growing cache's copies may run out of memory."))
_top_terms = {_k: _priced[(_k, 256)].dominant for _k in ("dynamic", "static")}
_kinds = {"the matrices' arithmetic" if t.limit == "compute" else "the weights' read"
          if t.name in ("block matrices", "LM head") else "the cost of issuing the step" if t.name == "dispatch"
          else "the caches' work" for t in _top_terms.values()}
_bound = (" and ".join(sorted(_kinds)) + (": the step has turned compute-bound" if "the matrices' arithmetic" in _kinds
                                          else ", not the matrices' arithmetic: the step does not turn compute-bound"))
display(Markdown(
    f"<details><summary>What to expect</summary>\n\nThe cost model prices batch 128 and batch 256 at "
    f"{_tps[('dynamic', 128)]:.0f} and {_tps[('dynamic', 256)]:.0f} tokens per second with a growing cache and "
    f"{_tps[('static', 128)]:.0f} and {_tps[('static', 256)]:.0f} preallocated; the best measured above were "
    f"{dyn.tokens_per_s.max():.0f} (growing) and {stat.tokens_per_s.max():.0f} (preallocated). Its largest term at batch "
    f"256 is the {_top_terms['dynamic'].name} (growing) and the {_top_terms['static'].name} (preallocated), "
    f"{_bound}.{_fit} A measured step far above its price there would be work the cost model does not see at that "
    f"size.\n</details>"))

# %% [markdown]
# * Replace `gpt2-small` with `tiny-gpt2`: how much of a step is then the cost of issuing it?

# %% jupyter={"source_hidden": true} tags=["answer"]
_tiny_shape = MODELS["tiny-gpt2"][0].with_dtype(main[0])
try:
    _tiny = costmodel.CostModel(ceilings, "tiny-gpt2", _tiny_shape, *main).decode(contexts[0] + steps // 2)
except ValueError:  # chapter 0 did not time tiny-gpt2's kernels on this machine
    _tiny = None
_here = ("this run's own model" if model_name == "tiny-gpt2" else
         f"against {kind_of['dispatch'] / kind_of['total']:.0%} of {model_name}'s {prose.ms(kind_of['total'] / 1e3)} in this run")
if _tiny is None:
    _text = (f"Chapter 0 did not time tiny-gpt2's kernels here, so this run cannot price its step. Its weights are "
             f"{_tiny_shape.weight_bytes / 1e6:.1f} MB, so if the book is right nearly all of a step is dispatch.")
else:
    _text = (f"Chapter 0 timed tiny-gpt2's kernels too, so the cost model prices its step ({label(*main)}, context "
             f"{contexts[0]}): {prose.ms(_tiny.best)}, of which dispatch is **{_tiny.term('dispatch').best / _tiny.best:.0%}** "
             f"({_here}). Its weights are {_tiny_shape.weight_bytes / 1e6:.1f} MB, so reading them costs next to "
             f"nothing, while the step still issues its operations one by one from Python.")
display(Markdown(
    f"<details><summary>What to expect</summary>\n\n{_text} Expect the chapter to call such steps dispatch-bound by "
    f"their parts (and by the regime rule), not memory-bound, so `decode_memory_bound` does not hold; a step "
    f"well above its price would be overhead that chapter 0's hollowed step does not capture.\n</details>"))

# %% [markdown]
# * Set `batch_context = 64`: with small caches, which part of the batched step is left?

# %% jupyter={"source_hidden": true} tags=["answer"]
_small = {_b: cost[main].decode(64 + batch_steps // 2, batch=_b) for _b in (one, top)}  # a growing cache at context 64
_shares = {}
for _at, _p in (("64", _small[top]), ("now", batch_price("dynamic", top))):  # and this run's batch_context
    _shares[_at] = {"matrices": (_p.term("block matrices").best + _p.term("LM head").best) / _p.best,
                    "dispatch": _p.term("dispatch").best / _p.best,
                    "caches": sum(_p.term(t).best for t in ("attention", "cache copy", "page faults")) / _p.best}
_gain64 = _small[one].best / _small[top].best * top / one
_saved = _small[top].best - cost[main].decode(64 + batch_steps // 2, batch=top, cache="static", max_len=64 + batch_steps).best
_left = ("the weights' products, shared by the batch, and the cost of issuing them"
         if _shares["64"]["matrices"] >= _shares["64"]["dispatch"] else
         "mostly the cost of issuing the step, with the weights' products beside it")
display(Markdown(
    f"<details><summary>What to expect</summary>\n\nAt context 64 the cost model prices batch {top}'s step (growing "
    f"cache) at {prose.ms(_small[top].best)}: the matrices **{_shares['64']['matrices']:.0%}** (at `F({top})` rows), "
    f"dispatch {_shares['64']['dispatch']:.0%}, the caches {_shares['64']['caches']:.0%}"
    + (" (this run's own setting)" if batch_context == 64 else
       f", against {_shares['now']['caches']:.0%} for the caches at this run's context {batch_context}")
    + f". What is left is {_left}, so tokens per second should gain about {_gain64:.1f}x from batch {one} to {top} "
    f"(priced), against the {gains['dynamic'][0].text('.1f', 'x')} measured here at context {batch_context} with a "
    f"growing cache; " + (f"a preallocated cache would save {prose.ms(_saved)} of that step ({_saved / _small[top].best:.0%})."
                          if _saved > 0 else "a preallocated cache would save nothing: its masked attention costs "
                          "what the copy saves.") + "\n</details>"))

# %% [markdown]
# ## Key terms
#
# [Decode](glossary.md#decode), [KV cache](glossary.md#kv-cache), [Kernel rate](glossary.md#kernel-rate), [Dispatch](glossary.md#dispatch), [Regimes](glossary.md#regimes), [Streaming read](glossary.md#streaming-read), [Price](glossary.md#price), [Tolerance](glossary.md#tolerance), [Pace](glossary.md#pace). Each links to the book's glossary, which says how the book measures it.

# %% [markdown]
# ## Evidence in this chapter
#
# Each claim this chapter made, what was predicted, what this run measured, the verdict, and the data it came
# from. A verdict is decided on the 95 % interval of the median over runs (`lib.claims` says how): *held* when
# all of the interval agrees with the prediction, *did not hold* when none of it does, *not resolved* when it
# straddles the line. `data/03_decode_sweep/claims.csv` holds the same rows, and the book's status page counts them.

# %%
results.table(register.frame(), "claims")
display(prose.table(register.evidence()))
print(register.summary())
results.finish()  # the run is whole: its tables and figures replace the last run's together
