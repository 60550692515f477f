"""A stored state's long lists, kept in fixed blocks that a snapshot names by address.

Restoring a state decodes only what its reader reads: a time travel in a long session needs
the last few answers, not the accounting of every answer ever recorded. A snapshot writes a
long list (a field marked :class:`InBlocks` in :mod:`.snapshot_states`) in blocks of a fixed
size by position, each block its own content-addressed text named by its address; a restored
state holds the list as a :class:`BlockList`, which decodes a block the first time one of its
items is read. The domain sees a mutable sequence of its values and knows nothing of this.

Blocks never move: block *k* holds items ``k × size`` up to the next block, and only the
last one may be short. That is what lets the same items give the same block, and so the
same address, in every snapshot that holds them: the sink that stores a block keeps one text
per address, so successive snapshots share the blocks whose values did not change.

What a block holds is decided when it is written, from its values: a block decoded (or built
by the fold, in a plain list) is encoded again for every state stored, since its items may
have been changed in place; a block never decoded cannot have been, and keeps the address it
was read from. Nothing here does I/O: the reader (:data:`BLOCK_LOADER` in the validation
context) and the writer (:class:`BlockSink` in the serialization context) come from
:mod:`.snapshot_states`.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable, Iterator, MutableSequence, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, TypeVar, get_args, overload

from pydantic import GetCoreSchemaHandler, TypeAdapter, ValidationError
from pydantic_core import core_schema

from ..errors import StoreError

__all__ = [
    "BLOCK_LOADER",
    "BLOCK_SINK",
    "BlockList",
    "BlockLoader",
    "BlockSink",
    "InBlocks",
    "loaded",
    "unreadable_block",
]

T = TypeVar("T")


BLOCK_LOADER = "forge_block_loader"
"""Validation-context key of the :data:`BlockLoader` a stored list reads its blocks with."""

BLOCK_SINK = "forge_block_sink"
"""Serialization-context key of the :class:`BlockSink` a list writes its blocks to; without
one a list serializes as the plain list of its items."""

BlockLoader = Callable[[str], bytes]
"""The JSON of the block stored at an address (its texts resolved); raises
:class:`~forge_ledger.errors.StoreError` when it cannot."""

_ADDRESS = re.compile(r"^[0-9a-f]{64}$")


class BlockSink(Protocol):
    """Where a state being stored writes its blocks, and the long parsed values it holds by
    reference (a critique: see :mod:`.snapshot_states`)."""

    def refer(self, text: str) -> Any:
        """What stands for the value whose JSON is ``text`` in the stored state: a reference
        to the text, kept to be written with the state; None to keep the value inline."""

    def store(self, items: list[Any], encode: Callable[[], str]) -> str:
        """Keep the block of ``items``, whose JSON ``encode()`` gives (once per address: the
        same values give the same JSON); its address. A sink may skip the encoding when it
        can tell from the values that they are the ones it stored before."""
        ...


class _Block:
    """One block: its items once decoded, or the address of its stored text until then."""

    __slots__ = ("address", "items", "size")

    def __init__(self, items: list[Any] | None, size: int, address: str | None = None) -> None:
        self.items = items
        self.size = size
        self.address = address


class BlockList(MutableSequence[T]):
    """A restored list whose items live in blocks of ``size``, decoded when first read (see
    the module's docstring). It compares equal to a list with the same items."""

    __slots__ = ("_blocks", "_codec", "_len", "_load", "size")
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, items: Iterable[T] = (), size: int = 64) -> None:
        self.size = size
        self._blocks: list[_Block] = []
        self._len = 0
        self._load: BlockLoader | None = None
        self._codec: TypeAdapter[list[T]] | None = None
        self._rebuild(list(items))

    # ------------------------------------------------------------------ reading

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> list[T]: ...

    def __getitem__(self, index: int | slice) -> T | list[T]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._len))]
        block, offset = divmod(self._position(index), self.size)
        items = self._blocks[block].items  # the fold reads an item or two per event
        if items is None:
            items = self._items(block)
        return items[offset]  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[T]:
        for block in range(len(self._blocks)):
            yield from self._items(block)

    def __reversed__(self) -> Iterator[T]:
        for block in range(len(self._blocks) - 1, -1, -1):
            yield from reversed(self._items(block))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, BlockList | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __repr__(self) -> str:
        return f"BlockList({list(self)!r})"

    def loaded(self) -> Iterator[T]:
        """The items of the blocks decoded so far, in order (reading none from the store)."""
        for b in self._blocks:
            if b.items is not None:
                yield from b.items

    # ------------------------------------------------------------------ changing

    def append(self, value: T) -> None:
        last = self._blocks[-1] if self._blocks else None
        if last is None or last.size == self.size:
            self._blocks.append(_Block([value], 1))
        else:
            self._items(len(self._blocks) - 1).append(value)
            last.size += 1
        self._len += 1

    @overload
    def __setitem__(self, index: int, value: T) -> None: ...

    @overload
    def __setitem__(self, index: slice, value: Iterable[T]) -> None: ...

    def __setitem__(self, index: int | slice, value: Any) -> None:
        if isinstance(index, slice):
            items = list(self)
            items[index] = value
            self._rebuild(items)
            return
        block, offset = divmod(self._position(index), self.size)
        self._items(block)[offset] = value

    def __delitem__(self, index: int | slice) -> None:
        items = list(self)
        del items[index]
        self._rebuild(items)

    def insert(self, index: int, value: T) -> None:
        if index >= self._len:
            self.append(value)
            return
        items = list(self)
        items.insert(index, value)
        self._rebuild(items)

    def _rebuild(self, items: list[T]) -> None:
        size = self.size
        self._blocks = [
            _Block(items[i : i + size], len(items[i : i + size]))
            for i in range(0, len(items), size)
        ]
        self._len = len(items)

    # ------------------------------------------------------------------ copies

    def __copy__(self) -> BlockList[T]:
        """A new list of the same items (the blocks not decoded yet shared by address)."""
        return self._copy(
            lambda b: _Block(None if b.items is None else list(b.items), b.size, b.address)
        )

    def __deepcopy__(self, memo: dict[int, Any]) -> BlockList[T]:
        """Copies of the items (the blocks not decoded yet shared by address)."""
        out: BlockList[T] = self._copy(lambda b: _Block(None, b.size, b.address))
        memo[id(self)] = out
        for mine, theirs in zip(self._blocks, out._blocks, strict=True):
            if mine.items is not None:
                theirs.items = copy.deepcopy(mine.items, memo)
        return out

    def _copy(self, copy_block: Callable[[_Block], _Block]) -> BlockList[T]:
        """A copy sharing what is immutable: the stored blocks not decoded yet."""
        out: BlockList[T] = BlockList(size=self.size)
        out._blocks = [copy_block(b) for b in self._blocks]
        out._len, out._load, out._codec = self._len, self._load, self._codec
        return out

    # ------------------------------------------------------------------ blocks

    def _position(self, index: int) -> int:
        position = index + self._len if index < 0 else index
        if not 0 <= position < self._len:
            raise IndexError("BlockList index out of range")
        return position

    def _items(self, block: int) -> list[Any]:
        """A block's items, decoded if they were not: from then on they are the block (its
        address no longer says what it holds, once they may be changed in place)."""
        b = self._blocks[block]
        if b.items is None:
            b.items = self._decode(b)
            b.address = None
        return b.items

    def _decode(self, b: _Block) -> list[Any]:
        address = b.address or ""
        if self._load is None or self._codec is None:
            raise StoreError(f"block {address[:12]} of a stored state cannot be read here")
        try:
            context = {BLOCK_LOADER: self._load}
            items = self._codec.validate_json(self._load(address), context=context)
        except ValidationError as e:
            raise _damaged(address, f"it does not decode ({e.error_count()} errors)") from None
        if len(items) != b.size:
            raise _damaged(address, f"it holds {len(items)} items, not {b.size}")
        return items

    def written_blocks(self) -> Iterator[tuple[list[Any] | None, str | None]]:
        """Each block as a stored state writes it: its items, or (never decoded) its address."""
        for b in self._blocks:
            yield b.items, b.address

    @classmethod
    def restored(
        cls,
        data: dict[str, Any],
        size: int,
        load: BlockLoader | None,
        codec: TypeAdapter[list[T]],
    ) -> BlockList[T]:
        """The list from its stored form (validated already, the inline items too)."""
        addresses: list[str] = data["blocks"]
        tail: list[T] = data["tail"]
        count: int = data["count"]
        if len(tail) >= size or count != size * len(addresses) + len(tail):
            raise ValueError("a stored block list names its full blocks and holds the rest")
        if addresses and load is None:
            raise ValueError("a state with stored blocks loads through the ledger")
        out: BlockList[T] = cls(size=size)
        out._blocks = [_Block(None, size, a) for a in addresses]
        if tail:
            out._blocks.append(_Block(tail, len(tail)))
        out._len, out._load, out._codec = count, load, codec
        return out


def loaded(items: Sequence[T]) -> Iterable[T]:
    """The items of ``items`` a restored state has decoded so far (all of a plain list)."""
    return items.loaded() if isinstance(items, BlockList) else items


def _blocks_of(items: Sequence[T], size: int) -> Iterator[tuple[list[Any] | None, str | None]]:
    """``items`` by blocks of ``size``: each block's items, or the address of one never
    decoded (a restored list's)."""
    if isinstance(items, BlockList):
        yield from items.written_blocks()
        return
    plain = items if isinstance(items, list) else list(items)
    for i in range(0, len(plain), size):
        yield plain[i : i + size], None


def _stored(
    items: Sequence[Any], size: int, sink: BlockSink, codec: TypeAdapter[list[Any]]
) -> dict[str, Any]:
    """The list as stored: the addresses of its full blocks (each decoded one encoded and
    written to ``sink``, which keeps one text per address), the items of its short last
    block inline, and its length. The short block changes with nearly every append, so as
    a text of its own it would be stored again by every snapshot and shared by none."""
    addresses: list[str] = []
    tail: Any = []
    context = {BLOCK_SINK: sink}
    for block, address in _blocks_of(items, size):
        if block is None:  # never decoded, so unchanged: the text it was read from
            addresses.append(address or "")
        elif len(block) < size:
            tail = codec.dump_python(block, mode="json", exclude_defaults=True, context=context)
        else:
            addresses.append(sink.store(block, partial(_json, codec, block, context)))
    return {"blocks": addresses, "tail": tail, "count": len(items)}


@dataclass(frozen=True)
class InBlocks:
    """Marks a list field of a stored state (``Annotated[list[X], InBlocks(size)]``) as
    written in blocks of ``size`` when a :data:`BLOCK_SINK` is in the serialization context,
    and read from that stored form as a :class:`BlockList`; a plain list of items is read
    and written as one, so the field takes the state's own layout too.

    ``items`` is the type the items are read as (the annotation's by default), ``written``
    the one they are written as (``items`` by default): a stored form may write a value by
    reference that the domain's own model writes inline."""

    size: int
    items: Any = None
    written: Any = None

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        """A list of items, or the stored form (full blocks' addresses, the short last
        block's items, the length), whose items pydantic-core validates in the same pass."""
        read = self.items if self.items is not None else (get_args(source) or (Any,))[0]
        written = self.written if self.written is not None else read
        size = self.size
        codec: TypeAdapter[list[Any]] = TypeAdapter(list[read])  # type: ignore[valid-type]
        writer: TypeAdapter[list[Any]] = TypeAdapter(list[written])  # type: ignore[valid-type]
        items_schema = core_schema.list_schema(handler.generate_schema(read))
        stored_schema = core_schema.typed_dict_schema(
            {
                "blocks": core_schema.typed_dict_field(
                    core_schema.list_schema(core_schema.str_schema(pattern=_ADDRESS.pattern))
                ),
                "tail": core_schema.typed_dict_field(items_schema),
                "count": core_schema.typed_dict_field(core_schema.int_schema(ge=0)),
            },
            extra_behavior="forbid",
        )

        def validate(
            value: Any,
            inner: core_schema.ValidatorFunctionWrapHandler,
            info: core_schema.ValidationInfo,
        ) -> Any:
            if isinstance(value, BlockList):
                return value
            valid = inner(value)
            if isinstance(valid, dict):
                context = info.context if isinstance(info.context, dict) else {}
                return BlockList.restored(valid, size, context.get(BLOCK_LOADER), codec)
            return valid

        def serialize(
            value: Any,
            inner: core_schema.SerializerFunctionWrapHandler,
            info: core_schema.SerializationInfo,
        ) -> Any:
            context = info.context if isinstance(info.context, dict) else {}
            sink = context.get(BLOCK_SINK)
            if sink is not None:
                return _stored(value, size, sink, writer)
            return inner(value if type(value) is list else list(value))

        return core_schema.with_info_wrap_validator_function(
            validate,
            core_schema.union_schema([items_schema, stored_schema]),
            serialization=core_schema.wrap_serializer_function_ser_schema(
                serialize,
                info_arg=True,
                schema=core_schema.list_schema(handler.generate_schema(written)),
            ),
        )


def _json(codec: TypeAdapter[list[T]], items: list[T], context: dict[str, Any]) -> str:
    """A block's JSON, as stored."""
    return codec.dump_json(items, exclude_defaults=True, context=context).decode("utf-8")


def unreadable_block(address: str, problem: str) -> StoreError:
    """The error of every block a restored state cannot read (``problem`` says why)."""
    return StoreError(
        f"a snapshot names a block ({address[:12]}) {problem}",
        hint="the events are not affected: 'forge-ledger verify --drop-bad-snapshots' "
        "deletes the snapshots that differ from them, and loads fold the events instead",
    )


def _damaged(address: str, why: str) -> StoreError:
    return unreadable_block(address, f"that is damaged: {why}")
