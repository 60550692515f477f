"""Nothing lost, nothing stuck, through the real command line in child processes.

The fake OpenAI-compatible server lives in the test process; ``forge-ledger`` runs as a real
child process against it. Covered: a provider fault pauses (exit 3, one line naming the fix),
``resume`` retries only what is missing and ``replay`` stays identical; a model swapped and an
endpoint changed on resume are recorded; ``abort`` is a person's decision; ``resume`` of an
ended session finishes it; the demo → fork → resume flow runs offline.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from forge_ledger.ledger import Ledger, verify_session
from forge_ledger.records.replay import replay_session
from forge_ledger.testing import FakeOpenAIServer
from support.cli import write_participants
from support.orchestrator import voice

NAMES = ("ana", "ben", "cleo")
ROLES = ("drafter", "critic", "synthesizer")


def cli(tmp_path: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["FORGE_LEDGER_STORE"] = str(tmp_path / "store.sqlite")
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    env["FORGE_LEDGER_AUTHOR"] = "tester"
    return subprocess.run(
        [sys.executable, "-m", "forge_ledger", *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


def events_of(tmp_path: Path, sid: str) -> list[Any]:
    with Ledger(str(tmp_path / "store.sqlite"), create=False) as ledger:
        return list(ledger.events(UUID(sid)))


def assert_sound(tmp_path: Path, sid: str) -> None:
    """The chain verifies and a replay of the whole session is identical."""
    with Ledger(str(tmp_path / "store.sqlite"), create=False) as ledger:
        report = verify_session(ledger, UUID(sid))
        assert report.ok, report.problem
        result = replay_session(ledger, sid)
        assert result.ok, result.difference and result.difference.message


def script(**before: list[dict[str, Any]]) -> dict[str, Any]:
    return {n: voice(n, before=before.get(n, [])) for n in NAMES}


@pytest.mark.slow
def test_a_fault_on_the_only_author_pauses_then_resume_finishes(
    tmp_path: Path, fake_openai: FakeOpenAIServer,
) -> None:
    fake_openai.set_script(
        script(
            ana=[
                {"match": "· draft ·", "fault": "rate_limit", "retry_after": 0, "times": 1},
                {"match": "· draft ·", "fault": "server_error", "times": 1},
                {"match": "· draft ·", "fault": "disconnect", "content": "half", "times": 1},
                {"match": "· draft ·", "fault": "malformed_chunk", "content": "x y", "times": 1},
                {"match": "· draft ·", "fault": "unavailable", "times": 1},
                {"match": "· draft ·", "fault": "empty", "times": 1},
            ],
        ),
    )
    pfile = write_participants(tmp_path / "team.yaml", fake_openai.url, NAMES, roles=ROLES)
    run = cli(tmp_path, "run", "Faulty author", "--participants", str(pfile), "--json")
    assert run.returncode == 3, run.stderr
    doc = json.loads(run.stdout)
    sid, short = doc["session_id"], doc["session_id"][:8]
    line = one_line(run.stderr.splitlines()[-1])
    assert line.startswith(f"error: session {short} paused: round 1 (draft)")
    assert f"forge-ledger resume {short}" in line
    assert doc["status"] == "paused"
    assert doc["fault"]["attempts"] == 3
    types = [e.type for e in events_of(tmp_path, sid)]
    assert types[-1] == "SessionPaused"
    assert "SessionAborted" not in types
    assert "SessionSealed" not in types
    shown = cli(tmp_path, "show", short, "--json")
    assert json.loads(shown.stdout)["status"] == "paused"

    # resume: three more attempts fail, it pauses again (exit 3, still resumable)
    again = cli(tmp_path, "resume", short, "--json")
    assert again.returncode == 3, again.stderr
    assert json.loads(again.stdout)["fault"]["attempts"] == 3

    before = len(fake_openai.requests)
    done = cli(tmp_path, "resume", short, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "converged"
    first_round = [
        r.model for r in fake_openai.requests[before:] if "· draft ·" in r.last_user_message
    ]
    assert first_round == ["ana"]  # only the missing author was called for round 1
    draft_attempts = [
        e.data["attempt"]
        for e in events_of(tmp_path, sid)
        if e.data.get("round") == 1 and e.type in ("ProviderCallFailed", "ContributionRecorded")
    ]
    assert draft_attempts == [1, 2, 3, 4, 5, 6, 7]
    assert_sound(tmp_path, sid)


@pytest.mark.slow
def test_a_fault_a_person_fixes_names_the_fix_and_a_swap_is_recorded(
    tmp_path: Path, fake_openai: FakeOpenAIServer,
) -> None:
    fake_openai.set_script(
        {
            **script(),
            "ghost": [{"fault": "unknown_model"}],
        },
    )
    pfile = write_participants(tmp_path / "team.yaml", fake_openai.url, NAMES, roles=ROLES,
                               models={"cleo": "openai/ghost"})
    run = cli(tmp_path, "run", "Unknown model", "--participants", str(pfile), "--json")
    doc = json.loads(run.stdout)
    short = doc["session_id"][:8]
    assert run.returncode == 3, run.stderr
    line = one_line(run.stderr.splitlines()[-1])
    assert doc["fault"]["participant"] == "cleo"
    assert doc["fault"]["kind"] == "synthesis"
    assert f"forge-ledger resume {short} -m cleo=MODEL" in line

    done = cli(tmp_path, "resume", short, "-m", "cleo=openai/cleo", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "converged"
    events = events_of(tmp_path, doc["session_id"])
    updated = [e for e in events if e.type == "ParticipantUpdated"]
    assert [e.data["participant"]["model"] for e in updated] == ["openai/cleo"]
    assert_sound(tmp_path, doc["session_id"])
    assert cli(tmp_path, "projections", "update").returncode == 0
    with sqlite3.connect(tmp_path / "store.views.sqlite") as views:
        models = dict(views.execute("SELECT name, model FROM participants").fetchall())
    assert models == {"ana": "openai/ana", "ben": "openai/ben", "cleo": "openai/cleo"}


@pytest.mark.slow
def test_resume_api_base_moves_every_participant(
    tmp_path: Path, fake_openai: FakeOpenAIServer,
) -> None:
    fake_openai.set_script(script())
    pfile = write_participants(tmp_path / "team.yaml", "http://127.0.0.1:9/v1", NAMES, roles=ROLES)
    run = cli(tmp_path, "run", "Moved endpoint", "--participants", str(pfile), "--json")
    assert run.returncode == 3, run.stderr
    doc = json.loads(run.stdout)
    assert doc["fault"]["error_type"] == "connection"
    assert "--api-base" in one_line(run.stderr.splitlines()[-1])
    done = cli(tmp_path, "resume", doc["session_id"], "--api-base", fake_openai.url, "--json")
    assert done.returncode == 0, done.stderr
    events = events_of(tmp_path, doc["session_id"])
    moved = [e.data["participant"] for e in events if e.type == "ParticipantUpdated"]
    assert sorted(p["name"] for p in moved) == sorted(NAMES)
    assert {p["api_base"] for p in moved} == {fake_openai.url}
    assert_sound(tmp_path, doc["session_id"])


@pytest.mark.slow
def test_abort_is_a_person_decision_and_resume_of_it_fails(
    tmp_path: Path, fake_openai: FakeOpenAIServer,
) -> None:
    fake_openai.set_script({"*": [{"fault": "server_error"}]})
    pfile = write_participants(tmp_path / "team.yaml", fake_openai.url, NAMES, roles=ROLES)
    run = cli(tmp_path, "run", "Given up", "--participants", str(pfile), "--json")
    assert run.returncode == 3, run.stderr
    sid = json.loads(run.stdout)["session_id"]
    aborted = cli(tmp_path, "abort", sid[:8], "--reason", "the provider is gone", "--json")
    assert aborted.returncode == 0, aborted.stderr
    assert json.loads(aborted.stdout)["status"] == "aborted"
    events = events_of(tmp_path, sid)
    assert [e.type for e in events[-2:]] == ["SessionAborted", "SessionSealed"]
    assert events[-2].data == {"reason": "the provider is gone", "by": "tester"}
    assert_sound(tmp_path, sid)
    resumed = cli(tmp_path, "resume", sid[:8])
    assert resumed.returncode == 2
    assert "aborted: the provider is gone" in resumed.stderr


@pytest.mark.slow
def test_resume_of_an_ended_unsealed_session_seals_and_exports(
    tmp_path: Path, fake_openai: FakeOpenAIServer,
) -> None:
    """A crash between the end and the seal: resume seals, exports, exits 0 in one line."""
    import asyncio

    from forge_ledger.domain.values import Participant, SessionConfig, Topic
    from forge_ledger.orchestrator import NoSeal, Orchestrator
    from forge_ledger.providers import LiteLLMProvider

    fake_openai.set_script(script())
    store = tmp_path / "store.sqlite"
    people = [
        Participant(name=n, model=f"openai/{n}", api_base=fake_openai.url) for n in NAMES
    ]
    with Ledger(str(store), create=True) as ledger:
        provider = LiteLLMProvider()
        orch = Orchestrator(ledger, provider, seal=NoSeal())

        async def go() -> str:
            try:
                sid = orch.start(Topic(title="Ended early"), SessionConfig(max_rounds=1), people)
                await orch.run(sid)
                return str(sid)
            finally:
                await provider.aclose()

        sid = asyncio.run(go())
    assert events_of(tmp_path, sid)[-1].type == "SessionCompleted"
    done = cli(tmp_path, "resume", sid[:8], "--json")
    assert done.returncode == 0, done.stderr
    assert "had already ended (complete)" in one_line(done.stderr)
    assert events_of(tmp_path, sid)[-1].type == "SessionSealed"
    assert list(tmp_path.rglob("ended-early*.yaml"))
    twice = cli(tmp_path, "resume", sid[:8], "--json")
    assert twice.returncode == 0
    assert json.loads(twice.stdout) == json.loads(done.stdout)


@pytest.mark.slow
def test_demo_fork_resume_runs_offline(tmp_path: Path) -> None:
    demo = cli(tmp_path, "demo", "--latency", "0", "--json")
    assert demo.returncode == 0, demo.stderr
    parent = json.loads(demo.stdout)["session_id"]
    forked = cli(tmp_path, "fork", parent[:8], "--at-iteration", "1", "--json")
    assert forked.returncode == 0, forked.stderr
    child = json.loads(forked.stdout)["session_id"]
    done = cli(tmp_path, "resume", child[:8], "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["status"] in ("converged", "complete")
    assert doc["rounds"] > 5
    assert "scripted server runs again" in done.stderr
    assert_sound(tmp_path, child)


@pytest.mark.slow
def test_fork_api_base_and_model_swap_are_recorded_in_the_fork(
    tmp_path: Path, fake_openai: FakeOpenAIServer,
) -> None:
    fake_openai.set_script({**script(), "bea": voice("bea")})
    pfile = write_participants(tmp_path / "team.yaml", "http://127.0.0.1:9/v1", NAMES, roles=ROLES)
    run = cli(tmp_path, "run", "Forked away", "--participants", str(pfile), "--max-rounds", "1")
    assert run.returncode == 3, run.stderr  # nothing answers on port 9
    sid = one_line(run.stderr.splitlines()[-1]).split()[2]
    # fork at event 4 (started, three joined; before the first round): every participant
    # moves to the server, ben gets another model
    forked = cli(
        tmp_path, "fork", sid, "--at-event", "4", "--api-base", fake_openai.url,
        "-m", "ben=openai/bea", "--max-rounds", "3", "--json",
    )
    assert forked.returncode == 0, forked.stderr
    child = json.loads(forked.stdout)["session_id"]
    first = events_of(tmp_path, child)[0]
    people = {p["name"]: p for p in first.data["participants"]}
    assert {p["api_base"] for p in people.values()} == {fake_openai.url}
    assert people["ben"]["model"] == "openai/bea"
    done = cli(tmp_path, "resume", child[:8], "--json")
    assert done.returncode == 0, done.stderr
    assert {r.model for r in fake_openai.requests} == {"ana", "bea", "cleo"}
    assert_sound(tmp_path, child)
