"""LiteLLMProvider through real litellm and real HTTP against the scripted fake server."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from forge_ledger.domain.values import (
    ChatMessage,
    Critique,
    ModelResponse,
    Participant,
    Price,
    StopReason,
)
from forge_ledger.engine import output_ceiling
from forge_ledger.providers import (
    LiteLLMProvider,
    Provider,
    ProviderCall,
    ProviderCallError,
    classify_exception,
    get_provider,
    retry_delay,
    scrub_secrets,
)
from forge_ledger.testing import FakeOpenAIServer

T = TypeVar("T")

PRICE = Price(input_cost_per_token=0.001, output_cost_per_token=0.002)
PROMPT = "Round 1 · draft · iteration 1\nWrite the draft"
SYSTEM = "You are terse"
PROMPT_WORDS = len(PROMPT.split()) + len(SYSTEM.split())  # the fake server's token count


def _call(
    server: FakeOpenAIServer | str,
    model: str = "alice",
    *,
    price: Price | None = None,
    timeout: float = 10.0,
    response_format: Any = None,
) -> ProviderCall:
    base = server if isinstance(server, str) else server.url
    participant = Participant(name="Alice", model=f"openai/{model}", api_base=base, price=price)
    return ProviderCall(
        participant=participant,
        messages=(
            ChatMessage(role="system", content=SYSTEM),
            ChatMessage(role="user", content=PROMPT),
        ),
        max_tokens=256,
        temperature=0.2,
        response_format=response_format,
        timeout_secs=timeout,
    )


def _run(provider: LiteLLMProvider, make: Callable[[], Awaitable[T]]) -> T:
    """Run one coroutine and close litellm's clients inside the same event loop."""

    async def main() -> T:
        try:
            return await make()
        finally:
            await provider.aclose()

    return asyncio.run(main())


def _fail(provider: LiteLLMProvider, call: ProviderCall) -> ProviderCallError:
    with pytest.raises(ProviderCallError) as info:
        _run(provider, lambda: provider.complete(call))
    assert "\n" not in info.value.message
    return info.value


@pytest.fixture
def provider() -> LiteLLMProvider:
    return LiteLLMProvider()


# --------------------------------------------------------------------------- success


def test_stream_text_usage_cost_and_deltas_in_order(
    fake_openai: FakeOpenAIServer, provider: LiteLLMProvider,
) -> None:
    text = "The draft says alpha, then beta, then gamma."
    fake_openai.set_script({"alice": [{"match": "· draft ·", "content": text}]})
    deltas: list[str] = []
    resp = _run(provider, lambda: provider.complete(_call(fake_openai, price=PRICE), deltas.append))
    assert resp.content == text
    assert "".join(deltas) == text
    assert len(deltas) == len(text.split())
    assert resp.tokens.input == PROMPT_WORDS == 13
    assert resp.tokens.output == len(text.split())
    assert resp.usage_reported is True
    assert resp.cost_usd == pytest.approx(13 * 0.001 + 8 * 0.002)
    assert resp.price == PRICE
    assert resp.stop_reason is StopReason.END_TURN
    assert resp.finish_reason == "stop"
    assert resp.model.endswith("alice")
    assert resp.ttft_ms is not None
    assert 0 <= resp.ttft_ms <= resp.duration_ms
    (req,) = fake_openai.requests
    assert req.stream
    assert req.body["stream_options"] == {"include_usage": True}
    assert req.body["max_tokens"] == 256
    assert req.body["temperature"] == 0.2
    assert "response_format" not in req.body
    assert ModelResponse.model_validate(resp.model_dump(mode="json")) == resp


def test_length_finish_maps_to_max_tokens(
    fake_openai: FakeOpenAIServer, provider: LiteLLMProvider,
) -> None:
    fake_openai.set_script({"alice": [{"content": "cut here", "finish_reason": "length"}]})
    resp = _run(provider, lambda: provider.complete(_call(fake_openai)))
    assert resp.stop_reason is StopReason.MAX_TOKENS
    assert resp.truncated


def test_an_answer_past_its_output_ceiling_ends_the_stream_cut_off(
    fake_openai: FakeOpenAIServer, provider: LiteLLMProvider,
) -> None:
    """A provider that ignores max_tokens: the stream is ended at the call's ceiling (the
    engine's max_tokens plus margin), the text kept up to it, the answer marked cut off."""
    words = [f"w{i} " for i in range(400)]
    fake_openai.set_script({"alice": "".join(words)})
    call = dataclasses.replace(
        _call(fake_openai, price=PRICE), max_tokens=100, output_ceiling=output_ceiling(100)
    )
    assert call.output_ceiling == 116
    deltas: list[str] = []
    resp = _run(provider, lambda: provider.complete(call, deltas.append))
    assert resp.content == "".join(words[:116])
    assert len(deltas) == 116
    assert resp.stop_reason is StopReason.MAX_TOKENS
    assert resp.truncated
    assert resp.finish_reason == "length"
    assert resp.tokens.output == 116
    assert resp.tokens.input > 0
    assert resp.usage_reported is False
    assert resp.cost_usd == pytest.approx(PRICE.cost(resp.tokens))


def test_an_answer_within_its_ceiling_is_whole(
    fake_openai: FakeOpenAIServer, provider: LiteLLMProvider,
) -> None:
    text = "".join(f"w{i} " for i in range(116))
    fake_openai.set_script({"alice": text})
    call = dataclasses.replace(_call(fake_openai), max_tokens=100, output_ceiling=116)
    resp = _run(provider, lambda: provider.complete(call))
    assert resp.content == text
    assert resp.stop_reason is StopReason.END_TURN
    assert resp.usage_reported is True
    assert resp.tokens.output == 116


def test_output_ceiling_margin() -> None:
    assert output_ceiling(100) == 116
    assert output_ceiling(2048) == 2048 + 41
    assert output_ceiling(0) == 16


def test_unknown_model_without_price_costs_nothing(
    fake_openai: FakeOpenAIServer, provider: LiteLLMProvider,
) -> None:
    fake_openai.set_script({"*": "some words here"})
    call = _call(fake_openai, "no-such-model-anywhere")
    assert provider.price(call.participant) is None
    resp = _run(provider, lambda: provider.complete(call))
    assert resp.price is None
    assert resp.cost_usd == 0.0
    assert resp.tokens.output == 3


def test_table_price_is_recorded_and_schema_passed_where_supported(
    fake_openai: FakeOpenAIServer, provider: LiteLLMProvider,
) -> None:
    fake_openai.set_script({"*": '{"score": 80}'})
    call = _call(fake_openai, "gpt-4o", response_format=Critique)
    price = provider.price(call.participant)
    assert price is not None
    assert price.source == "litellm"
    assert price.input_cost_per_token > 0
    resp = _run(provider, lambda: provider.complete(call))
    assert resp.price == price
    assert resp.cost_usd == pytest.approx(price.cost(resp.tokens))
    assert fake_openai.requests[0].body["response_format"]["type"] == "json_schema"
    # a model litellm knows nothing about gets no response_format (the prompt asks for JSON)
    unknown = _call(fake_openai, "mystery", response_format=Critique)
    _run(provider, lambda: provider.complete(unknown))
    assert "response_format" not in fake_openai.requests[1].body


def test_mock_response_accounting() -> None:
    mocked = LiteLLMProvider(extra_params={"mock_response": "alpha beta gamma delta"})
    call = ProviderCall(
        participant=Participant(name="M", model="gpt-4o-mini", price=PRICE),
        messages=(ChatMessage(role="user", content="hello"),),
        max_tokens=50,
        temperature=0.0,
    )
    resp = _run(mocked, lambda: mocked.complete(call))
    assert resp.content == "alpha beta gamma delta"
    assert resp.stop_reason is StopReason.END_TURN
    assert resp.tokens.output > 0
    assert resp.tokens.input > 0
    assert resp.cost_usd == pytest.approx(PRICE.cost(resp.tokens))


def test_on_delta_errors_propagate_unchanged(
    fake_openai: FakeOpenAIServer, provider: LiteLLMProvider,
) -> None:
    fake_openai.set_script({"alice": "a b c"})

    def boom(_: str) -> None:
        raise KeyError("subscriber broke")

    with pytest.raises(KeyError, match="subscriber broke"):
        _run(provider, lambda: provider.complete(_call(fake_openai), boom))


# --------------------------------------------------------------------------- faults


def test_rate_limit_with_retry_after(
    fake_openai: FakeOpenAIServer, provider: LiteLLMProvider,
) -> None:
    fake_openai.set_script({"alice": [{"fault": "rate_limit", "retry_after": 2.5}]})
    err = _fail(provider, _call(fake_openai))
    assert err.error_type == "rate_limit"
    assert err.retryable
    assert err.retry_after_secs == 2.5
    assert retry_delay(1, err) == 2.5
    assert retry_delay(4, err) == 2.5
    assert retry_delay(1, err, cap=1.0) == 1.0
    assert len(fake_openai.requests) == 1  # one attempt: no hidden SDK retries


@pytest.mark.parametrize(("fault", "status"), [("server_error", 500), ("unavailable", 503)])
def test_server_errors_are_retryable(
    fake_openai: FakeOpenAIServer, provider: LiteLLMProvider, fault: str, status: int,
) -> None:
    fake_openai.set_script({"alice": [{"fault": fault}]})
    err = _fail(provider, _call(fake_openai))
    assert (err.error_type, err.retryable, err.status_code) == ("server_error", True, status)
    assert err.retry_after_secs is None
    assert len(fake_openai.requests) == 1


def test_hang_times_out_within_the_deadline(
    fake_openai: FakeOpenAIServer, provider: LiteLLMProvider,
) -> None:
    fake_openai.set_script({"alice": [{"fault": "hang"}]})
    err = _fail(provider, _call(fake_openai, timeout=0.5))
    assert err.error_type == "timeout"
    assert err.retryable
    assert err.partial_text == ""
    assert 400 <= err.duration_ms < 5000


def test_stall_keeps_the_partial_text(
    fake_openai: FakeOpenAIServer, provider: LiteLLMProvider,
) -> None:
    fake_openai.set_script({"alice": [{"fault": "stall", "content": "one two three four"}]})
    err = _fail(provider, _call(fake_openai, timeout=0.6))
    assert err.error_type in ("timeout", "mid_stream")
    assert err.partial_text.strip() == "one two"


@pytest.mark.parametrize("fault", ["malformed_chunk", "disconnect"])
def test_broken_streams_are_mid_stream_with_partial_text(
    fake_openai: FakeOpenAIServer, provider: LiteLLMProvider, fault: str,
) -> None:
    fake_openai.set_script({"alice": [{"fault": fault, "content": "one two three four"}]})
    deltas: list[str] = []
    with pytest.raises(ProviderCallError) as info:
        _run(provider, lambda: provider.complete(_call(fake_openai), deltas.append))
    err = info.value
    assert err.error_type == "mid_stream"
    assert err.retryable
    assert err.partial_text.strip() == "one two"
    assert "".join(deltas) == err.partial_text


def test_empty_body_is_empty_error(
    fake_openai: FakeOpenAIServer, provider: LiteLLMProvider,
) -> None:
    fake_openai.set_script({"alice": [{"fault": "empty"}]})
    err = _fail(provider, _call(fake_openai))
    assert err.error_type == "empty"
    assert err.retryable
    assert err.partial_text == ""


def test_no_finish_is_a_retryable_fault_keeping_the_partial_text(
    fake_openai: FakeOpenAIServer, provider: LiteLLMProvider,
) -> None:
    """litellm reports a stream cut short as finished ("stop"); the provider reads what the
    server really sent: no finish reason, no usage. The text may be incomplete, so it is a
    fault to retry, with the partial text kept for the record."""
    fake_openai.set_script({"alice": [{"fault": "no_finish", "content": "almost all of it"}]})
    err = _fail(provider, _call(fake_openai, price=PRICE))
    assert err.error_type == "truncated"
    assert err.retryable
    assert err.partial_text == "almost all of it"
    assert "no finish reason" in err.message


def test_connection_refused(provider: LiteLLMProvider) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = f"http://127.0.0.1:{port}/v1"
    err = _fail(provider, _call(base))
    assert err.error_type == "connection"
    assert err.retryable
    assert base in err.message


def test_missing_api_key_is_auth(
    provider: LiteLLMProvider, monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    # a non-loopback base gets no placeholder key; the SDK refuses before any network I/O
    err = _fail(provider, _call("http://models.example.invalid/v1"))
    assert err.error_type == "auth"
    assert not err.retryable
    anthropic = ProviderCall(
        participant=Participant(name="C", model="anthropic/claude-3-5-sonnet-20241022"),
        messages=(ChatMessage(role="user", content="hi"),),
        max_tokens=10,
        temperature=0.0,
    )
    err = _fail(provider, anthropic)
    assert err.error_type == "auth"
    assert "ANTHROPIC_API_KEY" in err.message


def test_secrets_never_reach_error_messages(
    fake_openai: FakeOpenAIServer, provider: LiteLLMProvider, monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = "sk-test-0123456789abcdefSECRET"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    monkeypatch.setenv("FORGE_TEST_SERVICE_TOKEN", "tok-zyxwvut-98765")
    fake_openai.set_script(
        {
            "alice": [{"fault": "unauthorized"}],
            "bob": [{"fault": "server_error", "error_message": "upstream tok-zyxwvut-98765 died"}],
        },
    )
    err = _fail(provider, _call(fake_openai))
    assert fake_openai.requests[0].headers["authorization"] == f"Bearer {key}"
    assert err.error_type == "auth"
    assert not err.retryable
    assert key not in err.message
    assert key not in str(err)
    assert key not in repr(err)
    assert "0123456789" not in err.message
    assert "[REDACTED]" in err.message
    err = _fail(provider, _call(fake_openai, "bob"))
    assert "tok-zyxwvut-98765" not in str(err)
    assert "[REDACTED]" in err.message


# --------------------------------------------------------------------------- concurrency


def test_concurrent_streams_overlap(
    fake_openai_factory: Callable[..., FakeOpenAIServer], provider: LiteLLMProvider,
) -> None:
    server = fake_openai_factory({"*": [{"content": "a b c d e", "chunk_delay": 0.01}]})
    server.latency = 0.5
    calls = [_call(server, f"m{i}") for i in range(8)]

    async def all_at_once() -> list[ModelResponse]:
        return list(await asyncio.gather(*(provider.complete(c) for c in calls)))

    responses = _run(provider, all_at_once)
    assert [r.content for r in responses] == ["a b c d e"] * 8
    assert server.wait_idle()
    reqs = server.requests
    assert len(reqs) == 8
    # the calls were in flight together (one after another, at most one would be): count the
    # requests the server was holding at once, from its own receive/finish times
    spans = [(r.received_at, r.finished_at) for r in reqs]
    assert all(end is not None for _, end in spans)
    peak = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)  # type: ignore[operator]
    assert peak >= 4, f"at most {peak} of 8 calls were in flight together"


# --------------------------------------------------------------------------- pure parts


def _err(retry_after: float | None = None) -> ProviderCallError:
    return ProviderCallError("server_error", "x", retry_after_secs=retry_after)


@given(
    st.integers(min_value=1, max_value=60),
    st.floats(min_value=0.01, max_value=5),
    st.floats(min_value=0.1, max_value=120),
)
def test_retry_delay_is_exponential_capped_and_deterministic(
    attempt: int, base: float, cap: float,
) -> None:
    d = retry_delay(attempt, _err(), base=base, cap=cap)
    assert 0 <= d <= cap
    assert d == retry_delay(attempt, _err(), base=base, cap=cap)
    assert d <= retry_delay(attempt + 1, _err(), base=base, cap=cap)


def test_retry_delay_prefers_retry_after_and_rejects_bad_attempts() -> None:
    assert retry_delay(1, _err()) == 0.5
    assert retry_delay(3, _err()) == 2.0
    assert retry_delay(1, _err(retry_after=7)) == 7
    assert retry_delay(1, _err(retry_after=90)) == 30.0
    with pytest.raises(ValueError, match="attempt"):
        retry_delay(0, _err())


_SECRET_CHARS = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.", min_size=6,
)


@settings(max_examples=200)
@given(_SECRET_CHARS, st.text(max_size=40), st.text(max_size=40))
def test_scrub_removes_env_secret_values(secret: str, before: str, after: str) -> None:
    assume(secret.lower() not in {"true", "false"} and secret not in "[REDACTED]")
    env = {"MY_API_KEY": secret, "HOME": "/root"}
    out = scrub_secrets(f"{before}{secret}{after}", env)
    assert secret not in out


def test_scrub_key_shapes_without_env() -> None:
    text = "bad key sk-proj-abcDEF123456 and AIza" + "x" * 30 + " Bearer abc.def.ghi.jkl"
    out = scrub_secrets(text, {})
    assert "abcDEF123456" not in out
    assert "xxxxxxxxxx" not in out
    assert "abc.def.ghi" not in out
    assert scrub_secrets("plain words stay", {}) == "plain words stay"


def test_classify_context_window_and_bad_request() -> None:
    import litellm

    call = _call("http://127.0.0.1:1/v1")
    e = litellm.ContextWindowExceededError(message="too long", model="x", llm_provider="openai")
    assert classify_exception(e, call).error_type == "context_window"
    assert not classify_exception(e, call).retryable
    b = litellm.BadRequestError(message="bad", model="x", llm_provider="openai")
    assert classify_exception(b, call).error_type == "bad_request"
    assert classify_exception(RuntimeError("odd"), call).error_type == "unknown"


def test_get_provider_is_a_provider() -> None:
    p = get_provider()
    assert isinstance(p, LiteLLMProvider)
    assert isinstance(p, Provider)


# --------------------------------------------------------------------------- unwatched calls


def _unwatched(server: FakeOpenAIServer, **kw: Any) -> ProviderCall:
    """A call with an output ceiling, as the orchestrator makes them."""
    return dataclasses.replace(
        _call(server, price=PRICE, **kw), max_tokens=100, output_ceiling=output_ceiling(100)
    )


def test_an_unwatched_call_is_one_plain_request_with_usage_and_cost(
    fake_openai: FakeOpenAIServer, provider: LiteLLMProvider,
) -> None:
    text = "A short and whole answer here"
    fake_openai.set_script({"alice": text})
    resp = _run(provider, lambda: provider.complete(_unwatched(fake_openai)))
    (req,) = fake_openai.requests
    assert not req.stream
    assert "stream_options" not in req.body
    assert req.body["max_tokens"] == 100
    assert resp.content == text
    assert resp.stop_reason is StopReason.END_TURN
    assert resp.finish_reason == "stop"
    assert resp.usage_reported is True
    assert resp.tokens.input == PROMPT_WORDS
    assert resp.tokens.output == len(text.split())
    assert resp.cost_usd == pytest.approx(PRICE.cost(resp.tokens))
    assert resp.ttft_ms is None  # no first token is seen apart from the whole answer


def test_a_watched_call_still_streams(
    fake_openai: FakeOpenAIServer, provider: LiteLLMProvider,
) -> None:
    fake_openai.set_script({"alice": "one two three"})
    deltas: list[str] = []
    resp = _run(provider, lambda: provider.complete(_unwatched(fake_openai), deltas.append))
    assert fake_openai.requests[0].stream
    assert "".join(deltas) == resp.content == "one two three"


def test_an_unwatched_body_past_its_cap_is_cut_off_at_the_cap(
    fake_openai: FakeOpenAIServer, provider: LiteLLMProvider,
) -> None:
    """A provider ignoring max_tokens without streaming: its body is read no further than
    the cap the ceiling gives, and the answer is the text that arrived, marked cut off."""
    from forge_ledger.providers._body_cap import body_cap_for

    words = [f"w{i} " for i in range(40_000)]
    full = "".join(words)
    fake_openai.set_script({"alice": full})
    call = _unwatched(fake_openai)
    limit = body_cap_for(call.output_ceiling or 0).limit
    assert len(full) > limit
    resp = _run(provider, lambda: provider.complete(call))
    assert not fake_openai.requests[0].stream
    assert resp.content
    assert full.startswith(resp.content)
    assert len(resp.content.encode()) < limit
    assert resp.stop_reason is StopReason.MAX_TOKENS
    assert resp.truncated
    assert resp.finish_reason == "length"
    assert resp.usage_reported is False
    assert resp.tokens.output >= 116
    assert resp.tokens.input > 0
    assert resp.cost_usd == pytest.approx(PRICE.cost(resp.tokens))


def test_an_unwatched_answer_past_its_ceiling_within_the_cap_is_marked_cut_off(
    fake_openai: FakeOpenAIServer, provider: LiteLLMProvider,
) -> None:
    text = "".join(f"w{i} " for i in range(400))
    fake_openai.set_script({"alice": text})
    resp = _run(provider, lambda: provider.complete(_unwatched(fake_openai)))
    assert resp.content == text
    assert resp.stop_reason is StopReason.MAX_TOKENS
    assert resp.usage_reported is True
    assert resp.tokens.output == 400


@pytest.mark.parametrize("fault", ["malformed_chunk", "disconnect"])
def test_an_unwatched_body_broken_off_is_mid_stream_with_partial_text(
    fake_openai: FakeOpenAIServer, provider: LiteLLMProvider, fault: str,
) -> None:
    content = " ".join(f"word{i}" for i in range(200))
    fake_openai.set_script({"alice": [{"fault": fault, "content": content}]})
    with pytest.raises(ProviderCallError) as info:
        _run(provider, lambda: provider.complete(_unwatched(fake_openai)))
    err = info.value
    assert not fake_openai.requests[0].stream
    assert err.error_type == "mid_stream"
    assert err.retryable
    assert err.partial_text
    assert content.startswith(err.partial_text)
    assert len(err.partial_text) < len(content)


def test_an_unwatched_stall_times_out_with_partial_text(
    fake_openai: FakeOpenAIServer, provider: LiteLLMProvider,
) -> None:
    content = " ".join(f"word{i}" for i in range(200))
    fake_openai.set_script({"alice": [{"fault": "stall", "content": content}]})
    err = _fail(provider, _unwatched(fake_openai, timeout=0.6))
    assert err.error_type == "timeout"
    assert err.partial_text
    assert content.startswith(err.partial_text)


def test_an_unwatched_error_status_is_classified_as_before(
    fake_openai: FakeOpenAIServer, provider: LiteLLMProvider,
) -> None:
    fake_openai.set_script({"alice": [{"fault": "rate_limit", "retry_after": 2.5}]})
    err = _fail(provider, _unwatched(fake_openai))
    assert err.error_type == "rate_limit"
    assert err.retry_after_secs == 2.5
    assert err.partial_text == ""


@pytest.mark.parametrize("watched", [False, True])
def test_an_empty_reply_is_empty_streamed_or_not(
    fake_openai: FakeOpenAIServer, provider: LiteLLMProvider, watched: bool,
) -> None:
    """HTTP 200 with nothing in it is an ``empty`` reply (retried as one) either way, not the
    server error litellm makes of a body that is not JSON."""
    fake_openai.set_script({"alice": [{"fault": "empty"}]})
    deltas: list[str] = []
    call = _unwatched(fake_openai)
    with pytest.raises(ProviderCallError) as info:
        _run(provider, lambda: provider.complete(call, deltas.append if watched else None))
    assert fake_openai.requests[0].stream is watched
    assert info.value.error_type == "empty"
    assert info.value.partial_text == ""
    assert info.value.cost_usd == 0.0


def test_unwatched_calls_work_again_after_the_provider_is_closed(
    fake_openai: FakeOpenAIServer, provider: LiteLLMProvider,
) -> None:
    """Closing the provider closes the capped HTTP client; the next run (another event
    loop) gets a new one instead of failing on the closed one."""
    fake_openai.set_script({"alice": "again and again"})
    for _ in range(2):
        resp = _run(provider, lambda: provider.complete(_unwatched(fake_openai)))
        assert resp.content == "again and again"
    assert [r.stream for r in fake_openai.requests] == [False, False]


def test_a_body_cap_keeps_no_more_than_its_limit() -> None:
    from forge_ledger.providers._body_cap import BodyCap, BodyTooLarge

    cap = BodyCap(limit=10)
    cap.take(b"12345")
    with pytest.raises(BodyTooLarge):
        cap.take(b"6789012345")
    assert bytes(cap.received) == b"1234567890"
    assert cap.overflowed
    assert not cap.broke_off


def test_without_litellm_s_client_hooks_unwatched_calls_stream(
    fake_openai: FakeOpenAIServer, provider: LiteLLMProvider, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A litellm release without the hooks the body cap is installed through gets no cap: an
    unwatched call then streams, bounded by its ceiling as before, rather than failing."""
    import sys

    from forge_ledger.providers import _litellm

    monkeypatch.setattr(_litellm, "_capped_client", None)
    monkeypatch.setitem(sys.modules, "litellm.llms.openai.openai", None)  # import fails
    fake_openai.set_script({"alice": "one two three"})
    resp = _run(provider, lambda: provider.complete(_unwatched(fake_openai)))
    assert fake_openai.requests[0].stream
    assert resp.content == "one two three"
    assert resp.stop_reason is StopReason.END_TURN


_CANCELLED_CALLS = """
import asyncio, gc, sys, warnings
from forge_ledger.domain.values import ChatMessage, Participant
from forge_ledger.engine import output_ceiling
from forge_ledger.providers import get_provider
from forge_ledger.providers._call import ProviderCall
from forge_ledger.providers._litellm import _import_litellm, _UNAWAITED_HANDLER
from forge_ledger.testing import FakeOpenAIServer

_import_litellm()
if sys.argv[1] == "unfiltered":  # the check below can fail: without the filter, Python warns
    warnings.filters[:] = [f for f in warnings.filters if f[1] is None
                           or f[1].pattern != _UNAWAITED_HANDLER]

async def main(url: str) -> None:
    provider = get_provider()
    who = Participant(name="ana", model="openai/ana", api_base=url)
    call = ProviderCall(participant=who, messages=(ChatMessage(role="user", content="hi"),),
                        max_tokens=100, temperature=0.0, output_ceiling=output_ceiling(100),
                        timeout_secs=5)
    for step in range(1, 60):  # cancelled at once, then a little later each time
        try:
            await asyncio.wait_for(provider.complete(call), timeout=0.0005 * step)
        except Exception:
            pass
    await asyncio.sleep(0.3)
    gc.collect()
    await provider.aclose()

server = FakeOpenAIServer({"ana": "an answer"}, latency=0.2).start()
try:
    asyncio.run(main(server.url))
finally:
    server.stop()
gc.collect()
"""


@pytest.mark.slow
def test_a_cancelled_call_leaves_no_warning_on_stderr() -> None:
    """litellm prepares a call in a thread that hands back the coroutine making it; a call
    cancelled meanwhile drops that coroutine, and Python's warning about it would reach the
    terminal of a person who pressed Ctrl-C (or a worker's log when its database went)."""
    import subprocess
    import sys

    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PATH": "/usr/bin:/bin"}
    runs = {
        mode: subprocess.run(
            [sys.executable, "-c", _CANCELLED_CALLS, mode],
            capture_output=True, text=True, timeout=120, check=True, env=env,
        ).stderr
        for mode in ("unfiltered", "as shipped")
    }
    assert "was never awaited" in runs["unfiltered"]
    assert "was never awaited" not in runs["as shipped"], runs["as shipped"][-800:]
