"""The machinery that builds, publishes and grades the book; no chapter imports it.

``book`` (``make book``), ``staleness`` (its re-run hash), ``outputs`` (all-or-nothing replacement),
``gpucheck`` (``make gpu-check``), ``site`` (``make html``), ``student`` (``make student``), ``classroom``
(``make class-zip`` and ``make class``), ``teaching`` (the teacher's page) and ``vllm_alias`` (the ``vllm``
command of ``.venv-vllm``). The module list of the whole
library is in ``lib/README.md``.
"""
