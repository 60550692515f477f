"""Round benchmark: does a round cost one model latency, whatever the number of participants?

Against the fake OpenAI-compatible server (run as ``forge-ledger fake-server`` in a child
process, so its threads do not share this process's CPU time or GIL) with a first-byte
latency L, the real orchestrator runs sessions with P participants. For each P it reports
the wall time of the critique round and of the convergence round divided by L (goal ≤ 1.15:
the calls overlap), beside a sequential baseline measured in the same run — the same
orchestrator with ``max_concurrency=1``, i.e. one participant after another as the seeds'
design did. It also reports the orchestrator's CPU time per streamed chunk (process time of
a session with long replies / chunks streamed), since litellm's per-chunk cost is what
blocks the event loop when many streams run at once.

Prints one JSON object on stdout. ``--quick`` is a seconds-long smoke run for CI.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from study_setup import FakeServer

from forge_ledger.domain.values import Participant, SessionConfig, Topic
from forge_ledger.ledger import Ledger
from forge_ledger.orchestrator import NoSeal, Orchestrator
from forge_ledger.orchestrator.live import (
    ContentDelta,
    LiveEvent,
    RoundComplete,
    RoundStartedLive,
)
from forge_ledger.providers import get_provider

GOAL = 1.15
TOPIC = Topic(title="Round benchmark", description="How fast is one round?")


def _rules(name: str, words: int) -> list[dict[str, Any]]:
    filler = " ".join(f"w{i}" for i in range(words))
    critique = json.dumps(
        {
            "strengths": ["clear"],
            "weaknesses": ["short"],
            "score": 80,
            "suggestions": [{"text": "expand", "priority": 3, "category": "completeness"}],
        }
    )
    opinion = json.dumps(
        {
            "stance": "agree",
            "reasoning": "fine",
            "concerns": [],
            "strength": 0.5,
            "topics": ["scope"],
        }
    )
    vote = json.dumps(
        {"agrees": True, "score": 90, "stance": "agree", "concerns": [], "reasoning": "good"}
    )
    return [
        {"match": "· draft ·", "content": f"# Draft by {name}\n\n{filler}"},
        {"match": "· critique ·", "content": f"{filler}\n{critique}"},
        {"match": "· response ·", "content": opinion},
        {"match": "· synthesis ·", "content": f"# Synthesis\n\n{filler}"},
        {"match": "· convergence ·", "content": f"{filler}\n{vote}"},
        {"content": vote},
    ]


class _Timer:
    """Live-event subscriber: wall time per round kind, and chunks streamed."""

    def __init__(self) -> None:
        self.started: dict[int, tuple[str, float]] = {}
        self.durations: dict[str, float] = {}
        self.chunks = 0

    def __call__(self, event: LiveEvent) -> None:
        if isinstance(event, ContentDelta):
            self.chunks += 1
        elif isinstance(event, RoundStartedLive):
            self.started[event.round] = (event.kind.value, time.perf_counter())
        elif isinstance(event, RoundComplete):
            kind, t0 = self.started[event.round]
            self.durations.setdefault(kind, time.perf_counter() - t0)


def _session(url: str, p: int, store: Path, concurrency: int) -> tuple[_Timer, float, str]:
    parts = [
        Participant(name=f"p{i}", model=f"openai/p{i}", api_base=url, temperature=0.2)
        for i in range(1, p + 1)
    ]
    config = SessionConfig(max_concurrency=concurrency, max_rounds=6)
    timer = _Timer()
    provider = get_provider()

    async def go() -> str:
        with Ledger(str(store), create=True) as ledger:
            orch = Orchestrator(ledger, provider, subscribers=[timer], seal=NoSeal())
            try:
                sid = orch.start(TOPIC, config, parts)
                state = await orch.run(sid)
                return state.status.value
            finally:
                await provider.aclose()

    cpu0 = time.process_time()
    status = asyncio.run(go())
    return timer, time.process_time() - cpu0, status


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny run for CI (keys, not figures)")
    ap.add_argument("--latency", type=float, default=0.2, help="first-byte latency L (s)")
    ap.add_argument("--participants", default="2,4,8", help="comma-separated P values")
    ap.add_argument("--words", type=int, default=20, help="words per reply in the round runs")
    ap.add_argument(
        "--long-words",
        type=int,
        default=1000,
        help="words per reply in the CPU-per-chunk run (one chunk per word)",
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.latency, args.participants, args.words, args.long_words = 0.05, "2", 5, 60
    ps = [int(x) for x in args.participants.split(",") if x.strip()]
    names = max([*ps, 4])
    with tempfile.TemporaryDirectory(prefix="round-bench-") as tmp:
        root = Path(tmp)
        rows = []
        short = root / "short.json"
        short.write_text(
            json.dumps({f"p{i}": _rules(f"p{i}", args.words) for i in range(1, names + 1)})
        )
        server = FakeServer(args.latency, short)
        try:
            _session(server.url, 2, root / "warmup.sqlite", 8)  # imports, connection pool
            for p in ps:
                row: dict[str, Any] = {"participants": p}
                for label, conc in (("concurrent", p), ("sequential", 1)):
                    timer, _, status = _session(server.url, p, root / f"{label}-{p}.sqlite", conc)
                    row[f"{label}_status"] = status
                    for kind in ("critique", "convergence"):
                        secs = timer.durations.get(kind)
                        row[f"{label}_{kind}_s"] = None if secs is None else round(secs, 4)
                        row[f"{label}_{kind}_over_L"] = (
                            None if secs is None else round(secs / args.latency, 3)
                        )
                row["meets_goal"] = all(
                    (row[f"concurrent_{k}_over_L"] or 1e9) <= GOAL
                    for k in ("critique", "convergence")
                )
                rows.append(row)
        finally:
            server.stop()
        long = root / "long.json"
        long.write_text(
            json.dumps({f"p{i}": _rules(f"p{i}", args.long_words) for i in range(1, 5)})
        )
        server = FakeServer(0.0, long)
        try:
            timer, cpu, status = _session(server.url, 4, root / "cpu.sqlite", 4)
        finally:
            server.stop()
    doc = {
        "latency_s": args.latency,
        "goal_over_L": GOAL,
        "rounds": rows,
        "cpu": {
            "participants": 4,
            "words_per_reply": args.long_words,
            "status": status,
            "chunks": timer.chunks,
            "process_time_s": round(cpu, 4),
            "cpu_ms_per_chunk": round(1000 * cpu / timer.chunks, 4) if timer.chunks else None,
        },
    }
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
