"""Runs deliberations: engine decisions, concurrent provider calls, ordered event recording."""

from .live import *  # noqa: F403
from .live import __all__ as _live_all
from .ports import (
    KeyedSeal,
    MonotonicWallTime,
    NoSeal,
    NoWallTime,
    SealPolicy,
    SessionStore,
    WallTime,
)
from .runner import Orchestrator

__all__ = [
    *_live_all,
    "KeyedSeal",
    "MonotonicWallTime",
    "NoSeal",
    "NoWallTime",
    "Orchestrator",
    "SealPolicy",
    "SessionStore",
    "WallTime",
]
