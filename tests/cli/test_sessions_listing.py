"""``sessions`` from the read model prints exactly what it prints from the ledger.

A store of seeded random sessions (``support.stories.random_sessions``) plus a fork is listed
before its read model exists (every session's state folded) and after ``projections update``
(the read model's rows, the store's newest event read from the file itself); the two must be
the same bytes, for the table and for ``--json``, with and without filters. A read model that
a later event has made stale is not read, and the listing then counts that event.
"""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

import forge_ledger.cli.listing as listing
from forge_ledger.cli import cli
from forge_ledger.clock import FixedStepClock
from forge_ledger.ledger import Ledger
from forge_ledger.ledger.outputs import store_outputs
from forge_ledger.testing import SessionBuilder
from support.read_models import four_voices, spied, update_read_model
from support.stories import random_sessions

LISTINGS = (
    (),
    ("--json",),
    ("--status", "converged", "--status", "in_progress"),
    ("--limit", "2", "--json"),
    ("--search", "a"),
)


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """One entry per listing: whether it was read from the read model without the ledger."""
    return spied(monkeypatch, listing, "listed_from_read_model")


def _build(path: Path) -> list[str]:
    clock = FixedStepClock(step=timedelta(seconds=2))
    with Ledger(str(path)) as ledger:
        ids: list[str] = random_sessions(ledger, 11, 3)
        parent = SessionBuilder.of(ledger.get(ids[0]), clock=clock, store=ledger)
        parent.fork(at_iteration=1, session_id=uuid.uuid5(uuid.NAMESPACE_URL, ids[0]))
    return ids


def _list(path: Path, *extra: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["sessions", "--store", str(path), *extra])
    return result.exit_code, result.stdout, result.stderr


def test_the_read_model_lists_the_bytes_the_ledger_lists(tmp_path: Path, taken: list[bool]) -> None:
    path = tmp_path / "store.sqlite"
    _build(path)
    folded = {extra: _list(path, *extra) for extra in LISTINGS}
    assert taken == [False] * len(LISTINGS)
    assert folded[()][0] == 0
    assert "Sessions in" in folded[()][1]
    update_read_model(path)
    taken.clear()
    for extra in LISTINGS:
        assert _list(path, *extra) == folded[extra], extra
    assert taken == [True] * len(LISTINGS)


def test_a_stale_read_model_is_not_read(tmp_path: Path, taken: list[bool]) -> None:
    """An event recorded after ``projections update`` makes the read model stale: the listing
    reads the ledger and counts that event, as a store without a read model does."""
    path = tmp_path / "store.sqlite"
    ids = _build(path)
    update_read_model(path)
    with Ledger(str(path), create=False) as ledger:
        b = SessionBuilder.of(ledger.get(ids[1]), clock=FixedStepClock(), store=ledger)
        b.human("one more word", kind="steer").save()
        moved = ledger.state(ids[1]).version
    code, out, _ = _list(path, "--json")
    assert code == 0
    assert taken == [False]
    listed = {s["id"]: s["events"] for s in json.loads(out)}
    assert listed[ids[1]] == moved
    with Ledger(str(path), create=False) as ledger:
        store_outputs(ledger.location).views.unlink()
    assert _list(path, "--json") == (code, out, "")  # what the ledger alone lists


def test_a_session_run_leaves_the_read_model_current(tmp_path: Path, taken: list[bool]) -> None:
    """The command that records a session brings the read model beside its store up to date
    when the session stops, so the next listing reads the read model, and lists what the
    ledger lists."""
    path = tmp_path / "store.sqlite"
    state = four_voices(path)
    assert state.status.terminal
    code, out, _ = _list(path, "--json")
    assert (code, taken) == (0, [True])
    assert [s["events"] for s in json.loads(out)] == [state.version]
    with Ledger(str(path), create=False) as ledger:
        store_outputs(ledger.location).views.unlink()
    assert _list(path, "--json") == (code, out, "")
