"""Runs deliberations: engine decisions, concurrent provider calls, ordered event recording."""

from .live import (
    ContentDelta,
    ErrorRaised,
    LiveEvent,
    ParticipantComplete,
    ParticipantThinking,
    RoundComplete,
    RoundStartedLive,
    SessionFinished,
    Subscriber,
)
from .ports import (
    KeyedSeal,
    MonotonicWallTime,
    NoSeal,
    NoWallTime,
    SealPolicy,
    SessionStore,
    WallTime,
)
from .runner import Orchestrator

__all__ = [
    "ContentDelta",
    "ErrorRaised",
    "KeyedSeal",
    "LiveEvent",
    "MonotonicWallTime",
    "NoSeal",
    "NoWallTime",
    "Orchestrator",
    "ParticipantComplete",
    "ParticipantThinking",
    "RoundComplete",
    "RoundStartedLive",
    "SealPolicy",
    "SessionFinished",
    "SessionStore",
    "Subscriber",
    "WallTime",
]
