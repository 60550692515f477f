"""Studies on many workers: cells queued in procrastinate on PostgreSQL, run by worker processes.

Every test runs ``forge-ledger`` in child processes (a planner, workers) against the fake
OpenAI-compatible server living in the test process, in a PostgreSQL schema of its own, so a
worker killed with SIGKILL leaves the server and the database as they were.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from forge_ledger.ledger import Ledger, verify_session
from forge_ledger.study import StudyStream
from forge_ledger.testing import FakeOpenAIServer, bundled_script
from support.study_plans import write_plan
from support.tcp_proxy import CuttableProxy

pytestmark = pytest.mark.postgres


def _plan(tmp_path: Path, url: str, **changes: Any) -> Path:
    return write_plan(tmp_path, url, **{"name": "workers", **changes})


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "forge_ledger", *args]


def _env(store: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["FORGE_LEDGER_STORE"] = store
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    return env


def _queue(plan: Path, store: str, *extra: str) -> dict[str, Any]:
    done = subprocess.run(
        _cli("study", "run", str(plan), "--queue", "--json", *extra),
        env=_env(store),
        cwd=plan.parent,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()[-1500:]
    queued: dict[str, Any] = json.loads(done.stdout)
    return queued


def _status(store: str) -> dict[str, Any]:
    done = subprocess.run(
        _cli("study", "status", "workers", "--json"),
        env=_env(store),
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()[-1500:]
    status: dict[str, Any] = json.loads(done.stdout)
    return status


@contextmanager
def _workers(store: str, cwd: Path, n: int, *extra: str) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``n`` workers, each writing its stderr to ``worker-N.log`` in ``cwd``."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(n):
            with open(cwd / f"worker-{len(procs)}.log", "wb") as log:
                procs.append(
                    subprocess.Popen(
                        _cli("worker", "-j", "3", "--grace", "1", *extra),
                        env=_env(store),
                        cwd=cwd,
                        stdout=subprocess.DEVNULL,
                        stderr=log,
                    )
                )
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=60)


def _said(proc: subprocess.Popen[bytes], cwd: Path, procs: list[subprocess.Popen[bytes]]) -> str:
    return (cwd / f"worker-{procs.index(proc)}.log").read_text("utf-8", "replace")


def _stop(proc: subprocess.Popen[bytes], cwd: Path, procs: list[subprocess.Popen[bytes]]) -> str:
    """Ctrl-C a worker; what it said. It must end with 130."""
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    said = _said(proc, cwd, procs)
    assert proc.returncode == 130, said[-1500:]
    return said


def _summary(store: str) -> dict[str, Any]:
    """What ``study status --json`` says, read in this process (cheaper to poll)."""
    from forge_ledger.study.queue import queued_jobs

    with Ledger(store, create=False) as ledger:
        state = StudyStream(ledger).state("workers")
        jobs = asyncio.run(queued_jobs(ledger.location, state.id))
    counts = {k: sum(1 for j in jobs.values() if j == k) for k in ("queued", "taken")}
    return {**state.summary(), "jobs": counts}


def _wait(store: str, done: Any, procs: list[subprocess.Popen[bytes]], secs: float) -> None:
    deadline = time.monotonic() + secs
    while not done(_summary(store)):
        for p in procs:
            assert p.poll() is None, f"a worker ended with {p.returncode}"
        assert time.monotonic() < deadline, json.dumps(_summary(store))[-1500:]
        time.sleep(0.3)


def _drained(status: dict[str, Any]) -> bool:
    """Every cell finished or refused by the budget, nothing left in the queue."""
    jobs = status["jobs"]
    return not status["running"] and not jobs["queued"] and not jobs["taken"]


def _check_once(store: str) -> dict[str, Any]:
    """Each cell claimed and finished at most once, every session verifies; the study."""
    with Ledger(store, create=False) as ledger:
        stream = StudyStream(ledger)
        (study_id,) = stream.study_ids()
        counts = Counter((r.type, str(r.data.get("cell", ""))) for r in stream.records(study_id))
        state = stream.state(study_id)
        for c in state.cells:
            assert counts[("CellAssigned", c)] <= 1
            assert counts[("CellFinished", c)] <= 1
        assert stream.verify(study_id) == []
        assert all(verify_session(ledger, s).ok for s in ledger.session_ids())
        assigned = sum(n for (t, _), n in counts.items() if t == "CellAssigned")
        assert len(ledger.session_ids()) == assigned
        return {"state": state, "sessions": [ledger.state(s) for s in ledger.session_ids()]}


# --------------------------------------------------------------------------- refusals


@pytest.mark.slow
def test_queue_on_a_sqlite_store_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    plan = _plan(tmp_path, "http://127.0.0.1:9/v1")
    done = subprocess.run(
        _cli("study", "run", str(plan), "--queue"),
        env=_env(str(store)),
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 2
    lines = done.stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert "needs a PostgreSQL store" in lines[0]
    assert not store.exists()
    worker = subprocess.run(_cli("worker"), env=_env(str(store)), capture_output=True, timeout=60)
    assert worker.returncode == 2
    assert "needs a PostgreSQL store" in worker.stderr.decode()


def test_a_worker_that_cannot_reach_postgresql_exits_with_try_again() -> None:
    done = subprocess.run(
        _cli("worker"),
        env=_env("postgresql://postgres@127.0.0.1:1/test"),
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 75, done.stderr.decode()
    assert len(done.stderr.decode().strip().splitlines()) == 1


# --------------------------------------------------------------------------- workers


@pytest.mark.slow
def test_a_planner_and_two_workers_finish_a_study_each_cell_once(
    tmp_path: Path, pg_url: str
) -> None:
    with FakeOpenAIServer(bundled_script("demo"), latency=0.05) as server:
        plan = _plan(tmp_path, server.url)
        queued = _queue(plan, pg_url)
        assert len(queued["queued"]) == 6
        again = _queue(plan, pg_url)  # queued twice: each cell still waits once
        assert again["queued"] == []
        with _workers(pg_url, tmp_path, 2) as procs:
            _wait(pg_url, lambda s: s["status"] == "finished" and _drained(s), procs, 180)
            said = [_stop(p, tmp_path, procs) for p in procs]
    assert all("cell t" in s for s in said), said  # both workers ran cells
    checked = _check_once(pg_url)
    state = checked["state"]
    assert state.count("done") == 6
    assert len(checked["sessions"]) == 6


def _cut_off_then_finished_by_another(pg_url: str, tmp_path: Path) -> dict[str, Any]:
    """The study left with a cell running and not all done by a worker that went; a fresh
    worker then finishes it, every cell once (checked and returned by :func:`_check_once`)."""
    cut = _status(pg_url)
    assert cut["running"] >= 1
    assert cut["done"] < 6
    with _workers(pg_url, tmp_path, 1) as procs:
        _wait(pg_url, lambda s: s["status"] == "finished" and _drained(s), procs, 240)
        _stop(procs[0], tmp_path, procs)
    checked = _check_once(pg_url)
    assert checked["state"].count("done") == 6
    assert len(checked["sessions"]) == 6
    return checked


@pytest.mark.slow
def test_a_worker_killed_with_9_leaves_its_cells_to_another(tmp_path: Path, pg_url: str) -> None:
    with FakeOpenAIServer(bundled_script("demo"), latency=0.2) as server:
        plan = _plan(tmp_path, server.url)
        _queue(plan, pg_url)
        with _workers(pg_url, tmp_path, 1) as (first,):
            _wait(pg_url, lambda s: s["running"] >= 2, [first], 120)
            first.kill()
            first.wait(timeout=30)
        _cut_off_then_finished_by_another(pg_url, tmp_path)


@pytest.mark.slow
def test_the_budget_holds_across_two_workers(tmp_path: Path, pg_url: str) -> None:
    with FakeOpenAIServer(bundled_script("demo"), latency=0.05) as server:
        plan = _plan(
            tmp_path,
            server.url,
            budget={"usd": 0.07},
            session={"max_rounds": 6, "max_cost_usd": 0.05},
        )
        _queue(plan, pg_url)
        with _workers(pg_url, tmp_path, 2) as procs:
            _wait(pg_url, lambda s: s["status"] == "stopped" and _drained(s), procs, 180)
            for p in procs:
                _stop(p, tmp_path, procs)
    checked = _check_once(pg_url)
    state = checked["state"]
    assert state.stopped.startswith("the study's budget of $0.07 is spent")
    assert 0 < state.count("done") < 6
    assert state.spent_usd <= 0.07
    assert sum(s.cost_usd for s in checked["sessions"]) <= 0.07


@pytest.mark.slow
def test_the_calls_budget_holds_across_two_workers_while_cells_run(
    tmp_path: Path, pg_url: str
) -> None:
    calls = 20  # six cells of about 13 calls each would make about 78
    with FakeOpenAIServer(bundled_script("demo"), latency=0.05) as server:
        plan = _plan(tmp_path, server.url, budget={"calls": calls})
        _queue(plan, pg_url)
        with _workers(pg_url, tmp_path, 2) as procs:
            _wait(pg_url, lambda s: s["status"] == "stopped" and _drained(s), procs, 180)
            for p in procs:
                _stop(p, tmp_path, procs)
        made = len(server.requests)
    assert 0 < made <= calls
    checked = _check_once(pg_url)
    state = checked["state"]
    assert state.stopped == f"the study's budget of {calls} calls is spent ({calls} made)"
    assert state.count("paused") >= 1  # cut short by the budget, resumable
    assert state.count("done") < 6
    assert state.calls <= made  # what the cells recorded: no refused call counted
    refused = [f for s in checked["sessions"] for f in s.failures if f.error_type == "budget_calls"]
    assert refused
    assert all("calls is spent" in f.message for f in refused)
    status = _status(pg_url)
    assert status["stopped"] == state.stopped


@pytest.mark.slow
def test_a_call_rate_holds_across_workers_and_ctrl_c_leaves_cells_resumable(
    tmp_path: Path, pg_url: str
) -> None:
    limit = 3
    with FakeOpenAIServer(bundled_script("demo"), latency=0.05) as server:
        plan = _plan(tmp_path, server.url)
        _queue(plan, pg_url, "--rate", f"openai/ana={limit}/min")
        with _workers(pg_url, tmp_path, 2) as procs:
            # The other models go on until every running session waits for ana.
            _wait(pg_url, lambda s: s["running"] >= 4, procs, 120)
            time.sleep(3)
            for p in procs:
                _stop(p, tmp_path, procs)
        starts = {
            name: sorted(r.received_at for r in server.requests if r.model.endswith(name))
            for name in ("ana", "ben")
        }
    ana = starts["ana"]
    assert ana, "no call to ana started"
    for i, first in enumerate(ana):  # any minute from a start holds at most `limit` starts
        assert sum(1 for t in ana[i:] if t - first < 60) <= limit, ana
    assert len(starts["ben"]) > limit  # the limit is ana's alone
    checked = _check_once(pg_url)
    recorded: Counter[str] = Counter()
    for session in checked["sessions"]:
        for r in session.rounds:
            recorded.update(c.participant for c in r.contributions)
        recorded.update(f.participant for f in session.failures)
    assert 0 < recorded["ana"] <= len(ana)
    assert len(checked["sessions"]) > limit  # more sessions than ana could answer
    status = _status(pg_url)  # the cut-off cells wait in the queue, resumable
    cells = json.dumps(status["cells"])
    assert status["jobs"]["queued"] == status["running"] + status["pending"], cells


def _via(url: str, port: int) -> str:
    """``url`` reaching its server through 127.0.0.1:``port`` (a proxy)."""
    parts = urlsplit(url)
    user = f"{parts.username}@" if parts.username else ""
    return parts._replace(netloc=f"{user}127.0.0.1:{port}").geturl()


@pytest.mark.slow
def test_a_worker_that_loses_postgresql_exits_75_and_another_finishes_its_cells(
    tmp_path: Path, pg_url: str
) -> None:
    server_at = urlsplit(pg_url)
    with (
        FakeOpenAIServer(bundled_script("demo"), latency=0.2) as server,
        CuttableProxy((server_at.hostname or "127.0.0.1", server_at.port or 5432)) as proxy,
    ):
        plan = _plan(tmp_path, server.url)
        _queue(plan, pg_url)
        with _workers(_via(pg_url, proxy.port), tmp_path, 1) as procs:
            _wait(pg_url, lambda s: s["running"] >= 2, procs, 120)
            proxy.cut()  # every connection dropped, every reconnect refused
            # Bounded: it used to wait in the connection pool, each call tried ten times.
            procs[0].wait(timeout=45)
            said = _said(procs[0], tmp_path, procs)
        assert procs[0].returncode == 75, said[-1500:]
        lines = said.strip().splitlines()
        assert len(lines) == 1, said[-1500:]
        assert lines[0].startswith("error: lost the connection to PostgreSQL"), lines
        checked = _cut_off_then_finished_by_another(pg_url, tmp_path)
    assert all(s.status.terminal for s in checked["sessions"])


def test_the_store_watch_says_lost_once_when_postgresql_stays_silent(pg_url: str) -> None:
    import threading

    import psycopg

    from forge_ledger.ledger.store import resolve_store
    from forge_ledger.study.queue import conninfo
    from forge_ledger.study.watch import StoreWatch

    server_at = urlsplit(pg_url)
    with CuttableProxy((server_at.hostname or "127.0.0.1", server_at.port or 5432)) as proxy:
        lost: list[BaseException] = []
        said = threading.Event()

        def on_lost(e: BaseException) -> None:
            lost.append(e)
            said.set()

        info = conninfo(resolve_store(_via(pg_url, proxy.port)))
        watch = StoreWatch(info, on_lost, probe_secs=0.1, lost_secs=0.5)
        watch.start()
        try:
            assert not said.wait(1.5)  # it answers: not lost
            assert proxy.accepted == 1  # one connection, asked again and again
            proxy.cut()
            assert said.wait(60)
        finally:
            watch.stop()
    assert len(lost) == 1
    assert isinstance(lost[0], psycopg.OperationalError)


# --------------------------------------------------------------------------- the rate rule


def test_a_rate_is_model_equals_n_per_minute() -> None:
    from forge_ledger.errors import UsageError
    from forge_ledger.study.rates import parse_rates

    assert parse_rates(["openai/gpt-4o=60/min", "ana=1/min"]) == {"openai/gpt-4o": 60, "ana": 1}
    for bad in ("ana=0/min", "ana=5/s", "=5/min", "ana 5/min"):
        with pytest.raises(UsageError, match="is not MODEL=N/min"):
            parse_rates([bad])


def test_a_call_waits_until_the_limit_th_newest_start_is_a_minute_old() -> None:
    from datetime import UTC, datetime, timedelta

    from forge_ledger.study.rates import slot_wait

    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    ago = [now - timedelta(seconds=s) for s in (1, 20, 50)]  # newest first
    assert slot_wait(ago[:2], 3, now) == 0.0
    assert slot_wait(ago, 3, now) == pytest.approx(10.0)
    assert slot_wait(ago, 2, now) == pytest.approx(40.0)
    assert slot_wait([now - timedelta(seconds=61)] * 3, 3, now) == 0.0


# --------------------------------------------------------------------------- a held event loop

_HELD_WORKER = """
import asyncio, sys, time
from forge_ledger.app import studies
from forge_ledger.testing import ScriptedProvider, bundled_script

studies.STOP_SLACK_SECS = float(sys.argv[2])

class Held(ScriptedProvider):
    async def complete(self, call, on_delta=None):
        print("held", flush=True)
        time.sleep(3600)  # holds the event loop: nothing of the worker's can run

provider = Held.from_script(bundled_script("demo"))
asyncio.run(studies.run_worker(sys.argv[1], provider=provider, grace_secs=0, signals=True))
"""


def _held_worker(tmp_path: Path, pg_url: str, slack: float) -> subprocess.Popen[str]:
    """A worker whose first model call holds its event loop, once it is in that call."""
    _queue(_plan(tmp_path, "http://127.0.0.1:9/v1"), pg_url)
    script = tmp_path / "held_worker.py"
    script.write_text(_HELD_WORKER, encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, str(script), pg_url, str(slack)],
        env=_env(pg_url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "held\n", proc.stderr.read() if proc.stderr else ""
    return proc


def _interrupted(proc: subprocess.Popen[str], *, times: int) -> str:
    """SIGINT ``times`` times, half a second apart; what the worker said once it left."""
    try:
        for n in range(times):
            if n:
                time.sleep(0.5)
            proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()  # a worker that did not leave would otherwise outlive the test
    return err


@pytest.mark.slow
def test_a_worker_whose_loop_is_held_leaves_once_its_stop_is_overdue(
    tmp_path: Path, pg_url: str
) -> None:
    proc = _held_worker(tmp_path, pg_url, slack=2)
    err = _interrupted(proc, times=1)
    assert proc.returncode == 130, err[-1500:]
    lines = err.strip().splitlines()
    assert lines == ["the worker did not stop within 2 s of the signal: leaving now", "interrupted"]


@pytest.mark.slow
def test_a_second_ctrl_c_leaves_a_worker_whose_loop_is_held_at_once(
    tmp_path: Path, pg_url: str
) -> None:
    proc = _held_worker(tmp_path, pg_url, slack=3600)
    err = _interrupted(proc, times=2)
    assert proc.returncode == 130, err[-1500:]
    assert err.strip().splitlines() == ["interrupted"]
