"""The one rule for untrusted text on a terminal
(:func:`forge_ledger.untrusted.terminal_text.printable`)."""

from __future__ import annotations

import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from forge_ledger.untrusted.terminal_text import printable

_OBEYED = {"Cc", "Cs"}  # controls and lone surrogates
_BIDI = {"\u061c", "\u200e", "\u200f", *map(chr, range(0x202A, 0x202F)),
         *map(chr, range(0x2066, 0x206A))}


def _obeyed(char: str) -> bool:
    return unicodedata.category(char) in _OBEYED or char in _BIDI or char in "\u2028\u2029"


@given(st.text(alphabet=st.characters(codec=None, exclude_categories=())))
def test_nothing_a_terminal_obeys_is_left(text: str) -> None:
    one_line = printable(text)
    assert not any(_obeyed(c) for c in one_line)
    kept = printable(text, multiline=True)
    assert not any(_obeyed(c) for c in kept if c not in "\n\t")
    assert kept.count("\n") == text.count("\n")
    assert printable(one_line) == one_line  # escaping twice changes nothing


@given(st.text(alphabet=st.characters(exclude_categories=("Cc", "Cs", "Cf", "Zl", "Zp"))))
def test_ordinary_text_is_shown_as_it_is(text: str) -> None:
    assert printable(text) == text
    assert printable(text, multiline=True) == text


def test_each_control_is_shown_by_its_code() -> None:
    assert printable("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert printable("\x1b]8;;http://evil.example/\x07x") == "\\x1b]8;;http://evil.example/\\x07x"
    assert printable("\x9b31m \u202eevil\u202c") == "\\x9b31m \\u202eevil\\u202c"
    assert printable("title\nstatus: converged\tx\r") == "title\\nstatus: converged\\tx\\r"
    assert printable("line one\n\tline two\r\n", multiline=True) == "line one\n\tline two\\r\n"
    assert printable("emoji 👩\u200d💻 é") == "emoji 👩\u200d💻 é"  # a joiner is not a control
