"""Model calls: one streamed completion per attempt, classified failures, recorded prices.

``providers`` is an edge of the architecture and ``_litellm`` the only module importing
litellm — lazily, on the first call — so importing this package stays cheap and offline.
"""

from __future__ import annotations

from ._call import Provider, ProviderCall, retry_delay, stop_reason_for
from ._errors import RETRYABLE_TYPES, ErrorType, ProviderCallError, scrub_secrets
from ._litellm import (
    LOCAL_PLACEHOLDER_KEY,
    OFFLINE_ENV,
    LiteLLMProvider,
    api_key_names,
    classify_exception,
    configure_offline_env,
    missing_keys,
    preload_client,
    table_price,
)
from ._pricing import cost_of, price_from_table_entry, recost, resolve_price

__all__ = [
    "LOCAL_PLACEHOLDER_KEY",
    "OFFLINE_ENV",
    "RETRYABLE_TYPES",
    "ErrorType",
    "LiteLLMProvider",
    "Provider",
    "ProviderCall",
    "ProviderCallError",
    "api_key_names",
    "classify_exception",
    "configure_offline_env",
    "cost_of",
    "get_provider",
    "missing_keys",
    "preload_client",
    "price_from_table_entry",
    "recost",
    "resolve_price",
    "retry_delay",
    "scrub_secrets",
    "stop_reason_for",
    "table_price",
]


def get_provider() -> Provider:
    """The real provider with the offline-safe litellm settings (applied before its import)."""
    configure_offline_env()
    return LiteLLMProvider()
