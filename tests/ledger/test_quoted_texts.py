"""Prompts (and parsed reasoning) stored against the answers they quote, on SQLite.

A prompt that quotes earlier answers is packed with those answers as its zlib dictionary and
lists their addresses; everything read back is the exact text, a fresh process reads it too, and
losing or altering what it depends on is reported, never read as a different text.
"""

from __future__ import annotations

import json
import random
import uuid
import zlib
from datetime import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forge_ledger.domain import events as ev
from forge_ledger.domain.aggregate import Deliberation
from forge_ledger.domain.values import (
    ChatMessage,
    RoundKind,
    SessionStatus,
)
from forge_ledger.ledger import Ledger, texts, verify_session
from forge_ledger.ledger.migrate import QUOTES_TABLE
from forge_ledger.ledger.quotes import RECENT, RecentAnswers, pack_with, unpack_with
from forge_ledger.ledger.text_bodies import quoting_body
from forge_ledger.testing import SessionBuilder
from support.store import as_format_1_with_quote_lists, raw_connection, text_bodies

SID = uuid.UUID("00000000-0000-4000-8000-0000000000ab")
_WORDS = [
    "ledger", "event", "replay", "vote", "draft", "critique", "synthesis", "retention", "schema",
    "audit",
]


def _prose(seed: str, words: int = 300) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(_WORDS) + str(rng.randint(0, 999)) for _ in range(words))


def _asked(prompt: str) -> list[ChatMessage]:
    return [
        ChatMessage(role="system", content="You deliberate on a specification."),
        ChatMessage(role="user", content=prompt),
    ]


def _build() -> tuple[Deliberation, dict[str, str]]:
    """Drafts, critique prompts quoting the other's draft, and a vote whose reasoning is
    quoted from its answer."""
    b = SessionBuilder(answer_defaults={
        "model": "openai/scripted", "params": ev.CallParams(temperature=0.2, max_tokens=256),
    })
    b.start("Ledger test topic", participants=["p0", "p1"], session_id=SID)
    first, second = b.names
    drafts = {who: _prose(f"draft/{who}") for who in (first, second)}
    b.round(RoundKind.DRAFT, iteration=1, participants=[first, second])
    for who in (first, second):
        b.answer(who, drafts[who], messages=_asked(f"Write a draft, {who}. " * 4))
    b.close_round()
    prompts = {}
    b.round(RoundKind.CRITIQUE, iteration=1, participants=[first, second],
            targets={first: second, second: first})
    for who, other in ((first, second), (second, first)):
        prompts[who] = f"## Draft by {other} to critique\n\n{drafts[other]}\n\nReview it."
        b.answer(
            who,
            _prose(f"critique/{who}", 60),
            messages=_asked(prompts[who]),
            quotes=[texts.text_address(drafts[other])],
        )
    b.close_round()
    b.round(RoundKind.CONVERGENCE, iteration=1, participants=[first, second])
    for who in (first, second):
        reasoning = _prose(f"vote/{who}", 80)
        answer = json.dumps({"agrees": True, "score": 90, "reasoning": reasoning})
        b.answer(who, answer, messages=_asked(f"Vote, {who}. " * 4))
        b.vote(who, agrees=True, score=90, reasoning=reasoning)
    b.close_round()
    agg = b.finish(SessionStatus.CONVERGED).aggregate
    return agg, drafts | {f"prompt/{k}": v for k, v in prompts.items()}


def _payloads(url: str) -> list[dict[str, object]]:
    with Ledger(url, create=False) as ledger:  # a fresh mapper: nothing remembered
        return [e.data for e in ledger.events(SID)]


def test_a_prompt_is_stored_against_the_answer_it_quotes(sqlite_url: str) -> None:
    agg, parts = _build()
    written = [dict(e.data) for e in agg.pending_events if hasattr(e, "data")]
    with Ledger(sqlite_url) as ledger:
        ledger.save(agg)
        assert verify_session(ledger, SID).ok
    assert _payloads(sqlite_url) == written

    bodies = text_bodies(sqlite_url)
    a, b = agg.state.participant_names
    prompt = texts.text_address(parts[f"prompt/{a}"])
    split = quoting_body(bodies[prompt])
    assert split is not None
    assert split[0] == [texts.text_address(parts[b])]
    alone = len(zlib.compress(parts[f"prompt/{a}"].encode()))
    assert len(bodies[prompt]) < alone / 5, (len(bodies[prompt]), alone)
    with raw_connection(sqlite_url) as con:  # the quote lists' table of earlier stores
        tables = {n for (n,) in con.execute("SELECT name FROM sqlite_master")}
    assert QUOTES_TABLE not in tables


def test_parsed_reasoning_is_a_reference_packed_against_its_answer(sqlite_url: str) -> None:
    agg, _ = _build()
    with Ledger(sqlite_url) as ledger:
        ledger.save(agg)
    votes = [e for e in _payloads(sqlite_url) if "vote" in e]
    reasoning = votes[0]["vote"]["reasoning"]  # type: ignore[index]
    with raw_connection(sqlite_url) as con:
        rows = [
            json.loads(unpack_state)
            for (unpack_state,) in con.execute(
                "SELECT unpack(state) FROM stored_events WHERE topic = 'forge_ledger:VoteRecorded'",
            )
        ]
    assert rows[0]["data"]["vote"]["reasoning"] == {"sha256": texts.text_address(reasoning)}
    # packed against the vote's answer, which quotes it
    assert quoting_body(text_bodies(sqlite_url)[texts.text_address(reasoning)]) is not None


def _set_body(url: str, address: str, body: bytes) -> None:
    with raw_connection(url) as con:
        con.execute(
            f"UPDATE {texts.TEXT_TABLE} SET body = ? WHERE address(sha256) = ?", (body, address)
        )


@pytest.mark.parametrize("damage", ["cut", "other answer", "unknown answer"])
def test_a_damaged_quote_list_is_reported(sqlite_url: str, damage: str) -> None:
    """The prompt cannot be unpacked without the right answers: it is reported, never read
    as another text."""
    agg, parts = _build()
    with Ledger(sqlite_url) as ledger:
        ledger.save(agg)
    a = agg.state.participant_names[0]
    prompt = texts.text_address(parts[f"prompt/{a}"])
    body = text_bodies(sqlite_url)[prompt]
    if damage == "cut":
        body = body[:20]
    else:
        other = texts.text_address(parts[a]) if damage == "other answer" else "ab" * 32
        body = body[:2] + bytes.fromhex(other) + body[34:]
    _set_body(sqlite_url, prompt, body)
    with Ledger(sqlite_url, create=False) as ledger:
        report = verify_session(ledger, SID)
    assert not report.ok
    assert "missing from the store, or unreadable" in report.problem


def test_texts_with_their_quote_lists_in_a_table_read_as_before(sqlite_url: str) -> None:
    """A store of format 1 that keeps its quote lists in a table of their own: the same
    payloads, the same verification, and a lost list is reported."""
    agg, parts = _build()
    written = [dict(e.data) for e in agg.pending_events if hasattr(e, "data")]
    with Ledger(sqlite_url) as ledger:
        ledger.save(agg)
    assert as_format_1_with_quote_lists(sqlite_url) >= 3  # two prompts, the votes' reasoning
    assert _payloads(sqlite_url) == written
    with Ledger(sqlite_url, create=False) as ledger:
        assert verify_session(ledger, SID).ok
    a = agg.state.participant_names[0]
    prompt = texts.text_address(parts[f"prompt/{a}"])
    with raw_connection(sqlite_url) as con:
        con.execute(f"DELETE FROM {QUOTES_TABLE} WHERE sha256 = ?", (prompt,))
    with Ledger(sqlite_url, create=False) as ledger:
        report = verify_session(ledger, SID)
    assert not report.ok
    assert "missing from the store, or unreadable" in report.problem


def test_an_altered_quoted_answer_is_reported(sqlite_url: str) -> None:
    agg, parts = _build()
    with Ledger(sqlite_url) as ledger:
        ledger.save(agg)
    _, b = agg.state.participant_names
    with raw_connection(sqlite_url) as con:
        con.execute(
            f"UPDATE {texts.TEXT_TABLE} SET body = ? WHERE address(sha256) = ?",
            (parts[b].replace("vote", "veto", 1), texts.text_address(parts[b])),
        )
    with Ledger(sqlite_url, create=False) as ledger:
        report = verify_session(ledger, SID)
    assert not report.ok
    assert report.position is not None
    assert report.position <= 7  # at the draft itself, before any prompt quoting it


def test_a_prompt_is_packed_only_against_the_answers_its_event_names(sqlite_url: str) -> None:
    """Quoting is told, not found: the same prompt, its quotes not given, is stored on its own
    (and still reads back whole)."""
    b = SessionBuilder()
    b.start("Ledger test topic", participants=["p0", "p1"], session_id=SID)
    first, second = b.names
    draft = _prose("draft")
    b.round(RoundKind.DRAFT, iteration=1, participants=[first])
    b.answer(first, draft)
    b.close_round()
    b.round(RoundKind.CRITIQUE, iteration=1, participants=[second], targets={second: first})
    prompt = f"## Draft to critique\n\n{draft}\n\nReview it."
    b.answer(second, _prose("critique", 60), messages=_asked(prompt))
    agg = b.aggregate
    with Ledger(sqlite_url) as ledger:
        ledger.save(agg)
        assert verify_session(ledger, SID).ok
    assert quoting_body(text_bodies(sqlite_url)[texts.text_address(prompt)]) is None


def test_recent_answers_keep_the_last_ones_remembered() -> None:
    answers = RecentAnswers()
    pool = [_prose(f"answer/{i}", words=10) for i in range(RECENT + 5)]
    for text in pool:
        answers.remember(text)
    answers.remember(pool[0])  # remembered again: recent again
    kept = [t for t in pool if answers.holds(texts.text_address(t))]
    assert kept == [pool[0], *pool[-(RECENT - 1) :]]
    assert answers.get(texts.text_address(pool[-1])) == pool[-1]
    assert answers.get(texts.text_address(pool[1])) is None


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=0, max_size=3000), st.lists(st.text(max_size=500), max_size=4))
def test_packing_against_members_round_trips(text: str, members: list[str]) -> None:
    assert unpack_with(pack_with(text, members), members) == text


def test_the_top_level_decoder_agrees_with_the_full_one() -> None:
    """Typed values are decoded at the top level; anything deeper goes to the full decoder."""
    from datetime import UTC

    from eventsourcing.persistence import DatetimeAsISO, JSONTranscoder

    from forge_ledger.ledger.state_codec import TopLevelTranscoder

    inner = JSONTranscoder()
    inner.register(DatetimeAsISO())
    fast = TopLevelTranscoder(inner)
    at = datetime(2026, 1, 1, tzinfo=UTC)
    docs = [
        {"timestamp": at, "data": {"text": 'a "_type_" in a text', "n": 1}},
        {"data": {"nested": {"when": at}}},  # deeper: the full decoder
        {"plain": [1, 2, {"x": None}]},
    ]
    for doc in docs:
        raw = inner.encode(doc)
        assert fast.decode(raw) == inner.decode(raw) == doc


def test_the_text_cache_never_forgets_what_it_is_answering() -> None:
    """A long session outgrows the mapper's text cache; eviction must not drop the texts the
    same lookup had just found in it (events then read as missing their texts)."""
    from forge_ledger.ledger.text_mapper import _CACHE_SIZE, TextMapper

    addresses = [f"{i:064x}" for i in range(_CACHE_SIZE + 1000)]
    stored = {a: f"text {i}" for i, a in enumerate(addresses)}
    mapper = TextMapper(transcoder=None)
    mapper.lookup = lambda wanted: {a: stored[a] for a in wanted}
    filled = 0
    while filled <= _CACHE_SIZE:  # the cache now holds more than its size
        chunk = addresses[filled : filled + 100]
        assert mapper.cached_lookup(chunk) == {a: stored[a] for a in chunk}
        filled += len(chunk)
    mixed = [addresses[filled - 1], addresses[filled]]  # one cached, one not
    assert mapper.cached_lookup(mixed) == {a: stored[a] for a in mixed}
