"""Session state as a projection: the domain fold, and a cheap row per session for ``show``.

:func:`apply_event` is the fold the aggregate runs (``domain.fold.fold``), usable on events
read from the ledger, so projections, audits and time travel all see the same state.
:class:`SessionStateProjection` writes a summary row of the folded state once per batch (not
per event) in ``session_states``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from forge_ledger.domain import SessionState
from forge_ledger.domain.events import Payload
from forge_ledger.domain.fold import fold

from .base import EventLike, Op, Projection, Put

__all__ = ["SessionStateProjection", "apply_event", "fold_events", "summary_row"]


def apply_event(
    state: SessionState | None, event: EventLike, payload: Payload | None = None
) -> SessionState:
    """The state after ``event``; ``state`` is the session's state before it (None at start).

    The domain's one fold (:func:`forge_ledger.domain.fold.fold`) on an event read from the
    ledger; mutates and returns ``state`` except for the first event.
    """
    return fold(
        state,
        payload if payload is not None else event.payload(),
        session_id=event.session_id,
        position=event.position,
        at=event.timestamp,
        hash_=event.hash,
    )


def fold_events(events: Iterable[EventLike]) -> SessionState:
    """Fold one session's events (from its first) into its state."""
    state: SessionState | None = None
    for e in events:
        state = apply_event(state, e)
    if state is None:
        raise ValueError("no events to fold")
    return state


def summary_row(s: SessionState) -> dict[str, Any]:
    """The ``session_states`` row of ``s``: what ``show``'s header needs, no texts.

    Every value is a scalar read off the state (counts, not lists), so writing the row costs
    the same for a session of ten events or of ten thousand.
    """
    last = s.last_round
    conv = s.latest_convergence
    return {
        "id": s.id,
        "status": s.status.value,
        "status_reason": s.status_reason,
        "phase": s.phase,
        "iteration": s.iteration,
        "version": s.version,
        "head_hash": s.head_hash,
        "participants": len(s.participants),
        "rounds": len(s.rounds),
        "contributions": sum(len(r.contributions) for r in s.rounds),
        "failures": len(s.failures),
        "divergences": len(s.divergences),
        "open_divergences": sum(1 for d in s.divergences if d.is_open),
        "pending_questions": len(s.pending_questions),
        "last_round": last.number if last is not None else None,
        "last_round_kind": last.kind.value if last is not None else None,
        "last_round_status": last.status.value if last is not None else None,
        "convergence_round": conv.round if conv is not None else None,
        "convergence_score": conv.score if conv is not None else None,
        "convergence_threshold": conv.threshold if conv is not None else None,
        "converged": int(conv.converged) if conv is not None else None,
        "majority_agrees": int(conv.majority_agrees) if conv is not None else None,
        "tokens_in": s.tokens.input,
        "tokens_out": s.tokens.output,
        "cost_usd": s.cost_usd,
        "updated_at": s.updated_at.isoformat(),
    }


class SessionStateProjection(Projection):
    """One summary row per session (status, phase, counts, usage, latest vote).

    Version 1 stored the whole state as JSON, re-serialised for every session a batch touched:
    a one-event catch-up on a large session spent most of its time there. The full state is
    the ledger's business (snapshots); this row answers "where is the session now" cheaply.
    """

    name = "session_state"
    version = 2
    tables = ("session_states",)

    def flush(self, touched: Sequence[SessionState]) -> Sequence[Op]:
        return [Put("session_states", summary_row(s)) for s in touched]
