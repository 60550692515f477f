"""``forge-ledger study export`` and ``study report``: a study's metrics as tables and as a page.

Both read the store only (no model is called) and are a pure function of it: the same store,
asked as of the same study event, gives the same bytes. The work is the application layer's
(:mod:`forge_ledger.app.study_reports`); this module parses options and says what it wrote.
``study_cmd`` adds both commands to the ``study`` group.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, cast

import click

from ..errors import UsageError
from ._common import document_output, emit_json, err_console, json_option, printable, store_option

if TYPE_CHECKING:
    from ..app.study_reports import Table
    from ..study.exports import Format

__all__ = ["export_cmd", "report_cmd"]


def _at_event(f: click.decorators.FC) -> click.decorators.FC:
    return click.option(
        "--at-event",
        type=click.IntRange(min=1),
        default=None,
        metavar="N",
        help="The study as it stood at its event N.",
    )(f)


@click.command("export")
@click.argument("study_ref", metavar="STUDY")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["csv", "jsonl", "parquet"]),
    default="csv",
    show_default=True,
    help="The file format (parquet needs the 'parquet' extra: "
    "pip install 'forge-ledger[parquet]').",
)
@click.option(
    "--table",
    type=click.Choice(["sessions", "participants"]),
    default="sessions",
    show_default=True,
    help="One row per session, or one per participant and session.",
)
@click.option(
    "-o", "--output", default=None, metavar="FILE", help="Write to FILE [default: stdout]."
)
@_at_event
@store_option
def export_cmd(
    study_ref: str,
    fmt: str,
    table: str,
    output: str | None,
    at_event: int | None,
    store: str | None,
) -> None:
    """Write STUDY's metrics as a tidy table: one row per session (or per participant)."""
    from ..app.study_reports import study_export

    if fmt == "parquet" and output in (None, "-"):
        raise UsageError("parquet is binary: give a file with -o", hint="-o sessions.parquet")
    path = None if output in (None, "-") else Path(output)
    data = study_export(
        store,
        study_ref,
        table=cast("Table", table),
        fmt=cast("Format", fmt),
        path=path,
        at_event=at_event,
    )
    if path is None:
        with document_output():
            sys.stdout.buffer.write(data)
    else:
        click.echo(printable(str(path)))


@click.command("report")
@click.argument("study_ref", metavar="STUDY")
@click.option("-o", "--output", required=True, metavar="FILE.html", help="Where to write the page.")
@_at_event
@click.option(
    "--sessions",
    "with_sessions",
    is_flag=True,
    help="Also write each cell's session report beside the page, under the name it links to.",
)
@store_option
@json_option
def report_cmd(
    study_ref: str,
    output: str,
    at_event: int | None,
    with_sessions: bool,
    store: str | None,
    as_json: bool,
) -> None:
    """Write STUDY as one HTML page: each arm's figures with their intervals, the differences,
    the counterfactual influence, and every cell linked to its session's report."""
    from ..app.study_reports import study_report

    with err_console.status("rendering the study report…"):
        page = study_report(
            store, study_ref, path=Path(output), at_event=at_event, sessions=with_sessions
        )
    size = len(page.html.encode("utf-8"))
    if as_json:
        emit_json(
            {
                "study_id": page.model.study_id,
                "path": str(page.path),
                "bytes": size,
                "as_of_event": page.model.as_of_event,
                "head_hash": page.model.head_hash,
                "session_reports": [str(p) for p in page.session_reports],
            }
        )
        return
    click.echo(printable(str(page.path)))
    err_console.print(
        f"study {page.model.study_id[:8]} as of event {page.model.as_of_event}: "
        f"{size / 1024:.0f} KB, {len(page.session_reports)} session report(s) beside it",
        markup=False,
        highlight=False,
    )
