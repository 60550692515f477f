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
from uuid import UUID

from ..errors import ForgeLedgerError
from .compression import unpack
from .store import SqliteAccess, StoreLocation, check_sqlite_file, sqlite_uri

__all__ = ["sqlite_head"]


def sqlite_head(location: StoreLocation) -> tuple[int, tuple[str, int, str] | None] | None:
    """The last notification id of the SQLite store at ``location`` and (session id,
    position, hash) of its event (None for an empty store), as ``store_head`` over the ledger
    gives them; None when the file cannot say.

    Whatever the ledger would refuse before opening the store (its settings, a missing file,
    one that is not a ledger) is no answer here either: the caller then opens the ledger,
    which refuses it with its own error. The file is opened read-only: a reader writes
    nothing.
    """
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
        row = conn.execute(
            "SELECT rowid, originator_id, originator_version, state FROM stored_events "
            "ORDER BY rowid DESC LIMIT 1"
        ).fetchone()
        if row is None:
            return 0, None
        notification, session, position, state = row
        hash_ = json.loads(unpack(bytes(state))).get("hash")
        if not isinstance(hash_, str):
            return None
        return int(notification), (str(UUID(str(session))), int(position), hash_)
    except (sqlite3.Error, zlib.error, ValueError, TypeError, AttributeError):
        return None
    finally:
        conn.close()
