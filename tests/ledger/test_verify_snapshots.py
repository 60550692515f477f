"""``verify`` checks each snapshot against the events up to it: a snapshot is what loads and
time travel start from, so an altered one would change what every reader sees while the
events still verify. One that differs is named, and ``--drop-bad-snapshots`` deletes it."""

from __future__ import annotations

import json
import re
import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from eventsourcing.persistence import StoredEvent

from forge_ledger.domain import RoundKind
from forge_ledger.domain import events as ev
from forge_ledger.engine.outcomes import after_round
from forge_ledger.ledger import Ledger
from forge_ledger.ledger.compression import unpack
from forge_ledger.ledger.texts import refer_to_texts
from forge_ledger.ledger.verify import verify_session
from forge_ledger.testing import SessionBuilder
from support.cli import assert_one_error_line, one_json, run_cli


def _session(url: str) -> uuid.UUID:
    """Votes, an evaluation, a rewind and its resume: a snapshot every 5 events."""
    with Ledger(url, snapshot_interval=5) as ledger:
        b = SessionBuilder(store=ledger).start("t", participants=["a", "b"])
        for it in range(1, 10):  # 18 rounds: the first 16 make a full block
            b.round(RoundKind.DRAFT, iteration=it, answers={"a": f"draft {it} " * 30},
                    close=True).save()
            b.round(RoundKind.CONVERGENCE, iteration=it, answers={"a": "yes", "b": "no " * 60},
                    votes={"a": True, "b": it % 2 == 0}, close=True)
            for payload in after_round(b.state, b.round_number):
                if isinstance(payload, ev.ConvergenceEvaluated):
                    b.aggregate.evaluate_convergence(payload, at=b.clock.now())
            b.save()
            if it == 2:
                b.aggregate.rewind(1, at=b.clock.now())
                b.aggregate.resume(at=b.clock.now())
                b.save()
        return b.id


def _positions(url: str, sid: uuid.UUID) -> list[int]:
    with Ledger(url, create=False) as ledger:
        return [int(s.originator_version) for s in ledger.stored_snapshots(sid)]


def _rewrite(url: str, sid: uuid.UUID, position: int, change: Callable[[str], str]) -> None:
    """Store the snapshot at ``position`` again, its state's document changed by ``change``."""
    with Ledger(url, create=False) as ledger:
        (row,) = [s for s in ledger.stored_snapshots(sid) if s.originator_version == position]
        content = json.loads(unpack(row.state))
        held = content["state"]["state"]
        held["_data_"] = change(held["_data_"])
        body = json.dumps(content, separators=(",", ":"), ensure_ascii=False).encode()
        ledger.drop_snapshots(sid, [position])
        assert ledger.app.snapshots is not None
        ledger.app.snapshots.recorder.insert_events([StoredEvent(
            originator_id=sid, originator_version=position, topic=row.topic,
            state=ledger.app.mapper.compressor.compress(body)  # type: ignore[union-attr]
        )])


def test_every_snapshot_matches_its_events(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sid = _session(store_url)
    positions = _positions(store_url, sid)
    assert len(positions) >= 5
    code, out, err = run_cli(capsys, "verify", str(sid), "--store", store_url, "--json")
    assert code == 0, err
    (report,) = one_json(out)["sessions"]
    assert report["ok"] is True
    assert report["snapshots"] == len(positions)
    assert report["bad_snapshots"] == []
    code, out, _ = run_cli(capsys, "verify", "--store", store_url)
    assert code == 0
    assert f"{len(positions)} ok" in out


def test_an_altered_snapshot_is_named_and_dropped(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sid = _session(store_url)
    positions = _positions(store_url, sid)
    target = positions[len(positions) // 2]
    _rewrite(store_url, sid, target, lambda doc: doc.replace('"title":"t"', '"title":"x"', 1))
    with Ledger(store_url, create=False) as ledger:
        assert ledger.state(sid, at_event=target).topic.title == "x"  # what readers would see

    code, _, err = run_cli(capsys, "verify", str(sid), "--store", store_url)
    line = assert_one_error_line(err)
    assert code == 1
    assert (f"its events verify, but the snapshot at event {target} does not match the "
            "events up to it") in line
    assert "--drop-bad-snapshots" in line
    code, out, _ = run_cli(capsys, "verify", str(sid), "--store", store_url, "--json")
    assert code == 1
    (report,) = one_json(out)["sessions"]
    assert (report["ok"], report["first_bad_position"], report["bad_snapshots"]) == (
        False, target, [target])

    code, out, err = run_cli(capsys, "verify", str(sid), "--drop-bad-snapshots",
                             "--store", store_url, "--json")
    assert code == 0, err
    doc = one_json(out)
    assert doc["ok"] is True
    assert doc["dropped_snapshots"] == {str(sid): [target]}
    assert _positions(store_url, sid) == [p for p in positions if p != target]
    with Ledger(store_url, create=False) as ledger:
        assert ledger.state(sid, at_event=target).topic.title == "t"


def test_a_damaged_block_is_found_in_every_snapshot_naming_it(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sid = _session(sqlite_url)
    positions = _positions(sqlite_url, sid)
    with Ledger(sqlite_url, create=False) as ledger:
        rows = ledger.stored_snapshots(sid)
    first = next(r for r in rows if b'\\"blocks\\":[\\"' in unpack(r.state))
    (address,) = re.findall(rb'\\"blocks\\":\[\\"([0-9a-f]{64})', unpack(first.state))[:1]
    naming = [int(r.originator_version) for r in rows if address in unpack(r.state)]
    con = sqlite3.connect(sqlite_url)
    con.execute("UPDATE forge_texts SET body = ? WHERE sha256 = ?",
                ("[]", bytes.fromhex(address.decode())))
    con.commit()
    con.close()
    code, out, _ = run_cli(capsys, "verify", str(sid), "--store", sqlite_url, "--json")
    assert code == 1
    (report,) = one_json(out)["sessions"]
    assert report["bad_snapshots"] == naming
    assert "which the store does not hold intact" in report["problem"]
    code, _, err = run_cli(capsys, "verify", "--drop-bad-snapshots", "--store", sqlite_url)
    assert code == 0, err
    assert _positions(sqlite_url, sid) == [p for p in positions if p not in naming]
    code, _, err = run_cli(capsys, "show", str(sid), "--store", sqlite_url)
    assert code == 0, err


def test_a_snapshot_laid_out_without_blocks_is_compared_by_its_state(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Snapshots written before blocks hold their lists inline: they verify by what they
    decode to, and an altered one is still found."""
    sid = _session(sqlite_url)
    positions = _positions(sqlite_url, sid)
    old, altered = positions[1], positions[2]
    for position, change in ((old, {}), (altered, {"title": "x"})):
        with Ledger(sqlite_url, create=False) as ledger:
            state = ledger.state(sid, at_event=position)
            if change:
                state = state.model_copy(update={"topic": state.topic.model_copy(update=change)})
            texts: dict[str, str] = {}
            inline = refer_to_texts(state.model_dump_json(exclude_defaults=True), texts)
        assert '"blocks"' not in inline
        _rewrite(sqlite_url, sid, position, lambda _doc, inline=inline: inline)
    code, out, _ = run_cli(capsys, "verify", str(sid), "--store", sqlite_url, "--json")
    (report,) = one_json(out)["sessions"]
    assert report["bad_snapshots"] == [altered]
    assert code == 1


def test_verify_reads_a_store_without_snapshots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = str(tmp_path / "plain.sqlite")
    with Ledger(url, snapshot_interval=0) as ledger:
        b = SessionBuilder(store=ledger).start("t", participants=["a"])
        b.round(RoundKind.DRAFT, answers={"a": "x"}, close=True).save()
    code, out, err = run_cli(capsys, "verify", "--store", url, "--json")
    assert code == 0, err
    (report,) = one_json(out)["sessions"]
    assert report["snapshots"] == 0


def test_a_save_during_verify_is_not_taken_for_a_bad_snapshot(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that commits events and a snapshot while ``verify`` reads: the snapshots
    are read first, so each one read has its events in the chain read after."""
    sid = _session(sqlite_url)
    writer = Ledger(sqlite_url, create=False, snapshot_interval=5)
    builder = SessionBuilder.of(writer.get(sid), store=writer)
    reading = Ledger.stored_snapshots

    def write_then_read(self: Ledger, session_id: uuid.UUID) -> list[StoredEvent]:
        for _ in range(2):  # at least one more snapshot
            builder.round(RoundKind.DRAFT, answers={"a": "more"}, close=True).save()
        return reading(self, session_id)

    with Ledger(sqlite_url, create=False) as ledger:
        monkeypatch.setattr(Ledger, "stored_snapshots", write_then_read)
        report = verify_session(ledger, sid, snapshots=True)
    monkeypatch.undo()
    writer.close()
    assert report.ok, report.problem
    assert report.snapshots == len(_positions(sqlite_url, sid))


def test_a_snapshot_row_of_the_wrong_kind_is_found(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sid = _session(sqlite_url)
    target = _positions(sqlite_url, sid)[1]
    con = sqlite3.connect(sqlite_url)
    con.execute("UPDATE stored_snapshots SET topic = 'nope.nope:Nope' WHERE originator_version = ?",
                (target,))
    con.commit()
    con.close()
    code, out, _ = run_cli(capsys, "verify", str(sid), "--store", sqlite_url, "--json")
    (report,) = one_json(out)["sessions"]
    assert code == 1
    assert report["bad_snapshots"] == [target]
    assert "wrong kind of snapshot" in report["problem"]


def test_a_snapshot_taken_to_compare_leaves_the_session_as_it_was(sqlite_url: str) -> None:
    """``Ledger.snapshot_of`` on a live session stores nothing and changes nothing its later
    snapshots depend on: they still name only blocks that were written."""
    with Ledger(sqlite_url, snapshot_interval=7) as ledger:
        b = SessionBuilder(store=ledger).start("t", participants=["a", "b"])
        for it in range(1, 41):  # full blocks of rounds, each encoded here before it is saved
            b.round(RoundKind.DRAFT, iteration=it, answers={"a": f"draft {it}"}, close=True)
            ledger.snapshot_of(b.aggregate)  # encodes blocks not stored yet
            b.save()
        report = verify_session(ledger, b.id, snapshots=True)
        assert report.ok, report.problem
        assert report.snapshots
        with Ledger(sqlite_url, create=False) as again:
            assert again.state(b.id).version == b.aggregate.version


def test_dropping_snapshots_is_for_sessions_not_an_export(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _session(sqlite_url)
    code, _, err = run_cli(capsys, "verify", "--export", str(tmp_path / "x.yaml"),
                           "--drop-bad-snapshots", "--store", sqlite_url)
    assert code == 2
    assert "--drop-bad-snapshots checks sessions" in assert_one_error_line(err)
