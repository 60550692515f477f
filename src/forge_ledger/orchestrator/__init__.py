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
from .runner import Orchestrator

__all__ = [
    "ContentDelta",
    "ErrorRaised",
    "LiveEvent",
    "Orchestrator",
    "ParticipantComplete",
    "ParticipantThinking",
    "RoundComplete",
    "RoundStartedLive",
    "SessionFinished",
    "Subscriber",
]
