"""A pure simulated recorder for engine tests: it follows ``engine.next_step`` and records
every decision with ``SessionBuilder`` (the real ``Deliberation`` aggregate commands), with a
fixed-step clock and scripted (or hypothesis-drawn) answers instead of model calls. The prompts
it records are the ones ``engine.build_messages`` builds, so tests can inspect exactly what each
participant saw.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import cast

from forge_ledger import engine
from forge_ledger.clock import FixedStepClock
from forge_ledger.domain import Deliberation
from forge_ledger.domain import events as ev
from forge_ledger.domain.state import ContributionState, RoundState, SessionState
from forge_ledger.domain.values import (
    ChatMessage,
    ConvergenceVote,
    Critique,
    Opinion,
    ParticipantRole,
    RoundKind,
    SessionConfig,
    SessionStatus,
    Topic,
)
from forge_ledger.testing import SessionBuilder
from support.stories import numbered_participants

Answer = Callable[[SessionState, RoundState, str], str]
"""(state at round start, round, participant) → the text the 'model' answers."""

def start(
    n: int = 3,
    config: SessionConfig | None = None,
    roles: tuple[ParticipantRole, ...] = (),
    topic: Topic | None = None,
) -> tuple[Deliberation, FixedStepClock]:
    clock = FixedStepClock(step=timedelta(seconds=1))
    b = SessionBuilder(clock=clock).start(
        topic or Topic(title="Rate limiter design", description="Design a rate limiter."),
        participants=numbered_participants(n, roles=roles),
        config=config or SessionConfig(),
        session_id=uuid.UUID(int=7),
    )
    return b.aggregate, clock


def play_round(
    agg: Deliberation, step: engine.StartRound, answer: Answer, clock: FixedStepClock,
) -> int:
    """The round ``step`` plans: each expected participant answers what ``answer`` says to the
    prompt the engine builds, the answer is parsed as the orchestrator does, the round closes
    and what the engine plans after it is recorded."""
    b = SessionBuilder.of(agg, clock=clock)
    b.round(step.kind, iteration=step.iteration, participants=step.participants,
            targets=dict(step.targets), depth=step.depth, focus=step.focus,
            technique=step.technique)
    number = b.round_number
    basis = agg.state.model_copy(deep=True)
    rnd = basis.round(number)
    assert rnd is not None
    for name in rnd.expected:
        messages = engine.build_messages(basis, rnd, name)
        text = answer(basis, rnd, name)
        b.answer(name, text, model="sim", messages=messages,
                 params=ev.CallParams(temperature=0.0, max_tokens=256), cost_usd=0.001)
        parsed = engine.parse_output(step.kind, text)
        if parsed.error is not None:
            b.parse_failure(name, expected=step.kind.value, error=parsed.error)
        elif isinstance(parsed.value, Critique):
            b.critique(name, parsed.value)
        elif isinstance(parsed.value, Opinion):
            b.opinion(name, parsed.value)
        elif isinstance(parsed.value, ConvergenceVote):
            b.vote(name, parsed.value)
    b.close_round()
    for payload in engine.after_round(agg.state, number):
        b.apply(payload)
    return number


@dataclass
class Run:
    steps: list[engine.Step] = field(default_factory=list)
    final: engine.Step | None = None


def drive(
    agg: Deliberation,
    answer: Answer,
    clock: FixedStepClock,
    *,
    human: Callable[[tuple[str, ...]], str] | None = None,
    limit: int = 500,
    stop_at_ask: bool = False,
) -> Run:
    """Follow ``next_step`` until the session ends (or ``limit`` steps: a failed test)."""
    run = Run()
    b = SessionBuilder.of(agg, clock=clock)
    for _ in range(limit):
        step = engine.next_step(agg.state, elapsed_secs=0.0)
        run.steps.append(step)
        if isinstance(step, engine.StartRound):
            play_round(agg, step, answer, clock)
        elif isinstance(step, engine.AskHuman):
            if stop_at_ask:
                run.final = step
                return run
            b.ask(*step.questions)
            b.human(human(step.questions) if human else "keep going", author="alice")
        elif isinstance(step, engine.Finish):
            b.finish(step.status, reason=step.reason, score=step.score)
            run.final = step
            return run
        else:
            agg.exhaust_budget(budget=step.budget, limit=step.limit, spent=step.spent,
                               detail=step.detail, at=clock.now())
            b.finish(SessionStatus.COMPLETE, reason=step.detail)
            run.final = step
            return run
    raise AssertionError(f"no end after {limit} steps")


# --------------------------------------------------------------------------- scripted answers


def draft_text(name: str) -> str:
    return f"DRAFT-MARKER-{name}: token bucket proposal by {name}."


def scripted(
    vote: Callable[[RoundState, str], str] = lambda _r, _n: "agree",
    opinion: Callable[[RoundState, str], tuple[str, list[str]]] = lambda _r, _n: ("agree", []),
    suggestion_priority: int = 3,
) -> Answer:
    """An answer function from small per-kind rules (valid JSON with a little prose)."""

    def answer(_state: SessionState, rnd: RoundState, name: str) -> str:
        if rnd.kind is RoundKind.DRAFT:
            return draft_text(name)
        if rnd.kind is RoundKind.SYNTHESIS:
            return f"Synthesis {rnd.number} by {name}: token bucket with quotas and logging."
        if rnd.kind is RoundKind.CRITIQUE:
            body = {
                "target": rnd.targets[name],
                "strengths": ["clear"],
                "weaknesses": ["no quotas"],
                "suggestions": [{"text": "add quotas", "section": "Quotas",
                                 "priority": suggestion_priority, "category": "completeness"}],
                "score": 70,
            }
            return "Here is my review:\n```json\n" + json.dumps(body) + "\n```"
        if rnd.kind is RoundKind.CONVERGENCE:
            stance = vote(rnd, name)
            agrees = stance in ("agree", "strongly_agree")
            return json.dumps({"agrees": agrees, "stance": stance, "score": 80,
                               "concerns": [] if agrees else ["quota storage"],
                               "reasoning": f"{name} votes {stance}"})
        stance, topics = opinion(rnd, name)
        return "My answer. " + json.dumps(
            {"stance": stance, "reasoning": f"{name} on round {rnd.number}",
             "concerns": topics, "topics": topics},
        )

    return answer


def prompt_of(agg: Deliberation, c: ContributionState) -> list[ChatMessage]:
    """The prompt of ``c``, from the (unsaved) event that recorded it: the state keeps only
    its position and hash."""
    event = next(e for e in agg.pending_events if e.originator_version == c.position)
    payload = cast(Deliberation.Event, event).payload()
    assert isinstance(payload, ev.ContributionRecorded)
    assert payload.prompt_hash == c.prompt_hash
    return list(payload.messages)
