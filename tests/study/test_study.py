"""Studies: a plan checked in one pass, cells run concurrently, each exactly once, under a budget.

In-process tests run the study with the scripted provider; the command-line tests run
``forge-ledger study`` in a child process against the fake OpenAI-compatible server living in
the test process, so a child killed with SIGKILL leaves the server (and its request count) up.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
import yaml

from forge_ledger.app.studies import SESSIONS
from forge_ledger.ledger import Ledger, verify_session
from forge_ledger.panel.preflight import PreflightError
from forge_ledger.study import (
    StudyRun,
    StudyStream,
    load_plan,
    plan_study,
    run_cell,
    run_study,
)
from forge_ledger.testing import FakeOpenAIServer, ScriptedProvider, bundled_script
from support.study_plans import LOOPBACK, write_panel, write_plan


def _plan(tmp_path: Path, url: str = LOOPBACK, **changes: Any) -> Path:
    return write_plan(tmp_path, url, **{"name": "anonymity", "repeats": 2, **changes})


def _provider() -> ScriptedProvider:
    return ScriptedProvider.from_script(bundled_script("demo"))


def _types(ledger: Ledger, study_id: UUID) -> Counter[tuple[str, str]]:
    """(event type, cell) → how many the study recorded."""
    return Counter(
        (r.type, str(r.data.get("cell", ""))) for r in StudyStream(ledger).records(study_id)
    )


# --------------------------------------------------------------------------- the plan


def test_a_bad_plan_says_every_problem_on_its_own_line(tmp_path: Path) -> None:
    write_panel(tmp_path / "cheap.yaml", LOOPBACK, priced=False, names=("ana", "ben"))
    plan = _plan(
        tmp_path,
        panels={"gone": "missing.yaml", "cheap": "cheap.yaml"},
        variants={"named": {}, "typo": {"anonymise": True}},
    )
    with pytest.raises(PreflightError) as caught:
        load_plan(plan)
    problems = caught.value.problems
    assert len(problems) == 4, problems
    assert "panels.gone" in problems[0]
    assert "missing.yaml" in problems[0]
    assert "variants.typo.anonymise: unknown setting" in problems[1]
    assert all("panels.cheap" in p and "no known price" in p for p in problems[2:])
    assert {p.split(": ", 2)[2].split(" ")[0] for p in problems[2:]} == {"ana", "ben"}


def test_the_command_refuses_a_bad_plan_before_recording_anything(tmp_path: Path) -> None:
    plan = _plan(tmp_path, variants={"typo": {"treshold": 0.9}}, repeats=0)
    store = tmp_path / "s.sqlite"
    done = subprocess.run(
        [sys.executable, "-m", "forge_ledger", "study", "run", str(plan), "--store", str(store)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert all(line.startswith("error: ") for line in lines)
    assert any("repeats" in line for line in lines), lines
    assert "Traceback" not in done.stderr
    assert not store.exists()


# --------------------------------------------------------------------------- running


@pytest.mark.slow
def test_a_study_of_3_topics_2_variants_2_repeats_runs_to_the_end(tmp_path: Path) -> None:
    plan = load_plan(_plan(tmp_path))
    with Ledger(str(tmp_path / "s.sqlite")) as ledger:
        study_id = plan_study(ledger, plan)
        assert plan_study(ledger, plan) == study_id  # the same plan continues its study
        state = asyncio.run(
            run_study(ledger, study_id, sessions=SESSIONS, provider=_provider(), concurrency=4)
        )
        assert state.status == "finished"
        assert state.count("done") == 12
        of_study = StudyStream(ledger).sessions_of(study_id)
        assert len(of_study) == 12 == len(ledger.session_ids())
        for sid, cell in of_study.items():
            assert verify_session(ledger, UUID(sid)).ok
            anonymized = ledger.state(sid).config.anonymize
            assert anonymized == (cell["variant"] == "anonymous")
        assert StudyStream(ledger).verify(study_id) == []
        assert round(state.spent_usd, 9) == round(
            sum(ledger.state(s).cost_usd for s in of_study), 9
        )


def test_a_study_writes_each_session_s_files_once_it_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cell's YAML export and document file are written when its session ends or pauses,
    not at each phase change as a session run by hand writes them."""
    import forge_ledger.yaml_format as yaml_format

    real = yaml_format.autosave
    written: Counter[str] = Counter()

    def counted(ledger: Ledger, session_id: UUID) -> Any:
        written[str(session_id)] += 1
        return real(ledger, session_id)

    monkeypatch.setattr(yaml_format, "autosave", counted)
    plan = load_plan(_plan(tmp_path, repeats=1))
    with Ledger(str(tmp_path / "s.sqlite")) as ledger:
        study_id = plan_study(ledger, plan)
        state = asyncio.run(
            run_study(ledger, study_id, sessions=SESSIONS, provider=_provider(), concurrency=2)
        )
        assert state.count("done") == len(state.cells)
        assert written == Counter({sid: 1 for sid in StudyStream(ledger).sessions_of(study_id)})
    exports = list((tmp_path / "brainstorm-sessions").glob("*.yaml"))
    assert len(exports) == len(state.cells)


def test_a_study_brings_the_read_model_up_to_date_once_at_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its sessions leave the read model to the study, which catches it up once, audits
    included, so that `sessions`, `show`, `spec` and `audit` answer from it right away."""
    from forge_ledger.app.audit_views import current_audit
    from forge_ledger.app.studies import continue_study
    from forge_ledger.ledger.outputs import store_outputs
    from forge_ledger.projections import ProjectionRunner
    from forge_ledger.projections.current import current_summaries, store_head
    from support.read_models import spied

    catch_ups = spied(monkeypatch, ProjectionRunner, "catch_up")
    plan = load_plan(_plan(tmp_path, repeats=1))
    with Ledger(str(tmp_path / "s.sqlite")) as ledger:
        study_id = plan_study(ledger, plan)
        state = asyncio.run(continue_study(ledger, study_id, provider=_provider()))
        assert state.count("done") == len(state.cells) > 1
        assert len(catch_ups) == 1  # at the end: none as each session stopped
        views = store_outputs(ledger.location).views
        head, last = store_head(ledger)
        listed = current_summaries(views, head, last)
        assert listed is not None
        sessions = StudyStream(ledger).sessions_of(study_id)
        assert {row["id"] for row in listed} == set(sessions)
        for sid in sessions:
            assert current_audit(ledger, views, UUID(sid)) is not None


def test_the_study_time_travels_by_its_events(tmp_path: Path) -> None:
    plan = load_plan(_plan(tmp_path, repeats=1, topics=[{"title": "One"}]))
    with Ledger(str(tmp_path / "s.sqlite")) as ledger:
        study_id = plan_study(ledger, plan)
        asyncio.run(
            run_study(ledger, study_id, sessions=SESSIONS, provider=_provider(), concurrency=1)
        )
        stream = StudyStream(ledger)
        assert stream.state(study_id, at_event=1).count("pending") == 2
        after_first = stream.state(study_id, at_event=3)
        assert after_first.count("done") == 1
        assert after_first.count("pending") == 1


def test_running_a_finished_or_claimed_cell_again_changes_nothing(tmp_path: Path) -> None:
    plan = load_plan(_plan(tmp_path, repeats=1, topics=[{"title": "One"}]))
    with Ledger(str(tmp_path / "s.sqlite")) as ledger:
        study_id = plan_study(ledger, plan)
        first, second = StudyRun(ledger, study_id), StudyRun(ledger, study_id)
        cell = "t1/trio/named/1"
        assert first.claim(cell) is None
        assert second.claim(cell) is None  # re-reads the study: the cell is taken
        assigned = second.state.cells[cell].session_id
        done = asyncio.run(
            run_cell(second, cell, sessions=SESSIONS, provider=_provider())
        )  # a claim never run
        assert done is not None
        assert done.status == "done"
        assert [str(s) for s in ledger.session_ids()] == [assigned]
        again = asyncio.run(run_cell(first, cell, sessions=SESSIONS, provider=_provider()))
        first.reload()
        assert again.status == "done"
        assert first.state.cells[cell].status == "done"
        counts = _types(ledger, study_id)
        assert counts[("CellAssigned", cell)] == 1
        assert counts[("CellFinished", cell)] == 1
        assert len(ledger.session_ids()) == 1


def test_a_spent_budget_stops_new_cells_and_is_never_exceeded(tmp_path: Path) -> None:
    plan = load_plan(_plan(tmp_path, budget={"usd": 0.07}, session={"max_cost_usd": 0.05}))
    with Ledger(str(tmp_path / "s.sqlite")) as ledger:
        study_id = plan_study(ledger, plan)
        state = asyncio.run(
            run_study(ledger, study_id, sessions=SESSIONS, provider=_provider(), concurrency=2)
        )
        assert state.stopped.startswith("the study's budget of $0.07 is spent")
        assert state.count("pending") > 0
        assert 0 < state.count("done") < 12
        finished = [c for c in state.cells.values() if c.status == "done"]
        assert all(c.outcome == "converged" for c in finished)  # none cut short by the budget
        assert state.spent_usd <= 0.07
        spent = sum(ledger.state(s).cost_usd for s in ledger.session_ids())
        assert spent <= 0.07
        types = [r.type for r in StudyStream(ledger).records(study_id)]
        stop = types.index("StudyStopped")
        assert "CellAssigned" not in types[stop:]
        again = asyncio.run(
            run_study(ledger, study_id, sessions=SESSIONS, provider=_provider(), concurrency=2)
        )
        assert again.count("pending") == state.count("pending")


def test_a_provider_outage_pauses_cells_and_the_next_run_resumes_them(tmp_path: Path) -> None:
    from forge_ledger.providers import ProviderCallError

    plan = load_plan(
        _plan(tmp_path, repeats=1, topics=[{"title": "One"}], session={"max_attempts": 1})
    )
    with Ledger(str(tmp_path / "s.sqlite")) as ledger:
        study_id = plan_study(ledger, plan)
        outage = _provider().enqueue(
            [ProviderCallError("server_error", "down", retryable=True)] * 6
        )
        state = asyncio.run(
            run_study(ledger, study_id, sessions=SESSIONS, provider=outage, concurrency=2)
        )
        assert state.count("paused") == 2
        assert state.status == "in_progress"
        state = asyncio.run(
            run_study(ledger, study_id, sessions=SESSIONS, provider=_provider(), concurrency=2)
        )
        assert state.count("done") == 2
        assert state.status == "finished"
        assert len(ledger.session_ids()) == 2


# --------------------------------------------------------------------------- the command


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "forge_ledger", *args]


def _env(store: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["FORGE_LEDGER_STORE"] = str(store)
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    return env


def _progress(store: Path) -> Counter[str] | None:
    try:
        with Ledger(str(store), create=False) as reader:
            stream = StudyStream(reader)
            ids = stream.study_ids()
            return Counter(r.type for r in stream.records(ids[0])) if ids else None
    except Exception:  # not created yet, or locked by the writer for a moment
        return None


def _views_after_update(store: Path) -> list[str]:
    """``projections update`` on ``store``, then the status of each cell in its read model."""
    done = subprocess.run(
        _cli("projections", "update"), env=_env(store), capture_output=True, timeout=120
    )
    assert done.returncode == 0, done.stderr.decode()[-800:]
    with sqlite3.connect(store.with_name("s.views.sqlite")) as views:
        return [s for (s,) in views.execute("SELECT status FROM study_cells ORDER BY rowid")]


@pytest.mark.slow
def test_kill_9_mid_study_then_run_again_finishes_every_cell_once(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    with FakeOpenAIServer(bundled_script("demo"), latency=0.05) as server:
        plan = _plan(tmp_path, server.url)
        runner = subprocess.Popen(
            _cli("study", "run", str(plan), "-j", "3"),
            env=_env(store),
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 120
            seen = _progress(store)
            while seen is None or seen["CellFinished"] < 2:
                assert runner.poll() is None, runner.communicate()[1].decode()[-800:]
                assert time.monotonic() < deadline, "the study never got half-way"
                time.sleep(0.05)
                seen = _progress(store)
        finally:
            runner.kill()
            runner.communicate(timeout=30)
        assert runner.returncode == -9
        cut = _progress(store)
        assert cut is not None
        assert cut["CellFinished"] < 12
        before = _views_after_update(store)
        assert before.count("done") == cut["CellFinished"]
        assert len(before) == 12  # every cell, run or not
        again = subprocess.run(
            _cli("study", "run", str(plan), "-j", "3", "--json"),
            env=_env(store),
            cwd=tmp_path,
            capture_output=True,
            timeout=300,
        )
        assert again.returncode == 0, again.stderr.decode()[-1500:]
        assert json.loads(again.stdout)["done"] == 12
    with Ledger(str(store), create=False) as ledger:
        stream = StudyStream(ledger)
        (study_id,) = stream.study_ids()
        counts = _types(ledger, study_id)
        cells = stream.state(study_id).cells
        assert all(counts[("CellAssigned", c)] == 1 for c in cells)
        assert all(counts[("CellFinished", c)] == 1 for c in cells)
        assert len(ledger.session_ids()) == 12
        assert all(verify_session(ledger, sid).ok for sid in ledger.session_ids())
        assert stream.verify(study_id) == []
    listed = subprocess.run(
        _cli("sessions", "--study", "anonymity", "--json"),
        env=_env(store),
        capture_output=True,
        timeout=60,
    )
    rows = json.loads(listed.stdout)
    assert len(rows) == 12
    assert {r["cell"] for r in rows} == set(cells)
    assert {r["variant"] for r in rows} == {"named", "anonymous"}
    status = subprocess.run(
        _cli("study", "status", "anonymity", "--json"),
        env=_env(store),
        capture_output=True,
        timeout=60,
    )
    assert json.loads(status.stdout)["status"] == "finished"
    assert _views_after_update(store) == ["done"] * 12  # the cells run after the kill too
    exported = subprocess.run(
        _cli("study", "export", "anonymity", "--format", "jsonl"),
        env=_env(store),
        capture_output=True,
        timeout=60,
    )
    rows = [json.loads(line) for line in exported.stdout.decode().splitlines()]
    views = sqlite3.connect(store.with_name("s.views.sqlite"))
    kept = dict(views.execute("SELECT cell, cost_usd FROM study_sessions").fetchall())
    assert kept == {r["cell"]: r["cost_usd"] for r in rows}


def test_the_library_runs_a_plan_given_as_a_dict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from forge_ledger.app.studies import study

    plan = yaml.safe_load(_plan(tmp_path).read_text(encoding="utf-8"))
    plan.update(repeats=1, topics=[{"title": "One"}], variants={"strict": {"min_consensus": 3}})
    monkeypatch.chdir(tmp_path)  # the panel's file is relative to the current folder
    with Ledger(str(tmp_path / "s.sqlite")) as ledger:
        state = study(ledger, plan, provider=_provider(), concurrency=2)
        assert state.status == "finished"
        (sid,) = ledger.session_ids()
        assert ledger.state(sid).config.min_consensus == 3


def test_reading_studies_creates_nothing(tmp_path: Path) -> None:
    import sqlite3

    store = tmp_path / "s.sqlite"
    with Ledger(str(store)) as ledger:
        assert StudyStream(ledger).study_ids() == []
    tables = {t for (t,) in sqlite3.connect(store).execute("SELECT name FROM sqlite_master")}
    assert "study_events" not in tables


def test_a_study_is_recorded_and_run_on_either_store(tmp_path: Path, store_url: str) -> None:
    plan = load_plan(_plan(tmp_path, repeats=1, topics=[{"title": "One"}]))
    with Ledger(store_url) as ledger:
        study_id = plan_study(ledger, plan)
        state = asyncio.run(
            run_study(ledger, study_id, sessions=SESSIONS, provider=_provider(), concurrency=2)
        )
        assert state.status == "finished"
    with Ledger(store_url, create=False) as reader:
        stream = StudyStream(reader)
        assert stream.study_ids() == [study_id]
        assert stream.verify(study_id) == []
        assert set(stream.sessions_of("anonymity")) == {str(s) for s in reader.session_ids()}


def test_a_budget_too_small_for_one_call_per_cell_is_refused_before_running(
    tmp_path: Path,
) -> None:
    with pytest.raises(PreflightError) as caught:
        load_plan(_plan(tmp_path, budget={"usd": 0.01}))
    (problem,) = caught.value.problems
    assert "each cell's share of budget.usd is $0.0008333" in problem
    assert "below the worst case of the first call" in problem


def test_the_progress_display_escapes_what_the_plan_and_models_wrote(tmp_path: Path) -> None:
    from rich.console import Console

    from forge_ledger.cli.study_cmd import _render
    from forge_ledger.study import Progress

    hostile = "Title\x1b]8;;http://x\x07link\x1b[2J"
    plan = load_plan(_plan(tmp_path, repeats=1, topics=[{"title": hostile}]))
    with Ledger(str(tmp_path / "s.sqlite")) as ledger:
        run = StudyRun(ledger, plan_study(ledger, plan))
        assert run.claim("t1/trio/named/1") is None
        progress = Progress(run.state, active={"t1/trio/named/1": 0.0})
        console = Console(record=True, width=200, force_terminal=True)
        console.print(_render(progress))
    shown = console.export_text()
    assert "\x1b" not in shown
    assert "\x07" not in shown
    assert "Title" in shown


def test_the_calls_and_wall_time_budgets_stop_new_cells(tmp_path: Path) -> None:
    from datetime import UTC, datetime, timedelta

    from forge_ledger.clock import FixedStepClock

    plan = load_plan(_plan(tmp_path, budget={"calls": 20, "wall_secs": 3600}))
    start = datetime(2026, 1, 1, tzinfo=UTC)
    with Ledger(str(tmp_path / "s.sqlite")) as ledger:
        study_id = plan_study(ledger, plan, clock=FixedStepClock(start))
        state = asyncio.run(
            run_study(
                ledger,
                study_id,
                sessions=SESSIONS,
                provider=_provider(),
                concurrency=1,
                clock=FixedStepClock(start),
            )
        )
        # each call is counted before it starts: the one the budget refuses is never made,
        # and the cell it was in pauses (resumable once the budget is raised)
        assert state.stopped == "the study's budget of 20 calls is spent (20 made)"
        assert (state.count("done"), state.count("paused")) == (1, 1)
        assert state.calls == 20
    plan = load_plan(_plan(tmp_path, name="late", budget={"wall_secs": 3600}))
    with Ledger(str(tmp_path / "t.sqlite")) as ledger:
        study_id = plan_study(ledger, plan, clock=FixedStepClock(start))
        late = FixedStepClock(start + timedelta(hours=2))
        state = asyncio.run(
            run_study(
                ledger, study_id, sessions=SESSIONS, provider=_provider(), concurrency=2, clock=late
            )
        )
        assert state.stopped == "the study's wall time of 3600 s is over"
        assert state.count("pending") == 12


@pytest.mark.slow
def test_two_runners_on_one_study_share_its_cells_each_run_once(tmp_path: Path) -> None:
    plan = load_plan(_plan(tmp_path))
    store = str(tmp_path / "s.sqlite")
    with Ledger(store) as one, Ledger(store) as two:
        study_id = plan_study(one, plan)

        async def both() -> None:
            await asyncio.gather(
                run_study(one, study_id, sessions=SESSIONS, provider=_provider(), concurrency=3),
                run_study(two, study_id, sessions=SESSIONS, provider=_provider(), concurrency=3),
            )

        asyncio.run(both())
        counts = _types(one, study_id)
        cells = StudyStream(one).state(study_id).cells
        assert all(counts[("CellAssigned", c)] == 1 for c in cells)
        assert all(counts[("CellFinished", c)] == 1 for c in cells)
        assert len(one.session_ids()) == 12
