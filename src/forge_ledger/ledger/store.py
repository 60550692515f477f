"""Where the ledger lives: a SQLite file (default) or a PostgreSQL URL.

The store is found the way git finds a repository (:func:`find_store`, the one rule): ``--store``,
else ``FORGE_LEDGER_STORE``, else ``forge-ledger.sqlite`` in the nearest ``.project-memory/``
folder of the current directory or one above it, else the user-level store
(:func:`user_home`). ``--store`` and ``FORGE_LEDGER_STORE`` accept either a filesystem path or
a ``postgresql://user:pass@host:port/dbname?schema=name`` URL. This module turns that into the
environment the ``eventsourcing`` persistence modules read, and checks the obvious mistakes
(a directory, a file that is not SQLite, a SQLite file that belongs to another program) before
anything is created, so a typo never leaves a stray database behind.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from ..domain.topics import TOPIC_PREFIX
from ..errors import ConfigError, StoreError, StoreMissingError

__all__ = [
    "APPLICATION_ID",
    "DEFAULT_STORE",
    "ENV_VAR",
    "FORMAT_VERSION",
    "HOME_ENV",
    "LOCK_TIMEOUT_ENV",
    "PROJECT_DIR",
    "READ_MODEL_SUFFIX",
    "STORE_NAME",
    "FoundStore",
    "SqliteAccess",
    "SqliteCheck",
    "StoreLocation",
    "check_sqlite_file",
    "find_project",
    "find_store",
    "inspection_uri",
    "lock_timeout",
    "marker_pragmas",
    "newer_format",
    "resolve_store",
    "sqlite_uri",
    "user_home",
]

ENV_VAR = "FORGE_LEDGER_STORE"
LOCK_TIMEOUT_ENV = "FORGE_LEDGER_LOCK_TIMEOUT"
DEFAULT_LOCK_TIMEOUT = 30
"""Seconds a SQLite write waits for another process's write lock before giving up."""
HOME_ENV = "FORGE_LEDGER_HOME"
"""Environment variable naming the user-level folder: the user-level store and a PostgreSQL
store's outputs."""
PROJECT_DIR = ".project-memory"
"""The folder that makes a directory (and those below it) a project with its own store."""
STORE_NAME = "forge-ledger.sqlite"
DEFAULT_STORE = Path(PROJECT_DIR) / STORE_NAME
"""A project's store, relative to the folder holding its ``.project-memory/``."""
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
        """The one way a store address is shown (messages, titles, the demo's hints): a
        PostgreSQL password is masked as ``***`` (``postgresql://bob:***@host:5432/db``)."""
        if self.kind == "sqlite":
            return str(self.path)
        secret = ":***" if self.password else ""
        user = f"{self.user}{secret}@" if self.user or secret else ""
        schema = f"?schema={self.schema}" if self.schema != "public" else ""
        return f"postgresql://{user}{self.host}:{self.port}/{self.dbname}{schema}"

    def eventsourcing_env(self) -> dict[str, str]:
        if self.kind == "sqlite":
            return {
                "PERSISTENCE_MODULE": f"{__package__}.sqlite_writes:Factory",
                "SQLITE_DBNAME": str(self.path),
                "SQLITE_LOCK_TIMEOUT": str(lock_timeout()),
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


def lock_timeout() -> int:
    """How long (whole seconds, at least 1) a write waits for the SQLite file's write lock
    held by another process: ``FORGE_LEDGER_LOCK_TIMEOUT``, or :data:`DEFAULT_LOCK_TIMEOUT`.
    Past it the write fails as :class:`~forge_ledger.errors.StoreUnavailableError`."""
    raw = os.environ.get(LOCK_TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_LOCK_TIMEOUT
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(
            f"{LOCK_TIMEOUT_ENV}={raw!r} is not a whole number of seconds",
            hint="give 1 or more, e.g. 30",
        )
    return int(raw)


class StoreRule:
    """Which rule of :func:`find_store` chose the store."""

    OPTION = "option"  # --store (or a path given to the library)
    ENVIRONMENT = "environment"  # FORGE_LEDGER_STORE
    PROJECT = "project"  # the nearest .project-memory/ at or above the current directory
    USER = "user"  # nothing of the above: the user-level store


@dataclass(frozen=True)
class FoundStore:
    """The store :func:`find_store` chose, the rule that chose it and why, in words."""

    location: StoreLocation
    rule: str
    reason: str


def find_store(
    value: str | os.PathLike[str] | None = None, *, cwd: str | os.PathLike[str] | None = None
) -> FoundStore:
    """The one rule for which store a command (or ``Ledger()``) uses, as git finds a repository.

    ``value`` (``--store``), else ``FORGE_LEDGER_STORE``, else ``forge-ledger.sqlite`` in the
    nearest ``.project-memory/`` of ``cwd`` (the current directory) or a folder above it
    (:func:`find_project`), else the user-level store (:func:`user_home`). A command that
    creates a store creates it where this rule points: from a project's subfolder, the
    project's store; from a folder of no project, the user-level one, never a new
    ``.project-memory/`` wherever the command happened to run (making a folder a project is
    ``mkdir .project-memory``, as ``git init`` is explicit).
    """
    raw = os.fspath(value).strip() if value is not None else ""
    if raw:
        return FoundStore(_parse_store(raw), StoreRule.OPTION, "given with --store")
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        return FoundStore(_parse_store(env), StoreRule.ENVIRONMENT, f"{ENV_VAR} is set")
    start = Path(cwd) if cwd is not None else _cwd()
    project = find_project(start) if start is not None else None
    if project is not None:
        return FoundStore(
            StoreLocation(kind="sqlite", path=project / STORE_NAME),
            StoreRule.PROJECT,
            f"the nearest {PROJECT_DIR}/ at or above {start}",
        )
    return FoundStore(
        StoreLocation(kind="sqlite", path=user_home() / STORE_NAME),
        StoreRule.USER,
        f"no --store, no {ENV_VAR}, no {PROJECT_DIR}/ at or above "
        f"{start or 'the current directory'}: the user-level store",
    )


def resolve_store(value: str | os.PathLike[str] | None = None) -> StoreLocation:
    """The store ``value`` names, or the one :func:`find_store` finds without it."""
    return find_store(value).location


def find_project(start: Path) -> Path | None:
    """The nearest ``.project-memory/`` folder in ``start`` or a folder above it, or None.

    The walk stops at the filesystem's root and, as git's does by default, where a mount
    boundary is crossed (a project never spans two filesystems; an NFS home is not searched
    from a local disk). A folder that cannot be searched (no permission) holds no project for
    us and is passed over, never an error. Found in ``start`` itself, the path is relative
    (``.project-memory``), as git names ``.git``; found above, it is absolute.
    """
    here = start.absolute()
    device = _device(here)
    while True:
        candidate = here / PROJECT_DIR
        if _is_folder(candidate):
            return Path(PROJECT_DIR) if here == _cwd() else candidate
        parent = here.parent
        above = _device(parent)
        if parent == here or (None not in (device, above) and above != device):
            return None
        device = above if device is None else device
        here = parent


def _cwd() -> Path | None:
    """The current directory, or None when it was removed under us (nothing to search)."""
    try:
        return Path.cwd()
    except OSError:
        return None


def _device(path: Path) -> int | None:
    try:
        return os.stat(path).st_dev
    except OSError:
        return None


def _is_folder(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except OSError:  # missing, or a folder we may not search: no project here
        return False


def user_home() -> Path:
    """The user-level folder: ``$FORGE_LEDGER_HOME``, else the platform's user data folder
    for forge-ledger (platformdirs: ``$XDG_DATA_HOME/forge-ledger``, by default
    ``~/.local/share/forge-ledger`` on Linux; ``~/Library/Application Support/forge-ledger``
    on macOS). It holds the user-level store and PostgreSQL stores' outputs."""
    env = os.environ.get(HOME_ENV, "").strip()
    if env:
        return Path(env).expanduser()
    import platformdirs  # only when no store was given or found

    return platformdirs.user_data_path("forge-ledger", appauthor=False)


def _parse_store(raw: str) -> StoreLocation:
    """A ``--store`` / ``FORGE_LEDGER_STORE`` value: a SQLite path or a PostgreSQL URL."""
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


class SqliteAccess:
    """How a SQLite store file is opened (see :func:`check_sqlite_file`)."""

    CREATE = "create"  # may be created (file, tables); opened read-write
    READ_WRITE = "read-write"  # exists; opened read-write, nothing created
    READ_ONLY = "read-only"  # exists but cannot be written by us: opened read-only


def sqlite_uri(path: Path, access: str) -> str:
    """The name eventsourcing's SQLite pool opens (it connects with ``uri=True``).

    A store we cannot write (a read-only file, or a read-only folder where SQLite cannot make
    its ``-wal``/``-shm`` files) is opened ``mode=ro``; when the folder is read-only, SQLite
    can only read a WAL database as ``immutable`` (nothing can be writing it from here).
    """
    if access != SqliteAccess.READ_ONLY:
        return str(path)
    uri = path.resolve().as_uri() + "?mode=ro"
    return uri if os.access(path.parent, os.W_OK) else uri + "&immutable=1"


APPLICATION_ID = 0x464C_4447
"""The ledger's marker: SQLite's application id (``PRAGMA application_id``, the header's bytes
68-71, which ``file(1)`` reads), "FLDG". Written when a ledger is created; a ledger made
before the marker existed gains it on its next write."""
FORMAT_VERSION = 2
"""The ledger's format version, beside the marker (``PRAGMA user_version``); older stores are
brought to it by :mod:`.migrate`."""
LEDGER_TABLES = frozenset({"stored_events", "stored_snapshots", "forge_texts", "forge_text_quotes"})
"""Every table a SQLite ledger has ever held: a file without the marker is a ledger only if it
holds no other (and its events are ours)."""


@dataclass(frozen=True)
class SqliteCheck:
    """What :func:`check_sqlite_file` found: how to open the file, and whether it has the
    snapshots table (a store made without snapshots is read without them, not altered)."""

    access: str
    has_snapshots: bool = True


def check_sqlite_file(path: Path, *, create: bool) -> SqliteCheck:
    """Refuse what cannot be our ledger before eventsourcing touches it; say how to open it.

    Nothing is created unless ``create``: a missing or empty (0-byte) file is refused for
    commands that only read or continue a store, so a typo never leaves a database behind.
    Returns a :class:`SqliteCheck`.
    """
    if path.is_dir():
        raise StoreError(f"{path} is a directory", hint="give the path of a .sqlite file")
    if not path.exists():
        if not create:
            raise StoreMissingError(
                f"no ledger at {path}",
                hint="run 'forge-ledger demo' or 'forge-ledger run' first, or pass --store "
                "('forge-ledger store' says how the store is found)",
            )
        _check_writable_folder(path.parent)
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_ahead_logged(path)
        return SqliteCheck(SqliteAccess.CREATE)
    size = path.stat().st_size
    writable = os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)
    if size == 0:
        if not create:
            raise StoreMissingError(  # no ledger yet: a store being created starts so
                f"{path} is empty (0 bytes), not a forge-ledger store",
                hint="pass --store with the path of a ledger file",
            )
        if not writable:
            raise _read_only(path)
        _write_ahead_logged(path)
        return SqliteCheck(SqliteAccess.CREATE)
    _check_header(path, size)
    names = _check_tables(path, create=create)
    snapshots = "stored_snapshots" in names
    if writable:
        access = SqliteAccess.CREATE if create else SqliteAccess.READ_WRITE
        return SqliteCheck(access, has_snapshots=snapshots or create)
    if create:
        raise _read_only(path)
    return SqliteCheck(SqliteAccess.READ_ONLY, has_snapshots=snapshots)


_WAL_RETRIES = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.0, 1.0, 1.0)
"""Waits between attempts to put a new store in WAL mode (about 5 s in all, SQLite's usual
busy timeout)."""


def _write_ahead_logged(path: Path) -> None:
    """Put a new (or empty) store file in WAL mode before eventsourcing opens it.

    Several processes may open a store that does not exist yet at once (two commands started
    together on a new project; a follower started beside the first run). Each connection
    eventsourcing opens switches a file that is not in WAL mode yet to WAL, which needs the
    file to itself; SQLite refuses a connection that would wait for that while others come and
    go ("database is locked") rather than call its busy handler, and the open failed. The
    switch is done here, once, waiting for the file as the busy timeout would; WAL mode is
    kept by the file, so every later connection finds it and switches nothing.
    """
    for delay in (*_WAL_RETRIES, None):
        try:
            with contextlib.closing(sqlite3.connect(path, timeout=lock_timeout())) as con:
                if str(con.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                    con.execute("PRAGMA journal_mode=WAL")
                _mark(con)
            return
        except sqlite3.OperationalError as e:
            if delay is None or "locked" not in str(e):
                raise
            time.sleep(delay)


def marker_pragmas() -> tuple[tuple[str, int], tuple[str, int]]:
    """The header fields that mark a ledger and record its format, with their values."""
    return ("application_id", APPLICATION_ID), ("user_version", FORMAT_VERSION)


def _mark(con: sqlite3.Connection) -> None:
    """Mark a new (or empty) ledger file and record its format; both live in the header, so
    this is one small write. A file that carries the marker is a ledger already: an older one
    is brought to the current format by its first write (:mod:`.migrate`)."""
    if con.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
        for name, value in marker_pragmas():
            con.execute(f"PRAGMA {name} = {value}")
        con.commit()


def _read_only(path: Path) -> StoreError:
    return StoreError(
        f"{path} is read-only; this command writes to the store",
        hint="make the file and its folder writable, or work on a writable copy",
    )


def _check_writable_folder(folder: Path) -> None:
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.is_dir() and not os.access(existing, os.W_OK | os.X_OK):
        raise StoreError(
            f"cannot create a ledger in {folder}: the folder is read-only",
            hint="pass --store with a path in a writable folder",
        )


def _check_header(path: Path, size: int) -> None:
    """The SQLite header says how big the file must be: a cut copy is refused here."""
    with path.open("rb") as fh:
        header = fh.read(100)
    if header[:16] != _SQLITE_MAGIC:
        raise StoreError(
            f"{path} is not a forge-ledger store (not a SQLite file)",
            hint="pass --store with the path of a ledger file",
        )
    if len(header) < 100:
        raise _damaged(path, f"{size} bytes, shorter than a SQLite header")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    change_counter = int.from_bytes(header[24:28], "big")
    pages = int.from_bytes(header[28:32], "big")
    valid_for = int.from_bytes(header[92:96], "big")
    if page_size < 512 or page_size & (page_size - 1):
        raise _damaged(path, f"invalid page size {page_size}")
    if pages and change_counter == valid_for and size < pages * page_size:
        raise _damaged(path, f"{size} bytes where its header says {pages * page_size}")


def _damaged(path: Path, why: str) -> StoreError:
    return StoreError(
        f"{path} is a damaged SQLite file ({why}; truncated or cut short?)",
        hint="restore the ledger from a backup",
    )


def _check_tables(path: Path, *, create: bool) -> set[str]:
    """The file's tables; anything but a ledger (or, for ``create``, an empty SQLite
    database), or a ledger of a newer format, is refused. Read-only: the file is left as it
    is."""
    try:
        con = sqlite3.connect(inspection_uri(path), uri=True)
        try:
            names = {
                str(r[0]) for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")
            } - _SQLITE_INTERNAL
            app_id, version = (
                int(con.execute(f"PRAGMA {p}").fetchone()[0])
                for p in ("application_id", "user_version")
            )
            marked = app_id == APPLICATION_ID
            if not marked and names:
                _recognise(path, con, names, app_id)
        finally:
            con.close()
    except sqlite3.DatabaseError as e:
        raise StoreError(f"{path} cannot be read as SQLite: {e}") from None
    if marked and version > FORMAT_VERSION:
        raise newer_format(str(path), version)
    if not names and not create:
        raise StoreMissingError(  # no ledger yet: a store being created passes through this
            f"{path} is an empty SQLite database, not a forge-ledger store",
            hint="pass --store with the path of a ledger file",
        )
    return names


def newer_format(store: str, version: int) -> StoreError:
    """The refusal of a store of a newer format than this code reads (left untouched)."""
    return StoreError(
        f"{store} is a ledger of format {version}; this forge-ledger reads format "
        f"{FORMAT_VERSION} and older",
        hint="upgrade forge-ledger to open it",
    )


def inspection_uri(path: Path) -> str:
    """How the file is opened to see what it is, creating nothing beside it.

    A read-only connection to a WAL-mode file makes its ``-wal`` and ``-shm`` files when they
    are not there, and cannot remove them: looking at another program's database would leave
    them behind. With no ``-wal`` file, no connection is writing it (a WAL writer has one
    while it is open), so it is read as ``immutable``, which makes nothing."""
    uri = sqlite_uri(path, SqliteAccess.READ_ONLY)
    with path.open("rb") as fh:
        wal_mode = fh.read(20)[18:20] == b"\x02\x02"
    if wal_mode and not path.with_name(path.name + "-wal").exists() and "immutable" not in uri:
        return path.resolve().as_uri() + "?mode=ro&immutable=1"
    return uri


_SQLITE_INTERNAL = frozenset({"sqlite_sequence", "sqlite_stat1", "sqlite_stat4"})
_EVENT_COLUMNS = ["originator_id", "originator_version", "topic", "state"]


def _recognise(path: Path, con: sqlite3.Connection, names: set[str], app_id: int) -> None:
    """A file without the marker is a ledger made before it if its tables are a ledger's
    only and its first and last events are forge-ledger's (two rows read, however large the
    file); anything else, another eventsourcing application's store included, is refused."""
    columns = [str(r[1]) for r in con.execute("PRAGMA table_info(stored_events)")]
    ours = app_id == 0 and names <= LEDGER_TABLES and columns == _EVENT_COLUMNS
    if ours:
        try:
            ends = con.execute(
                "SELECT topic FROM (SELECT topic FROM stored_events ORDER BY rowid LIMIT 1) "
                "UNION ALL SELECT topic FROM "
                "(SELECT topic FROM stored_events ORDER BY rowid DESC LIMIT 1)"
            ).fetchall()
        except sqlite3.DatabaseError:  # a table without rowid: not the ledger's
            ends = [("",)]
        ours = all(isinstance(t, str) and t.startswith(TOPIC_PREFIX) for (t,) in ends)
    if not ours:
        raise StoreError(
            f"{path} is a SQLite file but not a forge-ledger store (no ledger marker, and "
            "its tables or events are another program's); it was left untouched",
            hint="pass --store with the path of a ledger file",
        )
