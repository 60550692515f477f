"""Divergence detection and the dissent lifecycle, as event payloads planned after a round.

A *divergence* is one point (topic) on which positions conflict. Detection groups positions
BY TOPIC, not merely "someone agrees and someone disagrees":

* **critique** rounds: each high-priority suggestion (priority 1–2) is a critic's dissent from
  the author's draft on the suggestion's section (or, without one, its category). Critics
  naming the same section are grouped; the critiqued authors hold the other side (``agree``).
  Critiques carry no explicit stance, so they never open a *strong* (blocking) divergence.
* **response / refinement / convergence** rounds: every participant who does not agree lists
  the points it objects to (``Opinion.topics``, else its concerns; a vote's concerns); a
  dissent naming no point is about the ``overall`` text. Labels that name the same topic
  (:func:`~forge_ledger.engine.topics.same_topic`) are grouped; a group opens a divergence
  when one of its positions is ``disagree`` or ``strongly_disagree`` and no open divergence
  already covers that topic. Participants who agree hold the other side.

Lifecycle, applied to divergences opened in earlier rounds:

* a **synthesis** that mentions an open divergence's topic *addresses* it;
* in a **response** round, the critiqued author accepting the critique (stance agrees)
  *resolves* it;
* in **refinement / convergence** rounds, once every dissenter who answered now agrees it is
  *resolved*; when none still holds the point but some dropped it without agreeing, it is
  *withdrawn*. Dissenters who did not answer still hold their position.

Ids are stable: ``d{round}-{k}`` with k counting from 1 in detection order. Planning is
idempotent: a round whose divergences (or changes) are already in the state plans nothing again.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..domain import events as ev
from ..domain.state import DivergenceState, RoundState, SessionState
from ..domain.text import clip
from ..domain.values import DivergenceStatus, DivergentPosition, RoundKind, Stance
from .topics import OVERALL, mentions, normalize, same_topic

__all__ = ["DivergenceView", "plan_divergences", "project_open"]

_POSITION_CHARS = 300


@dataclass(frozen=True)
class _Remark:
    participant: str
    stance: Stance
    labels: tuple[str, ...]
    reasoning: str


@dataclass(frozen=True)
class DivergenceView:
    """A divergence as it would stand after the planned events (for convergence scoring)."""

    id: str
    topic: str
    strongest: Stance
    open: bool
    strong_holders: tuple[str, ...] = ()
    """Who holds it with ``strongly_disagree``."""


def _remarks(r: RoundState) -> list[_Remark]:
    """Stances and labels of the participants who answered with a parsed opinion or vote."""
    out: list[_Remark] = []
    for name in r.expected:
        c = r.contribution_of(name)
        if c is None or name in r.abstained:
            continue
        if c.opinion is not None:
            o = c.opinion
            labels = o.topics or o.concerns
            out.append(_Remark(name, o.stance, tuple(labels), o.reasoning))
        elif c.vote is not None:
            v = c.vote
            out.append(_Remark(name, v.effective_stance, tuple(v.concerns), v.reasoning))
    return out


def _strongest(positions: list[DivergentPosition]) -> Stance:
    return min((p.stance for p in positions), key=lambda s: s.rank)


def _strong_holders(positions: Iterable[DivergentPosition]) -> tuple[str, ...]:
    return tuple(p.participant for p in positions if p.stance is Stance.STRONGLY_DISAGREE)


def _already_planned(state: SessionState, r: RoundState) -> bool:
    return any(d.opened_round == r.number for d in state.divergences) or any(
        h.round == r.number and h.status is not DivergenceStatus.OPEN
        for d in state.divergences
        for h in d.history
    )


def plan_divergences(state: SessionState, round_number: int) -> tuple[ev.Payload, ...]:
    """Divergence events to record after ``round_number`` completed (see module docstring)."""
    r = state.round(round_number)
    if r is None or r.superseded or _already_planned(state, r):
        return ()
    earlier = [d for d in state.divergences if d.is_open and d.opened_round < r.number]
    changes = _lifecycle(state, r, earlier)
    closed = {
        p.divergence_id
        for p in changes
        if isinstance(p, ev.DivergenceResolved | ev.DivergenceWithdrawn)
    }
    still_open = [d for d in earlier if d.id not in closed]
    detected = _detect(state, r, still_open)
    return (*changes, *detected)


# --------------------------------------------------------------------------- lifecycle


def _lifecycle(
    state: SessionState, r: RoundState, earlier: list[DivergenceState]
) -> list[ev.Payload]:
    out: list[ev.Payload] = []
    if r.kind is RoundKind.SYNTHESIS:
        author = r.expected[0] if r.expected else ""
        c = r.contribution_of(author) if author else None
        if c is None or author in r.abstained:
            return out
        for d in earlier:
            if d.status is DivergenceStatus.OPEN and (
                d.topic == OVERALL or mentions(state.answer(c), d.topic)
            ):
                out.append(
                    ev.DivergenceAddressed(
                        divergence_id=d.id,
                        round=r.number,
                        by=author,
                        note=f"the synthesis of round {r.number} takes up '{d.topic}'",
                    )
                )
        return out
    remarks = {m.participant: m for m in _remarks(r)}
    if r.kind is RoundKind.RESPONSE:
        for d in earlier:
            accepted = [
                p.participant
                for p in d.positions
                if p.stance.agrees
                and p.participant in remarks
                and remarks[p.participant].stance.agrees
            ]
            if accepted:
                out.append(
                    ev.DivergenceResolved(
                        divergence_id=d.id,
                        round=r.number,
                        by=accepted[0],
                        note=f"{', '.join(accepted)} accepted the critique",
                    )
                )
        return out
    if r.kind in (RoundKind.REFINEMENT, RoundKind.CONVERGENCE):
        for d in earlier:
            change = _dissent_change(r, d, remarks)
            if change is not None:
                out.append(change)
    return out


def _holds(d: DivergenceState, m: _Remark) -> bool:
    if m.stance.agrees:
        return False
    if d.topic == OVERALL:
        return True
    if not m.labels:
        return m.stance.disagrees
    return any(same_topic(label, d.topic) or mentions(label, d.topic) for label in m.labels)


def _dissent_change(
    r: RoundState, d: DivergenceState, remarks: dict[str, _Remark]
) -> ev.Payload | None:
    dissenters = [p.participant for p in d.positions if p.stance.disagrees]
    if not dissenters:
        return None
    agreed: list[str] = []
    dropped: list[str] = []
    for name in dissenters:
        m = remarks.get(name)
        if m is None or _holds(d, m):
            return None
        (agreed if m.stance.agrees else dropped).append(name)
    if not dropped:
        return ev.DivergenceResolved(
            divergence_id=d.id,
            round=r.number,
            by=agreed[0],
            note=f"{', '.join(agreed)} now agree ({r.kind.value} round {r.number})",
        )
    return ev.DivergenceWithdrawn(
        divergence_id=d.id,
        round=r.number,
        by=dropped[0],
        note=f"{', '.join(dropped)} no longer raise '{d.topic}' ({r.kind.value} round {r.number})",
    )


# --------------------------------------------------------------------------- detection


def _detect(
    _state: SessionState, r: RoundState, still_open: list[DivergenceState]
) -> list[ev.DivergenceDetected]:
    if r.kind is RoundKind.CRITIQUE:
        groups = _critique_groups(r)
    elif r.kind in (RoundKind.RESPONSE, RoundKind.REFINEMENT, RoundKind.CONVERGENCE):
        groups = _opinion_groups(r)
    else:
        return []
    out: list[ev.DivergenceDetected] = []
    for topic, positions in groups:
        if not any(p.stance.disagrees for p in positions):
            continue
        if any(same_topic(topic, d.topic) for d in still_open):
            continue
        out.append(
            ev.DivergenceDetected(
                divergence_id=f"d{r.number}-{len(out) + 1}",
                round=r.number,
                topic=topic,
                positions=tuple(positions),
                strongest=_strongest(positions),
            )
        )
    return out


def _critique_groups(r: RoundState) -> list[tuple[str, list[DivergentPosition]]]:
    """Group high-priority suggestions by section/category across critics."""
    order: list[str] = []
    critics: dict[str, dict[str, list[str]]] = {}
    authors: dict[str, list[str]] = {}
    for name in r.expected:
        c = r.contribution_of(name)
        if c is None or c.critique is None or name in r.abstained:
            continue
        author = r.targets.get(name) or c.critique.target or ""
        for s in c.critique.suggestions:
            if s.priority > 2:
                continue
            label = normalize(s.section or "") or s.category.value
            key = next((k for k in order if same_topic(k, label)), None)
            if key is None:
                key = label
                order.append(key)
            critics.setdefault(key, {}).setdefault(name, []).append(s.text)
            if author and author != name and author not in authors.setdefault(key, []):
                authors[key].append(author)
    groups: list[tuple[str, list[DivergentPosition]]] = []
    for key in order:
        positions = [
            DivergentPosition(participant=n, position=clip(" / ".join(texts), _POSITION_CHARS),
                              stance=Stance.DISAGREE)
            for n, texts in critics[key].items()
        ]
        positions += [
            DivergentPosition(participant=a, position="author of the critiqued draft",
                              stance=Stance.AGREE)
            for a in authors.get(key, [])
            if a not in critics[key]
        ]
        groups.append((key, positions))
    return groups


def _opinion_groups(r: RoundState) -> list[tuple[str, list[DivergentPosition]]]:
    """Group the points raised by participants who do not agree; agreeing ones hold the
    other side."""
    remarks = _remarks(r)
    order: list[str] = []
    raised: dict[str, dict[str, DivergentPosition]] = {}
    for m in remarks:
        if m.stance.agrees:
            continue
        labels = m.labels or ((OVERALL,) if m.stance.disagrees else ())
        for label in labels:
            key = next((k for k in order if same_topic(k, label)), None)
            if key is None:
                key = normalize(label) or OVERALL
                order.append(key)
            if m.participant not in raised.setdefault(key, {}):
                text = label if label != OVERALL else (m.reasoning or "disagrees overall")
                raised[key][m.participant] = DivergentPosition(
                    participant=m.participant, position=clip(text, _POSITION_CHARS), stance=m.stance
                )
    supporters = [
        DivergentPosition(
            participant=m.participant,
            position=clip(m.reasoning or "agrees with the current text", _POSITION_CHARS),
            stance=m.stance,
        )
        for m in remarks
        if m.stance.agrees
    ]
    return [(key, [*raised[key].values(), *supporters]) for key in order]


# --------------------------------------------------------------------------- projection


def project_open(state: SessionState, planned: tuple[ev.Payload, ...]) -> list[DivergenceView]:
    """Open divergences after ``planned`` would be recorded (overruled ones are closed)."""
    closed = {
        p.divergence_id
        for p in planned
        if isinstance(p, ev.DivergenceResolved | ev.DivergenceWithdrawn | ev.DivergenceOverruled)
    }
    views = [
        DivergenceView(d.id, d.topic, d.strongest, True, _strong_holders(d.positions))
        for d in state.divergences
        if d.is_open and d.id not in closed
    ]
    views += [
        DivergenceView(p.divergence_id, p.topic, p.strongest, True, _strong_holders(p.positions))
        for p in planned
        if isinstance(p, ev.DivergenceDetected)
    ]
    return views
