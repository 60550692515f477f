"""``export``, ``import``, ``cleanup`` and ``back``: the YAML v1.2 session file commands.

None of them imports litellm; ``export`` and ``cleanup`` only read the ledger.
"""

from __future__ import annotations

from pathlib import Path

import click

from ..app.interventions import back
from ..app.records import export
from ..clock import SystemClock, UuidIds
from ..errors import UsageError
from ..untrusted.bounded_yaml import read_yaml_file
from ..yaml_format import cleanup as cleanup_exports
from ..yaml_format import import_session
from . import cli
from ._common import emit_json, json_option, open_ledger, out_console, printable, store_option
from ._integrity import check_chain


@cli.command("export")
@click.argument("sessions", nargs=-1, required=True, metavar="SESSION...")
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help="File to write [default: brainstorm-sessions/<slug>.yaml beside the store].",
)
@click.option(
    "--format", "fmt", type=click.Choice(["yaml", "ledger"]), default="yaml", show_default=True,
    help="yaml: one session as a YAML v1.2 file. ledger: the sessions (forks with their "
    "ancestors) as a new SQLite ledger file (-o FILE.sqlite), every event hash kept.",
)
@store_option
@json_option
def export_cmd(
    sessions: tuple[str, ...], output: Path | None, fmt: str, store: str | None, as_json: bool
) -> None:
    """Write SESSION as a YAML v1.2 session file, or SESSIONs as a one-file ledger.

    The YAML file is rebuilt from the events alone, so exporting the same session twice gives
    the same bytes; 'forge-ledger import' turns it back into a session. The ledger file
    (--format ledger) is a store of its own that 'verify', 'replay', 'spec', 'report' and
    'copy' read with --store FILE.
    """
    if fmt == "ledger":
        if output is None:
            raise UsageError("--format ledger needs -o FILE", hint="e.g. -o session.sqlite")
        from .copy_cmd import archive

        archive(store, sessions, output, as_json=as_json)
        return
    if len(sessions) > 1:
        raise UsageError(
            "a YAML export holds one session", hint="export them one by one, or use --format ledger"
        )
    with open_ledger(store) as ledger:
        sid = check_chain(ledger, sessions[0])
        path = export(ledger, sid, path=output)
    if as_json:
        emit_json({"session_id": str(sid), "path": str(path)})
    else:
        out_console.print(f"Session saved: {printable(str(path))}")


@cli.command("import")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@store_option
@json_option
def import_cmd(file: Path, store: str | None, as_json: bool) -> None:
    """Import a YAML session file (v1.0 or v1.2) as a new session; a bad file writes nothing."""
    try:
        text = read_yaml_file(file)
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(
            f"cannot read {file}: {e}", hint="give a readable UTF-8 YAML file"
        ) from None
    from ..yaml_format import parse_session_file

    parse_session_file(text, source=str(file))  # validate before opening (creating) a store
    with open_ledger(store, create=True) as ledger:
        result = import_session(ledger, text, clock=SystemClock(), ids=UuidIds(), source=str(file))
    if as_json:
        emit_json({k: v for k, v in result.as_json().items()
                   if k in ("session_id", "status", "iterations", "participants",
                            "has_document", "lacks")})
    else:
        document = ", the document" if result.has_document else ", no document"
        out_console.print(printable(
            f"Imported {result.slug} (format {result.format_version}) as session "
            f"{result.session_id}: {result.status}, {result.iterations} iteration(s), "
            f"{result.participants} participant(s){document}"
        ))
        out_console.print(printable(result.lacks))


@cli.command("cleanup")
@click.option("--days", type=click.IntRange(min=0), default=30, show_default=True,
              help="Remove finished exports not updated for this many days.")
@click.option("--dry-run", is_flag=True, help="List what would be removed, remove nothing.")
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path),
              default=None,
              help="Export directory [default: the store's brainstorm-sessions/ and specs/].")
@store_option
@json_option
def cleanup_cmd(
    days: int, dry_run: bool, directory: Path | None, store: str | None, as_json: bool
) -> None:
    """Remove YAML exports and documents of completed/abandoned sessions older than --days
    (never events)."""
    from ..ledger import resolve_store
    from ..ledger.outputs import store_outputs
    from ..records.spec import cleanup_specs

    now = SystemClock().now()
    if directory is not None:
        items = cleanup_exports(directory, now=now, days=days, dry_run=dry_run)
    else:
        outputs = store_outputs(resolve_store(store))
        items = cleanup_exports(outputs.exports, now=now, days=days, dry_run=dry_run)
        items += cleanup_specs(outputs.specs, now=now, days=days, dry_run=dry_run)
    if as_json:
        emit_json({"dry_run": dry_run, "days": days, "files": [i.as_json() for i in items]})
        return
    verb = "Would remove" if dry_run else "Removed"
    for i in items:
        out_console.print(printable(f"{verb} {i.path} ({i.status}, updated {i.updated})"))
    out_console.print(f"{verb} {len(items)} file(s).")


@cli.command("back")
@click.argument("session")
@click.argument("steps", type=click.IntRange(1, 5), default=1, required=False)
@store_option
@json_option
def back_cmd(session: str, steps: int, store: str | None, as_json: bool) -> None:
    """Go back STEPS iterations (1-5, default 1) in a session still in progress or paused;
    history is kept and the questions of the target iteration are pending again.

    A finished session cannot go back: fork it from an earlier iteration instead.
    """
    with open_ledger(store) as ledger:
        state = ledger.state(session)
        if state.status.terminal:
            short = state.id[:8]
            raise UsageError(
                f"session {short} is {state.status.value}; back rewinds only a session that "
                "is in progress or paused",
                hint=f"fork it from an earlier iteration instead: forge-ledger fork {short} "
                f"--at-iteration {max(state.iteration - steps, 1)}",
            )
        summary = back(ledger, state.id, steps)
    if as_json:
        emit_json(summary.as_json())
    else:
        click.echo(summary.text(printable))
