"""The test doubles of ``forge_ledger.testing``: ScriptedProvider serves what a test queued, and
SessionBuilder tells a session that the ledger stores, forks and seals like any other."""

from __future__ import annotations

import asyncio

import pytest

from forge_ledger.clock import FixedStepClock, SequentialIds
from forge_ledger.domain.values import (
    ChatMessage,
    ConvergenceVote,
    DivergenceStatus,
    ModelResponse,
    Participant,
    RoundKind,
    SessionStatus,
    Stance,
)
from forge_ledger.ledger import Ledger, verify_session
from forge_ledger.providers import ProviderCall, ProviderCallError
from forge_ledger.testing import ScriptedProvider, ScriptError, SessionBuilder

ALICE = Participant(name="alice", model="openai/alice")
BOB = Participant(name="bob", model="openai/bob")


def _ask(provider: ScriptedProvider, who: Participant, text: str = "go") -> ModelResponse:
    call = ProviderCall(participant=who, messages=(ChatMessage(role="user", content=text),),
                        max_tokens=10, temperature=0.0)
    return asyncio.run(provider.complete(call))


def test_answers_are_served_in_order_a_participants_own_first() -> None:
    provider = ScriptedProvider()
    provider.enqueue(["first", "second"]).enqueue(["alice's"], participant="alice")
    assert _ask(provider, BOB).content == "first"
    assert _ask(provider, ALICE).content == "alice's"
    assert _ask(provider, ALICE).content == "second"
    assert [c.participant.name for c in provider.calls] == ["bob", "alice", "alice"]
    assert len(provider.calls_for("alice")) == 2
    assert provider.pending() == provider.pending("alice") == 0


def test_a_queued_error_is_raised_and_an_empty_queue_names_the_call() -> None:
    provider = ScriptedProvider().enqueue([ProviderCallError("timeout", "too slow")])
    with pytest.raises(ProviderCallError, match="too slow"):
        _ask(provider, ALICE)
    with pytest.raises(ProviderCallError, match="no scripted answer left for alice"):
        _ask(provider, ALICE)


def test_text_is_counted_a_token_per_word_and_a_whole_response_is_served_as_is() -> None:
    whole = ModelResponse(content="as recorded", model="openai/other", cost_usd=0.5)
    provider = ScriptedProvider().enqueue(["three words here", whole])
    counted = _ask(provider, ALICE, "two words")
    assert (counted.tokens.input, counted.tokens.output, counted.model) == (2, 3, "openai/alice")
    assert _ask(provider, ALICE) is whole


def test_a_told_session_is_stored_forked_and_sealed(sqlite_url: str) -> None:
    with Ledger(sqlite_url) as ledger:
        b = SessionBuilder(clock=FixedStepClock(), ids=SequentialIds("story"), store=ledger)
        (b.start("Rate limiter", participants=["alice", "bob"])
         .round(RoundKind.DRAFT, answers={"alice": "token bucket", "bob": "leaky bucket"},
                close=True)
         .diverge("d1", "bucket kind", {"alice": ("token", Stance.AGREE),
                                        "bob": ("leaky", Stance.DISAGREE)})
         .round(RoundKind.CONVERGENCE, answers={"alice": "yes", "bob": "no"})
         .vote("alice", agrees=True, score=90).vote("bob", agrees=False, score=30)
         .close_round()
         .evaluate(score=0.5, converged=False, majority_agrees=False, agree=1, disagree=1,
                   partial=0, threshold=0.8)
         .settle("d1", DivergenceStatus.OVERRULED, by="dana")
         .save())
        fork = b.fork(at_iteration=1)
        root = b.finish(SessionStatus.COMPLETE, reason="done").seal(key=b"k")
        state = ledger.state(b.id)
        assert state.status is SessionStatus.COMPLETE
        assert state.seal is not None
        assert state.seal["root_hash"] == root
        assert ledger.state(fork.id).status is SessionStatus.PAUSED
        assert [c.vote.agrees for c in state.rounds[1].contributions if c.vote] == [True, False]
        assert b.id == SequentialIds("story").new_id()
        assert verify_session(ledger, b.id).ok
        assert verify_session(ledger, fork.id).ok
        assert sorted(b.saved_at) == list(range(1, state.version + 1))


def test_in_a_round_with_votes_each_votes_right_after_answering() -> None:
    b = SessionBuilder().start("Rate limiter", participants=["alice", "bob"])
    b.round(RoundKind.CONVERGENCE, answers={"alice": "yes", "bob": "no"},
            votes={"alice": True, "bob": ConvergenceVote(agrees=False, score=20)}, close=True)
    events = [type(e).__name__ for e in b.aggregate.collect_events()][3:]
    assert events == ["RoundStarted", "ContributionRecorded", "VoteRecorded",
                      "ContributionRecorded", "VoteRecorded", "RoundCompleted"]
    votes = [(c.participant, c.vote.agrees, c.vote.score)
             for c in b.state.rounds[0].contributions if c.vote]
    assert votes == [("alice", True, ConvergenceVote(agrees=True).score), ("bob", False, 20)]


def test_a_broken_stream_keeps_a_prefix_and_the_wires_own_faults_need_the_server() -> None:
    content = "one two three four five six"
    provider = ScriptedProvider.from_script(
        {"alice": [{"fault": "disconnect", "content": content, "times": 1}, {"fault": "hang"}]},
    )
    with pytest.raises(ProviderCallError) as broken:
        _ask(provider, ALICE)
    assert broken.value.error_type == "mid_stream"
    assert broken.value.partial_text
    assert content.startswith(broken.value.partial_text)
    assert len(broken.value.partial_text) < len(content)
    with pytest.raises(ScriptError, match="needs the HTTP server"):
        _ask(provider, ALICE)
