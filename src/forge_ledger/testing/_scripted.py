"""An in-process provider that answers from a queue: for tests whose subject is not HTTP.

Like the mock model of simonw's ``llm``, a test enqueues the answers it wants and the provider
serves them in order, recording every call it received::

    provider = ScriptedProvider()
    provider.enqueue(["a draft"], participant="alice")   # alice's next answer
    provider.enqueue(["ok", "fine"])                      # anyone's, in order
    provider.enqueue([ProviderCallError("rate_limit", "429", retryable=True)])

A participant's own queue is served before the global one. An entry is a text (streamed to
``on_delta`` a word at a time and counted a token per word, as the fake server does), a full
:class:`ModelResponse`, or a :class:`ProviderCallError` (raised). An empty queue is an error
naming the call, so a test never hangs waiting for an answer it did not script.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..domain.values import ModelResponse, Participant, Price, StopReason, TokenCount
from ..providers import ProviderCall, ProviderCallError, cost_of
from ._server import split_chunks, word_count

__all__ = ["ScriptedAnswer", "ScriptedProvider"]

ScriptedAnswer = str | ModelResponse | ProviderCallError
"""One queued outcome: a text, a whole response, or an error to raise."""


@dataclass
class ScriptedProvider:
    """Implements :class:`~forge_ledger.providers.Provider` from queued answers."""

    prices: dict[str, Price] = field(default_factory=dict)
    """Per participant name; a participant's own price wins, as with the real provider."""
    calls: list[ProviderCall] = field(default_factory=list)
    """Every call received, in order (failed ones included)."""
    closed: bool = False
    _queues: dict[str | None, deque[ScriptedAnswer]] = field(default_factory=dict)

    def enqueue(self, answers: Iterable[ScriptedAnswer], *,
                participant: str | None = None) -> ScriptedProvider:
        """Queue ``answers`` for ``participant`` (or for anyone when None); returns self."""
        self._queues.setdefault(participant, deque()).extend(answers)
        return self

    def pending(self, participant: str | None = None) -> int:
        """How many queued answers are left for ``participant`` (or in the global queue)."""
        return len(self._queues.get(participant, ()))

    def calls_for(self, participant: str) -> list[ProviderCall]:
        return [c for c in self.calls if c.participant.name == participant]

    async def complete(
        self, call: ProviderCall, on_delta: Callable[[str], None] | None = None
    ) -> ModelResponse:
        self.calls.append(call)
        answer = self._next(call)
        if isinstance(answer, ProviderCallError):
            raise answer
        response = answer if isinstance(answer, ModelResponse) else self._respond(call, answer)
        if on_delta is not None:
            for piece in split_chunks(response.content):
                on_delta(piece)
        return response

    def price(self, participant: Participant) -> Price | None:
        return participant.price or self.prices.get(participant.name)

    async def aclose(self) -> None:
        self.closed = True

    def _next(self, call: ProviderCall) -> ScriptedAnswer:
        name = call.participant.name
        for key in (name, None):
            queue = self._queues.get(key)
            if queue:
                return queue.popleft()
        raise ProviderCallError(
            "bad_request",
            f"no scripted answer left for {name} (round {call.round}, attempt {call.attempt})",
        )

    def _respond(self, call: ProviderCall, text: str) -> ModelResponse:
        """A text answer counted as the fake server counts it: a token per word in and out."""
        tokens = TokenCount(input=sum(word_count(m.content) for m in call.messages),
                            output=word_count(text))
        price = self.price(call.participant)
        return ModelResponse(
            content=text,
            model=call.participant.model,
            tokens=tokens,
            cost_usd=cost_of(price, tokens),
            price=price,
            stop_reason=StopReason.END_TURN,
        )
