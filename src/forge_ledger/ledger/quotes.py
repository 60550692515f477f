"""Prompts stored against the answers they quote.

A prompt quotes earlier answers (the draft to critique, the critiques received, the previous
synthesis), so stored whole, the prompts of a session hold every answer several times over:
half of a session's stored text. On SQLite a prompt is instead compressed with zlib using the
answers it quotes as the preset dictionary, and its stored body begins with those answers'
addresses (``text_bodies.body_of``): a quoted answer then costs a few bytes per 258 quoted
characters, and the prompt is, in effect, its own words plus references to the answers it
quotes. The answers themselves are stored once, under their own addresses, in the same
transaction (they are written with the prompt if they are not there yet).

Which answers a text quotes is told, never guessed: the engine notes them as it builds a prompt
(``engine.Prompt.quotes``) and a parsed critique, opinion or vote quotes its own answer; the
aggregate hands them to the ledger with the event (``Deliberation.Event.quotes``), outside its
payload and its hash. A copy takes them from the source's stored bodies. Wrong or missing
quotes cost only compression: the text read back is always exactly the text (``verify``
hashes it).
"""

from __future__ import annotations

import zlib
from collections import OrderedDict, deque
from collections.abc import Sequence

from ..domain.texts import text_address
from .compression import inflate

__all__ = ["MIN_PACKED", "RECENT", "RecentAnswers", "members_of", "pack_with", "unpack_with"]

RECENT = 64
"""Answers kept per process: the last rounds of a large panel, which is what a prompt quotes
(the draft to critique, the critiques received, the previous synthesis, the votes); an answer
quoted from further back is read from the store."""
MIN_PACKED = 512
"""Shorter texts are compressed on their own: the quote list would cost what packing saves."""
_DICTIONARY_BYTES = 32 * 1024
"""zlib looks back at most 32 KiB, so a longer dictionary would only cost time."""
_LEVEL = 6


class RecentAnswers:
    """The answers this process wrote or read last (address → text), most recent last: the
    texts a new prompt is packed against, without a read of the store.

    Every event read or written passes its answer here, and most are never looked at again (a
    projection rebuild or an audit reads thousands and writes no prompt), so remembering only
    keeps the text; addresses are computed when a prompt is written, for the last
    :data:`RECENT` answers only.
    """

    def __init__(self) -> None:
        self._answers: OrderedDict[str, str] = OrderedDict()
        self._queued: deque[str] = deque(maxlen=RECENT)

    def remember(self, text: str) -> None:
        self._queued.append(text)

    def _settle(self) -> None:
        while self._queued:
            text = self._queued.popleft()
            address = text_address(text)
            self._answers[address] = text
            self._answers.move_to_end(address)
        while len(self._answers) > RECENT:
            self._answers.popitem(last=False)

    def holds(self, address: str) -> bool:
        """Whether the text at ``address`` is one of the recent answers (which other texts may
        be packed against, so it must never be packed itself)."""
        self._settle()
        return address in self._answers

    def get(self, address: str) -> str | None:
        self._settle()
        return self._answers.get(address)


def members_of(quotes: Sequence[str], texts: dict[str, str]) -> list[str]:
    """The quoted answers a text is packed against, in dictionary order (the one quoted last
    first, see :func:`_dictionary`), up to zlib's window: those whose texts are known."""
    out: list[str] = []
    size = 0
    for address in reversed(dict.fromkeys(quotes)):
        text = texts.get(address)
        if text is None:
            continue
        out.append(address)
        size += len(text.encode("utf-8"))
        if size >= _DICTIONARY_BYTES:
            break
    return out


def _dictionary(members: Sequence[str]) -> bytes:
    # The answer quoted last ends the dictionary: zlib's window slides along the prompt, so
    # what the prompt quotes late must lie late in the dictionary to stay within reach.
    return "\n".join(reversed(members)).encode("utf-8")[-_DICTIONARY_BYTES:]


def pack_with(text: str, members: Sequence[str]) -> bytes:
    """``text`` compressed with ``members`` (the quoted answers' texts) as the dictionary."""
    packer = zlib.compressobj(_LEVEL, zdict=_dictionary(members))
    return packer.compress(text.encode("utf-8")) + packer.flush()


def unpack_with(body: bytes, members: Sequence[str]) -> str:
    """The text :func:`pack_with` packed, given the same members in the same order."""
    return inflate(body, _dictionary(members)).decode("utf-8")
