"""Sessions copied between stores, whole and verifiable (``forge-ledger copy``, and the
one-file archive of ``export --format ledger``).

Every event carries a hash chain over what it holds, its texts included (see :mod:`.verify`),
so a copy keeps every hash by copying each event as it is stored: its session, position,
topic and state, with every text it refers to. Only the compression of the state follows the
target's rule (SQLite compresses, PostgreSQL keeps plain JSON): the chain covers the decoded
payload, never those bytes. A session is verified in the source before it is copied (a
damaged one is not spread), and goes into the target in one transaction of the target's
recorder, its texts with it: an interrupted copy leaves each session whole or absent.

A session the target holds already is compared by the hash of an event both hold: the same
history is "already there" (or extended by the events the target lacks), another history is
refused before anything is written. Snapshots are not copied: the target folds the events,
and takes its own snapshots from its next save.

A fork's positions before its fork point are its parent's (``Ledger.inherited_from``), so a
fork is copied with its ancestors, parents first.
"""

from __future__ import annotations

import glob
import json
import os
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

from eventsourcing.persistence import IntegrityError, StoredEvent
from eventsourcing.persistence import PersistenceError as _PersistenceError

from ..domain import events as ev
from ..domain.json_fields import JsonFields
from ..domain.topics import topic_for
from ..errors import ConcurrencyConflictError, SessionNotFoundError, StoreError, UsageError
from .compression import unpack
from .failures import first_line
from .ledger import Ledger
from .store import StoreLocation
from .text_mapper import StoredEventWithTexts
from .texts import referenced
from .verify import verify_session

__all__ = ["ALREADY_THERE", "COPIED", "EXTENDED", "CopiedSession", "copy_sessions", "write_archive"]

COPIED = "copied"
EXTENDED = "extended"
ALREADY_THERE = "already there"
_FORKED = topic_for("SessionForked")


@dataclass
class CopiedSession(JsonFields):
    """What copying one session did (``status``: :data:`COPIED`, :data:`EXTENDED` by the
    events the target lacked, or :data:`ALREADY_THERE`)."""

    session_id: str
    status: str
    events: int
    """Events written to the target (0 when already there)."""
    head: int
    """The position of the session's last event in the source."""
    head_hash: str
    requested: bool
    """Asked for, or copied as the ancestor of a fork asked for."""


@dataclass(frozen=True)
class _Plan:
    session_id: UUID
    requested: bool
    after: int
    """The target's last event of the session, which the source holds the same (0: none)."""


def copy_sessions(
    source: Ledger,
    target: Ledger,
    session_ids: Sequence[UUID],
    *,
    progress: Callable[[int, int, CopiedSession], None] | None = None,
) -> list[CopiedSession]:
    """Copy ``session_ids`` (and the ancestors of the forks among them) from ``source`` to
    ``target``, one transaction per session; ``progress(done, total, copied)`` after each.

    Every session is compared with the target first: one that the target holds with another
    history is refused before anything is written."""
    if same_store(source.location, target.location):
        raise UsageError(
            f"{source.location.display} is both the source and the target",
            hint="give --to another store",
        )
    plans = [_plan(source, target, sid, req) for sid, req in _with_ancestors(source, session_ids)]
    done: list[CopiedSession] = []
    for plan in plans:
        done.append(_copy_one(source, target, plan))
        if progress is not None:
            progress(len(done), len(plans), done[-1])
    return done


def same_store(a: StoreLocation, b: StoreLocation) -> bool:
    """Whether two locations name the same store: a SQLite file by its resolved path, a
    PostgreSQL schema by its server, database and name (whoever connects)."""
    if a.kind == "sqlite" and b.kind == "sqlite" and a.path and b.path:
        return a.path.resolve() == b.path.resolve()
    return (a.kind, a.host, a.port, a.dbname, a.schema) == (b.kind, b.host, b.port, b.dbname,
                                                           b.schema)


def _with_ancestors(source: Ledger, session_ids: Sequence[UUID]) -> list[tuple[UUID, bool]]:
    """``session_ids`` and the ancestors of the forks among them (each once, with whether it
    was asked for), in the order the source started them: a parent before its forks."""
    wanted = dict.fromkeys(session_ids, True)
    todo = list(wanted)
    while todo:
        sid = todo.pop()
        parent = _parent(source, sid)
        if parent is None or parent in wanted:
            continue
        try:
            source.head_version(parent)
        except SessionNotFoundError:
            raise SessionNotFoundError(
                f"session {sid} is a fork of {parent}, which {source.location.display} "
                "does not hold",
                hint="a fork is copied with its parent: copy from the store that holds both",
            ) from None
        wanted[parent] = False
        todo.append(parent)
    order = {s: i for i, s in enumerate(source.session_ids())}
    return sorted(wanted.items(), key=lambda item: order.get(item[0], len(order)))


def _parent(ledger: Ledger, session_id: UUID) -> UUID | None:
    """The session a fork was forked from (None for a session that is not a fork)."""
    rows = ledger.app.recorder.select_events(session_id, limit=1)
    if not rows:
        raise SessionNotFoundError(
            f"no session {session_id} in {ledger.location.display}",
            hint="see 'forge-ledger sessions' for the ids",
        )
    if rows[0].topic != _FORKED:
        return None
    state = ledger.app.mapper.transcoder.decode(unpack(rows[0].state))
    return UUID(ev.ForkOrigin.model_validate(state["data"]["origin"]).parent_id)


def _plan(source: Ledger, target: Ledger, sid: UUID, requested: bool) -> _Plan:
    """What the target holds of the session: nothing, or the same history up to some event
    (compared at the last event both hold: the chain makes it stand for all before it)."""
    held = target.app.recorder.select_events(sid, desc=True, limit=1)
    if not held:
        return _Plan(sid, requested, 0)
    at = min(int(held[0].originator_version), source.head_version(sid))
    theirs = target.app.recorder.select_events(sid, gt=at - 1, lte=at)
    ours = source.app.recorder.select_events(sid, gt=at - 1, lte=at)
    if not theirs or not ours or _hash(theirs[0]) != _hash(ours[0]) or not _hash(ours[0]):
        raise UsageError(
            f"session {sid} is in {target.location.display} with another history "
            f"(event {at} differs); nothing was copied",
            hint="fork it in the source and copy the fork, or copy to another store",
        )
    return _Plan(sid, requested, int(held[0].originator_version))


def _hash(row: StoredEvent) -> str:
    """The hash a stored event carries ('' if it cannot be read)."""
    try:
        found = json.loads(unpack(row.state)).get("hash")
    except (ValueError, AttributeError, zlib.error):
        return ""
    return found if isinstance(found, str) else ""


def _copy_one(source: Ledger, target: Ledger, plan: _Plan) -> CopiedSession:
    """One session's events after ``plan.after``, verified in the source, written to the
    target in one transaction with the texts they refer to."""
    sid = plan.session_id
    report = verify_session(source, sid)
    if not report.ok:
        raise StoreError(
            f"session {sid} does not verify in {source.location.display} (event "
            f"{report.position}: {report.problem}); it was not copied",
            hint="check it with 'forge-ledger verify'",
        )
    result = CopiedSession(str(sid), ALREADY_THERE, 0, report.events, report.head_hash,
                           plan.requested)
    if plan.after >= report.events:
        return result
    rows = source.app.recorder.select_events(sid, gt=plan.after or None, lte=report.events)
    stored = _as_stored_by(source, target, rows)
    try:
        target.app.recorder.insert_events(stored)
    except IntegrityError:
        raise ConcurrencyConflictError(
            f"session {sid} was written to {target.location.display} while it was being "
            "copied; nothing of it was copied",
            hint="run the copy again",
        ) from None
    except _PersistenceError as e:
        raise StoreError(
            f"cannot write to {target.location.display}: {first_line(e)}"
        ) from None
    result.status = EXTENDED if plan.after else COPIED
    result.events = len(stored)
    return result


def _as_stored_by(source: Ledger, target: Ledger, rows: Sequence[StoredEvent]) -> list[StoredEvent]:
    """``rows`` as the target stores them (its compression of states), the first carrying the
    texts they all refer to (the recorder writes them in the events' transaction)."""
    compressor = target.app.mapper.compressor
    stored: list[StoredEvent] = []
    payloads: list[Any] = []
    for row in rows:
        plain = unpack(row.state)
        payloads.append(json.loads(plain).get("data"))
        stored.append(
            StoredEvent(
                originator_id=row.originator_id,
                originator_version=row.originator_version,
                topic=row.topic,
                state=compressor.compress(plain) if compressor is not None else plain,
            )
        )
    addresses = sorted({a for data in payloads for a in referenced(data)})
    texts = source.texts(addresses)
    missing = sorted(set(addresses) - set(texts))
    if missing:  # verified a moment ago: only a store failing now lands here
        raise StoreError(
            f"text {missing[0][:12]} of the copied events cannot be read from "
            f"{source.location.display}",
            hint="check it with 'forge-ledger verify'",
        )
    quoted = _quoted(source, texts) if target.location.kind == "sqlite" else {}
    if stored and texts:
        stored[0] = StoredEventWithTexts.of(stored[0], texts, quoted)
    return stored


def _quoted(source: Ledger, texts: dict[str, str]) -> dict[str, list[str]]:
    """The answers each text is packed against in the source: a SQLite target packs it so
    too. The quoted answers are added to ``texts`` (read from the source if need be); a text
    whose answers cannot be read is stored on its own."""
    lists = source.quote_lists(list(texts))
    wanted = sorted({m for members in lists.values() for m in members} - texts.keys())
    if wanted:
        texts.update(source.texts(wanted))
    return {a: ms for a, ms in lists.items() if all(m in texts for m in ms)}


def write_archive(
    source: Ledger,
    session_ids: Sequence[UUID],
    path: Path,
    *,
    progress: Callable[[int, int, CopiedSession], None] | None = None,
) -> list[CopiedSession]:
    """A new SQLite ledger at ``path`` holding just ``session_ids`` and what they need (their
    texts, their forks' ancestors): written beside it and renamed over it when complete, so
    an interrupted export leaves no archive at all, never part of one."""
    if path.exists():
        raise UsageError(
            f"{path} exists already",
            hint=f"give a new file name, or add to it with 'forge-ledger copy … --to {path}'",
        )
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    _remove_killed(path)
    _remove_database(tmp)
    try:
        with Ledger(StoreLocation(kind="sqlite", path=tmp), create=True) as archive:
            copied = copy_sessions(source, archive, session_ids, progress=progress)
        os.replace(tmp, path)
    finally:
        _remove_database(tmp)
    return copied


def _remove_killed(path: Path) -> None:
    """The partial archives that exports to ``path`` killed midway left beside it (named
    after their process, which is gone): an export removes its own when it fails."""
    for found in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        pid = found.name[len(path.name) + 2 : -len(".tmp")]
        if pid.isdigit() and not _running(int(pid)):
            _remove_database(found)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _remove_database(path: Path) -> None:
    """A SQLite file and its write-ahead log and shared-memory files, if there."""
    for name in (path.name, path.name + "-wal", path.name + "-shm"):
        path.with_name(name).unlink(missing_ok=True)
