"""Where a SQLite store is now, read from the file itself: its last notification id and the
session, position and hash of the event that notification holds.

This is what a reader of the read model checks it against
(:func:`forge_ledger.projections.current.current_summaries`). The ledger answers the same
through eventsourcing (:func:`forge_ledger.projections.current.store_head`), which means
loading the event classes, the domain's models and the application; listing sessions from the
read model needs none of them, so the newest stored row is read here with one query and its
state decoded as the mapper does (:func:`~.compression.unpack`, then JSON). Anything this
cannot read (no such table, a row it cannot decode) or that the ledger would refuse is no
answer: the caller then opens the ledger, which says what is wrong.
"""

from __future__ import annotations

import json
import sqlite3
import zlib
from collections.abc import Callable
from typing import Any, TypeVar
from uuid import UUID

from ..errors import ForgeLedgerError
from .compression import unpack
from .store import SqliteAccess, StoreLocation, check_sqlite_file, sqlite_uri

__all__ = ["sqlite_head", "sqlite_session_head"]

_T = TypeVar("_T")


_Mark = tuple[str, int, str]
"""(session id, position, hash of the event there): a read model's ``Mark``
(:data:`forge_ledger.projections.current.Mark`), which is what its readers compare."""


def sqlite_head(location: StoreLocation) -> tuple[int, _Mark | None] | None:
    """The last notification id of the SQLite store at ``location`` and the mark of
    its event (None for an empty store), as ``store_head`` over the ledger gives them; None
    when the file cannot say.

    Whatever the ledger would refuse before opening the store (its settings, a missing file,
    one that is not a ledger) is no answer here either: the caller then opens the ledger,
    which refuses it with its own error. The file is opened read-only: a reader writes
    nothing.
    """

    def newest(conn: sqlite3.Connection) -> tuple[int, _Mark | None]:
        row = conn.execute(
            "SELECT rowid, originator_id, originator_version, state FROM stored_events "
            "ORDER BY rowid DESC LIMIT 1"
        ).fetchone()
        if row is None:
            return 0, None
        notification, session, position, state = row
        return int(notification), _mark(session, position, state)

    return _read(location, newest)


def sqlite_session_head(location: StoreLocation, session_id: str) -> _Mark | None:
    """The mark of ``session_id``'s last stored event (as ``session_head`` over the
    ledger gives it), or None when the file cannot say or holds no event of that session."""

    def last(conn: sqlite3.Connection) -> _Mark | None:
        row = conn.execute(
            "SELECT originator_id, originator_version, state FROM stored_events "
            "WHERE originator_id = ? ORDER BY originator_version DESC LIMIT 1",
            [UUID(session_id).hex],  # as eventsourcing stores it
        ).fetchone()
        return None if row is None else _mark(*row)

    return _read(location, last)


def _mark(session: Any, position: Any, state: Any) -> _Mark:
    """A stored row's mark, its state decoded as the mapper does."""
    hash_ = json.loads(unpack(bytes(state))).get("hash")
    if not isinstance(hash_, str):
        raise ValueError("a stored event without its hash")
    return str(UUID(str(session))), int(position), hash_


def _read(location: StoreLocation, query: Callable[[sqlite3.Connection], _T]) -> _T | None:
    """``query`` on the store file opened read-only, or None when it cannot answer."""
    if location.kind != "sqlite" or location.path is None:
        return None
    try:
        location.eventsourcing_env()
        check_sqlite_file(location.path, create=False)
        uri = sqlite_uri(location.path, SqliteAccess.READ_ONLY)
        conn = sqlite3.connect(uri, uri=True, timeout=1)
    except (ForgeLedgerError, sqlite3.Error, OSError):
        return None
    try:
        return query(conn)
    except (sqlite3.Error, zlib.error, ValueError, TypeError, AttributeError):
        return None
    finally:
        conn.close()
