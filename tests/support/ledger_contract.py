"""What every store backend must do, as a reusable test case (in the manner of eventsourcing's
recorder test cases): a test module subclasses :class:`LedgerContract` once per backend with a
``store_url`` fixture naming a fresh store; pytest runs every ``test_`` method for each.
"""

from __future__ import annotations

import itertools
import uuid

import pytest

from forge_ledger.clock import Clock, FixedStepClock, SequentialIds, UuidIds
from forge_ledger.domain.aggregate import Deliberation
from forge_ledger.domain.values import RoundKind, SessionStatus
from forge_ledger.errors import SessionNotFoundError, UsageError
from forge_ledger.ledger import Ledger
from forge_ledger.ledger.eventsourcing_app import snapshot_due
from forge_ledger.testing import SessionBuilder

NAMES = ("p0", "p1", "p2")
TOPIC = "Ledger test topic"


def grown_session(
    ledger: Ledger, *, iterations: int = 2, clock: Clock | None = None,
) -> Deliberation:
    """p0, p1 and p2 draft and then all agree, ``iterations`` times, saved round by round as
    the orchestrator saves (a random id, so a store may hold several)."""
    b = SessionBuilder(clock=clock or FixedStepClock(), ids=UuidIds(), store=ledger)
    b.start(TOPIC, participants=NAMES).save()
    everyone = dict.fromkeys(NAMES, "an answer")
    for it in range(1, iterations + 1):
        b.round(RoundKind.DRAFT, iteration=it, answers=everyone, close=True).save()
        b.round(RoundKind.CONVERGENCE, iteration=it, answers=everyone,
                votes=dict.fromkeys(NAMES, True), close=True).save()
    return b.aggregate


class LedgerContract:
    """Subclass it with a ``Test`` name and a ``store_url`` fixture."""

    def test_save_and_get(self, store_url: str) -> None:
        with Ledger(store_url) as ledger:
            agg = grown_session(ledger)
            loaded = ledger.get(agg.id)
            assert loaded.version == agg.version
            assert loaded.state.model_dump() == agg.state.model_dump()
            assert ledger.head_version(agg.id) == agg.version
            # a second connection sees the same
        with Ledger(store_url, create=False) as again:
            assert again.get(str(agg.id)).state.model_dump() == agg.state.model_dump()

    def test_get_unknown_session(self, store_url: str) -> None:
        with Ledger(store_url) as ledger:
            with pytest.raises(SessionNotFoundError):
                ledger.get(uuid.uuid4())
            with pytest.raises(SessionNotFoundError):
                ledger.head_version(uuid.uuid4())

    def test_resolve_full_id_and_prefixes(self, store_url: str) -> None:
        a_id = uuid.UUID("aaaa1111-0000-4000-8000-000000000001")
        b_id = uuid.UUID("aaaa2222-0000-4000-8000-000000000002")
        with Ledger(store_url) as ledger:
            for sid in (a_id, b_id):
                SessionBuilder(store=ledger).start(
                    TOPIC, participants=NAMES[:2], session_id=sid,
                ).save()
            assert ledger.resolve(str(a_id)) == a_id
            assert ledger.resolve(a_id.hex) == a_id
            assert ledger.resolve(str(a_id).upper()) == a_id
            assert ledger.resolve("aaaa1") == a_id
            assert ledger.resolve("AAAA2222-00") == b_id
            with pytest.raises(SessionNotFoundError, match="matches 2 sessions") as amb:
                ledger.resolve("aaaa")
            assert amb.value.hint == "type more characters of the id"
            assert f"aaaa1111 ({TOPIC}), aaaa2222 ({TOPIC})" in str(amb.value)
            assert ledger.resolve("@") == ledger.resolve("last") == b_id
            assert ledger.resolve("@~1") == a_id
            with pytest.raises(SessionNotFoundError, match="the store holds 2 session"):
                ledger.resolve("@~2")
            with pytest.raises(SessionNotFoundError, match="is not a session reference"):
                ledger.resolve("@~x")
            with pytest.raises(SessionNotFoundError, match="no session matches 'bbbb'"):
                ledger.resolve("bbbb")
            with pytest.raises(SessionNotFoundError):
                ledger.resolve(str(uuid.uuid4()))
            with pytest.raises(SessionNotFoundError, match="empty session id"):
                ledger.resolve("  ")

    def test_summaries(self, store_url: str) -> None:
        clock = FixedStepClock()
        with Ledger(store_url) as ledger:
            a = grown_session(ledger, iterations=1, clock=clock)
            b = (SessionBuilder(clock=clock, store=ledger)
                 .start("Second topic", participants=NAMES[:2])
                 .finish(SessionStatus.ABORTED, reason="stop")
                 .save().aggregate)
            summaries = {s.id: s for s in ledger.summaries()}
            assert set(summaries) == {str(a.id), str(b.id)}
            sa, sb = summaries[str(a.id)], summaries[str(b.id)]
            assert (sa.status, sa.iteration, sa.events) == ("in_progress", 1, a.version)
            assert (sb.status, sb.title, sb.slug, sb.events) == (
                "aborted", "Second topic", "second-topic", b.version,
            )
            assert sb.as_json()["parent_id"] is None
            assert ledger.session_ids() == [a.id, b.id]

    def test_events_are_ordered_and_decoded(self, store_url: str) -> None:
        with Ledger(store_url) as ledger:
            agg = grown_session(ledger)
            events = list(ledger.events(agg.id))
            assert [e.position for e in events] == list(range(1, agg.version + 1))
            assert events[0].type == "SessionStarted"
            assert [e.type for e in events[1:4]] == ["ParticipantJoined"] * 3
            for prev, cur in itertools.pairwise(events):
                assert cur.prev_hash == prev.hash
                assert cur.timestamp >= prev.timestamp
            for e in events:
                assert e.type == type(e.payload()).TYPE
            assert events[-1].hash == agg.state.head_hash
            tail = list(ledger.events(str(agg.id), after=5, upto=8))
            assert [e.position for e in tail] == [6, 7, 8]

    def test_notifications_across_sessions(self, store_url: str) -> None:
        clock, session_ids = FixedStepClock(), SequentialIds()
        with Ledger(store_url) as ledger:
            a = SessionBuilder(clock=clock, ids=session_ids, store=ledger)
            b = SessionBuilder(clock=clock, ids=session_ids, store=ledger)
            a.start(TOPIC, participants=NAMES[:2]).save()
            b.start(TOPIC, participants=NAMES[:1]).save()
            a.round(RoundKind.DRAFT, iteration=1, answers=dict.fromkeys(NAMES[:2], "an answer"),
                    close=True).save()
            notes = ledger.notifications()
            expected_total = a.aggregate.version + b.aggregate.version
            assert len(notes) == expected_total
            ids = [n.notification_id for n in notes]
            assert ids == sorted(ids)
            assert len(set(ids)) == len(ids)
            assert ledger.max_notification_id() == ids[-1]
            # interleaving by commit order: a's creation, then b's, then a's round
            order = [(n.session_id, n.position) for n in notes]
            assert order[:3] == [(str(a.id), p) for p in range(1, 4)]
            assert order[3:5] == [(str(b.id), 1), (str(b.id), 2)]
            # paging resumes after a notification id
            first = ledger.notifications(limit=3)
            rest = ledger.notifications(after=first[-1].notification_id or 0)
            assert [n.notification_id for n in first + rest] == ids
            started = ledger.notifications(topics=["forge_ledger:SessionStarted"])
            assert [n.session_id for n in started] == [str(a.id), str(b.id)]

    def test_snapshots_are_used_and_state_equal(self, store_url: str) -> None:
        with Ledger(store_url, snapshot_interval=4) as snap, Ledger(
            store_url, snapshot_interval=0,
        ) as plain:
            agg = grown_session(snap, iterations=3)
            assert snap.app.snapshots is not None
            assert plain.app.snapshots is None
            snapshots = list(snap.app.snapshots.get(agg.id))
            assert snapshots, "expected snapshots with a small interval"
            # taken at the head of a save that reached a multiple of the interval
            assert all(s.originator_version >= 4 for s in snapshots)
            for s in snapshots:
                assert s.state["state"] == plain.state(agg.id, at_event=s.originator_version)
            assert max(s.originator_version for s in snapshots) > agg.version - 4
            for v in range(1, agg.version + 1):
                assert snap.get(agg.id, version=v).state.model_dump() == plain.get(
                    agg.id, version=v,
                ).state.model_dump()
            assert snap.state(agg.id).model_dump() == agg.state.model_dump()

    def test_every_snapshot_is_kept(self, store_url: str) -> None:
        """A snapshot at the head of each save that reaches a multiple of the interval, and
        all of them kept (they share their blocks): time travel folds at most one interval
        plus one save, and answers the folded state at every position."""
        with Ledger(store_url, snapshot_interval=3) as snap, Ledger(
            store_url, snapshot_interval=0,
        ) as plain:
            agg = grown_session(snap, iterations=4)
            assert snap.app.snapshots is not None
            versions = sorted(s.originator_version for s in snap.app.snapshots.get(agg.id))
            longest_save = 8  # a round: started, three answers, three votes, completed
            for m in range(3, agg.version + 1, 3):
                assert any(m <= v < m + longest_save for v in versions), (m, versions)
            assert all(snapshot_due(m, 3) for m in range(3, agg.version + 1, 3))
            assert len(versions) > agg.version // longest_save
            for v in range(1, agg.version + 1):
                assert snap.state(agg.id, at_event=v) == plain.state(agg.id, at_event=v)

    def test_state_selectors_are_exclusive(self, store_url: str) -> None:
        with Ledger(store_url) as ledger:
            agg = SessionBuilder(store=ledger).start(TOPIC, participants=NAMES[:2]).save().aggregate
            with pytest.raises(UsageError, match="at most one"):
                ledger.state(agg.id, at_event=1, at_iteration=1)
            with pytest.raises(UsageError, match="out of range"):
                ledger.state(agg.id, at_event=agg.version + 1)
