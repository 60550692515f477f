"""The read model renders a batch's ``rounds`` and ``round_lines`` rows once, at the batch's
end: after any prefix of the log its tables hold exactly the rows (rowids included) that
applying and writing the events one at a time gives, as when every event wrote its rows."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from forge_ledger.clock import FixedStepClock, SequentialIds
from forge_ledger.domain import RoundKind, SessionStatus
from forge_ledger.ledger import Ledger
from forge_ledger.projections import ProjectionRunner, ReadModelProjection, open_views
from forge_ledger.testing import SessionBuilder
from support.stories import random_sessions


def _rows(path: Path) -> list[str]:
    """Every read-model row in rowid order, the rowid with it."""
    con = sqlite3.connect(path)
    try:
        return [
            f"{table} {row!r}"
            for table in ReadModelProjection.tables
            for row in con.execute(f'SELECT rowid, * FROM "{table}" ORDER BY rowid')
        ]
    finally:
        con.close()


def _story(ledger: Ledger) -> None:
    """A fallback before the round is written again, a critique, a parse failure, votes, a
    rewind, a round left open by the end, and a fork: every way a round or a line changes."""
    s = SessionBuilder(clock=FixedStepClock(), ids=SequentialIds(), store=ledger)
    s.start("Deferred rows", participants=["alice", "bob", "carol"])
    s.round(RoundKind.DRAFT, participants=["alice"]).fail("alice", will_retry=False)
    s.aggregate.choose_fallback(
        round=s.round_number, failed="alice", participant="bob", at=s.clock.now()
    )
    s.answer("bob", "  \n  a draft   with\tspaces\nsecond line").close_round()
    s.round(RoundKind.CRITIQUE, participants=["alice", "carol"], targets={"alice": "bob",
                                                                        "carol": "bob"})
    s.answer("alice", "weak on retries").critique("alice", target="bob", score=40)
    s.answer("carol", "{not json").parse_failure("carol", expected="critique", error="no json")
    s.close_round(abstained=["carol"])
    s.round(RoundKind.CONVERGENCE, iteration=2, answers={n: f"{n} votes" for n in ("alice", "bob")},
            votes={"alice": True, "bob": False}, close=True)
    s.save()
    s.rewind(1).resume()
    s.round(RoundKind.DRAFT, participants=["carol"]).fail("carol", will_retry=False)
    s.aggregate.choose_fallback(
        round=s.round_number, failed="carol", participant="alice", at=s.clock.now()
    )
    s.save()
    child = s.fork(at_iteration=1)
    s.answer("alice", "the last draft").finish(SessionStatus.ABORTED, reason="stopped")
    s.save()
    child.resume(reason="forked")
    child.round(RoundKind.DRAFT, answers={"bob": "the fork's draft"}, close=True).save()


@pytest.mark.slow
def test_rows_after_any_prefix_are_the_rows_written_event_by_event(tmp_path: Path) -> None:
    with Ledger(str(tmp_path / "ledger.sqlite")) as ledger:
        _story(ledger)
        random_sessions(ledger, 7, 1)
        head = ledger.max_notification_id()
        types = {e.notification_id: e.type for e in ledger.notifications(after=0, limit=head)}
        step_path = tmp_path / "step.sqlite"
        step = ProjectionRunner(ledger, open_views(step_path), [ReadModelProjection()])
        fallbacks = 0
        for k in range(1, head + 1):
            step.catch_up(batch_size=1, max_batches=1)
            whole = tmp_path / f"whole-{k}.sqlite"
            db = open_views(whole)
            ProjectionRunner(ledger, db, [ReadModelProjection()]).catch_up(
                batch_size=k, max_batches=1
            )
            db.close()
            assert _rows(whole) == _rows(step_path), f"after notification {k} ({types[k]})"
            whole.unlink()
            if types[k] == "FallbackChosen":  # the round's row still lists its first author
                fallbacks += 1
                con = sqlite3.connect(step_path)
                listed = con.execute(
                    "SELECT expected_json FROM rounds ORDER BY rowid DESC LIMIT 1"
                ).fetchone()[0]
                con.close()
                assert len(json.loads(listed)) == 1
        step.db.close()
    assert fallbacks == 2


def test_a_failed_batch_leaves_nothing_pending(tmp_path: Path) -> None:
    """Rows marked by a batch that failed are not written by the next one."""
    with Ledger(str(tmp_path / "ledger.sqlite")) as ledger:
        _story(ledger)
        events = ledger.notifications(after=0, limit=1000)
        started = events[4]
        assert started.type == "RoundStarted"
        state = ledger.state(started.session_id, at_event=started.position)
        marked, failed = ReadModelProjection(), ReadModelProjection()
        for p in (marked, failed):
            p.begin()
            p.apply(started, started.payload(), state)
        failed.begin()  # what the runner does at every batch's start
        assert [op.table for op in marked.flush([])] == ["rounds"]
        assert list(failed.flush([])) == []
