# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 2. Prefill: how the first pass scales with the prompt
#
# Prefill runs every prompt position through every weight matrix in one pass. Its arithmetic grows with
# the prompt: about `2 x weights` FLOPs per token, plus attention, which grows with the square of the
# prompt. Its weight traffic does not grow at all: each weight is read once per pass. So a long prompt
# should be limited by arithmetic, and a short one by something else: reading the weights, or the fixed
# cost of issuing a pass's hundreds of small operations.
#
# This chapter times a prefill of GPT-2 small for prompts of 1 to 1,024 tokens, in two dtypes and (on a
# CPU) with one thread and with all of them, finds the fixed-cost floor in the data, and tests a
# prediction: computing logits for the last position only saves the fraction of FLOPs the LM head costs.

# %% tags=["parameters"]
quick = False
device = "auto"             # "auto", "cpu", "cuda", "cuda:N"
model_name = "gpt2-small"
prompts = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
dtypes = None               # None: fp32 and bf16 on a CPU, fp32 and fp16 on CUDA
threads = None              # None: 1 and all cores on a CPU (ignored on CUDA)
repeats = 3                 # timed passes per point, after `warmup` untimed ones
warmup = 1
budget_s = 20.0             # a point predicted to need longer than this (warm-up and repeats) is skipped
logits_prompts = [16, 64, 256, 1024]  # last-position against all-position logits, fp32, all threads

# %%
import os

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from IPython.display import Markdown, display

from lib import roofline, sweeps
from lib.device import UnsupportedDtype, describe_environment, dtype_name, resolve_device, resolve_dtype
from lib.models import load_model
from lib.results import Results, load_reference

dev = resolve_device(device)
on_gpu = dev.type == "cuda"
if quick:
    model_name, prompts, repeats, logits_prompts = "tiny-gpt2", [1, 4, 16, 64], 2, [16, 64]
dtypes = dtypes or (["fp32", "fp16"] if on_gpu else ["fp32", "bf16"])
all_threads = torch.get_num_threads()
threads = [None] if on_gpu else (threads or sorted({1, all_threads}))
results = Results("02_prefill_sweep", quick=quick, device=dev, model=model_name,
                  params=dict(prompts=prompts, dtypes=dtypes, threads=threads, repeats=repeats,
                              warmup=warmup, budget_s=budget_s, logits_prompts=logits_prompts))
cpu_flags = set()
if not on_gpu and os.path.exists("/proc/cpuinfo"):
    cpu_flags = set(next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split())
native_bf16 = sorted(cpu_flags & {"avx512_bf16", "amx_bf16"})
pd.Series({**describe_environment(dev, None, model_name), "dtypes": dtypes,
           "threads measured": ["all" if t is None else t for t in threads],
           "CPU bf16 instructions": ", ".join(native_bf16) or ("n/a" if on_gpu else "none")}).to_frame("this run")

# %% [markdown]
# ## What arithmetic predicts
#
# Before timing anything, measure this machine's two ceilings with `lib.roofline.measure_machine`: the
# memory bandwidth (a large matrix-vector product, which reads every byte once) and the matrix FLOP rate
# (a large matrix product). A prefill of `T` tokens cannot take less than the larger of
# `FLOPs / FLOP rate` and `bytes / bandwidth`.

# %%
machines = {}
for dt in dtypes:
    try:
        torch_dt = resolve_dtype(dt, dev)
    except UnsupportedDtype as error:
        print(f"skipping {dt}: {error}")
        continue
    for n in threads:
        with sweeps.torch_threads(n):
            size = dict(matmul_n=512 if quick or (dt != "fp32" and not on_gpu) else None,
                        matvec_bytes=64 * 2**20 if quick else None)
            machines[(dt, n)] = roofline.measure_machine(dev, torch_dt, **{k: v for k, v in size.items() if v})
machine_table = pd.DataFrame([{"dtype": dt, "threads": n or all_threads, "GFLOP/s": hw.flops / 1e9,
                               "GB/s": hw.bandwidth / 1e9, "ridge FLOP/byte": hw.ridge}
                              for (dt, n), hw in machines.items()])
results.table(machine_table, "machine")
machine_table.round(1)

# %%
lm = load_model(model_name, dev, torch.float32)
base_shape = roofline.ModelShape.from_config(lm.config, name=model_name)
predicted = []
for (dt, n), hw in machines.items():
    shape = base_shape.with_dtype(dt)
    for p in prompts:
        bound = roofline.roofline(hw, roofline.prefill_cost(shape, p, logits="last"))
        predicted.append(dict(dtype=dt, threads=n or all_threads, prompt_tokens=p,
                              bound_s=bound.time, bound=bound.bound))
predicted = pd.DataFrame(predicted)
fp32_all = predicted[(predicted.dtype == "fp32") & (predicted.threads == all_threads)].set_index("prompt_tokens")
crossover = fp32_all.index[fp32_all.bound == "compute"].min()
display(Markdown(
    f"Prediction (fp32, {all_threads} threads): a prefill is memory-bound up to "
    f"{'every length measured' if pd.isna(crossover) else f'about {crossover} tokens'}"
    f"{'' if pd.isna(crossover) else ' and compute-bound from there'}; the bound at 1 token is "
    f"{fp32_all.bound_s.iloc[0] * 1e3:.1f} ms and at {prompts[-1]} tokens "
    f"{fp32_all.bound_s.iloc[-1] * 1e3:.0f} ms."))

# %% [markdown]
# ## The sweep
#
# Each point is the median of `repeats` passes after a warm-up, with logits for the last position only (what
# a serving prefill needs). The prompts are random token ids: a pass's time does not depend on which
# tokens, or on the weight values, which is why GPT-2 small with seeded random weights serves here. A
# point whose predicted time would exceed the budget is recorded as skipped, with its prediction.

# %%
rows = []
for (dt, n) in machines:
    lm_dt = load_model(model_name, dev, resolve_dtype(dt, dev))
    with sweeps.torch_threads(n):
        table = sweeps.prefill_sweep(lm_dt, prompts, repeats=repeats, warmup=warmup, budget_s=budget_s,
                                     label=f"{dt}, {n or all_threads} threads")
    table.insert(0, "dtype", dt)
    table.insert(1, "threads", n or all_threads)
    rows.append(table)
sweep = pd.concat(rows, ignore_index=True).merge(predicted, on=["dtype", "threads", "prompt_tokens"])
sweep["tokens_per_s"] = sweep.prompt_tokens / sweep.median_s
sweep["achieved_gflop_s"] = [
    roofline.prefill_cost(base_shape, p, logits="last").flops / t / 1e9
    for p, t in zip(sweep.prompt_tokens, sweep.median_s)]
sweep["measured_over_bound"] = sweep.median_s / sweep.bound_s
results.table(sweep, "prefill_sweep")
view = sweep.assign(ms=sweep.median_s * 1e3, low_ms=sweep.low_s * 1e3, high_ms=sweep.high_s * 1e3)
view.pivot_table(index="prompt_tokens", columns=["dtype", "threads"], values="ms").round(1)

# %%
fig, (ax_t, ax_r) = plt.subplots(1, 2, figsize=(12, 4.5))
for (dt, n), group in view.groupby(["dtype", "threads"]):
    ok = group.dropna(subset=["ms"])
    ax_t.errorbar(ok.prompt_tokens, ok.ms, yerr=[ok.ms - ok.low_ms, ok.high_ms - ok.ms], marker="o", ms=3,
                  capsize=2, label=f"{dt}, {n} thread{'s' if n > 1 else ''}")
    ax_r.plot(ok.prompt_tokens, ok.tokens_per_s, marker="o", ms=3, label=f"{dt}, {n} thr.")
for ax in (ax_t, ax_r):
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("prompt tokens")
    ax.grid(True, which="major", alpha=0.3)
ax_t.set_ylabel("prefill time (ms)")
ax_r.set_ylabel("prompt tokens per second")
fastest = sweep.dropna(subset=["median_s"]).groupby(["dtype", "threads"]).tokens_per_s.max()
main_rows = sweep[(sweep.dtype == "fp32") & (sweep.threads == max(sweep.threads))].dropna(subset=["median_s"])
title_fit = sweeps.fit_floor(main_rows.prompt_tokens, main_rows.median_s)
ax_t.set_title(f"{model_name} prefill on {dev.type.upper()}: a {title_fit.fixed_s * 1e3:.0f} ms floor, then "
               f"{title_fit.per_token_s * 1e3:.2f} ms per token (fp32)")
ax_r.set_title(f"Throughput rises to {fastest.max():,.0f} tokens/s, then levels off")
ax_t.legend(fontsize=8)
fig.tight_layout()
results.figure(fig, "prefill_time")
plt.show()

# %% [markdown]
# ## The fixed-cost floor
#
# Fit each configuration's times to `t(T) = fixed + per_token x T` (weighted to relative error, so the short
# prompts count as much as the long ones). `fixed` is the floor: what a pass costs before it does any
# per-token work (launching operations, reading weights, Python overhead). The **knee**, `fixed / per_token`,
# is the prompt length at which per-token work equals the floor: below it a pass is mostly floor, above it
# mostly work. Section 5 uses the knee to choose a chunk size.

# %%
floors = []
for (dt, n), group in sweep.dropna(subset=["median_s"]).groupby(["dtype", "threads"]):
    if group.prompt_tokens.nunique() < 2:
        continue
    fit = sweeps.fit_floor(group.prompt_tokens, group.median_s)
    floors.append(dict(dtype=dt, threads=n, fixed_ms=fit.fixed_s * 1e3, per_token_ms=fit.per_token_s * 1e3,
                       knee_tokens=fit.knee_tokens, fit_max_rel_error=fit.max_relative_error,
                       points=len(group), longest_prompt=group.prompt_tokens.max()))
floors = pd.DataFrame(floors)
results.table(floors, "floor")
display(floors.round(3))
main = floors[(floors.dtype == "fp32") & (floors.threads == floors.threads.max())].iloc[0]
gpu_ref = load_reference("ch09_prefill_gpu_cpu").assign(mid=lambda d: (d.gpu_fp32_ms_lo + d.gpu_fp32_ms_hi) / 2)
ref_flat = int(gpu_ref[gpu_ref.mid <= 1.3 * gpu_ref.mid.iloc[0]].prompt_tokens.max())
display(Markdown(
    f"In fp32 with {int(main.threads)} threads the floor is **{main.fixed_ms:.1f} ms** and each prompt token adds "
    f"**{main.per_token_ms:.2f} ms**, so the time leaves the floor at about **{main.knee_tokens:.0f} tokens** "
    f"(the fit's worst point is off by {main.fit_max_rel_error:.0%}). The reference GPU's fp32 prefill stayed within "
    f"30 per cent of its 1-token time up to **{ref_flat} tokens**: a floor of many milliseconds and a tiny per-token "
    f"cost put a GPU's knee at hundreds of tokens, where a CPU's slower arithmetic shows much sooner."))

# %% [markdown]
# **Takeaway: a prefill costs a fixed floor plus a cost per token; the prompt length where the two are equal
# tells you when a longer prompt starts to cost more.**
#
# ## Arithmetic rate and the measured ceiling
#
# Achieved FLOP/s is the prefill's FLOP count (`lib.roofline.prefill_cost`) divided by the measured time;
# compared with the matrix-product rate measured above, it says how much of the machine's arithmetic the
# model's pass uses.

# %%
longest = sweep.dropna(subset=["median_s"]).sort_values("prompt_tokens").groupby(["dtype", "threads"]).tail(1)
rate = longest.assign(machine_gflop_s=[machines[(d, None if on_gpu else n)].flops / 1e9
                                        for d, n in zip(longest.dtype, longest.threads)])
rate["fraction_of_machine"] = rate.achieved_gflop_s / rate.machine_gflop_s
rate = rate[["dtype", "threads", "prompt_tokens", "median_s", "tokens_per_s", "achieved_gflop_s",
             "machine_gflop_s", "fraction_of_machine", "measured_over_bound"]]
results.table(rate, "achieved_rate")
display(rate.round(3))
top = rate[(rate.dtype == "fp32") & (rate.threads == rate.threads.max())].iloc[0]
slow = rate.set_index(["dtype", "threads"])
ratio_16bit = [(d, slow.loc[(d, int(top.threads))]) for d in dtypes if d != "fp32" and (d, int(top.threads)) in slow.index]
text = (f"At {int(top.prompt_tokens)} tokens, fp32 with {int(top.threads)} threads prefills **{top.tokens_per_s:,.0f} "
        f"tokens per second** at **{top.achieved_gflop_s:.1f} GFLOP/s**, {top.fraction_of_machine:.0%} of the "
        f"matrix rate measured on this machine, and {top.measured_over_bound:.1f} times its roofline bound.")
for d, row in ratio_16bit:
    text += (f" In {d} the longest prompt measured ({int(row.prompt_tokens)} tokens) ran at {row.achieved_gflop_s:.2f} "
             f"GFLOP/s.")
if not on_gpu and "bf16" in dtypes and not native_bf16:
    text += (" This CPU has no bf16 arithmetic instructions, so bf16 products run through a slow generic path: "
             "halving the bytes does not help a phase bound by arithmetic, and here it makes it much slower.")
display(Markdown(text))

# %% [markdown]
# ## Computing less of the output
#
# A prefill only needs the logits of the last position, to choose the first token. Computing them for every
# position runs the LM head (a `d_model x vocab` matrix, a large share of a small model's weights) `T` times
# for nothing. `lib.roofline.last_logits_saving` predicts the fraction of FLOPs saved; where arithmetic is the
# cost, the time saved should match it.

# %%
logits_rows = []
lm_fp32 = load_model(model_name, dev, torch.float32)
for p in logits_prompts:
    row = dict(prompt_tokens=p, predicted_saving=roofline.last_logits_saving(base_shape, p))
    for kind in ("last", "all"):
        t = sweeps.prefill_sweep(lm_fp32, [p], logits=kind, repeats=repeats, warmup=warmup).iloc[0]
        row[f"{kind}_ms"] = t.median_s * 1e3
        row[f"{kind}_low_ms"], row[f"{kind}_high_ms"] = t.low_s * 1e3, t.high_s * 1e3
    row["measured_saving"] = 1 - row["last_ms"] / row["all_ms"]
    row["measured_over_predicted"] = row["measured_saving"] / row["predicted_saving"]
    logits_rows.append(row)
logits_table = pd.DataFrame(logits_rows)
results.table(logits_table, "last_vs_all_logits")
display(logits_table[["prompt_tokens", "last_ms", "all_ms", "predicted_saving", "measured_saving",
                      "measured_over_predicted"]].round(3))
long = logits_table.iloc[-1]
display(Markdown(
    f"Predicted saving at {int(long.prompt_tokens)} tokens: **{long.predicted_saving:.0%}**; measured: "
    f"**{long.measured_saving:.0%}** ({long.last_ms:.0f} ms against {long.all_ms:.0f} ms). The source chapter "
    f"predicted 31 per cent and measured 25 to 31 per cent on a CPU. Where the floor dominates (short "
    f"prompts, or a GPU below its knee) the saving shrinks, because the LM head's arithmetic is not "
    f"what the pass is waiting for."))
if long.last_ms > 3 * main.fixed_ms:  # arithmetic, not the floor, is most of this pass: the saving must show
    assert long.measured_saving > 0, "skipping T-1 rows of the LM head cannot make a long prefill slower"
else:
    print(f"The longest pass ({long.last_ms:.1f} ms) is within 3x of the floor ({main.fixed_ms:.1f} ms): "
          "the saving is not expected to show above the noise.")

# %% [markdown]
# ## Beside the reference runs
#
# Two published runs: the source chapter's GPT-2 small prefill (last-position logits, one CPU thread, and a
# consumer GPU with about 303 GB/s), and the Word Factory blog's NumPy GPT-2-shaped model on a 2-core cloud
# CPU. Different machines should not agree; the comparison says how this machine sits among them.

# %%
ref = load_reference("ch09_prefill_gpu_cpu")
wf = load_reference("wordfactory_part3_cpu")
wf = wf[wf.table == "prefill"].assign(prompt_tokens=lambda d: d.x.astype(int))[["prompt_tokens", "time_ms"]]
ours = view[(view.dtype == "fp32")].pivot_table(index="prompt_tokens", columns="threads", values="ms")
ours.columns = [f"this machine fp32, {c} thread{'s' if c > 1 else ''} (ms)" for c in ours.columns]
beside = (ours.reset_index()
          .merge(ref.assign(ref_cpu_1thread=lambda d: d.cpu_1thread_ms_lo.map("{:.0f}".format) + "-" +
                            d.cpu_1thread_ms_hi.map("{:.0f}".format),
                            ref_gpu_fp32=lambda d: d.gpu_fp32_ms_lo.astype(str) + "-" + d.gpu_fp32_ms_hi.astype(str))
                 [["prompt_tokens", "ref_cpu_1thread", "ref_gpu_fp32"]], on="prompt_tokens", how="outer")
          .merge(wf.rename(columns={"time_ms": "word_factory_2core_numpy_ms"}), on="prompt_tokens", how="outer")
          .sort_values("prompt_tokens"))
beside = beside.replace("nan-nan", np.nan)
results.table(beside, "beside_reference")
display(beside.round(1))

fig, ax = plt.subplots(figsize=(8, 4.5))
for col in ours.columns:
    ax.plot(ours.index, ours.index / ours[col] * 1e3, "o-", ms=3, label=col.replace(" (ms)", ""))
r = ref.dropna(subset=["cpu_1thread_ms_lo"])
ax.plot(r.prompt_tokens, r.prompt_tokens / ((r.cpu_1thread_ms_lo + r.cpu_1thread_ms_hi) / 2) * 1e3, "s--",
        label="reference: source chapter, CPU 1 thread")
ax.plot(ref.prompt_tokens, ref.prompt_tokens / ((ref.gpu_fp32_ms_lo + ref.gpu_fp32_ms_hi) / 2) * 1e3, "^--",
        label="reference: source chapter, GPU fp32")
ax.plot(wf.prompt_tokens, wf.prompt_tokens / wf.time_ms * 1e3, "d--", label="reference: Word Factory, 2-core NumPy")
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.set_xlabel("prompt tokens")
ax.set_ylabel("prompt tokens per second")
ax.set_title("A GPU's floor hides short prompts; on CPUs the work shows almost at once")
ax.legend(fontsize=8)
ax.grid(True, alpha=0.3)
results.figure(fig, "beside_reference")
plt.show()

# %% [markdown]
# ## What these numbers do not show
#
# * **One small model.** GPT-2 small's 124M parameters make a short pass cheap enough that fixed costs
#   show; a larger model's weights push the knee and the compute-bound region elsewhere (section 6).
# * **One sequence at a time.** A server batches prefills; here each pass carries one prompt.
# * **Random weights and random tokens.** Timing does not depend on them; nothing here says anything about
#   text. Attention is computed by PyTorch's default kernel, not a fused one.
# * **A shared machine.** This run's ranges include other programs' interference; compare ratios from one run,
#   not absolute times across runs.
#
# ## Takeaways
#
# * Prefill time is a fixed floor plus a cost per prompt token; find both from your own data.
# * Past the floor a prefill is limited by arithmetic, so its throughput in tokens per second levels off at a
#   fraction of the machine's matrix rate.
# * Logits for the last position only save roughly the LM head's share of the FLOPs, once arithmetic is what the
#   pass waits for.
# * A dtype is only faster if the hardware has arithmetic for it: fewer bytes do not speed up a compute-bound pass.
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
# 2. Why does the saving from last-position logits approach the LM head's share of the weights, and why is it
#    smaller for short prompts on a GPU?
#
# <details><summary>Answer</summary>
#
# Skipping `T - 1` rows of the LM head removes that share of the matrix FLOPs; when time follows FLOPs, time
# falls by the same fraction. Below the floor's knee the time does not follow FLOPs, so removing FLOPs saves
# little.
# </details>
#
# 3. Your fit gives `fixed = 30 ms` and `per_token = 0.5 ms`. At what prompt length does a prefill cost twice its
#    floor?
#
# <details><summary>Answer</summary>
#
# At the knee, `30 / 0.5 = 60` tokens: 30 ms of floor plus 30 ms of work.
# </details>
#
# ## Try it
#
# * Set `threads = [1, 2, 4]` (on a machine with more cores): does doubling the threads halve the per-token
#   cost? What happens to the floor?
# * Raise `budget_s` and let bf16 run to 1,024 tokens. On a CPU with `avx512_bf16` or AMX, bf16 should beat fp32.
# * On a GPU, compare the knee in fp32 and fp16: the source chapter's floor extended further in fp16.
