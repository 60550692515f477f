"""The one conformity rule (``forge_ledger.engine.conformity``), case by case.

Each case is a small session built with the real aggregate: participant X and two others
(M1, M2) vote, something (or nothing) happens, and they vote again. The table says what X's
stance change must be: flagged or not, which influences, and why.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest

from forge_ledger import engine
from forge_ledger.clock import FixedStepClock
from forge_ledger.domain import Deliberation
from forge_ledger.domain import events as ev
from forge_ledger.domain.values import (
    ChatMessage,
    ConvergenceVote,
    DivergenceStatus,
    DivergentPosition,
    ModelResponse,
    Opinion,
    Participant,
    RoundKind,
    SessionConfig,
    Stance,
    TokenCount,
    Topic,
)
from support.random_sessions import PARAMS

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


@dataclass
class _Builder:
    agg: Deliberation
    clock: FixedStepClock = field(default_factory=FixedStepClock)

    def say(self, number: int, who: str, text: str) -> None:
        msgs = [ChatMessage(role="user", content="go")]
        self.agg.record_contribution(
            round=number, participant=who, model=f"openai/{who}", messages=msgs, params=PARAMS,
            prompt_hash=ev.prompt_hash(msgs), at=self.clock.now(),
            response=ModelResponse(content=text, model=f"openai/{who}",
                                   tokens=TokenCount(input=1, output=1)),
        )

    def vote(self, iteration: int, stances: dict[str, Stance],
             concerns: tuple[str, ...]) -> int:
        n = self.agg.start_round(kind=RoundKind.CONVERGENCE, iteration=iteration,
                                 participants=list(stances), at=self.clock.now())
        for who, s in stances.items():
            self.say(n, who, f"vote {s.value}")
            vote = ConvergenceVote(agrees=s.agrees, stance=s, score=70, reasoning="same words",
                                   concerns=concerns if who == "X" else ())
            self.agg.record_vote(round=n, participant=who, at=self.clock.now(), vote=vote)
        self.agg.complete_round(round=n, at=self.clock.now())
        return n


def _session(case: Case) -> Deliberation:
    clock = FixedStepClock()
    agg = Deliberation.start(
        session_id=uuid.UUID(int=7), topic=Topic(title="Event log"), config=SessionConfig(),
        participants=[Participant(name=n, model=f"openai/{n}") for n in ("X", "M1", "M2")],
        at=clock.now(),
    )
    b = _Builder(agg, clock)
    d = agg.start_round(kind=RoundKind.DRAFT, iteration=1, participants=["M1"], at=clock.now())
    b.say(d, "M1", "Draft.")
    agg.complete_round(round=d, at=clock.now())
    x1, m1, m2 = case.first
    b.vote(1, {"X": x1, "M1": m1, "M2": m2}, case.concerns[0])
    if case.divergence is not None:
        agg.detect_divergence(ev.DivergenceDetected(
            divergence_id="d1", round=agg.state.rounds[-1].number, topic=case.divergence[0],
            positions=(DivergentPosition(participant="X", position="no", stance=S.DISAGREE),)),
            at=clock.now())
    if case.human:
        agg.human_input(author="dana", text=case.human, kind="steer", at=clock.now())
    for said in case.between:
        n = agg.start_round(kind=said.kind, iteration=2, participants=[said.author],
                            targets={said.author: "X"} if said.kind is RoundKind.CRITIQUE else {},
                            at=clock.now())
        b.say(n, said.author, said.text)
        if said.opinion is not None:
            agg.record_opinion(round=n, participant=said.author, opinion=said.opinion,
                               at=clock.now())
        agg.complete_round(round=n, at=clock.now())
        if case.divergence is not None and case.divergence[1] is said.kind:
            agg.change_divergence("d1", DivergenceStatus.ADDRESSED, at=clock.now(), round=n)
    b.vote(2, {"X": case.second, "M1": m1, "M2": m2}, case.concerns[1])
    return agg


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
            (x.response.content for r in state.rounds for x in r.contributions
             if x.position == i.position),
            next((h.text for h in state.human_inputs if h.position == i.position), ""),
        )
        assert i.quote and i.quote in source
    flagged = [f.participant for f in engine.conformity_flags(state)]
    assert flagged == (["X"] if case.flagged else [])
