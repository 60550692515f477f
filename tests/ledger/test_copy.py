"""Sessions moving between stores through the real CLI (subprocesses): ``copy`` and the
one-file archive of ``export --format ledger`` keep every event hash, verify and replay at
each hop, copy nothing twice, take a fork's parent along, refuse another history, leave the
source untouched, and survive a kill -9 in the middle."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from forge_ledger.clock import FixedStepClock
from forge_ledger.errors import StoreError
from forge_ledger.ledger import Ledger, verify_store
from forge_ledger.records.sealing import seal_session
from support.stories import THREE_ITERATIONS, build, continued, play

KEY = "archive key"


def _forge(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "forge_ledger", *args],
        capture_output=True, text=True, timeout=300, cwd=cwd, check=False,
        env={**os.environ, **(env or {})},
    )


def _ok(*args: str, cwd: Path, env: dict[str, str] | None = None) -> Any:
    """One command that must succeed; its one JSON document (``--json`` is added)."""
    done = _forge(*args, "--json", cwd=cwd, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _hashes(store: str, session: str, cwd: Path) -> list[tuple[int, str, str]]:
    """(position, hash, prev_hash) of every event, as ``log --json`` prints them."""
    events = _ok("log", session, "--store", store, cwd=cwd)
    return [(e["position"], e["hash"], e["prev_hash"]) for e in events]


def _verified(store: str, cwd: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    doc = _ok("verify", "--store", store, cwd=cwd, env=env)
    assert doc["ok"], doc
    return doc


def _replays(store: str, session: str, cwd: Path) -> None:
    done = _forge("replay", session, "--store", store, cwd=cwd)
    assert done.returncode == 0, done.stderr
    assert "identical" in done.stdout, done.stdout


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo session in a SQLite file (each test copies it)."""
    where = tmp_path_factory.mktemp("demo")
    _ok("demo", "--latency", "0", "--store", "demo.sqlite", cwd=where)
    return where / "demo.sqlite"


@pytest.mark.slow
def test_demo_keeps_every_hash_from_sqlite_to_postgres_to_an_archive_to_sqlite(
    demo_store: Path, pg_url: str, tmp_path: Path
) -> None:
    source = tmp_path / "source.sqlite"
    shutil.copyfile(demo_store, source)
    before = _sha256(source)
    sid = _ok("sessions", "--store", str(source), cwd=tmp_path)[0]["id"]
    expected = _hashes(str(source), sid, tmp_path)
    assert len(expected) == 63

    first = _ok("copy", sid[:8], "--store", str(source), "--to", pg_url, cwd=tmp_path)
    assert (first["copied"], first["already_there"], first["events"]) == (1, 0, 63)
    again = _ok("copy", sid, "--store", str(source), "--to", pg_url, cwd=tmp_path)
    assert (again["copied"], again["already_there"], again["events"]) == (0, 1, 0)
    assert again["sessions"][0]["status"] == "already there"
    assert _source_untouched(source, before)

    archive = tmp_path / "out" / "demo-archive.sqlite"
    written = _ok("export", sid, "--store", pg_url, "--format", "ledger", "-o", str(archive),
                  cwd=tmp_path)
    assert written["path"] == str(archive)
    assert sorted(p.name for p in archive.parent.iterdir()) == ["demo-archive.sqlite"]

    last = tmp_path / "last.sqlite"
    _ok("copy", sid, "--store", str(archive), "--to", str(last), cwd=tmp_path)
    for store in (pg_url, str(archive), str(last)):
        assert _hashes(store, sid, tmp_path) == expected, store
        doc = _verified(store, tmp_path)
        assert [(s["session_id"], s["events"]) for s in doc["sessions"]] == [(sid, 63)]
        _replays(store, sid, tmp_path)
    # the same events, rows for rows, and the same texts by address; PostgreSQL keeps no list
    # of the answers a prompt quotes, so a copy through it stores its prompts whole, and a
    # copy of that copy stores exactly what it was given
    events, texts = _rows(source)
    for store in (archive, last):
        assert _rows(store)[0] == events, store
        assert [t[0] for t in _rows(store)[1]] == [t[0] for t in texts], store
    assert _rows(last) == _rows(archive)
    assert _forge("spec", sid, "--store", str(archive), cwd=tmp_path).returncode == 0
    report = _forge("report", sid, "--store", str(archive), "-o", str(tmp_path / "r.html"),
                    cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert _source_untouched(source, before)


def _rows(path: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """A SQLite store's events and texts, as stored."""
    with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as db:
        events = db.execute(
            "SELECT originator_id, originator_version, topic, state FROM stored_events "
            "ORDER BY originator_id, originator_version"
        ).fetchall()
        texts = db.execute("SELECT sha256, body FROM forge_texts ORDER BY sha256").fetchall()
    return events, texts


def _source_untouched(source: Path, digest: str) -> bool:
    return _sha256(source) == digest


@pytest.mark.slow
def test_a_fork_is_copied_with_its_parent(demo_store: Path, tmp_path: Path) -> None:
    source = tmp_path / "source.sqlite"
    shutil.copyfile(demo_store, source)
    parent = _ok("sessions", "--store", str(source), cwd=tmp_path)[0]["id"]
    fork = _ok("fork", parent, "--at-iteration", "1", "--store", str(source), cwd=tmp_path)
    fid = fork["session_id"]
    before = _sha256(source)
    target = str(tmp_path / "target.sqlite")

    done = _forge("copy", fid, "--store", str(source), "--to", target, "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert [(s["session_id"], s["status"], s["requested"]) for s in doc["sessions"]] == [
        (parent, "copied", False), (fid, "copied", True),
    ]
    assert "[2/2]" in done.stderr  # progress on stderr
    assert {s["session_id"] for s in _verified(target, tmp_path)["sessions"]} == {parent, fid}
    for sid in (parent, fid):
        assert _hashes(target, sid, tmp_path) == _hashes(str(source), sid, tmp_path)
    # the positions before the fork point are its parent's, read in the target
    inherited = _ok("show", fid, "--at-event", "5", "--store", target, cwd=tmp_path)
    assert inherited == _ok("show", fid, "--at-event", "5", "--store", str(source), cwd=tmp_path)
    again = _ok("copy", fid, "--store", str(source), "--to", target, cwd=tmp_path)
    assert [s["status"] for s in again["sessions"]] == ["already there", "already there"]
    assert _sha256(source) == before


@pytest.mark.slow
def test_another_history_is_refused_and_a_longer_one_extends(tmp_path: Path) -> None:
    sid = uuid.UUID(int=7)
    source, other, target = (str(tmp_path / f"{n}.sqlite") for n in ("a", "b", "t"))
    with Ledger(source) as ledger:
        ledger.save(build(sid, THREE_ITERATIONS[:1], finish=None))
    with Ledger(other) as ledger:  # the same session id, another history (another clock)
        slower = FixedStepClock(step=timedelta(seconds=3))
        ledger.save(build(sid, THREE_ITERATIONS[:1], finish=None, clock=slower))
    _ok("copy", str(sid), "--store", source, "--to", target, cwd=tmp_path)
    held = _hashes(target, str(sid), tmp_path)
    itself = _forge("copy", str(sid), "--store", source, "--to", f"./{Path(source).name}",
                    cwd=tmp_path)
    assert itself.returncode == 2
    assert "both the source and the target" in itself.stderr

    refused = _forge("copy", str(sid), "--store", other, "--to", target, cwd=tmp_path)
    assert refused.returncode == 2
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    assert "with another history" in lines[0]
    assert _hashes(target, str(sid), tmp_path) == held

    with Ledger(source) as ledger:
        more = continued(ledger.get(sid))
        play(more, THREE_ITERATIONS[1])
        ledger.save(more.aggregate)
    grown = _ok("copy", str(sid), "--store", source, "--to", target, cwd=tmp_path)
    assert grown["sessions"][0]["status"] == "extended"
    assert grown["events"] == len(_hashes(source, str(sid), tmp_path)) - len(held)
    assert _hashes(target, str(sid), tmp_path) == _hashes(source, str(sid), tmp_path)
    _verified(target, tmp_path)


@pytest.mark.slow
def test_an_archive_checks_the_seal_hmac_with_the_key(tmp_path: Path) -> None:
    sid = uuid.UUID(int=9)
    source = str(tmp_path / "sealed.sqlite")
    with Ledger(source) as ledger:
        ledger.save(build(sid, THREE_ITERATIONS))
        assert seal_session(ledger, sid, clock=FixedStepClock(), key=KEY.encode()).ok
        ledger.save(build(uuid.UUID(int=10), THREE_ITERATIONS[:1]))  # not exported
    archive = str(tmp_path / "sealed-archive.sqlite")
    _ok("export", str(sid), "--store", source, "--format", "ledger", "-o", archive, cwd=tmp_path)
    assert [s["id"] for s in _ok("sessions", "--store", archive, cwd=tmp_path)] == [str(sid)]
    keyed = _verified(archive, tmp_path, env={"FORGE_LEDGER_HMAC_KEY": KEY})
    assert keyed["keyed"]
    assert keyed["sessions"][0]["hmac_ok"] is True
    wrong = _forge("verify", "--store", archive, cwd=tmp_path,
                   env={"FORGE_LEDGER_HMAC_KEY": "another key"})
    assert wrong.returncode == 1
    exists = _forge("export", str(sid), "--store", source, "--format", "ledger", "-o", archive,
                    cwd=tmp_path)
    assert exists.returncode == 2
    assert "exists already" in exists.stderr


def _many_sessions(tmp_path: Path) -> tuple[Path, dict[str, int]]:
    """A store of 300 sessions; their heads by id."""
    source = tmp_path / "many.sqlite"
    ids = [uuid.UUID(int=i + 1) for i in range(300)]
    with Ledger(str(source)) as ledger:
        for sid in ids:
            ledger.save(build(sid, THREE_ITERATIONS))
        return source, {str(sid): ledger.head_version(sid) for sid in ids}


def _killed_midway(args: list[str], cwd: Path) -> float:
    """Run ``args``; once its first session is copied, SIGKILL it at a random moment (unless
    it has finished by then). Returns the moment, in seconds after the first session."""
    copying = subprocess.Popen(args, cwd=cwd, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    assert copying.stderr is not None
    first = copying.stderr.readline()  # the first session is copied: the copy is under way
    assert first.startswith("[1/300]"), first
    moment = random.uniform(0, 2.0)
    try:
        copying.wait(timeout=moment)
    except subprocess.TimeoutExpired:
        copying.send_signal(signal.SIGKILL)
    copying.wait()
    copying.stderr.close()
    return moment


@pytest.mark.slow
def test_a_copy_killed_midway_then_run_again_gives_a_whole_verifying_target(
    tmp_path: Path,
) -> None:
    source, heads = _many_sessions(tmp_path)
    before = _sha256(source)
    target = tmp_path / "target.sqlite"
    args = [sys.executable, "-m", "forge_ledger", "copy", *heads,
            "--store", str(source), "--to", str(target)]
    moment = _killed_midway(args, tmp_path)

    with Ledger(str(target), create=False) as ledger:  # what the kill left: whole sessions
        present = ledger.session_ids()
        assert all(r.ok for r in verify_store(ledger)), f"killed after {moment:.2f} s"
        assert all(ledger.head_version(s) == heads[str(s)] for s in present)
    done = _forge(*args[3:], "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["already_there"] == len(present)
    assert doc["copied"] == len(heads) - len(present)
    with Ledger(str(target), create=False) as ledger:
        assert sorted(map(str, ledger.session_ids())) == sorted(heads)
        reports = verify_store(ledger)
        assert all(r.ok for r in reports)
        assert {r.session_id: r.events for r in reports} == heads
    assert _sha256(source) == before


def test_a_store_opened_read_only_refuses_a_write(tmp_path: Path) -> None:
    store = str(tmp_path / "ro.sqlite")
    with Ledger(store) as ledger:
        ledger.save(build(uuid.UUID(int=11), THREE_ITERATIONS[:1], finish=None))
        head = ledger.head_version(uuid.UUID(int=11))
    with Ledger(store, create=False, read_only=True) as ledger:
        assert ledger.read_only
        more = continued(ledger.get(uuid.UUID(int=11)))
        play(more, THREE_ITERATIONS[1])
        with pytest.raises(StoreError, match="read-only; nothing was written"):
            ledger.save(more.aggregate)
    with Ledger(store, create=False) as ledger:
        assert ledger.head_version(uuid.UUID(int=11)) == head


@pytest.mark.slow
def test_an_export_killed_midway_leaves_no_archive_and_the_next_one_is_whole(
    tmp_path: Path,
) -> None:
    source, heads = _many_sessions(tmp_path)
    archive = tmp_path / "out" / "all.sqlite"
    args = [sys.executable, "-m", "forge_ledger", "export", *heads, "--format", "ledger",
            "-o", str(archive), "--store", str(source)]
    moment = _killed_midway(args, tmp_path)
    if archive.exists():  # the export finished before the kill
        archive.unlink()
    else:  # only the killed export's partial file, hidden beside where the archive goes
        left = [p.name for p in archive.parent.iterdir()]
        assert all(n.startswith(".all.sqlite.") for n in left), (moment, left)
    done = _forge(*args[3:], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert [p.name for p in archive.parent.iterdir()] == ["all.sqlite"]
    with Ledger(str(archive), create=False) as ledger:
        reports = verify_store(ledger)
        assert all(r.ok for r in reports)
        assert {r.session_id: r.events for r in reports} == heads
