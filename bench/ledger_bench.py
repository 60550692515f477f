"""Ledger benchmark: append throughput against raw drivers, and time-travel latency.

Prints one JSON object on stdout (progress on stderr):

* ``append_sqlite`` — ``ContributionRecorded`` events appended per second with one durable
  save each, against raw ``sqlite3`` inserting rows of the same byte size, one transaction
  per row, on a file with the same settings (WAL, default synchronous), in the same run.
  The two take turns (``--rounds``, 5 by default) and the ratio is the median of the turns'
  ratios (each turn's rates are listed in ``ratios``). Goal: ratio ≥ 0.5.
  ``stack_ratio`` is the same measure for eventsourcing's own ``Application`` saving a
  one-attribute aggregate's events of about the same size, in the same turns: what the event
  store library alone costs, before any of forge-ledger's work (hash chain, validation,
  fold, texts by reference, compression).
* ``state_at_position`` — median/p95 latency of ``Ledger.state(id, at_event=v)`` for random
  ``v`` on a small (1k) and a large (10k) session, with and without snapshots. Goal: ≤ 10 ms
  on the large session with snapshots.
* ``append_postgres`` — the append measurement on PostgreSQL (``--pg-url``; a fresh schema
  is created and dropped), against raw ``psycopg`` inserts of the same size, in turns too.

``--quick`` shrinks every size so CI can smoke-test the script in seconds; its figures are
not meaningful.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event

from forge_ledger.domain import events as ev
from forge_ledger.domain.aggregate import Deliberation
from forge_ledger.domain.values import (
    ChatMessage,
    ModelResponse,
    Participant,
    RoundKind,
    SessionConfig,
    TokenCount,
    Topic,
)
from forge_ledger.ledger import Ledger, resolve_store

APPEND_RATIO_GOAL = 0.5
STATE_LATENCY_GOAL_MS = 10.0
DEFAULT_PG = os.environ.get("FORGE_LEDGER_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class Clock:
    def __init__(self) -> None:
        self.t = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.t += timedelta(milliseconds=1)
        return self.t


MESSAGES = [
    ChatMessage(role="system", content="You are a careful reviewer of designs."),
    ChatMessage(role="user", content="Review the caching proposal. " * 4),
]
PARAMS = ev.CallParams(temperature=0.2, max_tokens=512)
RESPONSE = ModelResponse(
    content="The proposal is sound; consider write-through for the session table. " * 3,
    model="openai/scripted",
    tokens=TokenCount(input=180, output=60),
    cost_usd=0.0021,
    duration_ms=850,
)


def _session(clock: Clock) -> Deliberation:
    agg = Deliberation.start(
        session_id=uuid.uuid4(),
        topic=Topic(title="Benchmark"),
        config=SessionConfig(),
        participants=[Participant(name="p0", model="openai/scripted")],
        at=clock(),
    )
    agg.start_round(kind=RoundKind.DRAFT, iteration=1, participants=["p0"], at=clock())
    _contribution(agg, clock, "answer")
    return agg


def _contribution(agg: Deliberation, clock: Clock, purpose: str = "repair") -> None:
    agg.record_contribution(
        round=1,
        participant="p0",
        model="openai/scripted",
        messages=MESSAGES,
        params=PARAMS,
        prompt_hash=ev.prompt_hash(MESSAGES),
        response=RESPONSE,
        at=clock(),
        purpose=purpose,
    )


def _rate(n: int, fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return n / (time.perf_counter() - start)


def _alternating(
    ours: Callable[[], None], raw: Callable[[], None], stack: Callable[[], None], n: int,
    rounds: int,
) -> dict[str, Any]:
    """Rates of ``ours``, ``raw`` and ``stack`` measured in turns, ``n`` calls in all for
    each, and the medians of the turns' ratios to ``raw``: on a noisy machine one long run of
    each compares two moments as much as two writers."""
    writers = (ours, raw, stack)
    for _ in range(min(20, n)):  # warm up all
        for write in writers:
            write()
    per_round = max(n // rounds, 1)
    turns = [[_rate(per_round, write) for write in writers] for _ in range(rounds)]
    ratios = [a / b for a, b, _ in turns]
    return {
        "ledger": statistics.median(t[0] for t in turns),
        "raw": statistics.median(t[1] for t in turns),
        "stack": statistics.median(t[2] for t in turns),
        "ratio": statistics.median(ratios),
        "ratios": [round(r, 3) for r in ratios],
        "stack_ratio": statistics.median(c / b for _, b, c in turns),
    }


class _Note(Aggregate):
    """The smallest useful aggregate: one attribute, one kind of event."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    @event("Added")
    def add(self, text: str) -> None:
        self.texts.append(text)


class _StackAppender:
    """eventsourcing's own ``Application`` saving one ``_Note`` event per call, its stored
    state about ``size`` bytes: the event store library's cost alone, to compare the ledger's
    with (``stack_ratio``)."""

    def __init__(self, env: dict[str, str], size: int) -> None:
        self.app: Application[uuid.UUID] = Application(env=env)
        self.note = _Note()
        self.app.save(self.note)
        self.note.add("")
        self.app.save(self.note)
        empty = len(self.app.recorder.select_events(self.note.id)[-1].state)
        self.text = "x" * max(size - empty, 0)

    def __call__(self) -> None:
        self.note.add(self.text)
        self.app.save(self.note)

    def close(self) -> None:
        self.app.close()


# --------------------------------------------------------------------------- append


class _LedgerAppender:
    """Appends contributions to one session of a ledger, one durable save each."""

    def __init__(self, store: str) -> None:
        self.clock = Clock()
        self.ledger = Ledger(store, snapshot_interval=0)
        self.agg = _session(self.clock)
        self.ledger.save(self.agg)

    def __call__(self) -> None:
        _contribution(self.agg, self.clock)
        self.ledger.save(self.agg)

    def warmed_event_bytes(self) -> int:
        """The average stored size of a contribution, after 20 appends (the raw baseline
        writes rows of this size)."""
        for _ in range(20):
            self()
        return self.event_bytes()

    def event_bytes(self) -> int:
        """The average stored size of the contributions appended."""
        sizes = [
            len(stored.state)
            for stored in self.ledger.app.recorder.select_events(self.agg.id)
            if stored.topic.endswith("ContributionRecorded")
        ]
        return int(statistics.mean(sizes))

    def close(self) -> None:
        self.ledger.close()


def _raw_sqlite_appender(path: Path, size: int) -> tuple[Callable[[], None], sqlite3.Connection]:
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL;")
    con.execute(
        "CREATE TABLE stored_events (originator_id TEXT, originator_version INTEGER, "
        "topic TEXT, state BLOB, PRIMARY KEY (originator_id, originator_version)) "
    )
    payload = os.urandom(size // 2).hex().encode()[:size]
    oid = uuid.uuid4().hex
    counter = iter(range(1, 10**9))

    def one() -> None:
        con.execute("BEGIN")
        con.execute(
            "INSERT INTO stored_events VALUES (?, ?, ?, ?)",
            (oid, next(counter), "forge_ledger:ContributionRecorded", payload),
        )
        con.execute("COMMIT")

    return one, con


def bench_append_sqlite(n: int, workdir: Path, rounds: int) -> dict[str, Any]:
    log(f"append on SQLite: {n} events, one save each, against raw sqlite3 and eventsourcing "
        f"alone, in {rounds} turns")
    ours = _LedgerAppender(str(workdir / "append.sqlite"))
    try:
        size = ours.warmed_event_bytes()
        raw, con = _raw_sqlite_appender(workdir / "raw.sqlite", size)
        stack = _StackAppender(
            {"PERSISTENCE_MODULE": "eventsourcing.sqlite",
             "SQLITE_DBNAME": str(workdir / "stack.sqlite")}, size)
        try:
            got = _alternating(ours, raw, stack, n, rounds)
        finally:
            stack.close()
            con.close()
    finally:
        ours.close()
    return {
        "events": n,
        "event_bytes": size,
        "ledger_events_per_sec": round(got["ledger"], 1),
        "raw_sqlite_rows_per_sec": round(got["raw"], 1),
        "ratio": round(got["ratio"], 3),
        "ratios": got["ratios"],
        "stack_events_per_sec": round(got["stack"], 1),
        "stack_ratio": round(got["stack_ratio"], 3),
        "goal_ratio": APPEND_RATIO_GOAL,
        "goal_met": got["ratio"] >= APPEND_RATIO_GOAL,
    }


# --------------------------------------------------------------------------- time travel


def _build_session(store: str, events: int, snapshot_interval: int, batch: int = 100) -> uuid.UUID:
    clock = Clock()
    with Ledger(store, snapshot_interval=snapshot_interval) as ledger:
        agg = _session(clock)
        while agg.version < events:
            for _ in range(min(batch, events - agg.version)):
                _contribution(agg, clock)
            ledger.save(agg)
        return agg.id


def _latencies_ms(store: str, sid: uuid.UUID, snapshot_interval: int, samples: int,
                  head: int) -> list[float]:
    rng = random.Random(7)
    out = []
    with Ledger(store, snapshot_interval=snapshot_interval, create=False) as ledger:
        ledger.state(sid, at_event=head)  # warm up caches, imports
        for _ in range(samples):
            v = rng.randint(1, head)
            t = time.perf_counter()
            state = ledger.state(sid, at_event=v)
            out.append((time.perf_counter() - t) * 1000)
            assert state.version == v
    return out


def bench_state(sizes: dict[str, int], samples: int, workdir: Path,
                interval: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, n in sizes.items():
        entry: dict[str, Any] = {"events": n}
        for mode, iv in (("with_snapshots", interval), ("without_snapshots", 0)):
            store = str(workdir / f"tt-{label}-{mode}.sqlite")
            log(f"state at position: {label} session ({n} events) {mode}")
            sid = _build_session(store, n, iv)
            lat = _latencies_ms(store, sid, iv, samples if iv else max(3, samples // 4), n)
            entry[mode] = {
                "samples": len(lat),
                "median_ms": round(statistics.median(lat), 3),
                "p95_ms": round(sorted(lat)[int(0.95 * (len(lat) - 1))], 3),
                "max_ms": round(max(lat), 3),
            }
        out[label] = entry
    large = out["large"]["with_snapshots"]
    out["snapshot_interval"] = interval
    out["goal_ms"] = STATE_LATENCY_GOAL_MS
    out["goal_met"] = large["median_ms"] <= STATE_LATENCY_GOAL_MS
    out["goal_met_p95"] = large["p95_ms"] <= STATE_LATENCY_GOAL_MS
    return out


# --------------------------------------------------------------------------- PostgreSQL


def bench_append_postgres(base_url: str, n: int, rounds: int) -> dict[str, Any]:
    import psycopg

    schema = f"fl_bench_{uuid.uuid4().hex[:10]}"
    sep = "&" if "?" in base_url else "?"
    url = f"{base_url}{sep}schema={schema}"
    loc = resolve_store(url)
    log(f"append on PostgreSQL ({loc.display}): {n} events, one save each, in {rounds} turns")
    conn = psycopg.connect(
        host=loc.host, port=loc.port, dbname=loc.dbname, user=loc.user or None,
        password=loc.password or None, autocommit=True,
    )
    ours: _LedgerAppender | None = None
    try:
        ours = _LedgerAppender(url)
        size = ours.warmed_event_bytes()
        conn.execute(
            f'CREATE TABLE "{schema}".raw_events (originator_id uuid, originator_version bigint, '
            "topic text, state bytea, notification_id bigserial, "
            "PRIMARY KEY (originator_id, originator_version))"
        )
        payload = os.urandom(size // 2).hex().encode()[:size]
        oid = uuid.uuid4()
        counter = iter(range(1, 10**9))

        def raw() -> None:
            with conn.transaction():
                conn.execute(
                    f'INSERT INTO "{schema}".raw_events '
                    "(originator_id, originator_version, topic, state) VALUES (%s, %s, %s, %s)",
                    (oid, next(counter), "forge_ledger:ContributionRecorded", payload),
                )

        stack = _StackAppender({
            "PERSISTENCE_MODULE": "eventsourcing.postgres", "POSTGRES_DBNAME": loc.dbname,
            "POSTGRES_HOST": loc.host, "POSTGRES_PORT": str(loc.port),
            "POSTGRES_USER": loc.user, "POSTGRES_PASSWORD": loc.password,
            "POSTGRES_SCHEMA": schema,
        }, size)
        try:
            got = _alternating(ours, raw, stack, n, rounds)
        finally:
            stack.close()
    finally:
        if ours is not None:
            ours.close()
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        conn.close()
    return {
        "events": n,
        "event_bytes": size,
        "ledger_events_per_sec": round(got["ledger"], 1),
        "raw_psycopg_rows_per_sec": round(got["raw"], 1),
        "ratio": round(got["ratio"], 3),
        "ratios": got["ratios"],
        "stack_events_per_sec": round(got["stack"], 1),
        "stack_ratio": round(got["stack_ratio"], 3),
        "goal_ratio": APPEND_RATIO_GOAL,
        "goal_met": got["ratio"] >= APPEND_RATIO_GOAL,
    }


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (CI smoke test)")
    parser.add_argument("--append-events", type=int, default=None)
    parser.add_argument("--samples", type=int, default=None, help="latency samples per case")
    parser.add_argument("--snapshot-interval", type=int, default=100)
    parser.add_argument("--pg-url", default=DEFAULT_PG, help="PostgreSQL base URL")
    parser.add_argument("--no-pg", action="store_true", help="skip the PostgreSQL part")
    parser.add_argument("--rounds", type=int, default=None,
                        help="turns of the append comparison (its ratio is their median)")
    args = parser.parse_args(argv)

    quick = args.quick
    n_append = args.append_events or (100 if quick else 3000)
    samples = args.samples or (10 if quick else 60)
    rounds = args.rounds or (2 if quick else 5)
    sizes = {"small": 200, "large": 1000} if quick else {"small": 1000, "large": 10_000}

    result: dict[str, Any] = {
        "quick": quick,
        "python": sys.version.split()[0],
        "sqlite": sqlite3.sqlite_version,
    }
    with tempfile.TemporaryDirectory(prefix="forge-ledger-bench-") as tmp:
        work = Path(tmp)
        result["append_sqlite"] = bench_append_sqlite(n_append, work, rounds)
        result["state_at_position"] = bench_state(sizes, samples, work, args.snapshot_interval)
    result["append_postgres"] = (
        None if args.no_pg else bench_append_postgres(args.pg_url, max(n_append // 3, 50), rounds)
    )
    goals = {
        "append_sqlite_ratio": result["append_sqlite"]["goal_met"],
        "state_large_with_snapshots": result["state_at_position"]["goal_met"],
    }
    if result["append_postgres"] is not None:
        goals["append_postgres_ratio"] = result["append_postgres"]["goal_met"]
    result["goals_met"] = goals
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
