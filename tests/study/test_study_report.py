"""Counterfactual variants in a study, its tables, exports, aggregates and report.

The answer of the study in ``support.study_sessions`` is known by construction (dave's absence
flips the outcome on every topic; ``strict`` converges in 3 of 5 repeats where ``base`` always
does): the aggregates must find it, with intervals that cover the set values.
"""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from uuid import UUID

import pytest
from test_study import _plan, _provider

from forge_ledger.app.studies import SESSIONS
from forge_ledger.app.study_reports import study_export, study_report, study_tables
from forge_ledger.audit import audit_report
from forge_ledger.audit.metrics import session_row
from forge_ledger.ledger import Ledger
from forge_ledger.panel.preflight import PreflightError
from forge_ledger.study import StudyRun, StudyStream, load_plan, plan_study, run_cell, run_study
from forge_ledger.study.summary import summarize
from support.study_sessions import known_plan, record_known_study

TOPICS, REPEATS, STRICT = 4, 5, 3


@pytest.fixture(scope="module")
def known(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("known")
    plan = known_plan(folder, topics=TOPICS, repeats=REPEATS)
    with Ledger(str(folder / "s.sqlite")) as ledger:
        record_known_study(ledger, plan, strict_converges=STRICT)
    return folder / "s.sqlite"


# --------------------------------------------------------------------------- the plan


def test_a_counterfactual_variant_forks_each_cell_of_its_parent(tmp_path: Path) -> None:
    plan = known_plan(tmp_path, topics=2, repeats=1)
    ids = [c.id for c in plan.cells()]
    assert ids[:5] == [
        "t1/trio/base/1",
        "t1/trio/strict/1",
        "t1/trio/loo-ana/1",
        "t1/trio/loo-ben/1",
        "t1/trio/loo-dave/1",
    ]
    forks = [c for c in plan.cells() if c.parent is not None]
    assert len(forks) == 6
    assert {(c.parent, c.without) for c in forks if c.topic == 0} == {
        ("t1/trio/base/1", "ana"),
        ("t1/trio/base/1", "ben"),
        ("t1/trio/base/1", "dave"),
    }
    assert {plan.arm(c) for c in forks} == {"loo-ana", "loo-ben", "loo-dave"}


def test_a_bad_counterfactual_variant_is_refused_one_line_each(tmp_path: Path) -> None:
    plan = _plan(
        tmp_path,
        variants={
            "base": {},
            "ghost": {"fork_of": "nothing"},
            "erin": {"fork_of": "base", "without": "erin"},
            "both": {"fork_of": "base", "without": "ana", "leave_one_out": True},
            "stray": {"without": "ana"},
            "zero": {"fork_of": "base", "at_iteration": 0},
        },
    )
    with pytest.raises(PreflightError) as caught:
        load_plan(plan)
    text = "\n".join(caught.value.problems)
    assert "variants.ghost.fork_of: 'nothing' is not a plain variant" in text
    assert "variants.erin.without: no participant named 'erin' in panel trio" in text
    assert "variants.both: give either without or leave_one_out, not both" in text
    assert "variants.stray.without: only a counterfactual variant takes it" in text
    assert "variants.zero.at_iteration: give an iteration number" in text


# --------------------------------------------------------------------------- running


def _fork_plan(tmp_path: Path) -> Path:
    return _plan(
        tmp_path,
        repeats=1,
        topics=[{"title": "One"}, {"title": "Two"}],
        variants={
            "base": {},
            "no-cleo": {"fork_of": "base", "without": "cleo"},
            "swap": {"fork_of": "base", "models": ["cleo=openai/gpt-4o-mini"], "max_rounds": 4},
            "loo": {"fork_of": "base", "leave_one_out": True},
        },
    )


def test_the_runner_forks_each_parent_cell_once_it_is_done(tmp_path: Path) -> None:
    plan = load_plan(_fork_plan(tmp_path))
    with Ledger(str(tmp_path / "s.sqlite")) as ledger:
        study_id = plan_study(ledger, plan)
        state = asyncio.run(
            run_study(ledger, study_id, sessions=SESSIONS, provider=_provider(), concurrency=3)
        )
        assert state.status == "finished"
        assert state.count("done") == 12
        for cell in state.cells.values():
            session = ledger.state(UUID(str(cell.session_id)))
            if cell.spec.parent is None:
                assert session.fork_origin is None
                continue
            parent = state.cells[cell.spec.parent]
            assert session.fork_origin is not None
            assert session.fork_origin.parent_id == parent.session_id
            assert session.fork_origin.parent_iteration == 1
            assert cell.spec.without not in session.participant_names
            assert cell.cost_usd <= parent.cost_usd  # the fork's own spending only
            if cell.spec.variant == "swap":
                models = {p.name: p.model for p in session.participants}
                assert models["cleo"] == "openai/gpt-4o-mini"
                assert session.config.max_rounds == 4
        events = len(list(StudyStream(ledger).records(study_id)))
        again = asyncio.run(
            run_study(ledger, study_id, sessions=SESSIONS, provider=_provider(), concurrency=3)
        )
        assert again.count("done") == 12
        assert len(list(StudyStream(ledger).records(study_id))) == events
        assert len(ledger.session_ids()) == 12


def test_a_counterfactual_cell_waits_for_its_parent_cell(tmp_path: Path) -> None:
    plan = load_plan(_fork_plan(tmp_path))
    with Ledger(str(tmp_path / "s.sqlite")) as ledger:
        study_id = plan_study(ledger, plan)
        run = StudyRun(ledger, study_id)
        child = "t1/trio/no-cleo/1"
        waiting = asyncio.run(run_cell(run, child, sessions=SESSIONS, provider=_provider()))
        assert waiting is None
        assert run.reload().cells[child].status == "pending"
        assert ledger.session_ids() == []
        asyncio.run(run_cell(run, "t1/trio/base/1", sessions=SESSIONS, provider=_provider()))
        done = asyncio.run(run_cell(run, child, sessions=SESSIONS, provider=_provider()))
        assert done is not None
        assert done.status == "done"


# --------------------------------------------------------------------------- known answers


@pytest.mark.slow
def test_the_aggregates_find_what_the_study_was_built_to_show(known: Path) -> None:
    tables = study_tables(str(known), "known")
    with Ledger(str(known), create=False) as ledger:
        plan = StudyStream(ledger).state("known").plan
    summary = summarize(plan, tables.sessions)
    rates = {g.group: next(e for e in g.estimates if e.metric == "converged") for g in summary.arms}
    assert rates["base"].value == 1.0
    assert rates["base"].n == TOPICS * REPEATS
    assert rates["strict"].value == STRICT / REPEATS
    assert rates["strict"].low is not None
    assert rates["strict"].high is not None
    assert rates["strict"].low <= STRICT / REPEATS <= rates["strict"].high
    diff = next(
        d for d in summary.differences if (d.a, d.b, d.metric) == ("strict", "base", "converged")
    )
    set_value = STRICT / REPEATS - 1.0
    assert diff.paired
    assert diff.n_pairs == TOPICS * REPEATS
    assert diff.value == pytest.approx(set_value)
    assert diff.low is not None
    assert diff.high is not None
    assert diff.low <= set_value <= diff.high
    influence = {i.participant: i for i in summary.influence}
    assert influence["dave"].outcome_change.value == 1.0
    assert influence["dave"].outcome_change.n == TOPICS
    assert influence["dave"].forks == TOPICS * REPEATS
    assert influence["ana"].outcome_change.value == 0.0
    assert influence["ben"].outcome_change.value == 0.0


def test_each_row_is_what_the_session_audit_says(known: Path) -> None:
    tables = study_tables(str(known), "known")
    assert len(tables.sessions) == TOPICS * REPEATS * 5
    with Ledger(str(known), create=False) as ledger:
        for row in tables.sessions[:12]:
            events = list(ledger.events(UUID(row.session_id)))
            alone = session_row(audit_report(events))
            same = row.model_dump(
                exclude={
                    "study",
                    "cell",
                    "topic",
                    "panel",
                    "variant",
                    "repeat",
                    "without",
                    "similarity_to_parent",
                    "outcome_changed",
                }
            )
            assert same == alone.model_dump(
                exclude={
                    "study",
                    "cell",
                    "topic",
                    "panel",
                    "variant",
                    "repeat",
                    "without",
                    "similarity_to_parent",
                    "outcome_changed",
                }
            )
    per_arm = Counter((r.variant, r.converged) for r in tables.sessions)
    assert per_arm[("strict", True)] == TOPICS * STRICT
    assert per_arm[("loo-dave", False)] == TOPICS * REPEATS
    people = Counter(r.session_id for r in tables.participants)
    assert set(people.values()) <= {2, 3}


# --------------------------------------------------------------------------- bytes


@pytest.mark.slow
def test_exports_and_the_report_are_the_same_bytes_from_the_same_store(
    known: Path, tmp_path: Path
) -> None:
    store = str(known)
    csv_a, csv_b = study_export(store, "known"), study_export(store, "known")
    assert csv_a == csv_b
    lines = csv_a.decode().splitlines()
    assert lines[0].startswith("study,cell,topic,panel,variant,repeat,session_id")
    assert len(lines) == 1 + TOPICS * REPEATS * 5
    jsonl = study_export(store, "known", table="participants", fmt="jsonl")
    first = json.loads(jsonl.decode().splitlines()[0])
    assert first["study"] == "known"
    assert first["participant"] == "ana"
    import pyarrow.parquet as pq

    parquet = study_export(store, "known", fmt="parquet")
    assert parquet == study_export(store, "known", fmt="parquet")
    assert pq.read_table(io.BytesIO(parquet)).num_rows == TOPICS * REPEATS * 5
    one = study_report(store, "known", path=tmp_path / "a" / "study.html")
    two = study_report(store, "known", path=tmp_path / "b" / "study.html")
    assert one.path.read_bytes() == two.path.read_bytes()
    assert one.html == two.html


@pytest.mark.slow
def test_the_report_as_of_a_past_event_shows_the_study_then(known: Path, tmp_path: Path) -> None:
    store = str(known)
    then = study_report(store, "known", path=tmp_path / "then.html", at_event=12)
    now = study_report(store, "known", path=tmp_path / "now.html")
    assert then.model.as_of_event == 12
    assert now.model.as_of_event == now.model.total_events
    with_session = [c for c in then.model.cells if c.report_file is not None]
    assert 0 < len(with_session) < len([c for c in now.model.cells if c.report_file])
    rows_then = study_export(store, "known", at_event=12).decode().splitlines()
    assert len(rows_then) == 1 + len(with_session)


# --------------------------------------------------------------------------- the commands


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "forge_ledger", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_the_commands_write_exports_and_the_page(known: Path, tmp_path: Path) -> None:
    out = _cli("study", "export", "known", "--store", str(known), "--format", "jsonl")
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.splitlines()) == TOPICS * REPEATS * 5
    refused = _cli("study", "export", "known", "--store", str(known), "--format", "parquet")
    assert refused.returncode == 2
    assert refused.stderr.startswith("error: parquet is binary")
    page = tmp_path / "study.html"
    made = _cli("study", "report", "known", "--store", str(known), "-o", str(page), "--json")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["path"] == str(page)
    assert "Content-Security-Policy" in page.read_text()
    bad = _cli(
        "study", "report", "known", "--store", str(known), "-o", str(page), "--at-event", "9999"
    )
    assert bad.returncode == 2
    assert "out of range" in bad.stderr


def test_what_the_plan_and_the_models_wrote_is_escaped_in_the_page() -> None:
    from forge_ledger.report._study import CellLine, StudyReportModel, render_study_html

    hostile = "<script>alert(1)</script>"
    model = StudyReportModel(
        study_id="s",
        name="n",
        status="finished",
        as_of_event=1,
        total_events=1,
        head_hash="h",
        cells_total=1,
        counts={"done": 1},
        spent_usd=0.0,
        arms=(),
        differences=(),
        influence=(),
        command="forge-ledger study report s -o x.html",
        cells=(
            CellLine(
                cell="t1/p/v/1",
                arm="v",
                topic="t1",
                title=hostile,
                status="done",
                outcome="converged",
                session_id="0" * 32,
                report_file='x" onclick="y.html',
            ),
        ),
    )
    html = render_study_html(model)
    assert hostile not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert 'onclick="y' not in html
    assert "<script" not in html
