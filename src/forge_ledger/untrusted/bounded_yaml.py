"""The one YAML loader: bounded before anything big is built.

Every YAML file forge-ledger reads (``import``, participants files, fake-server scripts,
``verify-export``, exports found on disk) goes through :func:`load_yaml`. A YAML file is
untrusted input: a 1 KB file of nested anchors and aliases ("billion laughs") describes a
billion nodes, and a huge file costs memory in proportion to its size. So, in this order:

1. the file size is capped (checked with ``stat`` before reading, and on the text);
2. the document is streamed as parser *events* (libyaml when available) while counting
   nodes **after alias expansion** (an alias counts as the whole subtree it repeats) and the
   nesting depth; the first bound crossed stops the scan, having built nothing but the
   current event;
3. only then is it loaded with the safe loader (``SafeLoader``: plain data, never objects).

Limits default to :data:`DEFAULT_LIMITS` and can be changed by environment variables
(``FORGE_LEDGER_YAML_MAX_BYTES``, ``FORGE_LEDGER_YAML_MAX_NODES``,
``FORGE_LEDGER_YAML_MAX_DEPTH``) for trusted files that are larger than usual.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError, InputLimitError, UsageError

__all__ = [
    "DEFAULT_LIMITS",
    "YamlLimits",
    "load_settings_file",
    "load_yaml",
    "read_yaml_file",
    "yaml_limits",
]

_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

ENV_MAX_BYTES = "FORGE_LEDGER_YAML_MAX_BYTES"
ENV_MAX_NODES = "FORGE_LEDGER_YAML_MAX_NODES"
ENV_MAX_DEPTH = "FORGE_LEDGER_YAML_MAX_DEPTH"
LIBYAML_MAX_DEPTH = 1000
"""libyaml's own nesting cap (its scanner stops deeper flow collections whatever ours is)."""


@dataclass(frozen=True)
class YamlLimits:
    """Bounds on one YAML document (see the module docstring)."""

    max_bytes: int = 16 * 1024 * 1024
    max_nodes: int = 250_000
    max_depth: int = 64


DEFAULT_LIMITS = YamlLimits()

_SUFFIXES = {"k": 1024, "m": 1024**2, "g": 1024**3}


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    scale = _SUFFIXES.get(raw[-1], 1)
    digits = raw[:-1] if raw[-1] in _SUFFIXES else raw
    try:
        value = int(digits) * scale
    except ValueError:
        value = 0
    if value <= 0:
        raise UsageError(
            f"{name}={raw!r} is not a positive number", hint="e.g. 32M, 500000 or 100"
        )
    return value


def yaml_limits() -> YamlLimits:
    """The limits in force: the defaults, overridden by the environment variables."""
    return YamlLimits(
        max_bytes=_env_int(ENV_MAX_BYTES, DEFAULT_LIMITS.max_bytes),
        max_nodes=_env_int(ENV_MAX_NODES, DEFAULT_LIMITS.max_nodes),
        max_depth=_env_int(ENV_MAX_DEPTH, DEFAULT_LIMITS.max_depth),
    )


def _too_big(name: str, what: str, limit: int, env: str) -> InputLimitError:
    return InputLimitError(
        f"{name}: {what} (limit {limit:,})",
        hint=f"refused before loading; if the file is trusted, raise {env}",
    )


def read_yaml_file(path: Path, *, limits: YamlLimits | None = None) -> str:
    """The text of ``path``, refusing a file over the size cap without reading it.

    ``OSError`` and ``UnicodeDecodeError`` are left to the caller, who knows how to name the
    file's role in its message.
    """
    lim = limits or yaml_limits()
    size = path.stat().st_size
    if size > lim.max_bytes:
        raise _too_big(str(path), f"{size:,} bytes is too large", lim.max_bytes, ENV_MAX_BYTES)
    with path.open("rb") as fh:
        data = fh.read(lim.max_bytes + 1)
    if len(data) > lim.max_bytes:  # it grew while we looked
        raise _too_big(str(path), "file is too large", lim.max_bytes, ENV_MAX_BYTES)
    return data.decode("utf-8")


def _scan(text: str, name: str, lim: YamlLimits) -> None:
    """Count expanded nodes and depth from parser events; raise at the first bound crossed.

    ``sizes`` holds each anchor's expanded subtree size; ``open_nodes`` the node count at the
    start of each open collection with its anchor, so its size is known at its end event.
    """
    try:
        _count(yaml.parse(text, Loader=_Loader), name, lim)
    except yaml.MarkedYAMLError as exc:
        # libyaml has a nesting cap of its own, which its scanner can reach before the parser
        # hands us the event that crosses ours (flow collections are scanned ahead): the same
        # bound, so the same message, whichever style the file nests in.
        if "maximum nesting depth" not in str(exc.problem):
            raise
        if lim.max_depth < LIBYAML_MAX_DEPTH:
            raise _too_big(name, "nested too deeply", lim.max_depth, ENV_MAX_DEPTH) from None
        raise InputLimitError(  # a limit raised past libyaml's own cannot help
            f"{name}: nested too deeply (limit {LIBYAML_MAX_DEPTH:,}, the YAML parser's own)",
            hint="refused before loading; flatten the file",
        ) from None


def _count(events: Iterable[yaml.Event], name: str, lim: YamlLimits) -> None:
    nodes = 0
    sizes: dict[str, int] = {}
    open_nodes: list[tuple[int, str | None]] = []
    for event in events:
        if isinstance(event, yaml.AliasEvent):
            nodes += sizes.get(str(event.anchor), 1)
        elif isinstance(event, yaml.ScalarEvent):
            nodes += 1
            if event.anchor is not None:
                sizes[event.anchor] = 1
        elif isinstance(event, yaml.CollectionStartEvent):
            nodes += 1
            open_nodes.append((nodes, event.anchor))
            if len(open_nodes) > lim.max_depth:
                raise _too_big(name, "nested too deeply", lim.max_depth, ENV_MAX_DEPTH)
        elif isinstance(event, yaml.CollectionEndEvent):
            start, anchor = open_nodes.pop()
            if anchor is not None:
                sizes[anchor] = nodes - start + 1
        if nodes > lim.max_nodes:
            raise _too_big(
                name, "too many YAML nodes after alias expansion", lim.max_nodes, ENV_MAX_NODES
            )


def load_yaml(text: str, *, name: str, limits: YamlLimits | None = None) -> Any:
    """Load one YAML document safely within ``limits`` (default: :func:`yaml_limits`).

    Raises :class:`~forge_ledger.errors.InputLimitError` when a bound is crossed, and
    ``yaml.YAMLError`` for invalid YAML (callers word that error for their file's role).
    """
    lim = limits or yaml_limits()
    if len(text) > lim.max_bytes or len(text.encode("utf-8")) > lim.max_bytes:
        raise _too_big(name, "text is too large", lim.max_bytes, ENV_MAX_BYTES)
    _scan(text, name, lim)
    return yaml.load(text, Loader=_Loader)  # a SafeLoader: plain data only


def load_settings_file(path: Path, role: str | None = None) -> Any:
    """A YAML file a person wrote to set something up (a participants file, a study plan, a
    topics file), read and loaded within the bounds. A file that cannot be read, is not UTF-8
    or is not YAML raises a one-line :class:`~forge_ledger.errors.ConfigError` naming it
    (``role``: "plan" says "the plan file"); a crossed bound raises
    :class:`~forge_ledger.errors.InputLimitError`."""
    try:
        return load_yaml(read_yaml_file(path), name=str(path))
    except OSError as e:
        named = f"the {role} file {path}" if role else str(path)
        raise ConfigError(f"cannot read {named}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not UTF-8 text", hint="save it as UTF-8") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path} is not valid YAML: {str(e).splitlines()[0]}") from None
