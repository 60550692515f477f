"""The store is found the way git finds a repository: ``--store``, then ``FORGE_LEDGER_STORE``,
then the nearest ``.project-memory/`` at or above the current directory, then the user-level
store; ``forge-ledger store`` says which rule chose it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from forge_ledger.ledger import store as store_module
from forge_ledger.ledger.store import StoreRule, find_project, find_store


def _cli(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "forge_ledger", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        check=False,
        env={**os.environ, **(env or {})},
    )


def _store_json(cwd: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, object]:
    proc = _cli("store", "--json", *args, cwd=cwd, env=env)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert isinstance(doc, dict)
    return doc


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project folder (its ``.project-memory/``) with a subfolder two levels down."""
    root = tmp_path / "project"
    (root / ".project-memory").mkdir(parents=True)
    (root / "src" / "deep").mkdir(parents=True)
    return root


@pytest.mark.slow
def test_a_run_in_a_subfolder_uses_the_projects_store(project: Path) -> None:
    sub = project / "src" / "deep"
    done = _cli("demo", "--latency", "0", "--json", cwd=sub)
    assert done.returncode == 0, done.stderr
    sid = json.loads(done.stdout)["session_id"]
    assert (project / ".project-memory" / "forge-ledger.sqlite").is_file()
    assert not (sub / ".project-memory").exists()
    listed = _cli("sessions", "--json", cwd=project / "src")
    assert listed.returncode == 0, listed.stderr
    assert [s["id"] for s in json.loads(listed.stdout)] == [sid]
    doc = _store_json(sub)
    assert doc["rule"] == "project"
    assert doc["store"] == str(project / ".project-memory" / "forge-ledger.sqlite")
    assert doc["exists"] is True
    assert doc["outputs"] == str(project / ".project-memory")
    assert str(sub) in str(doc["reason"])


def test_in_the_project_folder_itself_the_store_is_named_as_git_names_dot_git(
    project: Path,
) -> None:
    doc = _store_json(project)
    assert doc["store"] == ".project-memory/forge-ledger.sqlite"
    assert doc["path"] == str(project / ".project-memory" / "forge-ledger.sqlite")


def test_the_environment_beats_discovery_and_store_beats_the_environment(
    project: Path, tmp_path: Path
) -> None:
    env_store = str(tmp_path / "from-env.sqlite")
    doc = _store_json(project / "src", env={"FORGE_LEDGER_STORE": env_store})
    assert (doc["rule"], doc["store"]) == ("environment", env_store)
    given = str(tmp_path / "given.sqlite")
    doc = _store_json(project / "src", "--store", given, env={"FORGE_LEDGER_STORE": env_store})
    assert (doc["rule"], doc["store"]) == ("option", given)


@pytest.mark.slow
def test_with_no_store_anywhere_the_user_level_store_is_used_and_created(tmp_path: Path) -> None:
    """No project, no variable: the platform's user data folder (XDG on Linux), created by the
    first command that writes, and found again from any other folder."""
    home, xdg = tmp_path / "home", tmp_path / "xdg"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "FORGE_LEDGER_HOME"}
    env.update(HOME=str(home), XDG_DATA_HOME=str(xdg))
    elsewhere = tmp_path / "unrelated"
    elsewhere.mkdir()
    expected = xdg / "forge-ledger" / "forge-ledger.sqlite"
    run = subprocess.run(
        [sys.executable, "-m", "forge_ledger", "demo", "--latency", "0", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=elsewhere,
        check=False,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    assert expected.is_file()
    assert not (elsewhere / ".project-memory").exists()
    other = tmp_path / "another"
    other.mkdir()
    shown = subprocess.run(
        [sys.executable, "-m", "forge_ledger", "store", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=other,
        check=False,
        env=env,
    )
    doc = json.loads(shown.stdout)
    assert (doc["rule"], doc["store"], doc["exists"]) == ("user", str(expected), True)


@pytest.mark.slow
def test_store_prints_the_store_and_the_rule(project: Path) -> None:
    proc = _cli("store", cwd=project / "src")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == str(project / ".project-memory" / "forge-ledger.sqlite")
    assert lines[1].startswith("found by: project (the nearest .project-memory/ at or above ")
    assert lines[2] == "file: does not exist yet (a run or the demo creates it)"


@pytest.mark.slow
def test_a_read_with_nothing_found_names_the_store_and_how_it_is_found(tmp_path: Path) -> None:
    proc = _cli("sessions", cwd=tmp_path)
    assert proc.returncode != 0
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "no ledger at" in proc.stderr
    assert "forge-ledger store" in proc.stderr


def test_the_walk_stops_at_a_mount_boundary(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder on another filesystem than the start ends the walk, as git's does."""
    deep = project / "src" / "deep"
    assert find_project(deep) == project / ".project-memory"
    real = store_module._device  # noqa: SLF001 (the walk's one view of devices)
    monkeypatch.setattr(store_module, "_device", lambda p: -1 if p == project else real(p))
    assert find_project(deep) is None


def test_a_folder_that_cannot_be_searched_is_passed_over(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder the walk may not look into holds no project, and the walk goes on upward."""
    (project / "src" / ".project-memory").mkdir()
    blocked = project / "src" / ".project-memory"
    real_stat = os.stat

    def stat(path: object, *args: object, **kwargs: object) -> os.stat_result:
        if Path(str(path)) == blocked:
            raise PermissionError(13, "Permission denied", str(path))
        return real_stat(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store_module.os, "stat", stat)
    assert find_project(project / "src" / "deep") == project / ".project-memory"


def test_find_store_rules_in_order(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORGE_LEDGER_HOME", str(project.parent / "user"))
    assert find_store(cwd=project / "src").rule == StoreRule.PROJECT
    assert find_store(cwd=project.parent).rule == StoreRule.USER
    assert find_store(cwd=project.parent).location.path == project.parent / "user" / (
        "forge-ledger.sqlite"
    )
    monkeypatch.setenv("FORGE_LEDGER_STORE", "postgresql://u@h:5433/db")
    assert find_store(cwd=project).rule == StoreRule.ENVIRONMENT
    assert find_store("x.sqlite", cwd=project).rule == StoreRule.OPTION
