"""Scale-out benchmark: a latency-bound study run by one worker, then by two, on PostgreSQL.

Prints one JSON object on stdout (progress on stderr). The shipped OpenAI-compatible fake
server runs in a child process (``forge-ledger fake-server --latency``), so each call waits
as a real provider's would. For each count of workers, in the same run: a fresh schema, the
plan recorded, the ``forge-ledger worker`` processes started and registered with the queue,
a warm-up study of as many cells as the workers run at once (each worker's first call pays
for loading the model client), then the clock runs from queuing the measured study's cells
to its end.

* ``one`` / ``two`` — wall seconds of the study with one worker and with two (each at
  ``--concurrency``), the cells done, and how many workers did not stop cleanly at Ctrl-C
  (exit 130, saying only that; what such a worker said goes to stderr). Expected: 0.
* ``ratio`` — two workers' time over one's. Goal ≤ 0.6 (the ideal, latency-bound, is 0.5).

The store is ``FORGE_LEDGER_BENCH_PG`` (default ``postgresql://postgres@127.0.0.1:5432/test``),
one schema per measurement, dropped afterwards. ``--quick`` smoke-tests the script (4 cells,
one cell at a time per worker, 0.05 s latency).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from study_setup import BENCH_PG, FakeServer, forge_ledger_exe, log, pg_schema, write_plan

from forge_ledger.ledger import Ledger
from forge_ledger.study import StudyState, StudyStream, load_plan, plan_study
from forge_ledger.study.queue import queue_cells


def _registered(schema: str) -> int:
    with psycopg.connect(BENCH_PG, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s "
            "AND table_name = 'procrastinate_workers'",
            (schema,),
        ).fetchone()
        if not row or not row[0]:
            return 0
        counted = conn.execute(f'SELECT count(*) FROM "{schema}".procrastinate_workers').fetchone()
        return int(counted[0]) if counted else 0


def _run(ledger: Ledger, study_id: uuid.UUID) -> StudyState:
    """Queue the study's cells and wait for its end."""
    stream = StudyStream(ledger)
    asyncio.run(queue_cells(ledger.location, stream.state(study_id), rates={}))
    while not (state := stream.state(study_id)).finished:
        time.sleep(0.1)
    return state


def _measure(plan: Path, warm: Path, workers: int, concurrency: int) -> dict[str, Any]:
    with pg_schema() as (schema, url), tempfile.TemporaryDirectory() as logs:
        env = {
            **os.environ,
            "FORGE_LEDGER_STORE": url,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "PYTHONFAULTHANDLER": "1",  # a worker overdue at its stop shows what held it
        }
        procs: list[subprocess.Popen[bytes]] = []
        said = [Path(logs) / f"worker-{n}.log" for n in range(workers)]
        result: dict[str, Any] = {}
        try:
            with Ledger(url) as ledger:
                study_id = plan_study(ledger, load_plan(plan))
                for log_path in said:
                    with log_path.open("wb") as stderr:
                        procs.append(
                            subprocess.Popen(
                                [forge_ledger_exe(), "worker", "-j", str(concurrency), "--quiet"],
                                env=env,
                                stdout=subprocess.DEVNULL,
                                stderr=stderr,
                            )
                        )
                while _registered(schema) < workers:
                    if any(p.poll() is not None for p in procs):
                        raise SystemExit("a worker ended before it took jobs")
                    time.sleep(0.1)
                log(f"  warm-up: {workers * concurrency} cells (each worker's first calls)")
                _run(ledger, plan_study(ledger, load_plan(warm)))
                log("  measured")
                began = time.perf_counter()
                state = _run(ledger, study_id)
                wall = time.perf_counter() - began
                result = {"wall_secs": round(wall, 3), "done": state.count("done")}
        finally:
            for p in procs:
                p.send_signal(signal.SIGINT)
            for p in procs:
                p.wait(timeout=60)
            stops = zip(procs, said, strict=False)  # fewer processes if one failed to start
            result["unclean_stops"] = sum(not _stopped_cleanly(p, s) for p, s in stops)
        return result


def _stopped_cleanly(proc: subprocess.Popen[bytes], said: Path) -> bool:
    """Whether a worker ended its stop with 130, saying only that it stops and then that it
    was interrupted; what else it said goes to stderr (with the stack of each of its
    threads when it was overdue)."""
    text = said.read_text("utf-8", "replace")
    lines = text.strip().splitlines()
    if proc.returncode == 130 and all(ln.startswith(("stopping:", "interrupted")) for ln in lines):
        return True
    log(f"  a worker stopped with {proc.returncode}, saying:\n{text[-4000:]}")
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--cells", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=4, help="cells at once per worker")
    parser.add_argument("--latency", type=float, default=0.3)
    args = parser.parse_args()
    cells, concurrency, latency = args.cells, args.concurrency, args.latency
    if args.quick:
        cells, concurrency, latency = 4, 1, 0.05
    server = FakeServer(latency)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            plan = write_plan(Path(tmp), server.url, "scale-out", cells)
            log(f"one worker, {cells} cells, {concurrency} at a time")
            one = _measure(
                plan, write_plan(Path(tmp), server.url, "warm-1", concurrency), 1, concurrency
            )
            log("two workers")
            warm = write_plan(Path(tmp), server.url, "warm-2", 2 * concurrency)
            two = _measure(plan, warm, 2, concurrency)
    finally:
        server.stop()
    result: dict[str, Any] = {
        "cells": cells,
        "concurrency_per_worker": concurrency,
        "latency_secs": latency,
        "cores": os.cpu_count() or 1,
        "one": one,
        "two": two,
        "ratio": round(two["wall_secs"] / one["wall_secs"], 3),
        "ratio_goal": 0.6,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
