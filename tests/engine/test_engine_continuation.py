"""The engine's rules for cut-off answers and unknown costs (pure functions)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forge_ledger.domain.values import ChatMessage, Price, RoundKind, StopReason
from forge_ledger.engine import (
    CONTINUED_KINDS,
    MAX_CONTINUATIONS,
    continuation_allowance,
    continuation_messages,
    cost_fields,
    cost_text,
    needs_continuation,
    worst_case_cost,
)

PROMPT = (
    ChatMessage(role="system", content="You write specifications."),
    ChatMessage(role="user", content="Round 4 · synthesis · iteration 1\nMerge the drafts."),
)
PRICE = Price(input_cost_per_token=1e-5, output_cost_per_token=3e-5)


@pytest.mark.parametrize("kind", list(RoundKind))
def test_only_text_answers_stopped_at_their_limit_are_continued(kind: RoundKind) -> None:
    assert needs_continuation(kind, StopReason.MAX_TOKENS, 0) is (kind in CONTINUED_KINDS)
    assert not needs_continuation(kind, StopReason.END_TURN, 0)
    assert not needs_continuation(kind, StopReason.MAX_TOKENS, MAX_CONTINUATIONS)


def test_the_continuation_prompt_carries_the_answer_so_far() -> None:
    messages = continuation_messages(PROMPT, "The synthesis was cut o")
    assert messages[: len(PROMPT)] == PROMPT
    assert messages[-2] == ChatMessage(role="assistant", content="The synthesis was cut o")
    assert messages[-1].role == "user"
    assert messages[-1].content.startswith("Round 4 · synthesis · iteration 1 · continuation\n")


@given(spare=st.floats(min_value=0, max_value=1.0), max_tokens=st.integers(1, 8192))
def test_continuations_allowed_never_overrun_what_the_budget_leaves(
    spare: float, max_tokens: int
) -> None:
    allowed, worst = continuation_allowance(RoundKind.SYNTHESIS, PROMPT, max_tokens, PRICE, spare)
    assert 0 <= allowed <= MAX_CONTINUATIONS
    assert worst <= spare + 1e-9
    one = worst_case_cost(PROMPT, max_tokens, PRICE)
    if allowed < MAX_CONTINUATIONS:  # one more would not fit
        assert worst + one + (allowed + 1) * max_tokens * PRICE.input_cost_per_token > spare


def test_unpriced_continuations_cost_nothing_and_votes_get_none() -> None:
    assert continuation_allowance(RoundKind.DRAFT, PROMPT, 100, None, 0.0) == (
        MAX_CONTINUATIONS, 0.0,
    )
    assert continuation_allowance(RoundKind.CONVERGENCE, PROMPT, 100, PRICE, 10.0) == (0, 0.0)


def test_an_unknown_cost_is_never_zero() -> None:
    assert cost_text(0.0, 0) == "$0.0000"
    assert cost_text(0.0, 3) == "unpriced"
    assert cost_text(0.25, 1) == "$0.2500 + unpriced calls"
    assert cost_fields(0.0, 3) == {
        "cost_usd": None, "priced_cost_usd": 0.0, "unpriced_calls": 3, "cost_complete": False,
    }
    assert cost_fields(0.5, 0)["cost_usd"] == 0.5
