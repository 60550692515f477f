"""Domain layer: value types, event payloads, the session state fold and the aggregate.

Each name loads with its own module on first use: a reader of the value types does not build
the aggregate's event classes (see :mod:`forge_ledger._lazy`).
"""

from typing import TYPE_CHECKING

from .. import _lazy

if TYPE_CHECKING:
    from . import events, values
    from .aggregate import Deliberation
    from .hashing import GENESIS, canonical_json, chain_hash
    from .state import ContributionState, DivergenceState, RoundState, SessionState
    from .status import SessionStatus
    from .values import *  # noqa: F403

    # At run time ``_lazy`` gives ``__all__``: these names and those of ``values.__all__``.
    __all__ = [
        "GENESIS",
        "ContributionState",
        "Deliberation",
        "DivergenceState",
        "RoundState",
        "SessionState",
        "SessionStatus",
        "canonical_json",
        "chain_hash",
        "events",
    ]
    __all__ += values.__all__

__getattr__, __dir__ = _lazy.exports(__name__, {
    "events": ("events",),
    "aggregate": ("Deliberation",),
    "hashing": ("GENESIS", "canonical_json", "chain_hash"),
    "status": ("SessionStatus",),
    "state": ("ContributionState", "DivergenceState", "RoundState", "SessionState"),
}, rest="values")  # the value types: ``values.__all__`` names them, and nothing else does
