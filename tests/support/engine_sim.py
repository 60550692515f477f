"""A pure simulated recorder for engine tests: it follows ``engine.next_step`` and records every
decision through the real ``Deliberation`` aggregate commands, with a fixed-step clock and
scripted (or hypothesis-drawn) answers instead of model calls. The prompts it records are the
ones ``engine.build_messages`` builds, so tests can inspect exactly what each participant saw.
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
    DivergenceStatus,
    ModelResponse,
    Opinion,
    Participant,
    ParticipantRole,
    RoundKind,
    SessionConfig,
    SessionStatus,
    Topic,
)

Answer = Callable[[SessionState, RoundState, str], str]
"""(state at round start, round, participant) → the text the 'model' answers."""

_CHANGE = {
    ev.DivergenceAddressed: DivergenceStatus.ADDRESSED,
    ev.DivergenceResolved: DivergenceStatus.RESOLVED,
    ev.DivergenceWithdrawn: DivergenceStatus.WITHDRAWN,
}


def participants(n: int, roles: tuple[ParticipantRole, ...] = ()) -> list[Participant]:
    return [
        Participant(
            name=f"P{i + 1}",
            model=f"openai/model-{i + 1}",
            role=roles[i] if i < len(roles) else ParticipantRole.GENERALIST,
        )
        for i in range(n)
    ]


def start(
    n: int = 3,
    config: SessionConfig | None = None,
    roles: tuple[ParticipantRole, ...] = (),
    topic: Topic | None = None,
) -> tuple[Deliberation, FixedStepClock]:
    clock = FixedStepClock(step=timedelta(seconds=1))
    agg = Deliberation.start(
        session_id=uuid.UUID(int=7),
        topic=topic or Topic(title="Rate limiter design", description="Design a rate limiter."),
        config=config or SessionConfig(),
        participants=participants(n, roles),
        at=clock.now(),
    )
    return agg, clock


def record(agg: Deliberation, payload: ev.Payload, clock: FixedStepClock) -> None:
    """Record one payload planned by ``engine.after_round`` through the aggregate."""
    if isinstance(payload, ev.DivergenceDetected):
        agg.detect_divergence(payload, at=clock.now())
    elif isinstance(payload, ev.ConvergenceEvaluated):
        agg.evaluate_convergence(payload, at=clock.now())
    else:
        status = _CHANGE[type(payload)]  # type: ignore[index]
        assert isinstance(payload, ev.DivergenceAddressed | ev.DivergenceResolved
                          | ev.DivergenceWithdrawn)
        agg.change_divergence(
            payload.divergence_id, status, at=clock.now(), round=payload.round,
            note=payload.note, by=payload.by,
        )


def play_round(
    agg: Deliberation, step: engine.StartRound, answer: Answer, clock: FixedStepClock
) -> int:
    number = agg.start_round(
        kind=step.kind,
        iteration=step.iteration,
        participants=step.participants,
        targets=dict(step.targets),
        depth=step.depth,
        focus=step.focus,
        technique=step.technique,
        at=clock.now(),
    )
    basis = agg.state.model_copy(deep=True)
    rnd = basis.round(number)
    assert rnd is not None
    for name in rnd.expected:
        messages = engine.build_messages(basis, rnd, name)
        text = answer(basis, rnd, name)
        agg.record_contribution(
            round=number,
            participant=name,
            model="sim",
            messages=messages,
            params=ev.CallParams(temperature=0.0, max_tokens=256),
            prompt_hash=ev.prompt_hash(messages),
            response=ModelResponse(content=text, model="sim", cost_usd=0.001),
            at=clock.now(),
        )
        parsed = engine.parse_output(step.kind, text)
        if parsed.error is not None:
            agg.record_parse_failure(
                round=number, participant=name, expected=step.kind.value,
                error=parsed.error, at=clock.now(),
            )
        elif isinstance(parsed.value, Critique):
            agg.record_critique(round=number, participant=name, critique=parsed.value,
                                at=clock.now())
        elif isinstance(parsed.value, Opinion):
            agg.record_opinion(round=number, participant=name, opinion=parsed.value,
                               at=clock.now())
        elif isinstance(parsed.value, ConvergenceVote):
            agg.record_vote(round=number, participant=name, vote=parsed.value, at=clock.now())
    agg.complete_round(round=number, at=clock.now())
    for payload in engine.after_round(agg.state, number):
        record(agg, payload, clock)
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
    for _ in range(limit):
        step = engine.next_step(agg.state, elapsed_secs=0.0)
        run.steps.append(step)
        if isinstance(step, engine.StartRound):
            play_round(agg, step, answer, clock)
        elif isinstance(step, engine.AskHuman):
            if stop_at_ask:
                run.final = step
                return run
            agg.ask(step.questions, at=clock.now())
            text = human(step.questions) if human else "keep going"
            agg.human_input(author="alice", text=text, at=clock.now())
        elif isinstance(step, engine.Finish):
            agg.finish(step.status, reason=step.reason, score=step.score, at=clock.now())
            run.final = step
            return run
        else:
            agg.exhaust_budget(budget=step.budget, limit=step.limit, spent=step.spent,
                               detail=step.detail, at=clock.now())
            agg.finish(SessionStatus.COMPLETE, reason=step.detail, at=clock.now())
            run.final = step
            return run
    raise AssertionError(f"no end after {limit} steps")


# --------------------------------------------------------------------------- scripted answers


def draft_text(name: str) -> str:
    return f"DRAFT-MARKER-{name}: token bucket proposal by {name}."


def scripted(
    vote: Callable[[RoundState, str], str] = lambda r, n: "agree",
    opinion: Callable[[RoundState, str], tuple[str, list[str]]] = lambda r, n: ("agree", []),
    suggestion_priority: int = 3,
) -> Answer:
    """An answer function from small per-kind rules (valid JSON with a little prose)."""

    def answer(state: SessionState, rnd: RoundState, name: str) -> str:
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
             "concerns": topics, "topics": topics}
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
