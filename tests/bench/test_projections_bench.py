"""The projection benchmark runs in CI mode and prints the figures it promises."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "projection_bench.py"


@pytest.mark.slow
def test_quick_bench_prints_one_json_document() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--appends", "4"],
        capture_output=True, text=True, timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["quick"] is True
    assert set(doc["goals"]) == {
        "ratio_min", "ratio_ok", "incremental_ms_max", "incremental_ok",
        "sessions_listing_s_max", "sessions_listing_ok", "follow_ms_max", "follow_ok"}
    follow = doc["follow_latency"]
    assert follow["samples"] == 5
    assert 0 < follow["notify_ms_median"] <= follow["notify_ms_max"]
    assert 0 < follow["poll_1s_ms_median"] <= follow["poll_1s_ms_max"]
    listing = doc["sessions_listing"]
    assert listing["sessions"] == 100
    assert listing["read_model_s"] > 0
    assert listing["ledger_s"] > 0
    shown = doc["show"]
    assert shown["rounds"] == 200
    assert shown["events"] > shown["rounds"]
    for key in ("read_model_s", "ledger_s", "view_read_model_s", "view_ledger_s"):
        assert shown[key] > 0
    assert len(doc["sizes"]) == 2
    for size, figures in doc["sizes"].items():
        assert figures["events"] >= int(size)
        for key in ("read_decode_eps", "rebuild_eps", "incremental_ms_warm",
                    "incremental_ms_fresh_runner"):
            assert figures[key] > 0
        assert len(figures["ratios"]) == 1  # --quick: one turn of each
        ratio = figures["rebuild_eps"] / figures["read_decode_eps"]
        assert abs(figures["ratio"] - ratio) < 0.002
        assert abs(figures["ratios"][0] - ratio) < 0.002
