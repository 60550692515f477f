"""What the deliberation does next: the round sequence as a pure function of session state.

The orchestrator asks :func:`next_step` whenever no round is open. The answer depends only on
the recorded events (through :class:`SessionState`) and on the elapsed time the caller measured,
so a replay asks the same questions and gets the same answers.

Sequence (DESIGN.md §1):

* iteration 1: ``draft`` (every drafter, blind to the others) → ``critique`` (each participant
  reviews another author's draft, never its own; rotation in participant order) → ``response``
  (authors answer the critiques they received) → ``synthesis`` (one synthesizer) →
  ``convergence`` (everyone votes);
* later iterations: ``refinement`` (only dissenters answer the synthesis, depth ≤
  ``max_recursive_depth``) → ``synthesis`` → ``convergence``.

Rounds with nobody to run (no critique possible with a single author, no critique received)
are skipped rather than started empty. Only rounds not superseded by a rewind count, both for
the sequence and for the ``max_rounds`` budget: after ``back N`` the session continues as if
the undone rounds had not happened (they stay in the ledger for audit).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from ..domain.state import RoundState, SessionState
from ..domain.values import Participant, ParticipantRole, RoundKind, SessionStatus
from ..errors import InvariantViolation
from .anonymity import labels_before
from .convergence import convergence
from .votes import counted_votes

if TYPE_CHECKING:
    from ..domain.aggregate import Deliberation

__all__ = [
    "ROUNDS_PER_LATER_ITERATION",
    "AskHuman",
    "BudgetStop",
    "Finish",
    "StartRound",
    "Step",
    "begin_round",
    "critique_targets",
    "drafters",
    "next_step",
    "roles_after_leaving",
    "synthesizer",
]

ROUNDS_PER_LATER_ITERATION = 3
"""refinement + synthesis + convergence: an iteration is not started without room for its vote."""

_MAX_QUESTIONS = 5


@dataclass(frozen=True)
class StartRound:
    """Start a round of ``kind`` with these contributors (in recording order).

    ``targets``: critique → critic: author critiqued (never itself); response → author: "";
    refinement → dissenter: synthesizer whose synthesis it answers.
    """

    kind: RoundKind
    iteration: int
    participants: tuple[str, ...]
    targets: Mapping[str, str] = field(default_factory=dict)
    depth: int = 0
    focus: str = ""
    technique: str | None = None


@dataclass(frozen=True)
class Finish:
    """End the session with a terminal status (converged or complete; aborted when nothing can
    go on)."""

    status: SessionStatus
    reason: str
    score: float = 0.0


@dataclass(frozen=True)
class AskHuman:
    """Attended mode: pause after this iteration's vote and put these questions to the human."""

    questions: tuple[str, ...]


@dataclass(frozen=True)
class BudgetStop:
    """A budget (cost, time or rounds) does not allow another round."""

    budget: Literal["cost", "time", "rounds"]
    limit: float
    spent: float
    detail: str


Step = StartRound | Finish | AskHuman | BudgetStop


# --------------------------------------------------------------------------- roles


def begin_round(agg: Deliberation, step: StartRound, at: datetime) -> int:
    """Start the round ``step`` asks for, as every caller must: its review labels first (when
    the round's kind anonymises), then the round itself. Returns the round's number."""
    labels = labels_before(agg.state, step.kind)
    if labels is not None:
        agg.assign_review_labels(labels, at=at)
    return agg.start_round(
        kind=step.kind,
        iteration=step.iteration,
        participants=step.participants,
        targets=dict(step.targets),
        depth=step.depth,
        focus=step.focus,
        technique=step.technique,
        at=at,
    )


def drafters(state: SessionState) -> tuple[str, ...]:
    """Participants with the drafter role when there are any, otherwise everyone."""
    chosen = [p.name for p in state.participants if p.role is ParticipantRole.DRAFTER]
    return tuple(chosen or state.participant_names)


def synthesizer(state: SessionState) -> str:
    """The participant with the synthesizer role, else the first participant."""
    for p in state.participants:
        if p.role is ParticipantRole.SYNTHESIZER:
            return p.name
    return state.participants[0].name


SINGLE_HOLDER_ROLES = frozenset({ParticipantRole.SYNTHESIZER})
"""Roles a step gives to one holder (:func:`synthesizer`): when their only holder leaves, the
role is handed over. The drafter role needs no hand-over: without drafters everyone drafts."""


def roles_after_leaving(
    participants: Sequence[Participant], leaving: str
) -> tuple[Participant, ...]:
    """The participants whose role changes when ``leaving`` leaves, as they are afterwards.

    A role in :data:`SINGLE_HOLDER_ROLES` that only ``leaving`` holds goes to the first
    remaining generalist in participant order (a generalist gives up no role of its own);
    another role leaves with its holder. Raises :class:`InvariantViolation` when such a role
    has nobody to go to.
    """
    gone = next((p for p in participants if p.name == leaving), None)
    rest = [p for p in participants if p.name != leaving]
    if gone is None or gone.role not in SINGLE_HOLDER_ROLES:
        return ()
    if any(p.role is gone.role for p in rest):
        return ()
    heir = next((p for p in rest if p.role is ParticipantRole.GENERALIST), None)
    if heir is None:
        raise InvariantViolation(
            f"{leaving!r} is the only {gone.role.value} and no generalist is left to take the "
            "role over",
            hint=f"swap its model instead (-m {leaving}=MODEL)",
        )
    return (heir.model_copy(update={"role": gone.role}),)


def critique_targets(participants: tuple[str, ...], authors: tuple[str, ...]) -> dict[str, str]:
    """Deterministic critic → author assignment; nobody ever critiques its own draft.

    An author critiques the next author after itself (cyclic, in participant order), so every
    draft gets a critique when there are at least two authors. Participants without a draft
    are spread round-robin over the authors. A lone author has nobody to critique.
    """
    targets: dict[str, str] = {}
    others = 0
    for name in participants:
        if name in authors:
            if len(authors) < 2:
                continue
            i = authors.index(name)
            targets[name] = authors[(i + 1) % len(authors)]
        elif authors:
            targets[name] = authors[others % len(authors)]
            others += 1
    return targets


# --------------------------------------------------------------------------- helpers


def _answered(r: RoundState) -> tuple[str, ...]:
    """Who contributed an answer and did not abstain, in expected order."""
    return tuple(
        p for p in r.expected if r.contribution_of(p) is not None and p not in r.abstained
    )


def _ordered(state: SessionState, names: set[str]) -> tuple[str, ...]:
    return tuple(p for p in state.participant_names if p in names)


def _iteration_rounds(state: SessionState, iteration: int) -> list[RoundState]:
    return [r for r in state.active_rounds if r.iteration == iteration]


def _latest(state: SessionState, kind: RoundKind) -> RoundState | None:
    for r in reversed(state.active_rounds):
        if r.kind is kind:
            return r
    return None


def _technique_for(state: SessionState, iteration: int) -> str | None:
    """The newest technique suggested for this iteration (or the one before) not yet applied."""
    for t in reversed(state.techniques):
        if not t.applied and t.iteration in (iteration - 1, iteration):
            return t.technique_slug
    return None


def _focus(state: SessionState) -> str:
    topics = [d.topic for d in state.open_divergences]
    return "; ".join(topics[:_MAX_QUESTIONS])


def _budget_stop(state: SessionState, elapsed_secs: float, rounds_needed: int) -> BudgetStop | None:
    cfg = state.config
    used = len(state.active_rounds)
    if used + rounds_needed > cfg.max_rounds:
        detail = (
            f"{used} of {cfg.max_rounds} rounds used"
            if rounds_needed <= 1
            else f"{used} of {cfg.max_rounds} rounds used; another iteration needs "
            f"{rounds_needed}"
        )
        return BudgetStop("rounds", float(cfg.max_rounds), float(used), detail)
    if elapsed_secs >= cfg.max_time_secs:
        return BudgetStop(
            "time",
            float(cfg.max_time_secs),
            float(elapsed_secs),
            f"{elapsed_secs:.0f}s elapsed of {cfg.max_time_secs}s",
        )
    if state.cost_usd >= cfg.max_cost_usd:
        return BudgetStop(
            "cost",
            cfg.max_cost_usd,
            state.cost_usd,
            f"${state.cost_usd:.4f} spent of ${cfg.max_cost_usd:.4f}",
        )
    return None


# --------------------------------------------------------------------------- next step


def next_step(state: SessionState, *, elapsed_secs: float) -> Step:
    """The next thing the orchestrator should do (see the module docstring)."""
    if state.status.terminal:
        return Finish(state.status, state.status_reason or f"session is {state.status.value}")
    if state.open_round is not None:
        raise InvariantViolation(
            f"round {state.open_round.number} is still open",
            hint="complete it before asking for the next step",
        )
    if not state.participants:
        return Finish(SessionStatus.ABORTED, "the session has no participants")
    last = state.active_rounds[-1] if state.active_rounds else None
    if last is None:
        return _guarded(state, elapsed_secs, _draft(state))
    if last.kind is RoundKind.CONVERGENCE:
        return _after_vote(state, last, elapsed_secs)
    return _guarded(state, elapsed_secs, _within_iteration(state, last))


def _guarded(state: SessionState, elapsed_secs: float, step: Step) -> Step:
    if isinstance(step, StartRound):
        stop = _budget_stop(state, elapsed_secs, 1)
        if stop is not None:
            return stop
    return step


def _draft(state: SessionState) -> StartRound:
    """The first round. A session imported from a YAML file already has iterations (recorded,
    without rounds): the deliberation continues with the next one."""
    iteration = state.iteration + 1 if state.imported is not None else 1
    return StartRound(RoundKind.DRAFT, iteration, drafters(state))


def _within_iteration(state: SessionState, last: RoundState) -> Step:
    iteration = last.iteration
    rounds = _iteration_rounds(state, iteration)
    if last.kind is RoundKind.DRAFT:
        # a draft whose author has left (a fork without it) gets no critique: nobody answers it
        authors = tuple(a for a in _answered(last) if state.participant(a) is not None)
        if not authors:
            return Finish(SessionStatus.ABORTED, "no participant produced a draft")
        targets = critique_targets(tuple(state.participant_names), authors)
        if targets:
            critics = _ordered(state, set(targets))
            return StartRound(
                RoundKind.CRITIQUE, iteration, critics, {c: targets[c] for c in critics}
            )
        return _synthesis(state, iteration)
    if last.kind is RoundKind.CRITIQUE:
        done = set(_answered(last))
        critiqued = {last.targets[c] for c in done if c in last.targets}
        if critiqued:
            answering = _ordered(state, critiqued)
            return StartRound(
                RoundKind.RESPONSE, iteration, answering, dict.fromkeys(answering, "")
            )
        return _synthesis(state, iteration)
    if last.kind in (RoundKind.RESPONSE, RoundKind.REFINEMENT):
        return _synthesis(state, iteration, rounds)
    # synthesis → everyone votes
    if not _answered(last):
        return Finish(SessionStatus.COMPLETE, f"the synthesis of round {last.number} failed")
    return StartRound(RoundKind.CONVERGENCE, iteration, tuple(state.participant_names))


def _synthesis(
    state: SessionState, iteration: int, rounds: list[RoundState] | None = None
) -> StartRound:
    technique = _technique_for(state, iteration)
    depth = 0
    for r in reversed(rounds or []):
        if r.kind is RoundKind.REFINEMENT:
            technique = technique or r.technique
            depth = r.depth
            break
    return StartRound(
        RoundKind.SYNTHESIS,
        iteration,
        (synthesizer(state),),
        depth=depth,
        focus=_focus(state),
        technique=technique,
    )


def _after_vote(state: SessionState, vote_round: RoundState, elapsed_secs: float) -> Step:
    result = state.evaluation(vote_round.number)
    if result is not None:
        converged, score = result.converged, result.score
        remaining = list(result.remaining_issues)
    else:
        evaluated = convergence(state, vote_round)
        converged, score = evaluated.converged, evaluated.score
        remaining = list(evaluated.remaining_issues)
    if converged:
        return Finish(
            SessionStatus.CONVERGED,
            f"converged at iteration {vote_round.iteration} (score {score:.2f})",
            score,
        )
    cfg = state.config
    if not cfg.recursive_refinement:
        return Finish(
            SessionStatus.COMPLETE,
            f"not converged (score {score:.2f}) and recursive refinement is off",
            score,
        )
    depth = 1 + sum(1 for r in state.active_rounds if r.kind is RoundKind.REFINEMENT)
    if depth > cfg.max_recursive_depth:
        return Finish(
            SessionStatus.COMPLETE,
            f"not converged (score {score:.2f}) after {depth - 1} refinement(s), "
            f"the maximum depth",
            score,
        )
    dissenters = _dissenters(state, vote_round)
    if not dissenters:
        return _after_dissenters_left(state, vote_round, score, elapsed_secs)
    stop = _budget_stop(state, elapsed_secs, ROUNDS_PER_LATER_ITERATION)
    if stop is not None:
        return stop
    iteration = vote_round.iteration
    if cfg.attended and not _human_answered(state, iteration):
        return AskHuman(_questions(state, score, remaining))
    synth = _latest(state, RoundKind.SYNTHESIS)
    written = tuple(
        p for p in (_answered(synth) if synth is not None else ()) if state.participant(p)
    )
    # a fallback may have written it; its author may have left (a fork without it)
    author = written[0] if written else synthesizer(state)
    return StartRound(
        RoundKind.REFINEMENT,
        iteration + 1,
        dissenters,
        dict.fromkeys(dissenters, author),
        depth=depth,
        focus=_focus(state),
        technique=_technique_for(state, iteration + 1),
    )


def _after_dissenters_left(
    state: SessionState, vote_round: RoundState, score: float, elapsed_secs: float
) -> Step:
    """Nobody who disagreed is left to refine. When voters have left since the vote (a fork
    without them), the vote no longer speaks for the panel: the ones still here vote again on
    the same text, as a new iteration. Otherwise nothing would change the outcome."""
    left = [name for name in vote_round.expected if state.participant(name) is None]
    if not left:
        return Finish(
            SessionStatus.COMPLETE,
            f"not converged (score {score:.2f}) and nobody is left to refine",
            score,
        )
    stop = _budget_stop(state, elapsed_secs, 1)
    if stop is not None:
        return stop
    return StartRound(
        RoundKind.CONVERGENCE, vote_round.iteration + 1, tuple(state.participant_names)
    )


def _dissenters(state: SessionState, vote_round: RoundState) -> tuple[str, ...]:
    """Voters who did not agree; when nobody voted against, those who could not vote."""
    counted = counted_votes(vote_round)
    against = {
        name for name, c in counted.items()
        if c.vote is not None and not c.vote.effective_stance.agrees
    }
    silent = {name for name in vote_round.expected if name not in counted}
    return _ordered(state, against or silent)


def _human_answered(state: SessionState, iteration: int) -> bool:
    return any(h.kind == "answer" and h.iteration == iteration for h in state.human_inputs)


def _questions(state: SessionState, score: float, remaining: list[str]) -> tuple[str, ...]:
    """Questions from the open dissent first, then the remaining issues of the vote."""
    questions: list[str] = []
    for d in state.open_divergences:
        sides = ", ".join(f"{p.participant} ({p.stance.value})" for p in d.positions)
        questions.append(f"[{d.id}] {d.topic} — positions: {sides}. Which should prevail?")
    for issue in remaining:
        q = f"Remaining issue: {issue} — how should it be handled?"
        if q not in questions:
            questions.append(q)
    if not questions:
        questions.append(
            f"The vote did not converge (score {score:.2f} < "
            f"{state.config.convergence_threshold:.2f}). What should the next refinement "
            "focus on?"
        )
    return tuple(questions[:_MAX_QUESTIONS])

