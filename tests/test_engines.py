"""lib.engines: the engine lifecycle against trivial processes and a fake OpenAI-compatible server run as
an engine (tests/fake_openai.py); an engine killed mid-run, alone and inside a demo chapter built by
lib.make.book (issue 10). No model, no engine package needed."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from lib import engines
from lib.client import http_get, stream_chat
from processes import alive


def _http_server(**kw):
    return engines.Engine("toy", [sys.executable, "-m", "http.server", "{port}", "--bind", "{host}"],
                          health_path="/", start_timeout_s=30, **kw)


def test_vllm_command_sets_its_budget_threads_and_compile_cache(tmp_path):
    engine = engines.vllm_engine(tmp_path / "model", max_num_batched_tokens=256, threads=3, root=tmp_path)
    assert engine.name == "vLLM (budget 256)"
    assert engine.argv[engine.argv.index("--max-num-batched-tokens") + 1] == "256"
    assert "--no-enable-prefix-caching" in engine.argv
    assert engine.env["OMP_NUM_THREADS"] == "3"
    assert engine.env["VLLM_USE_AOT_COMPILE"] == "0", "vLLM 0.32.0's AOT artifacts do not load: every start recompiled"
    plain = engines.vllm_engine(tmp_path / "model", prefix_caching=True, root=tmp_path)
    assert "--max-num-batched-tokens" not in plain.argv and "--no-enable-prefix-caching" not in plain.argv


def test_engine_starts_healthy_and_stops():
    with _http_server() as engine:
        assert engine.running and engine.startup_s > 0
        assert http_get(engine.base_url + "/")[0] == 200
        pid = engine._proc.pid
    assert not engine.running and not alive(pid)
    assert stream_chat(engine.base_url, "m", [], 1).error_kind == "refused"


def test_engine_is_stopped_when_the_block_raises():
    engine = _http_server()
    with pytest.raises(RuntimeError, match="notebook failed"):
        with engine:
            pid = engine._proc.pid
            raise RuntimeError("notebook failed")
    assert not alive(pid)


def test_failed_start_shows_the_end_of_the_log():
    engine = engines.Engine("broken", [sys.executable, "-c", "print('loading model'); print('boom: no such model'); "
                                                             "import sys; sys.exit(3)"], start_timeout_s=30)
    with pytest.raises(engines.EngineFailed, match="(?s)exited with code 3.*boom: no such model"):
        engine.start()
    assert not engine.running


def test_engine_that_never_gets_healthy_is_killed():
    engine = engines.Engine("sleepy", [sys.executable, "-c", "import time; print('compiling'); time.sleep(60)"],
                            start_timeout_s=1.5)
    started = time.monotonic()
    with pytest.raises(engines.EngineFailed, match="(?s)not healthy after 2 s.*compiling"):
        engine.start()
    assert time.monotonic() - started < 15
    assert not engine.running


def test_an_engine_that_accepts_connections_and_never_answers_is_not_healthy_in_time():
    """Its port is open (the kernel completes every handshake) but no byte ever comes back: each health probe
    is bounded, and so is the start."""
    listens = "import socket, sys, time; s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(); " \
              "print('listening', flush=True); time.sleep(60)"
    engine = engines.Engine("mute", [sys.executable, "-c", listens, "{port}"], start_timeout_s=1.0)
    started = time.monotonic()
    with pytest.raises(engines.EngineFailed, match="(?s)mute was not healthy after 1 s.*listening"):
        engine.start()
    assert time.monotonic() - started < 30  # bounded: the mute server sleeps 60 s
    assert not engine.running


def test_missing_program_is_named():
    with pytest.raises(engines.EngineFailed, match="no such program"):
        engines.Engine("ghost", ["/nonexistent/engine"]).start()


def test_stop_kills_the_whole_process_group(tmp_path):
    child_pid = tmp_path / "child.pid"
    script = textwrap.dedent(f"""
        import subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        open({str(child_pid)!r}, "w").write(str(child.pid))
        sys.argv = ["http.server", sys.argv[1], "--bind", "127.0.0.1"]
        import runpy; runpy.run_module("http.server", run_name="__main__")
    """)
    with engines.Engine("with-worker", [sys.executable, "-c", script, "{port}"], health_path="/",
                        start_timeout_s=30):
        worker = int(child_pid.read_text())
        assert alive(worker)
    deadline = time.monotonic() + 10
    while alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(worker)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal (prctl) is Linux's")
def test_engine_dies_with_the_process_that_started_it(tmp_path):
    """A notebook kernel killed outright (no atexit, no finalizer) must not leave its engine running."""
    pid_file = tmp_path / "engine.pid"
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(engines.REPO_ROOT)!r})
        from lib import engines
        e = engines.Engine("orphan", [sys.executable, "-m", "http.server", "{{port}}", "--bind", "{{host}}"],
                           health_path="/", start_timeout_s=30).start()
        open({str(pid_file)!r}, "w").write(str(e._proc.pid))
        time.sleep(120)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 30
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline and parent.poll() is None, "the engine did not start"
            time.sleep(0.1)
        engine_pid = int(pid_file.read_text())
        assert alive(engine_pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 10
        while alive(engine_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(engine_pid)
    finally:
        if parent.poll() is None:
            parent.kill()


# ------------------------------------------------------------------------------------------------------
# An engine that dies mid-run (issue 10): every request is returned as failed, nothing is left running,
# and a chapter it breaks keeps its previous outputs
# ------------------------------------------------------------------------------------------------------

FAKE = Path(__file__).with_name("fake_openai.py")


def _group(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def _fake_engine(worker_pid_file: Path) -> engines.Engine:
    return engines.Engine("fake", [sys.executable, str(FAKE), "{port}", "--worker-pid-file", str(worker_pid_file)],
                          start_timeout_s=30)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads process groups from /proc")
@pytest.mark.parametrize("load", ["closed", "open"])
def test_an_engine_killed_mid_run_fails_every_request_and_leaves_nothing_running(tmp_path, load):
    from fake_openai import LONG_TOKENS

    from lib.client import closed_loop, failures, open_loop

    n = 6
    streaming = threading.Event()
    with _fake_engine(tmp_path / "worker.pid") as engine:
        leader, worker = engine._proc.pid, int((tmp_path / "worker.pid").read_text())
        assert sorted(_group(leader)) == sorted([leader, worker])

        def send(i, scheduled=None):  # each reply would take 10 s: every one is cut short or refused
            return stream_chat(engine.base_url, "long", [], LONG_TOKENS, request_id=i, timeout_s=30,
                               scheduled=scheduled, on_event=lambda e: e.content and streaming.set())

        def kill():  # the engine dies once the first request streams
            streaming.wait(30)
            os.kill(leader, signal.SIGKILL)

        killer = threading.Thread(target=kill)
        killer.start()
        started = time.monotonic()
        traces = closed_loop(send, n, concurrency=3) if load == "closed" else \
            open_loop(send, [0.0, 0.01, 0.02, 0.5, 0.8, 1.0])
        killer.join()
        assert time.monotonic() - started < 15
        engine._proc.wait(timeout=10)  # SIGKILL's exit can lag the sockets' close that ended the requests
        assert not engine.running and worker in _group(leader)  # the worker outlived its engine
    assert _group(leader) == []  # leaving the block killed the whole group

    assert [t.request_id for t in traces] == list(range(n))  # none dropped, in request order
    assert all(not t.ok and t.error for t in traces)
    counts = failures(traces)
    assert sum(counts.values()) == n and set(counts) <= {"reset", "incomplete", "refused"}, counts
    cut = [t for t in traces if t.chunk_times]  # in flight when the engine died: what arrived is kept
    assert cut and all(t.error_kind in ("reset", "incomplete") for t in cut)
    # A request sent after it died is refused, or reset where the group's surviving worker still held the
    # listening socket: which, depends on the kernel's timing, not on the client, so no count of either is asserted.
    for t in traces:
        with pytest.raises(ValueError, match="failed"):
            t.metrics()


DEMO = '''# %% tags=["parameters"]
quick = False
die = False

# %%
import os, signal, sys, threading
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from lib.client import closed_loop, failures, stream_chat
from lib.engines import Engine
from lib.results import Results

engine = Engine("fake", [sys.executable, {fake!r}, "{{port}}", "--worker-pid-file", {worker!r}]).start()
open({leader!r}, "w").write(str(engine._proc.pid))
streaming = threading.Event()


def send(i):
    return stream_chat(engine.base_url, "long" if die else "ok", [], 200, request_id=i, timeout_s=30,
                       on_event=lambda e: e.content and streaming.set())


def kill():
    streaming.wait(30)
    os.kill(engine._proc.pid, signal.SIGKILL)


if die:
    threading.Thread(target=kill, daemon=True).start()
traces = closed_loop(send, 4, concurrency=2)
bad = failures(traces)
if bad:  # as chapter 7 does
    raise RuntimeError(f"fake: requests failed ({{bad}})")

# %%
r = Results("01_demo", quick=quick)
r.table(pd.DataFrame({{"tokens": [t.n_tokens for t in traces]}}), "v")
fig, ax = plt.subplots()
r.figure(fig, "f")
engine.stop()
'''


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads process groups from /proc")
def test_an_engine_dying_mid_chapter_fails_the_chapter_keeps_its_outputs_and_leaves_nothing_running(tmp_path):
    from lib.make import book

    root = tmp_path / "book"
    (root / "notebooks").mkdir(parents=True)
    source = root / "notebooks" / "01_demo.py"
    leader_file, worker_file = tmp_path / "leader.pid", tmp_path / "worker.pid"
    source.write_text(DEMO.format(fake=str(FAKE), worker=str(worker_file), leader=str(leader_file)))

    def snapshot():
        files = [p for kind in ("data", "figures") for p in (root / kind).rglob("*") if p.is_file()]
        files.append(root / "notebooks" / "01_demo.ipynb")
        return {str(p.relative_to(root)): p.read_bytes() for p in files}

    assert book.build(root=root, log=lambda _: None) == 0
    before = snapshot()
    assert (root / "data" / "01_demo" / "v.csv").read_text().splitlines() == ["tokens", "5", "5", "5", "5"]
    assert _group(int(leader_file.read_text())) == []

    source.write_text(source.read_text().replace("die = False", "die = True"))
    logs = []
    assert book.build(root=root, log=logs.append) == 1
    assert logs[-1].startswith("FAILED: 01_demo failed in cell 2 of 3: RuntimeError: fake: requests failed ("), logs[-1]
    assert "previous outputs of 01_demo were kept" in logs[-1]
    assert snapshot() == before  # byte-identical data, figures and notebook
    leader, worker = int(leader_file.read_text()), int(worker_file.read_text())
    deadline = time.monotonic() + 10  # the kernel's exit stops the engine's group; allow it a moment
    while _group(leader) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _group(leader) == [] and not alive(worker)


def test_vllm_computes_on_all_but_the_core_its_scheduler_keeps():
    """vLLM's CPU build keeps one core for its scheduler process, never leaving its worker none; transformers
    serve computes on every thread it is given; no engine computes on none."""
    from lib.engines import compute_threads

    assert [compute_threads("vLLM", n) for n in (1, 2, 16)] == [1, 1, 15]
    assert compute_threads("vLLM (budget 512)", 4) == 3
    assert compute_threads("transformers serve", 2) == 2
    with pytest.raises(ValueError, match="at least one thread"):
        compute_threads("vLLM", 0)
