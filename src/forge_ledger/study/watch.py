"""Whether a worker's PostgreSQL still answers, asked from a thread of its own.

A worker's ledger calls are synchronous: while PostgreSQL is unreachable, each waits in its
connection pool, and eventsourcing tries each again several times, all on the thread that
runs the worker's event loop (its jobs, its heartbeat). So the loop cannot notice the loss
itself. :class:`StoreWatch` asks PostgreSQL every few seconds over a connection of its own;
when no answer comes for :data:`LOST_SECS` in a row it calls ``on_lost`` once (from its
thread), and the worker then makes every waiting call fail at once and stops (exit 75, "try
again"). A short blip (a connection killed, a server restarted within the window) is not a
loss: the next probe reconnects.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

__all__ = ["LOST_SECS", "PROBE_SECS", "StoreWatch"]

PROBE_SECS = 1.0
"""How often the watch asks PostgreSQL."""
LOST_SECS = 5.0
"""PostgreSQL silent this long is taken for lost."""


def _probe_options(lost_secs: float) -> dict[str, Any]:
    """libpq options that bound every probe by ``lost_secs``, a network that drops packets
    without a word included (TCP's own give-up takes minutes)."""
    secs = max(2, int(lost_secs))  # libpq's smallest connect_timeout
    return {
        "connect_timeout": secs,
        "tcp_user_timeout": secs * 1000,
        "keepalives": 1,
        "keepalives_idle": 1,
        "keepalives_interval": 1,
        "keepalives_count": secs,
        "autocommit": True,
    }


class StoreWatch:
    """Calls ``on_lost`` once PostgreSQL at ``conninfo`` has not answered for ``lost_secs``."""

    def __init__(
        self,
        conninfo: str,
        on_lost: Callable[[BaseException], None],
        *,
        probe_secs: float = PROBE_SECS,
        lost_secs: float = LOST_SECS,
    ) -> None:
        self.conninfo = conninfo
        self.on_lost = on_lost
        self.probe_secs = probe_secs
        self.lost_secs = lost_secs
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="forge-ledger-store-watch")
        self._thread.daemon = True  # a probe stuck in the network never holds the exit

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()

    def _watch(self) -> None:
        conn: Any = None
        failing_since: float | None = None
        try:
            while not self._done.wait(self.probe_secs):
                try:
                    if conn is None:
                        conn = psycopg.connect(self.conninfo, **_probe_options(self.lost_secs))
                    conn.execute("SELECT 1")
                    failing_since = None
                except psycopg.Error as e:
                    _close(conn)
                    conn = None
                    failing_since = failing_since or time.monotonic()
                    if time.monotonic() - failing_since >= self.lost_secs:
                        self.on_lost(e)
                        return
        finally:
            _close(conn)


def _close(conn: Any) -> None:
    if conn is not None:
        with contextlib.suppress(Exception):
            conn.close()
