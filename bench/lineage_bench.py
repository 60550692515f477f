"""Document lineage benchmark: ``fold_lineage`` on a 50-round session.

Prints one JSON object on stdout (progress on stderr):

* ``lineage_ms`` — best-of-``--repeat`` wall time of
  :func:`forge_ledger.projections.document.fold_lineage` over the session's final state.
  Goal: under 100 ms for 50 rounds.
* ``baseline_ms`` — in the same process, a copy of the same state
  (``SessionState.model_validate(state.model_dump())``: what loading the state for ``spec``
  costs at the least), and ``ratio`` = lineage / baseline, the figure to compare across
  machines.

The session is built in memory through the real ``Deliberation`` aggregate (no store, no
model): four participants, a draft round, then iterations of critique → synthesis →
convergence → refinement, each synthesis about 2 KB of Markdown that rewrites, adds and drops a
few sentences (a seeded generator, so every run builds the same session).

``--quick`` builds 12 rounds so CI can smoke-test the script in seconds.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from forge_ledger.clock import FixedStepClock
from forge_ledger.domain import Deliberation
from forge_ledger.domain import events as ev
from forge_ledger.domain.state import SessionState
from forge_ledger.domain.values import (
    ChatMessage,
    Critique,
    ModelResponse,
    Participant,
    RoundKind,
    SessionConfig,
    Suggestion,
    Topic,
)
from forge_ledger.projections.document import fold_lineage

NAMES = ("alice", "bob", "carol", "dave")
WORDS = (
    "event", "ledger", "replay", "chain", "hash", "store", "session", "round", "vote", "dissent",
    "export", "audit", "retention", "backoff", "retry", "budget", "model", "prompt", "answer",
    "synthesis", "critique", "refinement", "snapshot", "schema",
)


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(8, 16))]
    return " ".join(words).capitalize() + "."


def _document(lines: list[str]) -> str:
    out = ["# Design\n"]
    for i, line in enumerate(lines):
        if i % 6 == 0:
            out.append(f"\n## Part {i // 6 + 1}\n")
        out.append(f"- {line}\n" if i % 3 == 0 else f"{line}\n")
    return "".join(out)


def _evolve(rng: random.Random, lines: list[str]) -> list[str]:
    lines = list(lines)
    for _ in range(3):  # rewrite: change two words of a sentence
        i = rng.randrange(len(lines))
        words = lines[i].rstrip(".").split()
        for _ in range(2):
            words[rng.randrange(len(words))] = rng.choice(WORDS)
        lines[i] = " ".join(words) + "."
    for _ in range(2):
        lines.insert(rng.randrange(len(lines) + 1), _sentence(rng))
    del lines[rng.randrange(len(lines))]
    return lines


class _Session:
    def __init__(self) -> None:
        self.clock = FixedStepClock(datetime(2026, 1, 1, tzinfo=UTC), timedelta(seconds=1))
        self.agg = Deliberation.start(
            session_id=uuid.UUID(int=1), topic=Topic(title="Lineage bench"),
            config=SessionConfig(max_rounds=1000),
            participants=[Participant(name=n, model=f"openai/{n}") for n in NAMES],
            at=self.clock.now(),
        )

    def round(self, kind: RoundKind, iteration: int, texts: dict[str, str]) -> int:
        r = self.agg.start_round(kind=kind, iteration=iteration, participants=tuple(texts),
                                 at=self.clock.now())
        for name, text in texts.items():
            msgs = (ChatMessage(role="user", content=f"round {r}"),)
            self.agg.record_contribution(
                round=r, participant=name, model=f"openai/{name}", messages=msgs,
                params=ev.CallParams(temperature=0.0, max_tokens=1024),
                prompt_hash=ev.prompt_hash(msgs),
                response=ModelResponse(content=text, model=f"openai/{name}"),
                at=self.clock.now(),
            )
        return r

    def done(self, r: int) -> None:
        self.agg.complete_round(round=r, at=self.clock.now())


def build(rounds: int) -> SessionState:
    rng = random.Random(20261123)
    s = _Session()
    lines = [_sentence(rng) for _ in range(24)]
    s.done(s.round(RoundKind.DRAFT, 1, {n: _document(_evolve(rng, lines)) for n in NAMES}))
    made, iteration = 1, 1
    while made < rounds:
        r = s.round(RoundKind.CRITIQUE, iteration, {n: '{"score": 70}' for n in NAMES})
        for i, n in enumerate(NAMES):
            s.agg.record_critique(
                round=r, participant=n, at=s.clock.now(),
                critique=Critique(target=NAMES[(i + 1) % 4],
                                  suggestions=(Suggestion(text=_sentence(rng)),)),
            )
        s.done(r)
        lines = _evolve(rng, lines)
        s.done(s.round(RoundKind.SYNTHESIS, iteration, {"carol": _document(lines)}))
        s.done(s.round(RoundKind.CONVERGENCE, iteration, {n: '{"agrees": false}' for n in NAMES}))
        iteration += 1
        proposals = {n: _document(_evolve(rng, lines)[:8]) for n in NAMES}
        s.done(s.round(RoundKind.REFINEMENT, iteration, proposals))
        made += 4
    return s.agg.state


def _best(fn: Any, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a 12-round session, for CI")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    rounds = args.rounds or (12 if args.quick else 50)
    print(f"building a {rounds}-round session…", file=sys.stderr)
    state = build(rounds)
    lineage = fold_lineage(state)
    repeat = 1 if args.quick else max(1, args.repeat)
    lineage_ms = _best(lambda: fold_lineage(state), repeat)
    baseline_ms = _best(lambda: SessionState.model_validate(state.model_dump()), repeat)
    out = {
        "quick": args.quick,
        "rounds": len(state.rounds),
        "contributions": sum(len(r.contributions) for r in state.rounds),
        "document_chars": len(lineage.text),
        "sentences": len(lineage.sentences),
        "dropped": len(lineage.dropped),
        "lineage_ms": round(lineage_ms, 2),
        "baseline_ms": round(baseline_ms, 2),
        "ratio": round(lineage_ms / baseline_ms, 2) if baseline_ms else None,
        "goal_ms": 100,
        "goal_met": lineage_ms < 100,
    }
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
