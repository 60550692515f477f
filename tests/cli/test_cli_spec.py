"""``forge-ledger spec`` and the files beside the store, through the real CLI (subprocesses of
the installed entry point, and ``main`` in process for the demo)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import support.stories
from forge_ledger.cli import main
from forge_ledger.domain.values import RoundKind
from forge_ledger.ledger import Ledger, resolve_store
from forge_ledger.ledger.outputs import store_outputs
from forge_ledger.records.spec import split_spec, write_spec
from support.stories import BuiltSession, contribution_text, priced_session


def forge(
    *args: str, cwd: Path, env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "forge_ledger", *args],
        capture_output=True, text=True, timeout=120, cwd=cwd, env=env, check=False,
    )


def run_main(*args: str) -> int:
    """The real entry point in process; its exit code."""
    try:
        main(list(args))
    except SystemExit as e:
        return int(e.code or 0)
    return 0


def one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: ")
    assert "Traceback" not in stderr
    return lines[0]


@pytest.fixture
def built(tmp_path: Path) -> tuple[str, BuiltSession]:
    store = str(tmp_path / "spec.sqlite")
    with Ledger(store, create=True) as ledger:
        session = priced_session(ledger, iterations=2, participants=3, converge=True)
    return store, session


def front(text: str) -> dict[str, Any]:
    header, _ = split_spec(text)
    doc = yaml.safe_load(header.split("\n---\n", 1)[0][4:])
    assert isinstance(doc, dict)
    return doc


def test_spec_at_iteration_one_is_iteration_ones_synthesis(
    built: tuple[str, BuiltSession], tmp_path: Path,
) -> None:
    store, s = built
    proc = forge("spec", s.prefix, "--at-iteration", "1", "--store", store, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    header, body = split_spec(proc.stdout)
    assert body == contribution_text(RoundKind.SYNTHESIS, "P1", 1)
    doc = front(proc.stdout)
    assert doc["iteration"] == 1
    assert doc["agreed"] is False
    assert doc["open_dissent"] == 1
    assert doc["position"] == s.iteration_end[1]
    assert doc["session_id"] == str(s.id)
    assert "**Not agreed.**" in header
    assert "div-1: burst size (iteration 1)" in header


def test_spec_json_is_the_latest_synthesis_byte_for_byte_and_agreed(
    built: tuple[str, BuiltSession], tmp_path: Path,
) -> None:
    store, s = built
    proc = forge("spec", s.prefix, "--store", store, "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["text"] == contribution_text(RoundKind.SYNTHESIS, "P1", 2)
    assert doc["agreed"] is True
    assert doc["status"] == "converged"
    assert doc["open_dissent"] == 0
    assert doc["source"]["kind"] == "synthesis"
    assert doc["source"]["participant"] == "P1"
    with Ledger(store) as ledger:
        assert doc["head_hash"] == ledger.state(s.id).head_hash


@pytest.mark.slow
def test_spec_provenance_json_traces_every_sentence(
    built: tuple[str, BuiltSession], tmp_path: Path,
) -> None:
    store, s = built
    proc = forge("spec", s.prefix, "--provenance", "--json", "--store", store, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert "".join(x["text"] for x in doc["sentences"]) == doc["text"]
    first = doc["sentences"][0]
    assert set(first["origin"]) == {"participant", "round", "kind", "iteration", "position"}
    # "Synthesis by P1 in iteration 2." rewrites iteration 1's first sentence (P1's draft).
    assert first["origin"]["kind"] == "draft"
    assert first["origin"]["participant"] == "P1"
    assert [r["contribution"]["kind"] for r in first["revisions"]][-1] == "synthesis"
    text = forge("spec", s.prefix, "--provenance", "--store", store, cwd=tmp_path)
    assert text.returncode == 0
    assert "Contributions:" in text.stdout
    assert "P1 · draft · round 1 · iteration 1" in text.stdout
    # numbered as things happened: the legend is a timeline
    legend = text.stdout.split("Contributions:\n", 1)[1]
    events = [int(m) for m in re.findall(r"^  \S+ .* · event (\d+)$", legend, flags=re.M)]
    assert len(events) >= 2
    assert events == sorted(events)
    answered = [int(m) for m in re.findall(r"^  ✓\S+ .*, event (\d+): ", legend, flags=re.M)]
    assert answered == sorted(answered)


@pytest.mark.slow
def test_spec_file_is_tied_to_the_chain(built: tuple[str, BuiltSession], tmp_path: Path) -> None:
    store, s = built
    out = tmp_path / "doc.md"
    proc = forge("spec", s.prefix, "--at-iteration", "1", "-o", str(out), "--store", store,
                 cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "", proc.stderr
    ok = forge("verify-export", str(out), "--store", store, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert f"matches the chain of {s.id}" in ok.stdout
    out.write_text(out.read_text().replace("Section A", "Section Z"), "utf-8")
    bad = forge("verify", "--export", str(out), "--store", store, cwd=tmp_path)
    assert bad.returncode == 1
    assert "differs from the document at event" in one_error_line(bad.stderr)


@pytest.mark.slow
def test_spec_diff_names_who_changed_each_hunk(
    built: tuple[str, BuiltSession], tmp_path: Path,
) -> None:
    store, s = built
    proc = forge("spec", s.prefix, "--diff", "--store", store, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "--- document at the end of iteration 1" in proc.stdout
    assert "-Synthesis by P1 in iteration 1." in proc.stdout
    assert "+Synthesis by P1 in iteration 2." in proc.stdout
    # P1's refinement proposed "Section A … after iteration 2", P1's synthesis wrote it.
    assert "changed by P1 (refinement, round 5, event" in proc.stdout
    assert "; P1 (synthesis, round 7, event" in proc.stdout
    as_json = forge("spec", s.prefix, "--diff", "1", "2", "--json", "--store", store, cwd=tmp_path)
    doc = json.loads(as_json.stdout)
    assert (doc["from_iteration"], doc["to_iteration"]) == (1, 2)
    assert doc["hunks"]
    assert all(c["iteration"] == 2 for h in doc["hunks"] for c in h["changed_by"])


@pytest.mark.slow
def test_spec_diff_is_a_patch_that_patch_applies(
    built: tuple[str, BuiltSession], tmp_path: Path,
) -> None:
    """The annotations ride on the ``@@`` lines, so ``patch`` turns iteration 1's document
    into iteration 2's byte for byte."""
    store, s = built
    _assert_patch_applies(store, s.prefix, tmp_path)


@pytest.mark.slow
def test_spec_diff_lines_end_at_newlines_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A line separator or a form feed inside a model's line is part
    of the line for ``patch``, so it is for the diff too."""
    plain = support.stories.contribution_text
    monkeypatch.setattr(support.stories, "contribution_text", lambda *a: plain(*a).replace(
        "Section A:", "Section A:\u2028 \x0c"))
    store = str(tmp_path / "separators.sqlite")
    with Ledger(store, create=True) as ledger:
        s = priced_session(ledger, iterations=2, participants=3, converge=True)
    _assert_patch_applies(store, s.prefix, tmp_path)


def _assert_patch_applies(store: str, prefix: str, tmp_path: Path) -> None:
    texts = []
    for k in (1, 2):
        got = forge("spec", prefix, "--at-iteration", str(k), "--json", "--store", store,
                    cwd=tmp_path)
        texts.append(json.loads(got.stdout)["text"])
    assert texts[0] != texts[1]
    diff = forge("spec", prefix, "--diff", "1", "2", "--store", store, cwd=tmp_path)
    assert diff.returncode == 0, diff.stderr
    assert "@@ answers" not in diff.stdout
    doc = tmp_path / "doc.md"
    doc.write_bytes(texts[0].encode("utf-8"))
    applied = subprocess.run(["patch", str(doc)], input=diff.stdout.encode("utf-8"),
                             capture_output=True, check=False)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert doc.read_bytes().decode("utf-8") == texts[1]


@pytest.mark.slow
def test_spec_mistakes_are_one_line(built: tuple[str, BuiltSession], tmp_path: Path) -> None:
    store, s = built
    for args in (
        ("--at-iteration", "9"),
        ("--at-iteration", "1", "--at-event", "3"),
        ("--diff", "7"),
        ("--diff", "x"),
        ("--at-event", "1"),  # before any draft: no document yet
    ):
        proc = forge("spec", s.prefix, *args, "--store", store, cwd=tmp_path)
        assert proc.returncode == 2, args
        one_error_line(proc.stderr)
        assert proc.stdout == ""


@pytest.mark.slow
def test_demo_writes_the_document_beside_the_store_and_nothing_in_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    store = tmp_path / "ledger" / "demo.sqlite"
    assert run_main("demo", "--latency", "0.01", "--store", str(store), "--json") == 0
    sid = json.loads(capsys.readouterr().out)["session_id"]
    assert list(cwd.iterdir()) == []
    [spec] = (store.parent / "specs").iterdir()
    [export] = (store.parent / "brainstorm-sessions").iterdir()
    assert spec.name == export.name.replace(".yaml", ".md")
    doc = front(spec.read_text("utf-8"))
    assert doc["session_id"] == sid
    assert doc["status"] == "converged"
    assert doc["agreed"] is True
    assert run_main("verify-export", str(spec), "--store", str(store)) == 0


def test_outputs_of_a_sqlite_store_are_beside_it(tmp_path: Path) -> None:
    out = store_outputs(resolve_store(str(tmp_path / "a" / "team.sqlite")))
    assert out.home == tmp_path / "a"
    assert out.views == tmp_path / "a" / "team.views.sqlite"
    assert out.exports == tmp_path / "a" / "brainstorm-sessions"
    assert out.specs == tmp_path / "a" / "specs"


@pytest.mark.postgres
@pytest.mark.slow
def test_outputs_of_a_postgres_store_go_under_home(pg_url: str, tmp_path: Path) -> None:
    with Ledger(pg_url, create=True) as ledger:
        s = priced_session(ledger, iterations=1, participants=2)
    home = tmp_path / "home"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    schema = pg_url.rsplit("schema=", 1)[1]
    where = home / f"postgres-127.0.0.1-5432-test-{schema}"
    proc = forge("--home", str(home), "export", s.prefix, "--store", pg_url, "--json", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    assert Path(json.loads(proc.stdout)["path"]).parent == where / "brainstorm-sessions"
    env = {**os.environ, "FORGE_LEDGER_HOME": str(home)}
    views = forge("projections", "update", "--store", pg_url, cwd=cwd, env=env)
    assert views.returncode == 0, views.stderr
    assert (where / "forge-ledger.views.sqlite").is_file()
    report = forge("--home", str(home), "report", s.prefix, "--store", pg_url, "--json", cwd=cwd)
    assert report.returncode == 0, report.stderr
    assert Path(json.loads(report.stdout)["path"]).parent == where / "reports"
    assert list(cwd.iterdir()) == []


def test_cleanup_removes_old_finished_exports_and_documents_beside_the_store(
    built: tuple[str, BuiltSession], tmp_path: Path,
) -> None:
    store, s = built  # converged, with events dated 2026-01-01
    with Ledger(store) as ledger:
        spec = write_spec(ledger, ledger.state(s.id))
    assert spec == tmp_path / "specs" / "design-a-rate-limiter.md"
    exported = forge("export", s.prefix, "--store", store, "--json", cwd=tmp_path)
    export = Path(json.loads(exported.stdout)["path"])
    assert export == tmp_path / "brainstorm-sessions" / "design-a-rate-limiter.yaml"
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = forge("cleanup", "--days", "30", "--store", store, "--json", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    removed = {Path(f["path"]) for f in json.loads(proc.stdout)["files"] if f["removed"]}
    assert removed == {export, spec}
    assert not export.exists()
    assert not spec.exists()


@pytest.mark.slow
def test_outputs_are_created_with_the_same_mode(
    built: tuple[str, BuiltSession], tmp_path: Path,
) -> None:
    """The report, the document and the export are files like any the user makes: the umask
    decides their mode, for all three alike."""
    store, s = built
    umask = os.umask(0o022)
    try:
        outs = {
            "report": forge("report", s.prefix, "--store", store, "--json", cwd=tmp_path),
            "export": forge("export", s.prefix, "--store", store, "--json", cwd=tmp_path),
        }
        doc = tmp_path / "doc.md"
        spec = forge("spec", s.prefix, "-o", str(doc), "--store", store, cwd=tmp_path)
    finally:
        os.umask(umask)
    assert spec.returncode == 0, spec.stderr
    paths = [doc]
    for name, proc in outs.items():
        assert proc.returncode == 0, f"{name}: {proc.stderr}"
        paths.append(Path(json.loads(proc.stdout)["path"]))
    assert {p.stat().st_mode & 0o777 for p in paths} == {0o644}
    assert not [p for p in paths[0].parent.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.slow
def test_spec_output_dash_prints_the_document(built: tuple[str, BuiltSession],
                                              tmp_path: Path) -> None:
    store, s = built
    printed = forge("spec", s.prefix, "--store", store, cwd=tmp_path)
    dashed = forge("spec", s.prefix, "-o", "-", "--store", store, cwd=tmp_path)
    assert dashed.returncode == 0, dashed.stderr
    assert dashed.stdout == printed.stdout
    assert not (tmp_path / "-").exists()
