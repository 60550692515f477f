"""``study run --processes N``: one study's cells over N local processes on one SQLite store.

The command runs in a child process (which starts its own children) against the fake
OpenAI-compatible server living in the test process; the store is then read here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from forge_ledger.ledger import Ledger, verify_session
from forge_ledger.study import StudyStream
from forge_ledger.study.runner import rotated, unfinished_cells
from forge_ledger.testing import FakeOpenAIServer, bundled_script
from support.cli import write_participants


def _plan(tmp_path: Path, url: str, repeats: int = 2, **budget: float) -> Path:
    write_participants(tmp_path / "trio.yaml", url, ("ana", "ben", "cleo"))
    doc: dict[str, Any] = {
        "name": "spread",
        "topics": [{"title": "Retry policy"}, {"title": "Cache layout"}, {"title": "Log format"}],
        "panels": {"trio": "trio.yaml"},
        "variants": {"named": {}, "anonymous": {"anonymize": True}},
        "repeats": repeats,
        "session": {"max_rounds": 6},
        "budget": {"usd": 5, **budget},
    }
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "forge_ledger", *args]


def _env(store: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["FORGE_LEDGER_STORE"] = str(store)
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    return env


def _each_cell_once(store: Path) -> int:
    """Every cell of the store's one study assigned and finished exactly once, every session
    verifying, the study's chain intact; how many cells."""
    with Ledger(str(store), create=False) as ledger:
        stream = StudyStream(ledger)
        (study_id,) = stream.study_ids()
        counts = Counter((r.type, str(r.data.get("cell", ""))) for r in stream.records(study_id))
        state = stream.state(study_id)
        assert state.status == "finished"
        assert all(counts[("CellAssigned", c)] == 1 for c in state.cells), counts
        assert all(counts[("CellFinished", c)] == 1 for c in state.cells), counts
        assert counts[("StudyFinished", "")] == 1
        assert len(ledger.session_ids()) == len(state.cells)
        assert all(verify_session(ledger, sid).ok for sid in ledger.session_ids())
        assert stream.verify(study_id) == []
        return len(state.cells)


def _finished(store: Path) -> int:
    try:
        with Ledger(str(store), create=False) as reader:
            stream = StudyStream(reader)
            ids = stream.study_ids()
            return sum(r.type == "CellFinished" for r in stream.records(ids[0])) if ids else 0
    except Exception:  # not created yet, or locked by a writer for a moment
        return 0


def _children_of(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


@pytest.mark.slow
def test_two_processes_finish_a_plan_each_cell_once(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    with FakeOpenAIServer(bundled_script("demo"), latency=0.02) as server:
        done = subprocess.run(
            _cli("study", "run", str(_plan(tmp_path, server.url)), "-j", "2", "-p", "2", "--json"),
            env=_env(store),
            cwd=tmp_path,
            capture_output=True,
            timeout=300,
        )
    assert done.returncode == 0, done.stderr.decode()[-1500:]
    summary = json.loads(done.stdout)
    assert summary["done"] == 12
    assert summary["status"] == "finished"
    assert _each_cell_once(store) == 12


@pytest.mark.slow
def test_the_calls_budget_holds_across_processes(tmp_path: Path) -> None:
    """Each call is counted in the store's file before it starts, so two processes together
    make no more calls than the budget: the server hears exactly that many, the study stops
    and says why."""
    store = tmp_path / "s.sqlite"
    with FakeOpenAIServer(bundled_script("demo"), latency=0.02) as server:
        plan = _plan(tmp_path, server.url, calls=40)
        done = subprocess.run(
            _cli("study", "run", str(plan), "-j", "2", "-p", "2", "--json"),
            env=_env(store),
            cwd=tmp_path,
            capture_output=True,
            timeout=300,
        )
        heard = len(server.requests)
    assert done.returncode == 3, done.stderr.decode()[-1500:]  # cells paused: resume later
    summary = json.loads(done.stdout)
    assert heard == 40
    assert summary["stopped"] == "the study's budget of 40 calls is spent (40 made)"
    with Ledger(str(store), create=False) as ledger:
        stream = StudyStream(ledger)
        (study_id,) = stream.study_ids()
        assert stream.state(study_id).count("pending") > 0


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="finds children through /proc")
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_stops_every_process_and_resume_finishes_each_cell_once(
    tmp_path: Path, stop: signal.Signals
) -> None:
    store = tmp_path / "s.sqlite"
    # 0.5 s a call: the 12 cells take several seconds after the first two end, so the stop
    # lands mid-run even when a loaded machine slows the polling below
    with FakeOpenAIServer(bundled_script("demo"), latency=0.5) as server:
        plan = _plan(tmp_path, server.url)
        parent = subprocess.Popen(
            _cli("study", "run", str(plan), "-j", "2", "-p", "2"),
            env=_env(store),
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 120
            while _finished(store) < 2:
                assert parent.poll() is None, parent.communicate()[1].decode()[-800:]
                assert time.monotonic() < deadline, "the study never got going"
                time.sleep(0.05)
            others = _children_of(parent.pid)
            parent.send_signal(stop)
            err = parent.communicate(timeout=120)[1].decode()
        finally:
            if parent.poll() is None:
                parent.kill()
        assert parent.returncode == 130, err[-800:]
        assert "study resume" in err
        assert "Traceback" not in err
        assert len(others) == 1
        assert not any(Path(f"/proc/{pid}").exists() for pid in others)  # stopped, waited for
        assert _finished(store) < 12
        again = subprocess.run(
            _cli("study", "resume", "spread", "-j", "3", "-p", "2", "--json"),
            env=_env(store),
            cwd=tmp_path,
            capture_output=True,
            timeout=300,
        )
    assert again.returncode == 0, again.stderr.decode()[-1500:]
    assert json.loads(again.stdout)["done"] == 12
    assert _each_cell_once(store) == 12


def test_processes_on_postgresql_say_to_use_the_queue_and_write_nothing(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "http://127.0.0.1:9/v1")
    url = "postgresql://127.0.0.1:9/none"  # refused before any connection is tried
    done = subprocess.run(
        _cli("study", "run", str(plan), "-p", "2", "--store", url),
        env=_env(tmp_path / "unused.sqlite"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "--queue" in line
    assert "worker" in line


def test_each_process_starts_on_other_cells_and_still_sees_every_cell(tmp_path: Path) -> None:
    from forge_ledger.study import load_plan, plan_study

    plan = load_plan(_plan(tmp_path, "http://127.0.0.1:9/v1"))
    with Ledger(str(tmp_path / "s.sqlite")) as ledger:
        state = StudyStream(ledger).state(plan_study(ledger, plan))
    cells = unfinished_cells(state)
    orders = [rotated(state, cells, (k, 3)) for k in range(3)]
    assert orders[0] == cells
    assert all(sorted(o) == sorted(cells) for o in orders)
    assert len({o[0] for o in orders}) == 3


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="finds children through /proc")
def test_a_process_killed_under_the_run_is_one_line_and_resume_finishes(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    # 0.5 s a call: the 12 cells take several seconds after the first two end, so the stop
    # lands mid-run even when a loaded machine slows the polling below
    with FakeOpenAIServer(bundled_script("demo"), latency=0.5) as server:
        plan = _plan(tmp_path, server.url)
        parent = subprocess.Popen(
            _cli("study", "run", str(plan), "-j", "2", "-p", "2"),
            env=_env(store),
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 120
            while _finished(store) < 2:
                assert parent.poll() is None, parent.communicate()[1].decode()[-800:]
                assert time.monotonic() < deadline, "the study never got going"
                time.sleep(0.05)
            (child,) = _children_of(parent.pid)
            os.kill(child, signal.SIGKILL)
            err = parent.communicate(timeout=300)[1].decode()
        finally:
            if parent.poll() is None:
                parent.kill()
        assert parent.returncode == 1, err[-800:]
        (line,) = [ln for ln in err.splitlines() if ln.strip()]
        assert line.startswith("error: process 2 of 2 ")
        assert "exit code -9" in line
        assert "study resume" in line
        again = subprocess.run(
            _cli("study", "resume", "spread", "-p", "2", "--json"),
            env=_env(store),
            cwd=tmp_path,
            capture_output=True,
            timeout=300,
        )
    assert again.returncode == 0, again.stderr.decode()[-1500:]
    assert _each_cell_once(store) == 12


def test_the_library_refuses_processes_with_a_provider_of_its_own(tmp_path: Path) -> None:
    import forge_ledger
    from forge_ledger.errors import UsageError
    from forge_ledger.testing import ScriptedProvider

    plan = _plan(tmp_path, "http://127.0.0.1:9/v1")
    provider = ScriptedProvider.from_script(bundled_script("demo"))
    with forge_ledger.open(tmp_path / "s.sqlite", provider=provider) as forge:
        with pytest.raises(UsageError, match="provider"):
            forge.study(plan, processes=2)
        assert StudyStream(forge.ledger).study_ids() == []  # refused before it was recorded


@pytest.mark.slow
def test_the_library_runs_a_study_over_two_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import forge_ledger

    store = tmp_path / "s.sqlite"
    for key in [k for k in os.environ if k.endswith("_API_KEY")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    with FakeOpenAIServer(bundled_script("demo"), latency=0.02) as server:
        plan = _plan(tmp_path, server.url, repeats=1)
        with forge_ledger.open(store) as forge:
            state = forge.study(plan, concurrency=2, processes=2)
    assert state.status == "finished"
    assert _each_cell_once(store) == 6


def test_the_display_counts_a_cell_another_process_runs_as_running(tmp_path: Path) -> None:
    from forge_ledger.study import StudyRun, load_plan, plan_study
    from forge_ledger.study.runner import Progress

    plan = load_plan(_plan(tmp_path, "http://127.0.0.1:9/v1"))
    with Ledger(str(tmp_path / "s.sqlite")) as ledger:
        run = StudyRun(ledger, plan_study(ledger, plan))
        first, second = unfinished_cells(run.state)[:2]
        assert run.claim(first) is None  # assigned: its session runs in some process
        alone = Progress(run.state, active={second: 0.0}).counts()
        shared = Progress(run.state, active={second: 0.0}, shared=True).counts()
    assert (alone["running"], alone["waiting"]) == (1, 11)
    assert (shared["running"], shared["waiting"]) == (2, 10)
    assert set(Progress(run.state, active={second: 0.0}).running()) == {second}
    assert set(Progress(run.state, active={second: 0.0}, shared=True).running()) == {first, second}
