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
# # 2. Prefill: how the first pass scales with the prompt
#
# Prefill runs every prompt position through every weight matrix in one pass. Its arithmetic grows with
# the prompt: about `2 x weights` FLOPs per token, plus attention, which grows with the square of the
# prompt. Its weight traffic does not grow at all: each weight is read once per pass. So the roofline
# predicts a flat **floor** for short prompts (reading the weights, or issuing the pass's operations), and
# a time that grows with the prompt once arithmetic takes over.
#
# This chapter times a prefill of GPT-2 small for prompts of 1 to 1,024 tokens, in two dtypes and (on a
# CPU) with one thread and with all of them. It reads the floor and the **knee** (where time per token stops
# falling) off the measured points, measures what a short pass spends its time on, and tests a prediction:
# computing logits for the last position only saves the fraction of FLOPs the LM head costs. Every
# conclusion is a named claim decided by this run's data (`lib.claims`), saved in `claims.csv`.

# %% tags=["parameters"]
quick = False
device = "auto"             # "auto", "cpu", "cuda", "cuda:N"
model_name = "gpt2-small"
prompts = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
dtypes = None               # None: fp32 and bf16 on a CPU, fp32 and fp16 on CUDA
threads = None              # None: 1 and all cores on a CPU (ignored on CUDA)
runs = 3                    # runs of the whole sweep, interleaved; a point is the median of its runs
warmup = 1                  # untimed passes before each point of the first run
budget_s = 20.0             # a point predicted to need longer than this (warm-up and one pass) is skipped
margin = 0.25               # how far above the floor, or above the lowest time per token, still counts as on it
matmul_rows = [1, 2, 4, 8, 16, 64]    # rows through the model's bare matrices (F.linear), for short prompts
logits_prompts = [16, 64, 256, 1024]  # last-position against all-position logits, first dtype, all threads
logits_runs = 3

# %%
from lib import params
from lib.models import KNOWN_MODELS

P = params.check(globals(), {
    "device": params.device(),
    "model_name": params.choice(KNOWN_MODELS, quick="tiny-gpt2"),
    "prompts": params.int_list(min=1, quick=[1, 2, 4, 16, 64]),
    "dtypes": params.dtype_list(allow_none=True),
    "threads": params.int_list(min=1, allow_none=True),
    "runs": params.integer(min=1, quick=2),
    "warmup": params.integer(min=0),
    "budget_s": params.number(above=0),
    "margin": params.number(min=0, max=4),
    "matmul_rows": params.int_list(min=1, quick=[1, 4, 16]),
    "logits_prompts": params.int_list(min=1, quick=[16, 64]),
    "logits_runs": params.integer(min=2, quick=2),
}, quick=quick, chapter="02_prefill_sweep")
prompts, matmul_rows, logits_prompts = sorted(set(prompts)), sorted(set(matmul_rows)), sorted(set(logits_prompts))
if len(prompts) < 2 or not set(matmul_rows) <= set(prompts) or len(matmul_rows) < 2:
    raise ValueError(f"prompts={prompts} needs two or more lengths, and matmul_rows={matmul_rows} two or more of "
                     "those lengths (the bare products are compared with the passes the sweep measures)")

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from IPython.display import Markdown, display

from lib import claims, machine, phases, regime, roofline, sweeps, timing
from lib.device import UnsupportedDtype, describe_environment, resolve_device, resolve_dtype
from lib.models import load_model, random_prompt
from lib.progress import progress
from lib.results import Results, load_reference
from lib.shapes import ModelShape

# %%
dev = resolve_device(device)
on_gpu = dev.type == "cuda"
ceilings = machine.load_ceilings(quick=quick)  # chapter 0's one measurement of this machine
dtype_names = dtypes or (["fp32", "fp16"] if on_gpu else ["fp32", "bf16"])
thread_counts = [0] if on_gpu else (threads or sorted({1, torch.get_num_threads()}))
models, not_run = {}, []
for dt in dtype_names:
    try:
        models[dt] = load_model(model_name, dev, resolve_dtype(dt, dev))
    except UnsupportedDtype as error:
        not_run.append(f"{dt}: {error}")
if not models:
    raise ValueError(f"none of the dtypes {dtype_names} runs on {dev}: " + "; ".join(not_run))
for prompt_len in prompts + logits_prompts:
    phases.check_fits(next(iter(models.values())), prompt_len)  # refuse a too-long prompt before any work
configs = [(dt, n) for dt in models for n in thread_counts]
hardware = {(dt, n): ceilings.hardware(dt, n or None) for dt, n in configs}  # says if chapter 0 lacks one
base_shape = ModelShape.from_config(next(iter(models.values())).config, name=model_name)
main_dt, most = next(iter(models)), max(thread_counts)
main = (main_dt, most)

# %%
results = Results("02_prefill_sweep", quick=quick, device=dev, model=model_name)
register = claims.Claims()


def label(dt: str, n: int) -> str:
    """How a configuration is named on the page: its dtype and, on a CPU, its threads."""
    return dt if on_gpu else f"{dt}, {n} thread{'s' if n > 1 else ''}"


def tokens(n: int) -> str:
    """'1 token', '16 tokens'."""
    return f"{int(n):,} token{'s' if int(n) != 1 else ''}"


pd.Series({**describe_environment(dev, None, model_name), "configurations": "; ".join(label(*c) for c in configs),
           "not run": "; ".join(not_run) or "none",
           "matrix instructions (chapter 0)": ", ".join(
               f"{dt}: {'hardware' if ceilings.hardware_support(dt) else 'none, a slow kernel'}" for dt in models),
           "CPU flags for 16-bit matrices": " ".join(sorted(machine.cpu_flags() & {
               "avx512_bf16", "amx_bf16", "avx512_fp16", "amx_fp16"})) or ("n/a" if on_gpu else "none")}
          ).to_frame("this run")

# %% [markdown] tags=["predict"]
# ## What arithmetic predicts
#
# Chapter 0 measured this machine's ceilings once for the whole book: the matrix rate (a large product on
# random data), the streaming read bandwidth, and the launch floor (a decode step of a GPT-2 so narrow its
# bytes and FLOPs are negligible). A prefill of `T` tokens cannot take less than any of three times: its
# FLOPs over the matrix rate, its bytes over the bandwidth, and the launch floor. A dtype without matrix
# instructions on this machine has a "matrix rate" that is a slow kernel's, and is labelled so.
#
# **Predict first:** with the numbers below, up to what prompt length should a prefill cost the same as a
# 1-token pass? And at what length should the time per token stop falling?

# %%
bounds = []
for dt, n in configs:
    shape = base_shape.with_dtype(dt)
    for p in prompts:
        bound = roofline.bound(hardware[(dt, n)], roofline.prefill_cost(shape, p, logits="last"))
        bounds.append(dict(dtype=dt, threads=n, prompt_tokens=p, compute_ms=bound.t_compute * 1e3,
                           memory_ms=bound.t_memory * 1e3, launch_ms=ceilings.launch_s(dt, n or None, shape.layers) * 1e3))
bounds = pd.DataFrame(bounds)
bounds["bound_ms"] = bounds[["compute_ms", "memory_ms", "launch_ms"]].max(axis=1)
predicted = {c: sweeps.floor_and_knee(g.prompt_tokens, g.bound_ms / 1e3, margin=margin)
             for c, g in bounds.groupby(["dtype", "threads"], sort=False)}
pd.DataFrame([{"configuration": label(dt, n), "matrix_rate_gflop_s": hardware[(dt, n)].flops / 1e9,
               "read_bandwidth_gb_s": hardware[(dt, n)].bandwidth / 1e9,
               "launch_floor_ms": ceilings.launch_s(dt, n or None, base_shape.layers) * 1e3,
               "hardware_matrix_instructions": ceilings.hardware_support(dt),
               "predicted_flat_until_tokens": predicted[(dt, n)].flat_until_tokens,
               "predicted_knee_tokens": predicted[(dt, n)].knee_tokens} for dt, n in configs]).round(2)

# %%
first = bounds[(bounds.dtype == main_dt) & (bounds.threads == most)].set_index("prompt_tokens")
limit_1 = first[["compute_ms", "memory_ms", "launch_ms"]].iloc[0].idxmax().removesuffix("_ms")
display(Markdown(
    f"Prediction ({label(*main)}): the bound at 1 token is **{first.bound_ms.iloc[0]:.1f} ms** (set by {limit_1}); "
    f"it stays within {margin:.0%} of that up to **{predicted[main].flat_until_tokens} tokens** and reaches "
    f"{first.bound_ms.iloc[-1]:,.0f} ms at {first.index[-1]:,} tokens. Its time per token comes within {margin:.0%} "
    f"of its lowest at **{predicted[main].knee_tokens} tokens**: past that, a longer prompt buys no cheaper tokens."))

# %% [markdown]
# ## The sweep
#
# Every configuration runs the whole list of prompts `runs` times, interleaved (all configurations once, then
# again), so that a slow spell of a shared machine does not land on one configuration only. The first run warms
# up every point and skips (and lists) a point predicted to exceed the budget; later runs time the points the
# first run kept. Each point is the median of its runs, with the lowest and highest
# (`lib.timing.median_range`). Logits are computed for the last position only, as a serving prefill needs. The
# prompts are random token ids and the weights seeded random ones: a pass's time depends on neither.

# %%
passes, kept = [], {}
for run in progress(range(1, runs + 1), desc="sweep runs"):
    for dt, n in configs:
        with sweeps.torch_threads(n or None):
            phases.prefill(models[dt], random_prompt(1, models[dt].vocab_size, device=dev))  # untimed: a switch
            table = sweeps.prefill_sweep(models[dt], kept.get((dt, n), prompts), repeats=1, label=label(dt, n),
                                         warmup=warmup if run == 1 else 0, budget_s=budget_s if run == 1 else None)
        kept.setdefault((dt, n), table.prompt_tokens[table.status == "ok"].tolist())  # the first run decides
        passes.append(table.assign(run=run, dtype=dt, threads=n, time_ms=table.median_s * 1e3))
passes = pd.concat(passes, ignore_index=True)[["run", "dtype", "threads", "prompt_tokens", "time_ms", "status"]]
results.table(passes, "prefill_runs")
skipped = passes[passes.status != "ok"]
print("skipped: " + ("none" if skipped.empty else "; ".join(
    f"{label(r.dtype, r.threads)} at {tokens(r.prompt_tokens)}" for r in skipped.itertuples())))

# %%
keys = ["dtype", "threads", "prompt_tokens"]
measured = passes[passes.status == "ok"]
sweep = (timing.median_range(measured, keys, ["time_ms"])
         .merge(measured.groupby(keys).size().rename("runs").reset_index(), on=keys).merge(bounds, on=keys))
sweep["tokens_per_s"] = sweep.prompt_tokens / sweep.time_ms * 1e3
sweep["achieved_gflop_s"] = [roofline.prefill_cost(base_shape, p, logits="last").flops / (t * 1e-3) / 1e9
                             for p, t in zip(sweep.prompt_tokens, sweep.time_ms)]
sweep["fraction_of_peak"] = [g / (hardware[(dt, n)].flops / 1e9)
                             for g, dt, n in zip(sweep.achieved_gflop_s, sweep.dtype, sweep.threads)]


def limits(row) -> regime.Regime:
    """The one regime rule; a dtype without matrix instructions is bound by a slow kernel, not compute."""
    compute = "compute" if ceilings.hardware_support(row.dtype) else "slow-kernel"
    return regime.regime(row.time_ms / 1e3, {compute: row.compute_ms / 1e3, "memory": row.memory_ms / 1e3,
                                             "launch": row.launch_ms / 1e3})


sweep["regime"] = [limits(r).label for r in sweep.itertuples()]
sweep["over_bound"] = sweep.time_ms / sweep.bound_ms
results.table(sweep, "prefill_sweep")
(sweep.assign(configuration=[label(d, n) for d, n in zip(sweep.dtype, sweep.threads)],
              ms=[f"{t:,.1f} ({timing.span(lo, hi, ',.1f')})"
                  for t, lo, hi in zip(sweep.time_ms, sweep.time_ms_low, sweep.time_ms_high)])
 .pivot(index="prompt_tokens", columns="configuration", values="ms").fillna("skipped"))

# %% [markdown]
# ## The floor and the knee, read from the data
#
# The **floor** is the measured 1-token pass (its median and range over runs). A prompt stays **on the floor**
# while its pass takes at most `1 + margin` times the floor's slowest run. The **knee** is the shortest prompt
# whose time per token is within `1 + margin` of the lowest time per token measured: where making the prompt
# longer stops making each token cheaper. Both are `lib.sweeps.floor_and_knee`, applied above to the bounds and
# here to the measurements; neither depends on fitting a line.

# %%
floor_rows = []
for (dt, n), g in sweep.groupby(["dtype", "threads"], sort=False):
    if g.prompt_tokens.nunique() < 2:
        continue
    f = sweeps.floor_and_knee(g.prompt_tokens, g.time_ms / 1e3, g.time_ms_low / 1e3, g.time_ms_high / 1e3,
                              margin=margin)
    last_point = g.iloc[-1]
    floor_rows.append(dict(
        dtype=dt, threads=n, floor_tokens=f.floor_tokens, floor_ms=f.floor_s * 1e3,
        floor_ms_low=f.floor_low_s * 1e3, floor_ms_high=f.floor_high_s * 1e3, flat_until_tokens=f.flat_until_tokens,
        knee_tokens=f.knee_tokens, knee_ms=f.knee_s * 1e3, knee_confirmed=f.knee_confirmed,
        best_ms_per_token=f.best_per_token_s * 1e3, best_at_tokens=f.best_tokens,
        marginal_ms_per_token=(last_point.time_ms - f.knee_s * 1e3) / (last_point.prompt_tokens - f.knee_tokens)
        if f.knee_confirmed else np.nan, longest_prompt_tokens=int(last_point.prompt_tokens), margin=margin,
        predicted_flat_until_tokens=predicted[(dt, n)].flat_until_tokens,
        predicted_knee_tokens=predicted[(dt, n)].knee_tokens))
floors = pd.DataFrame(floor_rows)
results.table(floors, "floor")
floors.round(2)

# %%
fm = floors[(floors.dtype == main_dt) & (floors.threads == most)].iloc[0]
flat, pflat = int(fm.flat_until_tokens), int(fm.predicted_flat_until_tokens)
floor_span = timing.span(fm.floor_ms_low, fm.floor_ms_high, ".1f", "ms")
display(Markdown(register.decide(
    "floor_flat_as_predicted",
    "A prefill costs what its 1-token pass costs up to the length where the bound leaves its floor (within 2x).",
    claims.within(flat, pflat, 2), predicted=f"flat to {pflat} tokens", measured=f"flat to {flat} tokens",
    evidence=f"{label(*main)}, margin {margin:.0%}, medians of {runs} runs",
    if_held=f"the time stays within {margin:.0%} of the 1-token pass ({floor_span}) up to **{tokens(flat)}**"
            + (", the longest prompt measured" if flat == fm.longest_prompt_tokens else "")
            + f"; the bound predicted {pflat}.",
    if_not=f"the time stays within {margin:.0%} of the 1-token pass ({floor_span}) only up to **{tokens(flat)}**, "
           f"while the bound stays flat to {pflat}: the pass grows with the prompt where no bound does, long before "
           f"the arithmetic should show (a later section measures what grows)." if flat < pflat else
           f"the time stays within {margin:.0%} of the 1-token pass ({floor_span}) up to **{tokens(flat)}**, beyond "
           f"the bound's {pflat}: a floor above every bound hides the per-token work for longer than predicted.")))

# %%
knee, pknee = int(fm.knee_tokens), int(fm.predicted_knee_tokens)
display(Markdown(register.decide(
    "knee_as_predicted",
    "Time per token stops falling where the bound's does (within 2x).",
    claims.within(knee, pknee, 2), predicted=f"{pknee} tokens", measured=f"{knee} tokens",
    evidence=f"{label(*main)}, margin {margin:.0%}; lowest {fm.best_ms_per_token:.2f} ms/token at "
             f"{int(fm.best_at_tokens)} tokens",
    if_held=f"time per token comes within {margin:.0%} of its lowest ({fm.best_ms_per_token:.2f} ms) at **{knee} "
            f"tokens**; the bound predicted {pknee}.",
    if_not=f"time per token comes within {margin:.0%} of its lowest ({fm.best_ms_per_token:.2f} ms) at **{knee} "
           f"tokens**, against the bound's {pknee}" + ("" if fm.knee_confirmed else
                                                       ", the longest prompt measured: it may lie beyond") + ".")))

# %%
fig, (ax_t, ax_p) = plt.subplots(1, 2, figsize=(12, 4.5))
for i, ((dt, n), g) in enumerate(sweep.groupby(["dtype", "threads"], sort=False)):
    ax_t.errorbar(g.prompt_tokens, g.time_ms, yerr=[g.time_ms - g.time_ms_low, g.time_ms_high - g.time_ms],
                  marker="o", ms=3, capsize=2, color=f"C{i}", label=label(dt, n))
    ax_t.plot(g.prompt_tokens, g.bound_ms, ":", color=f"C{i}")
    ax_p.plot(g.prompt_tokens, g.time_ms / g.prompt_tokens, "o-", ms=3, color=f"C{i}", label=label(dt, n))
ax_t.axhspan(fm.floor_ms_low, fm.floor_ms_high * (1 + margin), color="grey", alpha=0.2,
             label=f"on the floor ({label(*main)})")
ax_p.axvline(knee, color="grey", ls="--", label=f"knee, {label(*main)}")
for ax in (ax_t, ax_p):
    ax.set(xscale="log", yscale="log", xlabel="prompt tokens")
    ax.set_xscale("log", base=2)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7)
ax_t.set(ylabel="prefill time (ms): median and range of runs; dotted: bound",
         title=f"{label(*main)}: on the 1-token floor up to {flat} token{'s' if flat > 1 else ''} (bound: {pflat})")
ax_p.set(ylabel="time per prompt token (ms)", title=f"Time per token stops falling at {knee} tokens (bound: {pknee})")
fig.tight_layout()
results.figure(fig, "prefill_time")
plt.show()

# %% [markdown]
# **Takeaway: read the floor and the knee off your own measured points; where they differ from the bound's,
# something the bound does not count sets the time.**
#
# ## Why not a straight line?
#
# A common summary fits `t(T) = fixed + per_token x T` and calls `fixed` the floor and `fixed / per_token`
# the knee (`lib.sweeps.fit_floor`, weighted to relative error). A fit is only worth quoting with its
# residuals, and if its knee does not move with the points fitted. Here are its residuals over this sweep, and
# its knee when it is fitted to the prompts up to 64 tokens only.

# %%
g = sweep[(sweep.dtype == main_dt) & (sweep.threads == most)]
line = sweeps.fit_floor(g.prompt_tokens, g.time_ms / 1e3)
short = g[g.prompt_tokens <= 64]
short_knee = sweeps.fit_floor(short.prompt_tokens, short.time_ms / 1e3).knee_tokens if len(short) > 1 else np.nan
residual = line.predict(g.prompt_tokens) * 1e3 / g.time_ms - 1
fig, ax = plt.subplots(figsize=(8, 3.2))
ax.bar([str(p) for p in g.prompt_tokens], residual * 100, color=np.where(residual > 0, "C3", "C0"))
ax.axhline(0, color="black", lw=0.8)
ax.set(xlabel="prompt tokens", ylabel="fit minus measured (% of measured)",
       title=f"A straight line misses the measured times by up to {np.abs(residual).max():.0%} ({label(*main)})")
fig.tight_layout()
results.figure(fig, "line_residuals")
plt.show()

# %%
worst = float(np.abs(residual).max())
knees = [line.knee_tokens, short_knee]
knee_steady = all(np.isfinite(k) and k > 0 for k in knees) and claims.within(*knees, 1 + margin)
display(Markdown(register.decide(
    "straight_line_fits",
    "A straight line (fixed + per_token x T) describes every measured point within 10%.",
    claims.at_most(worst, 0.10), predicted="within 10%", measured=f"worst residual {worst:.0%}",
    evidence=f"{label(*main)}, {len(g)} prompt lengths, lib.sweeps.fit_floor",
    if_held=f"the line's worst point is off by {worst:.0%}; its fixed cost, {line.fixed_s * 1e3:.1f} ms, sits beside "
            f"the measured 1-token pass ({floor_span}).",
    if_not=f"the line misses a point by {worst:.0%}. Its 'fixed cost' is {line.fixed_s * 1e3:.1f} ms against a "
           f"measured 1-token pass of {floor_span}, and its knee is {line.knee_tokens:.0f} tokens fitted to every "
           f"point and {short_knee:.0f} fitted to the prompts up to 64" + (
               "." if knee_steady else ": a knee that moves with the points chosen is the fit's, not the machine's.")
           + " So this chapter reads the floor and the knee off the points themselves.")))

# %% [markdown] tags=["predict"]
# ## What a short pass spends its time on
#
# A pass of `T` tokens multiplies a `T`-row input by every weight matrix: with one row, each product is a
# matrix-vector product that reads the matrix once; with a few rows, a small matrix product. Time the model's
# bare matrices alone, with `F.linear` on random weights of the same shapes (`lib.machine.model_matmuls` and
# `lib.machine.matvec`): the blocks' matrices at `M` rows, plus the LM head at one row, as a last-position
# prefill runs it, in the first dtype with all threads. Whatever the prefill takes beyond them is the rest of
# the pass: attention, layer norms, activations and the Python that issues them.
#
# **Predict first:** if the floor were reading the weights, how would the bare products' time change from
# 1 to 16 rows?

# %%
size = machine.sizes(dev, quick)  # chapter 0's repeats and warm-up
weights = machine.model_matmuls(base_shape.with_dtype(main_dt), dev, resolve_dtype(main_dt, dev))
bare = []
with sweeps.torch_threads(most or None):
    head = machine.matvec(weights[-1:], 1, dev, size)
    for m in progress(matmul_rows, desc="bare matrices"):
        t = machine.matvec(weights[:-1], m, dev, size)
        bare.append(dict(dtype=main_dt, threads=most, prompt_tokens=m, matmul_ms=t.median_ms + head.median_ms,
                         matmul_ms_low=t.low_ms + head.low_ms, matmul_ms_high=t.high_ms + head.high_ms))
del weights
bare = pd.DataFrame(bare).merge(sweep[keys + ["time_ms", "time_ms_low", "time_ms_high", "launch_ms"]], on=keys)
bare["matmul_share"] = bare.matmul_ms / bare.time_ms
bare["rest_ms"] = bare.time_ms - bare.matmul_ms
bare["matmul_gflop_s"] = [roofline.prefill_cost(base_shape, m, logits="last").flops
                          - roofline.prefill_attention_flops(base_shape, m) for m in bare.prompt_tokens]
bare["matmul_gflop_s"] = bare.matmul_gflop_s / (bare.matmul_ms * 1e-3) / 1e9
results.table(bare, "bare_matmuls")
bare.round(3)

# %%
b = bare.set_index("prompt_tokens")
fig, ax = plt.subplots(figsize=(8, 4))
x = [str(m) for m in b.index]
ax.bar(x, b.matmul_ms, color="C0", label="bare matrix products (F.linear)")
ax.bar(x, b.rest_ms.clip(lower=0), bottom=b.matmul_ms, color="C1", label="rest of the pass")
ax.errorbar(x, b.time_ms, yerr=[b.time_ms - b.time_ms_low, b.time_ms_high - b.time_ms], fmt="k_", capsize=3,
            label="prefill: median and range of runs")
ax.set(xlabel="rows (prompt tokens)", ylabel="time (ms)",
       title=f"Bare matrix products are {b.matmul_share.min():.0%} to {b.matmul_share.max():.0%} of each "
             f"short pass ({label(*main)})")
ax.legend(fontsize=8)
fig.tight_layout()
results.figure(fig, "short_pass")
plt.show()

# %%
top = b.index.max()
rise_pass, rise_mm = b.time_ms[top] - b.time_ms.iloc[0], b.matmul_ms[top] - b.matmul_ms.iloc[0]
display(Markdown(register.decide(
    "short_passes_are_matmuls",
    f"At every length from {b.index.min()} to {top} tokens, the bare matrix products take at least half the pass.",
    claims.at_least(float(b.matmul_share.min()), 0.5), predicted="at least 50%",
    measured=f"{b.matmul_share.min():.0%} to {b.matmul_share.max():.0%}",
    evidence=f"{label(*main)}; rows {', '.join(map(str, b.index))}",
    if_held=f"the matrices alone take **{b.matmul_share.min():.0%} to {b.matmul_share.max():.0%}** of each pass.",
    if_not=f"the matrices alone take only {b.matmul_share.min():.0%} of the pass at "
           f"{tokens(b.matmul_share.idxmin())}: most of that pass is elsewhere.")))

# %%
display(Markdown(register.decide(
    "rise_is_matmuls",
    f"The pass's rise from {b.index.min()} to {top} tokens is the bare products' rise (within 1.5x).",
    rise_pass > 0 and rise_mm > 0 and claims.within(rise_mm, rise_pass, 1.5),
    predicted=f"{rise_mm:+.1f} ms (bare products)", measured=f"{rise_pass:+.1f} ms (the pass)",
    evidence=f"{label(*main)}, medians",
    if_held=f"from {b.index.min()} to {top} rows the bare products grow by {rise_mm:.1f} ms and the pass by "
            f"{rise_pass:.1f} ms.",
    if_not=f"the bare products grow by {rise_mm:+.1f} ms from {b.index.min()} to {top} rows and the pass by "
           f"{rise_pass:+.1f} ms: the matrices do not account for the pass's rise on this machine.")))
both = [c.verdict for c in register.rows[-2:]] == [claims.HELD] * 2
display(Markdown(
    (f"Both held, so the short-prompt curve is the matrix products' own curve, from matrix-vector products to "
     f"small matrix products: they run at {b.matmul_gflop_s.iloc[0]:.1f} GFLOP/s at M = {b.index.min()} and "
     f"{b.matmul_gflop_s[top]:.1f} at M = {top}, against chapter 0's {hardware[main].flops / 1e9:.0f} for a large "
     "product. The floor is that path, not a fixed cost.") if both else
    "The two claims above did not both hold, so this run does not show that the short-prompt curve is the "
    "matrix products' own: the table above says which part of the pass grows."))

# %%
rest_1 = float(b.rest_ms.iloc[0])
display(Markdown(register.decide(
    "rest_is_launch_floor",
    "What is not matrix product in a 1-token pass is about chapter 0's launch floor (within 2x).",
    None if rest_1 <= 0 else claims.within(rest_1, float(b.launch_ms.iloc[0]), 2),
    predicted=f"{b.launch_ms.iloc[0]:.1f} ms (launch floor)", measured=f"{rest_1:.1f} ms",
    evidence=f"{label(*main)}, 1-token pass minus bare products",
    if_held=f"the rest of a 1-token pass is {rest_1:.1f} ms, beside the {b.launch_ms.iloc[0]:.1f} ms it costs to "
            "issue a narrow GPT-2's operations: what is not matrix product is about the cost of issuing the pass.",
    if_not=f"the rest of a 1-token pass is {rest_1:.1f} ms, against a launch floor of {b.launch_ms.iloc[0]:.1f} ms: "
           "the part of the pass that is not matrix product is not the cost of issuing it.",
    if_not_measured=f"the bare products ({b.matmul_ms.iloc[0]:.1f} ms) take as long as the whole 1-token pass "
                    f"({b.time_ms.iloc[0]:.1f} ms) or longer, so this run leaves no rest to compare with the launch "
                    "floor.")))

# %% [markdown]
# **Takeaway: time a short pass's parts before you call its floor a fixed cost.**
#
# ## Arithmetic rate at the longest prompt
#
# Past the knee, a prefill should be limited by arithmetic. Achieved FLOP/s is the prefill's FLOP count
# (`lib.roofline.prefill_cost`) over the measured time; its fraction of peak is against chapter 0's matrix
# rate, the one measurement every chapter uses, so no two chapters disagree about it. Each point's regime is
# the one rule of `lib.regime`.

# %%
longest = sweep.groupby(["dtype", "threads"], sort=False).tail(1)
rates = longest[keys + ["time_ms", "time_ms_low", "time_ms_high", "tokens_per_s", "achieved_gflop_s",
                        "fraction_of_peak", "regime", "over_bound"]]
results.table(rates, "achieved_rate")
display(rates.round(3))
top_row = rates[(rates.dtype == main_dt) & (rates.threads == most)].iloc[0]
display(Markdown(register.decide(
    "longest_prompt_compute_bound",
    "At the longest prompt, the pass is compute-bound by the one regime rule (within 2x of FLOPs / matrix rate).",
    top_row.regime == "compute-bound", predicted="compute-bound", measured=top_row.regime,
    evidence=f"{label(*main)}, {int(top_row.prompt_tokens)} tokens, {top_row.over_bound:.2f}x its bound",
    if_held=f"at {int(top_row.prompt_tokens)} tokens the pass runs at **{top_row.achieved_gflop_s:.1f} GFLOP/s**, "
            f"**{top_row.fraction_of_peak:.0%}** of chapter 0's matrix rate, {top_row.tokens_per_s:,.0f} tokens per second.",
    if_not=f"at {int(top_row.prompt_tokens)} tokens the pass is {top_row.regime} ({top_row.over_bound:.2f}x its "
           f"largest bound), at {top_row.achieved_gflop_s:.1f} GFLOP/s, {top_row.fraction_of_peak:.0%} of chapter 0's "
           "matrix rate.")))

# %%
by_threads = sweep[sweep.dtype == main_dt].pivot(index="prompt_tokens", columns="threads", values="time_ms").dropna()
fewest = min(thread_counts)
if on_gpu or len(thread_counts) < 2 or by_threads.empty:
    display(Markdown(register.decide(
        "threads_speed_long_prompt", "More threads speed up a long prompt as chapter 0's matrix rates predict.",
        None, if_held="", if_not="", if_not_measured="one thread count only (a GPU, or `threads` set to one value).")))
else:
    common = int(by_threads.index.max())
    gain = float(by_threads.loc[common, fewest] / by_threads.loc[common, most])
    gain_predicted = hardware[main].flops / hardware[(main_dt, fewest)].flops
    display(Markdown(register.decide(
        "threads_speed_long_prompt",
        f"{most} threads speed up the longest prompt both ran as chapter 0's matrix rates predict (within 1.5x).",
        claims.within(gain, gain_predicted, 1.5), predicted=f"{gain_predicted:.2f}x", measured=f"{gain:.2f}x",
        evidence=f"{main_dt}, {tokens(common)}, {fewest} thread(s) against {most}",
        if_held=f"{most} threads make the {common}-token pass **{gain:.2f}x** as fast as {fewest}; the matrix "
                f"rates predicted {gain_predicted:.2f}x.",
        if_not=f"{most} threads make the {common}-token pass {gain:.2f}x as fast as {fewest}, while chapter 0's "
               f"matrix rates predicted {gain_predicted:.2f}x.")))

# %% [markdown] tags=["predict"]
# ## A 16-bit dtype: what limits it
#
# Half the bytes should halve a memory-bound pass; a compute-bound one speeds up only if the hardware has
# matrix instructions for the dtype. Chapter 0 read which it has (`ceilings.hardware_support`) and measured the
# matrix rate and the matrix-vector rate in each dtype.
#
# **Predict first:** from chapter 0's table above, should the 16-bit dtype beat fp32 at 1 token? At the
# longest prompt?

# %%
half = next((d for d in models if d != main_dt), None)
pair = sweep[sweep.threads == most].pivot(index="prompt_tokens", columns="dtype", values="time_ms").dropna()
if half is None or pair.empty:
    display(Markdown(register.decide("half_long_prompt", "A 16-bit dtype's long prefill follows its matrix rate.", None,
                                     if_held="", if_not="", if_not_measured="one dtype only in this run.")))
else:
    hw_half = ceilings.hardware_support(half)
    common = int(pair.index.max())
    speed = float(pair.loc[common, main_dt] / pair.loc[common, half])
    speed_predicted = hardware[(half, most)].flops / hardware[main].flops
    kind = "with hardware matrix instructions" if hw_half else "without matrix instructions: a slow kernel"
    half_regime = sweep.set_index(keys).regime[(half, most, common)]
    display(Markdown(register.decide(
        "half_long_prompt",
        f"At the longest prompt both ran, {half} is faster than {main_dt} by the ratio of chapter 0's matrix rates "
        "(within 1.5x).",
        claims.within(speed, speed_predicted, 1.5), predicted=f"{speed_predicted:.2f}x", measured=f"{speed:.2f}x",
        evidence=f"{tokens(common)}, {label(half, most)}: {half_regime}; {half} {kind}",
        if_held=f"at {tokens(common)} {half} runs **{speed:.2f}x** as fast as {main_dt}; the matrix rates predicted "
                f"{speed_predicted:.2f}x. Chapter 0 found {half} {kind}; by the regime rule this pass is {half_regime}.",
        if_not=f"at {tokens(common)} {half} runs {speed:.2f}x as fast as {main_dt}, while chapter 0's matrix rates "
               f"predicted {speed_predicted:.2f}x ({half} {kind}): the whole pass in {half} does not follow the large "
               f"product's rate. By the regime rule this pass is {half_regime}.")))

# %%
if half is not None and not pair.empty:
    small = int(pair.index.min())
    lo = sweep[(sweep.threads == most) & (sweep.prompt_tokens == small)].set_index("dtype")
    speed_1 = float(lo.time_ms[main_dt] / lo.time_ms[half])
    weights_ratio = base_shape.with_dtype(main_dt).weight_bytes / base_shape.with_dtype(half).weight_bytes
    mv = {d: ceilings.bandwidth(d, most or None, "matvec") for d in (main_dt, half)}
    speed_mv = weights_ratio * mv[half] / mv[main_dt]
    half_span = timing.span(lo.time_ms_low[half], lo.time_ms_high[half], ".1f", "ms")
    main_span = timing.span(lo.time_ms_low[main_dt], lo.time_ms_high[main_dt], ".1f", "ms")

# %%
if half is None or pair.empty:
    display(Markdown(register.decide("half_short_prompt", "A 16-bit dtype's short prefill follows its GEMV rate.", None,
                                     if_held="", if_not="", if_not_measured="one dtype only in this run.")))
else:
    display(Markdown(register.decide(
        "half_short_prompt",
        f"A {small}-token pass in {half} is as much faster than in {main_dt} as chapter 0's matrix-vector rates "
        "predict (within 1.5x).",
        claims.within(speed_1, speed_mv, 1.5), predicted=f"{speed_mv:.2f}x (bytes alone: {weights_ratio:.2f}x)",
        measured=f"{speed_1:.2f}x", evidence=f"{tokens(small)}, {label(half, most)}: {lo.regime[half]}; GEMV "
                                             f"{mv[half] / 1e9:.1f} GB/s in {half}, {mv[main_dt] / 1e9:.1f} in {main_dt}",
        if_held=f"the {small}-token pass takes {half_span} in {half} against {main_span} in {main_dt} "
                f"(**{speed_1:.2f}x**). Half the bytes alone would give {weights_ratio:.2f}x; chapter 0 measured the "
                f"model's matrix-vector products at {mv[half] / 1e9:.1f} GB/s in {half} and {mv[main_dt] / 1e9:.1f} GB/s "
                f"in {main_dt}, which predicted {speed_mv:.2f}x: fewer bytes help as much as the kernel reading them.",
        if_not=f"the {small}-token pass takes {half_span} in {half} against {main_span} in {main_dt} "
               f"({speed_1:.2f}x), while chapter 0's matrix-vector rates predicted {speed_mv:.2f}x and the bytes alone "
               f"{weights_ratio:.2f}x: neither explains the short pass in {half} on this machine.")))

# %% [markdown] tags=["predict"]
# ## Computing less of the output
#
# A prefill only needs the logits of the last position, to choose the first token. Computing them for every
# position runs the LM head (a `d_model x vocab` matrix, a large share of a small model's weights) `T` times
# for nothing. `lib.roofline.last_logits_saving` predicts the fraction of FLOPs saved; if time follows FLOPs,
# the time saved should match it. Each run times both kinds back to back (in alternating order) at every
# length, so the saving is taken within a run and its range over runs shows how much is noise.

# %%
lm = models[main_dt]
pairs = []
with sweeps.torch_threads(most or None):
    for run in progress(range(1, logits_runs + 1), desc="logits runs"):
        for p in logits_prompts:
            ids = random_prompt(p, lm.vocab_size, device=dev)
            row = dict(run=run, prompt_tokens=p)
            for kind in ("last", "all") if run % 2 else ("all", "last"):
                t = timing.measure(lambda: phases.prefill(lm, ids, logits=kind), dev, warmup=warmup if run == 1 else 0,
                                   repeats=1)
                row[f"{kind}_ms"] = t.median_ms
            pairs.append(dict(row, saving=1 - row["last_ms"] / row["all_ms"]))
pairs = pd.DataFrame(pairs)
results.table(pairs, "last_vs_all_runs");

# %%
saving = timing.median_range(pairs, "prompt_tokens", ["last_ms", "all_ms", "saving"])
saving["predicted_saving"] = [roofline.last_logits_saving(base_shape, p) for p in saving.prompt_tokens]
saving["prediction_within_runs"] = [claims.ranges_overlap(lo, hi, p, p) for lo, hi, p in
                                    zip(saving.saving_low, saving.saving_high, saving.predicted_saving)]
results.table(saving, "last_vs_all_logits")
saving.round(3)

# %%
facts = load_reference("ch09_facts").set_index("fact").value.astype(float)
missed = saving[~saving.prediction_within_runs]
spans = {r.prompt_tokens: timing.span(r.saving_low * 100, r.saving_high * 100, ".1f", "%")
         for r in saving.itertuples()}
display(Markdown(register.decide(
    "last_logits_saving_as_predicted",
    "At every length, the FLOP count's predicted saving lies within the measured saving's range over runs.",
    missed.empty, predicted=", ".join(f"{p:.1%}" for p in saving.predicted_saving),
    measured=", ".join(spans.values()), evidence=f"{label(*main)}, {logits_runs} runs at "
                                                 f"{', '.join(map(str, saving.prompt_tokens))} tokens",
    if_held="the measured saving's range over runs contains the prediction at every length: "
            + "; ".join(f"{p} tokens: {spans[p]} against {s:.1%}" for p, s in
                        zip(saving.prompt_tokens, saving.predicted_saving)) + ".",
    if_not="at " + ", ".join(f"{r.prompt_tokens} tokens ({spans[r.prompt_tokens]} against {r.predicted_saving:.1%})"
                             for r in missed.itertuples())
           + " the difference between measured and predicted is larger than the spread of this run's "
             f"{logits_runs} runs; this chapter does not measure why.")))
display(Markdown(
    f"The source chapter predicted {facts['last_position_logits_saving_predicted']:.0f} per cent for GPT-2 small and "
    f"measured {facts['last_position_logits_saving_cpu_lo']:.0f} to {facts['last_position_logits_saving_cpu_hi']:.0f} "
    f"per cent on a CPU, and {facts['last_position_logits_saving_gpu_fp32_512plus_lo']:.0f} to "
    f"{facts['last_position_logits_saving_gpu_fp32_512plus_hi']:.0f} per cent on its GPU in fp32 from 512 tokens."))

# %%
again = sweep[(sweep.dtype == main_dt) & (sweep.threads == most) & sweep.prompt_tokens.isin(saving.prompt_tokens)]
if again.empty:
    display(Markdown(register.decide("same_pass_reproduces", "The sweep's pass and this cell's agree within their "
                                     "ranges.", None, if_held="", if_not="",
                                     if_not_measured="no logits length is also in the sweep.")))
else:
    s_row = again.iloc[-1]
    c_row = saving.set_index("prompt_tokens").loc[s_row.prompt_tokens]
    sweep_span = timing.span(s_row.time_ms_low, s_row.time_ms_high, ",.0f", "ms")
    cell_span = timing.span(c_row.last_ms_low, c_row.last_ms_high, ",.0f", "ms")
    display(Markdown(register.decide(
        "same_pass_reproduces",
        "The same last-position pass takes the same time in the sweep and in this cell (ranges overlap).",
        claims.ranges_overlap(s_row.time_ms_low, s_row.time_ms_high, c_row.last_ms_low, c_row.last_ms_high),
        predicted=f"sweep: {sweep_span}", measured=f"this cell: {cell_span}",
        evidence=f"{label(*main)}, {int(s_row.prompt_tokens)} tokens",
        if_held=f"the {int(s_row.prompt_tokens)}-token pass took {sweep_span} in the sweep and {cell_span} here.",
        if_not=f"the {int(s_row.prompt_tokens)}-token pass took {sweep_span} in the sweep and {cell_span} here: the "
               "machine's speed moved between the two cells by more than either cell's spread, so compare the two "
               "kinds of logits only within one cell, as above.")))

# %% [markdown]
# **Takeaway: a predicted saving is confirmed only when it lies within the measured spread; where it does
# not, say so, and do not explain it without a measurement.**
#
# ## Beside the reference runs
#
# Two published runs: the source chapter's GPT-2 small prefill (last-position logits; one CPU thread, and a
# consumer GPU in fp32 and fp16, whose quoted bandwidth is printed below from `lib.roofline.HARDWARE`), and the
# Word Factory blog's NumPy GPT-2-shaped model on a 2-core cloud CPU. The same `floor_and_knee`, with the same
# margin, reads each one's floor and knee. Different machines should not agree; the comparison says where this
# machine sits among them.

# %%
reference_gpu = roofline.HARDWARE["Source chapter GPU"]
print(f"The source chapter's GPU: {reference_gpu.bandwidth / 1e9:.0f} GB/s of memory bandwidth, as quoted there.")
ref = load_reference("ch09_prefill_gpu_cpu")
wf = load_reference("wordfactory_part3_cpu").query("table == 'prefill'")
curves = [dict(source="this machine", device=dev.type, dtype=dt, threads=n,
               points=(g.prompt_tokens, g.time_ms, g.time_ms_low, g.time_ms_high))
          for (dt, n), g in sweep.groupby(["dtype", "threads"], sort=False) if dt == main_dt]
for device_type, dt, n, col in [("cuda", "fp32", 0, "gpu_fp32"), ("cuda", "fp16", 0, "gpu_fp16"),
                                ("cpu", "fp32", 1, "cpu_1thread")]:
    r = ref.dropna(subset=[f"{col}_ms_lo"])
    curves.append(dict(source="source chapter", device=device_type, dtype=dt, threads=n, points=(
        r.prompt_tokens, (r[f"{col}_ms_lo"] + r[f"{col}_ms_hi"]) / 2, r[f"{col}_ms_lo"], r[f"{col}_ms_hi"])))
curves.append(dict(source="Word Factory (NumPy)", device="cpu", dtype="", threads=2,
                   points=(wf.x.astype(int), wf.time_ms, wf.time_ms, wf.time_ms)))

# %%
beside = []
for c in curves:
    tok, ms, lo, hi = c["points"]
    f = sweeps.floor_and_knee(tok, ms / 1e3, lo / 1e3, hi / 1e3, margin=margin)
    beside.append(dict({k: v for k, v in c.items() if k != "points"}, prompts=", ".join(map(str, tok)),
                       floor_ms=f.floor_s * 1e3, flat_until_tokens=f.flat_until_tokens, knee_tokens=f.knee_tokens,
                       best_tokens_per_s=1 / f.best_per_token_s))
beside = pd.DataFrame(beside)
results.table(beside, "beside_reference")
beside.round(1)

# %%
fig, ax = plt.subplots(figsize=(8, 4.5))
for i, c in enumerate(curves):
    tok, ms = c["points"][:2]
    name = f"{c['source']}, {c['device']}" + (f", {c['dtype']}" if c["dtype"] else "") + (
        f", {c['threads']} thr." if c["threads"] else "")
    ax.plot(tok, tok / ms * 1e3, "o-" if c["source"] == "this machine" else "s--", ms=3, color=f"C{i}", label=name)
ax.set(xscale="log", yscale="log", xlabel="prompt tokens", ylabel="prompt tokens per second")
ax.set_xscale("log", base=2)
ours = beside[(beside.source == "this machine") & (beside.threads == most)].iloc[0]
gpu = beside[(beside.source == "source chapter") & (beside.device == "cuda") & (beside.dtype == "fp32")].iloc[0]
ax.set_title(f"On its floor up to {tokens(ours.flat_until_tokens)} here, {int(gpu.flat_until_tokens)} on the "
             f"reference GPU (fp32)")
ax.legend(fontsize=8)
ax.grid(True, alpha=0.3)
results.figure(fig, "beside_reference")
plt.show()

# %%
display(Markdown(register.decide(
    "floor_shorter_than_reference_gpu",
    "This machine leaves its 1-token floor at a shorter prompt than the reference GPU in fp32.",
    None if ours.flat_until_tokens == fm.longest_prompt_tokens else ours.flat_until_tokens < gpu.flat_until_tokens,
    predicted=f"under {int(gpu.flat_until_tokens)} tokens", measured=f"{int(ours.flat_until_tokens)} tokens",
    evidence=f"{label(*main)} against the source chapter's GPU, margin {margin:.0%}",
    if_not_measured=f"this run's time never left its floor up to its longest prompt, {tokens(fm.longest_prompt_tokens)}.",
    if_held=f"here the time leaves the 1-token floor after {tokens(ours.flat_until_tokens)}; the "
            f"reference GPU's {gpu.floor_ms:.1f} ms floor hid the prompt's work up to {int(gpu.flat_until_tokens)} "
            "tokens.",
    if_not=f"this machine stays on its floor up to {int(ours.flat_until_tokens)} tokens, at least as long as the "
           f"reference GPU ({int(gpu.flat_until_tokens)} tokens): its floor hides the per-token work as well.")))

# %% [markdown]
# ## What these numbers do not show
#
# * **One small model.** GPT-2 small has 124M parameters; a larger model's weights and matrices move the floor
#   and the knee (section 6).
# * **One sequence at a time.** A server batches prefills; here each pass carries one prompt.
# * **Random weights and random tokens.** Timing does not depend on them; nothing here says anything about
#   text. Attention is computed by PyTorch's default kernel, not a fused one.
# * **Bare products on random weights.** `F.linear` on matrices of the model's shapes is not the model's own
#   kernel call (GPT-2's layers call `addmm`), so the split between products and "the rest" is approximate.
# * **A shared machine.** The ranges include other programs' interference; the claims compare ratios within one
#   run, and say when the spread is as large as the effect.

# %%
results.table(register.frame(), "claims")
print(register.summary())
register.frame()[["claim", "verdict", "predicted", "measured"]]

# %% [markdown]
# ## Takeaways
#
# * A prefill's floor is its measured 1-token pass; where the time leaves it, and where time per token stops
#   falling, are read off the measured points, not off a fitted line.
# * Before calling a floor a fixed cost, time its parts: the bare matrix products at one row and at a few rows.
# * Fraction of peak means fraction of one measurement of the machine, the same in every chapter.
# * A 16-bit dtype helps only as much as the kernels that run it: check the hardware, then the data.
# * A predicted saving is confirmed only within the spread of repeated runs.
#
# ## Check yourself
#
# 1. A prefill takes 12 ms for 1 token and 12.5 ms for 256 tokens. Which regime is it in below 256 tokens?
#
# <details><summary>Answer</summary>
#
# A fixed-cost (launch) floor: a 256-fold change in arithmetic barely moved the time, so neither FLOPs nor
# bytes set it. This is the source chapter's GPU.
# </details>
#
# 2. A pass takes 40, 60 and 75 ms at 1, 2 and 4 tokens, and the bare matrix products at 1, 2 and 4 rows take
#    33, 53 and 68 ms. Is the 1-token pass a fixed cost?
#
# <details><summary>Answer</summary>
#
# No: the pass grows by 35 ms and the products by 35 ms, so the rise is the products' own, and the rest of the
# pass is a steady 7 ms. Going from one row (a matrix-vector product) to a few (a small matrix product) costs
# real time on that machine, although the bytes read do not change.
# </details>
#
# 3. Times per token of 40, 20, 6, 2.2, 1.8 and 1.7 ms at 1, 2, 8, 32, 128 and 512 tokens. With a margin of
#    25 per cent, where is the knee?
#
# <details><summary>Answer</summary>
#
# The lowest is 1.7 ms, and 1.25 x 1.7 = 2.125 ms; the first length at or under it is 128 tokens. (32 tokens,
# at 2.2 ms, is just outside.)
# </details>
#
# 4. The predicted saving is 29 per cent; three runs measured 21, 22 and 24 per cent. What may you conclude?
#
# <details><summary>Answer</summary>
#
# That the saving is smaller than predicted by more than this run's noise, and nothing about why: explaining it
# needs another measurement.
# </details>
#
# ## Try it
#
# * Set `threads = [1, 2, 4]` (on a machine with more cores, after running chapter 0 with the same counts): does
#   doubling the threads halve the time at the longest prompt? Does it move the floor?
# * Set `margin = 0.5`: which of the floor and the knee moves, and by how much?
# * Add 3, 6 and 12 to `matmul_rows` and to `prompts`: does the bare products' curve have steps?
# * On a GPU, compare the knee in fp32 and fp16: the source chapter's floor extended further in fp16.
