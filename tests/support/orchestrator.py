"""Shared pieces of the orchestrator tests (no tests here): scripted voices, runs, event views.

Every run goes through the real orchestrator and a real ledger; the provider is the real
LiteLLMProvider over HTTP to the fake OpenAI-compatible server on 127.0.0.1, or, where HTTP is
not the subject, ``ScriptedProvider.from_script`` answering by the same script in-process.
The scripts pick replies by the prompt's first line, ``Round N · kind · iteration K``.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from forge_ledger.app.demo import demo_participants, demo_topic
from forge_ledger.clock import Clock, FixedStepClock, SequentialIds
from forge_ledger.domain.state import SessionState
from forge_ledger.domain.values import Participant, Price, SessionConfig, Topic
from forge_ledger.ledger import Ledger
from forge_ledger.orchestrator import MonotonicWallTime, Orchestrator
from forge_ledger.orchestrator.live import LiveEvent
from forge_ledger.providers import LiteLLMProvider, Provider
from forge_ledger.testing import ScriptedProvider, bundled_script

TIMING_KEYS = frozenset({"duration_ms", "ttft_ms", "root_hash"})
"""Wall-clock measurements, and the seal's root hash (it covers the events' durations)."""
PRICE = Price(input_cost_per_token=1e-6, output_cost_per_token=2e-6)

TOPIC = Topic(
    title="Retry policy for flaky model calls",
    description="How a deliberation tool should retry and record failed model calls.",
)


def critique_json(author: str, score: int = 75) -> str:
    return json.dumps(
        {
            "strengths": [f"{author}'s draft is concise"],
            "weaknesses": ["backoff limits are unstated"],
            "suggestions": [
                {
                    "text": "State the maximum number of attempts",
                    "section": "Retries",
                    "priority": 2,
                    "category": "completeness",
                },
            ],
            "score": score,
        },
    )


def opinion_json(
    stance: str = "agree", concerns: Sequence[str] = (), topics: Sequence[str] = ("retries",),
) -> str:
    return json.dumps(
        {
            "stance": stance,
            "reasoning": "The critique is fair and the change is small.",
            "concerns": list(concerns),
            "strength": 0.6,
            "topics": list(topics),
        },
    )


def vote_json(
    agrees: bool = True, stance: str = "agree", score: int = 90, concerns: Sequence[str] = (),
) -> str:
    return json.dumps(
        {
            "agrees": agrees,
            "score": score,
            "stance": stance,
            "concerns": list(concerns),
            "reasoning": "The synthesis covers retries and their records."
            if agrees
            else "The synthesis ignores what happens when every attempt fails.",
        },
    )


def draft_text(name: str, words: int = 0) -> str:
    body = f"# Retry policy by {name}\n\nRetry 429 and 5xx with backoff; record every attempt."
    if words:
        body += "\n\n" + " ".join(f"w{i}" for i in range(words))
    return body


def voice(
    name: str,
    *,
    latency: float | None = None,
    chunk_delay: float = 0.0,
    words: int = 0,
    vote: str | None = None,
    before: Sequence[dict[str, Any]] = (),
) -> list[dict[str, Any]]:
    """Reply rules for one generalist answering every round kind (``before`` rules win)."""

    def rule(match: str, content: str) -> dict[str, Any]:
        r: dict[str, Any] = {"match": match, "content": content, "chunk_delay": chunk_delay}
        if latency is not None:
            r["latency"] = latency
        return r

    return [
        *before,
        rule("· repair", vote or vote_json()),
        rule("· draft ·", draft_text(name, words)),
        rule("· critique ·", critique_json(name)),
        rule("· response ·", opinion_json()),
        rule("· refinement ·", opinion_json()),
        rule(
            "· synthesis ·",
            f"# Retry policy (synthesis)\n\nMerged by {name}. " + draft_text(name, words),
        ),
        rule("· convergence ·", vote or vote_json()),
    ]


def generalists(
    api_base: str | None, names: Sequence[str], *, price: Price | None = PRICE,
) -> list[Participant]:
    """Generalists on ``openai/NAME`` (at ``api_base``: None for an in-process provider)."""
    return [
        Participant(name=n, model=f"openai/{n}", api_base=api_base, price=price, temperature=0.2)
        for n in names
    ]


def run_session(
    ledger: Ledger,
    parts: Sequence[Participant],
    config: SessionConfig,
    *,
    topic: Topic = TOPIC,
    subscribers: Sequence[Callable[[LiveEvent], None]] = (),
    sleep: Callable[[float], Awaitable[None]] | None = None,
    monotonic: Callable[[], float] | None = None,
    deterministic: bool = True,
    clock: Clock | None = None,
    provider: Provider | None = None,
) -> tuple[UUID, SessionState]:
    """Start a session and run it to its end (or pause) through ``provider`` (the real one
    over HTTP unless told otherwise)."""
    provider = provider or LiteLLMProvider()
    kwargs: dict[str, Any] = {"subscribers": list(subscribers)}
    if deterministic:
        kwargs.update(clock=clock or FixedStepClock(), ids=SequentialIds())
    if sleep is not None:
        kwargs["sleep"] = sleep
    if monotonic is not None:
        kwargs["wall_time"] = MonotonicWallTime(monotonic)
    orch = Orchestrator(ledger, provider, **kwargs)

    async def go() -> tuple[UUID, SessionState]:
        try:
            sid = orch.start(topic, config, parts)
            return sid, await orch.run(sid)
        finally:
            await provider.aclose()

    return asyncio.run(go())


def strip_timings(obj: Any) -> Any:
    """The same data without wall-clock measurements (durations differ between runs)."""
    if isinstance(obj, dict):
        return {k: strip_timings(v) for k, v in obj.items() if k not in TIMING_KEYS}
    if isinstance(obj, list | tuple):
        return [strip_timings(v) for v in obj]
    return obj


def event_view(ledger: Ledger, sid: UUID) -> list[tuple[str, Any]]:
    """(type, payload minus timings) for every stored event of a session."""
    return [(e.type, strip_timings(e.data)) for e in ledger.events(sid)]


def types_of(ledger: Ledger, sid: UUID) -> list[str]:
    return [e.type for e in ledger.events(sid)]


def round_events(ledger: Ledger, sid: UUID, number: int) -> list[tuple[str, str]]:
    """(type, participant) of the per-participant events of round ``number``, in order."""
    return [
        (e.type, e.data["participant"])
        for e in ledger.events(sid)
        if e.data.get("round") == number and "participant" in e.data
    ]


DEMO_START = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)


async def _no_sleep(_: float) -> None:
    """Back-off is recorded, not waited for."""


def offline_demo_participants() -> list[Participant]:
    """The four-voices demo's participants, for an in-process provider (no endpoint)."""
    return [p.model_copy(update={"api_base": None}) for p in demo_participants("")]


def run_demo_session(store: str, *, anonymize: bool) -> uuid.UUID:
    """The four-voices demo run into ``store``, its voices answering in-process."""

    async def go() -> uuid.UUID:
        provider = ScriptedProvider.from_script(bundled_script("four-voices"))
        try:
            with Ledger(store) as ledger:
                clock = FixedStepClock(DEMO_START, timedelta(seconds=1))
                orch = Orchestrator(ledger, provider, clock=clock, ids=SequentialIds("audit"),
                                    sleep=_no_sleep)
                sid = orch.start(demo_topic(),
                                 SessionConfig(max_cost_usd=1.0, anonymize=anonymize),
                                 offline_demo_participants())
                await orch.run(sid)
                return sid
        finally:
            await provider.aclose()

    return asyncio.run(go())
