"""Topic labels and keyword matching: how the engine tells that two remarks are about one point.

Participants label the points they raise (``Opinion.topics``), critics name a section or a
category, voters list concerns. Labels are free text, so two remarks are about the same topic
when their *significant words* (three letters or more, minus common stop words) overlap by at
least half (Jaccard index ≥ 0.5, plain plurals folded): "rate limiting" matches "API
rate-limiting" but "API rate limiting" does not match "API authentication" (see
:func:`same_topic` for labels contained in one another). A text *mentions* a topic when it
contains at least half of the topic's significant words. Crude, deterministic and
explainable — which is what an audit trail needs; no model is asked to judge.
"""

from __future__ import annotations

import re

__all__ = ["OVERALL", "keywords", "mentions", "normalize", "same_topic"]

OVERALL = "overall"
"""The topic of a dissent that names no particular point."""

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    """the and for with that this are was were not but all any can has have had its into
    from than then them they their there these those what when which while who why how
    our out use using used should would could will may might must also more most very
    just only such some other about over under too per via one two you your it's
    dont does doesn isn aren""".split()  # noqa: SIM905
)


def normalize(label: str) -> str:
    """Lower case, punctuation folded to single spaces, at most 80 characters."""
    return " ".join(_WORD.findall(label.lower()))[:80].strip()


def _stem(word: str) -> str:
    """Fold a plain plural ("quotas" → "quota"; "access" stays)."""
    if len(word) > 4 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def keywords(text: str) -> frozenset[str]:
    """The significant words of ``text`` (plurals folded)."""
    return frozenset(
        _stem(w) for w in _WORD.findall(text.lower()) if len(w) >= 3 and w not in _STOP
    )


def same_topic(a: str, b: str) -> bool:
    """True when two labels name the same point.

    Equal labels, keywords overlapping by half (Jaccard ≥ 0.5), or a label of two or more
    significant words wholly contained in the other: "retention policy" is the point of
    "retention policy for the event log is missing" (a short tag beside the concern that
    spelled it out), while "API authentication" is not "API rate limiting".
    """
    na, nb = normalize(a), normalize(b)
    if na == nb:
        return True
    ka, kb = keywords(a), keywords(b)
    if not ka or not kb:
        return False
    small, large = (ka, kb) if len(ka) <= len(kb) else (kb, ka)
    if len(small) >= 2 and small <= large:
        return True
    return 2 * len(ka & kb) >= len(ka | kb)


def mentions(text: str, topic: str) -> bool:
    """True when ``text`` contains at least half of the significant words of ``topic``."""
    kt = keywords(topic)
    if not kt:
        return normalize(topic) in normalize(text) if normalize(topic) else False
    found = len(kt & keywords(text))
    return found >= 1 and 2 * found >= len(kt)
