"""SQLite write transactions that take the write lock before they read.

eventsourcing's SQLite recorder opens every transaction with a plain ``BEGIN`` (deferred):
the transaction reads first and asks for the write lock at its first write. In WAL mode,
SQLite cannot wait for that upgrade: if another process committed since the transaction's
first read, its snapshot is stale and the write fails at once with "database is locked",
without calling the busy handler, so the lock wait (``timeout``) never applies. A ledger
save reads before it writes (which texts are stored already; a new store's tables), and
eight ``run`` processes on one file lost writes to each other that way.

A write transaction here begins ``BEGIN IMMEDIATE``: it takes the write lock first, waiting
for it as long as the lock wait allows, and everything it then reads is current. Read
transactions keep the plain ``BEGIN`` (WAL readers never wait for writers). eventsourcing
chooses its datastore in its SQLite factory, so the ledger names :class:`Factory` as its
persistence module (``PERSISTENCE_MODULE``) instead of changing anything of eventsourcing's.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from eventsourcing.persistence import OperationalError
from eventsourcing.sqlite import SQLiteDatastore, SQLiteFactory, SQLiteTransaction

__all__ = ["Factory", "ImmediateTransaction", "is_busy"]


class ImmediateTransaction(SQLiteTransaction):
    """eventsourcing's transaction, begun ``BEGIN IMMEDIATE`` when it will commit."""

    def __enter__(self) -> Any:
        cursor = self.connection.cursor()
        try:
            cursor.execute("BEGIN IMMEDIATE" if self.commit else "BEGIN")
        except sqlite3.OperationalError as e:  # as eventsourcing maps a failed commit
            raise OperationalError(e) from e
        return cursor


class _ImmediateDatastore(SQLiteDatastore):
    """eventsourcing's SQLite datastore, its write transactions begun ``BEGIN IMMEDIATE``."""

    @contextmanager
    def transaction(self, *, commit: bool) -> Iterator[Any]:
        with (
            self.get_connection(commit=commit) as conn,
            ImmediateTransaction(conn, commit=commit) as curs,
            curs,
        ):
            yield curs


class Factory(SQLiteFactory):
    """eventsourcing's SQLite factory over :class:`_ImmediateDatastore` (same settings)."""

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        plain = self.datastore
        self.datastore = _ImmediateDatastore(
            db_name=plain.pool.db_name,
            lock_timeout=plain.pool.lock_timeout,
            single_row_tracking=plain.single_row_tracking,
            originator_id_type=plain.originator_id_type,
        )
        plain.close()


def is_busy(e: BaseException) -> bool:
    """Whether ``e`` (a store error, or its cause) is SQLite's "database is locked" or "busy":
    the lock wait ran out, and the same write can succeed later."""
    while e is not None:
        if isinstance(e, sqlite3.OperationalError) and (
            "locked" in str(e) or "busy" in str(e)
        ):
            return True
        e = e.__cause__  # type: ignore[assignment]
    return False
