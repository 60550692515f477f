"""The one adapter from the ledger's analyses to the page's model.

The page shows the audit (:func:`forge_ledger.audit.audit_report`) and the document's lineage
(:func:`forge_ledger.projections.document.fold_lineage`) as they are; this module only reads
them for the chosen position and adds the chain and seal check, and the stance each
divergence's positions were recorded with (who holds it). Nothing here analyses the session:
every figure, every sentence boundary and every origin comes from those two, so the page,
``audit --json`` and ``spec --provenance`` never disagree.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from ..audit import audit_report
from ..errors import SessionDamagedError
from ..ledger import Ledger, verify_session
from ..projections.document import fold_lineage
from ._model import Integrity, ParticipantInfo, ReportModel

__all__ = ["gather"]


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
    HMAC too); the rest is as of the chosen position. A damaged session (its events cannot
    be read past a position) is shown as of its last intact event, its damage in the page's
    integrity check: the report is what is left to read of it.
    """
    sid = ledger.resolve(session_id) if isinstance(session_id, str) else session_id
    try:
        state = ledger.state(sid, at_iteration=at_iteration)
    except SessionDamagedError as e:
        if at_iteration is not None or e.position <= 1:
            raise
        state = ledger.state(sid, at_event=e.position - 1)
    _, events = ledger.recorded_upto(sid, state.version)  # a fork's past is its parent's
    audit = audit_report(events)
    lineage = fold_lineage(state)
    return ReportModel(
        session_id=str(sid),
        slug=state.slug,
        title=state.topic.title,
        description=state.topic.description,
        status=audit.status,
        status_reason=audit.status_reason,
        participants=tuple(
            ParticipantInfo(name=p.name, model=p.model, role=p.role.value)
            for p in state.participants
        ),
        iterations=audit.iterations,
        rounds=len(state.rounds),
        cost_usd=audit.total.cost_usd,
        cost_text=audit.total.cost_text,
        input_tokens=audit.total.input_tokens,
        output_tokens=audit.total.output_tokens,
        position=audit.events,
        head_hash=audit.head_hash,
        total_events=ledger.head_version(sid),
        at_iteration=at_iteration,
        integrity=_integrity(ledger, sid, key, checked_at),
        audit=audit,
        document=lineage if lineage.source is not None else None,
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
