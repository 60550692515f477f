"""Projections: pure folds of the ledger's events into views, applied exactly once.

- :mod:`.runner` pulls the notification log and commits view rows with tracking positions;
- :mod:`.session_state`, :mod:`.dissent`, :mod:`.consensus`, :mod:`.read_model` are the folds;
- :mod:`.show_view` is what ``show`` prints, from a state or from the read model;
- :mod:`.migrations` holds the read-model schema; ``datasette.yaml`` its canned queries.
"""

from typing import TYPE_CHECKING

from forge_ledger import _lazy

if TYPE_CHECKING:
    from .base import EventLike, Op, Patch, Projection, Put
    from .consensus import ConsensusProjection, TrailRound, TrailVote, consensus_trail, trail_round
    from .current import current_session_view, current_summaries, store_head
    from .dissent import DissentEntry, DissentProjection, dissent_log
    from .read_model import ReadModelProjection
    from .runner import (
        DEFAULT_PROJECTIONS,
        EventSource,
        ProjectionRunner,
        ProjectionStatus,
        catch_up,
        default_projections,
        open_views,
        rebuild,
        status,
    )
    from .session_state import SessionStateProjection, apply_event, fold_events
    from .show_view import SessionView, session_ems, session_view

__getattr__, __dir__ = _lazy.exports(__name__, {
    "base": ("EventLike", "Op", "Patch", "Projection", "Put"),
    "consensus": (
        "ConsensusProjection",
        "TrailRound",
        "TrailVote",
        "consensus_trail",
        "trail_round",
    ),
    "dissent": ("DissentEntry", "DissentProjection", "dissent_log"),
    "current": ("current_session_view", "current_summaries", "store_head"),
    "read_model": ("ReadModelProjection",),
    "runner": (
        "DEFAULT_PROJECTIONS",
        "EventSource",
        "ProjectionRunner",
        "ProjectionStatus",
        "catch_up",
        "default_projections",
        "open_views",
        "rebuild",
        "status",
    ),
    "session_state": ("SessionStateProjection", "apply_event", "fold_events"),
    "show_view": ("SessionView", "session_ems", "session_view"),
})

__all__ = [
    "DEFAULT_PROJECTIONS",
    "ConsensusProjection",
    "DissentEntry",
    "DissentProjection",
    "EventLike",
    "EventSource",
    "Op",
    "Patch",
    "Projection",
    "ProjectionRunner",
    "ProjectionStatus",
    "Put",
    "ReadModelProjection",
    "SessionStateProjection",
    "SessionView",
    "TrailRound",
    "TrailVote",
    "apply_event",
    "catch_up",
    "consensus_trail",
    "current_session_view",
    "current_summaries",
    "default_projections",
    "dissent_log",
    "fold_events",
    "open_views",
    "rebuild",
    "session_ems",
    "session_view",
    "status",
    "store_head",
    "trail_round",
]
