"""The conformity rule and the influence matching rule: who moved, who moved them, and who
moved with no argument at all.

Debate research (notes/anchors.md) finds agents copy the majority often and that much of a
debate's gain is the vote itself. The trail, the audit and the projections all answer "did
this participant conform?" from this one module, so they can never disagree.

**Stance change.** Two consecutive votes of one participant (convergence rounds not undone by
a rewind, abstentions skipped) whose effective stances differ. Its *direction* is up (toward
agreement) when the stance's rank rises (strongly_disagree < disagree < partial < agree <
strongly_agree), down otherwise.

**Influence** (who moved whom). A contribution by *another* participant in a round strictly
between the two votes influenced the change when it argued in the change's direction on a
topic at stake, either

1. by text: one of its sentences mentions the topic (:func:`.topics.mentions`, the matcher
   the divergence detector uses) and the contribution argues in that direction — a draft or
   synthesis proposes text (up), a critique objects (down), a response or refinement argues
   the side of its stated stance (partial argues neither way); or
2. by divergence: the change is up, and a divergence on the topic that lists the participant
   was marked addressed, resolved or withdrawn in that contribution's round (the record says
   that round answered it).

A human input recorded between the two votes influenced it when it mentions a topic at stake.
The *topics at stake* are the concerns of both votes and the topics of the divergences listing
the participant that were open at some point between the two votes. Each influence carries a
quote taken verbatim from the contribution: the first sentence mentioning the topic, else (a
divergence match) its first sentence, cut at :data:`QUOTE_CHARS` characters.

**Own new argument.** A point the participant raises that its previous vote did not: a concern
of its new vote, or a concern or topic label of its own response or refinement between the two
votes, on a topic none of its previous vote's concerns names (:func:`.topics.same_topic`).
Stating a stance with a reason is not an argument, nor is rewording the vote's reasoning:
models rephrase every time, and a flip announced in a refinement is still a flip.

**Conformity.** A stance change is flagged when the stance moves *toward the previous vote's
majority* — its side (agree / partial / disagree) moves up when that vote's plain majority
agreed (more than half of the votes cast agree), down when it did not — and no new argument
came in between: no influence and no own new argument. A change within a side (agree →
strongly_agree) is reported but never flagged; a change away from the majority is not
conformity, even unargued.

Pure: no clock, no I/O; the same state always gives the same answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..domain.state import ContributionState, RoundState, SessionState
from ..domain.values import DivergenceStatus, RoundKind, Stance
from .topics import mentions, same_topic
from .votes import counted_votes

__all__ = [
    "QUOTE_CHARS",
    "Influence",
    "StanceChange",
    "conformity_flags",
    "plain_majority",
    "round_changes",
    "stance_changes",
]

QUOTE_CHARS = 300
"""The longest quote kept (a verbatim prefix of the sentence)."""

_SENTENCE = re.compile(r"(?:[^.!?\n]|\n(?![ \t]*(?:\n|[#*>|-]|\d+[.)])))+[.!?]*")
"""A sentence: up to its end mark; a line break continues it unless a blank line, heading,
list item or table row follows (wrapped prose stays one sentence)."""
_ANSWERED = (DivergenceStatus.ADDRESSED, DivergenceStatus.RESOLVED, DivergenceStatus.WITHDRAWN)


@dataclass(frozen=True)
class Influence:
    """A contribution (or human input) that argued toward a participant's new stance."""

    author: str
    participant: str
    round: int | None
    """The contribution's round; None for a human input."""
    kind: str
    """The round kind, or ``human`` for a human input."""
    topic: str
    quote: str
    position: int
    """Ledger position of the contribution (or human input)."""
    match: str
    """``text`` (a sentence mentions the topic) or ``divergence`` (its round answered one)."""


@dataclass(frozen=True)
class StanceChange:
    """One participant's stance change between two consecutive votes of its own."""

    participant: str
    iteration: int
    from_round: int
    to_round: int
    from_stance: Stance
    to_stance: Stance
    position: int
    """Ledger position of the contribution carrying the new vote."""
    majority_agreed: bool
    """The plain majority of the vote in ``from_round``."""
    toward_majority: bool
    influences: tuple[Influence, ...]
    own_arguments: tuple[str, ...]
    conformity: bool
    reason: str
    """Why it is (or is not) flagged, in one sentence."""


def _side(s: Stance) -> int:
    return 1 if s.agrees else (-1 if s.disagrees else 0)


def _votes(r: RoundState) -> dict[str, ContributionState]:
    """The counted votes (:func:`counted_votes`), in the order the participants first answered."""
    counted = counted_votes(r)
    if len(counted) < 2:
        return counted
    return {name: counted[name] for name in r.latest_answers() if name in counted}


def plain_majority(r: RoundState) -> bool:
    """True when more than half of the votes cast in ``r`` agree (the engine's plain majority)."""
    votes = [c.vote for c in _votes(r).values() if c.vote is not None]
    return 2 * sum(1 for v in votes if v.effective_stance.agrees) > len(votes)


def _sentences(text: str) -> list[str]:
    out: list[str] = []
    for m in _SENTENCE.finditer(text):
        chunk = m.group(0)
        while chunk.lstrip().startswith("#") and "\n" in chunk:  # a heading stands alone
            head, chunk = chunk.split("\n", 1)
            out.append(head.strip())
        if chunk.strip():
            out.append(chunk.strip())
    return [s for s in out if s]


def _quote(text: str, topic: str | None) -> str | None:
    """The first sentence mentioning ``topic`` (any first sentence when ``topic`` is None)."""
    for s in _sentences(text):
        if topic is None or mentions(s, topic):
            return s[:QUOTE_CHARS]
    return None


def _direction(r: RoundState, c: ContributionState) -> int:
    if r.kind in (RoundKind.DRAFT, RoundKind.SYNTHESIS):
        return 1
    if r.kind is RoundKind.CRITIQUE:
        return -1
    if r.kind in (RoundKind.RESPONSE, RoundKind.REFINEMENT) and c.opinion is not None:
        return _side(c.opinion.stance)
    return 0


def _topics_at_stake(
    state: SessionState, name: str, old: ContributionState, new: ContributionState,
    new_round: RoundState,
) -> list[str]:
    topics: list[str] = []
    for c in (old, new):
        for concern in c.vote.concerns if c.vote is not None else ():
            if not any(same_topic(concern, t) for t in topics):
                topics.append(concern)
    for d in state.divergences:
        if not any(p.participant == name for p in d.positions):
            continue
        closed = [h.position for h in d.history if h.status.closed]
        if d.opened_position < new_round.started_position and (
            not closed or closed[0] > old.position
        ) and not any(same_topic(d.topic, t) for t in topics):
            topics.append(d.topic)
    return topics


def _answered_in(state: SessionState, name: str, topic: str, round_no: int) -> bool:
    for d in state.divergences:
        if (
            same_topic(d.topic, topic)
            and any(p.participant == name for p in d.positions)
            and any(h.round == round_no and h.status in _ANSWERED for h in d.history)
        ):
            return True
    return False


def _contribution_influences(
    state: SessionState, name: str, between: list[RoundState], topics: list[str], up: bool,
) -> list[Influence]:
    found: list[Influence] = []
    for r in between:
        for c in r.contributions:
            if c.participant == name or c.abstained or c.blank:
                continue
            direction = _direction(r, c)
            for topic in topics:
                quote, match = None, "text"
                if direction == (1 if up else -1):
                    quote = _quote(state.answer(c), topic)
                if quote is None and up and _answered_in(state, name, topic, r.number):
                    text = state.answer(c)
                    quote = _quote(text, topic) or _quote(text, None)
                    match = "divergence"
                if quote is not None:
                    found.append(Influence(c.participant, name, r.number, r.kind.value, topic,
                                           quote, c.position, match))
                    break
    return found


def _human_influences(
    state: SessionState, name: str, after: int, before: int, topics: list[str]
) -> list[Influence]:
    found: list[Influence] = []
    for h in state.human_inputs:
        if not after < h.position < before:
            continue
        for topic in topics:
            quote = _quote(h.text, topic)
            if quote is not None:
                found.append(Influence(h.author or "human", name, None, "human", topic, quote,
                                       h.position, "text"))
                break
    return found


def _own_arguments(
    name: str, old: ContributionState, new: ContributionState, between: list[RoundState],
) -> list[str]:
    assert old.vote is not None
    assert new.vote is not None
    known = list(old.vote.concerns)
    points = [("its new vote", x) for x in new.vote.concerns]
    for r in between:
        c = r.contribution_of(name)
        if c is not None and c.opinion is not None:
            where = f"its {r.kind.value} in round {r.number}"
            points += [(where, x) for x in (*c.opinion.concerns, *c.opinion.topics)]
    own: list[str] = []
    for where, point in points:
        if not any(same_topic(point, k) for k in known):
            own.append(f"{where} raised: {point}")
            known.append(point)
    return own


def _change(
    state: SessionState, name: str, rounds: tuple[RoundState, RoundState],
    votes: tuple[ContributionState, ContributionState], between: list[RoundState],
) -> StanceChange:
    (old_round, new_round), (old, new) = rounds, votes
    assert old.vote is not None
    assert new.vote is not None
    a, b = old.vote.effective_stance, new.vote.effective_stance
    up = b.rank > a.rank
    majority = plain_majority(old_round)
    toward = _side(b) > _side(a) if majority else _side(b) < _side(a)
    topics = _topics_at_stake(state, name, old, new, new_round)
    influences = _contribution_influences(state, name, between, topics, up)
    influences += _human_influences(state, name, old.position, new.position, topics)
    own = _own_arguments(name, old, new, between)
    conformity = toward and not influences and not own
    if conformity:
        side = "agreeing" if majority else "not agreeing"
        reason = (f"moved toward the previous vote's majority ({side}) with no new argument "
                  f"between round {old_round.number} and round {new_round.number}")
    elif influences or own:
        reason = "a new argument came in between"
    elif _side(a) == _side(b):
        reason = "a change of intensity within one side"
    else:
        reason = "moved away from the previous vote's majority"
    return StanceChange(
        participant=name, iteration=new_round.iteration, from_round=old_round.number,
        to_round=new_round.number, from_stance=a, to_stance=b, position=new.position,
        majority_agreed=majority, toward_majority=toward,
        influences=tuple(sorted(influences, key=lambda i: i.position)),
        own_arguments=tuple(own), conformity=conformity, reason=reason,
    )


def round_changes(state: SessionState, number: int) -> list[StanceChange]:
    """The stance changes that convergence round ``number`` shows, in its voters' order.

    Empty for a round undone by a rewind or one that is not a vote. Walks back only as far
    as each voter's previous vote, so the projections can ask it round by round.
    """
    rounds = state.active_rounds
    # from the newest: a projection asks about the round just voted, and a scan from the
    # first round cost as much as the session was long (round numbers are unique)
    idx = next((i for i in range(len(rounds) - 1, -1, -1) if rounds[i].number == number), None)
    if idx is None or rounds[idx].kind is not RoundKind.CONVERGENCE:
        return []
    current = _votes(rounds[idx])
    out: list[StanceChange] = []
    earlier: dict[int, dict[str, ContributionState]] = {}  # each round's votes, counted once
    for name, new in current.items():
        for j in range(idx - 1, -1, -1):
            prev = rounds[j]
            if prev.kind is not RoundKind.CONVERGENCE:
                continue
            if j not in earlier:
                earlier[j] = _votes(prev)
            old = earlier[j].get(name)
            if old is None:
                continue
            assert old.vote is not None
            assert new.vote is not None
            if old.vote.effective_stance is not new.vote.effective_stance:
                out.append(_change(state, name, (prev, rounds[idx]), (old, new),
                                   list(rounds[j + 1:idx])))
            break
    return out


def stance_changes(state: SessionState) -> list[StanceChange]:
    """Every stance change of the session, in round order."""
    out: list[StanceChange] = []
    for r in state.active_rounds:
        if r.kind is RoundKind.CONVERGENCE:
            out.extend(round_changes(state, r.number))
    return out


def conformity_flags(state: SessionState) -> list[StanceChange]:
    """The stance changes flagged as conformity (see the module docstring), in round order."""
    return [c for c in stance_changes(state) if c.conformity]
