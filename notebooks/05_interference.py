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
# # 5. Interference: one request's prefill stalls another's stream
#
# A server that runs one request at a time has no interference. As soon as it interleaves two, the phases
# collide: a stream that was receiving a token every few tens of milliseconds must wait while the machine
# runs someone else's long prefill. **Chunked prefill** splits that prefill into pieces and runs one piece
# between consecutive decode steps of the stream, bounding the stall at the price of the newcomer's time to
# first token.
#
# The experiment is the smallest shared server there is (`lib.schedule.interference`). Stream A is decoding;
# after A's token number `arrival_step` (the tenth by default), request B arrives with a `b_prompt_len`-token
# prompt (1,000 by default). Every iteration then runs one A decode step followed by one B prefill chunk, until
# B's first token is chosen. Every token's host time is recorded for both. Every conclusion is a named claim
# decided by this run's data (`lib.claims`), saved in `claims.csv`.

# %% [markdown]
# **After this chapter you can**
#
# * Predict, from chapter 2's prices, how long one user's long prompt stalls another user's stream.
# * Measure the stall as the worst gap between tokens, and say what the mean gap shows of it.
# * Choose a chunk size for chunked prefill from the trade-off between the stall and the long prompt's TTFT, and say where chunking stops paying off.
# * Say what several streams decoding at once do to each other's steps.

# %% tags=["parameters"]
quick = False
device = "auto"
dtype = "fp32"
model_name = "gpt2-small"
chunk_sizes = [1000, 512, 256, 128, 64, 32, 16, 8]   # b_prompt_len (here 1,000) is unchunked
runs = 3                        # runs of every chunk size (each a whole interference run: few, so intervals are ranges)
b_prompt_len = 1000
a_prompt_len = 16
a_tokens = 40
arrival_step = 10
stream_counts = [1, 4]          # the extension: several A streams decoding as one batch
stream_chunks = [1000, 128]
stops_helping = 0.15            # a smaller chunk "pays off" if it cuts A's worst gap by more than this fraction
hides = 3.0                     # a worst gap this many times TPOT: a stall the mean understates

# %%
from lib import params
from lib.machine import MODELS

P = params.check(globals(), {
    "device": params.device(),
    "dtype": params.dtype(),
    "model_name": params.choice([m for m in MODELS if m != "smollm2-135m"], quick="tiny-gpt2"),
    "chunk_sizes": params.int_list(min=1, max=1024, quick=[256, 64, 16, 8, 4], min_items=2),
    "runs": params.integer(min=1, max=10, quick=2),
    "b_prompt_len": params.integer(min=2, max=1000, quick=256),
    "a_prompt_len": params.integer(min=1, max=512),
    "a_tokens": params.integer(min=2, max=256, quick=16),
    "arrival_step": params.integer(min=1, max=255, quick=4),
    "stream_counts": params.int_list(min=1, max=64, quick=[1, 2], ascending=True),
    "stream_chunks": params.int_list(min=1, max=1024, quick=[256, 64]),
    "stops_helping": params.number(above=0, max=1),
    "hides": params.number(above=1, max=100),
}, quick=quick, chapter="05_interference")
if arrival_step >= a_tokens:
    raise ValueError(f"B must arrive while A is still decoding: arrival_step ({arrival_step}) must be less than "
                     f"a_tokens ({a_tokens})")

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from IPython.display import Markdown, display

from lib import claims, costmodel, machine, phases, prose, schedule, sweeps, timing
from lib.claims import Spread
from lib.device import describe_environment, dtype_name, resolve_dtype
from lib.models import load_model
from lib.progress import progress
from lib.prose import show, tokens
from lib.results import Results, load_reference, load_table
from lib.shapes import ModelShape

# %% [markdown]
# The model, the chunk sizes run and the cost model, then two small helpers for the sentences below:

# %%
torch_dtype = resolve_dtype(dtype, device)
threads = torch.get_num_threads()  # the count chapter 2's rows carry for this device
sizes = sorted({min(c, b_prompt_len) for c in chunk_sizes} | {b_prompt_len}, reverse=True)  # unchunked first
if sizes != sorted(set(chunk_sizes), reverse=True):
    print(f"chunk sizes run: {sizes} (a chunk of b_prompt_len = {b_prompt_len} tokens or more is unchunked, "
          f"and the unchunked run is always included)")
lm = load_model(model_name, device, torch_dtype)
phases.check_fits(lm, a_prompt_len, a_tokens)  # both requests checked against the position table before any work
phases.check_fits(lm, b_prompt_len, 1)
shape = ModelShape.from_config(lm.config, name=model_name).with_dtype(dtype)
pacer = machine.Pacer(machine.load_ceilings(device, quick=quick), model_name, dtype, threads, device)
pacer.check("before the experiment")
cost = costmodel.CostModel(pacer.ceilings, model_name, shape, dtype, threads)
results = Results("05_interference", params=P, quick=quick, dtype=torch_dtype, model=model_name)
register = claims.Claims()
pd.Series(describe_environment(device, torch_dtype, model_name)).to_frame("this run")

# %% [markdown]
# ## What this run found

# %%
opening = prose.Opening()


# %%
def cut_words(cut: float) -> str:
    """What a step down did to A's worst gap, in words."""
    return f"a cut of only {cut:.1%} in A's worst gap" if cut >= 0 else f"a worst gap {-cut:.1%} longer for A"


PAID_RULE = f" (each smaller size down to it cut the worst gap by more than {stops_helping:.0%})"  # what "paid off" means


def paid_off(size: int, costs: bool = False) -> str:
    """Where chunking paid off on A's worst gap, in words: down to `size` tokens, or nowhere when `size` is
    unchunked; with `costs`, what that size cost A's median gap and B's TTFT against unchunked (from `summary`)."""
    if size == b_prompt_len:
        return "no chunk size cut A's worst gap enough to pay"
    words = f"chunking kept cutting A's worst gap down to a chunk size of **{size} tokens**{PAID_RULE}"
    if costs:
        at, un = (summary.set_index("chunk_tokens").loc[c] for c in (size, b_prompt_len))
        words = words[:-1] + (f"; there A's median gap was {at.a_median_gap_ms:,.0f} ms against "
                              f"{un.a_median_gap_ms:,.0f} ms unchunked, and B's TTFT {at.b_ttft_ms:,.0f} ms against "
                              f"{un.b_ttft_ms:,.0f} ms)")
    return words


# %% [markdown]
# ## The prediction, from the cost model chapter 2 tested
#
# Chapter 2 timed one prefill pass of `T` tokens on this machine and set each beside the cost model
# (`lib.costmodel`). A chunk of `c` tokens is such a pass, except that it also attends to the `p` tokens of B's
# prompt already in the cache, and appends to that cache (a growing cache copies its `p` positions): the cost
# model prices a chunk with both, `cost.prefill(c, past=p)`. Write `a` for one stream's decode step (measured
# below) and `k` for the A steps that run while B is being prefilled: one before each chunk, as long as A still
# has tokens to produce. Then:
#
# * A's worst gap = `a` + the costliest chunk that A waits behind;
# * B's TTFT = `k x a` + the sum of every chunk's cost.
#
# Shrinking the chunk shortens A's stall only while a shorter pass is a quicker pass. Chapter 2 measured how far
# a pass's cost stays flat as the prompt shrinks (its floor, where the machine has one): below it, a smaller chunk
# buys A little and costs B one more floor per chunk. The **predicted best chunk size** is found by going down the
# sizes from the whole prompt. Each step down must cut the predicted worst gap by more than `stops_helping`; the
# first step that cuts less is where chunking stops paying off, and the size just above it is the best. A smaller
# size further down may cut more again, but the search stops at the first step that does not pay.

# %%
sweep2 = load_table("02_prefill_sweep", "prefill_sweep", quick=quick)
if sweep2 is None or "time_ms" not in sweep2.columns:
    raise FileNotFoundError(f"chapter 5 predicts from chapter 2's prefill sweep, which is missing or older than "
                            f"chapter 5: run `python -m lib.make.book {'--quick ' if quick else ''}02_prefill_sweep` first")
mine = (sweep2.dtype == dtype_name(torch_dtype)) & (sweep2.threads == threads)
section2 = sweep2[mine].dropna(subset=["time_ms"]).sort_values("prompt_tokens")
if section2.prompt_tokens.nunique() < 2:
    raise FileNotFoundError(f"chapter 2 has no {dtype_name(torch_dtype)} sweep with {threads} threads: run chapter 2 "
                            f"with dtypes=['{dtype_name(torch_dtype)}'] and {threads} threads first")
if b_prompt_len > section2.prompt_tokens.max():
    print(f"Chapter 2 measured passes up to {section2.prompt_tokens.max()} tokens: longer chunks are predicted in "
          f"proportion to their length.")
floor2 = load_table("02_prefill_sweep", "floor", quick=quick)
floor2 = floor2[(floor2.dtype == dtype_name(torch_dtype)) & (floor2.threads == threads)].iloc[0]
after_floor = section2.prompt_tokens[section2.prompt_tokens > floor2.flat_until_tokens]
pass_at = section2.set_index("prompt_tokens").time_ms
no_floor = floor2.flat_until_tokens == section2.prompt_tokens.min()  # flat only at its own first point: no floor
floor_reach = (f"its {after_floor.iloc[0]}-token pass already took "  # chapter 2's table, its words
               f"{pass_at[after_floor.iloc[0]] / floor2.floor_ms:.1f} times as long (more than {floor2.margin:.0%} more: "
               "by its rule, no floor)"
               if no_floor and len(after_floor) else
               f"its time stayed within {floor2.margin:.0%} of that up to {tokens(floor2.flat_until_tokens)}")
show(f"B's prompt is **{tokens(b_prompt_len)}**; the chunk sizes tried are {', '.join(map(str, chunk_sizes))}; a "
     f"smaller chunk pays off if it cuts A's worst gap by more than **{stops_helping:.0%}** (the parameter "
     "`stops_helping`). Chapter 2's passes (ms):")
prose.shown(section2[["prompt_tokens", "time_ms", "time_ms_low", "time_ms_high"]].set_index("prompt_tokens").T.round(1))

# %% [markdown] tags=["predict"]
# **Predict first.** Take one of A's decode steps as about chapter 2's 1-token pass, and a chunk of `c` tokens as
# about chapter 2's pass of `c` tokens (both in the table just above). Unchunked, about how many milliseconds is
# A's worst gap? And halving the chunk from `b_prompt_len` tokens down, where would you put the best chunk size:
# the last size before a step down first cuts that worst gap by the fraction just printed or less?


# %%
def pass_ms(tokens: int) -> float:
    """Chapter 2's pass of `tokens` tokens (ms): interpolated between its measured lengths on log-log axes,
    and in proportion to the length beyond the longest it measured."""
    t, ms = np.log(section2.prompt_tokens.to_numpy(float)), np.log(section2.time_ms.to_numpy(float))
    if tokens > section2.prompt_tokens.max():
        return float(np.exp(ms[-1]) * tokens / section2.prompt_tokens.max())
    return float(np.exp(np.interp(np.log(tokens), t, ms)))


def chunk_ms(start: int, end: int) -> float:
    """Predicted cost (ms) of B's chunk [start, end): the cost model's pass of that length after `start` cached
    tokens (their attention and the cache's copy included)."""
    return cost.prefill(end - start, past=start).best * 1e3


# %% [markdown]
# The book's own prediction refines both inputs. It times one stream's decode step alone, at the context B
# arrives at (the median over runs, with its range), and prices each chunk with the cost model, which adds the
# attention over the tokens already cached that a fresh pass of `c` tokens does not do.

# %%
context = a_prompt_len + arrival_step
a_steps = sweeps.decode_sweep(lm, [context], steps=10, runs=runs).assign(step_ms=lambda d: d.median_s * 1e3)
a_step = timing.median_range(a_steps, "context_tokens", ["step_ms"]).iloc[0]
a_step_ms = a_step.step_ms
print(f"One stream's decode step at context {context}: {a_step_ms:.1f} ms "
      f"({prose.span(a_step.step_ms_low, a_step.step_ms_high, '.1f', 'ms')} over {runs} runs). The cost model's "
      f"price for that step: {cost.decode(context + 5).best * 1e3:.1f} ms.")


# %%
def predict(chunk: int) -> dict:
    """The predicted worst gap, median gap and TTFT for one chunk size (ms)."""
    costs = [chunk_ms(s, e) for s, e in schedule.chunk_schedule(b_prompt_len, chunk)]
    a_left = a_tokens - arrival_step                 # A's tokens still to come when B arrives
    stalls = costs[:max(a_left - 1, 0)]               # chunks with an A step after them: A waits behind these
    gaps = [a_step_ms + c for c in stalls] + [a_step_ms] * (a_tokens - 1 - len(stalls))  # A's gaps, one a token
    return dict(chunk_tokens=chunk, chunks=len(costs), predicted_first_chunk_ms=costs[0],
                predicted_a_worst_gap_ms=a_step_ms + max(stalls, default=0.0),
                predicted_a_median_gap_ms=float(np.median(gaps)),
                predicted_b_ttft_ms=min(len(costs), a_left) * a_step_ms + sum(costs))


def stopping_point(chunks, gaps, threshold: float | None = None) -> tuple[int, int | None]:
    """(best, stop) down a list of chunk sizes, largest first: `stop` is the first size that cuts the worst
    gap by at most `threshold` (`stops_helping`) against the size before it, `best` that size before it.
    (the smallest size, None) when every step down paid off."""
    for bigger, size, g_bigger, g in zip(chunks, chunks[1:], gaps, gaps[1:]):
        if 1 - g / g_bigger <= (stops_helping if threshold is None else threshold):
            return int(bigger), int(size)
    return int(chunks[-1]), None


# %% [markdown]
# The prediction for every chunk size, and where chunking should stop paying off:

# %%
predicted = pd.DataFrame([predict(c) for c in sizes])
best_pred, stop_pred = stopping_point(predicted.chunk_tokens.tolist(), predicted.predicted_a_worst_gap_ms.tolist())
while stop_pred is None and predicted.chunk_tokens.min() > 1:  # add sizes until the prediction says where it stops
    predicted = pd.concat([predicted, pd.DataFrame([predict(predicted.chunk_tokens.min() // 2)])], ignore_index=True)
    best_pred, stop_pred = stopping_point(predicted.chunk_tokens.tolist(), predicted.predicted_a_worst_gap_ms.tolist())
added = sorted(set(predicted.chunk_tokens) - set(sizes), reverse=True)
sizes = predicted.chunk_tokens.tolist()
gap = predicted.predicted_a_worst_gap_ms
predicted["predicted_worst_gap_cut"] = 1 - gap / gap.shift(1)
if added:
    print(f"added chunk sizes {added}, so the sizes run lie on both sides of the predicted best size")
ROUNDING = 0.0005  # a cut this near `stops_helping` prints as the threshold itself (to 0.1%): on the line
alike = sorted({stopping_point(sizes, gap.tolist(), stops_helping + d)[0] for d in (ROUNDING, -ROUNDING)},
               reverse=True)  # the sizes the price predicts, a cut on the line read either way
on_line = next((int(c) for c, x in zip(sizes[1:], predicted.predicted_worst_gap_cut[1:])
                if abs(x - stops_helping) < ROUNDING), None) if len(alike) > 1 else None  # the deciding cut's size
alike = alike if on_line else [best_pred]
pred_words = (f"{alike[0]} or {alike[-1]} tokens alike" if on_line else tokens(best_pred))  # the prediction, said
prose.shown(predicted.round(3))

# %%
fresh_over_pass = [chunk_ms(0, min(c, b_prompt_len)) / pass_ms(min(c, b_prompt_len)) for c in sizes]
_smallest = min(sizes)
_last = schedule.chunk_schedule(b_prompt_len, _smallest)[-1]
last_over_first = chunk_ms(*_last) / chunk_ms(0, _last[1] - _last[0])
display(Markdown(
    f"Chapter 2 measured a 1-token pass at **{prose.span(floor2.floor_ms_low, floor2.floor_ms_high, '.1f', 'ms')}**; "
    f"{floor_reach}, and its time per token stopped "
    f"falling at {tokens(floor2.knee_tokens)}. With one stream's step at {a_step_ms:.1f} ms, the predicted worst gap "
    f"falls from {predicted.predicted_a_worst_gap_ms.iloc[0]:,.0f} ms unchunked to "
    f"{predicted.predicted_a_worst_gap_ms.min():,.0f} ms, and "
    + (f"the price cuts A's worst gap by {predicted.set_index('chunk_tokens').predicted_worst_gap_cut[on_line]:.1%} "
       f"at {on_line} tokens, on the {stops_helping:.0%} line, so it predicts **{pred_words}** as the best chunk size"
       if on_line else f"the **predicted best chunk size is {best_pred} tokens**")
    + (f": going down to {stop_pred} tokens would give "
       f"{cut_words(predicted.set_index('chunk_tokens').predicted_worst_gap_cut[stop_pred])}." if stop_pred else
       ": every step down still pays, to a single token.")
    + f" Against the estimate from chapter 2's passes: the cost model prices a first chunk (nothing cached yet) at "
      f"{prose.span(min(fresh_over_pass), max(fresh_over_pass), '.2f')}x chapter 2's measured pass of its length "
      f"over these sizes. With {_smallest}-token chunks, it prices the last chunk ("
    + (f"{tokens(_last[1] - _last[0])}, " if _last[1] - _last[0] != _smallest else "")
    + f"after {tokens(_last[0])} cached) at {last_over_first:.2f}x "
    + ("the first." if _last[1] - _last[0] == _smallest else "a first chunk of its length.")))

# %% [markdown]
# ## The experiment
#
# Every chunk size runs `runs` times, interleaved: every size once, then again. The interleaving keeps a slow
# spell of a shared machine from landing on one size only. Every result below is the median over runs with the
# lowest and highest run (`lib.timing.median_range`). Each of B's chunks is timed too.

# %%
display(prose.source(schedule.interference))

# %% [markdown]
# First a warm-up run: B's whole prompt in one pass, then in the smallest chunks. The first pass of a size maps
# its large tensors' memory afresh, every page of it faulting once, and a timed run should not pay for that alone
# (the page faults each run's prefill took are counted below). Then every chunk size runs `runs` times:

# %%
for c in (b_prompt_len, sizes[-1]):  # warm-up
    schedule.interference(lm, chunk=c, b_prompt_len=b_prompt_len, a_tokens=6, arrival_step=2)
traces, per_run, per_chunk = {}, [], []
for run in progress(range(1, runs + 1), desc="interference runs"):
    for c in sizes:
        r = traces[(c, run)] = schedule.interference(lm, chunk=c, b_prompt_len=b_prompt_len, a_prompt_len=a_prompt_len,
                                                     a_tokens=a_tokens, arrival_step=arrival_step, seed=run)
        a, b = r.a_metrics, r.b_metrics
        per_run.append(dict(chunk_tokens=c, run=run, chunks=len(r.chunks), a_worst_gap_ms=a.worst_gap * 1e3,
                            a_median_gap_ms=a.median_gap * 1e3, a_tpot_ms=a.tpot * 1e3, b_ttft_ms=b.ttft * 1e3,
                            b_faults=sum(s.faults for s in r.chunks)))
        per_chunk += [dict(chunk_tokens=c, run=run, chunk_index=i, start_token=s.start, tokens=s.end - s.start,
                           chunk_ms=(s.t_end - s.t_start) * 1e3, predicted_ms=chunk_ms(s.start, s.end), faults=s.faults)
                      for i, s in enumerate(r.chunks)]
runs_table, chunk_table = pd.DataFrame(per_run), pd.DataFrame(per_chunk)
results.table(runs_table, "interference_runs")
_ = results.table(chunk_table, "chunk_times")  # the path it returns is not for the page

# %%
measured = ["a_worst_gap_ms", "a_median_gap_ms", "a_tpot_ms", "b_ttft_ms"]
summary = timing.median_range(runs_table, "chunk_tokens", measured).merge(predicted, on="chunk_tokens")
summary["worst_gap_cut"] = 1 - summary.a_worst_gap_ms / summary.a_worst_gap_ms.shift(1)
summary["a_worst_gap_over_predicted"] = summary.a_worst_gap_ms / summary.predicted_a_worst_gap_ms
summary["b_ttft_over_predicted"] = summary.b_ttft_ms / summary.predicted_b_ttft_ms
results.table(summary, "interference")
ranged = lambda col, fmt=",.0f": [f"{m:{fmt}} ({prose.span(lo, hi, fmt)})" for m, lo, hi in
                                  zip(summary[col], summary[f"{col}_low"], summary[f"{col}_high"])]
prose.shown(pd.DataFrame({"chunk_tokens": summary.chunk_tokens, "A worst gap, ms": ranged("a_worst_gap_ms"),
              "A median gap, ms": ranged("a_median_gap_ms"), "B TTFT, ms": ranged("b_ttft_ms"),
              "worst gap / predicted": summary.a_worst_gap_over_predicted.round(2),
              "TTFT / predicted": summary.b_ttft_over_predicted.round(2)}).set_index("chunk_tokens"))

# %% [markdown]
# Unchunked, the mean gap (TPOT) and the worst gap each move off the stream's pace. And at small chunks, A's
# median gap itself can hold a chunk:

# %%
unchunked = summary[summary.chunk_tokens == b_prompt_len].iloc[0]   # select by value, never by position
stall = prose.span(unchunked.a_worst_gap_ms_low, unchunked.a_worst_gap_ms_high, ",.0f", "ms")
mean_x = unchunked.a_tpot_ms / unchunked.a_median_gap_ms      # how far the mean moved off the stream's pace
worst_x = unchunked.a_worst_gap_ms / unchunked.a_median_gap_ms  # how far the worst gap moved
mean_moved = (f"the mean moves too, to {mean_x:.1f} times the median gap, but it spreads the stall over "
              f"{a_tokens} tokens. The worst gap is {worst_x / mean_x:.1f} times TPOT: the mean understates the stall"
              if mean_x >= claims.PREDICTED_TIME
              else f"the mean sits only {mean_x - 1:.0%} above the median gap while the worst gap is {worst_x:.0f} times "
                   "it: the mean hides the stall")
register.claim("tpot_hides_the_stall", f"Unchunked, A's worst gap is more than {hides:g} times its TPOT: the worst "
               "gap shows a stall that the mean (TPOT) understates.")
u = runs_table[runs_table.chunk_tokens == b_prompt_len]
tpot_x = Spread.of(u.a_worst_gap_ms / u.a_tpot_ms)  # the worst gap over TPOT, run by run
verdict = register.record("tpot_hides_the_stall", claims.at_least(tpot_x, hides), predicted=f"worst gap > {hides:g}x TPOT",
                          measured=f"worst gap {unchunked.a_worst_gap_ms / unchunked.a_tpot_ms:.1f}x TPOT",
                          evidence=f"unchunked, {b_prompt_len} tokens, {runs} runs")
show(f"Unchunked, A's stream froze for **{stall}**, {worst_x:.0f} times its median gap of "
     f"{unchunked.a_median_gap_ms:.0f} ms. Its TPOT, the mean gap over {a_tokens} tokens, reads "
     f"{unchunked.a_tpot_ms:.0f} ms"
     + claims.pick(verdict, held=f": {mean_moved}.",
                   not_held=f": the worst gap is only {unchunked.a_worst_gap_ms / unchunked.a_tpot_ms:.1f} times TPOT, "
                            "because on this machine B's whole prefill costs little beside A's own steps.",
                   unresolved=": whether the worst gap tells more than the mean is too close to call from these runs."),
     how=f"The claim: unchunked, the worst gap is more than {hides:g} times TPOT. Run by run it was "
         f"{tpot_x.text('.1f', 'x')} TPOT" + claims.pick(
             verdict, held=f", wholly above {hides:g}x.", not_held=".",
             unresolved=f", an interval that reaches both sides of {hides:g}x (its median is "
                        f"{claims.leaning(tpot_x, hides)}); more runs would narrow it.")
         + f" A's median gap is one stream's decode step, measured inside these runs (the median over its gaps and "
           f"runs, {Spread.in_row(unchunked, 'a_median_gap_ms').text('.0f', 'ms')}); timed alone before them, the "
           f"step took {a_step_ms:.1f} ms ({prose.span(a_step.step_ms_low, a_step.step_ms_high, '.1f', 'ms')}).")

# %%
def listed(mask) -> str:
    return (f"size{'s' if sum(mask) > 1 else ''} " + ", ".join(str(c) for c, m in zip(summary.chunk_tokens, mask) if m)
            if any(mask) else "no size")


register.claim("crowded_median_gap", "A's median gap is what the cost model predicts, within the tolerance for a "
               "predicted time (the geometric mean over the chunk sizes, run by run): the median of A's gaps, each one "
               "stream's step timed alone plus the price of the chunk it waits behind, if any.")
crowded_pred = list(summary.predicted_a_median_gap_ms > a_step_ms)  # the predicted median gap holds a chunk
gap_runs = runs_table.merge(predicted[["chunk_tokens", "predicted_a_median_gap_ms"]], on="chunk_tokens")
gap_x = Spread.of(gap_runs.assign(x=gap_runs.a_median_gap_ms / gap_runs.predicted_a_median_gap_ms)
                  .groupby("run").x.agg(claims.geomean))  # each run's geometric mean over the sizes
gap_lo, gap_hi = claims.allowed(1.0, claims.PREDICTED_TIME)
by_gap = summary.set_index("chunk_tokens")
size_x = by_gap.a_median_gap_ms / by_gap.predicted_a_median_gap_ms
far_c = int(size_x.index[np.abs(np.log(size_x.to_numpy())).argmax()])  # the size furthest from its prediction
verdict = register.record("crowded_median_gap", claims.within(gap_x, 1.0, claims.PREDICTED_TIME),
                          predicted=f"median gap / predicted within {prose.span(gap_lo, gap_hi, '.2f', 'x')}",
                          measured=gap_x.text(".2f", "x"), evidence=f"A decodes {a_tokens} tokens, B arrives after "
                          f"{arrival_step}; a chunk in the median gap predicted at {listed(crowded_pred)}; furthest "
                          f"at {far_c} tokens, {size_x[far_c]:.2f}x")
stalling = chunk_table[chunk_table.chunk_index < a_tokens - arrival_step - 1]  # the chunks A's gaps wait behind
stall_chunk = stalling.groupby("chunk_tokens")[["chunk_ms", "predicted_ms"]].median()
far = by_gap.loc[far_c]
why_far = (f"where A's gaps wait behind chunks that took a median {prose.ms(stall_chunk.chunk_ms[far_c] / 1e3)} against "
           f"a price of {prose.ms(stall_chunk.predicted_ms[far_c] / 1e3)}" if far.predicted_a_median_gap_ms > a_step_ms
           else f"where the median gap is a plain step, {far.a_median_gap_ms / a_step_ms:.2f}x the step timed alone")
furthest = (f"furthest at {tokens(far_c)}: {prose.ms(far.a_median_gap_ms / 1e3)} against "
            f"{prose.ms(far.predicted_a_median_gap_ms / 1e3)} predicted, {why_far}")
crowd = by_gap[[bool(p) for p in crowded_pred]]
gap_f = ".0f" if a_step_ms >= 10 else ".1f"  # the folded table's digits
show(claims.pick(verdict, held=f"A's median gap came out as predicted: {gap_x.mid:.2f}x its prediction on average over "
                               "the chunk sizes.",
                 not_held=f"A's median gap missed its prediction: on average over the chunk sizes it ran "
                          f"{gap_x.text('.2f', 'x')} the prediction.",
                 unresolved=f"A's median gap ran {gap_x.text('.2f', 'x')} its prediction on average over the chunk "
                            f"sizes, too close to call (the median lies {claims.leaning(gap_x, gap_lo, gap_hi)}).")
     + f" It was {furthest}."
     + (f" At {prose.and_list(crowd.index)} tokens, B's prefill is spread over half or more of A's gaps, so the cost "
        f"model puts a chunk even in A's *median* gap: there it measured "
        f"{prose.and_list(prose.ms(g / 1e3) for g in crowd.a_median_gap_ms)}, against one stream's step of "
        f"{a_step_ms:.1f} ms."
        + claims.pick(verdict, held=" The stall is no longer one event but the stream's normal pace.", not_held="",
                      unresolved="") if len(crowd) else
        " No chunk size here spread B's prefill over half of A's gaps, so the cost model puts a plain step in A's "
        "median gap at every size."),
     how=f"A's predicted median gap is the median of its {a_tokens - 1} gaps: each is one stream's step timed alone "
         f"({a_step_ms:.1f} ms) plus the price of the chunk it waits behind, if any. Each run's median gap over that "
         f"prediction, its geometric mean over the chunk sizes run by run, is {gap_x.text('.2f', 'x')}; the claim holds "
         f"within the tolerance for a predicted time, {prose.span(gap_lo, gap_hi, '.2f', 'x')}. By chunk size, "
         "measured (the interval of the median over runs) against predicted: " + "; ".join(
             f"{r.chunk_tokens} tokens {prose.span(r.a_median_gap_ms_low, r.a_median_gap_ms_high, gap_f, 'ms')} "
             f"against {r.predicted_a_median_gap_ms:{gap_f}}" for r in summary.itertuples()) + ".")

# %% [markdown]
# One run's traces, unchunked and at the predicted best size:

# %%
example = [traces[(b_prompt_len, 1)], traces[(best_pred, 1)]]
fig, axes = plt.subplots(len(example), 1, figsize=(10, 6), sharey=True)
for ax, r in zip(axes, example):
    t0 = r.a_request_time
    times = (np.array(r.a_token_times) - t0) * 1e3
    gaps = np.diff(times)
    ax.bar(times[1:], gaps, width=-gaps, align="edge", color="tab:blue", alpha=0.35, edgecolor="tab:blue",
           label="A's gap before each token (bar spans the wait)")
    for i, s in enumerate(r.chunks):
        ax.axvspan((s.t_start - t0) * 1e3, (s.t_end - t0) * 1e3, color="tab:orange", alpha=0.3,
                   label="B's prefill chunks" if i == 0 else None)
    ax.axvline((r.b_request_time - t0) * 1e3, color="tab:red", ls="--", lw=1, label="B arrives")
    ax.axvline((r.b_first_token_time - t0) * 1e3, color="tab:green", ls="--", lw=1, label="B's first token")
    row = summary[summary.chunk_tokens == r.chunk].iloc[0]
    worst = prose.span(row.a_worst_gap_ms_low, row.a_worst_gap_ms_high, ",.0f")
    ax.set(yscale="log", ylabel="A's gap (ms)", title=f"chunk {r.chunk} tokens (run 1's trace); over {runs} runs A's "
           f"worst gap {row.a_worst_gap_ms:,.0f} ms ({worst}), B's TTFT {row.b_ttft_ms:,.0f} ms")
    ax.legend(fontsize=7, loc="upper right")
axes[-1].set_xlabel("time since A's request (ms)")
shorter = unchunked.a_worst_gap_ms / summary.set_index("chunk_tokens").a_worst_gap_ms[best_pred]
fig.suptitle(f"{best_pred}-token chunks ("
             + ("one of the two sizes the price predicts alike" if on_line else "the predicted best")
             + f") cut A's worst gap {shorter:.1f}x (medians of {runs} runs)")
fig.tight_layout()
results.figure(fig, "a_gaps_over_time")
plt.show()

# %% [markdown]
# ## The trade-off, and where chunking stops paying off
#
# Each step down in chunk size is judged as the prediction was, by how much it cuts A's worst gap against the
# next larger size (measured, medians of runs). Beside that stands what the step adds to B's TTFT.

# %%
steps = summary[["chunk_tokens", "a_worst_gap_ms", "worst_gap_cut", "predicted_worst_gap_cut", "b_ttft_ms"]].copy()
steps["b_ttft_growth"] = steps.b_ttft_ms / steps.b_ttft_ms.shift(1) - 1
results.table(steps, "halving")
best, stop = stopping_point(summary.chunk_tokens.tolist(), summary.a_worst_gap_ms.tolist())
paid_again = steps[(steps.chunk_tokens < (stop or 0)) & (steps.worst_gap_cut > stops_helping)]  # after the stop
prose.shown(steps.set_index("chunk_tokens")[["worst_gap_cut", "predicted_worst_gap_cut", "b_ttft_growth"]].round(3))

# %%
fig, ax = plt.subplots(figsize=(7.5, 4.8))
ax.errorbar(summary.b_ttft_ms, summary.a_worst_gap_ms, fmt="o-", capsize=3, label="measured (median, range of runs)",
            xerr=[summary.b_ttft_ms - summary.b_ttft_ms_low, summary.b_ttft_ms_high - summary.b_ttft_ms],
            yerr=[summary.a_worst_gap_ms - summary.a_worst_gap_ms_low,
                  summary.a_worst_gap_ms_high - summary.a_worst_gap_ms])
ax.plot(summary.predicted_b_ttft_ms, summary.predicted_a_worst_gap_ms, "s:", color="grey",
        label="predicted by the cost model")
for r in summary.itertuples():
    ax.annotate(f"{r.chunk_tokens}", (r.b_ttft_ms, r.a_worst_gap_ms), textcoords="offset points", xytext=(5, 5),
                fontsize=8)
lowest = int(summary.chunk_tokens[summary.a_worst_gap_ms.idxmin()])  # the lowest measured worst gap's size
marked = [(best, "*", f"where halving stopped paying {stops_helping:.0%}")] + [
    (c, "D", "predicted" + (" (one of two alike)" if on_line else "")) for c in alike] + [
    (lowest, "v", "lowest measured worst gap")] * (lowest != best)
for size, marker, text in marked:
    row = summary[summary.chunk_tokens == size].iloc[0]
    ax.plot(row.b_ttft_ms, row.a_worst_gap_ms, marker, ms=14, mfc="none", label=f"{text}: {size} tokens")
ax.set(xscale="log", yscale="log", xlabel="B's time to first token (ms)", ylabel="A's worst gap (ms)",
       title=(f"Chunking still cut A's worst gap at {best} tokens, the smallest run" if stop is None else
              "No chunk size cut A's worst gap enough to pay" if best == b_prompt_len else
              f"Chunking first stopped paying off below {best} tokens"
              + (", though smaller chunks cut it again" if len(paid_again) else ""))
       + f"\n(predicted: {pred_words}"
       + (f"; lowest measured worst gap at {lowest} tokens)" if lowest != best else ")"))
ax.legend(fontsize=8)
ax.grid(True, alpha=0.3)
results.figure(fig, "tradeoff")
plt.show()

# %% [markdown]
# Where chunking stopped paying off, against the prediction, and what each smaller chunk cost B:

# %%
by_size = summary.set_index("chunk_tokens")
cut_at = lambda col, size: "none (every step paid)" if size is None else f"{by_size[col][size]:.0%} at {size} tokens"
below = (f"Going down to {stop} tokens gave {cut_words(by_size.worst_gap_cut[stop])}, while B's TTFT "
         f"grew {by_size.b_ttft_ms[stop] / by_size.b_ttft_ms[best] - 1:.0%}." if stop else
         f"It still paid at the smallest size run, {sizes[-1]} tokens.")
below += (f" The lowest worst gap measured, {prose.ms(by_size.a_worst_gap_ms[lowest] / 1e3)}, came at "
          f"{tokens(lowest)}, against {prose.ms(by_size.a_worst_gap_ms[best] / 1e3)} at {best}." if lowest != best else "")
pred_spread = Spread(alike[-1], best_pred, alike[0]) if on_line else best_pred  # both sizes alike, on the line
pred_lo, pred_hi = claims.allowed(pred_spread, claims.PREDICTED_LENGTH)
per_run_best = [stopping_point(sizes, [runs_table[(runs_table.chunk_tokens == c) & (runs_table.run == r)].a_worst_gap_ms.iloc[0]
                                       for c in sizes])[0] for r in range(1, runs + 1)]
best_spread = Spread.of(per_run_best)  # each run's own best size: the interval of their median
register.claim("chunk_size_prediction", "Chunking stops paying off (a smaller chunk cuts A's worst gap by at most the "
               "chosen fraction) within one step of the chunk sizes' grid of the size the cost model predicts.")
verdict = register.record("chunk_size_prediction", claims.within(best_spread, pred_spread, claims.PREDICTED_LENGTH),
                          predicted=f"best {pred_words}; cut {cut_at('predicted_worst_gap_cut', stop_pred)}",
                          measured=f"best {best} tokens (runs {prose.span(min(per_run_best), max(per_run_best), '.0f')}); "
                                   f"cut {cut_at('worst_gap_cut', stop)}",
                          evidence="measured cut per step down: " + ", ".join(
                              f"{c}: {x:.0%}" for c, x in zip(summary.chunk_tokens[1:], summary.worst_gap_cut[1:])))
paid, each = paid_off(best, costs=True), ", ".join(map(str, per_run_best))
plain = (paid_off(best).replace(PAID_RULE, "") + claims.pick(
    verdict, held=(", one of the two sizes the cost model predicts alike" if on_line and best in alike else
                   ", where the cost model put it" if best in alike else ", within one step of the grid (a factor "
                   f"of {claims.PREDICTED_LENGTH:g}) of the cost model's **{pred_words}**") + f". {below}",
    not_held=f", more than one step of the grid from the predicted **{pred_words}**. {below} What a chunk "
             "costs, below, shows where the prediction's inputs differ from the run.",
    unresolved=f". The cost model predicted {pred_words}, but the runs' own best sizes ({each}) spread too wide "
               f"to say whether the best lies within one step of it. {below}"))
show(plain[:1].upper() + plain[1:], how=(
    f"A smaller size pays off when it cuts A's worst gap (the median of {runs} runs) by more than {stops_helping:.0%} "
    f"against the next larger size; each run alone stopped at {each} tokens. The cost model's best was found the same "
    f"way on its predicted worst gaps. The prediction holds when the interval of the runs' best sizes lies within one "
    f"step of the grid (a factor of {claims.PREDICTED_LENGTH:g}) of it, from "
    f"{tokens(int(pred_lo))} to {tokens(int(pred_hi))}"
    + (f": that interval is {best_spread.text('.0f')} tokens." if verdict != claims.UNRESOLVED else
       f"; the interval {best_spread.text('.0f')} tokens reaches across that range's edge (its median lies "
       + ("inside it" if pred_lo <= best_spread.mid <= pred_hi
          else "outside it") + "), and more runs would narrow it.")
    + (f" At that size{paid[paid.index('; there') + 7:-1]}." if "; there" in paid else "")))

# %%
register.claim("smaller_chunks_delay_b", "Smaller chunks delay B: in each run, the slope of log TTFT against log chunk "
               "size is negative.")
ttft = [Spread.in_row(r, "b_ttft_ms") for r in summary.itertuples()]
ttft_trend = claims.trend(runs_table, "chunk_tokens", "b_ttft_ms")
verdict = register.record("smaller_chunks_delay_b", claims.verdict_of(ttft_trend.high < 0, ttft_trend.low >= 0),
                          predicted="TTFT rising as chunks shrink", measured="TTFT (ms): " + ", ".join(
                              f"{c}: {t.mid:,.0f}" for c, t in zip(summary.chunk_tokens, ttft)),
                          evidence=f"{runs} runs; exponent of TTFT in chunk size {ttft_trend.text('.2f')}")
ttft_all = ", ".join(f"{c}: {t.text(',.0f')}" for c, t in zip(summary.chunk_tokens, ttft))
show(claims.pick(
    verdict, held=f"B's TTFT rose from {ttft[0].mid:,.0f} ms unchunked to {ttft[-1].mid:,.0f} ms with {sizes[-1]}-token "
                  "chunks. More chunks mean more passes, each issuing all of the model's operations and reading all of "
                  "its weights again; and while A still decodes, each chunk waits for one more of A's steps.",
    not_held=f"In this run smaller chunks did not delay B: TTFT (ms) {ttft_all} (the fitted exponent, run by run, "
             f"{ttft_trend.text('.2f')}).",
    unresolved=f"B's TTFT (ms) went {ttft_all} as chunks shrank, but the fitted exponent of TTFT in chunk size, run by "
               f"run ({ttft_trend.text('.2f')}), reaches zero: this run cannot tell whether smaller chunks delay B (its "
               f"median is {claims.leaning(ttft_trend, float('-inf'), 0.0)})."))

# %% [markdown]
# ## What a chunk costs
#
# Each chunk was timed on its own, so the prediction can be checked where it is made. A chunk's measured cost is
# set against the cost model's chunk: the pass of that length, its attention to the prefix and the cache's copy.
# The first chunk of each run has no prefix (it is chapter 2's pass, run between A's steps); the last full-size
# chunk has the longest.

# %%
first = chunk_table[chunk_table.chunk_index == 0]
first = first.assign(first_over_chapter_2=first.chunk_ms / first.tokens.map(pass_ms))
full = chunk_table[chunk_table.tokens == chunk_table.chunk_tokens].assign(ratio=lambda d: d.chunk_ms / d.predicted_ms)
last = full.sort_values("chunk_index").groupby(["chunk_tokens", "run"]).tail(1).merge(
    first[["chunk_tokens", "run", "chunk_ms", "predicted_ms"]], on=["chunk_tokens", "run"], suffixes=("", "_first"))
last["last_over_first"] = last.chunk_ms / last.chunk_ms_first
last["predicted_last_over_first"] = last.predicted_ms / last.predicted_ms_first  # the price's own growth
costs = (full.groupby("chunk_tokens", sort=False).ratio.median().rename("chunk_over_predicted").to_frame()
         .join(first.groupby("chunk_tokens").first_over_chapter_2.median())
         .join(last.groupby("chunk_tokens")[["last_over_first", "predicted_last_over_first"]].median()).reset_index())
costliest = chunk_table.groupby(["chunk_tokens", "run"]).chunk_ms.agg(lambda ms: ms.max() / ms.median())
costs["costliest_over_median_chunk"] = costs.chunk_tokens.map(costliest.groupby("chunk_tokens").median())
results.table(costs, "chunk_cost")
prose.shown(costs.round(2).set_index("chunk_tokens"))

# %%
cost_ratio, first_ratio = costs.chunk_over_predicted, costs.first_over_chapter_2
growth, growth_model = costs.last_over_first, costs.predicted_last_over_first
spread = lambda x: prose.span(x.min(), x.max(), ".2f")
register.claim("chunk_cost_as_predicted", "Chunks cost what the cost model prices them at (their pass, their attention "
               "to the prefix and the cache's copy), within the tolerance for a predicted time (the geometric mean "
               "over the chunk sizes).")
per_size = full.groupby(["chunk_tokens", "run"]).ratio.median().groupby("chunk_tokens").agg(list)
median_over_best = {c: cost.prefill(min(c, b_prompt_len)).median / cost.prefill(min(c, b_prompt_len)).best for c in per_size.index}
chunk_verdicts = {c: claims.within(Spread.of(v), Spread(1.0, 1.0, median_over_best[c]), claims.PREDICTED_TIME)
                  for c, v in per_size.items()}
pooled_chunk = claims.geomean_of(Spread.of(v) for v in per_size)
priced = Spread(1.0, 1.0, claims.geomean(median_over_best.values()))  # the price at its ceilings' fastest to median calls
verdict = register.record(
    "chunk_cost_as_predicted", claims.within(pooled_chunk, priced, claims.PREDICTED_TIME),
    predicted="measured / predicted within " + prose.span(*claims.allowed(priced, claims.PREDICTED_TIME), ".2f", "x"),
    measured=pooled_chunk.text(".2f", "x"), evidence=f"medians over chunks, per run; first chunk (no prefix) / chapter "
    f"2's pass: {spread(first_ratio)}; last / first full chunk: {spread(growth)} measured, {spread(growth_model)} by the "
    "cost model")
off = [c for c, v in chunk_verdicts.items() if v == claims.NOT_HELD]  # sizes wholly outside the tolerance
by_chunk = costs.set_index("chunk_tokens").chunk_over_predicted
first_chunk = f"first chunk of a run, with no prefix, cost {spread(first_ratio)} times chapter 2's pass of the same length"
grew = f"from the first to the last full chunk the cost grew {spread(growth)}x"
big_c, small_c = int(by_chunk.index.max()), int(by_chunk.index.min())
r_big, r_small = by_chunk[big_c], by_chunk[small_c]
side = lambda r: "low" if r > 1 else "high"  # noqa: E731  a price under the measured time runs low
fresh_at = dict(zip(sizes, fresh_over_pass))  # the price of a chunk with nothing cached over chapter 2's pass
grow_at = costs.set_index("chunk_tokens")[["last_over_first", "predicted_last_over_first"]]
if max(r_big, r_small) / min(r_big, r_small) < claims.PREDICTED_TIME:
    ends = f" The two ends were alike: {r_big:.2f}x its price at {big_c:,} tokens, {r_small:.2f}x at {small_c:,}."
else:
    ends = (f" But the price runs {side(r_big)} for large chunks and {side(r_small)} for small ones"
            if side(r_big) != side(r_small) else
            f" But the price runs {side(r_big)} at both ends, most for "
            f"{'large' if abs(np.log(r_big)) > abs(np.log(r_small)) else 'small'} chunks")
    ends += f": a chunk cost {r_big:.2f}x its price at {big_c:,} tokens and {r_small:.2f}x at {small_c:,}."
    if r_big > 1 and fresh_at.get(big_c, 1.0) < 1:  # the whole pass priced under chapter 2's measured pass
        ends += (f" The cost model prices a {big_c:,}-token pass with nothing cached at {fresh_at[big_c]:.2f}x "
                 "chapter 2's measured pass of that length.")
    if r_small < 1 and grow_at.predicted_last_over_first[small_c] > grow_at.last_over_first[small_c]:
        ends += (f" With {small_c}-token chunks it prices the last chunk at {grow_at.predicted_last_over_first[small_c]:.2f}x "
                 f"the first (its attention over the cached prefix and the cache's copy), where it cost "
                 f"{grow_at.last_over_first[small_c]:.2f}x.")
show(f"A chunk of B's prefill cost **{pooled_chunk.text('.2f', 'x')}** its price on average over the sizes"
     + claims.pick(
         verdict, held=f": about right.{ends}",
         not_held=f": the cost model misprices a chunk.{ends} The {first_chunk}; {grew}, where the cost model predicts "
                  f"{spread(growth_model)}x.",
         unresolved=": too close to call whether the cost model prices a chunk right, the median leaning toward "
                    + {"on the held side": "a right price", "above what would hold": "chunks dearer than priced",
                       "below what would hold": "chunks cheaper than priced"}[claims.leaning(
                           pooled_chunk, *claims.allowed(priced, claims.PREDICTED_TIME))] + f" (more runs would decide "
                    f"it).{ends}"),
     how=f"The geometric mean over the chunk sizes of each size's median over its chunks, run by run, against the range "
         f"the tolerance for a predicted time allows around the price at chapter 0's fastest to median calls, "
         f"{prose.span(*claims.allowed(priced, claims.PREDICTED_TIME), '.2f', 'x')}. Size by size: {spread(cost_ratio)}"
         + (f"; wholly outside the tolerance at {', '.join(map(str, off))} tokens, where {grew} and the cost model "
            f"predicts {spread(growth_model)}x" if off else "; no size wholly outside the tolerance")
         + f". The {first_chunk}."
         + (f" The interval's median is {claims.leaning(pooled_chunk, 1 / claims.PREDICTED_TIME, priced.high * claims.PREDICTED_TIME)}."
            if verdict == claims.UNRESOLVED else ""))
_far = summary.loc[np.abs(np.log(summary.a_worst_gap_over_predicted)).idxmax()]  # furthest from its price, either way
_far_costs = costs.set_index("chunk_tokens").loc[_far.chunk_tokens]
show(f"A's worst gap ran {spread(summary.a_worst_gap_over_predicted)} times its prediction, furthest from it at "
     f"{tokens(int(_far.chunk_tokens))} ({_far.a_worst_gap_over_predicted:.2f}x). A worst gap holds one of B's chunks, "
     f"so it runs {'over' if _far.a_worst_gap_over_predicted > 1 else 'under'} its price as that chunk does: at that size B's median chunk took "
     f"{_far_costs.chunk_over_predicted:.2f}x its price, and the costliest chunk of a run "
     f"{_far_costs.costliest_over_median_chunk:.2f}x the run's median chunk"
     + (" (one chunk: the whole prompt in one pass)." if int(_far.chunk_tokens) == b_prompt_len else "."))

# %% [markdown]
# **Where chunking stops helping.** A chunk is a pass, and every pass costs some time however short it is: its
# [dispatch](glossary.md#dispatch) and one read of the weights. On a machine with a [floor](glossary.md#floor),
# that is all of a pass's cost below some length. So a smaller chunk is quicker by less than its share of the
# tokens. The chunks this run timed say how much less (each run's first chunk, which has no prefix, the median
# over runs):

# %%
alone = first.groupby("chunk_tokens").chunk_ms.median().sort_index()  # a chunk with no prefix, median over runs
chunk_floor = sweeps.floor_and_knee(alone.index, alone.to_numpy() / 1e3, margin=floor2.margin)
on_floor = chunk_floor.flat_until_tokens
total = chunk_table.groupby(["chunk_tokens", "run"]).chunk_ms.sum().groupby("chunk_tokens").median()  # B's chunks, all
smallest_c = int(alone.index.min())
next_c = int(alone.index[1])  # the next size up from the smallest: what halving the chunk there saved
quicker = 1 - alone[smallest_c] / alone[next_c]  # a pass as costly as its tokens would be quicker by 1 - smallest / next
share = 1 - smallest_c / next_c
quicker_words = ("no quicker" if quicker <= 0 else f"only {quicker:.0%} quicker" if quicker < share / 2 else
                 f"{quicker:.0%} quicker")
halved = (f"Going from {next_c}- to {smallest_c}-token chunks made a chunk {quicker_words} "
          f"({prose.ms(alone[next_c] / 1e3)} to {prose.ms(alone[smallest_c] / 1e3)}) for {share:.0%} fewer tokens. "
          f"All of B's chunks together took {prose.ms(total[smallest_c] / 1e3)} with {smallest_c}-token chunks against "
          f"{prose.ms(total[next_c] / 1e3)} with {next_c}-token ones")  # said in full once, below
halved_short = f"halving the {next_c}-token chunks made each {quicker_words}"  # how the page refers to it after
show(f"Here a shorter pass was quicker by {'less than' if quicker < share else 'about'} its share of the tokens. "
     f"{halved}."
     + (f" Measured by A's worst gap, chunking first stopped paying off at the step down to {tokens(stop)}"
        + ("." if paid_again.empty else
           ", though the step down to " + " and to ".join(f"{r.chunk_tokens} cut it by {r.worst_gap_cut:.0%} again"
                                                         for r in paid_again.itertuples())
           + (": the prediction cuts again there too, so it is how B's chunks fall between A's remaining steps, not "
              "noise." if all(predicted.set_index("chunk_tokens").predicted_worst_gap_cut.get(r.chunk_tokens, 0.0)
                              > stops_helping for r in paid_again.itertuples()) else
              ": each step is one median over runs, so near the threshold the cuts need not fall in order."))
        if stop else " Measured by A's worst gap, every step down still paid."),
     how=(f"Where the chunks' cost stays flat: chapter 2's rule, with its margin of {floor2.margin:.0%}, on each run's "
          "first chunk (no prefix; the median over runs). It is not chapter 2's floor: that is measured from a 1-token "
          f"pass, this from the smallest chunk tried, {tokens(smallest_c)}, so the chunks can run flat where chapter 2 "
          "found no floor: "
          + (f"chunks up to {tokens(on_floor)} cost within the margin of the {smallest_c}-token chunk's "
             f"{prose.ms(alone[smallest_c] / 1e3)} ({prose.ms(alone[on_floor] / 1e3)} at {on_floor})."
             if on_floor > smallest_c else
             f"the next size up already cost {alone[next_c] / alone[smallest_c]:.2f} times the smallest chunk, "
             "beyond the margin: no chunk size run stayed within it.")))

# %% [markdown] tags=["predict"]
# ## Does chunking change the answer?
#
# B's last-position logits after a chunked prefill are set against the unchunked run's: both prefill the same
# prompt, in pieces or in one pass. `eps` is the dtype's relative rounding step, `torch.finfo(dtype).eps`.
#
# **Predict first.** How far apart, in multiples of `eps` of the largest logit, will B's chunked and unchunked
# logits be: exactly equal, a few `eps`, or about the logits' own size?

# %%
eps = torch.finfo(torch_dtype).eps
diffs = pd.DataFrame([
    dict(chunk_tokens=c, run=run, max_abs_logit_diff=(traces[(c, run)].b_last_logits
                                                      - traces[(b_prompt_len, run)].b_last_logits).abs().max().item(),
         logit_scale=traces[(b_prompt_len, run)].b_last_logits.abs().max().item())
    for c in sizes[1:] for run in range(1, runs + 1)])
diffs["diff_in_eps"] = diffs.max_abs_logit_diff / (eps * diffs.logit_scale.clip(lower=1.0))
results.table(diffs, "chunked_logits_difference")
claims.invariant((diffs.diff_in_eps <= 32).all(),
                 f"chunked prefill changed B's logits by up to {diffs.diff_in_eps.max():.0f} x "
                 f"eps({dtype_name(torch_dtype)}) of their scale (allowed 32): not a rounding difference")
facts = load_reference("ch09_facts").set_index("fact")["value"]
display(Markdown(
    f"The largest difference in any run was **{diffs.max_abs_logit_diff.max():.1e}** (smallest "
    f"{diffs.max_abs_logit_diff.min():.1e}) on logits as large as {diffs.logit_scale.max():.1f}: at most "
    f"{diffs.diff_in_eps.max():.1f} times {dtype_name(torch_dtype)}'s eps ({eps:.1e}) of the largest logit, a "
    f"rounding difference from another summation order. The reference measured "
    f"{facts['chunked_vs_unchunked_logit_diff_lo']:.1e} to {facts['chunked_vs_unchunked_logit_diff_hi']:.1e}."))

# %% [markdown]
# <details><summary>The book's prediction (open it once you have set yours beside the line above)</summary>
#
# Both compute the same function, so they should agree to rounding.
#
# </details>
#
# Rounding scales with the dtype: the tolerance is `32 x eps(dtype)` relative to the largest logit. A different
# function (a chunk that did not see its prefix) would miss by about the logits' own size, far beyond it; that
# would fail the build.

# %% [markdown]
# ## Beside the reference runs
#
# The source chapter ran the same loop on a GPU (`data/reference/ch09_interference_gpu.csv`). The Word Factory
# blog ran the idea with eight typers on a 2-core CPU (`data/reference/wordfactory_part3_cpu.csv`).

# %%
renamed = lambda c: c[:-3] + "_low" if c.endswith("_lo") else c[:-3] + "_high" if c.endswith("_hi") else c
ref = load_reference("ch09_interference_gpu").rename(columns=renamed).rename(columns={"b_chunk_tokens": "chunk_tokens"})
keep = [f"{c}{s}" for c in ["a_worst_gap_ms", "a_median_gap_ms", "b_ttft_ms"] for s in ["", "_low", "_high"]]
beside = (ref.set_index("chunk_tokens").add_prefix("reference_gpu_")
          .join(summary.set_index("chunk_tokens")[keep].add_prefix("this_"), how="outer")
          .sort_index(ascending=False).reset_index())
results.table(beside, "beside_reference")
pair = lambda col: [prose.span(a, b, ",.0f") if pd.notna(a) else ""
                    for a, b in zip(beside[f"{col}_low"], beside[f"{col}_high"])]
prose.shown(pd.DataFrame({"chunk_tokens": beside.chunk_tokens,
              "reference GPU: A worst gap, ms": pair("reference_gpu_a_worst_gap_ms"),
              "this run: A worst gap, ms": pair("this_a_worst_gap_ms"),
              "reference GPU: B TTFT, ms": pair("reference_gpu_b_ttft_ms"),
              "this run: B TTFT, ms": pair("this_b_ttft_ms")}).set_index("chunk_tokens"))

# %%
gpu = ref.sort_values("chunk_tokens", ascending=False)
gpu_best, _ = stopping_point(gpu.chunk_tokens.tolist(), (gpu.a_worst_gap_ms_low + gpu.a_worst_gap_ms_high).tolist())
gpu_pass = load_reference("ch09_prefill_gpu_cpu").dropna(subset=["gpu_fp32_ms_lo"])
gpu_floor = sweeps.floor_and_knee(gpu_pass.prompt_tokens, (gpu_pass.gpu_fp32_ms_lo + gpu_pass.gpu_fp32_ms_hi) / 2e3,
                                  gpu_pass.gpu_fp32_ms_lo / 1e3, gpu_pass.gpu_fp32_ms_hi / 1e3, margin=floor2.margin)
typer_rows = load_reference("wordfactory_part3_cpu").query("table == 'interference_8_typers_1024_newcomer'")
typers = dict(zip(typer_rows.x, typer_rows.time_ms))
display(Markdown(
    f"By the same rule (a step down pays if it cuts the worst gap by more than {stops_helping:.0%}), the reference "
    f"GPU's chunking kept cutting the worst gap down to a chunk size of **{gpu_best} tokens**; here "
    f"{paid_off(best).replace(PAID_RULE, '')}. The reference GPU's fp32 prefill cost within {floor2.margin:.0%} of its "
    f"1-token pass up to {gpu_floor.flat_until_tokens} tokens, so there a chunk shorter than that is hardly a quicker "
    f"pass. Here {halved_short} (the chunks' own times, above). The Word Factory's "
    f"eight typers on a 2-core CPU with a 1,024-token newcomer: a normal gap of {typers['normal']:.0f} ms, a worst gap "
    f"of {typers['unchunked_worst']:,.0f} ms unchunked and {typers['chunk128_worst']:.0f} ms with 128-token chunks."))

# %% [markdown]
# ## Extension: several streams decoding at once
#
# With `k` A streams decoding as one batch, every A step reads `k` caches but the same weights once. B's chunks
# still interleave with A's steps.

# %%
_k = max(stream_counts)
_one, _many = cost.decode(context + 5), cost.decode(context + 5, batch=_k)
_weights = lambda p: p.term("block matrices").best + p.term("LM head").best  # noqa: E731  the shared weights' products
_per_stream = lambda p: p.term("attention").best + p.term("cache copy").best + p.term("page faults").best  # noqa: E731
show(f"This section runs **k = {', '.join(map(str, stream_counts))}** streams (the parameter `stream_counts`), "
     f"B's chunks at {', '.join(map(str, stream_chunks))} tokens. Priced from chapter 0's parts, the weights' "
     f"products in a step take **{prose.ms(_weights(_one))}** at one row and **{prose.ms(_weights(_many))}** at "
     f"{_k} rows (the same weights, read once). Each stream's own cache (its read and its copy) takes "
     f"**{prose.ms(_per_stream(_one))}**, and issuing the step **{prose.ms(_one.term('dispatch').best)}** for one "
     "stream.", how=f"The parts are priced at context {context + 5}: the middle of the ten steps one stream's step was "
     f"timed over, from context {context}, where B arrives. The cost model's price for the whole one-stream step is "
     f"{prose.ms(_one.best)}.")

# %% [markdown] tags=["predict"]
# **Predict first.** One stream's decode step is printed near the top (timed alone, at the context B arrives at),
# and one stream's unchunked stall is the worst gap in the interference table. With `k = max(stream_counts)`
# streams, how many times one stream's step will each stream's step take: `k` times, or fewer? And unchunked, how
# many milliseconds will each of the `k` streams stall?

# %%
stream_sizes = sorted({min(c, b_prompt_len) for c in stream_chunks} | {b_prompt_len}, reverse=True)
per_stream = []
for run in progress(range(1, runs + 1), desc="several streams"):
    for k in stream_counts:
        for c in stream_sizes:  # one stream run again here, taking turns with k streams: each run's own pair
            r = schedule.interference(lm, chunk=c, b_prompt_len=b_prompt_len, a_prompt_len=a_prompt_len,
                                      a_tokens=a_tokens, arrival_step=arrival_step, a_streams=k, seed=run)
            per_stream.append(dict(a_streams=k, chunk_tokens=c, run=run, a_worst_gap_ms=r.a_metrics.worst_gap * 1e3,
                                   a_median_gap_ms=r.a_metrics.median_gap * 1e3, b_ttft_ms=r.b_metrics.ttft * 1e3,
                                   b_faults=sum(s_.faults for s_ in r.chunks)))
stream_runs = pd.DataFrame(per_stream)
results.table(stream_runs, "several_streams_runs")
streams = timing.median_range(stream_runs, ["a_streams", "chunk_tokens"],
                              ["a_worst_gap_ms", "a_median_gap_ms", "b_ttft_ms"])
results.table(streams, "several_streams")
prose.shown(streams.round(1))

# %% [markdown]
# <details><summary>The book's prediction (open it once you have set yours beside the table above)</summary>
#
# The cost model predicts that a `k`-stream step costs what it prices a batch at, less than `k` one-stream steps:
# its weights' products for `k` rows cost what chapter 0's matrix kernel took for `k` rows (printed above against
# one row, the same weights read once), and each stream adds only its own cache. And unchunked, every one of the
# `k` streams stalls for B's whole prefill plus one `k`-stream step.
#
# </details>

# %% [markdown]
# One stream's unchunked stall was timed twice, in the experiment above and here. One layer down, the page faults
# B's prefill took in each (its new tensors mapped afresh, every page zeroed on first touch), at chapter 0's cost
# per fault:

# %%
here = stream_runs[(stream_runs.a_streams == min(stream_counts)) & (stream_runs.chunk_tokens == b_prompt_len)]
there = runs_table[runs_table.chunk_tokens == b_prompt_len]
stall_here, stall_there = Spread.of(here.a_worst_gap_ms), Spread.of(there.a_worst_gap_ms)
per_fault_ms = pacer.ceilings.fault_cost(dtype, threads) * 1e3
faults_here, faults_there = here.b_faults.median(), there.b_faults.median()
apart = stall_there.low > stall_here.high or stall_here.low > stall_there.high
by_faults = (faults_there - faults_here) * per_fault_ms  # what the faults' difference costs, ms
show(f"One stream's unchunked stall here was **{stall_here.text(',.0f', 'ms')}**, in the experiment above "
     f"**{stall_there.text(',.0f', 'ms')}**"
     + (": the same stall, measured twice." if not apart else
        f", their ranges apart. B's prefill took a median {faults_there:,.0f} page faults there and "
        f"{faults_here:,.0f} here, which "
        f"at chapter 0's {per_fault_ms * 1e3:.2f} us a fault cost {abs(by_faults):,.0f} ms "
        f"{'more' if by_faults > 0 else 'less'} there: "
        + ("most of the difference between the two stalls, so what moved is how much fresh memory the allocator "
           "handed the prefill, not its arithmetic." if 0.5 * abs(stall_there.mid - stall_here.mid) <= by_faults *
           np.sign(stall_there.mid - stall_here.mid) else
           "not most of the difference between the two stalls, which this chapter does not take further apart.")),
     how="Each stall is the median of its runs' worst gaps, with the interval of that median. The experiment's runs in "
         "order: " + ", ".join(f"{x:,.0f}" for x in there.sort_values("run").a_worst_gap_ms) + " ms, B's prefill "
         "taking " + ", ".join(f"{x:,.0f}" for x in there.sort_values("run").b_faults) + f" page faults, at chapter "
         f"0's {per_fault_ms * 1e3:.2f} us a fault up to {there.b_faults.max() * per_fault_ms:,.0f} ms; here, "
         + ", ".join(f"{x:,.0f}" for x in here.sort_values("run").a_worst_gap_ms) + " ms and "
         + ", ".join(f"{x:,.0f}" for x in here.sort_values("run").b_faults) + " page faults.")

# %%
pick = lambda k, c: streams[(streams.a_streams == k) & (streams.chunk_tokens == c)].iloc[0]  # rows by value
k1, kn = min(stream_counts), max(stream_counts)
one, many = pick(k1, b_prompt_len), pick(kn, b_prompt_len)
per = stream_runs[stream_runs.chunk_tokens == b_prompt_len].pivot(index="run", columns="a_streams", values="a_median_gap_ms")
batch_ratio = Spread.of(per[kn] / per[k1]) if kn != k1 else None
model_ratio = cost.decode(context + 5, batch=kn).best / cost.decode(context + 5, batch=k1).best
shared = ("Several streams decoding as one batch take the step the cost model predicts for that batch over one "
          "stream's, within the tolerance for a ratio (its weights' products priced at chapter 0's matrix kernel for "
          "that many rows).")
rows_x = _weights(cost.decode(context + 5, batch=kn)) / _weights(cost.decode(context + 5, batch=k1))
w_share = _weights(cost.decode(context + 5, batch=k1)) / cost.decode(context + 5, batch=k1).best
why_ratio = (f" The price rests on the weights' products: {w_share:.0%} of a {k1}-stream step, they take {rows_x:.2f}x "
             f"as long for {kn} rows as for {k1} (chapter 0's matrix kernel, reading the same weights once).")
register.claim("streams_share_the_weights", shared)
one_count = "only one stream count was run; set stream_counts to two or more"  # why a claim is not measured
ratio_text = batch_ratio.text(".2f", "x") if batch_ratio else ""
verdict = register.record("streams_share_the_weights", None if batch_ratio is None else
                          claims.within(batch_ratio, model_ratio, claims.PREDICTED_RATIO),
                          predicted=f"{model_ratio:.2f}x (cost model)", measured=ratio_text,
                          evidence=f"median gaps, unchunked runs, {runs} runs" if batch_ratio else one_count)
gaps = (f"With {kn} streams, each stream's median gap was {many.a_median_gap_ms:.0f} ms, "
        f"{batch_ratio.mid if batch_ratio else np.nan:.2f}x one stream's in the same runs, for {kn / k1:g}x the "
        "tokens")
leans = {"on the held side": "toward the prediction", "above what would hold": "above it",
         "below what would hold": "below it"}  # an unresolved median's side, in words
show(claims.pick(
    verdict, held=f"{gaps}; the cost model predicted {model_ratio:.2f}x.{why_ratio}",
    not_held=f"{gaps}; the cost model predicted {model_ratio:.2f}x: the batch's step is "
             f"{'dearer' if batch_ratio and batch_ratio.mid > model_ratio else 'cheaper'} than priced.{why_ratio}",
    unresolved=f"{gaps}; the cost model predicted {model_ratio:.2f}x, too close to call, the median leaning " + (
        "" if batch_ratio is None else leans[claims.leaning(batch_ratio, *claims.allowed(model_ratio,
                                                                                       claims.PREDICTED_RATIO))])
               + f".{why_ratio}",
    not_measured=f"{shared} This run does not decide it: {one_count}."),
     how=None if batch_ratio is None else
     f"Run by run, the {kn}-stream median gap over the one-stream median gap of the same run, {ratio_text} (the "
     f"interval of its median; one stream's median gap in these runs was {one.a_median_gap_ms:.0f} ms, against "
     f"{many.a_median_gap_ms:.0f} ms for {kn}), against the cost model's ratio within the tolerance for a ratio, "
     f"{claims.PREDICTED_RATIO:g}x either way ({prose.span(*claims.allowed(model_ratio, claims.PREDICTED_RATIO), '.2f', 'x')}).")

# %%
expected = one.a_worst_gap_ms - one.a_median_gap_ms + many.a_median_gap_ms
span_many = prose.span(many.a_worst_gap_ms_low, many.a_worst_gap_ms_high, ",.0f", "ms")
waits = ("Unchunked, each of several streams stalls for one stream's stall plus the longer step, within the "
         "tolerance for a predicted time (each run's own ratio).")
register.claim("every_stream_waits_the_prefill", waits)
unchunked_runs = stream_runs[stream_runs.chunk_tokens == b_prompt_len].pivot(index="run", columns="a_streams")
paired_stall = None if kn == k1 else Spread.of(  # each run's k-stream stall against its own one-stream stall
    unchunked_runs[("a_worst_gap_ms", kn)] / (unchunked_runs[("a_worst_gap_ms", k1)] - unchunked_runs[("a_median_gap_ms", k1)]
                                             + unchunked_runs[("a_median_gap_ms", kn)]))
verdict = register.record("every_stream_waits_the_prefill", None if paired_stall is None else
                          claims.within(paired_stall, 1.0, claims.PREDICTED_TIME), predicted=f"{expected:,.0f} ms",
                          measured=f"{many.a_worst_gap_ms:,.0f} ms ({span_many})",
                          evidence=f"unchunked, {b_prompt_len} tokens, {runs} runs" if paired_stall else one_count)
paired = "" if paired_stall is None else paired_stall.text(".2f", "x")
paired_mid = "" if paired_stall is None else f"{paired_stall.mid:.2f}x"
show(claims.pick(
    verdict, held=f"An unchunked prefill stalls **{'both' if kn == 2 else f'all {kn}'}** streams at once, each for "
                  f"**{span_many}** (one stream: "
                  f"{prose.span(one.a_worst_gap_ms_low, one.a_worst_gap_ms_high, ',.0f', 'ms')}), {paired_mid} of one "
                  "stream's stall plus the longer step: the newcomer's prefill is paid by every stream in the batch.",
    not_held=f"With {kn} streams the unchunked stall was {span_many}, "
             f"{'longer' if many.a_worst_gap_ms > expected else 'shorter'} than the {expected:,.0f} ms predicted from "
             f"one stream's stall and the longer step ({paired_mid} of it, run by run).",
    unresolved=f"With {kn} streams the unchunked stall was {span_many}, against {expected:,.0f} ms predicted from one "
               f"stream's stall and the longer step: {paired_mid} of it, run by run, too close to call, the median "
               "leaning " + ("" if paired_stall is None else
                             leans[claims.leaning(paired_stall, 1 / claims.PREDICTED_TIME, claims.PREDICTED_TIME)]) + ".",
    not_measured=f"{waits} This run does not decide it: {one_count}."),
     how=None if paired_stall is None else
     f"Each run's {kn}-stream stall is set against that run's own one-stream stall plus the longer step: {paired} (the "
     "interval of the median ratio), against 1.00x within the tolerance for a predicted time, "
     f"{claims.PREDICTED_TIME:g}x either way. A run whose one stream stalled long moves its own ratio.")
if kn != k1 and (many.a_worst_gap_ms_high < one.a_worst_gap_ms_low or many.a_worst_gap_ms_low > one.a_worst_gap_ms_high):
    stalled_less = many.a_worst_gap_ms_high < one.a_worst_gap_ms_low  # though it waits for a longer step
    step_n, step_1 = many.a_median_gap_ms, one.a_median_gap_ms  # the step of A's that B's first token waits behind
    less_n = (many.b_ttft_ms_low - step_n, many.b_ttft_ms_high - step_n)  # B's TTFT less that step: its prefill
    less_1 = (one.b_ttft_ms_low - step_1, one.b_ttft_ms_high - step_1)
    apart_ = less_n[1] < less_1[0] or less_n[0] > less_1[1]
    show(f"The {kn} streams' stall was {'shorter' if stalled_less else 'longer'} than one stream's, their ranges apart, "
         f"{'though' if stalled_less else 'and'} it holds a longer step. One layer down, B's first token (its prefill "
         f"and the one step of A's it waits behind, {step_n:.0f} ms beside {kn} streams and {step_1:.0f} beside one) "
         f"came at {prose.span(many.b_ttft_ms_low, many.b_ttft_ms_high, ',.0f', 'ms')} against "
         f"{prose.span(one.b_ttft_ms_low, one.b_ttft_ms_high, ',.0f', 'ms')}. Less that step, it came at "
         f"{prose.span(*less_n, ',.0f', 'ms')} against {prose.span(*less_1, ',.0f', 'ms')}: "
         + (f"the same prefill ran {'faster' if less_n[1] < less_1[0] else 'slower'} in those runs, and the stall "
            "is that prefill." if apart_ and (less_n[1] < less_1[0]) == stalled_less else
            "the prefill alone, its ranges " + ("apart the other way" if apart_ else "overlapping") + ", does not "
            "account for it; this run does not take it apart further."))

# %% [markdown]
# Every price in this chapter is made of chapter 0's ceilings. The same one-row matrices chapter 0 timed, timed
# before the experiments and again now (`lib.machine.Pacer`), say whether the machine itself ran at another speed
# meanwhile. The finding below answers, and the opening says so too when it did.

# %%
pacer.check("after the streams")
show(pacer.claim(register, results, "the experiments"))

# %% [markdown]
# ## What these numbers do not show
#
# * **A simulated scheduler.** One process alternates two streams; a serving system has queues, admission
#   control, many requests of many lengths, and a policy that decides what runs next.
# * **One stall per run.** A stream of `a_tokens` tokens meets one newcomer; under load, newcomers keep arriving.
# * **One machine's passes.** The best chunk size moves with the hardware and the model; that is why it is
#   predicted from this machine's measured rates (the cost model, from chapter 0's ceilings) rather than fixed.
# * **No batching of B with A.** Real chunked-prefill schedulers (Sarathi-Serve, vLLM) put the chunk and the
#   decode tokens in the same forward pass; here they alternate.
#
# ## Takeaways

# %%
smallest = summary[summary.chunk_tokens == sizes[-1]].iloc[0]
chunk_line = (f"with {sizes[-1]}-token chunks A's worst gap was {smallest.a_worst_gap_ms:,.0f} ms against "
              f"{unchunked.a_worst_gap_ms:,.0f} ms unchunked, and B's TTFT {smallest.b_ttft_ms:,.0f} ms against "
              f"{unchunked.b_ttft_ms:,.0f} ms.")
foreseen = {claims.HELD: f"The cost model predicted {pred_words}, within one step of the grid",
            claims.NOT_HELD: f"The cost model predicted {pred_words}",
            claims.UNRESOLVED: f"The cost model predicted {pred_words}; the runs' bests ranged "
                               f"{prose.span(min(per_run_best), max(per_run_best), '.0f')} tokens, too wide to call",
            claims.NOT_MEASURED: "It was not checked against chapter 2's passes"}[register.verdict("chunk_size_prediction")]
display(Markdown("\n".join([
    "* Judge a stream by its worst gap, not its TPOT. A mean spreads over every token the stall that another "
    "request's prefill causes (the first finding above says how far each moved on this machine).",
    f"* Judge chunked prefill on both requests, the stream's stall and the newcomer's TTFT: {chunk_line}",
    f"* Predict where chunking stops paying off from the pass times, then measure. Here {paid_off(best)}. "
    f"{foreseen}.",
    "* Read off the chunks' own times what a smaller chunk saves. Once a shorter pass is hardly quicker, a smaller "
    f"chunk mostly adds passes before the newcomer's first token (here {halved_short})."])))

# %%
shown = by_size.loc[best if best != b_prompt_len else sizes[-1]]  # the best size, or the smallest if none paid
_said = f"{alike[0]} or {alike[-1]} predicted alike" if on_line else f"{best_pred} predicted"  # by the cost model
guess = {claims.HELD: "as predicted" if best in alike and not on_line else _said,
         claims.NOT_HELD: f"{_said}, a miss"}.get(register.verdict("chunk_size_prediction"), _said)
answer = {claims.HELD: "Chunking bounds one stream's stall at the cost of the newcomer's first token.",
          claims.NOT_HELD: "Here chunking bounded A's stall without delaying B's first token.",
          claims.UNRESOLVED: "Chunking bounded A's stall; whether it delays B is too close to call here."}
cut_rule = f"by more than {stops_helping:.0%} a step"  # the rule `stopping_point` applies, in words
chunked = (f"With {shown.name}-token chunks, the smallest tried," if best == b_prompt_len else
           f"Chunked, B's prefill kept cutting A's stall {cut_rule} down to the smallest chunks tried, "
           f"{shown.name} tokens ({guess}): there" if stop is None else
           f"Chunked, B's prefill stopped cutting A's stall {cut_rule} at {shown.name}-token chunks ({guess}): there")
lowest_there = (f" ({prose.ms(by_size.a_worst_gap_ms[lowest] / 1e3)} at {lowest}-token chunks, the lowest)"
                if lowest != shown.name else "")  # a smaller size that measured lower than the rule's choice
median_there = f", its median gap {shown.a_median_gap_ms:,.0f} ms against {unchunked.a_median_gap_ms:,.0f}"
topics = {"tpot_hides_the_stall": "that TPOT understates the worst gap",
          "crowded_median_gap": "the cost model's price of A's median gap", "chunk_size_prediction":
          "the predicted chunk size where chunking stops paying off", "chunk_cost_as_predicted":
          "the cost model's price of a chunk", "streams_share_the_weights": "the cost model's price of several "
          "streams' step", "every_stream_waits_the_prefill": "the predicted stall of several streams"}  # the rest the opening says itself
if not pacer.note():
    topics["machine_kept_its_pace"] = "whether the machine kept chapter 0's speed"
misses = f" {m}" if (m := register.misses(topics, only_named=True)) else ""  # named, not counted
told = (
    f"On this machine ({prose.machine(device, dtype)}), {lm.name}'s stream A received a token every "
    f"**{Spread.in_row(unchunked, 'a_median_gap_ms').text('.0f', 'ms')}** until request B's {b_prompt_len:,}-token "
    f"prompt arrived. Prefilled at once, B froze A for "
    f"**{Spread.in_row(unchunked, 'a_worst_gap_ms').text(',.0f', 'ms')}**, {worst_x:.0f} times that gap. "
    f"{chunked} A's worst gap was **{Spread.in_row(shown, 'a_worst_gap_ms').text(',.0f', 'ms')}**{lowest_there}"
    f"{median_there}, and "
    f"B's first token came after **{Spread.in_row(shown, 'b_ttft_ms').text(',.0f', 'ms')}**, not "
    f"{unchunked.b_ttft_ms:,.0f} ms. "
    + ("Here no chunk size shortened A's stall enough to pay." if best == b_prompt_len
       else answer.get(register.verdict("smaller_chunks_delay_b"), "Chunking bounded A's stall."))
    + f" (Medians of {runs} runs, with their ranges.){misses}")
_brief = told.replace(f" (Medians of {runs} runs, with their ranges.)", "")
_lean = _brief.replace(f" ({guess})", "")
pace_v = register.verdict("machine_kept_its_pace")  # lib.machine.pace_note's verdict, in plain words
pace_said = "" if not pacer.note() else pacer.note() if pace_v not in (claims.NOT_HELD, claims.UNRESOLVED) else (
    f"The machine {'may have run' if pace_v == claims.UNRESOLVED else 'ran'} at another speed than in chapter 0, so "
    f"prices here {'may be' if pace_v == claims.UNRESOLVED else 'are'} off (the pace finding near the end says how far).")
_short = _lean.replace(f", {worst_x:.0f} times that gap", "").replace(median_there, "").replace("Chunked, B's prefill",
                                                                                               "Chunking")
_ranged = [(Spread.in_row(r, c), f) for r, c, f in ((unchunked, "a_median_gap_ms", ".0f"), (unchunked, "a_worst_gap_ms",
           ",.0f"), (shown, "a_worst_gap_ms", ",.0f"), (shown, "b_ttft_ms", ",.0f"))]  # the opening's ranged numbers
_bare = _short
for _x, _f in _ranged:  # the shortest telling: the medians without their ranges
    _bare = _bare.replace(_x.text(_f, "ms"), f"{_x.mid:{_f}} ms")
opening.write(told, _brief, _lean, _short, _bare, after=pace_said)  # the pace sentence: in the longest telling that fits it

# %% [markdown]
# ## Check yourself
#
# 1. A's steps take 60 ms; B's 1,000-token prefill takes 2.5 s. Roughly what worst gap does A see unchunked,
#    and with 250-token chunks?
#
# <details><summary>Answer</summary>
#
# Unchunked: about 60 ms + 2,500 ms. With four chunks of about 625 ms each (more if each pass pays a floor, and the
# later chunks attend to a longer prefix): about 60 + 625 ms.
# </details>
#
# 2. Why does B's TTFT grow as chunks shrink even when the total prefill work is the same?
#
# <details><summary>Answer</summary>
#
# Each chunk is a pass that pays again what any pass costs however short (issuing its operations, reading the
# weights once), and, while A still decodes, B waits for one A step before each chunk: `n` chunks cost `n` of
# those and up to `n` A steps.
# </details>
#
# 3. How would you choose a chunk size for a new machine?
#
# <details><summary>Answer</summary>
#
# As this chapter did: measure prefill time against prompt length (chapter 2), and predict A's worst gap at each
# chunk size (A's step plus the costliest chunk A waits behind). Walk down the sizes while a step down cuts that
# worst gap by at least the share you require (here `stops_helping`, 15 %), and stop at the first that does not, or
# before a size whose B TTFT would pass its objective (TTFT grows as the chunks shrink). Then measure the sizes
# around it: the runs' best may differ.
# </details>
#
# ## Try it
#
# * Set `arrival_step = 30`: does the stall move, and does its size change?

# %% jupyter={"source_hidden": true} tags=["answer"]
_arrival, _small = 30, sizes[-1]
_left, _now_left = a_tokens - _arrival, a_tokens - arrival_step  # A's tokens still to come when B arrives


def _at(chunk: int, left: int) -> tuple[float, float]:
    """The cost model's (A's worst gap, B's TTFT) in ms, as `predict` prices them, with `left` A tokens to come."""
    _costs = [chunk_ms(s, e) for s, e in schedule.chunk_schedule(b_prompt_len, chunk)]
    return a_step_ms + max(_costs[:max(left - 1, 0)], default=0.0), min(len(_costs), left) * a_step_ms + sum(_costs)


if _left < 1:
    _said = (f"With this run's `a_tokens = {a_tokens}` the chapter refuses `arrival_step = {_arrival}` (B must arrive "
             f"while A is still decoding): raise `a_tokens` above {_arrival} too. Then the stall moves later in A's "
             "trace, keeps its size unchunked, and with small chunks A finishes before B's last chunks run.")
else:
    (_w, _t), (_w_now, _t_now) = _at(_small, _left), _at(_small, _now_left)
    _said = (f"The stall moves from after A's token {arrival_step} to after its token {_arrival} (in the traces' "
             f"figure, B's arrival line and the long bar shift right), and unchunked it keeps its size: A still waits "
             f"behind B's whole prefill, {_at(b_prompt_len, _left)[0]:,.0f} ms by the cost model. Chunked, A has only "
             f"{_left} tokens left when B arrives, so at most B's first {max(_left - 1, 0)} chunks fall between A's "
             f"tokens, and the rest of B's chunks run back to back once A is done: with {_small}-token chunks the "
             f"cost model's worst gap for A goes from {_w_now:,.0f} to {_w:,.0f} ms and B's TTFT from {_t_now:,.0f} to "
             f"{_t:,.0f} ms, since B waits for fewer A steps. "
             + ("Fewer than half of A's gaps can then hold a chunk, so A's median gap stays its own step at every size."
                if _left - 1 < (a_tokens - 1) / 2 else "Half or more of A's gaps can still hold a chunk."))
display(Markdown(f"<details><summary>What to expect</summary>\n\n{_said}\n</details>"))

# %% [markdown]
# * Set `stream_counts = [1, 8]` and compare with the Word Factory's eight typers.

# %% jupyter={"source_hidden": true} tags=["answer"]
_k, _c = 8, min(stream_sizes)
_ratio = cost.decode(context + 5, batch=_k).best / cost.decode(context + 5, batch=k1).best
_gap = one.a_median_gap_ms * _ratio  # each stream's gap with 8 streams, by the cost model's ratio
_off = batch_ratio.mid / model_ratio if batch_ratio else 1.0  # how far this run's batch ran from its price
_as_run = (f"; if the {_k}-stream step runs as far {'over' if _off > 1 else 'under'} its price as this run's {kn} "
           f"streams did ({_off:.2f}x), about {_gap * _off:.0f} ms" if batch_ratio and abs(_off - 1) >= 0.02 else "")
_prefill = many.a_worst_gap_ms - many.a_median_gap_ms  # B's whole prefill, from this run's largest stream count
_chunk = pick(kn, _c).a_worst_gap_ms - many.a_median_gap_ms  # B's costliest chunk of _c tokens
_read = {claims.HELD: f"this run's {kn} streams took {batch_ratio.text('.2f', 'x') if batch_ratio else ''} one "
                      f"stream's step against the cost model's {model_ratio:.2f}x, close enough for the prediction "
                      f"to hold, so expect about the price{_as_run}",
         claims.NOT_HELD: f"this run's {kn} streams took {batch_ratio.text('.2f', 'x') if batch_ratio else ''} one "
                          f"stream's step against the cost model's {model_ratio:.2f}x, so expect a miss the same "
                          f"way{_as_run}",
         claims.UNRESOLVED: f"this run's {kn} streams took {batch_ratio.text('.2f', 'x') if batch_ratio else ''} one "
                            f"stream's step, too near the cost model's {model_ratio:.2f}x to call, so read it as a "
                            f"rough guide{_as_run}"}.get(register.verdict("streams_share_the_weights"), "this run measured one "
                                                                                               "stream count only")
display(Markdown(
    f"<details><summary>What to expect</summary>\n\nThe cost model prices an {_k}-stream step at {_ratio:.2f} times one stream's, "
    f"so each stream's gap should be about {_gap:.0f} ms against one stream's {one.a_median_gap_ms:.0f} ms in the "
    f"runs above ({_read}). Unchunked, all {_k} streams should freeze for about {_prefill + _gap:,.0f} ms, {(_prefill + _gap) / _gap:.0f} times their gap, "
    f"and with {_c}-token chunks for about {_chunk + _gap:,.0f} ms, {(_chunk + _gap) / _gap:.1f} times it. The Word "
    f"Factory's eight typers (a 2-core CPU, a 1,024-token newcomer) had a normal gap of {typers['normal']:.0f} ms and "
    f"froze for {typers['unchunked_worst'] / typers['normal']:.0f} times it unchunked and "
    f"{typers['chunk128_worst'] / typers['normal']:.1f} times with 128-token chunks: another machine and model, so "
    "compare the multiples, not the milliseconds.\n</details>"))

# %% [markdown]
# * Set `stops_helping = 0.3`: where does the predicted best chunk size move, and does the measurement follow?

# %% jupyter={"source_hidden": true} tags=["answer"]
_limit = 0.3


def _best(chunks, gaps) -> int:
    """`stopping_point`'s best size with `_limit` in place of `stops_helping`."""
    for bigger, g_bigger, g in zip(chunks, gaps, gaps[1:]):
        if 1 - g / g_bigger <= _limit:
            return int(bigger)
    return int(chunks[-1])


_pred = _best(predicted.chunk_tokens.tolist(), predicted.predicted_a_worst_gap_ms.tolist())
_meas = _best(summary.chunk_tokens.tolist(), summary.a_worst_gap_ms.tolist())
_each = [_best(sizes, [runs_table[(runs_table.chunk_tokens == c) & (runs_table.run == r)].a_worst_gap_ms.iloc[0]
                       for c in sizes]) for r in range(1, runs + 1)]
_held = claims.within(Spread.of(_each), _pred, claims.PREDICTED_LENGTH)  # the chapter's own test, at the new limit
_moves = lambda was, now: f"stays at **{now} tokens**" if was == now else f"moves from {was} to **{now} tokens**"
display(Markdown(
    f"<details><summary>What to expect</summary>\n\nA step down must now cut A's worst gap by more than {_limit:.0%} "
    f"to pay, {'not' if _limit > stops_helping else 'instead of'} {stops_helping:.0%}, so the best size can only move "
    f"to {'larger' if _limit > stops_helping else 'smaller'} chunks: the cost model's best "
    f"{_moves(pred_words if on_line else best_pred, _pred)}, "
    f"and the measured medians' {_moves(best, _meas)} (run by run: {', '.join(map(str, _each))}). "
    + ("" if all(_e == _meas for _e in _each) else
       "A run taken alone can stop at another size than the medians do: its worst gaps are noisier than their "
       "median, so a step down can miss the cut by chance. ")
    + "Judged as the chapter judges its own prediction (the interval of the runs' best sizes within one step of the "
      f"grid, a factor of {claims.PREDICTED_LENGTH:g}, of the predicted size), "
    + claims.pick(_held, held="the measurement follows the prediction. ",
                  not_held="the measurement lies more than a step of the grid from the prediction. ",
                  unresolved="the runs' best sizes spread too wide to say whether the measurement follows the "
                             "prediction. ")
    + (f"At {_meas} tokens A's worst gap was {by_size.a_worst_gap_ms[_meas]:,.0f} ms and B's TTFT "
       f"{by_size.b_ttft_ms[_meas]:,.0f} ms, against {by_size.a_worst_gap_ms[best]:,.0f} ms and "
       f"{by_size.b_ttft_ms[best]:,.0f} ms at {best}: the stricter rule trades A's stall for B's first token."
       if _meas != best else "On the measured medians the stricter rule changes nothing here.")
    + "\n</details>"))

# %% [markdown]
# ## Key terms
#
# [TTFT, ITL, TPOT, worst gap, goodput](glossary.md#ttft-itl-tpot-worst-gap-goodput), [Floor](glossary.md#floor), [Chunked prefill](glossary.md#chunked-prefill), [Prefill](glossary.md#prefill), [Decode](glossary.md#decode), [Price](glossary.md#price), [Tolerance](glossary.md#tolerance), [Pace](glossary.md#pace). Each links to the book's glossary, which says how the book measures it.

# %% [markdown]
# ## Evidence in this chapter
#
# Each claim this chapter made, what was predicted, what this run measured, the verdict, and the data it came
# from. A verdict is decided on the 95 % interval of the median over runs (`lib.claims` says how): *held* when
# all of the interval agrees with the prediction, *did not hold* when none of it does, *not resolved* when it
# straddles the line. `data/05_interference/claims.csv` holds the same rows, and the book's status page counts them.

# %%
results.table(register.frame(), "claims")
display(prose.table(register.evidence()))
print(register.summary())
results.finish()  # the run is whole: its tables and figures replace the last run's together

