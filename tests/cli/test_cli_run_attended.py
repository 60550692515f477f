"""Attended mode through the CLI: the session pauses with questions, ``answer`` records the
human's input (with its author), ``resume`` goes on, and ``answer --overrule`` closes a strong
dissent so the session can converge. Also ``run --resume/--new`` on an in-progress topic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from forge_ledger.ledger import Ledger
from forge_ledger.testing import FakeOpenAIServer
from support.cli import assert_one_error_line, one_json, run_cli, write_participants
from support.orchestrator import opinion_json, voice, vote_json

NAMES = ("ana", "ben", "cleo", "dov")
TOPIC = "Attended retries"
CONCERN = "no retention policy for failed attempts"


@pytest.fixture
def setup(fake_openai: FakeOpenAIServer, tmp_path: Path) -> tuple[Path, str]:
    script = {n: voice(n) for n in NAMES[:-1]}
    # dov blocks in iteration 1; later it still holds the point, but no longer strongly:
    # its strong dissent stays open (and blocking) unless a human overrules it
    strong = vote_json(False, "strongly_disagree", 30, [CONCERN])
    script["dov"] = voice(
        "dov",
        vote=vote_json(False, "disagree", 40, [CONCERN]),
        before=[
            {"match": "· convergence · iteration 1", "content": strong},
            {"match": "· refinement ·", "content": opinion_json("disagree", [CONCERN], [CONCERN])},
        ],
    )
    fake_openai.set_script(script)
    pfile = write_participants(tmp_path / "p.yaml", fake_openai.url, NAMES)
    return pfile, str(tmp_path / "attended.sqlite")


def _start(capsys: pytest.CaptureFixture[str], pfile: Path, store: str, url: str) -> Any:
    code, out, err = run_cli(
        capsys,
        "run",
        TOPIC,
        "--participants",
        str(pfile),
        "--api-base",
        url,
        "--attended",
        "--threshold",
        "0.7",
        "--max-rounds",
        "20",
        "--store",
        store,
        "--json",
    )
    assert code == 0, err
    return one_json(out)


def _types(store: str, sid: str) -> list[str]:
    with Ledger(store) as ledger:
        return [e.type for e in ledger.events(ledger.resolve(sid))]


@pytest.mark.slow
def test_pause_answer_overrule_resume_converges(
    setup: tuple[Path, str], fake_openai: FakeOpenAIServer, capsys: pytest.CaptureFixture[str],
) -> None:
    pfile, store = setup
    doc = _start(capsys, pfile, store, fake_openai.url)
    assert doc["status"] == "paused"
    assert doc["pending_questions"]
    sid = doc["session_id"]
    types = _types(store, sid)
    assert types[-2:] == ["QuestionsAsked", "SessionPaused"]
    with Ledger(store) as ledger:
        state = ledger.state(ledger.resolve(sid))
        strong = [d.id for d in state.open_divergences if d.strongest.value == "strongly_disagree"]
    assert strong, "dov's strong dissent should be open"
    assert any(strong[0] in q for q in doc["pending_questions"])

    code, out, err = run_cli(
        capsys,
        "answer",
        sid[:8],
        "Failed attempts are kept forever; that is the policy.",
        "--author",
        "mira",
        "--overrule",
        strong[0],
        "--store",
        store,
        "--json",
    )
    assert code == 0, err
    assert one_json(out)["overruled"] == [strong[0]]
    with Ledger(store) as ledger:
        events = list(ledger.events(ledger.resolve(sid)))
    human = [e for e in events if e.type == "HumanInputRecorded"]
    assert len(human) == 1
    assert human[0].data["author"] == "mira"
    assert human[0].data["kind"] == "answer"
    overruled = [e for e in events if e.type == "DivergenceOverruled"]
    assert [e.data["divergence_id"] for e in overruled] == [strong[0]]

    code, out, err = run_cli(capsys, "resume", sid[:8], "--store", store, "--json")
    assert code == 0, err
    final = one_json(out)
    assert final["status"] == "converged"
    assert final["iterations"] == 2
    assert "SessionResumed" in _types(store, sid)


@pytest.mark.slow
def test_without_overrule_the_strong_dissent_blocks(
    setup: tuple[Path, str], fake_openai: FakeOpenAIServer, capsys: pytest.CaptureFixture[str],
) -> None:
    pfile, store = setup
    sid = _start(capsys, pfile, store, fake_openai.url)["session_id"]
    code, _, err = run_cli(capsys, "answer", sid, "Keep going.", "--store", store, "--json")
    assert code == 0, err
    code, out, err = run_cli(capsys, "resume", sid, "--store", store, "--json")
    assert code == 0, err
    doc = one_json(out)
    assert doc["status"] == "paused"
    assert doc["iterations"] == 2
    with Ledger(store) as ledger:
        state = ledger.state(ledger.resolve(sid))
    assert state.latest_convergence is not None
    assert state.latest_convergence.score >= 0.7  # the score alone would converge
    assert not state.latest_convergence.converged
    assert [d.strongest.value for d in state.open_divergences] == ["strongly_disagree"]

    # the topic is in progress: a new run must choose --resume or --new
    run_args = ["run", TOPIC, "--participants", str(pfile), "--store", store, "--json"]
    code, out, err = run_cli(capsys, *run_args)
    assert code == 2
    assert out == ""
    line = assert_one_error_line(err)
    assert sid[:8] in line
    assert "--resume" in line
    assert "--new" in line
    code, out, err = run_cli(capsys, *run_args, "--resume")
    assert code == 0, err
    assert one_json(out)["session_id"] == sid
    code, out, err = run_cli(capsys, *run_args, "--new", "--max-rounds", "1")
    assert code == 0, err
    fresh = one_json(out)
    assert fresh["session_id"] != sid
    assert fresh["rounds"] == 1


@pytest.mark.usefixtures("fake_openai")
def test_resume_of_a_finished_session_is_one_line_and_success(
    setup: tuple[Path, str], capsys: pytest.CaptureFixture[str],
) -> None:
    pfile, store = setup
    code, out, err = run_cli(
        capsys,
        "run",
        "Short one",
        "--participants",
        str(pfile),
        "--max-rounds",
        "1",
        "--store",
        store,
        "--json",
    )
    assert code == 0, err
    first = one_json(out)
    sid = first["session_id"]
    code, out, err = run_cli(capsys, "resume", sid, "--store", store, "--json")
    assert code == 0, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "had already ended" in lines[0], err
    again = one_json(out)
    assert again["status"] == first["status"]
    assert again["events"] == first["events"]  # already sealed: nothing to add
