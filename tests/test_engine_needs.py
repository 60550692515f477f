"""The rule deciding when a fault pauses a session (engine.needs), and whom a fallback picks."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forge_ledger import engine
from forge_ledger.domain.aggregate import Deliberation
from forge_ledger.domain.values import ParticipantRole, RoundKind
from support.strategies import StepClock, contribute, new_session


def _open_round(
    kind: RoundKind, who: list[str], answered: list[str], *, n: int = 4, min_consensus: int = 2,
) -> Deliberation:
    clock = StepClock()
    agg = new_session(n, clock=clock)
    agg.state.config = agg.state.config.model_copy(update={"min_consensus": min_consensus})
    number = agg.start_round(kind=kind, iteration=1, participants=who, at=clock())
    for name in answered:
        contribute(agg, number, name, clock())
    return agg


@pytest.mark.parametrize("kind", [RoundKind.DRAFT, RoundKind.CRITIQUE, RoundKind.RESPONSE,
                                  RoundKind.REFINEMENT])
def test_one_answer_is_enough_outside_votes(kind: RoundKind) -> None:
    agg = _open_round(kind, ["p1", "p2", "p3"], [])
    rnd = agg.state.open_round
    assert rnd is not None
    assert engine.round_shortfall(agg.state, rnd) == ("p1", "p2", "p3")
    contribute(agg, rnd.number, "p2", agg.state.updated_at + timedelta(seconds=1))
    rnd = agg.state.open_round
    assert rnd is not None
    assert engine.round_shortfall(agg.state, rnd) == ()


def test_the_synthesis_needs_its_author() -> None:
    agg = _open_round(RoundKind.SYNTHESIS, ["p2"], [])
    rnd = agg.state.open_round
    assert rnd is not None
    assert engine.round_shortfall(agg.state, rnd) == ("p2",)


@given(
    voters=st.integers(1, 6),
    answered=st.integers(0, 6),
    min_consensus=st.integers(1, 8),
)
def test_a_vote_needs_min_consensus_voters_capped_at_the_voters(
    voters: int, answered: int, min_consensus: int,
) -> None:
    answered = min(answered, voters)
    who = [f"p{i}" for i in range(voters)]
    agg = _open_round(
        RoundKind.CONVERGENCE, who, who[:answered], n=voters, min_consensus=min_consensus,
    )
    rnd = agg.state.open_round
    assert rnd is not None
    missing = engine.round_shortfall(agg.state, rnd)
    short = answered < min(min_consensus, voters)
    assert missing == (tuple(who[answered:]) if short else ())


def test_fallback_prefers_the_same_role_then_generalists_and_only_when_enabled() -> None:
    agg = _open_round(RoundKind.SYNTHESIS, ["p1"], [])
    state = agg.state
    roles = [ParticipantRole.CRITIC, ParticipantRole.SYNTHESIZER, ParticipantRole.GENERALIST,
             ParticipantRole.SYNTHESIZER]
    state.participants = [p.model_copy(update={"role": r})
                          for p, r in zip(state.participants, roles, strict=True)]
    rnd = state.open_round
    assert rnd is not None
    assert engine.fallback_author(state, rnd, "p1") is None  # fallback is off by default
    state.config = state.config.model_copy(update={"fallback": True})
    assert engine.fallback_author(state, rnd, "p1") == "p3"  # same role as p1
    rnd.expected.append("p3")
    assert engine.fallback_author(state, rnd, "p3") == "p2"  # then a generalist
    rnd.expected.append("p2")
    assert engine.fallback_author(state, rnd, "p2") == "p0"  # then anyone left
    rnd.expected.append("p0")
    assert engine.fallback_author(state, rnd, "p0") is None  # nobody left: pause
