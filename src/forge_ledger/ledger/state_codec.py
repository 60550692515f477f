"""eventsourcing's compressor and transcoder slots as the mapper (:mod:`.text_mapper`) fills
them: states packed against the state dictionary on SQLite (:mod:`.compression`), and JSON read
with the C parser, typed values looked for at the top level only.

Kept apart from :mod:`.compression`, which is plain zlib: a reader that only unpacks a stored
row (the store's head, for the read model's readers) loads neither eventsourcing nor pydantic.
"""

from __future__ import annotations

import json
from typing import Any

import pydantic_core
from eventsourcing.persistence import Compressor, JSONTranscoder, Transcoder

from .compression import STATE_DICTIONARY, pack, unpack

__all__ = ["StateCompressor", "TopLevelTranscoder"]

_TYPE_KEY = "_type_"
_TYPED = b'"_type_"'


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
