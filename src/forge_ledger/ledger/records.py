"""A stored event as users see it and projections fold it."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..domain import events as ev
from ..domain.json_fields import fields_json

__all__ = ["RecordedEvent", "as_recorded"]


@dataclass(frozen=True)
class RecordedEvent:
    """One stored event as users see it (``log``) and projections fold it.

    The fields are declared in the order its JSON form (:meth:`as_json`) lists them.
    """

    session_id: str
    position: int
    type: str
    timestamp: datetime
    hash: str
    prev_hash: str
    data: dict[str, Any]
    notification_id: int | None = None

    def payload(self) -> ev.Payload:
        return ev.payload_class(self.type).model_validate(self.data)

    def as_json(self, *, exclude: Collection[str] = ()) -> dict[str, Any]:
        """The event as JSON values, field by field (the time in ISO 8601,
        ``notification_id`` only when known), without the fields in ``exclude``: ``log
        --json`` leaves out the session id and the notification id."""
        unknown = ("notification_id",) if self.notification_id is None else ()
        return fields_json(self, exclude={*exclude, *unknown})


def as_recorded(domain_event: Any, *, notification_id: int | None = None) -> RecordedEvent:
    return RecordedEvent(
        session_id=str(domain_event.originator_id),
        position=int(domain_event.originator_version),
        type=type(domain_event).TYPE,
        timestamp=domain_event.timestamp,
        data=domain_event.data,
        hash=domain_event.hash,
        prev_hash=domain_event.prev_hash,
        notification_id=notification_id,
    )
