"""Run or resume one cell of a study: the unit a runner (or a job queue) calls, idempotently.

:func:`run_cell` can be called any number of times, from any process, for the same cell:

- a finished cell is left as it is;
- a pending cell is claimed by recording ``CellAssigned`` (the session id it will have and
  its share of the budget) at the study's next position: two claimants cannot both record
  it, the loser re-reads the study and finds the cell taken;
- an assigned cell's session is started under that id if it was never recorded, resumed
  otherwise (a paused or cut-off session continues with what is missing); a session another
  process holds (its lease) is left to it;
- the session's end (or pause) is recorded as ``CellFinished`` (or ``CellPaused``).

A counterfactual cell (:mod:`.counterfactual`) waits for its parent cell: while the parent
may still finish, :func:`run_cell` answers None (ask again later); a paused parent leaves it
pending (it runs once the parent is resumed and done); a failed parent fails it. Its session
is a fork of the parent's (:func:`forge_ledger.records.lineage.fork`) under the assigned id, then
resumed like any other; what it spends, for the budget, is what the fork spent after the
fork point.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from uuid import UUID, uuid4

from ..clock import Clock, SystemClock
from ..domain.state import SessionState
from ..errors import (
    ConcurrencyConflictError,
    ForgeLedgerError,
    SessionNotFoundError,
    StoreError,
)
from . import events as sev
from ._sessions import SessionFunctions, SessionHooks
from .budget import WAIT, Allowance, allowance
from .counterfactual import FORK_KEYS, MODEL_SWAPS
from .state import CellState, StudyState
from .stream import StudyStream

if TYPE_CHECKING:
    from ..ledger import Ledger
    from ..providers import Provider

__all__ = ["StudyRun", "run_cell", "session_calls"]

_RETRIES = 20
"""Appends tried again after another writer's conflicting one (each re-reads the study)."""


@dataclass
class StudyRun:
    """One process's hold on a study: its stream, the state as this process last read it,
    and the sources of time and session ids."""

    ledger: Ledger
    study_id: UUID
    clock: Clock = field(default_factory=SystemClock)
    new_id: Callable[[], UUID] = uuid4
    stream: StudyStream = field(init=False)
    state: StudyState = field(init=False)

    def __post_init__(self) -> None:
        self.stream = StudyStream(self.ledger)
        self.state = self.stream.state(self.study_id)

    def reload(self) -> StudyState:
        self.state = self.stream.state(self.study_id)
        return self.state

    def record(
        self, make: Callable[[StudyState], sev.StudyPayload | None]
    ) -> sev.StudyPayload | None:
        """Append what ``make`` answers for the current state (nothing when it answers None),
        re-reading the study and asking again when another writer appended first."""
        for _ in range(_RETRIES):
            payload = make(self.state)
            if payload is None:
                return None
            try:
                self.stream.append(self.state, payload, study_id=self.study_id, at=self.clock.now())
                return payload
            except ConcurrencyConflictError:
                self.reload()
        raise ConcurrencyConflictError(
            f"study {self.study_id} kept changing under this process; nothing more was stored",
            hint="run the command again",
        )

    def stop(self, why: str) -> None:
        """Record that the study starts no more cells, and why (once)."""
        if why:
            self.record(lambda s: None if s.stopped else sev.StudyStopped(reason=why))

    def claim(self, cell_id: str, *, may_wait: bool = False) -> str | None:
        """Assign the pending cell ``cell_id`` to a new session; None when it is assigned
        (by this call or another process), :data:`~.budget.WAIT` when it must wait for
        money a running cell holds, else why the study stops starting cells."""
        refused: list[str] = []

        def make(state: StudyState) -> sev.StudyPayload | None:
            refused.clear()
            if state.cells[cell_id].status != "pending" or state.stopped:
                return None
            given = allowance(
                state, state.cells[cell_id].spec, now=self.clock.now(), may_wait=may_wait
            )
            if given == WAIT:
                refused.append(WAIT)
                return None
            if isinstance(given, str):
                refused.append(given)
                return sev.StudyStopped(reason=given)
            return sev.CellAssigned(
                cell=cell_id,
                session_id=str(self.new_id()),
                max_cost_usd=given.max_cost_usd,
                max_time_secs=given.max_time_secs,
            )

        self.record(make)
        return refused[0] if refused else (self.state.stopped or None)


def session_calls(state: SessionState) -> int:
    """Model calls a session made: its answers and its failed attempts (not the calls the
    study's calls budget refused: those were never made)."""
    failed = sum(1 for f in state.failures if f.error_type != "budget_calls")
    return sum(len(r.contributions) for r in state.rounds) + failed


def _inherited(ledger: Ledger, state: SessionState) -> tuple[float, int]:
    """What a fork's state counts from its parent's history (cost, calls): none for a
    session that is no fork."""
    origin = state.fork_origin
    if origin is None:
        return 0.0, 0
    base = ledger.state(UUID(origin.parent_id), at_event=origin.parent_position)
    return base.cost_usd, session_calls(base)


def _outcome(cell_id: str, state: SessionState, inherited: tuple[float, int]) -> sev.StudyPayload:
    calls = session_calls(state) - inherited[1]
    cost = round(max(state.cost_usd - inherited[0], 0.0), 10)
    if not state.status.terminal:
        reason = state.status_reason or "the session stopped before it ended"
        return sev.CellPaused(cell=cell_id, reason=reason, cost_usd=cost, calls=calls)
    return sev.CellFinished(
        cell=cell_id,
        outcome=state.status.value,
        reason=state.status_reason,
        cost_usd=cost,
        calls=calls,
    )


async def run_cell(
    run: StudyRun,
    cell_id: str,
    *,
    provider: Provider,
    sessions: SessionFunctions,
    hooks: SessionHooks | None = None,
    may_wait: bool = False,
) -> CellState | None:
    """Run or resume cell ``cell_id`` of the study (see the module docstring); returns the
    cell as the study records it afterwards (still pending when the budget stopped it or its
    parent cell is paused), or None when it must wait: for money a running cell holds (with
    ``may_wait``), or for its parent cell to finish (ask again later)."""
    cell = run.state.cells[cell_id]
    if cell.status in ("done", "failed"):
        return cell
    if cell.status == "pending":
        blocked = _blocked_by_parent(run.state, cell)
        if blocked == WAIT:
            return None
        if blocked == _PARENT_PAUSED:
            return cell
        if blocked is not None:
            failed = sev.CellFinished(cell=cell_id, outcome="failed", reason=blocked)
            run.record(lambda s: failed if s.cells[cell_id].status == "pending" else None)
            return run.state.cells[cell_id]
        refused = run.claim(cell_id, may_wait=may_wait)
        if refused == WAIT:
            return None
        if refused is not None:
            return run.state.cells[cell_id]
    cell = run.state.cells[cell_id]
    if cell.status not in ("running", "paused") or cell.session_id is None:
        return cell  # claimed and finished by another process meanwhile
    try:
        state = await _play(run, cell, provider, sessions, hooks or SessionHooks())
    except ConcurrencyConflictError:
        return cell  # another process holds the session (its lease) or started it first
    except StoreError:
        raise
    except ForgeLedgerError as e:
        failed = sev.CellFinished(cell=cell_id, outcome="failed", reason=e.one_line())
        run.record(lambda s: failed if s.cells[cell_id].status in ("running", "paused") else None)
        return run.state.cells[cell_id]
    result = _outcome(cell_id, state, _inherited(run.ledger, state))
    run.record(lambda s: result if s.cells[cell_id].status in ("running", "paused") else None)
    return run.state.cells[cell_id]


async def _play(
    run: StudyRun,
    cell: CellState,
    provider: Provider,
    sessions: SessionFunctions,
    hooks: SessionHooks,
) -> SessionState:
    """Resume the cell's session, or start it under its assigned id if it was never
    recorded."""
    assert cell.session_id is not None
    sid = UUID(cell.session_id)
    try:
        run.ledger.head_version(sid)
    except SessionNotFoundError:
        if cell.spec.parent is not None:
            _fork(run, cell, sid)
            return await sessions.resume(run.ledger, sid, provider=provider, hooks=hooks)
        topic, config, people = run.state.plan.session_of(cell.spec)
        given = _assigned(run.state, cell.spec.id)
        capped = config.model_copy(
            update={"max_cost_usd": given.max_cost_usd, "max_time_secs": given.max_time_secs}
        )
        return await sessions.start(
            run.ledger, sid, topic, capped, people, provider=provider, hooks=hooks
        )
    return await sessions.resume(run.ledger, sid, provider=provider, hooks=hooks)


def _assigned(state: StudyState, cell_id: str) -> Allowance:
    cell = state.cells[cell_id]
    return Allowance(max_cost_usd=cell.cap_usd, max_time_secs=cell.max_time_secs)


_PARENT_PAUSED = "parent paused"


def _blocked_by_parent(state: StudyState, cell: CellState) -> str | None:
    """None when the cell may run now; :data:`WAIT` while its parent cell may still finish;
    ``_PARENT_PAUSED`` while its parent is paused; else why it can never run (one line)."""
    if cell.spec.parent is None:
        return None
    parent = state.cells[cell.spec.parent]
    if parent.status == "done":
        return None
    if parent.status in ("pending", "running"):
        return WAIT
    if parent.status == "paused":
        return _PARENT_PAUSED
    return f"its parent cell {parent.spec.id} failed: nothing to fork"


class _Assigned:
    """The id source of a fork made for a cell: the id its assignment recorded."""

    def __init__(self, session_id: UUID) -> None:
        self.session_id = session_id

    def new_id(self) -> UUID:
        return self.session_id


def _fork(run: StudyRun, cell: CellState, sid: UUID) -> None:
    """Fork the parent cell's session for ``cell`` under ``sid``: at the end of the variant's
    iteration, with its one change, its share of the budget on top of what the parent had
    spent by then."""
    from ..records.lineage import fork

    assert cell.spec.parent is not None
    parent = run.state.cells[cell.spec.parent]
    assert parent.session_id is not None
    pid = UUID(parent.session_id)
    variant = run.state.plan.variants[cell.spec.variant]
    at = int(variant.get("at_iteration", 1))
    spent = run.ledger.state(pid, at_iteration=at).cost_usd
    given = _assigned(run.state, cell.spec.id)
    own = {k: v for k, v in variant.items() if k not in (*FORK_KEYS, MODEL_SWAPS)}
    fork(
        run.ledger,
        pid,
        at_iteration=at,
        model_swaps=variant.get(MODEL_SWAPS) or (),
        without=[cell.spec.without] if cell.spec.without else [],
        config_overrides={
            **own,
            "max_cost_usd": spent + given.max_cost_usd,
            "max_time_secs": given.max_time_secs,
        },
        clock=run.clock,
        ids=_Assigned(sid),
    )
