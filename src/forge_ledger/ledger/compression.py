"""Stored bytes compressed with zlib where that makes them smaller.

Event and snapshot states are JSON documents, and the texts table holds prose: both shrink two
to four times under zlib, and a session's store is mostly these. Compression is decided row by
row, so a store holds compressed and plain rows side by side and stores written before
compression read unchanged:

- a stored state is JSON, which begins with ``{``; a zlib stream begins with ``0x78``, so
  :func:`unpack` can tell them apart;
- a text is stored compressed as a BLOB and plain as TEXT, so the column's type tells them
  apart (a plain text may well begin with ``x``).

A stored state is a few hundred bytes of JSON, mostly the same keys and structure from one
event to the next, which zlib alone cannot share between rows. States are therefore compressed
with a preset dictionary (:data:`STATE_DICTIONARY`): about two fifths smaller than alone. A
zlib stream names the dictionary it needs (its Adler-32, in the header), so rows compressed
with it, rows compressed alone and plain rows read side by side, and a dictionary, once used,
can never change: a new one gets a new file, and :func:`unpack` keeps reading the old.

The hash chain covers the decoded payloads, never these bytes, so compression changes no hash.
"""

from __future__ import annotations

import functools
import zlib
from typing import Any

from .._packaged import packaged_data

__all__ = [
    "MIN_COMPRESS",
    "STATE_DICTIONARY",
    "NewerFormatError",
    "inflate",
    "pack",
    "pack_text",
    "unpack",
    "unpack_text",
]

MIN_COMPRESS = 128
"""Shorter values are stored as they are: zlib's header and checksum would eat the gain."""
_LEVEL = 6
_ZLIB_FIRST = 0x78
_FDICT = 0x20
"""The zlib header's flag for a preset dictionary, whose Adler-32 follows the header."""
STATE_DICTIONARY = packaged_data("event-states-1.zdict")
"""One stored state of each event type a run records: those of the demo session (``forge-ledger
demo`` of 2026-11-25), the rarest first, after those the demo never records (a failed call, a
technique, questions, a pause, a human answer, a resume, a budget exhausted, a completion),
with hashes and addresses blanked. Frozen: stored rows need it."""
_DICTIONARIES = {zlib.adler32(STATE_DICTIONARY): STATE_DICTIONARY}


class NewerFormatError(zlib.error):
    """A stored row this version cannot read because a later one wrote it (not damage)."""


def pack(data: bytes, dictionary: bytes | None = None) -> bytes:
    """``data`` compressed (with ``dictionary`` if given) if that is smaller, else ``data``."""
    if len(data) < MIN_COMPRESS:
        return data
    if dictionary is None:
        packed = zlib.compress(data, _LEVEL)
    else:
        header, primed = _primed(dictionary)
        packer = primed.copy()
        body = packer.compress(data) + packer.flush()
        packed = header + body + zlib.adler32(data).to_bytes(4, "big")
    return packed if len(packed) < len(data) else data


@functools.lru_cache(maxsize=4)
def _primed(dictionary: bytes) -> tuple[bytes, Any]:
    """The zlib header naming ``dictionary``, and a raw compressor with it loaded, to copy:
    loading a dictionary of a few KB costs more than copying a compressor that has it.

    The compressor's window is 16 KB (the dictionary and a stored state fit in it), not zlib's
    default 32 KB: zlib then allocates about 260 KB per compressor, which glibc maps afresh
    on every copy, and the copy alone cost more (about 60 µs) than compressing the state.
    The stored bytes keep the header a 32 KB window writes (a window's size in the header is
    an upper bound on the distances the data uses), so the rows are the same format as ever.
    """
    whole = zlib.compressobj(_LEVEL, zdict=dictionary)
    header = (whole.compress(b"") + whole.flush())[:6]
    return header, zlib.compressobj(
        _LEVEL, zlib.DEFLATED, -_PACK_WINDOW_BITS, _PACK_MEMORY_LEVEL, zdict=dictionary
    )


_PACK_WINDOW_BITS = 14
_PACK_MEMORY_LEVEL = 5


def unpack(data: bytes) -> bytes:
    """The stored state as written by :func:`pack` (or by a store that never compressed).
    A row that needs a dictionary this version does not have raises
    :class:`NewerFormatError`; a damaged one, ``zlib.error``."""
    if not data[:1] or data[0] != _ZLIB_FIRST:
        return data
    if len(data) > 1 and data[1] & _FDICT:
        dictionary = _DICTIONARIES.get(_dictionary_id(data))
        if dictionary is None:
            raise NewerFormatError(
                "compressed with a dictionary this version does not have: written by a newer "
                "forge-ledger"
            )
        return _inflated(data, _inflater(dictionary).copy())
    return zlib.decompress(data)


def inflate(data: bytes, dictionary: bytes) -> bytes:
    """``data``, a zlib stream compressed with ``dictionary``, decompressed; one compressed
    with another dictionary raises ``zlib.error``. With an empty one, zlib names none."""
    if not dictionary:
        return zlib.decompress(data)
    if _dictionary_id(data) != zlib.adler32(dictionary):
        raise zlib.error("not a stream compressed with this dictionary")
    return _inflated(data, zlib.decompressobj(-15, zdict=dictionary))


def _dictionary_id(data: bytes) -> int:
    """The Adler-32 of the dictionary a zlib stream names in its header."""
    if len(data) < 10 or data[0] & 0x0F != 8 or (data[0] << 8 | data[1]) % 31 or not (
        data[1] & _FDICT
    ):
        raise zlib.error("not a zlib stream with a dictionary")
    return int.from_bytes(data[2:6], "big")


@functools.lru_cache(maxsize=4)
def _inflater(dictionary: bytes) -> Any:
    """A raw decompressor with ``dictionary`` set, to copy for each row."""
    return zlib.decompressobj(-15, zdict=dictionary)


def _inflated(data: bytes, inflater: Any) -> bytes:
    """The deflate data of a zlib stream (past its header, checked by the caller), inflated
    raw by ``inflater``, which has the dictionary set already. zlib's own reading of a header
    that names a dictionary costs more than the row's data (6.5 against 5.2 µs for a stored
    state, copying a primed decompressor), and every read of an event pays it; the trailer's
    checksum is checked here instead. A stream cut short or whose checksum does not match
    raises ``zlib.error``: its beginning is never taken for what was stored."""
    out: bytes = inflater.decompress(data[6:])
    if not inflater.eof or zlib.adler32(out) != int.from_bytes(inflater.unused_data[:4], "big"):
        raise zlib.error("incomplete or damaged stream")
    return out


def pack_text(text: str) -> str | bytes:
    """A text's stored form: zlib bytes if smaller, else the text itself."""
    raw = text.encode("utf-8")
    packed = pack(raw)
    return packed if packed is not raw else text


def unpack_text(body: str | bytes) -> str:
    """A stored text (see :func:`pack_text`). A damaged BLOB raises ``zlib.error``."""
    if isinstance(body, bytes | bytearray | memoryview):
        return zlib.decompress(bytes(body)).decode("utf-8")
    return body
