"""``forge-ledger study``: run many sessions from one plan, see where a study stands.

``study run PLAN`` checks the plan (every problem, one line each, before anything is
recorded), records it (or finds it recorded: running the same plan again continues it) and
runs its cells concurrently with one progress display; ``study resume`` continues a recorded
study by id; ``status``, ``list`` and ``verify`` read. What a study does it does through
:mod:`forge_ledger.study`; this module parses options, shows progress and picks exit codes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ..errors import (
    ChainBrokenError,
    RunInterrupted,
    SessionPausedError,
    StoreUnavailableError,
    UsageError,
)
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


def _concurrency(help: str) -> Callable[[Any], Any]:
    """``--concurrency/-j``: how many cells one process runs at once."""
    return click.option(
        "--concurrency",
        "-j",
        type=click.IntRange(1, 256),
        default=4,
        show_default=True,
        metavar="N",
        help=help,
    )


_IN_ONE_PROCESS = "Cells run at once (asyncio tasks sharing one provider and store)."


def _quiet(f: Any) -> Any:
    return click.option("--quiet", "-q", is_flag=True, help="No progress display.")(f)


def _processes(f: Any) -> Any:
    """``--processes N``: local processes sharing the study's cells (SQLite store)."""
    return click.option(
        "--processes",
        "-p",
        type=click.IntRange(1, 64),
        default=1,
        show_default=True,
        metavar="N",
        help="Processes on this machine running the cells (each --concurrency at once) on the "
        "same SQLite store: past one CPU core.",
    )(f)


def _share(text: str) -> tuple[int, int]:
    """The hidden ``--share K/N`` a process started by ``--processes`` is given."""
    k, _, n = text.partition("/")
    if not (k.isdigit() and n.isdigit() and int(k) < int(n)):
        raise UsageError(f"--share {text!r}: give K/N with 0 <= K < N")
    return int(k), int(n)


@study.command("run")
@click.argument("plan", type=click.Path(dir_okay=False, path_type=Path))
@_concurrency(_IN_ONE_PROCESS)
@_processes
@_quiet
@click.option(
    "--queue",
    is_flag=True,
    help="Put each cell in the job queue of the PostgreSQL store instead of running it here: "
    "'forge-ledger worker' processes, on any machines, run them.",
)
@click.option(
    "--rate",
    "rates",
    multiple=True,
    metavar="MODEL=N/min",
    help="With --queue: at most N calls to MODEL start in any minute, across all workers "
    "(repeatable).",
)
@store_option
@json_option
@survives_closed_output
def run_cmd(
    plan: Path,
    concurrency: int,
    processes: int,
    quiet: bool,
    queue: bool,
    rates: tuple[str, ...],
    store: str | None,
    as_json: bool,
) -> None:
    """Run the study of PLAN: the cells not finished yet (the same plan again continues it)."""
    from ..app.study_processes import refused
    from ..ledger.store import resolve_store
    from ..study import load_plan, plan_study
    from ..study.rates import parse_rates

    limits = parse_rates(rates)
    if limits and not queue:
        raise UsageError(
            "--rate limits the calls of queued cells", hint="add --queue (a PostgreSQL store)"
        )
    if queue and resolve_store(store).kind != "postgres":
        raise UsageError(
            "--queue needs a PostgreSQL store; nothing was written",
            hint="give --store postgresql://HOST:PORT/DB, or run without --queue",
        )
    refused(resolve_store(store), processes=processes)
    checked = load_plan(plan)
    with open_ledger(store, create=True) as ledger:
        study_id = plan_study(ledger, checked)
        if queue:
            _queue(ledger, str(study_id), limits, as_json=as_json)
            return
        _run(ledger, str(study_id), concurrency, processes=processes, quiet=quiet, as_json=as_json)


def _queue(ledger: Ledger, ref: str, rates: dict[str, int], *, as_json: bool) -> None:
    """Queue the study's unfinished cells as jobs; say how to run them."""
    from ..study import StudyStream
    from ..study.queue import queue_cells
    from ..study.runner import unfinished_cells

    state = StudyStream(ledger).state(ref)
    queued = asyncio.run(queue_cells(ledger.location, state, rates=rates))
    if as_json:
        emit_json({**state.summary(), "queued": queued})
        return
    click.echo(
        f"study {state.id} · {printable(state.name)}: {len(queued)} cell(s) queued, "
        f"{len(state.cells) - len(unfinished_cells(state))} finished"
    )
    click.echo(
        f"run them with: forge-ledger worker --store {printable(ledger.location.display)}"
        " (on any number of machines)"
    )


@study.command("resume")
@click.argument("study_ref", metavar="STUDY")
@_concurrency(_IN_ONE_PROCESS)
@_processes
@click.option("--share", default="0/1", hidden=True)
@_quiet
@store_option
@json_option
@survives_closed_output
def resume_cmd(
    study_ref: str,
    concurrency: int,
    processes: int,
    share: str,
    quiet: bool,
    store: str | None,
    as_json: bool,
) -> None:
    """Continue STUDY (id, prefix or name): resume its cut-off and paused cells, start the rest."""
    with open_ledger(store, create=False) as ledger:
        _run(
            ledger,
            study_ref,
            concurrency,
            processes=processes,
            share=_share(share),
            quiet=quiet,
            as_json=as_json,
        )


def _run(
    ledger: Ledger,
    ref: str,
    concurrency: int,
    *,
    processes: int = 1,
    share: tuple[int, int] = (0, 1),
    quiet: bool,
    as_json: bool,
) -> None:
    from ..app.studies import continue_study
    from ..study import StudyStream

    stream = StudyStream(ledger)
    study_id = stream.resolve(ref)
    short = str(study_id)[:8]
    display = _Display(enabled=not quiet and err_console.is_terminal)
    if not stream.state(study_id).finished:
        _ready_for_long_work()

    async def go() -> StudyState:
        interrupt_reported_once(asyncio.get_running_loop())
        return await continue_study(
            ledger,
            study_id,
            concurrency=concurrency,
            hmac_key=hmac_key(),
            on_progress=display.update if display.enabled else None,
            processes=processes,
            share=share,
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


def _ready_for_long_work() -> None:
    """Load the model client, then mark everything made so far long-lived (see
    :func:`~forge_ledger._collector.long_lived_so_far`): this process runs cells until the
    study ends."""
    from .._collector import long_lived_so_far
    from ..providers import preload_client

    preload_client()
    long_lived_so_far()


def _outcome(state: StudyState, *, as_json: bool) -> None:
    """The study's summary; then, if cells are paused, the one line saying how to go on."""
    if as_json:
        emit_json(state.summary())
    else:
        _print_summary(state.summary())
    if state.stopped:
        err_console.print(Text("stopped: ", style="yellow") + shown(state.stopped))
    if state.count("paused") or (state.count("running") and not state.stopped):
        short = state.id[:8]
        raise SessionPausedError(
            f"study {short}: {state.count('paused')} cell(s) paused, "
            f"{state.count('running')} cut off",
            hint=f"continue with: forge-ledger study resume {short}",
        )


def _print_summary(s: dict[str, Any]) -> None:
    """The study's two summary lines, from :meth:`~forge_ledger.study.StudyState.summary`."""
    click.echo(f"study {s['study_id']} · {printable(s['name'])} · {s['status']}")
    budget = _budget_text(s["budget"].get("usd"))
    click.echo(
        f"cells {s['cells']}: {s['done']} done, {s['failed']} failed, {s['paused']} paused, "
        f"{s['running']} cut off, {s['pending']} not started · cost "
        f"{money(s['spent_usd'])}{budget} · calls {s['calls']}"
    )


def _budget_text(usd: float | None) -> str:
    return f" of ${usd:g}" if usd is not None else ""


class _Display:
    """One live display for the whole study (on a terminal, stderr unless ``console`` says
    otherwise): cells by status, the cost against the budget, the time left, and the cells
    running now.

    Drawn twice a second, from what the latest progress said: it shares the study's
    process (and core), and every session's every step reports progress. Drawing more
    often, or on every report, took about a twentieth of a study's CPU."""

    def __init__(
        self, *, enabled: bool, console: Console | None = None, refresh_secs: float = 0.5
    ) -> None:
        self.enabled = enabled
        self.console = console or err_console
        self.refresh_secs = refresh_secs
        self._live: Live | None = None
        self._latest: Progress | None = None
        self._shown_at = -refresh_secs

    def __enter__(self) -> _Display:
        if self.enabled:
            self._live = Live(
                console=self.console, refresh_per_second=1 / self.refresh_secs, transient=False
            )
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            if self._latest is not None:  # the last word, however soon after the one before
                self._live.update(_render(self._latest))
            self._live.__exit__(None, None, None)

    def update(self, progress: Progress) -> None:
        if self._live is None:
            return
        self._latest = progress
        now = time.monotonic()
        if now - self._shown_at >= self.refresh_secs:
            self._shown_at = now
            self._live.update(_render(progress))


def _render(progress: Progress) -> Group:
    s = progress.state
    counts = progress.counts()
    head = Text(f"study {s.id[:8]} · ") + shown(s.name)
    line = " · ".join(f"{n} {k}" for k, n in counts.items()) + f" · of {len(s.cells)} cells"
    budget = _budget_text(s.plan.budget.usd)
    money_line = f"cost {money(progress.spent_usd)}{budget} · calls {s.calls}"
    left = progress.time_left_secs
    if left is not None:
        money_line += f" · time left {int(left) // 60}m{int(left) % 60:02d}s"
    table = Table(box=None, show_header=True, pad_edge=False)
    for col in ("cell", "session", "cost", "topic"):
        table.add_column(col, no_wrap=col != "topic")
    for cell_id, cost in sorted(progress.running().items()):
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
    """Every cell of STUDY: its status, session, outcome, cost and calls.

    Read from the read model's study tables when they are current for the study (as
    ``projections update`` or ``browse`` leave them), else from the study's events."""
    from ..app.study_views import study_status

    with open_ledger(store, create=False) as ledger:
        view = study_status(ledger, study_ref, at_event=at_event)
        s = view.summary
        jobs = _jobs(ledger, s["study_id"]) if at_event is None else {}
    if as_json:
        cells = [{**c, "job": jobs.get(c["cell"])} for c in view.cells]
        counts = {k: sum(1 for j in jobs.values() if j == k) for k in ("queued", "taken")}
        emit_json({**s, "jobs": counts, "cells": cells})
        return
    _print_summary(s)
    if jobs:
        taken = sum(1 for j in jobs.values() if j == "taken")
        click.echo(f"jobs: {len(jobs) - taken} queued, {taken} taken by a worker")
    if s["stopped"]:
        err_console.print(Text("stopped: ", style="yellow") + shown(s["stopped"]))
    table = Table(title_justify="left")
    for col in ("cell", "status", "job", "session", "outcome", "cost", "calls"):
        table.add_column(col, justify="right" if col in ("cost", "calls") else "left")
    for c in view.cells:
        add_row(
            table,
            c["cell"],
            c["status"],
            jobs.get(c["cell"], ""),
            (c["session_id"] or "")[:8],
            c["outcome"] or c["reason"] or "",
            money(c["cost_usd"]),
            str(c["calls"]),
        )
    print_table(table)


def _jobs(ledger: Ledger, study_id: str) -> dict[str, str]:
    """The study's cells waiting in the job queue or taken by a worker (PostgreSQL only)."""
    if ledger.location.kind != "postgres":
        return {}
    from ..study.queue import queued_jobs

    return asyncio.run(queued_jobs(ledger.location, study_id))


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


@cli.command("worker")
@_concurrency("Cells this worker runs at once.")
@click.option(
    "--grace",
    type=click.FloatRange(0, 3600),
    default=10.0,
    show_default=True,
    metavar="SECS",
    help="After Ctrl-C, how long running cells may go on before they are cut off (left "
    "resumable, their jobs back in the queue).",
)
@_quiet
@store_option
def worker_cmd(concurrency: int, grace: float, quiet: bool, store: str | None) -> None:
    """Run queued study cells from the PostgreSQL store until Ctrl-C.

    Start any number of workers, on any machines, on the store 'study run PLAN --queue' used.
    """
    from ..app.studies import run_worker

    def on_cell(cell: str, status: str) -> None:
        if not quiet:
            err_console.print(f"cell {printable(cell)}: {printable(status)}", markup=False)

    def on_stopping() -> None:
        err_console.print(
            f"stopping: no new cells; running ones get {grace:g} s to end", markup=False
        )

    try:
        interrupted = asyncio.run(
            run_worker(
                store,
                concurrency=concurrency,
                grace_secs=grace,
                hmac_key=hmac_key(),
                on_cell=on_cell,
                on_stopping=on_stopping,
                signals=True,
            )
        )
    except StoreUnavailableError:
        abandoned_calls_are_quiet()  # the calls cut off with the store are redone
        raise
    if interrupted:
        raise RunInterrupted(
            "interrupted; any cell the worker cut off is back in the queue",
            hint="start a worker again to go on: forge-ledger worker --store URL",
        )
