"""Two writers in two OS processes race on one session: exactly one wins, nothing is lost.

Each worker process loads the session (both see version v), then waits for the parent's
``go`` on stdin so both append from the same version; the loser must get
``ConcurrencyConflictError`` with nothing of its change stored, and succeed after reloading.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

from forge_ledger.clock import FixedStepClock
from forge_ledger.domain.values import RoundKind
from forge_ledger.errors import ConcurrencyConflictError
from forge_ledger.ledger import Ledger, verify_session
from forge_ledger.testing import SessionBuilder
from support.postgres import PG_BASE, drop_schema

WORKER = textwrap.dedent(
    """
    import json, sys
    from datetime import UTC, datetime
    from forge_ledger.errors import ConcurrencyConflictError
    from forge_ledger.ledger import Ledger

    store, sid, author = sys.argv[1], sys.argv[2], sys.argv[3]
    at = datetime(2026, 2, 1, tzinfo=UTC)
    out = {"author": author}
    with Ledger(store, create=False, snapshot_interval=0) as ledger:
        agg = ledger.get(sid)
        out["loaded"] = agg.version
        print(json.dumps({"loaded": agg.version}), flush=True)
        assert sys.stdin.readline().strip() == "go"
        agg.human_input(author=author, text="note from " + author, at=at, kind="note")
        try:
            ledger.save(agg)
            out["result"] = "saved"
        except ConcurrencyConflictError as e:
            out["result"] = "conflict"
            out["message"] = e.one_line()
            again = ledger.get(sid)
            out["reloaded"] = again.version
            again.human_input(author=author, text="retry from " + author, at=at, kind="note")
            ledger.save(again)
            out["retry"] = "saved"
        out["final"] = ledger.head_version(agg.id)
    print(json.dumps(out), flush=True)
    """,
)


def _race(store: str, sid: str) -> list[dict[str, Any]]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, store, sid, author],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for author in ("alice", "bob")
    ]
    try:
        loaded = []
        for p in procs:
            assert p.stdout is not None
            line = p.stdout.readline()
            if not line:
                raise AssertionError(p.stderr.read() if p.stderr else "worker died")
            loaded.append(json.loads(line)["loaded"])
        assert loaded[0] == loaded[1], "both writers must start from the same version"
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        results = []
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
            results.append(json.loads(out.strip().splitlines()[-1]))
        return results
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


def _check_race(store: str) -> None:
    with Ledger(store, snapshot_interval=0) as ledger:
        agg = (SessionBuilder(store=ledger).start("Race", participants=["p0", "p1"])
               .round(RoundKind.DRAFT, iteration=1, answers={"p0": "mine", "p1": "theirs"},
                      close=True)
               .save().aggregate)
        v = agg.version
    results = _race(store, str(agg.id))
    outcomes = sorted(r["result"] for r in results)
    assert outcomes == ["conflict", "saved"], results
    winner = next(r for r in results if r["result"] == "saved")
    loser = next(r for r in results if r["result"] == "conflict")
    assert "another writer appended" in loser["message"]
    assert loser["reloaded"] == v + 1
    assert loser["retry"] == "saved"
    with Ledger(store, create=False, snapshot_interval=0) as ledger:
        events = list(ledger.events(agg.id))
        assert [e.position for e in events] == list(range(1, v + 3))
        tail = [(e.data["author"], e.data["text"]) for e in events[v:]]
        assert tail == [
            (winner["author"], f"note from {winner['author']}"),
            (loser["author"], f"retry from {loser['author']}"),
        ]
        # the loser's first attempt left no trace
        assert all(e.data.get("text") != f"note from {loser['author']}" for e in events)
        report = verify_session(ledger, agg.id)
        assert report.ok, report.as_json()
        assert report.events == v + 2, report.as_json()
        state = ledger.state(agg.id)
        assert [h.author for h in state.human_inputs] == [winner["author"], loser["author"]]


def test_two_processes_race_on_sqlite(sqlite_url: str) -> None:
    _check_race(sqlite_url)


@pytest.mark.postgres
@pytest.mark.slow
def test_two_processes_race_on_postgres(pg_url: str) -> None:
    _check_race(pg_url)


def test_conflict_in_one_process_stores_nothing(store_url: str) -> None:
    """Same rule inside one process: a stale aggregate cannot overwrite a newer head."""
    clock = FixedStepClock()
    with Ledger(store_url, snapshot_interval=0) as ledger:
        agg = SessionBuilder(clock=clock, store=ledger).start(
            "Race", participants=["p0", "p1"]).save().aggregate
        a, b = ledger.get(agg.id), ledger.get(agg.id)
        a.pause(reason="a", at=clock.now())
        b.ask(["b?"], at=clock.now())
        ledger.save(a)
        with pytest.raises(ConcurrencyConflictError) as info:
            ledger.save(b)
        assert info.value.hint == "reload the session and retry the command"
        assert [e.type for e in ledger.events(agg.id)][-1] == "SessionPaused"
        assert ledger.head_version(agg.id) == agg.version + 1
        assert verify_session(ledger, agg.id).ok


# --------------------------------------------------------------------------- concurrent opens

OPENER = textwrap.dedent(
    """
    import sys
    from forge_ledger.clock import UuidIds
    from forge_ledger.ledger import Ledger
    from forge_ledger.testing import SessionBuilder

    store = sys.argv[1]
    print("ready", flush=True)
    assert sys.stdin.readline().strip() == "go"
    with Ledger(store) as ledger:
        b = SessionBuilder(ids=UuidIds(), store=ledger).start("Opened", participants=["p0", "p1"])
        b.save()
        print(b.id, ledger.head_version(b.id), flush=True)
    """,
)


def _open_together(store: str, n: int) -> list[tuple[int, str, str]]:
    """Start ``n`` processes, wait until each has imported everything, then release them at
    once so that their first open of the store lands at the same moment."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]), *sys.path])}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPENER, store],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(n)
    ]
    try:
        for p in procs:
            assert p.stdout is not None
            if p.stdout.readline().strip() != "ready":
                raise AssertionError(p.stderr.read() if p.stderr else "opener died")
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        outputs = [p.communicate(timeout=120) for p in procs]
        return [(p.returncode, out, err) for p, (out, err) in zip(procs, outputs, strict=True)]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


@pytest.mark.postgres
@pytest.mark.slow
def test_eight_processes_open_a_fresh_postgres_schema_together() -> None:
    """Any number of processes may open one new store URL at once: the schema and tables are
    created exactly once (under an advisory lock), nobody fails, and every write lands."""
    for repetition in range(10):
        schema = f"fl_test_open_{uuid.uuid4().hex[:10]}"
        url = f"{PG_BASE}?schema={schema}"
        try:
            results = _open_together(url, 8)
            failures = [err.strip().splitlines()[-1:] for rc, _, err in results if rc != 0]
            assert not failures, f"repetition {repetition}: {failures}"
            saved = {out.split()[0] for _, out, _ in results}
            with Ledger(url, create=False) as ledger:
                assert {str(s) for s in ledger.session_ids()} == saved
                assert len(saved) == 8
        finally:
            drop_schema(schema)
