"""Plan a study and run its cells concurrently in one process, sharing one provider and ledger.

:func:`plan_study` records a plan once: the same plan given again (by name, unchanged)
continues the study already recorded, so ``study run PLAN`` after a crash or Ctrl-C picks up
where it stood. :func:`run_study` runs the cells ``concurrency`` at a time, as asyncio tasks,
each through :func:`~forge_ledger.study.cells.run_cell`: cells cut off earlier (assigned,
paused) come first, then pending ones, until the budget stops new cells. Nothing here needs to
be undone when the process dies: every fact is in the study's events and its sessions'.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any
from uuid import UUID, uuid4

from ..clock import Clock, SystemClock
from ..errors import ConfigError
from ..ledger.store import lock_timeout
from . import events as sev
from ._sessions import SessionFunctions, SessionHooks
from .calls import CountedCalls, FileCount, MemoryCount
from .cells import StudyRun, run_cell
from .plan import StudyPlan
from .state import StudyState
from .stream import StudyStream

if TYPE_CHECKING:
    from ..domain.state import SessionState
    from ..ledger import Ledger
    from ..providers import Provider

__all__ = [
    "Progress",
    "finished_event",
    "plan_study",
    "rotated",
    "run_study",
    "unfinished_cells",
]

_POLL_SECS = 1.0
"""How often a cell that waits (for money held, or for its parent cell) re-reads the study."""


def plan_study(
    ledger: Ledger,
    plan: StudyPlan,
    *,
    clock: Clock | None = None,
    new_id: Callable[[], UUID] = uuid4,
) -> UUID:
    """The study of ``plan``: the one already recorded under its name with the same plan, or a
    new one. The same name with another plan is refused (nothing is recorded)."""
    stream = StudyStream(ledger)
    wanted = plan.model_dump(mode="json")
    for sid in reversed(stream.study_ids()):
        first = next(stream.records(sid, upto=1))
        if first.data["name"] != plan.name:
            continue
        if first.data["plan"] == wanted:
            return sid
        raise ConfigError(
            f"study {plan.name!r} ({str(sid)[:8]}) was recorded with another plan",
            hint="give the changed plan another name, or continue the recorded one with "
            f"'forge-ledger study resume {str(sid)[:8]}'",
        )
    sid = new_id()
    planned = sev.StudyPlanned(name=plan.name, plan=wanted, cells=tuple(plan.cells()))
    stream.append(None, planned, study_id=sid, at=(clock or SystemClock()).now())
    return sid


@dataclass
class Progress:
    """A study as its display shows it while it runs."""

    state: StudyState
    active: dict[str, float] = field(default_factory=dict)
    """Cells running in this process, with what each session has spent so far."""
    now: datetime | None = None
    shared: bool = False
    """Whether other processes run the study's cells too: then a cell assigned and not
    finished is counted as running (elsewhere), not as waiting to be taken."""

    def counts(self) -> dict[str, int]:
        s = self.state
        left = Counter(c.status for i, c in s.cells.items() if i not in self.active)
        elsewhere = left["running"] if self.shared else 0
        return {
            "done": s.count("done"),
            "running": len(self.active) + elsewhere,
            "paused": s.count("paused"),
            "failed": s.count("failed"),
            "waiting": left["pending"] + left["running"] - elsewhere,
        }

    def running(self) -> dict[str, float]:
        """The cells running, with what each has spent as far as this process knows: its own
        (live), and when shared, those of the other processes (as recorded)."""
        cells = self.state.cells
        elsewhere = {
            c: cell.cost_usd
            for c, cell in cells.items()
            if self.shared and cell.status == "running" and c not in self.active
        }
        return {**elsewhere, **self.active}

    @property
    def spent_usd(self) -> float:
        cells = self.state.cells
        return self.state.spent_usd + sum(
            max(0.0, cost - cells[c].cost_usd) for c, cost in self.active.items()
        )

    @property
    def time_left_secs(self) -> float | None:
        wall = self.state.plan.budget.wall_secs
        if wall is None or self.now is None:
            return None
        return max(0.0, wall - (self.now - self.state.planned_at).total_seconds())


class _Live:
    """Keeps :class:`Progress` current and hands it to the caller's callback."""

    def __init__(
        self,
        run: StudyRun,
        on_progress: Callable[[Progress], Any] | None,
        *,
        shared: bool = False,
    ) -> None:
        self.run = run
        self.on_progress = on_progress
        self.progress = Progress(run.state, shared=shared)
        self.ended = 0
        self.cell_ended = asyncio.Condition()

    def changed(self) -> None:
        self.progress.state = self.run.state
        self.progress.now = self.run.clock.now() if self.on_progress else None
        if self.on_progress is not None:
            self.on_progress(self.progress)

    async def run_one(
        self,
        cell_id: str,
        *,
        provider: Provider,
        sessions: SessionFunctions,
        hooks: SessionHooks,
    ) -> None:
        """Run the cell; while it must wait for money a running cell holds, wait for a cell
        to end and ask again."""
        active = self.progress.active
        while not (self.run.state.cells[cell_id].status == "pending" and self.run.state.stopped):
            ended = self.ended
            may_wait = bool(active)
            active[cell_id] = self.run.state.cells[cell_id].cost_usd
            self.changed()
            try:
                cell = await run_cell(
                    self.run,
                    cell_id,
                    provider=provider,
                    sessions=sessions,
                    hooks=hooks,
                    may_wait=may_wait,
                )
            finally:
                active.pop(cell_id, None)
                self.changed()
            if cell is not None:
                async with self.cell_ended:
                    self.ended += 1
                    self.cell_ended.notify_all()
                return
            async with self.cell_ended:  # or another process ends the cell it waits for
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        self.cell_ended.wait_for(partial(self.moved_on, ended)), _POLL_SECS
                    )
            self.run.reload()

    async def watch(self, tasks: list[asyncio.Task[None]], every_secs: float) -> None:
        """Re-read the study every ``every_secs`` until ``tasks`` end, so that the display
        shows what other processes record too."""
        while not all(t.done() for t in tasks):
            await asyncio.wait(tasks, timeout=every_secs)
            self.run.reload()
            self.changed()

    def moved_on(self, seen: int) -> bool:
        """Whether a cell ended since the count was ``seen``."""
        return self.ended != seen

    def hooks(self, cell_id: str, base: SessionHooks) -> SessionHooks:
        def checkpoint(state: SessionState) -> None:
            self.progress.active[cell_id] = state.cost_usd
            if base.on_checkpoint is not None:
                base.on_checkpoint(state)
            self.changed()

        return SessionHooks(clock=base.clock, on_checkpoint=checkpoint, hmac_key=base.hmac_key)


def unfinished_cells(state: StudyState) -> list[str]:
    """The cells to take, in order: those cut off or paused, then those not started, each
    counterfactual cell after every plain one (its parent is taken before it)."""
    order = {"running": 0, "paused": 0, "pending": 1}
    todo = [c for c in state.cells.values() if c.status in order]
    return [
        c.spec.id for c in sorted(todo, key=lambda c: (order[c.status], c.spec.parent is not None))
    ]


def rotated(state: StudyState, cells: list[str], share: tuple[int, int]) -> list[str]:
    """``cells`` (in :func:`unfinished_cells`' order) for process ``k`` of ``n``: each run of
    cells of one kind (cut off or paused, not started, counterfactual) rotated by ``k/n`` of
    its length, so that processes sharing a study start on different cells and still take
    a counterfactual cell's parent before it."""
    k, n = share
    if n <= 1:
        return cells
    cell_of = state.cells

    def kind(c: str) -> tuple[bool, bool]:
        return cell_of[c].status == "pending", cell_of[c].spec.parent is not None

    out: list[str] = []
    for _, run in itertools.groupby(cells, key=kind):
        group = list(run)
        at = k * len(group) // n
        out += group[at:] + group[:at]
    return out


async def run_study(
    ledger: Ledger,
    study: str | UUID,
    *,
    provider: Provider,
    concurrency: int = 4,
    sessions: SessionFunctions,
    hooks: SessionHooks | None = None,
    clock: Clock | None = None,
    on_progress: Callable[[Progress], Any] | None = None,
    share: tuple[int, int] = (0, 1),
    watch_secs: float | None = None,
) -> StudyState:
    """Run every cell not finished yet, ``concurrency`` at a time; returns the study's state
    (``stopped`` says why cells were left pending, if the budget ran out).

    ``share`` ``(k, n)``: this is process ``k`` of ``n`` running the study at once; it takes
    the cells in the order :func:`rotated` gives it. ``watch_secs``: re-read the study that
    often for ``on_progress`` (to show what the other processes do)."""
    if concurrency < 1:
        raise ConfigError(f"--concurrency {concurrency}: give 1 or more")
    base = hooks or SessionHooks(clock=clock)
    run = StudyRun(ledger, StudyStream(ledger).resolve(study), clock=clock or SystemClock())
    live = _Live(run, on_progress, shared=share[1] > 1)
    todo = iter(rotated(run.state, unfinished_cells(run.state), share))
    budget = run.state.plan.budget
    counted = None if budget.calls is None else CountedCalls(provider, budget, _call_count(run))

    async def worker() -> None:
        for cell_id in todo:  # one shared iterator: each cell is taken by one task
            await live.run_one(
                cell_id,
                provider=counted or provider,
                sessions=sessions,
                hooks=live.hooks(cell_id, base),
            )
            if counted is not None and counted.refused:
                run.stop(counted.refused)

    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(worker()) for _ in range(concurrency)]
            if watch_secs is not None and on_progress is not None:
                group.create_task(live.watch(tasks, watch_secs))
    except BaseExceptionGroup as failed:  # the first cell's failure is the study's (one line)
        raise failed.exceptions[0] from None
    run.record(finished_event)
    live.changed()
    return run.state


def _call_count(run: StudyRun) -> FileCount | MemoryCount:
    """Where this study's calls are counted: in a SQLite store's file, which every process
    running its cells shares, else in this process."""
    where = run.ledger.location
    if where.kind == "sqlite" and where.path is not None:
        return FileCount(where.path, str(run.study_id), run.state.calls, timeout=lock_timeout())
    return MemoryCount(run.state.calls)


def finished_event(state: StudyState) -> sev.StudyPayload | None:
    """``StudyFinished`` once every cell is done or failed (and not before, nor twice)."""
    if state.finished or any(c.status not in ("done", "failed") for c in state.cells.values()):
        return None
    return sev.StudyFinished()
