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
import json
import zlib
from typing import Any

import pydantic_core
from eventsourcing.persistence import Compressor, JSONTranscoder, Transcoder

from .._packaged import packaged_data

__all__ = [
    "MIN_COMPRESS",
    "STATE_DICTIONARY",
    "NewerFormatError",
    "StateCompressor",
    "TopLevelTranscoder",
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
_TYPE_KEY = "_type_"
_TYPED = b'"_type_"'


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


class StateCompressor(Compressor):
    """eventsourcing's compressor slot (the mapper calls it for every event and snapshot).

    ``write=False`` stores new states plain and still reads compressed ones.
    """

    def __init__(self, *, write: bool = True) -> None:
        self.write = write

    def compress(self, data: bytes) -> bytes:
        return pack(data, STATE_DICTIONARY) if self.write else data

    def decompress(self, data: bytes) -> bytes:
        return unpack(data)


class TopLevelTranscoder(Transcoder):
    """eventsourcing's JSON transcoder, decoding with the C parser and no object hook.

    The JSON transcoder calls a Python hook on every object of a document, to find its typed
    values (``{"_type_": …, "_data_": …}``): for an event whose payload is plain JSON, that hook
    cost more than the parse. Here the typed values are only looked for at the top level (an
    event's timestamp, a snapshot's dates and state), where ours are; a document holding more
    typed values than that goes through the full decoder, so none is ever missed.
    """

    def __init__(self, inner: JSONTranscoder) -> None:
        self.inner = inner

    def encode(self, obj: Any) -> bytes:
        return self.inner.encode(obj)

    def encode_event_state(self, state: dict[str, Any]) -> bytes:
        """An event's state as :meth:`encode` would write it, for a state whose values are
        JSON already but for top-level ones of a registered type (an event's timestamp).

        The caller vouches for the nesting: ours are payloads dumped in pydantic's JSON mode,
        in which nothing needs the JSON encoder's hook for typed values. Written by
        pydantic-core's serializer: a fifth of the standard encoder's cost, which every
        append pays. Its bytes may differ from the standard encoder's only in how a float is
        spelled (``1e-7`` for ``1e-07``, ``0.000015`` for ``1.5e-05``), which reads back as
        the same number.
        """
        top = dict(state)
        for key, value in state.items():
            transcoding = self.inner.types.get(type(value))
            if transcoding is not None:
                data = transcoding.encode(value)
                if type(data) is not str:  # a typed value made of others: the full encoder
                    return self.inner.encode(state)
                top[key] = {_TYPE_KEY: transcoding.name, "_data_": data}
        return pydantic_core.to_json(top)

    def decode(self, data: bytes) -> Any:
        obj = json.loads(data)
        typed = data.count(_TYPED)
        if not typed:
            return obj
        if not isinstance(obj, dict):
            return self.inner.decode(data)
        top = [k for k, v in obj.items() if isinstance(v, dict) and _TYPE_KEY in v]
        if len(top) != typed:
            return self.inner.decode(data)
        for key in top:
            value = obj[key]
            transcoding = self.inner.names.get(value[_TYPE_KEY])
            if transcoding is None or set(value) != {_TYPE_KEY, "_data_"}:
                return self.inner.decode(data)  # let the full decoder say what is wrong
            obj[key] = transcoding.decode(value["_data_"])
        return obj
