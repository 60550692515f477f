"""A study's state: a pure fold of its events (no clock, no I/O), and the record of one event.

:class:`StudyRecord` is one stored event with its hash-chain links; :func:`fold` builds
:class:`StudyState` from a study's records in order, refusing a record whose link does not
follow the one before (moved, altered or duplicated in the store). The budget arithmetic a
runner needs (what is spent, what running cells may still spend) is read from the state, so
every process that folds the same events agrees on it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from ..domain.hashing import GENESIS, chain_hash
from ..errors import StudyDamagedError
from . import events as sev
from .plan import CellSpec, StudyPlan

__all__ = ["CellState", "CellStatus", "StudyRecord", "StudyState", "fold", "record_hash"]

CellStatus = Literal["pending", "running", "paused", "done", "failed"]
"""``running``: assigned to a session that has not paused or finished (it may be running in
this process, in another, or have been cut off: ``study run`` then resumes it)."""


@dataclass(frozen=True)
class StudyRecord:
    """One stored study event, as ``study log`` shows it and the fold reads it."""

    study_id: str
    position: int
    type: str
    timestamp: datetime
    data: dict[str, Any]
    prev_hash: str
    hash: str

    def payload(self) -> sev.StudyPayload:
        return sev.study_payload_class(self.type).model_validate(self.data)

    def as_json(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "type": self.type,
            "timestamp": self.timestamp.isoformat(),
            "hash": self.hash,
            "prev_hash": self.prev_hash,
            "data": self.data,
        }


def record_hash(
    study_id: str, position: int, type_name: str, at: datetime, data: dict[str, Any], prev: str
) -> str:
    """The chain hash of a study event: the sessions' rule, the study's id in the session's
    place."""
    return chain_hash(
        session_id=study_id,
        position=position,
        type_name=type_name,
        timestamp=at,
        data=data,
        prev_hash=prev,
    )


@dataclass
class CellState:
    spec: CellSpec
    status: CellStatus = "pending"
    session_id: str | None = None
    cap_usd: float = 0.0
    max_time_secs: int = 0
    cost_usd: float = 0.0
    calls: int = 0
    outcome: str = ""
    reason: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "cell": self.spec.id,
            "topic": self.spec.topic + 1,
            "panel": self.spec.panel,
            "variant": self.spec.variant,
            "repeat": self.spec.repeat,
            "status": self.status,
            "session_id": self.session_id,
            "outcome": self.outcome or None,
            "reason": self.reason or None,
            "cost_usd": round(self.cost_usd, 6),
            "calls": self.calls,
        }


@dataclass
class StudyState:
    id: str
    name: str
    plan: StudyPlan
    planned_at: datetime
    cells: dict[str, CellState]
    version: int = 1
    head_hash: str = GENESIS
    updated_at: datetime | None = None
    stopped: str = ""
    finished: bool = False
    by_session: dict[str, str] = field(default_factory=dict)

    # ------------------------------------------------------------------ reading

    def count(self, status: CellStatus) -> int:
        return sum(1 for c in self.cells.values() if c.status == status)

    @property
    def spent_usd(self) -> float:
        """What cells that paused or finished have spent."""
        return sum(c.cost_usd for c in self.cells.values())

    @property
    def committed_usd(self) -> float:
        """What the study may have spent once every unfinished cell is done: the spent, plus
        each running or paused cell's cap (it may spend up to it when it goes on)."""
        return sum(
            max(c.cap_usd, c.cost_usd) if c.status in ("running", "paused") else c.cost_usd
            for c in self.cells.values()
        )

    @property
    def calls(self) -> int:
        return sum(c.calls for c in self.cells.values())

    @property
    def status(self) -> str:
        if self.finished:
            return "finished"
        if self.stopped:
            return "stopped"
        return "planned" if self.version == 1 else "in_progress"

    def summary(self) -> dict[str, Any]:
        counts = {s: self.count(s) for s in ("pending", "running", "paused", "done", "failed")}
        return {
            "study_id": self.id,
            "name": self.name,
            "status": self.status,
            "stopped": self.stopped or None,
            "cells": len(self.cells),
            **counts,
            "spent_usd": round(self.spent_usd, 6),
            "calls": self.calls,
            "budget": self.plan.budget.model_dump(),
            "events": self.version,
            "planned_at": self.planned_at.isoformat(),
        }

    # ------------------------------------------------------------------ folding

    def apply(self, record: StudyRecord) -> None:
        """Fold one record that follows the head (see :func:`fold`)."""
        if record.position != self.version + 1 or record.prev_hash != self.head_hash:
            raise StudyDamagedError(
                self.id, record.position, "it does not follow the study's previous event"
            )
        try:
            self._apply_payload(record.payload())
        except (ValueError, KeyError) as e:  # a payload or a cell the plan does not have
            raise StudyDamagedError(
                self.id, record.position, f"it cannot be read ({type(e).__name__})"
            ) from None
        self.version, self.head_hash, self.updated_at = (
            record.position,
            record.hash,
            record.timestamp,
        )

    def _apply_payload(self, payload: sev.StudyPayload) -> None:
        if isinstance(payload, sev.CellAssigned | sev.CellPaused | sev.CellFinished):
            self._apply_cell(payload)
        elif isinstance(payload, sev.StudyStopped):
            self.stopped = payload.reason
        elif isinstance(payload, sev.StudyFinished):
            self.finished = True

    def _apply_cell(self, p: sev.CellAssigned | sev.CellPaused | sev.CellFinished) -> None:
        cell = self.cells[p.cell]
        if isinstance(p, sev.CellAssigned):
            cell.status, cell.session_id, cell.cap_usd = "running", p.session_id, p.max_cost_usd
            cell.max_time_secs = p.max_time_secs
            self.by_session[p.session_id] = p.cell
            return
        cell.cost_usd, cell.calls, cell.reason = p.cost_usd, p.calls, p.reason
        if isinstance(p, sev.CellPaused):
            cell.status = "paused"
        else:
            cell.status = "failed" if p.outcome in ("failed", "aborted") else "done"
            cell.outcome = p.outcome


def fold(records: Iterable[StudyRecord]) -> StudyState:
    """The state after ``records`` (a study's events from its first, in order)."""
    it = iter(records)
    first = next(it, None)
    if first is None or first.type != sev.StudyPlanned.TYPE or first.position != 1:
        study = first.study_id if first is not None else "?"
        raise StudyDamagedError(study, 1, "the study does not begin with its plan")
    if first.prev_hash != GENESIS:
        raise StudyDamagedError(first.study_id, 1, "its first event links to another")
    try:
        planned = sev.StudyPlanned.model_validate(first.data)
        plan = StudyPlan.model_validate(planned.plan)
    except ValueError as e:
        raise StudyDamagedError(
            first.study_id, 1, f"it cannot be read ({type(e).__name__})"
        ) from None
    state = StudyState(
        id=first.study_id,
        name=planned.name,
        plan=plan,
        planned_at=first.timestamp,
        cells={c.id: CellState(spec=c) for c in planned.cells},
        head_hash=first.hash,
        updated_at=first.timestamp,
    )
    for record in it:
        state.apply(record)
    return state
