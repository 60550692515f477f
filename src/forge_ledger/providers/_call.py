"""What the orchestrator asks of a provider: the call, the protocol, and the retry schedule.

A provider makes exactly one attempt per :meth:`Provider.complete`; the orchestrator owns
the retry loop so that every attempt becomes an event. :func:`retry_delay` is deterministic
(no jitter) so tests and replays see the same schedule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from pydantic import BaseModel

from ..domain.values import ChatMessage, ModelResponse, Participant, Price, StopReason
from ._errors import ProviderCallError

__all__ = ["Provider", "ProviderCall", "retry_delay", "stop_reason_for"]


@dataclass(frozen=True)
class ProviderCall:
    """One model call: who answers, the exact prompt, and its parameters."""

    participant: Participant
    messages: tuple[ChatMessage, ...]
    max_tokens: int
    temperature: float
    response_format: type[BaseModel] | None = None
    """A schema (Critique, Opinion, ConvergenceVote) passed on where the model supports it."""
    timeout_secs: float = 120.0
    """Hard deadline for the whole call (``asyncio.timeout``), not per read."""
    round: int = 0
    """The round this call belongs to (0 outside a session): replay's lookup key."""
    attempt: int = 1
    """The attempt number within the round for this participant: replay's lookup key."""
    output_ceiling: int | None = None
    """Output tokens after which the stream is ended and the answer marked cut off at its
    limit (``max_tokens`` plus a small margin, chosen by the engine); None: no ceiling. A
    provider that ignores ``max_tokens`` cannot then stream without bound."""


@runtime_checkable
class Provider(Protocol):
    """Streams one completion and returns it with its accounting, or raises ProviderCallError."""

    async def complete(
        self, call: ProviderCall, on_delta: Callable[[str], None] | None = None
    ) -> ModelResponse: ...

    def price(self, participant: Participant) -> Price | None: ...

    async def aclose(self) -> None: ...


def retry_delay(
    attempt: int, error: ProviderCallError, *, base: float = 0.5, cap: float = 30.0
) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1-based) before the next one.

    A server's ``Retry-After`` wins over the exponential schedule (``base · 2^(attempt-1)``);
    ``cap`` bounds both so a misbehaving server cannot stall a session indefinitely.
    """
    if attempt < 1:
        raise ValueError(f"attempt must be >= 1, got {attempt}")
    if base < 0 or cap < 0:
        raise ValueError("base and cap must be >= 0")
    if error.retry_after_secs is not None:
        return min(max(error.retry_after_secs, 0.0), cap)
    return min(base * (2.0 ** (attempt - 1)), cap)


_FINISH_TO_STOP: dict[str, StopReason] = {
    "stop": StopReason.END_TURN,
    "end_turn": StopReason.END_TURN,
    "eos": StopReason.END_TURN,
    "length": StopReason.MAX_TOKENS,
    "max_tokens": StopReason.MAX_TOKENS,
    "content_filter": StopReason.CONTENT_FILTER,
    "safety": StopReason.CONTENT_FILTER,
    "tool_calls": StopReason.TOOL_USE,
    "function_call": StopReason.TOOL_USE,
    "tool_use": StopReason.TOOL_USE,
    "stop_sequence": StopReason.STOP_SEQUENCE,
}


def stop_reason_for(raw_finish_reason: str | None) -> StopReason:
    """Map a provider's raw finish reason; none at all means the stream was cut short."""
    if raw_finish_reason is None:
        return StopReason.TRUNCATED
    return _FINISH_TO_STOP.get(raw_finish_reason.lower(), StopReason.END_TURN)
