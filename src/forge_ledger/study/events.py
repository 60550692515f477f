"""The facts of a study: one pydantic payload per kind, hash-chained like a session's events.

A study's events form their own stream in the ledger's database (see
:mod:`forge_ledger.study.stream`): ``StudyPlanned`` holds the whole checked plan and its
cells; ``CellAssigned`` is a cell's claim (the session that runs it, with the share of the
budget it may spend); ``CellPaused`` and ``CellFinished`` follow that session; the study ends
``StudyStopped`` (its budget ran out: no cell starts any more) or ``StudyFinished``.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from .plan import CellSpec

__all__ = [
    "STUDY_EVENT_TYPES",
    "CellAssigned",
    "CellFinished",
    "CellPaused",
    "StudyFinished",
    "StudyPayload",
    "StudyPlanned",
    "StudyStopped",
    "study_payload_class",
]


class StudyPayload(BaseModel):
    """Base of a study's event payloads: frozen, strict about unknown fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    TYPE: ClassVar[str]


class StudyPlanned(StudyPayload):
    TYPE: ClassVar[str] = "StudyPlanned"
    name: str
    plan: dict[str, Any]
    """The checked :class:`~forge_ledger.study.plan.StudyPlan`, its files read in."""
    cells: tuple[CellSpec, ...]


class CellAssigned(StudyPayload):
    TYPE: ClassVar[str] = "CellAssigned"
    cell: str
    session_id: str
    max_cost_usd: Annotated[float, Field(ge=0)]
    """The most this cell's session may spend (its share of what the study had left)."""
    max_time_secs: Annotated[int, Field(ge=1)]


CellOutcome = Literal["converged", "complete", "aborted", "timed_out", "failed"]


class CellPaused(StudyPayload):
    TYPE: ClassVar[str] = "CellPaused"
    cell: str
    reason: str
    cost_usd: Annotated[float, Field(ge=0)] = 0.0
    calls: Annotated[int, Field(ge=0)] = 0


class CellFinished(StudyPayload):
    TYPE: ClassVar[str] = "CellFinished"
    cell: str
    outcome: CellOutcome
    reason: str = ""
    cost_usd: Annotated[float, Field(ge=0)] = 0.0
    calls: Annotated[int, Field(ge=0)] = 0


class StudyStopped(StudyPayload):
    TYPE: ClassVar[str] = "StudyStopped"
    reason: str


class StudyFinished(StudyPayload):
    TYPE: ClassVar[str] = "StudyFinished"


STUDY_EVENT_TYPES: dict[str, type[StudyPayload]] = {
    cls.TYPE: cls
    for cls in (StudyPlanned, CellAssigned, CellPaused, CellFinished, StudyStopped, StudyFinished)
}


def study_payload_class(type_name: str) -> type[StudyPayload]:
    from ..errors import StoreError

    try:
        return STUDY_EVENT_TYPES[type_name]
    except KeyError:
        raise StoreError(
            f"unknown study event type {type_name!r} in the ledger",
            hint="upgrade forge-ledger to a version that knows it",
        ) from None
