"""The store's head read from a SQLite file itself is the head the ledger gives.

``sessions`` reads it (:func:`forge_ledger.ledger.head.sqlite_head`) to tell whether the read
model is current without opening the ledger; it must agree with
:func:`forge_ledger.projections.current.store_head` over the ledger on every store: one
written before states were compressed (the v1 and v2 fixtures), one written now (states
compressed with the dictionary), and one whose tables hold no event yet.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from forge_ledger.ledger import Ledger
from forge_ledger.ledger.head import sqlite_head as _sqlite_head
from forge_ledger.ledger.store import resolve_store
from forge_ledger.projections.current import store_head
from forge_ledger.testing import SessionBuilder
from support.stories import random_sessions

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def sqlite_head(path: Path) -> tuple[int, tuple[str, int, str] | None] | None:
    return _sqlite_head(resolve_store(str(path)))


def _ledgers_head(path: Path) -> tuple[int, tuple[str, int, str] | None]:
    with Ledger(str(path), create=False) as ledger:
        return store_head(ledger)


@pytest.mark.parametrize("fixture", ["store-v1.sqlite", "store-v2.sqlite"])
def test_a_fixture_store_s_head_is_the_ledger_s(tmp_path: Path, fixture: str) -> None:
    path = tmp_path / fixture
    shutil.copy(FIXTURES / fixture, path)
    found = sqlite_head(path)
    assert found is not None
    assert found[1] is not None
    assert found == _ledgers_head(path)


def test_a_store_written_now_and_then_written_again(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    with Ledger(str(path)) as ledger:
        ids = random_sessions(ledger, 5, 2)
    first = sqlite_head(path)
    assert first == _ledgers_head(path)
    with Ledger(str(path), create=False) as ledger:
        SessionBuilder.of(ledger.get(ids[0]), store=ledger).human("more", kind="steer").save()
    again = sqlite_head(path)
    assert again == _ledgers_head(path)
    assert first is not None
    assert again is not None
    assert again[0] == first[0] + 1
    assert again[1] != first[1]


def test_a_store_with_no_event_yet(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite"
    Ledger(str(path)).close()
    assert sqlite_head(path) == (0, None) == _ledgers_head(path)


def test_what_the_ledger_refuses_is_no_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A missing file, a file that is no ledger, and a store the ledger's settings refuse:
    the ledger, opened next, says what is wrong."""
    assert sqlite_head(tmp_path / "none.sqlite") is None
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as con:
        con.execute("CREATE TABLE stored_events (originator_id, originator_version, state)")
    assert sqlite_head(other) is None
    path = tmp_path / "store.sqlite"
    shutil.copy(FIXTURES / "store-v2.sqlite", path)
    assert sqlite_head(path) is not None
    monkeypatch.setenv("FORGE_LEDGER_LOCK_TIMEOUT", "soon")
    assert sqlite_head(path) is None
