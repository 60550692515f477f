"""Two writers in two OS processes race on one session: exactly one wins, nothing is lost.

Each worker process loads the session (both see version v), then waits for the parent's
``go`` on stdin so both append from the same version; the loser must get
``ConcurrencyConflictError`` with nothing of its change stored, and succeed after reloading.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from forge_ledger.domain.values import RoundKind
from forge_ledger.errors import ConcurrencyConflictError
from forge_ledger.ledger import Ledger, verify_session
from strategies import StepClock, new_session, run_round

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
    """
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
    clock = StepClock()
    with Ledger(store, snapshot_interval=0) as ledger:
        agg = new_session(2, clock=clock)
        run_round(agg, RoundKind.DRAFT, 1, clock)
        ledger.save(agg)
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
        assert report.ok and report.events == v + 2, report.as_json()
        state = ledger.state(agg.id)
        assert [h.author for h in state.human_inputs] == [winner["author"], loser["author"]]


def test_two_processes_race_on_sqlite(sqlite_url: str) -> None:
    _check_race(sqlite_url)


@pytest.mark.postgres
def test_two_processes_race_on_postgres(pg_url: str) -> None:
    _check_race(pg_url)


def test_conflict_in_one_process_stores_nothing(store_url: str) -> None:
    """Same rule inside one process: a stale aggregate cannot overwrite a newer head."""
    clock = StepClock()
    with Ledger(store_url, snapshot_interval=0) as ledger:
        agg = new_session(2, clock=clock)
        ledger.save(agg)
        a, b = ledger.get(agg.id), ledger.get(agg.id)
        a.pause(reason="a", at=clock())
        b.ask(["b?"], at=clock())
        ledger.save(a)
        with pytest.raises(ConcurrencyConflictError) as info:
            ledger.save(b)
        assert info.value.hint == "reload the session and retry the command"
        assert [e.type for e in ledger.events(agg.id)][-1] == "SessionPaused"
        assert ledger.head_version(agg.id) == agg.version + 1
        assert verify_session(ledger, agg.id).ok
