"""Builders of real ``Deliberation`` sessions for the YAML/EMS tests (FixedStepClock time)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from forge_ledger.clock import FixedStepClock
from forge_ledger.domain import Deliberation
from forge_ledger.domain import events as ev
from forge_ledger.domain.values import (
    ChatMessage,
    ConvergenceVote,
    Critique,
    DivergenceStatus,
    DivergentPosition,
    Mode,
    ModelResponse,
    Opinion,
    Participant,
    RoundKind,
    SessionConfig,
    Stance,
    Suggestion,
    Topic,
)

NAMES = ("Alice", "Bob", "Carol")


def clock() -> FixedStepClock:
    return FixedStepClock(datetime(2026, 1, 9, 10, 30, tzinfo=UTC), timedelta(minutes=1))


def _contribute(agg: Deliberation, rnd: int, name: str, text: str, c: FixedStepClock) -> None:
    msgs = (ChatMessage(role="user", content=f"round {rnd}"),)
    agg.record_contribution(
        round=rnd,
        participant=name,
        model="openai/fake",
        messages=msgs,
        params=ev.CallParams(temperature=0.0, max_tokens=100),
        prompt_hash=ev.prompt_hash(msgs),
        response=ModelResponse(content=text, model="openai/fake"),
        at=c.now(),
    )


def build_session(
    *,
    iterations: int = 2,
    title: str = "Feature Auth",
    mode: Mode = Mode.STANDARD,
    critique_scores: tuple[int, ...] = (60, 70, 80),
    vote_agree: tuple[bool, ...] = (True, True, False),
    questions: bool = True,
    session_id: uuid.UUID | None = None,
    c: FixedStepClock | None = None,
) -> Deliberation:
    """A session with ``iterations`` full cycles: draft, critique, synthesis, convergence."""
    c = c or clock()
    agg = Deliberation.start(
        session_id=session_id or uuid.uuid5(uuid.NAMESPACE_URL, title),
        topic=Topic(title=title),
        config=SessionConfig(mode=mode),
        participants=[Participant(name=n, model=f"openai/{n.lower()}") for n in NAMES],
        at=c.now(),
    )
    for it in range(1, iterations + 1):
        r = agg.start_round(kind=RoundKind.DRAFT, iteration=it, participants=NAMES, at=c.now())
        for n in NAMES:
            _contribute(agg, r, n, f"draft {it} by {n}", c)
        agg.complete_round(round=r, at=c.now())
        targets = {NAMES[i]: NAMES[(i + 1) % 3] for i in range(3)}
        r = agg.start_round(
            kind=RoundKind.CRITIQUE, iteration=it, participants=NAMES, targets=targets, at=c.now()
        )
        for i, n in enumerate(NAMES):
            _contribute(agg, r, n, f"critique {it} by {n}, see {targets[n]}", c)
            agg.record_critique(
                round=r,
                participant=n,
                critique=Critique(
                    target=targets[n],
                    weaknesses=(f"weak point {it}",),
                    suggestions=(
                        Suggestion(text=f"Add section {it}-{i}", priority=1 + i),
                        Suggestion(text="Clarify the token storage", priority=2),
                    ),
                    score=critique_scores[i % len(critique_scores)],
                ),
                at=c.now(),
            )
            agg.record_opinion(
                round=r,
                participant=n,
                opinion=Opinion(
                    stance=Stance.AGREE if i else Stance.DISAGREE,
                    reasoning=f"{n} thinks {targets[n]} is partly right",
                    concerns=(f"concern of {n} in {it}",),
                ),
                at=c.now(),
            )
        agg.complete_round(round=r, at=c.now())
        if it == 1:
            agg.detect_divergence(
                ev.DivergenceDetected(
                    divergence_id=f"d{it}",
                    round=r,
                    topic="token storage",
                    positions=(
                        DivergentPosition(participant="Alice", position="DB", stance=Stance.AGREE),
                        DivergentPosition(
                            participant="Bob", position="Redis", stance=Stance.DISAGREE
                        ),
                    ),
                ),
                at=c.now(),
            )
        r = agg.start_round(
            kind=RoundKind.SYNTHESIS, iteration=it, participants=NAMES[:1], at=c.now()
        )
        _contribute(agg, r, NAMES[0], f"synthesis {it}", c)
        agg.complete_round(round=r, at=c.now())
        if questions:
            agg.ask([f"Question {it}a?", f"Question {it}b?"], at=c.now())
            agg.human_input(author="human", text=f"Answer {it}", at=c.now())
        r = agg.start_round(
            kind=RoundKind.CONVERGENCE, iteration=it, participants=NAMES, at=c.now()
        )
        agree = 0
        for i, n in enumerate(NAMES):
            _contribute(agg, r, n, f"vote {it} by {n}", c)
            ok = vote_agree[i % len(vote_agree)]
            agree += ok
            agg.record_vote(
                round=r,
                participant=n,
                vote=ConvergenceVote(agrees=ok, score=80 if ok else 30),
                at=c.now(),
            )
        agg.complete_round(round=r, at=c.now())
        agg.evaluate_convergence(
            ev.ConvergenceEvaluated(
                round=r,
                iteration=it,
                score=round(min(1.0, 0.2 + 0.2 * it + 0.1 * agree), 4),
                converged=False,
                majority_agrees=agree >= 2,
                agree=agree,
                disagree=3 - agree,
                partial=0,
                threshold=0.85,
            ),
            at=c.now(),
        )
        if it == 1:
            agg.change_divergence("d1", DivergenceStatus.RESOLVED, at=c.now(), round=r)
    return agg
