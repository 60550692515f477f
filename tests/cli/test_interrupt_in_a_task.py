"""Ctrl-C that lands while a participant's call is running, not while the loop waits.

The first Ctrl-C raises ``KeyboardInterrupt`` wherever the main thread is. When that is inside
a task's step (on a loaded machine, often: a stream chunk or a save in progress), the task ends
with the interrupt as its exception, the loop stops and the command prints its one line. The
task's exception is never retrieved, so asyncio used to print "Task exception was never
retrieved" and a traceback when the task was collected, before or after that line depending on
when the collector ran; and a call whose coroutine was created but not yet awaited made Python warn
at exit that it never was. Here the interrupt is raised from inside a call, so the case is
deterministic rather than a matter of timing.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from forge_ledger.app.demo import demo_participants, demo_topic
from forge_ledger.cli.deliberate import run_session
from forge_ledger.clock import FixedStepClock, SequentialIds
from forge_ledger.domain.values import SessionConfig
from forge_ledger.errors import RunInterrupted
from forge_ledger.ledger import Ledger
from forge_ledger.providers import ProviderCall
from forge_ledger.testing import ScriptedProvider, bundled_script


class _CtrlCDuringACritique:
    """The demo's script, but Ctrl-C lands in a task of the last critic's transport (a task
    the orchestrator does not await, as an HTTP client's own tasks are) while the call waits."""

    def __init__(self) -> None:
        self.inner = ScriptedProvider.from_script(bundled_script("demo"))
        self.answered = 0
        self.transport: set[asyncio.Task[None]] = set()
        self.unawaited: list[Any] = []

    async def complete(
        self, call: ProviderCall, on_delta: Callable[[str], None] | None = None,
    ) -> Any:
        self.answered += 1
        if self.answered == 4:  # the draft is in; the last critic's call is in flight
            self.transport.add(asyncio.create_task(self._reading()))
            self.unawaited.append(self.inner.complete(call, on_delta))  # created, not awaited yet
            await asyncio.sleep(3600)
        return await self.inner.complete(call, on_delta)

    async def _reading(self) -> None:
        raise KeyboardInterrupt  # where the signal handler raises it: inside this task's step

    def price(self, participant: Any) -> Any:
        return self.inner.price(participant)

    async def aclose(self) -> None:
        await self.inner.aclose()


def test_an_interrupt_inside_a_call_is_reported_once_without_a_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, recwarn: pytest.WarningsRecorder,
) -> None:
    provider = _CtrlCDuringACritique()
    with Ledger(str(tmp_path / "s.sqlite"), create=True) as ledger:
        start = (demo_topic(), SessionConfig(), demo_participants("http://127.0.0.1:9/v1"))
        with caplog.at_level(logging.ERROR, logger="asyncio"), pytest.raises(RunInterrupted) as e:
            run_session(ledger, start=start, provider=provider, clock=FixedStepClock(),
                        ids=SequentialIds(), quiet=True, autosave=False)
        assert e.value.exit_code == 130
        assert provider.answered == 4
        del e
        provider.transport.clear()
        provider.unawaited.clear()
        gc.collect()  # the interrupted task is collected now, not at some later instant
        assert [r.getMessage() for r in caplog.records] == []
        assert [str(w.message) for w in recwarn] == []
        kept = ledger.state(ledger.session_ids()[0])
        assert len(kept.rounds) >= 1  # what was committed before the interrupt is kept
