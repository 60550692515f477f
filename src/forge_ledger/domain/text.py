"""Two small text rules every layer shares: when two phrasings count as the same, and how a
long text is cut to fit a line."""

from __future__ import annotations

__all__ = ["clip", "text_key"]


def text_key(text: str) -> str:
    """``text`` case-folded with its whitespace runs collapsed to one space.

    Two texts with the same key say the same thing for counting purposes (a suggestion raised
    by two critics, a vote's reasoning restated): capitals and line breaks do not make a new
    point.
    """
    return " ".join(text.casefold().split())


def clip(
    text: str, limit: int, *, ellipsis: str = "…", collapse: bool = True, rstrip: bool = False
) -> str:
    """``text`` cut to at most ``limit`` characters, ``ellipsis`` marking a cut.

    ``collapse`` first turns every whitespace run into one space, so the result fits one
    line; ``rstrip`` drops a space left just before the ellipsis. Text that fits is returned
    as it is (after collapsing), so short labels never gain an ellipsis.
    """
    flat = " ".join(text.split()) if collapse else text
    if len(flat) <= limit:
        return flat
    head = flat[: limit - len(ellipsis)]
    return (head.rstrip() if rstrip else head) + ellipsis
