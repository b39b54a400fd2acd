"""Whether a chapter of the book is up to date: what its outputs depend on, hashed, against what was recorded.

A chapter's *input hash* (:func:`input_hash`) covers its py:percent source, the library files it imports
(:func:`library_files`: its own imports of ``lib`` modules, followed through the modules' imports of each
other), ``constraints.txt``, the data it reads from earlier chapters (:func:`upstream_data`) and the machine
it runs on (:func:`run_environment`: the resolved device, the torch and CUDA versions, and the machine's
identity, so a second host whose CPU has the same name but other instruction sets is another machine). The
build (:mod:`lib.make.book`) stores that hash, the machine's record and a SHA-256 manifest of the chapter's
outputs (:func:`output_hashes`) in the executed notebook's metadata (under :data:`HASH_KEY`: ``input_hash``,
``environment``, ``outputs``); :func:`stale_reason` says why a chapter must re-run, or ``None`` when both
still match.

So editing a library module re-runs only the chapters that import it, directly or through another module;
a module no chapter imports (the build, the site, the classroom tools) re-runs nothing. No chapter imports
this module.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import nbformat

from lib.paths import MACHINE_SECTION, REPO_ROOT

NOTEBOOKS = REPO_ROOT / "notebooks"
LIBRARY = REPO_ROOT / "lib"
#: The key of the build's record (input hash, output manifest) in an executed notebook's metadata.
HASH_KEY = "prefill_decode"
_RUN_AS_MODULE = re.compile(r"lib(\.\w+)+")  # "lib.x" as a string, as in [python, "-m", "lib.x"]


def sources(root: Path = NOTEBOOKS) -> list[Path]:
    """The notebooks' py:percent sources, in reading order."""
    return sorted(p for p in root.glob("[0-9][0-9]_*.py"))


def upstream_data(source: Path) -> list[Path]:
    """The data files a notebook reads: every file under ``data/<stem>/`` of each other chapter whose stem
    its source names (as in ``load_table("02_prefill_sweep", ...)``), chapter 0's when it reads the
    machine's ceilings (``machine.load_ceilings``), and each published reference run under
    ``data/reference/`` whose name its source names (as in ``load_reference("ch09_facts")``)."""
    root = source.parent.parent
    files = []
    for other in upstream_chapters(source):
        files += sorted(p for p in (root / "data" / other.stem).glob("*") if p.name != "provenance.json")
    return files + sorted(p for p in (root / "data" / "reference").glob("*") if p.stem in source.read_text())


def upstream_chapters(source: Path, available: list[Path] | None = None) -> list[Path]:
    """The other chapters whose tables a notebook reads (of ``available``, default: the notebooks beside it):
    each whose stem its source names, and chapter 0 when it reads the machine's ceilings."""
    text = source.read_text()
    return [other for other in (sources(source.parent) if available is None else available)
            if other != source and (other.stem in text or (other.stem == MACHINE_SECTION and "load_ceilings" in text))]


def probe_environment(device: str | None) -> dict:
    """The machine a chapter runs on, worked out in the process that calls it (it imports torch, so the
    build runs it in a subprocess: :func:`run_environment`): the resolved device (``auto`` becomes ``cpu``
    or ``cuda:0``), its name, the torch and CUDA versions, and ``machine``, what identifies the machine
    for the book's numbers (:func:`lib.device.machine_identity`: CPU model, instruction sets, cores; GPU
    name, memory, compute capability). An unknown device, or CUDA where there is none, raises
    ``ValueError`` with :func:`lib.device.resolve_device`'s one line."""
    import torch

    from lib.device import device_name, machine_identity, resolve_device
    resolved = resolve_device(device or "auto")
    if resolved.type == "cuda" and resolved.index is None:
        resolved = torch.device("cuda", torch.cuda.current_device())
    return {"device": str(resolved), "device_name": device_name(resolved), "torch": torch.__version__,
            "cuda": torch.version.cuda or "none", "machine": machine_identity(resolved)}


_PROBE = """import json, sys
from lib.make.staleness import probe_environment
try:
    record = probe_environment(sys.argv[1])
except ValueError as error:
    print(str(error).splitlines()[0], file=sys.stderr)
    sys.exit(2)
print(json.dumps(record, sort_keys=True))
"""
PROBE_TIMEOUT_S = 300
"""The probe imports torch and, on a GPU, starts CUDA: seconds, but bounded."""


@functools.lru_cache(maxsize=None)
def _probe(device: str) -> str:
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE, device], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ValueError(f"the device probe ({sys.executable} importing torch) did not answer in "
                         f"{PROBE_TIMEOUT_S} s") from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise ValueError(lines[-1] if lines else f"the device probe exited with status {done.returncode}")
    return done.stdout.strip().splitlines()[-1]


def run_environment(device: str | None) -> dict:
    """What the outputs depend on beyond the files (:func:`probe_environment`'s record), from a small
    subprocess, once per process and device: the build itself never imports torch. Raises ``ValueError``
    with one line for an unknown device or CUDA where there is none."""
    return json.loads(_probe(device or "auto"))


def machine_change(recorded: dict | None, now: dict) -> str | None:
    """How the machine ``now`` differs from the one a chapter's outputs ``recorded`` (``None`` when they are
    the same, or when nothing was recorded): ``"cpu_flags: avx2 avx512_bf16 ... -> avx2 ..."``."""
    if not recorded:
        return None
    before = {**recorded.get("machine", {}), **{k: v for k, v in recorded.items() if k != "machine"}}
    after = {**now.get("machine", {}), **{k: v for k, v in now.items() if k != "machine"}}
    changed = [f"{key}: {before.get(key)} -> {after.get(key)}" for key in sorted(set(before) | set(after))
               if before.get(key) != after.get(key)]
    return "; ".join(changed) or None


def _module_file(name: str, library: Path) -> Path | None:
    """The file of library module ``name`` (``"lib.x"``): ``library/x.py``, or a package's ``__init__.py``;
    ``None`` when ``name`` is not a module of the library (a function or constant of ``lib``, a typo)."""
    parts = name.split(".")[1:]
    if parts and (library.joinpath(*parts).with_suffix(".py")).is_file():
        return library.joinpath(*parts).with_suffix(".py")
    package = library.joinpath(*parts, "__init__.py")
    return package if package.is_file() else None


def imported_modules(tree: ast.AST, package: str | None = None) -> set[str]:
    """Every ``lib...`` name the code imports, anywhere in it (a function's lazy import counts): ``import
    lib.x``, ``from lib import x, y`` (both ``lib.x`` and ``lib.y``; :func:`library_files` drops names that
    are not modules), ``from lib.x import f``, relative imports inside ``package`` (``"lib"``) and a string
    naming a module, as a subprocess's ``-m lib.x`` does. ``lib`` itself is always implied."""
    names = {"lib"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # from . import x, from ..x import f: relative to the importing package
                if package is None:
                    continue
                parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            names.add(base)
            names |= {f"{base}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _RUN_AS_MODULE.fullmatch(node.value):
            names.add(node.value)
    return {n for n in names if n == "lib" or n.startswith("lib.")}


def library_files(source: Path, library: Path = LIBRARY) -> list[Path]:
    """The library files a chapter depends on: ``lib/__init__.py``, each ``lib`` module its source imports,
    and each module those import, transitively (sorted). Where the source or one of those modules does not
    parse as Python, the chapter depends on the whole library (its imports cannot be read, so nothing is
    ruled out; the chapter's run then reports the error)."""
    found: set[Path] = set()
    try:
        waiting = list(imported_modules(ast.parse(source.read_text(), filename=str(source))))
        while waiting:
            name = waiting.pop()
            path = _module_file(name, library)
            if path is None or path in found:
                continue
            found.add(path)
            package = name if path.name == "__init__.py" else name.rpartition(".")[0]
            waiting += imported_modules(ast.parse(path.read_text(), filename=str(path)), package)
    except SyntaxError:
        return sorted(library.glob("*.py"))
    return sorted(found)


def library_digest(source: Path, library: Path = LIBRARY) -> str:
    """SHA-256 over the library files a chapter depends on (:func:`library_files`) and the pins
    (``constraints.txt`` beside ``library``)."""
    digest = hashlib.sha256()
    for path in [*library_files(source, library), library.parent / "constraints.txt"]:
        digest.update(path.name.encode())
        digest.update(path.read_bytes() if path.exists() else b"")
    return digest.hexdigest()


def input_hash(source: Path, device: str | None, environment: dict | None = None) -> str:
    """SHA-256 over what a notebook's outputs depend on: its source, the library files it imports, the
    pinned versions, the data it reads from earlier chapters and :func:`run_environment` (or
    ``environment``)."""
    digest = hashlib.sha256(library_digest(source).encode())
    for path in [source, *upstream_data(source)]:
        digest.update(path.name.encode())
        digest.update(path.read_bytes() if path.exists() else b"")
    digest.update(json.dumps(environment or run_environment(device), sort_keys=True).encode())
    return digest.hexdigest()


def output_hashes(root: Path, stem: str) -> dict[str, str]:
    """SHA-256 of every file under ``root/data/<stem>/`` and ``root/figures/<stem>/``, by relative path."""
    files = sorted(p for kind in ("data", "figures") for p in (root / kind / stem).rglob("*") if p.is_file())
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def _record(executed: Path) -> dict:
    try:
        return nbformat.read(executed, as_version=4).metadata.get(HASH_KEY, {})
    except Exception:  # a missing or unreadable notebook is simply out of date
        return {}


def recorded_hash(executed: Path) -> str | None:
    """The input hash stored in an executed notebook's metadata, if any."""
    return _record(executed).get("input_hash")


def stale_reason(source: Path, root: Path, digest: str, environment: dict | None = None) -> str | None:
    """Why a chapter must re-run (``None`` if it is up to date). ``environment``: this build's
    :func:`run_environment`, to say so when the outputs came from another machine."""
    record = _record(root / "notebooks" / f"{source.stem}.ipynb")
    if record.get("input_hash") != digest:
        moved = machine_change(record.get("environment"), environment) if environment else None
        if moved:
            return f"its outputs came from another machine ({moved})"
        return "its inputs changed" if record else "it has no executed notebook from this build"
    recorded, now = record.get("outputs"), output_hashes(root, source.stem)
    if recorded is None:
        return "no manifest of its outputs was recorded"
    differ = sorted(name for name in set(recorded) | set(now) if recorded.get(name) != now.get(name))
    if differ:
        more = f" and {len(differ) - 3} more" if len(differ) > 3 else ""
        return f"its committed outputs differ from what the build recorded ({', '.join(differ[:3])}{more})"
    return None
