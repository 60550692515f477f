"""Domain layer: value types, event payloads, the session state fold and the aggregate."""

from . import events
from .aggregate import Deliberation
from .hashing import GENESIS, canonical_json, chain_hash
from .state import ContributionState, DivergenceState, RoundState, SessionState
from .values import *  # noqa: F403
from .values import __all__ as _values_all

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
    *_values_all,
]
