"""Study report benchmark: a study's exports and report, and one session's metrics row.

Prints one JSON object on stdout (progress on stderr). The study is the one of
``tests/support/study_sessions.py`` (base, strict and a leave-one-out variant over a panel of
three), its sessions built with ``forge_ledger.testing.SessionBuilder`` rather than run, so
only the reading side is measured:

* ``exports`` — ``study export`` of the sessions table as CSV, JSON Lines and Parquet, and of
  the participants table as CSV: seconds each (the best of two runs, each from the store),
  and the Python heap's peak (tracemalloc, in a run of its own).
* ``report`` — ``study report``: seconds and heap peak; ``report_over_tables`` is its time
  over the tables' alone (what the aggregates, the charts and the page add).
* ``one_session`` — one session's metrics (its audit, ``session_row`` and
  ``participant_rows``) from an open, warm store: the median of 20 runs, and
  ``over_read`` its ratio to reading the session's events alone.
* ``commands`` — ``forge-ledger study export`` (CSV) and ``study report`` as a user runs
  them, each in a child process: wall seconds (start-up and imports included) and its
  resident peak (``/usr/bin/time``).
* ``max_rss_mb`` — this process's resident peak at the end: the 200 sessions built here,
  everything above, the libraries and vl-convert's rendering engine included.

Goals (the issue's): ≤ 5 s and ≤ 300 MB for a 200-session study's exports and report;
≤ 20 ms for one session's metrics. ``--quick`` smoke-tests the script on 20 sessions.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from forge_ledger.app.study_reports import study_export, study_report, study_tables
from forge_ledger.audit import audit_report
from forge_ledger.audit.metrics import participant_rows, session_row
from forge_ledger.ledger import Ledger
from support.study_sessions import known_plan, record_known_study

ARMS = 5
"""base, strict, and three leave-one-out arms: sessions per topic and repeat."""


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _measure(fn: Callable[[], Any]) -> dict[str, float]:
    """Seconds of one run (the best of two), then the heap's peak in a third run under
    tracemalloc (which slows what it traces, so it is never timed)."""
    secs = []
    for _ in range(2):
        t = time.perf_counter()
        fn()
        secs.append(time.perf_counter() - t)
    tracemalloc.start()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"secs": round(min(secs), 3), "heap_peak_mb": round(peak / 2**20, 1)}


def _median_ms(fn: Callable[[], Any], runs: int = 20) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return round(statistics.median(times) * 1000, 2)


def _one_session(store: Path, session_id: UUID) -> dict[str, float]:
    with Ledger(str(store), create=False) as ledger:

        def read() -> None:
            list(ledger.events(session_id))

        def metrics() -> None:
            audit = audit_report(list(ledger.events(session_id)))
            session_row(audit)
            participant_rows(audit)

        metrics()  # warm: the store's pages and the code paths
        read_ms, metrics_ms = _median_ms(read), _median_ms(metrics)
    return {
        "metrics_ms": metrics_ms,
        "read_ms": read_ms,
        "over_read": round(metrics_ms / read_ms, 2),
    }


def _commands(store: Path, out: Path) -> dict[str, dict[str, float]]:
    """Each command in a child of ``/usr/bin/time`` (a child forked from this large process
    would count this process's pages as its own)."""
    exe = str(Path(sys.executable).with_name("forge-ledger"))
    runs = {
        "export_csv": ["study", "export", "known", "-o", str(out / "s.csv")],
        "report": ["study", "report", "known", "-o", str(out / "r.html")],
    }
    result = {}
    for name, args in runs.items():
        argv = ["/usr/bin/time", "-f", "%e %M", exe, *args, "--store", str(store)]
        done = subprocess.run(argv, check=True, capture_output=True, text=True)
        secs, kb = done.stderr.strip().splitlines()[-1].split()
        result[name] = {"secs": float(secs), "max_rss_mb": round(int(kb) / 1024, 1)}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 sessions: a smoke test")
    args = parser.parse_args()
    topics, repeats = (2, 2) if args.quick else (8, 5)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        store = folder / "study.sqlite"
        plan = known_plan(folder, topics=topics, repeats=repeats)
        _log(f"building {topics * repeats * ARMS} sessions…")
        with Ledger(str(store)) as ledger:
            record_known_study(ledger, plan, strict_converges=max(repeats // 2, 1))
        s = str(store)
        _log("exports…")
        tables = _measure(lambda: study_tables(s, "known"))
        exports = {
            "sessions_csv": _measure(lambda: study_export(s, "known")),
            "sessions_jsonl": _measure(lambda: study_export(s, "known", fmt="jsonl")),
            "sessions_parquet": _measure(lambda: study_export(s, "known", fmt="parquet")),
            "participants_csv": _measure(lambda: study_export(s, "known", table="participants")),
        }
        _log("report…")
        report = _measure(lambda: study_report(s, "known", path=folder / "study.html"))
        rows = study_tables(s, "known").sessions
        one = _one_session(store, UUID(rows[0].session_id))
        _log("commands…")
        commands = _commands(store, folder)
    total = round(sum(e["secs"] for e in exports.values()) + report["secs"], 3)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "sessions": len(rows),
                "tables": tables,
                "exports": exports,
                "report": {
                    **report,
                    "report_over_tables": round(report["secs"] / tables["secs"], 2),
                },
                "exports_and_report_secs": total,
                "one_session": one,
                "commands": commands,
                "max_rss_mb": round(rss, 1),
                "goals": {
                    "exports_and_report_secs": 5.0,
                    "max_rss_mb": 300,
                    "one_session_metrics_ms": 20,
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
