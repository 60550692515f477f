"""The sessions of the YAML/EMS/lineage tests, told with ``SessionBuilder`` (one minute per event).

Every answer is recorded as ``openai/fake``'s, to a one-line prompt naming the round.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from forge_ledger.clock import FixedStepClock
from forge_ledger.domain import Deliberation
from forge_ledger.domain import events as ev
from forge_ledger.domain.values import (
    ChatMessage,
    DivergenceStatus,
    Mode,
    Participant,
    RoundKind,
    SessionConfig,
    Stance,
    Suggestion,
    Topic,
)
from forge_ledger.testing import SessionBuilder

NAMES = ("Alice", "Bob", "Carol")


def clock() -> FixedStepClock:
    return FixedStepClock(datetime(2026, 1, 9, 10, 30, tzinfo=UTC), timedelta(minutes=1))


def builder(c: FixedStepClock | None = None) -> SessionBuilder:
    """A builder whose answers are ``openai/fake``'s, to the prompt ``round N``."""
    return SessionBuilder(
        clock=c or clock(),
        answer_defaults={"model": "openai/fake",
                         "params": ev.CallParams(temperature=0.0, max_tokens=100)},
        prompt=lambda number, _name: [ChatMessage(role="user", content=f"round {number}")],
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
    b = builder(c).start(
        Topic(title=title),
        participants=[Participant(name=n, model=f"openai/{n.lower()}") for n in NAMES],
        config=SessionConfig(mode=mode),
        session_id=session_id or uuid.uuid5(uuid.NAMESPACE_URL, title),
    )
    for it in range(1, iterations + 1):
        _iteration(b, it, critique_scores=critique_scores, vote_agree=vote_agree,
                   questions=questions)
    return b.aggregate


def _iteration(b: SessionBuilder, it: int, *, critique_scores: tuple[int, ...],
               vote_agree: tuple[bool, ...], questions: bool) -> None:
    b.round(RoundKind.DRAFT, iteration=it, answers={n: f"draft {it} by {n}" for n in NAMES},
            close=True)
    targets = {NAMES[i]: NAMES[(i + 1) % 3] for i in range(3)}
    b.round(RoundKind.CRITIQUE, iteration=it, participants=NAMES, targets=targets)
    for i, n in enumerate(NAMES):
        b.answer(n, f"critique {it} by {n}, see {targets[n]}")
        b.critique(n, target=targets[n], weaknesses=(f"weak point {it}",),
                   suggestions=(Suggestion(text=f"Add section {it}-{i}", priority=1 + i),
                                Suggestion(text="Clarify the token storage", priority=2)),
                   score=critique_scores[i % len(critique_scores)])
        b.opinion(n, stance=Stance.AGREE if i else Stance.DISAGREE,
                  reasoning=f"{n} thinks {targets[n]} is partly right",
                  concerns=(f"concern of {n} in {it}",))
    b.close_round()
    if it == 1:
        b.diverge(f"d{it}", "token storage",
                  {"Alice": ("DB", Stance.AGREE), "Bob": ("Redis", Stance.DISAGREE)})
    b.round(RoundKind.SYNTHESIS, iteration=it, answers={NAMES[0]: f"synthesis {it}"},
            close=True)
    if questions:
        b.ask(f"Question {it}a?", f"Question {it}b?").human(f"Answer {it}")
    b.round(RoundKind.CONVERGENCE, iteration=it, participants=NAMES)
    agree = 0
    for i, n in enumerate(NAMES):
        ok = vote_agree[i % len(vote_agree)]
        agree += ok
        b.answer(n, f"vote {it} by {n}").vote(n, agrees=ok, score=80 if ok else 30)
    b.close_round()
    b.evaluate(iteration=it, score=round(min(1.0, 0.2 + 0.2 * it + 0.1 * agree), 4),
               converged=False, majority_agrees=agree >= 2, agree=agree,
               disagree=3 - agree, partial=0, threshold=0.85)
    if it == 1:
        b.settle("d1", DivergenceStatus.RESOLVED)
