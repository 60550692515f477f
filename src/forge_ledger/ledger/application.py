"""The ledger: an ``eventsourcing`` application over the chosen store.

:class:`Ledger` is the one entry point the rest of forge-ledger uses to save and load
sessions, read their events (decoded, or raw for verification), travel in time and follow
the global notification log (projections). It hides the eventsourcing details: store
selection by URL, JSON transcoding of the session state for snapshots, turning a lost
optimistic-concurrency race into :class:`~forge_ledger.errors.ConcurrencyConflictError`.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import weakref
import zlib
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any, cast
from uuid import UUID

from eventsourcing.application import Application, ProcessingEvent, Repository
from eventsourcing.domain import Snapshot
from eventsourcing.persistence import (
    EventStore,
    IntegrityError,
    JSONTranscoder,
    Mapper,
    MapperDeserialisationError,
    Recording,
    StoredEvent,
    Transcoding,
)
from eventsourcing.persistence import (
    PersistenceError as _PersistenceError,
)
from eventsourcing.sqlite import SQLiteFactory
from eventsourcing.utils import resolve_topic
from pydantic_core import PydanticSerializationError

from .._collector import fewer_collections
from ..domain import events as ev
from ..domain.aggregate import Deliberation, topic_for
from ..domain.blocks import BLOCK_SINK, unreadable_block
from ..domain.json_fields import JsonFields, fields_json
from ..domain.state import ContributionState, SessionState
from ..domain.text import clip
from ..domain.texts import missing_text, text_address
from ..domain.values import ChatMessage
from ..errors import (
    ArgumentError,
    ConcurrencyConflictError,
    ForgeLedgerError,
    SessionDamagedError,
    SessionNotFoundError,
    StoreError,
    StoreUnavailableError,
    UsageError,
)
from .compression import NewerFormatError, unpack
from .damage import first_damage
from .lease import SessionLease
from .postgres import EventWaiter, postgres_guard
from .sqlite_writes import is_busy
from .store import (
    SqliteAccess,
    StoreLocation,
    check_sqlite_file,
    lock_timeout,
    mark_ledger,
    resolve_store,
    sqlite_uri,
)
from .texts import (
    Lookup,
    StoredEventWithTexts,
    TextMapper,
    TextsSQLiteRecorder,
    refer_to_texts,
    text_reference,
    with_texts,
)

__all__ = ["Ledger", "RecordedEvent", "SessionSummary", "store_failure"]

CREATED_TOPICS = tuple(topic_for(t) for t in ev.FIRST_EVENT_TYPES)
_TOPIC_PREFIX = "forge_ledger:"


_BATCH = 64
"""Answers read from the store at a time for a state restored from a snapshot."""


class StoredTexts:
    """The store's texts as a restored state's fallback :class:`~forge_ledger.domain.texts.
    TextSource`.

    A state restored from a snapshot holds its answers by address only; most loads (a
    resume, a time travel) read few or none of them. The first answer asked for is read
    with the next ones the state refers to (in recorded order), up to :data:`_BATCH` per
    query: consumers that read every answer (an export, an audit) make one query per batch
    rather than one per answer, and one that reads a single answer reads a little more.
    """

    def __init__(self, lookup: Lookup, state: SessionState) -> None:
        self._lookup = lookup
        # Weakly: the state holds this (through its text pool), and a strong reference back
        # made every restored state a reference cycle that only the cyclic collector could
        # free. A long run restores many large states; each stayed in memory until a full
        # collection, and each full collection walked all of them, a cost that grew with the
        # session. A copy of the state shares its pool: if the restored state is gone, an
        # answer is still read, alone.
        self._state = weakref.ref(state)
        self._order: dict[str, int] | None = None
        self._addresses: list[str] = []
        self._read: dict[str, str] = {}

    def text(self, address: str) -> str:
        found = self._read.pop(address, None)
        if found is not None:
            return found
        state = self._state()
        ahead = self._read_ahead(address, state) if state is not None else []
        self._read.update(self._lookup([address, *ahead]))
        found = self._read.pop(address, None)
        if found is None:
            raise missing_text(address)
        return found

    def _read_ahead(self, address: str, state: SessionState) -> list[str]:
        """The answers recorded after ``address`` that the state has not read yet: readers ask
        for answers in the order they were recorded, so one query fetches a batch of them.
        Only answers of contributions decoded already are read ahead (reading ahead must not
        decode the rest of a restored state); an address not seen yet means more were."""
        if self._order is None or address not in self._order:
            self._addresses = state.answer_addresses(loaded=True)
            self._order = {a: i for i, a in enumerate(self._addresses)}
        start = self._order.get(address)
        if start is None:
            return []
        pool = state.text_pool
        following = self._addresses[start + 1 : start + 4 * _BATCH]
        return [a for a in following if a not in pool and a not in self._read][: _BATCH - 1]


class _BlockTexts:
    """The :class:`~forge_ledger.domain.blocks.BlockSink` of a snapshot being encoded: each
    block becomes one stored text (its long texts referred to, as the state's are), added to
    the texts the snapshot recorder writes with the snapshot.

    The state's lists remember the addresses of the blocks written, so that the next snapshot
    does not write them again; if this snapshot is not stored, :meth:`forget` makes them
    forget (``_App._take_snapshots``), or a later snapshot would name texts never stored."""

    def __init__(self, texts: dict[str, str]) -> None:
        self._texts = texts
        self._forgets: list[Callable[[], None]] = []

    def store(self, document: str, forget: Callable[[], None]) -> str:
        text = refer_to_texts(document, self._texts)
        address = text_address(text)
        self._texts[address] = text
        self._forgets.append(forget)
        return address

    def refer(self, text: str) -> Any:
        """A parsed value's text (a critique's JSON, the text its event refers to), by
        reference if it is long."""
        return text_reference(text, self._texts)

    def forget(self) -> None:
        for forget in self._forgets:
            forget()
        self._forgets = []


class _SessionStateAsJson(Transcoding):
    """Lets snapshots carry the pydantic session state through the JSON transcoder.

    The state travels as one JSON *string* (pydantic's Rust serializer and validator) rather
    than as nested dicts: eventsourcing's transcoder then sees a single value instead of
    calling its Python object hook on every dict of a large state, which made restoring a
    snapshot several times slower than folding the events it replaces.

    The state holds its answers by address; a restored one reads them from the store's texts
    (``lookup``, set by the ledger). Its other long texts (the reasoning of every parsed
    opinion and vote, four fifths of a snapshot) are stored by reference too, as in the
    events they came from, which already stored them: a snapshot then holds the structure,
    and a restored state reads those texts back in one query (``reads``, set by the ledger)
    before it is parsed. A snapshot written before, with its texts inline, still loads.
    """

    type = SessionState
    name = "forge_session_state_json"
    lookup: Lookup | None = None
    reads: Lookup | None = None

    def __init__(self) -> None:
        self._encoded = threading.local()

    def encode(self, obj: SessionState) -> str:
        texts: dict[str, str] = {}
        sink = _BlockTexts(texts)
        document = refer_to_texts(
            obj.model_dump_json(exclude_defaults=True, context={BLOCK_SINK: sink}), texts
        )
        self._encoded.texts = texts
        self._encoded.blocks = sink
        return document

    def stored(self, *, ok: bool) -> None:
        """The state last encoded on this thread was stored (``ok``) or not: if not, its
        lists forget the blocks they were told were written."""
        sink: _BlockTexts | None = getattr(self._encoded, "blocks", None)
        self._encoded.blocks = None
        if sink is not None and not ok:
            sink.forget()

    def encoded_texts(self) -> dict[str, str]:
        """The texts the last state encoded on this thread refers to (once: the mapper that
        asked for the encoding adds them to the stored snapshot)."""
        texts: dict[str, str] = getattr(self._encoded, "texts", {})
        self._encoded.texts = {}
        return texts

    def decode(self, data: str) -> SessionState:
        reads = self.reads or _no_texts
        document = with_texts(data.encode("utf-8"), reads)
        lookup = self.lookup
        blocks = None if lookup is None else partial(_stored_block, lookup, reads)
        state = SessionState.load(document, blocks=blocks)
        if lookup is not None:
            state.text_pool.fallback = StoredTexts(lookup, state)
        return state


def _stored_block(lookup: Lookup, reads: Lookup, address: str) -> bytes:
    """The JSON of a block of a restored state (:class:`~forge_ledger.domain.blocks.
    BlockList`), its long texts read back; a block altered in the store is refused."""
    found = lookup([address]).get(address)
    if found is None or text_address(found) != address:
        raise unreadable_block(address, "that the store does not hold intact")
    return with_texts(found.encode("utf-8"), reads)


def _no_texts(_: Sequence[str]) -> dict[str, str]:
    """The texts of a store that cannot be read: a reference then reads as missing."""
    return {}


class _SnapshotTextsMapper(TextMapper):
    """Adds to a stored snapshot the texts its state refers to, for the snapshot recorder to
    write with it (``TextsSQLiteSnapshotRecorder``, ``TextsPostgresSnapshotRecorder``).

    A snapshot refers to answers and reasoning by address, and an answer folded from an
    event may be stored nowhere else (a short one is inline in its event, and so is every
    text of a store written before texts were stored apart). Texts the state read from the
    store are in the store already; the recorder writes only those that are not."""

    states: _SessionStateAsJson | None = None

    def to_stored_event(self, domain_event: Any) -> StoredEvent:
        stored = super().to_stored_event(domain_event)
        state = getattr(domain_event, "state", None)
        held = (
            state.get("state")
            if isinstance(domain_event, Snapshot) and isinstance(state, dict)
            else None
        )
        if not isinstance(held, SessionState):
            return stored
        texts = self.states.encoded_texts() if self.states is not None else {}
        texts.update(held.text_pool.held(held.answer_addresses(loaded=True)))
        if not texts:
            return stored
        return StoredEventWithTexts.of(stored, texts)

    def to_domain_event(self, stored_event: StoredEvent) -> Any:
        """A text a snapshot refers to that is missing from the store, or a store failure
        while reading it, is reported as such (one line), not as eventsourcing's failure to
        deserialise the snapshot."""
        try:
            return super().to_domain_event(stored_event)
        except MapperDeserialisationError as e:
            cause = e.__cause__
            failure = cause if isinstance(cause, StoreError) else None
            if cause is not None and failure is None:
                failure = store_failure(cause)
            if failure is not None:
                raise failure from None
            raise


def _project(aggregate: Any, domain_events: Iterable[Any]) -> Any:
    """Fold events into the aggregate, as eventsourcing's ``project_aggregate`` does.

    Its version asserts ``isinstance(event, CanMutateProtocol)`` on every event: a runtime
    protocol check that cost more than decoding the event itself (about 60 µs each, most of
    a time travel over a thousand events). Every event here is a ``Deliberation.Event``.
    """
    for domain_event in domain_events:
        aggregate = domain_event.mutate(aggregate)
    return aggregate


class _WindowedEventStore(EventStore[UUID]):
    """eventsourcing's event store, decoding a read through :meth:`TextMapper.to_domain_events`
    (its own maps events one by one, so each event's texts cost a query)."""

    prompts: bool = True
    """Whether the prompts' texts are read (see :class:`_StateEventStore`)."""

    def get(
        self,
        originator_id: UUID,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Iterator[Any]:
        stored = self.recorder.select_events(
            originator_id=originator_id, gt=gt, lte=lte, desc=desc, limit=limit
        )
        return cast(TextMapper, self.mapper).to_domain_events(stored, prompts=self.prompts)


class _StateEventStore(_WindowedEventStore):
    """The events an aggregate is rebuilt from, without their prompts' texts (see
    :meth:`TextMapper.to_domain_events`): the state refers to a prompt by its event."""

    prompts = False


class _App(Application[UUID]):
    name = "ForgeLedger"
    SNAPSHOT_RECORDER_TOPIC = "FORGE_SNAPSHOT_RECORDER_TOPIC"
    state_transcoding: _SessionStateAsJson

    def register_transcodings(self, transcoder: JSONTranscoder) -> None:
        super().register_transcodings(transcoder)
        self.state_transcoding = _SessionStateAsJson()
        transcoder.register(self.state_transcoding)

    def construct_mapper(self) -> Mapper[UUID]:
        """Texts by reference (see :mod:`forge_ledger.ledger.texts`); on SQLite, states
        compressed (see :mod:`forge_ledger.ledger.compression`). PostgreSQL keeps them plain
        JSON, queryable in place, and compresses long values itself (TOAST)."""
        compress = isinstance(self.factory, SQLiteFactory)
        mapper = _SnapshotTextsMapper(transcoder=self.construct_transcoder(), compress=compress)
        mapper.states = self.state_transcoding
        return mapper

    def construct_event_store(self) -> EventStore[UUID]:
        """An event store whose reads fetch texts a window of events at a time."""
        return _WindowedEventStore(mapper=self.mapper, recorder=self.recorder)

    def construct_repository(self) -> Repository[UUID]:
        """eventsourcing's repository, rebuilding sessions from :class:`_StateEventStore`."""
        repository = super().construct_repository()
        repository.event_store = _StateEventStore(mapper=self.mapper, recorder=self.recorder)
        return repository

    def construct_snapshot_store(self) -> EventStore[UUID]:
        """The snapshot table of eventsourcing, through a recorder that also writes the texts a
        snapshot refers to (``FORGE_SNAPSHOT_RECORDER_TOPIC``, set by the ledger)."""
        store = super().construct_snapshot_store()
        topic = self.env.get(self.SNAPSHOT_RECORDER_TOPIC)
        if topic:
            plain: Any = store.recorder
            recorder_class: Any = resolve_topic(topic)
            store.recorder = recorder_class(
                datastore=plain.datastore, events_table_name=plain.events_table_name
            )
        return store

    def save(self, *objs: Any, **kwargs: Any) -> list[Recording[UUID]]:
        """eventsourcing's save, for the sessions it is given (only ``Ledger.save`` calls
        it, with :class:`Deliberation` aggregates). Its own collection asks of every object
        whether it is an event or has events, through runtime-checkable protocols: about 5% of
        an append's cost, to learn what the ledger already knows."""
        processing_event: ProcessingEvent[UUID] = ProcessingEvent()
        for aggregate in cast("tuple[Deliberation, ...]", objs):
            processing_event.events.extend(aggregate.collect_events())
            processing_event.aggregates[aggregate.id] = aggregate
        processing_event.saved_kwargs.update(kwargs)
        recordings = self._record(processing_event)
        self._take_snapshots(processing_event)
        self._notify(recordings)
        return recordings

    def _take_snapshots(self, processing_event: ProcessingEvent[UUID]) -> None:
        """Snapshot a session when a save reaches a scheduled position (:func:`snapshot_due`),
        from the aggregate in hand, at the head of the save.

        A snapshot writes only the blocks of the state that changed since the last one (see
        :func:`snapshot_due`), so taking one every ``interval`` events costs about as much as
        the events it follows, not the whole state.

        The orchestrator saves several events at a time, so a scheduled position is usually
        inside a save. eventsourcing's own way then reloads the aggregate from the store up to
        that position (the previous snapshot decoded, the events after it folded) to snapshot
        it there: a cost that grew with the session on every snapshot of a live run. The
        snapshot is taken at the save's head instead, from the state already in memory: a
        fold from it is still at most ``interval`` events plus one save long.
        """
        if self.snapshots is None or not self.snapshotting_intervals:
            return
        taken: set[UUID] = set()
        for event in processing_event.events:
            aggregate = processing_event.aggregates.get(event.originator_id)
            interval = self.snapshotting_intervals.get(type(aggregate)) if aggregate else None
            if aggregate is None or not interval or aggregate.id in taken:
                continue
            if snapshot_due(event.originator_version, interval):
                taken.add(aggregate.id)
                snapshot_class: Any = getattr(type(aggregate), "Snapshot", self.snapshot_class)
                stored = False
                try:
                    self.snapshots.put([snapshot_class.take(aggregate)])
                    stored = True
                finally:
                    self.state_transcoding.stored(ok=stored)


def snapshot_due(version: int, interval: int) -> bool:
    """Whether position ``version`` gets a snapshot (see ``_App._take_snapshots``): every
    ``interval`` events, all of them kept.

    Snapshots were once kept on a logarithmic ladder (the newest, and the first of each
    doubling), because each held the whole state and a snapshot per interval made their
    storage grow with the square of the session. Time travel then folded up to half the
    distance back to the previous rung: 80 ms at the median of a 10,000-event session. A
    snapshot now names the blocks of rounds and contributions it shares with the ones before
    (:class:`~forge_ledger.domain.blocks.BlockList`) and holds only what changed since, so
    each costs about as much as the events it follows, and keeping all of them bounds every
    fold to ``interval`` events.
    """
    return version > 0 and version % interval == 0


@dataclass(frozen=True)
class RecordedEvent:
    """One stored event as users see it (``log``) and projections fold it.

    The fields are declared in the order its JSON form (:meth:`as_json`) lists them.
    """

    session_id: str
    position: int
    type: str
    timestamp: datetime
    hash: str
    prev_hash: str
    data: dict[str, Any]
    notification_id: int | None = None

    def payload(self) -> ev.Payload:
        return ev.payload_class(self.type).model_validate(self.data)

    def as_json(self, *, exclude: Collection[str] = ()) -> dict[str, Any]:
        """The event as JSON values, field by field (the time in ISO 8601,
        ``notification_id`` only when known), without the fields in ``exclude``: ``log
        --json`` leaves out the session id and the notification id."""
        unknown = ("notification_id",) if self.notification_id is None else ()
        return fields_json(self, exclude={*exclude, *unknown})


@dataclass(frozen=True)
class SessionSummary(JsonFields):
    """One session as ``sessions`` lists it."""

    id: str
    slug: str
    title: str
    status: str
    iteration: int
    events: int
    created: datetime
    updated: datetime
    parent_id: str | None = None
    damaged: str | None = None
    """Where and how the session is damaged (its other fields then say what was read before
    it); only a damaged session's JSON has the key."""

    def as_json(self) -> dict[str, Any]:
        doc = super().as_json()
        if self.damaged is None:
            del doc["damaged"]
        return doc


class Ledger:
    """Opens the store named by ``store`` (path or ``postgresql://`` URL; default path).

    ``create=False`` (commands that read or continue a store) creates nothing: a missing or
    empty SQLite file, or a PostgreSQL schema without the ledger's tables, is refused. Such
    a store that we cannot write (a read-only file or folder) is opened read-only
    (``read_only``); writing to it then fails with one line. ``read_only=True`` opens a
    SQLite store read-only whatever its permissions (a copy's source is never written).
    ``snapshot_interval`` takes a snapshot every N events per session (0 disables).
    """

    def __init__(
        self,
        store: str | StoreLocation | None = None,
        *,
        create: bool = True,
        snapshot_interval: int = 100,
        read_only: bool = False,
    ) -> None:
        self.location = store if isinstance(store, StoreLocation) else resolve_store(store)
        self.read_only = read_only
        self._closed = False
        self._unmarked = False
        env = self.location.eventsourcing_env()
        if self.location.kind == "sqlite":
            assert self.location.path is not None
            found = check_sqlite_file(self.location.path, create=create and not read_only)
            access = SqliteAccess.READ_ONLY if read_only else found.access
            self.read_only = access == SqliteAccess.READ_ONLY
            self._unmarked = not found.marked
            env["SQLITE_DBNAME"] = sqlite_uri(self.location.path, access)
            env["CREATE_TABLE"] = "y" if access == SqliteAccess.CREATE else "n"
            if not found.has_snapshots:
                snapshot_interval = 0
            self.app = self._open(env, snapshot_interval)
        else:
            with postgres_guard(
                self.location, create=create, snapshots=snapshot_interval > 0
            ) as pg:
                env["CREATE_TABLE"] = "y" if pg.create_tables else "n"
                if not pg.has_snapshots:
                    snapshot_interval = 0
                self.app = self._open(env, snapshot_interval)
        self.snapshot_interval = snapshot_interval
        if snapshot_interval > 0:
            self.app.snapshotting_intervals = {Deliberation: snapshot_interval}  # type: ignore[misc]

    def _open(self, env: dict[str, str], snapshot_interval: int) -> _App:
        if snapshot_interval > 0:
            env["IS_SNAPSHOTTING_ENABLED"] = "y"
        module = "texts" if self.location.kind == "sqlite" else "texts_postgres"
        db = "SQLite" if self.location.kind == "sqlite" else "Postgres"
        env["APPLICATION_RECORDER_TOPIC"] = f"{__package__}.{module}:Texts{db}Recorder"
        env[_App.SNAPSHOT_RECORDER_TOPIC] = f"{__package__}.{module}:Texts{db}SnapshotRecorder"
        try:
            app = _App(env=env)
            mapper = cast(TextMapper, app.mapper)
            mapper.lookup = self.intact_texts
            app.state_transcoding.lookup = self.intact_texts
            app.state_transcoding.reads = mapper.cached_lookup
            return app
        except ImportError:
            raise StoreError(
                "PostgreSQL support is not installed",
                hint="pip install 'forge-ledger[postgres]'",
            ) from None
        except _PersistenceError as e:
            if is_busy(e):  # creating the tables waited for another writer's lock
                raise cast(StoreError, store_failure(e)) from None
            raise StoreError(
                f"cannot open the store {self.location.display}: {_first_line(e)}",
                hint="check --store / FORGE_LEDGER_STORE and that the database is running",
            ) from None

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(Exception):
            self.app.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ writing

    def lease(self, session_id: UUID) -> SessionLease:
        """The one-writer claim on a session (see :mod:`forge_ledger.ledger.lease`); use it as
        a context manager around everything that may call a model."""
        return SessionLease(self.location, session_id)

    def _require_writable(self) -> None:
        """Refuse a write to a store opened read-only, before anything is written."""
        if self.read_only:
            raise StoreError(
                f"{self.location.display} is read-only; nothing was written",
                hint="make the file and its folder writable, or work on a writable copy",
            )

    def save(self, *aggregates: Deliberation) -> None:
        """Append the pending events of ``aggregates`` atomically (one transaction)."""
        self._require_writable()
        try:
            self.app.save(*aggregates)
        except IntegrityError:
            ids = ", ".join(str(a.id) for a in aggregates)
            raise ConcurrencyConflictError(
                f"another writer appended to session {ids} first; nothing of this change was "
                "stored",
                hint="reload the session and retry the command",
            ) from None
        except _PersistenceError as e:
            if is_busy(e):
                raise self._busy(aggregates) from None
            raise StoreError(f"cannot write to {self.location.display}: {_first_line(e)}") from None
        if self._unmarked and self.location.path is not None:
            mark_ledger(self.location.path)  # a ledger made before the marker: its next write
            self._unmarked = False

    def _busy(self, aggregates: Sequence[Deliberation]) -> StoreUnavailableError:
        """The write lock stayed with another process past the lock wait: nothing of this
        save was stored; the session goes on from what was (or, if it was not recorded at
        all, the command is simply run again)."""
        recorded = [a.id for a in aggregates if self.app.recorder.select_events(a.id, limit=1)]
        hint = (
            f"try again later: forge-ledger resume {str(recorded[0])[:8]}" if recorded
            else "nothing was recorded; run the command again later"
        )
        return StoreUnavailableError(
            f"{self.location.display} is busy: another process held its write lock for "
            f"{lock_timeout()} s; nothing of this change was stored",
            hint=f"{hint} (FORGE_LEDGER_LOCK_TIMEOUT sets the wait)",
        )

    def event_waiter(self) -> EventWaiter | None:
        """On PostgreSQL, a wait that wakes when another process commits events (LISTEN/
        NOTIFY); None on SQLite, which has no such signal (a follower polls)."""
        if self.location.kind != "postgres":
            return None
        return EventWaiter(self.location)

    # ------------------------------------------------------------------ reading

    def get(self, session_id: str | UUID, *, version: int | None = None) -> Deliberation:
        sid = self.resolve(session_id) if isinstance(session_id, str) else session_id
        try:
            with fewer_collections():  # a load may fold thousands of events into a large state
                agg: Any = self.app.repository.get(sid, version=version, projector_func=_project)
        except Exception as e:  # AggregateNotFoundError and persistence errors
            if type(e).__name__ == "AggregateNotFoundError":
                raise SessionNotFoundError(f"no session {sid}") from None
            damage = self._damage_behind(sid, e, version)
            if damage is not None:
                raise damage from None
            raise
        assert isinstance(agg, Deliberation)
        return agg

    def _damage_behind(
        self, session_id: UUID, failure: Exception | None, version: int | None
    ) -> SessionDamagedError | None:
        """What a failed fold of the session met: its first damaged event (see
        :mod:`.damage`), or None when the failure is not the session's damage."""
        if isinstance(failure, NewerFormatError):  # not damage: a newer version's row
            return None
        stored = self.app.recorder.select_events(session_id, lte=version)
        found = first_damage(stored, self.app.mapper.transcoder.decode, self.texts)
        if found is None and isinstance(failure, SessionDamagedError):
            return failure
        return found

    def damage(self, session_id: UUID) -> SessionDamagedError | None:
        """The session's first damaged event, or None if its events read (one pass over its
        stored rows, as a fold from its first event would make)."""
        stored = self.app.recorder.select_events(session_id)
        return first_damage(stored, self.app.mapper.transcoder.decode, self.texts)

    def state(
        self,
        session_id: str | UUID,
        *,
        at_event: int | None = None,
        at_iteration: int | None = None,
        at_time: datetime | None = None,
    ) -> SessionState:
        """The session's state now, or as of an event position, an iteration or a time."""
        sid = self.resolve(session_id) if isinstance(session_id, str) else session_id
        version = self.position_as_of(
            sid, at_event=at_event, at_iteration=at_iteration, at_time=at_time
        )
        origin = None if version is None else self.inherited_from(sid, version)
        if origin is not None:
            return self._inherited_state(sid, origin, version)
        return self.get(sid, version=version).state

    def _inherited_state(self, sid: UUID, origin: ev.ForkOrigin, position: int | None) -> (
        SessionState
    ):
        """A fork's state at a position before its fork point: its parent's there, named as
        the fork (the history is shared; the session asked about is the fork)."""
        try:
            state = self.state(UUID(origin.parent_id), at_event=position)
        except SessionNotFoundError:
            raise SessionNotFoundError(
                f"event {position} of session {sid} is its parent {origin.parent_id}'s, "
                f"which {self.location.display} does not hold",
                hint="read it in the store that holds the parent",
            ) from None
        return state.model_copy(update={"id": str(sid), "fork_origin": origin})

    def inherited_from(self, session_id: UUID, position: int) -> ev.ForkOrigin | None:
        """Where a fork's position ``position`` was recorded: the fork's origin when its
        parent holds it, None when the session records that position itself.

        A fork's positions continue its parent's (see ``Deliberation.fork``): its first event
        takes the fork point's position, and the positions before it are its parent's, the
        same events the fork inherited. Only the first stored event is read (as stored: its
        texts stay references).
        """
        rows = self.app.recorder.select_events(session_id, limit=1)
        if not rows:
            raise SessionNotFoundError(f"no session {session_id}")
        first = rows[0]
        if position >= int(first.originator_version):
            return None
        stored = self.app.mapper.transcoder.decode(unpack(first.state))
        return ev.ForkOrigin.model_validate(stored["data"]["origin"])

    def position_as_of(
        self,
        session_id: UUID,
        *,
        at_event: int | None = None,
        at_iteration: int | None = None,
        at_time: datetime | None = None,
    ) -> int | None:
        """The position of a past point: event ``at_event``, the end of iteration
        ``at_iteration`` or the last event at ``at_time`` (``None``: the head).

        The one check of these arguments (at most one, each in range): every reader of a
        past point (``show``, ``spec``, ``fork``…) comes through here. Errors name the
        parameters (:class:`~forge_ledger.errors.ArgumentError`).
        """
        given = tuple(
            name
            for name, value in (
                ("at_event", at_event),
                ("at_iteration", at_iteration),
                ("at_time", at_time),
            )
            if value is not None
        )
        if len(given) > 1:
            raise ArgumentError(
                f"{' and '.join(given)} conflict",
                parameters=("at_event", "at_iteration", "at_time"),
                hint="give at most one of at_event, at_iteration, at_time",
            )
        if at_event is not None:
            head = self.head_version(session_id)
            if not 1 <= at_event <= head:
                raise ArgumentError(
                    f"at_event {at_event} is out of range",
                    parameters=("at_event",),
                    hint=f"session has events 1..{head}",
                )
            return at_event
        if at_iteration is not None:
            return self.position_of_iteration(session_id, at_iteration)
        if at_time is not None:
            return self.position_at_time(session_id, at_time)
        return None

    def head_version(self, session_id: UUID) -> int:
        rows = self.app.recorder.select_events(session_id, desc=True, limit=1)
        if not rows:
            raise SessionNotFoundError(f"no session {session_id}")
        return int(rows[0].originator_version)

    def position_of_iteration(self, session_id: UUID, iteration: int) -> int:
        """The last position of iteration ``iteration``: just before iteration K+1 starts.

        A fork's first event holds the rounds it inherited, each with the position its
        ``RoundStarted`` has in the parent, which is the fork's too: an inherited iteration
        ends where its parent's did.
        """
        if iteration < 1:
            raise UsageError("iterations are numbered from 1")
        last = 0
        seen = False
        highest = 0
        for e in self.events(session_id):
            for it, at in _iteration_starts(e):
                highest = max(highest, it)
                if it > iteration and seen:
                    return at - 1
                if it == iteration:
                    seen = True
            last = e.position
        if not seen:
            raise UsageError(
                f"session has no iteration {iteration}",
                hint=(
                    f"it has iterations 1 to {highest}" if highest > 1
                    else "it has iteration 1 only" if highest == 1
                    else "it has no iteration yet"
                ),
            )
        return last

    def position_at_time(self, session_id: UUID, at: datetime) -> int:
        if at.tzinfo is None:
            raise ArgumentError(
                f"at_time {at.isoformat()!r} needs a timezone",
                parameters=("at_time",),
                hint="add one, e.g. 2026-01-09T10:30:00Z",
            )
        last = 0
        for e in self.events(session_id):
            if e.timestamp > at:
                break
            last = e.position
        if last == 0:
            # before a fork was made, its history was its parent's, up to the fork point
            origin = self.inherited_from(session_id, 1)
            if origin is not None:
                parent = self.position_at_time(UUID(origin.parent_id), at)
                return min(parent, origin.parent_position - 1)
            raise UsageError(f"the session had not started at {at.isoformat()}")
        return last

    def events(
        self, session_id: str | UUID, *, after: int = 0, upto: int | None = None
    ) -> Iterator[RecordedEvent]:
        """Decoded events (upcast to the current schema) in position order.

        Read as a fold reads them: a gap in the positions, an event whose link does not
        follow the one before, or a row that cannot be decoded raises
        :class:`SessionDamagedError` at the first damaged position."""
        sid = self.resolve(session_id) if isinstance(session_id, str) else session_id
        stream = iter(self.app.events.get(sid, gt=after or None, lte=upto))
        # where the first comes is not checked: a fork's first event is at its fork point
        expected: int | None = None
        previous: str | None = None
        while True:
            try:
                recorded = _recorded(next(stream))
            except StopIteration:
                return
            except Exception as e:
                damage = self._damage_behind(sid, e, upto)
                if damage is not None:
                    raise damage from None
                raise
            if expected not in (None, recorded.position) or previous not in (
                None, recorded.prev_hash
            ):
                raise self._damage_behind(sid, None, upto) or SessionDamagedError(
                    sid, recorded.position, "its events do not follow one another"
                )
            expected, previous = recorded.position + 1, recorded.hash
            yield recorded

    def recorded_upto(self, session_id: UUID, position: int) -> tuple[UUID, list[RecordedEvent]]:
        """The session that recorded ``position`` and its events up to it: ``session_id``'s
        own, or, for a position a fork inherited, its parent's (or an older ancestor's)."""
        origin = self.inherited_from(session_id, position)
        while origin is not None:
            session_id = UUID(origin.parent_id)
            origin = self.inherited_from(session_id, position)
        return session_id, list(self.events(session_id, upto=position))

    def prompt(self, session_id: str | UUID, contribution: ContributionState) -> list[ChatMessage]:
        """The exact prompt of a recorded answer, read from the event that recorded it.

        The session state refers to a prompt by its event's position and its hash (see
        :class:`~forge_ledger.domain.state.ContributionState`); this loads the text.
        """
        pos = contribution.position
        sid = self.resolve(session_id) if isinstance(session_id, str) else session_id
        origin = self.inherited_from(sid, pos)
        if origin is not None:  # an answer a fork inherited: its parent recorded it
            return self.prompt(UUID(origin.parent_id), contribution)
        for e in self.events(sid, after=pos - 1, upto=pos):
            payload = e.payload()
            if (
                isinstance(payload, ev.ContributionRecorded)
                and payload.prompt_hash == contribution.prompt_hash
            ):
                return list(payload.messages)
        raise StoreError(
            f"session {session_id}: no recorded prompt {contribution.prompt_hash[:12]} at "
            f"event {pos}",
            hint="run 'forge-ledger verify' on the session",
        )

    def texts(self, addresses: Sequence[str]) -> dict[str, str]:
        """The stored texts at these addresses (address → text); missing ones are absent.

        A session state restored from a snapshot reads its answers through here when asked,
        and may be asked after this ledger is closed (a command prints what it loaded once
        the store is closed); the texts are then read through a short-lived reopening.
        """
        if self._closed:
            with Ledger(self.location, create=False, snapshot_interval=0) as reopened:
                return reopened.texts(addresses)
        recorder = cast(TextsSQLiteRecorder, self.app.recorder)  # or TextsPostgresRecorder
        return recorder.select_texts(addresses)

    def intact_texts(self, addresses: Sequence[str]) -> dict[str, str]:
        """:meth:`texts`, leaving out a text that does not hash to its address (altered in
        the store): what sessions are read with, so an altered text fails the read as a
        missing one does (and the session reads as damaged there) instead of being shown as
        recorded. ``verify`` reads :meth:`texts` itself, to say which texts were altered."""
        return {a: t for a, t in self.texts(addresses).items() if text_address(t) == a}

    def raw_events(self, session_id: UUID) -> Iterator[tuple[int, str, dict[str, Any] | None, str]]:
        """(position, topic, decoded stored state or None if undecodable, error) as stored.

        No upcasting, and texts still as references (``{"sha256": …}``): ``verify`` resolves
        them itself, checking each text against its address, before hashing.
        """
        transcoder = self.app.mapper.transcoder
        for stored in self.app.recorder.select_events(session_id):
            try:
                state = transcoder.decode(unpack(stored.state))
                yield int(stored.originator_version), stored.topic, state, ""
            except NewerFormatError as e:  # not damage: this version cannot judge the row
                raise cast(StoreError, store_failure(e)) from None
            except Exception as e:  # a damaged row: report, don't crash
                yield int(stored.originator_version), stored.topic, None, _first_line(e)

    def stored_snapshots(self, session_id: UUID) -> list[StoredEvent]:
        """The session's snapshots as stored (oldest first); none in a store without them."""
        snapshots = self.app.snapshots
        if snapshots is None:
            return []
        return list(snapshots.recorder.select_events(session_id))

    def folded_at(
        self, session_id: UUID, positions: Collection[int]
    ) -> Iterator[tuple[int, Deliberation]]:
        """The session folded from its first event, never from a snapshot, as it stands at
        each of ``positions`` (the one aggregate, folded on between them): what a snapshot
        taken there must hold."""
        if not positions:
            return
        wanted = set(positions)
        aggregate: Any = None
        events: Iterable[Any] = self.app.repository.event_store.get(session_id, lte=max(wanted))
        with fewer_collections():
            for event in events:
                aggregate = event.mutate(aggregate)
                if event.originator_version in wanted:
                    yield event.originator_version, aggregate

    def drop_snapshots(self, session_id: UUID, positions: Sequence[int]) -> None:
        """Delete these snapshots of the session (``verify`` found they do not match its
        events): loads then fold from the snapshot before them, or from the first event."""
        self._require_writable()
        snapshots = self.app.snapshots
        if snapshots is None or not positions:
            return
        recorder: Any = snapshots.recorder
        try:
            recorder.delete_snapshots(session_id, list(positions))
        except _PersistenceError as e:
            raise StoreError(f"cannot write to {self.location.display}: {_first_line(e)}") from None

    def snapshot_of(
        self, aggregate: Deliberation, *, keep_blocks: bool = False
    ) -> StoredEventWithTexts | StoredEvent:
        """The snapshot of ``aggregate`` as a save would store it now, not stored: its row,
        and the texts it refers to that the save would write with it.

        ``keep_blocks``: the aggregate's lists then remember the blocks encoded as if they
        were stored, so that its next snapshot encodes only what changed, as a live one
        does. Only for an aggregate that is never saved (``verify``'s own fold): a saved one
        would name blocks no one wrote."""
        snapshots = self.app.snapshots
        if snapshots is None:
            raise StoreError(f"{self.location.display} keeps no snapshots")
        snapshot_class: Any = getattr(type(aggregate), "Snapshot", self.app.snapshot_class)
        try:
            return snapshots.mapper.to_stored_event(snapshot_class.take(aggregate))
        finally:
            self.app.state_transcoding.stored(ok=keep_blocks)

    def notifications(
        self, *, after: int = 0, limit: int = 1000, topics: Sequence[str] = ()
    ) -> list[RecordedEvent]:
        """The global log (all sessions) after notification id ``after``."""
        rows = self.app.recorder.select_notifications(
            start=after, limit=limit, topics=topics, inclusive_of_start=False
        )
        out = []
        for n in rows:
            try:
                domain_event = self.app.mapper.to_domain_event(n)
            except Exception as e:  # one unreadable row: name its session and position
                if store_failure(e) is None and not isinstance(e, ValueError):
                    raise
                raise SessionDamagedError(
                    n.originator_id, int(n.originator_version),
                    f"it cannot be read ({_first_line(e)})",
                ) from None
            out.append(_recorded(domain_event, notification_id=int(n.id)))
        return out

    def max_notification_id(self) -> int:
        return int(self.app.recorder.max_notification_id() or 0)

    # ------------------------------------------------------------------ sessions

    def session_ids(self) -> list[UUID]:
        ids: list[UUID] = []
        start = 0
        while True:
            rows = self.app.recorder.select_notifications(
                start=start, limit=500, topics=CREATED_TOPICS, inclusive_of_start=False
            )
            if not rows:
                return ids
            ids.extend(UUID(str(r.originator_id)) for r in rows)
            start = int(rows[-1].id)

    def resolve(self, ref: str | UUID) -> UUID:
        """A full id, a unique prefix (with or without dashes), or ``@`` / ``last`` for the
        newest session and ``@~N`` for the one N before it (as git's ``HEAD~N``)."""
        if isinstance(ref, UUID):
            return ref
        text = ref.strip().lower()
        if not text:
            raise SessionNotFoundError("empty session id", hint="see 'forge-ledger sessions'")
        if text == "last" or text.startswith("@"):
            return self._newest(ref, text)
        with contextlib.suppress(ValueError):
            if len(text.replace("-", "")) == 32:
                full = UUID(text)
                self.head_version(full)
                return full
        key = text.replace("-", "")
        matches = [s for s in self.session_ids() if s.hex.startswith(key)]
        if not matches:
            raise SessionNotFoundError(
                f"no session matches {ref!r} in {self.location.display}",
                hint="see 'forge-ledger sessions' for the ids",
            )
        if len(matches) > 1:
            raise SessionNotFoundError(
                f"{ref!r} matches {len(matches)} sessions: {self._candidates(matches)}",
                hint="type more characters of the id",
            )
        return matches[0]

    def _newest(self, ref: str, text: str) -> UUID:
        """``@``, ``last`` and ``@~N``: sessions in the order they were started, newest last."""
        back = 0
        if text not in ("@", "last"):
            digits = text.removeprefix("@~")
            if not text.startswith("@~") or not digits.isdigit():
                raise SessionNotFoundError(
                    f"{ref!r} is not a session reference", hint="use @, @~1, @~2… or an id prefix"
                )
            back = int(digits)
        ids = self.session_ids()
        if back >= len(ids):
            raise SessionNotFoundError(
                f"{ref!r}: the store holds {len(ids)} session(s) in {self.location.display}",
                hint="see 'forge-ledger sessions'",
            )
        return ids[-1 - back]

    def _candidates(self, ids: Sequence[UUID], most: int = 5) -> str:
        """What an ambiguous prefix could mean, as git lists them: short id and title."""
        named = []
        for sid in ids[:most]:
            try:
                title = self.state(sid).topic.title
            except ForgeLedgerError:
                title = "unreadable"
            named.append(f"{sid.hex[:8]} ({clip(title, 40)})")
        more = f" and {len(ids) - most} more" if len(ids) > most else ""
        return ", ".join(named) + more

    def summaries(self) -> list[SessionSummary]:
        """Every session; a damaged one as of its last intact event, marked ``damaged``."""
        out = []
        for sid in self.session_ids():
            s: SessionState | None
            try:
                s, damage = self.get(sid).state, None
            except SessionDamagedError as e:
                damage = e
                s = self.get(sid, version=e.position - 1).state if e.position > 1 else None
            out.append(_summary(sid, s, damage))
        return out


def _iteration_starts(e: RecordedEvent) -> list[tuple[int, int]]:
    """(iteration, position) of each round ``e`` starts: a ``RoundStarted``'s own, or every
    round a fork's first event inherited, at the positions their ``RoundStarted`` has.

    A fork recorded before its positions continued its parent's began at position 1, its
    inherited rounds numbered in the parent's ledger: its first event then ends each
    iteration it inherited (the nearest state it holds)."""
    if e.type == "RoundStarted":
        return [(int(e.data["iteration"]), e.position)]
    if e.type != "SessionForked":
        return []
    state = e.data["state"]
    if not ev.ForkOrigin.model_validate(e.data["origin"]).continues_at(e.position):
        return [(i, e.position + 1) for i in range(1, int(state.get("iteration", 0)) + 1)]
    return [(int(r["iteration"]), int(r["started_position"])) for r in state.get("rounds", [])]


def _summary(
    session_id: UUID, s: SessionState | None, damage: SessionDamagedError | None
) -> SessionSummary:
    """A session as ``sessions`` lists it (``s``: its state, None if none can be read)."""
    marked = None if damage is None else f"at event {damage.position}: {damage.problem}"
    if s is None:
        epoch = datetime.fromtimestamp(0, UTC)
        return SessionSummary(
            id=str(session_id), slug="", title="", status="damaged", iteration=0, events=0,
            created=epoch, updated=epoch, damaged=marked,
        )
    return SessionSummary(
        id=s.id,
        slug=s.slug,
        title=s.topic.title,
        status="damaged" if damage is not None else s.status.value,
        iteration=s.iteration,
        events=s.version,
        created=s.created_at,
        updated=s.updated_at,
        parent_id=s.fork_origin.parent_id if s.fork_origin else None,
        damaged=marked,
    )


def _recorded(domain_event: Any, *, notification_id: int | None = None) -> RecordedEvent:
    return RecordedEvent(
        session_id=str(domain_event.originator_id),
        position=int(domain_event.originator_version),
        type=type(domain_event).TYPE,
        timestamp=domain_event.timestamp,
        data=domain_event.data,
        hash=domain_event.hash,
        prev_hash=domain_event.prev_hash,
        notification_id=notification_id,
    )


def store_failure(e: BaseException) -> StoreError | None:
    """A database error escaping from a read (a damaged file, a lost connection, a stored row
    that does not decompress) as the one line a user sees, or None when ``e`` is not one (then
    it is a bug and keeps its traceback). A forge-ledger error raised while pydantic serialized
    a state (a block of a restored one read then) comes wrapped in pydantic's: it is that."""
    if isinstance(e, PydanticSerializationError) and isinstance(e.__cause__, StoreError):
        return e.__cause__
    if isinstance(e, NewerFormatError):
        return StoreError(
            f"the store cannot be read by this version: {_first_line(e)}",
            hint="upgrade forge-ledger to read it",
        )
    if not isinstance(e, _PersistenceError | sqlite3.DatabaseError | zlib.error):
        return None
    if is_busy(e):
        return StoreUnavailableError(
            f"the store is busy: another process held its write lock for {lock_timeout()} s",
            hint="run the command again later (FORGE_LEDGER_LOCK_TIMEOUT sets the wait)",
        )
    return StoreError(
        f"the store cannot be read: {_first_line(e)}",
        hint="check it with 'forge-ledger verify'; restore a damaged file from a backup",
    )


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def dumps_event_log(events: Sequence[RecordedEvent]) -> str:
    return json.dumps([e.as_json() for e in events], ensure_ascii=False)
