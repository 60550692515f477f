"""A study's cells over several local processes on one SQLite store (``--processes N``).

One asyncio process keeps one core busy: a study whose sessions cost CPU (parsing, pricing)
runs no faster with more concurrency once that core is full. ``N`` processes are this one
and ``N - 1`` children, each running ``forge-ledger study resume S --share K/N`` on the same
store. Nothing is shared but the store: every process claims a cell by appending to the
study's hash-chained stream at its next position (two claimants cannot both succeed) and a
session has one writer through its lease, so each cell runs once however the processes race.
Each process takes the cells in its own rotation of the study's order
(:func:`~forge_ledger.study.runner.rotated`), so they rarely reach for the same cell.

The children run in their own process group: a Ctrl-C at the terminal reaches this process
only, which forwards one SIGINT to each child and waits for it, so each cuts its cells off
once, resumable. If this process is killed with SIGKILL, the children are not told: they go
on, finish the cells they can take and exit; ``study resume`` picks up the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any
from uuid import UUID

from ..clock import Clock, SystemClock
from ..errors import ProcessFailedError, RunInterrupted, StoreUnavailableError, UsageError
from ..study.cells import StudyRun
from ..study.runner import Progress, finished_event
from ..study.stream import StudyStream
from ..untrusted.terminal_text import printable

if TYPE_CHECKING:
    from ..ledger import Ledger
    from ..ledger.store import StoreLocation
    from ..study.state import StudyState

__all__ = ["in_processes", "refused", "wait_for"]

_WATCH_SECS = 0.5
"""How often the study is re-read while other processes run its cells (for the display)."""

_STOP_SECS = 60.0
"""How long a child told to stop (SIGINT) may take to cut its cells off before it is killed."""

_KEPT = {2: UsageError, 75: StoreUnavailableError, 130: RunInterrupted}
"""A child's documented exit codes that the whole run exits with too (anything else: 1)."""


@dataclass
class _Child:
    share: int
    proc: subprocess.Popen[bytes]
    err: IO[bytes]

    def said(self) -> str:
        """The child's last line on stderr (bounded, made printable), or its exit status."""
        self.err.seek(0)
        tail = self.err.read()[-4000:].decode(errors="replace")
        last = next((ln.strip() for ln in reversed(tail.splitlines()) if ln.strip()), "")
        said = printable(last.removeprefix("error: ")[:300])
        return said or f"exit status {self.proc.returncode}"


def refused(location: StoreLocation, *, processes: int, provider: object | None = None) -> None:
    """Why ``processes`` cannot run on the store at ``location`` (raised), before anything
    is written."""
    if processes <= 1:
        return
    if location.kind != "sqlite":
        raise UsageError(
            "--processes runs cells on one machine's SQLite store",
            hint="on PostgreSQL, use 'study run PLAN --queue' and 'forge-ledger worker' processes",
        )
    if provider is not None:
        raise UsageError(
            "processes > 1 runs cells in other processes, which make their provider from the "
            "environment as the command line does",
            hint="leave provider out, or run with processes=1",
        )


def _command(
    ledger: Ledger, study_id: UUID, share: int, processes: int, concurrency: int
) -> list[str]:
    path = ledger.location.path
    assert path is not None  # a SQLite store (refused() says so otherwise)
    return [
        sys.executable, "-m", "forge_ledger", "study", "resume", str(study_id),
        "--store", str(path.resolve()), "--concurrency", str(concurrency), "--quiet",
        "--share", f"{share}/{processes}",
    ]  # fmt: skip


async def in_processes(
    ledger: Ledger,
    study_id: UUID,
    run_share: Callable[..., Awaitable[StudyState]],
    *,
    processes: int,
    concurrency: int,
    clock: Clock | None = None,
    on_progress: Callable[[Progress], Any] | None = None,
) -> StudyState:
    """Run the study over ``processes`` processes: start the others, run this one's share
    (``run_share``: :func:`~forge_ledger.study.runner.run_study` bound to all but the study,
    ``share`` and ``watch_secs``), wait for the others; the study's state at the end."""
    with _children(ledger, study_id, processes=processes, concurrency=concurrency) as started:
        await run_share(study_id, share=(0, processes), watch_secs=_WATCH_SECS)
        await wait_for(ledger, study_id, started, clock=clock, on_progress=on_progress)
    run = StudyRun(ledger, study_id, clock=clock or SystemClock())
    run.record(finished_event)  # whichever process ended last may have read the study too early
    return run.state


@contextlib.contextmanager
def _children(
    ledger: Ledger, study_id: UUID, *, processes: int, concurrency: int
) -> Iterator[list[_Child]]:
    """Start processes ``1 .. processes - 1`` of the study's run; on the way out (an error,
    Ctrl-C, SIGTERM taken as Ctrl-C) each one still running is sent SIGINT and waited for."""
    started: list[_Child] = []
    with _terminate_as_interrupt(), contextlib.ExitStack() as files:
        try:
            for k in range(1, processes):
                err = files.enter_context(tempfile.TemporaryFile())
                command = _command(ledger, study_id, k, processes, concurrency)
                started.append(_Child(k, _spawn(command, err), err))
            yield started
        finally:
            _stop(started)


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """While active, SIGTERM does what Ctrl-C does (so the children are stopped too)."""
    try:
        previous = signal.signal(signal.SIGTERM, lambda *_: signal.raise_signal(signal.SIGINT))
    except ValueError:  # not the main thread: SIGTERM is the caller's to handle
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _spawn(command: list[str], err: IO[bytes]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=err,
        start_new_session=True,  # a terminal's Ctrl-C reaches the parent, which forwards it once
    )


def _stop(started: list[_Child]) -> None:
    for child in started:
        if child.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                child.proc.send_signal(signal.SIGINT)
    for child in started:
        try:
            child.proc.wait(timeout=_STOP_SECS)
        except subprocess.TimeoutExpired:
            child.proc.kill()
            child.proc.wait()


async def wait_for(
    ledger: Ledger,
    study_id: UUID,
    started: list[_Child],
    *,
    clock: Clock | None = None,
    on_progress: Callable[[Progress], Any] | None = None,
) -> StudyState:
    """Wait for the other processes to end, showing the study as they record it; the study's
    state then, or the first failure, in one line (a documented exit code it had, else
    :class:`~forge_ledger.errors.ProcessFailedError`)."""
    stream = StudyStream(ledger)
    now = (clock or SystemClock()).now
    while any(c.proc.poll() is None for c in started):
        if on_progress is not None:
            on_progress(Progress(stream.state(study_id), now=now(), shared=True))
        await asyncio.sleep(_WATCH_SECS)
    for child in started:
        code = child.proc.returncode
        if code not in (0, 3):  # 3: cells paused or cut off, which the study's state says
            kind = _KEPT.get(code, ProcessFailedError)
            raise kind(
                f"process {child.share + 1} of {len(started) + 1} (pid {child.proc.pid}) "
                f"ended with exit code {code}: {child.said()}",
                hint=f"the study keeps what it did; continue with: forge-ledger study resume "
                f"{str(study_id)[:8]}",
            )
    return stream.state(study_id)
