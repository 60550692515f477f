"""The eventsourcing application under the ledger: its mapper, event stores and snapshot policy.

:class:`LedgerApp` wires eventsourcing to forge-ledger's stored texts (:mod:`.texts`), its
snapshot transcoding (:mod:`.snapshot_states`) and its snapshot schedule (:func:`snapshot_due`);
:class:`~forge_ledger.ledger.ledger.Ledger` is the one object that uses it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, cast
from uuid import UUID

from eventsourcing.application import Application, ProcessingEvent, Repository
from eventsourcing.persistence import (
    EventStore,
    JSONTranscoder,
    Mapper,
    Recording,
)
from eventsourcing.sqlite import SQLiteFactory
from eventsourcing.utils import resolve_topic

from ..domain.aggregate import Deliberation
from .snapshot_states import SessionStateAsJson, SnapshotTextsMapper, StoredState
from .text_mapper import TextMapper

__all__ = ["LedgerApp", "StateEventStore", "WindowedEventStore", "project", "snapshot_due"]


def project(aggregate: Any, domain_events: Iterable[Any]) -> Any:
    """Fold events into the aggregate, as eventsourcing's ``project_aggregate`` does.

    Its version asserts ``isinstance(event, CanMutateProtocol)`` on every event: a runtime
    protocol check that cost more than decoding the event itself (about 60 µs each, most of
    a time travel over a thousand events). Every event here is a ``Deliberation.Event``.
    """
    for domain_event in domain_events:
        aggregate = domain_event.mutate(aggregate)
    return aggregate


class WindowedEventStore(EventStore[UUID]):
    """eventsourcing's event store, decoding a read through :meth:`TextMapper.to_domain_events`
    (its own maps events one by one, so each event's texts cost a query)."""

    prompts: bool = True
    """Whether the prompts' texts are read (see :class:`StateEventStore`)."""

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


class StateEventStore(WindowedEventStore):
    """The events an aggregate is rebuilt from, without their prompts' texts (see
    :meth:`TextMapper.to_domain_events`): the state refers to a prompt by its event."""

    prompts = False


class LedgerApp(Application[UUID]):
    name = "ForgeLedger"
    SNAPSHOT_RECORDER_TOPIC = "FORGE_SNAPSHOT_RECORDER_TOPIC"
    state_transcoding: SessionStateAsJson

    def register_transcodings(self, transcoder: JSONTranscoder) -> None:
        super().register_transcodings(transcoder)
        self.state_transcoding = SessionStateAsJson()
        transcoder.register(self.state_transcoding)
        # a restored state (a StoredState) is stored again the same way: the transcoder
        # looks a transcoding up by the exact type of the value
        transcoder.types[StoredState] = self.state_transcoding

    def construct_mapper(self) -> Mapper[UUID]:
        """Texts by reference (see :mod:`forge_ledger.ledger.texts`); on SQLite, states
        compressed (see :mod:`forge_ledger.ledger.compression`). PostgreSQL keeps them plain
        JSON, queryable in place, and compresses long values itself (TOAST)."""
        compress = isinstance(self.factory, SQLiteFactory)
        mapper = SnapshotTextsMapper(transcoder=self.construct_transcoder(), compress=compress)
        mapper.states = self.state_transcoding
        return mapper

    def construct_event_store(self) -> EventStore[UUID]:
        """An event store whose reads fetch texts a window of events at a time."""
        return WindowedEventStore(mapper=self.mapper, recorder=self.recorder)

    def construct_repository(self) -> Repository[UUID]:
        """eventsourcing's repository, rebuilding sessions from :class:`StateEventStore`."""
        repository = super().construct_repository()
        repository.event_store = StateEventStore(mapper=self.mapper, recorder=self.recorder)
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

        A snapshot stores only the blocks of the state whose values changed since the last
        one (see :func:`snapshot_due`), so its storage grows with the events it follows, not
        with the whole state.

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
                self.snapshots.put([snapshot_class.take(aggregate)])


def snapshot_due(version: int, interval: int) -> bool:
    """Whether position ``version`` gets a snapshot (see ``LedgerApp._take_snapshots``): every
    ``interval`` events, all of them kept.

    Snapshots were once kept on a logarithmic ladder (the newest, and the first of each
    doubling), because each held the whole state and a snapshot per interval made their
    storage grow with the square of the session. Time travel then folded up to half the
    distance back to the previous rung: 80 ms at the median of a 10,000-event session. A
    snapshot now names the blocks of rounds and contributions it shares with the ones before
    (:mod:`~forge_ledger.ledger.snapshot_blocks`) and holds only what changed since, so
    each costs about as much as the events it follows, and keeping all of them bounds every
    fold to ``interval`` events.
    """
    return version > 0 and version % interval == 0
