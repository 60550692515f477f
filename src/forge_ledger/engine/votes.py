"""Who counts as a voter: the one rule the score, the dissent, the majority and the trail share."""

from __future__ import annotations

from ..domain.state import ContributionState, RoundState

__all__ = ["counted_votes"]


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
