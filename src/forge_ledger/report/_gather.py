"""The one adapter from the ledger's analyses to the page's view model.

Everything the page shows passes through :func:`gather`: the audit (consensus, stances,
dissent, usage, conformity, human input, failed calls, minority report), the session state
(header, and the document through ``SessionState.document_source``) and the chain check.
Parts that no analysis provides yet — influence edges, where each sentence was introduced,
self-preference, the effect of deliberation — are left empty and the page says so. When an
analysis starts providing one, only this module changes.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import TypedDict
from uuid import UUID

from ..audit import AuditReport, audit_report
from ..domain.state import SessionState
from ..ledger import Ledger, verify_session
from ._model import (
    ConformityFlag,
    ConsensusPoint,
    ContributionRef,
    DissentChange,
    DissentSpan,
    Document,
    FailedCall,
    HumanIntervention,
    Integrity,
    MinorityEntry,
    ParticipantInfo,
    ParticipantUsage,
    ReportModel,
    RoundUsage,
    Sentence,
    StanceCell,
)

__all__ = ["gather"]

_SENTENCE_END = re.compile(r"(?<=[.!?])[ \t]+(?=\S)")
"""Inside a line, a sentence ends after . ! or ? and the spaces that follow."""
_BLOCK_START = re.compile(r"[ \t]*(?:#|[-*+>|][ \t]|\d+[.)][ \t]|\r?\n|$)")
"""A line that starts a Markdown block (heading, list item, quote, table row) or is blank."""


def gather(
    ledger: Ledger,
    session_id: str | UUID,
    at_iteration: int | None = None,
    *,
    key: bytes | None = None,
    checked_at: datetime | None = None,
) -> ReportModel:
    """The report's content for a session, now or as of the end of iteration ``at_iteration``.

    The chain and seal are checked over the whole stored session (with ``key``, the seal's
    HMAC too); the rest is as of the chosen position.
    """
    sid = ledger.resolve(session_id) if isinstance(session_id, str) else session_id
    state = ledger.state(sid, at_iteration=at_iteration)
    events = list(ledger.events(sid, upto=state.version))
    audit = audit_report(events, state)
    return ReportModel(
        session_id=state.id,
        slug=state.slug,
        title=state.topic.title,
        description=state.topic.description,
        status=state.status.value,
        status_reason=state.status_reason,
        participants=tuple(
            ParticipantInfo(name=p.name, model=p.model, role=p.role.value)
            for p in state.participants
        ),
        iterations=state.iteration,
        rounds=len(state.rounds),
        cost_usd=state.cost_usd,
        input_tokens=state.tokens.input,
        output_tokens=state.tokens.output,
        position=state.version,
        head_hash=state.head_hash,
        total_events=ledger.head_version(sid),
        at_iteration=at_iteration,
        integrity=_integrity(ledger, sid, key, checked_at),
        document=_document(state),
        **_from_audit(audit),
    )


def _integrity(
    ledger: Ledger, sid: UUID, key: bytes | None, checked_at: datetime | None
) -> Integrity:
    r = verify_session(ledger, sid, key=key)
    return Integrity(
        chain_ok=r.ok,
        events_checked=r.events,
        problem=r.problem,
        first_bad_position=r.position,
        sealed=r.sealed,
        seal_ok=r.seal_ok,
        hmac_checked=key is not None and r.sealed,
        hmac_ok=r.hmac_ok,
        checked_at=checked_at,
    )


def _document(state: SessionState) -> Document | None:
    found = state.document_source
    if found is None:
        return None
    rnd, c = found
    source = ContributionRef(
        participant=c.participant,
        round=rnd.number,
        kind=rnd.kind.value,
        iteration=rnd.iteration,
        position=c.position,
    )
    text = c.response.content
    return Document(
        source=source,
        text=text,
        sentences=tuple(Sentence(text=s) for s in _segments(text)),
        lineage_available=False,
    )


def _segments(text: str) -> list[str]:
    """The text cut into sentences, headings, list items and table rows, concatenating back to
    it exactly. A line wrapped inside a paragraph or list item does not end a piece; blank
    lines stay with the piece before them.

    Only needed while no lineage of the document is recorded: a lineage gives its own
    sentences (with their origins), and those replace these pieces.
    """
    out: list[str] = []
    current = ""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        *ended, rest = _sentences(line)
        for piece in ended:
            out.append(current + piece)
            current = ""
        current += rest
        following = lines[i + 1] if i + 1 < len(lines) else None
        if following is not None and _continues(line, following):
            continue
        if not current.strip() and out:
            out[-1] += current
        elif current:
            out.append(current)
        current = ""
    return out


def _sentences(line: str) -> list[str]:
    cuts = [m.end() for m in _SENTENCE_END.finditer(line)]
    return [line[a:b] for a, b in zip([0, *cuts], [*cuts, len(line)], strict=True)]


def _continues(line: str, following: str) -> bool:
    """Whether ``following`` carries on the sentence of ``line`` (a soft line wrap)."""
    body = line.strip()
    return (
        bool(body)
        and not body.endswith((".", "!", "?", ":"))
        and not body.startswith(("#", "|"))
        and _BLOCK_START.match(following) is None
    )


class _AuditPart(TypedDict):
    consensus: tuple[ConsensusPoint, ...]
    stances: tuple[StanceCell, ...]
    dissent: tuple[DissentSpan, ...]
    usage_by_round: tuple[RoundUsage, ...]
    usage_by_participant: tuple[ParticipantUsage, ...]
    conformity: tuple[ConformityFlag, ...]
    conformity_available: bool
    human_interventions: tuple[HumanIntervention, ...]
    failed_calls: tuple[FailedCall, ...]
    minority_report: tuple[MinorityEntry, ...]


def _from_audit(a: AuditReport) -> _AuditPart:
    """The fields of :class:`ReportModel` that the audit provides."""
    return {
        "consensus": tuple(
            ConsensusPoint(
                iteration=c.iteration, round=c.round, position=c.position,
                weighted_score=c.weighted_score, threshold=c.threshold,
                majority_agrees=c.majority_agrees, agree=c.agree, disagree=c.disagree,
                partial=c.partial, abstain=c.abstain, converged=c.converged,
            )
            for c in a.consensus
        ),
        "stances": tuple(
            StanceCell(
                participant=t.participant, round=v.round, iteration=v.iteration,
                stance=v.stance.value, score=v.score, position=v.position,
            )
            for t in a.trajectories
            for v in t.votes
        ),
        "dissent": tuple(_dissent(a)),
        "usage_by_round": tuple(
            RoundUsage(
                round=u.round, kind=u.kind.value, iteration=u.iteration, calls=u.calls,
                failed_calls=u.failed_calls, input_tokens=u.input_tokens,
                output_tokens=u.output_tokens, cost_usd=u.cost_usd,
            )
            for u in a.usage_by_round
        ),
        "usage_by_participant": tuple(
            ParticipantUsage(
                participant=u.participant, model=u.model, calls=u.calls,
                failed_calls=u.failed_calls, input_tokens=u.input_tokens,
                output_tokens=u.output_tokens, cost_usd=u.cost_usd,
            )
            for u in a.usage_by_participant
        ),
        "conformity": tuple(
            ConformityFlag(
                participant=s.participant, round=s.to_round, from_=s.before.value,
                to=s.after.value, reason="; ".join(s.reasons),
            )
            for s in a.conformity_flags
        ),
        "conformity_available": True,
        "human_interventions": tuple(
            HumanIntervention(
                kind=h.kind, author=h.author, position=h.position, iteration=h.iteration,
                text=h.text,
            )
            for h in a.human_interventions
        ),
        "failed_calls": tuple(
            FailedCall(
                round=f.round, participant=f.participant, attempt=f.attempt,
                position=f.position, error_type=f.error_type, message=f.message,
                will_retry=f.will_retry,
            )
            for f in a.failed_calls
        ),
        "minority_report": tuple(_minority(a)),
    }


def _dissent(a: AuditReport) -> list[DissentSpan]:
    out = []
    for d in a.dissent:
        closing = [h.round for h in d.history if h.status.closed]
        out.append(
            DissentSpan(
                id=d.id, topic=d.topic, who=d.who, strongest=d.strongest.value,
                status=d.status.value, opened_round=d.opened_round,
                closed_round=closing[-1] if closing and d.status.closed else None,
                history=tuple(
                    DissentChange(
                        status=h.status.value, round=h.round, position=h.position,
                        by=h.by, note=h.note,
                    )
                    for h in d.history
                ),
            )
        )
    return out


def _minority(a: AuditReport) -> list[MinorityEntry]:
    return [
        MinorityEntry(
            who=m.who, concern=m.concern, since_iteration=m.since_iteration,
            since_round=m.since_round, since_position=m.since_position, source=m.source,
            divergence_id=m.divergence_id,
            strongest=m.strongest.value if m.strongest is not None else None,
        )
        for m in a.minority_report
    ]
