"""The read model's answers, taken only when it is current for the store.

``sessions`` and ``show`` read a session's summary and view here (a handful of indexed
queries) instead of folding its events, when the read model has applied every event the store
holds (:func:`_is_current`); otherwise they read the ledger. Nothing here builds a projection:
a reader loads only what reading needs.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar
from uuid import UUID

if TYPE_CHECKING:
    from .base import EventLike
    from .show_view import SessionView

__all__ = [
    "READ_MODEL_NAME",
    "READ_MODEL_VERSION",
    "SKIPPED",
    "SUMMARY_COLUMNS",
    "Mark",
    "StoreHead",
    "current_document",
    "current_session_view",
    "current_summaries",
    "read_snapshot",
    "session_head",
    "store_head",
]


SKIPPED = "projections:unread:"
"""Tracking rows of the sessions the projection runner skips as damaged: this prefix, then the
session's id. While one is there, the read model is current for no session
(:func:`_is_current`): it may list a damaged session as if its events read."""

READ_MODEL_NAME = "read_model"
READ_MODEL_VERSION = 6
"""The read-model projection's name and version (:class:`~.read_model.ReadModelProjection`
takes them from here): a reader checks them without loading the projection's fold and its
models."""

SUMMARY_COLUMNS = (
    "id",
    "slug",
    "title",
    "status",
    "iteration",
    "events",
    "created_at",
    "updated_at",
    "parent_id",
)
"""The ``sessions`` columns a session listing shows (``Ledger.summaries`` gives the same)."""

_T = TypeVar("_T")


class StoreHead(Protocol):
    """What the read-model readers ask the ledger: where the store and a session are now."""

    def notifications(
        self, *, after: int = 0, limit: int = 1000, topics: Sequence[str] = ()
    ) -> Sequence[EventLike]: ...

    def max_notification_id(self) -> int: ...

    def head_version(self, session_id: UUID) -> int: ...

    def events(
        self, session_id: str | UUID, *, after: int = 0, upto: int | None = None
    ) -> Iterable[EventLike]: ...


Mark = tuple[str, int, str]
"""A session's head as the store holds it: (session id, position, hash of that event)."""


def store_head(source: StoreHead) -> tuple[int, Mark | None]:
    """The store's last notification id and the :data:`Mark` of its event (or None)."""
    head = source.max_notification_id()
    newest = source.notifications(after=head - 1, limit=1) if head else []
    if not newest:
        return head, None
    return head, (newest[0].session_id, newest[0].position, newest[0].hash)


def session_head(source: StoreHead, session_id: UUID) -> Mark:
    """The :data:`Mark` of ``session_id``'s last event."""
    version = source.head_version(session_id)
    last = list(source.events(session_id, after=version - 1))
    return str(session_id), version, last[-1].hash if last else ""


def _is_current(conn: sqlite3.Connection, head: int, marks: Iterable[Mark]) -> bool:
    """The one rule for "the read model is current" (see :func:`current_summaries`).

    The read-model projection is at its present version and has applied every notification
    up to ``head``, and each :data:`Mark` of ``marks`` has its ``sessions`` row at that
    position and that event hash: the session of the store's last event, and the session a
    reader is about to show. A read model left beside a store that was since replaced by
    another one, one a session has moved past, or one that counts as many events as a store
    restored from a backup and written again (the same positions, other events) is not
    current. Nor is one that skipped a damaged session (:data:`SKIPPED`): it holds that
    session's rows as they were before the damage was met, where the ledger marks it damaged.
    """
    row = conn.execute(
        "SELECT version, position FROM _projections WHERE name = ?", [READ_MODEL_NAME]
    ).fetchone()
    if row is None or int(row[0]) != READ_MODEL_VERSION or int(row[1]) != head:
        return False
    if conn.execute(
        "SELECT 1 FROM _projections WHERE name LIKE ? LIMIT 1", [f"{SKIPPED}%"]
    ).fetchone():
        return False
    return all(
        conn.execute(
            "SELECT 1 FROM sessions WHERE id = ? AND events = ? AND head_hash = ?",
            [sid, pos, hash_],
        ).fetchone()
        is not None
        for sid, pos, hash_ in marks
    )


def read_snapshot(path: Path, query: Callable[[sqlite3.Connection], _T | None]) -> _T | None:
    """``query`` on one read-only snapshot of the read-model file at ``path``, or None.

    A reader creates nothing, and a missing, locked or damaged read model (unreadable rows
    included) is no answer: the caller reads the ledger instead."""
    if not path.is_file():
        return None
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=1)
    except sqlite3.Error:
        return None
    try:
        # one snapshot for the check and the reads: a runner may commit in between
        conn.execute("BEGIN")
        return query(conn)
    except (sqlite3.Error, ValueError, TypeError, KeyError):
        return None
    finally:
        conn.close()


def _read_if_current(
    path: Path,
    head: int,
    marks: Iterable[Mark],
    query: Callable[[sqlite3.Connection], _T],
) -> _T | None:
    """``query`` on the read model when it is current (:func:`_is_current`), else None."""
    return read_snapshot(path, lambda conn: query(conn) if _is_current(conn, head, marks) else None)


def current_summaries(
    path: Path, head: int, last: Mark | None = None
) -> list[dict[str, Any]] | None:
    """The read model's ``sessions`` rows, in creation order, if it is current; else None.

    Current means the read-model projection, at its present version, has applied every
    notification up to ``head`` (the store's last) and, when ``last`` (a :data:`Mark`) names
    that notification's event, its session's row is at that event (a read model left
    beside a store that was since replaced by another one is not taken for current).
    Listing sessions from the ledger loads each session's whole state; the read model holds
    the summary already. The file is opened read-only: a listing creates nothing, and a
    missing, older or locked read model simply means the ledger is read instead.
    """

    def rows(conn: sqlite3.Connection) -> list[dict[str, Any]]:
        cols = ", ".join(SUMMARY_COLUMNS)
        found = conn.execute(f"SELECT {cols} FROM sessions ORDER BY rowid").fetchall()
        return [dict(zip(SUMMARY_COLUMNS, r, strict=True)) for r in found]

    return _read_if_current(path, head, [last] if last is not None else [], rows)


def current_session_view(source: StoreHead, path: Path, session_id: UUID) -> SessionView | None:
    """What ``show`` prints of ``session_id``, from the read model at ``path`` if it is current
    for the store and for that session (its row at the session's last event); else None.

    Reading the session's rows is a handful of indexed queries, where the ledger loads the
    session's newest snapshot and folds the events after it.
    """
    head, last = store_head(source)
    marks = [session_head(source, session_id)]
    if last is not None:
        marks.append(last)
    return _read_if_current(path, head, marks, lambda conn: _view_rows(conn, str(session_id)))


def current_document(
    path: Path,
    head: int,
    last: Mark | None,
    prefix: str,
    session_mark: Callable[[str], Mark | None],
) -> str | None:
    """The document file ``spec`` prints for the one session whose id starts with ``prefix``
    (id digits, no dashes), from the read model at ``path`` if it is current for the store
    (``head``, ``last``) and for that session (``session_mark`` reads its head from the
    store); else None: no such session, several, no document yet, or not current, all of
    which the ledger then answers itself."""

    def text(conn: sqlite3.Connection) -> str | None:
        found = conn.execute(
            "SELECT id FROM sessions WHERE replace(id, '-', '') LIKE ? ESCAPE '!' LIMIT 2",
            [_like_prefix(prefix)],
        ).fetchall()
        if len(found) != 1:
            return None
        sid = _text(found[0][0])
        mark = session_mark(sid)
        if mark is None or not _is_current(conn, head, [mark, *([last] if last else [])]):
            return None
        row = conn.execute("SELECT text FROM documents WHERE id = ?", [sid]).fetchone()
        return None if row is None or row[0] is None else _text(row[0])

    return read_snapshot(path, text)


def _like_prefix(prefix: str) -> str:
    """A LIKE pattern for values starting with ``prefix`` taken literally."""
    escaped = prefix.replace("!", "!!").replace("%", "!%").replace("_", "!_")
    return escaped + "%"


_VIEW_COLUMNS = (
    "id",
    "slug",
    "title",
    "status",
    "status_reason",
    "phase",
    "iteration",
    "events",
    "updated_at",
    "ems",
    "tokens_in",
    "tokens_out",
    "cost_usd",
    "parent_id",
    "parent_position",
    "convergence_json",
    "open_dissent_json",
)


def _view_rows(conn: sqlite3.Connection, sid: str) -> SessionView:
    """The session's ``show`` rows (``sessions``, ``participants``, ``rounds``,
    ``round_lines``) as a :class:`SessionView`."""
    from .show_view import (  # a view's types and EMS: only for showing one session
        ContributionLine,
        RoundView,
        SessionView,
        convergence_from_json,
        dissent_from_json,
    )

    row = conn.execute(
        f"SELECT {', '.join(_VIEW_COLUMNS)} FROM sessions WHERE id = ?", [sid]
    ).fetchone()
    s = dict(zip(_VIEW_COLUMNS, row, strict=True))
    lines: dict[int, list[ContributionLine]] = {}
    for number, name, tokens, preview, failed, unpriced in conn.execute(
        "SELECT round, participant, tokens, preview, failed, unpriced FROM round_lines "
        "WHERE session_id = ? ORDER BY round, idx",
        [sid],
    ):
        lines.setdefault(int(number), []).append(
            ContributionLine(
                participant=_text(name),
                tokens=int(tokens),
                preview=_text(preview),
                failed=bool(failed),
                unpriced=bool(unpriced),
            )
        )
    rounds = tuple(
        RoundView(
            number=int(n),
            kind=_text(kind),
            iteration=int(it),
            status=_text(status),
            superseded=bool(superseded),
            lines=tuple(lines.get(int(n), ())),
        )
        for n, kind, it, status, superseded in conn.execute(
            "SELECT number, kind, iteration, status, superseded FROM rounds "
            "WHERE session_id = ? ORDER BY number",
            [sid],
        )
    )
    people = conn.execute(
        "SELECT name, model, role FROM participants WHERE session_id = ? "
        "AND left_position IS NULL ORDER BY rowid", [sid]
    ).fetchall()
    return SessionView(
        id=_text(s["id"]),
        slug=_text(s["slug"]),
        title=_text(s["title"]),
        status=_text(s["status"]),
        status_reason=_text(s["status_reason"]),
        phase=_text(s["phase"]),
        iteration=int(s["iteration"]),
        version=int(s["events"]),
        updated_at=datetime.fromisoformat(s["updated_at"]),
        ems=int(s["ems"]),
        tokens_in=int(s["tokens_in"]),
        tokens_out=int(s["tokens_out"]),
        cost_usd=float(s["cost_usd"]),
        fork_origin=(
            None if s["parent_id"] is None else (_text(s["parent_id"]), int(s["parent_position"]))
        ),
        participants=tuple((_text(n), _text(m), _text(r)) for n, m, r in people),
        rounds=rounds,
        convergence=convergence_from_json(json.loads(s["convergence_json"])),
        dissent=dissent_from_json(json.loads(s["open_dissent_json"])),
    )


def _text(value: object) -> str:
    """A text column's value; anything else (NULL in a damaged file) is no answer."""
    if not isinstance(value, str):
        raise TypeError(f"expected text, found {type(value).__name__}")
    return value
