"""``spec``: the forged document, now or as of a past point, with its provenance or its changes.

Read-only: it opens the store without creating anything and never imports litellm. Output is
plain text (never Rich markup): the exact bytes for a pipe or ``-o``, escaped on a terminal
(:func:`~._common.document_output`), so model text never drives the terminal it is shown on.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from ..errors import UsageError
from . import cli
from ._common import (
    document_output,
    emit_json,
    err_console,
    json_option,
    open_ledger,
    printable,
    store_option,
)

__all__ = ["document_from_read_model", "spec_cmd"]


def _diff_range(state: Any, diff: str, more: tuple[int, ...]) -> tuple[int, int]:
    """``--diff`` → (from, to): the last two iterations, K → latest, or K K2."""
    last = state.iteration
    if diff == "last":
        if more:
            raise UsageError("--diff takes its iterations as 'K' or 'K K2'")
        return max(1, last - 1), last
    try:
        first = int(diff)
    except ValueError:
        raise UsageError(f"--diff {diff!r} is not an iteration number", hint="e.g. --diff 1 2") \
            from None
    if len(more) > 1:
        raise UsageError("--diff takes at most two iterations")
    second = more[0] if more else last
    for k in (first, second):
        if not 1 <= k <= last:
            raise UsageError(f"iteration {k} is out of range", hint=f"the session has 1..{last}")
    return first, second


def _print_diff(doc: Any) -> None:
    src = doc.to_source
    click.echo(f"--- document at the end of iteration {doc.from_iteration}")
    click.echo(
        f"+++ document at the end of iteration {doc.to_iteration}"
        + (f" ({src.participant}'s {src.kind.value}, event {src.position})" if src else "")
    )
    for h in doc.hunks:
        click.echo(h.header + _hunk_note(h))
        for line in h.lines:
            click.echo(line, nl=False)
            if not line.endswith("\n"):
                click.echo("\n\\ No newline at end of file")


def _hunk_note(hunk: Any) -> str:
    """Who changed a hunk and what it answered, on the hunk's own ``@@`` line: ``patch`` and
    ``git apply`` read whatever follows the second ``@@`` as a comment, so the diff stays
    applicable (a line of its own inside a hunk would not be)."""
    who = "; ".join(
        f"{c.participant} ({c.kind.value}, round {c.round}, event {c.position})"
        for c in hunk.changed_by
    )
    answers = [
        (f"{a.participant}'s suggestion" if a.kind == "suggestion"
         else f"divergence {a.divergence_id} ({a.participant})") + f": {' '.join(a.text.split())}"
        for a in hunk.answers
    ]
    parts = ([f"changed by {who}"] if who else []) + [f"answers {a}" for a in answers]
    return " " + " | ".join(parts) if parts else ""


def document_from_read_model(store: str | None, session: str) -> str | None:
    """The present document of SESSION from the read model of a SQLite store when it is
    current (the text the read model rendered from the same state); None when the ledger
    must be read instead. Neither the event store nor the domain's models are loaded."""
    from ..ledger.head import sqlite_head, sqlite_session_head
    from ..ledger.outputs import store_outputs
    from ..ledger.session_refs import id_prefix
    from ..ledger.store import resolve_store
    from ..projections.current import current_document

    prefix = id_prefix(session)
    location = resolve_store(store)
    head = sqlite_head(location) if prefix is not None else None
    if prefix is None or head is None:
        return None
    views = store_outputs(location).views
    return current_document(
        views, *head, prefix, lambda sid: sqlite_session_head(location, sid)
    )


@cli.command("spec")
@click.argument("session")
@click.argument("diff_to", nargs=-1, type=int, metavar="")
@click.option("--at-iteration", type=click.IntRange(min=1), default=None, metavar="K",
              help="The document as it was at the end of iteration K.")
@click.option("--at-event", type=click.IntRange(min=1), default=None, metavar="N",
              help="The document as it was at event position N.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the document file there instead of printing it ('-' prints it, as "
              "report's -o - does).")
@click.option("--provenance", is_flag=True,
              help="Trace each sentence to the contribution that introduced and revised it.")
@click.option("--diff", "diff", is_flag=False, flag_value="last", default=None, metavar="K [K2]",
              help="What changed between iterations K and K2 (default: the last two; "
              "K alone: K to the latest).")
@store_option
@json_option
def spec_cmd(
    session: str,
    diff_to: tuple[int, ...],
    at_iteration: int | None,
    at_event: int | None,
    output: Path | None,
    provenance: bool,
    diff: str | None,
    store: str | None,
    as_json: bool,
) -> None:
    """Print SESSION's document: the latest synthesis (before any, the latest draft or
    response) exactly as written, under a header saying whether it was agreed."""
    if diff_to and diff is None:
        raise UsageError(f"unexpected argument {diff_to[0]}", hint="give one SESSION")
    plain = not (diff or output or provenance or as_json or at_iteration or at_event)
    stored = document_from_read_model(store, session) if plain else None
    if stored is not None:
        with document_output():
            sys.stdout.write(stored)
        return
    if diff is not None and (output or provenance):
        raise UsageError("--diff cannot be combined with -o or --provenance")
    # the document's lineage and diff load only for --provenance and --diff
    from ..records.spec import (
        provenance_json,
        render_provenance,
        render_spec,
        spec_header,
        write_spec,
    )

    with open_ledger(store, create=False) as ledger:
        state = ledger.state(session, at_event=at_event, at_iteration=at_iteration)
        if state.latest_text is None:
            raise UsageError(f"session {state.id} has no document yet",
                             hint="a document exists once a draft has been recorded")
        if diff is not None:
            from ..projections.document import document_diff

            first, second = _diff_range(state, diff, diff_to)
            d = document_diff(state, first, second)
            if as_json:
                emit_json(d.model_dump(mode="json"))
                return
            with document_output():
                _print_diff(d)
            return
        if output is not None and str(output) != "-":
            path = write_spec(ledger, state, path=output)
            if as_json:
                emit_json({"session_id": state.id, "path": str(path)})
            else:
                err_console.print(f"Document written: {printable(str(path))}", markup=False)
            return
    if provenance:
        from ..projections.document import fold_lineage

        lineage = fold_lineage(state)
        if as_json:
            emit_json(provenance_json(state, lineage))
        else:
            with document_output():
                sys.stdout.write(render_provenance(state, lineage))
    elif as_json:
        header = {k: v for k, v in spec_header(state).items() if k != "format"}
        emit_json({**header, "text": state.latest_text or ""})
    else:
        with document_output():
            sys.stdout.write(render_spec(state))
