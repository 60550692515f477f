"""Only ledgers are opened: every command refuses any other file in one line and leaves it
byte-for-byte as it was (SHA-256 before and after); a ledger carries its marker.

The files refused: another eventsourcing application's SQLite store, a random SQLite
database, a 200 MB SQLite file with a ``stored_events`` table of its own, and a file that is
not SQLite at all. A ledger made before the marker existed (the golden stores) still opens,
and gains the marker on its next write, not on a read.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event

from forge_ledger.errors import StoreError
from forge_ledger.ledger import Ledger
from forge_ledger.ledger.store import APPLICATION_ID, FORMAT_VERSION
from forge_ledger.testing import FakeOpenAIServer
from support.cli import CONSOLE_SCRIPT, run_cli
from support.orchestrator import voice
from support.stories import priced_session

FIXTURES = Path(__file__).parents[1] / "fixtures"
SID = "0123abcd"


class Account(Aggregate):
    """Another program's aggregate (its events' topics are not forge-ledger's)."""

    @event("Opened")
    def __init__(self, owner: str) -> None:
        self.owner = owner

    @event("Credited")
    def credit(self, amount: int) -> None:
        self.balance = amount


class Bank(Application[object]):
    pass


def _other_app(path: Path) -> Path:
    bank = Bank(env={"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(path)})
    account = Account("ann")
    account.credit(10)
    bank.save(account)
    bank.close()
    return path


def _random_sqlite(path: Path) -> Path:
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
        con.execute("INSERT INTO notes (body) VALUES ('hello')")
    return path


def _big_stored_events(path: Path) -> Path:
    """200 MB: a ``stored_events`` table with eventsourcing's columns and foreign events."""
    with sqlite3.connect(path) as con:
        con.execute(
            "CREATE TABLE stored_events (originator_id TEXT, originator_version INTEGER, "
            "topic TEXT, state BLOB, PRIMARY KEY (originator_id, originator_version))"
        )
        con.executemany(
            "INSERT INTO stored_events VALUES (?, ?, 'shop.domain:Order.Placed', zeroblob(?))",
            [("7" * 32, v, 1 << 20) for v in range(1, 201)],
        )
    assert path.stat().st_size >= 200 << 20
    return path


def _not_sqlite(path: Path) -> Path:
    path.write_bytes(b"%PDF-1.7\n" + os.urandom(4096))
    return path


HOSTILE = {
    "other eventsourcing app": _other_app,
    "random sqlite": _random_sqlite,
    "200 MB stored_events": _big_stored_events,
    "not sqlite": _not_sqlite,
}

COMMANDS = [
    ["sessions"], ["verify"], ["show", SID], ["spec", SID], ["log", SID], ["audit", SID],
    ["report", SID], ["dissent", SID], ["trail", SID], ["export", SID],
    ["fork", SID, "--at-iteration", "1"], ["resume", SID], ["seal", SID], ["back", SID],
    ["replay", "--all"],
    ["projections", "update"], ["projections", "status"],
]


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _folder(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir())


@pytest.fixture(scope="module", params=list(HOSTILE))
def hostile(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("hostile")
    path: Path = HOSTILE[request.param](folder / "file.sqlite")
    return path


def test_every_command_refuses_a_foreign_file_and_leaves_it_unchanged(
    hostile: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    before, files = _digest(hostile), _folder(hostile)
    for command in COMMANDS:
        code, out, err = run_cli(capsys, *command, "--store", str(hostile))
        lines = err.strip().splitlines()
        assert code == 2, (command, err)
        assert len(lines) == 1, (command, err)
        assert lines[0].startswith("error: ")
        assert "not a forge-ledger store" in lines[0], (command, err)
        assert out == ""
    assert _digest(hostile) == before
    assert _folder(hostile) == files  # no -wal, no leases, no read model beside it


@pytest.mark.slow
def test_run_and_verify_refuse_it_in_a_real_process(
    hostile: Path, fake_openai: FakeOpenAIServer,
) -> None:
    fake_openai.set_script({"ana": voice("ana"), "ben": voice("ben")})
    before, files = _digest(hostile), _folder(hostile)
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    for command in (
        ["run", "Not here", "-m", "openai/ana", "-m", "openai/ben", "--api-base",
         fake_openai.url, "--price", "openai/ana=1:2", "--price", "openai/ben=1:2", "--json"],
        ["verify"],
        ["projections", "update"],
    ):
        done = subprocess.run(
            [CONSOLE_SCRIPT, *command, "--store", str(hostile)],
            capture_output=True, text=True, env=env, timeout=120, check=False,
        )
        assert done.returncode == 2, (command, done.stderr)
        assert done.stderr.count("\n") == 1, done.stderr
        assert "not a forge-ledger store" in done.stderr
        assert "Traceback" not in done.stderr
    assert not fake_openai.requests
    assert _digest(hostile) == before
    assert _folder(hostile) == files


def _marker(path: Path) -> tuple[int, int]:
    with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) as con:
        return (
            con.execute("PRAGMA application_id").fetchone()[0],
            con.execute("PRAGMA user_version").fetchone()[0],
        )


def test_a_new_ledger_carries_the_marker_and_its_format_version(tmp_path: Path) -> None:
    store = tmp_path / "new.sqlite"
    with Ledger(str(store)) as ledger:
        priced_session(ledger, iterations=1, participants=2)
    assert _marker(store) == (APPLICATION_ID, FORMAT_VERSION)


@pytest.mark.parametrize("fixture", ["store-v1.sqlite", "store-v2.sqlite"])
def test_a_ledger_without_the_marker_opens_and_gains_it_on_its_next_write(
    fixture: str, tmp_path: Path,
) -> None:
    store = tmp_path / fixture
    shutil.copy(FIXTURES / fixture, store)
    with Ledger(str(store), create=False) as ledger:
        assert ledger.session_ids()
    assert _marker(store)[0] == 0  # a read adds nothing
    with Ledger(str(store), create=False) as ledger:
        priced_session(ledger, iterations=1, participants=2)
    assert _marker(store) == (APPLICATION_ID, FORMAT_VERSION)
    with Ledger(str(store), create=False) as ledger:
        assert len(ledger.session_ids()) >= 2


def test_a_ledger_of_a_newer_format_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "newer.sqlite"
    with Ledger(str(store)) as ledger:
        priced_session(ledger, iterations=1, participants=2)
    with sqlite3.connect(store) as con:
        con.execute(f"PRAGMA user_version = {FORMAT_VERSION + 1}")
    before = _digest(store)
    with pytest.raises(StoreError, match="upgrade forge-ledger"):
        Ledger(str(store), create=False)
    assert _digest(store) == before
