"""The report's colours: one palette per meaning, so that a colour never means two things.

Hue means *who*: each participant keeps one colour of a categorical palette wherever it
appears (the document's tints, the influence graph, cost per participant, the swatches).
Everything else a chart encodes (the kind of a round, a stance, a dissent's status, the series
of a line chart) is drawn in greys of distinct lightness and carries a second cue, a letter, a
glyph, a dash or a shape, named in the legend. Such a mark cannot be taken for a participant,
and it reads the same printed in grey or by a reader who does not tell hues apart.

A page made from other data (a study across sessions, say) uses these as they are: a new
meaning is a new :class:`Neutral`, never a reuse of the participants' hues.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..domain.values import DivergenceStatus, RoundKind, Stance

__all__ = [
    "DISSENT_STATUS",
    "OTHER_PERSON",
    "PARTICIPANT_PALETTE",
    "ROUND_KINDS",
    "SERIES",
    "STANCES",
    "TOKEN_PARTS",
    "Neutral",
    "grey",
    "participant_colors",
]

PARTICIPANT_PALETTE = (
    "#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2",
    "#b279a2", "#eeca3b", "#9d755d", "#ff9da6",
)
"""Tableau 10 without its grey (greys mean "not a participant" here)."""

OTHER_PERSON = "#ffffff"
"""A person who is not a participant (a human whose input moved one): white, outlined."""


def participant_colors(names: Sequence[str]) -> dict[str, str]:
    """Each participant's colour, by its place in the session's participant list."""
    return {n: PARTICIPANT_PALETTE[i % len(PARTICIPANT_PALETTE)] for i, n in enumerate(names)}


def grey(lightness: float) -> str:
    """A neutral grey, ``lightness`` from 0 (black) to 1 (white)."""
    level = round(255 * min(max(lightness, 0.0), 1.0))
    return f"#{level:02x}{level:02x}{level:02x}"


@dataclass(frozen=True)
class Neutral:
    """A palette for one meaning that is not a participant: per value, a grey and a cue that
    does not need colour (a letter or glyph drawn on the mark, a dash, a shape)."""

    domain: tuple[str, ...]
    labels: tuple[str, ...]
    """How the legend names each value (cue first, so a grey print still tells them apart)."""
    greys: tuple[str, ...]
    cues: tuple[str, ...]

    def grey_of(self, value: str) -> str:
        return self.greys[self.domain.index(value)]

    def cue_of(self, value: str) -> str:
        return self.cues[self.domain.index(value)]

    def label_of(self, value: str) -> str:
        return self.labels[self.domain.index(value)]


def _ramp(n: int, light: float = 0.86, dark: float = 0.2) -> tuple[str, ...]:
    """``n`` greys evenly spaced from light to dark."""
    step = (light - dark) / max(n - 1, 1)
    return tuple(grey(light - i * step) for i in range(n))


def _neutral(domain: Sequence[str], cues: Sequence[str], names: Sequence[str]) -> Neutral:
    return Neutral(
        domain=tuple(domain),
        labels=tuple(f"{c} {n}" for c, n in zip(cues, names, strict=True)),
        greys=_ramp(len(domain)),
        cues=tuple(cues),
    )


ROUND_KINDS = _neutral(
    [k.value for k in RoundKind],
    ["D", "C", "R", "S", "F", "V"],
    ["draft", "critique", "response", "synthesis", "refinement", "convergence vote"],
)
"""Round kinds in the order a session runs them, light to dark, each with its letter."""

STANCES = Neutral(
    domain=tuple(s.value for s in Stance),
    labels=("++ strongly agree", "+ agree", "± partial", "− disagree", "−− strongly disagree"),
    greys=tuple(reversed(_ramp(len(Stance), light=0.93, dark=0.22))),
    cues=("++", "+", "±", "−", "−−"),
)
"""Stances from most to least favourable: agreement dark, disagreement light."""

DISSENT_STATUS = Neutral(
    domain=tuple(s.value for s in DivergenceStatus),
    labels=tuple(s.value for s in DivergenceStatus),
    greys=(grey(0.3), grey(0.5), grey(0.75), grey(0.75), grey(0.75)),
    cues=("circle", "triangle-right", "triangle-down", "cross", "diamond"),
)
"""A divergence's status: still open dark, closed light; each change drawn as a shape (a Vega
shape name)."""

SERIES = Neutral(
    domain=("weighted score", "share of voters agreeing", "threshold", "plain majority (0.5)"),
    labels=("weighted score", "share of voters agreeing", "threshold", "plain majority (0.5)"),
    greys=(grey(0.1), grey(0.4), grey(0.55), grey(0.7)),
    cues=("solid", "dashed", "dotted", "dash-dot"),
)
"""The consensus chart's lines: dark to light, each with its own dash."""

TOKEN_PARTS = Neutral(
    domain=("input", "output"), labels=("input", "output"),
    greys=(grey(0.78), grey(0.35)), cues=("", ""),
)
