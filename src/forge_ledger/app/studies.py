"""Studies from the application layer: plan one, run it, continue it (the CLI's ``study run``
and ``study resume``, a notebook), or take queued cells as a worker (``forge-ledger worker``).

A study's cells run through :data:`SESSIONS`, the same :func:`~.running.start_session` and
:func:`~.running.resume_session` every other entry point calls, so a cell gets the pre-flight,
lease, exports and seal of a session run by hand. The study package below this layer only
knows the shape of those functions (:class:`~forge_ledger.study._sessions.SessionFunctions`).
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ..errors import UsageError, exit_interrupted
from ..study._sessions import SessionHooks
from ..study.plan import StudyPlan, load_plan, plan_from_document
from ..study.runner import Progress, plan_study, run_study
from ..study.state import StudyState
from ..study.stream import StudyStream
from .autosave import keep_views_current_after_many
from .running import Runtime, resume_session, start_session
from .stores import Store, opened

if TYPE_CHECKING:
    from ..clock import Clock
    from ..domain.state import SessionState
    from ..domain.values import Participant, SessionConfig, Topic
    from ..ledger import Ledger
    from ..providers import Provider
    from ..study.queue import Worker

__all__ = [
    "SESSIONS",
    "STOP_SLACK_SECS",
    "as_plan",
    "continue_study",
    "run_plan",
    "run_worker",
    "study",
]


class _AssignedId:
    """The id source of a cell's session: the id its assignment recorded."""

    def __init__(self, session_id: UUID) -> None:
        self.session_id = session_id

    def new_id(self) -> UUID:
        return self.session_id


def _runtime(hooks: SessionHooks, session_id: UUID | None = None) -> Runtime:
    """A cell's session runs as one run by hand, but for what is kept beside the store: its
    YAML export and document file are written once it ends or pauses, not at each phase
    change, and the read model is brought up to date by the study at its end
    (:func:`continue_study`), not by each session. A study runs hundreds of sessions nobody
    reads mid-way (``study status`` tells how they stand), and writing the files at every
    phase change was a quarter of a study's CPU."""
    return Runtime(
        clock=hooks.clock,
        ids=_AssignedId(session_id) if session_id else None,
        on_checkpoint=hooks.on_checkpoint,
        hmac_key=hooks.hmac_key,
        files_when_stopped=True,
        views_when_stopped=False,
    )


class _AppSessions:
    """The study's session functions: this layer's own start and resume."""

    async def start(
        self,
        ledger: Ledger,
        session_id: UUID,
        topic: Topic,
        config: SessionConfig,
        participants: Sequence[Participant],
        *,
        provider: Provider,
        hooks: SessionHooks,
    ) -> SessionState:
        return await start_session(
            ledger,
            topic,
            config,
            participants,
            provider=provider,
            runtime=_runtime(hooks, session_id),
        )

    async def resume(
        self, ledger: Ledger, session_id: UUID, *, provider: Provider, hooks: SessionHooks
    ) -> SessionState:
        return await resume_session(ledger, session_id, provider=provider, runtime=_runtime(hooks))


SESSIONS = _AppSessions()
"""What every study runs its cells through (the runner in one process, a worker's job)."""


def as_plan(
    plan: StudyPlan | Path | str | Mapping[str, Any], *, base: Path | None = None
) -> StudyPlan:
    """A checked plan from a plan, a plan file's path, or a plan as a dict (its files
    relative to ``base``, the current folder by default)."""
    if isinstance(plan, StudyPlan):
        return plan
    if isinstance(plan, str | Path):
        return load_plan(Path(plan))
    return plan_from_document(dict(plan), base=base or Path.cwd())


async def continue_study(
    store: Store,
    study: str | UUID,
    *,
    provider: Provider | None = None,
    concurrency: int = 4,
    clock: Clock | None = None,
    hmac_key: bytes | None = None,
    on_progress: Callable[[Progress], Any] | None = None,
    processes: int = 1,
    share: tuple[int, int] = (0, 1),
) -> StudyState:
    """Run the cells of a recorded study (id, prefix or name) not finished yet; a provider
    made here is closed here. ``processes`` > 1 runs them over that many local processes
    (:mod:`.study_processes`); ``share`` is what one of those processes is given. When the
    run ends (not when it is interrupted), the read model beside a SQLite store is brought
    up to date, its audits included."""
    from ..providers import get_provider
    from .study_processes import in_processes, refused

    prov = provider or get_provider()
    try:
        with opened(store, create=False) as ledger:
            refused(ledger.location, processes=processes, provider=provider)
            run = partial(
                run_study,
                ledger,
                provider=prov,
                concurrency=concurrency,
                sessions=SESSIONS,
                clock=clock,
                hooks=SessionHooks(clock=clock, hmac_key=hmac_key),
                on_progress=on_progress,
            )
            if processes <= 1:
                state = await run(study, share=share)
            else:
                state = await in_processes(
                    ledger,
                    StudyStream(ledger).resolve(study),
                    run,
                    processes=processes,
                    concurrency=concurrency,
                    clock=clock,
                    on_progress=on_progress,
                )
            if share[1] <= 1:  # processes sharing a study leave it to the one that started them
                keep_views_current_after_many(ledger)
            return state
    finally:
        if provider is None:
            await prov.aclose()


async def run_plan(
    store: Store,
    plan: StudyPlan | Path | str | Mapping[str, Any],
    **options: Any,
) -> StudyState:
    """Record the plan (or find it recorded) and run its cells not finished yet; ``options``
    are :func:`continue_study`'s."""
    from .study_processes import refused

    checked = as_plan(plan)
    with opened(store, create=True) as ledger:
        processes, provider = options.get("processes", 1), options.get("provider")
        refused(ledger.location, processes=processes, provider=provider)
        study_id = plan_study(ledger, checked, clock=options.get("clock"))
        return await continue_study(ledger, study_id, **options)


def study(
    store: Store,
    plan: StudyPlan | Path | str | Mapping[str, Any],
    **options: Any,
) -> StudyState:
    """:func:`run_plan` to the end, from code that is not inside an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run_plan(store, plan, **options))
    raise UsageError(
        "study() cannot run inside a running event loop",
        hint="in a notebook, use: await forge_ledger.app.studies.run_plan(store, plan)",
    )


async def run_worker(
    store: Store,
    *,
    provider: Provider | None = None,
    concurrency: int = 4,
    grace_secs: float = 10.0,
    hmac_key: bytes | None = None,
    on_cell: Callable[[str, str], Any] | None = None,
    on_stopping: Callable[[], Any] | None = None,
    signals: bool = False,
) -> bool:
    """Take queued study cells from the PostgreSQL ``store`` and run them until stopped;
    returns whether a signal stopped it.

    Each cell runs through :data:`SESSIONS`, as in ``study run``. ``on_cell(cell, status)``
    hears of each cell that ends here. With ``signals`` (a process's main thread), the first
    SIGINT or SIGTERM stops taking jobs and gives running cells ``grace_secs`` to end
    (``on_stopping`` hears of it), a second leaves the process at once, and so does a process
    still there :data:`STOP_SLACK_SECS` after the grace (the signal asked it to end); from a
    notebook, cancel the task instead. A store that cannot be reached, or is lost while it
    runs, raises :class:`~forge_ledger.errors.StoreUnavailableError` (try again: nothing is
    lost). A provider made here is closed here.
    """
    from ..ledger import Ledger
    from ..ledger.store import resolve_store
    from ..providers import get_provider
    from ..study.queue import Worker, reachable

    location = store.location if isinstance(store, Ledger) else resolve_store(store)
    if location.kind != "postgres":
        raise UsageError(
            "a worker needs a PostgreSQL store",
            hint="give --store postgresql://HOST:PORT/DB (the store 'study run --queue' used)",
        )
    reachable(location)
    prov = provider or get_provider()
    try:
        with opened(store, create=False) as ledger:
            worker = Worker(
                ledger,
                prov,
                SESSIONS,
                hooks=SessionHooks(hmac_key=hmac_key),
                concurrency=concurrency,
                grace_secs=grace_secs,
                on_cell=on_cell,
            )
            with _stopped_by_signals(worker, on_stopping, enabled=signals) as stopped:
                await worker.run()
            return bool(stopped)
    finally:
        if provider is None:
            await prov.aclose()


STOP_SLACK_SECS = 20.0
"""How long a stopping worker may take, beyond its grace, to hand its jobs back and close its
connections; past it the process leaves as at a second Ctrl-C."""

_OVERDUE = "the worker did not stop within {secs:g} s of the signal: leaving now\n"


def _leave_if_overdue(secs: float) -> None:
    """Leave the process ``secs`` from now if it is still there: a stopping worker must end
    whatever it waits on (a connection that never answers, a task that ignores its
    cancellation), since a supervisor or a shell waits for it. A timer thread does it, as
    the event loop itself may be what is stuck. Nothing is lost: every event is committed
    as it is appended, and the cells' jobs come back after the heartbeat timeout, as after
    ``kill -9``. With ``PYTHONFAULTHANDLER`` set (Python's switch for such dumps), each
    thread's stack goes to stderr first, to show what it waited on."""

    def leave() -> None:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(_OVERDUE.format(secs=secs))
            if os.environ.get("PYTHONFAULTHANDLER"):
                faulthandler.dump_traceback(sys.stderr)
        exit_interrupted()

    timer = threading.Timer(secs, leave)
    timer.daemon = True  # a worker that does stop in time exits without waiting for it
    timer.start()


@contextlib.contextmanager
def _stopped_by_signals(
    worker: Worker, on_stopping: Callable[[], Any] | None, *, enabled: bool
) -> Iterator[list[int]]:
    """SIGINT and SIGTERM stop ``worker`` (a second one leaves the process at once, and so
    does a worker still there :data:`STOP_SLACK_SECS` after its grace); the list yielded
    holds the signals received.

    The handlers are Python's, not the event loop's: they run even while the loop is held
    (a call that blocks it), where the loop's own would wait for it, Ctrl-C included."""
    received: list[int] = []
    if not enabled:
        yield received
        return
    loop = asyncio.get_running_loop()

    def stop() -> None:
        if on_stopping is not None:
            on_stopping()
        worker.stop()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        if received:
            exit_interrupted()
        received.append(signum)
        _leave_if_overdue(worker.grace_secs + STOP_SLACK_SECS)
        loop.call_soon_threadsafe(stop)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
