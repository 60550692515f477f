"""Prompts stored against the answers they quote.

A prompt quotes earlier answers (the draft to critique, the critiques received, the previous
synthesis), so stored whole, the prompts of a session hold every answer several times over:
half of a session's stored text. On SQLite a prompt is instead compressed with zlib using the
answers it quotes as the preset dictionary, and its stored body begins with those answers'
addresses (``texts._body``): a quoted answer then costs a few bytes per 258 quoted
characters, and the prompt is, in effect, its own words plus references to the answers it
quotes. The answers themselves are stored once, under their own addresses, in the same
transaction (they are written with the prompt if they are not there yet).

Which answers a prompt quotes is found by looking, not by being told: each recent answer (the
last :data:`RECENT` this process wrote or read) is probed with a few short windows of its text,
and the answers whose windows occur in the prompt form the dictionary. A wrong guess costs only
compression; the text read back is always exactly the prompt (``verify`` hashes it).
"""

from __future__ import annotations

import zlib
from collections import OrderedDict
from collections.abc import Sequence

from ..domain.texts import text_address
from .compression import inflate

__all__ = ["MIN_PROMPT", "RECENT", "QuotedAnswers", "pack_with", "unpack_with"]

RECENT = 32
"""Answers remembered per process: the last rounds of a large panel, which is what a prompt
quotes (the draft to critique, the critiques received, the previous synthesis, the votes)."""
MIN_PROMPT = 512
"""Shorter prompts are compressed on their own."""
MIN_ANSWER = 256
"""Shorter answers are not worth a dictionary entry."""
_WINDOW = 48
_DICTIONARY_BYTES = 32 * 1024
"""zlib looks back at most 32 KiB, so a longer dictionary would only cost time."""
_LEVEL = 6
_QUEUED_MAX = 4 * RECENT
"""Answers queued before they are taken in (see :class:`QuotedAnswers`)."""


class QuotedAnswers:
    """The recent answers a prompt may quote (address → text), most recent last.

    Every event read or written passes its answer here, and most are never looked at again: a
    projection rebuild or an audit reads thousands and writes no prompt. So remembering only
    queues the text; an answer's address and probes are computed when a prompt is written,
    and only for the answers still among the last :data:`RECENT` then.
    """

    def __init__(self) -> None:
        self._answers: OrderedDict[str, tuple[str, tuple[str, ...]]] = OrderedDict()
        self._queued: list[str] = []

    def remember(self, text: str) -> None:
        if len(text) < MIN_ANSWER:
            return
        self._queued.append(text)
        if len(self._queued) > _QUEUED_MAX:
            self._settle()

    def _settle(self) -> None:
        """Take in the queued answers: the same answers, in the same order, as if each had been
        taken in when it was remembered (the newest occurrence of a text counts)."""
        queued, self._queued = self._queued, []
        newest: dict[str, None] = {}
        for text in reversed(queued):
            newest.setdefault(text)
            if len(newest) == RECENT:
                break
        for text in reversed(newest):
            address = text_address(text)
            self._answers[address] = (text, _probes(text))
            self._answers.move_to_end(address)
        while len(self._answers) > RECENT:
            self._answers.popitem(last=False)

    def holds(self, address: str) -> bool:
        """Whether the text at ``address`` is one of the recent answers (which other texts may
        be packed against, so it must never be packed itself)."""
        if self._queued:
            self._settle()
        return address in self._answers

    def quoted_in(self, prompt: str) -> list[tuple[str, str]]:
        """The remembered answers that ``prompt`` appears to quote, newest first, up to
        zlib's window."""
        if len(prompt) < MIN_PROMPT:
            return []
        if self._queued:
            self._settle()
        found: list[tuple[str, str]] = []
        size = 0
        for address, (text, probes) in reversed(self._answers.items()):
            if any(probe in prompt for probe in probes):
                found.append((address, text))
                size += len(text.encode("utf-8"))
                if size >= _DICTIONARY_BYTES:
                    break
        return found


def _probes(answer: str) -> tuple[str, ...]:
    """Windows from the first, middle and last part of ``answer``: a prompt holding one of
    them quotes it (a quote may be the whole answer or one field of a structured one)."""
    n = len(answer)
    starts = (n // 8, n // 2, max(0, (7 * n) // 8 - _WINDOW))
    return tuple(
        w for w in dict.fromkeys(answer[i : i + _WINDOW] for i in starts) if len(w) == _WINDOW
    )


def _dictionary(members: Sequence[str]) -> bytes:
    # The newest answer last: zlib reaches the end of its dictionary most cheaply.
    return "\n".join(reversed(members)).encode("utf-8")[-_DICTIONARY_BYTES:]


def pack_with(text: str, members: Sequence[str]) -> bytes:
    """``text`` compressed with ``members`` (the quoted answers' texts) as the dictionary."""
    packer = zlib.compressobj(_LEVEL, zdict=_dictionary(members))
    return packer.compress(text.encode("utf-8")) + packer.flush()


def unpack_with(body: bytes, members: Sequence[str]) -> str:
    """The text :func:`pack_with` packed, given the same members in the same order."""
    return inflate(body, _dictionary(members)).decode("utf-8")
