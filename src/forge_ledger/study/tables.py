"""A study's metrics as tidy tables: one row per session, one per participant and session.

Every figure comes from :mod:`forge_ledger.audit.metrics` (``session_row`` and
``participant_rows``, over each session's audit, and for a counterfactual cell its fork
against the parent cell's session, :func:`~forge_ledger.audit.compare_fork`); this module
only reads the sessions and fills the study columns from the study's cells:

- ``study`` (its name), ``cell`` (``t1/trio/base/1``), ``topic`` (``t1``), ``panel``,
  ``variant`` (the cell's arm: its variant, ``loo-dave`` for a leave-one-out cell), ``repeat``;
- for a counterfactual cell, ``parent_id`` (the parent cell's session), ``without``,
  ``outcome_changed`` and ``similarity_to_parent`` from the comparison.

Rows follow the plan's order of cells, so the same store gives the same tables to the byte.
As of a past study event (``at_event``), a cell finished by then shows its whole session; a
cell still running or paused then shows its session as of the time of that event; a cell not
yet assigned has no row.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING
from uuid import UUID

from ..audit.metrics import ParticipantMetrics, SessionMetrics
from ..errors import ForgeLedgerError
from .state import CellState, StudyState

if TYPE_CHECKING:
    from ..audit.model import AuditReport
    from ..domain.recorded import EventLike
    from ..ledger import Ledger

__all__ = ["CellRows", "StudyTables", "cell_events", "cell_rows", "study_tables"]


@dataclass(frozen=True)
class StudyTables:
    """The two tables of a study as of its event ``as_of_event``."""

    study_id: str
    name: str
    as_of_event: int
    sessions: tuple[SessionMetrics, ...]
    participants: tuple[ParticipantMetrics, ...]
    slugs: dict[str, str]
    """Each session's slug (its report's file name starts with it), by session id."""


def _as_of(state: StudyState, cell: CellState) -> datetime | None:
    """None when the cell's session is read whole (its cell finished), else the time of the
    study's event the state stands at."""
    return None if cell.status in ("done", "failed") else state.updated_at


def cell_events(ledger: Ledger, state: StudyState, cell: CellState) -> list[EventLike] | None:
    """The events of the cell's session as the study stood (None when it has none yet)."""
    if cell.session_id is None:
        return None
    sid = UUID(cell.session_id)
    try:
        at = _as_of(state, cell)
        if at is not None and ledger.inherited_at_time(sid, at) is not None:
            return None  # the fork was not made yet
        upto = ledger.position_at_time(sid, at) if at is not None else ledger.head_version(sid)
        return list(ledger.events(sid, upto=upto))
    except ForgeLedgerError:
        return None  # not recorded (yet): a claim whose session never started


def _labels(state: StudyState, cell: CellState) -> dict[str, str | int | None]:
    spec = cell.spec
    return {
        "study": state.name,
        "cell": spec.id,
        "topic": f"t{spec.topic + 1}",
        "panel": spec.panel,
        "variant": state.plan.arm(spec),
        "repeat": spec.repeat,
    }


@dataclass(frozen=True)
class CellRows:
    """One cell's rows, with what its counterfactual children compare against."""

    session: SessionMetrics
    participants: list[ParticipantMetrics]
    slug: str
    events: list[EventLike]
    audit: AuditReport


def cell_rows(
    ledger: Ledger, state: StudyState, cell: CellState, parent: CellRows | None = None
) -> CellRows | None:
    """The cell's session row and participant rows as the study stood (None when it has no
    session yet); ``parent``: the parent cell's rows, for a counterfactual cell's comparison."""
    from ..audit import audit_report, compare_fork
    from ..audit.metrics import participant_rows, session_row
    from ..projections import fold_events

    events = cell_events(ledger, state, cell)
    if not events:
        return None
    audit = audit_report(events)
    comparison = None
    if parent is not None:
        comparison = compare_fork(parent.events, events, audits=(parent.audit, audit))
    labels = _labels(state, cell)
    return CellRows(
        session=session_row(audit, comparison, **labels),
        participants=participant_rows(audit, **labels),
        slug=fold_events(events[:1]).slug,
        events=events,
        audit=audit,
    )


def _rows(ledger: Ledger, state: StudyState) -> Iterator[CellRows]:
    read: dict[str, CellRows] = {}  # a parent is read once
    for cell in state.cells.values():
        rows = cell_rows(ledger, state, cell, read.get(cell.spec.parent or ""))
        if rows is not None:
            read[cell.spec.id] = rows
            yield rows


def study_tables(ledger: Ledger, state: StudyState) -> StudyTables:
    """The study's two tables, from its state (now, or as of a past event)."""
    sessions: list[SessionMetrics] = []
    people: list[ParticipantMetrics] = []
    slugs: dict[str, str] = {}
    for rows in _rows(ledger, state):
        sessions.append(rows.session)
        people += rows.participants
        slugs[rows.session.session_id] = rows.slug
    return StudyTables(
        study_id=state.id,
        name=state.name,
        as_of_event=state.version,
        sessions=tuple(sessions),
        participants=tuple(people),
        slugs=slugs,
    )
