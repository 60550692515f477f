"""``audit`` from the read model's ``audits`` table prints exactly what auditing the ledger
prints.

Seeded random sessions and a fork are audited before the read model exists and after
``projections update``: the same bytes as text and as ``--markdown``, the rows read for each.
A row made at another head than the session's (a later event, a store written again), of
another version, or of a session whose chain does not verify, is never read. A session that
stops leaves its audit current.
"""

from __future__ import annotations

import sqlite3
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

import forge_ledger.cli.record_cmds as record_cmds
from forge_ledger.cli import cli
from forge_ledger.clock import FixedStepClock
from forge_ledger.ledger import Ledger
from forge_ledger.testing import SessionBuilder
from support.read_models import four_voices, spied
from support.stories import random_sessions


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """One entry per ``audit`` that looked: whether the read model answered it."""
    return spied(monkeypatch, record_cmds, "_kept_audit")


def _build(path: Path | str) -> list[str]:
    clock = FixedStepClock(step=timedelta(seconds=2))
    with Ledger(str(path)) as ledger:
        ids: list[str] = random_sessions(ledger, 5, 3)
        parent = SessionBuilder.of(ledger.get(ids[0]), clock=clock, store=ledger)
        fork = parent.fork(at_iteration=1, session_id=uuid.uuid5(uuid.NAMESPACE_URL, ids[0]))
        ids.append(str(fork.state.id))
    return ids


def _cli(*argv: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(argv))
    return result.exit_code, result.stdout, repr(result.exception)


def _audits(path: Path | str, ids: list[str]) -> dict[tuple[str, str], tuple[int, str, str]]:
    return {
        (sid, form): _cli("audit", sid, *extra, "--store", str(path))
        for sid in ids
        for form, extra in (("text", ()), ("markdown", ("--markdown",)))
    }


def _update(path: Path | str) -> None:
    assert _cli("projections", "update", "--store", str(path))[0] == 0


def test_the_read_model_prints_the_audit_the_ledger_prints(
    tmp_path: Path, taken: list[bool]
) -> None:
    path = tmp_path / "store.sqlite"
    ids = _build(path)
    folded = _audits(path, ids)
    assert taken == [False] * len(folded)
    assert all(code == 0 for code, _, _ in folded.values())
    assert all(out.startswith("# Audit: ") for (_, form), (_, out, _) in folded.items()
               if form == "markdown")
    _update(path)
    taken.clear()
    assert _audits(path, ids) == folded
    assert taken == [True] * len(folded)


@pytest.mark.postgres
@pytest.mark.slow
def test_the_read_model_of_a_postgresql_store_prints_the_same_audit(
    pg_url: str, taken: list[bool]
) -> None:
    """A PostgreSQL store's read model (a SQLite file under the forge-ledger home) keeps the
    audits ``projections update`` made, and ``audit`` prints them."""
    ids = _build(pg_url)
    folded = _audits(pg_url, ids)
    assert not any(taken)
    _update(pg_url)
    taken.clear()
    assert _audits(pg_url, ids) == folded
    assert taken == [True] * len(folded)


def test_json_reads_the_ledger(tmp_path: Path, taken: list[bool]) -> None:
    path = tmp_path / "store.sqlite"
    ids = _build(path)
    _update(path)
    code, out, _ = _cli("audit", ids[1], "--json", "--store", str(path))
    assert code == 0
    assert '"session_id"' in out
    assert taken == []


def test_a_row_not_made_at_the_session_head_is_not_read(
    tmp_path: Path, taken: list[bool]
) -> None:
    """A later event, a row of another version, a row of another head (a store written
    again): each makes ``audit`` read the ledger, and print what it prints."""
    path = tmp_path / "store.sqlite"
    ids = _build(path)
    _update(path)
    with Ledger(str(path), create=False) as ledger:
        live = [s for s in ids if not ledger.state(s).status.terminal]
        b = SessionBuilder.of(ledger.get(live[0]), clock=FixedStepClock(), store=ledger)
        b.human("one more word", kind="steer").save()
    others = [s for s in ids if s != live[0]]
    views = tmp_path / "store.views.sqlite"
    with sqlite3.connect(views) as conn:
        conn.execute("UPDATE audits SET version = version + 1 WHERE id = ?", [others[0]])
        conn.execute("UPDATE audits SET markdown = 'not this', head_hash = 'x' WHERE id = ?",
                     [others[1]])
    for sid in (live[0], others[0], others[1]):
        taken.clear()
        code, out, _ = _cli("audit", sid, "--markdown", "--store", str(path))
        assert taken == [False], sid
        assert code == 0
        assert out.startswith("# Audit: ")
    _update(path)  # the moved session is audited again; the rows changed by hand are not
    taken.clear()
    assert _cli("audit", live[0], "--store", str(path))[0] == 0
    assert taken == [True]


def test_a_broken_chain_is_audited_from_the_ledger(tmp_path: Path, taken: list[bool]) -> None:
    """A session whose chain does not verify never prints a kept audit: the command audits
    what is stored and ends with the break, as before."""
    path = tmp_path / "store.sqlite"
    ids = _build(path)
    _update(path)
    with sqlite3.connect(path) as conn:
        conn.execute(
            "DELETE FROM stored_events WHERE originator_id = ? AND originator_version = 3",
            [uuid.UUID(ids[1]).hex],
        )
    code, _, error = _cli("audit", ids[1], "--store", str(path))
    assert code != 0
    assert "does not verify" in error or "damaged" in error
    assert taken == []


def test_a_session_that_stops_leaves_its_audit_current(tmp_path: Path, taken: list[bool]) -> None:
    path = tmp_path / "store.sqlite"
    state = four_voices(path)
    assert state.status.terminal
    kept = _cli("audit", state.id, "--markdown", "--store", str(path))
    assert taken == [True]
    (tmp_path / "store.views.sqlite").unlink()
    assert _cli("audit", state.id, "--markdown", "--store", str(path)) == kept
    assert taken == [True, False]
