"""Domain layer: value types, event payloads, the session state fold and the aggregate.

Each name loads with its own module on first use: a reader of the value types does not build
the aggregate's event classes (see :mod:`forge_ledger._lazy`).
"""

from typing import TYPE_CHECKING

from .. import _lazy

if TYPE_CHECKING:
    from . import events
    from .aggregate import Deliberation
    from .hashing import GENESIS, canonical_json, chain_hash
    from .state import ContributionState, DivergenceState, RoundState, SessionState
    from .status import SessionStatus
    from .values import *  # noqa: F403

_VALUES = (
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
    "Stance",
    "StopReason",
    "Suggestion",
    "SuggestionCategory",
    "TokenCount",
    "Topic",
    "Value",
    "file_status",
    "status_from_file",
)
"""The names of :mod:`.values` (listed here, not read from it: importing the package must not
build the value types, which a reader of the store's rows alone never needs)."""

__getattr__, __dir__ = _lazy.exports(__name__, {
    "events": ("events",),
    "aggregate": ("Deliberation",),
    "hashing": ("GENESIS", "canonical_json", "chain_hash"),
    "status": ("SessionStatus",),
    "state": ("ContributionState", "DivergenceState", "RoundState", "SessionState"),
    "values": _VALUES,
})

__all__ = [
    "GENESIS",
    "ContributionState",
    "Deliberation",
    "DivergenceState",
    "RoundState",
    "SessionState",
    "canonical_json",
    "chain_hash",
    "events",
    "SessionStatus",
    *_VALUES,
]
