"""Aggregates of session metrics with their uncertainty: per group, between groups, and the
counterfactual influence of each participant.

Every estimate is a mean over rows (a yes/no column counts as 1/0, so the mean of
``converged`` is the convergence rate) with a 95 % bootstrap confidence interval from
``scipy.stats.bootstrap`` (percentile method, :data:`RESAMPLES` resamples, a seeded generator:
the same rows, in any order, and seed give the same figures to the byte), and ``n``, the
number of values behind it, beside it. A row whose value is unknown (None) is left out of
that metric's ``n``. Fewer than two values give no interval.

- :func:`aggregate`: each metric per group (by default the ``variant`` column);
- :func:`difference`: group A minus group B; **paired** when the rows of both groups pair up
  one to one by ``(topic, repeat)`` (the mean of the pairs' differences), otherwise two
  independent samples (the difference of the means);
- :func:`counterfactual_influence`: for each participant, the change its absence makes: over
  the forks that drop only it, ``outcome_changed`` (1/0) and ``1 − similarity_to_parent``,
  averaged within each topic first, then over topics (``n`` = topics; a row without a topic
  stands for its parent's own).

Pure: no clock, no I/O; the randomness is the seeded resampling.
"""

# No postponed annotations here: pydantic then reads the models' annotations as objects
# rather than compiling each from a string, which makes importing them (every command) faster.

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from .metrics import SessionMetrics

__all__ = [
    "CONFIDENCE",
    "DEFAULT_METRICS",
    "RESAMPLES",
    "Difference",
    "Estimate",
    "GroupEstimates",
    "Influence",
    "aggregate",
    "counterfactual_influence",
    "difference",
    "estimate",
]

CONFIDENCE = 0.95
RESAMPLES = 2000
_DIGITS = 6
"""Figures are rounded so the last bits of floating point never reach the output."""

DEFAULT_METRICS = (
    "converged",
    "rounds",
    "iterations",
    "cost_usd",
    "tokens",
    "first_vote_majority",
    "final_vote_majority",
    "conformity_rate",
    "self_preference",
    "dissents_open",
)


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class Estimate(_Model):
    """A mean with its 95 % interval (None with fewer than two values) and its ``n``."""

    metric: str
    n: int
    value: float | None
    low: float | None
    high: float | None


class GroupEstimates(_Model):
    group: str | None
    sessions: int
    estimates: tuple[Estimate, ...]


class Difference(_Model):
    """Group ``a`` minus group ``b`` on one metric."""

    metric: str
    a: str
    b: str
    n_a: int
    n_b: int
    paired: bool
    n_pairs: int
    value: float | None
    low: float | None
    high: float | None


class Influence(_Model):
    """The change a participant's absence makes (see the module docstring)."""

    participant: str
    topics: int
    forks: int
    outcome_change: Estimate
    document_change: Estimate


def _round(x: float) -> float:
    return round(float(x), _DIGITS)


def _interval(
    samples: tuple[Sequence[float], ...],
    statistic: Callable[..., Any],
    seed: int,
) -> tuple[float | None, float | None]:
    if any(len(s) < 2 for s in samples):
        return None, None
    import numpy as np
    from scipy import stats

    data = tuple(np.sort(np.asarray(s, dtype=float)) for s in samples)  # rows' order: no matter
    if all(np.all(d == d[0]) for d in data):  # no spread: every resample says the same
        value = float(statistic(*data, axis=-1))
        return _round(value), _round(value)
    result = stats.bootstrap(
        data,
        statistic,
        n_resamples=RESAMPLES,
        confidence_level=CONFIDENCE,
        method="percentile",
        rng=np.random.default_rng(seed),
        vectorized=True,
    )
    ci = result.confidence_interval
    return _round(ci.low), _round(ci.high)


def _mean(x: Any, axis: int = -1) -> Any:
    import numpy as np

    return np.mean(x, axis=axis)


def _mean_difference(x: Any, y: Any, axis: int = -1) -> Any:
    import numpy as np

    return np.mean(x, axis=axis) - np.mean(y, axis=axis)


def estimate(metric: str, values: Sequence[float], *, seed: int = 0) -> Estimate:
    """The mean of ``values`` with its bootstrap interval."""
    if not values:
        return Estimate(metric=metric, n=0, value=None, low=None, high=None)
    low, high = _interval((values,), _mean, seed)
    return Estimate(
        metric=metric, n=len(values), value=_round(sum(values) / len(values)), low=low, high=high
    )


def _value(row: SessionMetrics, metric: str) -> float | None:
    v = getattr(row, metric)
    return None if v is None else float(v)


def _values(rows: Iterable[SessionMetrics], metric: str) -> list[float]:
    return [v for v in (_value(r, metric) for r in rows) if v is not None]


def _groups(rows: Sequence[SessionMetrics], by: str) -> dict[str | None, list[SessionMetrics]]:
    out: dict[str | None, list[SessionMetrics]] = {}
    for r in rows:
        key = getattr(r, by)
        out.setdefault(None if key is None else str(key), []).append(r)
    return dict(sorted(out.items(), key=lambda kv: (kv[0] is None, kv[0] or "")))


def aggregate(
    rows: Sequence[SessionMetrics],
    *,
    by: str = "variant",
    metrics: Sequence[str] = DEFAULT_METRICS,
    seed: int = 0,
) -> list[GroupEstimates]:
    """Each metric per group of ``rows`` (grouped by the column ``by``), groups in order."""
    return [
        GroupEstimates(
            group=group,
            sessions=len(members),
            estimates=tuple(estimate(m, _values(members, m), seed=seed) for m in metrics),
        )
        for group, members in _groups(rows, by).items()
    ]


def _pairs(a: list[SessionMetrics], b: list[SessionMetrics], metric: str) -> list[float] | None:
    """a − b per ``(topic, repeat)`` when the rows pair up one to one, else None."""

    def keyed(rows: list[SessionMetrics]) -> dict[tuple[str | None, int | None], float] | None:
        out: dict[tuple[str | None, int | None], float] = {}
        for r in rows:
            key = (r.topic, r.repeat)
            v = _value(r, metric)
            if key in out or r.topic is None or v is None:
                return None
            out[key] = v
        return out

    ka, kb = keyed(a), keyed(b)
    if ka is None or kb is None or not ka or set(ka) != set(kb):
        return None
    return [ka[k] - kb[k] for k in sorted(ka, key=lambda k: (k[0] or "", k[1] or 0))]


def difference(
    rows: Sequence[SessionMetrics],
    a: str,
    b: str,
    metric: str,
    *,
    by: str = "variant",
    seed: int = 0,
) -> Difference:
    """Group ``a`` minus group ``b`` on ``metric`` (paired when the rows pair up)."""
    groups = _groups(rows, by)
    ra, rb = groups.get(a, []), groups.get(b, [])
    xa, xb = _values(ra, metric), _values(rb, metric)
    pairs = _pairs(ra, rb, metric)
    if pairs is not None:
        low, high = _interval((pairs,), _mean, seed)
        value: float | None = _round(sum(pairs) / len(pairs))
    elif xa and xb:
        low, high = _interval((xa, xb), _mean_difference, seed)
        value = _round(sum(xa) / len(xa) - sum(xb) / len(xb))
    else:
        low = high = value = None
    return Difference(
        metric=metric,
        a=a,
        b=b,
        n_a=len(xa),
        n_b=len(xb),
        paired=pairs is not None,
        n_pairs=len(pairs or ()),
        value=value,
        low=low,
        high=high,
    )


def counterfactual_influence(rows: Sequence[SessionMetrics], *, seed: int = 0) -> list[Influence]:
    """Per participant dropped alone from forks, the change its absence makes, by name."""
    by_who: dict[str, dict[str, list[SessionMetrics]]] = {}
    for r in rows:
        if r.parent_id is None or len(r.without) != 1 or r.outcome_changed is None:
            continue
        by_who.setdefault(r.without[0], {}).setdefault(r.topic or r.parent_id, []).append(r)
    out = []
    for who in sorted(by_who):
        topics = by_who[who]
        outcome = [
            sum(float(bool(r.outcome_changed)) for r in rs) / len(rs) for rs in topics.values()
        ]
        moved = []
        for rs in topics.values():
            sims = [r.similarity_to_parent for r in rs if r.similarity_to_parent is not None]
            if sims:
                moved.append(1.0 - sum(sims) / len(sims))
        out.append(
            Influence(
                participant=who,
                topics=len(topics),
                forks=sum(len(rs) for rs in topics.values()),
                outcome_change=estimate("outcome_changed", outcome, seed=seed),
                document_change=estimate("document_change", moved, seed=seed),
            )
        )
    return out
