"""What the HTML report shows, and nothing else: the page's own view model.

The page is a rendering of the audit and of the document's lineage. Keeping its input in one
small model (filled by :func:`forge_ledger.report.gather`) means the charts, the template and
the CLI depend on these fields only, not on how the audit or the lineage compute them. A part
whose data the ledger's analyses do not provide is ``None`` (or an empty list with its
``*_available`` flag false), and the page says "not available": the report never invents a
figure.

Field names follow the audit's JSON (``conformity``, ``influence``, ``deliberation_effect``,
``self_preference``, ``anonymized``/``labels``) and the document's provenance
(``origin {participant, round, kind, iteration, position}``, ``revisions``, ``answers``,
``dropped``). Every string here may come from a model or a person: templates escape it.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ConformityFlag",
    "ConsensusPoint",
    "ContributionRef",
    "DeliberationEffect",
    "DissentChange",
    "DissentSpan",
    "Document",
    "FailedCall",
    "HumanIntervention",
    "InfluenceEdge",
    "Integrity",
    "MinorityEntry",
    "ParticipantInfo",
    "ParticipantUsage",
    "ReportModel",
    "RoundUsage",
    "SelfPreference",
    "Sentence",
    "StanceCell",
]

STANCES = ("strongly_agree", "agree", "partial", "disagree", "strongly_disagree")
"""The five stances, from most to least favourable (the heatmap's colour order)."""


class _View(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


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


class ConsensusPoint(_View):
    """One convergence evaluation: the weighted score beside the plain majority."""

    iteration: int
    round: int
    position: int
    weighted_score: float
    threshold: float
    majority_agrees: bool
    agree: int
    disagree: int
    partial: int
    abstain: int
    converged: bool

    @property
    def voters(self) -> int:
        """Participants whose vote counted (abstentions do not, as in the engine's majority)."""
        return self.agree + self.disagree + self.partial

    @property
    def agree_share(self) -> float:
        """Share of the voters that agree: the plain majority agrees when it exceeds 1/2."""
        return self.agree / self.voters if self.voters else 0.0


class StanceCell(_View):
    """One participant's stance in one convergence round."""

    participant: str
    round: int
    iteration: int
    stance: str
    score: int
    position: int


class DissentChange(_View):
    status: str
    round: int
    position: int
    by: str = ""
    note: str = ""


class DissentSpan(_View):
    """A divergence's lifecycle: opened in one round, then addressed, resolved, overruled…"""

    id: str
    topic: str
    who: tuple[str, ...]
    strongest: str
    status: str
    opened_round: int
    closed_round: int | None
    history: tuple[DissentChange, ...]


class RoundUsage(_View):
    round: int
    kind: str
    iteration: int
    calls: int
    failed_calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float


class ParticipantUsage(_View):
    participant: str
    model: str
    calls: int
    failed_calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float


class InfluenceEdge(_View):
    """Who moved whom: a contribution of ``from_`` that argued toward ``to``'s new stance."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    from_: str = Field(alias="from")
    to: str
    round: int
    topic: str
    quote: str = ""
    position: int | None = None


class ConformityFlag(_View):
    """A stance change toward the majority with no new argument (the audit's conformity rule)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    participant: str
    round: int
    from_: str = Field(alias="from")
    to: str
    reason: str


class SelfPreference(_View):
    """A participant's mean score for its own text against its mean for others' texts."""

    participant: str
    own_mean: float | None
    others_mean: float | None


class DeliberationEffect(_View):
    """Did deliberation help: the first vote's majority beside the outcome, and what moved."""

    first_majority_agrees: bool | None
    final_outcome: str
    score_and_majority_disagreed: bool
    document_similarity: tuple[tuple[int, float], ...] = ()
    """(iteration, similarity ratio of the document to the previous iteration's)."""
    conformity_rate: float | None = None
    dissent_resolved: int = 0
    dissent_overruled: int = 0
    dissent_open: int = 0


class ContributionRef(_View):
    """A recorded contribution, named the way the ledger names it."""

    participant: str
    round: int
    kind: str
    iteration: int
    position: int


class Sentence(_View):
    """A piece of the document; consecutive sentences concatenate to the text exactly."""

    text: str
    origin: ContributionRef | None = None
    """The contribution that first introduced it; None when no lineage is recorded."""
    revisions: tuple[ContributionRef, ...] = ()
    answers: tuple[str, ...] = ()
    """Critique suggestions or dissents its latest change answered."""


class Document(_View):
    """The forged document as of the report's position, with what is known of its lineage."""

    source: ContributionRef
    """The contribution whose text is the document (``SessionState.document_source``)."""
    text: str
    sentences: tuple[Sentence, ...]
    dropped: tuple[Sentence, ...] = ()
    lineage_available: bool = False


class HumanIntervention(_View):
    kind: str
    author: str
    position: int
    iteration: int | None
    text: str


class FailedCall(_View):
    round: int
    participant: str
    attempt: int
    position: int
    error_type: str
    message: str
    will_retry: bool


class MinorityEntry(_View):
    who: tuple[str, ...]
    concern: str
    since_iteration: int | None
    since_round: int
    since_position: int
    source: str
    divergence_id: str | None = None
    strongest: str | None = None


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
    cost_usd: float
    input_tokens: int
    output_tokens: int
    position: int
    """The last event the report covers."""
    head_hash: str
    """The hash of that event."""
    total_events: int
    at_iteration: int | None = None
    integrity: Integrity
    consensus: tuple[ConsensusPoint, ...] = ()
    stances: tuple[StanceCell, ...] = ()
    dissent: tuple[DissentSpan, ...] = ()
    usage_by_round: tuple[RoundUsage, ...] = ()
    usage_by_participant: tuple[ParticipantUsage, ...] = ()
    influence: tuple[InfluenceEdge, ...] = ()
    influence_available: bool = False
    conformity: tuple[ConformityFlag, ...] = ()
    conformity_available: bool = False
    self_preference: tuple[SelfPreference, ...] | None = None
    deliberation_effect: DeliberationEffect | None = None
    anonymized: bool | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    document: Document | None = None
    human_interventions: tuple[HumanIntervention, ...] = ()
    failed_calls: tuple[FailedCall, ...] = ()
    minority_report: tuple[MinorityEntry, ...] = ()
