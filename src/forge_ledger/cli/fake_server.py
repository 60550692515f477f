"""``forge-ledger fake-server``: run the scripted OpenAI-compatible server in the foreground.

Lets a user try a deliberation offline (participants ``openai/<name>`` with ``api_base`` set
to the printed URL) and lets tests drive the CLI end to end. Never imports litellm.
"""

from __future__ import annotations

import threading

import click

from ..errors import UsageError
from . import cli
from ._common import err_console, printable


@cli.command("fake-server")
@click.option(
    "--port",
    type=int,
    default=0,
    show_default=True,
    help="TCP port to listen on (0 picks a free one).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option(
    "--script",
    "script",
    default="demo",
    show_default=True,
    metavar="FILE|NAME",
    help="YAML/JSON reply script, or the name of a bundled script.",
)
@click.option(
    "--latency",
    type=float,
    default=0.0,
    show_default=True,
    help="Default seconds before the first byte of every reply.",
)
def fake_server(port: int, host: str, script: str, latency: float) -> None:
    """Serve scripted chat completions on HOST:PORT until interrupted (Ctrl-C)."""
    from ..testing import FakeOpenAIServer, load_script

    if latency < 0:
        raise UsageError(f"--latency {latency:g} is negative", hint="give seconds >= 0")
    if not 0 <= port <= 65535:
        raise UsageError(f"--port {port} is out of range", hint="give 0..65535")
    server = FakeOpenAIServer(load_script(script), host=host, port=port, latency=latency)
    try:
        server.start()
    except OSError as e:
        raise UsageError(
            f"cannot listen on {host}:{port}: {e.strerror}",
            hint="choose another --port (0 picks a free one)",
        ) from None
    try:
        click.echo(server.url)
        models = printable(", ".join(sorted(server.script.models))) or "(none)"
        err_console.print(f"fake OpenAI server at {server.url} — models: {models}; Ctrl-C to stop")
        threading.Event().wait()
    except KeyboardInterrupt:
        err_console.print("fake OpenAI server stopped")
    finally:
        server.stop()
