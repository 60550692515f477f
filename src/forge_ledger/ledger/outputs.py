"""Where the files derived from a store go: YAML exports, document (spec) files, the read model.

One rule, used by every writer and reader of those files (exports, ``spec``, ``projections``,
``cleanup``), so a store's outputs are always found together and never land in whatever
directory a command happened to be run from:

- **SQLite store**: beside the store file. ``DIR/NAME.sqlite`` has its read model in
  ``DIR/NAME.views.sqlite``, its YAML exports in ``DIR/brainstorm-sessions/``, its
  documents in ``DIR/specs/`` and its HTML reports in ``DIR/reports/``.
- **PostgreSQL store**: under one home, ``--home DIR`` (a global option) or the
  ``FORGE_LEDGER_HOME`` environment variable, by default the user data folder
  (``~/.local/share/forge-ledger`` on Linux, as platformdirs says). Each store gets its own
  directory there, named after its server, database and schema
  (``postgres-HOST-PORT-DB-SCHEMA``), holding ``forge-ledger.views.sqlite``,
  ``brainstorm-sessions/``, ``specs/`` and ``reports/``.
  Two schemas never share a read model (its tracking position belongs to one store).

Nothing here creates a directory: writers create what they write, on demand.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from .store import HOME_ENV, READ_MODEL_SUFFIX, StoreLocation, user_home

__all__ = [
    "EXPORTS_DIR",
    "HOME_ENV",
    "REPORTS_DIR",
    "SPECS_DIR",
    "StoreOutputs",
    "default_home",
    "set_home_override",
    "store_outputs",
    "write_output",
]

EXPORTS_DIR = "brainstorm-sessions"
SPECS_DIR = "specs"
REPORTS_DIR = "reports"
_PG_VIEWS = "forge-ledger" + READ_MODEL_SUFFIX

_home_override: Path | None = None


@dataclass(frozen=True)
class StoreOutputs:
    """The output locations of one store."""

    home: Path
    """The directory holding them all (a SQLite store's own directory)."""
    views: Path
    """The read-model (Datasette) SQLite file."""

    @property
    def exports(self) -> Path:
        """YAML v1.2 session files."""
        return self.home / EXPORTS_DIR

    @property
    def specs(self) -> Path:
        """Document (spec) files."""
        return self.home / SPECS_DIR

    @property
    def reports(self) -> Path:
        """HTML audit reports."""
        return self.home / REPORTS_DIR


def set_home_override(home: str | os.PathLike[str] | None) -> None:
    """Set (or clear, with None) the home given on the command line (``--home``).

    The command line sets it on every invocation, so a value never outlives its command.
    """
    global _home_override
    _home_override = Path(home).expanduser() if home else None


def default_home() -> Path:
    """The user-level folder (:func:`~forge_ledger.ledger.store.user_home`), where a PostgreSQL
    store's outputs go unless ``--home`` says otherwise."""
    return user_home()


def store_outputs(
    location: StoreLocation, *, home: str | os.PathLike[str] | None = None
) -> StoreOutputs:
    """Where ``location``'s exports, documents and read model live (see the module docstring).

    ``home`` applies to PostgreSQL stores only (it overrides ``--home`` and the environment);
    a SQLite store's outputs are always beside its file.
    """
    if location.kind == "sqlite" and location.path is not None:
        path = location.path
        return StoreOutputs(home=path.parent, views=path.with_name(path.stem + READ_MODEL_SUFFIX))
    root = Path(home).expanduser() if home else (_home_override or default_home())
    name = f"postgres-{location.host}-{location.port}-{location.dbname}-{location.schema}"
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
    directory = root / safe
    return StoreOutputs(home=directory, views=directory / _PG_VIEWS)


def write_output(target: Path, text: str | bytes) -> Path:
    """Write one output file (export, document, report) the one way: its folder made on
    demand, the text written beside it and renamed over it, so a reader never sees half a
    file, and created with the same mode as any file the user makes (the umask applies).

    ``OSError`` is left to the caller, who names the file's role in its message.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        if isinstance(text, bytes):
            tmp.write_bytes(text)
        else:
            tmp.write_text(text, "utf-8")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target
