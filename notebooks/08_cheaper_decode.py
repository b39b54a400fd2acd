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
# # 8. Cheaper decode: fewer bytes, more tokens per pass, less to issue
#
# Chapter 3 found that a decode step reads every weight and the whole cache to make one token, at the rate the
# model's own kernels stream them. Three levers follow. **Fewer bytes per token**: store the weights in fewer bits
# (bf16, int8, 4-bit), and the cache too. **More tokens per pass**: when a pass over a few positions costs little
# more than a pass over one (chapter 2's short prompts), guess several tokens and check them in one pass
# (speculative decoding). **Less to issue**: a step is hundreds of small operations, and chapter 0 priced issuing
# them (dispatch); compiling the step aims at that part.
#
# This chapter measures each lever on SmolLM2-135M, on this machine, and puts the book's eager loop beside the
# fastest path it finds and beside llama.cpp, the engine a laptop user would pick, which runs the book's own Q4_1
# file unchanged. Each prediction comes from chapter 0's ceilings (`lib.costmodel`) or from a part timed alone
# here, and each conclusion is a claim decided by this run's data (`lib.claims`).

# %% [markdown]
# **After this chapter you can**
#
# * predict what fewer bytes per weight (a 16-bit dtype, quantisation) do to a decode step from the kernel's rate, not from the bytes alone.
# * compute what fewer bytes per cached token save.
# * say when speculative decoding by prompt lookup pays, from its acceptance and the cost of the pass that checks it.
# * measure what a preallocated cache and a compiled step save in dispatch, and pick the cheapest path for this machine.

# %% tags=["parameters"]
quick = False
device = "auto"                 # "auto", "cpu", "cuda", "cuda:N"
model_name = "smollm2-135m"     # the Q4_1 file is SmolLM2's; another model runs the PyTorch precisions only
precisions = ["fp32", "bf16", "int8", "q4_1"]  # q4_1: the shipped GGUF file, run by llama.cpp (.venv-llama)
threads = None                  # None: every core (chapter 0 measured SmolLM2 at that count)
contexts = [32, 1024]           # a short and a long context, in cached tokens
steps = 6                       # greedy steps per run, each read back to the host (a run is the median of its steps)
sweep_runs = 9                  # runs of the precisions' sweep, taking turns; a point is their median and 95 % interval
runs = 3                        # runs of each later comparison (whole answers, speculative runs)
issuing_runs = 9                # runs of the eager and compiled steps, taking turns (each run about a second)
question = "Why is the sky blue? Explain it to a ten-year-old in three sentences."  # chapter 1's
answer_tokens = 32              # greedy tokens of each precision's answer, compared with fp32's
passage = ("The Rhine rises in the Swiss Alps and flows north through Lake Constance. Below Basel it forms the "
           "border between France and Germany, then turns west at Mainz and cuts through the Rhine Gorge, where "
           "castles stand on the cliffs above the river. It reaches the North Sea in the Netherlands, where it "
           "splits into several branches.")
instruction = "Repeat the passage above word for word."
lookup_tokens = [2, 4]          # prompt lookup: guessed tokens checked per pass
spec_tokens = 48                # tokens generated in each speculative and plain run
compile_step = True             # time torch.compile of the decode step (compiling takes a minute or two on 2 cores)
vllm = True                     # add vLLM's CPU build to the side-by-side table where .venv-vllm exists
side_tokens = 32                # tokens of chapter 1's answer each path decodes in the side-by-side table
close_to_read = 0.7             # a kernel "gets close to the machine's limit" above this fraction of the read

# %%
import os

from lib import params

PRECISIONS = ("fp32", "bf16", "fp16", "int8", "q4_1")
P = params.check(globals(), {
    "device": params.device(),
    "model_name": params.choice(["gpt2-small", "tiny-gpt2", "smollm2-135m"], quick="tiny-gpt2"),
    "precisions": params.listof(params.choice(PRECISIONS), quick=["fp32", "bf16", "int8"]),
    "threads": params.integer(min=1, max=os.cpu_count() or 1, allow_none=True),
    "contexts": params.int_list(min=1, max=4000, quick=[16, 96], min_items=2, ascending=True),
    "steps": params.integer(min=2, max=256, quick=4),
    "sweep_runs": params.integer(min=1, max=30, quick=2),
    "runs": params.integer(min=1, max=10, quick=2),
    "issuing_runs": params.integer(min=1, max=30, quick=2),
    "question": params.text(),
    "answer_tokens": params.integer(min=2, max=512, quick=6),
    "passage": params.text(),
    "instruction": params.text(),
    "lookup_tokens": params.int_list(min=1, max=16, quick=[2], ascending=True),
    "spec_tokens": params.integer(min=4, max=512, quick=8),
    "compile_step": params.boolean(),
    "vllm": params.boolean(),
    "side_tokens": params.integer(min=2, max=512, quick=4),
    "close_to_read": params.number(above=0, max=1),
}, quick=quick, chapter="08_cheaper_decode")

# %%
import contextlib
import copy
import dataclasses
import io
import json
import math
import time

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from IPython.display import Markdown, display
from transformers.cache_utils import Fp8QuantizedLayer

from lib import claims, client, costmodel, machine, phases, profiling, prose, quantize, speculative, sweeps, timing
from lib.claims import Spread
from lib.costmodel import Prediction, Term
from lib.device import UnsupportedDtype, describe_environment, resolve_dtype, thread_counts
from lib.engines import vllm_engine, vllm_unavailable
from lib.llama import LlamaFailed, LlamaWorker, llama_unavailable, server_command
from lib.models import SMOLLM2_VERSION, cache_dir, load_model, random_prompt, smollm2_gguf
from lib.paths import REPO_ROOT, output_root
from lib.progress import progress
from lib.prose import show
from lib.results import Results, load_reference, load_table
from lib.shapes import ModelShape

# %% [markdown]
# The paths this run can take. With SmolLM2, each precision holds the same weights: the book's fp32 model *is* the
# Q4_1 file de-quantised (`lib.models`), so fp32, bf16 and int8 here are that file's values in wider or other
# storage, and llama.cpp reads the file itself. A precision this machine cannot run is skipped with its reason.

# %%
on_gpu = device.type == "cuda"
threads = threads or max(thread_counts(device))
torch.set_num_threads(threads)
ceilings = machine.load_ceilings(device, quick=quick)  # chapter 0's one measurement of this machine
pacer = machine.Pacer(ceilings, model_name, "fp32", threads, device)  # the machine's speed, watched
pacer.check("before the first path")
fp32 = load_model(model_name, device, torch.float32)
shape = ModelShape.from_config(fp32.config, name=model_name).with_dtype("fp32")
models, skipped = {"fp32": fp32}, {}
for p in precisions:
    if p in ("bf16", "fp16"):
        try:
            models[p] = load_model(model_name, device, resolve_dtype(p, device))
        except UnsupportedDtype as error:
            skipped[p] = str(error)
    elif p == "int8":
        try:
            models[p] = quantize.int8_weights(fp32)
        except UnsupportedDtype as error:
            skipped[p] = str(error)
if "q4_1" in precisions:
    why = ("the Q4_1 file holds SmolLM2-135M; this run's model is " + model_name if model_name != "smollm2-135m"
           else llama_unavailable())
    if why:
        skipped["q4_1"] = why
use_llama = "q4_1" in precisions and "q4_1" not in skipped
torch_paths = [p for p in precisions if p in models] or ["fp32"]
cost, unpriced = {}, {}  # a configuration chapter 0 did not measure is timed here but not predicted
for p in torch_paths:
    if p != "int8":
        try:
            cost[p] = costmodel.CostModel(ceilings, model_name, shape.with_dtype(p), p, threads)
            cost[p].decode(contexts[0])  # raises, naming what chapter 0 lacks, before any work
        except ValueError as error:
            cost.pop(p, None)
            unpriced[p] = str(error)
results = Results("08_cheaper_decode", params=P, quick=quick, device=device, model=model_name)
register = claims.Claims()
tokenizer = fp32.tokenizer
eos = getattr(tokenizer, "eos_token_id", None)

# %%
def chat_ids(text: str, random_tokens: int) -> torch.Tensor:
    """``text`` in the model's chat template, or (a model without a tokenizer) ``random_tokens`` random ids."""
    if tokenizer is None or getattr(tokenizer, "chat_template", None) is None:
        return random_prompt(random_tokens, fp32.vocab_size, seed=1, device=device)
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                         return_tensors="pt", return_dict=True)["input_ids"].to(device)


def model_of(section: str) -> str:
    """The model an earlier chapter measured, from its provenance (read where :func:`lib.results.load_table` reads)."""
    for root in dict.fromkeys([output_root(quick), REPO_ROOT]):
        path = root / "data" / section / "provenance.json"
        if path.exists():
            return json.loads(path.read_text()).get("model") or "its model"
    return "its model"


pd.Series({**describe_environment(device, None, model_name), "threads": threads, "precisions run": torch_paths +
           (["q4_1 (llama.cpp)"] if use_llama else []),
           "skipped": "; ".join(f"{p}: {why}" for p, why in skipped.items()) or "none",
           "not predicted": "; ".join(f"{p}: {why}" for p, why in unpriced.items()) or "none"}).to_frame("this run")

# %% [markdown]
# ## What this run found

# %%
opening = prose.Opening()

# %% [markdown]
# ## 1. Fewer bytes per token
#
# A step at context `c` reads its weights once and its cache of `c` positions. The weights' bytes are counted from
# the tensors each path multiplies by (`lib.quantize.step_weight_bytes`; for the GGUF file, every tensor in it,
# its 8-bit embedding doubling as the LM head); llama.cpp keeps its cache in fp16. What chapter 0 measured of this
# machine, before anything is timed here:

# %%
kernel_rates = {}  # chapter 0's matrix-vector rate of this model, per dtype it measured
for dt in ("fp32", "bf16"):
    try:
        kernel_rates[dt] = ceilings.weight_rate(model_name, dt, threads)
    except (ValueError, KeyError):  # chapter 0 did not measure it
        pass
gguf = smollm2_gguf() if use_llama else None
show(f"{model_name}'s weights are **{shape.weight_bytes / 2**20:,.0f} MiB** in fp32 (half that in a 16-bit dtype, "
     "about a quarter in int8; the Q4_1 file's 4-bit tensors hold a weight in 5 bits with their blocks' scales)"
     + (f"; a llama.cpp step reads the Q4_1 file's **{quantize.gguf_step_bytes(gguf) / 2**20:,.0f} MiB**" if gguf
        else "") + f". The sweep's contexts (`contexts`): {' and '.join(f'{c:,}' for c in contexts)} cached tokens. On "
     f"{threads} thread{'s' * (threads > 1)} chapter 0 measured the streaming read at "
     f"**{ceilings.stream_bandwidth('fp32', threads) / 1e9:.1f} GB/s**" + (
         "; this model's matrix-vector products stream their weights at " + " and ".join(
             f"**{r / 1e9:.1f} GB/s** in {dt}" for dt, r in kernel_rates.items()) if kernel_rates else "") + ".")

# %% [markdown] tags=["predict"]
# **Predict first.** If a step's time were its bytes over the streaming read, how many milliseconds would the fp32,
# bf16, int8 and Q4_1 steps each take at the shortest of `contexts`? Which precision do you expect to be the
# fastest on this machine, and do you expect llama.cpp's 4-bit step to come close to its bytes at the read?

# %% [markdown]
# The book's prices: fp32 and bf16 are priced by the cost model, with the weights at the rate chapter 0 found this
# model's matrix-vector products stream them. Chapter 0 has no int8 kernel, so int8's matrices are timed alone
# here, every one of them on one row, with everything else priced as fp32's step (attention, the growing cache,
# dispatch). For llama.cpp the book has no kernel rate, only the streaming floor: its bytes at chapter 0's read.
# Its claims below say how close it comes to the streaming floor, and what stops it. The sweep's table, below, sets
# every price beside the step it measured.

# %%
def matrices_alone(model, rows: int = 1) -> timing.Timing:
    """Every matrix of ``model`` applied to ``rows`` rows, as a pass calls them, timed alone (seconds)."""
    layers = quantize.matrix_layers(model.model)
    x = {w: torch.randn(1, rows, w, dtype=model.dtype, device=device) for w in {quantize.in_width(m) for m in layers}}

    def run() -> None:
        with torch.inference_mode():
            for m in layers:
                m(x[quantize.in_width(m)])
    return timing.measure(run, device, warmup=2, repeats=7)


alone = {p: matrices_alone(models[p]) for p in torch_paths}
weight_bytes = {p: quantize.step_weight_bytes(models[p].model) for p in torch_paths}
claims.invariant(abs(weight_bytes["fp32"] - shape.weight_bytes) <= 0.01 * shape.weight_bytes,
                 f"the fp32 weights counted from the tensors ({weight_bytes['fp32']:,}) differ from the shape's "
                 f"formula ({shape.weight_bytes:,.0f}) by more than their biases")
cache_value_bytes = {p: (4 if p == "int8" else shape.with_dtype(p).bytes_per_param) for p in torch_paths}
if use_llama:
    weight_bytes["q4_1"], cache_value_bytes["q4_1"] = quantize.gguf_step_bytes(gguf), 2
    show("The GGUF file's tensors by storage type: " + ", ".join(
        f"{kind} {n / 2**20:.1f} MiB" for kind, n in quantize.gguf_tensor_types(gguf).items()) + ".")
paths = torch_paths + (["q4_1"] if use_llama else [])
values_per_token = shape.kv_bytes_per_token / 4  # keys and values, every layer, grouped-query heads


def step_bytes(p: str, context: int) -> float:
    """Bytes one step of path ``p`` reads at ``context`` cached tokens: its weights and its cache."""
    return weight_bytes[p] + values_per_token * cache_value_bytes[p] * context


def predicted(p: str, context: int) -> Prediction | None:
    """Path ``p``'s step at ``context``: the cost model (fp32, 2-byte dtypes), fp32's step with int8's matrices
    timed alone, or nothing (llama.cpp: no kernel rate)."""
    if p in cost:
        return cost[p].decode(context)
    if p == "int8" and "fp32" in cost:
        base = cost["fp32"].decode(context)
        t = alone["int8"]
        return Prediction("decode", 1, 1, context, (Term("int8 matrices", t.low, t.median, "memory",
                                                         "every int8 matrix on one row, timed alone here"),
                                                    *(x for x in base.terms if x.name not in ("block matrices", "LM head"))))
    return None


read = ceilings.stream_bandwidth("fp32", threads)
rows = []

# %%
for p in paths:
    for c in contexts:
        mid = c + steps // 2
        pred = predicted(p, mid)
        rows.append(dict(precision=p, context_tokens=c, weight_mib=weight_bytes[p] / 2**20,
                         cache_mib=values_per_token * cache_value_bytes[p] * mid / 2**20,
                         bytes_per_step=step_bytes(p, mid), predicted_ms=pred.best * 1e3 if pred else math.nan,
                         predicted_median_ms=pred.median * 1e3 if pred else math.nan,
                         floor_at_read_ms=step_bytes(p, mid) / read * 1e3))
prediction = pd.DataFrame(rows)
alone_table = pd.DataFrame([dict(precision=p, matrices_ms=t.median * 1e3, low_ms=t.low * 1e3, high_ms=t.high * 1e3,
                                 weight_mib=weight_bytes[p] / 2**20, gb_s=weight_bytes[p] / t.median / 1e9)
                            for p, t in alone.items()])
results.table(alone_table, "matrices_alone")
prose.shown(alone_table.round(2))  # the prices themselves come beside the measured steps, in the sweep's table

# %% [markdown]
# Which kernel does an int8 matrix run? One int8 step under `torch.profiler` (`lib.profiling.operators`), its
# operators by time:

# %%
if "int8" in models:
    kv8, first8 = sweeps.prefilled(models["int8"], fp32, contexts[0], 0)
    profiled = profiling.operators(lambda: phases.decode(models["int8"], first8, phases.truncate_cache(kv8, contexts[0]), 1),
                                   passes=3, device=device)
    layers8 = sum(isinstance(m, quantize.Int8Linear) for m in models["int8"].model.modules())
    row8 = profiled[profiled.operator == quantize.INT8_KERNEL]
    claims.invariant(len(row8) == 1 and round(float(row8.calls.iloc[0])) == layers8,
                     f"an int8 step should call {quantize.INT8_KERNEL} once per int8 matrix ({layers8})")
    share8 = float(row8.self_ms.iloc[0]) / profiled.self_ms.sum()
    show(f"An int8 step calls `{quantize.INT8_KERNEL}` {layers8} times, once per matrix, and spends "
         f"**{share8:.0%}** of its profiled time there: PyTorch's own int8-weight CPU kernel, which reads the int8 "
         f"weights and widens them in registers, never in memory.")
    display(profiled.head(8).round(3))
    r8, r32 = alone_table.set_index("precision").gb_s[["int8", "fp32"]]
    show(f"Timed alone, that kernel streams int8's {weight_bytes['int8'] / 2**20:.3g} MiB at **{r8:.1f} GB/s**, against "
         f"fp32's matrix-vector products at {r32:.1f} GB/s timed the same way. " + (
             f"That is a quarter of the bytes at {r8 / r32:.0%} of fp32's rate, so int8 weights make this machine's step "
             "slower, not faster." if r8 * 4 < r32 else "It keeps enough of fp32's rate for the smaller weights to pay."),
         how=(f"Both rates are medians over one module call per matrix, each issued on its own; chapter 0's "
              f"{kernel_rates['fp32'] / 1e9:.1f} GB/s for fp32 is the fastest call of its fused blocks, so it runs "
              "higher." if "fp32" in kernel_rates else None))
else:
    print("int8 is not run here: " + skipped.get("int8", "not asked for"))

# %% [markdown]
# ## The sweep
#
# Every path decodes `steps` greedy steps from each context in each of `sweep_runs` runs. The paths take turns
# inside a run, so a slow spell of a shared machine lands on one run of all of them. A point is the median of its
# runs, with the 95 % interval of that median. The PyTorch paths use `lib.sweeps.decode_sweep` (each context's
# cache built once by the fp32 model and cropped back every run). The llama.cpp path runs in its own
# process (`lib.llama.LlamaWorker`), one `eval` of one token and its argmax per step, over a random prompt of the
# context's length. In the same runs, the fp32 model also decodes at the long context over transformers' fp8
# cache (section 2), and llama.cpp on one thread at the short context (below: what stops it).

# %%
worker = None
if use_llama:
    try:
        worker = LlamaWorker(gguf, threads, max(contexts) + max(steps, spec_tokens, side_tokens) + 512).start()
        about = worker.request(kind="about")
        show(f"llama.cpp through llama-cpp-python {about['version']}, {threads} thread{'s' if threads > 1 else ''}; built with: "
             f"`{about['system']}`")
        worker.request(kind="decode", context=max(contexts), steps=3)  # prefills the longest context once; warm-up
    except LlamaFailed as error:
        skipped["q4_1"] = f"llama.cpp's worker failed ({error})"
        print(f"llama.cpp could not run, so the Q4_1 file is not measured: {error}")
        use_llama, worker = False, None
        paths.remove("q4_1")
        prediction = prediction[prediction.precision != "q4_1"]

long = max(contexts)
one_thread = None
if worker and threads > 1:  # llama.cpp on one thread too: does a second thread speed it up, as more memory would not?
    one_thread = LlamaWorker(gguf, 1, max(contexts) + 512).start()
    one_thread.request(kind="decode", context=contexts[0], steps=3)
rows, fp8_rows, llama_one = [], [], []
shared = {c: sweeps.prefilled(fp32, None, c, 0) for c in contexts}  # every precision decodes from these caches
kept = {p: {c: (phases.cast_cache(copy.deepcopy(kv), models[p].dtype), first) for c, (kv, first) in shared.items()}
        for p in torch_paths}

# %%
for run in progress(range(1, sweep_runs + 1), desc="decode runs"):
    for p in torch_paths:
        with contextlib.redirect_stdout(io.StringIO()):  # one run each: its own progress line is not for the page
            table = sweeps.decode_sweep(models[p], contexts, steps=steps, runs=1, prefill_model=fp32,
                                        caches=kept.setdefault(p, {}), label=p, warmup_steps=2)
        rows.append(table.assign(run=run, precision=p))
    kv_long, first_long = kept["fp32"][long]
    phases.truncate_cache(kv_long, long)
    fp8 = quantize.fp8_cache(fp32, kv_long)
    trace = phases.decode(fp32, first_long, fp8, steps)
    fp8_rows.append(dict(run=run, context_tokens=long, median_s=float(np.median(trace.step_times)),
                         stored_bytes=quantize.stored_cache_bytes(fp8)))
    if worker:
        for c in contexts:
            step = worker.request(kind="decode", context=c, steps=steps)["step_s"]
            rows.append(pd.DataFrame([dict(context_tokens=c, run=run, steps=len(step), median_s=float(np.median(step)),
                                           low_s=min(step), high_s=max(step), precision="q4_1")]))
    if one_thread:
        step = one_thread.request(kind="decode", context=contexts[0], steps=steps)["step_s"]
        llama_one.append(dict(run=run, context_tokens=contexts[0], threads=1, median_s=float(np.median(step))))
if one_thread:
    one_thread.close()
decode_runs = pd.concat(rows, ignore_index=True).assign(step_ms=lambda f: f.median_s * 1e3)
results.table(decode_runs, "decode_runs")
sweep = timing.median_range(decode_runs, ["precision", "context_tokens"], ["step_ms"]).merge(
    prediction, on=["precision", "context_tokens"])
sweep["gb_s"] = sweep.bytes_per_step / sweep.step_ms / 1e6
sweep["of_read"] = sweep.gb_s * 1e9 / read
sweep["tokens_per_s"] = 1e3 / sweep.step_ms
sweep["over_predicted"] = sweep.step_ms / sweep.predicted_ms
results.table(sweep, "decode_sweep")
prose.shown(sweep[["precision", "context_tokens", "bytes_per_step", "step_ms", "step_ms_low", "step_ms_high", "predicted_ms",
       "floor_at_read_ms", "over_predicted", "gb_s", "of_read", "tokens_per_s"]].round(3))

# %% [markdown]
# Each precision's step against the bytes it reads, with the streaming read's line beside them:

# %%
spread = {(r.precision, r.context_tokens): Spread.in_row(r, "step_ms") for r in sweep.itertuples()}
fig, ax = plt.subplots(figsize=(7.5, 4.8))
x = np.linspace(0, sweep.bytes_per_step.max() * 1.1, 50)
ax.plot(x / 2**20, x / read * 1e3, "k:", label=f"bytes at the streaming read ({read / 1e9:.1f} GB/s)")
if "fp32" in cost:
    rate = ceilings.weight_rate(model_name, "fp32", threads)
    ax.plot(x / 2**20, x / rate * 1e3, "k--", lw=1, label=f"bytes at the model's fp32 matrix-vector rate ({rate / 1e9:.1f} GB/s)")
for p, g in sweep.groupby("precision", sort=False):
    ax.errorbar(g.bytes_per_step / 2**20, g.step_ms, yerr=[g.step_ms - g.step_ms_low, g.step_ms_high - g.step_ms],
                fmt="o", capsize=3, label=p if p != "q4_1" else "q4_1 (llama.cpp)")
ax.set(xlabel="bytes a step reads (MiB): weights and cache", ylabel="decode step (ms)", xlim=(0, None), ylim=(0, None))
best = sweep.loc[sweep.of_read.idxmax()]
ax.set_title(f"Step time against bytes; the closest to the read: {best.precision} at {best.of_read:.0%}", fontsize=10)
ax.legend(fontsize=7)
results.figure(fig, "step_against_bytes")
plt.show()

# %%
register.claim(
    "step_follows_its_bytes",
    "The PyTorch precisions' steps take the time predicted from their bytes at their own kernels' rates (the cost "
    "model; int8's matrices timed alone), within the tolerance for a time predicted from measured ceilings (the "
    "geometric mean of the points' ratios).")
decided = {k: claims.within(spread[k], Spread(r.predicted_ms, r.predicted_ms, max(r.predicted_median_ms, r.predicted_ms)),
                            claims.PREDICTED_TIME)
           for r in sweep.itertuples() if not math.isnan(r.predicted_ms) for k in [(r.precision, r.context_tokens)]}
def taken_apart(p: str, context: int) -> str:
    """One layer down for path ``p``'s step at ``context``: its matrices and its cache's parts timed alone beside the
    terms that priced them, and which accounts for the step's excess over its prediction (a sentence)."""
    ctx = context + steps // 2
    pred = predicted(p, ctx)
    parts = sweeps.cache_costs(shape, 1, ctx, device, models[p].dtype)
    cache_alone = (parts["attention"].median + parts["concatenation"].median) * 1e3
    cache_priced = (pred.term("attention").best + pred.term("cache copy").best) * 1e3
    matrices_priced = sum(t.best for t in pred.terms if t.name in ("block matrices", "LM head", "int8 matrices")) * 1e3
    excess = spread[(p, context)].mid - pred.best * 1e3
    gaps = {"its matrices": alone[p].median * 1e3 - matrices_priced, "its cache's read and copy": cache_alone - cache_priced}
    slower = excess > 0
    part, gap = (max if slower else min)(gaps.items(), key=lambda kv: kv[1])
    found = gap > 0 if slower else gap < 0
    return (f"One layer down, {p} at {context} tokens: its matrices timed alone take {alone[p].median * 1e3:.1f} ms "
            f"against {matrices_priced:.1f} priced, and its cache's read and copy {cache_alone:.1f} ms against "
            f"{cache_priced:.1f} (`lib.sweeps.cache_costs`). The step is {excess:+.1f} ms off its prediction: "
            + (f"{part} account for {abs(gap):.1f} ms of it; the rest is in the step around them." if found else
               f"neither part alone runs {'slower' if slower else 'faster'} than priced, so the difference is in the "
               "step around them (inside a step the parts share the caches and the cores)."))

# %%
if decided:
    ratios = sweep.dropna(subset=["predicted_ms"])
    worst = ratios.loc[(ratios.over_predicted - 1).abs().idxmax()]
    pooled_steps = claims.geomean_of(spread[k] / float(sweep.set_index(["precision", "context_tokens"]).predicted_ms[k])
                                     for k in decided)
    off = [k for k, verdict in decided.items() if verdict != claims.HELD]  # points not clearly within on their own
    off_points = "" if not off else ", though " + ", ".join(
        f"{p} at {c} tokens ({sweep.set_index(['precision', 'context_tokens']).over_predicted[(p, c)]:.2f}x)"
        for p, c in off) + f" {'was' if len(off) == 1 else 'were'} not clearly within it on {'its' if len(off) == 1 else 'their'} own"
    top_steps = claims.geomean(max(r.predicted_median_ms, r.predicted_ms) / r.predicted_ms
                               for r in sweep.dropna(subset=["predicted_ms"]).itertuples())
    low, high = ratios.over_predicted.min(), ratios.over_predicted.max()
    band = f"{1 / claims.PREDICTED_TIME:.2f}x to {top_steps * claims.PREDICTED_TIME:.2f}x"
    follows = register.record(
        "step_follows_its_bytes", claims.within(pooled_steps, Spread(1.0, 1.0, top_steps), claims.PREDICTED_TIME),
        predicted=f"1.00x ({band} allowed: the tolerance around the price's fastest to median ceilings)",
        measured=f"{pooled_steps.text('.2f', 'x')} geometric mean; per point " + prose.span(low, high, ".2f", "x"),
        evidence="decode_sweep.csv, matrices_alone.csv")
    below_ch0 = all(alone_table.set_index("precision").gb_s.get(dt, 0) * 1e9 < r for dt, r in kernel_rates.items())
    rates = ", ".join(f"{r.precision} {r.gb_s:.1f} GB/s" for r in alone_table.itertuples())
    ch0_rates = (f" The matrices timed alone {'run below' if below_ch0 else 'compare with'} chapter 0's rates that price the "
                 "step (" + ", ".join(f"{dt} {r / 1e9:.1f}" for dt, r in kernel_rates.items()) + " GB/s). Chapter 0 "
                 "times a whole block's matrices in one call and keeps its fastest; here each matrix is timed alone and "
                 "its median kept. How much of the difference that accounts for, this page does not measure."
                 if kernel_rates else "")
    show(f"The PyTorch steps took **{pooled_steps.text('.2f', 'x')}** the time predicted from their bytes at their "
         f"kernels' rates ({low:.2f} to {high:.2f}x point by point)" + claims.pick(
             follows,
             held=f": a decode step here costs its weights' bytes at the speed its kernel reads them, and the matrices "
                  f"timed alone stream at {rates}.",
             not_held=f", far from it; furthest: {worst.precision} at {worst.context_tokens} tokens, "
                      f"{worst.over_predicted:.2f}x. The matrices timed alone stream at {rates}. "
                      + taken_apart(worst.precision, int(worst.context_tokens)),
             unresolved=": too close to call, the median leaning " + {
                 "above what would hold": "slower than priced", "below what would hold": "faster than priced"}.get(
                     claims.leaning(pooled_steps, 1 / claims.PREDICTED_TIME, top_steps * claims.PREDICTED_TIME),
                     "towards the price") + f". The matrices timed alone stream at {rates}."),
         how=f"Decided on the geometric mean of the points' ratios (the 95 % interval of its median over runs), "
             f"allowed {band}: the tolerance for a predicted time, {claims.PREDICTED_TIME:g}x, around the price at its "
             f"ceilings' fastest to median calls{off_points}.{ch0_rates}")
else:
    unpriced_why = "; ".join(unpriced.values()) or "no PyTorch path ran"
    register.record("step_follows_its_bytes", None, evidence=unpriced_why)
    show(register.undecided("step_follows_its_bytes", f"no step has a prediction here: {unpriced_why}"))

# %% [markdown]
# Chapter 0 has no kernel rate for llama.cpp, so its claim is the fraction of the machine's streaming read it reaches
# (`close_to_read`, 70 % by default, is where this chapter calls a kernel close to the machine's limit).

# %%
register.claim(
    "llama_close_to_the_read",
    "llama.cpp's Q4_1 step reads its bytes at a large fraction of chapter 0's streaming read (at least the fraction "
    "this chapter counts as close to the machine's limit).")
llama_why = skipped.get("q4_1", "quick mode leaves llama.cpp out" if quick else
                        "llama.cpp was not asked for (precisions leaves out q4_1)")
if use_llama:
    frac = {c: spread[("q4_1", c)] for c in contexts}
    frac = {c: Spread(step_bytes("q4_1", c + steps // 2) / s.high / 1e6 / (read / 1e9),
                      step_bytes("q4_1", c + steps // 2) / s.mid / 1e6 / (read / 1e9),
                      step_bytes("q4_1", c + steps // 2) / s.low / 1e6 / (read / 1e9)) for c, s in frac.items()}
    lowest = claims.extreme(frac.values(), largest=False)
    reached = register.record("llama_close_to_the_read", claims.at_least(lowest, close_to_read),
                              predicted=f"at least {close_to_read:.0%} of the read", evidence="decode_sweep.csv",
                              measured=", ".join(f"{f.mid:.0%} at {c}" for c, f in frac.items()))
    show(f"Against chapter 0's streaming read ({read / 1e9:.1f} GB/s), llama.cpp's Q4_1 step reads its bytes at "
         + ", ".join(f"{f.mid:.0%} ({f.low:.0%}-{f.high:.0%}) at {c} tokens" for c, f in frac.items()) + ": "
         + claims.pick(reached, held="at every context at or above", not_held="below", unresolved="too near")
         + f" the {close_to_read:.0%} this chapter calls close to the machine's limit" + claims.pick(
             reached, held=".", not_held=" (what stops it: below).",
             unresolved=f" to call; the lowest median lies {claims.leaning(lowest, close_to_read)}."))
else:
    register.record("llama_close_to_the_read", None, evidence=llama_why)
    show(register.undecided("llama_close_to_the_read", f"{llama_why}."))

# %%
# One layer down. Reading the weights and a step's fixed costs (building and launching its graph, the one row of
# logits) come once per pass; the kernels' arithmetic (unpacking the 4-bit blocks, the dot products) comes again for
# every token in it. So llama.cpp also runs one pass over `batch` tokens against one over a single token, each the
# prefill of a fresh random prompt (a `decode` request of no steps), taking turns, `sweep_runs` times.
batch, llama_passes = 4, []
if use_llama:
    for run in range(1, sweep_runs + 1):
        for k in (1, batch, 1, batch):
            start = time.perf_counter()
            worker.request(kind="decode", context=k, steps=0, seed=1000 + len(llama_passes))  # a new prompt each
            llama_passes.append(dict(run=run, tokens=k, wall_s=time.perf_counter() - start))
    walls = pd.DataFrame(llama_passes)
    results.table(walls, "llama_batch_runs")
    by_run = walls.pivot_table(index="run", columns="tokens", values="wall_s", aggfunc="median")
    per_token = Spread.of((by_run[batch] - by_run[1]) / (batch - 1) * 1e3)  # ms each added token costs a pass
    step0 = spread[("q4_1", contexts[0])].mid  # the sweep's one-token step (ms)
    at_read_ms = step_bytes("q4_1", contexts[0] + steps // 2) / read * 1e3  # its bytes at the streaming read
    over = step0 - at_read_ms  # what the step takes beyond reading its bytes at the streaming read
    near = reached == claims.HELD or over <= 0
    arithmetic = claims.at_least(per_token / over, 0.5) if not near else None
    said = "all" if per_token.mid >= over else f"{per_token.mid / over:.0%}"
    portion = ("" if per_token.mid >= 0.95 * over else "most of " if per_token.mid >= 2 / 3 * over else
               "more than half of " if per_token.mid > over / 2 else "about half of ")  # the share, in words
    show(f"One layer down, each token added to one llama.cpp pass cost **{per_token.text('.1f', 'ms')}** more. " + (
        f"Its {step0:.1f} ms step at {contexts[0]} cached tokens is close to its bytes' {at_read_ms:.1f} ms at "
        "the streaming read: reading them sets the step, and the arithmetic runs alongside the read." if near else
        f"Its {step0:.1f} ms step at {contexts[0]} cached tokens takes {over:.1f} ms beyond its bytes' "
        f"{at_read_ms:.1f} ms at the streaming read, and that added cost is {said} of it" + claims.pick(
            arithmetic,
            held=". The kernels' arithmetic (unpacking the 4-bit blocks, the dot products) is added to the read rather "
                 f"than hidden under it, and it is {portion}what keeps the step from the read" + (
                     "." if not portion else "; the rest is paid once per pass (building and launching the step, its "
                     "row of logits)."),
            not_held=": a cost paid once per pass beyond reading its bytes (building and launching the step, its row "
                     "of logits, or a slower read than the streaming one), not its arithmetic, keeps the step from "
                     "the read.",
            unresolved=": the arithmetic and the cost paid once per pass are too close to say which keeps the step "
                       "from the read more.")),
        how=f"A pass over k tokens is a `decode` request of no steps over a fresh random prompt of k tokens: its "
            f"prefill, one pass, and the saving of its cache, timed from the chapter; k = 1 and {batch}, twice each in "
            f"each of {by_run.index.size} runs, the median of the two kept (median wall times "
            f"{by_run[1].median() * 1e3:.1f} ms over one token, {by_run[batch].median() * 1e3:.1f} ms over {batch}). "
            f"Their difference over {batch - 1} is one token's work, with the 95 % interval of its median over runs; "
            "both passes compute one row of logits. Its share of the step's excess over the read is decided against "
            "one half on that interval" + ("" if near else f" ({(per_token / over).text('.0%')})") + ".")

# %% [markdown]
# What stops it? A step waiting on memory gains from more threads no more than chapter 0's streaming read does; a
# step whose arithmetic (unpacking 4-bit blocks, the dot products) splits evenly over two threads nearly halves. So
# a gain above the read's rules memory out. A gain at or below it is what memory would give, and also what work
# that does not split evenly would give: the fraction of the read the step reached (above) tells those two apart.
# Both runs took turns above, at the short context.

# %%
register.claim(
    "llama_bound_by_its_cores",
    "All threads speed llama.cpp's step up, against one, by more than they speed up chapter 0's streaming read, "
    "which a step waiting on memory cannot do.")
apple = load_reference("llama_cpp_apple_bandwidth")
reference = ", ".join(f"{r.processor} {r.llama_cpp_gb_s:g} of {r.physical_gb_s:g} GB/s "
                      f"({r.llama_cpp_gb_s / r.physical_gb_s:.0%})" for r in apple.itertuples())
if llama_one:
    one = pd.DataFrame(llama_one).set_index("run").median_s
    many = decode_runs[(decode_runs.precision == "q4_1") & (decode_runs.context_tokens == contexts[0])].set_index("run").median_s
    gain = Spread.of(one / many)
    read_gain = read / ceilings.stream_bandwidth("fp32", 1)
    q4_rows = sweep[(sweep.precision == "q4_1") & (sweep.context_tokens == contexts[0])].of_read
    q4_read = float(q4_rows.iloc[0]) if len(q4_rows) else float("nan")  # its step's fraction of the streaming read
    results.table(pd.DataFrame(llama_one).assign(all_threads_median_s=lambda f: f.run.map(many)), "llama_threads_runs")
    # One core that does not saturate the memory leaves little room between the read's gain and the cores': a gain
    # wholly above or wholly below the read's still decides (more than memory gives; no more than it gives), but one
    # whose interval straddles it is then no sign of either, so that one alone is left not decided.
    decidable = read_gain * claims.PREDICTED_RATIO < threads
    by_read = claims.verdict_of(gain.low > read_gain, gain.high <= read_gain)  # which side of the read's gain it lies
    if not decidable and by_read == claims.UNRESOLVED:
        by_read = None
    at_read_ms = step_bytes("q4_1", contexts[0] + steps // 2) / read * 1e3  # its bytes at chapter 0's streaming read
    held_back = (f"It moved {q4_read:.0%} of the read in the sweep, at least the {close_to_read:.0%} counted close: "
                 "memory sets its time." if q4_read >= close_to_read else
                 f"Its step took {spread[('q4_1', contexts[0])].mid:.1f} ms at {contexts[0]} cached tokens, where its "
                 f"bytes at chapter 0's streaming read would take {at_read_ms:.1f} ms ({q4_read:.0%} of the read, below "
                 f"the {close_to_read:.0%} this chapter counts as close): reading its bytes is not what fills its step; "
                 f"the pass over {batch} tokens above says what does.")
    bound = register.record("llama_bound_by_its_cores", by_read,
                            predicted=f"more than the read's {read_gain:.2f}x",
                            measured=gain.text(".2f", "x"),
                            evidence="llama_threads_runs.csv; data/00_machine (read at 1 and all threads)"
                            + ("" if by_read is not None else f"; not decided: the read itself gains {read_gain:.2f}x "
                               f"on {threads} threads, within the tolerance of an even split's {threads}x, and the "
                               "step's gain straddles it"))
    if by_read is not None:
        show(f"On {threads} threads llama.cpp's step ran {gain.text('.2f', 'x')} faster than on one, " + claims.pick(
            bound, held=f"more than the {read_gain:.2f}x chapter 0's streaming read gains: memory does not set its "
                        "time, its cores' work does (the arithmetic or the cost paid once per pass: the pass over "
                        f"{batch} tokens above says which, where it can), so on this machine it cannot reach the "
                        "read. Published "
                        f"figures show the fraction falling where a chip has more bandwidth for its cores: {reference}.",
            not_held=f"no more than the {read_gain:.2f}x chapter 0's streaming read gains: a gain that memory could "
                     f"explain. {held_back} Published figures for comparison: {reference}.",
            unresolved=f"against the {read_gain:.2f}x chapter 0's streaming read gains: too close to tell whether it "
                       f"gains more than a step waiting on memory could. Published figures for comparison: {reference}."))
    else:
        show(f"On {threads} threads llama.cpp's step ran **{gain.text('.2f', 'x')}** faster than on one, neither "
             f"clearly more nor clearly less than the {read_gain:.2f}x chapter 0's streaming read itself gains from "
             f"{threads} threads (one core does not saturate the memory). With the read that close to a perfectly even "
             f"split's {threads}x, a gain near it cannot tell cores from memory, so the claim (the evidence table) is "
             f"left not decided here. {held_back}")
else:
    no_second = llama_why if not use_llama else "this run has one thread, so there is no second to add"
    register.record("llama_bound_by_its_cores", None, evidence=no_second)
    show(register.undecided("llama_bound_by_its_cores", f"{no_second}."))

# %%
short = sweep[sweep.context_tokens == contexts[0]].sort_values("of_read", ascending=False)
close = [f"{r.precision} ({r.of_read:.0%})" for r in short.itertuples() if r.of_read >= close_to_read]
far = [f"{r.precision} ({r.of_read:.0%})" for r in short.itertuples() if r.of_read < close_to_read]
half = "fp16" if on_gpu else "bf16"
label = ("" if half not in ceilings.dtypes() else f" Chapter 0 found {half} " + (
    "with hardware instructions on this machine." if ceilings.hardware_support(half) else
    "without hardware instructions here: its products run a slow kernel."))
show(f"At {contexts[0]} cached tokens, the precisions of this sweep whose eager step gets close to the machine's limit "
     f"(at least {close_to_read:.0%} of the streaming read): {', '.join(close) or 'none'}; the ones that do not: "
     f"{', '.join(far) or 'none'} (section 5 measures the compiled step beside them)." + label)

# %% [markdown]
# ### Fewer bytes are not free
#
# Each precision answers chapter 1's question greedily, beside fp32's answer: how many tokens agree before the
# first difference, and how far the logits of the prompt's last position move (largest absolute difference, and
# whether the top token is the same). With SmolLM2, whose fp32 weights are the Q4_1 file's own values, llama.cpp's
# differences come from its arithmetic (its Q4_1 kernels round the activations to 8 bits before each dot
# product, and its cache is fp16), not from the weights. The int8 path's come from rounding those weights once more.

# %%
question_ids = chat_ids(question, 24)
answers, last_logits = {}, {}
for p in torch_paths:
    logits, kv = phases.prefill(models[p], question_ids)
    last_logits[p] = logits[0, -1].float().cpu()
    first = logits[:, -1:].argmax(-1)
    answers[p] = [int(first)] + phases.decode(models[p], first, kv, answer_tokens - 1, eos_token_id=eos).token_ids
if worker:
    reply = worker.request(kind="greedy", prompt=question_ids[0].tolist(), new_tokens=answer_tokens)
    answers["q4_1"], last_logits["q4_1"] = reply["tokens"], torch.tensor(reply["logits"])
quality = pd.DataFrame([dict(precision=p, tokens=len(a), agree_with_fp32=speculative.tokens_agreeing(a, answers["fp32"]),
                             same_top_token=int(last_logits[p].argmax()) == int(last_logits["fp32"].argmax()),
                             largest_logit_difference=float((last_logits[p] - last_logits["fp32"]).abs().max()),
                             of_largest_logit=float((last_logits[p] - last_logits["fp32"]).abs().max()
                                                    / last_logits["fp32"].abs().max()),
                             answer=tokenizer.decode(a, skip_special_tokens=True) if tokenizer else str(a[:8]))
                        for p, a in answers.items()])
results.table(quality, "quality")
others = quality[quality.precision != "fp32"]
diverged = [f"{r.precision}'s after {prose.tokens(r.agree_with_fp32)}" for r in others.itertuples()
            if r.agree_with_fp32 < min(r.tokens, len(answers["fp32"]))]
same = [r.precision for r in others.itertuples() if r.agree_with_fp32 >= min(r.tokens, len(answers["fp32"]))]
show(" ".join(filter(None, [
    f"{', '.join(same)} answer{'s' if len(same) == 1 else ''} as fp32 does, token for token." if same else "",
    f"The answer first differs from fp32's: {'; '.join(diverged)}." if diverged else "",
    "The last logits move by up to " + ", ".join(f"{r.largest_logit_difference:.3g} in {r.precision} "
                                                 f"({r.of_largest_logit:.1%} of the largest)" for r in others.itertuples())
    + "." if len(others) else ""])))
prose.table(quality)

# %% [markdown]
# ## 2. Fewer bytes per cached token
#
# Grouped-query attention stores keys and values for fewer heads than it queries (chapter 3's table: SmolLM2 has 3
# KV heads for 9 query heads). What that buys shows at long contexts, where the cache is a real share of a step's
# bytes. A KV head for every query head would also widen the key and value projections:

# %%
gpt2, real = (machine.MODELS[m][0].with_dtype("fp32") for m in ("gpt2-small", "smollm2-135m"))
mha = dataclasses.replace(real, kv_heads=real.heads, name="smollm2-135m as multi-head")
show(f"SmolLM2's fp32 weights hold **{real.weight_bytes / 2**20:.1f} MiB**; with {real.heads} KV heads instead of "
     f"{real.kv_heads}, **{mha.weight_bytes / 2**20:.1f} MiB**. The sweep's longest context is "
     f"{max(contexts):,} tokens.")

# %% [markdown] tags=["predict"]
# **Predict first.** A cached token holds a key and a value for every layer and KV head: 2 x layers x KV heads x
# head size x bytes per value (SmolLM2: 30 layers, 3 KV heads of 64 values, 4 bytes each in fp32; its weights just
# above). Section 1's table gives the cache's share of a step at the sweep's contexts as SmolLM2 is. Suppose SmolLM2
# kept a KV head for each of its 9 query heads instead. How many kilobytes would a cached token hold? What share of
# the fp32 step's bytes would the cache be at the sweep's longest context, and after how many tokens of context
# would the cache hold as many bytes as the weights?

# %% [markdown]
# The measurement first: how much the fp32 step grew from the short context to the long one in the sweep's runs,
# against the cost model's price of that growth. The arithmetic the question asks for follows it.

# %%
kv_table = pd.DataFrame([dict(model=s.name, kv_heads=s.kv_heads, query_heads=s.heads, kib_per_token=s.kv_bytes_per_token / 1024,
                              weight_mib=s.weight_bytes / 2**20, cache_share_at_long=s.kv_bytes_per_token * long /
                              (s.kv_bytes_per_token * long + s.weight_bytes),
                              tokens_until_cache_equals_weights=s.weight_bytes / s.kv_bytes_per_token)
                         for s in (gpt2, real, mha)])
_ = results.table(kv_table, "cache_bytes_per_token")  # shown after the measurement, below

# %%
g = decode_runs[decode_runs.precision == "fp32"].pivot(index="run", columns="context_tokens", values="step_ms")
growth = Spread.of(g[long] - g[contexts[0]])
predicted_growth = (cost["fp32"].decode(long + steps // 2).best - cost["fp32"].decode(contexts[0] + steps // 2).best) * 1e3 \
    if "fp32" in cost else math.nan
ch3 = load_table("03_decode_sweep", "growth_by_run", quick=quick)  # the growth chapter 3 shows, run by run
register.claim(
    "cache_growth_follows_its_bytes",
    "The fp32 step grows from the short to the long context by the growth of the cost model's price of the step: "
    "attention's read and the growing cache's copy, and the small kernels around them at that cache's size.")
if math.isnan(predicted_growth):
    verdict = None
elif growth.low > 0 and predicted_growth > 0:
    verdict = claims.within(growth, predicted_growth, claims.PREDICTED_TIME)
else:
    verdict = claims.UNRESOLVED if growth.high > 0 else claims.NOT_HELD
verdict = register.record("cache_growth_follows_its_bytes", verdict, predicted=f"{predicted_growth:.2f} ms",
                          measured=growth.text(".2f", "ms"), evidence="decode_runs.csv (fp32, paired within runs)")
grew = f"fp32 step grew by {growth.text('.2f', 'ms')} from {contexts[0]} to {long} cached tokens"
term_growth = {} if math.isnan(predicted_growth) else {  # the price's growth, term by term (ms)
    t.name: (cost["fp32"].decode(long + steps // 2).term(t.name).best - t.best) * 1e3
    for t in cost["fp32"].decode(contexts[0] + steps // 2).terms}
priced_as = "" if not term_growth else (
    f"{predicted_growth:.2f} ms the cost model's step grows by (attention's read and the cache's copy "
    f"{term_growth.get('attention', 0) + term_growth.get('cache copy', 0):.2f} ms, the small kernels around them "
    f"{term_growth.get('dispatch', 0):.2f} ms)")
per_k, kib = growth.mid / (long - contexts[0]) * 1e3, shape.kv_bytes_per_token / 1024
lean = "" if math.isnan(predicted_growth) else claims.leaning(growth, predicted_growth / claims.PREDICTED_TIME,
                                                               predicted_growth * claims.PREDICTED_TIME)
show(claims.pick(
    verdict, held=f"The {grew}, about the {priced_as}. That is {per_k:.2f} ms per 1,000 cached tokens, for {kib:.0f} "
                  "KiB of cache a token.",
    not_held=f"The {grew} ({per_k:.2f} ms per 1,000 cached tokens, for {kib:.0f} KiB a token). That is not the "
             f"{priced_as}; one layer down, below, says where the difference is.",
    unresolved=f"The {grew}, {growth.mid / predicted_growth:.2f}x the {priced_as}. The median ran " + {
        "above what would hold": f"longer than priced, though the low end of its runs' range "
                                 f"({growth.low:.2f} ms) " + (f"lies within {claims.PREDICTED_TIME:g}x of the price"
                                 if growth.low >= predicted_growth / claims.PREDICTED_TIME else "reaches below it"),
        "below what would hold": f"shorter than priced, though the high end of its runs' range "
                                 f"({growth.high:.2f} ms) " + (f"lies within {claims.PREDICTED_TIME:g}x of the price"
                                 if growth.high <= predicted_growth * claims.PREDICTED_TIME else "reaches above it")}.get(
        lean, "near the price") + ". The parts timed alone, next, say where the time goes.",
    not_measured=register.undecided("cache_growth_follows_its_bytes",
                                    f"the {grew}, with no prediction here: {unpriced.get('fp32', '')}")),
    how=None if math.isnan(predicted_growth) else
    "Decided on the growth taken run by run (the 95 % interval of its median), allowed {:.2f}–{:.2f} ms: the tolerance "
    "for a predicted time either way.".format(*claims.allowed(predicted_growth, claims.PREDICTED_TIME)))
alone_parts = {c: sweeps.cache_costs(shape, 1, c + steps // 2, device) for c in (contexts[0], long)}
alone_growth = sum(alone_parts[long][k].median - alone_parts[contexts[0]][k].median for k in ("attention", "concatenation")) * 1e3
priced_parts = sum(cost["fp32"].decode(long + steps // 2).term(t).best - cost["fp32"].decode(contexts[0] + steps // 2)
                   .term(t).best for t in ("attention", "cache copy")) * 1e3 if "fp32" in cost else math.nan
inside = growth.low <= alone_growth <= growth.high  # the parts alone against the step's growth
priced_right = (claims.within(alone_growth, priced_parts, claims.PREDICTED_TIME) == claims.HELD
                if alone_growth > 0 and priced_parts > 0 else None)  # the cost model's price of the same parts

# %%
parts_price = "" if priced_right is None else (
    f" The cost model prices these two parts' growth at {priced_parts:.2f} ms (of its step's {predicted_growth:.2f} "
    f"ms), {priced_parts / alone_growth:.2f}x what they cost alone: " + ("as priced." if priced_right else
                           "not as priced, so what is off is its price of these parts (chapter 0's rates for "
                           "attention and the concatenation at these sizes)"
                           + (", not the step around them." if inside else ", and the step around them.")))
show(f"One layer down: attention and the growing cache's copy, timed alone on caches of these sizes "
     f"(`lib.sweeps.cache_costs`), cost **{alone_growth:.2f} ms** more at {long} tokens than at {contexts[0]}, "
     + (f"about the step's own growth, {growth.text('.2f', 'ms')}: the parts account for it." if inside
        else f"{'less' if alone_growth < growth.low else 'more'} than the step's growth, {growth.text('.2f', 'ms')}: "
        f"the step around them {'adds' if alone_growth < growth.low else 'takes away'} the rest.") + parts_price,
     how=(f"The parts' growth is set against the 95 % interval of the step's growth, {growth.text('.2f', 'ms')}: "
          + ("inside it." if inside else "outside it.")
          + ("" if priced_right is None else f" The cost model's price of the parts is held to "
             f"{claims.PREDICTED_TIME:g}x either way of what they cost alone (the tolerance for a predicted time): "
             + ("within it." if priced_right else "outside it."))))
def growth_beside(per_token: float, per_byte: float, other: str, other_layers: int, apart: bool) -> str:
    """What this model's growth per cached token, ``per_token`` times model ``other``'s (medians; ``apart`` when the
    two growths' 95 % intervals do not overlap), says beside its bytes a token, ``per_byte`` times ``other``'s:
    whether fewer bytes a token bought time here (a sentence)."""
    said = f" Per cached token, {model_name}'s step grew {per_token:.2f}x as much as {other}'s, for {per_byte:.2f}x the bytes a token"
    if per_token > per_byte * claims.PREDICTED_TIME:
        return (said + ". At these sizes the growth does not follow the cache's bytes: the fewer bytes a token "
                + ("bought less time than they would say" if per_token < 1 else "bought no time here" if apart
                   else "bought no time by the medians, but the two growths' intervals overlap, so this run cannot "
                   "tell whether they bought any")
                + f". {model_name} runs attention and the cache's copy in {shape.layers} layers to "
                f"{other}'s {other_layers}; this page does not take the growth apart by model.")
    if per_token < per_byte / claims.PREDICTED_TIME:
        return said + ": it grew less than its bytes alone would say."
    return said + ": about in proportion, as the cache's bytes would say."


g3 = None if ch3 is None else ch3[(ch3.dtype == "fp32") & ch3.comparison.str.startswith("context ")]
if g3 is not None and not g3.empty:
    g3 = g3[g3.threads == (threads if threads in set(g3.threads) else g3.threads.max())]
    c3 = [int(x) for x in g3.comparison.iloc[0].removeprefix("context ").split(" against ")]  # "context 16 against 960"
    grew3 = Spread.of(g3.difference_s * 1e3)
    m3 = model_of("03_decode_sweep")
    kib3 = machine.MODELS[m3][0].with_dtype("fp32").kv_bytes_per_token / 1024 if m3 in machine.MODELS else math.nan
    show(f"Chapter 3 measured {m3}'s fp32 step ({int(g3.threads.iloc[0])} thread{'s' * int(g3.threads.iloc[0] > 1)}) "
         f"growing by **{grew3.text('+.1f', 'ms')}** from {c3[0]} to {c3[1]} cached tokens, "
         f"{grew3.mid / (c3[1] - c3[0]) * 1e3:.2f} ms per 1,000 ({kib3:.3g} KiB a token); {model_name}'s grew by "
         f"**{growth.mid / (long - contexts[0]) * 1e3:.2f} ms** per 1,000 here ({shape.kv_bytes_per_token / 1024:.3g} KiB a "
         f"token). As multi-head, SmolLM2 would store {mha.kv_bytes_per_token / real.kv_bytes_per_token:.0f} times the "
         "bytes a token." + ("" if math.isnan(kib3) or min(grew3.mid, growth.mid) <= 0 or m3 == model_name else
                             growth_beside(growth.mid / (long - contexts[0]) / (grew3.mid / (c3[1] - c3[0])),
                                           shape.kv_bytes_per_token / 1024 / kib3, m3, machine.MODELS[m3][0].layers,
                                           apart=growth.low / (long - contexts[0]) > grew3.high / (c3[1] - c3[0])
                                           or growth.high / (long - contexts[0]) < grew3.low / (c3[1] - c3[0]))))

# %% [markdown]
# The arithmetic the question asked for, for GPT-2 small (multi-head), SmolLM2 as it is, and SmolLM2 as if it kept a
# KV head per query head:

# %%
prose.shown(kv_table.round(3))

# %% [markdown]
# ### A quantized cache: memory or time?
#
# transformers' `QuantizedCache` with its fp8 backend stores keys and values in one byte each. Read how it serves
# a step before predicting what it saves:

# %%
display(prose.source(Fp8QuantizedLayer.update, Fp8QuantizedLayer._dequantize))
show(f"At {long:,} cached tokens the fp32 cache holds **{long * shape.kv_bytes_per_token / 1e6:.1f} MB** (an fp8 one "
     f"a quarter of that). Chapter 0's streaming copy moves **{ceilings.stream_bandwidth('fp32', threads, 'copy') / 1e9:.1f}"
     f" GB/s** (every byte read and every byte written counted), its streaming read "
     f"{ceilings.stream_bandwidth('fp32', threads) / 1e9:.1f} GB/s.")

# %% [markdown] tags=["predict"]
# **Predict first.** The fp8 cache stores one byte a value where the fp32 cache stores four, and the code above is
# all it does at a step. At the longest of `contexts`, do you expect a step over it to take less time than over
# the fp32 cache, the same, or more, and by about how many milliseconds?

# %% [markdown]
# <details><summary>The book's prediction (open it once you have written yours)</summary>
#
# It appends the new position to the fp8 tensors (a copy, as the growing fp32 cache does, but of one byte a
# value), then **de-quantises the whole cache** for attention: a widening copy to fp32 and a multiply by the scale.
# Attention then reads fp32 as before. So it saves memory, and each step moves more bytes, not fewer
# (`lib.quantize.cache_traffic`): a prediction that it costs time, priced at chapter 0's copy rate.
#
# </details>
#
# The bytes a step moves per cached value outside attention's own read, as transformers implements each cache:

# %%
display(prose.source(quantize.cache_traffic))
fp8_runs = pd.DataFrame(fp8_rows)
paired = decode_runs[(decode_runs.precision == "fp32") & (decode_runs.context_tokens == long)].set_index("run").median_s
fp8_runs["dynamic_s"] = fp8_runs.run.map(paired)
results.table(fp8_runs, "fp8_cache_runs")
values = values_per_token * long
extra_bytes = values * (quantize.cache_traffic("fp8", 4) - quantize.cache_traffic("dynamic", 4))
copy_rate = ceilings.stream_bandwidth("fp32", threads, "copy")
predicted_extra = extra_bytes / copy_rate * 1e3
extra = Spread.of((fp8_runs.median_s - fp8_runs.dynamic_s) * 1e3)
stored = fp8_runs.stored_bytes.iloc[0] / (shape.kv_bytes_per_token * long)
claims.invariant(stored < 0.3, f"the fp8 cache should store about a quarter of the fp32 bytes, stores {stored:.2f}")
src = torch.randn(1, shape.kv_heads, long, shape.head_dim, device=device)
q8, scale = src.to(torch.float8_e4m3fn), torch.tensor(0.5)
widen = timing.measure(lambda: q8.float() * scale, device, warmup=2, repeats=7)
widen_rate = q8.numel() * 9 / widen.median  # 1 byte read, 4 written; 4 read and 4 written by the multiply
register.claim(
    "fp8_cache_saves_memory_not_time",
    "transformers' fp8 cache stores a quarter of the fp32 cache's bytes but makes the step slower by the bytes its "
    "de-quantisation moves, priced at chapter 0's copy rate.")
if extra.low > 0:
    as_priced = claims.within(extra, predicted_extra, claims.PREDICTED_TIME)
else:
    as_priced = claims.UNRESOLVED if extra.high > 0 else claims.NOT_HELD
repriced = values * quantize.cache_traffic("fp8", 4) / widen_rate * 1e3 - values * quantize.cache_traffic("dynamic", 4) / copy_rate * 1e3
repriced_fits = claims.within(extra, repriced, claims.PREDICTED_TIME) if extra.low > 0 and repriced > 0 else None
part = ("at that rate the conversion alone would cost more than the step lost" if repriced > extra.mid else
        f"at that rate the conversion accounts for {repriced / extra.mid:.0%} of what the step lost, not all of it")

# %%
slow_widen = widen_rate < copy_rate / claims.PREDICTED_TIME  # the conversion runs well below the copy's rate
why = (f"One layer down: widening one layer's fp8 keys to fp32 and scaling them, timed alone, moves "
       f"{widen_rate / 1e9:.1f} GB/s against the copy's {copy_rate / 1e9:.1f}: "
       + (f"the conversion from fp8 is the slow part, not the bytes. Priced at that rate, the extra is "
          f"{repriced:.1f} ms, {repriced / extra.mid:.2f}x the {extra.mid:.1f} ms measured: " + {
              claims.HELD: "the conversion accounts for it.",
              claims.NOT_HELD: f"{part}.",
              claims.UNRESOLVED: (f"about what the step lost, a little {'more' if repriced > extra.mid else 'less'}"
                                  if 1 / claims.PREDICTED_TIME <= repriced / extra.mid <= claims.PREDICTED_TIME
                                  else f"{'more' if repriced > extra.mid else 'less'} than the step lost at the median"
                                  ) + "; too close "
                                 "to call whether the conversion accounts for all of it."}.get(repriced_fits, f"{part}.")
          if slow_widen else "the conversion keeps the copy's rate, so the rest is elsewhere in the step."))
fp8_low, fp8_high = claims.allowed(predicted_extra, claims.PREDICTED_TIME)
fp8_how = (f"The extra is taken run by run, the fp8 cache's step less the fp32 cache's, {extra.text('.1f', 'ms')} (the "
           f"95 % interval of its median), against {fp8_low:.1f}–{fp8_high:.1f} ms allowed around the prediction (the "
           f"tolerance for a predicted time, {claims.PREDICTED_TIME:g}x either way)"
           + ("" if repriced_fits is None or not slow_widen else
              f"; the conversion's price, {repriced:.1f} ms, is held to the same tolerance of the measured extra: "
              + {claims.HELD: "within it", claims.NOT_HELD: "outside it",
                 claims.UNRESOLVED: "the interval reaches across its edge"}[repriced_fits]) + ".")
register.claim("fp8_cache_is_no_faster",
               "transformers' fp8 cache makes the decode step no faster than the fp32 cache it replaces.")
slower = register.record("fp8_cache_is_no_faster", claims.verdict_of(extra.low >= 0, extra.high < 0),
                         predicted="slower or equal", measured=extra.text(".1f", "ms") + " extra",
                         evidence="fp8_cache_runs.csv (paired within runs)")
took_extra = (f"{extra.text('.1f', 'ms')} longer" if extra.mid >= 0 else
              f"{(extra * -1).text('.1f', 'ms')} less")  # a cache that ran faster took less time, not "-4.5 ms longer"
show(f"Over transformers' fp8 cache the step at {long} tokens " + claims.pick(
    slower, held=f"was slower than over the fp32 cache, by {extra.text('.1f', 'ms')}.",
    not_held=f"was faster than over the fp32 cache, by {(extra * -1).text('.1f', 'ms')}.",
    unresolved=f"took {took_extra} than over the fp32 cache: too close to zero to say which is "
               "faster."), how=f"Decided on the extra taken run by run, {extra.text('.1f', 'ms')} (the 95 % interval of "
                               "its median): slower where all of it lies at or above zero.")
as_priced = register.record("fp8_cache_saves_memory_not_time", as_priced, predicted=f"+{predicted_extra:.1f} ms",
                            measured=extra.text(".1f", "ms") + " extra", evidence="fp8_cache_runs.csv (paired within runs)")
show(f"The fp8 cache stores {stored:.0%} of the fp32 cache's bytes; over it the step at {long} tokens took "
     f"{took_extra}, " + claims.pick(
         as_priced, held=f"about the +{predicted_extra:.1f} ms predicted from the bytes its de-quantisation moves.",
         not_held=f"not the +{predicted_extra:.1f} ms predicted from the bytes its de-quantisation moves at chapter "
                  f"0's copy rate. {why}",
         unresolved=f"against +{predicted_extra:.1f} ms predicted: too close to call, the median "
                    + {"above what would hold": "above the prediction", "below what would hold": "below it"}.get(
                        claims.leaning(extra, predicted_extra / claims.PREDICTED_TIME,
                                       predicted_extra * claims.PREDICTED_TIME), "near it") + "."), how=fp8_how)
prose.shown(fp8_runs.assign(extra_ms=(fp8_runs.median_s - fp8_runs.dynamic_s) * 1e3).round(4))

# %% [markdown]
# ## 3. More tokens per pass: speculative decoding by prompt lookup
#
# A task that quotes its input lets a step guess: prompt lookup (transformers' `prompt_lookup_num_tokens`) finds the
# last few generated tokens earlier in the prompt and proposes the `k` tokens that followed them; one pass over the
# guesses checks them all (`lib.speculative`). Its answer is greedy decoding's, token for token; its time is the sum
# of the passes it made. A pass over `k + 1` positions does not cost what a pass over one does: chapter 2 timed
# short prompts on this machine:

# %%
display(prose.source(speculative.acceptance_length, speculative.predicted_seconds))
short_passes = load_table("02_prefill_sweep", "short_passes", quick=quick)
if short_passes is not None and not short_passes.empty:
    sp = short_passes[(short_passes.dtype == "fp32") & (short_passes.threads == short_passes.threads.max())]
    one_token = sp[sp.prompt_tokens == 1].time_ms.iloc[0]
    m2 = model_of("02_prefill_sweep")
    show(f"Chapter 2 ({m2}, fp32, no cache): a pass over " + ", ".join(
        f"{int(r.prompt_tokens)} tokens costs {r.time_ms / one_token:.2f}x" for r in sp.itertuples() if 1 < r.prompt_tokens <= 8)
        + " a one-token pass. " + ("That is this chapter's model; " if m2 == model_name else
                                   f"That is {m2}, not {model_name}; ")
        + "the threshold below comes from this chapter's own passes, timed over a cache after the runs. "
        + f"Prompt lookup here checks k = {', '.join(map(str, lookup_tokens))} guesses a pass (`lookup_tokens`).")
task_ids = chat_ids(f"{passage}\n\n{instruction}", 48)
if tokenizer is None:  # a model without a tokenizer: a prompt that repeats itself, so lookup finds matches
    task_ids = torch.cat([task_ids, task_ids[:, :12]], dim=1)
mid = task_ids.shape[1] + spec_tokens // 2  # the runs' middle context
if "fp32" in cost:  # a pass over n positions: the decode step with its matrices at n rows (chapter 0's, interpolated)
    step_price = cost["fp32"].decode(mid).best
    pass_price = {k: step_price + sum(cost["fp32"].kernel(m, k + 1).best - cost["fp32"].kernel(m, 1).best
                                      for m in ("blocks", "head")) for k in lookup_tokens}
    show(f"The cost model prices {model_name}'s own checking passes as the decode step with its matrices (blocks and "
         f"LM head) at that many rows, over a cache of {mid} tokens (the runs' middle). " + "; ".join(
             f"{'A' if i == 0 else 'a'}t k = {k}, {k + 1} positions cost **{t / step_price:.2f}x** a one-position pass"
             for i, (k, t) in enumerate(pass_price.items())) + ".")

# %% [markdown] tags=["predict"]
# **Predict first.** The task asks the model to repeat the passage word for word, so most of prompt lookup's
# guesses should match. With `k` guesses a pass (`lookup_tokens`, printed just above), a pass gains at most `k + 1` tokens and costs
# what a pass over `k + 1` positions costs (the cost model's price of this model's passes, just above). At each
# `k`, how many times faster than plain greedy decoding would prompt lookup run if every guess matched (the most it
# can gain), and how much slower if none did? Where between the two do you expect this task to land?

# %%
phases.check_fits(fp32, task_ids.shape[1] + max(lookup_tokens) + 1, spec_tokens)
settings = [0] + lookup_tokens
spec_rows, outputs, pass_log = [], {}, {}


def generate(k: int) -> tuple[list[int], list[int], float]:
    """``spec_tokens`` greedy tokens after the passage, prompt lookup guessing ``k`` tokens (0: plain decoding);
    returns the tokens, every pass's length and the seconds."""
    kw = {"prompt_lookup_num_tokens": k} if k else {}
    with torch.inference_mode(), speculative.counted_passes(fp32.model) as lengths:
        start = timing.now(device)
        out = fp32.model.generate(task_ids, attention_mask=torch.ones_like(task_ids), max_new_tokens=spec_tokens,
                                  min_new_tokens=spec_tokens, do_sample=False, pad_token_id=eos or 0, **kw)
        seconds = timing.now(device) - start
    return out[0, task_ids.shape[1]:].tolist(), list(lengths), seconds


generate(0)  # warm-up
for run in progress(range(1, runs + 1), desc="speculative runs"):
    for k in settings:
        tokens, lengths, seconds = generate(k)
        outputs.setdefault(k, tokens)
        pass_log.setdefault(k, lengths)
        spec_rows.append(dict(run=run, guesses=k, seconds=seconds, tokens=len(tokens), passes=len(lengths),
                              acceptance_length=speculative.acceptance_length(len(tokens), lengths),
                              same_as_plain=tokens == outputs[0]))
spec_runs = pd.DataFrame(spec_rows)
_ = results.table(spec_runs, "speculative_runs")  # the path it returns is not for the page

# %% [markdown]
# Each pass a generation made is priced by its length: the first (the prompt, with guesses when it already matches)
# as a prefill of that many tokens, the others over a cache of the run's middle context. All are timed here,
# `runs` times each, taking turns:

# %%
lengths_seen = sorted({n for ls in pass_log.values() for n in ls[1:]})
firsts = sorted({ls[0] for ls in pass_log.values()})
kv_mid, _ = sweeps.prefilled(fp32, None, mid, 0)
samples = {n: [] for n in lengths_seen + firsts}
for _ in range(max(runs, 3) + 1):
    for n in lengths_seen:
        ids = random_prompt(n, fp32.vocab_size, seed=n, device=device)
        phases.truncate_cache(kv_mid, mid)
        with torch.inference_mode():
            start = timing.now(device)
            fp32.model(input_ids=ids, cache=kv_mid, use_cache=True).logits.argmax(-1).tolist()
            samples[n].append(timing.now(device) - start)
    for n in firsts:
        ids = random_prompt(n, fp32.vocab_size, seed=n, device=device)
        with torch.inference_mode():
            start = timing.now(device)
            phases.prefill(fp32, ids)[0].argmax(-1).tolist()
            samples[n].append(timing.now(device) - start)
pass_cost = {n: float(np.median(s[1:])) for n, s in samples.items()}  # the first of each is a warm-up
pass_table = pd.DataFrame([dict(positions=n, kind="first pass" if n in firsts else "over the cache",
                                ms=pass_cost[n] * 1e3, low_ms=min(s[1:]) * 1e3, high_ms=max(s[1:]) * 1e3,
                                of_one_position=pass_cost[n] / pass_cost[1] if 1 in pass_cost else math.nan)
                           for n, s in samples.items()])
over_cache = [n for n in lengths_seen]
mats = {n: matrices_alone(fp32, n) for n in over_cache}
pass_table["matrices_alone_ms"] = [mats[n].median * 1e3 if n in mats else math.nan for n in pass_table.positions]
results.table(pass_table, "pass_costs")
cheaper = [(a, b) for a in over_cache for b in over_cache  # beyond both passes' runs, not only their medians
           if a < b and pass_cost[a] > pass_cost[b] * (1 + claims.NOISE) and min(samples[a][1:]) > max(samples[b][1:])]
if cheaper:
    a, b = cheaper[0]
    matrices_gap = mats[a].median - mats[b].median  # the cause only if it is most of the passes' gap
    show(f"A pass over {a} position{'s' * (a != 1)} costs more than one over {b} here ({prose.ms(pass_cost[a])} "
         f"against {prose.ms(pass_cost[b])}). The model's matrices timed alone at those rows take "
         f"{prose.ms(mats[a].median)} and {prose.ms(mats[b].median)}: " + (
             "the matrix kernel PyTorch picks for that many rows is the cause, not attention or the cache."
             if matrices_gap >= (pass_cost[a] - pass_cost[b]) / 2 else "not the matrices, so the rest of the pass is."))
gained = spec_runs.groupby("guesses").acceptance_length.median()
show(f"The threshold for {model_name}, from these passes: guessing pays only while a pass gains more tokens than the "
     "one-position passes its check costs (were every pass that long). " + " ".join(
         f"At k = {k} the check costs {pass_cost[k + 1] / pass_cost[1]:.2f} one-position passes, against "
         f"{gained[k]:.2f} tokens gained a pass here ({'more' if gained[k] > pass_cost[k + 1] / pass_cost[1] else 'not more'})."
         for k in lookup_tokens if k + 1 in pass_cost) if any(k + 1 in pass_cost for k in lookup_tokens) else
     f"No pass checked every one of k guesses here, so {model_name}'s threshold is not timed.")
prose.shown(pass_table.round(3))

# %%
plain = spec_runs[spec_runs.guesses == 0].set_index("run").seconds
rows = []
for k in lookup_tokens:
    mine = spec_runs[spec_runs.guesses == k].set_index("run")
    speedup = Spread.of(plain / mine.seconds)
    predicted_speedup = speculative.predicted_seconds(pass_log[0], pass_cost) / speculative.predicted_seconds(pass_log[k], pass_cost)
    rows.append(dict(guesses=k, acceptance_length=float(mine.acceptance_length.median()),
                     passes=int(mine.passes.median()), plain_passes=int(spec_runs[spec_runs.guesses == 0].passes.median()),
                     check_pass_of_one=pass_cost.get(k + 1, math.nan) / pass_cost[1] if 1 in pass_cost else math.nan,
                     predicted_speedup=predicted_speedup, speedup=speedup.mid, speedup_low=speedup.low,
                     speedup_high=speedup.high, same_as_plain=bool(mine.same_as_plain.all())))
spec = pd.DataFrame(rows)
results.table(spec, "speculative")
register.claim(
    "speculation_as_predicted",
    "Prompt lookup's speed-up over plain greedy decoding is the one predicted from the passes it made, each priced "
    "by its length, within the tolerance for a predicted ratio.")
register.claim("speculation_pays_where_predicted",
               "Prompt lookup pays (runs faster than plain decoding) exactly where its prediction says it does.")
register.claim("speculation_is_greedy", "Prompt lookup's answer is plain greedy decoding's, token for token.")
pairs, pays = {}, {}

# %%
for r in spec.itertuples():
    s = Spread.in_row(r, "speedup")
    pairs[r.guesses] = (claims.within(s, r.predicted_speedup, claims.PREDICTED_RATIO),
                        f"At k = {r.guesses} it ran {s.text('.2f', 'x')} as fast, against {r.predicted_speedup:.2f}x "
                        f"predicted, with {r.acceptance_length:.2f} tokens a pass and a checking pass costing "
                        f"{r.check_pass_of_one:.2f}x a one-token one.")
    side = r.predicted_speedup > 1
    pays[r.guesses] = (claims.verdict_of((s.low > 1) == side and (s.high > 1) == side, (s.low > 1) != side and (s.high > 1) != side),
                       f"k = {r.guesses}: predicted to {'pay' if side else 'not pay'} ({r.predicted_speedup:.2f}x), "
                       f"measured {s.text('.2f', 'x')}")
measured_speedups = "; ".join(f"k={r.guesses}: {r.speedup:.2f}x" for r in spec.itertuples())
as_predicted = register.record(
    "speculation_as_predicted", claims.every(v for v, _ in pairs.values()), measured=measured_speedups,
    predicted="; ".join(f"k={r.guesses}: {r.predicted_speedup:.2f}x" for r in spec.itertuples()),
    evidence="speculative.csv, pass_costs.csv")
leans = {r.guesses: "faster" if r.speedup > r.predicted_speedup else "slower" for r in spec.itertuples()}  # than predicted
show("Prompt lookup's speed-up over plain decoding " + claims.pick(
    as_predicted, held="was the one its passes predicted",
    not_held="missed the one its passes predicted (for at least one k)",
    unresolved="is too close to call against the one its passes predicted, the median running "
               + prose.and_list(sorted({leans[k] for k, (v, _) in pairs.items() if v == claims.UNRESOLVED}))
               + " than predicted",
) + ". " + " ".join(t for _, t in pairs.values()),
     how=f"Each k's speed-up over its {runs} runs (the 95 % interval of its median) is held to "
         f"{1 / claims.PREDICTED_RATIO:.2f}–{claims.PREDICTED_RATIO:.2f}x its prediction (the tolerance for a predicted "
         "ratio, `lib.claims.PREDICTED_RATIO`): " + "; ".join(
             f"k = {k}: " + {claims.HELD: "within it", claims.NOT_HELD: "outside it",
                             claims.UNRESOLVED: "reaching across its edge"}[v] for k, (v, _) in pairs.items()) + ".")
pays_verdict = register.record(
    "speculation_pays_where_predicted", claims.every(v for v, _ in pays.values()), measured=measured_speedups,
    predicted="; ".join(f"k={r.guesses}: {'pays' if r.predicted_speedup > 1 else 'does not pay'}"
                        for r in spec.itertuples()), evidence="speculative.csv")
show(claims.pick(
    pays_verdict, held="Prompt lookup ran faster than plain decoding, or did not, as its prediction said for each k",
    not_held="Prompt lookup's speed-up fell on the other side of 1x from its prediction (for at least one k)",
    unresolved="Whether prompt lookup pays where its prediction says is too close to call in this run",
) + ("." if pays_verdict == claims.HELD else ": " + "; ".join(t for _, t in pays.values()) + "."),
     how=("; ".join(t for _, t in pays.values()) + ".").replace("k =", "K =", 1) if pays_verdict == claims.HELD else None)
differ = [k for k in lookup_tokens if outputs[k] != outputs[0]]
register.record("speculation_is_greedy", claims.NOT_HELD if differ else claims.HELD, predicted="identical",
                measured="identical" if not differ else f"k={differ} differ", evidence="speculative_runs.csv")
show(f"Prompt lookup with {', '.join(f'k = {k}' for k in differ)} differed from the plain answer (first difference "
     f"after {prose.tokens(min(speculative.tokens_agreeing(outputs[k], outputs[0]) for k in differ))}). A pass over k "
     "positions rounds in another order than a pass over one, which can flip two logits that nearly tie." if differ
     else f"Every speculative run gave the plain answer's {len(outputs[0])} tokens.")
prose.shown(spec.round(3))

# %% [markdown]
# ## 4. Less to issue: a preallocated cache and a compiled step
#
# Chapter 0 priced issuing a SmolLM2 step (its operations with the matrices and attention hollowed out): that is
# the dispatch term of every prediction above. `torch.compile` traces the step once and replaces the operations
# with a few generated kernels; over transformers' preallocated cache (`StaticCache`, every shape fixed) the traced
# step is reused at every position.

# %%
try:
    _ops, _us_alone = ceilings.operations(model_name, "fp32", threads, "decode")
    show(f"Chapter 0: a {model_name} decode step issues **{_ops:,} operations**; between its weights' streams each "
         f"costs about **{ceilings.dispatch(model_name, 'fp32', threads).best / _ops * 1e6:.1f} us** ({_us_alone:.1f} us "
         "when issued alone, with nothing flushing the caches).")
except ValueError as error:  # chapter 0 did not time this model's step at these threads
    _ops = None
    print(f"chapter 0 has no dispatch for {model_name} here: {error}")

# %% [markdown] tags=["predict"]
# **Predict first.** Compiling is meant to remove the operations' issuing, not the matrix products. From the
# operations and their cost just printed, and the eager fp32 step measured in section 1: how many milliseconds a
# step do you expect the compiled step to save over the eager step on the same static cache, and what share of the
# step is that?

# %% [markdown]
# The book's prediction, from chapter 0's price of the eager step and of the dispatch inside it, folded until you have written yours.

# %%
c0 = contexts[0]
static_len = max(c0 + steps, question_ids.shape[1] + side_tokens) + 8  # the preallocated cache's positions


def static_prediction(context: int) -> Prediction:
    """The eager static step at ``context``: chapter 0's static dispatch where it timed one for this model, else
    the growing cache's (the same operations, bar the cache's)."""
    try:
        return cost["fp32"].decode(context, cache="static", max_len=static_len)
    except ValueError:
        p = cost["fp32"].decode(context)
        masked = ceilings.attention_decode(model_name, "fp32", threads, static_len * shape.kv_bytes_per_token, masked=True)
        return Prediction("decode", 1, 1, context, tuple(
            Term("attention", masked.best, masked.median, "memory", "every preallocated position, masked")
            if t.name == "attention" else t for t in p.terms if t.name != "cache copy"))


if "fp32" in cost:
    issue_price, static_price = cost["fp32"].decode(c0 + steps // 2), static_prediction(c0 + steps // 2)
    try:
        cost["fp32"].decode(c0, cache="static", max_len=static_len)
        priced_as = ""
    except ValueError:  # chapter 0 timed no static step for this model: static_prediction's stand-in
        priced_as = (" Chapter 0 timed no preallocated-cache step for this model, so the book prices it as the "
                     "growing cache's step with attention over every preallocated position, masked, and no copy.")
    prose.prediction(
        "The compiled step costs the eager static step's prediction less its dispatch. "
        f"At {c0 + steps // 2} cached tokens (halfway through the {steps} timed steps from {c0}) the cost model prices "
        f"the eager fp32 step over a growing cache at **{prose.ms(issue_price.best)}**, of which issuing its "
        f"operations (dispatch) is **{prose.ms(issue_price.term('dispatch').best)}**. Over a preallocated cache of "
        f"{static_len} positions (the compiled step's) it prices the step at **{prose.ms(static_price.best)}**, of "
        f"which dispatch is **{prose.ms(static_price.term('dispatch').best)}**.{priced_as} On a GPU, compiling with "
        'CUDA graphs (`mode="reduce-overhead"`) removes the launches as well.')
else:
    print("chapter 0 has no price for this configuration: " + unpriced.get("fp32", "fp32 is not run"))

# %%
mode = "reduce-overhead" if on_gpu else "default"
issue_rows, compile_s = [], math.nan
kv_issue, first_issue = kept["fp32"][c0]
compiled = None
if compile_step and not quick:
    compiled = copy.deepcopy(fp32.model)
    compiled.forward = torch.compile(compiled.forward, dynamic=False, mode=mode)
    phases.truncate_cache(kv_issue, c0)
    start = time.perf_counter()
    phases.decode(compiled, first_issue, phases.static_cache(fp32, kv_issue, static_len), 3)  # compiles
    compile_s = time.perf_counter() - start
    show(f"Compiling the step took **{compile_s:.0f} s** (inductor, mode `{mode}`; its cache makes a second build "
         "faster).")
else:
    print("the compiled step is not timed: " + ("quick mode" if quick else "compile_step = False"))
for run in progress(range(1, issuing_runs + 1), desc="issuing runs"):
    for kind, module in (("eager, growing cache", fp32.model), ("eager, static cache", fp32.model),
                         ("compiled, static cache", compiled)):
        if module is None:
            continue
        phases.truncate_cache(kv_issue, c0)
        cache = kv_issue if kind.endswith("growing cache") else phases.static_cache(fp32, kv_issue, static_len)
        phases.decode(module, first_issue, cache, 2)  # warm-up, then the same context again
        phases.truncate_cache(kv_issue, c0)
        cache = kv_issue if kind.endswith("growing cache") else phases.static_cache(fp32, kv_issue, static_len)
        t = phases.decode(module, first_issue, cache, steps).step_times
        issue_rows.append(dict(run=run, path=kind, step_ms=float(np.median(t)) * 1e3))
issue_runs = pd.DataFrame(issue_rows)
results.table(issue_runs, "issuing_runs")

if "fp32" in cost:
    ps = static_price  # the eager static step's price, above
    dispatch = ps.term("dispatch")
    issue_pred = {"eager, growing cache": cost["fp32"].decode(c0 + steps // 2).best * 1e3,
                  "eager, static cache": ps.best * 1e3, "compiled, static cache": (ps.best - dispatch.best) * 1e3}
else:
    dispatch, issue_pred = None, {}
issue = timing.median_range(issue_runs, ["path"], ["step_ms"])
issue["predicted_ms"] = issue.path.map(issue_pred)
issue["over_predicted"] = issue.step_ms / issue.predicted_ms
_ = results.table(issue, "issuing")

# %%
register.claim(
    "compiled_step_loses_its_dispatch",
    "Compiling the step saves what chapter 0 measured for issuing it: the eager static step less the compiled one "
    "is chapter 0's dispatch, within the tolerance for a time predicted from measured ceilings.")
if compiled is not None and dispatch is not None:
    w = issue_runs.pivot(index="run", columns="path", values="step_ms")
    comp = Spread.of(w["compiled, static cache"])
    saved = Spread.of(w["eager, static cache"] - w["compiled, static cache"])
    expected = Spread(dispatch.best * 1e3, dispatch.best * 1e3, max(dispatch.median, dispatch.best) * 1e3)
    verdict = claims.within(saved, expected, claims.PREDICTED_TIME) if saved.low > 0 else \
        claims.verdict_of(False, saved.high < expected.low / claims.PREDICTED_TIME)
    verdict = register.record("compiled_step_loses_its_dispatch", verdict, predicted=f"{prose.ms(dispatch.best)} saved",
                              measured=saved.text(".1f", "ms") + " saved", evidence="issuing_runs.csv")
    static_ms = Spread.of(w["eager, static cache"])
    edges = claims.allowed(expected, claims.PREDICTED_TIME)
    compile_how = (f"The claim is decided on the saving itself: the eager static step less the compiled one, run by run "
                   f"over {issuing_runs} runs, {saved.text('.1f', 'ms')} (the 95 % interval of its median), against "
                   f"chapter 0's dispatch of {prose.ms(dispatch.best)}, allowed {edges[0]:.1f}–{edges[1]:.1f} ms "
                   f"(the tolerance for a predicted time, {claims.PREDICTED_TIME:g}x, around its fastest to median "
                   "calls).")
    show(f"Compiling saved **{saved.text('.1f', 'ms')}** a step: the compiled step took {comp.text('.1f', 'ms')}, the "
         f"eager one over the same preallocated cache {static_ms.text('.1f', 'ms')}. That is "
         + claims.pick(verdict, held=f"about the {prose.ms(dispatch.best)} chapter 0 measured for issuing its "
                                     "operations: compiling removed the cost of issuing them.",
                       not_held=f"{saved.mid / (dispatch.best * 1e3):.0%} of the {prose.ms(dispatch.best)} chapter 0 "
                                "measured for issuing its operations" if saved.mid > 0 else
                                f"none of the {prose.ms(dispatch.best)} chapter 0 measured for issuing its operations",
                       unresolved=f"{saved.mid / (dispatch.best * 1e3):.0%} of the {prose.ms(dispatch.best)} chapter "
                                  "0 measured for issuing its operations at the median" + {
                                      "below what would hold": ", short of it, though the high end of its runs' range "
                                                               f"({saved.high:.1f} ms) comes within "
                                                               f"{claims.PREDICTED_TIME:g}x of it",
                                      "above what would hold": ", more than it, though the low end of its runs' range "
                                                               f"({saved.low:.1f} ms) comes within "
                                                               f"{claims.PREDICTED_TIME:g}x of it",
                                  }.get(claims.leaning(saved, *edges), ""))
         + (": one layer down, below, what the compiled step still issues." if verdict != claims.HELD else ""),
         how=compile_how)
else:
    unissued = "quick mode" if quick else "compile_step = False" if compiled is None else \
        "chapter 0 has no dispatch for this configuration: " + unpriced.get("fp32", "")
    register.record("compiled_step_loses_its_dispatch", None, evidence=unissued)
    show(f"The compiled step was not timed in this run ({unissued}), so what compiling saves is not measured here.")
again, swept = Spread.of(issue_runs[issue_runs.path == "eager, growing cache"].step_ms), spread[("fp32", c0)]
same_step = claims.ranges_overlap(again.low, again.high, swept.low, swept.high)
show("Timed again in these runs, later in the process" + (" and after compiling" if compiled is not None else "")
     + ", the eager growing-cache step " + (
         "took what the sweep's fp32 step took." if same_step else
         f"ran {again.mid / swept.mid:.2f}x its time in the sweep, so this section compares its paths only within "
         "these runs, where they took turns."),
     how=f"The eager growing-cache step is the sweep's fp32 step at {c0} cached tokens (the same model, {threads} "
         f"thread{'s' * (threads > 1)}, one sequence): **{again.text('.1f', 'ms')}** over these {issuing_runs} runs "
         f"against the sweep's {swept.text('.1f', 'ms')} over {sweep_runs} runs, "
         + ("the same within their ranges." if same_step else "apart beyond their ranges."))
if compiled is not None and dispatch is not None:  # the table's ratio for the compiled step is not what decided it
    x_price = issue.set_index("path").over_predicted
    show(f"In the table, the compiled step took {x_price['compiled, static cache']:.2f}x its price (the eager static "
         f"step's price less all of chapter 0's {prose.ms(dispatch.best)} of dispatch), and the eager static step "
         f"{x_price['eager, static cache']:.2f}x its own.",
         how=f"The finding above is decided on neither ratio but on the "
         f"saving, measured run by run, {saved.text('.1f', 'ms')}, against that dispatch: " + claims.pick(
             verdict, held="it matched, so compiling removed the cost of issuing the step.",
             not_held=f"it came to {saved.mid / (dispatch.best * 1e3):.0%} of it, so compiling removed less than the "
             "whole cost of issuing the step.",
             unresolved=f"its median came to {saved.mid / (dispatch.best * 1e3):.0%} of it, though not clearly "
                        "apart from it; the profiler, below, measures how much issuing the compiled step keeps."))
prose.shown(issue.round(2))

# %% [markdown]
# One layer down: both static steps under `torch.profiler`, their time per step by the cost model's terms, and how
# many operator calls each issues (the compiled graph's fused kernels run inside its one call).

# %%
matrices_saved = False  # whether the compiled step's matrices took a share of its saving (below)
if compiled is not None:
    def static_steps(module) -> None:
        phases.truncate_cache(kv_issue, c0)
        phases.decode(module, first_issue, phases.static_cache(fp32, kv_issue, static_len), 2)

    parts = {}
    for kind, module in (("eager, static cache", fp32.model), ("compiled, static cache", compiled)):
        ops = profiling.operators(lambda module=module: static_steps(module), passes=2, device=device)
        by_term = (ops.groupby("term").self_ms.sum() / 2).to_dict()
        calls_by_term = (ops[ops.operator != profiling.BETWEEN].groupby("term").calls.sum() / 2).to_dict()
        parts[kind] = dict(path=kind, operator_calls=ops[ops.operator != profiling.BETWEEN].calls.sum() / 2,
                           **{f"{t}_ms": by_term.get(t, 0.0) for t in ("matrices", "attention", "dispatch")},
                           **{f"{t}_calls": calls_by_term.get(t, 0) for t in ("matrices", "dispatch")},
                           other_ms=sum(v for t, v in by_term.items() if t not in ("matrices", "attention", "dispatch")))
    parts = pd.DataFrame(parts.values())
    results.table(parts, "issuing_parts")
    e, c = parts.set_index("path").loc["eager, static cache"], parts.set_index("path").loc["compiled, static cache"]
    show(f"Compiled, a step issues **{c.operator_calls:,.0f}** operator calls instead of {e.operator_calls:,.0f}. What "
         f"is left of issuing it takes **{prose.ms(c.dispatch_ms / 1e3)}** against {prose.ms(e.dispatch_ms / 1e3)}; its "
         f"matrices take {prose.ms(c.matrices_ms / 1e3)} against {prose.ms(e.matrices_ms / 1e3)}" + (
             ": the matrix products, one per weight, are still PyTorch's own and still dominate the step."
             if c.matrices_ms > c.dispatch_ms else "."),
         how="The profiler counts every operator, those called inside another included"
             + (f", where chapter 0 counted the {_ops:,} operations Python issues" if _ops else "") + ". What is left "
             "of issuing the compiled step is the compiled graph's call with its fused kernels, Dynamo's guard check "
             "and the gaps between them.")
    # the profiler adds its own cost to every operator call it records: on each path, the profiled step less the
    # same step timed without it (above), charged to each term by its share of the path's operator calls
    timed_ms = issue.set_index("path").step_ms  # each path's step, timed without the profiler
    own_ms = {kind: max(r.matrices_ms + r.attention_ms + r.dispatch_ms + r.other_ms - timed_ms[kind], 0.0)
              for kind, r in parts.set_index("path").iterrows()}
    per_call = {kind: own_ms[kind] / max(r.operator_calls, 1) for kind, r in parts.set_index("path").iterrows()}
    e_own, c_own = per_call["eager, static cache"], per_call["compiled, static cache"]
    less_issuing = (e.dispatch_ms - e.dispatch_calls * e_own) - (c.dispatch_ms - c.dispatch_calls * c_own)
    less_matrices = (e.matrices_ms - e.matrices_calls * e_own) - (c.matrices_ms - c.matrices_calls * c_own)
    matrices_saved = less_matrices > 0.2 * max(less_issuing + less_matrices, 1e-9)  # a fifth of the saving
    timed = (f", of the {saved.text('.1f', 'ms')} timed without the profiler above"
             if compiled is not None and dispatch is not None else "")
    left_issuing = c.dispatch_ms - c.dispatch_calls * c_own  # what the compiled step still spends issuing
    show(f"Without the profiler's own cost, the compiled step saved **{prose.ms(less_issuing / 1e3)}** of issuing and "
         f"{prose.ms(less_matrices / 1e3)} in its matrices{timed}, and still spent "
         f"**{prose.ms(max(left_issuing, 0) / 1e3)}** issuing"
         + (f": compiling removed {less_issuing / (less_issuing + left_issuing):.0%} of what issuing cost the eager "
            "step. " if less_issuing > 0 and left_issuing > 0 else ". ")
         + ("So not dispatch alone: part of the saving is in the matrices, which this run does not take apart further."
            if matrices_saved else "So the saving is issuing: the matrices took about the same time on both paths."),
         how=f"The profiler adds its own cost to every operator call it records: each step under it took longer than "
             f"the same step timed without it, by {prose.ms(own_ms['eager, static cache'] / 1e3)} eager "
             f"({e_own * 1e3:.1f} us a call) and {prose.ms(own_ms['compiled, static cache'] / 1e3)} compiled "
             f"({c_own * 1e3:.1f} us a call). That cost is charged to each part by its operator calls and taken off "
             "before the two steps' parts are compared.")
    display(prose.shown(parts.round(2)))

# %% [markdown]
# ## 5. Side by side: one prompt, every path, the same runs
#
# Chapter 1's question, `side_tokens` greedy tokens, on each path in turn for `runs` runs. The paths: the book's
# eager fp32 loop; the PyTorch path that ran fastest against it run by run, when one did (a narrower precision in
# the sweep, or the compiled step in section 4); llama.cpp on the Q4_1 file; and, where `.venv-vllm` exists,
# vLLM's CPU build in fp32, through HTTP. A path's time per
# output token (TPOT) is the median gap between its tokens; its bandwidth is its bytes per step over that.

# %%
runs_c0 = decode_runs[decode_runs.context_tokens == c0].pivot(index="run", columns="precision", values="step_ms")
speedups = {p: Spread.of(runs_c0["fp32"] / runs_c0[p]) for p in paths if p != "fp32"}  # run by run, in the sweep
if compiled is not None:  # run by run, in the issuing runs: the same step against its eager self
    by_run = issue_runs.pivot(index="run", columns="path", values="step_ms")
    speedups["compiled fp32"] = Spread.of(by_run["eager, growing cache"] / by_run["compiled, static cache"])
faster = {p: s for p, s in speedups.items() if p != "q4_1" and s.mid > 1}
side_paths = {"eager fp32 (the book's loop)": "fp32"}
if faster:  # the eager fp32 loop is itself the fastest PyTorch path otherwise
    fastest = max(faster, key=lambda p: faster[p].mid)
    side_paths[f"fastest PyTorch: {fastest}"] = fastest
if worker:
    side_paths["llama.cpp, Q4_1"] = "q4_1"
vllm_why = "quick mode" if quick else ("vllm = False" if not vllm else vllm_unavailable() or
                                       (None if model_name == "smollm2-135m" else "the engines serve SmolLM2"))


def torch_tpot(p: str) -> list[float]:
    """One run of path ``p`` on the question: its step times (s)."""
    module = compiled if p == "compiled fp32" else models[p].model
    logits, kv = phases.prefill(fp32 if p == "compiled fp32" else models[p], question_ids)
    first = logits[:, -1:].argmax(-1)
    cache = phases.static_cache(fp32, kv, static_len) if p == "compiled fp32" else kv
    return phases.decode(module, first, cache, side_tokens - 1).step_times


side_rows = []
for run in progress(range(0, runs + 1), desc="side-by-side runs"):  # run 0 is a warm-up
    for name, p in side_paths.items():
        t = (worker.request(kind="greedy", prompt=question_ids[0].tolist(), new_tokens=side_tokens, ignore_eos=True)["step_s"]
             if p == "q4_1" else torch_tpot(p))
        if run:
            side_rows.append(dict(run=run, path=name, precision="fp32" if p == "compiled fp32" else p,
                                  tpot_ms=float(np.median(t)) * 1e3))

# %%
if not vllm_why:
    started = time.perf_counter()  # chapter 7's first engine has the same settings, so its compile cache serves
    with vllm_engine(cache_dir() / f"smollm2-135m-instruct-{SMOLLM2_VERSION}", max_num_batched_tokens=2048,
                     threads=threads).start() as engine:
        print(f"vLLM started in {time.perf_counter() - started:.0f} s")
        chat = [{"role": "user", "content": question}]
        served = client.served_model(engine.base_url)
        for run in range(0, runs + 1):
            trace = client.stream_chat(engine.base_url, served, chat, side_tokens, extra={"ignore_eos": True})
            client.require_ok(trace, f"vLLM at {engine.base_url}", f"side-by-side request {run}")
            if run:
                side_rows.append(dict(run=run, path="vLLM (CPU build, HTTP)", precision="fp32", tpot_ms=trace.metrics().tpot * 1e3))
else:
    print(f"vLLM is not in the table: {vllm_why}.")
side_runs = pd.DataFrame(side_rows)
results.table(side_runs, "side_by_side_runs")
side = timing.median_range(side_runs, ["path", "precision"], ["tpot_ms"])
mid_ctx = question_ids.shape[1] + side_tokens // 2
side["bytes_per_step"] = [step_bytes(p, mid_ctx) for p in side.precision]
side["tokens_per_s"] = 1e3 / side.tpot_ms
side["gb_s"] = side.bytes_per_step / side.tpot_ms / 1e6
side["of_read"] = side.gb_s * 1e9 / read
base = side[side.path.str.startswith("eager fp32")].tpot_ms.iloc[0]
side["speedup_over_eager_loop"] = base / side.tpot_ms
side = side.sort_values("tpot_ms", ignore_index=True)
results.table(side, "side_by_side")
prose.shown(side[["path", "tpot_ms", "tpot_ms_low", "tpot_ms_high", "tokens_per_s", "gb_s", "of_read", "speedup_over_eager_loop"]].round(2))

# %% [markdown]
# Each lever against the book's eager fp32 step, run by run, ranked:

# %%
top = side.iloc[0]
narrow = [p for p in torch_paths if p != "fp32"]
levers = {{"q4_1": "llama.cpp on the Q4_1 file", "compiled fp32": "the compiled step"}.get(p, f"{p} weights"): s
          for p, s in speedups.items()}  # each against the eager fp32 step, run by run
if not spec.empty:
    b = spec.loc[spec.speedup.idxmax()]
    levers[f"prompt lookup (k = {int(b.guesses)}, against plain decoding on a quoting task)"] = Spread.in_row(
        b, "speedup")  # the one lever not set against the eager step: its own plain greedy decoding
ranked = sorted(levers, key=lambda name: -levers[name].mid)
lead = ranked[0] if ranked else None
lead_text = ("no lever ran here" if lead is None else f"the fastest was **{lead}**" if levers[lead].low > 1 else
             f"none was clearly faster than the eager step ({lead}'s range reaches below 1x)" if levers[lead].mid > 1
             else "none was faster than the eager step")
show("Each lever's speed against the eager fp32 step, taken run by run where both took turns: " + "; ".join(f"{name} **{levers[name].text('.2f', 'x')}**"
                                                            for name in ranked) + f". Of these, {lead_text}. "
     f"On chapter 1's question, side by side ({threads} thread{'s' if threads > 1 else ''}), the fastest path in the "
     f"table is **{top.path}**: {top.tokens_per_s:.0f} tokens/s, {top.of_read:.0%} of the streaming read"
     + ("." if top.path.startswith("eager fp32") else f", {top.speedup_over_eager_loop:.2f}x the book's eager loop "
        "over that one answer, its own measure beside the run-by-run ratios above."))

# %%
if worker:
    worker.close()

# %% [markdown]
# Every price in this chapter is made of chapter 0's ceilings. The same one-row matrices chapter 0 timed, timed
# again before the first path and after the last (`lib.machine.Pacer`), say whether the machine itself ran at
# another speed meanwhile.

# %%
pacer.check("after the last")
show(pacer.claim(register, results, "this chapter's paths"))

# %% [markdown]
# The code below writes the paragraph at the top of this chapter, under *What this run found*, from the findings above.

# %%
v, f32 = register.verdict, spread[("fp32", c0)]
machine_said = (f"On this machine ({prose.machine(device)}), {model_name}'s eager fp32 decode step took "
                f"**{f32.text('.1f', 'ms')}** at {c0} cached tokens.")
faster = [n for n in ranked if levers[n].low > 1]  # clearly faster than the eager step, run by run
slower = [n for n in ranked if levers[n].high < 1]
then = prose.and_list(f"{n} {levers[n].mid:.2f}x" for n in faster[1:3])  # the runners-up, if any
sped = (f"The fastest lever was **{lead}**, **{levers[lead].text('.2f', 'x')}** as fast"
        + (f", then {then}." if then else ".") if faster else "No lever was clearly faster than the eager step.")
slowed = (f" {prose.count(len(slower), 'lever').capitalize()} slowed the step: {prose.and_list(slower)}, "
          + prose.and_list(f"{levers[n].mid:.2f}x" for n in slower) + " as fast." if slower else "")
read_said = ""
if use_llama:
    lo, hi = min(f.mid for f in frac.values()), max(f.mid for f in frac.values())
    read_said = (f"The 4-bit step of llama.cpp took **{spread[('q4_1', c0)].text('.1f', 'ms')}**, moving "
                 f"{prose.span(lo, hi, '.0%')} of what this machine's memory streams" + {
                     claims.HELD: ": close to the limit.", claims.NOT_HELD: ": well short of the limit.",
                     claims.UNRESOLVED: ": near the limit, perhaps."}.get(v("llama_close_to_the_read"), "."))
took = (f"The PyTorch steps took **{pooled_steps.text('.2f', 'x')}** the time priced from their bytes at their "
        "kernels' rates") if decided else "The PyTorch steps, priced from their bytes at their kernels' rates,"
answer = {claims.HELD: f"{took}: fewer bytes pay only where the kernel is fast.",
          claims.NOT_HELD: f"{took}, far from it: bytes at a kernel's rate did not set a step's time here (the "
                           "findings say what did).",
          claims.UNRESOLVED: f"{took}: too close to call whether that sets a step's time here.",
          }.get(v("step_follows_its_bytes"), "")
plain_names = {  # each claim as a reader names it, for the opening's count of what failed
    "step_follows_its_bytes": "the PyTorch steps' time from their bytes",
    "llama_close_to_the_read": "llama.cpp's share of the streaming read",
    "llama_bound_by_its_cores": "what a second thread gives llama.cpp",
    "cache_growth_follows_its_bytes": "the step's growth with its cache",
    "fp8_cache_saves_memory_not_time": "what the fp8 cache costs a step",
    "fp8_cache_is_no_faster": "the fp8 cache being no faster",
    "speculation_as_predicted": "prompt lookup's speed-up",
    "speculation_pays_where_predicted": "where prompt lookup pays",
    "speculation_is_greedy": "prompt lookup's answer being greedy decoding's",
    "compiled_step_loses_its_dispatch": "what compiling saves",
    "machine_kept_its_pace": "the machine keeping chapter 0's speed"}
misses = register.misses(plain_names)  # each miss named (the evidence table at the end gives their numbers)
cheapest = {"llama.cpp, Q4_1": "llama.cpp on the Q4_1 file", "vLLM (CPU build, HTTP)": "vLLM's CPU build",
            "fastest PyTorch: compiled fp32": "the compiled step"}.get(top.path, top.path.removeprefix("fastest PyTorch: "))
side_found = (f"On chapter 1's question, {cheapest} was fastest: {top.speedup_over_eager_loop:.2f}x the eager loop. "
              if cheapest != lead and not top.path.startswith("eager fp32") else "")
pace_said = pacer.note()  # how far the machine ran from chapter 0's speed, where it did, and that prices used it
# The longest telling first; the side-by-side, the slower levers, llama.cpp's share of the read, then the levers give
# way (the evidence table keeps them all; the misses are counted in every telling).
said = [machine_said, sped + slowed, answer, read_said, side_found.strip(), misses]  # the PyTorch steps' evidence
opening.write(*(" ".join(filter(None, t)) for t in (  # before what it says of them, llama.cpp's read after it
    said, said[:4] + said[5:], [machine_said, sped, answer, read_said, misses], [machine_said, sped, answer, misses],
    [machine_said, answer, misses])), after=pace_said)  # the machine's pace, where it did not hold

# %% [markdown]
# ## What these numbers do not show
#
# * **One small model.** SmolLM2-135M's weights are half a gigabyte in fp32: a 7B model's step is bytes even more
#   plainly, and its 4-bit file is what fits a laptop's memory at all.
# * **Quality on one question.** A few dozen greedy tokens and one prompt's logits say whether a precision changes
#   this answer, not how it scores on a benchmark.
# * **Prompt lookup on a quoting task.** Acceptance depends on the text: an answer that does not repeat its prompt
#   gains nothing from it, and a draft model (another kind of speculation) costs a pass of its own.
# * **llama.cpp's own cache and arithmetic.** Its fp16 cache and 8-bit activations are part of its speed; its
#   prompt here is random tokens for the sweep and chapter 1's question for the answer.
# * **A shared machine.** Ranges are across runs in one process; other programs' load shows in them.
#
# ## Takeaways
#
# * Price a decode step as its bytes at the rate its own kernel streams them, then check the price against the
#   step. Fewer bytes help only through a kernel that keeps its rate on them.
# * Measure how close a kernel gets to the machine's read: that is the room a better kernel has.
# * A quantized cache saves memory; whether it saves time depends on how attention reads it: read how it is
#   implemented before expecting speed (the fp8 cache's claims above say what it cost here).
# * Speculation pays when the tokens gained per pass beat what a wider pass costs, on this machine and this
#   model: time the passes of the model you run.
# * Chapter 0 prices issuing a step's hundreds of operations; compiling aims at that part only (the matrix
#   products stay PyTorch's own), and how much of it goes is measured, not assumed: the compiled step's claim
#   above says what it removed here.
# * Compare two paths within runs in which they took turns: the same step timed at another moment of the same
#   process need not take the same time.
#
# ## Check yourself
#
# 1. A step reads 540 MB in fp32 and 100 MB in a 4-bit file. The fp32 kernel streams 12 GB/s; the 4-bit one 25 GB/s.
#    What speed-up should the 4-bit path give?
#
# <details><summary>Answer</summary>
#
# 540 / 12 = 45 ms against 100 / 25 = 4 ms: about 11x, of which 5.4x is bytes and 2x the faster kernel (plus
# whatever issuing the step costs in each).
# </details>
#
# 2. Prompt lookup gains 1.8 tokens a pass with `k = 4`, and a five-position pass costs 2.2 times a one-position
# pass. Does it pay?
#
# <details><summary>Answer</summary>
#
# No: 2.2 / 1.8 = 1.22 times the time per token. It pays only where a wide pass costs less than the tokens it
# gains: on a GPU, where a few more rows are nearly free, or on a task whose guesses are mostly right, so that
# each pass gains more tokens (the quoting task in this chapter's prompt lookup section, on this CPU).
# </details>
#
# 3. Why can a quantized cache make a step slower?
#
# <details><summary>Answer</summary>
#
# If attention needs the cache in the activations' dtype, the step widens the whole cache at every step: it reads
# the narrow bytes, converts each value and writes the wide ones, on top of attention's own read. So it saves memory,
# not bytes moved, and it adds the conversion: the bytes of that extra copy are a small price, but a conversion
# kernel slower than a plain copy can cost several times more (the fp8 cache above was timed both ways).
# </details>
#
# ## Try it
#
# * Set `threads = 1`: which path loses most, and does llama.cpp still get close to the read?

# %% jupyter={"source_hidden": true} tags=["answer"]
_mid = c0 + steps // 2
if threads == 1:
    _text = "This run already used one thread, so nothing changes: its tables are the answer."
else:
    _loses = {}  # each priced PyTorch step's time on one thread over its time on this run's threads
    for _p in [_q for _q in torch_paths if _q in cost]:
        try:
            _cm1 = costmodel.CostModel(ceilings, model_name, shape.with_dtype(_p), _p, 1)
            _loses[_p] = _cm1.decode(_mid).best / cost[_p].decode(_mid).best
        except ValueError:  # chapter 0 has no one-thread ceilings for it
            pass
    _read1 = ceilings.stream_bandwidth("fp32", 1)
    _text = ((f"The cost model prices the PyTorch steps on one thread at "
              f"{', '.join(f'{_q} {_x:.2f}x' for _q, _x in _loses.items())} their time on {threads}; one thread streams "
              f"memory at {_read1 / 1e9:.1f} GB/s against {read / 1e9:.1f} GB/s, so a step that only read its bytes "
              f"would lose {read / _read1:.2f}x. ") if _loses else
             "Chapter 0 has no one-thread price for the PyTorch steps here. ")
    if llama_one:
        _t1 = float(np.median([_r["median_s"] for _r in llama_one]))
        _loss = gain  # its step on one thread over on all of them, run by run (the second-thread finding's)
        _of1 = step_bytes("q4_1", _mid) / _t1 / _read1
        _most = max(_loses, key=_loses.get) if _loses else None
        _text += (f"llama.cpp was timed on one thread in this run: its step took {_loss.text('.2f', 'x')} as long as "
                  f"on {threads}, "
                  + ("" if not _most else "more than any PyTorch step is priced to lose, so expect it to lose most, "
                     if _loss.low > _loses[_most] else f"less than {_most} is priced to lose, so expect {_most} to lose "
                     "most, " if _loss.high < _loses[_most] else f"about what {_most} is priced to lose "
                     f"({_loses[_most]:.2f}x), so expect the two to lose about alike, ")
                  + f"and it read {_of1:.0%} of one thread's streaming read: "
                  + (f"at or above the {close_to_read:.0%} this chapter counts as close." if _of1 >= close_to_read else
                     f"still short of the {close_to_read:.0%} this chapter counts as close, "
                     + {claims.HELD: "its cores' work, not memory, setting its time (as the second thread's gain "
                                     "above showed).",
                        claims.NOT_HELD: "though the second thread's gain above did not show its cores setting its "
                                         "time."}.get(register.verdict("llama_bound_by_its_cores"),
                                                      "and this run's second-thread test above left undecided "
                                                      "whether its cores or memory set its time.")))
    else:
        _text += (f"llama.cpp was not timed on one thread here ({llama_why if not use_llama else 'one thread only'}): "
                  "if its step waits on its cores, it should lose most, nearly the ratio of its threads; if on "
                  f"memory, no more than the read's {read / _read1:.2f}x.")
display(Markdown(f"<details><summary>What to expect</summary>\n\n{_text}\n</details>"))

# %% [markdown]
# * Raise `contexts` to `[32, 4000]`: where does the cache's share of the bytes start to matter?

# %% jupyter={"source_hidden": true} tags=["answer"]
_short, _long = 32, 4000  # the exercise's contexts
_kv, _w = shape.kv_bytes_per_token, shape.weight_bytes
_share = _kv * _long / (_kv * _long + _w)
_text = (f"At {_long:,} cached tokens {model_name}'s fp32 cache is {_kv * _long / 2**20:,.0f} MiB, {_share:.0%} of a "
         f"step's bytes beside its {_w / 2**20:,.0f} MiB of weights. It passes a tenth of the bytes at about "
         f"{_w / _kv / 9:,.0f} tokens and equals the weights only at {_w / _kv:,.0f}.")
try:
    _a, _b = (cost["fp32"].decode(_c + steps // 2).best for _c in (_short, _long))
    _bytes = (_w + _kv * _long) / (_w + _kv * _short)
    _text += (f" The cost model puts the fp32 step at {prose.ms(_b)} there against {prose.ms(_a)} at {_short}, "
              f"{_b / _a:.2f}x, for {_bytes:.2f}x the bytes: " + (
                  "more than the bytes alone, as the growing cache is also copied at every step (the cache-growth "
                  "claim prices both)." if _b / _a > _bytes else "no more than the bytes, as part of each step "
                  "(issuing its operations) does not grow with the cache."))
except (KeyError, ValueError):  # fp32 not priced here, or chapter 0 did not measure caches that long
    _text += " This run cannot price a step that long; the cache-growth claim says how well the shorter one was priced."
display(Markdown(f"<details><summary>What to expect</summary>\n\n{_text}\n</details>"))

# %% [markdown]
# * Change `instruction` to "Summarise the passage in one sentence.": what happens to the acceptance length?

# %% jupyter={"source_hidden": true} tags=["answer"]
_k = int(spec.loc[spec.speedup.idxmax()].guesses)
_row = spec.set_index("guesses").loc[_k]
_check = pass_cost.get(_k + 1, math.nan) / pass_cost[1] if 1 in pass_cost else math.nan
display(Markdown(
    "<details><summary>What to expect</summary>\n\n"
    f"Quoting the passage, prompt lookup with k = {_k} gained {_row.acceptance_length:.2f} tokens a pass here and ran "
    f"{_row.speedup:.2f}x plain decoding. A one-sentence summary repeats few runs of the passage's tokens, so the "
    "acceptance length should fall toward one token a pass. Where the last tokens match nothing earlier, no guess "
    "is made and the pass is a plain one (the speed-up falls toward 1x); where guesses are made and rejected, a pass "
    + (f"costs {_check:.2f}x a one-position pass" if _check == _check else "over the guesses costs more than a "
       "one-position pass") + " for one token, so it can fall below 1x. "
    + ("The answer stays plain greedy decoding's, as it did here." if register.verdict("speculation_is_greedy")
       == claims.HELD else "Its answer may again differ from plain decoding's where two logits nearly tie, as here.")
    + "\n</details>"))

# %% [markdown]
# * Serve the Q4_1 file to chapter 7: start `llama_cpp.server` (the command below) and run chapter 7 with
#   `base_url = "http://127.0.0.1:8000"`.

# %% jupyter={"source_hidden": true} tags=["answer"]
_llama = side[side.path == "llama.cpp, Q4_1"]
display(Markdown(
    "<details><summary>What to expect</summary>\n\n"
    "Chapter 7 says in one line that the server's model is the Q4_1 file, which the book does not count as the fp32 "
    "model it runs in-process, so nothing of it is set beside the in-process path. "
    + (f"Its gaps between tokens should be about llama.cpp's TPOT in this chapter's side-by-side table "
       f"({_llama.tpot_ms.iloc[0]:.1f} ms) plus what the HTTP path adds to each token. " if len(_llama) else
       f"llama.cpp did not run here ({llama_why}), so this run has no TPOT to compare its gaps with. ")
    + "Its server runs one request at a time, so expect total tokens per second to stay flat as users are added, "
      "goodput to fall once arrivals outpace one request at a time, and the stall to read *queued*."
    "\n</details>"))

# %%
print(server_command(smollm2_gguf() if model_name == "smollm2-135m" else "<a .gguf file>", threads=threads))

# %% [markdown]
# ## Key terms
#
# [Decode](glossary.md#decode), [Quantisation](glossary.md#quantisation), [Speculative decoding and prompt lookup](glossary.md#speculative-decoding-and-prompt-lookup), [Kernel rate](glossary.md#kernel-rate), [Dispatch](glossary.md#dispatch), [KV cache](glossary.md#kv-cache), [Regimes](glossary.md#regimes), [Price](glossary.md#price), [Tolerance](glossary.md#tolerance), [Pace](glossary.md#pace). Each links to the book's glossary, which says how the book measures it.

# %% [markdown]
# ## Evidence in this chapter
#
# Each claim this chapter made, what was predicted, what this run measured, the verdict, and the data it came
# from. A verdict is decided on the 95 % interval of the median over runs (`lib.claims` says how): *held* when
# all of the interval agrees with the prediction, *did not hold* when none of it does, *not resolved* when it
# straddles the line. `data/08_cheaper_decode/claims.csv` holds the same rows, and the book's status page counts them.

# %%
results.table(register.frame(), "claims")
display(prose.table(register.evidence()))
print(register.summary())
results.finish()  # the run is whole: its tables and figures replace the last run's together
