"""The machinery that builds, publishes and grades the book; no chapter imports it.

``book`` (``make book``), ``staleness`` (its re-run hash), ``outputs`` (all-or-nothing replacement),
``gpucheck`` (``make gpu-check``), ``site`` (``make html``), ``student`` (``make student``), ``classroom``
(``make class-zip`` and ``make class``) and ``teaching`` (the teacher's page). The module list of the whole
library is in ``lib/README.md``.
"""
