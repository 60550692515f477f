"""The SQLite recorders that write an event's (or a snapshot's) texts in the transaction that
inserts it, and read them back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent
from eventsourcing.sqlite import SQLiteAggregateRecorder, SQLiteApplicationRecorder

from .sqlite_writes import ImmediateTransaction
from .text_bodies import (
    DICTIONARIES_TABLE,
    address_of,
    binary_keys,
    body_of,
    by_kind,
    key_of,
    keys_of,
    readable,
    unquoted,
)
from .text_mapper import dictionaries_of, texts_of
from .text_write_cache import KnowsStore, Learned, StoreFacts, learned_in
from .texts import TEXT_TABLE

__all__ = ["TextsSQLiteRecorder", "TextsSQLiteSnapshotRecorder", "WritesTexts"]


class WritesTexts(KnowsStore, SQLiteAggregateRecorder):
    """Writes the texts of the events it inserts in the same transaction, asking the store
    only what a committed write has not already told it (:class:`StoreFacts`)."""

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        return self.facts.inserting(self._insert_at_once, stored_events, **kwargs)

    def _insert_at_once(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        """eventsourcing's ``insert_events`` (the pool's writer connection, its transaction's
        begin, rollback, commit and error mapping, then :meth:`_insert_events`) without the
        four nested context managers it goes through: a third of a save's cost outside the
        commit."""
        pool = self.datastore.pool
        conn = pool.get_connection(is_writer=True)
        try:
            # The write lock first: the save reads which texts are stored before it writes.
            with ImmediateTransaction(conn, commit=True) as c, c:
                ids: Sequence[int] | None = self._insert_events(c, stored_events, **kwargs)
                return ids
        finally:
            pool.put_connection(conn)

    def _insert_events(self, c: Any, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Any:
        _insert_texts(c, stored_events, self.facts, learned_in(kwargs))
        return super()._insert_events(c, stored_events, **kwargs)


class TextsSQLiteRecorder(WritesTexts, SQLiteApplicationRecorder):
    """Writes an event's texts in the transaction that inserts the event."""

    _binary: bool | None = None
    """Whether the store's texts are keyed by their digests' bytes (known once seen)."""
    _quote_lists = False
    """Whether the store has the table of quote lists of texts written before the lists were
    held in the texts' bodies (known once seen: a table is never dropped)."""

    def construct_create_table_statements(self) -> list[str]:
        return [*super().construct_create_table_statements(), _SQLITE_DDL]

    def select_texts(self, addresses: Sequence[str], *, _depth: int = 0) -> dict[str, str]:
        rows: list[tuple[str, bytes, int, str | None]] = []
        unique = sorted(set(addresses))
        with self.datastore.transaction(commit=False) as c:
            binary = self._binary_keys(c)
            if binary is None:  # no text table: an old store
                return {}
            lists = self._has_quote_lists(c)
            for i in range(0, len(unique), 500):
                rows += _select_rows(c, unique[i : i + 500], binary=binary, quote_lists=lists)
        plain, quoting = by_kind(rows)
        out = readable(plain)
        # A text's quoted answers were stored before it, so there is no cycle; the bound only
        # keeps a damaged table from recursing.
        if quoting and _depth < _MAX_DEPTH:
            wanted = sorted({m for _, _, ms in quoting for m in ms})
            out.update(unquoted(quoting, self.select_texts(wanted, _depth=_depth + 1)))
        return out

    def select_quote_lists(self, addresses: Sequence[str]) -> dict[str, list[str]]:
        """The answers each of these texts is stored packed against (address → their
        addresses, in dictionary order); a text stored on its own is absent. What a copy
        packs the texts against in its target, as their writer did."""
        rows: list[tuple[str, bytes, int, str | None]] = []
        unique = sorted(set(addresses))
        with self.datastore.transaction(commit=False) as c:
            binary = self._binary_keys(c)
            if binary is None:
                return {}
            lists = self._has_quote_lists(c)
            for i in range(0, len(unique), 500):
                rows += _select_rows(c, unique[i : i + 500], binary=binary, quote_lists=lists)
        return {address: members for address, _, members in by_kind(rows)[1]}

    def _binary_keys(self, c: Any) -> bool | None:
        if self._binary is None:
            self._binary = binary_keys(c)
        return self._binary

    def _has_quote_lists(self, c: Any) -> bool:
        if not self._quote_lists:
            c.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (DICTIONARIES_TABLE,))
            self._quote_lists = bool(c.fetchall())
        return self._quote_lists


class TextsSQLiteSnapshotRecorder(WritesTexts):
    """Writes the texts a snapshot refers to in the transaction that inserts the snapshot: a
    snapshot holds answers by reference, and the events it stands for may hold a text inline
    (a short one, or any in a store written before texts were stored apart)."""

    def delete_snapshots(self, originator_id: UUID, versions: Sequence[int]) -> None:
        """Delete these snapshots of one session (``verify`` found them not matching its
        events); the texts they name stay, as every text does."""
        with self.datastore.transaction(commit=True) as c:
            c.executemany(
                f"DELETE FROM {self.events_table_name} "
                "WHERE originator_id = ? AND originator_version = ?",
                [(originator_id.hex, v) for v in versions],
            )


def _insert_texts(
    c: Any, stored_events: Sequence[StoredEvent], facts: StoreFacts, learned: Learned
) -> None:
    """The texts of ``stored_events`` not stored yet, in the caller's transaction."""
    texts = dict(texts_of(stored_events))
    if not texts:
        return
    if facts.tables_ready:
        binary = facts.binary_keys
    else:
        c.execute(_SQLITE_DDL)
        binary = learned.binary_keys = bool(binary_keys(c))
        learned.tables = True
    unknown = facts.unknown(texts.items())
    if not unknown:
        return  # every text of the save is known stored: nothing to ask or write
    new = _absent(c, unknown, binary)
    dictionaries = dictionaries_of(stored_events)
    c.executemany(
        f"INSERT OR IGNORE INTO {TEXT_TABLE} (sha256, body) VALUES (?, ?)",
        [(key_of(a, binary), body_of(t, dictionaries.get(a), texts)) for a, t in new.items()],
    )
    learned.texts |= set(texts)


def _select_rows(
    c: Any, chunk: Sequence[str], *, binary: bool, quote_lists: bool
) -> list[tuple[str, bytes, int, str | None]]:
    """Stored rows (address, body as bytes, compressed?, quote list as JSON or None); the
    quote lists of texts written before they were held in the bodies come from their table."""
    keys = keys_of(chunk, binary)
    marks = ",".join("?" * len(keys))
    body = "CAST(t.body AS BLOB), typeof(t.body) = 'blob'"
    try:
        if quote_lists:
            c.execute(
                f"SELECT t.sha256, {body}, d.members FROM {TEXT_TABLE} t "
                f"LEFT JOIN {DICTIONARIES_TABLE} d ON d.sha256 = t.sha256 "
                f"WHERE t.sha256 IN ({marks})",
                keys,
            )
            return [(address_of(a), b, z, m) for a, b, z, m in c.fetchall()]
        c.execute(f"SELECT t.sha256, {body} FROM {TEXT_TABLE} t WHERE t.sha256 IN ({marks})", keys)
    except Exception:  # a damaged store
        return []
    return [(address_of(a), b, z, None) for a, b, z in c.fetchall()]


def _absent(c: Any, texts: dict[str, str], binary: bool) -> dict[str, str]:
    """The texts not stored yet: packing one costs more than looking it up (a system prompt is
    in every event of a session)."""
    present: set[str] = set()
    addresses = list(texts)
    for i in range(0, len(addresses), 500):
        keys = keys_of(addresses[i : i + 500], binary)
        marks = ",".join("?" * len(keys))
        c.execute(f"SELECT sha256 FROM {TEXT_TABLE} WHERE sha256 IN ({marks})", keys)
        present.update(address_of(row[0]) for row in c.fetchall())
    return {a: t for a, t in texts.items() if a not in present}


_MAX_DEPTH = 4
_SQLITE_DDL = f"CREATE TABLE IF NOT EXISTS {TEXT_TABLE} (sha256 BLOB PRIMARY KEY, body NOT NULL)"
"""A rowid table: a text is a few KB, and SQLite packs such rows into overflow pages far better
in a rowid table than in a WITHOUT ROWID one (which held 466 KB of texts in 1.2 MB of pages).
The key is the digest's 32 bytes: the key is stored twice (in the row and in the primary key's
index), and in hexadecimal the two copies were a tenth of a store's file. The body has no
declared type: a compressed body is a BLOB, a plain one TEXT."""
