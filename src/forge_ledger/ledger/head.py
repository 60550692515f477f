"""Where a SQLite store is now, read from the file itself: its last notification id and the
session, position and hash of the event that notification holds.

This is what a reader of the read model checks it against
(:func:`forge_ledger.projections.current.current_summaries`). The ledger answers the same
through eventsourcing (:func:`forge_ledger.projections.current.store_head`), which means
loading the event classes, the domain's models and the application; listing sessions from the
read model needs none of them, so the newest stored row is read here with one query and its
state decoded as the mapper does (:func:`~.compression.unpack`, then JSON). Anything this
cannot read (no such table, a row it cannot decode) is no answer: the caller then opens the
ledger, which says what is wrong.
"""

from __future__ import annotations

import json
import sqlite3
import zlib
from pathlib import Path
from uuid import UUID

from .compression import unpack
from .store import SqliteAccess, check_sqlite_file, sqlite_uri

__all__ = ["sqlite_head"]


def sqlite_head(path: Path) -> tuple[int, tuple[str, int, str] | None] | None:
    """The store's last notification id and (session id, position, hash) of its event (None
    for an empty store), as ``store_head`` over the ledger gives them; None when the file
    cannot say.

    The file is checked as the ledger checks it before opening it (a missing file or one that
    is not a ledger raises the same error), then opened read-only: a reader writes nothing.
    """
    check_sqlite_file(path, create=False)
    try:
        conn = sqlite3.connect(sqlite_uri(path, SqliteAccess.READ_ONLY), uri=True, timeout=1)
    except sqlite3.Error:
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
