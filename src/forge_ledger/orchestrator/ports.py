"""What the orchestrator needs from outside, as small typed seams.

The orchestrator runs against a :class:`SessionStore` (the ledger when live, replay's
comparing store when re-running a recorded session), and takes its two policies that differ
between a live run and a replay as values: how an ended session is sealed
(:class:`SealPolicy`) and how the session's wall time is measured (:class:`WallTime`). A
replay injects :class:`NoSeal` and :class:`NoWallTime`; nothing in the orchestrator asks
whether it is being replayed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol
from uuid import UUID

from ..clock import Clock
from ..domain.aggregate import Deliberation
from ..domain.hashing import seal_hmac

__all__ = [
    "KeyedSeal",
    "MonotonicWallTime",
    "NoSeal",
    "NoWallTime",
    "SealPolicy",
    "SessionStore",
    "WallTime",
]


class SessionStore(Protocol):
    """Where sessions are loaded from and their new events appended.

    :class:`~forge_ledger.ledger.Ledger` is one; replay's store, which compares what would be
    appended with the record instead of writing, is the other.
    """

    def get(self, session_id: UUID, /, *, version: int | None = None) -> Deliberation:
        """The session as of ``version`` (its head when ``None``)."""
        ...

    def save(self, *aggregates: Deliberation) -> None:
        """Append the pending events of ``aggregates`` (atomically)."""
        ...


class SealPolicy(Protocol):
    """What happens to an ended session that has no seal yet."""

    def seal(self, agg: Deliberation, clock: Clock, /) -> None:
        """Seal ``agg`` (or leave it unsealed); reads ``clock`` only for an event it records."""
        ...


@dataclass(frozen=True)
class KeyedSeal:
    """Live runs: seal the ended session, with an HMAC when a key is given."""

    key: bytes | None = None

    def seal(self, agg: Deliberation, clock: Clock, /) -> None:
        """Record ``SessionSealed`` over the chain's head."""
        if agg.state.seal is None:
            agg.seal(at=clock.now(), hmac=seal_hmac(self.key, agg.state.head_hash))


@dataclass(frozen=True)
class NoSeal:
    """Replay (and runs that seal later): the record says whether and when a seal came, so
    the orchestrator never produces one."""

    def seal(self, _agg: Deliberation, _clock: Clock, /) -> None:
        """Leave the session unsealed."""
        return None


class WallTime(Protocol):
    """How the session's time budget is measured while a round is played."""

    def now(self) -> float:
        """Seconds on a monotonic clock (only differences matter)."""
        ...

    def exhausted(self, deadline: float, /) -> bool:
        """Whether a call about to be made is past ``deadline`` (refused, then recorded as a
        ``budget_time`` failure)."""
        ...

    def call_timeout(self, configured: float, deadline: float, /) -> float:
        """The timeout of one call: ``configured``, capped by the time left."""
        ...


@dataclass(frozen=True)
class MonotonicWallTime:
    """Live runs: the time budget runs on ``monotonic`` (injectable for tests)."""

    monotonic: Callable[[], float] = time.monotonic

    def now(self) -> float:
        """The monotonic clock's reading."""
        return self.monotonic()

    def exhausted(self, deadline: float, /) -> bool:
        """Past the deadline."""
        return self.monotonic() >= deadline

    def call_timeout(self, configured: float, deadline: float, /) -> float:
        """The configured timeout, never past the deadline (and never zero)."""
        return max(0.001, min(configured, deadline - self.monotonic()))


@dataclass(frozen=True)
class NoWallTime:
    """Replay: a call refused for time was recorded as a failure, which the replay provider
    serves back, so elapsed time on this machine must never refuse or shorten a call."""

    def now(self) -> float:
        """Always 0: no time passes."""
        return 0.0

    def exhausted(self, _deadline: float, /) -> bool:
        """Never."""
        return False

    def call_timeout(self, configured: float, _deadline: float, /) -> float:
        """The configured timeout."""
        return configured
