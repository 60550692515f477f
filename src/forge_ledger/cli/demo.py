"""``forge-ledger demo``: a complete deliberation, offline, through the real machinery.

It starts the scripted OpenAI-compatible server (``forge_ledger.testing``) on 127.0.0.1 in
this process and runs four participants — a drafter, a critic, a synthesizer and a devil's
advocate — through the real orchestrator, the real litellm provider (over real HTTP) and the
real event store. The script makes the devil's advocate dissent strongly in iteration 1, so
the session shows a divergence, a refinement and convergence in iteration 2.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

import click

from ..app.demo import DEMO_LATENCY, DEMO_SCRIPT, demo_participants, demo_topic
from ..domain.values import SessionConfig
from ..ledger import ENV_VAR, resolve_store
from . import cli
from ._common import open_ledger, printable, remember_json, store_option
from ._interrupt import survives_closed_output
from .deliberate import exit_for_outcome, print_outcome, run_session

__all__ = ["demo"]


@cli.command()
@click.option(
    "--latency",
    type=float,
    default=DEMO_LATENCY,
    show_default=True,
    help="Seconds each scripted model waits before answering.",
)
@store_option
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    callback=remember_json,
    help="Print {session_id, status, iterations, rounds, events, cost_usd} at the end.",
)
@survives_closed_output
def demo(latency: float, store: str | None, as_json: bool) -> None:
    """Run an offline four-participant deliberation (no API key, no network)."""
    from ..testing import FakeOpenAIServer, bundled_script

    ledger = open_ledger(store, create=True)
    try:
        with FakeOpenAIServer(bundled_script(DEMO_SCRIPT), latency=latency) as server:
            state = run_session(
                ledger,
                start=(
                    demo_topic(),
                    SessionConfig(max_cost_usd=1.0, max_rounds=12),
                    demo_participants(server.url),
                ),
                quiet=as_json,
                source="demo",
            )
        if as_json:
            print_outcome(state, as_json=True)
            exit_for_outcome(state)
            return
        print_outcome(state, as_json=False)
        exit_for_outcome(state)
        short = state.id[:8]
        click.echo("\nnext, try:")
        store_arg = _store_arg(store)
        program = invoked_as()
        for cmd, what in (
            (f"spec {short} --provenance", "the document they agreed on, sentence by sentence"),
            (f"report {short}", "the audit as one HTML page"),
            (f"show {short}", "the session as it is now"),
            (f"show {short} --at-iteration 1", "as it was after iteration 1"),
            (f"trail {short}", "how each participant voted, and who moved whom"),
            (f"dissent {short} --all", "the dissent log"),
            (f"audit {short} --markdown", "the full consensus audit"),
            (f"replay {short}", "re-run it against the recorded answers (no model called)"),
            (f"fork {short} --at-iteration 1", "a new session from iteration 1, then resume it"),
            (f"verify {short}", "check the hash chain and the seal"),
        ):
            click.echo(f"  {program} {cmd}{store_arg}  # {what}")
        if "***" in store_arg:
            click.echo(
                "  (the password is masked: type yours in its place, or set "
                f"{ENV_VAR} and leave --store out)"
            )
    finally:
        ledger.close()


def invoked_as(argv0: str | None = None) -> str:
    """How to type this program again, for hints a user copies: ``forge-ledger`` when the
    running executable is the one the shell finds on PATH under that name, else the path it
    was started by (``.venv/bin/forge-ledger`` from a venv not activated). Started as a module
    (``python -m forge_ledger``), the console script beside the interpreter stands for it, or
    failing that the module itself."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    if Path(argv0).name == "__main__.py":
        script = Path(sys.executable).parent / "forge-ledger"
        if not script.is_file():
            return f"{shlex.quote(sys.executable)} -m forge_ledger"
        argv0 = str(script)
    name = Path(argv0).name
    return name if _on_path(name, argv0) else shlex.quote(argv0)


def _on_path(name: str, running: str) -> bool:
    """Whether typing ``name`` in a shell runs the file ``running``."""
    found = shutil.which(name)
    try:
        return found is not None and os.path.samefile(found, running)
    except OSError:
        return False


def _store_arg(store: str | None) -> str:
    """``--store`` for the hints: none when the store was found without it (the next commands
    find it the same way), else the store as shown everywhere (``StoreLocation.display``: a
    password masked), quoted for a shell."""
    if not store:
        return ""
    return f" --store {shlex.quote(printable(resolve_store(store).display))}"
