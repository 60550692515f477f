"""Stories of realistic sessions for the read-side tests: real aggregate commands, real saves.

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

The session is told with :class:`forge_ledger.testing.SessionBuilder`. Helpers return a
:class:`BuiltSession` describing what was built (id, positions where each
iteration ends, the per-contribution token/cost figures), so tests can compare CLI output
with independently computed values.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime

from forge_ledger.clock import Clock, FixedStepClock
from forge_ledger.domain import events as ev
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
    SuggestionCategory,
    TokenCount,
    Topic,
)
from forge_ledger.ledger import Ledger
from forge_ledger.testing import SessionBuilder

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
    people = make_participants(participants)
    b = SessionBuilder(clock=clock or FixedStepClock(), store=ledger).start(
        Topic(title=title, description="How should the service limit request rates?"),
        participants=people,
        config=SessionConfig(convergence_threshold=0.8, min_consensus=2),
        session_id=session_id or uuid.uuid4(),
    )
    built = BuiltSession(
        id=b.id, title=title, participants=people, iterations=iterations, converged=converge,
        timestamps=b.saved_at,
    )
    b.save()
    for k in range(1, iterations + 1):
        _iteration(b, built, k, agrees=converge and k == iterations)
        built.iteration_end[k] = b.aggregate.version
    return built


def _round(b: SessionBuilder, built: BuiltSession, kind: RoundKind, iteration: int,
           names: list[str], targets: dict[str, str] | None = None) -> None:
    """Start a round where each of ``names`` contributes; contribution number ``i`` (counted
    session-wide) costs INPUT_TOKENS + i tokens in and OUTPUT_TOKENS + 2*i out."""
    b.round(kind, iteration=iteration, participants=names, targets=targets)
    for name in names:
        built.contributions += 1
        i = built.contributions
        tokens = TokenCount(input=INPUT_TOKENS + i, output=OUTPUT_TOKENS + 2 * i)
        participant = next(p for p in built.participants if p.name == name)
        b.answer(
            name,
            contribution_text(kind, name, iteration),
            messages=[
                ChatMessage(role="system", content=f"You are {name}."),
                ChatMessage(role="user",
                            content=f"{kind.value} round {b.round_number} on {built.title!r}"),
            ],
            params=ev.CallParams(temperature=participant.temperature, max_tokens=512),
            tokens=tokens, cost_usd=cost_of(tokens), duration_ms=100 * i,
        )
        built.tokens = built.tokens + tokens
        built.cost_usd += cost_of(tokens)


def _iteration(b: SessionBuilder, built: BuiltSession, k: int, *, agrees: bool) -> None:
    """Iteration ``k``: draft or refinement, critique, synthesis, convergence (saved after each)."""
    names = b.names
    if k == 1:
        _round(b, built, RoundKind.DRAFT, k, names)
    else:
        _round(b, built, RoundKind.REFINEMENT, k, names)
        for i, name in enumerate(names):
            b.opinion(name, stance=Stance.AGREE if i % 2 == 0 else Stance.PARTIAL,
                      reasoning=f"{name} on iteration {k}", concerns=(f"concern of {name}",),
                      strength=0.6, topics=("limits",))
    b.close_round()
    if k > 1:
        b.settle(f"div-{k - 1}", DivergenceStatus.RESOLVED, note="settled")
    b.save()

    targets = {names[i]: names[(i + 1) % len(names)] for i in range(len(names))}
    _round(b, built, RoundKind.CRITIQUE, k, names, targets)
    for i, name in enumerate(names):
        b.critique(
            name, target=targets[name], strengths=(f"clear structure ({targets[name]})",),
            weaknesses=(f"missing burst handling (iteration {k})",),
            suggestions=(Suggestion(text="add a token bucket", section="Section B",
                                    priority=1 + i % 5,
                                    category=SuggestionCategory.COMPLETENESS),),
            score=60 + 10 * k + i,
        )
    b.close_round()
    if not agrees:
        b.diverge(f"div-{k}", f"burst size (iteration {k})",
                  {names[0]: ("fixed bursts", Stance.AGREE),
                   names[1]: ("adaptive bursts", Stance.STRONGLY_DISAGREE)},
                  strongest=Stance.STRONGLY_DISAGREE)
    b.save()

    _round(b, built, RoundKind.SYNTHESIS, k, names[:1])
    b.close_round().save()

    _round(b, built, RoundKind.CONVERGENCE, k, names)
    votes = [agrees or i == 0 for i in range(len(names))]
    for name, yes in zip(names, votes, strict=True):
        b.vote(name, agrees=yes, score=90 if yes else 40, concerns=() if yes else ("bursts",))
    b.close_round()
    n, agree_count = len(names), sum(votes)
    b.evaluate(
        iteration=k, score=round(agree_count / n, 4), converged=agrees,
        majority_agrees=agree_count * 2 > n, agree=agree_count, disagree=n - agree_count,
        partial=0, threshold=0.8, blocking=() if agrees else (names[1],),
        remaining_issues=() if agrees else ("burst size",),
    )
    if agrees:
        b.finish(SessionStatus.CONVERGED, reason="all agree", score=1.0)
    b.save()


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
    parent = SessionBuilder.of(ledger.get(parent_id), clock=clock, store=ledger)
    return parent.fork(at_iteration=at_iteration, session_id=session_id or uuid.uuid4()).id


def seal_session(
    ledger: Ledger, session_id: uuid.UUID, *, clock: Clock, key: bytes | None = None,
) -> str:
    """Append ``SessionSealed`` to a finished session (HMAC under ``key`` if given).

    Returns the sealed root hash (the head hash before the seal).
    """
    return SessionBuilder.of(ledger.get(session_id), clock=clock, store=ledger).seal(key=key)
