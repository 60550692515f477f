"""Untrusted text on a terminal: the one rule for showing it (DESIGN §6).

Topics, titles, model answers, human input, YAML values and store contents may hold bytes a
terminal obeys instead of showing: ESC/CSI/OSC sequences (clear the screen, set the window
title, paint the background, an OSC 8 hyperlink whose target is hidden), C1 controls, bidi
overrides that reorder what follows, a carriage return that overwrites a line. A terminal
must show such text, never be driven by it, so :func:`printable` writes every such
character as a visible escape (``\\x1b``, ``\\u202e``). A single-line field (a title, a name,
a reason) keeps its newlines escaped too, so a topic ending in ``"\\nstatus: converged"``
cannot print a line of its own.

Only what reaches a terminal goes through here: files written with ``-o`` and ``--json``
keep the exact bytes. This module imports nothing, so every renderer may use it.
"""

from __future__ import annotations

import re

__all__ = ["printable"]

_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
"""Bidi marks, embeddings, overrides and isolates: they reorder the characters after them."""
_CONTROLS = f"\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}\u2028\u2029\ud800-\udfff"
"""C0 but newline and tab, DEL, C1 (with its 8-bit CSI and OSC), bidi controls, Unicode's
line and paragraph separators, and lone surrogates (a strict UTF-8 stream cannot write them)."""
_MULTILINE = re.compile(f"[{_CONTROLS}]")
_SINGLE_LINE = re.compile(f"[{_CONTROLS}\n\t]")
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, *, multiline: bool = False) -> str:
    """``text`` with every control character, escape sequence introducer and bidi control
    written as a visible escape; ``multiline`` keeps newlines and tabs (a model's answer, a
    document), otherwise they are escaped too (a title, a name, a reason, a table cell)."""
    pattern = _MULTILINE if multiline else _SINGLE_LINE
    return pattern.sub(_escape, text)
