"""The PostgreSQL server the tests use, and dropping the schemas they make (no tests here).

PostgreSQL runs on 127.0.0.1:5432 (trust auth, database ``test``) on development and CI
machines; ``FORGE_LEDGER_TEST_PG`` overrides the base URL.
"""

from __future__ import annotations

import os

__all__ = ["PG_BASE", "drop_schema"]

PG_BASE = os.environ.get("FORGE_LEDGER_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
"""The server and database every PostgreSQL test works in (one schema per test)."""


def drop_schema(schema: str) -> None:
    """Drop a test's schema and everything in it (psycopg is imported only when needed)."""
    import psycopg

    with psycopg.connect(PG_BASE, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
