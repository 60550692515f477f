"""The audit report model: what ``forge-ledger audit --json`` prints, field for field.

Every renderer (text, Markdown, HTML) reads this model and nothing else, and
``report.model_dump(mode="json")`` is the JSON document, so programs and people see the same
facts. Fields named ``from`` in JSON are ``from_`` in Python (a keyword); the model serialises
by alias. Positions are ledger positions of the session's events (a fork's positions continue
its parent's: its inherited rounds keep the positions they have in the parent).
"""

# No postponed annotations here: pydantic then reads the models' annotations as objects
# rather than compiling each from a string, which makes importing them (every command) faster.

from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    computed_field,
    model_serializer,
)

from ..domain.events import ForkOrigin
from ..domain.state import CallFailure, DivergenceChange
from ..domain.values import DivergenceStatus, RoundKind, Stance
from ..engine.budget import cost_text, known_cost

__all__ = [
    "AuditReport",
    "ConformityFlag",
    "ConsensusPoint",
    "DeliberationEffect",
    "DissentRecord",
    "DissentTally",
    "DocumentChange",
    "FailedCall",
    "HumanIntervention",
    "InfluenceEdge",
    "MinorityEntry",
    "ParticipantUsage",
    "RoundUsage",
    "SelfPreference",
    "StancePoint",
    "StanceShift",
    "Trajectory",
    "Usage",
    "VoteSummary",
]


class _Model(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", serialize_by_alias=True, validate_by_name=True,
        validate_by_alias=True, defer_build=True,
    )


class ConsensusPoint(_Model):
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
    blocking: tuple[str, ...] = ()


class StancePoint(_Model):
    """One vote of one participant."""

    iteration: int
    round: int
    position: int
    stance: Stance
    agrees: bool
    score: int
    reasoning: str = ""
    concerns: tuple[str, ...] = ()
    contradiction: str | None = None
    """Why the score contradicts the stance (``engine.votes.score_contradiction``); left out
    of the JSON when it does not, so a vote reads as before unless there is something to say."""

    @model_serializer(mode="wrap")
    def _without_empty_contradiction(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict) and data.get("contradiction", "") is None:
            del data["contradiction"]
        return data


class Trajectory(_Model):
    """A participant's votes in order."""

    participant: str
    model: str
    role: str
    votes: tuple[StancePoint, ...]


class InfluenceEdge(_Model):
    """Who moved whom: a contribution that argued toward a participant's new stance.

    Found by the engine's documented matching rule (``forge_ledger.engine.conformity``);
    ``quote`` is taken verbatim from the contribution (or human input) at ``position``.
    """

    from_: str = Field(alias="from")
    """The author of the contribution (a participant, or the human's name)."""
    to: str
    """The participant whose stance changed."""
    round: int | None
    """The contribution's round (None for a human input)."""
    topic: str
    quote: str
    position: int
    kind: str
    """The round kind of the contribution, or ``human``."""
    match: str
    """``text`` (a sentence mentions the topic) or ``divergence`` (its round answered one)."""


class StanceShift(_Model):
    """A participant's stance change between two consecutive votes of its own."""

    participant: str
    iteration: int
    from_round: int
    to_round: int
    position: int
    before: Stance
    after: Stance
    majority_agreed: bool
    """The plain majority of the vote in ``from_round``."""
    toward_majority: bool
    influences: tuple[InfluenceEdge, ...]
    own_arguments: tuple[str, ...]
    conformity: bool
    reason: str


class ConformityFlag(_Model):
    """A stance that moved toward the previous vote's majority with no new argument."""

    participant: str
    round: int
    """The round of the vote that changed."""
    from_: Stance = Field(alias="from")
    to: Stance
    reason: str


class DissentRecord(_Model):
    """One divergence as the dissent log has it, with the iteration it opened in."""

    id: str
    topic: str
    status: str
    strong: bool
    strongest: Stance
    who: tuple[str, ...]
    positions: dict[str, str]
    opened_round: int
    opened_iteration: int | None
    opened_position: int
    addressed_position: int | None
    closed_position: int | None
    closed_by: str
    rounds_open: int
    history: tuple[DivergenceChange, ...]
    """The divergence's lifecycle steps, as the session state records them."""
    held_by: tuple[tuple[str, Stance], ...] = ()
    """Who holds the dissent: the positions whose stance disagrees (the engine's dissenters);
    the others in ``who`` hold the other side."""

    def addressed_by(self) -> str:
        """Who answered it and where, or a dash."""
        return "; ".join(
            f"{h.by or 'the engine'}, round {h.round}, event {h.position}"
            for h in self.history if h.status is DivergenceStatus.ADDRESSED) or "—"

    def ended(self) -> str:
        """How it ended: its closing step (who, when, why), or that it is still open."""
        closing = [h for h in self.history if DivergenceStatus(h.status).closed]
        if not closing:
            return "still open" + (" (addressed)" if self.status == "addressed" else "")
        h = closing[-1]
        by = f" by {h.by}" if h.by else ""
        note = f": {h.note}" if h.note else ""
        return f"{h.status.value}{by}, round {h.round}, event {h.position}{note}"

    def holders(self) -> str:
        """``held_by`` as a reader reads it (before there were stances: ``who``)."""
        if not self.held_by:
            return ", ".join(self.who)
        return ", ".join(f"{who} ({stance.value.replace('_', ' ')})"
                         for who, stance in self.held_by)


class HumanIntervention(_Model):
    kind: str
    """``input:<answer|note|steer|overrule>``, ``overrule`` (of a dissent) or ``rewind``."""
    author: str
    position: int
    iteration: int | None
    text: str


class Usage(_Model):
    calls: int = 0
    failed_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    priced_cost_usd: float = 0.0
    """What the calls made at a known price cost."""
    unpriced_calls: int = 0
    """Answers charged at no known price: the total cost is then unknown."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def cost_usd(self) -> float | None:
        """The total cost; None (JSON null) when some call had no known price."""
        return known_cost(self.priced_cost_usd, self.unpriced_calls)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def cost_complete(self) -> bool:
        return not self.unpriced_calls

    @property
    def cost_text(self) -> str:
        """The cost as every output shows it (``unpriced``, never ``$0.0000`` for unknown)."""
        return cost_text(self.priced_cost_usd, self.unpriced_calls)


class ParticipantUsage(Usage):
    participant: str
    model: str


class RoundUsage(Usage):
    round: int
    kind: RoundKind
    iteration: int


class FailedCall(CallFailure):
    """The session state's :class:`CallFailure`, with what only its event tells: the model
    called and the cost. The partial answer stays out of the report (it is in the ledger)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    partial_text: str = Field(default="", exclude=True)
    model: str | None = None
    cost_usd: float | None = None


class MinorityEntry(_Model):
    who: tuple[str, ...]
    concern: str
    since_iteration: int | None
    since_round: int
    since_position: int
    source: str
    """``dissent`` (an open divergence) or ``vote`` (a participant's last vote still disagrees)."""
    divergence_id: str | None = None
    strongest: Stance | None = None


class VoteSummary(_Model):
    """A convergence vote's plain majority beside its weighted outcome."""

    round: int
    iteration: int
    majority_agrees: bool
    agree: int
    disagree: int
    partial: int
    abstain: int
    weighted_score: float
    threshold: float
    converged: bool


class DocumentChange(_Model):
    """The forged document at the end of one iteration, compared with the previous iteration's.

    The document is ``SessionState.latest_text`` (the one rule, ``document_source``) as of the
    iteration's last event; ``similarity`` is the ``difflib.SequenceMatcher`` ratio over its
    words against the previous iteration's (``forge_ledger.audit.document_similarity``; 1.0 =
    unchanged), None for the first iteration and while there is no document at all (e.g. the
    iterations of an imported session, which carry no texts).
    """

    iteration: int
    round: int | None
    """The round whose contribution is the document (None: no document yet)."""
    author: str | None
    chars: int
    similarity: float | None


class DissentTally(_Model):
    """Divergences by how they ended: resolved by the participants, overruled by a human,
    withdrawn, or still open (open or addressed) when the record ends."""

    resolved: int = 0
    overruled: int = 0
    withdrawn: int = 0
    open: int = 0


class DeliberationEffect(_Model):
    """Did deliberation help? The first vote beside the outcome, and what moved in between."""

    first_vote: VoteSummary | None
    final_vote: VoteSummary | None
    outcome: str
    """The session's status when the record ends (converged, complete, …)."""
    first_majority_is_final: bool | None
    """The first vote's plain majority is the final vote's (None without two votes)."""
    score_majority_disagreed: bool
    """In some evaluated vote, "score ≥ threshold" and "the plain majority agrees" differed."""
    disagreement_rounds: tuple[int, ...]
    document_change: tuple[DocumentChange, ...]
    stance_changes: int
    conformity_flags: int
    conformity_rate: float | None
    """Conformity flags over stance changes (None when nobody changed)."""
    dissents: DissentTally


class SelfPreference(_Model):
    """How a participant judged its own text against others' texts.

    Judgements are critique scores (of the draft a critic was assigned) and convergence votes
    (on the synthesis the round votes on, whose author is known even when reviews are
    anonymized). Means are None when there is no such judgement.
    """

    participant: str
    own_judgements: int
    own_mean_score: float | None
    own_agree_rate: float | None
    others_judgements: int
    others_mean_score: float | None
    others_agree_rate: float | None
    score_gap: float | None
    """own_mean_score − others_mean_score."""


class AuditReport(_Model):
    """How consensus formed in one session (see ``forge_ledger.audit``)."""

    session_id: str
    title: str
    status: str
    status_reason: str
    events: int
    head_hash: str
    iterations: int
    fork_origin: ForkOrigin | None
    inherited_rounds: int
    sealed: bool
    document_truncated: bool = False
    """The document was cut off at its token limit (``SessionState.document_truncated``)."""
    anonymized: bool
    labels: dict[str, str]
    """Review label → participant (empty unless anonymized)."""
    consensus: tuple[ConsensusPoint, ...]
    trajectories: tuple[Trajectory, ...]
    stance_shifts: tuple[StanceShift, ...]
    conformity: tuple[ConformityFlag, ...]
    influence: tuple[InfluenceEdge, ...]
    deliberation_effect: DeliberationEffect
    self_preference: tuple[SelfPreference, ...]
    dissent: tuple[DissentRecord, ...]
    human_interventions: tuple[HumanIntervention, ...]
    usage_by_participant: tuple[ParticipantUsage, ...]
    usage_by_round: tuple[RoundUsage, ...]
    total: Usage
    failed_calls: tuple[FailedCall, ...]
    minority_report: tuple[MinorityEntry, ...]
