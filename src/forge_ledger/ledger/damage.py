"""Where a session's stored events stop being readable: the first damaged position.

A session is read by folding its events (``Ledger.get``). When the fold fails, the failure
itself says little: eventsourcing's ``OriginatorVersionError: (25, 24)`` for a deleted row,
a decoding error for a corrupted one, a missing text for a deleted text. :func:`first_damage`
walks the session's stored rows once, in order, and names the first position where they
stop being the session's events: a gap (deleted), a row that cannot be decoded (corrupted),
a text referred to that is missing or does not hash to its address (deleted or altered), a
row whose link to the previous event's hash differs (reordered, duplicated). Everything up
to the position before it is intact, so the session can still be read as of there.

It does not recompute each event's hash: ``verify`` does (``ledger.verify``), and commands
that print a session check its chain that way too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent

from ..domain.topics import topic_for
from ..errors import ForgeLedgerError, SessionDamagedError
from .compression import NewerFormatError, unpack
from .texts import Lookup, resolve

__all__ = ["first_damage"]

_FORKED = topic_for("SessionForked")
"""The event a fork begins with, at its fork point's position (its positions continue its
parent's)."""


def first_damage(
    stored_events: Iterable[StoredEvent],
    decode: Callable[[bytes], Any],
    lookup: Lookup,
) -> SessionDamagedError | None:
    """The first damage among one session's ``stored_events`` (in position order), or None.

    ``decode`` turns a stored row's plain JSON into its values (the store's transcoder);
    ``lookup`` reads texts by address."""
    expected: int | None = None
    previous: str | None = None
    for stored in stored_events:
        position = int(stored.originator_version)
        sid: UUID | str = stored.originator_id
        if expected is None:  # a session begins at 1, a fork at its fork point
            expected = position if stored.topic == _FORKED else 1
        if position != expected:
            return SessionDamagedError(sid, expected, _gap(expected, position))
        problem, link = _read(stored, decode, lookup)
        if problem is None and previous is not None and link[0] != previous:
            problem = (
                f"it does not follow event {position - 1} (its link to the previous event "
                "differs: reordered, duplicated or altered)"
            )
        if problem is not None:
            return SessionDamagedError(sid, position, problem)
        previous = link[1]
        expected += 1
    return None


def _gap(expected: int, found: int) -> str:
    if found > expected:
        return f"event {expected} is missing (the next stored event is at position {found})"
    return f"event {expected} is stored out of place (position {found} found there)"


def _read(
    stored: StoredEvent, decode: Callable[[bytes], Any], lookup: Lookup
) -> tuple[str | None, tuple[str, str]]:
    """(the row's problem or None, (its link to the previous event, its own hash))."""
    try:
        state = decode(unpack(stored.state))
        data = state.get("data") if isinstance(state, dict) else None
        if not isinstance(data, dict):
            return "its row has no event payload (corrupted)", ("", "")
        resolve(data, lookup, check=True)
        return None, (str(state.get("prev_hash", "")), str(state.get("hash", "")))
    except NewerFormatError:
        raise
    except Exception as e:  # any failure to read this row is this row's damage
        text = (e.message if isinstance(e, ForgeLedgerError) else str(e)).strip().splitlines()
        return f"it cannot be read ({text[0] if text else type(e).__name__})", ("", "")
