"""One chart of a report page: a Vega-Lite specification (altair) rendered to static SVG, the
table of its figures, and the rule for data too thin to draw.

Why static SVG (vl-convert renders Vega-Lite in-process, no browser): the page then carries no
script at all, so it opens from a file with scripts and the network forbidden by its own
Content-Security-Policy, prints exactly as it shows, and model text inside a chart (a dissent
topic, a participant name) is escaped SVG text, never code. Each chart comes with a table of
the same figures (its text equivalent); Vega also labels every mark for screen readers.

**Too little data.** A chart needs some number of data points to say anything (two votes for a
line, one edge for a graph). With fewer it is not drawn as an empty frame: :func:`chart` puts
one line in its place saying what is missing, and the table still lists what there is. The
``figure`` macro of ``templates/macros.html.j2`` shows either.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import altair as alt
import vl_convert

__all__ = ["Chart", "chart", "inline", "span", "too_few"]


@dataclass(frozen=True)
class Chart:
    """One chart and its text equivalent."""

    key: str
    title: str
    summary: str
    svg: str | None
    """The drawn chart; None when the data is too thin (``note`` says so)."""
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    note: str = ""


def too_few(have: int, need: int, noun: str, nouns: str | None = None) -> str | None:
    """The one line shown instead of a chart that has ``have`` of the ``need`` data points
    (``noun``: one of them) it needs; None when it has enough."""
    if have >= need:
        return None
    plural = nouns if nouns is not None else f"{noun}s"
    if have == 0:
        return f"Nothing to draw yet: no {noun} recorded."
    return (f"Too little to draw: {have} {noun if have == 1 else plural} so far, the chart needs "
            f"{need}; the table below has the figures.")


def chart(
    key: str,
    title: str,
    summary: str,
    *,
    have: int,
    need: int,
    noun: str,
    nouns: str | None = None,
    draw: Callable[[], alt.TopLevelMixin],
    headers: tuple[str, ...],
    rows: tuple[tuple[str, ...], ...],
) -> Chart:
    """The chart ``draw`` makes, or the one line saying its data is too thin (``have`` of the
    ``need`` points, each a ``noun``), with its table either way."""
    note = too_few(have, need, noun, nouns)
    return Chart(
        key=key, title=title, summary=summary, svg=None if note else _svg(draw()),
        headers=headers, rows=rows, note=note or "",
    )


def inline(values: list[dict[str, Any]]) -> alt.Chart:
    """A chart over inline rows (the SVG is rendered here, so nothing is loaded later)."""
    return alt.Chart(alt.Data(values=values))  # type: ignore[no-untyped-call]


def span(count: int, each: int, least: int, most: int) -> int:
    """A chart's width for ``count`` items of ``each`` pixels, kept within [least, most]: two
    votes make a narrow chart, not a wide empty one."""
    return max(least, min(most, count * each))


def _svg(spec: alt.TopLevelMixin) -> str:
    styled = spec.configure_axis(labelFontSize=12, titleFontSize=12).configure_legend(
        labelFontSize=12, titleFontSize=12
    ).configure_title(fontSize=13).configure_view(strokeWidth=0)
    return str(vl_convert.vegalite_to_svg(styled.to_dict()))
