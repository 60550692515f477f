"""The mapper: an event's texts swapped for references on the way to the store, and back.

See :mod:`forge_ledger.ledger.texts` for the rules it applies; the recorders write the texts it
sets aside with the event (:class:`StoredEventWithTexts`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from eventsourcing.persistence import Mapper, StoredEvent
from eventsourcing.utils import get_topic

from ..domain.aggregate import known_topic
from ..domain.topics import TOPIC_PREFIX
from .compression import unpack
from .quotes import MIN_PACKED, RecentAnswers, members_of
from .state_codec import StateCompressor, TopLevelTranscoder
from .texts import PROMPT_REF, REF_KEY, REF_PATTERN, Lookup, externalise, with_texts

__all__ = ["StoredEventWithTexts", "TextMapper", "dictionaries_of", "quote_lists", "texts_of"]

_WINDOW = 256
"""Events whose texts are read together (a few hundred texts: well inside the text cache)."""
_CACHE_SIZE = 4096


@dataclass(frozen=True)
class StoredEventWithTexts(StoredEvent):
    """A stored event and the texts its state refers to, for the recorder to write with it."""

    texts: dict[str, str] = field(default_factory=dict)
    dictionaries: dict[str, list[str]] = field(default_factory=dict)
    """Prompt address → the addresses of the answers it quotes (see :mod:`.quotes`)."""

    @classmethod
    def of(
        cls,
        stored: StoredEvent,
        texts: dict[str, str],
        dictionaries: dict[str, list[str]] | None = None,
    ) -> StoredEventWithTexts:
        return cls(
            originator_id=stored.originator_id,
            originator_version=stored.originator_version,
            topic=stored.topic,
            state=stored.state,
            texts=texts,
            dictionaries=dictionaries or {},
        )


class TextMapper(Mapper[Any]):
    """Swaps texts for references on the way to the store and back on the way out.

    Only ledger events (``forge_ledger:`` topics with a ``data`` payload) are touched;
    a snapshot's state holds answers by reference already (the ledger's mapper adds the texts
    it refers to, see ``ledger.snapshot_states``). ``lookup`` is set by the ledger once the
    recorder exists.
    """

    lookup: Lookup | None = None

    def __init__(self, transcoder: Any, *, compress: bool = True) -> None:
        # Reading always goes through the compressor, which passes plain JSON through, so a
        # store holds both forms; ``compress`` only decides how new states are written.
        super().__init__(
            transcoder=TopLevelTranscoder(transcoder),
            compressor=StateCompressor(write=compress),
        )
        self.answers = RecentAnswers()

    def to_stored_event(self, domain_event: Any) -> StoredEvent:
        state = dict(vars(domain_event))
        quotes: tuple[str, ...] = state.pop("quotes", ())
        data = state.get("data")
        if not isinstance(data, dict) or not type(domain_event).__module__.startswith(
            "forge_ledger"
        ):
            return super().to_stored_event(domain_event)
        texts: dict[str, str] = {}
        stored_data = externalise(data, texts, objects=True)
        if not texts:
            return self._stored(domain_event, state)
        dictionaries = self._dictionaries(data, texts, quotes)
        self._remember_answer(data)
        return StoredEventWithTexts.of(
            self._stored(domain_event, {**state, "data": stored_data}), texts, dictionaries
        )

    def _stored(self, domain_event: Any, state: dict[str, Any]) -> StoredEvent:
        """eventsourcing's ``to_stored_event`` for one of our events, with ``state`` (its
        payload's texts by reference) in place of its attributes. Its payload was dumped in
        pydantic's JSON mode (``Deliberation._record``), so it is JSON already but for the
        timestamp, and is written without the JSON encoder's hook for typed values."""
        if self.cipher is not None:
            proxy = object.__new__(type(domain_event))
            object.__setattr__(proxy, "__dict__", state)
            return super().to_stored_event(proxy)
        rest = dict(state)
        originator_id = rest.pop("originator_id")
        originator_version = rest.pop("originator_version")
        class_version = getattr(type(domain_event), "class_version", 1)
        if class_version > 1:  # as eventsourcing writes it, for its upcasting
            rest["class_version"] = class_version
        body = cast(TopLevelTranscoder, self.transcoder).encode_event_state(rest)
        return StoredEvent(
            originator_id=originator_id,
            originator_version=originator_version,
            topic=get_topic(type(domain_event)),
            state=self.compressor.compress(body) if self.compressor else body,
        )

    def _dictionaries(
        self, data: dict[str, Any], texts: dict[str, str], quotes: Sequence[str]
    ) -> dict[str, list[str]]:
        """The answers each text of the event is packed against: those its event says it
        quotes, read from the recent answers or else the store."""
        if not quotes:
            return {}
        response = data.get("response")
        answer = response.get("content") if isinstance(response, dict) else None
        known = {a: t for a in quotes if (t := self.answers.get(a)) is not None}
        missing = [a for a in quotes if a not in known]
        if missing and self.lookup is not None:
            known.update(self.cached_lookup(missing))
        return quote_lists(self.answers, answer, texts, {a: known[a] for a in quotes if a in known})

    def _remember_answer(self, data: dict[str, Any]) -> None:
        response = data.get("response")
        content = response.get("content") if isinstance(response, dict) else None
        if isinstance(content, str):
            self.answers.remember(content)

    def to_domain_event(self, stored_event: StoredEvent) -> Any:
        return self._decoded(stored_event, unpack(stored_event.state))

    def to_domain_events(
        self, stored_events: Iterable[StoredEvent], *, prompts: bool = True
    ) -> Iterator[Any]:
        """Many events, their texts read a window at a time: one query for a window's texts
        instead of one (or two, for a prompt and the answers it quotes) per event.

        Without ``prompts`` the prompt messages' texts are not read: each comes back empty.
        Building a session's state never reads them (the state refers to a prompt by its
        event), and they are most of a session's text: reading them (each packed against the
        answers it quotes) and parsing them was more than half the cost of a fold. Only the
        ledger's aggregate loads ask for this; every other read gives the events whole.
        """
        window: list[tuple[StoredEvent, bytes]] = []
        for stored_event in stored_events:
            plain = unpack(stored_event.state)
            if not prompts and REF_KEY in plain:
                plain = PROMPT_REF.sub(rb'\1""', plain)
            window.append((stored_event, plain))
            if len(window) == _WINDOW:
                yield from self._decoded_window(window)
                window = []
        yield from self._decoded_window(window)

    def _decoded_window(self, window: list[tuple[StoredEvent, bytes]]) -> Iterator[Any]:
        if self.lookup is not None:
            wanted = {
                m.group(2).decode("ascii")
                for stored_event, plain in window
                if stored_event.topic.startswith(TOPIC_PREFIX) and REF_KEY in plain
                for m in REF_PATTERN.finditer(plain)
            }
            if wanted:
                self.cached_lookup(sorted(wanted))
        for stored_event, plain in window:
            yield self._decoded(stored_event, plain)

    def _decoded(self, stored_event: StoredEvent, plain: bytes) -> Any:
        if stored_event.topic.startswith(TOPIC_PREFIX):
            known_topic(stored_event.topic)
            if self.lookup is not None:
                plain = self._inline(plain)
        domain_event = super().to_domain_event(
            StoredEvent(
                originator_id=stored_event.originator_id,
                originator_version=stored_event.originator_version,
                topic=stored_event.topic,
                state=plain,
            )
        )
        data = domain_event.__dict__.get("data")
        if isinstance(data, dict):
            self._remember_answer(data)
        return domain_event

    def _inline(self, plain: bytes) -> bytes:
        return with_texts(plain, self.cached_lookup)

    def cached_lookup(self, addresses: Sequence[str]) -> dict[str, str]:
        """Texts never change under their address, so recently read ones are kept (a system
        prompt is referred to by every call of a session); ``verify`` reads the store itself."""
        cache: dict[str, str] = self.__dict__.setdefault("_cache", {})
        found = {a: cache[a] for a in addresses if a in cache}
        missing = [a for a in addresses if a not in found]
        if missing and self.lookup is not None:
            fetched = self.lookup(missing)
            found.update(fetched)
            # Evict after answering: clearing first dropped texts this very call had found in
            # the cache (a long session's events then read as missing their texts).
            if len(cache) + len(fetched) > _CACHE_SIZE:
                cache.clear()
            cache.update(fetched)
        return found


def quote_lists(
    answers: RecentAnswers, answer: Any, texts: dict[str, str], quoted: dict[str, str]
) -> dict[str, list[str]]:
    """For each long text of an event but its own ``answer`` (a prompt, the reasoning or
    critique parsed from an answer), the ``quoted`` answers (address → text) it is packed
    against; those are added to ``texts`` so they are certainly stored with it. A text that is
    itself a recent answer (a parsed critique may be its answer's very text) is stored on its
    own: packed, it would make every text packed against it a chain of reads."""
    out: dict[str, list[str]] = {}
    for address, text in list(texts.items()):
        if text == answer or len(text) < MIN_PACKED or answers.holds(address):
            continue
        members = [a for a in members_of(list(quoted), quoted) if a != address]
        if members:
            out[address] = members
            texts.update((a, quoted[a]) for a in members)
    return out


def texts_of(stored_events: Iterable[StoredEvent]) -> list[tuple[str, str]]:
    rows: dict[str, str] = {}
    for s in stored_events:
        rows.update(getattr(s, "texts", None) or {})
    return list(rows.items())


def dictionaries_of(stored_events: Iterable[StoredEvent]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for s in stored_events:
        out.update(getattr(s, "dictionaries", None) or {})
    return out
