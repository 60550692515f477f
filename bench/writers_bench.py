"""Concurrent writers benchmark: eight ``forge-ledger run`` processes into one SQLite file.

Prints one JSON object on stdout (progress on stderr):

* ``alone_s`` — wall time of one ``forge-ledger run`` (a child process) into a new file;
* ``together_s`` — wall time until all ``--writers`` runs (default 8), started at once into
  one new file, have ended;
* ``ratio`` — ``together_s / alone_s``, and ``per_writer`` — that over the number of writers
  (1.0: the writers took as long as one each, in sequence; below: they overlapped);
* ``all_finished`` — every run exited 0, and ``verify`` of the shared file passed.

Every run deliberates with two participants of the bundled ``demo`` script on the scripted
OpenAI-compatible server (over HTTP, ``--latency`` seconds per answer). Both figures come from
the same process, one after the other. Writes take the file's write lock before they read
(``BEGIN IMMEDIATE``), so the writers wait for one another instead of failing.

``--quick`` runs three writers (CI smoke test; the figures are not meaningful).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from forge_ledger.testing import FakeOpenAIServer, bundled_script

_CLI = [sys.executable, "-m", "forge_ledger"]
_ENV = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def _run(topic: str, url: str, store: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            *_CLI, "run", topic, "-m", "openai/ana", "-m", "openai/ben", "--api-base", url,
            "--price", "openai/ana=1:2", "--price", "openai/ben=1:2", "--store", str(store),
            "--json",
        ],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_ENV,
    )


def _writers(n: int, url: str, store: Path) -> tuple[float, list[int], list[str]]:
    """Start ``n`` runs at once into ``store``; their wall time, exit codes and errors."""
    t0 = time.perf_counter()
    procs = [_run(f"Writers bench topic {i}", url, store) for i in range(n)]
    ended = [p.communicate() for p in procs]
    wall = time.perf_counter() - t0
    codes = [p.returncode for p in procs]
    errors = [
        err.strip().splitlines()[-1] for (_, err), c in zip(ended, codes, strict=True) if c and err
    ]
    return wall, codes, errors


def _verified(store: Path) -> bool:
    done = subprocess.run(
        [*_CLI, "verify", "--store", str(store)], capture_output=True, text=True, env=_ENV,
        check=False,
    )
    return done.returncode == 0


def measure(writers: int, latency: float) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory() as tmp,
        FakeOpenAIServer(bundled_script("demo"), latency=latency) as server,
    ):
        print("one writer alone…", file=sys.stderr)
        alone, alone_codes, _ = _writers(1, server.url, Path(tmp) / "alone.sqlite")
        print(f"{writers} writers at once…", file=sys.stderr)
        shared = Path(tmp) / "shared.sqlite"
        together, codes, errors = _writers(writers, server.url, shared)
        verified = _verified(shared)
    return {
        "writers": writers,
        "latency_s": latency,
        "alone_s": round(alone, 3),
        "together_s": round(together, 3),
        "ratio": round(together / alone, 3),
        "per_writer": round(together / alone / writers, 3),
        "exit_codes": codes,
        "errors": errors,
        "verified": verified,
        "all_finished": verified and not any(codes) and not any(alone_codes),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="three writers (CI smoke test)")
    parser.add_argument("--writers", type=int, default=8, help="concurrent runs (default 8)")
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per answer")
    args = parser.parse_args(argv)
    result = measure(3 if args.quick else args.writers, args.latency)
    print(json.dumps(result, indent=2))
    return 0 if result["all_finished"] else 1


if __name__ == "__main__":
    sys.exit(main())
