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
# A decode step feeds one new position through every layer. Its arithmetic is small, about `2 x weights`
# FLOPs, but it must read every weight and the whole KV cache to do it. The textbook says such a step is
# **memory-bound**: its time is bytes divided by bandwidth, so it should barely depend on the context until
# the cache is large, and it should halve when the bytes halve.
#
# This chapter tests that against the ceilings chapter 0 measured on this machine: cached greedy decode of
# GPT-2 small from a short context to one near its 1,024 positions (the `contexts` parameter), `steps` steps
# per run with the token read back to the host at every step, in several runs. Each step is set against two
# floors, its bytes over the **streaming** bandwidth (what the memory delivers to a simple loop) and over the
# rate the model's own **matrix-vector products** reach; its regime comes from the one rule in `lib.regime`.
# Then: what makes a step grow with the context, whether a second thread helps, and batched decode, where the
# weights are shared by the batch but every sequence's cache is not, taken apart into its pieces.

# %% tags=["parameters"]
quick = False
device = "auto"                  # "auto", "cpu", "cuda", "cuda:N"
model_name = "gpt2-small"
contexts = [16, 128, 512, 960]   # GPT-2 has 1,024 positions: context + steps must fit
steps = 32                       # greedy steps per run, each read back to the host
runs = 3                         # runs per point (decode sweep and batched sweep); a point is their median
configs = None                   # [(dtype, threads)]; None: fp32 on all threads and on 1, bf16 where its GEMV was fastest (GPU: fp32, fp16)
batches = [1, 4, 16, 64]
batch_context = 512
batch_steps = 8

# %%
from lib import params
from lib.models import KNOWN_MODELS

P = params.check(globals(), {
    "device": params.device(),
    "model_name": params.choice(KNOWN_MODELS, quick="tiny-gpt2"),
    "contexts": params.int_list(min=1, max=1023, quick=[16, 128]),
    "steps": params.integer(min=2, quick=8),
    "runs": params.integer(min=1, quick=2),
    "configs": params.listof(params.tuple_of(params.dtype(), params.integer(min=1, allow_none=True)),
                             allow_none=True),
    "batches": params.int_list(min=1, quick=[1, 4]),
    "batch_context": params.integer(min=1, max=1000, quick=64),
    "batch_steps": params.integer(min=2, quick=3),
}, quick=quick, chapter="03_decode_sweep")
contexts, batches = sorted(set(contexts)), sorted(set(batches))

# %%
import inspect

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from IPython.display import Markdown, display

from lib import claims, machine, phases, regime, roofline, sweeps, timing
from lib.device import UnsupportedDtype, describe_environment, resolve_device, resolve_dtype
from lib.models import load_model
from lib.progress import progress
from lib.results import Results, load_reference
from lib.shapes import ModelShape

# %%
dev = resolve_device(device)
on_gpu = dev.type == "cuda"
ceilings = machine.load_ceilings(quick=quick)  # chapter 0's one measurement of this machine
most = max(ceilings.threads("fp32"))           # all threads chapter 0 measured (0 on a GPU)
if configs is None:  # the 2-byte dtype at the thread count where chapter 0 found its GEMV fastest
    low = "fp16" if on_gpu else "bf16"
    fast = max(ceilings.threads(low), key=lambda n: ceilings.bandwidth(low, n or None, "matvec"), default=None)
    configs = [("fp32", most)] + ([("fp32", 1)] if most > 1 and 1 in ceilings.threads("fp32") else []) + \
              ([(low, fast)] if fast is not None else [])
configs = [(dt, 0 if on_gpu else (n or most)) for dt, n in configs]

# %%
models, not_run = {}, []
for dt in dict.fromkeys(["fp32"] + [dt for dt, _ in configs]):
    try:
        models[dt] = load_model(model_name, dev, resolve_dtype(dt, dev))
    except UnsupportedDtype as error:
        not_run.append(f"{dt}: {error}")
configs = [c for c in configs if c[0] in models]
for dt, n in configs:
    ceilings.hardware(dt, n or None)  # says which run of chapter 0 is missing, before any work
fp32 = models["fp32"]
shape = ModelShape.from_config(fp32.config, name=model_name).with_dtype("fp32")
main = ("fp32", most)


# %%
def ms(x: float) -> str:
    """A time in ms with the digits its size deserves."""
    return f"{x:.0f} ms" if abs(x) >= 100 else f"{x:.1f} ms" if abs(x) >= 1 else f"{x:.2f} ms"


def copy_verdict(saved_ms: float, copy_ms: float) -> str:
    """What the preallocated cache's saving says about the copy, when it is not about the copy's time alone."""
    if saved_ms <= 0:
        return ("the preallocated cache is not faster: a static cache also changes attention, which runs over every "
                "preallocated position, masked")
    if saved_ms > copy_ms:
        return (f"the preallocated cache saves {saved_ms / copy_ms:.1f} times what the concatenation costs alone: "
                "growing the cache costs the loop more than its copy timed by itself (fresh memory at every step is "
                "one candidate, not isolated here)")
    return ("the preallocated cache saves less than the concatenation costs alone: a static cache also changes "
            "attention, which runs over every preallocated position, masked")


def label(dt: str, n: int) -> str:
    """How a configuration is named on the page: its dtype and, on a CPU, its threads."""
    return f"{dt}, GPU" if on_gpu else f"{dt}, {n} thread{'s' if n > 1 else ''}"


# %%
results = Results("03_decode_sweep", quick=quick, device=dev, model=model_name)
register = claims.Claims()
pd.Series({**describe_environment(dev, None, model_name), "configurations": [label(*c) for c in configs],
           "not run": not_run or "none"}).to_frame("this run")

# %% [markdown]
# ## This machine's ceilings, from chapter 0
#
# A decode step has three lower bounds, and `lib.regime` labels a measured step by the largest of them:
#
# * **memory**: the bytes the step must read (every weight, plus the cache) over the **streaming read**
#   bandwidth with the same threads, the most this memory delivers to a simple loop;
# * **compute**: its FLOPs over the matrix rate; for a dtype without hardware instructions on this device the
#   rate is a slow fallback kernel's, and the bound is called **slow-kernel** instead;
# * **launch**: the cost of issuing the step's operations, a decode step of a 12-layer GPT-2 only 64 wide,
#   scaled by this model's number of layers.
#
# Beside them, not as a bound of the rule but as an explanation: the **GEMV floor**, the same bytes at the
# rate the model's own matrix-vector products reach. A step near the GEMV floor but far above the streaming
# one is limited by its kernels, not by the memory.

# %%
def ceiling_row(dt: str, n: int) -> dict:
    t = n or None
    return dict(dtype=dt, threads=n, read_gb_s=ceilings.bandwidth(dt, t, "read") / 1e9,
                triad_gb_s=ceilings.bandwidth(dt, t, "triad") / 1e9,
                matvec_gb_s=ceilings.bandwidth(dt, t, "matvec") / 1e9, matmul_gflop_s=ceilings.flops(dt, t) / 1e9,
                launch_12_layers_ms=ceilings.launch_s(dt, t) * 1e3, hardware_support=ceilings.hardware_support(dt))


machine_used = pd.DataFrame([ceiling_row(*c) for c in configs])
results.table(machine_used, "ceilings_used")
machine_used.round(2)

# %% [markdown] tags=["predict"]
# ### Predict first
#
# Each step's bytes and FLOPs come from `lib.roofline.decode_cost` at the middle of its run (the context plus
# half the steps); each bound divides them by a ceiling above. Before running anything: which bound is
# largest, and how long should a step take?

# %%
def step_bounds(dt: str, n: int, batch: int, context: int) -> tuple[roofline.Cost, dict[str, float]]:
    """The step's cost and its lower bounds in seconds, named as lib.regime takes them."""
    t = n or None
    cost = roofline.decode_cost(shape.with_dtype(dt), batch=batch, context=context)
    arithmetic = "compute" if ceilings.hardware_support(dt) else "slow-kernel"
    return cost, {arithmetic: cost.flops / ceilings.flops(dt, t),
                  "memory": cost.bytes / ceilings.bandwidth(dt, t, "read"), "launch": ceilings.launch_s(dt, t, shape.layers)}


rows = []
for dt, n in configs:
    for c in contexts:
        cost, b = step_bounds(dt, n, 1, c + steps // 2)
        rows.append(dict(dtype=dt, threads=n, context_tokens=c, bytes_per_step=cost.bytes, flops_per_step=cost.flops,
                         memory_ms=b["memory"] * 1e3, arithmetic_ms=max(b.get("compute", 0), b.get("slow-kernel", 0)) * 1e3,
                         launch_ms=b["launch"] * 1e3, gemv_floor_ms=cost.bytes / ceilings.bandwidth(dt, n or None, "matvec") * 1e3,
                         predicted_limit=max(b, key=b.get)))
predicted = pd.DataFrame(rows)
predicted[["dtype", "threads", "context_tokens", "memory_ms", "gemv_floor_ms", "arithmetic_ms", "launch_ms",
           "predicted_limit"]].round(2)

# %%
first = predicted[(predicted.dtype == main[0]) & (predicted.threads == main[1])].iloc[0]
display(Markdown(
    f"Prediction ({label(*main)}, context {first.context_tokens}): a step reads "
    f"{first.bytes_per_step / 2**20:.0f} MiB, **{first.memory_ms:.1f} ms** at the streaming read and "
    f"{first.gemv_floor_ms:.1f} ms at the model's GEMV rate; its arithmetic takes {first.arithmetic_ms:.1f} ms and "
    f"issuing its operations {first.launch_ms:.1f} ms. The largest bound is **{first.predicted_limit}**: a step "
    f"should take at least {max(first.memory_ms, first.arithmetic_ms, first.launch_ms):.1f} ms."))

# %% [markdown]
# ## The sweep
#
# For each context, one prefill builds the cache; then `runs` runs of `steps` greedy steps each, the cache
# cropped back to the context before every run. Each step's time runs from one token's host readback to
# the next; a run's step time is the median of its steps, and a point is the median of its runs with their
# range. For a dtype other than fp32 the cache is built by the fp32 model and cast: a decode step's cost
# depends on the cache's shape and dtype, not its values.

# %%
rows = []
for dt, n in configs:
    with sweeps.torch_threads(n or None):
        table = sweeps.decode_sweep(models[dt], contexts, steps=steps, runs=runs, prefill_model=fp32, label=label(dt, n))
    rows.append(table.assign(dtype=dt, threads=n, step_ms=table.median_s * 1e3))
decode_runs = pd.concat(rows, ignore_index=True)
results.table(decode_runs, "decode_runs")
decode = timing.median_range(decode_runs, ["dtype", "threads", "context_tokens"], ["step_ms"]).merge(
    predicted, on=["dtype", "threads", "context_tokens"])

# %%
labels = [regime.regime(r.step_ms / 1e3, step_bounds(r.dtype, r.threads, 1, r.context_tokens + steps // 2)[1])
          for r in decode.itertuples()]
decode["regime"] = [g.label for g in labels]
decode["over_largest_bound"] = [g.ratio for g in labels]
decode["over_streaming_floor"] = decode.step_ms / decode.memory_ms
decode["over_gemv_floor"] = decode.step_ms / decode.gemv_floor_ms
decode["implied_gb_s"] = decode.bytes_per_step / (decode.step_ms / 1e3) / 1e9
results.table(decode, "decode_sweep")
decode[["dtype", "threads", "context_tokens", "step_ms", "step_ms_low", "step_ms_high", "implied_gb_s",
        "over_streaming_floor", "over_gemv_floor", "regime"]].round(2)

# %%
fig, (ax_s, ax_b) = plt.subplots(1, 2, figsize=(12, 4.5))
for (dt, n), g in decode.groupby(["dtype", "threads"], sort=False):
    line = ax_s.errorbar(g.context_tokens, g.step_ms, yerr=[g.step_ms - g.step_ms_low, g.step_ms_high - g.step_ms],
                         marker="o", capsize=3, label=label(dt, n))
    color = line[0].get_color()
    ax_s.plot(g.context_tokens, g.memory_ms, ":", color=color, label=f"{label(dt, n)}: streaming floor")
    ax_s.plot(g.context_tokens, g.gemv_floor_ms, "--", color=color, lw=1, label=f"{label(dt, n)}: GEMV floor")
    ax_b.plot(g.context_tokens, g.implied_gb_s, "o-", color=color, label=f"{label(dt, n)}: implied")
    row = machine_used[(machine_used.dtype == dt) & (machine_used.threads == n)].iloc[0]
    ax_b.axhline(row.read_gb_s, ls=":", lw=1, color=color)
    ax_b.axhline(row.matvec_gb_s, ls="--", lw=1, color=color)
ref_rows = decode[(decode.dtype == main[0]) & (decode.threads == main[1])]
ax_s.set(xscale="log", yscale="log", xlabel="context tokens at the start of the run", ylabel="decode step (ms)")
ax_s.set_title(f"{label(*main)}: a step is {ref_rows.over_streaming_floor.min():.1f}-"
               f"{ref_rows.over_streaming_floor.max():.1f}x its streaming floor, "
               f"{ref_rows.over_gemv_floor.min():.1f}-{ref_rows.over_gemv_floor.max():.1f}x its GEMV floor", fontsize=10)
ax_b.set(xscale="log", xlabel="context tokens", ylabel="bytes a step must read / step time (GB/s)")
ax_b.set_title("Implied bandwidth; dotted: streaming read, dashed: GEMV rate (chapter 0)", fontsize=10)
for ax in (ax_s, ax_b):
    ax.set_xscale("log", base=2)
    ax.legend(fontsize=6)
fig.tight_layout()
results.figure(fig, "decode_step")
plt.show()

# %% [markdown]
# Read the regimes, not the textbook. The rule, shown once (every chapter that labels a point calls it):

# %%
print(inspect.getsource(regime.regime))
print(f"REGIME_SLACK = {regime.REGIME_SLACK}, FLOOR_TOLERANCE = {regime.FLOOR_TOLERANCE}")

# %%
m = ref_rows
stream_gb_s, gemv_gb_s = machine_used.iloc[0].read_gb_s, machine_used.iloc[0].matvec_gb_s
display(Markdown(register.decide(
    "decode_memory_bound", f"Every {label(*main)} step is memory-bound by lib.regime: within "
    f"{regime.REGIME_SLACK:g}x of its bytes over the streaming read, the largest bound.",
    (m.regime == "memory-bound").all(), predicted="memory-bound at every context",
    measured=", ".join(f"{c}: {r} ({x:.1f}x)" for c, r, x in zip(m.context_tokens, m.regime, m.over_largest_bound)),
    evidence=f"decode_sweep.csv, {label(*main)}",
    if_held=f"at every context the step is {m.over_streaming_floor.min():.1f} to {m.over_streaming_floor.max():.1f} "
            f"times its bytes over the {stream_gb_s:.1f} GB/s streaming read: memory-bound by the book's rule.",
    if_not=f"the steps are labelled {', '.join(dict.fromkeys(m.regime))}; each takes {m.over_streaming_floor.min():.1f} "
           f"to {m.over_streaming_floor.max():.1f} times its bytes over the {stream_gb_s:.1f} GB/s streaming read, and "
           f"{m.over_largest_bound.min():.1f} to {m.over_largest_bound.max():.1f} times its largest bound "
           f"({', '.join(dict.fromkeys(m.predicted_limit))}).")))

# %%
near = [claims.within(s, f, 1.5) for s, f in zip(m.step_ms, m.gemv_floor_ms)]
display(Markdown(register.decide(
    "decode_at_gemv_rate", f"Every {label(*main)} step is within 1.5x of its bytes at the model's own GEMV rate.",
    all(near), predicted=f"within 1.5x of the GEMV floor ({gemv_gb_s:.1f} GB/s)",
    measured=f"{m.over_gemv_floor.min():.2f}-{m.over_gemv_floor.max():.2f}x", evidence=f"decode_sweep.csv, {label(*main)}",
    if_held=f"the model's matrix-vector kernels, at {gemv_gb_s:.1f} GB/s, explain the step to within 1.5x "
            f"({m.over_gemv_floor.min():.2f} to {m.over_gemv_floor.max():.2f}x)" + (
                f"; the streaming read's {stream_gb_s:.1f} GB/s is what the memory could give a better kernel."
                if stream_gb_s > gemv_gb_s else "."),
    if_not=f"the step is {m.over_gemv_floor.min():.2f} to {m.over_gemv_floor.max():.2f} times its bytes at the GEMV "
           f"rate ({gemv_gb_s:.1f} GB/s): " + ("faster than the model's kernels ran alone in chapter 0, so that rate "
           "understates them here." if m.over_gemv_floor.max() < 1 else "beyond what the matrix-vector products "
           "explain, something else costs time (the sections below measure the cache's part)."))))

# %% [markdown]
# ### What limits a narrower dtype
#
# Halving the bytes should halve a memory-bound step. Whether it does depends on the kernels: with
# instructions for the dtype the matrix-vector products run at its own rate; without them a slow fallback
# kernel converts every element, and the step is bound by that kernel (chapter 0 records which).

# %%
narrow = [(dt, n) for dt, n in configs if dt != "fp32" and ("fp32", n) in configs]
if not narrow:
    display(Markdown(register.decide("narrow_dtype_faster", "A 2-byte dtype's step is shorter than fp32's.", None,
                                      if_held="", if_not="", if_not_measured="no 2-byte dtype beside fp32 in this run.")))
else:
    dt, n = narrow[0]
    lo = decode[(decode.dtype == dt) & (decode.threads == n)].reset_index(drop=True)
    hi = decode[(decode.dtype == "fp32") & (decode.threads == n)].reset_index(drop=True)
    faster = (lo.step_ms_high < hi.step_ms_low).all()
    what = dict.fromkeys(lo.regime)
    support = "has" if ceilings.hardware_support(dt) else "has no"
    display(Markdown(register.decide(
        "narrow_dtype_faster", f"{dt} halves the bytes, so its step is shorter than fp32's at every context "
        f"(beyond the runs' ranges).", faster, predicted=f"about {lo.memory_ms.iloc[0] / hi.memory_ms.iloc[0]:.2f}x fp32's",
        measured=f"{(lo.step_ms / hi.step_ms).min():.2f}-{(lo.step_ms / hi.step_ms).max():.2f}x fp32's",
        evidence=f"decode_sweep.csv, {label(dt, n)} against fp32; chapter 0: this device {support} {dt} instructions",
        if_held=f"{dt} steps take {(lo.step_ms / hi.step_ms).min():.2f} to {(lo.step_ms / hi.step_ms).max():.2f} times "
                f"fp32's; labelled {', '.join(what)}, and {lo.over_gemv_floor.min():.1f} to {lo.over_gemv_floor.max():.1f} "
                f"times their bytes at the {dt} GEMV rate. This device {support} {dt} instructions.",
        if_not=f"{dt} steps take {(lo.step_ms / hi.step_ms).min():.2f} to {(lo.step_ms / hi.step_ms).max():.2f} times "
               f"fp32's, not shorter beyond the runs' ranges at every context; labelled {', '.join(what)}. This device {support} "
               f"{dt} instructions; its {dt} GEMV reaches {ceilings.bandwidth(dt, n or None, 'matvec') / 1e9:.1f} GB/s "
               f"(fp32: {ceilings.bandwidth('fp32', n or None, 'matvec') / 1e9:.1f}), and the {dt} steps take "
               f"{lo.over_gemv_floor.min():.1f} to {lo.over_gemv_floor.max():.1f} times their bytes at that rate.")))

# %%
text = "Every point's regime (lib.regime):"
for (dt, n), g in decode.groupby(["dtype", "threads"], sort=False):
    text += f"\n* {label(dt, n)}: " + ", ".join(
        f"context {c}: {r} ({x:.1f}x its {limit} bound; {y:.1f}x its GEMV floor)" for c, r, x, limit, y in
        zip(g.context_tokens, g.regime, g.over_largest_bound, g.predicted_limit, g.over_gemv_floor))
display(Markdown(text))

# %% [markdown]
# **Takeaway: a decode step is bound by the largest of bytes over bandwidth, FLOPs over FLOP rate, and the
# cost of launching its operations; and "bandwidth" has two answers, what the memory streams and what the
# model's kernels draw, so measure both before choosing what to optimise.**
#
# ## Why the step grows with the context
#
# The roofline counts the cache's bytes once per step, read by attention. transformers' `DynamicCache`, which
# this loop uses, also grows by concatenation: every step builds new keys and values tensors for every
# layer, one position longer, and copies the whole cache into them. That copy is not in the byte count.

# %% [markdown] tags=["predict"]
# ### Predict first
#
# From the shortest context to the longest, the bytes a step must read grow by the ratio printed below. If
# the step is memory-bound, it grows by that ratio too. Three measurements say what it does instead: the same
# decode over a **preallocated** cache (transformers' `StaticCache`, written in place, no copy), and, timed
# alone on a cache of each context's size, the **attention** over the cache and the **concatenation**
# (`lib.sweeps.cache_costs`).

# %%
fp32_bytes = predicted[predicted.dtype == "fp32"].drop_duplicates("context_tokens").bytes_per_step
bytes_growth = fp32_bytes.iloc[-1] / fp32_bytes.iloc[0]
print(f"bytes per step grow {bytes_growth:.2f}x from context {contexts[0]} to {contexts[-1]}")
growth_configs = [(dt, n) for dt, n in configs if dt == "fp32"]
rows, alone = [], []
for dt, n in growth_configs:
    with sweeps.torch_threads(n or None):
        table = sweeps.decode_sweep(models[dt], contexts, steps=steps, runs=runs, label=f"{label(dt, n)}, static cache",
                                    cache="static")
        rows.append(table.assign(dtype=dt, threads=n, static_step_ms=table.median_s * 1e3))
        for c in contexts:
            cost = sweeps.cache_costs(shape, 1, c + steps // 2, dev, models[dt].dtype, repeats=max(runs, 3) * 2)
            alone.append(dict(dtype=dt, threads=n, context_tokens=c, attention_ms=cost["attention"].median * 1e3,
                              concatenation_ms=cost["concatenation"].median * 1e3))
static_runs = pd.concat(rows, ignore_index=True)
_ = results.table(static_runs, "static_decode_runs")

# %%
growth = (decode.merge(timing.median_range(static_runs, ["dtype", "threads", "context_tokens"], ["static_step_ms"]),
                       on=["dtype", "threads", "context_tokens"])
          .merge(pd.DataFrame(alone), on=["dtype", "threads", "context_tokens"]))
results.table(growth, "growth_with_context")
growth[["dtype", "threads", "context_tokens", "step_ms", "static_step_ms", "static_step_ms_low", "static_step_ms_high",
        "memory_ms", "attention_ms", "concatenation_ms"]].round(2)


# %%
def growth_of(g: pd.DataFrame) -> dict:
    """From the shortest context to the longest: each column's growth in ms and the step's as a ratio."""
    d = {c: g[c].iloc[-1] - g[c].iloc[0] for c in ["step_ms", "static_step_ms", "memory_ms", "attention_ms",
                                                 "concatenation_ms"]}
    return dict(d, step_ratio=g.step_ms.iloc[-1] / g.step_ms.iloc[0],
                static_ratio=g.static_step_ms.iloc[-1] / g.static_step_ms.iloc[0],
                copy_saved_ms=g.step_ms.iloc[-1] - g.static_step_ms.iloc[-1], copy_ms=g.concatenation_ms.iloc[-1])


grown = {(dt, n): growth_of(g) for (dt, n), g in growth.groupby(["dtype", "threads"], sort=False)}
pd.DataFrame(grown).T.round(2)

# %%
def tag(dt: str, n: int) -> str:
    return f"{dt}_gpu" if on_gpu else f"{dt}_{n}t"


span = f"from context {contexts[0]} to {contexts[-1]}"
for (dt, n), d in grown.items():
    display(Markdown(f"{label(dt, n)}, {span}: " + register.decide(
        f"growth_follows_bytes_{tag(dt, n)}", f"{label(dt, n)}, {span}: the step grows no more than its bytes "
        "(ratio within 10 %).", d["step_ratio"] <= bytes_growth * 1.1,
        predicted=f"{bytes_growth:.2f}x", measured=f"{d['step_ratio']:.2f}x", evidence="growth_with_context.csv",
        if_held=f"the step grows {d['step_ratio']:.2f}x, the bytes {bytes_growth:.2f}x.",
        if_not=f"the step grows {d['step_ratio']:.2f}x while the bytes grow {bytes_growth:.2f}x: "
               f"{d['step_ms']:+.1f} ms per step, of which the bytes explain {d['memory_ms']:+.1f} ms.")))

# %%
for (dt, n), d in grown.items():
    cache_ms = d["attention_ms"] + d["concatenation_ms"]
    display(Markdown(f"{label(dt, n)}, {span}: " + register.decide(
        f"growth_is_cache_work_{tag(dt, n)}", f"{label(dt, n)}, {span}: the step's growth is the attention and the "
        "concatenation, timed alone (within 1.5x).",
        d["step_ms"] > 0 and cache_ms > 0 and claims.within(d["step_ms"], cache_ms, 1.5),
        predicted=f"{cache_ms:+.1f} ms", measured=f"{d['step_ms']:+.1f} ms", evidence="growth_with_context.csv",
        if_held=f"the step grows {d['step_ms']:.1f} ms; timed alone, attention grows {d['attention_ms']:.1f} ms and the "
                f"concatenation {d['concatenation_ms']:.1f} ms.",
        if_not=f"the step changes by {d['step_ms']:+.1f} ms, while attention ({d['attention_ms']:+.1f} ms) and the "
               f"concatenation ({d['concatenation_ms']:+.1f} ms), timed alone, change by {cache_ms:+.1f} ms in all.")))

# %%
for (dt, n), d in grown.items():
    display(Markdown(f"{label(dt, n)}, context {contexts[-1]}: " + register.decide(
        f"static_cache_saves_the_copy_{tag(dt, n)}", f"{label(dt, n)}, context {contexts[-1]}: the preallocated cache "
        "saves about the concatenation's time (within 1.5x).",
        d["copy_saved_ms"] > 0 and claims.within(d["copy_saved_ms"], d["copy_ms"], 1.5),
        predicted=f"{d['copy_ms']:.1f} ms (the concatenation alone)", measured=f"{d['copy_saved_ms']:+.1f} ms",
        evidence="growth_with_context.csv",
        if_held=f"the static-cache step is {d['copy_saved_ms']:.1f} ms shorter; the concatenation alone takes "
                f"{d['copy_ms']:.1f} ms. Over a static cache the step grows {d['static_ratio']:.2f}x with the context.",
        if_not=f"the static-cache step is {ms(abs(d['copy_saved_ms']))} {'shorter' if d['copy_saved_ms'] > 0 else 'longer'} "
               f"than the growing cache's, and the concatenation alone takes {ms(d['copy_ms'])}: {copy_verdict(d['copy_saved_ms'], d['copy_ms'])}. "
               f"Over a static cache the step grows {d['static_ratio']:.2f}x with the context.")))

# %% [markdown]
# **Takeaway: the roofline's bytes are not all a step moves: a cache that grows by concatenation is copied
# at every step as well as read; time the cache's own work before calling a step's growth "memory".**
#
# ## Does a second thread help?
#
# One core can keep only so many memory requests in flight, so a streaming read over two threads usually
# moves more bytes per second than over one. A decode step is made of the model's matrix-vector products,
# whose kernel may or may not use the second thread. Chapter 0 timed both kernels on 1 thread and on all;
# the step's own gain says which one it follows.

# %%
pair = sorted(n for dt, n in configs if dt == "fp32")
if on_gpu or len(pair) < 2:
    display(Markdown(register.decide(
        "thread_gain_follows_gemv", "A step gains from more threads what the model's GEMV gains, not what a "
        "streaming read gains.", None, if_held="", if_not="",
        if_not_measured="one thread count only (a GPU, or one configuration of fp32).")))
else:
    few, many = pair[0], pair[-1]
    gain = lambda kernel: ceilings.bandwidth("fp32", many, kernel) / ceilings.bandwidth("fp32", few, kernel)
    step_at = lambda t: decode[(decode.dtype == "fp32") & (decode.threads == t)].step_ms.reset_index(drop=True)
    threads_table = pd.DataFrame({"streaming read": [gain("read")], "triad": [gain("triad")], "model GEMV": [gain("matvec")],
                                  "decode step (median over contexts)": [(step_at(few) / step_at(many)).median()]},
                                 index=[f"speed-up, {few} -> {many} threads"])
    results.table(threads_table.reset_index(names="measure"), "thread_speedup")
    display(threads_table.round(2))

# %%
if not on_gpu and len(pair) >= 2:
    g_step, g_read, g_mv = threads_table.iloc[0]["decode step (median over contexts)"], gain("read"), gain("matvec")
    tell = not claims.within(g_read, g_mv, 1.1)
    closer = "GEMV" if abs(np.log(g_step / g_mv)) < abs(np.log(g_step / g_read)) else "streaming read"
    follows = closer if claims.within(g_step, g_mv if closer == "GEMV" else g_read, 1.25) else "neither kernel"
    display(Markdown(register.decide(
        "thread_gain_follows_gemv", "A step gains from more threads what the model's GEMV gains (within 1.25x), "
        "not what a streaming read gains.", (follows == "GEMV") if tell else None,
        predicted=f"GEMV {g_mv:.2f}x", measured=f"step {g_step:.2f}x (read {g_read:.2f}x)",
        evidence="chapter 0's read and matvec kernels; decode_sweep.csv",
        if_held=f"{many} threads against {few}: the step runs {g_step:.2f}x as fast, the model's GEMV "
                f"{g_mv:.2f}x, a streaming read {g_read:.2f}x. The threads help the step as much as its kernel uses "
                "them" + ("; the memory had more to give." if g_read > g_mv else "."),
        if_not=f"{many} threads against {few}: the step runs {g_step:.2f}x as fast, the model's GEMV {g_mv:.2f}x, a "
               f"streaming read {g_read:.2f}x: the step follows {'the ' if follows != 'neither kernel' else ''}{follows}"
               + ("; more threads made the step slower." if g_step < 1 else "."),
        if_not_measured=f"the streaming read ({g_read:.2f}x) and the GEMV ({g_mv:.2f}x) gained alike from "
                        f"{many} threads, so the step's {g_step:.2f}x cannot tell them apart on this machine.")))

# %% [markdown]
# ## Beside the reference runs
#
# The source chapter timed the same decode on a GPU and on one CPU thread. Its numbers are loaded from
# `data/reference/`; ours are this run's, median and range over runs.

# %%
ref = load_reference("ch09_decode_gpu_cpu")
facts = load_reference("ch09_facts").set_index("fact")["value"]
ours = decode[(decode.dtype == "fp32") & (decode.threads == (1 if ("fp32", 1) in configs else main[1]))]
beside = ref.merge(ours[["context_tokens", "step_ms", "step_ms_low", "step_ms_high"]]
                   .rename(columns=lambda c: c if c == "context_tokens" else f"this_{c}"), on="context_tokens", how="outer")
results.table(beside, "beside_reference")
display(beside.round(1))
display(Markdown(
    f"This run ({label('fp32', int(ours.threads.iloc[0]))}): "
    + ", ".join(f"context {r.context_tokens}: {timing.span(r.step_ms_low, r.step_ms_high, '.1f', 'ms')}" for r in ours.itertuples())
    + f". The source's CPU took {ref.cpu_1thread_ms_lo.min():.0f} to {ref.cpu_1thread_ms_hi.max():.0f} ms a step with one "
    f"thread; its GPU took {ref.gpu_fp32_ms_lo.min():.1f} to {ref.gpu_fp32_ms_hi.max():.1f} ms at every context and "
    f"implied {facts['decode_implied_bandwidth_fp32_lo']:.0f} to {facts['decode_implied_bandwidth_fp32_hi']:.0f} GB/s of "
    f"its {facts['gpu_memory_bandwidth']:.0f} GB/s."))

# %% [markdown]
# ## Batched decode: shared weights, private caches
#
# Decode `B` sequences at once and the step still reads every weight once, now shared by `B` tokens, but it
# reads `B` caches, and it does `B` times the arithmetic.

# %% [markdown] tags=["predict"]
# ### Predict first
#
# The table gives, for each batch at context `batch_context`, the weights' and the caches' bytes and the
# step's three bounds on this machine. If the step follows its largest bound, the tokens per second of the
# batch over those of one sequence is the `predicted_gain` column.

# %%
rows = []
for b in batches:
    cost, bd = step_bounds(*main, b, batch_context + batch_steps // 2)
    rows.append(dict(batch=b, weight_mb=shape.weight_bytes / 1e6, kv_read_mb=(cost.bytes - shape.weight_bytes) / 1e6,
                     memory_bound_ms=bd["memory"] * 1e3, compute_bound_ms=bd.get("compute", np.nan) * 1e3,
                     launch_ms=bd["launch"] * 1e3, bound_ms=max(bd.values()) * 1e3))
batch_bounds = pd.DataFrame(rows)
batch_bounds["kv_share_of_bytes"] = batch_bounds.kv_read_mb / (batch_bounds.kv_read_mb + batch_bounds.weight_mb)
batch_bounds["predicted_gain"] = batch_bounds.batch / batch_bounds.bound_ms * batch_bounds.bound_ms.iloc[0]
batch_bounds.round(2)

# %% [markdown]
# ### Measured: a growing cache and a preallocated one
#
# One prompt is prefilled and its cache copied to every sequence (a step's cost depends on the cache's
# shape, not its values). Each batch decodes `batch_steps` steps twice: over the growing `DynamicCache` and
# over a preallocated `StaticCache` of the same contents, so the difference is the copying. Both sweeps run
# `runs` times, interleaved; a batch that does not fit in memory is recorded as such.

# %%
rows = []
with sweeps.torch_threads(main[1] or None):
    for run in progress(range(runs), desc="batched runs"):
        for kind in ("dynamic", "static"):
            t = sweeps.batched_decode_sweep(fp32, batch_context, batches, steps=batch_steps, seed=run, cache=kind,
                                            label=f"batched, {kind} cache")
            rows.append(t.assign(cache=kind, run=run + 1, step_ms=t.median_s * 1e3))
batched_runs = pd.concat(rows, ignore_index=True)
results.table(batched_runs, "batched_decode_runs")
fits = batched_runs.groupby("batch").status.agg(lambda s: (s == "ok").all())
ok_batches = [b for b in batches if fits[b]]
batched = timing.median_range(batched_runs[batched_runs.batch.isin(ok_batches)], ["cache", "batch"], ["step_ms"])
batched = batched.assign(tokens_per_s=batched.batch / batched.step_ms * 1e3, dtype="fp32", threads=main[1],
                         context_tokens=batch_context)
results.table(batched, "batched_decode")
batched.pivot(index="batch", columns="cache", values=["step_ms", "step_ms_low", "step_ms_high", "tokens_per_s"]).round(1)

# %%
wf = load_reference("wordfactory_part3_cpu")
wf_table = next(t for t in wf.table.unique() if t.startswith("batched_decode_ctx"))
ref_context = int(wf_table.removeprefix("batched_decode_ctx"))
wf = wf[wf.table == wf_table].assign(batch=lambda d: d.x.astype(int)).reset_index(drop=True)
dyn = batched[batched.cache == "dynamic"].set_index("batch")
stat = batched[batched.cache == "static"].set_index("batch")
top, one = ok_batches[-1], ok_batches[0]
gain_dyn, gain_stat = dyn.tokens_per_s[top] / dyn.tokens_per_s[one], stat.tokens_per_s[top] / stat.tokens_per_s[one]

# %%
fig, ax = plt.subplots(figsize=(8, 4.5))
for frame, name, style in ((dyn, "growing cache (DynamicCache)", "o-"), (stat, "preallocated cache (StaticCache)", "s-")):
    ax.errorbar(frame.index, frame.tokens_per_s, capsize=3, fmt=style, label=f"this machine, {name}",
                yerr=[frame.tokens_per_s - frame.index / frame.step_ms_high * 1e3,
                      frame.index / frame.step_ms_low * 1e3 - frame.tokens_per_s])
ax.plot(wf.batch, wf.tokens_per_s, "d--", label=f"reference: Word Factory, GPT-2 small at context {ref_context}, 2-core NumPy")
ax.plot(batch_bounds.batch, batch_bounds.predicted_gain * dyn.tokens_per_s[one], ":", color="grey",
        label=f"batch {one} times the predicted gain")
ax.set(xscale="log", yscale="log", xlabel="sequences decoded together (batch)", ylabel="tokens per second, all sequences")
ax.set_xscale("log", base=2)
ax.set_title(f"Batch {top}: {gain_dyn:.1f}x the tokens of batch {one} with a growing cache, {gain_stat:.1f}x "
             f"preallocated; each user waits {dyn.step_ms[top] / dyn.step_ms[one]:.1f}x longer", fontsize=10)
ax.legend(fontsize=7)
ax.grid(True, alpha=0.3)
results.figure(fig, "batched_decode")
plt.show()

# %%
measured_gain = dyn.tokens_per_s / dyn.tokens_per_s[one]
expected = batch_bounds.set_index("batch").predicted_gain
apart = [b for b in ok_batches if not claims.within(measured_gain[b], expected[b], 1.5)]
display(Markdown(register.decide(
    "batching_follows_its_bound", "Tokens per second grow with the batch as the step's largest bound predicts "
    "(within 1.5x at every batch).", not apart,
    predicted=", ".join(f"B={b}: {expected[b]:.1f}x" for b in ok_batches),
    measured=", ".join(f"B={b}: {measured_gain[b]:.1f}x" for b in ok_batches), evidence="batched_decode.csv (growing cache)",
    if_held=f"at batch {top} the bound predicts {expected[top]:.1f}x the tokens of batch {one} and the machine gives "
            f"{measured_gain[top]:.1f}x.",
    if_not=f"at {', '.join(f'batch {b}' for b in apart)} the measured gain falls outside 1.5x of the prediction "
           f"(batch {top}: {measured_gain[top]:.1f}x measured, {expected[top]:.1f}x predicted). The step's bounds do "
           "not explain the batched step: the next section takes it apart.")))

# %% [markdown]
# ## Where the batched step's time goes
#
# Each part of a batched step, timed alone with the same shapes (median of repeats):
#
# * **matrix products**: every weight matrix of the model multiplied by `B` rows (`lib.machine.matvec`, the
#   bare `F.linear` of chapter 0), the part the batch shares; the LM head's share is timed too;
# * **attention**: each sequence's query against its own cache, every layer (`lib.sweeps.cache_costs`): it
#   reads all the caches' bytes and does the attention arithmetic;
# * **cache copying**: the concatenation by which the growing cache gets one position longer, every layer;
# * **launch**: chapter 0's launch floor, the cost of issuing the step's operations.
#
# What the step takes beyond their sum is **the rest**: layer norms, activations, the argmax over every
# sequence's logits, Python. Beside each measured part, the bound its bytes or FLOPs predict.

# %%
size = machine.sizes(dev, quick)
weights = machine.model_matmuls(shape, dev, fp32.dtype)
parts = []
with sweeps.torch_threads(main[1] or None):
    for b in progress(ok_batches, desc="parts"):
        cache = sweeps.cache_costs(shape, b, batch_context + batch_steps // 2, dev, fp32.dtype, repeats=size.repeats)
        parts.append(dict(batch=b, matmuls_ms=machine.matvec(weights, b, dev, size).median * 1e3,
                          lm_head_ms=machine.matvec(weights[-1:], b, dev, size).median * 1e3,
                          attention_ms=cache["attention"].median * 1e3,
                          concatenation_ms=cache["concatenation"].median * 1e3,
                          launch_ms=ceilings.launch_s(*main, shape.layers) * 1e3))
del weights
parts = pd.DataFrame(parts).merge(batch_bounds[["batch", "weight_mb", "kv_read_mb"]], on="batch")
parts["step_ms"] = [dyn.step_ms[b] for b in parts.batch]
parts["static_step_ms"] = [stat.step_ms[b] for b in parts.batch]
parts["rest_ms"] = parts.step_ms - parts[["matmuls_ms", "attention_ms", "concatenation_ms", "launch_ms"]].sum(axis=1)

# %%
read, copy_bw, flops = (ceilings.bandwidth(*main, "read"), ceilings.bandwidth(*main, "copy"), ceilings.flops(*main))
parts["weights_bound_ms"] = [max(shape.weight_bytes / read, 2 * b * shape.matmul_params / flops) * 1e3 for b in parts.batch]
parts["cache_bytes_ms"] = parts.kv_read_mb * 1e6 / read * 1e3
parts["attention_flops_ms"] = [4 * shape.d_model * shape.layers * b * (batch_context + batch_steps // 2) / flops * 1e3
                               for b in parts.batch]
parts["copy_bound_ms"] = 2 * parts.kv_read_mb * 1e6 / copy_bw * 1e3   # read and write, at STREAM's copy rate
parts["copy_saved_ms"] = parts.step_ms - parts.static_step_ms
results.table(parts, "batched_parts")
parts[["batch", "step_ms", "static_step_ms", "matmuls_ms", "weights_bound_ms", "lm_head_ms", "attention_ms",
       "cache_bytes_ms", "attention_flops_ms", "concatenation_ms", "copy_bound_ms", "copy_saved_ms", "launch_ms",
       "rest_ms"]].round(1)

# %%
names = {"matmuls_ms": "matrix products", "attention_ms": "attention", "concatenation_ms": "cache copying",
         "launch_ms": "launch", "rest_ms": "the rest"}
fig, ax = plt.subplots(figsize=(8, 4.5))
x, bottom = np.arange(len(parts)), np.zeros(len(parts))
for column, name in names.items():
    share = (parts[column].clip(lower=0) / parts.step_ms).to_numpy()
    ax.bar(x, share, bottom=bottom, label=name)
    bottom += share
ax.plot(x, parts.static_step_ms / parts.step_ms, "k_", ms=30, mew=2, label="preallocated cache's step")
ax.axhline(1, color="grey", lw=1)
ax.set_xticks(x, [f"B={b}\n{ms(t)}" for b, t in zip(parts.batch, parts.step_ms)])
ax.set(ylabel="share of the growing-cache step", xlabel="batch and its measured step")
last = parts.iloc[-1]
ax.set_title(f"Batch {int(last.batch)}: " + ", ".join(f"{name} {max(last[c], 0) / last.step_ms:.0%}" for c, name in names.items()),
             fontsize=9)
ax.legend(fontsize=7)
results.figure(fig, "batched_parts")
plt.show()

# %%
big = int(last.batch)
spread = (f"growing {timing.span(dyn.step_ms_low[big], dyn.step_ms_high[big], '.0f', 'ms')}, preallocated "
          f"{timing.span(stat.step_ms_low[big], stat.step_ms_high[big], '.0f', 'ms')} over runs")
display(Markdown(register.decide(
    "static_cache_isolates_the_copy", f"At batch {big}, the preallocated cache saves about what the concatenation "
    "costs alone (within 1.5x).", last.copy_saved_ms > 0 and claims.within(last.copy_saved_ms, last.concatenation_ms, 1.5),
    predicted=f"{ms(last.concatenation_ms)} (concatenation alone)", measured=f"{ms(last.copy_saved_ms)} saved",
    evidence=f"batched_parts.csv; {spread}",
    if_held=f"the growing cache's step takes {ms(last.step_ms)}, the preallocated one's {ms(last.static_step_ms)} "
            f"({spread}): {ms(last.copy_saved_ms)} apart, against {ms(last.concatenation_ms)} for the copy alone, "
            f"{last.concatenation_ms / last.step_ms:.0%} of the step (its bytes at STREAM's copy rate: {ms(last.copy_bound_ms)}).",
    if_not=f"the growing cache's step takes {ms(last.step_ms)}, the preallocated one's {ms(last.static_step_ms)} "
           f"({spread}), {ms(last.copy_saved_ms)} apart, while the copy alone takes {ms(last.concatenation_ms)} "
           f"(its bytes at STREAM's copy rate: {ms(last.copy_bound_ms)}): "
           f"{copy_verdict(last.copy_saved_ms, last.concatenation_ms)}.")))

# %%
cache_work = last.attention_ms + last.concatenation_ms
display(Markdown(register.decide(
    "cache_outweighs_shared_weights", f"At batch {big}, the cache's work (attention plus copying) costs more than "
    "the shared matrix products.", cache_work > last.matmuls_ms,
    predicted=f"cache bytes {last.kv_read_mb:.0f} MB against weights {last.weight_mb:.0f} MB",
    measured=f"cache work {ms(cache_work)}, matrix products {ms(last.matmuls_ms)}", evidence="batched_parts.csv",
    if_held=f"attention takes {ms(last.attention_ms)} and copying {ms(last.concatenation_ms)}, against "
            f"{ms(last.matmuls_ms)} for every matrix product: the private caches cost more than the "
            "products that share the weights.",
    if_not=f"attention ({ms(last.attention_ms)}) and copying ({ms(last.concatenation_ms)}) cost less than the "
           f"{big}-row matrix products ({ms(last.matmuls_ms)}; their bound, bytes or FLOPs: "
           f"{ms(last.weights_bound_ms)}): the products that share the weights cost more than the private caches.")))

# %%
display(Markdown(register.decide(
    "parts_add_up", "The parts timed alone add up to the batched step within 25 % at every batch.",
    all(abs(r.rest_ms) <= 0.25 * r.step_ms for r in parts.itertuples()), predicted="|rest| at most 25 % of the step",
    measured=", ".join(f"B={r.batch}: {r.rest_ms / r.step_ms:+.0%}" for r in parts.itertuples()), evidence="batched_parts.csv",
    if_held=f"what no part explains is at most {ms(parts.rest_ms.abs().max())} at any batch.",
    if_not=f"the rest is {', '.join(f'{ms(r.rest_ms)} at B={r.batch}' for r in parts.itertuples())}. A positive rest is "
           "work no part covers; a negative one means the parts cost more alone than inside the step.")))

# %%
ratio = last.attention_ms / last.cache_bytes_ms
display(Markdown(register.decide(
    "attention_at_its_bytes", f"At batch {big}, attention takes about its cache bytes over the streaming read "
    f"(within {regime.REGIME_SLACK:g}x).", claims.within(last.attention_ms, last.cache_bytes_ms, regime.REGIME_SLACK),
    predicted=f"{ms(last.cache_bytes_ms)} (bytes), {ms(last.attention_flops_ms)} (FLOPs)",
    measured=f"{ms(last.attention_ms)}", evidence="batched_parts.csv",
    if_held=f"attention over {big} caches ({last.kv_read_mb:.0f} MB) takes {ms(last.attention_ms)}, {ratio:.1f}x their "
            "bytes over the streaming read: a read of the caches.",
    if_not=f"attention over {big} caches ({last.kv_read_mb:.0f} MB) takes {ms(last.attention_ms)}, {ratio:.1f}x its "
           f"bytes over the streaming read ({ms(last.cache_bytes_ms)}); its FLOPs at the matrix rate take "
           f"{ms(last.attention_flops_ms)}. " + ("Faster than the memory streams: the caches fit in the CPU's own "
           "caches, or the streaming ceiling is low." if ratio < 1 else "Neither ceiling explains it."))))

# %% [markdown]
# ### Beside the Word Factory reference
#
# The reference ran a NumPy model of GPT-2 small's shape on a 2-core CPU, with the same batches at context
# 512 (`data/reference/wordfactory_part3_cpu.csv`). Its bytes column says what its step read: the weights
# once plus each user's cache, so the weights it counted are read off the batch-1 and largest-batch rows.

# %%
ref_machine = load_reference("wordfactory_part3_cpu").query("table == 'machine'").set_index("x").time_ms
per_user_mb = (wf.mb_read.iloc[-1] - wf.mb_read.iloc[0]) / (wf.batch.iloc[-1] - wf.batch.iloc[0])
head_mb = shape.lm_head_params * shape.bytes_per_param / 1e6
comparison = pd.DataFrame([
    dict(machine="reference", weights_counted_mb=wf.mb_read.iloc[0] - per_user_mb * wf.batch.iloc[0],
         cache_mb_per_user=per_user_mb, read_gb_s=ref_machine["memory_bandwidth_gb_s"],
         matmul_gflop_s=ref_machine["matmul_gflop_s"]),
    dict(machine="this run", weights_counted_mb=shape.weight_bytes / 1e6,
         cache_mb_per_user=shape.kv_bytes_per_token * batch_context / 1e6, read_gb_s=read / 1e9, matmul_gflop_s=flops / 1e9)])
ref_weights_mb, blocks_mb = comparison.weights_counted_mb.iloc[0], shape.weight_bytes / 1e6 - head_mb
head_left_out = abs(ref_weights_mb - blocks_mb) < abs(ref_weights_mb - shape.weight_bytes / 1e6)
results.table(comparison, "beside_word_factory")
comparison.round(1)

# %%
same_shape = model_name == "gpt2-small" and batch_context == ref_context and top in set(wf.batch)
held, texts = None, dict(if_held="", if_not="", predicted="", measured="")
if same_shape:
    ref_ms, mine = float(wf.set_index("batch").time_ms[top]), parts.set_index("batch").loc[top]
    like_ref = mine.static_step_ms - (mine.lm_head_ms if head_left_out else 0)
    head = (f"the LM head ({ms(mine.lm_head_ms)}), which the reference's {ref_weights_mb:.0f} MB of weights leave out "
            f"(ours: {blocks_mb:.0f} MB of blocks and {head_mb:.0f} MB of head)") if head_left_out else "no LM head (the reference counts one)"
    where = (f"The reference took **{ms(ref_ms)}** at batch {top}; this run's growing-cache step took {ms(mine.step_ms)} "
             f"({mine.step_ms / ref_ms:.1f}x). Removing the copying ({ms(mine.copy_saved_ms)}, growing minus preallocated) "
             f"and {head} leaves **{ms(like_ref)}**")
    held = like_ref > 0 and claims.within(like_ref, ref_ms, 1.5)
    texts = dict(predicted=f"{ms(ref_ms)} (reference)", measured=f"{ms(like_ref)}",
                 if_held=f"{where}, within 1.5x of the reference: the copy and the head are where the difference came from.",
                 if_not=f"{where}, {like_ref / ref_ms:.1f}x the reference. The rest is not separated here: the machines "
                        f"differ (the reference's streams {ref_machine['memory_bandwidth_gb_s']:.1f} GB/s, this one "
                        f"{read / 1e9:.1f} GB/s) and so does the code (NumPy against PyTorch's eager loop).")
display(Markdown(register.decide(
    "reference_gap_is_head_and_copy", f"At batch {top}, without the cache copying and the work the reference left out, "
    "this machine's step is within 1.5x of the reference's.", held, evidence="batched_parts.csv; wordfactory_part3_cpu.csv",
    if_not_measured=f"the reference ran GPT-2 small at context {ref_context} up to batch {wf.batch.max()}; this run "
                    f"({model_name}, context {batch_context}, batch {top}) is not the same shape.", **texts)))

# %% [markdown]
# **Takeaway: batching shares the weights' bytes across users, so throughput rises; every user's cache is
# still read, and copied if the cache grows by concatenation, so each user's gap rises too. Take the step
# apart before blaming any one part.**
#
# ## Multi-head against grouped-query attention: bytes of cache per token
#
# GPT-2 keeps a key and a value for each of its 12 heads in each of 12 layers. SmolLM2-135M has 9 query
# heads but only 3 key-value heads (grouped-query attention): each KV head serves three query heads. Both
# shapes come from the models' transformers configurations; the measured column divides a real cache's
# bytes by its length.

# %%
smol = load_model("smollm2-135m", dev, torch.float32)
rows = []
for lm in (fp32, smol):
    s = ModelShape.from_config(lm.config, name=lm.name)
    _, cache = phases.prefill(lm, torch.randint(0, lm.vocab_size, (1, 32), device=dev))
    rows.append(dict(model=lm.name, layers=s.layers, query_heads=s.heads, kv_heads=s.kv_heads, head_dim=s.head_dim,
                     predicted_fp32_bytes_per_token=s.kv_bytes_per_token,
                     measured_fp32_bytes_per_token=phases.cache_bytes(cache) / 32,
                     bf16_kib_per_token=s.with_dtype("bf16").kv_bytes_per_token / 1024,
                     kv_mb_per_1000_tokens_bf16=s.with_dtype("bf16").kv_bytes_per_token * 1000 / 1e6,
                     tokens_until_cache_equals_weights=s.weight_bytes / s.kv_bytes_per_token))
kv = pd.DataFrame(rows)
claims.invariant((kv.predicted_fp32_bytes_per_token == kv.measured_fp32_bytes_per_token).all(),
                 f"the cache's bytes per token differ from the shape's formula: {kv.to_dict('records')}")
results.table(kv, "kv_bytes_per_token")
kv.round(6)

# %%
g, sm = kv.iloc[0], kv.iloc[1]
display(Markdown(
    f"{g.model} stores **{g.bf16_kib_per_token:.1f} KiB** per token in bf16; SmolLM2 stores "
    f"**{sm.bf16_kib_per_token:.1f} KiB**, with {sm.layers / g.layers:.1f} times as many layers: with "
    f"{int(sm.kv_heads)} KV heads instead of {int(sm.query_heads)} its cache is {sm.kv_heads / sm.query_heads:.2f} of what "
    f"multi-head attention would need. In batched decode the caches outweigh the weights once the batch holds "
    f"{g.tokens_until_cache_equals_weights:,.0f} cached tokens in all for {g.model} and "
    f"{sm.tokens_until_cache_equals_weights:,.0f} for SmolLM2."))

# %% [markdown]
# ## The timer's own cost
#
# Every step above includes the harness: a clock read after the token's readback, and the readback itself.
# `lib.timing.overhead` times both with nothing around them; they must be small beside the shortest step
# this chapter timed.

# %%
cost = timing.overhead(dev)
shortest_ms = min(decode_runs.low_s.min(), static_runs.low_s.min()) * 1e3
harness_ms = (cost["clock"] + cost["readback"]) * 1e3
display(Markdown(register.decide(
    "timer_under_one_percent", "The harness adds under 1 % to the shortest step this chapter timed.",
    harness_ms / shortest_ms < 0.01, predicted="under 1 %", measured=f"{harness_ms / shortest_ms:.3%}",
    evidence=f"timing.overhead; shortest step {shortest_ms:.2f} ms",
    if_held=f"a clock read and a token readback cost {harness_ms * 1e3:.1f} us together, {harness_ms / shortest_ms:.3%} "
            f"of the shortest step ({shortest_ms:.2f} ms).",
    if_not=f"a clock read and a token readback cost {harness_ms * 1e3:.1f} us together, {harness_ms / shortest_ms:.1%} "
           f"of the shortest step ({shortest_ms:.2f} ms): the shortest steps read that much long.")))

# %%
results.table(register.frame(), "claims")
print(register.summary())
register.frame()[["claim", "verdict", "predicted", "measured"]]

# %% [markdown]
# ## What these numbers do not show
#
# * **An eager PyTorch loop.** Every step runs Python, transformers' cache bookkeeping and hundreds of small
#   operations; `torch.compile` or CUDA graphs would lower the launch cost, not measured here.
# * **One small model.** A 7B model's weights make its step memory-bound on almost any hardware (section 6).
# * **A copied cache in batched decode.** Every sequence's cache has the same contents; the bytes and shapes
#   are real, the text is not.
# * **Parts timed alone.** Each part of the batched step ran by itself, with the caches and the CPU to itself;
#   inside a step they share both, so their sum need not equal the step (the rest says by how much).
# * **A shared machine.** Ranges are across runs of this notebook in one process; other programs' load shows in
#   them.
#
# ## Takeaways
#
# * A decode step reads every weight and the whole cache to make one token.
# * Compare its time with two floors: bytes over what the memory streams, and bytes over what the model's
#   matrix-vector kernels reach; the gap between them is the kernels' to close.
# * A growing cache is copied at every step; a preallocated one is written in place. Measure which you have.
# * Batching shares weight bytes between users and raises throughput, while each user's cache still has to be
#   read: per-user latency rises.
# * Grouped-query attention shrinks the cache by the ratio of query heads to KV heads.
#
# ## Check yourself
#
# 1. A decode step reads 500 MB and takes 50 ms on a machine that streams 20 GB/s, whose matrix-vector products
#    reach 12 GB/s. Which regime is it in, and what would a better kernel gain?
#
# <details><summary>Answer</summary>
#
# Its streaming floor is 500 MB / 20 GB/s = 25 ms, so it runs at twice that floor: memory-bound by the rule,
# just. At the kernels' 12 GB/s the same bytes take about 42 ms, so the step is near what its kernels allow;
# a kernel that streamed like the read loop could take it toward 25 ms.
# </details>
#
# 2. Why can halving the bytes (fp32 to a 2-byte dtype) fail to speed up a decode step?
#
# <details><summary>Answer</summary>
#
# If the step is launch-bound, halving the bytes shortens a part that was not the bottleneck. If the device has no
# instructions for the dtype, a slow conversion kernel replaces the fast one and the step can even slow down.
# </details>
#
# 3. At batch 64 and context 512, how many bytes of GPT-2 small's fp32 cache does one step read, and how many does
#    a growing cache copy?
#
# <details><summary>Answer</summary>
#
# 64 x 512 tokens x 72 KiB per token (2 x 12 layers x 768 x 4 bytes) = 2.25 GiB read by attention, about five
# times the weights. A cache that grows by concatenation also reads and writes all of it once more: another
# 4.5 GiB of traffic.
# </details>
#
# ## Try it
#
# * Set `configs = [("fp32", 1), ("fp32", 2)]` on a machine with more cores, then `[("fp32", 4)]`: does the
#   step follow the streaming read or the GEMV as threads are added?
# * Raise `batches` to 128 and 256 until a row reports out of memory (or the step becomes compute-bound).
# * Replace `gpt2-small` with `smollm2-135m`: 30 thinner layers, more operations per step. Does the launch floor
#   grow, and does grouped-query attention shrink the batched step's attention part?
# * Set `batch_context = 64`: with small caches, which part of the batched step is left?
