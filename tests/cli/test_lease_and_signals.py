"""One writer per session, Ctrl-C, and closed output, with real child processes.

* A second ``resume`` of a session another live process is running is refused at once (exit 4)
  without a single model call; once the first process is killed (``kill -9``) its lease is
  free and ``resume`` finishes the session. On SQLite and on PostgreSQL.
* Ctrl-C (SIGINT) during ``run`` exits 130 with one line naming the session to resume, and the
  session resumes to its end; a second Ctrl-C exits at once.
* ``run`` whose stdout and stderr go to a pipe closed after three lines runs to its end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
import yaml

from forge_ledger.errors import LeaseHeldError
from forge_ledger.ledger import Ledger, RecordedEvent, verify_session
from forge_ledger.records.replay import replay_session
from forge_ledger.testing import FakeOpenAIServer
from support.orchestrator import voice

NAMES = ("ana", "ben", "cleo")
HANG = 120.0
"""Latency of a reply the runner waits for while the test acts on it (released at stop)."""


def _env(store: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["FORGE_LEDGER_STORE"] = store
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    return env


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "forge_ledger", *args]


def _team(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "team.yaml"
    people = [{"name": n, "model": f"openai/{n}", "api_base": url} for n in NAMES]
    path.write_text(yaml.safe_dump({"participants": people}), encoding="utf-8")
    return path


def _slow_draft_script() -> dict[str, Any]:
    script = {n: voice(n) for n in NAMES}
    # the last participant hangs: the answers before it are recorded (participant order)
    script["cleo"] = voice(
        "cleo", before=[{"match": "· draft ·", "latency": HANG, "content": "x"}],
    )
    return script


def _events(store: str) -> list[RecordedEvent] | None:
    try:
        with Ledger(store, create=False) as reader:
            ids = reader.session_ids()
            return list(reader.events(ids[0])) if ids else None
    except Exception:  # not created yet
        return None


def _wait_until(
    store: str, proc: subprocess.Popen[Any], point: Callable[[list[RecordedEvent]], bool],
) -> list[RecordedEvent]:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the runner ended early ({proc.returncode})")
        events = _events(store)
        if events is not None and point(events):
            return events
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("the runner never reached the point")


def _two_answers(events: list[RecordedEvent]) -> bool:
    return sum(e.type == "ContributionRecorded" for e in events) == 2


def _assert_sound(store: str, sid: str) -> None:
    with Ledger(store, create=False) as ledger:
        report = verify_session(ledger, UUID(sid))
        assert report.ok, report.problem
        result = replay_session(ledger, sid)
        assert result.ok, result.difference and result.difference.message


def _store_for(kind: str, tmp_path: Path, pg_url: str) -> str:
    return str(tmp_path / "lease.sqlite") if kind == "sqlite" else pg_url


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
@pytest.mark.slow
def test_a_second_claimant_is_refused_at_once_and_a_killed_holder_is_taken_over(
    kind: str, tmp_path: Path, pg_url: str, fake_openai: FakeOpenAIServer,
) -> None:
    store = _store_for(kind, tmp_path, pg_url)
    env = _env(store)
    fake_openai.set_script(_slow_draft_script())
    holder = subprocess.Popen(
        _cli("run", "One writer", "--participants", str(_team(tmp_path, fake_openai.url))),
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # ana and ben answered; the holder now waits for cleo's draft
        events = _wait_until(store, holder, _two_answers)
        sid = events[0].session_id
        for command in (("resume", sid[:8]), ("run", "One writer", "--resume")):
            args = [*command]
            if command[0] == "run":
                args += ["--participants", str(_team(tmp_path, fake_openai.url))]
            second = subprocess.run(
                _cli(*args), env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
            )
            assert second.returncode == 4, second.stderr
            lines = [x for x in second.stderr.splitlines() if x.strip()]
            assert len(lines) == 1
            assert "is being run by another process" in lines[0]
            assert f"forge-ledger resume {sid[:8]}" in lines[0]
        # nothing spent by the refused claimants: the server saw only the holder's calls
        drafts = [r for r in fake_openai.requests if "· draft ·" in r.last_user_message]
        assert sorted(r.model for r in drafts) == sorted(NAMES)
        assert holder.poll() is None  # the holder was never disturbed
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    fake_openai.set_script({n: voice(n) for n in NAMES})
    done = subprocess.run(
        _cli("resume", sid[:8], "--json"),
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "converged"
    _assert_sound(store, sid)


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_lease_in_process(kind: str, tmp_path: Path, pg_url: str) -> None:
    store = _store_for(kind, tmp_path, pg_url)
    a, b = UUID(int=1), UUID(int=2)
    with Ledger(store, create=True) as one, Ledger(store, create=True) as two:
        with one.lease(a):
            with pytest.raises(LeaseHeldError) as held:
                two.lease(a).claim()
            assert held.value.exit_code == 4
            with two.lease(b):  # another session is not blocked
                pass
        with two.lease(a):  # released: claimable again
            pass


@pytest.mark.slow
def test_ctrl_c_exits_130_naming_the_session_and_it_resumes(
    tmp_path: Path, fake_openai: FakeOpenAIServer,
) -> None:
    store = str(tmp_path / "sigint.sqlite")
    env = _env(store)
    fake_openai.set_script(_slow_draft_script())
    runner = subprocess.Popen(
        _cli("run", "Interrupted", "--participants", str(_team(tmp_path, fake_openai.url))),
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        events = _wait_until(store, runner, _two_answers)
        runner.send_signal(signal.SIGINT)
        _out, err = runner.communicate(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
    sid = events[0].session_id
    assert runner.returncode == 130, err
    last = [x for x in err.splitlines() if x.strip()][-1]
    assert last == (
        f"interrupted; session {sid[:8]} keeps everything recorded so far; "
        f"continue with: forge-ledger resume {sid[:8]}"
    ), err
    kept = _events(store) or []
    assert sum(e.type == "ContributionRecorded" for e in kept) == 2  # committed work is kept
    fake_openai.set_script({n: voice(n) for n in NAMES})
    done = subprocess.run(
        _cli("resume", sid[:8], "--json"), env=env, cwd=tmp_path, capture_output=True,
        text=True, timeout=240,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "converged"
    _assert_sound(store, sid)


_TWO_PRESSES = """
import sys, time
from forge_ledger.cli._interrupt import second_interrupt_exits
with second_interrupt_exits():
    try:
        print("ready", flush=True)
        time.sleep(60)
    except KeyboardInterrupt:
        print("first", flush=True)
        time.sleep(60)  # a slow clean-up: the second press must not wait for it
print("not reached", flush=True)
"""


def test_a_second_ctrl_c_exits_at_once() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _TWO_PRESSES],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGINT)
    assert proc.stdout.readline().strip() == "first"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert "not reached" not in out
    assert "interrupted again: exiting now" in err


@pytest.mark.slow
def test_output_closed_after_three_lines_does_not_stop_the_run(
    tmp_path: Path, fake_openai: FakeOpenAIServer,
) -> None:
    store = str(tmp_path / "pipe.sqlite")
    fake_openai.set_script({n: voice(n, latency=0.05) for n in NAMES})
    proc = subprocess.Popen(
        _cli("run", "Piped to head", "--participants", str(_team(tmp_path, fake_openai.url))),
        env=_env(store),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    head = [proc.stdout.readline() for _ in range(3)]
    assert all(head), head
    proc.stdout.close()  # what `| head -3` does after its third line
    assert proc.wait(timeout=240) == 0
    events = _events(store)
    assert events is not None
    assert [e.type for e in events[-2:]] == ["SessionConverged", "SessionSealed"]
    _assert_sound(store, events[0].session_id)
