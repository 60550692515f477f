"""A study's aggregates: each metric per arm with its 95 % interval, the differences between
arms, and each participant's counterfactual influence.

Every figure is :mod:`forge_ledger.audit.aggregates`' (bootstrap intervals, ``n`` beside each
value, paired differences where the rows pair up by topic and repeat); this module only
chooses what to compare:

- every arm against the first plain variant of the plan (the baseline);
- every counterfactual arm against the variant it forks (its cells pair up with their
  parents' by topic and repeat, so those differences are paired when one panel is used).

Pure: the same rows give the same summary.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from ..audit.aggregates import (
    DEFAULT_METRICS,
    Difference,
    GroupEstimates,
    Influence,
    aggregate,
    counterfactual_influence,
    difference,
)
from ..audit.metrics import SessionMetrics
from .counterfactual import is_counterfactual, plain_variants
from .plan import StudyPlan

__all__ = ["ARM_METRICS", "COMPARED", "StudySummary", "summarize"]

ARM_METRICS = (*DEFAULT_METRICS, "outcome_changed", "similarity_to_parent")
"""Each arm's figures: the defaults, and for counterfactual arms the change from the parent."""

COMPARED = ("converged", "rounds", "cost_usd", "conformity_rate", "self_preference")
"""The metrics whose difference between two arms is given."""


class StudySummary(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    arms: tuple[GroupEstimates, ...]
    differences: tuple[Difference, ...]
    influence: tuple[Influence, ...]


def _comparisons(plan: StudyPlan, arms: Sequence[str]) -> list[tuple[str, str]]:
    """(a, b) pairs to give a − b for, in a stable order, each once."""
    plain = plain_variants(plan.variants)
    variant_of = {plan.arm(c): c.variant for c in plan.cells()}
    pairs: list[tuple[str, str]] = []
    for arm in arms:
        spec = plan.variants.get(variant_of.get(arm, arm), {})
        if is_counterfactual(spec):
            pairs.append((arm, str(spec["fork_of"])))
        elif plain and arm != plain[0]:
            pairs.append((arm, plain[0]))
    return list(dict.fromkeys(pairs))


def summarize(plan: StudyPlan, rows: Sequence[SessionMetrics], *, seed: int = 0) -> StudySummary:
    """The study's aggregates from its session rows (see the module docstring)."""
    arms = aggregate(rows, by="variant", metrics=ARM_METRICS, seed=seed)
    names = [g.group for g in arms if g.group is not None]
    diffs = [
        difference(rows, a, b, metric, seed=seed)
        for a, b in _comparisons(plan, names)
        for metric in COMPARED
    ]
    return StudySummary(
        arms=tuple(arms),
        differences=tuple(diffs),
        influence=tuple(counterfactual_influence(rows, seed=seed)),
    )
