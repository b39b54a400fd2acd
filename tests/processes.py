"""Helpers for tests that start and stop processes (the build's kernels, the engines' servers)."""

import os


def alive(pid: int) -> bool:
    """Whether process ``pid`` is still running (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
