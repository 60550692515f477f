"""Hash-chain verification over what is *stored* (no upcasting, no trust in the state).

For each session, events are read raw in position order; each must sit at the next position,
link to its predecessor's hash, and hash to the value it carries. An event's hash covers the
texts it refers to (see :mod:`forge_ledger.ledger.texts`): each referenced text must exist and
hash to its address before the event is hashed. The first failure is
reported with its position and what was wrong. A keyed check (HMAC) additionally confirms a
seal was made by someone holding the key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any
from uuid import UUID

from ..domain.hashing import GENESIS, chain_hash, seal_hmac
from ..domain.json_fields import JsonFields
from ..errors import StoreError
from .application import Ledger
from .texts import resolve

__all__ = ["ChainReport", "verify_session", "verify_store"]

_PREFIX = "forge_ledger:"


@dataclass
class ChainReport(JsonFields):
    """What checking one session's hash chain found (``details`` stays out of the JSON)."""

    json_keys = (
        "session_id", "ok", "events", "position", "problem", "head_hash", "sealed", "seal_ok",
        "hmac_ok",
    )
    json_names = MappingProxyType({"position": "first_bad_position"})

    session_id: str
    events: int = 0
    ok: bool = True
    position: int | None = None
    problem: str = ""
    head_hash: str = ""
    sealed: bool = False
    seal_ok: bool | None = None
    hmac_ok: bool | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def fail(self, position: int, problem: str) -> ChainReport:
        self.ok = False
        self.position = position
        self.problem = problem
        return self

    def as_json(self) -> dict[str, Any]:
        return {**super().as_json(), "problem": self.problem or None}


def verify_session(ledger: Ledger, session_id: UUID, *, key: bytes | None = None) -> ChainReport:
    report = ChainReport(session_id=str(session_id))
    prev = GENESIS
    expected = 1
    for position, topic, state, error in ledger.raw_events(session_id):
        if position != expected:
            return report.fail(
                expected,
                f"event {expected} is missing (next stored event is at position {position})",
            )
        checked = _checked_event(ledger, session_id, position, topic, state, error, prev)
        if isinstance(checked, str):
            return report.fail(position, checked)
        type_name, data, stored_hash = checked
        if type_name == "SessionSealed":
            problem = _seal_problem(report, data, prev, position, key)
            if problem is not None:
                return report.fail(position, problem)
        prev = stored_hash
        expected += 1
        report.events = position
    if report.events == 0:
        return report.fail(1, "the session has no events")
    report.head_hash = prev
    return report


def _checked_event(
    ledger: Ledger,
    session_id: UUID,
    position: int,
    topic: str,
    state: dict[str, Any] | None,
    error: str,
    prev: str,
) -> str | tuple[str, dict[str, Any], str]:
    """One stored event checked against the chain: (type, payload with its texts, hash), or
    what is wrong with it."""
    if state is None:
        return f"stored event cannot be decoded ({error})"
    if not topic.startswith(_PREFIX):
        return f"unexpected event topic {topic!r}"
    type_name = topic[len(_PREFIX) :]
    try:
        stored_prev = state["prev_hash"]
        stored_hash = state["hash"]
        data = state["data"]
        timestamp = state["timestamp"]
    except KeyError as e:
        return f"stored event lacks field {e.args[0]!r}"
    try:
        data = resolve(data, ledger.texts, check=True)
    except StoreError as e:
        return str(e)
    if stored_prev != prev:
        return (
            "prev_hash does not match the previous event's hash "
            "(an event was removed, inserted or reordered)"
        )
    try:
        recomputed = chain_hash(
            session_id=str(session_id),
            position=position,
            type_name=type_name,
            timestamp=timestamp,
            data=data,
            prev_hash=stored_prev,
        )
    except (TypeError, ValueError, AttributeError) as e:
        return f"stored event is malformed ({e})"
    if recomputed != stored_hash:
        return "content does not match its hash (the event was altered)"
    return type_name, data, stored_hash


def _seal_problem(
    report: ChainReport, data: dict[str, Any], prev: str, position: int, key: bytes | None
) -> str | None:
    """Checks a seal against the chain it closes (and its HMAC under ``key``), noting the
    outcome on ``report``."""
    report.sealed = True
    report.seal_ok = data.get("root_hash") == prev and data.get("events") == position - 1
    if not report.seal_ok:
        return "the seal does not match the chain it closes"
    if key is not None:
        mac = data.get("hmac")
        report.hmac_ok = mac is not None and mac == seal_hmac(key, prev)
        if not report.hmac_ok:
            return (
                "the seal's HMAC does not match under the given key "
                "(tampered, or sealed with another key or none)"
            )
    return None


def verify_store(ledger: Ledger, *, key: bytes | None = None) -> list[ChainReport]:
    return [verify_session(ledger, sid, key=key) for sid in ledger.session_ids()]
