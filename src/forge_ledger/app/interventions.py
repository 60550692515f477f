"""What a person does to a recorded session: answer its questions, overrule a dissent, abort
it, go back some iterations.

Every function takes the store (a path, a URL, ``None`` for the default) or an opened
:class:`~forge_ledger.ledger.Ledger`, then the session (a full id, a unique prefix, ``@``…),
appends its events atomically and raises only :mod:`forge_ledger.errors`. Clocks are
injectable (default: the system clock).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from ..clock import Clock, SystemClock
from ..domain.json_fields import JsonFields
from ..domain.state import SessionState
from ..domain.values import DivergenceStatus
from ..errors import UsageError
from ..yaml_format.export import session_document
from .autosave import Warn, autosaver, log_warning
from .stores import Store, opened

__all__ = ["JumpSummary", "abort", "answer", "back", "overrule"]


def answer(
    store: Store,
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
    with opened(store) as ledger:
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
    store: Store,
    session: str | UUID,
    divergence_ids: Sequence[str],
    *,
    author: str,
    reason: str,
    clock: Clock | None = None,
) -> SessionState:
    """Overrule open dissents (a person's decision, with ``reason``) without an answer."""
    clk = clock or SystemClock()
    with opened(store) as ledger:
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
    store: Store,
    session: str | UUID,
    *,
    reason: str,
    author: str,
    hmac_key: bytes | None = None,
    clock: Clock | None = None,
    autosave: bool = True,
    warn: Warn = log_warning,
) -> SessionState:
    """End a session for good with a person's reason, and seal it (the session is claimed
    while this is recorded); its export and document file are written as at any end."""
    from ..orchestrator import KeyedSeal

    clk = clock or SystemClock()
    with opened(store) as ledger:
        sid = ledger.resolve(session) if isinstance(session, str) else session
        with ledger.lease(sid):
            agg = ledger.get(sid)
            agg.abort(reason=reason, by=author, at=clk.now())
            KeyedSeal(hmac_key).seal(agg, clk)
            ledger.save(agg)
        if autosave:
            autosaver(ledger, warn)(agg.state)
    return agg.state


# --------------------------------------------------------------------------- history


@dataclass(frozen=True)
class JumpSummary(JsonFields):
    """What ``back`` changed, as the session's YAML view shows it before and after."""

    json_keys = (
        "session_id",
        "steps",
        "from_iteration",
        "to_iteration",
        "ems_before",
        "ems_after",
        "ems_delta",
        "phase_before",
        "phase_after",
        "questions",
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
    store: Store, session: str | UUID, steps: int = 1, *, clock: Clock | None = None
) -> JumpSummary:
    """Go back ``steps`` iterations (1..5, never below iteration 1) and say what changed.

    The rewind is an event on the same session: history is kept, superseded rounds stay for
    audit, and the target iteration's questions are pending again.
    """
    if not 1 <= steps <= 5:
        raise UsageError(f"back takes 1 to 5 iterations, not {steps}", hint="use back 1..5")
    with opened(store) as ledger:
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
