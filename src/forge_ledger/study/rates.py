"""Per-model call limits and the study's calls budget, shared by every worker: each call
start reserved in the database.

A limit ``MODEL=N/min`` means: in any 60 seconds, at most N calls to MODEL start, counted
over every process that runs the study's cells. Each worker asks PostgreSQL before a call:
in one transaction, under a lock on the model's name, it reads the model's starts of the last
minute (by the database's clock, which every machine shares) and records its own only when
the limit allows it; otherwise it learns how long to wait (:func:`slot_wait`, the rule) and
asks again then. Retried attempts are calls too and are counted the same way.

The study's ``calls`` budget is kept the same way, per study: before each call a worker adds
one to the study's count in ``study_calls`` (under a row lock, in one transaction) only when
:func:`~.budget.calls_spent` allows it; a refused call is never made, and the session pauses
(its round cannot get its answer) with the reason, which the study records as its stop.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import psycopg

from ..errors import StoreUnavailableError, UsageError
from ..providers import ProviderCallError
from .budget import calls_spent

if TYPE_CHECKING:
    from ..domain.values import ModelResponse, Participant, Price
    from ..ledger.store import StoreLocation
    from ..providers import Provider, ProviderCall
    from .plan import Budget

__all__ = [
    "CREATE_TABLE",
    "TABLE",
    "RateLimited",
    "RateReservations",
    "StudyCalls",
    "parse_rates",
    "slot_wait",
]

TABLE = "study_call_starts"
CALLS_TABLE = "study_calls"
WINDOW_SECS = 60.0
_RATE_RE = re.compile(r"^(?P<model>[^=\s]+)=(?P<n>[0-9]{1,6})/min$")


def parse_rates(values: Sequence[str]) -> dict[str, int]:
    """``MODEL=N/min`` options as {model: N}; a malformed one is refused in one line."""
    rates: dict[str, int] = {}
    for value in values:
        m = _RATE_RE.match(value.strip())
        if m is None or int(m["n"]) < 1:
            raise UsageError(
                f"--rate {value!r} is not MODEL=N/min",
                hint="e.g. --rate openai/gpt-4o=60/min (N at least 1)",
            )
        rates[m["model"]] = int(m["n"])
    return rates


def slot_wait(recent: Sequence[datetime], limit: int, now: datetime) -> float:
    """Seconds until a call may start (0: now), given the starts of the last minute, newest
    first: the limit-th newest start must be a full window old."""
    if len(recent) < limit:
        return 0.0
    return max(0.0, WINDOW_SECS - (now - recent[limit - 1]).total_seconds())


CREATE_TABLE = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (model text NOT NULL, started_at timestamptz NOT NULL);"
    f"CREATE INDEX IF NOT EXISTS {TABLE}_model_at ON {TABLE} (model, started_at);"
    f"CREATE TABLE IF NOT EXISTS {CALLS_TABLE} (study_id text PRIMARY KEY, made integer NOT NULL)"
)
"""The reservations' tables; created with the job queue's tables (under their lock)."""


@dataclass(frozen=True)
class StudyCalls:
    """A study whose calls are counted against its budget; ``recorded`` is what its events
    counted when this process read them (the count starts there the first time)."""

    study_id: str
    budget: Budget
    recorded: int


class RateReservations:
    """Call starts reserved in the study's PostgreSQL schema (one connection per process)."""

    def __init__(self, location: StoreLocation, connect: Callable[[], Any]) -> None:
        self.location = location
        self._connect = connect
        self._conn: Any = None
        self._lock = asyncio.Lock()

    async def open(self) -> None:
        """Connect now (a worker does before it takes jobs)."""
        await self._connection()

    async def _connection(self) -> Any:
        if self._conn is None or self._conn.closed:
            self._conn = await self._connect()
        return self._conn

    async def reserve(self, model: str, limit: int) -> None:
        """Return once a start of ``model`` is recorded within its limit."""
        while True:
            async with self._lock:
                try:
                    wait = await self._try(model, limit)
                except psycopg.Error as e:
                    raise StoreUnavailableError(
                        f"cannot reserve a call to {model}: {_first_line(e)}",
                        hint="run the worker again once PostgreSQL is reachable",
                    ) from None
            if wait <= 0:
                return
            await asyncio.sleep(min(wait, WINDOW_SECS))

    async def spent(self, study: StudyCalls, *, take: bool = False) -> str | None:
        """Why the study may start no more calls (its budget spent), or None; with ``take``,
        one call is counted when it may start."""
        async with self._lock:
            try:
                conn = await self._connection()
                async with conn.transaction():
                    await conn.execute(
                        f"INSERT INTO {CALLS_TABLE} (study_id, made) VALUES (%s, %s) "
                        "ON CONFLICT DO NOTHING",
                        (study.study_id, study.recorded),
                    )
                    cur = await conn.execute(
                        f"SELECT made FROM {CALLS_TABLE} WHERE study_id = %s FOR UPDATE",
                        (study.study_id,),
                    )
                    row = await cur.fetchone()
                    why = calls_spent(study.budget, max(int(row[0]), study.recorded))
                    if take and why is None:
                        await conn.execute(
                            f"UPDATE {CALLS_TABLE} SET made = made + 1 WHERE study_id = %s",
                            (study.study_id,),
                        )
            except psycopg.Error as e:
                raise StoreUnavailableError(
                    f"cannot count a call of study {study.study_id[:8]}: {_first_line(e)}",
                    hint="run the worker again once PostgreSQL is reachable",
                ) from None
        return why

    async def _try(self, model: str, limit: int) -> float:
        conn = await self._connection()
        async with conn.transaction():
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                (f"forge_ledger:rate:{self.location.schema}:{model}",),
            )
            cur = await conn.execute("SELECT clock_timestamp()")
            row = await cur.fetchone()
            now: datetime = row[0]
            cur = await conn.execute(
                f"SELECT started_at FROM {TABLE} WHERE model = %s AND started_at > "
                "%s - interval '60 seconds' ORDER BY started_at DESC LIMIT %s",
                (model, now, limit),
            )
            recent = [r[0] for r in await cur.fetchall()]
            wait = slot_wait(recent, limit, now)
            if wait <= 0:
                await conn.execute(
                    f"DELETE FROM {TABLE} WHERE model = %s AND started_at < %s - interval '1 hour'",
                    (model, now),
                )
                await conn.execute(
                    f"INSERT INTO {TABLE} (model, started_at) VALUES (%s, %s)", (model, now)
                )
        return wait

    async def aclose(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


class RateLimited:
    """A provider whose calls start only when their reservations allow: the limited models'
    rates, and the study's calls budget when ``study`` has one (a refused call raises a
    ``budget_calls`` failure, which pauses the session; ``refused`` says why)."""

    def __init__(
        self,
        inner: Provider,
        reservations: RateReservations,
        rates: Mapping[str, int],
        *,
        study: StudyCalls | None = None,
    ) -> None:
        self.inner = inner
        self.reservations = reservations
        self.rates = dict(rates)
        self.study = study if study is not None and study.budget.calls is not None else None
        self.refused = ""

    async def complete(
        self, call: ProviderCall, on_delta: Callable[[str], None] | None = None
    ) -> ModelResponse:
        if self.study is not None:
            why = await self.reservations.spent(self.study, take=True)
            if why is not None:
                self.refused = why
                raise ProviderCallError("budget_calls", f"call refused: {why}", retryable=False)
        limit = self.rates.get(call.participant.model)
        if limit is not None:
            await self.reservations.reserve(call.participant.model, limit)
        return await self.inner.complete(call, on_delta)

    def price(self, participant: Participant) -> Price | None:
        return self.inner.price(participant)

    async def aclose(self) -> None:
        """The inner provider belongs to the worker, which closes it."""
