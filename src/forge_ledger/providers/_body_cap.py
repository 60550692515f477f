"""A cap on the size of a non-streamed response body, kept while the body is read.

A call nobody watches (no ``on_delta``) is asked for its whole answer in one response: one
JSON body parsed once costs a fraction of the client CPU of a stream parsed one chunk per
token. The body is untrusted, so it is bounded before it is parsed: an HTTP response hook on
the client the OpenAI SDK uses (``litellm.aclient_session``) counts the bytes of a JSON body
while they arrive, keeps them, and stops reading past the cap of the call in flight (a
context variable, so concurrent calls each keep their own). Streams (``text/event-stream``)
are left alone: the output ceiling bounds them chunk by chunk.

What a body that stopped early had sent (past its cap, or broken off) still holds the start
of the answer: :func:`salvaged_text` reads it from the kept bytes, the way a broken stream
keeps the text it delivered.

httpx and jiter are imported only when used (both come with litellm and the OpenAI SDK).
"""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BodyCap", "BodyTooLarge", "add_cap_hook", "body_cap_for", "current_cap"]

BYTES_PER_TOKEN = 32
"""Body bytes allowed per output token: a token is a few characters, each at most six bytes
once JSON-escaped (``\\uXXXX``), so an answer kept within its ceiling fits."""

BODY_OVERHEAD = 64 * 1024
"""Body bytes allowed besides the answer's text (ids, usage, the provider's own fields)."""


class BodyTooLarge(Exception):
    """A response body passed the cap of its call (raised while it is read)."""


@dataclass
class BodyCap:
    """One call's response body as it is read: its byte limit, what arrived of it (at most
    the limit), and how its reading ended."""

    limit: int
    received: bytearray = field(default_factory=bytearray)
    status: int | None = None
    """The HTTP status of the response whose body is read (None before one arrives)."""
    overflowed: bool = False
    complete: bool = False

    def take(self, part: bytes) -> None:
        """Keep ``part``; past the limit, keep up to it, mark the body overflowed, raise."""
        room = self.limit - len(self.received)
        self.received += part[: max(room, 0)]
        if len(part) > room:
            self.overflowed = True
            raise BodyTooLarge(f"response body over {self.limit} bytes")

    @property
    def broke_off(self) -> bool:
        """Whether a successful response's body started and ended before it was whole."""
        return (
            self.status is not None
            and 200 <= self.status < 300
            and not self.complete
            and not self.overflowed
        )

    @property
    def came_empty(self) -> bool:
        """Whether a successful response's body was whole and held nothing (an empty reply,
        as a stream that ends before its first chunk is)."""
        return (
            self.status is not None
            and 200 <= self.status < 300
            and self.complete
            and not bytes(self.received).strip()
        )

    def salvaged_text(self) -> str:
        """The answer's text in what arrived of the body ("" when none can be read): the
        incomplete JSON read leniently, its last string cut where the bytes end."""
        if not self.received:
            return ""
        import jiter

        try:
            doc = jiter.from_json(bytes(self.received), partial_mode="trailing-strings")
            content = doc["choices"][0]["message"]["content"]
        except Exception:
            return ""
        return content if isinstance(content, str) else ""


def body_cap_for(output_ceiling: int) -> BodyCap:
    """The cap of a call whose answer may have ``output_ceiling`` tokens."""
    return BodyCap(limit=max(output_ceiling, 0) * BYTES_PER_TOKEN + BODY_OVERHEAD)


_CAP: contextvars.ContextVar[BodyCap | None] = contextvars.ContextVar(
    "forge_ledger_body_cap", default=None
)


def current_cap() -> contextvars.ContextVar[BodyCap | None]:
    """The context variable holding the cap of the call in flight (None: no cap)."""
    return _CAP


def _capped(inner: Any, cap: BodyCap) -> Any:
    """``inner`` (an httpx async byte stream) read through ``cap``; an
    ``httpx.AsyncByteStream`` itself, as httpx reads only those asynchronously."""
    import httpx

    class CappedStream(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            async for part in inner:
                cap.take(part)
                yield part
            cap.complete = True

        async def aclose(self) -> None:
            await inner.aclose()

    return CappedStream()


async def _cap_body(response: Any) -> None:
    """httpx response hook: read a JSON body through the cap of the call in flight."""
    cap = _CAP.get()
    if cap is None or "text/event-stream" in response.headers.get("content-type", ""):
        return
    cap.status, cap.complete = response.status_code, False
    cap.received.clear()  # a redirect's body is not the answer's
    response.stream = _capped(response.stream, cap)


def add_cap_hook(client: Any) -> Any:
    """``client`` (an ``httpx.AsyncClient``) with the cap's response hook added."""
    client.event_hooks["response"] = [*client.event_hooks["response"], _cap_body]
    return client
