"""Document lineage (``projections.document``): scripted sessions with known lineage, and
properties over generated ones. Sessions are real aggregates driven through their commands."""

from __future__ import annotations

import itertools
import uuid

from hypothesis import given
from hypothesis import strategies as st

from forge_ledger.domain.state import SessionState
from forge_ledger.domain.values import (
    Participant,
    RoundKind,
    Stance,
    Suggestion,
)
from forge_ledger.projections.document import (
    document_at_iteration,
    document_versions,
    documents_by_iteration,
    fold_lineage,
    segment,
)
from support.stories import minute_builder

NAMES = ("alice", "bob", "carol")

DRAFT = (
    "# Plan\n\n"
    "Keep every event forever. Hash each event.\n\n"
    "- Replay never calls a model.\n"
    "- Old exports are removed after a week.\n"
)
SYNTHESIS_1 = DRAFT + "- Failed calls retry with an exponential backoff.\n"
SYNTHESIS_2 = (
    "# Plan\n\n"
    "Keep every event forever. Hash each event with SHA-256.\n\n"
    "- Replay never calls a model.\n"
    "- Failed calls retry with an exponential backoff.\n"
    "- Sealed sessions are archived to cold storage, never deleted.\n"
)


class Script:
    """A session built round by round with chosen texts."""

    def __init__(self) -> None:
        self.b = minute_builder().start(
            "Event log", participants=[Participant(name=n, model=f"openai/{n}") for n in NAMES],
            session_id=uuid.uuid4(),
        )
        self.agg = self.b.aggregate

    def round(self, kind: RoundKind, iteration: int, texts: dict[str, str]) -> int:
        self.b.round(kind, iteration=iteration, answers=texts)
        return self.b.round_number

    def critique(self, iteration: int, critic: str, target: str, suggestion: str) -> int:
        r = self.round(RoundKind.CRITIQUE, iteration, {critic: '{"score": 60}'})
        self.b.critique(critic, target=target, suggestions=(Suggestion(text=suggestion),))
        return r

    def done(self, _r: int) -> None:
        self.b.close_round()

    @property
    def state(self) -> SessionState:
        return self.agg.state


def scripted() -> Script:
    s = Script()
    s.done(s.round(RoundKind.DRAFT, 1, {"alice": DRAFT}))
    s.done(s.critique(1, "bob", "alice", "Describe the backoff for failed calls"))
    s.done(s.round(RoundKind.SYNTHESIS, 1, {"carol": SYNTHESIS_1}))
    s.b.diverge("d-1", "archiving sealed sessions", {"bob": ("archive", Stance.DISAGREE)},
                round=3, strongest=Stance.DISAGREE)
    refinement = {"bob": "- Sealed sessions are archived to cold storage."}
    s.done(s.round(RoundKind.REFINEMENT, 2, refinement))
    s.done(s.round(RoundKind.SYNTHESIS, 2, {"carol": SYNTHESIS_2}))
    return s


def sentence(lineage: object, prefix: str) -> object:
    found = [x for x in lineage.sentences if x.text.startswith(prefix)]  # type: ignore[attr-defined]
    assert len(found) == 1, prefix
    return found[0]


def test_a_drafters_sentence_kept_to_the_end_is_the_drafters() -> None:
    s = scripted()
    lin = fold_lineage(s.state)
    kept = sentence(lin, "Keep every event forever.")
    assert kept.origin.participant == "alice"
    assert kept.origin.kind is RoundKind.DRAFT
    assert kept.origin.iteration == 1
    assert kept.revisions == []


def test_a_sentence_added_by_a_synthesis_after_a_suggestion_answers_it() -> None:
    s = scripted()
    lin = fold_lineage(s.state)
    added = sentence(lin, "- Failed calls retry")
    assert (added.origin.participant, added.origin.kind) == ("carol", RoundKind.SYNTHESIS)
    assert added.origin.iteration == 1
    [answer] = added.answers
    assert answer.kind == "suggestion"
    assert answer.participant == "bob"
    assert answer.text == "Describe the backoff for failed calls"
    assert answer.answered_by == added.origin


def test_a_sentence_rewritten_in_iteration_two_keeps_its_origin_and_gains_a_revision() -> None:
    s = scripted()
    lin = fold_lineage(s.state)
    hashed = sentence(lin, "Hash each event with SHA-256.")
    assert hashed.origin.participant == "alice"
    assert hashed.origin.kind is RoundKind.DRAFT
    [rev] = hashed.revisions
    assert rev.change == "rewrite"
    assert rev.previous == "hash each event."
    assert (rev.contribution.participant, rev.contribution.iteration) == ("carol", 2)
    assert rev.contribution.kind is RoundKind.SYNTHESIS


def test_a_dropped_sentence_is_listed_with_the_dropping_contribution() -> None:
    s = scripted()
    lin = fold_lineage(s.state)
    [dropped] = lin.dropped
    assert dropped.text == "- Old exports are removed after a week.\n"
    assert dropped.origin.participant == "alice"
    assert (dropped.dropped_by.participant, dropped.dropped_by.iteration) == ("carol", 2)


def test_a_refinements_sentence_adopted_by_the_synthesis_is_the_refiners_answering_dissent() -> (
    None
):
    lin = fold_lineage(scripted().state)
    archived = sentence(lin, "- Sealed sessions are archived")
    assert (archived.origin.participant, archived.origin.kind) == ("bob", RoundKind.REFINEMENT)
    assert [a.divergence_id for a in archived.answers] == ["d-1"]


def test_document_texts_by_iteration() -> None:
    state = scripted().state
    assert [v.text for v in document_versions(state)] == [DRAFT, SYNTHESIS_1, SYNTHESIS_2]
    assert document_at_iteration(state, 1) == SYNTHESIS_1
    assert documents_by_iteration(state) == {1: SYNTHESIS_1, 2: SYNTHESIS_2}
    assert fold_lineage(state).text == state.latest_text == SYNTHESIS_2


# --------------------------------------------------------------------------- properties

_SENTENCES = (
    "# Title\n",
    "## Storage\n",
    "Events are kept. ",
    "Events are kept forever.\n",
    "Every event is hashed.\n",
    "- Replay is exact.\n",
    "- Replay is exact and fast.\n",
    "| a | b |\n",
    "```\ncode line\n```\n",
    "\n",
    "  trailing words without a stop",
    "Why? Because.\n",
)
_doc = st.lists(st.sampled_from(_SENTENCES), min_size=0, max_size=12).map("".join)


@given(st.text(max_size=300))
def test_segments_cover_any_text_exactly(text: str) -> None:
    segs = segment(text)
    assert "".join(text[s.start : s.end] for s in segs) == text
    assert all(a.end == b.start for a, b in itertools.pairwise(segs))
    assert all(s.end > s.start for s in segs)


@given(st.lists(st.tuples(st.sampled_from(NAMES), _doc), min_size=1, max_size=6))
def test_sentences_cover_the_text_and_origins_are_earlier_contributions(
    steps: list[tuple[str, str]],
) -> None:
    s = Script()
    for i, (name, text) in enumerate(steps):
        kind = RoundKind.DRAFT if i == 0 else RoundKind.SYNTHESIS
        s.done(s.round(kind, i + 1, {name: text or "empty"}))
    state = s.state
    lin = fold_lineage(state)
    assert lin.text == state.latest_text
    assert "".join(x.text for x in lin.sentences) == lin.text
    recorded = {c.position for r in state.rounds for c in r.contributions}
    assert lin.source is not None
    for x in lin.sentences:
        assert x.origin.position in recorded
        assert x.origin.position <= lin.source.position
        assert all(r.contribution.position <= lin.source.position for r in x.revisions)
    assert fold_lineage(state) == lin  # deterministic


def test_a_response_recorded_as_an_opinion_is_not_the_document() -> None:
    s = Script()
    s.done(s.round(RoundKind.DRAFT, 1, {"alice": DRAFT}))
    r = s.round(RoundKind.RESPONSE, 1, {"alice": '{"stance": "agree", "reasoning": "fair"}'})
    s.b.opinion("alice", stance=Stance.AGREE, reasoning="fair")
    s.done(r)
    assert s.state.latest_text == DRAFT
    assert [v.text for v in document_versions(s.state)] == [DRAFT]
    revised = Script()
    revised.done(revised.round(RoundKind.DRAFT, 1, {"alice": DRAFT}))
    revised.done(revised.round(RoundKind.RESPONSE, 1, {"alice": SYNTHESIS_1}))
    assert revised.state.latest_text == SYNTHESIS_1  # a revised draft, as text, is the document
