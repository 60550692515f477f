"""The document rendered as Markdown with each sentence in its span: what each construct
becomes, that model text stays text, and (Hypothesis, over generated Markdown) that every word
of every sentence is shown exactly once, in its own sentence's span, in order."""

from __future__ import annotations

import html
import itertools
import re
from html.parser import HTMLParser

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forge_ledger.projections.document import segment
from forge_ledger.report._markdown import Piece, render_markdown

ALLOWED = {
    "p", "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "li", "blockquote", "table", "thead",
    "tbody", "tr", "th", "td", "pre", "code", "em", "strong", "s", "span", "br", "hr",
}
CLASSES = {"link", "addr", "image", "left", "center", "right"}
WORD = re.compile(r"w\d+")


def _pieces(text: str) -> list[Piece]:
    return render_markdown(text, [s.start for s in segment(text)])


def _html(pieces: list[Piece]) -> str:
    """The pieces as the page lays them out (a sentence's piece in a marked span)."""
    return "".join(
        str(p.html) if p.sentence is None else f'<span data-s="{p.sentence}">{p.html}</span>'
        for p in pieces
    )


class _Tree(HTMLParser):
    """Elements, attributes, balance and the text of each sentence's pieces."""

    VOID = frozenset({"br", "hr"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, str | None]] = []
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.text: dict[int, str] = {}
        self.order: list[int] = []

    def _sentence(self) -> int | None:
        return next((int(s) for _, s in reversed(self.stack) if s is not None), None)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))
        if tag not in self.VOID:
            self.stack.append((tag, dict(attrs).get("data-s")))
            s = self._sentence()
            if s is not None and (not self.order or self.order[-1] != s):
                self.order.append(s)

    def handle_endtag(self, tag: str) -> None:
        assert self.stack, f"</{tag}> closes nothing"
        opened, _ = self.stack.pop()
        assert opened == tag, f"<{opened}> closed by </{tag}>"

    def handle_data(self, data: str) -> None:
        s = self._sentence()
        if s is not None:
            self.text[s] = self.text.get(s, "") + data
        else:
            assert not data.strip(), f"text outside every sentence: {data!r}"


def _tree(pieces: list[Piece]) -> _Tree:
    t = _Tree()
    t.feed(_html(pieces))
    t.close()
    assert not t.stack, t.stack
    return t


def _check(text: str, *, words: bool = True) -> _Tree:
    """The invariants every rendering keeps (see the module docstring); with ``words``, each
    word of each sentence shown in that sentence's pieces (text whose entities or escapes
    spell a word cannot promise that)."""
    pieces = _pieces(text)
    sentences = segment(text)
    tree = _tree(pieces)
    for tag, attrs in tree.tags:
        assert tag in ALLOWED, tag
        for name, value in attrs:
            if name == "data-s":
                continue
            assert (name, tag) in {("class", "span"), ("class", "th"), ("class", "td"),
                                   ("start", "ol")}, (tag, name, value)
            assert value is not None
            assert value in CLASSES or (name == "start" and value.isdigit()), (name, value)
    shown = [p.sentence for p in pieces if p.sentence is not None]
    assert shown == sorted(shown), "sentences out of order"
    firsts = [p.sentence for p in pieces if p.first]
    assert firsts == sorted(set(shown)), "a sentence's first piece is not marked exactly once"
    for i, s in enumerate(sentences):
        assert not words or WORD.findall(tree.text.get(i, "")) == WORD.findall(s.key), (i, s.key)
    return tree


# --------------------------------------------------------------------------- examples


def test_headings_lists_and_paragraphs_become_their_elements() -> None:
    text = ("# w1 title\n\n## w2 scope\nw3 one. w4 *two* w5.\n\n### w6\n- w7 item.\n- w8 item\n\n"
            "3. w9\n4. w10\n\n> w11 quoted. w12\n\n---\n\nw13 after\n")
    pieces = _pieces(text)
    page = _html(pieces)
    for tag in ("h1", "h2", "h3", "ul", "ol", "blockquote", "hr", "em"):
        assert f"<{tag}" in page, tag
    assert '<ol start="3">' in page
    assert '<h1><span data-s="0">w1 title</span></h1>' in page
    assert "#" not in re.sub(r"<[^>]+>", "", page)
    assert "- w7" not in page
    _check(text)


def test_a_sentence_across_cells_is_one_focus_and_several_pieces() -> None:
    """A table row is one sentence over several cells: a span per cell, the first marked."""
    text = "| w1 | w2 |\n|:---|---:|\n| w3 | w4 \\| w5 |\n"
    pieces = _pieces(text)
    row = [p for p in pieces if p.sentence == 2]
    assert [(str(p.html), p.first) for p in row] == [("w3", True), ("w4 | w5", False)]
    assert not [p for p in pieces if p.sentence == 1]  # the rule line shows nothing
    page = _html(pieces)
    assert '<th class="left">' in page
    assert '<td class="right">' in page
    _check(text)


def test_inline_markup_across_a_sentence_boundary_is_closed_and_reopened() -> None:
    text = "w1 **w2 bold. w3 still** w4 `w5. w6` end.\n"
    pieces = _pieces(text)
    assert [str(p.html) for p in pieces if p.sentence is not None] == [
        "w1 <strong>w2 bold. </strong>",
        "<strong>w3 still</strong> w4 <code>w5. </code>",
        "<code>w6</code> end.",
    ]
    _check(text)


def test_code_keeps_its_lines_and_fences_show_nothing() -> None:
    text = "```python\nw1 = 1  # w2. w3\n    w4\n```\n\n    w5 indented\n"
    pieces = _pieces(text)
    page = _html(pieces)
    assert page.startswith("<pre><code>")
    assert '<span data-s="1">w1 = 1  # w2. w3\n</span><span data-s="2">    w4\n</span>' in page
    assert "python" not in page  # the info string is syntax: the source view shows it
    assert not [p for p in pieces if p.sentence in (0, 3)]
    _check(text)


def test_links_and_images_are_text_with_their_address() -> None:
    text = ("See [w1 docs](https://example.org/w2 \"w-title\") and <https://example.org/w3>, "
            "![w4 chart](w5.png) and [w6][ref].\n\n[ref]: https://example.org/w7\n")
    page = _html(_pieces(text))
    assert "<a" not in page
    assert "<img" not in page
    assert "href" not in page
    assert "src=" not in page
    assert ('<span class="link">w1 docs</span> <span class="addr">(https://example.org/w2)'
            "</span>") in page
    assert '<span class="link">https://example.org/w3</span>' in page
    assert '<span class="image">w4 chart</span> <span class="addr">(image: w5.png)</span>' in page
    assert '<span class="link">w6</span> <span class="addr">(https://example.org/w7)' in page
    tree = _tree(_pieces(text))
    assert "w7" in tree.text[0]  # the definition's address is shown where the link is


def test_model_text_is_text() -> None:
    """Raw HTML is not Markdown here: a script, an image, a handler, an entity are text."""
    text = ('# w1 <script>alert("x")</script>\n\nw2 <img src=x onerror="alert(1)"> w3 '
            "&lt;b&gt; [w4](javascript:alert(1)) <a href=\"https://e.org\">w5</a>\n")
    pieces = _pieces(text)
    page = _html(pieces)
    tree = _check(text)
    assert not [t for t, _ in tree.tags if t in ("script", "img", "a", "b")]
    shown = html.unescape(re.sub(r"<[^>]+>", "", page))
    assert '<script>alert("x")</script>' in shown
    assert '<img src=x onerror="alert(1)">' in shown
    assert "<b>" in shown  # the entity decoded, then escaped again
    assert "[w4](javascript:alert(1))" in shown  # not a link: the parser refuses the scheme


def test_carriage_returns_move_the_offsets_with_them() -> None:
    text = "# w1\r\n\r\nw2 one. w3 two.\r\n- w4\r\n"
    tree = _check(text)
    assert tree.text[0] == "w1"
    assert tree.text[2] == "w3 two."
    assert tree.text[3] == "w4"


# --------------------------------------------------------------------------- generated

_counter = itertools.count()


def _words(n: int) -> str:
    return " ".join("@" for _ in range(n))


_inline = st.one_of(
    st.integers(1, 3).map(_words),
    st.integers(1, 3).map(lambda n: f"**{_words(n)}**"),
    st.integers(1, 2).map(lambda n: f"*{_words(n)}*"),
    st.integers(1, 2).map(lambda n: f"~~{_words(n)}~~"),
    st.integers(1, 2).map(lambda n: f"`{_words(n)}`"),
    st.just("[@](https://e.org/@)"),
    st.just("![@ @](@.png)"),
    st.just("<https://e.org/@>"),
    st.sampled_from(["<script>@</script>", "&", "\\*", "<b>@</b>", "a*b", "**", "`"]),
    # markup running over a sentence boundary
    st.sampled_from(["**@. @**", "*@! @*", "`@. @`", "[@. @](https://e.org/@)", "~~@? @~~"]),
)
_end = st.sampled_from([".", "!", "?", ".**", ""])
_sentence = st.builds(lambda parts, end: " ".join(parts) + end,
                      st.lists(_inline, min_size=1, max_size=4), _end)
_paragraph = st.lists(_sentence, min_size=1, max_size=4).map(
    lambda ss: "".join(s + st_sep for s, st_sep in zip(ss, [" ", "\n"] * len(ss), strict=False)))
_block = st.one_of(
    _paragraph,
    st.builds(lambda k, s: "#" * k + " " + s, st.integers(1, 4), _sentence),
    st.lists(_sentence, min_size=1, max_size=3).map(lambda ss: "".join(f"- {s}\n" for s in ss)),
    st.lists(_sentence, min_size=1, max_size=3).map(
        lambda ss: "".join(f"{i}. {s}\n" for i, s in enumerate(ss, start=2))),
    st.lists(st.lists(_sentence, min_size=2, max_size=2), min_size=1, max_size=3).map(
        lambda rows: f"| {rows[0][0]} | {rows[0][1]} |\n|---|---|\n"
        + "".join(f"| {a} | {b} |\n" for a, b in rows[1:])),
    st.lists(st.integers(1, 3).map(_words), min_size=1, max_size=3).map(
        lambda lines: "```\n" + "".join(f"{ln}\n" for ln in lines) + "```\n"),
    _sentence.map(lambda s: f"> {s}\n"),
    st.just("---\n"),
)
_document = st.builds(
    lambda blocks, gaps: "".join(b.rstrip("\n") + "\n" + g for b, g in zip(
        blocks, gaps + ["\n"] * len(blocks), strict=False)),
    st.lists(_block, min_size=1, max_size=6),
    st.lists(st.sampled_from(["\n", "", "\n\n"]), max_size=6),
)


def _numbered(text: str) -> str:
    """Every ``@`` becomes a word of its own (w0, w1, …): a word shown twice or in another
    sentence's span is then seen."""
    return re.sub("@", lambda _: f"w{next(_counter)}", text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_document.map(_numbered), st.booleans())
@pytest.mark.slow
def test_every_word_is_shown_once_in_its_own_sentence(text: str, crlf: bool) -> None:
    _check(text.replace("\n", "\r\n") if crlf else text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="w1 .!?*_~`[]()<>#-+|\\\n\r\t&;:/\"'=x", max_size=300))
def test_any_text_renders_to_allowed_balanced_elements(text: str) -> None:
    _check(text, words=False)
