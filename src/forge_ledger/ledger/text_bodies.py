"""How a text's body and key are stored on SQLite: on its own (compressed when that is smaller), or
packed against the answers it quotes, with the quoted answers' addresses ahead of it (and, for
texts written before those lists were held in the bodies, in a table of their own).
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterable, Sequence
from typing import Any

from .compression import pack_text, unpack_text
from .quotes import pack_with, unpack_with
from .texts import TEXT_TABLE

__all__ = [
    "DICTIONARIES_TABLE",
    "QUOTING",
    "address_of",
    "binary_keys",
    "body_of",
    "by_kind",
    "key_of",
    "keys_of",
    "quoting_body",
    "readable",
    "unquoted",
]


def by_kind(
    rows: Iterable[tuple[str, bytes, int, str | None]],
) -> tuple[list[tuple[str, bytes, int]], list[tuple[str, bytes, list[str]]]]:
    """The rows of texts stored on their own, and those packed against the answers they
    quote (address, packed text, quoted answers' addresses). A body whose quote list is
    damaged is in neither, and is then reported as missing or unreadable."""
    plain: list[tuple[str, bytes, int]] = []
    quoting: list[tuple[str, bytes, list[str]]] = []
    for address, body, compressed, members in rows:
        if members is not None:
            try:
                quoting.append((address, body, list(map(str, json.loads(members)))))
            except (ValueError, TypeError):  # a damaged list: the text is unreadable
                continue
        elif compressed and body[:1] == QUOTING:
            split = quoting_body(body)
            if split is not None:
                quoting.append((address, split[1], split[0]))
        else:
            plain.append((address, body, compressed))
    return plain, quoting


def quoting_body(body: bytes) -> tuple[list[str], bytes] | None:
    """The quoted answers' addresses and the packed text of a body packed against them (see
    :func:`body_of`); None if it is not one, or its quote list is cut short."""
    if body[:1] != QUOTING or len(body) < 2:
        return None
    end = 2 + 32 * body[1]
    if len(body) <= end:
        return None
    return [body[i : i + 32].hex() for i in range(2, end, 32)], body[end:]


def unquoted(
    quoting: Iterable[tuple[str, bytes, list[str]]], members: dict[str, str]
) -> dict[str, str]:
    """Prompts packed against the answers they quote; one whose answers are missing or which
    does not unpack is left out (reported as missing or unreadable)."""
    out: dict[str, str] = {}
    for address, body, quoted in quoting:
        if all(m in members for m in quoted):
            try:
                out[address] = unpack_with(body, [members[m] for m in quoted])
            except (zlib.error, UnicodeDecodeError):
                continue
    return out


def body_of(text: str, quoted: list[str] | None, texts: dict[str, str]) -> str | bytes:
    """A text's stored body: packed against the answers it quotes, or on its own.

    Packed, it begins with :data:`QUOTING`, the number of quoted answers (one byte) and
    their addresses (32 bytes each), in dictionary order. These lists used to be rows of a
    table of their own (``forge_text_quotes``, still read): a 64-character key and a JSON
    list of 64-character addresses per text, about a tenth of a store's file.
    """
    if quoted:
        quoted = quoted[:255]
        members = b"".join(bytes.fromhex(a) for a in quoted)
        packed = pack_with(text, [texts[m] for m in quoted])
        return QUOTING + bytes([len(quoted)]) + members + packed
    return pack_text(text)


def readable(rows: Iterable[tuple[str, bytes, int]]) -> dict[str, str]:
    """Stored texts by address, each read as bytes (a damaged TEXT body is not valid UTF-8,
    which the driver would refuse to fetch); one that cannot be read is left out, and is then
    reported as missing or unreadable."""
    out: dict[str, str] = {}
    for address, body, compressed in rows:
        try:
            out[address] = unpack_text(body) if compressed else bytes(body).decode("utf-8")
        except (zlib.error, UnicodeDecodeError):
            continue
    return out


QUOTING = b"\x01"
"""The first byte of a body packed against the answers it quotes (a compressed body begins
with zlib's 0x78, and a plain one is TEXT)."""
DICTIONARIES_TABLE = "forge_text_quotes"
"""Texts written before their quote lists were held in their bodies: (address, the quoted
answers' addresses as a JSON list, in dictionary order). No longer written."""


def binary_keys(c: Any) -> bool | None:
    """Whether the store's text table is keyed by the digests' 32 bytes; False for a table keyed
    by their 64 hexadecimal characters (stores written before, which keep that key, and every
    PostgreSQL store); None if the store has no text table."""
    c.execute(f"SELECT upper(type) FROM pragma_table_info('{TEXT_TABLE}') WHERE name = 'sha256'")
    rows = c.fetchall()
    return None if not rows else rows[0][0] == "BLOB"


def key_of(address: str, binary: bool) -> str | bytes:
    """A text's key in a store keyed as ``binary`` says (an address is 64 hex digits)."""
    return bytes.fromhex(address) if binary else address


def keys_of(addresses: Sequence[str], binary: bool) -> list[str | bytes]:
    """The keys of ``addresses`` (one that is not a digest's hex cannot be stored: left out)."""
    return [key_of(a, binary) for a in addresses if _ADDRESS.fullmatch(a)]


def address_of(key: str | bytes) -> str:
    """A stored key as an address (64 lowercase hex digits)."""
    return key.hex() if isinstance(key, bytes) else key


_ADDRESS = re.compile("[0-9a-f]{64}")
