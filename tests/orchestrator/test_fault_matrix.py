"""The fault matrix: every provider fault kind in every round kind, through the real litellm
client and the real HTTP test server (see ``support.fault_matrix`` for how a cell runs).

Each cell must end converged with an identical replay and a verifying chain, and must have got
there the way its fault kind dictates: a transient fault is retried up to ``max_attempts``,
then pauses the session (never aborts it) with the fault recorded; ``resume`` retries with a
fresh set of attempts, calling only the participant still missing. A fault a person must fix
pauses at once (no retry), and the session resumes once the fix — a swapped model, recorded as
an event — is in place.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from support.fault_matrix import (
    FALLBACK_KINDS,
    FAULTED,
    FAULTS,
    MAX_ATTEMPTS,
    ROUND_KINDS,
    SWAP_SUFFIX,
    CellResult,
    FaultKind,
    run_fallbacks,
    run_row,
)


def _problems(fault: FaultKind, cell: CellResult) -> list[str]:
    """Everything about one cell that differs from what its fault kind dictates."""
    who = FAULTED[next(k for k in ROUND_KINDS if k.value == cell.kind)]
    tries = MAX_ATTEMPTS if fault.transient else 1
    problems = list(cell.problems)
    if not cell.ok:
        problems.append(
            f"ended {cell.status}, replay identical {cell.replay_identical}, "
            f"verified {cell.verified}",
        )
    if cell.status_after_first_run != "paused" or len(cell.pauses) != 1:
        problems.append(
            f"first run ended {cell.status_after_first_run}, {len(cell.pauses)} fault pause(s)",
        )
    if len(cell.failures_before_pause) != tries or not set(cell.failures_before_pause) <= set(
        fault.error_types,
    ):
        problems.append(f"attempts before the pause: {cell.failures_before_pause}")
    after = 1 if fault.transient else 0
    if len(cell.failures_after_resume) != after or not set(cell.failures_after_resume) <= set(
        fault.error_types,
    ):
        problems.append(f"failed attempts after resume: {cell.failures_after_resume}")
    if cell.answered_attempt != tries + after + 1:
        problems.append(f"answered at attempt {cell.answered_attempt}")
    if cell.swapped != fault.swap_model:
        problems.append(f"model swapped: {cell.swapped}")
    for pause in cell.pauses[:1]:
        expected = {"kind": cell.kind, "participant": who, "attempts": tries}
        got = {k: pause.get(k) for k in expected}
        if got != expected or pause.get("error_type") not in fault.error_types:
            problems.append(f"pause fault {pause}")
        if who not in pause.get("missing", ()) or not pause.get("message"):
            problems.append(f"pause fault names no missing participant or message: {pause}")
    # resume calls only the participant still missing: everyone else was asked once
    expected = {who: tries, who + SWAP_SUFFIX: 1} if fault.swap_model else {who: tries + after + 1}
    expected |= {m: 1 for m in cell.calls if m not in expected}
    if cell.calls != expected:
        problems.append(f"calls per model in the faulted round: {cell.calls}")
    return problems


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
@pytest.mark.slow
def test_fault_in_every_round_kind_is_survived_and_replays(
    fault: FaultKind, tmp_path: Path,
) -> None:
    cells = asyncio.run(run_row(fault, tmp_path))
    assert [c.kind for c in cells] == [k.value for k in ROUND_KINDS]
    failing = {c.kind: p for c in cells if (p := _problems(fault, c))}
    assert failing == {}, f"{fault.label}: " + "; ".join(f"{k}: {v}" for k, v in failing.items())


def _fallback_problems(fault: FaultKind, cell: CellResult) -> list[str]:
    """A fault that never clears on a draft or synthesis author, with fallbacks allowed: the
    other participant takes the round over, and the session never pauses."""
    kind = next(k for k in FALLBACK_KINDS if k.value == cell.kind)
    who = FAULTED[kind]
    other = next(n for n in ("ada", "bo") if n != who)
    tries = MAX_ATTEMPTS if fault.transient else 1
    problems = list(cell.problems)
    if not cell.ok or cell.pauses:
        problems.append(f"ended {cell.status} after {len(cell.pauses)} pause(s)")
    if cell.fallback != other:
        problems.append(f"fallback to {cell.fallback!r}")
    if len(cell.failures_before_pause) != tries or not set(cell.failures_before_pause) <= set(
        fault.error_types,
    ):
        problems.append(f"attempts before the fallback: {cell.failures_before_pause}")
    if cell.calls != {who: tries, other: 1}:
        problems.append(f"calls per model in the faulted round: {cell.calls}")
    return problems


@pytest.mark.slow
def test_with_fallback_a_draft_or_synthesis_author_that_keeps_failing_is_replaced(
    tmp_path: Path,
) -> None:
    rows = asyncio.run(run_fallbacks(tmp_path))
    failing = {
        f"{fault.name}/{c.kind}": p for fault, cells in rows for c in cells
        if (p := _fallback_problems(fault, c))
    }
    assert failing == {}, "; ".join(f"{k}: {v}" for k, v in failing.items())
