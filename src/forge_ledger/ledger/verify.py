"""Hash-chain verification over what is *stored* (no upcasting, no trust in the state).

For each session, events are read raw in position order; each must sit at the next position,
link to its predecessor's hash, and hash to the value it carries. An event's hash covers the
texts it refers to (see :mod:`forge_ledger.ledger.texts`): each referenced text must exist and
hash to its address before the event is hashed. The first failure is
reported with its position and what was wrong. A keyed check (HMAC) additionally confirms a
seal was made by someone holding the key.

A session's snapshots are copies of the fold of its events, which time travel and every load
start from: :func:`verify_snapshots` checks each against the fold of the events up to it (the
snapshot this version would take there, compared field by field), and that the store holds,
intact, every text and block of state it refers to. A snapshot that differs is reported with
its position; the events are not affected, and dropping it (:meth:`Ledger.drop_snapshots`)
makes loads fold from the snapshot before it, or from the first event.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, cast
from uuid import UUID

from eventsourcing.persistence import StoredEvent
from pydantic import ValidationError

from ..domain import events as ev
from ..domain.hashing import GENESIS, chain_hash, seal_hmac
from ..domain.json_fields import JsonFields
from ..domain.topics import TOPIC_PREFIX, topic_for
from ..errors import StoreError
from .compression import NewerFormatError, unpack
from .failures import first_line, store_failure
from .ledger import Ledger
from .texts import resolve

__all__ = ["ChainReport", "verify_session", "verify_snapshots", "verify_store"]



@dataclass
class ChainReport(JsonFields):
    """What checking one session's hash chain found (``details`` stays out of the JSON)."""

    json_keys = (
        "session_id",
        "ok",
        "events",
        "position",
        "problem",
        "head_hash",
        "sealed",
        "seal_ok",
        "hmac_ok",
        "snapshots",
        "bad_snapshots",
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
    snapshots: int | None = None
    """Snapshots checked against the events (None: not checked, or the events did not
    verify)."""
    bad_snapshots: list[int] = field(default_factory=list)
    """Positions of the snapshots that do not match the events (the events verify)."""
    details: dict[str, Any] = field(default_factory=dict)

    def fail(self, position: int, problem: str) -> ChainReport:
        self.ok = False
        self.position = position
        self.problem = problem
        return self

    def as_json(self) -> dict[str, Any]:
        return {**super().as_json(), "problem": self.problem or None}


def verify_session(
    ledger: Ledger, session_id: UUID, *, key: bytes | None = None, snapshots: bool = False
) -> ChainReport:
    """The session's hash chain checked (and its snapshots, with ``snapshots``, once the
    events verify: see :func:`verify_snapshots`).

    The snapshots are read before the events: a snapshot is committed after the events it
    follows, so every snapshot read then has its events in the chain read after it, however
    a writer saves meanwhile (read the other way round, a save committing between the two
    reads showed a snapshot past the chain's end)."""
    stored = ledger.stored_snapshots(session_id) if snapshots else None
    report = _verify_chain(ledger, session_id, key)
    if stored is not None and report.ok:
        verify_snapshots(ledger, report, stored)
    return report


def _verify_chain(
    ledger: Ledger,
    session_id: UUID,
    key: bytes | None,
    *,
    upto: int | None = None,
    below: frozenset[UUID] = frozenset(),
) -> ChainReport:
    """The chain checked event by event (up to position ``upto``, for a fork's parent). A
    fork's chain begins in its parent: ``below`` holds the forks already being checked, so a
    damaged store whose forks name each other as parents fails instead of looping."""
    report = ChainReport(session_id=str(session_id))
    prev = GENESIS
    expected = 0
    for position, topic, state, error in ledger.raw_events(session_id):
        if upto is not None and position > upto:
            if not expected and _first_position(position, topic, state) == position:
                # a fork's chain up to a point before its own first event is its parent's
                parent = _parent_id(state)
                if parent is None or parent in below or parent == session_id:
                    return report.fail(position, "the fork's parent cannot be followed")
                return _verify_chain(ledger, parent, None, upto=upto, below=below | {session_id})
            break
        if not expected:
            expected = _first_position(position, topic, state)
            problem = _parent_problem(ledger, session_id, position, state, expected, below)
            if problem is not None:
                return report.fail(position, problem)
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


def _first_position(position: int, topic: str, state: dict[str, Any] | None) -> int:
    """Where a session's chain begins: at 1, or for a fork at its fork point, whose position
    its first event takes (a fork's positions continue its parent's; see
    ``Deliberation.fork``). A fork recorded before that began at 1, and still verifies."""
    if topic != topic_for("SessionForked") or state is None:
        return 1
    data = state.get("data")
    raw = data.get("origin") if isinstance(data, dict) else None
    try:
        origin = ev.ForkOrigin.model_validate(raw)
    except ValidationError:  # a damaged first event: its chain is checked from 1
        return 1
    return position if origin.continues_at(position) else 1


def _parent_id(state: dict[str, Any] | None) -> UUID | None:
    """The parent a fork's first event names (a first event :func:`_first_position` read),
    or None when it names no session id."""
    assert state is not None
    try:
        return UUID(ev.ForkOrigin.model_validate(state["data"]["origin"]).parent_id)
    except ValueError:
        return None


def _parent_problem(
    ledger: Ledger,
    session_id: UUID,
    position: int,
    state: dict[str, Any] | None,
    first: int,
    below: frozenset[UUID],
) -> str | None:
    """What is wrong with the history a fork inherits, or None. A fork numbered on from its
    parent (its first event at the fork point) reads every earlier position in the parent, so
    the parent's chain up to the fork point is part of the fork's: it must be in the store,
    verify, and end in the hash the fork recorded."""
    if first == 1 or state is None:
        return None
    origin = ev.ForkOrigin.model_validate(state["data"]["origin"])
    try:
        parent_id = UUID(origin.parent_id)
    except ValueError:
        return f"the fork names a parent that is not a session id ({origin.parent_id!r})"
    if parent_id == session_id or parent_id in below:
        return "the fork names itself among its parents (the store is damaged)"
    parent = _verify_chain(ledger, parent_id, None, upto=position, below=below | {session_id})
    if parent.events == 0 and not parent.ok:
        return (
            f"the fork's parent {str(parent_id)[:8]} is not in this store "
            "(copy the fork with its parent: forge-ledger copy)"
        )
    if not parent.ok:
        return (
            f"the parent {str(parent_id)[:8]} fails at position {parent.position} "
            f"before the fork point: {parent.problem}"
        )
    if parent.events != position or parent.head_hash != origin.parent_hash:
        return "the fork's record of its parent does not match the parent's chain at the fork point"
    return None


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
    if not topic.startswith(TOPIC_PREFIX):
        return f"unexpected event topic {topic!r}"
    type_name = topic[len(TOPIC_PREFIX) :]
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


def verify_store(
    ledger: Ledger, *, key: bytes | None = None, snapshots: bool = False
) -> list[ChainReport]:
    """Every session of the store, those whose first event is gone included (they fail)."""
    sids = ledger.session_ids() + ledger.headless_session_ids()
    return [verify_session(ledger, sid, key=key, snapshots=snapshots) for sid in sids]


# --------------------------------------------------------------------------- snapshots


def verify_snapshots(
    ledger: Ledger, report: ChainReport, snapshots: Sequence[StoredEvent]
) -> ChainReport:
    """``snapshots`` (the session's, read before its chain: see :func:`verify_session`) of a
    session whose events verified (``report``), against the fold of its events: the first
    that differs fails the report (the events still verify), and every one that differs is
    listed in ``bad_snapshots``.

    Each is compared with the snapshot this version takes at its position, which encodes only
    the blocks of state that changed since the one before, as a live session does; a
    snapshot written by an older version, laid out differently, is compared by its decoded
    state instead. The fold reports its changes to the blocks as a live one does, so a
    change it failed to report would go unseen here too: the fold's tests check that.
    A ledger opened without snapshots (``snapshot_interval=0``) reads none.
    """
    sid = UUID(report.session_id)
    stored = {int(s.originator_version): s for s in snapshots}
    report.snapshots = 0
    beyond = sorted(v for v in stored if v > report.events)
    checked: dict[str, bool] = {}
    problems: dict[int, str] = {v: "is past the session's last event" for v in beyond}
    for position, aggregate in ledger.folded_at(sid, [v for v in stored if v not in beyond]):
        problem = _snapshot_problem(ledger, stored[position], aggregate, checked)
        if problem is not None:
            problems[position] = problem
        report.snapshots += 1
    report.snapshots += len(beyond)
    if problems:
        report.bad_snapshots = sorted(problems)
        first = report.bad_snapshots[0]
        report.fail(first, f"the snapshot at event {first} {problems[first]}")
    return report


def _snapshot_problem(
    ledger: Ledger, stored: StoredEvent, aggregate: Any, checked: dict[str, bool]
) -> str | None:
    """What is wrong with one stored snapshot of ``aggregate`` (folded to its position).

    ``checked`` holds the texts checked so far (address → intact): a snapshot refers to the
    blocks of the ones before it that did not change, so each is checked once, and a block
    found damaged is looked for in each later snapshot."""
    fresh = ledger.snapshot_of(aggregate)
    try:
        raw = unpack(stored.state)
        have = _content(raw)
    except NewerFormatError as e:  # not damage: this version cannot judge the row
        raise cast(StoreError, store_failure(e)) from None
    except (ValueError, zlib.error, RecursionError) as e:
        return f"cannot be decoded ({type(e).__name__}: {first_line(e)})"
    if stored.topic != fresh.topic:
        return f"names the wrong kind of snapshot ({stored.topic!r})"
    want = _content(unpack(fresh.state))
    older = have != want
    if older:  # laid out by another version: compared by what it decodes to
        difference = _decoded_difference(ledger, stored, aggregate, have, want)
        if difference is not None:
            return difference
    # the texts this version's snapshot names (its state's answers and parsed texts, its new
    # blocks); one laid out otherwise reads the same texts where it holds them by reference,
    # but may hold some inline (a critique): those the store lacks are not its concern
    texts = getattr(fresh, "texts", {})
    problem = _texts_problem(ledger, texts, checked, absent_ok=older)
    _spread_damage(texts, checked)
    if problem is not None:
        return problem
    damaged = next((a for a, ok in checked.items() if not ok and a.encode() in raw), None)
    return None if damaged is None else _not_intact(damaged)


_ADDRESS = re.compile("[0-9a-f]{64}")


def _spread_damage(texts: dict[str, str], checked: dict[str, bool]) -> None:
    """Count as damaged every text among ``texts`` (those a snapshot wrote: its blocks) that
    names a damaged one, through any depth of blocks. A later snapshot names such a block,
    not the texts inside it, and is only found out (by its own bytes) if the block is."""
    bad = {a for a, ok in checked.items() if not ok}
    while bad:
        spread = {
            a
            for a, text in texts.items()
            if checked.get(a) is not False and not bad.isdisjoint(_ADDRESS.findall(text))
        }
        for address in spread:
            checked[address] = False
        bad = spread


def _without_state(content: Any) -> Any:
    """A snapshot's content but its session state (the aggregate's other attributes)."""
    if not isinstance(content, dict) or not isinstance(content.get("state"), dict):
        return content
    return {**content, "state": {k: v for k, v in content["state"].items() if k != "state"}}


def _content(state: bytes) -> Any:
    """A stored snapshot's content: all but the time it was taken."""
    content = json.loads(state)
    if isinstance(content, dict):
        content.pop("timestamp", None)
    return content


def _not_intact(address: str) -> str:
    return f"refers to text {address[:12]}, which the store does not hold intact"


def _texts_problem(
    ledger: Ledger, texts: dict[str, str], checked: dict[str, bool], *, absent_ok: bool = False
) -> str | None:
    """Whether the store holds, intact, each text a snapshot refers to (each checked once;
    with ``absent_ok`` one the store lacks is left unchecked rather than reported)."""
    todo = [a for a in texts if a not in checked]
    for i in range(0, len(todo), 500):
        chunk = todo[i : i + 500]
        try:
            found = ledger.texts(chunk)
        except StoreError as e:
            return f"refers to texts the store cannot read ({e})"
        for address in chunk:
            body = found.get(address)
            if body is not None or not absent_ok:
                checked[address] = body == texts[address]
    return next((_not_intact(a) for a in todo if checked.get(a) is False), None)


def _decoded_difference(
    ledger: Ledger, stored: StoredEvent, aggregate: Any, have: Any, want: Any
) -> str | None:
    """A snapshot laid out differently from this version's (``have`` against ``want``),
    compared by its decoded state, and by the rest of its content as stored."""
    mismatch = (
        "does not match the events up to it (altered, or taken by a version that folded "
        "them differently)"
    )
    if _without_state(have) != _without_state(want):
        return mismatch
    try:
        snapshot: Any = ledger.app.snapshots.mapper.to_domain_event(stored)  # type: ignore[union-attr]
        state = snapshot.state.get("state") if isinstance(snapshot.state, dict) else None
        if state is None:
            return mismatch
        same = state.model_dump(mode="json") == aggregate.state.model_dump(mode="json")
    except StoreError as e:
        return f"cannot be read ({e})"
    except Exception as e:  # a damaged row: report it, don't crash
        return f"cannot be decoded ({type(e).__name__})"
    return None if same else mismatch
