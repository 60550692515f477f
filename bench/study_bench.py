"""Study benchmark: many sessions at once in one process, against one session alone.

Prints one JSON object on stdout (progress on stderr). The shipped OpenAI-compatible fake
server runs in a child process (``forge-ledger fake-server --latency``), so every call waits
as a real provider's would and only the client's work is measured: the real provider
(litellm over HTTP), the orchestrator, the SQLite store and the study machinery.

* ``alone`` — one cell (a three-participant demo session) run as a study of one cell: wall
  and CPU seconds.
* ``study`` — ``--sessions`` cells (default 16) at ``--concurrency`` (default 8) in one
  process, in the same run: wall and CPU seconds.
* ``ideal_secs`` — the latency-bound ideal: ``alone`` wall × sessions / concurrency, or the
  CPU-bound one when larger: ``alone``'s CPU, the client's and the fake server's (both run
  on the same cores), × sessions / cores. On a machine other work keeps busy, neither ideal
  holds and the ratio says so.
* ``ratio`` — the study's wall time over that ideal. Goal ≤ 1.25.
* ``cpu_per_session_ratio`` — the study's CPU per session over ``alone``'s CPU: what running
  cells side by side (and the study's own events and progress) adds to a session's CPU.

``--quick`` smoke-tests the script (4 sessions at concurrency 2, 0.05 s latency).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from study_setup import FakeServer, log, write_plan

from forge_ledger.app.studies import SESSIONS
from forge_ledger.ledger import Ledger
from forge_ledger.study import load_plan, plan_study, run_study


def _measure(server: FakeServer, store: Path, plan: Path, concurrency: int) -> dict[str, float]:
    from forge_ledger.providers import get_provider

    async def go() -> int:
        provider = get_provider()
        try:
            with Ledger(str(store)) as ledger:
                sid = plan_study(ledger, load_plan(plan))
                state = await run_study(
                    ledger, sid, sessions=SESSIONS, provider=provider, concurrency=concurrency
                )
                return state.count("done")
        finally:
            await provider.aclose()

    wall, cpu, served = time.perf_counter(), time.process_time(), server.cpu_secs()
    done = asyncio.run(go())
    return {
        "wall_secs": round(time.perf_counter() - wall, 3),
        "cpu_secs": round(time.process_time() - cpu, 3),
        "server_cpu_secs": round(server.cpu_secs() - served, 3),
        "done": done,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--latency", type=float, default=0.3)
    args = parser.parse_args()
    sessions, concurrency, latency = args.sessions, args.concurrency, args.latency
    if args.quick:
        sessions, concurrency, latency = 4, 2, 0.05
    server = FakeServer(latency)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            log("warm-up: one session (imports, first connections)")
            _measure(server, folder / "warm.sqlite", write_plan(folder, server.url, "warm", 1), 1)
            log("one session alone")
            alone = _measure(
                server, folder / "alone.sqlite", write_plan(folder, server.url, "alone", 1), 1
            )
            log(f"{sessions} sessions at --concurrency {concurrency}")
            many = _measure(
                server,
                folder / "study.sqlite",
                write_plan(folder, server.url, "many", sessions),
                concurrency,
            )
    finally:
        server.stop()
    cores = os.cpu_count() or 1
    cpu_alone = alone["cpu_secs"] + alone["server_cpu_secs"]
    ideal = max(alone["wall_secs"] * sessions / concurrency, cpu_alone * sessions / cores)
    result: dict[str, Any] = {
        "sessions": sessions,
        "concurrency": concurrency,
        "latency_secs": latency,
        "cores": cores,
        "alone": alone,
        "study": many,
        "ideal_secs": round(ideal, 3),
        "ratio": round(many["wall_secs"] / ideal, 3),
        "ratio_goal": 1.25,
        "cpu_per_session_ratio": round(many["cpu_secs"] / sessions / alone["cpu_secs"], 3),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
