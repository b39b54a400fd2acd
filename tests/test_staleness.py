"""A chapter's input hash: the library it imports (followed through the library's own imports, lazy ones
included), and nothing it does not; the machine it runs on."""

import nbformat
import pytest

from lib.make import staleness

CHAPTER = """# %% tags=["parameters"]
quick = False

# %%
from lib import direct, not_a_module
import lib.lazy
"""

LIBRARY = {
    "__init__.py": '"""The library."""\n',
    "direct.py": "from lib import through\n",
    "through.py": "import math\n",
    "lazy.py": "def f():\n    from lib.inside import g\n    return g()\n",
    "inside.py": "def g():\n    return 1\n",
    "unused.py": "import lib.direct\n",  # imports a module the chapter uses; nothing imports it
}


@pytest.fixture()
def book(tmp_path):
    """A tmp book: a chapter, a library of real files and the pins."""
    (tmp_path / "lib").mkdir()
    for name, text in LIBRARY.items():
        (tmp_path / "lib" / name).write_text(text)
    (tmp_path / "constraints.txt").write_text("torch==2.13.0\n")
    (tmp_path / "notebooks").mkdir()
    source = tmp_path / "notebooks" / "01_chapter.py"
    source.write_text(CHAPTER)
    return source, tmp_path / "lib"


def _digest_after(book, name, text):
    source, library = book
    before = staleness.library_digest(source, library)
    path = library.parent / name
    path.write_text(path.read_text() + text if path.exists() else text)
    return before, staleness.library_digest(source, library)


def test_a_chapter_depends_on_what_it_imports_transitively_and_lazily_and_no_more(book):
    source, library = book
    found = [p.name for p in staleness.library_files(source, library)]
    assert found == ["__init__.py", "direct.py", "inside.py", "lazy.py", "through.py"]


@pytest.mark.parametrize("name", ["lib/unused.py", "lib/new_module.py"])
def test_editing_what_the_chapter_does_not_import_keeps_its_hash(book, name):
    before, after = _digest_after(book, name, "\nx = 2\n")
    assert before == after


@pytest.mark.parametrize("name", ["lib/direct.py", "lib/through.py", "lib/lazy.py", "lib/inside.py",
                                  "lib/__init__.py", "constraints.txt"],
                         ids=["imported", "transitive", "imports-lazily", "lazily-imported", "package", "pins"])
def test_editing_what_the_chapter_imports_changes_its_hash(book, name):
    before, after = _digest_after(book, name, "\nx = 2\n")
    assert before != after


def test_a_new_import_in_the_library_joins_the_graph(book):
    before, after = _digest_after(book, "lib/through.py", "from lib.unused import direct\n")
    assert before != after
    assert "unused.py" in [p.name for p in staleness.library_files(*book)]


def test_relative_imports_and_a_module_run_by_name_count(book):
    source, library = book
    (library / "through.py").write_text('from . import inside\nfrom .unused import x\nARGV = ["-m", "lib.extra"]\n')
    (library / "extra.py").write_text("")
    found = [p.name for p in staleness.library_files(source, library)]
    assert {"inside.py", "unused.py", "extra.py"} <= set(found)


@pytest.mark.parametrize("broken", ["notebooks/01_chapter.py", "lib/through.py"])
def test_a_source_or_module_that_does_not_parse_means_the_whole_library(book, broken):
    source, library = book
    path = library.parent / broken
    path.write_text(path.read_text() + "\n%matplotlib inline\n")
    assert len(staleness.library_files(source, library)) == len(LIBRARY)


def test_in_this_book_no_chapter_imports_the_machinery_and_chapter_7_has_its_own_modules():
    files = {s.stem: staleness.library_files(s) for s in staleness.sources()}
    machinery = staleness.LIBRARY / "make"
    assert all(not p.is_relative_to(machinery) for paths in files.values() for p in paths), files
    graphs = {stem: {p.stem for p in paths} for stem, paths in files.items()}
    assert all({"__init__", "results"} <= graph for graph in graphs.values())
    earlier = set().union(*(graph for stem, graph in graphs.items() if stem < "07"))
    assert graphs["07_over_the_wire"] - earlier, "editing chapter 7's serving code would re-run every chapter"


def test_the_hash_covers_the_resolved_device_and_versions(tmp_path, monkeypatch):
    source = tmp_path / "notebooks" / "01_demo.py"
    source.parent.mkdir()
    source.write_text("# %%\nvalue = 1\n")  # imports nothing but lib/__init__.py
    assert staleness.input_hash(source, "cpu") == staleness.input_hash(source, None) == staleness.input_hash(
        source, "auto")
    cpu = staleness.run_environment("cpu")
    assert cpu["device"] == "cpu" and cpu["torch"] and cpu["cuda"]
    assert cpu == staleness.probe_environment("cpu"), "the subprocess's record is the one made in-process"
    base = staleness.input_hash(source, None, cpu)
    for key, other in [("device", "cuda:0"), ("device_name", "NVIDIA H100"), ("torch", "9.9"), ("cuda", "12.4")]:
        assert staleness.input_hash(source, None, {**cpu, key: other}) != base, key
    import torch

    class Properties:
        name, total_memory, major, minor = "NVIDIA H200", 141 * 2**30, 9, 0

    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    monkeypatch.setattr("torch.cuda.device_count", lambda: 1)
    monkeypatch.setattr("torch.cuda.current_device", lambda: 0)
    monkeypatch.setattr("torch.cuda.get_device_name", lambda *_: "NVIDIA H200")
    monkeypatch.setattr("torch.cuda.get_device_properties", lambda *_: Properties)
    gpu = staleness.probe_environment(None)
    assert gpu["device"] == "cuda:0" and gpu["device_name"] == "NVIDIA H200"
    assert gpu["machine"]["gpu"] == "NVIDIA H200" and gpu["machine"]["compute_capability"] == "9.0"
    assert staleness.probe_environment("cuda") == gpu == staleness.probe_environment("cuda:0")
    assert torch.cuda.is_available()


@pytest.mark.parametrize("key, other", [("cpu_flags", "avx avx2 f16c fma"), ("cpu_count", 64),
                                        ("cpu", "Intel(R) Xeon(R)")])
def test_another_machine_of_the_same_name_is_another_machine(tmp_path, key, other):
    """The issue's case: a second host whose CPU reports the same name but has AVX2 only is not up to date."""
    source = tmp_path / "notebooks" / "01_demo.py"
    source.parent.mkdir()
    source.write_text("# %%\nvalue = 1\n")
    here = {"device": "cpu", "device_name": "AMD EPYC", "torch": "2.13.0+cpu", "cuda": "none",
            "machine": {"cpu": "AMD EPYC", "cpu_flags": "avx avx2 avx512_bf16 avx512f f16c fma", "cpu_count": 2}}
    there = {**here, "machine": {**here["machine"], key: other}}
    assert staleness.input_hash(source, None, here) != staleness.input_hash(source, None, there)
    assert staleness.machine_change(here, there) == f"{key}: {here['machine'][key]} -> {other}"
    assert staleness.machine_change(here, dict(here)) is None and staleness.machine_change(None, here) is None
    executed = tmp_path / "notebooks" / "01_demo.ipynb"
    notebook = nbformat.v4.new_notebook()
    notebook.metadata[staleness.HASH_KEY] = {"input_hash": staleness.input_hash(source, None, here),
                                             "environment": here, "outputs": {}}
    nbformat.write(notebook, executed)
    assert staleness.stale_reason(source, tmp_path, staleness.input_hash(source, None, here), here) is None
    reason = staleness.stale_reason(source, tmp_path, staleness.input_hash(source, None, there), there)
    assert reason == f"its outputs came from another machine ({key}: {here['machine'][key]} -> {other})"


def test_an_unknown_device_is_the_probe_s_one_line():
    with pytest.raises(ValueError, match=r"^unknown device 'tpu'; choose one of auto, cpu, cuda, cuda:N$"):
        staleness.run_environment("tpu")
