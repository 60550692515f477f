"""Builds realistic sessions through the ``Deliberation`` aggregate for the fork/audit/seal tests.

Every event goes through the aggregate's command methods (so invariants hold) with times from a
``FixedStepClock``; nothing here calls a model. A session is a list of iterations: draft,
critique, synthesis, convergence vote and its evaluation, with optional divergences.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from uuid import UUID

from forge_ledger.clock import FixedStepClock
from forge_ledger.domain import events as ev
from forge_ledger.domain.aggregate import Deliberation
from forge_ledger.domain.values import (
    ChatMessage,
    ConvergenceVote,
    Critique,
    DivergenceStatus,
    DivergentPosition,
    ModelResponse,
    Participant,
    ParticipantRole,
    RoundKind,
    SessionConfig,
    SessionStatus,
    Stance,
    TokenCount,
    Topic,
)

PARTICIPANTS = (
    Participant(name="alice", model="openai/alpha", role=ParticipantRole.DRAFTER),
    Participant(name="bob", model="openai/beta", role=ParticipantRole.CRITIC),
    Participant(name="carol", model="openai/gamma", role=ParticipantRole.SYNTHESIZER),
)


@dataclass
class Iteration:
    """One scripted iteration: votes by participant, what critics say, dissent to open/close."""

    votes: Mapping[str, Stance]
    critiques: bool = True
    synthesis: bool = True
    vote_reasons: Mapping[str, str] = field(default_factory=dict)
    open_dissent: Sequence[tuple[str, str, str]] = ()
    """(divergence id, topic, dissenting participant) opened after the critique round."""
    close_dissent: Sequence[tuple[str, DivergenceStatus, str]] = ()
    """(divergence id, new status, by) applied after the synthesis."""
    human_note: str | None = None
    failure_for: str | None = None


class SessionBuilder:
    def __init__(
        self,
        session_id: UUID,
        *,
        clock: FixedStepClock | None = None,
        participants: Sequence[Participant] = PARTICIPANTS,
        config: SessionConfig | None = None,
        title: str = "Rate limiter design",
    ) -> None:
        self.clock = clock or FixedStepClock()
        self.names = [p.name for p in participants]
        self.agg = Deliberation.start(
            session_id=session_id,
            topic=Topic(title=title, description="Design a token-bucket rate limiter."),
            config=config or SessionConfig(min_consensus=2, convergence_threshold=0.6),
            participants=participants,
            at=self.clock.now(),
        )
        self.iteration = 0

    # ------------------------------------------------------------------ rounds

    def _answer(self, number: int, name: str, text: str, *, tokens: int = 10) -> None:
        messages = [ChatMessage(role="user", content=f"round {number} prompt for {name}")]
        self.agg.record_contribution(
            round=number,
            participant=name,
            model=self.agg.state.participant(name).model,  # type: ignore[union-attr]
            messages=messages,
            params=ev.CallParams(temperature=0.7, max_tokens=256),
            prompt_hash=ev.prompt_hash(messages),
            response=ModelResponse(
                content=text,
                model=self.agg.state.participant(name).model,  # type: ignore[union-attr]
                tokens=TokenCount(input=tokens, output=tokens * 2),
                cost_usd=tokens * 0.001,
            ),
            at=self.clock.now(),
        )

    def simple_round(
        self, kind: RoundKind, texts: Mapping[str, str], targets: Mapping[str, str] | None = None
    ) -> int:
        number = self.agg.start_round(
            kind=kind,
            iteration=self.iteration,
            participants=list(texts),
            targets=dict(targets or {}),
            at=self.clock.now(),
        )
        for name, text in texts.items():
            self._answer(number, name, text)
        self.agg.complete_round(round=number, at=self.clock.now())
        return number

    def iterate(self, it: Iteration) -> None:
        self.iteration += 1
        k = self.iteration
        if k == 1:
            self.simple_round(RoundKind.DRAFT, {self.names[0]: f"Draft v1 of the limiter ({k})"})
        critique_round = 0
        if it.critiques:
            critics = self.names[1:]
            targets = {c: self.names[0] for c in critics}
            critique_round = self.agg.start_round(
                kind=RoundKind.CRITIQUE,
                iteration=k,
                participants=critics,
                targets=targets,
                at=self.clock.now(),
            )
            for c in critics:
                if it.failure_for == c:
                    self.agg.record_failure(
                        ev.ProviderCallFailed(
                            round=critique_round,
                            participant=c,
                            attempt=1,
                            model="openai/x",
                            error_type="RateLimitError",
                            message="429 too many requests",
                            retryable=True,
                            will_retry=True,
                            tokens=TokenCount(input=3),
                            cost_usd=0.0005,
                        ),
                        at=self.clock.now(),
                    )
                self._answer(critique_round, c, f"{c} critique in iteration {k}: bursts unbounded")
                self.agg.record_critique(
                    round=critique_round,
                    participant=c,
                    critique=Critique(
                        target=self.names[0],
                        weaknesses=(f"weakness seen by {c}",),
                        score=60,
                    ),
                    at=self.clock.now(),
                )
            self.agg.complete_round(round=critique_round, at=self.clock.now())
        for did, topic, who in it.open_dissent:
            self.agg.detect_divergence(
                ev.DivergenceDetected(
                    divergence_id=did,
                    round=critique_round or max(len(self.agg.state.rounds), 1),
                    topic=topic,
                    positions=(
                        DivergentPosition(
                            participant=who, position=f"{who} objects: {topic}",
                            stance=Stance.STRONGLY_DISAGREE,
                        ),
                    ),
                    strongest=Stance.STRONGLY_DISAGREE,
                ),
                at=self.clock.now(),
            )
        if it.human_note:
            self.agg.human_input(
                author="dana", text=it.human_note, kind="steer", at=self.clock.now()
            )
        if it.synthesis:
            self.simple_round(
                RoundKind.SYNTHESIS, {self.names[-1]: f"Synthesis {k}: merge critiques"}
            )
        for did, status, by in it.close_dissent:
            self.agg.change_divergence(
                did, status, at=self.clock.now(), round=len(self.agg.state.rounds), by=by,
                note=f"{status.value} by {by or 'the group'}",
            )
        self.vote(it.votes, it.vote_reasons)

    def vote(self, stances: Mapping[str, Stance], reasons: Mapping[str, str]) -> int:
        names = list(stances)
        number = self.agg.start_round(
            kind=RoundKind.CONVERGENCE, iteration=self.iteration, participants=names,
            at=self.clock.now(),
        )
        for name in names:
            self._answer(number, name, f"vote {stances[name].value}")
            self.agg.record_vote(
                round=number,
                participant=name,
                vote=ConvergenceVote(
                    agrees=stances[name].agrees,
                    stance=stances[name],
                    score=80 if stances[name].agrees else 30,
                    concerns=() if stances[name].agrees else (f"{name}: burst handling",),
                    reasoning=reasons.get(name, ""),
                ),
                at=self.clock.now(),
            )
        self.agg.complete_round(round=number, at=self.clock.now())
        agree = sum(1 for s in stances.values() if s.agrees)
        disagree = sum(1 for s in stances.values() if s.disagrees)
        partial = len(stances) - agree - disagree
        score = round(agree / len(stances), 4)
        cfg = self.agg.state.config
        self.agg.evaluate_convergence(
            ev.ConvergenceEvaluated(
                round=number,
                iteration=self.iteration,
                score=score,
                converged=score >= cfg.convergence_threshold and agree >= cfg.min_consensus,
                majority_agrees=agree * 2 > len(stances),
                agree=agree,
                disagree=disagree,
                partial=partial,
                threshold=cfg.convergence_threshold,
            ),
            at=self.clock.now(),
        )
        return number

    def finish(self, status: SessionStatus = SessionStatus.CONVERGED) -> None:
        self.agg.finish(status, at=self.clock.now(), reason="test script ended")


def build(
    session_id: UUID,
    iterations: Sequence[Iteration],
    *,
    finish: SessionStatus | None = SessionStatus.CONVERGED,
    clock: FixedStepClock | None = None,
) -> Deliberation:
    b = SessionBuilder(session_id, clock=clock)
    for it in iterations:
        b.iterate(it)
    if finish is not None:
        b.finish(finish)
    return b.agg


S = Stance
THREE_ITERATIONS = (
    Iteration(
        votes={"alice": S.AGREE, "bob": S.DISAGREE, "carol": S.DISAGREE},
        open_dissent=[("d1", "burst limits", "bob")],
        failure_for="bob",
    ),
    Iteration(
        votes={"alice": S.AGREE, "bob": S.DISAGREE, "carol": S.AGREE},
        vote_reasons={"carol": "the synthesis bounded bursts"},
        open_dissent=[("d2", "clock skew", "carol")],
        close_dissent=[("d2", DivergenceStatus.RESOLVED, "")],
        human_note="Focus on distributed deployments.",
    ),
    Iteration(
        votes={"alice": S.AGREE, "bob": S.AGREE, "carol": S.AGREE},
        critiques=False,
        synthesis=False,
    ),
)
"""alice agrees throughout; carol changes after a synthesis; bob flips in iteration 3 with no
critique, synthesis or human input before the vote (a conformity flip); d1 stays open."""
