"""Answers cut off at their token limit: when to ask for the rest, and how.

A free-text answer (a draft, a synthesis) or a refinement that stops at ``max_tokens`` is
continued: the same prompt, the answer so far as the model's own turn, and a request to go
on from where it stopped. Each continuation is a recorded call (its own contribution, an
attempt of its own), so a replay serves it back like any answer; the session's answer is the
text so far followed by the continuation. At most :data:`MAX_CONTINUATIONS` per answer: an
answer still cut off then stays so, and every reader of the document says it is truncated.
A vote or a critique is not continued: a cut-off one is repaired if it can be, else counted
as an abstention whose reason says it was cut off.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..domain.values import ChatMessage, Price, RoundKind, StopReason
from .budget import worst_case_cost

__all__ = [
    "CONTINUED_KINDS",
    "MAX_CONTINUATIONS",
    "continuation_allowance",
    "continuation_messages",
    "cut_off_reason",
    "needs_continuation",
]

MAX_CONTINUATIONS = 2
"""Continuation calls one answer may get."""

CONTINUED_KINDS = frozenset({RoundKind.DRAFT, RoundKind.SYNTHESIS, RoundKind.REFINEMENT})
"""Rounds whose answers are texts worth completing (a vote or a critique is repaired)."""


def needs_continuation(kind: RoundKind, stop: StopReason, done: int) -> bool:
    """Whether an answer of a ``kind`` round that ended with ``stop``, continued ``done``
    times already, gets another continuation call."""
    return kind in CONTINUED_KINDS and stop is StopReason.MAX_TOKENS and done < MAX_CONTINUATIONS


def continuation_messages(
    original: Sequence[ChatMessage], so_far: str
) -> tuple[ChatMessage, ...]:
    """The continuation call's prompt: the original prompt, the answer so far as the model's
    turn, and a request for the rest alone. Its user prompt starts with the original first
    line plus `` · continuation`` (as a repair's does with `` · repair``)."""
    first = next((m.content.split("\n", 1)[0] for m in original if m.role == "user"), "")
    lines = [
        f"{first} · continuation" if first else "continuation",
        "Your answer above was cut off at its length limit. Continue it exactly where it "
        "stopped, mid-sentence if need be: write only the rest, repeat nothing, add no preamble.",
    ]
    return (
        *original,
        ChatMessage(role="assistant", content=so_far),
        ChatMessage(role="user", content="\n".join(lines)),
    )


def cut_off_reason(error: str, max_tokens: int) -> str:
    """The reason recorded for an abstention whose answer was cut off at its token limit."""
    return f"answer cut off at its token limit (max_tokens {max_tokens}): {error}"


def continuation_allowance(
    kind: RoundKind,
    messages: Sequence[ChatMessage],
    max_tokens: int,
    price: Price | None,
    spare_usd: float,
) -> tuple[int, float]:
    """How many continuation calls an answer may get within ``spare_usd`` (what the budget
    leaves once every participant's own calls of the round are reserved), and their worst
    case. The k-th continuation's prompt also carries the k answers of up to ``max_tokens``
    before it. The orchestrator gives each participant its allowance in participant order
    before any call, so the decision depends on recorded state alone (a replay makes it
    again) and continuations never overrun ``max_cost_usd``."""
    if kind not in CONTINUED_KINDS:
        return 0, 0.0
    first = worst_case_cost(messages, max_tokens, price)
    carried = 0.0 if price is None else max(max_tokens, 0) * price.input_cost_per_token
    allowed, total = 0, 0.0
    for k in range(1, MAX_CONTINUATIONS + 1):
        cost = first + k * carried
        if total + cost > spare_usd + 1e-9:
            break
        allowed, total = k, total + cost
    return allowed, total
