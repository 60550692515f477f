"""Session metrics as tidy rows: one per session, one per participant and session.

Every figure is read from the session's audit (:func:`~.analysis.audit_report`, itself built on
the projections and the engine's rules) and, for a fork, from its comparison with its parent
(:func:`~.counterfactual.compare_fork`): nothing here recomputes a rule. The study columns
(``study``, ``cell``, ``topic``, ``panel``, ``variant``, ``repeat``) are left to the caller,
which knows the plan the session belongs to.

Pure: the same audit gives the same rows.
"""

# No postponed annotations here: pydantic then reads the models' annotations as objects
# rather than compiling each from a string, which makes importing them (every command) faster.

from pydantic import BaseModel, ConfigDict

from ..domain.values import DivergenceStatus, SessionStatus
from .counterfactual import ForkComparison
from .model import AuditReport, DissentRecord, Trajectory

__all__ = ["ParticipantMetrics", "SessionMetrics", "participant_rows", "session_row"]


class _Row(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    study: str | None = None
    cell: str | None = None
    topic: str | None = None
    panel: str | None = None
    variant: str | None = None
    repeat: int | None = None


class SessionMetrics(_Row):
    """One session, one row."""

    session_id: str
    title: str
    status: str
    iterations: int
    rounds: int
    """Rounds recorded (the audit's rounds, including inherited ones for a fork)."""
    cost_usd: float | None
    """None when some call had no known price."""
    input_tokens: int
    output_tokens: int
    tokens: int
    converged: bool
    first_vote_majority: bool | None
    final_vote_majority: bool | None
    first_majority_is_final: bool | None
    stance_changes: int
    conformity_flags: int
    conformity_rate: float | None
    dissents_opened: int
    dissents_resolved: int
    dissents_overruled: int
    dissents_withdrawn: int
    dissents_open: int
    self_preference: float | None
    """Mean of the participants' ``score_gap`` (own minus others' mean score) where known."""
    parent_id: str | None = None
    fork_iteration: int | None = None
    without: tuple[str, ...] = ()
    similarity_to_parent: float | None = None
    outcome_changed: bool | None = None


class ParticipantMetrics(_Row):
    """One participant in one session, one row."""

    session_id: str
    participant: str
    model: str
    calls: int
    failed_calls: int
    cost_usd: float | None
    input_tokens: int
    output_tokens: int
    votes: int
    first_stance: str | None
    final_stance: str | None
    final_agrees: bool | None
    stance_changes: int
    conformity_flags: int
    dissents_held: int
    self_preference: float | None
    """This participant's ``score_gap``."""


def _mean(xs: list[float]) -> float | None:
    return round(sum(xs) / len(xs), 4) if xs else None


def session_row(
    audit: AuditReport,
    comparison: ForkComparison | None = None,
    **labels: str | int | None,
) -> SessionMetrics:
    """The session's row; ``comparison`` (a fork against its parent) fills the fork columns,
    ``labels`` the study columns."""
    effect = audit.deliberation_effect
    tally = effect.dissents
    gaps = [s.score_gap for s in audit.self_preference if s.score_gap is not None]
    fork: dict[str, object] = {}
    if comparison is not None:
        fork = {
            "parent_id": comparison.parent.session_id,
            "fork_iteration": comparison.fork_iteration,
            "without": comparison.without,
            "similarity_to_parent": comparison.document_similarity,
            "outcome_changed": comparison.outcome_changed,
        }
    elif audit.fork_origin is not None:
        fork = {
            "parent_id": audit.fork_origin.parent_id,
            "fork_iteration": audit.fork_origin.parent_iteration,
        }
    return SessionMetrics.model_validate(
        {
            **labels,
            **fork,
            "session_id": audit.session_id,
            "title": audit.title,
            "status": audit.status,
            "iterations": audit.iterations,
            "rounds": len(audit.usage_by_round),
            "cost_usd": audit.total.cost_usd,
            "input_tokens": audit.total.input_tokens,
            "output_tokens": audit.total.output_tokens,
            "tokens": audit.total.input_tokens + audit.total.output_tokens,
            "converged": audit.status == SessionStatus.CONVERGED.value,
            "first_vote_majority": effect.first_vote.majority_agrees if effect.first_vote else None,
            "final_vote_majority": effect.final_vote.majority_agrees if effect.final_vote else None,
            "first_majority_is_final": effect.first_majority_is_final,
            "stance_changes": effect.stance_changes,
            "conformity_flags": effect.conformity_flags,
            "conformity_rate": effect.conformity_rate,
            "dissents_opened": len(audit.dissent),
            "dissents_resolved": tally.resolved,
            "dissents_overruled": tally.overruled,
            "dissents_withdrawn": tally.withdrawn,
            "dissents_open": tally.open,
            "self_preference": _mean(gaps),
        }
    )


def _held(dissent: tuple[DissentRecord, ...], name: str) -> int:
    """Open divergences ``name`` holds (its stance disagrees) when the record ends."""
    return sum(
        1
        for d in dissent
        if not DivergenceStatus(d.status).closed and any(who == name for who, _ in d.held_by)
    )


def participant_rows(audit: AuditReport, **labels: str | int | None) -> list[ParticipantMetrics]:
    """One row per participant the audit knows (who voted, was called or judged), in the
    audit's order; ``labels`` fill the study columns."""
    usage = {u.participant: u for u in audit.usage_by_participant}
    paths: dict[str, Trajectory] = {t.participant: t for t in audit.trajectories}
    prefs = {s.participant: s.score_gap for s in audit.self_preference}
    names = list(dict.fromkeys([*usage, *paths, *prefs]))
    rows = []
    for name in names:
        u = usage.get(name)
        t = paths.get(name)
        votes = t.votes if t is not None else ()
        rows.append(
            ParticipantMetrics.model_validate(
                {
                    **labels,
                    "session_id": audit.session_id,
                    "participant": name,
                    "model": (u.model if u is not None else "")
                    or (t.model if t is not None else ""),
                    "calls": u.calls if u else 0,
                    "failed_calls": u.failed_calls if u else 0,
                    "cost_usd": u.cost_usd if u else 0.0,
                    "input_tokens": u.input_tokens if u else 0,
                    "output_tokens": u.output_tokens if u else 0,
                    "votes": len(votes),
                    "first_stance": votes[0].stance.value if votes else None,
                    "final_stance": votes[-1].stance.value if votes else None,
                    "final_agrees": votes[-1].agrees if votes else None,
                    "stance_changes": sum(1 for s in audit.stance_shifts if s.participant == name),
                    "conformity_flags": sum(1 for c in audit.conformity if c.participant == name),
                    "dissents_held": _held(audit.dissent, name),
                    "self_preference": prefs.get(name),
                }
            )
        )
    return rows
