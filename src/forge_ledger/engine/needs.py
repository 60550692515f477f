"""What a round needs before it may complete: the rule that decides when a fault pauses a session.

A round whose calls failed (after every attempt) may still complete when the answers it did get
are enough for the deliberation to go on; otherwise the session pauses on the fault and
``resume`` retries the missing participants. Enough means:

* a single-author round (the synthesis, or any round with one contributor): its author;
* a convergence vote: ``min_consensus`` voters (capped at the number of voters, as the
  convergence rule caps it), since fewer can never converge;
* every other round (drafts, critiques, responses, refinements): at least one answer.

An answer that could not be parsed still counts (the participant abstains, the session goes
on): only a call that never produced an answer leaves a participant missing.
"""

from __future__ import annotations

from ..domain.state import RoundState, SessionState
from ..domain.values import RoundKind

__all__ = ["answers_needed", "round_shortfall"]


def answers_needed(state: SessionState, rnd: RoundState) -> int:
    """How many of the round's participants must have answered for it to complete."""
    if rnd.kind is RoundKind.SYNTHESIS or len(rnd.expected) <= 1:
        return len(rnd.expected)
    if rnd.kind is RoundKind.CONVERGENCE:
        return min(state.config.min_consensus, len(rnd.expected))
    return 1


def round_shortfall(state: SessionState, rnd: RoundState) -> tuple[str, ...]:
    """The participants still missing an answer when the round lacks one it needs, in
    participant order; empty when the round may complete."""
    answered = set(rnd.contributors)
    if len(answered) >= answers_needed(state, rnd):
        return ()
    return tuple(name for name in rnd.expected if name not in answered)
