"""YAML v1.2 session format: import/export round trips, migration, validation, storage, back."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forge_ledger.app import back as go_back
from forge_ledger.cli import cli
from forge_ledger.clock import FixedStepClock, SequentialIds
from forge_ledger.domain.values import Mode, SessionStatus
from forge_ledger.errors import ImportValidationError, InvariantViolation
from forge_ledger.ledger import Ledger
from forge_ledger.yaml_format import (
    autosave,
    cleanup,
    export_events,
    import_session,
    migrate_v1_to_v12,
    parse_session_file,
    write_export,
)
from support.stories import feature_auth, minute_clock

FIXTURES = Path(__file__).parents[1] / "fixtures"
SEEDS = ("seed_standard.yaml", "seed_party.yaml", "seed_panel.yaml")


def _import(ledger: Ledger, text: str, tag: str = "x") -> str:
    return import_session(ledger, text, clock=FixedStepClock(), ids=SequentialIds(tag)).session_id


def _export(ledger: Ledger, sid: str) -> str:
    return export_events(ledger.events(sid))


def _assert_subset(expected: Any, actual: Any, path: str = "") -> None:
    """Every field present in ``expected`` (the seed) is equal in ``actual`` (the export)."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), path
        for k, v in expected.items():
            assert k in actual, f"{path}.{k} missing"
            _assert_subset(v, actual[k], f"{path}.{k}")
    elif isinstance(expected, list):
        assert isinstance(actual, list), path
        assert len(actual) == len(expected), path
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            _assert_subset(e, a, f"{path}[{i}]")
    else:
        assert expected == actual, f"{path}: {expected!r} != {actual!r}"


@pytest.mark.parametrize("name", SEEDS)
def test_seed_examples_round_trip(name: str, store_url: str) -> None:
    text = (FIXTURES / name).read_text("utf-8")
    with Ledger(store_url) as ledger:
        first = _export(ledger, _import(ledger, text, "a"))
        second = _export(ledger, _import(ledger, first, "b"))
    assert first == second
    _assert_subset(yaml.safe_load(text), yaml.safe_load(first))
    assert "ledger:" not in first  # an imported, unsealed session exports what was imported


def test_v1_0_file_is_migrated_as_the_seed_says(sqlite_url: str) -> None:
    text = (FIXTURES / "v1_0_session.yaml").read_text("utf-8")
    raw = yaml.safe_load(text)
    migrated = migrate_v1_to_v12(raw)
    assert raw["format_version"] == "1.0"  # the input is not mutated
    s = migrated["session"]
    assert migrated["format_version"] == "1.2"
    assert s["mode"] == "standard"
    assert s["techniques_history"] == [
        {"iteration": i + 1, "technique_slug": slug, "category": "unknown",
         "suggested_reason": "migrated from v1.0", "applied": True, "source": "manual",
         "weak_axes": []}
        for i, slug in enumerate(raw["session"]["techniques_used"])
    ]
    assert (s["party_active"], s["party_history"], s["panel_active"], s["panel_history"]) == (
        False, [], False, [])
    with Ledger(sqlite_url) as ledger:
        result = import_session(ledger, text, clock=FixedStepClock(), ids=SequentialIds())
        assert result.format_version == "1.0"
        assert result.iterations == 2
        assert ledger.state(result.session_id).status is SessionStatus.COMPLETE
        out = yaml.safe_load(_export(ledger, result.session_id))
    assert out["format_version"] == "1.2"
    _assert_subset(migrated, out)


@pytest.mark.parametrize(
    ("old", "new", "path", "marker"),
    [
        ("score: 7", "score: 17", "session.ideas[1].score", "score: 17"),
        ('slug: "feature-auth"', 'slug: "../etc/passwd"', "session.slug", "../etc/passwd"),
        ("  ems: 52\n", "", "session.ems", "session:"),
        ('timestamp: "2026-01-09T10:45:00Z"', 'timestamp: "yesterday"',
         "session.history[1].timestamp", "yesterday"),
        ('source: "auto"', 'source: "guess"', "session.techniques_history[0].source", "guess"),
    ],
)
def test_validation_names_path_and_line_and_writes_nothing(
    old: str, new: str, path: str, marker: str, sqlite_url: str,
) -> None:
    good = (FIXTURES / "seed_standard.yaml").read_text("utf-8")
    bad = good.replace(old, new, 1)
    assert bad != good
    line = next(i for i, text in enumerate(bad.splitlines(), 1) if marker in text)
    with Ledger(sqlite_url) as ledger:
        _import(ledger, good)
        before = ledger.max_notification_id()
        with pytest.raises(ImportValidationError) as info:
            import_session(ledger, bad, clock=FixedStepClock(), ids=SequentialIds("bad"))
        assert ledger.max_notification_id() == before
        assert len(ledger.session_ids()) == 1
    message = info.value.one_line()
    assert path in message
    assert f"(line {line})" in message


def test_bad_yaml_and_unknown_version_are_refused() -> None:
    with pytest.raises(ImportValidationError, match="not valid YAML at line 3"):
        parse_session_file("format_version: '1.2'\nsession: [unclosed\n")
    with pytest.raises(ImportValidationError, match="not supported"):
        parse_session_file("format_version: '0.9'\nsession: {}\n")
    with pytest.raises(ImportValidationError, match="session"):
        parse_session_file("format_version: '1.2'\n")


def test_run_session_export_is_deterministic_and_complete(tmp_path: Path) -> None:
    texts = []
    for i in range(2):
        with Ledger(str(tmp_path / f"l{i}.sqlite")) as ledger:
            agg = feature_auth(iterations=3, critique_scores=(30, 40))
            ledger.save(agg)
            texts.append(_export(ledger, str(agg.id)))
    assert texts[0] == texts[1]
    doc = yaml.safe_load(texts[0])
    s = doc["session"]
    assert s["id"] == "feature-auth-2026-01-09"
    assert s["slug"] == "feature-auth"
    assert s["status"] == "in_progress"
    assert s["phase"] == "convergent"
    assert s["iteration"] == 3
    assert [h["iteration"] for h in s["history"]] == [1, 2, 3]
    assert all(0 <= h["ems"] <= 100 for h in s["history"])
    assert [h["ems_delta"] for h in s["history"]] == [0] + [
        b["ems"] - a["ems"] for a, b in zip(s["history"], s["history"][1:], strict=False)
    ]
    assert s["history"][0]["questions"] == ["Question 1a?", "Question 1b?"]
    assert s["history"][0]["responses"] == ["Answer 1"]
    assert s["last_question"] == "Question 3b?"
    contents = [i["content"] for i in s["ideas"]]
    assert len(contents) == len(set(contents))
    assert "Clarify the token storage" in contents
    assert [i["id"] for i in s["ideas"]] == list(range(1, len(contents) + 1))
    assert all(0 <= i["score"] <= 10 for i in s["ideas"])
    assert doc.pop("ledger") == {"session_id": str(agg.id), "title": agg.state.topic.title}
    # the exported run session imports and exports again identically
    with Ledger(str(tmp_path / "again.sqlite")) as ledger:
        again = _export(ledger, _import(ledger, texts[0]))
        assert _export(ledger, _import(ledger, again, "y")) == again
    _assert_subset(doc, yaml.safe_load(again))


@pytest.mark.parametrize("mode", [Mode.PARTY, Mode.PANEL])
def test_party_and_panel_history_from_rounds(mode: Mode, sqlite_url: str) -> None:
    agg = feature_auth(iterations=1, mode=mode)
    with Ledger(sqlite_url) as ledger:
        ledger.save(agg)
        s = yaml.safe_load(_export(ledger, str(agg.id)))["session"]
    key = "party_history" if mode is Mode.PARTY else "panel_history"
    other = "panel_history" if mode is Mode.PARTY else "party_history"
    assert s[other] == []
    assert s[key.replace("history", "active")] is True
    rounds = s[key]
    if mode is Mode.PARTY:
        assert [r["round"] for r in rounds] == [1, 2]  # draft and critique
    else:
        assert [r["round"] for r in rounds] == [1, 2, 4]  # draft, critique and the vote
    critique = rounds[1]["contributions"]
    who = "persona" if mode is Mode.PARTY else "expert"
    assert [c[who] for c in critique] == ["Alice", "Bob", "Carol"]
    assert critique[0]["references"] == ["Bob"]  # "critique 1 by Alice, see Bob"
    if mode is Mode.PARTY:
        assert "Clarify the token storage" in critique[0]["key_points"]
        assert rounds[1]["synthesis"] == "synthesis 1"
        assert rounds[1]["user_question"] == "Question 1a?"
    else:
        assert rounds[1]["phase"] == "debate"
        assert rounds[0]["phase"] == "discussion"
        assert rounds[1]["synthesis"]["tensions"] == ["token storage"]
        assert critique[0]["position"] == "score 60/100: weak point 1"
        vote = rounds[2]
        assert vote["phase"] == "debate"
        assert [c["position"] for c in vote["contributions"]] == [
            "agree (80)", "agree (80)", "disagree (30)"]
        # the vote was counted while the token-storage dissent was still open
        assert vote["synthesis"] == {"convergent": [], "tensions": ["token storage"]}


def test_ledger_block_names_run_sessions_and_carries_the_seal(sqlite_url: str) -> None:
    agg = feature_auth(iterations=1)
    c = minute_clock()
    with Ledger(sqlite_url) as ledger:
        ledger.save(agg)
        unsealed = yaml.safe_load(_export(ledger, str(agg.id)))
    assert unsealed["ledger"] == {"session_id": str(agg.id), "title": agg.state.topic.title}
    agg.finish(SessionStatus.CONVERGED, at=c.now() + timedelta(hours=1))
    agg.seal(at=c.now() + timedelta(hours=2))
    with Ledger(sqlite_url) as ledger:
        ledger.save(agg)
        doc = yaml.safe_load(_export(ledger, str(agg.id)))
    assert doc["session"]["status"] == "completed"
    assert doc["ledger"]["session_id"] == str(agg.id)
    assert doc["ledger"]["root_hash"] == agg.state.seal["root_hash"]  # type: ignore[index]
    assert doc["ledger"]["events"] == agg.state.version - 1


def test_back_restores_iteration_and_prints_summary(sqlite_url: str) -> None:
    text = (FIXTURES / "seed_standard.yaml").read_text("utf-8")
    with Ledger(sqlite_url) as ledger:
        sid = _import(ledger, text)
        summary = go_back(ledger, sid, 1, clock=FixedStepClock(datetime(2026, 2, 1, tzinfo=UTC)))
        assert (summary.from_iteration, summary.to_iteration) == (3, 2)
        assert (summary.ems_before, summary.ems_after, summary.ems_delta) == (52, 38, -14)
        assert summary.questions == (
            "Comment gerer les sessions longues?", "Quelle strategie de refresh token?")
        doc = yaml.safe_load(_export(ledger, sid))["session"]
        assert doc["iteration"] == 2
        assert doc["ems"] == 38
        assert [h["iteration"] for h in doc["history"]] == [1, 2, 3]  # history kept
        with pytest.raises(InvariantViolation, match="iteration 1 is the earliest"):
            go_back(ledger, sid, 2, clock=FixedStepClock())
        events = ledger.max_notification_id()
        with pytest.raises(Exception, match="1 to 5"):
            go_back(ledger, sid, 6, clock=FixedStepClock())
        assert ledger.max_notification_id() == events
    text_out = summary.text()
    assert "Iteration: 3 → 2" in text_out
    assert "EMS: 52/100 → 38/100 (-14)" in text_out
    assert "Restored questions (iteration 2):" in text_out


def test_back_on_a_run_session_supersedes_rounds(sqlite_url: str) -> None:
    agg = feature_auth(iterations=3)
    with Ledger(sqlite_url) as ledger:
        ledger.save(agg)
        summary = go_back(ledger, str(agg.id), 2, clock=FixedStepClock(datetime(2026, 2, 1,
                                                                              tzinfo=UTC)))
        state = ledger.state(str(agg.id))
    assert summary.to_iteration == 1
    assert state.iteration == 1
    assert {r.iteration for r in state.active_rounds} == {1}
    assert summary.questions == ("Question 1a?", "Question 1b?")


def _write(directory: Path, name: str, status: str, updated: str, sid: str = "x") -> Path:
    p = directory / name
    p.write_text(yaml.safe_dump({"format_version": "1.2", "session": {
        "id": sid, "slug": "s", "status": status, "updated": updated}}))
    return p


def test_cleanup_removes_only_old_finished_exports(tmp_path: Path) -> None:
    now = datetime(2026, 3, 1, tzinfo=UTC)
    old = (now - timedelta(days=31)).isoformat().replace("+00:00", "Z")
    recent = (now - timedelta(days=5)).isoformat().replace("+00:00", "Z")
    files = {
        "old-done": _write(tmp_path, "old-done.yaml", "completed", old),
        "old-gone": _write(tmp_path, "old-gone.yaml", "abandoned", old),
        "old-live": _write(tmp_path, "old-live.yaml", "in_progress", old),
        "new-done": _write(tmp_path, "new-done.yaml", "completed", recent),
    }
    (tmp_path / "notes.yaml").write_text("- just a list\n")
    dry = cleanup(tmp_path, now=now, dry_run=True)
    assert sorted(i.path.name for i in dry) == ["old-done.yaml", "old-gone.yaml"]
    assert all(p.exists() for p in files.values())
    done = cleanup(tmp_path, now=now)
    assert all(i.removed for i in done)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "new-done.yaml", "notes.yaml", "old-live.yaml"]
    assert [i.path.name for i in cleanup(tmp_path, now=now, days=4)] == ["new-done.yaml"]


def test_export_never_overwrites_another_sessions_file(tmp_path: Path, sqlite_url: str) -> None:
    a = feature_auth(iterations=1, session_id=uuid.UUID(int=1))
    b = feature_auth(iterations=1, session_id=uuid.UUID(int=2),
                      c=FixedStepClock(datetime(2026, 1, 10, tzinfo=UTC)))
    with Ledger(sqlite_url) as ledger:
        ledger.save(a, b)
        pa = autosave(ledger, str(a.id), directory=tmp_path)
        pa_again = autosave(ledger, str(a.id), directory=tmp_path)
        pb = autosave(ledger, str(b.id), directory=tmp_path)
    assert pa == pa_again == tmp_path / "feature-auth.yaml"
    assert pb == tmp_path / f"feature-auth-{b.id.hex[:8]}.yaml"
    assert yaml.safe_load(pa.read_text())["session"]["id"] == "feature-auth-2026-01-09"
    assert yaml.safe_load(pb.read_text())["session"]["id"] == "feature-auth-2026-01-10"


def test_cli_import_export_back_cleanup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    store = str(tmp_path / "l.sqlite")
    res = runner.invoke(cli, ["import", str(FIXTURES / "seed_standard.yaml"), "--store", store,
                              "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["status"] == "in_progress"
    assert doc["iterations"] == 3
    res = runner.invoke(cli, ["export", doc["session_id"][:8], "--store", store, "--json"])
    assert res.exit_code == 0, res.output
    path = Path(json.loads(res.stdout)["path"])
    assert path == tmp_path / "brainstorm-sessions" / "feature-auth.yaml"  # beside the store
    _assert_subset(yaml.safe_load((FIXTURES / "seed_standard.yaml").read_text()),
                   yaml.safe_load(path.read_text()))
    res = runner.invoke(cli, ["back", doc["session_id"], "2", "--store", store, "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["to_iteration"] == 1
    res = runner.invoke(cli, ["cleanup", "--dry-run", "--store", store, "--json"])
    assert res.exit_code == 0
    assert json.loads(res.stdout)["files"] == []
    bad = tmp_path / "bad.yaml"
    bad.write_text((FIXTURES / "seed_standard.yaml").read_text().replace("ems: 52", "ems: 152"))
    proc = subprocess.run(
        [sys.executable, "-m", "forge_ledger", "import", str(bad), "--store", store],
        capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.count("\n") == 1
    assert "session.ems (line 9)" in proc.stderr


_text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=30)
_slug = st.from_regex(r"\A[a-z0-9]{1,8}(-[a-z0-9]{1,8}){0,3}\Z")
_ts = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1),
                   timezones=st.just(UTC)).map(lambda d: d.replace(microsecond=0))


@st.composite
def session_files(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(0, 4))
    history = [
        {"iteration": i + 1, "phase": draw(st.sampled_from(["divergent", "transition",
                                                             "convergent"])),
         "ems": draw(st.integers(0, 100)), "ems_delta": draw(st.integers(-100, 100)),
         "questions": draw(st.lists(_text, max_size=3)),
         "responses": draw(st.lists(_text, max_size=2)),
         "timestamp": draw(_ts).isoformat(), "duration": draw(st.none() | st.integers(0, 99))}
        for i in range(n)
    ]
    session = {
        "id": draw(_text.filter(bool)), "slug": draw(_slug),
        "status": draw(st.sampled_from(["in_progress", "completed", "abandoned"])),
        "phase": draw(st.sampled_from(["divergent", "transition", "convergent"])),
        "mode": draw(st.sampled_from(["standard", "party", "panel"])),
        "ems": draw(st.integers(0, 100)), "iteration": n,
        "techniques_used": draw(st.lists(st.sampled_from(["5whys", "moscow"]), max_size=2)),
        "techniques_history": [
            {"iteration": draw(st.integers(0, 5)), "technique_slug": slug, "category": "deep",
             "suggested_reason": draw(_text), "applied": draw(st.booleans()),
             "source": "auto", "weak_axes": draw(st.lists(_text, max_size=2))}
            for slug in draw(st.lists(st.sampled_from(["5whys", "six-hats"]), max_size=2))
        ],
        "ideas": [{"id": i + 1, "content": c, "score": draw(st.integers(0, 10))}
                  for i, c in enumerate(draw(st.lists(_text, max_size=3)))],
        "history": history,
        "last_question": draw(st.none() | _text),
        "created": draw(_ts).isoformat(), "updated": draw(_ts).isoformat(),
        "started_at": draw(_ts).isoformat(), "duration_minutes": draw(st.integers(0, 500)),
    }
    return {"format_version": "1.2", "session": session}


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(doc=session_files())
def test_generated_files_round_trip(doc: dict[str, Any], tmp_path: Path) -> None:
    text = yaml.safe_dump(doc, allow_unicode=True, sort_keys=False)
    with Ledger(str(tmp_path / f"{uuid.uuid4().hex}.sqlite")) as ledger:
        first = _export(ledger, _import(ledger, text, "g1"))
        assert _export(ledger, _import(ledger, first, "g2")) == first
    out = yaml.safe_load(first)["session"]
    for key in ("id", "slug", "status", "phase", "mode", "ems", "iteration", "ideas",
                "last_question", "duration_minutes"):
        if doc["session"][key] is not None:
            assert out[key] == doc["session"][key], key
    assert [h["iteration"] for h in out["history"]] == [
        h["iteration"] for h in doc["session"]["history"]]
    assert [h["questions"] for h in out["history"]] == [
        h["questions"] for h in doc["session"]["history"]]


def test_same_slug_same_day_sessions_get_their_own_files(sqlite_url: str, tmp_path: Path) -> None:
    """Two run sessions on one topic started the same day share a YAML ``session.id``; the
    second export must not overwrite the first session's file."""
    first = feature_auth(iterations=1, session_id=uuid.uuid4())
    second = feature_auth(iterations=1, session_id=uuid.uuid4())
    assert first.id != second.id
    with Ledger(sqlite_url) as ledger:
        ledger.save(first, second)
        a = write_export(ledger, str(first.id), directory=tmp_path)
        b = write_export(ledger, str(second.id), directory=tmp_path)
        again = write_export(ledger, str(first.id), directory=tmp_path)
    assert a != b
    assert again == a
    assert yaml.safe_load(a.read_text("utf-8"))["ledger"]["session_id"] == str(first.id)
    assert yaml.safe_load(b.read_text("utf-8"))["ledger"]["session_id"] == str(second.id)


def test_a_session_takes_the_plain_name_once_the_other_sessions_file_is_gone(
    sqlite_url: str, tmp_path: Path,
) -> None:
    """The file another session owns is remembered as another's (not parsed again at every
    export), yet once it is gone the next session to export takes the plain name and keeps
    it, and a file of a third session put there later is still never overwritten."""
    first, second, third = (
        feature_auth(iterations=1, session_id=uuid.uuid4()) for _ in range(3)
    )
    with Ledger(sqlite_url) as ledger:
        ledger.save(first, second, third)
        plain = write_export(ledger, str(first.id), directory=tmp_path)
        short = write_export(ledger, str(second.id), directory=tmp_path)
        assert write_export(ledger, str(second.id), directory=tmp_path) == short != plain
        plain.unlink()
        assert write_export(ledger, str(second.id), directory=tmp_path) == plain
        assert write_export(ledger, str(second.id), directory=tmp_path) == plain
        assert yaml.safe_load(plain.read_text("utf-8"))["ledger"]["session_id"] == str(second.id)
        plain.unlink()
        assert write_export(ledger, str(third.id), directory=tmp_path) == plain
        assert write_export(ledger, str(second.id), directory=tmp_path) == short
    assert yaml.safe_load(plain.read_text("utf-8"))["ledger"]["session_id"] == str(third.id)
