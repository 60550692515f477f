"""How ``sessions`` summarises a session: from its state here, from the read model's rows in
:mod:`forge_ledger.projections.current` (which the read-model projection wrote from the same
state). Nothing here loads the domain's models: a listing from the read model needs none."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ..domain.json_fields import JsonFields

if TYPE_CHECKING:
    from ..domain.state import SessionState
    from ..errors import SessionDamagedError

__all__ = ["SessionSummary", "summary", "summary_from_row"]


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


def summary_from_row(row: Mapping[str, Any]) -> SessionSummary:
    """A session as ``sessions`` lists it, from its read-model ``sessions`` row (the columns of
    :data:`forge_ledger.projections.current.SUMMARY_COLUMNS`), which the read-model projection
    wrote from the session's state as :func:`summary` reads it."""
    return SessionSummary(
        id=row["id"],
        slug=row["slug"],
        title=row["title"],
        status=row["status"],
        iteration=int(row["iteration"]),
        events=int(row["events"]),
        created=datetime.fromisoformat(row["created_at"]),
        updated=datetime.fromisoformat(row["updated_at"]),
        parent_id=row["parent_id"],
    )
