"""Migrations of YAML session files to the current format (v1.2).

Applied on load, sequentially, exactly as the format's seed describes; the migrated document
is what gets validated and imported (and exporting it again writes v1.2).
"""

from __future__ import annotations

import copy
from typing import Any

from ..errors import ImportValidationError

__all__ = ["migrate", "migrate_v1_to_v12"]


def migrate_v1_to_v12(doc: dict[str, Any]) -> dict[str, Any]:
    """v1.0 → v1.2: ``mode`` standard; ``techniques_used`` becomes ``techniques_history``
    (category unknown, applied, source manual, iteration = position + 1); party and panel
    inactive; ``format_version`` 1.2. ``techniques_used`` is kept (legacy, in step)."""
    out = copy.deepcopy(doc)
    session = out.get("session")
    if not isinstance(session, dict):
        return out  # validation reports the missing session mapping
    session["mode"] = "standard"
    used = session.get("techniques_used") or []
    session["techniques_history"] = [
        {
            "iteration": i + 1,
            "technique_slug": slug,
            "category": "unknown",
            "suggested_reason": "migrated from v1.0",
            "applied": True,
            "source": "manual",
            "weak_axes": [],
        }
        for i, slug in enumerate(used if isinstance(used, list) else [])
    ]
    session["party_active"] = False
    session["party_history"] = []
    session["panel_active"] = False
    session["panel_history"] = []
    out["format_version"] = "1.2"
    return out


_MIGRATIONS = {"1.0": ("1.2", migrate_v1_to_v12)}


def migrate(doc: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """Apply migrations until v1.2; returns the document and the version it was read as."""
    version = str(doc.get("format_version", ""))
    original = version
    while version != "1.2":
        step = _MIGRATIONS.get(version)
        if step is None:
            raise ImportValidationError(
                f"format_version {version or '(missing)'!r} is not supported",
                hint="forge-ledger reads session files of format 1.0 and 1.2",
            )
        version, fn = step
        doc = fn(doc)
    return doc, original
