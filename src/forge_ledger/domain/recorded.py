"""The shape of a stored event as folds see it.

Projections, the YAML export and the audit are pure folds over recorded events; they take
anything with this shape (``forge_ledger.ledger.RecordedEvent`` is the one the store returns)
so they never depend on the store itself.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from .events import Payload

__all__ = ["EventLike"]


class EventLike(Protocol):
    """One recorded event: where it sits, what it says, its hash and its link to the
    previous event's hash."""

    @property
    def session_id(self) -> str: ...
    @property
    def position(self) -> int: ...
    @property
    def type(self) -> str: ...
    @property
    def timestamp(self) -> datetime: ...
    @property
    def data(self) -> dict[str, Any]: ...
    @property
    def hash(self) -> str: ...
    @property
    def prev_hash(self) -> str: ...
    @property
    def notification_id(self) -> int | None: ...

    def payload(self) -> Payload: ...
