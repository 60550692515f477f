"""The shared text rules: the same-point key and the one truncator every view cuts with."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from forge_ledger.domain.text import clip, text_key


def test_text_key_ignores_case_and_spacing() -> None:
    assert text_key("  Add a\n  RETRY budget ") == text_key("add a retry budget")
    assert text_key("Straße") == text_key("STRASSE")


def test_clip_keeps_short_text_and_marks_a_cut() -> None:
    assert clip("a  b\nc", 10) == "a b c"
    assert clip("abcdefghij", 5) == "abcd…"
    assert clip("abc defgh", 5) == "abc …"
    assert clip("abc defgh", 5, rstrip=True) == "abc…"
    assert clip("x" * 130, 120, ellipsis="...", collapse=False) == "x" * 117 + "..."
    assert clip("a  b", 10, collapse=False) == "a  b"


@given(st.text(), st.integers(min_value=1, max_value=40))
def test_clip_fits_the_limit(text: str, limit: int) -> None:
    out = clip(text, limit)
    assert len(out) <= limit
    flat = " ".join(text.split())
    assert out == flat or (out.endswith("…") and flat.startswith(out[:-1]))
