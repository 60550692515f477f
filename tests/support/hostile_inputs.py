"""Helpers for tests of hostile input: the CLI's peak memory, hostile documents, untouched
files (no tests here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from support.cli import CONSOLE_SCRIPT

# A parent process with exactly one child: its RUSAGE_CHILDREN is that child's own usage.
_MEASURE = """
import json, resource, subprocess, sys, time
t0 = time.monotonic()
p = subprocess.run(sys.argv[1:], capture_output=True, text=True)
wall = time.monotonic() - t0
u = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr, "wall_s": wall,
                  "cpu_s": u.ru_utime + u.ru_stime, "peak_rss_mb": u.ru_maxrss / 1024}))
"""


@dataclass(frozen=True)
class Measured:
    rc: int
    stdout: str
    stderr: str
    wall_s: float
    cpu_s: float
    peak_rss_mb: float


def measure_cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> Measured:
    """Run ``forge-ledger ARGS`` and return its exit code, output, time and peak RSS."""
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE, CONSOLE_SCRIPT, *args],
        capture_output=True, text=True, timeout=300, cwd=cwd, check=True,
        env={**os.environ, **(env or {})},
    )
    return Measured(**json.loads(out.stdout))


def one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), stderr
    assert "Traceback" not in stderr
    return lines[0]


def fingerprint(path: Path) -> tuple[bytes, int]:
    """Bytes and mtime (ns) of a file, to prove a command left it untouched."""
    return path.read_bytes(), path.stat().st_mtime_ns


BILLION_LAUGHS = "\n".join(
    [f'{chr(97)}: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [
        f"{chr(97 + i)}: &{chr(97 + i)} [" + ",".join([f"*{chr(96 + i)}"] * 9) + "]"
        for i in range(1, 9)
    ],
) + "\n"
