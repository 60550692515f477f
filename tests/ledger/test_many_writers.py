"""Many ``forge-ledger run`` processes on one SQLite file, as real subprocesses.

Each save takes the file's write lock before it reads (``BEGIN IMMEDIATE``), so writers wait
for one another within the lock wait instead of failing; a writer that cannot get the lock
within it stops with the "try again" exit code (75) and says how to go on.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from forge_ledger.errors import StoreUnavailableError
from forge_ledger.ledger import Ledger, verify_session
from forge_ledger.testing import FakeOpenAIServer
from support.cli import CONSOLE_SCRIPT
from support.orchestrator import voice

WRITERS = 8


def _run_args(topic: str, url: str, store: Path) -> list[str]:
    return [
        CONSOLE_SCRIPT, "run", topic, "-m", "openai/ana", "-m", "openai/ben",
        "--api-base", url, "--price", "openai/ana=1:2", "--price", "openai/ben=1:2",
        "--store", str(store), "--json",
    ]


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **extra}


@pytest.mark.slow
def test_eight_run_processes_into_one_file_all_finish(
    fake_openai: FakeOpenAIServer, tmp_path: Path,
) -> None:
    fake_openai.set_script({"ana": voice("ana"), "ben": voice("ben")})
    fake_openai.latency = 0.02
    store = tmp_path / "shared.sqlite"
    procs = [
        subprocess.Popen(
            _run_args(f"Shared file topic {i}", fake_openai.url, store),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
        )
        for i in range(WRITERS)
    ]
    results = [(p.wait(timeout=240), *p.communicate()) for p in procs]
    for code, out, err in results:
        assert code == 0, err
        assert json.loads(out)["status"] == "converged"
    ids = {json.loads(out)["session_id"] for _, out, _ in results}
    assert len(ids) == WRITERS
    with Ledger(str(store), create=False) as ledger:
        assert {str(s) for s in ledger.session_ids()} == ids
        assert all(verify_session(ledger, s).ok for s in ledger.session_ids())
    verify = subprocess.run(
        [CONSOLE_SCRIPT, "verify", "--store", str(store)],
        capture_output=True, text=True, env=_env(), timeout=120, check=False,
    )
    assert verify.returncode == 0, verify.stderr
    assert f"{WRITERS}/{WRITERS} session(s) verified" in verify.stdout


def _wait_for_session(store: Path, proc: subprocess.Popen[str]) -> str:
    """The id of the first session recorded in ``store`` (polled while ``proc`` runs)."""
    while proc.poll() is None:
        if store.exists():
            with sqlite3.connect(store) as con:
                tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
                if "stored_events" in tables:
                    row = con.execute("SELECT originator_id FROM stored_events").fetchone()
                    if row is not None:
                        return str(row[0])
        time.sleep(0.05)
    raise AssertionError(f"run ended before recording a session: {proc.stderr}")


@pytest.mark.slow
def test_a_write_lock_held_past_the_wait_exits_75_with_the_resume_hint(
    fake_openai: FakeOpenAIServer, tmp_path: Path,
) -> None:
    """Another process holds the file's write lock from the session's start until the run
    has given up: the run stops with exit 75, its one line names ``forge-ledger resume S``,
    ``--json`` prints the error as JSON; then ``resume`` finishes the session."""
    fake_openai.set_script({"ana": voice("ana"), "ben": voice("ben")})
    fake_openai.latency = 0.3
    store = tmp_path / "held.sqlite"
    proc = subprocess.Popen(
        _run_args("Held lock topic", fake_openai.url, store),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=_env(FORGE_LEDGER_LOCK_TIMEOUT="1"),
    )
    sid = _wait_for_session(store, proc)
    holder = sqlite3.connect(store, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # held until the run has ended
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert proc.returncode == StoreUnavailableError.exit_code == 75, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    short = sid.replace("-", "")[:8]
    assert lines[0].startswith("error: ")
    assert "is busy" in lines[0]
    doc = json.loads(out)
    assert doc["exit_code"] == 75
    assert doc["error"] == "StoreUnavailableError"
    # the session id as the store spells it (hex) or as the CLI prints it (with dashes)
    with Ledger(str(store), create=False) as ledger:
        full = str(ledger.resolve(short))
    assert f"forge-ledger resume {full[:8]}" in lines[0]
    fake_openai.latency = 0.02
    resumed = subprocess.run(
        [CONSOLE_SCRIPT, "resume", full[:8], "--store", str(store), "--json"],
        capture_output=True, text=True, env=_env(), timeout=120, check=False,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["status"] == "converged"
    with Ledger(str(store), create=False) as ledger:
        assert verify_session(ledger, ledger.resolve(full)).ok


@pytest.mark.slow
def test_a_lock_held_before_anything_is_recorded_says_run_again(
    fake_openai: FakeOpenAIServer, tmp_path: Path,
) -> None:
    """The lock is held before the run records its session: nothing to resume, so the line
    says to run the command again; still exit 75, not the user-error code."""
    fake_openai.set_script({"ana": voice("ana"), "ben": voice("ben")})
    store = tmp_path / "busy.sqlite"
    with Ledger(str(store)):
        pass  # an empty ledger
    holder = sqlite3.connect(store, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        proc = subprocess.run(
            _run_args("Never recorded", fake_openai.url, store),
            capture_output=True, text=True, env=_env(FORGE_LEDGER_LOCK_TIMEOUT="1"),
            timeout=120, check=False,
        )
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert proc.returncode == 75, proc.stderr
    assert "the command again" in proc.stderr
    assert json.loads(proc.stdout)["exit_code"] == 75


def test_a_bad_lock_wait_is_refused_in_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        [CONSOLE_SCRIPT, "sessions", "--store", str(tmp_path / "x.sqlite")],
        capture_output=True, text=True, env=_env(FORGE_LEDGER_LOCK_TIMEOUT="soon"),
        timeout=60, check=False,
    )
    assert proc.returncode == 2
    assert "FORGE_LEDGER_LOCK_TIMEOUT='soon' is not a whole number" in proc.stderr
