"""Start-up benchmark: how long read commands take, whole process, as a person types them.

Prints one JSON object on stdout (progress on stderr). A store holding one demo session is
made first (``forge-ledger demo``, offline); then, in turns, each command runs once as a
subprocess of this interpreter, after one warm-up turn:

* ``baseline`` — ``python -c "import pydantic, click, rich, eventsourcing"``: the libraries the
  command line stands on, loaded and nothing done with them;
* ``--help``, ``sessions``, ``show S``, ``spec S`` and ``audit S``, on the store as ``demo``
  leaves it (a command that records a session brings the read model beside the store up to
  date when the session stops, its audit included, so ``sessions``, ``show``, ``spec`` and
  ``audit`` read its rows);
* ``sessions`` and ``show S`` again on a copy of the store without its read model (a store
  copied from elsewhere, or whose read model was deleted): they fold the session's events
  (``folding`` in the output, no goal).

For each: the median wall time (``wall_s``) and the median CPU time of the child, user +
system (``cpu_s``), over the turns, and both as ratios to the baseline's medians
(``wall_ratio``, ``cpu_ratio``). The goals are on the wall ratio: ``--help`` ≤ 2,
``sessions`` ≤ 3, ``show`` and ``spec`` ≤ 4, ``audit`` ≤ 5. On a busy machine wall times
wait for a core; the CPU ratio says what the process itself costs, so ``met`` is true when
either ratio is within the goal and ``wall_met`` says what the wall ratio alone gives.
Running the commands in turns (each turn runs every command once) spreads the machine's load
over all of them alike.

``--quick`` runs three turns (CI smoke test); the default is five, ``--turns`` sets it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BASELINE = "import pydantic, click, rich, eventsourcing"
GOALS = {"--help": 2.0, "sessions": 3.0, "show S": 4.0, "spec S": 4.0, "audit S": 5.0}


def _env(store: Path) -> dict[str, str]:
    """The commands' environment, as a person's shell has it: Python keeps the compiled
    modules it reads (``PYTHONDONTWRITEBYTECODE``, set on some build machines, would have every
    command compile this package again, which the libraries of the baseline, compiled when
    they were installed, never pay)."""
    env = dict(os.environ, FORGE_LEDGER_STORE=str(store), LITELLM_LOCAL_MODEL_COST_MAP="True")
    env.pop("FORGE_LEDGER_HMAC_KEY", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _make_store(store: Path) -> str:
    """A store with one demo session; its id."""
    proc = subprocess.run(
        [sys.executable, "-m", "forge_ledger", "demo", "--latency", "0", "--json"],
        env=_env(store), capture_output=True, text=True, check=True, cwd=store.parent,
    )
    return str(json.loads(proc.stdout)["session_id"])


def _timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one run of ``argv``, which must succeed."""
    start = time.perf_counter()
    child = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    err = child.stderr.read().decode() if child.stderr else ""
    if child.stderr:
        child.stderr.close()
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({child.returncode}): {err}")
    return wall, usage.ru_utime + usage.ru_stime


def _commands(session: str, bare_store: Path) -> dict[str, list[str]]:
    cli = [sys.executable, "-m", "forge_ledger"]
    folding = ["--store", str(bare_store)]
    return {
        "baseline": [sys.executable, "-c", BASELINE],
        "--help": [*cli, "--help"],
        "sessions": [*cli, "sessions"],
        "show S": [*cli, "show", session],
        "spec S": [*cli, "spec", session],
        "audit S": [*cli, "audit", session],
        "sessions, folding": [*cli, "sessions", *folding],
        "show S, folding": [*cli, "show", session, *folding],
    }


def _without_read_model(store: Path) -> Path:
    """A copy of ``store`` (in a folder of its own) with no read model beside it."""
    copy = store.parent / "without-read-model" / store.name
    copy.parent.mkdir()
    shutil.copy(store, copy)
    return copy


def measure(turns: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="startup-bench-") as tmp:
        store = Path(tmp) / "store.sqlite"
        session = _make_store(store)
        env = _env(store)
        commands = _commands(session[:8], _without_read_model(store))
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        for turn in range(turns + 1):  # turn 0 warms the caches up and is not counted
            print(f"turn {turn}/{turns}", file=sys.stderr)
            for name, argv in commands.items():
                result = _timed(argv, env, Path(tmp))
                if turn:
                    times[name].append(result)
    wall = {name: statistics.median(w for w, _ in t) for name, t in times.items()}
    cpu = {name: statistics.median(c for _, c in t) for name, t in times.items()}
    out: dict[str, Any] = {
        "turns": turns,
        "baseline": {"command": f'python -c "{BASELINE}"', "wall_s": round(wall["baseline"], 4),
                     "cpu_s": round(cpu["baseline"], 4)},
        "commands": {},
    }
    for name, goal in GOALS.items():
        wall_ratio = wall[name] / wall["baseline"]
        cpu_ratio = cpu[name] / cpu["baseline"]
        out["commands"][name] = {
            "wall_s": round(wall[name], 4),
            "cpu_s": round(cpu[name], 4),
            "wall_ratio": round(wall_ratio, 2),
            "cpu_ratio": round(cpu_ratio, 2),
            "goal": goal,
            "wall_met": wall_ratio <= goal,
            "met": min(wall_ratio, cpu_ratio) <= goal,
        }
    out["goals_met"] = all(c["met"] for c in out["commands"].values())
    out["folding"] = {
        name: {"wall_s": round(wall[name], 4), "cpu_s": round(cpu[name], 4),
               "wall_ratio": round(wall[name] / wall["baseline"], 2),
               "cpu_ratio": round(cpu[name] / cpu["baseline"], 2)}
        for name in wall if name.endswith("folding")
    }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="three turns, for CI")
    parser.add_argument("--turns", type=int, default=None, help="turns counted (default 5)")
    args = parser.parse_args(argv)
    turns = max(1, args.turns or (3 if args.quick else 5))
    out = measure(turns)
    out["quick"] = args.quick
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
