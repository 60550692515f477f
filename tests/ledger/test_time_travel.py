"""Time travel: the state as of any past position equals the live state at that moment.

A hypothesis-driven driver turns random choices into *valid* command sequences (participants
joining, rounds of every kind, contributions, repairs, critiques, opinions, votes, parse
failures, failed calls, divergences and their lifecycle, pauses, questions, human input,
rewinds, techniques, budgets, a terminal status and a seal), saving after some commands and
batching others. Every command records exactly one event, so the live state after each
command is the expected state at that position.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from forge_ledger.domain import events as ev
from forge_ledger.domain.aggregate import Deliberation
from forge_ledger.domain.values import (
    ConvergenceVote,
    Critique,
    DivergenceStatus,
    DivergentPosition,
    Opinion,
    Participant,
    RoundKind,
    RoundStatus,
    SessionStatus,
    Stance,
)
from forge_ledger.errors import UsageError
from forge_ledger.ledger import Ledger
from forge_ledger.testing import SessionBuilder

Command = Callable[[], object]
"""One aggregate command (what it returns does not matter)."""
T0 = datetime(2026, 1, 1, tzinfo=UTC)
"""Where the sessions' clock starts (``FixedStepClock``'s default)."""

PROGRESS = frozenset(
    {"start_round", "contribute", "complete_round", "vote", "evaluate", "resume", "rewind",
     "finish", "seal", "opinion", "critique"},
)
"""Commands that move a session forward; favoured so sequences reach late states."""


class Driver:
    """Picks a valid next command for the current state from a random choice."""

    def __init__(self, b: SessionBuilder) -> None:
        self.b = b
        self.agg = b.aggregate
        self.clock = b.clock
        self.div_counter = 0
        self.joined = len(self.agg.state.participants)

    def options(self, r: int) -> list[tuple[str, Command]]:
        a, s, c = self.agg, self.agg.state, self.clock
        names = s.participant_names
        opts: list[tuple[str, Command]] = []
        if s.status.terminal:
            if s.seal is None:
                opts.append(("seal", lambda: a.seal(at=c.now())))
            return opts
        rnd = s.open_round
        if rnd is None and s.status is not SessionStatus.PAUSED:
            kind = list(RoundKind)[r % len(RoundKind)]
            it = max(s.iteration, 1) + (r // 7) % 2
            who = names[: 1 + r % len(names)]
            targets = {p: names[(i + 1) % len(names)] for i, p in enumerate(who)} if (
                kind in (RoundKind.CRITIQUE, RoundKind.RESPONSE) and len(names) > 1
            ) else {}
            opts.append((
                "start_round",
                lambda: a.start_round(
                    kind=kind, iteration=it, participants=who, targets=targets, at=c.now(),
                    depth=r % 3, focus=f"focus {r}",
                ),
            ))
            opts.append(("start_round", opts[-1][1]))  # rounds are the common case
        if rnd is not None:
            missing = [p for p in rnd.missing if p not in rnd.contributors]
            if missing:
                who1 = missing[r % len(missing)]
                opts.append(("contribute", lambda: self.b.answer(who1, f"text {r}",
                                                                 round=rnd.number)))
                opts.append(("contribute", opts[-1][1]))
                opts.append(("fail", lambda: a.record_failure(
                    ev.ProviderCallFailed(
                        round=rnd.number, participant=who1, attempt=1, model="m",
                        error_type="RateLimitError", message="429", retryable=True,
                        will_retry=True, cost_usd=0.0001,
                    ),
                    at=c.now(),
                )))
            done = [x for x in rnd.contributions if x.purpose == "answer"]
            if done:
                ctb = done[r % len(done)]
                name = ctb.participant
                opts.append(("repair", lambda: self.b.answer(name, "an answer", round=rnd.number,
                                                             purpose="repair")))
                latest = rnd.contribution_of(name)
                assert latest is not None
                if rnd.kind is RoundKind.CONVERGENCE and not any(
                    x.vote for x in rnd.contributions if x.participant == name
                ):
                    opts.append(("vote", lambda: a.record_vote(
                        round=rnd.number, participant=name,
                        vote=ConvergenceVote(agrees=r % 3 != 0, score=r % 101),
                        at=c.now(),
                    )))
                if latest.critique is None and len(names) > 1:
                    target = next(n for n in names if n != name)
                    opts.append(("critique", lambda: a.record_critique(
                        round=rnd.number, participant=name,
                        critique=Critique(target=target, weaknesses=(f"w{r}",), score=r % 101),
                        at=c.now(),
                    )))
                if latest.opinion is None:
                    opts.append(("opinion", lambda: a.record_opinion(
                        round=rnd.number, participant=name,
                        opinion=Opinion(stance=list(Stance)[r % 5], concerns=(f"c{r}",)),
                        at=c.now(),
                    )))
                opts.append(("parse_failed", lambda: a.record_parse_failure(
                    round=rnd.number, participant=name, expected="vote", error="bad", at=c.now(),
                )))
            abst = list(rnd.missing)
            opts.append(("complete_round", lambda: a.complete_round(
                round=rnd.number, at=c.now(), abstained=abst[: r % 2],
            )))
        last = s.last_round
        if (
            last is not None
            and last.kind is RoundKind.CONVERGENCE
            and last.status is RoundStatus.COMPLETE
            and not any(x.round == last.number for x in s.convergence)
        ):
            opts.append(("evaluate", lambda: a.evaluate_convergence(
                ev.ConvergenceEvaluated(
                    round=last.number, iteration=last.iteration, score=(r % 11) / 10,
                    converged=False, majority_agrees=r % 2 == 0, agree=1, disagree=1,
                    partial=0, threshold=0.85,
                ),
                at=c.now(),
            )))
        if len(names) > 1:
            self_div = f"d{self.div_counter}"

            def detect() -> None:
                self.div_counter += 1
                a.detect_divergence(
                    ev.DivergenceDetected(
                        divergence_id=self_div, round=max(len(s.rounds), 1), topic=f"t{r}",
                        positions=(
                            DivergentPosition(participant=names[0], position="x",
                                              stance=Stance.AGREE),
                            DivergentPosition(participant=names[1], position="y",
                                              stance=Stance.STRONGLY_DISAGREE),
                        ),
                    ),
                    at=c.now(),
                )

            opts.append(("diverge", detect))
        open_divs = s.open_divergences
        if open_divs:
            d = open_divs[r % len(open_divs)]
            status = [DivergenceStatus.ADDRESSED, DivergenceStatus.RESOLVED,
                      DivergenceStatus.WITHDRAWN, DivergenceStatus.OVERRULED][r % 4]
            opts.append(("divergence_change", lambda: a.change_divergence(
                d.id, status, at=c.now(), note=f"n{r}", by="alice",
            )))
        if s.status is SessionStatus.PAUSED:
            opts.append(("resume", lambda: a.resume(at=c.now(), reason="go on")))
            opts.append(("resume", opts[-1][1]))
        else:
            opts.append(("pause", lambda: a.pause(reason="check", at=c.now(),
                                                  questions=[f"q{r}?"] if r % 2 else [])))
        opts.append(("ask", lambda: a.ask([f"why {r}?"], at=c.now())))
        opts.append(("human", lambda: a.human_input(
            author="alice", text=f"h{r}", at=c.now(), kind=["answer", "note", "steer"][r % 3],
        )))
        if rnd is None and s.iteration >= 2:
            steps = 1 + r % min(5, s.iteration - 1)
            opts.append(("rewind", lambda: a.rewind(steps, at=c.now())))
        opts.append(("technique", lambda: a.suggest_technique(
            ev.TechniqueSuggested(iteration=s.iteration, technique_slug="5whys",
                                  category="analysis", suggested_reason="weak clarity"),
            at=c.now(),
        )))
        if r % 3 == 1:

            def join() -> None:
                self.joined += 1
                a.join(_participant(self.joined - 1), at=c.now())

            opts.append(("join", join))
        if r % 13 == 0:
            opts.append(("budget", lambda: a.exhaust_budget(budget="cost", limit=1.0,
                                                            spent=1.5, at=c.now())))
        if r % 19 == 0:
            status_t = [SessionStatus.CONVERGED, SessionStatus.COMPLETE,
                        SessionStatus.ABORTED, SessionStatus.TIMED_OUT][r % 4]
            opts.append(("finish", lambda: a.finish(status_t, at=c.now(), reason="done")))
        return opts


def _participant(i: int) -> Participant:
    return Participant(name=f"p{i}", model=f"openai/p{i}")


def _start() -> SessionBuilder:
    """Start with no participants, then one join per command: one event per step."""
    return SessionBuilder().start("Time travel", participants=[])


def _check_sequence(path: str, n_participants: int, steps: list[tuple[int, bool]]) -> list[str]:
    """Drive a session through ``steps``, then compare every past state; returns the kinds."""
    b = _start()
    agg, clock = b.aggregate, b.clock
    expected: dict[int, dict[str, Any]] = {1: agg.state.model_dump()}
    times: dict[int, datetime] = {1: agg.state.updated_at}
    for p in map(_participant, range(n_participants)):
        agg.join(p, at=clock.now())
        expected[agg.version] = agg.state.model_dump()
        times[agg.version] = agg.state.updated_at
    driver = Driver(b)
    driver.joined = n_participants
    kinds: list[str] = []
    with Ledger(path, snapshot_interval=3) as snap:
        snap.save(agg)
        for choice, save_now in steps:
            opts = driver.options(choice)
            if not opts:
                break
            progress = [o for o in opts if o[0] in PROGRESS]
            pool = progress if progress and choice % 10 < 6 else opts
            kind, command = pool[(choice // 10) % len(pool)]
            before = agg.version
            command()
            assert agg.version == before + 1, kind
            kinds.append(kind)
            expected[agg.version] = agg.state.model_dump()
            times[agg.version] = agg.state.updated_at
            if save_now:
                snap.save(agg)
        snap.save(agg)
        head = agg.version
        assert snap.head_version(agg.id) == head
        with Ledger(path, snapshot_interval=0, create=False) as plain:
            for v in range(1, head + 1):
                assert snap.state(agg.id, at_event=v).model_dump() == expected[v], (v, kinds)
                assert plain.state(agg.id, at_event=v).model_dump() == expected[v], (v, kinds)
            # at_time: an event's own timestamp and any moment before the next one select it
            for v in (1, head // 2 or 1, head):
                assert plain.state(agg.id, at_time=times[v]).version == v
                between = times[v] + timedelta(milliseconds=500)
                assert snap.state(agg.id, at_time=between).model_dump() == expected[v]
            with pytest.raises(UsageError, match="had not started"):
                plain.state(agg.id, at_time=times[1] - timedelta(seconds=1))
            assert plain.state(agg.id).model_dump() == expected[head]
    return kinds


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    n_participants=st.integers(2, 4),
    steps=st.lists(st.tuples(st.integers(0, 10_000), st.booleans()), min_size=1, max_size=60),
)
@pytest.mark.slow
def test_state_at_every_position_equals_live_state(
    tmp_path_factory: pytest.TempPathFactory, n_participants: int,
    steps: list[tuple[int, bool]],
) -> None:
    path = str(tmp_path_factory.mktemp("tt") / "ledger.sqlite")
    for kind in _check_sequence(path, n_participants, steps):
        event(kind)


@pytest.mark.slow
def test_long_seeded_sequences_cover_every_command(tmp_path: Path) -> None:
    """Long walks (seeded, reproducible) reach what short generated ones rarely do."""
    seen: set[str] = set()
    for seed in range(3):
        rng = random.Random(seed)
        steps = [(rng.randrange(10_000), rng.random() < 0.3) for _ in range(120)]
        seen.update(_check_sequence(str(tmp_path / f"walk{seed}.sqlite"), 3, steps))
    expected = {
        "start_round", "contribute", "fail", "repair", "vote", "critique", "opinion",
        "parse_failed", "complete_round", "evaluate", "diverge", "divergence_change", "pause",
        "resume", "ask", "human", "rewind", "technique", "join", "budget", "finish", "seal",
    }
    assert expected <= seen, expected - seen


# --------------------------------------------------------------------------- iterations


def _three_iterations(ledger: Ledger) -> tuple[Deliberation, dict[int, int]]:
    """Three times: p0 and p1 draft, alice notes, both agree; returns where each ends."""
    b = SessionBuilder(store=ledger).start("Ledger test topic", participants=["p0", "p1"])
    everyone = dict.fromkeys(b.names, "an answer")
    ends: dict[int, int] = {}
    for it in (1, 2, 3):
        b.round(RoundKind.DRAFT, iteration=it, answers=everyone, close=True)
        b.human(f"after {it}", author="alice", kind="note")
        b.round(RoundKind.CONVERGENCE, iteration=it, answers=everyone,
                votes=dict.fromkeys(b.names, True), close=True)
        ends[it] = b.aggregate.version
        b.save()
    return b.aggregate, ends


@pytest.mark.parametrize("interval", [0, 3])
def test_at_iteration_selects_the_end_of_that_iteration(sqlite_url: str, interval: int) -> None:
    with Ledger(sqlite_url, snapshot_interval=interval) as ledger:
        agg, ends = _three_iterations(ledger)
        for it, end in ends.items():
            assert ledger.position_of_iteration(agg.id, it) == end
            state = ledger.state(agg.id, at_iteration=it)
            assert state.version == end
            assert state.iteration == it
            assert [r.iteration for r in state.rounds] == [i for i in range(1, it + 1)
                                                           for _ in (0, 1)]
            assert state.human_inputs[-1].text == f"after {it}"
        with pytest.raises(UsageError, match="no iteration 4"):
            ledger.state(agg.id, at_iteration=4)
        with pytest.raises(UsageError, match="numbered from 1"):
            ledger.state(agg.id, at_iteration=0)


def test_at_time_needs_a_timezone(sqlite_url: str) -> None:
    with Ledger(sqlite_url) as ledger:
        agg, _ = _three_iterations(ledger)
        with pytest.raises(UsageError, match="needs a timezone"):
            ledger.state(agg.id, at_time=datetime(2026, 1, 1))
        late = ledger.state(agg.id, at_time=T0 + timedelta(days=1))
        assert late.version == agg.version


def test_state_at_past_position_then_fork_keeps_parent_intact(sqlite_url: str) -> None:
    with Ledger(sqlite_url) as ledger:
        agg, ends = _three_iterations(ledger)
        past = ledger.state(agg.id, at_iteration=1)
        fork = Deliberation.fork(session_id=uuid.uuid4(), parent=past, at=T0 + timedelta(hours=1))
        ledger.save(fork)
        loaded = ledger.get(fork.id).state
        assert loaded.fork_origin is not None
        assert loaded.fork_origin.parent_position == ends[1]
        assert loaded.iteration == 1
        assert len(loaded.rounds) == 2
        assert ledger.state(agg.id).version == agg.version
        summaries = {s.id: s for s in ledger.summaries()}
        assert summaries[str(fork.id)].parent_id == str(agg.id)
