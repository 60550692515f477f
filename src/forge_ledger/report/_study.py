"""The study report: one self-contained page over a study's aggregates and its cells.

What it shows is given to it whole (:class:`StudyReportModel`): each arm's estimates with their
95 % intervals and ``n`` (:mod:`forge_ledger.audit.aggregates`), the differences between arms,
each participant's counterfactual influence, and one line per cell linking to its session's
own report by a relative file name. Like the session report it is Jinja2 (autoescaped) around
static SVG charts (:mod:`._figure`), with no script and a Content-Security-Policy that forbids
scripts and fetches; it reads no clock, so the same model gives the same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
from pydantic import BaseModel, ConfigDict

from .. import __version__
from ..audit.aggregates import Difference, Estimate, GroupEstimates, Influence
from ._figure import Chart, chart, inline, span
from ._palettes import grey

__all__ = ["CHARTED", "CellLine", "StudyReportModel", "render_study_html", "study_charts"]

CHARTED = (
    ("converged", "Convergence rate", "Share of the arm's sessions that converged."),
    ("rounds", "Rounds", "Rounds each session recorded (a fork's inherited rounds included)."),
    ("cost_usd", "Cost (USD)", "What each session cost, unpriced sessions left out of n."),
    (
        "conformity_rate",
        "Conformity rate",
        "Share of stance changes flagged as conformity (no new argument in between).",
    ),
    (
        "self_preference",
        "Self-preference",
        "Mean gap between a participant's scores of its own texts and of others'.",
    ),
)
"""The per-arm charts: metric, title, what it shows."""

_INK = grey(0.25)


class _View(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class CellLine(_View):
    """One cell of the study as the page lists it."""

    cell: str
    arm: str
    topic: str
    title: str
    status: str
    outcome: str
    session_id: str | None
    report_file: str | None
    """The file name of the session's own report, beside the study's (a relative link)."""
    converged: bool | None = None
    rounds: int | None = None
    cost_usd: float | None = None
    parent_cell: str | None = None
    outcome_changed: bool | None = None
    similarity_to_parent: float | None = None


class StudyReportModel(_View):
    study_id: str
    name: str
    status: str
    as_of_event: int
    total_events: int
    head_hash: str
    cells_total: int
    counts: dict[str, int]
    spent_usd: float
    arms: tuple[GroupEstimates, ...]
    differences: tuple[Difference, ...]
    influence: tuple[Influence, ...]
    cells: tuple[CellLine, ...]
    command: str
    """The command that writes the sessions' reports beside this page."""


def _estimate(group: GroupEstimates, metric: str) -> Estimate | None:
    return next((e for e in group.estimates if e.metric == metric), None)


def _fmt(x: float | None, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}g}"


def _interval_text(e: Estimate | None) -> str:
    if e is None or e.value is None:
        return "—"
    ci = f" [{_fmt(e.low)}, {_fmt(e.high)}]" if e.low is not None else ""
    return f"{_fmt(e.value)}{ci}"


def _interval_values(
    label_key: str, items: Sequence[tuple[str, Estimate]]
) -> list[dict[str, object]]:
    return [
        {
            label_key: name,
            "value": e.value,
            "low": e.low if e.low is not None else e.value,
            "high": e.high if e.high is not None else e.value,
            "n": e.n,
        }
        for name, e in items
        if e.value is not None
    ]


def _interval_chart(
    key: str,
    title: str,
    summary: str,
    axis: str,
    label_key: str,
    items: Sequence[tuple[str, Estimate]],
) -> Chart:
    """Each item's estimate as a point with its 95 % interval as a bar, items down the side."""
    values = _interval_values(label_key, items)

    def draw() -> alt.TopLevelMixin:
        y = alt.Y(f"{label_key}:N", sort=None, title=None, axis=alt.Axis(labelLimit=220))
        bars = (
            inline(values)
            .mark_rule(strokeWidth=2, color=_INK)
            .encode(y=y, x=alt.X("low:Q", title=axis), x2="high:Q")
        )
        points = (
            inline(values)
            .mark_point(filled=True, size=70, color=_INK, shape="diamond")
            .encode(y=y, x="value:Q")
        )
        return alt.layer(bars, points).properties(width=520, height=span(len(values), 26, 60, 520))

    return chart(
        key,
        title,
        summary,
        have=len(values),
        need=1,
        noun="estimate",
        draw=draw,
        headers=("Name", "Estimate", "95 % interval", "n"),
        rows=tuple(
            (
                name,
                _fmt(e.value),
                f"[{_fmt(e.low)}, {_fmt(e.high)}]" if e.low is not None else "—",
                str(e.n),
            )
            for name, e in items
        ),
    )


def study_charts(m: StudyReportModel) -> list[Chart]:
    """The per-arm charts in page order, then the influence chart."""
    out = []
    for metric, title, summary in CHARTED:
        items = [(g.group or "—", e) for g in m.arms if (e := _estimate(g, metric)) is not None]
        out.append(
            _interval_chart(
                metric,
                title,
                f"{summary} Point: the mean; bar: its 95 % bootstrap interval.",
                title,
                "arm",
                items,
            )
        )
    influence = [(i.participant, i.outcome_change) for i in m.influence]
    out.append(
        _interval_chart(
            "influence",
            "Counterfactual influence per participant",
            "Share of forks without the participant whose outcome changed (converged or the final "
            "majority), averaged within each topic, then over topics; bar: its 95 % interval.",
            "outcome changed without it",
            "participant",
            influence,
        )
    )
    return out


def render_study_html(model: StudyReportModel) -> str:
    """The whole page for ``model``."""
    from ._render import _environment

    env = _environment()
    env.filters["interval"] = _interval_text
    env.globals["estimate_of"] = _estimate
    return env.get_template("study.html.j2").render(
        m=model,
        charts={c.key: c for c in study_charts(model)},
        charted=CHARTED,
        version=__version__,
    )
