"""The accounting of a response and a folded answer are what validating their values gives, and
what ``model_construct`` gives: the same fields in the same order, the same fields set, the
same JSON."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from forge_ledger.domain.state import ContributionState
from forge_ledger.domain.values import (
    ModelResponse,
    Price,
    ResponseAccounting,
    RoundKind,
    StopReason,
    TokenCount,
)
from forge_ledger.testing import SessionBuilder


def _same(built: BaseModel, reference: BaseModel) -> None:
    assert type(built) is type(reference)
    assert built == reference
    assert list(built.__dict__) == list(reference.__dict__)
    assert built.model_fields_set == reference.model_fields_set
    assert built.model_dump_json() == reference.model_dump_json()
    assert built.model_dump_json(exclude_unset=True) == reference.model_dump_json(
        exclude_unset=True
    )


_RESPONSE_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "tokens": st.builds(TokenCount, input=st.integers(0, 10**6), output=st.integers(0, 10**6)),
    "cost_usd": st.floats(0, 10, allow_nan=False),
    "price": st.none()
    | st.builds(Price, input_cost_per_token=st.floats(0, 1), output_cost_per_token=st.floats(0, 1)),
    "duration_ms": st.integers(0, 10**6),
    "ttft_ms": st.none() | st.integers(0, 10**6),
    "stop_reason": st.sampled_from(StopReason),
    "finish_reason": st.none() | st.text(max_size=5),
    "usage_reported": st.booleans(),
}


@given(st.fixed_dictionaries({}, optional=_RESPONSE_FIELDS), st.text(max_size=20))
def test_the_accounting_of_a_response_is_what_validating_its_fields_gives(
    given_fields: dict[str, Any], content: str
) -> None:
    response = ModelResponse(content=content, model="openai/x", **given_fields)
    reference = ResponseAccounting.model_validate(
        {
            k: v
            for k, v in response.__dict__.items()
            if k in response.model_fields_set and k != "content"
        }
    )
    _same(ResponseAccounting.of(response), reference)
    assert ResponseAccounting.of(response).with_content(content) == response


def test_a_folded_answer_is_what_validation_and_model_construct_give() -> None:
    b = SessionBuilder().start("Accounting", participants=["alice"])
    b.round(RoundKind.DRAFT, answers={"alice": "a draft"})
    built = b.state.rounds[-1].contributions[-1]
    values = {name: built.__dict__[name] for name in built.model_fields_set}
    _same(built, ContributionState(**values))
    _same(built, ContributionState.model_construct(**values))
    assert built.model_fields_set == {
        "participant",
        "attempt",
        "position",
        "at",
        "model",
        "prompt_hash",
        "response",
        "answer_sha256",
        "purpose",
    }
    built.parse_error = "no json"  # a state object stays assignable like any other
    assert built.abstained
