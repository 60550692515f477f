"""Session metrics rows and their aggregates: the rows say what the audits say, and the
bootstrap intervals cover values set by construction."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forge_ledger.audit import audit_report
from forge_ledger.audit.aggregates import (
    aggregate,
    counterfactual_influence,
    difference,
    estimate,
)
from forge_ledger.audit.metrics import SessionMetrics, participant_rows, session_row
from forge_ledger.ledger import Ledger
from support.stories import random_sessions


def _row(**fields: object) -> SessionMetrics:
    """A session row with the given columns; the rest are neutral."""
    base: dict[str, object] = {
        "session_id": "s",
        "title": "t",
        "status": "complete",
        "iterations": 1,
        "rounds": 5,
        "cost_usd": 0.01,
        "input_tokens": 10,
        "output_tokens": 5,
        "tokens": 15,
        "converged": False,
        "first_vote_majority": None,
        "final_vote_majority": None,
        "first_majority_is_final": None,
        "stance_changes": 0,
        "conformity_flags": 0,
        "conformity_rate": None,
        "dissents_opened": 0,
        "dissents_resolved": 0,
        "dissents_overruled": 0,
        "dissents_withdrawn": 0,
        "dissents_open": 0,
        "self_preference": None,
    }
    return SessionMetrics.model_validate({**base, **fields})


def _mean(xs: list[float]) -> float:
    return round(sum(xs) / len(xs), 6)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=10_000))
@pytest.mark.slow
def test_rows_and_their_aggregate_say_what_the_audits_say(seed: int) -> None:
    with tempfile.TemporaryDirectory() as tmp, Ledger(str(Path(tmp) / "l.sqlite")) as ledger:
        ids = random_sessions(ledger, seed, 4)
        audits = [audit_report(list(ledger.events(ledger.resolve(i)))) for i in ids]
    rows = [
        session_row(a, variant=f"v{i % 2}", topic=a.title, repeat=0) for i, a in enumerate(audits)
    ]
    for a, r in zip(audits, rows, strict=True):
        assert r.session_id == a.session_id
        assert r.converged == (a.status == "converged")
        assert r.cost_usd == a.total.cost_usd
        assert r.tokens == a.total.input_tokens + a.total.output_tokens
        assert r.dissents_opened == len(a.dissent)
        tally = a.deliberation_effect.dissents
        assert (
            r.dissents_resolved,
            r.dissents_overruled,
            r.dissents_withdrawn,
            r.dissents_open,
        ) == (tally.resolved, tally.overruled, tally.withdrawn, tally.open)
        assert r.conformity_flags == len(a.conformity)
        people = participant_rows(a, variant=r.variant)
        assert sum(p.calls for p in people) == a.total.calls
        assert sum(p.conformity_flags for p in people) == len(a.conformity)
        assert sum(p.stance_changes for p in people) == len(a.stance_shifts)
        assert {p.participant for p in people} >= {t.participant for t in a.trajectories}
    for group in aggregate(rows):
        members = [a for i, a in enumerate(audits) if f"v{i % 2}" == group.group]
        assert group.sessions == len(members)
        by = {e.metric: e for e in group.estimates}
        assert by["converged"].n == len(members)
        assert by["converged"].value == _mean([float(a.status == "converged") for a in members])
        assert by["rounds"].value == _mean([float(len(a.usage_by_round)) for a in members])
        assert by["dissents_open"].value == _mean(
            [float(a.deliberation_effect.dissents.open) for a in members]
        )
        costs = [a.total.cost_usd for a in members if a.total.cost_usd is not None]
        assert by["cost_usd"].n == len(costs)
        if costs:
            assert by["cost_usd"].value == _mean(costs)
        for e in group.estimates:
            if e.low is not None and e.high is not None and e.value is not None:
                assert e.low <= e.value + 1e-9
                assert e.value <= e.high + 1e-9


def _synthetic(rate_a: float, rate_b: float, n: int) -> list[SessionMetrics]:
    """``n`` sessions per variant, exactly ``rate × n`` of them converged, one per topic."""
    rows = []
    for variant, rate in (("a", rate_a), ("b", rate_b)):
        hits = round(rate * n)
        for i in range(n):
            rows.append(
                _row(
                    session_id=f"{variant}{i}",
                    variant=variant,
                    topic=f"t{i}",
                    repeat=0,
                    converged=i < hits,
                    rounds=5 + (i % 3),
                )
            )
    return rows


def test_intervals_cover_the_rates_set_by_construction() -> None:
    rows = _synthetic(0.8, 0.5, 100)
    groups = {g.group: {e.metric: e for e in g.estimates} for g in aggregate(rows)}
    for variant, rate in (("a", 0.8), ("b", 0.5)):
        e = groups[variant]["converged"]
        assert e.n == 100
        assert e.value == rate
        assert e.low is not None
        assert e.high is not None
        assert e.low < rate < e.high
        assert e.high - e.low < 0.3  # an interval, not everything
    d = difference(rows, "a", "b", "converged")
    assert d.paired  # same topic and repeat on both sides
    assert d.n_pairs == 100
    assert d.value == 0.3
    assert d.low is not None
    assert d.high is not None
    assert d.low < 0.3 < d.high
    assert d.low > 0  # the rates differ, and the interval says so


def test_unpaired_difference_when_rows_do_not_pair_up() -> None:
    rows = [r.model_copy(update={"topic": None}) for r in _synthetic(0.7, 0.2, 60)]
    d = difference(rows, "a", "b", "converged")
    assert not d.paired
    assert (d.n_a, d.n_b) == (60, 60)
    assert d.value == 0.5
    assert d.low is not None
    assert d.high is not None
    assert d.low < 0.5 < d.high


def test_same_rows_give_the_same_bytes_in_any_order() -> None:
    rows = _synthetic(0.6, 0.4, 40)
    shuffled = rows[:]
    random.Random(7).shuffle(shuffled)
    dump = [g.model_dump_json() for g in aggregate(rows)]
    assert dump == [g.model_dump_json() for g in aggregate(shuffled)]
    assert (
        difference(rows, "a", "b", "rounds").model_dump_json()
        == difference(shuffled, "a", "b", "rounds").model_dump_json()
    )
    assert aggregate(rows, seed=1) != aggregate(rows, seed=2)  # the seed is what fixes them


def test_few_values_give_no_interval() -> None:
    assert estimate("x", []).n == 0
    one = estimate("x", [3.0])
    assert (one.n, one.value, one.low, one.high) == (1, 3.0, None, None)
    flat = estimate("x", [2.0, 2.0, 2.0])
    assert (flat.low, flat.high) == (2.0, 2.0)


def test_counterfactual_influence_is_the_change_averaged_over_topics() -> None:
    rows = []
    for topic in range(5):
        for repeat in range(2):
            for who, changed, sim in (("dave", True, 0.4), ("bob", topic == 0, 1.0)):
                rows.append(
                    _row(
                        session_id=f"{who}{topic}{repeat}",
                        topic=f"t{topic}",
                        repeat=repeat,
                        parent_id=f"p{topic}{repeat}",
                        without=(who,),
                        outcome_changed=changed,
                        similarity_to_parent=sim,
                    )
                )
    rows.append(_row(session_id="plain", topic="t0"))  # not a fork: no influence
    found = {i.participant: i for i in counterfactual_influence(rows)}
    assert sorted(found) == ["bob", "dave"]
    dave, bob = found["dave"], found["bob"]
    assert (dave.topics, dave.forks) == (5, 10)
    assert dave.outcome_change.value == 1.0
    assert dave.outcome_change.n == 5
    assert dave.document_change.value == 0.6
    assert bob.outcome_change.value == 0.2
    assert bob.document_change.value == 0.0
