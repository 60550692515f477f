"""What to record right after a round completes: divergence events and the vote's evaluation.

Kept apart from detection and scoring so the orchestrator has one call to make, and so the
order of the events is fixed here: divergence lifecycle changes, then new divergences, then
(for a convergence round) ``ConvergenceEvaluated`` — which already counts the divergences
recorded just before it.
"""

from __future__ import annotations

from ..domain import events as ev
from ..domain.state import SessionState
from ..domain.values import RoundKind
from .convergence import convergence
from .divergence import plan_divergences

__all__ = ["after_round"]


def after_round(state: SessionState, round_number: int) -> tuple[ev.Payload, ...]:
    """Payloads to record after round ``round_number`` completed; pure and idempotent (a round
    already followed up plans nothing again)."""
    r = state.round(round_number)
    if r is None or r.superseded:
        return ()
    planned = plan_divergences(state, round_number)
    if r.kind is RoundKind.CONVERGENCE and state.evaluation(round_number) is None:
        return (*planned, convergence(state, r))
    return planned
