"""The report's five charts: Vega-Lite specifications (altair) rendered to static SVG.

Why static SVG (vl-convert renders Vega-Lite in-process, no browser): the page then carries no
script at all, so it opens from a file with scripts and the network forbidden by its own
Content-Security-Policy, prints exactly as it shows, and model text inside a chart (a dissent
topic, a participant name) is escaped SVG text, never code. Each chart comes with a table of
the same figures (its text equivalent); Vega also labels every mark for screen readers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import altair as alt
import vl_convert

from ..audit.model import ConsensusPoint, DissentRecord
from ..domain.text import clip
from ..domain.values import DivergenceStatus
from ._model import STANCES, ReportModel

__all__ = ["PALETTE", "Chart", "charts", "participant_colors"]

PALETTE = (
    "#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2",
    "#b279a2", "#eeca3b", "#9d755d", "#ff9da6", "#bab0ac",
)
"""Participant colours (Tableau 10), shared by the charts and the document's tints."""

_STANCE_COLORS = ("#1a9850", "#91cf60", "#fee08b", "#fc8d59", "#d73027")
_STATUSES = ("open", "addressed", "resolved", "withdrawn", "overruled")
_STATUS_COLORS = ("#d73027", "#f58518", "#54a24b", "#9d9d9d", "#b279a2")
_SERIES = ("weighted score", "share of voters agreeing", "threshold")
_WIDTH = 640
_LABEL_CHARS = 48
_EDGE_GAP = 0.06
"""How far (in the graph's units, the circle's radius is 1) an edge sits right of its axis."""


@dataclass(frozen=True)
class Chart:
    """One rendered chart and its text equivalent."""

    key: str
    title: str
    summary: str
    svg: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


def participant_colors(names: Sequence[str]) -> dict[str, str]:
    return {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}


def _svg(chart: alt.TopLevelMixin) -> str:
    styled = chart.configure_axis(labelFontSize=12, titleFontSize=12).configure_legend(
        labelFontSize=12, titleFontSize=12
    ).configure_title(fontSize=13)
    spec = styled.to_dict()
    return str(vl_convert.vegalite_to_svg(spec))


def _chart(values: list[dict[str, Any]]) -> alt.Chart:
    """A chart over inline rows (the SVG is rendered here, so nothing is loaded later)."""
    return alt.Chart(alt.Data(values=values))  # type: ignore[no-untyped-call]


def _empty(text: str, height: int = 60) -> alt.Chart:
    """A chart that says there is nothing to draw yet (it still renders as an SVG)."""
    chart: alt.Chart = (
        _chart([{"t": text}])
        .mark_text(fontSize=14, color="#555")
        .encode(text="t:N")
        .properties(width=_WIDTH, height=height)
    )
    return chart


def _ordinal_axis(count: int) -> alt.Axis:
    """Level labels while they fit; slanted when there are many."""
    return alt.Axis(labelAngle=0 if count <= 6 else -45, labelOverlap=False)


def _short(text: str, limit: int = _LABEL_CHARS) -> str:
    return clip(text, limit, rstrip=True)


def agree_share(c: ConsensusPoint) -> float:
    """Share of the voters that agree, abstentions aside (the engine's plain majority agrees
    when it exceeds 1/2): the consensus chart's second line, beside the weighted score."""
    voters = c.agree + c.disagree + c.partial
    return c.agree / voters if voters else 0.0


def closed_round(d: DissentRecord) -> int | None:
    """The round of a closed divergence's last closing step (None while it is open)."""
    if not DivergenceStatus(d.status).closed:
        return None
    closing = [h.round for h in d.history if DivergenceStatus(h.status).closed]
    return closing[-1] if closing else None


def charts(m: ReportModel) -> list[Chart]:
    """The five charts in page order."""
    colors = participant_colors([p.name for p in m.participants])
    return [
        _consensus(m),
        _stances(m),
        _influence(m, colors),
        _dissent(m),
        _usage(m, colors),
    ]


def _consensus(m: ReportModel) -> Chart:
    consensus = m.audit.consensus
    values: list[dict[str, Any]] = []
    for c in consensus:
        x = f"it {c.iteration} · r {c.round}"
        for series, v in zip(_SERIES, (c.weighted_score, agree_share(c), c.threshold),
                             strict=True):
            values.append({"x": x, "round": c.round, "series": series, "value": round(v, 4)})
    if values:
        base = _chart(values).encode(
            x=alt.X("x:O", sort=alt.SortField("round"), title="convergence vote",
                    axis=_ordinal_axis(len(consensus))),
            y=alt.Y("value:Q", scale=alt.Scale(domain=[0, 1]), title="score / share"),
            color=alt.Color("series:N", scale=alt.Scale(domain=list(_SERIES),
                            range=["#4c78a8", "#f58518", "#888888"]), title=None,
                            legend=alt.Legend(orient="bottom")),
            strokeDash=alt.StrokeDash("series:N", scale=alt.Scale(
                domain=list(_SERIES), range=[[1, 0], [1, 0], [6, 4]]), legend=None),
        )
        half = _chart([{"y": 0.5}]).mark_rule(
            color="#bbb", strokeDash=[2, 2]).encode(y="y:Q")
        chart: alt.TopLevelMixin = alt.layer(
            half, base.mark_line(point=True, strokeWidth=2)
        ).properties(width=_WIDTH, height=240)
    else:
        chart = _empty("no convergence vote yet")
    rows = tuple(
        (str(c.iteration), str(c.round), f"{c.weighted_score:.2f}", f"{c.threshold:.2f}",
         f"{agree_share(c):.2f}", "agrees" if c.majority_agrees else "does not agree",
         f"{c.agree} / {c.disagree} / {c.partial} / {c.abstain}",
         "yes" if c.converged else "no")
        for c in consensus
    )
    return Chart(
        key="consensus",
        title="Weighted score against the threshold and the plain majority",
        summary="Per convergence vote: the role-weighted score, the threshold it must reach, and "
        "the share of voters that agree (abstentions aside; the plain majority agrees above the "
        "dotted 0.5 line).",
        svg=_svg(chart),
        headers=("Iteration", "Round", "Weighted score", "Threshold", "Share agreeing",
                 "Plain majority", "Agree / disagree / partial / abstain", "Converged"),
        rows=rows,
    )


def _stances(m: ReportModel) -> Chart:
    order = [p.name for p in m.participants]
    votes = [(t.participant, v) for t in m.audit.trajectories for v in t.votes]
    values = [
        {"participant": who, "x": f"r {v.round} (it {v.iteration})", "round": v.round,
         "stance": v.stance.value, "score": v.score}
        for who, v in votes
    ]
    if values:
        base = _chart(values).encode(
            x=alt.X("x:O", sort=alt.SortField("round"), title="convergence round",
                    axis=_ordinal_axis(len({v.round for _, v in votes}))),
            y=alt.Y("participant:N", sort=order, title=None),
        )
        cells = base.mark_rect(stroke="white", strokeWidth=2).encode(
            color=alt.Color("stance:N", scale=alt.Scale(domain=list(STANCES),
                            range=list(_STANCE_COLORS)), title="stance",
                            legend=alt.Legend(orient="bottom")))
        text = base.mark_text(fontSize=11).encode(text="score:Q")
        chart: alt.TopLevelMixin = alt.layer(cells, text).properties(
            width=min(_WIDTH, 70 * len({v.round for _, v in votes})),
            height=34 * max(1, len(order)))
    else:
        chart = _empty("no vote recorded yet")
    rounds = sorted({(v.round, v.iteration) for _, v in votes})
    grid = {(who, v.round): f"{v.stance.value} ({v.score})" for who, v in votes}
    return Chart(
        key="stances",
        title="Stances per participant and convergence round",
        summary="Each cell is a participant's stance in one vote (five stances from strongly "
        "agree to strongly disagree), with the score it gave.",
        svg=_svg(chart),
        headers=("Participant", *(f"round {r} (it {it})" for r, it in rounds)),
        rows=tuple(
            (name, *(grid.get((name, r), "—") for r, _ in rounds)) for name in order
        ),
    )


def _dissent(m: ReportModel) -> Chart:
    last = max(m.rounds, 1)
    spans: list[dict[str, Any]] = []
    marks: list[dict[str, Any]] = []
    for d in m.audit.dissent:
        label = _short(f"{d.id}: {d.topic}")
        closed = closed_round(d)
        end = closed if closed is not None else last
        spans.append({"label": label, "start": d.opened_round, "end": end, "status": d.status})
        for h in d.history:
            marks.append({"label": label, "round": h.round, "change": h.status})
    if spans:
        order = [str(s["label"]) for s in spans]
        y = alt.Y("label:N", sort=order, title=None, axis=alt.Axis(labelLimit=320))
        scale = alt.Scale(domain=[1, last])
        bars = _chart(spans).mark_bar(height=10, opacity=0.55).encode(
            x=alt.X("start:Q", scale=scale, title="round",
                    axis=alt.Axis(tickMinStep=1, format="d")), x2="end:Q", y=y,
            color=alt.Color("status:N", title="status now", legend=alt.Legend(orient="bottom"),
                            scale=alt.Scale(domain=list(_STATUSES), range=list(_STATUS_COLORS))))
        points = _chart(marks).mark_point(
            filled=True, size=70, color="#333").encode(
            x=alt.X("round:Q", scale=scale), y=y,
            shape=alt.Shape("change:N", title="change", legend=alt.Legend(orient="bottom"),
                            scale=alt.Scale(domain=list(_STATUSES))))
        chart: alt.TopLevelMixin = alt.layer(bars, points).properties(
            width=_WIDTH - 200, height=28 * len(spans))
    else:
        chart = _empty("no dissent recorded")
    return Chart(
        key="dissent",
        title="Dissent timeline",
        summary="Each divergence from the round it was opened to the round it closed (or the "
        "last round while still open); marks show each change of status.",
        svg=_svg(chart),
        headers=("Dissent", "Topic", "Who", "Strongest", "Opened (round)", "Changes", "Now"),
        rows=tuple(
            (d.id, d.topic, ", ".join(d.who), d.strongest.value, str(d.opened_round),
             "; ".join(f"{h.status} r{h.round}" for h in d.history), d.status)
            for d in m.audit.dissent
        ),
    )


def _usage(m: ReportModel, colors: dict[str, str]) -> Chart:
    per_round = [
        {"round": u.round, "kind": u.kind.value, "part": part, "tokens": n, "cost": u.cost_usd}
        for u in m.audit.usage_by_round
        for part, n in (("input", u.input_tokens), ("output", u.output_tokens))
    ]
    if per_round:
        by_p = m.audit.usage_by_participant
        names = [u.participant for u in by_p]
        per_p = [{"participant": u.participant, "cost": u.cost_usd,
                  "tokens": u.input_tokens + u.output_tokens} for u in by_p]
        rx = alt.X("round:O", title="round", axis=alt.Axis(labelAngle=0, labelOverlap=True))
        tok = _chart(per_round).mark_bar().encode(
            x=rx, y=alt.Y("sum(tokens):Q", title="tokens"),
            color=alt.Color("part:N", title="tokens", scale=alt.Scale(
                range=["#9ecae9", "#4c78a8"]), legend=alt.Legend(orient="right")),
        ).properties(width=_WIDTH - 120, height=140, title="tokens per round")
        cost = _chart(per_round).transform_filter(
            "datum.part == 'input'").mark_bar().encode(
            x=rx, y=alt.Y("cost:Q", title="USD"),
            color=alt.Color("kind:N", title="round kind", legend=alt.Legend(orient="right")),
        ).properties(width=_WIDTH - 120, height=140, title="cost per round")
        pscale = alt.Scale(domain=names, range=[colors.get(n, "#888") for n in names])
        py = alt.Y("participant:N", sort=names, title=None)
        ptok = _chart(per_p).mark_bar().encode(
            x=alt.X("tokens:Q", title="tokens"), y=py,
            color=alt.Color("participant:N", scale=pscale, legend=None),
        ).properties(width=220, height=22 * len(names), title="tokens per participant")
        pcost = ptok.encode(x=alt.X("cost:Q", title="USD")).properties(
            title="cost per participant")
        chart: alt.TopLevelMixin = alt.vconcat(
            tok, cost, alt.hconcat(ptok, pcost)
        ).resolve_scale(color="independent")
    else:
        chart = _empty("no model call yet")
    return Chart(
        key="usage",
        title="Cost and tokens per round and per participant",
        summary="Input and output tokens and cost in USD of every model call, failed calls "
        "included, per round and per participant.",
        svg=_svg(chart),
        headers=("Round or participant", "Kind / model", "Calls", "Failed", "Input tokens",
                 "Output tokens", "Cost (USD)"),
        rows=tuple(
            (f"round {u.round} (it {u.iteration})", u.kind.value, str(u.calls),
             str(u.failed_calls), str(u.input_tokens), str(u.output_tokens), f"{u.cost_usd:.4f}")
            for u in m.audit.usage_by_round
        ) + tuple(
            (u.participant, u.model, str(u.calls), str(u.failed_calls), str(u.input_tokens),
             str(u.output_tokens), f"{u.cost_usd:.4f}")
            for u in m.audit.usage_by_participant
        ),
    )


def _layout(names: Sequence[str]) -> dict[str, tuple[float, float]]:
    """Participants evenly on a circle, the first at the top."""
    n = max(len(names), 1)
    return {
        name: (round(math.sin(2 * math.pi * i / n), 4), round(math.cos(2 * math.pi * i / n), 4))
        for i, name in enumerate(names)
    }


def _edges(m: ReportModel, at: dict[str, tuple[float, float]]) -> list[dict[str, Any]]:
    """One drawn edge per (from, to) pair, labelled with its topics."""
    topics: dict[tuple[str, str], list[str]] = {}
    for e in m.audit.influence:
        if e.from_ in at and e.to in at and e.from_ != e.to:
            topics.setdefault((e.from_, e.to), []).append(e.topic)
    out = []
    for (a, b), ts in topics.items():
        (xa, ya), (xb, yb) = at[a], at[b]
        dx, dy = xb - xa, yb - ya
        length = math.hypot(dx, dy) or 1.0
        # A→B and B→A run side by side: each is shifted to its own right.
        nx, ny = dy / length, -dx / length
        x, y = xa + nx * _EDGE_GAP, ya + ny * _EDGE_GAP
        out.append({
            "x": x, "y": y, "x2": xb + nx * _EDGE_GAP, "y2": yb + ny * _EDGE_GAP,
            "mx": x + dx * 0.5 + nx * _EDGE_GAP * 2, "my": y + dy * 0.5 + ny * _EDGE_GAP * 2,
            "ax": x + dx * 0.8, "ay": y + dy * 0.8,
            "angle": round(math.degrees(math.atan2(dx, dy)), 2),
            "label": _short(", ".join(dict.fromkeys(ts)), 36),
        })
    return out


def _influence(m: ReportModel, colors: dict[str, str]) -> Chart:
    names = [p.name for p in m.participants]
    # a person whose input moved a participant is a node too (the audit names them "from")
    names += list(dict.fromkeys(e.from_ for e in m.audit.influence if e.from_ not in names))
    colors = {**{n: "#999999" for n in names}, **colors}
    at = _layout(names)
    nodes = [{"name": n, "x": at[n][0], "y": at[n][1]} for n in names]
    edges = _edges(m, at)
    scale = alt.Scale(domain=[-1.45, 1.45])
    x, y = alt.X("x:Q", scale=scale, axis=None), alt.Y("y:Q", scale=scale, axis=None)
    layers: list[alt.Chart] = []
    if edges:
        layers += [
            _chart(edges).mark_rule(color="#777", strokeWidth=1.5).encode(
                x=x, y=y, x2="x2:Q", y2="y2:Q"),
            _chart(edges).mark_point(shape="triangle-up", filled=True, size=90,
                                       color="#555").encode(
                x=alt.X("ax:Q", scale=scale, axis=None), y=alt.Y("ay:Q", scale=scale, axis=None),
                angle=alt.Angle("angle:Q", scale=None)),
            _chart(edges).mark_text(fontSize=10, dy=-6, color="#333").encode(
                x=alt.X("mx:Q", scale=scale, axis=None), y=alt.Y("my:Q", scale=scale, axis=None),
                text="label:N"),
        ]
    pscale = alt.Scale(domain=names, range=[colors[n] for n in names])
    node = _chart(nodes).encode(x=x, y=y)
    layers += [
        node.mark_circle(size=900, opacity=0.9).encode(
            color=alt.Color("name:N", scale=pscale, legend=None)),
        node.mark_text(fontSize=12, dy=26, fontWeight="bold").encode(text="name:N"),
    ]
    chart = alt.layer(*layers).properties(width=_WIDTH // 2, height=_WIDTH // 2)
    if not edges:
        chart = chart.properties(title=alt.TitleParams("no influence recorded", color="#555"))
    return Chart(
        key="influence",
        title="Influence: who moved whom",
        summary="An arrow from A to B means a contribution of A argued toward the stance B then "
        "took; labels name the topics.",
        svg=_svg(chart),
        headers=("From", "To", "Round", "Topic", "Quote", "Event"),
        rows=tuple(
            (e.from_, e.to, "human input" if e.round is None else str(e.round), e.topic,
             e.quote, str(e.position))
            for e in m.audit.influence
        ),
    )
