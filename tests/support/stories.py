"""Stories for the fork, audit, seal, report and view tests, told with ``SessionBuilder``.

``play`` tells one iteration of the rate-limiter story among alice (drafter), bob (critic) and
carol (synthesizer): alice drafts, the others critique her, dissent may open, a person may
steer, carol synthesizes, dissent may close, and everyone votes. ``THREE_ITERATIONS`` is the
story most tests use. ``cache_design_session`` is the conformity story of the views tests.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from forge_ledger.clock import Clock, FixedStepClock
from forge_ledger.domain import events as ev
from forge_ledger.domain.aggregate import Deliberation
from forge_ledger.domain.values import (
    ChatMessage,
    DivergenceStatus,
    Participant,
    ParticipantRole,
    RoundKind,
    SessionConfig,
    SessionStatus,
    Stance,
    Suggestion,
    TokenCount,
    Topic,
)
from forge_ledger.ledger import Ledger
from forge_ledger.testing import SessionBuilder

PARTICIPANTS = (
    Participant(name="alice", model="openai/alpha", role=ParticipantRole.DRAFTER),
    Participant(name="bob", model="openai/beta", role=ParticipantRole.CRITIC),
    Participant(name="carol", model="openai/gamma", role=ParticipantRole.SYNTHESIZER),
)
ANSWERS = {
    "params": ev.CallParams(temperature=0.7, max_tokens=256),
    "tokens": TokenCount(input=10, output=20),
    "cost_usd": 10 * 0.001,
}
"""Every answer of the story costs the same."""


@dataclass
class Iteration:
    """One scripted iteration: votes by participant, what critics say, dissent to open/close."""

    votes: Mapping[str, Stance]
    critiques: bool = True
    synthesis: bool = True
    vote_reasons: Mapping[str, str] = field(default_factory=dict)
    open_dissent: Sequence[tuple[str, str, str]] = ()
    """(divergence id, topic, dissenting participant) opened after the critique round."""
    close_dissent: Sequence[tuple[str, DivergenceStatus, str]] = ()
    """(divergence id, new status, by) applied after the synthesis."""
    human_note: str | None = None
    failure_for: str | None = None


def story(
    session_id: uuid.UUID,
    *,
    clock: Clock | None = None,
    title: str = "Rate limiter design",
) -> SessionBuilder:
    """The rate-limiter session, started: alice, bob and carol, 2 agreeing votes converge."""
    return SessionBuilder(clock=clock or FixedStepClock(), answer_defaults=ANSWERS).start(
        Topic(title=title, description="Design a token-bucket rate limiter."),
        participants=PARTICIPANTS,
        config=SessionConfig(min_consensus=2, convergence_threshold=0.6),
        session_id=session_id,
    )


def continued(aggregate: Deliberation) -> SessionBuilder:
    """The story continued on an existing session (a fork), with a fresh clock."""
    return SessionBuilder.of(aggregate, clock=FixedStepClock(), answer_defaults=ANSWERS)


def play(b: SessionBuilder, it: Iteration) -> SessionBuilder:
    """One iteration of the story (see the module docstring)."""
    k = b.state.iteration + 1
    alice, critics, carol = b.names[0], b.names[1:], b.names[-1]
    if k == 1:
        b.round(RoundKind.DRAFT, iteration=k,
                answers={alice: f"Draft v1 of the limiter ({k})"}, close=True)
    critique_round = 0
    if it.critiques:
        b.round(RoundKind.CRITIQUE, iteration=k, participants=critics,
                targets=dict.fromkeys(critics, alice))
        critique_round = b.round_number
        for c in critics:
            if it.failure_for == c:
                b.fail(c, model="openai/x", tokens=TokenCount(input=3), cost_usd=0.0005)
            b.answer(c, f"{c} critique in iteration {k}: bursts unbounded")
            b.critique(c, target=alice, weaknesses=(f"weakness seen by {c}",), score=60)
        b.close_round()
    for did, topic, who in it.open_dissent:
        b.diverge(did, topic, {who: (f"{who} objects: {topic}", Stance.STRONGLY_DISAGREE)},
                  round=critique_round or max(len(b.state.rounds), 1),
                  strongest=Stance.STRONGLY_DISAGREE)
    if it.human_note:
        b.human(it.human_note, author="dana", kind="steer")
    if it.synthesis:
        b.round(RoundKind.SYNTHESIS, iteration=k,
                answers={carol: f"Synthesis {k}: merge critiques"}, close=True)
    for did, status, by in it.close_dissent:
        b.settle(did, status, round=len(b.state.rounds), by=by,
                 note=f"{status.value} by {by or 'the group'}")
    return vote(b, it.votes, it.vote_reasons, iteration=k)


def vote(b: SessionBuilder, stances: Mapping[str, Stance], reasons: Mapping[str, str],
         *, iteration: int) -> SessionBuilder:
    """A convergence round where each votes its stance, then its evaluation."""
    b.round(RoundKind.CONVERGENCE, iteration=iteration, participants=list(stances))
    for name, stance in stances.items():
        b.answer(name, f"vote {stance.value}")
        b.vote(name, agrees=stance.agrees, stance=stance, score=80 if stance.agrees else 30,
               concerns=() if stance.agrees else (f"{name}: burst handling",),
               reasoning=reasons.get(name, ""))
    b.close_round()
    agree = sum(1 for s in stances.values() if s.agrees)
    disagree = sum(1 for s in stances.values() if s.disagrees)
    score = round(agree / len(stances), 4)
    cfg = b.state.config
    return b.evaluate(
        iteration=iteration, score=score,
        converged=score >= cfg.convergence_threshold and agree >= cfg.min_consensus,
        majority_agrees=agree * 2 > len(stances), agree=agree, disagree=disagree,
        partial=len(stances) - agree - disagree, threshold=cfg.convergence_threshold,
    )


def build(
    session_id: uuid.UUID,
    iterations: Sequence[Iteration],
    *,
    finish: SessionStatus | None = SessionStatus.CONVERGED,
    clock: Clock | None = None,
) -> Deliberation:
    """The whole story: every iteration, then ``finish`` (none: left running)."""
    b = story(session_id, clock=clock)
    for it in iterations:
        play(b, it)
    if finish is not None:
        b.finish(finish, reason="test script ended")
    return b.aggregate


S = Stance
THREE_ITERATIONS = (
    Iteration(
        votes={"alice": S.AGREE, "bob": S.DISAGREE, "carol": S.DISAGREE},
        open_dissent=[("d1", "burst limits", "bob")],
        failure_for="bob",
    ),
    Iteration(
        votes={"alice": S.AGREE, "bob": S.DISAGREE, "carol": S.AGREE},
        vote_reasons={"carol": "the synthesis bounded bursts"},
        open_dissent=[("d2", "clock skew", "carol")],
        close_dissent=[("d2", DivergenceStatus.RESOLVED, "")],
        human_note="Focus on distributed deployments.",
    ),
    Iteration(
        votes={"alice": S.AGREE, "bob": S.AGREE, "carol": S.AGREE},
        critiques=False,
        synthesis=False,
    ),
)
"""alice agrees throughout; carol changes after a synthesis; bob flips in iteration 3 with no
critique, synthesis or human input before the vote (a conformity flip); d1 stays open."""


# --------------------------------------------------------------------------- cache design

CACHE_SID = uuid.UUID("00000000-0000-4000-8000-00000000abcd")
CACHE_SYNTHESIS_TEXT = (
    "One cache per node.\nThe cache uses LRU eviction. Entries expire after a day."
)


def cache_design_session(ledger: Ledger) -> Deliberation:
    """A, B, C, D, E vote twice; the first vote's majority agrees (A, D, E). Between the votes
    A critiques B's draft, then A's synthesis answers B's divergence (eviction, "addressed")
    but not C's (ttl). B and C both move to agree: B was answered, C was not (conformity)."""
    b = SessionBuilder(store=ledger, answer_defaults={
        "messages": [ChatMessage(role="user", content="go")],
        "params": ev.CallParams(temperature=0.2, max_tokens=256),
        "tokens": TokenCount(input=10, output=5), "cost_usd": 0.01,
    })
    b.start("Cache design", participants=[Participant(name=n, model=f"openai/{n}")
                                          for n in "ABCDE"], session_id=CACHE_SID)

    def everyone_votes(stances: Mapping[str, Stance]) -> None:
        for n in stances:
            b.answer(n, f"text of {n}")
        for n, s in stances.items():
            b.vote(n, agrees=s.agrees, stance=s, score=70, reasoning="the cache is fine")
        b.close_round()

    b.round(RoundKind.DRAFT, iteration=1, answers={n: f"text of {n}" for n in "ABC"}, close=True)
    b.round(RoundKind.CONVERGENCE, iteration=1, participants="ABCDE")
    everyone_votes({"A": S.AGREE, "B": S.DISAGREE, "C": S.DISAGREE, "D": S.AGREE, "E": S.AGREE})
    b.evaluate(score=0.6, converged=False, majority_agrees=True, agree=3, disagree=2,
               partial=0, threshold=0.85)
    (b.round(RoundKind.CRITIQUE, iteration=2, targets={"A": "B"}, answers={"A": "text of A"})
     .critique("A", target="B", weaknesses=("ignores eviction",),
               suggestions=(Suggestion(text="add LRU"),), score=40)
     .close_round()
     .diverge("d1", "eviction", {"A": ("LRU", S.AGREE), "B": ("none", S.STRONGLY_DISAGREE)},
              strongest=S.STRONGLY_DISAGREE)
     .diverge("d2", "ttl", {"C": ("1h", S.DISAGREE), "A": ("1d", S.AGREE)})
     .round(RoundKind.SYNTHESIS, iteration=2, answers={"A": CACHE_SYNTHESIS_TEXT}, close=True)
     .settle("d1", DivergenceStatus.ADDRESSED, note="synthesis adds LRU")
     .round(RoundKind.CONVERGENCE, iteration=2, participants="ABCDE"))
    everyone_votes(dict.fromkeys("ABCDE", S.AGREE))
    b.evaluate(score=0.9, converged=True, majority_agrees=True, agree=5, disagree=0,
               partial=0, threshold=0.85)
    b.settle("d1", DivergenceStatus.RESOLVED, by="B").save()
    return b.aggregate
