"""The event store edge: store selection by URL, the eventsourcing application, verification."""

from typing import TYPE_CHECKING

from .. import _lazy

if TYPE_CHECKING:
    from .failures import store_failure
    from .ledger import Ledger
    from .records import RecordedEvent
    from .session_list import SessionSummary
    from .store import (
        DEFAULT_STORE,
        ENV_VAR,
        FoundStore,
        StoreLocation,
        find_store,
        resolve_store,
    )
    from .verify import ChainReport, verify_session, verify_store

__getattr__, __dir__ = _lazy.exports(__name__, {
    "failures": ("store_failure",),
    "ledger": ("Ledger",),
    "records": ("RecordedEvent",),
    "session_list": ("SessionSummary",),
    "store": (
        "DEFAULT_STORE", "ENV_VAR", "FoundStore", "StoreLocation", "find_store", "resolve_store"
    ),
    "verify": ("ChainReport", "verify_session", "verify_store"),
})

__all__ = [
    "DEFAULT_STORE",
    "ENV_VAR",
    "ChainReport",
    "FoundStore",
    "Ledger",
    "RecordedEvent",
    "SessionSummary",
    "StoreLocation",
    "find_store",
    "resolve_store",
    "store_failure",
    "verify_session",
    "verify_store",
]
