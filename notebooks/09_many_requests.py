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
# # 9. Many requests: reuse the shared prefix, separate the phases, predict the queue
#
# Chapters 5 and 7 showed what sharing a machine costs: a long prefill stalls every stream that is decoding,
# and chunking trades that stall for a later first token. Serving systems answer with three more ideas, and
# each follows from numbers this book already measures:
#
# 1. **Reuse.** Requests that start with the same system prompt need not prefill it again: a cached prefix turns
#    most of a prefill into a cache read. In-process (transformers' prefill-once-and-copy recipe) and in two
#    engines' prefix caches, predicted from the cost model.
# 2. **Separation.** Prefill on one worker, decode on another, the cache handed over between them (DistServe,
#    Splitwise, Mooncake). In miniature here: two processes, one core each, the cache passed through shared
#    memory, against one worker with and without chapter 5's chunking.
# 3. **Prediction.** A scheduler's latencies follow from what it puts in each step and what a step costs. A
#    replay of chapter 7's random arrivals through two schedulers, every step priced by the cost model, set
#    beside what chapter 7 measured on the engines.
#
# Set `base_url` to measure a deployment of your own instead (one server, or the router in front of separate
# prefill and decode deployments): the reuse table and chapter 5's stall are measured against it.

# %% [markdown]
# **After this chapter you can**
#
# * compute what reusing a shared prefix's cache saves in TTFT, and what handing a cache over costs.
# * compare a prefill worker and a decode worker with chunked prefill on one worker, by TTFT and by the worst gap.
# * predict a queue's wait from the arrival rate and the service time, and check it against replayed arrivals.
# * say what changes beyond one machine, with the real engines.

# %% tags=["parameters"]
quick = False
base_url = None                 # e.g. "http://127.0.0.1:8000": measure that deployment instead of local engines
engines = ["transformers", "vllm"]  # local engines to start (vLLM only where .venv-vllm exists)
prefix_tokens = 480             # the shared system prompt, in tokens
short_prefix_tokens = 100       # a shared system prompt shorter than vLLM's block on a CPU (128 tokens)
questions = 4                   # requests per group, each with a question of its own
runs = 3                        # in-process repeats of each request
separation_model = "gpt2-small"  # chapter 5's model
b_prompt_len = 1000             # chapter 5's newcomer
a_tokens = 120                  # A's tokens: long enough to outlast B's prefill on one core
arrival_step = 10
chunk = None                    # one worker's chunk; None: chapter 5's measured best
separation_runs = 3
threads = None                  # compute threads of the in-process paths and engines; None: torch's default
start_timeout_s = 1200          # a first vLLM start compiles for minutes
server_budget_s = 900.0         # seconds of requests any one server may keep the chapter waiting (lib.client.ServerBudget)

# %%
import os
import re

from lib import params
from lib.machine import MODELS

P = params.check(globals(), {
    "base_url": params.text(allow_none=True),
    "engines": params.listof(params.choice(["transformers", "vllm"]), min_items=0, quick=["transformers"]),
    "prefix_tokens": params.integer(min=16, max=1500, quick=300),
    "short_prefix_tokens": params.integer(min=8, max=1500, quick=40),
    "questions": params.integer(min=2, max=16, quick=2), "runs": params.integer(min=1, max=10, quick=2),
    "separation_model": params.choice([m for m in MODELS if m != "smollm2-135m"], quick="tiny-gpt2"),
    "b_prompt_len": params.integer(min=16, max=1000, quick=256),
    "a_tokens": params.integer(min=3, max=400, quick=24), "arrival_step": params.integer(min=1, max=399, quick=4),
    "chunk": params.integer(min=1, max=1000, allow_none=True),
    "separation_runs": params.integer(min=1, max=10, quick=1),
    "threads": params.integer(min=1, max=os.cpu_count() or 1, allow_none=True),
    "start_timeout_s": params.number(above=0, max=1800, quick=300),
    "server_budget_s": params.number(min=10, max=7200, quick=120),
}, quick=quick, chapter="09_many_requests")
if base_url is not None and not re.fullmatch(r"http://[A-Za-z0-9.\-\[\]:]+(/\S*)?", base_url.strip()):
    raise ValueError(f"parameter base_url={base_url!r} is not valid; expected an http:// address such as "
                     f"http://127.0.0.1:8000, or None")
if arrival_step >= a_tokens:
    raise ValueError(f"B must arrive while A decodes: arrival_step ({arrival_step}) must be below a_tokens ({a_tokens})")
if short_prefix_tokens >= prefix_tokens:
    raise ValueError(f"short_prefix_tokens ({short_prefix_tokens}) must be below prefix_tokens ({prefix_tokens})")

# %%
import functools
import json

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from IPython.display import Markdown, display
from transformers.generation.configuration_utils import ContinuousBatchingConfig

from lib import (claims, client, costmodel, machine, metrics, objectives, phases, prose, replay, reuse, schedule,
                 separation, timing)
from lib.claims import Spread
from lib.device import describe_environment
from lib.engines import compute_threads, transformers_engine, vllm_engine, vllm_unavailable
from lib.models import SMOLLM2_VERSION, cache_dir, load_model, random_prompt
from lib.paths import REPO_ROOT, output_root
from lib.progress import progress
from lib.prose import show
from lib.results import Results, load_reference, load_table
from lib.stall import stall_experiment

MODEL = "smollm2-135m"
if threads:
    torch.set_num_threads(threads)
n_threads = torch.get_num_threads()
cpu = torch.device("cpu")
lm = load_model(MODEL, cpu, torch.float32)
model_dir = cache_dir() / f"smollm2-135m-instruct-{SMOLLM2_VERSION}"
served_names = ["smollm2", MODEL, "SmolLM2-135M-Instruct", str(model_dir)]  # what a deployment may call SmolLM2
ceilings = machine.load_ceilings(cpu, quick=quick)
results = Results("09_many_requests", params=P, quick=quick, device=cpu, dtype=torch.float32, model=MODEL)
register = claims.Claims()


def cost_model(model: str, n: int) -> costmodel.CostModel | None:
    """The cost model of ``model`` in fp32 on ``n`` threads, or None where chapter 0 did not measure it."""
    try:
        ceilings.weight_rate(model, "fp32", n)
    except ValueError:  # chapter 0's message names what it has
        return None
    return costmodel.CostModel(ceilings, model, MODELS[model][0].with_dtype("fp32"), "fp32", n)


cost = cost_model(MODEL, n_threads)
pacer = machine.Pacer(ceilings, MODEL, "fp32", n_threads, cpu)  # the machine's speed, watched
pacer.check("before the first experiment")
pd.Series(describe_environment(cpu, torch.float32, MODEL)).to_frame("this run")

# %% [markdown]
# ## What this run found

# %%
opening = prose.Opening()

# %% [markdown]
# ## 1. Reuse: a shared system prompt, prefilled once
#
# Every request below is a chat whose system message is the same `prefix_tokens`-token text and whose user
# message is a short question of its own. Prefilling the whole prompt costs the cost model's prefill of all its
# tokens. With the prefix's cache kept, a request prefills only its own tokens, attending over the cached ones,
# plus a copy of the kept cache (so that it stays as it was for the next request).
#
# The prompts first: a system text cut to exactly `prefix_tokens` tokens (and a short one of `short_prefix_tokens`),
# with the chat template around it; the tokens the requests share are counted from their token ids.

# %%
policy = ("You answer questions for the readers of a book about how language models are served. Be brief and "
          "exact, give numbers with their units, say which machine a measurement came from, and say so when a "
          "question cannot be answered from what was measured. ")
filler = lm.tokenizer(policy * (prefix_tokens // 30 + 2), add_special_tokens=False).input_ids
system_text = lm.tokenizer.decode(filler[:prefix_tokens])
short_text = lm.tokenizer.decode(filler[:short_prefix_tokens])
asked = ["Why does a long prompt delay the first token?", "What limits the speed of one decode step?",
         "Why does batching help decode more than prefill?", "What does the KV cache hold?",
         "Why is a second request cheaper with a cached prefix?", "What is a token budget?",
         "Why does chunking delay the newcomer?", "What does the cache copy cost?"] * 2
asked = asked[:questions]


def chat(system: str, question: str) -> list[dict]:
    return [{"role": "system", "content": system}, {"role": "user", "content": question}]


def ids_of(messages) -> torch.Tensor:
    return lm.tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                            return_dict=True)["input_ids"]


prompts = [ids_of(chat(system_text, q)) for q in asked]
shared = min(reuse.shared_prefix(prompts[0][0].tolist(), p[0].tolist()) for p in prompts[1:])
short_prompts = [ids_of(chat(short_text, q)) for q in asked]
short_shared = min(reuse.shared_prefix(short_prompts[0][0].tolist(), p[0].tolist()) for p in short_prompts[1:])
prose.shown(pd.DataFrame([dict(prompt="long system prompt", shared_tokens=shared, prompt_tokens=[p.shape[1] for p in prompts]),
              dict(prompt="short system prompt", shared_tokens=short_shared,
                   prompt_tokens=[p.shape[1] for p in short_prompts])]))

# %% [markdown]
# What chapter 0's ceilings say of this machine, before anything is timed here.

# %%
if cost is not None:
    copy_gbs = ceilings.stream_bandwidth("fp32", n_threads, "copy") / 1e9 if n_threads in ceilings.threads("fp32") else None
    own = int(np.median([p.shape[1] for p in prompts])) - shared  # a request's own tokens, after the shared ones
    show(f"On {n_threads} thread{'s' * (n_threads != 1)} the cost model prices a cold prefill of a whole prompt "
         f"({shared + own} tokens) at **{prose.ms(cost.prefill(shared + own).best)}**, and a request's own {own} tokens "
         f"after the {shared} shared ones at **{prose.ms(cost.prefill(own, past=shared).best)}**; a token's fp32 cache holds "
         f"{MODELS[MODEL][0].with_dtype('fp32').kv_bytes_per_token / 1024:.0f} KiB"
         + (f", which chapter 0 copies at **{copy_gbs:.1f} GB/s**." if copy_gbs else "."))
else:
    print(f"chapter 0 measured no ceilings for {MODEL} on {n_threads} threads: nothing here is priced")

# %% [markdown] tags=["predict"]
# **Predict first.** A request that reuses the prefix still prefills its own question (its own tokens, with the
# chat template's markers, just priced) over the cached ones, and first copies the kept cache of the shared tokens
# (read once and written once). How many milliseconds sooner do
# you expect its first token to come than a cold request's?

# %% [markdown]
# <details><summary>The book's prediction (open it once you have written yours)</summary>
#
# The saving is the prefix's part of the prefill, less the suffix's extra attention over it
# and the copy.
#
# </details>
#
# The in-process recipe, timed below.

# %%
display(prose.source(reuse.first_token_reusing))

# %% [markdown]
# Each request's first token, cold (its whole prompt prefilled) and reusing the prefix's cache, taking turns
# `runs` times after one warm-up of each; the two must choose the same first token.

# %%
kept = reuse.prefix_cache(lm, prompts[0][:, :shared])
reuse.first_token_cold(lm, prompts[0]), reuse.first_token_reusing(lm, kept, prompts[0][:, shared:])  # warm-up
rows = []
for run in progress(range(runs), desc="each question cold and reusing the prefix, run by run"):
    for q, ids in enumerate(prompts):
        cold_token, cold_s = reuse.first_token_cold(lm, ids)
        warm_token, warm_s = reuse.first_token_reusing(lm, kept, ids[:, shared:])
        rows.append(dict(run=run + 1, question=q, prompt_tokens=ids.shape[1], cold_ms=cold_s * 1e3,
                         reused_ms=warm_s * 1e3, same_token=cold_token == warm_token))
in_process = pd.DataFrame(rows)
claims.invariant(bool(in_process.same_token.all()), "a reused prefix chose a different first token than a cold prefill")
_ = results.table(in_process, "reuse_in_process_runs")

# %% [markdown]
# The prediction, term by term from chapter 0's ceilings: the cold prefill of a whole prompt, and the reused
# path's copy of the kept cache (its bytes read and written at chapter 0's copy rate) plus the prefill of the
# request's own tokens after `shared` cached ones:

# %%
suffix = int(np.median([p.shape[1] for p in prompts])) - shared
kv = MODELS[MODEL][0].with_dtype("fp32").kv_bytes_per_token
copy_rate = ceilings.stream_bandwidth("fp32", n_threads, "copy") if n_threads in ceilings.threads("fp32") else None
if cost is not None and copy_rate:
    cold_p, warm_p = cost.prefill(shared + suffix), cost.prefill(suffix, past=shared)
    copy_s = 2 * shared * kv / copy_rate
    predicted_saving = Spread(cold_p.best - warm_p.best - copy_s, cold_p.best - warm_p.best - copy_s,
                              max(cold_p.median - warm_p.median - copy_s, cold_p.best - warm_p.best - copy_s))
    display(pd.DataFrame([dict(path="cold", tokens=shared + suffix, predicted_ms=cold_p.best * 1e3),
                          dict(path="reused: copy", tokens=shared, predicted_ms=copy_s * 1e3),
                          dict(path="reused: prefill", tokens=suffix, predicted_ms=warm_p.best * 1e3)]).round(1))
    why_not = ""
else:
    predicted_saving, why_not = None, (f"chapter 0 measured no ceilings for {MODEL} on {n_threads} threads, so "
                                       "nothing here is priced")
per_q = in_process.groupby("question")[["cold_ms", "reused_ms"]].median()
saving = Spread.of(per_q.cold_ms - per_q.reused_ms)
cold, warm = Spread.of(in_process.cold_ms), Spread.of(in_process.reused_ms)
shown = saving if saving.mid >= 0 else saving * -1  # a saving, or the time reuse lost
statement = ("In-process, reusing the shared prefix's cache saves what the cost model predicts (the prefix's "
             "prefill less the copy and the suffix's attention over it), within the tolerance for a predicted time.")
register.claim("reuse_saves_the_prefix_prefill", statement)
if predicted_saving is None:
    verdict = None
elif predicted_saving.low > 0 and saving.low > 0:
    verdict = claims.within(saving / 1e3, predicted_saving, claims.PREDICTED_TIME)
elif predicted_saving.high <= 0:  # priced as no saving (the copy costs what the prefill saves): a saving refutes it
    verdict = claims.NOT_HELD if saving.low > 0 else claims.HELD if saving.high <= 0 else claims.UNRESOLVED
else:
    verdict = claims.NOT_HELD

# %%
predicted = (f"{predicted_saving.low * 1e3:.0f} ms ({predicted_saving.high * 1e3:.0f} at chapter 0's median calls; "
             "allowed " + prose.span(*(x * 1e3 for x in claims.allowed(predicted_saving, claims.PREDICTED_TIME)),
                                      ".0f", "ms")
             + f", the fastest calls' price over the tolerance of {claims.PREDICTED_TIME:g} to the median calls' times it)"
             if predicted_saving is not None and predicted_saving.low > 0 else
             f"{predicted_saving.mid * 1e3:.0f} ms (no saving: the copy costs what the prefix's prefill saves)"
             if predicted_saving is not None else "")
verdict = register.record(
    "reuse_saves_the_prefix_prefill", verdict, predicted=predicted, measured=f"{saving.mid:.0f} ms",
    evidence=f"{questions} questions x {runs} run{'s' * (runs != 1)}; {shared} shared tokens, about {suffix} of each "
             f"request's own; {n_threads} thread{'s' * (n_threads != 1)}")
why = why_not or (f"One layer down, the cold prefill took {cold.mid / (cold_p.best * 1e3):.2f}x its price and the "
                  f"reused path {warm.mid / ((warm_p.best + copy_s) * 1e3):.2f}x its own (copy and prefill over the "
                  "cached prefix). The saving is their difference, so it strays by neither factor alone"
                  + (f" ({saving.mid / (predicted_saving.low * 1e3):.2f}x here)"
                     if predicted_saving is not None and predicted_saving.low > 0 else "") + ".")
came = (f"came {prose.span(shown.low, shown.high, '.0f', 'ms')} {'sooner' if saving.mid >= 0 else 'later'} with the "
        f"prefix reused ({cold.mid:.0f} ms cold against {warm.mid:.0f} ms reused)")
saving_priced = f"{predicted_saving.low * 1e3:,.0f} ms" if predicted_saving is not None else ""  # the fastest calls' price
show(claims.pick(
    verdict, held=f"The first token came **{prose.span(shown.low, shown.high, '.0f', 'ms')} sooner** ({cold.mid:.0f} "
                  f"ms cold against {warm.mid:.0f} ms reused), about the {saving_priced} predicted: the time saved is the "
                  "prefix's prefill, as priced.",
    not_held=f"The first token {came}, not the {saving_priced} predicted. {why}",
    unresolved=f"The first token {came}, against {saving_priced} predicted: close, but its runs spread too far for this run "
               "to say whether the saving is as priced; more runs would decide.",
    not_measured=f"{statement} This run does not decide it: the first token {came}, and nothing here prices it: {why}"),
    how=f"Decided on the saving question by question and run by run (the 95 % interval of its median), against the "
        f"prediction: {predicted}." if predicted_saving is not None else None)

# %% [markdown]
# ### The engines' prefix caches
#
# An engine keeps the cache of every prompt it served, in blocks. A new prompt that starts with the same tokens
# reuses the matching **whole** blocks (vLLM's automatic prefix caching; `transformers serve`'s continuous batching
# shares pages the same way). Of the two, vLLM counts the tokens it reuses (`vllm:prefix_cache_hits`).
# Each engine's block, and what the cost model prices the long prompt's prefill at on the cores each engine
# computes on: cold, and with each whole number of its blocks already cached (the rest prefilled, attending over
# them).

# %%
long_prompt = int(prompts[0].shape[1])
stated_block = {"transformers serve": ContinuousBatchingConfig().page_size, "vLLM": 128}  # each engine's default


def priced_at_blocks(name: str) -> str:
    """The long prompt's prefill on engine ``name``'s cores, cold and after each whole number of its blocks."""
    model, block = cost_model(MODEL, compute_threads(name, n_threads)), stated_block[name]
    after = [f"after {k} cached, the other {long_prompt - k} tokens {prose.ms(model.prefill(long_prompt - k, past=k).best)}"
             for k in range(block, long_prompt, block)]
    return ", ".join([f"cold {prose.ms(model.prefill(long_prompt).best)}", *after])


show(f"The long prompt is {long_prompt} tokens, of which {shared} are shared. "
     + " ".join(f"{name} computes on {compute_threads(name, n_threads)} of this machine's {n_threads} cores and keeps "
               f"its cache in blocks of {stated_block[name]} tokens (its default). Its prefill of the long prompt "
               f"there is priced {priced_at_blocks(name)}."
               for name in ("transformers serve", "vLLM") if cost_model(MODEL, compute_threads(name, n_threads)))
     if any(cost_model(MODEL, compute_threads(n, n_threads)) for n in ("transformers serve", "vLLM")) else
     f"chapter 0 measured no ceilings for {MODEL} on the engines' cores: nothing here is priced")

# %% [markdown] tags=["predict"]
# **Predict first.** The long system prompt's requests share the number of tokens the table of prompts above
# counts, the short one's far fewer. How many tokens do you expect vLLM's counter to count as reused for a request
# of each? And against a prompt of the same length with nothing to reuse (the long system prompt behind its own
# request number), about how many milliseconds sooner should a request with the long prompt cached reach its first
# token through each engine?

# %% [markdown]
# <details><summary>The book's prediction (open it once you have written yours)</summary>
#
# A prefix shorter than one block is never reused, and of a longer one only its whole blocks
# are; vLLM's own counters should count exactly that.
#
# </details>
#
# Each engine gets three groups of requests, taking turns. In **unique**, every system prompt starts with its own
# request number, so nothing can be reused (the prefix cache in effect off, without a second engine start).
# **Shared** has the long system prompt and **short** the short one, each served once before. Every request asks for two tokens; TTFT is what
# changes.

# %%
vllm_missing = vllm_unavailable()
tf_page = ContinuousBatchingConfig().page_size  # transformers serve's pages of KV cache, in tokens (its default)
if base_url:
    client.check_reachable(base_url)
    wanted = {"server": None}
    served_id = client.require_model(base_url, ["smollm2", MODEL, "SmolLM2-135M-Instruct", str(model_dir)])  # else one line
    print(f"measuring {base_url} (serving {served_id}); no local engine is started")
else:
    wanted = {"transformers serve": lambda: transformers_engine(
        model_dir, max_batch_tokens=512, env={"OMP_NUM_THREADS": str(n_threads)}, start_timeout_s=start_timeout_s)
        } if "transformers" in engines else {}
    if "vllm" in engines and vllm_missing:
        print(vllm_missing + "; its rows are skipped.")
    elif "vllm" in engines:
        wanted["vLLM"] = lambda: vllm_engine(model_dir, prefix_caching=True, max_num_batched_tokens=2048,
                                             threads=threads, start_timeout_s=start_timeout_s)
if not wanted:
    print("no engine is measured here (engines is empty): only the in-process rows")


def block_size(url: str, name: str) -> int | None:
    """The engine's cache block in tokens: vLLM states it in its cache_config_info metric; transformers serve
    uses its page size."""
    if name.startswith("transformers"):
        return tf_page
    status, body = client.http_get(url.rstrip("/") + "/metrics")
    found = re.search(r'cache_config_info\{[^}]*block_size="(\d+)"', body.decode(errors="replace")) if status == 200 else None
    return int(found.group(1)) if found else None


def hits(before: dict, after: dict) -> float:
    key = "vllm:prefix_cache_hits_total"
    return after[key] - before.get(key, 0.0) if key in after else np.nan


FEWER = "questions, prefix_tokens, a_tokens, b_prompt_len"
ahead = dict(requests=1 + 3 * questions + 2 * bool(base_url),  # after the first warm-up, one after another
             tokens=2 * (1 + 3 * questions) + (a_tokens + 1) * bool(base_url))
engine_rows, live, server_budgets = [], {}, {}

# %%
try:
    for name, make in wanted.items():
        if make is None:
            url = base_url.rstrip("/")
        else:
            live[name] = make().start()
            url = live[name].base_url
        # a deployment of another model stops the chapter here, in one line naming what it serves: its reuse and
        # stall could not be set beside SmolLM2's prices
        model_id = client.require_model(url, served_names) if make is None else client.served_model(url)
        extra = {"ignore_eos": True} if name == "vLLM" else None
        block = block_size(url, name)
        # the server's requests share one budget: a server too slow for it stops the chapter in one line
        server_budgets[name] = client.ServerBudget(server_budget_s, f"{name} at {url}", "server_budget_s", FEWER)

        def ask(messages, label: str, q: int) -> dict:
            before = client.scrape_metrics(url)
            budget = server_budgets[name]
            timeout_s = budget.timeout_s()
            watch = budget.watch(ahead["requests"], ahead["tokens"], 2) if label == "first warm-up" else None
            with budget.request():
                trace = client.stream_chat(url, model_id, messages, 2, extra=extra, timeout_s=timeout_s, on_event=watch)
            trace = client.require_ok(budget.check(trace), f"{name} at {url}", f"a {label} request")
            return dict(engine=name, group=label, question=q, prompt_tokens=trace.prompt_tokens,
                        ttft_ms=trace.metrics().ttft * 1e3, hit_tokens=hits(before, client.scrape_metrics(url)),
                        block_tokens=block)

        ask(chat(system_text, "Hello."), "first warm-up", -1), ask(chat(short_text, "Hello."), "warm-up", -1)
        for q, question in enumerate(progress(asked, desc=f"{name}: three requests per question")):
            engine_rows.append(ask(chat(f"Request {q} to {name}. " + system_text, question), "unique", q))
            engine_rows.append(ask(chat(system_text, question), "shared", q))
            engine_rows.append(ask(chat(short_text, question), "short", q))
finally:
    for engine in live.values():
        engine.stop()
engine_runs = pd.DataFrame(engine_rows, columns=["engine", "group", "question", "prompt_tokens", "ttft_ms",
                                                 "hit_tokens", "block_tokens"])
_ = results.table(engine_runs, "reuse_engines_runs")

# %% [markdown]
# Per engine and group: the median TTFT with its range, the tokens the engine's counter says it reused, and the
# tokens its block size lets it reuse.

# %%
groups = {"unique": 0, "shared": shared, "short": short_shared}
summary = []
for (name, group), g in engine_runs.groupby(["engine", "group"], sort=False):
    block = g.block_tokens.iloc[0]
    summary.append(dict(engine=name, group=group, requests=len(g), prompt_tokens=g.prompt_tokens.median(),
                        ttft_ms=g.ttft_ms.median(), ttft_low_ms=g.ttft_ms.min(), ttft_high_ms=g.ttft_ms.max(),
                        hit_tokens=g.hit_tokens.median(), block_tokens=block,
                        reusable_tokens=reuse.reusable_tokens(groups[group], int(block), int(g.prompt_tokens.min()))
                        if pd.notna(block) else np.nan))
reuse_table = pd.DataFrame(summary, columns=["engine", "group", "requests", "prompt_tokens", "ttft_ms", "ttft_low_ms",
                                             "ttft_high_ms", "hit_tokens", "block_tokens", "reusable_tokens"])
results.table(reuse_table, "reuse_engines")
prose.shown(reuse_table.round(1))

# %% [markdown]
# What the counters say, against the blocks:

# %%
counted = reuse_table.dropna(subset=["hit_tokens", "reusable_tokens"])
statement = ("Where an engine counts its prefix-cache hits, each request reuses exactly the whole blocks of the "
             "prefix it shares with a prompt served before, and nothing when that prefix is shorter than a block.")
register.claim("engine_reuses_whole_blocks", statement)
verdict = register.record(
    "engine_reuses_whole_blocks",
    (claims.HELD if (counted.hit_tokens == counted.reusable_tokens).all() else claims.NOT_HELD) if len(counted) else None,
    predicted=", ".join(f"{r.engine} {r.group}: {r.reusable_tokens:.0f}" for r in counted.itertuples()),
    measured=", ".join(f"{r.engine} {r.group}: {r.hit_tokens:.0f}" for r in counted.itertuples()),
    evidence=f"the median of {questions} requests per group; counters read before and after each")
rows_text = " ".join(f"{r.engine} {r.group}: **{r.hit_tokens:.0f}** tokens reused of {groups[r.group]} shared, "
                      f"{r.reusable_tokens:.0f} reusable in blocks of {r.block_tokens:.0f}." for r in counted.itertuples())
uncounted = "; ".join(["transformers serve exposes no metrics"] * ("transformers serve" in wanted)
                      + [f"vLLM did not run: {vllm_missing or 'not among the engines'}"] * ("vLLM" not in wanted and not base_url)
                      + [f"{base_url} reports no vllm:prefix_cache_hits"] * bool(base_url))
show(claims.pick(
    verdict, held=f"The hit counters counted exactly the whole blocks of each shared prefix. {rows_text} A prefix is "
                  "reused in whole blocks only: the last, partial block is prefilled again.",
    not_held=f"The hit counters did not count the whole blocks of each shared prefix. {rows_text} The engine reuses "
             "by another rule than its block size (or evicted the cached blocks between requests).",
    unresolved="",  # a count is exact: held or not
    not_measured=f"{statement} This run does not decide it: no server here counts its prefix-cache hits on /metrics "
                 f"({uncounted})."))

# %% [markdown]
# And what the reuse saves in TTFT, against the cost model's price of the reusable tokens (the whole prompt's
# prefill less the prefill of the rest after them; an engine's paged cache copies nothing).

# %%
def engine_saving(r, model: costmodel.CostModel | None) -> Spread | None:
    """The cost model's TTFT saving of reusing ``r.reusable_tokens`` of an ``r.prompt_tokens``-token prompt (s), on
    the cores the engine computes on."""
    if model is None or not r.reusable_tokens > 0:  # none reusable, or a block size the server does not state
        return None
    whole, rest = model.prefill(int(r.prompt_tokens)), model.prefill(int(r.prompt_tokens - r.reusable_tokens),
                                                                     past=int(r.reusable_tokens))
    rest_copy = rest.term("cache copy")
    best = whole.best - (rest.best - rest_copy.best)
    if best <= 0:  # the rest after the prefix priced no cheaper than the whole (a tiny model): no saving to test
        return None
    return Spread(best, best, max(best, whole.median - (rest.median - rest_copy.median)))


decided, sentences, predicted_text, allowed_text = [], [], [], []
gains = {}  # per engine: the TTFT a cached prefix saved (ms), for the opening
for name, g in engine_runs.groupby("engine", sort=False):
    t = reuse_table[reuse_table.engine == name].set_index("group")
    runs_of = lambda grp: g[g.group == grp].set_index("question").ttft_ms  # noqa: E731
    gain = Spread.of((runs_of("unique") - runs_of("shared")).dropna())
    cores = compute_threads(name, n_threads)
    own = cost_model(MODEL, cores)  # priced on the cores the engine computes on
    p = engine_saving(t.loc["shared"], own)
    cold_ms = own.prefill(int(t.loc["unique"].prompt_tokens)).best * 1e3 if own else np.nan
    core_note = (f" (vLLM computes on {cores} of this machine's {n_threads} cores, keeping one for its "
                 "server and scheduler, and is priced on those)" if name == "vLLM" and cores < n_threads else "")
    v = (claims.within(gain / 1e3, p, claims.PREDICTED_TIME) if gain.low > 0 else claims.NOT_HELD) if p else None
    if v == claims.HELD:
        why = ": as predicted"
    elif v == claims.UNRESOLVED:
        why = ": close, but its runs spread too far to call"
    elif v == claims.NOT_HELD and gain.mid > p.mid * 1e3:
        why = (f": more than predicted. Its unique requests' TTFT was {t.loc['unique'].ttft_ms / cold_ms:.2f}x the "
               f"cost model's prefill of their whole prompt ({cold_ms:.0f} ms), so reuse skipped a slower prefill than "
               "the model priced" + (f". The CPU build of {core_note.strip(' ()')}" if core_note else ""))
    elif v == claims.NOT_HELD:
        why = (": less than predicted. The part of each request's time that reuse cannot remove (the request's own "
               "tokens, the engine's work per request) was larger than the model's")
    else:
        why = ""
    reusable = (f"{t.loc['shared'].reusable_tokens:.0f} reusable tokens" if pd.notna(t.loc["shared"].reusable_tokens)
                else "an unknown number of reusable tokens (the server states no block size)")
    gains[name] = gain
    sooner = f"{gain.text('.0f', 'ms')} sooner" if gain.mid >= 0 else f"{(gain * -1).text('.0f', 'ms')} later"
    sentences.append(f"through {name}, the first token came {sooner} with {reusable} (TTFT "
                     f"{t.loc['unique'].ttft_ms:.0f} ms unique, {t.loc['shared'].ttft_ms:.0f} ms shared, "
                     f"{t.loc['short'].ttft_ms:.0f} ms short)" + (f", {p.mid * 1e3:.0f} ms predicted on {cores} "
                                                                  f"core{'s' * (cores > 1)}" if p else "") + why)
    if p:  # the detail the verdict was decided on, folded under the finding
        allowed_text.append(f"{name}: {gain.text('.0f', 'ms')} saved against "
                            + "–".join(f"{x * 1e3:.0f}" for x in claims.allowed(p, claims.PREDICTED_TIME)) + " ms allowed")
    predicted_text.append(f"{name}: {p.mid * 1e3:.0f} ms" if p else f"{name}: none")
    if v is not None:
        decided.append(v)

# %%
statement = ("Through each engine, a request whose prefix is cached reaches its first token sooner than one with a "
             "unique prefix by the cost model's prefill of the reusable blocks on the cores the engine computes on, "
             "within the tolerance for a predicted time.")
register.claim("engine_reuse_saves_its_blocks_prefill", statement)
verdict = register.record("engine_reuse_saves_its_blocks_prefill", claims.every(decided) if decided else None,
                          predicted="; ".join(predicted_text), measured="; ".join(sentences),
                          evidence=f"{questions} questions per group, the groups taking turns; two tokens a request")
found = " ".join(s[:1].upper() + s[1:] + "." for s in sentences)
show(found if verdict != claims.NOT_MEASURED else  # the same words, whatever the verdict
     f"{statement} This run does not decide it: no engine ran here, or none could reuse a block: {found or 'none'}",
     how=f"Each engine's saving over its runs (the 95 % interval of its median) is held to the tolerance for a "
         f"predicted time, {claims.PREDICTED_TIME:g}x either way: {'; '.join(allowed_text)}." if allowed_text else None)
vllm_shared = reuse_table[(reuse_table.engine == "vLLM") & (reuse_table.group == "shared")]
if "vLLM" in gains and len(vllm_shared) and vllm_shared.hit_tokens.iloc[0] < shared:  # vLLM reused only whole blocks
    v_row, v_cores = vllm_shared.iloc[0], compute_threads("vLLM", n_threads)
    v_cold = reuse_table[(reuse_table.engine == "vLLM") & (reuse_table.group == "unique")].ttft_ms.iloc[0]
    more = gains["vLLM"].low > saving.high  # more beyond both intervals; "less" the same way; else about as much
    less = gains["vLLM"].high < saving.low
    show(f"Of the {shared} shared tokens, vLLM reused {v_row.hit_tokens:.0f} (its whole blocks of "
         f"{v_row.block_tokens:.0f}), and saved " + (
             f"more than the in-process run did for all {shared}. It computes on {v_cores} of this machine's "
             f"{n_threads} cores, so each token costs it more (a cold first token took it {v_cold:.0f} ms, against "
             f"{cold.mid:.0f} ms in-process)." if more and v_cores < n_threads and v_cold > cold.mid else
             f"{'more' if more else 'less' if less else 'about as much (the two ranges overlap)'} "
             f"{'as' if not (more or less) else 'than'} the in-process run did for all {shared} "
             f"({gains['vLLM'].text('.0f', 'ms')} against {saving.text('.0f', 'ms')}; a cold first token took it "
             f"{v_cold:.0f} ms, against {cold.mid:.0f} ms in-process)."))

# %% [markdown]
# **Takeaway: judge a prefix cache by its blocks: the tokens its engine can reuse are the whole blocks of the
# shared prefix, so compare the hit counter with them, and the TTFT saved with their prefill's price; the
# findings above say what this machine's engines reused and saved.**
#
# ## 2. Separation in miniature: a prefill worker and a decode worker, one core each
#
# Chapter 5's scenario again (its model, `separation_model`): stream A decodes; after its `arrival_step`-th
# token, B arrives with a `b_prompt_len`-token prompt. Three ways to serve it on this machine's cores:
#
# * **one worker**, all cores, B's prompt in one piece (chapter 5's unchunked run).
# * **one worker with chapter 5's best chunk**, B's prefill interleaved with A's steps.
# * **two workers**: a prefill worker pinned to one core and a decode worker pinned to another, one torch
#   thread each (`lib.separation`). The prefill worker prefills B and chooses its first token, then writes B's
#   cache into shared memory; the decode worker reads it between two of A's steps.
#
# What chapter 0 measured of one core and of all of them:

# %%
try:
    show(f"On one thread and on {n_threads}: square matrix products at **{ceilings.square_flops('fp32', 1) / 1e9:.0f}** "
         f"and **{ceilings.square_flops('fp32', n_threads) / 1e9:.0f} GFLOP/s**, the streaming read at "
         f"**{ceilings.stream_bandwidth('fp32', 1) / 1e9:.1f}** and **{ceilings.stream_bandwidth('fp32', n_threads) / 1e9:.1f}"
         " GB/s** (chapter 0).")
except ValueError as error:  # chapter 0 did not measure one of these thread counts
    print(f"chapter 0 has no rate for one of these thread counts: {error}")

# %% [markdown] tags=["predict"]
# **Predict first.** A long prefill is mostly arithmetic (chapter 2 prices its largest part as the matrices' FLOPs),
# a decode step mostly reading the weights (chapter 3). With two workers on a core each, do you expect A's worst gap to be longer or shorter than with one
# worker unchunked, and about how many times longer do you expect B to wait for its first token than with one
# worker on all cores?

# %% [markdown]
# <details><summary>The book's prediction (open it once you have written yours)</summary>
#
# With two workers, A's gaps are one-core decode steps (priced in the table below, beside
# the steps on both cores; never holding B's prefill), except the one that holds the hand-over, priced by the cache's bytes over chapter 0's
# copy rate; B's TTFT is its prefill on one core.
#
# </details>
#
# The decode worker's loop:

# %%
display(prose.source(separation._decode_round))

# %% [markdown]
# Chapter 5's best chunk, by its own rule (the size before the first step down that cut A's worst gap by at most
# its `stops_helping`), unless `chunk` is set:

# %%
def one_run(section: str, names: list[str]) -> tuple[dict[str, pd.DataFrame | None], dict]:
    """Tables ``names`` of another chapter and the parameters it ran with, all from one run: this build's tree if
    it holds the first table, else the committed one (``lib.results.load_table`` reads each table alone)."""
    for root in dict.fromkeys([output_root(quick), REPO_ROOT]):
        folder = root / "data" / section
        if (folder / f"{names[0]}.csv").exists():
            record = folder / "provenance.json"
            return ({n: pd.read_csv(folder / f"{n}.csv") if (folder / f"{n}.csv").exists() else None for n in names},
                    json.loads(record.read_text())["parameters"] if record.exists() else {})
    return dict.fromkeys(names), {}


def chapter5_best() -> tuple[int, str]:
    """(chunk, where it came from): chapter 5's measured best chunk, or 128 tokens when chapter 5 has not run."""
    tables, ran_with = one_run("05_interference", ["halving", "interference_runs"])
    halving, per_run = tables["halving"], tables["interference_runs"]
    if halving is None:
        return 128, "as chapter 5 has not run here"
    stop = ran_with.get("stops_helping", 0.15)

    def best_of(sizes: list, cuts: list) -> int:  # chapter 5's rule: the size above the first step that cut too little
        return next((sizes[i - 1] for i in range(1, len(sizes)) if cuts[i] <= stop), sizes[-1])

    best = best_of(halving.chunk_tokens.tolist(), halving.worst_gap_cut.tolist())
    where = f"chapter 5's measured best ({stop:.0%} rule)"
    if best == min(halving.chunk_tokens):
        where += (f", the smallest chunk chapter 5 tried: every halving down to it still cut A's worst gap by more "
                  f"than {stop:.0%}, so a smaller chunk might serve one worker better still")
    if per_run is not None:  # each run's own best, by the same rule
        bests = []
        for _, r in per_run.sort_values("chunk_tokens", ascending=False).groupby("run"):
            gaps = r.a_worst_gap_ms.tolist()
            bests.append(best_of(r.chunk_tokens.tolist(), [0] + [1 - b / a for a, b in zip(gaps, gaps[1:])]))
        if min(bests) != max(bests):
            where += (f". Its runs put their best at {min(bests)} to {max(bests)} tokens, so chapter 5 could not "
                      "resolve one. The one-worker comparison below depends on this choice: a larger chunk gives "
                      "B an earlier first token and A a longer worst gap (try `chunk = 128`)")
    return int(best), where


best_chunk, chunk_source = (chunk, "the parameter chunk") if chunk else chapter5_best()
best_chunk = min(best_chunk, b_prompt_len)
sep_missing = separation.separation_unavailable()
print(f"one worker's chunk: {best_chunk} tokens, {chunk_source}. Two workers: "
      + (sep_missing or f"cores {separation.usable_cores()[:2]}") + ".")

# %% [markdown]
# The three ways, `separation_runs` times each (the two workers are started once, and load the model once).

# %%
small = load_model(separation_model, cpu, torch.float32)
show(f"This section runs **{separation_model}**, chapter 5's model" + ("" if separation_model == MODEL else
     f", not {MODEL}, which the rest of this chapter serves") + ".")
sep_rows = []
settings = [("one worker", None), (f"one worker, chunk {best_chunk}", best_chunk)]
for run in progress(range(separation_runs), desc="one worker, with and without the chunk, run by run"):
    for way, size in settings:
        r = schedule.interference(small, chunk=size, b_prompt_len=b_prompt_len, a_tokens=a_tokens,
                                  arrival_step=arrival_step)
        m = r.a_metrics
        sep_rows.append(dict(way=way, run=run + 1, a_worst_gap_ms=m.worst_gap * 1e3, a_median_gap_ms=m.median_gap * 1e3,
                             b_ttft_ms=r.b_metrics.ttft * 1e3, write_ms=np.nan, read_ms=np.nan, reread_ms=np.nan,
                             write_faults=np.nan, read_faults=np.nan, reread_faults=np.nan, read_within_a=np.nan))
if not sep_missing:
    for run, r in enumerate(separation.separated(separation_model, b_prompt_len=b_prompt_len, a_tokens=a_tokens,
                                                 arrival_step=arrival_step, runs=separation_runs)):
        claims.invariant(r.same_next_token, "the decode worker's copy of B's cache chose another token than the original")
        m = r.a_metrics
        sep_rows.append(dict(way="two workers", run=run + 1, a_worst_gap_ms=m.worst_gap * 1e3,
                             a_median_gap_ms=m.median_gap * 1e3, b_ttft_ms=r.b_ttft * 1e3, write_ms=r.write_s * 1e3,
                             read_ms=r.read_s * 1e3, reread_ms=r.reread_s * 1e3, write_faults=r.write_faults,
                             read_faults=r.read_faults, reread_faults=r.reread_faults, read_within_a=r.read_after < a_tokens))
sep_runs = pd.DataFrame(sep_rows)
_ = results.table(sep_runs, "separation_runs")

# %% [markdown]
# The medians with their ranges, and the cost model's predictions (both cores for one worker, one core for each
# of two workers):

# %%
sep = sep_runs.groupby("way", sort=False).agg(
    a_worst_gap_ms=("a_worst_gap_ms", "median"), a_worst_low=("a_worst_gap_ms", "min"),
    a_worst_high=("a_worst_gap_ms", "max"), a_median_gap_ms=("a_median_gap_ms", "median"),
    b_ttft_ms=("b_ttft_ms", "median"), b_ttft_low=("b_ttft_ms", "min"), b_ttft_high=("b_ttft_ms", "max"),
    write_ms=("write_ms", "median"), read_ms=("read_ms", "median"), reread_ms=("reread_ms", "median")).reset_index()
one_core, all_cores = cost_model(separation_model, 1), cost_model(separation_model, n_threads)
kv_small = MODELS[separation_model][0].with_dtype("fp32").kv_bytes_per_token
handover_bytes = b_prompt_len * kv_small
rate1 = ceilings.stream_bandwidth("fp32", 1, "copy") if 1 in ceilings.threads("fp32") else None
predicted_handover_ms = 2 * handover_bytes / rate1 * 1e3 if rate1 else np.nan  # read and written: chapter 0 counts both
context = 16 + a_tokens // 2
prices = {"one worker": (all_cores, None), f"one worker, chunk {best_chunk}": (all_cores, best_chunk),
          "two workers": (one_core, None)}
sep["predicted_a_gap_ms"] = [prices[w][0].decode(context).best * 1e3 if prices[w][0] else np.nan for w in sep.way]
sep["predicted_b_ttft_ms"] = [prices[w][0].prefill(b_prompt_len).best * 1e3 if prices[w][0] and prices[w][1] is None
                              else np.nan for w in sep.way]
results.table(sep, "separation")
prose.shown(sep.round(1))

# %% [markdown]
# The claims, each decided on the runs' spread:

# %%
spread = lambda way, col: Spread.of(sep_runs[sep_runs.way == way][col])  # noqa: E731
two = "two workers"
sep_runs_text = f"{separation_runs} run{'s' * (separation_runs != 1)}"
have_two = two in set(sep_runs.way)
statement = ("With a prefill worker and a decode worker on a core each, A's worst gap is shorter than with one "
             "worker on all cores, chunked or not, beyond the runs' spread.")
register.claim("two_workers_keep_the_stream_flat", statement)
gaps = sep.set_index("way").a_worst_gap_ms
verdict = register.record(
    "two_workers_keep_the_stream_flat",
    claims.every([claims.below(spread(two, "a_worst_gap_ms"), spread(w, "a_worst_gap_ms")) for w, _ in settings])
    if have_two else None,
    predicted="shorter than both one-worker ways", measured=", ".join(f"{w}: {v:.0f} ms" for w, v in gaps.items()),
    evidence=f"{sep_runs_text} each; {separation_model}, B's prompt {b_prompt_len} tokens, A's reply {a_tokens} tokens")
two_gap = gaps.get(two, np.nan)
medians = sep.set_index("way").a_median_gap_ms if "a_median_gap_ms" in sep else None  # A's ordinary gap, each way
have_median = medians is not None and two in medians.index
one_ways = f"{gaps.iloc[0]:.0f} ms unchunked and {gaps.iloc[1]:.0f} ms in chunks of {best_chunk}"
show(claims.pick(
    verdict, held=f"A's worst gap was **{two_gap:.0f} ms** with two workers, shorter beyond the runs' spread than "
                  f"with one worker: {one_ways}. B's prefill never ran between A's steps"
                  + (f"; but A's ordinary gap, its median, rose from {medians.iloc[0]:.1f} ms to {medians[two]:.1f}: "
                     "its decode worker has one core, not all of them. Flatter, not faster." if have_median and
                     medians[two] > medians.iloc[0] * (1 + claims.NOISE) else "."),
    not_held=f"A's worst gap was {two_gap:.0f} ms with two workers, not shorter than with one worker ({one_ways}): one "
             "core's decode step (or the step that held the hand-over) kept A waiting longer than one worker did.",
    unresolved=f"A's worst gap was {two_gap:.0f} ms with two workers against {one_ways} with one worker; the runs' "
               "ranges overlap, so this run cannot say whether two workers keep A's stream flatter.",
    not_measured=f"{statement} This run does not decide it: two workers cannot run here: {sep_missing}."))

ttfts = sep.set_index("way").b_ttft_ms

# %%
statement = ("With two workers, B's TTFT is the cost model's prefill of B's prompt on one core, within the tolerance "
             "for a predicted time.")
register.claim("newcomer_pays_for_one_core", statement)
two_ttft = ttfts.get(two, np.nan)
predicted_b = sep.set_index("way").predicted_b_ttft_ms.get(two, np.nan)  # on one core
measured_split = two_ttft / ttfts.iloc[0]
priced_split = sep.set_index("way").predicted_b_ttft_ms.get(two, np.nan) / sep.predicted_b_ttft_ms.iloc[0]
off_all = ttfts.iloc[0] / sep.predicted_b_ttft_ms.iloc[0]  # B's TTFT over its price, one worker on all cores
_paired = sep_runs.pivot(index="run", columns="way", values="b_ttft_ms")
split_over_price = (Spread.of(_paired[two] / _paired[sep.way.iloc[0]]) / priced_split  # run by run: a paired ratio
                    if have_two and np.isfinite(priced_split) else None)
split_fits = (claims.within(split_over_price, 1.0, claims.PREDICTED_RATIO) if split_over_price is not None
              else None)  # one core's prefill against all cores', each run's ratio over its price
b_fits = claims.within(spread(two, "b_ttft_ms"), predicted_b, claims.PREDICTED_TIME) if have_two and one_core else None
missed = "miss" if b_fits in (claims.NOT_HELD, claims.UNRESOLVED) else ""  # the claim's verdict: a held one is no miss
split_said = {  # what that says, plainly
    claims.HELD: " One core against all of them cost about as priced, so what B's TTFT misses lies in the price of "
                 "the prefill itself, on either core count." if missed else
                 " One core against all of them cost about as priced, as B's prefill on one core did.",
    claims.NOT_HELD: " One core against all of them did not cost as priced: one core's prefill is not what the "
                     "one-thread ceilings make of it.",
    claims.UNRESOLVED: " Whether one core against all of them costs as priced is too close to call" + (
        ", so a miss may lie in the split as well as in the prefill's price." if missed else ".")}
split_sentence = (f"With two workers B's first token (its prefill on one core, then the hand-over) took "
                  f"{measured_split:.2f}x its time with one worker on all cores, against {priced_split:.2f}x priced."
                  + split_said.get(split_fits, ""))
split_how = (f"B's TTFT ran {off_all:.2f}x its price on all cores and {two_ttft / predicted_b:.2f}x on one. "
             + ("" if split_over_price is None else
                f"The split is decided on each run's ratio over the price, {split_over_price.text('.2f', 'x')}, held "
                f"to {1 / claims.PREDICTED_RATIO:.2f}–{claims.PREDICTED_RATIO:.2f}x (the tolerance for a predicted "
                "ratio): " + {claims.HELD: "within it.", claims.NOT_HELD: "outside it.",
                              claims.UNRESOLVED: "its interval reaches across the edge."}[split_fits]))
pace_now = max((m.ratio.mid for m in pacer.moments.values()), default=1.0)  # 1: chapter 0's speed
slow_host = pace_now > 1 + claims.NOISE
if slow_host and off_all > 1:  # a machine running slower than chapter 0 makes every price here too low
    split_sentence += (f" With one worker on all cores B's TTFT ran {off_all:.2f}x its price, and this chapter's pace "
                       f"check found the machine running chapter 0's one-row matrices at {pace_now:.2f}x their chapter "
                       "0 time, " + ("about as much: the slower machine accounts for that miss."
                                     if abs(off_all / pace_now - 1) <= claims.NOISE * 2 else
                                     "which accounts for part of that miss." if pace_now < off_all else
                                     "more than B's TTFT missed its price by."))
def pace_then(stem: str) -> float | None:
    """The moment furthest from chapter 0's speed that another chapter's pace check measured, either way (its
    one-row matrices over chapter 0's median call, as `pace_now` is here), or None where it kept no pace table."""
    table = load_table(stem, "pace", quick=quick)
    return None if table is None or not len(table) else float(table.ratio.iloc[np.abs(np.log(table.ratio)).argmax()])


def paces_apart(stem: str) -> str:
    """A clause giving both chapters' paces where they differ by more than the noise, else ""."""
    then = pace_then(stem)
    if then is None or abs(then / pace_now - 1) <= 2 * claims.NOISE:
        return ""
    return (f"chapter {int(stem[:2])} ran at {then:.2f}x chapter 0's time for the same matrices (its pace check's "
            f"moment furthest from 1) and this chapter "
            f"at {pace_now:.2f}x, as their pace checks say: the machine's speed moved between the two")


ch5_tables, ch5_params = one_run("05_interference", ["interference"])
ch5_unchunked = ch5_tables["interference"]

# %%
if ch5_unchunked is not None and ch5_params.get("model_name", "gpt2-small") == separation_model:
    ch5_unchunked = ch5_unchunked[ch5_unchunked.chunk_tokens >= b_prompt_len]
    if len(ch5_unchunked):  # the same computation: one loop, B's whole prompt in one pass after A's tenth token
        r5, one_b = ch5_unchunked.iloc[0], spread(sep.way.iloc[0], "b_ttft_ms")
        split_how += (f" Chapter 5 ran this same one-worker loop (B's whole {b_prompt_len:,}-token prompt in one "
                           f"pass beside A's stream) with B's TTFT at {r5.b_ttft_ms:,.0f} ms, "
                           f"{r5.b_ttft_ms / sep.predicted_b_ttft_ms.iloc[0]:.2f}x this chapter's price for it (chapter "
                           f"5's own price adds one of A's steps), where here it took {ttfts.iloc[0]:,.0f} ms: "
                           + (f"the same within the two runs' intervals, so the {missed or 'difference'} is the prefill's own."
                              if claims.ranges_overlap(one_b.low, one_b.high, r5.b_ttft_ms_low, r5.b_ttft_ms_high)
                              else f"{ttfts.iloc[0] / r5.b_ttft_ms:.2f}x chapter 5's, so part of this "
                              f"{missed or 'difference'} is this run's, not the prefill's" + (
                                  f" ({paces_apart('05_interference')})." if paces_apart("05_interference") else
                                  f" (this chapter ran at {pace_now:.2f}x chapter 0's pace, as its pace check says)."
                                  if slow_host else " (a difference this run does not take apart; these workers run "
                                  "in processes of their own, which chapter 5's single process does not).")))
ch2 = load_table("02_prefill_sweep", "prefill_sweep", quick=quick)
ch2_model = one_run("02_prefill_sweep", ["prefill_sweep"])[1].get("model_name")  # the model chapter 2 timed
alone_1t = None if ch2 is None or one_core is None or ch2_model != separation_model else \
    ch2[(ch2.dtype == "fp32") & (ch2.threads == 1)]
if alone_1t is not None and len(alone_1t) and have_two:
    nearest = alone_1t.iloc[(alone_1t.prompt_tokens - b_prompt_len).abs().argmin()]
    alone_b = nearest.time_ms * one_core.prefill(b_prompt_len).best / one_core.prefill(int(nearest.prompt_tokens)).best
    hand_b = sep_runs[sep_runs.way == two]
    b_prefill = hand_b.b_ttft_ms.median() - hand_b.write_ms.median() - hand_b.read_ms.median()
    split_sentence += (f" One layer down: chapter 2 timed this model's pass of {int(nearest.prompt_tokens):,} tokens on one "
                       f"thread, alone, at {nearest.time_ms:,.0f} ms ({alone_b:,.0f} ms for {b_prompt_len:,} tokens, "
                       f"scaled by the cost model). Here, beside the decode worker streaming the weights on the other "
                       f"core, B's prefill took about {b_prefill:,.0f} ms (its TTFT less the hand-over): "
                       f"{b_prefill / alone_b:.2f}x, "
                       + (f"about its time alone (this chapter ran at {pace_now:.2f}x chapter 0's pace). Sharing the "
                          "memory bus and the last-level cache with the neighbour may add some of it, which this run "
                          "does not time apart." if 1 / claims.PREDICTED_TIME <= b_prefill / alone_b
                          <= claims.PREDICTED_TIME else
                          f"slower than alone, though this chapter also ran at {pace_now:.2f}x chapter 0's pace, which "
                          "may account for it as much as the neighbour does (this run does not time that sharing "
                          "apart)." if b_prefill > alone_b and slow_host else "slower than alone: sharing the memory "
                          "bus and the last-level cache with the neighbour may be why, which this run does not time "
                          "apart." if b_prefill > alone_b else
                          "less than alone, so chapter 2's pass and this one differ by more than the neighbour.")
                       + (f" Chapter 2's time is not this machine's speed now, though: {paces_apart('02_prefill_sweep')}."
                          if paces_apart("02_prefill_sweep") else ""))
predicted = f"{predicted_b:.0f} ms"
verdict = register.record(
    "newcomer_pays_for_one_core", b_fits, predicted=predicted, measured=f"{two_ttft:.0f} ms", evidence=sep_runs_text)
one_way = f"{ttfts.iloc[0]:.0f} ms with one worker on all cores"
against_one = f"({one_way}, against {sep.predicted_b_ttft_ms.iloc[0]:.0f} ms predicted). {split_sentence}"
b_low, b_high = claims.allowed(predicted_b, claims.PREDICTED_TIME) if np.isfinite(predicted_b) else (np.nan, np.nan)
show(claims.pick(
    verdict, held=f"B waited **{two_ttft:.0f} ms** for its first token with two workers, about the {predicted} "
                  f"predicted for its prefill on one core ({one_way}): separated, the newcomer's prefill gets the one "
                  f"core of its worker. {split_sentence}",
    not_held=f"B waited {two_ttft:.0f} ms for its first token with two workers, "
             f"{'longer' if two_ttft > predicted_b else 'shorter'} than the {predicted} predicted for its prefill on "
             f"one core {against_one}",
    unresolved=f"B waited {two_ttft:.0f} ms for its first token with two workers against {predicted} predicted for its "
               f"prefill on one core: too close to call, the median "
               f"{'above' if two_ttft > predicted_b else 'below'} the price {against_one}",
    not_measured="B's wait with two workers is not measured here: two workers did not run, or chapter 0 measured no "
                 "one-thread ceilings for this model."),
    how=None if verdict == claims.NOT_MEASURED else
    f"{split_how} B's TTFT with two workers over its {sep_runs_text}, {spread(two, 'b_ttft_ms').text('.0f', 'ms')}, is "
    f"held to {b_low:.0f}–{b_high:.0f} ms, the tolerance for a predicted time ({claims.PREDICTED_TIME:g}x) either "
    f"way of its price.")

# %% [markdown]
# The hand-over: B's cache is `b_prompt_len` tokens of keys and values, its bytes copied twice, each priced as
# its bytes read and written at chapter 0's one-thread copy of caches that size, plus each page fault the copy
# took at chapter 0's cost per fault. The prefill worker writes into the shared buffer, whose pages both workers
# mapped at start (no faults expected). The decode worker reads into new tensors (transformers' cache grows by
# concatenation), whose pages the kernel maps as they are first written: the same copy's price plus its faults.
# One layer down, the decode worker reads the same bytes again, after A's stream, into the tensors it now holds:
# a copy into mapped pages.

# %%
def write_alone() -> float:
    """One write of B's cache into a shared buffer, timed here on one thread while nothing else runs (ms)."""
    with torch.inference_mode():
        cache = phases.prefill(small, random_prompt(b_prompt_len, small.model.config.vocab_size, seed=1))[1]
    shm = torch.zeros(phases.cache_bytes(cache) // 4).share_memory_()
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return timing.measure(lambda: separation._to_buffer(cache, shm), cpu, warmup=1, repeats=5).median_ms
    finally:
        torch.set_num_threads(previous)


hand = sep_runs[sep_runs.way == two]
alone_ms = write_alone() if have_two else np.nan
copied = ceilings.cache_concatenation(separation_model, "fp32", 1, handover_bytes) if rate1 else None
copy_ms = copied.best * 1e3 if copied else predicted_handover_ms  # the cache's many tensors, as chapter 0 copied them
fault_ms = ceilings.fault_cost("fp32", 1) * 1e3 if rate1 else np.nan
priced = lambda faults: copy_ms + faults.median() * fault_ms  # noqa: E731  each copy with the faults it took
sides = {"write": (hand.write_ms, priced(hand.write_faults)), "read": (hand.read_ms, priced(hand.read_faults)),
         "read again": (hand.reread_ms, priced(hand.reread_faults))}
faults_of = {"write": hand.write_faults, "read": hand.read_faults, "read again": hand.reread_faults}
verdicts = {k: claims.within(Spread.of(v), p, claims.PREDICTED_TIME) for k, (v, p) in sides.items()} if have_two and rate1 else {}
statement = ("The hand-over costs its bytes at chapter 0's one-thread copy of caches that size, plus the page faults "
             "each copy took (chapter 0's cost per fault): the write into the shared buffer, the read into new tensors "
             "and the read again into those, each within the tolerance for a predicted time.")
register.claim("handover_costs_its_bytes", statement)
alone_ok = claims.within(alone_ms, copy_ms, claims.PREDICTED_TIME) == claims.HELD  # against the price printed
slowed = hand.write_ms.median() > alone_ms * claims.PREDICTED_TIME

# %%
worker_x, alone_x = hand.write_ms.median() / copy_ms, alone_ms / copy_ms  # the write in the worker, and alone
at_limit = all(abs(x / claims.PREDICTED_TIME - 1) < 0.08 for x in (worker_x, alone_x))  # both near the limit
alone_says = (f"The same write timed here alone, on one thread with nothing else running, took {prose.ms(alone_ms / 1e3)}, "
              f"{alone_x:.2f}x its price of {prose.ms(copy_ms / 1e3)}, against {worker_x:.2f}x in the worker. "
              + (lambda t: t[:1].upper() + t[1:])(f"both about {claims.PREDICTED_TIME:g}x their price, right at the limit the book counts as priced "
                 f"(the one in the worker {'past' if worker_x > claims.PREDICTED_TIME else 'inside'} it, the one alone "
                 f"{'past' if alone_x > claims.PREDICTED_TIME else 'inside'} it), so the write runs a little slower "
                 "than chapter 0's copy both alone and in the worker." if at_limit and not slowed else
                 "the copy runs at its price by itself, so in the worker something else took the time: what ran "
                 "beside it (the decode worker on the other core) is one candidate, which this chapter does not time "
                 "apart." if alone_ok and slowed else
                 "about its price, and about what it took in the worker." if alone_ok else
                 "off its price even alone, and about what it took in the worker: writing the cache's many tensors into "
                 "one shared buffer is not chapter 0's concatenation of caches that size, which the price uses."
                 if not slowed else
                 "off its price even alone, and slower still in the worker beside the decode worker."))
than = {k: "longer" if v.median() > p else "less time" for k, (v, p) in sides.items()}  # than its price
off = " ".join({"write": alone_says.replace("The same write", f"Writing into the shared buffer took {than['write']} "
                                                                  "than its price in the worker; the same write", 1),
                "read": f"Reading into new tensors took {than['read']} than its price even with the faults it took "
                        "counted: in this process a new page did not cost what it cost in chapter 0's copy into "
                        "fresh memory.",
                "read again": f"Even into mapped pages the read took {than['read again']} than the copy rate makes "
                              f"it, so the copy itself differs here, not only the mapping. The same bytes, written "
                              f"alone on one thread here, took {prose.ms(alone_ms / 1e3)}, and read again in the "
                              f"decode worker {prose.ms(hand.reread_ms.median() / 1e3)} "
                              f"({hand.reread_ms.median() / alone_ms:.2f}x); this run does not take the worker's copy "
                              "apart further."}[k]
               for k, v in verdicts.items() if v == claims.NOT_HELD or (k == "write" and v == claims.UNRESOLVED))
verdict = register.record(
    "handover_costs_its_bytes", claims.every(verdicts.values()) if verdicts else None,
    predicted=", ".join(f"{k} {prose.ms(p / 1e3)}" for k, (_, p) in sides.items()),
    measured=", ".join(f"{k} {prose.ms(v.median() / 1e3)}" for k, (v, _) in sides.items())
    + f" (the write alone, here: {prose.ms(alone_ms / 1e3)})",
    evidence=f"{sep_runs_text}; {handover_bytes / 1e6:.1f} MB of cache handed over")
mb = f"{handover_bytes / 1e6:.1f} MB of cache"
copies = "; ".join(f"{k} in **{Spread.of(v).text('.1f', 'ms')}** with {faults_of[k].median():,.0f} page faults, "
                   f"against {prose.ms(p / 1e3)}" for k, (v, p) in sides.items())
whole_hand = (f" The whole hand-over, written and read, took about "
              f"{prose.ms((hand.write_ms.median() + hand.read_ms.median()) / 1e3)} of B's "
              f"{prose.ms(hand.b_ttft_ms.median() / 1e3)} wait for its first token." if have_two else "")
show(claims.pick(
    verdict, held=f"B's {mb}, each copy about its price: {copies}. The first read's extra time is the kernel mapping new "
                  f"pages, not the copy; the whole hand-over is small beside the prefill it spares the decode worker."
                  f"{whole_hand}",
    not_held=f"B's {mb}, each copy against its price: {copies}. {off}{whole_hand}",
    unresolved=f"B's {mb}, each copy against its price: {copies}; too close to call for some of them, which more runs "
               f"would decide.{whole_hand}",
    not_measured=f"{statement} This run does not decide it: two workers did not run here, or chapter 0 measured no "
                 "one-thread copy rates."))

# %%
fig, ax = plt.subplots(figsize=(7, 4))
for r in sep.itertuples():
    ax.errorbar(r.b_ttft_ms, r.a_worst_gap_ms, yerr=[[r.a_worst_gap_ms - r.a_worst_low], [r.a_worst_high - r.a_worst_gap_ms]],
                xerr=[[r.b_ttft_ms - r.b_ttft_low], [r.b_ttft_high - r.b_ttft_ms]], fmt="o", capsize=3, label=r.way)
ax.set(xlabel="B's TTFT (ms)", ylabel="A's worst gap (ms)", yscale="log",
       title=f"{separation_model}: a {b_prompt_len}-token newcomer three ways")
ax.legend(fontsize=8)
results.figure(fig, "separation")
plt.show()

# %% [markdown]
# The published systems, beside the miniature (`data/reference/disaggregation_headlines.csv`, each as its
# paper's abstract states it, with the version).

# %%
headlines = load_reference("disaggregation_headlines")
headlines[["system", "version", "hardware", "metric", "gain"]]

# %% [markdown]
# What differs: they serve models of billions of parameters on GPUs, where a decode step reads gigabytes of
# weights and a prefill is compute-bound for thousands of tokens, so the two phases want different hardware
# and parallelism, and a fast link (NVLink, InfiniBand) moves the cache. Their gains are in requests served
# within both objectives across a cluster. Here every arrangement computes on one machine's cores, sharing
# one memory bus: one worker runs both requests on all its threads, taking turns step by step, and two workers
# run each request on a core of its own at the same time. Where one worker's threads are the same two cores,
# the miniature compares how the requests share the machine's cores (both requests on both cores, taking turns,
# against each request on a core of its own), not how many cores the machine has.
# Which arrangement won on which measure here:

# %%
def separation_verdict() -> str:
    """Which way won on A's worst gap and on B's TTFT, two workers against each one-worker way, from ``sep``."""
    if not have_two:
        return f"Two workers did not run here ({sep_missing}), so the arrangements are not compared."
    def than(col: str, w: str) -> str:
        """Two workers against way ``w`` on column ``col``, decided on the runs' intervals, not the medians."""
        a, b = spread(two, col), spread(w, col)
        return "a shorter" if a.high < b.low else "a longer" if a.low > b.high else "about the same"

    def told(col: str, w: str, noun: str) -> str:
        word = than(col, w)
        return (f"{word} {noun}" if word != "about the same" else
                f"a {noun} not told apart from it (the runs overlap)")

    said = [f"against **{w}**, two workers gave A {told('a_worst_gap_ms', w, 'worst gap')} ({gaps[two]:,.0f} against "
            f"{gaps[w]:,.0f} ms, medians) and B {told('b_ttft_ms', w, 'wait')} ({ttfts[two]:,.0f} against "
            f"{ttfts[w]:,.0f} ms)" for w, _ in settings]
    won = [w for w, _ in settings if than("a_worst_gap_ms", w) == than("b_ttft_ms", w) == "a shorter"]
    lost = [w for w, _ in settings if than("a_worst_gap_ms", w) == than("b_ttft_ms", w) == "a longer"]
    split = [w for w, _ in settings if w not in won and w not in lost]
    def ways(which: list[str]) -> str:
        return "both one-worker ways" if len(which) == len(settings) else f"**{which[0]}**"

    outcome = "; ".join(([f"two workers beat {ways(won)} on both measures"] if won else [])
                        + ([f"{ways(lost)} beat two workers on both"] if lost else [])
                        + ([f"against {ways(split)} neither way was ahead on both measures beyond the runs' spread"]
                           if split else []))
    turns = f"B's prompt whole inside one of A's steps, or in {-(-b_prompt_len // best_chunk)} pieces between them"
    cores = (f"all three ways ran on the same {n_threads} cores, so what differs is how the two requests share them, "
             f"not how many the machine has. One worker makes them take turns ({turns}); two workers give each "
             "request a core of its own"
             if n_threads == 2 else
             f"one worker ran on {n_threads} thread{'s' * (n_threads != 1)}, the two workers on one core each, so the "
             "comparison mixes how many cores the requests get with how they share them")
    text = " ".join(s[0].upper() + s[1:] + "." for s in said) + " " + outcome[0].upper() + outcome[1:] + ". " \
        + cores[0].upper() + cores[1:] + "."
    return text


show(separation_verdict())

# %% [markdown]
# **Takeaway: judge separation on both requests: A's worst gap against one worker's, chunked or not, and B's
# TTFT on the prefill worker's share of the machine, plus the cache's trip; the findings above say which way
# each went on this machine.**

# %% [markdown]
# ## 3. The queue, predicted: chapter 7's arrivals replayed
#
# Chapter 7 sent `arrivals` requests at random (Poisson) times to each engine at several rates and kept every
# request's TTFT and TPOT. `lib.replay` replays the same arrival times, prompt and output lengths through a
# scheduler, every step priced by the cost model (`lib.replay.priced_step`), and scores the replayed tokens with
# `lib.metrics`. Two schedulers: **first-come** (one request at a time, to its last token) and **token
# budget** (continuous batching: every running request decodes a token each step, and prompts fill the rest of
# the step's budget, chunked where they do not fit), with each engine's budget from chapter 7's run.

# %%
ch7, ch7_params = one_run("07_over_the_wire", ["poisson_requests", "poisson_arrivals", "concurrency_sweep", "objectives"])
ch7_requests, ch7_rates, sweep = ch7["poisson_requests"], ch7["poisson_arrivals"], ch7["concurrency_sweep"]
achieved = ({} if ch7_rates is None or "realized_per_s" not in ch7_rates else  # (engine, nominal rate) -> achieved
            {(r.engine, r.rate_per_s): r.realized_per_s for r in ch7_rates.itertuples()})


def per_s(name: str, rate: float) -> str:
    """The arrival rate chapter 7's run of engine ``name`` named ``rate`` (nominal) achieved, for a sentence."""
    return f"{achieved.get((name, rate), rate):.3g}/s"


show("chapter 7 has no arrivals here (run `python -m lib.make.book 07_over_the_wire`)" if ch7_rates is None else
     "Chapter 7 measured these median TTFTs, each at the arrival rate its run achieved: " + "; ".join(
         f"{name}: " + ", ".join(f"{r.ttft_ms:,.0f} ms at {per_s(name, r.rate_per_s)}" for r in g.itertuples())
         for name, g in ch7_rates.groupby("engine", sort=False)) + ".",
     how=None if not achieved else "Chapter 7 names each run by the rate it drew its Poisson arrivals at (nominal): "
     + "; ".join(f"{name}: " + ", ".join(f"{r.rate_per_s:g}/s" for r in g.itertuples())
                 for name, g in ch7_rates.groupby("engine", sort=False))
     + ". The folds below name the runs by these nominal rates; the sentences give the rates achieved.")

# %%
def served_alone(name: str) -> str | None:
    """One of chapter 7's typical requests served alone by the cost model on engine ``name``'s cores, and the
    busiest rate's arrivals against it (None where chapter 0 did not measure those cores or chapter 7 kept no
    traces)."""
    m = cost_model(MODEL, compute_threads(name, ch7_params.get("threads") or n_threads))
    if m is None or ch7_requests is None:
        return None
    mine_ = ch7_requests[(ch7_requests.engine == name) & ch7_requests.ok]
    if not len(mine_):
        return None
    prompt, out = int(mine_.prompt_tokens.median()), int(mine_.output_tokens.median())
    prefill_s = replay.priced_step(m, replay.Step(((prompt, 0),))).best
    step_s = replay.priced_step(m, replay.Step(contexts=(prompt + out // 2,))).best
    alone_s = prefill_s + (out - 1) * step_s
    budget = {"transformers serve": ch7_params.get("tf_batch_tokens", 512),
              "vLLM": (ch7_params.get("vllm_budgets") or [2048])[0]}.get(name)
    top = achieved.get((name, mine_.rate_per_s.max()), mine_.rate_per_s.max())
    lowest = achieved.get((name, mine_.rate_per_s.min()), mine_.rate_per_s.min())
    return ((name if name[1:2].isupper() else name[:1].upper() + name[1:])
            + (f" (a token budget of {budget} per step)" if budget else "")
            + f": a request of {prompt} prompt tokens and {out} output "
            f"tokens is priced at {prose.ms(prefill_s)} of prefill and {prose.ms(step_s)} a decode step, "
            f"**{prose.ms(alone_s)}** served alone. At the busiest {top:.3g} arrivals a second, serving them one after "
            f"another would need **{top * alone_s:.1f} seconds of serving per second**." + utilisation(lowest, alone_s))


def utilisation(rate: float, alone_s: float) -> str:
    """A queue's **utilisation** at ``rate`` arrivals a second of requests that take ``alone_s`` seconds each, and what
    it predicts of a first-come queue's wait (a clause to end a sentence with)."""
    u = rate * alone_s
    if u >= 1:
        return (f" At the lowest rate, {rate:.3g}/s x {prose.ms(alone_s)} gives a **utilisation** (arrival rate times "
                f"a request's service time) of {u:.1f}. At 1 or more, a first-come queue serving one request at a time "
                "is overloaded: its wait grows with every arrival.")
    wait = u / (2 * (1 - u)) * alone_s  # Poisson arrivals, one fixed service time (M/D/1)
    return (f" At the lowest rate, {rate:.3g}/s x {prose.ms(alone_s)} gives a **utilisation** (arrival rate times a "
            f"request's service time) of {u:.2f}. Below 1, a first-come queue's mean wait is about u / (2 (1 - u)) "
            f"service times for Poisson arrivals and one fixed service time: {prose.ms(wait)} here.")


if ch7_rates is not None:
    alone_lines = [x for x in (served_alone(n) for n in ch7_rates.engine.unique()) if x]
    show("Priced by the cost model on each engine's cores. " + " ".join(alone_lines)
         if alone_lines else "chapter 0 measured no ceilings for the engines' cores: nothing here is priced")

# %% [markdown] tags=["predict"]
# **Predict first.** Chapter 7's closed loop found each engine's total tokens per second rising with its users
# (its batching claims). The lines above give the median TTFT it measured at each rate, what one request costs
# served alone, and what the busiest rate would ask of a server that served them one after another. Which replay do
# you expect to come closer to the engines' median TTFT at the highest rate, first-come or token budget, and do
# you expect the first-come replay's TTFT there to be above or below what was measured?

# %% [markdown]
# <details><summary>The book's prediction (open it once you have written yours)</summary>
#
# The token-budget replay, not the first-come one, matches what the engines did (both
# batch continuously).
#
# </details>

# %%
display(prose.source(replay.replay))

# %% [markdown]
# The replay of every engine and rate chapter 7 measured:

# %%
ch7_threads = ch7_params.get("threads") or n_threads
engine_costs = {name: cost_model(MODEL, compute_threads(name, ch7_threads)) for name in ("transformers serve", "vLLM")}
engine_cost = engine_costs["transformers serve"]
fallback_goals = objectives.objectives(cpu, ch7_params.get("ttft_slo_ms"), ch7_params.get("tpot_slo_ms"))
goals = {} if ch7.get("objectives") is None else {  # chapter 7's, set from one user alone on each engine
    r.engine: objectives.Objectives(r.ttft_slo_ms / 1e3, r.tpot_slo_ms / 1e3, None, ()) for r in ch7["objectives"].itertuples()}
budgets = {"transformers serve": ch7_params.get("tf_batch_tokens", 512),
           "vLLM": (ch7_params.get("vllm_budgets") or [2048])[0], "server": None}
replay_missing = ("chapter 7 has not kept per-request traces here (run `python -m lib.make.book 07_over_the_wire`)"
                  if ch7_requests is None else None) or (
    f"chapter 0 measured no ceilings for {MODEL} on {ch7_threads} threads" if engine_cost is None else None)


def scored(times_ms: pd.DataFrame, name: str) -> dict:
    """p50 and p99 TTFT, median TPOT (ms), and goodput in requests (fraction meeting both objectives) and in tokens
    (output tokens of those requests per second of the run) of one engine and rate."""
    goal = goals.get(name, fallback_goals)
    good = (times_ms.ttft_ms <= goal.ttft_ms) & (times_ms.tpot_ms.fillna(0) <= goal.tpot_ms)
    span_s = (times_ms.offset_s + times_ms.e2e_ms / 1e3).max() - times_ms.offset_s.min()
    return dict(ttft_p50_ms=times_ms.ttft_ms.median(), ttft_p99_ms=np.percentile(times_ms.ttft_ms, 99),
                tpot_ms=times_ms.tpot_ms.median(), goodput=good.mean(),
                goodput_tokens_per_s=times_ms.output_tokens[good].sum() / span_s)


CALIBRATED = "token budget, the engine's own costs"


def calibration(name: str, engine_cost: costmodel.CostModel) -> tuple[float, float] | None:
    """(k, overhead_s) that make the replay of one request alone give chapter 7's TPOT and TTFT of one user on
    engine ``name`` (its closed loop's single user: the arrivals' own prompt and length): every step priced at k
    times the cost model, and overhead_s added before the request reaches the scheduler (HTTP, the template,
    tokenising). None where chapter 7 has no such row."""
    one = sweep[(sweep.engine == name) & (sweep.concurrency == 1)] if sweep is not None else ()
    if not len(one) or ch7_requests is None:
        return None
    r = one.iloc[0]
    prompt = int(ch7_requests[ch7_requests.engine == name].prompt_tokens.median())
    out = int(ch7_params.get("load_tokens", 16))
    step = replay.priced_step(engine_cost, replay.Step(contexts=(prompt + out // 2,))).best  # on the engine's cores
    k = r.tpot_ms / 1e3 / step
    return k, r.ttft_ms / 1e3 - k * replay.priced_step(engine_cost, replay.Step(((prompt, 0),))).best

# %%
def replayed_frame(arrivals_: list, served: list, shift: float = 0.0) -> pd.DataFrame:
    """The replayed requests' figures in ms, each timed from its arrival in chapter 7 (``shift`` s earlier than
    the arrival the replay saw)."""
    ms = [metrics.request_metrics(s.arrival.at - shift, s.token_times) for s in served]
    return pd.DataFrame(dict(offset_s=[a.at for a in arrivals_], output_tokens=[a.output for a in arrivals_],
                             ttft_ms=[m.ttft * 1e3 for m in ms], tpot_ms=[(m.tpot or 0) * 1e3 for m in ms],
                             e2e_ms=[(s.token_times[-1] - s.arrival.at + shift) * 1e3 for s in served]))


replay_rows, calibrations = [], {}
prices = {name: functools.lru_cache(maxsize=None)(lambda step, m=m: replay.priced_step(m, step).best)  # steps repeat
          for name, m in engine_costs.items() if m is not None}
measured_ms = {}  # (engine, rate) -> the requests' TTFT and TPOT, each a Spread over requests (ms)
one_by_one = {}  # (engine, rate, scheduler) -> the replayed requests one by one (ms)
for (name, rate), g in ([] if replay_missing else ch7_requests[ch7_requests.ok].groupby(["engine", "rate_per_s"], sort=False)):
    g = g.sort_values("request")
    price = prices.get(name, prices.get("transformers serve"))
    measured_ms[(name, rate)] = {"ttft_p50_ms": Spread.of(g.ttft_ms), "tpot_ms": Spread.of(g.tpot_ms.dropna())}
    measured = g.assign(e2e_ms=g.ttft_ms + g.tpot_ms.fillna(0) * (g.output_tokens - 1))
    replay_rows.append(dict(engine=name, rate_per_s=rate, scheduler="measured", **scored(measured, name)))
    arrivals_ = [replay.Arrival(float(r.offset_s), int(r.prompt_tokens), int(r.output_tokens)) for r in g.itertuples()]
    calibrations[name] = calibration(name, engine_costs.get(name) or engine_cost)
    ways = [(replay.FIRST_COME, dict(max_seqs=1), 1.0, 0.0), (replay.TOKEN_BUDGET, dict(budget=budgets.get(name)), 1.0, 0.0)]
    if calibrations[name]:
        ways.append((CALIBRATED, dict(budget=budgets.get(name)), *calibrations[name]))
    for scheduler, kw, k, shift in ways:
        moved = [replay.Arrival(a.at + shift, a.prompt, a.output) for a in arrivals_]
        served = replay.replay(moved, lambda step: k * price(step), **kw)
        one_by_one[(name, rate, scheduler)] = replayed_frame(arrivals_, served, shift).assign(
            request=g.request.to_numpy(), wait_ms=[s.wait * 1e3 for s in served])  # for the misses, one layer down
        replay_rows.append(dict(engine=name, rate_per_s=rate, scheduler=scheduler,
                                **scored(replayed_frame(arrivals_, served, shift), name),
                                wait_ms=np.mean([s.wait for s in served]) * 1e3,
                                prefill_ms=np.mean([s.prefill for s in served]) * 1e3))
replayed = pd.DataFrame(replay_rows, columns=["engine", "rate_per_s", "scheduler", "ttft_p50_ms", "ttft_p99_ms",
                                              "tpot_ms", "goodput", "goodput_tokens_per_s", "wait_ms", "prefill_ms"])
if ch7_rates is not None and "server_queue_ms" in ch7_rates:
    split = ch7_rates[["engine", "rate_per_s", "server_queue_ms", "server_prefill_ms"]].assign(scheduler="measured")
    replayed = replayed.merge(split, on=["engine", "rate_per_s", "scheduler"], how="left")
    replayed["wait_ms"] = replayed.wait_ms.fillna(replayed.pop("server_queue_ms"))
    replayed["prefill_ms"] = replayed.prefill_ms.fillna(replayed.pop("server_prefill_ms"))
_ = results.table(replayed, "replay")

# %%
show(replay_missing or "The replays are scored against chapter 7's objectives, and the third is priced at each "
     "engine's own one-user costs.", how=None if replay_missing else "Objectives (chapter 7's): " + "; ".join(f"{n}: TTFT <= {g.ttft_ms:.0f} ms, TPOT <= {g.tpot_ms:.0f} ms"
                                                               for n, g in (goals or {"all": fallback_goals}).items()) + "; "
      + "; ".join(f"{n}: steps at {c[0]:.2f}x the cost model, {abs(c[1]) * 1e3:.0f} ms "
                  f"{'added' if c[1] >= 0 else 'taken off'} before the scheduler" for n, c in calibrations.items() if c)
      + ("" if not any(c and c[1] < 0 for c in calibrations.values()) else
         " (the time before the scheduler is one user's TTFT less its prefill priced at the steps' factor; it is "
         "taken off where the engine's prefill ran faster than that factor says)") + ".")
prose.shown(replayed.round(1).assign(goodput=replayed.goodput.round(2)))  # a fraction: two places

# %% [markdown]
# For vLLM, the measured rows' `wait_ms` and `prefill_ms` are the engine's own means (its
# `request_queue_time` and `request_prefill_time` histograms over each rate's requests, which chapter 7 read);
# the replay's are its own queue wait and prefill. The third replay, **the engine's own costs**, tells the parts
# apart. Every step is priced at the factor that makes a lone request decode at the engine's TPOT for one user
# (chapter 7's closed loop of one user, with the same prompt and length as the arrivals). The rest of that
# request's TTFT is added before the scheduler sees a request. Where it lands and the cost model's replay does not, the passes were priced wrong and the queueing
# and batching right. Decided per engine:

# %%
def batching_sentence(name: str) -> tuple[str, str | None]:
    """Chapter 7's closed loop one layer down: how much an engine's TPOT grew from one user to the most, against
    how much the cost model's step grows from one sequence to that many: (the sentence, ``"as priced"``,
    ``"cheaper"``, ``"dearer"`` or ``None`` where chapter 7 has no such loop)."""
    g = sweep[sweep.engine == name].sort_values("concurrency") if sweep is not None else ()
    if len(g) < 2 or g.concurrency.iloc[0] != 1:
        return "chapter 7 has no closed loop from one user here to tell how the engine's step grows with its batch", None
    top = int(g.concurrency.iloc[-1])
    if "priced_step_ms" in g and g.priced_step_ms.notna().all():  # chapter 7's own price, quoted as it printed it
        priced, whose = g.priced_step_ms.iloc[-1] / g.priced_step_ms.iloc[0], "chapter 7's price of one step"
    else:  # a chapter 7 table from before it kept its price: this chapter's, at the arrivals' prompt length
        context = int(ch7_requests.prompt_tokens.median()) + int(ch7_params.get("load_tokens", 16)) // 2
        price = prices.get(name, prices.get("transformers serve"))
        priced = price(replay.Step(contexts=(context,) * top)) / price(replay.Step(contexts=(context,)))
        whose = f"the cost model's step at the arrivals' {context} tokens of context"
    grew = g.tpot_ms.iloc[-1] / g.tpot_ms.iloc[0]
    x, tol, margin = grew / priced, claims.PREDICTED_RATIO, 1 + claims.NOISE  # one ratio of medians: no interval,
    kind = ("as priced" if 1 / tol * margin <= x <= tol / margin else  # so within the noise of an edge is no answer
            "cheaper" if x < 1 / tol / margin else "dearer" if x > tol * margin else "edge")
    rest = ("" if round(grew, 2) <= round(priced, 2) else  # chapter 7's reading of any growth beyond the price
            "; what the TPOT grew beyond that is what chapter 7 reads as the newcomers' prefills run between steps")
    return (f"One layer down, in chapter 7's closed loop the engine's TPOT grew {grew:.2f}x from 1 user to {top}, where "
            f"{whose} grows {priced:.2f}x from 1 sequence to {top}. "
            + {"as priced": f"That is within the tolerance of that growth, so the engine's steps batch about as the "
                            f"model prices them{rest}",
               "edge": f"That is {x:.2f}x the model's growth, too close to {tol if x > 1 else 1 / tol:.2f}x to say "
                       "whether the engine batches "
                       "as priced (one ratio of medians, with no range)",
               "cheaper": "The engine's TPOT grew less than the model's step. A closed loop's TPOT also carries the "
                          "newcomers' prefills between steps, and this chapter does not time the engine's own kernels, "
                          "so which part batches better is not measured here",
               "dearer": "The engine's TPOT grew more than the model's step. A closed loop's TPOT also carries the "
                         "newcomers' prefills between steps, and this chapter does not time the engine's own work per "
                         "sequence and step, so which part costs more is not measured here"}[kind]), kind


key_at = {}  # a ratio's name ("TTFT at 0.8/s") -> (rate, the latency's column)


def ratios_of(name: str, pred: pd.DataFrame) -> dict[str, Spread]:
    """Measured over replayed, per rate and latency: the measured median's 95 % interval over the rate's requests,
    over the replay's value."""
    out = {}
    for rate in pred.index:
        for col in ("ttft_p50_ms", "tpot_ms"):
            if pred.loc[rate, col] > 0 and (name, rate) in measured_ms and measured_ms[(name, rate)][col].n:
                key = f"{col.split('_')[0].upper()} at {rate:g}/s"
                key_at[key] = (rate, col)
                out[key] = measured_ms[(name, rate)][col] / float(pred.loc[rate, col])
    return out

# %%
def requests_apart(name: str, rate: float) -> str:
    """One layer below a TTFT miss of the engine's-own-costs replay: chapter 7's requests at ``rate`` one by one, those
    that arrived while another was being served (by chapter 7's own times) against those that arrived alone, each
    against its own replay."""
    g = ch7_requests[ch7_requests.ok & (ch7_requests.engine == name) & (ch7_requests.rate_per_s == rate)]
    rep = one_by_one.get((name, rate, CALIBRATED))
    if rep is None or not len(g):
        return ""
    g = g.merge(rep, on="request", suffixes=("", "_replayed"))
    lat = "ttft_ms"  # a request's first token, which arriving beside others can delay
    ends = g.offset_s + (g.ttft_ms + g.tpot_ms.fillna(0) * (g.output_tokens - 1)) / 1e3
    g["busy"] = [bool(((g.offset_s < at) & (ends > at)).any()) for at in g.offset_s]
    g["extra"] = g[lat] - g[f"{lat}_replayed"]
    busy, alone = g[g.busy], g[~g.busy]
    lowest = rate == ch7_requests[ch7_requests.engine == name].rate_per_s.min() and len(busy)
    head = (("Chapter 7's arrivals are one seeded pattern at every rate, only spaced wider, so some overlap even at "
             "the lowest rate. " if lowest else "") + f"Request by request at {per_s(name, rate)}, ")
    if not len(busy) or not len(alone):
        return head + (f"all {len(g)} requests arrived {'while another was being served' if len(busy) else 'alone'}, "
                       "so the requests cannot tell the engine's work per request from how it serves several at once; "
                       "arrivals at other spacings would")
    def off(ms: float) -> str:
        return f"{abs(ms):.0f} ms {'longer' if ms > 0 else 'shorter'}"
    said = (f"the {len(busy)} that arrived while another was being served took a median {off(busy.extra.median())} "
            f"than their replay on the engine's own costs (which queued them {busy.wait_ms.mean():.0f} ms on average); "
            f"the {len(alone)} that arrived alone, {off(alone.extra.median())}")
    if busy.extra.median() > 0 and abs(busy.extra.median()) > 2 * abs(alone.extra.median()):
        return head + said + (". So the miss is in requests that joined others already being served, which the replay "
                              "prices as sharing one step. How the engine admits a request beside running ones (a "
                              "later step for it, or slower steps once it joins), these traces cannot split; the "
                              "engine's own log of its steps would")
    alone_ratio = (alone[lat] / alone[f"{lat}_replayed"]).median()
    if len(alone) >= 3 and not 1 / claims.PREDICTED_TIME <= alone_ratio <= claims.PREDICTED_TIME:
        moved = load_table("07_over_the_wire", "pace", quick=quick)
        moved = "" if moved is None or len(moved) < 2 or moved.ratio.max() / moved.ratio.min() <= 1 + 2 * claims.NOISE \
            else (f", or in the machine's speed, which moved from {moved.ratio.min():.2f}x to {moved.ratio.max():.2f}x "
                  "chapter 0's time for the same matrices while chapter 7 ran (its pace check)")
        return head + said + (f". Even alone the requests took {alone_ratio:.2f}x their replay (median of "
                              f"{len(alone)}), and those beside others no more than twice as much, so the miss lies "
                              "in the engine's work per request beyond what one user alone showed, not in its queue"
                              + moved)
    return head + said + ". Neither group stands out, so these traces do not locate the miss; the engine's own log " \
                         "of its steps would"


def by_latency(ratios: dict[str, Spread]) -> dict[str, Spread]:
    """The geometric mean over the rates of each latency's ratios ("TTFT", "TPOT"), kept apart: a TTFT replayed
    too short and a TPOT replayed too long must not cancel."""
    kinds = dict.fromkeys(k.split()[0] for k in ratios)
    return {kind: claims.geomean_of([v for k, v in ratios.items() if k.split()[0] == kind]) for kind in kinds}


def verdict_of_ratios(ratios: dict[str, Spread]) -> str:
    """The replay as a whole: each latency's geometric mean over the rates (:func:`by_latency`) within the
    tolerance for a predicted time."""
    return claims.every(claims.within(v, 1.0, claims.PREDICTED_TIME) for v in by_latency(ratios).values())

# %%
def inside(ratios: dict[str, Spread]) -> bool:
    return bool(ratios) and verdict_of_ratios(ratios) == claims.HELD


pooled_of = {}  # engine -> (measured over replayed, TTFT's and TPOT's, and its claim)
for name in ([] if replay_missing else replayed.engine.unique()):
    g = replayed[replayed.engine == name]
    by = {k: g[g.scheduler == k].set_index("rate_per_s") for k in ("measured", replay.TOKEN_BUDGET, CALIBRATED)}
    got, pred, cal = by["measured"], by[replay.TOKEN_BUDGET], by[CALIBRATED]
    ratios = ratios_of(name, pred)
    cal_ratios = ratios_of(name, cal) if len(cal) else {}
    k, overhead = calibrations[name] or (np.nan, np.nan)
    batch_text, kind = batching_sentence(name)
    worst = max(cal_ratios, key=lambda c: abs(np.log(cal_ratios[c].mid))) if cal_ratios else None
    cal_pooled, unc_pooled = (by_latency(cal_ratios), by_latency(ratios)) if cal_ratios else ({}, {})
    on_own = ("Replayed on the engine's own costs, its measured " + " and ".join(
        f"{kind} came to {v.mid:.2f}x" for kind, v in cal_pooled.items()) + " the replayed ones across the rates") \
        if cal_ratios else ""
    worst_said = "" if not cal_ratios else (f" The furthest single rate was {worst.split()[0]} at "
                                            f"{per_s(name, key_at[worst][0])}, {cal_ratios[worst].mid:.2f}x.")
    further = [kind for kind, v in cal_pooled.items()
               if kind in unc_pooled and abs(np.log(v.mid)) > abs(np.log(unc_pooled[kind].mid))]
    moved_off = ("" if not further else " Calibrating on one user's costs moved " + " and ".join(
        f"{kind} further off ({cal_pooled[kind].mid:.2f}x against {unc_pooled[kind].mid:.2f}x on the cost model's)"
        for kind in further) + ": what one user alone costs the engine does not carry over to it under load.")
    if not cal_ratios:
        which = "Chapter 7 has no one-user row for this engine, so the parts cannot be told apart."
    elif inside(cal_ratios):
        which = (f"{on_own}: as predicted.{worst_said} So "
                 f"most of what is off is the price of a pass. This engine's steps cost {k:.2f}x the cost model's, "
                 f"and its TTFT is {abs(overhead) * 1e3:.0f} ms {'longer' if overhead > 0 else 'shorter'} than its "
                 "steps alone.")
    else:
        which = (f"{on_own}: " + (f"still off.{worst_said} So more than the price of a pass is wrong: "
                                  if verdict_of_ratios(cal_ratios) == claims.NOT_HELD else
                                  f"not clearly as predicted.{worst_said} So more than the price of a pass may be wrong: ")
                 + ("the engine's batched steps, which grow unlike the priced ones (below)." if kind in ("cheaper", "dearer") else
                    "not its batching, which grows as priced (below)." if kind == "as priced" else
                    "the batching, or how the engine queues and admits requests.")) + moved_off
    apart = requests_apart(name, key_at[worst][0]) if worst and not inside(cal_ratios) and worst.startswith("TTFT") else ""
    below = [x for x in ((apart + ".") if apart else "", batch_text + ".") if x]  # one layer down: whom it waited for, the batch
    if name == "vLLM" and pd.notna(got.wait_ms).all():
        below.append("In its own metrics, vLLM splits its TTFT into time queued (until a step takes the request) and time prefilling "
                     "(until its first token): " + ", ".join(f"{got.loc[r, 'wait_ms']:.0f} + {got.loc[r, 'prefill_ms']:.0f} ms "
                     f"at {per_s(name, r)}" for r in got.index) + ". The replay on the engine's own costs splits it "
                     + ", ".join(f"{cal.loc[r, 'wait_ms']:.0f} + {cal.loc[r, 'prefill_ms']:.0f}" for r in cal.index)
                     + f". The CPU build of vLLM computes on {compute_threads(name, ch7_threads)} of this machine's "
                       f"{ch7_threads} cores, keeping one for its server and scheduler, and is priced on those.")
    claim = f"replay_predicts_the_queue_{name.split()[0].lower()}"
    statement = (f"{name}: the token-budget replay's median TTFT and median TPOT are what chapter 7 measured, within "
                 "the tolerance for a predicted time (for each of the two, the geometric mean over the rates of measured "
                 "over replayed, each measured median with its interval over the rate's requests).")
    register.claim(claim, statement)
    verdict = register.record(
        claim, verdict_of_ratios(ratios) if ratios else None,
        predicted=", ".join(f"{r:g}/s: TTFT {pred.loc[r, 'ttft_p50_ms']:.0f}, TPOT {pred.loc[r, 'tpot_ms']:.0f} ms"
                            for r in pred.index),
        measured=", ".join(f"{r:g}/s: TTFT {got.loc[r, 'ttft_p50_ms']:.0f}, TPOT {got.loc[r, 'tpot_ms']:.0f} ms"
                           for r in got.index),
        evidence=f"chapter 7's {len(ch7_requests[ch7_requests.engine == name])} requests; a token budget of "
                 f"{budgets.get(name)} per step; each step at the cost model's fastest price on "
                 f"{compute_threads(name, ch7_threads)} thread{'s' * (compute_threads(name, ch7_threads) != 1)}")
    pooled = by_latency(ratios)
    far = [kind for kind, v in pooled.items() if not 1 / claims.PREDICTED_TIME <= v.mid <= claims.PREDICTED_TIME]
    came_to = (f"Against the token-budget replay, {name}'s measured "
               + " and ".join(f"{kind} came to **{v.text('.2f', 'x')}**" for kind, v in pooled.items())
               + " the replayed ones, across the rates")
    show(claims.pick(
        verdict, held=f"{came_to}: as predicted. The scheduler's queueing and batching, priced step by step, are this "
                      "engine's latencies.",
        not_held=f"{came_to}: not as predicted. {which}",
        unresolved=f"{came_to}: too close to call ("
                   + (prose.and_list(f"{kind} " + (f"below {1 / claims.PREDICTED_TIME:.2f}x" if pooled[kind].mid < 1
                                                   else f"beyond {claims.PREDICTED_TIME:.2f}x") for kind in far)
                      + " at the median" if far else
                      f"{'both' if len(pooled) > 1 else 'it'} within {claims.PREDICTED_TIME:g}x at the median")
                   + f"). {which}",
        not_measured=f"There is nothing to replay for {name} here: "
                     f"{replay_missing or 'chapter 7 has no request to compare'}."),
        how=None if not ratios else
        "Measured over replayed, rate by rate (each measured median with its 95 % interval over the rate's requests): "
        + ", ".join(f"{c} {v.text('.2f', 'x')}" for c, v in ratios.items())
        + f". Each latency's geometric mean over the rates is held to {1 / claims.PREDICTED_TIME:.2f}–"
          f"{claims.PREDICTED_TIME:.2f}x (the tolerance for a predicted time)"
        + ("" if not cal_ratios else "; on the engine's own costs the replay gives "
           + ", ".join(f"{c} {v.mid:.2f}x" for c, v in cal_ratios.items())) + ".")
    if below and verdict != claims.HELD and verdict != claims.NOT_MEASURED:
        show("\n\n".join(below))
    if ratios:
        pooled_of[name] = by_latency(ratios), claim  # for the opening

# %% [markdown]
# Measured, replayed and calibrated latencies, side by side for each engine:

# %%
if replay_missing:
    statement = "The token-budget replay predicts each engine's median TTFT and TPOT within the stated tolerance."
    register.claim("replay_predicts_the_queue", statement)
    register.record("replay_predicts_the_queue", None, evidence=f"nothing to replay here: {replay_missing}")
    show(f"{statement} This run does not decide it: nothing to replay here: {replay_missing}")

# %%
fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
styles = {"measured": "o-", replay.TOKEN_BUDGET: "s--", replay.FIRST_COME: "^:", CALIBRATED: "x-."}
for (name, scheduler), g in replayed.groupby(["engine", "scheduler"], sort=False):
    left.plot(g.rate_per_s, g.ttft_p50_ms, styles[scheduler], label=f"{name}, {scheduler}")
    right.plot(g.rate_per_s, g.goodput_tokens_per_s, styles[scheduler], label=f"{name}, {scheduler}")
left.set(xscale="log", yscale="log", xlabel="arrival rate (requests / s)", ylabel="median TTFT (ms)",
         title="chapter 7's arrivals: measured and replayed")
right.set(xscale="log", xlabel="arrival rate (requests / s)", ylabel="goodput (tokens / s within objectives)",
          title="goodput in tokens")
if len(replayed):
    left.legend(fontsize=7)
else:
    left.text(0.5, 0.5, "nothing replayed here", ha="center", transform=left.transAxes)
fig.tight_layout()
results.figure(fig, "replay")
plt.show()

# %% [markdown]
# ### How many requests the engine holds: Little's law
#
# Part of each TTFT in the figure is time a request waited for others.
# [Little's law](glossary.md#littles-law) ties such a wait to a count. Take a stretch of time that starts and ends
# with no request in the system. The mean number of requests in it, L, is the rate they arrived at, λ, times the
# mean time each spent in it, W: **L = λW**, whatever the arrivals and the scheduler. Both sides add up the same
# request-seconds. Each of chapter 7's runs is such a stretch, from its first arrival to its last token; the
# requests that finished, rate by rate, are in the table below.

# %%
def stays(g: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each request's arrival and last token (s from its run's start): chapter 7's offset, then its TTFT and a TPOT
    for every token after the first."""
    ends = g.offset_s + (g.ttft_ms + g.tpot_ms.fillna(0) * (g.output_tokens - 1)) / 1e3
    return g.offset_s.to_numpy(float), ends.to_numpy(float)


little_rows, intervals = [], {}  # intervals: (engine, rate) -> (arrivals, last tokens) of the finished requests
for (name, rate), g in ([] if ch7_requests is None else ch7_requests.groupby(["engine", "rate_per_s"], sort=False)):
    arrive, end = intervals[(name, rate)] = stays(g[g.ok])
    if len(arrive) and end.max() > arrive.min():
        window = end.max() - arrive.min()  # no request of the run in the engine at either end
        little_rows.append(dict(engine=name, rate_per_s=rate, requests=len(arrive), failed=int((~g.ok).sum()),
                                arrivals_span_s=arrive.max() - arrive.min(), window_s=window,
                                arrivals_per_s=len(arrive) / window, mean_in_engine_s=(end - arrive).mean()))
little = pd.DataFrame(little_rows, columns=["engine", "rate_per_s", "requests", "failed", "arrivals_span_s", "window_s",
                                           "arrivals_per_s", "mean_in_engine_s"])
if not len(little):
    print("chapter 7 kept no finished request here (run `python -m lib.make.book 07_over_the_wire`)")
prose.shown(little.drop(columns="arrivals_span_s"), {"window_s": 2, "arrivals_per_s": 2, "mean_in_engine_s": 2})

# %% [markdown] tags=["predict"]
# **Predict first.** Take one engine's lowest rate in the table: its requests arrived at *arrivals (per s)* over
# the window and each spent *mean in engine (s)* in the engine. How many requests were in the engine on average?
# And from its lowest rate to its busiest, do you expect that count to grow by more or by less than the arrivals
# per second did?

# %% [markdown]
# <details><summary>The book's prediction (open it once you have written yours)</summary>
#
# The product of the two, to the last digit. By more: near its capacity each request also waits longer, so W
# grows with λ, and L with both.
#
# </details>
#
# The count, from each request's interval (one more in the engine at each arrival, one fewer at each last token):

# %%
def in_flight_counted(arrive: np.ndarray, end: np.ndarray) -> tuple[float, int]:
    """The mean number of requests in the engine over the window from the first arrival to the last token (the
    area under the count, over the window's length), and the most at once."""
    t = np.concatenate([arrive, end])
    step = np.concatenate([np.ones(len(arrive)), -np.ones(len(end))])
    order = np.lexsort((step, t))  # at one instant, a last token before an arrival
    t, n = t[order], np.cumsum(step[order])
    return float((n[:-1] * np.diff(t)).sum() / (t[-1] - t[0])), int(n.max())


counted = [in_flight_counted(*intervals[(r.engine, r.rate_per_s)]) for r in little.itertuples()]
little["in_flight"], little["most_at_once"] = [c[0] for c in counted], [c[1] for c in counted]
little["rate_times_time"] = little.arrivals_per_s * little.mean_in_engine_s
claims.invariant(bool(np.allclose(little.in_flight.astype(float), little.rate_times_time.astype(float), rtol=1e-9)),
                 "Little's law: the requests counted in flight over a window that starts and ends empty must equal "
                 "its arrivals per second times their mean time in the engine")


def changed(x: float) -> str:
    return f"grew {x:.1f}x" if x >= 1 else f"fell {1 / x:.1f}x"


for name, g in little.groupby("engine", sort=False):
    low, top = g.loc[g.rate_per_s.idxmin()], g.loc[g.rate_per_s.idxmax()]
    both = [low] if top.rate_per_s == low.rate_per_s else [low, top]
    text = (f"Counted from {name}'s traces, the engine held on average " + " and ".join(
        f"**{r.in_flight:.1f} requests** in its {'quietest' if r is low else 'busiest'} run" for r in both)
        + ". Over each run's window (its first arrival to its last token), the arrivals per second counted over that "
        "window times their mean time in the engine give the same: " + " and ".join(
            f"{r.arrivals_per_s:.2f}/s over its window × {r.mean_in_engine_s:.2f} s = {r.rate_times_time:.1f}"
            for r in both) + ".")
    if len(both) == 2:
        rate_x, count_x, wait_x = (top[c] / low[c] for c in ("arrivals_per_s", "in_flight", "mean_in_engine_s"))
        text += (f" From the quietest run to the busiest the arrivals per second over each window {changed(rate_x)} "
                 f"and the count "
                 f"{changed(count_x)}" + (
                     f", more than the rate because each request's time in the engine {changed(wait_x)} as well. "
                     "As arrivals outpace what the engine serves, each request waits longer, so the engine holds more "
                     "requests, each with its KV cache, at once." if wait_x > 1 + claims.NOISE else
                     f", while each request's time in the engine changed only {wait_x:.2f}x: at a steady W the count "
                     "follows the rate alone, and outgrows it only once the wait grows, as arrivals near what the "
                     "engine serves."
                     if wait_x >= 1 - claims.NOISE else f", while each request's time in the engine "
                     f"{changed(wait_x)}, so the count moved less than the rate did (L = λW)."))
    named = top.rate_per_s * top.mean_in_engine_s
    show(text, how="Each window runs from a run's first arrival to its last token: " + "; ".join(
        f"at {r.rate_per_s:g}/s, {r.requests} requests over {r.window_s:.1f} s, counted {r.in_flight:.3f} against "
        f"{r.arrivals_per_s:.3f}/s over the window × {r.mean_in_engine_s:.3f} s = {r.rate_times_time:.3f}, at most "
        f"{r.most_at_once} "
        "at once" + (f" ({prose.count(r.failed, 'failed request')}, with no last token, left out of both)" if r.failed else "")
        for r in g.itertuples()) + f". The rate chapter 7 names its busiest run by, {top.rate_per_s:g}/s, times the "
        f"mean time in the engine would give {named:.1f}, {named / top.in_flight:.1f}x the count: its {top.requests} "
        f"arrivals came within {top.arrivals_span_s:.1f} s of a {top.window_s:.1f} s window, and the law needs the "
        "rate over the same window as the count.")

# %% [markdown]
# Every price in this chapter is made of chapter 0's ceilings, measured minutes or an hour before. The same
# one-row matrices chapter 0 timed, timed again before the first experiment and after the replay
# (`lib.machine.pace`), say whether the machine itself ran at another speed meanwhile.

# %%
pacer.check("after the replay")
show(pacer.claim(register, results, "this chapter's experiments"))

# %% [markdown]
# **Takeaway: to predict a scheduler's queue, replay its arrivals with every step priced. Where the replay
# misses, price the steps at the engine's own one-user costs to tell a wrong price of a pass from the rest, and
# read the requests one by one to find which of them took the time.**
#
# ## 4. Beyond one machine, with the real engines
#
# The miniature is the lesson; the tools are vLLM's and SGLang's own disaggregated serving and their prefix
# caches. With `base_url` set to one router in front of separately started prefill and decode deployments, this
# chapter measures the reuse table above against it, and chapter 5's stall below. Running them here would need
# two accelerators with a fast link between them and a KV-cache transport (NIXL or Mooncake's transfer engine),
# none of which a 2-core CPU has.

# %%
if base_url:
    filler_b = lm.tokenizer("The quick brown fox jumps over the lazy dog. " * (b_prompt_len // 5 + 10),
                            add_special_tokens=False).input_ids
    b_chat = [{"role": "user", "content": "Request to the deployment. " + lm.tokenizer.decode(filler_b[:b_prompt_len])}]
    timeout_s = server_budgets["server"].timeout_s()
    with server_budgets["server"].request():
        a, b = stall_experiment(base_url, client.require_model(base_url, served_names), [{"role": "user", "content": "Tell a long story."}],
                                a_tokens, b_chat, arrival_step, timeout_s=timeout_s)
    server_budgets["server"].check(a), server_budgets["server"].check(b)
    deployment = pd.DataFrame([dict(a_worst_gap_ms=a.metrics().worst_gap * 1e3, a_median_gap_ms=a.metrics().median_gap * 1e3,
                                    b_ttft_ms=b.metrics().ttft * 1e3)]) if a.ok and b.ok else pd.DataFrame([dict(error=a.error or b.error)])
    results.table(deployment, "deployment_stall")
    display(prose.shown(deployment.round(1)))
else:
    print("No base_url: the deployment's stall is not measured (the Try it section says how).")

# %% [markdown]
# ## What these numbers do not show
#
# * **One small model on a shared CPU.** A 135M-parameter model's prefix of a few hundred tokens is what the reuse
#   table above measured; a long document on a large model costs far more, and a reused prefix saves in
#   proportion.
# * **Two cores are not two GPUs.** The two workers share one memory bus and a last-level cache; their hand-over
#   is a copy in one machine's memory, not a transfer over a network.
# * **A replay of chapter 7's arrivals, 24 requests per rate as shipped.** Its p99 lies between its two slowest
#   requests. The replay knows nothing of the engine's own overheads beyond what one user alone shows (its
#   calibration).
#
# ## Takeaways
#
# * Count what a prefix cache can reuse in whole blocks of the shared prefix. Check the engine's hit counter
#   against them, not only TTFT.
# * Separating the phases keeps the newcomer's prefill out of the decoding streams by construction; what that
#   costs the newcomer (its worker's share of the cores, the cache's copy) and whether A's stream comes out
#   flatter than with chunking are measured, not assumed: the findings above give this machine's answer.
# * Replay a scheduler's latencies from per-step costs. Where the replay misses, price its steps at the engine's
#   own one-user costs. What still misses is how the engine schedules requests (its queueing, batching or
#   admission of a newcomer beside running streams): the requests one by one say which.
#
# ## Check yourself
#
# 1. A system prompt of 200 tokens, an engine with blocks of 128 tokens: how many tokens can a second request
#    reuse?
#
# <details><summary>Answer</summary>
#
# 128: one whole block. The remaining 72 tokens of the prefix share a block with the request's own tokens and are
# prefilled again.
# </details>
#
# 2. On a machine of two cores, why would you expect the two-worker B to wait longer for its first token than
#    the one-worker B, unchunked?
#
# <details><summary>Answer</summary>
#
# Its prefill runs on one core instead of two. A long prefill is mostly arithmetic, so on one core it should take
# about as many times longer as chapter 0's square products ran faster on two cores than on one (the rates printed
# in section 2), a little less where a second thread helped a pass less (chapter 2's threads sweep); the cache's
# hand-over to the decode worker comes on top. The findings above say what it took.
# </details>
#
# 3. Suppose a replay came out right at low arrival rates and wrong at high ones. Which part of it would you suspect
#    first?
#
# <details><summary>Answer</summary>
#
# The batching: at low rates requests rarely overlap, so each is priced alone; at high rates the price of a step
# of many sequences (and the engine's own limits on how many it runs at once) decides the queue.
# </details>
#
# ## Try it
#
# * Measure a real disaggregated deployment. This is an extension: SGLang is not among the book's environments, so
#   install it apart, on a machine it supports. Start SGLang's prefill and decode servers
#   (`python -m sglang.launch_server --model-path <model> --disaggregation-mode prefill --port 30000` and the
#   same with `--disaggregation-mode decode --port 30001`), its router in front
#   (`python -m sglang_router.launch_router --pd-disaggregation --prefill http://127.0.0.1:30000 --decode
#   http://127.0.0.1:30001 --port 8000`), and set `base_url = "http://127.0.0.1:8000"`. vLLM's disaggregated
#   prefill does the same with a KV connector on each instance (`--kv-transfer-config`) and the proxy of its
#   examples.
#
# <details><summary>What to expect</summary>
#
# The deployment must serve SmolLM2 (`--model-path HuggingFaceTB/SmolLM2-135M-Instruct`): another model stops the
# chapter at its first cell that asks, in one line naming what it serves. No local engine starts, so the reuse
# table has one engine, `server`; SGLang reports no `vllm:prefix_cache_hits` and no block size, so the whole-block
# claim reads *not measured*, while the TTFT that a shared prefix saves is still measured. The stall at the end
# runs against the deployment (`deployment_stall.csv`): with the phases separated, A's worst gap should stay near
# its median gap and B's TTFT include the cache's transfer; a worst gap near B's whole prefill would show both
# phases on one worker. Sections 2 and 3 still run on this machine, as here.
# </details>
#
# * Set `prefix_tokens = 115`, then `125`: does vLLM's hit counter jump between the two, and why there and not
#   at its block size?

# %% jupyter={"source_hidden": true} tags=["answer"]
_over = shared - prefix_tokens  # the chat template's tokens the prompts share beyond the system text
_v = reuse_table[(reuse_table.engine == "vLLM") & reuse_table.block_tokens.notna()]
_block = int(_v.block_tokens.iloc[0]) if len(_v) else 128  # vLLM's CPU block where it did not run here
_tries = (115, 125)  # the exercise's two prefixes
_hit = {_n: reuse.reusable_tokens(_n + _over, _block) for _n in _tries}
_jump = max(_block - _over, 1)  # the first prefix_tokens whose shared tokens fill a block
display(Markdown(
    "<details><summary>What to expect</summary>\n\n"
    f"The prompts share {_over} tokens of the chat template beyond the system text ({shared} shared for "
    f"`prefix_tokens = {prefix_tokens}` here), so {_tries[0]} and {_tries[1]} give about {_tries[0] + _over} and "
    f"{_tries[1] + _over} shared "
    f"tokens. With blocks of {_block} tokens" + ("" if len(_v) else " (vLLM's CPU default; vLLM did not run here)")
    + f", its counter should count {_hit[_tries[0]]} and {_hit[_tries[1]]} tokens a request"
    + (": it does not jump between the two. " if _hit[_tries[0]] == _hit[_tries[1]] else ". ")
    + f"The jump from nothing to one block comes where the shared tokens first fill a block, at about "
      f"`prefix_tokens = {_jump}`, not at {_block} itself: vLLM hashes the prompt's tokens, template included, not "
      f"the system text alone; a counter that jumped only past `prefix_tokens = {_block}` would say otherwise."
    "\n</details>"))

# %% [markdown]
# * Set `chunk = 128`: does one worker's chunking come closer to two workers' flat stream?

# %% jupyter={"source_hidden": true} tags=["answer"]
_size = 128  # the exercise's chunk
_ch5 = one_run("05_interference", ["interference"])
_row5 = None if _ch5[0]["interference"] is None or _ch5[1].get("model_name") != separation_model else \
    _ch5[0]["interference"].set_index("chunk_tokens").reindex([_size]).dropna(how="all")
if best_chunk == _size:
    _text = "This run already used chunks of 128 tokens: the separation table above is the answer."
else:
    _text = f"Chunks of {_size} put {'more' if _size > best_chunk else 'less'} of B's prompt in each of A's steps than this run's {best_chunk}. "
    if all_cores is not None:
        _price = {_n: (all_cores.decode(context).best + all_cores.prefill(_n, past=max(b_prompt_len - _n, 0)).best)
                  * 1e3 for _n in (_size, best_chunk)}  # A's worst step: a decode beside B's last piece
        _now, _flat = gaps.iloc[1], gaps.get(two, np.nan)
        _then = _now * _price[_size] / _price[best_chunk]
        _text += (f"The cost model prices A's worst step at about {prose.ms(_price[_size] / 1e3)} with such pieces "
                  f"against {prose.ms(_price[best_chunk] / 1e3)} with this run's, so A's worst gap "
                  f"({prose.ms(_now / 1e3)} measured at chunk {best_chunk}), scaled by the ratio of the two prices, should go "
                  f"to roughly {prose.ms(_then / 1e3)}"
                  + (f", against {prose.ms(_flat / 1e3)} with two workers: "
                     + ("closer to" if abs(_then - _flat) < abs(_now - _flat) else "further from")
                     + " their flat stream. " if have_two else ". "))
    _text += (f"B's prefill then takes {-(-b_prompt_len // _size)} steps instead of {-(-b_prompt_len // best_chunk)}, "
              f"so its first token should come {'sooner' if _size > best_chunk else 'later'}: chapter 5's trade.")
    if _row5 is not None and len(_row5):
        _text += (f" Chapter 5 measured that size ({separation_model}): A's worst gap {_row5.a_worst_gap_ms.iloc[0]:.0f} "
                  f"ms, B's TTFT {_row5.b_ttft_ms.iloc[0]:,.0f} ms.")
display(Markdown(f"<details><summary>What to expect</summary>\n\n{_text}\n</details>"))

# %% [markdown]
# * Run chapter 7 with `threads = 1` and then this chapter: does the replay, priced on one core, come closer to
#   vLLM's latencies?

# %% jupyter={"source_hidden": true} tags=["answer"]
if replay_missing:
    _text = (f"Nothing was replayed here ({replay_missing}), so this run cannot say. With chapter 7 on one thread the "
             "replay prices every engine's steps on one core; it comes closer only if the engines' latencies move "
             "by a different factor than the cost model's price.")
else:
    _said = []
    for _name in [_n for _n in ("vLLM", "transformers serve") if _n in pooled_of]:
        _c = compute_threads(_name, ch7_threads)
        _ratio = " and ".join(f"{k} {v.mid:.2f}x" for k, v in pooled_of[_name][0].items())
        if _c == 1:
            _said.append(f"{_name} was already priced on one core here (chapter 7 ran on {ch7_threads} "
                         f"thread{'s' * (ch7_threads != 1)}), so its replay should not move, and its measured "
                         f"latencies ({_ratio} the replay's) only as much as the engine's own threads change")
        else:
            _m1, _mc = cost_model(MODEL, 1), cost_model(MODEL, _c)
            _ctx = int(ch7_requests.prompt_tokens.median()) + int(ch7_params.get("load_tokens", 16)) // 2
            _f = _m1.decode(_ctx).best / _mc.decode(_ctx).best if _m1 and _mc else np.nan
            _said.append(f"{_name} was priced on {_c} cores here; on one its steps cost about {_f:.2f}x as much, "
                         f"so the replay comes closer (from {_ratio}) only if its measured latencies grow by "
                         "a different factor")
    _text = ("; ".join(_said) + ". A ratio that moves toward 1x would show the threads, not the scheduler, "
             "behind the miss.") if _said else "No engine's replay was decided here, so there is nothing to compare."
display(Markdown(f"<details><summary>What to expect</summary>\n\n{_text}\n</details>"))

# %% [markdown]
# The code below writes the paragraph at the top of this chapter, under *What this run found*, from the findings above.

# %%
claims.invariant(not any(e.running for e in live.values()), "an engine is still running after the chapter")

# %%
def sooner(s: Spread, bold: bool = False) -> str:
    """``"X ms (low–high) sooner"``, or later where reusing the prefix was slower."""
    t = (s if s.mid >= 0 else s * -1).text(",.0f", "ms")
    return (f"**{t}**" if bold else t) + (" sooner" if s.mid >= 0 else " later")


def by_replay(verdict: str, ratios: dict[str, Spread]) -> str:
    """How the replay came out against an engine's measured latencies (TTFT's and TPOT's ratios), as decided."""
    return {claims.HELD: "close to it", claims.NOT_HELD: "well off it",
            claims.UNRESOLVED: "too close to call"}.get(verdict, "")


waits = [("longer" if spread(two, "b_ttft_ms").low > spread(w, "b_ttft_ms").high else "less"
          if spread(two, "b_ttft_ms").high < spread(w, "b_ttft_ms").low else "not told apart")
         for w, _ in settings] if have_two else []  # the newcomer's wait against each way, on the runs' intervals


def against_way(word: str, what: str) -> str:
    """The newcomer's wait against one way (``what``): longer, less, or about as long (the runs' intervals overlap)."""
    return f"about as long as {what}" if word == "not told apart" else f"{word} than {what}"


newcomer = (against_way(waits[0], "with one worker, chunked or not") if len(set(waits)) == 1 else
            f"{against_way(waits[0], 'with the prompt whole on one worker')}, "
            f"{against_way(waits[1], 'with it in chunks')}") if waits else ""
flatter = {claims.HELD: "separating the phases kept the stream flattest"
                        + (f", and the long newcomer waited {newcomer}" if newcomer else ""),
           claims.NOT_HELD: "separating the phases did not keep the stream flatter here",
           claims.UNRESOLVED: "whether separating the phases keeps the stream flatter is too close to call here"}
priced_at = f"{predicted_saving.mid * 1e3:,.0f} ms" if predicted_saving else ""  # as the claim's prediction reads
as_priced = {claims.NOT_HELD: f" (not the {priced_at} predicted)"}  # a miss is told; a match is the evidence's
engines_saved = [f"{g.text('.0f', 'ms') if g.mid >= 0 else sooner(g)} through {n}" for n, g in gains.items()]
text = (f"On this machine ({prose.machine(cpu, 'fp32')}), a cached {shared}-token system prompt brought {MODEL}'s "
        f"first token {sooner(saving, True)} in-process"
        f"{as_priced.get(register.verdict('reuse_saves_the_prefix_prefill'), '')}"
        + (f", {' and '.join(engines_saved)}" if engines_saved else "") + ". ")
workers_told = ""  # the two workers' sentence, which the shortest telling leaves to the body
if have_two:
    workers_told = (f"With prefill and decode each on a core of its own, a {separation_model} decoding stream's worst "
                    "gap was "
                    f"**{spread(two, 'a_worst_gap_ms').text(',.0f', 'ms')}**, against {gaps.iloc[0]:,.0f} ms when one worker "
                    f"did both ({gaps.iloc[1]:,.0f} ms with the prompt in chunks); a long newcomer waited "
                    f"**{spread(two, 'b_ttft_ms').text(',.0f', 'ms')}** for its first token, against {ttfts.iloc[0]:,.0f} ms "
                    f"({ttfts.iloc[1]:,.0f} ms chunked). ")
    text += workers_told
replayed_told = ""  # the replay's sentence, which the shortest telling leaves to the body

# %%
if pooled_of:
    said = [by_replay(register.verdict(c), r) for r, c in pooled_of.values()]
    replayed_told = ("Under chapter 7's arrivals, the measured latencies came to " + "; ".join(
                         " and ".join(f"{k} {v.mid:.2f}x" for k, v in r.items()) + f" this chapter's replay on {n}"
                         + f", {w}" * (len(set(said)) > 1)
                         for (n, (r, _)), w in zip(pooled_of.items(), said))
                     + f", {said[0]}" * (len(set(said)) == 1) + ". ")
    text += replayed_told
plain_names = {  # each claim as a reader names it, for the opening's count of what failed
    "reuse_saves_the_prefix_prefill": "the in-process saving from the cached prefix",
    "engine_reuses_whole_blocks": "the engines' hit counters",
    "engine_reuse_saves_its_blocks_prefill": "the engines' saving from their cached blocks",
    "two_workers_keep_the_stream_flat": "the flat stream with two workers",
    "newcomer_pays_for_one_core": "the newcomer's wait on one core",
    "handover_costs_its_bytes": "the cache's hand-over at its bytes' price",
    "replay_predicts_the_queue_transformers": "the replay of transformers serve's queue",
    "replay_predicts_the_queue_vllm": "the replay of vLLM's queue",
    "replay_predicts_the_queue": "the replay of the queue",
    "machine_kept_its_pace": "the machine keeping chapter 0's speed"}
text += f"{m} " if (m := register.misses(plain_names)) else ""  # each miss named (the evidence table at the end gives their numbers)
v_flat = register.verdict("two_workers_keep_the_stream_flat")
text += ("So cache what requests share" if saving.low > 0 else "So reusing a shared prefix saved no sure time here")
text += f"; {flatter[v_flat]}" if v_flat in flatter else ""
in_process_only = text.replace(f", {' and '.join(engines_saved)}", "", 1) if engines_saved else text  # shorter
_maybe = register.verdict("machine_kept_its_pace") == claims.UNRESOLVED
opening.write(text + ".", in_process_only + ".", in_process_only.replace(replayed_told, "") + ".",
              in_process_only.replace(replayed_told, "").replace(workers_told, "") + ".",
              after="" if not pacer.note() else (  # lib.machine.pace_note's verdict, in plain words
                  f"The machine {'may have run' if _maybe else 'ran'} at another speed than in chapter 0, so prices "
                  f"here {'may be' if _maybe else 'are'} off (the pace finding near the end says how far)."))


# %% [markdown]
# ## Key terms
#
# [KV cache](glossary.md#kv-cache), [Prefix caching](glossary.md#prefix-caching), [Disaggregation](glossary.md#disaggregation), [Little's law](glossary.md#littles-law), [Prefill](glossary.md#prefill), [Decode](glossary.md#decode), [TTFT, ITL, TPOT, worst gap, goodput](glossary.md#ttft-itl-tpot-worst-gap-goodput), [Price](glossary.md#price), [Tolerance](glossary.md#tolerance), [Pace](glossary.md#pace). Each links to the book's glossary, which says how the book measures it.

# %% [markdown]
# ## Evidence in this chapter
#
# Each claim this chapter made, what was predicted, what this run measured, the verdict, and the data it came
# from. A verdict is decided on the 95 % interval of the median over runs (`lib.claims` says how): *held* when
# all of the interval agrees with the prediction, *did not hold* when none of it does, *not resolved* when it
# straddles the line. `data/09_many_requests/claims.csv` holds the same rows, and the book's status page counts them.

# %%
results.table(register.frame(), "claims")
display(prose.table(register.evidence()))
print(register.summary())
results.finish()  # the run is whole: its tables and figures replace the last run's together
