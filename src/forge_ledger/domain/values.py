"""Value types of a deliberation: topic, config, participants, model responses, parsed outputs.

All are pydantic models, frozen where they are values, so they can be embedded in event
payloads and survive a JSON round trip unchanged (``model_validate(model_dump(mode="json"))``
gives an equal object; a hypothesis test holds us to that).
"""

# No postponed annotations here: pydantic then reads the models' annotations as objects
# rather than compiling each from a string, which makes importing them (every command) faster.

import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from .status import SessionStatus

__all__ = [
    "MAX_CONSTRAINTS",
    "MAX_CONSTRAINT_CHARS",
    "MAX_DESCRIPTION_CHARS",
    "MAX_PARTICIPANTS",
    "MAX_TITLE_CHARS",
    "MAX_TOKENS_LIMIT",
    "MIN_DELIBERATING",
    "PARTICIPANT_NAME_RE",
    "ChatMessage",
    "ConvergenceVote",
    "Critique",
    "DivergenceStatus",
    "DivergentPosition",
    "FileStatus",
    "Mode",
    "ModelProvider",
    "ModelResponse",
    "Opinion",
    "OutputType",
    "Participant",
    "ParticipantRole",
    "Persona",
    "Price",
    "Reference",
    "ReferenceType",
    "ResponseAccounting",
    "RoundKind",
    "RoundStatus",
    "SessionConfig",
    "SessionStatus",
    "Stance",
    "StopReason",
    "Suggestion",
    "SuggestionCategory",
    "TokenCount",
    "Topic",
    "Value",
    "file_status",
    "status_from_file",
]


class Value(BaseModel):
    """Base of immutable value objects: frozen, unknown fields refused."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


# --------------------------------------------------------------------------- enums


FileStatus = Literal["in_progress", "completed", "abandoned"]
"""A session's status in the YAML session file's vocabulary (the seed's three words)."""

_FILE_STATUS: dict[SessionStatus, FileStatus] = {
    SessionStatus.COMPLETE: "completed",
    SessionStatus.CONVERGED: "completed",
    SessionStatus.ABORTED: "abandoned",
    SessionStatus.TIMED_OUT: "abandoned",
}
"""The one table between the two vocabularies: every other status is ``in_progress``. Read
backwards, a file's word becomes the first status that writes it (an agreed vote makes a
completed session converged)."""


def file_status(status: SessionStatus) -> FileStatus:
    """How the YAML session file names ``status``."""
    return _FILE_STATUS.get(status, "in_progress")


def status_from_file(name: FileStatus, *, agreed: bool = False) -> SessionStatus:
    """The session status a YAML file's ``status`` stands for; ``agreed`` (its vote converged)
    tells a converged session from one merely completed."""
    if agreed and name == "completed":
        return SessionStatus.CONVERGED
    return next((k for k, v in _FILE_STATUS.items() if v == name), SessionStatus.IN_PROGRESS)


class OutputType(StrEnum):
    SPECIFICATION = "specification"
    CODE = "code"
    DOCUMENTATION = "documentation"
    DESIGN = "design"
    FREEFORM = "freeform"


class ReferenceType(StrEnum):
    INLINE = "inline"
    FILE = "file"
    URL = "url"
    SPEC = "spec"


class ModelProvider(StrEnum):
    ANTHROPIC = "anthropic"
    OPENAI = "openai"
    GOOGLE = "google"
    LOCAL = "local"
    CUSTOM = "custom"

    @classmethod
    def from_model(cls, model: str) -> "ModelProvider":
        """Guess the provider from a litellm model name (``anthropic/claude…``, ``gpt-4o``…)."""
        prefix = model.split("/", 1)[0].lower() if "/" in model else ""
        name = model.lower()
        if prefix == "anthropic" or name.startswith("claude"):
            return cls.ANTHROPIC
        if prefix in {"gemini", "vertex_ai", "google"} or name.startswith("gemini"):
            return cls.GOOGLE
        if prefix in {"ollama", "ollama_chat", "lm_studio", "llamafile", "vllm"}:
            return cls.LOCAL
        if prefix in {"openai", ""} and (prefix or name.startswith(("gpt", "o1", "o3", "o4"))):
            return cls.OPENAI
        return cls.CUSTOM


class ParticipantRole(StrEnum):
    GENERALIST = "generalist"
    DRAFTER = "drafter"
    CRITIC = "critic"
    SYNTHESIZER = "synthesizer"
    DOMAIN_EXPERT = "domain_expert"
    CODE_REVIEWER = "code_reviewer"
    DEVILS_ADVOCATE = "devils_advocate"

    @property
    def system_prompt_modifier(self) -> str:
        return _ROLE_MODIFIERS[self]


_ROLE_MODIFIERS: dict[ParticipantRole, str] = {
    ParticipantRole.GENERALIST: "",
    ParticipantRole.DRAFTER: (
        "You are the primary drafter. Focus on creating comprehensive initial content."
    ),
    ParticipantRole.CRITIC: (
        "You are a critic. Be thorough in identifying weaknesses and suggesting improvements."
    ),
    ParticipantRole.SYNTHESIZER: (
        "You are the synthesizer. "
        "Your job is to merge different perspectives into a coherent whole."
    ),
    ParticipantRole.DOMAIN_EXPERT: (
        "You are a domain expert. Focus on technical accuracy and best practices."
    ),
    ParticipantRole.CODE_REVIEWER: (
        "You are a code reviewer. Focus on code quality, security, and maintainability."
    ),
    ParticipantRole.DEVILS_ADVOCATE: (
        "You are the devil's advocate. Challenge assumptions and find edge cases."
    ),
}


class Mode(StrEnum):
    STANDARD = "standard"
    PARTY = "party"
    PANEL = "panel"


class Persona(StrEnum):
    """The facilitator persona (YAML ``persona``); shapes the synthesizer's prompt."""

    ARCHITECTE = "architecte"
    SPARRING = "sparring"
    PRAGMATIQUE = "pragmatique"


class RoundKind(StrEnum):
    DRAFT = "draft"
    CRITIQUE = "critique"
    RESPONSE = "response"
    SYNTHESIS = "synthesis"
    REFINEMENT = "refinement"
    CONVERGENCE = "convergence"


class RoundStatus(StrEnum):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETE = "complete"
    SKIPPED = "skipped"


class StopReason(StrEnum):
    END_TURN = "end_turn"
    MAX_TOKENS = "max_tokens"
    STOP_SEQUENCE = "stop_sequence"
    TOOL_USE = "tool_use"
    CONTENT_FILTER = "content_filter"
    TRUNCATED = "truncated"
    """The stream ended without a finish reason or usage chunk: the text may be incomplete."""
    ERROR = "error"


class SuggestionCategory(StrEnum):
    CORRECTNESS = "correctness"
    CLARITY = "clarity"
    COMPLETENESS = "completeness"
    CODE_QUALITY = "code_quality"
    ARCHITECTURE = "architecture"
    PERFORMANCE = "performance"
    SECURITY = "security"
    OTHER = "other"


class Stance(StrEnum):
    STRONGLY_AGREE = "strongly_agree"
    AGREE = "agree"
    PARTIAL = "partial"
    DISAGREE = "disagree"
    STRONGLY_DISAGREE = "strongly_disagree"

    @property
    def agrees(self) -> bool:
        return self in (Stance.STRONGLY_AGREE, Stance.AGREE)

    @property
    def disagrees(self) -> bool:
        return self in (Stance.DISAGREE, Stance.STRONGLY_DISAGREE)

    @property
    def rank(self) -> int:
        """+2 (strongly agree) … -2 (strongly disagree): for ordering and flip detection."""
        return {"strongly_agree": 2, "agree": 1, "partial": 0, "disagree": -1}.get(self.value, -2)


class DivergenceStatus(StrEnum):
    OPEN = "open"
    ADDRESSED = "addressed"
    WITHDRAWN = "withdrawn"
    OVERRULED = "overruled"
    RESOLVED = "resolved"

    @property
    def closed(self) -> bool:
        return self is not DivergenceStatus.OPEN and self is not DivergenceStatus.ADDRESSED


# --------------------------------------------------------------------------- topic & config


class Reference(Value):
    name: str
    content: str
    ref_type: ReferenceType = ReferenceType.INLINE


MAX_TITLE_CHARS = 500
MAX_DESCRIPTION_CHARS = 20_000
MAX_CONSTRAINT_CHARS = 2_000
MAX_CONSTRAINTS = 100
MAX_PARTICIPANTS = 32
MAX_TOKENS_LIMIT = 1_000_000
MIN_DELIBERATING = 2
"""Fewest participants a fork may keep when some leave: one alone critiques and votes on its
own text only."""
"""Bounds on what a user types or a file gives: every prompt quotes the topic, so an
unbounded description or list would be paid for in every call of every round; they are far
above any real use and refused with a clear message."""


class Topic(Value):
    """What the session deliberates on. Builder methods return new topics (values are frozen)."""

    title: Annotated[str, Field(min_length=1, max_length=MAX_TITLE_CHARS)]
    description: Annotated[str, Field(max_length=MAX_DESCRIPTION_CHARS)] = ""
    constraints: Annotated[
        tuple[Annotated[str, Field(max_length=MAX_CONSTRAINT_CHARS)], ...],
        Field(max_length=MAX_CONSTRAINTS),
    ] = ()
    references: tuple[Reference, ...] = ()
    output_type: OutputType = OutputType.SPECIFICATION

    def with_constraint(self, constraint: str) -> "Topic":
        return self.model_copy(update={"constraints": (*self.constraints, constraint)})

    def with_reference(self, reference: Reference) -> "Topic":
        return self.model_copy(update={"references": (*self.references, reference)})

    def with_output_type(self, output_type: OutputType) -> "Topic":
        return self.model_copy(update={"output_type": output_type})

    @property
    def slug(self) -> str:
        """kebab-case of the title, ``[a-z0-9-]+`` only (safe to use as a file name)."""
        return slugify(self.title)


def slugify(text: str) -> str:
    """kebab-case ASCII slug; never empty, never contains a path separator."""
    import unicodedata

    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    slug = re.sub(r"[^a-z0-9]+", "-", folded.lower()).strip("-")
    return slug[:80].strip("-") or "session"


_LATER_OPTIONS = ("anonymize", "fallback")
"""Options added after sessions were first recorded; left out of the data while unset."""


class SessionConfig(Value):
    """Budgets and rules of one session; defaults are the seed's."""

    max_rounds: Annotated[int, Field(ge=1, le=10_000)] = 10
    max_time_secs: Annotated[int, Field(ge=1)] = 3600
    max_cost_usd: Annotated[float, Field(ge=0)] = 10.0
    convergence_threshold: Annotated[float, Field(ge=0, le=1)] = 0.85
    attended: bool = False
    min_consensus: Annotated[int, Field(ge=1)] = 2
    recursive_refinement: bool = True
    max_recursive_depth: Annotated[int, Field(ge=0, le=100)] = 3
    mode: Mode = Mode.STANDARD
    persona: Persona = Persona.ARCHITECTE
    max_concurrency: Annotated[int, Field(ge=1, le=64)] = 8
    max_tokens: Annotated[int, Field(ge=1, le=MAX_TOKENS_LIMIT)] = 2048
    call_timeout_secs: Annotated[float, Field(gt=0)] = 120.0
    max_attempts: Annotated[int, Field(ge=1, le=10)] = 3
    role_weights: dict[str, float] = Field(default_factory=dict)
    """Overrides of the engine's default convergence weight per role (role value → weight)."""
    anonymize: bool = False
    """Anonymized review: critique and convergence prompts label others' work "Response A",
    "Response B"… instead of naming participants or models."""
    fallback: bool = False
    """When the author of a draft or synthesis fails every attempt, hand the round to another
    participant able to take the role (recorded as ``FallbackChosen``) instead of pausing."""

    @model_serializer(mode="wrap")
    def _omit_unset_options(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Sessions recorded before these options existed carry no such keys: a config that
        # leaves them off must keep serialising (and hashing) exactly as theirs did.
        data = handler(self)
        if isinstance(data, dict):
            for key in _LATER_OPTIONS:
                if not data.get(key):
                    data.pop(key, None)
        return data


class TokenCount(Value):
    input: Annotated[int, Field(ge=0)] = 0
    output: Annotated[int, Field(ge=0)] = 0

    @property
    def total(self) -> int:
        return self.input + self.output

    def __add__(self, other: "TokenCount") -> "TokenCount":
        return TokenCount(input=self.input + other.input, output=self.output + other.output)


NO_TOKENS = TokenCount.model_construct()
"""``TokenCount()``, the default of every token count, made without validation: a default
built at import would build the model's schema whenever this package loads."""


# --------------------------------------------------------------------------- participants

PARTICIPANT_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.\-]{0,63}$")


class Price(Value):
    """USD per token, as used for one call (recorded so replays report the same cost)."""

    input_cost_per_token: Annotated[float, Field(ge=0)]
    output_cost_per_token: Annotated[float, Field(ge=0)]
    source: Literal["user", "litellm", "unknown"] = "user"

    def cost(self, tokens: TokenCount) -> float:
        return tokens.input * self.input_cost_per_token + tokens.output * self.output_cost_per_token


class Participant(Value):
    """One model in the deliberation. ``name`` is its key in the session (unique, stable)."""

    name: str
    model: Annotated[str, Field(min_length=1)]
    """The model id as litellm names it, e.g. ``anthropic/claude-3-5-sonnet-20241022``."""
    provider: ModelProvider = ModelProvider.CUSTOM
    role: ParticipantRole = ParticipantRole.GENERALIST
    expertise: str | None = None
    framework: str | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] = 0.7
    max_tokens: Annotated[int, Field(ge=1, le=MAX_TOKENS_LIMIT)] | None = None
    api_base: str | None = None
    price: Price | None = None
    """User-given prices; otherwise litellm's table is used and recorded per call."""

    @field_validator("name")
    @classmethod
    def _valid_name(cls, v: str) -> str:
        if not PARTICIPANT_NAME_RE.match(v):
            raise ValueError(
                "participant name must be 1-64 characters: letters, digits, space, '_', '.', '-'"
            )
        return v

    @model_validator(mode="before")
    @classmethod
    def _default_provider(cls, data: Any) -> Any:
        if isinstance(data, dict) and "provider" not in data and "model" in data:
            data = {**data, "provider": ModelProvider.from_model(str(data["model"]))}
        return data


# --------------------------------------------------------------------------- model I/O


class ChatMessage(Value):
    role: Literal["system", "user", "assistant"]
    content: str


class _Content(Value):
    content: str


class ResponseAccounting(Value):
    """What a call cost and how it ended: a :class:`ModelResponse` without its text.

    The session state keeps this for every answer and the text by its address (see
    :mod:`forge_ledger.domain.texts`), so loading a state does not load every answer.
    """

    model: str
    """The model that answered, as the provider resolved it."""
    tokens: TokenCount = NO_TOKENS
    cost_usd: Annotated[float, Field(ge=0)] = 0.0
    price: Price | None = None
    duration_ms: Annotated[int, Field(ge=0)] = 0
    ttft_ms: Annotated[int, Field(ge=0)] | None = None
    stop_reason: StopReason = StopReason.END_TURN
    finish_reason: str | None = None
    """The provider's raw finish reason, kept for audits."""
    usage_reported: bool = True
    """False when the provider sent no usage chunk (tokens are then estimates or zero)."""

    @property
    def truncated(self) -> bool:
        return self.stop_reason in (StopReason.TRUNCATED, StopReason.MAX_TOKENS)

    @classmethod
    def of(cls, response: "ResponseAccounting") -> "ResponseAccounting":
        """The accounting of ``response`` alone (a :class:`ModelResponse` is one, with text)."""
        if type(response) is cls:
            return response
        # The fields set stay the response's, without the text. Validating values valid
        # already costs what building the object without validation does.
        given = response.__dict__
        return cls.model_validate(
            {name: given[name] for name in response.model_fields_set if name != "content"}
        )

    def with_content(self, content: str) -> "ModelResponse":
        """The whole response again, for the consumers that want one (see
        ``SessionState.response``)."""
        return ModelResponse.model_construct(
            self.model_fields_set | {"content"}, content=content, **dict(self)
        )


class ModelResponse(ResponseAccounting, _Content):
    """What one completed (or failed mid-stream) call returned, with its accounting.

    ``_Content`` comes last among the bases so ``content`` stays the first field: a
    response's JSON (in every event) keeps the key order it always had.
    """


# --------------------------------------------------------------------------- parsed outputs


class Suggestion(Value):
    text: str
    section: str | None = None
    priority: Annotated[int, Field(ge=1, le=5)] = 3
    category: SuggestionCategory = SuggestionCategory.OTHER


class Critique(Value):
    """A critic's structured review of another participant's draft."""

    target: str | None = None
    """The participant whose work is critiqued (never the critic itself)."""
    strengths: tuple[str, ...] = ()
    weaknesses: tuple[str, ...] = ()
    suggestions: tuple[Suggestion, ...] = ()
    score: Annotated[int, Field(ge=0, le=100)] = 50


class Opinion(Value):
    stance: Stance
    reasoning: str = ""
    concerns: tuple[str, ...] = ()
    strength: Annotated[float, Field(ge=0, le=1)] = 0.5
    topics: tuple[str, ...] = ()
    """Short labels of the points this opinion is about (used to group divergences)."""


class ConvergenceVote(Value):
    agrees: bool
    score: Annotated[int, Field(ge=0, le=100)] = 50
    concerns: tuple[str, ...] = ()
    stance: Stance | None = None
    reasoning: str = ""

    @property
    def effective_stance(self) -> Stance:
        if self.stance is not None:
            return self.stance
        return Stance.AGREE if self.agrees else Stance.DISAGREE


class DivergentPosition(Value):
    participant: str
    position: str
    stance: Stance
