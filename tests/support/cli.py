"""Running the CLI and reading what it printed (no tests here).

``run_cli`` calls its entry point in this process (fast; output through ``capsys``);
``run_console`` runs the installed ``forge-ledger`` console script as a child process (its exit
code, streams and file permissions as a user gets them).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from forge_ledger.cli import main

CONSOLE_SCRIPT = str(Path(sys.executable).parent / "forge-ledger")
NOBODY = 65534


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        main(list(args))
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def unprivileged_prefix() -> list[str]:
    """Run a command as ``nobody`` when the tests run as root (root ignores permissions, so a
    read-only file would not be read-only for it)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv (util-linux) is needed to drop root privileges in this test"
    return [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


def run_console(
    *args: str,
    cwd: Path | None = None,
    unprivileged: bool = False,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``forge-ledger ARGS`` in a child process (as ``nobody`` if ``unprivileged``)."""
    prefix = unprivileged_prefix() if unprivileged else []
    return subprocess.run(
        [*prefix, CONSOLE_SCRIPT, *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        check=False,
        env={**os.environ, **(env or {})},
    )


def console_json(*args: str) -> Any:
    """``forge-ledger ARGS --json`` in a child process, which must succeed; its JSON."""
    done = run_console(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def console_demo(store: Path) -> uuid.UUID:
    """The four-voices demo (``forge-ledger demo``, a child process) into ``store``."""
    doc = console_json("demo", "--latency", "0", "--store", str(store))
    return uuid.UUID(doc["session_id"])


def one_json(out: str) -> dict[str, Any]:
    doc = json.loads(out)  # raises if stdout holds anything but one JSON document
    assert isinstance(doc, dict)
    return doc


def assert_one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert "Traceback" not in err
    return lines[0]


def write_participants(
    path: Path,
    url: str,
    names: tuple[str, ...],
    *,
    roles: tuple[str, ...] | None = None,
    models: dict[str, str] | None = None,
) -> Path:
    """A participants file: each of ``names`` on ``openai/NAME`` (unless ``models`` says
    otherwise) at ``url``, priced, a generalist unless ``roles`` gives its role."""
    people = [
        {
            "name": n,
            "model": (models or {}).get(n, f"openai/{n}"),
            "role": roles[i] if roles else "generalist",
            "api_base": url,
            "price": {"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6},
        }
        for i, n in enumerate(names)
    ]
    path.write_text(yaml.safe_dump({"participants": people}), encoding="utf-8")
    return path
