"""Projection runner: rebuild == incremental catch-up, exactly once across crashes, versions."""

from __future__ import annotations

import io
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console
from sqlite_utils import Database

from forge_ledger.cli._live_view import LiveView
from forge_ledger.domain import SessionState, canonical_json
from forge_ledger.domain.events import Payload
from forge_ledger.domain.values import Participant, RoundKind, Stance
from forge_ledger.engine.votes import contradicting_votes
from forge_ledger.ledger import Ledger
from forge_ledger.orchestrator.live import RoundComplete
from forge_ledger.projections import (
    DEFAULT_PROJECTIONS,
    EventLike,
    Op,
    Projection,
    ProjectionRunner,
    Put,
    ReadModelProjection,
    SessionStateProjection,
    catch_up,
    open_views,
    rebuild,
    status,
)
from forge_ledger.projections.migrations import MIGRATIONS
from forge_ledger.projections.session_state import summary_row
from forge_ledger.projections.show_view import contribution_line
from forge_ledger.testing import SessionBuilder
from support.projections import canonical_dump
from support.stories import random_sessions


def positions(db_path: Path) -> dict[str, int]:
    con = sqlite3.connect(db_path)
    try:
        return {n: p for n, p in con.execute("SELECT name, position FROM _projections")}
    finally:
        con.close()


def _full_rebuild(ledger: Ledger, path: Path) -> str:
    db = open_views(path)
    catch_up(ledger, db, batch_size=10_000)
    db.close()
    return canonical_dump(path)


def _count(ledger: Ledger, type_name: str) -> int:
    return sum(1 for e in ledger.notifications(after=0, limit=100_000) if e.type == type_name)


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    seed=st.integers(0, 10_000),
    sessions=st.integers(1, 3),
    batches=st.lists(st.integers(1, 40), min_size=1, max_size=6),
)
@pytest.mark.slow
def test_incremental_catch_up_in_any_batches_equals_rebuild(
    tmp_path_factory: pytest.TempPathFactory, seed: int, sessions: int, batches: list[int],
) -> None:
    tmp = tmp_path_factory.mktemp("prop")
    with Ledger(str(tmp / "ledger.sqlite")) as ledger:
        random_sessions(ledger, seed, sessions)
        head = ledger.max_notification_id()
        reference = _full_rebuild(ledger, tmp / "full.views.sqlite")
        inc = tmp / "inc.views.sqlite"
        i = 0
        while not inc.exists() or positions(inc).get("read_model", 0) < head:
            # a fresh runner per batch: no in-memory state survives, as after a restart
            db = open_views(inc)
            ProjectionRunner(ledger, db).catch_up(batch_size=batches[i % len(batches)],
                                                  max_batches=1)
            db.close()
            i += 1
        assert canonical_dump(inc) == reference
        assert set(positions(inc).values()) == {head}
        # and the dump is not trivially empty: contributions match the ledger
        con = sqlite3.connect(inc)
        assert con.execute("SELECT count(*) FROM contributions").fetchone()[0] == _count(
            ledger, "ContributionRecorded",
        )
        con.close()


def test_catch_up_while_the_ledger_grows_equals_rebuild(tmp_path: Path) -> None:
    """Sessions written in several runs, the read model caught up after each."""
    inc = tmp_path / "inc.views.sqlite"
    with Ledger(str(tmp_path / "ledger.sqlite")) as ledger:
        db = open_views(inc)
        runner = ProjectionRunner(ledger, db)
        seen = 0
        for seed in (1, 2, 3):
            random_sessions(ledger, seed, 2)
            seen += runner.catch_up(batch_size=13)
        db.close()
        assert seen == ledger.max_notification_id()
        assert canonical_dump(inc) == _full_rebuild(ledger, tmp_path / "full.views.sqlite")


class _Exploding(ReadModelProjection):
    """Writes its rows like the read model, then fails on one notification."""

    def __init__(self, fail_at: int) -> None:
        self.fail_at = fail_at

    def apply(self, event: EventLike, payload: Payload, state: SessionState) -> Sequence[Op]:
        ops = super().apply(event, payload, state)
        if event.notification_id == self.fail_at:
            raise RuntimeError("simulated crash mid-batch")
        return ops


def test_crash_mid_batch_applies_nothing_and_the_next_run_completes_exactly_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v.views.sqlite"
    with Ledger(str(tmp_path / "ledger.sqlite")) as ledger:
        random_sessions(ledger, 42, 2)
        head = ledger.max_notification_id()
        db = open_views(path)
        catch_up(ledger, db, batch_size=20, projections=[ReadModelProjection()])
        db.close()
        before = canonical_dump(path)
        assert positions(path) == {"read_model": head}
        random_sessions(ledger, 43, 2)
        new_head = ledger.max_notification_id()
        fail_at = head + (new_head - head) // 2
        db = open_views(path)
        with pytest.raises(RuntimeError, match="simulated crash"):
            ProjectionRunner(ledger, db, [_Exploding(fail_at)]).catch_up(batch_size=10_000)
        db.close()
        # rows written before the failure in that batch were rolled back with the position
        assert canonical_dump(path) == before
        assert positions(path) == {"read_model": head}
        db = open_views(path)
        assert catch_up(ledger, db, batch_size=7, projections=[ReadModelProjection()]) == (
            new_head - head
        )
        assert catch_up(ledger, db, projections=[ReadModelProjection()]) == 0
        db.close()
        con = sqlite3.connect(path)
        assert con.execute("SELECT count(*) FROM contributions").fetchone()[0] == _count(
            ledger, "ContributionRecorded",
        )
        assert con.execute("SELECT count(*) FROM costs").fetchone()[0] == _count(
            ledger, "ContributionRecorded",
        ) + _count(ledger, "ProviderCallFailed")
        con.close()
        full = tmp_path / "full.views.sqlite"
        db = open_views(full)
        catch_up(ledger, db, projections=[ReadModelProjection()])
        db.close()
        assert canonical_dump(path) == canonical_dump(full)


class _ReadModelBumped(ReadModelProjection):
    version = ReadModelProjection.version + 1


def test_version_bump_rebuilds_from_zero(tmp_path: Path) -> None:
    path = tmp_path / "v.views.sqlite"
    with Ledger(str(tmp_path / "ledger.sqlite")) as ledger:
        random_sessions(ledger, 5, 2)
        head = ledger.max_notification_id()
        db = open_views(path)
        catch_up(ledger, db)
        reference = canonical_dump(path)
        # tamper with a view row: a rebuild must restore it from the events
        db.execute("UPDATE contributions SET content = 'tampered'")
        db.conn.commit()
        others = [p for p in DEFAULT_PROJECTIONS if p.name != "read_model"]
        runner = ProjectionRunner(ledger, db, [_ReadModelBumped(), *others])
        st_ = {s.name: s for s in runner.status()}
        assert st_["read_model"].stored_version == ReadModelProjection.version
        assert st_["read_model"].lag == head
        assert st_["dissent"].lag == 0
        assert runner.catch_up() == head
        db.close()
        assert canonical_dump(path) == reference
        con = sqlite3.connect(path)
        versions = dict(con.execute("SELECT name, version FROM _projections"))
        assert versions["read_model"] == _ReadModelBumped.version
        con.close()


def test_rebuild_one_projection_and_status(tmp_path: Path) -> None:
    path = tmp_path / "v.views.sqlite"
    with Ledger(str(tmp_path / "ledger.sqlite")) as ledger:
        random_sessions(ledger, 9, 2)
        head = ledger.max_notification_id()
        db = open_views(path)
        assert all(s.stored_version is None and s.lag == head for s in status(ledger, db))
        catch_up(ledger, db, batch_size=50)
        reference = canonical_dump(path)
        assert all(s.lag == 0 and s.position == head for s in status(ledger, db))
        db.execute("DELETE FROM divergence_events")
        db.conn.commit()
        assert rebuild(ledger, db, ["dissent"]) == head
        assert canonical_dump(path) == reference
        db.close()


def test_progress_callback_reports_each_committed_batch(tmp_path: Path) -> None:
    """``on_batch`` hears every committed batch: the counts add up to what was applied, and a
    rebuild reports the whole log again."""
    with Ledger(str(tmp_path / "ledger.sqlite")) as ledger:
        random_sessions(ledger, 13, 2)
        head = ledger.max_notification_id()
        db = open_views(tmp_path / "p.views.sqlite")
        runner = ProjectionRunner(ledger, db)
        seen: list[int] = []
        assert runner.catch_up(batch_size=7, on_batch=seen.append) == head
        assert sum(seen) == head
        assert all(0 < k <= 7 for k in seen)
        seen.clear()
        assert runner.catch_up(batch_size=7, on_batch=seen.append) == 0
        assert seen == []
        assert runner.rebuild(batch_size=50, on_batch=seen.append) == head
        assert sum(seen) == head
        db.close()


def test_runner_on_both_backends(store_url: str, tmp_path: Path) -> None:
    """The same runner pulls from SQLite and PostgreSQL and gives the same rows."""
    with Ledger(store_url) as ledger:
        random_sessions(ledger, 11, 2)
        db = open_views(tmp_path / "a.views.sqlite")
        runner = ProjectionRunner(ledger, db)
        n = 0
        while True:
            k = runner.catch_up(batch_size=17, max_batches=1)
            if not k:
                break
            n += k
        assert n == ledger.max_notification_id()
        db.close()
        assert canonical_dump(tmp_path / "a.views.sqlite") == _full_rebuild(
            ledger, tmp_path / "b.views.sqlite",
        )
    with Ledger(str(tmp_path / "ref.sqlite")) as ref:
        random_sessions(ref, 11, 2)
        # same sessions built on a SQLite file give the same read model
        assert _full_rebuild(ref, tmp_path / "c.views.sqlite") == canonical_dump(
            tmp_path / "a.views.sqlite",
        )


def test_contribution_search_follows_the_rows(tmp_path: Path) -> None:
    with Ledger(str(tmp_path / "ledger.sqlite")) as ledger:
        random_sessions(ledger, 3, 3)
        db = open_views(tmp_path / "v.views.sqlite")
        catch_up(ledger, db)
        expected = sorted(
            f"{e.session_id}:{e.position}"
            for e in ledger.notifications(limit=100_000)
            if e.type == "ContributionRecorded" and "caching" in e.data["response"]["content"]
        )
        got = sorted(r["id"] for r in db["contributions"].search("caching"))  # type: ignore[union-attr]
        assert got == expected
        assert got
        rebuild(ledger, db)
        got2 = sorted(r["id"] for r in db["contributions"].search("caching"))  # type: ignore[union-attr]
        assert got2 == expected
        db.close()


def test_state_rows_summarise_the_ledger_state(tmp_path: Path) -> None:
    with Ledger(str(tmp_path / "ledger.sqlite")) as ledger:
        ids = random_sessions(ledger, 21, 2)
        db = open_views(tmp_path / "v.views.sqlite")
        catch_up(ledger, db, batch_size=9)
        for sid in ids:
            row: dict[str, Any] = db["session_states"].get(sid)  # type: ignore[union-attr]
            state = ledger.state(sid)
            assert row == summary_row(state)
            events = list(ledger.events(sid))
            assert row["version"] == len(events) == state.version
            assert row["head_hash"] == events[-1].hash
            assert row["contributions"] == sum(
                1 for e in events if e.type == "ContributionRecorded"
            )
            assert row["failures"] == sum(1 for e in events if e.type == "ProviderCallFailed")
            assert row["rounds"] == sum(1 for e in events if e.type == "RoundStarted")
            assert row["status"] == state.status.value
            assert row["phase"] == state.phase
            s = db["sessions"].get(sid)  # type: ignore[union-attr]
            assert s["events"] == ledger.head_version(ledger.resolve(sid))
            assert (s["tokens_in"], s["cost_usd"]) == (row["tokens_in"], row["cost_usd"])
        db.close()


class _FullStateV1(Projection):
    """What ``session_state`` version 1 wrote: the whole state as JSON."""

    name = "session_state"
    version = 1
    tables = ("session_states",)

    def flush(self, touched: Sequence[SessionState]) -> Sequence[Op]:
        return [Put("session_states", {
            "id": s.id, "status": s.status.value, "iteration": s.iteration,
            "version": s.version, "head_hash": s.head_hash,
            "state_json": canonical_json(s.model_dump(mode="json")),
        }) for s in touched]


def test_old_full_state_rows_are_replaced_by_summaries(tmp_path: Path) -> None:
    """A read model built before m004 (session_state version 1) is migrated and refolded."""
    path = tmp_path / "v.views.sqlite"
    with Ledger(str(tmp_path / "ledger.sqlite")) as ledger:
        ids = random_sessions(ledger, 8, 2)
        head = ledger.max_notification_id()
        old = Database(sqlite3.connect(path))
        MIGRATIONS.apply(old, stop_before="m004_session_summary")
        ProjectionRunner(ledger, old, [_FullStateV1()]).catch_up()
        assert old.execute("SELECT count(*) FROM session_states").fetchone()[0] == len(ids)
        old.close()
        db = open_views(path)
        cols = {c.name for c in db["session_states"].columns}  # type: ignore[union-attr]
        assert "state_json" not in cols
        assert "open_divergences" in cols
        runner = ProjectionRunner(ledger, db, [SessionStateProjection()])
        assert [s.lag for s in runner.status()] == [head]
        assert runner.catch_up() == head
        for sid in ids:
            assert db["session_states"].get(sid) == summary_row(  # type: ignore[union-attr]
                ledger.state(sid),
            )
        db.close()


def test_a_vote_line_reads_as_stance_score_and_the_first_line_of_its_reason() -> None:
    b = SessionBuilder().start("Votes", participants=[
        Participant(name=n, model=f"openai/{n}") for n in ("A", "B", "C")])
    b.round(RoundKind.CONVERGENCE, iteration=1, participants="ABC")
    b.answer("A", '{"agrees": true, "score": 86, "reasoning": "Clear.\\nMore."}')
    b.answer("B", '{"agrees": false, "score": 20}')
    b.answer("C", "I cannot agree yet.")
    b.vote("A", agrees=True, stance=Stance.STRONGLY_AGREE, score=86, reasoning="Clear.\nMore.")
    b.vote("B", agrees=False, score=20, concerns=("no retention policy", "other"))
    b.vote("C", agrees=False, score=35)
    state = b.aggregate.state
    got = [contribution_line(state, c).preview for c in state.rounds[-1].contributions]
    assert got == [
        "vote: strongly_agree (86) — Clear.",
        "vote: disagree (20) — no retention policy",
        "vote: disagree (35) — I cannot agree yet.",
    ]


def test_a_vote_whose_score_contradicts_its_stance_says_so_on_its_line() -> None:
    b = SessionBuilder().start("Votes", participants=[
        Participant(name=n, model=f"openai/{n}") for n in ("A", "B", "C")])
    b.round(RoundKind.CONVERGENCE, iteration=1, participants="ABC")
    for name in "ABC":
        b.answer(name, "My vote.")
    b.vote("A", agrees=True, score=12, reasoning="Fine.")
    b.vote("B", agrees=False, score=95, reasoning="No.")
    b.vote("C", agrees=True, stance=Stance.PARTIAL, score=5, reasoning="Half.")
    state = b.aggregate.state
    got = [contribution_line(state, c).preview for c in state.rounds[-1].contributions]
    assert got == [
        "vote: agree (12) — Fine. ⚠ agree with score 12: the score says it does not agree",
        "vote: disagree (95) — No. ⚠ disagree with score 95: the score says it agrees",
        "vote: partial (5) — Half.",
    ]
    assert contradicting_votes(state.rounds[-1]) == (
        "A: agree with score 12: the score says it does not agree",
        "B: disagree with score 95: the score says it agrees",
    )


def test_the_live_view_warns_of_a_vote_whose_score_contradicts_its_stance() -> None:
    out = io.StringIO()
    view = LiveView(Console(file=out, width=200, force_terminal=False))
    view.handle(RoundComplete(round=3, kind=RoundKind.CONVERGENCE, session_cost_usd=0.0,
                              score=0.5, majority_agrees=True,
                              contradictions=("A: agree with score 12: the score says it "
                                              "does not agree",)))
    assert out.getvalue().splitlines()[-1] == (
        "  warning: vote of A: agree with score 12: the score says it does not agree")
