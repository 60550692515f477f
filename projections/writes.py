"""Writing one batch's row operations to the read model, fast and in a safe order.

The projections answer with :class:`~.base.Put` / :class:`~.base.Patch` operations; the
runner collects a whole batch of them and hands them to :class:`BatchWriter`, which

- keeps the order of the operations on each table (a ``Patch`` after a ``Put`` of the same row
  must see that row) but groups tables, so consecutive operations of the same shape on a table
  go to SQLite as one ``executemany`` (no foreign key is enforced and no trigger crosses
  tables, so the order *between* tables does not matter);
- indexes large batches of a full-text-searched table in bulk: the per-row insert trigger
  that sqlite-utils created (``<table>_ai``) costs ~100 µs a row, while one
  ``INSERT … SELECT`` into the external-content FTS5 table after the rows are in costs a
  fraction of that. The trigger is dropped and re-created from its own SQL inside the batch's
  transaction, so a crash leaves it in place, and small batches (a follower's one new event)
  keep using it unchanged.

Everything happens on the caller's connection inside the caller's transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .base import Op, Patch, Put

__all__ = ["BULK_FTS_MIN_ROWS", "BatchWriter", "FtsIndex", "fts_indexes"]

BULK_FTS_MIN_ROWS = 32
"""From this many new rows in one batch, a searched table is indexed in bulk."""


@dataclass(frozen=True)
class FtsIndex:
    """An external-content FTS5 table kept in sync with ``table`` by sqlite-utils' triggers."""

    table: str
    fts: str
    columns: tuple[str, ...]
    insert_trigger: str
    insert_trigger_sql: str
    delete_trigger: str | None
    delete_trigger_sql: str | None

    def bulk_index_after(self, conn: sqlite3.Connection, rowid: int) -> None:
        """Index every row of ``table`` with a rowid above ``rowid`` (rows just inserted)."""
        cols = ", ".join(f'"{c}"' for c in self.columns)
        conn.execute(
            f'INSERT INTO "{self.fts}" (rowid, {cols}) '
            f'SELECT rowid, {cols} FROM "{self.table}" WHERE rowid > ?',
            [rowid],
        )

    def clear(self, conn: sqlite3.Connection) -> None:
        """Empty ``table`` and its index at once (no per-row delete trigger)."""
        if self.delete_trigger is not None:
            conn.execute(f'DROP TRIGGER "{self.delete_trigger}"')
        conn.execute(f'DELETE FROM "{self.table}"')
        conn.execute(f'INSERT INTO "{self.fts}" ("{self.fts}") VALUES (\'delete-all\')')
        if self.delete_trigger_sql is not None:
            conn.execute(self.delete_trigger_sql)


def fts_indexes(conn: sqlite3.Connection) -> dict[str, FtsIndex]:
    """Searched tables of the database, found by sqlite-utils' naming (``<t>_fts``, ``<t>_ai``)."""
    triggers = {
        str(name): (str(table), str(sql))
        for name, table, sql in conn.execute(
            "SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'trigger'"
        )
    }
    tables = {str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    out: dict[str, FtsIndex] = {}
    for table in tables:
        fts = f"{table}_fts"
        ai = triggers.get(f"{table}_ai")
        if fts not in tables or ai is None or ai[0] != table:
            continue
        columns = tuple(
            str(r[1]) for r in conn.execute(f'PRAGMA table_info("{fts}")')
        )
        ad = triggers.get(f"{table}_ad")
        out[table] = FtsIndex(
            table=table,
            fts=fts,
            columns=columns,
            insert_trigger=f"{table}_ai",
            insert_trigger_sql=ai[1],
            delete_trigger=f"{table}_ad" if ad is not None else None,
            delete_trigger_sql=ad[1] if ad is not None else None,
        )
    return out


class BatchWriter:
    """Collects a batch's operations per table, then writes them with ``executemany``."""

    def __init__(self, conn: sqlite3.Connection, fts: dict[str, FtsIndex]) -> None:
        self.conn = conn
        self.fts = fts
        self._sql: dict[tuple[str, str, tuple[str, ...]], str] = {}
        self._pending: dict[str, list[tuple[str, list[Any]]]] = {}

    def add(self, ops: Iterable[Op]) -> None:
        # a rebuild queues a few rows for every event: the usual case (a Put whose statement
        # is known) costs two dict lookups
        sqls = self._sql
        pending = self._pending
        for op in ops:
            if isinstance(op, Put):
                row = op.row
                key = ("put", op.table, tuple(row))
                sql = sqls.get(key) or self._put_sql(op.table, key[2])
                params: list[Any] = list(row.values())
            elif isinstance(op, Patch) and op.values:
                sql = self._patch_sql(op.table, tuple(op.values))
                params = [*op.values.values(), op.id]
            else:
                continue
            queue = pending.get(op.table)
            if queue is None:
                queue = pending[op.table] = []
            queue.append((sql, params))

    def _put_sql(self, table: str, cols: tuple[str, ...]) -> str:
        key = ("put", table, cols)
        sql = self._sql.get(key)
        if sql is None:
            names = ", ".join(f'"{c}"' for c in cols)
            marks = ", ".join("?" for _ in cols)
            sets = ", ".join(f'"{c}" = excluded."{c}"' for c in cols if c != "id")
            sql = (
                f'INSERT INTO "{table}" ({names}) VALUES ({marks}) '
                f"ON CONFLICT(id) DO UPDATE SET {sets}"
            )
            self._sql[key] = sql
        return sql

    def _patch_sql(self, table: str, cols: tuple[str, ...]) -> str:
        key = ("patch", table, cols)
        sql = self._sql.get(key)
        if sql is None:
            sets = ", ".join(f'"{c}" = ?' for c in cols)
            sql = f'UPDATE "{table}" SET {sets} WHERE id = ?'
            self._sql[key] = sql
        return sql

    def write(self) -> int:
        """Write everything queued (in order per table); returns how many operations."""
        total = 0
        pending, self._pending = self._pending, {}
        for table, queue in pending.items():
            total += len(queue)
            index = self.fts.get(table)
            if index is not None and len(queue) >= BULK_FTS_MIN_ROWS:
                self._write_bulk_indexed(index, queue)
            else:
                self._run(queue)
        return total

    def _run(self, queue: list[tuple[str, list[Any]]]) -> None:
        conn = self.conn
        i = 0
        n = len(queue)
        while i < n:
            sql = queue[i][0]
            j = i + 1
            while j < n and queue[j][0] == sql:
                j += 1
            if j - i == 1:
                conn.execute(sql, queue[i][1])
            else:
                conn.executemany(sql, [params for _, params in queue[i:j]])
            i = j

    def _write_bulk_indexed(self, index: FtsIndex, queue: list[tuple[str, list[Any]]]) -> None:
        conn = self.conn
        row = conn.execute(f'SELECT max(rowid) FROM "{index.table}"').fetchone()
        before = int(row[0]) if row and row[0] is not None else 0
        conn.execute(f'DROP TRIGGER "{index.insert_trigger}"')
        # rows that already exist take the upsert's UPDATE path: the update trigger, still in
        # place, re-indexes them; every new row gets a rowid above ``before``
        self._run(queue)
        index.bulk_index_after(conn, before)
        conn.execute(index.insert_trigger_sql)
