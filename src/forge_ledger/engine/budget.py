"""Budget arithmetic: a worst-case price for a call before it is made, and the cost check.

The orchestrator reserves a call's worst case before sending it, so a session never overruns
``max_cost_usd`` by more than estimation error. Tokens are *estimated* without a tokenizer
(which would need model-specific files, sometimes a download, and would make the engine
depend on litellm): ``ceil(characters / 4)`` per text — the usual rule of thumb for English
with BPE tokenizers — plus ``MESSAGE_OVERHEAD_TOKENS`` per chat message (role and framing)
and ``REPLY_PRIMER_TOKENS`` once. The worst case assumes the answer uses all ``max_tokens``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..domain.state import SessionState
from ..domain.values import ChatMessage, Price, RoundKind

__all__ = [
    "CHARS_PER_TOKEN",
    "MESSAGE_OVERHEAD_TOKENS",
    "REPLY_PRIMER_TOKENS",
    "budget_allows",
    "cost_fields",
    "cost_text",
    "estimate_prompt_tokens",
    "estimate_tokens",
    "known_cost",
    "output_ceiling",
    "reserved_calls",
    "worst_case_cost",
]

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD_TOKENS = 4
REPLY_PRIMER_TOKENS = 3
_EPSILON = 1e-9
OUTPUT_MARGIN_RATIO = 0.02
OUTPUT_MARGIN_MIN_TOKENS = 16


def output_ceiling(max_tokens: int) -> int:
    """Output tokens a call may stream before it is ended as cut off: ``max_tokens`` plus a
    margin (2 %, at least 16 tokens) for the difference between how a provider counts tokens
    and how a stream is counted while it arrives, so an answer the provider itself kept
    within ``max_tokens`` is never cut."""
    limit = max(max_tokens, 0)
    return limit + max(OUTPUT_MARGIN_MIN_TOKENS, math.ceil(limit * OUTPUT_MARGIN_RATIO))


def estimate_tokens(text: str) -> int:
    """``ceil(len(text) / 4)``: 0 for the empty text."""
    return -(-len(text) // CHARS_PER_TOKEN)


def estimate_prompt_tokens(messages: Sequence[ChatMessage]) -> int:
    """Estimated input tokens of a chat prompt (texts + per-message overhead + primer)."""
    return REPLY_PRIMER_TOKENS + sum(
        estimate_tokens(m.content) + MESSAGE_OVERHEAD_TOKENS for m in messages
    )


def worst_case_cost(
    messages: Sequence[ChatMessage], max_tokens: int, price: Price | None
) -> float:
    """USD for the estimated prompt plus ``max_tokens`` of answer; 0.0 when the price is
    unknown (the orchestrator then relies on the recorded costs alone)."""
    if price is None:
        return 0.0
    return (
        estimate_prompt_tokens(messages) * price.input_cost_per_token
        + max(max_tokens, 0) * price.output_cost_per_token
    )


def budget_allows(state: SessionState, reserve_usd: float) -> bool:
    """True when what was spent plus ``reserve_usd`` stays within ``max_cost_usd``."""
    return state.cost_usd + max(reserve_usd, 0.0) <= state.config.max_cost_usd + _EPSILON


def reserved_calls(kind: RoundKind) -> int:
    """Calls reserved for one participant's turn in a round of ``kind``: its answer, and
    for a structured answer (critique, opinion, vote) one repair call."""
    from .parsing import output_schema  # its models load only when a budget is planned

    return 2 if output_schema(kind) is not None else 1


def cost_text(usd: float, unpriced_calls: int) -> str:
    """A cost as every output shows it. Calls made at no known price are ``unpriced``:
    never a ``$0.0000`` that reads as free, and a sum with them is only a part."""
    if not unpriced_calls:
        return f"${usd:.4f}"
    return "unpriced" if usd == 0 else f"${usd:.4f} + unpriced calls"


def known_cost(usd: float, unpriced_calls: int) -> float | None:
    """The total cost, or None when some call had no known price (the total is unknown)."""
    return None if unpriced_calls else usd


def cost_fields(usd: float, unpriced_calls: int) -> dict[str, float | int | bool | None]:
    """A cost as every JSON output gives it: ``cost_usd`` is null when some call had no
    known price (:func:`known_cost`); ``priced_cost_usd`` is the part that is known."""
    return {
        "cost_usd": known_cost(usd, unpriced_calls),
        "priced_cost_usd": usd,
        "unpriced_calls": unpriced_calls,
        "cost_complete": not unpriced_calls,
    }
