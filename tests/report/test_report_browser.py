"""The report in a real browser: Debian's Chromium, headless, driven by Playwright, the network
blocked. The page must render its five charts, show the session id, head hash and the document
rendered as Markdown (its exact source one click away), reveal every sentence's provenance on
hover and on keyboard focus, keep chart labels off the names, print without its tooltips, and
log no console error (a blocked script or fetch would log one: the page forbids both).

Chromium comes from the system (``apt-get install chromium``; ``.ci/run`` installs it); these
tests fail, not skip, without it. Playwright never downloads a browser here.
"""

from __future__ import annotations

import re
import subprocess
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from playwright.sync_api import expect

from forge_ledger.ledger import Ledger
from forge_ledger.projections.document import fold_lineage
from support.browser import CONSOLE_SCRIPT, open_page
from support.cli import console_demo
from support.stories import HOSTILE_DOC, IMG, MARKDOWN_DOC, SCRIPT, hostile, markdown

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

    from forge_ledger.projections.document import DocumentLineage

SID = uuid.UUID(int=21)


def _report(store: Path, out: Path, sid: uuid.UUID = SID) -> None:
    proc = subprocess.run(
        [CONSOLE_SCRIPT, "report", str(sid), "--store", str(store), "-o", str(out)],
        capture_output=True, text=True, timeout=240, check=False,
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow
def test_the_report_in_a_real_browser(browser: Browser, tmp_path: Path) -> None:
    """The four-voices demo's page: its document holds the drafter's sentences and the
    synthesizer's, so a sentence's origin is not the text's author."""
    store, out = tmp_path / "demo.sqlite", tmp_path / "report.html"
    sid = console_demo(store)
    with Ledger(str(store), create=False) as ledger:
        state = ledger.state(sid)
    _report(store, out, sid)
    lineage = fold_lineage(state)
    assert lineage.source is not None
    visit = open_page(browser, out)
    page = visit.page

    assert visit.errors == []
    assert visit.requests == [visit.url]
    assert visit.blocked == []

    charts = page.locator("figure.chart svg")
    assert charts.count() == 5
    for i in range(5):
        svg = charts.nth(i)
        box = svg.bounding_box()
        assert box is not None
        assert box["width"] > 150
        assert box["height"] > 50
        assert svg.locator("path, line, text").count() > 10
        assert svg.locator("text").first.text_content()

    assert page.locator("#session-id").inner_text() == state.id
    assert page.locator("#head-hash").inner_text() == state.head_hash
    assert page.locator("#session-id").is_visible()
    assert page.locator("#head-hash").is_visible()
    doc = page.locator("#doc-text")
    assert doc.is_visible()
    # rendered: the headings are elements, no Markdown syntax shows
    assert _heading_levels(page) == ["h1", "h2", "h2", "h2", "h2"]
    assert page.locator("#doc-text h1").inner_text() == "Event log for deliberations (synthesis 2)"
    assert "#" not in doc.inner_text()
    assert "`" not in doc.inner_text()
    assert page.locator("#doc-text code").inner_text() == "verify"
    _source_is_exact(page, lineage.text)
    _every_sentence_shows_its_origin(page, lineage)

    # a sentence the drafter wrote, kept in the synthesizer's text: its origin is the draft
    n, kept = next((i, s) for i, s in enumerate(lineage.sentences)
                   if s.origin.participant != lineage.source.participant)
    assert (kept.origin.participant, kept.origin.round) == ("alice", 1)
    sentence = page.locator("#doc-text .s").nth(n)
    tip = sentence.locator(".prov")
    origin = (f"Origin: {kept.origin.kind.value} by {kept.origin.participant}, round "
              f"{kept.origin.round}, iteration {kept.origin.iteration}, event "
              f"{kept.origin.position}")
    expect(tip).to_be_hidden()
    sentence.hover()
    expect(tip).to_be_visible()
    assert origin in tip.inner_text()
    assert f"by {lineage.source.participant}" not in tip.inner_text().split("\n")[0]
    page.mouse.move(1190, 5)
    expect(tip).to_be_hidden()
    # the synthesizer's own sentence shows its own origin, and what it answered
    m, answering = next((i, s) for i, s in enumerate(lineage.sentences) if s.answers)
    other = page.locator("#doc-text .s").nth(m).locator(".prov")
    page.locator("#doc-text .s").nth(m).hover()
    expect(other).to_be_visible()
    assert f"Origin: {answering.origin.kind.value} by {answering.origin.participant}" in (
        other.inner_text()
    )
    assert f"Answers: {answering.answers[0].participant}" in other.inner_text()
    page.mouse.move(1190, 5)
    first = page.locator("#doc-text .s").first
    page.locator("nav.toc a").last.focus()
    page.keyboard.press("Tab")
    expect(first).to_be_focused()
    expect(first.locator(".prov")).to_be_visible()
    assert "Origin: " in first.locator(".prov").inner_text()

    graph = page.locator("#chart-influence svg")
    assert graph.get_by_text("retention policy for the", exact=False).count() >= 1
    _labels_keep_off_the_names(page, [p.name for p in state.participants])
    legend = str(page.locator("#chart-consensus svg").text_content())
    for series in ("weighted score", "share of voters agreeing", "threshold",
                   "plain majority (0.5)"):
        assert series in legend

    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 20_000

    page.emulate_media(media="print")
    expect(first.locator(".prov")).to_be_hidden()
    expect(page.locator("nav.toc")).to_be_hidden()
    expect(page.locator("#doc-source")).to_be_hidden()
    expect(charts.nth(4)).to_be_visible()
    pdf = tmp_path / "report.pdf"
    page.pdf(path=str(pdf), print_background=True)
    assert pdf.read_bytes()[:5] == b"%PDF-"
    assert pdf.stat().st_size > 20_000
    assert visit.errors == []


@pytest.mark.slow
def test_model_text_stays_text_in_the_browser(browser: Browser, tmp_path: Path) -> None:
    store, out = tmp_path / "ledger.sqlite", tmp_path / "report.html"
    with Ledger(str(store)) as ledger:
        hostile(ledger, SID)
    _report(store, out)
    visit = open_page(browser, out)
    page = visit.page
    assert visit.errors == []  # a script or handler blocked by the page's policy would log one
    assert page.title().startswith(f"Rate limits {SCRIPT}")
    assert page.locator("script").count() == 0
    assert page.locator("img").count() == 0
    shown = page.locator("#doc-text").inner_text()
    assert page.locator("#doc-text h1").inner_text() == f"Limits {SCRIPT}"
    assert IMG in shown
    assert page.get_by_text("onerror=", exact=False).count() >= 1
    _source_is_exact(page, HOSTILE_DOC)
    assert page.title().startswith(f"Rate limits {SCRIPT}")  # nothing ran
    assert visit.requests == [visit.url]
    assert visit.errors == []


@pytest.mark.slow
def test_a_markdown_document_keeps_every_sentence_s_provenance(
    browser: Browser, tmp_path: Path,
) -> None:
    """Headings, emphasis across a sentence boundary, a list, a table (a row is one sentence
    over several cells), code, a link and an image: each sentence still shows its origin on
    hover and on Tab, and model markup is text."""
    store, out = tmp_path / "ledger.sqlite", tmp_path / "report.html"
    with Ledger(str(store)) as ledger:
        markdown(ledger, SID)
        state = ledger.state(SID)
    _report(store, out)
    lineage = fold_lineage(state)
    assert lineage.text == MARKDOWN_DOC
    visit = open_page(browser, out)
    page = visit.page
    assert visit.errors == []
    assert visit.requests == [visit.url]

    assert _heading_levels(page) == ["h1", "h2", "h3"]
    doc = page.locator("#doc-text")
    assert doc.locator("ul > li").count() == 2
    assert doc.locator("ol > li").count() == 2
    assert doc.locator("table td").count() == 4
    assert doc.locator("pre code").inner_text() == "rate = 10\nburst = 20\n"
    assert doc.locator("strong").count() == 2  # one bold run, split at the sentence boundary
    assert doc.locator(".link").inner_text() == "RFC 6585"
    assert doc.locator(".addr").first.inner_text() == "(https://example.org/rfc6585)"
    assert "limits diagram (image: limits.png)" in doc.inner_text()
    assert page.locator("a[href^='http'], img, script").count() == 0
    assert SCRIPT in doc.inner_text()
    assert IMG in doc.inner_text()
    origins = {s.origin.participant for s in lineage.sentences}
    assert origins == {"alice", "carol"}
    _every_sentence_shows_its_origin(page, lineage)
    # the row "| free | 10/s |" is one sentence in two cells: one focus, the same tint twice
    row = next(i for i, s in enumerate(lineage.sentences) if s.text.startswith("| free"))
    pieces = doc.locator(f"[aria-describedby='prov-{row + 1}']")
    assert pieces.count() == 2
    assert pieces.nth(1).get_attribute("tabindex") is None
    pieces.nth(1).hover()
    expect(pieces.nth(1).locator(".prov")).to_be_visible()
    _source_is_exact(page, MARKDOWN_DOC)
    assert visit.errors == []


def _heading_levels(page: Page) -> list[str]:
    """The document's headings, in order: elements inside the document's section."""
    found = page.locator("#document #doc-text").locator("h1, h2, h3, h4, h5, h6")
    return [str(found.nth(i).evaluate("e => e.tagName.toLowerCase()"))
            for i in range(found.count())]


def _source_is_exact(page: Page, text: str) -> None:
    """The toggle under the document shows its Markdown source, byte for byte."""
    source = page.locator("#doc-source pre")
    expect(source).to_be_hidden()
    page.locator("#doc-source summary").click()
    expect(source).to_be_visible()
    assert source.text_content() == text
    page.locator("#doc-source summary").click()


def _every_sentence_shows_its_origin(page: Page, lineage: DocumentLineage) -> None:
    """Tab goes through the sentences in order, each showing its own origin; hovering any
    piece of a sentence shows the same."""
    focusable = page.locator("#doc-text .s[tabindex='0']")
    shown = [int(str(focusable.nth(i).get_attribute("aria-describedby")).removeprefix("prov-"))
             for i in range(focusable.count())]
    syntax = re.compile(r"\s*(```\w*|\|[-:| ]+\|)\s*")  # a fence, a table's rule line
    expected = [i + 1 for i, s in enumerate(lineage.sentences) if not syntax.fullmatch(s.text)]
    assert shown == expected  # every sentence with something to show, once, in order
    page.mouse.move(1190, 5)
    page.locator("nav.toc a").last.focus()
    for i, n in enumerate(shown):
        s = lineage.sentences[n - 1]
        origin = (f"Origin: {s.origin.kind.value} by {s.origin.participant}, round "
                  f"{s.origin.round}, iteration {s.origin.iteration}, event {s.origin.position}")
        page.keyboard.press("Tab")
        expect(focusable.nth(i)).to_be_focused()
        tip = page.locator(f"#prov-{n}")
        expect(tip).to_be_visible()
        assert origin in tip.inner_text()
    page.locator("nav.toc a").last.focus()
    for n in shown:
        pieces = page.locator(f"#doc-text .s[aria-describedby='prov-{n}']")
        for k in range(pieces.count()):
            pieces.nth(k).hover()
            expect(pieces.nth(k).locator(".prov")).to_be_visible()
            assert f"by {lineage.sentences[n - 1].origin.participant}, round" in (
                pieces.nth(k).locator(".prov").inner_text())
    page.mouse.move(1190, 5)


def _boxes(page: Page, selector: str) -> list[tuple[str, dict[str, float]]]:
    texts = page.locator(selector)
    out = []
    for i in range(texts.count()):
        box = texts.nth(i).bounding_box()
        assert box is not None
        out.append((str(texts.nth(i).text_content()), box))
    return out


def _overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return (a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"]
            and a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"])


def _labels_keep_off_the_names(page: Page, names: list[str]) -> None:
    """In the influence graph no label (an arrow's number, the key, another name) and no other
    node overlaps a participant's name."""
    texts = _boxes(page, "#chart-influence svg text")
    marks = _boxes(page, "#chart-influence svg .mark-symbol path")
    named = [(t, b) for t, b in texts if t in names]
    assert sorted(t for t, _ in named) == sorted(names)
    for name, box in named:
        for other, obox in texts:
            if other != name:
                assert not _overlap(box, obox), (name, other)
        for _, mbox in marks:
            assert not _overlap(box, mbox), (name, "a node or an arrow")
