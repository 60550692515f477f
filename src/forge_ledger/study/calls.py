"""The study's calls budget on one machine: each call counted before it starts.

The count starts at what the study's events count; a call the budget (:func:`~.budget.calls_spent`,
the one rule) no longer allows is never made: it fails as ``budget_calls``, its session pauses,
and the runner records the study's stop. On a SQLite store the count lives in the store's file
(table ``study_calls``, one write transaction per call), so the processes of ``study run
--processes N`` share it; one process on another store counts in memory. Workers on PostgreSQL
count in the database (:mod:`.rates`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..errors import StoreUnavailableError
from ..providers import ProviderCallError
from .budget import calls_spent

if TYPE_CHECKING:
    from ..domain.values import ModelResponse, Participant, Price
    from ..providers import Provider, ProviderCall
    from .plan import Budget

__all__ = ["CountedCalls", "FileCount", "MemoryCount"]


class CallCount(Protocol):
    def take(self, budget: Budget) -> str | None:
        """Count one call when the budget allows it; else why not (nothing counted)."""


class MemoryCount:
    """The count of one process."""

    def __init__(self, made: int) -> None:
        self.made = made

    def take(self, budget: Budget) -> str | None:
        why = calls_spent(budget, self.made)
        if why is None:
            self.made += 1
        return why


class FileCount:
    """The count in the SQLite store's file, shared by every process on that file: read and
    raised in one write transaction."""

    def __init__(self, path: Path, study_id: str, recorded: int, *, timeout: float) -> None:
        self.path = path
        self.study_id = study_id
        self.recorded = recorded
        self.timeout = timeout

    def take(self, budget: Budget) -> str | None:
        try:
            with closing(sqlite3.connect(self.path, timeout=self.timeout)) as conn:
                conn.isolation_level = None
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS study_calls "
                    "(study_id TEXT PRIMARY KEY, made INTEGER NOT NULL)"
                )
                conn.execute(
                    "INSERT OR IGNORE INTO study_calls VALUES (?, ?)",
                    (self.study_id, self.recorded),
                )
                (stored,) = conn.execute(
                    "SELECT made FROM study_calls WHERE study_id = ?", (self.study_id,)
                ).fetchone()
                made = max(int(stored), self.recorded)
                why = calls_spent(budget, made)
                if why is None:
                    conn.execute(
                        "UPDATE study_calls SET made = ? WHERE study_id = ?",
                        (made + 1, self.study_id),
                    )
                conn.execute("COMMIT")
        except sqlite3.Error as e:
            raise StoreUnavailableError(
                f"cannot count a call of study {self.study_id[:8]}: {e}",
                hint=f"run 'forge-ledger study resume {self.study_id[:8]}' once the store is free",
            ) from None
        return why


class CountedCalls:
    """A provider whose calls start only while the study's calls budget allows; ``refused``
    says why one did not."""

    def __init__(self, inner: Provider, budget: Budget, count: CallCount) -> None:
        self.inner = inner
        self.budget = budget
        self.count = count
        self.refused = ""

    async def complete(
        self, call: ProviderCall, on_delta: Callable[[str], None] | None = None
    ) -> ModelResponse:
        why = self.count.take(self.budget)
        if why is not None:
            self.refused = why
            raise ProviderCallError("budget_calls", f"call refused: {why}", retryable=False)
        return await self.inner.complete(call, on_delta)

    def price(self, participant: Participant) -> Price | None:
        return self.inner.price(participant)

    async def aclose(self) -> None:
        """The inner provider belongs to the caller, which closes it."""
