"""The consensus trail: how each convergence vote came about.

For every convergence round it lists each participant's stance, score and concerns; whether
the stance changed since that participant's previous vote, which critique / synthesis /
response / refinement round preceded the change, and **who moved whom** (the influences the
engine's matching rule finds, each with a verbatim quote); the plain majority vote beside the
weighted score the engine recorded (``ConvergenceEvaluated``); and the **conformity** flag.
Stance changes, influences and conformity come from one rule,
:mod:`forge_ledger.engine.conformity`, and :func:`influence_json` / :func:`change_json` give
their JSON shape once: the audit's report model is filled from them, so ``trail --json`` and
``audit --json`` never disagree.

:func:`consensus_trail` is pure (state or events in, trail out) and the audit is built on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from forge_ledger.domain import RoundKind, RoundState, SessionState, canonical_json
from forge_ledger.domain import events as ev
from forge_ledger.domain.events import Payload
from forge_ledger.domain.json_fields import JsonFields
from forge_ledger.domain.text import text_key
from forge_ledger.domain.values import ConvergenceVote
from forge_ledger.engine.conformity import (
    Influence,
    StanceChange,
    plain_majority,
    round_changes,
)

from .base import EventLike, Op, Projection, Put, links
from .session_state import fold_events

__all__ = [
    "ConsensusProjection",
    "PrecedingRound",
    "TrailRound",
    "TrailVote",
    "change_json",
    "consensus_trail",
    "influence_json",
    "trail_round",
]

_ARGUMENT_KINDS = (
    RoundKind.CRITIQUE, RoundKind.SYNTHESIS, RoundKind.RESPONSE, RoundKind.REFINEMENT
)


@dataclass(frozen=True)
class PrecedingRound(JsonFields):
    """The last argument round before a vote: its number, kind and last event position."""

    round: int
    kind: str
    position: int


@dataclass(frozen=True)
class TrailVote(JsonFields):
    """One participant's vote in a convergence round, with how it came about."""

    json_keys = (
        "participant", "stance", "agrees", "score", "concerns", "reasoning", "position",
        "previous_round", "previous_stance", "changed", "preceded_by", "new_arguments",
        "reasoning_changed", "toward_majority", "influences", "conformity",
    )

    participant: str
    stance: str
    agrees: bool
    score: int
    concerns: tuple[str, ...]
    reasoning: str
    position: int
    """Position of the contribution that carries the vote."""
    previous_round: int | None
    previous_stance: str | None
    changed: bool
    preceded_by: PrecedingRound | None
    change: StanceChange | None
    """The engine's account of the change (influences, own arguments, conformity)."""
    reasoning_changed: bool
    """The vote's reasoning text differs from the previous vote's (informative only)."""

    @property
    def new_arguments(self) -> tuple[str, ...]:
        """What was new since the previous vote: influences and the participant's own points."""
        if self.change is None:
            return ()
        return (
            *(f"{i.kind} by {i.author} in round {i.round} on {i.topic}: \u201c{i.quote}\u201d"
              if i.round is not None else f"human input by {i.author} on {i.topic}"
              for i in self.change.influences),
            *self.change.own_arguments,
        )

    @property
    def conformity(self) -> bool:
        return self.change is not None and self.change.conformity

    @property
    def toward_majority(self) -> bool:
        return self.change is not None and self.change.toward_majority

    @property
    def influences(self) -> tuple[Influence, ...]:
        """Who moved this participant to the vote (the engine's matching rule)."""
        return self.change.influences if self.change is not None else ()

    def as_json(self) -> dict[str, Any]:
        """Influences in the shape the audit shares (:func:`influence_json`)."""
        return {**super().as_json(), "influences": [influence_json(i) for i in self.influences]}


@dataclass(frozen=True)
class TrailRound(JsonFields):
    """One convergence round of the trail: the plain majority beside the engine's score."""

    json_keys = (
        "round", "iteration", "superseded", "majority", "weighted_score", "threshold",
        "converged", "evaluated_position", "abstained", "conformity", "votes",
    )

    round: int
    iteration: int
    superseded: bool
    votes: tuple[TrailVote, ...]
    abstained: tuple[str, ...]
    majority_agrees: bool
    """Plain majority: more than half of the votes cast agree."""
    agree: int
    disagree: int
    partial: int
    weighted_score: float | None
    """The engine's role-weighted score (None until the round is evaluated)."""
    threshold: float | None
    converged: bool | None
    evaluated_position: int | None

    @property
    def conformity(self) -> list[str]:
        return [v.participant for v in self.votes if v.conformity]

    @property
    def changes(self) -> list[StanceChange]:
        return [v.change for v in self.votes if v.change is not None]

    @property
    def majority(self) -> dict[str, Any]:
        """The plain-majority count, abstentions included."""
        return {
            "agrees": self.majority_agrees,
            "agree": self.agree,
            "disagree": self.disagree,
            "partial": self.partial,
            "abstain": len(self.abstained),
        }

    def as_json(self) -> dict[str, Any]:
        """Conformity as the flags themselves (:func:`change_json`), not only the names."""
        flags = [change_json(c) for c in self.changes if c.conformity]
        return {**super().as_json(), "conformity": flags}


def _votes(r: RoundState) -> dict[str, tuple[ConvergenceVote, int]]:
    out: dict[str, tuple[ConvergenceVote, int]] = {}
    for c in r.contributions:
        if c.vote is not None:
            out[c.participant] = (c.vote, c.position)
    return out


def _between(state: SessionState, after: int, before: int) -> list[RoundState]:
    """Rounds numbered strictly between ``after`` and ``before`` (rounds are numbered 1..n)."""
    rounds = state.rounds
    if all(rounds[i].number == i + 1 for i in (after, before - 2) if 0 <= i < len(rounds)):
        return rounds[after:max(before - 1, after)]
    return [r for r in rounds if after < r.number < before]


def influence_json(i: Influence) -> dict[str, Any]:
    """An influence edge as the trail and the audit print it: who moved whom, with a quote."""
    return {"from": i.author, "to": i.participant, "round": i.round, "topic": i.topic,
            "quote": i.quote, "position": i.position, "kind": i.kind, "match": i.match}


def change_json(c: StanceChange) -> dict[str, Any]:
    """A conformity flag as the trail and the audit print it."""
    return {"participant": c.participant, "round": c.to_round, "from": c.from_stance.value,
            "to": c.to_stance.value, "reason": c.reason}


def _preceding(state: SessionState, after: int, before: int) -> PrecedingRound | None:
    last: PrecedingRound | None = None
    for r in _between(state, after, before):
        if r.kind in _ARGUMENT_KINDS:
            pos = r.contributions[-1].position if r.contributions else r.started_position
            last = PrecedingRound(r.number, r.kind.value, pos)
    return last


def _previous_votes(
    state: SessionState, number: int, names: set[str], superseded: bool = False
) -> dict[str, tuple[RoundState, ConvergenceVote]]:
    """Each of ``names``' latest vote in a convergence round numbered below ``number``.

    Walks back from the newest round and stops once every name is found, so the usual case
    (everyone voted in the previous convergence round) does not scan the whole session.
    """
    found: dict[str, tuple[RoundState, ConvergenceVote]] = {}
    for x in reversed(state.rounds):
        if len(found) == len(names):
            break
        if x.kind is not RoundKind.CONVERGENCE or x.number >= number:
            continue
        if x.superseded and not superseded:  # a rewind undid it: the engine's view too
            continue
        for name, (vote, _) in _votes(x).items():
            if name in names and name not in found:
                found[name] = (x, vote)
    return found


def trail_round(state: SessionState, number: int) -> TrailRound | None:
    """The trail entry of convergence round ``number`` (None if it is not one)."""
    r = state.round(number)
    if r is None or r.kind is not RoundKind.CONVERGENCE:
        return None
    votes = _votes(r)
    previous = _previous_votes(state, number, set(votes), r.superseded)
    changes = {c.participant: c for c in round_changes(state, number)}
    trail: list[TrailVote] = []
    for name in [*r.expected, *[n for n in votes if n not in r.expected]]:
        if name not in votes:
            continue
        vote, pos = votes[name]
        prev_round, prev_vote = previous.get(name, (None, None))
        after = prev_round.number if prev_round is not None else 0
        stance = vote.effective_stance
        changed = prev_vote is not None and prev_vote.effective_stance is not stance
        reasoning_changed = prev_vote is not None and text_key(prev_vote.reasoning) != text_key(
            vote.reasoning
        )
        trail.append(
            TrailVote(
                participant=name,
                stance=stance.value,
                agrees=vote.agrees,
                score=vote.score,
                concerns=vote.concerns,
                reasoning=vote.reasoning,
                position=pos,
                previous_round=prev_round.number if prev_round is not None else None,
                previous_stance=prev_vote.effective_stance.value if prev_vote else None,
                changed=changed,
                preceded_by=_preceding(state, after, number) if changed else None,
                change=changes.get(name),
                reasoning_changed=reasoning_changed,
            )
        )
    ev_ = state.evaluation(number)
    agree = sum(1 for v in trail if v.agrees)
    partial = sum(1 for v in trail if v.stance == "partial")
    return TrailRound(
        round=number,
        iteration=r.iteration,
        superseded=r.superseded,
        votes=tuple(trail),
        abstained=tuple(n for n in r.expected if n not in votes),
        majority_agrees=plain_majority(r),
        agree=agree,
        disagree=len(trail) - agree - partial,
        partial=partial,
        weighted_score=ev_.score if ev_ is not None else None,
        threshold=ev_.threshold if ev_ is not None else None,
        converged=ev_.converged if ev_ is not None else None,
        evaluated_position=ev_.position if ev_ is not None else None,
    )


def consensus_trail(source: SessionState | Iterable[EventLike]) -> list[TrailRound]:
    """Every convergence round of a session, in order. Pure: state or events in, trail out."""
    state = source if isinstance(source, SessionState) else fold_events(source)
    out = []
    for r in state.rounds:
        t = trail_round(state, r.number)
        if t is not None:
            out.append(t)
    return out


class ConsensusProjection(Projection):
    """Table ``consensus_trail``: one row per vote, rewritten when its round changes."""

    name = "consensus"
    version = 2
    tables = ("consensus_trail",)

    def apply(self, _event: EventLike, payload: Payload, state: SessionState) -> Sequence[Op]:
        # a round's trail is written when it completes and rewritten when it is evaluated
        # (not on every vote: that would recompute the round once per voter)
        if isinstance(payload, ev.ConvergenceEvaluated):
            number = payload.round
        elif isinstance(payload, ev.RoundCompleted):
            number = payload.number
        else:
            return ()
        t = trail_round(state, number)
        if t is None:
            return ()
        sid = state.id
        return [
            Put("consensus_trail", {
                "id": f"{sid}:{t.round}:{v.participant}",
                **links(sid, t.round, v.participant),
                "round": t.round,
                "iteration": t.iteration,
                "stance": v.stance,
                "agrees": int(v.agrees),
                "score": v.score,
                "concerns_json": canonical_json(list(v.concerns)),
                "previous_round": v.previous_round,
                "previous_stance": v.previous_stance,
                "changed": int(v.changed),
                "preceded_by_round": v.preceded_by.round if v.preceded_by else None,
                "preceded_by_kind": v.preceded_by.kind if v.preceded_by else None,
                "preceded_by_position": v.preceded_by.position if v.preceded_by else None,
                "new_arguments": len(v.new_arguments),
                "reasoning_changed": int(v.reasoning_changed),
                "conformity": int(v.conformity),
                "weighted_score": t.weighted_score,
                "majority_agrees": int(t.majority_agrees),
                "vote_position": v.position,
            })
            for v in t.votes
        ]
