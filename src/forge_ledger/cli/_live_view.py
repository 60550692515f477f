"""Terminal view of a running session, fed by the orchestrator's live events.

On a terminal: a live panel with one line per participant (status, streamed characters, the
tail of its text), a line for the round and the running cost. Elsewhere (pipes, CI): one plain
line per participant result and per round. Always on stderr so ``--json`` stdout stays clean.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ..orchestrator import live
from ._common import add_row, money, printable

__all__ = ["LiveView"]


@dataclass
class _Row:
    status: str = "waiting"
    chars: int = 0
    tail: str = ""
    tokens: int = 0
    cost: float = 0.0


class LiveView:
    def __init__(
        self, console: Console, *, enabled: bool = True, unpriced: frozenset[str] = frozenset()
    ) -> None:
        self.console = console
        self.unpriced = unpriced
        """Participants whose model has no known price: their cost shows as ``unpriced``."""
        self.enabled = enabled
        self.interactive = enabled and console.is_terminal
        self._live: Live | None = None
        self._rows: dict[str, _Row] = {}
        self._round = ""
        self._cost = 0.0

    def started(self, session_id: str, title: str, participants: Any) -> None:
        if self.enabled:
            names = printable(", ".join(f"{p.name} ({p.model})" for p in participants))
            self.console.print(
                f"session {session_id} · {printable(title)}\nparticipants: {names}"
            )

    def __enter__(self) -> LiveView:
        if self.interactive:
            self._live = Live(
                self._render(), console=self.console, refresh_per_second=8, transient=False
            )
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None

    def handle(self, event: live.LiveEvent) -> None:
        if not self.enabled:
            return
        self._name_resumed_round(event)
        if isinstance(event, live.RoundStartedLive):
            self._round = f"round {event.round} · {event.kind.value} · iteration {event.iteration}"
            self._rows = {name: _Row() for name in event.participants}
            if not self.interactive:
                self.console.print(f"{self._round}: {printable(', '.join(event.participants))}")
        elif isinstance(event, live.ParticipantThinking):
            row = self._rows.setdefault(event.participant, _Row())
            row.status = "thinking" if event.attempt == 1 else f"retry {event.attempt}"
        elif isinstance(event, live.ContentDelta):
            row = self._rows.setdefault(event.participant, _Row())
            row.status = "streaming"
            row.chars += len(event.delta)
            row.tail = (row.tail + event.delta)[-200:]
        elif isinstance(event, live.ParticipantComplete):
            self._participant_complete(event)
        elif isinstance(event, live.ErrorRaised):
            row = self._rows.setdefault(event.participant, _Row())
            row.status = "retrying" if event.will_retry else "failed"
            if not self.interactive:
                again = " (will retry)" if event.will_retry else ""
                self.console.print(printable(f"  {event.participant}: {event.message}{again}"))
        elif isinstance(event, live.RoundComplete):
            self._round_complete(event)
        elif isinstance(event, live.SessionFinished) and self._live is not None:
            self._live.console.print(printable(f"finished: {event.status} {event.reason}".rstrip()))
        if self._live is not None:
            self._live.update(self._render())

    def _name_resumed_round(self, event: live.LiveEvent) -> None:
        """A session resumed inside an open round sends no RoundStartedLive for it: name the
        round from the first event that carries its number, so no line is left headless."""
        number = getattr(event, "round", None)
        if self._round or number is None or isinstance(event, live.RoundStartedLive):
            return
        kind = getattr(event, "kind", None)
        self._round = f"round {number}" + (f" · {kind.value}" if kind is not None else "")
        if not self.interactive:
            self.console.print(f"{self._round} (resumed)")

    def _participant_complete(self, event: live.ParticipantComplete) -> None:
        row = self._rows.setdefault(event.participant, _Row())
        row.status = "done" if event.ok else "failed"
        row.tokens += event.tokens.total
        row.cost += event.cost_usd
        if not self.interactive:
            detail = f" ({event.detail})" if event.detail else ""
            cost = money(event.cost_usd, unpriced=event.participant in self.unpriced)
            self.console.print(printable(
                f"  {event.participant}: {row.status}, {event.tokens.total} tokens, "
                f"{cost}{detail}"
            ))

    def _round_complete(self, event: live.RoundComplete) -> None:
        self._cost = event.session_cost_usd
        extra = ""
        if event.score is not None:
            majority = "yes" if event.majority_agrees else "no"
            extra = f" · weighted score {event.score:.2f} · majority agrees: {majority}"
        cost = money(event.session_cost_usd, unpriced=bool(self.unpriced))
        line = f"{self._round} done · session cost {cost}{extra}"
        console = self._live.console if self._live is not None else self.console
        console.print(line)
        for why in event.contradictions:
            console.print(printable(f"  warning: vote of {why}"), markup=False)

    def _render(self) -> Group:
        table = Table(box=None, show_header=True, header_style="bold", expand=True)
        table.add_column("participant", no_wrap=True)
        table.add_column("status", no_wrap=True)
        table.add_column("chars", justify="right", no_wrap=True)
        table.add_column("latest text", overflow="ellipsis", no_wrap=True, ratio=1)
        for name, row in self._rows.items():
            tail = printable(" ".join(row.tail.split()))[-80:]
            add_row(table, name, row.status, str(row.chars), tail)
        cost = money(self._cost, unpriced=bool(self.unpriced))
        header = Text(f"{self._round or 'starting'} · cost {cost}", style="bold")
        return Group(header, table)
