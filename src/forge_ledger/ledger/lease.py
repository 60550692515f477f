"""One writer per session: a lease claimed before any model call, released by the process's end.

Two ``run``/``resume`` processes on one session would both pay for the same calls before the
append conflict check (kept as the last line of defence) stops the loser. So the process that
is about to call models first claims the session:

* on SQLite, an exclusive ``flock`` on a small file beside the store
  (``<store>.leases/<session id>.lock``), holding the claimant's pid and host for the refusal
  message. The operating system releases the lock when the process ends, however it ends
  (``kill -9`` included), so a dead claimant's lease is simply free again;
* on PostgreSQL, a session-level advisory lock (``pg_try_advisory_lock``) on a connection held
  for the whole run. PostgreSQL releases it when that connection ends, which it does when the
  process dies.

Claims never wait: a session claimed by a live process is refused at once
(:class:`~forge_ledger.errors.LeaseHeldError`), before anything is spent.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
from pathlib import Path
from types import TracebackType
from typing import Any
from uuid import UUID

from ..errors import LeaseHeldError, StoreError
from .store import StoreLocation

__all__ = ["SessionLease", "lease_file"]

_LEASE_NAMESPACE = 0x46_4C  # "FL": the first key of the two-key advisory lock


def lease_file(location: StoreLocation, session_id: UUID) -> Path:
    """The lock file of a session on a SQLite store (beside the store file)."""
    assert location.path is not None
    return location.path.with_name(location.path.name + ".leases") / f"{session_id}.lock"


def _advisory_key(location: StoreLocation, session_id: UUID) -> int:
    """A 32-bit key per (schema, session): sessions of different schemas never collide on the
    namespace key, and collisions between two sessions only make one refuse needlessly."""
    digest = hashlib.sha256(f"{location.schema}/{session_id}".encode()).digest()
    return int.from_bytes(digest[:4], "big", signed=True)


class SessionLease:
    """The claim on one session, held until :meth:`release` (or the process's end)."""

    def __init__(self, location: StoreLocation, session_id: UUID) -> None:
        self.location = location
        self.session_id = session_id
        self._fd: int | None = None
        self._conn: Any = None

    def __enter__(self) -> SessionLease:
        self.claim()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def claim(self) -> None:
        """Take the lease now or raise :class:`LeaseHeldError` (never waits)."""
        if self.location.kind == "sqlite":
            self._claim_file()
        else:
            self._claim_advisory()

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)  # closing the descriptor drops the flock
        if self._conn is not None:
            conn, self._conn = self._conn, None
            with contextlib.suppress(Exception):
                conn.close()  # the advisory lock ends with the connection

    # ------------------------------------------------------------------ SQLite

    def _claim_file(self) -> None:
        import fcntl

        path = lease_file(self.location, self.session_id)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise StoreError(
                f"cannot claim session {str(self.session_id)[:8]}: {path}: {e.strerror}",
                hint="the folder beside the store must be writable",
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise self._held(holder) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        self._fd = fd

    # ------------------------------------------------------------------ PostgreSQL

    def _claim_advisory(self) -> None:
        import psycopg

        loc = self.location
        try:
            conn = psycopg.connect(
                host=loc.host,
                port=loc.port,
                dbname=loc.dbname,
                user=loc.user or None,
                password=loc.password or None,
                connect_timeout=10,
                autocommit=True,
                application_name=f"forge-ledger lease {self.session_id}",
            )
        except psycopg.Error as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise StoreError(
                f"cannot claim session {str(self.session_id)[:8]} on {loc.display}: {first}",
                hint="check the URL and that PostgreSQL is running",
            ) from None
        key = _advisory_key(loc, self.session_id)
        row = conn.execute(
            "SELECT pg_try_advisory_lock(%s, %s)", (_LEASE_NAMESPACE, key)
        ).fetchone()
        if not row or not row[0]:
            holder = _advisory_holder(conn, key)
            conn.close()
            raise self._held(holder)
        self._conn = conn

    def _held(self, holder: str) -> LeaseHeldError:
        short = str(self.session_id)[:8]
        who = f" ({holder})" if holder else ""
        return LeaseHeldError(
            f"session {short} is being run by another process{who}; nothing was called",
            hint=f"wait for it to end, or stop it, then: forge-ledger resume {short}",
        )


def _read_holder(fd: int) -> str:
    with contextlib.suppress(OSError):
        return os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
    return ""


def _advisory_holder(conn: Any, key: int) -> str:
    """The pid (on the database server) of the backend holding the lock, when visible."""
    with contextlib.suppress(Exception):
        row = conn.execute(
            "SELECT l.pid, a.application_name FROM pg_locks l "
            "LEFT JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.classid = %s AND l.objid = %s",
            (_LEASE_NAMESPACE, key & 0xFFFFFFFF),
        ).fetchone()
        if row:
            return f"database backend {row[0]}"
    return ""
