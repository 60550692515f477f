"""The ledger: an ``eventsourcing`` application over the chosen store.

:class:`Ledger` is the one entry point the rest of forge-ledger uses to save and load
sessions, read their events (decoded, or raw for verification), travel in time and follow
the global notification log (projections). It hides the eventsourcing details: store
selection by URL, JSON transcoding of the session state for snapshots, turning a lost
optimistic-concurrency race into :class:`~forge_ledger.errors.ConcurrencyConflictError`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast
from uuid import UUID

from eventsourcing.persistence import (
    IntegrityError,
    Notification,
    StoredEvent,
)
from eventsourcing.persistence import (
    PersistenceError as _PersistenceError,
)

from .._collector import raised_gc_threshold
from ..domain import events as ev
from ..domain.aggregate import Deliberation, topic_for
from ..domain.state import ContributionState, SessionState, after_iteration
from ..domain.text import clip
from ..domain.texts import text_address
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
from .eventsourcing_app import LedgerApp, project
from .failures import first_line, store_failure
from .records import RecordedEvent, as_recorded
from .session_list import SessionSummary, summary
from .session_refs import id_prefix, is_newest_ref
from .sqlite_writes import is_busy
from .store import (
    SqliteAccess,
    StoreLocation,
    check_sqlite_file,
    lock_timeout,
    resolve_store,
    sqlite_uri,
)
from .text_mapper import StoredEventWithTexts, TextMapper
from .texts_sqlite import TextsSQLiteRecorder

if TYPE_CHECKING:
    from .lease import SessionLease
    from .postgres import EventWaiter

__all__ = ["Ledger"]


_CREATED_TOPICS = tuple(topic_for(t) for t in ev.FIRST_EVENT_TYPES)
"""The topics a session's first event can have: one notification per session."""
_FORKED_TOPIC = topic_for(ev.SessionForked.TYPE)
_SESSION_TOPICS = tuple(topic_for(t) for t in ev.EVENT_TYPES)
"""Every topic a session's events can have (a study's are apart)."""


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
        env = self.location.eventsourcing_env()
        if self.location.kind == "sqlite":
            assert self.location.path is not None
            found = check_sqlite_file(self.location.path, create=create and not read_only)
            access = SqliteAccess.READ_ONLY if read_only else found.access
            self.read_only = access == SqliteAccess.READ_ONLY
            env["SQLITE_DBNAME"] = sqlite_uri(self.location.path, access)
            env["CREATE_TABLE"] = "y" if access == SqliteAccess.CREATE else "n"
            if not found.has_snapshots:
                snapshot_interval = 0
            self.app = self._open(env, snapshot_interval)
        else:
            from .postgres import postgres_guard  # only a PostgreSQL store needs it

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

    def _open(self, env: dict[str, str], snapshot_interval: int) -> LedgerApp:
        if snapshot_interval > 0:
            env["IS_SNAPSHOTTING_ENABLED"] = "y"
        module = "texts_sqlite" if self.location.kind == "sqlite" else "texts_postgres"
        db = "SQLite" if self.location.kind == "sqlite" else "Postgres"
        env["APPLICATION_RECORDER_TOPIC"] = f"{__package__}.{module}:Texts{db}Recorder"
        env[LedgerApp.SNAPSHOT_RECORDER_TOPIC] = f"{__package__}.{module}:Texts{db}SnapshotRecorder"
        try:
            app = LedgerApp(env=env)
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
                f"cannot open the store {self.location.display}: {first_line(e)}",
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
        from .lease import SessionLease  # only a writer claims a session

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
            raise StoreError(f"cannot write to {self.location.display}: {first_line(e)}") from None

    def _busy(self, aggregates: Sequence[Deliberation]) -> StoreUnavailableError:
        """The write lock stayed with another process past the lock wait: nothing of this
        save was stored; the session goes on from what was (or, if it was not recorded at
        all, the command is simply run again)."""
        recorded = [a.id for a in aggregates if self.app.recorder.select_events(a.id, limit=1)]
        hint = (
            f"try again later: forge-ledger resume {str(recorded[0])[:8]}"
            if recorded
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
        from .postgres import EventWaiter

        return EventWaiter(self.location)

    # ------------------------------------------------------------------ reading

    def get(self, session_id: str | UUID, *, version: int | None = None) -> Deliberation:
        sid = self.resolve(session_id) if isinstance(session_id, str) else session_id
        try:
            with raised_gc_threshold():  # a load may fold thousands of events into a large state
                agg: Any = self.app.repository.get(sid, version=version, projector_func=project)
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
        if version is None:
            return self.get(sid).state
        origin = (
            self.inherited_at_time(sid, at_time)
            if at_time is not None
            else self.inherited_from(sid, version)
        )
        if origin is not None:
            return self._inherited_state(sid, origin, version)
        return self.get(sid, version=version).state

    def _inherited_state(
        self, sid: UUID, origin: ev.ForkOrigin, position: int | None
    ) -> SessionState:
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
        first, stored = self._first_stored(session_id)
        if position >= int(first.originator_version):
            return None
        return ev.ForkOrigin.model_validate(stored["data"]["origin"])

    def inherited_at_time(self, session_id: UUID, at: datetime) -> ev.ForkOrigin | None:
        """The fork's origin when ``session_id`` is a fork not made yet at ``at``, else None.

        Until a fork was made (its first event's time), its history was its parent's up to
        the fork point, the fork point included: the fork's first event, at that position,
        stands for the parent's events up to there. Read from its first stored event only.
        """
        first, stored = self._first_stored(session_id)
        if first.topic != _FORKED_TOPIC or stored["timestamp"] <= at:
            return None
        origin = ev.ForkOrigin.model_validate(stored["data"]["origin"])
        return origin if origin.continues_at(int(first.originator_version)) else None

    def _first_stored(self, session_id: UUID) -> tuple[StoredEvent, dict[str, Any]]:
        """The session's first stored event and its fields as stored (texts stay
        references)."""
        rows = self.app.recorder.select_events(session_id, limit=1)
        if not rows:
            raise SessionNotFoundError(f"no session {session_id}")
        first = rows[0]
        stored = self.app.mapper.transcoder.decode(unpack(first.state))
        return first, stored

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
        """The last position of iteration ``iteration``: just before a later iteration's first
        round starts (:func:`~forge_ledger.domain.state.after_iteration`), read from the events
        as stored, without folding them.

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
                if after_iteration(it, iteration) and seen:
                    return at - 1
                if it == iteration:
                    seen = True
            last = e.position
        if not seen:
            raise UsageError(
                f"session has no iteration {iteration}",
                hint=(
                    f"it has iterations 1 to {highest}"
                    if highest > 1
                    else "it has iteration 1 only"
                    if highest == 1
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
        origin = self.inherited_at_time(session_id, at)
        if origin is not None:
            parent = self.position_at_time(UUID(origin.parent_id), at)
            return min(parent, origin.parent_position)
        last = 0
        for e in self.events(session_id):
            if e.timestamp > at:
                break
            last = e.position
        if last == 0:
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
                recorded = as_recorded(next(stream))
            except StopIteration:
                return
            except Exception as e:
                damage = self._damage_behind(sid, e, upto)
                if damage is not None:
                    raise damage from None
                raise
            if expected not in (None, recorded.position) or previous not in (
                None,
                recorded.prev_hash,
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

    def history(self, session_id: UUID) -> list[RecordedEvent]:
        """Every event a session sees, from position 1: for a fork, the events it inherited
        (its parent's history up to the fork point), then its own."""
        own = list(self.events(session_id))
        first = own[0].position if own else 1
        origin = self.inherited_from(session_id, first - 1) if first > 1 else None
        if origin is None:
            return own
        inherited = self.history(UUID(origin.parent_id))
        return [*(e for e in inherited if e.position < first), *own]

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

    def quote_lists(self, addresses: Sequence[str]) -> dict[str, list[str]]:
        """The answers each of these texts is stored packed against (absent: stored on its
        own); a copy packs them so in its target."""
        recorder = cast(TextsSQLiteRecorder, self.app.recorder)  # or TextsPostgresRecorder
        return recorder.select_quote_lists(addresses)

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
                yield int(stored.originator_version), stored.topic, None, first_line(e)

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
        with raised_gc_threshold():
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
            raise StoreError(f"cannot write to {self.location.display}: {first_line(e)}") from None

    def snapshot_of(self, aggregate: Deliberation) -> StoredEventWithTexts | StoredEvent:
        """The snapshot of ``aggregate`` as a save would store it now, not stored: its row,
        and the texts it refers to that the save would write with it."""
        snapshots = self.app.snapshots
        if snapshots is None:
            raise StoreError(f"{self.location.display} keeps no snapshots")
        snapshot_class: Any = getattr(type(aggregate), "Snapshot", self.app.snapshot_class)
        return snapshots.mapper.to_stored_event(snapshot_class.take(aggregate))

    def notifications(
        self,
        *,
        after: int = 0,
        limit: int = 1000,
        topics: Sequence[str] = (),
        on_damaged: Callable[[SessionDamagedError, int], None] | None = None,
    ) -> list[RecordedEvent]:
        """The global log (all sessions) after notification id ``after``.

        A row that cannot be read raises :class:`SessionDamagedError` naming its session and
        position; given ``on_damaged``, it is handed that error and the row's notification id
        instead, and the rows after it are read (a reader of the whole log that goes on past
        one damaged session)."""
        rows = self.app.recorder.select_notifications(
            start=after, limit=limit, topics=topics, inclusive_of_start=False
        )
        out = []
        for n in rows:
            try:
                domain_event = self.app.mapper.to_domain_event(n)
            except Exception as e:  # one unreadable row: name its session and position
                damage = self._row_damage(n, e)
                if damage is None:
                    raise
                if on_damaged is None:
                    raise damage from None
                on_damaged(damage, int(n.id))
                continue
            out.append(as_recorded(domain_event, notification_id=int(n.id)))
        return out

    def _row_damage(self, row: Notification, failure: Exception) -> SessionDamagedError | None:
        """The damage a row of the global log that failed to decode is, or None when the
        failure is not the row's (a bug). A row decoded as another event than the one its
        topic names (rows reordered or duplicated) fails anywhere in the decoding: the
        session's first damaged event says what it is."""
        if store_failure(failure) is not None or isinstance(failure, ValueError):
            return SessionDamagedError(
                row.originator_id,
                int(row.originator_version),
                f"it cannot be read ({first_line(failure)})",
            )
        return self._damage_behind(
            UUID(str(row.originator_id)), failure, int(row.originator_version)
        )

    def max_notification_id(self) -> int:
        return int(self.app.recorder.max_notification_id() or 0)

    def notified_sessions(self, *, after: int, upto: int) -> set[str]:
        """The sessions with an event in the global log's notifications ``after`` < id ≤
        ``upto``, read without decoding the events (a follower that only asks *which*
        sessions moved)."""
        return {str(r.originator_id) for r in self._log_rows(after=after, upto=upto)}

    def _log_rows(
        self, *, topics: Sequence[str] = (), after: int = 0, upto: int | None = None
    ) -> Iterator[Notification]:
        """The global log's rows ``after`` < id (≤ ``upto``), of ``topics`` (any when empty),
        in order, a page at a time and not decoded."""
        start = after
        while upto is None or start < upto:
            rows = self.app.recorder.select_notifications(
                start=start, limit=1000, stop=upto, topics=topics, inclusive_of_start=False
            )
            if not rows:
                return
            yield from rows
            start = int(rows[-1].id)

    # ------------------------------------------------------------------ sessions

    def session_ids(self) -> list[UUID]:
        return [UUID(str(r.originator_id)) for r in self._log_rows(topics=_CREATED_TOPICS)]

    def headless_session_ids(self) -> list[UUID]:
        """Sessions that have events but not their first one (a row deleted from the store):
        :meth:`session_ids` finds sessions by that event, so these would go unseen. Reads
        every event's row, as checking the whole store does anyway."""
        seen: dict[str, bool] = {}  # session → whether its first event is there
        for r in self._log_rows(topics=_SESSION_TOPICS):
            sid = str(r.originator_id)
            seen[sid] = seen.get(sid, False) or r.topic in _CREATED_TOPICS
        return [UUID(sid) for sid, headed in seen.items() if not headed]

    def resolve(self, ref: str | UUID) -> UUID:
        """A full id, a unique prefix (with or without dashes), or ``@`` / ``last`` for the
        newest session and ``@~N`` for the one N before it (as git's ``HEAD~N``)."""
        if isinstance(ref, UUID):
            return ref
        text = ref.strip().lower()
        if is_newest_ref(text):
            return self._newest(ref, text)
        key = id_prefix(text)
        if key is None:
            raise SessionNotFoundError("empty session id", hint="see 'forge-ledger sessions'")
        with contextlib.suppress(ValueError):
            if len(key) == 32:
                full = UUID(text)
                self.head_version(full)
                return full
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
            out.append(summary(sid, s, damage))
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
