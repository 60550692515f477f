"""Injectable time and id sources.

Determinism rule 1: nothing in ``domain``, ``engine`` or ``projections`` reads the clock or
draws random ids. The orchestrator asks a :class:`Clock` and an :class:`IdSource` and records
what they answered in events, so replays and tests see exactly the same values.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Protocol

__all__ = ["Clock", "FixedStepClock", "IdSource", "SequentialIds", "SystemClock", "UuidIds"]


class Clock(Protocol):
    """Answers the current time (timezone-aware, UTC)."""

    def now(self) -> datetime: ...


class IdSource(Protocol):
    """Answers new session ids."""

    def new_id(self) -> uuid.UUID: ...


class SystemClock:
    """The wall clock, truncated to milliseconds so it round-trips through JSON exactly."""

    def now(self) -> datetime:
        t = datetime.now(UTC)
        return t.replace(microsecond=(t.microsecond // 1000) * 1000)


class FixedStepClock:
    """A clock for tests and the offline demo: from ``start``, advancing ``step`` per read."""

    def __init__(
        self,
        start: datetime = datetime(2026, 1, 1, tzinfo=UTC),
        step: timedelta = timedelta(seconds=1),
    ) -> None:
        self._next = start
        self._step = step

    def now(self) -> datetime:
        t = self._next
        self._next = t + self._step
        return t


class UuidIds:
    """Random UUID4 session ids (the default)."""

    def new_id(self) -> uuid.UUID:
        return uuid.uuid4()


class SequentialIds:
    """Deterministic ids derived from a namespace and a counter (tests, demo)."""

    def __init__(self, namespace: str = "forge-ledger") -> None:
        self._ns = uuid.uuid5(uuid.NAMESPACE_URL, namespace)
        self._counter: Iterator[int] = iter(range(1, 1 << 62))

    def new_id(self) -> uuid.UUID:
        return uuid.uuid5(self._ns, str(next(self._counter)))
