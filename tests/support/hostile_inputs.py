"""Helpers for tests of hostile input: the CLI as a real subprocess, its peak memory, and
running it as an unprivileged user so that file permissions bind (root ignores them)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

CONSOLE_SCRIPT = str(Path(sys.executable).parent / "forge-ledger")
NOBODY = 65534

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


def unprivileged_prefix() -> list[str]:
    """Run a command as ``nobody`` when the tests run as root (root ignores permissions, so a
    read-only file would not be read-only for it)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv (util-linux) is needed to drop root privileges in this test"
    return [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


def run_cli(*args: str, cwd: Path, unprivileged: bool = False,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    prefix = unprivileged_prefix() if unprivileged else []
    return subprocess.run(
        [*prefix, CONSOLE_SCRIPT, *args], capture_output=True, text=True, timeout=120, cwd=cwd,
        check=False, env={**os.environ, **(env or {})},
    )


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
