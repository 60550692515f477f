"""Each text once: long texts are stored once per store by SHA-256 and read back exactly.

The same session is written twice, once with texts by reference (the default) and once with
every text inline (``MIN_LENGTH`` raised past every text, which is how events were stored
before); what the commands print must be identical. The text table is then damaged behind
the ledger's back, and ``verify`` must report it.
"""

from __future__ import annotations

import json
import shutil
import threading
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from psycopg.pq import TransactionStatus

from forge_ledger.cli import cli
from forge_ledger.domain import events as ev
from forge_ledger.domain.aggregate import Deliberation
from forge_ledger.domain.values import ChatMessage, RoundKind, SessionStatus
from forge_ledger.errors import ConcurrencyConflictError, StoreError
from forge_ledger.ledger import (
    Ledger,
    resolve_store,
    text_write_cache,
    texts,
    texts_sqlite,
    verify_session,
)
from forge_ledger.testing import SessionBuilder
from support.store import raw_connection, text_bodies

SYSTEM = "You deliberate on a specification. Answer as JSON: " + "{schema} " * 40
SID = uuid.UUID("00000000-0000-4000-8000-0000000000aa")
NAMES = ("p0", "p1")


def _answer(round_no: int, who: str) -> str:
    return f"# Draft by {who}, round {round_no}\n" + f"point {who} {round_no}. " * 30


def _prompt(round_no: int, who: str) -> list[ChatMessage]:
    """A long system prompt shared by every call, and a user prompt per call."""
    return [
        ChatMessage(role="system", content=SYSTEM),
        ChatMessage(role="user", content=f"Round {round_no} for {who}. " * 10),
    ]


def _build(session_id: uuid.UUID = SID, *, variant: str = "") -> Deliberation:
    """Two participants draft and synthesise, long texts throughout, and converge (``variant``
    ends every answer: other texts)."""
    b = SessionBuilder(prompt=_prompt, answer_defaults={
        "model": "openai/scripted", "params": ev.CallParams(temperature=0.2, max_tokens=256),
    })
    b.start("Ledger test topic", participants=NAMES, session_id=session_id)
    for it, kind in ((1, RoundKind.DRAFT), (2, RoundKind.SYNTHESIS)):
        b.round(kind, iteration=it, participants=NAMES)
        for who in NAMES:
            b.answer(who, _answer(b.round_number, who) + variant)
        b.close_round()
    return b.finish(SessionStatus.CONVERGED).aggregate


def _outputs(url: str, tmp: Path) -> dict[str, str]:
    runner = CliRunner()
    out = {}
    for name, args in {
        "log": ["log", str(SID), "--json"],
        "spec": ["spec", str(SID), "--json"],
        "show": ["show", str(SID), "--json"],
        "export": ["export", str(SID), "-o", str(tmp / "export.yaml")],
    }.items():
        result = runner.invoke(cli, [*args, "--store", url])
        assert result.exit_code == 0, result.output
        out[name] = result.stdout
    out["export"] = (tmp / "export.yaml").read_text()
    return out


def _text_rows(url: str) -> list[tuple[str, str]]:
    loc = resolve_store(url)
    if loc.kind == "sqlite":
        with raw_connection(url) as con:
            rows = con.execute(f"SELECT address(sha256), unpack_text(body) FROM {texts.TEXT_TABLE}")
            return list(rows)
    with psycopg.connect(dbname=loc.dbname, host=loc.host, port=loc.port, user=loc.user) as con:
        return list(con.execute(f"SELECT sha256, body FROM {loc.schema}.{texts.TEXT_TABLE}"))


def _execute(url: str, sql_sqlite: str, sql_pg: str, *params: Any) -> None:
    loc = resolve_store(url)
    if loc.kind == "sqlite":
        with raw_connection(url) as con:
            con.execute(sql_sqlite, params)
        return
    with psycopg.connect(dbname=loc.dbname, host=loc.host, port=loc.port, user=loc.user) as con:
        con.execute(sql_pg.format(schema=loc.schema), params)


def test_texts_are_stored_once_and_commands_print_them_unchanged(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    with Ledger(store_url) as ledger:
        agg = _build()
        inline_payloads = [dict(e.data) for e in agg.pending_events if hasattr(e, "data")]
        ledger.save(agg)
        assert [e.data for e in ledger.events(SID)] == inline_payloads
        assert verify_session(ledger, SID).ok
    rows = _text_rows(store_url)
    bodies = [body for _, body in rows]
    assert SYSTEM in bodies
    assert _answer(1, agg.state.participant_names[0]) in bodies
    assert len(bodies) == len(set(bodies)) == 1 + 2 * 2 + 2 * 2  # system once; prompts; answers
    assert all(texts.text_address(body) == address for address, body in rows)
    by_reference = _outputs(store_url, tmp_path)

    inline_url = str(tmp_path / "inline.sqlite")
    monkeypatch.setattr(texts, "MIN_LENGTH", 10**9)
    with Ledger(inline_url) as ledger:
        ledger.save(_build())
    assert _text_rows(inline_url) == []
    (tmp_path / "inline").mkdir()
    assert _outputs(inline_url, tmp_path / "inline") == by_reference
    assert SYSTEM in json.dumps(json.loads(by_reference["log"]))


def test_verify_reports_a_missing_or_altered_text(store_url: str) -> None:
    with Ledger(store_url) as ledger:
        ledger.save(_build())
    address = texts.text_address(SYSTEM)
    _execute(
        store_url,
        f"UPDATE {texts.TEXT_TABLE} SET body = unpack_text(body) || 'x' WHERE address(sha256) = ?",
        f"UPDATE {{schema}}.{texts.TEXT_TABLE} SET body = body || 'x' WHERE sha256 = %s",
        address,
    )
    with Ledger(store_url, create=False) as ledger:
        report = verify_session(ledger, SID)
    assert not report.ok
    assert "does not hash to its address" in report.problem
    first_contribution = 5  # started, 2 joined, round started, then the first answer
    assert report.position == first_contribution, report.as_json()
    _execute(
        store_url,
        f"DELETE FROM {texts.TEXT_TABLE} WHERE address(sha256) = ?",
        f"DELETE FROM {{schema}}.{texts.TEXT_TABLE} WHERE sha256 = %s",
        address,
    )
    with Ledger(store_url, create=False) as ledger:
        report = verify_session(ledger, SID)
    assert not report.ok
    assert "missing from the store" in report.problem


def test_a_state_is_built_without_reading_its_prompts(store_url: str) -> None:
    """Loading a session (its state, as of any position) never reads a prompt's text: the
    state refers to a prompt by its event. The events themselves still come back whole, so a
    missing prompt text stops ``events`` and ``verify``, not the state."""
    with Ledger(store_url, snapshot_interval=0) as ledger:
        agg = _build()
        ledger.save(agg)
        positions = range(1, agg.version + 1)
        before = [ledger.state(SID, at_event=v) for v in positions]
    _execute(
        store_url,
        f"DELETE FROM {texts.TEXT_TABLE} WHERE address(sha256) = ?",
        f"DELETE FROM {{schema}}.{texts.TEXT_TABLE} WHERE sha256 = %s",
        texts.text_address(SYSTEM),
    )
    with Ledger(store_url, snapshot_interval=0, create=False) as ledger:
        assert [ledger.state(SID, at_event=v) for v in positions] == before
        assert ledger.state(SID).answer(ledger.state(SID).rounds[0].contributions[0]) == _answer(
            1, NAMES[0])
        with pytest.raises(StoreError, match="missing from the store"):
            list(ledger.events(SID))
        assert not verify_session(ledger, SID).ok


def test_a_store_written_with_texts_inline_takes_new_sessions(tmp_path: Path) -> None:
    """The v1 fixture has no text table: the first save creates it, old sessions still verify."""
    url = str(tmp_path / "old.sqlite")
    shutil.copy(Path(__file__).parents[1] / "fixtures" / "store-v1.sqlite", url)
    with Ledger(url, create=False) as ledger:
        old = ledger.session_ids()
        ledger.save(_build())
        assert all(verify_session(ledger, sid).ok for sid in [*old, SID])
    assert len(_text_rows(url)) == 9


def _key_types(url: str) -> list[tuple[str, int]]:
    with raw_connection(url) as con:
        rows = con.execute(f"SELECT typeof(sha256), length(sha256) FROM {texts.TEXT_TABLE}")
        return sorted(set(rows))


def test_a_new_sqlite_store_keys_texts_by_the_digests_bytes(tmp_path: Path) -> None:
    """The key is stored twice (row and primary key index): 32 bytes, not 64 hex digits."""
    url = str(tmp_path / "new.sqlite")
    with Ledger(url) as ledger:
        ledger.save(_build())
    assert _key_types(url) == [("blob", 32)]
    assert len(_text_rows(url)) == 9


def test_a_store_keyed_by_hex_digests_is_rekeyed_by_its_first_write(tmp_path: Path) -> None:
    """The v2 fixture keys its texts by their hex digests: reading it changes nothing; its
    first write brings it to the current format (every text under its digest's bytes, the same
    text), after which a new session's texts are stored once, and every session verifies."""
    url = str(tmp_path / "v2.sqlite")
    shutil.copy(Path(__file__).parents[1] / "fixtures" / "store-v2.sqlite", url)
    before = text_bodies(url)
    assert _key_types(url) == [("text", 64)]
    with Ledger(url, create=False) as ledger:
        old = ledger.session_ids()
        assert all(verify_session(ledger, sid).ok for sid in old)
    assert text_bodies(url) == before
    with Ledger(url, create=False) as ledger:
        ledger.save(_build())
        assert all(verify_session(ledger, sid).ok for sid in [*old, SID])
        assert [e.data for e in ledger.events(SID)] == [
            dict(e.data) for e in _build().pending_events if hasattr(e, "data")
        ]
    after = text_bodies(url)
    assert _key_types(url) == [("blob", 32)]
    assert before.items() <= after.items()
    assert len(after) == len(before) + 9
    again = uuid.uuid4()
    with Ledger(url, create=False) as ledger:
        ledger.save(_build(again))
        assert verify_session(ledger, again).ok
    assert text_bodies(url) == after


@pytest.mark.postgres
@pytest.mark.parametrize("closed", [False, True], ids=["connection-open", "connection-closed"])
def test_an_interrupted_postgres_save_stores_nothing_and_is_not_retried(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, closed: bool
) -> None:
    """Ctrl-C during a save's transaction reaches the caller as it is, once: psycopg closes
    the connection itself on a second Ctrl-C, and rolling back on a closed connection raises
    an error of its own, which the save's retry on connection errors would have taken for a
    reason to save again. The interrupt is made to land after the save's statements ran and
    before its commit: the save's query is sent without its COMMIT."""
    from forge_ledger.ledger import texts_postgres
    from forge_ledger.ledger.texts_postgres import TextsPostgresRecorder

    calls = []
    query = TextsPostgresRecorder._save_query  # noqa: SLF001
    returned = texts_postgres._returned_ids  # noqa: SLF001

    def uncommitted(self: Any, *args: Any, **kwargs: Any) -> bytes:
        sent: bytes = query(self, *args, **kwargs)
        assert sent.endswith(b"; COMMIT")
        return sent.removesuffix(b"; COMMIT")

    def interrupted(curs: Any) -> list[int]:
        calls.append(1)
        assert returned(curs)
        assert curs.connection.info.transaction_status == TransactionStatus.INTRANS
        if closed:
            curs.connection.close()
        raise KeyboardInterrupt

    with Ledger(pg_url) as ledger:
        monkeypatch.setattr(TextsPostgresRecorder, "_save_query", uncommitted)
        monkeypatch.setattr(texts_postgres, "_returned_ids", interrupted)
        with pytest.raises(KeyboardInterrupt):
            ledger.save(_build())
        assert calls == [1]
        assert ledger.session_ids() == []
        monkeypatch.undo()
        ledger.save(_build())  # the pool gave back a usable connection
        assert verify_session(ledger, SID).ok
    assert len(_text_rows(pg_url)) == 9


def test_a_postgres_schema_without_the_text_table_gets_it_on_first_save(pg_url: str) -> None:
    with Ledger(pg_url):
        pass
    _execute(pg_url, "", f"DROP TABLE {{schema}}.{texts.TEXT_TABLE}")
    with Ledger(pg_url, create=False) as ledger:
        ledger.save(_build())
        assert verify_session(ledger, SID).ok
    assert len(_text_rows(pg_url)) == 9


def test_a_text_whose_save_lost_to_another_writer_is_stored_when_it_is_saved_again(
    store_url: str,
) -> None:
    """A writer remembers which texts its committed saves stored, and does not ask the store
    about them again; a save that lost to another writer stored nothing, so its texts must
    still be written by the retry."""
    b = SessionBuilder(prompt=_prompt)
    b.start("Lost saves", participants=NAMES, session_id=SID)
    b.round(RoundKind.DRAFT, iteration=1, participants=NAMES)
    note = "A note long enough to be stored apart from its event. " * 4
    with Ledger(store_url) as first, Ledger(store_url, create=False) as second:
        first.save(b.aggregate)
        mine, theirs = first.get(SID), second.get(SID)
        theirs.human_input(author="bo", text="Their note, stored first. " * 8, at=b.clock.now())
        second.save(theirs)
        mine.human_input(author="ada", text=note, at=b.clock.now())
        with pytest.raises(ConcurrencyConflictError):
            first.save(mine)
        again = first.get(SID)
        again.human_input(author="ada", text=note, at=b.clock.now())
        first.save(again)
        assert verify_session(first, SID).ok
        assert [e.data["text"] for e in first.events(SID) if e.type == "HumanInputRecorded"][
            -1
        ] == note
    assert texts.text_address(note) in dict(_text_rows(store_url))


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_text_table_created_by_a_save_that_lost_is_created_again(
    kind: str, tmp_path: Path, pg_url: str
) -> None:
    """A store without the text table (written before texts were stored apart): the save
    that would create it loses to another writer, so the table was never created; the retry
    creates it."""
    if kind == "sqlite":
        url = str(tmp_path / "old.sqlite")
        shutil.copy(Path(__file__).parents[1] / "fixtures" / "store-v1.sqlite", url)
    else:
        url = pg_url
        with Ledger(url):
            pass
        _execute(url, "", f"DROP TABLE {{schema}}.{texts.TEXT_TABLE}")
    note = "A note long enough to be stored apart from its event, in a table of texts. " * 3
    with Ledger(url, create=False) as first, Ledger(url, create=False) as second:
        b = SessionBuilder(store=first).start("No text table yet", participants=NAMES).save()
        mine, theirs = first.get(b.id), second.get(b.id)
        theirs.human_input(author="bo", text="short", at=b.clock.now())
        second.save(theirs)
        mine.human_input(author="ada", text=note, at=b.clock.now())
        with pytest.raises(ConcurrencyConflictError):
            first.save(mine)
        again = first.get(b.id)
        again.human_input(author="ada", text=note, at=b.clock.now())
        first.save(again)
        assert verify_session(first, b.id).ok
    assert texts.text_address(note) in dict(_text_rows(url))


def test_a_save_in_another_thread_never_makes_a_lost_saves_texts_known(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two threads share one writer. A commits; while its bookkeeping runs, B's transaction
    has inserted its texts and then loses to another writer. B's texts must not be taken
    for stored: its retry writes them. B starts only once A has committed (SQLite lets one
    writer in at a time), so the interleaving is the same on every run."""
    url = str(tmp_path / "s.sqlite")
    note_a = "Thread A's note, long enough to be stored apart from its event. " * 3
    note_b = "Thread B's note, long enough to be stored apart from its event. " * 3
    a_committed, b_inserted, a_learned = threading.Event(), threading.Event(), threading.Event()
    insert, learn = texts_sqlite._insert_texts, text_write_cache.KnownStoreContents.learn  # noqa: SLF001

    def inserting(c: Any, events: Any, facts: Any, learned: Any) -> None:
        insert(c, events, facts, learned)
        if threading.current_thread().name == "B":
            b_inserted.set()
            assert a_learned.wait(10)  # A's bookkeeping runs inside B's transaction

    def learning(
        self: text_write_cache.KnownStoreContents, learned: text_write_cache.TransactionFindings
    ) -> None:
        if threading.current_thread().name == "A":
            a_committed.set()
            assert b_inserted.wait(10)
            learn(self, learned)
            a_learned.set()
            return
        learn(self, learned)

    with Ledger(url) as ledger, Ledger(url, create=False) as other:
        a = SessionBuilder(store=ledger).start("A", participants=NAMES, session_id=uuid.uuid4())
        b = SessionBuilder(store=ledger).start("B", participants=NAMES, session_id=uuid.uuid4())
        a.save()
        b.save()
        mine_a, mine_b, theirs = ledger.get(a.id), ledger.get(b.id), other.get(b.id)
        theirs.human_input(author="bo", text="short", at=b.clock.now())
        other.save(theirs)
        mine_a.human_input(author="ada", text=note_a, at=a.clock.now())
        mine_b.human_input(author="ada", text=note_b, at=b.clock.now())
        monkeypatch.setattr(texts_sqlite, "_insert_texts", inserting)
        monkeypatch.setattr(text_write_cache.KnownStoreContents, "learn", learning)
        raised: dict[str, BaseException] = {}

        def save(name: str, session: Any) -> None:
            try:
                ledger.save(session)
            except BaseException as e:  # reported below, from the test's thread
                raised[name] = e

        saving_a = threading.Thread(target=save, args=("A", mine_a), name="A")
        saving_b = threading.Thread(target=save, args=("B", mine_b), name="B")
        saving_a.start()
        assert a_committed.wait(10)
        saving_b.start()
        for t in (saving_a, saving_b):
            t.join(30)
        monkeypatch.undo()
        assert "A" not in raised, raised
        assert isinstance(raised.get("B"), ConcurrencyConflictError), raised
        again = ledger.get(b.id)
        again.human_input(author="ada", text=note_b, at=b.clock.now())
        ledger.save(again)
        assert verify_session(ledger, b.id).ok
    assert texts.text_address(note_b) in dict(_text_rows(url))
