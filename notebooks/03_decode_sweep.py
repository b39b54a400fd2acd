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
# # 3. Decode: one token per pass, every weight every time
#
# A decode step feeds one new position through every layer. Its arithmetic is small, about `2 x weights`
# FLOPs, but it must read every weight and the whole KV cache to do it. The textbook says such a step is
# **memory-bound**: its time is bytes divided by bandwidth, so it should barely depend on the context until
# the cache is large, and it should halve when the bytes halve.
#
# This chapter tests that, on this machine: cached greedy decode of GPT-2 small from contexts of 16 to 960
# tokens, 40 steps with the token read back to the host at every step, in several runs; the bandwidth each
# step implies against the bandwidth this machine can actually deliver; the regime of every point decided
# from the numbers; and batched decode, where the weights are shared by the batch but every sequence's
# cache is not.

# %% tags=["parameters"]
quick = False
device = "auto"
model_name = "gpt2-small"
contexts = [16, 128, 512, 960]   # GPT-2 has 1,024 positions: context + steps must fit
steps = 40                       # greedy steps per run, each read back to the host
runs = 3
configs = None                   # [(dtype, threads)]; None: fp32 all threads, fp32 1 thread, bf16 all (CPU)
batches = [1, 4, 16, 64]
batch_context = 512
batch_steps = 8
slack = 2.5                      # a point more than slack x its largest lower bound is called "unexplained"

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
import transformers
from IPython.display import Markdown, display

from lib import phases, roofline, sweeps
from lib.device import UnsupportedDtype, describe_environment, resolve_device, resolve_dtype
from lib.models import LoadedModel, load_model
from lib.results import Results, load_reference

dev = resolve_device(device)
on_gpu = dev.type == "cuda"
all_threads = torch.get_num_threads()
if quick:
    model_name, contexts, steps, runs, batches, batch_context, batch_steps = (
        "tiny-gpt2", [16, 128], 8, 2, [1, 4], 64, 3)
configs = configs or ([("fp32", None), ("fp16", None)] if on_gpu else
                      [("fp32", all_threads), ("fp32", 1), ("bf16", all_threads)])
results = Results("03_decode_sweep", quick=quick, device=dev, model=model_name,
                  params=dict(contexts=contexts, steps=steps, runs=runs, configs=configs, batches=batches,
                              batch_context=batch_context, batch_steps=batch_steps, slack=slack))
pd.Series({**describe_environment(dev, None, model_name),
           "configurations": [f"{d}, {n or 'all'} threads" for d, n in configs]}).to_frame("this run")

# %% [markdown]
# ## This machine's ceilings and the step's lower bounds
#
# Three lower bounds limit a decode step, and the largest one should explain its time:
#
# * **memory**: bytes the step must read (weights plus the cache) over the bandwidth measured here with a
#   large matrix-vector product;
# * **compute**: its FLOPs over the matrix rate measured here;
# * **launch**: the fixed cost of issuing the step's operations, measured directly with a GPT-2 that has the
#   same 12 layers and the same operations but a width of 64, so its bytes and FLOPs are negligible.

# %%
machines, floors = {}, {}
fp32 = load_model(model_name, dev, torch.float32)
narrow_config = transformers.GPT2Config(**{**fp32.config.to_dict(), "n_embd": 64, "n_head": 4, "vocab_size": 1024})
narrow = transformers.GPT2LMHeadModel(narrow_config).eval().to(dev)
for dt, n in configs:
    try:
        torch_dt = resolve_dtype(dt, dev)
    except UnsupportedDtype as error:
        print(f"skipping {dt}: {error}")
        continue
    with sweeps.torch_threads(n):
        small = dict(matmul_n=512, matvec_bytes=64 * 2**20) if quick or (dt != "fp32" and not on_gpu) else {}
        machines[(dt, n)] = roofline.measure_machine(dev, torch_dt, **small)
        narrow_lm = LoadedModel(narrow.to(torch_dt), None, "narrow GPT-2", "random weights", dev, torch_dt)
        launch = sweeps.decode_sweep(narrow_lm, [contexts[0]], steps=steps, runs=1)
        floors[(dt, n)] = launch.median_s.iloc[0]
configs = list(machines)
ceilings = pd.DataFrame([{"dtype": d, "threads": n or all_threads, "bandwidth GB/s": hw.bandwidth / 1e9,
                          "matrix GFLOP/s": hw.flops / 1e9, "launch floor ms (12 narrow layers)": floors[(d, n)] * 1e3}
                         for (d, n), hw in machines.items()])
results.table(ceilings, "ceilings")
ceilings.round(2)

# %%
shape = roofline.ModelShape.from_config(fp32.config, name=model_name)
bounds = []
for (dt, n), hw in machines.items():
    s = shape.with_dtype(dt)
    for c in contexts:
        cost = roofline.decode_cost(s, batch=1, context=c + steps // 2)
        rf = roofline.roofline(hw, cost)
        parts = {"memory": rf.t_memory, "compute": rf.t_compute, "launch": floors[(dt, n)]}
        bounds.append(dict(dtype=dt, threads=n or all_threads, context_tokens=c, bytes_per_step=cost.bytes,
                           flops_per_step=cost.flops, memory_ms=rf.t_memory * 1e3, compute_ms=rf.t_compute * 1e3,
                           launch_ms=floors[(dt, n)] * 1e3, predicted_ms=max(parts.values()) * 1e3,
                           predicted_regime=max(parts, key=parts.get) + "-bound"))
bounds = pd.DataFrame(bounds)
display(bounds[["dtype", "threads", "context_tokens", "memory_ms", "compute_ms", "launch_ms", "predicted_regime"]].round(2))
first = bounds.iloc[0]
display(Markdown(
    f"Prediction ({first['dtype']}, {first['threads']} threads, context {first['context_tokens']}): a step must read "
    f"{first.bytes_per_step / 2**20:.0f} MiB, which takes **{first.memory_ms:.1f} ms** at the measured bandwidth; its "
    f"arithmetic takes {first.compute_ms:.1f} ms at the measured matrix rate; issuing its operations takes "
    f"{first.launch_ms:.1f} ms. The step should be **{first.predicted_regime}**, and change little with context."))

# %% [markdown]
# ## The sweep
#
# For each context, one prefill builds the cache; then `runs` runs of `steps` greedy steps each, the cache
# cropped back to the context before every run. Each step's time runs from one token's host readback to
# the next. For dtypes whose own prefill would be slow on this device, the cache is built in fp32 and cast:
# a decode step's cost depends on the cache's shape and dtype, not its values.

# %%
rows = []
for (dt, n) in configs:
    lm = load_model(model_name, dev, resolve_dtype(dt, dev))
    with sweeps.torch_threads(n):
        table = sweeps.decode_sweep(lm, contexts, steps=steps, runs=runs, prefill_model=fp32,
                                    label=f"{dt}, {n or all_threads} threads")
    rows.append(table.assign(dtype=dt, threads=n or all_threads))
runs_table = pd.concat(rows, ignore_index=True)
results.table(runs_table, "decode_runs")
decode = (runs_table.groupby(["dtype", "threads", "context_tokens"])
          .agg(step_ms=("median_s", "median"), runs_low_ms=("median_s", "min"), runs_high_ms=("median_s", "max"))
          .mul(1e3).reset_index().merge(bounds, on=["dtype", "threads", "context_tokens"]))
decode["implied_gb_s"] = decode.bytes_per_step / (decode.step_ms / 1e3) / 1e9
decode["machine_gb_s"] = [machines[(d, None if on_gpu else t)].bandwidth / 1e9 for d, t in zip(decode.dtype, decode.threads)]
decode["fraction_of_bandwidth"] = decode.implied_gb_s / decode.machine_gb_s
decode["measured_over_predicted"] = decode.step_ms / decode.predicted_ms
decode["regime"] = np.where(decode.measured_over_predicted > slack, "unexplained overhead", decode.predicted_regime)
results.table(decode, "decode_sweep")
decode[["dtype", "threads", "context_tokens", "step_ms", "runs_low_ms", "runs_high_ms", "implied_gb_s",
        "fraction_of_bandwidth", "predicted_ms", "measured_over_predicted", "regime"]].round(2)

# %%
fig, (ax_s, ax_b) = plt.subplots(1, 2, figsize=(12, 4.5))
for (dt, t), g in decode.groupby(["dtype", "threads"]):
    label = f"{dt}, {t} thread{'s' if t > 1 else ''}"
    line = ax_s.errorbar(g.context_tokens, g.step_ms, yerr=[g.step_ms - g.runs_low_ms, g.runs_high_ms - g.step_ms],
                         marker="o", capsize=3, label=label)
    ax_s.plot(g.context_tokens, g.memory_ms, ":", color=line[0].get_color(), label=f"{label}: memory bound")
    ax_b.plot(g.context_tokens, g.implied_gb_s, "o-", color=line[0].get_color(), label=f"{label}: implied")
    ax_b.axhline(g.machine_gb_s.iloc[0], ls="--", lw=1, color=line[0].get_color())
ax_s.set_xscale("log", base=2)
ax_s.set_yscale("log")
ax_s.set_xlabel("context tokens at the start of the run")
ax_s.set_ylabel("decode step (ms)")
ref_fp32 = decode[(decode.dtype == "fp32") & (decode.threads == max(decode.threads))]
ax_s.set_title(f"A step costs {ref_fp32.step_ms.min():.0f}-{ref_fp32.step_ms.max():.0f} ms (fp32), "
               f"{ref_fp32.measured_over_predicted.median():.1f}x its largest lower bound")
ax_b.set_xscale("log", base=2)
ax_b.set_xlabel("context tokens")
ax_b.set_ylabel("bytes read per step / step time (GB/s)")
ax_b.set_title("Implied bandwidth against the measured one (dashed)")
ax_s.legend(fontsize=7)
ax_b.legend(fontsize=7)
fig.tight_layout()
results.figure(fig, "decode_step")
plt.show()

# %%
main = decode[(decode.dtype == "fp32") & (decode.threads == max(decode.threads))]
growth = main.step_ms.iloc[-1] / main.step_ms.iloc[0]
predicted_growth = main.memory_ms.iloc[-1] / main.memory_ms.iloc[0]
text = (f"In fp32 with {main.threads.iloc[0]} threads a step took **{main.step_ms.iloc[0]:.1f} ms** at context "
        f"{main.context_tokens.iloc[0]} and **{main.step_ms.iloc[-1]:.1f} ms** at {main.context_tokens.iloc[-1]} "
        f"({growth:.2f}x; the bytes grow {predicted_growth:.2f}x). The implied bandwidth is "
        f"**{main.implied_gb_s.min():.1f} to {main.implied_gb_s.max():.1f} GB/s**, "
        f"{main.fraction_of_bandwidth.min():.0%} to {main.fraction_of_bandwidth.max():.0%} of the "
        f"{main.machine_gb_s.iloc[0]:.1f} GB/s this machine delivers to a matrix-vector product: each step takes "
        f"{1 / main.fraction_of_bandwidth.max():.1f} to {1 / main.fraction_of_bandwidth.min():.1f} times the memory floor. ")
for (dt, t), g in decode.groupby(["dtype", "threads"]):
    text += f"\n* {dt}, {t} thread{'s' if t > 1 else ''}: " + ", ".join(
        f"context {c}: {r}" for c, r in zip(g.context_tokens, g.regime))
display(Markdown(text))
assert (decode.step_ms > 0).all()

# %% [markdown]
# Read the regimes, not the textbook. A point is called by the largest of its three lower bounds, and
# "unexplained overhead" if it took more than `slack` times that bound. On a CPU with a fast memory system
# and real fp32 arithmetic, the weights' bytes dominate and the step is memory-bound, though an eager
# PyTorch loop reaches only a part of the bandwidth a plain matrix-vector product gets. The source chapter's
# GPU step was different (its numbers are beside ours below): the same time whatever the context or dtype, and
# a small fraction of its bandwidth, because launching the operations from Python cost more than reading the
# weights. And a dtype without
# hardware arithmetic (bf16 on a CPU without bf16 instructions) turns a memory-bound step compute-bound:
# fewer bytes, slower arithmetic.
#
# **Takeaway: a decode step is bound by whichever is largest of bytes over bandwidth, FLOPs over FLOP rate,
# and the cost of launching its operations; measure all three before choosing what to optimise.**
#
# ## Beside the reference runs

# %%
ref = load_reference("ch09_decode_gpu_cpu")
facts = load_reference("ch09_facts").set_index("fact")["value"]
one = decode[(decode.dtype == "fp32") & (decode.threads == 1)][["context_tokens", "step_ms", "runs_low_ms", "runs_high_ms"]]
beside = ref.merge(one.rename(columns={"step_ms": "this_fp32_1thread_ms", "runs_low_ms": "this_low_ms",
                                       "runs_high_ms": "this_high_ms"}), on="context_tokens", how="outer")
results.table(beside, "beside_reference")
display(beside.round(1))
display(Markdown(
    f"The source chapter's CPU took {ref.cpu_1thread_ms_lo.min():.0f} to {ref.cpu_1thread_ms_hi.max():.0f} ms a "
    f"step with one thread; its GPU implied {facts['decode_implied_bandwidth_fp32_lo']:.0f} to "
    f"{facts['decode_implied_bandwidth_fp32_hi']:.0f} GB/s of its {facts['gpu_memory_bandwidth']:.0f} GB/s."))

# %% [markdown]
# ## Batched decode: shared weights, private caches
#
# Decode `B` sequences at once and the step still reads every weight once, now shared by `B` tokens, but it
# reads `B` caches. At context 512 one sequence's cache is a small fraction of the weights (the table gives
# the bytes), so tokens per second should grow almost linearly with `B` until the caches' bytes catch up with
# the weights'.
# A batch that does not fit in memory is recorded as such.

# %%
with sweeps.torch_threads(configs[0][1]):
    batched = sweeps.batched_decode_sweep(fp32, batch_context, batches, steps=batch_steps, prefill_model=fp32)
hw = machines[configs[0]]
batched["step_ms"] = batched.median_s * 1e3
batched["tokens_per_s"] = batched.batch / batched.median_s
batched["per_user_gap_ms"] = batched.step_ms
batched["weight_mb"] = shape.weight_bytes / 1e6
batched["kv_read_mb"] = [shape.kv_bytes_per_token * (batch_context + batch_steps // 2) * b / 1e6 for b in batched.batch]
batched["kv_share_of_bytes"] = batched.kv_read_mb / (batched.kv_read_mb + batched.weight_mb)
batched["memory_bound_ms"] = [roofline.roofline(hw, roofline.decode_cost(shape, b, batch_context + batch_steps // 2)).t_memory * 1e3
                              for b in batched.batch]
batched["compute_bound_ms"] = [roofline.roofline(hw, roofline.decode_cost(shape, b, batch_context + batch_steps // 2)).t_compute * 1e3
                               for b in batched.batch]
batched["implied_gb_s"] = (batched.kv_read_mb + batched.weight_mb) / batched.median_s / 1e3
results.table(batched, "batched_decode")
display(batched[["batch", "status", "step_ms", "tokens_per_s", "per_user_gap_ms", "weight_mb", "kv_read_mb",
                 "kv_share_of_bytes", "memory_bound_ms", "compute_bound_ms"]].round(2))

wf = load_reference("wordfactory_part3_cpu")
wf = wf[wf.table == "batched_decode_ctx512"].assign(batch=lambda d: d.x.astype(int))
ok = batched[batched.status == "ok"]
fig, ax = plt.subplots(figsize=(8, 4.5))
ax.plot(ok.batch, ok.tokens_per_s, "o-", label=f"this machine, {model_name} fp32")
ax.plot(wf.batch, wf.tokens_per_s, "d--", label="reference: Word Factory, 2-core NumPy")
ax.plot(ok.batch, ok.batch / ok.median_s.iloc[0], ":", color="grey", label="if a step cost the same at every batch")
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.set_xlabel("sequences decoded together (batch)")
ax.set_ylabel("tokens per second, all sequences")
ax.set_title(f"Batching {ok.batch.max()} users gives {ok.tokens_per_s.max() / ok.tokens_per_s.iloc[0]:.1f}x the tokens; "
             f"each waits {ok.step_ms.max() / ok.step_ms.iloc[0]:.1f}x longer")
ax.legend(fontsize=8)
ax.grid(True, alpha=0.3)
results.figure(fig, "batched_decode")
plt.show()
big = ok.iloc[-1]
display(Markdown(
    f"At batch {big.batch} the step takes **{big.step_ms:.0f} ms** (batch 1: {ok.step_ms.iloc[0]:.0f} ms) and yields "
    f"**{big.tokens_per_s:.0f} tokens per second** (batch 1: {ok.tokens_per_s.iloc[0]:.0f}). The caches are "
    f"{big.kv_share_of_bytes:.0%} of the bytes it reads, {big.kv_read_mb:.0f} MB against {big.weight_mb:.0f} MB of "
    f"weights: the weights are shared, the caches are not, and they are what stops batching from being free."))

# %% [markdown]
# ### Why the largest batches fall further behind their bound
#
# The roofline counts the cache's bytes once per step. transformers' `DynamicCache`, which this loop uses,
# grows by concatenation: every step builds a new keys tensor and a new values tensor for every layer, one
# position longer, and copies the whole cache into them. That is twice the cache's bytes again (read and
# write), plus a fresh allocation, at every step. Predict the copy from the bandwidth, then time it alone,
# with tensors of the same shapes as the batched cache.

# %%
from lib.timing import measure

heads, head_dim, layers = fp32.config.n_head, fp32.config.n_embd // fp32.config.n_head, fp32.config.n_layer
copy_rows = []
for b in ok.batch:
    keys = torch.randn(b, heads, batch_context + batch_steps // 2, head_dim, device=dev)
    new = torch.randn(b, heads, 1, head_dim, device=dev)
    with sweeps.torch_threads(configs[0][1]):
        t = measure(lambda: torch.cat([keys, new], dim=-2), dev, warmup=1, repeats=3)
    cache_bytes = 2 * layers * keys.numel() * keys.element_size()
    copy_rows.append(dict(batch=int(b), predicted_copy_ms=2 * cache_bytes / hw.bandwidth * 1e3,
                          measured_copy_ms=t.median * 2 * layers * 1e3))
    del keys, new
copies = pd.DataFrame(copy_rows).merge(ok[["batch", "step_ms", "memory_bound_ms"]], on="batch")
copies["step_over_memory_bound"] = copies.step_ms / copies.memory_bound_ms
copies["copy_share_of_step"] = copies.measured_copy_ms / copies.step_ms
results.table(copies, "cache_copy")
display(copies.round(2))
worst = copies.iloc[-1]
display(Markdown(
    f"At batch {int(worst.batch)} the step took **{worst.step_over_memory_bound:.1f} times** its memory bound. Copying the "
    f"growing cache alone takes **{worst.measured_copy_ms:.0f} ms** of the {worst.step_ms:.0f} ms step "
    f"({worst.copy_share_of_step:.0%}; predicted from the bandwidth: {worst.predicted_copy_ms:.0f} ms), against "
    f"{copies.measured_copy_ms.iloc[0]:.1f} ms at batch {copies.batch.iloc[0]}. A preallocated cache (transformers' "
    f"`StaticCache`) writes the new position in place instead. What remains beyond the copy is not explained by "
    f"bytes; attention over many small per-sequence matrices is the likely rest, which this chapter does not isolate."))

# %% [markdown]
# **Takeaway: batching shares the weights' bytes across users, so throughput rises; every user's cache is
# still read at every step, so each user's gap rises too.**
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
    s = roofline.ModelShape.from_config(lm.config, name=lm.name)
    _, cache = phases.prefill(lm, torch.randint(0, lm.vocab_size, (1, 32), device=dev))
    rows.append(dict(model=lm.name, layers=s.layers, query_heads=s.heads, kv_heads=s.kv_heads, head_dim=s.head_dim,
                     predicted_fp32_bytes_per_token=s.kv_bytes_per_token,
                     measured_fp32_bytes_per_token=phases.cache_bytes(cache) / 32,
                     bf16_kib_per_token=s.with_dtype("bf16").kv_bytes_per_token / 1024,
                     kv_mb_per_1000_tokens_bf16=s.with_dtype("bf16").kv_bytes_per_token * 1000 / 1e6,
                     tokens_until_cache_equals_weights=s.weight_bytes / s.kv_bytes_per_token))
kv = pd.DataFrame(rows)
assert (kv.predicted_fp32_bytes_per_token == kv.measured_fp32_bytes_per_token).all()
results.table(kv, "kv_bytes_per_token")
display(kv.round(6))
g, sm = kv.iloc[0], kv.iloc[1]
display(Markdown(
    f"GPT-2 small stores **{g.bf16_kib_per_token:.0f} KiB** per token in bf16; SmolLM2 stores "
    f"**{sm.bf16_kib_per_token:.1f} KiB**, though it has {sm.layers / g.layers:.1f} times as many layers: with "
    f"{int(sm.kv_heads)} KV heads instead of {int(sm.query_heads)} its cache is a third of what multi-head attention "
    f"would need. In batched decode the caches outweigh the weights once the batch holds "
    f"{g.tokens_until_cache_equals_weights:,.0f} cached tokens in all for GPT-2 and "
    f"{sm.tokens_until_cache_equals_weights:,.0f} for SmolLM2 (at batch 64, about "
    f"{g.tokens_until_cache_equals_weights / 64:.0f} and {sm.tokens_until_cache_equals_weights / 64:.0f} tokens of context "
    f"each)."))

# %% [markdown]
# ## What these numbers do not show
#
# * **An eager PyTorch loop.** Every step runs Python, transformers' cache bookkeeping and hundreds of small
#   operations; a static cache, `torch.compile` or CUDA graphs would lower the launch cost and move a step
#   toward its memory floor. That is the story of the launch floor, not measured here.
# * **One small model.** A 7B model's weights make its step memory-bound on almost any hardware (section 6).
# * **A copied cache in batched decode.** Every sequence's cache has the same contents; the bytes and shapes
#   are real, the text is not.
# * **A shared machine.** Ranges are across runs of this notebook in one process; other programs' load shows in
#   them.
#
# ## Takeaways
#
# * A decode step reads every weight and the whole cache to make one token.
# * Whether that makes it memory-bound depends on the machine: compare the bandwidth a step implies with what
#   the machine delivers, and its time with the launch floor.
# * Batching shares weight bytes between users and raises throughput, while each user's cache still has to be
#   read: per-user latency rises.
# * Grouped-query attention shrinks the cache by the ratio of query heads to KV heads.
#
# ## Check yourself
#
# 1. A decode step reads 500 MB and takes 50 ms on a machine that streams 20 GB/s. Which regime is it in?
#
# <details><summary>Answer</summary>
#
# Its memory floor is 500 MB / 20 GB/s = 25 ms, so it runs at twice the floor: near memory-bound, with about as
# much again in overhead. Check the launch floor before deciding that halving the bytes would halve the step.
# </details>
#
# 2. Why does fp16 not speed up the source chapter's GPU decode step?
#
# <details><summary>Answer</summary>
#
# The step took 11 ms against a memory floor under 2 ms: it was launch-bound. Halving the bytes shortens a part
# of the step that was not the bottleneck.
# </details>
#
# 3. At batch 64 and context 512, how many bytes of GPT-2 small's fp32 cache does one step read?
#
# <details><summary>Answer</summary>
#
# 64 x 512 tokens x 72 KiB per token (2 x 12 layers x 768 x 4 bytes) = 2.25 GiB, about five times the weights.
# </details>
#
# ## Try it
#
# * Add `("fp32", 1)` against `("fp32", 2)` on a bigger machine: does a second thread help a memory-bound step?
# * Raise `batches` to 128 and 256 until a row reports out of memory (or the step becomes compute-bound).
# * Replace `gpt2-small` with `smollm2-135m`: 30 thinner layers, more operations per step. Does the launch floor
#   grow?
# * Decode with transformers' `StaticCache` (preallocated, written in place) instead of `DynamicCache`: how much
#   of the batch-64 step was the copy?
