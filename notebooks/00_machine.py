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
# # 0. This machine: the ceilings every chapter measures against
#
# Every later chapter compares a measured time with what arithmetic allows: bytes over the memory bandwidth,
# FLOPs over the matrix rate, and, for a small model, the cost of issuing its operations. Those ceilings are
# properties of the machine, so they are measured once, here, and every chapter reads this chapter's table
# (`lib.machine.load_ceilings`). Measuring them once means one prefill point cannot be "84 %" of peak in one
# chapter and "89 %" in another because the machine was measured twice.
#
# Four measurements, each warmed up, synchronised with the device, repeated, and reported as the median with
# the lowest and highest repeat (`lib.machine` holds the code):
#
# * **streaming bandwidth**, as STREAM measures it: a read (the sum of an array), a copy and a triad
#   (`a = b + s c`) over arrays far larger than any cache, bytes counted per kernel;
# * **the model's own matrix-vector rate**: every matmul weight of GPT-2 small multiplied by one row, as a
#   decode step does, weight bytes over time;
# * **the matrix rate**: a large square product on random data, `2 n^3` FLOPs over time;
# * **the launch floor**: a decode step of a GPT-2 with the same 12 layers and operations but a width of 64,
#   whose bytes and FLOPs are negligible.

# %% tags=["parameters"]
quick = False
device = "auto"
dtypes = ["fp32", "bf16"]   # on a GPU fp16 is added
threads = None              # CPU thread counts to measure; None: all threads and 1

# %%
import matplotlib.pyplot as plt
import pandas as pd
import torch
from IPython.display import Markdown, display

from lib import claims, machine, params, timing
from lib.device import describe_environment, resolve_device
from lib.results import Results

P = params.check(globals(), {
    "device": params.device(),
    "dtypes": params.dtype_list(),
    "threads": params.int_list(min=1, allow_none=True),
}, quick=quick, chapter="00_machine")
dev = resolve_device(device)
on_gpu = dev.type == "cuda"
if on_gpu and "fp16" not in dtypes:
    dtypes = [*dtypes, "fp16"]
all_threads = torch.get_num_threads()
threads = threads or sorted({all_threads, 1}, reverse=True)
results = Results("00_machine", quick=quick, device=dev, model="GPT-2 small (shape only)")
register = claims.Claims()
pd.Series({**describe_environment(dev), "CPU flags (matrix-relevant)":
           " ".join(sorted(f for f in machine.cpu_flags() if f.startswith(("avx", "amx", "fma")))) or "none read"}
          ).to_frame("this run")

# %% [markdown]
# ## The measurements
#
# One table, one row per dtype, thread count and kernel. `bandwidth_gb_s` is bytes per call over the median
# time (low and high from the slowest and fastest repeat); `gflop_s` likewise for the matrix product. On a GPU
# the thread count does not apply and is recorded as 0.

# %%
ceilings_table = machine.measure_ceilings(dev, dtypes, threads, quick=quick)
results.table(ceilings_table, "ceilings")
ceilings = machine.Ceilings(ceilings_table)
shown = ceilings_table[ceilings_table.status == "ok"]
shown[["dtype", "threads", "kernel", "median_s", "bandwidth_gb_s", "bandwidth_gb_s_low", "bandwidth_gb_s_high",
       "gflop_s", "hardware_support"]].round(4)

# %%
skipped = ceilings_table[ceilings_table.status != "ok"]
for row in skipped.itertuples():
    print(f"{row.dtype}: {row.status}")
measured_dtypes = [d for d in dtypes if d in set(shown.dtype)]
most = max(ceilings.threads("fp32"))
fp32 = shown[(shown.dtype == "fp32") & (shown.threads == most)].set_index("kernel")
read, matvec = fp32.loc["read"], fp32.loc["matvec"]
hw = ceilings.hardware("fp32", most)
where = "the GPU" if on_gpu else f"{most} thread{'s' if most > 1 else ''}"

# %% [markdown]
# ## Streaming bandwidth against the model's own matrix-vector rate
#
# A decode step reads every weight once, so its floor is the weights' bytes over a bandwidth. Which
# bandwidth? STREAM's kernels give what the memory system delivers to a simple loop over all threads; the
# model's matrix-vector products are what a decode step's kernels actually reach. The two need not agree: a
# matrix-vector kernel may not use every thread, or may not stream as well as a plain loop.

# %%
gap = read.bandwidth_gb_s / matvec.bandwidth_gb_s
display(Markdown(register.decide(
    "gemv_reaches_streaming_bandwidth",
    "The model's matrix-vector products reach the streaming read bandwidth (within 1.25x).",
    claims.within(matvec.bandwidth_gb_s, read.bandwidth_gb_s, 1.25),
    predicted=f"{read.bandwidth_gb_s:.1f} GB/s (streaming read)",
    measured=f"{matvec.bandwidth_gb_s:.1f} GB/s (GEMV)",
    evidence=f"fp32, {where}",
    if_held=f"with {where}, GPT-2's matrix-vector products read their weights at "
            f"**{matvec.bandwidth_gb_s:.1f} GB/s**, close to the streaming read's **{read.bandwidth_gb_s:.1f} GB/s**: "
            "a decode step's floor is the same whichever of the two you divide by.",
    if_not=f"with {where}, GPT-2's matrix-vector products read their weights at **{matvec.bandwidth_gb_s:.1f} GB/s**, "
           f"while a streaming read reaches **{read.bandwidth_gb_s:.1f} GB/s** ({gap:.2f} times as much). The machine "
           "can deliver more than the model's kernels draw from it, so chapter 3 explains a decode step against both.")))

# %% [markdown]
# ## Does a second thread help a memory-bound kernel?
#
# One core can keep only so many cache-line requests in flight; a streaming read over all cores usually moves
# more bytes per second than over one. Whether the model's matrix-vector kernel uses the extra cores is a
# separate question, answered by the same table.

# %%
if on_gpu or len(ceilings.threads("fp32")) < 2:
    display(Markdown(register.decide(
        "threads_raise_streaming_bandwidth", "More threads raise the streaming bandwidth.", None,
        if_held="", if_not="", if_not_measured="one thread count only (a GPU, or `threads` set to one value).")))
else:
    one = shown[(shown.dtype == "fp32") & (shown.threads == 1)].set_index("kernel")
    gain_read = read.bandwidth_gb_s / one.loc["read"].bandwidth_gb_s
    gain_mv = matvec.bandwidth_gb_s / one.loc["matvec"].bandwidth_gb_s
    overlap = claims.ranges_overlap(one.loc["read"].bandwidth_gb_s_low, one.loc["read"].bandwidth_gb_s_high,
                                    read.bandwidth_gb_s_low, read.bandwidth_gb_s_high)
    display(Markdown(register.decide(
        "threads_raise_streaming_bandwidth",
        f"{most} threads stream more bytes per second than 1 (beyond the spread of the repeats).",
        not overlap and gain_read > 1,
        predicted="more than 1x", measured=f"{gain_read:.2f}x (read), {gain_mv:.2f}x (GEMV)",
        evidence="fp32 read and matvec kernels, 1 thread against all",
        if_held=f"the streaming read goes from {one.loc['read'].bandwidth_gb_s:.1f} to **{read.bandwidth_gb_s:.1f} GB/s** "
                f"({gain_read:.2f}x); the model's matrix-vector rate goes from {one.loc['matvec'].bandwidth_gb_s:.1f} to "
                f"{matvec.bandwidth_gb_s:.1f} GB/s ({gain_mv:.2f}x).",
        if_not=f"the streaming read moves {one.loc['read'].bandwidth_gb_s:.1f} GB/s on 1 thread and "
               f"{read.bandwidth_gb_s:.1f} GB/s on {most} ({gain_read:.2f}x, within the repeats' spread): one core "
               f"already draws what this memory system gives, or the other core was busy. The matrix-vector rate: "
               f"{gain_mv:.2f}x.")))

# %%
fig, ax = plt.subplots(figsize=(9, 4.2))
bars = shown[shown.kernel.isin(["read", "copy", "triad", "matvec"])]
labels = [f"{r.dtype}\n{'GPU' if on_gpu else f'{r.threads} thr'}" for r in bars.drop_duplicates(["dtype", "threads"]).itertuples()]
groups = list(bars.groupby(["dtype", "threads"], sort=False))
width = 0.2
for k, kernel in enumerate(["read", "copy", "triad", "matvec"]):
    values = [g[g.kernel == kernel] for _, g in groups]
    mid = [float(v.bandwidth_gb_s.iloc[0]) for v in values]
    lo = [m - float(v.bandwidth_gb_s_low.iloc[0]) for m, v in zip(mid, values)]
    hi = [float(v.bandwidth_gb_s_high.iloc[0]) - m for m, v in zip(mid, values)]
    ax.bar([i + (k - 1.5) * width for i in range(len(groups))], mid, width, yerr=[lo, hi], capsize=3, label=kernel)
ax.set_xticks(range(len(groups)), labels)
ax.set_ylabel("bandwidth (GB/s), median with range")
best = bars.loc[bars.bandwidth_gb_s.idxmax()]
ax.set_title(f"Highest: {best.kernel} at {best.bandwidth_gb_s:.1f} GB/s ({best.dtype}); "
             f"GPT-2's GEMV in fp32 on {where}: {matvec.bandwidth_gb_s:.1f} GB/s", fontsize=10)
ax.legend(fontsize=8)
ax.grid(True, axis="y", alpha=0.3)
results.figure(fig, "bandwidth")
plt.show()

# %% [markdown]
# ## The matrix rate, and what limits it in each dtype
#
# A large matrix product reuses every element it loads many times, so it runs at the arithmetic units' rate.
# That holds only when the hardware has instructions for the dtype: a CPU without bf16 instructions converts
# every element and runs a slow fallback kernel, whose rate says nothing about the hardware's arithmetic. The
# table records whether the dtype has hardware support here (from the CPU's feature flags or the GPU's
# compute capability).

# %%
rates = shown[shown.kernel == "matmul"][["dtype", "threads", "gflop_s", "gflop_s_low", "gflop_s_high",
                                         "hardware_support"]].reset_index(drop=True)
rates["limited_by"] = ["the arithmetic units" if s else "a slow kernel (no hardware support)"
                       for s in rates.hardware_support]
display(rates.round(1))
display(Markdown(
    f"This machine's **balance point** in fp32 on {where}: {hw.flops / 1e9:.1f} GFLOP/s over "
    f"{hw.bandwidth / 1e9:.1f} GB/s (streaming read) is **{hw.ridge:.1f} FLOP per byte**. A pass doing fewer "
    "FLOPs per byte it moves is memory-bound here; more, compute-bound."))

# %% [markdown]
# ## The timer's own cost
#
# Every chapter's timings include the harness: two synchronised clock reads around the timed call, and, in a
# decode loop, reading the chosen token back to the host. Measured here against the shortest step the book
# times (the launch floor of one decode step):

# %%
cost = timing.overhead(dev)
launch_s = ceilings.launch_s("fp32", most)
share = (cost["clock"] + cost["readback"]) / launch_s
overhead_table = pd.DataFrame([dict(part="clock reads", median_us=cost["clock"] * 1e6),
                               dict(part="token read-back", median_us=cost["readback"] * 1e6),
                               dict(part="shortest step timed (launch floor)", median_us=launch_s * 1e6)])
results.table(overhead_table, "timer_overhead")
display(overhead_table.round(2))
display(Markdown(register.decide(
    "timer_under_one_percent", "The harness adds under 1 % to the shortest step it times.", share < 0.01,
    predicted="under 1 %", measured=f"{share:.3%}", evidence=f"fp32 launch floor, {where}",
    if_held=f"clock reads and the token read-back cost **{(cost['clock'] + cost['readback']) * 1e6:.1f} us**, "
            f"{share:.3%} of the {launch_s * 1e3:.2f} ms launch floor: the timer does not distort the steps.",
    if_not=f"clock reads and the token read-back cost **{(cost['clock'] + cost['readback']) * 1e6:.1f} us**, "
           f"{share:.1%} of the {launch_s * 1e3:.2f} ms launch floor: the shortest steps read that much long.")))

# %%
launch = shown[shown.kernel == "launch"].reset_index(drop=True)
launch = launch.assign(launch_ms=launch.median_s * 1e3,
                       range_ms=[timing.span(r.low_s * 1e3, r.high_s * 1e3, ".2f") for r in launch.itertuples()])
display(launch[["dtype", "threads", "launch_ms", "range_ms"]].round(2))
results.table(register.frame(), "claims")
print(register.summary())

# %% [markdown]
# ## What these numbers do not show
#
# * **A quiet machine.** Other programs share the cores and the memory bus; the ranges show how much.
# * **Peak figures.** STREAM's kernels and one square product are what simple code reaches, not a datasheet's
#   peak; the chapters compare against what this machine demonstrably does.
# * **Every kernel a model runs.** Attention, normalisation and the cache's bookkeeping have kernels of their
#   own; chapter 3 measures what they add.
#
# ## Takeaways
#
# * **Measure the ceilings once, with simple kernels, before judging any model against them.**
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
# 2. A matrix-vector product reaches less bandwidth than a streaming read on the same machine. Which number is
#    a decode step's floor?
#
# <details><summary>Answer</summary>
#
# Both are floors of different things: the streaming read is what the memory can deliver, the matrix-vector
# rate what the model's kernels take. A step near the second is limited by its kernels, and a better kernel
# could move it toward the first.
# </details>
#
# ## Try it
#
# * Set `threads = [1]` and re-run chapter 3: which of its steps move?
# * Set `dtypes = ["fp32", "bf16", "fp16"]`: does this CPU have instructions for each (see `limited_by`)?
