"""The session state holds answers by reference: snapshots carry addresses, not texts, every
text a snapshot refers to is in the store's text table, and a state restored from a snapshot
reads the same answers a fold from the first event holds (SQLite and PostgreSQL)."""

from __future__ import annotations

import gc
import json
import weakref
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from forge_ledger.domain.state import SessionState
from forge_ledger.domain.texts import TextPool, text_address
from forge_ledger.domain.values import RoundKind
from forge_ledger.errors import StoreError
from forge_ledger.ledger import Ledger
from forge_ledger.ledger.compression import unpack, unpack_text
from forge_ledger.ledger.snapshot_states import StoredState
from forge_ledger.ledger.texts import TEXT_TABLE
from forge_ledger.testing import SessionBuilder
from support.store import raw_connection, snapshot_rows

NAMES = ("p0", "p1", "p2")
LONG = "A long answer that is well over the inline threshold of the text table. " * 3


def _answer_text(round_no: int, name: str) -> str:
    """Distinct texts, short (stay inline in their event) and long (stored apart)."""
    if round_no % 2:
        return f"short {round_no} {name}"
    return f"{LONG}(round {round_no}, {name})"


def _session(ledger: Ledger, rounds: int = 6) -> SessionBuilder:
    """p0, p1 and p2 draft ``rounds`` times, short and long answers in turn, saved by round."""
    b = SessionBuilder(store=ledger).start("Ledger test topic", participants=NAMES).save()
    for it in range(1, rounds + 1):
        b.round(RoundKind.DRAFT, iteration=it, participants=NAMES)
        for name in NAMES:
            b.answer(name, _answer_text(b.round_number, name))
        b.close_round().save()
    return b


def _answers(state: SessionState) -> list[str]:
    return [state.answer(c) for r in state.rounds for c in r.contributions]


def test_a_snapshot_holds_no_answer_text(store_url: str) -> None:
    """The snapshot row (uncompressed) has the answers' addresses, not their bytes; the
    store's text table has every text a snapshot refers to, the short ones (inline in their
    events) too."""
    with Ledger(store_url, snapshot_interval=5) as ledger:
        agg = _session(ledger).aggregate
        rows = snapshot_rows(store_url, ledger)
        assert rows, "expected snapshots"
        texts = _answers(agg.state)
        for _, row in rows:
            for text in texts:
                assert text.encode("utf-8") not in row
        addresses = agg.state.answer_addresses()
        assert any(text_address(t) in row.decode() for t in texts for _, row in rows)
        stored = ledger.texts(addresses)
        newest = max(v for v, _ in rows)
        referenced = ledger.state(agg.id, at_event=newest).answer_addresses()
        assert set(referenced) <= set(stored)
        assert any(len(stored[a]) < 96 for a in referenced)


def test_time_travel_from_a_snapshot_reads_the_folded_answers(store_url: str) -> None:
    """At every position, the state restored from a snapshot (answers read from the store on
    demand) equals the fold from the first event and gives the same answer texts."""
    with (
        Ledger(store_url, snapshot_interval=4) as snap,
        Ledger(store_url, snapshot_interval=0) as plain,
    ):
        agg = _session(snap).aggregate
        restored_from_snapshot = 0
        for v in range(1, agg.version + 1):
            a = snap.state(agg.id, at_event=v)
            b = plain.state(agg.id, at_event=v)
            if a.text_pool.fallback is not None:
                restored_from_snapshot += 1
            assert a == b
            assert _answers(a) == _answers(b)
            assert a.latest_text == b.latest_text
        assert restored_from_snapshot > 0
        assert snap.state(agg.id) == agg.state
        assert _answers(snap.state(agg.id)) == _answers(agg.state)


def _rewrite_snapshots_inline(path: Path) -> int:
    """Turn every snapshot of a SQLite store into the format written before answers were
    held by reference (each answer's text inline under ``response.content``), and drop the
    short texts from the text table (a store written before never had them there)."""
    conn = raw_connection(str(path))
    short: set[str] = set()
    with conn:
        rows = conn.execute("SELECT originator_id, originator_version, state FROM stored_snapshots")
        for oid, version, blob in rows.fetchall():
            outer = json.loads(unpack(blob))
            box = outer["state"]["state"]
            state = StoredState.load(box["_data_"], fallback=_StoreTexts(path))
            box["_data_"] = json.dumps(state.model_dump_with_answers())
            short.update(a for a in state.answer_addresses() if len(state.text_pool.text(a)) < 96)
            conn.execute(
                "UPDATE stored_snapshots SET state = ? WHERE originator_id = ? AND "
                "originator_version = ?",
                (json.dumps(outer).encode(), oid, version),
            )
        conn.executemany(
            f"DELETE FROM {TEXT_TABLE} WHERE address(sha256) = ?", [(a,) for a in short]
        )
    count = conn.execute("SELECT COUNT(*) FROM stored_snapshots").fetchone()[0]
    conn.close()
    return int(count)


class _StoreTexts:
    def __init__(self, path: Path) -> None:
        self.path = path

    def text(self, address: str) -> str:
        with raw_connection(str(self.path)) as conn:
            row = conn.execute(
                f"SELECT body FROM {TEXT_TABLE} WHERE address(sha256) = ?", (address,)
            ).fetchone()
        return unpack_text(row[0])


def test_a_snapshot_written_before_loads(tmp_path: Path) -> None:
    """A snapshot with answers inline (as every snapshot was before) restores the same
    state; its texts go into the state's pool, and the next snapshot writes them to the text
    table (the short ones were nowhere but inline)."""
    path = tmp_path / "old.sqlite"
    with Ledger(str(path), snapshot_interval=1000) as ledger:
        told = _session(ledger, rounds=3)
        agg = told.aggregate
    with Ledger(str(path), snapshot_interval=4, create=False) as ledger:
        for v in range(4, agg.version + 1, 4):
            ledger.app.take_snapshot(agg.id, version=v)
    assert _rewrite_snapshots_inline(path) > 0
    short = [a for a in agg.state.answer_addresses() if len(agg.state.text_pool.text(a)) < 96]
    with Ledger(str(path), snapshot_interval=4, create=False) as ledger:
        assert not ledger.texts(short)
        for v in range(4, agg.version + 1):
            state = ledger.state(agg.id, at_event=v)
            assert state == agg.state if v == agg.version else state.version == v
        state = ledger.state(agg.id)
        assert state == agg.state
        assert _answers(state) == _answers(agg.state)
        assert set(short) <= set(state.text_pool.held(short))
        again = SessionBuilder.of(ledger.get(agg.id), clock=told.clock, store=ledger)
        again.round(
            RoundKind.DRAFT,
            iteration=4,
            answers={"p0": "short again", "p1": "short too"},
            close=True,
        ).save()
        assert ledger.app.snapshots is not None
        snapshots = list(ledger.app.snapshots.get(agg.id, gt=agg.version))
        assert snapshots, "expected a snapshot after the old ones"
        for snapshot in snapshots:
            held: Any = snapshot
            addresses = held.state["state"].answer_addresses()
            assert set(ledger.texts(addresses)) == set(addresses)
            assert set(short) <= set(addresses)
        assert _answers(ledger.state(again.id)) == _answers(again.state)


def test_inline_answers_load_only_as_the_inline_layout() -> None:
    """A state with its answers inline (a fork's) is read as such: the answers move into the
    pool. The state model has one layout and refuses that one instead of losing the texts."""
    agg = (
        SessionBuilder()
        .start("Ledger test topic", participants=NAMES[:2])
        .round(RoundKind.DRAFT, iteration=1, participants=NAMES[:2])
        .answer("p0", LONG)
        .aggregate
    )
    data = agg.state.model_dump_with_answers()
    assert data["rounds"][0]["contributions"][0]["response"]["content"] == LONG
    data["rounds"][0]["contributions"][0]["messages"] = [{"role": "user", "content": "old"}]
    loaded = SessionState.load(json.dumps(data), inline=True)
    assert loaded == agg.state
    assert _answers(loaded) == [LONG]
    for inline in (data, json.dumps(data)):
        with pytest.raises(ValidationError, match="content"):
            SessionState.load(inline)
    bare = SessionState.model_validate(agg.state.model_dump())
    with pytest.raises(StoreError, match="cannot be found"):
        _answers(bare)


def test_text_pool_falls_back_and_is_shared_by_copies() -> None:
    class Source:
        calls = 0

        def text(self, address: str) -> str:
            Source.calls += 1
            if address != text_address("stored"):
                raise StoreError("missing")
            return "stored"

    pool = TextPool(Source())
    own = pool.add("held")
    assert pool.text(own) == "held"
    assert Source.calls == 0
    assert pool.text(text_address("stored")) == "stored"
    assert pool.text(text_address("stored")) == "stored"
    assert Source.calls == 1
    assert pool.held([own, text_address("stored")]) == {own: "held"}
    with pytest.raises(StoreError):
        pool.text(text_address("nowhere"))
    import copy

    assert copy.deepcopy(pool) is pool


def test_a_restored_state_reads_its_answers_after_the_ledger_is_closed(store_url: str) -> None:
    """A command may print a state after closing the store it loaded it from."""
    with Ledger(store_url, snapshot_interval=4) as ledger:
        agg = _session(ledger).aggregate
    with Ledger(store_url, snapshot_interval=4, create=False) as ledger:
        state = ledger.state(agg.id)
        assert state.text_pool.fallback is not None
    assert _answers(state) == _answers(agg.state)


def test_a_restored_state_is_freed_as_soon_as_it_is_dropped(store_url: str) -> None:
    """No reference cycle: a restored state (and its answers' fallback) goes when its last
    reference does. A long run restores many large states; kept until a full collection,
    each made every later collection longer."""
    with Ledger(store_url, snapshot_interval=4) as ledger:
        agg = _session(ledger).aggregate
        gc.collect()
        gc.disable()
        try:
            state = ledger.state(agg.id)
            assert state.text_pool.fallback is not None
            gone = weakref.ref(state)
            del state
            assert gone() is None
        finally:
            gc.enable()


def test_a_copy_reads_its_answers_after_the_restored_state_is_gone(store_url: str) -> None:
    """Copies share the restored state's text pool; its fallback reads on without it."""
    with Ledger(store_url, snapshot_interval=4) as ledger:
        agg = _session(ledger).aggregate
        state = ledger.state(agg.id)
        assert state.text_pool.fallback is not None
        copy = state.model_copy(deep=True)
        assert copy.text_pool is state.text_pool
        del state
        gc.collect()
        assert _answers(copy) == _answers(agg.state)
