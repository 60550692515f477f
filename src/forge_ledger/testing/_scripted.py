"""An in-process provider that answers from a queue: for tests whose subject is not HTTP.

Like the mock model of simonw's ``llm``, a test enqueues the answers it wants and the provider
serves them in order, recording every call it received::

    provider = ScriptedProvider()
    provider.enqueue(["a draft"], participant="alice")   # alice's next answer
    provider.enqueue(["ok", "fine"])                      # anyone's, in order
    provider.enqueue([ProviderCallError("rate_limit", "429", retryable=True)])

A participant's own queue is served before the global one, and a fake-server script (if any)
after both: :meth:`ScriptedProvider.from_script`. An entry is a text (streamed to
``on_delta`` a word at a time and counted a token per word, as the fake server does), a full
:class:`ModelResponse`, or a :class:`ProviderCallError` (raised). An empty queue is an error
naming the call, so a test never hangs waiting for an answer it did not script.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..domain.values import ModelResponse, Participant, Price, TokenCount
from ..providers import ErrorType, ProviderCall, ProviderCallError, cost_of, stop_reason_for
from ._script import Fault, ReplyRule, Script, ScriptError, load_script, pick_rule
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
    script: Script | None = None
    """Answers calls no queue holds, by the fake server's rules (see :meth:`from_script`)."""
    closed: bool = False
    _queues: dict[str | None, deque[ScriptedAnswer]] = field(default_factory=dict)
    _used: dict[tuple[str, int], int] = field(default_factory=dict)

    @classmethod
    def from_script(cls, source: Script | Mapping[str, Any] | str | Path,
                    **options: Any) -> ScriptedProvider:
        """A provider answering as :class:`FakeOpenAIServer` would with the same script (the
        rule matching the last user message, ``times`` counted), without HTTP. A rule's
        ``rate_limit``, ``server_error``, ``unavailable`` or ``disconnect`` fault raises the
        :class:`ProviderCallError` the real provider classifies it as (a disconnect keeps the
        first half of the content as its partial text); the wire's own faults (a hang, a
        stall, a malformed chunk, …) are refused: they need the HTTP server."""
        return cls(script=load_script(source), **options)

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
        if self.script is not None:
            return self._by_script(call)
        raise ProviderCallError(
            "bad_request",
            f"no scripted answer left for {name} (round {call.round}, attempt {call.attempt})",
        )

    def _by_script(self, call: ProviderCall) -> ModelResponse:
        assert self.script is not None
        text = next((m.content for m in reversed(call.messages) if m.role == "user"), "")
        picked = pick_rule(self.script, self._used, call.participant.model, text)
        if picked is None:
            raise ProviderCallError(
                "bad_request", f"the script has no reply for {call.participant.model}"
            )
        rule = picked[1]
        if rule.fault is not None:
            raise _fault_error(call, rule)
        return self._respond(call, rule.content, rule.finish_reason)

    def _respond(self, call: ProviderCall, text: str,
                 finish_reason: str = "stop") -> ModelResponse:
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
            stop_reason=stop_reason_for(finish_reason),
            finish_reason=finish_reason,
        )


_IN_PROCESS: dict[Fault, tuple[ErrorType, int | None]] = {
    Fault.RATE_LIMIT: ("rate_limit", 429),
    Fault.SERVER_ERROR: ("server_error", 500),
    Fault.UNAVAILABLE: ("server_error", 503),
    Fault.DISCONNECT: ("mid_stream", None),
}
"""The faults with a meaning apart from the wire: the error the real provider classifies each
as (the provider contract checks both agree) and the HTTP status it carries."""


def _fault_error(call: ProviderCall, rule: ReplyRule) -> ProviderCallError:
    """The error a script's fault stands for in-process; the wire's own faults (a hang, a stall,
    a malformed chunk, …) need the HTTP server."""
    assert rule.fault is not None
    known = _IN_PROCESS.get(rule.fault)
    if known is None:
        raise ScriptError(
            f"fault {rule.fault.value!r} needs the HTTP server",
            hint="use FakeOpenAIServer for tests whose subject is the wire",
        )
    kind, status = known
    who = f"{call.participant.name} ({call.participant.model})"
    if kind == "mid_stream":
        pieces = split_chunks(rule.content)
        partial = "".join(pieces[: max(1, len(pieces) // 2)] if pieces else [])
        return ProviderCallError(kind, f"{who}: the stream broke after {len(partial)} characters",
                                 partial_text=partial, model=call.participant.model)
    return ProviderCallError(
        kind, rule.error_message or f"{who}: scripted HTTP {status}",
        retry_after_secs=rule.retry_after if rule.fault is Fault.RATE_LIMIT else None,
        status_code=status, model=call.participant.model,
    )
