"""Study plans written to files for the study tests: a panel file, and a plan over it.

:func:`write_plan` writes the plan most study tests run (three topics, the ``trio`` panel of
ana, ben and cleo, a ``named`` and an ``anonymous`` variant, a $5 budget) with the fields a
test changes; :func:`write_panel` writes a participants file on its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

__all__ = ["LOOPBACK", "PRICE", "write_panel", "write_plan"]

PRICE = {"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6}
LOOPBACK = "http://127.0.0.1:9/v1"
"""A base URL nothing answers at: for plans that are checked or run with a scripted provider."""


def write_panel(
    path: Path, url: str, *, priced: bool = True, names: Sequence[str] = ("ana", "ben", "cleo")
) -> Path:
    """A participants file of ``names`` (``openai/<name>`` at ``url``), priced or not."""
    people = [
        {"name": n, "model": f"openai/{n}", "api_base": url, **({"price": PRICE} if priced else {})}
        for n in names
    ]
    path.write_text(yaml.safe_dump({"participants": people}), encoding="utf-8")
    return path


def write_plan(folder: Path, url: str = LOOPBACK, **fields: Any) -> Path:
    """``plan.yaml`` in ``folder`` (beside its ``trio.yaml``): the plan above, ``fields``
    replacing its own."""
    write_panel(folder / "trio.yaml", url)
    doc: dict[str, Any] = {
        "name": "study",
        "topics": [{"title": "Retry policy"}, {"title": "Cache layout"}, {"title": "Log format"}],
        "panels": {"trio": "trio.yaml"},
        "variants": {"named": {}, "anonymous": {"anonymize": True}},
        "repeats": 1,
        "session": {"max_rounds": 6},
        "budget": {"usd": 5},
        **fields,
    }
    path = folder / "plan.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path
