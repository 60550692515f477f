"""``back N``: go back N iterations (1..5, never below iteration 1) and say what changed.

The rewind is an event on the same session (history is kept, superseded rounds stay for
audit, the target iteration's questions are pending again); the jump summary compares the
session's YAML view before and after, as the format's seed shows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from ..clock import Clock
from ..errors import UsageError
from ..ledger import Ledger
from .export import session_document

__all__ = ["JumpSummary", "go_back"]


@dataclass(frozen=True)
class JumpSummary:
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

    def as_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "steps": self.steps,
            "from_iteration": self.from_iteration,
            "to_iteration": self.to_iteration,
            "ems_before": self.ems_before,
            "ems_after": self.ems_after,
            "ems_delta": self.ems_delta,
            "phase_before": self.phase_before,
            "phase_after": self.phase_after,
            "questions": list(self.questions),
        }

    def text(self) -> str:
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
            lines += [f"   - {q}" for q in self.questions]
        lines.append(rule)
        return "\n".join(lines)


def go_back(ledger: Ledger, session_id: str | UUID, steps: int = 1, *, clock: Clock) -> JumpSummary:
    """Append the rewind and return the jump summary."""
    if not 1 <= steps <= 5:
        raise UsageError(f"back takes 1 to 5 iterations, not {steps}", hint="use back 1..5")
    sid = ledger.resolve(session_id) if isinstance(session_id, str) else session_id
    before = session_document(ledger.events(sid))["session"]
    agg = ledger.get(sid)
    target = agg.rewind(steps, at=clock.now())
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
