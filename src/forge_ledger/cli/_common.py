"""Shared CLI plumbing: ``--store``/``--json`` options, output helpers, error handling.

Rules every command follows: with ``--json`` exactly one JSON document goes to stdout and
everything else (progress, warnings) to stderr; a user mistake is one line on stderr and a
non-zero exit, never a traceback. Nothing here imports litellm.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.console import Console

from ..errors import UsageError
from ..ledger import Ledger

__all__ = [
    "HMAC_KEY_ENV",
    "emit_json",
    "err_console",
    "hmac_key",
    "json_option",
    "open_ledger",
    "out_console",
    "store_option",
]

F = TypeVar("F", bound=Callable[..., Any])

out_console = Console(highlight=False, soft_wrap=True)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


HMAC_KEY_ENV = "FORGE_LEDGER_HMAC_KEY"
"""Environment variable holding the key that signs seals (HMAC) and checks them."""


def hmac_key(env_name: str = HMAC_KEY_ENV) -> bytes | None:
    """The seal key from the environment, or None when it is not set."""
    value = os.environ.get(env_name)
    return value.encode("utf-8") if value else None


def store_option(f: F) -> F:
    """``--store PATH|URL`` (env ``FORGE_LEDGER_STORE``; default .project-memory/…sqlite)."""
    return click.option(
        "--store",
        "store",
        envvar="FORGE_LEDGER_STORE",
        default=None,
        metavar="PATH|URL",
        help="Event store: a SQLite file path or a postgresql:// URL "
        "[env FORGE_LEDGER_STORE; default .project-memory/forge-ledger.sqlite].",
    )(f)


def json_option(f: F) -> F:
    return click.option(
        "--json", "as_json", is_flag=True, help="Print exactly one JSON document on stdout."
    )(f)


def open_ledger(store: str | None, *, create: bool = False) -> Ledger:
    """Open the ledger; read-only commands pass ``create=False`` (a missing file is an error)."""
    return Ledger(store, create=create)


def emit_json(doc: Any) -> None:
    sys.stdout.write(json.dumps(doc, ensure_ascii=False, indent=2, default=str))
    sys.stdout.write("\n")
    sys.stdout.flush()


def parse_iso(value: str, option: str) -> Any:
    from datetime import datetime

    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"{option} {value!r} is not an ISO 8601 time", hint="e.g. 2026-01-09T10:30:00Z"
        ) from None
