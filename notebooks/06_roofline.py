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
# then draws this machine's roofline from the kernels' own ceilings chapter 0 measured (with the square product's
# peak as one line among them) and places on it every pass chapters 2 and 3 timed, each labelled by the one
# regime rule of `lib.regime` from the cost model's prediction.

# %% tags=["parameters"]
quick = False
device = "auto"            # "auto", "cpu", "cuda", "cuda:N"
dtype = None               # the measured points' dtype; None: fp32 on a CPU, fp16 on a GPU
threads = None             # the measured points' thread count; None: all cores
bandwidth_kernel = "read"  # chapter 0's streaming kernel drawn as the memory roof: "read", "copy" or "triad"
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

from lib import claims, costmodel, course, machine, params, prose, regime, roofline, shapes
from lib.claims import Spread
from lib.device import describe_environment
from lib.paths import REPO_ROOT, output_root
from lib.prose import show
from lib.results import Results, load_table

table_gpus = [name for name, hw in roofline.HARDWARE.items() if not math.isnan(hw.flops)]
P = params.check(globals(), {
    "device": params.device(), "dtype": params.dtype(allow_none=True),
    "threads": params.threads(many=False),
    "bandwidth_kernel": params.choice(["read", "copy", "triad"]),
    "course_gpu": params.choice(table_gpus), "other_gpu": params.choice(table_gpus),
    "big_model": params.choice(shapes.PRESETS),
    "batch_contexts": params.int_list(min=1, max=1 << 20, min_items=2, ascending=True),
}, quick=quick, chapter="06_roofline")

# %%
points_dtype = dtype or ("fp16" if device.type == "cuda" else "fp32")
results = Results("06_roofline", params=P, quick=quick)
ceilings = machine.load_ceilings(device, quick=quick)  # chapter 0's table for this device
register = claims.Claims()
pd.Series({**describe_environment(device), "dtype of the measured points": points_dtype, "course GPU": course_gpu,
           "try-it model": big_model})

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
# The same arithmetic on this machine, with the ceilings chapter 0 measured once for the whole build. A
# textbook roofline has two roofs: the streaming bandwidth (`bandwidth_kernel`) and the square product's peak.
# This machine's kernels draw their own: the rate the model's matrix-vector products stream its weights at, and
# `F(M)`, the FLOP rate its matrices reach with `M` rows, which for a weight product sits at an intensity of
# about `M` over the bytes per weight. On them go chapter 2's prefills (last-position logits), chapter 3's decode
# steps and its batched steps (growing cache), each with the cost model's prediction.

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
show(f"This machine ({where}, {points_dtype}) streams **{read / 1e9:.1f} GB/s** ({bandwidth_kernel}) and multiplies "
     f"large matrices at **{peak / 1e9:.1f} GFLOP/s**: the textbook ridge is **{peak / read:.1f} FLOP/byte**, against "
     f"{gpu.ridge:.0f} for the {gpu.name} in BF16." + ("" if ceilings.hardware_support(points_dtype) else
     f" This device has no {points_dtype} matrix instructions: its rates are a slow fallback kernel's."))

# %% [markdown] tags=["predict"]
# **Predict.** Each pass's FLOPs and bytes come from `lib.roofline` (the x axis: intensity) and its predicted
# time from the cost model (`lib.costmodel`), term by term. Before any time is read: which term is largest for
# each series, and so which regime should each pass be in?

# %%
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
        label = regime.regime(Spread(r.measured_ms_low / 1e3, r.measured_ms / 1e3, r.measured_ms_high / 1e3), pred)
        placed[f"{series} at {tokens} tokens, batch {batch}"] = label
        rows.append(dict(series=series, model=r.model, tokens=tokens, batch=batch, flops=cost.flops,
                         intensity_flop_per_byte=cost.intensity, predicted_ms=pred.best * 1e3,
                         predicted_median_ms=pred.median * 1e3,
                         largest_term=pred.dominant.name, predicted=f"{label.limit}-bound", regime=label.label,
                         measured_ms=r.measured_ms, measured_ms_low=r.measured_ms_low,
                         measured_ms_high=r.measured_ms_high, textbook_bound_ms=max(cost.flops / peak, cost.bytes / read) * 1e3))
points = pd.DataFrame(rows)
points["measured_over_predicted"] = points.measured_ms / points.predicted_ms
points["achieved_gflop_s"] = points.flops / points.measured_ms / 1e6
points["fraction_of_textbook_roof"] = points.textbook_bound_ms / points.measured_ms
results.table(points, "measured_on_roofline")
warning = regime.check_floors(placed, ceilings.strict)
if warning:
    show(warning)
points[["series", "tokens", "batch", "intensity_flop_per_byte", "predicted_ms", "largest_term", "measured_ms",
        "measured_over_predicted", "regime"]].round(3)

# %% [markdown]
# **Measure, then place.** The figure draws the roofs of this machine's kernels and places every pass at its
# intensity and achieved FLOP rate; its label is its fraction of the textbook roof (the streaming read and the
# square product). Whether each pass took what the cost model predicts was decided in chapters 2 and 3; here each
# series is one claim about the roof itself: a roof is an upper bound, so no pass may run above it (one that did
# would mean chapter 0 understated the machine).

# %%
fig, ax = plt.subplots(figsize=(10, 6))
xs = np.logspace(math.log10(min(points.intensity_flop_per_byte.min(), 0.1) / 2),
                 math.log10(max(points.intensity_flop_per_byte.max(), peak / read) * 4), 300)
ax.plot(xs, np.minimum(peak, xs * read) / 1e9, "k-", lw=1.2,
        label=f"textbook roof: {bandwidth_kernel} {read / 1e9:.1f} GB/s, square product {peak / 1e9:.0f} GFLOP/s")
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
unexplained = int((~points.regime.str.endswith("-bound")).sum())
ax.set_title(f"This machine ({where}, {points_dtype}): {len(points) - unexplained} of {len(points)} passes explained by "
             f"the cost model\n(labels: fraction of the textbook roof reached)", fontsize=10)
ax.legend(fontsize=7, loc="lower right")
ax.grid(True, which="major", alpha=0.3)
results.figure(fig, "this_machine_roofline")
plt.show()

# %%
for series, g in points.groupby("series", sort=False):
    claim = f"{series.replace(' ', '_')}_under_the_roof"
    register.claim(
        claim, f"Every {series} pass runs at or under the textbook roof at its intensity (the largest fraction of the "
        "roof a pass reached, its interval, is at most one).",
        held="the {series} passes reach at most **{top}** of the textbook roof ({closest}); their regimes by the one "
             "rule: {listed}.",
        not_held="a {series} pass ran above the textbook roof ({closest}, {top} of it): the streaming read or the square "
                 "product chapter 0 measured understates this machine. Their regimes: {listed}.")
    reach = [Spread(r.textbook_bound_ms / r.measured_ms_high, r.fraction_of_textbook_roof,
                    r.textbook_bound_ms / r.measured_ms_low) for r in g.itertuples()]
    highest = claims.extreme(reach)
    near = g.iloc[int(np.argmax([x.mid for x in reach]))]
    listed = "; ".join(f"{name} at " + (f"batch {', '.join(map(str, o.batch))}" if (o.batch > 1).any() else
                                        f"{', '.join(f'{t:,}' for t in o.tokens)} tokens")
                       + f" ({prose.span(o.measured_over_predicted.min(), o.measured_over_predicted.max(), '.2f')}x its "
                         "prediction)" for name, o in g.groupby("regime", sort=False))
    show(register.decide(claim, claims.at_most(highest, 1.0), predicted="at most the roof",
                         measured=f"at most {highest.text('.0%')} of it", evidence=f"{len(g)} {series} passes, "
                         f"{points_dtype}, {where}", series=series, listed=listed, top=highest.text(".0%"),
                         closest=(f"batch {int(near.batch)}" if near.batch > 1 else f"{int(near.tokens):,} tokens")))

# %% [markdown]
# Two more checks: batching's FLOP rate, and (on a GPU) the measured ceilings beside the datasheet's:

# %%
register.claim(
    "batching_raises_the_rate",
    "Batched decode's FLOP rate rises from one batch to the next where the cost model's rises (the weights are "
    "shared) and falls where its falls (work that grows with the batch takes over).",
    held="the rate moves as predicted at every step: {steps}.",
    not_held="the rate does not move as predicted at every step: {steps}. At batch {top} the cost model's largest term "
             "is {term} ({share:.0%} of the step).",
    unresolved="at some step the interval of the change, run by run, straddles no change: {steps}.",
    not_measured="chapter 3 timed fewer than two batch sizes in this dtype and thread count.")
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
step_verdicts, step_text = [], []
for i in range(len(rising) - 1):
    up = predicted_rates[i + 1] > predicted_rates[i]
    b0, b1 = int(rising.batch.iloc[i]), int(rising.batch.iloc[i + 1])
    f0, f1 = rising.flops.iloc[i], rising.flops.iloc[i + 1]
    change = Spread.of((f1 / in_runs[b1]) / (f0 / in_runs[b0])) if in_runs is not None and {b0, b1} <= set(in_runs) \
        else Spread.at(rising.achieved_gflop_s.iloc[i + 1] / rising.achieved_gflop_s.iloc[i])  # each run's own ratio
    step_verdicts.append(claims.at_least(change, 1.0) if up else claims.at_most(change, 1.0))
    step_text.append(f"batch {rising.batch.iloc[i]} to {rising.batch.iloc[i + 1]}: predicted "
                     f"{'rising' if up else 'falling'}, measured {change.text('.2f', 'x')}")
show(register.decide("batching_raises_the_rate", claims.every(step_verdicts) if step_verdicts else None,
                     predicted=", ".join(f"B={r.batch}: {x:.3g}" for r, x in zip(rising.itertuples(), predicted_rates)),
                     evidence=f"chapter 3's batched decode, {points_dtype}; GFLOP/s",
                     measured=", ".join(f"B={r.batch}: {r.achieved_gflop_s:.3g}" for r in rising.itertuples()),
                     steps="; ".join(step_text), top=int(rising.batch.max()) if len(rising) else 0,
                     term=top_term.name if len(rising) else "",
                     share=top_term.best / top_pred.best if len(rising) else 0))

# %%
# A GPU in the hardware table beside its datasheet's dense 16-bit peaks (quoted for BF16; FP16's are the same).
name = ceilings.table.device_name.iloc[0]
entry = next((hw for hw in roofline.HARDWARE.values() if not math.isnan(hw.flops) and hw.name.split()[0] in name), None)
comparable = entry is not None and points_dtype != "fp32"
register.claim(
    "gpu_near_its_datasheet",
    "A GPU's measured ceilings are within the tolerance for a datasheet of its datasheet peaks.",
    held="{reached}.", not_held="{reached}: a kernel, a clock or the table entry is off.",
    not_measured=(f"{name} has no entry in the hardware table ({', '.join(table_gpus)}): there is no datasheet to set it "
                  "beside." if entry is None else f"the table quotes 16-bit peaks for the {entry.name}; set `dtype` to fp16 "
                  "or bf16 to compare."))
if comparable:
    reached = (f"the {name} reaches {read / entry.bandwidth:.0%} of its datasheet bandwidth and {peak / entry.flops:.0%} "
               f"of its datasheet FLOP rate ({entry.name})")
    show(register.decide("gpu_near_its_datasheet", claims.every([claims.within(read, entry.bandwidth, claims.DATASHEET),
                                                                  claims.within(peak, entry.flops, claims.DATASHEET)]),
                         predicted=f"{entry.bandwidth / 1e9:,.0f} GB/s, {entry.flops / 1e12:,.0f} TFLOP/s",
                         measured=f"{read / 1e9:,.0f} GB/s, {peak / 1e12:,.1f} TFLOP/s", evidence=where, reached=reached))
else:
    show(register.decide("gpu_near_its_datasheet", None))

# %% [markdown]
# **Takeaway: draw the machine's roofline from its kernels' own ceilings, not only from the streaming read and the
# square product; a pass's largest term in the cost model names what sets its time, and the pass's measured place
# under the roofs says how far it is from it.**
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
# * On a real machine, price each pass from the kernels it runs and label it with one rule before explaining it.
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
#
# 2. A team summarises documents: 30,000-token prompts and 200-token answers, on the course's GPU. Which phase
#    should they work on first?

# %% tags=["answer"] jupyter={"source_hidden": true}
summary_prompt, summary_output = 30_000, 200
alone = roofline.request_split(llama8, gpu, summary_prompt, summary_output)
summary_batch = roofline.batch_that_fits(llama8, gpu, summary_prompt + summary_output)
together = roofline.request_split(llama8, gpu, summary_prompt, summary_output, batch=summary_batch)
display(Markdown(
    f"<details><summary>Answer</summary>\n\nOn {gpu.name}s, one request "
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
# * Set `threads = 1` (after running chapters 2 and 3 with one thread): which measured passes change regime?
# * Give `LLAMA3_8B` `kv_heads=32` (multi-head attention, `dataclasses.replace`): how far does the batching limit fall?
#
# ## Before optimising, find the regime
#
# Every section of this book comes down to one rule: **find out which regime a pass is in before optimising it.**
#
# * **Memory-bound**: fewer bytes per token: quantised weights, a smaller cache (grouped-query attention), batching.
# * **Compute-bound**: fewer FLOPs or faster arithmetic: last-position logits, a cached prefix, tensor cores.
# * **Launch-bound**: fewer, larger operations: fused kernels, CUDA graphs, `torch.compile`, bigger chunks.
# * **Unexplained** (far above its prediction): measure one layer down before optimising anything.

# %%
results.table(register.frame(), "claims")
print(register.summary())
display(prose.table(register.frame()[["claim", "verdict", "predicted", "measured"]]))
results.finish()  # the run is whole: its tables and figures replace the last run's together
