"""The catalogue of deliberation techniques (5whys, six-hats, moscow…).

A technique is suggested for the next refinement when an EMS axis is weak (see
:mod:`forge_ledger.engine.ems`). The catalogue is package data (``data/techniques.csv``) so it
can be read and extended without code; it is read once and cached, which keeps the engine
pure in the sense that matters: the same package always answers the same techniques.
"""

from __future__ import annotations

import csv
import functools
import io
from dataclasses import dataclass

from .._packaged import packaged_data

__all__ = ["Technique", "all_techniques", "get_technique"]


@dataclass(frozen=True)
class Technique:
    """One technique: ``slug`` (stable key recorded in events), ``category``, a one-line
    ``description`` for people and the ``prompt`` text given to participants."""

    slug: str
    category: str
    description: str
    prompt: str


@functools.cache
def _catalogue() -> tuple[Technique, ...]:
    text = packaged_data("techniques.csv").decode("utf-8")
    out: list[Technique] = []
    for row in csv.DictReader(io.StringIO(text)):
        out.append(
            Technique(
                slug=row["slug"].strip(),
                category=row["category"].strip(),
                description=row["description"].strip(),
                prompt=row["prompt"].strip(),
            )
        )
    return tuple(out)


def all_techniques() -> tuple[Technique, ...]:
    """Every technique, in catalogue order."""
    return _catalogue()


def get_technique(slug: str) -> Technique | None:
    """The technique with this slug, or ``None`` when the catalogue has none."""
    for t in _catalogue():
        if t.slug == slug:
            return t
    return None
