"""Text rules every layer shares: when two phrasings count as the same."""

from __future__ import annotations

__all__ = ["text_key"]


def text_key(text: str) -> str:
    """``text`` case-folded with its whitespace runs collapsed to one space.

    Two texts with the same key say the same thing for counting purposes (a suggestion raised
    by two critics, a vote's reasoning restated): capitals and line breaks do not make a new
    point.
    """
    return " ".join(text.casefold().split())

