"""Deterministic replay: re-run the real orchestrator against recorded answers and compare.

Like Temporal's workflow replay: the recorded events are the truth; the *current* code
(engine rules, prompt templates, orchestrator) is re-run with

* a :class:`ReplayProvider` that answers each call from the recorded outcome of the same
  (round, participant, attempt) — the recorded response, or the recorded failure — and never
  opens a connection;
* a :class:`_ReplayStore` in place of the ledger, which never writes: every event the
  orchestrator would append is compared with the recorded event at the same position;
* a clock that answers, for the event about to be recorded, the recorded timestamp.

Events the orchestrator does not produce (the session's start, participants joining, human
answers and overrules, resumes, rewinds, seals) are applied from the record where they occur,
exactly as they happened. The first difference stops the replay with a
:class:`ReplayDifference`: its position, the event type recorded and produced, a field-level
diff, and for prompts a text diff of old and new.
"""

from __future__ import annotations

import asyncio
import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from ..domain import events as ev
from ..domain.aggregate import Deliberation, event_class_for
from ..domain.json_fields import JsonFields
from ..domain.state import SessionState
from ..domain.values import ModelResponse, Participant, Price
from ..errors import ForgeLedgerError
from ..ledger import Ledger, RecordedEvent
from ..orchestrator import NoSeal, NoWallTime, Orchestrator
from ..providers import ProviderCall, ProviderCallError

__all__ = [
    "ReplayDifference",
    "ReplayProvider",
    "ReplayResult",
    "replay_session",
]

def is_external(recorded: RecordedEvent) -> bool:
    """Whether the orchestrator does not produce this event: a person or another command did."""
    return ev.is_external(recorded.type, recorded.data)


@dataclass
class ReplayDifference(JsonFields):
    position: int
    recorded_type: str | None
    replayed_type: str | None
    message: str
    fields: list[dict[str, Any]] = field(default_factory=list)
    prompt_diff: str = ""

    def as_json(self) -> dict[str, Any]:
        return {**super().as_json(), "prompt_diff": self.prompt_diff or None}


@dataclass
class ReplayResult(JsonFields):
    json_keys = ("session_id", "ok", ...)

    session_id: str
    events: int
    matched: int
    generated: int
    external: int
    calls_served: int
    imported: bool = False
    difference: ReplayDifference | None = None

    @property
    def ok(self) -> bool:
        return self.difference is None


class _Diverged(Exception):
    def __init__(self, difference: ReplayDifference) -> None:
        super().__init__(difference.message)
        self.difference = difference


class _EndOfRecord(Exception):
    """The orchestrator went past the last recorded event: everything recorded matched."""


class _Boundary(Exception):
    """The record has an external event where the orchestrator produced its own.

    Live, that means the run ended there (a crash, Ctrl-C, ``kill -9``) and another command
    recorded the event (``resume`` moving an endpoint, swapping a model) before a new run went
    on. Replay does the same: it drops what the running orchestrator had not yet compared,
    returns to the recorded state just before the event, applies it and starts a new run."""

    def __init__(self, position: int) -> None:
        super().__init__(f"external event at position {position}")
        self.position = position


# --------------------------------------------------------------------------- provider


@dataclass
class _RecordedCall:
    outcome: ModelResponse | ev.ProviderCallFailed
    prompt_hash: str


class ReplayProvider:
    """Answers calls from recorded outcomes, keyed by (round, participant, attempt).

    The prompt's hash is not part of the lookup on purpose: a changed prompt template still
    gets the recorded answer, and the comparison of the ``ContributionRecorded`` event then
    reports the prompt change with a text diff instead of a bare "no recording".
    """

    def __init__(self, events: Sequence[RecordedEvent]) -> None:
        self._calls: dict[tuple[int, str, int], _RecordedCall] = {}
        self._prices: dict[str, Price] = {}
        self.served = 0
        for e in events:
            if e.type == "ContributionRecorded":
                p = ev.ContributionRecorded.model_validate(e.data)
                self._calls[(p.round, p.participant, p.attempt)] = _RecordedCall(
                    p.response, p.prompt_hash
                )
                if p.response.price is not None:
                    # by model too: a participant whose model was swapped has a new price
                    self._prices.setdefault(f"{p.participant}\0{p.model}", p.response.price)
            elif e.type == "ProviderCallFailed":
                f = ev.ProviderCallFailed.model_validate(e.data)
                if f.error_type != "budget_cost":
                    self._calls[(f.round, f.participant, f.attempt)] = _RecordedCall(
                        f, f.prompt_hash
                    )

    async def complete(
        self, call: ProviderCall, on_delta: Callable[[str], None] | None = None
    ) -> ModelResponse:
        key = (call.round, call.participant.name, call.attempt)
        recorded = self._calls.get(key)
        if recorded is None:
            raise _NoRecording(key)
        self.served += 1
        outcome = recorded.outcome
        if isinstance(outcome, ModelResponse):
            if on_delta is not None and outcome.content:
                on_delta(outcome.content)
            return outcome
        raise ProviderCallError(
            error_type=outcome.error_type,  # type: ignore[arg-type]
            message=outcome.message,
            retryable=outcome.retryable,
            retry_after_secs=outcome.retry_after_secs,
            partial_text=outcome.partial_text,
            tokens=outcome.tokens,
            cost_usd=outcome.cost_usd,
            duration_ms=outcome.duration_ms,
        )

    def price(self, participant: Participant) -> Price | None:
        return participant.price or self._prices.get(f"{participant.name}\0{participant.model}")

    async def aclose(self) -> None:
        return None


class _NoRecording(Exception):
    def __init__(self, key: tuple[int, str, int]) -> None:
        super().__init__(f"round {key[0]}, participant {key[1]!r}, attempt {key[2]}")
        self.key = key


# --------------------------------------------------------------------------- store & clock


class _ReplayStore:
    """Stands in for the ledger (a :class:`~forge_ledger.orchestrator.SessionStore`): hands out
    recorded state, compares instead of writing."""

    def __init__(self, ledger: Ledger, session_id: UUID, events: Sequence[RecordedEvent]) -> None:
        self._ledger = ledger
        self._sid = session_id
        self._events = list(events)
        self.first = self._events[0].position if self._events else 1
        """A fork's first event is at its fork point (its positions continue its parent's)."""
        self.head = self.first + len(self._events) - 1
        self.current: Deliberation | None = None
        self.matched = 0
        self.generated = 0
        self.external = 0

    def recorded(self, position: int) -> RecordedEvent | None:
        if self.first <= position <= self.head:
            return self._events[position - self.first]
        return None

    def get(self, _session_id: UUID, /, *, version: int | None = None) -> Deliberation:
        if version is not None:
            return self._ledger.get(self._sid, version=version)
        assert self.current is not None
        return self.current

    def save(self, *aggregates: Deliberation) -> None:
        for agg in aggregates:
            for produced in agg.collect_events():
                self._compare(produced)

    def _compare(self, produced: Any) -> None:
        position = int(produced.originator_version)
        recorded = self.recorded(position)
        if recorded is None:
            raise _EndOfRecord()
        if is_external(recorded) and recorded.type != type(produced).TYPE:
            raise _Boundary(position)
        diff = _difference(recorded, produced)
        if diff is not None:
            raise _Diverged(diff)
        self.matched += 1
        self.generated += 1

    def restart_before(self, position: int) -> None:
        """Continue from the recorded state just before ``position`` (see :class:`_Boundary`);
        what the interrupted run produced after it was never compared, so nothing is lost."""
        self.current = self._ledger.get(self._sid, version=position - 1)

    def apply_external(self) -> bool:
        """Apply recorded external events at the head of the replay; True if any."""
        assert self.current is not None
        applied = False
        while True:
            nxt = self.recorded(self.current.version + 1)
            if nxt is None or not is_external(nxt):
                return applied
            _apply_recorded(self.current, nxt)
            self.matched += 1
            self.external += 1
            applied = True


class _ReplayClock:
    """Answers the recorded timestamp of the event the orchestrator is about to record."""

    def __init__(self, store: _ReplayStore) -> None:
        self._store = store

    def now(self) -> datetime:
        agg = self._store.current
        assert agg is not None
        nxt = self._store.recorded(agg.version + 1) or self._store.recorded(self._store.head)
        assert nxt is not None
        return nxt.timestamp


def _apply_recorded(agg: Deliberation, recorded: RecordedEvent) -> None:
    cls = event_class_for(recorded.type)
    event = cls(  # type: ignore[call-arg]
        originator_id=agg.id,
        originator_version=recorded.position,
        timestamp=recorded.timestamp,
        data=recorded.data,
        prev_hash=recorded.prev_hash,
        hash=recorded.hash,
    )
    event.mutate(agg)


# --------------------------------------------------------------------------- comparison


def _difference(recorded: RecordedEvent, produced: Any) -> ReplayDifference | None:
    produced_type = type(produced).TYPE
    position = recorded.position
    if produced_type != recorded.type:
        return ReplayDifference(
            position=position,
            recorded_type=recorded.type,
            replayed_type=produced_type,
            message=(
                f"at position {position} the session recorded {recorded.type} but the current "
                f"code produces {produced_type}"
            ),
            fields=[{"path": "type", "recorded": recorded.type, "replayed": produced_type}],
        )
    fields = _field_diff(recorded.data, produced.data, "data")
    if produced.timestamp != recorded.timestamp:
        fields.append(
            {
                "path": "timestamp",
                "recorded": recorded.timestamp.isoformat(),
                "replayed": produced.timestamp.isoformat(),
            }
        )
    if not fields:
        if produced.hash != recorded.hash or produced.prev_hash != recorded.prev_hash:
            fields.append({"path": "hash", "recorded": recorded.hash, "replayed": produced.hash})
        else:
            return None
    prompt = ""
    if recorded.type == "ContributionRecorded" and any(
        f["path"].startswith("data.messages") for f in fields
    ):
        prompt = _prompt_diff(recorded.data.get("messages", []), produced.data.get("messages", []))
    what = ", ".join(f["path"] for f in fields[:5])
    message = f"{recorded.type} at position {position} differs in {what}"
    if [f["path"] for f in fields] == ["hash"]:
        # Same content, other hash: the stored event no longer hashes to the hash it carries,
        # so the record itself was edited (the code is not at fault).
        message = (
            f"{recorded.type} at position {position} has the recorded content but not the "
            "recorded hash: the stored event was edited (run `forge-ledger verify`)"
        )
    return ReplayDifference(
        position=position,
        recorded_type=recorded.type,
        replayed_type=produced_type,
        message=message,
        fields=fields,
        prompt_diff=prompt,
    )


def _field_diff(old: Any, new: Any, path: str) -> list[dict[str, Any]]:
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[dict[str, Any]] = []
        for key in sorted(set(old) | set(new)):
            if key not in old or key not in new:
                out.append(
                    {"path": f"{path}.{key}", "recorded": old.get(key), "replayed": new.get(key)}
                )
            else:
                out.extend(_field_diff(old[key], new[key], f"{path}.{key}"))
        return out
    if isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            return [{"path": f"{path}", "recorded": old, "replayed": new}]
        out = []
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            out.extend(_field_diff(a, b, f"{path}[{i}]"))
        return out
    if old != new:
        return [{"path": path, "recorded": old, "replayed": new}]
    return []


def _prompt_diff(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> str:
    def text(messages: list[dict[str, Any]]) -> list[str]:
        lines: list[str] = []
        for m in messages:
            lines.append(f"[{m.get('role')}]")
            lines.extend(str(m.get("content", "")).splitlines())
        return lines

    return "\n".join(
        difflib.unified_diff(text(old), text(new), "recorded prompt", "current prompt", lineterm="")
    )


# --------------------------------------------------------------------------- driver


def replay_session(ledger: Ledger, session_id: UUID | str) -> ReplayResult:
    """Replay one session; never writes to the ledger and never calls a model."""
    sid = ledger.resolve(session_id) if isinstance(session_id, str) else session_id
    events = list(ledger.events(sid))
    store = _ReplayStore(ledger, sid, events)
    provider = ReplayProvider(events)
    result = ReplayResult(
        session_id=str(sid),
        events=len(events),
        matched=0,
        generated=0,
        external=0,
        calls_served=0,
    )
    first = events[0] if events else None
    if (
        first is not None
        and first.type == "SessionStarted"
        and first.data.get("source") == "import"
    ):
        result.imported = True
    store.current = ledger.get(sid, version=store.first)
    store.matched = 1
    store.external = 1
    orchestrator = Orchestrator(
        store,
        provider,
        clock=_ReplayClock(store),
        sleep=_no_sleep,
        seal=NoSeal(),
        wall_time=NoWallTime(),
    )
    try:
        asyncio.run(_drive(store, orchestrator, sid, imported=result.imported))
    except _Diverged as d:
        result.difference = d.difference
    except _NoRecording as e:
        if store.current is not None and store.current.version < store.head:
            position = store.current.version + 1
            rec = store.recorded(position)
            result.difference = ReplayDifference(
                position=position,
                recorded_type=rec.type if rec else None,
                replayed_type="ContributionRecorded",
                message=(
                    f"the current code calls a model ({e}) that the recorded session never "
                    f"called; the recorded event at position {position} is "
                    f"{rec.type if rec else 'missing'}"
                ),
            )
    except ForgeLedgerError as e:
        position = (store.current.version + 1) if store.current else store.first
        rec = store.recorded(position)
        result.difference = ReplayDifference(
            position=position,
            recorded_type=rec.type if rec else None,
            replayed_type=None,
            message=f"the current code refuses to continue at position {position}: {e}",
        )
    result.matched = store.matched
    result.generated = store.generated
    result.external = store.external
    result.calls_served = provider.served
    return result


async def _drive(
    store: _ReplayStore, orchestrator: Orchestrator, sid: UUID, *, imported: bool
) -> None:
    assert store.current is not None
    while store.current.version < store.head:
        if store.apply_external():
            continue
        nxt = store.recorded(store.current.version + 1)
        assert nxt is not None
        if imported and _is_import_history(store.current.state):
            _apply_recorded(store.current, nxt)
            store.matched += 1
            store.external += 1
            continue
        before = store.current.version
        try:
            await orchestrator.run(sid)
        except _EndOfRecord:
            return
        except _Boundary as boundary:
            store.restart_before(boundary.position)
            continue
        if store.current.version == before:
            # The orchestrator stopped (paused or finished) but the record goes on with events
            # it did not produce: the current code ends the session differently.
            raise _Diverged(
                ReplayDifference(
                    position=before + 1,
                    recorded_type=nxt.type,
                    replayed_type=None,
                    message=(
                        f"the current code stops at position {before} "
                        f"({store.current.state.status.value}) but the session recorded "
                        f"{nxt.type} next"
                    ),
                )
            )


def _is_import_history(state: SessionState) -> bool:
    """An imported session's events are recorded facts up to its ``SessionImported``."""
    return state.source == "import" and state.imported is None


async def _no_sleep(_: float) -> None:
    await asyncio.sleep(0)

