"""Each text once: message contents, answers and partial texts stored by their SHA-256.

A prompt repeats the system prompt (with its JSON schema) on every call, and many calls share
messages, so the ledger keeps every long text once per store in a ``forge_texts`` table of the
same database, written in the same transaction as the events that refer to it (the
application recorder's insert, see :class:`TextsSQLiteRecorder` and
``texts_postgres.TextsPostgresRecorder``). The stored event carries ``{"sha256": <hex>}``
in place of the text; the mapper swaps the texts back when an event is read, so everything above the
store (state, replay, audit, export) sees exactly the recorded texts. A parsed critique, whose
lists of strengths and weaknesses repeat its answer's prose in strings no text key holds, is
stored the same way as one text, its JSON (:data:`OBJECT_TEXTS`). The hash chain covers
the texts themselves: ``verify`` resolves every reference, checks that the text exists and
hashes to its address, then hashes the event — old stores (texts inline) verify unchanged.

On SQLite a text's body is stored zlib-compressed when that is smaller (see
:mod:`~forge_ledger.ledger.compression`); PostgreSQL compresses long values itself (TOAST).
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast
from uuid import UUID

from eventsourcing.persistence import Mapper, StoredEvent
from eventsourcing.sqlite import SQLiteAggregateRecorder, SQLiteApplicationRecorder
from eventsourcing.utils import get_topic
from pydantic import BaseModel, ValidationError

from ..domain.texts import text_address
from ..domain.values import Critique
from ..errors import StoreError
from .compression import StateCompressor, TopLevelTranscoder, pack_text, unpack, unpack_text
from .quotes import QuotedAnswers, pack_with, unpack_with
from .sqlite_writes import ImmediateTransaction

__all__ = [
    "OBJECT_TEXTS",
    "TEXT_KEYS",
    "TEXT_TABLE",
    "KnowsStore",
    "Learned",
    "StoreFacts",
    "TextMapper",
    "TextsSQLiteRecorder",
    "TextsSQLiteSnapshotRecorder",
    "binary_keys",
    "externalise",
    "learned_in",
    "object_text",
    "quote_lists",
    "quoting_body",
    "refer_to_texts",
    "referenced",
    "resolve",
    "text_address",
    "text_reference",
    "texts_of",
    "with_texts",
]

TEXT_TABLE = "forge_texts"
TEXT_KEYS = frozenset({"content", "partial_text", "reasoning", "text"})
"""Payload keys whose string values are texts (chat message and answer contents, partial
answers, human input, and the reasoning of a parsed opinion or vote, which repeats its
answer's prose)."""
OBJECT_TEXTS: dict[str, type[BaseModel]] = {"critique": Critique}
"""Top-level payload keys whose object values are stored as one text, the value's JSON as its
model writes it (:func:`object_text`): a parsed critique holds its answer's prose again, in
lists of strings under keys no text rule names. A snapshot refers to the same text for the
same critique (``Critique``'s serializer, through :func:`text_reference`)."""
MIN_LENGTH = 96
"""Shorter texts stay inline: a reference costs about as much as they do."""
_REF = "sha256"
_REF_KEY = b'"sha256"'
_WINDOW = 256
"""Events whose texts are read together (a few hundred texts: well inside the text cache)."""
_REF_PATTERN = re.compile(
    rb'"(' + b"|".join(re.escape(k.encode()) for k in sorted(TEXT_KEYS | set(OBJECT_TEXTS)))
    + rb')"\s*:\s*\{\s*"sha256"\s*:\s*"([0-9a-f]{64})"\s*\}'
)
"""A reference under a text or object key, as any JSON writer spaces it (a PostgreSQL row may
have been re-serialised through ``jsonb``)."""
_PROMPT_REF = re.compile(
    rb'("role"\s*:\s*"[a-z]+"\s*,\s*"content"\s*:\s*)\{\s*"sha256"\s*:\s*"[0-9a-f]{64}"\s*\}'
)
"""A prompt message's text by reference (a chat message is ``{"role": …, "content": …}``)."""
_TEXT_VALUE = re.compile(
    '"(' + "|".join(re.escape(k) for k in sorted(TEXT_KEYS)) + r')":"([^"\\]*(?:\\.[^"\\]*)*)"'
)
"""A string under a text key, in compact JSON (the string's body, escapes and all, is group 2)."""
_CACHE_SIZE = 4096
_PREFIX = "forge_ledger:"

Lookup = Callable[[Sequence[str]], dict[str, str]]


def _is_ref(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get(_REF), str)


def text_reference(text: str, texts: dict[str, str]) -> dict[str, str] | None:
    """The reference that stands for ``text`` under a text or object key, its text added to
    ``texts``; None for a text short enough to stay inline."""
    if len(text) < MIN_LENGTH:
        return None
    address = text_address(text)
    texts[address] = text
    return {_REF: address}


def object_text(key: str, value: Any) -> str | None:
    """The text that stands for ``value`` under the object key ``key`` (:data:`OBJECT_TEXTS`):
    its JSON as its model writes it, which a snapshot writes for the same value. None unless
    ``value`` is exactly what that JSON reads back as (it then stays inline, as it is)."""
    model = OBJECT_TEXTS.get(key)
    if model is None or type(value) is not dict:
        return None
    try:
        text = model.model_validate(value).model_dump_json()
    except ValidationError:
        return None
    return text if json.loads(text) == value else None


def _object_reference(key: str, value: Any, texts: dict[str, str]) -> Any:
    text = object_text(key, value)
    return None if text is None else text_reference(text, texts)


def externalise(data: Any, texts: dict[str, str], *, objects: bool = False) -> Any:
    """``data`` with every long text under a :data:`TEXT_KEYS` key replaced by its reference,
    and with ``objects`` (an event's payload) every object under one of its own
    :data:`OBJECT_TEXTS` keys whose text is long; the texts are added to ``texts`` (address →
    text). ``data`` itself is not changed. Objects are looked for at the top only: deeper, a
    key of that name is free-form data (an imported session's history), not the model."""
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            kind = type(value)  # a scalar is copied here, not through a call: appends pay
            if kind is int or kind is float or kind is bool or value is None:
                out[key] = value
            elif isinstance(value, str):
                ref = text_reference(value, texts) if key in TEXT_KEYS else None
                out[key] = value if ref is None else ref
            else:
                ref = None
                if objects and key in OBJECT_TEXTS:
                    ref = _object_reference(key, value, texts)
                out[key] = externalise(value, texts) if ref is None else ref
        return out
    if isinstance(data, list | tuple):
        return [externalise(v, texts) for v in data]
    return data


def _refers(key: str, value: Any) -> bool:
    return (key in TEXT_KEYS or key in OBJECT_TEXTS) and _is_ref(value)


def _addresses(data: Any, found: list[str]) -> list[str]:
    if isinstance(data, dict):
        for key, value in data.items():
            if _refers(key, value):
                found.append(value[_REF])
            else:
                _addresses(value, found)
    elif isinstance(data, list):
        for v in data:
            _addresses(v, found)
    return found


def _substitute(data: Any, texts: dict[str, str]) -> Any:
    if isinstance(data, dict):
        return {k: _text_value(k, v, texts) for k, v in data.items()}
    if isinstance(data, list):
        return [_substitute(v, texts) for v in data]
    return data


def _text_value(key: str, value: Any, texts: dict[str, str]) -> Any:
    """``value`` (under ``key``) with its text in place if it is a reference."""
    if not _refers(key, value):
        return _substitute(value, texts)
    return _referred(key, value[_REF], texts)


def _referred(key: str, address: str, texts: dict[str, str]) -> Any:
    """What a reference under ``key`` stands for: the text at ``address``, or under an object
    key the object it holds."""
    if key in OBJECT_TEXTS:
        return _object_of(texts[address], address)
    return texts[address]


def _object_of(text: str, address: str) -> dict[str, Any]:
    """The object an object key's text holds. Anything else (the text was altered) is refused:
    spliced into a stored event as it is, it could stand for any of the event's fields."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        value = None
    if type(value) is not dict:
        raise StoreError(
            f"text {address[:12]} should hold a JSON object and does not (the text was altered)",
            hint="restore the store from a backup",
        )
    return cast(dict[str, Any], value)


def referenced(data: Any) -> list[str]:
    """The addresses of the texts a stored payload refers to (in order, repeats kept)."""
    return _addresses(data, [])


def resolve(data: Any, lookup: Lookup, *, check: bool = False) -> Any:
    """``data`` with every reference replaced by its text. A missing text raises
    :class:`StoreError`; with ``check`` a text that does not hash to its address does too."""
    wanted = _addresses(data, [])
    if not wanted:
        return data
    texts = _all_found(lookup, wanted)
    for address in wanted:
        if check and text_address(texts[address]) != address:
            raise StoreError(
                f"text {address[:12]} does not hash to its address (the text was altered)",
                hint="restore the store from a backup",
            )
    return _substitute(data, texts)


def with_texts(plain: bytes, lookup: Lookup) -> bytes:
    """The stored JSON ``plain`` with each reference replaced by its text, as JSON, before it
    is decoded; a missing text raises :class:`StoreError`.

    Substituting in the bytes costs a search; walking the decoded payload for references
    (most events have none) cost more than decoding it. A reference can only be the whole
    value of a text key: inside a JSON string its quotes would be escaped.
    """
    if _REF_KEY not in plain:
        return plain
    addresses = [m.group(2).decode("ascii") for m in _REF_PATTERN.finditer(plain)]
    if not addresses:
        return plain
    texts = _all_found(lookup, addresses)

    def text(m: re.Match[bytes]) -> bytes:
        value = _referred(m.group(1).decode("ascii"), m.group(2).decode("ascii"), texts)
        body = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        return b'"' + m.group(1) + b'":' + body.encode("utf-8")

    return _REF_PATTERN.sub(text, plain)


def refer_to_texts(document: str, texts: dict[str, str]) -> str:
    """``document`` (compact JSON, as pydantic writes it) with every long text under a text
    key replaced by its reference, as :func:`externalise` does to a payload; the texts are
    added to ``texts``. For a JSON document already written: decoding a large one to walk
    it would cost more than this search. As in :func:`with_texts`, only a key can match: in
    a string every quote is escaped."""

    def reference(m: re.Match[str]) -> str:
        ref = text_reference(json.loads(f'"{m.group(2)}"'), texts)
        if ref is None:
            return m.group(0)
        return f'"{m.group(1)}":{json.dumps(ref, separators=(",", ":"))}'

    return _TEXT_VALUE.sub(reference, document)


def _all_found(lookup: Lookup, addresses: Sequence[str]) -> dict[str, str]:
    """The texts at ``addresses``; one missing from the store raises :class:`StoreError`."""
    texts = lookup(addresses)
    for address in addresses:
        if address not in texts:
            raise _missing(address)
    return texts


def _missing(address: str) -> StoreError:
    return StoreError(
        f"text {address[:12]} is referenced but missing from the store, or unreadable",
        hint="restore the store from a backup",
    )


@dataclass(frozen=True)
class StoredEventWithTexts(StoredEvent):
    """A stored event and the texts its state refers to, for the recorder to write with it."""

    texts: dict[str, str] = field(default_factory=dict)
    dictionaries: dict[str, list[str]] = field(default_factory=dict)
    """Prompt address → the addresses of the answers it quotes (see :mod:`.quotes`)."""

    @classmethod
    def of(
        cls,
        stored: StoredEvent,
        texts: dict[str, str],
        dictionaries: dict[str, list[str]] | None = None,
    ) -> StoredEventWithTexts:
        return cls(
            originator_id=stored.originator_id,
            originator_version=stored.originator_version,
            topic=stored.topic,
            state=stored.state,
            texts=texts,
            dictionaries=dictionaries or {},
        )


class TextMapper(Mapper[Any]):
    """Swaps texts for references on the way to the store and back on the way out.

    Only ledger events (``forge_ledger:`` topics with a ``data`` payload) are touched;
    a snapshot's state holds answers by reference already (the ledger's mapper adds the texts
    it refers to, see ``ledger.snapshot_states``). ``lookup`` is set by the ledger once the
    recorder exists.
    """

    lookup: Lookup | None = None

    def __init__(self, transcoder: Any, *, compress: bool = True) -> None:
        # Reading always goes through the compressor, which passes plain JSON through, so a
        # store holds both forms; ``compress`` only decides how new states are written.
        super().__init__(
            transcoder=TopLevelTranscoder(transcoder),
            compressor=StateCompressor(write=compress),
        )
        self.quotes = QuotedAnswers()

    def to_stored_event(self, domain_event: Any) -> StoredEvent:
        state = vars(domain_event)
        data = state.get("data")
        if not isinstance(data, dict) or not type(domain_event).__module__.startswith(
            "forge_ledger"
        ):
            return super().to_stored_event(domain_event)
        texts: dict[str, str] = {}
        stored_data = externalise(data, texts, objects=True)
        if not texts:
            return self._stored(domain_event, state)
        dictionaries = self._dictionaries(data, texts)
        self._remember_answer(data)
        return StoredEventWithTexts.of(
            self._stored(domain_event, {**state, "data": stored_data}), texts, dictionaries
        )

    def _stored(self, domain_event: Any, state: dict[str, Any]) -> StoredEvent:
        """eventsourcing's ``to_stored_event`` for one of our events, with ``state`` (its
        payload's texts by reference) in place of its attributes. Its payload was dumped in
        pydantic's JSON mode (``Deliberation._record``), so it is JSON already but for the
        timestamp, and is written without the JSON encoder's hook for typed values."""
        if self.cipher is not None:
            proxy = object.__new__(type(domain_event))
            object.__setattr__(proxy, "__dict__", state)
            return super().to_stored_event(proxy)
        rest = dict(state)
        originator_id = rest.pop("originator_id")
        originator_version = rest.pop("originator_version")
        class_version = getattr(type(domain_event), "class_version", 1)
        if class_version > 1:  # as eventsourcing writes it, for its upcasting
            rest["class_version"] = class_version
        body = cast(TopLevelTranscoder, self.transcoder).encode_event_state(rest)
        return StoredEvent(
            originator_id=originator_id,
            originator_version=originator_version,
            topic=get_topic(type(domain_event)),
            state=self.compressor.compress(body) if self.compressor else body,
        )

    def _dictionaries(self, data: dict[str, Any], texts: dict[str, str]) -> dict[str, list[str]]:
        response = data.get("response")
        answer = response.get("content") if isinstance(response, dict) else None
        return quote_lists(self.quotes, answer, texts)

    def _remember_answer(self, data: dict[str, Any]) -> None:
        response = data.get("response")
        content = response.get("content") if isinstance(response, dict) else None
        if isinstance(content, str):
            self.quotes.remember(content)

    def to_domain_event(self, stored_event: StoredEvent) -> Any:
        return self._decoded(stored_event, unpack(stored_event.state))

    def to_domain_events(
        self, stored_events: Iterable[StoredEvent], *, prompts: bool = True
    ) -> Iterator[Any]:
        """Many events, their texts read a window at a time: one query for a window's texts
        instead of one (or two, for a prompt and the answers it quotes) per event.

        Without ``prompts`` the prompt messages' texts are not read: each comes back empty.
        Building a session's state never reads them (the state refers to a prompt by its
        event), and they are most of a session's text: reading them (each packed against the
        answers it quotes) and parsing them was more than half the cost of a fold. Only the
        ledger's aggregate loads ask for this; every other read gives the events whole.
        """
        window: list[tuple[StoredEvent, bytes]] = []
        for stored_event in stored_events:
            plain = unpack(stored_event.state)
            if not prompts and _REF_KEY in plain:
                plain = _PROMPT_REF.sub(rb'\1""', plain)
            window.append((stored_event, plain))
            if len(window) == _WINDOW:
                yield from self._decoded_window(window)
                window = []
        yield from self._decoded_window(window)

    def _decoded_window(self, window: list[tuple[StoredEvent, bytes]]) -> Iterator[Any]:
        if self.lookup is not None:
            wanted = {
                m.group(2).decode("ascii")
                for stored_event, plain in window
                if stored_event.topic.startswith(_PREFIX) and _REF_KEY in plain
                for m in _REF_PATTERN.finditer(plain)
            }
            if wanted:
                self.cached_lookup(sorted(wanted))
        for stored_event, plain in window:
            yield self._decoded(stored_event, plain)

    def _decoded(self, stored_event: StoredEvent, plain: bytes) -> Any:
        if self.lookup is not None and stored_event.topic.startswith(_PREFIX):
            plain = self._inline(plain)
        domain_event = super().to_domain_event(
            StoredEvent(
                originator_id=stored_event.originator_id,
                originator_version=stored_event.originator_version,
                topic=stored_event.topic,
                state=plain,
            )
        )
        data = domain_event.__dict__.get("data")
        if isinstance(data, dict):
            self._remember_answer(data)
        return domain_event

    def _inline(self, plain: bytes) -> bytes:
        return with_texts(plain, self.cached_lookup)

    def cached_lookup(self, addresses: Sequence[str]) -> dict[str, str]:
        """Texts never change under their address, so recently read ones are kept (a system
        prompt is referred to by every call of a session); ``verify`` reads the store itself."""
        cache: dict[str, str] = self.__dict__.setdefault("_cache", {})
        found = {a: cache[a] for a in addresses if a in cache}
        missing = [a for a in addresses if a not in found]
        if missing and self.lookup is not None:
            fetched = self.lookup(missing)
            found.update(fetched)
            # Evict after answering: clearing first dropped texts this very call had found in
            # the cache (a long session's events then read as missing their texts).
            if len(cache) + len(fetched) > _CACHE_SIZE:
                cache.clear()
            cache.update(fetched)
        return found


def quote_lists(
    quotes: QuotedAnswers, answer: Any, texts: dict[str, str]
) -> dict[str, list[str]]:
    """For each long text of an event but its own ``answer`` (a prompt, the reasoning or
    critique parsed from an answer), the recent answers it quotes; those are added to
    ``texts`` so they are certainly stored with it. A text that is itself a recent answer
    (a parsed critique may be its answer's very text) is stored on its own: packed, it
    would make every text packed against it a chain of reads."""
    out: dict[str, list[str]] = {}
    for address, text in list(texts.items()):
        if text == answer or quotes.holds(address):
            continue
        quoted = [(a, t) for a, t in quotes.quoted_in(text) if a != address]
        if quoted:
            out[address] = [a for a, _ in quoted]
            texts.update(quoted)
    return out


def texts_of(stored_events: Iterable[StoredEvent]) -> list[tuple[str, str]]:
    rows: dict[str, str] = {}
    for s in stored_events:
        rows.update(getattr(s, "texts", None) or {})
    return list(rows.items())


def dictionaries_of(stored_events: Iterable[StoredEvent]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for s in stored_events:
        out.update(getattr(s, "dictionaries", None) or {})
    return out


class KnowsStore:
    """A recorder that writes texts, with what its committed saves found out (its facts)."""

    _facts: StoreFacts | None = None

    @property
    def facts(self) -> StoreFacts:
        if self._facts is None:
            self._facts = StoreFacts()
        return self._facts


class _WritesTexts(KnowsStore, SQLiteAggregateRecorder):
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


class TextsSQLiteRecorder(_WritesTexts, SQLiteApplicationRecorder):
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
        plain, quoting = _by_kind(rows)
        out = _readable(plain)
        # A text's quoted answers were stored before it, so there is no cycle; the bound only
        # keeps a damaged table from recursing.
        if quoting and _depth < _MAX_DEPTH:
            wanted = sorted({m for _, _, ms in quoting for m in ms})
            out.update(_unquoted(quoting, self.select_texts(wanted, _depth=_depth + 1)))
        return out

    def _binary_keys(self, c: Any) -> bool | None:
        if self._binary is None:
            self._binary = binary_keys(c)
        return self._binary

    def _has_quote_lists(self, c: Any) -> bool:
        if not self._quote_lists:
            c.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (DICTIONARIES_TABLE,))
            self._quote_lists = bool(c.fetchall())
        return self._quote_lists


class TextsSQLiteSnapshotRecorder(_WritesTexts):
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


_KNOWN_MAX = 65_536
"""Addresses a writer remembers as stored (64 characters each); past that it starts over."""
_LEARNED = "_forge_learned"
"""The keyword under which a save's :class:`Learned` travels down to its transaction (the
recorders pass their keywords through to the insert)."""


@dataclass
class Learned:
    """What one transaction found out about the store: true once it commits."""

    tables: bool = False
    binary_keys: bool = True
    texts: set[str] = field(default_factory=set)


def learned_in(kwargs: dict[str, Any]) -> Learned:
    """The :class:`Learned` of the save in progress (a throwaway one if it has none)."""
    found = kwargs.get(_LEARNED)
    return found if isinstance(found, Learned) else Learned()


@dataclass
class StoreFacts:
    """What a writer knows its store holds already, so that a save does not ask again: the
    text table exists, and these texts are stored. Each save asked both (``CREATE TABLE IF
    NOT EXISTS`` and a ``SELECT``): about a tenth of an append's cost, for answers most of
    which were known (a system prompt is in every call of a session).

    Only a committed write counts. A transaction that rolled back (another writer appended
    first) stored nothing, not even a table it created. What a save finds out travels with
    that save (:class:`Learned`), never through shared state: a writer used from several
    threads must not take another save's texts for stored before that save commits. Texts
    are never deleted, so what a committed write stored stays true; texts another process
    stored are merely asked about.
    """

    tables_ready: bool = False
    binary_keys: bool = True
    """Whether the SQLite text table is keyed by the digests' bytes: known once
    ``tables_ready``, and read only then (PostgreSQL keys texts by their hex digests)."""
    stored: set[str] = field(default_factory=set)

    def inserting(
        self, insert: Callable[..., Sequence[int] | None], stored_events: Any, **kwargs: Any
    ) -> Sequence[int] | None:
        """``insert(stored_events, …)`` (one transaction), then what it found out, if it
        committed."""
        learned = Learned()
        ids = insert(stored_events, **{**kwargs, _LEARNED: learned})
        self.learn(learned)
        return ids

    def unknown(self, texts: Iterable[tuple[str, str]]) -> dict[str, str]:
        """Of ``texts`` (address, text), those no committed write has told this writer are
        stored: the texts a save must write (or, on SQLite, ask the store about). Until the
        text table is known ready, nothing is known stored, so a save with texts always
        reaches the code that creates the table."""
        return {a: t for a, t in texts if a not in self.stored}

    def learn(self, learned: Learned) -> None:
        """Call once the transaction that found ``learned`` out has committed."""
        if learned.tables and not self.tables_ready:
            # In this order: a save in another thread reads ``tables_ready`` first, and then
            # ``binary_keys`` only if it is set.
            self.binary_keys = learned.binary_keys
            self.tables_ready = True
        if len(self.stored) + len(learned.texts) > _KNOWN_MAX:
            self.stored.clear()
        self.stored |= learned.texts


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
        [(_key(a, binary), _body(t, dictionaries.get(a), texts)) for a, t in new.items()],
    )
    learned.texts |= set(texts)


def _select_rows(
    c: Any, chunk: Sequence[str], *, binary: bool, quote_lists: bool
) -> list[tuple[str, bytes, int, str | None]]:
    """Stored rows (address, body as bytes, compressed?, quote list as JSON or None); the
    quote lists of texts written before they were held in the bodies come from their table."""
    keys = _keys(chunk, binary)
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
            return [(_address(a), b, z, m) for a, b, z, m in c.fetchall()]
        c.execute(f"SELECT t.sha256, {body} FROM {TEXT_TABLE} t WHERE t.sha256 IN ({marks})", keys)
    except Exception:  # a damaged store
        return []
    return [(_address(a), b, z, None) for a, b, z in c.fetchall()]


def _by_kind(
    rows: Iterable[tuple[str, bytes, int, str | None]],
) -> tuple[list[tuple[str, bytes, int]], list[tuple[str, bytes, list[str]]]]:
    """The rows of texts stored on their own, and those packed against the answers they
    quote (address, packed text, quoted answers' addresses). A body whose quote list is
    damaged is in neither, and is then reported as missing or unreadable."""
    plain: list[tuple[str, bytes, int]] = []
    quoting: list[tuple[str, bytes, list[str]]] = []
    for address, body, compressed, members in rows:
        if members is not None:
            try:
                quoting.append((address, body, list(map(str, json.loads(members)))))
            except (ValueError, TypeError):  # a damaged list: the text is unreadable
                continue
        elif compressed and body[:1] == _QUOTING:
            split = quoting_body(body)
            if split is not None:
                quoting.append((address, split[1], split[0]))
        else:
            plain.append((address, body, compressed))
    return plain, quoting


def quoting_body(body: bytes) -> tuple[list[str], bytes] | None:
    """The quoted answers' addresses and the packed text of a body packed against them (see
    :func:`_body`); None if it is not one, or its quote list is cut short."""
    if body[:1] != _QUOTING or len(body) < 2:
        return None
    end = 2 + 32 * body[1]
    if len(body) <= end:
        return None
    return [body[i : i + 32].hex() for i in range(2, end, 32)], body[end:]


def _unquoted(
    quoting: Iterable[tuple[str, bytes, list[str]]], members: dict[str, str]
) -> dict[str, str]:
    """Prompts packed against the answers they quote; one whose answers are missing or which
    does not unpack is left out (reported as missing or unreadable)."""
    out: dict[str, str] = {}
    for address, body, quoted in quoting:
        if all(m in members for m in quoted):
            try:
                out[address] = unpack_with(body, [members[m] for m in quoted])
            except (zlib.error, UnicodeDecodeError):
                continue
    return out


def _absent(c: Any, texts: dict[str, str], binary: bool) -> dict[str, str]:
    """The texts not stored yet: packing one costs more than looking it up (a system prompt is
    in every event of a session)."""
    present: set[str] = set()
    addresses = list(texts)
    for i in range(0, len(addresses), 500):
        keys = _keys(addresses[i : i + 500], binary)
        marks = ",".join("?" * len(keys))
        c.execute(f"SELECT sha256 FROM {TEXT_TABLE} WHERE sha256 IN ({marks})", keys)
        present.update(_address(row[0]) for row in c.fetchall())
    return {a: t for a, t in texts.items() if a not in present}


def _body(text: str, quoted: list[str] | None, texts: dict[str, str]) -> str | bytes:
    """A text's stored body: packed against the answers it quotes, or on its own.

    Packed, it begins with :data:`_QUOTING`, the number of quoted answers (one byte) and
    their addresses (32 bytes each), in dictionary order. These lists used to be rows of a
    table of their own (``forge_text_quotes``, still read): a 64-character key and a JSON
    list of 64-character addresses per text, about a tenth of a store's file.
    """
    if quoted:
        quoted = quoted[:255]
        members = b"".join(bytes.fromhex(a) for a in quoted)
        packed = pack_with(text, [texts[m] for m in quoted])
        return _QUOTING + bytes([len(quoted)]) + members + packed
    return pack_text(text)


def _readable(rows: Iterable[tuple[str, bytes, int]]) -> dict[str, str]:
    """Stored texts by address, each read as bytes (a damaged TEXT body is not valid UTF-8,
    which the driver would refuse to fetch); one that cannot be read is left out, and is then
    reported as missing or unreadable."""
    out: dict[str, str] = {}
    for address, body, compressed in rows:
        try:
            out[address] = unpack_text(body) if compressed else bytes(body).decode("utf-8")
        except (zlib.error, UnicodeDecodeError):
            continue
    return out


_MAX_DEPTH = 4
_QUOTING = b"\x01"
"""The first byte of a body packed against the answers it quotes (a compressed body begins
with zlib's 0x78, and a plain one is TEXT)."""
DICTIONARIES_TABLE = "forge_text_quotes"
"""Texts written before their quote lists were held in their bodies: (address, the quoted
answers' addresses as a JSON list, in dictionary order). No longer written."""
_SQLITE_DDL = f"CREATE TABLE IF NOT EXISTS {TEXT_TABLE} (sha256 BLOB PRIMARY KEY, body NOT NULL)"
"""A rowid table: a text is a few KB, and SQLite packs such rows into overflow pages far better
in a rowid table than in a WITHOUT ROWID one (which held 466 KB of texts in 1.2 MB of pages).
The key is the digest's 32 bytes: the key is stored twice (in the row and in the primary key's
index), and in hexadecimal the two copies were a tenth of a store's file. The body has no
declared type: a compressed body is a BLOB, a plain one TEXT."""


def binary_keys(c: Any) -> bool | None:
    """Whether the store's text table is keyed by the digests' 32 bytes; False for a table keyed
    by their 64 hexadecimal characters (stores written before, which keep that key, and every
    PostgreSQL store); None if the store has no text table."""
    c.execute(f"SELECT upper(type) FROM pragma_table_info('{TEXT_TABLE}') WHERE name = 'sha256'")
    rows = c.fetchall()
    return None if not rows else rows[0][0] == "BLOB"


def _key(address: str, binary: bool) -> str | bytes:
    """A text's key in a store keyed as ``binary`` says (an address is 64 hex digits)."""
    return bytes.fromhex(address) if binary else address


def _keys(addresses: Sequence[str], binary: bool) -> list[str | bytes]:
    """The keys of ``addresses`` (one that is not a digest's hex cannot be stored: left out)."""
    return [_key(a, binary) for a in addresses if _ADDRESS.fullmatch(a)]


def _address(key: str | bytes) -> str:
    """A stored key as an address (64 lowercase hex digits)."""
    return key.hex() if isinstance(key, bytes) else key


_ADDRESS = re.compile("[0-9a-f]{64}")
