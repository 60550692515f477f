"""forge-ledger: several LLMs forge a document through structured rounds, recorded as events.

Every round, contribution, vote and dissent is an immutable, hash-chained event in an
append-only ledger; session state, dissent log, consensus trail, read models and the YAML
export are projections rebuilt from those events. Importing this package never imports
litellm (model calls load it lazily, only when a model is actually called).
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

__version__ = "0.1.0"

if TYPE_CHECKING:
    from . import app, study
    from .app import Forge, open, resume_session, start_session
    from .audit import audit_report, compare_fork
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
    from .ledger import (
        ChainReport,
        FoundStore,
        Ledger,
        RecordedEvent,
        find_store,
        verify_session,
        verify_store,
    )
    from .orchestrator import Orchestrator
    from .providers import get_provider
    from .records.lineage import fork
    from .records.replay import replay_session
    from .records.sealing import seal_session

_LAZY = {
    "ChainBrokenError": "errors",
    "ChainReport": "ledger",
    "Clock": "clock",
    "ConcurrencyConflictError": "errors",
    "Deliberation": "domain",
    "FixedStepClock": "clock",
    "Forge": "app",
    "ForgeLedgerError": "errors",
    "FoundStore": "ledger",
    "IdSource": "clock",
    "InvariantViolation": "errors",
    "Ledger": "ledger",
    "Orchestrator": "orchestrator",
    "Participant": "domain",
    "ParticipantRole": "domain",
    "RecordedEvent": "ledger",
    "SequentialIds": "clock",
    "SessionConfig": "domain",
    "SessionNotFoundError": "errors",
    "SessionState": "domain",
    "StoreError": "errors",
    "SystemClock": "clock",
    "Topic": "domain",
    "UuidIds": "clock",
    "audit_report": "audit",
    "compare_fork": "audit",
    "find_store": "ledger",
    "fork": "records.lineage",
    "get_provider": "providers",
    "open": "app",
    "replay_session": "records.replay",
    "resume_session": "app",
    "seal_session": "records.sealing",
    "start_session": "app",
    "verify_session": "ledger",
    "verify_store": "ledger",
}
"""Where each public name lives. Nothing is imported with the package itself: the console
script imports it before it can catch a Ctrl-C, and every name loads on first use."""


_LAZY_MODULES = frozenset({"app", "study"})
"""Submodules offered as attributes: ``forge_ledger.app`` holds every operation on a session
(start, resume, answer, abort, back, fork, seal, verify, audit, replay, export, spec, report,
copy, study) that the CLI itself calls; ``forge_ledger.study`` the plans and cells of a study."""


def __getattr__(name: str) -> Any:
    """Each public name loads on first use, so importing the package costs nothing and
    read-only tools never load the running side (orchestrator, providers…). A submodule is
    an attribute too (``forge_ledger.ledger.Ledger`` after ``import forge_ledger``), as it
    was when the package imported its parts itself."""
    import importlib

    module = _LAZY.get(name)
    if module is not None:
        return getattr(importlib.import_module(f".{module}", __name__), name)
    if name in _LAZY_MODULES or name in _submodules():
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'forge_ledger' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *_submodules()})


@functools.cache
def _submodules() -> frozenset[str]:
    """The package's public submodules, listed from its folder once (not on every access to
    a public name, which also comes through ``__getattr__``)."""
    import pkgutil

    return frozenset(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))

__all__ = [
    "ChainBrokenError",
    "ChainReport",
    "Clock",
    "ConcurrencyConflictError",
    "Deliberation",
    "FixedStepClock",
    "Forge",
    "ForgeLedgerError",
    "FoundStore",
    "IdSource",
    "InvariantViolation",
    "Ledger",
    "Orchestrator",
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
    "app",
    "audit_report",
    "compare_fork",
    "find_store",
    "fork",
    "get_provider",
    "open",
    "replay_session",
    "resume_session",
    "seal_session",
    "start_session",
    "study",
    "verify_session",
    "verify_store",
]
