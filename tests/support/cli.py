"""Running the CLI in-process and reading what it printed (no tests here)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from forge_ledger.cli import main


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        main(list(args))
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


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


def write_participants(path: Path, url: str, names: tuple[str, ...]) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "participants": [
                    {
                        "name": n,
                        "model": f"openai/{n}",
                        "role": "generalist",
                        "api_base": url,
                        "price": {"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6},
                    }
                    for n in names
                ],
            },
        ),
        encoding="utf-8",
    )
    return path
