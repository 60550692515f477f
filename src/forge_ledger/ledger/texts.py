"""Each text once: message contents, answers and partial texts stored by their SHA-256.

A prompt repeats the system prompt (with its JSON schema) on every call, and many calls share
messages, so the ledger keeps every long text once per store in a ``forge_texts`` table of the
same database, written in the same transaction as the events that refer to it (the
application recorder's insert, see ``texts_sqlite.TextsSQLiteRecorder`` and
``texts_postgres.TextsPostgresRecorder``). The stored event carries ``{"sha256": <hex>}``
in place of the text; the mapper swaps the texts back when an event is read, so everything above the
store (state, replay, audit, export) sees exactly the recorded texts. A parsed critique, whose
lists of strengths and weaknesses repeat its answer's prose in strings no text key holds, is
stored the same way as one text, its JSON (:data:`OBJECT_TEXTS`). The hash chain covers
the texts themselves: ``verify`` resolves every reference, checks that the text exists and
hashes to its address, then hashes the event — old stores (texts inline) verify unchanged.

On SQLite a text's body is stored zlib-compressed when that is smaller (see
:mod:`~forge_ledger.ledger.compression`); PostgreSQL compresses long values itself (TOAST).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any, cast

from pydantic import BaseModel, ValidationError

from ..domain.texts import text_address
from ..domain.values import Critique
from ..errors import StoreError

__all__ = [
    "MIN_LENGTH",
    "OBJECT_TEXTS",
    "PROMPT_REF",
    "REF_KEY",
    "REF_PATTERN",
    "TEXT_KEYS",
    "TEXT_TABLE",
    "Lookup",
    "externalise",
    "object_text",
    "refer_to_texts",
    "referenced",
    "resolve",
    "text_address",
    "text_reference",
    "with_texts",
]

TEXT_TABLE = "forge_texts"
TEXT_KEYS = frozenset({"content", "partial_text", "reasoning", "text"})
"""Payload keys whose string values are texts (chat message and answer contents, partial
answers, human input, and the reasoning of a parsed opinion or vote, which repeats its
answer's prose)."""
OBJECT_TEXTS: dict[str, type[BaseModel]] = {"critique": Critique}
"""Top-level payload keys whose object values are stored as one text, the value's JSON as its
model writes it (:func:`object_text`): a parsed critique holds its answer's prose again, in
lists of strings under keys no text rule names. A snapshot refers to the same text for the
same critique (``Critique``'s serializer, through :func:`text_reference`)."""
MIN_LENGTH = 96
"""Shorter texts stay inline: a reference costs about as much as they do."""
_REF = "sha256"
REF_KEY = b'"sha256"'
REF_PATTERN = re.compile(
    rb'"('
    + b"|".join(re.escape(k.encode()) for k in sorted(TEXT_KEYS | set(OBJECT_TEXTS)))
    + rb')"\s*:\s*\{\s*"sha256"\s*:\s*"([0-9a-f]{64})"\s*\}'
)
"""A reference under a text or object key, as any JSON writer spaces it (a PostgreSQL row may
have been re-serialised through ``jsonb``)."""
PROMPT_REF = re.compile(
    rb'("role"\s*:\s*"[a-z]+"\s*,\s*"content"\s*:\s*)\{\s*"sha256"\s*:\s*"[0-9a-f]{64}"\s*\}'
)
"""A prompt message's text by reference (a chat message is ``{"role": …, "content": …}``)."""
_TEXT_VALUE = re.compile(
    '"(' + "|".join(re.escape(k) for k in sorted(TEXT_KEYS)) + r')":"([^"\\]*(?:\\.[^"\\]*)*)"'
)
"""A string under a text key, in compact JSON (the string's body, escapes and all, is group 2)."""

Lookup = Callable[[Sequence[str]], dict[str, str]]


def _is_ref(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get(_REF), str)


def text_reference(text: str, texts: dict[str, str]) -> dict[str, str] | None:
    """The reference that stands for ``text`` under a text or object key, its text added to
    ``texts``; None for a text short enough to stay inline."""
    if len(text) < MIN_LENGTH:
        return None
    address = text_address(text)
    texts[address] = text
    return {_REF: address}


def object_text(key: str, value: Any) -> str | None:
    """The text that stands for ``value`` under the object key ``key`` (:data:`OBJECT_TEXTS`):
    its JSON as its model writes it, which a snapshot writes for the same value. None unless
    ``value`` is exactly what that JSON reads back as (it then stays inline, as it is)."""
    model = OBJECT_TEXTS.get(key)
    if model is None or type(value) is not dict:
        return None
    try:
        text = model.model_validate(value).model_dump_json()
    except ValidationError:
        return None
    return text if json.loads(text) == value else None


def _object_reference(key: str, value: Any, texts: dict[str, str]) -> Any:
    text = object_text(key, value)
    return None if text is None else text_reference(text, texts)


def externalise(data: Any, texts: dict[str, str], *, objects: bool = False) -> Any:
    """``data`` with every long text under a :data:`TEXT_KEYS` key replaced by its reference,
    and with ``objects`` (an event's payload) every object under one of its own
    :data:`OBJECT_TEXTS` keys whose text is long; the texts are added to ``texts`` (address →
    text). ``data`` itself is not changed. Objects are looked for at the top only: deeper, a
    key of that name is free-form data (an imported session's history), not the model."""
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            kind = type(value)  # a scalar is copied here, not through a call: appends pay
            if kind is int or kind is float or kind is bool or value is None:
                out[key] = value
            elif isinstance(value, str):
                ref = text_reference(value, texts) if key in TEXT_KEYS else None
                out[key] = value if ref is None else ref
            else:
                ref = None
                if objects and key in OBJECT_TEXTS:
                    ref = _object_reference(key, value, texts)
                out[key] = externalise(value, texts) if ref is None else ref
        return out
    if isinstance(data, list | tuple):
        return [externalise(v, texts) for v in data]
    return data


def _refers(key: str, value: Any) -> bool:
    return (key in TEXT_KEYS or key in OBJECT_TEXTS) and _is_ref(value)


def _addresses(data: Any, found: list[str]) -> list[str]:
    if isinstance(data, dict):
        for key, value in data.items():
            if _refers(key, value):
                found.append(value[_REF])
            else:
                _addresses(value, found)
    elif isinstance(data, list):
        for v in data:
            _addresses(v, found)
    return found


def _substitute(data: Any, texts: dict[str, str]) -> Any:
    if isinstance(data, dict):
        return {k: _text_value(k, v, texts) for k, v in data.items()}
    if isinstance(data, list):
        return [_substitute(v, texts) for v in data]
    return data


def _text_value(key: str, value: Any, texts: dict[str, str]) -> Any:
    """``value`` (under ``key``) with its text in place if it is a reference."""
    if not _refers(key, value):
        return _substitute(value, texts)
    return _referenced_value(key, value[_REF], texts)


def _referenced_value(key: str, address: str, texts: dict[str, str]) -> Any:
    """What a reference under ``key`` stands for: the text at ``address``, or under an object
    key the object it holds."""
    if key in OBJECT_TEXTS:
        return _object_of(texts[address], address)
    return texts[address]


def _object_of(text: str, address: str) -> dict[str, Any]:
    """The object an object key's text holds. Anything else (the text was altered) is refused:
    spliced into a stored event as it is, it could stand for any of the event's fields."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        value = None
    if type(value) is not dict:
        raise StoreError(
            f"text {address[:12]} should hold a JSON object and does not (the text was altered)",
            hint="restore the store from a backup",
        )
    return cast(dict[str, Any], value)


def referenced(data: Any) -> list[str]:
    """The addresses of the texts a stored payload refers to (in order, repeats kept)."""
    return _addresses(data, [])


def resolve(data: Any, lookup: Lookup, *, check: bool = False) -> Any:
    """``data`` with every reference replaced by its text. A missing text raises
    :class:`StoreError`; with ``check`` a text that does not hash to its address does too."""
    wanted = _addresses(data, [])
    if not wanted:
        return data
    texts = _all_found(lookup, wanted)
    for address in wanted:
        if check and text_address(texts[address]) != address:
            raise StoreError(
                f"text {address[:12]} does not hash to its address (the text was altered)",
                hint="restore the store from a backup",
            )
    return _substitute(data, texts)


def with_texts(plain: bytes, lookup: Lookup) -> bytes:
    """The stored JSON ``plain`` with each reference replaced by its text, as JSON, before it
    is decoded; a missing text raises :class:`StoreError`.

    Substituting in the bytes costs a search; walking the decoded payload for references
    (most events have none) cost more than decoding it. A reference can only be the whole
    value of a text key: inside a JSON string its quotes would be escaped.
    """
    if REF_KEY not in plain:
        return plain
    addresses = [m.group(2).decode("ascii") for m in REF_PATTERN.finditer(plain)]
    if not addresses:
        return plain
    texts = _all_found(lookup, addresses)

    def text(m: re.Match[bytes]) -> bytes:
        value = _referenced_value(m.group(1).decode("ascii"), m.group(2).decode("ascii"), texts)
        body = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        return b'"' + m.group(1) + b'":' + body.encode("utf-8")

    return REF_PATTERN.sub(text, plain)


def refer_to_texts(document: str, texts: dict[str, str]) -> str:
    """``document`` (compact JSON, as pydantic writes it) with every long text under a text
    key replaced by its reference, as :func:`externalise` does to a payload; the texts are
    added to ``texts``. For a JSON document already written: decoding a large one to walk
    it would cost more than this search. As in :func:`with_texts`, only a key can match: in
    a string every quote is escaped."""

    def reference(m: re.Match[str]) -> str:
        ref = text_reference(json.loads(f'"{m.group(2)}"'), texts)
        if ref is None:
            return m.group(0)
        return f'"{m.group(1)}":{json.dumps(ref, separators=(",", ":"))}'

    return _TEXT_VALUE.sub(reference, document)


def _all_found(lookup: Lookup, addresses: Sequence[str]) -> dict[str, str]:
    """The texts at ``addresses``; one missing from the store raises :class:`StoreError`."""
    texts = lookup(addresses)
    for address in addresses:
        if address not in texts:
            raise _missing(address)
    return texts


def _missing(address: str) -> StoreError:
    return StoreError(
        f"text {address[:12]} is referenced but missing from the store, or unreadable",
        hint="restore the store from a backup",
    )
