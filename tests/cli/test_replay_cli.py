"""``forge-ledger replay --all`` over a store with live, forked and imported sessions.

Issue "The promises", items 4–5. One SQLite store receives: a deliberation run through the real
orchestrator, the four voices of the demo answering in-process
(``ScriptedProvider.from_script``: what replay does is the subject, not HTTP); a fork of it at
iteration 1 that is then resumed (only the rounds after the fork point call models: the
provider's count of calls says so); a session imported from a YAML fixture with
``forge-ledger import``; a second deliberation. ``replay --all`` finds them all identical
(exit 0). Then the second one is forged (an answer edited and the hash chain rewritten): exit
1, the first differing position on stderr in one line and in ``--json``.

The fork test is repeated on PostgreSQL: state-at-iteration-k of the fork equals the parent's,
and the fork's own continuation replays identically.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from unittest.mock import patch
from uuid import UUID

import pytest
from click.testing import CliRunner, Result

from forge_ledger.app.demo import demo_topic
from forge_ledger.cli import cli
from forge_ledger.clock import FixedStepClock, SequentialIds
from forge_ledger.domain.values import SessionConfig
from forge_ledger.ledger import Ledger
from forge_ledger.orchestrator import Orchestrator
from forge_ledger.providers import LiteLLMProvider
from forge_ledger.records.lineage import fork
from forge_ledger.records.replay import replay_session
from forge_ledger.testing import ScriptedProvider, bundled_script
from support.orchestrator import offline_demo_participants
from support.replay import (
    AGREEING_VOTE,
    assert_identical,
    first_dissenting_vote,
    recorded_calls,
    tamper_content,
)

FIXTURES = Path(__file__).parents[1] / "fixtures"


async def _no_sleep(_: float) -> None:
    """Back-off is recorded, not waited for."""


def _voices() -> ScriptedProvider:
    """The demo's four voices, in-process; one provider serves every run of a test, as one
    server would."""
    return ScriptedProvider.from_script(bundled_script("four-voices"))


def _run_demo(ledger: Ledger, voices: ScriptedProvider, start: datetime, name: str) -> UUID:
    orch = Orchestrator(
        ledger,
        voices,
        clock=FixedStepClock(start, timedelta(seconds=1)),
        ids=SequentialIds(name),
        sleep=_no_sleep,
    )
    sid = orch.start(demo_topic(), SessionConfig(max_cost_usd=1.0), offline_demo_participants())
    asyncio.run(orch.run(sid))
    return sid


def _fork_and_resume(
    ledger: Ledger, voices: ScriptedProvider, parent: UUID, k: int, start: datetime,
) -> tuple[UUID, int]:
    """Fork ``parent`` at the end of iteration ``k`` and run the fork; returns (id, calls)."""
    clock = FixedStepClock(start, timedelta(seconds=1))
    child = fork(ledger, parent, clock=clock, ids=SequentialIds(f"fork-{start}"), at_iteration=k)
    before = len(voices.calls)
    asyncio.run(Orchestrator(ledger, voices, clock=clock, sleep=_no_sleep).resume(child))
    return child, len(voices.calls) - before


def _calls_after_iteration(ledger: Ledger, sid: UUID, k: int) -> int:
    """Model calls the session made in rounds of iterations after ``k``."""
    iteration_of: dict[int, int] = {}
    calls = 0
    for e in ledger.events(sid):
        if e.type == "RoundStarted":
            iteration_of[e.data["number"]] = e.data["iteration"]
        elif (
            e.type in ("ContributionRecorded", "ProviderCallFailed")
            and iteration_of.get(e.data["round"], 0) > k
        ):
            calls += 1
    return calls


_PROBE = """
import sys
from forge_ledger.cli import main
try:
    main(["replay", "--all", "--json", "--store", sys.argv[1]])
except SystemExit as e:
    code = e.code
else:
    code = 0
print("exit", code, "litellm", "litellm" in sys.modules)
"""


def _invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_replay_all_with_fork_and_import_then_a_forged_session(sqlite_url: str) -> None:
    voices = _voices()
    with Ledger(sqlite_url) as ledger:
        parent = _run_demo(ledger, voices, datetime(2026, 2, 1, tzinfo=UTC), "parent")
        parent_calls = len(voices.calls)
        child, child_requests = _fork_and_resume(
            ledger, voices, parent, 1, datetime(2026, 2, 2, tzinfo=UTC),
        )
        other = _run_demo(ledger, voices, datetime(2026, 2, 3, tzinfo=UTC), "other")
        # Only the rounds after the fork point called models, and exactly as many as the
        # parent needed after that point (same script, same prefix).
        assert 0 < child_requests < parent_calls
        assert child_requests == _calls_after_iteration(ledger, parent, 1)
        assert child_requests == recorded_calls(list(ledger.events(child)))[1]

    imported = _invoke("import", str(FIXTURES / "seed_standard.yaml"), "--store", sqlite_url)
    assert imported.exit_code == 0, imported.output

    no_model = patch.object(LiteLLMProvider, "complete",
                            side_effect=AssertionError("replay called a model"))
    with no_model as model:
        ok = _invoke("replay", "--all", "--store", sqlite_url, "--json")
        plain = _invoke("replay", "--all", "--store", sqlite_url)
    assert not model.called, "replay called a model"
    assert ok.exit_code == 0, ok.output
    docs = json.loads(ok.stdout)
    assert len(docs) == 4
    assert all(d["ok"] and d["matched"] == d["events"] for d in docs)
    assert sum(1 for d in docs if d["imported"]) == 1
    assert {parent, child, other} <= {UUID(d["session_id"]) for d in docs}
    assert plain.exit_code == 0
    assert "4 of 4 sessions replayed identically" in plain.stdout
    assert plain.stderr == ""

    # replay is a read-only command: it never imports litellm (checked in a fresh process).
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE, sqlite_url],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip().splitlines()[-1] == "exit 0 litellm False"

    with Ledger(sqlite_url) as ledger:
        events = list(ledger.events(other))
    contribution, vote = first_dissenting_vote(events)
    tamper_content(sqlite_url, other, contribution.position, AGREEING_VOTE, rehash=True)

    bad = _invoke("replay", "--all", "--store", sqlite_url)
    assert bad.exit_code == 1
    err_lines = bad.stderr.strip().splitlines()
    assert len(err_lines) == 1
    assert err_lines[0].startswith(f"error: replay of {str(other)[:8]} differs at position ")
    assert f"position {vote.position}:" in err_lines[0]
    assert "3 of 4 sessions replayed identically" in bad.stdout

    bad_json = _invoke("replay", "--all", "--store", sqlite_url, "--json")
    assert bad_json.exit_code == 1
    docs = json.loads(bad_json.stdout)
    by_id = {UUID(d["session_id"]): d for d in docs}
    assert by_id[other]["ok"] is False
    assert by_id[other]["difference"]["position"] == vote.position
    assert by_id[other]["difference"]["recorded_type"] == "VoteRecorded"
    assert all(d["ok"] for sid, d in by_id.items() if sid != other)

    single = _invoke("replay", str(other)[:8], "--store", sqlite_url, "--json")
    assert single.exit_code == 1
    assert json.loads(single.stdout)["difference"]["position"] == vote.position


def test_replay_without_a_session_is_a_one_line_usage_error(
    sqlite_url: str, capsys: pytest.CaptureFixture[str],
) -> None:
    from forge_ledger.cli import main

    Ledger(sqlite_url).close()
    with pytest.raises(SystemExit) as exit_info:
        main(["replay", "--store", sqlite_url])
    captured = capsys.readouterr()
    assert exit_info.value.code == 2
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1
    assert "SESSION" in captured.err
    assert "--all" in captured.err


# --------------------------------------------------------------------------- fork end to end


_STATE_FIELDS = (
    "topic",
    "participants",
    "rounds",
    "iteration",
    "divergences",
    "convergence",
    "cost_usd",
    "human_inputs",
)


@pytest.mark.parametrize("k", [1])
def test_fork_state_at_k_equals_parents_and_its_continuation_replays(
    store_url: str, k: int,
) -> None:
    voices = _voices()
    with Ledger(store_url) as ledger:
        parent = _run_demo(ledger, voices, datetime(2026, 4, 1, tzinfo=UTC), "fork-parent")
        child, requests = _fork_and_resume(
            ledger, voices, parent, k, datetime(2026, 4, 2, tzinfo=UTC),
        )
        assert requests == _calls_after_iteration(ledger, parent, k)
        at_parent = ledger.state(parent, at_event=ledger.position_of_iteration(parent, k))
        at_child = ledger.state(child, at_event=ledger.position_of_iteration(child, k))
        for name in _STATE_FIELDS:
            assert getattr(at_child, name) == getattr(at_parent, name), name
        assert at_child.fork_origin is not None
        assert at_child.fork_origin.parent_id == str(parent)
        assert at_child.fork_origin.parent_hash == at_parent.head_hash
        child_now = ledger.state(child)
        parent_now = ledger.state(parent)
        assert child_now.status == parent_now.status
        assert len(child_now.rounds) == len(parent_now.rounds)
        for sid in (parent, child):
            assert_identical(replay_session(ledger, sid), list(ledger.events(sid)))
