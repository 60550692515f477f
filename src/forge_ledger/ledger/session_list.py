"""The session list: which sessions a store holds and how ``sessions`` summarises each."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from ..domain import events as ev
from ..domain.json_fields import JsonFields
from ..domain.state import SessionState
from ..domain.topics import topic_for
from ..errors import (
    SessionDamagedError,
)

__all__ = ["CREATED_TOPICS", "SessionSummary", "summary"]

CREATED_TOPICS = tuple(topic_for(t) for t in ev.FIRST_EVENT_TYPES)


@dataclass(frozen=True)
class SessionSummary(JsonFields):
    """One session as ``sessions`` lists it."""

    id: str
    slug: str
    title: str
    status: str
    iteration: int
    events: int
    created: datetime
    updated: datetime
    parent_id: str | None = None
    damaged: str | None = None
    """Where and how the session is damaged (its other fields then say what was read before
    it); only a damaged session's JSON has the key."""

    def as_json(self) -> dict[str, Any]:
        doc = super().as_json()
        if self.damaged is None:
            del doc["damaged"]
        return doc


def summary(
    session_id: UUID, s: SessionState | None, damage: SessionDamagedError | None
) -> SessionSummary:
    """A session as ``sessions`` lists it (``s``: its state, None if none can be read)."""
    marked = None if damage is None else f"at event {damage.position}: {damage.problem}"
    if s is None:
        epoch = datetime.fromtimestamp(0, UTC)
        return SessionSummary(
            id=str(session_id),
            slug="",
            title="",
            status="damaged",
            iteration=0,
            events=0,
            created=epoch,
            updated=epoch,
            damaged=marked,
        )
    return SessionSummary(
        id=s.id,
        slug=s.slug,
        title=s.topic.title,
        status="damaged" if damage is not None else s.status.value,
        iteration=s.iteration,
        events=s.version,
        created=s.created_at,
        updated=s.updated_at,
        parent_id=s.fork_origin.parent_id if s.fork_origin else None,
        damaged=marked,
    )
