"""Raw access to a store file, as someone editing it behind the ledger's back would have.

Stored states may be zlib-compressed (see ``forge_ledger.ledger.compression``); the SQL function
``unpack(state)`` registered here gives their JSON, so tamper tests can edit it in place with
SQLite's JSON functions; ``unpack_text(body)`` gives a stored text. Writing the edited JSON
back uncompressed is a valid stored form too.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from forge_ledger.ledger.compression import unpack, unpack_text

__all__ = ["raw_connection", "unpack"]



def _unpack(value: bytes | None) -> bytes | None:
    return None if value is None else unpack(value)


def raw_connection(path: str, **kwargs: Any) -> sqlite3.Connection:
    con = sqlite3.connect(path, **kwargs)
    con.create_function("unpack", 1, _unpack, deterministic=True)
    con.create_function("unpack_text", 1, unpack_text, deterministic=True)
    return con
