"""Opening a PostgreSQL store: a fast, honest first connection and race-free creation.

eventsourcing's PostgreSQL recorders create their objects on start-up when ``CREATE_TABLE``
is on (``PostgresRecorder.create_table``: ``CREATE TYPE`` in its own transaction, then
``CREATE TABLE IF NOT EXISTS``, ``CREATE UNIQUE INDEX IF NOT EXISTS`` and
``CREATE OR REPLACE FUNCTION``). Run from several processes at once on a fresh schema, those
statements collide in the catalogue (``tuple concurrently updated``, ``duplicate key value
violates unique constraint "pg_type_typname_nsp_index"``). So forge-ledger turns that
creation off whenever the store already exists, and otherwise creates the schema and lets
eventsourcing create its tables while holding a transaction-independent advisory lock keyed
by the schema: one process creates, the others wait, then find everything in place.

The first connection is ours, with a short time-out, so a wrong password, an unknown role or
a missing database is reported at once with PostgreSQL's own reason, instead of after the
connection pool's time-out as "couldn't get a connection".
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import StoreError, StoreMissingError
from .store import FORMAT_VERSION, StoreLocation, newer_format

__all__ = [
    "EVENTS_TABLE",
    "SNAPSHOTS_TABLE",
    "EventWaiter",
    "PgReadiness",
    "connect",
    "notify_channel",
    "pg_format",
    "postgres_guard",
    "record_pg_format",
]

EVENTS_TABLE = "forgeledger_events"
SNAPSHOTS_TABLE = "forgeledger_snapshots"
CONNECT_TIMEOUT_S = 5
_LOCK_NAMESPACE = "forge-ledger:create-store:"
_FORMAT_NOTE = "forge-ledger format "
"""How a PostgreSQL store records its format: the comment on its events table."""


class PgReadiness:
    """What :func:`postgres_guard` found: whether eventsourcing must create tables."""

    def __init__(self, *, create_tables: bool, has_snapshots: bool) -> None:
        self.create_tables = create_tables
        self.has_snapshots = has_snapshots


def connect(loc: StoreLocation) -> Any:
    try:
        import psycopg
    except ImportError:  # pragma: no cover - depends on the extra
        raise StoreError(
            "PostgreSQL support is not installed", hint="pip install 'forge-ledger[postgres]'"
        ) from None
    try:
        return psycopg.connect(
            host=loc.host,
            port=loc.port,
            dbname=loc.dbname,
            user=loc.user or None,
            password=loc.password or None,
            connect_timeout=CONNECT_TIMEOUT_S,
            autocommit=True,
        )
    except psycopg.Error as e:
        raise StoreError(
            f"cannot open the store {loc.display}: {_reason(e)}", hint=_hint_for(e)
        ) from None


def _reason(e: BaseException) -> str:
    """PostgreSQL's own reason, one line, without the client's boilerplate."""
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    for line in lines:
        if "FATAL:" in line:
            return line.split("FATAL:", 1)[1].strip()
    return lines[0] if lines else type(e).__name__


def _hint_for(e: BaseException) -> str:
    text = str(e).lower()
    if "password" in text or "authentication" in text:
        return "check the user and password in the URL (postgresql://USER:PASSWORD@HOST/DB)"
    if "role" in text and "does not exist" in text:
        return "check the user name in the URL"
    if "database" in text and "does not exist" in text:
        return "create the database (createdb NAME) or fix its name in the URL"
    return "check the URL and that PostgreSQL is running"


def pg_format(conn: Any, schema: str) -> int:
    """The format a store records (the comment on its events table); 0 for a store made
    before it was recorded."""
    row = conn.execute(
        "SELECT obj_description(to_regclass(%s), 'pg_class')", (f'"{schema}".{EVENTS_TABLE}',)
    ).fetchone()
    note = str(row[0]) if row and row[0] else ""
    number = note.removeprefix(_FORMAT_NOTE)
    return int(number) if note.startswith(_FORMAT_NOTE) and number.isdigit() else 0


def record_pg_format(conn: Any, schema: str) -> None:
    """Record the current format in the store (see :func:`pg_format`)."""
    conn.execute(
        f"COMMENT ON TABLE \"{schema}\".{EVENTS_TABLE} IS '{_FORMAT_NOTE}{FORMAT_VERSION}'"
    )


def _existing_tables(conn: Any, schema: str) -> set[str]:
    rows = conn.execute(
        "SELECT table_name FROM information_schema.tables "
        "WHERE table_schema = %s AND table_name = ANY(%s)",
        (schema, [EVENTS_TABLE, SNAPSHOTS_TABLE]),
    ).fetchall()
    return {str(r[0]) for r in rows}


@contextmanager
def postgres_guard(
    loc: StoreLocation, *, create: bool, snapshots: bool
) -> Iterator[PgReadiness]:
    """Check the store; with ``create``, hold the creation lock while the caller opens it.

    Read-only and continuing commands (``create=False``) create nothing: a schema without
    the ledger's tables is refused with one line. When the store exists no lock is taken
    and eventsourcing is told not to create anything.
    """
    conn = connect(loc)
    try:
        tables = _existing_tables(conn, loc.schema)
        ready = EVENTS_TABLE in tables and (SNAPSHOTS_TABLE in tables or not snapshots)
        if EVENTS_TABLE in tables and (version := pg_format(conn, loc.schema)) > FORMAT_VERSION:
            raise newer_format(loc.display, version)
        if ready or not create:
            if EVENTS_TABLE not in tables:
                raise StoreMissingError(
                    f"no ledger at {loc.display}",
                    hint="run 'forge-ledger demo' or 'forge-ledger run' first, or pass --store",
                )
            yield PgReadiness(create_tables=False, has_snapshots=SNAPSHOTS_TABLE in tables)
            return
        conn.execute(
            "SELECT pg_advisory_lock(hashtextextended(%s, 0))", (_LOCK_NAMESPACE + loc.schema,)
        )
        try:
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{loc.schema}"')
            tables = _existing_tables(conn, loc.schema)
            missing = EVENTS_TABLE not in tables or (snapshots and SNAPSHOTS_TABLE not in tables)
            yield PgReadiness(create_tables=missing, has_snapshots=True)
            if EVENTS_TABLE not in tables:  # made just now, by the caller
                record_pg_format(conn, loc.schema)
        finally:
            conn.execute(
                "SELECT pg_advisory_unlock(hashtextextended(%s, 0))",
                (_LOCK_NAMESPACE + loc.schema,),
            )
    finally:
        conn.close()


def notify_channel(loc: StoreLocation) -> str:
    """The NOTIFY channel of a store's schema (an identifier whatever the schema's name)."""
    return "forge_ledger_" + hashlib.sha256(loc.schema.encode()).hexdigest()[:20]


class EventWaiter:
    """Sleeps until another connection commits events to the store, or a time-out.

    A statement trigger on the events table sends a NOTIFY, which PostgreSQL delivers when
    the inserting transaction commits; this connection LISTENs from its creation, so a
    commit between a follower's catch-up and its wait still wakes it at once. The trigger
    is (re)created here, under the store's creation lock, so stores made before it exist
    get it too.
    """

    def __init__(self, loc: StoreLocation) -> None:
        self.channel = notify_channel(loc)
        self.conn = connect(loc)
        table = f'"{loc.schema}"."{EVENTS_TABLE}"'
        function = f'"{loc.schema}"."forgeledger_notify"'
        lock = (_LOCK_NAMESPACE + loc.schema,)
        self.conn.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", lock)
        try:
            with self.conn.transaction():
                self.conn.execute(
                    f"CREATE OR REPLACE FUNCTION {function}() RETURNS trigger "
                    f"LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_notify('{self.channel}', ''); "
                    "RETURN NULL; END $$"
                )
                self.conn.execute(
                    f"CREATE OR REPLACE TRIGGER forgeledger_notify AFTER INSERT ON {table} "
                    f"FOR EACH STATEMENT EXECUTE FUNCTION {function}()"
                )
        finally:
            self.conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", lock)
        self.conn.execute(f"LISTEN {self.channel}")

    def __call__(self, timeout: float) -> None:
        """Return on the next commit's notification (or those already queued), or after
        ``timeout`` seconds."""
        for _ in self.conn.notifies(timeout=timeout, stop_after=1):
            pass

    def close(self) -> None:
        self.conn.close()
