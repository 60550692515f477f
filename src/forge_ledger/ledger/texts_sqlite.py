"""The SQLite recorders that write an event's (or a snapshot's) texts in the transaction that
inserts it, and read them back."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent
from eventsourcing.sqlite import SQLiteAggregateRecorder, SQLiteApplicationRecorder

from . import migrate
from .sqlite_writes import ImmediateTransaction
from .store import FORMAT_VERSION
from .text_bodies import body_of, by_kind, readable, unquoted
from .text_mapper import dictionaries_of, texts_of
from .text_write_cache import (
    KnownStoreContents,
    RemembersStoreContents,
    TransactionFindings,
    findings_in,
)
from .texts import TEXT_TABLE

__all__ = ["TextsSQLiteRecorder", "TextsSQLiteSnapshotRecorder", "WritesTexts"]


class WritesTexts(RemembersStoreContents, SQLiteAggregateRecorder):
    """Writes the texts of the events it inserts in the same transaction, asking the store
    only what a committed write has not already told it (:class:`KnownStoreContents`)."""

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
        findings = findings_in(kwargs)
        if not self.facts.tables_ready:
            # A writer's first write brings an older store to the current format, in its
            # own transaction: from then on every write is of that one layout.
            migrate.upgrade(c)
            findings.tables = True
        _insert_texts(c, stored_events, self.facts, findings)
        return super()._insert_events(c, stored_events, **kwargs)


class TextsSQLiteRecorder(WritesTexts, SQLiteApplicationRecorder):
    """Writes an event's texts in the transaction that inserts the event."""

    _current = False
    """Whether the store is known to be of the current format (a store is never made older)."""

    def construct_create_table_statements(self) -> list[str]:
        return [*super().construct_create_table_statements(), migrate.TEXT_DDL]

    def select_texts(self, addresses: Sequence[str], *, _depth: int = 0) -> dict[str, str]:
        plain, quoting = by_kind(self._rows(addresses))
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
        return {address: members for address, _, members in by_kind(self._rows(addresses))[1]}

    def _rows(self, addresses: Sequence[str]) -> list[tuple[str, bytes, int]]:
        """The stored rows of these texts (address, body, compressed?); a store of an older
        format is read as :mod:`.migrate` reads it, changing nothing."""
        unique = sorted(set(addresses))
        with self.datastore.transaction(commit=False) as c:
            if not self._current:
                self._current = migrate.format_of(c) >= FORMAT_VERSION
            if not self._current:
                return migrate.old_text_rows(c, unique)
            rows: list[tuple[str, bytes, int]] = []
            for i in range(0, len(unique), 500):
                rows += _select_rows(c, unique[i : i + 500])
            return rows


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
    c: Any,
    stored_events: Sequence[StoredEvent],
    facts: KnownStoreContents,
    learned: TransactionFindings,
) -> None:
    """The texts of ``stored_events`` not stored yet, in the caller's transaction."""
    texts = dict(texts_of(stored_events))
    if not texts:
        return
    unknown = facts.unknown(texts.items())
    if not unknown:
        return  # every text of the save is known stored: nothing to ask or write
    new = _absent(c, unknown)
    dictionaries = dictionaries_of(stored_events)
    c.executemany(
        f"INSERT OR IGNORE INTO {TEXT_TABLE} (sha256, body) VALUES (?, ?)",
        [(bytes.fromhex(a), body_of(t, dictionaries.get(a), texts)) for a, t in new.items()],
    )
    learned.texts |= set(texts)


def _keys(addresses: Sequence[str]) -> list[bytes]:
    """The keys of ``addresses`` (one that is not a digest's hex cannot be stored: left out)."""
    return [bytes.fromhex(a) for a in addresses if _ADDRESS.fullmatch(a)]


def _select_rows(c: Any, chunk: Sequence[str]) -> list[tuple[str, bytes, int]]:
    """Stored rows (address, body as bytes, compressed?)."""
    keys = _keys(chunk)
    marks = ",".join("?" * len(keys))
    try:
        c.execute(
            f"SELECT sha256, CAST(body AS BLOB), typeof(body) = 'blob' FROM {TEXT_TABLE} "
            f"WHERE sha256 IN ({marks})",
            keys,
        )
    except Exception:  # a damaged store
        return []
    return [(bytes(a).hex(), b, z) for a, b, z in c.fetchall()]


def _absent(c: Any, texts: dict[str, str]) -> dict[str, str]:
    """The texts not stored yet: packing one costs more than looking it up (a system prompt is
    in every event of a session)."""
    present: set[str] = set()
    addresses = list(texts)
    for i in range(0, len(addresses), 500):
        keys = _keys(addresses[i : i + 500])
        marks = ",".join("?" * len(keys))
        c.execute(f"SELECT sha256 FROM {TEXT_TABLE} WHERE sha256 IN ({marks})", keys)
        present.update(bytes(row[0]).hex() for row in c.fetchall())
    return {a: t for a, t in texts.items() if a not in present}


_MAX_DEPTH = 4
_ADDRESS = re.compile("[0-9a-f]{64}")
