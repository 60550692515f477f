"""``copy``: sessions copied whole from one store to another (see
:mod:`forge_ledger.ledger.copying`); ``export --format ledger`` writes its one-file archive
through :func:`archive`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

import click

from ..ledger import Ledger
from ..ledger.copying import ALREADY_THERE, CopiedSession
from . import cli
from ._common import (
    emit_json,
    err_console,
    json_option,
    out_console,
    printable,
    store_option,
)

__all__ = ["archive", "open_source"]


def open_source(store: str | None) -> Ledger:
    """The store sessions are copied from, opened read-only: a copy never writes to it."""
    return Ledger(store, create=False, snapshot_interval=0, read_only=True)


def _progress(done: int, total: int, copied: CopiedSession) -> None:
    what = copied.status if copied.status == ALREADY_THERE else (
        f"{copied.status}, {copied.events} event(s)"
    )
    ancestor = "" if copied.requested else " (the parent of a fork)"
    err_console.print(f"[{done}/{total}] {copied.session_id}: {what}{ancestor}")


def _summary(copied: Sequence[CopiedSession], source: str, target: str) -> dict[str, Any]:
    return {
        "source": source,
        "target": target,
        "copied": sum(c.status != ALREADY_THERE for c in copied),
        "already_there": sum(c.status == ALREADY_THERE for c in copied),
        "events": sum(c.events for c in copied),
        "sessions": [c.as_json() for c in copied],
    }


def _report(doc: dict[str, Any], *, as_json: bool) -> None:
    if as_json:
        emit_json(doc)
        return
    out_console.print(
        f"{doc['copied']} session(s) copied ({doc['events']} event(s)), "
        f"{doc['already_there']} already there, in {printable(doc['target'])}"
    )


def _resolved(ledger: Ledger, sessions: Sequence[str]) -> list[UUID]:
    return list(dict.fromkeys(ledger.resolve(s) for s in sessions))


@cli.command("copy")
@click.argument("sessions", nargs=-1, required=True, metavar="SESSION...")
@click.option(
    "--to", "to", required=True, metavar="PATH|URL",
    help="The store to copy into: a SQLite file (created if missing) or a postgresql:// URL.",
)
@store_option
@json_option
def copy_cmd(sessions: tuple[str, ...], to: str, store: str | None, as_json: bool) -> None:
    """Copy SESSIONs (a fork with its ancestors) to another store, event for event.

    Every event keeps its hash: 'verify' and 'replay' give the same results in the target.
    The source is opened read-only. Each session is written in one transaction, so an
    interrupted copy leaves each session whole or absent; run it again to finish. A session
    the target holds already is left as it is ("already there"), or extended by the events
    it lacks; one the target holds with another history is refused.

    Example: forge-ledger copy @ --to postgresql://127.0.0.1/team
    """
    from ..app.records import copy

    with open_source(store) as source, Ledger(to, create=True) as target:
        copied = copy(source, sessions, target, progress=_progress)
        doc = _summary(copied, source.location.display, target.location.display)
    _report(doc, as_json=as_json)


def archive(store: str | None, sessions: Sequence[str], output: Path, *, as_json: bool) -> None:
    """``export --format ledger``: SESSIONs and what they need as a new SQLite ledger."""
    from ..ledger.copying import write_archive

    with open_source(store) as source:
        ids = _resolved(source, sessions)
        copied = write_archive(source, ids, output, progress=_progress)
        doc = _summary(copied, source.location.display, str(output))
    if as_json:
        emit_json({**doc, "path": str(output)})
    else:
        out_console.print(
            f"Archive written: {printable(str(output))} ({len(copied)} session(s), "
            f"{sum(c.events for c in copied)} event(s))"
        )
