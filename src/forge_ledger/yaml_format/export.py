"""Export: the YAML v1.2 document of a session, as a pure fold of its events.

Same events → same bytes: the fold reads only event payloads and their recorded timestamps,
the key order is the seed's, and the YAML is written by the safe dumper with explicit
options. Imported sessions reproduce their file: the fields no other event carries come from
``SessionImported``, iterations from ``IterationRecorded``, participants from their
``ParticipantJoined``; anything that happens after the import (a rewind, new rounds) takes
over from there.

Run sessions derive the YAML-only fields: ``history`` has one entry per iteration (EMS and
phase at the iteration's end, questions asked and answers given in it, start time and
duration in minutes); ``ideas`` are the distinct critique suggestions scored 0-10 from their
priority; the rounds are told in party terms in party mode and in panel terms otherwise. What
the format has no field for (participants, document, last vote) goes in the extension block
beside ``ledger:`` (``docs/reference/yaml-format.md``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import yaml

from ..domain import events as ev
from ..domain.fold import apply_event, fold
from ..domain.recorded import EventLike
from ..domain.state import ContributionState, DivergenceState, RoundState, SessionState
from ..domain.text import text_key
from ..domain.values import DivergenceStatus, Mode, RoundKind, file_status
from ..engine.ems import ems_score
from .schema import EXTENSION_KEY, FORMAT_VERSION, iso

__all__ = ["EventLike", "dump_document", "export_events", "session_document"]


@dataclass
class _Entry:
    iteration: int
    phase: str
    ems: int
    ems_delta: int | None
    """Recorded delta (imported); ``None`` → computed from the previous entry."""
    timestamp: str
    duration: int | None
    questions: list[str] = field(default_factory=list)
    responses: list[str] = field(default_factory=list)
    start: datetime | None = None
    end: datetime | None = None


@dataclass
class _Fold:
    state: SessionState | None = None
    entries: dict[int, _Entry] = field(default_factory=dict)
    live: int | None = None
    override: tuple[int, str] | None = None
    imported: ev.SessionImported | None = None
    imported_at: datetime | None = None
    after_import: bool = False
    last_question: str = ""
    last_at: datetime | None = None

    def finalize_live(self) -> None:
        if self.live is None or self.state is None:
            return
        e = self.entries.get(self.live)
        if e is not None and e.start is not None:
            e.ems = ems_score(self.state).score
            e.phase = self.state.phase
            end = e.end or e.start
            e.duration = int((end - e.start).total_seconds() // 60)
        self.live = None

    def apply(self, event: EventLike) -> None:
        payload = ev.payload_class(event.type).model_validate(event.data)
        at = event.timestamp
        if self.state is None or isinstance(payload, ev.SessionForked):
            # a fork's first event holds its state (its parent's at the fork point): the
            # parent's past before it only adds the iteration entries the fork inherited
            self.state = fold(
                None, payload, session_id=event.session_id, position=event.position, at=at,
                hash_=event.hash,
            )
            self.finalize_live()
        else:
            self.state = self._fold_next(event, payload)
        self.last_at = at

    def _fold_next(self, event: EventLike, payload: ev.Payload) -> SessionState:
        """The state after an event past the first, keeping the iteration entries in step."""
        assert self.state is not None
        at = event.timestamp
        if self.imported is not None:
            self.after_import = True
        self._before(payload, at)
        apply_event(self.state, payload, position=event.position, at=at, hash_=event.hash)
        if self.live is not None and self.live in self.entries:
            self.entries[self.live].end = at
        self._after(payload, at)
        return self.state

    def _before(self, payload: ev.Payload, at: datetime) -> None:
        """A new iteration's entry opens when its first round starts; a rewind closes one."""
        if isinstance(payload, ev.RoundStarted) and payload.iteration != self.live:
            self.finalize_live()
            self.entries[payload.iteration] = _Entry(
                iteration=payload.iteration,
                phase="divergent",
                ems=0,
                ems_delta=None,
                timestamp=iso(at),
                duration=0,
                start=at,
            )
            self.live = payload.iteration
        if isinstance(payload, ev.RoundStarted):
            self.override = None
        elif isinstance(payload, ev.SessionRewound):
            self.finalize_live()

    def _after(self, payload: ev.Payload, at: datetime) -> None:
        """What an event adds to the iteration entries once the state has applied it."""
        assert self.state is not None
        if isinstance(payload, ev.IterationRecorded):
            self.entries[payload.iteration] = _Entry(
                iteration=payload.iteration,
                phase=payload.phase,
                ems=payload.ems,
                ems_delta=payload.ems_delta,
                timestamp=payload.timestamp,
                duration=payload.duration,
            )
        elif isinstance(payload, ev.QuestionsAsked):
            if payload.iteration in self.entries:
                self.entries[payload.iteration].questions.extend(payload.questions)
            if payload.questions:
                self.last_question = payload.questions[-1]
        elif isinstance(payload, ev.HumanInputRecorded):
            if payload.kind == "answer" and payload.iteration in self.entries:
                self.entries[payload.iteration].responses.append(payload.text)
        elif isinstance(payload, ev.SessionImported):
            self.imported = payload
            self.imported_at = at
            self.after_import = False
            self.override = (payload.ems, payload.phase)
            if payload.last_question is not None:
                self.last_question = payload.last_question
        elif isinstance(payload, ev.SessionRewound):
            target = self.entries.get(payload.to_iteration)
            if target is not None:
                self.override = (target.ems, target.phase)
            else:
                report = ems_score(self.state)
                self.override = (report.score, self.state.phase)


def _history(entries: dict[int, _Entry]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    previous: int | None = None
    for k in sorted(entries):
        e = entries[k]
        delta = (
            e.ems_delta
            if e.ems_delta is not None
            else (0 if previous is None else e.ems - previous)
        )
        previous = e.ems
        out.append(
            {
                "iteration": e.iteration,
                "phase": e.phase,
                "ems": e.ems,
                "ems_delta": delta,
                "questions": list(e.questions),
                "responses": list(e.responses),
                "timestamp": e.timestamp,
                "duration": e.duration if e.duration is not None else 0,
            }
        )
    return out


def _technique_rows(state: SessionState) -> list[dict[str, Any]]:
    return [
        {
            "iteration": t.iteration,
            "technique_slug": t.technique_slug,
            "category": t.category,
            "suggested_reason": t.suggested_reason,
            "applied": t.applied,
            "source": t.source,
            "weak_axes": list(t.weak_axes),
        }
        for t in state.techniques
    ]


def _ideas(state: SessionState) -> list[dict[str, Any]]:
    """Recorded ideas, then distinct critique suggestions: score 10 (priority 1) … 2
    (priority 5), +1 per further critic raising the same point, at most 10."""
    out = [dict(i) for i in sorted(state.ideas, key=lambda i: int(i["id"]))]
    seen = {text_key(str(i["content"])) for i in out}
    next_id = max((int(i["id"]) for i in out), default=0) + 1
    derived: dict[str, dict[str, Any]] = {}
    for r in state.active_rounds:
        for c in r.contributions:
            if c.critique is None:
                continue
            for s in c.critique.suggestions:
                key = text_key(s.text)
                if not key or key in seen:
                    continue
                base = 2 * (6 - s.priority)
                if key in derived:
                    d = derived[key]
                    d["score"] = min(10, max(int(d["score"]) + 1, base))
                else:
                    derived[key] = {"id": next_id, "content": s.text.strip(), "score": base}
                    next_id += 1
    return out + list(derived.values())


def _references(text: str, me: str, names: list[str]) -> list[str]:
    low = text.casefold()
    return [n for n in names if n != me and n.casefold() in low]


def _key_points(state: SessionState, r: RoundState, name: str) -> list[str]:
    c = r.contribution_of(name)
    if c is None:
        return []
    points: list[str] = []
    if c.critique is not None:
        points.extend(c.critique.weaknesses)
        points.extend(s.text for s in c.critique.suggestions)
    if c.opinion is not None:
        points.extend(c.opinion.concerns)
        if not points and c.opinion.reasoning:
            points.append(c.opinion.reasoning)
    if not points:
        first = state.answer(c).strip().splitlines()
        points = first[:1]
    return points


def _iteration_context(state: SessionState, iteration: int) -> tuple[str, str]:
    synthesis = ""
    for r in state.active_rounds:
        if r.iteration == iteration and r.kind is RoundKind.SYNTHESIS and r.contributions:
            synthesis = state.answer(r.contributions[-1]).strip()
    question = next((qs[0] for it, qs in state.asked if it == iteration and qs), "")
    return synthesis, question


_DELIBERATIVE = (RoundKind.DRAFT, RoundKind.CRITIQUE, RoundKind.RESPONSE, RoundKind.REFINEMENT)
_PANEL_PHASE = {
    RoundKind.DRAFT: "discussion",
    RoundKind.CRITIQUE: "debate",
    RoundKind.RESPONSE: "debate",
    RoundKind.REFINEMENT: "socratic",
    RoundKind.CONVERGENCE: "debate",
}
"""The panel phase of each round the panel history lists: the vote is the last debate. The
synthesis rounds are not listed: their text is the document (extension block)."""


def _topic_of(state: SessionState, r: RoundState) -> str:
    return r.focus or state.topic.title


def _deliberative_rounds(state: SessionState) -> Iterator[RoundState]:
    """The rounds the party history lists: deliberative ones that got an answer."""
    return (r for r in state.active_rounds if r.kind in _DELIBERATIVE and r.contributions)


def _panel_rounds(state: SessionState) -> Iterator[RoundState]:
    """The rounds the panel history lists: deliberative ones and votes that got an answer."""
    return (r for r in state.active_rounds if r.kind in _PANEL_PHASE and r.contributions)


def _answers(r: RoundState) -> Iterator[tuple[str, ContributionState]]:
    """Each contributor of ``r`` with its (latest) contribution, in the order they answered."""
    for name in r.contributors:
        c = r.contribution_of(name)
        assert c is not None
        yield name, c


def _party(state: SessionState) -> list[dict[str, Any]]:
    names = state.participant_names
    out: list[dict[str, Any]] = []
    for r in _deliberative_rounds(state):
        synthesis, question = _iteration_context(state, r.iteration)
        contributions = []
        for name, c in _answers(r):
            contributions.append(
                {
                    "persona": name,
                    "key_points": _key_points(state, r, name),
                    "references": _references(state.answer(c), name, names),
                }
            )
        out.append(
            {
                "round": r.number,
                "topic": _topic_of(state, r),
                "personas_selected": list(r.expected),
                "contributions": contributions,
                "synthesis": synthesis,
                "user_question": question,
            }
        )
    return out


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0] if lines else ""


def _position(state: SessionState, c: ContributionState) -> str:
    """An expert's position: its vote (stance, score, first line of its reason), its critique
    (score, first weakness or suggestion), its opinion's reasoning, or its answer's first
    line."""
    if c.vote is not None:
        v = c.vote
        reason = _first_line(v.reasoning) or (v.concerns[0] if v.concerns else "")
        head = f"{v.effective_stance.value} ({v.score})"
        return f"{head}: {reason}" if reason else head
    if c.critique is not None:
        k = c.critique
        point = next(iter((*k.weaknesses, *(x.text for x in k.suggestions))), "")
        return f"score {k.score}/100: {point}" if point else f"score {k.score}/100"
    if c.opinion is not None and c.opinion.reasoning:
        return c.opinion.reasoning
    return _first_line(state.answer(c))


def _panel_references(
    state: SessionState, c: ContributionState, me: str, names: list[str]
) -> list[str]:
    """The experts an answer names, with the one a critique reviews first."""
    named = _references(state.answer(c), me, names)
    target = c.critique.target if c.critique is not None else None
    if target is None or target == me or target not in names:
        return named
    return [target, *(n for n in named if n != target)]


def _convergent(r: RoundState) -> list[str]:
    """Points of agreement: the strengths critics name; in a vote, the reasons of those who
    agree."""
    out: list[str] = []
    for _, c in _answers(r):
        if c.critique is not None:
            points = list(c.critique.strengths)
        elif c.vote is not None and c.vote.effective_stance.agrees:
            points = [_first_line(c.vote.reasoning)]
        else:
            points = []
        out.extend(p for p in points if p and p not in out)
    return out


def _open_at(d: DivergenceState, position: int) -> bool:
    """Whether dissent ``d`` was open when the event at ``position`` was recorded."""
    changes = [c.status for c in d.history if c.position <= position]
    return bool(changes) and changes[-1] is DivergenceStatus.OPEN


def _tensions(state: SessionState, r: RoundState) -> list[str]:
    """Productive tensions: the dissent the round opened; in a vote, also the issues its
    evaluation named and the dissent still open when it was counted."""
    out = [d.topic for d in state.divergences if d.opened_round == r.number]
    result = state.evaluation(r.number)
    if result is not None:
        still_open = (d.topic for d in state.divergences if _open_at(d, result.position))
        for issue in (*result.blocking, *result.remaining_issues, *still_open):
            if issue not in out:
                out.append(issue)
    return out


def _panel(state: SessionState) -> list[dict[str, Any]]:
    names = state.participant_names
    out: list[dict[str, Any]] = []
    for r in _panel_rounds(state):
        contributions = []
        for name, c in _answers(r):
            p = state.participant(name)
            contributions.append(
                {
                    "expert": name,
                    "framework": (p.framework or p.expertise or p.role.value) if p else "",
                    "position": _position(state, c),
                    "references": _panel_references(state, c, name, names),
                }
            )
        out.append(
            {
                "round": r.number,
                "topic": _topic_of(state, r),
                "phase": _PANEL_PHASE[r.kind],
                "experts_selected": list(r.expected),
                "contributions": contributions,
                "synthesis": {
                    "convergent": _convergent(r),
                    "tensions": _tensions(state, r),
                },
            }
        )
    return out


def _minutes(a: datetime, b: datetime) -> int:
    return max(0, int((b - a).total_seconds() // 60))


@dataclass
class _Frame:
    """The fields that come from an import when there was one, or from the run itself."""

    session_id: str
    started: str
    created: str
    duration: int
    updated: str
    party_active: bool
    panel_active: bool
    party: list[dict[str, Any]]
    panel: list[dict[str, Any]]


def _folded(events: Iterable[EventLike]) -> _Fold:
    fold = _Fold()
    for e in events:
        fold.apply(e)
    if fold.state is None or fold.last_at is None:
        raise ValueError("a session document needs at least the session's first event")
    fold.finalize_live()
    return fold


def _techniques_used(imp: ev.SessionImported | None, techniques: list[dict[str, Any]]) -> list[str]:
    """The imported list, then each applied technique not yet named, in order."""
    used = list(imp.techniques_used) if imp is not None else []
    for t in techniques:
        if t["applied"] and t["technique_slug"] not in used:
            used.append(t["technique_slug"])
    return used


def _imported_frame(fold: _Fold, s: SessionState, imp: ev.SessionImported) -> _Frame:
    """An imported session keeps its file's values; time spent after the import adds up."""
    assert fold.imported_at is not None
    assert fold.last_at is not None
    fresh = not fold.after_import
    base = imp.duration_minutes if imp.duration_minutes is not None else 0
    return _Frame(
        session_id=imp.yaml_id,
        started=imp.started_at or iso(s.created_at),
        created=imp.created or iso(s.created_at),
        duration=base + (0 if fresh else _minutes(fold.imported_at, fold.last_at)),
        updated=imp.updated if (fresh and imp.updated) else iso(fold.last_at),
        party_active=imp.party_active,
        panel_active=imp.panel_active,
        party=[dict(p) for p in imp.party_history],
        panel=[dict(p) for p in imp.panel_history],
    )


def _run_frame(fold: _Fold, s: SessionState) -> _Frame:
    """A session run here: its id from slug and start day, its times from its events."""
    assert fold.last_at is not None
    live = not s.status.terminal
    return _Frame(
        session_id=f"{s.slug}-{s.created_at.date().isoformat()}",
        started=iso(s.created_at),
        created=iso(s.created_at),
        duration=_minutes(s.created_at, fold.last_at),
        updated=iso(fold.last_at),
        party_active=s.config.mode is Mode.PARTY and live,
        panel_active=s.config.mode is Mode.PANEL and live,
        party=[],
        panel=[],
    )


def _ledger_block(s: SessionState) -> dict[str, Any] | None:
    """The ``ledger:`` block, or ``None`` when the document has none.

    The format has no field for the topic's title (only its slug): it rides in this block,
    so importing an export keeps the title.
    """
    titled = {"title": s.topic.title} if s.topic.title != s.slug else {}
    if s.seal is not None:
        return {
            "session_id": s.id,
            "events": s.seal.get("events"),
            "root_hash": s.seal.get("root_hash"),
            "hmac": s.seal.get("hmac"),
            **titled,
        }
    if s.source != "import":
        # Sessions run here name their ledger session, so two sessions with one slug started
        # on the same day (same YAML ``session.id``) never overwrite each other's file. An
        # imported, unsealed session exports exactly what was imported (round trip).
        return {"session_id": s.id, **titled}
    carried = (s.imported or {}).get("ledger")
    return dict(carried) if carried else (titled or None)


_VOTE_FIELDS = (
    "round",
    "iteration",
    "score",
    "threshold",
    "converged",
    "majority_agrees",
    "agree",
    "disagree",
    "partial",
    "abstain",
    "blocking",
    "remaining_issues",
)


def _extension(s: SessionState) -> dict[str, Any] | None:
    """The extension block (``forge_ledger:``): the participants, the document and the last
    vote, which the seed format has no field for; ``None`` when the session has none of them."""
    vote = s.latest_convergence
    block: dict[str, Any] = {
        "participants": [
            p.model_dump(mode="json", exclude={"api_base"}, exclude_none=True)
            for p in s.participants
        ],
        "document": s.latest_text,
        "vote": vote.model_dump(mode="json", include=set(_VOTE_FIELDS)) if vote else None,
    }
    kept = {k: v for k, v in block.items() if v}
    return kept or None


def session_document(events: Iterable[EventLike]) -> dict[str, Any]:
    """The YAML v1.2 document (plain dict, seed key order) of one session's events."""
    fold = _folded(events)
    s = fold.state
    assert s is not None
    imp = fold.imported
    report = ems_score(s)
    ems, phase = fold.override if fold.override is not None else (report.score, s.phase)
    techniques = _technique_rows(s)
    frame = _imported_frame(fold, s, imp) if imp is not None else _run_frame(fold, s)
    if s.config.mode is Mode.PARTY:
        frame.party += _party(s)
    if s.config.mode is not Mode.PARTY:  # a party session tells its rounds in party terms
        frame.panel += _panel(s)
    session: dict[str, Any] = {
        "id": frame.session_id,
        "slug": s.slug,
        "status": file_status(s.status),
        "phase": phase,
        "mode": s.config.mode.value,
        "ems": ems,
        "persona": s.config.persona.value,
        "iteration": s.iteration,
        "techniques_used": _techniques_used(imp, techniques),
        "started_at": frame.started,
        "duration_minutes": frame.duration,
        "techniques_history": techniques,
        "party_active": frame.party_active,
        "party_history": frame.party,
        "panel_active": frame.panel_active,
        "panel_history": frame.panel,
        "ideas": _ideas(s),
        "history": _history(fold.entries),
        "last_question": fold.last_question,
        "created": frame.created,
        "updated": frame.updated,
    }
    doc: dict[str, Any] = {"format_version": FORMAT_VERSION, "session": session}
    ledger = _ledger_block(s)
    if ledger is not None:
        doc["ledger"] = ledger
    extension = _extension(s)
    if extension is not None:
        doc[EXTENSION_KEY] = extension
    return doc


class _Dumper(yaml.SafeDumper):
    """The safe dumper, writing multi-line text as literal blocks (``|``) so a document reads
    as written; text a literal block cannot hold falls back to a quoted scalar."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def dump_document(doc: dict[str, Any]) -> str:
    """YAML text of a document: block style, insertion key order, UTF-8 kept, no wrapping,
    multi-line text as literal blocks."""
    return yaml.dump(
        doc,
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        indent=2,
        width=1_000_000,
        explicit_start=False,
    )


def export_events(events: Iterable[EventLike]) -> str:
    """The YAML text of a session from its events (the projection the CLI writes)."""
    return dump_document(session_document(events))
