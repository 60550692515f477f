"""Every shell example of the tutorial runs, as printed, against a fresh offline demo.

The examples were captured from real runs, each with its own session ids. A session named in an
example is the demo's session here, unless an earlier example's output created it (a fork): the
id the documented output printed then stands for the id the real output printed. Each example
must exit as the page implies (an ``error:`` line in its output: non-zero; otherwise 0) and
print the first line of its documented output, with ids, hashes, times and figures read as
wildcards.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

TUTORIAL = Path(__file__).resolve().parents[2] / "docs" / "tutorial.md"
UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")
PREFIX = re.compile(r"^[0-9a-f]{4,12}$")
NEEDS_SETUP = {"tampered.sqlite", "damaged.sqlite"}
"""Files an example names that the tutorial makes by hand (a store altered on purpose)."""


@dataclass
class Example:
    command: str
    output: list[str]


def examples(text: str) -> list[Example]:
    """The ``$ forge-ledger …`` lines of the page's text blocks, each with its output."""
    found: list[Example] = []
    fence = False
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("```"):
            fence = not fence
            continue
        if not fence:
            continue
        if line.startswith("$ "):
            found.append(Example(line[2:], []))
        elif found and line and line != "…":
            found[-1].output.append(line)
    return [e for e in found if e.command.startswith("forge-ledger ")]


def _pattern(line: str) -> re.Pattern[str]:
    """A documented line as a pattern: ids, hex, numbers and times match any value."""
    out = []
    for token in re.split(r"(\s+)", line):
        if re.fullmatch(r"\s+", token):
            out.append(r"\s+")
        elif re.search(r"\d|[0-9a-f]{6,}", token):
            out.append(r"\S+")
        else:
            out.append(re.escape(token))
    return re.compile("".join(out))


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    where = tmp_path_factory.mktemp("tutorial")
    (where / ".project-memory").mkdir()  # a project folder, as the tutorial's reader works in
    proc = subprocess.run(
        [sys.executable, "-m", "forge_ledger", "demo", "--latency", "0", "--json"],
        capture_output=True, text=True, timeout=300, cwd=where, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return where, str(json.loads(proc.stdout)["session_id"])


@pytest.mark.slow
def test_every_tutorial_example_runs_as_printed(demo: tuple[Path, str]) -> None:
    where, session = demo
    found = examples(TUTORIAL.read_text(encoding="utf-8"))
    assert len(found) >= 4, "the tutorial shows its commands as '$ forge-ledger …' examples"
    known: dict[str, str] = {}
    skipped = []
    for ex in found:
        words = shlex.split(ex.command.split(" > ")[0])
        if NEEDS_SETUP & set(words):
            skipped.append(ex.command)
            continue
        args = [_real(w, known, session) for w in words[1:]]
        proc = subprocess.run(
            [sys.executable, "-m", "forge_ledger", *args],
            capture_output=True, text=True, timeout=300, cwd=where, check=False,
        )
        failing = any(line.startswith("error:") for line in ex.output)
        assert (proc.returncode != 0) == failing, f"{ex.command}: {proc.returncode}\n{proc.stderr}"
        printed = (proc.stdout + proc.stderr).splitlines()
        if ex.output:
            first = _pattern(ex.output[0])
            assert any(first.match(p.strip()) for p in printed), (
                f"{ex.command}: no line like {ex.output[0]!r} in\n{proc.stdout}{proc.stderr}")
        _learn(ex.output, printed, known)
    assert len(found) - len(skipped) >= 4, skipped


def _real(word: str, known: dict[str, str], session: str) -> str:
    if not PREFIX.fullmatch(word):
        return word
    for doc_id, real in known.items():
        if doc_id.startswith(word):
            return real
    return session


def _learn(documented: list[str], printed: list[str], known: dict[str, str]) -> None:
    """Ids the page printed on a line of their own are the ids the real run printed there."""
    doc_ids = [line for line in documented if UUID.fullmatch(line)]
    real_ids = [line.strip() for line in printed if UUID.fullmatch(line.strip())]
    for doc_id, real in zip(doc_ids, real_ids, strict=False):
        known.setdefault(doc_id, real)
