"""What a text writer knows its store holds already, so that a save does not ask again."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["KnownStoreContents", "RemembersStoreContents", "TransactionFindings", "findings_in"]


_KNOWN_MAX = 65_536
"""Addresses a writer remembers as stored (64 characters each); past that it starts over."""
_FINDINGS = "_forge_learned"
"""The keyword under which a save's :class:`TransactionFindings` travels down to its
transaction (the recorders pass their keywords through to the insert)."""


@dataclass
class TransactionFindings:
    """What one transaction found out about the store: true once it commits."""

    tables: bool = False
    texts: set[str] = field(default_factory=set)


def findings_in(kwargs: dict[str, Any]) -> TransactionFindings:
    """The :class:`TransactionFindings` of the save in progress (a throwaway one if it has
    none)."""
    found = kwargs.get(_FINDINGS)
    return found if isinstance(found, TransactionFindings) else TransactionFindings()


@dataclass
class KnownStoreContents:
    """What a writer knows its store holds already, so that a save does not ask again: the
    text table exists, and these texts are stored. Each save asked both (``CREATE TABLE IF
    NOT EXISTS`` and a ``SELECT``): about a tenth of an append's cost, for answers most of
    which were known (a system prompt is in every call of a session).

    Only a committed write counts. A transaction that rolled back (another writer appended
    first) stored nothing, not even a table it created. What a save finds out travels with
    that save (:class:`TransactionFindings`), never through shared state: a writer used from
    several threads must not take another save's texts for stored before that save commits.
    Texts are never deleted, so what a committed write stored stays true; texts another
    process stored are merely asked about.
    """

    tables_ready: bool = False
    """Whether the text table is there (on SQLite: the store is of the current format)."""
    stored: set[str] = field(default_factory=set)

    def inserting(
        self, insert: Callable[..., Sequence[int] | None], stored_events: Any, **kwargs: Any
    ) -> Sequence[int] | None:
        """``insert(stored_events, …)`` (one transaction), then what it found out, if it
        committed."""
        learned = TransactionFindings()
        ids = insert(stored_events, **{**kwargs, _FINDINGS: learned})
        self.learn(learned)
        return ids

    def unknown(self, texts: Iterable[tuple[str, str]]) -> dict[str, str]:
        """Of ``texts`` (address, text), those no committed write has told this writer are
        stored: the texts a save must write (or, on SQLite, ask the store about). Until the
        text table is known ready, nothing is known stored, so a save with texts always
        reaches the code that creates the table."""
        return {a: t for a, t in texts if a not in self.stored}

    def learn(self, learned: TransactionFindings) -> None:
        """Call once the transaction that found ``learned`` out has committed."""
        if learned.tables:
            self.tables_ready = True
        if len(self.stored) + len(learned.texts) > _KNOWN_MAX:
            self.stored.clear()
        self.stored |= learned.texts


class RemembersStoreContents:
    """A recorder that writes texts, with what its committed saves found out (its facts)."""

    _facts: KnownStoreContents | None = None

    @property
    def facts(self) -> KnownStoreContents:
        if self._facts is None:
            self._facts = KnownStoreContents()
        return self._facts
