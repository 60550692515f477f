"""The PostgreSQL side of :mod:`forge_ledger.ledger.texts` (imported only for a PostgreSQL
store, so a SQLite-only install never needs psycopg)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

import psycopg
from eventsourcing.persistence import InterfaceError, OperationalError, StoredEvent
from eventsourcing.postgres import PostgresAggregateRecorder, PostgresApplicationRecorder
from eventsourcing.utils import retry
from psycopg.adapt import Transformer
from psycopg.pq import ConnStatus, ExecStatus
from psycopg.sql import SQL, Identifier

from .text_mapper import texts_of
from .text_write_cache import RemembersStoreContents, TransactionFindings, findings_in
from .texts import TEXT_TABLE

__all__ = ["TextsPostgresRecorder", "TextsPostgresSnapshotRecorder"]


class _WritesTexts(RemembersStoreContents):
    """The text table of a PostgreSQL store, written in the caller's transaction."""

    datastore: Any

    @property
    def _text_table(self) -> str:
        return f"{self.datastore.schema or 'public'}.{TEXT_TABLE}"

    def _ddl(self) -> str:
        return (
            f"CREATE TABLE IF NOT EXISTS {self._text_table} "
            "(sha256 text PRIMARY KEY, body text NOT NULL)"
        )

    def _texts_insert(self) -> tuple[str, str]:
        """The insert of texts, before and after its rows (placeholders, or a save's literals):
        a text stored already, by this writer or another, is left as it is."""
        return (
            f"INSERT INTO {self._text_table} (sha256, body) VALUES ",
            " ON CONFLICT (sha256) DO NOTHING",
        )

    def _texts_to_write(self, stored_events: Sequence[StoredEvent]) -> dict[str, str]:
        """The texts of ``stored_events`` a save must write (:meth:`KnownStoreContents.unknown`)."""
        return self.facts.unknown(texts_of(stored_events))

    def _insert_texts(self, curs: Any, texts: dict[str, str], learned: TransactionFindings) -> None:
        """``texts`` (from :meth:`_texts_to_write`), in the caller's transaction."""
        if not texts:
            return
        if not self.facts.tables_ready:
            # A store created before texts were stored apart has no table yet; two writers'
            # first saves must not race on CREATE TABLE, hence the lock (this transaction).
            curs.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                (f"forge_texts:{self.datastore.schema}",),
            )
            curs.execute(self._ddl())
            learned.tables = True
        head, tail = self._texts_insert()
        curs.executemany(head + "(%s, %s)" + tail, list(texts.items()))
        learned.texts |= set(texts)


class TextsPostgresRecorder(_WritesTexts, PostgresApplicationRecorder):
    """Writes an event's texts in the transaction that inserts the event (same schema)."""

    def create_table(self) -> None:
        super().create_table()
        with self.datastore.transaction(commit=True) as curs:
            curs.execute(self._ddl())
        self.facts.tables_ready = True

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        if not stored_events:
            return []
        return self.facts.inserting(self._insert_at_once, stored_events, **kwargs)

    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def _insert_at_once(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> list[int]:
        """eventsourcing's insert as one round trip: the transaction's statements (begin, the
        texts not stored yet, the table's lock and time-out, the NOTIFY, the events, commit)
        sent as one query, their values rendered as literals by psycopg's own adapters.

        eventsourcing sends the same statements in a psycopg pipeline, one result each:
        fourteen waits on the server per save, each costing more of this process's time than
        the statement did the server's. The table lock serialises the inserting transactions,
        so notification ids are in commit order, as there. If a statement fails, the server
        skips the rest of the query and the transaction is rolled back here. The first save
        of texts into a store without a text table creates it, under a lock, as before.
        """
        learned = findings_in(kwargs)
        texts = self._texts_to_write(stored_events)
        with self.datastore.get_connection() as conn:
            curs = psycopg.ClientCursor(conn)
            try:
                begun = bool(texts) and not self.facts.tables_ready
                if begun:
                    curs.execute(b"BEGIN")
                    self._insert_texts(curs, texts, learned)
                    texts = {}
                curs.execute(self._save_query(conn, stored_events, texts, begin=not begun))
                ids = _returned_ids(curs)
            except BaseException:
                _roll_back(conn)
                raise
            finally:
                curs.close()
        learned.texts |= set(texts)
        return ids

    def _save_query(
        self, conn: Any, stored_events: Sequence[StoredEvent], texts: dict[str, str], begin: bool
    ) -> bytes:
        """The whole save as one query (see :meth:`_insert_at_once`), texts before the lock
        (eventsourcing's order: an older writer and this one never deadlock on a text)."""
        lock, (insert, returning) = self._statements(conn)
        literal = Transformer(conn).as_literal
        parts = [b"BEGIN"] if begin else []
        if texts:
            head, tail = self._texts_insert()
            rows = b", ".join(_row(literal, a, t) for a, t in texts.items())
            parts.append(head.encode() + rows + tail.encode())
        events = b", ".join(
            _row(literal, e.originator_id, e.originator_version, e.topic, e.state)
            for e in stored_events
        )
        parts += [lock, insert + events + returning, b"COMMIT"]
        return b"; ".join(parts)

    def _statements(self, conn: Any) -> tuple[bytes, tuple[bytes, bytes]]:
        """The save's fixed statements as bytes (rendered once: psycopg renders a composed
        query on every execution): the lock and NOTIFY, and the insert's text before and after
        its rows."""
        if self._sql is None:
            notify = SQL("NOTIFY {0}").format(Identifier(self.channel_name))
            lock = SQL("; ").join([*self.lock_table_statements, notify]).as_bytes(conn)
            table = SQL("{0}.{1}").format(
                Identifier(self.datastore.schema), Identifier(self.events_table_name)
            )
            self._sql = lock, (
                b"INSERT INTO " + table.as_bytes(conn)
                + b" (originator_id, originator_version, topic, state) VALUES ",
                b" RETURNING notification_id",
            )
        return self._sql

    _sql: tuple[bytes, tuple[bytes, bytes]] | None = None

    def select_texts(self, addresses: Sequence[str]) -> dict[str, str]:
        unique = sorted(set(addresses))
        with self.datastore.transaction(commit=False) as curs:
            try:
                curs.execute(
                    f"SELECT sha256, body FROM {self._text_table} WHERE sha256 = ANY(%s)",
                    (unique,),
                )
            except Exception:  # no text table: an old store
                return {}
            return {row["sha256"]: row["body"] for row in curs.fetchall()}

    def select_quote_lists(self, _addresses: Sequence[str]) -> dict[str, list[str]]:
        """None: PostgreSQL stores each text whole (compressed by TOAST), never packed."""
        return {}


def _row(literal: Callable[[Any], bytes], *values: Any) -> bytes:
    """One row of a VALUES list, its values as SQL literals."""
    return b"(" + b", ".join(literal(v) for v in values) + b")"


def _returned_ids(curs: Any) -> list[int]:
    """The notification ids the save's insert returned: the one result of its query with
    rows (the statements before it return none)."""
    while curs.pgresult is None or curs.pgresult.status != ExecStatus.TUPLES_OK:
        if not curs.nextset():
            raise psycopg.InternalError("the save's insert returned no notification ids")
    return [row["notification_id"] for row in curs.fetchall()]


def _roll_back(conn: Any) -> None:
    """Roll back the failed save's transaction, if the connection is still usable: psycopg
    closes it itself on a second Ctrl-C or a cancel that timed out, and a rollback's own
    error must not replace what went wrong (an interrupt would become a retried save). The
    pool discards a connection it gets back broken."""
    if conn.pgconn.status == ConnStatus.OK:
        with contextlib.suppress(psycopg.Error):
            conn.rollback()


class TextsPostgresSnapshotRecorder(_WritesTexts, PostgresAggregateRecorder):
    """Writes the texts a snapshot refers to in the transaction that inserts the snapshot
    (see ``texts_sqlite.TextsSQLiteSnapshotRecorder``). eventsourcing inserts a snapshot on an
    autocommit connection; with texts to write (none this writer knows stored), both go in
    one explicit transaction."""

    def delete_snapshots(self, originator_id: UUID, versions: Sequence[int]) -> None:
        """Delete these snapshots of one session (see ``TextsSQLiteSnapshotRecorder``)."""
        statement = SQL(
            "DELETE FROM {schema}.{table} "
            "WHERE originator_id = %s AND originator_version = ANY(%s)"
        ).format(
            schema=Identifier(self.datastore.schema), table=Identifier(self.events_table_name)
        )
        with self.datastore.transaction(commit=True) as curs:
            curs.execute(statement, (originator_id, list(versions)))

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        texts = self._texts_to_write(stored_events)
        if not texts:
            ids: Sequence[int] | None = super().insert_events(stored_events, **kwargs)
            return ids
        insert = functools.partial(self._insert_with_texts, texts=texts)
        return self.facts.inserting(insert, stored_events, **kwargs)

    def _insert_with_texts(
        self, stored_events: Sequence[StoredEvent], texts: dict[str, str], **kwargs: Any
    ) -> None:
        with self.datastore.transaction(commit=True) as curs:
            self._insert_texts(curs, texts, findings_in(kwargs))
            self._insert_stored_events(curs, stored_events, **kwargs)
