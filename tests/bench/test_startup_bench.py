"""The start-up benchmark runs in --quick mode and reports every figure it promises (no timing
assertions: figures are for bench runs, not unit tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "startup_bench.py"


@pytest.mark.slow
def test_startup_bench_quick_prints_one_json_document() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--turns", "1"],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)  # exactly one document: json.loads refuses trailing data
    assert set(doc) >= {"quick", "turns", "baseline", "commands", "folding", "goals_met"}
    assert doc["quick"] is True
    assert set(doc["commands"]) == {"--help", "sessions", "show S", "spec S", "audit S"}
    for figures in doc["commands"].values():
        assert set(figures) >= {"wall_s", "cpu_s", "wall_ratio", "cpu_ratio", "goal", "met"}
        assert figures["wall_s"] > 0
    assert set(doc["folding"]) == {"sessions, folding", "show S, folding"}
