"""The demo's "next, try" hints name the program as it can be typed here: ``forge-ledger``
when the running executable is the one on PATH, else the path it was started by."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from forge_ledger.cli.demo import invoked_as


@pytest.fixture
def script(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    exe = bin_dir / "forge-ledger"
    exe.write_text("#!/bin/sh\n", "utf-8")
    exe.chmod(0o755)
    return exe


def test_on_path_the_hint_is_the_name(script: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}/usr/bin:/bin")
    assert invoked_as(str(script)) == "forge-ledger"


def test_off_path_the_hint_is_the_path_it_was_started_by(
    script: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.chdir(script.parent.parent.parent)
    assert invoked_as("venv/bin/forge-ledger") == "venv/bin/forge-ledger"


def test_another_forge_ledger_on_path_is_not_taken_for_this_one(
    script: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "forge-ledger").write_text("#!/bin/sh\n", "utf-8")
    (other / "forge-ledger").chmod(0o755)
    monkeypatch.setenv("PATH", f"{other}{os.pathsep}/usr/bin:/bin")
    assert invoked_as(str(script)) == str(script)


@pytest.mark.slow
def test_the_demo_started_by_its_venv_path_hints_that_path(tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "forge-ledger"
    env = {**os.environ, "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [str(exe), "demo", "--latency", "0", "--store", str(tmp_path / "s.sqlite")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    hints = [h for h in proc.stdout.split("next, try:\n", 1)[1].splitlines() if "  # " in h]
    assert len(hints) == 10
    assert all(h.startswith(f"  {exe} ") for h in hints), hints


def test_started_as_a_module_the_console_script_beside_the_interpreter_stands_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = Path(sys.executable).parent / "forge-ledger"
    assert script.is_file()
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert invoked_as("/somewhere/forge_ledger/__main__.py") == str(script)
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}/usr/bin:/bin")
    assert invoked_as("/somewhere/forge_ledger/__main__.py") == "forge-ledger"
