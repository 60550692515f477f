"""``forge-ledger run / resume / demo`` end to end, in process through ``main`` (the real
entry point: its error handling is what users see), against the fake server on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from forge_ledger.ledger import Ledger, verify_session
from forge_ledger.testing import FakeOpenAIServer
from support.cli import assert_one_error_line, one_json, run_cli, write_participants
from support.orchestrator import voice

SUMMARY_KEYS = {"session_id", "status", "iterations", "rounds", "events", "cost_usd"}


def test_run_with_models_and_api_base_prints_one_summary(
    fake_openai: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    fake_openai.set_script({"ana": voice("ana"), "ben": voice("ben")})
    store = str(tmp_path / "run.sqlite")
    code, out, _ = run_cli(
        capsys,
        "run",
        "Retry policy",
        "-m",
        "openai/ana",
        "-m",
        "openai/ben",
        "--api-base",
        fake_openai.url,
        "--store",
        store,
        "--json",
    )
    assert code == 0
    doc = one_json(out)
    assert set(doc) >= SUMMARY_KEYS
    assert doc["status"] == "converged"
    assert doc["iterations"] == 1
    with Ledger(store) as ledger:
        state = ledger.state(doc["session_id"])
        assert doc["events"] == state.version
        assert doc["rounds"] == len(state.rounds)
        assert [p.model for p in state.participants] == ["openai/ana", "openai/ben"]
        assert verify_session(ledger, state_id(ledger, doc)).ok
    assert {r.model for r in fake_openai.requests} == {"ana", "ben"}


def test_a_panel_of_one_runs_with_a_warning(
    fake_openai: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    fake_openai.set_script({"ana": voice("ana")})
    code, out, err = run_cli(
        capsys, "run", "Alone", "-m", "openai/ana", "--api-base", fake_openai.url,
        "--store", str(tmp_path / "one.sqlite"), "--json",
    )
    assert code == 0, err
    assert one_json(out)["status"] in ("converged", "complete")
    warning = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert warning == ["warning: one participant (ana) cannot deliberate: nobody critiques its "
                       "draft or votes against it, so the session converges on its own text; "
                       "add another with -m"]


def state_id(ledger: Ledger, doc: dict[str, Any]) -> Any:
    return ledger.resolve(doc["session_id"])


def test_run_with_participants_file_records_prices(
    fake_openai: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    names = ("ana", "ben", "cleo")
    fake_openai.set_script({n: voice(n) for n in names})
    pfile = write_participants(tmp_path / "p.yaml", fake_openai.url, names)
    store = str(tmp_path / "run.sqlite")
    code, out, _ = run_cli(
        capsys,
        "run",
        "Retry policy",
        "--participants",
        str(pfile),
        "--api-base",
        fake_openai.url,
        "--store",
        store,
        "--json",
    )
    assert code == 0
    doc = one_json(out)
    assert doc["status"] == "converged"
    assert doc["cost_usd"] > 0  # the user prices were applied
    with Ledger(store) as ledger:
        prices = {
            e.data["response"]["price"]["input_cost_per_token"]
            for e in ledger.events(state_id(ledger, doc))
            if e.type == "ContributionRecorded"
        }
    assert prices == {1e-6}


def test_demo_converges_in_iteration_two_after_a_refinement(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    store = str(tmp_path / "demo.sqlite")
    code, out, _ = run_cli(capsys, "demo", "--latency", "0.01", "--store", store, "--json")
    assert code == 0
    doc = one_json(out)
    assert set(doc) >= SUMMARY_KEYS
    assert doc["status"] == "converged"
    assert doc["iterations"] == 2
    with Ledger(store) as ledger:
        events = list(ledger.events(state_id(ledger, doc)))
    types = [e.type for e in events]
    assert "DivergenceDetected" in types
    kinds = [e.data["kind"] for e in events if e.type == "RoundStarted"]
    assert "refinement" in kinds
    assert kinds.index("refinement") > kinds.index("convergence")
    assert types[-2:] == ["SessionConverged", "SessionSealed"]


def test_missing_api_key_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    store = str(tmp_path / "key.sqlite")
    code, out, err = run_cli(
        capsys,
        "run",
        "Needs a key",
        "-m",
        "anthropic/claude-3-5-haiku-20241022",
        "--store",
        store,
        "--json",
    )
    assert code == 2
    line = assert_one_error_line(err)
    assert "ANTHROPIC_API_KEY is not set" in line
    assert "anthropic/claude-3-5-haiku" in line
    assert out == ""
    assert not Path(store).exists()  # found before anything was recorded


@pytest.mark.slow
def test_unreachable_provider_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    store = str(tmp_path / "down.sqlite")
    code, out, err = run_cli(
        capsys,
        "run",
        "Nobody home",
        "-m",
        "openai/x",
        "-m",
        "openai/y",
        "--api-base",
        "http://127.0.0.1:9/v1",
        "--store",
        store,
        "--json",
    )
    assert code == 3
    line = assert_one_error_line(err)
    assert "cannot connect to http://127.0.0.1:9/v1" in line
    assert "--api-base" in line
    assert "forge-ledger resume" in line
    assert one_json(out)["status"] == "paused"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("participants: []\n", "has no participants"),
        ("participants: [{name: a}]\n", "participants[0].model"),
        ("participants: [oops\n", "is not valid YAML"),
    ],
)
def test_bad_participants_file_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, expected: str,
) -> None:
    pfile = tmp_path / "bad.yaml"
    pfile.write_text(content, encoding="utf-8")
    code, out, err = run_cli(
        capsys,
        "run",
        "Bad file",
        "--participants",
        str(pfile),
        "--store",
        str(tmp_path / "bad.sqlite"),
        "--json",
    )
    assert code == 2
    assert out == ""
    assert expected in assert_one_error_line(err)


def test_missing_participants_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run_cli(
        capsys,
        "run",
        "No file",
        "--participants",
        str(tmp_path / "nope.yaml"),
        "--store",
        str(tmp_path / "x.sqlite"),
    )
    assert code == 2
    assert "nope.yaml" in assert_one_error_line(err)
