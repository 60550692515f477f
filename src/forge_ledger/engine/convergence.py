"""Convergence scoring (DESIGN.md §1).

**Score.** Each vote's stance has a value — ``strongly_agree`` 1, ``agree`` 1, ``partial`` 0.5,
``disagree`` 0, ``strongly_disagree`` 0 — and the score is the role-weighted mean of those
values over the participants who voted (abstainers, i.e. missing or unparseable votes, are
excluded). It is in [0, 1] and never decreases when one vote moves towards agreement.

**Default role weights** (override per role with ``SessionConfig.role_weights``, keyed by the
role's value, e.g. ``{"domain_expert": 2.0}``):

================  ======  ===============================================================
role              weight  why
================  ======  ===============================================================
generalist        1.0     the baseline
drafter           1.0     the baseline
critic            1.0     the baseline
domain_expert     1.5     technical accuracy is its job
code_reviewer     1.25    quality and security of code outputs
synthesizer       0.75    it votes on its own synthesis: its approval counts for less
devils_advocate   0.75    it is asked to object; its objections still open divergences
================  ======  ===============================================================

Negative overrides count as 0; if every voter weighs 0 the plain mean is used.

**Converged** iff score ≥ ``convergence_threshold`` AND the number of agreeing voters ≥
``min_consensus`` capped at the number of voters (so a two-person session can converge) AND no
open divergence's strongest stance is ``strongly_disagree`` (a human overrule closes it, and
a later strong dissent on a topic a human already overruled does not block again). A strong
dissent blocks while one who holds it strongly is still a participant: when they all left (a
fork without them), it stays open in the dissent log, but nobody at the table holds it.
The plain majority (agreeing voters > half of the voters) is always reported beside the
weighted score, since much of the value of a debate is the vote itself.
(The conformity rule lives in :mod:`.conformity`.)
"""

from __future__ import annotations

from ..domain import events as ev
from ..domain.state import RoundState, SessionState
from ..domain.values import (
    DivergenceStatus,
    ParticipantRole,
    SessionConfig,
    Stance,
)
from .conformity import plain_majority
from .divergence import plan_divergences, project_open
from .topics import mentions, same_topic
from .votes import counted_votes

__all__ = [
    "DEFAULT_ROLE_WEIGHTS",
    "STANCE_VALUES",
    "convergence",
    "role_weight",
    "weighted_score",
]

DEFAULT_ROLE_WEIGHTS: dict[ParticipantRole, float] = {
    ParticipantRole.GENERALIST: 1.0,
    ParticipantRole.DRAFTER: 1.0,
    ParticipantRole.CRITIC: 1.0,
    ParticipantRole.DOMAIN_EXPERT: 1.5,
    ParticipantRole.CODE_REVIEWER: 1.25,
    ParticipantRole.SYNTHESIZER: 0.75,
    ParticipantRole.DEVILS_ADVOCATE: 0.75,
}

STANCE_VALUES: dict[Stance, float] = {
    Stance.STRONGLY_AGREE: 1.0,
    Stance.AGREE: 1.0,
    Stance.PARTIAL: 0.5,
    Stance.DISAGREE: 0.0,
    Stance.STRONGLY_DISAGREE: 0.0,
}


def role_weight(role: ParticipantRole, config: SessionConfig) -> float:
    """The vote weight of ``role``: the config's override, else the documented default."""
    override = config.role_weights.get(role.value)
    weight = DEFAULT_ROLE_WEIGHTS[role] if override is None else float(override)
    return max(weight, 0.0)


def weighted_score(votes: list[tuple[Stance, float]]) -> float:
    """Weighted mean of stance values, clamped to [0, 1]; 0.0 without votes."""
    if not votes:
        return 0.0
    total = sum(w for _, w in votes)
    if total <= 0:
        value = sum(STANCE_VALUES[s] for s, _ in votes) / len(votes)
    else:
        value = sum(STANCE_VALUES[s] * w for s, w in votes) / total
    return min(1.0, max(0.0, value))


def _votes(r: RoundState) -> tuple[list[tuple[str, Stance]], int]:
    """The counted voters' stances in expected order, and how many expected did not vote."""
    counted = counted_votes(r)
    voters = [(name, c.vote.effective_stance) for name, c in counted.items()
              if c.vote is not None]
    return voters, len(r.expected) - len(voters)


def convergence(state: SessionState, round: RoundState) -> ev.ConvergenceEvaluated:
    """Evaluate a completed convergence round (blocking dissent as it stands after the
    divergence events :func:`after_round` plans for this round)."""
    cfg = state.config
    voters, abstain = _votes(round)
    weights: dict[str, float] = {}
    for name, _ in voters:
        p = state.participant(name)
        role = p.role if p is not None else ParticipantRole.GENERALIST
        weights[name] = role_weight(role, cfg)
    score = weighted_score([(s, weights[n]) for n, s in voters])
    agree = sum(1 for _, s in voters if s.agrees)
    disagree = sum(1 for _, s in voters if s.disagrees)
    partial = len(voters) - agree - disagree
    open_after = project_open(state, plan_divergences(state, round.number))
    overruled = [d.topic for d in state.divergences if d.status is DivergenceStatus.OVERRULED]
    blocking = tuple(
        f"{d.id}: {d.topic}"
        for d in open_after
        if d.strongest is Stance.STRONGLY_DISAGREE
        and any(state.participant(name) is not None for name in d.strong_holders)
        and not any(same_topic(d.topic, topic) for topic in overruled)
    )
    needed = min(cfg.min_consensus, len(voters))
    converged = (
        bool(voters)
        and score >= cfg.convergence_threshold
        and agree >= needed
        and not blocking
    )
    remaining: list[str] = []
    for name, c in counted_votes(round).items():
        if c.vote is None or c.vote.effective_stance.agrees:
            continue
        for concern in c.vote.concerns:
            item = f"{name}: {concern}"
            if item not in remaining:
                remaining.append(item)
    for d in open_after:
        if not any(mentions(item, d.topic) for item in remaining):
            remaining.append(f"open divergence {d.id}: {d.topic}")
    return ev.ConvergenceEvaluated(
        round=round.number,
        iteration=round.iteration,
        score=score,
        converged=converged,
        majority_agrees=plain_majority(round),
        agree=agree,
        disagree=disagree,
        partial=partial,
        abstain=abstain,
        threshold=cfg.convergence_threshold,
        blocking=blocking,
        remaining_issues=tuple(remaining),
        weights=weights,
    )
