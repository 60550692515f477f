"""Live (ephemeral) events published to subscribers while a session runs.

These are the seed orchestrator's ``ForgeEvent``s: they drive progress displays and are
never stored — the ledger holds the facts. A subscriber is any callable taking one event;
it is called synchronously on the event loop, so it must be quick.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..domain.values import RoundKind, TokenCount

__all__ = [
    "ContentDelta",
    "ErrorRaised",
    "LiveEvent",
    "ParticipantComplete",
    "ParticipantThinking",
    "RoundComplete",
    "RoundStartedLive",
    "SessionFinished",
    "Subscriber",
]


@dataclass(frozen=True)
class RoundStartedLive:
    round: int
    kind: RoundKind
    iteration: int
    participants: tuple[str, ...]


@dataclass(frozen=True)
class ParticipantThinking:
    round: int
    participant: str
    model: str
    attempt: int


@dataclass(frozen=True)
class ContentDelta:
    round: int
    participant: str
    delta: str


@dataclass(frozen=True)
class ParticipantComplete:
    round: int
    participant: str
    tokens: TokenCount
    cost_usd: float
    ok: bool
    detail: str = ""


@dataclass(frozen=True)
class RoundComplete:
    round: int
    kind: RoundKind
    session_cost_usd: float
    score: float | None = None
    majority_agrees: bool | None = None
    contradictions: tuple[str, ...] = ()
    """Votes whose score contradicts their stance (``engine.votes.contradicting_votes``)."""


@dataclass(frozen=True)
class ErrorRaised:
    round: int
    participant: str
    message: str
    will_retry: bool


@dataclass(frozen=True)
class SessionFinished:
    status: str
    reason: str


LiveEvent = (
    RoundStartedLive
    | ParticipantThinking
    | ContentDelta
    | ParticipantComplete
    | RoundComplete
    | ErrorRaised
    | SessionFinished
)
Subscriber = Callable[[LiveEvent], None]
