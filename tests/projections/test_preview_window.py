"""``show``'s one-line preview reads only a window of the answer, and still says exactly what
the whole-line rule said: checked against that rule, kept here as the reference."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from forge_ledger.domain.text import clip
from forge_ledger.projections.show_view import PREVIEW_CHARS, PREVIEW_SLACK, preview

_BREAK = re.compile("[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def reference_preview(text: str, width: int = PREVIEW_CHARS) -> str:
    """The preview as it was first written: the whole first non-empty line, collapsed, cut."""
    start = len(text) - len(text.lstrip())
    end = _BREAK.search(text, start)
    return clip(text[start : end.start() if end is not None else len(text)], width)


# every kind of whitespace and line break, so runs, breaks and blank starts are common
_SPACES = " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u2028\u2029\u3000"
_CHARS = st.one_of(
    st.sampled_from(_SPACES), st.sampled_from("ab…é"), st.characters(codec="utf-8")
)


@given(
    st.lists(
        st.one_of(st.text(_CHARS, max_size=12), st.text(st.sampled_from(" xy\n"), max_size=300)),
        max_size=12,
    ).map("".join),
    st.integers(min_value=-2, max_value=90),
)
def test_preview_is_the_whole_line_rule(text: str, width: int) -> None:
    assert preview(text, width) == reference_preview(text, width)


@given(st.integers(min_value=0, max_value=400), st.integers(min_value=0, max_value=400),
       st.sampled_from(["", "\n", "\r\n", "\u2028", " \n "]), st.integers(1, 80))
def test_preview_of_long_lines_and_spacing(words: int, spaces: int, tail: str, width: int) -> None:
    text = " " * spaces + "w " * words + " " * spaces + tail + "second line"
    assert preview(text, width) == reference_preview(text, width)
    wide = "\t" * spaces + "x" * words
    assert preview(wide, width) == reference_preview(wide, width)


@given(st.integers(1, 80), st.integers(-2, 2), st.integers(-3, 3), st.integers(0, 3),
       st.sampled_from(["", "\n", "\u2029z"]))
def test_preview_when_the_window_ends_in_a_run_of_spaces(
    width: int, more: int, spaces: int, after: int, tail: str
) -> None:
    """The window's collapsed text about as long as the preview: only the line decides."""
    head = max(width + more, 0)
    window = width + PREVIEW_SLACK
    text = "x" * head + " " * max(window - head + spaces, 0) + "y" * after + tail
    assert preview(text, width) == reference_preview(text, width)


def test_preview_examples() -> None:
    assert preview("  \n\n  first   line  \nsecond") == "first line"
    assert preview("a" * 500, 10) == "a" * 9 + "…"
    assert preview("a " + " " * 500 + "b", 10) == "a b"
    assert preview("", 10) == ""
    assert preview(" \n \t ", 10) == ""
