"""Studies: many sessions from one plan (topics × panels × variants × repeats) under one budget.

A plan (:mod:`.plan`) is checked in one pass before anything runs; the study is recorded as
its own hash-chained stream of events in the ledger's store (:mod:`.stream`, folded by
:mod:`.state`); its cells run through the session functions the application layer gives it
(:mod:`.cells`, one cell at a time, idempotently; :mod:`.runner`, many at once in one
process; :mod:`.queue`, as jobs that worker processes on many machines take from the
PostgreSQL store, under per-model call limits kept in the same database, :mod:`.rates`).
``forge_ledger.app.studies`` runs a study from a plan, for the CLI and for Python.
"""

from .cells import StudyRun, run_cell
from .plan import Budget, CellSpec, StudyPlan, load_plan, plan_from_document
from .runner import Progress, plan_study, run_study
from .state import CellState, StudyRecord, StudyState
from .stream import StudyStream

__all__ = [
    "Budget",
    "CellSpec",
    "CellState",
    "Progress",
    "StudyPlan",
    "StudyRecord",
    "StudyRun",
    "StudyState",
    "StudyStream",
    "load_plan",
    "plan_from_document",
    "plan_study",
    "run_cell",
    "run_study",
]
