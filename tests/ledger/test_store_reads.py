"""Reads are reads: read-only commands create nothing, read a store they cannot write, report
PostgreSQL connection problems with their cause, and say when a printed session's hash chain
does not verify. All through the real CLI in subprocesses, on a real SQLite file and the real
PostgreSQL.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from forge_ledger.clock import FixedStepClock
from forge_ledger.errors import StoreError
from forge_ledger.ledger import Ledger
from support.cli import run_console
from support.hostile_inputs import fingerprint, one_error_line
from support.postgres import PG_BASE
from support.store import raw_connection
from support.stories import BuiltSession, priced_session

READ_COMMANDS = [
    ["sessions"], ["show", "abcd"], ["log", "abcd"], ["verify"], ["trail", "abcd"],
    ["audit", "abcd"], ["export", "abcd"],
]


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A folder an unprivileged user can enter (pytest's own tmp tree is private to root)."""
    d = Path(tempfile.mkdtemp(prefix="fl-reads-"))
    d.chmod(0o755)
    yield d
    for p in [d, *d.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    shutil.rmtree(d)


def _schema_exists(schema: str) -> bool:
    with psycopg.connect(PG_BASE, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (schema,),
        ).fetchone()
    return bool(row and row[0])


# --------------------------------------------------------------------------- create nothing


@pytest.mark.parametrize("command", READ_COMMANDS, ids=lambda c: c[0])
def test_read_commands_create_no_sqlite_file(command: list[str], tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "ledger.sqlite"
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    before = fingerprint(empty)
    for target, expected in ((missing, "no ledger at"), (empty, "empty (0 bytes)")):
        result = run_console(*command, "--store", str(target), cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        assert expected in one_error_line(result.stderr)
    assert not missing.parent.exists()
    assert fingerprint(empty) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.sqlite"]


def test_an_empty_sqlite_database_is_not_made_a_store(tmp_path: Path) -> None:
    db = tmp_path / "blank.sqlite"
    sqlite3.connect(db).execute("PRAGMA user_version = 7").connection.commit()
    before = fingerprint(db)
    with pytest.raises(StoreError, match="empty SQLite database"):
        Ledger(str(db), create=False)
    assert fingerprint(db) == before


@pytest.mark.postgres
@pytest.mark.slow
def test_read_commands_create_no_postgres_schema(tmp_path: Path) -> None:
    schema = f"fl_test_{uuid.uuid4().hex[:12]}"
    url = f"{PG_BASE}?schema={schema}"
    for command in READ_COMMANDS:
        result = run_console(*command, "--store", url, cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        assert "no ledger at" in one_error_line(result.stderr)
    assert not _schema_exists(schema)


@pytest.mark.postgres
def test_an_existing_postgres_store_is_opened_without_creating(pg_url: str) -> None:
    with Ledger(pg_url) as ledger:
        priced_session(ledger, iterations=1, participants=2)
    schema = pg_url.rsplit("schema=", 1)[1]
    with psycopg.connect(PG_BASE, autocommit=True) as conn:
        conn.execute(f'REVOKE CREATE ON SCHEMA "{schema}" FROM PUBLIC')
        oids = conn.execute(
            "SELECT oid FROM pg_class WHERE relnamespace = %s::regnamespace ORDER BY oid",
            (schema,),
        ).fetchall()
    with Ledger(pg_url, create=False) as ledger:
        assert len(ledger.session_ids()) == 1
    with psycopg.connect(PG_BASE, autocommit=True) as conn:
        again = conn.execute(
            "SELECT oid FROM pg_class WHERE relnamespace = %s::regnamespace ORDER BY oid",
            (schema,),
        ).fetchall()
    assert again == oids


# --------------------------------------------------------------------------- read-only stores


def _store(path: Path) -> BuiltSession:
    with Ledger(str(path)) as ledger:
        return priced_session(ledger, iterations=2, participants=3, clock=FixedStepClock())


@pytest.mark.slow
def test_a_store_in_a_read_only_folder_is_readable(open_dir: Path) -> None:
    folder = open_dir / "archive"
    folder.mkdir()
    path = folder / "ledger.sqlite"
    built = _store(path)
    path.chmod(0o444)
    folder.chmod(0o555)
    before = fingerprint(path)
    for command in (["sessions", "--json"], ["show", built.prefix], ["log", built.prefix],
                    ["verify"], ["trail", built.prefix], ["audit", built.prefix]):
        result = run_console(*command, "--store", str(path), cwd=open_dir, unprivileged=True)
        assert result.returncode == 0, (command, result.stderr)
        assert result.stdout.strip()
    assert str(built.id) in run_console(
        "sessions", "--json", "--store", str(path), cwd=open_dir, unprivileged=True,
    ).stdout
    assert fingerprint(path) == before
    assert sorted(p.name for p in folder.iterdir()) == ["ledger.sqlite"]
    # a command that writes is refused in one line, before anything is written
    result = run_console("seal", built.prefix, "--store", str(path), cwd=open_dir,
                         unprivileged=True)
    assert result.returncode == 2
    assert "read-only" in one_error_line(result.stderr)
    assert fingerprint(path) == before


# --------------------------------------------------------------------------- PostgreSQL causes


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("url", "cause"),
    [
        ("postgresql://postgres@127.0.0.1:5432/fl_no_such_database", 'database "fl_no_such_'),
        ("postgresql://fl_no_such_role@127.0.0.1:5432/test", 'role "fl_no_such_role"'),
        ("postgresql://postgres@127.0.0.1:1/test", "Connection refused"),
    ],
)
def test_postgres_connection_problems_name_their_cause(
    url: str, cause: str, tmp_path: Path,
) -> None:
    with pytest.raises(StoreError) as info:
        Ledger(url)
    line = info.value.one_line()
    assert cause in line
    assert "couldn't get a connection" not in line
    result = run_console("sessions", "--store", url, cwd=tmp_path)
    assert result.returncode == 2
    assert cause in one_error_line(result.stderr)


# --------------------------------------------------------------------------- broken chains


def _tamper_vote(path: Path, built: BuiltSession, field: str = "vote.score",
                 value: object = 100) -> int:
    with Ledger(str(path), create=False) as ledger:
        position = next(e.position for e in ledger.events(built.id) if e.type == "VoteRecorded")
    con = raw_connection(path)
    with con:
        cur = con.execute(
            "UPDATE stored_events SET state = CAST(json_set(CAST(unpack(state) AS TEXT), "
            f"'$.data.{field}', ?) AS BLOB) "
            "WHERE originator_id = ? AND originator_version = ?",
            (value, built.id.hex, position),
        )
        assert cur.rowcount == 1
    con.close()
    return position


@pytest.mark.parametrize(
    "command",
    [["show"], ["show", "--json"], ["log"], ["trail"], ["dissent"], ["audit"], ["export"],
     ["diff", "SELF"]],
    ids=lambda c: "-".join(c),
)
@pytest.mark.slow
def test_printing_a_session_whose_chain_does_not_verify_says_so(
    command: list[str], tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.sqlite"
    built = _store(path)
    sound = run_console(command[0], built.prefix, *[built.prefix if a == "SELF" else a
                                                for a in command[1:]],
                    "--store", str(path), cwd=tmp_path)
    assert sound.returncode == 0, sound.stderr
    position = _tamper_vote(path, built)
    result = run_console(command[0], built.prefix, *[built.prefix if a == "SELF" else a
                                                 for a in command[1:]],
                     "--store", str(path), cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout.strip(), "the session is still printed"
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("error: ")
    assert "Traceback" not in result.stderr
    assert f"session {built.id} does not verify: event {position}" in line
    assert "forge-ledger verify" in line


def test_an_altered_event_that_no_longer_loads_ends_in_the_chain_line(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    built = _store(path)
    position = _tamper_vote(path, built, field="forged", value="yes")
    result = run_console("show", built.prefix, "--store", str(path), cwd=tmp_path)
    assert result.returncode == 1
    line = one_error_line(result.stderr)
    assert f"does not verify: event {position}" in line


def test_a_store_made_without_snapshots_is_read_without_creating_them(store_url: str) -> None:
    with Ledger(store_url, snapshot_interval=0) as ledger:
        built = priced_session(ledger, iterations=1, participants=2)
    with Ledger(store_url, create=False, snapshot_interval=2) as ledger:
        assert ledger.app.snapshots is None
        assert ledger.snapshot_interval == 0
        assert ledger.get(built.id).version == built.iteration_end[1]
    if store_url.startswith("postgresql://"):
        schema = store_url.rsplit("schema=", 1)[1]
        with psycopg.connect(PG_BASE, autocommit=True) as conn:
            row = conn.execute(
                "SELECT to_regclass(%s)", (f"{schema}.forgeledger_snapshots",),
            ).fetchone()
        assert row is not None
        assert row[0] is None
    else:
        tables = {r[0] for r in sqlite3.connect(store_url).execute(
            "SELECT name FROM sqlite_master WHERE type='table'")}
        assert "stored_snapshots" not in tables
        assert "stored_events" in tables
    with Ledger(store_url, snapshot_interval=2) as ledger:  # a writer may add them
        assert ledger.app.snapshots is not None
