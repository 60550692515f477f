"""``forge-ledger study``: run many sessions from one plan, see where a study stands.

``study run PLAN`` checks the plan (every problem, one line each, before anything is
recorded), records it (or finds it recorded: running the same plan again continues it) and
runs its cells concurrently with one progress display; ``study resume`` continues a recorded
study by id; ``status``, ``list`` and ``verify`` read. What a study does it does through
:mod:`forge_ledger.study`; this module parses options, shows progress and picks exit codes.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ..errors import ChainBrokenError, RunInterrupted, SessionPausedError
from . import cli
from ._common import (
    add_row,
    emit_json,
    err_console,
    hmac_key,
    json_option,
    money,
    open_ledger,
    print_table,
    printable,
    shown,
    store_option,
)
from ._interrupt import (
    abandoned_calls_are_quiet,
    interrupt_reported_once,
    second_interrupt_exits,
    survives_closed_output,
)
from .study_report_cmd import export_cmd, report_cmd

if TYPE_CHECKING:
    from ..ledger import Ledger
    from ..study import Progress, StudyState

__all__ = ["study"]


@cli.group()
def study() -> None:
    """Run many sessions from one plan (topics x panels x variants x repeats) under one budget."""


def _concurrency(f: Any) -> Any:
    return click.option(
        "--concurrency",
        "-j",
        type=click.IntRange(1, 256),
        default=4,
        show_default=True,
        metavar="N",
        help="Cells run at once (asyncio tasks sharing one provider and store).",
    )(f)


def _quiet(f: Any) -> Any:
    return click.option("--quiet", "-q", is_flag=True, help="No progress display.")(f)


@study.command("run")
@click.argument("plan", type=click.Path(dir_okay=False, path_type=Path))
@_concurrency
@_quiet
@store_option
@json_option
@survives_closed_output
def run_cmd(plan: Path, concurrency: int, quiet: bool, store: str | None, as_json: bool) -> None:
    """Run the study of PLAN: the cells not finished yet (the same plan again continues it)."""
    from ..study import load_plan, plan_study

    checked = load_plan(plan)
    with open_ledger(store, create=True) as ledger:
        study_id = plan_study(ledger, checked)
        _run(ledger, str(study_id), concurrency=concurrency, quiet=quiet, as_json=as_json)


@study.command("resume")
@click.argument("study_ref", metavar="STUDY")
@_concurrency
@_quiet
@store_option
@json_option
@survives_closed_output
def resume_cmd(
    study_ref: str, concurrency: int, quiet: bool, store: str | None, as_json: bool
) -> None:
    """Continue STUDY (id, prefix or name): resume its cut-off and paused cells, start the rest."""
    with open_ledger(store, create=False) as ledger:
        _run(ledger, study_ref, concurrency=concurrency, quiet=quiet, as_json=as_json)


def _run(ledger: Ledger, ref: str, *, concurrency: int, quiet: bool, as_json: bool) -> None:
    from ..app.studies import continue_study
    from ..study import StudyStream

    study_id = StudyStream(ledger).resolve(ref)
    short = str(study_id)[:8]
    display = _Display(enabled=not quiet and err_console.is_terminal)

    async def go() -> StudyState:
        interrupt_reported_once(asyncio.get_running_loop())
        return await continue_study(
            ledger,
            study_id,
            concurrency=concurrency,
            hmac_key=hmac_key(),
            on_progress=display.update,
        )

    try:
        with second_interrupt_exits(), display:
            state = asyncio.run(go())
    except KeyboardInterrupt:
        abandoned_calls_are_quiet()
        raise RunInterrupted(
            f"interrupted; study {short} keeps everything recorded so far",
            hint=f"continue with: forge-ledger study resume {short}",
        ) from None
    _outcome(state, as_json=as_json)


def _outcome(state: StudyState, *, as_json: bool) -> None:
    """The study's summary; then, if cells are paused, the one line saying how to go on."""
    if as_json:
        emit_json(state.summary())
    else:
        _print_summary(state)
    if state.stopped:
        err_console.print(Text("stopped: ", style="yellow") + shown(state.stopped))
    if state.count("paused") or (state.count("running") and not state.stopped):
        short = state.id[:8]
        raise SessionPausedError(
            f"study {short}: {state.count('paused')} cell(s) paused, "
            f"{state.count('running')} cut off",
            hint=f"continue with: forge-ledger study resume {short}",
        )


def _print_summary(state: StudyState) -> None:
    s = state.summary()
    click.echo(f"study {state.id} · {printable(state.name)} · {state.status}")
    click.echo(
        f"cells {s['cells']}: {s['done']} done, {s['failed']} failed, {s['paused']} paused, "
        f"{s['running']} cut off, {s['pending']} not started · cost "
        f"{money(state.spent_usd)}{_budget_text(state)} · calls {state.calls}"
    )


def _budget_text(state: StudyState) -> str:
    usd = state.plan.budget.usd
    return f" of ${usd:g}" if usd is not None else ""


class _Display:
    """One live display for the whole study (on a terminal): cells by status, the cost
    against the budget, the time left, and the cells running now."""

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        self._live: Live | None = None

    def __enter__(self) -> _Display:
        if self.enabled:
            self._live = Live(console=err_console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)

    def update(self, progress: Progress) -> None:
        if self._live is not None:
            self._live.update(_render(progress))


def _render(progress: Progress) -> Group:
    s = progress.state
    counts = progress.counts()
    head = Text(f"study {s.id[:8]} · ") + shown(s.name)
    line = " · ".join(f"{n} {k}" for k, n in counts.items()) + f" · of {len(s.cells)} cells"
    money_line = f"cost {money(progress.spent_usd)}{_budget_text(s)} · calls {s.calls}"
    left = progress.time_left_secs
    if left is not None:
        money_line += f" · time left {int(left) // 60}m{int(left) % 60:02d}s"
    table = Table(box=None, show_header=True, pad_edge=False)
    for col in ("cell", "session", "cost", "topic"):
        table.add_column(col, no_wrap=col != "topic")
    for cell_id, cost in sorted(progress.active.items()):
        cell = s.cells[cell_id]
        title = s.plan.topics[cell.spec.topic].title
        add_row(table, cell_id, (cell.session_id or "")[:8], money(cost), title)
    parts: list[Any] = [head, Text(line), Text(money_line)]
    if s.stopped:
        parts.append(Text("stopped: ", style="yellow") + shown(s.stopped))
    return Group(*parts, table)


@study.command("status")
@click.argument("study_ref", metavar="STUDY")
@click.option(
    "--at-event",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="The study as of its event N (time travel).",
)
@store_option
@json_option
def status_cmd(study_ref: str, at_event: int | None, store: str | None, as_json: bool) -> None:
    """Every cell of STUDY: its status, session, outcome, cost and calls."""
    from ..study import StudyStream

    with open_ledger(store, create=False) as ledger:
        state = StudyStream(ledger).state(study_ref, at_event=at_event)
    if as_json:
        emit_json({**state.summary(), "cells": [c.as_json() for c in state.cells.values()]})
        return
    _print_summary(state)
    if state.stopped:
        err_console.print(Text("stopped: ", style="yellow") + shown(state.stopped))
    table = Table(title_justify="left")
    for col in ("cell", "status", "session", "outcome", "cost", "calls"):
        table.add_column(col, justify="right" if col in ("cost", "calls") else "left")
    for c in state.cells.values():
        add_row(
            table,
            c.spec.id,
            c.status,
            (c.session_id or "")[:8],
            c.outcome or c.reason,
            money(c.cost_usd),
            str(c.calls),
        )
    print_table(table)


@study.command("list")
@store_option
@json_option
def list_cmd(store: str | None, as_json: bool) -> None:
    """The studies in the store (oldest first)."""
    from ..study import StudyStream

    with open_ledger(store, create=False) as ledger:
        stream = StudyStream(ledger)
        rows = [stream.state(sid).summary() for sid in stream.study_ids()]
    if as_json:
        emit_json(rows)
        return
    table = Table(title_justify="left")
    for col in ("id", "name", "status", "cells", "done", "failed", "cost"):
        table.add_column(col)
    for r in rows:
        add_row(
            table,
            r["study_id"][:8],
            r["name"],
            r["status"],
            str(r["cells"]),
            str(r["done"]),
            str(r["failed"]),
            money(r["spent_usd"]),
        )
    print_table(table)


@study.command("verify")
@click.argument("study_ref", metavar="STUDY")
@store_option
def verify_cmd(study_ref: str, store: str | None) -> None:
    """Recompute the hash chain of STUDY's events; exit 1 at the first break."""
    from ..study import StudyStream

    with open_ledger(store, create=False) as ledger:
        stream = StudyStream(ledger)
        sid = stream.resolve(study_ref)
        problems = stream.verify(sid)
        events = stream.state(sid).version if not problems else 0
    if problems:
        raise ChainBrokenError(f"study {str(sid)[:8]}: {problems[0]}")
    click.echo(f"study {sid}: {events} events, chain intact")


study.add_command(export_cmd)
study.add_command(report_cmd)
