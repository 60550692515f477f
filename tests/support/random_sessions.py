"""Seeded random sessions for the projection tests (no tests here).

Sessions are told with ``SessionBuilder`` (the real ``Deliberation`` commands) on a shared
``FixedStepClock`` and saved to a real ledger round by round, so the notification log
interleaves sessions the way concurrent runs do. A seeded ``random.Random`` picks stances,
critiques, divergences and failures, which lets hypothesis explore many shapes while every run
stays reproducible.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from datetime import timedelta

from forge_ledger.clock import FixedStepClock
from forge_ledger.domain import events as ev
from forge_ledger.domain.values import (
    ChatMessage,
    DivergenceStatus,
    ModelResponse,
    Participant,
    Price,
    RoundKind,
    SessionStatus,
    Stance,
    Suggestion,
    TokenCount,
    Topic,
)
from forge_ledger.ledger import Ledger
from forge_ledger.testing import SessionBuilder

PRICE = Price(input_cost_per_token=1e-6, output_cost_per_token=2e-6)
STANCES = list(Stance)
PARAMS = ev.CallParams(temperature=0.2, max_tokens=256)


def _answer(text: str, rng: random.Random) -> ModelResponse:
    tokens = TokenCount(input=rng.randint(10, 500), output=rng.randint(10, 300))
    return ModelResponse(
        content=text, model="openai/fake", tokens=tokens, cost_usd=PRICE.cost(tokens),
        price=PRICE, duration_ms=rng.randint(1, 900),
    )


class SessionScript:
    """Builds one session step by step; each ``step()`` appends one round's worth of events."""

    def __init__(self, seed: int, index: int, clock: FixedStepClock) -> None:
        self.rng = random.Random(seed * 1000 + index)
        self.names = [f"P{i}" for i in range(1, self.rng.randint(2, 4) + 1)]
        self.b = SessionBuilder(clock=clock).start(
            Topic(title=f"Topic {index} of {seed}", description="what to build"),
            participants=[Participant(name=n, model=f"openai/m{n}") for n in self.names],
            session_id=uuid.uuid5(uuid.NAMESPACE_URL, f"proj-{seed}-{index}"),
        )
        self.agg = self.b.aggregate
        self.iterations = self.rng.randint(1, 3)
        self.div_counter = 0

    def _contribute(self, name: str, kind: RoundKind, it: int) -> None:
        rng = self.rng
        if rng.random() < 0.1:
            self.b.fail(name, message="429", cost_usd=0.0)
        text = f"{kind.value} by {name} in iteration {it}: " + rng.choice(
            ["caching layer", "event sourcing", "sharded queue", "retry budget", "audit trail"],
        )
        response = _answer(text, rng)
        self.b.answer(name, response=response, params=PARAMS,
                      messages=[ChatMessage(role="user", content=f"do the {kind.value}")],
                      attempt=2 if rng.random() < 0.1 else 1)

    def _parsed(self, kind: RoundKind, i: int, name: str) -> None:
        """What the round's kind parses from ``name``'s answer (drawn from the seed)."""
        rng, b, names = self.rng, self.b, self.names
        if kind is RoundKind.CRITIQUE:
            sugg = tuple(Suggestion(text=f"improve {rng.choice('abc')}",
                                    priority=rng.randint(1, 5))
                         for _ in range(rng.randint(0, 2)))
            b.critique(name, target=names[(i + 1) % len(names)],
                       weaknesses=("vague",) if rng.random() < 0.5 else (),
                       suggestions=sugg, score=rng.randint(0, 100))
        elif kind is RoundKind.REFINEMENT:
            b.opinion(name, stance=rng.choice(STANCES),
                      concerns=("latency",) if rng.random() < 0.3 else ())
        elif kind is RoundKind.CONVERGENCE:
            if rng.random() < 0.1:
                b.parse_failure(name, expected="vote", error="no json")
                return
            stance = rng.choice(STANCES)
            b.vote(name, agrees=stance.agrees, score=rng.randint(0, 100), stance=stance,
                   concerns=("cost",) if rng.random() < 0.3 else (),
                   reasoning=rng.choice(["same", "same", "because of the cache"]))

    def _after(self, kind: RoundKind, it: int) -> None:
        """The round's evaluation, divergence and divergence changes (drawn from the seed)."""
        rng, b, names = self.rng, self.b, self.names
        if kind is RoundKind.CONVERGENCE:
            votes = [c.vote for c in b.state.round(b.round_number).contributions if c.vote]
            agree = sum(1 for v in votes if v.agrees)
            b.evaluate(iteration=it, score=rng.random(), converged=False,
                       majority_agrees=agree * 2 > len(votes), agree=agree,
                       disagree=len(votes) - agree, partial=0, threshold=0.85)
        if kind is RoundKind.CRITIQUE and rng.random() < 0.7:
            self.div_counter += 1
            b.diverge(f"div-{self.div_counter}", rng.choice(["storage", "api shape"]),
                      {names[0]: ("x", Stance.AGREE),
                       names[1]: ("y", rng.choice([Stance.DISAGREE, Stance.STRONGLY_DISAGREE]))},
                      strongest=Stance.DISAGREE)
        for d in list(b.state.open_divergences):
            if rng.random() < 0.3:
                status = rng.choice([DivergenceStatus.ADDRESSED, DivergenceStatus.RESOLVED,
                                     DivergenceStatus.WITHDRAWN, DivergenceStatus.OVERRULED])
                if d.status is DivergenceStatus.ADDRESSED and status is d.status:
                    status = DivergenceStatus.RESOLVED
                b.settle(d.id, status, note="n",
                         by="human" if status is DivergenceStatus.OVERRULED else "")

    def rounds(self) -> Iterator[None]:
        """Yields after each round (callers save there)."""
        names = self.names
        for it in range(1, self.iterations + 1):
            kinds = [RoundKind.DRAFT if it == 1 else RoundKind.REFINEMENT, RoundKind.CRITIQUE,
                     RoundKind.SYNTHESIS, RoundKind.CONVERGENCE]
            for kind in kinds:
                who = names[:1] if kind is RoundKind.SYNTHESIS else names
                targets = (
                    {n: names[(i + 1) % len(names)] for i, n in enumerate(names)}
                    if kind is RoundKind.CRITIQUE else None
                )
                self.b.round(kind, iteration=it, participants=who, targets=targets)
                for i, name in enumerate(who):
                    self._contribute(name, kind, it)
                    self._parsed(kind, i, name)
                self.b.close_round()
                self._after(kind, it)
                yield None
        if self.rng.random() < 0.5:
            self.b.finish(SessionStatus.COMPLETE, reason="done")
            yield None


def build_ledger(ledger: Ledger, seed: int, sessions: int) -> list[str]:
    """Builds ``sessions`` interleaved sessions, saving after every round; returns their ids."""
    clock = FixedStepClock(step=timedelta(milliseconds=1500))
    scripts = [SessionScript(seed, i, clock) for i in range(sessions)]
    gens = [s.rounds() for s in scripts]
    live = list(range(sessions))
    rng = random.Random(seed)
    for s in scripts:
        ledger.save(s.agg)
    while live:
        i = rng.choice(live)
        try:
            next(gens[i])
        except StopIteration:
            live.remove(i)
        ledger.save(scripts[i].agg)
    return [str(s.agg.id) for s in scripts]
