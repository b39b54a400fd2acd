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
# # 7. Over the wire: the book's measurements against a real serving engine
#
# Chapters 1 to 6 timed a request inside one Python process. A served model answers through an engine with
# continuous batching and a scheduler, behind an OpenAI-compatible HTTP API, and its TTFT and TPOT are what a
# client measures at the other end of a socket. This chapter starts two such engines on loopback, serving the
# book's SmolLM2 on this machine: `transformers serve` with continuous batching, and vLLM (its CPU build, in its
# own environment `.venv-vllm`, where it can run). It streams requests to them with `lib.client`, which
# stamps every chunk as it arrives, and scores the traces with `lib.metrics`, as in chapter 1.
#
# Four experiments follow. The first sets one request in-process beside the same request through each engine.
# The second loads each engine, with several users at once and then with random (Poisson) arrivals, against
# stated objectives. The third finds chapter 5's stall inside a real scheduler, and the fourth scores one set of
# traces the way four public benchmark tools define their metrics. Set `base_url` to measure any
# OpenAI-compatible deployment instead of the local engines.

# %% [markdown]
# **After this chapter you can**
#
# * measure TTFT, TPOT, ITL and the worst gap through a real server's stream, and compare them with the in-process numbers;
# * say what a serving engine adds to a request and what its batching saves under load;
# * find, with random arrivals, the rate at which goodput collapses on this machine;
# * recognise chapter 5's stall inside a real scheduler.

# %% tags=["parameters"]
quick = False
base_url = None             # e.g. "http://127.0.0.1:8000": measure that server instead of starting local engines
engines = ["transformers", "vllm"]  # local engines to start (vLLM only where .venv-vllm exists)
question = "Why is the sky blue? Explain it to a ten-year-old in three sentences."
max_new_tokens = 48
runs = 3                    # requests per path in the one-request comparison, after one warm-up each
concurrency = [1, 4, 8]
requests_per_user = 3       # closed loop: each concurrency level sends concurrency x this many requests
load_tokens = 16            # output tokens of each load request
arrival_rates = None        # Poisson arrivals, requests per second; None: fractions of each engine's capacity
rate_fractions = [0.5, 1.0, 2.0, 4.0]  # ... of the capacity its closed loop measured (lib.objectives.load_rates)
arrivals_budget_s = 60.0    # no rate is so low that its arrivals would take longer than this
arrivals = 24               # requests per arrival rate
seed = 0
stall_prompt_tokens = 1000  # B's prompt in the stall experiment
stall_tokens = 40           # A's output tokens
stall_arrival = 10          # B arrives after A's tenth chunk
vllm_budgets = [2048, 256]  # vLLM --max-num-batched-tokens: the chunked-prefill budget (the first: none)
tf_batch_tokens = 512       # transformers serve --cb-max-batch-tokens
threads = None              # compute threads of every path (in-process, each engine); None: torch's default
ttft_slo_ms = None          # goodput objectives in ms; None: slo_scale times one user's on the same engine
tpot_slo_ms = None
slo_scale = 3.0             # objectives under load: this many times one user's TTFT and TPOT (lib.objectives)
collapse_below = 0.5        # goodput "collapses" where its interval's top falls below this fraction
resamples = 1000            # bootstrap resamples for goodput's interval
bench_rounds = 3            # rounds of `runs` requests each from vllm bench serve and from the book's client, alternating
start_timeout_s = 1200      # a first vLLM start compiles for minutes
server_budget_s = 900.0     # seconds of requests any one server may keep the chapter waiting (lib.client.ServerBudget)

# %%
import json
import os
import re

from lib import params

P = params.check(globals(), {  # every count and time bounded: at its maximum, with the rest as shipped, minutes
    "base_url": params.text(allow_none=True),
    "engines": params.listof(params.choice(["transformers", "vllm"]), quick=["transformers"]),
    "question": params.text(), "max_new_tokens": params.integer(min=2, max=256, quick=8),
    "runs": params.integer(min=1, max=10, quick=2),
    "concurrency": params.int_list(min=1, max=64, max_items=6, quick=[1, 4]),
    "requests_per_user": params.integer(min=1, max=8, quick=1),
    "load_tokens": params.integer(min=2, max=128, quick=8),
    "arrival_rates": params.listof(params.number(above=0, max=64), max_items=6, allow_none=True),
    "rate_fractions": params.listof(params.number(above=0, max=8), min_items=2, max_items=6, quick=[0.5, 2.0]),
    "arrivals_budget_s": params.number(above=0, max=600, quick=15),
    "arrivals": params.integer(min=2, max=64, quick=4), "seed": params.integer(min=0),
    "stall_prompt_tokens": params.integer(min=16, max=1900, quick=256),
    "stall_tokens": params.integer(min=3, max=256, quick=12), "stall_arrival": params.integer(min=1, max=255, quick=4),
    "vllm_budgets": params.int_list(min=16, max=8192, max_items=4, quick=[256, 64]),
    "tf_batch_tokens": params.integer(min=16, max=4096, quick=128),
    "threads": params.integer(min=1, max=os.cpu_count() or 1, allow_none=True),
    "ttft_slo_ms": params.number(above=0, max=60_000, allow_none=True),
    "tpot_slo_ms": params.number(above=0, max=60_000, allow_none=True),
    "slo_scale": params.number(above=1, max=100),
    "collapse_below": params.number(above=0, max=1), "resamples": params.integer(min=10, max=100_000, quick=200),
    "bench_rounds": params.integer(min=0, max=5, quick=0),
    "start_timeout_s": params.number(above=0, max=1800, quick=300),
    "server_budget_s": params.number(min=10, max=7200, quick=120),
}, quick=quick, chapter="07_over_the_wire")
if base_url is not None and not re.fullmatch(r"http://[A-Za-z0-9.\-\[\]:]+(/\S*)?", base_url.strip()):
    raise ValueError(f"parameter base_url={base_url!r} is not valid; expected an http:// address such as "
                     f"http://127.0.0.1:8000, or None")
if arrival_rates and min(arrival_rates) < arrivals / arrivals_budget_s:
    raise ValueError(f"parameter arrival_rates={arrival_rates!r}: at {min(arrival_rates):g} requests/s, {arrivals} "
                     f"arrivals take about {arrivals / min(arrival_rates):,.0f} s, past arrivals_budget_s="
                     f"{arrivals_budget_s:g}; use rates of at least {arrivals / arrivals_budget_s:.3g} per second, "
                     f"fewer arrivals or a larger arrivals_budget_s")
if stall_arrival >= stall_tokens:
    raise ValueError(f"B must arrive while A streams: stall_arrival ({stall_arrival}) must be below stall_tokens "
                     f"({stall_tokens})")

# %%
import http.server
import pathlib
import subprocess
import tempfile
import threading

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from IPython.display import Markdown, display

from lib import claims, client, conventions, costmodel, machine, metrics, objectives, phases, prose, timing
from lib.claims import Spread
from lib.device import describe_environment
from lib.engines import compute_threads, transformers_engine, vllm_engine, vllm_python, vllm_unavailable
from lib.models import SMOLLM2_VERSION, cache_dir, load_model
from lib.progress import progress
from lib.prose import show
from lib.results import Results, load_table
from lib.stall import stall_case, stall_experiment

MODEL = "smollm2-135m"
if threads:
    torch.set_num_threads(threads)
engine_env = {"OMP_NUM_THREADS": str(threads or torch.get_num_threads())}  # torch in an engine reads it at start
cpu = torch.device("cpu")  # engines on loopback: this chapter measures the CPU
lm = load_model(MODEL, cpu, torch.float32)  # converts and caches the weights the engines serve
model_dir = cache_dir() / f"smollm2-135m-instruct-{SMOLLM2_VERSION}"
results = Results("07_over_the_wire", params=P, quick=quick, device=cpu, dtype=torch.float32, model=MODEL)
register = claims.Claims()
pd.Series(describe_environment(cpu, torch.float32, MODEL)).to_frame("this run")

# %% [markdown]
# ## What this run found

# %%
opening = prose.Opening()

# %% [markdown]
# ## The engines
#
# With no `base_url`, `lib.engines` starts each engine in `engines` on `127.0.0.1` at a free port and waits
# until its `/health` answers; it stops the engine when the chapter ends or fails. Both engines get the same
# converted SmolLM2 folder the book loads in-process, in fp32. In vLLM the prefix cache is off
# (`lib.engines.vllm_engine`): this chapter repeats requests, and a cached prefix would skip the very prefill it
# times.

# %%
vllm_missing = vllm_unavailable()
if base_url:
    client.check_reachable(base_url)  # one line naming the address if it does not answer
    wanted = {"server": None}
    print(f"measuring {base_url} (serving {client.served_model(base_url)}); no local engine is started")
else:
    wanted = {"transformers serve": lambda: transformers_engine(
        model_dir, max_batch_tokens=tf_batch_tokens, env=engine_env, start_timeout_s=start_timeout_s)
        } if "transformers" in engines else {}
    if "vllm" in engines and vllm_missing:
        print(vllm_missing + ".")
    elif "vllm" in engines:
        wanted["vLLM"] = lambda: vllm_engine(model_dir, max_num_batched_tokens=vllm_budgets[0], threads=threads,
                                             start_timeout_s=start_timeout_s)
if not wanted:
    raise ValueError("no engine to measure: set engines to include 'transformers' (or 'vllm' where it can run), "
                     "or give a base_url")

# %% [markdown]
# ## One request: in-process against through an engine
#
# Chapter 1's request runs here in-process (`lib.phases.run_request`: prefill, then greedy decode, each token
# read back to the host). Through an engine the same model does the same prefill and the same decode steps,
# plus: the HTTP request and its JSON, the chat template and tokenisation, the scheduler placing the request in
# a batch, detokenising each token and writing it to the socket. The request, and what the cost model prices
# its two phases at in-process on this machine (chapter 0's ceilings, nothing timed here):

# %%
chat = [{"role": "user", "content": question}]
prompt_ids = lm.tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt",
                                              return_dict=True)["input_ids"]
ceilings = machine.load_ceilings(cpu, quick=quick)  # chapter 0's one measurement of this machine
pacer = machine.Pacer(ceilings, MODEL, "fp32", torch.get_num_threads(), cpu)  # the machine's speed, watched
pacer.check("before the engines")
priced = costmodel.CostModel(ceilings, MODEL, machine.MODELS[MODEL][0].with_dtype("fp32"), "fp32",
                             torch.get_num_threads())  # the in-process path's threads
show(f"The question is **{prompt_ids.shape[1]} tokens** in the chat template, the reply up to {max_new_tokens}. On "
     f"{torch.get_num_threads()} threads the cost model prices its prefill at "
     f"**{priced.prefill(prompt_ids.shape[1]).best * 1e3:.0f} ms** and one decode step at "
     f"**{priced.decode(prompt_ids.shape[1]).best * 1e3:.0f} ms**.")
# the scale of an engine's own work, timed here in-process: the template per request, one token's event per token
template_t = timing.measure(lambda: lm.tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=True),
                            cpu, warmup=2, repeats=20)
event = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": MODEL,
         "choices": [{"index": 0, "delta": {"content": " blue"}, "finish_reason": None}]}
event_t = timing.measure(lambda: f"data: {json.dumps(event)}\n\n".encode(), cpu, warmup=10, repeats=200)
detok_t = timing.measure(lambda: lm.tokenizer.decode(prompt_ids[0, -1:]), cpu, warmup=10, repeats=200)


class Ok(http.server.BaseHTTPRequestHandler):
    """A loopback server's smallest reply: the scale of one HTTP exchange on this machine."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


loopback = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ok)
threading.Thread(target=loopback.serve_forever, daemon=True).start()
http_t = timing.measure(lambda: client.http_get(f"http://127.0.0.1:{loopback.server_address[1]}/"), cpu, warmup=5,
                        repeats=50)
loopback.shutdown()
_all, _T = torch.get_num_threads(), prompt_ids.shape[1]
_vllm_n = compute_threads("vLLM", _all)
_fewer = (f" Of the {_all} cores, vLLM's CPU build computes on {_vllm_n} (it keeps one for its scheduler process), "
          "where the cost model prices this prompt's prefill at "
          f"{costmodel.CostModel(ceilings, MODEL, priced.shape, 'fp32', _vllm_n).prefill(_T).best / priced.prefill(_T).best:.2f}x "
          "its price on all of them." if "vLLM" in wanted and _all > 1 else "")
show(f"For scale, timed here: the chat template and tokenisation take **{template_t.low_ms:.2f} ms** a request, and "
     f"one HTTP exchange on a new loopback connection **{http_t.low_ms:.2f} ms**. Per token, detokenising takes "
     f"{detok_t.low_ms * 1e3:.0f} us and encoding its server-sent event {event_t.low_ms * 1e3:.0f} us.{_fewer} The "
     "engines' own HTTP servers and schedulers are not timed here.",
     how="Each time is the fastest of its repeats (`lib.timing.measure`). The HTTP exchange is Python's "
         "standard-library server answering a 2-byte reply; the event is one token's chunk encoded as JSON.")

# %% [markdown] tags=["predict"]
# **Predict first.** What an engine adds (the HTTP request, the template, the scheduler, writing each token to
# the socket) is work per request and per token, not per weight. Through an engine, how many milliseconds
# later (or sooner) than in-process do you expect the first token to come, and do you expect the gaps between
# tokens to stay close to the in-process gaps, or to move further?

# %% [markdown]
# <details><summary>The book's prediction (open it once you have written yours)</summary>
#
# These are fixed costs per request and per token, small beside a 135M-parameter model's
# forward pass on a CPU. So TTFT should be longer through an engine by a fixed amount, and the gaps should be
# close to the in-process ones (within the tolerance the claim below names).
#
# </details>

# %%
eos = lm.tokenizer.eos_token_id
phases.run_request(lm, prompt_ids, max_new_tokens, eos_token_id=eos)  # warm-up
local = [phases.run_request(lm, prompt_ids, max_new_tokens, eos_token_id=eos) for _ in range(runs)]
local_text = lm.tokenizer.decode(local[0].token_ids, skip_special_tokens=True)
rows = [dict(path="in-process", run=i + 1, prompt_tokens=prompt_ids.shape[1], output_tokens=len(t.token_ids),
             ttft_ms=m.ttft * 1e3, tpot_ms=m.tpot * 1e3, median_gap_ms=m.median_gap * 1e3)
        for i, t in enumerate(local) for m in [metrics.request_metrics(t.request_time, t.token_times)]]
print(f"in-process answer ({len(local[0].token_ids)} tokens): {local_text}")

# %% [markdown]
# The book's client (`lib.client.stream_chat`) stamps each chunk of a streamed reply as it arrives.

# %%
display(prose.source(client.stream_chat))

# %% [markdown]
# The engines start (the first vLLM start on a machine compiles for minutes; later ones read `~/.cache/vllm`).

# %%
live, urls, model_ids, startup = {}, {}, {}, {}
same_model = True  # whether every server serves the model the in-process path runs (else nothing is compared)
for name, make in wanted.items():
    if make is None:
        urls[name] = base_url.rstrip("/")
        try:  # a server of another model is measured, but never set beside SmolLM2 in-process
            model_ids[name] = client.require_model(urls[name], ["smollm2", MODEL, "SmolLM2-135M-Instruct", str(model_dir)])
        except client.WrongModel as error:
            print(f"{error}. It is measured; nothing of it is compared with the in-process model.")
            model_ids[name], same_model = client.served_model(urls[name]), False
    else:
        live[name] = make().start()
        urls[name], startup[name] = live[name].base_url, live[name].startup_s
        model_ids[name] = client.served_model(urls[name])
prose.shown(pd.DataFrame({"engine": list(urls), "startup_s": [startup.get(n, np.nan) for n in urls]}), 1)


# %%
def fixed_length(name: str) -> dict | None:
    """The request field that makes engine ``name`` ignore the end-of-turn token (vLLM's only)."""
    return {"ignore_eos": True} if name == "vLLM" else None


# every server's requests share one budget: a server too slow for it stops the chapter in one line
FEWER = "runs, max_new_tokens, concurrency, requests_per_user, load_tokens, arrivals, stall_tokens"
server_budgets = {name: client.ServerBudget(server_budget_s, f"{name} at {urls[name]}", "server_budget_s", FEWER)
           for name in urls}
n_rates = len(arrival_rates or rate_fractions)
ahead = dict(  # what the chapter sends after the first warm-up, at the least one after another
    requests=runs + len(concurrency) * requests_per_user + n_rates + runs,
    tokens=runs * max_new_tokens + (len(concurrency) * requests_per_user + n_rates) * load_tokens + runs * stall_tokens)


def send(name: str, messages, tokens: int, fixed: bool = False, **kw) -> client.Trace:
    """One streamed request to engine ``name``, greedy, bounded by the server's budget. ``fixed``: ask vLLM
    for exactly ``tokens`` tokens (``ignore_eos``; transformers serve refuses the field, so its replies may end
    sooner)."""
    budget = server_budgets[name]
    timeout_s = budget.timeout_s()
    with budget.request():
        trace = client.stream_chat(urls[name], model_ids[name], messages, tokens, timeout_s=timeout_s,
                                   extra=fixed_length(name) if fixed else None, **kw)
    return budget.check(trace)


def warm_up(name: str, messages, tokens: int, fixed: bool = False, first: bool = False) -> None:
    """One request that must succeed before anything is timed: a server that cannot answer it stops the
    chapter here, in one line naming it and what it did (every wait is bounded: `lib.client`). The ``first``
    warm-up also stops the chapter as soon as its pace shows the rest cannot fit the server's budget."""
    watch = server_budgets[name].watch(ahead["requests"], ahead["tokens"], tokens) if first else None
    client.require_ok(send(name, messages, tokens, fixed=fixed, on_event=watch), f"{name} at {urls[name]}",
                      "the warm-up request")


TTFT_METRIC = "vllm:time_to_first_token_seconds"  # the server's own TTFT histogram
server_before, server_after, replies = {}, {}, {}
def counted(name: str) -> float:
    """How many requests the server's TTFT histogram has counted, scraped while the server is idle."""
    return client.scrape_counted(urls[name], TTFT_METRIC).get(f"{TTFT_METRIC}_count", 0)

# %%
for name in urls:
    idle = counted(name)
    warm_up(name, chat, max_new_tokens, first=True)
    # once the warm-up has been counted, the server counts the same runs as the client
    server_before[name] = client.scrape_counted(urls[name], TTFT_METRIC, count=idle + 1)
    traces = [send(name, chat, max_new_tokens, request_id=i)
              for i in progress(range(runs), desc=f"{name}: one request at a time")]
    server_after[name] = client.scrape_counted(urls[name], TTFT_METRIC, count=idle + 1 + runs)
    bad = client.failures(traces)
    if bad:
        raise RuntimeError(f"{name} at {urls[name]}: requests failed ({bad}): {[t.error for t in traces if t.error]}")
    replies[name] = traces[0].text
    short = [t.n_tokens for t in traces if t.n_tokens < 2]
    if short:
        raise RuntimeError(f"{name} at {urls[name]}: answered {short[0]} token{'s' * (short[0] != 1)} to a request for "
                           f"up to {max_new_tokens}; this chapter times the gaps between tokens, which need two or "
                           "more (a server that stops at once, or ignores max_tokens, cannot be measured here)")
    rows += [dict(path=name, run=i + 1, prompt_tokens=t.prompt_tokens if not t.usage_problem else np.nan,
                  output_tokens=t.n_tokens, ttft_ms=m.ttft * 1e3, tpot_ms=m.tpot * 1e3, median_gap_ms=m.median_gap * 1e3,
                  connect_ms=t.connect_s * 1e3 if t.connect_s is not None else np.nan, usage_problem=t.usage_problem)
             for i, t in enumerate(traces) for m in [t.metrics()]]
one = pd.DataFrame(rows)
_ = results.table(one, "one_request_runs")  # the path it returns is not for the page

# %% [markdown]
# Each path's one-request figures, as medians over runs with their range, and what each engine adds to the
# in-process path:

# %%
paths = timing.median_range(one, "path", ["ttft_ms", "tpot_ms", "median_gap_ms"])
paths = paths.merge(one.groupby("path", sort=False)[["prompt_tokens", "output_tokens"]].first().reset_index())
base = paths.iloc[0]
paths["ttft_added_ms"] = paths.ttft_ms - base.ttft_ms
paths["gap_added_ms"] = paths.median_gap_ms - base.median_gap_ms
results.table(paths, "one_request")
prose.shown(paths.round(1).rename(columns={"ttft_ms": "median TTFT (ms)", "tpot_ms": "median TPOT (ms)"}))  # medians over the runs

# %% [markdown]
# vLLM also reports its own timings, as Prometheus histograms on `/metrics` (`vllm:time_to_first_token_seconds`
# and others), measured inside the server: its TTFT, and its split into time queued and time prefilling. The
# client's TTFT minus the server's is the part of TTFT that the server cannot see: the connection, the request's
# parsing before it is timed, and the wire back. The histograms give a mean, so the client's TTFT set beside them
# is the mean of its runs, not the median of the table above.

# %%
def server_mean(name: str, metric: str, expected: int | None = None) -> float:
    """Mean of a server histogram between the scrapes in ``server_before`` and ``server_after`` (here the
    one-request runs, the client's same requests; later each arrival rate), in ms; NaN if absent."""
    before, after = server_before[name], server_after[name]
    count = after.get(f"{metric}_count", 0) - before.get(f"{metric}_count", 0)
    expected = runs if expected is None else expected
    if count and count != expected:  # the server counted other requests than the client's
        print(f"{name}: {metric} counted {count:.0f} requests between the scrapes, not the {expected} timed; not used")
        return np.nan
    return (after.get(f"{metric}_sum", 0) - before.get(f"{metric}_sum", 0)) / count * 1e3 if count else np.nan


own = pd.DataFrame([dict(path=n, client_ttft_ms=one[one.path == n].ttft_ms.mean(),
                         server_ttft_ms=server_mean(n, TTFT_METRIC),
                         server_queue_ms=server_mean(n, "vllm:request_queue_time_seconds"),
                         server_prefill_ms=server_mean(n, "vllm:request_prefill_time_seconds")) for n in urls])
own["outside_server_ms"] = own.client_ttft_ms - own.server_ttft_ms
results.table(own, "server_reported")
reported = own.dropna(subset=["server_ttft_ms"])
register.claim("client_ttft_covers_server_ttft", "The client's mean TTFT is at least the engine's own reported TTFT.")
verdict = register.record("client_ttft_covers_server_ttft",  # a plain comparison of two means: held or not
                          (claims.HELD if (reported.outside_server_ms >= 0).all() else claims.NOT_HELD)
                          if len(reported) else None, predicted="client >= server",
                          measured=", ".join(f"{r.path}: {r.client_ttft_ms:.0f} ms against {r.server_ttft_ms:.0f}"
                                             for r in reported.itertuples()),
                          evidence=f"server histograms' sum and count before and after the {runs} runs the client "
                                   "timed (warm-up excluded)")
show(claims.pick(
    verdict, unresolved="",
    held="The client's mean TTFT was at least the engine's own ("
         + ", ".join(f"{r.path} {r.client_ttft_ms:.0f} ms against its own {r.server_ttft_ms:.0f} ms"
                     for r in reported.itertuples())
         + "), so the part of TTFT outside the server (the connection, the request's parsing before the server's "
           "clock starts, the wire back) took "
         + ", ".join(f"**{r.outside_server_ms:.1f} ms** through {r.path}" for r in reported.itertuples()) + ".",
    not_held="The server's own mean TTFT exceeds the client's for the same requests: the two spans do not nest as "
             "assumed (the server records a first token after sending it, or the client stamps its send late), so "
             "TTFT is not split here into inside and outside the server.",
    not_measured=register.undecided("client_ttft_covers_server_ttft", "no engine here reports its timings on "
                                    "/metrics (transformers serve has none).")))
prose.shown(own.round(1).rename(columns={"client_ttft_ms": "mean client TTFT (ms)", "server_ttft_ms": "mean server TTFT (ms)"}))

# %% [markdown]
# Each engine against the in-process path, TTFT first:

# %%
for name, reply in replies.items():
    print(f"{name} ({paths.set_index('path').loc[name, 'output_tokens']:.0f} tokens): {reply}")
engine_rows = paths.iloc[1:]
same_prompt = bool((engine_rows.prompt_tokens == base.prompt_tokens).all())
server = own.set_index("path")
in_process_threads = torch.get_num_threads()
engine_cores = {r.path: compute_threads(r.path, in_process_threads) for r in engine_rows.itertuples()}
priced_on = {n: costmodel.CostModel(ceilings, MODEL, machine.MODELS[MODEL][0].with_dtype("fp32"), "fp32", n)
             for n in {in_process_threads, *engine_cores.values()}}


def on_cores(path: str, price) -> float:
    """How many times the in-process price ``price(cost model)`` the engine's cores make it (1 where they are the
    in-process path's threads)."""
    return price(priced_on[engine_cores[path]]) / price(priced_on[in_process_threads])


for r in engine_rows.itertuples():
    tag = r.path.split()[0].lower()
    prefill_ms = server.server_prefill_ms.get(r.path, np.nan)
    cores = engine_cores[r.path]
    prefill_x = on_cores(r.path, lambda m: m.prefill(int(base.prompt_tokens)).best)
    engine_price_ms = priced_on[engine_cores[r.path]].prefill(int(base.prompt_tokens)).best * 1e3  # on its cores
    in_price_ms = priced_on[in_process_threads].prefill(int(base.prompt_tokens)).best * 1e3  # the in-process path's
    histogram = cores < in_process_threads and np.isfinite(prefill_ms)  # the engine's own prefill, to split TTFT by
    mostly_prefill = histogram and prefill_ms - base.ttft_ms > 0.5 * r.ttft_added_ms
    on = f"the {prose.count(cores, 'core')} {r.path} computes on"
    rest = "the HTTP path, the template and the scheduler add the rest"
    over = abs(prefill_ms - base.ttft_ms), "more" if prefill_ms > base.ttft_ms else "less"
    where_added = (  # the plain reason, a sentence of its own; the prices that back it are folded below it
        (f"Most of that is its prefill on {on}: its own histogram puts it at {prefill_ms:.0f} ms, {over[0]:.0f} ms "
         f"{over[1]} than the whole in-process TTFT; {rest}" if mostly_prefill else
         f"Less of that is its prefill than the rest: its own histogram puts its prefill on {on} at {prefill_ms:.0f} "
         f"ms, {over[0]:.0f} ms {over[1]} than the whole in-process TTFT; {rest}") if histogram else
        f"It is the prefill on {on}, which the cost model prices at {prefill_x:.2f}x the in-process one, and what "
        "the HTTP path, the template and the scheduler add" if cores < in_process_threads else
        "It is what the HTTP path, the template and tokenisation, and the scheduler cost before the first token")
    priced_how = (f"The cost model prices this prefill at {engine_price_ms:.0f} ms on {prose.count(cores, 'core')}"
                  + (f", {prefill_x:.2f}x its price of {in_price_ms:.0f} ms on the in-process path's "
                     f"{in_process_threads} threads" if cores != in_process_threads else "")
                  + f". The in-process TTFT took {base.ttft_ms / in_price_ms:.2f}x its price"
                  + (f", and the engine's own prefill ({prefill_ms:.0f} ms) {prefill_ms / engine_price_ms:.2f}x its "
                     "own" if np.isfinite(prefill_ms) else "") + ". ")
    inside = (f" The engine's own histogram puts its prefill at {prefill_ms:.0f} ms, against the whole in-process TTFT "
              f"of {base.ttft_ms:.0f} ms: its kernels run the same prefill faster than the plain model call, by more "
              "than the HTTP path costs." if np.isfinite(prefill_ms) and prefill_ms < base.ttft_ms else
              " The engine reports no split of its TTFT, so where it gained is not measured here.")
    register.claim(f"engine_adds_to_ttft_{tag}",
                   f"Through {r.path}, TTFT is longer than in-process, beyond both paths' intervals.")
    verdict = register.record(
        f"engine_adds_to_ttft_{tag}", claims.below(Spread.in_row(base, "ttft_ms"), Spread.in_row(r, "ttft_ms"))
        if same_model else None, predicted="longer than in-process",
        measured=f"{r.ttft_ms:.0f} ms against {base.ttft_ms:.0f}",
        evidence=f"{runs} runs per path after a warm-up; prompt {base.prompt_tokens:.0f} tokens in-process, "
                 f"{r.prompt_tokens:.0f} as {r.path} counted it")
    span, base_span = (Spread.in_row(row, "ttft_ms").text(".0f", "ms") for row in (r, base))
    show(f"Through {r.path}, TTFT " + claims.pick(
        verdict,
        held=f"was **{span}**, {r.ttft_added_ms:.0f} ms longer than the in-process {base.ttft_ms:.0f} ms. "
             f"{where_added}.",
        not_held=f"was **{span}**, {-r.ttft_added_ms:.0f} ms shorter than the in-process {base.ttft_ms:.0f} ms: the "
                 f"engine reached its first token sooner than the plain model call.{inside}",
        unresolved=f"was {span} against the in-process {base_span}: the first token came about as soon, the "
                   f"median {abs(r.ttft_added_ms):.0f} ms {'later' if r.ttft_added_ms > 0 else 'sooner'} and the "
                   "runs' ranges overlapping; more runs per path would decide which is sooner.",
        not_measured="was not set beside the in-process one: the server serves another model than the in-process "
                     "path."),
        how=(f"{priced_how}Decided on each path's median over its {runs} runs with its range (in-process {base_span}): "
             "the engine's range lies wholly " + claims.pick(verdict, held="above the in-process one.",
                                                             not_held="below the in-process one.",
                                                             unresolved="on neither side of the in-process one.",
                                                             not_measured="apart.")) if same_model else None)

# %%
if not same_prompt:
    print("The engines counted a different prompt length than the in-process chat template: their templates differ.")

# %% [markdown]
# The gaps between tokens, each engine against the in-process path:

# %%
gap_ratio_of = {}  # each engine's median gap over the in-process one on the cores it computes on
expected_gap_of = {}  # the in-process gap scaled to each engine's cores (ms), what its gap is set beside
for r in engine_rows.itertuples():
    tag = r.path.split()[0].lower()
    cores = engine_cores[r.path]
    step_x = on_cores(r.path, lambda m: m.decode(int(base.prompt_tokens + base.output_tokens // 2)).best)
    expected_gap = expected_gap_of[r.path] = Spread.in_row(base, "median_gap_ms") * step_x  # on the engine's cores
    gap_ratio = gap_ratio_of[r.path] = Spread.in_row(r, "median_gap_ms") / expected_gap  # not paired: the widest ratio
    on_its_cores = ("" if cores == in_process_threads else
                    f", scaled to the {cores} core{'s' * (cores > 1)} the engine computes on ({step_x:.2f}x: the cost "
                    f"model's step there over on {in_process_threads} threads)")
    statement = (f"Through {r.path}, the median gap between tokens is the in-process one on the cores the engine "
                 "computes on (the cost model's step on those cores over on the in-process threads, times the "
                 "in-process gap), within the tolerance for a predicted time (their ratio's interval).")
    register.claim(f"engine_gaps_close_to_in_process_{tag}", statement)
    verdict = register.record(
        f"engine_gaps_close_to_in_process_{tag}",
        claims.within(gap_ratio, 1.0, claims.PREDICTED_TIME) if same_model else None,
        predicted=f"{expected_gap.mid:.0f} ms (in-process on {cores} core{'s' * (cores > 1)}), within "
                  f"{claims.PREDICTED_TIME:g}x",
        measured=f"{r.median_gap_ms:.0f} ms ({gap_ratio.text('.2f', 'x')})",
        evidence=f"{runs} runs per path; in-process on {in_process_threads} threads, the engine on {cores}")
    was, ratio = f"Through {r.path}, the median gap between tokens was", gap_ratio.text(".2f", "x")
    against = (f"{gap_ratio.mid:.2f}x the in-process {base.median_gap_ms:.0f} ms" if cores == in_process_threads else
               f"against {base.median_gap_ms:.0f} ms in-process on {prose.count(in_process_threads, 'thread')}. "
               f"In-process would take about {expected_gap.mid:.0f} ms on the {prose.count(cores, 'core')} the engine "
               f"computes on, and the engine's gap was {gap_ratio.mid:.2f}x that")
    allowed = f"the allowed {1 / claims.PREDICTED_TIME:.2f}–{claims.PREDICTED_TIME:.2f}x of the in-process gap"
    how = (f"The in-process gap, {Spread.in_row(base, 'median_gap_ms').text('.1f', 'ms')} on {in_process_threads} "
           f"threads" + (f"{on_its_cores}, is {expected_gap.text('.1f', 'ms')} here" if on_its_cores else "")
           + f"; the engine's gap over it, {ratio} (the "
           f"widest ratio the two intervals allow), is held to {allowed} (`lib.claims.PREDICTED_TIME`).")
    above = gap_ratio.low > 1
    show(claims.pick(
        verdict,
        held=f"{was} {r.median_gap_ms:.0f} ms, {against}: " + (
            "the per-token work of serving (detokenising, one server-sent event, timed above in microseconds) is "
            "small beside the forward pass" if gap_ratio.low <= 1 <= gap_ratio.high else
            f"each token took {abs(r.median_gap_ms - expected_gap.mid):.1f} ms {'more' if above else 'less'} than "
            "in-process on those cores. That is far more than detokenising and a server-sent event cost (microseconds, "
            "timed above): the "
            + ("rest is presumably the engine's own loop" if above else
               "engine's own kernels or its compute thread pinned to a core run the step faster")
            + ", which this chapter does not take apart") + ".",
        not_held=f"{was} **{r.median_gap_ms:.0f} ms**, {against}, far from it. " + (
            "The engine's decode step is quicker than the plain model call: its own kernels, or its compute thread "
            "pinned to a core, which this chapter does not take apart." if gap_ratio.mid < 1 else
            "Each token costs the engine more than the plain model call: its own loop (scheduling, its cache's "
            "bookkeeping, a Python server thread beside the model's) and its threads (*Threads*, below), which this "
            "chapter does not take apart."),
        unresolved=f"{was} {r.median_gap_ms:.0f} ms, {against}: too close to call whether the engine keeps that "
                   "pace; more runs would decide.",
        not_measured=f"{was} {r.median_gap_ms:.0f} ms, not set beside the in-process gap: the server serves another "
                     "model than the in-process path."), how=how if same_model else None)

# %% [markdown]
# ## Load: many users at once
#
# Each level of the **closed loop** below keeps `c` users busy. Each sends its next request when the last one
# ends. The first level, one user alone, also sets this chapter's objectives under load: `slo_scale` times that
# user's median TTFT and TPOT on the same engine (DistServe's "SLO scale"), since whether a server is overloaded
# depends on how fast this machine runs it.

# %%
load_prompt = [{"role": "user", "content": "Write a long story about a lighthouse keeper and a storm."}]
load_context = lm.tokenizer.apply_chat_template(load_prompt, add_generation_prompt=True, return_tensors="pt",
                                               return_dict=True)["input_ids"].shape[1] + load_tokens // 2
step_of = {b: priced.decode(load_context, batch=b).best for b in sorted({1, max(concurrency)})}
show(f"The levels: **{', '.join(map(str, concurrency))} users** at once (the parameter `concurrency`); the objectives "
     f"are {slo_scale:g} times one user's median TTFT and TPOT. Each request asks for {load_tokens} tokens; halfway "
     f"through, at {load_context} tokens of context, the cost model prices one in-process decode step on "
     f"{torch.get_num_threads()} threads at " + " and ".join(
         f"**{t * 1e3:.0f} ms** for {b} sequence{'s' * (b > 1)}" for b, t in step_of.items()) + ".")

# %% [markdown] tags=["predict"]
# **Predict first.** Chapter 3 found that one decode step of `B` sequences reads the weights once for all of
# them, and an engine with continuous batching puts every active request into each step; the one-request table
# above gives each engine's gap for one user alone. From one user to the most in the levels just printed, by how many
# times do you expect the total tokens per second to rise, and does each user's TPOT rise by more or by less
# than the number of users?

# %% [markdown]
# <details><summary>The book's prediction (open it once you have written yours)</summary>
#
# Up to the point where the step becomes compute-bound, a batch of `B` costs little more
# than one sequence. So, as more users stream at once, the total tokens per second should rise, and each user's
# TPOT should rise too, but more slowly than the number of users.
#
# </details>

# %%
sweep_rows, sweep_traces, goals = [], {}, {}
levels = sorted(set(concurrency) | {1})  # one user alone first: it sets the objectives
for name in urls:
    warm_up(name, load_prompt, load_tokens, fixed=True)  # the engine's first request of this prompt's shape
    for c in progress(levels, desc=f"{name}: closed loop, one concurrency after another"):
        traces = client.closed_loop(lambda i: send(name, load_prompt, load_tokens, request_id=i, fixed=True),
                                     c * requests_per_user, c)
        sweep_traces[(name, c)] = traces
        ok = [t for t in traces if t.ok]
        span_s = max(t.end for t in traces) - min(t.sent for t in traces)
        scored = [t.metrics() for t in ok]
        if c == 1:
            if not scored:
                raise RuntimeError(f"{name}: no request of one user alone succeeded: {client.failures(traces)}")
            goals[name] = objectives.scaled(float(np.median([m.ttft for m in scored])),
                                            float(np.median([m.tpot for m in scored if m.tpot])), slo_scale,
                                            ttft_slo_ms, tpot_slo_ms)
        good, low, high = conventions.bootstrap_fraction([conventions.meets(t, goals[name].ttft_s, goals[name].tpot_s)
                                                          for t in traces], resamples, seed=seed)
        sweep_rows.append(dict(engine=name, concurrency=c, requests=len(traces), failures=str(client.failures(traces) or "none"),
                               tokens_per_s=sum(t.n_tokens for t in ok) / span_s,
                               ttft_ms=np.median([m.ttft for m in scored]) * 1e3,
                               tpot_ms=np.median([m.tpot for m in scored if m.tpot]) * 1e3,
                               e2e_ms=np.median([m.e2e for m in scored]) * 1e3,
                               requests_per_s=len(ok) / span_s,
                               goodput=good, goodput_low=low, goodput_high=high,  # and the cost model's step of c
                               priced_step_ms=priced_on[engine_cores.get(name, in_process_threads)].decode(  # (ch. 9
                                   load_context, batch=c).best * 1e3))  # quotes it) on the engine's cores
sweep = pd.DataFrame(sweep_rows)
results.table(sweep, "concurrency_sweep")
goals_table = pd.DataFrame([dict(engine=n, ttft_slo_ms=g.ttft_ms, tpot_slo_ms=g.tpot_ms, slo_scale=slo_scale,
                                 from_one_user=", ".join(g.defaults) or "none") for n, g in goals.items()])
results.table(goals_table, "objectives")  # chapter 9 scores its replay against these
show("Objectives under load, from one user alone on each engine: " + "; ".join(
    f"{n}: TTFT at most **{g.ttft_ms:.0f} ms**, TPOT at most **{g.tpot_ms:.0f} ms**" for n, g in goals.items())
     + f" ({slo_scale:g} times the one user's medians, where not set by hand).")
dead = sweep[sweep.tokens_per_s == 0]
if len(dead):
    raise RuntimeError("every request of a load level failed: " + "; ".join(
        f"{r.engine} at {r.concurrency} users: {r.failures}" for r in dead.itertuples()))
prose.shown(sweep.round(2))

# %%
fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
for name, g in sweep.groupby("engine", sort=False):
    left.plot(g.concurrency, g.tokens_per_s, "o-", label=name)
    right.plot(g.tokens_per_s, g.tpot_ms, "o-", label=name)
    for r in g.itertuples():
        right.annotate(f"{r.concurrency}", (r.tokens_per_s, r.tpot_ms), fontsize=8)
gain = sweep.groupby("engine").apply(lambda g: g.tokens_per_s.iloc[-1] / g.tokens_per_s.iloc[0])
left.set(xscale="log", xlabel="concurrent users", ylabel="total output tokens / s",
         title=f"{concurrency[-1]} users: {gain.min():.1f}x to {gain.max():.1f}x the tokens/s of {concurrency[0]} (counted)")
right.set(xlabel="total output tokens / s", ylabel="each user's median TPOT (ms)",
          title="total tokens/s against each user's TPOT (labels: users)")
left.legend(fontsize=8)
right.legend(fontsize=8)
fig.tight_layout()
results.figure(fig, "throughput_against_tpot")
plt.show()

# %%
def e2e_of(name: str, c: int) -> Spread:
    """The end-to-end times (s) of one closed-loop level's requests, their median with its 95 % interval."""
    return Spread.of(t.metrics().e2e for t in sweep_traces[(name, c)] if t.ok)


def tpot_growth(name: str, lo, hi) -> tuple[str, str]:
    """How engine ``name``'s median TPOT grew from closed-loop level ``lo`` to ``hi`` (sweep rows): the factor
    (``"1.72x"``) and a sentence setting it beside the cost model's decode step for those batch sizes on the cores
    the engine computes on."""
    cores = engine_cores.get(name, in_process_threads)
    s0, s1 = lo.priced_step_ms, hi.priced_step_ms  # the cost model's step of that many sequences on those cores
    x, sx = hi.tpot_ms / lo.tpot_ms, s1 / s0
    price = (f"The cost model prices a decode step of {hi.concurrency} sequences at {sx:.2f}x one of "
             f"{lo.concurrency} on {prose.count(cores, 'core')} ({s0:.0f} to {s1:.0f} ms)")
    return f"{x:.2f}x", (
        f"{price}, as much: more sequences in every step explain it." if round(x, 2) == round(sx, 2) else
        f"{price}, less than TPOT grew: a closed loop's TPOT also carries the newcomers' prefills between steps "
        "(chapter 9)." if x > sx else
        f"{price}, more than TPOT grew, which this chapter does not take apart.")


gains = {}  # each engine's throughput gain from the fewest users to the most (None: one level only)
for name, g in sweep.groupby("engine", sort=False):
    first, last = g.iloc[0], g.iloc[-1]
    # c users each finishing a request every e2e: the total rate is c / e2e, so the gain is c1/c0 times e2e0/e2e1
    gain_interval = (e2e_of(name, int(first.concurrency)) / e2e_of(name, int(last.concurrency))) * (
        last.concurrency / first.concurrency) if len(g) > 1 else None
    gains[name] = gain_interval
    claim = f"batching_raises_throughput_{name.split()[0].lower()}"
    register.claim(claim, f"{name}: the most concurrent users get more total tokens per second than the fewest (the "
                          "interval of the gain, from the requests' end-to-end times, above one).")
    verdict = register.record(
        claim, claims.verdict_of(gain_interval.low > 1, gain_interval.high <= 1) if len(g) > 1 else None,
        predicted="more tokens/s in total, each user's TPOT higher",
        measured=f"{first.tokens_per_s:.1f} -> {last.tokens_per_s:.1f} tokens/s; TPOT {first.tpot_ms:.0f} -> "
                 f"{last.tpot_ms:.0f} ms",
        evidence=f"closed loop, {requests_per_user} requests per user of {load_tokens} tokens; {len(g)} levels")
    gain_x = gain_interval.text(".1f", "x") if gain_interval else ""
    tps = f"{first.tokens_per_s:.1f} to {last.tokens_per_s:.1f} tokens/s"
    grew, beside_price = tpot_growth(name, first, last)
    show(f"{name}: " + claims.pick(
        verdict,
        held=f"from {first.concurrency} to {last.concurrency} concurrent users, the total output tokens per second "
             f"rose **{gain_x}**: each step carries the whole batch but reads the weights once for all of it "
             f"(chapter 3). Each user waited longer: the median TPOT went from {first.tpot_ms:.0f} to "
             f"**{last.tpot_ms:.0f} ms** ({grew}). {beside_price}",
        not_held=f"from {first.concurrency} to {last.concurrency} concurrent users, the total output tokens per second "
                 f"did not rise: it went from {tps} ({gain_x}) and each user's median TPOT from {first.tpot_ms:.0f} to "
                 f"{last.tpot_ms:.0f} ms: on this machine a larger batch costs about its size in time (a step already "
                 "compute-bound, or cores busy with other work).",
        unresolved=f"from {first.concurrency} to {last.concurrency} concurrent users, the total output tokens per "
                   f"second went from {tps} ({gain_x}): too close to call whether batching raised throughput, the "
                   "gain's range reaching 1x.",
        not_measured="whether more users at once raise the total tokens per second is not measured in this run: one "
                     "concurrency level only."),
        how=(f"The gain is {last.concurrency} users over {first.concurrency} times the median end-to-end time at "
             f"{first.concurrency} over the one at {last.concurrency}, each median with its interval; the gain "
             "rose where its whole interval lies above 1x. Counted over each level's span, the total went from "
             f"{tps}.") if gain_interval else None)

# %% [markdown]
# ## Random arrivals and the load at which goodput collapses
#
# Real users do not wait for each other. Requests arrive at random. An **open loop** sends requests at the
# times of a seeded Poisson process, whether or not earlier ones have finished. The rates are fractions
# (`rate_fractions`) of the capacity each engine showed above (the requests per second of its most concurrent
# closed loop), so the sweep brackets that capacity on any machine, and its objectives are the ones set from one
# user alone. Goodput here is the fraction of requests that met the objectives, with a 95 % bootstrap interval
# over requests (a failed request meets none).

# %%
show("Each engine's capacity is its most requests per second in the closed loop:\n\n" + "\n".join(
    f"* **{r.engine}**: **{r.requests_per_s:.2f} requests/s** at {r.concurrency} users, where its median TTFT was "
    f"{r.ttft_ms:.0f} ms against an objective of {goals[r.engine].ttft_ms:.0f} ms and its median TPOT "
    f"{r.tpot_ms:.0f} ms against {goals[r.engine].tpot_ms:.0f} ms."
    for r in sweep.loc[sweep.groupby("engine", sort=False).requests_per_s.idxmax()].itertuples()))

# %% [markdown] tags=["predict"]
# **Predict first.** The line above gives each engine's capacity and where it stood against the objectives. At an
# arrival rate equal to that capacity, and at twice it, what fraction of requests do you expect to meet both
# objectives: about all of them, about half, or almost none?

# %% [markdown]
# <details><summary>The book's prediction (open it once you have written yours)</summary>
#
# Below the rate the engine can serve, requests rarely overlap and goodput is that of one
# request alone; above it, queues grow, TTFT climbs with every request in the queue, and goodput falls towards
# zero.
#
# </details>
#
# The capacity above is only what the closed loop's most users drew out: an engine that batches more
# requests than that serves more, so its collapse can come above that rate, which is why the sweep goes well past
# it (`rate_fractions`). Where the engine reports them (vLLM), its mean time queued and prefilling per request are kept beside the
# client's TTFT, and every request's figures are saved (`poisson_requests.csv`): chapter 9 replays these
# arrivals through a model of the scheduler.

# %%
poisson_rows, poisson_traces, request_rows, rates_of = [], {}, [], {}
for name in urls:
    capacity = float(sweep[sweep.engine == name].requests_per_s.max())
    least = arrivals / arrivals_budget_s  # a slower rate would keep the chapter waiting past its budget
    rates_of[name] = arrival_rates or sorted({max(r, float(f"{least:.3g}"))
                                              for r in objectives.load_rates(capacity, rate_fractions)})
    # Untimed, a few requests at once first: in build 13 vLLM's first open-loop requests (after the other engine's)
    # took up to 3 s to their first token, then 0.1 s, which put the collapse at the lowest rate.
    users = int(sweep[sweep.engine == name].concurrency.max())
    seen = counted(name) + users  # what the server will have counted after the warm-up
    warmed = client.closed_loop(lambda i: send(name, load_prompt, load_tokens, request_id=100_000 + i, fixed=True),
                                users, users)
    for trace in warmed:
        client.require_ok(trace, f"{name} at {urls[name]}", "the open loop's warm-up")
    for rate in progress(rates_of[name], desc=f"{name}: open loop, one arrival rate after another"):
        offsets = client.poisson_offsets(rate, arrivals, seed=seed)
        before = client.scrape_counted(urls[name], TTFT_METRIC, count=seen)
        traces = client.open_loop(lambda i, at: send(name, load_prompt, load_tokens, request_id=i, scheduled=at,
                                                      fixed=True), offsets)
        seen += len(offsets)
        server_before[name], server_after[name] = before, client.scrape_counted(urls[name], TTFT_METRIC, count=seen)
        poisson_traces[(name, rate)] = traces
        ok = [t.metrics() for t in traces if t.ok]
        request_rows += [dict(engine=name, rate_per_s=rate, request=t.request_id, offset_s=float(at), ok=t.ok,
                              prompt_tokens=t.prompt_tokens if not t.usage_problem else np.nan,
                              usage_problem=t.usage_problem, output_tokens=t.n_tokens if t.ok else np.nan,
                              ttft_ms=t.metrics().ttft * 1e3 if t.ok else np.nan,
                              tpot_ms=t.metrics().tpot * 1e3 if t.ok and t.metrics().tpot else np.nan)
                         for t, at in zip(traces, offsets)]
        good, low, high = conventions.bootstrap_fraction([conventions.meets(t, goals[name].ttft_s, goals[name].tpot_s)
                                                          for t in traces], resamples, seed=seed)
        sends = sorted(t.sent for t in traces)  # the rate achieved, from the requests' send times (the rate asked
        poisson_rows.append(dict(engine=name, rate_per_s=rate, realized_per_s=(len(sends) - 1) / (sends[-1] - sends[0]),
                                 # for is rate_per_s: one seeded pattern, scaled, runs faster or slower than it)
                                 requests=len(traces),
                                 failures=str(client.failures(traces) or "none"),
                                 ttft_ms=np.median([m.ttft for m in ok]) * 1e3 if ok else np.nan,
                                 ttft_p90_ms=np.percentile([m.ttft for m in ok], 90) * 1e3 if ok else np.nan,
                                 ttft_p99_ms=np.percentile([m.ttft for m in ok], 99) * 1e3 if ok else np.nan,
                                 tpot_ms=np.median([m.tpot for m in ok if m.tpot]) * 1e3 if ok else np.nan,
                                 tpot_p99_ms=np.percentile([m.tpot for m in ok if m.tpot], 99) * 1e3 if ok else np.nan,
                                 server_queue_ms=server_mean(name, "vllm:request_queue_time_seconds", len(traces)),
                                 server_prefill_ms=server_mean(name, "vllm:request_prefill_time_seconds", len(traces)),
                                 goodput=good, goodput_low=low, goodput_high=high))

# %%
poisson = pd.DataFrame(poisson_rows)
results.table(poisson, "poisson_arrivals")
per_request = pd.DataFrame(request_rows)
results.table(per_request, "poisson_requests")  # every request, for chapter 9's replay


def in_flight(name: str, rate: float) -> float:
    """Requests in flight on average at one engine and rate (Little's law): their summed time from arrival to last
    token over the span from the first arrival to the last token."""
    g = per_request[(per_request.engine == name) & (per_request.rate_per_s == rate) & per_request.ok]
    ends = g.offset_s + (g.ttft_ms + g.tpot_ms.fillna(0) * (g.output_tokens - 1)) / 1e3
    return float((ends - g.offset_s).sum() / (ends.max() - g.offset_s.min()))


achieved_of = dict(zip(zip(poisson.engine, poisson.rate_per_s), poisson.realized_per_s))  # (engine, asked) -> achieved
capacity_of = {name: float(sweep[sweep.engine == name].requests_per_s.max()) for name in urls}
users_of = {name: int(sweep[sweep.engine == name].concurrency.max()) for name in urls}  # the closed loop's most
at_capacity = {name: min(rates_of[name], key=lambda r: abs(np.log(achieved_of[(name, r)] / capacity_of[name])))
               for name in urls}  # the rate whose arrivals came nearest the capacity
achieved = float((poisson.realized_per_s / poisson.rate_per_s).median())  # the rate achieved over the rate asked for
flight = {name: in_flight(name, r) for name, r in at_capacity.items()}
kept = ("fewer" if all(flight[n] < users_of[n] for n in flight) else
        "more" if all(flight[n] > users_of[n] for n in flight) else "")
show("Counted from their send times, the requests arrived at " + "; ".join(
         f"{prose.and_list(f'{achieved_of[(name, r)]:.3g}' for r in rates_of[name])} requests/s through {name}"
         for name in urls) + f", about {achieved:.2f} times the rates asked for. At the arrival rate nearest its capacity, "
     + prose.and_list(f"{name} had **{flight[name]:.1f} requests** in flight on average against the closed loop's "
                      f"{users_of[name]} users" for name in urls) + ". "
     + (f"Random arrivals at a closed loop's throughput kept {kept} requests in the engine than its users, so goodput "
        "there need not be the closed loop's." if kept else
        "Random arrivals at a closed loop's throughput need not keep as many requests in the engine as its users."),
     how=f"Every rate replays one seeded Poisson pattern of {arrivals} arrivals, scaled, and a sample of that size "
         "runs faster or slower than its rate: the table's `rate_per_s` is the rate asked for, `realized_per_s` the "
         "rate achieved (the arrivals less one over the span from the first send to the last), which the figure and "
         "the sentences use. Requests in flight are the requests' summed time from send to last token over the "
         "run's span (Little's law). The book's goodput is a fraction, the share of requests that met both "
         "objectives; the benchmark tools below report goodput as a rate, requests or tokens per second.")
prose.shown(poisson.round(2))

# %% [markdown]
# Goodput against the arrival rate, one line per engine:

# %%
fig, ax = plt.subplots(figsize=(7, 4))
for name, g in poisson.groupby("engine", sort=False):
    ax.errorbar(g.realized_per_s, g.goodput, yerr=[g.goodput - g.goodput_low, g.goodput_high - g.goodput],
                fmt="o-", capsize=3, label=name)
ax.axhline(collapse_below, color="grey", ls=":", label=f"collapse: interval below {collapse_below:.0%}")
collapsed = poisson[poisson.goodput_high < collapse_below].groupby("engine").realized_per_s.min()  # achieved rates
ax.set(xscale="log", xlabel="arrival rate achieved (requests / s)",
       ylabel="goodput (fraction meeting objectives)",
       ylim=(-0.05, 1.05), title=("goodput collapses at " + ", ".join(f"{r:.3g}/s ({n})" for n, r in collapsed.items()))
       if len(collapsed) else "goodput did not collapse at the rates tried")
ax.legend(fontsize=8)
results.figure(fig, "goodput_against_rate")
plt.show()

# %%
def collapse_text(g: pd.DataFrame, where) -> str:
    """Where one engine's goodput interval fell, as computed: the rate (achieved) from which its top is below
    ``collapse_below`` (a collapse), else the lowest rate whose interval reaches below it, else none."""
    if where is not None:
        down = g[g.goodput_high < collapse_below].realized_per_s
        if (down >= where).sum() == (g.realized_per_s >= where).sum():  # every rate from there up collapsed
            return f"It collapsed (its whole range below {collapse_below:.0%}) from **{where:.3g} requests/s**."
        return (f"Its whole range fell below {collapse_below:.0%} (a collapse) only at "
                + ", ".join(f"{r:.3g}" for r in down) + " requests/s, not at every rate above.")
    reached = g[g.goodput_low < collapse_below]
    if len(reached):
        r = reached.iloc[0]
        return (f"No rate's goodput fell clearly below {collapse_below:.0%}, this chapter's mark of a collapse; its "
                f"range first reached below it at {r.realized_per_s:.3g} requests/s ({r.goodput:.0%}, from "
                f"{r.goodput_low:.0%} to {r.goodput_high:.0%}).")
    return (f"No rate tried reached a collapse: goodput stayed at or above {collapse_below:.0%} at every rate, its "
            "whole range included.")


for name, g in poisson.groupby("engine", sort=False):
    low_rate, high_rate = g.iloc[0], g.iloc[-1]
    where = collapsed.get(name)
    claim = f"goodput_falls_with_load_{name.split()[0].lower()}"
    register.claim(claim, f"{name}: goodput at the highest arrival rate is below goodput at the lowest, beyond "
                          "their intervals.")
    verdict = register.record(
        claim, claims.below(Spread.in_row(high_rate, "goodput"), Spread.in_row(low_rate, "goodput"))
        if len(g) > 1 else None, predicted="high at low rates, collapsing above what the engine can serve",
        measured=", ".join(f"{r.realized_per_s:.3g}/s: {r.goodput:.0%} [{r.goodput_low:.0%}, {r.goodput_high:.0%}]"
                           for r in g.itertuples()) + " (rates achieved)",
        evidence=f"{arrivals} Poisson arrivals per rate (seed {seed}); objectives TTFT <= {goals[name].ttft_ms:.0f} "
                 f"ms, TPOT <= {goals[name].tpot_ms:.0f} ms; {resamples} bootstrap resamples")
    g0, g1, r0, r1 = low_rate.goodput, high_rate.goodput, low_rate.realized_per_s, high_rate.realized_per_s  # achieved
    ttfts = f"median TTFT went from {low_rate.ttft_ms:.0f} to {high_rate.ttft_ms:.0f} ms"
    show(f"{name}: goodput " + claims.pick(
        verdict,
        held=f"fell from **{g0:.0%}** at {r0:.3g} requests/s to **{g1:.0%}** at {r1:.3g}/s; {ttfts}. ",
        not_held=f"did not fall between {r0:.3g} and {r1:.3g} requests/s ({g0:.0%} against {g1:.0%}). The highest rate "
                 f"was {r1 / capacity_of[name]:.1f}x the capacity the closed loop "
                 f"measured, and {ttfts} against an objective of {goals[name].ttft_ms:.0f} ms. " + (
                     f"With {arrivals} arrivals per rate, no queue at the highest rate grew long enough to break the "
                     "objectives. " if g1 == 1 else f"Median TPOT went from {low_rate.tpot_ms:.0f} to "
                     f"{high_rate.tpot_ms:.0f} ms against an objective of {goals[name].tpot_ms:.0f} ms. "),
        unresolved=f"went from {g0:.0%} at {r0:.3g} requests/s to {g1:.0%} at {r1:.3g}/s: too close to call with "
                   f"{arrivals} arrivals per rate, their ranges overlapping. ",
        not_measured="was measured at one arrival rate only, so whether it falls with load is not measured here.")
         + ("" if verdict == claims.NOT_MEASURED else collapse_text(g, where)))

# %% [markdown]
# **Takeaway: judge an engine under load by its total tokens per second beside each user's TPOT. Under random
# arrivals, judge it by goodput against stated objectives: throughput alone does not say when it is overloaded**.
#
# ## One set of traces, five ways to score it
#
# Benchmark tools do not agree on what TTFT, ITL and TPOT mean (`lib.conventions` cites each one's code).
# In vLLM's benchmark, TTFT ends at the first streamed event that carries a `choices` list, even an empty one.
# GuideLLM's time per output token and LLMPerf's inter-token latency both include the wait for the first
# token. GenAI-Perf's inter-token latency is the book's TPOT. The traces of the largest concurrency level
# above, scored by each:

# %%
count_tokens = lambda text: len(lm.tokenizer(text, add_special_tokens=False).input_ids)  # noqa: E731
scored = pd.concat([conventions.compare(sweep_traces[(name, concurrency[-1])], goals[name].ttft_s, goals[name].tpot_s,
                                        count_tokens).assign(engine=name) for name in urls], ignore_index=True)
for col in ("ttft_mean", "itl_mean", "tpot_mean", "e2e_mean"):
    scored[col.replace("_mean", "_mean_ms")] = scored.pop(col) * 1e3
scored = scored.drop(columns=["ttft_p", "itl_p", "tpot_p"])
results.table(scored, "conventions")
prose.shown(scored[["engine", "convention", "ttft_mean_ms", "itl_name", "itl_mean_ms", "tpot_name", "tpot_mean_ms",
        "goodput", "goodput_unit"]].round(3))

# %%
def first_choice(name: str) -> str:
    """Why vLLM's benchmark and the book time the same requests' TTFT alike or not: where each request's first
    ``choices`` event (where vLLM's benchmark stops its clock) came, against its first token (the book's)."""
    ok = [t for t in sweep_traces[(name, concurrency[-1])] if t.ok and t.chunk_times]
    firsts = [next(e for e in t.events if e.choices) for t in ok]
    leads = [(t.chunk_times[0] - e.time) * 1e3 for t, e in zip(ok, firsts)]
    lead, early = np.median(leads), sum(x > 1.0 for x in leads)  # early: its first choice came before its token
    roles = sum(e.is_role_chunk for e in firsts)
    at = np.median([(e.time - t.sent) * 1e3 for t, e in zip(ok, firsts)])
    if lead > 1.0:
        return (f" In {early} of {len(ok)} requests {name} first sent an event without a token (a role chunk in "
                f"{roles} of them), a median {at:,.0f} ms after each was sent and {lead:,.0f} ms before its first "
                "token. Here vLLM's benchmark stops its clock at that event and the book at the first token, so what "
                "lies between is the prefill and the wait for it.")
    return (f" They nearly agree: {name}'s first event with a choice came a median {lead:.1f} ms before its first "
            f"token ({roles} of {len(ok)} a role chunk), so the two definitions end at about the same moment.")


def quoted(per_token: dict) -> str:
    """The tools that quote the same number per token, grouped: ``"The book's TPOT and GenAI-Perf's ... give 81.1 ms"``."""
    groups = {}
    for tool, ms in per_token.items():
        groups.setdefault(f"{ms:.1f}", []).append(tool)
    said = "; ".join(f"{prose.and_list(tools)} give{'s' * (len(tools) == 1)} {ms} ms" for ms, tools in groups.items())
    return said[:1].upper() + said[1:]


spreads_by = {}
for name, g in scored.groupby("engine", sort=False):
    g = g.set_index("convention")
    per_token = {"the book's TPOT": g.loc["book", "tpot_mean_ms"],
                 "GuideLLM's time_per_output_token": g.loc["guidellm", "tpot_mean_ms"],
                 "LLMPerf's inter_token_latency": g.loc["llmperf", "itl_mean_ms"],
                 "GenAI-Perf's inter_token_latency": g.loc["genai-perf", "itl_mean_ms"]}
    spreads_by[name] = (per_token, max(per_token.values()) / min(per_token.values()), g)
show("\n".join(f"* **{name}**: the same requests are quoted at **{min(p.values()):.1f}** to **{max(p.values()):.1f} ms** "
                f"per token ({spread:.2f}x apart) depending on the tool. {quoted(p)}. Their mean TTFT is "
                f"{g.loc['vllm', 'ttft_mean_ms']:.0f} ms by vLLM's benchmark and {g.loc['book', 'ttft_mean_ms']:.0f} "
                f"ms by the book's.{first_choice(name)}" for name, (p, spread, g) in spreads_by.items())
     + "\n\nThey differ by definition, not by noise: GuideLLM and LLMPerf spread TTFT over the tokens. Quote the "
       "definition with the number.")

# %% [markdown]
# ### The book's client beside vLLM's own benchmark
#
# The scores above are the book's traces scored by each tool's definitions. Whether the book's client times
# what a real benchmark client times is a measurement of its own. The same request (the question above,
# `max_new_tokens` tokens, greedy, `ignore_eos`) goes to the same vLLM server from `vllm bench serve` (vLLM's
# benchmark, run from `.venv-vllm`) and from the book's client. Both send one request at a time, in alternating
# rounds of `runs` requests, so a slow spell of the machine lands on both. The book's traces are scored twice: by
# vLLM's benchmark's definitions (its clock stops at the first event with a choice, and TPOT runs from there to
# the last one), which tests the book's clock against vLLM's, and by the book's own.


# %%
def bench_round(folder, i: int) -> list[dict]:
    """One round of ``vllm bench serve`` against the vLLM server: ``runs`` requests of the question, one at a time;
    each request's TTFT, TPOT, mean ITL and end-to-end latency (ms) as vLLM's benchmark computes them."""
    prompts = folder / "prompt.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": question}) + "\n" for _ in range(runs)))
    name = f"round{i}.json"
    argv = [str(vllm_python().parent / "vllm"), "bench", "serve", "--backend", "openai-chat",
            "--endpoint", "/v1/chat/completions", "--base-url", urls["vLLM"], "--model", model_ids["vLLM"],
            "--tokenizer", str(model_dir), "--dataset-name", "custom", "--dataset-path", str(prompts),
            "--skip-chat-template", "--custom-output-len", str(max_new_tokens), "--ignore-eos", "--temperature", "0",
            "--num-prompts", str(runs), "--max-concurrency", "1", "--request-rate", "inf", "--disable-tqdm",
            "--save-result", "--save-detailed", "--result-dir", str(folder), "--result-filename", name]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["(nothing on stderr)"])[-1]
        raise RuntimeError(f"vllm bench serve failed in round {i} (exit {done.returncode}): {last}")
    r = json.loads((folder / name).read_text())
    if r["failed"]:
        raise RuntimeError(f"vllm bench serve: {r['failed']} of {runs} requests failed in round {i}: {r['errors']}")
    return [dict(tool="vllm bench serve", round=i, request=j, output_tokens=n, ttft_ms=ttft * 1e3,
                 tpot_ms=(lat - ttft) / (n - 1) * 1e3, itl_ms=np.mean(itl) * 1e3, e2e_ms=lat * 1e3)
            for j, (ttft, itl, lat, n) in enumerate(zip(r["ttfts"], r["itls"], r["latencies"], r["output_lens"]))]


def book_round(i: int) -> list[dict]:
    """One round of the book's client: the same ``runs`` requests to the same server, scored by ``lib.metrics``."""
    traces = [send("vLLM", chat, max_new_tokens, request_id=200_000 + 100 * i + j, fixed=True) for j in range(runs)]
    for trace in traces:
        client.require_ok(trace, f"vLLM at {urls['vLLM']}", f"the book's round {i} beside vllm bench serve")
    rows = []
    for j, t in enumerate(traces):
        m = t.metrics()
        first = next(e.time for e in t.events if e.choices) - t.sent  # where vLLM's benchmark stops its TTFT clock
        rows.append(dict(tool="book's client", round=i, request=j, output_tokens=m.n_tokens, ttft_ms=first * 1e3,
                         tpot_ms=(m.e2e - first) / (m.n_tokens - 1) * 1e3, itl_ms=np.mean(m.gaps) * 1e3,
                         e2e_ms=m.e2e * 1e3, book_ttft_ms=m.ttft * 1e3, book_tpot_ms=m.tpot * 1e3))
    return rows


BENCHED = ("ttft_ms", "tpot_ms", "e2e_ms")  # what the claim compares; ITL is shown beside them
bench_missing = ("bench_rounds is 0" if not bench_rounds else None) or (
    None if "vLLM" in live else "vLLM is not among the engines this run started")
bench_rows = []

# %%
def interval_of(n: int, whose: str) -> str:
    """What the deciding interval of ``n`` runs is, in words: with too few runs for any narrower interval to reach
    95 % (five or fewer, `lib.claims.median_interval`) it is their whole range, else the 95 % interval of the median."""
    low, _, high = claims.median_interval(range(max(n, 1)))
    return (f"the range of {whose}" if (low, high) == (0, max(n, 1) - 1) else
            f"the {claims.CONFIDENCE * 100:g} % interval of the median of {whose}")


if bench_missing is None:
    with tempfile.TemporaryDirectory() as folder:
        try:
            for i in progress(range(bench_rounds), desc="book's client and vllm bench serve, round by round"):
                bench_rows += book_round(i) + bench_round(pathlib.Path(folder), i)
        except (RuntimeError, subprocess.TimeoutExpired) as error:  # the cross-check is lost, not the chapter
            bench_missing, bench_rows = str(error), []
            print(bench_missing)
bench = pd.DataFrame(bench_rows)
if len(bench):
    results.table(bench, "beside_vllm_bench")
    rounds = bench.groupby(["tool", "round"])[list(BENCHED) + ["itl_ms", "output_tokens"]].median()
    bench_summary = bench.groupby("tool", sort=False)[["output_tokens", "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms",
                                                        "book_ttft_ms", "book_tpot_ms"]].median()
    display(prose.shown(bench_summary.round(1)))

# %%
statement = ("On the same vLLM server and request, scored by vLLM's benchmark's definitions, the book's client and "
             "vllm bench serve give the same median TTFT, TPOT and end-to-end latency, round by round, within "
             f"{claims.SAME_QUANTITY:g}x of each other (the interval of the rounds' paired ratios).")
register.claim("client_agrees_with_vllm_bench", statement)
if bench_missing:
    register.record("client_agrees_with_vllm_bench", None, evidence=f"vllm bench serve was not run ({bench_missing})")
    show(f"The book's client was not set beside `vllm bench serve` in this run: {bench_missing}.")
else:
    ratio, verdicts = {}, []
    for col in BENCHED:
        by_round = rounds[col].unstack("tool")
        ratio[col] = Spread.of(by_round["book's client"] / by_round["vllm bench serve"])
        verdicts.append(claims.within(ratio[col], 1.0, claims.SAME_QUANTITY))
    label = {"ttft_ms": "TTFT", "tpot_ms": "TPOT", "e2e_ms": "end-to-end"}
    book_tool, bench_tool = "book's client", "vllm bench serve"
    pairs = ", ".join(f"{label[c]} {bench_summary.loc[book_tool, c]:,.1f} against {bench_summary.loc[bench_tool, c]:,.1f} ms"
                      for c in BENCHED)  # medians over every request: the book's client's, then the benchmark's
    lower = [label[c] for c in BENCHED if bench_summary.loc[book_tool, c] < bench_summary.loc[bench_tool, c]]
    lean_words = ("the book's client lower on " + (prose.and_list(lower) if lower else "none of them"))
    across = [label[c] for c, v in zip(BENCHED, verdicts) if v == claims.UNRESOLVED]
    worst = max(BENCHED, key=lambda c: abs(np.log((rounds[c].unstack("tool")[book_tool]
                                                   / rounds[c].unstack("tool")[bench_tool]).values)).max())
    by_round = rounds[worst].unstack("tool")[book_tool] / rounds[worst].unstack("tool")[bench_tool]
    far = int(abs(np.log(by_round)).idxmax())  # the round furthest from agreeing, on the measure furthest from it
    slower_tool = bench_tool if by_round[far] < 1 else book_tool  # the side whose time set that round apart
    slow = bench[(bench.tool == slower_tool) & (bench["round"] == far)].sort_values(worst).iloc[-1]
    outlier = (f" The furthest round was round {far}, where the book's client's median {label[worst]} was "
               f"{by_round[far]:.2f}x the benchmark's; "
               + ("the benchmark's" if slower_tool == bench_tool else "the book's client's") + " slowest request there "
               f"took {slow[worst]:,.1f} ms (" + ("its first of the round" if int(slow.request) == 0 else
                                                  f"request {int(slow.request)} of the round")
               + f"), against its median over every request of {bench_summary.loc[slower_tool, worst]:,.1f} ms.")
    verdict = register.record("client_agrees_with_vllm_bench", claims.every(verdicts),
                              predicted=f"the same within {claims.SAME_QUANTITY:g}x",
                              measured="; ".join(f"{label[c]} {ratio[c].mid:.4f}x ({ratio[c].low:.4f}-"
                                                 f"{ratio[c].high:.4f})" for c in BENCHED),
                              evidence=f"{bench_rounds} alternating rounds of {runs} requests each, one at a time, "
                                       f"{max_new_tokens} tokens with ignore_eos; beside_vllm_bench.csv")
    tol = f"{claims.SAME_QUANTITY:g}x ({1 / claims.SAME_QUANTITY:.4f}-{claims.SAME_QUANTITY:.4f})"
    show("Scored alike, the book's client and `vllm bench serve` " + claims.pick(
        verdict, held=f"agreed on the same requests: {pairs}.",
        not_held=f"did not agree: {pairs}, {lean_words}.{outlier}",
        unresolved=f"came out at {pairs}. Round by round it is too close to call whether they agree; more rounds "
                   "(`bench_rounds`) would decide.")
         + f" By the book's own definitions its TTFT was {bench_summary.loc[book_tool, 'book_ttft_ms']:,.1f} ms and "
           f"its TPOT {bench_summary.loc[book_tool, 'book_tpot_ms']:,.1f} ms: the first token, not the first event, "
           "ends its TTFT.",
         how=f"The sentence's figures are medians over every request, the book's client's first. Round by round, the "
             f"book's client's median over the benchmark's, over {bench_rounds} rounds ("
             + interval_of(bench_rounds, f"the {bench_rounds} rounds' paired ratios") + "): " + "; ".join(
                 f"{label[c]} {ratio[c].mid:.4f}x ({ratio[c].low:.4f}-{ratio[c].high:.4f})" for c in BENCHED)
             + f". Two instruments scoring the same requests may differ by `lib.claims.SAME_QUANTITY`, {tol}, what "
               "one tool's clock placement and parsing can add: the two agree where every interval lies within it"
             + (f"; the {prose.and_list(across)} interval{'s' * (len(across) != 1)} reach{'es' * (len(across) == 1)} "
                "across it." if across else ".") + (outlier if verdict == claims.UNRESOLVED else ""))


# %% [markdown]
# ## Chapter 5's stall, inside a real scheduler
#
# Stream A decodes; after its `stall_arrival`-th token arrives, request B sends a prompt of
# `stall_prompt_tokens` tokens (`lib.stall.stall_experiment`). Each scheduler step has a token budget (vLLM's
# `--max-num-batched-tokens`, here `vllm_budgets`; `transformers serve`'s `--cb-max-batch-tokens`, here
# `tf_batch_tokens`). A prompt longer than the budget is prefilled in pieces of at most the budget, one piece per
# step beside A's decode token (**chunked prefill**). B's prompt starts with a different request number in every
# run, so no engine can skip its prefill by reusing a cached prefix (vLLM also runs with its prefix cache off
# throughout this chapter). A asks for a story, so that its reply outlasts B's arrival. Below, the cost model
# prices each budget's piece in-process on this machine (chapter 0's ceilings).

# %%
vllm_cores = compute_threads("vLLM", torch.get_num_threads())
on_vllm_cores = costmodel.CostModel(ceilings, MODEL, machine.MODELS[MODEL][0].with_dtype("fp32"), "fp32", vllm_cores)
filler = lm.tokenizer("The quick brown fox jumps over the lazy dog. " * (stall_prompt_tokens // 5 + 10),
                      add_special_tokens=False).input_ids
long_text = lm.tokenizer.decode(filler[:stall_prompt_tokens])
b_chat = [{"role": "user", "content": long_text}]
b_ids = lm.tokenizer.apply_chat_template(b_chat, add_generation_prompt=True, return_tensors="pt",
                                         return_dict=True)["input_ids"]
b_len = b_ids.shape[1]  # B's prompt as the engines see it: the text's tokens and the chat template's
piece_sizes = sorted({min(b, b_len) for b in [tf_batch_tokens, *vllm_budgets]} | {b_len})
show(f"B's prompt is **{b_len:,} tokens** as this chapter's tokenizer counts it in the chat template "
     f"({stall_prompt_tokens:,} of text; each engine counts its own template's, below); vLLM's budgets are "
     f"{', '.join(f'{b:,}' for b in vllm_budgets)} tokens, `transformers serve`'s {tf_batch_tokens:,}. On {torch.get_num_threads()} threads the cost model prices "
     "a prefill of " + ", ".join(f"{n:,} tokens at **{priced.prefill(n).best * 1e3:,.0f} ms**" for n in piece_sizes)
     + f". On the {prose.count(vllm_cores, 'core')} vLLM's CPU build computes on (it keeps one for its server and "
       "scheduler processes), the same prefills are priced at "
     + ", ".join(f"**{on_vllm_cores.prefill(n).best * 1e3:,.0f} ms**" for n in piece_sizes) + ".")

# %% [markdown] tags=["predict"]
# **Predict first.** A's ordinary gap through each engine is in the one-request table above, and a step that
# carries a piece of B's prompt also runs A's decode token. When B arrives, about how many milliseconds do you
# expect A's worst gap to last at each budget, and as the budget shrinks, does B's first token come sooner or
# later?

# %% [markdown]
# <details><summary>The book's prediction (open it once you have written yours)</summary>
#
# From chapter 5: A's worst gap should be about one of its ordinary gaps plus the prefill
# of one piece, which the cost model prices on the cores the engine computes on (vLLM's CPU build keeps one core
# for its scheduler process); a piece of the whole prompt when the budget holds it all; the same piece timed
# in-process on the same model is shown beside it; and B's TTFT grows by one step per piece as the budget
# shrinks.
#
# </details>

# %%
a_chat = load_prompt  # a story: A must still be streaming when B arrives (transformers serve stops at end of turn)
settings = [(n, tf_batch_tokens if n in live else 0) for n in urls if n != "vLLM"]  # 0: the server's own
settings += [("vLLM", b) for b in vllm_budgets] if "vLLM" in urls else []
pieces = sorted({min(b or b_ids.shape[1], b_ids.shape[1]) for _, b in settings} | {b_ids.shape[1]})
piece_ms = {p: timing.measure(lambda: phases.prefill(lm, b_ids[:, :p], logits="last"), cpu, warmup=1,
                              repeats=max(runs, 2)) for p in pieces}
ceilings = machine.load_ceilings(cpu, quick=quick)
n_threads = torch.get_num_threads()
cores_of = {name: compute_threads(name, n_threads) for name in urls}
costs = {c: costmodel.CostModel(ceilings, MODEL, machine.MODELS[MODEL][0].with_dtype("fp32"), "fp32", c)
         for c in set(cores_of.values())}
cost = costs[n_threads] if n_threads in costs else next(iter(costs.values()))
prose.shown(pd.DataFrame([dict(piece_tokens=p, **{f"predicted_{c}_thread{'s' * (c != 1)}_ms": m.prefill(p).best * 1e3 for c, m in costs.items()},
                   in_process_ms=t.median_ms, low_ms=t.low_ms, high_ms=t.high_ms) for p, t in piece_ms.items()]).round(0))

# %%
def stall_once(name: str, budget, run: int) -> dict:
    """Chapter 5's experiment once against engine ``name``; A's gaps before and across B's arrival. B's prompt
    starts with the engine, budget and run, so no run can reuse a cache an earlier one left."""
    b_run = [{"role": "user", "content": f"Request {run} to {name} at {budget}. {long_text}"}]
    timeout_s = server_budgets[name].timeout_s()
    with server_budgets[name].request():
        a, b = stall_experiment(urls[name], model_ids[name], a_chat, stall_tokens, b_run, stall_arrival,
                                extra=fixed_length(name), timeout_s=timeout_s)
    server_budgets[name].check(a), server_budgets[name].check(b)
    if not (a.ok and b.ok):
        return dict(engine=name, budget_tokens=budget, error=a.error or b.error)
    m, case = a.metrics(), stall_case(a, b, factor=elevated_factor)
    before = [g for g, t in zip(m.gaps, a.token_times()[1:]) if t < b.sent]
    return dict(engine=name, budget_tokens=budget, b_prompt_tokens=b.prompt_tokens, a_tokens=m.n_tokens,
                a_median_gap_before_ms=np.median(before) * 1e3 if before else np.nan,
                a_worst_gap_ms=m.worst_gap * 1e3, b_ttft_ms=b.metrics().ttft * 1e3, case=case.case,
                a_ordinary_gap_ms=case.ordinary_gap * 1e3, a_worst_gap_during_ms=case.worst_gap * 1e3,
                a_elevated_gaps=case.elevated, a_excess_ms=case.excess * 1e3, worst_share=case.worst_share,
                b_after_a=case.b_after_a, error=None)


def most_common_case(runs_: pd.DataFrame) -> dict:
    """One setting's case: the one most of its runs showed, with the medians of those runs' numbers."""
    case = runs_.case.value_counts().index[0]
    same = runs_[runs_.case == case]
    numbers = ["a_tokens", "a_ordinary_gap_ms", "a_worst_gap_during_ms", "a_elevated_gaps", "a_excess_ms",
               "worst_share", "b_ttft_ms"]
    return dict(case=case, case_runs=f"{len(same)} of {len(runs_)}", **{f"case_{c}": same[c].median() for c in numbers})


# %% [markdown]
# Every setting runs `runs` times, one vLLM at a time (each budget is a fresh engine):

# %%
elevated_factor = 2.0  # a gap of A is elevated above this many times its ordinary gap (lib.stall.stall_case)
stall_rows = []
for name, budget in settings:
    if name != "vLLM":
        stall_rows += [stall_once(name, budget, run) for run in range(runs)]
        continue
    # one vLLM at a time: the running one has the first budget, each other budget is a fresh engine
    engine = live.pop("vLLM") if budget == vllm_budgets[0] else vllm_engine(
        model_dir, max_num_batched_tokens=budget, threads=threads, start_timeout_s=start_timeout_s).start()
    try:
        urls["vLLM"], model_ids["vLLM"] = engine.base_url, client.served_model(engine.base_url)
        server_budgets["vLLM"].server = f"vLLM at {engine.base_url}"
        warm_up("vLLM", chat, 4)
        stall_rows += [stall_once("vLLM", budget, run) for run in range(runs)]
    finally:
        engine.stop()
stalls = pd.DataFrame(stall_rows)
results.table(stalls, "stall_runs")
if stalls.error.notna().any():
    raise RuntimeError(f"stall requests failed: {stalls.error.dropna().tolist()}")

# %%
stall = timing.median_range(stalls, ["engine", "budget_tokens"], ["a_median_gap_before_ms", "a_worst_gap_ms",
                                                                   "b_ttft_ms"])
stall["piece_tokens"] = [min(int(b), b_ids.shape[1]) if b else b_ids.shape[1] for b in stall.budget_tokens]
stall["priced_threads"] = [cores_of.get(e, n_threads) for e in stall.engine]  # vLLM on the cores it computes on
stall["predicted_worst_gap_ms"] = [costs[c].prefill(p).best * 1e3 for p, c in zip(stall.piece_tokens, stall.priced_threads)] \
    + stall.a_median_gap_before_ms
stall["in_process_worst_gap_ms"] = [piece_ms[p].median_ms for p in stall.piece_tokens] + stall.a_median_gap_before_ms
cases = pd.DataFrame([dict(engine=e, budget_tokens=b, **most_common_case(g))
                      for (e, b), g in stalls.groupby(["engine", "budget_tokens"], sort=False)])
stall = stall.merge(cases, on=["engine", "budget_tokens"])
results.table(stall, "stall")
prose.shown(stall.round(0).assign(case_worst_share=stall.case_worst_share.round(2)))  # a share, not milliseconds

# %% [markdown]
# Beside it, chapter 5's in-process experiment:

# %%
ch5 = load_table("05_interference", "interference", quick=quick)
if ch5 is None:
    print("chapter 5's table is absent: run `python -m lib.make.book 05_interference` to show it here")
else:
    display(Markdown("Chapter 5's in-process experiment (its own model, see its provenance), for comparison:"))
    display(ch5[["chunk_tokens", "a_worst_gap_ms", "b_ttft_ms"]].round(0))

# %% [markdown]
# What did each engine do with B's prompt while A streamed? `lib.stall.stall_case` reads it from the two traces
# alone. A's ordinary gap is its median gap before B arrived; a gap of A that overlaps B's wait (from B's arrival
# to B's first token) is elevated when it is more than `elevated_factor` times the ordinary gap, and its excess
# is what it holds beyond it. A setting's case is the one most of its runs showed, with those runs' medians:
#
# * **one stall**: one elevated gap holds at least 80 % of A's excess (B's prefill ran inside A's stream in one go).
# * **pieces**: several elevated gaps, B's prefill interleaved with A's decode.
# * **queued**: no elevated gap, and B's first token after A's last (B waited until A finished).
# * **A did not notice**: no elevated gap, and B served before A ended.

# %%
def stall_sentence(r) -> str:
    """What the engine of ``r`` (a row of ``stall``) did with B's prefill, in one sentence, for its case."""
    budget = f"budget {r.budget_tokens:.0f}" if r.budget_tokens else "its own budget"
    who = f"**{r.engine}** ({budget}; {r.case_runs} runs)"
    ordinary, worst, ttft = r.case_a_ordinary_gap_ms, r.case_a_worst_gap_during_ms, r.case_b_ttft_ms
    calm = f"no gap of A rose above {elevated_factor:g}x its ordinary {ordinary:.0f} ms (the worst was {worst:.0f} ms)"
    return {
        "after_a": f"{who}: B arrived after A's last chunk (A's reply was {prose.tokens(r.case_a_tokens)}; B waits for "
                   f"its chunk {stall_arrival}), so A had nothing left to stall and this setting measured no "
                   f"interference; B's TTFT alone was {ttft:.0f} ms.",
        "one_stall": f"{who}: B's prefill ran inside A's stream as **one stall**: A's worst gap was {worst:.0f} ms "
                     f"against its ordinary {ordinary:.0f} ms, that one gap held {r.case_worst_share:.0%} of the "
                     f"{r.case_a_excess_ms:.0f} ms A lost, and B's TTFT was {ttft:.0f} ms.",
        "pieces": f"{who}: B's prefill ran **in pieces interleaved with A**: {r.case_a_elevated_gaps:.0f} of A's "
                  f"gaps rose above {elevated_factor:g}x its ordinary {ordinary:.0f} ms (the worst {worst:.0f} ms), "
                  f"adding {r.case_a_excess_ms:.0f} ms in all against B's TTFT of {ttft:.0f} ms.",
        "queued": f"{who}: B was **queued until A finished**: {calm}, and B's first token came after A's last, "
                  f"{ttft:.0f} ms after B was sent.",
        "undisturbed": f"{who}: B was served while A streamed and **A did not notice**: {calm}, and B's first "
                       f"token came {ttft:.0f} ms after it was sent, before A's last.",
        "not_measured": f"{who}: a request had no content, so the traces decide nothing.",
    }[r.case]


display(Markdown("\n".join(f"* {stall_sentence(r)}" for r in stall.itertuples())))
counted = stalls.b_prompt_tokens.dropna()
if len(counted):
    show(f"The engines counted B's prompt at {prose.span(counted.min(), counted.max(), ',.0f')} tokens, against "
         f"{b_len:,} by this chapter's tokenizer: each applies its own chat template.")

# %%
tested = [r for r in stall.itertuples() if r.case not in ("after_a", "not_measured")]
by_setting = {k: Spread.of(g.a_worst_gap_ms) for k, g in stalls.groupby(["engine", "budget_tokens"], sort=False)}
ok = [claims.within(by_setting[(r.engine, r.budget_tokens)], r.predicted_worst_gap_ms, claims.PREDICTED_TIME)
      if r.case in ("one_stall", "pieces") else claims.NOT_HELD for r in tested]
statement = ("At every setting, A's worst gap is one ordinary gap plus the cost model's prefill of one budget-sized "
             "piece of B, within the tolerance for a predicted time.")
register.claim("stall_is_one_piece", statement)
verdict = register.record(
    "stall_is_one_piece", claims.every(ok) if tested and same_model else None,
    predicted=", ".join(f"{r.engine} at budget {r.budget_tokens:.0f}: {r.predicted_worst_gap_ms:.0f} ms"
                        for r in stall.itertuples()),
    measured=", ".join(f"{r.engine} at budget {r.budget_tokens:.0f}: {r.a_worst_gap_ms:.0f} ms "
                       f"({r.case.replace('_', ' ')})" for r in stall.itertuples()),
    evidence=f"{runs} runs per setting; B's prompt {b_ids.shape[1]} tokens; pieces priced by the cost model; "
             "settings where B arrived after A ended are left out")
where = lambda r: f"{r.engine} (budget {r.budget_tokens:.0f})"  # noqa: E731  (a setting, in words)
as_priced = [where(r) for r, v in zip(tested, ok) if v == claims.HELD]

# %% [markdown]
# Where a setting missed its price, the same piece of B timed in-process on as many cores tells who missed: when the
# in-process piece keeps the price, the engine ran it differently; when it misses too, the price itself is off.

# %%
def miss(r, v: str) -> str:
    """Where setting ``r`` (verdict ``v``) missed its price, by how much, and what the same piece took in-process."""
    if r.case not in ("one_stall", "pieces"):
        return f"At {where(r)} B's prefill did not stall A at all (the list above says what happened)."
    ratio, less = r.a_worst_gap_ms / r.predicted_worst_gap_ms, r.a_worst_gap_ms < r.predicted_worst_gap_ms
    head = (f"At {where(r)} A's worst gap was {r.a_worst_gap_ms:,.0f} ms against {r.predicted_worst_gap_ms:,.0f} ms "
            f"predicted ({ratio:.2f}x, {abs(1 - ratio):.0%} {'less' if less else 'more'})"
            + (", too close to call" if v == claims.UNRESOLVED else "") + ".")
    here, own = r.in_process_worst_gap_ms, r.a_worst_gap_ms / r.in_process_worst_gap_ms  # engine over in-process
    piece = (f"the same piece timed in-process on {prose.count(n_threads, 'thread')}, plus an ordinary gap, took "
             f"{here:,.0f} ms")
    ran = f" The engine ran that piece {'faster' if less else 'slower'} than the cost model prices it on " \
          f"{prose.count(r.priced_threads, 'core')}"
    if r.priced_threads != n_threads:  # in-process ran on other cores than the price's: it does not test the price
        return head + f"{ran} ({piece}, on more cores than the engine's)."
    lo, hi = claims.allowed(r.predicted_worst_gap_ms, claims.PREDICTED_TIME)
    if lo <= here <= hi:  # in-process kept the price: the engine is what differs
        return head + f"{ran}: {piece}, within the price's range."
    return (head + f" The price itself is off: {piece}, {here / r.predicted_worst_gap_ms:.2f}x the price, so the cost "
            f"model prices this piece too {'low' if here > r.predicted_worst_gap_ms else 'high'}. The engine took "
            + (f"about as long as in-process ({own:.2f}x)." if 1 / claims.PREDICTED_TIME <= own <= claims.PREDICTED_TIME
               else f"{own:.2f}x the in-process time, {'slower' if own > 1 else 'faster'} than in-process as well."))


matched = (f"A's worst gap was one ordinary gap plus the cost model's price of one piece of B at "
           f"{prose.and_list(as_priced)}. " if as_priced else "")
missed = " ".join(miss(r, v) for r, v in zip(tested, ok) if v != claims.HELD)
told = f"{matched}{missed}"  # the settings that matched their price, then each miss and by how much
decided = {claims.HELD: "within it", claims.NOT_HELD: "outside it", claims.UNRESOLVED: "straddling its edge"}
_ns = sorted({len(by_setting[(r.engine, r.budget_tokens)].runs) for r in tested}) or [runs]  # runs per setting
how = (f"Each setting's worst gap over its runs ({interval_of(max(_ns), f'its {prose.and_list(_ns)} runs')}) is held "
       f"to {1 / claims.PREDICTED_TIME:.2f}–{claims.PREDICTED_TIME:g}x its predicted gap (`lib.claims.PREDICTED_TIME`): "
       + "; ".join(f"{where(r)} {by_setting[(r.engine, r.budget_tokens)].text(',.0f', 'ms')} against "
                   "{:,.0f}–{:,.0f} ms allowed, ".format(*claims.allowed(r.predicted_worst_gap_ms, claims.PREDICTED_TIME))
                   + decided[v] for r, v in zip(tested, ok))
       + ". The claim holds only where every setting does.")
show(claims.pick(
    verdict,
    held="At every setting, A's worst gap was one ordinary gap plus the cost model's price of one piece of B: "
         + ", ".join(f"{r.engine} (budget {r.budget_tokens:.0f}) froze A for **{r.a_worst_gap_ms:,.0f} ms** against "
                     f"{r.a_median_gap_before_ms:.0f} ms gaps before (predicted {r.predicted_worst_gap_ms:,.0f})"
                     for r in tested)
         + ". A production scheduler stalls a decoding stream for one step holding a piece of the newcomer's prompt, "
           "as chapter 5's loop did.",
    not_held=told,
    unresolved=told,
    not_measured=("The stall was not set beside its price: the server serves another model than the one the cost "
                  "model prices (its stall is shown above)." if not same_model else
                  "The stall was not measured: in no setting was A still streaming when B arrived. "
                  + " ".join(stall_sentence(r) for r in stall.itertuples()))), how=how if tested and same_model else None)

# %% [markdown]
# And in vLLM, the trade across its budgets:

# %%
vl = stall[stall.engine == "vLLM"].sort_values("budget_tokens", ascending=False)
statement = ("In vLLM, a smaller --max-num-batched-tokens shortens A's worst gap and lengthens B's TTFT, beyond the "
             "runs' intervals.")
register.claim("chunking_trades_stall_for_ttft", statement)
gaps_by = [Spread.of(stalls[(stalls.engine == "vLLM") & (stalls.budget_tokens == b)].a_worst_gap_ms) for b in vl.budget_tokens]
ttfts_by = [Spread.of(stalls[(stalls.engine == "vLLM") & (stalls.budget_tokens == b)].b_ttft_ms) for b in vl.budget_tokens]
sides = [claims.below(gaps_by[-1], gaps_by[0]), claims.below(ttfts_by[0], ttfts_by[-1])] if len(vl) > 1 else []
verdict = register.record(
    "chunking_trades_stall_for_ttft", claims.every(sides) if sides else None, predicted="worst gap falls, B's TTFT rises, as the budget shrinks",
    measured="; ".join(f"budget {r.budget_tokens:.0f}: A's worst gap {r.a_worst_gap_ms:.0f} ms, B's TTFT "
                       f"{r.b_ttft_ms:.0f} ms" for r in vl.itertuples()),
    evidence=f"{runs} runs per budget; a fresh vLLM per budget")
trade = {}  # the largest budget against the smallest, for the takeaways
if len(vl) > 1:
    wide, narrow = vl.iloc[0], vl.iloc[-1]
    trade = dict(b0=wide.budget_tokens, b1=narrow.budget_tokens, gap0=wide.a_worst_gap_ms, gap1=narrow.a_worst_gap_ms,
                 ttft0=wide.b_ttft_ms, ttft1=narrow.b_ttft_ms)
    b_tokens = stalls[stalls.engine == "vLLM"].b_prompt_tokens.median()  # as vLLM counted B's prompt
    b_tokens = int(b_tokens) if np.isfinite(b_tokens) else b_len
    steps, steps0 = (-(-b_tokens // int(budget)) for budget in (narrow.budget_tokens, wide.budget_tokens))  # its pieces
    took = (f"took A's worst gap from {wide.a_worst_gap_ms:.0f} to {narrow.a_worst_gap_ms:.0f} ms and B's TTFT "
            f"from {wide.b_ttft_ms:.0f} to {narrow.b_ttft_ms:.0f} ms")
    show(f"In vLLM, shrinking the budget from {wide.budget_tokens:.0f} to {narrow.budget_tokens:.0f} tokens "
         + claims.pick(
             verdict,
             held=f"cut A's worst gap from {wide.a_worst_gap_ms:.0f} to **{narrow.a_worst_gap_ms:.0f} ms** and "
                  f"lengthened B's TTFT from {wide.b_ttft_ms:.0f} to **{narrow.b_ttft_ms:.0f} ms**, beyond the runs' "
                  "ranges: chunked prefill in a production scheduler makes chapter 5's trade.",
             not_held=f"{took}: not chapter 5's trade, a shorter stall bought with a longer TTFT." + (
                 " The worst gap did not shrink with the piece, so something other than the piece's size, such as "
                 "each step's fixed cost, set it." if sides[0] == claims.NOT_HELD else "") + (
                 f" B's TTFT did not grow: the {prose.count(steps, 'step')} its prompt took at budget "
                 f"{narrow.budget_tokens:.0f} cost no more in all than the {prose.count(steps0, 'step')} at "
                 f"{wide.budget_tokens:.0f}, so "
                 "chunking's price did not show here." if sides[1] == claims.NOT_HELD else ""),
             unresolved=f"{took}: too close to call whether the budget made chapter 5's trade, the runs' ranges "
                        "of one of the two overlapping (the table above has both)."))
else:
    show("Whether a smaller vLLM budget trades A's worst gap for B's TTFT is not measured in this run: "
         + ("only one vLLM budget was measured" if "vLLM" in urls else "a server at base_url was measured instead"
            if base_url else vllm_missing or "vLLM is not among this run's engines") + ".")

# %%
fig, ax = plt.subplots(figsize=(7, 4))
for name, g in stall.groupby("engine", sort=False):
    ax.plot(g.budget_tokens, g.a_worst_gap_ms, "o-", label=f"{name}: A's worst gap")
    ax.plot(g.budget_tokens, g.b_ttft_ms, "s--", label=f"{name}: B's TTFT")
ax.axhline(piece_ms[b_ids.shape[1]].median_ms, color="grey", ls=":", label="B's whole prefill in-process")
worst = stall.loc[stall.a_worst_gap_ms.idxmax()]
ax.set(xscale="log" if (stall.budget_tokens > 0).all() else "linear", yscale="log",
       xlabel="token budget per step (0: the server's own)", ylabel="ms",
       title=f"a {b_len:,}-token prompt froze A for up to {worst.a_worst_gap_ms:.0f} ms ({worst.engine}, "
             + (f"budget {worst.budget_tokens:.0f}" if worst.budget_tokens else "its own budget")
             + (": the whole prompt in one step)" if worst.budget_tokens >= stalls[
                 (stalls.engine == worst.engine) & (stalls.budget_tokens == worst.budget_tokens)].b_prompt_tokens.max()
                else ")"))
ax.legend(fontsize=8)
results.figure(fig, "stall_against_budget")
plt.show()

# %% [markdown]
# ## Two latencies, two problems
#
# TTFT and the gaps between tokens are set by different work, so they are fixed in different places. TTFT is
# the prefill plus whatever the request waited before it: shortened by a cheaper prefill (a cached prefix,
# chapter 9), by less queueing, and by a scheduler that admits a newcomer sooner (chunking that lets it start
# beside the streams, or priority). A gap between tokens is one decode step: lengthened by a bigger batch in
# that step and by a prefill sharing it, so shortened by a cheaper step (chapter 8), a smaller batch, and
# chunked prefill. A newcomer's prefill is where the two meet: it is the newcomer's TTFT and, run inside
# another stream's step, that stream's worst gap. This chapter's numbers, side by side:

# %%
def went(a: float, b: float, why: str = "") -> str:
    """``a`` to ``b`` ms in words, with ``why`` where it rose; "about" within the book's noise (`lib.claims.NOISE`)."""
    if abs(b - a) <= claims.NOISE * a:
        return f"stayed about {a:,.0f} ms ({b:,.0f})"
    return f"went from {a:,.0f} to {b:,.0f} ms" + (f" ({why})" if b > a and why else "")


lines = []
for name, g in sweep.groupby("engine", sort=False):
    lo, hi = g.iloc[0], g.iloc[-1]
    lines.append(f"* **{name}**, {lo.concurrency} to {hi.concurrency} users at once: the median TTFT "
                 f"{went(lo.ttft_ms, hi.ttft_ms)}, and each user's TPOT "
                 f"{went(lo.tpot_ms, hi.tpot_ms, tpot_growth(name, lo, hi)[0])}.")
queued = own.dropna(subset=["server_queue_ms", "server_prefill_ms"])
lines += [f"* **{r.path}**'s own histograms split one lone request's TTFT into {r.server_queue_ms:.1f} ms queued and "
          f"{r.server_prefill_ms:.0f} ms prefilling" + (": alone, its TTFT is almost all prefill." if r.server_queue_ms
                                                        < 0.1 * r.server_prefill_ms else ".") for r in queued.itertuples()]
lines += [f"* **{r.engine}** ({f'budget {r.budget_tokens:.0f}' if r.budget_tokens else 'its own budget'}): a "
          f"{b_ids.shape[1]:,}-token newcomer had its first token after {r.b_ttft_ms:,.0f} ms, and its prefill took a "
          f"decoding stream's worst gap to {r.a_worst_gap_ms:,.0f} ms against {r.a_median_gap_before_ms:.0f} ms gaps "
          "before it arrived."
          for r in stall.itertuples() if r.case in ("one_stall", "pieces")]
if trade:
    lines.append(f"* In vLLM, a budget of {trade['b1']:.0f} tokens instead of {trade['b0']:.0f} took the worst gap from "
                 f"{trade['gap0']:,.0f} to {trade['gap1']:,.0f} ms and the newcomer's TTFT from {trade['ttft0']:,.0f} to "
                 f"{trade['ttft1']:,.0f} ms"
                 + (": the smaller budget did not shorten the gaps here" if trade["gap1"] >= trade["gap0"] else
                    ": chunking shortened the gaps at the newcomer's expense" if trade["ttft1"] > trade["ttft0"] else
                    ": the gaps shortened and the newcomer waited no longer, so this run did not show chunking's price")
                 + ".")
show("\n".join(lines), how="Each figure is a median over its runs. The closed-loop sweep does not split a TTFT into "
     "waiting and prefilling beside the others; whether a budget's differences lie beyond the runs' ranges, the "
     "chunking finding above says." if trade else "Each figure is a median over its runs. The closed-loop sweep "
     "does not split a TTFT into waiting and prefilling beside the others.")

# %% [markdown]
# **Takeaway: the book's two phases can be measured over the wire with its own tools**. Set a served request
# beside the in-process one to see what the engine's path adds or saves. Load the engine to see what batching
# buys and costs. Send a long prompt into a stream to see how its scheduler places the prefill.
#
# ## What these numbers do not show
#
# * **A 135M-parameter model on a shared CPU.** Production engines serve billion-parameter models on GPUs,
#   where a decode step is memory-bound far longer and batching pays much more. The shapes, not the sizes,
#   carry over.
# * **Loopback only.** No real network: a deployment adds its round trip to TTFT and may buffer a stream.
# * **Threads.** vLLM's CPU build keeps one core for its server and scheduler processes
#   (`VLLM_CPU_NUM_OF_RESERVED_CPU`) and computes on the rest, one pinned thread per core; the in-process path
#   and `transformers serve` run `threads` free-running threads (all cores by default). Threads that wait for
#   each other can lose more than one pinned thread does, so the paths can differ by more than their kernels;
#   this chapter does not time that apart: re-run with `threads = 1` to compare them like for like.
# * **Few requests per point.** Goodput's intervals are wide with `arrivals` requests per rate (24 as shipped);
#   the seeded arrivals make a run repeatable, not representative.
# * **Greedy decoding, one prompt per experiment.** Sampling and long contexts are not exercised; prefix
#   caching across different prompts is chapter 9's.
# * **`ignore_eos`**: vLLM is asked for exactly the requested tokens. `transformers serve` ignores the field, so
#   its replies may end earlier; their token counts come from its usage report.
#
# ## Takeaways
#
# * A client's clock starts before the server's and stops after it, so its TTFT should cover the server's own.
#   Where an engine reports its own histograms, set them beside the client's (the finding above says whether they
#   nested here).
# * Report load as total tokens per second beside each user's TPOT, which continuous batching is meant to trade
#   against each other; state the objectives and report goodput with its interval.
# * A closed loop's queue is bounded by its users: it cannot grow without bound, but each user's latency, and so
#   goodput, still falls as users are added (the closed loop's goodput column above shows how far here). An open
#   loop's queue can grow without bound once arrivals outpace service; whether this run's rates reached a
#   collapse, the goodput findings above say.
# * To see what chunked prefill does, send a long prompt while another stream decodes and vary the token
#   budget: the decoding stream's worst gap and the newcomer's TTFT are the two sides of the trade (the finding
#   above says whether this run saw it).
# * Before comparing two benchmark reports, check which tool wrote them: TTFT, ITL and TPOT are not defined
#   alike.
#
# ## Check yourself
#
# 1. A closed loop of 8 users and an open loop at 8 requests per second: which one can build a queue without
#    bound?
#
# <details><summary>Answer</summary>
#
# The open loop. A closed-loop user waits for its reply before sending again, so at most 8 requests are ever in
# the server and the load falls when the server slows down; each user's latency still grows with the number of
# users, so goodput can still fall. Open-loop arrivals keep coming, and the queue grows without bound once they
# outpace the server.
# </details>
#
# 2. One tool reports a TPOT of 120 ms, another an inter-token latency of 100 ms, for the same run of 50-token
#    replies with a 1 s TTFT. Can both be right?
#
# <details><summary>Answer</summary>
#
# Yes: if the 120 ms includes the first token's wait, (1,000 + 49 x 100) / 50 = 118 ms, about the first tool's
# figure, while the second excludes it (GuideLLM's time_per_output_token against its inter_token_latency).
# </details>
#
# 3. Why should vLLM's own TTFT histogram come out shorter than the client's?
#
# <details><summary>Answer</summary>
#
# The server starts its clock when it has received and parsed the request and stops it when it has the first
# token; the client's clock also runs while the request travels, is read and queued by the HTTP server, and while
# the first chunk travels back.
# </details>
#
# 4. A newcomer's 1,000-token prompt and a token budget of 128: about how many steps does its prefill take, and
#    what happens to the decoding streams meanwhile?
#
# <details><summary>Answer</summary>
#
# About eight steps (1,000 / 128, less the decode tokens that share each step's budget). Each step runs every
# stream's decode token beside one piece of the prompt, so the streams keep producing tokens, but each of those
# steps costs a decode step plus a 128-token piece of prefill: on a CPU that piece costs several decode steps
# (chapter 5's chunks), so the streams' gaps grow several times over for those eight steps instead of stopping
# once for the whole prefill (this chapter's stall table shows the worst gap at each budget).
# </details>
#
# ## Try it
#
# * Point the chapter at your own deployment: `base_url = "http://127.0.0.1:8000"` (any OpenAI-compatible
#   server; the stall runs at its own settings).
#
# <details><summary>What to expect</summary>
#
# No engine starts: every table has one row, `server`. It is set beside the in-process path only if it serves
# SmolLM2 under a name the book recognises (`lib.client.same_model`); otherwise one line says it is measured and
# compared with nothing, and the one-request claims read *not measured*. Only a vLLM server fills the
# server-side columns (its `/metrics` histograms), and the stall runs at the server's own budget. Over a real
# network, expect the TTFT the server adds to grow by about one round trip and the gaps far less, unless
# something between you buffers the stream.
# </details>
#
# * Measure llama.cpp, the engine a laptop user would pick, on the book's own Q4_1 file. Start its
#   OpenAI-compatible server from chapter 8's environment (`make .venv-llama`, then
#   `.venv-llama/bin/python -m llama_cpp.server --model <the GGUF file> --port 8000 --interrupt_requests False`)
#   and set `base_url = "http://127.0.0.1:8000"`. Chapter 8 prints the whole command with the file's path;
#   without the last option a new request cuts off the one streaming.
#
# <details><summary>What to expect</summary>
#
# The server names its model by the Q4_1 file, which the book does not count as the fp32 model it runs
# in-process, so one line says so and nothing of it is set beside the in-process path. llama.cpp's server runs
# one request at a time (with `--interrupt_requests False` a new request waits for the one streaming), so expect
# the total tokens per second to stay flat as users are added while TTFT grows with the requests ahead (a
# batching gain near 1x), goodput to fall once arrivals outpace one request at a time, and the stall's case to
# be *queued*: B's first token after A's last, A's gaps undisturbed. Throughput that rises with the users would
# show that this server batches after all.
# </details>
#
# * Tighten the objectives (`tpot_slo_ms = 50`) and watch where goodput collapses move.

# %% jupyter={"source_hidden": true} tags=["answer"]
_slo_ms = 50.0  # the exercise's TPOT objective
_said = []
for _name, _g in poisson.groupby("engine", sort=False):
    _alone = float(sweep[(sweep.engine == _name) & (sweep.concurrency == 1)].tpot_ms.iloc[0])
    _over = _g[_g.tpot_ms > _slo_ms]
    _near = _g[(_g.tpot_ms / _slo_ms - 1).abs() < claims.NOISE]  # within the noise: a median there can fall either side
    if len(_over) == len(_g):
        _said.append(f"{_name}'s median TPOT is above {_slo_ms:.0f} ms at every rate ({_g.tpot_ms.iloc[0]:.1f} ms at the "
                     f"lowest; one user alone {_alone:.1f} ms), so expect goodput below half from the lowest rate up")
    elif len(_over):
        _said.append(f"{_name}'s median TPOT passed {_slo_ms:.0f} ms from {_over.realized_per_s.iloc[0]:.3g} requests/s "
                     f"({_over.tpot_ms.iloc[0]:.1f} ms there, {_g.tpot_ms.iloc[0]:.1f} ms at the lowest rate), so expect "
                     "its goodput to fall below half from that rate")
    else:
        _said.append(f"{_name}'s median TPOT stayed at or below {_slo_ms:.0f} ms at every rate (at most "
                     f"{_g.tpot_ms.max():.1f} ms), so expect its goodput to move little")
    if len(_near):
        _said[-1] += (f" (at {', '.join(f'{r:.3g}' for r in _near.realized_per_s)} requests/s the median lies within "
                      f"{claims.NOISE:.0%} of "
                      "the objective, so a re-run can land either side of half there)")
display(Markdown(
    "<details><summary>What to expect</summary>\n\n"
    f"A request meets a TPOT objective only if its own TPOT is below it, so goodput falls below half wherever the "
    f"median TPOT in the arrivals table passes {_slo_ms:.0f} ms (the TTFT objective stays {slo_scale:g} times one "
    "user's). From this run's table: " + "; ".join(_said) + ". The arrival rates do not move (they come from the "
    "closed loop's capacity), so the collapse in the figure moves to the rates where that happens."
    "\n</details>"))

# %% [markdown]
# * Add `64` to `vllm_budgets`: does A's worst gap keep shrinking, or does a step's fixed cost take over?

# %% jupyter={"source_hidden": true} tags=["answer"]
_vl = stall[stall.engine == "vLLM"]
_cores = cores_of.get("vLLM", n_threads)
_cm = costs.get(_cores, cost)
_piece_ms = _cm.prefill(64).best * 1e3
_steps = -(-b_ids.shape[1] // 64)  # pieces of B's prompt
if len(_vl) and 64 not in vllm_budgets:
    _gap = float(_vl.a_median_gap_before_ms.median())
    _small = _vl.loc[_vl.budget_tokens.idxmin()]
    _text = (f"The cost model prices a 64-token piece at {_piece_ms:.0f} ms on the {_cores} core"
             f"{'s' * (_cores != 1)} vLLM computes on, beside A's ordinary gap of {_gap:.0f} ms, so A's worst gap "
             f"should come down to about {_gap + _piece_ms:.0f} ms, against {_small.a_worst_gap_ms:.0f} ms measured at "
             f"budget {_small.budget_tokens:.0f}. However small the piece, a step still costs A's ordinary gap, so the "
             f"worst gap can shrink only by the piece's price. B's prompt then takes about {_steps} steps, so its TTFT should "
             f"grow to roughly {_steps * (_gap + _piece_ms):,.0f} ms ({_small.b_ttft_ms:,.0f} ms at budget "
             f"{_small.budget_tokens:.0f}). A worst gap that stays near the one at budget {_small.budget_tokens:.0f} "
             "would show a fixed cost of each step, not the piece, setting it.")
elif len(_vl):
    _text = (f"This run already has a budget of 64: the stall table's row for it shows A's worst gap "
             f"({float(_vl[_vl.budget_tokens == 64].a_worst_gap_ms.iloc[0]):.0f} ms) against the larger budgets'.")
else:
    _gap = float(base.median_gap_ms)
    _why = vllm_missing or "it is not among this run's engines"
    _text = (f"vLLM did not run here ({_why}), so only the price can "
             f"be said: a 64-token piece costs {_piece_ms:.0f} ms on {_cores} thread{'s' * (_cores != 1)}, beside an "
             f"ordinary in-process gap of {_gap:,.0f} ms. A's worst gap could shrink only to about their sum, and B's "
             f"prompt would take about {_steps} steps, its TTFT growing to roughly {_steps * (_gap + _piece_ms):,.0f} ms.")
display(Markdown(f"<details><summary>What to expect</summary>\n\n{_text}\n</details>"))

# %% [markdown]
# * Set `threads = 1`: how much of the difference between the in-process path and each engine was threading?

# %% jupyter={"source_hidden": true} tags=["answer"]
_n = torch.get_num_threads()
_ctx = int(base.prompt_tokens) + max_new_tokens // 2
try:
    _one = costmodel.CostModel(ceilings, MODEL, machine.MODELS[MODEL][0].with_dtype("fp32"), "fp32", 1)
except ValueError:
    _one = None  # chapter 0 measured no one-thread ceilings here
if _n == 1:
    _text = ("This run already computed on one thread, so nothing should change: the gaps claims above already "
             "compare the paths like for like.")
elif _one is None or not len(engine_rows):
    _text = ("Chapter 0 measured no one-thread ceilings here (or no engine ran), so this run cannot price it. If "
             "threading explains the difference, the in-process gap rises on one thread and the gaps claims' ratios "
             "move toward 1x; if they stay, the engines' own loops explain it.")
else:
    _slow = _one.decode(_ctx).best / priced.decode(_ctx).best
    _said = []
    for _r in engine_rows.itertuples():
        _c = cores_of.get(_r.path, _n)
        _moves = _one.decode(_ctx).best / costs[_c].decode(_ctx).best if _c in costs else _slow
        _now, _then = _r.median_gap_ms / base.median_gap_ms, _r.median_gap_ms * _moves / (base.median_gap_ms * _slow)
        _said.append(f"{_r.path}'s (on {_c} core{'s' * (_c != 1)} here) " + (f"should go from {_now:.2f}x to about "
                     f"{_then:.2f}x" if f"{_now:.2f}" != f"{_then:.2f}" else f"should stay at about {_now:.2f}x"))
    _text = (f"On one thread the cost model prices a decode step {_slow:.2f}x its price on {_n}, so the in-process gap "
             f"({base.median_gap_ms:,.0f} ms here) should {'rise' if _slow >= 1 else 'fall'} to about "
             f"{base.median_gap_ms * _slow:,.0f} ms, and each "
             "engine's gap by the same rule for the cores it computes on. If the thread counts alone explain the "
             "difference (the cost model knows how many threads a path computes on, not how they wait for each "
             "other on a busy machine), the ratio of each engine's gap to the in-process one: " + "; ".join(_said)
             + ". A "
             "ratio that moves less than that would show the engine's own loop, or its threads' waiting (the "
             "*Threads* note), making the difference.")
display(Markdown(f"<details><summary>What to expect</summary>\n\n{_text}\n</details>"))

# %% [markdown]
# The engines stop here. Every price in this chapter is made of chapter 0's ceilings: the same one-row matrices
# chapter 0 timed, timed again before the engines started and now (`lib.machine.pace`), say whether the machine
# itself ran at another speed meanwhile. Then the paragraph at the top of the chapter is written from the
# findings above:

# %%
for engine in live.values():
    engine.stop()
claims.invariant(not any(e.running for e in live.values()), "an engine is still running after the chapter")
pacer.check("after them")
show(pacer.claim(register, results, "this chapter's requests"))


# %% [markdown]
# The code below writes the paragraph at the top of this chapter, under *What this run found*, from the findings above.

# %%
called = lambda name: "the server" if name == "server" else name  # noqa: E731  (base_url's server)


def of(claim: str, name: str) -> str:
    """The verdict of engine ``name``'s claim ``claim`` (its id without the engine's tag)."""
    return register.verdict(f"{claim}_{name.split()[0].lower()}")


def by_engine(say, differed: str) -> str:
    """What ``say(engine)`` says for every engine that has something to say, when they all say the same; else
    ``differed`` (the findings say which engine did what)."""
    said = {say(name) for name in urls} - {""}
    return said.pop() if len(said) == 1 else differed if said else ""


def soon(name: str) -> str:
    """What engine ``name`` did to a lone request's first token against in-process, as its claim decided."""
    return {claims.HELD: "answered later", claims.NOT_HELD: "answered sooner",
            claims.UNRESOLVED: "answered about as soon as in-process"}.get(of("engine_adds_to_ttft", name), "")


def fast(name: str) -> str:
    """How fast the tokens after the first came through ``name`` against in-process on the engine's cores, as its
    claim decided."""
    q, cores = ratio_of[name], engine_cores[name]
    on = "" if cores == in_process_threads else f" on its {prose.count(cores, 'core')}"
    return {claims.HELD: ("kept pace" if not on else f"kept the in-process pace{on}") + (
                "" if q.low <= 1 <= q.high else f", if a little {'slower' if q.low > 1 else 'faster'}"),
            claims.UNRESOLVED: f"kept about the in-process pace{on}" if 1 / claims.PREDICTED_TIME <= q.mid
                               <= claims.PREDICTED_TIME else
                               f"ran {'slower' if q.mid > 1 else 'faster'} than in-process{on}, if not clearly",
            claims.NOT_HELD: f"ran markedly {'slower' if q.mid > 1 else 'faster'} than in-process{on}",
            }.get(of("engine_gaps_close_to_in_process", name), "")


def each(say) -> str:
    """``say(engine)`` once when every engine's is the same, else each with the engine it is for."""
    return by_engine(say, " and ".join(f"{say(n)} through {called(n)}" for n in urls if say(n)))


ratio_of = gap_ratio_of  # on the cores each engine computes on, as its claim decided
ttft_added_of = dict(zip(paths.path, paths.ttft_added_ms))  # ms each engine's median TTFT lay past in-process's
_alike = len(urls) > 1 and len({(soon(n), fast(n)) for n in urls}) == 1  # one story for every engine: told once
lone = ((f"{'both engines' if len(urls) == 2 else 'every engine'} {soon(next(iter(urls)))} and "
         f"{fast(next(iter(urls)))}" if _alike else "; ".join(f"{called(n)} {soon(n)} and {fast(n)}" for n in urls))
        if all(soon(n) and fast(n) for n in urls) else "")  # the gaps as the sentence before sets them
batched = by_engine(lambda n: {claims.HELD: "batching raised throughput",
                               claims.NOT_HELD: "batching did not raise throughput",
                               claims.UNRESOLVED: "batching's gain was unclear",
                               }.get(of("batching_raises_throughput", n), ""), "the engines differed in what batching gained")
nil_at_first = {n: poisson[poisson.engine == n].goodput.iloc[0] == 0 for n in urls}  # below the objectives from the start
def times_capacity(name: str) -> float:
    """The arrival rate (achieved) from which engine ``name``'s goodput collapsed, over its closed loop's capacity."""
    return collapsed[name] / capacity_of[name]

# %%
def fell_at(name: str) -> str:
    """Where goodput fell, in words the same for every engine whose goodput claim held: the multiples of capacity
    at which each collapsed (a range when they differ), or by the highest rate."""
    held = [n for n in urls if of("goodput_falls_with_load", n) == claims.HELD]
    if not held or not all(n in collapsed.index for n in held):
        return "goodput fell by the highest arrival rate"
    low, high = min(times_capacity(n) for n in held), max(times_capacity(n) for n in held)
    at_top = all(collapsed[n] >= poisson[poisson.engine == n].realized_per_s.max() for n in held)  # the grid's last
    there = [poisson[(poisson.engine == n) & (poisson.realized_per_s >= collapsed[n])].sort_values("realized_per_s").goodput.iloc[0]
             for n in held]  # each engine's goodput at the rate from which it collapsed
    shares = [f"{g:.0%}" for g in there]
    to = (shares[0] + ("" if len(held) == 1 else " for both engines" if len(held) == 2 else " for every engine")
          if len(set(shares)) == 1 else prose.and_list(f"{s} for {called(n)}" for s, n in zip(shares, held)))
    return (f"goodput fell to {to} at "
            + (f"{low:.1f}" if round(low, 1) == round(high, 1) else f"{low:.1f} to {high:.1f}")
            + f" times {'each' if len(held) > 1 else 'the'} engine's capacity"
            + (", the highest rate tried" if at_top else ""))


loaded = by_engine(lambda n: {claims.HELD: fell_at(n),
                              claims.NOT_HELD: "no request met its latency objectives even at the lowest arrival rate"
                              if nil_at_first[n] else "the share of requests meeting their latency objectives did not "
                              "fall by the top arrival rate",
                              claims.UNRESOLVED: "how far more arrivals cut the share of requests meeting their "
                                                 "latency objectives was unclear",
                              }.get(of("goodput_falls_with_load", n), ""), "")
if not loaded:  # the engines differed: each engine's own
    loaded = "; ".join(f"for {called(n)}, {w}" for n in urls for w in [{
        claims.HELD: "goodput fell with the arrival rate", claims.NOT_HELD: "goodput did not fall",
        claims.UNRESOLVED: "whether goodput fell was unclear"}.get(of("goodput_falls_with_load", n), "")] if w)
under = ", and ".join(x for x in (batched, loaded) if x)
answer = " ".join(x for x in (f"So {lone}." if lone else "", f"Under load, {under}." if under else "") if x)
chunked = {claims.HELD: f"; at budget {trade.get('b1', 0):.0f} vLLM held it to {trade.get('gap1', 0):,.0f} ms, "
                        "delaying the newcomer",
           claims.NOT_HELD: "; smaller vLLM budgets did not make chapter 5's trade",
           claims.UNRESOLVED: "; what smaller vLLM budgets traded was unclear",
           }.get(register.verdict("chunking_trades_stall_for_ttft"), "")

# %%
stalled = [r for r in tested if r.case in ("one_stall", "pieces")]
hardest = max(stalled, key=lambda r: r.a_worst_gap_ms) if stalled else None  # the longest stall
def froze(trade: str) -> str:
    """The stall's sentence, with ``trade`` (what smaller budgets traded, or nothing) after the longest stall."""
    if not hardest:
        return (f"A {b_ids.shape[1]:,}-token newcomer stalled no decoding stream here. " if tested else
                "The stall went unmeasured: the decoding stream ended before the long prompt arrived. ")
    return (f"A {b_ids.shape[1]:,}-token newcomer froze a decoding stream for up to **"
            + Spread.in_row(hardest, "a_worst_gap_ms").text(",.0f", "ms")
            + f"** in {called(hardest.engine)} at " + (f"budget {hardest.budget_tokens:.0f}" if hardest.budget_tokens else
                                                        "its own budget") + f"{trade}. ")
first_tokens = [f"**{Spread.in_row(base, 'ttft_ms').text(',.0f', 'ms')}** in-process"] + [
    f"**{Spread.in_row(r, 'ttft_ms').text(',.0f', 'ms')}** through {called(r.path)}" + ("" if same_model else
                                                                                   " of another model")
    for r in engine_rows.itertuples()]
every = [f"{base.median_gap_ms:.0f} ms in-process"] + [f"{r.median_gap_ms:.0f} through {called(r.path)}"
                                                        for r in engine_rows.itertuples()]
scaled = prose.and_list(f"{expected_gap_of[n].mid:.0f} ms on {called(n)}'s {prose.count(c, 'core')}"
                        for n, c in engine_cores.items() if c != in_process_threads)  # in-process, on fewer cores
gains_text = " and ".join(f"**{g.text('.1f', 'x')}**" for g in gains.values() if g)
rose = "rose" if all(of("batching_raises_throughput", n) == claims.HELD for n in urls) else "changed by"
first = (f"On this machine ({prose.machine(cpu, 'fp32')}), one request's first token came after "
         f"{', '.join(first_tokens[:-1])} and {first_tokens[-1]} ({runs}-run medians). ")
gaps = (f"Tokens came every {prose.and_list(every)}" + (f", where in-process would take about {scaled}" if scaled
                                                        else "") + ". ") if same_model else ""
users = f"From {levels[0]} to {levels[-1]} users, throughput {rose} {gains_text}. " if gains_text else ""
so = answer
plain_names = {  # each claim as a reader names it, for the opening's naming of what failed or was left open
    "client_ttft_covers_server_ttft": "the client's TTFT covering the engine's own",
    "client_agrees_with_vllm_bench": "the client matching vllm bench",
    "stall_is_one_piece": "the stall priced as one budget-sized piece",
    "chunking_trades_stall_for_ttft": "what smaller vLLM budgets traded",
    "machine_kept_its_pace": "the machine keeping chapter 0's speed"}
for name in urls:  # the per-engine claims, each with its engine's name
    tag, who = name.split()[0].lower(), called(name)
    plain_names |= {f"engine_adds_to_ttft_{tag}": f"{who}'s first-token delay",
                    f"engine_gaps_close_to_in_process_{tag}": f"{who}'s token gaps",
                    f"batching_raises_throughput_{tag}": f"what batching gained {who}",
                    f"goodput_falls_with_load_{tag}": f"{who}'s goodput falling with load"}
misses = register.misses(plain_names)  # each miss named (the evidence table at the end gives their numbers)
# The longest telling first; the users' gains, the budgets' trade, the gaps' ratios, then the stall give way when the
# paragraph runs long (the evidence table keeps them; every telling names the misses).
opening.write(*(f"{t.rstrip()} {misses}".strip() for t in (
    first + gaps + users + froze(chunked) + so,
    first + gaps + froze(chunked) + so,
    first + gaps + froze("") + so,
    first + froze("") + so,
    first + so,
    first + (f"So under load, {under}." if under else ""))))  # shortest: the findings keep the rest
# No pace note here: the opening quotes measured times, not prices; the machine's pace has its own paragraph above.

# %% [markdown]
# ## Key terms
#
# [TTFT, ITL, TPOT, worst gap, goodput](glossary.md#ttft-itl-tpot-worst-gap-goodput), [Continuous batching](glossary.md#continuous-batching), [Chunked prefill](glossary.md#chunked-prefill), [Prefill](glossary.md#prefill), [Decode](glossary.md#decode), [Price](glossary.md#price), [Tolerance](glossary.md#tolerance), [Pace](glossary.md#pace). Each links to the book's glossary, which says how the book measures it.

# %% [markdown]
# ## Evidence in this chapter
#
# Each claim this chapter made, what was predicted, what this run measured, the verdict, and the data it came
# from. A verdict is decided on the 95 % interval of the median over runs (`lib.claims` says how): *held* when
# all of the interval agrees with the prediction, *did not hold* when none of it does, *not resolved* when it
# straddles the line. `data/07_over_the_wire/claims.csv` holds the same rows, and the book's status page counts them.

# %%
results.table(register.frame(), "claims")
display(prose.table(register.evidence()))
print(register.summary())
results.finish()  # the run is whole: its tables and figures replace the last run's together
