"""A session imported from a YAML v1.2 file can be resumed by participants added at resume.

The file's iterations are recorded history without rounds; resuming continues with the next
iteration, the EMS shown before any round is the file's, and the continued session replays.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

from forge_ledger import app
from forge_ledger.ledger import Ledger, verify_session
from forge_ledger.records.replay import replay_session
from forge_ledger.testing import FakeOpenAIServer, ScriptedProvider, bundled_script
from support.cli import assert_one_error_line, one_json, run_cli, write_participants
from support.orchestrator import generalists

SEED = Path(__file__).parents[1] / "fixtures" / "seed_standard.yaml"


def _import(capsys: pytest.CaptureFixture[str], store: str) -> str:
    code, out, _ = run_cli(capsys, "import", str(SEED), "--store", store, "--json")
    assert code == 0
    return str(one_json(out)["session_id"])


def test_imported_session_shows_the_files_ems_and_needs_participants(
    capsys: pytest.CaptureFixture[str], sqlite_url: str,
) -> None:
    sid = _import(capsys, sqlite_url)
    code, out, _ = run_cli(capsys, "show", sid, "--store", sqlite_url, "--json")
    shown: dict[str, Any] = one_json(out)
    expected = yaml.safe_load(SEED.read_text("utf-8"))["session"]
    assert code == 0
    assert shown["ems"] == expected["ems"]
    assert shown["iteration"] == 3
    with Ledger(sqlite_url) as ledger:
        before = ledger.head_version(ledger.resolve(sid))
    code, _, err = run_cli(capsys, "resume", sid, "--store", sqlite_url)
    assert code == 2
    assert "no participants" in assert_one_error_line(err)
    with Ledger(sqlite_url) as ledger:
        assert ledger.head_version(ledger.resolve(sid)) == before  # nothing recorded


@pytest.mark.slow
def test_resume_with_participants_continues_after_the_imported_iterations(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, tmp_path: Path,
) -> None:
    sid = _import(capsys, sqlite_url)
    with FakeOpenAIServer(bundled_script("demo")) as server:
        team = write_participants(tmp_path / "team.yaml", server.url, ("ana", "ben", "cy"))
        code, out, err = run_cli(
            capsys, "resume", sid, "--participants", str(team), "--store", sqlite_url, "--json",
        )
    assert code == 0, err
    assert one_json(out)["status"] == "converged"
    with Ledger(sqlite_url) as ledger:
        uid = ledger.resolve(sid)
        state = ledger.state(uid)
        assert [p.name for p in state.participants] == ["ana", "ben", "cy"]
        assert state.rounds
        assert min(r.iteration for r in state.rounds) == 4
        assert verify_session(ledger, uid).ok
        result = replay_session(ledger, uid)
        assert result.ok
        assert result.imported
        assert result.calls_served > 0
        assert result.matched == result.events


def test_the_first_draft_after_import_sees_the_files_questions_answers_and_ideas(
    capsys: pytest.CaptureFixture[str], sqlite_url: str,
) -> None:
    """What the prompt holds is the subject, not the command line or HTTP: the participants
    join and the session resumes in-process, as ``resume --participants`` does."""
    sid = _import(capsys, sqlite_url)
    seed = yaml.safe_load(SEED.read_text("utf-8"))["session"]
    provider = ScriptedProvider.from_script(bundled_script("demo"))
    with Ledger(sqlite_url) as ledger:
        uid = ledger.resolve(sid)
        app.add_participants(ledger, uid, generalists(None, ("ana", "ben")))
        state = asyncio.run(app.resume_session(ledger, uid, provider=provider))
    assert min(r.iteration for r in state.rounds) == 4
    draft_prompt = next(
        text for text in (c.messages[-1].content for c in provider.calls) if "· draft ·" in text
    )
    for entry in seed["history"]:
        for q in entry["questions"]:
            assert q in draft_prompt
        for a in entry["responses"]:
            assert a in draft_prompt
    for idea in seed["ideas"]:
        assert idea["content"] in draft_prompt
