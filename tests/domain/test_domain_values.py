"""Value types and event payloads: lossless JSON round trip, builders, presets, enums."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from forge_ledger.domain import events as ev
from forge_ledger.domain.values import (
    ModelProvider,
    OutputType,
    Participant,
    ParticipantRole,
    Reference,
    ReferenceType,
    SessionStatus,
    Stance,
    TokenCount,
    Topic,
)
from support.strategies import PAYLOAD_STRATEGIES, VALUE_STRATEGIES, any_payload

any_value = st.sampled_from(sorted(VALUE_STRATEGIES, key=lambda c: c.__name__)).flatmap(
    lambda cls: VALUE_STRATEGIES[cls],
)


def _round_trip(obj: Any) -> None:
    cls = type(obj)
    dumped = obj.model_dump(mode="json")
    assert cls.model_validate(dumped) == obj
    through_text = json.loads(json.dumps(dumped))
    again = cls.model_validate(through_text)
    assert again == obj
    assert again.model_dump(mode="json") == dumped


@given(any_value)
@settings(max_examples=300)
def test_every_value_type_round_trips_through_json(value: Any) -> None:
    _round_trip(value)


@given(any_payload)
@settings(max_examples=400)
@pytest.mark.slow
def test_every_payload_round_trips_through_json(payload: ev.Payload) -> None:
    _round_trip(payload)


def test_strategies_cover_the_whole_event_catalogue() -> None:
    assert set(PAYLOAD_STRATEGIES) == set(ev.EVENT_TYPES.values())


def test_payload_type_names_are_unique_and_resolvable() -> None:
    for name, cls in ev.EVENT_TYPES.items():
        assert name == cls.TYPE
        assert ev.payload_class(name) is cls


def test_unknown_payload_type_is_a_store_error() -> None:
    from forge_ledger.errors import StoreError

    with pytest.raises(StoreError, match="unknown event type 'Nope'"):
        ev.payload_class("Nope")


def test_payloads_refuse_unknown_fields() -> None:
    with pytest.raises(ValidationError):
        ev.SessionResumed.model_validate({"reason": "x", "extra": 1})


# --------------------------------------------------------------------------- topic


def test_topic_builders_return_new_topics() -> None:
    base = Topic(title="Cache design")
    ref = Reference(name="rfc", content="https://example.org/rfc", ref_type=ReferenceType.URL)
    built = (
        base.with_constraint("no new services")
        .with_constraint("p99 < 5 ms")
        .with_reference(ref)
        .with_output_type(OutputType.DESIGN)
    )
    assert built.constraints == ("no new services", "p99 < 5 ms")
    assert built.references == (ref,)
    assert built.output_type is OutputType.DESIGN
    # the original is untouched (values are frozen)
    assert base.constraints == ()
    assert base.references == ()
    assert base.output_type is OutputType.SPECIFICATION
    with pytest.raises(ValidationError):
        base.title = "changed"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("title", "slug"),
    [
        ("Cache design", "cache-design"),
        ("  Été: ça va?  ", "ete-ca-va"),
        ("../../etc/passwd", "etc-passwd"),
        ("!!!", "session"),
    ],
)
def test_topic_slug_is_safe_kebab_case(title: str, slug: str) -> None:
    assert Topic(title=title).slug == slug


@given(st.text(min_size=1, max_size=200))
def test_topic_slug_never_contains_path_characters(title: str) -> None:
    slug = Topic(title=title).slug
    assert slug
    assert all(c in "abcdefghijklmnopqrstuvwxyz0123456789-" for c in slug)


def test_topic_title_is_required() -> None:
    with pytest.raises(ValidationError):
        Topic(title="")


# --------------------------------------------------------------------------- participants


@pytest.mark.parametrize(
    ("model", "provider"),
    [
        ("ollama/llama3", ModelProvider.LOCAL),
        ("claude-3-haiku", ModelProvider.ANTHROPIC),
        ("openai/scripted-a", ModelProvider.OPENAI),
        ("o3-mini", ModelProvider.OPENAI),
        ("mistral/mistral-large", ModelProvider.CUSTOM),
    ],
)
def test_provider_is_guessed_from_the_model_name(model: str, provider: ModelProvider) -> None:
    assert Participant(name="x", model=model).provider is provider


def test_explicit_provider_is_kept() -> None:
    p = Participant(name="x", model="gpt-4o", provider=ModelProvider.CUSTOM)
    assert p.provider is ModelProvider.CUSTOM


@pytest.mark.parametrize("bad", ["", " lead", "a/b", "x" * 65, "semi;colon"])
def test_participant_name_is_validated(bad: str) -> None:
    with pytest.raises(ValidationError, match="participant name"):
        Participant(name=bad, model="gpt-4o")


def test_role_modifiers_exist_for_every_role() -> None:
    assert ParticipantRole.GENERALIST.system_prompt_modifier == ""
    for role in ParticipantRole:
        if role is not ParticipantRole.GENERALIST:
            assert role.system_prompt_modifier.startswith("You are")


# --------------------------------------------------------------------------- token counts


@given(
    st.integers(0, 2**40), st.integers(0, 2**40), st.integers(0, 2**40), st.integers(0, 2**40),
)
def test_token_count_add(a_in: int, a_out: int, b_in: int, b_out: int) -> None:
    a, b = TokenCount(input=a_in, output=a_out), TokenCount(input=b_in, output=b_out)
    s = a + b
    assert (s.input, s.output) == (a_in + b_in, a_out + b_out)
    assert s.total == a.total + b.total
    assert s == b + a
    assert a + TokenCount() == a


def test_token_count_refuses_negative() -> None:
    with pytest.raises(ValidationError):
        TokenCount(input=-1)


# --------------------------------------------------------------------------- statuses


def test_session_status_terminal_set() -> None:
    terminal = {s for s in SessionStatus if s.terminal}
    assert terminal == {
        SessionStatus.CONVERGED,
        SessionStatus.COMPLETE,
        SessionStatus.ABORTED,
        SessionStatus.TIMED_OUT,
    }
    for s in SessionStatus:
        assert s.can_continue is (s not in terminal)


def test_stance_order_and_direction() -> None:
    ordered = sorted(Stance, key=lambda s: -s.rank)
    assert ordered == [
        Stance.STRONGLY_AGREE,
        Stance.AGREE,
        Stance.PARTIAL,
        Stance.DISAGREE,
        Stance.STRONGLY_DISAGREE,
    ]
    assert [s.agrees for s in ordered] == [True, True, False, False, False]
    assert [s.disagrees for s in ordered] == [False, False, False, True, True]
