"""Session builders for the projection tests (no tests here).

Sessions are driven through the real ``Deliberation`` commands with a ``FixedStepClock`` and
saved to a real ledger round by round, so the notification log interleaves sessions the way
concurrent runs do. A seeded ``random.Random`` picks stances, critiques, divergences and
failures, which lets hypothesis explore many shapes while every run stays reproducible.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from datetime import timedelta

from forge_ledger.clock import FixedStepClock
from forge_ledger.domain import Deliberation
from forge_ledger.domain import events as ev
from forge_ledger.domain.values import (
    ChatMessage,
    ConvergenceVote,
    Critique,
    DivergenceStatus,
    DivergentPosition,
    ModelResponse,
    Opinion,
    Participant,
    Price,
    RoundKind,
    SessionConfig,
    SessionStatus,
    Stance,
    Suggestion,
    TokenCount,
    Topic,
)
from forge_ledger.ledger import Ledger

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
        self.clock = clock
        self.names = [f"P{i}" for i in range(1, self.rng.randint(2, 4) + 1)]
        self.agg = Deliberation.start(
            session_id=uuid.uuid5(uuid.NAMESPACE_URL, f"proj-{seed}-{index}"),
            topic=Topic(title=f"Topic {index} of {seed}", description="what to build"),
            config=SessionConfig(),
            participants=[Participant(name=n, model=f"openai/m{n}") for n in self.names],
            at=clock.now(),
        )
        self.iterations = self.rng.randint(1, 3)
        self.div_counter = 0

    def _contribute(self, number: int, name: str, kind: RoundKind, it: int) -> None:
        rng = self.rng
        if rng.random() < 0.1:
            self.agg.record_failure(ev.ProviderCallFailed(
                round=number, participant=name, attempt=1, model=f"openai/m{name}",
                error_type="RateLimitError", message="429", retryable=True, will_retry=True,
                cost_usd=0.0,
            ), at=self.clock.now())
        text = f"{kind.value} by {name} in iteration {it}: " + rng.choice(
            ["caching layer", "event sourcing", "sharded queue", "retry budget", "audit trail"]
        )
        msgs = [ChatMessage(role="user", content=f"do the {kind.value}")]
        self.agg.record_contribution(
            round=number, participant=name, model=f"openai/m{name}", messages=msgs,
            params=PARAMS, prompt_hash=ev.prompt_hash(msgs), response=_answer(text, rng),
            at=self.clock.now(), attempt=2 if rng.random() < 0.1 else 1,
        )

    def rounds(self) -> Iterator[None]:
        """Yields after each round (callers save there)."""
        rng, agg, names = self.rng, self.agg, self.names
        for it in range(1, self.iterations + 1):
            kinds = [RoundKind.DRAFT if it == 1 else RoundKind.REFINEMENT, RoundKind.CRITIQUE,
                     RoundKind.SYNTHESIS, RoundKind.CONVERGENCE]
            for kind in kinds:
                who = names[:1] if kind is RoundKind.SYNTHESIS else names
                targets = (
                    {n: names[(i + 1) % len(names)] for i, n in enumerate(names)}
                    if kind is RoundKind.CRITIQUE else None
                )
                number = agg.start_round(kind=kind, iteration=it, participants=who,
                                         targets=targets, at=self.clock.now())
                for i, name in enumerate(who):
                    self._contribute(number, name, kind, it)
                    if kind is RoundKind.CRITIQUE:
                        sugg = tuple(Suggestion(text=f"improve {rng.choice('abc')}",
                                                priority=rng.randint(1, 5))
                                     for _ in range(rng.randint(0, 2)))
                        agg.record_critique(round=number, participant=name, critique=Critique(
                            target=names[(i + 1) % len(names)],
                            weaknesses=("vague",) if rng.random() < 0.5 else (),
                            suggestions=sugg, score=rng.randint(0, 100)), at=self.clock.now())
                    elif kind is RoundKind.REFINEMENT:
                        agg.record_opinion(round=number, participant=name, opinion=Opinion(
                            stance=rng.choice(STANCES),
                            concerns=("latency",) if rng.random() < 0.3 else ()),
                            at=self.clock.now())
                    elif kind is RoundKind.CONVERGENCE:
                        if rng.random() < 0.1:
                            agg.record_parse_failure(round=number, participant=name,
                                                     expected="vote", error="no json",
                                                     at=self.clock.now())
                            continue
                        stance = rng.choice(STANCES)
                        agg.record_vote(round=number, participant=name, vote=ConvergenceVote(
                            agrees=stance.agrees, score=rng.randint(0, 100), stance=stance,
                            concerns=("cost",) if rng.random() < 0.3 else (),
                            reasoning=rng.choice(["same", "same", "because of the cache"])),
                            at=self.clock.now())
                agg.complete_round(round=number, at=self.clock.now())
                if kind is RoundKind.CONVERGENCE:
                    votes = [c.vote for c in agg.state.round(number).contributions if c.vote]
                    agree = sum(1 for v in votes if v.agrees)
                    agg.evaluate_convergence(ev.ConvergenceEvaluated(
                        round=number, iteration=it, score=rng.random(), converged=False,
                        majority_agrees=agree * 2 > len(votes), agree=agree,
                        disagree=len(votes) - agree, partial=0, threshold=0.85,
                    ), at=self.clock.now())
                if kind is RoundKind.CRITIQUE and rng.random() < 0.7:
                    self.div_counter += 1
                    a, b = names[0], names[1]
                    agg.detect_divergence(ev.DivergenceDetected(
                        divergence_id=f"div-{self.div_counter}", round=number,
                        topic=rng.choice(["storage", "api shape"]),
                        positions=(DivergentPosition(participant=a, position="x",
                                                     stance=Stance.AGREE),
                                   DivergentPosition(participant=b, position="y",
                                                     stance=rng.choice(
                                                         [Stance.DISAGREE,
                                                          Stance.STRONGLY_DISAGREE]))),
                        strongest=Stance.DISAGREE), at=self.clock.now())
                for d in list(agg.state.open_divergences):
                    if rng.random() < 0.3:
                        status = rng.choice([DivergenceStatus.ADDRESSED,
                                             DivergenceStatus.RESOLVED,
                                             DivergenceStatus.WITHDRAWN,
                                             DivergenceStatus.OVERRULED])
                        if d.status is DivergenceStatus.ADDRESSED and status is d.status:
                            status = DivergenceStatus.RESOLVED
                        agg.change_divergence(d.id, status, at=self.clock.now(), round=number,
                                              note="n", by="human" if status is
                                              DivergenceStatus.OVERRULED else "")
                yield None
        if rng.random() < 0.5:
            agg.finish(SessionStatus.COMPLETE, at=self.clock.now(), reason="done")
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
