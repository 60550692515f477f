"""The shortcuts on the paths every append and every rebuild takes give exactly what the plain
rules give: the event encoder, the text references, the kept list of active rounds, each
participant's latest answer, and a round's evaluation."""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.persistence import (
    DatetimeAsISO,
    JSONTranscoder,
    Mapper,
    Transcoding,
    UUIDAsHex,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from forge_ledger.domain import RoundKind
from forge_ledger.domain import events as ev
from forge_ledger.domain.texts import text_address
from forge_ledger.domain.values import ConvergenceVote, Critique, Stance
from forge_ledger.engine.outcomes import after_round
from forge_ledger.engine.votes import counted_votes
from forge_ledger.ledger import Ledger
from forge_ledger.ledger.compression import unpack
from forge_ledger.ledger.state_codec import TopLevelTranscoder
from forge_ledger.ledger.text_mapper import TextMapper
from forge_ledger.ledger.texts import (
    MIN_LENGTH,
    OBJECT_TEXTS,
    TEXT_KEYS,
    externalise,
)
from forge_ledger.testing import SessionBuilder

# --------------------------------------------------------------------------- event encoder

_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200)
"""Any text a payload can hold (a lone surrogate cannot be hashed, so never reaches a store)."""

def _json_of(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63)
    | st.floats(allow_nan=False, allow_infinity=False) | _TEXT,
    _json_of,
    max_leaves=30,
)


def _transcoders() -> tuple[JSONTranscoder, TopLevelTranscoder]:
    inner = JSONTranscoder()
    inner.register(DatetimeAsISO())
    inner.register(UUIDAsHex())
    return inner, TopLevelTranscoder(inner)


@settings(max_examples=200, deadline=None)
@given(data=_JSON, at=st.datetimes(timezones=st.just(UTC)), prev=_TEXT, digest=_TEXT)
def test_an_event_state_reads_back_as_the_standard_encoder_writes_it(
    data: Any, at: datetime, prev: str, digest: str
) -> None:
    inner, fast = _transcoders()
    state = {"timestamp": at, "data": data, "prev_hash": prev, "hash": digest}
    written = fast.encode_event_state(state)
    assert fast.decode(written) == inner.decode(inner.encode(state)) == state
    assert json.loads(written) == json.loads(inner.encode(state))


def test_the_encoder_writes_the_standard_layout() -> None:
    """Same keys in the same order and the same separators: the preset compression
    dictionary, made of states the standard encoder wrote, still matches them."""
    inner, fast = _transcoders()
    state = {
        "timestamp": datetime(2026, 1, 1, tzinfo=UTC),
        "data": {"round": 3, "answer": "café — “quoted”", "cost_usd": 0.0021, "ok": True},
        "prev_hash": "ab" * 32,
        "hash": "cd" * 32,
    }
    assert fast.encode_event_state(state) == inner.encode(state)


def test_a_typed_value_made_of_others_goes_through_the_full_encoder() -> None:
    class Span:
        def __init__(self, start: datetime) -> None:
            self.start = start

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Span) and other.start == self.start

    class SpanAsDict(Transcoding):
        type = Span
        name = "span"

        def encode(self, obj: Span) -> dict[str, datetime]:
            return {"start": obj.start}

        def decode(self, data: dict[str, datetime]) -> Span:
            return Span(data["start"])

    inner, fast = _transcoders()
    inner.register(SpanAsDict())
    state = {"span": Span(datetime(2026, 1, 1, tzinfo=UTC)), "data": {"n": 1}}
    assert fast.encode_event_state(state) == inner.encode(state)
    assert inner.decode(fast.encode_event_state(state)) == state


# --------------------------------------------------------------------------- text references


def _externalised(data: Any, texts: dict[str, str], *, top: bool = False) -> Any:
    """The rule, plainly: a long string under a text key becomes its reference, and so does,
    at the top of a payload (``top``), a model's object under its object key whose text is
    long and reads back as the object."""
    if isinstance(data, dict):
        out = {}
        for key, value in data.items():
            model = OBJECT_TEXTS.get(key) if top and isinstance(value, dict) else None
            text = None
            with contextlib.suppress(ValidationError):
                text = model.model_validate(value).model_dump_json() if model else None
            if key in TEXT_KEYS and isinstance(value, str) and len(value) >= MIN_LENGTH:
                texts[text_address(value)] = value
                out[key] = {"sha256": text_address(value)}
            elif text is not None and json.loads(text) == value and len(text) >= MIN_LENGTH:
                texts[text_address(text)] = text
                out[key] = {"sha256": text_address(text)}
            else:
                out[key] = _externalised(value, texts)
        return out
    if isinstance(data, list | tuple):
        return [_externalised(v, texts) for v in data]
    return data


_KEYS = st.sampled_from(sorted(TEXT_KEYS | set(OBJECT_TEXTS))) | _TEXT
_LONG = st.text(min_size=MIN_LENGTH - 2, max_size=MIN_LENGTH + 40)
def _payload_of(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=5)


_CRITIQUE = st.builds(
    Critique, weaknesses=st.lists(_TEXT | _LONG, max_size=2).map(tuple)
).map(lambda c: c.model_dump(mode="json"))
_PAYLOAD = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _TEXT | _LONG
    | _CRITIQUE,
    _payload_of,
    max_leaves=40,
)


@settings(max_examples=300, deadline=None)
@given(_PAYLOAD)
@pytest.mark.slow
def test_texts_are_referred_to_as_the_rule_says(data: Any) -> None:
    for top in (False, True):  # any data, and an event's payload
        got: dict[str, str] = {}
        want: dict[str, str] = {}
        assert externalise(data, got, objects=top) == _externalised(data, want, top=top)
        assert got == want


# --------------------------------------------------------------------------- session state


def _vote_round(b: SessionBuilder, answers: dict[str, bool]) -> int:
    b.round(RoundKind.CONVERGENCE, answers={n: f"{n} votes" for n in answers}, votes=answers,
            close=True)
    return b.round_number


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(["round", "round", "iteration", "back"]), max_size=14))
def test_the_kept_active_rounds_are_the_rounds_no_rewind_undid(steps: list[str]) -> None:
    b = SessionBuilder().start("t", participants=["a", "b"])
    iteration = 1
    for step in steps:
        if step == "back" and iteration > 1:
            b.aggregate.rewind(1, at=b.clock.now())
            b.aggregate.resume(at=b.clock.now())
            iteration -= 1
        elif step == "iteration":
            iteration += 1
        b.round(RoundKind.DRAFT, iteration=iteration, answers={"a": "x"}, close=True)
        state = b.state
        assert state.active_rounds == [r for r in state.rounds if not r.superseded]
    assert b.state.active_rounds == [r for r in b.state.rounds if not r.superseded]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=12))
def test_each_latest_answer_is_the_one_contribution_of_finds(order: list[str]) -> None:
    b = SessionBuilder().start("t", participants=["a", "b", "c"])
    b.round(RoundKind.DRAFT)
    for i, name in enumerate(order):
        again = order[:i].count(name)
        b.answer(name, f"{name} answer {i}", attempt=1 + again,
                 purpose="repair" if again else "answer")
    r = b.state.rounds[-1]
    latest = r.latest_answers()
    assert list(latest) == list(dict.fromkeys(order))  # first answered, first listed
    for name in "abc":
        assert latest.get(name) is r.contribution_of(name)


def test_counted_votes_follow_the_latest_answer_and_the_expected_order() -> None:
    b = SessionBuilder().start("t", participants=["a", "b", "c"])
    b.round(RoundKind.CONVERGENCE)
    b.answer("c", "c votes").vote("c", agrees=True)
    b.answer("a", "a votes").vote("a", agrees=False)
    b.answer("a", "a answers again", attempt=2, purpose="repair")  # carries no vote
    b.answer("b", "b votes").vote("b", ConvergenceVote(agrees=True, stance=Stance.AGREE))
    assert list(counted_votes(b.state.rounds[-1])) == ["b", "c"]


def test_a_rounds_evaluation_is_found_by_its_number() -> None:
    b = SessionBuilder().start("t", participants=["a", "b"])
    first = _vote_round(b, {"a": True, "b": False})
    second = _vote_round(b, {"a": True, "b": True})
    (evaluation,) = [p for p in after_round(b.state, first)
                     if isinstance(p, ev.ConvergenceEvaluated)]
    b.aggregate.evaluate_convergence(evaluation, at=b.clock.now())
    state = b.state
    assert state.evaluation(first) is state.convergence[0]
    assert state.evaluation(second) is None
    assert state.evaluation(99) is None


def test_the_mapper_stores_what_the_standard_mapper_would(tmp_path: Path) -> None:
    """Every event of a session, through our mapper and through eventsourcing's own (the
    texts by reference in both): the same row, upcasting version included."""
    with Ledger(str(tmp_path / "s.sqlite")) as ledger:
        b = SessionBuilder(store=ledger).start("t", participants=["a", "b"])
        long = "An answer long enough to be stored by reference. " * 3
        b.round(RoundKind.CONVERGENCE, answers={"a": long, "b": long + "!"},
                votes={"a": True, "b": False}, close=True)
        events = list(b.aggregate.collect_events())
        mapper = ledger.app.mapper
        assert isinstance(mapper, TextMapper)
        versions = set()
        for event in events:
            ours = mapper.to_stored_event(event)
            texts: dict[str, str] = {}
            proxy = object.__new__(type(event))
            stored = {k: v for k, v in vars(event).items() if k != "quotes"}  # never stored
            object.__setattr__(proxy, "__dict__", {**stored,
                                                   "data": externalise(event.data, texts)})
            theirs = Mapper.to_stored_event(mapper, proxy)
            assert (ours.originator_id, ours.originator_version, ours.topic) == (
                theirs.originator_id, theirs.originator_version, theirs.topic)
            assert json.loads(unpack(ours.state)) == json.loads(unpack(theirs.state))
            versions.add(json.loads(unpack(ours.state)).get("class_version", 1))
        assert versions > {1}  # the upcasting version is written where there is one
