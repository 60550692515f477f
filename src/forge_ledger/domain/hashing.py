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


_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)
_C_MAKE_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)
_C_ENCODER: Any = (
    _C_MAKE_ENCODER(
        None, _ENCODER.default, json.encoder.encode_basestring, None, ":", ",", True, False,
        False,
    )
    if _C_MAKE_ENCODER is not None
    else None
)


def canonical_json(obj: Any) -> str:
    """The one canonical JSON of the project: event hashes, prompt hashes and projection columns.

    Equal data always gives equal text: exactly ``json.dumps(obj, sort_keys=True,
    separators=(",", ":"), ensure_ascii=False, allow_nan=False)``, so every hash ever stored
    still verifies. Made by one C encoder built once (``json.dumps`` with options builds a new
    encoder per call, which showed in projection rebuild profiles); without CPython's C
    encoder the same options give the same text, more slowly.

    Outside Python, recompute it as follows (then UTF-8, then SHA-256):

    - objects: keys sorted by Unicode code point, ``,`` and ``:`` with no whitespace;
    - strings: UTF-8 as is (no ``\\uXXXX`` for non-ASCII, nor for U+007F, U+2028, U+2029 or
      ``/``); ``"`` and ``\\`` escaped; ``\\b \\f \\n \\r \\t`` short; other controls
      below U+0020 as ``\\u00xx`` (lower-case hex);
    - integers in decimal; floats as Python's ``repr``: the shortest text that reads back as
      the same double, always with a fraction or exponent (``1.0``, ``0.0021``, ``1e-07``,
      ``1e+16``); NaN and infinities are refused;
    - ``true``, ``false``, ``null``.

    This is RFC 8785 (JCS) except in two points, which is why JCS is not used (stored hashes
    would change): JCS writes numbers as ECMAScript does (``1`` for ``1.0``, which stored
    costs and weights contain; ``0.00001`` for ``1e-05``; ``1e-7`` for ``1e-07``;
    ``10000000000000000`` for ``1e+16``), and sorts keys by UTF-16 code unit, which differs
    from code point order only between keys beyond U+FFFF and keys in U+E000–U+FFFF.
    """
    if _C_ENCODER is None or isinstance(obj, str):
        return _ENCODER.encode(obj)
    return "".join(_C_ENCODER(obj, 0))


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
