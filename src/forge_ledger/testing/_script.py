"""Reply scripts of the fake OpenAI-compatible server.

A script maps a model name to an ordered list of reply rules. For each request the server
takes the first rule of that model whose ``match`` regex is found in the last user message
and whose ``times`` budget is not spent; model ``"*"`` is the fallback for unknown names.
Scripts are validated with pydantic so a typo in a YAML file is one clear line, not a
confusing reply in the middle of a deliberation.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..errors import ConfigError, dotted_loc, validation_summary
from ..untrusted.bounded_yaml import load_yaml, read_yaml_file

__all__ = [
    "Fault",
    "ReplyRule",
    "Script",
    "ScriptError",
    "bundled_script",
    "bundled_script_names",
    "load_script",
]

WILDCARD = "*"


class ScriptError(ConfigError):
    """A fake-server script is missing or invalid."""


class Fault(StrEnum):
    """Failures the server can inject instead of (or in the middle of) a normal reply."""

    RATE_LIMIT = "rate_limit"
    """HTTP 429 with a ``Retry-After`` header."""
    SERVER_ERROR = "server_error"
    """HTTP 500."""
    UNAVAILABLE = "unavailable"
    """HTTP 503."""
    HANG = "hang"
    """Never answers (not even headers) until the server stops."""
    STALL = "stall"
    """Streams about half of the content, then keeps the connection open silently."""
    MALFORMED_CHUNK = "malformed_chunk"
    """Streams about half of the content, then a chunk that is not JSON, then closes."""
    DISCONNECT = "disconnect"
    """Streams about half of the content, then closes without ending the chunked body."""
    EMPTY = "empty"
    """HTTP 200 with an empty body."""
    NO_FINISH = "no_finish"
    """Streams all the content but no finish reason and no usage chunk."""
    UNAUTHORIZED = "unauthorized"
    """HTTP 401 whose message echoes the bearer token received (as some providers do)."""
    FORBIDDEN = "forbidden"
    """HTTP 403: the key is valid but may not use this model."""
    UNKNOWN_MODEL = "unknown_model"
    """HTTP 404 ``model_not_found``, as OpenAI answers for a model name it does not serve."""
    CONTEXT_WINDOW = "context_window"
    """HTTP 400 ``context_length_exceeded`` with OpenAI's wording (litellm maps it to
    ``ContextWindowExceededError``)."""


class ReplyRule(BaseModel):
    """One scripted reply (or fault) for one model."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    match: str | None = None
    """Regex searched in the last user message; ``None`` matches every request."""
    content: str = ""
    times: Annotated[int, Field(ge=1)] | None = None
    """How many requests this rule may answer; ``None`` = unlimited."""
    latency: Annotated[float, Field(ge=0)] | None = None
    """Seconds before the first byte; ``None`` = the server's default latency."""
    chunk_delay: Annotated[float, Field(ge=0)] = 0.0
    """Seconds between streamed chunks."""
    fault: Fault | None = None
    retry_after: Annotated[float, Field(ge=0)] = 1.0
    """Value of the ``Retry-After`` header sent with ``rate_limit``."""
    finish_reason: str = "stop"
    error_message: str | None = None
    """Message of the JSON error body for the HTTP faults (a default otherwise)."""

    @field_validator("match")
    @classmethod
    def _valid_regex(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as e:
                raise ValueError(f"invalid regex {v!r}: {e}") from None
        return v

    def matches(self, text: str) -> bool:
        return self.match is None or re.search(self.match, text) is not None


class Script(BaseModel):
    """Model name → ordered reply rules (a plain string is shorthand for ``{content: …}``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    models: dict[str, tuple[ReplyRule, ...]] = Field(default_factory=dict)

    @field_validator("models", mode="before")
    @classmethod
    def _normalise(cls, v: Any) -> Any:
        if not isinstance(v, Mapping):
            return v
        out: dict[str, Any] = {}
        for name, rules in v.items():
            key = str(name).removeprefix("openai/")
            if isinstance(rules, str | Mapping):
                rules = [rules]
            if isinstance(rules, list | tuple):
                rules = [{"content": r} if isinstance(r, str) else r for r in rules]
            out[key] = rules
        return out

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> Script:
        """Build from ``{model: [rules…]}`` or ``{"models": {…}}``; raises ScriptError."""
        payload = data if set(data) == {"models"} else {"models": data}
        try:
            return cls.model_validate(payload)
        except ValidationError as e:
            problem = validation_summary(
                e, where=lambda loc: dotted_loc(loc[1:]) if loc[1:] else "script"
            )
            raise ScriptError(
                f"invalid fake-server script at {problem}",
                hint="each model maps to a list of rules with match/content/times/latency/"
                "chunk_delay/fault/retry_after/finish_reason",
            ) from None

    def rules_for(self, model: str) -> tuple[ReplyRule, ...] | None:
        name = model.removeprefix("openai/")
        if name in self.models:
            return self.models[name]
        return self.models.get(WILDCARD)


def pick_rule(
    script: Script, used: dict[tuple[str, int], int], model: str, text: str
) -> tuple[int, ReplyRule] | None:
    """The rule answering a request for ``model`` whose last user message is ``text``: the
    first of the model's rules that matches and whose ``times`` budget (counted in ``used``,
    updated here) is not spent. The fake server and ``ScriptedProvider`` both answer by it."""
    rules = script.rules_for(model)
    if rules is None:
        return None
    for i, rule in enumerate(rules):
        key = (model, i)
        if rule.times is not None and used.get(key, 0) >= rule.times:
            continue
        if rule.matches(text):
            used[key] = used.get(key, 0) + 1
            return i, rule
    return None


def load_script(source: str | Path | Mapping[str, Any] | Script) -> Script:
    """A script from a YAML/JSON file path, a mapping, or the name of a bundled script."""
    if isinstance(source, Script):
        return source
    if isinstance(source, Mapping):
        return Script.from_mapping(source)
    path = Path(source)
    if not path.exists() and str(source) in bundled_script_names():
        return bundled_script(str(source))
    try:
        text = read_yaml_file(path)
    except FileNotFoundError:
        raise ScriptError(
            f"fake-server script {str(source)!r} not found",
            hint=f"give a YAML/JSON file or one of: {', '.join(bundled_script_names())}",
        ) from None
    except OSError as e:
        raise ScriptError(f"cannot read fake-server script {str(source)!r}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ScriptError(f"fake-server script {str(source)!r} is not UTF-8 text") from None
    return _parse(text, str(source))


def _parse(text: str, name: str) -> Script:
    try:
        data = json.loads(text) if name.endswith(".json") else load_yaml(text, name=name)
    except (yaml.YAMLError, json.JSONDecodeError) as e:
        line = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ScriptError(f"fake-server script {name!r} is not valid YAML/JSON: {line}") from None
    if not isinstance(data, Mapping):
        raise ScriptError(
            f"fake-server script {name!r} must be a mapping of model name to reply rules"
        )
    return Script.from_mapping(data)


def bundled_script_names() -> list[str]:
    """Names of the scripts shipped in ``forge_ledger/testing/scripts`` (without extension)."""
    root = resources.files(__package__).joinpath("scripts")
    return sorted(
        p.name.rsplit(".", 1)[0]
        for p in root.iterdir()
        if p.name.endswith((".yaml", ".yml", ".json"))
    )


def bundled_script(name: str) -> Script:
    root = resources.files(__package__).joinpath("scripts")
    for ext in (".yaml", ".yml", ".json"):
        entry = root.joinpath(name + ext)
        if entry.is_file():
            return _parse(entry.read_text(encoding="utf-8"), name + ext)
    raise ScriptError(
        f"no bundled fake-server script named {name!r}",
        hint=f"choose one of: {', '.join(bundled_script_names())}",
    )
