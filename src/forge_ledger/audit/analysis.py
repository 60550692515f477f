"""The analysis behind the audit: a pure function from a session's events to its report.

It is built on the projections, as they promise: the session state is the domain's fold
(:func:`forge_ledger.projections.fold_events`), stance changes, influences and conformity come
from the consensus trail (which asks the engine's one conformity rule), dissent from the
dissent log. Events arrive through the domain's :class:`~forge_ledger.domain.recorded.EventLike`,
never the store's classes, so the audit runs on any source of recorded events.

What it adds: who moved whom (the trail's influence edges, flattened), whether deliberation
helped (:class:`~.model.DeliberationEffect`), self-preference, usage and failures, human
interventions, and the minority report. No clock, no I/O: the same events, the same report.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from typing import Any

from ..domain.recorded import EventLike
from ..domain.state import SessionState
from ..domain.values import DivergenceStatus, RoundKind, Stance
from ..engine.conformity import Influence, StanceChange
from ..engine.prompts import text_under_vote
from ..engine.votes import score_contradiction
from ..projections import TrailRound, apply_event, consensus_trail, dissent_log
from ..projections.consensus import change_json, influence_json
from .model import (
    AuditReport,
    ConformityFlag,
    ConsensusPoint,
    DeliberationEffect,
    DissentRecord,
    DissentTally,
    DocumentChange,
    FailedCall,
    HumanIntervention,
    InfluenceEdge,
    MinorityEntry,
    ParticipantUsage,
    RoundUsage,
    SelfPreference,
    StancePoint,
    StanceShift,
    Trajectory,
    Usage,
    VoteSummary,
)

__all__ = ["audit_report", "document_similarity"]

_Document = tuple[int | None, str | None, str]
"""(round, author, text) of the forged document."""


def document_similarity(previous: str, current: str) -> float:
    """How alike two versions of the document are, in [0, 1] (1.0: the same words).

    ``difflib.SequenceMatcher(None, previous.split(), current.split(), autojunk=False)
    .ratio()``: over whitespace-separated words, so re-wrapping a paragraph changes nothing and
    the cost stays reasonable for long documents (per character it took 0.2 s per pair of
    2 KB texts); ``autojunk`` is off so frequent words are compared too, not skipped.
    """
    return difflib.SequenceMatcher(
        None, previous.split(), current.split(), autojunk=False
    ).ratio()


_ITERATION_MOVES = frozenset({"RoundStarted", "SessionRewound", "IterationRecorded"})


def _document(state: SessionState) -> _Document:
    source = state.document_source
    if source is None:
        return (None, None, "")
    rnd, c = source
    return (rnd.number, c.participant, state.answer(c))


def _fold(events: Iterable[EventLike]) -> tuple[SessionState, dict[int, _Document]]:
    """The session's state, and the forged document as of each iteration's last event.

    The document is read just before each event that may move to another iteration (a round
    starting, a rewind, an imported iteration) and once at the end, not after every event.
    """
    state: SessionState | None = None
    documents: dict[int, _Document] = {}
    for e in events:
        if state is not None and e.type in _ITERATION_MOVES and state.iteration >= 1:
            documents[state.iteration] = _document(state)
        state = apply_event(state, e)
        if e.type == "SessionRewound":  # the undone iterations' documents no longer count
            documents = {k: v for k, v in documents.items() if k <= state.iteration}
    if state is None:
        raise ValueError("an audit needs the session's events, from its first")
    if state.iteration >= 1:
        documents[state.iteration] = _document(state)
    return state, documents


def _vote_positions(events: Sequence[EventLike]) -> dict[tuple[int, str], int]:
    """(round, participant) → position of its newest ``VoteRecorded``."""
    return {
        (int(e.data["round"]), str(e.data["participant"])): e.position
        for e in events
        if e.type == "VoteRecorded"
    }


def _inherited_rounds(events: Sequence[EventLike]) -> int:
    if events and events[0].type == "SessionForked":
        return len(events[0].data.get("state", {}).get("rounds", []))
    return 0


def _trajectories(
    state: SessionState, trail: list[TrailRound], positions: dict[tuple[int, str], int]
) -> list[Trajectory]:
    points: dict[str, list[StancePoint]] = {p.name: [] for p in state.participants}
    for t in trail:
        for v in t.votes:
            points.setdefault(v.participant, []).append(
                StancePoint(
                    iteration=t.iteration, round=t.round,
                    position=positions.get((t.round, v.participant), v.position),
                    stance=v.stance, agrees=v.agrees, score=v.score, reasoning=v.reasoning,
                    concerns=v.concerns,
                    contradiction=score_contradiction(Stance(v.stance), v.score),
                )
            )
    out = []
    for name, votes in points.items():
        p = state.participant(name)
        out.append(Trajectory(participant=name, model=p.model if p else _last_model(state, name),
                              role=p.role.value if p else "", votes=tuple(votes)))
    return out


def _last_model(state: SessionState, name: str) -> str:
    """The model of ``name``'s last answer: for one no longer taking part (it left a fork)."""
    for r in reversed(state.rounds):
        for c in reversed(r.contributions):
            if c.participant == name:
                return c.model
    return ""


def _edge(i: Influence) -> InfluenceEdge:
    return InfluenceEdge.model_validate(influence_json(i))


def _shift(c: StanceChange) -> StanceShift:
    return StanceShift(
        participant=c.participant, iteration=c.iteration, from_round=c.from_round,
        to_round=c.to_round, position=c.position, before=c.from_stance, after=c.to_stance,
        majority_agreed=c.majority_agreed, toward_majority=c.toward_majority,
        influences=tuple(_edge(i) for i in c.influences), own_arguments=c.own_arguments,
        conformity=c.conformity, reason=c.reason,
    )


def _dissent(state: SessionState) -> list[DissentRecord]:
    out = []
    for d in dissent_log(state, include_closed=True):
        opened = state.round(d.opened_round)
        out.append(
            DissentRecord(
                id=d.divergence_id, topic=d.topic, status=d.status, strong=d.strong,
                strongest=d.strongest, who=tuple(p for p, _, _ in d.positions),
                positions={p: text for p, _, text in d.positions},
                opened_round=d.opened_round,
                opened_iteration=opened.iteration if opened is not None else None,
                opened_position=d.opened_position, addressed_position=d.addressed_position,
                closed_position=d.closed_position, closed_by=d.closed_by,
                rounds_open=d.rounds_open,
                history=d.lifecycle,
                held_by=tuple((p, Stance(s)) for p, s, _ in d.positions if Stance(s).disagrees),
            )
        )
    return out


def _human(state: SessionState) -> list[HumanIntervention]:
    out = [
        HumanIntervention(kind=f"input:{h.kind}", author=h.author, position=h.position,
                          iteration=h.iteration, text=h.text)
        for h in state.human_inputs
    ]
    for d in state.divergences:
        for h in d.history:
            if h.status is DivergenceStatus.OVERRULED:
                r = state.round(h.round)
                out.append(HumanIntervention(
                    kind="overrule", author=h.by, position=h.position,
                    iteration=r.iteration if r is not None else None,
                    text=f"overruled dissent {d.id} ({d.topic})"
                    + (f": {h.note}" if h.note else ""),
                ))
    for w in state.rewinds:
        out.append(HumanIntervention(
            kind="rewind", author="", position=w.position, iteration=w.from_iteration,
            text=f"back {w.steps}: iteration {w.from_iteration} → {w.to_iteration}",
        ))
    return sorted(out, key=lambda h: h.position)


def _failed_calls(state: SessionState, events: Sequence[EventLike]) -> list[FailedCall]:
    by_position = {e.position: e for e in events if e.type == "ProviderCallFailed"}
    out = []
    for f in state.failures:
        e = by_position.get(f.position)
        same = (
            e is not None
            and int(e.data["round"]) == f.round
            and e.data["participant"] == f.participant
            and int(e.data["attempt"]) == f.attempt
        )
        out.append(FailedCall(
            **f.model_dump(),
            model=str(e.data["model"]) if same and e is not None else None,
            cost_usd=float(e.data.get("cost_usd", 0.0)) if same and e is not None else None,
        ))
    return out


def _add(
    acc: dict[str, Any], calls: int, failed: int, tin: int, tout: int, usd: float,
    unpriced: int = 0,
) -> None:
    acc["calls"] = acc.get("calls", 0) + calls
    acc["failed_calls"] = acc.get("failed_calls", 0) + failed
    acc["input_tokens"] = acc.get("input_tokens", 0) + tin
    acc["output_tokens"] = acc.get("output_tokens", 0) + tout
    acc["priced_cost_usd"] = acc.get("priced_cost_usd", 0.0) + usd
    acc["unpriced_calls"] = acc.get("unpriced_calls", 0) + unpriced


def _usage(
    state: SessionState, failed: list[FailedCall], events: Sequence[EventLike]
) -> tuple[list[ParticipantUsage], list[RoundUsage]]:
    fail_tokens: dict[int, tuple[int, int]] = {}
    for e in events:
        if e.type == "ProviderCallFailed":
            t = e.data.get("tokens") or {}
            fail_tokens[e.position] = (int(t.get("input", 0)), int(t.get("output", 0)))
    per_p: dict[str, dict[str, Any]] = {
        p.name: {"participant": p.name, "model": p.model} for p in state.participants
    }
    per_r: dict[int, dict[str, Any]] = {
        r.number: {"round": r.number, "kind": r.kind, "iteration": r.iteration}
        for r in state.rounds
    }
    for r in state.rounds:
        for c in r.contributions:
            t = c.response.tokens
            args = (1, 0, t.input, t.output, c.response.cost_usd, int(c.unpriced))
            _add(per_p.setdefault(c.participant, {"participant": c.participant,
                                                  "model": c.model}), *args)
            _add(per_r[r.number], *args)
    for f in failed:
        tin, tout = fail_tokens.get(f.position, (0, 0)) if f.model is not None else (0, 0)
        args = (1, 1, tin, tout, f.cost_usd or 0.0, 0)
        _add(per_p.setdefault(f.participant, {"participant": f.participant, "model": ""}), *args)
        if f.round in per_r:
            _add(per_r[f.round], *args)
    return (
        [ParticipantUsage.model_validate(v) for v in per_p.values()],
        [RoundUsage.model_validate(per_r[k]) for k in sorted(per_r)],
    )


def _minority(dissent: list[DissentRecord], trajectories: list[Trajectory]) -> list[MinorityEntry]:
    out = [
        MinorityEntry(
            who=d.who,
            concern=d.topic + ("" if not d.positions else " — " + "; ".join(d.positions.values())),
            since_iteration=d.opened_iteration, since_round=d.opened_round,
            since_position=d.opened_position, source="dissent", divergence_id=d.id,
            strongest=d.strongest,
        )
        for d in dissent
        if not DivergenceStatus(d.status).closed
    ]
    for t in trajectories:
        if not t.votes or t.votes[-1].agrees:
            continue
        first = len(t.votes) - 1
        while first > 0 and not t.votes[first - 1].agrees:
            first -= 1
        last, since = t.votes[-1], t.votes[first]
        concern = "; ".join(last.concerns) or last.reasoning or f"votes {last.stance.value}"
        out.append(MinorityEntry(
            who=(t.participant,), concern=concern, since_iteration=since.iteration,
            since_round=since.round, since_position=since.position, source="vote",
            strongest=last.stance,
        ))
    return out


def _vote_summary(c: ConsensusPoint | None) -> VoteSummary | None:
    if c is None:
        return None
    return VoteSummary(
        round=c.round, iteration=c.iteration, majority_agrees=c.majority_agrees, agree=c.agree,
        disagree=c.disagree, partial=c.partial, abstain=c.abstain,
        weighted_score=c.weighted_score, threshold=c.threshold, converged=c.converged,
    )


def _document_changes(documents: dict[int, _Document]) -> list[DocumentChange]:
    out: list[DocumentChange] = []
    previous: str | None = None
    for iteration in sorted(documents):
        rnd, author, text = documents[iteration]
        similarity = (
            None if previous is None or not (previous or text)  # nothing to compare yet
            else round(document_similarity(previous, text), 4)
        )
        out.append(DocumentChange(iteration=iteration, round=rnd, author=author, chars=len(text),
                                  similarity=similarity))
        previous = text
    return out


def _effect(
    state: SessionState, consensus: list[ConsensusPoint], shifts: list[StanceShift],
    dissent: list[DissentRecord], documents: dict[int, _Document],
) -> DeliberationEffect:
    first = consensus[0] if consensus else None
    last = consensus[-1] if consensus else None
    disagreements = tuple(
        c.round for c in consensus if (c.weighted_score >= c.threshold) != c.majority_agrees
    )
    flagged = sum(1 for s in shifts if s.conformity)
    tally = DissentTally(
        resolved=sum(1 for d in dissent if d.status == DivergenceStatus.RESOLVED.value),
        overruled=sum(1 for d in dissent if d.status == DivergenceStatus.OVERRULED.value),
        withdrawn=sum(1 for d in dissent if d.status == DivergenceStatus.WITHDRAWN.value),
        open=sum(1 for d in dissent if not DivergenceStatus(d.status).closed),
    )
    return DeliberationEffect(
        first_vote=_vote_summary(first), final_vote=_vote_summary(last),
        outcome=state.status.value,
        first_majority_is_final=(
            first.majority_agrees == last.majority_agrees
            if first is not None and last is not None and first is not last else None
        ),
        score_majority_disagreed=bool(disagreements), disagreement_rounds=disagreements,
        document_change=tuple(_document_changes(documents)),
        stance_changes=len(shifts), conformity_flags=flagged,
        conformity_rate=round(flagged / len(shifts), 4) if shifts else None,
        dissents=tally,
    )


def _judgements(state: SessionState) -> list[tuple[str, str, int, bool | None]]:
    """(judge, author of the judged text, score, agrees) for every critique and vote."""
    names = set(state.participant_names)
    out: list[tuple[str, str, int, bool | None]] = []
    for r in state.active_rounds:
        if r.kind is RoundKind.CRITIQUE:
            for c in r.contributions:
                author = r.targets.get(c.participant) or (c.critique.target if c.critique else None)
                if c.critique is not None and author in names:
                    out.append((c.participant, str(author), c.critique.score, None))
        elif r.kind is RoundKind.CONVERGENCE:
            text = text_under_vote(state, r)
            for c in r.contributions:
                if text is not None and c.vote is not None and c.participant not in r.abstained:
                    out.append((c.participant, text.participant, c.vote.score,
                                c.vote.effective_stance.agrees))
    return out


def _mean(xs: list[float]) -> float | None:
    return round(sum(xs) / len(xs), 4) if xs else None


def _self_preference(state: SessionState) -> list[SelfPreference]:
    judged = _judgements(state)
    out = []
    for name in state.participant_names:
        own = [(s, a) for j, who, s, a in judged if j == name and who == name]
        others = [(s, a) for j, who, s, a in judged if j == name and who != name]
        own_mean = _mean([float(s) for s, _ in own])
        others_mean = _mean([float(s) for s, _ in others])
        out.append(SelfPreference(
            participant=name, own_judgements=len(own), own_mean_score=own_mean,
            own_agree_rate=_mean([float(a) for _, a in own if a is not None]),
            others_judgements=len(others), others_mean_score=others_mean,
            others_agree_rate=_mean([float(a) for _, a in others if a is not None]),
            score_gap=(round(own_mean - others_mean, 4)
                       if own_mean is not None and others_mean is not None else None),
        ))
    return out


def _consensus(state: SessionState) -> list[ConsensusPoint]:
    return [
        ConsensusPoint(
            iteration=c.iteration, round=c.round, position=c.position, weighted_score=c.score,
            threshold=c.threshold, majority_agrees=c.majority_agrees, agree=c.agree,
            disagree=c.disagree, partial=c.partial, abstain=c.abstain, converged=c.converged,
            blocking=tuple(c.blocking),
        )
        for c in state.convergence
    ]


def audit_report(events: Sequence[EventLike]) -> AuditReport:
    """The audit of one session from its own events (from its first event on)."""
    state, documents = _fold(events)
    trail = consensus_trail(state)
    trajectories = _trajectories(state, trail, _vote_positions(events))
    changes = [c for t in trail for c in t.changes]
    shifts = [_shift(c) for c in changes]
    dissent = _dissent(state)
    consensus = _consensus(state)
    failed = _failed_calls(state, events)
    by_participant, by_round = _usage(state, failed, events)
    return AuditReport(
        session_id=state.id, title=state.topic.title, status=state.status.value,
        status_reason=state.status_reason, events=state.version, head_hash=state.head_hash,
        iterations=state.iteration, fork_origin=state.fork_origin,
        inherited_rounds=_inherited_rounds(events), sealed=state.seal is not None,
        document_truncated=state.document_truncated,
        anonymized=state.config.anonymize, labels=dict(state.review_labels),
        consensus=tuple(consensus), trajectories=tuple(trajectories),
        stance_shifts=tuple(shifts),
        conformity=tuple(
            ConformityFlag.model_validate(change_json(c)) for c in changes if c.conformity
        ),
        influence=tuple(i for s in shifts for i in s.influences),
        deliberation_effect=_effect(state, consensus, shifts, dissent, documents),
        self_preference=tuple(_self_preference(state)),
        dissent=tuple(dissent), human_interventions=tuple(_human(state)),
        usage_by_participant=tuple(by_participant), usage_by_round=tuple(by_round),
        total=Usage(
            calls=sum(u.calls for u in by_participant),
            failed_calls=sum(u.failed_calls for u in by_participant),
            input_tokens=state.tokens.input, output_tokens=state.tokens.output,
            priced_cost_usd=state.cost_usd, unpriced_calls=state.unpriced_calls,
        ),
        failed_calls=tuple(failed),
        minority_report=tuple(_minority(dissent, trajectories)),
    )
