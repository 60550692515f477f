"""``sessions``: the sessions in the store, one line each.

The listing is read from the read model's ``sessions`` rows when the read model is current for
the store (:func:`~forge_ledger.projections.current.current_summaries`), else from the ledger
(every session's state loaded). For a SQLite store the first way needs neither the ledger nor
the domain's models: the store's newest event is read from the file itself
(:func:`~forge_ledger.ledger.head.sqlite_head`) to tell whether the read model is current, and
only when it is not (or cannot tell, or the store is PostgreSQL, or ``--study`` needs the
study's stream) is the ledger opened. Both ways print the same bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click
from rich.table import Table

from ..domain.status import SessionStatus
from ..errors import ChainBrokenError
from ..ledger.head import sqlite_head
from ..ledger.outputs import store_outputs
from ..ledger.session_list import SessionSummary, summary_from_row
from ..ledger.store import resolve_store
from ..projections.current import current_summaries, store_head
from . import cli
from ._common import (
    add_row,
    emit_json,
    err_console,
    json_option,
    open_ledger,
    parse_iso,
    print_table,
    printable,
    store_option,
    when,
)

if TYPE_CHECKING:
    from ..ledger import Ledger

__all__ = ["listed_from_read_model", "session_summary_json", "sessions"]

_STATUSES = (*(s.value for s in SessionStatus), "damaged")


def session_summary_json(summary: SessionSummary) -> dict[str, Any]:
    """One row of ``sessions --json``."""
    return summary.as_json()


def listed_from_read_model(store: str | None) -> tuple[list[SessionSummary], str] | None:
    """Every session and the store's printable name, from the read model of a SQLite store
    when it is current; None when the ledger must be read instead."""
    location = resolve_store(store)
    head = sqlite_head(location)
    if head is None:
        return None
    rows = current_summaries(store_outputs(location).views, *head)
    if rows is None:
        return None
    return [summary_from_row(r) for r in rows], printable(location.display)


def _summaries(ledger: Ledger) -> list[SessionSummary]:
    """From the read model when it is current (one query), else from the ledger (every
    session's state loaded)."""
    head, last = store_head(ledger)
    rows = current_summaries(store_outputs(ledger.location).views, head, last)
    if rows is None:
        return ledger.summaries()
    return [summary_from_row(r) for r in rows]


def _from_ledger(
    store: str | None, study: str | None
) -> tuple[list[SessionSummary], dict[str, dict[str, Any]], str]:
    """Every session (only those of ``study`` if given, with their cells) and the store's
    printable name, the ledger opened."""
    of_study: dict[str, dict[str, Any]] = {}
    with open_ledger(store, create=False) as ledger:
        rows = _summaries(ledger)
        if study is not None:
            from ..study import StudyStream

            of_study = StudyStream(ledger).sessions_of(study)
            rows = [s for s in rows if s.id in of_study]
        return rows, of_study, printable(ledger.location.display)


def _chosen(
    rows: list[SessionSummary],
    status: tuple[str, ...],
    since: Any,
    search: str | None,
    limit: int | None,
) -> list[SessionSummary]:
    """The sessions the filters keep, still oldest first; ``limit`` keeps the newest N."""
    words = (search or "").lower()
    kept = [
        s
        for s in rows
        if (not status or s.status in status)
        and (since is None or s.updated >= since)
        and (words in s.title.lower() or words in s.slug)
    ]
    return kept[-limit:] if limit else kept


@cli.command()
@click.option(
    "--status",
    "status",
    multiple=True,
    type=click.Choice(_STATUSES),
    help="Only sessions with this status (repeat for several).",
)
@click.option(
    "--since",
    default=None,
    metavar="ISO",
    help="Only sessions updated at or after this time (no zone: local time).",
)
@click.option(
    "--search",
    default=None,
    metavar="TEXT",
    help="Only sessions whose title or slug contains TEXT (any case).",
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Only the N most recently started of those.",
)
@click.option(
    "--study",
    default=None,
    metavar="STUDY",
    help="Only the sessions of this study (id, prefix or name), with their cells.",
)
@store_option
@json_option
def sessions(
    status: tuple[str, ...],
    since: str | None,
    search: str | None,
    limit: int | None,
    study: str | None,
    store: str | None,
    as_json: bool,
) -> None:
    """List the sessions in the store (newest last)."""
    after = parse_iso(since, "--since") if since is not None else None
    of_study: dict[str, dict[str, Any]] = {}
    found = listed_from_read_model(store) if study is None else None
    if found is not None:
        rows, location = found
    else:
        rows, of_study, location = _from_ledger(store, study)
    rows = _chosen(rows, status, after, search, limit)
    if as_json:
        emit_json([{**session_summary_json(s), **of_study.get(s.id, {})} for s in rows])
        _end_if_damaged(rows)
        return
    if not rows:
        which = " match those filters" if status or since or search else ""
        err_console.print(f"no sessions{which} in {location}", markup=False)
        return
    _print(rows, location, of_study)
    _end_if_damaged(rows)


def _print(rows: list[SessionSummary], location: str, of_study: dict[str, dict[str, Any]]) -> None:
    forks = any(s.parent_id for s in rows)
    table = Table(title=f"Sessions in {location}", title_justify="left")
    columns = [
        "id",
        "status",
        "iter",
        "events",
        "updated",
        *(["parent"] if forks else []),
        *(["cell"] if of_study else []),
        "title",
    ]
    for col in columns:
        table.add_column(
            col,
            justify="right" if col in ("iter", "events") else "left",
            no_wrap=col != "title",
        )
    for s in rows:
        cells = [s.id[:8], s.status, str(s.iteration), str(s.events), when(s.updated)[:16]]
        if forks:
            cells.append((s.parent_id or "")[:8])
        if of_study:
            cells.append(of_study[s.id]["cell"])
        add_row(table, *cells, s.title)
    print_table(table)


def _end_if_damaged(rows: list[SessionSummary]) -> None:
    """Once every session is listed (a damaged one as of its last intact event), the first
    damaged one is the command's one error line, and its exit code."""
    damaged = [s for s in rows if s.damaged]
    if damaged:
        more = f" ({len(damaged) - 1} more session(s) damaged)" if len(damaged) > 1 else ""
        short = damaged[0].id[:8]
        raise ChainBrokenError(
            f"session {short} is damaged {damaged[0].damaged}{more}",
            hint=f"restore the store from a backup; 'forge-ledger verify {short}' checks it",
        )
