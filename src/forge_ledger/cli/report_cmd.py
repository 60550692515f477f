"""``forge-ledger report``: the audit as one self-contained HTML page.

The page (charts, the document with its provenance, the audit's findings) is written to a
file beside the store by default, or to ``-o FILE`` (``-o -`` for stdout). The charting and
template libraries are imported only here, when the command runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..errors import ChainBrokenError, UsageError
from . import cli
from ._common import (
    document_output,
    emit_json,
    err_console,
    hmac_key,
    json_option,
    open_ledger,
    printable,
    store_option,
)

__all__ = ["report"]


@cli.command()
@click.argument("session")
@click.option("-o", "--output", default=None, metavar="FILE.html",
              help="Where to write the page ('-' for stdout) "
              "[default: reports/<slug>-<id>.html beside the store, or under --home for "
              "PostgreSQL].")
@click.option("--at-iteration", type=click.IntRange(min=1), default=None, metavar="K",
              help="The session as it was at the end of iteration K.")
@store_option
@json_option
def report(
    session: str, output: str | None, at_iteration: int | None, store: str | None,
    as_json: bool,
) -> None:
    """Write SESSION as one HTML page: charts, the document with provenance, the audit.

    The file is self-contained (no script, nothing fetched): open it from disk, mail it,
    attach it to a review. It records whether the hash chain verified and the seal checked
    (with FORGE_LEDGER_HMAC_KEY set, the seal's HMAC too). Exits 1 after writing the page
    when the chain does not verify.
    """
    if as_json and output == "-":
        raise UsageError("--json and '-o -' both write to stdout", hint="give a file with -o")
    from ..app.records import report as report_page

    with open_ledger(store, create=False) as ledger, err_console.status("rendering the report…"):
        page = report_page(
            ledger, session, at_iteration=at_iteration, key=hmac_key(), write=output != "-",
            path=None if output in (None, "-") else Path(output),
        )
    model, html, target = page.model, page.html, page.path
    if target is None:
        with document_output():
            sys.stdout.write(html)
    size = len(html.encode("utf-8"))
    if as_json:
        emit_json({
            "session_id": model.session_id, "path": str(target), "bytes": size,
            "position": model.position, "head_hash": model.head_hash,
            "chain_ok": model.integrity.chain_ok, "sealed": model.integrity.sealed,
        })
    elif target is not None:
        click.echo(printable(str(target)))
        err_console.print(f"report of {model.session_id[:8]} as of event {model.position}: "
                          f"{size / 1024:.0f} KB", markup=False, highlight=False)
    if not model.integrity.chain_ok:
        raise ChainBrokenError(
            f"the chain of {model.session_id} is broken at event "
            f"{model.integrity.first_bad_position}: {model.integrity.problem}",
            hint="the report says so; restore the store from a backup",
        )
