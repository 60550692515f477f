"""What the benchmarks share: the fake server in a child process and, for the studies, the
plan they run and a PostgreSQL schema of their own (imported by ``bench/study_*.py`` and
``bench/round_bench.py``; not a benchmark).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

__all__ = ["BENCH_PG", "FakeServer", "forge_ledger_exe", "log", "pg_schema", "write_plan"]

PRICE = {"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6}
BENCH_PG = os.environ.get("FORGE_LEDGER_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
"""The PostgreSQL server and database the benchmarks work in (one schema per measurement)."""


def log(msg: str) -> None:
    """Progress, on stderr (stdout is the JSON result)."""
    print(msg, file=sys.stderr, flush=True)


def forge_ledger_exe() -> str:
    return str(Path(sys.executable).with_name("forge-ledger"))


class FakeServer:
    """``forge-ledger fake-server`` in a child process, with a latency before every reply
    (and a script of replies other than the demo's)."""

    def __init__(self, latency: float, script: Path | None = None) -> None:
        scripted = ["--script", str(script)] if script is not None else []
        self.proc = subprocess.Popen(
            [forge_ledger_exe(), "fake-server", *scripted, "--latency", str(latency)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http"):
            self.stop()
            raise SystemExit("the fake server did not start")

    def cpu_secs(self) -> float:
        """The server's CPU time so far (it shares the cores with the client)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def write_plan(
    folder: Path,
    url: str,
    name: str,
    repeats: int,
    *,
    people: tuple[str, ...] = ("ana", "ben", "cleo"),
    **fields: Any,
) -> Path:
    """``<name>.yaml``: one topic, one panel of ``people`` (the trio by default) at ``url``,
    ``repeats`` cells, at most 8 rounds each; ``fields`` replace the plan's own."""
    panel = [{"name": n, "model": f"openai/{n}", "api_base": url, "price": PRICE} for n in people]
    (folder / "panel.yaml").write_text(yaml.safe_dump({"participants": panel}), "utf-8")
    plan = {
        "name": name,
        "topics": [{"title": "Retry policy for the ingest service"}],
        "panels": {"panel": "panel.yaml"},
        "repeats": repeats,
        "session": {"max_rounds": 8},
        **fields,
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(plan), "utf-8")
    return path


@contextlib.contextmanager
def pg_schema(base: str = BENCH_PG, prefix: str = "fl_bench") -> Iterator[tuple[str, str]]:
    """A fresh schema's name and store URL on ``base``, dropped on exit."""
    import psycopg

    schema = f"{prefix}_{uuid.uuid4().hex[:10]}"
    try:
        yield schema, f"{base}?schema={schema}"
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
