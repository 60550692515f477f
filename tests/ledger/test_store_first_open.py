"""Opening a SQLite store that does not exist yet, from several places at once.

Two commands started together on a new project, or a follower started beside the first run,
both create the store. Putting the file in WAL mode needs it to itself, and SQLite refuses
(``database is locked``, without waiting) a connection that would wait for that while another
holds the file for writing. The open then failed with a raw ``OperationalError``.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from forge_ledger.ledger import Ledger


def test_a_new_store_opens_while_another_writer_holds_it(tmp_path: Path) -> None:
    """Deterministic: another connection holds the new file for writing for 0.3 s."""
    path = tmp_path / "new.sqlite"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.3, lambda: holder.execute("COMMIT"))
    release.start()
    try:
        with Ledger(str(path)) as ledger:
            assert ledger.session_ids() == []
    finally:
        release.join()
        holder.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


@pytest.mark.slow
def test_three_openers_of_a_new_store_all_open_it(tmp_path: Path) -> None:
    failures: list[BaseException] = []
    for i in range(20):
        path = str(tmp_path / f"s{i}.sqlite")
        start = threading.Barrier(3)

        def open_it(path: str = path, start: threading.Barrier = start) -> None:
            start.wait()
            try:
                with Ledger(path) as ledger:
                    ledger.session_ids()
            except BaseException as e:  # reported below, from the test's thread
                failures.append(e)

        threads = [threading.Thread(target=open_it) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert failures == []
