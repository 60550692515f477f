"""Session operations: what a person does to a session, for the CLI and the library alike.

Start a deliberation, run or resume it, answer its questions, overrule a dissent, add or
update participants, fork it, go back, abort it. The command line parses options, prints and
chooses exit codes; everything it does *to a session* it does through these functions, so a
program that imports :mod:`forge_ledger` has the same powers as the ``forge-ledger`` command
(as ``llm`` and ``sqlite-utils`` keep their CLI and library at parity).

Every function takes the :class:`~forge_ledger.ledger.Ledger` the session lives in, appends
its events atomically, and raises only :mod:`forge_ledger.errors`. Clocks and id sources are
injectable (default: the system clock, random UUIDs). The orchestrator (and through it the
providers) loads only when a session runs or is sealed, so the commands that merely read
stay quick to start.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

from .clock import Clock, IdSource, SystemClock
from .domain.json_fields import JsonFields
from .domain.state import SessionState
from .domain.values import (
    DivergenceStatus,
    Participant,
    ParticipantRole,
    SessionConfig,
    Topic,
    slugify,
)
from .errors import ConfigError, UsageError, validation_summary
from .ledger import Ledger
from .lineage import apply_model_swaps, fork
from .yaml_format.export import session_document

if TYPE_CHECKING:
    from .orchestrator import Orchestrator, Subscriber
    from .providers import Provider

__all__ = [
    "JumpSummary",
    "Runtime",
    "abort",
    "add_participants",
    "answer",
    "back",
    "fork",
    "load_participants",
    "overrule",
    "participants_from_models",
    "run",
    "start",
    "update_participants",
]


# --------------------------------------------------------------------------- participants


def load_participants(path: Path, api_base: str | None = None) -> list[Participant]:
    """Read a participants YAML file (``participants: [{name, model, role, …}]``).

    ``api_base`` is given to every participant that names none.
    """
    import yaml
    from pydantic import ValidationError

    from .bounded_yaml import load_yaml, read_yaml_file

    try:
        doc = load_yaml(read_yaml_file(path), name=str(path))
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not UTF-8 text", hint="save it as UTF-8") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path} is not valid YAML: {str(e).splitlines()[0]}") from None
    items = doc.get("participants") if isinstance(doc, dict) else doc
    if not isinstance(items, list) or not items:
        raise ConfigError(
            f"{path} has no participants", hint="write 'participants:' followed by a list"
        )
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ConfigError(f"{path}: participants[{i}] must be a mapping")
        if api_base and "api_base" not in item:
            item = {**item, "api_base": api_base}
        try:
            out.append(Participant.model_validate(item))
        except ValidationError as e:
            raise ConfigError(f"{path}: participants[{i}].{validation_summary(e)}") from None
    return out


def participants_from_models(models: Sequence[str], api_base: str | None) -> list[Participant]:
    """Participants named after their models (made unique); roles rotate sensibly."""
    roles = [
        ParticipantRole.DRAFTER,
        ParticipantRole.CRITIC,
        ParticipantRole.SYNTHESIZER,
        ParticipantRole.DEVILS_ADVOCATE,
        ParticipantRole.DOMAIN_EXPERT,
    ]
    out: list[Participant] = []
    used: set[str] = set()
    for i, model in enumerate(models):
        base = slugify(model.rsplit("/", 1)[-1])[:56] or f"p{i + 1}"
        name, n = base, 2
        while name in used:
            name, n = f"{base}-{n}", n + 1
        used.add(name)
        role = roles[i] if len(models) > 1 and i < len(roles) else ParticipantRole.GENERALIST
        out.append(Participant(name=name, model=model, role=role, api_base=api_base))
    return out


def add_participants(
    ledger: Ledger,
    session: str | UUID,
    participants: Sequence[Participant],
    *,
    clock: Clock | None = None,
) -> SessionState:
    """Join participants to an existing session (e.g. one imported from a YAML file)."""
    clk = clock or SystemClock()
    agg = ledger.get(session)
    for p in participants:
        agg.join(p, at=clk.now())
    ledger.save(agg)
    return agg.state


def update_participants(
    ledger: Ledger,
    session: str | UUID,
    *,
    swaps: Sequence[str] = (),
    api_base: str | None = None,
    reason: str = "participants updated",
    clock: Clock | None = None,
) -> SessionState | None:
    """Change models (``NAME=MODEL``, see :func:`~forge_ledger.lineage.apply_model_swaps`)
    and endpoints (``api_base`` for every participant) before the session goes on.

    Each change is a ``ParticipantUpdated`` event carrying ``reason``, so a replay sees
    exactly the participants each call was made with. Nothing to change: nothing recorded
    (``None``).
    """
    if not swaps and api_base is None:
        return None
    clk = clock or SystemClock()
    agg = ledger.get(session)
    people = apply_model_swaps(agg.state.participants, swaps)
    if api_base is not None:
        people = [p.model_copy(update={"api_base": api_base}) for p in people]
    for p in people:
        agg.update_participant(p, at=clk.now(), reason=reason)
    ledger.save(agg)
    return agg.state


# --------------------------------------------------------------------------- running


@dataclass(frozen=True)
class Runtime:
    """How a session runs: the injectable sources and hooks of its orchestrator.

    ``on_checkpoint`` is called with the state at each phase change and at the end (the CLI
    writes its exports there); ``hmac_key`` keys the seal of a session that ends.
    """

    clock: Clock | None = None
    ids: IdSource | None = None
    subscribers: Sequence[Subscriber] = ()
    on_checkpoint: Callable[[SessionState], None] | None = None
    hmac_key: bytes | None = None

    def orchestrator(self, ledger: Ledger, provider: Provider) -> Orchestrator:
        """The orchestrator for one run."""
        from .orchestrator import KeyedSeal, Orchestrator

        return Orchestrator(
            ledger,
            provider,
            clock=self.clock,
            ids=self.ids,
            subscribers=self.subscribers,
            on_checkpoint=self.on_checkpoint,
            seal=KeyedSeal(self.hmac_key),
        )


async def start(
    ledger: Ledger,
    provider: Provider,
    topic: Topic,
    config: SessionConfig,
    participants: Sequence[Participant],
    *,
    source: str = "run",
    runtime: Runtime | None = None,
    on_start: Callable[[UUID], None] | None = None,
    running: contextlib.AbstractContextManager[Any] | None = None,
) -> SessionState:
    """Record a new session and run it until it converges, ends or pauses.

    ``on_start`` learns the new session's id as soon as it is recorded; ``running`` is held
    while the models are called (the CLI's live view).
    """
    orch = (runtime or Runtime()).orchestrator(ledger, provider)
    sid = orch.start(topic, config, participants, source=source)
    if on_start is not None:
        on_start(sid)
    return await _play(ledger, orch, sid, resume=False, claim=True, running=running)


async def run(
    ledger: Ledger,
    provider: Provider,
    session_id: UUID,
    *,
    resume: bool = False,
    claim: bool = True,
    runtime: Runtime | None = None,
    running: contextlib.AbstractContextManager[Any] | None = None,
) -> SessionState:
    """Continue a session until it converges, ends or pauses.

    Without ``resume`` the session must not be paused. With it, a paused or interrupted
    session is resumed (only what is missing is called) and a session that already ended
    only gets what its end left undone (seal, exports). The session is claimed (its lease)
    before any model call unless the caller already holds the claim (``claim=False``).
    """
    orch = (runtime or Runtime()).orchestrator(ledger, provider)
    return await _play(ledger, orch, session_id, resume=resume, claim=claim, running=running)


async def _play(
    ledger: Ledger,
    orch: Orchestrator,
    session_id: UUID,
    *,
    resume: bool,
    claim: bool,
    running: contextlib.AbstractContextManager[Any] | None,
) -> SessionState:
    lease = ledger.lease(session_id) if claim else contextlib.nullcontext()
    with lease, running or contextlib.nullcontext():
        if resume:
            return await orch.resume(session_id)
        return await orch.run(session_id)


# --------------------------------------------------------------------------- people


def answer(
    ledger: Ledger,
    session: str | UUID,
    text: str,
    *,
    author: str,
    overrule: Sequence[str] = (),
    clock: Clock | None = None,
) -> SessionState:
    """Record a person's answer to a paused session's questions (a note when none are
    pending), then overrule the open dissents in ``overrule`` with ``text`` as the reason.

    An unknown dissent is refused before anything is recorded.
    """
    clk = clock or SystemClock()
    agg = ledger.get(session)
    _check_open(agg.state, overrule)
    agg.human_input(
        author=author,
        text=text,
        at=clk.now(),
        kind="answer" if agg.state.pending_questions else "note",
    )
    _overrule(agg, overrule, author=author, note=text, clock=clk)
    ledger.save(agg)
    return agg.state


def overrule(
    ledger: Ledger,
    session: str | UUID,
    divergence_ids: Sequence[str],
    *,
    author: str,
    reason: str,
    clock: Clock | None = None,
) -> SessionState:
    """Overrule open dissents (a person's decision, with ``reason``) without an answer."""
    clk = clock or SystemClock()
    agg = ledger.get(session)
    _check_open(agg.state, divergence_ids)
    _overrule(agg, divergence_ids, author=author, note=reason, clock=clk)
    ledger.save(agg)
    return agg.state


def _check_open(state: SessionState, divergence_ids: Sequence[str]) -> None:
    for divergence_id in divergence_ids:
        if state.divergence(divergence_id) is None:
            known = ", ".join(d.id for d in state.open_divergences) or "none open"
            raise UsageError(f"unknown divergence {divergence_id!r}", hint=f"open: {known}")


def _overrule(
    agg: Any, divergence_ids: Sequence[str], *, author: str, note: str, clock: Clock
) -> None:
    for divergence_id in divergence_ids:
        agg.change_divergence(
            divergence_id,
            DivergenceStatus.OVERRULED,
            by=author,
            note=note,
            round=agg.state.rounds[-1].number if agg.state.rounds else 0,
            at=clock.now(),
        )


def abort(
    ledger: Ledger,
    session: str | UUID,
    *,
    reason: str,
    author: str,
    hmac_key: bytes | None = None,
    clock: Clock | None = None,
) -> SessionState:
    """End a session for good with a person's reason, and seal it (the session is claimed
    while this is recorded)."""
    from .orchestrator import KeyedSeal

    clk = clock or SystemClock()
    sid = ledger.resolve(session) if isinstance(session, str) else session
    with ledger.lease(sid):
        agg = ledger.get(sid)
        agg.abort(reason=reason, by=author, at=clk.now())
        KeyedSeal(hmac_key).seal(agg, clk)
        ledger.save(agg)
    return agg.state


# --------------------------------------------------------------------------- history


@dataclass(frozen=True)
class JumpSummary(JsonFields):
    """What ``back`` changed, as the session's YAML view shows it before and after."""

    json_keys = (
        "session_id", "steps", "from_iteration", "to_iteration", "ems_before", "ems_after",
        "ems_delta", "phase_before", "phase_after", "questions",
    )

    session_id: str
    steps: int
    from_iteration: int
    to_iteration: int
    ems_before: int
    ems_after: int
    phase_before: str
    phase_after: str
    questions: tuple[str, ...]

    @property
    def ems_delta(self) -> int:
        return self.ems_after - self.ems_before

    def text(self, field: Callable[[str], str] = str) -> str:
        """What ``back`` prints; ``field`` renders each question (model text) on its line: a
        terminal passes its escaping (``terminal_text.printable``), a program keeps them."""
        rule = "-" * 55
        plural = "s" if self.steps > 1 else ""
        lines = [
            rule,
            f"Back {self.steps} iteration{plural}",
            f"   Iteration: {self.from_iteration} → {self.to_iteration}",
            f"   EMS: {self.ems_before}/100 → {self.ems_after}/100 ({self.ems_delta:+d})",
            f"   Phase: {self.phase_before} → {self.phase_after}",
        ]
        if self.questions:
            lines += ["", f"   Restored questions (iteration {self.to_iteration}):"]
            lines += [f"   - {field(q)}" for q in self.questions]
        lines.append(rule)
        return "\n".join(lines)


def back(
    ledger: Ledger, session: str | UUID, steps: int = 1, *, clock: Clock | None = None
) -> JumpSummary:
    """Go back ``steps`` iterations (1..5, never below iteration 1) and say what changed.

    The rewind is an event on the same session: history is kept, superseded rounds stay for
    audit, and the target iteration's questions are pending again.
    """
    if not 1 <= steps <= 5:
        raise UsageError(f"back takes 1 to 5 iterations, not {steps}", hint="use back 1..5")
    sid = ledger.resolve(session) if isinstance(session, str) else session
    before = session_document(ledger.events(sid))["session"]
    agg = ledger.get(sid)
    target = agg.rewind(steps, at=(clock or SystemClock()).now())
    ledger.save(agg)
    after = session_document(ledger.events(sid))["session"]
    return JumpSummary(
        session_id=str(sid),
        steps=steps,
        from_iteration=int(before["iteration"]),
        to_iteration=target,
        ems_before=int(before["ems"]),
        ems_after=int(after["ems"]),
        phase_before=str(before["phase"]),
        phase_after=str(after["phase"]),
        questions=tuple(agg.state.pending_questions),
    )

