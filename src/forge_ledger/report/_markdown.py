"""The document rendered as Markdown, each sentence still in its own provenance span.

The lineage cuts the document's text into sentences by offset (:func:`~forge_ledger.
projections.document.segment`); the page shows the text rendered by markdown-it (CommonMark
with tables and strikethrough, raw HTML disabled) and wraps every character in the span of the
sentence whose offsets hold it. markdown-it gives each block its source lines but no position
inside a line, so the offsets are recovered in two steps: a block's text is located in its
source lines (:func:`_locate`), then the inline tokens are walked in order against that text,
each markup run (``**``, a backtick run, ``](address)``) skipped as the parser consumed it
(:class:`_Inline`). Sentence spans cannot contain a block, so a sentence that runs over a
block boundary (a table row's cells, a paragraph split by a list) is shown as several pieces:
the first carries the keyboard focus and the tooltip's id, the others the same tint and tooltip.
A sentence that is only syntax (a code fence, a table's rule line, a link definition) renders
no text and so no span; the page's source view shows it.

What model text can become is closed: the Markdown elements below (never an attribute from
the text but an ordered list's start and a table cell's alignment), escaped text, links shown
as their label and address (no ``<a href>``) and images as their alt text and address (no
``<img>``): nothing in the document can run, load or navigate.
"""

from __future__ import annotations

import sys
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from markdown_it import MarkdownIt
from markdown_it.token import Token
from markupsafe import Markup, escape

__all__ = ["Piece", "render_markdown"]

_MD = (
    MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    .enable(["table", "strikethrough"])
    # escapes and entities stay tokens of their own, whose markup is their source text
    .disable("text_join")
)
_BLOCKS = frozenset({
    "p", "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "li", "blockquote",
    "table", "thead", "tbody", "tr", "th", "td",
})
_INLINE = {"em": "em", "strong": "strong", "s": "s"}
_ALIGN = {"text-align:left": "left", "text-align:center": "center", "text-align:right": "right"}


@dataclass(frozen=True)
class Piece:
    """A run of the rendered document: structure between sentences (``sentence`` None) or
    the content of one sentence's span, whose inline elements are balanced inside it."""

    html: Markup
    sentence: int | None = None
    first: bool = False
    """The sentence's first piece (it takes the focus and names the tooltip)."""


# --------------------------------------------------------------------------- pieces


@dataclass(frozen=True)
class _Text:
    text: str
    at: tuple[int, ...]
    """The source offset of each character."""


@dataclass(frozen=True)
class _Open:
    html: str
    close: str
    """The closing tag; empty for an element that has none (``<br>``)."""
    at: int


@dataclass(frozen=True)
class _Close:
    pass


@dataclass(frozen=True)
class _Block:
    html: str


_Item = _Text | _Open | _Close | _Block


# --------------------------------------------------------------------------- offsets


def _locate(part: str, line: str, start: int, *, suffix: bool) -> list[int]:
    """Where each character of ``part`` (a block's text on one line) sits in ``line``.

    markdown-it keeps a line's text as written but for what the block's syntax took (markers,
    indentation, a heading's closing ``#``, a cell's escaped ``|``): the text is usually the
    line's end, else found in it, else matched character by character.
    """
    if not part:
        return []
    end = len(line.rstrip())
    if suffix and line[:end].endswith(part) and end - len(part) >= start:
        base = end - len(part)
        return list(range(base, end))
    found = line.find(part, start)
    if found >= 0:
        return list(range(found, found + len(part)))
    out, pos = [], start
    for ch in part:
        hit = line.find(ch, pos)
        out.append(hit if hit >= 0 else min(pos, len(line)))
        pos = hit + 1 if hit >= 0 else pos
    return out


class _Source:
    """The normalized text, cut into lines, with a cursor per line for a table row's cells."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts: list[int] = []
        pos = 0
        for line in text.split("\n"):
            self.starts.append(pos)
            pos += len(line) + 1
        self.cursor: dict[int, int] = {}

    def line(self, n: int) -> tuple[int, str]:
        if n >= len(self.starts):
            return len(self.text), ""
        start = self.starts[n]
        end = self.starts[n + 1] - 1 if n + 1 < len(self.starts) else len(self.text)
        return start, self.text[start:end]

    def offsets(self, content: str, first_line: int, *, cell: bool = False) -> list[int]:
        """The source offset of each character of ``content`` and one past its end."""
        out: list[int] = []
        for k, part in enumerate(content.split("\n")):
            n = first_line + k
            base, line = self.line(n)
            cols = _locate(part, line, self.cursor.get(n, 0) if cell else 0, suffix=not cell)
            if cell and cols:
                self.cursor[n] = cols[-1] + 1
            out += [base + c for c in cols]
            out.append(base + len(line))  # the newline (or the end)
        return out


def _skip_space(s: str, pos: int) -> int:
    while pos < len(s) and s[pos] in " \t\n":
        pos += 1
    return pos


# --------------------------------------------------------------------------- inline


class _Inline:
    """One block's inline tokens in order, each given the source offsets it was parsed from."""

    def __init__(self, content: str, at: list[int]) -> None:
        self.content = content
        self.at = at
        self.cur = 0

    def _take(self, markup: str) -> int:
        """The index of ``markup`` from the cursor on; the cursor moves past it."""
        found = self.content.find(markup, self.cur) if markup else self.cur
        i = self.cur if found < 0 else found
        self.cur = i + len(markup)
        return i

    def _pos(self, i: int) -> int:
        return self.at[min(i, len(self.at) - 1)]

    def _span(self, i: int, n: int) -> tuple[int, ...]:
        got = tuple(self.at[i : i + n])
        return got + (self.at[-1],) * (n - len(got))

    def walk(self, tokens: Sequence[Token]) -> Iterator[_Item]:
        links: list[Token] = []
        for t in tokens:
            if t.type == "text":
                i = self._take(t.content)
                yield _Text(t.content, self._span(i, len(t.content)))
            elif t.type == "text_special":
                i = self._take(t.markup)
                yield _Text(t.content, (self._pos(i),) * len(t.content))
            elif t.type in ("softbreak", "hardbreak"):
                i = self._take("\n")
                yield _Text("\n", (self._pos(i),))
                if t.type == "hardbreak":
                    yield _Open("<br>", "", self._pos(i))
            elif t.type == "code_inline":
                yield from self._code(t)
            elif t.type == "link_open":
                links.append(t)
                yield from self._link_open(t)
            elif t.type == "link_close":
                yield from self._link_close(links.pop())
            elif t.type == "image":
                yield from self._image(t)
            elif t.tag in _INLINE and t.nesting:
                yield from self._emphasis(t)
            else:  # a token this renderer does not know: its text, as text
                yield _Text(t.content, (self._pos(self.cur),) * len(t.content))

    def _emphasis(self, t: Token) -> Iterator[_Item]:
        i = self._take(t.markup)
        tag = _INLINE[t.tag]
        if t.nesting > 0:
            yield _Open(f"<{tag}>", f"</{tag}>", self._pos(i))
        else:
            yield _Close()

    def _code(self, t: Token) -> Iterator[_Item]:
        i = self._take(t.markup)
        body = self.content[self.cur : self.cur + len(t.content) + 2].replace("\n", " ")
        lead = 1 if body[:1] == " " and body[1 : 1 + len(t.content)] == t.content else 0
        start = self.cur + lead
        self.cur = start + len(t.content) + lead + len(t.markup)
        yield _Open("<code>", "</code>", self._pos(i))
        yield _Text(t.content, self._span(start, len(t.content)))
        yield _Close()

    def _link_open(self, t: Token) -> Iterator[_Item]:
        i = self._take("<" if t.markup == "autolink" else "[")
        yield _Open('<span class="link">', "</span>", self._pos(i))

    def _link_close(self, opened: Token) -> Iterator[_Item]:
        if opened.markup == "autolink":
            self._take(">")
            yield _Close()
            return
        yield _Close()
        yield from self._address(str(opened.attrs.get("href", "")), "")

    def _image(self, t: Token) -> Iterator[_Item]:
        i = self._take("![")
        yield _Open('<span class="image">', "</span>", self._pos(i))
        yield from self.walk(t.children or [])
        yield _Close()
        yield from self._address(str(t.attrs.get("src", "")), "image: ")

    def _address(self, href: str, label: str) -> Iterator[_Item]:
        """After a link's label: its address as text, as written when it is written inline."""
        close = self._take("]")
        shown = _MD.normalizeLinkText(href)
        at: tuple[int, ...] = (self._pos(close),) * len(shown)
        s, after = self.content, self.content[self.cur : self.cur + 1]
        start = _skip_space(s, self.cur + 1)
        dest = _MD.helpers.parseLinkDestination(s, start, len(s))
        if after == "(" and dest.ok and _MD.normalizeLink(dest.str) == href:
            raw = s[start : dest.pos]
            shown, at = raw, self._span(start, len(raw))
            if raw.startswith("<") and raw.endswith(">"):
                shown, at = raw[1:-1], at[1:-1]
            self.cur = self._after_title(dest.pos)
        elif after == "[":  # [label][reference]
            self._take("]")
        if not shown and not label:
            return
        edge = self._pos(close)
        yield _Text(" ", (edge,))
        yield _Open('<span class="addr">', "</span>", edge)
        yield _Text(f"({label}", (edge,) * (len(label) + 1))
        yield _Text(shown, at if len(at) == len(shown) else (edge,) * len(shown))
        yield _Text(")", (edge,))
        yield _Close()

    def _after_title(self, pos: int) -> int:
        """Past a link's optional title and its closing parenthesis."""
        s = self.content
        title_at = _skip_space(s, pos)
        if title_at != pos:
            title = _MD.helpers.parseLinkTitle(s, title_at, len(s))
            pos = _skip_space(s, title.pos) if title.ok else title_at
        return pos + 1 if pos < len(s) and s[pos] == ")" else pos


# --------------------------------------------------------------------------- blocks


def _open_tag(t: Token) -> str:
    attrs = ""
    if t.tag == "ol" and str(t.attrs.get("start", "1")).isdigit():
        start = int(str(t.attrs.get("start", "1")))
        attrs = f' start="{start}"' if start != 1 else ""
    align = _ALIGN.get(str(t.attrs.get("style", "")))
    if align is not None:
        attrs = f' class="{align}"'
    return f"<{t.tag}{attrs}>"


def _items(tokens: Sequence[Token], source: _Source) -> Iterator[_Item]:
    previous = ""
    for t in tokens:
        if t.type == "inline":
            # a table cell's line holds the row's other cells too
            cell = previous in ("th_open", "td_open")
            at = source.offsets(t.content, t.map[0] if t.map else 0, cell=cell)
            yield from _Inline(t.content, at).walk(t.children or [])
        elif t.type in ("fence", "code_block"):
            first = (t.map[0] if t.map else 0) + (1 if t.type == "fence" else 0)
            at = source.offsets(t.content, first)
            yield _Block("<pre><code>")
            yield _Text(t.content, tuple(at[: len(t.content)]))
            yield _Block("</code></pre>\n")
        elif t.type == "hr":
            yield _Block("<hr>\n")
        elif t.hidden or t.tag not in _BLOCKS:
            continue
        elif t.nesting > 0:
            yield _Block(_open_tag(t))
        elif t.nesting < 0:
            yield _Block(f"</{t.tag}>\n")
        previous = t.type


# --------------------------------------------------------------------------- spans


class _Weaver:
    """Lays the rendered items into pieces: each character goes to the span of the sentence
    whose offsets hold it, spans never nest, and inline elements open across a sentence
    boundary are closed before it and opened again after."""

    def __init__(self, starts: Sequence[int]) -> None:
        self.starts = starts
        self.pieces: list[Piece] = []
        self.buf: list[str] = []
        self.current: int | None = None
        self.first = False
        self.last = -1
        self.inline: list[_Open] = []

    def _flush(self) -> None:
        if self.buf:
            first = self.first and self.current is not None
            self.pieces.append(Piece(Markup("".join(self.buf)), self.current, first))
            self.buf = []

    def _enter(self, at: int) -> int:
        """Into the span of the sentence holding offset ``at``; the offset where the next
        sentence begins."""
        # never back to an earlier sentence: the page keeps the sentences in their order
        s = max(bisect_right(self.starts, at) - 1, self.last, 0)
        if s != self.current:
            self.buf += [o.close for o in reversed(self.inline)]
            self._flush()
            self.current, self.first, self.last = s, s > self.last, s
            self.buf += [o.html for o in self.inline]
        return self.starts[s + 1] if s + 1 < len(self.starts) else sys.maxsize

    def _text(self, item: _Text) -> None:
        i, n = 0, len(item.text)
        while i < n:
            end = self._enter(item.at[i])
            j = i + 1
            while j < n and item.at[j] < end:
                j += 1
            self.buf.append(str(escape(item.text[i:j])))
            i = j

    def _leave(self) -> None:
        self.buf += [o.close for o in reversed(self.inline)]
        self.inline = []
        self._flush()
        self.current = None

    def add(self, item: _Item) -> None:
        if isinstance(item, _Text):
            self._text(item)
        elif isinstance(item, _Open):
            self._enter(item.at)
            self.buf.append(item.html)
            if item.close:
                self.inline.append(item)
        elif isinstance(item, _Close):
            if self.inline:
                self.buf.append(self.inline.pop().close)
        else:
            if self.current is not None:
                self._leave()
            self.buf.append(item.html)

    def done(self) -> list[Piece]:
        self._leave()
        return self.pieces


def render_markdown(text: str, starts: Sequence[int]) -> list[Piece]:
    """``text`` rendered, cut into the spans of the sentences that begin at ``starts``.

    ``starts`` are offsets into ``text`` (ascending, the first 0). Line ends are normalized as
    the parser does (CR LF and CR to LF) and the offsets moved with them.
    """
    normal, moved = _normalize(text, starts)
    source = _Source(normal)
    weaver = _Weaver(moved)
    for item in _items(_MD.parse(normal), source):
        weaver.add(item)
    return weaver.done()


def _normalize(text: str, starts: Sequence[int]) -> tuple[str, list[int]]:
    """CR LF becomes LF (one character fewer) and a lone CR an LF; offsets follow."""
    if "\r" not in text:
        return text, list(starts)
    removed: list[int] = []
    i = text.find("\r\n")
    while i >= 0:
        removed.append(i)
        i = text.find("\r\n", i + 2)
    moved = [s - bisect_right(removed, s - 1) for s in starts]
    return text.replace("\r\n", "\n").replace("\r", "\n"), moved
