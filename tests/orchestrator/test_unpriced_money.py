"""Money that is not known is never shown as zero, and a budget too small for the first call
is refused before anything is recorded: the real CLI in child processes, against the shipped
fake OpenAI server (its model names have no price in litellm's table)."""

from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path

import pytest

from forge_ledger.testing import FakeOpenAIServer
from support.cli import console_json, run_console

ZERO = "$0.0000"


@pytest.mark.slow
def test_unpriced_calls_are_unpriced_in_every_output(
    ana_and_ben: list[str], tmp_path: Path,
) -> None:
    store = str(tmp_path / "s.sqlite")
    run = run_console("run", "Retry policy", *ana_and_ben, "--store", store)
    assert run.returncode == 0, run.stderr
    assert "cost unpriced" in run.stdout
    assert ZERO not in run.stdout + run.stderr
    sid = console_json("sessions", "--store", store)[0]["id"]
    shown = console_json("show", sid, "--store", store)
    calls = sum(len(r["contributions"]) for r in shown["rounds"])
    assert shown["cost_usd"] is None
    assert shown["unpriced_calls"] == calls > 0
    assert shown["cost_complete"] is False
    assert shown["priced_cost_usd"] == 0.0
    for r in shown["rounds"]:
        for c in r["contributions"]:
            assert c["cost_usd"] is None
            assert c["unpriced_calls"] == 1
    show = run_console("show", sid, "--store", store)
    assert "unpriced" in show.stdout
    assert ZERO not in show.stdout
    audit = console_json("audit", sid, "--store", store)
    assert audit["total"]["cost_usd"] is None
    assert audit["total"]["unpriced_calls"] == calls
    assert audit["total"]["cost_complete"] is False
    for row in audit["usage_by_participant"] + audit["usage_by_round"]:
        assert row["cost_usd"] is None
        assert row["cost_complete"] is False
    markdown = run_console("audit", sid, "--markdown", "--store", store)
    assert markdown.returncode == 0, markdown.stderr
    assert ZERO not in markdown.stdout
    assert re.search(r"out tokens, unpriced, \d+ failed call", markdown.stdout)
    page = tmp_path / "report.html"
    done = run_console("report", sid, "--store", store, "-o", str(page))
    assert done.returncode == 0, done.stderr
    html = page.read_text(encoding="utf-8")
    assert ZERO not in html
    assert "<dd>unpriced ·" in html
    summary = console_json("resume", sid, "--store", store)
    assert summary["cost_usd"] is None
    assert summary["unpriced_calls"] == calls
    assert summary["cost_complete"] is False


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _tiny_budget(ana_and_ben: list[str], store: Path) -> subprocess.CompletedProcess[str]:
    return run_console(
        "run", "Retry policy", *ana_and_ben,
        "--price", "openai/ana=10:30", "--price", "openai/ben=10:30",
        "--max-cost", "0.0001", "--store", str(store),
    )


@pytest.mark.slow
def test_a_budget_below_the_first_calls_worst_case_is_refused_before_recording(
    fake_openai: FakeOpenAIServer, ana_and_ben: list[str], tmp_path: Path,
) -> None:
    store = tmp_path / "s.sqlite"
    done = _tiny_budget(ana_and_ben, store)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    found = re.fullmatch(
        r"error: --max-cost 0\.0001 is below the worst case of the first call "
        r"\(\$(\d+\.\d{4}): ana's draft\), so no model could be called; "
        r"give --max-cost (\d+\.\d{4}) or more",
        lines[0],
    )
    assert found is not None, lines[0]
    assert float(found.group(2)) >= float(found.group(1)) > 0.0001
    assert not store.exists()
    assert fake_openai.requests == []
    # an existing store is left byte for byte as it was
    ok = run_console(
        "run", "Another topic", *ana_and_ben, "--store", str(store), "--max-rounds", "1",
    )
    assert ok.returncode == 0, ok.stderr
    before = _digest(store)
    fake_openai.clear_requests()
    assert _tiny_budget(ana_and_ben, store).returncode == 2
    assert _digest(store) == before
    assert fake_openai.requests == []
    # the minimum it names is enough: the session makes its first call
    minimum = found.group(2)
    enough = run_console(
        "run", "Retry policy", *ana_and_ben, "--price", "openai/ana=10:30",
        "--price", "openai/ben=10:30", "--max-cost", minimum, "--store", str(store), "--json",
    )
    assert enough.returncode == 0, enough.stderr
    assert any(r.model == "ana" for r in fake_openai.requests)
