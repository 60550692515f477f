"""The fold: how each recorded event changes a session's state.

:func:`fold` is the one way a session's events become its :class:`~forge_ledger.domain.state.
SessionState`: the aggregate, the projections, time travel and the YAML export all fold
through here. Nothing here reads a clock or does I/O, so the same events always give the same
state (live, replayed, or as of any past position).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

from . import events as ev
from .state import (
    CallFailure,
    ContributionState,
    ConvergenceResult,
    DivergenceChange,
    DivergenceState,
    HumanInput,
    Rewind,
    RoundState,
    SessionState,
    Technique,
    after_iteration,
)
from .values import (
    DivergenceStatus,
    ResponseAccounting,
    RoundStatus,
    SessionStatus,
    status_from_file,
)

__all__ = ["apply_event", "begin", "fold"]


def _initial(session_id: str, payload: ev.SessionStarted, at: datetime) -> SessionState:
    return SessionState(
        id=session_id,
        slug=payload.slug,
        topic=payload.topic,
        config=payload.config,
        source=payload.source,
        created_at=at,
        updated_at=at,
    )


def _forked(session_id: str, payload: ev.SessionForked, at: datetime) -> SessionState:
    state = SessionState.load(payload.state, inline=True)
    state.id = session_id
    state.fork_origin = payload.origin
    state.config = payload.config
    if payload.participants:
        state.participants = list(payload.participants)
    state.created_at = at
    state.status = (
        SessionStatus.PAUSED
        if state.status is not SessionStatus.INITIALIZED
        else SessionStatus.INITIALIZED
    )
    state.status_reason = "forked"
    state.fault = None
    state.seal = None
    state.budget_exhausted = None
    return state


def begin(
    session_id: str, payload: ev.Payload, *, position: int, at: datetime, hash_: str
) -> SessionState:
    """The state after a session's first event (``SessionStarted`` or ``SessionForked``)."""
    if isinstance(payload, ev.SessionForked):
        state = _forked(session_id, payload, at)
    elif isinstance(payload, ev.SessionStarted):
        state = _initial(session_id, payload, at)
    else:
        raise ValueError(
            f"event {position} of session {session_id} ({type(payload).__name__}) "
            "has no prior state"
        )
    state.version = position
    state.head_hash = hash_
    return state


def apply_event(
    state: SessionState, payload: ev.Payload, *, position: int, at: datetime, hash_: str
) -> None:
    """Evolve ``state`` by one recorded event past its first (in place)."""
    handler = _HANDLERS.get(type(payload))
    if handler is not None:
        handler(state, payload, position, at)
    _assign(state, version=position, updated_at=at, head_hash=hash_)


def _assign(model: BaseModel, **values: Any) -> None:
    """Set fields of a state object, as assigning each one does (assignments are not
    validated, see ``state._State``) without pydantic's per-assignment dispatch: the fold sets
    a few fields for every event it applies."""
    model.__dict__.update(values)
    model.__pydantic_fields_set__.update(values)


_FIRST_EVENTS = (ev.SessionStarted, ev.SessionForked)
"""The events that begin a session's state (a tuple: a quicker check than a union)."""


def fold(
    state: SessionState | None,
    payload: ev.Payload,
    *,
    session_id: str,
    position: int,
    at: datetime,
    hash_: str,
) -> SessionState:
    """The one fold of a session's events: the state after this event, given the state before
    it (None before the first). The aggregate, the projections, time travel and the YAML export
    all fold through here, so they cannot disagree on what a session's state is.

    Mutates and returns ``state``, except at a session's first event.
    """
    if state is None or isinstance(payload, _FIRST_EVENTS):
        return begin(session_id, payload, position=position, at=at, hash_=hash_)
    apply_event(state, payload, position=position, at=at, hash_=hash_)
    return state


# --------------------------------------------------------------------------- handlers


def _joined(s: SessionState, p: ev.ParticipantJoined, _pos: int, _at: datetime) -> None:
    s.participants.append(p.participant)


def _round_started(s: SessionState, p: ev.RoundStarted, pos: int, at: datetime) -> None:
    s.rounds.append(
        RoundState(
            number=p.number,
            kind=p.kind,
            iteration=p.iteration,
            depth=p.depth,
            focus=p.focus,
            technique=p.technique,
            expected=list(p.participants),
            targets=dict(p.targets),
            started_position=pos,
            started_at=at,
        )
    )
    s.iteration = p.iteration
    if s.status is SessionStatus.INITIALIZED:
        s.status = SessionStatus.IN_PROGRESS
    if p.technique:
        for t in s.techniques:
            if t.iteration <= p.iteration and t.technique_slug == p.technique:
                t.applied = True


def _fallback(s: SessionState, p: ev.FallbackChosen, _pos: int, _at: datetime) -> None:
    r = s.round(p.round)
    if r is not None and p.participant not in r.expected:
        r.expected.append(p.participant)
        r.replaced.append(p.failed)


def _round_completed(s: SessionState, p: ev.RoundCompleted, _pos: int, at: datetime) -> None:
    r = s.round(p.number)
    if r is not None:
        r.status = RoundStatus.COMPLETE
        r.completed_at = at
        for name in p.abstained:
            if name not in r.abstained:
                r.abstained.append(name)


def _contribution(s: SessionState, p: ev.ContributionRecorded, pos: int, at: datetime) -> None:
    r = s.round(p.round)
    if r is None:
        return
    response = p.response
    text = response.content
    if p.purpose == "continuation":
        before = r.contribution_of(p.participant)
        text = (s.answer(before) if before is not None else "") + text
    r.contributions.append(
        ContributionState.model_validate(
            {
                "participant": p.participant,
                "attempt": p.attempt,
                "position": pos,
                "at": at,
                "model": p.model,
                "prompt_hash": p.prompt_hash,
                "response": ResponseAccounting.of(response),
                "answer_sha256": s.text_pool.add(text),
                "purpose": p.purpose,
            }
        )
    )
    _assign(s, tokens=s.tokens + response.tokens, cost_usd=s.cost_usd + response.cost_usd)


def _failed(s: SessionState, p: ev.ProviderCallFailed, pos: int, _at: datetime) -> None:
    s.failures.append(
        CallFailure(
            round=p.round,
            participant=p.participant,
            attempt=p.attempt,
            position=pos,
            error_type=p.error_type,
            message=p.message,
            will_retry=p.will_retry,
            partial_text=p.partial_text,
        )
    )
    s.tokens = s.tokens + p.tokens
    s.cost_usd += p.cost_usd


def _amend(s: SessionState, round_no: int, name: str, **values: Any) -> RoundState | None:
    """Set fields of the participant's latest answer in a round; the round."""
    r = s.round(round_no)
    c = r.contribution_of(name) if r is not None else None
    if c is not None:
        for field, value in values.items():
            setattr(c, field, value)
    return r


def _critique(s: SessionState, p: ev.CritiqueRecorded, _pos: int, _at: datetime) -> None:
    _amend(s, p.round, p.participant, critique=p.critique)


def _opinion(s: SessionState, p: ev.OpinionRecorded, _pos: int, _at: datetime) -> None:
    _amend(s, p.round, p.participant, opinion=p.opinion)


def _vote(s: SessionState, p: ev.VoteRecorded, _pos: int, _at: datetime) -> None:
    _amend(s, p.round, p.participant, vote=p.vote)


def _parse_failed(s: SessionState, p: ev.ParseFailed, _pos: int, _at: datetime) -> None:
    r = _amend(s, p.round, p.participant, parse_error=p.error)
    if r is not None and p.participant not in r.abstained:
        r.abstained.append(p.participant)


def _convergence(s: SessionState, p: ev.ConvergenceEvaluated, pos: int, _at: datetime) -> None:
    s.convergence.append(
        ConvergenceResult(
            round=p.round,
            iteration=p.iteration,
            score=p.score,
            converged=p.converged,
            majority_agrees=p.majority_agrees,
            agree=p.agree,
            disagree=p.disagree,
            partial=p.partial,
            abstain=p.abstain,
            threshold=p.threshold,
            blocking=list(p.blocking),
            remaining_issues=list(p.remaining_issues),
            position=pos,
        )
    )


def _divergence(s: SessionState, p: ev.DivergenceDetected, pos: int, _at: datetime) -> None:
    s.divergences.append(
        DivergenceState(
            id=p.divergence_id,
            topic=p.topic,
            positions=list(p.positions),
            strongest=p.strongest,
            opened_round=p.round,
            opened_position=pos,
            history=[DivergenceChange(status=DivergenceStatus.OPEN, position=pos, round=p.round)],
        )
    )


def _divergence_change(status: DivergenceStatus) -> Any:
    def handler(s: SessionState, p: ev._DivergenceChange, pos: int, _at: datetime) -> None:
        d = s.divergence(p.divergence_id)
        if d is None:
            return
        d.status = status
        d.history.append(
            DivergenceChange(status=status, position=pos, round=p.round, note=p.note, by=p.by)
        )

    return handler


def _updated(s: SessionState, p: ev.ParticipantUpdated, _pos: int, _at: datetime) -> None:
    s.participants = [p.participant if q.name == p.participant.name else q for q in s.participants]


def _left(s: SessionState, p: ev.ParticipantLeft, _pos: int, _at: datetime) -> None:
    taking_over = {q.name: q for q in p.reassigned}
    s.participants = [taking_over.get(q.name, q) for q in s.participants if q.name != p.participant]


def _paused(s: SessionState, p: ev.SessionPaused, _pos: int, _at: datetime) -> None:
    s.status = SessionStatus.PAUSED
    s.status_reason = p.reason
    s.fault = p.fault
    if p.questions:
        s.pending_questions = list(p.questions)


def _resumed(s: SessionState, p: ev.SessionResumed, pos: int, _at: datetime) -> None:
    s.status = SessionStatus.IN_PROGRESS
    s.status_reason = p.reason
    s.fault = None
    s.resumed_position = pos


def _asked(s: SessionState, p: ev.QuestionsAsked, _pos: int, _at: datetime) -> None:
    s.pending_questions = list(p.questions)
    s.asked.append((p.iteration, list(p.questions)))


def _human(s: SessionState, p: ev.HumanInputRecorded, pos: int, at: datetime) -> None:
    s.human_inputs.append(
        HumanInput(
            author=p.author,
            text=p.text,
            kind=p.kind,
            iteration=p.iteration,
            position=pos,
            at=at,
            questions=list(p.questions),
        )
    )
    if p.kind == "answer":
        s.pending_questions = []


def _rewound(s: SessionState, p: ev.SessionRewound, pos: int, at: datetime) -> None:
    for r in s.rounds:
        if after_iteration(r.iteration, p.to_iteration):
            r.superseded = True
    s.iteration = p.to_iteration
    s.rewinds.append(
        Rewind(
            from_iteration=p.from_iteration,
            to_iteration=p.to_iteration,
            steps=p.steps,
            position=pos,
            at=at,
        )
    )
    restored = [q for it, qs in s.asked if it == p.to_iteration for q in qs]
    s.pending_questions = restored
    if s.status is not SessionStatus.INITIALIZED:
        s.status = SessionStatus.PAUSED
        s.status_reason = f"rewound to iteration {p.to_iteration}"


def _technique(s: SessionState, p: ev.TechniqueSuggested, _pos: int, _at: datetime) -> None:
    s.techniques.append(Technique.model_validate(p.model_dump()))


def _budget(s: SessionState, p: ev.BudgetExhausted, _pos: int, _at: datetime) -> None:
    s.budget_exhausted = p.model_dump(mode="json")


def _terminal(status: SessionStatus) -> Any:
    def handler(s: SessionState, p: ev._Terminal, _pos: int, at: datetime) -> None:
        s.status = status
        s.status_reason = p.reason
        r = s.open_round
        if r is not None:
            r.status = RoundStatus.SKIPPED if not r.contributions else RoundStatus.COMPLETE
            r.completed_at = at

    return handler


def _sealed(s: SessionState, p: ev.SessionSealed, _pos: int, _at: datetime) -> None:
    s.seal = p.model_dump(mode="json")


def _idea(s: SessionState, p: ev.IdeaRecorded, _pos: int, _at: datetime) -> None:
    s.ideas = [i for i in s.ideas if i["id"] != p.idea_id]
    s.ideas.append({"id": p.idea_id, "content": p.content, "score": p.score})


def _iteration_recorded(s: SessionState, p: ev.IterationRecorded, _pos: int, _at: datetime) -> None:
    s.iteration = p.iteration
    if s.status is SessionStatus.INITIALIZED:
        s.status = SessionStatus.IN_PROGRESS


def _imported(s: SessionState, p: ev.SessionImported, pos: int, at: datetime) -> None:
    s.imported = p.model_dump(mode="json")
    s.iteration = p.iteration
    s.status = status_from_file(p.status, agreed=p.vote is not None and p.vote.converged)
    s.status_reason = "imported"
    if p.vote is not None:
        _convergence(s, p.vote, pos, at)


def _labels(s: SessionState, p: ev.ReviewLabelsAssigned, _pos: int, _at: datetime) -> None:
    s.review_labels = dict(p.labels)


_HANDLERS: dict[type[ev.Payload], Any] = {
    ev.ParticipantJoined: _joined,
    ev.ParticipantUpdated: _updated,
    ev.ParticipantLeft: _left,
    ev.FallbackChosen: _fallback,
    ev.RoundStarted: _round_started,
    ev.RoundCompleted: _round_completed,
    ev.ContributionRecorded: _contribution,
    ev.ProviderCallFailed: _failed,
    ev.CritiqueRecorded: _critique,
    ev.OpinionRecorded: _opinion,
    ev.VoteRecorded: _vote,
    ev.ParseFailed: _parse_failed,
    ev.ConvergenceEvaluated: _convergence,
    ev.DivergenceDetected: _divergence,
    ev.DivergenceAddressed: _divergence_change(DivergenceStatus.ADDRESSED),
    ev.DivergenceResolved: _divergence_change(DivergenceStatus.RESOLVED),
    ev.DivergenceWithdrawn: _divergence_change(DivergenceStatus.WITHDRAWN),
    ev.DivergenceOverruled: _divergence_change(DivergenceStatus.OVERRULED),
    ev.SessionPaused: _paused,
    ev.SessionResumed: _resumed,
    ev.QuestionsAsked: _asked,
    ev.HumanInputRecorded: _human,
    ev.SessionRewound: _rewound,
    ev.TechniqueSuggested: _technique,
    ev.BudgetExhausted: _budget,
    ev.SessionConverged: _terminal(SessionStatus.CONVERGED),
    ev.SessionCompleted: _terminal(SessionStatus.COMPLETE),
    ev.SessionAborted: _terminal(SessionStatus.ABORTED),
    ev.SessionTimedOut: _terminal(SessionStatus.TIMED_OUT),
    ev.SessionSealed: _sealed,
    ev.IdeaRecorded: _idea,
    ev.IterationRecorded: _iteration_recorded,
    ev.SessionImported: _imported,
    ev.ReviewLabelsAssigned: _labels,
}
