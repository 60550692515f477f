"""A fork against its parent: what the change made at the fork point did to the outcome.

A fork shares its parent's history up to the fork point and differs after it by one change
(a model swapped, a participant dropped, a config value). Both sides are read through the same
audit (:func:`~.analysis.audit_report`) and session fold, so the comparison applies no rule of
its own:

- **outcome**: converged or not (the session's status), and the plain majority of the final
  vote (``DeliberationEffect.final_vote``); the outcome changed when either differs;
- **document similarity**: :func:`~.analysis.document_similarity` (the audit's one measure:
  ``difflib`` ratio over the words) of the two final documents (``SessionState.latest_text``);
- **rounds and cost to converge**: the rounds the session recorded (as the audit counts
  them, a rewound round included: it was run and paid for) and its cost, in all and after
  the fork point; the "to converge" figures only when the session converged;
- **dissent**: each divergence open at the fork point or still open at the parent's end, with
  how it stands at each side's end.

Pure: the same events give the same comparison.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from ..domain.recorded import EventLike
from ..domain.state import SessionState
from ..domain.values import DivergenceStatus, SessionStatus
from ..projections import fold_events
from .analysis import audit_report, document_similarity
from .model import AuditReport, DissentRecord

__all__ = ["DissentFate", "ForkComparison", "SideOutcome", "compare_fork", "left_participants"]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class SideOutcome(_Model):
    """How one side (parent or fork) ended."""

    session_id: str
    status: str
    converged: bool
    first_majority_agrees: bool | None
    final_majority_agrees: bool | None
    iterations: int
    rounds: int
    rounds_after_fork: int
    cost_usd: float | None
    """None when some call had no known price (as the audit's ``total.cost_usd``)."""
    cost_after_fork_usd: float | None
    rounds_to_converge: int | None
    """``rounds`` when the session converged, else None."""
    cost_to_converge_usd: float | None


class DissentFate(_Model):
    """A divergence the parent had open at the fork point (or still at its end), on each side."""

    id: str
    topic: str
    parent_status: str
    fork_status: str | None
    """None when the fork never had it (the parent opened it after the fork point)."""


class ForkComparison(_Model):
    """A fork beside its parent (see the module docstring for each measure)."""

    parent: SideOutcome
    fork: SideOutcome
    fork_position: int
    fork_iteration: int
    without: tuple[str, ...]
    """Participants who left the fork (``ParticipantLeft``)."""
    outcome_changed: bool
    converged_changed: bool
    majority_changed: bool
    document_similarity: float | None
    """None when neither side has a document."""
    dissent: tuple[DissentFate, ...]
    closed_in_fork: tuple[str, ...]
    """Divergences still open at the parent's end that the fork closed."""
    still_open: tuple[str, ...]
    """Divergences open at both ends."""


def left_participants(events: Sequence[EventLike]) -> tuple[str, ...]:
    """Who left the session (its ``ParticipantLeft`` events), in order."""
    return tuple(str(e.data["participant"]) for e in events if e.type == "ParticipantLeft")


def _open_at(d: DissentRecord, position: int) -> bool:
    return d.opened_position <= position and (
        d.closed_position is None or d.closed_position > position
    )


def _side(audit: AuditReport, state: SessionState, base: SessionState) -> SideOutcome:
    effect = audit.deliberation_effect
    rounds = len(state.rounds)
    after = rounds - len(base.rounds)
    cost = audit.total.cost_usd
    cost_after = None if cost is None else round(cost - base.cost_usd, 10)
    converged = state.status is SessionStatus.CONVERGED
    return SideOutcome(
        session_id=audit.session_id,
        status=audit.status,
        converged=converged,
        first_majority_agrees=(
            effect.first_vote.majority_agrees if effect.first_vote is not None else None
        ),
        final_majority_agrees=(
            effect.final_vote.majority_agrees if effect.final_vote is not None else None
        ),
        iterations=audit.iterations,
        rounds=rounds,
        rounds_after_fork=after,
        cost_usd=cost,
        cost_after_fork_usd=cost_after,
        rounds_to_converge=rounds if converged else None,
        cost_to_converge_usd=cost if converged else None,
    )


def _dissent(
    parent: AuditReport, fork: AuditReport, position: int
) -> tuple[tuple[DissentFate, ...], tuple[str, ...], tuple[str, ...]]:
    in_fork = {d.id: d for d in fork.dissent}
    fates: list[DissentFate] = []
    closed: list[str] = []
    still: list[str] = []
    for d in parent.dissent:
        open_at_end = not DivergenceStatus(d.status).closed
        if not (_open_at(d, position) or open_at_end):
            continue
        other = in_fork.get(d.id)
        fates.append(
            DissentFate(
                id=d.id,
                topic=d.topic,
                parent_status=d.status,
                fork_status=other.status if other is not None else None,
            )
        )
        if open_at_end and other is not None:
            (still if not DivergenceStatus(other.status).closed else closed).append(d.id)
    return tuple(fates), tuple(closed), tuple(still)


def compare_fork(
    parent_events: Sequence[EventLike],
    fork_events: Sequence[EventLike],
    *,
    audits: tuple[AuditReport, AuditReport] | None = None,
) -> ForkComparison:
    """Compare a fork with its parent, each from its own events (the fork's from its
    ``SessionForked``); raises ValueError when the second is not a fork of the first.
    ``audits``: the two sides' audits of those same events, when the caller has them."""
    if not fork_events or fork_events[0].type != "SessionForked":
        raise ValueError("the second session is not a fork")
    base = fold_events(fork_events[:1])
    origin = base.fork_origin
    parent_state = fold_events(parent_events)
    if origin is None or origin.parent_id != parent_state.id:
        raise ValueError("the second session is not a fork of the first")
    fork_state = fold_events(fork_events)
    parent_audit, fork_audit = audits or (audit_report(parent_events), audit_report(fork_events))
    parent = _side(parent_audit, parent_state, base)
    fork = _side(fork_audit, fork_state, base)
    texts = (parent_state.latest_text or "", fork_state.latest_text or "")
    fates, closed, still = _dissent(parent_audit, fork_audit, origin.parent_position)
    converged_changed = parent.converged != fork.converged
    majority_changed = parent.final_majority_agrees != fork.final_majority_agrees
    return ForkComparison(
        parent=parent,
        fork=fork,
        fork_position=origin.parent_position,
        fork_iteration=origin.parent_iteration,
        without=left_participants(fork_events),
        outcome_changed=converged_changed or majority_changed,
        converged_changed=converged_changed,
        majority_changed=majority_changed,
        document_similarity=(round(document_similarity(*texts), 4) if any(texts) else None),
        dissent=fates,
        closed_in_fork=closed,
        still_open=still,
    )
