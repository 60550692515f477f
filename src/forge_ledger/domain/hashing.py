"""Canonical JSON and the event hash chain.

Each stored event carries ``prev_hash`` (its predecessor's hash, or ``GENESIS`` for the first
event of a session) and ``hash`` = SHA-256 over the canonical JSON of the session id, the
position, the event type, the timestamp, the payload and ``prev_hash``. Changing any of those,
deleting an event or swapping two breaks the chain at that position. With a key (HMAC) the
chain also resists someone who recomputes every hash after an edit.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import datetime
from typing import Any

__all__ = ["GENESIS", "canonical_json", "chain_hash", "keyed_digest", "seal_hmac"]

GENESIS = "0" * 64


def canonical_json(obj: Any) -> str:
    """Sorted keys, no whitespace, UTF-8 kept: equal data always gives equal bytes."""
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def chain_hash(
    *,
    session_id: str,
    position: int,
    type_name: str,
    timestamp: datetime,
    data: dict[str, Any],
    prev_hash: str,
) -> str:
    body = {
        "session": session_id,
        "position": position,
        "type": type_name,
        "timestamp": timestamp.isoformat(),
        "data": data,
        "prev": prev_hash,
    }
    return hashlib.sha256(canonical_json(body).encode("utf-8")).hexdigest()


def keyed_digest(key: bytes, message: str) -> str:
    """HMAC-SHA256 of ``message`` (a hash or root hash) under ``key``."""
    return hmac.new(key, message.encode("utf-8"), hashlib.sha256).hexdigest()


def seal_hmac(key: bytes | None, root_hash: str) -> str | None:
    """The ``hmac`` of a seal over ``root_hash``: the one rule that makes and checks seals
    (no key, or an empty one, means an unkeyed seal)."""
    return keyed_digest(key, root_hash) if key else None
