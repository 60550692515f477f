"""Each session's audit as ``audit`` prints it, kept in the read model (``audits``).

An audit folds every event of its session and builds the audit's models: most of what
``audit SESSION`` costs, every time it is typed. It is a function of the session's events
alone, so its Markdown is kept here with the session's head (position and hash) it was made
at, and ``audit`` prints the row when that head is still the session's head in the store
(after checking the session's chain, as it always does). The audit sits above the
projections, so this lives in the application layer, like the study tables.

Rows are written by two hands, each a function of the store: ``projections update`` (and
``rebuild``, ``--follow``, ``browse``) audits every session with events since its tracked
position, and a command that recorded a session audits that session when it stops
(:func:`keep_audit`), so the next ``audit`` answers at once. A row of an older
:data:`VERSION` is never read, and a version change makes the next update audit every
session again. A session whose audit cannot be made (its events damaged) keeps no current
row: ``audit`` then reads the ledger, which says what is wrong.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ForgeLedgerError
from ..projections.current import read_snapshot, session_head

if TYPE_CHECKING:
    from uuid import UUID

    from sqlite_utils import Database

    from ..ledger import Ledger
    from ..projections.runner import ProjectionStatus

# The writers' side (the projection runner's transaction and status, the batch writer) loads
# when rows are written: ``audit`` only reads one row here.

__all__ = ["AUDITS_LOG", "VERSION", "AuditViews", "current_audit", "keep_audit"]

AUDITS_LOG = "audits"
"""Tracking row: the position in the sessions' global log."""
VERSION = 1
"""Bumped when the audit's Markdown for the same events changes: rows of another version are
never read, and the next update audits every session again."""


def _audit_row(ledger: Ledger, session_id: UUID) -> dict[str, object]:
    """The ``audits`` row of the session as it stands (its audit's Markdown and the head it
    was made at)."""
    from ..audit import audit_report, render_markdown

    events = list(ledger.events(session_id))
    report = audit_report(events)
    return {
        "id": str(session_id),
        "version": VERSION,
        "position": report.events,
        "head_hash": report.head_hash,
        "markdown": render_markdown(report),
    }


def _write(db: Database, rows: list[dict[str, object]]) -> None:
    from ..projections.base import Put
    from ..projections.writes import BatchWriter

    writer = BatchWriter(db.conn, {})  # the audits are not searched
    writer.add(Put("audits", row) for row in rows)
    writer.write()


def _rows(ledger: Ledger, sessions: list[UUID]) -> list[dict[str, object]]:
    """The rows of ``sessions`` whose audit can be made (a damaged one is left out)."""
    rows = []
    for sid in sessions:
        try:
            rows.append(_audit_row(ledger, sid))
        except (ForgeLedgerError, KeyError, ValueError):
            continue  # damaged: no current row, and `audit` reads the ledger
    return rows


class AuditViews:
    """Brings the ``audits`` table of the read model ``db`` up to date with ``ledger``."""

    def __init__(self, ledger: Ledger, db: Database) -> None:
        self.ledger = ledger
        self.db = db

    def _stored(self) -> tuple[int, int] | None:
        from ..projections.runner import tracked

        return tracked(self.db, AUDITS_LOG).get(AUDITS_LOG)

    def _track(self, position: int) -> None:
        from ..projections.runner import track

        track(self.db, AUDITS_LOG, VERSION, position)

    def status(self) -> list[ProjectionStatus]:
        """The tracking row as ``projections status`` shows a projection's."""
        from ..projections.runner import ProjectionStatus

        stored = self._stored()
        return [
            ProjectionStatus(
                name=AUDITS_LOG,
                version=VERSION,
                stored_version=stored[0] if stored else None,
                position=stored[1] if stored else 0,
                head=self.ledger.max_notification_id(),
            )
        ]

    def rebuild(self) -> int:
        """Empty the table and audit every session again."""
        from ..projections.runner import write_transaction

        with write_transaction(self.db):
            self.db.execute("DELETE FROM audits")
            self._track(0)
        return self.catch_up()

    def catch_up(self) -> int:
        """Audit every session with events since the tracked position (every session after a
        version change); returns how many were audited."""
        from uuid import UUID

        from ..projections.runner import write_transaction

        with write_transaction(self.db):
            stored = self._stored()
            after = stored[1] if stored is not None and stored[0] == VERSION else 0
            head = self.ledger.max_notification_id()  # read first: later events wait
            moved = sorted(self.ledger.notified_sessions(after=after, upto=head))
            rows = _rows(self.ledger, [UUID(s) for s in moved])
            _write(self.db, rows)
            if stored != (VERSION, head):
                self._track(head)
            return len(rows)


def keep_audit(ledger: Ledger, db: Database, session_id: UUID) -> None:
    """Write the audit of the session that just stopped (the tracked position is left to
    ``projections update``, which audits the session again only if it moved since)."""
    from ..projections.runner import write_transaction

    with write_transaction(db):
        _write(db, _rows(ledger, [session_id]))


def current_audit(ledger: Ledger, path: Path, session_id: UUID) -> str | None:
    """The session's audit as Markdown from the read model at ``path``, when its row was
    made at the session's head in the store and by this version; else None."""
    sid, position, hash_ = session_head(ledger, session_id)

    def markdown(conn: sqlite3.Connection) -> str | None:
        row = conn.execute(
            "SELECT markdown FROM audits WHERE id = ? AND version = ? AND position = ? "
            "AND head_hash = ?",
            [sid, VERSION, position, hash_],
        ).fetchone()
        return row[0] if row is not None and isinstance(row[0], str) else None

    return read_snapshot(path, markdown)
