"""The book's shared library: what every chapter of *Prefill and Decode* imports.

Modules, each named for what it holds (the section that introduces it in brackets):

* ``metrics``    request metrics: TTFT, ITL, TPOT, end-to-end, goodput (1); free of models and devices
* ``objectives`` default goodput objectives for the device in use (1)
* ``timing``     warm-up, synchronised repeats, median and range, the harness's own cost (0, 1)
* ``device``     choosing the device and dtype, and what a page was run with (0)
* ``dtypes``     the one dtype vocabulary: names, bytes per value, labels (0)
* ``models``     the book's models (GPT-2 small, tiny GPT-2, SmolLM2-135M), loaded offline (1)
* ``phases``     prefill, cached greedy decode, whole requests (1)
* ``shapes``     model shapes read from a config, and presets (1)
* ``roofline``   FLOPs and bytes of each phase, the hardware table, the roofline bound (1, 6)
* ``regime``     the one rule that labels a measured point (3)
* ``course``     the course's roofline printout (6)
* ``machine``    this machine's ceilings, measured once per build by chapter 0 (0)
* ``sweeps``     the measurement loops of sections 2 and 3 (2, 3)
* ``schedule``   chunked prefill and the interference loop (5)
* ``claims``     the claims register: conclusions decided by this run's data (0)
* ``params``     the check of a chapter's parameters (0)
* ``progress``   progress bars: widgets in JupyterLab, one line in a build
* ``results``    atomic CSV/PNG saving with provenance (0)
* ``engines``    serving engines (vLLM, transformers serve) started on loopback and always stopped (7)
* ``client``     the streaming HTTP client, its traces, closed- and open-loop load (7)
* ``stall``      chapter 5's stall through a server, and what the server did with the prompt (7)
* ``conventions`` one set of traces scored the way each benchmark tool defines its metrics (7)

Not imported by any chapter (a change in them re-runs nothing):

* ``book``       the build that ``make book`` runs; ``staleness`` its re-run hash; ``outputs`` its
  all-or-nothing replacement; ``gpucheck`` the one behind ``make gpu-check``
* ``site`` (with ``chapters``, ``pages``, ``linkcheck``), ``student``, ``classroom``, ``teaching``: the
  published site, student copies, a class's results and the teacher's page
"""

__version__ = "0.1.0"
