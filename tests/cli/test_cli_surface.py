"""The command line as a new user meets it: piped output, hostile text, help and defaults,
validation before anything is recorded, prices, resume's progress and ``browse``.

A session is recorded once per module by the real orchestrator, the real litellm client and
the fake OpenAI-compatible server; its texts carry Rich markup (``[red]``, ``[link=…]``,
``[/]``) and a long concern. The read commands then run as real subprocesses of the console
script, so stdout is a pipe exactly as in ``forge-ledger trail S | grep …``.
"""

from __future__ import annotations

import json
import os
import pty
import re
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forge_ledger.domain.values import SessionConfig
from forge_ledger.ledger import Ledger
from forge_ledger.testing import FakeOpenAIServer
from support.cli import assert_one_error_line, one_json, run_cli, write_participants
from support.orchestrator import opinion_json, voice, vote_json

CONSOLE_SCRIPT = str(Path(sys.executable).parent / "forge-ledger")
HOSTILE = "[red]alarm[/red] [link=https://evil.example]click[/link] [/] [bold]"
LONG = "retention " + " ".join(f"clause{i}" for i in range(40)) + " END-OF-CONCERN"
CONCERN = f"{HOSTILE} {LONG}"
NAMES = ("ana", "ben", "cleo", "dov")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\]8;[^\x1b]*\x1b\\")


def _script() -> dict[str, Any]:
    script = {n: voice(n) for n in NAMES[:-1]}
    script["ana"] = voice("ana", before=[
        {"match": "· draft ·", "content": f"# Plan {HOSTILE}\n\nDraft text {HOSTILE}."}])
    script["dov"] = voice(
        "dov",
        vote=vote_json(False, "disagree", 40, [CONCERN]),
        before=[
            {"match": "· convergence · iteration 1",
             "content": vote_json(False, "strongly_disagree", 30, [CONCERN])},
            {"match": "· refinement ·", "content": opinion_json("disagree", [CONCERN], [CONCERN])},
        ],
    )
    return script


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120,
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CONSOLE_SCRIPT, *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, cwd=cwd)


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sessions run here write their YAML exports under the current directory: keep them out
    of the checkout."""
    monkeypatch.chdir(tmp_path)


class Recorded:
    def __init__(self, store: str, session_id: str, pfile: Path, url: str) -> None:
        self.store, self.session_id, self.pfile, self.url = store, session_id, pfile, url


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    """An attended session paused on dov's strong dissent, then its export and read model."""
    tmp = tmp_path_factory.mktemp("surface")
    with FakeOpenAIServer(_script()) as server:
        pfile = write_participants(tmp / "p.yaml", server.url, NAMES)
        store = str(tmp / "team.sqlite")
        proc = cli("run", f"Retries {HOSTILE}", "--participants", str(pfile), "--attended",
                   "--store", store, "--json", cwd=tmp)
        assert proc.returncode == 0, proc.stderr
        doc = json.loads(proc.stdout)
        assert doc["status"] == "paused"
        yield Recorded(store, doc["session_id"], pfile, server.url)


# --------------------------------------------------------------------------- 14.1 / 14.2


@pytest.mark.parametrize("command", [
    ["show"], ["log"], ["trail"], ["dissent", "--all"], ["audit"], ["audit", "--json"],
    ["spec", "--provenance"], ["sessions"],
])
@pytest.mark.slow
def test_a_reader_that_went_away_is_not_a_failure(recorded: Recorded, command: list[str]) -> None:
    """``forge-ledger trail S | head -1``: the reader closes the pipe early. The command ends
    quietly with exit 0, whether it printed with Rich or with click. The pipe's read end is
    closed before the command starts, so its first write meets the broken pipe every time."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    args = [command[0]] if command[0] == "sessions" else [command[0], recorded.session_id]
    try:
        proc = subprocess.run([CONSOLE_SCRIPT, *args, *command[1:], "--store", recorded.store],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120,
                              check=False)
    finally:
        os.close(write_end)
    assert (proc.returncode, proc.stderr) == (0, "")


@pytest.mark.parametrize("command", [
    ["show"], ["log"], ["trail"], ["dissent", "--all"], ["audit"], ["audit", "--markdown"],
])
def test_piped_output_is_plain_whole_and_prints_markup_as_typed(
    recorded: Recorded, command: list[str],
) -> None:
    proc = cli(command[0], recorded.session_id, *command[1:], "--store", recorded.store)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "\x1b[" not in out  # no styling on a pipe
    assert not re.search(r"[┏┃━│└─]", out)  # no box drawing
    if command[0] in ("show", "audit"):
        assert HOSTILE in out  # the topic's title, markup printed as typed
    if command[0] in ("trail", "audit"):
        assert CONCERN in out  # every character of the concern, markup included
    if command[0] == "dissent":
        with Ledger(recorded.store, create=False) as ledger:
            topics = [d.topic for d in ledger.state(recorded.session_id).divergences]
        assert topics
        assert all(f"\t{t}\t" in out for t in topics)
        assert "\tstrongly_disagree\t" not in out
        assert "dov: strongly_disagree;" in out
    if command[0] == "log":
        rows = [ln.split("\t") for ln in out.splitlines()[2:]]
        assert rows
        assert all(len(r) == 5 for r in rows)
        assert {"ContributionRecorded", "DivergenceDetected"} <= {r[2] for r in rows}


def test_on_a_terminal_markup_in_stored_text_is_printed_not_obeyed(recorded: Recorded) -> None:
    for command in (["trail"], ["show"]):
        proc = cli(command[0], recorded.session_id, *command[1:], "--store", recorded.store,
                   env={"TTY_COMPATIBLE": "1", "COLUMNS": "400", "TTY_INTERACTIVE": "0"})
        assert proc.returncode == 0, proc.stderr
        plain = ANSI.sub("", proc.stdout)
        assert "┃" in plain or "│" in plain or command[0] == "show"  # Rich rendered it
        assert "[red]alarm[/red]" in plain
        assert "[/]" in plain
        assert "\x1b]8;" not in proc.stdout  # no hyperlink was created by [link=…]


@pytest.mark.usefixtures("recorded")
@pytest.mark.slow
def test_attended_prompt_shows_the_divergence_id(tmp_path: Path) -> None:
    """The interactive prompt (stdin a terminal) prints ``[d…]`` ids that --overrule needs."""
    store = str(tmp_path / "attended.sqlite")
    with FakeOpenAIServer(_script()) as server:
        pfile = write_participants(tmp_path / "p.yaml", server.url, NAMES)
        leader, follower = pty.openpty()
        try:
            os.write(leader, b"\n")  # an empty answer: stop at the first pause
            proc = subprocess.run(
                [CONSOLE_SCRIPT, "run", "Prompted", "--participants", str(pfile),
                 "--attended", "--store", store],
                stdin=follower, capture_output=True, text=True, timeout=120,
            )
        finally:
            os.close(leader)
            os.close(follower)
    assert proc.returncode == 0, proc.stderr
    with Ledger(store, create=False) as ledger:
        (summary,) = ledger.summaries()
        ids = [d.id for d in ledger.state(summary.id).open_divergences]
    assert ids
    assert "questions for you" in proc.stderr
    for divergence_id in ids:
        assert f"[{divergence_id}]" in proc.stderr


# --------------------------------------------------------------------------- 14.4


def test_run_help_shows_every_default_from_session_config() -> None:
    proc = cli("run", "--help", env={"COLUMNS": "200"})
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    defaults = SessionConfig()
    for option, value in (
        ("--max-rounds", defaults.max_rounds),
        ("--max-cost", defaults.max_cost_usd),
        ("--max-time", defaults.max_time_secs),
        ("--threshold", defaults.convergence_threshold),
        ("--min-consensus", defaults.min_consensus),
        ("--max-concurrency", defaults.max_concurrency),
        ("--max-tokens", defaults.max_tokens),
        ("--max-attempts", defaults.max_attempts),
        ("--call-timeout", defaults.call_timeout_secs),
    ):
        assert re.search(rf"{option} \S+ [^\[]+\[default: {re.escape(str(value))}\]", text), option
    # every option is described
    for line in proc.stdout.splitlines():
        if line.startswith("  -"):
            assert len(line.split(None, 2)) >= 2


def test_bare_command_prints_help_and_succeeds() -> None:
    proc = cli()
    assert proc.returncode == 0
    assert proc.stdout.startswith("Usage: forge-ledger")
    assert "error" not in proc.stderr


def test_at_iteration_error_states_the_range(recorded: Recorded) -> None:
    proc = cli("show", recorded.session_id, "--at-iteration", "9", "--store", recorded.store)
    assert proc.returncode == 2
    line = assert_one_error_line(proc.stderr)
    assert "no iteration 9" in line
    assert "iteration 1 only" in line


def test_call_settings_reach_the_session_config(
    fake_openai: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    fake_openai.set_script({"ana": voice("ana"), "ben": voice("ben")})
    store = str(tmp_path / "s.sqlite")
    code, out, err = run_cli(
        capsys, "run", "Settings", "-m", "openai/ana", "-m", "openai/ben", "--api-base",
        fake_openai.url, "--max-concurrency", "1", "--max-tokens", "777", "--max-attempts",
        "2", "--call-timeout", "45", "--store", store, "--json",
    )
    assert code == 0, err
    with Ledger(store) as ledger:
        config = ledger.state(one_json(out)["session_id"]).config
    assert (config.max_concurrency, config.max_tokens, config.max_attempts,
            config.call_timeout_secs) == (1, 777, 2, 45.0)
    assert {r.body.get("max_tokens") for r in fake_openai.requests} == {777}


# --------------------------------------------------------------------------- 14.5 / 8.9


@pytest.mark.parametrize(("args", "expected"), [
    (["--max-cost", "0"], ["--max-cost 0 allows no model call"]),
    (["--min-consensus", "3"], ["--min-consensus 3 is more than the 2 participant(s)"]),
    (["--api-base", "notaurl"], ["api_base 'notaurl' (of ana, ben) is not a URL"]),
    (["--max-cost", "1"], ["ana (openai/ana): no known price", "ben (openai/ben): no known"]),
])
@pytest.mark.slow
def test_contradictions_are_refused_before_anything_is_recorded(
    tmp_path: Path, args: list[str], expected: list[str],
) -> None:
    store = tmp_path / "never.sqlite"
    models = ["-m", "openai/ana", "-m", "openai/ben"]
    base = [] if "--api-base" in args else ["--api-base", "http://127.0.0.1:9/v1"]
    proc = cli("run", "Refused", *models, *base, *args, "--store", str(store))
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert all(ln.startswith("error: ") for ln in lines)
    assert "Traceback" not in proc.stderr
    for text in expected:
        assert sum(text in ln for ln in lines) == 1, proc.stderr
    assert len(lines) == len(expected) + (len(expected) > 1)  # + "nothing was recorded"
    assert not store.exists()


@pytest.mark.slow
def test_too_many_participants_are_refused_before_the_store_is_made(tmp_path: Path) -> None:
    store = tmp_path / "never.sqlite"
    models = [arg for i in range(33) for arg in ("-m", f"openai/p{i}")]
    proc = cli("run", "Crowded", *models, "--api-base", "http://127.0.0.1:9/v1",
               "--store", str(store))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "33 participants is more than a session takes (32)" in proc.stderr
    assert not store.exists()


@pytest.mark.slow
def test_missing_keys_reported_through_litellm_one_line_each(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY",
                        "GOOGLE_API_KEY")}
    store = tmp_path / "never.sqlite"
    proc = subprocess.run(
        [CONSOLE_SCRIPT, "run", "Keys", "-m", "gpt-4o-mini", "-m",
         "anthropic/claude-3-5-haiku-20241022", "-m", "gemini/gemini-1.5-pro",
         "--store", str(store)],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("error: gpt-4o-mini: ")
    assert "(anthropic/claude-3-5-haiku-20241022)" in lines[1]
    assert "(gemini/gemini-1.5-pro)" in lines[2]
    assert "OPENAI_API_KEY is not set" in lines[0]
    assert "ANTHROPIC_API_KEY is not set" in lines[1]
    assert "GEMINI_API_KEY" in lines[2]
    assert lines[3] == "error: nothing was recorded"
    assert len(lines) == 4
    assert not store.exists()


def test_price_option_lets_the_budget_bind(
    fake_openai: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    fake_openai.set_script({"ana": voice("ana"), "ben": voice("ben")})
    store = str(tmp_path / "priced.sqlite")
    code, out, err = run_cli(
        capsys, "run", "Priced", "-m", "openai/ana", "-m", "openai/ben", "--api-base",
        fake_openai.url, "--max-cost", "1", "--price", "openai/ana=3:15", "--price",
        "openai/ben=1:2", "--store", store,
    )
    assert code == 0, err
    assert "unpriced" not in out + err
    with Ledger(store) as ledger:
        (summary,) = ledger.summaries()
        state = ledger.state(summary.id)
    prices = {c.participant: c.response.price for r in state.rounds for c in r.contributions}
    assert prices["ana"] is not None
    assert prices["ana"].input_cost_per_token == pytest.approx(3e-6)
    assert prices["ben"] is not None
    assert prices["ben"].output_cost_per_token == pytest.approx(2e-6)
    assert f"cost ${state.cost_usd:.4f}" in out
    assert state.cost_usd > 0


def test_allow_unpriced_runs_and_shows_unpriced_not_zero(
    fake_openai: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    fake_openai.set_script({"ana": voice("ana"), "ben": voice("ben")})
    store = str(tmp_path / "unpriced.sqlite")
    code, out, err = run_cli(
        capsys, "run", "Unpriced", "-m", "openai/ana", "-m", "openai/ben", "--api-base",
        fake_openai.url, "--max-cost", "1", "--allow-unpriced", "--store", store,
    )
    assert code == 0, err
    assert "$0.0000" not in out + err
    assert "cost unpriced" in out  # the outcome line
    assert re.search(r"ana: done, \d+ tokens, unpriced", err)  # per participant
    assert "done · session cost unpriced" in err  # per round
    with Ledger(store) as ledger:
        (summary,) = ledger.summaries()
        sid = summary.id
    proc = cli("show", sid, "--store", store)
    assert "tokens, unpriced" in proc.stdout
    assert "$0.0000" not in proc.stdout


# --------------------------------------------------------------------------- 14.7


@pytest.mark.slow
def test_resume_inside_an_open_round_names_the_round(tmp_path: Path) -> None:
    """Killed in the middle of a critique round, resumed: every progress line names its round
    (the first one used to be ' done · session cost …' with no round at all)."""
    script = {n: voice(n) for n in NAMES}
    script["dov"] = voice("dov", before=[{"match": "· critique ·", "content": "{}",
                                          "latency": 30}])
    store = str(tmp_path / "killed.sqlite")
    with FakeOpenAIServer(script) as server:
        pfile = write_participants(tmp_path / "p.yaml", server.url, NAMES)
        proc = subprocess.Popen(
            [CONSOLE_SCRIPT, "run", "Killed", "--participants", str(pfile), "--store", store],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        assert proc.stderr is not None
        kind = ""
        try:
            for line in proc.stderr:  # ana, ben and cleo answer the critique; dov hangs
                m = re.match(r"round \d+ · (\w+)", line)
                kind = m.group(1) if m else kind
                if kind == "critique" and line.startswith("  cleo: done"):
                    time.sleep(1.0)  # cleo's contribution is committed before dov's turn
                    break
        finally:
            proc.kill()
            proc.wait(timeout=20)
        server.set_script({n: voice(n) for n in NAMES})
        with Ledger(store, create=False) as ledger:
            (summary,) = ledger.summaries()
            state = ledger.state(summary.id)
        assert state.last_round is not None
        assert state.last_round.kind.value == "critique"
        assert state.last_round.status.value == "in_progress"
        resumed = cli("resume", summary.id, "--store", store)
    assert resumed.returncode == 0, resumed.stderr
    lines = resumed.stderr.splitlines()
    progress = [ln for ln in lines if "session cost" in ln]
    assert lines[0] == f"round {state.last_round.number} (resumed)", lines
    assert progress, progress
    assert progress[0].startswith(
        f"round {state.last_round.number} done · session cost"), progress
    assert all(re.match(r"round \d+ ", ln) for ln in progress), progress


# --------------------------------------------------------------------------- 14.8


@pytest.mark.slow
def test_browse_serves_canned_queries_for_any_store_name(recorded: Recorded) -> None:
    proc = subprocess.Popen(
        [CONSOLE_SCRIPT, "browse", "--port", "0", "--store", recorded.store],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        port = None
        deadline = time.monotonic() + 60
        assert proc.stderr is not None
        seen: list[str] = []
        while port is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            seen.append(line)
            m = re.search(r"Uvicorn running on http://127\.0\.0\.1:(\d+)", line)
            port = int(m.group(1)) if m else None
        assert port, "".join(seen)
        url = f"http://127.0.0.1:{port}/team~2Eviews/cost_per_participant.json?_shape=array"
        with urllib.request.urlopen(url, timeout=30) as resp:
            body = json.loads(resp.read())
        views = Path(recorded.store).with_name("team.views.sqlite")
        con = sqlite3.connect(views)
        expected = con.execute(
            "select session_id, participant, sum(cost_usd) from costs "
            "group by session_id, participant order by participant").fetchall()
        con.close()
        assert expected
        got = sorted((r["session_id"], r["participant"], r["cost_usd"]) for r in body)
        assert [(s, p) for s, p, _ in got] == [(s, p) for s, p, _ in expected]
        for (_, _, a), (_, _, b) in zip(got, expected, strict=True):
            assert a == pytest.approx(b, abs=1e-6)
    finally:
        proc.terminate()  # what a supervisor does; browse stops its Datasette with it
        proc.wait(timeout=20)
    with pytest.raises(ConnectionRefusedError):  # nothing is left serving on that port
        socket.create_connection(("127.0.0.1", port), timeout=5).close()


# --------------------------------------------------------------------------- 14.6

FIXTURES = Path(__file__).parents[1] / "fixtures"


def _json(*args: str) -> Any:
    proc = cli(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.slow
def test_after_back_show_and_the_jump_summary_agree(tmp_path: Path) -> None:
    """Paused in iteration 2, back 1: the summary's EMS is the session's EMS now and at the
    end of iteration 1 (a divergence addressed in the undone iteration no longer counts)."""
    script = {n: voice(n) for n in NAMES[:-1]}
    script["dov"] = voice("dov", vote=vote_json(False, "disagree", 40, ["retention"]), before=[
        {"match": "· convergence · iteration 1",
         "content": vote_json(False, "strongly_disagree", 30, ["retention"])},
        {"match": "· refinement ·",
         "content": opinion_json("disagree", ["retention"], ["retention"])},
    ])
    store = str(tmp_path / "back.sqlite")
    with FakeOpenAIServer(script) as server:
        pfile = write_participants(tmp_path / "p.yaml", server.url, NAMES)
        sid = _json("run", "Go back", "--participants", str(pfile), "--attended",
                    "--max-rounds", "20", "--store", store)["session_id"]
        assert cli("answer", sid, "keep going", "--store", store).returncode == 0
        assert _json("resume", sid, "--store", store)["iterations"] == 2
    before = _json("show", sid, "--store", store)
    at_1 = _json("show", sid, "--at-iteration", "1", "--store", store)
    jump = _json("back", sid, "1", "--store", store)
    now = _json("show", sid, "--store", store)
    assert jump["ems_before"] == before["ems"]
    assert jump["ems_after"] == at_1["ems"] == now["ems"]
    assert jump["phase_after"] == at_1["phase"] == now["phase"]
    assert now["iteration"] == 1
    assert now["status"] == "paused"


@pytest.mark.slow
def test_back_on_an_ended_session_says_to_fork(
    fake_openai: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    fake_openai.set_script({"ana": voice("ana"), "ben": voice("ben")})
    store = str(tmp_path / "ended.sqlite")
    code, out, _ = run_cli(capsys, "run", "Ended", "-m", "openai/ana", "-m", "openai/ben",
                           "--api-base", fake_openai.url, "--store", store, "--json")
    assert code == 0
    sid = one_json(out)["session_id"]
    proc = cli("back", sid, "--store", store)
    assert proc.returncode == 2
    line = assert_one_error_line(proc.stderr)
    assert "converged" in line
    assert f"forge-ledger fork {sid[:8]} --at-iteration 1" in line


@pytest.mark.slow
def test_imported_phase_is_the_one_shown_and_re_exported(tmp_path: Path) -> None:
    import yaml

    source = FIXTURES / "seed_panel.yaml"
    phase = yaml.safe_load(source.read_text("utf-8"))["session"]["phase"]
    store = str(tmp_path / "imp.sqlite")
    sid = _json("import", str(source), "--store", store)["session_id"]
    out = tmp_path / "again.yaml"
    assert cli("export", sid, "-o", str(out), "--store", store).returncode == 0
    shown = _json("show", sid, "--store", store)["phase"]
    exported = yaml.safe_load(out.read_text("utf-8"))["session"]["phase"]
    assert shown == exported == phase


@pytest.mark.slow
def test_importing_an_export_keeps_the_title(recorded: Recorded, tmp_path: Path) -> None:
    out = tmp_path / "run.yaml"
    assert cli("export", recorded.session_id, "-o", str(out), "--store", recorded.store,
               ).returncode == 0
    title = _json("show", recorded.session_id, "--store", recorded.store)["title"]
    store = str(tmp_path / "other.sqlite")
    sid = _json("import", str(out), "--store", store)["session_id"]
    assert _json("show", sid, "--store", store)["title"] == title == f"Retries {HOSTILE}"


@pytest.mark.slow
def test_resume_checks_added_participants_before_they_join(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    store = str(tmp_path / "imp.sqlite")
    sid = _json("import", str(FIXTURES / "seed_standard.yaml"), "--store", store)["session_id"]
    events = len(_json("log", sid, "--store", store))
    proc = subprocess.run(
        [CONSOLE_SCRIPT, "resume", sid, "-m", "gpt-4o-mini", "-m", "openai/local",
         "--api-base", "localhost:8000", "--store", store],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert lines == [
        "error: api_base 'localhost:8000' (of gpt-4o-mini, local) is not a URL; give "
        "http(s)://host[:port]/…, e.g. --api-base http://127.0.0.1:8000/v1",
    ]
    assert len(_json("log", sid, "--store", store)) == events  # nobody joined


def test_diff_prints_dissent_topics_whole_when_piped(recorded: Recorded) -> None:
    proc = cli("diff", recorded.session_id, recorded.session_id, "--store", recorded.store)
    assert proc.returncode == 0, proc.stderr
    with Ledger(recorded.store, create=False) as ledger:
        topics = [d.topic for d in ledger.state(recorded.session_id).open_divergences]
    assert topics
    assert all(t in proc.stdout for t in topics)
    assert "\x1b[" not in proc.stdout
    assert "…" not in proc.stdout
