"""Replay benchmark: replay time by session length, and storage bytes per byte of model text.

Prints one JSON object on stdout (progress on stderr):

* ``replay`` — wall time of ``replay_session`` on sessions of 10, 100 and 1,000 rounds with
  four participants (best of ``--repeat`` runs). Goal: a 100-round session in ≤ 1 s.
* ``build_ratio`` — the live build time of the largest session over the next size's (1,000
  vs 100 rounds by default). Goal ≤ 12: the cost of a live session is linear in its length.
* ``storage`` — at 50 rounds: bytes stored per byte of model text, where model text is the sum
  of the UTF-8 sizes of every recorded response. Two numerators, both reported:
  ``file_ratio`` (the SQLite file, WAL checkpointed: what a user's disk holds, including
  snapshots and indexes) and ``rows_ratio`` (the ``stored_events`` row payloads only: what the
  event format itself costs, texts by reference). ``texts_ratio``: the distinct texts, each
  stored once (``forge_texts``); ``snapshots_ratio``: the snapshots kept (states with answers
  by reference). Goal ≤ 2 on ``file_ratio``, the figure a user sees.
  ``checkpoint_per_step`` is measured in the same run for comparison: the full session state
  JSON (answers inline) stored after every event in a scratch SQLite table (as LangGraph's
  ``SqliteSaver`` stores a checkpoint per step), its file size over the same model text.
* ``storage_cli`` — a real session: ``forge-ledger run`` in a child process, six participants
  (``--quick``: three) against the scripted OpenAI-compatible server over HTTP, answers of
  300 words (``--quick``: 50) of distinct prose, to a budget of 14 rounds (``--cli-rounds``);
  the store file (WAL checkpointed) over the model text it recorded. Goal ≤ 2.
  ``beside_bytes`` are the files the run writes beside the store (export, document).

Sessions are produced by the real :class:`~forge_ledger.orchestrator.Orchestrator` with an
in-process scripted provider (no HTTP, no latency), so their events are exactly what a live
run records and the replay re-runs the same code. They never converge: every vote disagrees,
the session is attended (it pauses after each vote for a human answer) and, past iteration
16, the human goes ``back 5`` at each pause — the refinement depth is capped
(``max_recursive_depth`` ≤ 100, i.e. ~305 rounds), rewound rounds are kept in the ledger and
replayed, and only active rounds count towards the cap — so one session can reach 1,000
rounds. ``rounds`` in the output counts every recorded round, rewound ones included.

``--quick`` shrinks the sizes so CI can smoke-test the script in seconds; its figures are
not meaningful.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

from forge_ledger.clock import FixedStepClock, SequentialIds
from forge_ledger.domain.values import (
    ModelResponse,
    Participant,
    ParticipantRole,
    Price,
    RoundKind,
    SessionConfig,
    SessionStatus,
    TokenCount,
    Topic,
)
from forge_ledger.ledger import Ledger
from forge_ledger.ledger.texts import TEXT_TABLE
from forge_ledger.orchestrator import NoWallTime, Orchestrator
from forge_ledger.providers import ProviderCall
from forge_ledger.records.replay import replay_session
from forge_ledger.testing import FakeOpenAIServer

REPLAY_GOAL_SECS = 1.0
REPLAY_GOAL_ROUNDS = 100
BUILD_GOAL_RATIO = 12.0
"""Building a session live: 10× the rounds may cost at most this many times the time."""
STORAGE_GOAL_RATIO = 2.0
_REWIND_FROM = 16
"""Iteration after which a pause also goes ``back 5`` (long sessions only)."""
_PRICE = Price(input_cost_per_token=1e-7, output_cost_per_token=2e-7, source="user")
def _vocabulary(size: int = 1000, seed: int = 12) -> list[str]:
    """Pronounceable pseudo-words: prose built from them compresses like English prose does
    (zlib on 2 KB: ~1.8x, the README's own prose ~1.9x), so the storage figure is not flattered
    by compressing a repeated paragraph (which zlib shrinks ~25x)."""
    rng = random.Random(seed)
    consonants, vowels = "bcdfghklmnprstvwz", "aeiou"
    words: set[str] = set()
    while len(words) < size:
        syllables = rng.choice((1, 2, 2, 3, 3, 4))
        word = "".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(syllables))
        words.add(word + (rng.choice(consonants) if rng.random() < 0.5 else ""))
    return sorted(words)


_VOCABULARY = _vocabulary()


def _prose(key: str, size: int) -> str:
    """``size`` characters of distinct prose for ``key`` (the same key, the same text)."""
    rng = random.Random(key)
    words = " ".join(rng.choice(_VOCABULARY) for _ in range(size // 3))
    return ". ".join(words[i : i + 80] for i in range(0, len(words), 80))[:size]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class ScriptedProvider:
    """Answers instantly from the round kind in the prompt's first line (no network).

    Every answer holds about ``text_bytes`` of prose (drafts and syntheses as Markdown, the
    structured answers in their free-text field), like the 2 KB texts of the LangGraph
    measurement in the notes; every vote disagrees so the session goes on.
    """

    def __init__(self, text_bytes: int = 2000) -> None:
        self._text_bytes = text_bytes

    async def complete(
        self, call: ProviderCall, on_delta: Callable[[str], None] | None = None
    ) -> ModelResponse:
        user = next(m.content for m in reversed(call.messages) if m.role == "user")
        kind = RoundKind(user.split("\n", 1)[0].split(" · ")[1])
        who = call.participant.name
        content = self._content(kind, who, call.round)
        tokens = TokenCount(
            input=sum(len(m.content) for m in call.messages) // 4, output=len(content) // 4
        )
        cost = tokens.input * _PRICE.input_cost_per_token + (
            tokens.output * _PRICE.output_cost_per_token
        )
        if on_delta is not None:  # the whole answer as one streamed delta
            on_delta(content)
        return ModelResponse(
            content=content,
            model=call.participant.model,
            tokens=tokens,
            cost_usd=cost,
            price=_PRICE,
            duration_ms=0,
            finish_reason="stop",
        )

    def _content(self, kind: RoundKind, who: str, round_no: int) -> str:
        return _answer(kind, who, round_no, _prose(f"{kind.value}/{who}/{round_no}",
                                                   self._text_bytes))

    def price(self, participant: Participant) -> Price | None:
        return participant.price or _PRICE

    async def aclose(self) -> None:
        return None


def _answer(kind: RoundKind, who: str, round_no: int, text: str) -> str:
    """A participant's answer in ``kind``'s format, holding ``text`` as its prose: a Markdown
    document for drafts and syntheses, the structured answer's free-text field otherwise. Every
    vote disagrees, so a session goes on to its round budget."""
    if kind in (RoundKind.DRAFT, RoundKind.SYNTHESIS):
        return f"# {kind.value} by {who}, round {round_no}\n\n{text}"
    # Structured answers carry about as much prose as a draft, in their free-text field.
    if kind is RoundKind.CRITIQUE:
        return json.dumps(
            {
                "strengths": [f"{who} finds the event model sound"],
                "weaknesses": [text],
                "suggestions": [
                    {
                        "text": "specify retention",
                        "section": "Storage",
                        "priority": 2,
                        "category": "completeness",
                    }
                ],
                "score": 60,
            }
        )
    if kind in (RoundKind.RESPONSE, RoundKind.REFINEMENT):
        return json.dumps(
            {
                "stance": "disagree",
                "reasoning": f"round {round_no}: {text}",
                "concerns": ["retention policy"],
                "strength": 0.6,
                "topics": ["retention"],
            }
        )
    return json.dumps(
        {
            "agrees": False,
            "stance": "disagree",
            "score": 40,
            "concerns": ["retention policy"],
            "reasoning": f"round {round_no}: {text}",
        }
    )


async def _no_sleep(_: float) -> None:
    return None


def _participants() -> list[Participant]:
    roles = [
        ParticipantRole.DRAFTER,
        ParticipantRole.CRITIC,
        ParticipantRole.SYNTHESIZER,
        ParticipantRole.DEVILS_ADVOCATE,
    ]
    return [
        Participant(name=f"m{i + 1}", model=f"openai/m{i + 1}", role=role, price=_PRICE)
        for i, role in enumerate(roles)
    ]


def build_session(ledger: Ledger, rounds: int, *, text_bytes: int = 2000) -> UUID:
    """Run the real orchestrator until the session holds ``rounds`` rounds (or stops)."""
    clock = FixedStepClock(datetime(2026, 1, 1, tzinfo=UTC), timedelta(seconds=1))
    orch = Orchestrator(
        ledger,
        ScriptedProvider(text_bytes),
        clock=clock,
        ids=SequentialIds(f"replay-bench-{rounds}"),
        sleep=_no_sleep,
        wall_time=NoWallTime(),
    )
    config = SessionConfig(
        max_rounds=min(rounds, 10_000),
        max_time_secs=10**9,
        max_cost_usd=1e6,
        attended=True,
        max_recursive_depth=100,
        convergence_threshold=0.99,
    )
    topic = Topic(title=f"Replay benchmark {rounds} rounds", description="A long deliberation.")

    async def go() -> UUID:
        sid = orch.start(topic, config, _participants())
        state = await orch.run(sid)
        while state.status is SessionStatus.PAUSED and len(state.rounds) < rounds:
            agg = ledger.get(sid)
            agg.human_input(author="bench", text="keep going", at=clock.now())
            # Pauses only come at iterations not answered yet, so the refinement depth still
            # grows by one per pause; going back 5 each time makes that ~18 rounds per step.
            while agg.state.iteration > _REWIND_FROM and agg.state.iteration > 5:
                agg.rewind(5, at=clock.now())
            ledger.save(agg)
            state = await orch.resume(sid)
        return sid

    return asyncio.run(go())


def measure_replay(rounds: int, repeat: int, workdir: Path) -> dict[str, Any]:
    path = workdir / f"replay-{rounds}.sqlite"
    with Ledger(str(path)) as ledger:
        t0 = time.perf_counter()
        sid = build_session(ledger, rounds)
        build_secs = time.perf_counter() - t0
        state = ledger.state(sid)
        times: list[float] = []
        result = None
        for _ in range(repeat):
            t0 = time.perf_counter()
            result = replay_session(ledger, sid)
            times.append(time.perf_counter() - t0)
        assert result is not None
    return {
        "rounds": len(state.rounds),
        "participants": len(state.participants),
        "events": result.events,
        "identical": result.ok,
        "calls_served": result.calls_served,
        "replay_secs": round(min(times), 4),
        "events_per_sec": round(result.events / min(times)) if min(times) > 0 else None,
        "build_secs": round(build_secs, 2),
    }


def _file_bytes(path: Path) -> int:
    """The database file and its WAL and shared-memory files, if any (not the folder of
    session leases the CLI keeps beside it)."""
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if p.is_file())


def _model_text_bytes(events: list[Any]) -> int:
    """What every storage figure is a multiple of: the UTF-8 sizes of the recorded answers."""
    return sum(
        len(e.data["response"]["content"].encode("utf-8"))
        for e in events
        if e.type == "ContributionRecorded"
    )


def measure_storage(rounds: int, workdir: Path) -> dict[str, Any]:
    path = workdir / f"storage-{rounds}.sqlite"
    with Ledger(str(path)) as ledger:
        sid = build_session(ledger, rounds)
        events = list(ledger.events(sid))
        states = [ledger.state(sid, at_event=e.position) for e in events]
        n_rounds = len(states[-1].rounds)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    rows_bytes = conn.execute("SELECT SUM(LENGTH(state)) FROM stored_events").fetchone()[0]
    texts_bytes = conn.execute(
        f"SELECT COALESCE(SUM(LENGTH(CAST(body AS BLOB))), 0) FROM {TEXT_TABLE}"
    ).fetchone()[0]
    snapshots_bytes = conn.execute(
        "SELECT COALESCE(SUM(LENGTH(state)), 0) FROM stored_snapshots"
    ).fetchone()[0]
    conn.close()
    text = _model_text_bytes(events)
    file_bytes = _file_bytes(path)

    cp_path = workdir / f"checkpoints-{rounds}.sqlite"
    cp = sqlite3.connect(cp_path)
    cp.execute("PRAGMA journal_mode=WAL")
    cp.execute(
        "CREATE TABLE checkpoints (thread_id TEXT, checkpoint_id INTEGER, checkpoint BLOB, "
        "PRIMARY KEY (thread_id, checkpoint_id))"
    )
    for e, st in zip(events, states, strict=True):
        cp.execute(
            "INSERT INTO checkpoints VALUES (?, ?, ?)",
            (str(sid), e.position, json.dumps(st.model_dump_with_answers()).encode("utf-8")),
        )
        cp.commit()
    cp.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    cp.close()
    cp_bytes = _file_bytes(cp_path)
    return {
        "rounds": n_rounds,
        "events": len(events),
        "model_text_bytes": text,
        "file_bytes": file_bytes,
        "rows_bytes": rows_bytes,
        "file_ratio": round(file_bytes / text, 3),
        "rows_ratio": round(rows_bytes / text, 3),
        "texts_bytes": texts_bytes,
        "texts_ratio": round(texts_bytes / text, 3),
        "snapshots_bytes": snapshots_bytes,
        "snapshots_ratio": round(snapshots_bytes / text, 3),
        "checkpoint_per_step": {
            "file_bytes": cp_bytes,
            "ratio": round(cp_bytes / text, 3),
        },
        "goal_ratio": STORAGE_GOAL_RATIO,
        "goal_met": file_bytes / text <= STORAGE_GOAL_RATIO,
    }


def _words(key: str, count: int) -> str:
    """``count`` words of distinct prose for ``key``, in sentences of twelve."""
    rng = random.Random(key)
    words = [rng.choice(_VOCABULARY) for _ in range(count)]
    return " ".join(
        " ".join(words[i : i + 12]).capitalize() + "." for i in range(0, count, 12)
    )


def _cli_script(names: list[str], rounds: int, words: int) -> dict[str, Any]:
    """A fake-server script: each participant's answers, each kind's in its format, ``words``
    words of distinct prose each; a participant's n-th answer of a kind is the n-th rule."""
    return {
        name: [
            {"match": f"· {kind.value} ·", "times": 1,
             "content": _answer(kind, name, n, _words(f"cli/{name}/{kind.value}/{n}", words))}
            for kind in RoundKind
            for n in range(1, rounds + 1)
        ]
        for name in names
    }


def measure_cli_storage(
    rounds: int, participants: int, words: int, workdir: Path
) -> dict[str, Any]:
    """A session run by ``forge-ledger run`` (the CLI, in a child process) against the
    scripted OpenAI-compatible server over HTTP, to its round budget: the store file over the
    model text it recorded."""
    names = [f"p{i + 1}" for i in range(participants)]
    store = workdir / "cli" / "ledger.sqlite"
    store.parent.mkdir()
    with FakeOpenAIServer(_cli_script(names, rounds, words)) as server:
        command = [
            sys.executable, "-m", "forge_ledger", "run", "Storage of a real session",
            *[arg for name in names for arg in ("-m", f"openai/{name}")],
            "--api-base", server.url, "--max-rounds", str(rounds), "--threshold", "0.99",
            "--store", str(store), "--json",
        ]
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        proc = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"forge-ledger run failed ({proc.returncode}): {proc.stderr[-500:]}")
    outcome = json.loads(proc.stdout)
    with Ledger(str(store), create=False) as ledger:
        events = list(ledger.events(UUID(outcome["session_id"])))
    text = _model_text_bytes(events)
    conn = sqlite3.connect(store)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    file_bytes = _file_bytes(store)
    beside = sum(
        f.stat().st_size for f in store.parent.rglob("*")
        if f.is_file() and not f.name.startswith(store.name)
    )
    return {
        "rounds": outcome["rounds"],
        "participants": participants,
        "words_per_answer": words,
        "status": outcome["status"],
        "events": len(events),
        "answers": sum(1 for e in events if e.type == "ContributionRecorded"),
        "model_text_bytes": text,
        "file_bytes": file_bytes,
        "file_ratio": round(file_bytes / text, 3),
        "beside_bytes": beside,
        "goal_ratio": STORAGE_GOAL_RATIO,
        "goal_met": file_bytes / text <= STORAGE_GOAL_RATIO,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes for a CI smoke test")
    parser.add_argument("--repeat", type=int, default=3, help="replays per size (best kept)")
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="*",
        default=None,
        help="session lengths in rounds (default 10 100 1000)",
    )
    parser.add_argument("--storage-rounds", type=int, default=None)
    parser.add_argument("--cli-rounds", type=int, default=None,
                        help="rounds of the session run through the CLI (default 14)")
    args = parser.parse_args(argv)
    sizes = args.sizes or ([10, 20] if args.quick else [10, 100, 1000])
    storage_rounds = args.storage_rounds or (10 if args.quick else 50)
    repeat = 1 if args.quick else max(1, args.repeat)
    out: dict[str, Any] = {"quick": args.quick, "replay": {}, "storage": {}}
    with tempfile.TemporaryDirectory(prefix="replay-bench-") as tmp:
        work = Path(tmp)
        for n in sizes:
            log(f"replay: building and replaying a {n}-round session")
            out["replay"][str(n)] = measure_replay(n, repeat, work)
            log(f"  {out['replay'][str(n)]}")
        log(f"storage: {storage_rounds} rounds, event store vs checkpoint per step")
        out["storage"] = measure_storage(storage_rounds, work)
        cli = (args.cli_rounds or 6, 3, 50) if args.quick else (args.cli_rounds or 14, 6, 300)
        log(f"storage: a {cli[0]}-round session of {cli[1]} participants through the CLI, "
            f"{cli[2]}-word answers")
        out["storage_cli"] = measure_cli_storage(*cli, work)
    goal = out["replay"].get(str(REPLAY_GOAL_ROUNDS))
    small = out["replay"].get(str(sizes[-2])) if len(sizes) >= 2 else None
    large = out["replay"][str(sizes[-1])]
    if small and small["build_secs"] > 0:
        # Linear cost: building the largest session against the next size, in the same run.
        out["build_ratio"] = {
            "rounds": [small["rounds"], large["rounds"]],
            "secs": [small["build_secs"], large["build_secs"]],
            "ratio": round(large["build_secs"] / small["build_secs"], 2),
            "rounds_ratio": round(large["rounds"] / max(1, small["rounds"]), 2),
        }
    out["goals_met"] = {
        "replay_100_rounds_secs": (
            goal["replay_secs"] <= REPLAY_GOAL_SECS and goal["identical"] if goal else None
        ),
        "storage_ratio": out["storage"]["goal_met"],
        "storage_cli_ratio": out["storage_cli"]["goal_met"],
        "build_ratio": (
            out["build_ratio"]["ratio"] <= BUILD_GOAL_RATIO if "build_ratio" in out else None
        ),
    }
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
