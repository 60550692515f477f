"""The Deliberation aggregate: status transitions and every invariant it must refuse."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from forge_ledger.clock import FixedStepClock
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
    SessionConfig,
    SessionStatus,
    Stance,
    TokenCount,
    Topic,
)
from forge_ledger.errors import InvariantViolation
from forge_ledger.testing import SessionBuilder

NAMES = ("p0", "p1", "p2")
ANSWER = {"tokens": TokenCount(input=12, output=34), "cost_usd": 0.0015}
"""What every answer of these sessions costs."""


@pytest.fixture
def clock() -> FixedStepClock:
    return FixedStepClock()


@pytest.fixture
def b(clock: FixedStepClock) -> SessionBuilder:
    """A session of p0, p1 and p2, told on the test's clock."""
    return SessionBuilder(clock=clock, answer_defaults=ANSWER).start(
        "Ledger test topic", participants=NAMES,
    )


@pytest.fixture
def agg(b: SessionBuilder) -> Deliberation:
    return b.aggregate


def _round(b: SessionBuilder, kind: RoundKind, iteration: int,
           who: tuple[str, ...] = NAMES) -> int:
    """Everyone in ``who`` answers (and agrees, in a convergence round); the round closes."""
    votes = dict.fromkeys(who, True) if kind is RoundKind.CONVERGENCE else None
    b.round(kind, iteration=iteration, answers=dict.fromkeys(who, "an answer"), votes=votes,
            close=True)
    return b.round_number


def _divergence(div_id: str = "d1", round_no: int = 1) -> ev.DivergenceDetected:
    return ev.DivergenceDetected(
        divergence_id=div_id,
        round=round_no,
        topic="storage engine",
        positions=(
            DivergentPosition(participant="p0", position="sqlite", stance=Stance.AGREE),
            DivergentPosition(participant="p1", position="postgres", stance=Stance.DISAGREE),
        ),
    )


# --------------------------------------------------------------------------- happy path


def test_lifecycle_transitions(b: SessionBuilder, agg: Deliberation, clock: FixedStepClock) -> None:
    assert agg.state.status is SessionStatus.INITIALIZED
    assert agg.version == 4  # started + 3 joined
    _round(b, RoundKind.DRAFT, 1)
    assert agg.state.status is SessionStatus.IN_PROGRESS
    agg.pause(reason="questions", at=clock.now(), questions=["which db?"])
    assert agg.state.status is SessionStatus.PAUSED
    assert agg.state.pending_questions == ["which db?"]
    agg.resume(at=clock.now())
    assert agg.state.status is SessionStatus.IN_PROGRESS
    _round(b, RoundKind.CONVERGENCE, 1)
    agg.finish(SessionStatus.CONVERGED, at=clock.now(), reason="all agree", score=0.9)
    assert agg.state.status is SessionStatus.CONVERGED
    assert agg.state.status_reason == "all agree"
    head = agg.state.head_hash
    agg.seal(at=clock.now())
    assert agg.state.seal is not None
    assert agg.state.seal["root_hash"] == head


def test_state_accumulates_tokens_and_cost(b: SessionBuilder, agg: Deliberation) -> None:
    _round(b, RoundKind.DRAFT, 1)
    assert agg.state.tokens.input == 3 * 12
    assert agg.state.tokens.output == 3 * 34
    assert agg.state.cost_usd == pytest.approx(3 * 0.0015)


def test_duplicate_participant_names_refused(clock: FixedStepClock) -> None:
    p0 = Participant(name="p0", model="openai/p0")
    with pytest.raises(InvariantViolation, match="unique"):
        Deliberation.start(
            session_id=uuid.uuid4(),
            topic=Topic(title="x"),
            config=SessionConfig(),
            participants=[p0, p0],
            at=clock.now(),
        )


def test_join_twice_refused(agg: Deliberation, clock: FixedStepClock) -> None:
    with pytest.raises(InvariantViolation, match="already joined"):
        agg.join(Participant(name="p0", model="openai/p0"), at=clock.now())


# --------------------------------------------------------------------------- rounds


def test_contributing_to_a_round_that_is_not_open(
    b: SessionBuilder, agg: Deliberation, clock: FixedStepClock,
) -> None:
    with pytest.raises(InvariantViolation, match="no round is open"):
        b.answer("p0", "an answer", round=1)
    n = _round(b, RoundKind.DRAFT, 1)
    with pytest.raises(InvariantViolation, match="no round is open"):
        b.answer("p0", "an answer", round=n)
    agg.start_round(kind=RoundKind.CRITIQUE, iteration=1, participants=["p0"], at=clock.now())
    with pytest.raises(InvariantViolation, match="round 2 is open"):
        b.answer("p0", "an answer", round=1)


def test_unknown_participant(b: SessionBuilder, agg: Deliberation, clock: FixedStepClock) -> None:
    with pytest.raises(InvariantViolation, match="unknown participant 'ghost'"):
        agg.start_round(kind=RoundKind.DRAFT, iteration=1, participants=["ghost"], at=clock.now())
    n = agg.start_round(kind=RoundKind.DRAFT, iteration=1, participants=["p0"], at=clock.now())
    with pytest.raises(InvariantViolation, match="unknown participant 'ghost'") as info:
        b.answer("ghost", "an answer", round=n, model="openai/ghost")
    assert "p0, p1, p2" in str(info.value)


def test_participant_not_expected_in_round(
    b: SessionBuilder, agg: Deliberation, clock: FixedStepClock,
) -> None:
    n = agg.start_round(
        kind=RoundKind.DRAFT, iteration=1, participants=["p0", "p1"], at=clock.now(),
    )
    with pytest.raises(InvariantViolation, match="'p2' is not a contributor of round 1"):
        b.answer("p2", "an answer", round=n)


def test_duplicate_answer(b: SessionBuilder, agg: Deliberation, clock: FixedStepClock) -> None:
    n = agg.start_round(kind=RoundKind.DRAFT, iteration=1, participants=["p0"], at=clock.now())
    b.answer("p0", "an answer", round=n)
    with pytest.raises(InvariantViolation, match="already contributed"):
        b.answer("p0", "an answer", round=n)
    # a repair attempt is allowed once an answer exists, and only then
    b.answer("p0", "an answer", round=n, purpose="repair")
    assert len(agg.state.rounds[0].contributions) == 2


def test_repair_without_answer(b: SessionBuilder, agg: Deliberation, clock: FixedStepClock) -> None:
    n = agg.start_round(kind=RoundKind.DRAFT, iteration=1, participants=["p0"], at=clock.now())
    with pytest.raises(InvariantViolation, match="no answer to repair"):
        b.answer("p0", "an answer", round=n, purpose="repair")


def test_second_vote_in_one_convergence_round(
    b: SessionBuilder, agg: Deliberation, clock: FixedStepClock,
) -> None:
    n = agg.start_round(
        kind=RoundKind.CONVERGENCE, iteration=1, participants=["p0"], at=clock.now(),
    )
    b.answer("p0", "an answer", round=n)
    agg.record_vote(round=n, participant="p0", vote=ConvergenceVote(agrees=True), at=clock.now())
    with pytest.raises(InvariantViolation, match="already voted in round 1"):
        agg.record_vote(
            round=n, participant="p0", vote=ConvergenceVote(agrees=False), at=clock.now(),
        )


def test_vote_outside_convergence_round(
    b: SessionBuilder, agg: Deliberation, clock: FixedStepClock,
) -> None:
    n = agg.start_round(kind=RoundKind.DRAFT, iteration=1, participants=["p0"], at=clock.now())
    b.answer("p0", "an answer", round=n)
    with pytest.raises(InvariantViolation, match="not a vote"):
        agg.record_vote(
            round=n, participant="p0", vote=ConvergenceVote(agrees=True), at=clock.now(),
        )


def test_vote_without_contribution(agg: Deliberation, clock: FixedStepClock) -> None:
    n = agg.start_round(
        kind=RoundKind.CONVERGENCE, iteration=1, participants=["p0"], at=clock.now(),
    )
    with pytest.raises(InvariantViolation, match="has not contributed yet"):
        agg.record_vote(
            round=n, participant="p0", vote=ConvergenceVote(agrees=True), at=clock.now(),
        )


def test_self_critique_refused_at_round_start(agg: Deliberation, clock: FixedStepClock) -> None:
    with pytest.raises(InvariantViolation, match="'p0' may not critique its own work"):
        agg.start_round(
            kind=RoundKind.CRITIQUE,
            iteration=1,
            participants=["p0", "p1"],
            targets={"p0": "p0", "p1": "p0"},
            at=clock.now(),
        )


def test_self_critique_refused_when_recorded(
    b: SessionBuilder, agg: Deliberation, clock: FixedStepClock,
) -> None:
    n = agg.start_round(
        kind=RoundKind.CRITIQUE, iteration=1, participants=["p1"], targets={"p1": "p0"},
        at=clock.now(),
    )
    b.answer("p1", "an answer", round=n)
    with pytest.raises(InvariantViolation, match="'p1' may not critique its own work"):
        agg.record_critique(
            round=n, participant="p1", critique=Critique(target="p1"), at=clock.now(),
        )
    agg.record_critique(round=n, participant="p1", critique=Critique(target="p0"), at=clock.now())
    with pytest.raises(InvariantViolation, match="already has a critique"):
        agg.record_critique(
            round=n, participant="p1", critique=Critique(target="p0"), at=clock.now(),
        )


def test_second_opinion_refused(
    b: SessionBuilder, agg: Deliberation, clock: FixedStepClock,
) -> None:
    n = agg.start_round(kind=RoundKind.RESPONSE, iteration=1, participants=["p0"], at=clock.now())
    b.answer("p0", "an answer", round=n)
    agg.record_opinion(
        round=n, participant="p0", opinion=Opinion(stance=Stance.AGREE), at=clock.now(),
    )
    with pytest.raises(InvariantViolation, match="already has an opinion"):
        agg.record_opinion(
            round=n, participant="p0", opinion=Opinion(stance=Stance.AGREE), at=clock.now(),
        )


def test_start_round_while_one_is_open(agg: Deliberation, clock: FixedStepClock) -> None:
    agg.start_round(kind=RoundKind.DRAFT, iteration=1, participants=["p0"], at=clock.now())
    with pytest.raises(InvariantViolation, match="round 1 is still open"):
        agg.start_round(kind=RoundKind.CRITIQUE, iteration=1, participants=["p1"], at=clock.now())


def test_start_round_while_paused(agg: Deliberation, clock: FixedStepClock) -> None:
    agg.pause(reason="wait", at=clock.now())
    with pytest.raises(InvariantViolation, match="paused") as info:
        agg.start_round(kind=RoundKind.DRAFT, iteration=1, participants=["p0"], at=clock.now())
    assert info.value.hint == "resume it first"
    with pytest.raises(InvariantViolation, match="already paused"):
        agg.pause(reason="again", at=clock.now())


def test_resume_when_not_paused(agg: Deliberation, clock: FixedStepClock) -> None:
    with pytest.raises(InvariantViolation, match="not paused"):
        agg.resume(at=clock.now())


def test_round_needs_participants(agg: Deliberation, clock: FixedStepClock) -> None:
    with pytest.raises(InvariantViolation, match="at least one participant"):
        agg.start_round(kind=RoundKind.DRAFT, iteration=1, participants=[], at=clock.now())


def test_convergence_evaluation_rules(
    b: SessionBuilder, agg: Deliberation, clock: FixedStepClock,
) -> None:
    result = ev.ConvergenceEvaluated(
        round=1, iteration=1, score=0.9, converged=True, majority_agrees=True,
        agree=3, disagree=0, partial=0, threshold=0.85,
    )
    with pytest.raises(InvariantViolation, match="not a convergence round"):
        agg.evaluate_convergence(result, at=clock.now())
    n = agg.start_round(
        kind=RoundKind.CONVERGENCE, iteration=1, participants=["p0"], at=clock.now(),
    )
    with pytest.raises(InvariantViolation, match="not complete yet"):
        agg.evaluate_convergence(result, at=clock.now())
    b.answer("p0", "an answer", round=n)
    agg.complete_round(round=n, at=clock.now())
    agg.evaluate_convergence(result, at=clock.now())
    with pytest.raises(InvariantViolation, match="already evaluated"):
        agg.evaluate_convergence(result, at=clock.now())


# --------------------------------------------------------------------------- divergences


def test_divergence_lifecycle_and_overrule_needs_author(
    agg: Deliberation, clock: FixedStepClock,
) -> None:
    agg.detect_divergence(_divergence(), at=clock.now())
    with pytest.raises(InvariantViolation, match="already exists"):
        agg.detect_divergence(_divergence(), at=clock.now())
    with pytest.raises(InvariantViolation, match="overrule needs the human author"):
        agg.change_divergence("d1", DivergenceStatus.OVERRULED, at=clock.now())
    with pytest.raises(InvariantViolation, match="unknown divergence 'nope'"):
        agg.change_divergence("nope", DivergenceStatus.RESOLVED, at=clock.now())
    with pytest.raises(InvariantViolation, match="cannot change a divergence to open"):
        agg.change_divergence("d1", DivergenceStatus.OPEN, at=clock.now())
    agg.change_divergence("d1", DivergenceStatus.OVERRULED, at=clock.now(), by="alice")
    assert agg.state.divergence("d1") is not None
    assert agg.state.divergence("d1").status is DivergenceStatus.OVERRULED  # type: ignore[union-attr]
    with pytest.raises(InvariantViolation, match="already overruled"):
        agg.change_divergence("d1", DivergenceStatus.RESOLVED, at=clock.now())


def test_divergence_positions_need_members(agg: Deliberation, clock: FixedStepClock) -> None:
    bad = ev.DivergenceDetected(
        divergence_id="d2", round=1, topic="t",
        positions=(DivergentPosition(participant="ghost", position="x", stance=Stance.AGREE),),
    )
    with pytest.raises(InvariantViolation, match="unknown participant 'ghost'"):
        agg.detect_divergence(bad, at=clock.now())


# --------------------------------------------------------------------------- rewind


def _iterations(b: SessionBuilder, count: int) -> None:
    for it in range(1, count + 1):
        _round(b, RoundKind.DRAFT, it, who=("p0",))


@pytest.mark.parametrize("steps", [0, 6, -1])
def test_rewind_steps_bounds(
    b: SessionBuilder, agg: Deliberation, clock: FixedStepClock, steps: int,
) -> None:
    _iterations(b, 7)
    with pytest.raises(InvariantViolation, match="back takes 1 to 5 iterations"):
        agg.rewind(steps, at=clock.now())


def test_rewind_never_below_iteration_one(
    b: SessionBuilder, agg: Deliberation, clock: FixedStepClock,
) -> None:
    _iterations(b, 3)
    with pytest.raises(InvariantViolation, match="iteration 1 is the earliest") as info:
        agg.rewind(3, at=clock.now())
    assert info.value.hint == "use back 2 or less"
    assert agg.rewind(2, at=clock.now()) == 1
    assert agg.state.iteration == 1
    assert [r.superseded for r in agg.state.rounds] == [False, True, True]
    assert agg.state.status is SessionStatus.PAUSED


def test_rewind_with_open_round(
    b: SessionBuilder, agg: Deliberation, clock: FixedStepClock,
) -> None:
    _iterations(b, 2)
    agg.start_round(kind=RoundKind.DRAFT, iteration=3, participants=["p0"], at=clock.now())
    with pytest.raises(InvariantViolation, match="while a round is open"):
        agg.rewind(1, at=clock.now())


def test_human_input_needs_author(agg: Deliberation, clock: FixedStepClock) -> None:
    with pytest.raises(InvariantViolation, match="needs an author"):
        agg.human_input(author="  ", text="hello", at=clock.now())


# --------------------------------------------------------------------------- terminal


@pytest.mark.parametrize(
    "status",
    [SessionStatus.CONVERGED, SessionStatus.COMPLETE, SessionStatus.ABORTED,
     SessionStatus.TIMED_OUT],
)
def test_finish_rejects_non_terminal_and_records_terminal(
    agg: Deliberation, clock: FixedStepClock, status: SessionStatus,
) -> None:
    agg.finish(status, at=clock.now())
    assert agg.state.status is status


@pytest.mark.parametrize("status", [SessionStatus.PAUSED, SessionStatus.IN_PROGRESS])
def test_finish_with_non_terminal_status(
    agg: Deliberation, clock: FixedStepClock, status: SessionStatus,
) -> None:
    with pytest.raises(InvariantViolation, match="not a terminal status"):
        agg.finish(status, at=clock.now())


_AFTER_TERMINAL: dict[str, Callable[[Deliberation, Any], object]] = {
    "join": lambda a, t: a.join(Participant(name="p4", model="openai/p4"), at=t),
    "start_round": lambda a, t: a.start_round(
        kind=RoundKind.DRAFT, iteration=2, participants=["p0"], at=t,
    ),
    "record_contribution": lambda a, t: SessionBuilder.of(a, clock=FixedStepClock(t)).answer(
        "p0", "an answer", round=1,
    ),
    "record_failure": lambda a, t: a.record_failure(
        ev.ProviderCallFailed(
            round=1, participant="p0", attempt=1, model="m", error_type="RateLimitError",
            message="429", retryable=True, will_retry=True,
        ),
        at=t,
    ),
    "record_critique": lambda a, t: a.record_critique(
        round=1, participant="p0", critique=Critique(target="p1"), at=t,
    ),
    "record_opinion": lambda a, t: a.record_opinion(
        round=1, participant="p0", opinion=Opinion(stance=Stance.AGREE), at=t,
    ),
    "record_vote": lambda a, t: a.record_vote(
        round=1, participant="p0", vote=ConvergenceVote(agrees=True), at=t,
    ),
    "record_parse_failure": lambda a, t: a.record_parse_failure(
        round=1, participant="p0", expected="vote", error="bad json", at=t,
    ),
    "complete_round": lambda a, t: a.complete_round(round=1, at=t),
    "evaluate_convergence": lambda a, t: a.evaluate_convergence(
        ev.ConvergenceEvaluated(
            round=1, iteration=1, score=1.0, converged=True, majority_agrees=True,
            agree=1, disagree=0, partial=0, threshold=0.5,
        ),
        at=t,
    ),
    "detect_divergence": lambda a, t: a.detect_divergence(_divergence("d9"), at=t),
    "change_divergence": lambda a, t: a.change_divergence(
        "d1", DivergenceStatus.RESOLVED, at=t,
    ),
    "pause": lambda a, t: a.pause(reason="x", at=t),
    "resume": lambda a, t: a.resume(at=t),
    "ask": lambda a, t: a.ask(["q?"], at=t),
    "human_input": lambda a, t: a.human_input(author="alice", text="hi", at=t),
    "rewind": lambda a, t: a.rewind(1, at=t),
    "suggest_technique": lambda a, t: a.suggest_technique(
        ev.TechniqueSuggested(
            iteration=1, technique_slug="5whys", category="analysis", suggested_reason="r",
        ),
        at=t,
    ),
    "exhaust_budget": lambda a, t: a.exhaust_budget(budget="cost", limit=1, spent=2, at=t),
    "finish": lambda a, t: a.finish(SessionStatus.COMPLETE, at=t),
}


@pytest.mark.parametrize("command", sorted(_AFTER_TERMINAL))
@pytest.mark.parametrize("terminal", [SessionStatus.CONVERGED, SessionStatus.ABORTED])
def test_every_command_refused_after_terminal_status(
    b: SessionBuilder, clock: FixedStepClock, command: str, terminal: SessionStatus,
) -> None:
    agg = b.round(RoundKind.CONVERGENCE, iteration=1, answers={"p0": "an answer"}).aggregate
    agg.detect_divergence(_divergence(), at=clock.now())
    agg.finish(terminal, at=clock.now())
    version = agg.version
    with pytest.raises(InvariantViolation, match=f"session .* is {terminal.value}") as info:
        _AFTER_TERMINAL[command](agg, clock.now())
    assert info.value.hint == "fork it to continue from an earlier point"
    assert agg.version == version
    assert not [e for e in agg.collect_events() if e.originator_version > version]


def test_terminal_closes_open_round(
    b: SessionBuilder, agg: Deliberation, clock: FixedStepClock,
) -> None:
    n = agg.start_round(
        kind=RoundKind.DRAFT, iteration=1, participants=["p0", "p1"], at=clock.now(),
    )
    b.answer("p0", "an answer", round=n)
    agg.finish(SessionStatus.TIMED_OUT, at=clock.now())
    assert agg.state.open_round is None
    assert agg.state.rounds[0].status.value == "complete"


def test_seal_before_terminal_and_twice(agg: Deliberation, clock: FixedStepClock) -> None:
    with pytest.raises(InvariantViolation, match="only a finished session can be sealed"):
        agg.seal(at=clock.now())
    agg.finish(SessionStatus.COMPLETE, at=clock.now())
    agg.seal(at=clock.now())
    with pytest.raises(InvariantViolation, match="already sealed"):
        agg.seal(at=clock.now())


def test_refused_command_records_nothing(b: SessionBuilder, agg: Deliberation) -> None:
    before = agg.version
    with pytest.raises(InvariantViolation):
        b.answer("p0", "an answer", round=1)
    assert agg.version == before
