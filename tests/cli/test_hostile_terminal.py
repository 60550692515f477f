"""Untrusted text never drives the terminal it is shown on (DESIGN §6).

A topic and model answers full of terminal controls (clear screen, a window title, an OSC 8
hyperlink to another site, a C1 CSI, bidi overrides, a newline that would print a fake
``STATUS: FORGED`` line) go through a real deliberation against the shipped fake server. Every
command then runs as a subprocess on a pseudo-terminal, where Rich styles its output, and
none of those controls may reach it raw; ``--json``, ``-o FILE`` and a pipe keep the exact bytes.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

import pytest

from forge_ledger.testing import FakeOpenAIServer
from forge_ledger.untrusted.terminal_text import printable
from support.cli import write_participants

TOPIC = ("Evil \x1b]0;PWNED\x07title\x1b[2J \u202eright-to-left\u202c \x9b31m :fire:"
         "\nSTATUS: FORGED")
DRAFT = "# Draft \x1b[2J\x1b]0;PWNED\x07\n\nDraft \u202eevil\u202c body \x9b31m.\n"
SYNTHESIS = (
    "# Synthesis \x1b[2J\x1b]0;PWNED\x07\n\nText \u202eevil\u202c and \x9b31m and "
    "\x1b]8;;http://evil.example/\x07here\x1b]8;;\x07 and [a link](http://evil.example/).\n"
)
_ESC_JSON = {  # what models send: JSON whose strings decode to terminal controls
    "critique": {
        "strengths": ["fine \x1b]8;;http://evil.example/\x07click\x1b]8;;\x07"],
        "weaknesses": ["\x1b[2Jwiped \u202eevil"],
        "suggestions": [{"text": "\x9b31m c1 \x1b]0;PWNED\x07", "section": "Errors",
                         "priority": 1, "category": "completeness"}],
        "score": 70,
    },
    "opinion": {
        "stance": "strongly_disagree", "reasoning": "no \x1b]0;PWNED\x07",
        "concerns": ["\x9b31m concern"], "strength": 0.9,
        "topics": ["\x1b[41mred topic\nSTATUS: FORGED"],
    },
    "vote": {
        "agrees": False, "score": 40, "concerns": ["\x1b[2Jconcern\nSTATUS: FORGED"],
        "stance": "disagree", "reasoning": "\u202eevil",
    },
}
NAMES = ("alice", "bob", "carol")
HUMAN = "go on \x1b[2J\x1b]0;PWNED\x07 \u202eplease"
"""A person's answer at the attended prompt (a terminal sends what is pasted into it)."""

RAW = ("\x1b]", "\x1b[2J", "\x1b[41m", "\x9b", "\u202e", "\u202c", "\x07")
"""What must never reach the terminal raw. Rich styles with CSI SGR codes of its own (bold,
red), never with an OSC, a clear screen, a red background, C1, BEL or bidi controls."""

_SGR = re.compile(r"\x1b\[[0-9;]*m")
_CURSOR = re.compile(r"\x1b\[\??[0-9;]*[A-HJKlh]")


def _script() -> dict[str, Any]:
    def rule(match: str, content: str) -> dict[str, Any]:
        return {"match": match, "content": content}

    return {"*": [
        rule("· critique ·", json.dumps(_ESC_JSON["critique"])),
        rule("· (response|refinement) ·", json.dumps(_ESC_JSON["opinion"])),
        rule("· convergence ·", json.dumps(_ESC_JSON["vote"])),
        rule("· synthesis ·", SYNTHESIS),
        rule("· draft ·", DRAFT),
    ]}


def _env(store: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(FORGE_LEDGER_STORE=str(store), LITELLM_LOCAL_MODEL_COST_MAP="True",
               COLUMNS="160", LINES="50", TERM="xterm-256color")
    for name in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE"):
        env.pop(name, None)
    return env


def on_terminal(*args: str, env: dict[str, str], cwd: Path, answers: tuple[str, ...] = (),
                prompt: str = "Your answer") -> tuple[int, str]:
    """Run ``forge-ledger ARGS`` with stdin, stdout and stderr on a pseudo-terminal; returns
    the exit code and everything the terminal received (``answers`` are typed at each
    ``prompt``, in turn)."""
    leader, follower = os.openpty()
    attrs = termios.tcgetattr(follower)
    attrs[3] &= ~termios.ECHO  # what is typed is not echoed: only the command's output counts
    termios.tcsetattr(follower, termios.TCSANOW, attrs)
    proc = subprocess.Popen(
        [sys.executable, "-m", "forge_ledger", *args], stdin=follower, stdout=follower,
        stderr=follower, env=env, cwd=cwd, start_new_session=True,
    )
    os.close(follower)
    received = bytearray()
    typed = 0
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed: the command is done
                break
            if not chunk:
                break
            received += chunk
            if typed < len(answers) and received.count(prompt.encode()) > typed:
                os.write(leader, answers[typed].encode() + b"\r")
                typed += 1
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(leader)
    return code, received.decode("utf-8", errors="strict").replace("\r\n", "\n")


def assert_shown_not_obeyed(output: str, *, fields: bool = True) -> None:
    """No control reaches the terminal raw; with ``fields``, no single-line field prints a
    line of its own either (an HTML page shown as its source is a document: a newline in
    its title is one of the source's, which a browser shows as a space)."""
    for raw in RAW:
        assert raw not in output, (raw, output)
    visible = _CURSOR.sub("", _SGR.sub("", output))
    assert "\x1b" not in visible, visible  # every ESC left is Rich's own styling or cursor move
    assert not fields or not any(line.lstrip(" │|").startswith("STATUS: FORGED")
                                 for line in visible.splitlines()), visible


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One attended session on the hostile topic, run on a terminal: paused after iteration 1
    with hostile questions, answered at the prompt, paused again after iteration 2 (so
    ``back`` has questions to restore); its output is kept for the tests."""
    tmp = tmp_path_factory.mktemp("hostile")
    server = FakeOpenAIServer(_script()).start()
    store = tmp / "store.sqlite"
    env = _env(store)
    team = write_participants(tmp / "team.yaml", server.url, NAMES)
    code, out = on_terminal(
        "run", TOPIC, "--participants", str(team), "--attended", "--max-rounds", "12",
        env=env, cwd=tmp, answers=(HUMAN, ""),
    )
    sid = json.loads(subprocess.run(
        [sys.executable, "-m", "forge_ledger", "sessions", "--json"], env=env, cwd=tmp,
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout)[0]["id"]

    class Session:
        pass

    s = Session()
    s.tmp, s.env, s.sid, s.run_code, s.run_output, s.server = tmp, env, sid, code, out, server
    yield s
    server.stop()


@pytest.mark.slow
def test_the_live_run_and_the_attended_prompt_show_the_controls_escaped(hostile: Any) -> None:
    out = hostile.run_output
    assert hostile.run_code == 0, out
    assert out.count("Your answer") == 2, out  # the attended prompt ran twice
    assert_shown_not_obeyed(out)
    assert printable(TOPIC) in out  # the header shows the topic, escaped, on one line
    assert "STATUS: FORGED" in out  # … as text, never as a line of its own


@pytest.mark.parametrize("command", [
    ("sessions",),
    ("show", "{sid}"),
    ("show", "{sid}", "--at-event", "12"),
    ("log", "{sid}"),
    ("audit", "{sid}"),
    ("audit", "{sid}", "--markdown"),
    ("dissent", "{sid}", "--all"),
    ("trail", "{sid}"),
    ("spec", "{sid}"),
    ("spec", "{sid}", "--at-event", "12"),
    ("spec", "{sid}", "--provenance"),
    ("export", "{sid}", "-o", "{tmp}/export.yaml"),
    ("report", "{sid}", "-o", "-"),
    ("verify", "{sid}"),
    ("show", "nope\x1b[2J\u202e"),
], ids=lambda c: "-".join(x for x in c if "{" not in x and "\x1b" not in x))
@pytest.mark.slow
def test_every_command_shows_the_controls_escaped(hostile: Any, command: tuple[str, ...]) -> None:
    args = [a.format(sid=hostile.sid[:8], tmp=hostile.tmp) for a in command]
    code, out = on_terminal(*args, env=hostile.env, cwd=hostile.tmp)
    assert code in (0, 2), out  # the last one is an error that quotes the value it was given
    assert out.strip(), args
    assert_shown_not_obeyed(out, fields=command[0] != "report")


def test_back_shows_the_restored_questions_escaped(hostile: Any) -> None:
    code, out = on_terminal("back", hostile.sid[:8], env=hostile.env, cwd=hostile.tmp)
    assert code == 0, out
    assert "Restored questions (iteration 1)" in out
    assert "\\x1b[2Jconcern\\nSTATUS: FORGED" in out
    assert_shown_not_obeyed(out)


@pytest.mark.slow
def test_json_files_and_pipes_keep_the_exact_bytes(hostile: Any) -> None:
    env, tmp, sid = hostile.env, hostile.tmp, hostile.sid

    def cli(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "forge_ledger", *args], env=env, cwd=tmp,
                              capture_output=True, text=True, check=True, timeout=120)
        return done.stdout

    assert json.loads(cli("show", sid, "--json"))["title"] == TOPIC
    code, out = on_terminal("show", sid, "--json", env=env, cwd=tmp)  # on a terminal too
    assert code == 0
    assert json.loads(out)["title"] == TOPIC
    piped = cli("spec", sid)
    assert piped.endswith(SYNTHESIS)
    assert "\x1b[2J" in piped
    cli("spec", sid, "-o", str(tmp / "doc.md"))
    assert (tmp / "doc.md").read_text(encoding="utf-8").endswith(SYNTHESIS)
    answers = [c["content"] for r in json.loads(cli("show", sid, "--json"))["rounds"]
               for c in r["contributions"]]
    assert DRAFT in answers
    assert SYNTHESIS in answers
    assert json.loads(cli("audit", sid, "--json"))["title"] == TOPIC
    assert "\x1b[2J" in cli("report", sid, "-o", "-")  # piped: the page's own bytes


def test_a_piped_document_keeps_its_bytes_when_colour_is_forced(hostile: Any) -> None:
    """``FORCE_COLOR`` (set by many CI systems) makes Rich style a pipe; a document piped to a
    file still keeps the exact bytes recorded, and emoji codes in text stay as typed."""
    env = {**hostile.env, "FORCE_COLOR": "1", "TTY_COMPATIBLE": "1"}
    done = subprocess.run([sys.executable, "-m", "forge_ledger", "spec", hostile.sid],
                          env=env, cwd=hostile.tmp, capture_output=True, text=True, check=True,
                          timeout=120)
    assert done.stdout.endswith(SYNTHESIS)
    assert "\x1b[2J" in done.stdout
    code, out = on_terminal("show", hostile.sid, env=hostile.env, cwd=hostile.tmp)
    assert code == 0, out
    assert ":fire:" in out
    assert "\U0001f525" not in out
