"""The study tables of the read model: the rows ``study export`` gives, kept current.

The tables must hold exactly what ``study export`` writes (the same code computes both), follow
a study that goes on (cells run, a cell cut off and resumed), and be rebuilt from zero with the
same rows; ``study status`` reads them when they are current for the study.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from click.testing import CliRunner
from sqlite_utils import Database

from forge_ledger.app.studies import SESSIONS
from forge_ledger.app.study_reports import study_export
from forge_ledger.app.study_views import (
    SESSIONS_LOG,
    STUDY_LOG,
    UNREAD,
    StudyViews,
    study_status,
    update_study_views,
)
from forge_ledger.audit.metrics import ParticipantMetrics, SessionMetrics
from forge_ledger.cli import cli
from forge_ledger.domain import canonical_json
from forge_ledger.errors import StudyDamagedError
from forge_ledger.ledger import Ledger
from forge_ledger.ledger.outputs import store_outputs
from forge_ledger.projections import open_views
from forge_ledger.projections.migrations import STUDY_SCHEMA
from forge_ledger.study import (
    StudyRun,
    StudyStream,
    plan_from_document,
    plan_study,
    run_cell,
    run_study,
)
from forge_ledger.testing import ScriptedProvider, bundled_script
from support.cli import run_cli
from support.study_sessions import known_plan, record_known_study

_TABLES = ("studies", "study_cells", "study_sessions", "study_participants")


def _dump(db: Database) -> dict[str, list[tuple[Any, ...]]]:
    return {
        t: [tuple(r) for r in db.execute(f"SELECT * FROM {t} ORDER BY id").fetchall()]
        for t in _TABLES
    }


def _stored(value: Any) -> Any:
    """An exported JSON value as the read model keeps it (yes/no as 0/1, a list as JSON)."""
    if isinstance(value, bool):
        return int(value)
    return canonical_json(value) if isinstance(value, list) else value


def _assert_rows_are_the_export(store: Path | str, db: Database, study: str) -> int:
    """Each exported row is one row of the read model with the same values, and no more."""
    checked = 0
    for table, view, key in (
        ("sessions", "study_sessions", ("cell",)),
        ("participants", "study_participants", ("cell", "participant")),
    ):
        lines = study_export(str(store), study, table=table, fmt="jsonl").decode().splitlines()
        exported = [json.loads(line) for line in lines]
        rows = {tuple(r[k] for k in key): r for r in db.query(f"SELECT * FROM {view}")}
        assert len(rows) == len(exported)
        for record in exported:
            row = rows[tuple(record[k] for k in key)]
            assert {k: row[k] for k in record} == {k: _stored(v) for k, v in record.items()}
            checked += 1
    return checked


def test_the_tables_have_the_columns_of_the_export_in_its_order() -> None:
    for table, model in (
        ("study_sessions", SessionMetrics),
        ("study_participants", ParticipantMetrics),
    ):
        assert list(STUDY_SCHEMA[table]["columns"])[2:] == list(model.model_fields)


def test_the_study_tables_hold_every_cell_and_the_rows_study_export_gives(tmp_path: Path) -> None:
    plan = known_plan(tmp_path, topics=2, repeats=2)
    store = tmp_path / "s.sqlite"
    with Ledger(str(store)) as ledger:
        study_id = record_known_study(ledger, plan, strict_converges=1)
        db = open_views(tmp_path / "v.sqlite")
        assert update_study_views(ledger, db) == 1
        state = StudyStream(ledger).state(study_id)
    assert _assert_rows_are_the_export(store, db, "known") == 20 + 20 * 3
    cells = {r["cell"]: r for r in db.query("SELECT * FROM study_cells")}
    assert list(cells) == list(state.cells)
    for cell in state.cells.values():
        row = cells[cell.spec.id]
        assert (row["status"], row["session_id"], row["arm"]) == (
            cell.status,
            cell.session_id,
            state.plan.arm(cell.spec),
        )
        parent = state.cells[cell.spec.parent].session_id if cell.spec.parent else None
        assert row["parent_id"] == parent
    (study,) = db.query("SELECT * FROM studies")
    assert (study["id"], study["status"], study["done"], study["events"]) == (
        str(study_id),
        "finished",
        20,
        state.version,
    )
    with Ledger(str(store), create=False) as ledger:
        assert update_study_views(ledger, db) == 0  # nothing new: no study read again


def _provider() -> ScriptedProvider:
    return ScriptedProvider.from_script(bundled_script("demo"))


def test_a_study_cut_off_and_resumed_shows_its_new_cells_as_a_rebuild_does(
    tmp_path: Path, store_url: str
) -> None:
    plan = known_plan(tmp_path, topics=1, repeats=2)
    store = store_url
    with Ledger(store) as ledger:
        db = open_views(tmp_path / "v.sqlite")
        study_id = plan_study(ledger, plan)
        update_study_views(ledger, db)
        assert {r["status"] for r in db.query("SELECT status FROM study_cells")} == {"pending"}
        run = StudyRun(ledger, study_id)
        asyncio.run(run_cell(run, "t1/trio/base/1", sessions=SESSIONS, provider=_provider()))
        run.claim("t1/trio/strict/1")  # claimed, then the process was killed before its session
        update_study_views(ledger, db)
        status = dict(db.execute("SELECT cell, status FROM study_cells").fetchall())
        assert status["t1/trio/base/1"] == "done"
        assert status["t1/trio/strict/1"] == "running"
        assert db.execute("SELECT count(*) FROM study_sessions").fetchone()[0] == 1
        assert _assert_rows_are_the_export(store, db, "known") == 1 + 3

        state = asyncio.run(
            run_study(ledger, study_id, sessions=SESSIONS, provider=_provider(), concurrency=2)
        )
        assert state.status == "finished"
        update_study_views(ledger, db)
        assert {r["status"] for r in db.query("SELECT status FROM study_cells")} == {"done"}
        assert db.execute("SELECT count(*) FROM study_sessions").fetchone()[0] == 10
        _assert_rows_are_the_export(store, db, "known")
        followed = _dump(db)
        positions = dict(db.execute("SELECT name, position FROM _projections").fetchall())
        assert positions[STUDY_LOG] == StudyStream(ledger).log_head()
        assert positions[SESSIONS_LOG] == ledger.max_notification_id()

        StudyViews(ledger, db).rebuild()
        assert _dump(db) == followed
        fresh = open_views(tmp_path / "fresh.sqlite")
        update_study_views(ledger, fresh)
        assert _dump(fresh) == followed


def test_study_status_reads_the_tables_when_they_are_current(tmp_path: Path) -> None:
    plan = known_plan(tmp_path, topics=1, repeats=1)
    store = tmp_path / "s.sqlite"
    with Ledger(str(store)) as ledger:
        study_id = record_known_study(ledger, plan)
        folded = study_status(ledger, "known")
        assert not folded.from_read_model
        views = store_outputs(ledger.location).views
        update_study_views(ledger, open_views(views))
        read = study_status(ledger, "known")
        assert read.from_read_model
        assert (read.summary, read.cells) == (folded.summary, folded.cells)
        assert not study_status(ledger, "known", at_event=2).from_read_model
    # what the command prints comes from the table: change a row and it shows
    with sqlite3.connect(views) as conn:
        conn.execute("UPDATE study_cells SET outcome = 'edited' WHERE cell = 't1/trio/base/1'")
    res = CliRunner().invoke(cli, ["study", "status", "known", "--store", str(store), "--json"])
    assert res.exit_code == 0, res.output
    shown = json.loads(res.output)
    assert set(shown) == {*folded.summary, "jobs", "cells"}
    assert [c["cell"] for c in shown["cells"]] == [c["cell"] for c in folded.cells]
    assert shown["cells"][0]["outcome"] == "edited"
    # a study event the tables have not seen: the command reads the study's events again
    with Ledger(str(store)) as ledger:
        from forge_ledger.study import events as sev

        StudyRun(ledger, study_id).record(lambda _s: sev.StudyStopped(reason="enough"))
    res = CliRunner().invoke(cli, ["study", "status", "known", "--store", str(store), "--json"])
    again = json.loads(res.output)
    assert again["cells"][0]["outcome"] == "converged"
    assert again["stopped"] == "enough"


def test_projections_update_and_rebuild_keep_the_study_tables(tmp_path: Path) -> None:
    plan = known_plan(tmp_path, topics=1, repeats=1)
    store = tmp_path / "s.sqlite"
    with Ledger(str(store)) as ledger:
        record_known_study(ledger, plan)
        views = store_outputs(ledger.location).views
    runner = CliRunner()
    res = runner.invoke(cli, ["projections", "update", "--store", str(store)])
    assert res.exit_code == 0, res.output
    db = Database(views)
    first = _dump(db)
    assert len(first["study_cells"]) == 5
    assert len(first["study_sessions"]) == 5
    res = runner.invoke(cli, ["projections", "status", "--store", str(store), "--json"])
    rows = {r["name"]: r for r in json.loads(res.output)["projections"]}
    assert rows[STUDY_LOG]["lag"] == rows[SESSIONS_LOG]["lag"] == 0
    res = runner.invoke(cli, ["projections", "rebuild", "--store", str(store)])
    assert res.exit_code == 0, res.output
    assert _dump(db) == first
    res = runner.invoke(cli, ["projections", "rebuild", SESSIONS_LOG, "--store", str(store)])
    assert res.exit_code == 0, res.output
    assert _dump(db) == first
    assert UUID(first["studies"][0][0])


def test_datasette_shows_every_cell_and_the_metrics_of_a_study(tmp_path: Path) -> None:
    from datasette.app import Datasette

    from forge_ledger.cli.browse import datasette_metadata

    plan = known_plan(tmp_path, topics=1, repeats=1)
    store = tmp_path / "s.sqlite"
    with Ledger(str(store)) as ledger:
        record_known_study(ledger, plan)
        views = store_outputs(ledger.location).views
        update_study_views(ledger, open_views(views))
    ds = Datasette([str(views)], metadata=datasette_metadata(views))
    base = f"/{views.name.removesuffix('.sqlite').replace('.', '~2E')}"

    async def get(path: str) -> Any:
        response = await ds.client.get(f"{base}/{path}")
        assert response.status_code == 200, response.text
        return response.json()

    cells = asyncio.run(get("study_cells.json?_shape=array"))  # ordered by id
    with Ledger(str(store), create=False) as ledger:
        state = StudyStream(ledger).state("known")
    assert [(c["cell"], c["status"]) for c in cells] == sorted(
        (c.spec.id, c.status) for c in state.cells.values()
    )
    joined = asyncio.run(get("study_cells_with_metrics.json?_shape=array&study=known"))
    exported = study_export(str(store), "known", table="sessions", fmt="jsonl").decode()
    rows = [json.loads(line) for line in exported.splitlines()]
    assert [(r["cell"], r["converged"], r["rounds"]) for r in joined] == [
        (r["cell"], int(r["converged"]), r["rounds"]) for r in rows
    ]


def test_a_finished_cell_whose_session_moves_is_read_again_with_its_forks(tmp_path: Path) -> None:
    from forge_ledger.app.records import seal

    plan = known_plan(tmp_path, topics=1, repeats=1)
    store = tmp_path / "s.sqlite"
    with Ledger(str(store)) as ledger:
        record_known_study(ledger, plan)
        db = open_views(tmp_path / "v.sqlite")
        update_study_views(ledger, db)
        parent = db.execute(
            "SELECT session_id FROM study_cells WHERE cell = 't1/trio/base/1'"
        ).fetchone()[0]
    # rows gone stale: the parent's, a fork's, and a cell whose session does not move
    db.execute("UPDATE study_sessions SET rounds = -1")
    db.conn.commit()
    seal(str(store), parent, key=b"k" * 32)  # one more event in the parent's session
    with Ledger(str(store), create=False) as ledger:
        assert update_study_views(ledger, db) == 1
    stale = dict(db.execute("SELECT cell, rounds FROM study_sessions").fetchall())
    assert stale.pop("t1/trio/strict/1") == -1  # not read again: nothing of it moved
    assert all(r > 0 for r in stale.values())
    assert set(stale) == {
        "t1/trio/base/1",
        "t1/trio/loo-ana/1",
        "t1/trio/loo-ben/1",
        "t1/trio/loo-dave/1",
    }


def _positions_in(views: Path) -> dict[str, int]:
    try:
        with sqlite3.connect(f"{views.as_uri()}?mode=ro", uri=True, timeout=1) as conn:
            return dict(conn.execute("SELECT name, position FROM _projections").fetchall())
    except sqlite3.Error:
        return {}  # not created yet, or its schema not yet applied


@pytest.mark.slow
def test_a_follower_applies_a_study_recorded_while_it_runs(tmp_path: Path) -> None:
    plan = known_plan(tmp_path, topics=1, repeats=1)
    store = tmp_path / "s.sqlite"
    Ledger(str(store)).close()
    follower = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "forge_ledger",
            "projections",
            "update",
            "--follow",
            "--interval",
            "0.1",
            "--store",
            str(store),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert follower.stderr is not None
        assert follower.stderr.readline().startswith("following ")
        with Ledger(str(store)) as ledger:
            record_known_study(ledger, plan)
            heads = {
                STUDY_LOG: StudyStream(ledger).log_head(),
                SESSIONS_LOG: ledger.max_notification_id(),
            }
        views = store.with_name("s.views.sqlite")
        deadline = time.monotonic() + 120
        while {k: _positions_in(views).get(k) for k in heads} != heads:
            assert follower.poll() is None, follower.communicate()
            assert time.monotonic() < deadline, "the follower never applied the study"
            time.sleep(0.1)
    finally:
        follower.send_signal(signal.SIGINT)
        follower.communicate(timeout=60)
    _assert_rows_are_the_export(store, Database(views), "known")


def _other_study(ledger: Ledger, folder: Path) -> UUID:
    """A second study, planned only (its panel file is the known study's)."""
    doc = {
        "name": "other",
        "topics": [{"title": "Another topic"}],
        "panels": {"trio": "trio.yaml"},
        "variants": {"base": {}},
        "repeats": 1,
    }
    return plan_study(ledger, plan_from_document(doc, base=folder))


_STUDY_ROW = "originator_id, originator_version, topic, state"


def _take_study_event(store: str, study_id: UUID, position: int) -> tuple[Any, ...]:
    """Delete one stored event of the study, as a damaged store may lose it; returns the row
    (to put it back: the damage repaired)."""
    where = "WHERE originator_id = {0} AND originator_version = {0}"
    if store.startswith("postgresql"):
        import psycopg

        base, _, schema = store.partition("?schema=")
        with psycopg.connect(base, autocommit=True) as pg:
            keys = (study_id, position)
            table = f'"{schema}".study_events'
            taken = pg.execute(
                f"SELECT {_STUDY_ROW} FROM {table} {where.format('%s')}", keys
            ).fetchone()
            assert pg.execute(f"DELETE FROM {table} {where.format('%s')}", keys).rowcount == 1
    else:
        with sqlite3.connect(store) as lite:
            keys = (study_id.hex, position)
            taken = lite.execute(
                f"SELECT {_STUDY_ROW} FROM study_events {where.format('?')}", keys
            ).fetchone()
            assert lite.execute(f"DELETE FROM study_events {where.format('?')}", keys).rowcount
        lite.close()
    assert taken is not None
    return tuple(taken)


def _put_back(store: str, row: tuple[Any, ...]) -> None:
    if store.startswith("postgresql"):
        import psycopg

        base, _, schema = store.partition("?schema=")
        with psycopg.connect(base, autocommit=True) as pg:
            pg.execute(
                f'INSERT INTO "{schema}".study_events ({_STUDY_ROW}) VALUES (%s, %s, %s, %s)', row
            )
    else:
        with sqlite3.connect(store) as lite:
            lite.execute(f"INSERT INTO study_events ({_STUDY_ROW}) VALUES (?, ?, ?, ?)", row)
        lite.close()


def _rows_of(dump: dict[str, list[tuple[Any, ...]]], study_id: UUID) -> dict[str, list[Any]]:
    return {t: [r for r in rows if str(r[0]).startswith(str(study_id))] for t, rows in dump.items()}


def test_a_damaged_study_is_skipped_whole_and_read_again_once_repaired(
    tmp_path: Path, store_url: str
) -> None:
    from forge_ledger.app.records import seal

    plan = known_plan(tmp_path, topics=1, repeats=1)
    with Ledger(store_url) as ledger:
        known = record_known_study(ledger, plan)
        db = open_views(tmp_path / "v.sqlite")
        views = StudyViews(ledger, db)
        assert views.catch_up() == 1
        before = _dump(db)
        taken = _take_study_event(store_url, known, 5)
        other = _other_study(ledger, tmp_path)
        (moving,) = db.execute(  # a session of the damaged study moves
            "SELECT session_id FROM study_cells WHERE cell = 't1/trio/base/1'"
        ).fetchone()
        seal(store_url, moving, key=b"k" * 32)
        assert views.catch_up() == 1  # the other study; the damaged one skipped
        assert [(e.study_id, e.position) for e in views.damaged] == [(str(known), 6)]
        after = _dump(db)
        assert _rows_of(after, known) == _rows_of(before, known)  # nothing of it written
        assert [r[0] for r in after["studies"]] == sorted([str(known), str(other)])
        assert views.catch_up() == 0  # tried again, still damaged
        assert [e.study_id for e in views.damaged] == [str(known)]
        _put_back(store_url, taken)
        assert views.catch_up() == 1
        assert views.damaged == []
        fresh = open_views(tmp_path / "fresh.sqlite")
        update_study_views(ledger, fresh)
        assert _dump(db) == _dump(fresh)
        assert views.catch_up() == 0  # nothing left to read again


def test_projections_update_goes_on_past_a_damaged_study_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = known_plan(tmp_path, topics=1, repeats=1)
    store = tmp_path / "s.sqlite"
    with Ledger(str(store)) as ledger:
        known = record_known_study(ledger, plan)
        other = _other_study(ledger, tmp_path)
        head = ledger.max_notification_id()
        sessions = len(ledger.session_ids())
        views = store_outputs(ledger.location).views
    _take_study_event(str(store), known, 5)
    code, out, err = run_cli(capsys, "projections", "update", "--store", str(store), "--json")
    assert code == 1  # as for a damaged session
    assert json.loads(out) == {
        "events": head,
        "damaged": [
            {
                "study_id": str(known),
                "damaged": "at event 6: it does not follow the study's previous event",
            }
        ],
    }
    assert err.splitlines() == [
        f"error: study {str(known)[:8]} is damaged at event 6: it does not follow the study's "
        f"previous event; restore the store from a backup; 'forge-ledger study verify "
        f"{str(known)[:8]}' checks it"
    ]
    db = Database(views)
    assert db.execute("SELECT count(*) FROM sessions").fetchone()[0] == sessions
    assert [r["id"] for r in db.query("SELECT id FROM studies")] == [str(other)]
    assert db.execute("SELECT count(*) FROM study_cells WHERE study_id = ?",
                      [str(known)]).fetchone()[0] == 0
    code, out, err = run_cli(capsys, "projections", "update", "--store", str(store))
    assert (code, err.count("error: "), err.count("is damaged at event 6")) == (1, 1, 1)
    with sqlite3.connect(store) as lite:  # the study removed from the store
        lite.execute("DELETE FROM study_events WHERE originator_id = ?", [known.hex])
    lite.close()
    code, out, err = run_cli(capsys, "projections", "update", "--store", str(store), "--json")
    assert code == 0, err
    assert json.loads(out) == {"events": 0}
    assert [r["id"] for r in db.query("SELECT id FROM studies")] == [str(other)]
    names = [r[0] for r in db.execute("SELECT name FROM _projections").fetchall()]
    assert not [n for n in names if n.startswith(UNREAD)]


def _without(key: str) -> Any:
    def alter(state: bytes) -> bytes:
        body = json.loads(state)
        del body[key]
        return json.dumps(body).encode()

    return alter


def _no_cell(state: bytes) -> bytes:
    body = json.loads(state)
    body["data"] = {}
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    ("alter", "problem"),
    [
        (lambda _: b"not json", "it cannot be read (JSONDecodeError)"),
        (_without("data"), "it cannot be read (KeyError)"),
        (_no_cell, "it cannot be read (ValidationError)"),
    ],
)
def test_a_study_event_that_does_not_read_is_the_study_s_damage(
    tmp_path: Path, alter: Any, problem: str
) -> None:
    plan = known_plan(tmp_path, topics=1, repeats=1)
    store = tmp_path / "s.sqlite"
    with Ledger(str(store)) as ledger:
        known = record_known_study(ledger, plan)
        other = _other_study(ledger, tmp_path)
        where = "WHERE originator_id = ? AND originator_version = 5"
        with sqlite3.connect(store) as lite:
            select = f"SELECT state FROM study_events {where}"
            (state,) = lite.execute(select, [known.hex]).fetchone()
            lite.execute(f"UPDATE study_events SET state = ? {where}", [alter(state), known.hex])
        lite.close()
        with pytest.raises(StudyDamagedError) as raised:
            StudyStream(ledger).state(known)
        assert raised.value.one_line().startswith(
            f"study {str(known)[:8]} is damaged at event 5: {problem}"
        )
        views = StudyViews(ledger, open_views(tmp_path / "v.sqlite"))
        assert views.catch_up() == 1
        assert [(e.study_id, e.position) for e in views.damaged] == [(str(known), 5)]
        assert StudyStream(ledger).state(other).version == 1
