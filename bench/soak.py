"""Kill -9 soak: a real ``forge-ledger run`` is killed at random instants and resumed each time.

Prints one JSON document on stdout (progress on stderr)::

    {"kills": N, "lost": 0, "duplicated": 0, "resumed": N, "replay_identical": true, …}

What one soak does:

1. An uninterrupted reference run of the script (four participants on the scripted
   OpenAI-compatible server, with latency and transient faults: 429 with Retry-After, 500,
   503, a mid-stream disconnect, a malformed chunk, an empty body, a stream with no finish)
   records how many events a whole session has (``N``) and its outcome: status, votes, and the
   forged document (``SessionState.document_source``) as of every iteration.
2. The kill instants are drawn from a seeded generator: one event position in each of
   ``kills - 1`` equal strata of the session's positions (so they spread over the whole
   session), then the seal itself; and a delay of up to 0.25 s after the store reaches that
   position — which lands kills inside rounds (calls in flight), between rounds, during the
   finish-and-seal save and during the YAML export that follows it. When a resumed process
   starts past its target (a kill lands in the middle of a burst of commits), the delay starts
   at its first model call instead; when the session had already ended (a kill landed during
   the export), at most 1 s after the process started.
3. ``forge-ledger run`` starts in a child process; at each instant it gets SIGKILL and
   ``forge-ledger resume`` takes over (and is killed in turn), until the last one finishes.
   A process that ends before its instant is not a kill: the instant is drawn again on the next
   process, so every soak makes exactly ``kills`` kills.
4. After every kill, in this process: positions are contiguous; every event committed before
   is still there unchanged (``lost`` counts contributions that vanished); no contribution,
   critique, opinion, vote or round is recorded twice (``duplicated``); ``verify`` passes;
   ``replay`` is identical. At the end the outcome must equal the reference run's, the last
   event is the seal, and the YAML export on disk equals a fresh export of the store.

The scripted server lives in this process, so killing the runner leaves it up, exactly like a
provider outliving a crashed client. ``--seed`` reproduces the instants (timing on a loaded
machine still varies by milliseconds). ``--quick`` makes 3 kills so CI can smoke-test the
script; its figures are not meaningful.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import UUID

import yaml

from forge_ledger.domain.values import RoundKind
from forge_ledger.ledger import Ledger, RecordedEvent, verify_session
from forge_ledger.ledger.outputs import store_outputs
from forge_ledger.ledger.store import resolve_store
from forge_ledger.records.replay import replay_session
from forge_ledger.testing import FakeOpenAIServer, bundled_script
from forge_ledger.yaml_format.export import export_events

__all__ = [
    "KillRecord",
    "SoakResult",
    "main",
    "outcome_of",
    "run_soak",
    "soak_script",
]

TOPIC = "Event log for multi-model deliberations"
ROLES = {"alice": "drafter", "bob": "critic", "carol": "synthesizer", "dave": "devils_advocate"}
LATENCY = 0.03
"""Seconds before each scripted reply's first byte."""
CHUNK_DELAY = 0.004
"""Seconds between streamed words, so that kills also land in the middle of streams."""
PROCESS_TIMEOUT = 240.0

# One transient fault per (participant, round), at most max_attempts - 1 in a row: whichever
# instant a kill lands at, every participant still gets its answer, so the outcome of an
# interrupted session must equal the reference run's.
FAULTS: dict[str, list[dict[str, Any]]] = {
    "alice": [
        {"match": "· draft ·", "fault": "rate_limit", "retry_after": 0.2, "times": 1},
        {"match": "· convergence · iteration 2", "fault": "no_finish", "times": 1},
    ],
    "bob": [{"match": "· critique ·", "fault": "disconnect", "times": 1}],
    "carol": [
        {"match": "· synthesis · iteration 1", "fault": "server_error", "times": 1},
        {"match": "· synthesis · iteration 2", "fault": "empty", "times": 1},
    ],
    "dave": [
        {"match": "· convergence · iteration 1", "fault": "malformed_chunk", "times": 1},
        {"match": "· refinement ·", "fault": "unavailable", "times": 1},
    ],
}

_ANSWERS = ("ContributionRecorded", "CritiqueRecorded", "OpinionRecorded", "VoteRecorded")


def soak_script() -> dict[str, list[dict[str, Any]]]:
    """The offline demo's four voices, streamed slowly, with :data:`FAULTS` before them."""
    base = bundled_script("four-voices")
    script: dict[str, list[dict[str, Any]]] = {}
    for name, rules in base.models.items():
        replies = [
            {**r.model_dump(exclude_defaults=True), "chunk_delay": CHUNK_DELAY} for r in rules
        ]
        script[name] = [*FAULTS.get(name, []), *replies]
    return script


# --------------------------------------------------------------------------- outcome


def outcome_of(ledger: Ledger, sid: UUID) -> dict[str, Any]:
    """What an interrupted session must share with an uninterrupted one: status, rounds,
    votes, and the forged document as of each iteration and at the end."""
    state = ledger.state(sid)
    votes = [
        [r.number, c.participant, c.vote.agrees, c.vote.score, c.vote.effective_stance.value]
        for r in state.rounds
        if r.kind is RoundKind.CONVERGENCE
        for c in r.contributions
        if c.vote is not None
    ]
    documents = [
        ledger.state(sid, at_iteration=k).latest_text for k in range(1, state.iteration + 1)
    ]
    return {
        "status": state.status.value,
        "reason": state.status_reason,
        "rounds": [[r.number, r.kind.value, r.iteration, list(r.expected)] for r in state.rounds],
        "votes": votes,
        "documents": [*documents, state.latest_text],
    }


# --------------------------------------------------------------------------- the store


@dataclass
class StoreCheck:
    """What the checks after one kill found."""

    events: int
    lost: int
    duplicated: int
    verified: bool
    replay_identical: bool
    problems: list[str] = field(default_factory=list)


def _answer_keys(events: list[RecordedEvent]) -> Counter[tuple[Any, ...]]:
    """One key per recorded answer: a participant answers (and is repaired) at most once per
    round, and each answer is parsed at most once."""
    keys: Counter[tuple[Any, ...]] = Counter()
    for e in events:
        if e.type == "ContributionRecorded":
            keys[(e.type, e.data["round"], e.data["participant"], e.data["purpose"])] += 1
        elif e.type in _ANSWERS or e.type == "ParseFailed":
            keys[(e.type, e.data["round"], e.data["participant"])] += 1
        elif e.type in ("RoundStarted", "RoundCompleted"):
            keys[(e.type, e.data.get("number", e.data.get("round")))] += 1
    return keys


def check_store(store: Path, before: list[RecordedEvent]) -> tuple[StoreCheck, list[RecordedEvent]]:
    """Check the store after a kill against the events seen after the previous one."""
    with Ledger(str(store), create=False) as ledger:
        ids = ledger.session_ids()
        if not ids:
            return StoreCheck(0, 0, 0, True, True), []
        sid = ids[0]
        events = list(ledger.events(sid))
        problems: list[str] = []
        positions = [e.position for e in events]
        if positions != list(range(1, len(events) + 1)):
            problems.append(f"positions are not contiguous: {positions[:5]}…")
        kept = {(e.position, e.hash) for e in events}
        vanished = [e for e in before if (e.position, e.hash) not in kept]
        lost = sum(1 for e in vanished if e.type == "ContributionRecorded")
        if vanished:
            problems.append(f"{len(vanished)} committed events vanished or changed")
        dupes = {k: n for k, n in _answer_keys(events).items() if n > 1}
        duplicated = sum(n - 1 for n in dupes.values())
        if dupes:
            problems.append(f"recorded twice: {sorted(dupes)[:3]}")
        report = verify_session(ledger, sid)
        if not report.ok:
            problems.append(f"verify: {report.problem}")
        replay = replay_session(ledger, sid)
        if not replay.ok:
            assert replay.difference is not None
            problems.append(f"replay: {replay.difference.message}")
        check = StoreCheck(len(events), lost, duplicated, report.ok, replay.ok, problems)
        return check, events


def _head(store: Path) -> tuple[int, str]:
    """The session's newest position and event type, read cheaply while the writer runs
    ((0, "") before the first event)."""
    if not store.exists():
        return 0, ""
    try:
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=5) as conn:
            row = conn.execute(
                "SELECT originator_version, topic FROM stored_events WHERE originator_id = "
                "(SELECT originator_id FROM stored_events "
                " WHERE topic = 'forge_ledger:SessionStarted' LIMIT 1) "
                "ORDER BY originator_version DESC LIMIT 1"
            ).fetchone()
    except sqlite3.Error:
        return 0, ""
    if not row:
        return 0, ""
    return int(row[0]), str(row[1]).rsplit(":", 1)[-1]


# --------------------------------------------------------------------------- processes


def _env(store: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["FORGE_LEDGER_STORE"] = str(store)
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    return env


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "forge_ledger", *args]


def _participants_file(directory: Path, url: str) -> Path:
    path = directory / "participants.yaml"
    people = [
        {
            "name": name,
            "model": f"openai/{name}",
            "role": role,
            "api_base": url,
            "temperature": 0.2,
            "price": {"input_cost_per_token": 3e-6, "output_cost_per_token": 15e-6},
        }
        for name, role in ROLES.items()
    ]
    path.write_text(yaml.safe_dump({"participants": people}), encoding="utf-8")
    return path


def _start(args: list[str], directory: Path, store: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        _cli(*args),
        cwd=directory,
        env=_env(store),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _finish(proc: subprocess.Popen[bytes]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=PROCESS_TIMEOUT)
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


# --------------------------------------------------------------------------- one soak


@dataclass
class KillRecord:
    """One kill: the instant aimed at and where the session was when it landed."""

    index: int
    target: int
    """Event position aimed at (a stratum of the reference run's positions)."""
    trigger: str
    """What started the delay: ``position``, ``request`` or ``start`` (see ``_trigger``)."""
    delay: float
    head_at_kill: int
    ended_at_kill: bool
    """The session's last event (the seal) was already committed: the kill hit the export."""


@dataclass
class SoakResult:
    seed: int
    kills: int = 0
    resumed: int = 0
    lost: int = 0
    duplicated: int = 0
    replays: int = 0
    replay_identical: bool = True
    verified: bool = True
    outcome_identical: bool = False
    export_identical: bool = False
    sealed: bool = False
    reference_events: int = 0
    final_events: int = 0
    missed_instants: int = 0
    seconds: float = 0.0
    records: list[KillRecord] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    reference: dict[str, Any] = field(default_factory=dict)
    outcome: dict[str, Any] = field(default_factory=dict)

    def landed(self) -> dict[str, int]:
        """Where the kills landed: before the first event, during the session, after its
        seal (during the export or the process's exit)."""
        where = Counter(
            "after_seal" if r.ended_at_kill else "during_session" if r.head_at_kill else "startup"
            for r in self.records
        )
        return {k: where.get(k, 0) for k in ("startup", "during_session", "after_seal")}

    def as_json(self) -> dict[str, Any]:
        return {
            "kills": self.kills,
            "lost": self.lost,
            "duplicated": self.duplicated,
            "resumed": self.resumed,
            "replay_identical": self.replay_identical,
            "replays": self.replays,
            "verified": self.verified,
            "outcome_identical": self.outcome_identical,
            "export_identical": self.export_identical,
            "sealed": self.sealed,
            "seed": self.seed,
            "reference_events": self.reference_events,
            "final_events": self.final_events,
            "kills_landed": self.landed(),
            "kill_triggers": dict(Counter(r.trigger for r in self.records)),
            "missed_instants": self.missed_instants,
            "seconds": round(self.seconds, 1),
            "problems": self.problems,
        }


def reference_run(directory: Path) -> tuple[int, dict[str, Any], float]:
    """The same script, uninterrupted: its number of events, its outcome, its duration."""
    directory.mkdir(parents=True, exist_ok=True)
    store = directory / "reference.sqlite"
    with FakeOpenAIServer(soak_script(), latency=LATENCY) as server:
        pfile = _participants_file(directory, server.url)
        started = time.monotonic()
        rc, _out, err = _finish(_start(["run", TOPIC, "--participants", str(pfile), "--json"],
                                       directory, store))
        took = time.monotonic() - started
    if rc != 0:
        raise RuntimeError(f"the reference run failed ({rc}): {err[-800:]}")
    with Ledger(str(store), create=False) as ledger:
        sid = ledger.session_ids()[0]
        return ledger.state(sid).version, outcome_of(ledger, sid), took


def schedule(rng: random.Random, kills: int, events: int) -> list[int]:
    """One target position per stratum of the session's positions, then the seal.

    A killed session can have fewer events than the reference run (a fault rule consumed by
    a call in flight when the kill landed is not met again), at most one per fault rule, so
    the strata stop that far before the finish and the seal (``events - 1``, ``events``):
    every target but the last is met before the session ends, and the last one — the seal —
    lands a kill after the seal is committed, during the export."""
    span = max(1, events - sum(len(rules) for rules in FAULTS.values()) - 2)
    targets = []
    for i in range(kills - 1):
        lo = 1 + (i * span) // (kills - 1)
        hi = max(lo, ((i + 1) * span) // (kills - 1))
        targets.append(rng.randint(lo, hi))
    return [*targets, events]


class _Soak:
    def __init__(
        self,
        directory: Path,
        server: FakeOpenAIServer,
        seed: int,
        max_delay: float,
        say: Callable[[str], None],
    ) -> None:
        self.directory = directory
        self.server = server
        self.store = directory / "soak.sqlite"
        self.rng = random.Random(seed)
        self.max_delay = max_delay
        self.say = say
        self.result = SoakResult(seed=seed)
        self.seen: list[RecordedEvent] = []
        self.sid = ""

    def _ended(self) -> bool:
        return bool(self.seen) and self.seen[-1].type == "SessionSealed"

    def _trigger(self, proc: subprocess.Popen[bytes], target: int, start_head: int) -> str:
        """Wait for the instant's trigger; "" if the process ended first.

        ``position``: the store reached the target position (or the seal, as a session with
        fewer retries than the reference ends earlier). ``request``: the session was already
        past the target when the process started, so the instant is in the middle of the
        process's first calls (the server got a new request). ``start``: the session had
        ended before the process started (it only finishes the end)."""
        if self._ended():
            return "start"
        requests = len(self.server.requests)
        deadline = time.monotonic() + PROCESS_TIMEOUT
        while proc.poll() is None and time.monotonic() < deadline:
            head, last_type = _head(self.store)
            if start_head < target and (head >= target or last_type == "SessionSealed"):
                return "position"
            if start_head >= target and len(self.server.requests) > requests:
                return "request"
            time.sleep(0.005)
        return ""

    def _wait_and_kill(self, proc: subprocess.Popen[bytes], target: int, start_head: int) -> bool:
        """Kill ``proc`` at the instant; False if it ended on its own first."""
        trigger = self._trigger(proc, target, start_head)
        span = 1.0 if trigger == "start" else self.max_delay
        delay = self.rng.uniform(0.0, span)
        if not trigger:
            return False
        time.sleep(delay)
        if proc.poll() is not None:
            return False
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        head, last_type = _head(self.store)
        self.result.records.append(
            KillRecord(
                index=len(self.result.records) + 1,
                target=target,
                trigger=trigger,
                delay=round(delay, 3),
                head_at_kill=head,
                ended_at_kill=last_type == "SessionSealed",
            )
        )
        return True

    def _check(self, label: str) -> None:
        check, events = check_store(self.store, self.seen)
        r = self.result
        r.lost += check.lost
        r.duplicated += check.duplicated
        r.replays += 1
        r.replay_identical = r.replay_identical and check.replay_identical
        r.verified = r.verified and check.verified
        r.problems.extend(f"{label}: {p}" for p in check.problems)
        self.seen = events
        if events and not self.sid:
            self.sid = events[0].session_id

    def run(self, targets: list[int], pfile: Path) -> None:
        args = ["run", TOPIC, "--participants", str(pfile), "--json"]
        pending = list(targets)
        while True:
            proc = _start(args, self.directory, self.store)
            start_head = len(self.seen)
            if pending and self._wait_and_kill(proc, pending[0], start_head):
                pending.pop(0)
                self.result.kills += 1
                self._check(f"after kill {self.result.kills}")
                self.say(f"kill {self.result.kills}/{len(targets)} at event "
                         f"{self.result.records[-1].head_at_kill}")
            else:
                rc, _out, err = _finish(proc)
                self._check(f"after process {args[0]} ended")
                if pending:
                    self.result.missed_instants += 1
                if rc != 0:
                    self.result.problems.append(f"{args[0]} exited {rc}: {err.strip()[-500:]}")
                    return
                if not pending:
                    return
            if not self.sid:
                args = ["run", TOPIC, "--participants", str(pfile), "--json"]
                continue
            args = ["resume", self.sid, "--json"]
            self.result.resumed += 1

    def final_checks(self, reference: dict[str, Any]) -> None:
        r = self.result
        if not self.sid:
            r.problems.append("no session was ever recorded")
            return
        with Ledger(str(self.store), create=False) as ledger:
            sid = UUID(self.sid)
            events = list(ledger.events(sid))
            r.final_events = len(events)
            r.sealed = bool(events) and events[-1].type == "SessionSealed"
            r.outcome = outcome_of(ledger, sid)
            r.outcome_identical = r.outcome == reference
            expected_export = export_events(events)
        exports = sorted(store_outputs(resolve_store(self.store)).exports.glob("*.yaml"))
        r.export_identical = len(exports) == 1 and exports[0].read_text("utf-8") == expected_export
        if not r.sealed:
            r.problems.append("the session does not end with its seal")
        if not r.outcome_identical:
            r.problems.append("the outcome differs from the uninterrupted run")
        if not r.export_identical:
            r.problems.append(f"the YAML export on disk is not the session's ({exports})")


def run_soak(
    kills: int,
    *,
    seed: int | None = None,
    directory: Path | None = None,
    max_delay: float = 0.25,
    say: Callable[[str], None] = lambda _msg: None,
) -> SoakResult:
    """One whole soak (see the module docstring); never raises for a failed check — the
    result says what went wrong, with the seed to reproduce it."""
    seed = random.SystemRandom().randrange(2**32) if seed is None else seed
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="forge-ledger-soak-") as tmp:
        root = directory or Path(tmp)
        events, reference, took = reference_run(root / "reference")
        say(f"seed {seed}: reference run {events} events in {took:.1f}s")
        with FakeOpenAIServer(soak_script(), latency=LATENCY) as server:
            soak = _Soak(root / "soak", server, seed, max_delay, say)
            soak.directory.mkdir(parents=True, exist_ok=True)
            soak.result.reference_events = events
            soak.result.reference = reference
            targets = schedule(soak.rng, kills, events)
            pfile = _participants_file(soak.directory, server.url)
            soak.run(targets, pfile)
        soak.final_checks(reference)
    soak.result.seconds = time.monotonic() - started
    return soak.result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--kills", type=int, default=100, help="how many kill -9 (default 100)")
    parser.add_argument("--seed", type=int, default=None, help="reproduce a soak's instants")
    parser.add_argument("--quick", action="store_true", help="3 kills: a smoke test for CI")
    args = parser.parse_args(argv)
    kills = 3 if args.quick else args.kills
    if kills < 1:
        parser.error("--kills must be at least 1")

    def say(msg: str) -> None:
        print(f"soak: {msg}", file=sys.stderr, flush=True)

    result = run_soak(kills, seed=args.seed, say=say)
    doc = {"quick": args.quick, **result.as_json()}
    print(json.dumps(doc, indent=2))
    return 0 if not result.problems else 1


if __name__ == "__main__":
    sys.exit(main())
