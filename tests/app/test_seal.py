"""Seals: verify then close a finished session (with an HMAC under a key); check exports."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import yaml

from forge_ledger.cli import main
from forge_ledger.clock import FixedStepClock
from forge_ledger.domain.hashing import keyed_digest
from forge_ledger.errors import ChainBrokenError, ImportValidationError, InvariantViolation
from forge_ledger.ledger import Ledger, verify_session
from forge_ledger.records.sealing import seal_session, verify_export
from support.store import raw_connection, unpack
from support.stories import THREE_ITERATIONS, build

SID = uuid.UUID(int=1)
KEY = b"operator secret"


def test_seal_with_key(store_url: str) -> None:
    with Ledger(store_url) as ledger:
        ledger.save(build(SID, THREE_ITERATIONS))
        head_before = ledger.state(SID).head_hash
        events_before = ledger.head_version(SID)
        report = seal_session(ledger, SID, clock=FixedStepClock(), key=KEY)
        assert report.ok
        assert report.sealed
        assert report.seal_ok
        assert report.hmac_ok
        assert report.events == events_before + 1
        seal = ledger.state(SID).seal
        assert seal == {
            "root_hash": head_before, "events": events_before,
            "hmac": keyed_digest(KEY, head_before),
        }
        assert verify_session(ledger, SID).ok
        wrong = verify_session(ledger, SID, key=b"another key")
        assert not wrong.ok
        assert wrong.hmac_ok is False
        assert wrong.position == report.events
        with pytest.raises(InvariantViolation, match="already sealed"):
            seal_session(ledger, SID, clock=FixedStepClock(), key=KEY)


def test_live_session_cannot_be_sealed(store_url: str) -> None:
    with Ledger(store_url) as ledger:
        ledger.save(build(SID, THREE_ITERATIONS[:1], finish=None))
        with pytest.raises(InvariantViolation, match="only a finished session"):
            seal_session(ledger, SID, clock=FixedStepClock())
        assert ledger.state(SID).seal is None


def _tamper(path: str, position: int, old: str, new: str) -> None:
    with raw_connection(path) as conn:
        (state,) = conn.execute(
            "SELECT state FROM stored_events WHERE originator_version = ?", (position,),
        ).fetchone()
        text = unpack(bytes(state)).decode("utf-8")
        assert old in text
        conn.execute(
            "UPDATE stored_events SET state = ? WHERE originator_version = ?",
            (text.replace(old, new).encode("utf-8"), position),
        )


def _position_of(ledger: Ledger, type_name: str) -> int:
    return next(e.position for e in ledger.events(SID) if e.type == type_name)


def test_broken_chain_is_not_sealed(sqlite_url: str) -> None:
    with Ledger(sqlite_url, snapshot_interval=0) as ledger:
        ledger.save(build(SID, THREE_ITERATIONS))
        pos = _position_of(ledger, "HumanInputRecorded")
    _tamper(sqlite_url, pos, "distributed deployments", "single-node deployments")
    with Ledger(sqlite_url, snapshot_interval=0) as ledger:
        with pytest.raises(ChainBrokenError, match=f"broken at position {pos}"):
            seal_session(ledger, SID, clock=FixedStepClock(), key=KEY)
        assert ledger.state(SID).seal is None


def _export(ledger: Ledger, sid: uuid.UUID) -> str:
    """A stand-in exporter producing the export's shape from the store (title + ledger block)."""
    state = ledger.state(sid)
    doc = {"id": state.slug, "status": state.status.value, "ledger": None}
    if state.seal is not None:
        doc["ledger"] = {"session_id": state.id, **state.seal}
    return yaml.safe_dump(doc, sort_keys=False)


def test_verify_export(sqlite_url: str, tmp_path: Path) -> None:
    out = tmp_path / "export.yaml"
    with Ledger(sqlite_url) as ledger:
        ledger.save(build(SID, THREE_ITERATIONS))
        seal_session(ledger, SID, clock=FixedStepClock(), key=KEY)
        out.write_text(_export(ledger, SID), encoding="utf-8")
        good = verify_export(ledger, out, KEY, exporter=_export)
        assert good.ok, good.problems
        assert good.hmac_ok
        assert good.block_ok
        assert good.content_checked
        assert good.content_ok
        assert not verify_export(ledger, out, b"wrong key", exporter=_export).ok

        doc = yaml.safe_load(out.read_text(encoding="utf-8"))
        doc["status"] = "abandoned"
        out.write_text(yaml.safe_dump(doc), encoding="utf-8")
        edited = verify_export(ledger, out, KEY, exporter=_export)
        assert not edited.ok
        assert edited.block_ok
        assert edited.content_ok is False

        doc["status"] = "completed"
        doc["ledger"]["root_hash"] = "0" * 64
        out.write_text(yaml.safe_dump(doc), encoding="utf-8")
        forged = verify_export(ledger, out, None, exporter=_export)
        assert not forged.ok
        assert not forged.block_ok
        assert any("ledger.root_hash" in p for p in forged.problems)

        out.write_text("id: x\nledger: null\n", encoding="utf-8")
        with pytest.raises(ImportValidationError, match="no 'ledger' block"):
            verify_export(ledger, out, KEY, exporter=_export)


def test_verify_export_detects_store_tampering(sqlite_url: str, tmp_path: Path) -> None:
    out = tmp_path / "export.yaml"
    with Ledger(sqlite_url, snapshot_interval=0) as ledger:
        ledger.save(build(SID, THREE_ITERATIONS))
        seal_session(ledger, SID, clock=FixedStepClock(), key=KEY)
        out.write_text(_export(ledger, SID), encoding="utf-8")
        pos = _position_of(ledger, "HumanInputRecorded")
    _tamper(sqlite_url, pos, "distributed deployments", "single-node deployments")
    with Ledger(sqlite_url, snapshot_interval=0) as ledger:
        report = verify_export(ledger, out, KEY, exporter=_export)
        assert not report.ok
        assert report.chain is not None
        assert report.chain.position == pos


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        _main_then_exit(argv)
    captured = capsys.readouterr()
    return int(exc.value.code or 0), captured.out, captured.err


def test_seal_and_verify_export_cli(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with Ledger(sqlite_url) as ledger:
        ledger.save(build(SID, THREE_ITERATIONS))
    monkeypatch.setenv("FORGE_LEDGER_HMAC_KEY", KEY.decode())
    code, out, err = _run(["seal", str(SID)[:8], "--store", sqlite_url, "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["ok"]
    assert doc["sealed"]
    assert doc["hmac_ok"]
    assert doc["keyed"]
    code, out, err = _run(["seal", str(SID), "--store", sqlite_url], capsys)
    assert code == 2
    assert "already sealed" in err
    assert err.count("\n") == 1

    with Ledger(sqlite_url, create=False) as ledger:
        seal = ledger.state(SID).seal
    assert seal is not None
    export = tmp_path / "s.yaml"
    export.write_text(yaml.safe_dump({"ledger": {"session_id": str(SID), **seal}}), "utf-8")
    code, out, err = _run(["verify-export", str(export), "--store", sqlite_url, "--json"], capsys)
    report = json.loads(out)
    assert report["block_ok"]
    assert report["hmac_ok"]
    assert code == (0 if report["ok"] else 1)
    if report["content_checked"]:  # an exporter exists: a hand-written file is not its output
        assert report["content_ok"] is False
    export.write_text(
        yaml.safe_dump({"ledger": {"session_id": str(SID), **seal, "events": 3}}), "utf-8",
    )
    code, out, err = _run(["verify-export", str(export), "--store", sqlite_url], capsys)
    assert code == 1
    assert "ledger.events" in err
    assert "Traceback" not in err


def test_unkeyed_seal_cli_warns(sqlite_url: str, capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FORGE_LEDGER_HMAC_KEY", raising=False)
    with Ledger(sqlite_url) as ledger:
        ledger.save(build(SID, THREE_ITERATIONS))
    code, out, err = _run(["seal", str(SID), "--store", sqlite_url], capsys)
    assert code == 0
    assert "sealed" in out
    assert "not set" in err
    with Ledger(sqlite_url, create=False) as ledger:
        seal = ledger.state(SID).seal
        assert seal is not None
        assert seal["hmac"] is None
        assert verify_session(ledger, SID).ok
        assert not verify_session(ledger, SID, key=KEY).ok


def test_verify_export_against_the_yaml_projection(sqlite_url: str, tmp_path: Path) -> None:
    """The real export of a sealed session verifies; any edit of its content is caught."""
    from forge_ledger.yaml_format import export_events

    out = tmp_path / "real.yaml"
    with Ledger(sqlite_url) as ledger:
        ledger.save(build(SID, THREE_ITERATIONS))
        seal_session(ledger, SID, clock=FixedStepClock(), key=KEY)
        text = export_events(list(ledger.events(SID)))
        out.write_text(text, encoding="utf-8")
        report = verify_export(ledger, out, KEY)
        assert report.ok, report.problems
        assert report.content_checked
        assert report.content_ok
        assert report.hmac_ok
        doc = yaml.safe_load(text)
        assert doc["ledger"]["root_hash"] == ledger.state(SID).seal["root_hash"]  # type: ignore[index]
        doc["session"]["ems"] = 100 - doc["session"]["ems"]  # a flattering edit of the record
        out.write_text(yaml.safe_dump(doc, sort_keys=False), "utf-8")
        edited = verify_export(ledger, out, KEY)
        assert not edited.ok
        assert edited.content_ok is False
        assert edited.block_ok


def test_verify_command_checks_an_export_file(
    sqlite_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``verify --export FILE`` checks a real export; an edited export exits 1 in one line."""
    from forge_ledger.yaml_format import export_events

    monkeypatch.setenv("FORGE_LEDGER_HMAC_KEY", KEY.decode())
    out = tmp_path / "real.yaml"
    with Ledger(sqlite_url) as ledger:
        ledger.save(build(SID, THREE_ITERATIONS))
        seal_session(ledger, SID, clock=FixedStepClock(), key=KEY)
        out.write_text(export_events(list(ledger.events(SID))), encoding="utf-8")
    code, stdout, err = _run(["verify", "--export", str(out), "--store", sqlite_url, "--json"],
                             capsys)
    report = json.loads(stdout)
    assert code == 0
    assert report["ok"]
    assert report["hmac_ok"]
    assert report["content_ok"]
    doc = yaml.safe_load(out.read_text("utf-8"))
    doc["session"]["ems"] = 100 - doc["session"]["ems"]
    out.write_text(yaml.safe_dump(doc, sort_keys=False), "utf-8")
    code, stdout, err = _run(["verify", "--export", str(out), "--store", sqlite_url], capsys)
    assert code == 1
    assert err.count("\n") == 1
    assert err.startswith("error:")
    code, stdout, err = _run(["verify", str(SID), "--export", str(out), "--store", sqlite_url],
                             capsys)
    assert code == 2
    assert "not both" in err


def _main_then_exit(argv: list[str]) -> None:
    """Run the CLI in-process; a command that returns is exit code 0, as the console script's."""
    main(argv)
    raise SystemExit(0)
