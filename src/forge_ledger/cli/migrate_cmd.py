"""``forge-ledger migrate``: bring the store to the current format (see
:mod:`forge_ledger.ledger.migrate`), or with ``--dry-run`` say what that would do."""

from __future__ import annotations

import click

from . import cli
from ._common import emit_json, err_console, json_option, out_console, printable, store_option


def _progress(step: str) -> None:
    err_console.print(f"done: {printable(step)}")


@cli.command("migrate")
@click.option("--dry-run", is_flag=True, help="Say what would be done, and change nothing.")
@store_option
@json_option
def migrate_cmd(dry_run: bool, store: str | None, as_json: bool) -> None:
    """Bring the store to the current format; the sessions and their hashes are unchanged.

    A store written by an older forge-ledger is read as it is, and brought to the current
    format by its first write; this does it now. It works in one transaction: an interrupted
    migration leaves the store as it was. Running it again does nothing. A store of a newer
    format is refused, untouched. Exit codes: 0 done (or nothing to do), 2 not a ledger,
    a newer format, or a read-only file, 75 another process held the write lock.
    """
    from ..app import migrate

    done = migrate(store, dry_run=dry_run, progress=None if as_json else _progress)
    if as_json:
        emit_json(done.as_json())
        return
    where = printable(done.store)
    if not done.steps:
        out_console.print(f"{where} is of format {done.to_version}: nothing to do")
    elif dry_run:
        out_console.print(f"{where} is of format {done.from_version}; migrating would:")
        for step in done.steps:
            out_console.print(f"  {printable(step)}")
    else:
        out_console.print(
            f"{where} migrated from format {done.from_version} to {done.to_version} "
            f"({len(done.steps)} step(s))"
        )
