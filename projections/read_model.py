"""The read model for Datasette: sessions, participants, rounds, contributions and their
parsed outputs (critiques, suggestions, votes) and the cost of every call.

Row ids are derived from the events (``session:number`` for rounds, ``session:position`` for
contributions and calls, ``session:name`` for participants), so the same events always give
the same rows and foreign keys need no lookups. Contribution texts are searchable (FTS5,
kept in sync by triggers; see :mod:`.migrations`).
"""

from __future__ import annotations

from collections.abc import Sequence

from forge_ledger.domain import RoundState, SessionState
from forge_ledger.domain import events as ev
from forge_ledger.domain.events import Payload

from .base import EventLike, Op, Projection, Put, dumps

__all__ = ["ReadModelProjection"]


def _round_row(sid: str, r: RoundState) -> Put:
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
        "expected_json": dumps(r.expected),
        "targets_json": dumps(r.targets),
        "abstained_json": dumps(r.abstained),
        "started_position": r.started_position,
        "started_at": r.started_at.isoformat(),
        "completed_at": r.completed_at.isoformat() if r.completed_at else None,
    })


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
        "config_json": dumps(s.config.model_dump(mode="json")),
        "head_hash": s.head_hash,
        "created_at": s.created_at.isoformat(),
        "updated_at": s.updated_at.isoformat(),
    })


class ReadModelProjection(Projection):
    """Tables ``sessions`` … ``costs`` (see the module docstring)."""

    name = "read_model"
    version = 1
    tables = (
        "sessions", "participants", "rounds", "contributions", "critiques", "suggestions",
        "votes", "costs",
    )

    def apply(self, event: EventLike, payload: Payload, state: SessionState) -> Sequence[Op]:
        sid = event.session_id
        pos = event.position
        at = event.timestamp.isoformat()
        if isinstance(payload, ev.ParticipantJoined):
            return [self._participant(sid, state, payload.participant.name, pos)]
        if isinstance(payload, ev.SessionForked):
            return [self._participant(sid, state, p.name, pos) for p in state.participants]
        if isinstance(payload, ev.RoundStarted):
            r = state.round(payload.number)
            return [_round_row(sid, r)] if r is not None else ()
        if isinstance(payload, ev.RoundCompleted | ev.ParseFailed):
            number = payload.number if isinstance(payload, ev.RoundCompleted) else payload.round
            r = state.round(number)
            return [_round_row(sid, r)] if r is not None else ()
        if isinstance(payload, ev.SessionRewound):
            return [_round_row(sid, r) for r in state.rounds]
        if isinstance(
            payload,
            ev.SessionConverged | ev.SessionCompleted | ev.SessionAborted | ev.SessionTimedOut,
        ):
            last = state.last_round
            return [_round_row(sid, last)] if last is not None else ()
        if isinstance(payload, ev.ContributionRecorded):
            return self._contribution(sid, pos, at, payload)
        if isinstance(payload, ev.ProviderCallFailed):
            return [Put("costs", {
                "id": f"{sid}:{pos}",
                "session_id": sid,
                "round_id": f"{sid}:{payload.round}",
                "participant_id": f"{sid}:{payload.participant}",
                "participant": payload.participant,
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
                "at": at,
            })]
        if isinstance(payload, ev.CritiqueRecorded):
            return self._critique(sid, pos, state, payload)
        if isinstance(payload, ev.VoteRecorded):
            c = self._contribution_of(state, payload.round, payload.participant)
            v = payload.vote
            return [Put("votes", {
                "id": f"{sid}:{payload.round}:{payload.participant}",
                "session_id": sid,
                "round_id": f"{sid}:{payload.round}",
                "participant_id": f"{sid}:{payload.participant}",
                "contribution_id": f"{sid}:{c}" if c is not None else None,
                "participant": payload.participant,
                "round": payload.round,
                "agrees": int(v.agrees),
                "stance": v.effective_stance.value,
                "score": v.score,
                "concerns_json": dumps(list(v.concerns)),
                "reasoning": v.reasoning,
                "position": pos,
            })]
        return ()

    def flush(self, touched: Sequence[SessionState]) -> Sequence[Op]:
        return [_session_row(s) for s in touched]

    @staticmethod
    def _contribution_of(state: SessionState, round_no: int, name: str) -> int | None:
        r = state.round(round_no)
        c = r.contribution_of(name) if r is not None else None
        return c.position if c is not None else None

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
            "participant_json": dumps(p.model_dump(mode="json")),
        })

    @staticmethod
    def _contribution(sid: str, pos: int, at: str, p: ev.ContributionRecorded) -> list[Op]:
        r = p.response
        price = r.price
        return [
            Put("contributions", {
                "id": f"{sid}:{pos}",
                "session_id": sid,
                "round_id": f"{sid}:{p.round}",
                "participant_id": f"{sid}:{p.participant}",
                "participant": p.participant,
                "round": p.round,
                "position": pos,
                "attempt": p.attempt,
                "purpose": p.purpose,
                "model": p.model,
                "content": r.content,
                "messages_json": dumps([m.model_dump(mode="json") for m in p.messages]),
                "prompt_hash": p.prompt_hash,
                "stop_reason": r.stop_reason.value,
                "duration_ms": r.duration_ms,
                "tokens_in": r.tokens.input,
                "tokens_out": r.tokens.output,
                "cost_usd": r.cost_usd,
                "at": at,
            }),
            Put("costs", {
                "id": f"{sid}:{pos}",
                "session_id": sid,
                "round_id": f"{sid}:{p.round}",
                "participant_id": f"{sid}:{p.participant}",
                "participant": p.participant,
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

    def _critique(
        self, sid: str, pos: int, state: SessionState, p: ev.CritiqueRecorded
    ) -> list[Op]:
        key = f"{sid}:{p.round}:{p.participant}"
        c = self._contribution_of(state, p.round, p.participant)
        cr = p.critique
        out: list[Op] = [Put("critiques", {
            "id": key,
            "session_id": sid,
            "round_id": f"{sid}:{p.round}",
            "participant_id": f"{sid}:{p.participant}",
            "contribution_id": f"{sid}:{c}" if c is not None else None,
            "participant": p.participant,
            "target": cr.target,
            "score": cr.score,
            "strengths_json": dumps(list(cr.strengths)),
            "weaknesses_json": dumps(list(cr.weaknesses)),
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
