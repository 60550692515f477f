"""The one conformity rule (``forge_ledger.engine.conformity``), case by case.

Each case is a small session built with the real aggregate: participant X and two others
(M1, M2) vote, something (or nothing) happens, and they vote again. The table says what X's
stance change must be: flagged or not, which influences, and why.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest

from forge_ledger import engine
from forge_ledger.domain import Deliberation
from forge_ledger.domain.values import (
    ChatMessage,
    DivergenceStatus,
    Opinion,
    Participant,
    RoundKind,
    Stance,
    TokenCount,
)
from forge_ledger.testing import SessionBuilder
from support.stories import PARAMS

S = Stance


@dataclass(frozen=True)
class Said:
    """A contribution between the two votes."""

    kind: RoundKind
    author: str
    text: str
    opinion: Opinion | None = None


@dataclass(frozen=True)
class Case:
    name: str
    first: tuple[Stance, Stance, Stance]
    """X, M1, M2 in the first vote (M1 and M2 fix the previous majority)."""
    second: Stance
    """X's second vote (M1 and M2 vote as before)."""
    concerns: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
    """X's concerns in the first and second vote."""
    between: tuple[Said, ...] = ()
    divergence: tuple[str, RoundKind] | None = None
    """(topic, kind of the round that addressed it): a divergence listing X."""
    human: str = ""
    flagged: bool = False
    influences: tuple[tuple[str, str, str], ...] = ()
    """(author, topic, match) of each expected influence."""
    reason: str = ""
    own: int = 0


SYNTH = "Storage: events are kept forever. The retention policy is 90 days for raw logs."

CASES = [
    Case("flip to the majority with nothing in between", (S.DISAGREE, S.AGREE, S.AGREE),
         S.AGREE, flagged=True, reason="toward the previous vote's majority (agreeing)"),
    Case("a synthesis answers the concern", (S.DISAGREE, S.AGREE, S.AGREE), S.AGREE,
         concerns=(("retention policy",), ()),
         between=(Said(RoundKind.SYNTHESIS, "M1", SYNTH),),
         influences=(("M1", "retention policy", "text"),), reason="a new argument"),
    Case("a synthesis that ignores the concern", (S.DISAGREE, S.AGREE, S.AGREE), S.AGREE,
         concerns=(("authentication tokens",), ()),
         between=(Said(RoundKind.SYNTHESIS, "M1", SYNTH),), flagged=True),
    Case("away from the majority, unargued", (S.DISAGREE, S.DISAGREE, S.AGREE), S.AGREE,
         reason="away from the previous vote's majority"),
    Case("to a disagreeing majority with a new concern", (S.AGREE, S.DISAGREE, S.DISAGREE),
         S.DISAGREE, concerns=((), ("latency budget",)), own=1, reason="a new argument"),
    Case("to a disagreeing majority with nothing new", (S.AGREE, S.DISAGREE, S.DISAGREE),
         S.DISAGREE, flagged=True, reason="toward the previous vote's majority (not agreeing)"),
    Case("intensity within one side", (S.AGREE, S.AGREE, S.AGREE), S.STRONGLY_AGREE,
         reason="intensity within one side"),
    Case("the round that answered its divergence", (S.DISAGREE, S.AGREE, S.AGREE), S.AGREE,
         between=(Said(RoundKind.SYNTHESIS, "M1", "A merged text. Nothing else."),),
         divergence=("cache eviction", RoundKind.SYNTHESIS),
         influences=(("M1", "cache eviction", "divergence"),)),
    Case("a human input on its concern", (S.DISAGREE, S.AGREE, S.AGREE), S.AGREE,
         concerns=(("retention policy",), ()), human="Keep the retention policy short.",
         influences=(("dana", "retention policy", "text"),)),
    Case("a critique argues the other way", (S.DISAGREE, S.AGREE, S.AGREE), S.AGREE,
         concerns=(("retention policy",), ()),
         between=(Said(RoundKind.CRITIQUE, "M1", "The retention policy is unclear."),),
         flagged=True),
    Case("its own refinement raises a new point", (S.DISAGREE, S.AGREE, S.AGREE), S.AGREE,
         between=(Said(RoundKind.REFINEMENT, "X", "I now accept it.", Opinion(
             stance=S.AGREE, reasoning="fine", topics=("audit export",))),), own=1),
    Case("its own refinement only announces the flip", (S.DISAGREE, S.AGREE, S.AGREE), S.AGREE,
         between=(Said(RoundKind.REFINEMENT, "X", "I now accept it.", Opinion(
             stance=S.AGREE, reasoning="it reads well now")),), flagged=True),
    Case("its own synthesis does not move it", (S.DISAGREE, S.AGREE, S.AGREE), S.AGREE,
         concerns=(("retention policy",), ()),
         between=(Said(RoundKind.SYNTHESIS, "X", SYNTH),), flagged=True),
    Case("a response agreeing on the point", (S.DISAGREE, S.AGREE, S.AGREE), S.AGREE,
         concerns=(("retention policy",), ()),
         between=(Said(RoundKind.RESPONSE, "M2", "Yes: the retention policy is fine.", Opinion(
             stance=S.AGREE, reasoning="ok")),),
         influences=(("M2", "retention policy", "text"),)),
]


def _vote(b: SessionBuilder, iteration: int, stances: dict[str, Stance],
          concerns: tuple[str, ...]) -> None:
    """Everyone votes its stance with the same words; only X states ``concerns``."""
    b.round(RoundKind.CONVERGENCE, iteration=iteration, participants=list(stances))
    for who, s in stances.items():
        b.answer(who, f"vote {s.value}")
        b.vote(who, agrees=s.agrees, stance=s, score=70, reasoning="same words",
               concerns=concerns if who == "X" else ())
    b.close_round()


def _session(case: Case) -> Deliberation:
    """M1 drafts; X, M1 and M2 vote; what the case says happens; they vote again."""
    b = SessionBuilder(answer_defaults={
        "messages": [ChatMessage(role="user", content="go")], "params": PARAMS,
        "tokens": TokenCount(input=1, output=1),
    }).start("Event log", session_id=uuid.UUID(int=7), participants=[
        Participant(name=n, model=f"openai/{n}") for n in ("X", "M1", "M2")])
    b.round(RoundKind.DRAFT, iteration=1, answers={"M1": "Draft."}, close=True)
    x1, m1, m2 = case.first
    _vote(b, 1, {"X": x1, "M1": m1, "M2": m2}, case.concerns[0])
    if case.divergence is not None:
        b.diverge("d1", case.divergence[0], {"X": ("no", S.DISAGREE)})
    if case.human:
        b.human(case.human, author="dana", kind="steer")
    for said in case.between:
        b.round(said.kind, iteration=2, answers={said.author: said.text},
                targets={said.author: "X"} if said.kind is RoundKind.CRITIQUE else {})
        if said.opinion is not None:
            b.opinion(said.author, said.opinion)
        b.close_round()
        if case.divergence is not None and case.divergence[1] is said.kind:
            b.settle("d1", DivergenceStatus.ADDRESSED)
    _vote(b, 2, {"X": case.second, "M1": m1, "M2": m2}, case.concerns[1])
    return b.aggregate


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_conformity_rule(case: Case) -> None:
    state = _session(case).state
    changes = [c for c in engine.stance_changes(state) if c.participant == "X"]
    assert len(changes) == 1
    c = changes[0]
    assert (c.from_stance, c.to_stance) == (case.first[0], case.second)
    assert c.conformity is case.flagged, c.reason
    assert [(i.author, i.topic, i.match) for i in c.influences] == list(case.influences)
    assert len(c.own_arguments) == case.own
    assert case.reason in c.reason
    for i in c.influences:  # quotes are verbatim
        source = next(
            (state.answer(x) for r in state.rounds for x in r.contributions
             if x.position == i.position),
            next((h.text for h in state.human_inputs if h.position == i.position), ""),
        )
        assert i.quote
        assert i.quote in source
    flagged = [f.participant for f in engine.conformity_flags(state)]
    assert flagged == (["X"] if case.flagged else [])
