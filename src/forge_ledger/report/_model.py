"""What the HTML report shows: the audit and the document's lineage, plus the chain check.

The page renders two analyses as they are, never a copy or a recomputation of them: the audit
(:class:`forge_ledger.audit.AuditReport`: consensus, stances, conformity, influence, the effect
of deliberation, self-preference, anonymized labels, dissent, usage, failures, human input, the
minority report) and the document's lineage
(:class:`forge_ledger.projections.document.DocumentLineage`: every sentence's origin,
revisions and answered suggestions or dissents, and the dropped sentences). What the report
adds is what only it knows: the session's header as of the chosen position and whether the
chain and seal verified when the page was made. Every string may come from a model or a
person: templates escape it.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict

from ..audit.model import AuditReport
from ..projections.document import DocumentLineage

__all__ = ["Integrity", "ParticipantInfo", "ReportModel"]


class _View(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class ParticipantInfo(_View):
    name: str
    model: str
    role: str


class Integrity(_View):
    """The hash chain and seal as checked when the report was made (over the whole session)."""

    chain_ok: bool
    events_checked: int
    problem: str = ""
    first_bad_position: int | None = None
    sealed: bool = False
    seal_ok: bool | None = None
    hmac_checked: bool = False
    """A key was given, so the seal's HMAC was compared."""
    hmac_ok: bool | None = None
    checked_at: datetime | None = None


class ReportModel(_View):
    """Everything the page shows about one session as of one position."""

    session_id: str
    slug: str
    title: str
    description: str = ""
    status: str
    status_reason: str = ""
    participants: tuple[ParticipantInfo, ...]
    iterations: int
    rounds: int
    cost_usd: float | None
    """None when some call had no known price (see ``cost_text``)."""
    cost_text: str
    input_tokens: int
    output_tokens: int
    position: int
    """The last event the report covers."""
    head_hash: str
    """The hash of that event."""
    total_events: int
    at_iteration: int | None = None
    integrity: Integrity
    audit: AuditReport
    """The audit as of ``position`` (``forge-ledger audit --json``, field for field)."""
    document: DocumentLineage | None = None
    """The document and its lineage as of ``position``; None before any text was recorded."""
    """Each divergence of ``audit.dissent`` and who holds it."""
