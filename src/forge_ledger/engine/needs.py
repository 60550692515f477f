"""What a round needs before it may complete: the rule that decides when a fault pauses a session.

A round whose calls failed (after every attempt) may still complete when the answers it did get
are enough for the deliberation to go on; otherwise the session pauses on the fault and
``resume`` retries the missing participants. Enough means:

* a single-author round (the synthesis, or any round with one contributor): its author's
  answer, or the answer of the participant a fallback handed it to (:func:`fallback_author`);
* a convergence vote: ``min_consensus`` voters (capped at the number of voters, as the
  convergence rule caps it), since fewer can never converge;
* every other round (drafts, critiques, responses, refinements): at least one answer.

An answer that could not be parsed still counts (the participant abstains, the session goes
on): only a call that never produced an answer leaves a participant missing.
"""

from __future__ import annotations

from ..domain.state import RoundState, SessionState
from ..domain.values import ParticipantRole, RoundKind

__all__ = ["answers_needed", "fallback_author", "round_shortfall"]

_FALLBACK_KINDS = frozenset({RoundKind.DRAFT, RoundKind.SYNTHESIS})
"""Rounds whose text another participant can write in the failed author's place."""


def answers_needed(state: SessionState, rnd: RoundState) -> int:
    """How many of the round's participants must have answered for it to complete (a
    single-author round needs its one answer, whoever gave it after a fallback)."""
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


def fallback_author(state: SessionState, rnd: RoundState, failed: str) -> str | None:
    """Who takes over a draft or synthesis whose author ``failed`` every attempt, when the
    session allows fallbacks: a participant not yet in the round, same role as the failed
    author first, then generalists, then the others, each in participant order; None when
    nobody is left (the session then pauses)."""
    if not state.config.fallback or rnd.kind not in _FALLBACK_KINDS:
        return None
    if rnd.contributors:
        return None  # someone answered: the round has what it needs
    gone = state.participant(failed)
    role = gone.role if gone is not None else None
    free = [p for p in state.participants if p.name not in rnd.expected]
    ranked = sorted(
        free,
        key=lambda p: 0 if p.role is role else 1 if p.role is ParticipantRole.GENERALIST else 2,
    )
    return ranked[0].name if ranked else None
