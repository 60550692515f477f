"""The ledger benchmark runs end to end in --quick mode and reports every figure it promises."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "ledger_bench.py"


@pytest.mark.postgres
@pytest.mark.slow
def test_bench_quick_prints_one_json_document() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick"],
        capture_output=True, text=True, timeout=240, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)  # exactly one document: json.loads refuses trailing data
    assert set(doc) >= {
        "append_sqlite", "state_at_position", "append_postgres", "goals_met", "quick",
    }
    assert doc["quick"] is True
    for key in ("append_sqlite", "append_postgres"):
        part = doc[key]
        assert set(part) >= {"events", "event_bytes", "ledger_events_per_sec", "ratio",
                             "goal_ratio", "goal_met"}
        assert part["ledger_events_per_sec"] > 0
        assert isinstance(part["goal_met"], bool)
        assert len(part["ratios"]) == 2  # --quick: two turns; the ratio is their median
        assert part["ratio"] == pytest.approx(sum(part["ratios"]) / 2, abs=0.002)
        # the event store library alone, measured in the same turns
        assert part["stack_events_per_sec"] > 0
        assert part["stack_ratio"] > 0
    tt = doc["state_at_position"]
    for size in ("small", "large"):
        for mode in ("with_snapshots", "without_snapshots"):
            assert set(tt[size][mode]) >= {"samples", "median_ms", "p95_ms"}
    assert set(doc["goals_met"]) == {
        "append_sqlite_ratio", "state_large_with_snapshots", "append_postgres_ratio",
    }
    assert "append on SQLite" in proc.stderr  # progress goes to stderr, not stdout
