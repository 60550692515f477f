"""``forge-ledger browse``: the read model in Datasette, with its canned queries, for any store.

Datasette names a database after its file (``team.views.sqlite`` is ``team.views``) and keys
its metadata by that name, so the shipped ``datasette.yaml`` (written for the default
``forge-ledger.views``) would lose its descriptions and canned queries on any other store.
``browse`` brings the projections up to date, re-keys the metadata to the real file's name and
runs Datasette on it. Datasette is an optional extra (``pip install 'forge-ledger[datasette]'``).
"""

from __future__ import annotations

import importlib.util
import json
import signal
import subprocess
import sys
import tempfile
from importlib import resources
from pathlib import Path
from types import FrameType
from typing import Any

import click
import yaml

from ..errors import ConfigError, UsageError
from ..ledger.outputs import store_outputs
from . import cli
from ._common import err_console, open_ledger, printable, store_option

__all__ = ["browse", "datasette_metadata"]

_METADATA = "datasette.yaml"


def datasette_metadata(views_path: Path) -> dict[str, Any]:
    """The shipped Datasette metadata with its one database keyed by ``views_path``'s name."""
    text = resources.files("forge_ledger.projections").joinpath(_METADATA).read_text("utf-8")
    meta: dict[str, Any] = yaml.safe_load(text)
    databases = meta.get("databases") or {}
    if len(databases) != 1:
        raise ConfigError(f"{_METADATA} must describe exactly one database")
    (spec,) = databases.values()
    meta["databases"] = {Path(views_path).name.removesuffix(".sqlite"): spec}
    return meta


def _serve(views: Path, meta: dict[str, Any], host: str, port: int) -> int:
    with tempfile.TemporaryDirectory(prefix="forge-ledger-browse-") as tmp:
        meta_file = Path(tmp) / "metadata.json"
        meta_file.write_text(json.dumps(meta), encoding="utf-8")
        cmd = [sys.executable, "-m", "datasette", "serve", str(views), "-m", str(meta_file),
               "--host", host, "--port", str(port)]
        proc = subprocess.Popen(cmd)
        # Stopped by Ctrl-C or by a supervisor's SIGTERM, browse stops its Datasette too:
        # Python's default SIGTERM would end this process and leave the server running.
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            return proc.wait()
        except KeyboardInterrupt:
            proc.terminate()
            proc.wait(timeout=10)
            return 0
        finally:
            signal.signal(signal.SIGTERM, previous)


def _interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@cli.command()
@click.option("--port", type=click.IntRange(0, 65535), default=8001, show_default=True,
              help="Port to serve on (0: any free port, printed by Datasette).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to listen on; 0.0.0.0 exposes the read model to your network.")
@store_option
def browse(port: int, host: str, store: str | None) -> None:
    """Update the projections and open the read model in Datasette (Ctrl-C stops).

    Works for any store name: the canned queries (dissent by participant, session timeline,
    cost per participant) are attached to the store's own read-model file.
    """
    if importlib.util.find_spec("datasette") is None:
        raise UsageError(
            "Datasette is not installed", hint="pip install 'forge-ledger[datasette]'"
        )
    from .views import _run

    applied, damaged = _run(store, rebuild=None, everything=False, batch_size=1000)
    for e in damaged:  # the rest is current: serve it, saying which session or study is not
        err_console.print(f"warning: {printable(e.one_line())}", markup=False)
    with open_ledger(store) as ledger:
        views = store_outputs(ledger.location).views
    err_console.print(
        f"projections up to date ({applied} new events); serving {printable(str(views))}"
    )
    if port:
        err_console.print(f"open http://{host}:{port}/ (Ctrl-C stops)")
    code = _serve(views, datasette_metadata(views), host, port)
    if code != 0:
        raise UsageError(f"Datasette exited with code {code}", hint="see its message above")
