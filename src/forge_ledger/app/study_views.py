"""The study tables of the read model, kept current beside the projections.

``studies``, ``study_cells``, ``study_sessions`` and ``study_participants`` (schema:
``forge_ledger.projections.migrations.STUDY_SCHEMA``) hold each study, every one of its cells,
and ``study export``'s two tables. Their rows are computed by the code ``study export`` runs
(:func:`forge_ledger.study.tables.cell_rows`, over each session's audit): the projections
package may not import the audit or the studies (it sits below both), so this updater lives in
the application layer, which may import them all, and every catch-up of the read model
(``projections update|rebuild``, ``browse``) runs it after the projection runner.

It follows two logs, each with its own tracking row in ``_projections``: the study log
(``study_tables:studies``: a study with new events is read again) and the sessions' log
(``study_tables``: a study one of whose sessions has new events is read again). Within a study
only what may have changed is computed again: a cell whose session moved or whose record
changed, a cell not finished when the study has new events (it is shown as of the study's
last event), and the counterfactual cells of any of those. Rows and both positions commit in
one ``BEGIN IMMEDIATE`` transaction, which holds the read model's write lock while the rows
are computed, so two updaters never interleave and a crash redoes the batch; because each row
is a function of the store, a rebuild from zero writes the same rows.

A study whose events do not read (:class:`~forge_ledger.errors.StudyDamagedError`) is skipped
whole, its rows left as they were, so the other studies still come up to date; a tracking row
of its own (:data:`UNREAD`) has every later catch-up try it again, until it reads (its rows are
then all computed again) or is gone from the store (its rows are then deleted).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ..domain import canonical_json
from ..errors import StudyDamagedError
from ..projections.base import Put
from ..projections.current import read_snapshot
from ..projections.runner import (
    ProjectionStatus,
    marks,
    track,
    tracked,
    write_transaction,
)
from ..projections.writes import BatchWriter

if TYPE_CHECKING:
    from sqlite_utils import Database

    from ..ledger import Ledger
    from ..study.state import CellState, StudyState
    from ..study.tables import CellRows

__all__ = [
    "SESSIONS_LOG",
    "STUDY_LOG",
    "TABLES",
    "UNREAD",
    "VERSION",
    "StudyViews",
    "cell_row",
    "study_status",
    "update_study_views",
]

SESSIONS_LOG = "study_tables"
"""Tracking row: the position in the sessions' global log."""
STUDY_LOG = "study_tables:studies"
"""Tracking row: the position in the study log."""
UNREAD = "study_tables:unread:"
"""Tracking rows of the studies skipped as damaged: this prefix, then the study's id."""
VERSION = 1
"""Bumped when the rows written for the same store change: the tables are then rebuilt."""
TABLES = ("study_participants", "study_sessions", "study_cells", "studies")
_FINISHED = ("done", "failed")


def _sql_value(v: Any) -> Any:
    """A row model's JSON value as the read model stores it: a list as canonical JSON text
    (a yes/no becomes 0/1 through sqlite3 itself)."""
    return canonical_json(v) if isinstance(v, list | dict) else v


def cell_row(state: StudyState, cell: CellState) -> dict[str, Any]:
    """The ``study_cells`` row of ``cell``: what ``study status`` shows of it, its arm and,
    for a counterfactual cell, its parent (cell and session)."""
    spec = cell.spec
    parent = state.cells.get(spec.parent) if spec.parent else None
    j = cell.as_json()
    return {
        "id": f"{state.id}:{spec.id}",
        "study_id": state.id,
        "cell": spec.id,
        "topic": j["topic"],
        "panel": spec.panel,
        "variant": spec.variant,
        "arm": state.plan.arm(spec),
        "repeat": spec.repeat,
        "parent_cell": spec.parent,
        "without": spec.without,
        "status": j["status"],
        "session_id": j["session_id"],
        "parent_id": parent.session_id if parent is not None else None,
        "outcome": j["outcome"],
        "reason": j["reason"],
        "cost_usd": j["cost_usd"],
        "calls": j["calls"],
    }


def _study_row(state: StudyState) -> dict[str, Any]:
    s = state.summary()
    return {
        "id": state.id,
        "name": state.name,
        "status": s["status"],
        "stopped": s["stopped"],
        **{k: s[k] for k in ("cells", "pending", "running", "paused", "done", "failed")},
        "spent_usd": s["spent_usd"],
        "calls": s["calls"],
        "budget_json": canonical_json(s["budget"]),
        "events": state.version,
        "head_hash": state.head_hash,
        "planned_at": s["planned_at"],
        "updated_at": state.updated_at.isoformat() if state.updated_at else None,
    }


def _metrics_rows(study_id: str, rows: CellRows) -> list[tuple[str, dict[str, Any]]]:
    """The ``study_sessions`` row and ``study_participants`` rows of one cell."""
    cell = rows.session.cell
    out = [
        (
            "study_sessions",
            {
                "id": f"{study_id}:{cell}",
                "study_id": study_id,
                **{k: _sql_value(v) for k, v in rows.session.model_dump(mode="json").items()},
            },
        )
    ]
    for p in rows.participants:
        out.append(
            (
                "study_participants",
                {
                    "id": f"{study_id}:{cell}:{p.participant}",
                    "study_id": study_id,
                    **{k: _sql_value(v) for k, v in p.model_dump(mode="json").items()},
                },
            )
        )
    return out


class StudyViews:
    """Brings the study tables of the read model ``db`` up to date with ``ledger``'s store."""

    def __init__(self, ledger: Ledger, db: Database) -> None:
        from ..study import StudyStream

        self.ledger = ledger
        self.db = db
        self.stream = StudyStream(ledger)
        self.damaged: list[StudyDamagedError] = []
        """The studies the last catch-up skipped, their events damaged."""

    # ------------------------------------------------------------------ tracking

    def _stored(self) -> dict[str, tuple[int, int]]:
        return tracked(self.db, SESSIONS_LOG, STUDY_LOG)

    def _reset(self) -> None:
        for table in TABLES:
            self.db.execute(f'DELETE FROM "{table}"')
        self.db.execute("DELETE FROM _projections WHERE name LIKE ?", [f"{UNREAD}%"])
        for name in (SESSIONS_LOG, STUDY_LOG):
            self._track(name, 0)

    def _track(self, name: str, position: int) -> None:
        track(self.db, name, VERSION, position)

    def _positions(self) -> tuple[int, int]:
        """(study log, sessions' log) positions; a version change empties the tables."""
        stored = self._stored()
        if any(stored.get(n, (None,))[0] != VERSION for n in (SESSIONS_LOG, STUDY_LOG)):
            self._reset()
            return 0, 0
        return stored[STUDY_LOG][1], stored[SESSIONS_LOG][1]

    def status(self) -> list[ProjectionStatus]:
        """Both tracking rows as ``projections status`` shows a projection's."""
        stored = self._stored()
        heads = {STUDY_LOG: self.stream.log_head(), SESSIONS_LOG: self.ledger.max_notification_id()}
        skipped = len(marks(self.db, UNREAD))
        return [
            ProjectionStatus(
                name=name,
                version=VERSION,
                stored_version=stored[name][0] if name in stored else None,
                position=stored[name][1] if name in stored else 0,
                head=head,
                skipped=skipped,
            )
            for name, head in heads.items()
        ]

    # ------------------------------------------------------------------ applying

    def rebuild(self) -> int:
        """Empty the study tables and compute them again from the store."""
        with write_transaction(self.db):
            self._reset()
        return self.catch_up()

    def catch_up(self) -> int:
        """Read again every study that moved since the tracked positions, and those skipped
        before as damaged; returns how many were read (:attr:`damaged`: those skipped)."""
        self.damaged = []
        with write_transaction(self.db):
            study_at, sessions_at = self._positions()
            # the heads are read before the rows: whatever lands after is seen next time
            study_head = self.stream.log_head()
            sessions_head = self.ledger.max_notification_id()
            moved = self.stream.changed_studies(after=study_at, upto=study_head)
            # from zero every study is read whole: which sessions moved does not matter then
            touched = (
                self.ledger.notified_sessions(after=sessions_at, upto=sessions_head)
                if study_at
                else set()
            )
            unread = self._unread()
            dirty = dict.fromkeys([*moved, *self._studies_of(touched), *unread])
            read = 0
            for study_id in dirty:
                read += self._read(study_id, touched, moved=study_id in moved,
                                   unread=study_id in unread)
            if study_head != study_at:
                self._track(STUDY_LOG, study_head)
            if sessions_head != sessions_at:
                self._track(SESSIONS_LOG, sessions_head)
            return read

    def _unread(self) -> list[UUID]:
        """The studies skipped before as damaged (a mark that names no study is dropped)."""
        found: list[UUID] = []
        for name in marks(self.db, UNREAD):
            try:
                found.append(UUID(name.removeprefix(UNREAD)))
            except ValueError:
                self.db.execute("DELETE FROM _projections WHERE name = ?", [name])
        return found

    def _read(self, study_id: UUID, touched: set[str], *, moved: bool, unread: bool) -> int:
        """Refresh the study's rows (1), or skip it (0): damaged, its rows untouched and
        marked unread; gone from the store after it was skipped, its rows deleted. A study
        read again after it was skipped has every row computed again (its sessions may have
        moved meanwhile)."""
        try:
            if unread and self.stream.head(study_id)[0] == 0:
                self._forget(study_id)
                return 0
            state = self.stream.state(study_id)
        except StudyDamagedError as e:
            self.damaged.append(e)
            self._track(f"{UNREAD}{study_id}", 0)
            return 0
        if unread:
            self._unmark(study_id)
            touched = touched | set(state.by_session)
        self._refresh(state, touched, new_events=moved or unread)
        return 1

    def _forget(self, study_id: UUID) -> None:
        """Delete the rows of a study no longer in the store, and its unread mark."""
        for table in TABLES:
            key = "id" if table == "studies" else "study_id"
            self.db.execute(f'DELETE FROM "{table}" WHERE {key} = ?', [str(study_id)])
        self._unmark(study_id)

    def _unmark(self, study_id: UUID) -> None:
        self.db.execute("DELETE FROM _projections WHERE name = ?", [f"{UNREAD}{study_id}"])

    def _studies_of(self, sessions: Iterable[str]) -> list[UUID]:
        """The studies whose cells ran ``sessions`` (as the study tables know them)."""
        found: dict[UUID, None] = {}
        ids = sorted(sessions)
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            marks = ", ".join("?" for _ in chunk)
            for (sid,) in self.db.execute(
                f"SELECT DISTINCT study_id FROM study_cells WHERE session_id IN ({marks})", chunk
            ).fetchall():
                found[UUID(str(sid))] = None
        return list(found)

    def _changed_cells(
        self, state: StudyState, touched: set[str], *, new_events: bool
    ) -> list[str]:
        """The cells whose rows may differ from those stored, their counterfactual children
        included, in the plan's order."""
        stored = {
            str(r["id"]): r
            for r in self.db.query("SELECT * FROM study_cells WHERE study_id = ?", [state.id])
        }
        changed: set[str] = set()
        for cell in state.cells.values():
            if (
                cell.session_id in touched
                or stored.get(f"{state.id}:{cell.spec.id}") != cell_row(state, cell)
                or (new_events and cell.status not in _FINISHED)
            ):
                changed.add(cell.spec.id)
        for cell in state.cells.values():  # a plan lists a parent cell before its forks
            if cell.spec.parent in changed:
                changed.add(cell.spec.id)
        return [c for c in state.cells if c in changed]

    def _forget_others(self, study_id: str, cell_id: str, keep: Sequence[str]) -> None:
        """Delete the cell's metrics rows not in ``keep`` (a session not readable any more);
        the others are updated in place, so they keep their place in the table."""
        others = f" AND id NOT IN ({', '.join('?' for _ in keep)})" if keep else ""
        for table in ("study_sessions", "study_participants"):
            self.db.conn.execute(
                f"DELETE FROM {table} WHERE study_id = ? AND cell = ?{others}",
                [study_id, cell_id, *keep],
            )

    def _refresh(self, state: StudyState, touched: set[str], *, new_events: bool) -> None:
        from ..study.tables import cell_rows

        changed = self._changed_cells(state, touched, new_events=new_events)
        writer = BatchWriter(self.db.conn, {})  # no study table is searched
        writer.add([Put("studies", _study_row(state))])
        read: dict[str, CellRows | None] = {}

        def rows_of(cell_id: str) -> CellRows | None:
            if cell_id not in read:
                cell = state.cells[cell_id]
                parent = rows_of(cell.spec.parent) if cell.spec.parent else None
                read[cell_id] = cell_rows(self.ledger, state, cell, parent)
            return read[cell_id]

        for cell_id in changed:
            writer.add([Put("study_cells", cell_row(state, state.cells[cell_id]))])
            rows = rows_of(cell_id)
            metrics = _metrics_rows(state.id, rows) if rows is not None else []
            self._forget_others(state.id, cell_id, [row["id"] for _, row in metrics])
            writer.add(Put(table, row) for table, row in metrics)
        writer.write()


def update_study_views(ledger: Ledger, db: Database, *, rebuild: bool = False) -> int:
    """Bring (or, with ``rebuild``, build again) the study tables of ``db``; returns how many
    studies were read."""
    views = StudyViews(ledger, db)
    return views.rebuild() if rebuild else views.catch_up()


_CELL_KEYS = (
    "cell",
    "topic",
    "panel",
    "variant",
    "repeat",
    "status",
    "session_id",
    "outcome",
    "reason",
    "cost_usd",
    "calls",
)
"""A cell as ``study status --json`` gives it (:meth:`forge_ledger.study.CellState.as_json`)."""

_STUDY_KEYS = (
    "id",
    "name",
    "status",
    "stopped",
    "cells",
    "pending",
    "running",
    "paused",
    "done",
    "failed",
    "spent_usd",
    "calls",
    "budget_json",
    "events",
    "planned_at",
)
"""The ``studies`` columns a summary shows, in its order."""

_SUMMARY_NAMES = {"id": "study_id", "budget_json": "budget"}
"""The columns a summary gives under another name (the budget parsed from its JSON)."""


@dataclass(frozen=True)
class StudyStatus:
    """What ``study status`` shows: the study's summary and every cell, and whether they were
    read from the read model's study tables (else folded from the study's events)."""

    summary: dict[str, Any]
    cells: list[dict[str, Any]]
    from_read_model: bool


def _from_tables(path: Path, study_id: str, head: tuple[int, str]) -> StudyStatus | None:
    """The study's rows when the read model is current for it (its ``studies`` row at the
    study's last event, the tables at this version), else None (see
    :func:`~forge_ledger.projections.current.read_snapshot`)."""

    def rows(conn: sqlite3.Connection) -> tuple[dict[str, Any], list[Any]] | None:
        tracked = conn.execute(
            "SELECT version FROM _projections WHERE name = ?", [STUDY_LOG]
        ).fetchone()
        row = conn.execute(
            f"SELECT head_hash, {', '.join(_STUDY_KEYS)} FROM studies WHERE id = ?", [study_id]
        ).fetchone()
        if tracked is None or tracked[0] != VERSION or row is None:
            return None
        s = dict(zip(_STUDY_KEYS, row[1:], strict=True))
        if (s["events"], row[0]) != head:
            return None
        cells = conn.execute(
            f"SELECT {', '.join(_CELL_KEYS)} FROM study_cells WHERE study_id = ? ORDER BY rowid",
            [study_id],
        ).fetchall()
        return s, cells

    found = read_snapshot(path, rows)
    if found is None:
        return None
    s, cells = found
    summary = {_SUMMARY_NAMES.get(k, k): s[k] for k in _STUDY_KEYS}
    summary["budget"] = json.loads(summary["budget"])
    return StudyStatus(
        summary=summary,
        cells=[dict(zip(_CELL_KEYS, c, strict=True)) for c in cells],
        from_read_model=True,
    )


def study_status(ledger: Ledger, study: str, *, at_event: int | None = None) -> StudyStatus:
    """Every cell of ``study`` with the study's summary: from the read model's study tables
    when they are current for the study, else (and as of a past event) from its events; both
    give the same values."""
    from ..ledger.outputs import store_outputs
    from ..study import StudyStream

    stream = StudyStream(ledger)
    sid = stream.resolve(study)
    if at_event is None:
        found = _from_tables(store_outputs(ledger.location).views, str(sid), stream.head(sid))
        if found is not None:
            return found
    state = stream.state(sid, at_event=at_event)
    return StudyStatus(
        summary=state.summary(),
        cells=[c.as_json() for c in state.cells.values()],
        from_read_model=False,
    )
