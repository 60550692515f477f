"""``construct_valid`` builds what validation (and ``model_construct``) builds from values that
are valid already: the same fields in the same order, the same fields set, the same JSON."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from forge_ledger.domain.state import ContributionState, RoundState
from forge_ledger.domain.values import (
    ModelResponse,
    Price,
    ResponseAccounting,
    StopReason,
    TokenCount,
    construct_valid,
)


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
    "price": st.none() | st.builds(Price, input_cost_per_token=st.floats(0, 1),
                                   output_cost_per_token=st.floats(0, 1)),
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
        {k: v for k, v in response.__dict__.items()
         if k in response.model_fields_set and k != "content"}
    )
    _same(ResponseAccounting.of(response), reference)
    assert ResponseAccounting.of(response).with_content(content) == response


def test_a_contribution_is_what_validation_and_model_construct_give() -> None:
    values: dict[str, Any] = {
        "participant": "alice", "attempt": 2, "position": 7,
        "at": datetime(2026, 1, 1, tzinfo=UTC), "model": "openai/x", "prompt_hash": "h",
        "response": ResponseAccounting(model="openai/x", tokens=TokenCount(input=1)),
        "answer_sha256": "a" * 64, "purpose": "answer",
    }
    built = construct_valid(ContributionState, values)
    _same(built, ContributionState(**values))
    _same(built, ContributionState.model_construct(**values))
    built.parse_error = "no json"  # a state object stays assignable like any other
    assert built.abstained
    _same(construct_valid(TokenCount, {"input": 3}), TokenCount(input=3))


def test_missing_or_unknown_fields_and_copied_defaults_are_refused() -> None:
    with pytest.raises(TypeError, match="needs exactly its fields"):
        construct_valid(TokenCount, {"input": 1, "inputs": 2})
    with pytest.raises(TypeError, match="needs exactly its fields"):
        construct_valid(ResponseAccounting, {"cost_usd": 0.0})
    with pytest.raises(TypeError, match="must be copied"):  # lists made afresh per instance
        construct_valid(RoundState, {})
