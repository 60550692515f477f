"""What the command line says at its edges: the demo's hints never print a password, ``resume``
of an aborted session says what is true, Ctrl-C is one line and one exit code whenever it
lands, and a pause names every participant whose answer is missing. Each is a real
subprocess of the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from forge_ledger.testing import FakeOpenAIServer
from support.cli import write_participants
from support.postgres import PG_BASE, drop_schema


def _cli(*args: str, cwd: Path, env: dict[str, str] | None = None,
         ) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    base.pop("FORGE_LEDGER_STORE", None)
    return subprocess.run(
        [sys.executable, "-m", "forge_ledger", *args], capture_output=True, text=True,
        timeout=300, cwd=cwd, check=False,
        env={**base, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **(env or {})},
    )


@pytest.fixture
def pg_with_password() -> Iterator[tuple[str, str]]:
    """A PostgreSQL store URL carrying a password (trust auth accepts any), and its schema."""
    schema = f"fl_test_{uuid.uuid4().hex[:12]}"
    user_at = PG_BASE.replace("postgresql://", "").split("@", 1)
    assert len(user_at) == 2, PG_BASE
    url = f"postgresql://{user_at[0].split(':')[0]}:s3cret-pw@{user_at[1]}?schema={schema}"
    yield url, schema
    drop_schema(schema)


@pytest.mark.postgres
@pytest.mark.slow
def test_the_demo_hints_mask_a_postgres_password(
    tmp_path: Path, pg_with_password: tuple[str, str],
) -> None:
    url, schema = pg_with_password
    done = _cli("demo", "--latency", "0", "--store", url, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "s3cret-pw" not in done.stdout + done.stderr
    hints = [line for line in done.stdout.splitlines() if "forge-ledger " in line and " # " in line]
    assert len(hints) == 10
    assert all(":***@" in line and f"schema={schema}" in line for line in hints), hints
    assert "the password is masked" in done.stdout
    # from the environment, the hints leave --store out: it applies to them as well
    again = _cli("demo", "--latency", "0", cwd=tmp_path, env={"FORGE_LEDGER_STORE": url})
    assert again.returncode == 0, again.stderr
    assert "s3cret-pw" not in again.stdout + again.stderr
    assert "--store" not in again.stdout
    listed = _cli("sessions", cwd=tmp_path, env={"FORGE_LEDGER_STORE": url})
    assert listed.stdout.splitlines()[0].startswith("Sessions in postgresql://")
    assert ":***@" in listed.stdout.splitlines()[0]
    assert "s3cret-pw" not in listed.stdout + listed.stderr


def _team(tmp_path: Path, url: str, names: tuple[str, ...]) -> Path:
    return write_participants(tmp_path / "team.yaml", url, names)


@pytest.mark.slow
def test_resume_of_an_aborted_session_says_it_was_aborted_and_how_to_fork(
    tmp_path: Path, fake_openai: FakeOpenAIServer,
) -> None:
    fake_openai.set_script({"*": [{"fault": "server_error"}]})
    team = _team(tmp_path, fake_openai.url, ("alice", "bob"))
    run = _cli("run", "Given up", "--participants", str(team), "--max-attempts", "1",
               "--json", cwd=tmp_path)
    assert run.returncode == 3, run.stderr
    sid = json.loads(run.stdout)["session_id"]
    assert _cli("abort", sid[:8], "--reason", "the provider is gone", cwd=tmp_path
                ).returncode == 0
    resumed = _cli("resume", sid[:8], cwd=tmp_path)
    assert resumed.returncode == 2, resumed.stderr
    last = resumed.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: session {sid[:8]} was aborted: the provider is gone; ")
    assert f"fork it to continue from an earlier point: forge-ledger fork {sid[:8]}" in last
    assert "API key" not in resumed.stderr


def _interrupted(proc: subprocess.Popen[str]) -> tuple[int, str]:
    proc.send_signal(signal.SIGINT)
    try:
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, err


def _start(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    base = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    return subprocess.Popen(
        [sys.executable, "-m", "forge_ledger", *args], cwd=cwd, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**base, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **env},
    )


def _assert_one_interrupt_line(code: int, err: str) -> str:
    assert code == 130, err
    assert "Traceback" not in err
    assert "aborted" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1].startswith("interrupted"), err
    return lines[-1]


def _python_handles_sigint(pid: int) -> None:
    """Wait until the process catches SIGINT (Python has installed its handler): before that
    a SIGINT ends any program at once, whatever it would print."""
    bit = 1 << (signal.SIGINT - 1)
    for _ in range(600):
        status = Path(f"/proc/{pid}/status").read_text()
        caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
        if int(caught.split()[1], 16) & bit:
            return
        time.sleep(0.01)
    raise AssertionError("the interpreter never installed its SIGINT handler")


@pytest.mark.parametrize("after", [0.5, 1.0, 2.0, 4.0, 8.0])
@pytest.mark.slow
def test_ctrl_c_at_any_moment_of_a_run_is_one_interrupted_line_and_exit_130(
    tmp_path: Path, fake_openai: FakeOpenAIServer, after: float,
) -> None:
    """From the command line loading to the calls in flight: whenever SIGINT lands, the same
    line (naming the session once it is recorded) and the same exit code. The moments are
    counted from the interpreter's handler being in place (``test_interrupt_at_start``
    interrupts the loading itself, deterministically)."""
    fake_openai.set_script({"*": [{"fault": "hang"}]})
    team = _team(tmp_path, fake_openai.url, ("alice", "bob"))
    proc = _start("run", "Interrupted", "--participants", str(team), cwd=tmp_path,
                  env={"FORGE_LEDGER_STORE": str(tmp_path / "s.sqlite")})
    _python_handles_sigint(proc.pid)
    time.sleep(after)
    _assert_one_interrupt_line(*_interrupted(proc))


@pytest.mark.slow
def test_ctrl_c_once_the_session_is_recorded_names_it(
    tmp_path: Path, fake_openai: FakeOpenAIServer,
) -> None:
    fake_openai.set_script({"*": [{"fault": "hang"}]})
    team = _team(tmp_path, fake_openai.url, ("alice", "bob"))
    proc = _start("run", "Interrupted", "--participants", str(team), cwd=tmp_path,
                  env={"FORGE_LEDGER_STORE": str(tmp_path / "s.sqlite")})
    assert proc.stderr is not None
    header = proc.stderr.readline()  # "session <id> · Interrupted", once it is recorded
    assert header.startswith("session "), header
    short = header.split()[1][:8]
    line = _assert_one_interrupt_line(*_interrupted(proc))
    assert line == (f"interrupted; session {short} keeps everything recorded so far; "
                    f"continue with: forge-ledger resume {short}")


@pytest.mark.slow
def test_ctrl_c_in_a_command_that_waits_is_the_same_line(tmp_path: Path) -> None:
    """``projections update --follow`` waits for new events until Ctrl-C, which click
    would answer with its own "Aborted!" if the command did not."""
    store = str(tmp_path / "s.sqlite")
    assert _cli("demo", "--latency", "0", "--store", store, "--json", cwd=tmp_path
                ).returncode == 0
    proc = _start("projections", "update", "--follow", "--interval", "0.1", cwd=tmp_path,
                  env={"FORGE_LEDGER_STORE": store})
    assert proc.stderr is not None
    assert proc.stderr.readline().startswith("following ")
    line = _assert_one_interrupt_line(*_interrupted(proc))
    assert line == "interrupted"


@pytest.mark.slow
def test_a_pause_names_every_participant_whose_answer_is_missing(
    tmp_path: Path, fake_openai: FakeOpenAIServer,
) -> None:
    fake_openai.set_script({"*": [
        {"match": "· critique ·", "fault": "server_error"},
        {"content": "# Draft\n\nA draft that every critic fails to review.\n"},
    ]})
    team = _team(tmp_path, fake_openai.url, ("alice", "bob", "carol"))
    run = _cli("run", "Critics gone", "--participants", str(team), "--max-attempts", "1",
               "--json", cwd=tmp_path, env={"FORGE_LEDGER_STORE": str(tmp_path / "s.sqlite")})
    assert run.returncode == 3, run.stderr
    doc = json.loads(run.stdout)
    missing = doc["fault"]["missing"]
    assert doc["fault"]["kind"] == "critique"
    assert len(missing) >= 2, doc
    said = run.stderr.strip().splitlines()[-1]
    named = " and ".join([", ".join(missing[:-1]), missing[-1]])
    assert said.startswith(
        f"error: session {doc['session_id'][:8]} paused: round 2 (critique) has no answer "
        f"from {named}; "
    ), said
    assert f"no answer from {named}; " in doc["reason"]  # the recorded reason too
