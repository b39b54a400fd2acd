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
# # 2. Prefill: how the first pass scales with the prompt
#
# Prefill runs every prompt position through every weight matrix in one pass. Its arithmetic grows with the
# prompt: about `2 x weights` FLOPs per token, plus attention, which grows with the square of the prompt. Its
# weight traffic does not grow at all: each weight is read once per pass. By the bytes alone, then, a short prompt
# would cost about what one token costs (a [**floor**](glossary.md#floor)) and a long one would grow with its
# arithmetic; whether it does depends on the rate the matrices reach with a few rows, which chapter 0 measured.
#
# This chapter times a prefill of GPT-2 small for prompts of 1 to 1,024 tokens, in two dtypes and (on a CPU) with
# one thread and with all of them. It sets every point beside the cost model (`lib.costmodel`): the model's own
# matrices at the rate chapter 0 measured for that many rows, plus attention, plus issuing the pass. The
# [**balance point**](glossary.md#balance-point) estimates how many tokens keep the arithmetic busy. The points
# then say whether there is a floor and where the [**knee**](glossary.md#knee) is (where time per token stops
# falling). Last, the chapter takes a short pass apart and tests a saving: computing logits for the last position
# only. Every conclusion is a named claim decided by this run's data (`lib.claims`), saved in `claims.csv`.

# %% [markdown]
# **After this chapter you can**
#
# * predict a prefill's time from the model's FLOPs and bytes and chapter 0's rates (the cost model);
# * read the floor and the knee off a sweep of prompt lengths, and explain where they lie with the balance point and F(M);
# * say what a short pass spends its time on, measured one layer down;
# * say what computing the logits at the last position only saves, and why.

# %% tags=["parameters"]
quick = False
device = "auto"             # "auto", "cpu", "cuda", "cuda:N"
model_name = "gpt2-small"
prompts = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
dtypes = None               # None: fp32 and bf16 on a CPU, fp32 and fp16 on CUDA
threads = None              # CPU thread counts; None: all cores and one (ignored on CUDA)
runs = 9                    # runs of the sweep, interleaved; a point is the median of its runs (nine: see lib.claims)
long_runs = 9               # runs of a point predicted to take longer than long_s: nine too, since three claims rest
                            # on the longest prompt, and with five runs one slow one left them all unresolved
long_s = 0.25
settle_s = 6.0              # at most this long re-measuring the points whose interval straddles their prediction
tries_s = 0.05              # within a run, a pass is repeated until its passes add up to this; the run keeps its fastest
warmup = 1                  # untimed passes before each point of the first run
budget_s = 20.0             # a point predicted to need longer than this (warm-up and one pass) is skipped
margin = 0.25               # how far above the floor, or above the lowest time per token, still counts as on it
short_prompts = 64          # the short passes taken apart: every prompt up to this length
logits_prompts = [16, 64, 128, 256]  # last-position against all-position logits, first dtype, all threads
logits_runs = 9
profiled_runs = 5           # the worst pass under the profiler

# %%
from lib import params
from lib.machine import MODELS

P = params.check(globals(), {
    "device": params.device(),
    "model_name": params.choice([m for m in MODELS if m != "smollm2-135m"], quick="tiny-gpt2"),
    "prompts": params.int_list(min=1, max=1024, quick=[1, 2, 4, 16, 64], min_items=3, ascending=True),
    "dtypes": params.dtype_list(allow_none=True),
    "threads": params.threads(),
    "runs": params.integer(min=1, max=30, quick=2),
    "long_runs": params.integer(min=1, max=30, quick=2),
    "long_s": params.number(above=0, max=60),
    "settle_s": params.number(min=0, max=600, quick=0),
    "tries_s": params.number(min=0, max=5),
    "warmup": params.integer(min=0, max=5),
    "budget_s": params.number(above=0, max=120),
    "margin": params.number(min=0, max=4),
    "short_prompts": params.integer(min=2, max=1024, quick=16),
    "logits_prompts": params.int_list(min=1, max=1024, quick=[16, 64], ascending=True),  # chapter 0's head: to 256 rows
    "logits_runs": params.integer(min=2, max=30, quick=2),
    "profiled_runs": params.integer(min=1, max=20, quick=2),
}, quick=quick, chapter="02_prefill_sweep")
if len([p for p in prompts if p <= short_prompts]) < 2:
    raise ValueError(f"short_prompts={short_prompts} takes apart the prompts up to that length; prompts={prompts} has "
                     "fewer than two of them")

# %%
import contextlib
import io

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

from lib import claims, costmodel, machine, phases, profiling, prose, regime, roofline, sweeps, timing
from lib.claims import Spread
from lib.device import UnsupportedDtype, describe_environment, resolve_dtype, use_threads
from lib.models import load_model, random_prompt
from lib.progress import progress
from lib.prose import show, tokens
from lib.results import Results, load_reference
from lib.shapes import ModelShape

# %% [markdown]
# The models, one per dtype, and the cost model of each configuration (dtype and threads), on chapter 0's
# ceilings for this device:

# %%
on_gpu = device.type == "cuda"
ceilings = machine.load_ceilings(device, quick=quick)  # chapter 0's one measurement of this machine
dtype_names = dtypes or (["fp32", "fp16"] if on_gpu else ["fp32", "bf16"])
models, not_run = {}, []
for dt in dtype_names:
    try:
        models[dt] = load_model(model_name, device, resolve_dtype(dt, device))
    except UnsupportedDtype as error:
        not_run.append(f"{dt}: {error}")
if not models:
    raise ValueError(f"none of the dtypes {dtype_names} runs on {device}: " + "; ".join(not_run))
for prompt_len in prompts + logits_prompts:
    phases.check_fits(next(iter(models.values())), prompt_len)  # refuse a too-long prompt before any work
configs = [(dt, n) for dt in models for n in threads]
base_shape = ModelShape.from_config(next(iter(models.values())).config, name=model_name)
main_dt, most = next(iter(models)), max(threads)
main = (main_dt, most)
pacer = machine.Pacer(ceilings, model_name, main_dt, most, device)  # the machine's speed, watched
pacer.check("before the sweep")
cost = {(dt, n): costmodel.CostModel(ceilings, model_name, base_shape.with_dtype(dt), dt, n) for dt, n in configs}
for c in cost.values():
    c.prefill(1)  # says which run of chapter 0 is missing, before any work
results = Results("02_prefill_sweep", params=P, quick=quick, model=model_name)
register = claims.Claims()


def label(dt: str, n: int) -> str:
    """How a configuration is named on the page: its dtype and, on a CPU, its threads."""
    return dt if on_gpu else f"{dt}, {n} thread{'s' if n > 1 else ''}"


def lean(measured, low: float, high: float = np.inf, fmt: str = ".2f", unit: str = "") -> str:
    """For a claim not resolved: which way its median leans against the band ``[low, high]`` that would hold
    (``claims.leaning``), and which edge of the band its 95 % interval crosses, as a phrase for a sentence."""
    m = measured if isinstance(measured, Spread) else Spread.at(float(measured))
    edge = lambda x: f"{x:{fmt}}{unit}"  # noqa: E731
    if claims.leaning(m, low, high) == "on the held side":
        ends = ([f"below {edge(low)}"] if m.low < low else []) + ([f"above {edge(high)}"] if m.high > high else [])
        reach = " and ".join(ends) + ", the tolerance's edge" if ends else "the edge of the tolerance"
        return "its median matches the prediction, but its 95 % interval is too wide to decide in this run: it reaches " + reach
    return (f"its median leans away from the prediction ({claims.leaning(m, low, high)}: "
            f"{'under ' + edge(low) if m.mid < low else 'over ' + edge(high)}), but its 95 % interval reaches back "
            "inside the tolerance, so this run cannot decide")


def close_call(measured, low: float, high: float = np.inf) -> str:
    """For a claim not resolved, the plain words: too close to call, and which way its median leans (the detail,
    :func:`lean`, goes in the fold)."""
    side = claims.leaning(measured if isinstance(measured, Spread) else Spread.at(float(measured)), low, high)
    return "too close to call, " + ("though its median agrees with the prediction" if side == "on the held side" else
                                    f"its median leaning {'lower' if side.startswith('below') else 'higher'} than "
                                    "predicted")


pd.Series({**describe_environment(device, None, model_name), "configurations": "; ".join(label(*c) for c in configs),
           "not run": "; ".join(not_run) or "none",
           "matrix instructions (chapter 0)": ", ".join(
               f"{dt}: {'hardware' if ceilings.hardware_support(dt) else 'none, a slow kernel'}" for dt in models)}
          ).to_frame("this run")

# %% [markdown]
# ## What this run found

# %%
opening = prose.Opening()

# %% [markdown]
# ## The balance point: how many tokens keep the arithmetic busy
#
# A prefill of `T` tokens reads every weight of the blocks once and does `2 x T` FLOPs with each. Reading takes
# the weights' bytes over the [streaming read](glossary.md#streaming-read); the arithmetic takes its FLOPs over
# the matrices' FLOP rate. While the read takes longer, a longer prompt costs nothing extra: the arithmetic hides
# under the read. The two take equally long at the [**balance point**](glossary.md#balance-point): the FLOP rate
# over the bandwidth, in FLOP per byte. A weight of `b` bytes used for `2 x T` FLOPs gives a pass `2T / b` FLOP
# per weight byte, so a prompt keeps the arithmetic busy once `2T / b` reaches the balance point. What chapter 0
# measured, and the model's size:

# %%
shape_main = base_shape.with_dtype(main_dt)
block_bytes = shape_main.layers * shape_main.block_params * shape_main.bytes_per_param  # read once per pass
flops_per_token = 2 * shape_main.layers * shape_main.block_params
read_bw = ceilings.stream_bandwidth(main_dt, most)  # chapter 0's streaming read, bytes/s
f_rates = pd.Series({p: ceilings.matrix_rate(model_name, main_dt, most, p) for p in prompts})  # F(M), FLOP/s
f_many = f_rates.max()
show(f"For {label(*main)}, chapter 0 measured the streaming read at **{read_bw / 1e9:.1f} GB/s** and the model's own "
     f"matrices at up to **{f_many / 1e9:.0f} GFLOP/s** (F({f_rates.idxmax():,}), "
     + ("at this chapter's longest prompt" if f_rates.idxmax() == max(prompts) else
        "the fastest of this chapter's prompt lengths")
     + f"). The blocks' weights are **{block_bytes / 1e6:.3g} MB** ({shape_main.bytes_per_param:g} bytes each), and one "
     f"token does **{flops_per_token / 1e6:.3g} MFLOP** with them.")

# %% [markdown] tags=["predict"]
# **Predict first.** With these numbers (the fastest rate of the model's matrices, the streaming read, the blocks'
# bytes and one token's FLOPs), how many tokens can a prompt have before its pass costs more than a 1-token pass?

# %%
balance = f_many / read_bw  # FLOP per byte
balance_tokens = balance * block_bytes / flops_per_token
square_balance = ceilings.square_flops(main_dt, most) / read_bw
prose.prediction(f"A balance point of **{balance:.1f} FLOP/byte**, where chapter 0's textbook one, {square_balance:.1f}, uses the "
                 f"square product's rate instead of the model's matrices. Reading the blocks' weights takes "
                 f"{block_bytes / read_bw * 1e3:.3g} ms; at the fastest rate one token's FLOPs take "
                 f"{flops_per_token / f_many * 1e3:.3g} ms. So by the balance point a pass should cost about the same up to "
                 f"**{balance_tokens:.0f} {main_dt} tokens** on this machine, and grow with its arithmetic after that.")
register.claim("floor_ends_at_balance_point", "A prefill costs about what its 1-token pass costs up to the balance "
               "point's length, the matrices' fastest rate over the streaming read in tokens (within one step of the "
               "sweep's grid).")

# %% [markdown]
# ## What the cost model predicts
#
# A prefill of `T` tokens is priced as the sum of its parts, each at the rate chapter 0 measured for the kernel
# that does it:
#
# * the block matrices at `T` rows: the larger of their bytes at the one-row rate and their FLOPs at `F(T)`;
# * the LM head at one row (only the last position's logits are needed);
# * causal attention over `T` tokens;
# * [dispatch](glossary.md#dispatch): the same pass with its matrices and attention hollowed out, which issues
#   every operation and runs the small ones.
#
# This is the function, shown once:

# %%
display(prose.source(costmodel.CostModel.prefill, costmodel.CostModel._matrix_terms))

# %% [markdown]
# The balance point took the matrices' fastest rate for every prompt. Chapter 0 measured their rate at each number
# of rows, `F(M)`, and timed causal attention and the pass's issuing at each length; at this chapter's prompt
# lengths:

# %%
head_1 = ceilings.matrices(model_name, main_dt, most, "head", 1).best  # seconds, the LM head at one row
dispatch_1 = ceilings.dispatch(model_name, main_dt, most, "prefill", 1).best  # seconds, issuing a 1-token pass
longest = max(prompts)
dispatch_long = ceilings.dispatch(model_name, main_dt, most, "prefill", longest).best
attention_1, attention_long = (ceilings.attention_prefill(model_name, main_dt, most, t).best for t in (1, longest))
show(f"A pass counts as on the floor while it costs within **{margin:.0%}** of a 1-token pass (the parameter `margin`). "
     f"Chapter 0 timed the LM head at one row at **{prose.ms(head_1)}** and the hollowed 1-token pass (the model with "
     f"its matrices and attention hollowed out, so it only issues its operations and runs its small kernels) at "
     f"**{prose.ms(dispatch_1)}**; the blocks' weights stream at one row in "
     f"{prose.ms(ceilings.matrices(model_name, main_dt, most, 'blocks', 1).best)}. The hollowed pass issues the same "
     f"operations at every length, yet grows to {prose.ms(dispatch_long)} at {tokens(longest)}"
     + (f" (chapter 0 timed it up to {tokens(top_rows)}, and beyond that it is priced in proportion to the length)"
        if (top_rows := max(ceilings.dispatch_rows_measured(model_name, main_dt, most))) < longest else "")
     + ". That figure is not issuing alone, which chapter 0 puts at microseconds an operation: it is issuing plus the "
     "small kernels (norms, activations, residual adds), which work over every row, so "
     + (f"from about {tokens(past_rows)} their work, not the issuing, is most of it. "
        if (past_rows := next((p for p in prompts if ceilings.dispatch(model_name, main_dt, most, "prefill", p).best
                               > 2 * dispatch_1), None)) else "their work grows beside the issuing. ")
     + f"Causal attention (every layer) grows from "
     f"{prose.ms(attention_1)} at 1 token to {prose.ms(attention_long)} at {tokens(longest)}.")
prose.shown(pd.DataFrame({"F(M), GFLOP/s": f_rates / 1e9,
              "attention (ms)": {p: ceilings.attention_prefill(model_name, main_dt, most, p).best * 1e3 for p in prompts},
              "issuing and small kernels (ms)": {p: ceilings.dispatch(model_name, main_dt, most, "prefill", p).best * 1e3
                                        for p in prompts}}).rename_axis(f"rows, {label(*main)}").T.round(2))

# %% [markdown] tags=["predict"]
# **Predict first.** A pass reads the blocks' weights once, and its arithmetic takes `T` times one token's FLOPs at
# `F(T)` (both printed above). The LM head (the last position only) adds the same to every length; attention and
# issuing the pass grow with it as the table gives at each length. Up to what prompt length does a prefill cost
# within the margin just printed of a 1-token pass, and at what length does its time per token stop falling (come within that margin of
# the lowest time per token of any length)?

# %%
def price_table(cost: dict) -> pd.DataFrame:
    """Every configuration's price at every prompt length, term by term (ms at the fastest calls)."""
    return pd.DataFrame([dict(dtype=dt, threads=n, prompt_tokens=p, **{f"{t.name.replace(' ', '_')}_ms": t.best * 1e3
                                                                       for t in pred.terms},
                              predicted_ms=pred.best * 1e3, predicted_median_ms=pred.median * 1e3,
                              floor_ms=pred.floor * 1e3, largest_term=pred.dominant.name)
                         for (dt, n), c in cost.items() for p in prompts for pred in [c.prefill(p)]])


predicted = price_table(cost)
expected = {c: sweeps.floor_and_knee(g.prompt_tokens, g.predicted_ms / 1e3, margin=margin)
            for c, g in predicted.groupby(["dtype", "threads"], sort=False)}
first = predicted[(predicted.dtype == main_dt) & (predicted.threads == most)].set_index("prompt_tokens")
p_second = first.predicted_ms.iloc[1] / first.predicted_ms.iloc[0]  # the second length's price over the first's
on_floor = (f"it stays within {margin:.0%} of that up to **{tokens(expected[main].flat_until_tokens)}**"
            if expected[main].flat_until_tokens > first.index[0] else
            f"it has no floor: {tokens(first.index[1])} are priced at **{p_second:.2f}x** that, beyond {margin:.0%} more")
_share = first[["block_matrices_ms", "LM_head_ms", "attention_ms", "dispatch_ms"]].iloc[0].max() / first.predicted_ms.iloc[0]
prose.prediction(f"Prediction ({label(*main)}): a 1-token pass takes **{prose.ms(first.predicted_ms.iloc[0] / 1e3)}**, "
                 f"{'most of it' if _share > 0.5 else 'its largest part'} {first.largest_term.iloc[0]} ({_share:.0%}); {on_floor}, "
                 f"and it reaches {prose.ms(first.predicted_ms.iloc[-1] / 1e3)} at {tokens(first.index[-1])}. Its time per token comes "
                 f"within {margin:.0%} of its lowest at **{tokens(expected[main].knee_tokens)}**.",
                 "The cost model's prediction")
prose.shown(first[["block_matrices_ms", "LM_head_ms", "attention_ms", "dispatch_ms", "predicted_ms", "largest_term"]].round(1))

# %% [markdown]
# ## The sweep
#
# Every configuration runs the list of prompts `runs` times, interleaved (all configurations once, then again),
# so that a slow spell of a shared machine does not land on one configuration only. The first run warms up every
# point and skips (and lists) a point the cost model predicts would exceed the budget. A point predicted to take
# longer than `long_s` runs `long_runs` times: nine here, as many as the others, since the 95 % interval of a median
# needs nine runs to leave out the slowest (`lib.claims`) and three claims rest on the longest prompt. With fewer,
# its interval is the range of its runs.
# Within a run a short pass is repeated until its passes add up to `tries_s` (at most five) and the run keeps the
# fastest: a shared machine's interruptions only ever make a pass slower, and chapter 0's ceilings are fastest
# calls too. Each pass's page faults are counted, and the cost model prices those it took at chapter 0's cost per
# fault. Logits are computed for the last position only, as a serving prefill needs. The prompts are random token
# ids and the weights seeded random ones: a pass's time depends on neither. The pass each point times, and the timer
# that times it (folded; open them to read):

# %%
display(prose.source(phases.prefill, timing.measure))
passes, kept = [], {}


def sweep_run(run: int, only: set | None = None) -> None:
    """One run: every configuration in turn, its cheap points always and its expensive ones in the first
    ``long_runs`` runs; with ``only``, just those (dtype, threads, tokens) points."""
    for dt, n in configs:
        points = kept.get((dt, n)) or [p for p in prompts if cost[(dt, n)].prefill(p).median * (warmup + 1) <= budget_s]
        kept.setdefault((dt, n), points)
        points = [p for p in points if ((dt, n, p) in only if only is not None else
                                        run <= long_runs or cost[(dt, n)].prefill(p).median < long_s)]
        if not points:
            continue
        with use_threads(n), contextlib.redirect_stdout(io.StringIO()):  # its progress line is not for the page
            phases.prefill(models[dt], random_prompt(1, models[dt].vocab_size, device=device))  # untimed: a switch
            table = sweeps.prefill_sweep(models[dt], points, repeats=1, min_seconds=tries_s, label=label(dt, n),
                                         warmup=warmup if run == 1 else 0)
        passes.append(table.assign(run=run, dtype=dt, threads=n, time_ms=table.low_s * 1e3))


for run in progress(range(1, runs + 1), desc="sweep runs"):
    sweep_run(run)
skipped = [f"{label(*c)} at {tokens(p)}" for c in configs for p in prompts if p not in kept[c]]
print("skipped (predicted over the budget): " + ("none" if not skipped else "; ".join(skipped)))

# %% [markdown]
# Each pass is set beside its price run by run: the cost model at chapter 0's fastest calls, with the page faults
# that pass took. A point's **ratio** to its prediction is taken in each run, and a point is the median of its
# runs with the 95 % interval of that median. A point whose ratio's interval straddles the edge of the tolerance
# is measured again, interleaved, for at most `settle_s` seconds.

# %%
keys = ["dtype", "threads", "prompt_tokens"]


def priced(frame: pd.DataFrame) -> pd.DataFrame:
    """The runs, each pass with its prediction (its own page faults priced, ms) and its ratio to it."""
    p = [cost[(r.dtype, r.threads)].prefill(r.prompt_tokens, fresh_pages=r.faults) for r in frame.itertuples()]
    return frame.assign(priced_ms=[q.best * 1e3 for q in p], priced_median_ms=[q.median * 1e3 for q in p],
                        ratio=frame.time_ms.to_numpy() / np.array([q.best * 1e3 for q in p]))


def point_spreads(frame: pd.DataFrame) -> tuple[dict, dict]:
    """Per point: its pass time (s) and its ratio to its price, each a Spread over its runs."""
    groups = frame[frame.status == "ok"].groupby(keys, sort=False)
    return ({k: Spread.of(g.time_ms / 1e3) for k, g in groups}, {k: Spread.of(g.ratio) for k, g in groups})


def band(k: tuple) -> tuple[float, float]:
    """The ratios a point may take and be as predicted: the fastest calls' price over the tolerance, up to the
    median calls' times it."""
    q = cost[k[:2]].prefill(k[2])
    return 1 / claims.PREDICTED_TIME, q.median / q.best * claims.PREDICTED_TIME


def straddlers() -> set:
    """The points whose ratio's interval straddles an edge of their band."""
    return {k for k, v in ratio.items() if claims.within(v, Spread(1.0, 1.0, band(k)[1] / claims.PREDICTED_TIME),
                                                         claims.PREDICTED_TIME) == claims.UNRESOLVED}


def measure_again() -> None:
    """One more run of the straddling points, then every point's spreads again."""
    global runs_table, spread, ratio
    sweep_run(int(runs_table.run.max()) + 1, only=straddlers())
    runs_table = priced(pd.concat(passes, ignore_index=True))
    spread, ratio = point_spreads(runs_table)


pacer.check("after it")
runs_table = priced(pd.concat(passes, ignore_index=True))
spread, ratio = point_spreads(runs_table)
before = len(straddlers())
again = claims.settle(measure_again, lambda: not straddlers(), budget_s=settle_s, max_runs=20)
results.table(runs_table[["run", *keys, "passes", "time_ms", "faults", "priced_ms", "ratio", "status"]], "prefill_runs")
show(f"No point's interval crossed an edge of the tolerance after {runs} runs." if not before else
     f"{prose.count(before, 'point').capitalize()} whose interval crossed an edge of the tolerance "
     f"{'was' if before == 1 else 'were'} timed again.", how=f"After {runs} runs, {before} of {len(ratio)} points' intervals crossed an edge "
     f"of their band; {again} more run{'s' * (again != 1)} of those (within {settle_s:g} s) left {len(straddlers())}.")

# %% [markdown]
# The points, with the regime of each by the one rule (`lib.regime`): within `REGIME_SLACK` of its prediction, the
# regime of its largest term; further above, unexplained; faster than its floor, a ceiling is wrong (and the build
# stops, since chapter 0's table would then understate this machine). A short pass priced at `F(T)` whose `2T / b`
# lies below its configuration's balance point (computed as above) is
# [**few-row-kernel-bound**](glossary.md#regimes): by the roofline its bytes would set its time, so what it pays for
# is the matrix kernel's slow rate at that few rows, not arithmetic. A pass whose largest term is the weights
# read at one row, by a kernel more than `REGIME_SLACK` slower than the streaming read, is
# [**bound by the kernel's rate**](glossary.md#regimes), not by the memory.

# %%
faults = runs_table.groupby(keys, sort=False).faults.median()
sweep = (timing.median_range(runs_table[runs_table.status == "ok"], keys, ["time_ms", "ratio"])
         .merge(predicted, on=keys)
         .merge(faults.rename("faults").reset_index(), on=keys))
sweep["runs"] = [spread[tuple(k)].n for k in sweep[keys].itertuples(index=False)]
sweep["tokens_per_s"] = sweep.prompt_tokens / sweep.time_ms * 1e3
sweep["achieved_gflop_s"] = [roofline.prefill_cost(base_shape, p, logits="last").flops / (t * 1e-3) / 1e9
                             for p, t in zip(sweep.prompt_tokens, sweep.time_ms)]
pass_price = {k: cost[k[:2]].prefill(k[2], fresh_pages=faults[k]) for k in spread}
def balance_of(dt: str, n: int) -> float:
    """A configuration's balance point, as this page computes it above: the fastest rate of the model's matrices
    at this chapter's prompt lengths over the streaming read, FLOP per byte."""
    return max(ceilings.matrix_rate(model_name, dt, n, p) for p in prompts) / ceilings.stream_bandwidth(dt, n)


def regime_of(k, measured: Spread | None = None) -> regime.Regime:
    """The one rule's label of the pass ``k`` = (dtype, threads, tokens) (its runs, or ``measured``), told where it
    lies against its configuration's balance point: its matrices' intensity, `2T / b` FLOP per weight byte, as the
    balance point section computes it."""
    dt, n, t = k
    return regime.regime(spread[k] if measured is None else measured, pass_price[k],
                         intensity=2 * t / base_shape.with_dtype(dt).bytes_per_param, balance=balance_of(dt, n))


def shown_label(k, g: regime.Regime) -> str:
    """The rule's label, except that weights read by a kernel more than the slack below the streaming read are
    "bound by the kernel's rate" (the glossary's Regimes), not by the memory's."""
    dt, n, _ = k
    slow = ceilings.weight_rate(model_name, dt, n) * regime.REGIME_SLACK < ceilings.stream_bandwidth(dt, n)
    return "bound by the kernel's rate" if g.label == "memory-bound" and slow else g.label


labels = [regime_of(tuple(k)) for k in sweep[keys].itertuples(index=False)]
sweep["regime"] = [shown_label(tuple(k), g) for k, g in zip(sweep[keys].itertuples(index=False), labels)]
sweep["over_predicted"] = sweep.ratio
results.table(sweep, "prefill_sweep")
warning = regime.check_floors({f"{label(r.dtype, r.threads)} at {tokens(r.prompt_tokens)}": g
                               for r, g in zip(sweep.itertuples(), labels)}, ceilings.strict)
if warning:
    show(warning)
(sweep.assign(configuration=[label(d, n) for d, n in zip(sweep.dtype, sweep.threads)],
              **{"measured (ms)": [f"{t:,.1f} ({prose.span(lo, hi, ',.1f')})" for t, lo, hi in
                                   zip(sweep.time_ms, sweep.time_ms_low, sweep.time_ms_high)],
                 "x its price": [f"{x:.2f}x" for x in sweep.ratio]})
 .pivot(index="prompt_tokens", columns="configuration", values=["measured (ms)", "x its price", "regime"])
 .rename_axis("prompt tokens"))

# %% [markdown]
# The claim is about the sweep as a whole: the geometric mean of the points' ratios to their prices (each point
# with its own interval, so one slow point moves it by its share only), with the points wholly outside the
# tolerance counted and those that straddle it named apart.

# %%
def beyond_doubt(r: Spread) -> tuple[float, float]:
    """How far a ratio to its price lies from 1x, either way, on a log scale: first its interval's distance (0 when it
    holds 1x), then its median's. The one measure by which this page names the pass "furthest from its price"."""
    return max(np.log(r.low), -np.log(r.high), 0.0), abs(np.log(r.mid))


def as_predicted(claim: str, statement: str, points: list) -> tuple[str, str]:
    """Decide that the ``points`` (keys of ``ratio``) take their predicted time, on their pooled ratio; return the
    finding and how it was decided."""
    register.claim(claim, statement)
    pooled = claims.geomean_of(ratio[k] for k in points)
    top = float(np.exp(np.mean([np.log(band(k)[1] / claims.PREDICTED_TIME) for k in points])))
    out = [k for k in points if claims.within(ratio[k], Spread(1.0, 1.0, band(k)[1] / claims.PREDICTED_TIME),
                                              claims.PREDICTED_TIME) == claims.NOT_HELD]
    straddling = straddlers()
    open_ = [k for k in points if k in straddling]
    at = lambda k: f"{label(*k[:2]) + ' at ' if len(configs) > 1 and k[:2] != main else ''}{tokens(k[2])}"  # noqa: E731
    name = lambda k: f"{at(k)} ({ratio[k].text('.2f', 'x')})"  # noqa: E731
    banded = lambda k: (f"{name(k)[:-1]}, against its own band "  # noqa: E731
                        f"of {band(k)[0]:.2f}x to {band(k)[1]:.2f}x)")
    worst = max(points, key=lambda k: beyond_doubt(ratio[k]))
    verdict = register.record(claim, claims.within(pooled, Spread(1.0, 1.0, top), claims.PREDICTED_TIME),
                              predicted=f"time / price: 1.00x to {top:.2f}x (chapter 0's fastest to median calls), "
                                        f"within {claims.PREDICTED_TIME:g}x",
                              measured=pooled.text(".2f", "x"), evidence=f"prefill_sweep.csv, {len(points)} points")
    tol = claims.PREDICTED_TIME
    how = (f"The figure is the geometric mean of the {len(points)} points' ratios of measured time to price, with its "
           f"95 % interval, set against the band of {1 / tol:.2f}x to {top * tol:.2f}x: the 1.00x to {top:.2f}x its "
           f"price spans (chapter 0's fastest calls to its median ones), widened by the tolerance of {tol:g}x. "
           + (f"{len(out)} of {len(points)} points lie{'s' * (len(out) == 1)} wholly outside their own band: "
              f"{', '.join(map(banded, out))}. " if out else "No point lies wholly outside its own band. ")
           + (f"{prose.count(len(open_), 'point').capitalize()} straddle{'s' * (len(open_) == 1)} "
              f"{'its' if len(open_) == 1 else 'their'} edge: {', '.join(map(banded, open_))}. " if open_ else "")
           + "The pass furthest from its price is the one whose ratio's interval lies furthest from 1x, either way, "
             "on a log scale (the same measure picks the pass the profiler takes apart below)."
           + ("" if verdict != claims.UNRESOLVED else " In this run " + lean(pooled, 1 / tol, top * tol, ".2f", "x") + "."))
    direction = "less" if pooled.mid < 1 else "more"
    tails = []  # each configuration's longest prompts that all ran wholly above (or all below) their price
    for cfg in dict.fromkeys(k[:2] for k in points):
        ks = sorted((k for k in points if k[:2] == cfg), key=lambda k: k[2])
        for word, off in (("above", lambda r: r.low > 1), ("below", lambda r: r.high < 1)):
            n = next((i for i in range(len(ks)) if all(off(ratio[k]) for k in ks[i:])), len(ks))
            if len(ks) - n >= 2:
                tail = ks[n:]
                tails.append((f"{'in ' + label(*cfg) + ', ' if len(configs) > 1 and cfg != main else ''}"
                              + ("every pass" if n == 0 else f"every pass from {tokens(tail[0][2])} on")
                              + f" ran {word} its price, by "
                              + prose.span(min(ratio[k].mid for k in tail), max(ratio[k].mid for k in tail), ".2f", "x"),
                              len([k for k in tail if k in out])))  # and how many of them miss on their own
    missed = sum(m for _, m in tails)
    told_tails = "; ".join(t for t, _ in tails) + (
        "" if not tails else ", none by enough to count as a miss on its own" if not missed else
        f" ({missed} of those passes by enough to count as a miss on its own)")
    top_mid = max(points, key=lambda k: abs(np.log(ratio[k].mid)))
    text = (f"The passes of {'; '.join(dict.fromkeys(label(*k[:2]) for k in points))} took **{pooled.text('.2f', 'x')}** "
            "the time the cost model priced them at, from chapter 0's kernel rates: " + claims.pick(
                verdict, held="as priced",
                not_held=f"{direction} than priced (the section below takes the furthest pass apart)",
                unresolved=f"{direction} than priced by the median, but too close to call")
            + (". " + told_tails[0].upper() + told_tails[1:] if tails else "")
            + f". The pass furthest from its price, counting its whole range over the runs, was {at(worst)}, at "
              f"{ratio[worst].text('.2f', 'x')} its price"
            + ("." if top_mid == worst else
               f"; the median of {at(top_mid)} lay further off, {ratio[top_mid].text('.2f', 'x')}, but its range "
               "reached nearer to its price."))
    return text, how


mine = sweep[(sweep.dtype == main_dt) & (sweep.threads == most)]
show(*as_predicted("passes_as_predicted", "The prefills of the first configuration take the time the cost model "
                  "predicts, within the tolerance for a time predicted from measured ceilings (their geometric mean).",
                  [k for k in ratio if k[:2] == main]))

# %% [markdown]
# Every price above is made of chapter 0's ceilings, measured minutes earlier. A shared machine's speed drifts
# (another tenant, the clock). So the chapter timed the kernel a 1-token pass rests on, the model's matrices at one
# row, the way chapter 0 did, before the sweep and after it (`lib.machine.Pacer`, nine calls each). If the machine
# ran that kernel at another speed, a price made of chapter 0's ceilings is off by about as much on that account
# alone.

# %%
show(pacer.claim(register, results, "the sweep"))

# %% [markdown]
# The same test for the other configurations: the one rule is the same, the kernels are not.

# %%
others = [k for k in ratio if k[:2] != main]
statement = ("The prefills of the other configurations take the time the cost model predicts, within the tolerance "
             "for a time predicted from measured ceilings (their geometric mean).")
if others:
    show(*as_predicted("other_configurations_as_predicted", statement, others))
else:
    register.claim("other_configurations_as_predicted", statement)
    register.record("other_configurations_as_predicted", None, evidence="one configuration only in this run")
    show(f"{statement} This run does not decide it: one configuration only in this run.")

# %% [markdown]
# ## The floor and the knee, read from the data
#
# The [**floor**](glossary.md#floor) is the measured 1-token pass (its median over runs, with the 95 % interval of that median). A
# prompt stays **on the floor** while its pass (its median) takes at most `1 + margin` times the floor's median.
# The **knee** is the shortest prompt
# whose time per token is within `1 + margin` of the lowest time per token measured. Both are
# `lib.sweeps.floor_and_knee`, applied above to the predictions and here to the measurements; neither depends
# on fitting a line.

# %%
floor_rows = []
for (dt, n), g in sweep.groupby(["dtype", "threads"], sort=False):
    if g.prompt_tokens.nunique() < 2:
        continue
    f = sweeps.floor_and_knee(g.prompt_tokens, g.time_ms / 1e3, g.time_ms_low / 1e3, g.time_ms_high / 1e3, margin=margin)
    floor_rows.append(dict(dtype=dt, threads=n, floor_ms=f.floor_s * 1e3, floor_ms_low=f.floor_low_s * 1e3,
                           floor_ms_high=f.floor_high_s * 1e3, flat_until_tokens=f.flat_until_tokens,
                           knee_tokens=f.knee_tokens, knee_confirmed=f.knee_confirmed,
                           best_ms_per_token=f.best_per_token_s * 1e3, best_at_tokens=f.best_tokens,
                           longest_prompt_tokens=int(g.prompt_tokens.max()), margin=margin,
                           predicted_flat_until_tokens=expected[(dt, n)].flat_until_tokens,
                           predicted_knee_tokens=expected[(dt, n)].knee_tokens))
floors = pd.DataFrame(floor_rows)
results.table(floors, "floor")
prose.shown(floors.round(2).rename(columns={"floor_ms": "one_token_pass_ms", "floor_ms_low": "one_token_pass_ms_low",
                                            "floor_ms_high": "one_token_pass_ms_high"}))  # a floor only where it is flat

# %% [markdown]
# A length read off noisy points is itself noisy. So the floor's end and the knee are read three times with the
# same rule: off the points' medians and off the two ends of their intervals. Each claim is decided on the range
# of those readings, within one step of the sweep's grid (`PREDICTED_LENGTH`: the lengths are a factor of two
# apart).

# %%
def reading(g: pd.DataFrame, column: str) -> sweeps.Floor:
    """The floor and knee read off one column of the points (their medians, or one end of their intervals)."""
    return sweeps.floor_and_knee(g.prompt_tokens, g[column] / 1e3, margin=margin)


g = mine
readings = [reading(g, c) for c in ("time_ms_low", "time_ms", "time_ms_high")]
flats = Spread.of([r.flat_until_tokens for r in readings])
knees = Spread.of([r.knee_tokens for r in readings])
fm = floors[(floors.dtype == main_dt) & (floors.threads == most)].iloc[0]

# %% [markdown]
# A floor needs two or more lengths within the margin of the 1-token pass: a run that is flat only at its first
# point (which is trivially within the margin of itself) has no floor at all. So the claim first asks whether the
# readings and the cost model agree that there is a floor, and only where both have one compares where it ends.

# %%
register.claim("floor_flat_as_predicted", "A prefill costs what its 1-token pass costs up to the length where the "
               "cost model's curve leaves its floor (within one step of the sweep's grid).")
pflat, first_tok = expected[main].flat_until_tokens, int(mine.prompt_tokens.min())
second = mine.sort_values("prompt_tokens").iloc[1]  # the second length, the first that can share the floor
floored = [r.flat_until_tokens > first_tok for r in readings]  # a floor: two or more lengths within the margin
p_floored = pflat > first_tok
verdict = register.record(
    "floor_flat_as_predicted", claims.within(flats, pflat, claims.PREDICTED_LENGTH) if all(floored) and p_floored else
    claims.verdict_of(all(f == p_floored for f in floored), all(f != p_floored for f in floored)),
    predicted=f"flat to {tokens(pflat)}" if p_floored else f"no floor (rises from {tokens(first_tok)})",
    measured=("no floor (rises from " + tokens(first_tok) + ")" if not any(floored) else "flat to " +
              (tokens(flats.mid) if flats.low == flats.high else flats.text(".0f", "tokens"))),
    evidence=f"{label(*main)}, margin {margin:.0%}")
p_rise = second.predicted_ms / mine.sort_values("prompt_tokens").iloc[0].predicted_ms
expected_ = (f"a floor up to {tokens(pflat)}" if p_floored else
             f"no floor, pricing {tokens(second.prompt_tokens)} at {p_rise:.2f}x the 1-token pass")
step = ("" if not (all(floored) and p_floored) else ", within one step of the sweep's grid" if verdict == claims.HELD
        else ", more than one step of the sweep's grid away")
length_lean = (lean(flats, pflat / claims.PREDICTED_LENGTH, pflat * claims.PREDICTED_LENGTH, ".0f", " tokens")
               if all(floored) and p_floored else
               "the median reading " + ("matches the prediction" if floored[1] == p_floored else "leans away from the "
                                        "prediction") + ", but the readings off the ends of the intervals do not all "
               "agree on whether there is a floor, so this run cannot decide")
show((f"The time stays within {margin:.0%} of the 1-token pass ({fm.floor_ms:.1f} ms) up to "
       f"**{tokens(flats.mid)}**" if readings[1].flat_until_tokens > first_tok else
       f"There is no floor: the cost rises from the first token, {tokens(second.prompt_tokens)} taking "
       f"{second.time_ms:.1f} ms, **{second.time_ms / fm.floor_ms:.2f}x** the 1-token pass's {fm.floor_ms:.1f} ms")
     + claims.pick(verdict, held=(f", as the cost model predicted ({expected_})." if p_floored else
                                  f", as the cost model predicted: it prices {tokens(second.prompt_tokens)} at "
                                  f"{p_rise:.2f}x the 1-token pass."),
                   not_held=f", but the cost model predicted {expected_}: the pass "
                            + ("grows earlier" if flats.mid < pflat else "stays flat longer") + " than its parts say.",
                   unresolved=f"; the cost model predicted {expected_}, and this run's points are too noisy to say "
                              "which is right."),
     how=f"The 1-token pass is {prose.span(fm.floor_ms_low, fm.floor_ms_high, '.1f', 'ms')} (the 95 % interval of its "
         f"median over runs). The floor's end is read three times, off the points' medians and off the two ends of "
         f"their intervals: {flats.text('.0f', 'tokens') if all(floored) else ', '.join(f'flat to {tokens(r.flat_until_tokens)}' if f else 'no floor' for r, f in zip(readings, floored))}. "
         "It holds when every reading agrees with the cost model's on whether there is a floor and, where both "
         "have one, on where it ends, within one step of the sweep's grid (a factor of two); "
         + (f"in this run {length_lean}." if verdict == claims.UNRESOLVED else f"here they {'do' if verdict == claims.HELD else 'do not'}."))

# %% [markdown]
# Back to the balance point: it assumed that the matrices reach their fastest rate however few rows they have.
# Chapter 0 measured their rate at each row count, `F(M)`. Beside it, the time their arithmetic takes at that
# rate and at the fastest one, and the time the one-row product takes to read their weights (chapter 0's blocks at
# one row):

# %%
by_rows = pd.DataFrame({"rows": f_rates.index, "F_gflop_s": f_rates.to_numpy() / 1e9,
                        "matrices_at_F_ms": f_rates.index * flops_per_token / f_rates.to_numpy() * 1e3,
                        "arithmetic_at_fastest_ms": f_rates.index * flops_per_token / f_many * 1e3,
                        "weight_read_ms": ceilings.matrices(model_name, main_dt, most, "blocks", 1).best * 1e3
                        }).set_index("rows")  # the one-row product: the weights read at the kernel's own rate
off = next((int(p) for p in sorted(mine.prompt_tokens) if p > flats.mid), None)  # the first length off the floor
censored = bool(flats.high >= fm.longest_prompt_tokens)  # a reading flat to the longest prompt: its floor may go on
low_b, high_b = claims.allowed(balance_tokens, claims.PREDICTED_LENGTH)
verdict = register.record("floor_ends_at_balance_point", claims.verdict_of(False, flats.low > high_b) if censored
                          else claims.within(flats, balance_tokens, claims.PREDICTED_LENGTH),
                          predicted=f"floor to {balance_tokens:.0f} tokens (the balance point), within {claims.PREDICTED_LENGTH:g}x",
                          measured=(f"floor to {flats.text('.0f', 'tokens')}" if any(floored) else "no floor")
                          + (", or later: a reading reaches the longest prompt" if censored else ""),
                          evidence=f"{label(*main)}, margin {margin:.0%}; chapter 0's F(M) and streaming read")
gives = ""  # what chapter 0 measured at the first length off the floor, one layer down
if off is not None:
    at_off = by_rows.loc[off]
    gives = (f"{tokens(off)}, where it gives way, chapter 0 measured F({off}) = **{at_off.F_gflop_s:.1f} GFLOP/s**, "
             f"{at_off.F_gflop_s * 1e9 / f_many:.0%} of the {f_many / 1e9:.0f} GFLOP/s of many rows. So the matrices "
             f"take {at_off.matrices_at_F_ms:.3g} ms where their arithmetic at the fastest rate would take "
             f"{at_off.arithmetic_at_fastest_ms:.3g} ms. That is "
             f"{'more' if at_off.matrices_at_F_ms > at_off.weight_read_ms else 'less'} than the "
             f"{at_off.weight_read_ms:.3g} ms the one-row product takes to read their weights.")
    shape, steps_told = ceilings.row_steps(model_name, main_dt, most)  # chapter 0's times between the rows it timed
    gives += "" if not shape else " One layer down, chapter 0's block matrices rise with the row count " + {
        "one-off": "in a one-off step at the second row, not by a cost per row: the shape of a kernel that takes "
                   "another, slower path for more than one row.",
        "steps": "in uneven steps, not by a cost per row: the kernel changes its path, and its speed, with the row "
                 "count.",
        "per row": "by about the same for each added row, at a rate far below the fastest."}[shape]
longest_here = f" It never leaves the floor up to {tokens(flats.mid)}, the longest prompt here."
show(f"By the balance point a pass should cost about the same up to **{balance_tokens:.0f} tokens**. Measured, it "
     f"stays within {margin:.0%} of the 1-token pass " + (f"up to **{tokens(flats.mid)}**" if floored[1] else
                                                         f"only at {tokens(first_tok)} (it has no floor)")
     + claims.pick(
         verdict, held=f", within a factor of {claims.PREDICTED_LENGTH:g} of the balance point. At {gives}",
         not_held=(f", far sooner than the balance point says, because at few rows the matrices do not run at their "
                   f"fastest. At {gives}"
                   if flats.mid < balance_tokens else
                   f", far longer than the balance point says, because it sets the arithmetic against the weights' read "
                   f"at the streaming rate, {block_bytes / read_bw * 1e3:.3g} ms, and the 1-token pass took "
                   f"{prose.ms(fm.floor_ms / 1e3)}, {fm.floor_ms / (block_bytes / read_bw * 1e3):.0f}x that: the margin is "
                   "a share of the whole pass, so more tokens' arithmetic hides under it."
                   + (f" At {gives}" if gives else longest_here)),
         unresolved=(f"; against the balance point that is {close_call(flats, low_b, high_b)}. At {gives}" if gives else
                     f", the longest prompt here, too short a sweep to tell whether its floor ends within a factor of "
                     f"{claims.PREDICTED_LENGTH:g} of the balance point.")),
     how=f"The balance point's length is its FLOP per byte times the blocks' bytes over one token's FLOPs, "
         f"{balance_tokens:.1f} tokens. The floor's end (the last length within the margin; {tokens(first_tok)} means "
         f"no floor) is read off the points' medians and off the two ends of their intervals: "
         f"{', '.join(tokens(r.flat_until_tokens) for r in readings)}. It is as the balance point says when every "
         f"reading lies within one step of the sweep's grid (a factor of {claims.PREDICTED_LENGTH:g}) of it, "
         f"{low_b:.1f} to {high_b:.1f} tokens" + ("; a reading flat to the longest prompt only says the floor ends "
                                                  "there or later" if censored else "")
         + (f". In this run {lean(flats, low_b, high_b, '.0f', ' tokens')}." if verdict == claims.UNRESOLVED else ".")
         + (f" {steps_told}." if off is not None and shape else ""))
prose.shown(by_rows[by_rows.index <= max(off or 0, 2 * balance_tokens)].round(1))

# %%
register.claim("knee_as_predicted", "Time per token stops falling where the cost model's does (within one step "
               "of the sweep's grid).")
pknee = expected[main].knee_tokens
per_token_ms = (mine.time_ms / mine.prompt_tokens).to_numpy()
at_knee = float(per_token_ms[list(mine.prompt_tokens).index(knees.mid)]) if knees.mid in set(mine.prompt_tokens) else None
falls_on = ("" if not fm.knee_confirmed else
            f"kept falling slowly, from {at_knee:.2f} ms a token there to {fm.best_ms_per_token:.2f} ms at "
            f"{tokens(fm.best_at_tokens)}" if at_knee and fm.best_at_tokens > knees.mid else
            f"it is lowest there, {fm.best_ms_per_token:.2f} ms a token" if at_knee else "")
falls_on += ("" if fm.knee_confirmed else f"{tokens(knees.mid)} is the longest prompt measured, so time per token may "
             "fall further beyond it")
verdict = register.record("knee_as_predicted", claims.within(knees, pknee, claims.PREDICTED_LENGTH),
                          predicted=tokens(pknee), measured=knees.text(".0f", "tokens"),
                          evidence=f"{label(*main)}, margin {margin:.0%}")
show(f"Time per token falls as the prompt grows. It comes within {margin:.0%} of its lowest at **{tokens(knees.mid)}**"
     + claims.pick(verdict, held=f", where the cost model puts it ({tokens(pknee)})",
                   not_held=f", where the cost model put it at {tokens(pknee)}",
                   unresolved=f", against the cost model's {tokens(pknee)}: too close to call")
     + (f", and {falls_on}" if falls_on else "") + ".",
     how=f"The knee is the shortest prompt whose time per token is within {margin:.0%} of the lowest measured "
         f"({fm.best_ms_per_token:.2f} ms a token, at {tokens(fm.best_at_tokens)}), read off the points' medians and "
         f"off the two ends of their intervals ({knees.text('.0f', 'tokens')}); it is as predicted when those "
         "readings lie within one step of the sweep's grid (a factor of two) of the cost model's."
         + (" In this run " + lean(knees, pknee / claims.PREDICTED_LENGTH, pknee * claims.PREDICTED_LENGTH, ".0f", " tokens") + "."
            if verdict == claims.UNRESOLVED else ""))

# %%
fig, (ax_t, ax_p) = plt.subplots(1, 2, figsize=(12, 4.5))
for i, ((dt, n), g) in enumerate(sweep.groupby(["dtype", "threads"], sort=False)):
    ax_t.errorbar(g.prompt_tokens, g.time_ms, yerr=[g.time_ms - g.time_ms_low, g.time_ms_high - g.time_ms],
                  marker="o", ms=3, capsize=2, color=f"C{i}", label=label(dt, n))
    ax_t.plot(g.prompt_tokens, g.predicted_ms, ":", color=f"C{i}")
    ax_p.plot(g.prompt_tokens, g.time_ms / g.prompt_tokens, "o-", ms=3, color=f"C{i}", label=label(dt, n))
    ax_p.plot(g.prompt_tokens, g.predicted_ms / g.prompt_tokens, ":", color=f"C{i}")
ax_t.axhspan(fm.floor_ms_low, fm.floor_ms_high * (1 + margin), color="grey", alpha=0.2,
             label=f"on the floor ({label(*main)})" if floored[1] else
             f"within {margin:.0%} of the 1-token pass ({label(*main)}, no floor)")
ax_p.axvline(knees.mid, color="grey", ls="--", label=f"knee, {label(*main)}")
for ax in (ax_t, ax_p):
    ax.set(xscale="log", yscale="log", xlabel="prompt tokens")
    ax.set_xscale("log", base=2)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7)
ax_t.set_ylabel("prefill (ms): median and its 95 % interval;\ndotted: cost model", fontsize=9)
ax_t.set_title((f"{label(*main)}: on the 1-token floor up to {tokens(flats.mid)}" if floored[1] else
                f"{label(*main)}: no floor, the cost rises from the first token")
               + f"\n(cost model: {f'up to {pflat}' if p_floored else 'no floor'})", fontsize=10)
ax_p.set_ylabel("time per prompt token (ms)", fontsize=9)
ax_p.set_title(f"Time per token within {margin:.0%} of its lowest\nfrom {tokens(knees.mid)} (cost model: {pknee})",
               fontsize=10)
fig.tight_layout(w_pad=3)
results.figure(fig, "prefill_time")
plt.show()

# %% [markdown]
# **Takeaway: read the floor and the knee off your own measured points, and price them from the kernels that
# run them: a pass of a few rows is not a matrix-vector product, and not a large product either.**
#
# ## Why not a straight line?
#
# A common summary fits `t(T) = fixed + per_token x T` and calls `fixed` the floor and `fixed / per_token` the
# knee (`lib.sweeps.fit_floor`, weighted to relative error). The cost model says whether a line can describe
# this machine's prefill: fitted to the model's own curve, a line misses it by some amount; fitted to the
# measured points, it should miss them by about as much. The line is fitted from the second prompt length on: the
# step from the 1-token pass to the next length is the floor's question, decided above, and with it in the fit the
# worst miss would be that step again. The 1-token pass is drawn against the line all the same (grey).

# %%
fitted = mine[mine.prompt_tokens > mine.prompt_tokens.min()]  # from the second length on
line = sweeps.fit_floor(fitted.prompt_tokens, fitted.time_ms / 1e3)
model_line = sweeps.fit_floor(fitted.prompt_tokens, fitted.predicted_ms / 1e3)
residual = line.predict(mine.prompt_tokens) * 1e3 / mine.time_ms - 1
fitted_miss = float(np.abs(residual[mine.prompt_tokens > mine.prompt_tokens.min()]).max())
fig, ax = plt.subplots(figsize=(8, 3.2))
ax.bar([str(p) for p in mine.prompt_tokens], residual * 100,
       color=["0.7" if p == mine.prompt_tokens.min() else "C3" if r > 0 else "C0" for p, r in zip(mine.prompt_tokens, residual)])
ax.axhline(0, color="black", lw=0.8)
ax.set(xlabel="prompt tokens", ylabel="fit minus measured (% of measured)",
       title=f"A straight line through {tokens(fitted.prompt_tokens.min())} and more misses them by up to "
             f"{fitted_miss:.0%} ({label(*main)})")
fig.tight_layout()
results.figure(fig, "line_residuals")
plt.show()

# %%
register.claim("straight_line_fits", "A straight line misses the measured prefill times by about what it misses the "
               "cost model's curve by (the two worst misses within the tolerance for a ratio).")
misses = {c: float(np.abs(sweeps.fit_floor(fitted.prompt_tokens, fitted[c] / 1e3).predict(fitted.prompt_tokens) * 1e3
                          / fitted[c] - 1).max()) for c in ("time_ms_low", "time_ms", "time_ms_high")}
worst = Spread(min(misses.values()), misses["time_ms"], max(misses.values()))  # the medians' line, and the ends'
assert abs(misses["time_ms"] - fitted_miss) < 1e-9  # the figure's line is the medians' line
model_worst = float(np.abs(model_line.predict(fitted.prompt_tokens) * 1e3 / fitted.predicted_ms - 1).max())
verdict = register.record("straight_line_fits", claims.within(worst, model_worst, claims.PREDICTED_RATIO),
                          predicted=f"worst residual {model_worst:.0%} (the model's curve)",
                          measured=f"worst residual {worst.text('.0%')}",
                          evidence=f"{label(*main)}, lib.sweeps.fit_floor, {tokens(fitted.prompt_tokens.min())} and more")
show(f"From {tokens(fitted.prompt_tokens.min())} on, a straight line misses the measured points by up to "
     f"**{worst.mid:.0%}** and the cost model's curve by up to {model_worst:.0%}: " + claims.pick(
         verdict, held="the measured curve bends as the cost model's does, because the matrices' rate F(M) climbs with "
                       f"the rows. A line through those points would put a 'fixed cost' of {prose.ms(line.fixed_s)} "
                       f"under every pass, where the 1-token pass measured {fm.floor_ms:.1f} ms; this chapter reads the "
                       "floor and the knee off the points instead.",
         not_held=f"the measured curve bends {'less' if worst.mid < model_worst else 'more'} than the model's.",
         unresolved="too close to the model's miss, or too far from it, to call."),
     how=f"The line is fitted three times, to the points' medians and to the two ends of their intervals; its worst "
         f"misses are {worst.text('.0%')}. They count as the model's when they lie within the tolerance for a ratio "
         f"({claims.PREDICTED_RATIO:g}x) of its {model_worst:.0%}."
         + (" In this run " + lean(worst, model_worst / claims.PREDICTED_RATIO, model_worst * claims.PREDICTED_RATIO, ".0%") + "."
            if verdict == claims.UNRESOLVED else ""))

# %% [markdown]
# ## What a short pass spends its time on
#
# The cost model splits each short pass into its parts; chapter 0 timed each part alone, in the model's own
# layout. If the model is right, the matrices are most of a short pass, the pass rises as they rise, and what is
# left of a 1-token pass is the cost of issuing it.

# %%
short = mine[mine.prompt_tokens <= short_prompts].copy()
short["matrices_ms"] = short.block_matrices_ms + short.LM_head_ms
short["rest_ms"] = short.time_ms - short.matrices_ms
short["matrix_share"] = short.matrices_ms / short.time_ms
results.table(short, "short_passes")
prose.shown(short[["prompt_tokens", "time_ms", "matrices_ms", "attention_ms", "dispatch_ms", "rest_ms", "matrix_share"]].rename(
    columns={"rest_ms": "rest (ms: the time less the priced matrices)"}).round(2))

# %%
register.claim("short_passes_are_matmuls", "At every short prompt, the model's matrices (chapter 0, in the model's "
               "own layout) take at least half the pass.")
shares = [Spread(r.matrices_ms / r.time_ms_high, r.matrix_share, r.matrices_ms / r.time_ms_low) for r in short.itertuples()]
low_share, high_share = short.matrix_share.min(), short.matrix_share.max()
verdict = register.record("short_passes_are_matmuls", claims.at_least(claims.extreme(shares, largest=False), 0.5),
                          predicted="at least 50%", measured=f"{low_share:.0%} to {high_share:.0%}",
                          evidence=f"{label(*main)}; chapter 0's blocks and head")
at_min = tokens(short.prompt_tokens[short.matrix_share.idxmin()])
show("The model's matrices, at chapter 0's rates for their rows, take " + claims.pick(
    verdict, held=f"**{low_share:.0%} to {high_share:.0%}** of each pass up to {tokens(short.prompt_tokens.max())}: "
                  "more than half of every short pass.",
    not_held=f"{low_share:.0%} of the pass at {at_min}, less than half: most of that pass is elsewhere.",
    unresolved=f"{low_share:.0%} to {high_share:.0%} of each pass up to {tokens(short.prompt_tokens.max())}; whether "
               f"they take at least half at {at_min} is {close_call(claims.extreme(shares, largest=False), 0.5)}."),
    how="Each share is the matrices' price over the pass's median, and over the two ends of that median's 95 % "
        "interval; the claim holds when the smallest share's whole range is at least half."
        + ("" if verdict != claims.UNRESOLVED else
           f" At {at_min}, {lean(claims.extreme(shares, largest=False), 0.5, np.inf, '.0%')}."))

# %% [markdown]
# Whether the pass rises as its matrices do, from one token to the longest short prompt:

# %%
register.claim("rise_is_matmuls", "A short pass rises over the 1-token pass by what the cost model's pass rises (each "
               "run's own rise), within the tolerance for a predicted time, and most of that rise is in its matrix "
               "products (under the profiler).")
one, top = short.iloc[0], short.iloc[-1]
in_runs = runs_table[(runs_table.dtype == main_dt) & (runs_table.threads == most)].pivot_table(
    index="run", columns="prompt_tokens", values="time_ms").dropna(subset=[one.prompt_tokens, top.prompt_tokens])
rise = Spread.of(in_runs[top.prompt_tokens] - in_runs[one.prompt_tokens])  # both lengths ran in every run
rise_mm = top.matrices_ms - one.matrices_ms
p_top, p_one = cost[main].prefill(int(top.prompt_tokens)), cost[main].prefill(1)
rise_model = (p_top.best - p_one.best) * 1e3
rise_issue = (p_top.term("dispatch").best - p_one.term("dispatch").best) * 1e3
per_call_ms = profiling.cost_per_operator(device)
lm_main = models[main_dt]
one_ids, top_ids = (random_prompt(t, lm_main.vocab_size, device=device) for t in (1, int(top.prompt_tokens)))


def profiled(ids) -> tuple[float, float]:
    """One profiled pass over ``ids``: its time in the matrix products and elsewhere (ms), the profiler's own cost
    per operator call taken off."""
    o = profiling.operators(lambda: phases.prefill(lm_main, ids), passes=2, device=device)
    on, off = o[o.term == "matrices"], o[o.term != "matrices"]
    return tuple(max(g.self_ms.sum() - per_call_ms * g.calls.sum(), 1e-6) for g in (on, off))


with use_threads(most):  # the two lengths profiled in turns, nine times: the rise's split has an interval
    split = [(profiled(top_ids), profiled(one_ids)) for _ in range(max(profiled_runs, 9))]
mm_share = Spread.of([min(max((t[0] - o[0]) / max(sum(t) - sum(o), 1e-6), 0.0), 1.0) for t, o in split])  # 0 to 100 %
priced_rise = (claims.within(rise, rise_model, claims.PREDICTED_TIME) if rise.low > 0 and rise_model > 0 else
               claims.NOT_HELD if rise.high <= 0 < rise_model else claims.UNRESOLVED)
verdict = register.record(
    "rise_is_matmuls", claims.every([priced_rise, claims.at_least(mm_share, 0.5)]),
    predicted=f"{rise_model:+.1f} ms (the cost model), at least half in the matrices",
    measured=f"{rise.text('+.1f', 'ms')} (the pass); {mm_share.text('.0%')} of the profiled rise in the matrices",
    evidence=f"{label(*main)}, each run's own rise; torch.profiler, {len(split)} runs")
parts = (f"of that price, the matrices' rates account for {rise_mm:+.1f} ms and the longer pass's small kernels and "
         f"issuing for {rise_issue:+.1f} ms")
in_mm = f"Under the profiler, {mm_share.mid:.0%} of the rise is in the matrix products"
show(f"From 1 to {tokens(top.prompt_tokens)} the pass grows by {rise.text('+.1f', 'ms')}, " + claims.pick(
    priced_rise, held=f"as priced ({rise_model:+.1f} ms); {parts}.",
    not_held=f"{'more' if rise.mid > rise_model else 'less'} than the {rise_model:+.1f} ms priced ({parts}).",
    unresolved=f"against {rise_model:+.1f} ms priced ({parts}): " + (
        close_call(rise, rise_model / claims.PREDICTED_TIME, rise_model * claims.PREDICTED_TIME)
        if rise_model > 0 else "the cost model priced no rise to compare it with") + ".")
     + " " + claims.pick(claims.at_least(mm_share, 0.5), held=f"{in_mm}, as the model has it.",
                         not_held=f"{in_mm}: most of it is elsewhere, in the small operators and between them.",
                         unresolved=f"{in_mm}, about half."),
    how=f"The rise is taken within each run (both lengths ran in every run); its range is the 95 % interval of the "
        f"median rise. It counts as priced within {claims.PREDICTED_TIME:g}x of the price either way"
        + (f" ({prose.span(rise_model / claims.PREDICTED_TIME, rise_model * claims.PREDICTED_TIME, '+.1f', 'ms')})"
           if rise_model > 0 else "")
        + (f"; in this run {lean(rise, rise_model / claims.PREDICTED_TIME, rise_model * claims.PREDICTED_TIME, '+.1f', ' ms')}"
           if priced_rise == claims.UNRESOLVED and rise_model > 0 else "")
        + f". The split is measured apart: the two lengths profiled in turns, {len(split)} times, each pass's time in "
          f"the matrix products and elsewhere (the profiler's own cost per operator call taken off); the share is the "
          f"matrices' rise over the whole profiled rise, {mm_share.text('.0%')}, and counts as most when its whole "
          "interval is at least half.")

# %% [markdown]
# The rest of a 1-token pass, its time less its matrices, is the difference of two larger numbers, each with an
# interval of its own. So it is also measured directly, under the profiler: the pass's time that is not in a matrix
# product (its small operators and the time between operators), less the profiler's own cost per operator call
# (`lib.profiling.cost_per_operator`). Nine profiled passes (or `profiled_runs`, if more) give it an interval.

# %%
register.claim("rest_is_launch_floor", "What is not matrix product in a 1-token pass is about the cost of issuing it "
               "(chapter 0's dispatch) and its attention, within the tolerance for a predicted time.")
p1 = cost[main].prefill(1)
issue_ = Spread(p1.term("dispatch").best + p1.term("attention").best, p1.term("dispatch").best + p1.term("attention").best,
                p1.term("dispatch").median + p1.term("attention").median)
one_token_runs = max(profiled_runs, 9)  # a 1-token pass profiles in milliseconds: nine give its median an interval
with use_threads(most):                 # that leaves out the slowest and fastest runs (lib.claims.Spread.of)
    rest_runs, matrix_runs = [], []
    for _ in range(one_token_runs):
        o = profiling.operators(lambda: phases.prefill(lm_main, one_ids), passes=2, device=device)
        off_matrix, on_matrix = o[o.term != "matrices"], o[o.term == "matrices"]
        rest_runs.append(max(off_matrix.self_ms.sum() - per_call_ms * off_matrix.calls.sum(), 1e-6) / 1e3)
        matrix_runs.append(max(on_matrix.self_ms.sum() - per_call_ms * on_matrix.calls.sum(), 1e-6) / 1e3)
rest, matrix_in_pass = Spread.of(rest_runs), Spread.of(matrix_runs)
verdict = register.record("rest_is_launch_floor", claims.within(rest, issue_, claims.PREDICTED_TIME),
                          predicted=prose.span(issue_.low * 1e3, issue_.high * 1e3, ".1f", "ms"),
                          measured=(rest * 1e3).text(".1f", "ms"),
                          evidence=f"{label(*main)}, 1 token, torch.profiler, {one_token_runs} runs")
issue_cost = (f"the {prose.span(issue_.low * 1e3, issue_.high * 1e3, '.1f', 'ms')} chapter 0's "
              "[dispatch](glossary.md#dispatch) and attention over one token cost")
show(f"The rest of a 1-token pass is {(rest * 1e3).text('.1f', 'ms')} under the profiler (its own cost taken off), "
     + claims.pick(
         verdict, held=f"about {issue_cost}, as predicted.",
         unresolved=f"against {issue_cost}: " + close_call(rest, issue_.low / claims.PREDICTED_TIME,
                                                           issue_.high * claims.PREDICTED_TIME) + ".",
         not_held=f"against {issue_cost}. The profiler names what took it (the last run, its own cost a call taken off): "
                  + prose.and_list([f"{'issuing between operators' if r.operator == profiling.BETWEEN else '`' + r.operator + '`'} "
                                    f"{max(r.self_ms - per_call_ms * r.calls, 0):.1f} ms"
                                    for r in off_matrix.head(3).itertuples()])
                  + f". Chapter 0's hollowed pass, which issues the same operations, priced them "
                    f"{'lower' if rest.mid > issue_.high else 'higher'}; this run does not time which of them differ."),
     how=f"The rest is measured in each of {one_token_runs} profiled passes; its range is the 95 % interval of the "
         f"median. It counts as the predicted cost within {claims.PREDICTED_TIME:g}x either way of the price's range "
         f"({prose.span(issue_.low * 1e3 / claims.PREDICTED_TIME, issue_.high * 1e3 * claims.PREDICTED_TIME, '.1f', 'ms')})"
         + (f"; in this run {lean(rest * 1e3, issue_.low * 1e3 / claims.PREDICTED_TIME, issue_.high * 1e3 * claims.PREDICTED_TIME, '.1f', ' ms')}."
            if verdict == claims.UNRESOLVED else "."))

# %% [markdown]
# The table of short passes above also has a rest for the 1-token pass, and it is not the same number: both take
# the matrices off a pass, but not the same matrices.

# %%
one_row = short.iloc[0]
show(f"The table's rest, the pass less its matrices at chapter 0's price, is **{one_row.rest_ms:.1f} ms**: the sweep's "
     f"median 1-token pass ({one_row.time_ms:.1f} ms) less {one_row.matrices_ms:.1f} ms, the matrices' price (timed "
     f"alone). The profiled rest, measured outside the matrices by the profiler, is "
     f"**{(rest * 1e3).text('.1f', 'ms')}**: inside the pass the matrices took {(matrix_in_pass * 1e3).text('.1f', 'ms')}, "
     f"{'more' if matrix_in_pass.mid * 1e3 > one_row.matrices_ms else 'less'} than their price. The two differ because "
     f"the first counts whatever the matrices take beyond their price as rest, and because the profiled pass "
     f"({(rest.mid + matrix_in_pass.mid) * 1e3:.1f} ms, the profiler's own cost taken off) is not the sweep's.")

# %% [markdown]
# **Takeaway: price a short pass from its parts (its matrices at the rate their few rows reach, the cost of
# issuing it) and time those parts before calling a floor a fixed cost.**
#
# ## The longest prompt, more threads, and a 16-bit dtype
#
# Past the knee a prefill is priced by its FLOPs at `F(T)`; the regime rule says whether it is compute-bound.
# More threads and a narrower dtype change the ceilings, and the cost model predicts by how much they change
# the pass: each prediction below is the ratio of two predicted times, decided with the tolerance for a ratio.

# %%
longest = sweep.groupby(["dtype", "threads"], sort=False).tail(1)
results.table(longest[keys + ["time_ms", "time_ms_low", "time_ms_high", "predicted_ms", "tokens_per_s",
                              "achieved_gflop_s", "regime", "over_predicted"]], "achieved_rate")
register.claim("longest_prompt_compute_bound", "At the longest prompt, the pass is compute-bound: its matrices' "
               "arithmetic, at the rate chapter 0 measured for that many rows, takes at least half of the measured pass.")
top_row = longest[(longest.dtype == main_dt) & (longest.threads == most)].iloc[0]
n_top = int(top_row.prompt_tokens)
top_key = (main_dt, most, n_top)
f_top = ceilings.matrix_rate(model_name, main_dt, most, n_top)  # F(T), FLOP/s: chapter 0's rate at that many rows
arithmetic_s = n_top * flops_per_token / f_top  # the blocks' FLOPs at F(T), seconds
pass_top = spread[top_key]
arith_share = Spread(arithmetic_s / pass_top.high, arithmetic_s / pass_top.mid, arithmetic_s / pass_top.low)
verdict = register.record("longest_prompt_compute_bound", claims.at_least(arith_share, 0.5),
                          predicted="compute-bound: at least 50 % arithmetic",
                          measured=f"{arith_share.text('.0%')} of the pass ({prose.ms(arithmetic_s)} of "
                                   f"{(pass_top * 1e3).text(',.0f', 'ms')})",
                          evidence=f"{label(*main)}, {tokens(n_top)}: the blocks' FLOPs at chapter 0's F({n_top})")
gflops = top_row.achieved_gflop_s
rule_note = ("" if top_row.regime == "compute-bound" else
             f" The sweep's table labels it *{top_row.regime}*, since the one rule also weighs the pass against its "
             "whole price.")
show(f"At {tokens(n_top)} the blocks' arithmetic alone, at the rate chapter 0 measured for that many rows "
     f"({f_top / 1e9:,.0f} GFLOP/s), takes {prose.ms(arithmetic_s)}, **{arith_share.mid:.0%}** of the measured pass "
     f"({prose.ms(pass_top.mid)}): " + claims.pick(
         verdict, held=f"the pass is compute-bound.{rule_note} It runs at {gflops:.1f} GFLOP/s, "
                       f"{gflops * 1e9 / ceilings.square_flops(main_dt, most):.0%} of the square product's peak: "
                       f"{top_row.tokens_per_s:,.0f} tokens per second.",
         not_held="less than half, so the pass is not compute-bound. Most of its time is not the arithmetic "
                  f"at chapter 0's rate: either the matrices ran slower inside the pass or other work took "
                  f"it.{rule_note}",
         unresolved="about half, too close to call whether arithmetic takes most of the pass."),
     how=f"The share is the arithmetic's time over the 95 % interval of the pass's median "
         f"({(pass_top * 1e3).text(',.0f', 'ms')}), {arith_share.text('.0%')}; the pass is compute-bound when all of that "
         "interval is at least half. A pass slower than its arithmetic allows would fail it.")


# %%
def ratio_claim(claim: str, a: tuple, b: tuple, n: int, after: str = "") -> tuple[str, Spread, str, str]:
    """Decide that config ``a`` is slower than ``b`` at ``n`` tokens by the ratio the cost model predicts, on each
    run's own ratio (both configurations ran in every run). Returns the verdict, the measured ratio, the words
    that set it beside the prediction (``after`` follows the prediction) and how it was decided."""
    pair = runs_table[runs_table.prompt_tokens == n].pivot_table(index="run", columns=["dtype", "threads"],
                                                                 values="time_ms").dropna(subset=[a, b])
    measured = Spread.of(pair[a] / pair[b])
    predicted = cost[a].prefill(n).best / cost[b].prefill(n).best
    verdict = register.record(claim, claims.within(measured, predicted, claims.PREDICTED_RATIO),
                              predicted=f"{predicted:.2f}x", measured=measured.text(".2f", "x"),
                              evidence=f"{label(*a)} against {label(*b)} at {tokens(n)}")
    lo, hi = predicted / claims.PREDICTED_RATIO, predicted * claims.PREDICTED_RATIO
    return verdict, measured, claims.pick(
        verdict, held=f"as the cost model predicted ({predicted:.2f}x{after})",
        not_held=f"not the {predicted:.2f}x the cost model predicted{after}",
        unresolved=f"against the {predicted:.2f}x the cost model predicted{after}: {close_call(measured, lo, hi)}"), (
        f"The ratio is taken within each run (both ran in every run), and its range is the 95 % interval of the "
        f"median ratio, {measured.text('.2f', 'x')}. It counts as predicted within {claims.PREDICTED_RATIO:g}x either "
        f"way, {lo:.2f}x to {hi:.2f}x" + (f"; in this run {lean(measured, lo, hi, '.2f', 'x')}."
                                          if verdict == claims.UNRESOLVED else "."))


threads_said = "More threads speed up the longest prompt both ran by the ratio the cost model predicts."
register.claim("threads_speed_long_prompt", threads_said)
fewest = min(threads)
both = [p for p in kept[main] if p in kept.get((main_dt, fewest), []) and (main_dt, fewest, p) in spread]
if fewest != most and both:
    verdict, gain, versus, how = ratio_claim("threads_speed_long_prompt", (main_dt, fewest), main, max(both))
    show(f"{most} threads make the pass of {tokens(max(both))} "
         + claims.pick(verdict, held=f"**{gain.mid:.2f}x**", not_held=f"{gain.mid:.2f}x", unresolved=gain.text(".2f", "x"))
         + f" as fast as {fewest} thread{'s' * (fewest != 1)}, {versus}.", how=how)
else:
    why_not = "one thread count only (a GPU, or `threads` set to one value)"
    register.record("threads_speed_long_prompt", None, evidence=why_not)
    show(f"{threads_said} This run does not decide it: {why_not}.")

# %%
half = next((d for d in models if d != main_dt), None)
common = [p for p in kept[main] if half and p in kept.get((half, most), []) and (half, most, p) in spread]
kind = "" if half is None else ("with hardware matrix instructions" if ceilings.hardware_support(half)
                                else "without matrix instructions: a slow kernel")
for claim, at in (("half_long_prompt", max), ("half_short_prompt", min)):
    half_said = (f"At the {'longest' if at is max else 'shortest'} prompt both ran, the 16-bit dtype's speed relative "
                 "to fp32's is the ratio the cost model predicts (faster or slower).")
    register.claim(claim, half_said)
    if not common:
        register.record(claim, None, evidence="one dtype only in this run")
        show(f"{half_said} This run does not decide it: one dtype only in this run.")
        continue
    verdict, gain, versus, how = ratio_claim(claim, main, (half, most), at(common), after=f" for {half} {kind}")
    faster = ("faster than" if gain.low > 1 else "slower than" if gain.high < 1 else
              "about as fast as")  # a direction only beyond the runs' interval
    show(f"At {tokens(at(common))} {half} " + claims.pick(
        verdict, held=f"is {faster} {main_dt}: it runs **{gain.text('.2f', 'x')}** as fast",
        not_held=f"is {faster} {main_dt}: it runs {gain.text('.2f', 'x')} as fast",
        unresolved=f"runs {gain.text('.2f', 'x')} as fast as {main_dt}") + f", {versus}.", how=how)

# %% [markdown]
# ## One layer down: where the worst pass's time went
#
# Where a pass and its prediction disagree, the profiler says which operators took the time (`lib.profiling`:
# each operator's own time under `torch.profiler`, sorted into the cost model's terms, and what no operator
# holds, which is Python issuing the next one). Here it takes apart the pass furthest from its prediction, of
# every configuration: the one whose ratio's interval lies furthest from 1, above or below (furthest beyond doubt,
# not the one a single slow run pushed out). The profiler's own cost makes the profiled pass a little longer than
# the sweep's. The pass is profiled `profiled_runs` times, so the share of the miss a part holds has an interval;
# the operators' table gives each operator's median over those runs.

# %%
worst_key = max(ratio, key=lambda k: beyond_doubt(ratio[k]))
sign = 1.0 if ratio[worst_key].mid >= 1 else -1.0  # a pass over its price: its excess; under it: its shortfall
miss = "excess" if sign > 0 else "shortfall"
worst_row = \
    sweep[(sweep.dtype == worst_key[0]) & (sweep.threads == worst_key[1]) & (sweep.prompt_tokens == worst_key[2])].iloc[0]
w_cfg, w_tokens = (worst_row["dtype"], int(worst_row.threads)), int(worst_row.prompt_tokens)
w_ids = random_prompt(w_tokens, models[w_cfg[0]].vocab_size, device=device)
long_pass = cost[w_cfg].prefill(w_tokens).median >= long_s  # a long pass: one profiled pass a run, no warm-up
with use_threads(w_cfg[1]):
    profiled = [profiling.operators(lambda: phases.prefill(models[w_cfg[0]], w_ids), passes=1 if long_pass else 2,
                                    warmup=0 if long_pass and i else 1, device=device) for i in range(profiled_runs)]
tables = [profiling.beside_prediction(o, pass_price[worst_key]) for o in profiled]
ops = (pd.concat(profiled).groupby(["operator", "term"], as_index=False)  # each operator's median over the runs
       .median(numeric_only=True).sort_values("self_ms", ascending=False).reset_index(drop=True))
apart = tables[0].set_index("term").assign(  # each part's median over the profiled runs
    profiled_ms=pd.concat([t.set_index("term").profiled_ms for t in tables], axis=1).median(axis=1))
apart = apart.assign(excess_ms=apart.profiled_ms - apart.predicted_ms)
apart = apart.assign(miss_ms=apart.excess_ms * sign).sort_values("miss_ms", ascending=False).reset_index()
results.table(ops, "worst_pass_operators")
results.table(apart, "worst_pass_parts")
display(prose.shown(ops.head(8).round(3)))
prose.shown(apart.round(2))

# %%
register.claim("worst_pass_taken_apart", "In the pass furthest from its prediction, one part of the cost model holds "
               "most of the time beyond it.")

def share_of(table: pd.DataFrame, term: str) -> float:
    """The part ``term``'s share of the pass's miss (the parts' misses in its direction summed), in one profiled
    run."""
    parts = table.set_index("term").excess_ms * sign
    return max(float(parts[term]), 0.0) / max(parts[parts > 0].sum(), 1e-9)


top_part = apart.iloc[0]
shares = Spread.of(share_of(t, top_part.term) for t in tables)
share = shares.mid
in_part = ops[ops.term == top_part.term].iloc[0]
note = (" The cost model prices no copies inside a pass: here a copy made inside the LM head's batched product of "
        "the strided last position (transformers' `logits_to_keep` slice) copies the head's weight at every pass."
        if top_part.term == "copies" and (ops.operator == "aten::bmm").any() else "")
_top = pass_price[worst_key].median / pass_price[worst_key].best  # the price's own span, fastest to median calls
missed_it = claims.within(ratio[worst_key], Spread(1.0, 1.0, _top), claims.PREDICTED_TIME) == claims.NOT_HELD
verdict = register.record("worst_pass_taken_apart", claims.at_least(shares, 0.5) if missed_it else None,
                          predicted=f"one part holds most of the {miss}",
                          measured=(f"{top_part.term}: {shares.text('.0%')} over {profiled_runs} profiled runs"
                                    if missed_it else
                                    f"no miss: the furthest pass at {ratio[worst_key].text('.2f', 'x')} its price"),
                          evidence="worst_pass_parts.csv, torch.profiler")
took = f"The pass of {label(*w_cfg)} at {tokens(w_tokens)} took {worst_row.over_predicted:.2f}x its prediction"
show(claims.pick(
    verdict, held=f"{took}; under the profiler **{top_part.term}** took {prose.ms(top_part.profiled_ms / 1e3)} against "
                  f"the {prose.ms(top_part.predicted_ms / 1e3)} the cost model gave it, {share:.0%} of the {miss}: one "
                  f"part holds most of it. Its largest operator is `{in_part.operator}` "
                  f"({prose.ms(in_part.self_ms / 1e3)}).{note}",
    not_held=f"{took}, and its {miss} is spread over the parts (the largest, {top_part.term}, holds {share:.0%} of it): "
             "no one part explains it.",
    unresolved=f"{took}. Under the profiler {top_part.term}, the part furthest {'over' if sign > 0 else 'under'} its "
               f"price, holds {shares.text('.0%')} of the {miss}: whether that is most of it is "
               f"{close_call(shares, 0.5)}.",
    not_measured=f"The pass furthest from its price ({label(*w_cfg)} at {tokens(w_tokens)}, "
                 f"{ratio[worst_key].text('.2f', 'x')} its prediction) was not clearly off it, so there was no miss to "
                 "take apart. Its parts "
                 f"are tabled above, where **{top_part.term}** holds the largest part of its {miss} "
                 f"({top_part.excess_ms:+.1f} ms: {prose.ms(top_part.profiled_ms / 1e3)} under the profiler against "
                 f"{prose.ms(top_part.predicted_ms / 1e3)} priced)."),
    how=f"A pass is a miss when the 95 % interval of its ratio to its price lies wholly outside its band (its price's "
        f"range, widened by {claims.PREDICTED_TIME:g}x). A part holds most of the {miss} when its share, over the "
        f"{profiled_runs} profiled runs, is at least half"
        + (f"; in this run {lean(shares, 0.5, np.inf, '.0%')}." if verdict == claims.UNRESOLVED else "."))

# %% [markdown]
# ## Computing less of the output
#
# A prefill only needs the logits of the last position, to choose the first token. Computing them for every
# position runs the LM head `T` times instead of once. The head's size, and chapter 0's rates for the blocks and
# the head at this section's prompt lengths:

# %%
head_weights = base_shape.d_model * base_shape.vocab
head_rows_measured = ceilings.rows_measured(model_name, main_dt, most, "head")
show(f"The LM head is {base_shape.d_model:,} x {base_shape.vocab:,}: **{head_weights / 1e6:.3g}M weights**, beside the "
     f"blocks' {shape_main.layers * shape_main.block_params / 1e6:.3g}M; one token does "
     f"{2 * head_weights / 1e6:.3g} MFLOP in it and {flops_per_token / 1e6:.3g} MFLOP in the blocks. This section's "
     f"prompts: {', '.join(tokens(p) for p in logits_prompts)}. Chapter 0 timed the head at "
     f"{', '.join(f'{r:g}' for r in head_rows_measured)} rows (in the table, a length between those is interpolated); "
     f"the pass is this chapter's sweep above, logits at the last position only, beside its price by the cost model "
     f"({label(*main)}):")
pass_here = sweep[(sweep.dtype == main_dt) & (sweep.threads == most)].set_index("prompt_tokens").time_ms
prose.shown(pd.DataFrame({"pass, last position (ms)": {p: pass_here.get(p, np.nan) for p in logits_prompts},
              "its price (ms)": {p: cost[main].prefill(p).best * 1e3 for p in logits_prompts},
              "head at 1 row (ms)": ceilings.matrices(model_name, main_dt, most, "head", 1).best * 1e3,
              "head at T rows (ms)": {p: ceilings.matrices(model_name, main_dt, most, "head", p).best * 1e3
                                      for p in logits_prompts},
              "head interpolated": {p: p not in head_rows_measured for p in logits_prompts}}
             ).rename_axis("prompt tokens T").round(2))

# %% [markdown] tags=["predict"]
# **Predict first.** With every position's logits the head runs `T` rows instead of one (its time at both is in
# the table just above). At the longest of these prompts, how many milliseconds do the extra rows add, and what
# fraction of the all-position pass (the last-position pass plus those milliseconds) does computing the last
# position's logits only save? (The book prices the fraction on the cost model's pass, the table's `its price`;
# on the measured pass it comes out a little different.)

# %% [markdown]
# The FLOP count predicts the fraction saved (`lib.roofline.last_logits_saving`, the source chapter's prediction);
# the cost model prices the two passes with the head at `T` rows and at one, at the rates chapter 0 measured for
# those rows. Each run times both kinds back to back at every length (in alternating order, one pass each, after a
# warm-up in the first run), so the extra time is taken within a run. The claim sets each length's extra time
# against its price, run by run, and takes the geometric mean of those ratios over the lengths (a sum would be the
# longest length's alone).

# %%
lm = models[main_dt]
pairs = []
with use_threads(most):
    for run in progress(range(1, logits_runs + 1), desc="logits runs"):
        for p in logits_prompts:
            ids = random_prompt(p, lm.vocab_size, device=device)
            row = dict(run=run, prompt_tokens=p)
            for kind in ("last", "all") if run % 2 else ("all", "last"):
                t = timing.measure(lambda: phases.prefill(lm, ids, logits=kind), device, warmup=int(run == 1), repeats=1)
                row[f"{kind}_ms"] = t.low_ms
            pairs.append(dict(row, saving=1 - row["last_ms"] / row["all_ms"], extra_ms=row["all_ms"] - row["last_ms"]))
pairs = pd.DataFrame(pairs)
results.table(pairs, "last_vs_all_runs")
saving = timing.median_range(pairs, "prompt_tokens", ["last_ms", "all_ms", "saving", "extra_ms"])
saving["flop_count_saving"] = [roofline.last_logits_saving(base_shape, p) for p in saving.prompt_tokens]
saving["predicted_extra_ms"] = [(cost[main].prefill(p, logits="all").best - cost[main].prefill(p).best) * 1e3
                                for p in saving.prompt_tokens]
saving["predicted_extra_median_ms"] = [(cost[main].prefill(p, logits="all").median - cost[main].prefill(p).median)
                                       * 1e3 for p in saving.prompt_tokens]  # at chapter 0's median calls
saving["predicted_saving"] = [1 - cost[main].prefill(p).best / cost[main].prefill(p, logits="all").best
                              for p in saving.prompt_tokens]


def price_span(best_ms: float, median_ms: float) -> Spread:
    """A price at chapter 0's fastest calls and at its median calls, in seconds: the range every cost-model price
    is allowed (``lib.claims.within``)."""
    return Spread(min(best_ms, median_ms) / 1e3, best_ms / 1e3, max(best_ms, median_ms) / 1e3)
results.table(saving, "last_vs_all_logits")
prose.shown(saving.round(3))

# %%
saving_said = ("Over these lengths, the time the all-position logits add is what the cost model prices the LM head's "
               "extra rows at, within the tolerance for a predicted time (each length's extra time over its price, run "
               "by run, their geometric mean over the lengths).")
register.claim("last_logits_saving_as_predicted", saving_said)
head_rows = ", ".join(map(str, ceilings.rows_measured(model_name, main[0], main[1], "head")))
priced = saving.set_index("prompt_tokens")
over_price = {p: Spread.of(g.extra_ms / priced.predicted_extra_ms[p]) for p, g in pairs.groupby("prompt_tokens")
              if priced.predicted_extra_ms[p] > 0}  # each length's extra time over its price, within its runs
band_top = claims.geomean_of([priced.predicted_extra_median_ms[p] / priced.predicted_extra_ms[p] for p in over_price]
                             ) if over_price else None  # chapter 0's median calls over its fastest: the band's top
priced_all = bool(over_price) and len(over_price) == len(saving)
zero = [p for p, v in over_price.items() if v.low <= 0]  # an extra time not told apart from none (or below it)
geo = claims.geomean_of(list(over_price.values())) if priced_all and not zero else None
verdict = register.record("last_logits_saving_as_predicted", None if not priced_all else
                          claims.within(geo, Spread(min(band_top.mid, 1.0), 1.0, max(band_top.mid, 1.0)),
                                        claims.PREDICTED_TIME) if geo else
                          claims.NOT_HELD if any(over_price[p].high <= 0 for p in zero) else claims.UNRESOLVED,
                          predicted=f"1x their price (up to {band_top.mid:.2f}x at chapter 0's median calls)"
                          if priced_all else "",
                          measured=(geo.text(".2f", "x") + " (geometric mean over the lengths)" if geo else
                                    ", ".join(f"{tokens(p)}: {v.text('.2f', 'x')}" for p, v in over_price.items())),
                          evidence=f"last_vs_all_runs.csv, {label(*main)}, {logits_runs} runs")
over = f"the {len(saving)} lengths" if len(saving) > 1 else "the one length"
texts = (f"{prose.and_list(f'{x:.1f}' for x in saving.extra_ms)} ms at "
         f"{prose.and_list(f'{p:,}' for p in saving.prompt_tokens)} tokens, priced at "
         f"{prose.and_list(f'{x:.1f}' for x in saving.predicted_extra_ms)} ms. Taking the last position's logits only "
         f"saved {prose.and_list(f'{x:.0%}' for x in saving.saving)} of the all-position pass")
far_off = max(over_price, key=lambda p: abs(np.log(max(over_price[p].mid, 1e-3)))) if over_price else None
flop = f" The FLOP count alone predicted savings of {prose.and_list(f'{x:.0%}' for x in saving.flop_count_saving)}."
worst = (f"The length furthest from its price is {tokens(far_off)}, {over_price[far_off].text('.2f', 'x')}."
         if far_off and geo else "")
lo_, hi_ = 1 / claims.PREDICTED_TIME, (band_top.mid * claims.PREDICTED_TIME if band_top else np.inf)
cost_ = f"Over {over} the extra head rows cost **{geo.text('.2f', 'x')}** their price" if geo else ""
show((f"Computing every position's logits added {texts}. " if priced_all else "") + claims.pick(
    verdict, held=f"{cost_}, as predicted. {worst}{flop}",
    not_held=(f"{cost_}: {'more' if geo.mid > 1 else 'less'} than chapter 0's head at those rows costs. {worst}"
              if geo else f"At {prose.and_list(tokens(p) for p in zero if over_price[p].high <= 0)} the all-position "
              "pass took no longer than the last-position one, so no ratio to the price is given.")
             + f" One layer down, below, the profiler splits the longest.{flop}",
    unresolved=(f"{cost_}: {close_call(geo, lo_, hi_)}. {worst}" if geo else
                f"At {prose.and_list(tokens(p) for p in zero)} the extra time is too small to tell from none, so no "
                "ratio to the price is given.")
               + flop,
    not_measured=f"{saving_said} This run does not decide it: the cost model prices no extra time for the head's extra "
                 f"rows at some of {over} (chapter 0 timed the LM head at {head_rows} rows, and more rows took it no "
                 "longer), so there is nothing to set the measured extra against."),
    how=None if not priced_all else
    "Each length's extra time is taken within a run (the two passes back to back) and set over its price; the "
    "figure is the geometric mean of those ratios over the lengths, with its 95 % interval. It counts as priced "
    f"within {lo_:.2f}x to {hi_:.2f}x: the price's own range (chapter 0's fastest calls to its median ones), widened by "
    f"{claims.PREDICTED_TIME:g}x. A length whose extra time's interval reaches zero gives no ratio"
    + (f"; in this run {lean(geo, lo_, hi_, '.2f', 'x')}." if geo and verdict == claims.UNRESOLVED else "."))
facts = load_reference("ch09_facts").set_index("fact").value.astype(float)
show(f"The source chapter predicted {facts['last_position_logits_saving_predicted']:.0f} per cent for GPT-2 small from "
     f"the FLOP count and measured {facts['last_position_logits_saving_cpu_lo']:.0f} to "
     f"{facts['last_position_logits_saving_cpu_hi']:.0f} per cent on a CPU, and "
     f"{facts['last_position_logits_saving_gpu_fp32_512plus_lo']:.0f} to "
     f"{facts['last_position_logits_saving_gpu_fp32_512plus_hi']:.0f} per cent on its GPU in fp32 from 512 tokens.")

# %% [markdown]
# One layer down: the two passes at the longest of these lengths under the profiler, their operators' time
# summed by the cost model's terms, `profiled_runs` times in turn (so the difference has an interval, taken pair
# by pair). The
# matrices' difference is the LM head's extra rows; the rest of the difference is what the head's extra output
# costs the pass around it.

# %%
n_logits = int(saving.prompt_tokens.max())
ids = random_prompt(n_logits, lm.vocab_size, device=device)
pairs_apart = []
with use_threads(most):
    for _ in range(profiled_runs):
        by_kind = {kind: profiling.operators(lambda: phases.prefill(lm, ids, logits=kind), passes=2, device=device)
                   .groupby("term").self_ms.sum() for kind in ("last", "all")}
        pairs_apart.append(pd.DataFrame(by_kind).fillna(0.0).assign(extra_ms=lambda d: d["all"] - d["last"]))
logits_parts = pd.concat(pairs_apart).groupby(level=0).median()  # each term's median over the pairs
extra_mm_runs = Spread.of(p.extra_ms.get("matrices", 0.0) / 1e3 for p in pairs_apart)
results.table(logits_parts.reset_index(), "logits_parts")
head_said = ("Under the profiler, the matrices' part of the all-position pass's extra time is what the cost model "
             "prices the LM head's extra rows at, within the tolerance for a predicted time.")
register.claim("logits_extra_is_the_head", head_said)
_at = saving.set_index("prompt_tokens").loc[n_logits]
extra_span = price_span(_at.predicted_extra_ms, _at.predicted_extra_median_ms)
head_priced = extra_span.low > 0  # chapter 0 timed the head at too few row counts (quick mode) to price more rows
verdict = register.record("logits_extra_is_the_head", None if not head_priced else
                          claims.within(extra_mm_runs, extra_span, claims.PREDICTED_TIME)
                          if extra_mm_runs.low > 0 else claims.NOT_HELD if extra_mm_runs.high <= 0 else claims.UNRESOLVED,
                          predicted=f"{(extra_span * 1e3).text('.1f', 'ms')} (fastest to median calls)",
                          measured=(extra_mm_runs * 1e3).text(".1f", "ms"),
                          evidence=f"logits_parts.csv, torch.profiler, {tokens(n_logits)}")
head_extra = prose.span(extra_span.low * 1e3, extra_span.high * 1e3, ".1f", "ms")
_runs_extra = saving.set_index("prompt_tokens").loc[n_logits]  # the timed runs' extra, without the profiler
_whole = logits_parts.extra_ms.sum()
whole = (f". Under the profiler the whole pass takes {prose.ms(_whole / 1e3)} more (its parts' medians over the "
         f"{profiled_runs} profiled pairs, summed); the {prose.ms(_runs_extra.extra_ms / 1e3)} "
         f"({prose.span(_runs_extra.extra_ms_low, _runs_extra.extra_ms_high, '.1f', 'ms')}) above is the median over the "
         f"{logits_runs} timed runs without the profiler, "
         + ("and the profiled figure lies within that range."
            if _runs_extra.extra_ms_low <= _whole <= _runs_extra.extra_ms_high else
            "and the profiled figure lies outside that range: the two measures of one difference disagree here."))
_ok = [x * 1e3 for x in claims.allowed(extra_span, claims.PREDICTED_TIME)]  # ms: what counts as priced
show(claims.pick(
    verdict, held=f"At {tokens(n_logits)} the matrices take {prose.ms(extra_mm_runs.mid)} more with every position's "
                  f"logits, as predicted: the head's extra rows cost {head_extra} at chapter 0's rate{whole}",
    not_held=f"At {tokens(n_logits)} the matrices take {prose.ms(extra_mm_runs.mid)} more with every position's logits, "
             f"{'more' if extra_mm_runs.mid > extra_span.mid else 'less'} than the {head_extra} the head's extra rows "
             f"cost at chapter 0's rate: inside the pass the head's product does not cost what chapter 0 timed "
             f"alone{whole}",
    unresolved=f"At {tokens(n_logits)} the matrices take {(extra_mm_runs * 1e3).text('.1f', 'ms')} more with every "
               f"position's logits, against {head_extra} for the head's extra rows at chapter 0's rate: "
               + (close_call(extra_mm_runs * 1e3, *_ok) if head_priced else "") + whole,
    not_measured=f"{head_said} This run does not decide it: the cost model prices no extra time for the head's extra "
                 f"rows at {tokens(n_logits)} (chapter 0 timed the LM head at {head_rows} rows, and more rows took it no "
                 "longer), so there is nothing to set the profiled extra against."),
    how=None if not head_priced else
    f"The matrices' extra is taken in each of {profiled_runs} profiled pairs; its range is the 95 % interval of the "
    f"median, {(extra_mm_runs * 1e3).text('.1f', 'ms')}. It counts as priced within {claims.PREDICTED_TIME:g}x either "
    f"way of the price's range, {prose.span(*_ok, '.1f', 'ms')}"
    + (f"; in this run {lean(extra_mm_runs * 1e3, *_ok, '.1f', ' ms')}." if verdict == claims.UNRESOLVED else "."))
prose.shown(logits_parts.round(2))

# %%
same_said = ("The same last-position pass takes the same time in the sweep and in the logits cell, within the "
             "tolerance for a ratio of two times.")
register.claim("same_pass_reproduces", same_said)
again = [p for p in saving.prompt_tokens if (main_dt, most, p) in spread]
if again:
    s, c = spread[(main_dt, most, again[-1])], saving.set_index("prompt_tokens").loc[again[-1]]
    cell = Spread.of(pairs[pairs.prompt_tokens == again[-1]].last_ms / 1e3)
    verdict = register.record("same_pass_reproduces", claims.within(cell / s, 1.0, claims.PREDICTED_RATIO),
                              predicted=f"sweep: {(s * 1e3).text(',.0f', 'ms')}",
                              measured=f"this cell: {(cell * 1e3).text(',.0f', 'ms')}",
                              evidence=f"{label(*main)}, {tokens(again[-1])}")
    show(f"The {again[-1]:,}-token pass took {(s * 1e3).text(',.0f', 'ms')} in the sweep and "
         f"{(cell * 1e3).text(',.0f', 'ms')} here: " + claims.pick(
             verdict, held="the same, as predicted.",
             not_held=f"{(cell / s).mid:.2f} times as long, so the machine's speed moved between the two cells; "
                      "compare the two kinds of logits only within one cell.",
             unresolved="whether that is the same time is "
                        + close_call(cell / s, 1 / claims.PREDICTED_RATIO, claims.PREDICTED_RATIO)
                        + "; compare the two kinds of logits within one cell."),
         how=f"The two count as the same time when the ratio of this cell's time to the sweep's, "
             f"{(cell / s).text('.2f', 'x')} (the range is the widest the 95 % intervals of the two medians allow), lies within "
             f"{claims.PREDICTED_RATIO:g}x of 1 either way"
             + (f"; in this run {lean(cell / s, 1 / claims.PREDICTED_RATIO, claims.PREDICTED_RATIO, '.2f', 'x')}."
                if verdict == claims.UNRESOLVED else "."))
else:
    register.record("same_pass_reproduces", None, evidence="no logits length is also in the sweep")
    show(f"{same_said} This run does not decide it: no logits length is also in the sweep.")

# %% [markdown]
# **Takeaway: predict a saving from the kernels that would have run (at the rate their rows reach) rather than
# from the FLOPs they would have done, then measure it.**
#
# ## Beside the reference runs
#
# Two published runs: the source chapter's GPT-2 small prefill (last-position logits; one CPU thread, and a
# consumer GPU in fp32 and fp16, whose quoted bandwidth is printed below from `lib.roofline.HARDWARE`), and the
# Word Factory blog's NumPy GPT-2-shaped model on a 2-core cloud CPU. The same `floor_and_knee`, with the same
# margin, reads each one's floor and knee. Different machines should not agree; the comparison says where this
# machine sits among them.

# %%
reference_gpu = roofline.HARDWARE["Source chapter GPU"]
print(f"The source chapter's GPU: {reference_gpu.bandwidth / 1e9:.0f} GB/s of memory bandwidth, as quoted there.")
ref = load_reference("ch09_prefill_gpu_cpu")
wf = load_reference("wordfactory_part3_cpu").query("table == 'prefill'")
curves = [dict(source="this machine", device=device.type, dtype=dt, threads=n,
               points=(g.prompt_tokens, g.time_ms, g.time_ms_low, g.time_ms_high))
          for (dt, n), g in sweep.groupby(["dtype", "threads"], sort=False) if dt == main_dt]
for device_type, dt, n, col in [("cuda", "fp32", 0, "gpu_fp32"), ("cuda", "fp16", 0, "gpu_fp16"),
                                ("cpu", "fp32", 1, "cpu_1thread")]:
    r = ref.dropna(subset=[f"{col}_ms_lo"])
    curves.append(dict(source="source chapter", device=device_type, dtype=dt, threads=n, points=(
        r.prompt_tokens, (r[f"{col}_ms_lo"] + r[f"{col}_ms_hi"]) / 2, r[f"{col}_ms_lo"], r[f"{col}_ms_hi"])))
curves.append(dict(source="Word Factory (NumPy)", device="cpu", dtype="", threads=2,
                   points=(wf.x.astype(int), wf.time_ms, wf.time_ms, wf.time_ms)))
beside = []
for c in curves:
    tok, ms_, lo, hi = c["points"]
    f = sweeps.floor_and_knee(tok, ms_ / 1e3, lo / 1e3, hi / 1e3, margin=margin)
    beside.append(dict({k: v for k, v in c.items() if k != "points"}, prompts=", ".join(map(str, tok)),
                       floor_ms=f.floor_s * 1e3, flat_until_tokens=f.flat_until_tokens, knee_tokens=f.knee_tokens,
                       best_tokens_per_s=1 / f.best_per_token_s))
beside = pd.DataFrame(beside)
results.table(beside, "beside_reference")
prose.shown(beside.round(1).rename(columns={"floor_ms": "one_token_pass_ms"}))  # a floor only where it is flat

# %%
fig, ax = plt.subplots(figsize=(8, 4.5))
for i, c in enumerate(curves):
    tok, ms_ = c["points"][:2]
    name = f"{c['source']}, {c['device']}" + (f", {c['dtype']}" if c["dtype"] else "") + (
        f", {c['threads']} thr." if c["threads"] else "")
    ax.plot(tok, tok / ms_ * 1e3, "o-" if c["source"] == "this machine" else "s--", ms=3, color=f"C{i}", label=name)
ax.set(xscale="log", yscale="log", xlabel="prompt tokens", ylabel="prompt tokens per second")
ax.set_xscale("log", base=2)
ours = beside[(beside.source == "this machine") & (beside.threads == most)].iloc[0]
gpu = beside[(beside.source == "source chapter") & (beside.device == "cuda") & (beside.dtype == "fp32")].iloc[0]
ours_first = first_tok  # ours is the first configuration (main_dt, most threads)
ax.set_title((f"On its floor up to {tokens(ours.flat_until_tokens)} here" if ours.flat_until_tokens > ours_first else
              "No floor here") + f"; on its floor up to {tokens(gpu.flat_until_tokens)} on the reference GPU (fp32)")
ax.legend(fontsize=8)
ax.grid(True, alpha=0.3)
results.figure(fig, "beside_reference")
plt.show()

# %%
gpu_said = "This machine leaves its 1-token floor at a shorter prompt than the reference GPU in fp32."
register.claim("floor_shorter_than_reference_gpu", gpu_said)
flat_spread = flats if ours.threads == most else Spread.at(ours.flat_until_tokens)
never = flat_spread.low >= fm.longest_prompt_tokens
readings_text = (flat_spread.text(".0f", "tokens") if flat_spread.high > ours_first else
                 f"no floor (rises from {tokens(ours_first)})")
verdict = register.record("floor_shorter_than_reference_gpu",
                          None if never else claims.below(flat_spread, float(gpu.flat_until_tokens)),
                          predicted=f"under {tokens(gpu.flat_until_tokens)}", measured=readings_text,
                          evidence=f"{label(*main)} against the source chapter's GPU, margin {margin:.0%}")
show(claims.pick(
    verdict, held=(f"Here the time leaves the 1-token floor after {tokens(flat_spread.mid)}"
                   if flat_spread.mid > ours_first else
                   "Here there is no floor at all: the cost rises from the first token")
    + f", sooner than on the reference GPU, whose {gpu.floor_ms:.1f} ms floor hid the prompt's work up to "
      f"{tokens(gpu.flat_until_tokens)}.",
    unresolved=f"Here the time stays on the 1-token floor up to {tokens(flat_spread.mid)}, about as long as the "
               f"reference GPU's {tokens(gpu.flat_until_tokens)}: whether it leaves it sooner is "
               f"{close_call(flat_spread, 0.0, float(gpu.flat_until_tokens) - 1)}.",
    not_held=f"This machine stays on its floor up to {tokens(flat_spread.mid)}, at least as long as the reference GPU "
             f"({tokens(gpu.flat_until_tokens)}): its floor hides the per-token work as well.",
    not_measured=f"{gpu_said} This run does not decide it: this run's time never left its floor up to its longest "
                 "prompt."),
    how=None if verdict != claims.UNRESOLVED else
    f"The floor's end is read off the points' medians and off the two ends of their 95 % intervals ({readings_text}); "
    f"it leaves the floor sooner than the GPU when every reading is shorter than {tokens(gpu.flat_until_tokens)}. In "
    f"this run {lean(flat_spread, 0.0, float(gpu.flat_until_tokens) - 1, '.0f', ' tokens')}.")

# %% [markdown]
# ## What these numbers do not show
#
# * **One small model.** GPT-2 small has 124M parameters; a larger model's weights and matrices move the floor
#   and the knee (chapter 6).
# * **One sequence at a time.** A server batches prefills; here each pass carries one prompt.
# * **Random weights and random tokens.** Timing does not depend on them; nothing here says anything about
#   text. Attention is PyTorch's `scaled_dot_product_attention`, with whichever kernel it picks on this device
#   (the profiler's table above names it).
# * **Parts timed alone.** Chapter 0 timed each part with the caches and the cores to itself; inside a pass they
#   share both, which is why a prediction is a range (the tolerance), not an exact time.
# * **A shared machine.** Other programs' interference is in the runs; each claim is decided on the 95 % interval
#   of the median of its runs, which one interrupted run cannot stretch, and says "not resolved" only when that
#   interval straddles the prediction. A point given fewer than nine runs (`long_runs`) has its range as its
#   interval, which one slow run does stretch.

# %%
first_len, said = int(mine.prompt_tokens.min()), register.verdict  # said(claim): its verdict
t_one, t_top = spread[(main_dt, most, first_len)] * 1e3, spread[top_key] * 1e3
few_rows = int(second.prompt_tokens)
as_model = {claims.HELD: "as the cost model predicted", claims.NOT_HELD: "which the cost model did not predict",
            claims.UNRESOLVED: "close to what the cost model predicted"}
with use_threads(most):
    where = prose.machine(device, main_dt)
_times = (f"On this machine ({where}), a {model_name} prefill takes **{prose.ms(t_one.mid / 1e3)}** "
          f"({prose.span(t_one.low, t_one.high, ',.1f')}) for a {first_len:,}-token prompt and "
          f"**{prose.ms(t_top.mid / 1e3)}** ({prose.span(t_top.low, t_top.high, ',.0f')}) for {tokens(n_top)}. ")
_few = (f" With few rows the model's matrices run far below their peak rate: F({few_rows}) is "
        f"{f_rates[few_rows] / f_many:.0%} of F({f_rates.idxmax():,}).")
_floor = (f"Every prompt up to {tokens(n_top)} costs about what one token costs. " if never else
          f"There is no flat stretch: {tokens(few_rows)} already take **{second.time_ms / fm.floor_ms:.2f}x** as long "
          f"as one (priced at {p_second:.2f}x): " + {claims.HELD: "no floor, as the cost model predicted",
                                                     claims.NOT_HELD: "no floor, which the cost model did not predict",
                                                     claims.UNRESOLVED: "no floor, close to what the cost model predicted"
                                                     }.get(said("floor_flat_as_predicted"), "no floor") + "." + _few + " "
          if not floored[1] else
          f"The time stays within {margin:.0%} of the 1-token pass up to **{tokens(flats.mid)}**, "
          f"{as_model.get(said('floor_flat_as_predicted'), 'not compared')}. ")
_knee = (f"Time per token falls to within {margin:.0%} of its lowest at **{tokens(knees.mid)}**"
         + (f" and keeps falling slowly to {tokens(fm.best_at_tokens)}" if fm.knee_confirmed and fm.best_at_tokens > knees.mid
            else "" if fm.knee_confirmed else ", the longest prompt measured") + ". ")
_arith = {claims.HELD: f"At {tokens(n_top)} the matrices' arithmetic takes {arith_share.mid:.0%} of the pass: it is "
                       "compute-bound. ",
          claims.NOT_HELD: f"At {tokens(n_top)} the matrices' arithmetic takes only {arith_share.mid:.0%} of the pass. ",
          claims.UNRESOLVED: f"At {tokens(n_top)} the matrices' arithmetic takes about half the pass "
                             f"({arith_share.mid:.0%}). "}.get(said("longest_prompt_compute_bound"), "")
_answer = ("So on this machine a prompt is nearly free up to its longest length here." if never else
           "So on this machine a prompt's cost grows from its second token on." if not floored[1] else
           f"So on this machine a prompt costs about one token's pass up to {tokens(flats.mid)}, the longest here "
           "at the median." if flats.mid >= fm.longest_prompt_tokens else
           f"So on this machine a prompt costs one token's pass up to about {tokens(flats.mid)}, then more with "
           "each token.")
opening.write(_times + _floor + _knee + _arith + _answer,
              _times + _floor.replace(_few, "") + _knee + _answer,
              _times + _floor.replace(_few, "") + _answer,
              after=pacer.note())  # why the prices missed, when the machine itself ran at another speed

# %% [markdown]
# ## Takeaways
#
# * A prefill's [floor](glossary.md#floor) is its measured 1-token pass, and it has one only if longer prompts
#   cost the same within the margin; whether it has one, and where time per token stops falling, are read off the
#   measured points, not off a fitted line.
# * The [balance point](glossary.md#balance-point) says how many tokens would keep the arithmetic busy at the
#   matrices' fastest rate; their rate at a few rows, `F(M)`, says how long a pass really stays flat.
# * Price a short prompt's matrices at the rate their few rows reach (`F(M)`), not at the matrix-vector rate
#   and not at the large product's peak.
# * Before calling a floor a fixed cost, time its parts: the matrices alone, and the cost of issuing the pass.
# * A 16-bit dtype helps only as much as the kernels that run it: check the hardware, then the data.
# * When a prediction fails, profile the pass: the operator that holds the excess, where one does, says what the
#   model missed; where the excess spreads over every part, the price's rates, not one term, are off.
#
# ## Check yourself
#
# 1. A prefill takes 12 ms for 1 token and 12.5 ms for 256 tokens. Which regime is it in below 256 tokens?
#
# <details><summary>Answer</summary>
#
# On its [floor](glossary.md#floor), and a floor of fixed cost: a 256-fold change in arithmetic barely moved the
# time, so neither FLOPs nor bytes set it; issuing the pass ([dispatch](glossary.md#dispatch)) does. This is the
# source chapter's GPU.
# </details>
#
# 2. A pass takes 40, 60 and 75 ms at 1, 2 and 4 tokens, and the model's matrices at 1, 2 and 4 rows take 33, 53
#    and 68 ms. Is the 1-token pass a fixed cost?
#
# <details><summary>Answer</summary>
#
# No: the pass grows by 35 ms and the matrices by 35 ms, so the rise is the matrices' own, and the rest of the
# pass is a steady 7 ms. Going from one row (a matrix-vector product) to a few (a small matrix product) costs
# real time on that machine, although the bytes read do not change.
# </details>
#
# 3. Times per token of 40, 20, 6, 2.2, 1.8 and 1.7 ms at 1, 2, 8, 32, 128 and 512 tokens. With a margin of 25
#    per cent, where is the knee?
#
# <details><summary>Answer</summary>
#
# The lowest is 1.7 ms, and 1.25 x 1.7 = 2.125 ms; the first length at or under it is 128 tokens. (32 tokens,
# at 2.2 ms, is just outside.)
# </details>
#
# 4. The predicted saving is 29 per cent; three runs measured 21, 22 and 24 per cent. What may you conclude?
#
# <details><summary>Answer</summary>
#
# That the saving is smaller than the FLOP count predicts by more than this run's noise. Why needs another
# measurement: the time of the LM head at those rows, which is what the cost model uses.
# </details>
#
# ## Try it
#
# * Set `threads = [1, 2, 4]` (on a machine with more cores, after running chapter 0 with the same counts): does
#   doubling the threads halve the time at the longest prompt? Does it move the floor?

# %% jupyter={"source_hidden": true} tags=["answer"]
_slow = floors[(floors.dtype == main_dt) & (floors.threads == fewest)]
if on_gpu or fewest == most or _slow.empty or not both:
    _text = ("This run measured one thread count only" + (" (on a GPU the host's threads do not run the kernels)"
                                                           if on_gpu else "")
             + ", so it cannot say. On a machine with more cores `threads_speed_long_prompt` sets the longest prompt's "
               "gain beside the cost model's, and the table of floors gives each count's 1-token pass.")
else:
    _n = max(both)
    _pair = runs_table[runs_table.prompt_tokens == _n].pivot_table(
        index="run", columns=["dtype", "threads"], values="time_ms").dropna(subset=[(main_dt, fewest), main])
    _gain = Spread.of(_pair[(main_dt, fewest)] / _pair[main])  # as `threads_speed_long_prompt` takes it
    _floor_x = _slow.iloc[0].floor_ms / fm.floor_ms
    _end = [int(f.flat_until_tokens) for f in (_slow.iloc[0], fm)]
    _has = [f"flat to {tokens(e)}" if e > mine.prompt_tokens.min() else "rising from the second token" for e in _end]
    _ends = (f"the pass {_has[0]} on either" if _has[0] == _has[1] else
             f"the pass {_has[0]} on {fewest} and {_has[1]} on {most}")
    _priced = cost[(main_dt, fewest)].prefill(_n).best / cost[main].prefill(_n).best
    _at = lambda n, p: sweep[(sweep.dtype == main_dt) & (sweep.threads == n) & (sweep.prompt_tokens == p)].iloc[0]  # noqa: E731
    _one, _one_slow = _at(most, mine.prompt_tokens.min()), _at(fewest, mine.prompt_tokens.min())  # priced parts
    _long = _at(most, _n)
    _parts_x = {name: _one_slow[c] / _one[c] for name, c in (("block matrices", "block_matrices_ms"),
                                                             ("the LM head", "LM_head_ms"), ("dispatch", "dispatch_ms"))}
    _text = (f"Here {most} threads against {fewest} made the pass of {tokens(_n)} **{_gain.text('.2f', 'x')}** as fast "
             f"(the cost model: {_priced:.2f}x), "
             + (("close to" if _gain.low >= 0.9 * most / fewest else "short of" if _gain.high < 0.9 * most / fewest
                 else f"near, though its interval reaches down to {_gain.low:.2f}x,") + f" the {most / fewest:g}x of the "
                "threads." if _gain.mid >= 1 else
                "slower, not faster: splitting this little work, or sharing the cores with another program, cost more "
                "than the threads saved.")
             + f" The 1-token pass went {_floor_x:.2f}x as "
             f"fast (from {_slow.iloc[0].floor_ms:.1f} ms to {fm.floor_ms:.1f} ms, with {_ends})"
             + ((": less than the long prompt" if _floor_x < _gain.mid else ": not less than the long prompt")
                + f". Priced part by part (the sweep's table), from {fewest} thread{'s' * (fewest > 1)} to {most} its "
                f"block matrices gain {_parts_x['block matrices']:.2f}x and its LM head {_parts_x['the LM head']:.2f}x, "
                + ("but its dispatch (issuing the pass and running its small kernels) only "
                   if min(_parts_x, key=_parts_x.get) == "dispatch" else
                   "and its dispatch (issuing the pass and running its small kernels) ")
                + f"{_parts_x['dispatch']:.2f}x "
                f"({_one_slow.dispatch_ms:.2f} ms to {_one.dispatch_ms:.2f} ms), and dispatch is "
                f"{_one.dispatch_ms / _one.predicted_ms:.0%} of the 1-token pass's price on {most} threads, against "
                f"{_long.dispatch_ms / _long.predicted_ms:.0%} of the long prompt's"
                + (": dispatch, which gains least from more threads, holds the 1-token pass's gain down, not the "
                   "products' rates." if _floor_x < _gain.mid and min(_parts_x, key=_parts_x.get) == "dispatch"
                   and _one.dispatch_ms / _one.predicted_ms > _long.dispatch_ms / _long.predicted_ms else
                   ".")
                if min(_floor_x, _gain.mid) >= 1 else
                "; with times like these, this run cannot tell how a pass's work shares out over threads.")
             + " With four threads, if the book's explanation holds, "
             "the longest prompt gains what chapter 0's `F(T)` at each count says (under the threads' ratio wherever "
             "memory or shared caches limit) and the 1-token pass gains less; one that gained as much would say its "
             "cost is arithmetic after all.")
display(Markdown(f"<details><summary>What to expect</summary>\n\n{_text}\n</details>"))

# %% [markdown]
# * Set `margin = 0.5`: which of the floor and the knee moves, and by how much?

# %% jupyter={"source_hidden": true} tags=["answer"]
_wide = {c: sweeps.floor_and_knee(mine.prompt_tokens, mine[c] / 1e3, margin=0.5) for c in ("time_ms", "predicted_ms")}
_now = {"time_ms": readings[1], "predicted_ms": expected[main]}  # the medians' reading and the cost model's
_floor = lambda f: (f"a floor to {tokens(f.flat_until_tokens)}" if f.flat_until_tokens > f.floor_tokens  # noqa: E731
                    else "no floor")
_say = {c: (f"there is {_floor(_wide[c])} instead of {_floor(_now[c])}" if _floor(_wide[c]) != _floor(_now[c]) else
            f"there is still {_floor(_now[c])}") + ", and the knee " + (
    f"moves from {tokens(_now[c].knee_tokens)} to {tokens(_wide[c].knee_tokens)}"
    if _wide[c].knee_tokens != _now[c].knee_tokens else f"stays at {tokens(_now[c].knee_tokens)}") for c in _wide}
display(Markdown(
    f"<details><summary>What to expect</summary>\n\nRead off this run's medians ({label(*main)}) with "
    f"`margin = 0.5` rather than {margin:g}, {_say['time_ms']}; on the cost model's curve, {_say['predicted_ms']}. "
    "A wider margin can only lengthen the floor (or leave it) and bring the knee to a shorter prompt (or leave it): "
    "both are thresholds read off the same points, not properties of the pass. Since the cost model's lengths move "
    "with the measured ones, `floor_flat_as_predicted` and `knee_as_predicted` still compare like with like.\n</details>"))

# %% [markdown]
# * Add 3, 6 and 12 to `prompts`: does the measured curve have steps where `F(M)` does?

# %% jupyter={"source_hidden": true} tags=["answer"]
_t = ceilings.table
_rows = sorted({int(r) for r in _t[(_t.kernel == "blocks") & (_t.model == model_name) & (_t.dtype == main_dt)
                                   & (_t.threads == most) & (_t.status == "ok")].rows})
_near = [r for r in _rows if r <= 16] or _rows[:2]  # the rows timed around 3, 6 and 12
_time = {r: ceilings.matrices(model_name, main_dt, most, "blocks", r).best * 1e3 for r in _near}
_per_row = {(a, b): (_time[b] - _time[a]) / (b - a) for a, b in zip(_near, _near[1:])}
(_a, _b), _jump = max(_per_row.items(), key=lambda kv: abs(kv[1]))
display(Markdown(
    f"<details><summary>What to expect</summary>\n\nChapter 0 timed the model's matrices at "
    f"{', '.join(map(str, _rows))} rows only, so the cost model prices 3, 6 and 12 rows between their neighbours and "
    f"its dotted curve can have no step there. Up to {_near[-1]} rows the blocks took "
    f"{', '.join(f'{v:.3g}' for v in _time.values())} ms at {', '.join(map(str, _near))} rows ({label(*main)}): the "
    f"largest change per added row, {_jump:+.3g} ms, is from {_a} to {_b} rows. If the kernel changes its path only "
    "where chapter 0 saw it, the new points lie between their neighbours, with ratios to their "
    "prices like theirs in the sweep's table; a point well off its price is a step at a size chapter 0 never timed, "
    "and `passes_as_predicted` names the furthest point.\n</details>"))

# %% [markdown]
# * On a GPU, compare the knee in fp32 and fp16: the source chapter's floor extended further in fp16.

# %% jupyter={"source_hidden": true} tags=["answer"]
_ref = beside[(beside.source == "source chapter") & (beside.device == "cuda")].set_index("dtype")
_here = floors[floors.threads == most].set_index("dtype")
_low = "fp16" if on_gpu else half  # this run's 16-bit dtype, if it ran one
_end = lambda dt: (f"a floor to {tokens(_here.flat_until_tokens[dt])}"  # noqa: E731
                   if _here.flat_until_tokens[dt] > mine.prompt_tokens.min() else "no floor")
_this = ("" if _low is None or _low not in _here.index or main_dt not in _here.index else
         ("This run" if on_gpu else f"This run is on a CPU, and its nearest comparison is {_low}'s")
         + f": {_end(_low)} and the knee at {tokens(_here.knee_tokens[_low])}, against {_end(main_dt)} and "
         f"{tokens(_here.knee_tokens[main_dt])} in {main_dt} (the table of floors).")
display(Markdown(
    "<details><summary>What to expect</summary>\n\nThe source chapter's GPU, read with this chapter's rule (the "
    f"table beside the reference runs): in fp32 its floor lasts to {tokens(_ref.flat_until_tokens['fp32'])} and its "
    f"knee is at {tokens(_ref.knee_tokens['fp32'])}; in fp16 to {tokens(_ref.flat_until_tokens['fp16'])} and at "
    f"{tokens(_ref.knee_tokens['fp16'])}. If the book's explanation holds, fp16 halves the weights' bytes and runs its "
    "products on tensor cores at many times fp32's rate, so the fixed cost of issuing a pass hides more tokens' work "
    "and both lengths move to longer prompts; a knee no later in fp16 would mean its kernels are not faster at those "
    f"rows (`half_long_prompt` says by how much they were). {_this}\n</details>"))

# %% [markdown]
# ## Key terms
#
# [Prefill](glossary.md#prefill), [Cost model](glossary.md#cost-model), [Floor](glossary.md#floor), [Knee](glossary.md#knee), [Balance point](glossary.md#balance-point), [Matrix rate F(M)](glossary.md#matrix-rate-fm), [Price](glossary.md#price), [Tolerance](glossary.md#tolerance), [Pace](glossary.md#pace). Each links to the book's glossary, which says how the book measures it.

# %% [markdown]
# ## Evidence in this chapter
#
# Each claim this chapter made, what was predicted, what this run measured, the verdict, and the data it came
# from. A verdict is decided on the 95 % interval of the median over runs (`lib.claims` says how): *held* when
# all of the interval agrees with the prediction, *did not hold* when none of it does, *not resolved* when it
# straddles the line. `data/02_prefill_sweep/claims.csv` holds the same rows, and the book's status page counts them.

# %%
results.table(register.frame(), "claims")
display(prose.table(register.evidence()))
print(register.summary())
results.finish()  # the run is whole: its tables and figures replace the last run's together
