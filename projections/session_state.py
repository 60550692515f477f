"""Session state as a projection: the domain fold, and a cheap row per session for ``show``.

:func:`apply_event` is the same fold the aggregate runs (``SessionState.initial`` /
``forked`` / ``apply``), usable on events read from the ledger, so projections, audits and
time travel all see the same state. :class:`SessionStateProjection` stores the folded state
once per batch (not per event) in ``session_states``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from forge_ledger.domain import SessionState
from forge_ledger.domain import events as ev
from forge_ledger.domain.events import Payload

from .base import EventLike, Op, Projection, Put, dumps

__all__ = ["SessionStateProjection", "apply_event", "fold_events"]


def apply_event(
    state: SessionState | None, event: EventLike, payload: Payload | None = None
) -> SessionState:
    """The state after ``event``; ``state`` is the session's state before it (None at start).

    Mutates and returns ``state`` (the domain fold works in place) except for the first event.
    """
    p = payload if payload is not None else event.payload()
    if isinstance(p, ev.SessionStarted):
        new = SessionState.initial(event.session_id, p, event.timestamp)
    elif isinstance(p, ev.SessionForked):
        new = SessionState.forked(event.session_id, p, event.timestamp)
    else:
        if state is None:
            raise ValueError(
                f"event {event.position} of session {event.session_id} has no prior state"
            )
        state.apply(p, position=event.position, at=event.timestamp, hash_=event.hash)
        return state
    new.version = event.position
    new.head_hash = event.hash
    return new


def fold_events(events: Iterable[EventLike]) -> SessionState:
    """Fold one session's events (from its first) into its state."""
    state: SessionState | None = None
    for e in events:
        state = apply_event(state, e)
    if state is None:
        raise ValueError("no events to fold")
    return state


class SessionStateProjection(Projection):
    """One row per session with the full state as JSON (what ``show`` reads cheaply)."""

    name = "session_state"
    version = 1
    tables = ("session_states",)

    def flush(self, touched: Sequence[SessionState]) -> Sequence[Op]:
        return [
            Put(
                "session_states",
                {
                    "id": s.id,
                    "status": s.status.value,
                    "iteration": s.iteration,
                    "version": s.version,
                    "head_hash": s.head_hash,
                    "state_json": dumps(s.model_dump(mode="json")),
                },
            )
            for s in touched
        ]
