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
# # 5. Interference: one request's prefill stalls another's stream
#
# A server that runs one request at a time has no interference. As soon as it interleaves two, the phases
# collide: a stream that was receiving a token every few tens of milliseconds must wait while the machine
# runs someone else's long prefill. **Chunked prefill** splits that prefill into pieces and runs one piece
# between consecutive decode steps of the stream, bounding the stall at the price of the newcomer's time to
# first token.
#
# The experiment, the smallest shared server there is (`lib.schedule.interference`): stream A is decoding;
# after A's tenth token, request B arrives with a 1,000-token prompt; every iteration then runs one A decode
# step followed by one B prefill chunk, until B's first token is chosen. Every token's host time is recorded
# for both.

# %% tags=["parameters"]
quick = False
device = "auto"
dtype = "fp32"
model_name = "gpt2-small"
chunk_sizes = [1000, 512, 256, 128, 64, 32]   # 1,000 is unchunked
runs = 3
b_prompt_len = 1000
a_prompt_len = 16
a_tokens = 40
arrival_step = 10
stream_counts = [1, 4]          # the extension: several A streams decoding as one batch
stream_chunks = [1000, 128]
stops_helping = 0.15            # halving the chunk "helps" if it cuts A's worst gap by more than this

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from IPython.display import Markdown, display
from tqdm.auto import tqdm

from lib import phases, schedule, sweeps
from lib.device import describe_environment, dtype_name, resolve_device, resolve_dtype
from lib.models import load_model, random_prompt
from lib.results import Results, load_reference, load_table

dev = resolve_device(device)
torch_dtype = resolve_dtype(dtype, dev)
if quick:
    model_name, runs, b_prompt_len, a_tokens, arrival_step = "tiny-gpt2", 2, 256, 16, 4
    chunk_sizes, stream_counts, stream_chunks = [256, 64, 16], [1, 2], [256, 64]
chunk_sizes = sorted({min(c, b_prompt_len) for c in chunk_sizes}, reverse=True)
lm = load_model(model_name, dev, torch_dtype)
results = Results("05_interference", quick=quick, device=dev, dtype=torch_dtype, model=model_name,
                  params=dict(chunk_sizes=chunk_sizes, runs=runs, b_prompt_len=b_prompt_len, a_prompt_len=a_prompt_len,
                              a_tokens=a_tokens, arrival_step=arrival_step, stream_counts=stream_counts))
pd.Series(describe_environment(dev, torch_dtype, model_name)).to_frame("this run")

# %% [markdown]
# ## The prediction, from section 2's floor
#
# Section 2 fitted a prefill's time as `fixed + per_token x T`. With one chunk of `c` tokens between two A
# steps, A's worst gap should be about one A step plus one chunk, and B's TTFT about `n` iterations of one
# A step plus one chunk, for `n = ceil(1000 / c)` chunks:
#
# * A's worst gap = `step + fixed + per_token x c`
# * B's TTFT = `n x (step + fixed) + per_token x 1000`
#
# Halving the chunk cuts the worst gap only while the chunk's per-token work is a real part of it; below the
# **knee** `fixed / per_token` each chunk costs mostly the floor, so smaller chunks only multiply the fixed
# cost in B's TTFT. The best chunk size is where a chunk's cost leaves the floor.

# %%
floor_table = load_table("02_prefill_sweep", "floor", quick=quick)
source = "section 2's quick run" if quick else "section 2's data (data/02_prefill_sweep/floor.csv)"
if floor_table is not None:
    floor_table = floor_table[floor_table.dtype == dtype_name(torch_dtype)]
if floor_table is None or floor_table.empty:
    source = "a small sweep run here (section 2 has not been run for this dtype)"
    small = sweeps.prefill_sweep(lm, [1, 8, 32, 128, 256], repeats=2)
    fit = sweeps.fit_floor(small.prompt_tokens, small.median_s)
    fixed_s, per_token_s = fit.fixed_s, fit.per_token_s
else:
    row = floor_table.sort_values("threads").iloc[-1]
    fixed_s, per_token_s = row.fixed_ms / 1e3, row.per_token_ms / 1e3
knee = fixed_s / per_token_s

# A's own step, measured now at A's context (section 3 measured the same shape)
ctx = a_prompt_len + arrival_step
steps = sweeps.decode_sweep(lm, [ctx], steps=10, runs=1)
a_step_s = steps.median_s.iloc[0]
predicted = pd.DataFrame([{
    "chunk_tokens": c, "chunks": -(-b_prompt_len // c),
    "predicted_a_worst_gap_ms": (a_step_s + fixed_s + per_token_s * c) * 1e3,
    "predicted_b_ttft_ms": (-(-b_prompt_len // c) * (a_step_s + fixed_s) + per_token_s * b_prompt_len) * 1e3}
    for c in chunk_sizes])
display(predicted.round(1))
display(Markdown(
    f"From {source}: a prefill's floor is **{fixed_s * 1e3:.1f} ms** plus **{per_token_s * 1e3:.2f} ms** per token, a "
    f"knee at **{knee:.0f} tokens**; A's decode step is {a_step_s * 1e3:.1f} ms. Prediction: chunks down to about "
    f"{knee:.0f} tokens keep cutting A's worst gap; below that, they mostly add to B's TTFT."))

# %% [markdown]
# ## The experiment
#
# Every chunk size runs `runs` times, interleaved (every size once, then again), after a warm-up run.
# Reported as ranges across runs, like the reference.

# %%
schedule.interference(lm, chunk=chunk_sizes[-1], b_prompt_len=min(b_prompt_len, 64), a_tokens=6, arrival_step=2)  # warm-up
runs_out = {c: [] for c in chunk_sizes}
for run in tqdm(range(runs), desc="runs"):
    for c in chunk_sizes:
        runs_out[c].append(schedule.interference(lm, chunk=c, b_prompt_len=b_prompt_len, a_prompt_len=a_prompt_len,
                                                 a_tokens=a_tokens, arrival_step=arrival_step, seed=run))
rows = []
for c, outs in runs_out.items():
    for i, r in enumerate(outs):
        a, b = r.a_metrics, r.b_metrics
        rows.append(dict(chunk_tokens=c, run=i + 1, chunks=len(r.chunks), a_worst_gap_ms=a.worst_gap * 1e3,
                         a_median_gap_ms=a.median_gap * 1e3, a_tpot_ms=a.tpot * 1e3, b_ttft_ms=b.ttft * 1e3,
                         b_prefill_compute_ms=sum(s.t_end - s.t_start for s in r.chunks) * 1e3))
runs_table = pd.DataFrame(rows)
results.table(runs_table, "interference_runs")
summary = (runs_table.groupby("chunk_tokens", sort=False)
           .agg(a_worst_gap_ms_lo=("a_worst_gap_ms", "min"), a_worst_gap_ms_hi=("a_worst_gap_ms", "max"),
                a_median_gap_ms_lo=("a_median_gap_ms", "min"), a_median_gap_ms_hi=("a_median_gap_ms", "max"),
                b_ttft_ms_lo=("b_ttft_ms", "min"), b_ttft_ms_hi=("b_ttft_ms", "max"),
                a_worst_gap_ms=("a_worst_gap_ms", "median"), b_ttft_ms=("b_ttft_ms", "median"),
                a_tpot_ms=("a_tpot_ms", "median"))
           .reset_index().merge(predicted, on="chunk_tokens"))
summary["worst_gap_measured_over_predicted"] = summary.a_worst_gap_ms / summary.predicted_a_worst_gap_ms
summary["b_ttft_measured_over_predicted"] = summary.b_ttft_ms / summary.predicted_b_ttft_ms
results.table(summary, "interference")
display(summary[["chunk_tokens", "a_worst_gap_ms_lo", "a_worst_gap_ms_hi", "a_median_gap_ms_lo", "a_median_gap_ms_hi",
                 "b_ttft_ms_lo", "b_ttft_ms_hi", "worst_gap_measured_over_predicted",
                 "b_ttft_measured_over_predicted"]].round(1))

# %%
unchunked = summary.iloc[0]
ratio_stall = unchunked.a_worst_gap_ms / unchunked.a_tpot_ms
display(Markdown(
    f"Unchunked, A's stream froze for **{unchunked.a_worst_gap_ms_lo:.0f} to {unchunked.a_worst_gap_ms_hi:.0f} ms**, "
    f"{unchunked.a_worst_gap_ms / unchunked.a_median_gap_ms_hi:.0f} times its median gap of "
    f"{unchunked.a_median_gap_ms_lo:.0f} to {unchunked.a_median_gap_ms_hi:.0f} ms, while its TPOT over the "
    f"{a_tokens} tokens reads {unchunked.a_tpot_ms:.0f} ms: the mean hides the stall that the worst gap shows."))
crowded = summary[summary.a_median_gap_ms_lo > 2 * unchunked.a_median_gap_ms_hi]
if not crowded.empty:
    c = crowded.iloc[0]
    display(Markdown(
        f"From **{int(c.chunk_tokens)}-token chunks** on, B's prefill is spread over most of A's {a_tokens} tokens, so "
        f"even A's *median* gap includes a chunk: {c.a_median_gap_ms_lo:.0f} to {c.a_median_gap_ms_hi:.0f} ms. The stall "
        f"is no longer one event but the stream's normal pace."))
assert (summary.a_worst_gap_ms > summary.a_median_gap_ms_lo).all()

# %%
example = runs_out[chunk_sizes[0]][0], runs_out[min(chunk_sizes, key=lambda c: abs(c - 128))][0]
fig, axes = plt.subplots(len(example), 1, figsize=(10, 3 * len(example)), sharex=False)
for ax, r in zip(np.atleast_1d(axes), example):
    t0 = r.a_request_time
    times = (np.array(r.a_token_times) - t0) * 1e3
    gaps = np.diff(times)
    ax.bar(times[1:], gaps, width=-gaps, align="edge", color="tab:blue", alpha=0.35, edgecolor="tab:blue",
           label="A's gap before each token (bar spans the wait)")
    ax.plot(times[1:], gaps, "o", ms=3, color="tab:blue")
    for i, s in enumerate(r.chunks):
        ax.axvspan((s.t_start - t0) * 1e3, (s.t_end - t0) * 1e3, color="tab:orange", alpha=0.3,
                   label="B's prefill chunks" if i == 0 else None)
    ax.axvline((r.b_request_time - t0) * 1e3, color="tab:red", ls="--", lw=1, label="B arrives")
    ax.axvline((r.b_first_token_time - t0) * 1e3, color="tab:green", ls="--", lw=1, label="B's first token")
    ax.set_yscale("log")
    ax.set_ylabel("gap (ms)")
    ax.set_title(f"chunk {r.chunk} tokens: A's worst gap {r.a_metrics.worst_gap * 1e3:.0f} ms, "
                 f"B's TTFT {r.b_metrics.ttft * 1e3:.0f} ms")
    ax.legend(fontsize=7, loc="upper right")
np.atleast_1d(axes)[-1].set_xlabel("time since A's request (ms)")
fig.tight_layout()
results.figure(fig, "a_gaps_over_time")
plt.show()

# %% [markdown]
# **Takeaway: an unchunked prefill freezes every other stream for its whole duration; the mean gap barely
# notices, the worst gap does.**
#
# ## The trade-off, and where chunking stops helping

# %%
fig, ax = plt.subplots(figsize=(7.5, 4.8))
ax.errorbar(summary.b_ttft_ms, summary.a_worst_gap_ms,
            xerr=[summary.b_ttft_ms - summary.b_ttft_ms_lo, summary.b_ttft_ms_hi - summary.b_ttft_ms],
            yerr=[summary.a_worst_gap_ms - summary.a_worst_gap_ms_lo, summary.a_worst_gap_ms_hi - summary.a_worst_gap_ms],
            fmt="o-", capsize=3, label="measured (median, range over runs)")
ax.plot(summary.predicted_b_ttft_ms, summary.predicted_a_worst_gap_ms, "s:", color="grey",
        label="predicted from section 2's floor")
for r in summary.itertuples():
    ax.annotate(f"{r.chunk_tokens}", (r.b_ttft_ms, r.a_worst_gap_ms), textcoords="offset points", xytext=(5, 5), fontsize=8)
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel("B's time to first token (ms)")
ax.set_ylabel("A's worst gap (ms)")
ax.set_title("Smaller chunks protect A's stream and delay B")
ax.legend(fontsize=8)
ax.grid(True, alpha=0.3)
results.figure(fig, "tradeoff")
plt.show()

halving = summary.sort_values("chunk_tokens", ascending=False).reset_index(drop=True)
halving["worst_gap_cut_by_this_size"] = 1 - halving.a_worst_gap_ms / halving.a_worst_gap_ms.shift(1)
halving["b_ttft_growth"] = halving.b_ttft_ms / halving.b_ttft_ms.shift(1) - 1
stopped = halving[(halving.worst_gap_cut_by_this_size < stops_helping)]
stop_at = int(stopped.chunk_tokens.iloc[0]) if not stopped.empty else None
results.table(halving[["chunk_tokens", "a_worst_gap_ms", "b_ttft_ms", "worst_gap_cut_by_this_size", "b_ttft_growth"]],
              "halving")
display(halving[["chunk_tokens", "a_worst_gap_ms", "b_ttft_ms", "worst_gap_cut_by_this_size", "b_ttft_growth"]].round(3))
best = halving[halving.chunk_tokens >= (stop_at or 0)].chunk_tokens.min() if stop_at else halving.chunk_tokens.min()
prev_of_stop = halving.chunk_tokens[halving.chunk_tokens > stop_at].min() if stop_at else None
display(Markdown(
    (f"Chunking stopped helping at **{stop_at} tokens**: going from {prev_of_stop} to {stop_at} cut A's worst gap by "
     f"less than {stops_helping:.0%} while B's TTFT grew. " if stop_at else
     f"Down to {halving.chunk_tokens.min()} tokens, every halving still cut A's worst gap by more than "
     f"{stops_helping:.0%}: on this machine the chunks never reached the floor. ")
    + f"The prediction from section 2 put the knee at **{knee:.0f} tokens**; the smallest chunk that still paid "
      f"off here was **{best if stop_at is None else prev_of_stop} tokens**. The source chapter's GPU stopped "
      f"improving below 256 tokens, where its ~12 ms floor swallowed the chunks."))

# %% [markdown]
# **Takeaway: chunk down to where a chunk's cost reaches the fixed floor, no further; that point is a
# property of the hardware and the model, and section 2's fit predicts it.**
#
# ## Chunking changes the schedule, not the answer
#
# B's last-position logits after a chunked prefill, against one full pass (the chunked and unchunked runs
# prefill the same prompt, so the logits should agree to rounding).

# %%
diffs = []
for c in chunk_sizes[1:]:
    for i in range(runs):
        d = (runs_out[c][i].b_last_logits - runs_out[chunk_sizes[0]][i].b_last_logits).abs().max().item()
        diffs.append(dict(chunk_tokens=c, run=i + 1, max_abs_logit_diff=d))
diffs = pd.DataFrame(diffs)
results.table(diffs, "chunked_logits_difference")
scale = runs_out[chunk_sizes[0]][0].b_last_logits.abs().max().item()
facts = load_reference("ch09_facts").set_index("fact")["value"]
display(Markdown(
    f"The largest difference in any run was **{diffs.max_abs_logit_diff.max():.1e}** (smallest "
    f"{diffs.max_abs_logit_diff.min():.1e}) on logits as large as {scale:.1f}: a rounding difference from a "
    f"different summation order in {dtype_name(torch_dtype)}, not a different function. The reference measured "
    f"{facts['chunked_vs_unchunked_logit_diff_lo']:.1e} to {facts['chunked_vs_unchunked_logit_diff_hi']:.1e}."))
assert diffs.max_abs_logit_diff.max() < 1e-2 * max(scale, 1.0)

# %% [markdown]
# ## Beside the reference runs

# %%
ref = load_reference("ch09_interference_gpu")
fmt = lambda lo, hi: f"{lo:.0f}-{hi:.0f}"
ours = pd.DataFrame({"b_chunk_tokens": summary.chunk_tokens,
                     "this_a_worst_gap_ms": [fmt(a, b) for a, b in zip(summary.a_worst_gap_ms_lo, summary.a_worst_gap_ms_hi)],
                     "this_a_median_gap_ms": [fmt(a, b) for a, b in zip(summary.a_median_gap_ms_lo, summary.a_median_gap_ms_hi)],
                     "this_b_ttft_ms": [fmt(a, b) for a, b in zip(summary.b_ttft_ms_lo, summary.b_ttft_ms_hi)]})
refs = pd.DataFrame({"b_chunk_tokens": ref.b_chunk_tokens,
                     "ref_gpu_a_worst_gap_ms": [fmt(a, b) for a, b in zip(ref.a_worst_gap_ms_lo, ref.a_worst_gap_ms_hi)],
                     "ref_gpu_b_ttft_ms": [fmt(a, b) for a, b in zip(ref.b_ttft_ms_lo, ref.b_ttft_ms_hi)]})
beside = refs.merge(ours, on="b_chunk_tokens", how="outer").sort_values("b_chunk_tokens", ascending=False)
results.table(beside, "beside_reference")
wf = load_reference("wordfactory_part3_cpu")
wf = wf[wf.table == "interference_8_typers_1024_newcomer"].set_index("x")["time_ms"]
display(beside)
display(Markdown(
    f"The Word Factory blog ran the same idea with eight typers on a 2-core CPU and a 1,024-token newcomer: "
    f"a normal gap of {wf['normal']:.0f} ms, a worst gap of {wf['unchunked_worst']:.0f} ms unchunked and "
    f"{wf['chunk128_worst']:.0f} ms with 128-token chunks."))

# %% [markdown]
# ## Extension: several streams decoding at once
#
# With `k` A streams decoding as one batch, every A step reads `k` caches but the same weights; B's chunks still
# interleave with A's steps. Do more streams change the stall each of them sees?

# %%
ext = []
for k in stream_counts:
    for c in [min(c, b_prompt_len) for c in stream_chunks]:
        for i in range(max(1, runs - 1)):
            r = schedule.interference(lm, chunk=c, b_prompt_len=b_prompt_len, a_prompt_len=a_prompt_len,
                                      a_tokens=a_tokens, arrival_step=arrival_step, a_streams=k, seed=i)
            ext.append(dict(a_streams=k, chunk_tokens=c, run=i + 1, a_worst_gap_ms=r.a_metrics.worst_gap * 1e3,
                            a_median_gap_ms=r.a_metrics.median_gap * 1e3, b_ttft_ms=r.b_metrics.ttft * 1e3))
ext = pd.DataFrame(ext)
results.table(ext, "several_streams")
ext_summary = ext.groupby(["a_streams", "chunk_tokens"]).agg(
    a_worst_gap_ms_lo=("a_worst_gap_ms", "min"), a_worst_gap_ms_hi=("a_worst_gap_ms", "max"),
    a_median_gap_ms=("a_median_gap_ms", "median"), b_ttft_ms=("b_ttft_ms", "median")).reset_index()
display(ext_summary.round(1))
one, many = ext_summary[ext_summary.a_streams == min(stream_counts)], ext_summary[ext_summary.a_streams == max(stream_counts)]
display(Markdown(
    f"With {max(stream_counts)} streams, each stream's median gap is {many.a_median_gap_ms.median():.0f} ms against "
    f"{one.a_median_gap_ms.median():.0f} ms for one, and an unchunked prefill stalls **all {max(stream_counts)}** of "
    f"them at once, for {many.a_worst_gap_ms_lo.iloc[0]:.0f} to {many.a_worst_gap_ms_hi.iloc[0]:.0f} ms: the cost of "
    f"one newcomer's prefill is paid by every stream in the batch."))

# %% [markdown]
# ## What these numbers do not show
#
# * **A simulated scheduler.** One process alternates two streams; a serving system has queues, admission
#   control, many requests of many lengths, and a policy that decides what runs next.
# * **One stall per run.** A stream of 40 tokens meets one newcomer; under load, newcomers keep arriving.
# * **One machine's floor.** The best chunk size moves with the hardware and the model; that is why it is
#   predicted from section 2's fit rather than fixed.
# * **No batching of B with A.** Real chunked-prefill schedulers (Sarathi-Serve, vLLM) put the chunk and the
#   decode tokens in the same forward pass; here they alternate.
#
# ## Takeaways
#
# * A long prefill stalls every stream sharing the machine; the worst gap shows it and TPOT hides it.
# * Chunked prefill bounds the stall to one chunk's cost, and charges the newcomer in TTFT.
# * Below the floor's knee, smaller chunks stop helping the streams and keep hurting the newcomer.
#
# ## Check yourself
#
# 1. A's steps take 60 ms; B's 1,000-token prefill takes 2.5 s. Roughly what worst gap does A see unchunked,
#    and with 250-token chunks?
#
# <details><summary>Answer</summary>
#
# Unchunked: about 60 ms + 2,500 ms. With four chunks of about 625 ms each (plus any fixed cost per chunk): about
# 60 + 625 ms.
# </details>
#
# 2. Why does B's TTFT grow as chunks shrink even when the total prefill work is the same?
#
# <details><summary>Answer</summary>
#
# Each chunk pays the pass's fixed cost again, and B waits for one A step before each chunk: `n` chunks cost `n`
# floors and `n` A steps.
# </details>
#
# 3. How would you choose a chunk size for a new machine?
#
# <details><summary>Answer</summary>
#
# Measure prefill time against prompt length (section 2), fit the fixed cost and the per-token cost, and choose a
# chunk near `fixed / per_token`, adjusted to your objective on the worst gap.
# </details>
#
# ## Try it
#
# * Set `arrival_step = 30`: does the stall move, and does its size change?
# * Set `stream_counts = [1, 8]` and compare with the Word Factory's eight typers.
# * Set `dtype = "bf16"` on a CPU without bf16 instructions: where does the knee move?
