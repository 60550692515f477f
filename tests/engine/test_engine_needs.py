"""The rule deciding when a fault pauses a session (engine.needs), and whom a fallback picks."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forge_ledger import engine
from forge_ledger.domain.values import ParticipantRole, RoundKind, SessionConfig
from forge_ledger.testing import SessionBuilder


def _open_round(
    kind: RoundKind, who: list[str], answered: list[str], *, n: int = 4, min_consensus: int = 2,
) -> SessionBuilder:
    """p0..p(n-1) are in the session; ``who`` are asked in an open round, ``answered`` did."""
    b = SessionBuilder().start("Faults", participants=[f"p{i}" for i in range(n)],
                               config=SessionConfig(min_consensus=min_consensus))
    return b.round(kind, iteration=1, participants=who,
                   answers=dict.fromkeys(answered, "an answer"))


@pytest.mark.parametrize("kind", [RoundKind.DRAFT, RoundKind.CRITIQUE, RoundKind.RESPONSE,
                                  RoundKind.REFINEMENT])
def test_one_answer_is_enough_outside_votes(kind: RoundKind) -> None:
    b = _open_round(kind, ["p1", "p2", "p3"], [])
    rnd = b.state.open_round
    assert rnd is not None
    assert engine.round_shortfall(b.state, rnd) == ("p1", "p2", "p3")
    b.answer("p2", "an answer")
    rnd = b.state.open_round
    assert rnd is not None
    assert engine.round_shortfall(b.state, rnd) == ()


def test_the_synthesis_needs_its_author() -> None:
    state = _open_round(RoundKind.SYNTHESIS, ["p2"], []).state
    rnd = state.open_round
    assert rnd is not None
    assert engine.round_shortfall(state, rnd) == ("p2",)


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
    state = _open_round(
        RoundKind.CONVERGENCE, who, who[:answered], n=voters, min_consensus=min_consensus,
    ).state
    rnd = state.open_round
    assert rnd is not None
    missing = engine.round_shortfall(state, rnd)
    short = answered < min(min_consensus, voters)
    assert missing == (tuple(who[answered:]) if short else ())


def test_fallback_prefers_the_same_role_then_generalists_and_only_when_enabled() -> None:
    state = _open_round(RoundKind.SYNTHESIS, ["p1"], []).state
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
