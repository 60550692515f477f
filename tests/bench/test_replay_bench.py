"""The replay benchmark runs end to end in --quick mode and reports every figure it promises."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "replay_bench.py"


@pytest.mark.slow
def test_replay_bench_quick_prints_one_json_document() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)  # exactly one document: json.loads refuses trailing data
    assert set(doc) >= {"quick", "replay", "storage", "goals_met"}
    assert doc["quick"] is True
    assert doc["replay"], "no replay sizes measured"
    for size in doc["replay"].values():
        assert set(size) >= {
            "rounds",
            "participants",
            "events",
            "identical",
            "replay_secs",
            "calls_served",
            "build_secs",
        }
        assert size["identical"] is True
    storage = doc["storage"]
    assert set(storage) >= {
        "rounds",
        "model_text_bytes",
        "file_bytes",
        "rows_bytes",
        "file_ratio",
        "rows_ratio",
        "checkpoint_per_step",
        "goal_met",
    }
    assert set(storage["checkpoint_per_step"]) >= {"file_bytes", "ratio"}
    cli = doc["storage_cli"]  # a session run by the CLI against the scripted HTTP server
    assert cli["participants"] == 3
    assert cli["rounds"] >= 3
    assert cli["answers"] > cli["rounds"]
    assert cli["file_ratio"] == round(cli["file_bytes"] / cli["model_text_bytes"], 3)
    assert set(doc["goals_met"]) == {
        "replay_100_rounds_secs", "storage_ratio", "storage_cli_ratio", "build_ratio",
    }
    ratio = doc["build_ratio"]
    assert ratio["rounds"][0] < ratio["rounds"][1]
    assert ratio["secs"][0] > 0
    assert ratio["ratio"] == round(ratio["secs"][1] / ratio["secs"][0], 2)
    assert "replay:" in proc.stderr  # progress goes to stderr, not stdout
