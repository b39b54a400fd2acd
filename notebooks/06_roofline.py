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
# # 6. Roofline: which ceiling is a pass under?
#
# A pass through a model does arithmetic and moves bytes. A chip has a ceiling for each: a peak FLOP rate and
# a memory bandwidth. A pass cannot take less than `FLOPs / FLOP rate`, and it cannot take less than
# `bytes / bandwidth`; the larger of the two is its **roofline bound**. The ratio of a pass's FLOPs to its
# bytes, its **arithmetic intensity** in FLOP per byte, says which bound is larger: below the chip's
# **ridge point** (FLOP rate / bandwidth) the pass waits on memory, above it on arithmetic.
#
# This chapter does three things with `lib.roofline`. It reproduces, figure for figure, the course's roofline
# tables for Llama-3-8B on an H100, and explains what they show. It answers the course's "try it" questions
# in code: another GPU, a bigger model, and a batch. Then it measures this machine's two ceilings, draws its
# roofline, and places on it every prefill and decode pass measured in sections 2 and 3, each labelled with
# the fraction of its bound it reached. A point far below its roof is bound by something the roofline does
# not model, and that is worth knowing before optimising anything.

# %% tags=["parameters"]
quick = False
device = "auto"            # "auto", "cpu", "cuda", "cuda:N"
dtype = "fp32"             # the dtype of this machine's ceilings and of the measured points placed on them
course_gpu = "H100 SXM"    # the course's GPU; "A100 80GB" is the try-it question
other_gpu = "A100 80GB"
big_model = "Llama-3-70B"  # a preset of lib.roofline
batch_contexts = [128, 2048, 8192, 32768]  # decode contexts for the batching question
slack = 2.5                # a pass more than slack x its largest lower bound is "unexplained"
# Used only when sections 2 or 3 have not been run: a small measurement of this chapter's own.
fallback_model = "gpt2-small"
fallback_prompts = [1, 16, 128, 512]
fallback_contexts = [16, 512]
fallback_batches = [1, 4, 16]
fallback_steps = 12

# %%
import json
import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
import transformers
from IPython.display import Markdown, display

from lib import roofline as rl
from lib import sweeps
from lib.device import describe_environment, resolve_device, resolve_dtype
from lib.models import LoadedModel, gpt2_config, load_model
from lib.results import REPO_ROOT, Results, load_reference, load_table, output_root

dev = resolve_device(device)
torch_dtype = resolve_dtype(dtype, dev)
if quick:
    fallback_model, fallback_prompts, fallback_contexts, fallback_batches, fallback_steps = (
        "tiny-gpt2", [1, 16, 64], [16, 64], [1, 4], 6)
measure_sizes = dict(matmul_n=512, matvec_bytes=64 * 2**20) if quick else {}
results = Results("06_roofline", quick=quick, device=dev, dtype=torch_dtype,
                  params=dict(course_gpu=course_gpu, other_gpu=other_gpu, big_model=big_model,
                              batch_contexts=batch_contexts, slack=slack, fallback_model=fallback_model,
                              fallback_prompts=fallback_prompts, fallback_contexts=fallback_contexts,
                              fallback_batches=fallback_batches, fallback_steps=fallback_steps))
pd.Series({**describe_environment(dev, torch_dtype), "course GPU": course_gpu, "try-it GPU": other_gpu,
           "try-it model": big_model}).to_frame("this run")

# %% [markdown]
# ## The course's tables, reproduced
#
# The course prints a roofline table for Llama-3-8B in BF16 on one H100 SXM: a prefill of one prompt at several
# lengths, a batch-1 decode step at several contexts, and the split of one request. `lib.roofline.course_tables`
# prints the same from the model's published shape and the chip's datasheet peaks, with the module's stated
# conventions (matmul weights are the blocks plus the LM head, the embedding being a lookup; prefill attention
# halved by the causal mask; KV bytes with grouped-query attention). The check below is exact: every line
# printed here must equal the reference file's line, character for character.

# %%
H100, A100 = rl.HARDWARE[course_gpu], rl.HARDWARE[other_gpu]
LLAMA8, BIG = rl.LLAMA3_8B, rl.PRESETS[big_model]
printed = rl.course_tables(LLAMA8, H100)
print(printed)
reference_lines = [line for line in (REPO_ROOT / "data/reference/course_roofline_llama3_8b_h100.txt")
                   .read_text().splitlines() if not line.startswith("#")]
assert printed.splitlines() == reference_lines, "the calculator no longer reproduces the course's table"
display(Markdown(f"All **{len(reference_lines)}** lines match the course's printout exactly."))

prefill_table = pd.DataFrame(rl.prefill_rows(LLAMA8, H100))
decode_table = pd.DataFrame(rl.decode_rows(LLAMA8, H100))
results.table(prefill_table, "course_prefill")
results.table(decode_table, "course_decode")

# %% [markdown]
# ### Where prefill turns compute-bound, and why its throughput then falls
#
# A weight matmul over `S` rows does `2 S` FLOPs per weight and reads each weight once (two bytes in BF16),
# so its intensity is about `S`: prefill should leave the memory roof near a prompt as long as the ridge
# point is in FLOP per byte. Past that point its speed is the FLOP rate divided by the FLOPs each token costs,
# and that cost is not constant: every token does `2 x weights` FLOPs of matmul plus attention over the
# tokens before it, `2 x layers x d_model x S` FLOPs in the causal convention. The attention term grows with
# the prompt, so the tokens per second fall.

# %%
crossover = rl.prefill_crossover(LLAMA8, H100)
rows = []
for p in rl.COURSE_PROMPTS:
    cost = rl.prefill_cost(LLAMA8, p)
    attention = LLAMA8.layers * 2 * LLAMA8.d_model * p * p
    r = rl.roofline(H100, cost)
    rows.append(dict(prompt=p, gflop=cost.flops / 1e9, attention_share_of_flops=attention / cost.flops,
                     gflop_per_token=cost.flops / p / 1e9, bound=r.bound, tokens_per_s=r.tokens_per_s))
attention_table = pd.DataFrame(rows)
results.table(attention_table, "prefill_attention_share")
display(attention_table.round({"gflop": 0, "attention_share_of_flops": 3, "gflop_per_token": 2, "tokens_per_s": 0}))

peak = attention_table.loc[attention_table.tokens_per_s.idxmax()]
last = attention_table.iloc[-1]
equal_at = LLAMA8.matmul_params / (LLAMA8.layers * LLAMA8.d_model)  # attention per token = matmul per token
assert abs(crossover - H100.ridge) / H100.ridge < 0.05, "prefill should leave the memory roof near the ridge"
assert attention_table.attention_share_of_flops.is_monotonic_increasing
display(Markdown(
    f"The ridge of the {H100.name} is **{H100.ridge:.0f} FLOP/byte**; the shortest compute-bound prefill is "
    f"**{crossover} tokens**. Throughput peaks in the table at {int(peak.prompt):,} tokens "
    f"({peak.tokens_per_s:,.0f} tokens/s), where attention is {peak.attention_share_of_flops:.1%} of the FLOPs. "
    f"At {int(last.prompt):,} tokens attention is **{last.attention_share_of_flops:.0%}** of the FLOPs, a token "
    f"costs {last.gflop_per_token:.1f} GFLOP instead of {peak.gflop_per_token:.1f}, and the rate falls to "
    f"**{last.tokens_per_s:,.0f} tokens/s** ({last.tokens_per_s / peak.tokens_per_s:.0%} of the peak): the ratio "
    f"of the two per-token costs, exactly. Attention would cost as much as all the matmuls at about "
    f"{equal_at:,.0f} tokens."))

# %%
prompts_dense = np.unique(np.logspace(0, math.log10(max(rl.COURSE_PROMPTS)), 200).astype(int))
fig, (ax_r, ax_t) = plt.subplots(1, 2, figsize=(13, 4.8))
x = np.logspace(-1, 5, 300)
for hw, style in ((H100, "-"), (A100, "--")):
    ax_r.plot(x, [rl.attainable_flops(hw, i) / 1e12 for i in x], style, color="k", lw=1.2,
              label=f"{hw.name} roof (ridge {hw.ridge:.0f} FLOP/B)")
    rate = [rl.roofline(hw, rl.prefill_cost(LLAMA8, int(p))).tokens_per_s for p in prompts_dense]
    ax_t.plot(prompts_dense, rate, style, color="C0", label=f"{hw.name}: prefill tokens/s bound")
pre = [rl.prefill_cost(LLAMA8, p) for p in rl.COURSE_PROMPTS]
dec = [rl.decode_cost(LLAMA8, 1, c) for c in rl.COURSE_CONTEXTS]
ax_r.scatter([c.intensity for c in pre], [rl.attainable_flops(H100, c.intensity) / 1e12 for c in pre],
             color="C0", zorder=3, label="Llama-3-8B prefill, course prompts")
ax_r.scatter([c.intensity for c in dec], [rl.attainable_flops(H100, c.intensity) / 1e12 for c in dec],
             color="C3", marker="s", zorder=3, label="Llama-3-8B decode, batch 1")
ax_r.set_xscale("log")
ax_r.set_yscale("log")
ax_r.set_xlabel("arithmetic intensity (FLOP/byte)")
ax_r.set_ylabel("attainable TFLOP/s")
ax_r.set_title(f"Decode sits ~{H100.ridge / dec[0].intensity:.0f}x left of the {H100.name} ridge; "
               f"prefill crosses it at {crossover} tokens", fontsize=10)
ax_r.legend(fontsize=7)
ax_r.grid(True, which="major", alpha=0.3)
share = [LLAMA8.layers * 2 * LLAMA8.d_model * p * p / rl.prefill_cost(LLAMA8, int(p)).flops for p in prompts_dense]
ax_s = ax_t.twinx()
ax_s.plot(prompts_dense, share, ":", color="C1", label="attention share of prefill FLOPs")
ax_s.set_ylabel("attention share of FLOPs", color="C1")
ax_s.set_ylim(0, 1)
ax_t.axvline(crossover, color="grey", lw=0.8, label=f"{H100.name} crossover, {crossover} tokens")
ax_t.set_xscale("log", base=2)
ax_t.set_yscale("log")
ax_t.set_xlabel("prompt tokens")
ax_t.set_ylabel("prompt tokens per second (roofline bound)")
ax_t.set_title(f"Prefill throughput peaks at the crossover, then falls as attention grows to "
               f"{last.attention_share_of_flops:.0%} of the FLOPs at {int(last.prompt):,} tokens", fontsize=10)
lines = ax_t.get_legend_handles_labels()
more = ax_s.get_legend_handles_labels()
ax_t.legend(lines[0] + more[0], lines[1] + more[1], fontsize=7, loc="lower center")
ax_t.grid(True, which="major", alpha=0.3)
fig.tight_layout()
results.figure(fig, "course_roofline")
plt.show()

# %% [markdown]
# ### One request, split between the phases
#
# The request's prefill is one pass; its decode is one step per output token, each reading the weights and a
# cache one token longer than the last (the course's convention: one step per output token).

# %%
prompt_len, output_len = rl.COURSE_REQUEST
split = rl.request_split(LLAMA8, H100, prompt_len, output_len)
serving = rl.request_split(LLAMA8, H100, prompt_len, output_len, first_token_from_prefill=True, logits="last")
split_table = pd.DataFrame([
    dict(convention="course: one decode step per output token, logits at every position",
         prefill_ms=split.prefill_s * 1e3, decode_ms=split.decode_s * 1e3, decode_share=split.decode_share),
    dict(convention="serving: first token from the prefill, logits at the last position",
         prefill_ms=serving.prefill_s * 1e3, decode_ms=serving.decode_s * 1e3, decode_share=serving.decode_share)])
results.table(split_table, "request_split")
display(split_table.round(3))
decode_flops = sum(rl.decode_cost(LLAMA8, 1, prompt_len + i).flops for i in range(output_len))
flops_ratio = decode_flops / rl.prefill_cost(LLAMA8, prompt_len).flops
display(Markdown(
    f"A {prompt_len:,}-in, {output_len}-out request spends **{split.prefill_s * 1e3:.0f} ms** in prefill and "
    f"**{split.decode_s * 1e3:,.0f} ms** in decode: decode is **{split.decode_share:.0%}** of its time at the "
    f"roofline, although its {output_len} steps do only {flops_ratio:.2f} times the prefill's arithmetic. "
    f"Taking the first token from the prefill (as section 1 defines TTFT) saves one step, "
    f"{(split.decode_s - serving.decode_s) * 1e3:.1f} ms."))

# %% [markdown]
# **Takeaway: prefill's intensity grows with the prompt and crosses the ridge near a prompt as long as the ridge
# point; decode's stays near one FLOP per byte, so at batch 1 it is memory-bound and owns most of a request's time.**
#
# ## Try it, answered: another GPU and a bigger model
#
# The course's first two exercises: swap the H100 for an A100 80 GB, and Llama-3-8B for Llama-3-70B. The
# roofline gives the times; whether a model fits is a question of memory capacity, which the hardware table
# does not hold, so it is a constant here with its source. Weights are only part of what must fit: the cache
# needs room too.

# %%
# Memory capacity (bytes) of the GPUs in lib.roofline.HARDWARE. Source: NVIDIA datasheets, as marketed:
# H100 SXM5 80 GB HBM3; A100 80GB SXM 80 GB HBM2e; H200 SXM 141 GB HBM3e. The runtime reserves some of it.
GPU_MEMORY_BYTES = {"H100 SXM": 80e9, "A100 80GB": 80e9, "H200": 141e9}

rows = []
for shape in (LLAMA8, BIG):
    for hw in (H100, A100):
        memory = GPU_MEMORY_BYTES[hw.name]
        floor = rl.decode_floor(shape, hw)
        room = memory - shape.weight_bytes
        rows.append(dict(model=shape.name, gpu=hw.name, ridge_flop_per_byte=hw.ridge,
                         prefill_crossover_tokens=rl.prefill_crossover(shape, hw),
                         decode_floor_ms=floor * 1e3, single_stream_tokens_per_s=1 / floor,
                         weight_gb=shape.weight_bytes / 1e9, gpu_memory_gb=memory / 1e9,
                         weights_fit=room > 0, gpus_for_weights=math.ceil(shape.weight_bytes / memory),
                         kv_tokens_that_fit=max(0, room) / shape.kv_bytes_per_token))
try_it = pd.DataFrame(rows)
results.table(try_it, "try_it_a100_70b")
display(try_it.round(2))

t = try_it.set_index(["model", "gpu"])
h8, a8 = t.loc[(LLAMA8.name, H100.name)], t.loc[(LLAMA8.name, A100.name)]
hb = t.loc[(BIG.name, H100.name)]
assert not hb.weights_fit and h8.weights_fit
assert rl.decode_cost(LLAMA8, 1, max(rl.COURSE_CONTEXTS)).intensity < A100.ridge < H100.ridge
display(Markdown(
    f"**{A100.name}.** The ridge moves from {H100.ridge:.0f} to **{A100.ridge:.0f} FLOP/byte**: the A100 has "
    f"{H100.flops / A100.flops:.1f} times less arithmetic but only {H100.bandwidth / A100.bandwidth:.2f} times "
    f"less bandwidth. Prefill turns compute-bound sooner, at **{int(a8.prefill_crossover_tokens)} tokens** instead "
    f"of {int(h8.prefill_crossover_tokens)}, and the decode floor rises from {h8.decode_floor_ms:.2f} to "
    f"**{a8.decode_floor_ms:.2f} ms** ({a8.single_stream_tokens_per_s:.0f} tokens/s for one stream), in "
    f"proportion to the bandwidth alone.\n\n"
    f"**{BIG.name}.** Its matmul weights are **{hb.weight_gb:.0f} GB** in BF16; its single-GPU decode floor on "
    f"the {H100.name} would be **{hb.decode_floor_ms:.1f} ms** ({hb.single_stream_tokens_per_s:.0f} tokens/s). "
    f"That number is academic: {hb.weight_gb:.0f} GB of weights do not fit in {hb.gpu_memory_gb:.0f} GB, so "
    f"the model needs at least {int(hb.gpus_for_weights)} GPUs before any cache. Split across them with tensor "
    f"parallelism, each GPU reads 1/{int(hb.gpus_for_weights)} of the weights, so the floor per step falls to "
    f"about {hb.decode_floor_ms / hb.gpus_for_weights:.1f} ms plus the communication the roofline omits."))

# %%
fp8 = BIG.with_dtype("fp8")
room = GPU_MEMORY_BYTES[H100.name] - fp8.weight_bytes
display(Markdown(
    f"With FP8 weights the same model is {fp8.weight_bytes / 1e9:.1f} GB and does fit on one {H100.name}, with "
    f"{room / 1e9:.1f} GB left: room for about **{room / BIG.kv_bytes_per_token:,.0f} tokens** of BF16 cache "
    f"({BIG.kv_bytes_per_token / 1024:.0f} KiB each), one long conversation or a handful of short ones. Its decode "
    f"floor would be {rl.decode_floor(fp8, H100) * 1e3:.1f} ms. Llama-3-8B leaves room for "
    f"{h8.kv_tokens_that_fit:,.0f} tokens of cache on the same GPU."))

# %% [markdown]
# **Takeaway: a slower GPU moves the ridge, the prefill crossover and the decode floor together; a model whose
# weights do not fit has a decode floor only on paper, and capacity, not bandwidth, decides the first design choice.**
#
# ## Batching moves decode toward the ridge, until the caches stop it
#
# A decode step for `B` sequences does `B` times the arithmetic but reads the weights once: the weights' part
# of its intensity grows with `B`. Each sequence's cache, though, is read in full, so the cache's bytes grow
# with `B` too. As `B` grows without bound the intensity levels off at the FLOPs per sequence over the cache
# bytes per sequence,
#
# `limit(C) = (2 x weights + 4 x layers x d_model x C) / (KV bytes per token x C)`,
#
# which falls as the context `C` grows. Where that limit is below the ridge, no batch makes decode
# compute-bound. Capacity cuts it shorter still: the caches of `B` sequences must fit beside the weights.

# %%
def batch_to_reach(shape, hw, context):
    """Smallest batch whose decode step at `context` reaches the ridge (inf when the limit is below it)."""
    per_sequence_flops = 2 * shape.matmul_params + 4 * shape.layers * shape.d_model * context
    denominator = per_sequence_flops - hw.ridge * shape.kv_bytes_per_token * context
    return math.ceil(hw.ridge * shape.weight_bytes / denominator) if denominator > 0 else math.inf


rows = []
memory = GPU_MEMORY_BYTES[H100.name]
for c in batch_contexts:
    limit = (2 * LLAMA8.matmul_params + 4 * LLAMA8.layers * LLAMA8.d_model * c) / (LLAMA8.kv_bytes_per_token * c)
    assert math.isclose(rl.decode_cost(LLAMA8, 10**9, c).intensity, limit, rel_tol=1e-6)
    fits = int((memory - LLAMA8.weight_bytes) // (LLAMA8.kv_bytes_per_token * c))
    at_fit = rl.decode_cost(LLAMA8, max(fits, 1), c)
    rows.append(dict(context=c, intensity_batch_1=rl.decode_cost(LLAMA8, 1, c).intensity,
                     intensity_limit=limit, batch_to_reach_h100_ridge=batch_to_reach(LLAMA8, H100, c),
                     batch_to_reach_a100_ridge=batch_to_reach(LLAMA8, A100, c),
                     largest_batch_in_80gb=fits, intensity_at_largest_batch=at_fit.intensity,
                     kv_share_of_bytes_at_largest_batch=1 - LLAMA8.weight_bytes / at_fit.bytes))
batching = pd.DataFrame(rows)
results.table(batching, "decode_batching_limit")
display(batching.round(2))
assert (batching.intensity_batch_1 < H100.ridge).all()
assert batching.intensity_limit.is_monotonic_decreasing

# %%
batch_axis = np.unique(np.logspace(0, 5, 300).astype(int))
fig, ax = plt.subplots(figsize=(9, 5))
for i, c in enumerate(batch_contexts):
    color = f"C{i}"
    ax.plot(batch_axis, [rl.decode_cost(LLAMA8, int(b), c).intensity for b in batch_axis], color=color,
            label=f"context {c:,}")
    row = batching.iloc[i]
    ax.axhline(row.intensity_limit, color=color, ls=":", lw=1)
    if row.largest_batch_in_80gb >= 1:
        ax.plot(row.largest_batch_in_80gb, row.intensity_at_largest_batch, "x", color=color, ms=9, mew=2)
for hw, style in ((H100, "--"), (A100, "-.")):
    ax.axhline(hw.ridge, color="k", ls=style, lw=1, label=f"{hw.name} ridge, {hw.ridge:.0f} FLOP/B")
ax.plot([], [], "x", color="grey", label=f"largest batch whose caches fit in {memory / 1e9:.0f} GB")
ax.plot([], [], ":", color="grey", label="limit as batch grows without bound")
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("sequences decoded together (batch)")
ax.set_ylabel("decode step intensity (FLOP/byte)")
reach = batching[np.isfinite(batching.batch_to_reach_h100_ridge)]
ax.set_title(f"Llama-3-8B decode: batching reaches the {H100.name} ridge only at short contexts; from "
             f"{int(batching[batching.intensity_limit < H100.ridge].context.min()):,} tokens the caches hold it below",
             fontsize=10)
ax.legend(fontsize=7, loc="upper left")
ax.grid(True, which="major", alpha=0.3)
results.figure(fig, "decode_batching")
plt.show()

short, long_ = batching.iloc[0], batching.iloc[-1]
display(Markdown(
    f"At context {int(short.context):,} the caches are small: intensity climbs from {short.intensity_batch_1:.1f} "
    f"FLOP/byte toward a limit of {short.intensity_limit:.0f}, and **{short.batch_to_reach_h100_ridge:.0f} "
    f"sequences** reach the {H100.name} ridge. At context {int(long_.context):,} the limit is only "
    f"**{long_.intensity_limit:.1f} FLOP/byte**: every sequence's cache costs more bytes than its arithmetic can "
    f"use, and no batch gets near the ridge. Capacity binds even sooner: at that context only "
    f"{int(long_.largest_batch_in_80gb)} sequences' caches fit beside the weights in {memory / 1e9:.0f} GB, and "
    f"then the caches are {long_.kv_share_of_bytes_at_largest_batch:.0%} of the bytes a step reads."))

# %% [markdown]
# **Takeaway: batching shares the weights' bytes, so decode's intensity rises roughly with the batch, but each
# sequence's cache is its own; at long contexts the intensity levels off below the ridge, and fewer cache bytes per
# token (grouped-query attention, a quantised cache) is the only way up.**
#
# ## This machine's roofline
#
# The same arithmetic applies to the machine running this page. `lib.roofline.measure_machine_detail` measures
# its two ceilings in the chosen dtype: the bandwidth a large matrix-vector product achieves (every weight read
# once) and the rate of a large matrix product.

# %%
measured = rl.measure_machine_detail(dev, torch_dtype, **measure_sizes)
here = measured.hardware
machine = pd.DataFrame([dict(device=measured.device, dtype=measured.dtype, threads=measured.threads,
                             bandwidth_gb_s=here.bandwidth / 1e9, bandwidth_low_gb_s=measured.bandwidth_low / 1e9,
                             bandwidth_high_gb_s=measured.bandwidth_high / 1e9, gflop_s=here.flops / 1e9,
                             gflop_s_low=measured.flops_low / 1e9, gflop_s_high=measured.flops_high / 1e9,
                             ridge_flop_per_byte=here.ridge, matvec_mib=measured.matvec_bytes / 2**20,
                             matmul_n=measured.matmul_n)])
results.table(machine, "machine")
display(machine.round(2))
display(Markdown(
    f"This machine ({measured.device}, {measured.dtype}, {measured.threads} threads) streams "
    f"**{here.bandwidth / 1e9:.1f} GB/s** ({measured.bandwidth_low / 1e9:.1f} to {measured.bandwidth_high / 1e9:.1f}) "
    f"and multiplies matrices at **{here.flops / 1e9:.1f} GFLOP/s** ({measured.flops_low / 1e9:.1f} to "
    f"{measured.flops_high / 1e9:.1f}): its ridge is **{here.ridge:.1f} FLOP/byte**, against "
    f"{H100.ridge:.0f} for the {H100.name} in BF16."))

# %% [markdown]
# ### The measured passes of sections 2 and 3
#
# Section 2 timed prefills (logits at the last position only) and section 3 timed decode steps at several
# contexts and batched decode. Their tables are read from `data/`, with the model each section used (from its
# `provenance.json`); only the rows in this chapter's dtype with all threads are placed. If a section has not
# been run, this chapter says so and measures a few points itself.

# %%
def section_provenance(section, name):
    """provenance.json of the folder `load_table` reads `name` from (same search order), or {}."""
    for root in ([output_root(True)] if quick else []) + [REPO_ROOT]:
        folder = root / "data" / section
        if (folder / f"{name}.csv").exists():
            path = folder / "provenance.json"
            return json.loads(path.read_text()) if path.exists() else {}
    return {}


def shape_of(model_name):
    """The model's shape, read from its transformers config, in this chapter's dtype."""
    if model_name in ("gpt2-small", "tiny-gpt2"):
        config = gpt2_config(model_name)
    else:
        config = load_model(model_name, "cpu").config
    return rl.ModelShape.from_config(config, name=model_name, bytes_per_param=torch_dtype)


def all_threads_rows(frame):
    """Rows in this chapter's dtype at the largest thread count measured."""
    rows = frame[frame.dtype == dtype]
    return rows[rows.threads == rows.threads.max()] if len(rows) else rows


def span(values, fmt):
    """'a to b' for a range of values, or one value when they print the same."""
    show = fmt if callable(fmt) else (lambda v: format(v, fmt))
    a, b = show(min(values)), show(max(values))
    return a if a == b else f"{a} to {b}"


def pct(fraction):
    """A fraction as a percentage with enough digits to be non-zero."""
    digits = 0 if fraction >= 0.1 else 1 if fraction >= 0.01 else 2 if fraction >= 0.001 else 3
    return f"{fraction:.{digits}%}"


notes, models, steps_of = [], {}, {}
_fallback_lm = {}


def fallback_lm():
    if "lm" not in _fallback_lm:
        _fallback_lm["lm"] = load_model(fallback_model, dev, torch_dtype)
    return _fallback_lm["lm"]


prefill = load_table("02_prefill_sweep", "prefill_sweep", quick=quick)
prefill = None if prefill is None else all_threads_rows(prefill)
if prefill is not None and len(prefill):
    prov = section_provenance("02_prefill_sweep", "prefill_sweep")
    models["prefill"] = prov.get("model", fallback_model)
    prefill = prefill[prefill.status == "ok"]
    notes.append(f"prefill: section 2's table ({models['prefill']}, {len(prefill)} prompt lengths)")
else:
    models["prefill"] = fallback_model
    notes.append(f"prefill: section 2 has not been run in {dtype}; measured {fallback_model} here instead")
    prefill = sweeps.prefill_sweep(fallback_lm(), fallback_prompts, repeats=2, warmup=1, label="prefill (fallback)")
    prefill = prefill[prefill.status == "ok"]

decode = load_table("03_decode_sweep", "decode_sweep", quick=quick)
decode = None if decode is None else all_threads_rows(decode)
prov3 = section_provenance("03_decode_sweep", "decode_sweep")
if decode is not None and len(decode):
    models["decode"] = prov3.get("model", fallback_model)
    steps_of["decode"] = prov3.get("parameters", {}).get("steps", 0)
    notes.append(f"decode: section 3's table ({models['decode']}, {len(decode)} contexts)")
else:
    models["decode"] = fallback_model
    steps_of["decode"] = fallback_steps
    notes.append(f"decode: section 3 has not been run in {dtype}; measured {fallback_model} here instead")
    runs = sweeps.decode_sweep(fallback_lm(), fallback_contexts, steps=fallback_steps, runs=2, label="decode (fallback)")
    decode = (runs.groupby("context_tokens").agg(step_ms=("median_s", "median"), runs_low_ms=("median_s", "min"),
                                                  runs_high_ms=("median_s", "max")).mul(1e3).reset_index())

batched = load_table("03_decode_sweep", "batched_decode", quick=quick)
if batched is not None and len(batched):
    models["batched"] = prov3.get("model", models["decode"])
    steps_of["batched"] = int(batched.steps.iloc[0])
    notes.append(f"batched decode: section 3's table ({models['batched']}, batches {batched.batch.tolist()})")
else:
    models["batched"] = fallback_model
    steps_of["batched"] = fallback_steps
    notes.append(f"batched decode: section 3 has not been run; measured {fallback_model} here instead")
    batched = sweeps.batched_decode_sweep(fallback_lm(), fallback_contexts[-1], fallback_batches,
                                          steps=fallback_steps, label="batched (fallback)")
batched = batched[batched.status == "ok"]

ceilings = load_table("03_decode_sweep", "ceilings", quick=quick)
launch_column = "launch floor ms (12 narrow layers)"
ceilings = None if ceilings is None else all_threads_rows(ceilings)
if ceilings is not None and len(ceilings) and launch_column in ceilings:
    t_launch = float(ceilings[launch_column].iloc[0]) / 1e3
    notes.append(f"launch floor: section 3's narrow-GPT-2 decode step, {t_launch * 1e3:.2f} ms")
else:
    # As section 3 does: the same layers and operations at width 64, so bytes and FLOPs are negligible.
    base = fallback_lm().config
    narrow = transformers.GPT2LMHeadModel(transformers.GPT2Config(**{**base.to_dict(), "n_embd": 64, "n_head": 4,
                                                                     "vocab_size": 1024})).eval().to(dev, torch_dtype)
    narrow_lm = LoadedModel(narrow, None, "narrow GPT-2", "random weights", dev, torch_dtype)
    t_launch = float(sweeps.decode_sweep(narrow_lm, [16], steps=fallback_steps, runs=1).median_s.iloc[0])
    notes.append(f"launch floor: section 3 has not been run; measured a narrow GPT-2 step here, {t_launch * 1e3:.2f} ms")
out_of_order = int((prefill.sort_values("prompt_tokens").median_s.diff() < 0).sum())
if out_of_order:
    notes.append(f"caution: {out_of_order} of section 2's prefill times are shorter than the time for a shorter "
                 f"prompt; the machine was busy while it ran, and those points say more about the load than the model")
display(Markdown("\n".join(f"* {n}" for n in notes)))

# %% [markdown]
# **Predict.** Each pass's FLOPs and bytes come from `lib.roofline` (`prefill_cost(shape, T, logits="last")`,
# `decode_cost(shape, B, C)` at the middle of each run's steps), for the shape read from the model's config. On
# this machine's two ceilings they give a roofline bound before looking at a single measured time. A third lower
# bound comes from section 3: the **launch floor**, the time of a decode step of a GPT-2 with the same layers
# and operations but a width of 64, whose FLOPs and bytes are negligible. Every pass of the model issues those
# operations, so no pass of `F` FLOPs can run faster than `F / t_launch` FLOP/s: on the roofline plot that is a
# cap under which a short pass sits, however much room the roof leaves.

# %%
points = []
for _, r in prefill.iterrows():
    points.append(dict(series="prefill", model=models["prefill"], length_or_batch=int(r.prompt_tokens),
                       cost=rl.prefill_cost(shape_of(models["prefill"]), int(r.prompt_tokens), logits="last"),
                       measured_s=r.median_s, low_s=r.low_s, high_s=r.high_s))
for _, r in decode.iterrows():
    context = int(r.context_tokens) + steps_of["decode"] // 2
    points.append(dict(series="decode, batch 1", model=models["decode"], length_or_batch=int(r.context_tokens),
                       cost=rl.decode_cost(shape_of(models["decode"]), 1, context),
                       measured_s=r.step_ms / 1e3, low_s=r.runs_low_ms / 1e3, high_s=r.runs_high_ms / 1e3))
for _, r in batched.iterrows():
    context = int(r.context_tokens) + steps_of["batched"] // 2
    points.append(dict(series=f"batched decode, context {int(r.context_tokens)}", model=models["batched"],
                       length_or_batch=int(r.batch), cost=rl.decode_cost(shape_of(models["batched"]), int(r.batch), context),
                       measured_s=r.median_s, low_s=r.low_s, high_s=r.high_s))
for p in points:
    bound = rl.roofline(here, p["cost"])
    bounds = {"compute-bound": bound.t_compute, "memory-bound": bound.t_memory, "launch-bound": t_launch}
    p.update(flops=p["cost"].flops, bytes=p["cost"].bytes, intensity=p["cost"].intensity,
             bound_s=bound.time, roof=f"{bound.bound}-bound", launch_s=t_launch,
             predicted_s=max(bounds.values()), predicted_regime=max(bounds, key=bounds.get))
placed = pd.DataFrame(points).drop(columns="cost")
display(placed[["series", "model", "length_or_batch", "intensity", "roof", "bound_s", "launch_s", "predicted_s",
                "predicted_regime"]].assign(bound_ms=lambda d: d.bound_s * 1e3, launch_ms=lambda d: d.launch_s * 1e3,
                                            predicted_ms=lambda d: d.predicted_s * 1e3)
        .drop(columns=["bound_s", "launch_s", "predicted_s"]).round(3))
dec1 = placed[placed.series == "decode, batch 1"]
display(Markdown(
    f"Prediction: a batch-1 decode step has an intensity of **{span(dec1.intensity, '.2f')} FLOP/byte**, "
    f"{'below' if dec1.intensity.max() < here.ridge else 'above'} this machine's ridge of {here.ridge:.1f}, so "
    f"its roof is {dec1.roof.iloc[0].removesuffix('-bound')}; the longest prefill, "
    f"{placed[placed.series == 'prefill'].length_or_batch.max()} tokens, has an intensity of "
    f"{placed[placed.series == 'prefill'].intensity.max():.0f}. With the launch floor counted too "
    f"({t_launch * 1e3:.2f} ms, the cost of issuing one pass's operations, whatever its length), the largest of the "
    f"three lower bounds predicts: "
    + "; ".join(f"{s}: {', '.join(sorted(set(g.predicted_regime)))}" for s, g in placed.groupby("series", sort=False))
    + "."))

# %% [markdown]
# **Measure.** The measured times are the sections' medians. Achieved FLOP/s is the pass's FLOPs over its
# measured time; the fraction of the bound is the roofline time over the measured time (1 means on the roof).

# %%
placed["achieved_gflop_s"] = placed.flops / placed.measured_s / 1e9
placed["attainable_gflop_s"] = [rl.attainable_flops(here, i) / 1e9 for i in placed.intensity]
placed["fraction_of_bound"] = placed.bound_s / placed.measured_s
placed["launch_cap_gflop_s"] = placed.flops / placed.launch_s / 1e9
placed["measured_over_predicted"] = placed.measured_s / placed.predicted_s
# Decided from the numbers: on its roof (within slack of the roofline bound), else held by the fixed cost
# (within slack of it), else something neither explains.
placed["regime"] = np.select(
    [placed.measured_s <= slack * placed.bound_s, placed.measured_s <= slack * placed.launch_s],
    [placed.roof, "launch-bound"], "unexplained overhead")
results.table(placed, "measured_on_roofline")
display(placed[["series", "length_or_batch", "intensity", "measured_s", "achieved_gflop_s", "attainable_gflop_s",
                "fraction_of_bound", "measured_over_predicted", "regime"]]
        .assign(measured_ms=lambda d: d.measured_s * 1e3).drop(columns="measured_s").round(3))
assert (placed.measured_s > 0).all()
assert (placed.fraction_of_bound < 3).all(), "a pass 3x faster than its roofline bound means a ceiling is wrong"

# %%
fig, ax = plt.subplots(figsize=(10, 6))
lo = min(placed.intensity.min(), 0.1) / 2
hi = max(placed.intensity.max(), here.ridge) * 4
xs = np.logspace(math.log10(lo), math.log10(hi), 300)
ax.plot(xs, [rl.attainable_flops(here, i) / 1e9 for i in xs], "k-", lw=1.8,
        label=f"roof: {here.bandwidth / 1e9:.1f} GB/s x intensity, capped at {here.flops / 1e9:.0f} GFLOP/s")
ax.axvline(here.ridge, color="k", ls=":", lw=0.8)
ax.annotate(f"ridge {here.ridge:.1f} FLOP/B", (here.ridge, here.flops / 1e9), textcoords="offset points",
            xytext=(4, -14), fontsize=8)
markers = {"prefill": "o", "decode, batch 1": "s"}
for i, (series, g) in enumerate(placed.groupby("series", sort=False)):
    color = f"C{i}"
    ax.scatter(g.intensity, g.achieved_gflop_s, marker=markers.get(series, "^"), color=color, zorder=3, s=40,
               label=f"{series} ({g.model.iloc[0]}), measured")
    ax.plot(g.intensity, g.launch_cap_gflop_s, ":", marker="_", ms=14, color=color, lw=1.2,
            label=f"{series}: launch-floor cap, FLOPs / {t_launch * 1e3:.2f} ms")
    for j, (_, r) in enumerate(g.iterrows()):
        offset = (-30, 4 + 9 * j) if series.startswith("decode") else (5, -10 if j % 2 else 4)
        ax.annotate(pct(r.fraction_of_bound), (r.intensity, r.achieved_gflop_s), textcoords="offset points",
                    xytext=offset, fontsize=7, color=color)
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlim(lo, hi)
ax.set_ylim(top=here.flops / 1e9 * 6)  # launch-floor caps far above the roof leave the frame
ax.set_xlabel("arithmetic intensity (FLOP/byte)")
ax.set_ylabel(f"achieved GFLOP/s ({dtype})")
share = (placed.regime != "memory-bound") & (placed.regime != "compute-bound")
ax.set_title(f"This machine ({measured.device}, {dtype}): passes reach {pct(placed.fraction_of_bound.min())} to "
             f"{pct(placed.fraction_of_bound.max())} of their roof;\n{share.sum()} of {len(placed)} are held by "
             f"something other than FLOPs or bytes (labels: fraction of the roofline bound reached)", fontsize=10)
ax.legend(fontsize=7, loc="lower right")
ax.grid(True, which="major", alpha=0.3)
results.figure(fig, "this_machine_roofline")
plt.show()

# %%
dec1 = placed[placed.series == "decode, batch 1"]
pre = placed[placed.series == "prefill"].sort_values("length_or_batch")
longest = pre.iloc[-1]
batched_rows = placed[placed.series.str.startswith("batched")].sort_values("length_or_batch")
text = (f"**Decode, batch 1** ({models['decode']}): each step reached **{span(dec1.fraction_of_bound, pct)}** of "
        f"its {dec1.roof.iloc[0].removesuffix('-bound')} bound ({span(dec1.measured_s * 1e3, '.1f')} ms against "
        f"{span(dec1.bound_s * 1e3, '.2f')} ms); "
        f"measured over its largest lower bound, launch floor included: {span(dec1.measured_over_predicted, '.2f')}. "
        f"Regime: {', '.join(sorted(set(dec1.regime)))}.\n\n"
        f"**The longest prefill** ({int(longest['length_or_batch'])} tokens, {models['prefill']}) reached "
        f"**{pct(longest.fraction_of_bound)}** of its {longest.roof.removesuffix('-bound')} bound at "
        f"{longest.achieved_gflop_s:.1f} GFLOP/s "
        f"({longest.achieved_gflop_s * 1e9 / here.flops:.0%} of the matrix rate); the shortest, "
        f"{int(pre.iloc[0]['length_or_batch'])} token{'s' if pre.iloc[0]['length_or_batch'] > 1 else ''}, reached "
        f"{pct(pre.iloc[0].fraction_of_bound)}: {pre.iloc[0].regime}.")
if len(batched_rows) > 1:
    b0, b1 = batched_rows.iloc[0], batched_rows.iloc[-1]
    text += (f"\n\n**Batched decode** from batch {int(b0['length_or_batch'])} to {int(b1['length_or_batch'])}: intensity "
             f"{b0.intensity:.2f} to {b1.intensity:.2f} FLOP/byte, achieved {b0.achieved_gflop_s:.2f} to "
             f"{b1.achieved_gflop_s:.2f} GFLOP/s, {pct(b0.fraction_of_bound)} to {pct(b1.fraction_of_bound)} of the bound. "
             f"Regimes: {', '.join(f'batch {int(r.length_or_batch)}: {r.regime}' for _, r in batched_rows.iterrows())}.")
display(Markdown(text))

# %% [markdown]
# Read the picture by distance from the roof. A point on its roof (within `slack` of its bound) is limited by
# what the roof says, and only fewer FLOPs or fewer bytes will speed it up. A point far below it but near its
# dotted launch-floor cap is limited by the fixed cost of issuing a pass's operations from Python: the
# roofline's two terms do not describe it, and halving its bytes would change nothing. A point below both is
# held by something neither models (small, inefficient kernels, the attention of a batch done one small product at
# a time, or another program on the machine), and is the one to profile.
#
# **Takeaway: place every measured pass on the machine's roofline before explaining it; the distance to the roof
# says whether FLOPs, bytes or something else sets its time.**
#
# ## The book's models, from their configurations
#
# The presets in `lib.roofline` are typed from the published shapes. The same shapes read from the
# transformers configurations the book actually runs must agree, or every count above would be wrong.

# %%
def fields(shape):
    return (shape.layers, shape.d_model, shape.heads, shape.kv_heads, shape.d_ff, shape.vocab, shape.gated_ffn,
            shape.tied_lm_head)


smol_config = load_model("smollm2-135m", "cpu").config
from_configs = [(rl.GPT2_SMALL, rl.ModelShape.from_config(gpt2_config("gpt2-small"), name="GPT-2 small", bytes_per_param=4)),
                (rl.SMOLLM2_135M, rl.ModelShape.from_config(smol_config, name="SmolLM2-135M", bytes_per_param="bf16"))]
rows = []
for preset, read in from_configs:
    assert fields(read) == fields(preset), f"{preset.name}: config {fields(read)} against preset {fields(preset)}"
    assert read.matmul_params == preset.matmul_params and read.kv_bytes_per_token == preset.kv_bytes_per_token
    rows.append(dict(model=preset.name, source="transformers config", **dict(zip(
        ["layers", "d_model", "heads", "kv_heads", "d_ff", "vocab", "gated_ffn", "tied_lm_head"], fields(read))),
        dtype=read.dtype_name, matmul_params_m=read.matmul_params / 1e6, weight_mb=read.weight_bytes / 1e6,
        kv_kib_per_token=read.kv_bytes_per_token / 1024, decode_intensity_ctx_512=rl.decode_cost(read, 1, 512).intensity))
shapes = pd.DataFrame(rows)
results.table(shapes, "model_shapes")
display(shapes.round(3))
g2, sm = from_configs[0][1], from_configs[1][1]
display(Markdown(
    f"Both configurations match their presets field for field. GPT-2 small has {g2.matmul_params / 1e6:.0f}M "
    f"matmul weights ({g2.weight_bytes / 2**20:.0f} MiB in fp32) and caches {g2.kv_bytes_per_token / 1024:.0f} KiB "
    f"per token in fp32; SmolLM2-135M has {sm.matmul_params / 1e6:.0f}M ({sm.weight_bytes / 2**20:.0f} MiB in bf16) "
    f"and, with {sm.kv_heads} KV heads for {sm.heads} query heads, caches {sm.kv_bytes_per_token / 1024:.1f} KiB "
    f"per token in bf16."))

# %% [markdown]
# ### The source chapter's 7B arithmetic
#
# The source chapter's GPU had no published FLOP rate, only its bandwidth, so only the memory floor applies:
# a 7-billion-parameter model in fp16 must read every weight each decode step.

# %%
facts = load_reference("ch09_facts").set_index("fact")["value"]
ref_gpu = rl.HARDWARE["Source chapter GPU"]
seven_b_bytes = 7e9 * 2
seven_b_floor = rl.memory_time(seven_b_bytes, ref_gpu)
gpt2_floor = rl.decode_floor(rl.GPT2_SMALL, ref_gpu, context=16)
ref_decode = load_reference("ch09_decode_gpu_cpu")
ref_step = ref_decode[ref_decode.context_tokens == 16].iloc[0]
assert ref_gpu.bandwidth == facts["gpu_memory_bandwidth"] * 1e9
assert round(seven_b_floor * 1e3) == facts["seven_b_fp16_decode_floor_at_303gbs"]
seven = pd.DataFrame([
    dict(case="7B parameters, fp16", bytes_gb=seven_b_bytes / 1e9, bandwidth_gb_s=ref_gpu.bandwidth / 1e9,
         floor_ms=seven_b_floor * 1e3, source_quotes_ms=facts["seven_b_fp16_decode_floor_at_303gbs"],
         measured_ms_lo=np.nan, measured_ms_hi=np.nan),
    dict(case="GPT-2 small, fp32, context 16", bytes_gb=rl.decode_cost(rl.GPT2_SMALL, 1, 16).bytes / 1e9,
         bandwidth_gb_s=ref_gpu.bandwidth / 1e9, floor_ms=gpt2_floor * 1e3, source_quotes_ms=np.nan,
         measured_ms_lo=ref_step.gpu_fp32_ms_lo, measured_ms_hi=ref_step.gpu_fp32_ms_hi)])
results.table(seven, "source_gpu_floors")
display(seven.round(2))
display(Markdown(
    f"{seven_b_bytes / 1e9:.0f} GB at {ref_gpu.bandwidth / 1e9:.0f} GB/s is **{seven_b_floor * 1e3:.1f} ms** a "
    f"token, the source's {facts['seven_b_fp16_decode_floor_at_303gbs']:.0f} ms. On the same GPU, GPT-2 small's "
    f"floor is only {gpt2_floor * 1e3:.1f} ms, yet its measured step took {ref_step.gpu_fp32_ms_lo:.1f} to "
    f"{ref_step.gpu_fp32_ms_hi:.1f} ms, {ref_step.gpu_fp32_ms_lo / (gpt2_floor * 1e3):.0f} times the floor: the small "
    f"model was launch-bound, the 7B model would be memory-bound."))

# %% [markdown]
# **Takeaway: read model shapes from the configuration you run, and check them against the published ones; the
# memory floor of a big model is simple division, and a small model rarely reaches it.**
#
# ## What these numbers do not show
#
# * **Real kernels.** The course's tables are lower bounds from datasheet peaks. Measured prefill kernels reach
#   a part of peak FLOP/s and batch-1 decode a part of peak bandwidth; activations, launch overheads and
#   communication are not in the counts.
# * **A GPU.** This page's roofline is this machine's, in this dtype. A consumer CPU's ridge is a few FLOP per
#   byte, a datacenter GPU's hundreds: the same pass can sit on opposite sides of them.
# * **Small models.** The measured points are GPT-2-sized (or smaller in quick mode); their passes are short
#   enough that fixed costs show. A 7B model's decode step would sit on its memory roof almost anywhere.
# * **Other sessions' data.** The measured times come from sections 2 and 3, run earlier, possibly under
#   different load; the ceilings were measured here, now. Compare regimes, not third digits.
# * **Capacity beyond weights and cache.** The memory check ignores activations, the runtime's reservation and
#   fragmentation; the real room for cache is smaller.
#
# ## Takeaways
#
# * The roofline bound of a pass is the larger of FLOPs over the FLOP rate and bytes over the bandwidth; the
#   ridge point, FLOP rate over bandwidth, says which one wins.
# * A weight matmul's intensity is about the number of tokens it carries: prefill crosses the ridge near a
#   prompt as long as the ridge, and decode at batch 1 stays near one FLOP per byte.
# * Long prompts cost more per token because attention grows with the prompt; prefill throughput falls with it.
# * Batching lifts decode toward the ridge only while the caches are small beside the weights; at long contexts
#   the caches' bytes hold it below, and memory capacity limits the batch first.
# * A model that does not fit has no single-GPU floor worth quoting.
# * On a real machine, place the measured pass on the roofline: far below the roof means neither FLOPs nor
#   bytes set its time.
#
# ## Check yourself
#
# 1. Why does a prefill handle all of the prompt's tokens in one pass, while decode must take one pass per token?
#
# <details><summary>Answer</summary>
#
# The whole prompt is known before the pass begins, and causal attention only needs earlier positions, which are
# in the same pass. A decode step's input is the token the previous step chose, so the steps cannot overlap.
# </details>
#
# 2. Why is the arithmetic intensity of a weight matmul close to the number of tokens it processes?
#
# <details><summary>Answer</summary>
#
# Every weight is fetched once per pass but used in one multiply-add, two FLOPs, per token row. With two bytes
# per weight, FLOPs per byte come to about the row count: the prompt length in prefill, the batch in decode.
# </details>

# %%
summary_prompt, summary_output = 30_000, 200
summary = rl.request_split(LLAMA8, H100, summary_prompt, summary_output)
summary_batch = int((GPU_MEMORY_BYTES[H100.name] - LLAMA8.weight_bytes)
                    // (LLAMA8.kv_bytes_per_token * (summary_prompt + summary_output)))
summary_batched = rl.request_split(LLAMA8, H100, summary_prompt, summary_output, batch=summary_batch)
assert summary_batched.prefill_share > 0.5 > summary.prefill_share
floor_8b = rl.decode_floor(LLAMA8, H100)
display(Markdown(
    f"3. What is the shortest possible gap between tokens for one stream of Llama-3-8B in BF16 on an {H100.name}, "
    f"and what sets it?\n\n"
    f"<details><summary>Answer</summary>\n\n"
    f"Reading the {LLAMA8.weight_bytes / 1e9:.1f} GB of matmul weights at {H100.bandwidth / 1e12:.2f} TB/s: "
    f"**{floor_8b * 1e3:.2f} ms**, about {1 / floor_8b:.0f} tokens per second. Memory bandwidth sets it; the "
    f"step's arithmetic would take {rl.roofline(H100, rl.decode_cost(LLAMA8, 1, 0)).t_compute * 1e3:.3f} ms.\n"
    f"</details>\n\n"
    f"4. A team summarises documents: {summary_prompt:,}-token prompts, {summary_output}-token answers. Which phase "
    f"should they work on first?\n\n"
    f"<details><summary>Answer</summary>\n\n"
    f"Prefill, once the service is loaded. For one request alone (Llama-3-8B, {H100.name}) the roofline gives "
    f"{summary.prefill_s * 1e3:.0f} ms of prefill against {summary.decode_s * 1e3:.0f} ms of decode, whose every "
    f"step reads the weights for a single token. A server batches decode: with {summary_batch} requests at once "
    f"(as many as the caches allow in {GPU_MEMORY_BYTES[H100.name] / 1e9:.0f} GB), the weights' bytes are shared, "
    f"while each prompt's arithmetic is not, and prefill becomes **{summary_batched.prefill_share:.0%}** of the GPU "
    f"time. Reusing a cached prefix, faster arithmetic and better attention kernels pay off before decode-side "
    f"tricks.\n"
    f"</details>"))

# %% [markdown]
# ## Try it
#
# * Set `course_gpu = "H200"`: the same FLOP rate with more bandwidth. Where do the ridge, the prefill crossover
#   and the decode floor go? (The reference check above is for the H100 only; comment it out.)
# * Add contexts such as 512, 1,024 and 4,096 to `batch_contexts`: find the context beyond which Llama-3-8B's
#   decode cannot reach the ridge at any batch.
# * Set `dtype = "bf16"` on a CPU without bf16 instructions: the ridge falls below one FLOP per byte, and the
#   same decode step turns compute-bound.
# * Replace `LLAMA3_8B` by a copy with `kv_heads=32` (multi-head attention, `dataclasses.replace`): how far does
#   the batching limit fall?
#
# ## Before optimising, find the regime
#
# Every section of this book comes down to one rule: **find out which regime a pass is in before optimising it.**
#
# * **Memory-bound** (on the sloped roof): fewer bytes per token help: smaller weights (quantisation), a
#   smaller cache (grouped-query attention), more tokens per byte (batching).
# * **Compute-bound** (on the flat roof): fewer FLOPs or faster arithmetic help: skipping work (last-position
#   logits, a cached prefix), lower-precision tensor cores, better kernels.
# * **Launch-bound** (far under both roofs): fewer, larger operations help: fused kernels, CUDA graphs,
#   `torch.compile`, a larger batch or chunk per pass. Halving bytes or FLOPs changes nothing.
