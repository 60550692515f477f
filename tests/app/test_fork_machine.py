"""State machine: a session read any way, and any fork of it, is the same session.

Hypothesis drives the aggregate's commands (start, iterations of rounds with answers, votes
and dissent, human input, pause, resume, back, fork) over sessions saved to a real store with
a snapshot every few events. After each step, every session touched agrees with itself read
every way: the live aggregate's state = the state the store loads (the newest snapshot and
the events after it) = the fold of its events from the first, never a snapshot = the state
time travel gives at each new position. A fork made at any position k where no round is open
is its parent at k and before it, for the state and every view that compares positions
(dissent log, consensus trail, EMS, provenance, document), and then goes its own way under
the same checks. Run on a SQLite file and on PostgreSQL.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from forge_ledger.clock import FixedStepClock, SequentialIds
from forge_ledger.domain.state import SessionState
from forge_ledger.domain.values import DivergenceStatus, SessionStatus, Stance
from forge_ledger.ledger import Ledger, verify_session
from forge_ledger.projections.consensus import consensus_trail
from forge_ledger.projections.dissent import dissent_log
from forge_ledger.projections.document import fold_lineage
from forge_ledger.projections.session_state import fold_events
from forge_ledger.projections.show_view import session_ems
from forge_ledger.records.lineage import fork
from forge_ledger.testing import SessionBuilder
from support.postgres import PG_BASE, drop_schema
from support.stories import Iteration, continued, play, story

FORK_DIFFERS = {
    "id", "fork_origin", "created_at", "head_hash", "status", "status_reason", "seal",
    "budget_exhausted",
}
"""What a fork's state at its fork point differs from its parent's in, by design (see
:mod:`forge_ledger.records.lineage`); this machine overrides no config or participant."""

SNAPSHOT_INTERVAL = 5
"""Small, so that loads and time travel start from snapshots as often as from the first
event."""

MAX_SESSIONS = 4
"""A session and three forks (of it or of each other): the steps left go to the sessions'
own commands."""

stances = st.sampled_from(list(Stance))


def _dump(state: SessionState, *, exclude: set[str] | None = None) -> dict[str, Any]:
    return state.model_dump(mode="json", exclude=exclude)  # type: ignore[no-any-return]


def _views(state: SessionState) -> dict[str, Any]:
    """Every view that compares positions, as of ``state``."""
    return {
        "state": _dump(state, exclude=FORK_DIFFERS),
        "dissent": [d.as_json() for d in dissent_log(state, include_closed=True)],
        "trail": [t.as_json() for t in consensus_trail(state)],
        "ems": session_ems(state),
        "provenance": fold_lineage(state).model_dump(mode="json"),
        "document": state.latest_text,
    }


def _playable(s: SessionState) -> bool:
    """A story can go on (a fork made before everyone joined has no one to play it)."""
    return len(s.participants) == 3 and s.status in (
        SessionStatus.INITIALIZED, SessionStatus.IN_PROGRESS
    )


def _running(s: SessionState) -> bool:
    return s.status is SessionStatus.IN_PROGRESS


def _live(s: SessionState) -> bool:
    return not s.status.terminal


def _paused(s: SessionState) -> bool:
    return s.status is SessionStatus.PAUSED


def _rewindable(s: SessionState) -> bool:
    return _live(s) and s.open_round is None and s.iteration >= 2


class ForkMachine(RuleBasedStateMachine):
    """Sessions and their forks in one store (see the module docstring)."""

    url: str = ""

    def __init__(self) -> None:
        super().__init__()
        self.ledger = Ledger(self.url, snapshot_interval=SNAPSHOT_INTERVAL)
        self.clock = FixedStepClock()
        self.ids = SequentialIds("machine")
        self.builders: dict[uuid.UUID, SessionBuilder] = {}
        self.folded: dict[uuid.UUID, dict[int, dict[str, Any]]] = {}
        """Session → position → the fold of its events up to there (checked when saved)."""
        self.touched: set[uuid.UUID] = set()
        self.divergences = 0

    # ------------------------------------------------------------------ commands

    def _sessions(self, eligible: Callable[[SessionState], bool]) -> list[uuid.UUID]:
        return sorted(sid for sid, b in self.builders.items() if eligible(b.state))

    def _pick(self, data: st.DataObject, eligible: Callable[[SessionState], bool]) -> (
        SessionBuilder
    ):
        return self.builders[data.draw(st.sampled_from(self._sessions(eligible)))]

    @initialize()
    def start(self) -> None:
        b = story(self.ids.new_id(), clock=self.clock)
        b.store = self.ledger
        self._save(b)

    @precondition(lambda self: self._sessions(_playable))
    @rule(
        data=st.data(),
        votes=st.fixed_dictionaries({"alice": stances, "bob": stances, "carol": stances}),
        critiques=st.booleans(),
        synthesis=st.booleans(),
        dissent=st.sampled_from([None, "bob", "carol"]),
        close=st.sampled_from([None, DivergenceStatus.ADDRESSED, DivergenceStatus.RESOLVED]),
        note=st.none() | st.sampled_from(["keep bursts small", "prefer the leaky bucket"]),
    )
    def iterate(
        self,
        data: st.DataObject,
        votes: dict[str, Stance],
        critiques: bool,
        synthesis: bool,
        dissent: str | None,
        close: DivergenceStatus | None,
        note: str | None,
    ) -> None:
        """One iteration of rounds, answers and a vote, opening and settling dissent."""
        b = self._pick(data, _playable)
        opened = []
        if dissent is not None:
            self.divergences += 1
            opened.append((f"m{self.divergences}", f"point {self.divergences}", dissent))
        settled = [] if close is None or not b.state.open_divergences else [
            (b.state.open_divergences[0].id, close, "alice")
        ]
        play(b, Iteration(votes=votes, critiques=critiques, synthesis=synthesis,
                          open_dissent=opened, close_dissent=settled, human_note=note))
        self._save(b)

    @precondition(lambda self: self._sessions(_running))
    @rule(data=st.data(), questions=st.booleans())
    def pause(self, data: st.DataObject, questions: bool) -> None:
        b = self._pick(data, _running)
        b.aggregate.pause(reason="waiting for a person", at=self.clock.now(),
                          questions=("Which bucket?",) if questions else ())
        self._save(b)

    @precondition(lambda self: self._sessions(_live))
    @rule(data=st.data(), text=st.sampled_from(["use a token bucket", "cap bursts at 10"]))
    def human(self, data: st.DataObject, text: str) -> None:
        b = self._pick(data, _live)
        b.human(text, author="dana")
        self._save(b)

    @precondition(lambda self: self._sessions(_paused))
    @rule(data=st.data())
    def resume(self, data: st.DataObject) -> None:
        b = self._pick(data, _paused)
        b.resume(reason="a person answered")
        self._save(b)

    @precondition(lambda self: self._sessions(_rewindable))
    @rule(data=st.data(), steps=st.integers(min_value=1, max_value=3))
    def back(self, data: st.DataObject, steps: int) -> None:
        b = self._pick(data, _rewindable)
        b.rewind(min(steps, b.state.iteration - 1))
        self._save(b)

    @precondition(lambda self: self._sessions(_rewindable))
    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        b = self._pick(data, _rewindable)
        b.finish(SessionStatus.COMPLETE, reason="enough")
        self._save(b)

    @precondition(lambda self: len(self.builders) < MAX_SESSIONS)
    @rule(data=st.data(), pick=st.floats(min_value=0, max_value=1))
    def fork_at(self, data: st.DataObject, pick: float) -> None:
        """Fork where no round is open, then check the fork is its parent up to there."""
        sid = data.draw(st.sampled_from(sorted(self.builders)))
        legal = [
            p for p, s in sorted(self.folded[sid].items())
            if not any(r["status"] == "in_progress" for r in s["rounds"][-1:])
        ]
        k = legal[min(int(pick * len(legal)), len(legal) - 1)]
        fid = fork(self.ledger, sid, clock=self.clock, ids=self.ids, at_event=k)
        mine, theirs = self.ledger.state(fid, at_event=k), self.ledger.state(sid, at_event=k)
        assert _views(mine) == _views(theirs)
        assert _dump(theirs) == self.folded[sid][k]
        assert self.ledger.head_version(fid) == k
        for j in (1, k // 2, k - 1):  # before the fork point, the fork is its parent
            if 1 <= j < k:
                before = self.ledger.state(fid, at_event=j)
                assert (before.id, before.fork_origin) == (str(fid), mine.fork_origin)
                assert _dump(before, exclude={"id", "fork_origin"}) == {
                    key: v for key, v in self.folded[sid][j].items()
                    if key not in ("id", "fork_origin")
                }
                assert _views(before) == _views(self.ledger.state(sid, at_event=j))
        b = continued(self.ledger.get(fid))
        b.clock, b.ids, b.store = self.clock, self.ids, self.ledger
        self.builders[fid] = b
        # up to the fork point, the fork reads as its parent, under its own name
        named = {"id": str(fid), "fork_origin": _dump(mine)["fork_origin"]}
        self.folded[fid] = {
            j: {**state, **named} for j, state in self.folded[sid].items() if j < k
        }
        self.folded[fid][k] = _dump(mine)
        self.touched.add(fid)

    @rule(data=st.data())
    def travel(self, data: st.DataObject) -> None:
        """Any session as of any position it recorded reads as it was folded then. The
        invariant checks the latest positions; this step any, and it is always possible, so a
        machine whose sessions have all ended with no fork left to make still has a step to
        take (hypothesis refuses a machine with none)."""
        sid = data.draw(st.sampled_from(sorted(self.builders)))
        position = data.draw(st.sampled_from(sorted(self.folded[sid])))
        assert _dump(self.ledger.state(sid, at_event=position)) == self.folded[sid][position]

    # ------------------------------------------------------------------ checks

    def _save(self, b: SessionBuilder) -> None:
        before = self.ledger.head_version(b.id) if b.id in self.folded else 0
        b.save()
        sid = b.id
        self.builders[sid] = b
        head = self.ledger.head_version(sid)
        new = range(max(before + 1, self._first(sid)), head + 1)
        folded = self.folded.setdefault(sid, {})
        for position, aggregate in self.ledger.folded_at(sid, list(new)):
            folded[position] = _dump(aggregate.state)
        assert new, "every command records an event"
        assert sorted(folded)[-len(new):] == list(new)
        self.touched.add(sid)

    def _first(self, sid: uuid.UUID) -> int:
        return next(iter(self.ledger.events(sid))).position

    @invariant()
    def every_reading_agrees(self) -> None:
        """live = loaded (snapshot) = folded from the first event = time-travelled."""
        for sid in self.touched:
            live = _dump(self.builders[sid].state)
            assert _dump(self.ledger.state(sid)) == live
            assert _dump(fold_events(self.ledger.events(sid))) == live
            head = self.ledger.head_version(sid)
            assert self.folded[sid][head] == live
            for position in sorted(self.folded[sid])[-SNAPSHOT_INTERVAL * 3:]:
                travelled = self.ledger.state(sid, at_event=position)
                assert _dump(travelled) == self.folded[sid][position]
            assert verify_session(self.ledger, sid, snapshots=True).ok
        self.touched.clear()

    def teardown(self) -> None:
        self.ledger.close()


SETTINGS = settings(
    max_examples=10,
    stateful_step_count=18,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@pytest.mark.slow
def test_fork_machine_on_sqlite() -> None:
    with tempfile.TemporaryDirectory() as d:
        counter = iter(range(10**6))

        class OnSqlite(ForkMachine):
            def __init__(self) -> None:
                self.url = str(Path(d) / f"machine-{next(counter)}.sqlite")
                super().__init__()

        run_state_machine_as_test(OnSqlite, settings=SETTINGS)


@pytest.mark.postgres
@pytest.mark.slow
def test_fork_machine_on_postgres() -> None:
    schemas: list[str] = []

    class OnPostgres(ForkMachine):
        def __init__(self) -> None:
            schemas.append(f"fl_machine_{uuid.uuid4().hex[:12]}")
            self.url = f"{PG_BASE}?schema={schemas[-1]}"
            super().__init__()

    try:
        run_state_machine_as_test(OnPostgres, settings=SETTINGS)
    finally:
        for schema in schemas:
            drop_schema(schema)
