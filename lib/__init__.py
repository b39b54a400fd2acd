"""The book's shared library: what the chapters of *Prefill and Decode* import.

Its modules, and the machinery in :mod:`lib.make` that builds, publishes and grades the book, are listed in
``lib/README.md`` (kept there, not here, so that editing the list re-runs no chapter).
"""

__version__ = "0.1.0"
