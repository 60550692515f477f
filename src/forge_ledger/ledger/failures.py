"""Store failures as the one line a user sees."""

from __future__ import annotations

import sqlite3
import zlib

from eventsourcing.persistence import (
    PersistenceError as _PersistenceError,
)
from pydantic_core import PydanticSerializationError

from ..errors import (
    StoreError,
    StoreUnavailableError,
)
from .compression import NewerFormatError
from .sqlite_writes import is_busy
from .store import (
    lock_timeout,
)

__all__ = ["first_line", "store_failure"]


def store_failure(e: BaseException) -> StoreError | None:
    """A database error escaping from a read (a damaged file, a lost connection, a stored row
    that does not decompress) as the one line a user sees, or None when ``e`` is not one (then
    it is a bug and keeps its traceback). A forge-ledger error raised while pydantic serialized
    a state (a block of a restored one read then) comes wrapped in pydantic's: it is that."""
    if isinstance(e, PydanticSerializationError) and isinstance(e.__cause__, StoreError):
        return e.__cause__
    if isinstance(e, NewerFormatError):
        return StoreError(
            f"the store cannot be read by this version: {first_line(e)}",
            hint="upgrade forge-ledger to read it",
        )
    if not isinstance(e, _PersistenceError | sqlite3.DatabaseError | zlib.error):
        return None
    if is_busy(e):
        return StoreUnavailableError(
            f"the store is busy: another process held its write lock for {lock_timeout()} s",
            hint="run the command again later (FORGE_LEDGER_LOCK_TIMEOUT sets the wait)",
        )
    return StoreError(
        f"the store cannot be read: {first_line(e)}",
        hint="check it with 'forge-ledger verify'; restore a damaged file from a backup",
    )


def first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__
