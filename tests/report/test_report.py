"""``report``: the page's content against the ledger, the page's self-containment and safety,
its size on a 50-round session, and the command (real subprocesses, real stores)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from html.parser import HTMLParser
from pathlib import Path

import pytest

from forge_ledger.audit import InfluenceEdge, audit_report, render_markdown
from forge_ledger.clock import FixedStepClock
from forge_ledger.engine import cost_text, known_cost
from forge_ledger.ledger import Ledger
from forge_ledger.projections.document import fold_lineage
from forge_ledger.report import ReportModel, gather, render_html
from forge_ledger.report._charts import agree_share
from forge_ledger.report._palettes import (
    PARTICIPANT_PALETTE,
    ROUND_KINDS,
    SERIES,
    STANCES,
    participant_colors,
)
from forge_ledger.testing import SessionBuilder
from support.bench_modules import bench_module
from support.cli import console_demo
from support.orchestrator import run_demo_session
from support.store import raw_connection
from support.stories import HOSTILE_DOC, IMG, SCRIPT, audited, hostile, priced_session, story

SID = uuid.UUID(int=11)
CONSOLE_SCRIPT = str(Path(sys.executable).parent / "forge-ledger")
KEY = "report-test-key"


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CONSOLE_SCRIPT, *args], capture_output=True, text=True, timeout=240, env=env,
        check=False,
    )


def _one_error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), stderr
    return lines[0]


class _Tags(HTMLParser):
    """Every element and attribute of a page, as a browser's tokenizer would see them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))


def _tags(html: str) -> list[tuple[str, list[tuple[str, str | None]]]]:
    p = _Tags()
    p.feed(html)
    return p.tags


@pytest.fixture(scope="module")
def audited_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("report") / "ledger.sqlite"
    with Ledger(str(path)) as ledger:
        audited(ledger, SID)
    return path


@pytest.fixture(scope="module")
def model(audited_store: Path) -> ReportModel:
    with Ledger(str(audited_store), create=False) as ledger:
        return gather(ledger, SID)


@pytest.fixture(scope="module")
def page(model: ReportModel) -> str:
    return render_html(model)


# --------------------------------------------------------------------------- content


def test_the_model_is_the_audit_and_the_lineage(audited_store: Path, model: ReportModel) -> None:
    """The page shows ``audit --json`` and ``spec --provenance`` as they are: no copy to drift."""
    with Ledger(str(audited_store), create=False) as ledger:
        state = ledger.state(SID)
        events = list(ledger.events(SID))
    assert (model.session_id, model.head_hash, model.position) == (
        str(SID), state.head_hash, state.version,
    )
    assert model.audit == audit_report(events)
    assert model.document == fold_lineage(state)
    assert model.audit.conformity  # bob's flip with nothing said in between
    assert model.integrity.chain_ok
    assert model.integrity.events_checked == state.version
    assert model.input_tokens == state.tokens.input
    assert (model.cost_usd, model.cost_text) == (
        known_cost(state.cost_usd, state.unpriced_calls),
        cost_text(state.cost_usd, state.unpriced_calls),
    )


def test_the_document_is_the_document_source_with_its_lineage(
    audited_store: Path, model: ReportModel,
) -> None:
    with Ledger(str(audited_store), create=False) as ledger:
        state = ledger.state(SID)
    found = state.document_source
    assert found is not None
    assert model.document is not None
    rnd, c = found
    doc = model.document
    assert doc.source is not None
    assert doc.text == state.answer(c) == state.latest_text
    assert (doc.source.participant, doc.source.round, doc.source.position) == (
        c.participant, rnd.number, c.position,
    )
    assert "".join(s.text for s in doc.sentences) == doc.text


def test_as_of_an_iteration(audited_store: Path) -> None:
    with Ledger(str(audited_store), create=False) as ledger:
        m = gather(ledger, str(SID)[:8], at_iteration=1)
        end = ledger.position_of_iteration(SID, 1)
        head = ledger.head_version(SID)
        events = list(ledger.events(SID, upto=end))
    assert (m.position, m.total_events, m.at_iteration) == (end, head, 1)
    assert m.audit == audit_report(events)
    assert [c.iteration for c in m.audit.consensus] == [1]
    assert m.document is not None
    assert m.document.text == "Synthesis 1: merge critiques"


# --------------------------------------------------------------------------- the page


@pytest.mark.slow
def test_the_page_is_self_contained(page: str, model: ReportModel) -> None:
    tags = _tags(page)
    csp = [dict(a).get("content") for t, a in tags if t == "meta"
           and dict(a).get("http-equiv") == "Content-Security-Policy"]
    assert csp
    assert "default-src 'none'" in (csp[0] or "")
    assert "script-src" not in (csp[0] or "")
    assert not [t for t, _ in tags if t in ("script", "link", "iframe", "object", "embed")]
    for t, attrs in tags:
        for name, value in attrs:
            if name in ("src", "href", "xlink:href", "action"):
                assert value is not None, (t, name, value)
                assert value.startswith("#"), (t, name, value)
    assert "url(" not in page
    assert "@import" not in page
    figures = re.findall(r'<figure class="chart" id="chart-(\w+)".*?</figure>', page, re.S)
    assert figures == ["consensus", "stances", "influence", "dissent", "usage"]
    # no participant's contribution moved another here: the graph says so instead of drawing
    assert not model.audit.influence
    assert page.count("<svg") == 4
    assert page.count('<p class="thin">Nothing to draw yet: no influence recorded.</p>') == 1
    assert model.session_id in page
    assert model.head_hash in page
    sections = dict(re.findall(r'<section id="(\w+)".*?>(.*?)</section>', page, re.S))
    assert "429 too many requests" in sections["failures"]
    assert "Focus on distributed deployments." in sections["human"]
    assert "<td>bob</td>" in sections["conformity"]
    assert "dissent d1" in sections["minority"]
    assert "not available" not in page


def test_model_text_never_becomes_markup(tmp_path: Path) -> None:
    sid = uuid.UUID(int=12)
    with Ledger(str(tmp_path / "ledger.sqlite")) as ledger:
        hostile(ledger, sid)
        m = gather(ledger, sid)
    assert m.document is not None
    assert m.document.text == HOSTILE_DOC
    html = render_html(m)
    tags = _tags(html)
    assert not [t for t, _ in tags if t in ("script", "img")]
    assert not [(t, n) for t, a in tags for n, _ in a if n.startswith("on")]
    assert "&lt;script&gt;" in html
    assert "onerror=" in html
    assert SCRIPT not in html
    assert IMG not in html


@pytest.mark.slow
def test_a_fifty_round_session_stays_under_5_mb(tmp_path: Path) -> None:
    with Ledger(str(tmp_path / "ledger.sqlite")) as ledger:
        sid = bench_module("replay_bench").build_session(ledger, 50)
        m = gather(ledger, sid)
    assert m.rounds == 50
    assert len(m.audit.consensus) >= 10
    assert m.document is not None
    assert len(m.document.sentences) > 5
    html = render_html(m)
    size = len(html.encode("utf-8"))
    assert size < 5_000_000, size
    assert html.count('<span class="s" tabindex="0"') == len(m.document.sentences)
    assert len(m.audit.usage_by_round) == m.rounds
    for r in m.audit.usage_by_round:
        assert f"<td>round {r.round} (it {r.iteration})</td>" in html


# --------------------------------------------------------------------------- the command


@pytest.mark.slow
def test_report_writes_beside_the_store(audited_store: Path, tmp_path: Path) -> None:
    store = tmp_path / "ledger.sqlite"
    store.write_bytes(audited_store.read_bytes())
    proc = _run("report", str(SID)[:8], "--store", str(store), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    path = Path(doc["path"])
    assert path.parent == tmp_path / "reports"
    assert path.name.endswith(f"-{str(SID)[:8]}.html")
    assert path.stat().st_size == doc["bytes"]
    assert doc["chain_ok"] is True
    assert doc["session_id"] == str(SID)
    assert path.read_text("utf-8").startswith("<!DOCTYPE html>")

    out = _run("report", str(SID), "--store", str(store), "-o", "-", "--at-iteration", "2")
    assert out.returncode == 0, out.stderr
    with Ledger(str(store), create=False) as ledger:
        head_2 = ledger.state(SID, at_iteration=2).head_hash
    assert f'id="head-hash">{head_2}<' in out.stdout


@pytest.mark.slow
def test_report_user_errors_are_one_line(audited_store: Path, tmp_path: Path) -> None:
    store = str(audited_store)
    bad_iteration = _run("report", str(SID), "--store", store, "--at-iteration", "9")
    assert bad_iteration.returncode == 2
    assert "no iteration 9" in _one_error_line(bad_iteration.stderr)
    unknown = _run("report", "ffffffff", "--store", store)
    assert unknown.returncode == 2
    assert "no session" in _one_error_line(unknown.stderr)
    both = _run("report", str(SID), "--store", store, "--json", "-o", "-")
    assert both.returncode == 2
    assert "--json" in _one_error_line(both.stderr)
    blocked = tmp_path / "file"
    blocked.write_text("")
    unwritable = _run("report", str(SID), "--store", store, "-o", str(blocked / "r.html"))
    assert unwritable.returncode == 2
    assert "cannot write" in _one_error_line(unwritable.stderr)


@pytest.mark.slow
def test_a_broken_chain_is_reported_in_the_page_and_the_exit_code(
    audited_store: Path, tmp_path: Path,
) -> None:
    store = tmp_path / "ledger.sqlite"
    store.write_bytes(audited_store.read_bytes())
    with Ledger(str(store), create=False) as ledger:
        pos = next(e.position for e in ledger.events(SID) if e.type == "ContributionRecorded")
    con = raw_connection(store, isolation_level=None)
    con.execute(
        "UPDATE stored_events SET state = CAST(json_set(CAST(unpack(state) AS TEXT), "
        "'$.data.response.content', 'quietly changed') AS BLOB) "
        "WHERE originator_id = ? AND originator_version = ?",
        (SID.hex, pos),
    )
    con.close()
    out = tmp_path / "r.html"
    proc = _run("report", str(SID), "--store", str(store), "-o", str(out))
    assert proc.returncode == 1
    assert f"broken at event {pos}" in _one_error_line(proc.stderr.split("\n", 1)[-1])
    page = out.read_text("utf-8")
    assert 'id="chain">chain broken<' in page
    assert f"broken at event {pos}" in page


@pytest.mark.slow
def test_the_seal_and_its_hmac_are_checked_with_the_key(tmp_path: Path) -> None:
    store = tmp_path / "ledger.sqlite"
    with Ledger(str(store)) as ledger:
        built = priced_session(ledger, iterations=1, participants=2, converge=True)
        SessionBuilder.of(ledger.get(built.id), clock=FixedStepClock(), store=ledger).seal(
            key=KEY.encode())
    env = {k: v for k, v in __import__("os").environ.items() if k != "FORGE_LEDGER_HMAC_KEY"}
    out = tmp_path / "r.html"
    keyed = _run("report", str(built.id), "--store", str(store), "-o", str(out),
                 env={**env, "FORGE_LEDGER_HMAC_KEY": KEY})
    assert keyed.returncode == 0, keyed.stderr
    assert "its HMAC matches the key" in out.read_text("utf-8")
    unkeyed = _run("report", str(built.id), "--store", str(store), "-o", str(out), env=env)
    assert unkeyed.returncode == 0, unkeyed.stderr
    assert "HMAC not checked (no key given)" in out.read_text("utf-8")
    wrong = _run("report", str(built.id), "--store", str(store), "-o", str(out),
                 env={**env, "FORGE_LEDGER_HMAC_KEY": "another key"})
    assert wrong.returncode == 1
    assert "HMAC" in wrong.stderr


_DRIVER = """
import sys
from forge_ledger.cli import main
try:
    main(sys.argv[1:])
except SystemExit as e:
    code = e.code
else:
    code = 0
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("altair", "vl_convert", "jinja2"))
lite = sorted(m for m in sys.modules if m.split(".")[0] == "litellm")
sys.stderr.write(f"\\nEXIT={code} HEAVY={len(heavy)} LITELLM={len(lite)}\\n")
"""


@pytest.mark.parametrize(
    ("command", "heavy"),
    [(["sessions", "--json"], 0), (["verify", "{sid}"], 0), (["audit", "{sid}", "--json"], 0),
     (["report", "{sid}", "-o", "{out}"], 1)],
)
@pytest.mark.slow
def test_only_report_imports_the_chart_libraries(
    command: list[str], heavy: int, audited_store: Path, tmp_path: Path,
) -> None:
    args = [c.format(sid=SID, out=tmp_path / "r.html") for c in command]
    proc = subprocess.run(
        [sys.executable, "-c", _DRIVER, *args, "--store", str(audited_store)],
        capture_output=True, text=True, timeout=240, check=False,
    )
    assert "EXIT=0 " in proc.stderr, proc.stderr
    assert ("HEAVY=0" in proc.stderr) == (heavy == 0), proc.stderr
    assert "LITELLM=0" in proc.stderr, proc.stderr


@pytest.mark.slow
def test_report_on_both_stores(store_url: str, tmp_path: Path) -> None:
    with Ledger(store_url) as ledger:
        audited(ledger, SID)
    out = tmp_path / "r.html"
    proc = _run("report", str(SID), "--store", store_url, "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    with Ledger(store_url, create=False) as ledger:
        head = ledger.state(SID).head_hash
    assert json.loads(proc.stdout)["head_hash"] == head
    assert f'id="head-hash">{head}<' in out.read_text("utf-8")


def test_a_session_with_no_round_yet_still_renders(tmp_path: Path) -> None:
    sid = uuid.UUID(int=13)
    with Ledger(str(tmp_path / "ledger.sqlite")) as ledger:
        ledger.save(story(sid).aggregate)
        m = gather(ledger, sid)
    assert m.rounds == 0
    assert m.document is None
    assert not m.audit.consensus
    html = render_html(m)
    assert len(re.findall(r'<figure class="chart"', html)) == 5
    # nothing to draw: each chart is one line saying what is missing, never an empty frame
    assert "<svg" not in html
    assert "No document: no draft" in html
    notes = re.findall(r'<p class="thin">(.*?)</p>', html)
    assert notes == [f"Nothing to draw yet: no {what} recorded." for what in (
        "convergence vote", "vote", "influence", "dissent", "model call")]


def test_the_share_agreeing_is_the_engines_plain_majority(model: ReportModel) -> None:
    assert model.audit.consensus
    for c in model.audit.consensus:
        assert (agree_share(c) > 0.5) == c.majority_agrees


@pytest.fixture(scope="module")
def demo_page(tmp_path_factory: pytest.TempPathFactory) -> tuple[ReportModel, dict[str, str]]:
    """The four-voices demo's report, and the page's sections by id."""
    store = tmp_path_factory.mktemp("demo") / "demo.sqlite"
    sid = console_demo(store)
    with Ledger(str(store), create=False) as ledger:
        m = gather(ledger, sid)
    html = render_html(m)
    return m, dict(re.findall(r'<section id="(\w+)".*?>(.*?)</section>', html, re.S))


@pytest.mark.slow
def test_the_influence_graph_draws_the_demos_edge(
    demo_page: tuple[ReportModel, dict[str, str]],
) -> None:
    """In the demo, carol's synthesis on the retention policy moved dave: an edge of the graph,
    labelled by its topic, with the verbatim quote in the figures below."""
    m, sections = demo_page
    edges = [(e.from_, e.to, e.topic) for e in m.audit.influence]
    assert ("carol", "dave", "retention policy for the event log is missing") in edges
    svg, table = sections["influence"].split("<table", 1)
    assert "no influence recorded" not in svg
    assert "retention policy for the" in svg  # the edge's label, drawn by Vega
    edge = next(e for e in m.audit.influence if (e.from_, e.to) == ("carol", "dave"))
    first_line = edge.quote.splitlines()[0]
    assert "<td>carol</td><td>dave</td>" in table
    assert first_line in table


def test_each_sentence_carries_its_origin_from_the_lineage(
    demo_page: tuple[ReportModel, dict[str, str]],
) -> None:
    m, sections = demo_page
    assert m.document is not None
    assert m.document.source is not None
    origins = {s.origin.participant for s in m.document.sentences}
    assert {"alice", "carol"} <= origins  # the drafter's sentences survive the synthesis
    spans = re.findall(r'<span class="s" tabindex="0" style="--c: ([^"]+)" '
                       r'data-origin="([^"]+)"', sections["document"])
    assert [who for _, who in spans] == [s.origin.participant for s in m.document.sentences]
    colors = dict((who, c) for c, who in spans)
    assert colors["alice"] != colors["carol"]  # tinted by origin, not by the text's author
    answered = next(s for s in m.document.sentences if s.answers)
    assert "Answers:</b> " in sections["document"]
    assert answered.answers[0].text.split()[0] in sections["document"]
    assert "Dropped sentences" in sections["document"]
    dropped = sections["document"].split('id="dropped"', 1)[1]
    assert len(re.findall(r"<li>", dropped)) == len(m.document.dropped)


def test_the_effect_of_deliberation_and_self_preference(
    demo_page: tuple[ReportModel, dict[str, str]],
) -> None:
    m, sections = demo_page
    e = m.audit.deliberation_effect
    effect = sections["effect"]
    assert "not available" not in effect
    assert e.first_vote is not None
    assert e.score_majority_disagreed
    assert f"in round {e.disagreement_rounds[0]}" in effect
    assert f"{e.dissents.resolved} resolved" in effect
    similarity = e.document_change[-1].similarity
    assert similarity is not None
    assert f"{similarity:.2f}" in effect
    rows = re.findall(r"<tr><td>(\w+)</td>", effect.split('id="self-preference"', 1)[1])
    assert rows[: len(m.participants)] == [s.participant for s in m.audit.self_preference]
    assert "Anonymized review: no" in effect


def test_an_anonymized_review_names_its_labels(
    tmp_path: Path,
) -> None:
    store = str(tmp_path / "ledger.sqlite")
    sid = run_demo_session(store, anonymize=True)
    with Ledger(store, create=False) as ledger:
        m = gather(ledger, sid)
    assert m.audit.anonymized
    assert m.audit.labels
    html = render_html(m)
    assert "Anonymized review: yes — " in html
    for label, who in m.audit.labels.items():
        assert f"{label} = {who}" in html


def test_a_session_without_texts_says_so(tmp_path: Path) -> None:
    """An imported session carries its iterations' outcomes, not their texts: the document is
    missing, and the page says so instead of drawing nothing."""
    store = tmp_path / "ledger.sqlite"
    seed = Path(__file__).parents[1] / "fixtures" / "seed_standard.yaml"
    imported = _run("import", str(seed), "--store", str(store), "--json")
    assert imported.returncode == 0, imported.stderr
    sid = json.loads(imported.stdout)["session_id"]
    with Ledger(str(store), create=False) as ledger:
        m = gather(ledger, sid)
    assert m.iterations >= 1
    assert m.document is None
    changes = m.audit.deliberation_effect.document_change
    assert changes
    assert all(c.author is None and c.similarity is None for c in changes)
    html = render_html(m)
    assert "No document: no draft, response or synthesis text is recorded" in html
    assert "an imported session carries" in html
    assert html.count("no text recorded") == len(changes)


def test_a_person_who_moved_a_participant_is_a_node_of_the_graph(model: ReportModel) -> None:
    """The audit names a human input that argued toward a new stance as its author: the graph
    draws that person too, and the figures say it was human input."""
    edge = InfluenceEdge.model_validate({
        "from": "dana", "to": "bob", "round": None, "topic": "distributed deployments",
        "quote": "Focus on distributed deployments.", "position": 35, "kind": "human",
        "match": "text",
    })
    audit = model.audit.model_copy(update={"influence": (edge,)})
    html = render_html(model.model_copy(update={"audit": audit}))
    sections = dict(re.findall(r'<section id="(\w+)".*?>(.*?)</section>', html, re.S))
    svg, table = sections["influence"].split("<table", 1)
    assert ">dana</text>" in svg
    assert "distributed deployments" in svg
    assert "<td>dana</td><td>bob</td><td>human input</td>" in table


def test_one_vote_is_too_little_for_the_score_line(audited_store: Path) -> None:
    """A line needs two votes: with one, the chart is one line saying so, and the table still
    has the vote's figures."""
    with Ledger(str(audited_store), create=False) as ledger:
        m = gather(ledger, SID, at_iteration=1)
    assert len(m.audit.consensus) == 1
    sections = dict(re.findall(r'<section id="(\w+)".*?>(.*?)</section>', render_html(m), re.S))
    consensus = sections["consensus"]
    assert "<svg" not in consensus
    assert ('<p class="thin">Too little to draw: 1 convergence vote so far, the chart needs 2; '
            "the table below has the figures.</p>") in consensus
    c = m.audit.consensus[0]
    assert f"<td>{c.round}</td><td>{c.weighted_score:.2f}</td>" in consensus
    assert "<svg" in sections["stances"]  # one vote is enough for the heatmap


def _dissent_rows(section: str) -> dict[str, list[str]]:
    table = section.split('<table class="figures"', 1)[1]
    head = re.findall(r'<th scope="col">(.*?)</th>', table)
    assert head == ["Dissent", "Topic", "Held by", "Opened", "Addressed by", "Ended"]
    rows = [re.findall(r"<td>(.*?)</td>", r, re.S) for r in re.findall(r"<tr><td>.*?</tr>",
                                                                          table, re.S)]
    return {r[0]: r for r in rows}


def test_the_dissent_table_names_holder_addresser_and_ending(
    demo_page: tuple[ReportModel, dict[str, str]], model: ReportModel, page: str,
) -> None:
    """Who holds each dissent (not the drafter beside the dissenter), who addressed it with
    which event, and how it ended."""
    m, sections = demo_page
    rows = _dissent_rows(sections["dissent"])
    late = next(d for d in m.audit.dissent if d.strong)  # dave's, on the retention policy
    addressed = next(h for h in late.history if h.status.value == "addressed")
    resolved = late.history[-1]
    assert rows[late.id][2:] == [
        "dave (strongly disagree)",
        f"round {late.opened_round}, event {late.opened_position}",
        f"{addressed.by}, round {addressed.round}, event {addressed.position}",
        f"resolved by dave, round {resolved.round}, event {resolved.position}: {resolved.note}",
    ]
    assert addressed.by == "carol"  # the synthesizer took it up
    early = m.audit.dissent[0]  # bob's critique of alice's draft, which alice accepted
    assert set(early.who) == {"bob", "alice"}
    assert rows[early.id][2] == "bob (disagree)"
    assert rows[early.id][4] == "—"
    assert rows[early.id][5].startswith("resolved by alice, round 3, event ")
    markdown = render_markdown(m.audit)  # the audit's own table says the same, in one rule
    for d in (late, early):
        line = next(x for x in markdown.splitlines() if x.startswith(f"| {d.id} |"))
        assert [c.strip() for c in line.strip("|").split(" | ")] == rows[d.id]

    audited_rows = _dissent_rows(dict(re.findall(
        r'<section id="(\w+)".*?>(.*?)</section>', page, re.S))["dissent"])
    still = next(d for d in model.audit.dissent if d.status == "open")
    assert audited_rows[still.id][2] == "bob (strongly disagree)"
    assert audited_rows[still.id][5] == "still open"


_HEX = re.compile(r'(?:fill|stroke|--c)[=:]\s*"?(#[0-9a-fA-F]{3,6}|rgb\([^)]*\)|[a-z]+)\b')


def _rgb(colour: str) -> tuple[int, int, int] | None:
    named = {"white": (255, 255, 255), "black": (0, 0, 0)}
    if colour in named:
        return named[colour]
    if colour.startswith("#"):
        h = colour[1:]
        h = "".join(c * 2 for c in h) if len(h) == 3 else h
        return int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)
    return None  # none, transparent, currentColor: no colour


def _hues(html: str) -> set[str]:
    """The colours of ``html`` that have a hue (not a grey, black or white)."""
    out = set()
    for colour in _HEX.findall(html):
        rgb = _rgb(colour.lower())
        if rgb is not None and len(set(rgb)) > 1:
            out.add(colour.lower())
    return out


def test_a_hue_means_a_participant_and_nothing_else(
    demo_page: tuple[ReportModel, dict[str, str]],
) -> None:
    """Participants keep their colours wherever they appear; round kinds, stances, dissent
    statuses and the consensus lines are greys (with letters, glyphs, dashes or shapes)."""
    m, sections = demo_page
    theirs = {c.lower() for c in participant_colors([p.name for p in m.participants]).values()}
    for key in ("consensus", "stances", "dissent"):
        svg = sections[key].split('<div class="svg">', 1)[1].split("</figure>", 1)[0]
        assert _hues(svg) == set(), key
    for key in ("influence", "usage"):
        svg = sections[key].split('<div class="svg">', 1)[1].split("</figure>", 1)[0]
        assert _hues(svg) == theirs, key  # the nodes, the bars per participant
    origins = {s.origin.participant for s in m.document.sentences} if m.document else set()
    tints = set(re.findall(r'class="s"[^>]*style="--c: (#\w+)"', sections["document"]))
    assert tints == {participant_colors([p.name for p in m.participants])[o] for o in origins}
    # each grey palette tells its values apart by lightness as well as by its cue
    for neutral in (ROUND_KINDS, STANCES, SERIES):
        assert all(_rgb(g) and len(set(_rgb(g) or ())) == 1 for g in neutral.greys)
        assert len(set(neutral.cues)) == len(neutral.domain)
    for neutral in (ROUND_KINDS, STANCES):
        assert len(set(neutral.greys)) == len(neutral.domain)
    assert all(len(set(_rgb(c) or ())) > 1 for c in PARTICIPANT_PALETTE)

