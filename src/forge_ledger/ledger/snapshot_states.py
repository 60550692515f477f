"""Snapshot transcoding: the session state as a snapshot holds it, and back.

A snapshot carries the pydantic session state as one JSON string whose long texts and shared
blocks are stored apart, by address (:mod:`forge_ledger.ledger.texts`); a restored state reads
them back from the store's texts when asked. What is stored in blocks, and which parsed values
by reference, is said once, by :class:`StoredState`: the domain's models with those fields
marked, read and written in the stored layout (:mod:`.snapshot_blocks`).
"""

# No postponed annotations here: pydantic then reads the models' annotations as objects
# rather than compiling each from a string, which makes importing them (every command) faster.

import operator
import re
import threading
import weakref
from collections.abc import Callable, Sequence
from datetime import datetime
from enum import Enum
from functools import partial
from typing import Annotated, Any, NamedTuple

from eventsourcing.domain import Snapshot
from eventsourcing.persistence import (
    MapperDeserialisationError,
    StoredEvent,
    Transcoding,
)
from pydantic import (
    BaseModel,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    WrapSerializer,
)

from ..domain.state import (
    CallFailure,
    ContributionState,
    ConvergenceResult,
    HumanInput,
    Rewind,
    RoundState,
    SessionState,
)
from ..domain.texts import missing_text, text_address
from ..domain.values import Critique
from ..errors import (
    StoreError,
)
from .failures import store_failure
from .snapshot_blocks import BLOCK_LOADER, BLOCK_SINK, InBlocks, loaded, unreadable_block
from .text_mapper import StoredEventWithTexts, TextMapper
from .texts import (
    Lookup,
    refer_to_texts,
    text_reference,
    with_texts,
)

__all__ = [
    "BlockEncodings",
    "BlockTexts",
    "SessionStateAsJson",
    "SnapshotTextsMapper",
    "StoredContribution",
    "StoredRound",
    "StoredState",
    "StoredTexts",
    "loaded_answer_addresses",
]

_BATCH = 64
"""Answers read from the store at a time for a state restored from a snapshot."""

_INLINE_TEXTS = re.compile(rb'"(?:messages|content)":')
"""A key of a snapshot laid out before answers and prompts were held by address (its
``response.content``, its ``messages``; an idea's ``content`` too, which costs only a slower
load): such a snapshot is read by :func:`~forge_ledger.domain.state.answers_apart`. A key
never matches inside a string, where every quote is escaped."""

_REMEMBERED_BLOCKS = 1024
"""Blocks a ledger remembers as stored (:class:`BlockEncodings`): a 10,000-answer round
fills 157; one forgotten is only encoded again."""


_ANSWERS = 64
"""Answers per block of a round's contributions. A time travel decodes the block of the list
it appends to: 64 answers decode in about half a millisecond, and a 10,000-answer round names
157 blocks."""

_RECORDS = 16
"""Records per block of a session's larger lists (rounds, evaluations, human inputs…): a
round holds its answers inline while they are fewer than a block of them, so a block of
rounds is about as large as one of answers, and a session records far fewer of the others
than of rounds."""


def _by_reference(
    value: Critique, handler: SerializerFunctionWrapHandler, info: SerializationInfo
) -> Any:
    """A critique in a stored state, by reference to its JSON, as its ``CritiqueRecorded``
    event holds it: its strengths and weaknesses repeat its answer's prose, which a snapshot
    would otherwise hold again."""
    sink = info.context.get(BLOCK_SINK) if isinstance(info.context, dict) else None
    ref = None if sink is None else sink.refer(value.model_dump_json())
    return handler(value) if ref is None else ref


class StoredContribution(ContributionState):
    """An answer as a stored state writes it (read back as the domain's own)."""

    critique: Annotated[Critique, WrapSerializer(_by_reference)] | None = None


class StoredRound(RoundState):
    """A round as a stored state holds it: its answers in blocks. A restored state's rounds
    are of this class, and equal to the domain's rounds of the same values."""

    contributions: Annotated[
        list[ContributionState], InBlocks(_ANSWERS, written=StoredContribution)
    ] = Field(default_factory=list)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RoundState):
            return NotImplemented
        return self.__dict__ == other.__dict__


class StoredState(SessionState):
    """The session state as a snapshot stores it: its long lists in blocks (a restored state
    decodes a block when one of its items is read), each critique by reference. Written from
    any :class:`SessionState` (:func:`stored_json`); a restored state is of this class."""

    rounds: Annotated[list[RoundState], InBlocks(_RECORDS, StoredRound)] = Field(
        default_factory=list
    )
    failures: Annotated[list[CallFailure], InBlocks(_RECORDS)] = Field(default_factory=list)
    convergence: Annotated[list[ConvergenceResult], InBlocks(_RECORDS)] = Field(
        default_factory=list
    )
    human_inputs: Annotated[list[HumanInput], InBlocks(_RECORDS)] = Field(default_factory=list)
    asked: Annotated[list[tuple[int, list[str]]], InBlocks(_RECORDS)] = Field(default_factory=list)
    rewinds: Annotated[list[Rewind], InBlocks(_RECORDS)] = Field(default_factory=list)


def stored_json(state: SessionState, sink: Any) -> str:
    """``state`` as a snapshot stores it, its blocks and long values written to ``sink`` (a
    :class:`~.snapshot_blocks.BlockSink`)."""
    document = StoredState.__pydantic_serializer__.to_json(
        state, exclude_defaults=True, context={BLOCK_SINK: sink}
    )
    return document.decode("utf-8")


def restored_state(
    document: bytes, blocks: Callable[[str], bytes] | None, *, inline: bool = False
) -> StoredState:
    """A snapshot's state, the blocks of its lists read from ``blocks`` when first needed;
    with ``inline``, one written with its texts inline (see
    :func:`~forge_ledger.domain.state.answers_apart`)."""
    context = {} if blocks is None else {BLOCK_LOADER: blocks}
    return StoredState.load(document, inline=inline, context=context)  # type: ignore[return-value]


def loaded_answer_addresses(state: SessionState) -> list[str]:
    """Addresses of the answers of the contributions a restored state has decoded so far (of
    every answer of a folded one), in recorded order, no repeats."""
    seen: dict[str, None] = {}
    for r in loaded(state.rounds):
        for c in loaded(r.contributions):
            seen[c.answer_sha256] = None
    return list(seen)


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
            self._addresses = loaded_answer_addresses(state)
            self._order = {a: i for i, a in enumerate(self._addresses)}
        start = self._order.get(address)
        if start is None:
            return []
        pool = state.text_pool
        following = self._addresses[start + 1 : start + 4 * _BATCH]
        return [a for a in following if a not in pool and a not in self._read][: _BATCH - 1]


_IMMUTABLE = (str, int, float, bool, type(None), datetime, Enum)


def _immutable(value: Any) -> bool:
    """Whether ``value`` can never change: a scalar, or a tuple or frozen model of such."""
    if isinstance(value, _IMMUTABLE):
        return True
    if isinstance(value, tuple):
        return all(_immutable(v) for v in value)
    if isinstance(value, BaseModel) and value.model_config.get("frozen"):
        return all(_immutable(v) for v in value.__dict__.values())
    return False


class _Encoded(NamedTuple):
    """A block as stored: its items, each with its fields then, and its texts."""

    objects: tuple[Any, ...]
    fields: list[dict[str, Any]]
    texts: dict[str, str]
    """The block's text and every text it refers to (the recorder writes those it lacks)."""
    address: str


class BlockEncodings:
    """The blocks a ledger stored lately, to tell from their values that a block holds what
    it held then, without encoding it again.

    A block is remembered only if each of its items is a model whose fields hold values that
    never change (a contribution's do): its items are then the same objects with the same
    fields, or the block is encoded again. A snapshot of a live session holds every block of
    its long lists, so encoding them all again made each snapshot cost as much as the state.
    A block is known by its first item (a list the fold builds gives its blocks as new lists
    each time), which the remembered block holds, so its identity is not reused meanwhile.
    """

    def __init__(self, limit: int = _REMEMBERED_BLOCKS) -> None:
        self._known: dict[int, _Encoded] = {}
        self._limit = limit

    def unchanged(self, items: list[Any]) -> _Encoded | None:
        """The stored block of ``items`` if their values are the ones it was stored with."""
        known = self._known.get(id(items[0])) if items else None
        if known is None or len(items) != len(known.objects):
            return None
        if not all(map(operator.is_, items, known.objects)):
            return None
        return known if [item.__dict__ for item in items] == known.fields else None

    def remember(self, items: list[Any], texts: dict[str, str], address: str) -> None:
        if not items or not all(
            isinstance(item, BaseModel) and _immutable(tuple(item.__dict__.values()))
            for item in items
        ):
            return
        if len(self._known) >= self._limit:
            del self._known[next(iter(self._known))]
        fields = [dict(item.__dict__) for item in items]
        self._known[id(items[0])] = _Encoded(tuple(items), fields, texts, address)


class BlockTexts:
    """The :class:`~.snapshot_blocks.BlockSink` of a snapshot being encoded: each
    block becomes one stored text (its long texts referred to, as the state's are), added to
    the texts the snapshot recorder writes with the snapshot.

    A block's address is the digest of its encoded values, so a block that did not change
    since an earlier snapshot has that snapshot's address, and the recorder, which writes
    only the texts the store does not hold, stores it once. Every snapshot hands the recorder
    all the texts its blocks name, those it did not encode again too: a snapshot that failed
    to be stored leaves none missing."""

    def __init__(self, texts: dict[str, str], encodings: BlockEncodings) -> None:
        self._texts = [texts]  # the innermost block being encoded last
        self._encodings = encodings

    def store(self, items: list[Any], encode: Callable[[], str]) -> str:
        known = self._encodings.unchanged(items)
        if known is not None:
            self._texts[-1].update(known.texts)
            return known.address
        own: dict[str, str] = {}
        self._texts.append(own)
        try:
            document = encode()
        finally:
            self._texts.pop()
        text = refer_to_texts(document, own)
        address = text_address(text)
        own[address] = text
        self._texts[-1].update(own)
        self._encodings.remember(items, own, address)
        return address

    def refer(self, text: str) -> Any:
        """A parsed value's text (a critique's JSON, the text its event refers to), by
        reference if it is long."""
        return text_reference(text, self._texts[-1])


class SessionStateAsJson(Transcoding):
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
        self._blocks = BlockEncodings()

    def encode(self, obj: SessionState) -> str:
        texts: dict[str, str] = {}
        document = refer_to_texts(stored_json(obj, BlockTexts(texts, self._blocks)), texts)
        self._encoded.texts = texts
        return document

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
        inline = _INLINE_TEXTS.search(document) is not None
        state = restored_state(document, blocks, inline=inline)
        if lookup is not None:
            state.text_pool.fallback = StoredTexts(lookup, state)
        return state


def _stored_block(lookup: Lookup, reads: Lookup, address: str) -> bytes:
    """The JSON of a block of a restored state (:class:`~.snapshot_blocks.BlockList`), its
    long texts read back; a block altered in the store is refused."""
    found = lookup([address]).get(address)
    if found is None or text_address(found) != address:
        raise unreadable_block(address, "that the store does not hold intact")
    return with_texts(found.encode("utf-8"), reads)


def _no_texts(_: Sequence[str]) -> dict[str, str]:
    """The texts of a store that cannot be read: a reference then reads as missing."""
    return {}


class SnapshotTextsMapper(TextMapper):
    """Adds to a stored snapshot the texts its state refers to, for the snapshot recorder to
    write with it (``TextsSQLiteSnapshotRecorder``, ``TextsPostgresSnapshotRecorder``).

    A snapshot refers to answers and reasoning by address, and an answer folded from an
    event may be stored nowhere else (a short one is inline in its event, and so is every
    text of a store written before texts were stored apart). Texts the state read from the
    store are in the store already; the recorder writes only those that are not."""

    states: SessionStateAsJson | None = None

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
        texts.update(held.text_pool.held(loaded_answer_addresses(held)))
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
