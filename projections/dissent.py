"""The dissent log: divergences with their lifecycle and the events that handled them.

A divergence opens when participants' positions conflict (``DivergenceDetected``) and may be
addressed, then withdrawn, overruled or resolved. The dissent log lists those still open
(``open`` or ``addressed``) with how many rounds they have stayed open, and the positions of
the events that opened, addressed and closed each — ``--all`` includes closed ones too.

:func:`dissent_log` is a pure function over a session's state (or its events), reused by the
audit; :class:`DissentProjection` writes the same facts to the read model.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from forge_ledger.domain import DivergenceState, DivergenceStatus, SessionState, canonical_json
from forge_ledger.domain import events as ev
from forge_ledger.domain.events import Payload
from forge_ledger.domain.events import _DivergenceChange as DivergenceChangePayload
from forge_ledger.domain.json_fields import JsonFields
from forge_ledger.domain.state import DivergenceChange

from .base import EventLike, Op, Patch, Projection, Put
from .session_state import fold_events

__all__ = ["DissentEntry", "DissentProjection", "dissent_log"]


@dataclass(frozen=True)
class DissentEntry(JsonFields):
    """One divergence as the dissent log shows it."""

    json_names = MappingProxyType({"is_open": "open"})

    divergence_id: str
    topic: str
    status: str
    is_open: bool
    strong: bool
    strongest: str
    opened_round: int
    opened_position: int
    addressed_position: int | None
    closed_position: int | None
    closed_by: str
    rounds_open: int
    """Rounds started since it opened while it stayed open (how long the dissent has lasted)."""
    positions: tuple[tuple[str, str, str], ...]
    """(participant, stance, position text) as detected."""
    lifecycle: tuple[DivergenceChange, ...]
    """Each status it went through, with the event that set it."""

    def as_json(self) -> dict[str, Any]:
        """Each position as a mapping with its names (the tuple's order is not in the JSON)."""
        positions = [{"participant": p, "stance": s, "position": t} for p, s, t in self.positions]
        return {**super().as_json(), "positions": positions}


def _entry(state: SessionState, d: DivergenceState) -> DissentEntry:
    addressed = next(
        (h.position for h in d.history if h.status is DivergenceStatus.ADDRESSED), None
    )
    closing = next((h for h in d.history if h.status.closed), None)
    end = closing.position if closing is not None else None
    rounds_open = sum(
        1
        for r in state.rounds
        if r.started_position > d.opened_position and (end is None or r.started_position < end)
    )
    return DissentEntry(
        divergence_id=d.id,
        topic=d.topic,
        status=d.status.value,
        is_open=d.is_open,
        strong=d.strong,
        strongest=d.strongest.value,
        opened_round=d.opened_round,
        opened_position=d.opened_position,
        addressed_position=addressed,
        closed_position=end,
        closed_by=closing.by if closing is not None else "",
        rounds_open=rounds_open,
        positions=tuple((p.participant, p.stance.value, p.position) for p in d.positions),
        lifecycle=tuple(d.history),
    )


def dissent_log(
    source: SessionState | Iterable[EventLike], *, include_closed: bool = False
) -> list[DissentEntry]:
    """Divergences of a session in the order they opened; only open ones unless asked.

    ``source`` is a session's state (any past one works: time travel) or its events from the
    first. Pure: same input, same answer.
    """
    state = source if isinstance(source, SessionState) else fold_events(source)
    return [
        _entry(state, d) for d in state.divergences if include_closed or d.is_open
    ]


class DissentProjection(Projection):
    """Tables ``divergences``, ``divergence_positions`` and ``divergence_events``."""

    name = "dissent"
    version = 1
    tables = ("divergences", "divergence_positions", "divergence_events")

    def apply(self, event: EventLike, payload: Payload, state: SessionState) -> Sequence[Op]:
        sid = event.session_id
        if isinstance(payload, ev.DivergenceDetected):
            d = state.divergence(payload.divergence_id)
            return self._divergence_rows(state, d) if d is not None else ()
        if isinstance(payload, ev.SessionForked):
            out: list[Op] = []
            for d in state.divergences:
                out.extend(self._divergence_rows(state, d, inherited=True))
            return out
        if isinstance(payload, DivergenceChangePayload):
            d = state.divergence(payload.divergence_id)
            if d is None:
                return ()
            key = f"{sid}:{d.id}"
            e = _entry(state, d)
            return [
                Patch("divergences", key, {
                    "status": e.status,
                    "addressed_position": e.addressed_position,
                    "closed_position": e.closed_position,
                    "closed_by": e.closed_by,
                }),
                Put("divergence_events", {
                    "id": f"{sid}:{event.position}",
                    "divergence_id": key,
                    "session_id": sid,
                    "status": d.history[-1].status.value,
                    "position": event.position,
                    "round": payload.round,
                    "note": payload.note,
                    "by": payload.by,
                }),
            ]
        return ()

    @staticmethod
    def _divergence_rows(
        state: SessionState, d: DivergenceState, *, inherited: bool = False
    ) -> list[Op]:
        """Rows of one divergence; a fork's inherited history keeps the parent's positions."""
        sid = state.id
        tag = "parent-" if inherited else ""
        key = f"{sid}:{d.id}"
        e = _entry(state, d)
        out: list[Op] = [
            Put("divergences", {
                "id": key,
                "session_id": sid,
                "divergence_id": d.id,
                "round_id": f"{sid}:{d.opened_round}",
                "topic": d.topic,
                "strongest": d.strongest.value,
                "strong": int(d.strong),
                "status": d.status.value,
                "opened_round": d.opened_round,
                "opened_position": d.opened_position,
                "addressed_position": e.addressed_position,
                "closed_position": e.closed_position,
                "closed_by": e.closed_by,
                "positions_json": canonical_json([p.model_dump(mode="json") for p in d.positions]),
            })
        ]
        for p in d.positions:
            out.append(Put("divergence_positions", {
                "id": f"{key}:{p.participant}",
                "divergence_id": key,
                "session_id": sid,
                "participant_id": f"{sid}:{p.participant}",
                "participant": p.participant,
                "stance": p.stance.value,
                "position_text": p.position,
            }))
        for h in d.history:
            out.append(Put("divergence_events", {
                "id": f"{sid}:{tag}{h.position}",
                "divergence_id": key,
                "session_id": sid,
                "status": h.status.value,
                "position": h.position,
                "round": h.round,
                "note": h.note,
                "by": h.by,
            }))
        return out
