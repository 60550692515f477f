"""Upcasting: a v1 ``ContributionRecorded`` row written the old way still loads, as v2.

v1 stored the prompt as ``system`` + ``prompt`` strings; v2 stores chat ``messages``. The row
below is written by hand with raw sqlite3, in exactly the shape eventsourcing stores (the
shape is checked against a row the application writes), with ``class_version`` absent (= 1)
and a hash computed over the v1 data, as an old forge-ledger would have.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest

from forge_ledger.domain import events as ev
from forge_ledger.domain.hashing import chain_hash
from forge_ledger.domain.values import RoundKind
from forge_ledger.ledger import Ledger, verify_session
from forge_ledger.testing import SessionBuilder
from support.store import unpack

V1_DATA: dict[str, Any] = {
    "round": 1,
    "participant": "p0",
    "attempt": 1,
    "model": "openai/scripted",
    "system": "You are the primary drafter.",
    "prompt": "Draft a caching design.",
    "params": {"temperature": 0.2, "max_tokens": 256, "response_format": None, "api_base": None},
    "response": {
        "content": "Use a write-through cache.",
        "model": "openai/scripted",
        "tokens": {"input": 20, "output": 7},
        "cost_usd": 0.002,
        "price": None,
        "duration_ms": 300,
        "ttft_ms": None,
        "stop_reason": "end_turn",
        "finish_reason": "stop",
        "usage_reported": True,
    },
    "purpose": "answer",
}


def _stored_rows(path: str) -> list[tuple[str, int, str, dict[str, Any]]]:
    con = sqlite3.connect(path)
    try:
        return [
            (oid, ver, topic, json.loads(unpack(bytes(state)).decode("utf-8")))
            for oid, ver, topic, state in con.execute(
                "SELECT originator_id, originator_version, topic, state FROM stored_events "
                "ORDER BY rowid",
            )
        ]
    finally:
        con.close()


def _session_with_open_round(path: str) -> SessionBuilder:
    """p0 and p1 are asked for drafts; nobody has answered yet."""
    b = SessionBuilder().start("Ledger test topic", participants=["p0", "p1"])
    b.round(RoundKind.DRAFT, iteration=1)
    with Ledger(path, snapshot_interval=0) as ledger:
        ledger.save(b.aggregate)
    return b


def _write_v1_row(path: str, b: SessionBuilder) -> int:
    """p0's answer, as a v1 row appended behind the ledger's back; returns its position."""
    agg = b.aggregate
    position = agg.version + 1
    at = b.clock.now()
    digest = chain_hash(
        session_id=str(agg.id), position=position, type_name="ContributionRecorded",
        timestamp=at, data=V1_DATA, prev_hash=agg.state.head_hash,
    )
    state = {
        "timestamp": {"_type_": "datetime_iso", "_data_": at.isoformat()},
        "data": V1_DATA,
        "prev_hash": agg.state.head_hash,
        "hash": digest,
    }
    blob = json.dumps(state, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    con = sqlite3.connect(path)
    with con:
        con.execute(
            "INSERT INTO stored_events (originator_id, originator_version, topic, state) "
            "VALUES (?, ?, ?, ?)",
            (agg.id.hex, position, "forge_ledger:ContributionRecorded", blob),
        )
    con.close()
    return position


def test_hand_written_row_matches_what_the_app_stores(sqlite_url: str) -> None:
    """Guards the fixture: our v1 row has the app's shape, minus class_version and messages."""
    b = _session_with_open_round(sqlite_url)
    agg = b.answer("p1", "an answer").aggregate
    with Ledger(sqlite_url, snapshot_interval=0) as ledger:
        ledger.save(agg)
    oid, _, topic, real = _stored_rows(sqlite_url)[-1]
    assert (oid, topic) == (agg.id.hex, "forge_ledger:ContributionRecorded")
    assert set(real) == {"timestamp", "data", "prev_hash", "hash", "class_version"}
    assert real["class_version"] == 2
    assert real["timestamp"]["_type_"] == "datetime_iso"
    assert set(real["data"]) - {"messages", "prompt_hash"} == set(V1_DATA) - {"system", "prompt"}


def test_v1_contribution_is_upcast_on_load(sqlite_url: str) -> None:
    b = _session_with_open_round(sqlite_url)
    agg = b.aggregate
    position = _write_v1_row(sqlite_url, b)
    stored = _stored_rows(sqlite_url)[-1][3]
    assert "class_version" not in stored
    assert "messages" not in stored["data"]

    expected_messages = [
        {"role": "system", "content": "You are the primary drafter."},
        {"role": "user", "content": "Draft a caching design."},
    ]
    with Ledger(sqlite_url, snapshot_interval=0, create=False) as ledger:
        recorded = next(e for e in ledger.events(agg.id) if e.position == position)
        assert recorded.data["messages"] == expected_messages
        assert "system" not in recorded.data
        assert "prompt" not in recorded.data
        payload = recorded.payload()
        assert isinstance(payload, ev.ContributionRecorded)
        assert payload.prompt_hash == ev.prompt_hash(expected_messages)

        state = ledger.state(agg.id)
        c = state.rounds[0].contribution_of("p0")
        assert c is not None
        assert [m.model_dump() for m in ledger.prompt(agg.id, c)] == expected_messages
        assert state.answer(c) == "Use a write-through cache."
        assert state.tokens.input == 20
        assert state.cost_usd == pytest.approx(0.002)

        # verification hashes what is stored (v1), not the upcast v2 dict
        report = verify_session(ledger, agg.id)
        assert report.ok, report.as_json()
        assert report.events == position


def test_session_continues_after_an_upcast_event(sqlite_url: str) -> None:
    b = _session_with_open_round(sqlite_url)
    agg = b.aggregate
    position = _write_v1_row(sqlite_url, b)
    with Ledger(sqlite_url, snapshot_interval=2, create=False) as ledger:
        loaded = ledger.get(agg.id)
        assert loaded.version == position
        SessionBuilder.of(loaded, clock=b.clock).answer("p1", "an answer").close_round()
        ledger.save(loaded)
        report = verify_session(ledger, agg.id)
        assert report.ok, report.as_json()
        assert report.events == position + 2, report.as_json()
        again = ledger.get(agg.id).state
        assert again.rounds[0].contributors == ["p0", "p1"]
        assert again.rounds[0].status.value == "complete"


def test_v1_without_system_prompt() -> None:
    upcast = ev.UPCASTERS[("ContributionRecorded", 1)]({**V1_DATA, "system": ""})
    assert upcast["messages"] == [{"role": "user", "content": "Draft a caching design."}]
    assert ev.ContributionRecorded.model_validate(upcast).messages[0].role == "user"
    # an explicit v1 prompt_hash is kept, not recomputed
    kept = ev.UPCASTERS[("ContributionRecorded", 1)]({**V1_DATA, "prompt_hash": "abc"})
    assert kept["prompt_hash"] == "abc"
