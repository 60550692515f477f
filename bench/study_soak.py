"""Study soak: a queued study on PostgreSQL whose workers are killed with -9 at random moments.

Prints one JSON document on stdout (progress on stderr)::

    {"cells": 40, "kills": 10, "done": 40, "assigned_once": true, "finished_once": true,
     "verified": true, "replay_identical": true, "budget_kept": true, "problems": [], …}

What one soak does:

1. A plan of ``--cells`` cells (one topic, three participants, ``--cells`` repeats) under a
   budget of USD and calls, recorded in a fresh PostgreSQL schema; every cell queued.
2. ``--workers`` ``forge-ledger worker`` processes take the jobs. ``--kills`` times, once at
   least one cell is running, a delay drawn from a seeded generator (up to ``--max-delay``
   seconds) passes, then a live worker drawn from the same generator gets SIGKILL and a new
   worker takes its place. The killed worker's jobs go back to the queue when its heartbeat
   is missed; the worker that takes one resumes the cell's session.
3. Once every cell is finished and the queue is empty, in this process: every cell was
   assigned and finished exactly once (no session started twice), every session's chain
   verifies and its replay is identical, the study's chain verifies, and the budget was never
   exceeded: USD spent (by the sessions' own records), calls counted in the database, calls
   the fake server received.

The fake OpenAI-compatible server lives in this process, so a killed worker leaves it (and its
request count) up. ``--seed`` reproduces the moments (timing on a loaded machine still varies).
``--quick`` is a smoke run (4 cells, 2 kills); ``run_soak`` is what the slow test calls.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from study_setup import BENCH_PG, forge_ledger_exe, log, pg_schema, write_plan

from forge_ledger.ledger import Ledger, verify_session
from forge_ledger.records.replay import replay_session
from forge_ledger.study import StudyStream, load_plan, plan_study
from forge_ledger.study.queue import queue_cells, queued_jobs
from forge_ledger.testing import FakeOpenAIServer, bundled_script

CALLS_PER_CELL = 40
"""The calls budget per cell: well above a session's (about 13), so that every cell can end."""


@dataclass
class SoakResult:
    cells: int
    kills: int
    seed: int
    workers: int
    wall_secs: float = 0.0
    done: int = 0
    sessions: int = 0
    assigned_once: bool = False
    finished_once: bool = False
    verified: bool = False
    replay_identical: bool = False
    spent_usd: float = 0.0
    budget_usd: float = 0.0
    calls_counted: int = 0
    server_requests: int = 0
    budget_calls: int = 0
    budget_kept: bool = False
    killed_running: list[int] = field(default_factory=list)
    """Cells running when each kill landed."""
    problems: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _plan(folder: Path, url: str, cells: int) -> Path:
    return write_plan(
        folder,
        url,
        "soak",
        cells,
        session={"max_rounds": 6, "max_cost_usd": 0.05},
        budget={"usd": round(0.05 * cells, 2), "calls": CALLS_PER_CELL * cells},
    )


class _Workers:
    """``forge-ledger worker`` processes on one store, killed and replaced on demand."""

    def __init__(self, url: str, folder: Path, count: int) -> None:
        self.env = {**os.environ, "FORGE_LEDGER_STORE": url, "LITELLM_LOCAL_MODEL_COST_MAP": "1"}
        self.folder = folder
        self.started = 0
        self.procs = [self._start() for _ in range(count)]

    def _start(self) -> subprocess.Popen[bytes]:
        self.started += 1
        with open(self.folder / f"worker-{self.started}.log", "wb") as said:
            return subprocess.Popen(
                [forge_ledger_exe(), "worker", "-j", "4", "--grace", "1", "--quiet"],
                env=self.env,
                cwd=self.folder,
                stdout=subprocess.DEVNULL,
                stderr=said,
            )

    def kill_one(self, rng: random.Random) -> None:
        i = rng.randrange(len(self.procs))
        self.procs[i].kill()
        self.procs[i].wait(timeout=30)
        self.procs[i] = self._start()

    def check_alive(self) -> None:
        for p in self.procs:
            if p.poll() is not None:
                raise RuntimeError(f"a worker ended by itself with {p.returncode}")

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)


def _summary(ledger: Ledger, study_id: uuid.UUID) -> tuple[Any, dict[str, str]]:
    state = StudyStream(ledger).state(study_id)
    return state, asyncio.run(queued_jobs(ledger.location, state.id))


def _drive(
    ledger: Ledger, study_id: uuid.UUID, workers: _Workers, result: SoakResult, max_delay: float
) -> None:
    """The kills, then the wait for the study's end."""
    rng = random.Random(result.seed)
    deadline = time.monotonic() + 120 + 30 * result.cells
    for k in range(result.kills):
        while (state := _summary(ledger, study_id)[0]).count("running") == 0:
            workers.check_alive()
            if state.finished or time.monotonic() > deadline:
                raise RuntimeError(f"the study ended or stalled before kill {k + 1}")
            time.sleep(0.1)
        time.sleep(rng.uniform(0, max_delay))
        result.killed_running.append(_summary(ledger, study_id)[0].count("running"))
        workers.kill_one(rng)
        log(f"  kill {k + 1}/{result.kills}")
    while True:
        state, jobs = _summary(ledger, study_id)
        if state.finished and not jobs:
            return
        workers.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"the study did not end: {json.dumps(state.summary())}")
        time.sleep(0.3)


def _check(
    ledger: Ledger, study_id: uuid.UUID, result: SoakResult, requests: int, base: str
) -> None:
    stream = StudyStream(ledger)
    state = stream.state(study_id)
    counts = Counter((r.type, str(r.data.get("cell", ""))) for r in stream.records(study_id))
    sessions = ledger.session_ids()
    result.done = state.count("done")
    result.sessions = len(sessions)
    result.assigned_once = all(counts[("CellAssigned", c)] == 1 for c in state.cells)
    result.finished_once = all(counts[("CellFinished", c)] == 1 for c in state.cells)
    result.verified = stream.verify(study_id) == [] and all(
        verify_session(ledger, s).ok for s in sessions
    )
    replays = [replay_session(ledger, s) for s in sessions]
    result.replay_identical = all(r.difference is None for r in replays)
    for r in replays:
        if r.difference is not None:
            result.problems.append(f"session {r.session_id[:8]} replays differently")
    budget = state.plan.budget
    result.spent_usd = round(sum(ledger.state(s).cost_usd for s in sessions), 6)
    result.budget_usd = budget.usd or 0.0
    result.budget_calls = budget.calls or 0
    with psycopg.connect(base, autocommit=True) as conn:
        row = conn.execute(
            f'SELECT made FROM "{ledger.location.schema}".study_calls WHERE study_id = %s',
            (state.id,),
        ).fetchone()
    result.calls_counted = int(row[0]) if row else 0
    result.server_requests = requests
    result.budget_kept = (
        result.spent_usd <= result.budget_usd + 1e-9
        and state.spent_usd <= result.budget_usd + 1e-9
        and requests <= result.calls_counted <= result.budget_calls
    )
    if result.done != result.cells or result.sessions != result.cells:
        result.problems.append(f"{result.done} cells done, {result.sessions} sessions")
    for name in ("assigned_once", "finished_once", "verified", "budget_kept"):
        if not getattr(result, name):
            result.problems.append(f"not {name}")


def run_soak(
    cells: int,
    kills: int,
    *,
    seed: int,
    directory: Path,
    workers: int = 2,
    latency: float = 0.05,
    max_delay: float = 3.0,
    base: str = BENCH_PG,
) -> SoakResult:
    """One soak (see the module docstring) in a schema of its own on the PostgreSQL server
    and database of ``base``, dropped afterwards."""
    result = SoakResult(cells=cells, kills=kills, seed=seed, workers=workers)
    began = time.monotonic()
    with (
        pg_schema(base, "fl_soak") as (_schema, url),
        FakeOpenAIServer(bundled_script("demo"), latency=latency) as server,
        Ledger(url) as ledger,
    ):
        study_id = plan_study(ledger, load_plan(_plan(directory, server.url, cells)))
        state = StudyStream(ledger).state(study_id)
        asyncio.run(queue_cells(ledger.location, state, rates={}))
        procs = _Workers(url, directory, workers)
        try:
            _drive(ledger, study_id, procs, result, max_delay)
        finally:
            procs.stop()
        result.wall_secs = round(time.monotonic() - began, 1)
        _check(ledger, study_id, result, len(server.requests), base)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--cells", type=int, default=40)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--latency", type=float, default=0.05)
    args = parser.parse_args()
    cells, kills = (4, 2) if args.quick else (args.cells, args.kills)
    log(f"{cells} cells, {args.workers} workers, {kills} kills (seed {args.seed})")
    with tempfile.TemporaryDirectory() as tmp:
        result = run_soak(
            cells,
            kills,
            seed=args.seed,
            directory=Path(tmp),
            workers=args.workers,
            latency=args.latency,
        )
    print(json.dumps(result.as_json(), indent=2))
    if result.problems:
        sys.exit(1)


if __name__ == "__main__":
    main()
