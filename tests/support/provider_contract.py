"""What every ``Provider`` must do, as a reusable test case (in the manner of eventsourcing's
recorder test cases): a test module subclasses :class:`ProviderContract` once per provider
and implements :meth:`ProviderContract.provider_answering`; pytest runs every ``test_`` method
for each subclass.

The orchestrator relies on exactly these: one attempt per call, the answer streamed to
``on_delta``, its accounting at the participant's own price, a failure raised as a classified
:class:`ProviderCallError` (retryable or not), and a close that may be called twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Final

import pytest

from forge_ledger.domain.values import ChatMessage, ModelResponse, Participant, Price
from forge_ledger.providers import ErrorType, Provider, ProviderCall, ProviderCallError

RATE_LIMITED: Final = "<rate limited>"
"""An outcome standing for one retryable rate-limit failure (HTTP 429)."""
SERVER_ERROR: Final = "<server error>"
"""An outcome standing for one provider failure (HTTP 500)."""
BROKEN_STREAM: Final = "<broken stream>"
"""An outcome standing for an answer whose stream breaks half-way."""
FAILURES: Final[dict[str, ErrorType]] = {
    RATE_LIMITED: "rate_limit", SERVER_ERROR: "server_error", BROKEN_STREAM: "mid_stream",
}
"""Each failure outcome and the error type every provider classifies it as."""


def fake_server_script(outcomes: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """alice's fake-server rules meeting ``outcomes`` in order, one request each (for the
    providers that answer by a script: litellm over HTTP, and ScriptedProvider in-process)."""
    faults = {RATE_LIMITED: "rate_limit", SERVER_ERROR: "server_error",
              BROKEN_STREAM: "disconnect"}
    return {"alice": [
        {"fault": faults[o], "retry_after": 0, "times": 1,
         "content": "half of this answer arrives before the break"}
        if o in faults else {"content": o, "times": 1}
        for o in outcomes
    ]}

PRICE = Price(input_cost_per_token=1e-6, output_cost_per_token=2e-6, source="user")
PROMPT = (ChatMessage(role="user", content="Round 1 · draft · iteration 1\nPropose a design."),)


class ProviderContract:
    """Subclass it with a ``Test`` name and implement :meth:`provider_answering`."""

    def provider_answering(self, outcomes: Sequence[str]) -> tuple[Provider, Participant]:
        """A provider whose calls 1, 2, … (attempts 1, 2, … of round 1) meet ``outcomes`` in
        order (a text, or one of :data:`FAILURES`), and the participant (priced :data:`PRICE`)
        those calls are for."""
        raise NotImplementedError

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def call(participant: Participant, attempt: int = 1) -> ProviderCall:
        return ProviderCall(participant=participant, messages=PROMPT, max_tokens=64,
                            temperature=0.0, round=1, attempt=attempt, timeout_secs=10.0)

    @staticmethod
    def complete(provider: Provider, call: ProviderCall,
                 deltas: list[str] | None = None) -> ModelResponse:
        async def go() -> ModelResponse:
            try:
                return await provider.complete(call, deltas.append if deltas is not None else None)
            finally:  # litellm's clients belong to this event loop: close them inside it
                await provider.aclose()

        return asyncio.run(go())

    # ------------------------------------------------------------------ the contract

    def test_is_a_provider(self) -> None:
        provider, _ = self.provider_answering(["hello"])
        assert isinstance(provider, Provider)

    def test_answers_with_its_accounting_at_the_participants_price(self) -> None:
        provider, who = self.provider_answering(["A token bucket per client key."])
        response = self.complete(provider, self.call(who))
        assert response.content == "A token bucket per client key."
        assert response.model
        assert response.tokens.output > 0
        assert response.price == PRICE
        assert response.cost_usd == pytest.approx(PRICE.cost(response.tokens))
        assert not response.truncated

    def test_streams_the_answer_to_on_delta(self) -> None:
        provider, who = self.provider_answering(["one two three four"])
        deltas: list[str] = []
        response = self.complete(provider, self.call(who), deltas)
        assert deltas
        assert "".join(deltas) == response.content == "one two three four"

    def test_a_failure_is_one_classified_error_and_the_retry_is_answered(self) -> None:
        provider, who = self.provider_answering([RATE_LIMITED, "after the retry"])
        with pytest.raises(ProviderCallError) as failed:
            self.complete(provider, self.call(who, attempt=1))
        assert failed.value.error_type == "rate_limit"
        assert failed.value.retryable
        assert self.complete(provider, self.call(who, attempt=2)).content == "after the retry"

    def test_a_server_error_and_a_broken_stream_are_retryable_and_classified(self) -> None:
        provider, who = self.provider_answering([SERVER_ERROR, BROKEN_STREAM, "after both"])
        for attempt, outcome in enumerate((SERVER_ERROR, BROKEN_STREAM), start=1):
            with pytest.raises(ProviderCallError) as failed:
                self.complete(provider, self.call(who, attempt=attempt))
            assert failed.value.error_type == FAILURES[outcome]
            assert failed.value.retryable
        assert self.complete(provider, self.call(who, attempt=3)).content == "after both"

    def test_the_participants_own_price_wins(self) -> None:
        provider, who = self.provider_answering(["hello"])
        assert provider.price(who) == PRICE

    def test_close_may_be_called_twice(self) -> None:
        provider, who = self.provider_answering(["hello"])
        self.complete(provider, self.call(who))

        async def close_twice() -> None:
            await provider.aclose()
            await provider.aclose()

        asyncio.run(close_twice())
