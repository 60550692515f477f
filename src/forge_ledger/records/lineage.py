"""Forks and side-by-side comparison of sessions (DESIGN §3.4: "fork from any past position").

A fork is a new session whose first event (``SessionForked``) carries a copy of its parent's
state as of one position plus a :class:`~forge_ledger.domain.events.ForkOrigin` (parent id,
position, that event's hash, iteration). Copying the state makes the fork self-contained (it
replays and exports without the parent) while the origin hash ties it to the shared history:
anyone can check that the parent's event at ``parent_position`` still hashes to it.

A fork's positions continue its parent's: its first event takes the fork point's position
(``parent_position``), its own events follow it, and the positions before it are the
parent's (:meth:`Ledger.state` and :meth:`Ledger.prompt` read them there). Every rule that
compares positions (the dissent a prompt shows, a divergence's lifecycle, provenance, a
rewind) then sees the same numbers in a parent and its fork.

What a fork's state differs from its parent's state at the fork position in (and nothing else):

- ``id`` (the fork's own id), ``fork_origin`` (set), ``created_at`` (the fork time);
- ``head_hash`` (the fork's own chain, which begins at the fork point's position);
- ``status`` becomes ``paused`` (``initialized`` stays ``initialized``) with reason ``forked``,
  so ``resume`` continues it even when the parent had finished; ``seal`` and
  ``budget_exhausted`` are cleared (they belonged to the parent's ending);
- ``config`` and ``participants`` when overridden (model swaps, ``--max-rounds``…).

:func:`diff_sessions` compares two sessions' consensus paths iteration by iteration. It is a
read of the ledger (EMS and open dissent are taken as of the end of each iteration); the
per-iteration comparison itself is the pure :func:`consensus_path`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any
from uuid import UUID

from pydantic import BaseModel, ConfigDict, ValidationError

from ..clock import Clock, IdSource, SystemClock, UuidIds
from ..domain.aggregate import Deliberation
from ..domain.state import SessionState
from ..domain.values import ModelProvider, Participant, RoundKind, SessionConfig, Stance
from ..engine.ems import ems_score
from ..engine.steps import roles_after_leaving
from ..errors import (
    ConfigError,
    InvariantViolation,
    SessionNotFoundError,
    UsageError,
    validation_summary,
)
from ..ledger import Ledger

__all__ = [
    "IterationPoint",
    "SessionDiff",
    "StanceChange",
    "apply_model_swaps",
    "consensus_path",
    "diff_sessions",
    "fork",
    "fork_position",
    "override_config",
]


# --------------------------------------------------------------------------- fork


def fork_position(
    ledger: Ledger,
    parent_id: UUID,
    *,
    at_iteration: int | None = None,
    at_event: int | None = None,
) -> int:
    """The parent position a fork starts from: the end of iteration K, event N, or the head."""
    position = ledger.position_as_of(parent_id, at_event=at_event, at_iteration=at_iteration)
    return ledger.head_version(parent_id) if position is None else position


def apply_model_swaps(
    participants: Sequence[Participant], swaps: Sequence[str]
) -> list[Participant]:
    """Swap participants' models.

    Each swap is ``NAME=MODEL`` (that participant gets ``MODEL``) or a bare ``MODEL``: bare
    swaps replace models positionally, the first bare swap the first participant's model, the
    second the second's, and so on, in the session's participant order. A swapped participant
    keeps its name (its history refers to it), role, temperature and ``api_base``; its
    provider is derived from the new model and its user-given price is dropped (it priced the
    old model).
    """
    by_name = {p.name: p for p in participants}
    new_models: dict[str, str] = {}
    positional = 0
    for spec in swaps:
        name, sep, model = spec.partition("=")
        if sep:
            name, model = name.strip(), model.strip()
            if name not in by_name:
                raise ConfigError(
                    f"-m {spec!r}: no participant named {name!r}",
                    hint=f"participants are: {', '.join(by_name) or 'none'}",
                )
        else:
            model = spec.strip()
            if positional >= len(participants):
                raise ConfigError(
                    f"-m {spec!r}: more positional model swaps than participants "
                    f"({len(participants)})",
                    hint="use NAME=MODEL to swap a given participant",
                )
            name = participants[positional].name
            positional += 1
        if not model:
            raise ConfigError(f"-m {spec!r}: empty model name", hint="e.g. -m alice=openai/gpt-4o")
        if name in new_models:
            raise ConfigError(f"-m {spec!r}: participant {name!r} is swapped twice")
        new_models[name] = model
    out = []
    for p in participants:
        swapped = new_models.get(p.name)
        if swapped is None or swapped == p.model:
            out.append(p)
        else:
            out.append(
                p.model_copy(
                    update={
                        "model": swapped,
                        "provider": ModelProvider.from_model(swapped),
                        "price": None,
                    }
                )
            )
    return out


def override_config(config: SessionConfig, overrides: Mapping[str, Any]) -> SessionConfig:
    """``config`` with ``overrides`` applied and validated (unknown keys are refused)."""
    if not overrides:
        return config
    unknown = sorted(set(overrides) - set(SessionConfig.model_fields))
    if unknown:
        raise ConfigError(f"unknown config field(s): {', '.join(unknown)}")
    try:
        return SessionConfig.model_validate({**config.model_dump(), **overrides})
    except ValidationError as e:
        raise ConfigError(f"invalid config override {validation_summary(e)}") from None


def fork(
    ledger: Ledger,
    parent_id: UUID | str,
    *,
    clock: Clock | None = None,
    ids: IdSource | None = None,
    at_iteration: int | None = None,
    at_event: int | None = None,
    participants: Sequence[Participant] | None = None,
    model_swaps: Sequence[str] = (),
    config_overrides: Mapping[str, Any] | None = None,
    api_base: str | None = None,
    without: Sequence[str] = (),
) -> UUID:
    """Start a new session from ``parent_id`` as of a past position; returns the new id. The
    fork is left paused.

    The position is the end of iteration ``at_iteration``, event ``at_event``, or the parent's
    head when neither is given. ``participants`` replaces the participant list (same names,
    any order of models); ``model_swaps`` then swaps models (see :func:`apply_model_swaps`);
    ``api_base`` then points every participant at that endpoint. Each name in ``without``
    then leaves the fork from its first event on (a ``ParticipantLeft`` event, roles handed
    over by :func:`~forge_ledger.engine.steps.roles_after_leaving`).
    Forking where a round is open is refused (the fork would inherit a half-run round).
    ``clock`` and ``ids`` default to the system's clock and random ids.
    """
    pid = ledger.resolve(parent_id)
    position = fork_position(ledger, pid, at_iteration=at_iteration, at_event=at_event)
    parent = ledger.state(pid, at_event=position)
    try:
        Deliberation.require_forkable(parent)
    except InvariantViolation as e:
        raise InvariantViolation(e.message, hint=_fork_hint(ledger, pid, parent)) from None
    people = list(parent.participants)
    if participants is not None:
        people = _checked_participants(parent, participants)
    people = apply_model_swaps(people, model_swaps)
    if api_base is not None:
        people = [p.model_copy(update={"api_base": api_base}) for p in people]
    config = override_config(parent.config, config_overrides or {})
    _check_leaving(people, without)
    at = (clock or SystemClock()).now()
    agg = Deliberation.fork(
        session_id=(ids or UuidIds()).new_id(),
        parent=parent,
        config=config,
        participants=people if people != parent.participants else (),
        at=at,
    )
    for name in without:
        heirs = roles_after_leaving(agg.state.participants, name)
        agg.leave(name, at=at, reassigned=heirs, reason="fork --without")
    ledger.save(agg)
    return UUID(str(agg.id))


def _check_leaving(people: Sequence[Participant], without: Sequence[str]) -> None:
    """Each name that leaves is a participant, named once."""
    names = [p.name for p in people]
    for name in without:
        if name not in names:
            raise ConfigError(
                f"--without {name!r}: no participant named {name!r}",
                hint=f"participants are: {', '.join(names) or 'none'}",
            )
    twice = sorted({n for n in without if list(without).count(n) > 1})
    if twice:
        raise ConfigError(f"--without {twice[0]!r} is given twice")


def _checked_participants(
    parent: SessionState, participants: Sequence[Participant]
) -> list[Participant]:
    """The fork's history refers to participants by name: the names must stay the same."""
    old = sorted(parent.participant_names)
    new = sorted(p.name for p in participants)
    if old != new:
        raise ConfigError(
            "a fork's participants must keep the parent's names "
            f"({', '.join(old)}); got {', '.join(new) or 'none'}",
            hint="swap models with -m NAME=MODEL instead of renaming",
        )
    order = {n: i for i, n in enumerate(parent.participant_names)}
    return sorted(participants, key=lambda p: order[p.name])


def _fork_hint(ledger: Ledger, pid: UUID, parent: SessionState) -> str:
    """Where to fork instead of inside the open round: the store knows where it ends."""
    r = parent.open_round
    end = _round_end(ledger, pid, r.number) if r is not None else None
    return (
        f"fork at an iteration boundary (--at-iteration {max(parent.iteration - 1, 1)}) "
        f"or at event {end or 'after the round completed'}"
    )


def _round_end(ledger: Ledger, session_id: UUID, number: int) -> int | None:
    for e in ledger.events(session_id):
        if e.type == "RoundCompleted" and int(e.data["number"]) == number:
            return e.position
    return None


# --------------------------------------------------------------------------- diff


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class StanceChange(_Model):
    participant: str
    before: Stance
    after: Stance


class IterationPoint(_Model):
    """One session's consensus as of the end of one iteration."""

    iteration: int
    weighted_score: float | None
    majority_agrees: bool | None
    agree: int = 0
    disagree: int = 0
    partial: int = 0
    abstain: int = 0
    converged: bool | None = None
    ems: int | None = None
    open_dissent: int = 0
    open_dissent_topics: tuple[str, ...] = ()
    stances: dict[str, Stance] = {}
    changed_stance: tuple[StanceChange, ...] = ()


class SessionDiff(_Model):
    a: str
    b: str
    a_title: str
    b_title: str
    common_ancestor: str | None
    """Set when one session is a fork of the other: the parent position they share."""
    iterations: tuple[int, ...]
    path_a: dict[int, IterationPoint]
    path_b: dict[int, IterationPoint]
    ems_available: bool = True
    """Always true (the EMS ships with the engine); kept so ``diff --json`` keeps its keys."""


def _vote_stances(state: SessionState, iteration: int) -> dict[str, Stance]:
    """The stances of the last convergence vote of ``iteration`` (not undone by a rewind)."""
    rounds = [
        r
        for r in state.rounds
        if r.iteration == iteration and r.kind is RoundKind.CONVERGENCE and not r.superseded
    ]
    if not rounds:
        return {}
    out: dict[str, Stance] = {}
    for c in rounds[-1].contributions:
        if c.vote is not None:
            out[c.participant] = c.vote.effective_stance
    return out


def consensus_path(
    final: SessionState,
    states_at: Callable[[int], SessionState | None],
    ems: Callable[[SessionState], int | None],
) -> dict[int, IterationPoint]:
    """Per iteration of ``final``: score, majority, EMS and open dissent as of its end.

    Pure given ``states_at`` (state as of the end of iteration K) and ``ems``.
    """
    results = {c.iteration: c for c in final.convergence}  # the last evaluation wins
    iterations = sorted({r.iteration for r in final.rounds} | set(results))
    path: dict[int, IterationPoint] = {}
    previous: dict[str, Stance] = {}
    for k in iterations:
        res = results.get(k)
        at_end = states_at(k)
        stances = _vote_stances(final, k)
        changed = tuple(
            StanceChange(participant=name, before=previous[name], after=stance)
            for name, stance in stances.items()
            if name in previous and previous[name] is not stance
        )
        if stances:
            previous = {**previous, **stances}
        open_d = at_end.open_divergences if at_end is not None else []
        path[k] = IterationPoint(
            iteration=k,
            weighted_score=res.score if res else None,
            majority_agrees=res.majority_agrees if res else None,
            agree=res.agree if res else 0,
            disagree=res.disagree if res else 0,
            partial=res.partial if res else 0,
            abstain=res.abstain if res else 0,
            converged=res.converged if res else None,
            ems=ems(at_end) if at_end is not None else None,
            open_dissent=len(open_d),
            open_dissent_topics=tuple(d.topic for d in open_d),
            stances=stances,
            changed_stance=changed,
        )
    return path


def _state_at_iteration(ledger: Ledger, sid: UUID, k: int) -> SessionState | None:
    """State at the end of iteration ``k`` (for a fork's inherited iterations, the parent's:
    see :meth:`Ledger.state`); None when there is no such iteration or its parent is gone."""
    try:
        return ledger.state(sid, at_iteration=k)
    except (UsageError, SessionNotFoundError):
        return None


def diff_sessions(ledger: Ledger, a: UUID | str, b: UUID | str) -> SessionDiff:
    """Compare the consensus paths of sessions ``a`` and ``b`` iteration by iteration."""
    ids = (ledger.resolve(a), ledger.resolve(b))
    finals = [ledger.state(i) for i in ids]

    def ems(state: SessionState) -> int:
        return int(ems_score(state).score)

    paths = []
    for sid, final in zip(ids, finals, strict=True):
        cache: dict[int, SessionState | None] = {}

        def states_at(k: int, _sid: UUID = sid, _c: dict[int, SessionState | None] = cache) -> (
            SessionState | None
        ):
            if k not in _c:
                _c[k] = _state_at_iteration(ledger, _sid, k)
            return _c[k]

        paths.append(consensus_path(final, states_at, ems))
    ancestor = None
    fa, fb = finals
    if fb.fork_origin is not None and fb.fork_origin.parent_id == fa.id:
        ancestor = f"{fa.id}@{fb.fork_origin.parent_position}"
    elif fa.fork_origin is not None and fa.fork_origin.parent_id == fb.id:
        ancestor = f"{fb.id}@{fa.fork_origin.parent_position}"
    return SessionDiff(
        a=fa.id,
        b=fb.id,
        a_title=fa.topic.title,
        b_title=fb.topic.title,
        common_ancestor=ancestor,
        iterations=tuple(sorted(set(paths[0]) | set(paths[1]))),
        path_a=paths[0],
        path_b=paths[1],
    )
