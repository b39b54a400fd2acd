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
# # 4. Where a request's time goes
#
# Chapter 2 timed prefill alone and chapter 3 decode alone. A request is both: one prefill, whose cost grows
# with the prompt, then one decode step per output token after the first. Which phase a request spends its
# time in therefore depends on two numbers, the prompt length and the output length, and workloads differ
# enormously in both. This chapter runs whole requests over a grid of the two, scores each with
# `lib.metrics`, and splits its end-to-end time into the prefill's share and the decode's share.

# %% [markdown]
# **After this chapter you can**
#
# * Split a request's time into TTFT and TPOT over a grid of prompt and output lengths.
# * Fit TTFT against the prompt and TPOT against the context, and say what each slope is made of.
# * Call a workload a prefill job or a decode job, and say which phase to make cheaper.
# * Compute goodput against stated objectives, and say which fix each kind of miss needs.

# %% tags=["parameters"]
quick = False
device = "auto"
dtype = "fp32"
model_name = "gpt2-small"
pairs = [(16, 64), (128, 64), (512, 64), (512, 8), (1000, 16), (1000, 4),   # the source chapter's six
         (256, 128), (768, 32), (1000, 1)]                                  # and more
runs = 3                 # runs of the whole grid (each about half a minute: few runs, so a point's interval is its range)
ttft_slo_ms = None       # objectives for goodput, in ms; None: the device's default (lib.objectives)
tpot_slo_ms = None
archetypes = {"chat": (100, 200), "retrieval-augmented answer": (900, 60), "agent tool loop": (700, 15)}

# %%
import ast

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from IPython.display import Markdown, display

from lib import claims, costmodel, machine, metrics, objectives, params, phases, profiling, prose, shapes, sweeps, timing
from lib.claims import Spread
from lib.device import describe_environment, resolve_dtype
from lib.models import load_model, random_prompt
from lib.progress import progress
from lib.prose import show
from lib.results import Results, load_reference, load_table

# %%
token_pair = params.tuple_of(params.integer(min=1, max=1024), params.integer(min=1, max=1024))


def _archetypes(value):
    """A non-empty dict of workload name -> (prompt tokens, output tokens)."""
    value = ast.literal_eval(value) if isinstance(value, str) else value  # papermill -p passes a string
    if not isinstance(value, dict) or not value or not all(isinstance(k, str) and k for k in value):
        raise ValueError
    checked = {}
    for name, pair in value.items():
        try:
            checked[name] = token_pair.convert(pair)
        except ValueError:  # say which workload, and what its pair must be
            raise ValueError(f"{name!r}: {pair!r} is not a (prompt tokens, output tokens) pair of whole numbers from 1 "
                             f"to 1024") from None
    return checked


P = params.check(globals(), {
    "device": params.device(), "dtype": params.dtype(),
    "model_name": params.choice([m for m in machine.MODELS if m != "smollm2-135m"], quick="tiny-gpt2"),
    "pairs": params.listof(token_pair, quick=[(16, 8), (128, 8), (512, 4), (1000, 2)], min_items=2, max_items=40),
    "runs": params.integer(min=1, max=10, quick=2),
    "ttft_slo_ms": params.number(above=0, allow_none=True), "tpot_slo_ms": params.number(above=0, allow_none=True),
    "archetypes": params.Rule("a non-empty dict of name: (prompt tokens, output tokens), each from 1 to 1024",
                              _archetypes,
                              quick={"chat": (100, 30), "retrieval-augmented answer": (900, 6),
                                     "agent tool loop": (700, 3)}),
}, quick=quick, chapter="04_request_split")

# %% [markdown]
# The model, checked against every pair before any work, the objectives and the cost model this chapter predicts
# with:

# %%
torch_dtype = resolve_dtype(dtype, device)
on_gpu = device.type == "cuda"
lm = load_model(model_name, device, torch_dtype)
for what, (prompt_len, output_len) in [*(("pairs", p) for p in pairs), *archetypes.items()]:
    try:  # refuse the whole grid before any work
        phases.check_fits(lm, prompt_len, output_len)
    except ValueError as error:
        raise ValueError(f"{what} {(prompt_len, output_len)} does not fit {lm.name}: {error}") from None
goals = objectives.objectives(device, ttft_slo_ms, tpot_slo_ms)
shape = shapes.ModelShape.from_config(lm.config, name=lm.name, bytes_per_param=torch_dtype)
where = "the GPU" if on_gpu else f"{torch.get_num_threads()} CPU threads"
pacer = machine.Pacer(machine.load_ceilings(device, quick=quick), model_name, dtype, torch.get_num_threads(), device)
pacer.check("before the grid")
cost = costmodel.CostModel(pacer.ceilings, model_name, shape, dtype, torch.get_num_threads())
results = Results("04_request_split", params=P, quick=quick, dtype=torch_dtype, model=model_name)
register = claims.Claims()
pd.Series(describe_environment(device, torch_dtype, model_name)).to_frame("this run")

# %% [markdown]
# ## What this run found

# %%
opening = prose.Opening()

# %% [markdown]
# ## Whole requests over a grid
#
# Each request is `lib.phases.run_request`: a prefill with last-position logits, the first token chosen from
# it, then cached greedy decode to the output length, each token read back to the host and stamped. Prompts
# are random token ids; a warm-up request runs first. Every pair runs `runs` times, interleaved (all pairs
# once, then all again) so that a slow spell of the machine does not land on one pair only. The workload
# archetypes of the last section run in the same loop, but no prediction below uses them.

# %%
work = [("grid", p, o) for p, o in pairs] + [(name, p, o) for name, (p, o) in archetypes.items()]
phases.run_request(lm, random_prompt(32, lm.vocab_size, device=device), 4)  # warm-up
records, scored = [], []
for run in progress(range(1, runs + 1), desc="runs"):
    for workload, prompt_len, output_len in work:
        trace = phases.run_request(lm, random_prompt(prompt_len, lm.vocab_size, seed=run, device=device), output_len)
        m = metrics.request_metrics(trace.request_time, trace.token_times)
        pre, dec = metrics.phase_share(m)
        scored.append(m)
        records.append(dict(workload=workload, prompt_tokens=prompt_len, output_tokens=output_len, run=run,
                            ttft_ms=m.ttft * 1e3, tpot_ms=np.nan if m.tpot is None else m.tpot * 1e3,
                            worst_gap_ms=np.nan if m.worst_gap is None else m.worst_gap * 1e3,
                            e2e_ms=m.e2e * 1e3, prefill_share=pre, decode_share=dec,
                            meets_objectives=metrics.meets_slo(m, goals.ttft_s, goals.tpot_s)))
requests = pd.DataFrame(records)
requests["context_tokens"] = requests.prompt_tokens + requests.output_tokens / 2  # mean context while decoding
_ = results.table(requests, "requests")  # the path it returns is not for the page

# %% [markdown]
# One row per pair: the median run's end-to-end time, and its interval (`lib.timing.median_range`; with the grid's few runs, their
# lowest and highest). A claim over the grid is decided on one quantity about the whole grid (the geometric mean of
# the pairs' ratios to their predictions, or a slope fitted run by run), which one slow request moves by its share
# only. Each request's TTFT and TPOT are shown in the sections below, after the question each answers.

# %%
grid = requests[requests.workload == "grid"]
split = timing.median_range(grid, ["prompt_tokens", "output_tokens"],
                            ["ttft_ms", "tpot_ms", "worst_gap_ms", "e2e_ms", "prefill_share", "decode_share"])
split = split.merge(grid.groupby(["prompt_tokens", "output_tokens"], sort=False).meets_objectives.mean()
                    .rename("goodput").reset_index(), on=["prompt_tokens", "output_tokens"])
split["predicted_ttft_ms"] = [cost.prefill(p).best * 1e3 for p in split.prompt_tokens]
split["predicted_ttft_median_ms"] = [cost.prefill(p).median * 1e3 for p in split.prompt_tokens]
split["predicted_tpot_median_ms"] = [np.mean([cost.decode(p + i).median for i in range(1, o)]) * 1e3 if o > 1 else np.nan
                                     for p, o in zip(split.prompt_tokens, split.output_tokens)]
split["predicted_tpot_ms"] = [np.mean([cost.decode(p + i).best for i in range(1, o)]) * 1e3 if o > 1 else np.nan
                              for p, o in zip(split.prompt_tokens, split.output_tokens)]
results.table(split, "request_split")
prose.shown(split[["prompt_tokens", "output_tokens", "e2e_ms", "e2e_ms_low", "e2e_ms_high"]].round(3))  # the rest: in
# the sections that ask about them first (TTFT, TPOT, the phases' shares, and goodput once it is defined)

# %% [markdown] tags=["predict"]
# ## TTFT and the prompt
#
# **Predict first.** A prefill of `T` prompt tokens does about `2 x parameters x T` FLOPs in its matrices
# (attention's part grows as `T x T`, small at these lengths) and reads every weight once. If TTFT were all
# arithmetic at one rate, would it stay the same, double or quadruple each time the prompt doubles? Would a fixed
# cost per pass, paid at every prompt length, pull the fitted exponent above 1 or below it?

# %%
prompts = sorted({p for p, _ in pairs})  # the grid's prompt lengths
priced_ttft = {p: cost.prefill(p).best * 1e3 for p in prompts}  # ms, the cost model's TTFT
priced_exponent = np.polyfit(np.log(prompts), np.log(list(priced_ttft.values())), 1)[0] if len(prompts) > 1 else None
prose.prediction(
    "If TTFT were all arithmetic at one rate, it would **double** each time the prompt doubles: the matrices' FLOPs, "
    "`2 x parameters x T`, grow in proportion to `T` (an exponent of 1); it would quadruple only if attention's "
    "`T x T` part were most of the pass, and at these lengths it is small. A fixed cost per pass, paid at every length "
    "(issuing the pass's operations, reading every weight once), adds the same milliseconds to a short prompt as to a "
    "long one, so it weighs most on the short prompts and pulls the fitted exponent **below 1**."
    + (f" The cost model has both: it prices TTFT at {prose.ms(priced_ttft[prompts[0]] / 1e3)} for {prompts[0]} prompt "
       f"tokens and {prose.ms(priced_ttft[prompts[-1]] / 1e3)} for {prompts[-1]:,}, "
       f"{priced_ttft[prompts[-1]] / priced_ttft[prompts[0]]:.0f}x "
       f"for {prompts[-1] / prompts[0]:.0f}x the tokens; fitted over the grid's prompt lengths, its exponent is "
       f"{priced_exponent:.2f}, {2 ** priced_exponent:.2f}x per doubling." if priced_exponent is not None else ""))

# %% [markdown]
# The claim fits log TTFT against log prompt length over every request: its
# slope is the exponent, and two to that power is the factor per doubling.

# %%
# each prompt length's middle pair (by median TTFT; the lower of two), its median and interval kept together
ttft_by_prompt = pd.DataFrame({p: g.sort_values("ttft_ms").iloc[(len(g) - 1) // 2] for p, g in split.groupby("prompt_tokens")}
                              ).T.rename(columns={"ttft_ms_low": "low", "ttft_ms_high": "high"}).astype(float)
first, last = ttft_by_prompt.iloc[0], ttft_by_prompt.iloc[-1]
register.claim("ttft_rises_with_prompt", "TTFT rises with the prompt: the slope of log TTFT against log prompt "
               "length over every request of the grid (Theil and Sen's, with its 95 % interval) is positive.")
rise = claims.theil_sen(grid.prompt_tokens, grid.ttft_ms, log=True) if grid.prompt_tokens.nunique() > 1 else None
verdict = register.record("ttft_rises_with_prompt", claims.verdict_of(rise.low > 0, rise.high <= 0) if rise else None,
                          predicted="rising",
                          measured=", ".join(f"{p}: {t:.0f} ms" for p, t in ttft_by_prompt.ttft_ms.items()),
                          evidence=f"{runs} runs per pair, {lm.name}, {dtype}, {where}")
exponent = rise.text(".2f") if rise else ""
# growth per doubling from the end points, and a line through each run's medians per prompt length on log axes
# (the way the cost model's exponent above is fitted), so that the two are set side by side alike
doublings = np.log2(ttft_by_prompt.index[-1] / ttft_by_prompt.index[0]) if rise else 1.0
per_doubling = (last.ttft_ms / first.ttft_ms) ** (1 / doublings)
fit = claims.trend(grid.groupby(["run", "prompt_tokens"]).ttft_ms.median().reset_index(), "prompt_tokens",
                   "ttft_ms") if rise else None
fit_text = "" if fit is None else (
    f" A line through each run's median TTFT at each prompt length, on log axes, has the exponent **{fit.mid:.2f}** "
    f"({2 ** fit.mid:.2f}x per doubling); the cost model's, fitted the same way, is {priced_exponent:.2f}: "
    + ("the same growth, within the runs' spread." if fit.low <= priced_exponent <= fit.high else
       "the measured TTFT grows faster with the prompt than its price does." if priced_exponent < fit.low else
       "the measured TTFT grows more slowly with the prompt than its price does."))
against_2x = "less than" if per_doubling < 1.95 else "more than" if per_doubling > 2.05 else "about"
went = (f"**{first.ttft_ms:.0f} ms ({prose.span(first.low, first.high, '.0f', 'ms')} over runs)** at "
        f"{ttft_by_prompt.index[0]} prompt tokens to **{last.ttft_ms:.0f} ms "
        f"({prose.span(last.low, last.high, '.0f', 'ms')})** at {ttft_by_prompt.index[-1]}")
show(claims.pick(
    verdict, held=f"TTFT rose from {went}, {last.ttft_ms / first.ttft_ms:.1f}x for "
                  f"{ttft_by_prompt.index[-1] / ttft_by_prompt.index[0]:.0f}x the tokens: about **{per_doubling:.2f}x** "
                  f"per doubling of the prompt over its {doublings:.1f} doublings, {against_2x} the 2x of arithmetic "
                  f"alone.{fit_text}",
    not_held="TTFT did not rise with the prompt ("
             + ", ".join(f"{p} tokens {t:.0f} ms" for p, t in ttft_by_prompt.ttft_ms.items())
             + f"; the fitted exponent {exponent}).",
    unresolved=f"TTFT went from {went}, too close to call: the fitted exponent {exponent} reaches zero, so a flat "
               "TTFT is not ruled out.",
    not_measured="The grid has a single prompt length, so this run does not decide whether TTFT rises with the prompt."),
     how=None if rise is None else (
         f"The claim is decided on Theil and Sen's slope of log TTFT against log prompt length over every request, "
         f"{exponent} with its 95 % interval. It is the median of the slopes between every two requests of different "
         "lengths, so it weighs the growth between neighbouring lengths as much as the growth between the ends, and it "
         f"lies {'above' if rise.mid > fit.mid else 'below'} the line through the medians ({fit.text('.2f')} over "
         f"{fit.n} runs): it says that TTFT rises, not by how much per doubling. The cost model's exponent, "
         f"{priced_exponent:.2f}, lies "
         + ("inside its interval." if rise.low <= priced_exponent <= rise.high else
            f"{'below' if priced_exponent < rise.low else 'above'} its interval: they disagree, but they are not "
            "fitted alike, and the line through the medians, which is, is the one set beside it above.")))

# %% [markdown]
# ## Does TPOT grow with the context?
#
# A decode step reads every weight and the whole KV cache. The cache grows by its *cache per token* for each token
# of context, the weights not at all. The context of a decode step is the prompt plus the tokens decoded so far; a
# request's TPOT averages its steps, so its mean context is the prompt plus half the output. What a step reads, and
# chapter 0's rates for reading and copying memory:

# %%
shortest_pair = split.dropna(subset=["tpot_ms"]).sort_values(["prompt_tokens", "output_tokens"]).iloc[0]
tpot_inputs = pd.Series({f"TPOT at {shortest_pair.prompt_tokens:.0f} in, {shortest_pair.output_tokens:.0f} out (ms)":
                         shortest_pair.tpot_ms,
                         "weights (MB)": shape.weight_bytes / 1e6, "cache per token (KB)": shape.kv_bytes_per_token / 1e3,
                         "cache per 1,000 tokens (MB)": shape.kv_bytes_per_token * 1e3 / 1e6,
                         "streaming read (GB/s)": cost.ceilings.stream_bandwidth(dtype, cost.threads) / 1e9,
                         "streaming copy (GB/s)": cost.ceilings.stream_bandwidth(dtype, cost.threads, "copy") / 1e9})
prose.shown(tpot_inputs.round(2).to_frame(f"{lm.name}, {dtype}"))

# %% [markdown] tags=["predict"]
# **Predict first.** The shortest prompt's TPOT is in the table above. Suppose a step's time were all
# reading, and each byte of the cache took as long as a byte of the weights takes in those shortest steps (their
# TPOT over the weights' megabytes, both above): how many milliseconds would each further 1,000 tokens of context
# add to TPOT? A growing cache is also copied at every step (chapter 3): should the measured slope then lie above
# that figure, or below it?

# %% [markdown]
# <details><summary>The book's prediction (open it once you have written yours)</summary>
#
# If every byte cost what a weight byte does in the shortest steps, TPOT would grow with the context in proportion
# to the bytes a step reads
# (`lib.roofline.decode_cost`), the figure *bytes predicted slope* below. The cost model prices the cache's part at
# its own kernels: attention's read, and the copy a growing cache makes at every step (chapter 3), so the measured
# slope should lie above the bytes' figure.
#
# </details>
#
# **Measure.** A straight line through every request's TPOT against its mean context: its slope is what each
# further 1,000 tokens of context add to a decode step. The claim takes Theil and Sen's line (the median of the
# slopes between every pair of requests, with its distribution-free 95 % interval: one slow request moves it by its
# share of the pairs only); each run's own least-squares line is tabled beside it.

# %%
decoded = grid.dropna(subset=["tpot_ms"])
lines = {run: np.polyfit(g.context_tokens, g.tpot_ms, 1) for run, g in decoded.groupby("run")
         if g.context_tokens.nunique() > 1}
slopes = pd.Series({run: line[0] * 1e3 for run, line in lines.items()}, name="ms per 1,000 tokens")
tpot_at_0 = float(np.median([line[1] for line in lines.values()])) if lines else np.nan
c_low, c_high = decoded.context_tokens.min(), decoded.context_tokens.max()
bytes_slope = tpot_at_0 * shape.kv_bytes_per_token * 1e3 / shape.weight_bytes  # ms per 1,000 tokens
model_slope = (cost.decode(int(c_high)).best - cost.decode(int(c_low)).best) * 1e3 / (c_high - c_low) * 1e3
model_slope_median = (cost.decode(int(c_high)).median - cost.decode(int(c_low)).median) * 1e6 / (c_high - c_low)
# the price's slope at chapter 0's fastest and median calls: the range every cost-model price is allowed (lib.claims)
price_slope = Spread(min(model_slope, model_slope_median), model_slope, max(model_slope, model_slope_median))
slope = claims.theil_sen(decoded.context_tokens, decoded.tpot_ms * 1e3).mid if lines else np.nan  # ms per 1k tokens
# the requests' own TPOTs at the shortest and the longest context (medians over their runs), not a line's ends
measured_growth = (decoded[decoded.context_tokens == c_high].tpot_ms.median()
                   / decoded[decoded.context_tokens == c_low].tpot_ms.median() - 1)
tpot_table = pd.DataFrame({"run": slopes.index, "tpot_slope_ms_per_1k_tokens": slopes.values,
                           "tpot_at_context_0_ms": [lines[r][1] for r in slopes.index],
                           "bytes_predicted_slope_ms_per_1k_tokens": bytes_slope,
                           "cost_model_slope_ms_per_1k_tokens": model_slope})
results.table(tpot_table, "tpot_slope")
prose.shown(tpot_table.round(3))

# %%
register.claim("tpot_follows_cache_bytes", "TPOT grows with the context as the cost model's decode step does (the "
               "line's slope within the tolerance for a predicted time).")
# the slope over every request of the grid at once (few runs each): Theil and Sen's, with its 95 % interval
slope_spread = claims.theil_sen(decoded.context_tokens, decoded.tpot_ms * 1e3) if lines else None
tol = claims.PREDICTED_TIME
verdict = register.record("tpot_follows_cache_bytes", (claims.within(slope_spread, price_slope, tol)
                                                       if slope_spread.low > 0 else claims.UNRESOLVED) if lines else None,
                          predicted=f"{price_slope.text('.2f')} ms per 1k tokens (cost model, fastest to median calls)",
                          measured=f"{slope_spread.text('.2f')} ms per 1k tokens (Theil-Sen)" if lines else "",
                          evidence=f"{len(decoded)} requests with 2+ tokens, {lm.name}, {dtype}, {where}")
allowed_slope = (price_slope.low / tol, price_slope.high * tol)  # ms per 1k tokens
growth_text = (f"From mean context {c_low:.0f} to {c_high:.0f}, TPOT {'grew' if measured_growth >= 0 else 'fell'} "
               f"**{abs(measured_growth):.0%}**: **{slope:.1f} ms** per 1,000 tokens of context, by the line through every "
               "request") if lines else ""
runs_lean = len(slopes) and ((slopes > allowed_slope[1]).all() or (slopes < allowed_slope[0]).all())
lean_way = "above" if len(slopes) and (slopes > allowed_slope[1]).all() else "below"  # where every run's slope lies
times_price = f"about {slope / model_slope:.1f}x" if model_slope > 0 else "against"  # the slope over the price
show(claims.pick(
    verdict, held=f"{growth_text}, as the cost model predicts ({model_slope:.2f} ms): the cache's read and its copy, and "
                  "the rest of the step's growth with its cache that chapter 0 measured on the hollowed step, are what "
                  f"TPOT pays for a longer prompt (its bytes alone would give {bytes_slope:.2f} ms per 1,000 tokens).",
    not_held=f"{growth_text}, not the cost model's {model_slope:.2f} ms (its bytes alone: {bytes_slope:.2f} ms). The section "
             "*What grows with the cache*, below, times the two parts that grow with the cache alone, here, to see "
             "whether they account for the growth.",
    unresolved=f"{growth_text}, {times_price} the cost model's {model_slope:.2f} ms (its bytes alone: {bytes_slope:.2f} ms)"
               + (f". Every run's own slope lies {lean_way} what the price allows, but the line fitted over all "
                  f"{len(slopes)} runs cannot rule the price out: it leans to a miss." if runs_lean else
                  ": too close to call. The median lies "
                  + {"above": "above what the price allows, leaning to a miss",
                     "below": "below what the price allows, leaning to a miss",
                     "on": "within what the price allows, leaning to agreement"}[
                      claims.leaning(slope_spread, *allowed_slope).split()[0] if lines else "on"]
                  + ", but its interval reaches past the edge."),
    not_measured="The grid has one context length only, so there is no slope to measure: this run does not decide "
                 "whether TPOT grows with the context as the cost model's decode step does."),
     how=(f"The line is Theil and Sen's over the grid's requests, its slope {slope_spread.text('.1f', 'ms')} with its "
          f"95 % interval; each run's own least-squares slope: {', '.join(f'{x:.1f}' for x in slopes)}. The price "
          f"runs from chapter 0's fastest calls to its median ones ({price_slope.text('.2f')}), and the tolerance of "
          f"{tol:g}x around that allows {allowed_slope[0]:.2f}-{allowed_slope[1]:.2f} ms per 1,000 tokens."
          + (" More runs of the grid would decide it." if verdict == claims.UNRESOLVED else ""))
     if lines else None)

# %% [markdown] tags=["predict"]
# ## Each request, predicted
#
# The cost model (`lib.costmodel`, on chapter 0's ceilings) prices a request as the book's loop runs it. TTFT is a
# prefill of the prompt with last-position logits. TPOT is the mean of its decode steps, each at its own context
# (the prompt plus the tokens decoded before it).
#
# **Predict first.** Each term of that price is chapter 0's fastest call of its kernel, timed alone. A request runs
# them back to back from Python, and pays for what no term prices: the loop's own Python around each pass (reading
# the token back costs microseconds, chapter 0 measured) and kernels that run one after another rather than each
# alone, once per pass whatever the pass computes. Will the measured TTFT and TPOT come out above their prices or
# below them? Compare the sizes of their medians in the sections above: which of the two should lie further from
# its price, in proportion, and why?

# %% [markdown]
# The cost model's price for each pair, beside the measured medians; the claim allows the tolerance for a time
# predicted from measured ceilings.

# %%
register.claim("requests_as_predicted", "The pairs' TTFT and TPOT take what the cost model predicts, within the "
               "tolerance for a time predicted from measured ceilings (the geometric mean of the pairs' ratios to their "
               "predictions, each of TTFT and TPOT).")
by_pair = grid.merge(split[["prompt_tokens", "output_tokens", "predicted_ttft_ms", "predicted_ttft_median_ms",
                            "predicted_tpot_ms", "predicted_tpot_median_ms"]], on=["prompt_tokens", "output_tokens"])
by_pair = by_pair.assign(ttft_x=by_pair.ttft_ms / by_pair.predicted_ttft_ms, tpot_x=by_pair.tpot_ms / by_pair.predicted_tpot_ms)
pooled_r, band_r, worst_r = {}, {}, {}
for name in ("ttft", "tpot"):
    per_pair_x = {k: Spread.of(g[f"{name}_x"].dropna()) for k, g in by_pair.groupby(["prompt_tokens", "output_tokens"])
                  if g[f"{name}_x"].notna().any()}
    pooled_r[name] = claims.geomean_of(per_pair_x.values())
    band_r[name] = claims.geomean((split[f"predicted_{name}_median_ms"] / split[f"predicted_{name}_ms"]).dropna())
    worst_r[name] = max(per_pair_x, key=lambda k: abs(np.log(per_pair_x[k].mid)))
    worst_r[name] = (worst_r[name], per_pair_x[worst_r[name]])
where_r = {k: claims.within(pooled_r[k], Spread(1.0, 1.0, band_r[k]), tol) for k in pooled_r}
edge_r = {k: f"{1 / tol:.2f}x to {band_r[k] * tol:.2f}x" for k in pooled_r}
each_r = "; ".join(f"{k.upper()} ({pooled_r[k].text('.2f', 'x')}) " + claims.pick(
    v, held="lies wholly within", not_held="lies wholly outside", unresolved="straddles an edge of")
                   + f" its tolerance ({edge_r[k]})" for k, v in where_r.items())  # each of TTFT and TPOT, told
worst_text = "; the furthest: " + ", ".join(f"{k.upper()} at {w[0][0]} in / {w[0][1]} out ({w[1].mid:.2f}x)"
                                            for k, w in worst_r.items())
verdict = register.record(
    "requests_as_predicted", claims.every(where_r.values()),
    predicted=f"TTFT within {edge_r['ttft']}, TPOT within {edge_r['tpot']}",
    measured=f"TTFT {pooled_r['ttft'].text('.2f', 'x')}, TPOT {pooled_r['tpot'].text('.2f', 'x')}",
    evidence=f"requests.csv, {runs} runs per pair")
show(f"Over the {len(split)} pairs, TTFT took **{pooled_r['ttft'].mid:.2f}x** the cost model's prediction and TPOT "
     f"**{pooled_r['tpot'].mid:.2f}x** its own (geometric means)" + claims.pick(
         verdict, held=": both as predicted.",
         not_held=": not both as close as a time predicted from measured rates may be.",
         unresolved=": too close to call."),
     how=f"{each_r}: the tolerance of {tol:g}x around the prediction's own range (chapter 0's fastest calls to its "
         f"median ones){worst_text}.")
prose.shown(split[["prompt_tokens", "output_tokens", "ttft_ms", "predicted_ttft_ms", "tpot_ms", "predicted_tpot_ms"]].round(1))

# %%
fig, ax = plt.subplots(figsize=(10, 4.5))
labels = [f"{p} in\n{o} out" for p, o in zip(split.prompt_tokens, split.output_tokens)]
share_pct = 100 * split.ttft_ms / split.e2e_ms  # of each pair's median end-to-end time (a log axis would hide it)
ax.bar(labels, share_pct, color="tab:orange", label="prefill and first token (TTFT)")
ax.bar(labels, 100 - share_pct, bottom=share_pct, color="tab:blue", label="decode (the other tokens)")
for x, (total, lo, hi) in enumerate(zip(split.e2e_ms, split.e2e_ms_low, split.e2e_ms_high)):
    ax.text(x, 101, f"{total:,.0f} ms\n({lo:,.0f}-{hi:,.0f})", ha="center", va="bottom", fontsize=7)
ax.set_ylim(0, 118)
ax.set_ylabel("share of end-to-end time (%)")
ax.set_xlabel("prompt and output tokens; above each bar, its median end-to-end time (the runs' range)", fontsize=8)
decoding = split[split.output_tokens > 1]  # a 1-token reply has no decode: all prefill by construction
decoding = decoding if len(decoding) else split
longest = decoding.loc[decoding.prefill_share.idxmax()]
shortest = decoding.loc[decoding.prefill_share.idxmin()]
ax.set_title(f"Prefill's share runs from {shortest.prefill_share:.0%} ({shortest.prompt_tokens:.0f} in, "
             f"{shortest.output_tokens:.0f} out) to {longest.prefill_share:.0%} ({longest.prompt_tokens:.0f} in, "
             f"{longest.output_tokens:.0f} out)" + (", a 1-token reply aside" if len(decoding) < len(split) else ""))
ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2)
fig.tight_layout()
results.figure(fig, "request_split")
plt.show()

# %% [markdown] tags=["predict"]
# ## What grows with the cache
#
# Two pieces of a decode step's work grow with the context. Each can be timed alone, at the shortest and longest
# mean context of the grid.
#
# * **Concatenating the cache.** transformers' `DynamicCache` does not write the new position into free space:
#   every step, for every layer, it builds a keys tensor and a values tensor one position longer
#   (`torch.cat`). That reads the whole cache and writes it again, twice the cache's bytes.
# * **Attention over the cache**: one query against `C` keys and values per head and layer
#   (`scaled_dot_product_attention`), which reads the cache once.
#
# <details><summary>How the two parts are timed</summary>
#
# On tensors of the model's own shapes, with `lib.sweeps.cache_costs`, the same timer chapter 3 uses. The
# concatenation is timed each time after as many bytes as the model's weights have streamed past, as in a step, so
# that a cache small enough for the last-level cache is not timed warm.
# </details>
#
# **Predict first.** The cost model's slope, printed above, prices these two parts at chapter 0's rates and adds
# a third: whatever the hollowed step's own work (its dispatch) grew with a long cache when chapter 0 timed it. Timed
# alone, on tensors of the model's own shapes, will the two parts' sum per 1,000 tokens reach the TPOT slope the
# requests measured, or fall short of it? If short, name what in a real step grows with the context that timing
# the parts alone leaves out.

# %% [markdown]
# <details><summary>The book's prediction (open it once you have written yours)</summary>
#
# If these two are what TPOT's growth is made of, the growth of their timed sum per 1,000 tokens of context
# matches the slope measured above.
#
# </details>

# %%
display(prose.source(sweeps.cache_costs))

# %% [markdown]
# Both parts at the grid's shortest and longest mean context:

# %%
timed = {c: sweeps.cache_costs(shape, 1, int(c), device, torch_dtype, repeats=7, warmup=2,
                               flush_bytes=int(shape.weight_bytes)) for c in (c_low, c_high)}
parts = pd.DataFrame([dict(part=part, context_tokens=c, median_ms=t.median_ms, low_ms=t.low_ms, high_ms=t.high_ms)
                      for c, work in timed.items() for part, t in work.items()])
per_1k = {part: (timed[c_high][part].median - timed[c_low][part].median) * 1e6 / (c_high - c_low)
          for part in ("concatenation", "attention")}  # ms per 1,000 tokens of context
cache_slope = sum(per_1k.values())
dispatch_slope = ((cost.decode(int(c_high)).term("dispatch").best - cost.decode(int(c_low)).term("dispatch").best)
                  * 1e6 / (c_high - c_low))  # the hollowed step's growth, which the cost model adds: ms per 1k tokens
results.table(parts, "cache_work")
prose.shown(parts.round(3))

# %% [markdown]
# One layer down, a real decode step runs under the profiler (`lib.profiling.operators`, averaged over three
# steps). It has the same model, dtype and threads as the grid, and its cache grows by concatenation as in the
# requests. It decodes one token from the grid's shortest and longest mean context, in turn, a few times each. Each
# operator's own time (its *self* time) is its median over those times; the time no operator holds, Python issuing
# the next one, is one more row, *between operators*. Per 1,000 tokens of context, what each grew, largest first:

# %%
inside_repeats = 2 if quick else 5  # profiled passes per context: a few seconds at full size
inside_at = (int(c_low), int(c_high)) if lines and int(c_high) > int(c_low) else ()  # none: no slope to explain
stepped, seen, faulted = {}, {c: [] for c in inside_at}, {}


def one_step(c: int) -> None:
    """One decode step from ``c`` cached tokens: the growing cache rolled back to ``c``, then one token decoded."""
    kv, token = stepped[c]
    phases.truncate_cache(kv, c)
    phases.decode(lm, token, kv, 1)


with torch.inference_mode():
    for c in inside_at:  # one growing cache per context, rolled back to it before each step
        logits, kv = phases.prefill(lm, random_prompt(c, lm.vocab_size, device=device))
        stepped[c] = (kv, logits[:, -1:].argmax(dim=-1))
    for _ in range(inside_repeats if inside_at else 0):
        for c in inside_at:
            seen[c].append(profiling.operators(lambda c=c: one_step(c), passes=3, device=device)
                           .set_index("operator").self_ms)
    for c in inside_at:  # the same step's page faults, unprofiled: the fresh pages it maps (three steps' mean)
        before = timing.page_faults()
        for _ in range(3):
            one_step(c)
        faulted[c] = (timing.page_faults() - before) / 3
inside = pd.DataFrame({c: pd.concat(s, axis=1).median(axis=1) if s else pd.Series(dtype=float)
                       for c, s in seen.items()}).fillna(0.0)
inside.columns = [f"self_ms_at_{c}" for c in inside_at]
inside["term"] = [profiling.term_of(op) for op in inside.index]
inside["grew_ms_per_1k"] = ((inside.iloc[:, 1] - inside.iloc[:, 0]) * 1e3 / max(inside_at[1] - inside_at[0], 1)
                            if len(inside) else pd.Series(dtype=float))
inside = inside.sort_values("grew_ms_per_1k", ascending=False).rename_axis("operator").reset_index()
results.table(inside, "step_inside_by_context")
prose.shown(inside.head(8).round(3))

# %% [markdown]
# Those operators set beside the parts timed alone: attention's kernel and the concatenation against their own
# timing alone, every other operator whole, since nothing timed alone stood for it.

# %%
timed_alone = {"attention": per_1k["attention"], "cache copy": per_1k["concatenation"]}  # ms per 1k tokens
inside_total = float(inside.grew_ms_per_1k.sum()) if len(inside) else np.nan  # the whole profiled step's growth
beyond_alone = inside_total - cache_slope  # what the profiled step grew beyond the parts timed alone
extra = slope - cache_slope  # what the line grew beyond them
faults_1k = (faulted[inside_at[1]] - faulted[inside_at[0]]) * 1e3 / (inside_at[1] - inside_at[0]) if inside_at else 0.0
faults_ms = faults_1k * cost.ceilings.fault_cost(dtype, cost.threads) * 1e3  # ms per 1k tokens, chapter 0's cost
named = {"(between operators)": "the time between operators", "attention": "attention's kernel",
         "cache copy": "the concatenation"}
added = []  # (what, its growth beyond the parts timed alone, how it is told), largest first below
for term, alone in timed_alone.items():
    ops = inside[inside.term == term]
    grew = float(ops.grew_ms_per_1k.sum())
    what = named[term] + (" (" + " + ".join(f"`{o}`" for o in ops.operator) + ")" if len(ops) else "")
    added.append((what, grew - alone, f"{grew:+.2f} against {alone:.2f} timed alone"))
for r in inside[~inside.term.isin(list(timed_alone))].itertuples():
    added.append((named.get(r.operator, f"`{r.operator}`"), r.grew_ms_per_1k, f"{r.grew_ms_per_1k:+.2f}"))
added.sort(key=lambda a: -a[1])
grew_most = [f"{what} {told}" for what, more, told in added[:3] if more >= 0.05]
concat_top = bool(added) and added[0][0].startswith(named["cache copy"]) and faults_1k >= 1  # its faults, the most
one_layer_down = "" if not len(inside) else (
    f" One layer down, the model's own decode step under the profiler grew **{inside_total:.2f} ms** per 1,000 tokens "
    f"of context from {inside_at[0]} to {inside_at[1]} cached tokens, **{beyond_alone:+.2f} ms** beyond the parts timed "
    f"alone, against the line's {extra:+.2f} ms beyond them. "
    + (f"What grew most beyond them, in ms per 1,000 tokens: {prose.and_list(grew_most)}. " if grew_most else
       "No operator grew more than 0.05 ms per 1,000 tokens beyond them. ")
    + (f"Unprofiled, the same step took **{faults_1k:,.0f}** more page faults per 1,000 tokens of context, about "
       f"{faults_ms:.2f} ms at chapter 0's cost per fault, which the profiler counts inside the operator that first "
       "writes the fresh pages, the concatenation. " if faults_1k >= 1 else
       "")
    + ("So the line grows no faster than the parts timed alone, "
       + ("and neither does the profiled step." if beyond_alone <= 0 else "though the profiled step does.")
       if extra <= 0 else
       f"So the profiled step accounts for the line's extra growth (within {tol:g}x)."
       if extra / tol <= beyond_alone <= extra * tol else
       f"Under the profiler the step grew more than the line did beyond those parts ({beyond_alone:+.2f} against "
       f"{extra:+.2f} ms per 1,000 tokens), so the profiled operators cover the line's extra growth"
       + (", mostly the concatenation's page faults." if concat_top and faults_ms >= added[0][1] / 2 else
          f", most of it in {added[0][0]}." if added else ".") if beyond_alone > extra * tol else
       f"So the profiled step accounts for {format(beyond_alone, '.2f') if beyond_alone > 0 else 'none'} of the "
       f"line's extra {extra:.2f} ms per 1,000; "
       f"the other {extra - max(beyond_alone, 0):.2f} did not show in a step profiled on its own, neither in an operator "
       "nor between them, and this run does not say where it goes."))

# %%
steps3 = load_table("03_decode_sweep", "growth_by_run", quick=quick)  # chapter 3's growth: two contexts, run by run
steps3 = None if steps3 is None or steps3.attrs.get("model") != model_name else steps3[
    (steps3.dtype == dtype) & (steps3.threads == torch.get_num_threads())
    & steps3.comparison.str.startswith("context ")]
in_chapter_3 = ""  # the same step's growth as chapter 3 measured and shows it, beside this line
faults_told = (f" Unprofiled, the profiled step's page faults did not grow with the context ({faults_1k:+,.1f} per "
               "1,000 tokens)." if len(inside) and faults_1k < 1 else "")  # chapter 3's against this step's, for the fold
if lines and steps3 is not None and len(steps3):
    c3 = tuple(int(x) for x in steps3.comparison.iloc[0].removeprefix("context ").split(" against "))
    grown3 = Spread.of(steps3.difference_s) * (1e6 / (c3[1] - c3[0]))  # seconds over c3 -> ms per 1,000 tokens
    apart3 = grown3.high < slope_spread.low or grown3.low > slope_spread.high
    in_chapter_3 = (f" Chapter 3's steps of the same model, timed in a sweep over one cache cropped back to each "
                    f"context, grew **{grown3.text('.1f', 'ms')}** per 1,000 tokens from context {c3[0]} to {c3[1]}, "
                    + (f"{'less' if grown3.high < slope_spread.low else 'more'} than this line's {slope:.1f}, their "
                       "ranges apart." if apart3 else f"a range overlapping this line's {slope:.1f}."))
sweep3 = load_table("03_decode_sweep", "decode_sweep", quick=quick)  # its steps' page faults, point by point
sweep3 = None if sweep3 is None or sweep3.attrs.get("model") != model_name else sweep3[
    (sweep3.dtype == dtype) & (sweep3.threads == torch.get_num_threads())]
if in_chapter_3 and sweep3 is not None and len(sweep3) and len(inside) and faults_1k >= 1:
    f3 = sweep3.loc[sweep3.context_tokens.idxmax()]  # chapter 3's longest context
    f4 = faulted[inside_at[1]]  # this step's faults at the longest context
    in_chapter_3 += (" Chapter 3's cropped cache took far fewer page faults a step than this step did, for a cause "
                     "this run does not measure."
                     if f3.faults_per_step < 0.1 * f4 else " There too the concatenation took fresh pages.")
    faults_told += (f" Page faults: chapter 3's steps, over a cache built by a prefill and cropped back, took "
                   f"{f3.faults_per_step:,.0f} a step at context {f3.context_tokens:.0f} (a run's median step); this "
                   f"step, unprofiled, took {f4:,.0f} at {inside_at[1]}.")

# %% [markdown]
# Then the finding: does TPOT's line grow by what the cache's copy and its attention, timed alone, add per 1,000 tokens?

# %%
register.claim("tpot_growth_is_cache_work", "The growth of TPOT with the context is the cache's concatenation and "
               "attention, timed alone here (within the tolerance for a predicted time).")
verdict = register.record(
    "tpot_growth_is_cache_work", ((claims.within(slope_spread, cache_slope, tol)
                                   if slope_spread.low > 0 and cache_slope > 0 else claims.UNRESOLVED) if lines else None),
    predicted=f"{cache_slope:.2f} ms per 1k tokens (concatenation + attention, timed alone)",
    measured=f"{slope_spread.text('.2f') if lines else ''} ms per 1k tokens (TPOT line, Theil-Sen)",
    evidence=f"parts timed at contexts {c_low:.0f} and {c_high:.0f}, medians of 7 repeats; {dtype}, {where}")
parts_text = ("Per 1,000 tokens of context, the parts timed alone add "
              + ", ".join(f"{part} **{s:.2f} ms**" for part, s in per_1k.items())
              + f": **{cache_slope:.1f} ms** together, against the TPOT line's "
              + (slope_spread.text(".1f", "ms") if lines else ""))
show(claims.pick(
    verdict, held=f"{parts_text}: the copy a growing cache makes at every step and the attention that reads it account "
                  f"for TPOT's growth.{in_chapter_3}",
    not_held=f"{parts_text}: timed alone they do not account for the growth. " + (
        f"The line grows {slope - cache_slope:.1f} ms per 1,000 tokens more than the two parts timed alone: work that "
        "grows with the context inside a real step and that the parts timed alone do not price. Chapter 0's hollowed "
        "step, the pass with its matrices and attention taken out, "
        + (f"grows {dispatch_slope:.1f} ms per 1,000 tokens, which the cost model adds"
           if dispatch_slope >= 0.05 else
           f"did not grow with its cache when chapter 0 timed it ({dispatch_slope:.1f} ms per 1,000 tokens), so the cost "
           "model prices only the same two parts, at chapter 0's rates")
        + f" (its slope, {model_slope:.2f} ms per 1,000 tokens, leaves {max(slope - model_slope, 0):.1f} unpriced)."
        f"{one_layer_down}{in_chapter_3}" if lines and slope > cache_slope else
        "The parts alone grow faster than the line: timed alone they miss the overlap a real step gives them."
        + one_layer_down),
    unresolved=f"{parts_text}. " + (
        (f"The line grows {slope / cache_slope:.2f}x as fast as their sum" if slope > 0 else
         "The line does not rise (its median slope is not positive), while their sum does")
        + ", too close to call"
        + (f": every run's own line ({', '.join(f'{x:.1f}' for x in slopes)} ms) is steeper than "
           f"{tol * cache_slope:.1f} ms, so the runs lean to growth the parts leave out"
           if len(slopes) and (slopes > tol * cache_slope).all() else
           ": the median lies " + {"above": f"above what the parts allow ({tol * cache_slope:.1f} ms), leaning to growth "
                                             "they leave out, though not every run's own line is steeper",
                                   "below": f"below what the parts allow ({cache_slope / tol:.1f} ms), leaning to a line "
                                            "that grows less than they do",
                                   "on": "within what the parts allow, leaning to their accounting for the growth, "
                                         "though the interval reaches beyond it"}[
               claims.leaning(slope_spread, cache_slope / tol, cache_slope * tol).split()[0]])
        + f".{one_layer_down}{in_chapter_3}" if lines and cache_slope > 0 else
        "Timed alone, the parts did not grow with the context, so their sum cannot be set against the line's slope."
        + one_layer_down),
    not_measured="The grid has one context length only, so this run does not decide whether the growth of TPOT with "
                 "the context is the cache's concatenation and attention."),
     how=(f"The line's slope, {slope_spread.text('.2f', 'ms')} per 1,000 tokens, is Theil and Sen's with its 95 % "
          f"interval; it is set against the parts' {cache_slope:.2f} ms with the tolerance for a predicted time, "
          f"{tol:g}x either way ({cache_slope / tol:.2f} to {cache_slope * tol:.2f} ms)"
          + claims.pick(verdict, held=".", not_held=".", unresolved=f", the median "
                        f"{claims.leaning(slope_spread, cache_slope / tol, cache_slope * tol)}.") + faults_told)
     if lines else None)

# %%
fig, ax = plt.subplots(figsize=(8, 4))
ax.plot(decoded.context_tokens, decoded.tpot_ms, "o", ms=4, alpha=0.6, label="TPOT, one request")
span_c = np.linspace(0, c_high, 50)
for label, rate, style in ((f"bytes: {bytes_slope:.1f} ms per 1k tokens", bytes_slope, ":"),
                           (f"cost model: {model_slope:.1f} ms per 1k tokens", model_slope, "-."),
                           (f"measured line: {slope:.1f} ms per 1k tokens", slope, "-"),
                           (f"concatenation + attention timed alone: {cache_slope:.1f} ms per 1k", cache_slope, "--")):
    ax.plot(span_c, tpot_at_0 + rate * span_c / 1e3, style, label=label)
ax.set_xlabel("mean context while decoding (tokens)")
ax.set_ylabel("TPOT (ms)")
ax.set_title(f"TPOT grew {slope_spread.text('.1f', 'ms')} per 1,000 tokens of context (each run's own line: median "
             f"{slopes.median():.1f});\nthe cost model prices {model_slope:.1f} ms per 1,000 tokens" if lines else
             "One context length: no TPOT slope to set against the cost model's", fontsize=10)
ax.legend(fontsize=8)
results.figure(fig, "tpot_against_context")
plt.show()
priced_here = {  # the takeaway follows this run's verdict on TPOT's slope
    claims.HELD: f"Here the cost model priced TPOT's slope ({model_slope:.1f} ms per 1,000 tokens against {slope:.1f} "
                 "measured), so it is a cost per token you can price before you measure it",
    claims.NOT_HELD: f"Here TPOT's slope ran {slope / model_slope:.2f}x the cost model's price, so measure it: the parts "
                     "the model prices do not yet add up to it",
    claims.UNRESOLVED: f"Here TPOT's slope ({slope:.1f} ms per 1,000 tokens) ran {times_price} the cost model's price "
                       f"({model_slope:.1f})" + (f", leaning to a miss that {len(slopes)} runs could not confirm, so "
                                                 "measure it" if runs_lean else ", too close to call, so measure it")}
show("**Takeaway: TTFT is paid once per request and TPOT once per later token; fit each against the length it depends "
     "on (the prompt, the context) over every request. "
     + priced_here.get(register.verdict("tpot_follows_cache_bytes"), "A grid of one context length gives TPOT no slope "
                       "to price") + ".**")

# %% [markdown]
# ## Beside the reference run
#
# The source chapter ran the six pairs on its GPU (`data/reference/ch09_request_split_gpu.csv`).
#
# What the book expects: a GPU does a prefill's arithmetic so fast that a short prefill costs about what a decode
# step does; a CPU pays for every FLOP of it. So a prefill should cost more decode steps here than there, and every
# pair should be more prefill-heavy on a CPU than on the reference GPU.

# %%
ref = load_reference("ch09_request_split_gpu")
beside = ref.merge(split[["prompt_tokens", "output_tokens", "ttft_ms", "tpot_ms", "e2e_ms", "prefill_share"]]
                   .rename(columns=lambda c: c if c.endswith("tokens") else f"this_{c}"),
                   on=["prompt_tokens", "output_tokens"], how="inner")
beside["this_prefill_share_pct"] = beside.pop("this_prefill_share") * 100
beside["reference_prefill_in_decode_steps"] = beside.ttft_ms / beside.tpot_ms
beside["this_prefill_in_decode_steps"] = beside.this_ttft_ms / beside.this_tpot_ms
results.table(beside, "beside_reference")
prose.shown(beside.round(1))

# %%
share_of = {(r.prompt_tokens, r.output_tokens): Spread.in_row(r, "prefill_share", 100)
            for r in split.itertuples()}
heavier = [claims.below(r.prefill_share_pct, share_of[(r.prompt_tokens, r.output_tokens)]) for r in beside.itertuples()]
closest = claims.extreme([share_of[(r.prompt_tokens, r.output_tokens)] - r.prefill_share_pct for r in beside.itertuples()],
                         largest=False) if len(beside) else None
long_pairs = beside[beside.prompt_tokens == beside.prompt_tokens.max()] if len(beside) else None
steps_text = ("" if long_pairs is None else
              f" A {long_pairs.prompt_tokens.iloc[0]:.0f}-token prefill costs **"
              + prose.span(long_pairs.this_prefill_in_decode_steps.min(), long_pairs.this_prefill_in_decode_steps.max())
              + "** decode steps here and "
              + prose.span(long_pairs.reference_prefill_in_decode_steps.min(),
                           long_pairs.reference_prefill_in_decode_steps.max())
              + " on the reference GPU" + (" (over its pairs, whose decode steps differ)." if len(long_pairs) > 1 else "."))
register.claim("more_prefill_heavy_than_reference", "Every pair shared with the reference spends a larger share of "
               "its time in prefill here than on its GPU (the smallest difference of the shares is positive).")
verdict = register.record(
    "more_prefill_heavy_than_reference", claims.verdict_of(closest.low > 0, closest.high <= 0) if len(beside) else None,
    predicted="larger on every shared pair", measured=f"larger on {heavier.count(claims.HELD)} of {len(beside)}",
    evidence=f"{len(beside)} pairs in both; reference: source chapter's GPU, five runs each")
lighter = ", ".join(f"{r.prompt_tokens} in / {r.output_tokens} out {r.this_prefill_share_pct:.0f} % against "
                    f"{r.prefill_share_pct:.0f} %" for r, v in zip(beside.itertuples(), heavier) if v != claims.HELD)
show(claims.pick(
    verdict, held=f"All {len(beside)} pairs shared with the reference spend a larger share of their time in prefill "
                  f"here than on its GPU.{steps_text}",
    not_held=f"Not every shared pair is more prefill-heavy here than on the reference GPU: {lighter}.{steps_text}",
    unresolved=f"For some shared pair the prefill shares here and on the reference GPU are too close to call in this "
               f"run: {lighter}.{steps_text}",
    not_measured="This run's grid shares no pair with the reference, so it does not decide whether every shared pair "
                 "spends a larger share of its time in prefill here than on the reference GPU."))

# %% [markdown]
# ## Workload archetypes
#
# Three shapes of traffic, each a prompt and an output length (the `archetypes` parameter, at the top). Below them
# is the TPOT line of the section above.

# %%
show(f"The TPOT line: **{tpot_at_0:.1f} ms** a step at no context (the median of the runs' own lines), plus "
     f"**{slope:.2f} ms** for every 1,000 tokens of context (Theil and Sen's slope over every request).")
prose.shown(pd.DataFrame(archetypes, index=["prompt_tokens", "output_tokens"]).T.rename_axis("workload"))

# %% [markdown] tags=["predict"]
# **Predict first.** From the grid's TTFT at each prompt length and the TPOT line of the sections above, how many
# milliseconds should each archetype take end to end, and which of them spend more than half their time in
# prefill?

# %% [markdown]
# The book predicts each one's time from the grid alone. TTFT comes from a straight line through the grid's median
# TTFTs against the prompt (its residuals below say how well a line fits). Each later token then costs one TPOT,
# from the TPOT line at the archetype's mean context. Beside it is the cost model's prediction from chapter 0's
# kernels alone. The dominant phase is the larger of the two. **Measure**: the archetypes ran in the grid's loop.

# %%
ttft_line = np.polyfit(split.prompt_tokens, split.ttft_ms, 1)
residual = (split.ttft_ms - np.polyval(ttft_line, split.prompt_tokens)) / split.ttft_ms
measured_arch = timing.median_range(requests[requests.workload != "grid"], "workload", ["e2e_ms", "prefill_share"])
rows = []
for name, (p, o) in archetypes.items():
    ttft = np.polyval(ttft_line, p)
    decode_ms = (o - 1) * (tpot_at_0 + slope * (p + o / 2) / 1e3)
    model_e2e = (cost.prefill(p).best + sum(cost.decode(p + i).best for i in range(1, o))) * 1e3
    rows.append(dict(workload=name, prompt_tokens=p, output_tokens=o, predicted_ttft_ms=ttft,
                     predicted_e2e_ms=ttft + decode_ms, predicted_prefill_share=ttft / (ttft + decode_ms),
                     cost_model_e2e_ms=model_e2e))
arch = pd.DataFrame(rows).merge(measured_arch, on="workload")
arch["predicted_phase"] = np.where(arch.predicted_prefill_share > 0.5, "prefill", "decode")
share = {w: Spread.of(g.prefill_share) for w, g in requests[requests.workload != "grid"].groupby("workload")}
arch["measured_phase"] = [  # decided on the runs' interval: a median near 50 % names no phase
    "prefill" if share[w].low > 0.5 else "decode" if share[w].high < 0.5 else "neither (about even)" for w in arch.workload]
arch["e2e_measured_over_predicted"] = arch.e2e_ms / arch.predicted_e2e_ms
results.table(arch, "archetypes")
show("The TTFT line's residuals over the grid run from "
     f"{residual.min() * 100:+.0f} % to {residual.max() * 100:+.0f} % of the measured TTFT.")
prose.shown(arch.round(2))

# %%
arch_runs = requests[requests.workload != "grid"].merge(arch[["workload", "predicted_e2e_ms"]], on="workload")
# A line extrapolated beyond a noisy grid can cross zero: a time at or below zero is a failed prediction, not a
# ratio. Without a TPOT line (one context length) there is no prediction to divide by.
e2e_x = {w: Spread.of(g.e2e_ms / g.predicted_e2e_ms) for w, g in arch_runs.groupby("workload", sort=False)
         if lines and (g.predicted_e2e_ms > 0).all()}
unpriced = [w for w in arch.workload if lines and w not in e2e_x]
even = arch.measured_phase.str.startswith("neither")
phases_differ = ((arch.predicted_phase != arch.measured_phase) & ~even).any()
ok = [claims.within(claims.geomean_of(e2e_x.values()), 1.0, claims.PREDICTED_TIME) if e2e_x else claims.NOT_HELD,
      claims.NOT_HELD if phases_differ or unpriced else claims.UNRESOLVED if even.any() else claims.HELD] if lines else None
described = ". ".join(f"{'An' if r.workload[0] in 'aeiou' else 'A'} **{r.workload}** ({r.prompt_tokens} in, "
                      f"{r.output_tokens} out) measured {r.e2e_ms:.0f} ms, predicted {r.predicted_e2e_ms:.0f} from the "
                      f"grid and {r.cost_model_e2e_ms:.0f} by the cost model, "
                      + ("a job split about evenly" if r.measured_phase.startswith("neither") else
                         f"a **{r.measured_phase}** job")
                      + f" ({share[r.workload].text('.0%')} prefill)" for r in arch.itertuples())
described = described[:1].upper() + described[1:]  # the finding opens with it
register.claim("archetypes_predicted_from_grid", "The grid's TTFT and TPOT lines predict the archetypes' end-to-end "
               "times (their geometric mean within the tolerance for a predicted time) and each one's dominant phase.")
verdict = register.record(
    "archetypes_predicted_from_grid", claims.every(ok) if lines else None,
    predicted="; ".join(f"{r.workload}: {r.predicted_e2e_ms:.0f} ms, {r.predicted_phase}"
                        for r in arch.itertuples()) if lines else "",
    measured="; ".join(f"{r.workload}: {r.e2e_ms:.0f} ms, {r.measured_phase}" for r in arch.itertuples()),
    evidence=f"{runs} runs per archetype, medians; lines fitted on the grid only")
ratio = claims.geomean_of(e2e_x.values()).text(".2f", "x") if e2e_x else ""
missed = ", ".join([f"{w}: the lines predicted {p:.0f} ms, no time at all"  # why, archetype by archetype
                    for w, p in zip(arch.workload, arch.predicted_e2e_ms) if w in unpriced]
                   + [f"{r.workload} ({e2e_x[r.workload].mid:.2f}x"
                      f"{', not ' + r.predicted_phase if r.predicted_phase != r.measured_phase and not e else ''})"
                      for r, e in zip(arch.itertuples(), even) if r.workload in e2e_x and (
                          (r.predicted_phase != r.measured_phase and not e)
                          or claims.within(e2e_x[r.workload], 1.0, tol) != claims.HELD)])
show(claims.pick(
    verdict, held=f"{described}. The grid's lines predicted each one's dominant phase and "
                  f"their time ({ratio} the prediction, geometric mean). The dominant phase is the one to "
                  "optimise: TPOT for a decode job, TTFT for a prefill job.",
    not_held=f"{described}. Not every archetype landed where the grid's lines put it ({missed}): a line is a poor "
             "guide outside the grid or where noise is large.",
    unresolved=f"{described}. " + (
        f"The {' and '.join(arch.workload[even])} spent about half its time in each phase (the median's range over its runs "
        f"holds 50 %), so no phase dominates for the lines to predict; the times came to {ratio} the prediction (geometric "
        "mean)." if even.any() else
        f"The grid's lines predicted each one's dominant phase, but the times, {ratio} the prediction (geometric "
        f"mean), are too close to the prediction to call."),
    not_measured="The grid has one context length only, so there is no TPOT line to predict the archetypes with: "
                 "this run does not decide whether the grid's lines predict their times and dominant phases."))

# %% [markdown]
# ## Goodput against stated objectives
#
# Goodput is the fraction of requests that meet every objective. The objectives are parameters; the defaults
# come from `lib.objectives`, one per kind of device, for the book's small models, and are stated here so the
# verdict is explicit rather than implied. They are **fixed budgets**, the same milliseconds on every CPU (or
# every GPU), not derived from this machine's measured speed. The same requests can meet them on a fast machine and
# miss them on a slow one, so the goodput below says as much about this machine's speed as about the requests.
#
# The two objectives are two different problems. TTFT is one prefill, so it grows with the prompt and is cured by
# a cheaper prompt pass. TPOT is a decode step, so it grows with the context and is cured by a cheaper decode step.
# Chapter 8 measures ways to get one: fewer bytes where the kernel keeps its rate, less dispatch, a smaller batch. The two lines above say which pairs should miss which objective; the list below says which did.

# %%
good = metrics.goodput([m for m, r in zip(scored, records) if r["workload"] == "grid"], goals.ttft_s, goals.tpot_s)
per_pair = split[["prompt_tokens", "output_tokens", "ttft_ms", "tpot_ms", "goodput"]].copy()
per_pair["missed"] = [", ".join(name for name, miss in (("TTFT", r.ttft_ms > goals.ttft_ms),
                                                         ("TPOT", r.tpot_ms > goals.tpot_ms)) if miss)
                      for r in per_pair.itertuples()]
failing = per_pair[per_pair.goodput < 1]
missed_ttft = int(failing.missed.str.contains("TTFT").sum())
missed_tpot = int(failing.missed.str.contains("TPOT").sum())
fixes = ("" if failing.empty else
         (f"Of these, {missed_ttft} missed TTFT at its median and {missed_tpot} TPOT. " if missed_ttft or missed_tpot
          else "")
         + ("A TTFT miss is the prompt's pass: it is fixed by making prefill cheaper or shorter (a faster "
            "matrix kernel, a cached prefix), and a slower decode would not hurt it. " if missed_ttft else "")
         + ("A TPOT miss is the decode step: it is fixed by making the step cheaper (fewer bytes where the kernel "
            "keeps its rate, less dispatch: chapter 8 measures both; a smaller batch: chapter 3), and a faster prefill would not "
            "help it. " if missed_tpot else ""))
ref_met = ((ref.ttft_ms <= goals.ttft_ms) & (ref.tpot_ms <= goals.tpot_ms)).sum()
default_ttft_s, default_tpot_s = objectives.default_objectives(device)
source = (f"the defaults for {'a GPU' if on_gpu else 'a CPU'}" if goals.defaults == ("ttft", "tpot") else
          f"yours; the defaults here are {default_ttft_s * 1e3:.0f} ms and {default_tpot_s * 1e3:.0f} ms")
headroom = {k: goal / worst for k, goal, worst in (("TTFT", goals.ttft_ms, per_pair.ttft_ms.max()),
                                                    ("TPOT", goals.tpot_ms, per_pair.tpot_ms.max())) if worst > 0}
budget_text = (" " + " ".join(f"The slowest pair's median {k} is {1 / h:.0%} of its budget, so "
                          + (f"a machine about {h:.1f} times slower would miss it." if h >= 1.5 else
                             f"a machine about {h - 1:.0%} slower would miss it." if h >= 1.005 else
                             "a machine any slower would miss it." if h > 1 else "this machine misses it.")
                          for k, h in headroom.items())) if headroom else ""
display(Markdown(
    f"Objectives ({source}): TTFT at most **{goals.ttft_ms:.0f} ms**, TPOT at most **{goals.tpot_ms:.0f} ms**. "
    f"Goodput over all {len(grid)} grid requests: **{good:.0%}**. "
    + (f"Every pair met them: the objectives are loose for this machine. The tightest objectives every pair would "
       f"still meet at its median are TTFT **{per_pair.ttft_ms.max():.0f} ms**"
       + ("" if per_pair.tpot_ms.isna().all() else f" and TPOT **{per_pair.tpot_ms.max():.0f} ms**")
       + " (the largest medians): those are where the line would bite."
       if failing.empty else
       "The pairs with at least one run that missed an objective: "
       + ", ".join(f"{r.prompt_tokens} in / {r.output_tokens} out ("
                   + (f"{r.missed} at its median" if r.missed else "in its slower runs only; its median met both") + ")"
                   for r in failing.itertuples())
       + ". A request with one output token has no TPOT; it is judged on TTFT alone (see `lib.metrics.goodput`). "
       + fixes.rstrip())
    + f" For comparison, the source chapter's GPU met these objectives in {ref_met} of its {len(ref)} pairs "
      "(its medians)." + budget_text))
prose.shown(per_pair.round(2))

# %% [markdown]
# Every price in this chapter is made of chapter 0's ceilings. The same one-row matrices chapter 0 timed were timed
# again before the grid and the archetypes and now (`lib.machine.Pacer`). They say whether the machine itself ran at
# another speed meanwhile.

# %%
pacer.check("after the archetypes")
show(pacer.claim(register, results, "the requests"))  # whether the machine ran at chapter 0's speed, and its row

# %% [markdown]
# ## What these numbers do not show
#
# * **TTFT from the model call.** No tokenisation, queueing, network or delivery: a client's TTFT is longer.
# * **One request at a time.** No batching and no other request competing; chapter 5 adds one.
# * **Random weights and random prompts** for the GPT-2 models: timing does not depend on the tokens.
# * **The parts of the cache's cost were timed alone**, outside the model. Inside it they share the processor's
#   caches and memory bandwidth with the weights, so their sum need not equal the growth of TPOT. The profiled
#   step says which operators grew beyond them, but only on average over a few steps, with the profiler's own cost.
# * **A 1,024-position model**. Real workloads send prompts of tens of thousands of tokens. There attention's
#   quadratic term makes prefill grow faster than linearly (chapter 6), and a cache copied at every step costs far
#   more than here.
#
# ## Takeaways
#
# * A request's time is TTFT (prefill) plus one TPOT per later token (decode).
# * Classify a workload by both of its lengths, on the machine that serves it: the split above shows which pairs
#   are prefill jobs here, and the reference GPU's split beside it shows where another machine draws that line.
# * TPOT is not a constant of the model: every decode step reads a cache that grows with the context, and a cache
#   that grows by concatenation also copies itself at every step.
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
# 3. A cache grows by concatenation. How many bytes does a decode step move for the cache at context `C`,
#    counting the concatenation and the attention?
#
# <details><summary>Answer</summary>
#
# The concatenation reads the cache and writes a copy one position longer (about `2 x kv_bytes_per_token x C`),
# and attention reads it once more: about three times the cache's bytes, against once for a preallocated cache
# written in place.
# </details>
#
# 4. Why might the same request be decode-dominated on a GPU and prefill-dominated on a CPU?
#
# <details><summary>Answer</summary>
#
# A GPU's prefill runs at a high FLOP rate, and a short one costs about what a decode step does (both mostly the
# cost of launching the same operations); a CPU pays for every FLOP of the prefill, while its decode step costs
# roughly its weights' bytes at its matrix-vector kernel's rate plus the cost of issuing it (chapter 3); the prompt
# adds only the cache it leaves behind: this chapter's TPOT slope, milliseconds per 1,000 tokens of context, against
# the hundreds of milliseconds prefill spends on those tokens.
# </details>
#
# ## Try it
#
# * Add `(800, 200)` to `pairs`: at what output length does decode overtake prefill for an 800-token prompt?

# %% jupyter={"source_hidden": true} tags=["answer"]
_p, _o = 800, 200  # the exercise's pair
_room = lm.max_positions - _p  # the output tokens that fit after such a prompt
_fits = (f"`({_p}, {_o})` fits {lm.name}'s {lm.max_positions} positions" if _o <= _room else
         f"`({_p}, {_o})` needs {_p + _o} positions and {lm.name} has {lm.max_positions}, so the chapter refuses the "
         f"grid before any work (`phases.check_fits` names what fits: at most {_room} output tokens)")
if lines:
    _ttft = float(ttft_by_prompt.ttft_ms[_p]) if _p in ttft_by_prompt.index else float(np.polyval(ttft_line, _p))
    _cross = next(o for o in range(2, 100_000) if (o - 1) * (tpot_at_0 + slope * (_p + o / 2) / 1e3) > _ttft)
    _text = (f"{_fits}. From the grid, a prompt of {_p:,} tokens has a TTFT of {_ttft:.0f} ms and each later token "
             f"costs about {tpot_at_0 + slope * _p / 1e3:.0f} ms (the TPOT line), so decode overtakes prefill at about "
             f"**{_cross}** output tokens"
             + (f": more than fit after the prompt, so with {lm.name} a request with a prompt of {_p:,} tokens stays "
                "a prefill job on this machine." if _cross > _room else
                                ": a pair with more output tokens than that spends over half its time decoding."))
else:
    _text = (f"{_fits}. This grid has one context length, so there is no TPOT line to find the crossing with: add "
             f"pairs of other lengths, and the crossing is where (output tokens - 1) x TPOT passes TTFT.")
display(Markdown(f"<details><summary>What to expect</summary>\n\n{_text}\n</details>"))

# %% [markdown]
# * Set `tpot_slo_ms` to your own reading speed. A fast reader manages about 8 tokens per second: what TPOT, in
#   ms, is that?

# %% jupyter={"source_hidden": true} tags=["answer"]
_reader_s = 1 / 8  # a fast reader: 8 tokens per second, as the exercise says
_grid = [m for m, r in zip(scored, records) if r["workload"] == "grid"]
_good = metrics.goodput(_grid, goals.ttft_s, _reader_s)
_slow = sum(m.tpot is not None and m.tpot > _reader_s for m in _grid)  # requests that decode slower than a reader
_late = sum(m.ttft > goals.ttft_s for m in _grid)  # requests that miss the TTFT objective whatever TPOT's is
display(Markdown(
    f"<details><summary>What to expect</summary>\n\nA TPOT objective of {_reader_s * 1e3:.0f} ms is "
    f"{'looser' if _reader_s >= goals.tpot_s else 'tighter'} than this run's {goals.tpot_ms:.0f} ms. The slowest "
    f"pair's median TPOT here is {split.tpot_ms.max():.0f} ms and {_slow} of the {len(_grid)} grid requests decode "
    f"slower than a reader reads, so goodput " + (f"becomes **{_good:.0%}** (it was {good:.0%}). " if _good != good
                                                  else f"stays **{_good:.0%}**. ")
    + (f"{_late} request{'s' if _late > 1 else ''} still miss{'' if _late > 1 else 'es'} TTFT (over "
       f"{goals.ttft_ms:.0f} ms): no TPOT objective moves {'them' if _late > 1 else 'it'}, only a cheaper prefill does."
       if _late else "No request misses TTFT either.")
    + (" A reader's pace is an objective decode meets here with room to spare." if not _slow else
       " Those that decode too slowly need a cheaper step (chapter 8), not a faster prefill.") + "\n</details>"))

# %% [markdown]
# * Run with `dtype = "bf16"`: does the cache's share of TPOT's growth change with the bytes per value?

# %% jupyter={"source_hidden": true} tags=["answer"]
_other = "fp32" if dtype == "bf16" else "bf16"
try:
    _alt = costmodel.CostModel(cost.ceilings, model_name, shape.with_dtype(_other), _other, cost.threads)
    _alt.decode(int(c_high))
except ValueError:  # chapter 0 did not measure that dtype here
    _alt = None


def _cache_share(m) -> float:
    """The cache's part (attention, copy, page faults) of the cost model's step at the grid's longest mean context."""
    _step = m.decode(int(c_high))
    return sum(_step.term(t).best for t in ("attention", "cache copy", "page faults")) / _step.best


_bytes = f"each cached value takes {shape.with_dtype(_other).bytes_per_param:g} bytes against {shape.bytes_per_param:g}"
if _alt is None or not lines:
    _text = (f"In {_other} {_bytes}, so if the book is right TPOT's slope falls about with the bytes while the "
             f"weights' part follows {_other}'s matrix-vector kernel. Chapter 0 measured no {_other} here (or the grid "
             "has no TPOT line), so this run cannot price it.")
else:
    _alt_slope = (_alt.decode(int(c_high)).best - _alt.decode(int(c_low)).best) * 1e6 / (c_high - c_low)
    _by_bytes = model_slope * shape.with_dtype(_other).bytes_per_param / shape.bytes_per_param  # the bytes alone
    _text = (f"In {_other} {_bytes} in this run's {dtype}. The cost model, on chapter 0's {_other} kernels, prices "
             f"TPOT's slope at {_alt_slope:.2g} ms per 1,000 tokens against {model_slope:.2g} in {dtype} "
             f"({_alt_slope / model_slope:.2f}x, where the bytes alone give "
             f"{shape.with_dtype(_other).bytes_per_param / shape.bytes_per_param:g}x), and the cache's part of a step "
             f"at context {c_high:.0f} at {_cache_share(_alt):.0%} against {_cache_share(cost):.0%}. The weights' part "
             f"follows not the bytes but {_other}'s matrix-vector kernel "
             f"({cost.ceilings.weight_rate(model_name, _other, cost.threads) / 1e9:.1f} GB/s against "
             f"{cost.ceilings.weight_rate(model_name, dtype, cost.threads) / 1e9:.1f}), so the cache's share moves with "
             "both." + (
                 f" A measured slope in {_other} near {_alt_slope:.2g} rather than the bytes' "
                 f"{_by_bytes:.2g} would say {_other}'s kernels, not the bytes, set the growth; "
                 "`tpot_follows_cache_bytes` is decided against the cost model's price, so it would hold on such a slope."
                 if not claims.PREDICTED_TIME ** -1 <= _alt_slope / _by_bytes <= claims.PREDICTED_TIME else
                 f" Here the two give the same slope within the tolerance ({_alt_slope:.2g} against {_by_bytes:.2g} ms "
                 f"per 1,000 tokens), so a measured slope in {_other} could not tell its kernels from its bytes."))
display(Markdown(f"<details><summary>What to expect</summary>\n\n{_text}\n</details>"))

# %%
def at(r) -> str:
    """One prompt length's median TTFT, with its lowest and highest run."""
    return f"**{r.ttft_ms:.0f} ms** ({prose.span(r.low, r.high, '.0f', 'ms')})"


def job(r, noun: str) -> str:
    """A pair's prefill share over its runs, and the phase it spent most of its time in."""
    share = Spread.in_row(r, "prefill_share").text(".0%")
    return f"**{share}** of a {int(r.prompt_tokens)}-in, {int(r.output_tokens)}-out {noun} " \
           f"(a {'prefill' if r.prefill_share > 0.5 else 'decode'} job)"


two_phase = split[split.output_tokens > 1] if (split.output_tokens > 1).any() else split
light, heavy = (two_phase.loc[i] for i in (two_phase.prefill_share.idxmin(), two_phase.prefill_share.idxmax()))
p0, p1 = ttft_by_prompt.index[0], ttft_by_prompt.index[-1]

# %%
ttft_text = (f"the first token came {at(first)} after a {p0}-token prompt and {at(last)} after a {p1}-token one"
             + {claims.NOT_HELD: " (no rise with the prompt, by the fitted line)",
                claims.UNRESOLVED: " (a rise the fitted line does not confirm)"}.get(register.verdict("ttft_rises_with_prompt"), ""))
slope_text = {claims.HELD: ", as the cost model predicts",
              claims.NOT_HELD: f", not the {model_slope:.1f} ms the cost model predicts",
              claims.UNRESOLVED: f", {times_price} the cost model's {model_slope:.1f} ms"
                                 + (" (not resolved, leaning to a miss)" if runs_lean else " (too close to call)")}
slope_text = "" if slope_spread is None else (
    f", **{slope_spread.text('.1f', 'ms')}** more per 1,000 tokens of context"
    + slope_text.get(register.verdict("tpot_follows_cache_bytes"), ""))
tpot_text = "" if split.tpot_ms.isna().all() else \
    f". Each later token took {prose.span(split.tpot_ms.min(), split.tpot_ms.max(), '.0f', 'ms')}{slope_text}"
model_text = {claims.HELD: f"The cost model predicted both on average (TTFT {pooled_r['ttft'].mid:.2f}x its price, TPOT "
                           f"{pooled_r['tpot'].mid:.2f}x). ",
              claims.NOT_HELD: f"TTFT took {pooled_r['ttft'].mid:.2f}x the cost model's price and TPOT "
                               f"{pooled_r['tpot'].mid:.2f}x: not both as predicted. ",
              claims.UNRESOLVED: f"TTFT took {pooled_r['ttft'].mid:.2f}x the cost model's price and TPOT "
                                 f"{pooled_r['tpot'].mid:.2f}x, too close to call. "}.get(
    register.verdict("requests_as_predicted"), "")
goodput_text = (f"Every request met this book's fixed objectives (TTFT {goals.ttft_ms:,.0f} ms, TPOT {goals.tpot_ms:,.0f} ms). "
                if good == 1 else f"{good:.0%} of the requests met this book's fixed objectives (TTFT "
                f"{goals.ttft_ms:,.0f} ms, TPOT {goals.tpot_ms:,.0f} ms). ")
opening_head = (f"On this machine ({prose.machine(device, dtype)}), over {len(split)} prompt/output pairs run {runs} times "
                f"each, {ttft_text}{tpot_text}. ")
opening_tail = (f"So both lengths decide where the time goes: prefill took {job(light, 'request')} and "
                f"{job(heavy, 'one')}.")
_what = {  # the claims the opening does not already tell, in plain words, to name a miss
    "tpot_growth_is_cache_work": "the cache's copy and attention making up TPOT's growth",
    "more_prefill_heavy_than_reference": "a larger prefill share than the reference GPU's",
    "archetypes_predicted_from_grid": "the grid's lines predicting the archetypes"}
counted = f" {m}" if (m := register.misses(_what, only_named=True)) else ""  # each miss named
short_head = f"On this machine ({prose.machine(device, dtype)}), {ttft_text}{tpot_text}. "
opening.write(opening_head + model_text + opening_tail + " " + goodput_text.rstrip() + counted,
              opening_head + model_text + opening_tail + counted,
              short_head + model_text + opening_tail + counted,
              opening_head + opening_tail + counted,  # the predictions in the evidence table: room for the pace note
              short_head + opening_tail,
              after=pacer.note())  # the pace note, when the machine's speed moved

# %% [markdown]
# ## Key terms
#
# [TTFT, ITL, TPOT, worst gap, goodput](glossary.md#ttft-itl-tpot-worst-gap-goodput), [KV cache](glossary.md#kv-cache), [Cost model](glossary.md#cost-model), [Price](glossary.md#price), [Tolerance](glossary.md#tolerance), [Pace](glossary.md#pace). Each links to the book's glossary, which says how the book measures it.

# %% [markdown]
# ## Evidence in this chapter
#
# Each claim this chapter made, what was predicted, what this run measured, the verdict, and the data it came
# from. A verdict is decided on the 95 % interval of the median over runs (`lib.claims` says how). A claim *held*
# when all of the interval agrees with the prediction, *did not hold* when none of it does, and is *not resolved*
# when the interval crosses the line. `data/04_request_split/claims.csv` holds the same rows, and the book's status page counts them.

# %%
results.table(register.frame(), "claims")
display(prose.table(register.evidence()))
print(register.summary())
results.finish()  # the run is whole: its tables and figures replace the last run's together
