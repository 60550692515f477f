"""The read model for Datasette: sessions, participants, rounds, contributions and their
parsed outputs (critiques, suggestions, votes) and the cost of every call; what ``show``
prints of a session (``round_lines`` and the ``sessions`` row's EMS, latest convergence and
open dissent), so ``show`` reads one session's rows instead of folding its events; and each
session's document file (``documents``), which ``spec`` prints from here.

Row ids are derived from the events (``session:number`` for rounds, ``session:position`` for
contributions and calls, ``session:name`` for participants), so the same events always give
the same rows and foreign keys need no lookups (a round's lines are ``session:number:index``).
Contribution texts are searchable (FTS5, kept in sync by triggers; see :mod:`.migrations`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from forge_ledger.domain import RoundState, SessionState, canonical_json
from forge_ledger.domain import events as ev
from forge_ledger.domain.events import Payload
from forge_ledger.domain.state import ContributionState
from forge_ledger.domain.values import Participant, SessionStatus

from .base import EventLike, Op, Patch, Projection, Put, links
from .current import READ_MODEL_NAME, READ_MODEL_VERSION
from .document_file import render_spec
from .show_view import (
    contribution_line,
    convergence_json,
    dissent_json,
    dissent_rows,
    session_ems,
)

__all__ = ["ReadModelProjection"]


def _round_row(sid: str, r: RoundState, expected: list[str]) -> Put:
    """The ``rounds`` row of ``r``, listing ``expected`` as the participants it expects."""
    return Put("rounds", {
        "id": f"{sid}:{r.number}",
        "session_id": sid,
        "number": r.number,
        "kind": r.kind.value,
        "iteration": r.iteration,
        "depth": r.depth,
        "focus": r.focus,
        "technique": r.technique,
        "status": r.status.value,
        "superseded": int(r.superseded),
        "expected_json": canonical_json(expected),
        "targets_json": canonical_json(r.targets),
        "abstained_json": canonical_json(r.abstained),
        "started_position": r.started_position,
        "started_at": r.started_at.isoformat(),
        "completed_at": r.completed_at.isoformat() if r.completed_at else None,
    })


def _line_row(sid: str, state: SessionState, r: RoundState, idx: int) -> Put:
    """The ``round_lines`` row of ``r``'s contribution number ``idx`` (from 0), as ``show``
    lists it."""
    line = contribution_line(state, r.contributions[idx])
    return Put("round_lines", {
        "id": f"{sid}:{r.number}:{idx}",
        "session_id": sid,
        "round_id": f"{sid}:{r.number}",
        "round": r.number,
        "idx": idx,
        "participant": line.participant,
        "tokens": line.tokens,
        "preview": line.preview,
        "failed": int(line.failed),
        "unpriced": int(line.unpriced),
    })


_Line = tuple[str, SessionState, RoundState, int]
"""A ``round_lines`` row to write at the batch's flush: (session id, state, round, index)."""

_Round = tuple[str, RoundState, list[str]]
"""A ``rounds`` row to write at the batch's flush: (session id, round, expected as marked)."""


def _session_row(s: SessionState) -> Put:
    return Put("sessions", {
        "id": s.id,
        "slug": s.slug,
        "title": s.topic.title,
        "description": s.topic.description,
        "output_type": s.topic.output_type.value,
        "status": s.status.value,
        "status_reason": s.status_reason,
        "phase": s.phase,
        "iteration": s.iteration,
        "events": s.version,
        "tokens_in": s.tokens.input,
        "tokens_out": s.tokens.output,
        "cost_usd": s.cost_usd,
        "parent_id": s.fork_origin.parent_id if s.fork_origin else None,
        "parent_position": s.fork_origin.parent_position if s.fork_origin else None,
        "source": s.source,
        "config_json": canonical_json(s.config.model_dump(mode="json")),
        "head_hash": s.head_hash,
        "created_at": s.created_at.isoformat(),
        "updated_at": s.updated_at.isoformat(),
        "ems": session_ems(s),
        "convergence_json": canonical_json(convergence_json(s)),
        "open_dissent_json": canonical_json(dissent_json(dissent_rows(s))),
    })


def _document_row(s: SessionState) -> Put:
    """The ``documents`` row: the session's document file as ``spec`` prints it."""
    has_text = s.latest_text is not None
    return Put("documents", {
        "id": s.id,
        "status": s.status.value,
        "iteration": s.iteration,
        "position": s.version,
        "agreed": int(s.status is SessionStatus.CONVERGED),
        "text": render_spec(s) if has_text else None,
    })


class ReadModelProjection(Projection):
    """Tables ``sessions`` … ``costs`` and ``round_lines`` (see the module docstring).

    Version 2 added what ``show`` prints (the EMS, the latest convergence, the open dissent,
    one line per contribution) and writes a fork's inherited rounds, so ``show`` can read a
    session from here when the read model is current. Version 3: a vote's line gives its
    stance and reason. Version 4: the line of an answer cut off at its token limit says so.
    Version 5: a vote whose score contradicts its stance says so on its line. Version 6:
    each session's document file (``documents``), for ``spec``. (The number
    is :data:`~.current.READ_MODEL_VERSION`, which readers check.)
    """

    name = READ_MODEL_NAME
    version = READ_MODEL_VERSION
    tables = (
        "sessions", "participants", "rounds", "contributions", "critiques", "suggestions",
        "votes", "costs", "round_lines", "documents",
    )

    def __init__(self) -> None:
        self._rounds: dict[str, _Round] = {}
        self._lines: dict[str, _Line] = {}

    def begin(self) -> None:
        self._rounds = {}
        self._lines = {}

    def apply(self, event: EventLike, payload: Payload, state: SessionState) -> Sequence[Op]:
        # one dict lookup on the payload's class instead of a chain of isinstance checks
        # (this runs for every event of a rebuild)
        kind = type(payload)
        handler = _HANDLERS.get(kind)
        if handler is None:
            handler = _HANDLERS[kind] = _handler_for(kind)
        return handler(self, event, payload, state)

    def on_joined(self, event: EventLike, payload: Payload, state: SessionState) -> list[Op]:
        assert isinstance(payload, ev.ParticipantJoined)
        return [self._participant(event.session_id, state, payload.participant.name,
                                  event.position)]

    def on_updated(self, event: EventLike, payload: Payload, _state: SessionState) -> list[Op]:
        """A model or endpoint changed on the way: the row shows the participant as it is now
        (each contribution keeps the model it was made with)."""
        assert isinstance(payload, ev.ParticipantUpdated)
        return [self._as_now(event.session_id, payload.participant)]

    def on_left(self, event: EventLike, payload: Payload, _state: SessionState) -> list[Op]:
        """Who left keeps its row (its earlier contributions refer to it), marked with the
        position it left at; a participant that took over its role shows the new role."""
        assert isinstance(payload, ev.ParticipantLeft)
        sid = event.session_id
        return [
            Patch("participants", f"{sid}:{payload.participant}",
                  {"left_position": event.position}),
            *(self._as_now(sid, p) for p in payload.reassigned),
        ]

    @staticmethod
    def _as_now(sid: str, p: Participant) -> Patch:
        return Patch("participants", f"{sid}:{p.name}", {
            "model": p.model,
            "role": p.role.value,
            "provider": p.provider.value,
            "participant_json": canonical_json(p.model_dump(mode="json")),
        })

    def on_forked(self, event: EventLike, _payload: Payload, state: SessionState) -> list[Op]:
        """The fork's participants, and the rounds it carries over from its parent."""
        sid, pos = event.session_id, event.position
        out: list[Op] = [self._participant(sid, state, p.name, pos) for p in state.participants]
        for r in state.rounds:
            self._round(sid, r)
            for i in range(len(r.contributions)):
                self._line(sid, state, r, i)
        return out

    def on_round(self, event: EventLike, payload: Payload, state: SessionState) -> list[Op]:
        assert isinstance(payload, ev.RoundStarted | ev.RoundCompleted)
        r = state.round(payload.number)
        if r is not None:
            self._round(event.session_id, r)
        return []

    def on_parse_failed(
        self, event: EventLike, payload: Payload, state: SessionState
    ) -> list[Op]:
        assert isinstance(payload, ev.ParseFailed)
        sid = event.session_id
        r = state.round(payload.round)
        if r is not None:
            self._round(sid, r)
            self._line_of(sid, state, payload.round, payload.participant)
        return []

    def on_rewound(self, event: EventLike, _payload: Payload, state: SessionState) -> list[Op]:
        for r in state.rounds:
            self._round(event.session_id, r)
        return []

    def on_terminal(self, event: EventLike, _payload: Payload, state: SessionState) -> list[Op]:
        last = state.last_round
        if last is not None:
            self._round(event.session_id, last)
        return []

    def on_contribution(
        self, event: EventLike, payload: Payload, state: SessionState
    ) -> list[Op]:
        assert isinstance(payload, ev.ContributionRecorded)
        sid = event.session_id
        out = self._contribution(sid, event.position, event.timestamp.isoformat(), payload)
        r = state.round(payload.round)
        if r is not None and r.contributions:  # the fold appended it
            self._line(sid, state, r, len(r.contributions) - 1)
        return out

    def on_failure(self, event: EventLike, payload: Payload, _state: SessionState) -> list[Op]:
        assert isinstance(payload, ev.ProviderCallFailed)
        sid, pos = event.session_id, event.position
        return [Put("costs", {
            "id": f"{sid}:{pos}",
            **links(sid, payload.round, payload.participant),
            "kind": "failed_call",
            "attempt": payload.attempt,
            "model": payload.model,
            "tokens_in": payload.tokens.input,
            "tokens_out": payload.tokens.output,
            "cost_usd": payload.cost_usd,
            "price_in": None,
            "price_out": None,
            "price_source": None,
            "position": pos,
            "at": event.timestamp.isoformat(),
        })]

    def on_critique(self, event: EventLike, payload: Payload, state: SessionState) -> list[Op]:
        assert isinstance(payload, ev.CritiqueRecorded)
        sid = event.session_id
        c = self._line_of(sid, state, payload.round, payload.participant)
        return self._critique(sid, event.position, c, payload)

    def on_opinion(self, event: EventLike, payload: Payload, state: SessionState) -> list[Op]:
        assert isinstance(payload, ev.OpinionRecorded)
        self._line_of(event.session_id, state, payload.round, payload.participant)
        return []

    def on_vote(self, event: EventLike, payload: Payload, state: SessionState) -> list[Op]:
        assert isinstance(payload, ev.VoteRecorded)
        sid = event.session_id
        c = self._line_of(sid, state, payload.round, payload.participant)
        v = payload.vote
        return [Put("votes", {
            "id": f"{sid}:{payload.round}:{payload.participant}",
            **links(sid, payload.round, payload.participant),
            "contribution_id": f"{sid}:{c.position}" if c is not None else None,
            "round": payload.round,
            "agrees": int(v.agrees),
            "stance": v.effective_stance.value,
            "score": v.score,
            "concerns_json": canonical_json(list(v.concerns)),
            "reasoning": v.reasoning,
            "position": event.position,
        })]

    def on_other(self, _event: EventLike, _payload: Payload, _state: SessionState) -> list[Op]:
        return []

    def flush(self, touched: Sequence[SessionState]) -> Sequence[Op]:
        """The batch's ``rounds`` and ``round_lines`` rows, each rendered once, and its
        sessions' rows and documents.

        A line changes only through the events that mark it (its contribution, then the vote,
        critique, opinion or parse failure recorded on it), and the fold changes its
        contribution in place, so the row rendered now is the row the last of them would have
        written. So does a round's, but for one column (see :meth:`_round`). Rows keep the
        order they were first marked in, so a new row gets the rowid it got when every event
        wrote it.
        """
        rounds = [_round_row(sid, r, expected) for sid, r, expected in self._rounds.values()]
        lines = [_line_row(sid, state, r, idx) for sid, state, r, idx in self._lines.values()]
        self._rounds = {}
        self._lines = {}
        sessions = [op for s in touched for op in (_session_row(s), _document_row(s))]
        return [*rounds, *lines, *sessions]

    def _round(self, sid: str, r: RoundState) -> None:
        """Mark round ``r``: its row is written at the flush (see :meth:`flush`).

        Its expected participants are kept as they are now: a fallback (``FallbackChosen``)
        adds one without writing the row, which shows it from the round's next write on.
        """
        self._rounds[f"{sid}:{r.number}"] = (sid, r, list(r.expected))

    def _line(self, sid: str, state: SessionState, r: RoundState, idx: int) -> None:
        """Mark ``r``'s contribution number ``idx`` (from 0): its line is written at the flush,
        once however many of the batch's events change it (see :meth:`flush`)."""
        self._lines[f"{sid}:{r.number}:{idx}"] = (sid, state, r, idx)

    def _line_of(
        self, sid: str, state: SessionState, round_no: int, name: str
    ) -> ContributionState | None:
        """Mark the line of ``name``'s latest contribution in round ``round_no`` (a critique,
        an opinion, a vote or a parse failure was just recorded on it); that contribution."""
        r = state.round(round_no)
        c = r.contribution_of(name) if r is not None else None
        if r is None or c is None:
            return None
        contributions = r.contributions
        idx = next(i for i in range(len(contributions) - 1, -1, -1) if contributions[i] is c)
        self._line(sid, state, r, idx)
        return c

    @staticmethod
    def _participant(sid: str, state: SessionState, name: str, pos: int) -> Put:
        p = state.participant(name)
        assert p is not None
        return Put("participants", {
            "id": f"{sid}:{p.name}",
            "session_id": sid,
            "name": p.name,
            "model": p.model,
            "provider": p.provider.value,
            "role": p.role.value,
            "joined_position": pos,
            "participant_json": canonical_json(p.model_dump(mode="json")),
        })

    @staticmethod
    def _contribution(sid: str, pos: int, at: str, p: ev.ContributionRecorded) -> list[Op]:
        r = p.response
        price = r.price
        key = f"{sid}:{pos}"
        refs = links(sid, p.round, p.participant)
        return [
            Put("contributions", {
                "id": key,
                **refs,
                "round": p.round,
                "position": pos,
                "attempt": p.attempt,
                "purpose": p.purpose,
                "model": p.model,
                "content": r.content,
                "messages_json": canonical_json([m.model_dump(mode="json") for m in p.messages]),
                "prompt_hash": p.prompt_hash,
                "stop_reason": r.stop_reason.value,
                "duration_ms": r.duration_ms,
                "tokens_in": r.tokens.input,
                "tokens_out": r.tokens.output,
                "cost_usd": r.cost_usd,
                "at": at,
            }),
            Put("costs", {
                "id": key,
                **refs,
                "kind": "contribution",
                "attempt": p.attempt,
                "model": r.model,
                "tokens_in": r.tokens.input,
                "tokens_out": r.tokens.output,
                "cost_usd": r.cost_usd,
                "price_in": price.input_cost_per_token if price else None,
                "price_out": price.output_cost_per_token if price else None,
                "price_source": price.source if price else None,
                "position": pos,
                "at": at,
            }),
        ]

    @staticmethod
    def _critique(
        sid: str, pos: int, c: ContributionState | None, p: ev.CritiqueRecorded
    ) -> list[Op]:
        """The critique's rows; ``c`` is the contribution it was recorded on."""
        key = f"{sid}:{p.round}:{p.participant}"
        cr = p.critique
        out: list[Op] = [Put("critiques", {
            "id": key,
            **links(sid, p.round, p.participant),
            "contribution_id": f"{sid}:{c.position}" if c is not None else None,
            "target": cr.target,
            "score": cr.score,
            "strengths_json": canonical_json(list(cr.strengths)),
            "weaknesses_json": canonical_json(list(cr.weaknesses)),
            "position": pos,
        })]
        for i, s in enumerate(cr.suggestions, start=1):
            out.append(Put("suggestions", {
                "id": f"{key}:{i}",
                "critique_id": key,
                "session_id": sid,
                "participant_id": f"{sid}:{p.participant}",
                "idx": i,
                "text": s.text,
                "section": s.section,
                "priority": s.priority,
                "category": s.category.value,
            }))
        return out


_Handler = Callable[[ReadModelProjection, EventLike, Payload, SessionState], Sequence[Op]]

_BY_CLASS: tuple[tuple[type[Any], _Handler], ...] = (
    (ev.ParticipantJoined, ReadModelProjection.on_joined),
    (ev.ParticipantUpdated, ReadModelProjection.on_updated),
    (ev.ParticipantLeft, ReadModelProjection.on_left),
    (ev.SessionForked, ReadModelProjection.on_forked),
    (ev.RoundStarted, ReadModelProjection.on_round),
    (ev.RoundCompleted, ReadModelProjection.on_round),
    (ev.ParseFailed, ReadModelProjection.on_parse_failed),
    (ev.SessionRewound, ReadModelProjection.on_rewound),
    (ev.SessionConverged, ReadModelProjection.on_terminal),
    (ev.SessionCompleted, ReadModelProjection.on_terminal),
    (ev.SessionAborted, ReadModelProjection.on_terminal),
    (ev.SessionTimedOut, ReadModelProjection.on_terminal),
    (ev.ContributionRecorded, ReadModelProjection.on_contribution),
    (ev.ProviderCallFailed, ReadModelProjection.on_failure),
    (ev.CritiqueRecorded, ReadModelProjection.on_critique),
    (ev.OpinionRecorded, ReadModelProjection.on_opinion),
    (ev.VoteRecorded, ReadModelProjection.on_vote),
)

_HANDLERS: dict[type[Any], _Handler] = {}


def _handler_for(kind: type[Any]) -> _Handler:
    """The first matching entry of ``_BY_CLASS`` (subclasses included), as isinstance would."""
    for cls, handler in _BY_CLASS:
        if issubclass(kind, cls):
            return handler
    return ReadModelProjection.on_other
