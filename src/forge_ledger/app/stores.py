"""The first argument of every application function: a store to open, or a ledger already open.

A program that runs one operation passes the store (a SQLite path, a ``postgresql://`` URL, or
``None`` for the default under the current directory) and the function opens and closes it; a
program that runs several opens a :class:`~forge_ledger.ledger.Ledger` once (or uses
:func:`forge_ledger.open`) and passes it, and it stays open.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypeAlias

from ..ledger import Ledger
from ..ledger.store import resolve_store

if TYPE_CHECKING:
    from ..ledger.migrate import Migration

__all__ = ["Store", "migrate", "opened"]

Store: TypeAlias = "Ledger | str | None"
"""An opened ledger, or where to open one (a path, a ``postgresql://`` URL, ``None``)."""


@contextlib.contextmanager
def opened(store: Store, *, create: bool = False) -> Iterator[Ledger]:
    """The ledger of ``store``: the one given, left open, or one opened here and closed on
    exit. ``create`` says whether a missing SQLite file may be created (commands that only read
    or change existing sessions never create a store)."""
    if isinstance(store, Ledger):
        yield store
        return
    with Ledger(store, create=create) as ledger:
        yield ledger


def migrate(
    store: Store, *, dry_run: bool = False, progress: Callable[[str], None] | None = None
) -> Migration:
    """Bring ``store`` to the current format in one transaction (its first write would do it
    too); with ``dry_run``, only say what that would do. Idempotent: a store of the current
    format is left untouched. ``progress`` is told each step done."""
    from ..ledger.migrate import migrate_store

    location = store.location if isinstance(store, Ledger) else resolve_store(store)
    return migrate_store(location, dry_run=dry_run, progress=progress)
