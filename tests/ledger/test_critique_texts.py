"""A parsed critique is stored once: its event and the snapshots after it refer to it by the
address of its JSON, as they refer to other texts, on SQLite and PostgreSQL.

A critique's strengths and weaknesses repeat its answer's prose in lists of strings, which no
text key names; stored inline they were that prose a second time in the event and a third in
every snapshot. The critique is read back exactly, a store that holds critiques inline still
reads, and a critique text altered behind the ledger's back is refused, never spliced in.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forge_ledger import SystemClock, UuidIds
from forge_ledger.domain.state import ContributionState
from forge_ledger.domain.values import Critique, RoundKind, Suggestion
from forge_ledger.errors import StoreError
from forge_ledger.ledger import Ledger, texts, verify_session
from forge_ledger.ledger.snapshot_blocks import BLOCK_SINK
from forge_ledger.ledger.snapshot_states import StoredContribution
from forge_ledger.ledger.texts import object_text, with_texts
from forge_ledger.testing import SessionBuilder
from forge_ledger.yaml_format import import_session
from support.store import event_rows, raw_connection, snapshot_rows

NAMES = ("p0", "p1", "p2")
_AWKWARD = 'quotes " and \\ backslashes, "critique":{"not": "an object"}, é, 中文, \u2028. '


def _critique(round_no: int, name: str) -> Critique:
    return Critique(
        target="p0",
        strengths=(f"{name} likes round {round_no}: " + _AWKWARD * 2,),
        weaknesses=(f"{name} doubts round {round_no}: " + _AWKWARD * 3, "short"),
        suggestions=(Suggestion(text="Say how long events are kept. " * 5, section="Storage"),),
        score=61,
    )


def _session(ledger: Ledger, iterations: int = 3) -> SessionBuilder:
    b = SessionBuilder(store=ledger).start("Critique texts", participants=NAMES).save()
    for it in range(1, iterations + 1):
        b.round(RoundKind.DRAFT, iteration=it, participants=["p0"])
        b.answer("p0", f"draft {it}: " + "the ledger keeps every event. " * 8)
        b.close_round().save()
        b.round(RoundKind.CRITIQUE, iteration=it, participants=["p1", "p2"])
        for name in ("p1", "p2"):
            critique = _critique(b.round_number, name)
            # p2 answers with the critique's very JSON: its text is then the answer's
            preamble = "Here is my review.\n" if name == "p1" else ""
            b.answer(name, preamble + critique.model_dump_json())
            b.critique(name, critique)
        b.close_round().save()
    return b


def _critiques(state: Any) -> list[Critique]:
    return [c.critique for r in state.rounds for c in r.contributions if c.critique]


def test_a_critique_is_stored_once_and_read_back_exactly(store_url: str) -> None:
    with Ledger(store_url, snapshot_interval=5) as ledger:
        b = _session(ledger)
        want = _critiques(b.aggregate.state)
        rows = [state for _, state in event_rows(store_url, ledger)]
        snapshots = snapshot_rows(store_url, ledger)
    assert len(want) == 6
    assert snapshots, "the session is long enough to be snapshotted"
    doubt = json.dumps("doubts round")[1:-1].encode()
    for stored in [*rows, *(s for _, s in snapshots)]:
        assert doubt not in stored  # neither events nor snapshots hold the prose
    assert sum(b'"critique":{"sha256":"' in r for r in rows) == 6

    with Ledger(store_url, create=False, snapshot_interval=5) as ledger:
        assert _critiques(ledger.state(b.id)) == want  # from the newest snapshot
        assert _critiques(ledger.state(b.id, at_event=len(rows) - 1)) == want
        events = [e for e in ledger.events(b.id) if e.type == "CritiqueRecorded"]
        assert [Critique.model_validate(e.data["critique"]) for e in events] == want
        report = verify_session(ledger, b.id, snapshots=True)
    assert report.ok, report.as_json()
    assert report.snapshots


def test_a_store_with_critiques_inline_still_reads_and_verifies(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path / "inline.sqlite")
    with monkeypatch.context() as m:
        m.setattr(texts, "OBJECT_TEXTS", {})  # how critiques were stored before
        with Ledger(path, snapshot_interval=5) as ledger:
            b = _session(ledger)
            want = _critiques(b.aggregate.state)
    with raw_connection(path) as con:
        rows = [bytes(r[0]) for r in con.execute("SELECT unpack(state) FROM stored_events")]
    assert not any(b'"critique":{"sha256"' in r for r in rows)
    with Ledger(path, create=False, snapshot_interval=5) as ledger:
        assert _critiques(ledger.state(b.id)) == want
        report = verify_session(ledger, b.id, snapshots=True)
        assert report.ok, report.as_json()
        b2 = SessionBuilder.of(ledger.get(b.id), store=ledger)
        b2.round(RoundKind.CRITIQUE, iteration=4, participants=["p1"])
        b2.answer("p1", "more").critique("p1", _critique(b2.round_number, "p1"))
        b2.close_round().save()  # a new critique in an old store goes by reference
        assert _critiques(ledger.state(b.id)) == [*want, _critique(b2.round_number, "p1")]
        assert verify_session(ledger, b.id, snapshots=True).ok


def test_an_altered_critique_text_is_refused_not_spliced_in(tmp_path: Any) -> None:
    path = str(tmp_path / "altered.sqlite")
    with Ledger(path, snapshot_interval=0) as ledger:
        b = _session(ledger, iterations=1)
        target = object_text("critique", _critique(2, "p1").model_dump(mode="json"))
    assert target is not None
    address = texts.text_address(target)
    with raw_connection(path) as con:
        changed = con.execute(
            f"UPDATE {texts.TEXT_TABLE} SET body = ? WHERE address(sha256) = ?",
            ['1},"round":99,"x":{', address],
        ).rowcount
    assert changed == 1
    with Ledger(path, create=False, snapshot_interval=0) as ledger:
        # read texts are checked against their address first: the altered one is refused
        # there, before its JSON is even looked at
        with pytest.raises(StoreError, match=r"text [0-9a-f]{12} does not hash .*altered"):
            list(ledger.events(b.id))
        report = verify_session(ledger, b.id)
    assert not report.ok
    assert "does not hash to its address" in report.problem


def test_a_critique_shaped_value_in_free_form_data_is_kept_as_it_is(tmp_path: Any) -> None:
    """Only a critique event's own critique (and a state's) goes by reference: an imported
    session's free-form data (its file's ``ledger:`` block) may hold a "critique" that a
    Critique would read with its defaults added, which would no longer be what was recorded
    (nor hash as recorded)."""
    block = (
        "ledger:\n  critique:\n"
        '    strengths: ["The repository pattern keeps the domain testable and the'
        ' persistence swappable, as the panel agreed"]\n'
        "    weaknesses: [It adds a layer]\n    score: 70\n"
    )
    fixture = Path(__file__).parents[1] / "fixtures" / "seed_panel.yaml"
    text = fixture.read_text() + block
    path = str(tmp_path / "imported.sqlite")
    with Ledger(path) as ledger:
        sid = import_session(ledger, text, clock=SystemClock(), ids=UuidIds()).session_id
    with Ledger(path, create=False) as ledger:
        imported = next(e for e in ledger.events(sid) if e.type == "SessionImported")
        assert imported.data["ledger"]["critique"] == {
            "strengths": [
                "The repository pattern keeps the domain testable and the persistence"
                " swappable, as the panel agreed"
            ],
            "weaknesses": ["It adds a layer"],
            "score": 70,
        }
        assert verify_session(ledger, ledger.resolve(str(sid)), snapshots=True).ok


def test_verify_finds_an_altered_critique_inside_a_block_every_later_snapshot_names(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store written before holds its critiques inline in its events; the snapshots this
    version writes are then the only ones to refer to the critique texts, from inside blocks
    of rounds that later snapshots name by address. Altering one such text fails every
    snapshot that names the block, not only the one that wrote it."""
    path = str(tmp_path / "blocks.sqlite")
    with monkeypatch.context() as m:
        m.setattr(texts, "OBJECT_TEXTS", {})
        with Ledger(path, snapshot_interval=10**6) as ledger:  # none taken yet
            b = _session(ledger, iterations=12)  # 24 rounds: a full block of 16
    with Ledger(path, create=False, snapshot_interval=10) as ledger:
        b = SessionBuilder.of(ledger.get(b.id), store=ledger)
        for it in range(13, 31):
            b.round(RoundKind.DRAFT, iteration=it, participants=["p0"])
            b.answer("p0", f"draft {it}: " + "the ledger keeps every event. " * 8)
            b.close_round().save()
        positions = [int(s.originator_version) for s in ledger.stored_snapshots(b.id)]
    assert len(positions) >= 3
    target = _critique(4, "p1").model_dump_json()  # round 4: inside the first block
    with raw_connection(path) as con:
        changed = con.execute(
            f"UPDATE {texts.TEXT_TABLE} SET body = ? WHERE address(sha256) = ?",
            [target.replace("doubts", "LOVES"), texts.text_address(target)],
        ).rowcount
    assert changed == 1
    with Ledger(path, create=False, snapshot_interval=10) as ledger:
        report = verify_session(ledger, b.id, snapshots=True)
    assert not report.ok
    assert report.bad_snapshots == positions


_CRITIQUES = st.builds(
    Critique,
    target=st.none() | st.sampled_from(("p0", "p2")),  # never the critic itself
    strengths=st.lists(st.text(max_size=120), max_size=3).map(tuple),
    weaknesses=st.lists(st.text(max_size=120), max_size=3).map(tuple),
    suggestions=st.lists(st.builds(Suggestion, text=st.text(max_size=150)), max_size=2).map(tuple),
    score=st.integers(0, 100),
)


def _stored(contribution: ContributionState, context: dict[str, Any] | None) -> str:
    """A contribution as a stored state writes it."""
    serializer = StoredContribution.__pydantic_serializer__
    return serializer.to_json(contribution, exclude_defaults=True, context=context).decode()


class _Sink:
    """A snapshot's sink of parsed texts (the ledger's keeps its blocks too)."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}

    def refer(self, text: str) -> Any:
        return texts.text_reference(text, self.texts)


@settings(max_examples=200, deadline=None)
@given(_CRITIQUES)
def test_a_stored_state_refers_to_a_critique_by_its_events_text(critique: Critique) -> None:
    """Any critique: a contribution stored with a sink refers to the text its event refers to
    (when long), and reads back as the same critique."""
    b = SessionBuilder().start("Property", participants=NAMES)
    b.round(RoundKind.CRITIQUE, iteration=1, participants=["p1"])
    b.answer("p1", "review").critique("p1", critique)
    contribution = b.state.rounds[-1].contributions[-1]
    sink = _Sink()
    stored = _stored(contribution, {BLOCK_SINK: sink})
    back = type(contribution).model_validate_json(with_texts(stored.encode(), lambda _: sink.texts))
    assert back.critique == critique
    event_texts: dict[str, str] = {}
    event = texts.externalise(
        {"critique": critique.model_dump(mode="json")}, event_texts, objects=True
    )
    assert sink.texts == event_texts
    by_reference = event["critique"] != critique.model_dump(mode="json")
    assert ('"sha256"' in stored) == by_reference


def test_a_contribution_without_a_critique_is_stored_as_before() -> None:
    """``exclude_defaults`` still leaves out a contribution's absent critique in the stored
    layout: blocks without critiques keep the addresses earlier versions gave them, and their
    snapshots compare byte for byte."""
    b = SessionBuilder().start("Plain", participants=NAMES)
    b.round(RoundKind.DRAFT, iteration=1, participants=["p0"]).answer("p0", "a draft")
    contribution = b.state.rounds[-1].contributions[-1]
    for context in (None, {BLOCK_SINK: _Sink()}):
        assert "critique" not in _stored(contribution, context)


def test_verify_checks_the_texts_of_a_snapshot_laid_out_by_an_older_version(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot written before critiques went by reference is compared by the state it
    decodes to; the texts it reads (here a short answer, inline in its event, so stored only
    for the snapshots) are still checked."""
    path = str(tmp_path / "older.sqlite")
    with monkeypatch.context() as m:  # critiques inline, in events and in snapshots
        m.setattr(texts, "OBJECT_TEXTS", {})
        m.setattr(_Sink, "refer", lambda _self, _text: None)
        m.setattr("forge_ledger.ledger.snapshot_states.BlockTexts.refer", lambda _s, _t: None)
        with Ledger(path, snapshot_interval=5) as ledger:
            b = _session(ledger, iterations=2)
            b.round(RoundKind.DRAFT, iteration=3, participants=["p0"]).answer("p0", "short")
            b.close_round().save()
            b.round(RoundKind.DRAFT, iteration=4, participants=["p0"]).answer("p0", "more")
            b.close_round().save()
    with Ledger(path, create=False, snapshot_interval=5) as ledger:
        assert verify_session(ledger, b.id, snapshots=True).ok
    with raw_connection(path) as con:
        changed = con.execute(
            f"UPDATE {texts.TEXT_TABLE} SET body = ? WHERE address(sha256) = ?",
            ["altered", texts.text_address("short")],
        ).rowcount
    assert changed == 1
    with Ledger(path, create=False, snapshot_interval=5) as ledger:
        report = verify_session(ledger, b.id, snapshots=True)
    assert not report.ok
    assert report.bad_snapshots
    assert "does not hold intact" in report.problem
