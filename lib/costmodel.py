"""The one cost model: what a pass of an eager model should take on this machine, term by term.

An eager pass on a CPU (or a GPU driven from Python) runs its kernels one after another, and issuing each one
costs time of its own. So its time is a **sum**, each term priced at a ceiling chapter 0 measured for the kernel
that does the work (:mod:`lib.machine`), not at a textbook peak:

* **matrices**: per group of weight matrices (the transformer blocks, the LM head), the larger of its bytes over
  the rate its own kernel streams them at one row, and its FLOPs over ``F(rows)``, the rate the model's matrices
  reach with that many rows. (At one row the two are the same number: the weights must stream once. With more
  rows the FLOPs take over, at a rate that depends on the number of rows.)
* **attention**: a prefill's causal attention at the rate chapter 0 measured for that length; a decode step's
  read of every sequence's cache.
* **cache copy**: a cache that grows by concatenation (``DynamicCache``) is read and written into a new tensor at
  every step, at the rate chapter 0 measured for that concatenation of the model's own cache tensors at that size
  (small tensors copy more slowly than one long array); a preallocated cache (``StaticCache``) is written in place,
  but attention then reads every preallocated position.
* **page faults**: memory a pass touches for the first time costs the operating system a fault per page (mapping
  and zeroing it), at the cost per page chapter 0 measured (a copy into fresh memory less the same copy into
  memory already mapped). Whether a new tensor gets fresh pages is the allocator's choice: glibc maps a tensor
  of :data:`FRESH_PAGES_BYTES` or more afresh every time, and a smaller one sometimes (its threshold moves with
  the sizes freed before). So a prediction made before measuring counts the faults of the large tensors only,
  and a pass whose faults were counted (:func:`lib.timing.page_faults`, ``fresh_pages``) is priced with those.
* **dispatch**: issuing the pass's operations and running its small kernels (norms, activations, residual adds),
  measured on the same model with its matrices and attention hollowed out; a decode step's at its cache's size,
  since the rest of a step grows with its cache (:meth:`lib.machine.Ceilings.rest_growth`).

:class:`CostModel` returns a :class:`Prediction` with every term, so a page can show where a pass's time goes;
:func:`lib.regime.regime` labels a measured pass from it. Every term is priced twice: at the ceilings' fastest
calls (``best``, the floor a pass cannot beat) and at their medians (what a typical call took).

Introduced in chapter 2 (a prefill's cost); used by every chapter that predicts a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pandas as pd

from lib.machine import FRESH_PAGES_BYTES, Ceilings, KernelTime
from lib.shapes import ModelShape

__all__ = ["Term", "Prediction", "CostModel", "FRESH_PAGES_BYTES"]

# FRESH_PAGES_BYTES (lib.machine): a tensor at least this large gets fresh pages each time it is made, so a
# prediction made before measuring counts their faults. A smaller tensor may get fresh pages too, or reuse freed
# ones: only counting tells.


@dataclass(frozen=True)
class Term:
    """One part of a pass: ``name``, its time in seconds at the ceilings' fastest calls (``best``) and at their
    medians (``median``), what limits it (``limit``: ``"memory"``, ``"compute"``, ``"slow kernel"``,
    ``"page faults"`` or ``"dispatch"``: issuing the operations and running the small kernels between the matrices,
    which on a GPU is its kernel launches) and how it was priced (``how``)."""

    name: str
    best: float
    median: float
    limit: str
    how: str


@dataclass(frozen=True)
class Prediction:
    """The predicted time of one pass, as the sum of its :class:`Term` s (seconds)."""

    kind: str
    tokens: int
    batch: int
    context: int
    terms: tuple[Term, ...]

    @property
    def best(self) -> float:
        """The pass at the ceilings' fastest calls, seconds."""
        return sum(t.best for t in self.terms)

    @property
    def median(self) -> float:
        """The pass at the ceilings' median calls, seconds."""
        return sum(t.median for t in self.terms)

    @property
    def range(self) -> "Spread":
        """The prediction as a spread in seconds: from the ceilings' fastest calls to their medians."""
        from lib.claims import Spread

        return Spread(self.best, self.best, max(self.median, self.best))

    @property
    def dominant(self) -> Term:
        """The largest term: what this pass's time is mostly made of."""
        return max(self.terms, key=lambda t: t.best)

    @property
    def floor(self) -> float:
        """The largest term alone at its fastest, of those priced at a ceiling: no pass can take less (seconds).
        Page faults are not a ceiling but a count (a pass the allocator served from freed memory takes none), so
        they never set the floor."""
        return max((t.best for t in self.terms if t.limit != "page faults"), default=0.0)

    def term(self, name: str) -> Term:
        """The term called ``name`` (a zero term when the pass has none)."""
        return next((t for t in self.terms if t.name == name), Term(name, 0.0, 0.0, "", "not in this pass"))

    def frame(self) -> pd.DataFrame:
        """The terms as a table in milliseconds, with each one's share of the pass."""
        return pd.DataFrame([dict(term=t.name, best_ms=t.best * 1e3, median_ms=t.median * 1e3,
                                  share=t.best / self.best, limit=t.limit, priced_as=t.how) for t in self.terms])


@dataclass(frozen=True)
class CostModel:
    """The cost of ``model``'s passes (shape ``shape``) in ``dtype`` on ``threads`` threads, from ``ceilings``.

    ``model`` names the ceilings' rows (``"gpt2-small"``, ``"smollm2-135m"``, ``"tiny-gpt2"``); ``shape`` gives
    the bytes and FLOPs (:mod:`lib.shapes`, in this dtype). Introduced in chapter 1."""

    ceilings: Ceilings
    model: str
    shape: ModelShape
    dtype: str
    threads: int

    def _matrix_terms(self, rows: int, head_rows: int) -> list[Term]:
        c, s, args = self.ceilings, self.shape, (self.model, self.dtype, self.threads)
        slow = not c.hardware_support(self.dtype)
        terms = []
        for kernel, name, m in (("blocks", "block matrices", rows), ("head", "LM head", head_rows)):
            one, many = c.matrices(*args, kernel, 1), c.matrices(*args, kernel, m)
            rate = c.weight_rate(*args) / 1e9
            if m == 1 or many.best <= one.best:
                t, limit = one, "memory"
                how = f"its bytes at the rate one row streams the weights ({rate:.1f} GB/s for all of them)"
            else:
                t, limit = many, "slow kernel" if slow else "compute"
                how = f"its FLOPs at F({m} rows)"
            terms.append(Term(name, t.best, t.median, limit, how))
        return terms

    def _copy(self, moved: float, what: str) -> Term:
        """A growing cache's copy, which reads and writes ``moved`` bytes in all: chapter 0's concatenation of the
        model's own cache tensors at that size, or, where it has none, its streaming copy rate."""
        c = self.ceilings.cache_concatenation(self.model, self.dtype, self.threads, moved / 2)
        if c is not None:
            return Term("cache copy", c.best, c.median, "memory",
                        f"{what} ({moved / c.best / 1e9:.1f} GB/s: chapter 0's concatenation of caches this size)")
        rate = self.ceilings.stream_bandwidth(self.dtype, self.threads, "copy")
        spread = self.ceilings.stream_spread(self.dtype, self.threads, "copy")
        return Term("cache copy", moved / rate, moved / rate * (1 + spread), "memory",
                    f"{what} ({rate / 1e9:.1f} GB/s, chapter 0's copy)")

    def _faults(self, expected: float, counted: float | None, included: float = 0.0) -> list[Term]:
        """The page-faults term: ``counted`` faults (measured in the pass, less ``included``, those already inside
        the ceilings it is priced at) or, not measured, the ``expected`` ones; none when there are none."""
        pages = expected if counted is None else max(float(counted) - included, 0.0)
        if pages <= 0 or self.ceilings.device.startswith("cuda"):
            return []
        t = pages * self.ceilings.fault_cost(self.dtype, self.threads)
        how = (f"{pages:,.0f} pages counted in the pass" if counted is not None else
               f"{pages:,.0f} pages of tensors of {FRESH_PAGES_BYTES >> 20} MiB or more, mapped afresh")
        return [Term("page faults", t, t, "page faults", how + " (chapter 0's cost per page)")]

    def _fresh_pages(self, tensor_bytes: float, tensors: int) -> float:
        """The faults ``tensors`` new tensors of ``tensor_bytes`` each take when they are mapped afresh (the large
        ones: :data:`FRESH_PAGES_BYTES`), before anything is counted."""
        if tensor_bytes < FRESH_PAGES_BYTES or self.ceilings.device.startswith("cuda"):
            return 0.0
        return tensors * tensor_bytes * self.ceilings.faults_per_byte(self.dtype, self.threads)

    def prefill(self, tokens: int, *, logits: Literal["last", "all"] = "last", past: int = 0,
                batch: int = 1, fresh_pages: float | None = None) -> Prediction:
        """A prefill of ``tokens`` new tokens for each of ``batch`` sequences, after ``past`` cached ones (a chunk
        of a chunked prefill), with the LM head at the last position (``logits="last"``) or at every one.
        ``fresh_pages``: the page faults counted in the measured pass, when they were."""
        if tokens < 1 or batch < 1 or past < 0:
            raise ValueError(f"a prefill needs tokens >= 1, batch >= 1 and past >= 0, got {tokens}, {batch}, {past}")
        if logits not in ("last", "all"):
            raise ValueError(f"logits must be 'last' or 'all', got {logits!r}")
        c, args = self.ceilings, (self.model, self.dtype, self.threads)
        terms = self._matrix_terms(batch * tokens, batch * (tokens if logits == "all" else 1))
        attn = c.attention_prefill(*args, tokens) * (batch * (1 + 2 * past / tokens))
        terms.append(Term("attention", attn.best, attn.median, "compute",
                          f"causal attention over {tokens} tokens at chapter 0's rate"
                          + (f", plus {past} cached ones" if past else "")))
        expected = 0.0
        if past:
            moved = 2 * batch * past * self.shape.kv_bytes_per_token
            terms.append(self._copy(moved, f"the {past} cached positions read and written"))
            per_layer = batch * (past + tokens) * self.shape.kv_bytes_per_token / (2 * self.shape.layers)
            expected = self._fresh_pages(per_layer, 2 * self.shape.layers)
        head_rows = batch * (tokens if logits == "all" else 1)
        terms += self._faults(expected, fresh_pages, c.matrix_faults(*args, "head", head_rows))
        d = c.dispatch(*args, "prefill", batch * tokens)
        terms.append(Term("dispatch", d.best, d.median, "dispatch", "the same pass, its matrices and attention hollowed out"))
        return Prediction("prefill", tokens, batch, past, tuple(terms))

    def decode(self, context: int, *, batch: int = 1, cache: Literal["dynamic", "static"] = "dynamic",
               max_len: int | None = None, fresh_pages: float | None = None) -> Prediction:
        """One decode step of ``batch`` sequences, each with ``context`` cached tokens, over a growing cache
        (``"dynamic"``: copied into a longer tensor every step) or a preallocated one of ``max_len`` positions
        (``"static"``: attention reads all of them, masked). ``fresh_pages``: the page faults counted in the
        measured step, when they were."""
        if context < 0 or batch < 1:
            raise ValueError(f"a decode step needs context >= 0 and batch >= 1, got {context} and {batch}")
        if cache not in ("dynamic", "static"):
            raise ValueError(f"cache must be 'dynamic' or 'static', got {cache!r}")
        if cache == "static" and (max_len is None or max_len < context):
            raise ValueError(f"a static cache needs max_len >= context, got {max_len}")
        c, s, args = self.ceilings, self.shape, (self.model, self.dtype, self.threads)
        terms = self._matrix_terms(batch, batch)
        read = batch * (context if cache == "dynamic" else max_len) * s.kv_bytes_per_token
        attn = c.attention_decode(*args, read, masked=cache == "static")
        terms.append(Term("attention", attn.best, attn.median, "memory",
                          f"{read / 1e6:.1f} MB of cache read by attention, at chapter 0's rate for that size"
                          + (" (masked: every preallocated position)" if cache == "static" else "")))
        expected = 0.0
        if cache == "dynamic":
            moved = 2 * batch * context * s.kv_bytes_per_token
            terms.append(self._copy(moved, "the cache read and written into a longer one"))
            expected = self._fresh_pages(batch * (context + 1) * s.kv_bytes_per_token / (2 * s.layers), 2 * s.layers)
        terms += self._faults(expected, fresh_pages, c.matrix_faults(*args, "head", batch))
        d = c.dispatch(*args, "decode" if cache == "dynamic" else "decode_static", batch,
                       positions=context if cache == "dynamic" else max_len)
        terms.append(Term("dispatch", d.best, d.median, "dispatch", "the same step, its matrices and attention hollowed "
                          "out, at this cache's size"))
        return Prediction("decode", batch, batch, context, tuple(terms))

    def kernel(self, kernel: str, rows: int) -> KernelTime:
        """One call of the model's ``blocks`` or ``head`` at ``rows`` rows, as chapter 0 measured it."""
        return self.ceilings.matrices(self.model, self.dtype, self.threads, kernel, rows)
