"""llama.cpp's side of chapter 8, run by ``.venv-llama``'s Python (``python lib/llama_worker.py``), never imported.

It imports only the standard library and ``llama_cpp`` (``.venv-llama`` has no torch), loads one GGUF file once,
and answers one JSON request per line on stdin with one JSON line on stdout:

* ``{"kind": "about"}``: llama-cpp-python's version and llama.cpp's system line (which SIMD it was built with);
* ``{"kind": "decode", "context": c, "steps": s, "seed": k}``: greedy steps from a context of ``c`` random
  tokens, each step one ``eval`` of one token and its argmax read back: each step's seconds;
* ``{"kind": "greedy", "prompt": [ids], "new_tokens": n, "ignore_eos": false}``: ``n`` greedy tokens after
  ``prompt`` (fewer when the end of sequence comes first, unless ``ignore_eos``), the logits of the prompt's last
  position, and each step's seconds after the first token.

A request that fails answers ``{"error": "..."}``. Decode requests share one random prompt per seed (a longer
context extends it: the same seed draws the same first tokens): the first request for a context of ``c`` tokens
prefills its first ``c`` tokens and saves the state, and every later one restores that state instead of
prefilling again. Each context has a state of its own, holding exactly its ``c`` positions: a step after a longer
state cut back to ``c`` positions ran slower than one after a prefill of ``c`` tokens (a probe on the book's host,
context 32: 13.7 ms against 12.5; chapter 8's sweep had read 11.6 ms against 10.3 in its side-by-side greedy run,
which prefills afresh).
"""

import json
import random
import sys
import time

import numpy as np  # a dependency of llama-cpp-python


def main(path: str, threads: int, n_ctx: int) -> None:
    import llama_cpp

    llm = llama_cpp.Llama(model_path=path, n_ctx=n_ctx, n_batch=512, n_threads=threads, n_threads_batch=threads,
                          logits_all=False, verbose=False)
    prompt: list[int] = []  # the random prompt whose first positions decode requests keep
    seeded: list[int] = []  # the seed it was drawn with
    saved: dict[int, object] = {}  # context -> the state (the cache) right after a prefill of that many tokens

    vocab = llm.n_vocab()

    def last_logits() -> np.ndarray:  # the last evaluated position's logits, as llama.cpp holds them
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1), shape=(vocab,))

    def argmax(row: np.ndarray) -> int:
        return int(row.argmax())

    def answer(request: dict) -> dict:
        kind = request["kind"]
        if kind == "about":
            return {"version": llama_cpp.__version__, "system": llama_cpp.llama_print_system_info().decode().strip()}
        if kind == "decode":
            c, steps, seed = int(request["context"]), int(request["steps"]), int(request.get("seed", 0))
            if seeded != [seed]:  # another seed: another prompt, and none of the saved states is of it
                prompt.clear(), saved.clear()
                seeded[:] = [seed]
            if c > len(prompt):  # the same seed draws the same first tokens: a longer prompt extends the shorter
                rng = random.Random(seed)
                prompt[:] = [rng.randrange(vocab) for _ in range(c)]
            if c not in saved:  # this context's own prefill, once
                llm.reset()
                llm.eval(prompt[:c])
                saved[c] = llm.save_state()
            llm.load_state(saved[c])  # exactly c positions cached again (the last request's steps dropped)
            token, times = prompt[c - 1], []
            for _ in range(steps):
                start = time.perf_counter()
                llm.eval([token])
                token = argmax(last_logits())
                times.append(time.perf_counter() - start)
            return {"step_s": times}
        if kind == "greedy":
            prompt_ids, n = [int(t) for t in request["prompt"]], int(request["new_tokens"])
            llm.reset()
            llm.eval(prompt_ids)
            logits = last_logits().tolist()
            tokens, times = [argmax(last_logits())], []
            while len(tokens) < n and (request.get("ignore_eos") or tokens[-1] != llm.token_eos()):
                start = time.perf_counter()
                llm.eval([tokens[-1]])
                tokens.append(argmax(last_logits()))
                times.append(time.perf_counter() - start)
            return {"tokens": tokens, "logits": logits, "step_s": times}
        raise ValueError(f"unknown request kind {kind!r}: about, decode or greedy")

    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        try:
            reply = answer(json.loads(line))
        except Exception as error:  # the chapter shows the message; the worker stays up
            reply = {"error": f"{type(error).__name__}: {error}"}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
