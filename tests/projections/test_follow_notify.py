"""On PostgreSQL a projection follower wakes on another process's commit (LISTEN/NOTIFY)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from forge_ledger.ledger import Ledger
from forge_ledger.projections import ProjectionRunner, open_views

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

pytestmark = pytest.mark.postgres


def _import(store: str) -> None:
    """Write a session from another process (``forge-ledger import``)."""
    proc = subprocess.run(
        [sys.executable, "-m", "forge_ledger", "import", str(FIXTURES / "v1_0_session.yaml"),
         "--store", store, "--json"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow
def test_follower_is_woken_by_a_commit_not_by_its_poll_interval(pg_url: str) -> None:
    _import(pg_url)  # the store exists, with one session
    applied: list[int] = []
    ready, woke, stop = threading.Event(), threading.Event(), threading.Event()
    first: list[int] = []
    with tempfile.TemporaryDirectory() as tmp, Ledger(pg_url, create=False) as ledger:
        waiter = ledger.event_waiter()
        assert waiter is not None

        def on_batch(n: int) -> None:
            applied.append(n)
            woke.set()

        def follow() -> None:
            db = open_views(Path(tmp) / "views.sqlite")
            try:
                runner = ProjectionRunner(ledger, db)
                first.append(runner.catch_up())
                ready.set()
                # an hour between polls: only a notification can wake it within the test
                runner.follow(interval=3600.0, stop=stop.is_set, on_batch=on_batch, wait=waiter)
            finally:
                db.close()

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        try:
            assert ready.wait(timeout=60)
            _import(pg_url)
            assert woke.wait(timeout=60), "the follower was not woken by the commit"
        finally:
            stop.set()
            _import(pg_url)  # one more commit wakes the follower so it sees stop()
            follower.join(timeout=60)
            waiter.close()
        assert not follower.is_alive()
        # the second session, as many events as the first
        assert first[0] > 0
        assert applied[0] == first[0]


def test_sqlite_has_no_waiter(sqlite_url: str) -> None:
    with Ledger(sqlite_url) as ledger:
        assert ledger.event_waiter() is None
