"""Projection benchmark: full rebuild rate vs plain read+decode, and incremental latency.

Builds ledgers of ~10k and ~100k events (``--quick``: ~2k and ~5k) through the real
``Deliberation`` aggregate with batched saves, then measures in the same run:

- ``read_decode_eps``: reading the notification log and validating every payload;
- ``rebuild_eps``: a full rebuild of all projections into a fresh read-model file;
- ``ratio`` = rebuild / read+decode (goal >= 0.5): the two take turns (``--repeats``, 3 by
  default) and the ratio is the median of the turns' ratios (listed in ``ratios``); the eps
  figures are the medians of the turns;
- ``incremental_ms``: catch-up after one new event, with a warm runner (a follower) and with a
  fresh runner (a CLI call) — median of several appends (goal <= 5 ms warm). The two take
  turns on the same read model, so before each of its catch-ups the warm runner has missed
  the event the fresh one applied and folds it onto its in-memory state (as a follower does
  beside CLI calls); the fresh runner loads the session's state from the ledger's snapshot.
- ``sessions_listing``: listing 1,000 sessions (``--quick``: 100) from the read model's summary
  rows, as ``forge-ledger sessions`` does when the projections are current, against loading
  every session's state from the ledger (goal <= 0.5 s).
- ``show``: ``forge-ledger show`` (in-process, the human view) on one session of 1,000 rounds
  (``--quick``: 200) from the read model against from the ledger (the read model moved
  aside), the outputs compared; ``view_*`` time only what differs, reading the session's rows
  against loading and folding its state (both paths also verify the session's hash chain
  and render every round).
- ``follow_latency`` (PostgreSQL, ``--no-pg`` skips it): from another process's commit to a
  follower having applied it, woken by LISTEN/NOTIFY against polling every second (the
  default ``--interval``), in the same run (goal <= 50 ms median).

Prints one JSON object on stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from forge_ledger.clock import FixedStepClock
from forge_ledger.domain import Deliberation
from forge_ledger.domain import events as ev
from forge_ledger.domain.values import (
    ChatMessage,
    ConvergenceVote,
    ModelResponse,
    Participant,
    RoundKind,
    SessionConfig,
    Stance,
    TokenCount,
    Topic,
)
from forge_ledger.ledger import Ledger
from forge_ledger.ledger.outputs import store_outputs
from forge_ledger.projections import (
    ProjectionRunner,
    current_session_view,
    current_summaries,
    open_views,
    session_view,
)

REBUILD_RATIO_GOAL = 0.5
PARAMS = ev.CallParams(temperature=0.2, max_tokens=512)
NAMES = ["A", "B", "C"]
TEXT = "A paragraph of deliberation text about caches, queues and budgets. " * 8


def _contribute(agg: Deliberation, clock: FixedStepClock, number: int, name: str) -> None:
    msgs = [ChatMessage(role="user", content=f"round {number}")]
    agg.record_contribution(
        round=number, participant=name, model=f"openai/{name}", messages=msgs, params=PARAMS,
        prompt_hash=ev.prompt_hash(msgs), at=clock.now(),
        response=ModelResponse(content=TEXT, model=f"openai/{name}",
                               tokens=TokenCount(input=300, output=200), cost_usd=0.001),
    )


def _session(clock: FixedStepClock, i: int, events: int, rounds: int | None = None,
             ) -> Deliberation:
    """A session of draft and vote rounds, up to ``events`` events (or ``rounds`` rounds)."""
    agg = Deliberation.start(
        session_id=uuid.uuid5(uuid.NAMESPACE_URL, f"bench-{i}"), topic=Topic(title=f"t{i}"),
        config=SessionConfig(max_rounds=10_000),
        participants=[Participant(name=n, model=f"openai/{n}") for n in NAMES], at=clock.now(),
    )
    it = 1
    while agg.version < events and (rounds is None or len(agg.state.rounds) < rounds):
        for kind in (RoundKind.DRAFT, RoundKind.CONVERGENCE):
            number = agg.start_round(kind=kind, iteration=it, participants=NAMES,
                                     at=clock.now())
            for n in NAMES:
                _contribute(agg, clock, number, n)
                if kind is RoundKind.CONVERGENCE:
                    agg.record_vote(round=number, participant=n, at=clock.now(),
                                    vote=ConvergenceVote(agrees=True, stance=Stance.AGREE))
            agg.complete_round(round=number, at=clock.now())
        it += 1
    return agg


def build(path: Path, total: int, per_session: int) -> Ledger:
    ledger = Ledger(str(path), snapshot_interval=100)
    clock = FixedStepClock(step=timedelta(milliseconds=10))
    pending: list[Deliberation] = []
    made = 0
    i = 0
    while made < total:
        agg = _session(clock, i, min(per_session, total - made))
        made += agg.version
        pending.append(agg)
        i += 1
        if len(pending) >= 5:
            ledger.save(*pending)
            pending = []
    if pending:
        ledger.save(*pending)
    return ledger


def read_decode(ledger: Ledger, batch: int) -> int:
    after, n = 0, 0
    while True:
        rows = ledger.notifications(after=after, limit=batch)
        if not rows:
            return n
        for e in rows:
            e.payload()
        n += len(rows)
        after = rows[-1].notification_id or after


def measure(
    tmp: Path, total: int, per_session: int, batch: int, appends: int, repeats: int
) -> dict[str, Any]:
    t0 = time.perf_counter()
    ledger = build(tmp / f"ledger-{total}.sqlite", total, per_session)
    built_s = time.perf_counter() - t0
    events = ledger.max_notification_id()
    print(f"built {events} events in {built_s:.1f}s", file=sys.stderr)

    reads: list[float] = []
    rebuilds: list[float] = []
    for turn in range(repeats):  # in turns: one run of each compares two moments as well
        # each timed run starts from the same heap: a previous turn's runner (every session's
        # state) left alive made the collector's passes, and so the reads, a fifth slower
        gc.collect()
        t0 = time.perf_counter()
        n = read_decode(ledger, batch)
        reads.append(n / (time.perf_counter() - t0))
        gc.collect()
        views = tmp / f"views-{total}-{turn}.sqlite"
        db = open_views(views)
        runner = ProjectionRunner(ledger, db)
        t0 = time.perf_counter()
        applied = runner.catch_up(batch_size=batch)
        rebuilds.append(n / (time.perf_counter() - t0))
        assert applied == n == events
        if turn < repeats - 1:
            db.close()
            del runner, db
            for path in tmp.glob(f"{views.name}*"):
                path.unlink()
    ratios = [b / a for a, b in zip(reads, rebuilds, strict=True)]

    # incremental: one new event (a failed call recorded in an open round) per measurement
    clock = FixedStepClock(step=timedelta(milliseconds=10))
    agg = ledger.get(uuid.uuid5(uuid.NAMESPACE_URL, "bench-0"))
    number = agg.start_round(kind=RoundKind.DRAFT, iteration=agg.state.iteration + 1,
                             participants=NAMES, at=clock.now())
    ledger.save(agg)
    runner.catch_up()
    warm: list[float] = []
    cold: list[float] = []
    for k in range(appends):
        agg.record_failure(ev.ProviderCallFailed(
            round=number, participant="A", attempt=k + 1, model="openai/A",
            error_type="RateLimitError", message="429", retryable=True, will_retry=True,
        ), at=clock.now())
        ledger.save(agg)
        if k % 2 == 0:
            t0 = time.perf_counter()
            got = runner.catch_up()
            warm.append((time.perf_counter() - t0) * 1000)
        else:
            fresh = ProjectionRunner(ledger, db)
            t0 = time.perf_counter()
            got = fresh.catch_up()
            cold.append((time.perf_counter() - t0) * 1000)
        assert got == 1
    db.close()
    ledger.close()
    return {
        "events": events,
        "build_s": round(built_s, 2),
        "read_decode_eps": round(statistics.median(reads)),
        "rebuild_eps": round(statistics.median(rebuilds)),
        "ratio": round(statistics.median(ratios), 3),
        "ratios": [round(r, 3) for r in ratios],
        "incremental_ms_warm": round(statistics.median(warm), 3),
        "incremental_ms_fresh_runner": round(statistics.median(cold), 3),
    }


def measure_listing(tmp: Path, sessions: int, batch: int) -> dict[str, Any]:
    """``sessions``: the read model's summary rows against loading every session's state
    (``Ledger.summaries``, what the listing did before), on the same store in the same run."""
    ledger = Ledger(str(tmp / f"listing-{sessions}.sqlite"), snapshot_interval=100)
    clock = FixedStepClock(step=timedelta(milliseconds=10))
    made = [_session(clock, i, 10) for i in range(sessions)]  # one draft and one vote round
    for k in range(0, sessions, 50):
        ledger.save(*made[k : k + 50])
    views = store_outputs(ledger.location).views
    db = open_views(views)
    ProjectionRunner(ledger, db).catch_up(batch_size=batch)
    db.close()
    t0 = time.perf_counter()
    rows = current_summaries(views, ledger.max_notification_id())
    listed_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    baseline = ledger.summaries()
    baseline_s = time.perf_counter() - t0
    ledger.close()
    assert rows is not None
    assert [r["id"] for r in rows] == [s.id for s in baseline]
    return {
        "sessions": len(rows),
        "read_model_s": round(listed_s, 4),
        "ledger_s": round(baseline_s, 4),
        "speedup": round(baseline_s / listed_s, 1) if listed_s > 0 else None,
    }


def _median_s(run: Any, times: int = 3) -> tuple[float, Any]:
    """Median wall time of ``times`` calls of ``run`` and its last result."""
    took, result = [], None
    for _ in range(times):
        t0 = time.perf_counter()
        result = run()
        took.append(time.perf_counter() - t0)
    return statistics.median(took), result


def measure_show(tmp: Path, rounds: int, batch: int) -> dict[str, Any]:
    """``show`` on a session of ``rounds`` rounds: from the read model (current) against from
    the ledger (the read model moved aside), on the same store in the same run."""
    from click.testing import CliRunner

    from forge_ledger.cli import cli

    path = tmp / f"show-{rounds}.sqlite"
    clock = FixedStepClock(step=timedelta(milliseconds=10))
    with Ledger(str(path), snapshot_interval=100) as ledger:
        agg = _session(clock, 0, 10**9, rounds=rounds)
        ledger.save(agg)
        views = store_outputs(ledger.location).views
        db = open_views(views)
        ProjectionRunner(ledger, db).catch_up(batch_size=batch)
        db.close()
        sid = agg.id
        view_rm_s, from_rows = _median_s(lambda: current_session_view(ledger, views, sid))
        view_ledger_s, from_state = _median_s(lambda: session_view(ledger.state(sid)))
        assert from_rows is not None
        assert from_rows == from_state
        events = ledger.max_notification_id()

    def show() -> str:
        result = CliRunner().invoke(cli, ["show", str(sid), "--store", str(path)])
        assert result.exit_code == 0, result.output
        return result.stdout

    read_model_s, printed = _median_s(show)
    views.rename(views.with_name(views.name + ".aside"))
    ledger_s, expected = _median_s(show)
    assert printed == expected
    return {
        "rounds": rounds,
        "events": events,
        "read_model_s": round(read_model_s, 4),
        "ledger_s": round(ledger_s, 4),
        "speedup": round(ledger_s / read_model_s, 2),
        "view_read_model_s": round(view_rm_s, 4),
        "view_ledger_s": round(view_ledger_s, 4),
    }


_WRITER = """
import sys, time, uuid
from datetime import timedelta
from forge_ledger.clock import FixedStepClock
from forge_ledger.domain import Deliberation
from forge_ledger.domain.values import Participant, SessionConfig, Topic
from forge_ledger.ledger import Ledger
url, n, gap = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
clock = FixedStepClock(step=timedelta(milliseconds=10))
with Ledger(url, create=False) as ledger:
    for i in range(n):
        time.sleep(gap)
        agg = Deliberation.start(session_id=uuid.uuid4(), topic=Topic(title=f"w{i}"),
                                 config=SessionConfig(), at=clock.now(),
                                 participants=[Participant(name="A", model="openai/A")])
        events = len(agg.pending_events)
        issued = time.time()
        ledger.save(agg)
        print(issued, events, flush=True)
"""
"""Another process: ``n`` commits, ``gap`` seconds apart; prints the wall time at which each
save was issued and its number of events. The time is taken before the save: the follower is
woken by the commit itself and may apply it before the writer's ``save`` has returned, so a
time taken after it could come later than the follower's (a negative latency). The latency
measured thus includes the commit's own duration."""


def _follow_once(url: str, tmp: Path, samples: int, notify: bool) -> list[float]:
    """Latency (ms) from another process's commit to the follower having applied it."""
    import subprocess
    import threading

    applied: list[float] = []
    stop = threading.Event()
    with Ledger(url, create=False) as ledger:
        waiter = ledger.event_waiter() if notify else None
        wait = waiter if waiter is not None else time.sleep

        def follow() -> None:
            db = open_views(tmp / f"follow-{notify}.sqlite")
            try:
                runner = ProjectionRunner(ledger, db)
                runner.catch_up()
                runner.follow(interval=1.0, stop=stop.is_set, wait=wait,
                              on_batch=lambda n: applied.extend([time.time()] * n))
                # one entry per applied event, stamped when its batch was applied
            finally:
                db.close()

        thread = threading.Thread(target=follow, daemon=True)
        thread.start()
        time.sleep(0.5)
        out = subprocess.run([sys.executable, "-c", _WRITER, url, str(samples), "0.3"],
                             capture_output=True, text=True, check=True, timeout=300)
        commits = [(float(t), int(k)) for t, k in
                   (line.split() for line in out.stdout.splitlines())]
        total = sum(k for _, k in commits)
        deadline = time.time() + 5
        while len(applied) < total and time.time() < deadline:
            time.sleep(0.05)
        stop.set()
        thread.join(timeout=5)
        if waiter is not None:
            waiter.close()
    latencies, seen = [], 0
    for at, k in commits:
        seen += k  # the commit is applied once its last event is
        if seen <= len(applied):
            latencies.append((applied[seen - 1] - at) * 1000)
    return latencies


def measure_follow(base_url: str, tmp: Path, samples: int) -> dict[str, Any]:
    """``projections update --follow`` on PostgreSQL: woken by NOTIFY vs polling every
    second (the default interval), on a fresh schema, in the same run."""
    import psycopg

    from forge_ledger.ledger import resolve_store

    schema = f"fl_bench_{uuid.uuid4().hex[:10]}"
    url = f"{base_url}{'&' if '?' in base_url else '?'}schema={schema}"
    Ledger(url).close()  # creates the store
    try:
        notify = _follow_once(url, tmp, samples, notify=True)
        poll = _follow_once(url, tmp, samples, notify=False)
    finally:
        loc = resolve_store(url)
        with psycopg.connect(host=loc.host, port=loc.port, dbname=loc.dbname,
                             user=loc.user or None, password=loc.password or None,
                             autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    return {
        "samples": len(notify),
        "notify_ms_median": round(statistics.median(notify), 2),
        "notify_ms_max": round(max(notify), 2),
        "poll_1s_ms_median": round(statistics.median(poll), 2),
        "poll_1s_ms_max": round(max(poll), 2),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small ledgers (CI)")
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument("--appends", type=int, default=20, help="incremental measurements")
    ap.add_argument("--repeats", type=int, default=None,
                    help="turns of read+decode and rebuild (the ratio is their median)")
    ap.add_argument("--sessions", type=int, default=None, help="sessions in the listing run")
    ap.add_argument("--pg-url", default=os.environ.get(
        "FORGE_LEDGER_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test"))
    ap.add_argument("--no-pg", action="store_true", help="skip the PostgreSQL follow run")
    args = ap.parse_args(argv)
    sizes = [(2_000, 200), (5_000, 500)] if args.quick else [(10_000, 1000), (100_000, 1000)]
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as d:
        for total, per_session in sizes:
            results[str(total)] = measure(Path(d), total, per_session, args.batch_size,
                                          args.appends, args.repeats or (1 if args.quick else 3))
        n_sessions = args.sessions or (100 if args.quick else 1000)
        print(f"listing {n_sessions} sessions", file=sys.stderr)
        listing = measure_listing(Path(d), n_sessions, args.batch_size)
        show_rounds = 200 if args.quick else 1000
        print(f"show on a session of {show_rounds} rounds", file=sys.stderr)
        shown = measure_show(Path(d), show_rounds, args.batch_size)
        follow = None
        if not args.no_pg:
            print("follow latency on PostgreSQL: NOTIFY vs polling", file=sys.stderr)
            follow = measure_follow(args.pg_url, Path(d), 5 if args.quick else 20)
    worst = min(r["ratio"] for r in results.values())
    warm = max(r["incremental_ms_warm"] for r in results.values())
    doc = {
        "benchmark": "projections",
        "quick": args.quick,
        "batch_size": args.batch_size,
        "sizes": results,
        "sessions_listing": listing,
        "show": shown,
        "follow_latency": follow,
        "goals": {
            "ratio_min": REBUILD_RATIO_GOAL, "ratio_ok": worst >= REBUILD_RATIO_GOAL,
            "incremental_ms_max": 5.0, "incremental_ok": warm <= 5.0,
            "sessions_listing_s_max": 0.5,
            "sessions_listing_ok": listing["read_model_s"] <= 0.5,
            "follow_ms_max": 50.0,
            "follow_ok": None if follow is None else follow["notify_ms_median"] <= 50.0,
        },
    }
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
