"""The first argument of every application function: a store to open, or a ledger already open.

A program that runs one operation passes the store (a SQLite path, a ``postgresql://`` URL, or
``None`` for the default under the current directory) and the function opens and closes it; a
program that runs several opens a :class:`~forge_ledger.ledger.Ledger` once (or uses
:func:`forge_ledger.open`) and passes it, and it stays open.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TypeAlias

from ..ledger import Ledger

__all__ = ["Store", "opened"]

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
