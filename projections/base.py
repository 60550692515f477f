"""What a projection is: a named, versioned, pure fold from events to row writes.

A projection never touches a database. For each event the runner hands it the decoded event,
its validated payload and the session's state *after* that event (the domain's own fold), and
the projection answers with row writes (:class:`Put`, :class:`Patch`). At the end of a batch
it may add writes for the sessions the batch touched (:meth:`Projection.flush`), which lets
heavy rows be written once per batch instead of once per event. Because answers depend only
on their inputs, a rebuild from zero and any sequence of incremental catch-ups give the same
rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from forge_ledger.domain import SessionState
from forge_ledger.domain.events import Payload
from forge_ledger.domain.recorded import EventLike

__all__ = ["EventLike", "Op", "Patch", "Projection", "Put", "links"]


@dataclass(frozen=True)
class Put:
    """Insert the row, or update every given column of the existing row with the same id."""

    table: str
    row: dict[str, Any]


@dataclass(frozen=True)
class Patch:
    """Update some columns of the row with primary key ``id`` (no-op when it is absent)."""

    table: str
    id: str
    values: dict[str, Any] = field(default_factory=dict)


Op = Put | Patch


def links(session_id: str, round_no: int, participant: str) -> dict[str, Any]:
    """The columns by which a row of one participant in one round refers to its session,
    its round and its participant: the read model's keys are ``<session>:<round>`` and
    ``<session>:<name>`` (the ``rounds`` and ``participants`` rows' own ids)."""
    return {
        "session_id": session_id,
        "round_id": f"{session_id}:{round_no}",
        "participant_id": f"{session_id}:{participant}",
        "participant": participant,
    }


class Projection:
    """Base class: override :meth:`apply` (and :meth:`flush` when useful).

    ``version`` is bumped whenever the rows a projection writes for the same events change;
    the runner then empties its ``tables`` and refolds it from the first event.
    """

    name: ClassVar[str] = ""
    version: ClassVar[int] = 1
    tables: ClassVar[tuple[str, ...]] = ()

    def begin(self) -> None:
        """A batch starts (before its first :meth:`apply`). A projection that defers rows to
        :meth:`flush` forgets here whatever a batch that failed midway left pending."""

    def apply(self, _event: EventLike, _payload: Payload, _state: SessionState) -> Sequence[Op]:
        """Writes for one event (none by default)."""
        return ()

    def flush(self, _touched: Sequence[SessionState]) -> Sequence[Op]:
        """Writes for each session the batch touched (in order of first touch)."""
        return ()
