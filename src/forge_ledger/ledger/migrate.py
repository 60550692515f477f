"""The store's format version, and the one step that brings an older store to it.

A PostgreSQL store records its format as the comment on its events table (``postgres``); its
layout has not changed, so migrating one only records the format. A SQLite ledger records its
format in its header (``PRAGMA user_version``, beside the marker
``PRAGMA application_id``, see :mod:`.store`). Format :data:`~.store.FORMAT_VERSION` (2) is:
the marker; a ``forge_texts`` table keyed by each digest's 32 bytes; a prompt's quote list at
the start of its body. Older stores differ in ways no hash covers (the hash chain covers each
event's decoded payload and each text's content, never how a text is keyed or packed):

- no marker (stores written before it existed, format 0);
- no text table (texts inline in every event: the first event format);
- a text table keyed by the digests' 64 hexadecimal characters;
- quote lists in a table of their own (``forge_text_quotes``), apart from the bodies.

:func:`upgrade` converts all of them in the caller's transaction; a store's first write runs
it (``texts_sqlite``), so any command that writes brings its store to the current format at
once, and ``forge-ledger migrate`` does it on demand (:func:`migrate_store`). Until then a
store is read through :func:`old_text_rows`, which gives its texts as the current layout has
them, and changes nothing: a command that only reads never writes.

Kept as they are:

- forks recorded before a fork's positions continued its parent's (``ForkOrigin.continues_at``,
  read by ``verify`` and the iteration ends): a position is part of every event's hash, so
  renumbering them would break the chain;
- ``ContributionRecorded`` payloads of schema version 1 (``domain.events.UPCASTERS``): the
  hash covers the payload as recorded;
- events stored with their texts inline (format 0 stores): the chain covers the decoded
  payload, so they could be given references, but reading them takes no branch (a short text
  is inline in every format), so there is nothing to gain;
- snapshots laid out by older versions: no hash covers them, but the snapshot layout is
  being replaced; until then they are read as ``snapshot_states`` and ``verify`` read them.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import StoreError, StoreMissingError, StoreUnavailableError
from .store import (
    FORMAT_VERSION,
    StoreLocation,
    check_sqlite_file,
    inspection_uri,
    lock_timeout,
    marker_pragmas,
    newer_format,
)
from .text_bodies import QUOTING, QUOTING_MAX
from .texts import TEXT_TABLE

__all__ = [
    "QUOTES_TABLE",
    "Migration",
    "format_of",
    "migrate_store",
    "old_text_rows",
    "pending_steps",
    "upgrade",
]

QUOTES_TABLE = "forge_text_quotes"
"""Format 1 and before: (address, the quoted answers' addresses as a JSON list) of texts
written before their quote lists were held in their bodies."""
TEXT_DDL = f"CREATE TABLE IF NOT EXISTS {TEXT_TABLE} (sha256 BLOB PRIMARY KEY, body NOT NULL)"
"""A rowid table: a text is a few KB, and SQLite packs such rows into overflow pages far better
in a rowid table than in a WITHOUT ROWID one. The key is the digest's 32 bytes (in hexadecimal,
the key's two copies, row and index, were a tenth of a store's file). The body has no declared
type: a compressed body is a BLOB, a plain one TEXT."""

Row = tuple[str, bytes, int]
"""A stored text as the current format reads it: address, body as bytes, compressed?"""


def _all(c: Any, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    """The rows of one query (``c``: a connection or a cursor, eventsourcing's included,
    whose ``execute`` returns nothing)."""
    cursor = c.cursor() if isinstance(c, sqlite3.Connection) else c
    cursor.execute(sql, params)
    return list(cursor.fetchall())


def format_of(c: Any) -> int:
    """The format of the store ``c`` reads: its ``user_version`` if it carries the marker,
    else 0 (a ledger made before the marker)."""
    app_id, version = marker_pragmas()
    marked = _all(c, f"PRAGMA {app_id[0]}")[0][0] == app_id[1]
    return int(_all(c, f"PRAGMA {version[0]}")[0][0]) if marked else 0


def _tables(c: Any) -> set[str]:
    return {str(r[0]) for r in _all(c, "SELECT name FROM sqlite_master WHERE type = 'table'")}


def _hex_keyed(c: Any) -> bool:
    rows = _all(
        c, f"SELECT upper(type) FROM pragma_table_info('{TEXT_TABLE}') WHERE name = 'sha256'"
    )
    return bool(rows) and rows[0][0] != "BLOB"


def pending_steps(c: Any) -> list[str]:
    """What :func:`upgrade` would do to the store ``c`` reads, one line a step (none: the
    store is of the current format)."""
    if format_of(c) >= FORMAT_VERSION:
        return []
    tables = _tables(c)
    steps: list[str] = []
    if TEXT_TABLE not in tables:
        steps.append(f"create the text table {TEXT_TABLE}")
    elif _hex_keyed(c):
        steps.append(f"key the texts of {TEXT_TABLE} by their digests' bytes")
    if QUOTES_TABLE in tables:
        steps.append(f"move the quote lists of {QUOTES_TABLE} into the texts' bodies")
    steps.append(f"record format {FORMAT_VERSION} (was {format_of(c)})")
    return steps


def upgrade(c: Any, progress: Callable[[str], None] | None = None) -> list[str]:
    """Bring the store ``c`` writes to the current format, in the caller's (write)
    transaction; what was done (nothing for a store of the current format, so it can run
    again). A store of a newer format was refused when it was opened."""
    steps = pending_steps(c)
    if not steps:
        return []
    tables = _tables(c)
    if TEXT_TABLE not in tables:
        c.execute(TEXT_DDL)
    elif _hex_keyed(c) or QUOTES_TABLE in tables:
        _rewrite_texts(c, with_lists=QUOTES_TABLE in tables)
    for name, value in marker_pragmas():
        c.execute(f"PRAGMA {name} = {value}")
    for step in steps:
        if progress is not None:
            progress(step)
    return steps


def _rewrite_texts(c: Any, *, with_lists: bool) -> None:
    """The text table again, keyed by bytes, each body in the current layout."""
    rows = old_text_rows(c, None, with_lists=with_lists)
    stored = _all(c, f"SELECT count(*) FROM {TEXT_TABLE}")[0][0]
    damaged = [a for a, _, _ in rows if not _ADDRESS.fullmatch(a)]
    if len(rows) != stored or damaged:  # never lose a row, even one already unreadable
        raise StoreError(
            f"cannot migrate: {stored - len(rows) + len(damaged)} stored text(s) have a damaged "
            "key or quote list; nothing was changed",
            hint="find the sessions they belong to with 'forge-ledger verify'",
        )
    c.execute(f"ALTER TABLE {TEXT_TABLE} RENAME TO {TEXT_TABLE}_old")
    c.execute(TEXT_DDL)
    c.executemany(
        f"INSERT INTO {TEXT_TABLE} (sha256, body) VALUES (?, ?)",
        [(bytes.fromhex(a), body if z else body.decode("utf-8")) for a, body, z in rows],
    )
    c.execute(f"DROP TABLE {TEXT_TABLE}_old")
    if with_lists:
        c.execute(f"DROP TABLE {QUOTES_TABLE}")


def old_text_rows(
    c: Any, addresses: Sequence[str] | None, *, with_lists: bool | None = None
) -> list[Row]:
    """The stored texts at ``addresses`` (all with None) of a store of any format, each as
    the current format stores it: keyed by hex or bytes, with its quote list in its table or
    in its body. Reads only. A row whose quote list is damaged is left out (then reported as
    missing or unreadable)."""
    tables = _tables(c)
    if TEXT_TABLE not in tables:
        return []
    if with_lists is None:
        with_lists = QUOTES_TABLE in tables
    hex_keys = _hex_keyed(c)
    body = "CAST(t.body AS BLOB), typeof(t.body) = 'blob'"
    lists = "d.members" if with_lists else "NULL"
    join = f"LEFT JOIN {QUOTES_TABLE} d ON d.sha256 = t.sha256" if with_lists else ""
    sql = f"SELECT t.sha256, {body}, {lists} FROM {TEXT_TABLE} t {join}"
    found: list[tuple[Any, ...]] = []
    if addresses is None:
        found = _all(c, sql)
    else:
        keys = [a if hex_keys else bytes.fromhex(a) for a in _valid(addresses)]
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            marks = ",".join("?" * len(chunk))
            found += _all(c, f"{sql} WHERE t.sha256 IN ({marks})", chunk)
    out: list[Row] = []
    for key, stored, compressed, members in found:
        address = key.hex() if isinstance(key, bytes) else str(key)
        current = _with_list(bytes(stored), members) if members is not None else bytes(stored)
        if current is not None:
            out.append((address, current, 1 if members is not None else int(compressed)))
    return out


def _with_list(packed: bytes, members: str) -> bytes | None:
    """A body packed against the answers its separate quote list names, as the current format
    holds it: the list ahead of the packed text (None if the list is damaged)."""
    try:
        quoted = [bytes.fromhex(str(m)) for m in json.loads(members)]
    except (ValueError, TypeError):
        return None
    if not quoted or len(quoted) > QUOTING_MAX or any(len(m) != 32 for m in quoted):
        return None
    return QUOTING + bytes([len(quoted)]) + b"".join(quoted) + packed


def _valid(addresses: Sequence[str]) -> list[str]:
    return [a for a in dict.fromkeys(addresses) if _ADDRESS.fullmatch(a)]


_ADDRESS = re.compile("[0-9a-f]{64}")


@dataclass
class Migration:
    """What :func:`migrate_store` did (or, with ``dry_run``, would do) to one store."""

    store: str
    from_version: int
    to_version: int
    steps: list[str] = field(default_factory=list)
    dry_run: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "from_version": self.from_version,
            "to_version": self.to_version,
            "steps": self.steps,
            "dry_run": self.dry_run,
            "changed": bool(self.steps) and not self.dry_run,
        }


def migrate_store(
    location: StoreLocation,
    *,
    dry_run: bool = False,
    progress: Callable[[str], None] | None = None,
) -> Migration:
    """Bring the store at ``location`` to the current format, in one transaction (an
    interrupted migration leaves the store as it was); with ``dry_run``, say what that would
    do and change nothing. A store of the current format is left untouched."""
    if location.kind != "sqlite" or location.path is None:
        return _migrate_postgres(location, dry_run=dry_run, progress=progress)
    path = location.path
    check_sqlite_file(path, create=False)  # refuses what is not a ledger, or a newer one
    if dry_run:  # read as a read-only command reads: nothing is written, nothing made beside
        with contextlib.closing(sqlite3.connect(inspection_uri(path), uri=True)) as con:
            version = format_of(con)
            return Migration(location.display, version, FORMAT_VERSION, pending_steps(con), True)
    try:
        with contextlib.closing(
            sqlite3.connect(path, timeout=lock_timeout(), isolation_level=None)
        ) as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                version = format_of(con)
                steps = upgrade(con, progress)
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")
    except sqlite3.OperationalError as e:
        raise _not_migrated(location, e) from None
    return Migration(location.display, version, FORMAT_VERSION, steps)


def _migrate_postgres(
    location: StoreLocation, *, dry_run: bool, progress: Callable[[str], None] | None
) -> Migration:
    """PostgreSQL stores have had one layout (texts keyed by their hex digests, never packed):
    migrating one records its format, which stores made before it was recorded lack."""
    from .postgres import EVENTS_TABLE, connect, pg_format, record_pg_format

    conn = connect(location)
    try:
        tables = conn.execute(
            "SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = %s",
            (location.schema, EVENTS_TABLE),
        ).fetchall()
        if not tables:
            raise StoreMissingError(
                f"no ledger at {location.display}", hint="pass --store with a ledger's URL"
            )
        version = pg_format(conn, location.schema)
        if version > FORMAT_VERSION:
            raise newer_format(location.display, version)
        steps = (
            [] if version == FORMAT_VERSION else [f"record format {FORMAT_VERSION} (was {version})"]
        )
        if steps and not dry_run:
            record_pg_format(conn, location.schema)
            for step in steps:
                if progress is not None:
                    progress(step)
    finally:
        conn.close()
    return Migration(location.display, version, FORMAT_VERSION, steps, dry_run)


def _not_migrated(location: StoreLocation, e: sqlite3.OperationalError) -> StoreError:
    if "locked" in str(e):
        return StoreUnavailableError(
            f"cannot migrate {location.display}: another process held its write lock past "
            "the lock wait; nothing was changed",
            hint="run 'forge-ledger migrate' again once the other writer is done",
        )
    return StoreError(
        f"cannot migrate {location.display}: {e}; nothing was changed",
        hint="make the file and its folder writable",
    )
