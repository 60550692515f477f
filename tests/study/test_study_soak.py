"""kill -9 soak of a queued study: workers killed at random moments lose no cell and exceed no
budget.

The soak itself lives in ``bench/study_soak.py`` (``--cells 40 --kills 10`` gives the figures
in docs/benchmarks.md); this test runs it at a size that fits CI and checks every property it
reports. The moments come from a seed (``FORGE_LEDGER_SOAK_SEED`` sets another one, and
``python bench/study_soak.py --cells 4 --kills 2 --seed <seed>`` aims at the same moments).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from support.bench_modules import bench_module
from support.postgres import PG_BASE

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

CELLS = 4
KILLS = 2


@pytest.mark.timeout(600)  # worker start-ups and heartbeat time-outs: slow on a loaded machine
def test_workers_killed_with_9_lose_no_cell_and_exceed_no_budget(tmp_path: Path) -> None:
    seed = int(os.environ.get("FORGE_LEDGER_SOAK_SEED", "2026"))
    soak = bench_module("study_soak")
    result = soak.run_soak(CELLS, KILLS, seed=seed, directory=tmp_path, base=PG_BASE)
    why = f"seed {seed}: {json.dumps(result.as_json(), indent=1)}"
    assert result.problems == [], why
    assert len(result.killed_running) == KILLS, why
    assert any(n > 0 for n in result.killed_running), why  # kills cut running cells off
    assert result.done == CELLS == result.sessions, why
    assert result.assigned_once, why
    assert result.finished_once, why
    assert result.verified, why
    assert result.replay_identical, why
    assert 0 < result.spent_usd <= result.budget_usd, why
    assert 0 < result.server_requests <= result.calls_counted <= result.budget_calls, why
