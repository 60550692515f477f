"""Provider faults through the real stack: every attempt is an event, failures never crash a
session, a round left without an answer it needs pauses the session (resumable), unparseable
JSON gets one repair.

Faults on the wire run litellm over HTTP to the fake server. The repair, parse-failure and
fallback tests are about what the orchestrator does with an answer or a classified failure,
so their voices answer in-process (``ScriptedProvider.from_script``, the same rules)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from forge_ledger.clock import FixedStepClock
from forge_ledger.domain.values import ParticipantRole, SessionConfig
from forge_ledger.ledger import Ledger, verify_session
from forge_ledger.orchestrator import Orchestrator
from forge_ledger.providers import LiteLLMProvider
from forge_ledger.records.replay import replay_session
from forge_ledger.testing import FakeOpenAIServer, ScriptedProvider
from support.orchestrator import (
    draft_text,
    generalists,
    round_events,
    run_session,
    voice,
)

NAMES = ("ana", "ben", "cleo", "dov")


def _events_of(ledger: Ledger, sid: Any, round_no: int, name: str) -> list[Any]:
    return [
        e
        for e in ledger.events(sid)
        if e.data.get("round") == round_no and e.data.get("participant") == name
    ]


@pytest.fixture
def ledger(tmp_path: Path) -> Any:
    with Ledger(str(tmp_path / "faults.sqlite"), create=True) as led:
        yield led


def test_rate_limit_server_errors_and_disconnect_in_one_round(
    fake_openai: FakeOpenAIServer, ledger: Ledger,
) -> None:
    fake_openai.set_script(
        {
            "ana": voice(
                "ana",
                before=[
                    {"match": "· draft ·", "fault": "rate_limit", "retry_after": 7, "times": 1},
                ],
            ),
            "ben": voice(
                "ben", before=[{"match": "· draft ·", "fault": "server_error", "times": 3}],
            ),
            "cleo": voice(
                "cleo",
                words=12,
                before=[
                    {
                        "match": "· draft ·",
                        "fault": "disconnect",
                        "content": draft_text("cleo", 12),
                        "times": 1,
                    },
                ],
            ),
            "dov": voice("dov"),
        },
    )
    delays: list[float] = []

    async def fast_sleep(seconds: float) -> None:
        delays.append(seconds)

    sid, state = run_session(
        ledger,
        generalists(fake_openai.url, NAMES),
        SessionConfig(max_attempts=3),
        sleep=fast_sleep,
    )

    # 429 with Retry-After: one failed attempt that will retry, then the answer on attempt 2
    ana = _events_of(ledger, sid, 1, "ana")
    assert [e.type for e in ana] == ["ProviderCallFailed", "ContributionRecorded"]
    assert ana[0].data["error_type"] == "rate_limit"
    assert ana[0].data["will_retry"] is True
    assert ana[0].data["retry_after_secs"] == 7.0
    assert ana[1].data["attempt"] == 2
    assert 7.0 in delays  # the orchestrator waited what the server asked

    # 500 three times = max_attempts: ben abstains, nothing else of his in round 1
    ben = _events_of(ledger, sid, 1, "ben")
    assert [e.type for e in ben] == ["ProviderCallFailed"] * 3
    assert [e.data["attempt"] for e in ben] == [1, 2, 3]
    assert [e.data["will_retry"] for e in ben] == [True, True, False]
    completed = next(
        e for e in ledger.events(sid) if e.type == "RoundCompleted" and e.data["number"] == 1
    )
    assert "ben" in completed.data["abstained"]
    assert len(list(fake_openai.requests_for("ben"))) >= 3

    # mid-stream disconnect: the failure keeps the text streamed before the cut
    cleo = _events_of(ledger, sid, 1, "cleo")
    assert cleo[0].type == "ProviderCallFailed"
    partial = cleo[0].data["partial_text"]
    assert partial
    assert draft_text("cleo", 12).startswith(partial)
    assert len(partial) < len(draft_text("cleo", 12))
    assert cleo[-1].type == "ContributionRecorded"

    # the session went on past the failures and finished normally
    assert state.status.value == "converged"
    assert len(state.rounds) >= 4
    assert verify_session(ledger, sid).ok


def test_all_participants_failing_pauses_with_the_fault(
    fake_openai: FakeOpenAIServer, ledger: Ledger,
) -> None:
    fake_openai.set_script({"*": [{"fault": "server_error"}]})

    async def fast_sleep(_seconds: float) -> None:
        return None

    sid, state = run_session(
        ledger,
        generalists(fake_openai.url, NAMES[:3]),
        SessionConfig(max_attempts=2),
        sleep=fast_sleep,
    )
    assert state.status.value == "paused"
    assert state.seal is None
    fault = state.fault
    assert fault is not None
    assert (fault.round, fault.kind.value, fault.participant) == (1, "draft", "ana")
    assert (fault.model, fault.error_type, fault.attempts) == ("openai/ana", "server_error", 2)
    assert fault.missing == ("ana", "ben", "cleo")
    assert "HTTP 500" in fault.message
    types = [e.type for e in ledger.events(sid)]
    assert types[-1] == "SessionPaused"
    assert "SessionAborted" not in types
    assert "SessionSealed" not in types
    assert "RoundCompleted" not in types  # the round stays open for resume
    assert types.count("ProviderCallFailed") == 3 * 2
    assert len(fake_openai.requests) == 3 * 2
    assert verify_session(ledger, sid).ok


def test_resume_after_a_fault_retries_only_the_missing_author(
    fake_openai: FakeOpenAIServer, ledger: Ledger,
) -> None:
    """A single-author synthesis fails every attempt: the session pauses with the round open;
    resume calls only the synthesizer (a fresh set of attempts) and the session converges;
    replay of the whole session, pause and resume included, is identical."""
    script = {n: voice(n) for n in NAMES[:3]}
    script["cleo"] = voice(
        "cleo", before=[{"match": "· synthesis ·", "fault": "unavailable", "times": 3}],
    )
    fake_openai.set_script(script)

    async def fast_sleep(_seconds: float) -> None:
        return None

    parts = [
        p.model_copy(update={"role": role})
        for p, role in zip(
            generalists(fake_openai.url, NAMES[:3]),
            (ParticipantRole.DRAFTER, ParticipantRole.CRITIC, ParticipantRole.SYNTHESIZER),
            strict=True,
        )
    ]
    sid, state = run_session(ledger, parts, SessionConfig(max_attempts=3), sleep=fast_sleep)
    assert state.status.value == "paused"
    assert state.fault is not None
    assert state.fault.kind.value == "synthesis"
    assert (state.fault.participant, state.fault.attempts) == ("cleo", 3)
    synthesis = state.fault.round
    before = len(fake_openai.requests)

    provider = LiteLLMProvider()
    orch = Orchestrator(
        ledger,
        provider,
        clock=FixedStepClock(start=state.updated_at + timedelta(seconds=1)),
        sleep=fast_sleep,
    )

    async def resume() -> Any:
        try:
            return await orch.resume(sid)
        finally:
            await provider.aclose()

    final = asyncio.run(resume())
    assert final.status.value == "converged"
    calls = fake_openai.requests[before:]
    synthesis_calls = [r for r in calls if "· synthesis ·" in r.last_user_message]
    assert [r.model for r in synthesis_calls] == ["cleo"]  # only the missing author, once
    cleo = _events_of(ledger, sid, synthesis, "cleo")
    assert [e.type for e in cleo] == ["ProviderCallFailed"] * 3 + ["ContributionRecorded"]
    assert [e.data["attempt"] for e in cleo] == [1, 2, 3, 4]
    assert verify_session(ledger, sid).ok
    assert replay_session(ledger, sid).ok


def test_unparseable_vote_is_repaired_once(ledger: Ledger) -> None:
    script = {n: voice(n) for n in NAMES[:3]}
    script["dov"] = voice(
        "dov",
        before=[{"match": "· convergence ·", "content": "Looks fine to me, ship it.", "times": 1}],
    )
    provider = ScriptedProvider.from_script(script)
    sid, state = run_session(ledger, generalists(None, NAMES), SessionConfig(),
                             provider=provider)
    vote_round = next(r for r in state.rounds if r.kind.value == "convergence")
    dov = [t for t, p in round_events(ledger, sid, vote_round.number) if p == "dov"]
    assert dov == ["ContributionRecorded", "ContributionRecorded", "VoteRecorded"]
    contribs = [
        e
        for e in _events_of(ledger, sid, vote_round.number, "dov")
        if e.type == "ContributionRecorded"
    ]
    assert [c.data["purpose"] for c in contribs] == ["answer", "repair"]
    repair_prompt = contribs[1].data["messages"][-1]["content"]
    assert repair_prompt.splitlines()[0].endswith("· repair")
    repair_calls = [
        c for c in provider.calls_for("dov") if "· repair" in c.messages[-1].content
    ]
    assert len(repair_calls) == 1
    assert state.status.value == "converged"


def test_unparseable_twice_is_a_parse_failure_and_an_abstention(ledger: Ledger) -> None:
    script = {n: voice(n) for n in NAMES[:3]}
    script["dov"] = voice(
        "dov",
        before=[
            {"match": "· repair", "content": "Still prose, sorry."},
            {"match": "· convergence ·", "content": "Looks fine to me, ship it."},
        ],
    )
    sid, state = run_session(ledger, generalists(None, NAMES), SessionConfig(),
                             provider=ScriptedProvider.from_script(script))
    vote_round = next(r for r in state.rounds if r.kind.value == "convergence")
    dov = [t for t, p in round_events(ledger, sid, vote_round.number) if p == "dov"]
    assert dov == ["ContributionRecorded", "ContributionRecorded", "ParseFailed"]
    completed = next(
        e
        for e in ledger.events(sid)
        if e.type == "RoundCompleted" and e.data["number"] == vote_round.number
    )
    assert "dov" in completed.data["abstained"]
    failed = next(
        e for e in _events_of(ledger, sid, vote_round.number, "dov") if e.type == "ParseFailed"
    )
    assert "after repair" in failed.data["error"]
    # three votes are enough: the session converges without dov's vote, nothing crashed
    assert state.status.value == "converged"
    assert verify_session(ledger, sid).ok


def test_fallback_hands_a_failed_synthesis_to_another_participant(ledger: Ledger) -> None:
    """With ``fallback`` the synthesizer's failure does not pause: the engine hands the round
    to the other participant of the same role, it writes the synthesis, the vote follows, and
    replay chooses the same fallback."""
    script = {n: voice(n) for n in NAMES}
    script["cleo"] = voice("cleo", before=[{"match": "· synthesis ·", "fault": "server_error"}])

    async def fast_sleep(_seconds: float) -> None:
        return None

    roles = (ParticipantRole.DRAFTER, ParticipantRole.CRITIC, ParticipantRole.SYNTHESIZER,
             ParticipantRole.SYNTHESIZER)
    parts = [
        p.model_copy(update={"role": role})
        for p, role in zip(generalists(None, NAMES), roles, strict=True)
    ]
    sid, state = run_session(
        ledger, parts, SessionConfig(max_attempts=2, fallback=True), sleep=fast_sleep,
        provider=ScriptedProvider.from_script(script),
    )
    assert state.status.value == "converged", state.status_reason
    chosen = [e for e in ledger.events(sid) if e.type == "FallbackChosen"]
    assert chosen
    assert all(
        (e.data["failed"], e.data["participant"]) == ("cleo", "dov") for e in chosen
    )
    first = state.round(chosen[0].data["round"])
    assert first is not None
    assert first.kind.value == "synthesis"
    assert first.contributors == ["dov"]
    assert first.replaced == ["cleo"]
    source = state.document_source
    assert source is not None
    assert source[1].participant == "dov"
    assert verify_session(ledger, sid).ok
    assert replay_session(ledger, sid).ok


def test_fallback_with_nobody_left_pauses(ledger: Ledger) -> None:
    script = {"*": [{"match": "· draft ·", "fault": "server_error"}]}

    async def fast_sleep(_seconds: float) -> None:
        return None

    sid, state = run_session(
        ledger,
        generalists(None, NAMES[:2]),
        SessionConfig(max_attempts=1, fallback=True),
        sleep=fast_sleep,
        provider=ScriptedProvider.from_script(script),
    )
    # both are drafters: the draft round already asked everyone, so no fallback is possible
    assert state.status.value == "paused"
    assert state.fault is not None
    assert state.fault.missing == ("ana", "ben")
    assert not [e for e in ledger.events(sid) if e.type == "FallbackChosen"]
