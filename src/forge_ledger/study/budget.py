"""The study budget's rule: may another cell start, and with what share of what is left.

Every process that folds the same study events agrees on the answer (it depends on the
recorded state, the time given and the number of cells running at once), and the share a
cell gets is recorded in its ``CellAssigned``. USD are never exceeded: a cell's session may
spend at most its share (its own ``max_cost_usd``, which the orchestrator enforces with
reservations), and a share comes out of what neither spent nor promised to a running cell.
Calls are checked before a cell starts. Wall time counts from the study's planning.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..domain.values import Participant, SessionConfig, Topic
from ..preflight import PreflightError, check_participants
from .state import StudyState

__all__ = ["Allowance", "allowance"]


@dataclass(frozen=True)
class Allowance:
    """What a starting cell's session may spend."""

    max_cost_usd: float
    max_time_secs: int


def allowance(
    state: StudyState,
    session: tuple[Topic, SessionConfig, list[Participant]],
    *,
    now: datetime,
    slots: int,
) -> Allowance | str:
    """The allowance of the next cell, or why no cell may start (one line).

    ``slots`` is how many cells run at once: a share is what is left divided among them
    (at most the session's own ``max_cost_usd``), so cells started together split it.
    """
    budget = state.plan.budget
    topic, config, people = session
    cost, secs = config.max_cost_usd, config.max_time_secs
    if budget.calls is not None and state.calls >= budget.calls:
        return f"the study's budget of {budget.calls} calls is spent ({state.calls} made)"
    if budget.wall_secs is not None:
        left_secs = budget.wall_secs - (now - state.planned_at).total_seconds()
        if left_secs < 1:
            return f"the study's wall time of {budget.wall_secs} s is over"
        secs = min(secs, int(left_secs))
    if budget.usd is not None:
        left = budget.usd - state.committed_usd
        cost = min(cost, left / max(1, min(slots, state.count("pending"))))
        problem = _first_call_problem(topic, config, people, cost)
        if cost <= 0 or problem is not None:
            return (
                f"the study's budget of ${budget.usd:g} is spent or promised to running cells "
                f"(${state.committed_usd:.4f}); " + (problem or "nothing is left")
            )
    return Allowance(max_cost_usd=cost, max_time_secs=secs)


def _first_call_problem(
    topic: Topic, config: SessionConfig, people: list[Participant], cost: float
) -> str | None:
    """``run``'s rule: a share below the worst case of the session's first call lets it make
    no call at all."""
    if cost <= 0:
        return None
    try:
        check_participants(people, config.model_copy(update={"max_cost_usd": cost}), topic=topic)
    except PreflightError as e:
        return f"a cell's share (${cost:.4f}) cannot pay its first call: {e.problems[0]}"
    return None
