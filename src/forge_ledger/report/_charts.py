"""The session report's five charts, each with the table of its figures.

Colours follow :mod:`._palettes`: participants in their hues, everything else in greys with a
letter, glyph, dash or shape; data too thin to draw gives one line instead (:func:`._figure.
chart`). Every mark is in a legend or labelled on the chart.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import altair as alt

from ..audit.model import ConsensusPoint, DissentRecord
from ..domain.text import clip
from ..domain.values import DivergenceStatus
from ._figure import Chart, chart, inline, span
from ._model import ReportModel
from ._palettes import (
    DISSENT_STATUS,
    OTHER_PERSON,
    ROUND_KINDS,
    SERIES,
    STANCES,
    TOKEN_PARTS,
    participant_colors,
)

__all__ = ["agree_share", "charts", "closed_round"]

_WIDTH = 640
_LABEL_CHARS = 48
_DASHES = {"solid": [1, 0], "dashed": [7, 4], "dotted": [2, 3], "dash-dot": [9, 3, 2, 3]}
_EDGE_GAP = 0.07
"""How far (in the graph's units, the circle's radius is 1) an edge sits right of its axis."""
_EDGE_BADGE = 0.42
"""Where along an edge its number sits: short of the middle, so A→B and B→A keep apart."""
_NAME_RADIUS = 1.3
_GRAPH_DOMAIN = [-1.6, 1.6]


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
    return [_consensus(m), _stances(m), _influence(m, colors), _dissent(m), _usage(m, colors)]


def _short(text: str, limit: int = _LABEL_CHARS) -> str:
    return clip(text, limit, rstrip=True)


def _ordinal_axis(count: int) -> alt.Axis:
    """Level labels while they fit; slanted when there are many."""
    return alt.Axis(labelAngle=0 if count <= 6 else -45, labelOverlap=False)


def _series_scales() -> tuple[alt.Color, alt.StrokeDash]:
    """One legend for the consensus chart's lines and its 0.5 rule: grey and dash per series."""
    domain = list(SERIES.domain)
    legend = alt.Legend(orient="bottom", title=None, symbolType="stroke", symbolStrokeWidth=2,
                        symbolSize=400, columns=2, labelLimit=260)
    return (
        alt.Color("series:N", scale=alt.Scale(domain=domain, range=list(SERIES.greys)),
                  legend=legend),
        alt.StrokeDash("series:N", scale=alt.Scale(
            domain=domain, range=[_DASHES[c] for c in SERIES.cues]), legend=legend),
    )


def _consensus(m: ReportModel) -> Chart:
    consensus = m.audit.consensus

    def draw() -> alt.TopLevelMixin:
        values = [
            {"x": f"it {c.iteration} · r {c.round}", "round": c.round, "series": series,
             "value": round(v, 4)}
            for c in consensus
            for series, v in zip(SERIES.domain[:3],
                                 (c.weighted_score, agree_share(c), c.threshold), strict=True)
        ]
        color, dash = _series_scales()
        lines = inline(values).mark_line(point=True, strokeWidth=2).encode(
            x=alt.X("x:O", sort=alt.SortField("round"), title="convergence vote",
                    axis=_ordinal_axis(len(consensus))),
            y=alt.Y("value:Q", scale=alt.Scale(domain=[0, 1]), title="score / share"),
            color=color, strokeDash=dash,
        )
        half = inline([{"y": 0.5, "series": SERIES.domain[3]}]).mark_rule(
            strokeWidth=1.5).encode(y="y:Q", color=color, strokeDash=dash)
        return alt.layer(half, lines).properties(
            width=span(len(consensus), 120, 300, _WIDTH), height=220)

    return chart(
        "consensus",
        "Weighted score against the threshold and the plain majority",
        "Per convergence vote: the role-weighted score, the threshold it must reach, and the "
        "share of voters that agree (abstentions aside; the plain majority agrees above the "
        "0.5 line).",
        have=len(consensus), need=2, noun="convergence vote", draw=draw,
        headers=("Iteration", "Round", "Weighted score", "Threshold", "Share agreeing",
                 "Plain majority", "Agree / disagree / partial / abstain", "Converged"),
        rows=tuple(
            (str(c.iteration), str(c.round), f"{c.weighted_score:.2f}", f"{c.threshold:.2f}",
             f"{agree_share(c):.2f}", "agrees" if c.majority_agrees else "does not agree",
             f"{c.agree} / {c.disagree} / {c.partial} / {c.abstain}",
             "yes" if c.converged else "no")
            for c in consensus
        ),
    )


def _stances(m: ReportModel) -> Chart:
    order = [p.name for p in m.participants]
    votes = [(t.participant, v) for t in m.audit.trajectories for v in t.votes]
    rounds = sorted({(v.round, v.iteration) for _, v in votes})

    def draw() -> alt.TopLevelMixin:
        values = [
            {"participant": who, "x": f"r {v.round} (it {v.iteration})", "round": v.round,
             "stance": STANCES.label_of(v.stance.value),
             "text": f"{STANCES.cue_of(v.stance.value)} {v.score}",
             "ink": "white" if v.stance.agrees else "black"}
            for who, v in votes
        ]
        base = inline(values).encode(
            x=alt.X("x:O", sort=alt.SortField("round"), title="convergence round",
                    axis=_ordinal_axis(len(rounds))),
            y=alt.Y("participant:N", sort=order, title=None),
        )
        cells = base.mark_rect(stroke="white", strokeWidth=2).encode(
            color=alt.Color("stance:N", scale=alt.Scale(
                domain=list(STANCES.labels), range=list(STANCES.greys)),
                title="stance (each cell: its glyph and the score)",
                legend=alt.Legend(orient="bottom", direction="horizontal", titleLimit=400,
                                  symbolType="square", symbolStrokeColor="#888",
                                  symbolStrokeWidth=0.5)))
        text = base.mark_text(fontSize=11).encode(
            text="text:N", color=alt.Color("ink:N", scale=None))
        return alt.layer(cells, text).properties(
            width=span(len(rounds), 76, 76, _WIDTH), height=34 * max(1, len(order)))

    grid = {(who, v.round): f"{v.stance.value} ({v.score})" for who, v in votes}
    return chart(
        "stances",
        "Stances per participant and convergence round",
        "Each cell is a participant's stance in one vote, from strongly agree (++, dark) to "
        "strongly disagree (−−, light), with the score it gave.",
        have=len(votes), need=1, noun="vote", draw=draw,
        headers=("Participant", *(f"round {r} (it {it})" for r, it in rounds)),
        rows=tuple(
            (name, *(grid.get((name, r), "—") for r, _ in rounds)) for name in order
        ),
    )


def _dissent(m: ReportModel) -> Chart:
    last = max(m.rounds, 2)

    def draw() -> alt.TopLevelMixin:
        spans, marks = [], []
        for d in m.audit.dissent:
            label = _short(f"{d.id}: {d.topic}")
            closed = closed_round(d)
            end = closed if closed is not None else last
            now = d.status if closed is not None else "still open"
            spans.append({"label": label, "start": d.opened_round, "end": end,
                          "fill": DISSENT_STATUS.grey_of(d.status), "now": now})
            marks += [{"label": label, "round": h.round, "change": h.status.value}
                      for h in d.history]
        order = [str(s["label"]) for s in spans]
        y = alt.Y("label:N", sort=order, title=None, axis=alt.Axis(labelLimit=320))
        x = alt.Scale(domain=[1, last], nice=False)
        bars = inline(spans).mark_bar(height=10).encode(
            x=alt.X("start:Q", scale=x, title="round", axis=alt.Axis(tickMinStep=1, format="d")),
            x2="end:Q", y=y, color=alt.Color("fill:N", scale=None))
        now = inline(spans).mark_text(align="left", dx=12, fontSize=11, color="#333").encode(
            x=alt.X("end:Q", scale=x), y=y, text="now:N")
        points = inline(marks).mark_point(filled=True, size=80, color="#222").encode(
            x=alt.X("round:Q", scale=x), y=y,
            shape=alt.Shape("change:N", title="change of status", scale=alt.Scale(
                domain=list(DISSENT_STATUS.domain), range=list(DISSENT_STATUS.cues)),
                legend=alt.Legend(orient="bottom", direction="horizontal")))
        return alt.layer(bars, points, now).properties(
            width=span(last, 40, 200, _WIDTH - 240), height=28 * len(spans))

    return chart(
        "dissent",
        "Dissent timeline",
        "Each divergence from the round it was opened to the round it ended (or the last round "
        "while it is still open), how it stands at its right end; the marks are its changes of "
        "status.",
        have=len(m.audit.dissent), need=1, noun="dissent", draw=draw,
        headers=("Dissent", "Topic", "Held by", "Opened", "Addressed by", "Ended"),
        rows=tuple(
            (d.id, d.topic, d.holders(), f"round {d.opened_round}, event {d.opened_position}",
             d.addressed_by(), d.ended())
            for d in m.audit.dissent
        ),
    )


def _usage(m: ReportModel, colors: dict[str, str]) -> Chart:
    rounds = m.audit.usage_by_round

    def draw() -> alt.TopLevelMixin:
        per_round = [
            {"round": u.round, "part": part, "tokens": n}
            for u in rounds
            for part, n in (("input", u.input_tokens), ("output", u.output_tokens))
        ]
        kinds = [k for k in ROUND_KINDS.domain if any(u.kind.value == k for u in rounds)]
        costs = [{"round": u.round, "cost": u.priced_cost_usd,
                  "kind": ROUND_KINDS.label_of(u.kind.value),
                  "cue": ROUND_KINDS.cue_of(u.kind.value)} for u in rounds]
        width = span(len(rounds), 26, 200, _WIDTH - 120)
        rx = alt.X("round:O", title="round", axis=alt.Axis(labelAngle=0, labelOverlap=True))
        tok = inline(per_round).mark_bar().encode(
            x=rx, y=alt.Y("sum(tokens):Q", title="tokens"),
            color=alt.Color("part:N", title="tokens", scale=alt.Scale(
                domain=list(TOKEN_PARTS.domain), range=list(TOKEN_PARTS.greys)),
                legend=alt.Legend(orient="right")),
        ).properties(width=width, height=140, title="tokens per round")
        bars = inline(costs).mark_bar(stroke="#555", strokeWidth=0.5).encode(
            x=rx, y=alt.Y("cost:Q", title="USD"),
            color=alt.Color("kind:N", title="round kind", scale=alt.Scale(
                domain=[ROUND_KINDS.label_of(k) for k in kinds],
                range=[ROUND_KINDS.grey_of(k) for k in kinds]),
                legend=alt.Legend(orient="right")))
        layers = [bars]
        if len(rounds) <= 40:  # a letter per bar while the bars are wide enough to hold one
            layers.append(inline(costs).mark_text(dy=-7, fontSize=10, color="#333").encode(
                x=rx, y="cost:Q", text="cue:N"))
        cost = alt.layer(*layers).properties(width=width, height=140, title="cost per round")
        by_p = m.audit.usage_by_participant
        names = [u.participant for u in by_p]
        per_p = [{"participant": u.participant, "cost": u.priced_cost_usd,
                  "tokens": u.input_tokens + u.output_tokens} for u in by_p]
        py = alt.Y("participant:N", sort=names, title=None)
        pcolor = alt.Color("participant:N", legend=None, scale=alt.Scale(
            domain=names, range=[colors.get(n, OTHER_PERSON) for n in names]))
        ptok = inline(per_p).mark_bar().encode(
            x=alt.X("tokens:Q", title="tokens"), y=py, color=pcolor,
        ).properties(width=220, height=22 * len(names), title="tokens per participant")
        usd = alt.X("cost:Q", title="USD", axis=alt.Axis(labelOverlap=True, labelSeparation=8))
        pcost = ptok.encode(x=usd).properties(title="cost per participant")
        out: alt.TopLevelMixin = alt.vconcat(tok, cost, alt.hconcat(ptok, pcost)).resolve_scale(
            color="independent")
        return out

    return chart(
        "usage",
        "Cost and tokens per round and per participant",
        "Input and output tokens and cost in USD of every model call, failed calls included "
        "(calls at no known price are drawn at $0 and listed as unpriced), "
        "per round (each bar lettered by its round's kind) and per participant.",
        have=sum(u.calls for u in rounds), need=1, noun="model call", draw=draw,
        headers=("Round or participant", "Kind / model", "Calls", "Failed", "Input tokens",
                 "Output tokens", "Cost (USD)"),
        rows=tuple(
            (f"round {u.round} (it {u.iteration})", u.kind.value, str(u.calls),
             str(u.failed_calls), str(u.input_tokens), str(u.output_tokens), u.cost_text)
            for u in rounds
        ) + tuple(
            (u.participant, u.model, str(u.calls), str(u.failed_calls), str(u.input_tokens),
             str(u.output_tokens), u.cost_text)
            for u in m.audit.usage_by_participant
        ),
    )


# --------------------------------------------------------------------------- influence


def _layout(names: Sequence[str]) -> dict[str, tuple[float, float]]:
    """Participants evenly on a circle, the first at the top."""
    n = max(len(names), 1)
    return {
        name: (round(math.sin(2 * math.pi * i / n), 4), round(math.cos(2 * math.pi * i / n), 4))
        for i, name in enumerate(names)
    }


def _name_place(x: float, y: float) -> dict[str, Any]:
    """A node's name outside the circle, on the node's side: edges and their numbers stay
    inside the circle, so no label lands on a name."""
    side = "left" if x > 0.3 else "right" if x < -0.3 else "center"
    return {"lx": x * _NAME_RADIUS, "ly": y * _NAME_RADIUS, "side": side,
            "base": "bottom" if y > 0.3 else "top" if y < -0.3 else "middle"}


def _edges(m: ReportModel, at: dict[str, tuple[float, float]]) -> list[dict[str, Any]]:
    """One drawn edge per (from, to) pair, numbered, with its topics for the key."""
    topics: dict[tuple[str, str], list[str]] = {}
    for e in m.audit.influence:
        if e.from_ in at and e.to in at and e.from_ != e.to:
            topics.setdefault((e.from_, e.to), []).append(e.topic)
    out = []
    for n, ((a, b), ts) in enumerate(topics.items(), start=1):
        (xa, ya), (xb, yb) = at[a], at[b]
        dx, dy = xb - xa, yb - ya
        length = math.hypot(dx, dy) or 1.0
        # A→B and B→A run side by side: each is shifted to its own right.
        nx, ny = dy / length, -dx / length
        x, y = xa + nx * _EDGE_GAP, ya + ny * _EDGE_GAP
        out.append({
            "n": str(n), "x": x, "y": y, "x2": xb + nx * _EDGE_GAP, "y2": yb + ny * _EDGE_GAP,
            "bx": x + dx * _EDGE_BADGE, "by": y + dy * _EDGE_BADGE,
            "ax": x + dx * 0.8, "ay": y + dy * 0.8,
            "angle": round(math.degrees(math.atan2(dx, dy)), 2),
            "key": _short(f"{n}  {a} → {b}: {', '.join(dict.fromkeys(ts))}", 90),
        })
    return out


def _graph(
    names: list[str], colors: dict[str, str], edges: list[dict[str, Any]]
) -> alt.LayerChart:
    at = _layout(names)
    nodes = [{"name": n, "x": at[n][0], "y": at[n][1], **_name_place(*at[n])} for n in names]
    scale = alt.Scale(domain=_GRAPH_DOMAIN)

    def xy(x: str, y: str) -> dict[str, Any]:
        return {"x": alt.X(f"{x}:Q", scale=scale, axis=None),
                "y": alt.Y(f"{y}:Q", scale=scale, axis=None)}

    layers: list[alt.Chart] = [
        inline(edges).mark_rule(color="#777", strokeWidth=1.5).encode(
            **xy("x", "y"), x2="x2:Q", y2="y2:Q"),
        inline(edges).mark_point(shape="triangle-up", filled=True, size=90,
                                 color="#555").encode(
            **xy("ax", "ay"), angle=alt.Angle("angle:Q", scale=None)),
        inline(edges).mark_circle(size=230, color="white", stroke="#555", strokeWidth=1,
                                  opacity=1).encode(**xy("bx", "by")),
        inline(edges).mark_text(fontSize=11, fontWeight="bold", color="#222").encode(
            **xy("bx", "by"), text="n:N"),
    ]
    pscale = alt.Scale(domain=names, range=[colors[n] for n in names])
    layers.append(inline(nodes).mark_circle(size=700, opacity=1, stroke="#555",
                                            strokeWidth=1).encode(
        **xy("x", "y"), color=alt.Color("name:N", scale=pscale, legend=None)))
    # a text mark aligns all its labels one way: one layer per side of the circle
    for side, base in dict.fromkeys((n["side"], n["base"]) for n in nodes):
        layers.append(inline(nodes).transform_filter(
            f"datum.side == '{side}' && datum.base == '{base}'").mark_text(
            fontSize=12, fontWeight="bold", align=side, baseline=base).encode(
            **xy("lx", "ly"), text="name:N"))
    return alt.LayerChart(layer=layers, width=300, height=300)


def _influence(m: ReportModel, colors: dict[str, str]) -> Chart:
    names = [p.name for p in m.participants]
    # a person whose input moved a participant is a node too (the audit names them "from")
    names += list(dict.fromkeys(e.from_ for e in m.audit.influence if e.from_ not in names))
    colors = {**{n: OTHER_PERSON for n in names}, **colors}
    edges = _edges(m, _layout(names))

    def draw() -> alt.TopLevelMixin:
        key = inline([{"i": i, "t": e["key"]} for i, e in enumerate(edges)]).mark_text(
            align="left", fontSize=11, color="#222").encode(
            x=alt.value(0), y=alt.Y("i:O", axis=None), text="t:N").properties(
            width=300, height=18 * len(edges), title=alt.TitleParams(
                "each numbered arrow: from → to: the topics", fontSize=11,
                fontWeight="normal", color="#555", anchor="start"))
        return alt.vconcat(_graph(names, colors, edges), key, spacing=6)

    return chart(
        "influence",
        "Influence: who moved whom",
        "An arrow from A to B means a contribution of A argued toward the stance B then took; "
        "each arrow is numbered, and the key under the graph names its topics.",
        have=len(edges), need=1, noun="influence", nouns="influences", draw=draw,
        headers=("From", "To", "Round", "Topic", "Quote", "Event"),
        rows=tuple(
            (e.from_, e.to, "human input" if e.round is None else str(e.round), e.topic,
             e.quote, str(e.position))
            for e in m.audit.influence
        ),
    )
