"""How a text's body is stored on SQLite: on its own (compressed when that is smaller), or
packed against the answers it quotes, with the quoted answers' addresses ahead of it. (Older
layouts are read, and converted, by :mod:`.migrate`.)
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

from .compression import pack_text, unpack_text
from .quotes import pack_with, unpack_with

__all__ = [
    "QUOTING",
    "QUOTING_MAX",
    "body_of",
    "by_kind",
    "quoting_body",
    "readable",
    "unquoted",
]


def by_kind(
    rows: Iterable[tuple[str, bytes, int]],
) -> tuple[list[tuple[str, bytes, int]], list[tuple[str, bytes, list[str]]]]:
    """The rows of texts stored on their own, and those packed against the answers they
    quote (address, packed text, quoted answers' addresses). A body whose quote list is
    cut short is in neither, and is then reported as missing or unreadable."""
    plain: list[tuple[str, bytes, int]] = []
    quoting: list[tuple[str, bytes, list[str]]] = []
    for address, body, compressed in rows:
        if compressed and body[:1] == QUOTING:
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
    their addresses (32 bytes each), in dictionary order.
    """
    if quoted:
        quoted = quoted[:QUOTING_MAX]
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
QUOTING_MAX = 255
"""The most answers a body's quote list holds (its count is one byte)."""
