"""Budgets through the orchestrator and a real ledger: cost reservations refuse calls before they
are made, max_rounds ends the session, max_time_secs (on an injected monotonic clock) times it
out. The voices answer in-process (``ScriptedProvider``): HTTP is not the subject here."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from forge_ledger.clock import FixedStepClock
from forge_ledger.domain.values import Price, SessionConfig
from forge_ledger.ledger import Ledger, verify_session
from forge_ledger.orchestrator.live import LiveEvent, RoundComplete
from forge_ledger.testing import ScriptedProvider
from support.orchestrator import generalists, run_session, voice

NAMES = ("ana", "ben", "cleo")
DEAR = Price(input_cost_per_token=1e-4, output_cost_per_token=1e-4)


@pytest.fixture
def voices() -> ScriptedProvider:
    return ScriptedProvider.from_script({n: voice(n) for n in NAMES})


@pytest.fixture
def ledger(tmp_path: Path) -> Any:
    with Ledger(str(tmp_path / "budgets.sqlite"), create=True) as led:
        yield led


def test_cost_budget_refuses_calls_beyond_the_reservation(
    voices: ScriptedProvider, ledger: Ledger,
) -> None:
    # worst case per draft call ≈ (prompt ≈ 100-250 tokens + 100 answer tokens) · 1e-4 ≈ $0.03:
    # $0.07 reserves two of the three draft calls and refuses the third before it is made.
    config = SessionConfig(max_cost_usd=0.07, max_tokens=100)
    sid, state = run_session(ledger, generalists(None, NAMES, price=DEAR), config,
                             provider=voices)
    events = list(ledger.events(sid))
    types = [e.type for e in events]
    assert state.status.value == "complete"
    exhausted = [e for e in events if e.type == "BudgetExhausted"]
    assert len(exhausted) == 1
    assert exhausted[0].data["budget"] == "cost"
    refused = [
        e
        for e in events
        if e.type == "ProviderCallFailed" and e.data["error_type"] == "budget_cost"
    ]
    assert refused, "a call should have been refused by the reservation"
    assert all(e.data["will_retry"] is False for e in refused)
    # partial results are kept
    contributions = [e for e in events if e.type == "ContributionRecorded"]
    assert contributions
    assert "SessionCompleted" in types
    assert "SessionSealed" in types
    # no call beyond the reservation reached the provider; the spend stays within the budget
    made = [
        e
        for e in events
        if e.type == "ContributionRecorded"
        or (e.type == "ProviderCallFailed" and not e.data["error_type"].startswith("budget_"))
    ]
    assert len(voices.calls) == len(made)
    assert state.cost_usd <= config.max_cost_usd
    for e in refused:  # a refused participant was not called at all in that round
        header = f"Round {e.data['round']} ·"
        assert not [
            c
            for c in voices.calls_for(e.data["participant"])
            if c.messages[-1].content.startswith(header)
        ]
    assert verify_session(ledger, sid).ok


def test_max_rounds_ends_the_session(voices: ScriptedProvider, ledger: Ledger) -> None:
    sid, state = run_session(
        ledger, generalists(None, NAMES), SessionConfig(max_rounds=2), provider=voices,
    )
    assert state.status.value == "complete"
    assert [r.kind.value for r in state.rounds] == ["draft", "critique"]
    exhausted = [e for e in ledger.events(sid) if e.type == "BudgetExhausted"]
    assert [e.data["budget"] for e in exhausted] == ["rounds"]
    assert exhausted[0].data["limit"] == 2
    assert len(voices.calls) == 2 * len(NAMES)
    assert not any("· response ·" in c.messages[-1].content for c in voices.calls)


def test_time_budget_times_the_session_out(voices: ScriptedProvider, ledger: Ledger) -> None:
    now = [1000.0]

    def monotonic() -> float:
        return now[0]

    def time_flies(event: LiveEvent) -> None:
        """Ten minutes pass during the first round (the session allows one)."""
        if isinstance(event, RoundComplete) and event.round == 1:
            now[0] += 600.0

    sid, state = run_session(
        ledger,
        generalists(None, NAMES),
        SessionConfig(max_time_secs=60),
        monotonic=monotonic,
        subscribers=[time_flies],
        clock=FixedStepClock(step=timedelta(milliseconds=1)),
        provider=voices,
    )
    assert state.status.value == "timed_out"
    events = list(ledger.events(sid))
    exhausted = [e for e in events if e.type == "BudgetExhausted"]
    assert [e.data["budget"] for e in exhausted] == ["time"]
    # round 1 ran normally; round 2's calls were refused without reaching the provider
    assert [
        e.data["participant"]
        for e in events
        if e.type == "ContributionRecorded" and e.data["round"] == 1
    ] == list(NAMES)
    late = [e for e in events if e.data.get("round") == 2 and e.type == "ProviderCallFailed"]
    assert late
    assert all(e.data["error_type"] == "budget_time" for e in late)
    assert not any(e.type == "ContributionRecorded" and e.data["round"] == 2 for e in events)
    assert len(voices.calls) == len(NAMES)
    assert "SessionTimedOut" in [e.type for e in events]
