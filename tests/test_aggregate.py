"""The Deliberation aggregate: status transitions and every invariant it must refuse."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from forge_ledger.domain import events as ev
from forge_ledger.domain.aggregate import Deliberation
from forge_ledger.domain.values import (
    ConvergenceVote,
    Critique,
    DivergenceStatus,
    DivergentPosition,
    Opinion,
    RoundKind,
    SessionConfig,
    SessionStatus,
    Stance,
    Topic,
)
from forge_ledger.errors import InvariantViolation
from support.strategies import StepClock, contribute, make_participants, new_session, run_round


@pytest.fixture
def clock() -> StepClock:
    return StepClock()


@pytest.fixture
def agg(clock: StepClock) -> Deliberation:
    return new_session(3, clock=clock)


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


def test_lifecycle_transitions(agg: Deliberation, clock: StepClock) -> None:
    assert agg.state.status is SessionStatus.INITIALIZED
    assert agg.version == 4  # started + 3 joined
    run_round(agg, RoundKind.DRAFT, 1, clock)
    assert agg.state.status is SessionStatus.IN_PROGRESS
    agg.pause(reason="questions", at=clock(), questions=["which db?"])
    assert agg.state.status is SessionStatus.PAUSED
    assert agg.state.pending_questions == ["which db?"]
    agg.resume(at=clock())
    assert agg.state.status is SessionStatus.IN_PROGRESS
    run_round(agg, RoundKind.CONVERGENCE, 1, clock)
    agg.finish(SessionStatus.CONVERGED, at=clock(), reason="all agree", score=0.9)
    assert agg.state.status is SessionStatus.CONVERGED
    assert agg.state.status_reason == "all agree"
    head = agg.state.head_hash
    agg.seal(at=clock())
    assert agg.state.seal is not None
    assert agg.state.seal["root_hash"] == head


def test_state_accumulates_tokens_and_cost(agg: Deliberation, clock: StepClock) -> None:
    run_round(agg, RoundKind.DRAFT, 1, clock)
    assert agg.state.tokens.input == 3 * 12
    assert agg.state.tokens.output == 3 * 34
    assert agg.state.cost_usd == pytest.approx(3 * 0.0015)


def test_duplicate_participant_names_refused(clock: StepClock) -> None:
    people = make_participants(2)
    with pytest.raises(InvariantViolation, match="unique"):
        Deliberation.start(
            session_id=uuid.uuid4(),
            topic=Topic(title="x"),
            config=SessionConfig(),
            participants=[people[0], people[0]],
            at=clock(),
        )


def test_join_twice_refused(agg: Deliberation, clock: StepClock) -> None:
    with pytest.raises(InvariantViolation, match="already joined"):
        agg.join(make_participants(1)[0], at=clock())


# --------------------------------------------------------------------------- rounds


def test_contributing_to_a_round_that_is_not_open(agg: Deliberation, clock: StepClock) -> None:
    with pytest.raises(InvariantViolation, match="no round is open"):
        contribute(agg, 1, "p0", clock())
    n = run_round(agg, RoundKind.DRAFT, 1, clock)
    with pytest.raises(InvariantViolation, match="no round is open"):
        contribute(agg, n, "p0", clock())
    agg.start_round(kind=RoundKind.CRITIQUE, iteration=1, participants=["p0"], at=clock())
    with pytest.raises(InvariantViolation, match="round 2 is open"):
        contribute(agg, 1, "p0", clock())


def test_unknown_participant(agg: Deliberation, clock: StepClock) -> None:
    with pytest.raises(InvariantViolation, match="unknown participant 'ghost'"):
        agg.start_round(kind=RoundKind.DRAFT, iteration=1, participants=["ghost"], at=clock())
    n = agg.start_round(kind=RoundKind.DRAFT, iteration=1, participants=["p0"], at=clock())
    with pytest.raises(InvariantViolation, match="unknown participant 'ghost'") as info:
        contribute(agg, n, "ghost", clock())
    assert "p0, p1, p2" in str(info.value)


def test_participant_not_expected_in_round(agg: Deliberation, clock: StepClock) -> None:
    n = agg.start_round(kind=RoundKind.DRAFT, iteration=1, participants=["p0", "p1"], at=clock())
    with pytest.raises(InvariantViolation, match="'p2' is not a contributor of round 1"):
        contribute(agg, n, "p2", clock())


def test_duplicate_answer(agg: Deliberation, clock: StepClock) -> None:
    n = agg.start_round(kind=RoundKind.DRAFT, iteration=1, participants=["p0"], at=clock())
    contribute(agg, n, "p0", clock())
    with pytest.raises(InvariantViolation, match="already contributed"):
        contribute(agg, n, "p0", clock())
    # a repair attempt is allowed once an answer exists, and only then
    contribute(agg, n, "p0", clock(), purpose="repair")
    assert len(agg.state.rounds[0].contributions) == 2


def test_repair_without_answer(agg: Deliberation, clock: StepClock) -> None:
    n = agg.start_round(kind=RoundKind.DRAFT, iteration=1, participants=["p0"], at=clock())
    with pytest.raises(InvariantViolation, match="no answer to repair"):
        contribute(agg, n, "p0", clock(), purpose="repair")


def test_second_vote_in_one_convergence_round(agg: Deliberation, clock: StepClock) -> None:
    n = agg.start_round(kind=RoundKind.CONVERGENCE, iteration=1, participants=["p0"], at=clock())
    contribute(agg, n, "p0", clock())
    agg.record_vote(round=n, participant="p0", vote=ConvergenceVote(agrees=True), at=clock())
    with pytest.raises(InvariantViolation, match="already voted in round 1"):
        agg.record_vote(round=n, participant="p0", vote=ConvergenceVote(agrees=False), at=clock())


def test_vote_outside_convergence_round(agg: Deliberation, clock: StepClock) -> None:
    n = agg.start_round(kind=RoundKind.DRAFT, iteration=1, participants=["p0"], at=clock())
    contribute(agg, n, "p0", clock())
    with pytest.raises(InvariantViolation, match="not a vote"):
        agg.record_vote(round=n, participant="p0", vote=ConvergenceVote(agrees=True), at=clock())


def test_vote_without_contribution(agg: Deliberation, clock: StepClock) -> None:
    n = agg.start_round(kind=RoundKind.CONVERGENCE, iteration=1, participants=["p0"], at=clock())
    with pytest.raises(InvariantViolation, match="has not contributed yet"):
        agg.record_vote(round=n, participant="p0", vote=ConvergenceVote(agrees=True), at=clock())


def test_self_critique_refused_at_round_start(agg: Deliberation, clock: StepClock) -> None:
    with pytest.raises(InvariantViolation, match="'p0' may not critique its own work"):
        agg.start_round(
            kind=RoundKind.CRITIQUE,
            iteration=1,
            participants=["p0", "p1"],
            targets={"p0": "p0", "p1": "p0"},
            at=clock(),
        )


def test_self_critique_refused_when_recorded(agg: Deliberation, clock: StepClock) -> None:
    n = agg.start_round(
        kind=RoundKind.CRITIQUE, iteration=1, participants=["p1"], targets={"p1": "p0"}, at=clock(),
    )
    contribute(agg, n, "p1", clock())
    with pytest.raises(InvariantViolation, match="'p1' may not critique its own work"):
        agg.record_critique(round=n, participant="p1", critique=Critique(target="p1"), at=clock())
    agg.record_critique(round=n, participant="p1", critique=Critique(target="p0"), at=clock())
    with pytest.raises(InvariantViolation, match="already has a critique"):
        agg.record_critique(round=n, participant="p1", critique=Critique(target="p0"), at=clock())


def test_second_opinion_refused(agg: Deliberation, clock: StepClock) -> None:
    n = agg.start_round(kind=RoundKind.RESPONSE, iteration=1, participants=["p0"], at=clock())
    contribute(agg, n, "p0", clock())
    agg.record_opinion(round=n, participant="p0", opinion=Opinion(stance=Stance.AGREE), at=clock())
    with pytest.raises(InvariantViolation, match="already has an opinion"):
        agg.record_opinion(
            round=n, participant="p0", opinion=Opinion(stance=Stance.AGREE), at=clock(),
        )


def test_start_round_while_one_is_open(agg: Deliberation, clock: StepClock) -> None:
    agg.start_round(kind=RoundKind.DRAFT, iteration=1, participants=["p0"], at=clock())
    with pytest.raises(InvariantViolation, match="round 1 is still open"):
        agg.start_round(kind=RoundKind.CRITIQUE, iteration=1, participants=["p1"], at=clock())


def test_start_round_while_paused(agg: Deliberation, clock: StepClock) -> None:
    agg.pause(reason="wait", at=clock())
    with pytest.raises(InvariantViolation, match="paused") as info:
        agg.start_round(kind=RoundKind.DRAFT, iteration=1, participants=["p0"], at=clock())
    assert info.value.hint == "resume it first"
    with pytest.raises(InvariantViolation, match="already paused"):
        agg.pause(reason="again", at=clock())


def test_resume_when_not_paused(agg: Deliberation, clock: StepClock) -> None:
    with pytest.raises(InvariantViolation, match="not paused"):
        agg.resume(at=clock())


def test_round_needs_participants(agg: Deliberation, clock: StepClock) -> None:
    with pytest.raises(InvariantViolation, match="at least one participant"):
        agg.start_round(kind=RoundKind.DRAFT, iteration=1, participants=[], at=clock())


def test_convergence_evaluation_rules(agg: Deliberation, clock: StepClock) -> None:
    result = ev.ConvergenceEvaluated(
        round=1, iteration=1, score=0.9, converged=True, majority_agrees=True,
        agree=3, disagree=0, partial=0, threshold=0.85,
    )
    with pytest.raises(InvariantViolation, match="not a convergence round"):
        agg.evaluate_convergence(result, at=clock())
    n = agg.start_round(kind=RoundKind.CONVERGENCE, iteration=1, participants=["p0"], at=clock())
    with pytest.raises(InvariantViolation, match="not complete yet"):
        agg.evaluate_convergence(result, at=clock())
    contribute(agg, n, "p0", clock())
    agg.complete_round(round=n, at=clock())
    agg.evaluate_convergence(result, at=clock())
    with pytest.raises(InvariantViolation, match="already evaluated"):
        agg.evaluate_convergence(result, at=clock())


# --------------------------------------------------------------------------- divergences


def test_divergence_lifecycle_and_overrule_needs_author(
    agg: Deliberation, clock: StepClock,
) -> None:
    agg.detect_divergence(_divergence(), at=clock())
    with pytest.raises(InvariantViolation, match="already exists"):
        agg.detect_divergence(_divergence(), at=clock())
    with pytest.raises(InvariantViolation, match="overrule needs the human author"):
        agg.change_divergence("d1", DivergenceStatus.OVERRULED, at=clock())
    with pytest.raises(InvariantViolation, match="unknown divergence 'nope'"):
        agg.change_divergence("nope", DivergenceStatus.RESOLVED, at=clock())
    with pytest.raises(InvariantViolation, match="cannot change a divergence to open"):
        agg.change_divergence("d1", DivergenceStatus.OPEN, at=clock())
    agg.change_divergence("d1", DivergenceStatus.OVERRULED, at=clock(), by="alice")
    assert agg.state.divergence("d1") is not None
    assert agg.state.divergence("d1").status is DivergenceStatus.OVERRULED  # type: ignore[union-attr]
    with pytest.raises(InvariantViolation, match="already overruled"):
        agg.change_divergence("d1", DivergenceStatus.RESOLVED, at=clock())


def test_divergence_positions_need_members(agg: Deliberation, clock: StepClock) -> None:
    bad = ev.DivergenceDetected(
        divergence_id="d2", round=1, topic="t",
        positions=(DivergentPosition(participant="ghost", position="x", stance=Stance.AGREE),),
    )
    with pytest.raises(InvariantViolation, match="unknown participant 'ghost'"):
        agg.detect_divergence(bad, at=clock())


# --------------------------------------------------------------------------- rewind


def _iterations(agg: Deliberation, clock: StepClock, count: int) -> None:
    for it in range(1, count + 1):
        run_round(agg, RoundKind.DRAFT, it, clock, who=["p0"])


@pytest.mark.parametrize("steps", [0, 6, -1])
def test_rewind_steps_bounds(agg: Deliberation, clock: StepClock, steps: int) -> None:
    _iterations(agg, clock, 7)
    with pytest.raises(InvariantViolation, match="back takes 1 to 5 iterations"):
        agg.rewind(steps, at=clock())


def test_rewind_never_below_iteration_one(agg: Deliberation, clock: StepClock) -> None:
    _iterations(agg, clock, 3)
    with pytest.raises(InvariantViolation, match="iteration 1 is the earliest") as info:
        agg.rewind(3, at=clock())
    assert info.value.hint == "use back 2 or less"
    assert agg.rewind(2, at=clock()) == 1
    assert agg.state.iteration == 1
    assert [r.superseded for r in agg.state.rounds] == [False, True, True]
    assert agg.state.status is SessionStatus.PAUSED


def test_rewind_with_open_round(agg: Deliberation, clock: StepClock) -> None:
    _iterations(agg, clock, 2)
    agg.start_round(kind=RoundKind.DRAFT, iteration=3, participants=["p0"], at=clock())
    with pytest.raises(InvariantViolation, match="while a round is open"):
        agg.rewind(1, at=clock())


def test_human_input_needs_author(agg: Deliberation, clock: StepClock) -> None:
    with pytest.raises(InvariantViolation, match="needs an author"):
        agg.human_input(author="  ", text="hello", at=clock())


# --------------------------------------------------------------------------- terminal


@pytest.mark.parametrize(
    "status",
    [SessionStatus.CONVERGED, SessionStatus.COMPLETE, SessionStatus.ABORTED,
     SessionStatus.TIMED_OUT],
)
def test_finish_rejects_non_terminal_and_records_terminal(
    agg: Deliberation, clock: StepClock, status: SessionStatus,
) -> None:
    agg.finish(status, at=clock())
    assert agg.state.status is status


@pytest.mark.parametrize("status", [SessionStatus.PAUSED, SessionStatus.IN_PROGRESS])
def test_finish_with_non_terminal_status(
    agg: Deliberation, clock: StepClock, status: SessionStatus,
) -> None:
    with pytest.raises(InvariantViolation, match="not a terminal status"):
        agg.finish(status, at=clock())


_AFTER_TERMINAL: dict[str, Callable[[Deliberation, Any], None]] = {
    "join": lambda a, t: a.join(make_participants(5)[4], at=t),
    "start_round": lambda a, t: a.start_round(
        kind=RoundKind.DRAFT, iteration=2, participants=["p0"], at=t,
    ),
    "record_contribution": lambda a, t: contribute(a, 1, "p0", t),
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
    clock: StepClock, command: str, terminal: SessionStatus,
) -> None:
    agg = new_session(3, clock=clock)
    n = agg.start_round(kind=RoundKind.CONVERGENCE, iteration=1, participants=["p0"], at=clock())
    contribute(agg, n, "p0", clock())
    agg.detect_divergence(_divergence(), at=clock())
    agg.finish(terminal, at=clock())
    version = agg.version
    with pytest.raises(InvariantViolation, match=f"session .* is {terminal.value}") as info:
        _AFTER_TERMINAL[command](agg, clock())
    assert info.value.hint == "fork it to continue from an earlier point"
    assert agg.version == version
    assert not [e for e in agg.collect_events() if e.originator_version > version]


def test_terminal_closes_open_round(agg: Deliberation, clock: StepClock) -> None:
    n = agg.start_round(kind=RoundKind.DRAFT, iteration=1, participants=["p0", "p1"], at=clock())
    contribute(agg, n, "p0", clock())
    agg.finish(SessionStatus.TIMED_OUT, at=clock())
    assert agg.state.open_round is None
    assert agg.state.rounds[0].status.value == "complete"


def test_seal_before_terminal_and_twice(agg: Deliberation, clock: StepClock) -> None:
    with pytest.raises(InvariantViolation, match="only a finished session can be sealed"):
        agg.seal(at=clock())
    agg.finish(SessionStatus.COMPLETE, at=clock())
    agg.seal(at=clock())
    with pytest.raises(InvariantViolation, match="already sealed"):
        agg.seal(at=clock())


def test_refused_command_records_nothing(agg: Deliberation, clock: StepClock) -> None:
    before = agg.version
    with pytest.raises(InvariantViolation):
        contribute(agg, 1, "p0", clock())
    assert agg.version == before
