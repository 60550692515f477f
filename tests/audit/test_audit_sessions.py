"""The audit on sessions run through the real orchestrator, provider and store (SQLite and
PostgreSQL): trail and audit agree on conformity, who moved whom, whether deliberation helped,
self-preference, and anonymized review (labels in prompts, recorded, replayed identically)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from forge_ledger import engine
from forge_ledger.audit import audit_report, document_similarity, render_markdown
from forge_ledger.cli import cli
from forge_ledger.domain.values import RoundKind
from forge_ledger.engine import review_labels
from forge_ledger.ledger import Ledger
from forge_ledger.projections import catch_up, open_views
from forge_ledger.records.replay import replay_session
from forge_ledger.testing import FakeOpenAIServer, bundled_script
from support.orchestrator import run_demo_session
from support.replay import assert_identical
from support.stories import CACHE_SID as SCRIPTED_SID
from support.stories import cache_design_session as _scripted


def _json(*args: str) -> Any:
    res = CliRunner().invoke(cli, [*args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


@pytest.mark.parametrize("anonymize", [False, True], ids=["named", "anonymized"])
def test_trail_and_audit_tell_one_story(
    store_url: str, anonymize: bool,
) -> None:
    sid = run_demo_session(store_url, anonymize=anonymize)
    trail = _json("trail", str(sid), "--store", store_url)
    audit = _json("audit", str(sid), "--store", store_url)
    assert audit["conformity"] == trail["conformity"]
    assert audit["influence"] == trail["influence"]
    # dave's strong dissent on retention, answered by carol's second synthesis: an influence
    moved = [(i["from"], i["to"], i["topic"]) for i in audit["influence"]]
    assert ("carol", "dave", "no retention policy") in moved or any(
        f == "carol" and t == "dave" and "retention" in topic for f, t, topic in moved), moved
    with Ledger(store_url, create=False) as ledger:
        events = list(ledger.events(sid))
        state = ledger.state(sid)
    texts = {e.position: e.data["response"]["content"] for e in events
             if e.type == "ContributionRecorded"}
    for i in audit["influence"]:
        assert i["quote"]
        assert i["quote"] in texts[i["position"]]
    shifts = {s["participant"]: s for s in audit["stance_shifts"]}
    assert shifts["dave"]["toward_majority"]
    assert not shifts["dave"]["conformity"]
    assert set(audit) >= {"anonymized", "labels", "deliberation_effect", "self_preference"}
    assert audit["anonymized"] is anonymize
    labels = [e.data["labels"] for e in events if e.type == "ReviewLabelsAssigned"]
    assert audit["labels"] == (labels[-1] if anonymize else {})
    assert len(labels) == (1 if anonymize else 0)
    if anonymize:
        assert sorted(audit["labels"].values()) == sorted(state.participant_names)
        assert sorted(audit["labels"]) == [f"Response {c}" for c in "ABCD"]
    assert_identical(replay_session(Ledger(store_url, create=False), sid), events)


def test_anonymized_prompts_name_no_one(store_url: str) -> None:
    sid = run_demo_session(store_url, anonymize=True)
    with Ledger(store_url, create=False) as ledger:
        state = ledger.state(sid)
        events = list(ledger.events(sid))
        prompts = {
            c.position: ledger.prompt(sid, c) for r in state.rounds for c in r.contributions
        }
    labels = state.review_labels
    assert labels == review_labels(state.model_copy(update={"review_labels": {}}))
    first_label = next(i for i, e in enumerate(events) if e.type == "ReviewLabelsAssigned")
    first_critique = next(i for i, e in enumerate(events)
                          if e.type == "RoundStarted" and e.data["kind"] == "critique")
    assert first_label == first_critique - 1
    names = state.participant_names
    seen = 0
    for r in state.rounds:
        if r.kind not in (RoundKind.CRITIQUE, RoundKind.CONVERGENCE):
            continue
        for c in r.contributions:
            user = next(m.content for m in prompts[c.position] if m.role == "user")
            others = [n for n in names if n != c.participant]
            assert not any(n in user for n in others), (r.number, c.participant)
            assert not any(f"openai/{n}" in user for n in names)
            if r.kind is RoundKind.CRITIQUE:
                target = r.targets[c.participant]
                label = next(k for k, v in labels.items() if v == target)
                assert f"## {label} to critique" in user
                assert f'"target" to "{label}"' in user
            else:
                assert "## Proposed final text (Response " in user
            seen += 1
    assert seen >= 8


def test_named_prompts_unchanged_without_anonymize(
    sqlite_url: str,
) -> None:
    sid = run_demo_session(sqlite_url, anonymize=False)
    with Ledger(sqlite_url, create=False) as ledger:
        state = ledger.state(sid)
        critique = next(r for r in state.rounds if r.kind is RoundKind.CRITIQUE)
        prompt = ledger.prompt(sid, critique.contributions[0])
    user = next(m.content for m in prompt if m.role == "user")
    assert f"## Draft by {critique.targets[critique.contributions[0].participant]} to critique" \
        in user
    assert state.review_labels == {}


def test_deliberation_effect_and_self_preference(
    store_url: str,
) -> None:
    sid = run_demo_session(store_url, anonymize=True)
    with Ledger(store_url, create=False) as ledger:
        events = list(ledger.events(sid))
        report = audit_report(events)
        at = {k: ledger.state(sid, at_iteration=k) for k in (1, 2)}
    effect = report.deliberation_effect
    assert effect.first_vote is not None
    assert effect.final_vote is not None
    assert (effect.first_vote.round, effect.final_vote.round) == (
        report.consensus[0].round, report.consensus[-1].round)
    assert effect.first_vote.majority_agrees
    assert not effect.first_vote.converged
    assert effect.final_vote.converged
    assert effect.outcome == "converged"
    # iteration 1: 3 of 4 agree (majority) but the weighted score is below the threshold
    assert effect.score_majority_disagreed
    assert effect.disagreement_rounds == (
        report.consensus[0].round,)
    docs = {d.iteration: d for d in effect.document_change}
    one, two = at[1].latest_text, at[2].latest_text
    assert one is not None
    assert two is not None
    assert docs[1].chars == len(one)
    assert docs[2].chars == len(two)
    assert docs[1].similarity is None
    assert docs[2].similarity == round(document_similarity(one, two), 4) < 1.0
    assert docs[2].author == at[2].document_source[1].participant  # type: ignore[index]
    assert effect.stance_changes == len(report.stance_shifts) >= 1
    assert effect.conformity_rate == round(effect.conformity_flags / effect.stance_changes, 4)
    assert effect.dissents.open + effect.dissents.resolved + effect.dissents.overruled \
        + effect.dissents.withdrawn == len(report.dissent)
    prefs = {p.participant: p for p in report.self_preference}
    assert set(prefs) == {"alice", "bob", "carol", "dave"}
    # carol writes the syntheses and votes on them: her own text; the others judge hers
    votes = [(e.data["participant"], e.data["vote"]["score"]) for e in events
             if e.type == "VoteRecorded"]
    carol_own = [s for p, s in votes if p == "carol"]
    assert prefs["carol"].own_judgements == len(carol_own)
    assert prefs["carol"].own_mean_score == round(sum(carol_own) / len(carol_own), 4)
    bob_votes = [s for p, s in votes if p == "bob"]
    bob_critiques = [e.data["critique"]["score"] for e in events
                     if e.type == "CritiqueRecorded" and e.data["participant"] == "bob"]
    bob_all = bob_votes + bob_critiques
    assert prefs["bob"].own_judgements == 0
    assert prefs["bob"].own_mean_score is None
    assert prefs["bob"].others_mean_score == round(sum(bob_all) / len(bob_all), 4)
    md = render_markdown(report)
    assert "## Did deliberation help?" in md
    assert "## Who moved whom" in md
    assert "Anonymized review" in md
    assert "Response A = " in md


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPENAI_API_KEY": "test-key", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    return subprocess.run([sys.executable, "-m", "forge_ledger", *args], capture_output=True,
                          text=True, timeout=240, env=env)


@pytest.mark.parametrize("how", ["flag", "participants file"])
@pytest.mark.slow
def test_run_anonymize_from_the_command_line(
    store_url: str, fake_openai: FakeOpenAIServer, tmp_path: Path, how: str,
) -> None:
    """``run --anonymize`` (or ``anonymize: true`` in the participants file) records labels;
    ``audit --json`` names the authors behind them; ``replay`` finds the session identical."""
    fake_openai.set_script(bundled_script("four-voices"))
    names = ("alice", "bob", "carol", "dave")
    if how == "flag":
        who = [a for n in names for a in ("-m", f"openai/{n}")]
        extra = ["--anonymize", "--api-base", fake_openai.url]
    else:
        pfile = tmp_path / "team.yaml"
        roles = ("drafter", "critic", "synthesizer", "devils_advocate")
        pfile.write_text(yaml.safe_dump({"anonymize": True, "participants": [
            {"name": n, "model": f"openai/{n}", "role": r, "api_base": fake_openai.url}
            for n, r in zip(names, roles, strict=True)]}))
        who, extra = ["--participants", str(pfile)], []
    res = _cli("run", "Event log design", *who, *extra, "--store", store_url, "--json")
    assert res.returncode == 0, res.stderr
    sid = json.loads(res.stdout)["session_id"]
    audit = _cli("audit", sid, "--store", store_url, "--json")
    assert audit.returncode == 0, audit.stderr
    doc = json.loads(audit.stdout)
    assert doc["anonymized"] is True
    assert sorted(doc["labels"].values()) == sorted(names)
    assert [p["participant"] for p in doc["self_preference"]] == list(names)
    replay = _cli("replay", sid, "--store", store_url)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "identical" in replay.stdout, replay.stdout + replay.stderr


def test_one_session_yields_the_same_flags_in_trail_and_audit(
    store_url: str, tmp_path: Path,
) -> None:
    """The session that once got three different answers (trail: C; audit: nobody; the
    engine: B and C) now gets one: C moved to the majority with nothing on its point."""
    with Ledger(store_url) as ledger:
        _scripted(ledger)
    trail = _json("trail", str(SCRIPTED_SID), "--store", store_url)
    audit = _json("audit", str(SCRIPTED_SID), "--store", store_url)
    expected = [{"participant": "C", "round": 5, "from": "disagree", "to": "agree",
                 "reason": "moved toward the previous vote's majority (agreeing) with no new "
                           "argument between round 2 and round 5"}]
    assert trail["conformity"] == audit["conformity"] == expected
    assert trail["influence"] == audit["influence"]
    assert [(i["from"], i["to"], i["topic"]) for i in audit["influence"]] == [
        ("A", "B", "eviction")]
    with Ledger(store_url, create=False) as ledger:
        flags = engine.conformity_flags(ledger.state(SCRIPTED_SID))
        db = open_views(tmp_path / "views.sqlite")
        catch_up(ledger, db)
    rows = db.execute("select participant, round, conformity, new_arguments from "
                      "consensus_trail where changed = 1 order by participant").fetchall()
    db.close()
    assert [(f.participant, f.to_round) for f in flags] == [("C", 5)]
    assert rows == [("B", 5, 0, 1), ("C", 5, 1, 0)]  # the read model says the same
    res = CliRunner().invoke(cli, ["audit", str(SCRIPTED_SID), "--store", store_url,
                                   "--markdown"])
    assert res.exit_code == 0
    flagged = res.stdout.split("## Conformity flags", 1)[1].split("## ", 1)[0]
    assert "| C | 5 | disagree | agree |" in flagged


def test_audit_of_an_imported_session_compares_no_missing_texts(store_url: str) -> None:
    """An imported YAML session has iterations but no texts: nothing to compare, no flags."""
    fixture = Path(__file__).parents[1] / "fixtures" / "seed_standard.yaml"
    res = CliRunner().invoke(cli, ["import", str(fixture), "--store", store_url, "--json"])
    assert res.exit_code == 0, res.output
    sid = json.loads(res.stdout)["session_id"]
    with Ledger(store_url, create=False) as ledger:
        state = ledger.state(sid)
    audit = _json("audit", str(sid), "--store", store_url)
    changes = audit["deliberation_effect"]["document_change"]
    assert [c["iteration"] for c in changes] == list(range(1, state.iteration + 1))
    assert all(c["similarity"] is None and c["chars"] == 0 for c in changes)
    assert audit["conformity"] == audit["influence"] == []
    assert audit["anonymized"] is False
