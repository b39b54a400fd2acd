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
# # 1. Two phases: one request, two jobs
#
# Ask a language model a question and watch the answer arrive. There is a wait, then a steady stream.
# The wait is **prefill**: the model reads the whole prompt in one parallel pass, writes the keys and
# values of every position into its KV cache, and the last position's output is already the
# distribution of the first answer token. The stream is **decode**: one token per pass, each pass
# reading every weight and the whole cache again to produce one more token.
#
# This chapter runs a real pretrained model, SmolLM2-135M-Instruct, on your machine, stamps the time of
# every token as it is read back to the host, and defines on that trace the numbers a user feels: time
# to first token (TTFT), the gaps between tokens (ITL), time per output token (TPOT), end-to-end latency,
# and goodput. Every number in the prose below is computed on this page.

# %% tags=["parameters"]
quick = False            # quick mode: fewer tokens and runs, outputs under build/quick/
device = "auto"          # "auto" (CUDA if present, else CPU), "cpu", "cuda", "cuda:N"
dtype = "fp32"           # "fp32", "bf16" or "fp16" (fp16 only where the device runs it)
model_name = "smollm2-135m"
question = "Why is the sky blue? Explain it to a ten-year-old in three sentences."
max_new_tokens = 80      # the answer stops earlier if the model ends its turn
runs = 5                 # whole requests timed, after one warm-up request
ttft_slo_ms = None       # objectives for goodput; None picks the device default stated below
tpot_slo_ms = None
worst_gap_slo_ms = None

# %%
import statistics

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from IPython.display import Markdown, display

from lib import metrics, phases, roofline
from lib.device import describe_environment, resolve_device, resolve_dtype
from lib.models import load_model
from lib.results import Results

if quick:
    max_new_tokens, runs = min(max_new_tokens, 12), min(runs, 2)

dev = resolve_device(device)
torch_dtype = resolve_dtype(dtype, dev)
lm = load_model(model_name, dev, torch_dtype)
results = Results("01_two_phases", quick=quick, device=dev, dtype=torch_dtype, model=model_name,
                  params=dict(question=question, max_new_tokens=max_new_tokens, runs=runs))
print(f"model: {lm.name} ({lm.source})")
pd.Series(describe_environment(dev, torch_dtype, model_name)).to_frame("this run")

# %% [markdown]
# ## A real answer, token by token
#
# The prompt is the question wrapped in the model's chat template. `lib.phases.run_request` runs the
# prefill, picks the first token from the last position's logits, then decodes greedily, reading each
# token id back to the host (`.item()`) before it stamps the time, as a server must before it can send
# the token. The first request on a fresh process pays one-time costs (memory allocation, kernel
# selection), so one warm-up request runs first; its TTFT is shown separately.

# %%
tokenizer = lm.tokenizer
chat = [{"role": "user", "content": question}]
prompt_ids = tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt",
                                           return_dict=True)["input_ids"].to(dev)
prompt_tokens = prompt_ids.shape[1]
eos = tokenizer.eos_token_id

cold = phases.run_request(lm, prompt_ids, max_new_tokens, eos_token_id=eos)
traces = [phases.run_request(lm, prompt_ids, max_new_tokens, eos_token_id=eos) for _ in range(runs)]
assert all(t.token_ids == cold.token_ids for t in traces), "greedy decoding must repeat itself"

per_run = [metrics.request_metrics(t.request_time, t.token_times) for t in traces]
cold_m = metrics.request_metrics(cold.request_time, cold.token_times)
median_run = sorted(range(runs), key=lambda i: per_run[i].e2e)[runs // 2]
trace, m = traces[median_run], per_run[median_run]
answer = tokenizer.decode(trace.token_ids, skip_special_tokens=True)

display(Markdown(f"**Prompt** ({prompt_tokens} tokens with the chat template): *{question}*\n\n"
                 f"**Answer** ({m.n_tokens} tokens, greedy): {answer}"))

# %%
token_table = pd.DataFrame({
    "index": range(m.n_tokens),
    "token": [tokenizer.decode([i]) for i in trace.token_ids],
    "token_id": trace.token_ids,
    "time_since_request_ms": [(t - trace.request_time) * 1e3 for t in trace.token_times],
    "gap_ms": [np.nan] + [g * 1e3 for g in m.gaps],
})
results.table(token_table, "answer_trace")
display(Markdown(
    f"The warm-up request's first token took **{cold_m.ttft * 1e3:.0f} ms**; warm, it takes "
    f"**{m.ttft * 1e3:.0f} ms**. Every run below is warm. This is the median run of {runs} "
    f"(by end-to-end time); the first tokens and their times:"))
token_table.head(12).round(1)

# %%
times_ms = np.array(token_table["time_since_request_ms"])
prefill_ms = (trace.prefill_done - trace.request_time) * 1e3
fig, (ax_t, ax_g) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True, height_ratios=[2, 1])
ax_t.axvspan(0, prefill_ms, color="tab:orange", alpha=0.25, label=f"prefill ({prompt_tokens} prompt tokens)")
ax_t.step(np.r_[0, times_ms], np.r_[0, np.arange(1, len(times_ms) + 1)], where="post", color="tab:blue",
          label="tokens received")
ax_t.plot(times_ms, np.arange(1, len(times_ms) + 1), "o", ms=3, color="tab:blue")
ax_t.set_ylabel("tokens received")
ax_t.legend(loc="upper left")
ax_t.set_title(f"The first token waits {m.ttft * 1e3:.0f} ms for prefill; then one arrives "
               f"every {m.median_gap * 1e3:.0f} ms (median)")
ax_g.bar(times_ms[1:], np.array(m.gaps) * 1e3, width=np.diff(times_ms) * 0.8, align="edge",
         color="tab:blue", alpha=0.6)
ax_g.bar([0], [m.ttft * 1e3], width=times_ms[0] * 0.98, align="edge", color="tab:orange", alpha=0.6)
ax_g.set_yscale("log")
ax_g.set_ylabel("wait before\nthis token (ms)")
ax_g.set_xlabel("time since the request started (ms)")
fig.tight_layout()
results.figure(fig, "timeline")
plt.show()

# %% [markdown]
# ## The shapes of the two phases
#
# Both phases run the same weights through the same code. What differs is the shape of the work. In
# prefill, the `T` prompt positions go through every weight matrix together: each matrix product has `T`
# rows, and attention compares every position with every earlier one, a `T x T` (causally masked)
# problem per head. In decode, one new position goes through every weight matrix (one row) and its
# query meets the `C` cached keys and values, a `1 x C` problem. The table spells this out for this
# model, this prompt, and a decode step half-way through this answer, using the model's own
# configuration.

# %%
shape = roofline.ModelShape.from_config(lm.config, name=lm.name, bytes_per_param=torch_dtype)
T = prompt_tokens
C = T + m.n_tokens // 2
ffn_rows = ([("FFN gate", shape.d_model, shape.d_ff), ("FFN up", shape.d_model, shape.d_ff)]
            if shape.gated_ffn else [("FFN up", shape.d_model, shape.d_ff)])
matrices = [("Q projection", shape.d_model, shape.heads * shape.head_dim),
            ("K projection", shape.d_model, shape.kv_heads * shape.head_dim),
            ("V projection", shape.d_model, shape.kv_heads * shape.head_dim),
            ("attention output", shape.heads * shape.head_dim, shape.d_model),
            *ffn_rows,
            ("FFN down", shape.d_ff, shape.d_model),
            ("LM head (last position)", shape.d_model, shape.vocab)]
shape_table = pd.DataFrame(
    [{"operation": name, "prefill": f"({T} x {k}) @ ({k} x {n})" if "LM head" not in name else f"(1 x {k}) @ ({k} x {n})",
      "decode step": f"(1 x {k}) @ ({k} x {n})"} for name, k, n in matrices]
    + [{"operation": f"attention scores, per head ({shape.heads} heads)",
        "prefill": f"({T} x {shape.head_dim}) @ ({shape.head_dim} x {T}), causal",
        "decode step": f"(1 x {shape.head_dim}) @ ({shape.head_dim} x {C})"}])
results.table(shape_table, "shapes")
shape_table

# %% [markdown]
# Counted in FLOPs and bytes (`lib.roofline`, whose conventions section 6 states), a prefill does `T`
# times the weight arithmetic of a decode step but reads each weight once, just as a decode step does.
# So a prefill should cost much less **per token** than a decode step. How much less depends on what
# limits the machine: if moving the weights were the whole cost, prefill per token would be `T` times
# cheaper; if arithmetic were the whole cost, no cheaper at all. We predict the two extremes, then
# measure.

# %%
pre_cost = roofline.prefill_cost(shape, T, logits="last")
dec_cost = roofline.decode_cost(shape, batch=1, context=C)
prefill_s = [t.prefill_done - t.request_time for t in traces]
step_s = [r.median_gap for r in per_run if r.median_gap is not None]
measured_ratio = statistics.median(step_s) / (statistics.median(prefill_s) / T)
costs = pd.DataFrame([
    {"phase": f"prefill, {T} tokens", "GFLOP": pre_cost.flops / 1e9, "MB moved": pre_cost.bytes / 1e6,
     "FLOP per byte": pre_cost.intensity, "measured ms (median)": statistics.median(prefill_s) * 1e3,
     "ms per token": statistics.median(prefill_s) * 1e3 / T},
    {"phase": f"decode step at context {C}", "GFLOP": dec_cost.flops / 1e9, "MB moved": dec_cost.bytes / 1e6,
     "FLOP per byte": dec_cost.intensity, "measured ms (median)": statistics.median(step_s) * 1e3,
     "ms per token": statistics.median(step_s) * 1e3},
])
results.table(costs, "phase_costs")
display(costs.round(3))
display(Markdown(
    f"Prediction: a prompt token costs between **1x** (arithmetic-bound) and **{T}x** (weight-reading-bound) "
    f"less than a decoded token. Measured: **{measured_ratio:.1f}x** less. Prefill moves "
    f"{pre_cost.intensity:.0f} FLOPs per byte it reads and a decode step "
    f"{dec_cost.intensity:.1f}: the same weights, used {T} times per read in one phase and once in the other."))
assert 1 < measured_ratio, "prefill must be cheaper per token than decode on any machine"

# %% [markdown]
# **Takeaway: prefill pushes many tokens through each weight it reads; decode pushes one, so a decoded
# token costs far more than a prompt token.**
#
# ## The numbers a user feels
#
# `lib.metrics.request_metrics(request_time, token_times)` takes nothing but timestamps, so the same
# function scores this loop, a server, or an HTTP client:
#
# * **TTFT**, time to first token: first token's time minus the request's time.
# * **ITL**, inter-token latency: the list of gaps between consecutive tokens, a distribution.
# * **TPOT**, time per output token: `(t_last - t_first) / (n - 1)`, the mean gap.
# * **End-to-end**: last token's time minus the request's time.
# * **Worst gap**: the longest wait between two tokens, the stall a reader sees.
# * **Goodput**: the fraction of requests that meet every stated objective.
#
# Here TTFT starts when the prefill call starts: it leaves out tokenisation, queueing and the network
# that a real client's TTFT includes.

# %%
if ttft_slo_ms is None or tpot_slo_ms is None:
    on_gpu = dev.type == "cuda"
    ttft_slo_ms = ttft_slo_ms or (200.0 if on_gpu else 1000.0)
    tpot_slo_ms = tpot_slo_ms or (50.0 if on_gpu else 100.0)
worst_gap_slo_ms = worst_gap_slo_ms or 2 * tpot_slo_ms

run_table = metrics.to_frame(per_run)
run_table.insert(0, "run", range(1, runs + 1))
run_table["meets_objectives"] = [metrics.meets_slo(r, ttft_slo_ms / 1e3, tpot_slo_ms / 1e3, worst_gap_slo_ms / 1e3)
                                 for r in per_run]
results.table(run_table, "request_metrics")
summary = metrics.summarize(per_run) * 1e3
summary["count"] = summary["count"] / 1e3
good = metrics.goodput(per_run, ttft_slo_ms / 1e3, tpot_slo_ms / 1e3, worst_gap_slo_ms / 1e3)
prefill_share, decode_share = metrics.phase_share(m)
display(summary.round(2).rename_axis("ms (count is a count)"))
display(Markdown(
    f"Across {runs} runs, TTFT was **{min(r.ttft for r in per_run) * 1e3:.0f} to "
    f"{max(r.ttft for r in per_run) * 1e3:.0f} ms** and TPOT **{min(r.tpot for r in per_run) * 1e3:.1f} to "
    f"{max(r.tpot for r in per_run) * 1e3:.1f} ms**, with a worst gap of "
    f"{min(r.worst_gap for r in per_run) * 1e3:.1f} to {max(r.worst_gap for r in per_run) * 1e3:.1f} ms. "
    f"The median run spent **{prefill_share:.0%}** of its {m.e2e * 1e3:.0f} ms in prefill and "
    f"**{decode_share:.0%}** in decode: a short question with a paragraph of answer is a decode job.\n\n"
    f"Objectives, on {'a GPU' if dev.type == 'cuda' else 'a CPU'}: TTFT at most {ttft_slo_ms:.0f} ms, TPOT at most "
    f"{tpot_slo_ms:.0f} ms (faster than anyone reads), worst gap at most {worst_gap_slo_ms:.0f} ms. "
    f"Goodput: **{good:.0%}** of these requests met all three. The objectives are parameters; "
    f"change them at the top of the notebook."))

# %% [markdown]
# **Takeaway: report TTFT, TPOT and the worst gap together, with the prompt and output lengths; one
# "latency" number describes neither phase.**
#
# ## Same TPOT, a different stall
#
# TPOT is a mean, and a mean hides a stall. Take this run's median gap `g` and build two streams of the
# same length from it. In the first, every token is a little late. In the second, the tokens are on
# time except one, which waits for a long time, as it would behind another request's prefill (section
# 5). Both have the same TPOT.

# %%
g = m.median_gap
n = max(m.n_tokens, 12)
stall = 10 * g
steady = np.full(n - 1, g + (stall - g) / (n - 1))           # every gap a little late
stalled = np.full(n - 1, g); stalled[(n - 1) // 2] = stall    # one long gap
examples = {"every token a little late": steady, "one token very late": stalled}
example_metrics = {k: metrics.request_metrics(0.0, m.ttft + np.r_[0.0, np.cumsum(v)]) for k, v in examples.items()}
same_tpot = pd.DataFrame([{"stream": k, "TPOT ms": r.tpot * 1e3, "median gap ms": r.median_gap * 1e3,
                           "worst gap ms": r.worst_gap * 1e3,
                           "meets worst-gap objective": r.worst_gap <= worst_gap_slo_ms / 1e3}
                          for k, r in example_metrics.items()])
results.table(same_tpot, "same_tpot_different_stall")
a, b = example_metrics.values()
assert abs(a.tpot - b.tpot) < 1e-9 and b.worst_gap > 2 * a.worst_gap

fig, ax = plt.subplots(figsize=(9, 3.2))
for (label, gaps), marker in zip(examples.items(), ("o", "s")):
    ax.plot(np.arange(2, n + 1), gaps * 1e3, marker=marker, ms=3, label=label)
ax.axhline(a.tpot * 1e3, color="grey", ls="--", lw=1, label=f"TPOT of both: {a.tpot * 1e3:.1f} ms")
ax.set_yscale("log")
ax.set_xlabel("token index")
ax.set_ylabel("gap before token (ms)")
ax.set_title(f"Equal TPOT, but one stream froze for {b.worst_gap * 1e3:.0f} ms")
ax.legend()
results.figure(fig, "same_tpot_different_stall")
plt.show()
same_tpot.round(1)

# %% [markdown]
# **Takeaway: TPOT is a mean and hides a stall; the worst gap (or a high percentile of ITL) shows it.**
#
# ## TTFT is prefill plus a choice, not prefill plus a decode step
#
# A common shorthand, and the defect a source chapter records in its own first draft, says TTFT is the
# prefill time plus one decode step. But the prefill's last position already is the first token's
# distribution: TTFT is the prefill plus choosing (here: an `argmax` and reading the id back). Adding a
# decode step counts a pass that produces the *second* token. The trace lets us check both claims.

# %%
choice_s = [t.token_times[0] - t.prefill_done for t in traces]
ttft_s = [r.ttft for r in per_run]
shorthand_s = [p + s for p, s in zip(prefill_s, step_s)]
ttft_check = pd.DataFrame({
    "run": range(1, runs + 1), "prefill ms": np.array(prefill_s) * 1e3,
    "choose first token ms": np.array(choice_s) * 1e3, "TTFT ms": np.array(ttft_s) * 1e3,
    "prefill + one decode step ms": np.array(shorthand_s) * 1e3})
results.table(ttft_check, "ttft_check")
display(ttft_check.round(2))

with torch.inference_mode():
    uncached_first = phases.greedy_uncached(lm, prompt_ids, 1)[0]
assert uncached_first == trace.token_ids[0], "the prefill's last position must give the first token"
display(Markdown(
    f"Choosing the first token took a median **{statistics.median(choice_s) * 1e3:.2f} ms**, against a decode "
    f"step of {statistics.median(step_s) * 1e3:.1f} ms. The shorthand would report a TTFT of "
    f"{statistics.median(shorthand_s) * 1e3:.0f} ms instead of the measured "
    f"{statistics.median(ttft_s) * 1e3:.0f} ms, an overstatement of "
    f"{statistics.median(shorthand_s) / statistics.median(ttft_s) - 1:.0%}. And the first token from the "
    f"cached prefill, id {trace.token_ids[0]} ({tokenizer.decode([trace.token_ids[0]])!r}), is the one a "
    f"full uncached pass chooses."))
assert statistics.median(choice_s) < statistics.median(step_s)

# %% [markdown]
# **Takeaway: the first token comes out of the prefill; a decode step is the cost of every token after it.**
#
# ## What these numbers do not show
#
# * **One small model, batch size 1.** A 135M-parameter model on a CPU is far from a served 8B or 70B model
#   on a GPU; which resource limits each phase can change with size (sections 3 and 6).
# * **No client, queue or network.** TTFT here starts at the prefill call. A real TTFT adds
#   tokenisation, queueing behind other requests and delivery.
# * **One short prompt.** Prefill's share of a request grows with the prompt and shrinks with the answer
#   (section 4); a long prefill in a shared server stalls other streams (section 5).
# * **Greedy decoding** of one question. Timings do not depend on which tokens are chosen, but nothing here
#   judges the answer's quality.
#
# ## Takeaways
#
# * A request is two jobs: a prefill that reads the whole prompt in one pass and yields the first token,
#   then a decode loop that yields one token per pass.
# * Per token, prefill is much cheaper: it reuses each weight it reads across every prompt position.
# * TTFT is what the prefill costs; TPOT is what a decode step costs; the worst gap is what a stall costs.
# * Goodput counts the requests that met every objective; it is the number an operator should watch.
#
# ## Check yourself
#
# 1. A trace has request time 0 s and token times 0.5, 0.6, 0.7, 1.5 s. What are TTFT, TPOT and the worst gap?
#
# <details><summary>Answer</summary>
#
# TTFT 0.5 s; TPOT (1.5 - 0.5) / 3 = 0.333 s; worst gap 0.8 s (between 0.7 and 1.5). The TPOT of 333 ms hides
# an 800 ms freeze.
# </details>
#
# 2. Why does the prefill of a 30-token prompt take far less than 30 decode steps?
#
# <details><summary>Answer</summary>
#
# The prefill reads each weight once and multiplies it by all 30 rows at once; 30 decode steps read every
# weight 30 times, one row each. Where reading weights (or launching operations) is a large part of the
# cost, the parallel pass wins.
# </details>
#
# 3. Someone computes TTFT as prefill time plus one decode step. What is wrong?
#
# <details><summary>Answer</summary>
#
# The prefill's last-position logits already give the first token; a decode step produces the second.
# Their number is too large by about one TPOT.
# </details>
#
# 4. With an objective "TPOT at most 100 ms", how is a request that produced a single token judged?
#
# <details><summary>Answer</summary>
#
# It has no TPOT and no gaps, so the book judges it on TTFT alone: it meets the decode objectives
# vacuously (`lib.metrics.goodput` documents and tests this choice).
# </details>
#
# ## Try it
#
# * Ask a question that needs a long answer (raise `max_new_tokens`): how do the phase shares move?
# * Paste a long paragraph into `question`: how does TTFT grow with the prompt, and does TPOT change?
# * Run with `dtype = "bf16"`: which phase speeds up, and by how much?
# * Tighten `tpot_slo_ms` until goodput drops below 100 per cent. What TPOT does your machine sustain?
