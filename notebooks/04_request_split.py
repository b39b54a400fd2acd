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
# # 4. Where a request's time goes
#
# Section 2 timed prefill alone and section 3 decode alone. A request is both: one prefill, whose cost grows
# with the prompt, then one decode step per output token after the first. Which phase a request spends its
# time in therefore depends on two numbers, the prompt length and the output length, and workloads differ
# enormously in both. This chapter runs whole requests over a grid of the two, scores each with
# `lib.metrics`, and splits its end-to-end time into the prefill's share and the decode's share.

# %% tags=["parameters"]
quick = False
device = "auto"
dtype = "fp32"
model_name = "gpt2-small"
pairs = [(16, 64), (128, 64), (512, 64), (512, 8), (1000, 16), (1000, 4),   # the source chapter's six
         (64, 256), (256, 128), (768, 32), (1000, 1)]                      # and more
runs = 3
ttft_slo_ms = None       # objectives for goodput; None: a default for the device in use (stated below)
tpot_slo_ms = None
archetypes = {"chat": (100, 300), "retrieval-augmented answer": (900, 60), "agent tool loop": (700, 15)}

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from IPython.display import Markdown, display
from tqdm.auto import tqdm

from lib import metrics, phases, sweeps
from lib.device import describe_environment, resolve_device, resolve_dtype
from lib.models import load_model, random_prompt
from lib.results import Results, load_reference

dev = resolve_device(device)
torch_dtype = resolve_dtype(dtype, dev)
if quick:
    model_name, runs = "tiny-gpt2", 2
    pairs = [(16, 8), (128, 8), (512, 4), (1000, 2)]
on_gpu = dev.type == "cuda"
ttft_slo_ms = ttft_slo_ms or (100.0 if on_gpu else 1000.0)
tpot_slo_ms = tpot_slo_ms or (25.0 if on_gpu else 100.0)
lm = load_model(model_name, dev, torch_dtype)
for prompt_len, output_len in pairs:
    phases.check_fits(lm, prompt_len, output_len)  # refuse the whole grid before any work
results = Results("04_request_split", quick=quick, device=dev, dtype=torch_dtype, model=model_name,
                  params=dict(pairs=pairs, runs=runs, ttft_slo_ms=ttft_slo_ms, tpot_slo_ms=tpot_slo_ms))
pd.Series(describe_environment(dev, torch_dtype, model_name)).to_frame("this run")

# %% [markdown]
# ## Whole requests over a grid
#
# Each request is `lib.phases.run_request`: a prefill with last-position logits, the first token chosen from
# it, then cached greedy decode to the output length, each token read back to the host and stamped. Prompts
# are random token ids; a warm-up request runs first. Every pair runs `runs` times, interleaved (all pairs
# once, then all again) so that a slow spell of the machine does not land on one pair only.

# %%
phases.run_request(lm, random_prompt(32, lm.vocab_size, device=dev), 4)  # warm-up
records = []
for run in tqdm(range(runs), desc="runs"):
    for prompt_len, output_len in pairs:
        trace = phases.run_request(lm, random_prompt(prompt_len, lm.vocab_size, seed=run, device=dev), output_len)
        m = metrics.request_metrics(trace.request_time, trace.token_times)
        pre, dec = metrics.phase_share(m)
        records.append(dict(prompt_tokens=prompt_len, output_tokens=output_len, run=run + 1, metrics=m,
                            ttft_ms=m.ttft * 1e3, tpot_ms=np.nan if m.tpot is None else m.tpot * 1e3,
                            worst_gap_ms=np.nan if m.worst_gap is None else m.worst_gap * 1e3,
                            e2e_ms=m.e2e * 1e3, prefill_share=pre, decode_share=dec,
                            meets_objectives=metrics.meets_slo(m, ttft_slo_ms / 1e3, tpot_slo_ms / 1e3)))
requests = pd.DataFrame(records)
results.table(requests.drop(columns="metrics"), "requests")

split = (requests.groupby(["prompt_tokens", "output_tokens"], sort=False)
         .agg(ttft_ms=("ttft_ms", "median"), ttft_lo=("ttft_ms", "min"), ttft_hi=("ttft_ms", "max"),
              tpot_ms=("tpot_ms", "median"), tpot_lo=("tpot_ms", "min"), tpot_hi=("tpot_ms", "max"),
              worst_gap_ms=("worst_gap_ms", "median"), e2e_ms=("e2e_ms", "median"),
              e2e_lo=("e2e_ms", "min"), e2e_hi=("e2e_ms", "max"),
              prefill_share=("prefill_share", "median"), decode_share=("decode_share", "median"),
              goodput=("meets_objectives", "mean"))
         .reset_index())
results.table(split, "request_split")
split.round(3)

# %%
fig, ax = plt.subplots(figsize=(10, 4.5))
labels = [f"{p} in\n{o} out" for p, o in zip(split.prompt_tokens, split.output_tokens)]
prefill_ms = split.ttft_ms
decode_ms = split.e2e_ms - split.ttft_ms
ax.bar(labels, prefill_ms, color="tab:orange", label="prefill and first token (TTFT)")
ax.bar(labels, decode_ms, bottom=prefill_ms, color="tab:blue", label="decode (the other tokens)")
for x, (total, share) in enumerate(zip(split.e2e_ms, split.prefill_share)):
    ax.text(x, total, f"{share:.0%}", ha="center", va="bottom", fontsize=8)
ax.set_yscale("log")
ax.set_ylabel("end-to-end time (ms), median run")
longest = split.loc[split.prefill_share.idxmax()]
ax.set_title(f"Prefill's share (labels) runs from {split.prefill_share.min():.0%} to {split.prefill_share.max():.0%}: "
             f"long prompt, short reply is a prefill job")
ax.legend(fontsize=8)
fig.tight_layout()
results.figure(fig, "request_split")
plt.show()

# %%
short = split.iloc[0]
display(Markdown(
    f"TTFT follows the prompt: from **{split.ttft_ms.min():.0f} ms** to **{split.ttft_ms.max():.0f} ms** across the "
    f"grid. TPOT follows nothing much: **{split.tpot_ms.min():.0f} to {split.tpot_ms.max():.0f} ms** whatever the prompt "
    f"(the cache grows, but its bytes stay small beside the weights'). So a {int(short.prompt_tokens)}-token prompt with a "
    f"{int(short.output_tokens)}-token reply spends **{short.decode_share:.0%}** of its time decoding, while "
    f"{int(longest.prompt_tokens)} tokens in and {int(longest.output_tokens)} out spends **{longest.prefill_share:.0%}** "
    f"in prefill."))

# %% [markdown]
# **Takeaway: TTFT grows with the prompt and TPOT does not; which phase dominates a request is decided by
# the ratio of its prompt to its output.**
#
# ## Beside the reference run
#
# The source chapter's six pairs on its GPU. There, a short prefill and a decode step sat on the same launch
# floor (compare its TTFT and TPOT columns), so a prefill was nearly free next to the decode; a CPU pays for
# every FLOP of the prefill, so the same request is far more prefill-heavy here.

# %%
ref = load_reference("ch09_request_split_gpu")
beside = ref.merge(split[["prompt_tokens", "output_tokens", "ttft_ms", "tpot_ms", "e2e_ms", "prefill_share"]]
                   .rename(columns=lambda c: c if c.endswith("tokens") else f"this_{c}"),
                   on=["prompt_tokens", "output_tokens"], how="left")
beside["this_prefill_share_pct"] = beside.pop("this_prefill_share") * 100
results.table(beside, "beside_reference")
beside.round(1)

# %% [markdown]
# ## Workload archetypes
#
# Three shapes of traffic, each a prompt and an output length. Rather than run each once more, predict its
# split from this chapter's measurements: TTFT from a straight-line fit of the measured TTFTs against prompt
# length (`lib.sweeps.fit_floor`), and each later token at the median measured TPOT.

# %%
ttft_fit = sweeps.fit_floor(requests.prompt_tokens, requests.ttft_ms / 1e3)
tpot_s = np.nanmedian(requests.tpot_ms) / 1e3
arch = []
for name, (p, o) in archetypes.items():
    ttft = float(ttft_fit.predict([p])[0])
    decode_s = (o - 1) * tpot_s
    arch.append(dict(workload=name, prompt_tokens=p, output_tokens=o, predicted_ttft_ms=ttft * 1e3,
                     predicted_e2e_ms=(ttft + decode_s) * 1e3, prefill_share=ttft / (ttft + decode_s),
                     dominant_phase="prefill" if ttft > decode_s else "decode"))
arch = pd.DataFrame(arch)
results.table(arch, "archetypes")
display(arch.round(2))
display(Markdown(
    "On this machine: " + "; ".join(f"{'an' if r.workload[0] in 'aeiou' else 'a'} **{r.workload}** ({r.prompt_tokens} "
                                     f"in, {r.output_tokens} out) is a **{r.dominant_phase}** job "
                                     f"({r.prefill_share:.0%} prefill)" for r in arch.itertuples())
    + ". The dominant phase is the one to optimise: TPOT (decode) for a decode job, TTFT (prefill) for a prefill "
      "job. The shares move with the machine: on the reference GPU prefill was nearly free beside decode."))

# %% [markdown]
# ## Goodput against stated objectives
#
# Goodput is the fraction of requests that meet every objective. The objectives are parameters; the defaults
# depend on the device and are stated here, so the verdict is explicit rather than implied.

# %%
good = metrics.goodput(list(requests.metrics), ttft_slo_ms / 1e3, tpot_slo_ms / 1e3)
per_pair = split[["prompt_tokens", "output_tokens", "ttft_ms", "tpot_ms", "goodput"]]
display(per_pair.round(2))
failing = per_pair[per_pair.goodput < 1]
display(Markdown(
    f"Objectives on {'a GPU' if on_gpu else 'a CPU'}: TTFT at most **{ttft_slo_ms:.0f} ms**, TPOT at most "
    f"**{tpot_slo_ms:.0f} ms**. Goodput over all {len(requests)} requests: **{good:.0%}**. "
    + ("Every pair met them." if failing.empty else
       "The pairs that missed: " + ", ".join(f"{r.prompt_tokens} in / {r.output_tokens} out" for r in failing.itertuples())
       + f". A request with one output token has no TPOT; it is judged on TTFT alone (see `lib.metrics.goodput`).")))
assert 0.0 <= good <= 1.0

# %% [markdown]
# ## What these numbers do not show
#
# * **TTFT from the model call.** No tokenisation, queueing, network or delivery: a client's TTFT is longer.
# * **One request at a time.** No batching and no other request competing; section 5 adds one.
# * **GPT-2 small with random weights and random prompts.** Timing does not depend on the tokens; the
#   archetypes' splits are predictions from this chapter's fits, not measured requests.
# * **A 1,024-position model.** Real workloads send prompts of tens of thousands of tokens, where attention's
#   quadratic term makes prefill grow faster than linearly (section 6).
#
# ## Takeaways
#
# * A request's time is TTFT (prefill) plus one TPOT per later token (decode).
# * Long prompts with short replies are prefill jobs; short prompts with long replies are decode jobs.
# * Goodput depends on objectives: state them with the numbers.
#
# ## Check yourself
#
# 1. A request has TTFT 400 ms and 50 output tokens at TPOT 60 ms. What is its prefill share?
#
# <details><summary>Answer</summary>
#
# End-to-end is 400 + 49 x 60 = 3,340 ms, so prefill's share is 400 / 3,340, about 12 per cent.
# </details>
#
# 2. Which objective does an agent that sends 8,000 tokens of tool output and reads back 20 tokens care about most?
#
# <details><summary>Answer</summary>
#
# TTFT: almost all of its time is the prefill of the long prompt.
# </details>
#
# 3. Why might the same request be decode-dominated on a GPU and prefill-dominated on a CPU?
#
# <details><summary>Answer</summary>
#
# A GPU's prefill runs at a high FLOP rate and hides under the same launch floor as a decode step; a CPU pays
# for every FLOP of the prefill, while its decode step costs roughly the weights' bytes over bandwidth.
# </details>
#
# ## Try it
#
# * Add `(1000, 200)` to `pairs`: at what output length does decode overtake prefill for a 1,000-token prompt?
# * Set `tpot_slo_ms` to your own reading speed (a fast reader manages about 8 tokens per second: 125 ms).
# * Run with `dtype = "bf16"` and compare the split with section 2's bf16 prefill.
