"""``spec`` from the read model prints exactly what it prints from the ledger.

A store of seeded random sessions (``support.stories.random_sessions``) plus a fork is asked
for each session's document before its read model exists (each state folded) and after
``projections update`` (the ``documents`` row, the store's heads read from the file itself):
the bytes, the errors and the exit codes must be the same, for every way of naming a session.
A read model that a later event has made stale, or whose row for the session does not match
the session's last event, is not read.
"""

from __future__ import annotations

import sqlite3
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

import forge_ledger.cli.spec_cmd as spec_cmd
from forge_ledger.cli import cli
from forge_ledger.clock import FixedStepClock
from forge_ledger.ledger import Ledger
from forge_ledger.testing import SessionBuilder
from support.read_models import spied, update_read_model
from support.stories import random_sessions


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """One entry per plain ``spec``: whether the read model answered it."""
    return spied(monkeypatch, spec_cmd, "document_from_read_model")


def _build(path: Path) -> list[str]:
    clock = FixedStepClock(step=timedelta(seconds=2))
    with Ledger(str(path)) as ledger:
        ids: list[str] = random_sessions(ledger, 7, 4)
        parent = SessionBuilder.of(ledger.get(ids[0]), clock=clock, store=ledger)
        for last in (1, 2):  # two forks whose ids share their first eight digits
            twin = uuid.UUID(f"{_TWINS}-0000-4000-8000-{last:012}")
            ids.append(str(parent.fork(at_iteration=1, session_id=twin).state.id))
    return ids


_TWINS = "abcdef01"
"""The first digits of both forks' ids: a prefix the ledger finds ambiguous."""


def _spec(path: Path, ref: str) -> tuple[int, str, str, str]:
    """Exit code, stdout, stderr and the error raised (the group itself raises it)."""
    result = CliRunner().invoke(cli, ["spec", ref, "--store", str(path)])
    return result.exit_code, result.stdout, result.stderr, repr(result.exception)


def _refs(ids: list[str]) -> list[str]:
    """Every way of naming each session, and names the ledger refuses or must resolve."""
    refs = []
    for sid in ids:
        refs += [sid, sid[:8], sid[:13].upper(), sid.replace("-", "")[:12]]
    return [*refs, *_NOT_PLAIN, "ffffffff", _TWINS]


_FRONT = "---\nformat: forge-ledger-document/1\n"

_NOT_PLAIN = ("@", "last", "@~1", "", "zz%_")
"""Names the read model leaves to the ledger: counted back from the newest, empty, not id
digits."""


def test_the_read_model_prints_the_bytes_the_ledger_prints(
    tmp_path: Path, taken: list[bool]
) -> None:
    path = tmp_path / "store.sqlite"
    ids = _build(path)
    refs = _refs(ids)
    folded = {ref: _spec(path, ref) for ref in refs}
    assert not any(taken)
    documents = [sid for sid in ids if folded[sid][0] == 0]
    assert documents
    assert all(folded[sid][1].startswith(_FRONT) for sid in documents)
    update_read_model(path)
    taken.clear()
    for ref in refs:
        assert _spec(path, ref) == folded[ref], ref
    answered = dict(zip(refs, taken, strict=True))
    assert all(answered[sid] for sid in documents)
    unique = [sid for sid in documents if not sid.startswith(_TWINS)]
    assert unique
    assert all(answered[sid[:8]] and answered[sid[:13].upper()] for sid in unique)
    assert not any(answered[r] for r in (*_NOT_PLAIN, "ffffffff", _TWINS))
    assert folded[_TWINS][0] != 0
    assert "matches 2 sessions" in folded[_TWINS][3]


def test_a_stale_read_model_is_not_read(tmp_path: Path, taken: list[bool]) -> None:
    """An event recorded after ``projections update`` makes the read model stale: ``spec``
    folds the session and prints its new document."""
    path = tmp_path / "store.sqlite"
    ids = _build(path)
    update_read_model(path)
    with Ledger(str(path), create=False) as ledger:
        live = [s for s in ids if not ledger.state(s).status.terminal]
    sid = next(s for s in live if _spec(path, s)[0] == 0)
    before = _spec(path, sid)
    assert taken[-1]
    with Ledger(str(path), create=False) as ledger:
        b = SessionBuilder.of(ledger.get(sid), clock=FixedStepClock(), store=ledger)
        b.human("one more word", kind="steer").save()
        moved = ledger.state(sid).version
    taken.clear()
    after = _spec(path, sid)
    assert taken == [False]
    assert after[0] == 0
    assert after != before
    assert f"position: {moved}\n" in after[1]


def test_a_row_that_does_not_match_the_session_head_is_not_read(
    tmp_path: Path, taken: list[bool]
) -> None:
    """The session's own row must be at its last stored event, hash included (a store
    restored from a backup and written again counts as many events as before)."""
    path = tmp_path / "store.sqlite"
    ids = _build(path)
    update_read_model(path)
    sid = next(s for s in ids if _spec(path, s)[0] == 0)
    expected = _spec(path, sid)
    views = tmp_path / "store.views.sqlite"
    with sqlite3.connect(views) as conn:
        conn.execute("UPDATE sessions SET head_hash = 'elsewhere' WHERE id = ?", [sid])
        conn.execute("UPDATE documents SET text = 'not the document' WHERE id = ?", [sid])
    taken.clear()
    assert _spec(path, sid) == expected
    assert taken == [False]
