"""Each text once: message contents, answers and partial texts stored by their SHA-256.

A prompt repeats the system prompt (with its JSON schema) on every call, and many calls share
messages, so the ledger keeps every long text once per store in a ``forge_texts`` table of the
same database, written in the same transaction as the events that refer to it (the
application recorder's insert, see :class:`TextsSQLiteRecorder` and
``texts_postgres.TextsPostgresRecorder``). The stored event carries ``{"sha256": <hex>}``
in place of the text; the mapper swaps the texts back when an event is read, so everything above the
store (state, replay, audit, export) sees exactly the recorded texts. The hash chain covers
the texts themselves: ``verify`` resolves every reference, checks that the text exists and
hashes to its address, then hashes the event — old stores (texts inline) verify unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from eventsourcing.persistence import Mapper, StoredEvent
from eventsourcing.sqlite import SQLiteAggregateRecorder, SQLiteApplicationRecorder

from ..domain.texts import text_address
from ..errors import StoreError

__all__ = [
    "TEXT_KEYS",
    "TEXT_TABLE",
    "TextMapper",
    "TextsSQLiteRecorder",
    "TextsSQLiteSnapshotRecorder",
    "externalise",
    "resolve",
    "text_address",
    "texts_of",
]

TEXT_TABLE = "forge_texts"
TEXT_KEYS = frozenset({"content", "partial_text", "text"})
"""Payload keys whose string values are texts (chat message and answer contents, partial
answers, human input)."""
MIN_LENGTH = 96
"""Shorter texts stay inline: a reference costs about as much as they do."""
_REF = "sha256"
_CACHE_SIZE = 4096
_PREFIX = "forge_ledger:"

Lookup = Callable[[Sequence[str]], dict[str, str]]


def _is_ref(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get(_REF), str)


def externalise(data: Any, texts: dict[str, str]) -> Any:
    """``data`` with every long text under a :data:`TEXT_KEYS` key replaced by its reference;
    the texts are added to ``texts`` (address → text). ``data`` itself is not changed."""
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            if key in TEXT_KEYS and isinstance(value, str) and len(value) >= MIN_LENGTH:
                address = text_address(value)
                texts[address] = value
                out[key] = {_REF: address}
            else:
                out[key] = externalise(value, texts)
        return out
    if isinstance(data, list | tuple):
        return [externalise(v, texts) for v in data]
    return data


def _addresses(data: Any, found: list[str]) -> list[str]:
    if isinstance(data, dict):
        for key, value in data.items():
            if key in TEXT_KEYS and _is_ref(value):
                found.append(value[_REF])
            else:
                _addresses(value, found)
    elif isinstance(data, list):
        for v in data:
            _addresses(v, found)
    return found


def _substitute(data: Any, texts: dict[str, str]) -> Any:
    if isinstance(data, dict):
        return {
            k: texts[v[_REF]] if k in TEXT_KEYS and _is_ref(v) else _substitute(v, texts)
            for k, v in data.items()
        }
    if isinstance(data, list):
        return [_substitute(v, texts) for v in data]
    return data


def resolve(data: Any, lookup: Lookup, *, check: bool = False) -> Any:
    """``data`` with every reference replaced by its text. A missing text raises
    :class:`StoreError`; with ``check`` a text that does not hash to its address does too."""
    wanted = _addresses(data, [])
    if not wanted:
        return data
    texts = lookup(wanted)
    for address in wanted:
        if address not in texts:
            raise StoreError(
                f"text {address[:12]} is referenced but missing from the store",
                hint="restore the store from a backup",
            )
        if check and text_address(texts[address]) != address:
            raise StoreError(
                f"text {address[:12]} does not hash to its address (the text was altered)",
                hint="restore the store from a backup",
            )
    return _substitute(data, texts)


@dataclass(frozen=True)
class StoredEventWithTexts(StoredEvent):
    """A stored event and the texts its state refers to, for the recorder to write with it."""

    texts: dict[str, str] = field(default_factory=dict)


class TextMapper(Mapper[Any]):
    """Swaps texts for references on the way to the store and back on the way out.

    Only ledger events (``forge_ledger:`` topics with a ``data`` payload) are touched;
    a snapshot's state holds answers by reference already (the ledger's mapper adds the texts
    it refers to, see ``ledger.application``). ``lookup`` is set by the ledger once the
    recorder exists.
    """

    lookup: Lookup | None = None

    def to_stored_event(self, domain_event: Any) -> StoredEvent:
        state = vars(domain_event)
        data = state.get("data")
        if not isinstance(data, dict) or not type(domain_event).__module__.startswith(
            "forge_ledger"
        ):
            return super().to_stored_event(domain_event)
        texts: dict[str, str] = {}
        stored_data = externalise(data, texts)
        if not texts:
            return super().to_stored_event(domain_event)
        proxy = object.__new__(type(domain_event))
        object.__setattr__(proxy, "__dict__", {**state, "data": stored_data})
        stored = super().to_stored_event(proxy)
        return StoredEventWithTexts(
            originator_id=stored.originator_id,
            originator_version=stored.originator_version,
            topic=stored.topic,
            state=stored.state,
            texts=texts,
        )

    def to_domain_event(self, stored_event: StoredEvent) -> Any:
        domain_event = super().to_domain_event(stored_event)
        if not stored_event.topic.startswith(_PREFIX) or self.lookup is None:
            return domain_event
        state = domain_event.__dict__
        data = state.get("data")
        if isinstance(data, dict):
            state["data"] = resolve(data, self._cached_lookup)
        return domain_event

    def _cached_lookup(self, addresses: Sequence[str]) -> dict[str, str]:
        """Texts never change under their address, so recently read ones are kept (a system
        prompt is referred to by every call of a session); ``verify`` reads the store itself."""
        cache: dict[str, str] = self.__dict__.setdefault("_cache", {})
        missing = [a for a in addresses if a not in cache]
        if missing and self.lookup is not None:
            if len(cache) > _CACHE_SIZE:
                cache.clear()
            cache.update(self.lookup(missing))
        return {a: cache[a] for a in addresses if a in cache}


def texts_of(stored_events: Iterable[StoredEvent]) -> list[tuple[str, str]]:
    rows: dict[str, str] = {}
    for s in stored_events:
        rows.update(getattr(s, "texts", None) or {})
    return list(rows.items())


class TextsSQLiteRecorder(SQLiteApplicationRecorder):
    """Writes an event's texts in the transaction that inserts the event."""

    def construct_create_table_statements(self) -> list[str]:
        return [*super().construct_create_table_statements(), _SQLITE_DDL]

    def _insert_events(self, c: Any, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Any:
        _insert_texts(c, stored_events)
        return super()._insert_events(c, stored_events, **kwargs)

    def select_texts(self, addresses: Sequence[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        unique = sorted(set(addresses))
        with self.datastore.transaction(commit=False) as c:
            for i in range(0, len(unique), 500):
                chunk = unique[i : i + 500]
                marks = ",".join("?" * len(chunk))
                try:
                    c.execute(
                        f"SELECT sha256, body FROM {TEXT_TABLE} WHERE sha256 IN ({marks})", chunk
                    )
                except Exception:  # no text table: an old store, or a damaged one
                    return out
                out.update({row[0]: row[1] for row in c.fetchall()})
        return out


class TextsSQLiteSnapshotRecorder(SQLiteAggregateRecorder):
    """Writes the texts a snapshot refers to in the transaction that inserts the snapshot: a
    snapshot holds answers by reference, and the events it stands for may hold a text inline
    (a short one, or any in a store written before texts were stored apart)."""

    def _insert_events(self, c: Any, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Any:
        _insert_texts(c, stored_events)
        return super()._insert_events(c, stored_events, **kwargs)


def _insert_texts(c: Any, stored_events: Sequence[StoredEvent]) -> None:
    rows = texts_of(stored_events)
    if rows:
        c.execute(_SQLITE_DDL)
        c.executemany(f"INSERT OR IGNORE INTO {TEXT_TABLE} (sha256, body) VALUES (?, ?)", rows)


_SQLITE_DDL = (
    f"CREATE TABLE IF NOT EXISTS {TEXT_TABLE} (sha256 TEXT PRIMARY KEY, body TEXT NOT NULL) "
    "WITHOUT ROWID"
)
