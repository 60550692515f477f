"""The round benchmark's ``--quick`` mode runs and prints the documented keys (no timing
assertions: figures are for bench runs, not unit tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "round_bench.py"


@pytest.mark.slow
def test_round_bench_quick_prints_one_json_object() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick"], capture_output=True, text=True, timeout=240,
    )
    assert done.returncode == 0, done.stderr[-1500:]
    doc = json.loads(done.stdout)
    assert {"latency_s", "goal_over_L", "rounds", "cpu"} <= set(doc)
    row = doc["rounds"][0]
    for label in ("concurrent", "sequential"):
        assert row[f"{label}_status"] == "converged"
        for kind in ("critique", "convergence"):
            assert row[f"{label}_{kind}_over_L"] > 0
    assert isinstance(row["meets_goal"], bool)
    assert doc["cpu"]["chunks"] > 0
    assert doc["cpu"]["cpu_ms_per_chunk"] > 0
