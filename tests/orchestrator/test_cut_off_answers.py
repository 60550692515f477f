"""Answers cut off at their token limit, end to end: the real CLI in child processes against
the shipped fake OpenAI server, scripted to stop with ``finish_reason: length`` or to ignore
``max_tokens`` altogether."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from forge_ledger.domain.values import RoundKind, StopReason
from forge_ledger.engine import MAX_CONTINUATIONS, output_ceiling
from forge_ledger.ledger import Ledger
from forge_ledger.testing import FakeOpenAIServer
from support.cli import console_json, run_console
from support.orchestrator import voice

CUT = "The synthesis was cut o"
REST = "ff here, and this is how it ends."


def _run(ana_and_ben: list[str], store: Path, *extra: str) -> dict[str, Any]:
    doc = console_json("run", "Retry policy", *ana_and_ben, "--store", str(store), *extra)
    assert isinstance(doc, dict)
    return doc


def _synthesis(state: Any) -> Any:
    (rnd,) = [r for r in state.rounds if r.kind is RoundKind.SYNTHESIS]
    return rnd


@pytest.mark.slow
def test_a_cut_off_synthesis_is_continued_recorded_and_replayed(
    fake_openai: FakeOpenAIServer, ana_and_ben: list[str], tmp_path: Path,
) -> None:
    cut_then_rest = [
        {"match": "· continuation", "content": REST, "times": 1},
        {"match": "· synthesis ·", "content": CUT, "finish_reason": "length", "times": 1},
    ]
    fake_openai.set_script(
        {"ana": voice("ana", before=cut_then_rest), "ben": voice("ben", before=cut_then_rest)}
    )
    store = tmp_path / "s.sqlite"
    sid = _run(ana_and_ben, store)["session_id"]
    with Ledger(str(store)) as ledger:
        state = ledger.state(sid)
        rnd = _synthesis(state)
        purposes = [c.purpose for c in rnd.contributions]
        assert purposes == ["answer", "continuation"]
        answer, continuation = rnd.contributions
        assert answer.response.stop_reason is StopReason.MAX_TOKENS
        assert continuation.attempt == answer.attempt + 1
        assert state.latest_text == CUT + REST
        assert state.document_truncated is False
    # the continuation call carried the text so far as the model's own turn
    (asked,) = [r for r in fake_openai.requests if "· continuation" in r.last_user_message]
    assert asked.body["messages"][-2] == {"role": "assistant", "content": CUT}
    spec = console_json("spec", sid, "--store", str(store))
    assert spec["truncated"] is False
    replay = console_json("replay", sid, "--store", str(store))
    assert replay["ok"] is True
    assert replay["calls_served"] == len(
        [r for r in fake_openai.requests if r.model in ("ana", "ben")]
    )


@pytest.mark.slow
def test_a_synthesis_still_cut_after_its_continuations_is_marked_truncated(
    fake_openai: FakeOpenAIServer, ana_and_ben: list[str], tmp_path: Path,
) -> None:
    always_cut = [
        {"match": "· continuation", "content": " and more", "finish_reason": "length"},
        {"match": "· synthesis ·", "content": CUT, "finish_reason": "length"},
    ]
    fake_openai.set_script(
        {"ana": voice("ana", before=always_cut), "ben": voice("ben", before=always_cut)}
    )
    store = tmp_path / "s.sqlite"
    sid = _run(ana_and_ben, store)["session_id"]
    with Ledger(str(store)) as ledger:
        state = ledger.state(sid)
        rnd = _synthesis(state)
        assert [c.purpose for c in rnd.contributions] == ["answer"] + [
            "continuation"
        ] * MAX_CONTINUATIONS
        assert state.latest_text == CUT + " and more" * MAX_CONTINUATIONS
        assert state.document_truncated is True
    header = console_json("spec", sid, "--store", str(store))
    assert header["truncated"] is True
    text = run_console("spec", sid, "--store", str(store))
    assert text.returncode == 0, text.stderr
    assert "**Truncated.**" in text.stdout
    shown = console_json("show", sid, "--store", str(store))
    assert shown["document_truncated"] is True
    show = run_console("show", sid, "--store", str(store))
    assert "[cut off at its token limit]" in show.stdout
    audit = console_json("audit", sid, "--store", str(store))
    assert audit["document_truncated"] is True
    markdown = run_console("audit", sid, "--markdown", "--store", str(store))
    assert "truncated: cut off at its token limit" in markdown.stdout
    page = tmp_path / "report.html"
    done = run_console("report", sid, "--store", str(store), "-o", str(page))
    assert done.returncode == 0, done.stderr
    assert 'id="truncated"' in page.read_text(encoding="utf-8")
    assert console_json("replay", sid, "--store", str(store))["ok"] is True


@pytest.mark.slow
def test_a_cut_off_vote_that_cannot_be_repaired_is_an_abstention_saying_so(
    fake_openai: FakeOpenAIServer, ana_and_ben: list[str], tmp_path: Path,
) -> None:
    half_vote = [
        {"match": "· repair", "content": "I cannot say more."},
        {"match": "· convergence ·", "content": '{"agrees": tr', "finish_reason": "length"},
    ]
    fake_openai.set_script({"ana": voice("ana", before=half_vote), "ben": voice("ben")})
    store = tmp_path / "s.sqlite"
    sid = _run(ana_and_ben, store)["session_id"]
    with Ledger(str(store)) as ledger:
        state = ledger.state(sid)
        votes = [r for r in state.rounds if r.kind is RoundKind.CONVERGENCE]
        assert votes
        ana = votes[0].contribution_of("ana")
        assert ana is not None
        assert ana.purpose == "repair"
        assert ana.parse_error is not None
        assert ana.parse_error.startswith("answer cut off at its token limit")
        assert "ana" in votes[0].abstained
    show = run_console("show", sid, "--store", str(store))
    assert "cut off at its token limit" in show.stdout


@pytest.mark.slow
def test_a_provider_ignoring_max_tokens_is_stopped_at_the_ceiling(
    fake_openai: FakeOpenAIServer, ana_and_ben: list[str], tmp_path: Path,
) -> None:
    """The fake server ignores ``max_tokens`` (one word = one token): a 500-word draft under
    ``--max-tokens 100`` ends at the ceiling, is continued, and every recorded answer of
    the round stays within the ceiling."""
    long = " ".join(f"w{i}" for i in range(500))
    wordy = [
        {"match": "· continuation", "content": long},
        {"match": "· draft ·", "content": long},
    ]
    fake_openai.set_script({"ana": voice("ana", before=wordy), "ben": voice("ben")})
    store = tmp_path / "s.sqlite"
    sid = _run(ana_and_ben, store, "--max-tokens", "100", "--max-rounds", "1")["session_id"]
    ceiling = output_ceiling(100)
    with Ledger(str(store)) as ledger:
        state = ledger.state(sid)
        (drafts,) = [r for r in state.rounds if r.kind is RoundKind.DRAFT]
        ana = [c for c in drafts.contributions if c.participant == "ana"]
        assert [c.purpose for c in ana] == ["answer"] + ["continuation"] * MAX_CONTINUATIONS
        for c in ana:
            assert c.response.tokens.output == ceiling
            assert c.response.stop_reason is StopReason.MAX_TOKENS
        whole = state.answer(ana[-1])
        assert len(whole.split()) == ceiling * (1 + MAX_CONTINUATIONS)
