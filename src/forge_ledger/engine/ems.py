"""EMS: the maturity score (0-100) of a deliberation, and technique suggestions for weak axes.

The YAML session format (v1.2) carries an ``ems`` per session and per iteration; a weak axis
suggests a deliberation technique for the next refinement. The score is a pure function of
:class:`~forge_ledger.domain.state.SessionState`, so a replay or a time-travelled state gets
exactly the same number. Only rounds not undone by a rewind (``active_rounds``) count, and so
only the divergence changes made in them (or after the rewind): after ``back`` the session
measures exactly as it did at the end of the iteration it went back to.

Axes (each 0-100, integers):

- ``clarity`` — mean critique score of the latest iteration that has critiques: how good the
  critics judge the current text. 0 before any critique.
- ``coverage`` — share of the distinct critique suggestions that a later response, synthesis
  or refinement round had the chance to address. 0 before any suggestion.
- ``consensus`` — latest convergence score (x100) of an active convergence round. 0 before
  any vote.
- ``resolution`` — share of detected divergences that are closed (resolved, withdrawn or
  overruled count 1, addressed counts 1/2). With no divergence it is 100 once participants have
  critiqued or given opinions (nothing conflicted), else 0.

``score`` = round(0.25 clarity + 0.25 coverage + 0.30 consensus + 0.20 resolution): consensus
weighs most because it is what ends a session. An axis below 50 is *weak*.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..domain import events as ev
from ..domain.state import DivergenceState, SessionState
from ..domain.text import text_key
from ..domain.values import DivergenceStatus, RoundKind
from .techniques import Technique, get_technique

__all__ = [
    "AXES",
    "AXIS_TECHNIQUES",
    "AXIS_WEIGHTS",
    "WEAK_BELOW",
    "EmsReport",
    "ems_score",
    "suggest_techniques",
]

AXES: tuple[str, ...] = ("clarity", "coverage", "consensus", "resolution")
AXIS_WEIGHTS: dict[str, float] = {
    "clarity": 0.25,
    "coverage": 0.25,
    "consensus": 0.30,
    "resolution": 0.20,
}
WEAK_BELOW = 50

AXIS_TECHNIQUES: dict[str, tuple[str, ...]] = {
    "clarity": ("5whys", "first-principles", "assumption-mapping", "starbursting"),
    "coverage": ("six-hats", "starbursting", "scamper", "mind-mapping", "swot"),
    "consensus": ("moscow", "decision-matrix", "delphi", "dot-voting"),
    "resolution": ("steelman", "devils-advocate", "premortem", "red-team"),
}
"""Techniques that work on each axis, best first (slugs of the packaged catalogue)."""

_FOLLOW_UP = (RoundKind.RESPONSE, RoundKind.SYNTHESIS, RoundKind.REFINEMENT)


@dataclass(frozen=True)
class EmsReport:
    """The score, every axis value and the weak axes (weakest first)."""

    score: int
    axes: dict[str, int] = field(default_factory=dict)
    weak_axes: tuple[str, ...] = ()


def _pct(x: float) -> int:
    return max(0, min(100, round(x * 100)))


def _clarity(state: SessionState) -> int:
    by_iteration: dict[int, list[int]] = {}
    for r in state.active_rounds:
        for c in r.contributions:
            if c.critique is not None:
                by_iteration.setdefault(r.iteration, []).append(c.critique.score)
    if not by_iteration:
        return 0
    scores = by_iteration[max(by_iteration)]
    return max(0, min(100, round(sum(scores) / len(scores))))


def _coverage(state: SessionState) -> int:
    rounds = state.active_rounds
    first_seen: dict[str, int] = {}
    for r in rounds:
        for c in r.contributions:
            if c.critique is None:
                continue
            for s in c.critique.suggestions:
                first_seen.setdefault(text_key(s.text), r.number)
    if not first_seen:
        return 0
    follow_ups = [r.number for r in rounds if r.kind in _FOLLOW_UP and r.contributions]
    addressed = sum(1 for n in first_seen.values() if any(f > n for f in follow_ups))
    return _pct(addressed / len(first_seen))


def _consensus(state: SessionState) -> int:
    active = {r.number for r in state.active_rounds}
    results = [c for c in state.convergence if c.round in active]
    return _pct(results[-1].score) if results else 0


def _resolution(state: SessionState) -> int:
    active = {r.number for r in state.active_rounds}
    divergences = [d for d in state.divergences if d.opened_round in active or not active]
    if not divergences:
        engaged = any(
            c.critique is not None or c.opinion is not None or c.vote is not None
            for r in state.active_rounds
            for c in r.contributions
        )
        return 100 if engaged else 0
    closed = 0.0
    for d in divergences:
        status = _status_in_force(state, d)
        if status is DivergenceStatus.ADDRESSED:
            closed += 0.5
        elif status.closed:
            closed += 1.0
    return _pct(closed / len(divergences))


def _status_in_force(state: SessionState, d: DivergenceState) -> DivergenceStatus:
    """``d``'s status without the changes made in rounds a rewind undid (changes recorded
    after the latest rewind, such as a human's overrule, stand)."""
    if not state.rewinds:
        return d.status
    undone = {r.number for r in state.rounds if r.superseded}
    last_rewind = state.rewinds[-1].position
    kept = [h for h in d.history if not (h.round in undone and h.position < last_rewind)]
    return kept[-1].status if kept else d.status


def ems_score(state: SessionState) -> EmsReport:
    """The EMS of ``state`` (pure, deterministic; see the module docstring for the axes).

    A session imported from a YAML file has no rounds to measure until it is resumed: its EMS
    is the one the file recorded (no axes are known for it).
    """
    if state.imported is not None and not state.active_rounds:
        return EmsReport(score=int(state.imported["ems"]), axes={}, weak_axes=())
    axes = {
        "clarity": _clarity(state),
        "coverage": _coverage(state),
        "consensus": _consensus(state),
        "resolution": _resolution(state),
    }
    total = sum(AXIS_WEIGHTS[a] * v for a, v in axes.items())
    score = max(0, min(100, round(total)))
    weak = tuple(
        a for a in sorted(AXES, key=lambda a: (axes[a], AXES.index(a))) if axes[a] < WEAK_BELOW
    )
    return EmsReport(score=score, axes=axes, weak_axes=weak)


def _used(state: SessionState) -> set[str]:
    used = {t.technique_slug for t in state.techniques}
    used.update(r.technique for r in state.rounds if r.technique)
    return used


def suggest_techniques(state: SessionState) -> tuple[ev.TechniqueSuggested, ...]:
    """One technique per weak axis (weakest first) for the next refinement.

    Never suggests a technique already suggested or used in this session, nor the same
    technique for two axes; an axis whose techniques are all used gets no suggestion.
    The reason reads like ``"clarity 42%"``.
    """
    report = ems_score(state)
    used = _used(state)
    out: list[ev.TechniqueSuggested] = []
    for axis in report.weak_axes:
        chosen: Technique | None = None
        for slug in AXIS_TECHNIQUES[axis]:
            t = get_technique(slug)
            if t is not None and slug not in used:
                chosen = t
                break
        if chosen is None:
            continue
        used.add(chosen.slug)
        out.append(
            ev.TechniqueSuggested(
                iteration=state.iteration,
                technique_slug=chosen.slug,
                category=chosen.category,
                suggested_reason=f"{axis} {report.axes[axis]}%",
                weak_axes=(axis,),
                source="auto",
                applied=False,
            )
        )
    return tuple(out)
