"""The fault matrix (no tests here): each provider fault kind in each round kind.

A cell is one whole session of two participants through the real orchestrator, the real
litellm client and the scripted OpenAI-compatible server on 127.0.0.1: ``ada`` (the only
drafter) and ``bo`` (the synthesizer). Every round kind then has a participant whose answer
the round needs (``engine.round_shortfall``): draft, response and refinement are ada's alone,
critique and synthesis bo's alone, and the vote needs both (``min_consensus`` 2). ada
disagrees in iteration 1's vote, so iteration 2 has a refinement.

The fault hits that participant in the first round of the cell's kind:

* a **transient** fault (429 with Retry-After, 500, 503, a time-out, a stall, a mid-stream
  disconnect, a malformed chunk, an empty body, a stream with no finish) comes
  ``MAX_ATTEMPTS + 1`` times in a row: the orchestrator retries, gives up after
  ``MAX_ATTEMPTS``, the session **pauses** on the fault; ``resume`` gets a fresh set of
  attempts, meets the fault once more, **retries**, and the round completes;
* a fault **a person must fix** (401, 403, an unknown model, a context window exceeded) is not
  retried: the session pauses at once; the person fixes it (the key is accepted again; the
  model is swapped — ``resume -m ada=…``, a ``ParticipantUpdated`` event) and resumes.

Either way the session then converges as an unfaulted one does, and ``replay`` is identical.
Run this module (``cd tests && python -m support.fault_matrix``) to print the table in
docs/guides/real-models.md from a fresh run of every cell.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

from forge_ledger.domain.state import SessionState
from forge_ledger.domain.values import (
    Participant,
    ParticipantRole,
    RoundKind,
    SessionConfig,
    SessionStatus,
)
from forge_ledger.ledger import Ledger, RecordedEvent, verify_session
from forge_ledger.orchestrator import Orchestrator
from forge_ledger.providers import LiteLLMProvider
from forge_ledger.records.replay import replay_session
from forge_ledger.testing import FakeOpenAIServer
from support.orchestrator import PRICE, TOPIC, voice, vote_json

__all__ = [
    "FALLBACK_KINDS",
    "FAULTED",
    "FAULTS",
    "MAX_ATTEMPTS",
    "ROUND_KINDS",
    "SWAP_SUFFIX",
    "CellResult",
    "FaultKind",
    "base_script",
    "cell_participants",
    "cell_script",
    "markdown_table",
    "round_line",
    "run_cell",
    "run_fallbacks",
    "run_row",
]

MAX_ATTEMPTS = 2
TIMEOUT_SECS = 5.0
"""Call time-out of the cells whose fault is a hang or a stall (others keep the default)."""
SWAP_SUFFIX = "-2"
"""A person swaps ``openai/NAME`` for ``openai/NAME-2`` when NAME's model cannot be used."""


@dataclass(frozen=True)
class FaultKind:
    """One row of the matrix: what the server does, and how the session gets past it."""

    name: str
    label: str
    rule: dict[str, Any]
    transient: bool
    error_types: tuple[str, ...]
    """What the orchestrator records for it (``ProviderCallFailed.error_type``)."""
    swap_model: bool = False
    timeout: bool = False


FAULTS: tuple[FaultKind, ...] = (
    FaultKind("rate_limit", "429 + Retry-After", {"fault": "rate_limit", "retry_after": 0.1},
              True, ("rate_limit",)),
    FaultKind("server_error", "500", {"fault": "server_error"}, True, ("server_error",)),
    FaultKind("unavailable", "503", {"fault": "unavailable"}, True, ("server_error",)),
    FaultKind("hang", "time-out (no reply)", {"fault": "hang"}, True, ("timeout",),
              timeout=True),
    FaultKind("stall", "stall mid-stream", {"fault": "stall"}, True, ("timeout", "mid_stream"),
              timeout=True),
    FaultKind("disconnect", "disconnect mid-stream", {"fault": "disconnect"}, True,
              ("mid_stream",)),
    FaultKind("malformed_chunk", "malformed chunk", {"fault": "malformed_chunk"}, True,
              ("mid_stream",)),
    FaultKind("empty", "empty body", {"fault": "empty"}, True, ("empty",)),
    FaultKind("no_finish", "stream with no finish", {"fault": "no_finish"}, True,
              ("truncated", "empty")),
    FaultKind("unauthorized", "401", {"fault": "unauthorized"}, False, ("auth",)),
    FaultKind("forbidden", "403", {"fault": "forbidden"}, False, ("auth",)),
    FaultKind("unknown_model", "unknown model (404)", {"fault": "unknown_model"}, False,
              ("bad_request", "not_found", "unknown_model"), swap_model=True),
    FaultKind("context_window", "context window exceeded", {"fault": "context_window"}, False,
              ("context_window",), swap_model=True),
)

ROUND_KINDS: tuple[RoundKind, ...] = (
    RoundKind.DRAFT,
    RoundKind.CRITIQUE,
    RoundKind.RESPONSE,
    RoundKind.SYNTHESIS,
    RoundKind.CONVERGENCE,
    RoundKind.REFINEMENT,
)

FAULTED = {
    RoundKind.DRAFT: "ada",
    RoundKind.CRITIQUE: "bo",
    RoundKind.RESPONSE: "ada",
    RoundKind.SYNTHESIS: "bo",
    RoundKind.CONVERGENCE: "ada",
    RoundKind.REFINEMENT: "ada",
}
"""Whose answer the first round of each kind needs (and the fault takes away)."""

_DISSENT = vote_json(agrees=False, stance="disagree", score=40, concerns=["no retry budget"])


def round_line(kind: RoundKind) -> str:
    iteration = 2 if kind is RoundKind.REFINEMENT else 1
    return f"· {kind.value} · iteration {iteration}"


def base_script() -> dict[str, list[dict[str, Any]]]:
    """The two voices without any fault (ada dissents in iteration 1's vote), and the same
    voices under the swapped-in model names."""
    dissent = {"match": "· convergence · iteration 1", "content": _DISSENT}
    script = {"ada": voice("ada", before=[dissent]), "bo": voice("bo")}
    return script | {name + SWAP_SUFFIX: rules for name, rules in script.items()}


def cell_script(
    fault: FaultKind, kind: RoundKind, *, fallback: bool = False,
) -> dict[str, list[dict[str, Any]]]:
    """The server's script for one cell: the fault first in the faulted participant's rules
    (for a fallback cell, a fault that never clears)."""
    rule: dict[str, Any] = {"match": round_line(kind), **fault.rule}
    if not fault.swap_model and not fallback:  # a swapped-out model stays broken
        rule["times"] = MAX_ATTEMPTS + 1 if fault.transient else 1
    script = base_script()
    who = FAULTED[kind]
    script[who] = [rule, *script[who]]
    return script


def cell_participants(url: str | None) -> list[Participant]:
    """ada, the only drafter, and bo, the synthesizer (at ``url``: None for an in-process
    provider)."""
    roles = {"ada": ParticipantRole.DRAFTER, "bo": ParticipantRole.SYNTHESIZER}
    return [
        Participant(name=n, model=f"openai/{n}", role=r, api_base=url, price=PRICE,
                    temperature=0.2)
        for n, r in roles.items()
    ]


@dataclass
class CellResult:
    """What one cell did, read back from its events."""

    fault: str
    kind: str
    pauses: list[dict[str, Any]] = field(default_factory=list)
    """The ``fault`` of each ``SessionPaused`` event."""
    failures_before_pause: list[str] = field(default_factory=list)
    failures_after_resume: list[str] = field(default_factory=list)
    answered_attempt: int | None = None
    """Attempt number of the faulted participant's answer in the faulted round."""
    swapped: bool = False
    fallback: str = ""
    """Who took the faulted round over (``FallbackChosen``), if anyone."""
    status: str = ""
    replay_identical: bool = False
    verified: bool = False
    status_after_first_run: str = ""
    calls: dict[str, int] = field(default_factory=dict)
    """Requests the server got in the faulted round, per model."""
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def path(self) -> str:
        """The cell's way through, as the documentation's table shows it."""
        if self.fallback:
            retried = "retried, " if len(self.failures_before_pause) > 1 else ""
            return f"{retried}fallback"
        if not self.pauses:
            return "retried" if self.failures_before_pause else "no fault seen"
        steps = ["retried"] if len(self.failures_before_pause) > 1 else []
        steps.append("paused")
        if self.swapped:
            steps.append("-m swap")
        steps.append("resumed")
        if self.failures_after_resume:
            steps.append("retried")
        return ", ".join(steps)

    @property
    def ok(self) -> bool:
        return self.status == "converged" and self.replay_identical and self.verified


def _fault_round(state: SessionState, kind: RoundKind) -> int:
    return next(r.number for r in state.rounds if r.kind is kind)


def _read(events: Sequence[RecordedEvent], result: CellResult, round_no: int, who: str) -> None:
    resumed = False
    for e in events:
        if e.type == "SessionPaused" and e.data.get("fault"):
            result.pauses.append(e.data["fault"])
        elif e.type == "SessionResumed" and result.pauses:
            resumed = True
        elif e.type == "ParticipantUpdated":
            result.swapped = True
        elif e.type == "FallbackChosen" and e.data["round"] == round_no:
            result.fallback = e.data["participant"]
        elif e.data.get("round") == round_no and e.data.get("participant") == who:
            if e.type == "ProviderCallFailed":
                target = result.failures_after_resume if resumed else result.failures_before_pause
                target.append(e.data["error_type"])
            elif e.type == "ContributionRecorded" and e.data["purpose"] == "answer":
                result.answered_attempt = e.data["attempt"]


def _swap_model(orch: Orchestrator, ledger: Ledger, sid: UUID, name: str) -> None:
    """What ``forge-ledger resume S -m NAME=MODEL`` records before resuming."""
    agg = ledger.get(sid)
    who = agg.state.participant(name)
    assert who is not None
    model = who.model + SWAP_SUFFIX
    agg.update_participant(
        who.model_copy(update={"model": model}), at=orch.clock.now(), reason=f"-m {name}={model}",
    )
    ledger.save(agg)


async def _run(orch: Orchestrator, ledger: Ledger, fault: FaultKind, kind: RoundKind,
               url: str, result: CellResult, fallback: bool) -> UUID:
    config = SessionConfig(
        max_attempts=MAX_ATTEMPTS,
        max_rounds=12,
        call_timeout_secs=TIMEOUT_SECS if fault.timeout else 120.0,
        fallback=fallback,
    )
    sid = orch.start(TOPIC, config, cell_participants(url))
    state = await orch.run(sid)
    result.status_after_first_run = state.status.value
    if state.status is SessionStatus.PAUSED:
        if fault.swap_model:
            _swap_model(orch, ledger, sid, FAULTED[kind])
        state = await orch.resume(sid)
    result.status = state.status.value
    return sid


async def run_cell(
    fault: FaultKind,
    kind: RoundKind,
    directory: Path,
    provider: LiteLLMProvider,
    *,
    fallback: bool = False,
) -> CellResult:
    """Run one cell to its end (pausing and resuming when it must) and read what happened.

    ``fallback``: the session allows fallbacks (``run --fallback``) and the fault never
    clears, so a draft or synthesis must be handed to the other participant."""
    result = CellResult(fault=fault.name, kind=kind.value)
    started = time.monotonic()
    server = FakeOpenAIServer(cell_script(fault, kind, fallback=fallback)).start()
    name = f"{fault.name}-{kind.value}{'-fallback' if fallback else ''}.sqlite"
    try:
        with Ledger(str(directory / name), create=True) as ledger:
            orch = Orchestrator(ledger, provider)
            sid = await _run(orch, ledger, fault, kind, server.url, result, fallback)
            state = ledger.state(sid)
            round_no = _fault_round(state, kind)
            _read(list(ledger.events(sid)), result, round_no, FAULTED[kind])
            result.verified = verify_session(ledger, sid).ok
            replay = await asyncio.to_thread(replay_session, ledger, sid)
            result.replay_identical = replay.ok
            if not replay.ok and replay.difference is not None:
                result.problems.append(replay.difference.message)
        line = round_line(kind)
        for r in server.requests:
            if line in r.last_user_message.splitlines()[0]:
                model = r.model.removeprefix("openai/")
                result.calls[model] = result.calls.get(model, 0) + 1
    finally:
        server.stop()
    result.seconds = time.monotonic() - started
    return result


FALLBACK_KINDS = (RoundKind.DRAFT, RoundKind.SYNTHESIS)
"""The single-author rounds a fallback may hand to another participant."""


async def run_row(
    fault: FaultKind, directory: Path, kinds: Sequence[RoundKind] = ROUND_KINDS,
    *, fallback: bool = False,
) -> list[CellResult]:
    """Every round kind of one fault kind, concurrently (their waits overlap).

    One provider for the row: closing a provider closes litellm's process-wide HTTP clients,
    which would cut the calls of the cells still running."""
    provider = _provider()
    try:
        cells = [run_cell(fault, k, directory, provider, fallback=fallback) for k in kinds]
        return list(await asyncio.gather(*cells))
    finally:
        await provider.aclose()


def _provider() -> LiteLLMProvider:
    """The real provider, with litellm already imported: the first call imports it (seconds on
    a loaded machine) inside its own time-out, which the short time-out of the hang and stall
    cells must not include. Looking up a table price imports it."""
    provider = LiteLLMProvider()
    provider.price(Participant(name="warm-up", model="gpt-4o-mini"))
    return provider


async def run_fallbacks(directory: Path) -> list[tuple[FaultKind, list[CellResult]]]:
    """Every fault kind in the rounds a fallback can take over.

    The cells whose fault is a hang or a stall run after the others, on their own: their
    short call time-out applies to every call of their session, the healthy ones included,
    and a healthy call shares the event loop with every cell running beside it (their ledger
    writes and folds run on it). With all the cells at once, that wait alone could pass the
    time-out on a loaded machine and turn a healthy call into a failed one."""
    provider = _provider()
    done: dict[str, list[CellResult]] = {}
    try:
        for batch in ([f for f in FAULTS if not f.timeout], [f for f in FAULTS if f.timeout]):
            cells = [
                run_cell(f, k, directory, provider, fallback=True)
                for f in batch
                for k in FALLBACK_KINDS
            ]
            results = list(await asyncio.gather(*cells))
            n = len(FALLBACK_KINDS)
            done |= {f.name: results[i * n : (i + 1) * n] for i, f in enumerate(batch)}
    finally:
        await provider.aclose()
    return [(f, done[f.name]) for f in FAULTS]


def markdown_table(
    rows: Sequence[tuple[FaultKind, Sequence[CellResult]]],
    kinds: Sequence[RoundKind] = ROUND_KINDS,
) -> str:
    """One row per fault kind: the way through its cells took, then ✓ per round kind for a
    cell that took it and ended converged, verified and replaying identically (✗ and its own
    way through otherwise)."""
    head = "| fault | way through | " + " | ".join(k.value for k in kinds) + " |"
    sep = "|---|---|" + "---|" * len(kinds)
    lines = [head, sep]
    for fault, cells in rows:
        common = Counter(c.path for c in cells).most_common(1)[0][0]
        marks = ["✓" if c.ok and c.path == common else f"{c.path} ✗" for c in cells]
        lines.append(f"| {fault.label} | {common} | " + " | ".join(marks) + " |")
    return "\n".join(lines)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="forge-ledger-matrix-") as tmp:
        rows = []
        for fault in FAULTS:
            cells = asyncio.run(run_row(fault, Path(tmp)))
            rows.append((fault, cells))
            print(json.dumps([c.__dict__ | {"path": c.path} for c in cells]), file=sys.stderr)
        fallbacks = asyncio.run(run_fallbacks(Path(tmp)))
    print(markdown_table(rows))
    print()
    print(markdown_table(fallbacks, FALLBACK_KINDS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
