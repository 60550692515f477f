"""Answer benchmark: a huge answer streamed one word per chunk, memory and CPU per chunk.

Prints one JSON object on stdout (progress on stderr). The shipped OpenAI-compatible fake
server runs in a child process (``forge-ledger fake-server``), so only the client's work is
measured: the real provider (litellm, the OpenAI SDK, httpx) streams each answer over HTTP.

* ``large`` — a 2 MB answer (``--quick``: 64 kB) of distinct words, one word per chunk:
  CPU seconds, chunks and CPU microseconds per chunk.
* ``large_memory`` — the same answer again under ``tracemalloc``: the peak of memory
  allocated during the call above what was allocated before it; ``memory_ratio`` is that
  peak over the answer's size. Goal ≤ 3.
* ``small`` — an answer 1/16 of the large one, measured the same way in the same process.
* ``cpu_per_chunk_ratio`` — CPU per chunk of the large answer over that of the small one,
  each net of a one-word call's CPU (the fixed cost of a call). Goal ≤ 1.5: the cost of a
  chunk does not grow with the answer's length.
* ``ceiling`` — the large answer asked for with ``max_tokens`` of a tenth of its words: the
  stream must end at the output ceiling (``max_tokens`` plus its margin) with the answer
  marked cut off at its limit, and the chunks accepted are reported.

``--quick`` smoke-tests the script in about a minute; its memory figure is not meaningful (a
call's fixed allocations, about 1.6 MB, dwarf a 64 kB answer).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from forge_ledger.domain.values import ChatMessage, Participant
from forge_ledger.engine import output_ceiling
from forge_ledger.providers import LiteLLMProvider, ProviderCall

WORD_BYTES = 8  # "w000123 ": distinct words (litellm refuses a chunk repeated many times)


def _words(n: int) -> str:
    return "".join(f"w{i:06d} " for i in range(n))


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class _Server:
    """``forge-ledger fake-server`` in a child process, answering from a JSON script."""

    def __init__(self, script: dict[str, Any], workdir: Path) -> None:
        path = workdir / "script.json"
        path.write_text(json.dumps(script), encoding="utf-8")
        env = {**os.environ, "FORGE_LEDGER_YAML_MAX_BYTES": str(64 * 1024 * 1024)}
        exe = Path(sys.executable).with_name("forge-ledger")
        self.proc = subprocess.Popen(
            [str(exe), "fake-server", "--script", str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http"):
            self.stop()
            raise SystemExit("the fake server did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


async def _call(
    provider: LiteLLMProvider, url: str, model: str, max_tokens: int, *, memory: bool = False
) -> dict[str, Any]:
    """One call; with ``memory``, under tracemalloc (which slows it: its CPU is not used)."""
    participant = Participant(name=model, model=f"openai/{model}", api_base=url)
    call = ProviderCall(
        participant=participant,
        messages=(ChatMessage(role="user", content="write"),),
        max_tokens=max_tokens,
        output_ceiling=output_ceiling(max_tokens),
        temperature=0.0,
        timeout_secs=3600.0,
    )
    chunks = 0

    def count(_delta: str) -> None:
        nonlocal chunks
        chunks += 1

    if memory:
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
    cpu = time.process_time()
    response = await provider.complete(call, on_delta=count)
    cpu = time.process_time() - cpu
    size = len(response.content.encode("utf-8"))
    out: dict[str, Any] = {
        "answer_bytes": size,
        "chunks": chunks,
        "cpu_s": round(cpu, 3),
        "stop_reason": response.stop_reason.value,
    }
    if memory:
        peak = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.stop()
        out["peak_above_baseline_bytes"] = peak
        out["memory_ratio"] = round(peak / size, 3) if size else None
    return out


def _per_chunk(run: dict[str, Any], fixed: dict[str, Any]) -> float:
    extra = max(run["chunks"] - fixed["chunks"], 1)
    return max(run["cpu_s"] - fixed["cpu_s"], 0.0) / extra


async def _measure(url: str, large_words: int) -> dict[str, Any]:
    provider = LiteLLMProvider()
    try:
        await _call(provider, url, "one", 16)  # imports litellm, opens the connection pool
        fixed = await _call(provider, url, "one", 16)
        _log("small answer…")
        small = await _call(provider, url, "small", large_words)
        _log(f"large answer ({large_words * WORD_BYTES:,} bytes)…")
        large = await _call(provider, url, "large", large_words + 1)
        _log("large answer, memory traced…")
        traced = await _call(provider, url, "large", large_words + 1, memory=True)
        _log("large answer under a ceiling…")
        capped = await _call(provider, url, "large", large_words // 10)
    finally:
        await provider.aclose()
    small["cpu_per_chunk_us"] = round(_per_chunk(small, fixed) * 1e6, 2)
    large["cpu_per_chunk_us"] = round(_per_chunk(large, fixed) * 1e6, 2)
    per_small = small["cpu_per_chunk_us"]
    ratio = large["cpu_per_chunk_us"] / per_small if per_small else None
    return {
        "fixed_call": fixed,
        "small": small,
        "large": large,
        "large_memory": traced,
        "cpu_per_chunk_ratio": None if ratio is None else round(ratio, 3),
        "ceiling": {
            "max_tokens": large_words // 10,
            "output_ceiling": output_ceiling(large_words // 10),
            "chunks_accepted": capped["chunks"],
            "stop_reason": capped["stop_reason"],
        },
        "goals": {
            "memory_ratio_max": 3.0,
            "cpu_per_chunk_ratio_max": 1.5,
            "memory_ok": traced["memory_ratio"] is not None and traced["memory_ratio"] <= 3.0,
            "cpu_ok": ratio is not None and ratio <= 1.5,
            "ceiling_ok": capped["stop_reason"] == "max_tokens"
            and capped["chunks"] == output_ceiling(large_words // 10),
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a 64 kB answer (smoke test)")
    args = parser.parse_args(argv)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    large_words = 8_000 if args.quick else (2 * 1024 * 1024) // WORD_BYTES
    script = {
        "one": "w000000 ",
        "small": _words(large_words // 16),
        "large": _words(large_words),
    }
    with tempfile.TemporaryDirectory(prefix="forge-answer-bench-") as tmp:
        server = _Server(script, Path(tmp))
        try:
            started = time.monotonic()
            result = asyncio.run(_measure(server.url, large_words))
        finally:
            server.stop()
    result["quick"] = args.quick
    result["wall_s"] = round(time.monotonic() - started, 1)
    result["max_rss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
