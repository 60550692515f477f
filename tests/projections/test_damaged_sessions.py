"""A session whose events do not read is skipped whole by the read model's catch-up.

A copy of a golden store has one session damaged in one of three ways: a row that does not
decode, a row deleted (a gap in its positions), a row whose link to the previous event's hash
differs. The catch-up brings every other session up to date and leaves the damaged one's rows
as they were, names it, and tries it again each time: once the store is repaired the read
model equals a rebuild from zero. Meanwhile no reader takes the read model for current.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from forge_ledger.app.autosave import keep_views_current
from forge_ledger.ledger import Ledger
from forge_ledger.ledger.compression import pack, unpack
from forge_ledger.ledger.outputs import store_outputs
from forge_ledger.projections import ProjectionRunner, open_views
from forge_ledger.projections.current import SKIPPED, current_summaries, store_head
from support.cli import CONSOLE_SCRIPT, run_cli
from support.projections import VIEW_TABLES
from support.stories import random_sessions

FIXTURE = Path(__file__).parents[1] / "fixtures" / "store-v2.sqlite"
DAMAGED = UUID("c5fae2a9cb1d4111b3bf8c1db4ca57c8")
"""The store's first session (its events are the log's first 63)."""
OTHER = UUID("336389ba06a74a60853a06d089395408")
FORK = "e886069d-6722-4d54-a7d8-b8d4f14bf230"
"""A fork of the damaged session (it reads: its first event holds what it inherits)."""
_WHERE = "WHERE originator_id = ? AND originator_version = ?"


def _row(store: Path, sid: UUID, position: int) -> tuple[Any, ...]:
    with sqlite3.connect(store) as con:
        found = con.execute(f"SELECT * FROM stored_events {_WHERE}", [sid.hex, position])
        row = tuple(found.fetchone())
    con.close()
    return row


def _set_state(store: Path, sid: UUID, position: int, state: bytes) -> None:
    with sqlite3.connect(store) as con:
        con.execute(f"UPDATE stored_events SET state = ? {_WHERE}", [state, sid.hex, position])
    con.close()


def _undecodable(store: Path, sid: UUID) -> tuple[int, str]:
    _set_state(store, sid, 22, b"\x78\x9c not a compressed event")
    return 22, "it cannot be read ("


def _delete_row(store: Path, sid: UUID, position: int) -> None:
    with sqlite3.connect(store) as con:
        con.execute(f"DELETE FROM stored_events {_WHERE}", [sid.hex, position])
    con.close()


def _deleted(store: Path, sid: UUID) -> tuple[int, str]:
    _delete_row(store, sid, 24)
    return 24, "event 24 is missing (the next stored event is at position 25)"


def _relinked(store: Path, sid: UUID) -> tuple[int, str]:
    """Event 23 reads, but its link is not the hash of event 22."""
    state = json.loads(unpack(bytes(_row(store, sid, 23)[3])))
    state["prev_hash"] = "0" * 64
    _set_state(store, sid, 23, pack(json.dumps(state).encode()))
    return 23, "it does not follow event 22"


def _first_deleted(store: Path, sid: UUID) -> tuple[int, str]:
    _delete_row(store, sid, 1)
    return 1, "event 1 is missing"


DAMAGE: dict[str, Callable[[Path, UUID], tuple[int, str]]] = {
    "undecodable": _undecodable,
    "deleted": _deleted,
    "relinked": _relinked,
}


def _damage(store: Path, kind: str, sid: UUID = DAMAGED) -> tuple[int, str, Callable[[], None]]:
    """Damage ``sid`` in the store; returns the first damaged position, the start of its
    problem, and what puts the store back as it was (the repair)."""
    with sqlite3.connect(store) as con:
        rows = con.execute(  # with their place in the log, their rowid
            "SELECT rowid, * FROM stored_events WHERE originator_id = ?", [sid.hex]
        ).fetchall()
    con.close()
    position, problem = DAMAGE[kind](store, sid)

    def repair() -> None:
        with sqlite3.connect(store) as con:
            con.execute("DELETE FROM stored_events WHERE originator_id = ?", [sid.hex])
            marks = ", ".join("?" for _ in rows[0])
            con.executemany(f"INSERT INTO stored_events (rowid, originator_id, "
                            f"originator_version, topic, state) VALUES ({marks})", rows)
        con.close()

    return position, problem, repair


def _dump(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every view table's rows in their stored order (a listing reads the sessions in it)."""
    con = sqlite3.connect(path)
    try:
        return {t: con.execute(f'SELECT * FROM "{t}" ORDER BY rowid').fetchall()
                for t in VIEW_TABLES}
    finally:
        con.close()


def _its(row: tuple[Any, ...], sid: UUID) -> bool:
    """Whether a view row is one of ``sid``'s (a fork's rows name its parent too)."""
    return str(sid) in repr(row) and FORK not in repr(row)


def _of(dump: dict[str, list[tuple[Any, ...]]], sid: UUID) -> dict[str, list[tuple[Any, ...]]]:
    return {t: [r for r in rows if _its(r, sid)] for t, rows in dump.items()}


def _without(dump: dict[str, list[tuple[Any, ...]]], sid: UUID) -> dict[str, list[Any]]:
    return {t: [r for r in rows if not _its(r, sid)] for t, rows in dump.items()}


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "s.sqlite"
    shutil.copy(FIXTURE, path)
    return path


def _fresh(store: Path, tmp_path: Path, name: str) -> dict[str, list[tuple[Any, ...]]]:
    """The read model a rebuild from zero in batches of 10 events gives for the store as it
    is now (where a batch ends decides the order of the rows written once per batch)."""
    path = tmp_path / f"{name}.sqlite"
    with Ledger(str(store)) as ledger:
        db = open_views(path)
        ProjectionRunner(ledger, db).catch_up(batch_size=10)
        db.close()
    return _dump(path)


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_a_damaged_session_is_skipped_whole_and_rebuilt_once_repaired(
    store: Path, tmp_path: Path, kind: str
) -> None:
    intact = _fresh(store, tmp_path, "intact")
    views = tmp_path / "v.sqlite"
    with Ledger(str(store)) as ledger:
        db = open_views(views)
        runner = ProjectionRunner(ledger, db)
        assert runner.catch_up(batch_size=10, max_batches=2) == 20  # events 1-20 of it
        kept = _of(_dump(views), DAMAGED)
        position, problem, repair = _damage(store, kind)
        head = ledger.max_notification_id()
        assert runner.catch_up(batch_size=10) == head - 20 - (kind == "deleted")
        assert [(e.session_id, e.position) for e in runner.damaged] == [(str(DAMAGED), position)]
        assert runner.damaged[0].problem.startswith(problem)
        after = _dump(views)
        assert _of(after, DAMAGED) == kept  # event 21, before the damage, not applied either
        assert _without(after, DAMAGED) == _without(intact, DAMAGED)
        assert {s.position for s in runner.status()} == {head}
        # no reader takes the read model for current: it would list the session as intact
        assert current_summaries(views, *store_head(ledger)) is None
        assert runner.catch_up() == 0  # tried again, still damaged
        assert [e.session_id for e in runner.damaged] == [str(DAMAGED)]
        assert _dump(views) == after
        repair()
        assert runner.catch_up(batch_size=10) == head
        assert runner.damaged == []
        assert _dump(views) == intact  # as a rebuild from zero, row order included
        assert current_summaries(views, *store_head(ledger)) is not None
        assert runner.catch_up() == 0
        marks = db.execute("SELECT name FROM _projections WHERE name LIKE ?", [f"{SKIPPED}%"])
        assert marks.fetchall() == []
        db.close()


@pytest.mark.parametrize("kind", [*DAMAGE, "first deleted"])
def test_a_session_damaged_before_the_first_catch_up_has_no_rows(
    store: Path, tmp_path: Path, kind: str
) -> None:
    position, problem = DAMAGE.get(kind, _first_deleted)(store, DAMAGED)
    with Ledger(str(store)) as ledger:
        db = open_views(tmp_path / "v.sqlite")
        runner = ProjectionRunner(ledger, db)
        runner.catch_up()
        assert [e.position for e in runner.damaged] == [position]
        assert runner.damaged[0].problem.startswith(problem)
        ids = [r[0] for r in db.execute("SELECT id FROM sessions ORDER BY rowid").fetchall()]
        assert str(DAMAGED) not in ids
        assert str(OTHER) in ids
        db.close()


def test_projections_update_goes_on_past_damaged_sessions_and_says_so(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _damage(store, "deleted")
    _damage(store, "undecodable", OTHER)
    with Ledger(str(store)) as ledger:
        head = ledger.max_notification_id()
        views = store_outputs(ledger.location).views
    code, out, err = run_cli(capsys, "projections", "update", "--store", str(store), "--json")
    assert code == 1  # as for a damaged session
    got = json.loads(out)
    assert got["events"] == head - 1  # every row read but the deleted one
    # in the order they were met: a row that does not decode when the batch is read
    assert [d["session_id"] for d in got["damaged"]] == [str(OTHER), str(DAMAGED)]
    assert got["damaged"][1]["damaged"] == (
        "at event 24: event 24 is missing (the next stored event is at position 25)"
    )
    problem = got["damaged"][0]["damaged"]
    assert problem.startswith("at event 22: it cannot be read (")
    short = str(OTHER)[:8]
    assert err.splitlines() == [
        f"error: session {short} is damaged {problem} (1 more session(s) damaged); restore the "
        f"store from a backup; 'forge-ledger verify {short}' checks it"
    ]
    with sqlite3.connect(views) as con:
        ids = {r[0] for r in con.execute("SELECT id FROM sessions")}
    con.close()
    assert ids == {FORK, "ee721eed-2db9-489e-9f49-e933d647bad0"}
    # current for everything else, and saying what it stands without
    code, out, _ = run_cli(capsys, "projections", "status", "--store", str(store), "--json")
    skipped = {r["name"]: r["skipped"] for r in json.loads(out)["projections"]}
    assert (code, skipped["read_model"], skipped["audits"]) == (0, 2, 0)
    code, out, _ = run_cli(capsys, "projections", "status", "--store", str(store))
    assert "read_model\t6\t" in out
    assert "\tcurrent, 2 skipped as damaged\n" in out
    code, out, err = run_cli(capsys, "projections", "rebuild", "--store", str(store))
    assert (code, err.count("error: "), err.count("1 more session(s) damaged")) == (1, 1, 1)
    # the listing reads the ledger, which marks both
    code, out, _ = run_cli(capsys, "sessions", "--store", str(store), "--json")
    listed = json.loads(out)
    rows = listed if isinstance(listed, list) else listed["sessions"]
    assert {r["id"] for r in rows if "damaged" in r} == {str(DAMAGED), str(OTHER)}


def test_keeping_the_views_current_after_a_run_only_warns(store: Path) -> None:
    _damage(store, "relinked")
    warned: list[str] = []
    with Ledger(str(store)) as ledger:
        keep_views_current(ledger, warned.append)
        views = store_outputs(ledger.location).views
        head = ledger.max_notification_id()
    assert warned == [
        f"read model: session {str(DAMAGED)[:8]} is damaged at event 23: it does not follow "
        "event 22 (its link to the previous event differs: reordered, duplicated or altered); "
        f"restore the store from a backup; 'forge-ledger verify {str(DAMAGED)[:8]}' checks it"
    ]
    with sqlite3.connect(views) as con:
        assert con.execute(
            "SELECT position FROM _projections WHERE name = 'read_model'"
        ).fetchone() == (head,)
    con.close()


def test_a_follower_says_a_damaged_session_once_and_goes_on(store: Path) -> None:
    _damage(store, "undecodable")
    proc = subprocess.Popen(
        [CONSOLE_SCRIPT, "projections", "update", "--follow",
         "--interval", "0.05", "--store", str(store)],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )
    try:
        lines: list[str] = []
        assert proc.stderr is not None
        while not any(line.startswith("following") for line in lines):
            line = proc.stderr.readline()
            assert line, f"the follower ended: {lines}"
            lines.append(line)
        time.sleep(1)  # some twenty more polls, each trying the session again
        assert proc.poll() is None
    finally:
        proc.terminate()
        _, rest = proc.communicate(timeout=30)
    lines.extend(rest.splitlines())
    damaged = [line for line in lines if "is damaged at event 22" in line]
    assert len(damaged) == 1
    assert damaged[0].startswith("error: session c5fae2a9")


def _on_store(ledger: Ledger, sql: str, args: list[Any]) -> list[tuple[Any, ...]]:
    """``sql`` (``{table}`` for the events table, ``?`` for parameters) on the ledger's own
    store, SQLite or PostgreSQL, committed; returns the rows it gives."""
    recorder: Any = ledger.app.recorder
    table = recorder.events_table_name
    if ledger.location.kind == "sqlite":
        with sqlite3.connect(ledger.location.display) as con:
            rows = con.execute(sql.format(table=table), args).fetchall()
        con.close()
        return [tuple(r) for r in rows]
    query = sql.replace("?", "%s").format(table=f'"{ledger.location.schema}"."{table}"')
    with recorder.datastore.transaction(commit=True) as curs:
        curs.execute(query, args)
        return [tuple(r.values()) for r in curs.fetchall()] if curs.description else []


@pytest.mark.parametrize("kind", ["undecodable", "deleted"])
def test_the_skip_and_the_repair_on_either_store(
    store_url: str, tmp_path: Path, kind: str
) -> None:
    with Ledger(store_url) as ledger:
        damaged, *_ = random_sessions(ledger, seed=7, sessions=3)
        sid = UUID(damaged)
        intact = tmp_path / "intact.sqlite"
        ProjectionRunner(ledger, open_views(intact)).catch_up(batch_size=10)
        key = sid.hex if ledger.location.kind == "sqlite" else sid
        where = "WHERE originator_id = ? AND originator_version = 5"
        (state,) = _on_store(ledger, f"SELECT state FROM {{table}} {where}", [key])[0]
        if kind == "undecodable":
            _on_store(ledger, f"UPDATE {{table}} SET state = ? {where}", [b"not json", key])
        else:
            _on_store(ledger, f"DELETE FROM {{table}} {where}", [key])
        views = tmp_path / "v.sqlite"
        runner = ProjectionRunner(ledger, open_views(views))
        runner.catch_up(batch_size=10)
        assert [(e.session_id, e.position) for e in runner.damaged] == [(damaged, 5)]
        assert _without(_dump(views), sid) == _without(_dump(intact), sid)
        assert current_summaries(views, *store_head(ledger)) is None
        if kind == "undecodable":
            _on_store(ledger, f"UPDATE {{table}} SET state = ? {where}", [state, key])
        else:  # the session cut to its intact events: it reads again, shorter
            _on_store(ledger, "DELETE FROM {table} WHERE originator_id = ? AND "
                      "originator_version > 4", [key])
        runner.catch_up(batch_size=10)
        assert runner.damaged == []
        fresh = tmp_path / "fresh.sqlite"
        ProjectionRunner(ledger, open_views(fresh)).catch_up(batch_size=10)
        assert _dump(views) == _dump(fresh)
        assert kind == "deleted" or _dump(views) == _dump(intact)
