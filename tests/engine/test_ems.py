"""EMS score and technique suggestions over real ``Deliberation`` states."""

from __future__ import annotations

import csv
from importlib import resources

from hypothesis import given, settings
from hypothesis import strategies as st

from forge_ledger.engine.ems import AXES, AXIS_TECHNIQUES, ems_score, suggest_techniques
from forge_ledger.engine.techniques import all_techniques, get_technique
from support.stories import feature_auth


def test_catalogue_has_seed_techniques_and_matches_csv() -> None:
    text = resources.files("forge_ledger").joinpath("data/techniques.csv").read_text("utf-8")
    rows = list(csv.DictReader(text.splitlines()))
    assert [t.slug for t in all_techniques()] == [r["slug"] for r in rows]
    assert len(rows) >= 15
    for slug in ("5whys", "six-hats", "moscow"):
        t = get_technique(slug)
        assert t is not None
        assert t.prompt
        assert t.description
        assert t.category
    assert get_technique("no-such-technique") is None
    slugs = {t.slug for t in all_techniques()}
    for wanted in AXIS_TECHNIQUES.values():
        assert set(wanted) <= slugs


def test_empty_session_scores_zero() -> None:
    agg = feature_auth(iterations=0)
    report = ems_score(agg.state)
    assert report.score == 0
    assert report.axes == dict.fromkeys(AXES, 0)
    assert report.weak_axes == AXES


def test_axes_follow_the_session() -> None:
    agg = feature_auth(iterations=1, critique_scores=(20, 30, 40), vote_agree=(False,))
    report = ems_score(agg.state)
    assert report.axes["clarity"] == 30  # mean of 20, 30, 40
    assert report.axes["coverage"] == 100  # the synthesis followed every suggestion
    assert report.axes["consensus"] == 40  # 0.2 + 0.2*1 + 0.1*0
    assert report.axes["resolution"] == 100  # the one divergence was resolved
    assert report.score == round(0.25 * 30 + 0.25 * 100 + 0.30 * 40 + 0.20 * 100)
    assert report.weak_axes == ("clarity", "consensus")


def test_more_agreement_never_lowers_the_score() -> None:
    low = ems_score(feature_auth(iterations=1, vote_agree=(False,)).state)
    high = ems_score(feature_auth(iterations=1, vote_agree=(True,)).state)
    assert high.axes["consensus"] > low.axes["consensus"]
    assert high.score > low.score


def test_suggestions_target_weak_axes_and_skip_used_techniques() -> None:
    agg = feature_auth(iterations=1, critique_scores=(10,), vote_agree=(False,))
    first = suggest_techniques(agg.state)
    assert [s.weak_axes for s in first] == [("clarity",), ("consensus",)]
    assert first[0].technique_slug == "5whys"
    assert first[0].suggested_reason == f"clarity {ems_score(agg.state).axes['clarity']}%"
    for s in first:
        agg.suggest_technique(s, at=agg.state.updated_at)
    second = suggest_techniques(agg.state)
    assert {s.technique_slug for s in second}.isdisjoint({s.technique_slug for s in first})
    assert [s.weak_axes for s in second] == [("clarity",), ("consensus",)]


@settings(max_examples=25, deadline=None)
@given(
    iterations=st.integers(0, 3),
    scores=st.lists(st.integers(0, 100), min_size=1, max_size=3),
    votes=st.lists(st.booleans(), min_size=1, max_size=3),
)
def test_ems_bounded_and_deterministic(
    iterations: int, scores: list[int], votes: list[bool],
) -> None:
    a = feature_auth(iterations=iterations, critique_scores=tuple(scores), vote_agree=tuple(votes))
    b = feature_auth(iterations=iterations, critique_scores=tuple(scores), vote_agree=tuple(votes))
    ra, rb = ems_score(a.state), ems_score(b.state)
    assert ra == rb
    assert 0 <= ra.score <= 100
    assert all(0 <= v <= 100 for v in ra.axes.values())
    assert all(ra.axes[w] < 50 for w in ra.weak_axes)
    assert suggest_techniques(a.state) == suggest_techniques(b.state)
