"""forge-ledger: several LLMs forge a document through structured rounds, recorded as events.

Every round, contribution, vote and dissent is an immutable, hash-chained event in an
append-only ledger; session state, dissent log, consensus trail, read models and the YAML
export are projections rebuilt from those events. Importing this package never imports
litellm (model calls load it lazily, only when a model is actually called).
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

__version__ = "0.1.0"

from .clock import Clock, FixedStepClock, IdSource, SequentialIds, SystemClock, UuidIds
from .domain import (
    Deliberation,
    Participant,
    ParticipantRole,
    SessionConfig,
    SessionState,
    Topic,
)
from .errors import (
    ChainBrokenError,
    ConcurrencyConflictError,
    ForgeLedgerError,
    InvariantViolation,
    SessionNotFoundError,
    StoreError,
)
from .ledger import ChainReport, Ledger, RecordedEvent, verify_session, verify_store

__all__ = [
    "ChainBrokenError",
    "ChainReport",
    "Clock",
    "ConcurrencyConflictError",
    "Deliberation",
    "FixedStepClock",
    "ForgeLedgerError",
    "IdSource",
    "InvariantViolation",
    "Ledger",
    "Participant",
    "ParticipantRole",
    "RecordedEvent",
    "SequentialIds",
    "SessionConfig",
    "SessionNotFoundError",
    "SessionState",
    "StoreError",
    "SystemClock",
    "Topic",
    "UuidIds",
    "__version__",
    "verify_session",
    "verify_store",
]
