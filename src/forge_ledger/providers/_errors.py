"""One failed model call, classified, and the scrubbing that keeps secrets out of it.

The orchestrator records every failed attempt as an event, so the error must say *what kind*
of failure it was (to decide on a retry), keep what was already streamed (a mid-stream
failure is still evidence), and never carry an API key into the ledger, a log or a terminal.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Literal

from ..domain.text import clip
from ..domain.values import TokenCount
from ..errors import ProviderError

__all__ = [
    "RETRYABLE_TYPES",
    "ErrorType",
    "ProviderCallError",
    "scrub_secrets",
]

ErrorType = Literal[
    "rate_limit",
    "server_error",
    "timeout",
    "connection",
    "auth",
    "bad_request",
    "context_window",
    "mid_stream",
    "truncated",
    "empty",
    "unknown",
    "budget_time",
    "budget_cost",
    "budget_calls",
]

RETRYABLE_TYPES: frozenset[str] = frozenset(
    {"rate_limit", "server_error", "timeout", "connection", "mid_stream", "truncated", "empty"}
)
"""Failures that may go away on another attempt; auth, bad requests and context overflows won't."""

_MAX_MESSAGE = 400

# Bearer tokens and the common key shapes (OpenAI/Anthropic ``sk-…``, Google ``AIza…``,
# GitHub/HF/Groq/xAI tokens) — matched even when no environment variable holds them.
_TOKEN_PATTERNS = (
    re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_\-]{6,}"),
    re.compile(r"\bAIza[0-9A-Za-z_\-]{20,}"),
    re.compile(r"\b(?:ghp|gho|ghs|hf|gsk|xai)_[A-Za-z0-9]{10,}"),
    re.compile(r"(?i)\b(bearer|api[-_ ]?key[\"']?\s*[:=]\s*[\"']?)\s*[A-Za-z0-9._\-]{8,}"),
)
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD", re.IGNORECASE)
REDACTED = "[REDACTED]"


def _secret_values(environ: Mapping[str, str]) -> list[str]:
    values = {
        v
        for k, v in environ.items()
        if _SECRET_NAME.search(k) and len(v) >= 6 and v.lower() not in {"true", "false"}
    }
    return sorted(values, key=len, reverse=True)


def scrub_secrets(text: str, environ: Mapping[str, str] | None = None) -> str:
    """Replace key-like tokens and the values of secret-named env vars with ``[REDACTED]``.

    ``environ`` defaults to ``os.environ`` (read at call time: keys may be set after import).
    """
    env = os.environ if environ is None else environ
    for value in _secret_values(env):
        text = text.replace(value, REDACTED)
    for pattern in _TOKEN_PATTERNS:
        if pattern.groups:
            text = pattern.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
        else:
            text = pattern.sub(REDACTED, text)
    return text


def one_line(text: str, limit: int = _MAX_MESSAGE) -> str:
    """Collapse whitespace and cap the length, so an error fits one terminal line."""
    return clip(text, limit)


class ProviderCallError(ProviderError):
    """One failed attempt of one model call, classified; the message never contains secrets."""

    def __init__(
        self,
        error_type: ErrorType,
        message: str,
        *,
        retryable: bool | None = None,
        retry_after_secs: float | None = None,
        partial_text: str = "",
        tokens: TokenCount | None = None,
        cost_usd: float = 0.0,
        duration_ms: int = 0,
        status_code: int | None = None,
        model: str | None = None,
    ) -> None:
        clean = one_line(scrub_secrets(message))
        super().__init__(clean)
        self.error_type: ErrorType = error_type
        self.message = clean
        self.retryable = error_type in RETRYABLE_TYPES if retryable is None else retryable
        self.retry_after_secs = retry_after_secs
        self.partial_text = partial_text
        self.tokens = tokens if tokens is not None else TokenCount()
        self.cost_usd = cost_usd
        self.duration_ms = duration_ms
        self.status_code = status_code
        self.model = model

    def __repr__(self) -> str:
        return (
            f"ProviderCallError(error_type={self.error_type!r}, message={self.message!r}, "
            f"retryable={self.retryable}, retry_after_secs={self.retry_after_secs}, "
            f"partial_chars={len(self.partial_text)})"
        )
