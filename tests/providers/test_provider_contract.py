"""Every provider passes the same contract (``support.provider_contract``): litellm against the
fake OpenAI-compatible server, replay's provider over a recorded session, and the in-process
``ScriptedProvider``."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from forge_ledger.domain.values import ModelResponse, Participant, RoundKind, TokenCount
from forge_ledger.ledger import Ledger
from forge_ledger.providers import LiteLLMProvider, Provider, ProviderCallError
from forge_ledger.records.replay import ReplayProvider
from forge_ledger.testing import FakeOpenAIServer, ScriptedProvider, SessionBuilder
from support.provider_contract import FAILURES, PRICE, ProviderContract, fake_server_script


class TestScriptedProvider(ProviderContract):
    """Answers queued in-process, a failure as the error it is classified as."""

    def provider_answering(self, outcomes: Sequence[str]) -> tuple[Provider, Participant]:
        who = Participant(name="alice", model="openai/alice", price=PRICE)
        provider = ScriptedProvider().enqueue(
            [ProviderCallError(FAILURES[o], o, retry_after_secs=1.0) if o in FAILURES else o
             for o in outcomes],
            participant=who.name,
        )
        return provider, who


class TestScriptedProviderFromScript(ProviderContract):
    """In-process from the very script the fake server answers litellm by, faults included."""

    def provider_answering(self, outcomes: Sequence[str]) -> tuple[Provider, Participant]:
        who = Participant(name="alice", model="openai/alice", price=PRICE)
        return ScriptedProvider.from_script(fake_server_script(outcomes)), who


class TestLiteLLMProvider(ProviderContract):
    """litellm over real HTTP to the fake server (one rule per outcome, served in order)."""

    @pytest.fixture(autouse=True)
    def _server(self, fake_openai: FakeOpenAIServer) -> None:
        self.server = fake_openai

    def provider_answering(self, outcomes: Sequence[str]) -> tuple[Provider, Participant]:
        self.server.set_script(fake_server_script(outcomes))
        who = Participant(name="alice", model="openai/alice", api_base=self.server.url,
                          price=PRICE)
        return LiteLLMProvider(), who


class TestReplayProvider(ProviderContract):
    """Replay answers from a recorded session: attempt i of round 1 recorded outcome i."""

    @pytest.fixture(autouse=True)
    def _store(self, sqlite_url: str) -> None:
        self.store = sqlite_url

    def provider_answering(self, outcomes: Sequence[str]) -> tuple[Provider, Participant]:
        who = Participant(name="alice", model="openai/alice", price=PRICE)
        with Ledger(self.store) as ledger:
            b = SessionBuilder(store=ledger).start("Replay contract", participants=[who])
            b.round(RoundKind.DRAFT, participants=[who.name])
            for attempt, outcome in enumerate(outcomes, start=1):
                if outcome in FAILURES:
                    b.fail(who.name, attempt=attempt, error_type=FAILURES[outcome],
                           message=outcome)
                    continue
                tokens = TokenCount(input=9, output=len(outcome.split()))
                b.answer(who.name, attempt=attempt, response=ModelResponse(
                    content=outcome, model=who.model, tokens=tokens, price=PRICE,
                    cost_usd=PRICE.cost(tokens)))
            b.save()
            events = list(ledger.events(b.id))
        return ReplayProvider(events), who
