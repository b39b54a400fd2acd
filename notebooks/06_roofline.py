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
# # 6. Roofline: which ceiling is a pass under?
#
# A pass through a model does arithmetic and moves bytes, and a chip has a ceiling for each: a peak FLOP rate and a
# memory bandwidth. A pass cannot take less than `FLOPs / FLOP rate`, nor less than `bytes / bandwidth`; the larger is
# its **roofline bound**. Its **arithmetic intensity**, FLOPs over bytes, says which is larger: below the chip's
# [**ridge point**](glossary.md#balance-point) (FLOP rate / bandwidth) the pass waits on memory, above it on arithmetic.
#
# This chapter reproduces the course's roofline tables for Llama-3-8B on an H100 and answers its "try it"
# questions. It then draws this machine's roofline from chapter 0's ceilings and places on it every pass chapters 2
# and 3 timed, each labelled by the one regime rule (`lib.regime`). It measures where GPT-2's decode step leaves
# its floor as the model grows, and ends with two designs this machine cannot run: a mixture of experts and tensor
# parallelism.

# %% [markdown]
# **After this chapter you can**
#
# * place a pass on this machine's roofline from its FLOPs and bytes, and say which ceiling it is under;
# * use the balance point to say how many tokens a pass needs before its arithmetic, not its bytes, sets its time;
# * say why batching moves decode toward the balance point, and what stops it;
# * find the model size at which a decode step's weights overtake its floor (its dispatch);
# * do the same arithmetic for another machine, a mixture-of-experts model and tensor parallelism.

# %% tags=["parameters"]
quick = False
device = "auto"            # "auto", "cpu", "cuda", "cuda:N"
dtype = None               # the measured points' dtype; None: fp32 on a CPU, fp16 on a GPU
threads = None             # the measured points' thread count; None: all cores
bandwidth_kernel = "memory"  # chapter 0's rate drawn as the memory roof: "memory" (its streaming read), "copy", "triad"
course_gpu = "H100 SXM"    # the course's GPU, from lib.roofline.HARDWARE
other_gpu = "A100 80GB"    # the try-it GPU
big_model = "Llama-3-70B"  # a preset of lib.shapes
batch_contexts = [128, 2048, 8192, 32768]  # decode contexts for the batching question
sizes = ["tiny-gpt2", "gpt2-12x128", "gpt2-12x256", "gpt2-12x384", "gpt2-12x512",  # GPT-2 at these sizes
         "gpt2-small", "gpt2-medium", "gpt2-large", "gpt2-xl"]                     # (lib.sizes.SIZES)
size_contexts = [16, 512]  # the two contexts each size decodes from
size_steps = 4             # greedy steps per run (a run is their median)
size_runs = 9              # runs per size at most; the budget gives a costly size fewer (three at least)
size_prompts = [1, 2, 4, 8, 16, 32, 64]  # prefill lengths for each size, fp32
size_budget_s = 100        # the sweep's predicted time at most, building the weights included
reference_model = "gpt2-small"  # the model whose chapter-0 kernels price the other sizes
moe_experts = 8            # the example mixture of experts: experts per layer (an assumption, not a measured model)
moe_active = 2             # experts each token is routed to
moe_batches = [1, 2, 4, 8, 16, 32, 64]  # batches the mixture's decode step is priced at
tp_devices = [1, 2, 4, 8]  # devices the weights are split over (tensor parallelism)

# %%
import contextlib
import gc
import io
import json
import math
import time

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from lib import (claims, costmodel, course, machine, params, phases, profiling, prose, regime, roofline, shapes, sweeps,
                 timing)
from lib import sizes as gpt2_sizes
from lib.claims import Spread
from lib.device import describe_environment, resolve_dtype, use_threads
from lib.progress import progress
from lib.paths import REPO_ROOT, output_root
from lib.prose import show
from lib.results import Results, load_reference, load_table

table_gpus = [name for name, hw in roofline.HARDWARE.items() if not math.isnan(hw.flops)]
P = params.check(globals(), {
    "device": params.device(), "dtype": params.dtype(allow_none=True),
    "threads": params.threads(many=False),
    "bandwidth_kernel": params.choice(["memory", "read", "copy", "triad"]),
    "course_gpu": params.choice(table_gpus), "other_gpu": params.choice(table_gpus),
    "big_model": params.choice(shapes.PRESETS),
    "batch_contexts": params.int_list(min=1, max=1 << 20, min_items=2, ascending=True),
    "sizes": params.listof(params.choice(list(gpt2_sizes.SIZES)), quick=["tiny-gpt2", "gpt2-12x128", "gpt2-12x256"]),
    "size_contexts": params.int_list(min=1, max=960, min_items=2, max_items=2, ascending=True, quick=[16, 64]),
    "size_steps": params.integer(min=2, max=60, quick=3),
    "size_runs": params.integer(min=3, max=30, quick=3),
    "size_prompts": params.int_list(min=1, max=1000, min_items=2, ascending=True, quick=[1, 4, 16]),
    "size_budget_s": params.number(min=1, max=3600, quick=30),
    "reference_model": params.choice(["gpt2-small", "tiny-gpt2"], quick="tiny-gpt2"),
    "moe_experts": params.integer(min=2, max=256), "moe_active": params.integer(min=1, max=256),
    "moe_batches": params.int_list(min=1, max=4096, min_items=2, ascending=True),
    "tp_devices": params.int_list(min=1, max=64, min_items=2, ascending=True),
}, quick=quick, chapter="06_roofline")
if moe_active > moe_experts:
    raise ValueError(f"a token is routed to at most all the experts: moe_active ({moe_active}) must be at most "
                     f"moe_experts ({moe_experts})")

# %%
points_dtype = dtype or ("fp16" if device.type == "cuda" else "fp32")
results = Results("06_roofline", params=P, quick=quick)
ceilings = machine.load_ceilings(device, quick=quick)  # chapter 0's table for this device
register = claims.Claims()
pd.Series({**describe_environment(device), "dtype of the measured points": points_dtype, "course GPU": course_gpu,
           "try-it model": big_model})

# %% [markdown]
# ## What this run found

# %%
opening = prose.Opening()

# %% [markdown]
# ## The course's tables, reproduced
#
# The course prints a roofline table for Llama-3-8B in BF16 on one H100 SXM: prefills, batch-1 decode steps and one
# request's split. `lib.course.course_tables` prints the same from the model's published shape and the chip's
# datasheet peaks (matmul weights are the blocks plus the LM head; prefill attention is halved by the causal mask).

# %%
gpu, other = roofline.HARDWARE[course_gpu], roofline.HARDWARE[other_gpu]
llama8, big = shapes.LLAMA3_8B, shapes.PRESETS[big_model]
results.table(pd.DataFrame(course.prefill_rows(llama8, gpu)), "course_prefill")
results.table(pd.DataFrame(course.decode_rows(llama8, gpu)), "course_decode")
printed = course.course_tables(llama8, gpu)
print(printed)
reference = [line for line in (REPO_ROOT / "data/reference/course_roofline_llama3_8b_h100.txt").read_text()
             .splitlines() if not line.startswith("#")]
if gpu.name == "H100 SXM":
    claims.invariant(printed.splitlines() == reference, "the calculator no longer reproduces the course's table")
    display(Markdown(f"All **{len(reference)}** lines match the course's printout, character for character."))
else:
    display(Markdown(f"The course printed its table for the H100 SXM; this one is for the {gpu.name}."))

# %% [markdown]
# A request's decode is one step per output token, each reading every weight. At batch 1 it owns the request's
# time, although its arithmetic is a fraction of the prefill's.
#
# ### Where prefill turns compute-bound, and why its throughput then falls
#
# A weight matmul over `S` rows does `2 S` FLOPs per weight and reads each weight once. With two bytes a weight its
# intensity is about `S`. Prefill should leave the memory roof at a prompt of about as many tokens as the ridge
# point's FLOP per byte. Past it, speed is the FLOP rate over the FLOPs per token, and that cost grows: every token
# also attends to the tokens before it (`roofline.prefill_attention_flops`).

# %%
crossover = roofline.prefill_crossover(llama8, gpu)
rows = []
for p in course.COURSE_PROMPTS:
    cost = roofline.prefill_cost(llama8, p)
    rows.append(dict(prompt_tokens=p, gflop=cost.flops / 1e9, gflop_per_token=cost.flops / p / 1e9,
                     attention_share=roofline.prefill_attention_flops(llama8, p) / cost.flops,
                     tokens_per_s=roofline.bound(gpu, cost).tokens_per_s))
attention = pd.DataFrame(rows)
results.table(attention, "prefill_attention_share")
claims.invariant(abs(crossover - gpu.ridge) / gpu.ridge < 0.05, "prefill should leave the memory roof near the ridge")
claims.invariant(attention.attention_share.is_monotonic_increasing, "attention's share must grow with the prompt")
prose.shown(attention.round({"gflop": 0, "gflop_per_token": 2, "attention_share": 3, "tokens_per_s": 0}))

# %%
peak, last = attention.loc[attention.tokens_per_s.idxmax()], attention.iloc[-1]
display(Markdown(
    f"The ridge of the {gpu.name} is **{gpu.ridge:.0f} FLOP/byte**; the shortest compute-bound prefill is "
    f"**{crossover} tokens**. Throughput peaks in the table at {int(peak.prompt_tokens):,} tokens "
    f"({peak.tokens_per_s:,.0f} tokens/s), where attention is {peak.attention_share:.1%} of the FLOPs. At "
    f"{int(last.prompt_tokens):,} tokens attention is **{last.attention_share:.0%}**, a token costs "
    f"{last.gflop_per_token:.1f} GFLOP instead of {peak.gflop_per_token:.1f}, and the rate falls to "
    f"**{last.tokens_per_s:,.0f} tokens/s**, {last.tokens_per_s / peak.tokens_per_s:.0%} of the peak: the ratio of "
    f"the two per-token costs."))

# %%
x = np.logspace(-1, 5, 300)
pre = [roofline.prefill_cost(llama8, p) for p in course.COURSE_PROMPTS]
dec = [roofline.decode_cost(llama8, 1, c) for c in course.COURSE_CONTEXTS]
fig, ax = plt.subplots(figsize=(7, 4.8))
for hw, style in ((gpu, "-"), (other, "--")):
    ax.plot(x, [roofline.attainable_flops(hw, i) / 1e12 for i in x], style, color="k", lw=1.2,
            label=f"{hw.name} roof (ridge {hw.ridge:.0f} FLOP/B)")
for costs, marker, color, label in ((pre, "o", "C0", "prefill, course prompts"), (dec, "s", "C3", "decode, batch 1")):
    ax.scatter([c.intensity for c in costs], [roofline.attainable_flops(gpu, c.intensity) / 1e12 for c in costs],
               marker=marker, color=color, zorder=3, label=f"Llama-3-8B {label}")
ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP/byte)", ylabel="attainable TFLOP/s")
ax.set_title(f"Decode sits {gpu.ridge / dec[0].intensity:.0f}x left of the {gpu.name} ridge; "
             f"prefill crosses it at {crossover} tokens", fontsize=10)
ax.legend(fontsize=7)
ax.grid(True, which="major", alpha=0.3)
results.figure(fig, "course_roofline")
plt.show()

# %% [markdown]
# With fp32's four bytes a weight, the crossing needs twice as many tokens; more still where the LM head is a large
# share of the weights (GPT-2 small), since a pass reads it once whatever its length.
#
# **Takeaway: prefill's intensity grows with the prompt and crosses the ridge at about as many tokens as the
# ridge's FLOP per byte (with two-byte weights). Decode's stays near one FLOP per byte, far left of the ridge: at
# batch 1 its bytes are its largest cost.**
#
# ## Try it, answered: another GPU and a bigger model
#
# The course's first two exercises: swap the GPU, and Llama-3-8B for a bigger model. The roofline gives the times;
# whether a model fits is a matter of memory capacity (`roofline.batch_that_fits`), with room for the cache.

# %%
try_it = pd.DataFrame([dict(model=shape.name, gpu=hw.name, ridge_flop_per_byte=hw.ridge,
                            prefill_crossover_tokens=roofline.prefill_crossover(shape, hw),
                            decode_bound_ms=roofline.decode_floor(shape, hw) * 1e3, weight_gb=shape.weight_bytes / 1e9,
                            gpus_for_weights=math.ceil(shape.weight_bytes / hw.memory_bytes),
                            cache_tokens_that_fit=roofline.batch_that_fits(shape, hw, 1))
                       for shape in (llama8, big) for hw in (gpu, other)])
results.table(try_it, "try_it_gpu_and_model")
prose.shown(try_it.round(2))

# %%
t = try_it.set_index(["model", "gpu"])
mine, swapped, large = t.loc[(llama8.name, gpu.name)], t.loc[(llama8.name, other.name)], t.loc[(big.name, gpu.name)]
fp8 = big.with_dtype("fp8")
display(Markdown(
    f"**{other.name}.** {other.flops / gpu.flops:.2f}x the arithmetic and {other.bandwidth / gpu.bandwidth:.2f}x the "
    f"bandwidth of the {gpu.name} move the ridge from {gpu.ridge:.0f} to **{other.ridge:.0f} FLOP/byte**: prefill "
    f"turns compute-bound at **{int(swapped.prefill_crossover_tokens)} tokens** instead of "
    f"{int(mine.prefill_crossover_tokens)}. Decode's bandwidth bound (its weights over the bandwidth) goes from "
    f"{mine.decode_bound_ms:.2f} to "
    f"**{swapped.decode_bound_ms:.2f} ms**, in proportion to the bandwidth alone.\n\n"
    f"**{big.name}.** {large.weight_gb:,.3g} GB of matmul weights in BF16; its bandwidth bound on one {gpu.name} would "
    f"be **{large.decode_bound_ms:.2f} ms**, " + (
        f"with room for {large.cache_tokens_that_fit:,.0f} tokens of cache." if large.gpus_for_weights == 1 else
        f"on paper only: they need {int(large.gpus_for_weights)} GPUs before any cache (with tensor parallelism about "
        f"{large.decode_bound_ms / large.gpus_for_weights:.1f} ms a step, plus communication). In FP8, weights "
        f"({fp8.weight_bytes / 1e9:.1f} GB) and cache alike, they leave room for {roofline.batch_that_fits(fp8, gpu, 1):,} "
        "tokens.")
    + f" Llama-3-8B leaves room for {mine.cache_tokens_that_fit:,.0f} tokens."))

# %% [markdown]
# **Takeaway: another GPU moves the ridge, the prefill crossover and decode's bandwidth bound together. For a model
# whose weights do not fit, capacity, not bandwidth, decides the first design choice.**
#
# ## Batching moves decode toward the ridge, until the caches stop it
#
# A decode step for `B` sequences does `B` times the arithmetic but reads the weights once, so its intensity grows
# with `B`. Every sequence's cache is read in full, though, so the cache bytes grow with `B` too. For a large batch
# the intensity levels off at one sequence's FLOPs over its cache bytes (`roofline.decode_intensity_limit`), which
# falls as the context grows. Where that limit is below the ridge, no batch reaches the ridge; capacity stops the batch
# sooner still, since every sequence's cache must fit beside the weights.

# %%
rows = []
for c in sorted(batch_contexts):
    fits = roofline.batch_that_fits(llama8, gpu, c)
    at_fit = roofline.decode_cost(llama8, max(fits, 1), c)
    rows.append(dict(context_tokens=c, intensity_batch_1=roofline.decode_cost(llama8, 1, c).intensity,
                     intensity_limit=roofline.decode_intensity_limit(llama8, c),
                     batch_to_reach_ridge=roofline.batch_to_reach_ridge(llama8, gpu, c),
                     batch_to_reach_other_ridge=roofline.batch_to_reach_ridge(llama8, other, c),
                     largest_batch_that_fits=fits, intensity_at_largest_batch=at_fit.intensity,
                     cache_share_of_bytes_at_largest_batch=1 - llama8.weight_bytes / at_fit.bytes))
batching = pd.DataFrame(rows)
results.table(batching, "decode_batching_limit")
claims.invariant((batching.intensity_batch_1 < gpu.ridge).all(), "a batch-1 decode step must sit below the ridge")
claims.invariant(batching.intensity_limit.is_monotonic_decreasing, "the batching limit must fall as the context grows")
prose.shown(batching.round(2))

# %%
batch_axis = np.unique(np.logspace(0, 5, 300).astype(int))
fig, ax = plt.subplots(figsize=(9, 5))
for i, row in enumerate(batching.itertuples()):
    ax.plot(batch_axis, [roofline.decode_cost(llama8, int(n), row.context_tokens).intensity for n in batch_axis],
            color=f"C{i}", label=f"context {row.context_tokens:,}" + "; dotted: limit; x: most that fit" * (i == 0))
    ax.axhline(row.intensity_limit, color=f"C{i}", ls=":", lw=1)
    ax.plot(row.largest_batch_that_fits, row.intensity_at_largest_batch, "x", color=f"C{i}", ms=9, mew=2)
for hw, style in ((gpu, "--"), (other, "-.")):
    ax.axhline(hw.ridge, color="k", ls=style, lw=1, label=f"{hw.name} ridge, {hw.ridge:.0f} FLOP/B")
ax.set(xscale="log", yscale="log", xlabel="sequences decoded together (batch)", ylabel="decode intensity (FLOP/byte)")
never = batching[batching.intensity_limit < gpu.ridge]
ax.set_title(f"Llama-3-8B decode on the {gpu.name}: " + (
    f"from context {never.context_tokens.min():,} no batch reaches the ridge" if len(never) else
    "every context tried reaches the ridge at some batch"), fontsize=10)
ax.legend(fontsize=7, loc="upper left")
ax.grid(True, which="major", alpha=0.3)
results.figure(fig, "decode_batching")
plt.show()

# %%
short, long_ = batching.iloc[0], batching.iloc[-1]
display(Markdown(
    f"At context {int(short.context_tokens):,} intensity climbs from {short.intensity_batch_1:.1f} FLOP/byte toward "
    f"a limit of {short.intensity_limit:.0f}, and **{short.batch_to_reach_ridge:.0f} sequences** reach the {gpu.name} "
    f"ridge. At context {int(long_.context_tokens):,} the limit is **{long_.intensity_limit:.1f} FLOP/byte**, "
    + ("below the ridge: no batch gets there. " if long_.intensity_limit < gpu.ridge else "still above the ridge. ")
    + ("Capacity binds first: " if long_.largest_batch_that_fits < long_.batch_to_reach_ridge else "And ")
    + f"{int(long_.largest_batch_that_fits)} sequences' caches of that length fit beside the weights in "
    f"{gpu.memory_bytes / 1e9:.0f} GB, {long_.cache_share_of_bytes_at_largest_batch:.0%} of the bytes a step reads."))

# %% [markdown]
# **Takeaway: batching shares the weights' bytes but not the caches'. At long contexts decode's intensity levels
# off below the ridge; only fewer cache bytes per token (grouped-query attention, a quantised cache) raise it.**
#
# ## This machine's roofline
#
# The same arithmetic on this machine, with chapter 0's ceilings. A textbook roofline has two roofs: the streaming
# read and the square product's peak. This machine's kernels add their own: the rate the model's matrix-vector
# products stream its weights at, and `F(M)`, the FLOP rate its matrices reach with `M` rows. On them go chapter
# 2's prefills, chapter 3's decode steps and its batched steps, each with the cost model's prediction.

# %%
def measured(section: str, name: str, column: str, optional: bool = False) -> pd.DataFrame:
    """Chapter `section`'s table `name` in this dtype and thread count (of two caches, the growing one), with
    `column`'s median and range over runs as `measured_ms`, `_low`, `_high`, and the model of its provenance."""
    rows = load_table(section, name, quick=quick)
    if rows is None:  # the one clear line: which chapter to run
        raise FileNotFoundError(f"chapter 6 places what {section} measured: run it first (`python -m lib.make.book "
                                f"{'--quick ' * quick}{section}`)")
    root = next(r for r in (output_root(quick), REPO_ROOT) if (r / "data" / section / f"{name}.csv").exists())
    model = json.loads((root / "data" / section / "provenance.json").read_text())["model"]
    rows = rows[(rows.dtype == points_dtype) & (rows.threads == threads)]
    rows = rows[rows.cache == "dynamic"] if "cache" in rows else rows
    if rows.empty and not optional:
        raise FileNotFoundError(f"chapter 6 needs {section}'s {name} in {points_dtype} at {threads} threads: run that "
                                "chapter with them first")
    return rows.assign(measured_ms=rows[column], measured_ms_low=rows[f"{column}_low"],
                       measured_ms_high=rows[f"{column}_high"], model=model)


prefill = measured("02_prefill_sweep", "prefill_sweep", "time_ms")
decode = measured("03_decode_sweep", "decode_sweep", "step_ms")
batched = measured("03_decode_sweep", "batched_decode", "step_ms", optional=True)
steps_of = json.loads((next(r for r in (output_root(quick), REPO_ROOT) if (r / "data" / "03_decode_sweep").exists())
                       / "data" / "03_decode_sweep" / "provenance.json").read_text())["parameters_used"]
where = ceilings.table.device_name.iloc[0] + ("" if device.type == "cuda" else f", {threads} thread{'s' * (threads > 1)}")
read = ceilings.stream_bandwidth(points_dtype, threads, bandwidth_kernel)
peak = ceilings.square_flops(points_dtype, threads)
here_hw = roofline.Hardware("this machine", flops=peak, bandwidth=read, source="chapter 0")
here_ridge_tokens = roofline.prefill_crossover(machine.MODELS[reference_model][0].with_dtype(points_dtype), here_hw,
                                               logits="last")  # prompt tokens a pass needs to reach the ridge here
_f_model = max(ceilings.matrix_rate(reference_model, points_dtype, threads, r)
               for r in ceilings.rows_measured(reference_model, points_dtype, threads, "blocks"))
model_balance_tokens = _f_model / read * machine.MODELS[reference_model][0].with_dtype(points_dtype).bytes_per_param / 2
_ref_shape = machine.MODELS[reference_model][0].with_dtype(points_dtype)
_head_mb = _ref_shape.vocab * _ref_shape.d_model * _ref_shape.bytes_per_param / 1e6  # the LM head's weights
show(f"This machine ({where}, {points_dtype}) streams **{read / 1e9:.1f} GB/s** (chapter 0's {'streaming read' if bandwidth_kernel == 'memory' else bandwidth_kernel}) and multiplies "
     f"large matrices at **{peak / 1e9:.1f} GFLOP/s**: the textbook ridge is **{peak / read:.1f} FLOP/byte**, against "
     f"{gpu.ridge:.0f} for the {gpu.name} in BF16. A {reference_model} prefill in {points_dtype} reaches it here at "
     f"**{prose.tokens(here_ridge_tokens)}** by the two roofs, against {crossover} for Llama-3-8B on the {gpu.name}."
     + ("" if ceilings.hardware_support(points_dtype) else
     f" This device has no {points_dtype} matrix instructions: its rates are a slow fallback kernel's."),
     how=f"Chapter 2's balance point puts that prompt at {prose.tokens(max(1, round(model_balance_tokens)))}. It takes the model's own "
         "matrices' fastest rate in place of the square product's, and counts the block matrices' bytes alone, where "
         f"the two roofs count the whole pass's (the LM head's {_head_mb:,.0f} MB among them, read once by a pass of "
         "any length).")
ch2_model = prefill.model.iloc[0]  # the model chapter 2 ran

# %%
try:
    f_rows = [n for n in sorted(prefill.prompt_tokens.unique())
              if n <= max(ceilings.rows_measured(ch2_model, points_dtype, threads, "blocks"))]
    _r1, _rn = (ceilings.matrix_rate(ch2_model, points_dtype, threads, n) for n in (f_rows[0], f_rows[-1]))
    show(f"The cost model prices a pass's matrices at the larger of two times: their bytes at the rate one row "
         f"streams {ch2_model}'s weights (**{ceilings.weight_rate(ch2_model, points_dtype, threads) / 1e9:.1f} "
         f"GB/s**), and their FLOPs at `F(rows)`, from {_r1 / 1e9:.0f} GFLOP/s at {f_rows[0]} row"
         f"{'s' * int(f_rows[0] != 1)} to {_rn / 1e9:.0f} at {f_rows[-1]:,}. A decode step's floor, its "
         f"[**dispatch**](glossary.md#dispatch), costs **{prose.ms(ceilings.dispatch(ch2_model, points_dtype, threads).best)}**.",
         how=f"`F(rows)` at each of chapter 2's prompt lengths (chapter 0): "
             + ", ".join(f"{ceilings.matrix_rate(ch2_model, points_dtype, threads, n) / 1e9:.0f} GFLOP/s at {n}"
                         for n in f_rows) + ". The dispatch is the step with its matrices and attention hollowed "
             f"out, timed between its weights' streams. {ch2_model}'s weights: "
             f"{machine.MODELS[ch2_model][0].with_dtype(points_dtype).weight_bytes / 1e6:,.0f} MB in {points_dtype}, "
             f"its blocks' {machine.MODELS[ch2_model][0].layers * machine.MODELS[ch2_model][0].block_params / 1e6:,.0f} "
             "million of them doing 2 FLOPs each per row.")
except (ValueError, IndexError) as error:  # chapter 0 did not time this model's matrices at these threads
    print(f"chapter 0 has no matrix rates for {ch2_model} here: {error}")

# %% [markdown] tags=["predict"]
# **Predict first.** The ridge, the rates the cost model prices matrices at and a step's dispatch are printed just
# above. A decode step at batch 1 does two FLOPs per weight it reads, of four bytes each in fp32. How many times
# below the ridge does it sit, and which of its priced terms is the largest (the block matrices, the LM head,
# attention over the cache, or dispatch)? From which of chapter 2's prompt lengths on do
# you expect a prefill's block matrices to be priced at their FLOPs rather than their bytes?

# %% [markdown]
# Each pass gets the one rule's label (`lib.regime`: the limit of its largest priced term), refined four ways.
# Priced by its FLOPs but left of the ridge, it is **few-row-kernel-bound**. With its two largest terms of
# different limits and about one size, it is **mixed**. With its bytes leading but its time well over its
# streaming floor, it is [**bound by the kernel's rate**](glossary.md#regimes) where a slow kernel reads its
# weights, else **above its streaming floor**. Right of the ridge, it is **compute-bound** only where its
# matrices' arithmetic took at least half its measured time (chapter 2's test), else **right of the ridge point**.

# %%
ridge = peak / read  # the textbook ridge the figure draws, FLOP/byte


def shown_regime(r: regime.Regime, pred: costmodel.Prediction) -> str:
    """The one rule's label (given the pass's intensity and the ridge, it says "few-row-kernel-bound" for matrix
    FLOPs at F(rows) left of the ridge), read against the cost model's terms: "mixed (a and b)" where the two largest
    terms have different limits and are within the tolerance for a predicted time of each other."""
    if not r.explained:
        return r.label
    top, second = sorted(pred.terms, key=lambda t: t.best, reverse=True)[:2]
    if top.limit != second.limit and top.best < claims.PREDICTED_TIME * second.best:
        return f"mixed ({top.name} and {second.name})"
    return r.label


def point_regime(r: regime.Regime, pred: costmodel.Prediction, series: str, low_s: float, bytes_: float,
                 read_rate: float, weight_bytes: float, high_s: float | None = None) -> str:
    """The label a point gets on this page: :func:`shown_regime`'s, except that a pass it calls memory-bound (a
    decode step of any ``series``, or a prefill of one token) whose whole interval (``low_s``, seconds) lies more than
    the slack above its ``bytes_`` at ``read_rate`` (bytes per second, the streaming read) is named by its parts, as
    chapter 3 names a decode step's (the glossary's Regimes): "bound by the kernel's rate" where its weights are its
    largest part and their kernel reads them more than the slack below the streaming read (``weight_bytes`` at
    ``read_rate``), else "above its streaming floor": one rule for every series. A pass it calls compute-bound
    (right of the ridge) keeps that label only where chapter 2's test holds: its block matrices' FLOPs at F(rows)
    take at least half of its measured time at the interval's slow end (``high_s``); else "right of the ridge point"."""
    shown = shown_regime(r, pred)
    if shown == "compute-bound" and high_s is not None and pred.term("block matrices").best < 0.5 * high_s:
        return "right of the ridge point"  # its arithmetic is not clearly most of its time
    if shown == "memory-bound" and low_s > regime.REGIME_SLACK * bytes_ / read_rate:
        w = sum(t.best for t in pred.terms if t.name in ("block matrices", "LM head") and t.limit == "memory")
        cache = sum(pred.term(t).best for t in ("attention", "cache copy", "page faults"))
        if w >= max(cache, pred.term("dispatch").best) and w > regime.REGIME_SLACK * weight_bytes / read_rate:
            return "bound by the kernel's rate"  # the weights, read well below the streaming read, are most of it
        return "above its streaming floor"  # chapter 3's word for a step the bytes alone do not set
    return shown


# %% [markdown]
# Each pass chapters 2 and 3 timed, priced by the cost model and labelled:

# %%
BYTES_LABELS = {"memory-bound", "above its streaming floor", "bound by the kernel's rate"}  # its bytes the largest term
rows, placed = [], {}
for series, table in (("prefill", prefill), ("decode", decode), ("batched decode", batched)):
    for r in table.itertuples():
        shape = machine.MODELS[r.model][0].with_dtype(points_dtype)
        model = costmodel.CostModel(ceilings, r.model, shape, points_dtype, threads)
        batch = int(getattr(r, "batch", 1))
        tokens = int(r.prompt_tokens if series == "prefill" else r.context_tokens)
        counted = getattr(r, "faults", getattr(r, "faults_per_step", None))  # the page faults its chapter counted
        counted = None if counted is None or not np.isfinite(counted) else float(counted)
        if series == "prefill":
            cost, pred = roofline.prefill_cost(shape, tokens, logits="last"), model.prefill(tokens, fresh_pages=counted)
        else:
            middle = tokens + (steps_of["batch_steps"] if batch > 1 else steps_of["steps"]) // 2
            cost, pred = roofline.decode_cost(shape, batch, middle), model.decode(middle, batch=batch, fresh_pages=counted)
        label = regime.regime(Spread.in_row(r, "measured_ms", 1e-3), pred,
                              intensity=cost.intensity, balance=ridge)
        placed[f"{series} at {tokens} tokens, batch {batch}"] = label
        top2 = sorted(pred.terms, key=lambda t: t.best, reverse=True)[:2]
        rows.append(dict(series=series, model=r.model, tokens=tokens, batch=batch, flops=cost.flops,
                         intensity_flop_per_byte=cost.intensity, predicted_ms=pred.best * 1e3,
                         predicted_median_ms=pred.median * 1e3, largest_term=top2[0].name,
                         largest_share=top2[0].best / pred.best, second_term=top2[1].name,
                         second_share=top2[1].best / pred.best,
                         predicted=("few-row-kernel-bound" if label.limit == "compute" and cost.intensity < ridge
                                    else f"{label.limit}-bound"), rule_label=label.label,
                         regime=point_regime(label, pred, series, r.measured_ms_low / 1e3, cost.bytes, read,
                                             shape.weight_bytes, r.measured_ms_high / 1e3),
                         explained=label.explained,
                         blocks_ms=pred.term("block matrices").best * 1e3,
                         blocks_one_row_ms=model.kernel("blocks", 1).best * 1e3,
                         measured_ms=r.measured_ms, measured_ms_low=r.measured_ms_low,
                         measured_ms_high=r.measured_ms_high, textbook_bound_ms=max(cost.flops / peak, cost.bytes / read) * 1e3))

# %%
points = pd.DataFrame(rows)
points["measured_over_predicted"] = points.measured_ms / points.predicted_ms
points["over_median_price"] = points.measured_ms / points.predicted_median_ms  # what the regime rule reads
points["achieved_gflop_s"] = points.flops / points.measured_ms / 1e6
points["fraction_of_textbook_roof"] = points.textbook_bound_ms / points.measured_ms
results.table(points, "measured_on_roofline")
warning = regime.check_floors(placed, ceilings.strict)
if warning:
    show(warning)
prose.shown(points[["series", "tokens", "batch", "intensity_flop_per_byte", "predicted_ms", "largest_term", "predicted", "measured_ms",
        "measured_over_predicted", "over_median_price", "regime"]].round(3))

# %%
few = points[points.regime == "few-row-kernel-bound"]
_bpp = machine.MODELS[reference_model][0].with_dtype(points_dtype).bytes_per_param
between = [f"the {r.series} of {prose.tokens(int(r.tokens))}" for r in points.itertuples()  # chapter 2's rule says compute
           if r.predicted == "few-row-kernel-bound" and r.series == "prefill"
           and 2 * r.tokens / _bpp >= _f_model / read]
if len(few):
    f0 = few.sort_values(["batch", "tokens"]).iloc[0]
    rows_f0 = int(f0.batch * (f0.tokens if f0.series == "prefill" else 1))
    shape_f0 = machine.MODELS[f0.model][0]
    f_rate = 2 * rows_f0 * shape_f0.layers * shape_f0.block_params / (f0.blocks_ms / 1e3)  # F(rows), FLOP/s
    n_left = int((points.predicted == "few-row-kernel-bound").sum())  # as priced, before the measured time is read
    show(f"{n_left} of {len(points)} passes sit left of the ridge ({ridge:.1f} FLOP/byte) yet are priced by their "
         "matrices' FLOPs. The two roofs say bytes set their time; this machine's matrix kernel says otherwise. "
         f"The {f0.series} of {prose.tokens(int(f0.tokens))} at batch {int(f0.batch)} multiplies {rows_f0} rows, "
         f"and its block matrices take **{f0.blocks_ms:.0f} ms** at the kernel's rate for {rows_f0} rows, against "
         f"{f0.blocks_one_row_ms:.0f} ms to stream their bytes at one row. That kernel reached "
         f"{f_rate / 1e9:.1f} GFLOP/s with {rows_f0} rows, against {peak / 1e9:.1f} for the square product: a roof "
         "of its own, the dashed F(M) line below.",
         how=(f"{n_left - len(few)} of the {n_left} are labelled *unexplained overhead*: they ran more than the rule's "
              f"{regime.REGIME_SLACK:g}x their price. " if n_left > len(few) else "")
         + f"The {f0.series} of {prose.tokens(int(f0.tokens))} sits at {f0.intensity_flop_per_byte:.2f} FLOP/byte."
         + (f" Chapter 2 draws the line elsewhere: at its balance point, {_f_model / read:.1f} FLOP/byte (the "
            "model's own matrices' fastest rate over the read), against the block matrices' intensity alone, "
            f"`2T / b` (the LM head's bytes left out). So {', '.join(between)} here "
            f"{'lies' if len(between) == 1 else 'lie'} right of chapter 2's line. Both pages price the matrices' "
            "FLOPs at F(rows); they differ only on the line drawn." if between else ""))

# %% [markdown]
# **Measure, then place.** The figure places every pass at its intensity and achieved FLOP rate, labelled with its
# fraction of the textbook roof (chapter 0's streaming read and square product). The dotted line, the model's own
# matrix-vector products, may beat the streaming read where a cache serves part of the weights (chapter 0). Each
# series is one claim: no pass runs above the textbook roof. One that did would have been served by a cache, or
# chapter 0 understated the machine.

# %%
fig, ax = plt.subplots(figsize=(10, 6))
xs = np.logspace(math.log10(min(points.intensity_flop_per_byte.min(), 0.1) / 2),
                 math.log10(max(points.intensity_flop_per_byte.max(), peak / read) * 4), 300)
ax.plot(xs, np.minimum(peak, xs * read) / 1e9, "k-", lw=1.2,
        label=f"textbook roof: {'streaming read' if bandwidth_kernel == 'memory' else bandwidth_kernel} {read / 1e9:.1f} GB/s, square product {peak / 1e9:.0f} GFLOP/s")
model_name = prefill.model.iloc[0]
weights = ceilings.weight_rate(model_name, points_dtype, threads)
ax.plot(xs, np.minimum(peak, xs * weights) / 1e9, "k:", lw=1.2,
        label=f"the model's matrix-vector products: {weights / 1e9:.1f} GB/s")
f_rows = ceilings.table.query("kernel == 'blocks' and model == @model_name and dtype == @points_dtype and "
                              "threads == @threads and status == 'ok'")
bpp = machine.MODELS[model_name][0].with_dtype(points_dtype).bytes_per_param
ax.plot(2 * f_rows.rows / bpp, f_rows.gflop_s, "k--", lw=1, marker=".", label="F(M): the model's matrices at M rows")
colours = {name: f"C{i}" for i, name in enumerate(dict.fromkeys(points.regime))}
for (series, name), g in points.groupby(["series", "regime"], sort=False):
    ax.scatter(g.intensity_flop_per_byte, g.achieved_gflop_s, marker={"prefill": "o", "decode": "s"}.get(series, "^"),
               color=colours[name], s=40, zorder=3, label=f"{series}: {name}")
    for j, r in enumerate(g.itertuples()):  # decode points share one intensity: stack their labels
        ax.annotate(f"{r.fraction_of_textbook_roof:.0%}", (r.intensity_flop_per_byte, r.achieved_gflop_s), fontsize=7,
                    textcoords="offset points", xytext=(-30, 9 * j) if series == "decode" else (4, 3))
ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP/byte)", ylabel=f"GFLOP/s ({points_dtype})")
unexplained = int((~points.explained).sum())
ax.set_title(f"This machine ({where}, {points_dtype}): {len(points) - unexplained} of {len(points)} passes explained by "
             f"the cost model\n(labels: fraction of the textbook roof reached)", fontsize=10)
ax.legend(fontsize=7, loc="lower right")
ax.grid(True, which="major", alpha=0.3)
results.figure(fig, "this_machine_roofline")
plt.show()

# %%
roof_reach = {}  # each series' largest fraction of the textbook roof, for the opening
for series, g in points.groupby("series", sort=False):
    claim = f"{series.replace(' ', '_')}_under_the_roof"
    register.claim(claim, f"Every {series} pass runs at or under the textbook roof at its intensity (the largest "
                   "fraction of the roof a pass reached, its interval, is at most one).")
    reach = [Spread(r.textbook_bound_ms / r.measured_ms_high, r.fraction_of_textbook_roof,
                    r.textbook_bound_ms / r.measured_ms_low) for r in g.itertuples()]
    highest = roof_reach[series] = claims.extreme(reach)
    near = g.iloc[int(np.argmax([x.mid for x in reach]))]
    by_regime = list(g.groupby("regime", sort=False))
    listed = "; ".join(f"*{name}* at " + (f"batch {', '.join(map(str, o.batch))}" if series == "batched decode" else
                                        f"{', '.join(f'{t:,}' for t in o.tokens)} token{'s' * (list(o.tokens) != [1])}")
                       for name, o in by_regime)
    priced_at = "; ".join(f"{name}, {prose.span(o.over_median_price.min(), o.over_median_price.max(), '.2f')}x"
                          for name, o in by_regime)
    top_reach = highest.text(".0%")
    arith_ = [f"{r.blocks_ms / r.measured_ms_high:.0%} at "
              + (f"batch {int(r.batch)}" if series == "batched decode" else prose.tokens(int(r.tokens)))
              for r in g.itertuples() if r.regime in ("compute-bound", "right of the ridge point")]
    closest = (f"batch {int(near.batch)}" if near.batch > 1 else
               f"{int(near.tokens):,} token{'s' * (int(near.tokens) != 1)}")
    verdict = register.record(claim, claims.at_most(highest, 1.0), predicted="at most the roof",
                              measured=f"at most {top_reach} of it", evidence=f"{len(g)} {series} passes, "
                              f"{points_dtype}, {where}")
    show(claims.pick(
        verdict, held=f"The {series} passes reach at most **{highest.mid:.0%}** of the textbook roof ({closest}). By "
                      f"the one rule they are {listed}.",
        not_held=f"A {series} pass ran above the textbook roof ({closest}, {highest.mid:.0%} of it): a cache served "
                 f"its bytes, or the streaming read or the square product chapter 0 measured understates this machine. "
                 f"By the one rule they are "
                 f"{listed}.",
        unresolved=f"The {series} passes reach at most {highest.mid:.0%} of the textbook roof ({closest}): whether a "
                   f"pass ran above it is too close to call, the median {'under' if highest.mid <= 1 else 'above'} "
                   f"it. By the one rule they are {listed}."),
         how=f"A pass's fraction of the roof is the textbook bound over its measured time, {top_reach} at most (the "
             "interval of the median over runs); the claim holds when that interval lies at or under one. Each label "
             "reads the pass's measured time over its price at chapter 0's median calls (the *over median price* "
             f"column): {priced_at}; a pass more than the rule's {regime.REGIME_SLACK:g}x over its price is "
             "*unexplained overhead*, and one faster than its largest term alone says a ceiling is wrong."
             + (" Right of the ridge, a pass is compute-bound where its block matrices' FLOPs at F(rows) take at "
                "least half of its measured time at the slow end of its interval: " + ", ".join(arith_) + "."
                if arith_ else ""))

# %% [markdown]
# Why batched decode's label changes from one batch to the next: the largest term of each step, and the one after it.

# %%
what = {"block matrices": "the blocks' matrices", "LM head": "the LM head", "attention": "reading the caches",
        "cache copy": "copying the growing caches", "page faults": "fresh pages for the copied caches",
        "dispatch": "issuing the operations"}
g = points[points.series == "batched decode"].sort_values("batch")
limit_words = lambda label, rows: {  # noqa: E731  what a largest term's limit prices it at, in words
    "memory-bound": "their bytes", "compute-bound": "their arithmetic",
    "few-row-kernel-bound": f"the rate the matrix kernel reaches with {rows} rows"}.get(label, label)
moved = []  # each change of label between neighbouring batches, and what changed under it
for a, b in zip(g.itertuples(), list(g.itertuples())[1:]):
    if a.regime == b.regime or not (a.explained and b.explained):
        continue  # an unexplained step is said on its own below
    moved.append((f"from batch {a.batch} to {b.batch} the largest term becomes {what.get(b.largest_term, b.largest_term)}",
                  "term") if a.largest_term != b.largest_term else
                 (f"from batch {a.batch} to {b.batch} {what.get(a.largest_term, a.largest_term)} stay the largest term "
                  f"but are priced at {limit_words(b.predicted, b.batch)} rather than at "
                  f"{limit_words(a.predicted, a.batch)}", "limit") if a.predicted != b.predicted else
                 (f"from batch {a.batch} to {b.batch} the largest term and its limit stay, and the step's measured time "
                  "against them moves the label", "time"))
if len(g):
    changed = g.regime.nunique() > 1
    show(("Batched decode's label changes with the batch because each priced term grows at its own pace: the "
          "matrices' with the rate F(rows) reaches, the caches' with the sequences"
          + "".join(f". {m[:1].upper()}{m[1:]}" for m, _ in moved) + "."
          + "".join(f" Batch {r.batch}'s *{r.regime}* is not a change of term: the step took "
                    f"{r.over_median_price:.2f}x its price, "
                    + (f"more than the rule's {regime.REGIME_SLACK:g}x" if r.over_median_price > 1 else
                       "less than its largest term alone")
                    + f", while its largest priced term was {what.get(r.largest_term, r.largest_term)}."
                    for r in g[~g.explained.astype(bool)].itertuples())
          if changed else f"Batched decode has one label at every batch: *{g.regime.iloc[0]}*."),
         how=" ".join(f"At batch {r.batch} the priced step is {r.largest_share:.0%} "
                      f"{what.get(r.largest_term, r.largest_term)}, then {r.second_share:.0%} "
                      f"{what.get(r.second_term, r.second_term)} ({r.regime})." for r in g.itertuples())
         + (" Each change of label here is a change of the largest term or of its limit, not noise."
            if moved and all(k != "time" for _, k in moved) else "")
         + " A step's price here is at chapter 0's median calls (the *over median price* column). Where a step ran "
         f"within the rule's {regime.REGIME_SLACK:g}x of it, the label follows its largest term; where two terms of "
         f"different limits are within {claims.PREDICTED_TIME:g}x of each other the label says mixed.")

# %% [markdown]
# Two more checks: batching's FLOP rate, and (on a GPU) the measured ceilings beside the datasheet's:

# %%
batching_said = ("Batched decode's FLOP rate rises from one batch to the next where the cost model's rises (the "
                 "weights are shared) and falls where its falls (work that grows with the batch takes over).")
register.claim("batching_raises_the_rate", batching_said)
rising = points[points.series == "batched decode"].sort_values("batch")
if len(rising):  # the largest batch's prediction, term by term: what grows with the batch
    last_row = rising.iloc[-1]
    top_pred = costmodel.CostModel(ceilings, last_row.model, machine.MODELS[last_row.model][0].with_dtype(points_dtype),
                                   points_dtype, threads).decode(int(last_row.tokens) + steps_of["batch_steps"] // 2,
                                                                 batch=int(last_row.batch))
    top_term = top_pred.dominant
batch_runs_table = load_table("03_decode_sweep", "batched_decode_runs", quick=quick)
in_runs = None if batch_runs_table is None else batch_runs_table[batch_runs_table.cache == "dynamic"].pivot_table(
    index="run", columns="batch", values="step_ms")
predicted_rates = [r.flops / r.predicted_ms / 1e6 for r in rising.itertuples()]
step_verdicts, step_text, step_plain = [], [], []
for i in range(len(rising) - 1):
    up = predicted_rates[i + 1] > predicted_rates[i]
    b0, b1 = int(rising.batch.iloc[i]), int(rising.batch.iloc[i + 1])
    f0, f1 = rising.flops.iloc[i], rising.flops.iloc[i + 1]
    change = Spread.of((f1 / in_runs[b1]) / (f0 / in_runs[b0])) if in_runs is not None and {b0, b1} <= set(in_runs) \
        else Spread.at(rising.achieved_gflop_s.iloc[i + 1] / rising.achieved_gflop_s.iloc[i])  # each run's own ratio
    step_verdicts.append(claims.at_least(change, 1.0) if up else claims.at_most(change, 1.0))
    step_text.append(f"batch {rising.batch.iloc[i]} to {rising.batch.iloc[i + 1]}: predicted "
                     f"{'rising' if up else 'falling'}, measured {change.text('.2f', 'x')}")
    step_plain.append(f"{change.mid:.2f}x from batch {b0} to {b1} (predicted {'rising' if up else 'falling'})")
if step_verdicts:  # two batch sizes or more, so the largest batch's prediction exists
    verdict = register.record(
        "batching_raises_the_rate", claims.every(step_verdicts),
        predicted=", ".join(f"B={r.batch}: {x:.3g}" for r, x in zip(rising.itertuples(), predicted_rates)),
        measured=", ".join(f"B={r.batch}: {r.achieved_gflop_s:.3g}" for r in rising.itertuples()),
        evidence=f"chapter 3's batched decode, {points_dtype}; GFLOP/s")
    steps = "; ".join(step_text)
    open_steps = [t.split(":")[0] for t, v in zip(step_text, step_verdicts) if v == claims.UNRESOLVED]
    show(f"Batched decode's achieved FLOP rate changed {prose.and_list(step_plain)}." + claims.pick(
        verdict, held=" It moved as predicted at every step.",
        not_held=f" It did not move as predicted at every step. At batch {int(rising.batch.max())} the cost model's "
                 f"largest term is {top_term.name} ({top_term.best / top_pred.best:.0%} of the step).",
        unresolved=f" Whether it moved as predicted at every step is too close to call: {prose.and_list(open_steps)} "
                   "could go either way."),
         how="Each step's change is taken run by run (the interval of its median over runs); a step is called when "
             f"that interval lies wholly on the predicted side of no change: {steps}.")
else:
    why_not = "chapter 3 timed fewer than two batch sizes in this dtype and thread count"
    register.record("batching_raises_the_rate", None, evidence=why_not)
    show(f"{batching_said} This run does not decide it: {why_not}.")

# %%
# A GPU in the hardware table beside its datasheet's dense 16-bit peaks (quoted for BF16; FP16's are the same).
name = ceilings.table.device_name.iloc[0]
entry = next((hw for hw in roofline.HARDWARE.values() if not math.isnan(hw.flops) and hw.name.split()[0] in name), None)
comparable = entry is not None and points_dtype != "fp32"
datasheet_said = ("On a GPU, the measured bandwidth and FLOP rate each lie within the tolerance for a datasheet of "
                  "the GPU's datasheet peaks.")
register.claim("gpu_near_its_datasheet", datasheet_said)
if comparable:
    verdict = register.record("gpu_near_its_datasheet",
                              claims.every([claims.within(read, entry.bandwidth, claims.DATASHEET),
                                            claims.within(peak, entry.flops, claims.DATASHEET)]),
                              predicted=f"{entry.bandwidth / 1e9:,.0f} GB/s, {entry.flops / 1e12:,.0f} TFLOP/s",
                              measured=f"{read / 1e9:,.0f} GB/s, {peak / 1e12:,.1f} TFLOP/s", evidence=where)
    show(f"The {name} reaches {read / entry.bandwidth:.0%} of its datasheet bandwidth and {peak / entry.flops:.0%} "
         f"of its datasheet FLOP rate ({entry.name})" + claims.pick(
             verdict, held=": both near the datasheet, as simple kernels on a healthy GPU should be.",
             not_held=": further off the datasheet than simple kernels should be, so a kernel, a clock or the table "
                      "entry is off.",
             unresolved=": whether both are near the datasheet is too close to call."),
         how=f"Each measured ceiling is held within a factor of {claims.DATASHEET:g} of its datasheet peak (simple "
             "kernels against a vendor's figure), from "
             f"{entry.bandwidth / claims.DATASHEET / 1e9:,.0f} to {entry.bandwidth * claims.DATASHEET / 1e9:,.0f} GB/s "
             f"and {entry.flops / claims.DATASHEET / 1e12:,.0f} to {entry.flops * claims.DATASHEET / 1e12:,.0f} TFLOP/s.")
else:
    why_not = (f"{name} has no entry in the hardware table ({', '.join(table_gpus)}): there is no datasheet to set it "
               "beside" if entry is None else
               f"the table quotes 16-bit peaks for the {entry.name}; set `dtype` to fp16 or bf16 to compare")
    register.record("gpu_near_its_datasheet", None, evidence=why_not)
    show(f"On a GPU the chapter sets the bandwidth and FLOP rate chapter 0 measured beside the datasheet's peaks; "
         f"not here: {why_not}.")

# %% [markdown]
# **Takeaway: draw the machine's roofline from its kernels' own ceilings, not only from the streaming read and the
# square product. A pass's largest priced term is where to look first.**

# %% [markdown]
# ## Where the floor gives way to the bytes: GPT-2 from two layers up
#
# The source chapter found GPT-2 small's decode step on its GPU in neither textbook regime: it took the same time
# whatever the context and the precision. It blamed issuing the step's few hundred operations, and argued that a
# model with far more weight bytes would leave that [floor](glossary.md#floor). This machine measures where: GPT-2
# from the two-layer `tiny-gpt2` through 12-layer models 128 to 512 wide to GPT-2 small, medium, large and XL.
#
# Each size is priced before it is built, from chapter 0's measurements:
#
# * its **floor**, the step's dispatch: the operations it issues times what one costs (on a CPU, more when more
#   weight bytes streamed past since the one before).
# * its **weights**: their bytes at the rate the matrix-vector products reached.
#
# A size is **on the floor** when its weights take at most a quarter of its floor's time, **past the floor** when
# they take at least four times as long, **between** otherwise. The **transition** lies where the two are equal.
# On the floor, a narrower dtype or a longer context should change the step only by what its floor and its cache
# cost; past it, the step should follow the bytes.
#
# <details><summary>Why the floor grows with the bytes, and how the transition is read</summary>
#
# The book's explanation, which no counter in this run measures: the bytes streamed between two operations push the
# data the interpreter and the small kernels work from out of the processor's smaller, faster caches (`tiny-gpt2`'s
# 0.7 MB push out almost nothing; GPT-2 small's 494 MB pass through every level). The price holds GPT-2 small's
# cost per operation for the larger models, and prices `tiny-gpt2`, which chapter 0 measured itself, from its own
# kernels.
# Since the floor grows with the bytes, the transition is read the same way from the prices and from the measured
# steps: a line through the 12-layer models' steps against their bytes, where its bytes' term equals its time with
# no bytes. So a size somewhat past the transition is still "between": its floor is more than a fifth of its step.
# Past the floor, a 16-bit dtype should change the step as its kernel's measured rate allows, not halve it: on some
# CPUs the 16-bit kernel is the slower.
#
# The source inferred its floor's cause; it did not isolate it. The sizes here carry seeded random weights (a
# step's time does not depend on their values), and as many run as the memory and `size_budget_s` allow. Their
# prices come from chapter 0's `reference_model` (GPT-2 small in a full build) and `tiny-gpt2`.
#
# </details>

# %% [markdown]
# The inputs, from chapter 0: what one operation costs, how many a step issues, and the weights' rate:

# %%
low16 = "fp16" if device.type == "cuda" else "bf16"
size_dtypes = ["fp32"] + ([low16] if low16 in ceilings.dtypes() else [])
size_names = [n for n in gpt2_sizes.SIZES if n in sizes]  # smallest first
fixed_ops, per_layer = gpt2_sizes.operations_line(device)
reference_shape = machine.MODELS[reference_model][0]
ops_ref = ceilings.operations(reference_model, "fp32", threads)[0]
claims.invariant(fixed_ops + per_layer * reference_shape.layers == ops_ref,
                 f"a {reference_shape.layers}-layer GPT-2 step should issue the {ops_ref} operations chapter 0 counted")
short_c, long_c = size_contexts
rate = {dt: ceilings.weight_rate(reference_model, dt, threads) for dt in size_dtypes}
block_rate, head_rate = (ceilings.matrices(reference_model, "fp32", threads, k, 1) for k in ("blocks", "head"))
block_rate, head_rate = (reference_shape.with_dtype("fp32").block_params * reference_shape.layers * 4 / block_rate.best,
                         reference_shape.d_model * reference_shape.vocab * 4 / head_rate.best)  # bytes/s at one row
anchored = gpt2_sizes.anchors(ceilings, "fp32", threads)  # the GPT-2s chapter 0 timed a step's operations of
per_operation = {m: gpt2_sizes.operation_cost(ceilings, b, "fp32", threads, "decode", 1, reference_model)[0]
                 for m, b, _ in anchored}  # seconds, between each one's own weight streams
show(f"Chapter 0 ({where}, fp32): one issued operation costs "
     + " and ".join(f"**{per_operation[m] * 1e6:.1f} us** between {m}'s weight streams ({b / 1e6:,.1f} MB)"
                    for m, b, _ in anchored)
     + f". A GPT-2 step issues {fixed_ops:.0f} operations outside its blocks and {per_layer:.0f} per layer. "
     f"Its matrix-vector products stream fp32 weights at **{rate['fp32'] / 1e9:.1f} GB/s**. The sizes' fp32 "
     "weights: " + ", ".join(f"{n} {gpt2_sizes.SIZES[n].weight_bytes / 1e6:,.1f} MB" for n in size_names) + ".",
     how=f"The blocks stream at {block_rate / 1e9:.1f} GB/s and the LM head at {head_rate / 1e9:.1f}; each size's "
         "blocks and head are priced at their own shapes' rates. Layers: "
         + ", ".join(f"{n} {gpt2_sizes.SIZES[n].layers}" for n in size_names) + ".")

# %% [markdown] tags=["predict"]
# **Predict first.** From chapter 0's figures just printed: how many megabytes of fp32 weights should a 12-layer
# GPT-2 have before its weights take as long as its floor (its operations at their cost each)? Which of the sizes
# should then sit on the floor, and how many times GPT-2 small's step should GPT-2 large's take?

# %%
pacer = machine.Pacer(ceilings, reference_model, "fp32", threads, device)  # the machine's speed, watched
pacer.check("before the size sweep")


def size_price(name: str, dt: str, context: int) -> costmodel.Prediction:
    """A decode step of size `name` in `dt`, priced from the reference's kernels, at the middle of a run."""
    ops = int(fixed_ops + per_layer * gpt2_sizes.SIZES[name].layers)
    return gpt2_sizes.price_decode(ceilings, name, reference_model, ops, ops_ref, dt, threads, context + size_steps // 2)


def weights_of(p: costmodel.Prediction) -> float:
    return p.term("block matrices").best + p.term("LM head").best


rows = []
for name in size_names:
    s = gpt2_sizes.SIZES[name]
    short = size_price(name, "fp32", short_c)
    floor, weights = short.term("dispatch").best, weights_of(short)
    rows.append(dict(size=name, layers=s.layers, width=s.d_model, parameters_m=s.matmul_params / 1e6,
                     weight_mb=s.weight_bytes / 1e6, operations=int(fixed_ops + per_layer * s.layers),
                     floor_ms=floor * 1e3, weights_ms=weights * 1e3, step_ms=short.best * 1e3,
                     side="on the floor" if 4 * weights <= floor else "past the floor" if weights >= 4 * floor else "between",
                     context_growth=size_price(name, "fp32", long_c).best / short.best,
                     **({f"{low16}_over_fp32": size_price(name, low16, short_c).best / short.best}
                        if low16 in size_dtypes else {}),
                     streaming_ms=s.weight_bytes / ceilings.stream_bandwidth("fp32", threads) * 1e3))
size_plan = pd.DataFrame(rows)
twelve = int(fixed_ops + per_layer * 12)


def line_of(mb, ms) -> tuple[float, float]:
    """A line through steps (ms) against their weight bytes (MB), each weighted by one over its time: (its ms at no
    bytes, the floor it starts from; its ms per MB, one over the rate its bytes seem to stream at)."""
    slope, intercept = np.polyfit(np.asarray(mb, float), np.asarray(ms, float), 1, w=1 / np.asarray(ms, float))
    return float(intercept), float(slope)


# The prediction is drawn the way the measurement will be: a line through the 12-layer steps (the reader's sizes,
# or all of them where fewer than two are chosen), priced; where its bytes' term equals its floor lies the transition.
priced12 = size_plan[size_plan.layers == 12]
if len(priced12) < 2:
    priced12 = pd.DataFrame([dict(weight_mb=gpt2_sizes.SIZES[n].weight_bytes / 1e6,
                                  step_ms=size_price(n, "fp32", short_c).best * 1e3)
                             for n in gpt2_sizes.SIZES if gpt2_sizes.SIZES[n].layers == 12])
floor_pred, slope_pred = line_of(priced12.weight_mb, priced12.step_ms)  # ms, ms per MB
floor_range = size_plan[size_plan.layers == 12].floor_ms
if not (floor_pred > 0 and slope_pred > 0):  # a line through few, noisy prices can start below zero: then the
    floor_pred = float((floor_range if len(floor_range) else size_plan.floor_ms).min())  # sizes' own priced floor
    slope_pred = 1e9 / rate["fp32"]  # and the weights' rate, in ms per MB
    print(f"the line through the 12-layer prices starts at no positive floor; the transition is priced from the "
          f"smallest priced floor ({floor_pred:.1f} ms) and the weights' rate instead")
predicted_transition = gpt2_sizes.transition_bytes(floor_pred / 1e3, 1e9 / slope_pred)  # bytes
facts = load_reference("ch09_facts").set_index("fact").value
source_steps = load_reference("ch09_decode_gpu_cpu")
source_floor = source_steps.gpu_fp32_ms_lo.min() / 1e3
source_gpu_ms = source_steps.filter(like="gpu_").min().min(), source_steps.filter(like="gpu_").max().max()

# %%
source_bw = float(facts["gpu_memory_bandwidth"]) * 1e9
source_transition = gpt2_sizes.transition_bytes(source_floor, source_bw)
side = size_plan.set_index("size").side
side_ms = size_plan.set_index("size")
past = [n for n in side.index if side[n] == "past the floor"]
past_ratio = claims.geomean(side_ms[f"{low16}_over_fp32"][past]) if past and low16 in size_dtypes else None
stream32 = ceilings.stream_bandwidth("fp32", threads)  # the streaming read, against the weights' kernel's rate
slow_kernel = rate["fp32"] * regime.REGIME_SLACK < stream32  # the glossary's "bound by the kernel's rate"
past_said = (f"past its floor and [bound by the kernel's rate](glossary.md#regimes): its matrix-vector kernel reads "
             f"the weights at {rate['fp32'] / 1e9:.1f} GB/s against a {stream32 / 1e9:.1f} GB/s streaming read, so a "
             "faster matrix-vector kernel or fewer bytes, not fewer operations, would shorten it" if slow_kernel else
             f"past its floor, in the textbook regime: its weights stream at {rate['fp32'] / 1e9:.1f} GB/s against a "
             f"{stream32 / 1e9:.1f} GB/s streaming read")
placed = {"on the floor": "on its floor", "past the floor": past_said,
          "between": "between its floor and the weights' regime, which the sweep reaches further up"}
prose.prediction(
    f"Predicted ({where}): a 12-layer GPT-2 step issues {twelve} operations"
    + (f", priced at **{prose.span(floor_range.min(), floor_range.max(), '.1f')} ms** from the narrowest 12-layer "
       "model to the widest, since wider ones stream more bytes between their operations"
       if len(floor_range) > 1 and len(anchored) > 1 else "")
    + f". A line through the 12-layer prices starts at **{floor_pred:.1f} ms** with no bytes and rises as if the "
    f"bytes streamed at **{1 / slope_pred:.1f} GB/s** (the weights' {rate['fp32'] / 1e9:.1f} GB/s, slowed by the "
    f"floor's growth). Its bytes' term equals its floor at **{predicted_transition / 1e6:,.0f} MB** (GPT-2 small has "
    f"{gpt2_sizes.SIZES['gpt2-small'].weight_bytes / 1e6:,.0f}). On the floor: "
    f"{', '.join(side[side == 'on the floor'].index) or 'none of the sizes'}; past it: "
    f"{', '.join(side[side == 'past the floor'].index) or 'none'}."
    + (f" GPT-2 small's weights take {side_ms.weights_ms['gpt2-small']:.0f} ms beside a floor of "
       f"{side_ms.floor_ms['gpt2-small']:.1f} ms, {side_ms.weights_ms['gpt2-small'] / side_ms.step_ms['gpt2-small']:.0%} "
       f"of its priced step: {placed[side['gpt2-small']]}." if "gpt2-small" in side_ms.index else "")
    + (f" GPT-2 large's step is priced at {side_ms.step_ms['gpt2-large'] / side_ms.step_ms['gpt2-small']:.1f}x "
       "GPT-2 small's." if {"gpt2-small", "gpt2-large"} <= set(side_ms.index) else "")
    + (f" In {low16} the weights stream at {rate[low16] / 1e9:.1f} GB/s: alone they would take "
       f"{rate['fp32'] / rate[low16] / 2:.2f}x fp32's time, and a step past the floor {past_ratio:.2f}x. The {low16} "
       f"floor is priced from its own chapter-0 measurement, "
       f"{ceilings.dispatch(reference_model, low16, threads).best * 1e3:.1f} ms against "
       f"{ceilings.dispatch(reference_model, 'fp32', threads).best * 1e3:.1f} in fp32." if low16 in rate and past_ratio
       else ""))
show(f"On the source's GPU, GPT-2 small's decode steps took {prose.span(*source_gpu_ms)} ms at every context, in fp32 "
     f"and fp16. That GPU would leave its floor at **{source_transition / 1e9:.1f} GB** of weights, and pass it (weights "
     f"four times the floor) at about {4 * source_transition / 1e9:.0f} GB, the source's 7B model in fp16: why it "
     "called GPT-2 small the wrong size.",
     how=f"The source's steps ran at contexts from {source_steps.context_tokens.min()} to "
         f"{source_steps.context_tokens.max()} tokens; its GPU has a floor of {prose.ms(source_floor)} and "
         f"{source_bw / 1e9:.0f} GB/s. GPT-2 small's {float(facts['gpt2_small_fp32_weight_bytes']) * 2**20 / 1e6:.0f} MB "
         f"took {float(facts['gpt2_small_fp32_weight_bytes']) * 2**20 / source_bw * 1e3:.1f} ms there. "
         f"{source_transition / 1e9:.1f} GB is just above GPT-2 large in fp32 "
         f"({gpt2_sizes.SIZES['gpt2-large'].weight_bytes / 1e9:.1f} GB) or GPT-2 XL in fp16.")
prose.shown(size_plan.round(2))

# %% [markdown]
# **The sweep.** Each size runs if it fits in the memory free now and in `size_budget_s`; then its decode steps in
# both dtypes, its prefills and its floor are timed, one size at a time.

# %%
free = gpt2_sizes.free_memory(device)
floor_repeats = 5  # each size's floor, one layer down: its operations hollowed, alone and between its weights' streams
left, plan = size_budget_s, []
for r in size_plan.itertuples():
    build_s = sum(gpt2_sizes.build_seconds(ceilings, r.size, dt, threads) for dt in size_dtypes)
    run_s = (size_steps + 1) * sum(size_price(r.size, dt, c).best for dt in size_dtypes for c in size_contexts)
    prefill_s = 4 * sum(gpt2_sizes.price_prefill(ceilings, r.size, reference_model, r.operations, ops_ref, "fp32",
                                                 threads, t).best for t in size_prompts)
    floor_s = floor_repeats * 2 * (r.weights_ms + r.floor_ms) / 1e3  # its floor timed alone and between its streams
    need = gpt2_sizes.memory_needed(r.size, size_dtypes, size_contexts)
    least = build_s + 3 * run_s + prefill_s + floor_s
    status = (f"skipped: needs {need / 1e9:.1f} GB, {free / 1e9:.1f} GB free" if need > free else
              f"skipped: predicted {least:.0f} s at least, {left:.0f} s of the budget left" if least > left else "run")
    left -= least if status == "run" else 0
    plan.append(dict(size=r.size, memory_gb=need / 1e9, build_s=build_s, run_s=run_s, prefill_s=prefill_s,
                     floor_s=floor_s, status=status))
plan = pd.DataFrame(plan)
plan["runs"] = 0
for i in plan.index[plan.status == "run"]:
    extra = int(min(size_runs - 3, max(left, 0) // plan.run_s[i]))
    plan.loc[i, "runs"], left = 3 + extra, left - extra * plan.run_s[i]
plan["predicted_s"] = (plan.build_s + plan.runs * plan.run_s + plan.prefill_s + plan.floor_s).where(plan.status == "run", 0.0)
results.table(plan, "size_plan")
skipped = plan[plan.status != "run"]
show(f"**{(plan.status == 'run').sum()} of the {len(plan)} sizes run**"
     + "".join(f"; skipped, {why}: {prose.and_list(names_)}" for why, names_ in (
         ("for lack of memory", [r.size for r in skipped.itertuples() if "needs" in r.status]),
         ("for lack of time in the budget", [r.size for r in skipped.itertuples() if "needs" not in r.status]))
               if names_) + ".",
     how="Before any work each size is checked against the memory free now (its weights in every dtype, its caches "
         "and a quarter more) and against `size_budget_s`, with its predicted cost: building its weights (at chapter "
         "0's copy rate and cost per page fault), three runs, its prefills and its floor. The budget left gives the "
         "cheaper sizes more runs, up to `size_runs`. "
         + ("Skipped: " + "; ".join(f"{r.size} ({r.status.removeprefix('skipped: ')})" for r in skipped.itertuples())
            + ". " if len(skipped) else "")
         + "Then, one size at a time: its models are built and the operations its step issues counted (they must be "
         "the predicted ones). Each run decodes `size_steps` steps from both contexts in fp32 and in the 16-bit dtype, "
         "each cache of random values (a step's cost depends on the cache's shape, not its values); then come its "
         "fp32 prefills of `size_prompts` tokens. Last, one layer down, the floor its step pays: the step hollowed "
         "(every matrix product and attention a zero tensor) five times with the caches to itself and five times "
         "between its own weights' streams, as chapter 0 timed its models.")
prose.shown(plan.round(2))

# %%
if not (plan.status == "run").any():
    raise ValueError("every size of `sizes` was skipped (" + "; ".join(f"{r.size}: {r.status.removeprefix('skipped: ')}"
                                                             for r in plan.itertuples())
                     + "): give `sizes` smaller models or `size_budget_s` more seconds")
size_rows, prefill_rows, built, profiled, paid_rows, dtype_rows = [], [], [], [], [], []
first_twelve = next((n for n in plan[plan.status == "run"]["size"] if gpt2_sizes.SIZES[n].layers == 12), None)
on_floor = [n for n in plan[plan.status == "run"]["size"] if size_plan.set_index("size").side[n] == "on the floor"]
profiled_size = on_floor[-1] if on_floor else first_twelve  # where the claims on the floor are decided
sweep_started = time.perf_counter()
for p in progress(list(plan[plan.status == "run"].itertuples()), desc="size sweep"):  # one line in a build
    started, faults_before = time.perf_counter(), timing.page_faults()
    models_ = {dt: gpt2_sizes.build(p.size, device, resolve_dtype(dt, device)) for dt in size_dtypes}
    build_s, build_faults = time.perf_counter() - started, timing.page_faults() - faults_before
    counted = gpt2_sizes.operations(models_["fp32"])
    expected = int(size_plan.set_index("size").operations[p.size])
    claims.invariant(counted == expected, f"{p.size} issues {counted} operations a step, not the predicted {expected}")
    caches = {dt: {c: gpt2_sizes.random_cache(models_[dt], c) for c in size_contexts} for dt in size_dtypes}
    with use_threads(threads), contextlib.redirect_stdout(io.StringIO()):  # the sweeps' own lines stay off the page
        for run in progress(range(p.runs), desc=p.size, leave=False):
            for dt in size_dtypes:
                t = sweeps.decode_sweep(models_[dt], list(caches[dt]), steps=size_steps, runs=1, caches=caches[dt],
                                        warmup_steps=1, label=f"{p.size}, {dt}")
                size_rows.append(t.assign(size=p.size, dtype=dt, run=run + 1, step_ms=t.median_s * 1e3))
        pre = sweeps.prefill_sweep(models_["fp32"], size_prompts, repeats=3, label=f"{p.size}, prefill")
        paid = gpt2_sizes.floor_paid(models_["fp32"], short_c, floor_repeats)
        paid_rows += [dict(size=p.size, repeat=i + 1, alone_ms=a * 1e3, between_ms=b * 1e3, reads_ms=r * 1e3,
                           paid_ms=(b - r) * 1e3) for i, (a, b, r) in enumerate(zip(*paid.values()))]
        if p.size == profiled_size and len(size_dtypes) > 1:  # one layer down: where a 16-bit step's time goes
            for dt in size_dtypes:
                kv, token = caches[dt][short_c]

                def one_step(model=models_[dt], kv=kv, token=token) -> None:
                    phases.truncate_cache(kv, short_c)
                    phases.decode(model, token, kv, 1)
                profiled.append(profiling.operators(one_step, passes=5, device=device).assign(dtype=dt))
            for i in range(floor_repeats):  # one layer further down, each dtype in turn: the floor and the products
                for dt in size_dtypes:
                    f = gpt2_sizes.floor_paid(models_[dt], short_c, 1)
                    products = machine.products_between(gpt2_sizes.SIZES[p.size], device, resolve_dtype(dt, device))
                    dtype_rows.append(dict(dtype=dt, repeat=i + 1, floor_ms=(f["between"][0] - f["reads"][0]) * 1e3,
                                           **products))
    prefill_rows.append(pre.assign(size=p.size, time_ms=pre.median_s * 1e3, time_ms_low=pre.low_s * 1e3,
                                   time_ms_high=pre.high_s * 1e3))
    built.append(dict(size=p.size, build_s=build_s, predicted_build_s=p.build_s, build_faults=build_faults,
                      operations=counted,
                      seconds=time.perf_counter() - started, predicted_s=p.predicted_s))
    del models_, caches
    gc.collect()

# %%
sweep_s = time.perf_counter() - sweep_started
pacer.check("after it")
size_runs_table = pd.concat(size_rows, ignore_index=True)[["size", "dtype", "context_tokens", "run", "step_ms",
                                                            "faults_per_step"]]
size_prefill = pd.concat(prefill_rows, ignore_index=True)
built = pd.DataFrame(built)
results.table(size_runs_table, "size_decode_runs")
results.table(size_prefill, "size_prefill")
results.table(built, "size_costs")
floor_runs = pd.DataFrame(paid_rows)
results.table(floor_runs, "size_floor_runs")
fault_us = built.build_s.sum() / max(built.build_faults.sum(), 1) * 1e6
show(f"The sweep took {sweep_s:.0f} s.",
     how=f"The sweep took {sweep_s:.0f} s ({plan.predicted_s.sum():.0f} s predicted), "
     f"{built.build_s.sum():.0f} s of it building weights ({built.predicted_build_s.sum():.0f} s predicted, at chapter "
     f"0's {ceilings.fault_cost('fp32', threads) * 1e6:.1f} us a page fault: the builds took "
     f"{built.build_faults.sum():,.0f} faults, {fault_us:.1f} us of building each); GPT-2 XL "
     + (f"alone {built.set_index('size').seconds['gpt2-xl']:.0f} s." if "gpt2-xl" in set(built["size"]) else
        "was not run: " + plan.set_index("size").status.get("gpt2-xl", "not chosen").removeprefix("skipped: ") + "."))
prose.shown(built.round(2))

# %% [markdown]
# Each size's step (median of its runs, with the 95 % interval of that median) against its price, and where it
# lies between its floor and its weights:

# %%
ran = list(built["size"])
prices_large = (size_plan.set_index("size").step_ms.get("gpt2-large", np.nan)
             / size_plan.set_index("size").step_ms.get("gpt2-small", np.nan))


def step_spread(name: str, dt: str, context: int) -> Spread:
    """The size's step time over its runs, in milliseconds."""
    g = size_runs_table[(size_runs_table["size"] == name) & (size_runs_table.dtype == dt)
                        & (size_runs_table.context_tokens == context)]
    return Spread.of(g.sort_values("run").step_ms)


def paired(name: str, a: tuple, b: tuple) -> Spread:
    """Run by run, size `name`'s step at `a` (dtype, context) over its step at `b`: both ran in the same run."""
    return Spread.paired(step_spread(name, *a), step_spread(name, *b), lambda x, y: x / y)


rows = []
for name in ran:
    pr = size_plan.set_index("size").loc[name]
    measured_ = step_spread(name, "fp32", short_c)
    rows.append(dict(size=name, weight_mb=pr.weight_mb, side=pr.side, floor_ms=pr.floor_ms, weights_ms=pr.weights_ms,
                     predicted_ms=pr.step_ms, step_ms=measured_.mid, step_ms_low=measured_.low,
                     step_ms_high=measured_.high, runs=measured_.n, over_predicted=measured_.mid / pr.step_ms,
                     implied_gb_s=pr.weight_mb / measured_.mid,
                     context_growth=paired(name, ("fp32", long_c), ("fp32", short_c)).mid,
                     predicted_context_growth=pr.context_growth,
                     **({f"{low16}_over_fp32": paired(name, (low16, short_c), ("fp32", short_c)).mid,
                         f"predicted_{low16}_over_fp32": pr[f"{low16}_over_fp32"]} if low16 in size_dtypes else {})))
by_size = pd.DataFrame(rows)
results.table(by_size, "size_decode")
if {"gpt2-small", "gpt2-large"} <= set(ran):
    b = by_size.set_index("size")
    _bytes_x = b.weight_mb['gpt2-large'] / b.weight_mb['gpt2-small']
    _rate = {n: b.weight_mb[n] / b.weights_ms[n] for n in ("gpt2-small", "gpt2-large")}  # priced GB/s
    show(f"The prediction asked for: GPT-2 large's step was priced at **{prices_large:.1f}x** GPT-2 small's and took "
         f"**{b.step_ms['gpt2-large'] / b.step_ms['gpt2-small']:.1f}x**, for {_bytes_x:.1f}x the weight bytes. "
         "The floor and the weights' rates set the price apart from the bytes' ratio.",
         how=f"The floor is {b.floor_ms['gpt2-small']:.1f} ms of small's {b.predicted_ms['gpt2-small']:.1f} ms priced "
             f"step and {b.floor_ms['gpt2-large']:.1f} ms of large's {b.predicted_ms['gpt2-large']:.1f} ms. Chapter 0 "
             f"measured the weights' rates per matrix shape: {_rate['gpt2-small']:.1f} GB/s for small's and "
             f"{_rate['gpt2-large']:.1f} GB/s for large's.")
_ch3 = decode[decode.context_tokens == short_c]  # chapter 3's step of its model at the sweep's short context
if ch2_model in set(by_size["size"]) and len(_ch3) and decode.model.iloc[0] == ch2_model and points_dtype == "fp32":
    _sweep_ms = by_size.set_index("size").step_ms[ch2_model]
    show(f"Two measurements of one step: {ch2_model}'s decode step at context {short_c} took **{_sweep_ms:.1f} ms** "
         f"in this sweep (*the sweep's step*, random weights) and {_ch3.measured_ms.iloc[0]:.1f} ms in chapter 3 "
         "(*chapter 3's step*, the one on the roofline above). The size claims use the sweep's step; chapter 3's was "
         "timed earlier, in runs of its own.",
         how=f"Chapter 3's step over the sweep's: {_ch3.measured_ms.iloc[0] / _sweep_ms:.2f}x. Each is the median of "
             f"its own runs ({int(by_size.set_index('size').runs[ch2_model])} here).")
prose.shown(by_size.round(3))

# %%
prices = size_plan.set_index("size")
series = by_size.merge(size_plan[["size", "layers"]], on="size")
series = series[series.layers == 12]
transition = floors = slopes = None
if len(series) >= 2:
    per_run = size_runs_table[(size_runs_table.dtype == "fp32") & (size_runs_table.context_tokens == short_c)
                              & size_runs_table["size"].isin(series["size"])]
    fits = []
    for run, g in per_run.groupby("run"):
        if g["size"].nunique() < 2:
            continue
        slope, intercept = np.polyfit(prices.weight_mb[g["size"]].to_numpy(), g.step_ms.to_numpy(), 1,
                                      w=1 / g.step_ms.to_numpy())
        fits.append((intercept, slope))
    floors, slopes = Spread.of(f for f, _ in fits), Spread.of(s for _, s in fits)
    transition = Spread.of(max(f, 0.0) / s if s > 0 else 0.0 for f, s in fits)  # MB; no floor seen: 0

fig, ax = plt.subplots(figsize=(9, 9))
mb = np.logspace(math.log10(by_size.weight_mb.min() / 2), math.log10(by_size.weight_mb.max() * 2), 200)
ax.plot(mb, mb / (rate["fp32"] / 1e6) * 1e3, "k:", lw=1, label=f"the weights at the kernel's rate, {rate['fp32'] / 1e9:.1f} GB/s")
ax.plot(mb, mb / (ceilings.stream_bandwidth("fp32", threads) / 1e6) * 1e3, "k-", lw=0.8, alpha=0.5,
        label=f"the weights at the streaming read, {ceilings.stream_bandwidth('fp32', threads) / 1e9:.1f} GB/s")
span12 = size_plan[size_plan.layers == 12].weight_mb
if len(span12):
    priced_mb = np.logspace(math.log10(span12.min() / 1.5), math.log10(span12.max() * 1.5), 50)
    ax.plot(priced_mb, floor_pred + slope_pred * priced_mb, color="C3", ls="--", lw=1,
            label=f"the same line through the 12-layer prices: {floor_pred:.1f} ms + bytes at {1 / slope_pred:.1f} GB/s")
ax.scatter(size_plan.weight_mb, size_plan.floor_ms, marker="v", s=18, color="C7", zorder=3, label="each size's priced floor")
fastest_ = floor_runs.groupby("size", sort=False)[["between_ms", "reads_ms"]].min()
paid_median = fastest_.between_ms - fastest_.reads_ms  # as chapter 0 states a floor: fastest pass less fastest read
ax.scatter(size_plan.set_index("size").weight_mb[paid_median.index], paid_median, marker="x", color="C7", zorder=3,
           label="the floor each size paid (its step hollowed, between its weights' streams; fastest less fastest read)")
if transition is not None:
    twelve_mb = np.logspace(math.log10(span12.min() / 1.5), math.log10(span12.max() * 1.5), 50)
    ax.plot(twelve_mb, floors.mid + slopes.mid * twelve_mb, color="C2", lw=1,
            label=f"the 12-layer steps' fitted line: {floors.mid:.1f} ms + bytes at {1 / slopes.mid:.1f} GB/s")
    ax.axvspan(max(transition.low, 1e-3), transition.high, color="C2", alpha=0.12,
               label=f"the measured transition, {transition.text(',.0f', 'MB')}")
ax.scatter(size_plan.weight_mb, size_plan.step_ms, marker="_", s=300, color="C3", zorder=3, label="each size's price")
ax.errorbar(by_size.weight_mb, by_size.step_ms, yerr=[by_size.step_ms - by_size.step_ms_low,
            by_size.step_ms_high - by_size.step_ms], fmt="o", color="C0", zorder=4,
            label=f"measured, fp32, context {short_c} (median, 95 % interval)")
if low16 in size_dtypes:
    low_steps = [step_spread(n, low16, short_c).mid for n in ran]
    ax.scatter(by_size.weight_mb, low_steps, marker="s", facecolors="none", edgecolors="C1", zorder=4,
               label=f"measured, {low16} (at fp32's weight bytes)")
for r in by_size.itertuples():
    ax.annotate(r.size.replace("gpt2-", ""), (r.weight_mb, r.step_ms), fontsize=7, textcoords="offset points",
                xytext=(5, -10))
ax.axvline(predicted_transition / 1e6, color="C3", lw=0.8, alpha=0.6)
ax.set(xscale="log", yscale="log", xlabel="fp32 weight bytes (MB)", ylabel="decode step (ms)")
ax.set_title(f"{where}: each size's decode step against its weight bytes\n(red line: the transition predicted "
             f"at {predicted_transition / 1e6:,.0f} MB; green band: where the 12-layer steps' line puts it)", fontsize=10)
ax.set_ylim(bottom=min(by_size.step_ms.min(), paid_median.clip(lower=1e-3).min()) / 3)
ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1))  # below the axes: 12 entries
ax.grid(True, which="both", alpha=0.2)
fig.tight_layout()
results.figure(fig, "floor_to_bytes")
plt.show()

# %% [markdown]
# **What the sweep decides.** Each size's step against its price; where the 12-layer models' steps leave their
# floor; what the 16-bit dtype and a longer context do on each side of the transition; and how long a prompt each
# size's prefill stays on its floor, its 1-token pass.

# %%
register.claim(
    "size_steps_as_priced",
    "On average over the sizes, a decode step takes what its price says: its floor (operations at chapter 0's cost) "
    "plus its weights at the kernel's rate (the geometric mean of measured over priced; each size is counted apart).")
floor_said = ("A line through the 12-layer models' steps against their weight bytes (a floor with no bytes, plus a "
              "cost per byte) has its bytes' term equal to its floor (the transition) within a factor of two of where "
              "the same line through their prices has it.")
register.claim("floor_gives_way_where_predicted", floor_said)
sides_said = {}  # each side's two statements, for a run that does not decide them
for where_, text, textbook in (("on_the_floor", "On the floor", "the textbook expects no change there"),
                               ("past_the_floor", "Past the floor", "the textbook expects the bytes' ratio there")):
    sides_said[f"precision_{where_}_as_priced"] = (
        f"{text}, the 16-bit dtype changes the step as its price says (its time over fp32's, run by run, against "
        f"the priced ratio; {textbook}).")
    sides_said[f"context_{where_}_as_priced"] = (
        f"{text}, a step adds the time its cache's price adds from the short context to the long one. Measured as the "
        "milliseconds added over those the price adds, run by run: their geometric mean over the sizes, or their mean "
        "where a run did not grow (a step that did not grow scores 0, one that shrank below 0).")
for claim_, statement_ in sides_said.items():
    register.claim(claim_, statement_)

# %%
register.claim(
    "prefill_floor_length_as_priced",
    "Each size's prefill stays on its floor (within the margin of its one-token pass) up to the prompt length its "
    "price says, within a grid step (the farthest size decides, its length read off the points' medians and the two "
    "ends of their intervals).")

def lean_words(m: Spread, target: float, factor: float) -> str:
    """Where an unresolved measurement's median lies against a prediction allowed a factor either way, in words."""
    x = m.mid / target
    if claims.leaning(m, target / factor, target * factor) != "on the held side":
        return (f"its median, {x:.2f}x the prediction, lies outside the factor of {factor:g}, and the interval is wide "
                "enough to reach back inside")
    far = abs(math.log(x)) > math.log(factor) / 2  # nearer the tolerance's edge than the prediction
    return (f"its median, {x:.2f}x the prediction, lies inside the factor of {factor:g}"
            + (", nearer its edge than the prediction," if far else ",") + " and the interval crosses that edge")


prices = size_plan.set_index("size")
ratios = {n: step_spread(n, "fp32", short_c) * (1 / prices.step_ms[n]) for n in ran}
pooled = claims.geomean_of(list(ratios.values()))
out, straddling = claims.outside(ratios, 1 / claims.PREDICTED_TIME, claims.PREDICTED_TIME)
inside = len(ran) - len(out) - len(straddling)
count = (f"{inside} of {len(ran)} size{'s' * (len(ran) != 1)} {'lies' if inside == 1 else 'lie'} wholly within "
         f"{claims.PREDICTED_TIME}x of {'its' if inside == 1 else 'their'} price"
         + ("; wholly outside it: " + ", ".join(f"{n} {ratios[n].text('.2f', 'x')}" for n in out) if out else "")
         + ("; reaching across its edge: " + ", ".join(f"{n} {ratios[n].text('.2f', 'x')}" for n in straddling)
            if straddling else ""))
worst = max(ratios, key=lambda n: abs(math.log(ratios[n].mid)))
mids = [r.mid for r in ratios.values()]
all_over, all_under = min(mids) > 1, max(mids) < 1
near = [n for n in ran if abs(math.log(ratios[n].mid)) <= math.log(claims.PREDICTED_TIME)]  # medians within it
inside_words = ("all" if len(near) == len(ran) else "most" if 2 * len(near) > len(ran) else
                f"{prose.count(len(near), 'size')} of {len(ran)}" if near else "none")
why = (f"{worst} took {ratios[worst].mid:.2f}x its price; its floor is {prices.floor_ms[worst]:.1f} ms of "
       f"{prices.step_ms[worst]:.1f} priced.")
# each price spans chapter 0's fastest to median calls (as every chapter's cost-model price does): its median over best
price_span = float(np.exp(np.mean([np.log(size_price(n, "fp32", short_c).median / size_price(n, "fp32", short_c).best)
                                   for n in ran])))

# %%
span_top = max(1.0, price_span)  # the price at chapter 0's median calls over its fastest
verdict = register.record(
    "size_steps_as_priced", claims.within(pooled, Spread(1.0, 1.0, span_top), claims.PREDICTED_TIME),
    predicted=f"{1 / claims.PREDICTED_TIME:.2f}x to {span_top * claims.PREDICTED_TIME:.2f}x (1.00x to "
              f"{span_top:.2f}x, the price at chapter 0's fastest and median calls, within {claims.PREDICTED_TIME:g}x)",
    measured=pooled.text(".2f", "x"), evidence=f"{len(ran)} sizes, fp32, context {short_c}, {where}")
show(f"Over the {len(ran)} sizes, from {prices.weight_mb[ran].min():,.1f} MB of weights to "
     f"{prices.weight_mb[ran].max():,.0f} MB, a decode step took **{pooled.text('.2f', 'x')}** its price" + claims.pick(
         verdict, held=": on average the price, a floor plus the weights at the kernel's rate, holds. "
                       + (f"Every size ran {'over' if all_over else 'under'} its price "
                          f"({prose.span(min(mids), max(mids), '.2f')}x), "
                          if all_over or all_under else f"Size by size it ran {prose.span(min(mids), max(mids), '.2f')}x "
                          "its price, ")
                       + (f"{inside_words} by less than a price may miss by; furthest, {worst} at "
                          f"{ratios[worst].mid:.2f}x."),
         not_held=f", more than a price may miss by: {why}" + (f" {pacer.note()}" if pacer.note() else ""),
         unresolved=", too near the edge of what a price may miss by to call."),
     how=f"The geometric mean over the sizes of each size's step over its price at chapter 0's fastest calls, run by "
         f"run, against {1 / claims.PREDICTED_TIME:.2f}x to {span_top * claims.PREDICTED_TIME:.2f}x: the price's span "
         f"from chapter 0's fastest to its median calls (1.00x to {span_top:.2f}x), widened by the tolerance for a "
         f"predicted time, {claims.PREDICTED_TIME:g}x. Size by size, {count}"
         + (f"; the interval's median is "
            f"{claims.leaning(pooled, 1 / claims.PREDICTED_TIME, span_top * claims.PREDICTED_TIME)}."
            if verdict == claims.UNRESOLVED else "."))
quick_ = by_size[by_size.step_ms_high < by_size.weights_ms]  # the whole step faster than its weights alone, as priced
if len(quick_):
    show(f"{', '.join(quick_['size'])} ran faster than {'its' if len(quick_) == 1 else 'their'} weights alone take at "
         "the priced rate: " + "; ".join(
             f"{r.size} {r.step_ms:.1f} ms (at most {r.step_ms_high:.1f}) against {r.weights_ms:.1f} ms for its "
             f"weights, which therefore streamed at **{r.implied_gb_s:.1f} GB/s** at least, against "
             f"{r.weight_mb / r.weights_ms:.1f} priced" for r in quick_.itertuples())
         + f". A step faster than its largest priced term alone means a ceiling is wrong: the rate chapter 0 measured on "
         f"{reference_model}'s matrices understates what these larger matrices stream at. "
         + (f"It does not mean they beat memory: the streaming read is "
            f"{ceilings.stream_bandwidth('fp32', threads) / 1e9:.1f} GB/s."
            if quick_.implied_gb_s.max() < ceilings.stream_bandwidth("fp32", threads) / 1e9 else
            f"They were faster even than chapter 0's streaming read, "
            f"{ceilings.stream_bandwidth('fp32', threads) / 1e9:.1f} GB/s: that ceiling understates the machine too."))


# %% [markdown]
# Where the 12-layer models' steps leave their floor, against where their prices said:

# %%
if len(series) >= 2:
    target = predicted_transition / 1e6
    verdict = claims.within(transition, target, claims.PREDICTED_LENGTH) if transition.low > 0 else (
        claims.NOT_HELD if transition.high < target / claims.PREDICTED_LENGTH else claims.UNRESOLVED)
    at_mb = transition.text(",.0f", "MB")
    verdict = register.record("floor_gives_way_where_predicted", verdict, predicted=f"{target:,.0f} MB",
                              measured=at_mb, evidence=f"{len(series)} 12-layer sizes, {len(fits)} runs, fp32, "
                              f"context {short_c}")
    # the transition is the floor over the cost per MB: each part's own ratio to its price, and whether they cancel
    floor_x, slope_x = floors.mid / floor_pred, slopes.mid / slope_pred
    off_ = lambda x: x > claims.PREDICTED_TIME or x < 1 / claims.PREDICTED_TIME  # noqa: E731
    cancel = off_(floor_x) and off_(slope_x) and (floor_x > 1) == (slope_x > 1)  # both parts miss the same way
    parts_said = (f"the line's start was {floor_x:.2f}x the priced line's and each megabyte {slope_x:.2f}x its price; their ratio, "
                  f"{floor_x / slope_x:.2f}x, is about how far the transition moved ({transition.mid / target:.2f}x)")
    show(f"A line through the 12-layer steps starts at {floors.text('.1f', 'ms')} with no weights. A step takes "
         f"twice that at **{at_mb}** of weights"
         + claims.pick(
             verdict, held=f", where the prices put it ({target:,.0f} MB)."
                           + (f" It lands there partly because both parts missed the same way: {parts_said}." if cancel
                              else ""),
             not_held=f", {transition.mid / target:.2g}x the {target:,.0f} MB the prices put it at: {parts_said}. "
                      "The line's start is not the hollowed step timed alone: the section below times that, size by "
                      "size.",
             unresolved=f", against {target:,.0f} MB by the prices: too close to call."),
         how=f"The line is fitted to the k-th run of each 12-layer size (its intercept the floor, its slope one over the "
             f"rate the bytes seem to stream at, here {1 / slopes.mid:.1f} GB/s); the sizes ran one after another, so a "
             f"run index pairs no common moment. The same line through the prices starts at {floor_pred:.1f} ms and "
             f"rises at {1 / slope_pred:.1f} GB/s. The transition is the floor over the cost per megabyte, so errors "
             f"in the two parts divide out: {parts_said}. Off their prices by more than the tolerance for a predicted "
             f"time ({claims.PREDICTED_TIME:g}x): "
             + ("both parts" if off_(floor_x) and off_(slope_x) else "the floor alone" if off_(floor_x) else
                "the cost per megabyte alone" if off_(slope_x) else "neither part")
             + ". The prediction holds when the measured transition lies within a factor of "
             f"{claims.PREDICTED_LENGTH:g} of the priced one"
             + (f": {lean_words(transition, target, claims.PREDICTED_LENGTH)}." if verdict == claims.UNRESOLVED else "."))
else:
    transition = None
    register.record("floor_gives_way_where_predicted", None, evidence="fewer than two 12-layer sizes ran")
    show(f"{floor_said} This run does not decide it: fewer than two 12-layer sizes ran.")

# %% [markdown]
# Each side of the transition in the 16-bit dtype, and a longer context on the floor and past it, each against
# its price:

# %%
def against_textbook(m: Spread) -> str:
    """A 16-bit step over fp32's on the floor, ``m``, against the textbook's no change (1.00x), in words."""
    slower, v = "slower" if m.mid > 1 else "faster", claims.within(m, 1.0, claims.PREDICTED_RATIO)
    outside = claims.leaning(m, 1 / claims.PREDICTED_RATIO, claims.PREDICTED_RATIO) != "on the held side"
    return {claims.HELD: "the textbook's no change holds too",
            claims.NOT_HELD: f"against the textbook it is clearly {slower}: on this machine the {low16} step itself "
                             f"costs {'more' if m.mid > 1 else 'less'}",
            claims.UNRESOLVED: f"against the textbook, {max(m.mid, 1 / m.mid):.2f}x {slower} is too close to call"}[v]


def textbook_how(m: Spread) -> str:
    """How :func:`against_textbook` decided, for the fold: where the median and the spread lie against 1.00x."""
    outside = claims.leaning(m, 1 / claims.PREDICTED_RATIO, claims.PREDICTED_RATIO) != "on the held side"
    return (f" Against the textbook's 1.00x, within the same tolerance: the median lies "
            + ("beyond" if outside else "within") + " it, and the spread reaches "
            + ("back within it." if outside else "beyond it.")
            if claims.within(m, 1.0, claims.PREDICTED_RATIO) == claims.UNRESOLVED else "")


def added_words(growth: Spread) -> str:
    """The milliseconds a longer context added over those its price adds, in words: a ratio only where every
    reading of it is above zero, since one whose interval crosses zero is not told apart from no time at all."""
    return (f"The longer context added **{growth.mid:.2f}x** the time their price adds" if growth.low > 0 else
            "The time the longer context added is not told apart from none (run by run it lies on both sides of "
            "zero), where their price adds time" if growth.high > 0 else
            "Run by run the longer context took less time, where their price adds time")


# %%
for where_, which in (("on_the_floor", "on the floor"), ("past_the_floor", "past the floor")):
    names = [n for n in ran if prices.side[n] == which]
    precision_, context_ = f"precision_{where_}_as_priced", f"context_{where_}_as_priced"
    at_side = f"{which[:1].upper()}{which[1:]} ({', '.join(names)})"
    if low16 not in size_dtypes or not names:
        why_not = f"no size predicted {which} ran in two dtypes"
        register.record(precision_, None, evidence=why_not)
        show(f"{sides_said[precision_]} This run does not decide it: {why_not}.")
    else:
        measured_ = claims.geomean_of([paired(n, (low16, short_c), ("fp32", short_c)) for n in names])
        priced = claims.geomean(prices[f"{low16}_over_fp32"][names])
        direction = f"; the bytes alone, {rate['fp32'] / rate[low16] / 2:.2f}x"  # past the floor, the textbook's
        below = (" The floor's paragraph below takes it one layer down." if which == "on the floor"
                 and profiled_size in names else "")
        verdict = register.record(precision_, claims.within(measured_, priced, claims.PREDICTED_RATIO),
                                  predicted=f"{priced:.2f}x", measured=measured_.text(".2f", "x"),
                                  evidence=f"{', '.join(names)}; {low16} and fp32 in the same runs, context {short_c}")
        lean = {"on the held side": "the price"}.get(claims.leaning(measured_, *claims.allowed(priced, claims.PREDICTED_RATIO)),
                                                       "a miss")  # an unresolved median's side, in words
        textbook_said = against_textbook(measured_)
        show(f"{at_side} a {low16} step took **{measured_.mid:.2f}x** fp32's time"
             + (f", against {priced:.2f}x priced and the textbook's 1.00x. " + claims.pick(
                 verdict, held="The price holds", not_held="The price misses it",
                 unresolved=f"Against the price it is too close to call, leaning to {lean}")
                + f"; {textbook_said}.{below}"
                if which == "on the floor" else
                f", against {priced:.2f}x priced{direction}" + claims.pick(
                 verdict, held=".", not_held=f": the price misses it.{below}",
                 unresolved=f": too close to call.{below}")),
             how=f"Run by run, the {low16} step over the fp32 step of the same run, "
                 f"{measured_.text('.2f', 'x')}, against the priced ratio within the tolerance for a ratio, "
                 f"{claims.PREDICTED_RATIO:g}x either way"
                 + (f": {lean_words(measured_, priced, claims.PREDICTED_RATIO)}." if verdict == claims.UNRESOLVED
                    else ".") + (textbook_how(measured_) if which == "on the floor" else ""))
    if not names:
        why_not = f"no size predicted {which} ran"
        register.record(context_, None, evidence=why_not)
        show(f"{sides_said[context_]} This run does not decide it: {why_not}.")
        continue
    # the milliseconds added from the short context to the long one, run by run, over the milliseconds the price adds
    added = [Spread.paired(step_spread(n, "fp32", long_c), step_spread(n, "fp32", short_c), lambda a, b: a - b)
             * (1 / ((size_price(n, "fp32", long_c).best - size_price(n, "fp32", short_c).best) * 1e3)) for n in names]
    growth = (claims.geomean_of(added) if all(a.low > 0 for a in added) else  # a run that did not grow: mean
              Spread(*(float(np.mean([getattr(a, k) for a in added])) for k in ("low", "mid", "high"))))
    grew = [paired(n, ("fp32", long_c), ("fp32", short_c)).mid for n in names]
    far_n = max(names, key=lambda n: abs(math.log(max(added[names.index(n)].mid, 1e-3))))
    long_p, short_p = size_price(far_n, "fp32", long_c), size_price(far_n, "fp32", short_c)
    adds = {t.name: (t.best - short_p.term(t.name).best) * 1e3 for t in long_p.terms}
    step_added = Spread.paired(step_spread(far_n, "fp32", long_c), step_spread(far_n, "fp32", short_c),
                               lambda a, b: a - b).mid  # run by run, as the claim measures it
    why_context = (f"Run by run, {far_n}'s step added {step_added:+.2f} ms (the median), where its price adds "
                   + ", ".join(f"{v:+.2f} ms for {k}" for k, v in adds.items() if abs(v) >= 0.005) + ".")
    context_verdict = claims.within(growth, 1.0, claims.PREDICTED_RATIO) if growth.low > 0 else (
        claims.NOT_HELD if growth.high < 1 / claims.PREDICTED_RATIO else claims.UNRESOLVED)  # runs that did not grow
    verdict = register.record(context_, context_verdict, predicted="1.00x",
                              measured=growth.text(".2f", "x"), evidence=f"{', '.join(names)}; fp32, contexts "
                              f"{short_c} and {long_c} in the same runs")
    show(f"{at_side} the fp32 steps grew {prose.span(min(grew), max(grew), '.2f')}x from context {short_c} to "
         f"{long_c}. {added_words(growth)}" + claims.pick(
             verdict, held=", as priced.", not_held=f": a miss. {why_context}", unresolved=": too close to call."),
         how=f"Run by run, the milliseconds a step added over those its price adds (their geometric mean over the "
             f"sizes, {growth.text('.2f', 'x')}), against 1.00x within the tolerance for a ratio, "
             f"{claims.PREDICTED_RATIO:g}x either way"
             + (f": {lean_words(growth, 1.0, claims.PREDICTED_RATIO)}. {why_context}" if verdict == claims.UNRESOLVED
                else "."))

flat, flat_priced, off, readings_by, longest = {}, {}, {}, {}, max(size_prompts)
edge_x = 1 + sweeps.floor_and_knee([1, 2], [1.0, 1.0]).margin  # where a floor ends: a pass over the one-token pass

# %%
for name, g in size_prefill.dropna(subset=["time_ms"]).groupby("size", sort=False):
    # read off the points' medians and off both ends of their intervals, as chapter 2 reads its floor
    readings = readings_by[name] = [sweeps.floor_and_knee(g.prompt_tokens, g[c] / 1e3).flat_until_tokens
                                    for c in ("time_ms_low", "time_ms", "time_ms_high")]
    priced = [gpt2_sizes.price_prefill(ceilings, name, reference_model, int(prices.operations[name]), ops_ref, "fp32",
                                       threads, int(t)).best for t in g.prompt_tokens]
    flat[name], flat_priced[name] = readings[1], sweeps.floor_and_knee(g.prompt_tokens, priced).flat_until_tokens
    factors = [max(r / flat_priced[name], flat_priced[name] / r) for r in readings]  # a factor either way
    bracket = min(readings) <= flat_priced[name] <= max(readings)  # readings on both sides: the price among them
    off[name] = Spread(1.0 if bracket else min(factors), factors[1], max(factors))  # the median's, and the range
farthest = max(off, key=lambda n: (off[n].mid, off[n].low))  # farthest at its median reading
length_verdict = claims.verdict_of(all(v.high <= claims.PREDICTED_LENGTH for v in off.values()),
                                   any(v.low > claims.PREDICTED_LENGTH for v in off.values()))
off_text = f"{off[farthest].text('.0f', 'x')} off"
verdict = register.record("prefill_floor_length_as_priced", length_verdict,
                          predicted=f"at most {claims.PREDICTED_LENGTH:.0f}x off", measured=off_text,
                          evidence=f"{len(flat)} sizes, fp32, prompts of {', '.join(map(str, size_prompts))} tokens (a "
                          "length at the longest tried is a lower bound)")
readings_table = pd.DataFrame({  # the table the sentence counts from: one row a size, a column a reading
    "size": list(flat), "flat to, priced (tokens)": [flat_priced[n] for n in flat],
    "flat to, fast ends (tokens)": [readings_by[n][0] for n in flat], "flat to, medians (tokens)": [flat[n] for n in flat],
    "flat to, slow ends (tokens)": [readings_by[n][2] for n in flat],
    "farthest reading, x off": [off[n].high for n in flat]}).set_index("size")
beyond_all = [n for n, v in off.items() if v.low > claims.PREDICTED_LENGTH]  # beyond a grid step at every reading
beyond_some = [n for n, v in off.items() if v.low <= claims.PREDICTED_LENGTH < v.high]  # at some readings only
within_all = [n for n, v in off.items() if v.high <= claims.PREDICTED_LENGTH]
lengths = ", ".join(f"{'≥' if flat[n] == longest else ''}{flat[n]} ({n})" for n in flat)
lengths_priced = ", ".join(f"{'≥' if flat_priced[n] == longest else ''}{flat_priced[n]}" for n in flat)
by_median = [n for n, v in off.items() if v.mid > claims.PREDICTED_LENGTH]  # beyond a grid step at the medians
way = lambda n: "longer" if flat[n] > flat_priced[n] else "shorter"  # noqa: E731  flat longer or shorter than priced
median_said = (f" By those medians, {prose.count(len(by_median), 'size')} of {len(off)} stayed flat more than a step of "
               f"the grid (a factor of {claims.PREDICTED_LENGTH:g}) from the priced length: "
               + prose.and_list(f"{n}, {off[n].mid:.0f}x {way(n)}" for n in by_median) + "." if by_median else
               f" By those medians, every size stayed flat within a step of the grid (a factor of "
               f"{claims.PREDICTED_LENGTH:g}) of the priced length.")
show(f"A prefill stays on its floor while it costs about its one-token pass. Each size's stayed there up to a "
     f"prompt of {lengths} tokens; its price said {lengths_priced}." + claims.pick(
         verdict, held=" Every size lay within a step of the grid of its price.",
         not_held=f" {prose.and_list(beyond_all)} stayed more than a step of the grid off "
                  f"{'its' if len(beyond_all) == 1 else 'their'} price at both ends of "
                  f"{'its' if len(beyond_all) == 1 else 'their'} measurements' spread, which decides the miss. "
                  "Near the floor's end a pass's growth decides the length: the prompts of 4 tokens, below, show how "
                  "close to the margin the sizes grew.",
         unresolved=" Whether every size lies within a step of the grid of its price is too close to call: "
                    + "; ".join(f"{n}'s readings lie on both sides of its priced {flat_priced[n]} tokens"
                                if min(readings_by[n]) <= flat_priced[n] <= max(readings_by[n]) else
                                f"{n} lies more than a step off at one end of its measurements' spread only"
                                for n in beyond_some) + "."),
     how=f"A floor's length is where a pass first costs more than {edge_x:.2f}x the one-token pass, read "
         "off the points' medians and off both ends of their intervals (the table below); the prediction holds when "
         f"every size's readings lie within a step of the grid (a factor of {claims.PREDICTED_LENGTH:g}) of its priced "
         f"length. Of the table's {len(off)} sizes: beyond a step at the medians, {len(by_median)}"
         + (f" ({prose.and_list(by_median)})" if by_median else "")
         + f"; within a step at every reading, {len(within_all)}; beyond it at every reading, {len(beyond_all)}"
         + (f" ({prose.and_list(beyond_all)})" if beyond_all else "")
         + f"; beyond it at some readings only, {len(beyond_some)}"
         + (f" ({prose.and_list(beyond_some)})" if beyond_some else "") + "." + median_said
         + "".join(f" {n}: {readings_by[n][0]} tokens at the fast end, {readings_by[n][2]} at the slow."
                   for n in beyond_some))
prose.shown(readings_table)


# %% [markdown]
# Every price here rests on chapter 0's ceilings, measured minutes earlier, and a shared machine's speed drifts. So
# the chapter timed the reference model's matrices at one row before the size sweep and after it
# (`lib.machine.Pacer`): a change of speed there moves every price above by about as much.

# %%
show(pacer.claim(register, results, "the size sweep"))

# %% [markdown]
# **Where a price can miss, one layer down.** The sweep timed each size's floor as chapter 0 did: the step
# hollowed, alone and between its own weights' streams. Below, that floor beside its price, a 16-bit step on the
# floor under the profiler, and each prefill's growth from one token to four:

# %%
twelve_sizes = [n for n in ran if gpt2_sizes.SIZES[n].layers == 12]
ops_alone = ceilings.operations(reference_model, "fp32", threads)
# as chapter 0 states a floor: the fastest pass less the fastest read, against the price's fastest
fastest = floor_runs.groupby("size", sort=False)[["alone_ms", "between_ms", "reads_ms"]].min()
floor_table = (pd.DataFrame({"alone_ms": fastest.alone_ms, "paid_ms": fastest.between_ms - fastest.reads_ms})
               .join(size_plan.set_index("size")[["weight_mb", "operations", "floor_ms"]]))
floor_table["paid_over_priced"] = floor_table.paid_ms / floor_table.floor_ms
floor_table["us_per_operation"] = floor_table.paid_ms / floor_table.operations * 1e3
floor_table = floor_table.rename_axis("size").reset_index()
results.table(floor_table, "size_floor")
why_floor, how_floor = "", ""  # each part of the paragraph below: the finding, and how it was read
ref_bytes = machine.MODELS[reference_model][0].with_dtype("fp32").weight_bytes / 1e6
narrower = [n for n in twelve_sizes if size_plan.set_index("size").weight_mb[n] < ref_bytes]
if len(narrower) >= 2:  # where the reads are a small part of the hollowed pass, the difference is the floor's
    twelve_sizes = narrower
twelve_words = f"12-layer models narrower than {reference_model}" if len(narrower) >= 2 else "12-layer models"
if len(twelve_sizes) >= 2:
    f12 = floor_table.set_index("size").loc[twelve_sizes]
    narrow, wide = twelve_sizes[0], twelve_sizes[-1]
    grew = f12.paid_ms[wide] > claims.PREDICTED_TIME * f12.paid_ms[narrow]
    ratio = f12.paid_over_priced
    as_priced = ratio.between(1 / claims.PREDICTED_TIME, claims.PREDICTED_TIME)
    all_paid = floor_table.set_index("size").paid_over_priced  # every size's floor paid over its price
    others = all_paid.drop(twelve_sizes)
    every_word = "Every" if (all_paid > 1).all() else "No" if (all_paid <= 1).all() else "Not every"
    all_said = "" if others.empty else (
        f" {every_word} size's floor ran over its price ({prose.span(all_paid.min(), all_paid.max(), '.2f')}x across "
        f"all {len(all_paid)}).")
    why_floor = (
        f"Alone, a 12-layer step's {twelve} operations took "
        f"**{prose.span(f12.alone_ms.min(), f12.alone_ms.max(), '.1f')} ms** at every width. Between their own "
        f"weights' streams they cost **{f12.paid_ms[narrow]:.1f} ms** at {f12.weight_mb[narrow]:,.0f} MB ({narrow}) "
        f"and **{f12.paid_ms[wide]:.1f} ms** at {f12.weight_mb[wide]:,.0f} MB ({wide}). "
        + ("So on this CPU a wider model pays a higher floor: the floor grows with the bytes streamed between the "
           "operations. "
           if grew else "The floor fell as the weights grew, which the price does not expect. "
           if f12.paid_ms[narrow] > claims.PREDICTED_TIME * f12.paid_ms[wide] else
           f"The floor stayed within {claims.PREDICTED_TIME:g}x of one number across the widths. ")
        + f"The {twelve_words} paid floors of {prose.span(ratio.min(), ratio.max(), '.2f')}x their prices"
        + (", as priced." if as_priced.all() else
           f"; {prose.and_list(ratio.index[~as_priced])} missed by more than {claims.PREDICTED_TIME:g}x.")
        + all_said)
    how_floor_why = (
        ("Why the floor grows is the book's explanation, not measured here: the bytes push the interpreter's and the "
         "small kernels' data out of the faster caches."
         + (f" A line through the steps therefore rises as if the weights streamed at {1 / slopes.mid:.1f} GB/s "
            f"where they stream at {rate['fp32'] / 1e9:.1f}." if slopes is not None else "") + " " if grew else "")
        + ("The price draws the floor on a straight line in the bytes, and the eviction need not grow in proportion "
           "to them. " if len(anchored) > 1 and not as_priced.all() else "")
        + ("" if others.empty else "The other sizes' floors over their prices: "
           + ", ".join(f"{n} {x:.2f}x" for n, x in others.items()) + ". "))
    how_floor = how_floor_why + (
        f"The hollowed step's time is the fastest of {floor_repeats}, {f12.alone_ms.min() / twelve * 1e3:.1f} us an "
        f"operation or more (chapter 0, alone too: {ops_alone[1]:.1f} us for {reference_model}); between the "
        f"weights' streams, {f12.us_per_operation[narrow]:.1f} to {f12.us_per_operation[wide]:.1f} us an operation. "
        + ("A line through the steps does not see one fixed floor: it starts at the floor of a model with no bytes, "
           "and the floor's growth rides on every byte. " if grew else "")
        + (f"The price drew the floor on a straight line in the bytes between chapter 0's {' and '.join(per_operation)}, "
           f"{prose.span(f12.floor_ms.min(), f12.floor_ms.max(), '.1f')} ms across these widths" if len(anchored) > 1 else
           f"The price held chapter 0's cost per operation of {', '.join(per_operation)} at every width, "
           f"{f12.floor_ms.min():.1f} ms")
        + f"; a floor paid is as priced within the tolerance for a predicted time, {claims.PREDICTED_TIME:g}x either way.")
    if reference_model in set(floor_runs["size"]) and reference_model not in twelve_sizes:
        r_ = floor_runs[floor_runs["size"] == reference_model]
        ft = floor_table.set_index("size")
        less_weights = (by_size.set_index("size").step_ms[reference_model]
                        - size_plan.set_index("size").weights_ms[reference_model])
        how_floor += (f" From {reference_model} up the reads are most of the hollowed pass ({r_.reads_ms.min():.1f} of "
                      f"{r_.between_ms.min():.1f} ms for {reference_model}), so its floor is a small difference of two "
                      f"long times: this run puts it at {ft.paid_ms[reference_model]:.1f} ms, chapter 0 at "
                      f"{ceilings.dispatch(reference_model, 'fp32', threads).best * 1e3:.1f}, and the sweep's step less its "
                      f"weights' price leaves {less_weights:.1f} (the table gives every size's).")

# %%
why_dtype, how_dtype, prof_share = "", "", None  # prof_share: the profiler's share of the difference, its top two
if profiled:
    prof = pd.concat(profiled, ignore_index=True)
    results.table(prof, "size_profile")
    per_op = prof.pivot_table(index="operator", columns="dtype", values="self_ms", aggfunc="sum").fillna(0.0)
    extra = (per_op[low16] - per_op["fp32"]).sort_values(ascending=False)
    calls = prof[prof.dtype == low16].set_index("operator").calls
    top = [o for o in extra.index if o != profiling.BETWEEN][:2]
    slower = per_op[low16].sum() > per_op["fp32"].sum()
    prof_share = extra[top].sum() / (per_op[low16].sum() - per_op["fp32"].sum()) if slower else None
    why_prof = (f" One {profiled_size} step under the profiler took {per_op[low16].sum():.1f} ms in {low16} against "
                 f"{per_op['fp32'].sum():.1f} ms in fp32; "
                 + (f"{extra[top].sum() / (per_op[low16].sum() - per_op['fp32'].sum()):.0%} of the difference is "
                    if slower else f"the {low16} step's largest extra operators are ")
                 + " and ".join(f"`{o}`" for o in top)
                 + (f": on this machine those {low16} kernels ran slower than fp32's on the same weights, though they "
                    "read half the bytes" + ("" if slower else f", and the profiler's other operators, its own cost "
                                            "included, more than made up for them") + "."
                    if extra[top].sum() > 0 else "."))
    how_dtype = (why_prof.strip() + " Under the profiler: " + " and ".join(
        f"`{o}` +{extra[o]:.2f} ms over {calls.get(o, 0):.0f} call{'' if calls.get(o, 0) == 1 else 's'}" for o in top)
                 + (f", {extra[profiling.BETWEEN]:+.2f} ms between operators"
                    if slower and abs(extra.get(profiling.BETWEEN, 0.0)) >= 0.01 else "")
                 + "; the profiler adds its own cost to every call, most of a step this small: compare parts, not "
                   "totals.")
if dtype_rows:  # the price's two halves, measured again with the dtypes in turn
    dtype_down = pd.DataFrame(dtype_rows)
    results.table(dtype_down, "size_dtype_floor")
    d_ = dtype_down.groupby("dtype")[["floor_ms", "alone_us", "between_us"]].median()
    n_products = int(dtype_down.products.iloc[0])
    priced_ = {dt: size_price(profiled_size, dt, short_c) for dt in size_dtypes}
    floor0 = {dt: priced_[dt].term("dispatch").best * 1e3 for dt in size_dtypes}
    blocks0 = {dt: priced_[dt].term("block matrices").best * 1e3 for dt in size_dtypes}
    repriced = {dt: priced_[dt].best * 1e3 - floor0[dt] - blocks0[dt] + d_.floor_ms[dt]
                + n_products * d_.between_us[dt] / 1e3 for dt in size_dtypes}
    took_ = by_size.set_index("size")[f"{low16}_over_fp32"][profiled_size]
    _sh = gpt2_sizes.SIZES[profiled_size].with_dtype(low16)
    bytes_us = _sh.layers * _sh.block_params * _sh.bytes_per_param / n_products / ceilings.stream_bandwidth(low16, threads) * 1e6
    why_dtype += (
        f" On the floor, {profiled_size}'s {n_products} block products cost **{d_.alone_us[low16]:.0f} us** a call in "
        f"{low16} against "
        f"{d_.alone_us['fp32']:.1f} us in fp32"
        + (f": at this size a {low16} product costs its kernel's fixed cost per call, not its bytes ({bytes_us:.1f} us "
           "at chapter 0's streaming read)." if d_.alone_us[low16] > 2 * bytes_us else
           f", about its bytes at chapter 0's streaming read ({bytes_us:.1f} us).")
        + f" With this run's floors and products in place of chapter 0's, the price's ratio would be "
        f"**{repriced[low16] / repriced['fp32']:.2f}x** against the {took_:.2f}x measured "
        f"({priced_[low16].best / priced_['fp32'].best:.2f}x priced).")
    how_dtype += (
        f" One layer further down, the two dtypes in turn ({floor_repeats} times each): {profiled_size}'s hollowed "
        f"step, its floor as the price counts it (between its weights' streams, less them; the median of "
        f"{floor_repeats}), took {d_.floor_ms[low16]:.2f} ms in {low16} and {d_.floor_ms['fp32']:.2f} ms in "
        f"fp32 ({d_.floor_ms[low16] / d_.floor_ms['fp32']:.2f}x), where the price took chapter 0's floors, each timed "
        f"in its own minutes, {floor0[low16]:.2f} and {floor0['fp32']:.2f} ms ({floor0[low16] / floor0['fp32']:.2f}x). "
        f"The block products were timed back to back, as chapter 0 times them, and cost {d_.between_us[low16]:.0f} us "
        f"with a step's small kernels between them ({d_.between_us['fp32']:.1f} us in fp32); chapter 0's cost "
        f"{blocks0[low16] / n_products * 1e3:.0f} us a call in {low16}, {blocks0['fp32'] / n_products * 1e3:.1f} in fp32.")
    apart_ = {dt: step_spread(profiled_size, dt, short_c).mid for dt in size_dtypes}  # the steps' medians, ms
    gap_, placed_ = apart_[low16] - apart_["fp32"], repriced[low16] - repriced["fp32"]
    why_dtype += ("" if gap_ <= 0 else
                  f" The {low16} step is {gap_:.2f} ms slower than fp32's, yet these parts cost "
                  f"{-placed_:.2f} ms less in {low16}: the whole difference shows only in the whole step, in no part "
                  f"timed here on its own." if placed_ < 0 else
                  f" Of the {gap_:.2f} ms between the two steps, these parts, timed without the profiler, place "
                  f"{placed_:.2f} ms; the other {gap_ - placed_:.2f} ms shows only in the whole step, in no part timed "
                  "here on its own."
                  if gap_ - placed_ > claims.NOISE * gap_ else
                  f" These parts add up to {placed_:.2f} ms, more than the {gap_:.2f} ms between the two steps."
                  if placed_ - gap_ > claims.NOISE * gap_ else
                  f" These parts place the {gap_:.2f} ms between the two steps.")
    if prof_share is not None and gap_ - placed_ > claims.NOISE * gap_ > 0 and placed_ >= 0:
        how_dtype += (f" The profiler's {prof_share:.0%} is a share of its own step, slowed by what it adds to every "
                      "call; timed alone the same kernels account for less.")
growth_rows = []
for name, g in size_prefill.dropna(subset=["time_ms"]).groupby("size", sort=False):
    g = g.set_index("prompt_tokens").time_ms
    if 1 in g.index and 4 in g.index:
        price = [gpt2_sizes.price_prefill(ceilings, name, reference_model, int(size_plan.set_index("size").operations[name]),
                                          ops_ref, "fp32", threads, t).best for t in (1, 4)]
        growth_rows.append(dict(size=name, measured_4_over_1=g[4] / g[1], priced_4_over_1=price[1] / price[0]))
why_prefill, how_prefill = "", ""

# %%
if growth_rows:
    gr = pd.DataFrame(growth_rows)
    results.table(gr, "size_prefill_growth")
    gr["as_priced"] = [claims.within(r.measured_4_over_1, r.priced_4_over_1, claims.PREDICTED_RATIO) == claims.HELD
                       for r in gr.itertuples()]
    agree, miss = gr[gr.as_priced], gr[~gr.as_priced]
    grew_said = "; ".join(f"{r.size} grew {'more' if r.measured_4_over_1 > r.priced_4_over_1 else 'less'}"
                          for r in miss.itertuples())
    why_prefill = (" From one token to four, "
                   + ("every size's prefill grew as priced." if not len(miss) else
                      f"no size's prefill grew as priced: {grew_said}." if not len(agree) else
                      f"{prose.and_list(agree['size'])} grew as priced; {grew_said}.")
                   + f" A growth near the {edge_x:.2f}x margin that ends a floor moves its length by a grid step or "
                     "more.")
    how_prefill = ("A prompt of 4 tokens took " + ", ".join(f"{r.measured_4_over_1:.2f}x ({r.size})"
                                                           for r in gr.itertuples())
                   + " the one-token pass, against " + ", ".join(f"{r.priced_4_over_1:.2f}x" for r in gr.itertuples())
                   + " priced. "
                   + (f"{reference_model}'s price is chapter 0's own kernels unscaled, so its miss lies between those "
                      "kernels timed alone and the same kernels inside a pass; this run does not take it apart. "
                      if reference_model in set(miss["size"]) else "")
                   + f"A size grew as priced where its 4-token pass over its 1-token pass lies within the tolerance "
                   f"for a ratio, {claims.PREDICTED_RATIO:g}x either way, of the priced ratio; a floor's length is "
                   "read off the points' medians and off both ends of their intervals, as in the table above.")
show("\n\n".join(part.strip() for part in (why_floor, why_dtype, why_prefill) if part.strip()),  # a paragraph each
     how="\n\n".join(part.strip() for part in (how_floor, how_dtype, how_prefill) if part.strip()) or None)
prose.shown(floor_table.round(3))

# %% [markdown]
# **Takeaway: before expecting fewer bytes to speed up a decode step, set its weights' time at the kernel's rate
# beside its floor, and measure where the two meet. The transition depends on the machine (its cost per operation,
# its rate) and, on a CPU, on the model's size too.**

# %% [markdown]
# ## Two designs priced with the same calculator: a mixture of experts, and tensor parallelism
#
# Neither runs on this machine, but both are arithmetic: each changes the cost model's price of the page's own dense
# decode step. The example model is an **assumption**: chapter 2's model with its feed-forward network turned into
# `moe_experts` experts of the same size, `moe_active` of them per token, routed uniformly.
#
# * **Mixture of experts.** A step of one sequence reads the attention weights, the LM head and only the active
#   experts. A batch reads every expert at least one of its tokens chose: on average `E x (1 - (1 - k/E)^B)` of the
#   `E` per layer at batch `B`.
# * **Tensor parallelism** over `N` devices: each device reads `1/N` of every weight matrix and of the caches, but
#   still issues every layer's operations, so its floor (the dispatch) does not divide. Every layer adds two
#   all-reduces of the activations over a link. This machine has no link to measure, so the link is an
#   **assumption** too, its best case: chapter 0's streaming copy, and one issued operation's cost as its latency.

# %%
example = machine.MODELS[model_name][0].with_dtype(points_dtype)  # the shape chapter 2 ran, in the points' dtype
kernel_rate = ceilings.weight_rate(model_name, points_dtype, threads)  # its matrix-vector products, bytes/s
link = ceilings.stream_bandwidth(points_dtype, threads, "copy")  # the assumed link: chapter 0's streaming copy
latency = ops_alone[1] / 1e6  # the assumed all-reduce latency: chapter 0's cost of one issued operation, seconds
expert = (3 if example.gated_ffn else 2) * example.d_model * example.d_ff  # one expert's weights, per layer
shared = example.matmul_params - example.layers * expert  # attention matrices and LM head: read at every step
moe_context = size_contexts[-1]


dense = costmodel.CostModel(ceilings, model_name, example, points_dtype, threads)
dense_bytes = example.matmul_params * example.bytes_per_param  # the dense model's weights, as the byte counts count them
dense_flops = 2 * example.matmul_params  # per token, in its matrices


def priced_step(batch: int, weight_bytes: float = dense_bytes, weight_flops: float = dense_flops,
                devices: int = 1) -> dict:
    """The cost model's price of the page's dense decode step at `batch` sequences of `moe_context` tokens, changed
    as a design changes it, on each of `devices` holding 1/N of its weights and caches. Its weights: the larger of
    `weight_bytes` at the rate one row streams the dense weights and the dense matrices' price scaled to
    `weight_flops` per token (the cost model's matrices at F(rows) where the batch makes them arithmetic), 1/N each.
    Its floor: the dense step's dispatch at the cost per operation of the bytes each device streams between its
    operations (`lib.sizes.operation_cost`: on this CPU the floor grows with them, as the size sweep found); every
    device issues every operation. The rest (attention, the cache's copy, page faults): 1/N each. Milliseconds."""
    pred = dense.decode(moe_context, batch=batch)
    dispatch = pred.term("dispatch").best
    per_op = lambda b: gpt2_sizes.operation_cost(ceilings, b, points_dtype, threads, "decode", batch, model_name)[0]
    floor = dispatch * per_op(weight_bytes / devices) / per_op(dense_bytes)
    matrices = sum(pred.term(name).best for name in ("block matrices", "LM head"))
    one_row = dense.kernel("blocks", 1).best + dense.kernel("head", 1).best  # the dense weights, streamed at one row
    by_bytes, by_flops = one_row * weight_bytes / dense_bytes, matrices * weight_flops / dense_flops
    weights = max(by_bytes, by_flops) / devices
    rest = (pred.best - dispatch - matrices) / devices
    return dict(floor_ms=floor * 1e3, weights_ms=weights * 1e3, cache_ms=rest * 1e3, bytes_ms=(weights + rest) * 1e3,
                limit="bytes" if by_bytes >= by_flops else "arithmetic")


alone_step = priced_step(1)
show(f"The example mixture: **E = {moe_experts}** experts per layer, **k = {moe_active}** active per token (the "
     f"parameters `moe_experts` and `moe_active`). Both designs start from the cost model's price of the dense "
     f"{example.name}'s decode step at batch 1 and context {moe_context} on one device, "
     f"**{prose.ms((alone_step['floor_ms'] + alone_step['bytes_ms']) / 1e3)}**. The assumed link between devices: "
     f"**{link / 1e9:.1f} GB/s** and **{latency * 1e6:.1f} us** per all-reduce, two all-reduces in each of its "
     f"{example.layers} layers.", how=f"The dense step's price: its floor, the dispatch chapter 0 measured, at "
     f"context {moe_context} (**{prose.ms(alone_step['floor_ms'] / 1e3)}**), its weights ({prose.ms(alone_step['weights_ms'] / 1e3)}, at "
     f"the rate its matrix-vector products stream, **{kernel_rate / 1e9:.1f} GB/s**) and attention and the cache's "
     f"copy ({prose.ms(alone_step['cache_ms'] / 1e3)}), at context {moe_context} with no page faults counted (the "
     f"roofline table above prices the middle of a run's context, with the faults it counted). A design's weights "
     f"cost the larger of their bytes at that rate and their arithmetic at the rate the cost model gives the dense "
     f"matrices; its floor, the dispatch at the cost per operation of the bytes streamed between the operations "
     f"(the size sweep above found it grows with them)"
     + (f", drawn between the models chapter 0 measured and held at the largest one's ({anchored[-1][0]}, "
        f"{anchored[-1][1] / 1e6:,.0f} MB) beyond it" if anchored else "") + ". The link's bandwidth is chapter 0's "
     "streaming copy, and its latency chapter 0's cost of issuing one operation alone: a best case.")

# %% [markdown] tags=["predict"]
# **Predict first.** With the `E` and `k` just printed, at batch 1, what fraction of the experts' weights does a
# step read? At batch 16? Split over 4 devices, how many times quicker than on one do you expect the batch-1 step
# just priced to be, once each layer's two all-reduces are paid?

# %%
def moe_step(batch: int) -> tuple[roofline.Cost, float]:
    """One decode step of the example mixture at `batch` sequences of `moe_context` tokens, and the experts it reads
    per layer on average (routing uniform and independent): a `roofline.Cost`, FLOPs and bytes."""
    read_experts = moe_experts * (1 - (1 - moe_active / moe_experts) ** batch)
    flops = batch * (2 * (shared + example.layers * moe_active * expert) + example.layers * 4 * example.d_model * moe_context)
    nbytes = ((shared + example.layers * read_experts * expert) * example.bytes_per_param
              + example.kv_bytes_per_token * moe_context * batch)
    return roofline.Cost("decode", flops, nbytes, batch), read_experts


# %%
rows = []
for b in moe_batches:
    cost, experts_read = moe_step(b)
    price = priced_step(b, weight_bytes=(shared + example.layers * experts_read * expert) * example.bytes_per_param,
                        weight_flops=2 * (shared + example.layers * moe_active * expert))
    rows.append(dict(batch=b, experts_read=experts_read, step_mb=cost.bytes / 1e6, **price,
                     step_ms=price["floor_ms"] + price["bytes_ms"]))
moe = pd.DataFrame(rows)
moe["ms_per_token"] = moe.step_ms / moe.batch
all_read = (shared + example.layers * moe_experts * expert) * example.bytes_per_param  # every expert's weights
active_only = (shared + example.layers * moe_active * expert) * example.bytes_per_param
results.table(moe, "mixture_of_experts_decode")
first_, last_ = moe.iloc[0], moe.iloc[-1]
low_ = moe.loc[moe.ms_per_token.idxmin()]  # the batch a token costs least at
most = moe[moe.experts_read >= 0.9 * moe_experts]
show(f"At batch {int(first_.batch)} the mixture's step reads **{first_.experts_read:.1f} of {moe_experts}** experts "
     f"per layer, {first_.step_mb:,.0f} MB, in **{first_.step_ms:.1f} ms**. At batch {int(last_.batch)} it reads "
     f"{last_.experts_read:.1f} of {moe_experts}, {last_.step_mb:,.0f} MB, in {last_.step_ms:.1f} ms"
     + (f"; from batch {int(most.batch.iloc[0])} on it reads nearly every expert" if len(most) else
        ", still short of every expert")
     + ". Only once every expert is read does a larger batch add no weight bytes, as for a dense model. Per token the "
     f"step costs {first_.ms_per_token:.1f} ms at batch {int(first_.batch)} and {last_.ms_per_token:.2f} ms at "
     f"{int(last_.batch)}"
     + (f", least at batch {int(low_.batch)} ({low_.ms_per_token:.2f} ms); beyond it the caches' work grows faster than "
        "the batch shares the weights" if low_.batch < last_.batch else "") + ".",
    how=f"The example: {example.name}'s shape with {moe_experts} experts of "
        f"{expert * example.layers * example.bytes_per_param / 1e6:,.0f} MB each (all layers), {moe_active} active: "
        f"{all_read / 1e6:,.0f} MB of weights in all, of which one token uses {active_only / 1e6:,.0f} MB. Nearly "
        "every expert means 90 % or more. "
        + f"At batch {int(first_.batch)}: the floor {first_.floor_ms:.1f} ms, {first_.weights_ms:.1f} ms of weights (set "
        f"by their {first_.limit}) and {first_.cache_ms:.1f} ms of cache work. At batch {int(last_.batch)}: the floor "
        f"{last_.floor_ms:.1f} ms, {last_.weights_ms:.1f} ms of weights (set by their {last_.limit}) and "
        f"{last_.cache_ms:.1f} ms of its {int(last_.batch)} caches' work"
        + (f"; at batch {int(low_.batch)} the caches' work was {low_.cache_ms:,.0f} ms of the step"
           if low_.batch < last_.batch else "") + ". The table below gives every batch.")
prose.shown(moe.round(2).set_index("batch"))

# %% [markdown]
# Tensor parallelism, for the page's own (dense) model at batch 1, over `tp_devices` devices:

# %%
def tp_step(devices: int, batch: int = 1) -> dict:
    """A decode step of the page's model split over `devices` (weights and caches 1/N each; every operation issued on
    every device, each at the cost of the bytes that device streams), and the two all-reduces per layer it adds (ring:
    each device sends 2(N-1)/N of the activations), in milliseconds."""
    each = priced_step(batch, devices=devices)
    moved = 2 * (devices - 1) / devices * batch * example.d_model * example.bytes_per_param
    comm = 0.0 if devices == 1 else 2 * example.layers * (latency + moved / link)
    return dict(devices=devices, floor_ms=each["floor_ms"], bytes_ms=each["bytes_ms"], communication_ms=comm * 1e3,
                step_ms=each["floor_ms"] + each["bytes_ms"] + comm * 1e3)


tp = pd.DataFrame([tp_step(n) for n in tp_devices])
tp["speedup"] = tp.step_ms.iloc[0] / tp.step_ms
tp["floor_share"] = tp.floor_ms / tp.step_ms
tp["communication_share"] = tp.communication_ms / tp.step_ms
# the latency per all-reduce at which a layer's two cost as long as that device's share of the bytes, microseconds
tp["break_even_us"] = (tp.bytes_ms / (2 * example.layers) * 1e3).where(tp.devices > 1)
results.table(tp, "tensor_parallel_decode")
one_, top_ = tp.iloc[0], tp.iloc[-1]
best_n = tp.loc[tp.step_ms.idxmin()]
show(f"{example.name} at batch 1, context {moe_context}: on {int(one_.devices)} device{'s' if one_.devices > 1 else ''} a "
     f"step is priced at **{prose.ms(one_.step_ms / 1e3)}**; on {int(top_.devices)} it is **{top_.speedup:.1f} times "
     f"quicker**, not {top_.devices / one_.devices:.0f}. Each device reads {one_.bytes_ms / top_.bytes_ms:.0f} times fewer "
     f"bytes, but still issues every layer's operations, so the floor only falls from {prose.ms(one_.floor_ms / 1e3)} "
     f"to {prose.ms(top_.floor_ms / 1e3)}, {top_.floor_share:.0%} of the step. "
     + (f"The quickest split here is {int(best_n.devices)} devices: past it the all-reduces cost more than the bytes "
        "they save. " if best_n.devices < top_.devices else "")
     + f"Over a real link, at **{top_.break_even_us:,.0f} us** an all-reduce the {2 * example.layers} all-reduces take "
     f"as long as the bytes each of {int(top_.devices)} devices still reads. The more devices, the sooner the link, "
     "not the memory, sets the step.",
     how=f"On one device the floor is {prose.ms(one_.floor_ms / 1e3)} and the bytes {prose.ms(one_.bytes_ms / 1e3)}. "
         f"Split, each operation is priced cheaper with fewer bytes streamed between them, as the size sweep found. At "
         f"the assumed {latency * 1e6:.1f} us and {link / 1e9:.1f} GB/s, the {2 * example.layers} all-reduces add "
         f"{top_.communication_ms:.2f} ms on {int(top_.devices)} devices, {top_.communication_share:.0%} of the step; "
         "the latency at which they cost as much as the bytes is the table's *break_even_us* column. At that latency "
         f"the {int(top_.devices)}-device split would be "
         f"{one_.step_ms / (top_.step_ms + top_.bytes_ms - top_.communication_ms):.1f} times quicker than one device, "
         f"each device's bytes then taking {prose.ms(top_.bytes_ms / 1e3)}."
         + ("" if best_n.devices < top_.devices else " The most devices tried is the quickest split here: the bytes "
            "divide by N, the floor falls by less and the all-reduces grow."))
prose.shown(tp.round(3).set_index("devices"))

# %% [markdown]
# **Takeaway: a single sequence's decode reads only its active experts, but a batch reads the union of its tokens'
# experts, so its bytes grow with the batch until every expert is read. Tensor parallelism divides decode's bytes
# by the devices but not its floor, and adds a cost per layer, so the gain shrinks as the bytes per device do.**

# %% [markdown]
# ## What these numbers do not show
#
# * **Real kernels on the course's GPUs**: the tables are lower bounds from datasheet peaks, without activations,
#   launches, communication or the runtime's share of memory.
# * **Other dtypes and thread counts**: this page places one of each (`dtype`, `threads`).

# %%
largest = gpt2_sizes.SIZES[ran[-1]]  # the largest size the sweep ran (they run smallest first)
show(f"* **Models past {ran[-1]}**: the size sweep ran {len(ran)} of {len(plan)} sizes and stops at "
     + (f"{largest.matmul_params / 1e9:.2g} billion" if largest.matmul_params >= 1e9 else
        f"{largest.matmul_params / 1e6:,.0f} million") + f" parameters ({largest.weight_bytes / 1e9:.1f} GB in fp32)"
     + "".join(f"; it skipped {r.size}: {r.status.removeprefix('skipped: ')}" for r in skipped.itertuples())
     + ". A larger model's step would sit further along its bytes' line, and its floor would be a smaller share "
       "still.")

# %% [markdown]
# * **One moment**: chapter 0's ceilings and chapters 2 and 3's times were measured minutes apart; compare regimes,
#   not third digits.
#
# ## Takeaways
#
# * A pass's roofline bound is the larger of FLOPs over the FLOP rate and bytes over the bandwidth. A weight
#   matmul's intensity is about the number of tokens it carries.
# * Batching lifts decode toward the ridge only while the caches are small beside the weights.
# * On a real machine, price each pass from the kernels it runs and label it with one rule before explaining it.
# * Price a decode step as its floor plus its weights' time at the kernel's rate, and test both parts across model
#   sizes: the transition is their ratio, so it can land where it was priced while both parts are off by the same
#   factor. Check each part's own price before trusting a model size you have not measured.
# * Halving the bytes pays only where the 16-bit kernel streams at least half as fast as fp32's: compare chapter
#   0's two rates before choosing a 16-bit dtype for decode.
#
# ## Check yourself
#
# 1. Why is the arithmetic intensity of a weight matmul close to the number of tokens it processes?
#
# <details><summary>Answer</summary>
#
# Every weight is fetched once per pass but used in one multiply-add, two FLOPs, per token row. With two bytes per
# weight, FLOPs per byte come to about the row count: the prompt length in prefill, the batch in decode. With four
# (fp32, as this machine's table above), half the row count: 0.5 for a decode step.
# </details>
#
# 2. A team summarises documents: 30,000-token prompts and 200-token answers, on the course's GPU. Which phase
#    should they work on first?

# %% jupyter={"source_hidden": true} tags=["answer"]
summary_prompt, summary_output = 30_000, 200
alone = roofline.request_split(llama8, gpu, summary_prompt, summary_output)
summary_batch = roofline.batch_that_fits(llama8, gpu, summary_prompt + summary_output)
together = roofline.request_split(llama8, gpu, summary_prompt, summary_output, batch=summary_batch)
display(Markdown(
    f"<details><summary>Answer</summary>\n\nOn {gpu.name}s, one request "
    f"alone spends {alone.prefill_s * 1e3:.0f} ms in prefill and {alone.decode_s * 1e3:.0f} ms in decode at the "
    f"roofline: at batch 1, {'decode' if alone.decode_s > alone.prefill_s else 'prefill'} is the larger part. The "
    f"course's answer, that prefill dominates, assumes a server that batches decode: with the {summary_batch} "
    f"requests whose caches fit in "
    f"{gpu.memory_bytes / 1e9:.0f} GB, the weights' bytes are shared while each prompt's arithmetic is not, and "
    f"prefill is **{together.prefill_share:.0%}** of the time. "
    + ("So on a server prefill dominates: prefix caching and faster attention pay off first." if
       together.prefill_share > 0.5 else "Even batched, decode is the larger part: work on decode first.")
    + "\n</details>"))

# %% [markdown]
# ## Try it
#
# * Set `course_gpu = "H200"`: the same FLOP rate with more bandwidth. Where do the ridge, the prefill crossover and
#   decode's bandwidth bound go?

# %% jupyter={"source_hidden": true} tags=["answer"]
_h = roofline.HARDWARE["H200"]
_fits = roofline.batch_that_fits(big, _h, 1)
_moved = (f"The {_h.name} has {_h.flops / gpu.flops:.2f}x the {gpu.name}'s FLOP rate and {_h.bandwidth / gpu.bandwidth:.2f}x "
          f"its bandwidth, so the ridge falls from {gpu.ridge:.0f} to **{_h.ridge:.0f} FLOP/byte** and prefill turns "
          f"compute-bound at **{roofline.prefill_crossover(llama8, _h)} tokens** instead of "
          f"{roofline.prefill_crossover(llama8, gpu)}. Decode's bandwidth bound falls with the bandwidth alone, from "
          f"{roofline.decode_floor(llama8, gpu) * 1e3:.2f} to **{roofline.decode_floor(llama8, _h) * 1e3:.2f} ms** a "
          f"step. " if _h is not gpu else f"This page already uses the {_h.name}: its tables above are the answer. ")
display(Markdown(
    f"<details><summary>What to expect</summary>\n\n{_moved}Its {_h.memory_bytes / 1e9:.0f} GB change the capacity "
    f"question too: {big.name}'s {big.weight_bytes / 1e9:,.0f} GB of weights "
    + (f"fit on one, with room for {_fits:,} tokens of cache." if _fits > 0 else "still do not fit on one.")
    + "\n</details>"))

# %% [markdown]
# * Add contexts 512, 1,024 and 4,096 to `batch_contexts`: beyond which context can Llama-3-8B's decode not reach
#   the ridge at any batch?

# %% jupyter={"source_hidden": true} tags=["answer"]
_contexts = sorted(set(batch_contexts) | {512, 1024, 4096})
_limit = {c: roofline.decode_intensity_limit(llama8, c) for c in _contexts}
_lo, _hi = 0, 1 << 24  # the longest context whose limit still reaches the ridge, by bisection (it falls with the context)
while _hi - _lo > 1:
    _mid = (_lo + _hi) // 2
    _lo, _hi = (_mid, _hi) if roofline.decode_intensity_limit(llama8, _mid) >= gpu.ridge else (_lo, _mid)
_never = [c for c in _contexts if _limit[c] < gpu.ridge]
_reach = [c for c in _contexts if _limit[c] >= gpu.ridge]
display(Markdown(
    "<details><summary>What to expect</summary>\n\nAs the batch grows, decode's intensity levels off at one "
    "sequence's FLOPs over its cache bytes, and that limit falls as the context grows: past "
    f"**{_lo:,} tokens** it is below the {gpu.name}'s ridge of {gpu.ridge:.0f} FLOP/byte, so no batch gets there. "
    + (f"Of the contexts then in `batch_contexts`, {_never[0]:,} is the first beyond it (a limit of "
       f"{_limit[_never[0]]:.0f} FLOP/byte)" if _never else "Every context then in `batch_contexts` still reaches it")
    + (f", while at {_reach[-1]:,} tokens {roofline.batch_to_reach_ridge(llama8, gpu, _reach[-1]):.0f} sequences reach "
       f"the ridge, and {roofline.batch_that_fits(llama8, gpu, _reach[-1]):,} fit in its memory." if _reach else ".")
    + "\n</details>"))

# %% [markdown]
# * Set `threads = 1` (after running chapters 2 and 3 with one thread): which measured passes change regime?

# %% jupyter={"source_hidden": true} tags=["answer"]
_t1 = ceilings.table
_priced = device.type != "cuda" and threads != 1 and ((_t1.threads == 1) & (_t1.dtype == points_dtype)).any()
_changed, _n = [], 0
_batched1 = load_table("03_decode_sweep", "batched_decode", quick=quick)
_batched1 = _batched1 is not None and ((_batched1.threads == 1) & (_batched1.dtype == points_dtype)).any()
if _priced:  # chapters 2 and 3 timed one thread too: label those passes by the same rule, at one thread's ceilings
    _peak1, _read1 = ceilings.square_flops(points_dtype, 1), ceilings.stream_bandwidth(points_dtype, 1, bandwidth_kernel)
    for _series, _section, _name, _col in (("prefill", "02_prefill_sweep", "prefill_sweep", "time_ms"),
                                           ("decode", "03_decode_sweep", "decode_sweep", "step_ms")):
        _rows = load_table(_section, _name, quick=quick)
        _rows = pd.DataFrame(columns=["dtype", "threads"]) if _rows is None else _rows
        _rows = _rows[(_rows.dtype == points_dtype) & (_rows.threads == 1)]
        _model = (prefill if _series == "prefill" else decode).model.iloc[0]
        _shape = machine.MODELS[_model][0].with_dtype(points_dtype)
        _cm = costmodel.CostModel(ceilings, _model, _shape, points_dtype, 1)
        for _r in (_rows[_rows.cache == "dynamic"] if "cache" in _rows else _rows).itertuples():
            _tok = int(_r.prompt_tokens if _series == "prefill" else _r.context_tokens)
            _f = getattr(_r, "faults", getattr(_r, "faults_per_step", None))
            _f = None if _f is None or not np.isfinite(_f) else float(_f)
            _mid = _tok + steps_of["steps"] // 2
            _cost, _pred = ((roofline.prefill_cost(_shape, _tok, logits="last"), _cm.prefill(_tok, fresh_pages=_f))
                            if _series == "prefill" else
                            (roofline.decode_cost(_shape, 1, _mid), _cm.decode(_mid, batch=1, fresh_pages=_f)))
            _label = regime.regime(Spread.in_row(_r, _col, 1e-3), _pred,
                                   intensity=_cost.intensity, balance=_peak1 / _read1)  # one thread's ridge
            _shown = point_regime(_label, _pred, _series, getattr(_r, f"{_col}_low") / 1e3, _cost.bytes, _read1,
                                  _shape.weight_bytes, getattr(_r, f"{_col}_high") / 1e3)
            _now = points[(points.series == _series) & (points.tokens == _tok) & (points.batch == 1)]
            if len(_now):
                _n += 1
                _was = _now.regime.iloc[0]
                if _was != _shown:
                    _slowed = getattr(_r, _col) / _now.measured_ms.iloc[0]  # this pass, one thread over all
                    _floor_test = {_was, _shown} <= BYTES_LABELS  # both labels say its bytes lead
                    _changed.append(f"the {_series} at {prose.tokens(_tok)} ({_was} at {threads} threads, {_shown} "
                                    f"at one: " + (f"it slowed {_slowed:.2f}x while the streaming read slowed "
                                                   f"{read / _read1:.2f}x, so it sits "
                                                   + ("nearer" if _slowed < read / _read1 else "further from")
                                                   + " its streaming floor" if _floor_test else
                                                   "another term became the largest") + ")")
if _priced and _n:
    _said = (f"Chapters 2 and 3 timed these passes with one thread as well, so this run can label them: one thread "
             f"multiplies large matrices {peak / _peak1:.1f}x slower than {threads} threads and streams "
             f"{read / _read1:.1f}x slower, which " + (f"moves the ridge from {ridge:.1f} to {_peak1 / _read1:.1f}"
             if f"{ridge:.1f}" != f"{_peak1 / _read1:.1f}" else f"leaves the ridge at {ridge:.1f}") + " FLOP/byte. "
             + (f"{len(_changed)} of {_n} prefill and batch-1 decode passes change label: {'; '.join(_changed)}. "
                if _changed else f"None of the {_n} prefill and batch-1 decode passes changes label. ")
             + "A label moves for one of two reasons: one thread slows one term more than the others, so that "
               "another term becomes the largest, or it slows the read more than the step, so that a step once well "
               "above its streaming floor comes within the tolerance of it" + ("." if _batched1 else "; chapter 3 timed no batched decode with one thread, so at "
                                "one thread this page would place no batched steps."))
elif device.type == "cuda":
    _said = ("On a GPU the thread count only drives the host: the passes run on the device, so expect their labels to "
             "stay. A label that moves would be a pass bound by issuing its operations from the host (dispatch-bound).")
elif threads == 1:
    _said = "This page already places one thread's passes: the table above is the answer."
else:
    _said = ("This run has no one-thread measurements to label (chapter 0, or chapters 2 and 3, ran without one "
             "thread). Expect the ridge to move by the ratio of one thread's square product to its streaming read, "
             "and a pass to change label where one thread slows its largest term more than the next one.")
display(Markdown(f"<details><summary>What to expect</summary>\n\n{_said}\n</details>"))

# %% [markdown]
# * Give Llama-3-8B 32 KV heads, multi-head attention (an edit of code, not a parameter: in the cell that sets
#   `llama8`, under "The course's tables, reproduced", add `import dataclasses` and write
#   `dataclasses.replace(shapes.LLAMA3_8B, kv_heads=32)` for `shapes.LLAMA3_8B`): how far does the batching limit
#   fall?

# %% jupyter={"source_hidden": true} tags=["answer"]
import dataclasses as _dataclasses

_mha = _dataclasses.replace(llama8, kv_heads=32)
_c0, _c1 = min(batch_contexts), max(batch_contexts)
_gqa0, _gqa1 = (roofline.decode_intensity_limit(llama8, c) for c in (_c0, _c1))
_mha0, _mha1 = (roofline.decode_intensity_limit(_mha, c) for c in (_c0, _c1))
_reach = roofline.batch_to_reach_ridge(_mha, gpu, _c0)
display(Markdown(
    f"<details><summary>What to expect</summary>\n\nMulti-head attention's {_mha.kv_heads} KV heads, "
    f"{_mha.kv_heads / llama8.kv_heads:.0f} times grouped-query attention's {llama8.kv_heads}, store "
    f"{_mha.kv_bytes_per_token / llama8.kv_bytes_per_token:.0f} times the cache bytes per token "
    f"({_mha.kv_bytes_per_token / 2**10:.0f} KiB instead of {llama8.kv_bytes_per_token / 2**10:.0f}), and the limit "
    f"falls nearly as much: at context {_c0:,} from {_gqa0:.0f} to **{_mha0:.0f} FLOP/byte** ({_gqa0 / _mha0:.1f}x), at "
    f"{_c1:,} from {_gqa1:.1f} to **{_mha1:.1f}** ({_gqa1 / _mha1:.1f}x); not quite "
    f"{_mha.kv_bytes_per_token / llama8.kv_bytes_per_token:.0f}x, because the larger K and V projections add FLOPs too. "
    + (f"Even at context {_c0:,} no batch then reaches the {gpu.name} ridge, and "
       if not math.isfinite(_reach) else f"At context {_c0:,} it takes {_reach:.0f} sequences to reach the ridge, and ")
    + f"only {roofline.batch_that_fits(_mha, gpu, _c0):,} sequences' caches fit there, against "
      f"{roofline.batch_that_fits(llama8, gpu, _c0):,} with grouped-query attention.\n</details>"))

# %% [markdown]
# ## Before optimising, find the regime
#
# Every chapter of this book comes down to one rule: **find out which regime a pass is in before optimising it.**
#
# * **Memory-bound**: fewer bytes per token: quantised weights, a smaller cache (grouped-query attention), batching.
#   Fewer bytes help only where the narrower dtype's kernels keep their rate (chapters 3 and 8 time it).
# * **Compute-bound**: fewer FLOPs or faster arithmetic: last-position logits, a cached prefix, tensor cores. A pass
#   merely **right of the ridge point** (its arithmetic under half its time): take its other terms apart first.
# * **Dispatch-bound** (issuing the operations and the small kernels; on a GPU, launch-bound): fewer, larger
#   operations: fused kernels, CUDA graphs, `torch.compile`, bigger chunks.
# * **Page-faults-bound** (a growing cache copied into freshly mapped memory every step): a preallocated cache,
#   written in place (chapter 3).
# * **Few-row-kernel-bound** (left of the ridge, yet the matrix kernel at that many rows is slower than its bytes):
#   a kernel made for few rows, or more rows per call (a larger batch, a longer chunk).
# * **Mixed** (two terms of different limits about the same size): shrinking one alone buys at most about half.
# * **Bound by the kernel's rate** (the weights its largest part, read by a matrix-vector kernel well below the
#   streaming read): a faster matrix-vector kernel, or fewer bytes where the narrower dtype's kernel keeps its rate.
# * **Above its streaming floor** (a pass whose bytes are its largest term, read near the streaming read, but not
#   what sets its time): what fills the rest (chapter 3 splits it), often dispatch: fewer, larger operations.
# * **Unexplained** (far above its prediction): measure one layer down before optimising anything.

# %%
waits = {"memory-bound": "memory", "compute-bound": "arithmetic", "dispatch-bound": "issuing its operations and its small kernels",
         "few-row-kernel-bound": "the few-row kernel", "right of the ridge point": "no single term",
         "above its streaming floor": "more than its bytes",
         "bound by the kernel's rate": "the matrix-vector kernel's rate",
         "slow-kernel-bound": "a slow kernel", "page-faults-bound": "page faults",
         "below its floor: a ceiling is wrong": "a ceiling chapter 0 understated"}


def waits_on(series: str, lengths: str) -> str:
    """What a series' passes wait on by the one rule, in words: "on memory at 1 token and on arithmetic at 2 to
    1,024 tokens", or "on memory at every context" where one regime holds them all."""
    g = points[points.series == series].sort_values("tokens")
    word = lambda label: ("two terms of about one size" if label.startswith("mixed") else
                          waits.get(label, "work the cost model does not price"))
    if g.regime.nunique() == 1:
        return f"waits on {word(g.regime.iloc[0])} at every {lengths}"
    runs = {}  # each regime's runs of neighbouring lengths, in the order the lengths rise
    for (name, _), o in g.groupby([g.regime, (g.regime != g.regime.shift()).cumsum()], sort=False):
        runs.setdefault(name, []).append(o.tokens)
    at = lambda t: prose.tokens(t.iloc[0]) if len(t) == 1 else f"{t.min():,} to {prose.tokens(t.max())}"
    parts = [f"on {word(name)} at {prose.and_list(at(t) for t in ts)}" for name, ts in runs.items()]
    return "waits " + ", ".join(parts[:-1]) + " and " + parts[-1]


above = {claims.NOT_HELD: " (above it: a ceiling is understated)", claims.UNRESOLVED: " (too near it to call)"}
roof = lambda series: (f"**{roof_reach[series].text('.0%')}**"
                       + above.get(register.verdict(f"{series}_under_the_roof"), ""))
with use_threads(threads):  # the thread count the points were measured with
    this_machine = prose.machine(device, points_dtype)
as_priced = {claims.HELD: "", claims.NOT_HELD: " (a miss)", claims.UNRESOLVED: " (too close to call)"}.get(
    register.verdict("size_steps_as_priced"))
fell = register.verdict("floor_gives_way_where_predicted")
met = None if transition is None else (f"**{transition.text(',.0f', 'MB')}** ({predicted_transition / 1e6:,.0f} MB "
                                       "predicted" + {claims.HELD: "", claims.NOT_HELD: ": a miss",
                                                      claims.UNRESOLVED: "; too close to call"}[fell] + ")")
under = all(register.verdict(f"{x.replace(' ', '_')}_under_the_roof") == claims.HELD for x in roof_reach)
beat = any(register.verdict(f"{x.replace(' ', '_')}_under_the_roof") == claims.NOT_HELD for x in roof_reach)
roofs = (", and no pass ran above the roof" if under else
         ", and some passes ran above the roof: a ceiling is understated" if beat else
         ", and some passes came too near the roof to call")

# %%
missed_words = {  # each claim in a reader's words, for naming a miss in the opening
    "size_steps_as_priced": "a GPT-2 decode step's time",
    "floor_gives_way_where_predicted": "the model size where a decode step leaves its floor",
    "precision_on_the_floor_as_priced": "a 16-bit step on the floor",
    "precision_past_the_floor_as_priced": "a 16-bit step past the floor",
    "context_on_the_floor_as_priced": "a longer context's cost on the floor",
    "context_past_the_floor_as_priced": "a longer context's cost past the floor",
    "prefill_floor_length_as_priced": "how long each size's prefill stays on its floor",
    "batching_raises_the_rate": "how batched decode's FLOP rate moves",
    "machine_kept_its_pace": "the machine's pace", "gpu_near_its_datasheet": "the GPU's datasheet peaks",
    **{f"{s.replace(' ', '_')}_under_the_roof": f"the {s} passes under the textbook roof" for s in roof_reach}}
misses = f"{m} " if (m := register.misses(missed_words)) else ""  # each miss named


def opening_text(prefill: bool = True, sizes_said: bool = True, transition_said: bool = True) -> str:
    """The opening paragraph: with `prefill`, the prefills' regimes; with `sizes_said`, the size sweep's price, and
    with `transition_said` too, the 12-layer models' transition."""
    priced_said = as_priced is not None and sizes_said
    return (f"On this machine ({this_machine}), the textbook roofline turns from memory to arithmetic at "
            f"**{ridge:.1f} FLOP/byte**{roofs}. "
            + (f"Across GPT-2's {len(ran)} sizes a decode step took **{pooled.text('.2f', 'x')}** its predicted "
               f"time{as_priced}" if priced_said else "")
            + (("; a" if priced_said else "A") + f" 12-layer model's step is twice its time with no weights at {met}"
               if met is not None and sizes_said and transition_said else "")
            + ". " * bool(priced_said or (met is not None and sizes_said and transition_said))
            + misses + f"A decode step here [{waits_on('decode', 'context')[:5]}](glossary.md#regimes)"
            f"{waits_on('decode', 'context')[5:]}; "
            + (f"a prefill {waits_on('prefill', 'prompt length')}." if prefill else
               "this machine's roofline, below, names each prefill's regime."))


pace_said = pacer.note()  # how far the machine ran from chapter 0's speed, and that the size prices used it
opening.write(opening_text(),  # too long (a long machine name): the transition, the prefills' regimes, the sizes out
              opening_text(transition_said=False), opening_text(prefill=False, transition_said=False),
              opening_text(prefill=False, sizes_said=False),
              after=pace_said)  # why the prices missed, when the machine itself ran at another speed

# %% [markdown]
# ## Key terms
#
# [Roofline and arithmetic intensity](glossary.md#roofline-and-arithmetic-intensity), [Balance point](glossary.md#balance-point), [Grouped-query attention](glossary.md#grouped-query-attention), [Regimes](glossary.md#regimes), [Floor](glossary.md#floor), [Dispatch](glossary.md#dispatch), [Streaming read](glossary.md#streaming-read), [Kernel rate](glossary.md#kernel-rate), [Price](glossary.md#price), [Tolerance](glossary.md#tolerance), [Pace](glossary.md#pace). Each links to the book's glossary, which says how the book measures it.

# %% [markdown]
# ## Evidence in this chapter
#
# Each claim this chapter made, what was predicted, what this run measured, the verdict, and the data it came
# from. A verdict is decided on the 95 % interval of the median over runs (`lib.claims` says how): *held* when
# all of the interval agrees with the prediction, *did not hold* when none of it does, *not resolved* when it
# crosses the line. `data/06_roofline/claims.csv` holds the same rows, and the book's status page counts them.

# %%
results.table(register.frame(), "claims")
display(prose.table(register.evidence()))
print(register.summary())
results.finish()  # the run is whole: its tables and figures replace the last run's together
