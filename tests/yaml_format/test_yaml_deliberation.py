"""The YAML export carries the deliberation (panel history, participants, document, vote) and
import restores it: export → import → export gives the same bytes."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forge_ledger.clock import FixedStepClock, SequentialIds
from forge_ledger.domain.values import Mode, SessionStatus, file_status, status_from_file
from forge_ledger.errors import ImportValidationError
from forge_ledger.ledger import Ledger
from forge_ledger.records.spec import split_spec
from forge_ledger.yaml_format import export_events, import_session
from support.stories import FEATURE_AUTH_NAMES, feature_auth

FIXTURES = Path(__file__).parents[1] / "fixtures"
GOLDEN_EXPORTS = sorted(FIXTURES.glob("store-*/*.export.yaml"))


def _import(ledger: Ledger, text: str, tag: str = "x") -> str:
    return import_session(ledger, text, clock=FixedStepClock(), ids=SequentialIds(tag)).session_id


def _export(ledger: Ledger, sid: str) -> str:
    return export_events(ledger.events(sid))


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "forge_ledger", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("status", list(SessionStatus))
def test_status_vocabulary_reads_back_what_it_writes(status: SessionStatus) -> None:
    word = file_status(status)
    back = status_from_file(word, agreed=status is SessionStatus.CONVERGED)
    assert file_status(back) == word
    if status.terminal:
        assert back.terminal
    assert status_from_file("completed") is SessionStatus.COMPLETE
    assert status_from_file("completed", agreed=True) is SessionStatus.CONVERGED
    assert status_from_file("abandoned", agreed=True) is SessionStatus.ABORTED


def test_export_holds_participants_document_vote_and_panel(sqlite_url: str) -> None:
    agg = feature_auth(iterations=2)
    with Ledger(sqlite_url) as ledger:
        ledger.save(agg)
        doc = yaml.safe_load(_export(ledger, str(agg.id)))
    s = agg.state
    ext = doc["forge_ledger"]
    assert [p["name"] for p in ext["participants"]] == list(FEATURE_AUTH_NAMES)
    assert ext["participants"][0]["model"] == "openai/alice"
    assert ext["document"] == s.latest_text == "synthesis 2"
    conv = s.latest_convergence
    assert conv is not None
    assert ext["vote"]["round"] == conv.round
    assert ext["vote"]["agree"] == conv.agree
    assert list(doc) == ["format_version", "session", "ledger", "forge_ledger"]
    panel = doc["session"]["panel_history"]
    assert doc["session"]["mode"] == "standard"  # told in panel terms whatever the mode
    assert [r["phase"] for r in panel] == ["discussion", "debate", "debate"] * 2
    draft = panel[0]["contributions"]
    assert [(c["expert"], c["framework"]) for c in draft] == [
        (n, "generalist") for n in FEATURE_AUTH_NAMES
    ]


def test_import_restores_the_deliberation_and_export_is_a_fixed_point(store_url: str) -> None:
    agg = feature_auth(iterations=2, vote_agree=(True, True, True))
    with Ledger(store_url) as ledger:
        ledger.save(agg)
        first = _export(ledger, str(agg.id))
        sid = _import(ledger, first)
        state = ledger.state(sid)
        second = _export(ledger, sid)
    assert second == first
    assert state.participants == agg.state.participants
    assert state.latest_text == agg.state.latest_text
    conv, source = state.latest_convergence, agg.state.latest_convergence
    assert conv is not None
    assert source is not None
    assert (conv.round, conv.score, conv.agree, conv.majority_agrees) == (
        source.round,
        source.score,
        source.agree,
        source.majority_agrees,
    )
    assert state.status is SessionStatus.IN_PROGRESS  # the run never finished


@st.composite
def _sessions(draw: st.DrawFn) -> dict[str, Any]:
    votes = st.tuples(st.booleans(), st.booleans(), st.booleans())
    return {
        "iterations": draw(st.integers(1, 3)),
        "mode": draw(st.sampled_from(list(Mode))),
        "vote_agree": draw(votes),
        "critique_scores": draw(st.tuples(st.integers(0, 100), st.integers(0, 100))),
        "questions": draw(st.booleans()),
        "title": draw(
            st.text(
                st.characters(codec="utf-8", categories=("L", "N", "P", "Zs")),
                min_size=1,
                max_size=40,
            ).filter(lambda t: any(c.isalnum() for c in t))
        ),
    }


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(spec=_sessions(), finish=st.sampled_from([None, *SessionStatus]))
def test_export_import_export_is_a_fixed_point(
    spec: dict[str, Any], finish: SessionStatus | None, tmp_path: Path
) -> None:
    agg = feature_auth(**spec, session_id=uuid.uuid4())
    if finish is not None and finish.terminal:
        agg.finish(finish, at=agg.state.updated_at)
    with Ledger(str(tmp_path / f"{uuid.uuid4().hex}.sqlite")) as ledger:
        ledger.save(agg)
        first = _export(ledger, str(agg.id))
        again = _import(ledger, first, "f")
        assert _export(ledger, again) == first
        assert ledger.state(again).latest_text == agg.state.latest_text


@pytest.mark.parametrize("path", GOLDEN_EXPORTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fixture_store_exports_are_fixed_points(path: Path, sqlite_url: str) -> None:
    text = path.read_text("utf-8")
    with Ledger(sqlite_url) as ledger:
        assert _export(ledger, _import(ledger, text)) == text


def _with_extension(extension: dict[str, Any]) -> str:
    doc = yaml.safe_load((FIXTURES / "seed_panel.yaml").read_text("utf-8"))
    doc["forge_ledger"] = extension
    return yaml.safe_dump(doc, sort_keys=False)


@pytest.mark.parametrize(
    ("extension", "problem"),
    [
        (
            {"participants": [{"name": "a", "model": "openai/x", "api_base": "http://evil"}]},
            "api_base",
        ),
        ({"participants": [{"name": "a", "model": "m"}, {"name": "a", "model": "n"}]}, "same name"),
        ({"document": "text", "script": "rm -rf /"}, "forge_ledger.script"),
        ({"vote": {"round": 1}}, "forge_ledger.vote.iteration"),
    ],
)
def test_a_bad_extension_block_is_refused_and_writes_nothing(
    extension: dict[str, Any], problem: str, sqlite_url: str
) -> None:
    with Ledger(sqlite_url) as ledger:
        with pytest.raises(ImportValidationError) as err:
            _import(ledger, _with_extension(extension))
        assert problem in str(err.value)
        assert ledger.session_ids() == []


def test_imported_text_is_escaped_when_shown(tmp_path: Path) -> None:
    hostile = "openai/\x1b[2J[bold red]boom[/]"
    text = _with_extension(
        {
            "participants": [{"name": "alice", "model": hostile}],
            "document": "# Plan\n\x1b[31mred[/] text\n",
        }
    )
    (tmp_path / "in.yaml").write_text(text, "utf-8")
    store = str(tmp_path / "s.sqlite")
    imported = _cli(tmp_path, "import", "in.yaml", "--store", store, "--json")
    assert imported.returncode == 0, imported.stderr
    sid = json.loads(imported.stdout)["session_id"]
    shown = _cli(tmp_path, "show", sid, "--store", store)
    assert shown.returncode == 0, shown.stderr
    assert "\x1b" not in shown.stdout
    assert "[bold red]boom[/]" in shown.stdout  # markup shown as text, not applied


@pytest.mark.slow
def test_demo_survives_export_import_export(tmp_path: Path) -> None:
    """The demo, exported to YAML and imported into a fresh store, prints the same document
    and exports to the same bytes."""
    run = _cli(tmp_path, "demo", "--latency", "0", "--store", "run.sqlite", "--json")
    assert run.returncode == 0, run.stderr
    sid = json.loads(run.stdout)["session_id"]
    assert _cli(tmp_path, "export", sid, "--store", "run.sqlite", "-o", "a.yaml").returncode == 0
    imported = _cli(tmp_path, "import", "a.yaml", "--store", "fresh.sqlite", "--json")
    assert imported.returncode == 0, imported.stderr
    result = json.loads(imported.stdout)
    assert result["participants"] == 4
    assert result["has_document"] is True
    assert "not replayable" in result["lacks"]
    copy = result["session_id"]
    specs = [
        _cli(tmp_path, "spec", s, "--store", store)
        for s, store in ((sid, "run.sqlite"), (copy, "fresh.sqlite"))
    ]
    assert all(p.returncode == 0 for p in specs), [p.stderr for p in specs]
    bodies = [split_spec(p.stdout)[1] for p in specs]
    assert bodies[0] == bodies[1]
    assert "## Retention" in bodies[0]
    assert specs[1].stdout.count("**Agreed.**") == 1
    assert _cli(tmp_path, "export", copy, "--store", "fresh.sqlite", "-o", "b.yaml").returncode == 0
    assert (tmp_path / "b.yaml").read_bytes() == (tmp_path / "a.yaml").read_bytes()
    shown = json.loads(_cli(tmp_path, "show", copy, "--store", "fresh.sqlite", "--json").stdout)
    assert [p["name"] for p in shown["participants"]] == ["alice", "bob", "carol", "dave"]
    rounds = _cli(tmp_path, "show", copy, "--store", "fresh.sqlite").stdout
    assert "none in this ledger: the session came from a file" in rounds
    assert "none yet" not in rounds
    plain = _cli(tmp_path, "import", "a.yaml", "--store", "other.sqlite").stdout.splitlines()
    assert plain[-1].startswith("not replayable:")
    assert "4 participant(s), the document" in plain[0]


@pytest.mark.parametrize(
    ("old", "new", "path"),
    [
        ('phase: "discussion"', 'phase: "keynote"', "session.panel_history[0].phase"),
        (
            'framework: "SOLID"',
            'framework: "SOLID"\n          run: "rm -rf /"',
            "session.panel_history[0].contributions[0].run",
        ),
    ],
)
def test_panel_history_is_validated_like_every_field(
    old: str, new: str, path: str, sqlite_url: str
) -> None:
    good = (FIXTURES / "seed_panel.yaml").read_text("utf-8")
    bad = good.replace(old, new, 1)
    assert bad != good
    with Ledger(sqlite_url) as ledger:
        with pytest.raises(ImportValidationError) as err:
            _import(ledger, bad)
        assert ledger.session_ids() == []
    assert path in err.value.one_line()
    assert "(line " in err.value.one_line()
