"""The real provider: one streamed completion through litellm.

This is the only module that imports litellm, and it does so lazily on the first call:
importing litellm costs ~2 s and, unless told otherwise, reaches the network (price table,
``.env`` search, tokenizer downloads). :func:`configure_offline_env` sets the switches that
keep it offline and quiet *before* that import.

One attempt per call: the OpenAI SDK's hidden retries are off (``max_retries=0``) and the
whole call runs under ``asyncio.timeout`` (litellm's own ``timeout`` only bounds each read).

A call nobody watches (no ``on_delta``) to a model served through the OpenAI SDK (OpenAI and
OpenAI-compatible servers) is made without streaming: parsing a stream one chunk per token is
most of the client's CPU per call, and one JSON body costs a fraction of it. That body is
bounded while it is read (:mod:`._body_cap`, from the output ceiling); one that passes its
bound was a provider ignoring ``max_tokens``, and its answer is what arrived, marked cut off,
as a stream is ended at its ceiling. Other providers, and calls with no ceiling, stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any
from urllib.parse import urlparse

from ..domain.values import ModelResponse, Participant, Price, StopReason, TokenCount
from ._body_cap import BodyCap, add_cap_hook, body_cap_for, current_cap
from ._call import ProviderCall, stop_reason_for
from ._errors import ErrorType, ProviderCallError
from ._pricing import cost_of, price_from_table_entry, resolve_price

__all__ = [
    "LOCAL_PLACEHOLDER_KEY",
    "OFFLINE_ENV",
    "LiteLLMProvider",
    "classify_exception",
    "configure_offline_env",
    "missing_keys",
    "table_price",
]

OFFLINE_ENV: dict[str, str] = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS": "True",
    "LITELLM_MODE": "PRODUCTION",
    "LITELLM_LOG": "ERROR",
}
"""Set (unless already set) before importing litellm; see notes on litellm 1.106."""

LOCAL_PLACEHOLDER_KEY = "forge-ledger-local-no-key"
"""Sent to an OpenAI-compatible server on a loopback address when no key is configured:
local servers (the fake server, llama.cpp, vLLM…) ignore it, the OpenAI SDK insists on one."""

_LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}

_litellm: ModuleType | None = None

_UNAWAITED_HANDLER = r"coroutine '\w*(Completion|Handler)\.\w+' was never awaited"
"""The warning about a litellm provider handler's coroutine dropped by a cancelled call."""


def configure_offline_env() -> None:
    for name, value in OFFLINE_ENV.items():
        os.environ.setdefault(name, value)


def _import_litellm() -> ModuleType:
    global _litellm
    if _litellm is None:
        configure_offline_env()
        import litellm

        litellm.suppress_debug_info = True
        litellm.disable_hf_tokenizer_download = True
        litellm.telemetry = False
        # litellm prepares a call in a worker thread, which hands back the coroutine that
        # makes it; a call cancelled meanwhile (Ctrl-C, a lost database, a timeout) drops
        # that coroutine unawaited, and Python then warns on stderr about litellm's own
        # handler. The call was cancelled on purpose and its outcome is recorded: not news.
        warnings.filterwarnings(
            "ignore",
            message=_UNAWAITED_HANDLER,
            category=RuntimeWarning,
        )
        _litellm = litellm
    return _litellm


_capped_client: Any = None
"""The HTTP client the OpenAI SDK uses (``litellm.aclient_session``), with the body cap."""


def _install_capped_client(litellm: Any) -> bool:
    """Give the OpenAI SDK an HTTP client with the body cap (litellm's own client, same
    transport and settings, plus the cap's response hook), before a call; again after
    :meth:`LiteLLMProvider.aclose` dropped it. litellm's cached SDK clients hold the client
    they were made with, so they are dropped and made again on the new one.

    Whether the cap is in place: a litellm release without these hooks gets no cap, and every
    call then streams, bounded by its ceiling as before."""
    global _capped_client
    current = _capped_client
    if current is not None and not current.is_closed and litellm.aclient_session is current:
        return True
    before = litellm.aclient_session
    litellm.aclient_session = None  # litellm builds its own client only when none is set
    try:
        from litellm.llms.openai.openai import OpenAIChatCompletion

        client = add_cap_hook(OpenAIChatCompletion.get_async_http_client())
        litellm.in_memory_llm_clients_cache.flush_cache()
    except (ImportError, AttributeError, KeyError, TypeError):
        litellm.aclient_session = before
        return False
    _capped_client = litellm.aclient_session = client
    return True


def preload_client() -> None:
    """Load the model client now: a long-lived process (a study worker) pays for it before it
    takes work rather than inside its first call, where it would hold the event loop."""
    _import_litellm()


async def _drop_capped_client(litellm: Any) -> None:
    global _capped_client
    client, _capped_client = _capped_client, None
    if client is None:
        return
    if litellm.aclient_session is client:
        litellm.aclient_session = None
    litellm.in_memory_llm_clients_cache.flush_cache()  # SDK clients made on the closed one
    if not client.is_closed:
        await client.aclose()


def missing_keys(participant: Participant) -> tuple[str, ...]:
    """Environment variables litellm needs for ``participant`` and does not find, asked of
    litellm itself (``validate_environment``), with the same local-server exemption as a call.

    Raises :class:`ProviderCallError` (``bad_request``) when litellm cannot tell which provider
    serves the model name at all.
    """
    litellm = _import_litellm()
    kwargs: dict[str, Any] = {"model": participant.model}
    if participant.api_base:
        kwargs["api_base"] = participant.api_base
        if _needs_placeholder_key(participant.model, participant.api_base):
            kwargs["api_key"] = LOCAL_PLACEHOLDER_KEY
    try:
        litellm.get_llm_provider(participant.model, api_base=participant.api_base)
    except Exception:
        raise ProviderCallError(
            "bad_request",
            f"litellm does not know which provider serves {participant.model!r}",
        ) from None
    report = litellm.validate_environment(**kwargs)
    return tuple(str(k) for k in report.get("missing_keys") or ())


def table_price(model: str) -> Price | None:
    """The price of ``model`` in litellm's bundled table, or None when it has none."""
    litellm = _import_litellm()
    try:
        entry = litellm.get_model_info(model=model)
    except Exception:
        entry = None
    return price_from_table_entry(entry)


def api_key_names(model: str) -> tuple[str, ...]:
    """The environment variables litellm reads the key of ``model`` from (for a one-line fix:
    "set ANTHROPIC_API_KEY"); the missing ones when some are, else all it would read."""
    litellm = _import_litellm()
    try:
        found = litellm.validate_environment(model=model)
    except Exception:
        return ()
    missing = tuple(str(k) for k in found.get("missing_keys") or ())
    if missing:
        return missing
    try:
        provider = str(litellm.get_llm_provider(model)[1])
    except Exception:
        return ()
    return (f"{provider.upper()}_API_KEY",) if provider else ()


class _CallbackFailed(Exception):
    """Carries an exception raised by the caller's ``on_delta`` past our classification."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(str(original))
        self.original = original


class LiteLLMProvider:
    """Streams completions through ``litellm.acompletion``; see the module docstring."""

    def __init__(self, *, extra_params: dict[str, Any] | None = None) -> None:
        self._extra = dict(extra_params or {})
        self._prices: dict[str, Price | None] = {}
        self._routes: dict[tuple[str, str | None], bool] = {}
        self._schemas: dict[str, bool] = {}

    # ----------------------------------------------------------------- pricing

    def price(self, participant: Participant) -> Price | None:
        """User price, else litellm's bundled table, else None (cost then reported as 0)."""
        return resolve_price(participant, self._table_price)

    def _table_price(self, model: str) -> Price | None:
        if model not in self._prices:
            self._prices[model] = table_price(model)
        return self._prices[model]

    # ----------------------------------------------------------------- the call

    def _supports_schema(self, model: str) -> bool:
        """Asked of litellm once per model (its table lookup costs more than a call's own
        work once calls are not streamed)."""
        if model not in self._schemas:
            try:
                self._schemas[model] = bool(_import_litellm().supports_response_schema(model=model))
            except Exception:
                self._schemas[model] = False
        return self._schemas[model]

    def _request(self, call: ProviderCall) -> dict[str, Any]:
        p = call.participant
        kwargs: dict[str, Any] = {
            "model": p.model,
            "messages": [{"role": m.role, "content": m.content} for m in call.messages],
            "max_tokens": call.max_tokens,
            "temperature": call.temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
            "timeout": call.timeout_secs,
            "max_retries": 0,
            "num_retries": 0,
            **self._extra,
        }
        if p.api_base:
            kwargs["api_base"] = p.api_base
            if _needs_placeholder_key(p.model, p.api_base):
                kwargs["api_key"] = LOCAL_PLACEHOLDER_KEY
        if call.response_format is not None and self._supports_schema(p.model):
            kwargs["response_format"] = call.response_format
        price = self.price(p)
        if price is not None:  # litellm's own cost log then prices it as we do, without a
            kwargs["input_cost_per_token"] = price.input_cost_per_token  # search of its table
            kwargs["output_cost_per_token"] = price.output_cost_per_token
        return kwargs

    def _served_by_sdk(self, participant: Participant) -> bool:
        """Whether litellm serves the model through the OpenAI SDK, whose HTTP client caps
        the bodies it reads (:func:`_install_capped_client`)."""
        key = (participant.model, participant.api_base)
        if key not in self._routes:
            try:
                route = _import_litellm().get_llm_provider(
                    participant.model, api_base=participant.api_base
                )[1]
            except Exception:
                route = None
            self._routes[key] = route == "openai"
        return self._routes[key]

    async def complete(
        self, call: ProviderCall, on_delta: Callable[[str], None] | None = None
    ) -> ModelResponse:
        litellm = _import_litellm()
        capped = _install_capped_client(litellm)  # again once closed (see :meth:`aclose`)
        kwargs = self._request(call)
        ceiling = call.output_ceiling
        if (
            capped
            and on_delta is None
            and ceiling is not None
            and "mock_response" not in kwargs
            and self._served_by_sdk(call.participant)
        ):
            return await self._complete_plain(litellm, call, kwargs, body_cap_for(ceiling))
        return await self._complete_streamed(litellm, call, kwargs, on_delta, call.timeout_secs)

    async def _complete_plain(
        self, litellm: ModuleType, call: ProviderCall, kwargs: dict[str, Any], cap: BodyCap
    ) -> ModelResponse:
        """The call made without streaming, its body read under ``cap``. A body that passes
        the cap is a provider ignoring ``max_tokens``: its answer is the text that arrived,
        marked cut off at its limit, as a stream ended at its ceiling is. A body broken off
        is a mid-stream break keeping the text that arrived."""
        plain = {**kwargs, "stream": False}
        plain.pop("stream_options", None)
        got = _Received(model=call.participant.model, started=time.monotonic())
        token = current_cap().set(cap)
        try:
            async with asyncio.timeout(call.timeout_secs):
                response = await _acompletion(litellm, plain)
        except TimeoutError:
            got.buffer += cap.salvaged_text().encode("utf-8")
            raise _timed_out(call, got) from None
        except Exception as e:
            price = self.price(call.participant)
            if cap.overflowed:
                return _cut_at_cap(got, call, cap, price)
            if cap.broke_off:
                raise _broken_off(e, call, cap.salvaged_text(), got.elapsed_ms()) from None
            if cap.came_empty:  # litellm calls it a server error: it is an empty reply
                raise _cut_short(got, call, price, None) from None
            raise classify_exception(e, call, duration_ms=got.elapsed_ms()) from None
        finally:
            current_cap().reset(token)
        return _judge_plain(got, response, call, self.price(call.participant))

    async def _complete_streamed(
        self,
        litellm: ModuleType,
        call: ProviderCall,
        kwargs: dict[str, Any],
        on_delta: Callable[[str], None] | None,
        limit_secs: float,
    ) -> ModelResponse:
        got = _Received(
            model=call.participant.model, started=time.monotonic(), ceiling=call.output_ceiling
        )
        stream: Any = None
        try:
            async with asyncio.timeout(limit_secs):
                stream = await _acompletion(litellm, kwargs)
                async for chunk in stream:
                    if not got.take(chunk, on_delta):
                        break
                    _forget_delivered(stream)
                    if got.content_chunks % _LET_FINALIZERS_RUN == 0:
                        await asyncio.sleep(0)
        except _CallbackFailed as e:
            await _close(stream)
            raise e.original from None
        except TimeoutError:
            await _close(stream)
            raise _timed_out(call, got) from None
        except Exception as e:
            await _close(stream)
            if _ended_without_finish(e):
                reported, tokens = _usage(got, stream)
                raise _cut_short(
                    got, call, self.price(call.participant), tokens if reported else None
                ) from None
            raise classify_exception(
                e, call, partial_text=got.text, duration_ms=got.elapsed_ms()
            ) from None
        if got.over_ceiling:
            await _close(stream)
            return _cut_at_ceiling(got, call, self.price(call.participant))
        return _judge(got, stream, call, self.price(call.participant),
                      mocked="mock_response" in kwargs)

    async def aclose(self) -> None:
        """Close litellm's cached HTTP clients and the capped one (no-op when litellm was
        never imported). The capped client is dropped, not kept for the next call: one left
        to the end of the interpreter is finalized after litellm's modules are gone."""
        if _litellm is not None:
            close = getattr(_litellm, "close_litellm_async_clients", None)
            if close is not None:
                await close()
            await _drop_capped_client(_litellm)


async def _acompletion(litellm: ModuleType, kwargs: dict[str, Any]) -> Any:
    """``litellm.acompletion``; a model refusing ``response_format`` is asked again without
    it (the prompt already asks for JSON), and ``kwargs`` then no longer holds it."""
    try:
        return await litellm.acompletion(**kwargs)
    except litellm.UnsupportedParamsError:
        if "response_format" not in kwargs:
            raise
        kwargs.pop("response_format")
        return await litellm.acompletion(**kwargs)


def _timed_out(call: ProviderCall, got: _Received) -> ProviderCallError:
    return ProviderCallError(
        "timeout",
        f"{call.participant.name} ({call.participant.model}): no complete answer within "
        f"{call.timeout_secs:g} s",
        partial_text=got.text,
        duration_ms=got.elapsed_ms(),
        model=got.model,
    )


async def _close(stream: Any) -> None:
    close = getattr(stream, "aclose", None)
    if close is None:
        return
    with contextlib.suppress(Exception):  # closing a broken stream must not hide the failure
        await close()


def _tokens(usage: Any) -> TokenCount:
    """Tokens from a litellm usage object (litellm estimates them when the provider sent none)."""
    if usage is None:
        return TokenCount()
    return TokenCount(
        input=int(getattr(usage, "prompt_tokens", 0) or 0),
        output=int(getattr(usage, "completion_tokens", 0) or 0),
    )


def _needs_placeholder_key(model: str, api_base: str) -> bool:
    prefix = model.split("/", 1)[0] if "/" in model else "openai"
    if prefix not in {"openai", "text-completion-openai", "hosted_vllm", "lm_studio"}:
        return False
    if os.environ.get("OPENAI_API_KEY"):
        return False
    return (urlparse(api_base).hostname or "") in _LOOPBACK


# --------------------------------------------------------------------------- classification


def _chain(e: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    x: BaseException | None = e
    while x is not None and x not in seen and len(seen) < 12:
        seen.append(x)
        x = x.__cause__ or x.__context__
    return seen


def _retry_after(e: BaseException) -> float | None:
    for source in (
        getattr(e, "litellm_response_headers", None),
        getattr(getattr(e, "response", None), "headers", None),
    ):
        if source is None:
            continue
        try:
            value = source.get("retry-after") or source.get("Retry-After")
        except Exception:
            continue
        if value is None:
            continue
        try:
            return max(0.0, float(value))
        except (TypeError, ValueError):
            return _http_date_delay(str(value))
    return None


def _http_date_delay(value: str) -> float | None:
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _describe(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    for marker in ("Original exception:", "Received Model Group", "\nTraceback"):
        text = text.split(marker, 1)[0]
    while True:
        head, sep, rest = text.partition(": ")
        if (
            sep
            and head.replace("litellm.", "").replace(".", "").isidentifier()
            and (head.endswith(("Error", "Exception")))
        ):
            text = rest
            continue
        break
    return text.replace("OpenAIException - ", "").strip() or type(e).__name__


_AUTH_NAMES = frozenset({"AuthenticationError", "PermissionDeniedError"})
_CONNECTION_NAMES = frozenset(
    {"APIConnectionError", "ConnectError", "ConnectionRefusedError", "ClientConnectorError"}
)
_TIMEOUT_NAMES = frozenset({"Timeout", "APITimeoutError", "TimeoutException"})
_SERVER_NAMES = frozenset({"InternalServerError", "ServiceUnavailableError", "BadGatewayError"})
_REQUEST_NAMES = frozenset(
    {"BadRequestError", "NotFoundError", "UnsupportedParamsError", "UnprocessableEntityError"}
)

_MESSAGES: dict[ErrorType, str] = {
    "mid_stream": "{who}: the stream broke after {chars} characters: {detail}",
    "context_window": "{who}: the prompt exceeds the context window: {detail}",
    "rate_limit": "{who}: rate limited by the provider (HTTP 429): {detail}",
    "auth": (
        "{who}: the provider refused the credentials or none are set: {detail} "
        "(set the provider's API key in the environment)"
    ),
    "connection": "{who}: cannot connect to {base}: {detail} (is it running and reachable?)",
    "timeout": "{who}: the provider timed out: {detail}",
    "server_error": "{who}: provider error (HTTP {status}): {detail}",
    "bad_request": "{who}: the provider rejected the request: {detail}",
    "unknown": "{who}: {exception}: {detail}",
}
"""One line per kind: who failed, what the kind means, then the scrubbed detail."""


def _error_kind(names: frozenset[str], status: int | None, detail: str) -> ErrorType:
    """The kind of failure, most specific first: the exception classes anywhere in the chain,
    then the HTTP status, then words in the message (some servers say no more)."""
    lowered = detail.lower()
    if "MidStreamFallbackError" in names:
        return "mid_stream"
    if "ContextWindowExceededError" in names:
        return "context_window"
    if "RateLimitError" in names or status == 429:
        return "rate_limit"
    if (
        names & _AUTH_NAMES
        or status in (401, 403)
        or "missing credentials" in lowered
        or ("api key" in lowered and "missing" in lowered)
    ):
        return "auth"
    if names & _CONNECTION_NAMES or "connection error" in lowered:
        return "connection"
    if names & _TIMEOUT_NAMES:
        return "timeout"
    if names & _SERVER_NAMES or (status is not None and status >= 500):
        return "server_error"
    if names & _REQUEST_NAMES or (status is not None and 400 <= status < 500):
        return "bad_request"
    return "unknown"


def _streamed_so_far(e: BaseException, partial_text: str) -> str:
    """The longer of what we received and what litellm says it had generated before the break."""
    generated = getattr(e, "generated_content", None)
    if isinstance(generated, str) and len(generated) > len(partial_text):
        return generated
    return partial_text


def classify_exception(
    e: BaseException, call: ProviderCall, *, partial_text: str = "", duration_ms: int = 0
) -> ProviderCallError:
    """Turn whatever litellm raised into one classified, scrubbed :class:`ProviderCallError`."""
    status = getattr(e, "status_code", None)
    status = status if isinstance(status, int) else None
    detail = _describe(e)
    kind = _error_kind(frozenset(type(x).__name__ for x in _chain(e)), status, detail)
    partial = _streamed_so_far(e, partial_text) if kind == "mid_stream" else partial_text
    message = _MESSAGES[kind].format(
        who=f"{call.participant.name} ({call.participant.model})",
        detail=detail,
        chars=len(partial),
        base=call.participant.api_base or "the provider",
        status=status or 500,
        exception=type(e).__name__,
    )
    return ProviderCallError(
        kind,
        message,
        retry_after_secs=_retry_after(e),
        partial_text=partial,
        duration_ms=duration_ms,
        status_code=status,
        model=call.participant.model,
    )


_KEEP_DELIVERED = 2
"""Chunks litellm's stream wrapper may keep: its repetition check compares the last two."""

_LET_FINALIZERS_RUN = 32
"""Content chunks between two yields to the event loop. litellm takes each chunk with a new
``async for`` over the OpenAI SDK's stream, whose ``__aiter__`` is an async generator left
suspended after one item (holding that chunk); asyncio closes each in a task of its own, and
those tasks only run when this loop yields. Streamed from a nearby server the socket always
has data, so without a yield they pile up: a few kilobytes per chunk, a gigabyte for an
answer of 2 MB sent a word at a time."""


def _forget_delivered(stream: Any) -> None:
    """Drop what litellm's stream wrapper keeps of the chunks it has delivered to us.

    The wrapper keeps every chunk object (a few kilobytes each, to rebuild the response at
    the end) and the text so far as one string it extends by copying at every chunk: an
    answer streamed a word at a time then costs about a gigabyte per 2 MB and copying time
    that grows with its length. This provider keeps the text itself (:class:`_Received`),
    and reads usage only from chunks that come after the content, so the wrapper needs
    only its last chunks. Attributes it does not have are left alone."""
    if getattr(stream, "received_finish_reason", None) is not None:
        return  # the end: the wrapper now builds the usage from what it kept
    chunks = getattr(stream, "chunks", None)
    if isinstance(chunks, list) and len(chunks) > 8 * _KEEP_DELIVERED:
        chunks[:] = [
            c for c in chunks[:-_KEEP_DELIVERED] if getattr(c, "usage", None) is not None
        ] + chunks[-_KEEP_DELIVERED:]
    if isinstance(getattr(stream, "response_uptil_now", None), str):
        stream.response_uptil_now = ""


@dataclass
class _Received:
    """What one streamed call has delivered so far.

    The text accumulates as UTF-8 bytes in one growing buffer: one small object per chunk
    (a list of strings) would cost several times the answer's size in memory."""

    model: Any
    started: float
    ceiling: int | None = None
    """Content chunks accepted before the stream is ended (each carries at least one token,
    so counting chunks never overstates the tokens received)."""
    buffer: bytearray = field(default_factory=bytearray)
    content_chunks: int = 0
    over_ceiling: bool = False
    last_usage: Any = None
    seen_finish: str | None = None
    first_at: float | None = None

    @property
    def text(self) -> str:
        return self.buffer.decode("utf-8")

    def elapsed_ms(self) -> int:
        return max(0, int((time.monotonic() - self.started) * 1000))

    def take(self, chunk: Any, on_delta: Callable[[str], None] | None) -> bool:
        """Take one chunk; False when it would pass the ceiling (it is then not taken)."""
        self.model = getattr(chunk, "model", None) or self.model
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            self.last_usage = usage
        for choice in getattr(chunk, "choices", None) or ():
            if getattr(choice, "finish_reason", None):
                self.seen_finish = choice.finish_reason
            delta = getattr(choice, "delta", None)
            text = getattr(delta, "content", None) if delta is not None else None
            if not text:
                continue
            if self.ceiling is not None and self.content_chunks >= self.ceiling:
                self.over_ceiling = True
                return False
            if self.first_at is None:
                self.first_at = time.monotonic()
            self.buffer += text.encode("utf-8")
            self.content_chunks += 1
            if on_delta is not None:
                try:
                    on_delta(text)
                except Exception as cb_err:
                    raise _CallbackFailed(cb_err) from cb_err
        return True


def _prompt_tokens(call: ProviderCall) -> int:
    """litellm's count of the prompt's tokens (0 when it cannot tell)."""
    try:
        return int(
            _import_litellm().token_counter(
                model=call.participant.model,
                messages=[{"role": m.role, "content": m.content} for m in call.messages],
            )
        )
    except Exception:
        return 0


def _cut_at_ceiling(got: _Received, call: ProviderCall, price: Price | None) -> ModelResponse:
    """The answer of a stream ended because it passed its output ceiling: the text up to it,
    marked cut off at its token limit. The provider sent no usage (the stream was ended
    before it), so the tokens are counted here: the chunks received and the prompt as
    litellm counts it."""
    tokens = TokenCount(input=_prompt_tokens(call), output=got.content_chunks)
    return _answer(got, price, tokens, StopReason.MAX_TOKENS, "length", reported=False)


def _finished(
    got: _Received, call: ProviderCall, price: Price | None, tokens: TokenCount, raw_finish: str,
    *, reported: bool,
) -> ModelResponse:
    """The answer of a call that finished with ``raw_finish``, streamed or not: one that ran
    past its output ceiling is marked cut off at its limit whatever the provider said."""
    stop = stop_reason_for(raw_finish)
    if call.output_ceiling is not None and tokens.output > call.output_ceiling:
        stop = StopReason.MAX_TOKENS  # the provider let it run past the limit asked for
    return _answer(got, price, tokens, stop, raw_finish, reported=reported)


def _answer(got: _Received, price: Price | None, tokens: TokenCount, stop: StopReason,
            finish: str, *, reported: bool) -> ModelResponse:
    """The response a stream's received text makes, with how it stopped and what it cost."""
    return ModelResponse(
        content=got.text,
        model=str(got.model),
        tokens=tokens,
        cost_usd=cost_of(price, tokens),
        price=price,
        duration_ms=got.elapsed_ms(),
        ttft_ms=None if got.first_at is None else max(0, int((got.first_at - got.started) * 1000)),
        stop_reason=stop,
        finish_reason=finish,
        usage_reported=reported,
    )


_NO_FINISH = "stream ended before a finish_reason was received"
"""What newer litellm releases raise (inside a ``MidStreamFallbackError``) when a stream ends
cleanly without a finish chunk; older ones reported such a stream as finished ("stop")."""


def _ended_without_finish(e: BaseException) -> bool:
    """Whether litellm's exception only says the stream closed with no finish reason: that is
    the same fault :func:`_judge` finds in a stream litellm let through (``truncated`` or
    ``empty``), not a connection that broke mid-stream."""
    chain = list(_chain(e))
    return any(type(x).__name__ == "MidStreamFallbackError" for x in chain) and any(
        _NO_FINISH in str(x).lower() for x in chain
    )


def _cut_short(
    got: _Received,
    call: ProviderCall,
    price: Price | None,
    reported: TokenCount | None,
    raw_finish: str | None = None,
) -> ProviderCallError:
    """The fault of a stream that ended with no text or no finish reason: ``truncated`` keeps
    the partial text (it may be incomplete), ``empty`` had none. Only usage the provider
    ``reported`` is charged; none reported, the fault costs nothing."""
    content, who = got.text, f"{call.participant.name} ({call.participant.model})"
    what = "an empty reply" if raw_finish is None else f"no text (finish {raw_finish!r})"
    return ProviderCallError(
        "truncated" if content else "empty",
        f"{who} ended its stream with no finish reason (cut short)" if content
        else f"{who} sent {what}",
        partial_text=content,
        tokens=reported or TokenCount(),
        cost_usd=cost_of(price, reported) if reported is not None else 0.0,
        duration_ms=got.elapsed_ms(),
        model=got.model,
    )


def _usage(got: _Received, stream: Any) -> tuple[bool, TokenCount]:
    """Whether the provider itself reported usage (a chunk of its own carried it; litellm may
    estimate usage it did not send), and the tokens the stream last carried."""
    provider_chunks = getattr(stream, "chunks", None)
    if provider_chunks is not None:
        reported = any(getattr(c, "usage", None) is not None for c in provider_chunks)
    else:
        reported = got.last_usage is not None
    return reported, _tokens(got.last_usage)


def _judge(
    got: _Received, stream: Any, call: ProviderCall, price: Price | None, *, mocked: bool
) -> ModelResponse:
    """The answer a finished stream gave, or the fault it really was.

    litellm fills in finish_reason "stop" and estimated usage when a stream is cut short, so the
    truth is read from the stream wrapper: the finish reason the provider really sent and
    whether a provider chunk carried usage. litellm's mock_response sets neither, so for mocks
    the yielded values are trusted. No text is an ``empty`` fault; text with no finish reason
    was cut short (it may be incomplete): a ``truncated`` fault keeping the partial text.
    """
    reported, tokens = _usage(got, stream)
    raw_finish = getattr(stream, "received_finish_reason", got.seen_finish)
    if raw_finish is None and (reported or mocked):
        raw_finish = got.seen_finish
        reported = reported or got.last_usage is not None
    if not got.buffer or raw_finish is None:
        raise _cut_short(got, call, price, tokens if reported else None, raw_finish)
    if not reported and tokens.output < got.content_chunks:
        tokens = TokenCount(input=tokens.input, output=got.content_chunks)
    return _finished(got, call, price, tokens, raw_finish, reported=reported)


def _cut_at_cap(
    got: _Received, call: ProviderCall, cap: BodyCap, price: Price | None
) -> ModelResponse:
    """The answer of a body that passed its cap: the text that arrived, marked cut off at its
    token limit. The body's usage never arrived, so the tokens are counted here: the prompt,
    and at least the ceiling's worth of output (the provider sent more than the ceiling
    allows for)."""
    got.buffer += cap.salvaged_text().encode("utf-8")
    out = max(call.output_ceiling or 0, _text_tokens(call, got.text))
    tokens = TokenCount(input=_prompt_tokens(call), output=out)
    return _answer(got, price, tokens, StopReason.MAX_TOKENS, "length", reported=False)


def _broken_off(
    e: BaseException, call: ProviderCall, partial: str, duration_ms: int
) -> ProviderCallError:
    """A body that broke off before it was whole: a ``mid_stream`` failure, as a stream that
    breaks is, keeping the text that arrived."""
    return ProviderCallError(
        "mid_stream",
        _MESSAGES["mid_stream"].format(
            who=f"{call.participant.name} ({call.participant.model})",
            chars=len(partial),
            detail=_describe(e),
        ),
        partial_text=partial,
        duration_ms=duration_ms,
        model=call.participant.model,
    )


def _judge_plain(
    got: _Received, response: Any, call: ProviderCall, price: Price | None
) -> ModelResponse:
    """The answer a non-streamed response gave, or the fault it really was, judged as a
    stream's is (:func:`_judge`): no text is ``empty``, no finish reason ``truncated``, an
    answer past the output ceiling is marked cut off at its limit. Usage the body lacks is
    counted here (the prompt and the text as litellm counts them), marked not reported."""
    choices = getattr(response, "choices", None) or [None]
    message = getattr(choices[0], "message", None)
    text = getattr(message, "content", None)
    if isinstance(text, str):
        got.buffer += text.encode("utf-8")
    got.model = getattr(response, "model", None) or got.model
    usage = getattr(response, "usage", None)
    tokens = _tokens(usage)
    reported = tokens.total > 0
    if not reported:
        tokens = TokenCount(input=_prompt_tokens(call), output=_text_tokens(call, got.text))
    raw_finish = getattr(choices[0], "finish_reason", None)
    if not got.buffer or not raw_finish:
        raise _cut_short(got, call, price, tokens if reported else None, raw_finish or None)
    return _finished(got, call, price, tokens, raw_finish, reported=reported)


def _text_tokens(call: ProviderCall, text: str) -> int:
    """litellm's count of the tokens of ``text`` (0 when it cannot tell)."""
    if not text:
        return 0
    try:
        return int(_import_litellm().token_counter(model=call.participant.model, text=text))
    except Exception:
        return 0
