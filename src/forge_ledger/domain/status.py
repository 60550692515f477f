"""A session's status: a plain enum, so that listing sessions can name the statuses (``sessions
--status``) without building the value types."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["SessionStatus"]


class SessionStatus(StrEnum):
    INITIALIZED = "initialized"
    IN_PROGRESS = "in_progress"
    PAUSED = "paused"
    CONVERGED = "converged"
    COMPLETE = "complete"
    ABORTED = "aborted"
    TIMED_OUT = "timed_out"

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL

    @property
    def can_continue(self) -> bool:
        return not self.terminal


_TERMINAL = frozenset(
    {
        SessionStatus.CONVERGED,
        SessionStatus.COMPLETE,
        SessionStatus.ABORTED,
        SessionStatus.TIMED_OUT,
    }
)
