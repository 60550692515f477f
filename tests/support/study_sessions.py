"""A study whose answer is known by construction, built without running a model.

Panel ``trio``: ana, ben, dave. Variants:

- ``base``: every cell converges at iteration 2 (iteration 1's vote: ben disagrees);
- ``strict`` (``convergence_threshold: 0.95``): converges in repeats ``1..strict_converges``
  only, the others end ``complete`` after iteration 2's vote (ben still disagrees);
- ``loo`` (``fork_of: base, leave_one_out: true``): each base session forked at the end of
  iteration 1 without one participant (the real fork code: ``lineage.fork``), then iteration 2
  voted by the others. Without dave, ana agrees and ben does not: no majority, no
  convergence; the outcome flips on every topic. Without ana or ben, the others agree.

So, by construction: base's convergence rate is 1, strict's ``strict_converges / repeats``;
dave's counterfactual influence is 1 on every topic and ana's and ben's 0. Sessions are
built with :class:`~forge_ledger.testing.SessionBuilder`; the study's events are recorded
through :class:`~forge_ledger.study.StudyRun` as the runner records them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import UUID

from forge_ledger.clock import FixedStepClock
from forge_ledger.domain.values import (
    Price,
    RoundKind,
    SessionConfig,
    SessionStatus,
    TokenCount,
    Topic,
)
from forge_ledger.ledger import Ledger
from forge_ledger.records.lineage import fork
from forge_ledger.study import StudyRun, plan_from_document, plan_study
from forge_ledger.study import events as sev
from forge_ledger.study.cells import session_calls
from forge_ledger.study.plan import CellSpec, StudyPlan
from forge_ledger.testing import SessionBuilder
from support.study_plans import LOOPBACK, write_panel

__all__ = ["NAMES", "known_plan", "record_known_study"]

NAMES = ("ana", "ben", "dave")


def known_plan(folder: Path, *, topics: int = 4, repeats: int = 5, forks: bool = True) -> StudyPlan:
    write_panel(folder / "trio.yaml", LOOPBACK, names=NAMES)
    variants: dict[str, Any] = {"base": {}, "strict": {"convergence_threshold": 0.95}}
    if forks:
        variants["loo"] = {"fork_of": "base", "at_iteration": 1, "leave_one_out": True}
    doc = {
        "name": "known",
        "topics": [{"title": f"Topic {i + 1}"} for i in range(topics)],
        "panels": {"trio": "trio.yaml"},
        "variants": variants,
        "repeats": repeats,
        "session": {"max_rounds": 6},
    }
    return plan_from_document(doc, base=folder)


class _Ids:
    def __init__(self) -> None:
        self.n = 0

    def new_id(self) -> UUID:
        self.n += 1
        return UUID(int=0x5EED0000 + self.n)


def _evaluate(b: SessionBuilder, votes: dict[str, bool], threshold: float) -> bool:
    agree = sum(votes.values())
    converged = agree == len(votes)
    b.evaluate(
        score=agree / len(votes),
        converged=converged,
        majority_agrees=agree * 2 > len(votes),
        agree=agree,
        disagree=len(votes) - agree,
        partial=0,
        threshold=threshold,
    )
    return converged


def _vote(b: SessionBuilder, iteration: int, votes: dict[str, bool], threshold: float) -> bool:
    b.round(
        RoundKind.CONVERGENCE,
        iteration=iteration,
        answers={n: f"vote {iteration} of {n}" for n in votes},
        votes=votes,
        close=True,
    )
    return _evaluate(b, votes, threshold)


def _plain(b: SessionBuilder, spec: CellSpec, plan: StudyPlan, sid: UUID, converges: bool) -> None:
    topic, config, people = plan.session_of(spec)
    b.start(Topic(title=topic.title), participants=people, config=config, session_id=sid)
    b.round(
        RoundKind.DRAFT,
        iteration=1,
        answers={n: f"{n} drafts {topic.title}: {spec.repeat}" for n in NAMES},
        close=True,
    )
    _vote(b, 1, {"ana": True, "ben": False, "dave": True}, config.convergence_threshold)
    done = _vote(b, 2, {"ana": True, "ben": converges, "dave": True}, config.convergence_threshold)
    b.finish(
        SessionStatus.CONVERGED if done else SessionStatus.COMPLETE, score=1.0 if done else 0.6
    )
    b.save()


def _forked(ledger: Ledger, clock: FixedStepClock, parent: UUID, sid: UUID, who: str) -> None:
    class _One:
        def new_id(self) -> UUID:
            return sid

    fork(ledger, parent, at_iteration=1, without=[who], clock=clock, ids=_One())
    b = SessionBuilder.of(ledger.get(sid), clock=clock, store=ledger, answer_defaults=_COST)
    b.resume(reason="continued")
    votes = {n: True for n in NAMES if n != who}
    if who == "dave":
        votes = {"ana": True, "ben": False}
    done = _vote(b, 2, votes, SessionConfig().convergence_threshold)
    b.finish(
        SessionStatus.CONVERGED if done else SessionStatus.COMPLETE, score=1.0 if done else 0.5
    )
    b.save()


_COST = {
    "tokens": TokenCount(input=100, output=50),
    "cost_usd": 0.0002,
    "price": Price(input_cost_per_token=1e-6, output_cost_per_token=2e-6),
}


def record_known_study(ledger: Ledger, plan: StudyPlan, *, strict_converges: int = 3) -> UUID:
    """Record the study of :func:`known_plan` (see the module docstring); returns its id."""
    clock = FixedStepClock()
    ids = _Ids()
    study_id = plan_study(ledger, plan, clock=clock, new_id=ids.new_id)
    run = StudyRun(ledger, study_id, clock=clock, new_id=ids.new_id)
    for spec in plan.cells():
        run.claim(spec.id)
        cell = run.state.cells[spec.id]
        assert cell.session_id is not None
        sid = UUID(cell.session_id)
        if spec.parent is None:
            converges = spec.variant == "base" or spec.repeat <= strict_converges
            b = SessionBuilder(clock=clock, store=ledger, answer_defaults=_COST)
            _plain(b, spec, plan, sid, converges)
        else:
            parent = run.state.cells[spec.parent].session_id
            assert parent is not None
            assert spec.without is not None
            _forked(ledger, clock, UUID(parent), sid, spec.without)
        state = ledger.state(sid)
        base = 0.0, 0
        if state.fork_origin is not None:  # the fork's own spending, as the runner records it
            at = ledger.state(UUID(state.fork_origin.parent_id), at_iteration=1)
            base = at.cost_usd, session_calls(at)
        finished = sev.CellFinished(
            cell=spec.id,
            outcome=state.status.value,
            cost_usd=round(state.cost_usd - base[0], 10),
            calls=session_calls(state) - base[1],
        )
        run.record(lambda _state, f=finished: f)
    run.record(lambda _state: sev.StudyFinished())
    return study_id
