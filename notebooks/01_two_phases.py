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
# # 1. Two phases: one request, two jobs
#
# Ask a language model a question and watch the answer arrive. There is a wait, then a steady stream.
# The wait is **prefill**: the model reads the whole prompt in one parallel pass, writes the keys and
# values of every position into its KV cache, and the last position's output is already the
# distribution of the first answer token. The stream is **decode**: one token per pass, each pass
# reading every weight and the whole cache again to produce one more token.
#
# This chapter runs a real pretrained model, SmolLM2-135M-Instruct, on your machine, and stamps the time of
# every token as it is read back to the host. On that trace it defines the numbers a user feels: time
# to first token (TTFT), the gaps between tokens (ITL), time per output token (TPOT), end-to-end latency,
# and goodput. Every number in the prose below is computed on this page; the [glossary](glossary.md) defines
# the words the chapters use.

# %% [markdown]
# **After this chapter you can**
#
# * Run one request and split its time into the prompt's pass (TTFT) and the decode steps after it.
# * Explain, from the shapes of the two passes, why a prompt token costs far less than a generated one.
# * Compute TTFT, TPOT, ITL and the worst gap from the times at which tokens arrived, and say which one a user feels.
# * Say why two runs with the same TPOT can feel different to a user.

# %% tags=["parameters"]
quick = False            # quick mode: fewer tokens and runs, outputs under build/quick/
device = "auto"          # "auto" (CUDA if present, else CPU), "cpu", "cuda", "cuda:N"
dtype = "fp32"           # "fp32", "bf16" or "fp16" (fp16 only where the device runs it)
model_name = "smollm2-135m"  # a model with a chat template (GPT-2 has none)
question = "Why is the sky blue? Explain it to a ten-year-old in three sentences."
max_new_tokens = 80      # the answer stops earlier if the model ends its turn
runs = 9                 # whole requests timed, after one warm-up request (nine: see lib.claims)
ttft_slo_ms = None       # objectives for goodput, in ms; None: the device's default (lib.objectives)
tpot_slo_ms = None
worst_gap_slo_ms = None  # None: twice the TPOT objective

# %%
import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
import torch.utils.benchmark
from IPython.display import Markdown, display

from lib import claims, costmodel, machine, metrics, objectives, params, phases, prose, roofline, shapes, timing
from lib.claims import Spread
from lib.device import describe_environment, resolve_dtype
from lib.models import load_model
from lib.prose import show
from lib.results import Results

CHAT_MODELS = ("smollm2-135m",)


def count(n: int, word: str) -> str:
    """``"1 run"``, ``"9 runs"``: a count with its noun's number."""
    return f"{n:,} {word}{'s' * (n != 1)}"


def with_interval(spread: Spread, fmt: str, unit: str = "", bold: bool = False) -> str:
    """A median over runs and, in parentheses, its 95 % interval (:func:`lib.claims.median_interval`), for a
    sentence."""
    mid, span = f"{'**' * bold}{spread.mid:{fmt}}{unit}{'**' * bold}", prose.span(spread.low, spread.high, fmt)
    return mid if "–" not in span else f"{mid} ({span}{unit})"  # ends that print alike: the number  # the book's models that have a chat template to wrap a question in

P = params.check(globals(), {
    "device": params.device(), "dtype": params.dtype(), "model_name": params.Rule(
        f"one of {', '.join(map(repr, CHAT_MODELS))}: a model with a chat template (GPT-2 has none)",
        params.choice(CHAT_MODELS).convert),
    "question": params.text(), "max_new_tokens": params.integer(min=1, max=512, quick=12),
    "runs": params.integer(min=1, max=30, quick=2),
    "ttft_slo_ms": params.number(above=0, allow_none=True), "tpot_slo_ms": params.number(above=0, allow_none=True),
    "worst_gap_slo_ms": params.number(above=0, allow_none=True),
}, quick=quick, chapter="01_two_phases")

# %%
torch_dtype = resolve_dtype(dtype, device)
lm = load_model(model_name, device, torch_dtype)
goals = objectives.objectives(device, ttft_slo_ms, tpot_slo_ms, worst_gap_slo_ms, worst_gap=True)
where = "the GPU" if device.type == "cuda" else f"{torch.get_num_threads()} CPU threads"
results = Results("01_two_phases", params=P, quick=quick, dtype=torch_dtype, model=model_name)
register = claims.Claims()
print(f"model: {lm.name} ({lm.source})")
pd.Series(describe_environment(device, torch_dtype, model_name)).to_frame("this run")

# %% [markdown]
# ## What this run found

# %%
opening = prose.Opening()

# %% [markdown]
# ## A real answer, token by token
#
# The prompt is the question wrapped in the model's chat template. `lib.phases.run_request` runs the
# prefill, picks the first token from the last position's logits, then decodes greedily, reading each
# token id back to the host (`.item()`) before it stamps the time, as a server must before it can send
# the token. The first request on a fresh process can pay one-time costs (memory allocation, kernel
# selection), so one warm-up request runs first and is kept out of the timings; a sentence after the answer
# says whether it was slower here. Greedy decoding of the same
# prompt should choose the same tokens in every run, which makes the runs comparable. The code below is the loop
# that is timed.

# %%
display(prose.source(phases.run_request))

# %% [markdown]
# Before it runs, the page prints the prompt's length in tokens and two rates chapter 0 measured for this model's
# matrices. `F(T)` is their rate with as many rows as the prompt has, and `F(1)` with one row, as in a decode step.

# %%
tokenizer = lm.tokenizer
chat = [{"role": "user", "content": question}]
prompt_ids = tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt",
                                           return_dict=True)["input_ids"].to(device)
prompt_tokens = prompt_ids.shape[1]
phases.check_fits(lm, prompt_tokens, max_new_tokens)
eos = tokenizer.eos_token_id
ceilings = machine.load_ceilings(device, quick=quick)  # chapter 0's one measurement of this machine
f_prompt, f_step = (ceilings.matrix_rate(model_name, dtype, torch.get_num_threads(), rows) for rows in (prompt_tokens, 1))
show(f"For {lm.name} in {dtype} on {where}, the prompt is `T` = **{prose.tokens(prompt_tokens)}** with the chat template; "
     f"F({prompt_tokens}) = **{f_prompt / 1e9:.0f} GFLOP/s**, F(1) = **{f_step / 1e9:.0f} GFLOP/s** (its weights "
     f"streaming at {ceilings.weight_rate(model_name, dtype, torch.get_num_threads()) / 1e9:.1f} GB/s).")

# %% [markdown] tags=["predict"]
# **Predict first.** Counted in FLOPs and bytes (`lib.roofline.prefill_cost` and `decode_cost`, whose conventions
# chapter 6 states), a prefill does `T` times a decode step's arithmetic in the blocks' matrices but reads each
# weight once, just as a decode step does. The LM head runs at the last position only, once for the whole
# prompt. If moving the weights were the whole cost, a prompt token would be `T` times cheaper than a decoded one;
# if arithmetic at one rate were the whole cost, only a little cheaper (the prompt's tokens share the LM head's
# one row). Here the prompt's matrices run at `F(T)` and a decode step's at `F(1)`, both printed just above. From
# those two rates, before the request runs: about how many times as much as a prompt token will a decoded token
# cost on this machine? The request below measures it, and the finding after *The shapes of the two phases* gives
# the ratio beside the book's own prediction.

# %% [markdown]
# One warm-up request, then `runs` timed ones. A number measured over runs is their median; the range in
# parentheses beside it is the median's 95 % interval, where its true value lies with 95 % confidence (`lib.claims`).

# %%
pacer = machine.Pacer(ceilings, model_name, dtype, torch.get_num_threads(), device)  # the machine's speed, watched
pacer.check("before the runs")
cold = phases.run_request(lm, prompt_ids, max_new_tokens, eos_token_id=eos)
traces = [phases.run_request(lm, prompt_ids, max_new_tokens, eos_token_id=eos) for _ in range(runs)]
pacer.check("after them")
per_run = [metrics.request_metrics(t.request_time, t.token_times) for t in traces]
cold_m = metrics.request_metrics(cold.request_time, cold.token_times)
median_run = sorted(range(runs), key=lambda i: per_run[i].ttft)[runs // 2]  # the run drawn: its TTFT the median
trace, m = traces[median_run], per_run[median_run]
answer = tokenizer.decode(trace.token_ids, skip_special_tokens=True)
same = sum(t.token_ids == cold.token_ids for t in traces)
show(f"**Prompt** ({prose.tokens(prompt_tokens)} with the chat template): *{question}*\n\n"
     f"**Answer** ({prose.tokens(m.n_tokens)}, greedy): {answer}")
register.claim("greedy_repeats", "Greedy decoding of the same prompt chooses the same tokens in every run.")
register.record("greedy_repeats", claims.HELD if same == runs else claims.NOT_HELD,
                predicted=f"{runs} of {count(runs, 'run')} identical to the warm-up", measured=f"{same} of {runs}",
                evidence=f"{lm.name}, {dtype}, {where}")
every = {1: "The timed run", 2: "Both timed runs"}.get(runs, f"All {runs} timed runs")
show(f"{every} chose the warm-up's {prose.tokens(cold_m.n_tokens)}." if same == runs else
     f"Only {same} of {count(runs, 'run')} chose the warm-up's tokens: on this device the kernels are not "
     "deterministic, so runs may differ in length; the timings below are still per token.")

# %%
token_table = pd.DataFrame({
    "position": range(m.n_tokens),
    "token": [tokenizer.decode([i]) for i in trace.token_ids],
    "token_id": trace.token_ids,
    "time_since_request_ms": [(t - trace.request_time) * 1e3 for t in trace.token_times],
    "gap_ms": [np.nan] + [g * 1e3 for g in m.gaps],
})
results.table(token_table, "answer_trace")
warm_ttft = [r.ttft * 1e3 for r in per_run]
cold_ms = cold_m.ttft * 1e3
warm_up = ("slower than every warm run: it paid one-time costs the warm runs did not" if cold_ms > max(warm_ttft) else
           "faster than every warm run: it paid no one-time costs that showed in its first token"
           if cold_ms < min(warm_ttft) else
           "within the warm runs' range: here the one-time costs did not show in the first token")
display(Markdown(
    f"The warm-up request's first token took {cold_ms:.0f} ms; over {count(runs, 'warm run')} the first token took "
    f"{with_interval(Spread.of(warm_ttft), '.0f', ' ms', bold=True)}"
    + (f", the runs ranging from {min(warm_ttft):.0f} to {max(warm_ttft):.0f} ms"
       if f"{min(warm_ttft):.0f}" != f"{max(warm_ttft):.0f}" else "")
    + f". So the warm-up was {warm_up}. "
    f"Every run below is warm. This is the median run by time to the first token; its first tokens and their times:"))
prose.shown(token_table.head(12).round(1))

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
tpots_over_runs = [r.tpot for r in per_run if r.tpot]  # TPOT, as the opening paragraph gives it
gap_text = (f"then one arrives every {np.median(tpots_over_runs) * 1e3:.1f} ms (TPOT)" if tpots_over_runs else
            "and it is the only one")
ax_t.set_title(f"The first token waits {np.median([r.ttft for r in per_run]) * 1e3:.0f} ms for prefill; {gap_text} "
               f"(medians of {count(runs, 'run')}; the median run drawn)", fontsize=10)
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
# model, this prompt, and a decode step half-way through this answer, from the model's own configuration
# read by `lib.shapes.ModelShape.from_config`.

# %%
shape = shapes.ModelShape.from_config(lm.config, name=lm.name, bytes_per_param=torch_dtype)
T = prompt_tokens
C = T + m.n_tokens // 2
kv_width = shape.kv_heads * shape.head_dim
ffn = [("FFN gate", shape.d_model, shape.d_ff)] if shape.gated_ffn else []
per_layer = [("Q projection", shape.d_model, shape.d_model), ("K projection", shape.d_model, kv_width),
             ("V projection", shape.d_model, kv_width), ("attention output", shape.d_model, shape.d_model),
             *ffn, ("FFN up", shape.d_model, shape.d_ff), ("FFN down", shape.d_ff, shape.d_model)]
lm_head = ("LM head (last position)", shape.d_model, shape.vocab)
claims.invariant(shape.layers * sum(k * n for _, k, n in per_layer) + lm_head[1] * lm_head[2] == shape.matmul_params,
                 "the table's matrices must hold exactly the weights lib.shapes counts")
rows = [{"operation": f"{name}, each of {shape.layers} layers", "prefill": f"({T} x {k}) @ ({k} x {n})",
         "decode_step": f"(1 x {k}) @ ({k} x {n})"} for name, k, n in per_layer]
rows.append({"operation": lm_head[0], "prefill": f"(1 x {lm_head[1]}) @ ({lm_head[1]} x {lm_head[2]})",
             "decode_step": f"(1 x {lm_head[1]}) @ ({lm_head[1]} x {lm_head[2]})"})
heads = (f"{shape.heads} query heads sharing {shape.kv_heads} cached key/value heads: grouped-query attention"
         if shape.kv_heads < shape.heads else f"{shape.heads} heads, each with its own cached keys and values")
rows.append({"operation": f"attention scores, per head ({heads})",
             "prefill": f"({T} x {shape.head_dim}) @ ({shape.head_dim} x {T}), causal",
             "decode_step": f"(1 x {shape.head_dim}) @ ({shape.head_dim} x {C})"})
shape_table = pd.DataFrame(rows)
results.table(shape_table, "shapes")
shape_table

# %% [markdown]
# So a prefill does `T` times a decode step's arithmetic in the blocks' matrices but reads each weight once, as a
# decode step does. A prompt token therefore costs from about as much as a decoded one down to `T` times less. Where
# it lands depends on how much faster the prompt's matrices run at `F(T)` than a step's at `F(1)` (the rates printed
# before the request ran). It also depends on the rest of a pass (issuing its operations, attention, the LM head),
# which a prefill pays once for all `T` tokens and decode once for every token.
#
# The book's prediction: a prompt token costs less than a decoded token. The cost model (`lib.costmodel`, on
# chapter 0's ceilings) says where in that range this machine lands. It runs the model's matrices at `T` rows at the
# rate `F(T)` chapter 0 measured, a decode step's at one row, and prices attention and issuing the pass beside them.
#
# <details><summary>Price, tolerance, pace</summary>
#
# A [price](glossary.md#price) is the cost model's prediction at chapter 0's fastest calls. A measurement agrees
# with it within a [tolerance](glossary.md#tolerance), a factor `lib.claims` sets. The machine's
# [pace](glossary.md#pace), checked before and after the runs, says whether it still ran at chapter 0's speed.
# </details>

# %%
pre_cost = roofline.prefill_cost(shape, T, logits="last")
dec_cost = roofline.decode_cost(shape, batch=1, context=C)
model = costmodel.CostModel(machine.load_ceilings(device, quick=quick), model_name, shape, dtype, torch.get_num_threads())
pre_pred, dec_pred = model.prefill(T), model.decode(C)
runs_table = pd.DataFrame({
    "prompt_tokens": T, "run": range(1, runs + 1),
    "prefill_ms": [(t.prefill_done - t.request_time) * 1e3 for t in traces],
    "choose_first_token_ms": [(t.token_times[0] - t.prefill_done) * 1e3 for t in traces],
    "decode_step_ms": [np.nan if r.median_gap is None else r.median_gap * 1e3 for r in per_run]})
runs_table["prompt_token_cheaper_x"] = runs_table.decode_step_ms / (runs_table.prefill_ms / T)
results.table(runs_table, "phase_times")
per_phase = timing.median_range(runs_table, "prompt_tokens", ["prefill_ms", "decode_step_ms", "prompt_token_cheaper_x"])
ph = per_phase.iloc[0]
costs = pd.DataFrame([
    {"phase": "prefill", "tokens": T, "gflop": pre_cost.flops / 1e9, "mb_moved": pre_cost.bytes / 1e6,
     "intensity_flop_per_byte": pre_cost.intensity, "measured_ms": ph.prefill_ms, "measured_ms_low": ph.prefill_ms_low,
     "measured_ms_high": ph.prefill_ms_high, "ms_per_token": ph.prefill_ms / T, "predicted_ms": pre_pred.best * 1e3},
    {"phase": "decode step", "tokens": C, "gflop": dec_cost.flops / 1e9, "mb_moved": dec_cost.bytes / 1e6,
     "intensity_flop_per_byte": dec_cost.intensity, "measured_ms": ph.decode_step_ms,
     "measured_ms_low": ph.decode_step_ms_low, "measured_ms_high": ph.decode_step_ms_high,
     "ms_per_token": ph.decode_step_ms, "predicted_ms": dec_pred.best * 1e3}])
results.table(costs, "phase_costs")
display(prose.shown(costs.round(3)))
# every price above is made of chapter 0's ceilings, measured minutes earlier: the model's one-row matrices, timed
# before and after the runs as chapter 0 timed them, say whether the machine still ran at that speed
show(pacer.claim(register, results, "the runs"))

# %%
register.claim("prompt_token_cheaper", "A prompt token costs less than a decoded token by the ratio the cost "
               "model predicts from chapter 0's kernels.")
predicted_ratio = dec_pred.best / (pre_pred.best / T)
cheaper = Spread.in_row(ph, "prompt_token_cheaper_x") if np.isfinite(ph.prompt_token_cheaper_x) else None
verdict = register.record(
    "prompt_token_cheaper",
    None if cheaper is None else claims.within(cheaper, predicted_ratio, claims.PREDICTED_RATIO),
    predicted=f"{predicted_ratio:.1f}x (cost model)", measured=with_interval(cheaper, ".1f", "x") if cheaper else "",
    evidence=f"median decode step over prefill time per prompt token; {runs} runs, {lm.name}, {dtype}, {where}")
told = f"A decoded token cost **{cheaper.mid:.1f}x** as much as a prompt token" if cheaper else ""
lean = claims.leaning(cheaper, *claims.allowed(predicted_ratio, claims.PREDICTED_RATIO)) if cheaper else ""
priced = (f"The prefill took {prose.ms(ph.prefill_ms / 1e3)} against its price of {prose.ms(pre_pred.best)}; a decode "
          f"step (a run's median gap between two tokens) took {prose.ms(ph.decode_step_ms / 1e3)} against "
          f"{prose.ms(dec_pred.best)}")
show(claims.pick(
    verdict,
    held=f"{told}, as the cost model predicted ({predicted_ratio:.1f}x). A pass that only "
         f"read weights would give {T}x. Prefill's matrices run {T} rows at {f_prompt / 1e9:.0f} GFLOP/s, a decode "
         f"step's one row at {f_step / 1e9:.0f} GFLOP/s: the same weights, used {T} times per read in one phase and "
         "once in the other; and a decode step pays the issuing of a whole pass for its one token.",
    not_held=f"{told}, while the cost model predicted {predicted_ratio:.1f}x. {priced}.",
    unresolved=f"{told}, close to the {predicted_ratio:.1f}x the cost model predicted: too close to call. {priced}"
               + (f". The prefill ran {ph.prefill_ms / 1e3 / pre_pred.best:.2f}x its price and a decode step "
                  f"{ph.decode_step_ms / 1e3 / dec_pred.best:.2f}x, so the phase further from its price moves the "
                  "ratio." if abs(math.log(ph.prefill_ms / 1e3 / pre_pred.best) - math.log(ph.decode_step_ms / 1e3
                                                                                          / dec_pred.best)) > 0.1
                  else "; more runs would decide it."),
    not_measured=register.undecided("prompt_token_cheaper", "the answer had a single token, so there is no decode "
                                    "step to compare.")),
     how=None if cheaper is None else
     f"The {cheaper.mid:.1f}x is the median over runs, its 95 % interval {prose.span(cheaper.low, cheaper.high, '.1f', 'x')}; it counts "
     f"as predicted when all of that interval lies within the {claims.PREDICTED_RATIO:g}x tolerance for a ratio of the "
     f"{predicted_ratio:.1f}x" + (f" (here the median is {lean})" if verdict == claims.UNRESOLVED else "")
     + (f". {priced}; a" if verdict == claims.HELD else ". A") + " ratio holds when both phases are off their prices alike.")

# %% [markdown]
# **Takeaway: prefill pushes many tokens through each weight it reads and decode pushes one, so arithmetic
# predicts a prompt token to be cheaper than a decoded one**. The finding above says by how much on this machine.
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
# that a real client's TTFT includes. The objectives come from `lib.objectives`: one default per kind of device,
# unless you set your own at the top.

# %%
run_table = metrics.to_frame(per_run).rename(columns={"n_tokens": "output_tokens"})
run_table = run_table.rename(columns={c: f"{c}_ms" for c in ("ttft", "tpot", "worst_gap", "median_gap", "e2e")})
run_table[["ttft_ms", "tpot_ms", "worst_gap_ms", "median_gap_ms", "e2e_ms"]] *= 1e3
run_table.insert(0, "run", range(1, runs + 1))
run_table.insert(0, "prompt_tokens", T)
run_table["meets_objectives"] = [metrics.meets_slo(r, goals.ttft_s, goals.tpot_s, goals.worst_gap_s) for r in per_run]
results.table(run_table, "request_metrics")
over_runs = timing.median_range(run_table, "prompt_tokens", ["ttft_ms", "tpot_ms", "worst_gap_ms", "e2e_ms",
                                                               "prefill_share", "decode_share"]).iloc[0]
good = metrics.goodput(per_run, goals.ttft_s, goals.tpot_s, goals.worst_gap_s)
display(prose.shown((metrics.summarize(per_run) * 1e3).drop(columns="count").round(2).rename_axis("ms, over all runs")))

# %%
def ranged(name: str, fmt: str = ".0f") -> str:
    """A median over runs with its 95 % interval (``timing.median_range``), in ms."""
    return with_interval(Spread.in_row(over_runs, name), fmt, " ms",
                         bold=True)


missed = [name for name, value, goal in (("TTFT", run_table.ttft_ms, goals.ttft_ms),
                                         ("TPOT", run_table.tpot_ms, goals.tpot_ms),
                                         ("worst gap", run_table.worst_gap_ms, goals.worst_gap_ms))
          if (value > goal).any()]
kind = "a GPU" if device.type == "cuda" else "a CPU"
default_ttft_s, default_tpot_s = objectives.default_objectives(device)
source = (f"the defaults for {kind}" if goals.defaults == ("ttft", "tpot", "worst_gap") else
          f"yours; the defaults for {kind} are {default_ttft_s * 1e3:.0f} ms and {default_tpot_s * 1e3:.0f} ms")
worst = int(run_table.worst_gap_ms.idxmax())
longest = run_table.worst_gap_ms[worst]
worst_at = int(np.argmax(per_run[worst].gaps)) + 2 if per_run[worst].gaps else 1  # gap before this token (1-based)
near = run_table[run_table.worst_gap_ms > longest / 2]  # runs whose own worst gap comes within half of it
stands_out = run_table.worst_gap_ms / run_table.median_gap_ms  # each run's longest gap over its own median gap
line, tol = 2.0, claims.PREDICTED_TIME  # "a stall": twice the run's median gap; within the tolerance either way: too near
stalled, near_line = int((stands_out > line * tol).sum()), int(((stands_out >= line / tol) & (stands_out <= line * tol)).sum())
over_line = int((stands_out > line).sum())  # over twice the median gap, the glossary's line, beyond doubt or not
alone = len(near) == 1
others = run_table.worst_gap_ms.drop(worst)
ratios = prose.span(stands_out.min(), stands_out.max(), ".2f", "x")
others_near = "another run's worst gap" if len(near) == 2 else f"{len(near) - 1} other runs' worst gaps"
where_gap = (f"before token {worst_at} of {per_run[worst].n_tokens}; no run's longest gap came near twice its own median "
             f"gap (they lay at {ratios} of it), so the longest is the steps' own spread, not a stall"
             if stalled == near_line == 0 else
             f"before token {worst_at} of {per_run[worst].n_tokens}, {stands_out[worst]:.2f} times its run's median gap, "
             + (f"and no other run's worst gap came within half of it (the next longest, {others.max():.0f} ms). It "
                "stands alone: one run's slow spell such as an interruption by another program, not a cost of decode's "
                "steps" if alone and len(others) else
                "and it is the only run" if alone else
                f"and {others_near} came within half of it (the next longest, {others.max():.0f} ms). Each run's "
                f"longest gap lay at {ratios} its own median gap, and "
                + (f"in {over_line} of the {runs} runs more than twice it. " if over_line else
                   "in none of the runs more than twice it. ") + (f"No run's was clearly a stall, more than {line * tol:.1f} times its median gap" if not stalled
                          else f"In {stalled} of them it was clearly a stall, more than {line * tol:.1f} times its "
                               "median gap")
                + (f"; in {count(near_line, 'run')} it lay too near twice the median gap to call either way" if near_line else "")
                + (". So decode's steps meet a stall in most runs" if 2 * stalled > runs else
                   ". In most runs no gap stands out, so it is a slow spell of some runs, not a cost of every step"
                   if 2 * (runs - stalled - near_line) > runs else
                   f". With {near_line} of the {runs} runs too near to call, whether most runs meet a stall is open")))
gap_how = (f"The glossary's line for a stall is twice a run's median gap, held with the same {tol:g}x tolerance as "
           f"every prediction here: a run's longest gap counts as a stall beyond {line * tol:.1f} times its median gap, "
           f"as no stall under {line / tol:.1f} times, and between the two it is too near to call. The runs' ratios: "
           + ", ".join(f"{x:.2f}x" for x in stands_out) + ".")


# %% [markdown]
# The medians over runs, the longest gap between two tokens, and how the runs fared against the objectives:

# %%
show(
    f"Medians over {count(runs, 'run')}: TTFT {ranged('ttft_ms')}, TPOT {ranged('tpot_ms', '.1f')}, worst gap "
    f"{ranged('worst_gap_ms', '.1f')}, end-to-end {ranged('e2e_ms')}. "
    + ("The worst gap's range leaves out the runs with the longest gaps: the" if over_runs.worst_gap_ms_high < run_table.worst_gap_ms.max()
       else "The")
    + f" longest single gap of all, in run {run_table.run[worst]}, was **{longest:.0f} ms**, {where_gap}.",
    how=None if stalled == near_line == 0 else gap_how)
show(
    f"Objectives ({source}): TTFT at most {goals.ttft_ms:.0f} ms, TPOT at most {goals.tpot_ms:.0f} ms, worst gap "
    f"at most {goals.worst_gap_ms:.0f} ms. They are fixed budgets, typed, not measured here: they do not follow this "
    "machine's speed, so whether a run meets them says as much about the machine as about the request. At most, a "
    f"run used {run_table.ttft_ms.max() / goals.ttft_ms:.0%} of the TTFT budget, "
    f"{run_table.tpot_ms.max() / goals.tpot_ms:.0%} of the TPOT budget and "
    f"{run_table.worst_gap_ms.max() / goals.worst_gap_ms:.0%} of the worst-gap budget. "
    f"Goodput: **{good:.0%}** of these {count(runs, 'request')} met all three"
    + (f"; {count(int((~run_table.meets_objectives).sum()), 'run')} missed ("
       + ("run " if (~run_table.meets_objectives).sum() == 1 else "runs ")
       + ", ".join(str(r) for r in run_table.run[~run_table.meets_objectives]) + "), on "
       f"{' and '.join([', '.join(missed[:-1]), missed[-1]] if len(missed) > 1 else missed)}." if missed else "."))

# %%
register.claim("short_question_is_a_decode_job", "A one-line question with a paragraph of answer spends most of "
               "its time decoding.")
predicted_share = (m.n_tokens - 1) * dec_pred.best / ((m.n_tokens - 1) * dec_pred.best + pre_pred.best)
share = Spread.in_row(over_runs, "decode_share")
verdict = register.record("short_question_is_a_decode_job", claims.at_least(share, 0.5),
                          predicted=f"above 50 %, cost model {predicted_share:.0%}",
                          measured=with_interval(share, ".0%"),
                          evidence=f"{prose.tokens(T)} in, {prose.tokens(m.n_tokens)} out, {count(runs, 'run')}")
spent = with_interval(share, ".0%", bold=True)
show(claims.pick(
    verdict,
    held=f"A run spent a median {spent} of its time in decode and {over_runs.prefill_share:.0%} in prefill: "
         f"{count(m.n_tokens - 1, 'decode step')} outweigh one prefill of {prose.tokens(T)}; the cost model gives "
         f"decode {predicted_share:.0%}.",
    not_held=f"A run spent a median of only {spent} of its time in decode, where the cost model gives "
             f"{predicted_share:.0%}: with {count(m.n_tokens, 'output token')} against a {T}-token prompt, this "
             "request is a prefill job here.",
    unresolved=f"A run spent a median {spent} of its time in decode, its interval reaching both sides of half, with "
               f"the median {claims.leaning(share, 0.5)}; the cost model gives decode {predicted_share:.0%}."))

# %% [markdown]
# **Takeaway: report TTFT, TPOT and the worst gap together, with the prompt and output lengths; one
# "latency" number describes neither phase.**
#
# ## Same TPOT, a different stall
#
# TPOT is a mean, and a mean hides a stall. Take this run's median gap `g` and build two streams of the
# same length from it. In the first, every token is a little late. In the second, the tokens are on
# time except one, which waits ten times as long, as it would behind another request's prefill (chapter
# 5). Both have the same TPOT by construction; the arithmetic is checked, not measured.

# %%
g = m.median_gap if m.median_gap else m.ttft
n = max(m.n_tokens, 12)
stall = 10 * g
steady = np.full(n - 1, g + (stall - g) / (n - 1))           # every gap a little late
stalled = np.full(n - 1, g); stalled[(n - 1) // 2] = stall    # one long gap
examples = {"every token a little late": steady, "one token very late": stalled}
example_metrics = {k: metrics.request_metrics(0.0, m.ttft + np.r_[0.0, np.cumsum(v)]) for k, v in examples.items()}
same_tpot = pd.DataFrame([{"stream": k, "tpot_ms": r.tpot * 1e3, "median_gap_ms": r.median_gap * 1e3,
                           "worst_gap_ms": r.worst_gap * 1e3,
                           "meets_worst_gap_objective": r.worst_gap <= goals.worst_gap_s}
                          for k, r in example_metrics.items()])
results.table(same_tpot, "same_tpot_different_stall")
a, b = example_metrics.values()
claims.invariant(abs(a.tpot - b.tpot) < 1e-9 * a.tpot and b.worst_gap > 2 * a.worst_gap,
                 "the two streams are built with equal TPOT and one long gap")
prose.shown(same_tpot.round(1))

# %%
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

# %% [markdown]
# **Takeaway: TPOT is a mean and hides a stall; the worst gap (or a high percentile of ITL) shows it.**
#
# ## What TTFT adds to the prefill: a choice, or a decode step?
#
# A common shorthand, and the defect a source chapter records in its own first draft, says TTFT is the
# prefill time plus one decode step. But the prefill's last position already is the first token's
# distribution: TTFT is the prefill plus choosing (here: an `argmax` and reading the id back). Adding a
# decode step counts a pass that produces the *second* token. What choosing reads, at chapter 0's rates:

# %%
logit_bytes = shape.vocab * torch_dtype.itemsize
read_gb_s = ceilings.stream_bandwidth(dtype, torch.get_num_threads()) / 1e9
n_ops, us_alone = ceilings.operations(model_name, dtype, torch.get_num_threads())
hollow_step = ceilings.dispatch(model_name, dtype, torch.get_num_threads(), "decode").best  # between weight streams
show(f"The argmax reads one row of **{shape.vocab:,} logits** ({logit_bytes / 1e3:,.0f} KB in {dtype}): at chapter 0's "
     f"streaming read of {read_gb_s:.1f} GB/s that is **{logit_bytes / (read_gb_s * 1e9) * 1e6:.1f} us**. Chapter 0 "
     f"measured issuing one operation of this model two ways: {us_alone:.1f} us when nothing else runs, and "
     f"{hollow_step / n_ops * 1e6:.1f} us inside a pass, between its weight streams (its hollowed decode step, "
     f"{prose.ms(hollow_step)} over {n_ops:,} operations), the setting the cost model prices a pass's issuing in. "
     "Choosing comes right after the prefill has streamed every weight, so the second applies, to the argmax and to "
     "reading the chosen id back to the host.")

# %% [markdown] tags=["predict"]
# **Predict first.** Choosing is that `argmax` and one read-back of the chosen id; a decode step, a whole pass over
# every weight, took the *measured (ms)* printed for it in the table of the two phases above. What fraction of a
# decode step does choosing the first token cost? And does a full pass over the prompt without any cache choose the
# same first token as the cached prefill?

# %% [markdown]
# <details><summary>The book's prediction (open it once you have written yours)</summary>
#
# Choosing should cost well under a tenth of a decode step, and the uncached pass should
# choose the same first token.
#
# </details>

# %%
choice_ms = runs_table.choose_first_token_ms
shorthand_ms = runs_table.prefill_ms + runs_table.decode_step_ms
with torch.inference_mode():
    uncached_first = phases.greedy_uncached(lm, prompt_ids, 1)[0]
overstated = np.median(shorthand_ms) / over_runs.ttft_ms - 1
register.claim("choosing_is_cheap", "Choosing the first token costs under a tenth of a decode step.")
verdict = register.record("choosing_is_cheap", claims.at_most(Spread.of(choice_ms), 0.1 * ph.decode_step_ms)
                          if np.isfinite(ph.decode_step_ms) else None,
                          predicted=f"under {0.1 * ph.decode_step_ms:.2f} ms", measured=f"{choice_ms.median():.2f} ms",
                          evidence=f"{count(runs, 'run')}, {where}")
chose = (f"Choosing took a median {with_interval(Spread.of(choice_ms), '.2f', ' ms', bold=True)}, against a decode "
         f"step of {ph.decode_step_ms:.1f} ms (a run's median gap between two tokens; TPOT, "
         f"{over_runs.tpot_ms:.1f} ms, is the mean of every gap)")
show(claims.pick(
    verdict,
    held=f"{chose}. The shorthand would report a TTFT of {np.median(shorthand_ms):.0f} ms instead of the measured "
         f"{over_runs.ttft_ms:.0f} ms, {overstated:.0%} too much.",
    not_held=f"{chose}: on this device reading one id back is not negligible beside a step.",
    unresolved=f"{chose}: too close to a tenth of a step to call, the median "
               f"{claims.leaning(Spread.of(choice_ms), 0.0, 0.1 * ph.decode_step_ms)}; more runs would decide it.",
    not_measured=register.undecided("choosing_is_cheap", "the answer had a single token, so there is no decode step "
                                    "to compare.")),
     how=None if verdict == claims.NOT_MEASURED else
     f"Choosing counts as cheap when the whole 95 % interval of its median over runs lies under a tenth of the "
     f"decode step, {0.1 * ph.decode_step_ms:.2f} ms; {'all of it does' if verdict == claims.HELD else 'none of it does' if verdict == claims.NOT_HELD else 'it lies partly on each side'}.")
logits_row = torch.randn(1, 1, shape.vocab, dtype=torch_dtype, device=lm.device)  # a row of the model's logits
argmax_s = (torch.utils.benchmark.Timer("int(row.argmax(dim=-1))", globals={"row": logits_row})
            .blocked_autorange(min_run_time=0.2).median)  # seconds a call, with its read-back
show(f"One layer down, the argmax and its read-back alone, on a row of {shape.vocab:,} logits, took a median "
     f"**{argmax_s * 1e6:.0f} us** here: {logit_bytes / argmax_s / 1e9:.1f} GB/s, "
     f"{'well below' if logit_bytes / argmax_s < read_gb_s * 1e9 / 2 else 'near'} the streaming read, so "
     f"{'its kernel, not the memory, sets its pace' if logit_bytes / argmax_s < read_gb_s * 1e9 / 2 else 'the memory sets its pace'}"
     + (f". The rest of choosing's {choice_ms.median():.2f} ms is what the first call after a prefill pays beyond it, "
        "which this chapter does not take apart." if choice_ms.median() > 2 * argmax_s * 1e3 else "."))

# %%
register.claim("first_token_from_prefill", "The cached prefill's last position chooses the token a full uncached "
               "pass chooses.")
first = trace.token_ids[0]
register.record("first_token_from_prefill", claims.HELD if uncached_first == first else claims.NOT_HELD,
                predicted=f"id {first}", measured=f"id {uncached_first}", evidence=f"phases.greedy_uncached, {dtype}")
show(f"Both choose id {first} ({tokenizer.decode([first])!r})." if uncached_first == first else
     f"The uncached pass chose id {uncached_first}, the cached prefill {first}: in {dtype} rounding differs between "
     "the two paths enough to change a close choice.")

# %% [markdown]
# **Takeaway: the first token comes out of the prefill; a decode step is the cost of every token after it**.
#
# ## What these numbers do not show
#
# * **One small model, batch size 1**. A 135M-parameter model is far from a served 8B or 70B model; which
#   resource limits each phase can change with size (chapters 3 and 6).
# * **No client, queue or network.** TTFT here starts at the prefill call. A real TTFT adds
#   tokenisation, queueing behind other requests and delivery.
# * **One short prompt.** Prefill's share of a request grows with the prompt and shrinks with the answer
#   (chapter 4); a long prefill in a shared server stalls other streams (chapter 5).
# * **Greedy decoding** of one question. Timings do not depend on which tokens are chosen, but nothing here
#   judges the answer's quality.
#
# ## Takeaways
#
# * A request is two jobs: a prefill that reads the whole prompt in one pass and yields the first token,
#   then a decode loop that yields one token per pass.
# * Prefill reuses each weight it reads across every prompt position; decode reads every weight for one token.
# * TTFT is what the prefill costs; TPOT is what a decode step costs; the worst gap is what a stall costs.
# * Goodput counts the requests that met every objective; it is the number an operator should watch, and it
#   means nothing without the objectives stated beside it.
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
# 4. With a TPOT objective set, how is a request that produced a single token judged?
#
# <details><summary>Answer</summary>
#
# It has no TPOT and no gaps, so the book judges it on TTFT alone: it meets the decode objectives
# vacuously (`lib.metrics.goodput` documents and tests this choice).
# </details>
#
# ## Try it
#
# * Ask for a long answer: end `question` with "Answer in five paragraphs." and set `max_new_tokens = 400`.
#   How do the phase shares move?

# %% jupyter={"source_hidden": true} tags=["answer"]
_longer = 4 * m.n_tokens  # an answer four times this one
_step = model.decode(T + _longer // 2).best  # a step half-way through it
_share = (_longer - 1) * _step / ((_longer - 1) * _step + pre_pred.best)
_stopped = (f"This answer ended by itself after {prose.tokens(m.n_tokens)}, under the {max_new_tokens} allowed: "
            "raising `max_new_tokens` alone would change nothing, which is why the question must ask for more. "
            if m.n_tokens < max_new_tokens else
            f"This answer was cut off at the {max_new_tokens} tokens allowed; the new limit lets it run on. ")
display(Markdown(
    f"<details><summary>What to expect</summary>\n\n{_stopped}The prefill is paid once, so decode's share grows "
    f"toward the whole request: for an answer of {prose.tokens(_longer)} the cost model gives decode {_share:.0%}, "
    f"against {predicted_share:.0%} for this one, and a step half-way through it is priced at {prose.ms(_step)}, "
    f"against {prose.ms(dec_pred.best)} here, as its cache grows. TTFT barely moves; the share that "
    "`short_question_is_a_decode_job` reports rises.\n</details>"))

# %% [markdown]
# * Paste a long paragraph into `question`: how does TTFT grow with the prompt, and does TPOT change?

# %% jupyter={"source_hidden": true} tags=["answer"]
_long = 4 * T  # a prompt four times this one
_pre, _step = model.prefill(_long).best, model.decode(_long + m.n_tokens // 2).best
_f_long = model.ceilings.matrix_rate(model_name, dtype, model.threads, _long)
_less = _pre / pre_pred.best < 0.8 * _long / T
display(Markdown(
    f"<details><summary>What to expect</summary>\n\nTTFT grows with the prompt, "
    + ("but less than in proportion" if _less else "about in proportion")
    + f": the cost model prices a prefill of {prose.tokens(_long)} at {prose.ms(_pre)}, {_pre / pre_pred.best:.1f}x "
    f"the {prose.ms(pre_pred.best)} of these {prose.tokens(T)}, "
    + (f"because the matrices run faster with more rows (F({_long}) = {_f_long / 1e9:.0f} GFLOP/s, F({T}) = "
       f"{f_prompt / 1e9:.0f})" if _less else
       f"because the matrices already run near their fastest rate at {T} rows (F({_long}) = {_f_long / 1e9:.0f} "
       f"GFLOP/s, F({T}) = {f_prompt / 1e9:.0f})")
    + f". A decode step after it is priced at {prose.ms(_step)}, against {prose.ms(dec_pred.best)} here: "
    + ("TPOT barely changes, since every step still reads the same weights and only attention over the longer "
       "cache, and its copy, grow." if _step < 1.25 * dec_pred.best else
       "TPOT grows too, since attention over the longer cache, and its copy, are a large part of a step here.")
    + "\n</details>"))

# %% [markdown]
# * Run with `dtype = "bf16"`: which phase speeds up, and by how much? Does `first_token_from_prefill` still hold?

# %% jupyter={"source_hidden": true} tags=["answer"]
_other = "bf16" if dtype != "bf16" else "fp32"  # a run in bf16 already: the other way round
if _other in model.ceilings.dtypes():
    _alt = costmodel.CostModel(model.ceilings, model_name, shape.with_dtype(_other), _other, model.threads)
    _pre_x, _step_x = pre_pred.best / _alt.prefill(T).best, dec_pred.best / _alt.decode(C).best
    _rate = {d: model.ceilings.weight_rate(model_name, d, model.threads) / 1e9 for d in (dtype, _other)}
    _f = {d: model.ceilings.matrix_rate(model_name, d, model.threads, T) / 1e9 for d in (dtype, _other)}
    _bytes = shape.with_dtype(_other).bytes_per_param / shape.bytes_per_param
    _issue = dec_pred.term("dispatch").best / _alt.decode(C).term("dispatch").best
    _speed = (f"The cost model, on chapter 0's {_other} ceilings, makes the prefill **{_pre_x:.2f}x** as fast as in "
              f"{dtype} and a decode step **{_step_x:.2f}x** as fast. The prefill's matrices run at F({T}) = "
              f"{_f[_other]:.0f} GFLOP/s in {_other} against {_f[dtype]:.0f} in {dtype}; a decode step reads "
              f"{_bytes:g} times the weight bytes, {'but' if _rate[_other] < _rate[dtype] else 'and'} chapter 0's "
              f"matrix-vector products streamed {_other} at {_rate[_other]:.1f} GB/s against {_rate[dtype]:.1f}, so its "
              f"weights' read goes {_rate[_other] / _rate[dtype] / _bytes:.2f}x as fast"
              + (f", and issuing the step's operations (its dispatch) is priced {_issue:.2f}x as fast, which is where "
                 f"the step's change comes from" if abs(_issue - 1) > abs(_rate[_other] / _rate[dtype] / _bytes - 1)
                 else "") + ". So "
              + ("the prefill" if _pre_x > _step_x else "the decode step") + " gains more. ")
else:
    _speed = f"Chapter 0 did not measure {_other} here: run it with that dtype first, since this chapter prices nothing without it. "
display(Markdown(
    f"<details><summary>What to expect</summary>\n\n{_speed}`first_token_from_prefill` should still hold unless the "
    "first token's two best logits are closer than bf16's rounding (8 significant bits, two to three decimal "
    "digits): then the cached and uncached passes may choose differently, the claim says so, and the answer's text "
    "may change from some token on.\n</details>"))

# %% [markdown]
# * Lower `tpot_slo_ms` step by step: below what value does goodput start to fall? What TPOT does your machine
#   sustain?

# %% jupyter={"source_hidden": true} tags=["answer"]
_follows = worst_gap_slo_ms is None  # the worst-gap objective is then WORST_GAP_FACTOR times the TPOT one
_by_tpot = run_table.tpot_ms.max()
_by_gap = run_table.worst_gap_ms.max() / objectives.WORST_GAP_FACTOR if _follows else 0.0
_need = np.ceil(max(_by_tpot, _by_gap) * 10) / 10  # the lowest TPOT objective (to 0.1 ms) every run meets
_others = int((~(run_table.ttft_ms <= goals.ttft_ms)
               | (False if _follows else run_table.worst_gap_ms > goals.worst_gap_ms)).sum())
_text = ("This answer had a single token, so it has no TPOT: ask for a longer answer first." if not np.isfinite(_by_tpot)
         else
         (f"At these objectives goodput is already {good:.0%}. " if good < 1 else "")
         + (f"{count(_others, 'run')} miss{'es' * (_others == 1)} the other objectives whatever `tpot_slo_ms` is, so "
            "goodput cannot reach 100 per cent here. " if _others else
            (f"Goodput is 100 per cent while `tpot_slo_ms` is at least {_need:.1f} ms (loosen it to that first), and "
             "drops once it is set lower" if good < 1 else
             f"Goodput stays at 100 per cent while `tpot_slo_ms` is at least {_need:.1f} ms, and drops once it is set "
             "lower"))
         + ("" if _others else
            (f": first on the worst gap, not on TPOT, since the worst-gap objective follows at "
             f"{objectives.WORST_GAP_FACTOR:g} times the TPOT one and run {run_table.run[run_table.worst_gap_ms.idxmax()]}'s "
             f"longest gap was {run_table.worst_gap_ms.max():.0f} ms (set `worst_gap_slo_ms` high to see TPOT alone)"
             if _by_gap > _by_tpot else "") + ". ")
         + f"What this machine sustains is its TPOT: a median of {over_runs.tpot_ms:.1f} ms over {count(runs, 'run')}, "
         f"from {run_table.tpot_ms.min():.1f} ms in the fastest run to {_by_tpot:.1f} ms in the slowest; an objective "
         f"under {run_table.tpot_ms.min():.1f} ms is missed by every run.")
display(Markdown(f"<details><summary>What to expect</summary>\n\n{_text}\n</details>"))

# %%
job = {claims.HELD: "paragraph of answer is a decode job.", claims.NOT_HELD: "short answer is a prefill job here.",
       claims.UNRESOLVED: "short answer splits its time about evenly between the phases here."}
cheaper_outcome = {claims.HELD: f"as the cost model predicted ({predicted_ratio:.0f}x)",
                   claims.NOT_HELD: f"where the cost model predicted {predicted_ratio:.0f}x",
                   claims.UNRESOLVED: f"close to the cost model's {predicted_ratio:.0f}x, too close to call"}


def plain(name: str, fmt: str = ",.0f") -> str:
    """A median over runs, bold, with its 95 % interval in parentheses and no words about it: for the opening."""
    v = Spread.in_row(over_runs, name)
    span = prose.span(v.low, v.high, fmt)
    return f"**{v.mid:{fmt}} ms**" + (f" ({span})" if "–" in span else "")


_gap_told = (f"A run's longest gap was {run_table.worst_gap_ms.median():.0f} ms at the median, "
             f"{longest:.0f} ms at most (run {run_table.run[worst]}, token {worst_at}"
             + (f", over the {goals.worst_gap_ms:.0f} ms objective" if longest > goals.worst_gap_ms else "")
             + ("; one run's slow spell). " if alone and runs > 1 else "). "))
_why = (f"Prefill pushes all {T} tokens through each weight it reads (chapter 0's matrices ran "
        f"{model.ceilings.matrix_rate(model_name, dtype, model.threads, T) / 1e9:.0f} GFLOP/s at {T} rows); each decode "
        f"step reads every weight for one token (at one row, "
        f"{model.ceilings.matrix_rate(model_name, dtype, model.threads, 1) / 1e9:.0f} GFLOP/s) and pays for issuing a "
        "whole pass. ")
_told = (
    f"On this machine ({prose.machine(device, dtype)}), {lm.name} answered a {T}-token question with "
    f"{prose.tokens(m.n_tokens)}. Over {count(runs, 'run')}, the first token typically "
    f"came after {plain('ttft_ms')}, then one every {plain('tpot_ms', '.1f')}; the whole answer took "
    f"{plain('e2e_ms')}. " + _gap_told
    + (f"A decoded token cost **{cheaper.mid:.0f}x** as much as a prompt token, "
       f"{cheaper_outcome.get(register.verdict('prompt_token_cheaper'), 'not measured')}. " + _why if cheaper else "")
    + f"So a run spent **{over_runs.decode_share:.0%}** of its time decoding: a short question with a "
    + job.get(register.verdict("short_question_is_a_decode_job"), "single token has no decode phase."))
opening.write(_told, _told.replace(_gap_told, ""),  # the shorter tellings leave the longest gap to the body,
              _told.replace(_gap_told, "").replace(_why, ""),  # and then why a decoded token costs more
              after=pacer.note())  # the pace note, when the machine's speed moved

# %% [markdown]
# ## Key terms
#
# [Prefill](glossary.md#prefill), [Decode](glossary.md#decode), [KV cache](glossary.md#kv-cache), [TTFT, ITL, TPOT, worst gap, goodput](glossary.md#ttft-itl-tpot-worst-gap-goodput), [Price](glossary.md#price), [Tolerance](glossary.md#tolerance), [Pace](glossary.md#pace). Each links to the book's glossary, which says how the book measures it.

# %% [markdown]
# ## Evidence in this chapter
#
# Each claim this chapter made, what was predicted, what this run measured, the verdict, and the data it came
# from. A verdict is decided on the 95 % interval of the median over runs (`lib.claims` says how). A claim *held*
# when all of the interval agrees with the prediction, *did not hold* when none of it does, and is *not resolved*
# when the interval crosses the line. `data/01_two_phases/claims.csv` holds the same rows, and the book's status page counts them.

# %%
results.table(register.frame(), "claims")
display(prose.table(register.evidence()))
print(register.summary())
results.finish()  # the run is whole: its tables and figures replace the last run's together
