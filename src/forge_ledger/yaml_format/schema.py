"""The YAML session format v1.2: its validated shape and the key order the exporter writes.

Validation happens on load (seed storage rule 4); the pydantic models name the bad field and
:mod:`.lines` adds the line it sits on. Unknown keys are refused so a typo is not silently
dropped; the legacy v4.2 mode-state keys (``random_state``, ``progressive_state``) are read
and not kept.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
)

from ..domain.events import ConvergenceEvaluated
from ..domain.values import MAX_PARTICIPANTS, FileStatus, Mode, Participant, Persona

__all__ = [
    "EXTENSION_KEY",
    "FORMAT_VERSION",
    "SLUG_RE",
    "Extension",
    "HistoryEntry",
    "Idea",
    "PanelRound",
    "PartyRound",
    "SessionBody",
    "SessionFile",
    "TechniqueEntry",
    "iso",
]

FORMAT_VERSION = "1.2"
EXTENSION_KEY = "forge_ledger"
"""The top-level key of the extension block, beside ``ledger:``."""
SLUG_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
"""kebab-case: what ``Topic.slug`` produces, so a slug survives import and export unchanged."""

PhaseName = Literal["divergent", "transition", "convergent"]


def iso(dt: datetime) -> str:
    """UTC ISO 8601 with a ``Z`` (milliseconds only when present): the one spelling we write."""
    t = dt.astimezone(UTC) if dt.tzinfo else dt.replace(tzinfo=UTC)
    body = t.strftime("%Y-%m-%dT%H:%M:%S")
    if t.microsecond:
        body += f".{t.microsecond // 1000:03d}"
    return body + "Z"


def _timestamp(value: Any) -> Any:
    """Accept a datetime (unquoted YAML timestamps) or an ISO 8601 string; normalise."""
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, str):
        try:
            return iso(datetime.fromisoformat(value.replace("Z", "+00:00")))
        except ValueError:
            raise ValueError(f"{value!r} is not an ISO 8601 timestamp") from None
    raise ValueError("expected an ISO 8601 timestamp")


Timestamp = Annotated[str, BeforeValidator(_timestamp)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class TechniqueEntry(_Model):
    iteration: int = Field(ge=0)
    technique_slug: Annotated[str, Field(min_length=1)]
    category: str = "unknown"
    suggested_reason: str = ""
    applied: bool = False
    source: Literal["auto", "manual", "random", "progressive"] = "auto"
    weak_axes: list[str] = Field(default_factory=list)


class Idea(_Model):
    id: int = Field(ge=1)
    content: str
    score: int = Field(ge=0, le=10)


class HistoryEntry(_Model):
    iteration: int = Field(ge=1)
    phase: PhaseName
    ems: int = Field(ge=0, le=100)
    ems_delta: int = Field(ge=-100, le=100, default=0)
    questions: list[str] = Field(default_factory=list)
    responses: list[str] = Field(default_factory=list)
    timestamp: Timestamp
    duration: int | None = Field(ge=0, default=None)


class PartyContribution(_Model):
    persona: str
    key_points: list[str] = Field(default_factory=list)
    references: list[str] = Field(default_factory=list)


class PartyRound(_Model):
    """One ``party_history`` entry, in the seed's key order."""

    round: int = Field(ge=0)
    topic: str = ""
    personas_selected: list[str] = Field(default_factory=list)
    contributions: list[PartyContribution] = Field(default_factory=list)
    synthesis: str = ""
    user_question: str = ""


class PanelContribution(_Model):
    expert: str
    framework: str = ""
    position: str = ""
    references: list[str] = Field(default_factory=list)


class PanelSynthesis(_Model):
    convergent: list[str] = Field(default_factory=list)
    tensions: list[str] = Field(default_factory=list)


class PanelRound(_Model):
    """One ``panel_history`` entry, in the seed's key order."""

    round: int = Field(ge=0)
    topic: str = ""
    phase: Literal["discussion", "debate", "socratic"]
    experts_selected: list[str] = Field(default_factory=list)
    contributions: list[PanelContribution] = Field(default_factory=list)
    synthesis: PanelSynthesis = Field(default_factory=PanelSynthesis)


_KEYS = {
    "history": ("iteration", "history has two entries for the same iteration"),
    "ideas": ("id", "two ideas have the same id"),
}
"""The key of each list that may not repeat one, and what a repeat is called."""


class SessionBody(_Model):
    id: Annotated[str, Field(min_length=1, max_length=200)]
    slug: str
    status: FileStatus
    phase: PhaseName
    mode: Mode = Mode.STANDARD
    ems: int = Field(ge=0, le=100)
    persona: Persona = Persona.ARCHITECTE
    iteration: int = Field(ge=0)
    techniques_used: list[str] = Field(default_factory=list)
    started_at: Timestamp | None = None
    duration_minutes: int | None = Field(ge=0, default=None)
    techniques_history: list[TechniqueEntry] = Field(default_factory=list)
    party_active: bool = False
    party_history: list[PartyRound] = Field(default_factory=list)
    panel_active: bool = False
    panel_history: list[PanelRound] = Field(default_factory=list)
    ideas: list[Idea] = Field(default_factory=list)
    history: list[HistoryEntry] = Field(default_factory=list)
    last_question: str | None = None
    created: Timestamp | None = None
    updated: Timestamp | None = None
    random_state: dict[str, Any] | None = None
    progressive_state: dict[str, Any] | None = None

    @field_validator("slug")
    @classmethod
    def _slug(cls, v: str) -> str:
        if len(v) > 80 or not SLUG_RE.match(v):
            raise ValueError(
                "slug must be kebab-case: lowercase letters and digits separated by single "
                "'-', at most 80 characters"
            )
        return v

    @field_validator("history", "ideas")
    @classmethod
    def _unique_keys(cls, v: list[Any], info: ValidationInfo) -> list[Any]:
        """History entries are keyed by iteration and ideas by id: a file may not repeat one."""
        key, problem = _KEYS[info.field_name or ""]
        keys = [getattr(item, key) for item in v]
        if len(set(keys)) != len(keys):
            raise ValueError(problem)
        return v


class Extension(_Model):
    """What a deliberation holds that the seed format has no field for: the participants as
    configured (never an ``api_base``: a file must not point a resumed session's calls at a
    server of its choosing), the forged document verbatim and the last convergence vote."""

    participants: list[Participant] = Field(default_factory=list, max_length=MAX_PARTICIPANTS)
    document: str | None = None
    vote: ConvergenceEvaluated | None = None

    @field_validator("participants")
    @classmethod
    def _participants(cls, v: list[Participant]) -> list[Participant]:
        names = [p.name for p in v]
        if len(set(names)) != len(names):
            raise ValueError("two participants have the same name")
        if any(p.api_base is not None for p in v):
            raise ValueError("api_base is not read from a file; configure it where you run")
        return v


class SessionFile(_Model):
    format_version: Literal["1.2"]
    session: SessionBody
    ledger: dict[str, Any] | None = None
    """Where the file came from (the ledger session, its seal): informational, carried on by
    an import so exporting the imported session gives the same file."""
    forge_ledger: Extension | None = None
    """The extension block (:data:`EXTENSION_KEY`)."""
