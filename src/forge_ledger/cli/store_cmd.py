"""``forge-ledger store``: which store the commands use here, and which rule chose it.

The answer comes from :func:`~forge_ledger.ledger.store.find_store`, the rule every command
follows, so what this prints is what the next command opens. Nothing is opened or created.
"""

from __future__ import annotations

import click

from ..ledger.outputs import store_outputs
from ..ledger.store import find_store
from . import cli
from ._common import emit_json, json_option, printable, store_option


@cli.command("store")
@store_option
@json_option
def store_cmd(store: str | None, as_json: bool) -> None:
    """Say which store the commands use here and why (--store, FORGE_LEDGER_STORE, the nearest
    .project-memory/, or the user-level store).

    Like git finding its repository: --store wins, then FORGE_LEDGER_STORE, then the
    forge-ledger.sqlite of the nearest .project-memory/ folder here or above (the walk stops
    at the filesystem's root or a mount boundary), then the user-level store
    (FORGE_LEDGER_HOME, else the user data folder). A folder becomes a project with
    'mkdir .project-memory'. Nothing is opened or created.
    """
    found = find_store(store)
    location = found.location
    outputs = store_outputs(location).home
    exists = location.path.exists() if location.path is not None else None
    if as_json:
        emit_json(
            {
                "store": location.display,
                "kind": location.kind,
                "path": str(location.path.absolute()) if location.path is not None else None,
                "rule": found.rule,
                "reason": found.reason,
                "exists": exists,
                "outputs": str(outputs),
            }
        )
        return
    click.echo(printable(location.display))
    click.echo(printable(f"found by: {found.rule} ({found.reason})"))
    if exists is not None:
        state = "exists" if exists else "does not exist yet (a run or the demo creates it)"
        click.echo(f"file: {state}")
    click.echo(printable(f"outputs: {outputs}"))
