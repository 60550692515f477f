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
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from forge_ledger.app.studies import SESSIONS
from forge_ledger.ledger import Ledger
from forge_ledger.study import load_plan, plan_study, run_study

PRICE = {"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6}


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class _Server:
    """``forge-ledger fake-server`` in a child process, with a latency before every reply."""

    def __init__(self, latency: float) -> None:
        exe = Path(sys.executable).with_name("forge-ledger")
        self.proc = subprocess.Popen(
            [str(exe), "fake-server", "--latency", str(latency)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http"):
            self.stop()
            raise SystemExit("the fake server did not start")

    def cpu_secs(self) -> float:
        """The server's CPU time so far (it shares the cores with the client)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def _plan(folder: Path, url: str, name: str, repeats: int) -> Path:
    people = [
        {"name": n, "model": f"openai/{n}", "api_base": url, "price": PRICE}
        for n in ("ana", "ben", "cleo")
    ]
    (folder / "trio.yaml").write_text(yaml.safe_dump({"participants": people}), "utf-8")
    plan = {
        "name": name,
        "topics": [{"title": "Retry policy for the ingest service"}],
        "panels": {"trio": "trio.yaml"},
        "repeats": repeats,
        "session": {"max_rounds": 8},
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(plan), "utf-8")
    return path


def _measure(server: _Server, store: Path, plan: Path, concurrency: int) -> dict[str, float]:
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
    server = _Server(latency)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            _log("warm-up: one session (imports, first connections)")
            _measure(server, folder / "warm.sqlite", _plan(folder, server.url, "warm", 1), 1)
            _log("one session alone")
            alone = _measure(
                server, folder / "alone.sqlite", _plan(folder, server.url, "alone", 1), 1
            )
            _log(f"{sessions} sessions at --concurrency {concurrency}")
            many = _measure(
                server,
                folder / "study.sqlite",
                _plan(folder, server.url, "many", sessions),
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
