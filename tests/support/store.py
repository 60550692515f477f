"""Raw access to a store file, as someone editing it behind the ledger's back would have.

Stored states may be zlib-compressed (see ``forge_ledger.ledger.compression``); the SQL function
``unpack(state)`` registered here gives their JSON, so tamper tests can edit it in place with
SQLite's JSON functions; ``unpack_text(body)`` gives a stored text, and ``address(sha256)`` a
text's key as its address (64 hex digits, whether the store keys texts by the digest's bytes
or, as stores written before did, by its hex). Writing the edited JSON back uncompressed is a
valid stored form too.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from forge_ledger.ledger import Ledger
from forge_ledger.ledger.compression import unpack, unpack_text
from forge_ledger.ledger.migrate import QUOTES_TABLE
from forge_ledger.ledger.text_bodies import quoting_body
from forge_ledger.ledger.texts import TEXT_TABLE

__all__ = [
    "as_format_1_with_quote_lists",
    "event_rows",
    "raw_connection",
    "snapshot_rows",
    "text_bodies",
    "unpack",
]



def _address(key: bytes | str) -> str:
    return key.hex() if isinstance(key, bytes) else key


def _unpack(value: bytes | None) -> bytes | None:
    return None if value is None else unpack(value)


def raw_connection(path: str, **kwargs: Any) -> sqlite3.Connection:
    con = sqlite3.connect(path, **kwargs)
    con.create_function("unpack", 1, _unpack, deterministic=True)
    con.create_function("unpack_text", 1, unpack_text, deterministic=True)
    con.create_function("address", 1, _address, deterministic=True)
    return con


def text_bodies(path: str) -> dict[str, bytes]:
    """The stored bodies of a SQLite store's texts by address, as stored (packed or not)."""
    with raw_connection(path) as con:
        rows = con.execute(f"SELECT address(sha256), CAST(body AS BLOB) FROM {TEXT_TABLE}")
        return {a: bytes(b) for a, b in rows}


def as_format_1_with_quote_lists(path: str) -> int:
    """Lay a SQLite store out as format 1 stores could be: texts keyed by their hex digests,
    quote lists in a table of their own (``forge_text_quotes``); the number of lists moved."""
    with raw_connection(path) as con:
        con.executescript(
            f"CREATE TABLE hex_keyed (sha256 TEXT PRIMARY KEY, body NOT NULL);"
            f"INSERT INTO hex_keyed SELECT address(sha256), body FROM {TEXT_TABLE};"
            f"DROP TABLE {TEXT_TABLE};"
            f"ALTER TABLE hex_keyed RENAME TO {TEXT_TABLE};"
            f"CREATE TABLE {QUOTES_TABLE} "
            "(sha256 TEXT PRIMARY KEY, members TEXT NOT NULL) WITHOUT ROWID;"
            "PRAGMA user_version = 1;"
        )
    moved = 0
    for address, body in text_bodies(path).items():
        split = quoting_body(body)
        if split is None:
            continue
        with raw_connection(path) as con:
            con.execute(f"UPDATE {TEXT_TABLE} SET body = ? WHERE sha256 = ?", (split[1], address))
            con.execute(
                f"INSERT INTO {QUOTES_TABLE} VALUES (?, ?)", (address, json.dumps(split[0]))
            )
        moved += 1
    return moved


def snapshot_rows(store_url: str, ledger: Ledger) -> list[tuple[int, bytes]]:
    """The stored snapshots of ``ledger`` (SQLite or PostgreSQL) as (version, JSON bytes)."""
    assert ledger.app.snapshots is not None
    return _rows(store_url, ledger, ledger.app.snapshots.recorder)


def event_rows(store_url: str, ledger: Ledger) -> list[tuple[int, bytes]]:
    """The stored events of ``ledger`` (SQLite or PostgreSQL) as (version, JSON bytes)."""
    return _rows(store_url, ledger, ledger.app.recorder)


def _rows(store_url: str, ledger: Ledger, recorder: Any) -> list[tuple[int, bytes]]:
    table = recorder.events_table_name
    if ledger.location.kind == "sqlite":
        with sqlite3.connect(store_url) as conn:
            rows = conn.execute(f"SELECT originator_version, state FROM {table}").fetchall()
        return [(int(v), unpack(bytes(s))) for v, s in rows]
    with recorder.datastore.transaction(commit=False) as curs:
        curs.execute(
            f'SELECT originator_version, state FROM "{ledger.location.schema}"."{table}"'
        )
        return [(int(r["originator_version"]), bytes(r["state"])) for r in curs.fetchall()]
