"""The projection runner: pulls the ledger's notification log and applies projections exactly once.

eventsourcing's SQLite recorder cannot push, so the runner pulls (on PostgreSQL it polls the
same way, optionally forever with :meth:`ProjectionRunner.follow`). Each batch is one
``BEGIN IMMEDIATE`` transaction on the read-model database: the view rows of every
projection *and* their tracking positions in ``_projections`` commit together or not at all.
A crash mid-batch leaves the previous batch's rows and positions; the next run redoes the
whole batch once. Two runners on the same file serialise on the write lock and re-read
positions inside it, so neither applies an event twice.

The runner folds each session's state with the domain's own fold and hands it to the
projections, which stay pure. When a session's state is not in memory it asks the ledger for
the state just before the event (snapshots make that cheap).

A session whose events do not read is skipped whole, so every other session still comes up to
date: a row that cannot be decoded, a gap in its positions, an event whose link differs from
the hash of the event before it (one comparison per event; recomputing every event's hash is
``verify``'s work, which would double the cost of a catch-up). The batch that met it is done
again without the session, whose rows stay as they were, and a tracking row of its own
(:data:`~.current.SKIPPED`) has every later catch-up skip it and try it again. Once it reads
(repaired) or is gone from the store, the projections are rebuilt from zero: the one way its
rows, and their place among the other sessions' rows, come out as a rebuild gives them.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID

from forge_ledger._collector import raised_gc_threshold
from forge_ledger.domain import SessionState
from forge_ledger.domain.events import FIRST_EVENT_TYPES
from forge_ledger.domain.json_fields import JsonFields
from forge_ledger.errors import SessionDamagedError, UsageError

from .base import EventLike, Projection
from .consensus import ConsensusProjection
from .current import SKIPPED
from .dissent import DissentProjection
from .read_model import ReadModelProjection
from .session_state import SessionStateProjection, apply_event
from .writes import BatchWriter, FtsIndex, fts_indexes

if TYPE_CHECKING:
    from sqlite_utils import Database

__all__ = [
    "DEFAULT_PROJECTIONS",
    "EventSource",
    "ProjectionRunner",
    "ProjectionStatus",
    "catch_up",
    "default_projections",
    "marks",
    "open_views",
    "rebuild",
    "status",
    "track",
    "tracked",
    "write_transaction",
]


MAX_GAP_FOLD = 200
"""Missed events a runner folds onto its in-memory state rather than reloading the state."""


class EventSource(Protocol):
    """What the runner needs of :class:`forge_ledger.ledger.Ledger`."""

    def notifications(
        self,
        *,
        after: int = 0,
        limit: int = 1000,
        topics: Sequence[str] = (),
        on_damaged: Callable[[SessionDamagedError, int], None] | None = None,
    ) -> Sequence[EventLike]: ...

    def max_notification_id(self) -> int: ...

    def damage(self, session_id: UUID) -> SessionDamagedError | None: ...

    def state(self, session_id: UUID, *, at_event: int | None = None) -> SessionState: ...

    def events(
        self, session_id: UUID, *, after: int = 0, upto: int | None = None
    ) -> Iterable[EventLike]: ...


class _Unreadable(Exception):
    """A batch met a session whose events do not read: it is done again without it."""

    def __init__(self, damage: SessionDamagedError) -> None:
        super().__init__(damage.message)
        self.damage = damage


def default_projections() -> tuple[Projection, ...]:
    """Fresh instances of the built-in projections. An instance holds the rows its current
    batch has marked until the batch's flush, so it serves one runner at a time: every
    runner makes its own unless given some."""
    return (
        ReadModelProjection(),
        SessionStateProjection(),
        DissentProjection(),
        ConsensusProjection(),
    )


DEFAULT_PROJECTIONS: tuple[Projection, ...] = default_projections()
"""The built-in projections, for their names, tables and versions; a runner given these very
instances must be the only one using them (see :func:`default_projections`)."""


def open_views(path: str | Path, *, lock_timeout: float = 30) -> Database:
    """Open (creating if needed) the read-model database and bring its schema up to date.

    sqlite-utils (and the schema's migrations, written with it) load here, not with this
    module: reading a current read model (``sessions``, ``show``) needs neither.
    ``lock_timeout``: seconds a write waits for another process's write lock (the ledger's
    lock wait, which the caller knows)."""
    from sqlite_utils import Database

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(p), timeout=lock_timeout)
    db = Database(conn)
    db.execute("PRAGMA journal_mode=WAL")
    # the read model is rebuildable from the ledger: a commit need not wait for the disk
    # (WAL + NORMAL still never corrupts the file; a power cut at worst loses the last batches,
    # whose tracking positions are lost with them, so they are simply applied again)
    db.execute("PRAGMA synchronous=NORMAL")
    _migrate_locked(db)
    return db


def _migrate_locked(db: Database) -> None:
    """Apply pending migrations holding the write lock from the start (``BEGIN IMMEDIATE``).

    Several processes open the read model at once (a follower and the commands beside it).
    sqlite-utils reads which migrations are pending, then applies each in a deferred
    transaction: two processes both found one pending and the second failed ("table already
    exists"), or met a commit made since its read and got "database is locked" at once, never
    waiting. Under the lock, the check and the migrations see the file as it is; with none
    pending, nothing is locked."""
    from .migrations import MIGRATIONS, migrate

    if not MIGRATIONS.pending(db):
        return
    db.conn.execute("BEGIN IMMEDIATE")
    try:
        migrate(db)
    except BaseException:
        db.conn.rollback()
        raise
    db.conn.commit()


def track(db: Database, name: str, version: int, position: int) -> None:
    """Set the tracking row ``name`` of ``_projections``: the rows of that name are at
    ``version`` and have applied every notification up to ``position``."""
    db.execute(
        "INSERT INTO _projections (name, version, position) VALUES (?, ?, ?) "
        "ON CONFLICT(name) DO UPDATE SET version = excluded.version, "
        "position = excluded.position",
        [name, version, position],
    )


def tracked(db: Database, *names: str) -> dict[str, tuple[int, int]]:
    """The tracking rows of ``_projections`` (those of ``names``; every one when none is
    given), each as (version, position): what :func:`track` set."""
    where = f" WHERE name IN ({', '.join('?' * len(names))})" if names else ""
    rows = db.execute(f"SELECT name, version, position FROM _projections{where}", list(names))
    return {str(n): (int(v), int(p)) for n, v, p in rows.fetchall()}


def marks(db: Database, prefix: str) -> list[str]:
    """The names of ``_projections``' tracking rows that start with ``prefix`` (the marks of
    what a catch-up skipped as damaged), in the order they were written."""
    return [
        str(n)
        for (n,) in db.execute(
            "SELECT name FROM _projections WHERE name LIKE ? ORDER BY rowid", [f"{prefix}%"]
        ).fetchall()
    ]


def write_transaction(db: Database) -> Any:
    """One ``BEGIN IMMEDIATE`` transaction on the read model, committed on success and rolled
    back on any error: view rows and their tracking positions commit together or not at all."""

    class _Tx:
        def __enter__(self) -> None:
            db.conn.execute("BEGIN IMMEDIATE")

        def __exit__(self, exc_type: object, *rest: object) -> None:
            if exc_type is None:
                db.conn.commit()
            else:
                db.conn.rollback()

    return _Tx()


@dataclass(frozen=True)
class ProjectionStatus(JsonFields):
    """One projection's progress through the ledger, as ``views status`` shows it."""

    json_keys = (..., "lag", "needs_rebuild")

    name: str
    version: int
    stored_version: int | None
    position: int
    head: int
    skipped: int = 0
    """Sessions (or studies) skipped as damaged: the rows stand without them until they read."""

    @property
    def lag(self) -> int:
        """Notifications not yet applied (everything when a version bump forces a rebuild)."""
        if self.needs_rebuild:
            return self.head
        return max(self.head - self.position, 0)

    @property
    def needs_rebuild(self) -> bool:
        """A version bump: the projection's rows are rebuilt from the start."""
        return self.stored_version != self.version

    def as_json(self) -> dict[str, Any]:
        """The stored position counts only while the version matches (else nothing is kept)."""
        return {**super().as_json(), "position": 0 if self.needs_rebuild else self.position}


class ProjectionRunner:
    """Applies ``projections`` from ``source`` to the read model ``db``.

    Keep one runner alive to reuse in-memory session states between catch-ups (a follower);
    a fresh runner works too, it just reloads states from the ledger.
    """

    def __init__(
        self,
        source: EventSource,
        db: Database,
        projections: Sequence[Projection] | None = None,
    ) -> None:
        self.source = source
        self.db = db
        self.projections = tuple(projections) if projections is not None else default_projections()
        names = [p.name for p in self.projections]
        if len(set(names)) != len(names):
            raise ValueError(f"projection names must be unique: {names}")
        self._states: dict[str, SessionState] = {}
        self._fts: dict[str, FtsIndex] | None = None
        self._writer: BatchWriter | None = None
        self._skipped: dict[str, SessionDamagedError] = {}

    @property
    def damaged(self) -> list[SessionDamagedError]:
        """The sessions the last catch-up skipped, their events damaged (each at its first
        damaged event)."""
        return list(self._skipped.values())

    def _batch_writer(self) -> BatchWriter:
        if self._writer is None:
            self._fts = fts_indexes(self.db.conn)
            self._writer = BatchWriter(self.db.conn, self._fts)
        return self._writer

    # ------------------------------------------------------------------ tracking

    def _stored(self) -> dict[str, tuple[int, int]]:
        return tracked(self.db)

    def _reset(self, p: Projection) -> None:
        self._batch_writer()
        assert self._fts is not None
        for table in p.tables:
            index = self._fts.get(table)
            if index is not None:
                index.clear(self.db.conn)
            else:
                self.db.execute(f'DELETE FROM "{table}"')
        track(self.db, p.name, p.version, 0)

    def _positions(self) -> dict[str, int]:
        """Positions inside the open transaction; resets projections whose version changed."""
        stored = self._stored()
        out: dict[str, int] = {}
        for p in self.projections:
            got = stored.get(p.name)
            if got is None or got[0] != p.version:
                self._reset(p)
                out[p.name] = 0
            else:
                out[p.name] = got[1]
        return out

    def status(self) -> list[ProjectionStatus]:
        stored = self._stored()
        head = self.source.max_notification_id()
        skipped = len(self._marks())
        return [
            ProjectionStatus(
                name=p.name,
                version=p.version,
                stored_version=stored[p.name][0] if p.name in stored else None,
                position=stored[p.name][1] if p.name in stored else 0,
                head=head,
                skipped=skipped,
            )
            for p in self.projections
        ]

    def rebuild(
        self,
        names: Iterable[str] | None = None,
        *,
        batch_size: int = 1000,
        on_batch: Callable[[int], None] | None = None,
    ) -> int:
        """Empty the named projections (all by default) and refold them from event zero."""
        wanted = list(names) if names is not None else [p.name for p in self.projections]
        known = {p.name: p for p in self.projections}
        unknown = [n for n in wanted if n not in known]
        if unknown:
            raise UsageError(
                f"unknown projection {unknown[0]!r}",
                hint=f"projections are: {', '.join(known)}",
            )
        with self._transaction():
            for n in wanted:
                self._reset(known[n])
        self._states.clear()
        return self.catch_up(batch_size=batch_size, on_batch=on_batch)

    # ------------------------------------------------------------------ applying

    def catch_up(
        self,
        *,
        batch_size: int = 1000,
        max_batches: int | None = None,
        on_batch: Callable[[int], None] | None = None,
    ) -> int:
        """Apply every new notification; returns how many were read. Resumable at any point.

        ``on_batch(n)`` is called after each committed batch of ``n`` events (progress).
        """
        if batch_size < 1:
            raise UsageError("batch size must be at least 1")
        self._retry_skipped()
        total = 0
        batches = 0
        with raised_gc_threshold():  # the states of every session touched stay in memory
            while max_batches is None or batches < max_batches:
                n = self._one_batch(batch_size)
                total += n
                batches += 1
                if n and on_batch is not None:
                    on_batch(n)
                if n < batch_size:
                    break  # the log had no more: skip one empty round trip
        return total

    def follow(
        self,
        *,
        interval: float = 1.0,
        batch_size: int = 1000,
        stop: Callable[[], bool] = lambda: False,
        on_batch: Callable[[int], None] | None = None,
        wait: Callable[[float], None] = time.sleep,
        also: Callable[[], int] = lambda: 0,
    ) -> None:
        """Long-lived follower: catch up, then ``wait(interval)``, repeat until ``stop()``.

        ``wait`` sleeps by default (polling); a store that can signal new events (PostgreSQL's
        LISTEN/NOTIFY, ``Ledger.event_waiter``) passes a wait that returns as soon as another
        process commits, so the read model follows within milliseconds. ``also`` runs after
        each catch-up (tables kept by a layer above this one: the study tables) and answers
        how much it applied; nothing applied by either, the follower waits.
        """
        while not stop():
            n = self.catch_up(batch_size=batch_size)
            n += also()
            if n and on_batch is not None:
                on_batch(n)
            if not n:
                wait(interval)

    def _transaction(self) -> Any:
        return write_transaction(self.db)

    # ------------------------------------------------------------------ damaged sessions

    def _retry_skipped(self) -> None:
        """Try again each session skipped before as damaged: still damaged, it is skipped by
        this catch-up too; read again or gone from the store, every projection is rebuilt
        from zero (the batches then meet any other still damaged, and skip it again)."""
        self._skipped = {}
        if not self._marks():  # nothing to lock the read model for
            return
        with self._transaction():
            healed = False
            for name in self._marks():
                try:
                    sid = UUID(name.removeprefix(SKIPPED))
                except ValueError:  # a mark that names no session
                    self.db.execute("DELETE FROM _projections WHERE name = ?", [name])
                    continue
                damage = self.source.damage(sid)
                if damage is None:
                    healed = True
                else:
                    self._skipped[str(sid)] = damage
            if healed:
                self.db.execute("DELETE FROM _projections WHERE name LIKE ?", [f"{SKIPPED}%"])
                for p in self.projections:
                    self._reset(p)
                self._states.clear()
                self._skipped = {}

    def _marks(self) -> list[str]:
        """The tracking rows of the sessions skipped as damaged, in the order they were met."""
        return marks(self.db, SKIPPED)

    def _skip(self, found: SessionDamagedError) -> bool:
        """Skip ``found``'s session from now on, named at its first damaged event (where
        ``verify`` and ``sessions`` name it); False if it was skipped already."""
        sid = UUID(found.session_id)
        if str(sid) in self._skipped:
            return False
        self._skipped[str(sid)] = self.source.damage(sid) or found
        return True

    def _mark_skipped(self) -> None:
        """The tracking rows of the skipped sessions, inside the batch's transaction."""
        for sid, damage in self._skipped.items():
            self.db.execute(
                "INSERT INTO _projections (name, version, position) VALUES (?, 0, ?) "
                "ON CONFLICT(name) DO NOTHING",
                [f"{SKIPPED}{sid}", damage.position],
            )

    def _state_before(self, event: EventLike) -> SessionState | None:
        """The session's state just before ``event``, as cheaply as possible.

        In memory when this runner applied the previous event; brought forward by folding the
        few events it missed when another runner (a CLI call beside a follower) applied them;
        otherwise loaded from the ledger (newest snapshot plus the events after it).
        """
        before = event.position - 1
        if before == 0 or event.type in FIRST_EVENT_TYPES:  # a fork begins at its fork point
            return None
        cached = self._states.get(event.session_id)
        if cached is not None:
            if cached.version == before:
                return cached
            if before - MAX_GAP_FOLD <= cached.version < before:
                sid = UUID(event.session_id)
                for missed in self.source.events(sid, after=cached.version, upto=before):
                    cached = apply_event(cached, missed)
                if cached.version == before:
                    return cached
        self._states.pop(event.session_id, None)
        return self.source.state(UUID(event.session_id), at_event=before)

    def _read_before(self, event: EventLike) -> SessionState | None:
        """:meth:`_state_before`, checked: the state is at the event before ``event``, and
        ``event`` links to that event's hash; else the session is damaged
        (:class:`_Unreadable`)."""
        try:
            state = self._state_before(event)
        except Exception as e:  # a state that fails to load: the session's damage, or a bug
            damage = (
                e if isinstance(e, SessionDamagedError)
                else self.source.damage(UUID(event.session_id))
            )
            if damage is None:
                raise
            raise _Unreadable(damage) from None
        if state is not None and (
            state.version != event.position - 1 or state.head_hash != event.prev_hash
        ):
            raise _Unreadable(
                SessionDamagedError(
                    event.session_id, event.position, "its events do not follow one another"
                )
            )
        return state

    def _one_batch(self, batch_size: int) -> int:
        """One batch, done again without each session it finds damaged."""
        while True:
            try:
                return self._apply_batch(batch_size)
            except _Unreadable as found:
                if not self._skip(found.damage):  # a skipped session's events are not read
                    raise found.damage from None

    def _apply_batch(self, batch_size: int) -> int:
        writer = self._batch_writer()
        try:
            with self._transaction():
                positions = self._positions()
                start = min(positions.values(), default=0)
                batch, unread = self._read_batch(start, batch_size)
                if not batch and not unread:
                    return 0
                self._mark_skipped()
                touched: dict[str, SessionState] = {}
                last = start
                projections = self.projections
                for p in projections:
                    p.begin()
                # looked up once per batch, not once per event and projection
                appliers = [(positions[p.name], p.apply) for p in projections]
                states = self._states
                skipped = self._skipped
                for event in batch:
                    nid = event.notification_id
                    assert nid is not None
                    last = nid
                    if event.session_id in skipped:
                        continue
                    payload = event.payload()
                    state = apply_event(self._read_before(event), event, payload)
                    states[event.session_id] = touched[event.session_id] = state
                    for position, apply in appliers:
                        if nid > position:
                            ops = apply(event, payload, state)
                            if ops:
                                writer.add(ops)
                if unread:  # the batch may end on a row that does not read
                    last = max(last, unread[-1])
                self._finish(writer, positions, list(touched.values()), last)
                return len(batch) + len(unread)
        except BaseException:
            self._states.clear()
            self._writer = None
            raise

    def _read_batch(self, start: int, limit: int) -> tuple[Sequence[EventLike], list[int]]:
        """The batch's events that read, and the notification ids of its rows that do not
        (their sessions are skipped from now on)."""
        unread: list[int] = []

        def on_damaged(damage: SessionDamagedError, nid: int) -> None:
            self._skip(damage)
            unread.append(nid)

        return self.source.notifications(after=start, limit=limit, on_damaged=on_damaged), unread

    def _finish(
        self, writer: BatchWriter, positions: dict[str, int], done: list[SessionState], last: int
    ) -> None:
        """Write the batch's rows and move every projection it applied to ``last``."""
        for p in self.projections:
            if last > positions[p.name]:
                writer.add(p.flush(done))
        writer.write()
        for p in self.projections:
            if last > positions[p.name]:
                self.db.conn.execute(
                    "UPDATE _projections SET position = ? WHERE name = ?", [last, p.name]
                )


def catch_up(
    source: EventSource,
    db: Database,
    *,
    batch_size: int = 1000,
    projections: Sequence[Projection] | None = None,
) -> int:
    """Apply every new notification of ``source`` to ``db``; returns how many were read."""
    return ProjectionRunner(source, db, projections).catch_up(batch_size=batch_size)


def rebuild(
    source: EventSource,
    db: Database,
    names: Iterable[str] | None = None,
    *,
    batch_size: int = 1000,
    projections: Sequence[Projection] | None = None,
) -> int:
    return ProjectionRunner(source, db, projections).rebuild(names, batch_size=batch_size)


def status(
    source: EventSource, db: Database, projections: Sequence[Projection] | None = None
) -> list[ProjectionStatus]:
    return ProjectionRunner(source, db, projections).status()
