"""Who takes part in a session: participants read from a file or named after their models,
joined to a session or changed before it goes on."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from ..clock import Clock, SystemClock
from ..domain.state import SessionState
from ..domain.values import Participant
from ..panel.participants_file import load_participants, participants_from_models
from ..records.lineage import apply_model_swaps
from .stores import Store, opened

__all__ = [
    "add_participants",
    "load_participants",
    "participants_from_models",
    "update_participants",
]


def add_participants(
    store: Store,
    session: str | UUID,
    participants: Sequence[Participant],
    *,
    clock: Clock | None = None,
) -> SessionState:
    """Join participants to an existing session (e.g. one imported from a YAML file)."""
    clk = clock or SystemClock()
    with opened(store) as ledger:
        agg = ledger.get(session)
        for p in participants:
            agg.join(p, at=clk.now())
        ledger.save(agg)
    return agg.state


def update_participants(
    store: Store,
    session: str | UUID,
    *,
    swaps: Sequence[str] = (),
    api_base: str | None = None,
    reason: str = "participants updated",
    clock: Clock | None = None,
) -> SessionState | None:
    """Change models (``NAME=MODEL``, see :func:`~forge_ledger.records.lineage.apply_model_swaps`)
    and endpoints (``api_base`` for every participant) before the session goes on.

    Each change is a ``ParticipantUpdated`` event carrying ``reason``, so a replay sees
    exactly the participants each call was made with. Nothing to change: nothing recorded
    (``None``).
    """
    if not swaps and api_base is None:
        return None
    clk = clock or SystemClock()
    with opened(store) as ledger:
        agg = ledger.get(session)
        people = apply_model_swaps(agg.state.participants, swaps)
        if api_base is not None:
            people = [p.model_copy(update={"api_base": api_base}) for p in people]
        for p in people:
            agg.update_participant(p, at=clk.now(), reason=reason)
        ledger.save(agg)
    return agg.state
