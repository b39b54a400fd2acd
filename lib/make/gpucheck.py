"""``make gpu-check``: one command that checks the book on a GPU and writes a short report.

On a machine with a CUDA GPU it runs, in order: the CUDA-marked tests and the device-generic tests
(the ``tiny`` fixture runs every test that takes it on each device present), then the whole book in
quick mode on the GPU (``python -m lib.make.book --quick --device cuda``), and writes
``build/gpu-check/report.md``: the device, its memory, torch, CUDA and driver versions, each step's
wall time and exit status, chapter 0's measured ceilings against the GPU's hardware-table entry, and
the end of any failure's log. Without a GPU it says so in one line and exits 2.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import torch

from lib.paths import REPO_ROOT

OUT = REPO_ROOT / "build" / "gpu-check"


def _run(name: str, command: list[str], env: dict[str, str]) -> dict:
    start = time.perf_counter()
    log = OUT / f"{name}.log"
    with open(log, "w") as f:
        code = subprocess.run(command, cwd=REPO_ROOT, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    tail = log.read_text().splitlines()[-25:]
    return dict(step=name, command=" ".join(command), seconds=time.perf_counter() - start, exit=code, tail=tail)


def _facts() -> list[str]:
    props = torch.cuda.get_device_properties(0)
    driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                            capture_output=True, text=True).stdout.strip() or "unknown"
    return [f"* device: {props.name}, {props.total_memory / 2**30:.0f} GiB, compute capability "
            f"{props.major}.{props.minor}",
            f"* torch {torch.__version__}, CUDA {torch.version.cuda}, driver {driver}"]


def _ceilings() -> list[str]:
    from lib import machine, roofline

    try:
        ceilings = machine.load_ceilings(quick=True)
    except FileNotFoundError as error:
        return [f"* no ceilings: {error}"]
    lines = []
    name = torch.cuda.get_device_name(0)
    entry = next((hw for key, hw in roofline.HARDWARE.items() if key.split()[0] in name), None)
    for dtype in sorted(set(ceilings.table[ceilings.table.status == "ok"].dtype)):
        bw, fl = ceilings.bandwidth(dtype), ceilings.flops(dtype)
        line = f"* {dtype}: streaming read {bw / 1e9:,.0f} GB/s, matmul {fl / 1e12:,.1f} TFLOP/s"
        if entry is not None:
            line += (f" (table, {entry.name}: {entry.bandwidth / 1e9:,.0f} GB/s, "
                     f"{entry.flops / 1e12:,.0f} TFLOP/s dense BF16)")
        lines.append(line)
    return lines


def main() -> int:
    if not torch.cuda.is_available():
        print(f"gpu-check: torch {torch.__version__} sees no CUDA GPU here; run it on a machine with one")
        return 2
    OUT.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    steps = [
        _run("tests", [sys.executable, "-m", "pytest", "-q", "-m", "cuda or not slow"], env),
        _run("quick-book", [sys.executable, "-m", "lib.make.book", "--quick", "--force", "--device", "cuda"], env),
    ]
    report = ["# GPU check", "", *_facts(), "", "## Steps", ""]
    for s in steps:
        report.append(f"* {s['step']}: exit {s['exit']} in {s['seconds']:.0f} s (`{s['command']}`)")
    report += ["", "## Ceilings measured in quick mode", "", *_ceilings()]
    for s in steps:
        if s["exit"]:
            report += ["", f"## {s['step']} failed: end of its log", "", "```", *s["tail"], "```"]
    (OUT / "report.md").write_text("\n".join(report) + "\n")
    print("\n".join(report))
    return max(s["exit"] for s in steps)


if __name__ == "__main__":
    sys.exit(main())
