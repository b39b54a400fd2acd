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
# **ridge point** (FLOP rate / bandwidth) the pass waits on memory, above it on arithmetic.
#
# This chapter reproduces the course's roofline tables for Llama-3-8B on an H100, answers its "try it" questions,
# then draws this machine's roofline from the ceilings chapter 0 measured and places on it every pass chapters 2
# and 3 timed, each labelled by the one regime rule of `lib.regime`.

# %% tags=["parameters"]
quick = False
device = "auto"            # "auto", "cpu", "cuda", "cuda:N"
dtype = None               # the measured points' dtype; None: fp32 on a CPU, fp16 on a GPU
threads = None             # the measured points' thread count; None: the most chapters 2 and 3 used
bandwidth_kernel = "read"  # chapter 0's bandwidth for the memory roof: "read", "copy", "triad" or "matvec"
course_gpu = "H100 SXM"    # the course's GPU, from lib.roofline.HARDWARE
other_gpu = "A100 80GB"    # the try-it GPU
big_model = "Llama-3-70B"  # a preset of lib.shapes
batch_contexts = [128, 2048, 8192, 32768]  # decode contexts for the batching question

# %%
import json
import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from lib import claims, course, machine, params, regime, roofline, shapes, timing
from lib.device import describe_environment, resolve_device
from lib.models import gpt2_config, load_model
from lib.paths import REPO_ROOT, output_root
from lib.results import Results, load_table

table_gpus = [name for name, hw in roofline.HARDWARE.items() if not math.isnan(hw.flops)]
P = params.check(globals(), {
    "device": params.device(), "dtype": params.dtype(allow_none=True),
    "threads": params.integer(min=1, allow_none=True),
    "bandwidth_kernel": params.choice(["read", "copy", "triad", "matvec"]),
    "course_gpu": params.choice(table_gpus), "other_gpu": params.choice(table_gpus),
    "big_model": params.choice(shapes.PRESETS), "batch_contexts": params.int_list(min=1),
}, quick=quick, chapter="06_roofline")

# %%
dev = resolve_device(device)
points_dtype = dtype or ("fp16" if dev.type == "cuda" else "fp32")
results = Results("06_roofline", quick=quick, device=dev, dtype=points_dtype)
ceilings = machine.load_ceilings(quick=quick)  # chapter 00_machine's table
register = claims.Claims()
pd.Series({**describe_environment(dev, points_dtype), "course GPU": course_gpu, "try-it model": big_model})

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
# A request's decode is one step per output token, each reading every weight for one token: at batch 1 it owns the
# request's time although its arithmetic is a fraction of the prefill's.
#
# ### Where prefill turns compute-bound, and why its throughput then falls
#
# A weight matmul over `S` rows does `2 S` FLOPs per weight and reads each weight once (two bytes in BF16), so its
# intensity is about `S`: prefill should leave the memory roof near a prompt as long as the ridge point is in FLOP
# per byte. Past it, speed is the FLOP rate over the FLOPs per token, and that cost grows: every token does
# `2 x weights` FLOPs of matmul plus attention over the tokens before it (`roofline.prefill_attention_flops`).

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
attention.round({"gflop": 0, "gflop_per_token": 2, "attention_share": 3, "tokens_per_s": 0})

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
# **Takeaway: prefill's intensity grows with the prompt and crosses the ridge near a prompt as long as the ridge
# point; decode's stays near one FLOP per byte, so at batch 1 it is memory-bound and owns most of a request's time.**
#
# ## Try it, answered: another GPU and a bigger model
#
# The course's first two exercises: swap the GPU, and Llama-3-8B for a bigger model. The roofline gives the times;
# whether a model fits is a matter of memory capacity, from the same hardware table (`Hardware.memory_bytes`,
# `roofline.batch_that_fits`), and the cache needs room beside the weights.

# %%
try_it = pd.DataFrame([dict(model=shape.name, gpu=hw.name, ridge_flop_per_byte=hw.ridge,
                            prefill_crossover_tokens=roofline.prefill_crossover(shape, hw),
                            decode_floor_ms=roofline.decode_floor(shape, hw) * 1e3, weight_gb=shape.weight_bytes / 1e9,
                            gpus_for_weights=math.ceil(shape.weight_bytes / hw.memory_bytes),
                            cache_tokens_that_fit=roofline.batch_that_fits(shape, hw, 1))
                       for shape in (llama8, big) for hw in (gpu, other)])
results.table(try_it, "try_it_gpu_and_model")
try_it.round(2)

# %%
t = try_it.set_index(["model", "gpu"])
mine, swapped, large = t.loc[(llama8.name, gpu.name)], t.loc[(llama8.name, other.name)], t.loc[(big.name, gpu.name)]
fp8 = big.with_dtype("fp8")
display(Markdown(
    f"**{other.name}.** {other.flops / gpu.flops:.2f}x the arithmetic and {other.bandwidth / gpu.bandwidth:.2f}x the "
    f"bandwidth of the {gpu.name} move the ridge from {gpu.ridge:.0f} to **{other.ridge:.0f} FLOP/byte**: prefill "
    f"turns compute-bound at **{int(swapped.prefill_crossover_tokens)} tokens** instead of "
    f"{int(mine.prefill_crossover_tokens)}, and the decode floor goes from {mine.decode_floor_ms:.2f} to "
    f"**{swapped.decode_floor_ms:.2f} ms**, in proportion to the bandwidth alone.\n\n"
    f"**{big.name}.** {large.weight_gb:,.3g} GB of matmul weights in BF16; its decode floor on one {gpu.name} would "
    f"be **{large.decode_floor_ms:.2f} ms**, " + (
        f"with room for {large.cache_tokens_that_fit:,.0f} tokens of cache." if large.gpus_for_weights == 1 else
        f"on paper only: they need {int(large.gpus_for_weights)} GPUs before any cache (with tensor parallelism about "
        f"{large.decode_floor_ms / large.gpus_for_weights:.1f} ms a step, plus communication). In FP8 "
        f"({fp8.weight_bytes / 1e9:.1f} GB) they leave room for {roofline.batch_that_fits(fp8, gpu, 1):,} tokens.")
    + f" Llama-3-8B leaves room for {mine.cache_tokens_that_fit:,.0f} tokens."))

# %% [markdown]
# **Takeaway: another GPU moves the ridge, the prefill crossover and the decode floor together; a model whose weights
# do not fit has a decode floor only on paper: capacity, not bandwidth, decides the first design choice.**
#
# ## Batching moves decode toward the ridge, until the caches stop it
#
# A decode step for `B` sequences does `B` times the arithmetic but reads the weights once, so the weights' part of
# its intensity grows with `B`; every sequence's cache is read in full, so the cache bytes grow with `B` too. As `B`
# grows without bound the intensity levels off at FLOPs per sequence over cache bytes per sequence
# (`roofline.decode_intensity_limit`), which falls as the context grows. Below the ridge, no batch makes decode
# compute-bound; capacity cuts it shorter still, since the caches of `B` sequences must fit beside the weights.

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
batching.round(2)

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
# **Takeaway: batching shares the weights' bytes but not the caches'; at long contexts decode's intensity levels off
# below the ridge, and fewer cache bytes per token (grouped-query attention, a quantised cache) is the only way up.**
#
# ## This machine's roofline
#
# The same arithmetic on this machine, with the ceilings chapter 0 measured once for the whole build
# (`machine.load_ceilings`): a streaming bandwidth (`bandwidth_kernel`; the model's matrix-vector rate drawn beside it)
# and a large matrix product's rate. On it go chapter 2's prefills (last-position logits) and chapter 3's decode steps.

# %%
def measured(section, name, column, optional=False):
    """Chapter `section`'s table `name` in this dtype and thread count (of two caches, the growing one), with
    `column`'s median and range over runs as `measured_ms`, `_low`, `_high`, and the model of its provenance."""
    rows = load_table(section, name, quick=quick)
    if rows is None:  # the one clear line: which chapter to run
        raise FileNotFoundError(f"chapter 6 places what {section} measured: run it first (`python -m lib.make.book "
                                f"{'--quick ' * quick}{section}`)")
    root = next(r for r in (output_root(quick), REPO_ROOT) if (r / "data" / section / f"{name}.csv").exists())
    model = json.loads((root / "data" / section / "provenance.json").read_text())["model"]
    rows = rows[(rows.dtype == points_dtype) & (rows.cache == "dynamic" if "cache" in rows else True)]
    rows = rows[rows.threads == (threads or rows.threads.max())] if dev.type == "cpu" and len(rows) else rows
    if rows.empty and not optional:
        raise FileNotFoundError(f"chapter 6 needs {section}'s {name} in {points_dtype} at {threads or 'all'} threads: "
                                "run that chapter with them first")
    return rows.assign(measured_ms=rows[column], measured_ms_low=rows[f"{column}_low"],
                       measured_ms_high=rows[f"{column}_high"], model=model)


prefill = measured("02_prefill_sweep", "prefill_sweep", "time_ms")
decode = measured("03_decode_sweep", "decode_sweep", "step_ms")
batched = measured("03_decode_sweep", "batched_decode", "step_ms", optional=True)

# %%
used_threads = int(prefill.threads.max()) if dev.type == "cpu" else None
here, gemv = (ceilings.hardware(points_dtype, used_threads, bandwidth=k) for k in (bandwidth_kernel, "matvec"))
launch_s = ceilings.launch_s(points_dtype, used_threads)  # a 12-layer GPT-2's step, negligible bytes and FLOPs
kernels = ceilings.table.query("dtype == @points_dtype and status == 'ok'")
kernels = (kernels[kernels.threads == used_threads] if used_threads in set(kernels.threads) else kernels)
bw, mm = kernels.set_index("kernel").loc[bandwidth_kernel], kernels.set_index("kernel").loc["matmul"]  # for ranges
device_label = mm.device_name + (f", {used_threads} thread{'s' * (used_threads > 1)}" if used_threads else "")
entry = next((hw for hw in roofline.HARDWARE.values()  # this GPU's datasheet entry, where the table has one
              if not math.isnan(hw.flops) and hw.name.split()[0] in mm.device_name), None)
display(Markdown(
    f"This machine ({device_label}, {points_dtype}) streams **{here.bandwidth / 1e9:.1f} GB/s** ({bandwidth_kernel}, "
    f"repeats {timing.span(bw.bandwidth_gb_s_low, bw.bandwidth_gb_s_high)}) and multiplies large matrices at "
    f"**{here.flops / 1e9:.1f} GFLOP/s** (repeats {timing.span(mm.gflop_s_low, mm.gflop_s_high)}): its ridge is "
    f"**{here.ridge:.1f} FLOP/byte** in {points_dtype}, against {gpu.ridge:.0f} for the {gpu.name} in BF16. The "
    f"model's own matrix-vector products read {gemv.bandwidth / 1e9:.1f} GB/s; the launch floor is "
    f"{launch_s * 1e3:.2f} ms." + ("" if ceilings.hardware_support(points_dtype) else
                                   f" This device has no {points_dtype} matrix instructions: that rate is a slow "
                                   "fallback kernel's, not the hardware's arithmetic.")))

# %% [markdown] tags=["predict"]
# **Predict.** Each pass's FLOPs and bytes come from `lib.roofline` (`prefill_cost(shape, T, logits="last")`,
# `decode_cost(shape, B, C)` at the starting context) for the model's configured shape. Before any time is read they
# give three lower bounds: FLOPs over the matrix rate, bytes over the bandwidth, and the launch floor (a 12-layer
# GPT-2's step, scaled to the model's layers as chapter 3 does). The largest of the three is the prediction.

# %%
shape_of = {m: shapes.ModelShape.from_config(gpt2_config(m) if "gpt2" in m else load_model(m, "cpu").config, name=m,
                                             bytes_per_param=points_dtype) for m in {*prefill.model, *decode.model}}
rows = []
for series, table in (("prefill", prefill), ("decode", decode), ("batched decode", batched)):
    for r in table.itertuples():
        shape, batch = shape_of[r.model], int(getattr(r, "batch", 1))
        tokens = int(r.prompt_tokens if series == "prefill" else r.context_tokens)
        cost = (roofline.prefill_cost(shape, tokens, logits="last") if series == "prefill" else
                roofline.decode_cost(shape, batch, tokens))
        b = roofline.bound(here, cost)
        rows.append(dict(series=series, model=r.model, tokens=tokens, batch=batch, flops=cost.flops,
                         intensity_flop_per_byte=cost.intensity, compute_ms=b.t_compute * 1e3,
                         memory_ms=b.t_memory * 1e3,
                         launch_ms=ceilings.launch_s(points_dtype, used_threads, shape.layers) * 1e3,
                         measured_ms=r.measured_ms, measured_ms_low=r.measured_ms_low,
                         measured_ms_high=r.measured_ms_high))
points = pd.DataFrame(rows)
points["predicted"] = points[["compute_ms", "memory_ms", "launch_ms"]].idxmax(axis=1).str.removesuffix("_ms") + "-bound"
points[["series", "tokens", "batch", "intensity_flop_per_byte", "compute_ms", "memory_ms", "launch_ms",
        "predicted"]].round(3)

# %% [markdown]
# **Measure.** The chapters' medians over runs, with the lowest and highest run. `lib.regime` labels each pass: up to
# `REGIME_SLACK` times its largest bound, that bound's regime; further above, unexplained; below it, a ceiling is
# wrong. Each series is then a claim: its passes are in the regime their largest bound predicts.

# %%
labels = [regime.regime(r.measured_ms / 1e3, {"compute": r.compute_ms / 1e3, "memory": r.memory_ms / 1e3,
                                               "launch": r.launch_ms / 1e3}) for r in points.itertuples()]
points["regime"] = [label.label for label in labels]
points["measured_over_bound"] = [label.ratio for label in labels]
points["achieved_gflop_s"] = points.flops / points.measured_ms / 1e6
points["fraction_of_roof"] = points[["compute_ms", "memory_ms"]].max(axis=1) / points.measured_ms
results.table(points, "measured_on_roofline")
points[["series", "tokens", "batch", "measured_ms", "measured_ms_low", "measured_ms_high", "measured_over_bound",
        "fraction_of_roof", "regime"]].round(3)

# %%
fig, ax = plt.subplots(figsize=(10, 6))
xs = np.logspace(math.log10(min(points.intensity_flop_per_byte.min(), 0.1) / 2),
                 math.log10(max(points.intensity_flop_per_byte.max(), here.ridge) * 4), 300)
roofs = [(here, "k-", f"{bandwidth_kernel} bandwidth"), (gemv, "k:", "the model's matrix-vector rate")]
if entry is not None and points_dtype != "fp32":
    roofs.append((entry, "k--", f"datasheet {entry.name}, BF16 dense"))
for hw, style, what in roofs:
    ax.plot(xs, [roofline.attainable_flops(hw, i) / 1e9 for i in xs], style, lw=1.2,
            label=f"roof, {what}: {hw.bandwidth / 1e9:,.0f} GB/s, {hw.flops / 1e9:,.0f} GFLOP/s")
colours = {name: f"C{i}" for i, name in enumerate(dict.fromkeys(points.regime))}
for (series, label), g in points.groupby(["series", "regime"], sort=False):
    ax.scatter(g.intensity_flop_per_byte, g.achieved_gflop_s, marker={"prefill": "o", "decode": "s"}.get(series, "^"),
               color=colours[label], s=40, zorder=3, label=f"{series}: {label}")
    for j, r in enumerate(g.itertuples()):  # decode points share one intensity: stack their labels
        ax.annotate(f"{r.fraction_of_roof:.0%}", (r.intensity_flop_per_byte, r.achieved_gflop_s), fontsize=7,
                    textcoords="offset points", xytext=(-30, 9 * j) if series == "decode" else (4, 3))
ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOP/byte)", ylabel=f"GFLOP/s ({points_dtype})")
ax.set_title(f"This machine ({device_label}, {points_dtype}): {points.regime.str.endswith('-bound').sum()} of "
             f"{len(points)} passes within {regime.REGIME_SLACK:g}x of a bound\n(labels: fraction of the roofline "
             "bound reached)", fontsize=10)
ax.legend(fontsize=7, loc="lower right")
ax.grid(True, which="major", alpha=0.3)
results.figure(fig, "this_machine_roofline")
plt.show()

# %%
def listed(rows):
    """The passes in `rows`, grouped by regime, with how far from their bound they ran."""
    return "; ".join(f"{label} at " + (f"batch {', '.join(map(str, o.batch))}" if (o.batch > 1).any() else
                                       f"{', '.join(f'{t:,}' for t in o.tokens)} tokens")
                     + f" ({timing.span(o.measured_over_bound.min(), o.measured_over_bound.max(), '.2f')}x its bound)"
                     for label, o in rows.groupby("regime", sort=False))


for series, g in points.groupby("series", sort=False):
    off = g[g.regime != g.predicted]
    display(Markdown(register.decide(
        f"{series.replace(' ', '_')}_as_predicted",
        f"Every {series} pass is in the regime its largest lower bound predicts (within {regime.REGIME_SLACK:g}x).",
        off.empty, predicted=", ".join(sorted(set(g.predicted))), measured=", ".join(sorted(set(g.regime))),
        evidence=f"{len(g)} {series} passes of {g.model.iloc[0]}, {points_dtype}, {device_label}",
        if_held=f"all {len(g)} {series} passes of {g.model.iloc[0]} are where their largest bound puts them: "
                f"{listed(g)}.",
        if_not=f"{len(off)} of {len(g)} {series} passes of {g.model.iloc[0]} are not: {listed(off)}." + (
            " No bound explains those far above it: the matrix rate is a large square product's, and a pass of few "
            "rows per weight, or attention over many small matrices, can run slower than either ceiling says."
            if (off.measured_over_bound > 1).any() else ""))))

# %%
too_fast = points[points.regime == "below a bound: a ceiling is wrong"]
display(Markdown(register.decide(
    "no_pass_beats_its_bound", "No measured pass is faster than its largest lower bound.", too_fast.empty,
    predicted="every pass at or above its bound", measured=f"{len(too_fast)} below",
    evidence=f"{len(points)} passes of chapters 2 and 3 against chapter 0's ceilings",
    if_held=f"every pass takes at least {points.measured_over_bound.min():.2f} times its largest bound.",
    if_not=f"{len(too_fast)} passes ran faster than a lower bound (down to {points.measured_over_bound.min():.2f}x): a "
           "ceiling understates this machine, or chapter 0 ran under another load than chapters 2 and 3.")))

# %%
rising = points[points.series == "batched decode"].sort_values("batch")
rates = ", ".join(f"batch {r.batch}: {r.achieved_gflop_s:.3g} GFLOP/s" for r in rising.itertuples())
display(Markdown(register.decide(
    "batching_raises_the_rate", "Batched decode does more FLOP/s as the batch grows (the weights are shared).",
    claims.increasing(list(rising.achieved_gflop_s)) if len(rising) > 1 else None,
    predicted="rising with the intensity", measured=rates, evidence=f"chapter 3's batched decode, {points_dtype}",
    if_held=f"the rate rises at every batch: {rates}.", if_not=f"the rate does not rise at every batch: {rates}.",
    if_not_measured=f"chapter 3 timed fewer than two batch sizes in {points_dtype} at {device_label}.")))

# %%
# A GPU in the hardware table beside its datasheet's dense 16-bit peaks (quoted for BF16; FP16's are the same).
comparable = entry is not None and points_dtype != "fp32"
reached = (f"the {mm.device_name} reaches {here.bandwidth / entry.bandwidth:.0%} of its datasheet bandwidth and "
           f"{here.flops / entry.flops:.0%} of its datasheet FLOP rate ({entry.name})") if comparable else ""
display(Markdown(register.decide(
    "gpu_near_its_datasheet", "A GPU's measured ceilings are within 2x of its datasheet peaks.",
    (claims.within(here.bandwidth, entry.bandwidth, 2) and claims.within(here.flops, entry.flops, 2)) if comparable
    else None, predicted=f"{entry.bandwidth / 1e9:,.0f} GB/s, {entry.flops / 1e12:,.0f} TFLOP/s" if comparable else "",
    measured=f"{here.bandwidth / 1e9:,.0f} GB/s, {here.flops / 1e12:,.1f} TFLOP/s" if comparable else "",
    evidence=device_label, if_held=f"{reached}.", if_not=f"{reached}: a kernel, a clock or the table entry is off.",
    if_not_measured=(f"{mm.device_name} has no entry in the hardware table ({', '.join(table_gpus)}): there is no "
                     "datasheet to set it beside." if entry is None else
                     f"the table quotes 16-bit peaks for the {entry.name}; set `dtype` to fp16 or bf16 to compare."))))

# %% [markdown]
# **Takeaway: place every measured pass on the machine's roofline before explaining it; the distance to its largest
# bound says whether FLOPs, bytes, launches or something else sets its time.**
#
# ## What these numbers do not show
#
# * **Real kernels on the course's GPUs**: the tables are lower bounds from datasheet peaks, without activations,
#   launches, communication or the runtime's share of memory.
# * **Other dtypes and thread counts**: this page places one of each (`dtype`, `threads`).
# * **Big models on this machine**: a small model's short pass shows fixed costs that a 7B model's would hide.
# * **One moment**: chapter 0's ceilings and chapters 2 and 3's times were measured minutes apart, under whatever else
#   the machine was doing; compare regimes, not third digits.
#
# ## Takeaways
#
# * A pass's roofline bound is the larger of FLOPs over the FLOP rate and bytes over the bandwidth; a weight
#   matmul's intensity is about the number of tokens it carries, and long prompts cost more per token.
# * Batching lifts decode toward the ridge only while the caches are small beside the weights.
# * On a real machine, label each measured pass with one rule before explaining it.
#
# ## Check yourself
#
# 1. Why is the arithmetic intensity of a weight matmul close to the number of tokens it processes?
#
# <details><summary>Answer</summary>
#
# Every weight is fetched once per pass but used in one multiply-add, two FLOPs, per token row. With two bytes per
# weight, FLOPs per byte come to about the row count: the prompt length in prefill, the batch in decode.
# </details>

# %%
summary_prompt, summary_output = 30_000, 200
alone = roofline.request_split(llama8, gpu, summary_prompt, summary_output)
summary_batch = roofline.batch_that_fits(llama8, gpu, summary_prompt + summary_output)
together = roofline.request_split(llama8, gpu, summary_prompt, summary_output, batch=summary_batch)
display(Markdown(
    f"2. A team summarises documents: {summary_prompt:,}-token prompts, {summary_output}-token answers, on "
    f"{gpu.name}s. Which phase should they work on first?\n\n<details><summary>Answer</summary>\n\nOne request "
    f"alone spends {alone.prefill_s * 1e3:.0f} ms in prefill and {alone.decode_s * 1e3:.0f} ms in decode at the "
    f"roofline. A server batches decode: with the {summary_batch} requests whose caches fit in "
    f"{gpu.memory_bytes / 1e9:.0f} GB, the weights' bytes are shared while each prompt's arithmetic is not, and "
    f"prefill is **{together.prefill_share:.0%}** of the time. Prefix caching and faster attention pay off first."
    f"\n</details>"))

# %% [markdown]
# ## Try it
#
# * Set `course_gpu = "H200"`: the same FLOP rate with more bandwidth. Where do the ridge, the prefill crossover and
#   the decode floor go?
# * Add contexts 512, 1,024 and 4,096 to `batch_contexts`: beyond which context can Llama-3-8B's decode not reach
#   the ridge at any batch?
# * Set `threads = 1`, or `bandwidth_kernel = "matvec"`: which measured passes change regime?
# * Give `LLAMA3_8B` `kv_heads=32` (multi-head attention, `dataclasses.replace`): how far does the batching limit fall?
#
# ## Before optimising, find the regime
#
# Every section of this book comes down to one rule: **find out which regime a pass is in before optimising it.**
#
# * **Memory-bound**: fewer bytes per token: quantised weights, a smaller cache (grouped-query attention), batching.
# * **Compute-bound**: fewer FLOPs or faster arithmetic: last-position logits, a cached prefix, tensor cores.
# * **Launch-bound**: fewer, larger operations: fused kernels, CUDA graphs, `torch.compile`, bigger chunks.
# * **Unexplained** (far above every bound): measure further before optimising anything.

# %%
results.table(register.frame(), "claims")
print(register.summary())
register.frame()
