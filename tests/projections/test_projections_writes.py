"""Fast paths of the projection runner: bulk FTS indexing, batched writes, followers' states."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forge_ledger.clock import FixedStepClock
from forge_ledger.domain import SessionState, canonical_json
from forge_ledger.errors import SessionDamagedError
from forge_ledger.ledger import Ledger
from forge_ledger.projections import (
    EventLike,
    Op,
    ProjectionRunner,
    Put,
    ReadModelProjection,
    catch_up,
    open_views,
)
from forge_ledger.projections.writes import BULK_FTS_MIN_ROWS
from support.projections import canonical_dump
from support.stories import SessionScript, random_sessions

TERMS = ["caching", "sourcing", "queue", "budget", "audit"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_canonical_json_is_sorted_compact_json(value: Any) -> None:
    """The fast encoder gives exactly the text every stored hash was computed over."""
    reference = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    assert canonical_json(value) == reference


def _search(path: Path) -> dict[str, list[str]]:
    con = sqlite3.connect(path)
    try:
        # raises if the external-content index disagrees with the table
        con.execute("INSERT INTO contributions_fts(contributions_fts) VALUES('integrity-check')")
        return {
            term: [r[0] for r in con.execute(
                "SELECT c.id FROM contributions_fts f JOIN contributions c ON c.rowid = f.rowid "
                "WHERE contributions_fts MATCH ? ORDER BY c.id", [term])]
            for term in TERMS
        }
    finally:
        con.close()


def _triggers(path: Path) -> set[str]:
    con = sqlite3.connect(path)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='trigger'")}
    finally:
        con.close()


def _contributions(ledger: Ledger) -> int:
    return sum(
        1 for e in ledger.notifications(limit=100_000) if e.type == "ContributionRecorded"
    )


def test_bulk_indexing_matches_per_row_triggers(tmp_path: Path) -> None:
    with Ledger(str(tmp_path / "ledger.sqlite")) as ledger:
        random_sessions(ledger, 7, 3)
        assert _contributions(ledger) >= BULK_FTS_MIN_ROWS  # the bulk path really runs
        bulk, rows = tmp_path / "bulk.views.sqlite", tmp_path / "rows.views.sqlite"
        db = open_views(bulk)
        catch_up(ledger, db, batch_size=100_000)
        db.close()
        db = open_views(rows)
        catch_up(ledger, db, batch_size=3)  # a few rows per batch: the triggers index them
        db.close()
        found = _search(bulk)
        assert found == _search(rows)
        assert sum(len(v) for v in found.values()) > 0
        assert _triggers(bulk) == _triggers(rows) >= {"contributions_ai", "contributions_ad",
                                                      "contributions_au"}
        assert canonical_dump(bulk) == canonical_dump(rows)
        # a rebuild empties the index with the rows and indexes everything again
        db = open_views(bulk)
        ProjectionRunner(ledger, db).rebuild()
        db.close()
        assert _search(bulk) == found


class _FailsAfterBulkWrite(ReadModelProjection):
    """Queues its rows like the read model, then a session row SQLite rejects.

    ``sessions`` is first written by the flush, after the contributions were queued, so the
    failure happens after the bulk path dropped the insert trigger and indexed the rows.
    """

    def flush(self, touched: Sequence[SessionState]) -> Sequence[Op]:
        return [Put("sessions", {"id": s.id, "no_such_column": 1}) for s in touched]


def test_failure_after_bulk_indexing_rolls_back_rows_index_and_trigger(tmp_path: Path) -> None:
    path = tmp_path / "v.views.sqlite"
    with Ledger(str(tmp_path / "ledger.sqlite")) as ledger:
        random_sessions(ledger, 12, 3)
        db = open_views(path)
        with pytest.raises(sqlite3.OperationalError, match="no_such_column"):
            ProjectionRunner(ledger, db, [_FailsAfterBulkWrite()]).catch_up(batch_size=100_000)
        db.close()
        assert "contributions_ai" in _triggers(path)
        assert all(not ids for ids in _search(path).values())
        db = open_views(path)
        catch_up(ledger, db, batch_size=100_000)
        db.close()
        con = sqlite3.connect(path)
        assert con.execute("SELECT count(*) FROM contributions").fetchone()[0] == (
            _contributions(ledger)
        )
        con.close()
        assert sum(len(v) for v in _search(path).values()) > 0
        # the restored trigger still indexes rows written one batch at a time
        random_sessions(ledger, 13, 1)
        db = open_views(path)
        catch_up(ledger, db, batch_size=2)
        db.close()
        ref = tmp_path / "ref.views.sqlite"
        db = open_views(ref)
        catch_up(ledger, db)
        db.close()
        assert _search(path) == _search(ref)


class _CountingSource:
    """The ledger, counting how often a runner had to load a whole state from it."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.state_loads = 0

    def notifications(
        self, *, after: int = 0, limit: int = 1000, topics: Sequence[str] = (),
        on_damaged: Callable[[SessionDamagedError, int], None] | None = None,
    ) -> Sequence[EventLike]:
        return self.ledger.notifications(
            after=after, limit=limit, topics=topics, on_damaged=on_damaged
        )

    def max_notification_id(self) -> int:
        return self.ledger.max_notification_id()

    def damage(self, session_id: UUID) -> SessionDamagedError | None:
        return self.ledger.damage(session_id)

    def state(self, session_id: UUID, *, at_event: int | None = None) -> SessionState:
        self.state_loads += 1
        return self.ledger.state(session_id, at_event=at_event)

    def events(
        self, session_id: UUID, *, after: int = 0, upto: int | None = None,
    ) -> Iterable[EventLike]:
        return self.ledger.events(session_id, after=after, upto=upto)


def test_follower_folds_events_another_runner_applied(tmp_path: Path) -> None:
    """A follower and CLI calls share one read model: the follower never reloads a state."""
    path = tmp_path / "v.views.sqlite"
    with Ledger(str(tmp_path / "ledger.sqlite")) as ledger:
        clock = FixedStepClock(step=timedelta(milliseconds=1500))
        scripts = [SessionScript(51, i, clock) for i in range(3)]
        for script in scripts:
            ledger.save(script.agg)
        db = open_views(path)
        source = _CountingSource(ledger)
        follower = ProjectionRunner(source, db)
        follower.catch_up()
        gens = [script.rounds() for script in scripts]
        live = [0, 1, 2]
        step = 0
        others = 0
        while live:
            i = live[step % len(live)]
            try:
                next(gens[i])
            except StopIteration:
                live.remove(i)
            ledger.save(scripts[i].agg)
            if step % 3 == 1:  # a CLI call applies these events; the follower misses them
                other = open_views(path)
                others += ProjectionRunner(ledger, other).catch_up()
                other.close()
            else:
                follower.catch_up(batch_size=7)
            step += 1
        follower.catch_up()
        db.close()
        assert others > 0
        assert source.state_loads == 0
        ref = tmp_path / "ref.views.sqlite"
        rdb = open_views(ref)
        catch_up(ledger, rdb)
        rdb.close()
        assert canonical_dump(path) == canonical_dump(ref)
