"""Where studies are stored: their own event table in the ledger's database.

A study's events sit beside the sessions' in the same store (the same SQLite file or
PostgreSQL schema, written through the ledger's own connections and write transactions), in
a table of their own (``study_events``), so the sessions' global log (which the projections
follow) holds sessions only. Each study is one stream: positions from 1, each event hashed
with its predecessor's hash as a session's are, and appended only at the next position: the
store's uniqueness of (study, position) makes two writers' appends conflict instead of
interleaving, which is what makes ``CellAssigned`` a claim.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any
from uuid import UUID

from ..domain.hashing import GENESIS
from ..errors import (
    ConcurrencyConflictError,
    SessionNotFoundError,
    StoreError,
    StudyDamagedError,
)
from ..ledger import Ledger, store_failure
from . import events as sev
from .state import StudyRecord, StudyState, fold, record_hash

__all__ = ["TABLE", "StudyStream"]

TABLE = "study_events"
_TOPIC = "forge_ledger:study:"
_NO_STUDY = UUID(int=0)


class StudyStream:
    """Reads and appends study events in ``ledger``'s store."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self._recorder: Any = None
        self._created = False

    @property
    def recorder(self) -> Any:
        """The study table's recorder; reading creates nothing (a store no study was ever
        recorded in has no such table, and reads as holding no study)."""
        if self._recorder is None:
            factory: Any = self.ledger.app.factory
            self._recorder = factory.application_recorder_class(
                datastore=factory.datastore, events_table_name=TABLE
            )
        return self._recorder

    def _writable_table(self) -> None:
        """Refuse a read-only store; create the study table on the first append."""
        if self.ledger.read_only:
            raise StoreError(
                f"{self.ledger.location.display} is read-only; nothing was written",
                hint="make the file and its folder writable, or work on a writable copy",
            )
        if not self._created:
            if not self._table_exists():
                self._create_table()
            self._created = True

    def _table_exists(self) -> bool:
        from eventsourcing.persistence import PersistenceError

        try:
            self.recorder.select_events(_NO_STUDY, limit=1)
        except PersistenceError as e:
            if "no such table" in str(e) or "does not exist" in str(e):
                return False
            raise store_failure(e) or StoreError(str(e)) from None
        return True

    def _create_table(self) -> None:
        """Create the table; PostgreSQL refuses one of two processes creating it at the same
        moment (its catalog rows changed under it), and that one then finds it created."""
        from eventsourcing.persistence import PersistenceError

        try:
            self.recorder.create_table()
        except PersistenceError:
            if not self._table_exists():
                self._call(self.recorder.create_table)

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        from eventsourcing.persistence import IntegrityError, PersistenceError

        try:
            return fn(*args, **kwargs)
        except IntegrityError:
            raise ConcurrencyConflictError(
                "another process recorded an event of this study first; nothing was stored",
                hint="run the command again: it continues from what is recorded",
            ) from None
        except PersistenceError as e:
            if "no such table" in str(e) or "does not exist" in str(e):
                return []  # a store no study was ever recorded in (opened read-only)
            raise store_failure(e) or StoreError(str(e)) from None

    # ------------------------------------------------------------------ writing

    def append(
        self, state: StudyState | None, payload: sev.StudyPayload, *, study_id: UUID, at: datetime
    ) -> StudyRecord:
        """Record ``payload`` after ``state``'s head (the first event when ``state`` is None)
        and fold it into ``state``; a conflicting append by another writer stores nothing and
        raises :class:`ConcurrencyConflictError`."""
        from eventsourcing.persistence import StoredEvent

        self._writable_table()
        position = 1 if state is None else state.version + 1
        prev = GENESIS if state is None else state.head_hash
        data = payload.model_dump(mode="json")
        digest = record_hash(str(study_id), position, payload.TYPE, at, data, prev)
        record = StudyRecord(
            study_id=str(study_id),
            position=position,
            type=payload.TYPE,
            timestamp=at,
            data=data,
            prev_hash=prev,
            hash=digest,
        )
        body = {"timestamp": at.isoformat(), "data": data, "prev_hash": prev, "hash": digest}
        stored = StoredEvent(
            originator_id=study_id,
            originator_version=position,
            topic=_TOPIC + payload.TYPE,
            state=json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode(),
        )
        self._call(self.recorder.insert_events, [stored])
        if state is not None:
            state.apply(record)
        return record

    # ------------------------------------------------------------------ reading

    def records(self, study_id: UUID, *, upto: int | None = None) -> Iterator[StudyRecord]:
        """The study's events as stored, in position order; a row that does not read as one
        raises :class:`StudyDamagedError` at its position (whether they follow one another is
        the fold's check)."""
        rows = self._call(self.recorder.select_events, study_id, lte=upto)
        for row in rows:
            yield _read_row(study_id, row)

    def head(self, study_id: UUID) -> tuple[int, str]:
        """The position and hash of the study's last event, read without folding it."""
        rows = self._call(self.recorder.select_events, study_id, desc=True, limit=1)
        if not rows:
            return 0, GENESIS
        return int(rows[0].originator_version), _read_row(study_id, rows[0]).hash

    def state(self, study: str | UUID, *, at_event: int | None = None) -> StudyState:
        """The study's state now, or as of its event ``at_event``."""
        sid = self.resolve(study)
        return fold(self.records(sid, upto=at_event))

    def study_ids(self) -> list[UUID]:
        """Every study, in the order they were planned."""
        ids: list[UUID] = []
        start = 0
        while True:
            rows = self._call(
                self.recorder.select_notifications,
                start,
                500,
                topics=[_TOPIC + sev.StudyPlanned.TYPE],
                inclusive_of_start=False,
            )
            if not rows:
                return ids
            ids.extend(UUID(str(r.originator_id)) for r in rows)
            start = int(rows[-1].id)

    def log_head(self) -> int:
        """The last notification id of the study log (0 when no study was ever recorded): the
        position a follower of every study (the read model's study tables) tracks."""
        head = self._call(self.recorder.max_notification_id)
        return int(head or 0) if not isinstance(head, list) else 0

    def changed_studies(self, *, after: int, upto: int) -> list[UUID]:
        """The studies with an event in the study log's notifications ``after`` < id ≤ ``upto``,
        in the order of their first such event."""
        seen: dict[UUID, None] = {}
        start = after
        while start < upto:
            rows = self._call(
                self.recorder.select_notifications,
                start,
                500,
                stop=upto,
                inclusive_of_start=False,
            )
            if not rows:
                break
            seen.update((UUID(str(r.originator_id)), None) for r in rows)
            start = int(rows[-1].id)
        return list(seen)

    def resolve(self, ref: str | UUID) -> UUID:
        """A full id or a unique prefix of one, or the study's name (its newest study)."""
        if isinstance(ref, UUID):
            return ref
        key = ref.strip().lower().replace("-", "")
        ids = self.study_ids()
        matches = [s for s in ids if key and s.hex.startswith(key)]
        if not matches:
            named = [s for s in ids if self.name_of(s).lower() == ref.strip().lower()]
            matches = named[-1:]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise SessionNotFoundError(
                f"no study matches {ref!r} in {self.ledger.location.display}",
                hint="see 'forge-ledger study list' for the ids",
            )
        raise SessionNotFoundError(
            f"{ref!r} matches {len(matches)} studies", hint="type more characters of the id"
        )

    def name_of(self, study_id: UUID) -> str:
        """The study's name, from its first event alone."""
        first = next(self.records(study_id, upto=1), None)
        return str(first.data.get("name", "")) if first is not None else ""

    def sessions_of(self, study: str | UUID) -> dict[str, dict[str, Any]]:
        """The study's sessions (by id) with the study, cell and variant each runs."""
        state = self.state(study)
        return {
            c.session_id: {
                "study_id": state.id,
                "study": state.name,
                "cell": c.spec.id,
                "topic": c.spec.topic + 1,
                "panel": c.spec.panel,
                "variant": c.spec.variant,
                "repeat": c.spec.repeat,
            }
            for c in state.cells.values()
            if c.session_id is not None
        }

    def verify(self, study: str | UUID) -> list[str]:
        """Every problem of the study's chain (empty when intact): each event's hash
        recomputed from its content, each link to its predecessor, its fold."""
        sid = self.resolve(study)
        problems: list[str] = []
        prev, expected = GENESIS, 1
        for r in self.records(sid):
            if r.position != expected or r.prev_hash != prev:
                problems.append(f"event {r.position}: does not follow event {expected - 1}")
            if record_hash(str(sid), r.position, r.type, r.timestamp, r.data, r.prev_hash) != (
                r.hash
            ):
                problems.append(f"event {r.position}: its content does not match its hash")
            prev, expected = r.hash, r.position + 1
        if not problems:
            try:
                fold(self.records(sid))
            except StoreError as e:
                problems.append(e.one_line())
        return problems


def _read_row(study_id: UUID, row: Any) -> StudyRecord:
    """A stored study event as its record; a row that does not read as one is the study's
    damage at its position."""
    position = int(row.originator_version)
    try:
        body = json.loads(row.state)
        return StudyRecord(
            study_id=str(study_id),
            position=position,
            type=row.topic.removeprefix(_TOPIC),
            timestamp=datetime.fromisoformat(body["timestamp"]),
            data=dict(body["data"]),
            prev_hash=str(body["prev_hash"]),
            hash=str(body["hash"]),
        )
    except (ValueError, KeyError, TypeError) as e:
        raise StudyDamagedError(
            study_id, position, f"it cannot be read ({type(e).__name__})"
        ) from None
