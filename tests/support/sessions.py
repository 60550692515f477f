"""Builders of realistic sessions for tests: real aggregate commands, real ledger saves.

Tests of the read side (CLI, projections, YAML export, replay checks) need sessions that look
like what the orchestrator records, without running the orchestrator or any model. These
builders drive the :class:`~forge_ledger.domain.Deliberation` aggregate through its public
commands (so every invariant is checked) and save each round to the given ledger (so the
events are hash-chained and stored exactly as in production).

Shape of one iteration ``k`` built by :func:`build_session` (``n`` participants P1..Pn):

1. ``draft`` round (iteration 1) or ``refinement`` round (later iterations): every participant
   contributes; in refinement rounds each also records an :class:`Opinion`, and the divergence
   opened in the previous iteration is resolved.
2. ``critique`` round: participant i critiques participant i+1's work (``CritiqueRecorded``
   with strengths, weaknesses, suggestions, score).
3. If ``k`` is not the last iteration, or ``converge`` is False: a ``DivergenceDetected``
   between the first two participants (id ``div-k``).
4. ``synthesis`` round: the first participant merges the drafts.
5. ``convergence`` round: every participant votes (``VoteRecorded``); then
   ``ConvergenceEvaluated``. Only the last iteration of a ``converge=True`` session agrees.

A ``converge=True`` session ends with ``SessionConverged`` (status ``converged``); otherwise it
stays ``in_progress`` with the last divergence open. Contents are deterministic: they name the
participant, round and iteration, so tests can compute what to expect instead of hard-coding.

Helpers return a :class:`BuiltSession` describing what was built (id, positions where each
iteration ends, the per-contribution token/cost figures), so tests can compare CLI output
with independently computed values.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime

from forge_ledger.clock import Clock, FixedStepClock
from forge_ledger.domain import Deliberation
from forge_ledger.domain import events as ev
from forge_ledger.domain.values import (
    ChatMessage,
    ConvergenceVote,
    Critique,
    DivergenceStatus,
    DivergentPosition,
    ModelResponse,
    Opinion,
    Participant,
    ParticipantRole,
    RoundKind,
    SessionConfig,
    SessionStatus,
    Stance,
    Suggestion,
    SuggestionCategory,
    TokenCount,
    Topic,
)
from forge_ledger.ledger import Ledger

__all__ = [
    "INPUT_TOKENS",
    "OUTPUT_TOKENS",
    "BuiltSession",
    "build_session",
    "contribution_text",
    "cost_of",
    "fork_session",
    "make_participants",
    "seal_session",
]

INPUT_TOKENS = 100
"""Input tokens of contribution number ``i`` (1-based, session-wide) = INPUT_TOKENS + i."""
OUTPUT_TOKENS = 40
"""Output tokens of contribution number ``i`` = OUTPUT_TOKENS + 2*i."""
_PRICE_IN = 1e-6
_PRICE_OUT = 3e-6

_ROLES = (
    ParticipantRole.SYNTHESIZER,
    ParticipantRole.CRITIC,
    ParticipantRole.DOMAIN_EXPERT,
    ParticipantRole.DEVILS_ADVOCATE,
    ParticipantRole.GENERALIST,
)


def cost_of(tokens: TokenCount) -> float:
    """The USD cost the builders record for ``tokens`` (a fixed user price)."""
    return tokens.input * _PRICE_IN + tokens.output * _PRICE_OUT


def make_participants(n: int) -> list[Participant]:
    """``n`` participants P1..Pn on distinct ``openai/model-i`` models, with varied roles."""
    return [
        Participant(name=f"P{i}", model=f"openai/model-{i}", role=_ROLES[(i - 1) % len(_ROLES)])
        for i in range(1, n + 1)
    ]


def contribution_text(kind: RoundKind, participant: str, iteration: int) -> str:
    """The text a builder session records for one contribution (deterministic)."""
    return (
        f"{kind.value.capitalize()} by {participant} in iteration {iteration}.\n"
        f"Section A: the proposal as {participant} sees it after iteration {iteration}.\n"
        f"Section B: details and trade-offs ({kind.value})."
    )


@dataclass
class BuiltSession:
    """What a builder recorded: enough for tests to compute expected projections."""

    id: uuid.UUID
    title: str
    participants: list[Participant]
    iterations: int
    converged: bool
    iteration_end: dict[int, int] = field(default_factory=dict)
    """iteration → position of its last event (what ``--at-iteration`` selects)."""
    tokens: TokenCount = field(default_factory=TokenCount)
    cost_usd: float = 0.0
    contributions: int = 0
    timestamps: dict[int, datetime] = field(default_factory=dict)
    """position → recorded timestamp of that event."""

    @property
    def prefix(self) -> str:
        return self.id.hex[:8]


class _Builder:
    def __init__(self, ledger: Ledger, agg: Deliberation, clock: Clock, built: BuiltSession):
        self.ledger = ledger
        self.agg = agg
        self.clock = clock
        self.built = built

    def round(
        self,
        kind: RoundKind,
        iteration: int,
        *,
        names: list[str],
        targets: dict[str, str] | None = None,
    ) -> int:
        number = self.agg.start_round(
            kind=kind, iteration=iteration, participants=names, targets=targets,
            at=self.clock.now(),
        )
        for name in names:
            self.contribute(number, kind, name, iteration)
        return number

    def contribute(self, number: int, kind: RoundKind, name: str, iteration: int) -> None:
        b = self.built
        b.contributions += 1
        i = b.contributions
        tokens = TokenCount(input=INPUT_TOKENS + i, output=OUTPUT_TOKENS + 2 * i)
        cost = cost_of(tokens)
        participant = next(p for p in b.participants if p.name == name)
        messages = [
            ChatMessage(role="system", content=f"You are {name}."),
            ChatMessage(role="user", content=f"{kind.value} round {number} on {b.title!r}"),
        ]
        self.agg.record_contribution(
            round=number,
            participant=name,
            model=participant.model,
            messages=messages,
            params=ev.CallParams(temperature=participant.temperature, max_tokens=512),
            prompt_hash=ev.prompt_hash(messages),
            response=ModelResponse(
                content=contribution_text(kind, name, iteration),
                model=participant.model,
                tokens=tokens,
                cost_usd=cost,
                duration_ms=100 * i,
            ),
            at=self.clock.now(),
        )
        b.tokens = b.tokens + tokens
        b.cost_usd += cost


def build_session(
    ledger: Ledger,
    *,
    iterations: int = 2,
    participants: int = 3,
    converge: bool = True,
    clock: Clock | None = None,
    session_id: uuid.UUID | None = None,
    title: str = "Design a rate limiter",
) -> BuiltSession:
    """Record a whole deliberation (see the module docstring for its exact shape).

    ``clock`` defaults to a fresh :class:`FixedStepClock` (2026-01-01T00:00:00Z, +1 s per
    event); pass a shared clock to keep several sessions' timestamps distinct. Each round is
    saved separately, as the orchestrator does.
    """
    if iterations < 1 or participants < 2:
        raise ValueError("a session needs at least one iteration and two participants")
    clock = clock or FixedStepClock()
    sid = session_id or uuid.uuid4()
    people = make_participants(participants)
    names = [p.name for p in people]
    agg = Deliberation.start(
        session_id=sid,
        topic=Topic(title=title, description="How should the service limit request rates?"),
        config=SessionConfig(convergence_threshold=0.8, min_consensus=2),
        participants=people,
        at=clock.now(),
    )
    built = BuiltSession(
        id=sid, title=title, participants=people, iterations=iterations, converged=converge
    )
    b = _Builder(ledger, agg, clock, built)
    _save(b)
    open_div: str | None = None
    for k in range(1, iterations + 1):
        last = k == iterations
        agrees = converge and last
        if k == 1:
            r = b.round(RoundKind.DRAFT, k, names=names)
        else:
            r = b.round(RoundKind.REFINEMENT, k, names=names)
            for i, name in enumerate(names):
                stance = Stance.AGREE if i % 2 == 0 else Stance.PARTIAL
                agg.record_opinion(
                    round=r,
                    participant=name,
                    opinion=Opinion(
                        stance=stance,
                        reasoning=f"{name} on iteration {k}",
                        concerns=(f"concern of {name}",),
                        strength=0.6,
                        topics=("limits",),
                    ),
                    at=clock.now(),
                )
        agg.complete_round(round=r, at=clock.now())
        if open_div is not None:
            agg.change_divergence(
                open_div, DivergenceStatus.RESOLVED, at=clock.now(), round=r, note="settled"
            )
            open_div = None
        _save(b)

        targets = {names[i]: names[(i + 1) % len(names)] for i in range(len(names))}
        r = b.round(RoundKind.CRITIQUE, k, names=names, targets=targets)
        for i, name in enumerate(names):
            agg.record_critique(
                round=r,
                participant=name,
                critique=Critique(
                    target=targets[name],
                    strengths=(f"clear structure ({targets[name]})",),
                    weaknesses=(f"missing burst handling (iteration {k})",),
                    suggestions=(
                        Suggestion(
                            text="add a token bucket",
                            section="Section B",
                            priority=1 + i % 5,
                            category=SuggestionCategory.COMPLETENESS,
                        ),
                    ),
                    score=60 + 10 * k + i,
                ),
                at=clock.now(),
            )
        agg.complete_round(round=r, at=clock.now())
        if not agrees:
            open_div = f"div-{k}"
            agg.detect_divergence(
                ev.DivergenceDetected(
                    divergence_id=open_div,
                    round=r,
                    topic=f"burst size (iteration {k})",
                    positions=(
                        DivergentPosition(
                            participant=names[0], position="fixed bursts", stance=Stance.AGREE
                        ),
                        DivergentPosition(
                            participant=names[1],
                            position="adaptive bursts",
                            stance=Stance.STRONGLY_DISAGREE,
                        ),
                    ),
                    strongest=Stance.STRONGLY_DISAGREE,
                ),
                at=clock.now(),
            )
        _save(b)

        r = b.round(RoundKind.SYNTHESIS, k, names=names[:1])
        agg.complete_round(round=r, at=clock.now())
        _save(b)

        r = b.round(RoundKind.CONVERGENCE, k, names=names)
        agree_count = 0
        for i, name in enumerate(names):
            yes = agrees or i == 0
            agree_count += int(yes)
            agg.record_vote(
                round=r,
                participant=name,
                vote=ConvergenceVote(
                    agrees=yes,
                    score=90 if yes else 40,
                    concerns=() if yes else ("bursts",),
                ),
                at=clock.now(),
            )
        agg.complete_round(round=r, at=clock.now())
        n = len(names)
        agg.evaluate_convergence(
            ev.ConvergenceEvaluated(
                round=r,
                iteration=k,
                score=round(agree_count / n, 4),
                converged=agrees,
                majority_agrees=agree_count * 2 > n,
                agree=agree_count,
                disagree=n - agree_count,
                partial=0,
                threshold=0.8,
                blocking=() if agrees else (names[1],),
                remaining_issues=() if agrees else ("burst size",),
            ),
            at=clock.now(),
        )
        if agrees:
            agg.finish(SessionStatus.CONVERGED, at=clock.now(), reason="all agree", score=1.0)
        _save(b)
        built.iteration_end[k] = agg.version
    return built


def _save(b: _Builder) -> None:
    """Save the round's pending events, remembering each event's recorded timestamp."""
    for e in b.agg.pending_events:
        b.built.timestamps[int(e.originator_version)] = e.timestamp
    b.ledger.save(b.agg)


def fork_session(
    ledger: Ledger,
    parent_id: uuid.UUID,
    *,
    at_iteration: int,
    clock: Clock,
    session_id: uuid.UUID | None = None,
) -> uuid.UUID:
    """Fork ``parent_id`` as of the end of ``at_iteration`` (``SessionForked``); returns its id.

    The fork is saved with no further events, so it is ``paused`` with reason ``forked``.
    """
    parent = ledger.state(parent_id, at_iteration=at_iteration)
    sid = session_id or uuid.uuid4()
    agg = Deliberation.fork(session_id=sid, parent=parent, at=clock.now())
    ledger.save(agg)
    return sid


def seal_session(
    ledger: Ledger, session_id: uuid.UUID, *, clock: Clock, key: bytes | None = None
) -> str:
    """Append ``SessionSealed`` to a finished session (HMAC under ``key`` if given).

    Returns the sealed root hash (the head hash before the seal).
    """
    from forge_ledger.domain.hashing import keyed_digest

    agg = ledger.get(session_id)
    root = agg.state.head_hash
    agg.seal(at=clock.now(), hmac=keyed_digest(key, root) if key is not None else None)
    ledger.save(agg)
    return root
