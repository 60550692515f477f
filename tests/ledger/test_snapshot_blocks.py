"""The ledger's encoding of a state's long lists: stored as blocks by address, decoded when read.

The rule these tests hold: a list field marked :class:`InBlocks` restores to the list it was
(a :class:`BlockList`), reads no block until one of its items is read, and what a stored block
holds is decided when it is written, from its values: a change in place is stored without
anyone telling the list, and a block whose values did not change keeps its address.
"""

from __future__ import annotations

import copy
import json
import sqlite3
import uuid
from collections.abc import Callable
from typing import Annotated, Any

import pytest
from eventsourcing.persistence import OperationalError
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError

from forge_ledger.domain.fold import fold
from forge_ledger.domain.state import SessionState
from forge_ledger.domain.texts import text_address
from forge_ledger.domain.values import Participant, RoundKind, SessionStatus, Stance, Topic
from forge_ledger.errors import StoreError
from forge_ledger.ledger import Ledger, store_failure
from forge_ledger.ledger.compression import unpack_text
from forge_ledger.ledger.snapshot_blocks import BLOCK_LOADER, BLOCK_SINK, BlockList, InBlocks
from forge_ledger.ledger.snapshot_states import (
    BlockEncodings,
    BlockTexts,
    restored_state,
    stored_json,
)
from forge_ledger.testing import SessionBuilder
from support.cli import assert_one_error_line, run_cli
from support.stories import random_sessions

SMALL = TypeAdapter(Annotated[list[int], InBlocks(4)])
"""Blocks of four, so short lists cross several blocks."""


class Sink:
    """A block sink over a dict, counting the blocks it was asked to store."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}
        self.stored: list[str] = []
        self.reads: list[str] = []

    def store(self, items: list[Any], encode: Callable[[], str]) -> str:  # noqa: ARG002
        document = encode()
        address = text_address(document)
        self.texts[address] = document
        self.stored.append(document)
        return address

    def refer(self, text: str) -> Any:  # noqa: ARG002 - the protocol's signature
        return None  # parsed values (a critique) stay inline: this sink keeps blocks only

    def load(self, address: str) -> bytes:
        self.reads.append(address)
        return self.texts[address].encode("utf-8")

    def dump(self, adapter: TypeAdapter[Any], value: Any) -> bytes:
        return adapter.dump_json(value, context={BLOCK_SINK: self})

    def restore(self, adapter: TypeAdapter[Any], data: bytes) -> Any:
        return adapter.validate_json(data, context={BLOCK_LOADER: self.load})


# ---------------------------------------------------------------------- a list, in blocks

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 99)),
        st.tuples(st.just("set"), st.integers(-40, 40), st.integers(0, 99)),
        st.tuples(st.just("del"), st.integers(-40, 40)),
        st.tuples(st.just("insert"), st.integers(-40, 40), st.integers(0, 99)),
        st.tuples(
            st.just("store"),
        ),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(start=st.lists(st.integers(0, 99), max_size=30), ops=OPS)
def test_a_block_list_behaves_as_a_list_through_stores_and_restores(
    start: list[int], ops: list[tuple[Any, ...]]
) -> None:
    sink = Sink()
    blocks = sink.restore(SMALL, sink.dump(SMALL, start))
    assert isinstance(blocks, BlockList)
    plain = list(start)
    for op in ops:
        if op[0] == "append":
            blocks.append(op[1])
            plain.append(op[1])
        elif op[0] == "store":
            blocks = sink.restore(SMALL, sink.dump(SMALL, blocks))
        elif not plain:
            continue
        elif op[0] == "set":
            blocks[op[1] % len(plain)] = op[2]
            plain[op[1] % len(plain)] = op[2]
        elif op[0] == "del":
            del blocks[op[1] % len(plain)]
            del plain[op[1] % len(plain)]
        else:
            blocks.insert(op[1], op[2])
            plain.insert(op[1], op[2])
        assert len(blocks) == len(plain)
    assert blocks == plain
    assert list(reversed(blocks)) == plain[::-1]
    assert blocks[1:-1:2] == plain[1:-1:2]
    assert [blocks[i] for i in range(-len(plain), len(plain))] == plain + plain
    assert copy.deepcopy(blocks) == plain
    assert copy.copy(blocks) == plain
    assert SMALL.dump_python(blocks) == plain  # plain serialization: the items
    assert sink.restore(SMALL, sink.dump(SMALL, blocks)) == plain


def test_a_restored_list_reads_a_block_only_when_one_of_its_items_is_read() -> None:
    sink = Sink()
    stored = sink.dump(SMALL, list(range(18)))
    restored = sink.restore(SMALL, stored)
    assert sink.reads == []
    assert len(restored) == 18
    assert restored[-1] == 17  # the short last block is inline
    assert restored[16] == 16
    assert sink.reads == []
    assert restored[5] == 5
    assert restored[6] == 6
    assert len(sink.reads) == 1  # block 1 (items 4 to 7), once
    assert list(restored) == list(range(18))
    assert len(sink.reads) == 4  # the four full blocks, each once
    assert list(restored.loaded()) == list(range(18))


def test_a_change_in_place_is_stored_without_being_reported() -> None:
    """Nothing tells the list that an item changed: the stored block is its values' now."""
    sink = Sink()
    items = [[i] for i in range(12)]
    adapter = TypeAdapter(Annotated[list[list[int]], InBlocks(4)])
    blocks = adapter.validate_python(items)  # a plain list, as the fold builds
    first = sink.dump(adapter, blocks)
    assert len(sink.texts) == 3
    assert sink.dump(adapter, blocks) == first  # the same values: the same addresses
    assert len(sink.texts) == 3
    blocks.append([12])  # a new short block, inline
    sink.dump(adapter, blocks)
    assert len(sink.texts) == 3
    blocks[5].append(99)  # in place, unreported
    changed = sink.dump(adapter, blocks)
    assert len(sink.texts) == 4
    assert sink.stored[-2] == "[[4],[5,99],[6],[7]]"
    assert sink.restore(adapter, changed) == [*items[:5], [5, 99], *items[6:], [12]]
    assert sink.restore(adapter, first) == items  # the earlier state's blocks are kept


def test_a_restored_list_names_its_blocks_without_encoding_them() -> None:
    """A block never decoded cannot have changed: it is named by the address it was read
    from. One decoded is encoded again, and unchanged it has the same address."""
    sink = Sink()
    stored = sink.dump(SMALL, list(range(12)))
    restored = sink.restore(SMALL, stored)
    count = len(sink.stored)
    assert sink.dump(SMALL, restored) == stored
    assert len(sink.stored) == count  # nothing encoded
    assert restored[5] == 5  # decodes block 1, unchanged
    assert sink.dump(SMALL, restored) == stored
    assert len(sink.stored) == count + 1  # block 1 encoded again, to the same address
    assert len(sink.texts) == 3
    restored[5] = 50
    assert sink.dump(SMALL, restored) != stored
    assert len(sink.texts) == 4


def test_a_block_read_while_pydantic_serializes_fails_as_the_store_error() -> None:
    """pydantic wraps what a serializer raises; the ledger's mapping of read failures (what a
    command prints) finds our error inside."""
    sink = Sink()
    restored = sink.restore(SMALL, sink.dump(SMALL, list(range(9))))
    for address in sink.texts:
        sink.texts[address] = "[]"  # damaged: no items
    with pytest.raises(PydanticSerializationError) as caught:
        SMALL.dump_python(restored)
    failure = store_failure(caught.value)
    assert isinstance(failure, StoreError)
    assert failure is caught.value.__cause__


def test_a_list_remembers_no_block_as_stored() -> None:
    """A store that fails after encoding leaves nothing behind: the next one is given every
    block again, nested blocks included (a list of lists of blocks)."""
    outer_adapter = TypeAdapter(Annotated[list[Annotated[list[int], InBlocks(4)]], InBlocks(4)])
    lists = outer_adapter.validate_python([list(range(i, i + 5)) for i in range(9)])
    failed = Sink()
    failed.dump(outer_adapter, lists)  # the state was not stored
    retried = Sink()
    stored = retried.dump(outer_adapter, lists)
    assert len(retried.stored) == len(failed.stored) == 2 + 9  # two outer blocks, 9 inner
    assert retried.restore(outer_adapter, stored) == [list(range(i, i + 5)) for i in range(9)]


def test_a_copy_stores_the_values_it_shares() -> None:
    sink = Sink()
    adapter = TypeAdapter(Annotated[list[list[int]], InBlocks(4)])
    blocks = sink.restore(adapter, sink.dump(adapter, [[i] for i in range(8)]))
    assert list(blocks) == [[i] for i in range(8)]  # every block decoded
    twin = copy.copy(blocks)
    blocks[1].append(7)  # the item is shared by both lists
    restored = sink.restore(adapter, sink.dump(adapter, twin))
    assert restored[1] == [1, 7]
    deep = copy.deepcopy(blocks)
    assert deep == blocks
    assert deep[1] is not blocks[1]
    restored_twin = copy.copy(restored)  # blocks not decoded: shared by address
    assert sink.restore(adapter, sink.dump(adapter, restored_twin)) == restored


@pytest.mark.parametrize(
    ("document", "why"),
    [("[1,2]", "holds 2 items, not 4"), ('["a",1,2,3]', "does not decode")],
)
def test_a_damaged_block_is_one_store_error(document: str, why: str) -> None:
    sink = Sink()
    restored = sink.restore(SMALL, sink.dump(SMALL, list(range(9))))
    address = next(iter(sink.texts))
    sink.texts[address] = document
    with pytest.raises(StoreError, match=rf"block \({address[:12]}\) that is damaged: .*{why}"):
        list(restored)


@pytest.mark.parametrize(
    "stored",
    [
        {"blocks": ["0" * 64], "tail": [], "count": 5},
        {"blocks": ["0" * 63], "tail": [], "count": 4},
        {"blocks": [], "tail": [1, 2, 3, 4], "count": 4},
        {"blocks": [], "tail": [], "count": 0, "more": 1},
    ],
)
def test_a_malformed_stored_list_does_not_validate(stored: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match=r"stored block list|valid list|permitted|pattern"):
        SMALL.validate_python(stored, context={BLOCK_LOADER: Sink().load})


def test_stored_blocks_load_only_through_a_loader() -> None:
    stored = Sink().dump(SMALL, list(range(9)))
    with pytest.raises(ValidationError, match="loads through the ledger"):
        SMALL.validate_json(stored)


class Flat(BaseModel):
    """An item whose fields hold values that never change (as a contribution's do)."""

    n: int
    note: str = ""


class Tagged(BaseModel):
    """An item with a field that can change in place."""

    tags: list[str]


def _encoding_sink() -> tuple[BlockTexts, dict[str, str], list[int]]:
    """The ledger's block sink over a dict, and a count of the blocks it encoded."""
    texts: dict[str, str] = {}
    return BlockTexts(texts, BlockEncodings()), texts, []


def _dump_counting(adapter: TypeAdapter[Any], value: Any, sink: BlockTexts) -> tuple[bytes, int]:
    """``value`` stored through ``sink``: its JSON, and how many blocks were encoded."""
    encoded = 0
    real = sink.store

    def store(items: list[Any], encode: Callable[[], str]) -> str:
        def counted() -> str:
            nonlocal encoded
            encoded += 1
            return encode()

        return real(items, counted)

    sink.store = store  # type: ignore[method-assign]
    try:
        return adapter.dump_json(value, context={BLOCK_SINK: sink}), encoded
    finally:
        del sink.store


def test_the_ledger_encodes_again_only_blocks_whose_values_changed() -> None:
    """A block of items whose fields never change in place is known from its values: the
    same items with the same fields are not encoded again, and any change is."""
    adapter = TypeAdapter(Annotated[list[Flat], InBlocks(4)])
    items = adapter.validate_python([{"n": i} for i in range(12)])
    encodings = BlockEncodings()
    first_texts: dict[str, str] = {}
    first, encoded = _dump_counting(adapter, items, BlockTexts(first_texts, encodings))
    assert encoded == 3
    again_texts: dict[str, str] = {}
    again, encoded = _dump_counting(adapter, items, BlockTexts(again_texts, encodings))
    assert (again, encoded) == (first, 0)
    assert again_texts == first_texts  # every block's text still handed to the recorder
    items[5].note = "changed in place"
    changed, encoded = _dump_counting(adapter, items, BlockTexts({}, encodings))
    assert encoded == 1
    items[9] = Flat(n=9)  # the same values, another object: encoded, to the same address
    same, encoded = _dump_counting(adapter, items, BlockTexts({}, encodings))
    assert (same, encoded) == (changed, 1)
    loader = {**first_texts, **_texts_of(adapter, items, encodings)}
    restored = adapter.validate_json(changed, context={BLOCK_LOADER: lambda a: loader[a].encode()})
    assert restored[5].note == "changed in place"


def _texts_of(adapter: TypeAdapter[Any], value: Any, encodings: BlockEncodings) -> dict[str, str]:
    texts: dict[str, str] = {}
    adapter.dump_json(value, context={BLOCK_SINK: BlockTexts(texts, encodings)})
    return texts


def test_items_that_can_change_in_place_are_always_encoded() -> None:
    adapter = TypeAdapter(Annotated[list[Tagged], InBlocks(4)])
    items = adapter.validate_python([{"tags": [str(i)]} for i in range(8)])
    encodings = BlockEncodings()
    first, encoded = _dump_counting(adapter, items, BlockTexts({}, encodings))
    assert encoded == 2
    items[1].tags.append("more")
    texts = _texts_of(adapter, items, encodings)
    changed, encoded = _dump_counting(adapter, items, BlockTexts({}, encodings))
    assert encoded == 2
    assert changed != first
    restored = adapter.validate_json(changed, context={BLOCK_LOADER: lambda a: texts[a].encode()})
    assert restored[1].tags == ["1", "more"]


def test_a_forgotten_block_is_encoded_again() -> None:
    adapter = TypeAdapter(Annotated[list[Flat], InBlocks(4)])
    items = adapter.validate_python([{"n": i} for i in range(12)])
    encodings = BlockEncodings(limit=2)
    first, encoded = _dump_counting(adapter, items, BlockTexts({}, encodings))
    again, encoded = _dump_counting(adapter, items, BlockTexts({}, encodings))
    assert again == first
    assert encoded >= 1  # three blocks, two remembered at most


# ---------------------------------------------------------------------- the fold's changes


def _every_kind_of_change(ledger: Ledger, pad: int = 0) -> uuid.UUID:
    """A session whose fold changes rounds and answers in every way it can: answers amended
    after a snapshot (votes, critiques, failed parses), a fallback, a completed round, a
    rewind that supersedes rounds in earlier blocks, a round of more than one block of
    answers, and an end with a round still open.

    A change is only at risk in a full block (the short last one is stored inline every
    time), so ``pad`` rounds first move the rounds along: with none, the round open at the
    end is the last of the first block of rounds; with one, the fallback's round is, and it
    completes there."""
    names = ["ana", "bo", "cy"]
    b = SessionBuilder(store=ledger).start(
        Topic(title="blocks", description="every change"),
        participants=[Participant(name=n, model=f"openai/{n}") for n in names],
    )
    everyone = dict.fromkeys(names, "an answer long enough to be a stored text " * 3)
    for _ in range(pad):
        b.round(RoundKind.DRAFT, iteration=1, answers=everyone, close=True)
    for it in range(1, 8):
        b.round(RoundKind.DRAFT, iteration=it, answers=everyone)
        b.critique("bo").opinion("cy", stance=Stance.AGREE, reasoning="why " * 40)
        b.close_round(abstained=["cy"])
        b.round(RoundKind.CONVERGENCE, iteration=it, answers=everyone)
        b.vote("ana", agrees=True).parse_failure("bo", expected="vote", error="no json")
        b.close_round().save()
    b.round(RoundKind.SYNTHESIS, participants=["ana"])
    b.aggregate.choose_fallback(
        round=b.round_number, failed="ana", participant="bo", at=b.clock.now(), reason="ana failed"
    )
    b.answer("bo", "the synthesis").close_round().save()
    b.rewind(3).resume().save()
    b.round(RoundKind.CONVERGENCE, participants=names)
    for name in names:
        b.answer(name, f"the answer of {name} " * 20)
    for i in range(70):  # repairs: a round of more than one block of answers
        b.answer(names[i % 2], f"repair {i} " * 20, purpose="repair", attempt=2)
        if i == 66:
            b.save()
    # cy's answer is in the round's first block, stored by then: the vote amends it there
    b.vote("cy", agrees=False).vote("ana", agrees=True).save()
    b.finish(SessionStatus.ABORTED, reason="stopped").save()
    return b.id


def _fresh(state: SessionState) -> str:
    """The stored form of ``state`` computed from nothing: no block remembered as stored."""
    again = SessionState.model_validate(state.model_dump())
    return stored_json(again, Sink())


def _assert_every_change_is_stored(ledger: Ledger, session_id: uuid.UUID) -> int:
    state: SessionState | None = None
    sink = Sink()
    checked = 0
    for e in ledger.events(session_id):
        state = fold(
            state,
            e.payload(),
            session_id=str(session_id),
            position=e.position,
            at=e.timestamp,
            hash_=e.hash,
        )
        kept = stored_json(state, sink)
        assert kept == _fresh(state), f"a stale block after {e.type} at {e.position}"
        assert restored_state(kept.encode(), sink.load) == state
        checked += 1
    return checked


@pytest.mark.parametrize("pad", [0, 1])
def test_every_change_to_rounds_and_answers_is_stored(sqlite_url: str, pad: int) -> None:
    """Storing the live state after every event, as snapshots do, gives what storing it from
    nothing gives, and restores to it: every handler's change in place is stored."""
    with Ledger(sqlite_url, snapshot_interval=0) as ledger:
        sid = _every_kind_of_change(ledger, pad)
        kinds = {e.type for e in ledger.events(sid)}
        assert {
            "FallbackChosen",
            "SessionRewound",
            "ParseFailed",
            "VoteRecorded",
            "CritiqueRecorded",
            "RoundCompleted",
            "SessionAborted",
        } <= kinds
        state = ledger.state(sid)
        assert len(state.rounds) == 16 + pad  # a full block of rounds
        assert max(len(r.contributions) for r in state.rounds) > 64  # and of answers
        assert _assert_every_change_is_stored(ledger, sid) == state.version


@pytest.mark.parametrize("seed", [3, 11])
def test_every_change_is_stored_in_random_sessions(sqlite_url: str, seed: int) -> None:
    with Ledger(sqlite_url, snapshot_interval=0) as ledger:
        for sid in random_sessions(ledger, seed, sessions=3):
            assert _assert_every_change_is_stored(ledger, uuid.UUID(sid)) > 0


@pytest.mark.slow
def test_time_travel_through_shared_blocks_gives_the_folded_state(store_url: str) -> None:
    """Snapshots every 7 events of a session with several blocks of rounds and answers: the
    state at every position is the one folded from the first event, and the snapshots share
    their blocks (the last snapshot holds less than half of the state inline)."""
    with Ledger(store_url, snapshot_interval=7) as snap:
        sid = _every_kind_of_change(snap)
    with (
        Ledger(store_url, snapshot_interval=7, create=False) as snap,
        Ledger(
            store_url,
            snapshot_interval=0,
            create=False,
        ) as plain,
    ):
        head = plain.head_version(sid)
        for v in range(1, head + 1):
            assert snap.state(sid, at_event=v) == plain.state(sid, at_event=v), v
        assert snap.app.snapshots is not None
        newest = next(iter(snap.app.snapshots.get(sid, desc=True, limit=1)))
        assert newest.originator_version > head - 30
        held = newest.state["state"]
        whole = len(held.model_dump_json(exclude_defaults=True))
        stored = stored_json(held, Sink())
        assert len(stored) < whole / 2


# ---------------------------------------------------------------------- in the store


def test_blocks_of_a_snapshot_that_was_not_stored_are_written_by_the_next(
    sqlite_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first snapshot's write fails after the state was encoded (its events are stored);
    the session goes on in the same process. Every later snapshot must name only blocks the
    store holds: the ones the failed write was to store are written again."""
    names = ["ana", "bo", "cy"]
    with Ledger(sqlite_url, snapshot_interval=200) as ledger:
        assert ledger.app.snapshots is not None
        recorder = ledger.app.snapshots.recorder
        real = recorder.insert_events
        calls: list[int] = []

        def fails_once(stored: Any, **kwargs: Any) -> Any:
            calls.append(1)
            if len(calls) == 1:
                raise OperationalError("database is locked (simulated)")
            return real(stored, **kwargs)

        monkeypatch.setattr(recorder, "insert_events", fails_once)
        b = SessionBuilder(store=ledger).start(
            Topic(title="blocks", description="a failed snapshot"),
            participants=[Participant(name=n, model=f"openai/{n}") for n in names],
        )
        b.round(RoundKind.DRAFT, iteration=1)
        for name in names:
            b.answer(name, "first " * 20)
        for i in range(70):  # a full block of answers, nested in the first block of rounds
            b.answer(names[i % 2], f"repair {i} " * 20, purpose="repair", attempt=2)
        b.close_round().save()
        failures = 0
        while b.aggregate.version < 420:
            b.round(
                RoundKind.DRAFT, iteration=1, answers=dict.fromkeys(names, "x " * 60), close=True
            )
            try:
                b.save()
            except StoreError:
                failures += 1
        assert failures == 1
        assert len(calls) == 2  # at 200 (failed) and 400
        sid = b.id
    with (
        Ledger(sqlite_url, create=False) as snap,
        Ledger(
            sqlite_url,
            snapshot_interval=0,
            create=False,
        ) as plain,
    ):
        assert snap.app.snapshots is not None
        versions = [s.originator_version for s in snap.app.snapshots.get(sid)]
        assert len(versions) == 1
        for v in versions:
            assert snap.state(sid, at_event=v) == plain.state(sid, at_event=v)


def _snapshotted_session(url: str) -> tuple[uuid.UUID, str]:
    """20 closed rounds, snapshots every 20 events; the session and the address of the first
    block of rounds of its newest snapshot."""
    names = ["ana", "bo", "cy"]
    with Ledger(url, snapshot_interval=20) as ledger:
        b = SessionBuilder(store=ledger).start(
            Topic(title="blocks", description="a damaged snapshot"),
            participants=[Participant(name=n, model=f"openai/{n}") for n in names],
        )
        for i in range(20):
            b.round(
                RoundKind.DRAFT,
                iteration=1 + i // 4,
                answers=dict.fromkeys(names, f"answer {i} " * 20),
                close=True,
            ).save()
        assert ledger.app.snapshots is not None
        newest = next(iter(ledger.app.snapshots.get(b.id, desc=True, limit=1)))
        held: SessionState = newest.state["state"]  # type: ignore[attr-defined]
        stored = json.loads(stored_json(held, Sink()))
        address: str = stored["rounds"]["blocks"][0]  # named by the snapshot, not decoded
        return b.id, address


@pytest.mark.parametrize("damage", ["missing", "altered"])
def test_a_missing_or_altered_block_is_one_error_line(
    sqlite_url: str,
    capsys: pytest.CaptureFixture[str],
    damage: str,
) -> None:
    """A block is read when first needed, deep inside a command, and pydantic may be the one
    reading it (a fork serializes the state): every command still says it in one line."""
    sid, address = _snapshotted_session(sqlite_url)
    con = sqlite3.connect(sqlite_url)
    key = bytes.fromhex(address)
    if damage == "missing":
        con.execute("DELETE FROM forge_texts WHERE sha256 = ?", (key,))
    else:
        (body,) = con.execute("SELECT body FROM forge_texts WHERE sha256 = ?", (key,)).fetchone()
        text = unpack_text(body) if isinstance(body, bytes) else body
        altered = text.replace('"kind":"draft"', '"kind":"synthesis"', 1)
        assert altered != text
        con.execute("UPDATE forge_texts SET body = ? WHERE sha256 = ?", (altered, key))
    con.commit()
    con.close()
    for command in (
        ["show", str(sid)],
        ["fork", str(sid), "--at-event", "104"],
        ["spec", str(sid)],
    ):
        code, _, err = run_cli(capsys, *command, "--store", sqlite_url)
        line = assert_one_error_line(err)
        assert code == 2, command
        assert f"a snapshot names a block ({address[:12]})" in line, line
    assert "--drop-bad-snapshots" in line
    code, _, err = run_cli(capsys, "verify", str(sid), "--store", sqlite_url)
    line = assert_one_error_line(err)
    assert code == 1
    assert "its events verify, but the snapshot at event" in line, line
    code, _, err = run_cli(
        capsys, "verify", str(sid), "--drop-bad-snapshots", "--store", sqlite_url
    )
    assert code == 0, err  # the events are intact, as the message says
    assert "dropped" in err
    for command in (["show", str(sid)], ["spec", str(sid)]):
        code, _, err = run_cli(capsys, *command, "--store", sqlite_url)
        assert code == 0, err  # read from the events again
