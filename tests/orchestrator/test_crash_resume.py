"""Crash-safe resume with a real killed process.

``forge-ledger run`` runs in a child process against the fake server, which lives in the test
process (so killing the runner leaves it up, and the test can count every request it got).
When the SQLite file shows the chosen point, the runner gets SIGKILL; ``forge-ledger resume``
then finishes the session. Recorded answers must not be asked again, no event may be doubled,
and the hash chain must verify.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from forge_ledger.ledger import Ledger, RecordedEvent, verify_session
from forge_ledger.testing import FakeOpenAIServer
from support.cli import write_participants
from support.orchestrator import voice

pytestmark = pytest.mark.slow

NAMES = ("ana", "ben", "cleo")
HANG = 120.0
"""Latency of the reply the runner is killed while waiting for (released at server stop)."""


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "forge_ledger", *args]


def _env(store: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["FORGE_LEDGER_STORE"] = str(store)
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    return env


def _read_events(store: Path) -> list[RecordedEvent] | None:
    try:
        with Ledger(str(store)) as reader:
            ids = reader.session_ids()
            return list(reader.events(ids[0])) if ids else None
    except Exception:  # not created yet, or locked by the writer for a moment
        return None


def _wait_for(
    store: Path, proc: subprocess.Popen[bytes], point: Callable[[list[RecordedEvent]], bool],
) -> list[RecordedEvent]:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            _out, err = proc.communicate()
            raise AssertionError(f"runner ended early ({proc.returncode}): {err.decode()[-800:]}")
        events = _read_events(store)
        if events is not None and point(events):
            return events
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("the runner never reached the point to kill it at")


def _requests_per_model_round(server: FakeOpenAIServer) -> Counter[tuple[str, str]]:
    """(model, first line of the prompt) → number of requests the server received (the
    killed runner's call is still hanging there; it counts as received)."""
    return Counter((r.model, r.last_user_message.splitlines()[0]) for r in server.requests)


def _crash_then_resume(
    tmp_path: Path,
    server: FakeOpenAIServer,
    point: Callable[[list[RecordedEvent]], bool],
) -> tuple[list[RecordedEvent], list[RecordedEvent], dict[str, Any]]:
    store = tmp_path / "crash.sqlite"
    env = _env(store)
    pfile = write_participants(tmp_path / "participants.yaml", server.url, NAMES)
    runner = subprocess.Popen(
        _cli("run", "Crash safe retries", "--participants", str(pfile), "--json"),
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        before = _wait_for(store, runner, point)
    finally:
        runner.kill()  # SIGKILL: no cleanup, no finally blocks in the child
        runner.communicate(timeout=30)
    assert runner.returncode == -9
    after_kill = _read_events(store)
    assert after_kill is not None
    assert len(after_kill) >= len(before)
    sid = after_kill[0].session_id
    done = subprocess.run(
        _cli("resume", sid[:8], "--json"),
        env=env,
        cwd=tmp_path,
        capture_output=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr.decode()[-1500:]
    summary = json.loads(done.stdout)
    with Ledger(str(store)) as ledger:
        final = list(ledger.events(sid))
        report = verify_session(ledger, UUID(sid))
        assert report.ok, report.problem
    return after_kill, final, summary


def _assert_no_duplicates(final: list[RecordedEvent]) -> None:
    keys = Counter(
        (
            e.type,
            e.data.get("round"),
            e.data.get("participant"),
            e.data.get("attempt"),
            e.data.get("purpose"),
        )
        for e in final
        if e.type
        in (
            "ContributionRecorded",
            "CritiqueRecorded",
            "OpinionRecorded",
            "VoteRecorded",
            "ProviderCallFailed",
        )
    )
    assert [k for k, n in keys.items() if n > 1] == []
    started = Counter(e.data["number"] for e in final if e.type == "RoundStarted")
    completed = Counter(e.data["number"] for e in final if e.type == "RoundCompleted")
    assert max(started.values()) == 1
    assert max(completed.values()) == 1
    assert [e.position for e in final] == list(range(1, len(final) + 1))


def _contributors(events: list[RecordedEvent], round_no: int) -> list[str]:
    return [
        e.data["participant"]
        for e in events
        if e.type == "ContributionRecorded" and e.data["round"] == round_no
    ]


def test_kill_mid_round_then_resume(
    fake_openai_factory: Callable[..., FakeOpenAIServer], tmp_path: Path,
) -> None:
    script = {n: voice(n) for n in NAMES[:-1]}
    script["cleo"] = voice(
        "cleo",
        before=[{"match": "· draft ·", "content": "never seen", "latency": HANG, "times": 1}],
    )
    server = fake_openai_factory(script)

    def mid_round(events: list[RecordedEvent]) -> bool:
        return _contributors(events, 1) == ["ana", "ben"]

    at_kill, final, summary = _crash_then_resume(tmp_path, server, mid_round)
    assert not any(e.type == "RoundCompleted" for e in at_kill)
    assert summary["status"] == "converged"
    counts = _requests_per_model_round(server)
    draft = "Round 1 · draft · iteration 1"
    assert counts[("ana", draft)] == 1
    assert counts[("ben", draft)] == 1
    assert counts[("cleo", draft)] == 2  # the killed call, then the resumed one
    assert _contributors(final, 1) == ["ana", "ben", "cleo"]
    _assert_no_duplicates(final)
    assert final[: len(at_kill)] == at_kill  # what was recorded stays as it was
    assert final[-1].type == "SessionSealed"


def test_kill_between_rounds_then_resume(
    fake_openai_factory: Callable[..., FakeOpenAIServer], tmp_path: Path,
) -> None:
    slow_critique = {"match": "· critique ·", "content": "never seen", "latency": HANG, "times": 1}
    server = fake_openai_factory({n: voice(n, before=[slow_critique]) for n in NAMES})

    def between(events: list[RecordedEvent]) -> bool:
        return any(e.type == "RoundCompleted" for e in events) and any(
            e.type == "RoundStarted" and e.data["number"] == 2 for e in events
        )

    at_kill, final, summary = _crash_then_resume(tmp_path, server, between)
    assert _contributors(at_kill, 1) == list(NAMES)
    assert _contributors(at_kill, 2) == []
    assert summary["status"] == "converged"
    counts = _requests_per_model_round(server)
    for n in NAMES:
        assert counts[(n, "Round 1 · draft · iteration 1")] == 1
        assert counts[(n, "Round 2 · critique · iteration 1")] == 2
    _assert_no_duplicates(final)
    assert final[: len(at_kill)] == at_kill
    assert final[-1].type == "SessionSealed"
