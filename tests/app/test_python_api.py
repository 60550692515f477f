"""The Python API: ``docs/examples/python_api.py`` runs as a program does, through
``forge_ledger.open`` and the application layer, without loading the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from forge_ledger import FixedStepClock, SequentialIds
from forge_ledger.app import in_progress_session, open
from forge_ledger.app.demo import DEMO_SCRIPT, demo_participants, demo_topic
from forge_ledger.domain.values import SessionConfig
from forge_ledger.ledger import Ledger
from forge_ledger.panel.preflight import PreflightError
from forge_ledger.testing import ScriptedProvider, bundled_script

EXAMPLE = Path(__file__).parents[2] / "docs" / "examples" / "python_api.py"

_RUN = """
import json, runpy, sys
sys.argv = [sys.argv[1], sys.argv[2]]
runpy.run_path(sys.argv[0], run_name="__main__")
print(json.dumps(sorted(m for m in sys.modules if m.startswith("forge_ledger.cli"))))
"""


@pytest.mark.slow
def test_the_example_starts_audits_and_reports_a_session_without_the_cli(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _RUN, str(EXAMPLE), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    *printed, modules = proc.stdout.splitlines()
    assert json.loads(modules) == []
    assert "converged after 2 iteration(s)" in printed[0]
    report = tmp_path / "report.html"
    assert report.read_text("utf-8").lstrip().lower().startswith("<!doctype html")
    assert printed[2] == f"report: {report}"
    # the session keeps its export and document beside the store, as the CLI's do
    assert list((tmp_path / "brainstorm-sessions").glob("*.yaml"))
    assert list((tmp_path / "specs").glob("*.md"))


def test_a_session_in_progress_is_found_by_its_status(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    with open(
        store,
        clock=FixedStepClock(),
        ids=SequentialIds(),
        provider=ScriptedProvider.from_script(bundled_script(DEMO_SCRIPT)),
    ) as forge:
        state = forge.start(demo_topic(), demo_participants(""), SessionConfig(max_rounds=12))
        assert in_progress_session(forge.ledger, demo_topic().slug) is None  # converged
        fork = forge.fork(state.id, at_iteration=1)  # a fork is left paused
        found = in_progress_session(forge.ledger, demo_topic().slug)
        assert found is not None
        assert found.id == str(fork)


def test_a_ledger_given_to_open_stays_open_and_one_opened_is_closed(tmp_path: Path) -> None:
    with Ledger(str(tmp_path / "given.sqlite"), create=True) as ledger:
        with open(ledger) as forge:
            assert forge.ledger is ledger
        assert ledger.session_ids() == []  # still usable
    with open(tmp_path / "own.sqlite") as forge:
        own = forge.ledger
    with pytest.raises(Exception):  # noqa: B017, PT011 - any refusal of a closed ledger
        own.session_ids()


def test_start_checks_the_settings_before_anything_is_recorded(tmp_path: Path) -> None:
    with open(tmp_path / "s.sqlite", provider=ScriptedProvider()) as forge:
        with pytest.raises(PreflightError, match="--max-cost 0 allows no model call"):
            forge.start(demo_topic(), demo_participants(""), SessionConfig(max_cost_usd=0))
        assert forge.sessions() == []


def test_a_fork_resumes_with_a_model_swapped_and_an_abort_is_sealed(tmp_path: Path) -> None:
    provider = ScriptedProvider.from_script(bundled_script(DEMO_SCRIPT))
    with open(
        tmp_path / "s.sqlite", clock=FixedStepClock(), ids=SequentialIds(), provider=provider
    ) as forge:
        parent = forge.start(demo_topic(), demo_participants(""), SessionConfig(max_rounds=12))
        fork = forge.fork(parent.id, at_iteration=1)
        state = forge.resume(fork, swaps=["dave=openai/carol"])
        assert [p.model for p in state.participants if p.name == "dave"] == ["openai/carol"]
        updates = [e for e in forge.ledger.events(fork) if e.type == "ParticipantUpdated"]
        assert [e.data["reason"] for e in updates] == ["-m dave=openai/carol"]
        other = forge.fork(parent.id, at_iteration=1)
        ended = forge.abort(other, reason="enough", author="ada")
        assert ended.status.value == "aborted"
        assert forge.verify(other).sealed
