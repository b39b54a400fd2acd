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
# # 0. This machine: the ceilings a pass actually meets
#
# Every later chapter predicts how long a pass of a model should take, and then measures it. The prediction
# is a sum (`lib.costmodel`): an eager pass runs its kernels one after another, so its time is what each kernel
# takes plus the cost of issuing them. Each part is priced at a rate measured here, once for the whole book,
# for the kernel that actually does that work.
#
# * [**streaming**](glossary.md#streaming-read), as STREAM measures it: a read (a sum), a second read that does
#   almost no arithmetic (a running maximum over the bits as whole numbers), a copy, a copy into freshly allocated memory (what a growing cache
#   does) and a triad. Its arrays are at least four times the CPU's last-level cache (STREAM's rule), so that
#   they stream from memory.
# * **the model's own matrices, in its own layout**: GPT-2's layers call `addmm` on `[in, out]` weights, a Llama's
#   (SmolLM2's) call `F.linear` on `[out, in]`. At one row (a decode step) this is the rate the weights stream at,
#   and at `M` rows it is [`F(M)`](glossary.md#matrix-rate-fm), the FLOP rate those shapes reach with `M` rows.
# * **attention** over a prompt and over a cache, with the model's heads (a cache read after as many bytes as the
#   model's weights have streamed past it, as in a decode step).
# * [**dispatch**](glossary.md#dispatch): a pass of the same model with its matrix products and attention hollowed
#   out (each returns zeros), so it issues every operation and runs its small kernels at the model's width and does
#   nothing else. Its operations are counted, and a decode step's is timed from a longer cache too, since the rest
#   of a step grows with its cache.
# * **the square product**, the peak a textbook roofline uses.
#
# Every chapter reads this chapter's table (`lib.machine.load_ceilings`), so a ceiling cannot drift between
# chapters built minutes apart.

# %% [markdown]
# **After this chapter you can**
#
# * Measure this machine's streaming read in GB/s, and check one reading with a second, different one.
# * Compare the model's own matrix-vector rate (the kernel rate) with the streaming read, and say which of the two a decode step will meet.
# * Read the matrix rate with few rows, F(M), and say why a pass of a few tokens does not get the rate of a long one.
# * Estimate what issuing one operation costs (dispatch) and what the timer itself adds to a measurement.

# %% tags=["parameters"]
quick = False
device = "auto"
dtypes = ["fp32", "bf16"]                # on a GPU fp16 is added
threads = None                           # CPU thread counts; None: all cores and one
models = ["gpt2-small", "tiny-gpt2"]     # matrices, attention and dispatch at every thread count (tiny: quick mode's)
models_one_stream = ["smollm2-135m"]     # fewer rows, one stream (chapters 1, 7 and 9 run it so, vLLM on one core)

# %%
import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import Markdown, display

from lib import claims, machine, params, prose, timing
from lib.device import describe_environment, use_threads
from lib.machine import MODELS
from lib.prose import show
from lib.results import Results


P = params.check(globals(), {
    "device": params.device(),
    "dtypes": params.dtype_list(),
    "threads": params.threads(),
    "models": params.listof(params.choice(MODELS), quick=["tiny-gpt2"]),
    "models_one_stream": params.listof(params.choice(MODELS), min_items=0),
}, quick=quick, chapter="00_machine")
on_gpu = device.type == "cuda"
if on_gpu and "fp16" not in dtypes:
    dtypes = [*dtypes, "fp16"]
most = max(threads)
results = Results("00_machine", params=P, quick=quick, model=", ".join([*models, *models_one_stream]))
register = claims.Claims()
pd.Series({**describe_environment(device), "thread counts measured": threads}).to_frame("this run")

# %% [markdown]
# ## What this run found

# %%
opening = prose.Opening()

# %% [markdown]
# What the kernels below will read: each model's weights, and (on a CPU) how much of them the processor's
# largest cache could hold between two calls.

# %%
_llc = machine.last_level_cache_bytes() if not on_gpu else None
show("Weights (the matrices a pass multiplies by), " + ", ".join(
    f"{m}: **{MODELS[m][0].with_dtype('fp32').weight_bytes / 2**20:,.0f} MiB** in fp32" for m in [*models, *models_one_stream])
     + ("." if _llc is None else f". This CPU's last-level cache holds **{_llc / 2**20:,.0f} MiB** (shared with the "
        "host's other cores where this is a virtual machine)."))

# %% [markdown] tags=["predict"]
# ## Predict first
#
# **Predict first.** Below this point nothing has been measured yet. The tables above say only which device this
# is, its cores and (on a CPU) its flags and caches, and what the models weigh. The paragraph at the very top holds
# this run's answers; a student copy shows it only once the chapter has run. A streaming read moves each byte of
# an array once; a matrix-vector product reads every weight once and does two FLOPs per weight. Write down your
# guesses for this machine:
#
# 1. Does the model's matrix-vector product read its weights as fast as a plain streaming read does, or slower?
# 2. A product with **two** rows reads the same weights as one with one row, and does twice the FLOPs. If reading
#    the weights is what takes the time, how many times as long does it take? And if the FLOPs are?
# 3. The table above gives this machine's cores. If each core could stream from memory on its own, how much would
#    a second thread speed up a streaming read? If the memory can serve only so many bytes a second, whoever asks,
#    how much? Which do you expect, and is a matrix-vector product, which reads its weights the same way, different?

# %% [markdown]
# The claims below test each guess against this run's data.

# %% [markdown]
# ## The measurements
#
# Each kernel is timed many times. **A ceiling is the fastest repeat**: other programs on a shared machine only
# ever slow a kernel down, so the fastest call is the one closest to what the kernel can do. The median of the
# same repeats is kept beside it, and `spread` (median over fastest, less one) says how noisy the machine was.
#
# <details><summary>How the repeats are scheduled</summary>
#
# Each kernel is timed within a budget, in rounds. In the first round it is warmed up once, and that call's time
# sets how many repeats fit. Every ceiling is measured once per round, in every dtype and at every thread count,
# before the next round begins. So a slow spell of a shared machine that lasts a few seconds lands on one round of
# everything, not on every repeat of the few kernels (or the one dtype) timed during it. The plan this run used is
# folded below the table.
#
# The fastest repeat is also the one a slow spell moves least. A host whose own speed drifts between two builds
# moves every ceiling alike, and the chapters' times with them, so the chapters compare a measured time with its
# price from the same build.
#
# A product that would not fit its budget is timed on part of the model (`measured_fraction`) and scaled. Each
# call follows a read of as many bytes as the whole model's weights, so that its part does not sit in the caches
# between calls. Up to 16 rows every layer is timed, so the weights stream from memory as in a pass.
# </details>
#
# The code below times the streaming kernels and the model's matrices.

# %%
display(prose.source(machine.stream, machine.fresh_memory, machine.model_matrices))

# %% [markdown]
# The table has one row per dtype, thread count and kernel (and model and rows, where they apply).

# %%
took = []  # how long each dtype and thread count took: the instrument's log, folded below
ceilings_table = machine.measure_ceilings(device, dtypes, threads, models=models, models_one_stream=models_one_stream,
                                          quick=quick, log=took.append)
results.table(ceilings_table, "ceilings")
ceilings = machine.Ceilings(machine.check_ceilings(ceilings_table), str(device))
ok = ceilings_table[ceilings_table.status == "ok"]
plan = machine.budget(device, quick)
show(f"The table below holds {len(ok):,} ceilings, one a row, each the fastest of its repeats.",
     how=f"The plan: {plan.rounds} round(s) of {plan.seconds:g} s a ceiling, {plan.min_repeats} to {plan.max_repeats} "
         f"repeats a round; streamed arrays of {plan.stream_bytes >> 20} MiB. " + "; ".join(took) + ".")
for row in ceilings_table[ceilings_table.status != "ok"].itertuples():
    print(f"{row.dtype}, {row.threads} threads, {row.kernel} {row.model} {row.rows}: {row.status} ({row.note})")
prose.shown(ok[["dtype", "threads", "kernel", "model", "rows", "best_s", "spread", "gb_s", "gflop_s", "repeats"]].round(4))

# %% [markdown]
# ## Streaming, and a second read to check the first
#
# A sum does an addition per element, so a slow adder could hold it back. A running maximum over the same bytes
# read as whole numbers does one integer comparison. If both read at the same rate, neither kernel's arithmetic
# sets it. Read as bf16 values, a maximum would convert every value on a CPU without bf16 instructions, which
# is arithmetic again: hence whole numbers.

# %%
register.claim("streaming_read_cross_checked", "A streaming read and a second read kernel that does almost no "
               "arithmetic reach the same rate.")
rates = {k: ceilings.stream_bandwidth("fp32", most, k) / 1e9 for k in machine.STREAM_KERNELS}
where = "the GPU" if on_gpu else f"{most} thread{'s' * (most > 1)}"
total, maximum = rates["read"], rates["read_max"]
verdict = register.record("streaming_read_cross_checked", claims.within(maximum, total, claims.PREDICTED_RATIO),
                          predicted=f"{total:.1f} GB/s (sum)", measured=f"{maximum:.1f} GB/s (maximum)",
                          evidence=f"fp32, {where}, fastest of the repeats")
apart = max(maximum, total) / min(maximum, total)
show(f"With {where}, the sum reads {total:.1f} GB/s and the running maximum {maximum:.1f} GB/s, " + claims.pick(
         verdict, held=f"{apart:.2f}x apart: the same rate, as predicted, so neither kernel's arithmetic sets it.",
         not_held=f"{maximum / total:.2f} times as much: one of the two kernels, not the memory, limits its rate, and "
                  "the faster one is the better measure of the memory.",
         unresolved=f"{apart:.2f}x apart: too close to call whether a kernel limits the rate."),
     how=f"Each rate is its kernel's fastest call (a ceiling, as above). Two measures of one rate count as the same "
         f"within {claims.PREDICTED_RATIO:g}x of each other; "
         + ("more repeats would decide a pair on that line." if verdict == claims.UNRESOLVED else
            f"these are {apart:.2f}x apart."))
read_kernel = ceilings.read_kernel("fp32", most)  # the faster of the two: "the streaming read" from here on
rates["read"] = rates[read_kernel]
_streaming = (f"From here on, as in every later chapter, **the streaming read** is the faster of the two, "
              f"{rates['read']:.1f} GB/s ({'the sum' if read_kernel == 'read' else 'the maximum'})")
if "bf16" in ceilings.dtypes() and not on_gpu:
    _max16 = ceilings.stream_bandwidth("bf16", most, "read_max") / 1e9
    _streaming += (f". In bf16 the sum reads {ceilings.stream_bandwidth('bf16', most, 'read') / 1e9:.1f} GB/s and the "
                   f"maximum {_max16:.1f} (over 16-bit whole numbers, the same bytes)"
                   + (". So the streaming read is what these simple kernels reach, as STREAM's are; a kernel that "
                      "reads the same bytes faster shows the memory can give more" if _max16 > rates["read"] *
                      claims.PREDICTED_RATIO else ""))
show(_streaming + ".")

# %% [markdown]
# A cache that grows by concatenation writes every step into a tensor just allocated. Memory the process has not
# touched before costs the operating system a **page fault** per page the first time it is written (mapping the
# page and zeroing it), so a copy into fresh memory should be slower than a copy into memory already in use. On
# Linux a large allocation (from 32 MiB, glibc's largest threshold) always gets fresh pages; a smaller one gets
# them or not, as the allocator decides. The copy into fresh memory is timed with its faults counted (the
# operating system's count, `lib.timing.page_faults`), so the cost of one fault is measured here. Every later
# chapter prices the faults a pass takes at it. It is measured in fp32 only: a fault is the operating system's
# work, whatever the values' type. A GPU's caching allocator reuses its memory, so there the two
# copies should agree.

# %%
register.claim("fresh_memory_copies_slower", "On a CPU, copying into freshly allocated memory is slower than "
               "copying into memory already in use.")
fresh_row = ok[(ok.kernel == "fresh_copy") & (ok.dtype == "fp32") & (ok.threads == most)].iloc[0]
fresh_pages = fresh_row.bytes_per_call / 2 / timing.PAGE_BYTES
faults_table = pd.DataFrame([dict(dtype=dt, threads=n, fault_us=ceilings.fault_cost(dt, n) * 1e6,
                                  faults_per_mib=ceilings.faults_per_byte(dt, n) * 2**20)
                             for dt in ["fp32"] for n in ceilings.threads(dt)]) if not on_gpu else pd.DataFrame()
if not on_gpu:
    results.table(faults_table, "page_faults")
verdict = register.record(
    "fresh_memory_copies_slower",
    None if on_gpu else claims.below(rates["fresh_copy"], rates["copy"] / claims.PREDICTED_RATIO),
    predicted="slower into fresh memory", measured=f"{rates['fresh_copy']:.1f} against {rates['copy']:.1f} GB/s",
    evidence="a GPU: its caching allocator reuses memory" if on_gpu else
    f"fp32, {where}, {fresh_row.bytes_per_call / 2 / 2**20:.0f} MiB arrays; page_faults.csv")
fault_us, fault_us_1 = (0, 0) if on_gpu else (ceilings.fault_cost("fp32", n) * 1e6 for n in (most, min(threads)))
copied = (f"A copy moves {rates['copy']:.1f} GB/s into memory in use and {rates['fresh_copy']:.1f} GB/s into fresh "
          "memory")
show(claims.pick(
    verdict,
    held=f"{copied}: slower, as predicted. The fresh copy took {fresh_row.faults_per_call:,.0f} page faults for its "
         f"{fresh_pages:,.0f} pages of {timing.PAGE_BYTES / 1024:g} KiB. Each costs {fault_us:.2f} us on {where} and "
         f"{fault_us_1:.2f} us on one thread. The cost model adds that for every fault a pass takes.",
    not_held=f"{copied}: not as predicted, the fresh copy is not clearly slower. Its {fresh_row.faults_per_call:,.0f} page faults for "
             f"{fresh_pages:,.0f} pages cost {fault_us:.2f} us each on {where}, so the cost model's page faults cost "
             "next to nothing here.",
    unresolved=f"{copied}: too close to call whether its page faults slow it.",
    not_measured=register.undecided("fresh_memory_copies_slower", "on a GPU the caching allocator reuses memory; "
                                    "both copies are priced at the copy rate.")),
     how=None if on_gpu else f"Both rates are fastest calls. The fresh copy counts as slower when the copy into memory "
         f"in use is more than {claims.PREDICTED_RATIO:g} times as fast"
         + ("; this pair lies on that line, and more repeats would decide it." if verdict == claims.UNRESOLVED else "."))
prose.shown(faults_table.round(3))

# %% [markdown]
# ## The model's matrix-vector products against the streaming read
#
# A decode step multiplies one row by every weight matrix, so its weights stream at whatever rate those
# products reach. The streaming read is what the memory delivers to a simple loop; the products are what a
# decode step's kernels actually draw from it, in the model's own layout.

# %%
register.claim("gemv_reaches_streaming_bandwidth", "With the most threads the chapter runs, the model's "
               "matrix-vector products, in its own layout, read their weights at the streaming read's rate (one "
               "thread's pair is told beside, not decided).")
gemv = {m: ceilings.weight_rate(m, "fp32", most) / 1e9 for m in [*models, *models_one_stream]}
model = models[0]
one = 1 in threads and most > 1
gemv_1, read_1 = (ceilings.weight_rate(model, "fp32", 1) / 1e9, ceilings.stream_bandwidth("fp32", 1) / 1e9) \
    if one else (0, 0)
short = gemv[model] < rates["read"]  # a miss the usual way; above the read, as if a cache held the weights
weights_mb = (MODELS[model][0].layers * MODELS[model][0].block_params + MODELS[model][0].lm_head_params) * 4 / 1e6
l3 = machine.last_level_cache_bytes()
cache_note = "" if l3 is None else (
    f" (this host's last-level cache is {l3 / 2**20:,.0f} MiB, "
    + (f"more than the {weights_mb * 1e6 / 2**20:,.0f} MiB of fp32 weights; whether part of them stays in it between "
       "calls, this chapter does not measure)"
       if l3 >= weights_mb * 1e6 else
       f"{l3 / (weights_mb * 1e6):.0%} of the {weights_mb * 1e6 / 2**20:,.0f} MiB of fp32 weights, so part of them can "
       "stay in it between calls)"))
compare = (f"while a streaming read reaches {rates['read']:.1f} GB/s, {rates['read'] / gemv[model]:.2f} times as much"
           if short else f"and a streaming read {rates['read']:.1f} GB/s: the kernels reached "
           f"{gemv[model] / rates['read']:.2f}x the streaming read")
which = ("The machine delivers more than the model's kernels draw" if short else
         "Part of the weights then comes from a cache, not from memory" + cache_note)

# %%
threads_note = "" if not one or not short else (
    f". On one thread the products read {gemv_1:.1f} GB/s and the sum {read_1:.1f} GB/s, so "
    + ("even one core's kernel falls short of what that core streams" if gemv_1 * claims.PREDICTED_RATIO < read_1
       else "on one core the two agree: the gap opens with more cores"))
one_note = "" if not one or short else (  # the one-thread pair, which later chapters price too, told beside
    f" (on one thread {gemv_1:.1f} GB/s against {read_1:.1f}, {gemv_1 / read_1:.2f}x: "
    + ("the same rate there too)" if 1 / claims.PREDICTED_RATIO <= gemv_1 / read_1 <= claims.PREDICTED_RATIO
       else f"the one core's kernel drawing {'more' if gemv_1 > read_1 else 'less'} than one core's streaming read)"))
others = [m for m in gemv if m != model and MODELS[m][1] != MODELS[model][1]]
layouts = "" if not others or not short else (
    f" In the other layout ({MODELS[others[0]][1]}), {others[0]}'s products read {gemv[others[0]]:.1f} GB/s: "
    + ("both layouts' kernels fall short of the read, so the gap is the kernels', not the layout's."
       if gemv[others[0]] * claims.PREDICTED_RATIO < rates["read"] else
       "that layout's kernel comes close to the read, so the gap is this layout's kernel."))
# Decided on the ratio of the two rates, fastest call to fastest and median to median, so one slow or lucky call
# of either kernel cannot move it.
_b, _h = (ceilings.matrices(model, "fp32", most, k, 1) for k in ("blocks", "head"))
gemv_spread = claims.Spread(gemv[model] * (_b.best + _h.best) / (_b.median + _h.median), gemv[model], gemv[model])
_read = ceilings._rows("fp32", most, read_kernel).iloc[0]
read_spread = claims.Spread(float(_read.gb_s_median), rates["read"], rates["read"])
_ratios = (gemv_spread.mid / read_spread.mid, gemv_spread.low / read_spread.low)  # fastest calls, median calls
gemv_ratio = claims.Spread(min(_ratios), _ratios[0], max(_ratios))
verdict = register.record("gemv_reaches_streaming_bandwidth", claims.within(gemv_ratio, 1.0, claims.PREDICTED_RATIO),
                          predicted=f"{read_spread.text('.1f', 'GB/s')} (streaming read, median to fastest call)",
                          measured=f"{gemv_spread.text('.1f', 'GB/s')} ({model}, median to fastest call): "
                                   f"{gemv_ratio.text('.2f', 'x')} the read",
                          evidence=f"fp32, {where}, blocks and head at one row")
fastest = f"With {where}, {model}'s matrix-vector products read their weights at {gemv[model]:.1f} GB/s"
show(claims.pick(
    verdict,
    held=f"{fastest}, {gemv[model] / rates['read']:.2f} times the streaming read's {rates['read']:.1f} GB/s: "
         + ("a little faster, near enough to count as the same rate, as predicted"
            if gemv[model] > rates["read"] * (1 + claims.NOISE) else "the same rate, as predicted")
         + f"{one_note}. A decode step's weights cost about their bytes at the memory's rate, and the later chapters "
         "price them at the products' own rate."
         + (f" A kernel reading faster than the memory streams gets part of its weights from a cache{cache_note}."
            if gemv[model] > rates["read"] * (1 + claims.NOISE) else ""),
    not_held=f"{fastest}, {compare}{threads_note}.{layouts} {which}. So every later chapter prices a decode step's "
             "weights at the kernels' rate, not the memory's.",
    unresolved=f"With {where}, {model}'s matrix-vector products read their weights at "
               f"{gemv_spread.text('.1f', 'GB/s')} and the streaming read moves {read_spread.text('.1f', 'GB/s')}: "
               f"too close to call whether the kernels draw the memory's rate{one_note}. Either way every later "
               "chapter prices a decode step's weights at the kernels' own rate."),
     how=f"A rate is its kernel's fastest call; the range beside one runs from its median call to its fastest. The "
         f"products reach {gemv_ratio.text('.2f', 'x')} the read, fastest call against fastest and median against "
         f"median, and count as reading at the same rate when that lies within {claims.PREDICTED_RATIO:g}x either "
         "way" + ("; here it crosses that line, and more repeats in chapter 0 would decide it."
                  if verdict == claims.UNRESOLVED else "."))

# %% [markdown]
# ## Does a second thread help?
#
# One core can keep only so many memory requests in flight, so a streaming read over two cores should move
# more bytes per second than over one, beyond the spread of the repeats (the spread is from the median to the
# fastest repeat).

# %%
register.claim("threads_raise_streaming_bandwidth", "More threads stream more bytes per second than one, beyond "
               "the spread of the repeats.")


def read_spread(n: int, kernel: str = "memory") -> claims.Spread:
    """The read's rate over the repeats (GB/s): from the median call to the fastest."""
    best = ceilings.stream_bandwidth("fp32", n, kernel) / 1e9
    return claims.Spread(best / (1 + ceilings.stream_spread("fp32", n, kernel)), best, best)


if not one or on_gpu:
    register.record("threads_raise_streaming_bandwidth", None, evidence="one thread count only")
    show("More threads stream more bytes per second than one, beyond the spread of the repeats. This run does not "
         "decide it: one thread count only (a GPU, or `threads` set to one value).")
else:
    g1, gm, r1 = ceilings.weight_rate(model, "fp32", 1) / 1e9, gemv[model], read_spread(1).high
    verdict = register.record("threads_raise_streaming_bandwidth", claims.below(read_spread(1), read_spread(most)),
                              predicted="more than 1x", measured=f"{rates['read'] / r1:.2f}x (read)",
                              evidence="fp32 read kernel, 1 thread against all; GEMV beside it")
    moves = f"{r1:.1f} GB/s on one thread and {rates['read']:.1f} GB/s on {most}"
    show(claims.pick(
        verdict,
        held=f"The streaming read goes from {r1:.1f} GB/s on one thread to {rates['read']:.1f} GB/s on {most}, "
             f"{rates['read'] / r1:.2f}x, more as predicted. The model's matrix-vector products go from {g1:.1f} to "
             f"{gm:.1f} GB/s, {gm / g1:.2f}x.",
        not_held=f"The streaming read moves {moves} ({rates['read'] / r1:.2f}x): one core already draws what this "
                 f"memory gives. The model's matrix-vector products: {gm / g1:.2f}x.",
        unresolved=f"The streaming read moves {moves} ({rates['read'] / r1:.2f}x): too close to call whether more "
                   f"threads help. The model's matrix-vector products: {gm / g1:.2f}x."),
        how=f"Each rate is its kernel's fastest call. More threads count as faster when one thread's read, from its "
            f"median call to its fastest ({prose.span(read_spread(1).low, r1, '.1f', 'GB/s')}), lies wholly below {most} "
            f"threads' ({prose.span(read_spread(most).low, read_spread(most).high, '.1f', 'GB/s')}), and as no faster when it lies wholly at or above it.")

# %% [markdown]
# ## The matrix rate with few rows: F(M)
#
# With `M` rows a product does `M` times the FLOPs for the same weight bytes. So the textbook expects its time
# to stay flat while the bytes dominate, and its FLOP rate to climb toward the square product's peak. The
# figure shows the rate the model's block matrices reach with each number of rows, against the square product.

# %%
fig, ax = plt.subplots(figsize=(9, 4.5))
blocks = ok[ok.kernel == "blocks"]
for (m, dt, n), g in blocks.groupby(["model", "dtype", "threads"], sort=False):
    ax.plot(g.rows, g.gflop_s, "o-", ms=3, label=f"{m}, {dt}" + ("" if on_gpu else f", {n} thr."))
for dt in ceilings.dtypes():
    ax.axhline(ceilings.square_flops(dt, most) / 1e9, ls=":", lw=1, color="k")
    ax.annotate(f"square product, {dt}", (1, ceilings.square_flops(dt, most) / 1e9), fontsize=7,
                textcoords="offset points", xytext=(2, 3))
ax.set(xscale="log", yscale="log", xlabel="rows through the model's block matrices (M)", ylabel="GFLOP/s, fastest call")
ax.set_xscale("log", base=2)
f1, f2 = (ceilings.matrices(model, "fp32", most, "blocks", r).best for r in (1, 2 if not quick else 4))
ax.set_title(f"F(M): {model} in fp32 takes {f2 / f1:.2f}x as long at {2 if not quick else 4} rows as at 1, "
             f"for the same weight bytes", fontsize=10)
ax.legend(fontsize=7)
ax.grid(True, which="major", alpha=0.3)
results.figure(fig, "matrix_rate_by_rows")
plt.show()

# %%
register.claim("two_rows_cost_no_more", "A product of the model's matrices with a few rows takes no longer than "
               "with one: the same weights stream once.")
few = 2 if not quick else 4
t1, t2 = (ceilings.matrices(model, "fp32", most, "blocks", r) for r in (1, few))
measured_ratio = claims.Spread(t2.best / t1.median, t2.best / t1.best, t2.median / t1.best)
block_bytes = MODELS[model][0].layers * MODELS[model][0].block_params * 4
extra = t2.best - t1.best  # seconds the extra rows add
g_few, square = ceilings.matrix_rate(model, "fp32", most, few) / 1e9, ceilings.square_flops("fp32", most) / 1e9
faults = ceilings.matrix_faults(model, "fp32", most, "blocks", few)
fault_s = 0.0 if on_gpu else faults * ceilings.fault_cost("fp32", most)
fault_text = ("it takes no page faults" if faults < 1 else
              f"its {faults:,.0f} page faults cost {prose.ms(fault_s)}")
shape, steps_told = ceilings.row_steps(model, "fp32", most)  # how the time grows between the rows timed, one layer down
far_rows = max((r for r in ceilings.rows_measured(model, "fp32", most, "blocks") if r <= 16), default=few)
far_arith = far_rows * 2 * block_bytes / 4 / (square * 1e9)  # seconds: that many rows' FLOPs at the square product's rate

# %%
if extra > 0 and fault_s >= extra / 2:  # why the extra rows cost more, from the kernels' own rows (the short form opens the page)
    why_short = "page faults took most of the extra time"
    why = (f"The product at {few} rows takes {faults:,.0f} page faults, {prose.ms(fault_s)} of its extra "
           f"{prose.ms(extra)}. The extra time is the operating system's, mapping the product's output afresh")
elif g_few * claims.PREDICTED_RATIO >= square:
    why_short = f"at {few} rows the arithmetic already sets the time"
    why = (f"At {few} rows the product already runs at {g_few:.1f} GFLOP/s, near the square product's {square:.0f}. "
           "Its arithmetic, not its weights' bytes, sets its time")
elif shape == "one-off":
    why_short = "a one-off step at the first extra row"
    why = (f"The time steps up once, going from one row to two, and then grows only a little. At {few} rows the "
           f"product runs {g_few:.1f} GFLOP/s, far below the square product's {square:.0f}, and {fault_text}. That is "
           "the shape of a kernel that takes another, slower path for more than one row, not a cost per row")
elif shape == "steps":
    why_short = "the kernel changes its path with the row count"
    why = (f"The time rises in uneven steps as rows are added, not by a cost per row. Yet {far_rows} rows' arithmetic "
           f"at the square product's rate would take only {prose.ms(far_arith)}, and {fault_text}. The kernel "
           "changes its path, and its speed, with the row count")
elif shape == "per row":
    why_short = "each extra row adds its own time, at a fraction of the machine's FLOP rate"
    why = (f"Each added row costs about the same, and at {few} rows the product runs {g_few:.1f} GFLOP/s, far below "
           f"the square product's {square:.0f}. Since {fault_text}, the kernel's time grows with its rows' arithmetic, "
           "done slowly, not with the weights' bytes")
else:
    why_short = "neither the arithmetic nor page faults take the extra time"
    why = (f"At {few} rows the product runs {g_few:.1f} GFLOP/s, far below the square product's {square:.0f}, and "
           f"{fault_text}. Neither the arithmetic's rate nor the operating system takes the extra time, so the "
           "kernel's own path for more than one row does")
ratio = t2.best / t1.best
verdict = register.record("two_rows_cost_no_more", claims.at_most(measured_ratio, claims.PREDICTED_RATIO),
                          predicted="about 1x", measured=f"{ratio:.2f}x", evidence=f"fp32, {where}, {model}")
show(f"The block matrices of {model} take {prose.ms(t1.best)} at one row and {prose.ms(t2.best)} at {few} rows "
     f"({ratio:.2f}x" + claims.pick(
         verdict, held="): the weights' bytes set both.",
         not_held=f") for the same weight bytes: one row streams the weights at "
                  f"{block_bytes / t1.best / 1e9:.1f} GB/s, {few} rows at {block_bytes / t2.best / 1e9:.1f} GB/s. "
                  f"One layer down: {why[:1].lower()}{why[1:]}. Every short prompt of chapter 2 meets this, and so does any decode step "
                  "that checks several tokens at once.",
         unresolved="): too close to call whether the extra rows cost more than one."),
     how=(f"{steps_told}. " if steps_told and verdict == claims.NOT_HELD else "") + f"Both times are fastest calls. Paired the other ways (one's fastest call with the other's median) the ratio "
         f"runs {prose.span(measured_ratio.low, measured_ratio.high, '.2f', 'x')}; a few rows count as costing no more "
         f"than one while all of that stays within {claims.PREDICTED_RATIO:g}x, and as costing more when none of it "
         "does.")

# %% [markdown]
# ## Issuing the work, and what limits each dtype
#
# The hollowed model issues the real one's operations and runs its small kernels at the same width. The table
# times it two ways. **Alone** (`setting` "alone") is the hollowed pass run by itself, divided by the operations
# it issues: what issuing one operation costs when nothing else uses the caches. **Between weight streams** is the same pass with every product still reading its weights,
# less the reads' own time: what the same operations cost inside a real pass, whose weights flush the caches
# the interpreter and the small kernels work from. The cost model prices a pass's dispatch at the second,
# between weight streams. A decode step is timed that way from 16 cached tokens and again from longer caches
# (`lib.machine.LONG_CACHES`). The difference, less the growth of the cache's own copy timed alone (priced
# apart), is how much the rest of a step grows with its cache. The cost model adds it to a step's dispatch at its
# cache's size. The square product can reach the
# arithmetic units' rate only where the hardware has instructions for the dtype (the CPU's flags or the GPU's
# compute capability say which); without them its rate is a slow kernel's. Its table gives each dtype's rate
# against fp32's and against one thread's.

# %%
issue = ok[ok.kernel == "dispatch"][["model", "dtype", "threads", "pass_kind", "rows", "setting", "best_s",
                                     "operations", "us_per_operation", "spread"]].assign(best_ms=lambda d: d.best_s * 1e3)
display(prose.shown(issue.drop(columns="best_s").round(2)))
ops, us_alone = ceilings.operations(model, "fp32", most, "decode")
shortest = ceilings.dispatch(model, "fp32", most, "decode").best
us_between = shortest / ops * 1e6  # the step's own operations (between weight streams, each product's read adds one)
_row = issue[(issue.model == model) & (issue.dtype == "fp32") & (issue.threads == most)
             & (issue.pass_kind == "decode") & (issue.setting == "between weight streams")].head(1)
_counted = ("" if _row.empty or int(_row.operations.iloc[0]) == ops else
            f" (the table's row divides by {int(_row.operations.iloc[0]):,}: it counts each product's read as an "
            f"operation, {_row.us_per_operation.iloc[0]:.1f} us each)")
show(f"A decode step of {model} in fp32 on {where}: alone, each of its {ops:,} operations costs {us_alone:.1f} us. "
     f"Between weight streams the same {ops:,} take {prose.ms(shortest)}, {us_between:.1f} us each, "
     f"{us_between / us_alone:.1f} times as much. The cost model uses the second.",
     how="Both are the hollowed step's fastest calls, divided by the operations the step issues" + (
         f"{_counted}." if _counted else "."))
grown = {kind: ceilings.rest_growth(model, "fp32", most, kind, 1, 1000 + extra)
         for kind, extra in (("decode", 0), ("decode_static", 8))}
if all(g is not None for g in grown.values()):
    # each a difference of two steps' times over the repeats: from the fastest calls' difference to the median ones'
    # (chapter 0's fastest calls price the step; the median calls say how much of it one lucky pair could be)
    _longer = {kind: f"**{prose.span(g.best * 1e3, g.median * 1e3, '.2f', 'ms')}** longer with a {name} cache{extra}"
               for (kind, g), name, extra in
               zip(grown.items(), ("growing", "preallocated"), (", beyond that cache's own copy timed alone", ""))
               if max(g.best, g.median) >= 5e-6}  # either end prints as 0.01 ms or more
    _same = [name for (kind, g), name in zip(grown.items(), ("growing", "preallocated"))
             if max(g.best, g.median) < 5e-6]  # "no longer" only where the median calls agree
    _told_how = ("Each difference is taken twice over the repeats, between the two steps' fastest calls and between "
                 "their median calls; the first is what the cost model adds, and a range says how far the median "
                 "calls moved it" + ("" if all(g.median < 5e-6 for g in grown.values()) else
                                     " (" + "; ".join(f"{name}: {prose.span(g.best * 1e3, g.median * 1e3, '.2f', 'ms')}"
                                                      for g, name in zip(grown.values(), ("growing", "preallocated")))
                                     + ")") + ".")
    _no_growth = (f"no longer with a {' or a '.join(_same)} cache (its step at 1,000 tokens, less what the cost "
                  "model prices apart, was no slower than at 16)") if _same else ""
    if _longer:
        show(f"From a cache of 1,000 tokens instead of 16, the rest of {model}'s step (fp32, {most} threads) takes "
             + ", and ".join(_longer.values()) + "."
             + (f" With a {' or a '.join(_same)} cache it took no longer: its step at 1,000 tokens, less what the cost "
                "model prices apart, was no slower than at 16." if _same else "")
             + " The growth is work outside the matrices and attention that grows with the cache. The cost model adds the "
             "first figure to a step's dispatch, and chapter 3 takes it apart under the profiler.", how=_told_how)
    else:
        show(f"From a cache of 1,000 tokens instead of 16, the rest of {model}'s step (fp32, {most} threads) takes "
             f"{_no_growth}. On this machine the work outside the matrices and attention does not grow with the "
             "cache, and the cost model adds nothing for it.", how=_told_how)
# %%
peaks = ok[ok.kernel == "square_matmul"][["dtype", "threads", "note", "gflop_s", "spread", "hardware_support"]]
_at = {(r.dtype, r.threads, r.note): r.gflop_s for r in peaks.itertuples()}  # each ratio at the same size
display(prose.shown(peaks.rename(columns={"hardware_support": "instructions_for_dtype"}).assign(
    x_fp32=[r.gflop_s / _at.get(("fp32", r.threads, r.note), float("nan")) for r in peaks.itertuples()],
    x_one_thread=[r.gflop_s / _at.get((r.dtype, 1, r.note), float("nan")) for r in peaks.itertuples()]).round(2)))
if most > 1 and not on_gpu:  # what the flags say, beside what the square product did with them
    _one_size = {dt: next((n for (d, t, n) in _at if d == dt and t == 1), None) for dt in ceilings.dtypes()}
    _gain = {dt: _at[(dt, most, n)] / _at[(dt, 1, n)] if (dt, most, n) in _at else
             ceilings.square_flops(dt, most) / ceilings.square_flops(dt, 1)  # one size for both, where timed
             for dt, n in _one_size.items()}
    _flat = [dt for dt, g in _gain.items() if g < 1 + claims.NOISE * 2]
    show(" ".join(f"In {dt} the square product on {most} threads ran **{ceilings.square_flops(dt, most) / 1e9:,.0f} "
                  f"GFLOP/s**, {_gain[dt]:.2f} times one thread's"
                  + ("" if dt == "fp32" else f" and {ceilings.square_flops(dt, most) / ceilings.square_flops('fp32', most):.1f} times fp32's")
                  + "." for dt in ceilings.dtypes())
         + " The flags say only whether the CPU has instructions for a dtype (*instructions_for_dtype*), not what "
         "rate its kernel reaches with them."
         + (f" In {' and '.join(_flat)} the rate does not grow with more threads, so the cores' arithmetic units "
            "working side by side do not set it; this chapter does not take apart what does." if _flat else ""),
         how="Each dtype's gain over one thread is taken at the size one thread was timed at ("
             + "; ".join((f"{dt}: {_one_size[dt]}" if _one_size[dt] else f"{dt}: each count's own size") for dt in ceilings.dtypes())
             + "), fastest calls.")
ridge = ceilings.square_flops("fp32", most) / ceilings.stream_bandwidth("fp32", most)
show(f"The textbook **balance point** in fp32 on {where}: the square product's {ceilings.square_flops('fp32', most) / 1e9:.1f} "
     f"GFLOP/s over the streaming read's {rates['read']:.1f} GB/s is {ridge:.1f} FLOP per byte. "
     "It uses the square product's rate, not the model's own matrices' F(M) (chapter 2 uses those). Chapter 6 draws it beside the kernels' own roofs "
     "measured above.", how="Both rates are fastest calls, the ceilings.")

# %% [markdown]
# ## The timer's own cost
#
# Every chapter's timings include the harness: two synchronised clock reads around the timed call and, in a
# decode loop, reading the chosen token back to the host. They must be small beside the shortest pass the book
# times, a decode step of the hollowed model.

# %%
register.claim("timer_under_one_percent", "The harness adds under 1 % to the shortest step the book times.")
cost = timing.overhead(device)
steps_timed = ok[(ok.kernel == "dispatch") & (ok.pass_kind == "decode") & (ok.dtype == "fp32")]
least = steps_timed.loc[steps_timed.best_s.idxmin()] if len(steps_timed) else None  # every model, setting, thread count
shortest_any, least_model = (float(least.best_s), least.model) if least is not None else (shortest, model)
share = (cost["clock"] + cost["readback"]) / shortest_any
results.table(pd.DataFrame([dict(part="clock reads", median_us=cost["clock"] * 1e6),
                            dict(part="token read-back", median_us=cost["readback"] * 1e6),
                            dict(part=f"shortest step timed ({least_model}'s hollowed decode step, fastest call)",
                                 median_us=shortest_any * 1e6)]),
              "timer_overhead")
verdict = register.record("timer_under_one_percent", claims.at_most(share, claims.HARNESS), predicted="under 1 %",
                          measured=f"{share:.3%}", evidence=f"fp32 hollowed decode step of {least_model}, {where}")
of_step = f"of the shortest step timed here ({least_model}'s hollowed decode step, {prose.ms(shortest_any)})"
show(f"Clock reads and the token read-back cost **{(cost['clock'] + cost['readback']) * 1e6:.1f} us**, "
     + claims.pick(verdict, held=f"{share:.2%} {of_step}: under 1 %, as predicted, so the timer does not distort "
                                 "the steps.",
                   not_held=f"{share:.1%} {of_step}, not under 1 % as predicted: the shortest steps read that much "
                            "too long.",
                   unresolved=f"{share:.2%} {of_step}: too close to 1 % to call whether the timer distorts the "
                              "steps."),
     how="The harness's cost is the median of many clock reads and read-backs; the step is its fastest call, the "
         "shortest the book times, so this is the largest share of a step the harness takes.")

# %%
def up_to(best: float, median: float, unit: str) -> str:
    """A rate for the opening: its fastest call, bold (the ceiling every later chapter prices with), and its
    typical (median) call in parentheses."""
    fmt = ",.0f" if best >= 100 else ".1f" if best >= 1 else ".3f"
    return f"**{best:{fmt}} {unit}** at best ({median:{fmt}} typically)"


f_rows = ok[(ok.kernel == "blocks") & (ok.model == model) & (ok.dtype == "fp32") & (ok.threads == most)]
f_rows = f_rows.set_index("rows")
with use_threads(most):
    on_this = prose.machine(device, "fp32")

# %%
gemv_vs_read = {claims.HELD: "That is about the streaming read's rate",
                claims.NOT_HELD: f"That is {gemv[model] / rates['read']:.2f} times the streaming read's rate, so the "
                                 "later chapters price a decode step's weights at the products' own rate, not the memory's",
                claims.UNRESOLVED: "That is close to the streaming read's rate, too close to call; the later chapters "
                                   "price a decode step's weights at the products' own rate"}
rows_plain = {claims.HELD: "about as long as one, as predicted: the same weights stream once",
              claims.NOT_HELD: f"{t2.best / t1.best:.2f} times as long as one, where about the same was predicted: "
                               f"{why_short}",
              claims.UNRESOLVED: f"{t2.best / t1.best:.2f} times as long as one, too close to the prediction (about "
                                 "the same) to call"}
_rates_told = (f"On this machine ({on_this}), a streaming read moves {up_to(rates['read'], read_spread(most).low, 'GB/s')}, "
               f"and {model}'s matrix-vector products read their weights at "
               f"{up_to(gemv[model], gemv_spread.low, 'GB/s')}. "
               f"{gemv_vs_read.get(register.verdict('gemv_reaches_streaming_bandwidth'), 'They were not compared')}. ")
_g = lambda x: f"{x:,.0f}" if x >= 100 else f"{x:.3g}"  # noqa: E731  a FLOP rate's digits
_rows_told = (f"Its block matrices run up to **{_g(f_rows.gflop_s[1])} GFLOP/s** at one row and "  # fastest calls: ceilings
              f"**{_g(f_rows.gflop_s[f_rows.index.max()])} GFLOP/s** at {f_rows.index.max():,.0f} rows. ")
_two = (f"With {few} rows they took "
        f"{rows_plain.get(register.verdict('two_rows_cost_no_more'), 'an unmeasured time')}. ")
_issue = f"Issuing one operation of a decode step costs about **{us_between:.0f} us**. "
_answer = "So decode is priced at the products' reading rate, and a short prompt at the matrices' few-row rate."
opening.write(_rates_told + _rows_told + _two + _issue + _answer,
              _rates_told + _rows_told + _two + _answer,
              _rates_told + _two + _answer,
              _rates_told + _answer)

# %% [markdown]
# ## What these numbers do not show
#
# * **A quiet machine**. Other programs share the cores and the memory bus; the spreads show how much.
# * **Peak figures**. STREAM's kernels and one square product are what simple code reaches, not a datasheet's
#   peak; the chapters compare against what this machine demonstrably does.
# * **Every kernel a model runs**. Normalisation, activations and the cache's bookkeeping are priced inside
#   dispatch (the hollowed model runs them too); where that is not enough, a chapter measures one layer down.
#
# ## Takeaways
#
# * **Measure the rates the model's own kernels reach, once, before judging any pass against them.**
#
# ## Check yourself
#
# 1. Why does STREAM count a triad as three arrays' bytes, although it writes one and reads two?
#
# <details><summary>Answer</summary>
#
# Each of the three arrays crosses the memory bus once: two are read, one is written. (Write-allocate traffic,
# reading the destination line before writing it, is real but STREAM does not count it.)
# </details>
#
# 2. Suppose a matrix-vector product reached less bandwidth than a streaming read on the same machine. Which
#    number would be the least time a decode step's weights could take? And if it reached more, as it can?
#
# <details><summary>Answer</summary>
#
# The products' rate: it is what the step's own kernels take to read the weights. The streaming read would then
# say how far a better kernel could bring the step down. If the kernel is faster than the streaming read, part of
# the weights is served from a cache, not from memory; the streaming read then bounds nothing for the step, and the
# kernels' rate is still the one the step meets.
# </details>
#
# 3. Why is the fastest repeat the right statistic for a ceiling, and the median the right one for a pass?
#
# <details><summary>Answer</summary>
#
# A ceiling is what a kernel can do; interference only slows it, so the fastest repeat is the closest to it.
# A pass is what a reader will see, interference included, so the book reports its median and range.
# </details>
#
# ## Try it
#
# * Set `threads = [1]` and re-run this chapter, then chapter 3 with `configs = [("fp32", 1)]`. Chapter 0 then
#   measures one thread only, and chapter 3 prices only what chapter 0 measured. Which of chapter 3's steps move?

# %% jupyter={"source_hidden": true} tags=["answer"]
if on_gpu:
    _text = ("On a GPU the thread count does not reach the kernels: chapter 0 measures the host's one count, and "
             "chapter 3's steps and their prices should not move beyond the spread of their runs.")
elif not one:
    _text = (f"This run measured {most} thread{'s' * (most > 1)} only, so `threads = [1]` changes nothing that chapter "
             "3 reads: none of its steps or prices should move beyond the spread of their runs.")
else:
    _bytes = MODELS[model][0].with_dtype("fp32").weight_bytes  # the weights a decode step reads
    _text = ("Nothing should move beyond the spread of its runs: its measured "
             "steps never read chapter 0, and their prices come from the same one-thread rows as before. Chapter 3 "
             "already runs one thread beside all of them, and that is where one thread's cost shows: here "
             f"{model}'s weights streamed at {gemv_1:.1f} GB/s on one thread and {gemv[model]:.1f} GB/s on {most}, so "
             f"reading them once, as every decode step does, takes {prose.ms(_bytes / (gemv_1 * 1e9))} on one thread "
             f"and {prose.ms(_bytes / (gemv[model] * 1e9))} on {most}. A price that moves by more than the spreads says "
             "the machine's speed drifted between the two runs of chapter 0.")
display(Markdown(f"<details><summary>What to expect</summary>\n\n{_text}\n</details>"))

# %% [markdown]
# * Set `dtypes = ["fp32", "bf16", "fp16"]`: does this CPU have instructions for each (the table's *instructions_for_dtype* column), and does each one's square product run faster than fp32's?

# %% jupyter={"source_hidden": true} tags=["answer"]
from lib.device import DTYPES as _DTYPES

_has = {dt: machine.hardware_support(device, _DTYPES[dt]) for dt in ("fp32", "bf16", "fp16")}
_with, _without = [dt for dt, s in _has.items() if s], [dt for dt, s in _has.items() if not s]
_fp32 = ceilings.square_flops("fp32", most) / 1e9
if on_gpu:
    _text = (f"On a GPU fp16 is measured already (the table of square products above): the compute capability decides, "
             f"and this GPU has matrix instructions for {', '.join(_with)}"
             + (f" but not for {', '.join(_without)}." if _without else "."))
else:
    _text = (f"This CPU's flags (`lib.machine.hardware_support` reads them) give matrix instructions for "
             f"{prose.and_list(_with)}" + (f" and none for {prose.and_list(_without)}" if _without else "") + ", so "
             f"*instructions_for_dtype* should read True for {prose.and_list(_with)}"
             + (f" and False for {prose.and_list(_without)}, whose square product should then fall far below "
                f"fp32's {_fp32:.0f} GFLOP/s (a slow kernel, without instructions)" if _without else "") + ". "
             + "".join(f"Here {dt}'s square product ran {ceilings.square_flops(dt, most) / 1e9:.0f} GFLOP/s against "
                       f"fp32's {_fp32:.0f}. " for dt in ceilings.dtypes() if dt != "fp32")
             + "A dtype with instructions whose rate still falls below fp32's shows that PyTorch's kernel for it does "
               "not use them, which the flags cannot tell; a CPU that cannot run a dtype at all gets one row saying "
               "`unsupported` instead.")
display(Markdown(f"<details><summary>What to expect</summary>\n\n{_text}\n</details>"))

# %% [markdown]
# ## Key terms
#
# [Streaming read](glossary.md#streaming-read), [Kernel rate](glossary.md#kernel-rate), [Matrix rate F(M)](glossary.md#matrix-rate-fm), [Dispatch](glossary.md#dispatch), [Verdicts](glossary.md#verdicts). Each links to the book's glossary, which says how the book measures it.

# %% [markdown]
# ## Evidence in this chapter
#
# Each claim this chapter made, what was predicted, what this run measured, the verdict, and the data it came
# from. A verdict here is decided on a range one lucky or one slow call cannot fake. That range is a kernel's time
# or rate from its fastest call to its median one, or the 95 % interval of a median where calls were repeated as
# runs (the fold under each finding says which; `lib.claims` says how). A claim *held* when all of the range agrees
# with the prediction, *did not hold* when none of it does, and is *not resolved* when the range crosses the line. `data/00_machine/claims.csv` holds the same rows, and the book's status page counts them.

# %%
results.table(register.frame(), "claims")
display(prose.table(register.evidence()))
print(register.summary())
results.finish()  # the run is whole: its tables and figures replace the last run's together
