"""The book's shared library: what every chapter of *Prefill and Decode* imports.

Modules, each named for what it holds:

* ``metrics``  request metrics (TTFT, ITL, TPOT, end-to-end, goodput), section 1
* ``timing``   warm-up, synchronised repeats, median and range, host timestamps, section 1
* ``models``   the book's models (GPT-2 small, tiny GPT-2, SmolLM2-135M), loaded offline, section 1
* ``phases``   prefill, cached greedy decode, whole requests, section 1
* ``roofline`` FLOPs and bytes of each phase, hardware table, machine balance, section 6
* ``results``  atomic CSV/PNG saving with provenance, section 1
* ``sweeps``   the measurement loops of sections 2 and 3, and the fixed-cost floor fit
* ``schedule`` chunked prefill and the interference loop, section 5
* ``book``     the build that ``make book`` runs
"""

__version__ = "0.1.0"
