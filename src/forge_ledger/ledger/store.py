"""Where the ledger lives: a SQLite file (default) or a PostgreSQL URL.

``--store`` and ``FORGE_LEDGER_STORE`` accept either a filesystem path or a
``postgresql://user:pass@host:port/dbname?schema=name`` URL. This module turns that into the
environment the ``eventsourcing`` persistence modules read, and checks the obvious mistakes
(a directory, a file that is not SQLite, a SQLite file that belongs to another program) before
anything is created, so a typo never leaves a stray database behind.
"""

from __future__ import annotations

import os
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from ..errors import StoreError

__all__ = [
    "DEFAULT_STORE",
    "ENV_VAR",
    "READ_MODEL_SUFFIX",
    "StoreLocation",
    "resolve_store",
]

ENV_VAR = "FORGE_LEDGER_STORE"
DEFAULT_STORE = Path(".project-memory") / "forge-ledger.sqlite"
READ_MODEL_SUFFIX = ".views.sqlite"
_SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_SQLITE_MAGIC = b"SQLite format 3\x00"


@dataclass(frozen=True)
class StoreLocation:
    """A parsed store address. ``kind`` is ``sqlite`` or ``postgres``."""

    kind: str
    path: Path | None = None
    host: str = "127.0.0.1"
    port: int = 5432
    dbname: str = ""
    user: str = ""
    password: str = ""
    schema: str = "public"

    @property
    def display(self) -> str:
        """Printable form; never contains the password."""
        if self.kind == "sqlite":
            return str(self.path)
        user = f"{self.user}@" if self.user else ""
        schema = f"?schema={self.schema}" if self.schema != "public" else ""
        return f"postgresql://{user}{self.host}:{self.port}/{self.dbname}{schema}"

    @property
    def read_model_path(self) -> Path:
        """The read-model (Datasette) file: the outputs rule (``outputs.store_outputs``)."""
        from .outputs import store_outputs

        return store_outputs(self).views

    def eventsourcing_env(self) -> dict[str, str]:
        if self.kind == "sqlite":
            return {
                "PERSISTENCE_MODULE": "eventsourcing.sqlite",
                "SQLITE_DBNAME": str(self.path),
                "SQLITE_LOCK_TIMEOUT": "30",
            }
        return {
            "PERSISTENCE_MODULE": "eventsourcing.postgres",
            "POSTGRES_DBNAME": self.dbname,
            "POSTGRES_HOST": self.host,
            "POSTGRES_PORT": str(self.port),
            "POSTGRES_USER": self.user,
            "POSTGRES_PASSWORD": self.password,
            "POSTGRES_SCHEMA": self.schema,
            "POSTGRES_CONNECT_TIMEOUT": "10",
            "POSTGRES_POOL_SIZE": "4",
            "POSTGRES_LOCK_TIMEOUT": "10",
        }


def resolve_store(value: str | os.PathLike[str] | None = None) -> StoreLocation:
    """Parse ``--store`` (or ``FORGE_LEDGER_STORE``, or the default path)."""
    raw = os.fspath(value) if value is not None else os.environ.get(ENV_VAR) or ""
    raw = raw.strip()
    if not raw:
        return StoreLocation(kind="sqlite", path=DEFAULT_STORE)
    if raw.startswith(("postgresql://", "postgres://")):
        return _parse_postgres(raw)
    if "://" in raw:
        scheme = raw.split("://", 1)[0]
        raise StoreError(
            f"unsupported store URL scheme {scheme!r}",
            hint="give a SQLite file path or a postgresql:// URL",
        )
    return StoreLocation(kind="sqlite", path=Path(raw).expanduser())


def _parse_postgres(url: str) -> StoreLocation:
    parts = urlsplit(url)
    dbname = unquote(parts.path.lstrip("/"))
    if not dbname:
        raise StoreError(
            f"no database name in {parts.scheme}://{parts.hostname or ''}",
            hint="write postgresql://HOST:PORT/DBNAME",
        )
    schema = parse_qs(parts.query).get("schema", ["public"])[0]
    if not _SCHEMA_RE.match(schema):
        raise StoreError(
            f"invalid schema name {schema!r}", hint="use lowercase letters, digits and '_'"
        )
    try:
        port = parts.port or 5432
    except ValueError:
        raise StoreError("invalid port in the PostgreSQL URL", hint="write HOST:PORT") from None
    return StoreLocation(
        kind="postgres",
        host=parts.hostname or "127.0.0.1",
        port=port,
        dbname=dbname,
        user=unquote(parts.username or ""),
        password=unquote(parts.password or ""),
        schema=schema,
    )


def check_sqlite_file(path: Path, *, create: bool) -> None:
    """Refuse what cannot be our ledger before eventsourcing touches it."""
    if path.is_dir():
        raise StoreError(f"{path} is a directory", hint="give the path of a .sqlite file")
    if not path.exists():
        if not create:
            raise StoreError(
                f"no ledger at {path}",
                hint="run 'forge-ledger demo' or 'forge-ledger run' first, or pass --store",
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        return
    if path.stat().st_size == 0:
        return
    with path.open("rb") as fh:
        if fh.read(16) != _SQLITE_MAGIC:
            raise StoreError(
                f"{path} is not a forge-ledger store (not a SQLite file)",
                hint="pass --store with the path of a ledger file",
            )
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        finally:
            con.close()
    except sqlite3.DatabaseError as e:
        raise StoreError(f"{path} cannot be read as SQLite: {e}") from None
    if names and "stored_events" not in names:
        raise StoreError(
            f"{path} is a SQLite file but not a forge-ledger store",
            hint="pass --store with the path of a ledger file",
        )
