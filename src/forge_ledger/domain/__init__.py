"""Domain layer: value types, event payloads, the session state fold and the aggregate.

Each name loads with its own module on first use: a reader of the value types does not build
the aggregate's event classes (see :mod:`forge_ledger._lazy`).
"""

from typing import TYPE_CHECKING

from .. import _lazy
from .values import __all__ as _values_all

if TYPE_CHECKING:
    from . import events
    from .aggregate import Deliberation
    from .hashing import GENESIS, canonical_json, chain_hash
    from .state import ContributionState, DivergenceState, RoundState, SessionState
    from .values import *  # noqa: F403

__getattr__, __dir__ = _lazy.exports(__name__, {
    "events": ("events",),
    "aggregate": ("Deliberation",),
    "hashing": ("GENESIS", "canonical_json", "chain_hash"),
    "state": ("ContributionState", "DivergenceState", "RoundState", "SessionState"),
    "values": _values_all,
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
    *_values_all,
]
