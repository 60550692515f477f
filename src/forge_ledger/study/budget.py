"""The study budget's rule: may another cell start now, and with how much of the budget.

Every process that folds the same study events agrees on the answer (it depends on the
recorded state and the time given), and what a cell may spend is recorded in its
``CellAssigned``. USD are never exceeded: a cell's session may spend at most its hold (its
``max_cost_usd``, which the orchestrator enforces with reservations), and a cell starts only
when its whole hold is free: neither spent nor held by a running or paused cell. So no session
is cut short by the study's budget; a cell that must wait for money waits for a running cell
to end (and gives back what it did not spend), and when no cell is running that could give
any back, the study stops starting cells. A cell's hold is the plan's ``max_cost_usd`` when
it sets one, else an even share of the budget (``usd`` / cells), so every cell can run.
Calls are counted by :func:`calls_spent`: before a cell starts, and, where the calls are
reserved in the database (a queued study's workers, :mod:`.rates`), before every call, so
workers together never start more than the budget. Wall time counts from the study's planning.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from .plan import Budget, CellSpec
from .state import StudyState

__all__ = ["WAIT", "Allowance", "allowance", "calls_spent"]


WAIT = "wait"
"""What :func:`allowance` answers when the cell may start once a running cell gives back money."""


@dataclass(frozen=True)
class Allowance:
    """What a starting cell's session may spend."""

    max_cost_usd: float
    max_time_secs: int


def calls_spent(budget: Budget, made: int) -> str | None:
    """Why no more model calls may start, having made ``made`` (one line), or None."""
    if budget.calls is not None and made >= budget.calls:
        return f"the study's budget of {budget.calls} calls is spent ({made} made)"
    return None


def allowance(
    state: StudyState,
    cell: CellSpec,
    *,
    now: datetime,
    may_wait: bool,
) -> Allowance | str:
    """The allowance of ``cell``, :data:`WAIT`, or why no cell may start (one line).

    ``may_wait``: another cell is running, so money held now may come back.
    """
    budget = state.plan.budget
    _topic, config, _people = state.plan.session_of(cell)
    secs = config.max_time_secs
    spent = calls_spent(budget, state.calls)
    if spent is not None:
        return spent
    if budget.wall_secs is not None:
        left_secs = budget.wall_secs - (now - state.planned_at).total_seconds()
        if left_secs < 1:
            return f"the study's wall time of {budget.wall_secs} s is over"
        secs = min(secs, int(left_secs))
    if budget.usd is None:
        return Allowance(max_cost_usd=config.max_cost_usd, max_time_secs=secs)
    hold = state.plan.hold_usd(cell)
    left = budget.usd - state.committed_usd
    if left + 1e-12 >= hold:
        return Allowance(max_cost_usd=hold, max_time_secs=secs)
    if may_wait:
        return WAIT
    return (
        f"the study's budget of ${budget.usd:g} is spent: ${max(left, 0):.4f} left, a cell "
        f"may spend up to ${hold:.4f} (session max_cost_usd)"
    )
