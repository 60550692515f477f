"""The files a running session keeps beside its store: the YAML export and the document file,
rewritten on every phase change and at the end of a session."""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING
from uuid import UUID

from ..domain.state import SessionState
from ..domain.values import SessionStatus
from ..ledger import Ledger

if TYPE_CHECKING:
    from sqlite_utils import Database

__all__ = [
    "Warn",
    "autosaver",
    "keep_views_current",
    "keep_views_current_after_many",
    "log_notice",
    "log_warning",
]

Warn = Callable[[str], None]
"""Where a problem that must not stop a session is told (the CLI prints it on stderr)."""


def log_warning(message: str) -> None:
    """The default :data:`Warn`: the ``forge_ledger`` logger."""
    logging.getLogger("forge_ledger").warning("%s", message)


def log_notice(message: str) -> None:
    """Where a notice goes by default: the ``forge_ledger`` logger, at info level."""
    logging.getLogger("forge_ledger").info("%s", message)


def autosaver(
    ledger: Ledger, warn: Warn = log_warning, *, when_stopped: bool = False, views: bool = True
) -> Callable[[SessionState], None]:
    """A checkpoint hook writing the YAML export and the document file of a session (at each
    phase change, or with ``when_stopped`` only once it stops: ends or pauses), and, with
    ``views``, bringing the read model up to date when it stops; a failed write is told
    through ``warn`` and never stops the deliberation."""
    from ..records.spec import write_spec
    from ..yaml_format import autosave

    def save(state: SessionState) -> None:
        stopped = state.status.terminal or state.status is SessionStatus.PAUSED
        if when_stopped and not stopped:
            return
        try:
            autosave(ledger, UUID(state.id))
            if state.document_source is not None:
                write_spec(ledger, state)
            if stopped and views:
                keep_views_current(ledger, warn, UUID(state.id))
        except Exception as e:  # an export problem must never stop a deliberation
            warn(f"autosave failed: {e}")

    return save


def keep_views_current(
    ledger: Ledger, warn: Warn = log_warning, stopped: UUID | None = None
) -> None:
    """Bring the read model beside a SQLite store up to date when a session stops, so that
    ``sessions``, ``show``, ``spec`` and (for the session that ``stopped``) ``audit`` answer
    from it at once; the command that wrote the events pays for it, not the next read. A
    PostgreSQL store's read model is left to ``projections update``, which may run
    elsewhere. A damaged session the catch-up skips is told through ``warn``: the run itself
    is not concerned."""
    from .audit_views import keep_audit

    _caught_up(ledger, warn, None if stopped is None else partial(keep_audit, session_id=stopped))


def keep_views_current_after_many(ledger: Ledger, warn: Warn = log_warning) -> None:
    """:func:`keep_views_current` once for a run of many sessions (a study), when it ends,
    with the audit of every session that moved since the audits were last brought up to
    date. Once rather than as each session stops: most of a catch-up's cost is its own, not
    the events', and sixty-four of them were a seventh of a study's CPU, on the loop every
    session waits on. A problem is told through ``warn``: the study's cells are recorded."""
    from .audit_views import AuditViews

    try:
        _caught_up(ledger, warn, lambda led, db: AuditViews(led, db).catch_up())
    except Exception as e:  # the read model is a convenience; the next read folds instead
        warn(f"read model: not brought up to date: {e}")


def _caught_up(
    ledger: Ledger, warn: Warn, audit: Callable[[Ledger, Database], object] | None
) -> None:
    """The read model beside a SQLite store brought up to date, then ``audit`` run on it."""
    if ledger.location.kind != "sqlite":
        return
    from forge_ledger.projections import ProjectionRunner, open_views

    from ..ledger.outputs import store_outputs
    from ..ledger.store import lock_timeout

    db = open_views(store_outputs(ledger.location).views, lock_timeout=lock_timeout())
    try:
        runner = ProjectionRunner(ledger, db)
        runner.catch_up()
        for e in runner.damaged:
            warn(f"read model: {e.one_line()}")
        if audit is not None:
            audit(ledger, db)
    finally:
        db.close()
