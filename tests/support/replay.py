"""Replay checks shared by the replay tests (no tests here): identical replays, tampering."""

from __future__ import annotations

import json
from datetime import datetime
from uuid import UUID

from forge_ledger.domain.hashing import chain_hash
from forge_ledger.domain.topics import TOPIC_PREFIX
from forge_ledger.ledger import Ledger, RecordedEvent
from forge_ledger.ledger.texts import resolve
from forge_ledger.records.replay import ReplayResult
from support.store import raw_connection, unpack


def recorded_calls(events: list[RecordedEvent]) -> tuple[int, int]:
    """(calls a replay must serve, calls that reached the server) from the record."""
    served = sent = 0
    for e in events:
        if e.type == "ContributionRecorded":
            served += 1
            sent += 1
        elif e.type == "ProviderCallFailed":
            kind = e.data["error_type"]
            if kind != "budget_cost":
                served += 1
            if kind not in ("budget_cost", "budget_time"):
                sent += 1
    return served, sent


def assert_identical(result: ReplayResult, events: list[RecordedEvent]) -> None:
    assert result.difference is None, result.difference and result.difference.as_json()
    assert result.ok
    assert result.events == len(events)
    assert result.matched == result.events
    assert result.generated + result.external == result.events
    assert result.calls_served == recorded_calls(events)[0]


def first_dissenting_vote(events: list[RecordedEvent]) -> tuple[RecordedEvent, RecordedEvent]:
    """(the ContributionRecorded of the first vote that disagrees, its VoteRecorded)."""
    vote = next(e for e in events if e.type == "VoteRecorded" and not e.data["vote"]["agrees"])
    contribution = [
        e
        for e in events
        if e.type == "ContributionRecorded"
        and e.data["round"] == vote.data["round"]
        and e.data["participant"] == vote.data["participant"]
        and e.position < vote.position
    ][-1]
    return contribution, vote


AGREEING_VOTE = json.dumps(
    {"agrees": True, "score": 90, "stance": "agree", "concerns": [], "reasoning": "fine now"},
)


def tamper_content(url: str, sid: UUID, position: int, content: str, *, rehash: bool) -> None:
    """Edit ``data.response.content`` of the event at ``position`` in the SQLite row.

    With ``rehash`` the editor also recomputes every later hash and link (a forger who knows
    the chain format, which hashes the texts an event refers to): the chain verifies again,
    only replay can tell.
    """
    texts = Ledger(url, create=False)  # reads stored texts as the ledger stores them
    conn = raw_connection(url)
    try:
        rows = conn.execute(
            "SELECT rowid, originator_version, topic, state FROM stored_events "
            "WHERE originator_id = ? AND originator_version >= ? ORDER BY originator_version",
            (sid.hex, position - 1),
        ).fetchall()
        prev_hash: str | None = None
        for rowid, version, topic, blob in rows:
            state = json.loads(unpack(blob))
            if version == position - 1:
                prev_hash = state["hash"]
                continue
            if version == position:
                state["data"]["response"]["content"] = content
            if not rehash and version > position:
                break
            if rehash:
                state["prev_hash"] = prev_hash
                state["hash"] = chain_hash(
                    session_id=str(sid),
                    position=version,
                    type_name=topic.removeprefix(TOPIC_PREFIX),
                    timestamp=datetime.fromisoformat(state["timestamp"]["_data_"]),
                    data=resolve(state["data"], texts.texts),
                    prev_hash=state["prev_hash"],
                )
                prev_hash = state["hash"]
            conn.execute(
                "UPDATE stored_events SET state = ? WHERE rowid = ?",
                (json.dumps(state, separators=(",", ":")).encode(), rowid),
            )
        conn.commit()
    finally:
        conn.close()
        texts.close()
