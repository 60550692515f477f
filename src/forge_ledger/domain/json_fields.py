"""The JSON form of a dataclass, field by field: one rule for every ``--json`` result type.

A result type lists what it shows instead of writing its dict out by hand: by default its
fields in declaration order; ``json_keys`` names the attributes (fields or properties) in the
order the JSON lists them, ``...`` standing for the fields it does not name, in declaration
order (``("session_id", "ok", ...)``: a property after the first field); ``json_names``
renames a key. A value the fields cannot say (``problem or None``) is set over the generic
form, ``{**super().as_json(), "problem": …}``, which keeps the key where the generic form put
it, so the output's key order never changes.

Values become JSON values one rule for all: a nested object by its own ``as_json`` (a plain
dataclass field by field, a pydantic model by its JSON dump), tuples and lists as lists, a
time in ISO 8601, a path as text; anything else (numbers, text, ``None``, dicts) stays as it
is.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import fields, is_dataclass
from datetime import datetime
from pathlib import PurePath
from types import EllipsisType, MappingProxyType
from typing import Any, ClassVar

__all__ = ["JsonFields", "Key", "fields_json", "json_value"]

Key = str | EllipsisType
"""An attribute's name, or ``...`` for the fields not named."""


def json_value(value: Any) -> Any:
    """``value`` as a JSON value (see the module's rules)."""
    as_json = getattr(value, "as_json", None)
    if callable(as_json) and not isinstance(value, type):
        return as_json()
    if is_dataclass(value) and not isinstance(value, type):
        return fields_json(value)
    if _is_model(value):
        return value.model_dump(mode="json")
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, PurePath):
        return str(value)
    return value


def _is_model(value: Any) -> bool:
    """``value`` is a pydantic model. A process that made none has not loaded pydantic's models
    module, and a listing of plain rows must not load it just to find that out."""
    models = sys.modules.get("pydantic.main")
    return models is not None and isinstance(value, models.BaseModel)


def _expanded(obj: Any, keys: Sequence[Key] | None) -> list[str]:
    """``keys`` with ``...`` replaced by the fields ``keys`` does not name (all by default)."""
    rest = [f.name for f in fields(obj) if keys is None or f.name not in keys]
    if keys is None:
        return rest
    return [name for key in keys for name in (rest if key is ... else [key])]


def fields_json(
    obj: Any,
    *,
    keys: Sequence[Key] | None = None,
    names: Mapping[str, str] | None = None,
    exclude: Collection[str] = (),
) -> dict[str, Any]:
    """The attributes ``keys`` of ``obj`` (default: its dataclass fields, in order; ``...``:
    the fields not named) as JSON values, each under its name in ``names`` or its own,
    leaving out those in ``exclude``."""
    renamed = names or {}
    return {
        renamed.get(name, name): json_value(getattr(obj, name))
        for name in _expanded(obj, keys)
        if name not in exclude
    }


class JsonFields:
    """Mixin for a dataclass whose ``as_json`` is its fields (see :func:`fields_json`).

    ``json_keys``: the attributes shown, in order (``None``: every field, in declaration
    order; ``...`` in it: the fields it does not name); ``json_names``: a key for an
    attribute whose JSON name differs.
    """

    json_keys: ClassVar[tuple[Key, ...] | None] = None
    json_names: ClassVar[Mapping[str, str]] = MappingProxyType({})

    def as_json(self) -> dict[str, Any]:
        return fields_json(self, keys=self.json_keys, names=self.json_names)
