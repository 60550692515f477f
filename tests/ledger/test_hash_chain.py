"""Hash chain tamper detection: edit the stored rows behind the ledger's back, then verify.

SQLite rows are edited with raw ``sqlite3`` on ``stored_events`` (``state`` is UTF-8 JSON);
PostgreSQL rows with ``psycopg`` on ``<schema>.forgeledger_events`` (``state`` is bytea).
Every alteration must be reported at the first position it breaks.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from forge_ledger.domain.aggregate import Deliberation
from forge_ledger.domain.hashing import GENESIS, chain_hash
from forge_ledger.domain.values import RoundKind, SessionStatus, TokenCount
from forge_ledger.ledger import Ledger, resolve_store, verify_session, verify_store
from forge_ledger.testing import SessionBuilder
from support.store import raw_connection, unpack

NAMES = ("p0", "p1", "p2")
ANSWER = {"tokens": TokenCount(input=12, output=34), "cost_usd": 0.0015}
"""What every answer costs (an edit setting the cost to 0.0 changes it)."""


def _build(ledger: Ledger, *, finish: bool = False, key: bytes | None = None) -> Deliberation:
    """Three participants draft, then all agree; ``finish`` converges and seals (under ``key``)."""
    b = SessionBuilder(store=ledger, answer_defaults=ANSWER)
    b.start("Ledger test topic", participants=NAMES)
    b.round(RoundKind.DRAFT, iteration=1, answers=dict.fromkeys(NAMES, "an answer"), close=True)
    b.round(RoundKind.CONVERGENCE, iteration=1, answers=dict.fromkeys(NAMES, "agreed"),
            votes=dict.fromkeys(NAMES, True), close=True)
    if finish:
        b.finish(SessionStatus.CONVERGED).seal(key=key)
    return b.save().aggregate


def _position_of(ledger: Ledger, sid: uuid.UUID, type_name: str) -> int:
    return next(e.position for e in ledger.events(sid) if e.type == type_name)


@pytest.fixture
def sqlite_ledger(sqlite_url: str) -> Iterator[tuple[Ledger, Deliberation, sqlite3.Connection]]:
    ledger = Ledger(sqlite_url, snapshot_interval=0)
    agg = _build(ledger)
    con = raw_connection(sqlite_url, isolation_level=None)
    yield ledger, agg, con
    con.close()
    ledger.close()


def _where(agg: Deliberation, position: int) -> tuple[str, tuple[object, ...]]:
    return "originator_id = ? AND originator_version = ?", (agg.id.hex, position)


def test_untouched_ledger_verifies(
    sqlite_ledger: tuple[Ledger, Deliberation, sqlite3.Connection],
) -> None:
    ledger, agg, _ = sqlite_ledger
    report = verify_session(ledger, agg.id)
    assert report.ok, report.as_json()
    assert report.events == agg.version
    assert report.head_hash == agg.state.head_hash
    assert [r.ok for r in verify_store(ledger)] == [True]


def test_stored_hashes_recompute_from_first_principles(
    sqlite_ledger: tuple[Ledger, Deliberation, sqlite3.Connection],
) -> None:
    ledger, agg, _ = sqlite_ledger
    prev = GENESIS
    for e in ledger.events(agg.id):
        assert e.prev_hash == prev
        assert e.hash == chain_hash(
            session_id=str(agg.id), position=e.position, type_name=e.type,
            timestamp=e.timestamp, data=e.data, prev_hash=prev,
        )
        prev = e.hash


def test_flipped_byte_in_state(
    sqlite_ledger: tuple[Ledger, Deliberation, sqlite3.Connection],
) -> None:
    ledger, agg, con = sqlite_ledger
    pos = _position_of(ledger, agg.id, "ContributionRecorded")
    where, args = _where(agg, pos)
    (blob,) = con.execute(f"SELECT state FROM stored_events WHERE {where}", args).fetchone()
    raw = bytearray(unpack(blob))
    i = raw.index(b"an answer")
    raw[i] ^= 0x01  # 'a' -> '`'
    con.execute(f"UPDATE stored_events SET state = ? WHERE {where}", (bytes(raw), *args))
    report = verify_session(ledger, agg.id)
    assert not report.ok
    assert report.position == pos
    assert "altered" in report.problem
    assert report.as_json()["first_bad_position"] == pos


def test_flipped_byte_breaking_json(
    sqlite_ledger: tuple[Ledger, Deliberation, sqlite3.Connection],
) -> None:
    ledger, agg, con = sqlite_ledger
    where, args = _where(agg, 3)
    con.execute(
        f"UPDATE stored_events SET state = CAST(X'7E' || substr(state, 2) AS BLOB) WHERE {where}",
        args,
    )
    report = verify_session(ledger, agg.id)
    assert (report.ok, report.position) == (False, 3)
    assert "cannot be decoded" in report.problem


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("$.data.response.content", "a quietly different answer"),
        ("$.data.response.cost_usd", 0.0),
        ("$.data.participant", "p2"),
        ("$.timestamp._data_", "2030-01-01T00:00:00+00:00"),
    ],
)
def test_json_set_edit(
    sqlite_ledger: tuple[Ledger, Deliberation, sqlite3.Connection], path: str, value: object,
) -> None:
    ledger, agg, con = sqlite_ledger
    pos = _position_of(ledger, agg.id, "ContributionRecorded")
    where, args = _where(agg, pos)
    con.execute(
        "UPDATE stored_events SET state = "
        f"CAST(json_set(CAST(unpack(state) AS TEXT), ?, ?) AS BLOB) WHERE {where}",
        (path, value, *args),
    )
    (text,) = con.execute(
        f"SELECT json_extract(CAST(unpack(state) AS TEXT), ?) FROM stored_events WHERE {where}",
        (path, *args),
    ).fetchone()
    assert text == value  # the edit really landed
    report = verify_session(ledger, agg.id)
    assert (report.ok, report.position) == (False, pos), report.as_json()
    assert "does not match its hash" in report.problem


def test_edit_with_recomputed_hash_breaks_the_next_link(
    sqlite_ledger: tuple[Ledger, Deliberation, sqlite3.Connection],
) -> None:
    """A forger who fixes the edited event's own hash still breaks its successor's link."""
    ledger, agg, con = sqlite_ledger
    pos = _position_of(ledger, agg.id, "ContributionRecorded")
    e = next(x for x in ledger.events(agg.id) if x.position == pos)
    data = {**e.data, "response": {**e.data["response"], "content": "forged"}}
    forged = chain_hash(
        session_id=str(agg.id), position=pos, type_name=e.type,
        timestamp=e.timestamp, data=data, prev_hash=e.prev_hash,
    )
    where, args = _where(agg, pos)
    con.execute(
        "UPDATE stored_events SET state = CAST(json_set(json_set(CAST(unpack(state) AS TEXT), "
        f"'$.data.response.content', 'forged'), '$.hash', ?) AS BLOB) WHERE {where}",
        (forged, *args),
    )
    report = verify_session(ledger, agg.id)
    assert (report.ok, report.position) == (False, pos + 1)
    assert "prev_hash" in report.problem


@pytest.mark.parametrize("victim", ["first", "middle", "last"])
def test_deleted_row(
    sqlite_ledger: tuple[Ledger, Deliberation, sqlite3.Connection], victim: str,
) -> None:
    ledger, agg, con = sqlite_ledger
    pos = {"first": 1, "middle": agg.version // 2, "last": agg.version}[victim]
    where, args = _where(agg, pos)
    assert con.execute(f"DELETE FROM stored_events WHERE {where}", args).rowcount == 1
    report = verify_session(ledger, agg.id)
    if victim == "last":
        # a truncated tail is only detectable against a seal or a known head hash
        assert report.ok
        assert report.events == agg.version - 1
        assert report.head_hash != agg.state.head_hash
    else:
        assert (report.ok, report.position) == (False, pos)
        assert f"event {pos} is missing" in report.problem


def test_checking_the_whole_store_finds_a_session_whose_first_event_is_gone(
    sqlite_ledger: tuple[Ledger, Deliberation, sqlite3.Connection],
) -> None:
    """Sessions are listed by their first event: without it one would go unchecked."""
    ledger, agg, con = sqlite_ledger
    where, args = _where(agg, 1)
    assert con.execute(f"DELETE FROM stored_events WHERE {where}", args).rowcount == 1
    assert agg.id not in ledger.session_ids()
    (report,) = verify_store(ledger)
    assert (report.session_id, report.ok, report.position) == (str(agg.id), False, 1)
    assert "event 1 is missing" in report.problem


def test_swapped_positions(
    sqlite_ledger: tuple[Ledger, Deliberation, sqlite3.Connection],
) -> None:
    ledger, agg, con = sqlite_ledger
    a, b = 6, 7
    con.execute("BEGIN")
    for frm, to in ((a, -1), (b, a), (-1, b)):
        con.execute(
            "UPDATE stored_events SET originator_version = ? "
            "WHERE originator_id = ? AND originator_version = ?",
            (to, agg.id.hex, frm),
        )
    con.execute("COMMIT")
    report = verify_session(ledger, agg.id)
    assert (report.ok, report.position) == (False, a)
    assert "removed, inserted or reordered" in report.problem


def test_seal_detects_truncation_and_hmac_detects_rewrite(sqlite_url: str) -> None:
    key = b"team secret"
    with Ledger(sqlite_url, snapshot_interval=0) as ledger:
        agg = _build(ledger, finish=True, key=key)
        report = verify_session(ledger, agg.id, key=key)
        assert report.ok
        assert report.sealed
        assert report.seal_ok
        assert report.hmac_ok
        wrong = verify_session(ledger, agg.id, key=b"other key")
        assert (wrong.ok, wrong.position) == (False, agg.version)
        assert "HMAC" in wrong.problem
    # rewrite every hash after an edit (a forger without the key): only the HMAC catches it
    events = []
    with Ledger(sqlite_url, snapshot_interval=0, create=False) as ledger:
        events = list(ledger.events(agg.id))
    con = raw_connection(sqlite_url, isolation_level=None)
    prev = GENESIS
    con.execute("BEGIN")
    for e in events:
        data = e.data
        if e.type == "ParticipantJoined" and e.position == 2:
            data = {"participant": {**data["participant"], "model": "openai/forged"}}
        if e.type == "SessionSealed":
            data = {**data, "root_hash": prev}
        h = chain_hash(
            session_id=str(agg.id), position=e.position, type_name=e.type,
            timestamp=e.timestamp, data=data, prev_hash=prev,
        )
        con.execute(
            "UPDATE stored_events SET state = CAST(json_set(CAST(unpack(state) AS TEXT), '$.data', "
            "json(?), '$.prev_hash', ?, '$.hash', ?) AS BLOB) "
            "WHERE originator_id = ? AND originator_version = ?",
            (json.dumps(data), prev, h, agg.id.hex, e.position),
        )
        prev = h
    con.execute("COMMIT")
    con.close()
    with Ledger(sqlite_url, snapshot_interval=0, create=False) as ledger:
        assert verify_session(ledger, agg.id).ok  # without the key the rewrite is consistent
        keyed = verify_session(ledger, agg.id, key=key)
        assert (keyed.ok, keyed.position) == (False, agg.version)


# --------------------------------------------------------------------------- PostgreSQL


def _pg(url: str) -> tuple[psycopg.Connection[tuple[object, ...]], str]:
    loc = resolve_store(url)
    conn = psycopg.connect(
        host=loc.host, port=loc.port, dbname=loc.dbname, user=loc.user or None, autocommit=True,
    )
    return conn, f'"{loc.schema}".forgeledger_events'


@pytest.mark.postgres
def test_postgres_untouched_then_json_edit(pg_url: str) -> None:
    with Ledger(pg_url, snapshot_interval=0) as ledger:
        agg = _build(ledger)
        pos = _position_of(ledger, agg.id, "ContributionRecorded")
        conn, table = _pg(pg_url)
        with conn:
            # re-serialise every row through jsonb (key order, spacing change): still verifies,
            # because the hash covers canonical JSON of the values, not the stored bytes
            conn.execute(
                f"UPDATE {table} SET state = convert_to("
                "convert_from(state, 'UTF8')::jsonb::text, 'UTF8') WHERE originator_id = %s",
                (agg.id,),
            )
            assert verify_session(ledger, agg.id).ok
            conn.execute(
                f"UPDATE {table} SET state = convert_to(jsonb_set("
                "convert_from(state, 'UTF8')::jsonb, '{data,response,content}', "
                "'\"edited\"')::text, 'UTF8') "
                "WHERE originator_id = %s AND originator_version = %s",
                (agg.id, pos),
            )
        report = verify_session(ledger, agg.id)
        assert (report.ok, report.position) == (False, pos)
        assert "does not match its hash" in report.problem


@pytest.mark.postgres
def test_postgres_deleted_row(pg_url: str) -> None:
    with Ledger(pg_url, snapshot_interval=0) as ledger:
        agg = _build(ledger)
        assert verify_session(ledger, agg.id).ok
        conn, table = _pg(pg_url)
        with conn:
            cur = conn.execute(
                f"DELETE FROM {table} WHERE originator_id = %s AND originator_version = %s",
                (agg.id, 5),
            )
            assert cur.rowcount == 1
        report = verify_session(ledger, agg.id)
        assert (report.ok, report.position) == (False, 5)
        assert "event 5 is missing" in report.problem


# --------------------------------------------------------------------------- forks


def _forked(ledger: Ledger, agg: Deliberation) -> tuple[uuid.UUID, int]:
    """A fork of ``agg`` after its first iteration: (fork id, fork point)."""
    from forge_ledger.clock import FixedStepClock, SequentialIds
    from forge_ledger.records.lineage import fork

    fid = fork(ledger, agg.id, clock=FixedStepClock(), ids=SequentialIds("f"), at_iteration=1)
    origin = ledger.state(fid).fork_origin
    assert origin is not None
    return fid, origin.parent_position


def test_a_fork_verifies_through_its_parent_up_to_the_fork_point(
    sqlite_ledger: tuple[Ledger, Deliberation, sqlite3.Connection],
) -> None:
    """A fork reads every position before its fork point in its parent, so an edit there
    breaks the fork's chain too; an edit after the fork point breaks only the parent's."""
    ledger, agg, con = sqlite_ledger
    fid, k = _forked(ledger, agg)
    assert verify_session(ledger, fid).ok
    where, args = _where(agg, 2)
    con.execute(
        "UPDATE stored_events SET state = CAST(json_set(CAST(unpack(state) AS TEXT), "
        f"'$.timestamp', '2001-01-01T00:00:00+00:00') AS BLOB) WHERE {where}", args,
    )
    report = verify_session(ledger, fid)
    assert (report.ok, report.position) == (False, k)
    assert f"the parent {str(agg.id)[:8]} fails at position 2 before the fork point" in (
        report.problem
    )


def test_a_fork_without_its_parent_does_not_verify(
    sqlite_ledger: tuple[Ledger, Deliberation, sqlite3.Connection],
) -> None:
    ledger, agg, con = sqlite_ledger
    fid, k = _forked(ledger, agg)
    con.execute("DELETE FROM stored_events WHERE originator_id = ?", (agg.id.hex,))
    report = verify_session(ledger, fid)
    assert (report.ok, report.position) == (False, k)
    assert f"parent {str(agg.id)[:8]} is not in this store" in report.problem


def test_a_fork_of_a_fork_before_its_fork_point_verifies_through_the_first_parent(
    sqlite_ledger: tuple[Ledger, Deliberation, sqlite3.Connection],
) -> None:
    """A fork taken from another fork at a point that fork inherited reads that point in the
    first parent: its chain is checked there, and an edit there breaks it."""
    from forge_ledger.clock import FixedStepClock, SequentialIds
    from forge_ledger.records.lineage import fork

    ledger, agg, con = sqlite_ledger
    first, k = _forked(ledger, agg)
    drafted = _position_of(ledger, agg.id, "RoundCompleted")  # the drafts, before the vote
    assert 2 < drafted < k
    second = fork(ledger, first, clock=FixedStepClock(), ids=SequentialIds("g"), at_event=drafted)
    origin = ledger.state(second).fork_origin
    assert origin is not None
    assert (origin.parent_id, origin.parent_position) == (str(first), drafted)
    assert verify_session(ledger, second).ok
    where, args = _where(agg, 2)
    con.execute(
        "UPDATE stored_events SET state = CAST(json_set(CAST(unpack(state) AS TEXT), "
        f"'$.timestamp', '2001-01-01T00:00:00+00:00') AS BLOB) WHERE {where}", args,
    )
    report = verify_session(ledger, second)
    assert (report.ok, report.position) == (False, drafted)
    assert "fails at position 2 before the fork point" in report.problem
