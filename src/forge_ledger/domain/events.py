"""The event catalogue: one pydantic payload per kind of fact a deliberation can record.

Payloads are what is stored (as JSON, readable with ``json_extract``) and hashed. Each has a
stable ``TYPE`` name that never changes when a class moves or is renamed; the ledger derives
the stored event topic from it (``forge_ledger:<TYPE>``). A payload gets a new
``SCHEMA_VERSION`` when its shape changes, with an upcaster in ``UPCASTERS`` that turns the
old stored dict into the new one, so old ledgers keep loading.
"""

# No postponed annotations here: pydantic then reads the models' annotations as objects
# rather than compiling each from a string, which makes importing them (every command) faster.

import hashlib
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from ..errors import StoreError
from .hashing import canonical_json
from .values import (
    NO_TOKENS,
    ChatMessage,
    ConvergenceVote,
    Critique,
    DivergentPosition,
    FileStatus,
    ModelResponse,
    Opinion,
    Participant,
    RoundKind,
    SessionConfig,
    Stance,
    TokenCount,
    Topic,
)

__all__ = [
    "EVENT_TYPES",
    "EXTERNAL_EVENT_TYPES",
    "FIRST_EVENT_TYPES",
    "TERMINAL_EVENT_TYPES",
    "UPCASTERS",
    "BudgetExhausted",
    "CallParams",
    "ContributionRecorded",
    "ConvergenceEvaluated",
    "CritiqueRecorded",
    "DivergenceAddressed",
    "DivergenceDetected",
    "DivergenceOverruled",
    "DivergenceResolved",
    "DivergenceWithdrawn",
    "FallbackChosen",
    "ForkOrigin",
    "HumanInputRecorded",
    "IdeaRecorded",
    "IterationRecorded",
    "OpinionRecorded",
    "ParseFailed",
    "ParticipantJoined",
    "ParticipantLeft",
    "ParticipantUpdated",
    "PauseFault",
    "Payload",
    "ProviderCallFailed",
    "QuestionsAsked",
    "ReviewLabelsAssigned",
    "RoundCompleted",
    "RoundStarted",
    "SessionAborted",
    "SessionCompleted",
    "SessionConverged",
    "SessionForked",
    "SessionImported",
    "SessionPaused",
    "SessionResumed",
    "SessionRewound",
    "SessionSealed",
    "SessionStarted",
    "SessionTimedOut",
    "TechniqueSuggested",
    "VoteRecorded",
    "is_external",
    "payload_class",
    "prompt_hash",
]


class Payload(BaseModel):
    """Base of event payloads: frozen, strict about unknown fields."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    TYPE: ClassVar[str]
    SCHEMA_VERSION: ClassVar[int] = 1

    @classmethod
    def carrying(cls, source: object, /, **given: Any) -> Self:
        """The payload of a fact ``source`` already holds field by field (an imported file's
        entry, a classified call failure): each field ``source`` has an attribute of that
        name for, and ``given`` for the rest; validated as any payload is."""
        shared = {
            name: getattr(source, name)
            for name in cls.model_fields
            if name not in given and hasattr(source, name)
        }
        return cls.model_validate({**shared, **given})


# --------------------------------------------------------------------------- session lifecycle


class SessionStarted(Payload):
    TYPE: ClassVar[str] = "SessionStarted"
    topic: Topic
    config: SessionConfig
    slug: str = Field(pattern=r"^[a-z0-9-]+$")
    source: Literal["run", "import", "demo"] = "run"


class ForkOrigin(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    parent_id: str
    parent_position: int = Field(ge=1)
    parent_hash: str
    parent_iteration: int = Field(ge=0)

    def continues_at(self, position: int) -> bool:
        """Whether a fork whose first event sits at ``position`` numbers its events on from its
        parent's (its first event at the fork point, as ``Deliberation.fork`` records it);
        a fork recorded before that began at 1."""
        return self.parent_position == position


class SessionForked(Payload):
    """First event of a fork: the parent reference and its state at the fork position.

    The state is a copy of the parent's projection at ``origin.parent_position`` so the fork is
    self-contained (it can be replayed and exported without the parent), while ``origin``
    (with the parent's event hash at that position) ties it to the shared history.
    """

    TYPE: ClassVar[str] = "SessionForked"
    origin: ForkOrigin
    state: dict[str, Any]
    config: SessionConfig
    participants: tuple[Participant, ...] = ()
    """Participants of the fork (may swap models); empty keeps the parent's."""


class ParticipantJoined(Payload):
    TYPE: ClassVar[str] = "ParticipantJoined"
    participant: Participant


class PauseFault(BaseModel):
    """Why a round could not go on: the provider fault that left it without an answer it needs.

    ``participant`` is the first (in participant order) of ``missing``, the participants whose
    answers the round still lacks; ``attempts`` counts that participant's failed attempts since
    the session last resumed, ``error_type``/``message`` are its last failure.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    round: int = Field(ge=1)
    kind: RoundKind
    participant: str
    model: str
    error_type: str
    message: str
    attempts: int = Field(ge=0)
    missing: tuple[str, ...] = ()

    @property
    def without_answer(self) -> str:
        """Every participant the round lacks an answer from, as a sentence names them
        (``bob``, ``bob and carol``, ``alice, bob and carol``)."""
        names = self.missing or (self.participant,)
        return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"

    @property
    def others_without_answer(self) -> str:
        """``without_answer`` followed by ``; `` when the round lacks several answers (a
        message then goes on about the first failure), else nothing: with one missing, the
        failure named next says it all."""
        return f"{self.without_answer}; " if len(self.missing) > 1 else ""


class SessionPaused(Payload):
    TYPE: ClassVar[str] = "SessionPaused"
    reason: str
    questions: tuple[str, ...] = ()
    fault: PauseFault | None = None
    """Set when a provider fault paused the session (``forge-ledger resume`` retries the round)."""

    @model_serializer(mode="wrap")
    def _omit_no_fault(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Pauses recorded before faults paused sessions carry no ``fault`` key: a pause for a
        # human must keep serialising (and hashing, and replaying) exactly as they did.
        data = handler(self)
        if isinstance(data, dict) and data.get("fault") is None:
            data.pop("fault", None)
        return data


class ParticipantUpdated(Payload):
    """A person changed a participant on the way (``resume``: ``-m NAME=MODEL``,
    ``--api-base``): later calls use ``participant``; what it said before stays as recorded."""

    TYPE: ClassVar[str] = "ParticipantUpdated"
    participant: Participant
    reason: str = ""


class ParticipantLeft(Payload):
    """A participant leaves a fork from its fork point (``fork --without NAME``): later rounds
    run without it; what it said before stays as recorded. ``reassigned`` holds the remaining
    participants whose role changed to take over one only it held (the engine's rule,
    :func:`forge_ledger.engine.steps.roles_after_leaving`), as they are from now on."""

    TYPE: ClassVar[str] = "ParticipantLeft"
    participant: str
    reassigned: tuple[Participant, ...] = ()
    reason: str = ""


class SessionResumed(Payload):
    TYPE: ClassVar[str] = "SessionResumed"
    reason: str = ""


class SessionRewound(Payload):
    """``back N``: the session continues from ``to_iteration``; later history is kept."""

    TYPE: ClassVar[str] = "SessionRewound"
    from_iteration: int = Field(ge=1)
    to_iteration: int = Field(ge=1)
    steps: int = Field(ge=1, le=5)


class QuestionsAsked(Payload):
    TYPE: ClassVar[str] = "QuestionsAsked"
    iteration: int = Field(ge=0)
    questions: tuple[str, ...]


class HumanInputRecorded(Payload):
    TYPE: ClassVar[str] = "HumanInputRecorded"
    author: str
    text: str
    kind: Literal["answer", "note", "overrule", "steer"] = "answer"
    iteration: int = Field(ge=0, default=0)
    questions: tuple[str, ...] = ()
    """The questions this input answers (copied from the pending questions)."""


class TechniqueSuggested(Payload):
    TYPE: ClassVar[str] = "TechniqueSuggested"
    iteration: int = Field(ge=0)
    technique_slug: str
    category: str
    suggested_reason: str
    weak_axes: tuple[str, ...] = ()
    source: Literal["auto", "manual", "random", "progressive"] = "auto"
    applied: bool = False


class BudgetExhausted(Payload):
    TYPE: ClassVar[str] = "BudgetExhausted"
    budget: Literal["cost", "time", "rounds"]
    limit: float
    spent: float
    detail: str = ""


class _Terminal(Payload):
    reason: str = ""


class SessionConverged(_Terminal):
    TYPE: ClassVar[str] = "SessionConverged"
    score: float = Field(ge=0, le=1, default=1.0)


class SessionCompleted(_Terminal):
    TYPE: ClassVar[str] = "SessionCompleted"


class SessionAborted(_Terminal):
    TYPE: ClassVar[str] = "SessionAborted"
    by: str = ""
    """The person who decided to abort (``forge-ledger abort``); empty when the session could
    not go on (an invariant that cannot be repaired)."""

    @model_serializer(mode="wrap")
    def _omit_no_author(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Aborts recorded before people could abort carry no ``by`` key: keep their bytes.
        data = handler(self)
        if isinstance(data, dict) and not data.get("by"):
            data.pop("by", None)
        return data


class SessionTimedOut(_Terminal):
    TYPE: ClassVar[str] = "SessionTimedOut"


class SessionSealed(Payload):
    """Closes a terminal session: the chain's root hash (and HMAC when a key is configured)."""

    TYPE: ClassVar[str] = "SessionSealed"
    root_hash: str
    events: int = Field(ge=1)
    hmac: str | None = None


# --------------------------------------------------------------------------- rounds & calls


class RoundStarted(Payload):
    TYPE: ClassVar[str] = "RoundStarted"
    number: int = Field(ge=1)
    kind: RoundKind
    iteration: int = Field(ge=1)
    participants: tuple[str, ...]
    """Who is expected to contribute, in participant (= recording) order."""
    targets: dict[str, str] = Field(default_factory=dict)
    """critique/response rounds: participant → whose work it answers."""
    depth: int = Field(ge=0, default=0)
    focus: str = ""
    technique: str | None = None


class FallbackChosen(Payload):
    """The author of a single-author round failed every attempt; ``participant`` takes the
    round over (``SessionConfig.fallback``). Chosen by the engine from recorded state, so a
    replay chooses the same."""

    TYPE: ClassVar[str] = "FallbackChosen"
    round: int = Field(ge=1)
    failed: str
    participant: str
    reason: str = ""


class RoundCompleted(Payload):
    TYPE: ClassVar[str] = "RoundCompleted"
    number: int = Field(ge=1)
    abstained: tuple[str, ...] = ()


class _ByParticipant(Payload):
    """An event about one participant's part in one round."""

    round: int = Field(ge=1)
    participant: str


class CallParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    temperature: float
    max_tokens: int
    response_format: str | None = None
    """Name of the pydantic schema asked for, when structured output was requested."""
    api_base: str | None = None


class ContributionRecorded(_ByParticipant):
    """One participant's completed call in one round: the exact prompt and the full answer."""

    TYPE: ClassVar[str] = "ContributionRecorded"
    SCHEMA_VERSION: ClassVar[int] = 2
    attempt: int = Field(ge=1, default=1)
    model: str
    messages: tuple[ChatMessage, ...]
    params: CallParams
    prompt_hash: str
    response: ModelResponse
    purpose: Literal["answer", "repair", "continuation"] = "answer"
    """``repair``: a second try at a structured answer that could not be read;
    ``continuation``: the rest of an answer cut off at its token limit (the participant's
    answer is then the text before it followed by this one)."""


class ProviderCallFailed(_ByParticipant):
    """A failed attempt. Messages are sanitised (no API keys); partial text is kept."""

    TYPE: ClassVar[str] = "ProviderCallFailed"
    attempt: int = Field(ge=1)
    model: str
    error_type: str
    message: str
    retryable: bool
    will_retry: bool
    retry_after_secs: float | None = None
    partial_text: str = ""
    tokens: TokenCount = NO_TOKENS
    cost_usd: float = Field(ge=0, default=0.0)
    duration_ms: int = Field(ge=0, default=0)
    prompt_hash: str = ""


class CritiqueRecorded(_ByParticipant):
    TYPE: ClassVar[str] = "CritiqueRecorded"
    critique: Critique


class OpinionRecorded(_ByParticipant):
    TYPE: ClassVar[str] = "OpinionRecorded"
    opinion: Opinion


class VoteRecorded(_ByParticipant):
    TYPE: ClassVar[str] = "VoteRecorded"
    vote: ConvergenceVote


class ParseFailed(_ByParticipant):
    """The answer could not be parsed even after the repair attempt: the participant abstains."""

    TYPE: ClassVar[str] = "ParseFailed"
    expected: str
    error: str


class ConvergenceEvaluated(Payload):
    TYPE: ClassVar[str] = "ConvergenceEvaluated"
    round: int = Field(ge=1)
    iteration: int = Field(ge=1)
    score: float = Field(ge=0, le=1)
    converged: bool
    majority_agrees: bool
    agree: int = Field(ge=0)
    disagree: int = Field(ge=0)
    partial: int = Field(ge=0)
    abstain: int = Field(ge=0, default=0)
    threshold: float = Field(ge=0, le=1)
    blocking: tuple[str, ...] = ()
    remaining_issues: tuple[str, ...] = ()
    weights: dict[str, float] = Field(default_factory=dict)


# --------------------------------------------------------------------------- divergences


class DivergenceDetected(Payload):
    TYPE: ClassVar[str] = "DivergenceDetected"
    divergence_id: str
    round: int = Field(ge=1)
    topic: str
    positions: tuple[DivergentPosition, ...]
    strongest: Stance = Stance.DISAGREE


class _DivergenceChange(Payload):
    divergence_id: str
    round: int = Field(ge=0, default=0)
    note: str = ""
    by: str = ""


class DivergenceAddressed(_DivergenceChange):
    TYPE: ClassVar[str] = "DivergenceAddressed"


class DivergenceResolved(_DivergenceChange):
    TYPE: ClassVar[str] = "DivergenceResolved"


class DivergenceWithdrawn(_DivergenceChange):
    TYPE: ClassVar[str] = "DivergenceWithdrawn"


class DivergenceOverruled(_DivergenceChange):
    """A human overruled a dissent; ``by`` is the human author."""

    TYPE: ClassVar[str] = "DivergenceOverruled"


# --------------------------------------------------------------------------- YAML import


class IdeaRecorded(Payload):
    """An idea kept with a 0-10 score (YAML ``ideas``); ``idea_id`` is its stable number."""

    TYPE: ClassVar[str] = "IdeaRecorded"
    idea_id: int = Field(ge=1)
    content: str
    score: int = Field(ge=0, le=10)


class IterationRecorded(Payload):
    """One iteration of an imported YAML ``history`` (no rounds exist for it in the ledger)."""

    TYPE: ClassVar[str] = "IterationRecorded"
    iteration: int = Field(ge=1)
    phase: Literal["divergent", "transition", "convergent"]
    ems: int = Field(ge=0, le=100)
    ems_delta: int = Field(ge=-100, le=100)
    timestamp: str
    duration: int | None = Field(ge=0, default=None)


class SessionImported(Payload):
    """Closes the import of a YAML session file: the fields that no other event carries.

    Recorded after the iterations, questions, answers, techniques and ideas it came with, so
    an export of the session reproduces the file. ``status`` (YAML vocabulary) sets the
    session status directly (``values.status_from_file``).

    ``document``, ``vote`` and ``ledger`` come from the file's extension and ``ledger:`` blocks
    (absent from files written elsewhere): the forged text, the last convergence vote and the
    origin of the file, so ``spec`` and ``show`` read an imported session as its export said.
    """

    TYPE: ClassVar[str] = "SessionImported"
    format_version: str
    """The version of the file as read (``1.0`` files are migrated on import)."""
    yaml_id: str
    status: FileStatus
    phase: Literal["divergent", "transition", "convergent"]
    ems: int = Field(ge=0, le=100)
    iteration: int = Field(ge=0)
    techniques_used: tuple[str, ...] = ()
    started_at: str | None = None
    duration_minutes: int | None = Field(ge=0, default=None)
    party_active: bool = False
    party_history: tuple[dict[str, Any], ...] = ()
    panel_active: bool = False
    panel_history: tuple[dict[str, Any], ...] = ()
    last_question: str | None = None
    created: str | None = None
    updated: str | None = None
    document: str | None = None
    vote: ConvergenceEvaluated | None = None
    ledger: dict[str, Any] | None = None


class ReviewLabelsAssigned(Payload):
    """Anonymized review: the label ("Response A", …) that stands for each participant's work
    in critique and convergence prompts. Recorded so replay rebuilds the same prompts and the
    audit can name the authors behind the labels."""

    TYPE: ClassVar[str] = "ReviewLabelsAssigned"
    labels: dict[str, str]
    """label → participant name."""


# --------------------------------------------------------------------------- registry

_ALL: tuple[type[Payload], ...] = (
    SessionStarted,
    SessionForked,
    ParticipantJoined,
    ParticipantUpdated,
    ParticipantLeft,
    SessionPaused,
    SessionResumed,
    SessionRewound,
    QuestionsAsked,
    HumanInputRecorded,
    TechniqueSuggested,
    BudgetExhausted,
    SessionConverged,
    SessionCompleted,
    SessionAborted,
    SessionTimedOut,
    SessionSealed,
    RoundStarted,
    FallbackChosen,
    RoundCompleted,
    ContributionRecorded,
    ProviderCallFailed,
    CritiqueRecorded,
    OpinionRecorded,
    VoteRecorded,
    ParseFailed,
    ConvergenceEvaluated,
    DivergenceDetected,
    DivergenceAddressed,
    DivergenceResolved,
    DivergenceWithdrawn,
    DivergenceOverruled,
    IdeaRecorded,
    IterationRecorded,
    SessionImported,
    ReviewLabelsAssigned,
)

EVENT_TYPES: dict[str, type[Payload]] = {cls.TYPE: cls for cls in _ALL}

TERMINAL_EVENT_TYPES = frozenset(
    {"SessionConverged", "SessionCompleted", "SessionAborted", "SessionTimedOut"}
)

FIRST_EVENT_TYPES = ("SessionStarted", "SessionForked")
"""The events that begin a session: no state comes before them (a fork's first one stands at
its fork point, the positions before it being its parent's)."""

EXTERNAL_EVENT_TYPES = frozenset(
    {
        "SessionStarted",
        "SessionForked",
        "ParticipantJoined",
        "ParticipantUpdated",
        "ParticipantLeft",
        "HumanInputRecorded",
        "DivergenceOverruled",
        "SessionResumed",
        "SessionRewound",
        "SessionSealed",
        "IdeaRecorded",
        "IterationRecorded",
        "SessionImported",
    }
)
"""Facts that come from outside the orchestrator: a person or another command records them, so
a replay applies them from the record (and a ``SessionAborted`` that names the person who
aborted, see :func:`is_external`)."""


def is_external(type_name: str, data: Mapping[str, Any]) -> bool:
    """Whether an event of this type and payload comes from outside the orchestrator."""
    if type_name == "SessionAborted":
        return bool(data.get("by"))
    return type_name in EXTERNAL_EVENT_TYPES


Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


def prompt_hash(messages: Any) -> str:
    """SHA-256 of the exact prompt (a list of ``{role, content}``): replay's lookup key."""
    plain = [m if isinstance(m, dict) else m.model_dump(mode="json") for m in messages]
    return hashlib.sha256(canonical_json(plain).encode("utf-8")).hexdigest()


def _contribution_v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """v1 stored the prompt as ``system`` + ``prompt`` strings; v2 stores chat ``messages``."""
    data = dict(data)
    system = data.pop("system", "")
    prompt = data.pop("prompt")
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": prompt})
    data["messages"] = messages
    data.setdefault("prompt_hash", prompt_hash(messages))
    return data


UPCASTERS: dict[tuple[str, int], Upcaster] = {
    ("ContributionRecorded", 1): _contribution_v1_to_v2,
}
"""(type, from_version) → function turning a stored v``from`` payload into v``from+1``."""


def payload_class(type_name: str) -> type[Payload]:
    try:
        return EVENT_TYPES[type_name]
    except KeyError:
        raise StoreError(
            f"unknown event type {type_name!r} in the ledger",
            hint="upgrade forge-ledger to a version that knows it",
        ) from None
