"""Deterministic replay of generated deliberations (issue "The promises", item 1).

A seeded generator draws a deliberation: 2–5 participants with random roles, random critique
scores and opinion stances, random agree/disagree per convergence vote, injected faults (HTTP
429 then OK, HTTP 500 retries, mid-stream disconnects, unparseable answers that need the repair
call), attended sessions answered by a human and resumed, and random budgets (rounds, cost,
time). Each one runs through the real orchestrator into a real ledger (SQLite file or
PostgreSQL schema); the models are ``ScriptedProvider.from_script`` answering by the generated
fake-server script in-process, its faults raised as the errors the real provider classifies
them as (the provider contract checks the two agree; HTTP is not the subject here). Then
``replay_session`` must re-produce every recorded event exactly, serving every recorded call
back without calling any model.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest.mock import patch
from uuid import UUID

import pytest

from forge_ledger.app import answer as record_answer
from forge_ledger.clock import FixedStepClock, SequentialIds
from forge_ledger.domain.state import SessionState
from forge_ledger.domain.values import (
    Mode,
    Participant,
    ParticipantRole,
    Persona,
    Price,
    RoundKind,
    SessionConfig,
    SessionStatus,
    Stance,
    Topic,
)
from forge_ledger.ledger import Ledger, RecordedEvent
from forge_ledger.orchestrator import KeyedSeal, NoSeal, Orchestrator
from forge_ledger.providers import LiteLLMProvider
from forge_ledger.records.replay import replay_session
from forge_ledger.testing import ScriptedProvider
from support.replay import assert_identical, recorded_calls

PRICE = Price(input_cost_per_token=3e-6, output_cost_per_token=15e-6, source="user")
_WORDS = [
    "ledger",
    "event",
    "replay",
    "hash",
    "chain",
    "vote",
    "critique",
    "synthesis",
    "budget",
    "audit",
    "fork",
    "projection",
    "schema",
    "storage",
    "retention",
    "consensus",
    "dissent",
    "prompt",
    "model",
    "round",
    "iteration",
]
_STANCES = list(Stance)
_FAULT_ERROR = {
    "rate_limit": "rate_limit",
    "server_error": "server_error",
    "disconnect": "mid_stream",
}


async def no_sleep(_: float) -> None:
    """Retry back-off is recorded, not waited for: tests do not sleep."""


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n))


@dataclass
class PlannedFault:
    participant: str
    kind: RoundKind
    fault: str  # rate_limit | server_error | disconnect | unparseable
    times: int = 1


@dataclass
class Scenario:
    """One generated deliberation: who takes part, what they answer, what goes wrong."""

    seed: int
    topic: Topic
    config: SessionConfig
    participants: list[Participant]
    script: dict[str, list[dict[str, Any]]]
    faults: list[PlannedFault] = field(default_factory=list)
    clock_step_secs: int = 1


def _critique_json(rng: random.Random, name: str) -> str:
    return json.dumps(
        {
            "strengths": [f"{name} likes the {_words(rng, 2)}"],
            "weaknesses": [f"the {_words(rng, 2)} is unclear"] if rng.random() < 0.8 else [],
            "suggestions": [
                {
                    "text": f"describe the {_words(rng, 3)}",
                    "section": rng.choice(["Storage", "Replay", "Errors"]),
                    "priority": rng.randint(1, 5),
                    "category": rng.choice(["completeness", "security", "architecture"]),
                },
            ],
            "score": rng.randint(20, 95),
        },
    )


def _opinion_json(rng: random.Random) -> str:
    stance = rng.choice(_STANCES)
    concerns = [f"{_words(rng, 2)} is missing"] if not stance.agrees else []
    return json.dumps(
        {
            "stance": stance.value,
            "reasoning": _words(rng, 8),
            "concerns": concerns,
            "strength": round(rng.random(), 2),
            "topics": [rng.choice(["retention policy", "hash chain", "replay", "budgets"])],
        },
    )


def _vote_json(rng: random.Random, lean: float) -> str:
    stance = (
        rng.choice([Stance.AGREE, Stance.STRONGLY_AGREE])
        if rng.random() < lean
        else rng.choice([Stance.PARTIAL, Stance.DISAGREE, Stance.STRONGLY_DISAGREE])
    )
    return json.dumps(
        {
            "agrees": stance.agrees,
            "stance": stance.value,
            "score": rng.randint(0, 100),
            "concerns": [] if stance.agrees else [f"the {rng.choice(_WORDS)} section is weak"],
            "reasoning": _words(rng, 6),
        },
    )


def generate(seed: int) -> Scenario:
    """Draw one deliberation from ``seed`` (same seed, same scenario)."""
    rng = random.Random(seed)
    n = rng.randint(2, 5)
    roles = list(ParticipantRole)
    participants = [
        Participant(
            name=f"p{i + 1}",
            model=f"openai/p{i + 1}",
            role=rng.choice(roles),
            temperature=round(rng.uniform(0, 1), 2),
            price=PRICE,
        )
        for i in range(n)
    ]
    structured = [
        RoundKind.CRITIQUE,
        RoundKind.RESPONSE,
        RoundKind.REFINEMENT,
        RoundKind.CONVERGENCE,
    ]
    faults: list[PlannedFault] = []
    for _ in range(rng.randint(1, 3)):
        who = rng.choice(participants).name
        fault = rng.choice(
            ["rate_limit", "server_error", "disconnect", "unparseable", "unparseable_twice"],
        )
        if fault.startswith("unparseable"):
            kind = rng.choice(structured)
        else:
            kind = rng.choice([RoundKind.DRAFT, RoundKind.CONVERGENCE, RoundKind.SYNTHESIS])
        times = rng.choice([1, 1, 2, 3]) if fault == "server_error" else 1
        if all(f.participant != who or f.kind != kind for f in faults):
            faults.append(PlannedFault(who, kind, fault, times))
    lean = rng.uniform(0.2, 0.85)
    script: dict[str, list[dict[str, Any]]] = {}
    for p in participants:
        rules: list[dict[str, Any]] = []
        for f in faults:
            if f.participant != p.name:
                continue
            match = f"· {f.kind.value} ·"
            if f.fault.startswith("unparseable"):
                times = 2 if f.fault == "unparseable_twice" else 1
                rules.append({"match": match, "content": "I would rather not say.", "times": times})
            else:
                rules.append({"match": match, "fault": f.fault, "retry_after": 0, "times": f.times})
        rules += [
            {
                "match": "· draft ·",
                "content": f"# Draft by {p.name}\n\n{_words(rng, rng.randint(20, 60))}",
            },
            {"match": "· critique ·", "content": _critique_json(rng, p.name)},
            {"match": "· response ·", "content": _opinion_json(rng)},
            {"match": "· refinement ·", "content": _opinion_json(rng)},
            {
                "match": "· synthesis ·",
                "content": f"# Synthesis by {p.name}\n\n{_words(rng, rng.randint(30, 80))}",
            },
        ]
        for k in range(1, 8):
            rules.append(
                {"match": rf"· convergence · iteration {k}\b", "content": _vote_json(rng, lean)},
            )
        script[p.name] = rules
    config = SessionConfig(
        max_rounds=rng.randint(5, 14),
        max_cost_usd=rng.choice([10.0, 10.0, 0.05, 0.02]),
        max_time_secs=rng.choice([3600, 3600, 90]),
        convergence_threshold=round(rng.uniform(0.55, 0.95), 2),
        min_consensus=rng.randint(1, n),
        attended=rng.random() < 0.4,
        max_recursive_depth=rng.randint(1, 3),
        mode=rng.choice(list(Mode)),
        persona=rng.choice(list(Persona)),
        max_tokens=rng.choice([256, 512, 1024]),
        max_attempts=3,
    )
    topic = Topic(
        title=f"Generated deliberation {seed}",
        description=_words(rng, 12),
        constraints=tuple(_words(rng, 3) for _ in range(rng.randint(0, 2))),
    )
    return Scenario(seed, topic, config, participants, script, faults, rng.randint(1, 5))


@dataclass
class Run:
    """What a scenario run left behind."""

    session_id: UUID
    state: SessionState
    calls: int
    human_answers: int


async def _drive(
    ledger: Ledger, orch: Orchestrator, sid: UUID, clock: FixedStepClock, answers: int,
) -> tuple[SessionState, int]:
    state = await orch.run(sid)
    given = 0
    while state.status is SessionStatus.PAUSED and given < answers:
        overrule: tuple[str, ...] = ()
        if given % 2 == 1 and state.open_divergences:
            overrule = (state.open_divergences[0].id,)
        record_answer(
            ledger,
            state.id,
            f"answer {given + 1}: keep it simple",
            author="reviewer",
            overrule=overrule,
            clock=clock,
        )
        given += 1
        state = await orch.resume(sid)
    return state, given


def run_scenario(
    ledger: Ledger,
    scenario: Scenario,
    *,
    answers: int = 3,
    start: datetime = datetime(2026, 1, 1, tzinfo=UTC),
) -> Run:
    """Run ``scenario`` through the real orchestrator, its models answering by its script."""
    clock = FixedStepClock(start, timedelta(seconds=scenario.clock_step_secs))
    ids = SequentialIds(f"replay-scenario-{scenario.seed}-{start.isoformat()}")
    provider = ScriptedProvider.from_script(scenario.script)

    async def go() -> tuple[UUID, SessionState, int]:
        try:
            orch = Orchestrator(
                ledger, provider, clock=clock, ids=ids, sleep=no_sleep,
                seal=KeyedSeal() if scenario.seed % 2 == 0 else NoSeal(),
            )
            sid = orch.start(scenario.topic, scenario.config, scenario.participants)
            state, given = await _drive(ledger, orch, sid, clock, answers)
            return sid, state, given
        finally:
            await provider.aclose()

    sid, state, given = asyncio.run(go())
    return Run(sid, state, len(provider.calls), given)


def _check_faults_happened(scenario: Scenario, events: list[RecordedEvent]) -> None:
    """The planned faults really happened wherever the participant was called in that kind."""
    kinds = {e.data["number"]: e.data["kind"] for e in events if e.type == "RoundStarted"}
    for f in scenario.faults:
        called = [
            e
            for e in events
            if e.type in ("ContributionRecorded", "ProviderCallFailed")
            and e.data["participant"] == f.participant
            and kinds.get(e.data["round"]) == f.kind.value
            and e.data.get("error_type") not in ("budget_cost", "budget_time")
        ]
        if not called:
            continue
        first_round = called[0].data["round"]
        in_round = [e for e in called if e.data["round"] == first_round]
        if f.fault.startswith("unparseable"):
            assert in_round[0].type == "ContributionRecorded"
            assert any(e.data.get("purpose") == "repair" for e in in_round) or any(
                e.type == "ProviderCallFailed" for e in in_round
            ), f"seed {scenario.seed}: no repair call after an unparseable answer"
            if f.fault == "unparseable_twice" and len(in_round) == 2:
                failed = [
                    e
                    for e in events
                    if e.type == "ParseFailed"
                    and e.data["round"] == first_round
                    and e.data["participant"] == f.participant
                ]
                assert failed, f"seed {scenario.seed}: two bad answers but no ParseFailed"
        else:
            errors = [e.data["error_type"] for e in in_round if e.type == "ProviderCallFailed"]
            assert errors, f"seed {scenario.seed}: planned {f.fault} not recorded"
            assert errors[0] == _FAULT_ERROR[f.fault]


def _run_and_replay(url: str, seed: int) -> None:
    scenario = generate(seed)
    with Ledger(url) as ledger:
        run = run_scenario(ledger, scenario)
        events = list(ledger.events(run.session_id))
        _, sent = recorded_calls(events)
        assert run.calls == sent, "every call the models got is recorded, and only those"
        _check_faults_happened(scenario, events)
        if run.human_answers:
            types = Counter(e.type for e in events)
            assert types["HumanInputRecorded"] == run.human_answers
            assert types["SessionResumed"] == run.human_answers
        head_before = ledger.max_notification_id()
        with patch.object(LiteLLMProvider, "complete", side_effect=AssertionError(
            "replay called a model",
        )) as model:
            result = replay_session(ledger, run.session_id)
        assert_identical(result, events)
        assert not model.called, "replay called a model"
        assert ledger.max_notification_id() == head_before, "replay wrote to the store"


SQLITE_SEEDS = list(range(101, 111))
PG_SEEDS = [201, 202, 203, 204]


def test_generator_is_deterministic_and_varied() -> None:
    assert generate(7) == generate(7)
    drawn = [generate(s) for s in SQLITE_SEEDS + PG_SEEDS]
    assert {len(s.participants) for s in drawn} == {2, 3, 4, 5}
    faults = {f.fault for s in drawn for f in s.faults}
    assert faults == {
        "rate_limit",
        "server_error",
        "disconnect",
        "unparseable",
        "unparseable_twice",
    }
    assert any(s.config.attended for s in drawn)
    assert not all(s.config.attended for s in drawn)


@pytest.mark.parametrize("seed", SQLITE_SEEDS)
def test_generated_deliberation_replays_identically_sqlite(sqlite_url: str, seed: int) -> None:
    _run_and_replay(sqlite_url, seed)


@pytest.mark.postgres
@pytest.mark.parametrize("seed", PG_SEEDS)
def test_generated_deliberation_replays_identically_postgres(pg_url: str, seed: int) -> None:
    _run_and_replay(pg_url, seed)


def test_generated_runs_cover_pauses_repairs_and_budget_stops(sqlite_url: str) -> None:
    """Across a few generated runs in one store, the interesting paths really occur, and
    ``replay`` of every session in the store stays identical."""
    seen: Counter[str] = Counter()
    with Ledger(sqlite_url) as ledger:
        for seed in (104, 105, 106, 107):
            run = run_scenario(ledger, generate(seed))
            for e in ledger.events(run.session_id):
                seen[e.type] += 1
                if e.type == "ProviderCallFailed":
                    seen[f"error:{e.data['error_type']}"] += 1
                if e.type == "ContributionRecorded" and e.data.get("purpose") == "repair":
                    seen["repair"] += 1
        for sid in ledger.session_ids():
            assert_identical(replay_session(ledger, sid), list(ledger.events(sid)))
    assert seen["ContributionRecorded"] > 0
    assert seen["VoteRecorded"] > 0
    assert seen["error:rate_limit"] + seen["error:server_error"] + seen["error:mid_stream"] > 0
