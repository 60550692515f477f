"""Commands over projections: ``projections status|rebuild|update``, ``dissent``, ``trail``.

``dissent`` and ``trail`` fold the session's state from the ledger (snapshots keep that
cheap) and print the pure dissent log / consensus trail; ``projections`` manages the
read-model database beside the store (the one Datasette serves). None imports litellm.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import click
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from ..app.audit_views import AUDITS_LOG, AuditViews
from ..app.study_views import SESSIONS_LOG, STUDY_LOG, StudyViews
from ..errors import SessionDamagedError, StoreMissingError, StudyDamagedError
from ..ledger import Ledger, resolve_store
from ..ledger.outputs import store_outputs
from ..ledger.store import lock_timeout
from ..projections import (
    ProjectionRunner,
    consensus_trail,
    dissent_log,
    open_views,
)
from . import cli
from ._common import (
    add_row,
    emit_json,
    err_console,
    json_option,
    open_ledger,
    out_console,
    print_table,
    printable,
    store_option,
)
from ._integrity import check_chain

__all__ = ["dissent", "projections", "trail"]


@cli.group()
def projections() -> None:
    """Read-model projections (SQLite file beside the store, browsable with Datasette)."""


@projections.command("status")
@store_option
@json_option
def projections_status(store: str | None, as_json: bool) -> None:
    """Each projection's version, position and lag behind the ledger."""
    with open_ledger(store) as ledger:
        path = store_outputs(ledger.location).views
        db = open_views(path, lock_timeout=lock_timeout())
        try:
            rows = [
                *ProjectionRunner(ledger, db).status(),
                *StudyViews(ledger, db).status(),
                *AuditViews(ledger, db).status(),
            ]
        finally:
            db.close()
    if as_json:
        emit_json({"read_model": str(path), "projections": [r.as_json() for r in rows]})
        return
    table = Table(title=f"projections in {printable(str(path))}")
    for col in ("name", "version", "position", "head", "lag", "state"):
        table.add_column(col)
    for r in rows:
        j = r.as_json()
        state = (
            "not built" if r.stored_version is None
            else "rebuild needed" if j["needs_rebuild"]
            else "behind" if r.lag
            else "current"
        )
        if r.skipped:  # current for everything else; 'projections update' names them
            state += f", {r.skipped} skipped as damaged"
        table.add_row(r.name, str(r.version), str(j["position"]), str(r.head), str(r.lag), state)
    print_table(table)


@contextmanager
def _progress(runner: ProjectionRunner, *, rebuilding: bool) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr while events are applied (only on a terminal)."""
    rows = runner.status()
    head = max((r.head for r in rows), default=0)
    todo = head if rebuilding else max((r.lag for r in rows), default=0)
    if not err_console.is_terminal or todo < 2000:
        yield lambda _: None
        return
    with Progress(
        TextColumn("applying events"), BarColumn(), MofNCompleteColumn(),
        TimeRemainingColumn(), console=err_console, transient=True,
    ) as bar:
        task = bar.add_task("events", total=todo)
        yield lambda k: bar.advance(task, k)


def _open_when_there(store: str | None, interval: float) -> Ledger:
    """A follower started before the first ``run`` waits for the store instead of failing:
    it polls until a ledger is there (Ctrl-C stops it, like following itself)."""
    announced = False
    while True:
        try:
            return open_ledger(store)
        except StoreMissingError:
            if not announced:
                where = resolve_store(store).display
                err_console.print(f"waiting for a ledger at {printable(where)} (Ctrl-C stops)",
                                  markup=False)
                announced = True
            time.sleep(interval)


Damaged = SessionDamagedError | StudyDamagedError
"""A session or a study a catch-up skipped, its events damaged."""


def _key(e: Damaged) -> tuple[str, str]:
    """("session_id", id) or ("study_id", id): what ``--json`` names it by."""
    if isinstance(e, SessionDamagedError):
        return "session_id", e.session_id
    return "study_id", e.study_id


def _damaged_json(damaged: Sequence[Damaged]) -> dict[str, object]:
    """The sessions and studies a catch-up skipped, as ``--json`` adds them (the key only
    when some were): each as a damaged session's row in ``sessions --json`` says where and
    how."""
    if not damaged:
        return {}
    return {
        "damaged": [
            dict([_key(e), ("damaged", f"at event {e.position}: {e.problem}")]) for e in damaged
        ]
    }


def _end_if_damaged(damaged: Sequence[Damaged]) -> None:
    """Once everything else is up to date, the first session or study skipped as damaged
    is the command's one error line (saying how many more there are), and its exit code."""
    if not damaged:
        return
    first, rest = damaged[0], damaged[1:]
    sessions = sum(isinstance(e, SessionDamagedError) for e in rest)
    counts = [(sessions, "session(s)"), (len(rest) - sessions, "studies")]
    more = " and ".join(f"{n} more {what}" for n, what in counts if n)
    problem = f"{first.problem} ({more} damaged)" if more else first.problem
    raise type(first)(_key(first)[1], first.position, problem)


def _catch_up_following(
    runner: ProjectionRunner, studies: StudyViews, audits: AuditViews
) -> Callable[[], int]:
    """The study tables' and the audits' catch-up for a follower, run after each of the
    projections': a session or study skipped as damaged is one line on stderr when first met,
    and the follower goes on (it is tried again each time)."""
    told: set[tuple[str, str]] = set()

    def catch_up() -> int:
        n = studies.catch_up()
        audits.catch_up()
        damaged: list[Damaged] = [*runner.damaged, *studies.damaged]
        for e in damaged:
            if _key(e) not in told:
                told.add(_key(e))
                err_console.print(f"error: {printable(e.one_line())}", markup=False)
        told.intersection_update(_key(e) for e in damaged)
        return n

    return catch_up


def _run(store: str | None, *, rebuild: str | None, everything: bool, batch_size: int,
         follow: bool = False, interval: float = 1.0) -> tuple[int, list[Damaged]]:
    """Bring the projections and the study tables up to date; returns how many events were
    applied and the sessions and studies skipped as damaged (a follower never returns)."""
    with _open_when_there(store, interval) if follow else open_ledger(store) as ledger:
        db = open_views(store_outputs(ledger.location).views, lock_timeout=lock_timeout())
        try:
            runner = ProjectionRunner(ledger, db)
            studies = StudyViews(ledger, db)
            audits = AuditViews(ledger, db)
            n = 0
            with _progress(runner, rebuilding=everything or rebuild is not None) as advance:
                if rebuild in (SESSIONS_LOG, STUDY_LOG):
                    studies.rebuild()
                elif rebuild == AUDITS_LOG:
                    audits.rebuild()
                elif everything or rebuild is not None:
                    n = runner.rebuild(
                        [rebuild] if rebuild else None, batch_size=batch_size, on_batch=advance
                    )
                    if everything:
                        studies.rebuild()
                        audits.rebuild()
                else:
                    n = runner.catch_up(batch_size=batch_size, on_batch=advance)
            if not everything and rebuild is None and not follow:
                studies.catch_up()
                audits.catch_up()
            if follow:
                also = _catch_up_following(runner, studies, audits)
                also()
                err_console.print(
                    f"following {printable(ledger.location.display)} (Ctrl-C stops)"
                )
                waiter = ledger.event_waiter()
                try:
                    runner.follow(
                        interval=interval,
                        batch_size=batch_size,
                        on_batch=lambda k: err_console.print(f"applied {k} events"),
                        wait=waiter or time.sleep,
                        also=also,
                    )
                finally:
                    if waiter is not None:
                        waiter.close()
            damaged: list[Damaged] = [*runner.damaged, *studies.damaged]
            return n, damaged
        finally:
            db.close()


@projections.command("rebuild")
@click.argument("name", required=False)
@click.option("--batch-size", default=1000, show_default=True, type=click.IntRange(min=1))
@store_option
@json_option
def projections_rebuild(name: str | None, batch_size: int, store: str | None,
                        as_json: bool) -> None:
    """Empty NAME (default: every projection, the study tables and the audits) and refold it
    from the first event (NAME ``study_tables`` computes the study tables again, ``audits``
    every session's audit)."""
    n, damaged = _run(store, rebuild=name, everything=name is None, batch_size=batch_size)
    if as_json:
        emit_json({"rebuilt": name or "all", "events": n, **_damaged_json(damaged)})
    else:
        err_console.print(f"rebuilt {printable(name or 'all projections')} from {n} events")
    _end_if_damaged(damaged)


@projections.command("update")
@click.option("--batch-size", default=1000, show_default=True, type=click.IntRange(min=1))
@click.option("--follow", is_flag=True,
              help="Keep applying new events: woken by each commit on PostgreSQL "
                   "(LISTEN/NOTIFY), polling on SQLite.")
@click.option("--interval", default=1.0, show_default=True, type=click.FloatRange(min=0.05),
              help="Seconds between polls with --follow (PostgreSQL: the longest wait "
                   "without a notification).")
@store_option
@json_option
def projections_update(batch_size: int, follow: bool, interval: float, store: str | None,
                       as_json: bool) -> None:
    """Apply new events to every projection (exactly once; safe to interrupt)."""
    n, damaged = _run(store, rebuild=None, everything=False, batch_size=batch_size,
                      follow=follow, interval=interval)
    if as_json:
        emit_json({"events": n, **_damaged_json(damaged)})
    else:
        err_console.print(f"applied {n} events")
    _end_if_damaged(damaged)


@cli.command()
@click.argument("session")
@click.option("--all", "include_closed", is_flag=True, help="Include closed divergences.")
@store_option
@json_option
def dissent(session: str, include_closed: bool, store: str | None, as_json: bool) -> None:
    """The dissent log of SESSION: divergences still open, with their lifecycle."""
    with open_ledger(store) as ledger:
        state = ledger.state(check_chain(ledger, session))
    entries = dissent_log(state, include_closed=include_closed)
    if as_json:
        emit_json({"session_id": state.id, "include_closed": include_closed,
                   "divergences": [e.as_json() for e in entries]})
        return
    if not entries:
        what = "divergences" if include_closed else "open divergences"
        out_console.print(f"no {what} in session {state.id}")
        return
    table = Table(title=f"dissent log of {state.id}")
    for col in ("id", "topic", "status", "strong", "opened", "rounds open", "positions",
                "lifecycle"):
        table.add_column(col)
    for e in entries:
        add_row(
            table,
            e.divergence_id, e.topic, e.status, "yes" if e.strong else "",
            f"round {e.opened_round} @{e.opened_position}", str(e.rounds_open),
            "; ".join(f"{p}: {s}" for p, s, _ in e.positions),
            " → ".join(f"{s.status}@{s.position}" for s in e.lifecycle),
        )
    print_table(table)


@cli.command()
@click.argument("session")
@store_option
@json_option
def trail(session: str, store: str | None, as_json: bool) -> None:
    """The consensus trail of SESSION: each vote, stance changes, who moved whom, conformity."""
    from ..projections.consensus import change_json, influence_json

    with open_ledger(store) as ledger:
        state = ledger.state(check_chain(ledger, session))
    rounds = consensus_trail(state)
    changes = [c for r in rounds for c in r.changes]
    if as_json:
        emit_json({
            "session_id": state.id,
            "rounds": [r.as_json() for r in rounds],
            "conformity": [change_json(c) for c in changes if c.conformity],
            "influence": [influence_json(i) for c in changes for i in c.influences],
        })
        return
    if not rounds:
        out_console.print(f"no convergence vote yet in session {state.id}")
        return
    for r in rounds:
        score = "not evaluated" if r.weighted_score is None else f"{r.weighted_score:.2f}"
        majority = "agrees" if r.majority_agrees else "does not agree"
        table = Table(
            title=f"round {r.round} (iteration {r.iteration}) — weighted score {score}; "
            f"majority {majority} ({r.agree} agree, {r.disagree} disagree, {r.partial} partial)"
            + (" [superseded]" if r.superseded else "")
        )
        for col in ("participant", "stance", "score", "concerns", "change", "preceded by",
                    "flag"):
            table.add_column(col)
        for v in r.votes:
            change = f"{v.previous_stance} → {v.stance}" if v.changed else ""
            pre = f"{v.preceded_by.kind} r{v.preceded_by.round}" if v.preceded_by else ""
            add_row(table, v.participant, v.stance, str(v.score), "; ".join(v.concerns),
                    change, pre, "conformity" if v.conformity else "")
        print_table(table)
        for c in r.changes:
            for i in c.influences:
                where = f"{i.kind} r{i.round}" if i.round is not None else "human input"
                out_console.print(printable(
                    f"  {i.author} moved {c.participant} ({where}, on "
                    f"{i.topic!r}): “{' '.join(i.quote.split())}”"
                ))
        if r.conformity:
            out_console.print(printable(
                "conformity (moved toward the previous majority with no new argument): "
                + ", ".join(r.conformity)
            ))
