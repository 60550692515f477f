"""Who counts as a voter: the one rule the score, the dissent, the majority and the trail share."""

from __future__ import annotations

from ..domain.state import ContributionState, RoundState
from ..domain.values import Stance

__all__ = ["CONTRADICTION_MARGIN", "contradicting_votes", "counted_votes", "score_contradiction"]

CONTRADICTION_MARGIN = 20
"""How far past the middle of the 0-100 scale (50) a vote's score must lie, on the side
opposite its stance, to contradict it: an agreeing vote scoring below 30, a disagreeing one
above 70."""


def counted_votes(r: RoundState) -> dict[str, ContributionState]:
    """The contributions whose vote counts in ``r``, by participant, in expected order.

    A participant counts when their latest answer in the round carries a parsed vote and they
    did not abstain (a failed call or a skip). Everyone else expected in the round abstains:
    the weighted score, the agree/partial/disagree counts, the plain majority and the stance
    changes all start from this one list, so they can never disagree about who voted.
    """
    latest = r.latest_answers()
    out: dict[str, ContributionState] = {}
    for name in r.expected:
        c = latest.get(name)
        if c is not None and c.vote is not None and name not in r.abstained:
            out[name] = c
    return out


def score_contradiction(stance: Stance, score: int) -> str | None:
    """Why a vote's ``score`` contradicts its ``stance``, or None when they agree (the one
    rule; a parsed vote's stance is ``ConvergenceVote.effective_stance``).

    An agreeing stance (agree, strongly agree) with a score below ``50 - CONTRADICTION_MARGIN``
    or a disagreeing one with a score above ``50 + CONTRADICTION_MARGIN`` says two things at
    once: the weighted score counts the number, the majority and the dissent log count the
    stance, so a reader should know they pull apart. A partial stance contradicts no score.
    The vote as recorded is left as it is; this is only said where the vote is shown.
    """
    if stance.agrees and score < 50 - CONTRADICTION_MARGIN:
        return f"{stance.value} with score {score}: the score says it does not agree"
    if stance.disagrees and score > 50 + CONTRADICTION_MARGIN:
        return f"{stance.value} with score {score}: the score says it agrees"
    return None


def contradicting_votes(r: RoundState) -> tuple[str, ...]:
    """The counted votes of ``r`` whose score contradicts their stance, one
    ``"participant: why"`` each (:func:`score_contradiction`), in expected order."""
    out = []
    for name, c in counted_votes(r).items():
        vote = c.vote
        why = score_contradiction(vote.effective_stance, vote.score) if vote else None
        if why:
            out.append(f"{name}: {why}")
    return tuple(out)
