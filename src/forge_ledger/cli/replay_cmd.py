"""``forge-ledger replay``: re-run sessions against their recorded answers and compare.

Exit 0 when every event the current code produces equals the recorded one; exit 1 at the first
difference, with its position, event types, a field-level diff and, for a changed prompt, a
text diff. ``--all`` checks every session in the store: the regression check to run after
upgrading forge-ledger or changing prompts and rules. Never writes, never calls a model.
"""

from __future__ import annotations

import sys

import click

from ..domain.text import clip
from . import cli
from ._common import (
    emit_json,
    err_console,
    json_option,
    open_ledger,
    out_console,
    printable,
    store_option,
)


@cli.command()
@click.argument("session", required=False)
@click.option("--all", "all_sessions", is_flag=True, help="Replay every session in the store.")
@store_option
@json_option
def replay(session: str | None, all_sessions: bool, store: str | None, as_json: bool) -> None:
    """Replay SESSION (or --all) deterministically; report the first difference."""
    from ..app.records import replay as replay_session
    from ..errors import UsageError
    from ..records.replay import ReplayResult

    if bool(session) == all_sessions:
        raise UsageError("give either a SESSION or --all")
    ledger = open_ledger(store)
    try:
        ids = ledger.session_ids() if all_sessions else [ledger.resolve(session or "")]
        results: list[ReplayResult] = []
        for sid in ids:
            result = replay_session(ledger, sid)
            results.append(result)
            if not as_json:
                _print(result)
        failed = [r for r in results if not r.ok]
        if as_json:
            doc = [r.as_json() for r in results] if all_sessions else results[0].as_json()
            emit_json(doc)
        elif all_sessions:
            out_console.print(
                f"{len(results) - len(failed)} of {len(results)} sessions replayed identically"
            )
        if failed:
            if not as_json:
                first = failed[0]
                assert first.difference is not None
                err_console.print(
                    f"error: replay of {first.session_id[:8]} differs at position "
                    f"{first.difference.position}: {printable(first.difference.message)}",
                    markup=False,
                    highlight=False,
                )
            sys.exit(1)
    finally:
        ledger.close()


def _print(result: object) -> None:
    from ..records.replay import ReplayResult

    assert isinstance(result, ReplayResult)
    short = result.session_id[:8]
    if result.ok:
        origin = " (imported from YAML)" if result.imported else ""
        out_console.print(
            f"{short}: identical — {result.matched} of {result.events} events matched "
            f"({result.generated} re-produced by the orchestrator, {result.external} external), "
            f"{result.calls_served} recorded model answers served, no model called{origin}",
            markup=False,
            highlight=False,
        )
        return
    d = result.difference
    assert d is not None
    out_console.print(
        f"{short}: DIFFERS at position {d.position} "
        f"(recorded {d.recorded_type}, current code {d.replayed_type})",
        markup=False,
        highlight=False,
    )
    out_console.print(f"  {printable(d.message)}", markup=False, highlight=False)
    for f in d.fields[:12]:
        out_console.print(
            f"  {f['path']}: recorded {_short(f.get('recorded'))}"
            f" → now {_short(f.get('replayed'))}",
            markup=False,
            highlight=False,
        )
    if d.prompt_diff:
        out_console.print("  prompt diff:", markup=False)
        for line in d.prompt_diff.splitlines()[:60]:
            out_console.print(f"    {printable(line)}", markup=False, highlight=False)


def _short(value: object) -> str:
    return clip(repr(value), 120, ellipsis="...", collapse=False)
