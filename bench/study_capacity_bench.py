"""Study capacity: one process's throughput against both ideals, what the study machinery itself
costs per session, and the memory of a process with many sessions in flight.

Prints one JSON object on stdout (progress on stderr). The shipped OpenAI-compatible fake
server runs in a child process of its own (``forge-ledger fake-server --latency``): its CPU
is not this process's, and the figures are about this process. Sessions have four
participants and up to eight rounds; every call waits ``--latency`` seconds first.

* ``alone`` — one cell run as a study of one cell: wall and CPU seconds (every thread of
  this process: litellm does some of its work in threads), ``rounds`` it ran.
* ``study`` — ``--sessions`` cells (default 64) at ``--concurrency`` (default 16), same run.
* ``ideals`` — latency-bound: ``alone`` wall × sessions / concurrency; CPU-bound: ``alone``
  session CPU × sessions / cores, for the machine's cores (the issue's figure) and for one
  core (one asyncio process runs its Python on one core at a time). ``ratio`` is the study's
  wall over the larger ideal, for each. Goal ≤ 1.25.
* ``processes`` — the same study through the command line, ``study run --processes 1`` at
  ``--concurrency`` and ``--processes 2`` at half that each (the same cells in flight): wall
  seconds, CPU seconds of all its processes, and the wall over the larger ideal (the issue's,
  for the machine's cores). Both include starting the command (imports) in each process.
* ``overhead`` — the study machinery's CPU per session (planning, reading and folding the
  study, claims and the other study events, the progress callback feeding the CLI's live
  display, and that display's refresh thread drawing on a terminal kept in memory) over a
  session's CPU alone. Measured on this process's main thread around the machinery's own
  (synchronous) functions, plus the refresh thread's CPU clock, so the sessions' calls and
  litellm's threads are not in it. Goal ≤ 0.05.
* ``memory`` — a fresh process runs ``--in-flight`` cells (default 32) all at once: peak RSS
  (``ru_maxrss``) after warm-up and at the end, and the most sessions seen in flight together.
  Goal ≤ 400 MB peak.

Before measuring, the process marks what its warm-up made as long-lived, as ``study run``
does before its cells (``long_lived_so_far``: full collections then skip the libraries'
objects).

``--quick`` smoke-tests the script (4 sessions at concurrency 2, 4 in flight, 0.05 s latency).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from pathlib import Path
from typing import Any

from study_setup import FakeServer, log, write_plan

from forge_ledger._collector import long_lived_so_far
from forge_ledger.app.studies import continue_study
from forge_ledger.ledger import Ledger
from forge_ledger.study import StudyStream, load_plan, plan_study
from forge_ledger.study import cells as study_cells
from forge_ledger.study import runner as study_runner
from forge_ledger.study.plan import StudyPlan

PEOPLE = ("ana", "ben", "cleo", "dev")


def _plan(folder: Path, url: str, name: str, repeats: int) -> Path:
    return write_plan(folder, url, name, repeats, people=PEOPLE)


class _Meter:
    """CPU seconds of this thread spent inside the wrapped functions (outermost call only, so
    a wrapped function calling another is counted once)."""

    def __init__(self) -> None:
        self.secs = 0.0
        self.depth = 0
        self.by_name: dict[str, float] = {}

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        @wraps(fn)
        def metered(*args: Any, **kwargs: Any) -> Any:
            self.depth += 1
            start = time.thread_time() if self.depth == 1 else 0.0
            try:
                return fn(*args, **kwargs)
            finally:
                if self.depth == 1:
                    spent = time.thread_time() - start
                    self.secs += spent
                    self.by_name[fn.__qualname__] = self.by_name.get(fn.__qualname__, 0) + spent
                self.depth -= 1

        return metered


_MACHINERY = [
    (StudyStream, "state"),
    (study_cells.StudyRun, "record"),
    (study_cells.StudyRun, "claim"),
    (study_cells, "_blocked_by_parent"),
    (study_cells, "_inherited"),
    (study_cells, "_outcome"),
    (study_runner, "unfinished_cells"),
    (StudyPlan, "session_of"),
]
"""The study's own synchronous steps around its sessions (module globals are patched where
their callers look them up)."""


@contextmanager
def _metered(meter: _Meter) -> Iterator[None]:
    saved = [(owner, name, getattr(owner, name)) for owner, name in _MACHINERY]
    for owner, name, fn in saved:
        setattr(owner, name, meter.wrap(fn))
    try:
        yield
    finally:
        for owner, name, fn in saved:
            setattr(owner, name, fn)


def _thread_cpu_secs(thread: threading.Thread) -> float:
    """CPU seconds of another thread of this process so far (0 once it has ended)."""
    if thread.ident is None or not thread.is_alive():
        return 0.0
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


def _display() -> Any:
    """The CLI's study display, live on a terminal kept in memory."""
    from rich.console import Console

    from forge_ledger.cli.study_cmd import _Display

    return _Display(enabled=True, console=Console(file=io.StringIO(), force_terminal=True))


def _measure(store: Path, plan: Path, concurrency: int) -> dict[str, Any]:
    """Plan and run the study in this process; wall, CPU and machinery seconds."""
    from forge_ledger.providers import get_provider

    meter, shown, in_flight, refresh = _Meter(), _Meter(), [0], [0.0]
    display = _display()
    update = shown.wrap(display.update)  # inside the machinery's figure, and told apart

    def progress(p: Any) -> None:
        in_flight[0] = max(in_flight[0], len(p.active))
        update(p)

    async def go() -> tuple[int, int]:
        provider = get_provider()
        try:
            with Ledger(str(store)) as ledger:
                sid = meter.wrap(plan_study)(ledger, load_plan(plan))
                state = await continue_study(  # what `study run` runs, read model included
                    ledger,
                    sid,
                    provider=provider,
                    concurrency=concurrency,
                    on_progress=progress,
                )
                first = next(iter(state.cells.values())).session_id
                assert first is not None
                refresh[0] = sum(_thread_cpu_secs(t) for t in drawing)
                return state.count("done"), len(ledger.state(first).rounds)
        finally:
            await provider.aclose()

    wall, cpu = time.perf_counter(), time.process_time()
    before = set(threading.enumerate())
    with _metered(meter), display:
        drawing = [t for t in threading.enumerate() if t not in before]  # the refresh thread
        done, rounds = asyncio.run(go())
    return {
        "wall_secs": round(time.perf_counter() - wall, 3),
        "cpu_secs": round(time.process_time() - cpu, 3),
        "machinery_cpu_secs": round(meter.secs, 4),
        "display_update_cpu_secs": round(shown.secs, 4),
        "display_refresh_thread_cpu_secs": round(refresh[0], 4),
        "machinery_by_step": {k: round(v, 4) for k, v in sorted(meter.by_name.items())},
        "done": done,
        "rounds": rounds,
        "most_in_flight": in_flight[0],
        "peak_rss_mb": _peak_rss_mb(),
    }


def _peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # KiB on Linux


def _memory_child(url: str, in_flight: int) -> None:
    """In a fresh process: warm up on one session, then ``in_flight`` cells at once."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        _measure(folder / "warm.sqlite", _plan(folder, url, "warm", 1), 1)
        long_lived_so_far()  # as `study run` does before its cells
        before = _peak_rss_mb()
        many = _measure(folder / "many.sqlite", _plan(folder, url, "many", in_flight), in_flight)
    print(json.dumps({"in_flight": in_flight, "peak_rss_mb_after_warm_up": before, **many}))


def _memory(url: str, in_flight: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--memory-child", url, "--in-flight", str(in_flight)],
        capture_output=True,
        text=True,
        check=True,
    )
    got: dict[str, Any] = json.loads(out.stdout)
    return got


def _command_run(folder: Path, url: str, name: str, sessions: int, conc: int, procs: int) -> Any:
    """``forge-ledger study run`` of a fresh plan in child processes: wall, their CPU, cells."""
    plan = _plan(folder, url, name, sessions)
    exe = Path(sys.executable).with_name("forge-ledger")
    command = [str(exe), "study", "run", str(plan), "--store", str(folder / f"{name}.sqlite")]
    command += ["--processes", str(procs), "--concurrency", str(conc), "--quiet", "--json"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter()
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    done = json.loads(out.stdout)["done"]
    return {"processes": procs, "concurrency_each": conc, "wall_secs": round(wall, 3),
            "cpu_secs": round(cpu, 3), "done": done}  # fmt: skip


def _processes(folder: Path, url: str, sessions: int, conc: int, ideal: float) -> Any:
    """One process and two processes (half the concurrency each) through the command line."""
    runs = []
    for procs in (1, 2):
        log(f"study run --processes {procs}: {sessions} sessions")
        got = _command_run(folder, url, f"p{procs}", sessions, max(1, conc // procs), procs)
        runs.append({**got, "ratio_to_ideal": round(got["wall_secs"] / ideal, 3)})
    one, two = runs
    return {
        "one": one,
        "two": two,
        "ideal_secs": round(ideal, 3),
        "two_over_one_wall": round(two["wall_secs"] / one["wall_secs"], 3),
        "two_over_one_cpu": round(two["cpu_secs"] / one["cpu_secs"], 3),
        "ratio_goal": 1.25,
    }


def _machinery(run: dict[str, Any]) -> float:
    return float(
        run["machinery_cpu_secs"]
        + run["display_update_cpu_secs"]
        + run["display_refresh_thread_cpu_secs"]
    )


def _ratios(alone: dict[str, Any], many: dict[str, Any], sessions: int, conc: int) -> Any:
    cores = os.cpu_count() or 1
    session_cpu = alone["cpu_secs"] - _machinery(alone)
    latency = alone["wall_secs"] * sessions / conc
    ideals = {
        "latency_bound_secs": round(latency, 3),
        f"cpu_bound_{cores}_cores_secs": round(session_cpu * sessions / cores, 3),
        "cpu_bound_1_core_secs": round(session_cpu * sessions, 3),
    }
    ratio = {
        f"{cores}_cores_issue": round(
            many["wall_secs"] / max(latency, session_cpu * sessions / cores), 3
        ),
        "1_core": round(many["wall_secs"] / max(latency, session_cpu * sessions), 3),
    }
    per_session = _machinery(many) / sessions
    overhead = {
        "machinery_cpu_per_session_secs": round(per_session, 4),
        "session_cpu_alone_secs": round(session_cpu, 3),
        "ratio": round(per_session / session_cpu, 4),
        "ratio_goal": 0.05,
        "study_cpu_per_session_over_alone": round(many["cpu_secs"] / sessions / session_cpu, 3),
    }
    return cores, ideals, ratio, overhead


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--in-flight", type=int, default=32)
    parser.add_argument("--latency", type=float, default=0.3)
    parser.add_argument("--memory-child", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        _memory_child(args.memory_child, args.in_flight)
        return
    sessions, conc, in_flight, latency = (
        args.sessions,
        args.concurrency,
        args.in_flight,
        args.latency,
    )
    if args.quick:
        sessions, conc, in_flight, latency = 4, 2, 4, 0.05
    server = FakeServer(latency)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            log("warm-up: one session (imports, first connections)")
            _measure(folder / "warm.sqlite", _plan(folder, server.url, "warm", 1), 1)
            long_lived_so_far()  # as `study run` does before its cells
            log("one session alone")
            alone = _measure(folder / "alone.sqlite", _plan(folder, server.url, "alone", 1), 1)
            log(f"{sessions} sessions at --concurrency {conc}")
            many = _measure(
                folder / "study.sqlite", _plan(folder, server.url, "many", sessions), conc
            )
            cores, ideals, ratio, overhead = _ratios(alone, many, sessions, conc)
            ideal = max(ideals["latency_bound_secs"], ideals[f"cpu_bound_{cores}_cores_secs"])
            processes = _processes(folder, server.url, sessions, conc, ideal)
        log(f"memory: a fresh process with {in_flight} sessions in flight")
        memory = _memory(server.url, in_flight)
    finally:
        server.stop()
    result: dict[str, Any] = {
        "sessions": sessions,
        "concurrency": conc,
        "participants": len(PEOPLE),
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "latency_secs": latency,
        "cores": cores,
        "alone": alone,
        "study": {**many, "cpu_per_wall": round(many["cpu_secs"] / many["wall_secs"], 3)},
        "ideals": ideals,
        "ratio": ratio,
        "ratio_goal": 1.25,
        "processes": processes,
        "overhead": overhead,
        "memory": {**memory, "peak_goal_mb": 400},
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
