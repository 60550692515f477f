"""The ledger contract (``support.ledger_contract``) on a SQLite file and on PostgreSQL, then
what only one backend or a bad store shows."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from forge_ledger.errors import StoreError
from forge_ledger.ledger import Ledger, resolve_store
from forge_ledger.ledger.eventsourcing_app import snapshot_due
from support.ledger_contract import LedgerContract, grown_session
from support.store import raw_connection


class TestLedgerOnSQLite(LedgerContract):
    @pytest.fixture
    def store_url(self, sqlite_url: str) -> str:
        return sqlite_url


@pytest.mark.postgres
class TestLedgerOnPostgreSQL(LedgerContract):
    @pytest.fixture
    def store_url(self, pg_url: str) -> str:
        return pg_url


def test_a_snapshot_is_due_at_every_multiple_of_the_interval() -> None:
    """Snapshots share the blocks of state they have in common, so every one is kept, and
    one is due every interval: a fold from the nearest is never longer than that."""
    assert [v for v in range(1001) if snapshot_due(v, 100)] == list(range(100, 1001, 100))
    assert [v for v in range(1, 10) if snapshot_due(v, 3)] == [3, 6, 9]


def test_snapshot_really_short_circuits_replay(sqlite_url: str) -> None:
    """Loading at head reads the snapshot: corrupting an early event's payload is not seen."""
    with Ledger(sqlite_url, snapshot_interval=2) as ledger:
        agg = grown_session(ledger, iterations=1)
        head = agg.version
    snap_versions = [
        r[0]
        for r in sqlite3.connect(sqlite_url).execute(
            "SELECT originator_version FROM stored_snapshots ORDER BY originator_version",
        )
    ]
    assert snap_versions
    assert snap_versions[-1] >= head - 2
    con = raw_connection(sqlite_url)
    with con:
        con.execute(
            "UPDATE stored_events SET state = CAST(json_set(CAST(unpack(state) AS TEXT), "
            "'$.data.participant.name', 'renamed') AS BLOB) WHERE originator_version = 2",
        )
    con.close()
    with Ledger(sqlite_url, snapshot_interval=2, create=False) as ledger:
        assert ledger.get(agg.id).state.participants[0].name == "p0"  # from the snapshot
    with Ledger(sqlite_url, snapshot_interval=0, create=False) as ledger:
        assert ledger.get(agg.id, version=2).state.participants[0].name == "renamed"


# --------------------------------------------------------------------------- bad stores


def test_read_only_open_of_missing_sqlite_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.sqlite"
    with pytest.raises(StoreError, match="no ledger at") as info:
        Ledger(str(missing), create=False)
    assert not missing.exists()
    assert "\n" not in info.value.one_line()


def test_not_a_sqlite_file(tmp_path: Path) -> None:
    f = tmp_path / "notes.txt"
    f.write_text("hello, I am text\n" * 10)
    with pytest.raises(StoreError, match="not a forge-ledger store \\(not a SQLite file\\)"):
        Ledger(str(f))
    assert f.read_text().startswith("hello")


def test_foreign_sqlite_database(tmp_path: Path) -> None:
    f = tmp_path / "other.db"
    con = sqlite3.connect(f)
    con.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="a SQLite file but not a forge-ledger store") as info:
        Ledger(str(f))
    assert info.value.hint
    assert "--store" in info.value.hint
    tables = {r[0] for r in sqlite3.connect(f).execute("SELECT name FROM sqlite_master")}
    assert "stored_events" not in tables


def test_directory_as_store(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="is a directory"):
        Ledger(str(tmp_path))


@pytest.mark.parametrize("url", ["mysql://localhost/db", "http://example.org/ledger"])
def test_bad_url_scheme(url: str) -> None:
    with pytest.raises(StoreError, match="unsupported store URL scheme") as info:
        Ledger(url)
    line = info.value.one_line()
    assert "\n" not in line
    assert "postgresql://" in line


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("postgresql://127.0.0.1:5432/", "no database name"),
        ("postgresql://127.0.0.1:5432/test?schema=Bad-Name", "invalid schema name"),
        ("postgresql://127.0.0.1:notaport/test", "invalid port"),
    ],
)
def test_bad_postgres_urls(url: str, match: str) -> None:
    with pytest.raises(StoreError, match=match):
        resolve_store(url)


def test_postgres_url_display_hides_password() -> None:
    loc = resolve_store("postgresql://bob:s3cret@db.example:6543/forge?schema=team_a")
    assert (loc.host, loc.port, loc.dbname, loc.user, loc.schema) == (
        "db.example", 6543, "forge", "bob", "team_a",
    )
    assert "s3cret" not in loc.display


@pytest.mark.postgres
def test_unreachable_postgres_is_a_store_error() -> None:
    with pytest.raises(StoreError, match="cannot open the store"):
        Ledger("postgresql://postgres@127.0.0.1:1/test?schema=fl_nowhere")
