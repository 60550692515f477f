"""Texts by address: the one rule for naming a text, and the one way the state reads one.

A session's answers are most of its bytes, and most of what loads a state (a snapshot, a
``resume``, a time travel) never reads them. So the session state holds each answer's
address (:func:`text_address`) and reads the text through a :class:`TextSource` only when a
consumer asks for it. The store keeps texts under the same address (see
:mod:`forge_ledger.ledger.texts`), so an address means the same text everywhere. Nothing here
does I/O; the ledger supplies a source that reads its stored texts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Protocol

from ..errors import StoreError

__all__ = ["TextPool", "TextSource", "missing_text", "text_address"]


def text_address(text: str) -> str:
    """The SHA-256 (hex) of the text's UTF-8 bytes: its address in the state and the store."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class TextSource(Protocol):
    """Where the texts at some addresses can be read."""

    def text(self, address: str) -> str:
        """The text at ``address``; :class:`~forge_ledger.errors.StoreError` when missing."""
        ...


def missing_text(address: str) -> StoreError:
    """The error every source raises for an address it cannot resolve."""
    return StoreError(
        f"text {address[:12]} is referenced by the session state but cannot be found",
        hint="run 'forge-ledger verify' on the store; restore it from a backup if it fails",
    )


class TextPool:
    """The texts a session state has seen (address → text), with an optional ``fallback``.

    A state folded from events holds every answer it folded; a state restored from a
    snapshot holds none and reads them from its fallback (the store's texts). Texts never
    change under their address, so a pool only grows, and copies of a state may share one
    pool: ``copy``/``deepcopy`` return the pool itself (a fallback reads a database, which
    must not be copied).
    """

    __slots__ = ("_read", "_texts", "fallback")

    def __init__(self, fallback: TextSource | None = None) -> None:
        self._texts: dict[str, str] = {}
        self._read: dict[str, str] = {}
        """Texts read from the fallback, kept apart: the store already has them."""
        self.fallback = fallback

    def add(self, text: str) -> str:
        address = text_address(text)
        self._texts.setdefault(address, text)
        return address

    def text(self, address: str) -> str:
        found = self._texts.get(address)
        if found is None:
            found = self._read.get(address)
        if found is not None:
            return found
        if self.fallback is None:
            raise missing_text(address)
        found = self.fallback.text(address)
        self._read[address] = found
        return found

    def held(self, addresses: Iterable[str]) -> dict[str, str]:
        """The texts among ``addresses`` this pool holds itself (not read from its fallback):
        the ones a snapshot must write to the store, as the store may not have them."""
        return {a: self._texts[a] for a in addresses if a in self._texts}

    def __contains__(self, address: object) -> bool:
        return address in self._texts or address in self._read

    def __copy__(self) -> TextPool:
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> TextPool:
        return self
