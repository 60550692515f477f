"""A study's cells as jobs in procrastinate, run by any number of worker processes.

``study run PLAN --queue`` records the plan, then defers one job per unfinished cell in
procrastinate, whose tables live in the ledger's own PostgreSQL schema (created on first
use, under an advisory lock so that first users at the same moment create them once). A
worker runs each job through :func:`~.cells.run_cell`, the unit a one-process study uses,
which is idempotent: a job run again (retried after its worker died, or queued twice) never
runs its cell twice; it resumes the session the cell's claim recorded, or finds the cell
finished. A cell that must wait (for money a running cell holds, or for its session's lease,
held by another process) raises :class:`CellNotReady`, and procrastinate runs the job again
a little later. Each worker hands back to the queue the jobs of workers whose heartbeat
stopped (procrastinate's stalled-job API), so a worker killed with ``kill -9`` leaves its
cells to the others. A worker whose PostgreSQL stops answering (:mod:`.watch`) closes its
connections, cuts its running cells off at once and ends (exit 75): nothing it could not
store is lost, and another worker takes its jobs back. Before each model call a worker
reserves the call against the per-model rates and the study's calls budget (:mod:`.rates`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast
from uuid import UUID

import procrastinate
import psycopg
from procrastinate import RetryDecision, exceptions
from procrastinate.retry import BaseRetryStrategy

from ..errors import StoreError, StoreUnavailableError, UsageError
from ..providers import preload_client
from ._sessions import SessionFunctions, SessionHooks
from .cells import StudyRun, run_cell
from .rates import CREATE_TABLE, RateLimited, RateReservations, StudyCalls
from .runner import finished_event, unfinished_cells
from .state import StudyState
from .watch import StoreWatch

if TYPE_CHECKING:
    from ..ledger import Ledger
    from ..ledger.store import StoreLocation
    from ..providers import Provider

__all__ = [
    "HEARTBEAT_SECS",
    "STALLED_SECS",
    "CellNotReady",
    "Worker",
    "conninfo",
    "queue_cells",
    "queued_jobs",
    "reachable",
]

TASK = "forge_ledger.study.cell"
HEARTBEAT_SECS = 2.0
"""How often a worker tells the database it is alive."""
STALLED_SECS = 10.0
"""A worker silent this long is taken for dead: its jobs go back to the queue."""
RETRY_SECS = 2
"""How long a job that could not go on waits before it is tried again."""
POOL_WAIT_SECS = 5.0
"""How long the queue's calls wait for a connection of its pool (PostgreSQL lost: not long)."""


class CellNotReady(Exception):
    """The cell cannot go on now (money held by a running cell, its session's lease held by
    another process): the job is tried again shortly."""


def conninfo(location: StoreLocation) -> str:
    """The libpq connection string of a PostgreSQL store, its schema first on the search path
    (so procrastinate's tables and the call reservations sit beside the ledger's)."""
    from psycopg.conninfo import make_conninfo

    if location.kind != "postgres":
        raise UsageError(
            f"the job queue needs a PostgreSQL store, not {location.display}",
            hint="give --store postgresql://HOST:PORT/DB (or run without --queue)",
        )
    parts: dict[str, Any] = {
        "host": location.host,
        "port": location.port,
        "dbname": location.dbname,
        "connect_timeout": 10,
        "options": f"-c search_path={location.schema}",
    }
    if location.user:
        parts["user"] = location.user
    if location.password:
        parts["password"] = location.password
    return make_conninfo("", **parts)


class _CellRetry(BaseRetryStrategy):
    """The jobs' retry strategy: a cell that could not go on, a worker that stopped (Ctrl-C,
    a lost store) or a job cut off at shutdown is tried again, however many times."""

    def get_retry_decision(
        self, *, exception: BaseException, job: procrastinate.jobs.Job
    ) -> RetryDecision | None:
        del job  # the decision depends on the exception alone
        kinds = (CellNotReady, StoreError, asyncio.CancelledError, exceptions.JobAborted)
        if isinstance(exception, kinds):
            return RetryDecision(retry_in={"seconds": RETRY_SECS})
        return None


def _app(location: StoreLocation, job: Callable[..., Any] | None = None) -> procrastinate.App:
    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(
            conninfo=conninfo(location), min_size=1, max_size=4, timeout=POOL_WAIT_SECS
        )
    )
    if job is not None:
        app.task(name=TASK, retry=_CellRetry())(job)
    return app


async def _ensure_schema(app: procrastinate.App, location: StoreLocation) -> None:
    """Create procrastinate's tables and the call reservations' in the store's schema unless
    they exist (one process at a time)."""
    lock = f"forge_ledger:procrastinate:{location.schema}"
    async with await psycopg.AsyncConnection.connect(conninfo(location), autocommit=True) as c:
        await c.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (lock,))
        try:
            await c.execute(f'CREATE SCHEMA IF NOT EXISTS "{location.schema}"')
            cur = await c.execute(
                "SELECT 1 FROM information_schema.tables WHERE table_schema = %s "
                "AND table_name = 'procrastinate_jobs'",
                (location.schema,),
            )
            if await cur.fetchone() is None:
                await app.schema_manager.apply_schema_async()
            await c.execute(CREATE_TABLE)
        finally:
            await c.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (lock,))


def _lock(study_id: str, cell: str) -> str:
    return f"forge_ledger:study:{study_id}:{cell}"


async def queue_cells(
    location: StoreLocation, state: StudyState, *, rates: Mapping[str, int]
) -> list[str]:
    """Defer a job for each unfinished cell of the study (one waiting job per cell: a cell
    already waiting in the queue is not queued again); returns the cells queued."""
    app = _app(location)
    queued: list[str] = []
    try:
        async with app.open_async():
            await _ensure_schema(app, location)
            for cell in unfinished_cells(state):
                key = _lock(state.id, cell)
                deferrer = app.configure_task(TASK, allow_unknown=True, lock=key, queueing_lock=key)
                with contextlib.suppress(exceptions.AlreadyEnqueued):
                    await deferrer.defer_async(study=state.id, cell=cell, rates=dict(rates))
                    queued.append(cell)
    except exceptions.ConnectorException as e:
        raise _lost(e) from None
    return queued


async def queued_jobs(location: StoreLocation, study_id: str) -> dict[str, str]:
    """{cell: "queued" or "taken"} for the study's jobs waiting or held by a worker (empty
    when the store never had a queue)."""
    try:
        async with await psycopg.AsyncConnection.connect(conninfo(location)) as c:
            cur = await c.execute(
                "SELECT to_regclass('procrastinate_jobs') IS NOT NULL",
            )
            row = await cur.fetchone()
            if not row or not row[0]:
                return {}
            cur = await c.execute(
                "SELECT args->>'cell', status::text FROM procrastinate_jobs "
                "WHERE task_name = %s AND args->>'study' = %s AND status IN ('todo', 'doing')",
                (TASK, study_id),
            )
            rows = await cur.fetchall()
    except psycopg.Error as e:
        raise _lost(e) from None
    shown = {"todo": "queued", "doing": "taken"}
    jobs: dict[str, str] = {}
    for cell, status in rows:
        if jobs.get(cell) != "taken":
            jobs[cell] = shown[status]
    return jobs


def reachable(location: StoreLocation) -> None:
    """Raise :class:`StoreUnavailableError` (try again) unless PostgreSQL answers."""
    try:
        psycopg.connect(conninfo(location)).close()
    except psycopg.Error as e:
        raise _lost(e) from None


def _lost(e: BaseException) -> StoreUnavailableError:
    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return StoreUnavailableError(
        f"lost the connection to PostgreSQL: {first}",
        hint="start it again once PostgreSQL is reachable: queued and cut-off cells are "
        "kept and resume",
    )


@dataclass
class Worker:
    """One worker process: takes jobs and runs their cells through one provider and ledger."""

    ledger: Ledger
    provider: Provider
    sessions: SessionFunctions
    hooks: SessionHooks = field(default_factory=SessionHooks)
    concurrency: int = 4
    grace_secs: float = 10.0
    on_cell: Callable[[str, str], Any] | None = None
    lost: BaseException | None = field(default=None, init=False)
    _reservations: RateReservations | None = field(default=None, init=False)
    _stopping: bool = field(default=False, init=False)
    _task: asyncio.Task[Any] | None = field(default=None, init=False)
    _loop: asyncio.AbstractEventLoop = field(init=False)
    _jobs: set[asyncio.Task[Any]] = field(default_factory=set, init=False)
    _app: procrastinate.App | None = field(default=None, init=False)
    _closing: asyncio.Future[None] | None = field(default=None, init=False)

    @property
    def location(self) -> StoreLocation:
        return self.ledger.location

    async def run_job(self, study: str, cell: str, rates: dict[str, int]) -> str:
        """Run or resume one cell (the job's body); a store error stops the worker."""
        task = asyncio.current_task()
        assert task is not None
        self._jobs.add(task)
        task.add_done_callback(self._quiet_if_lost)
        try:
            return await self._run_cell(study, cell, rates)
        except StoreError as e:
            self.stop(lost=e)
            raise
        finally:
            self._jobs.discard(task)

    async def _run_cell(self, study: str, cell: str, rates: dict[str, int]) -> str:
        run = StudyRun(self.ledger, UUID(study))
        provider: Any = self.provider
        limited: RateLimited | None = None
        if self._reservations is not None:
            counted = StudyCalls(run.state.id, run.state.plan.budget, run.state.calls)
            limited = RateLimited(self.provider, self._reservations, rates, study=counted)
            if limited.study is not None:
                _stop_study(run, await self._reservations.spent(counted))
            if rates or limited.study is not None:
                provider = limited
        busy = any(c.status == "running" and c.spec.id != cell for c in run.state.cells.values())
        done = await run_cell(
            run,
            cell,
            provider=provider,
            sessions=self.sessions,
            hooks=self.hooks,
            may_wait=busy,
        )
        if limited is not None and limited.refused:
            _stop_study(run, limited.refused)
        if done is None:
            raise CellNotReady(f"cell {cell} waits for money a running cell holds")
        if done.status == "running" and not run.state.stopped:
            raise CellNotReady(f"cell {cell}: its session is held by another process")
        run.record(finished_event)
        if self.on_cell is not None:
            self.on_cell(cell, done.status)
        return done.status

    def stop(self, *, lost: BaseException | None = None) -> None:
        """Stop taking jobs; running cells get ``grace_secs`` to end, then are cut off (left
        resumable; their jobs go back to the queue). With the store lost, nothing they do
        could be recorded: they are cut off at once."""
        if lost is not None and self.lost is None:
            self.lost = lost
        self._stopping = True
        if self.lost is not None:
            for job in self._jobs - {asyncio.current_task()}:
                job.cancel()
            if self._app is not None:
                # Its pool closed, the queue's calls waiting for a connection fail now
                # (procrastinate's shutdown, which records the jobs' ends, does not wait).
                connector = cast(procrastinate.PsycopgConnector, self._app.connector)
                self._closing = asyncio.ensure_future(connector.pool.close())
        if self._task is not None:
            asyncio.get_running_loop().call_soon(self._task.cancel)

    async def run(self) -> None:
        """Take jobs until :meth:`stop`; raises :class:`StoreUnavailableError` when the store
        was lost (nothing is: a cut-off cell's job is retried by a worker)."""
        logging.getLogger("procrastinate").setLevel(logging.CRITICAL)
        # The model client loads before any job: loading it inside the first call would
        # hold the event loop (heartbeats, connections) for seconds.
        await asyncio.to_thread(preload_client)
        self._loop = asyncio.get_running_loop()
        self._reservations = RateReservations(self.location, self._connect)
        app = self._app = _app(self.location, self.run_job)
        try:
            async with app.open_async():
                await _ensure_schema(app, self.location)
                await self._reservations.open()
                if self._stopping:  # stopped while it started: no job taken
                    return
                self._task = asyncio.create_task(
                    app.run_worker_async(
                        concurrency=self.concurrency,
                        name="forge-ledger",
                        install_signal_handlers=False,
                        shutdown_graceful_timeout=self.grace_secs,
                        update_heartbeat_interval=HEARTBEAT_SECS,
                        stalled_worker_timeout=STALLED_SECS,
                        fetch_job_polling_interval=1.0,
                        delete_jobs="successful",
                    )
                )
                stalled = asyncio.create_task(self._retry_stalled(app))
                watch = StoreWatch(conninfo(self.location), self._store_lost)
                watch.start()
                try:
                    with contextlib.suppress(asyncio.CancelledError):
                        await self._task
                finally:
                    watch.stop()
                    stalled.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await stalled
        except (exceptions.ConnectorException, OSError) as e:
            self.lost = self.lost or e
        except Exception as e:
            if not _is_connection_error(e):
                raise
            self.lost = self.lost or e
        finally:
            with contextlib.suppress(Exception):
                await self._reservations.aclose()
            if self._closing is not None:
                with contextlib.suppress(Exception):
                    await self._closing
        if self.lost is not None:
            raise _lost(self.lost)

    def _quiet_if_lost(self, job: asyncio.Task[Any]) -> None:
        """A job cut off with the store lost ends with the queue's failure to record its end:
        known, and said once by the worker, not as a traceback per job at exit."""
        if self.lost is not None and not job.cancelled():
            job.exception()

    def _store_lost(self, e: BaseException) -> None:
        """PostgreSQL stopped answering (called from the watch's thread): close the ledger,
        so its calls waiting in the connection pool fail now and later ones at once (the
        loop they hold gets free), then stop."""
        self.lost = self.lost or e
        self.ledger.close()
        with contextlib.suppress(RuntimeError):  # the loop ended meanwhile: nothing to stop
            self._loop.call_soon_threadsafe(self.stop)

    async def _connect(self) -> Any:
        return await psycopg.AsyncConnection.connect(conninfo(self.location), autocommit=True)

    async def _retry_stalled(self, app: procrastinate.App) -> None:
        """Put back in the queue the jobs of workers whose heartbeat stopped."""
        while True:
            await asyncio.sleep(HEARTBEAT_SECS)
            jobs = await app.job_manager.get_stalled_jobs(seconds_since_heartbeat=STALLED_SECS)
            for job in _only_ours(jobs):
                with contextlib.suppress(Exception):  # another worker put it back first
                    await app.job_manager.retry_job(job)


def _stop_study(run: StudyRun, why: str | None) -> None:
    if why:
        run.stop(why)


def _only_ours(jobs: Iterable[Any]) -> list[Any]:
    return [j for j in jobs if j.task_name == TASK]


def _is_connection_error(e: BaseException) -> bool:
    return isinstance(e, psycopg.OperationalError | psycopg.InterfaceError)
