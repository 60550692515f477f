"""Which price a call is charged at: the user's, else litellm's table, else none.

The price used is recorded with each response so a replay reports the same cost even after
litellm's bundled table changes. This module is pure: the table lookup is passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..domain.values import ModelResponse, Participant, Price, TokenCount

__all__ = ["PriceLookup", "cost_of", "price_from_table_entry", "recost", "resolve_price"]

PriceLookup = Callable[[str], Price | None]
"""model name → price from a table, or None when the model is not in it."""


def price_from_table_entry(entry: Mapping[str, Any] | None) -> Price | None:
    """A :class:`Price` from a litellm model-info entry (None if it carries no token prices)."""
    if not entry:
        return None
    inp = entry.get("input_cost_per_token")
    out = entry.get("output_cost_per_token")
    if inp is None and out is None:
        return None
    return Price(
        input_cost_per_token=float(inp or 0.0),
        output_cost_per_token=float(out or 0.0),
        source="litellm",
    )


def resolve_price(participant: Participant, lookup: PriceLookup) -> Price | None:
    if participant.price is not None:
        return participant.price
    return lookup(participant.model)


def cost_of(price: Price | None, tokens: TokenCount) -> float:
    return 0.0 if price is None else price.cost(tokens)


def recost(response: ModelResponse, price: Price | None) -> ModelResponse:
    """The same response charged at another price (e.g. a user price added after the fact)."""
    return response.model_copy(update={"price": price, "cost_usd": cost_of(price, response.tokens)})
