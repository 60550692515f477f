"""Running sessions: start one, resume one (with participant changes), find one in progress.

:func:`start_session` and :func:`resume_session` are what every entry point calls to make
models deliberate (the CLI, a worker, a study, a notebook): each does the pre-flight checks,
claims the session (its lease) before any model call, writes the session's export and document
file at each phase change and at the end, seals a session that ends (keyed by
:attr:`Runtime.hmac_key`), and closes the provider it made. :func:`start` and :func:`resume`
are the same for code without an event loop.

The orchestrator (and through the provider, litellm) loads only when a session runs, so the
commands that merely read stay quick to start.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ..clock import Clock, IdSource
from ..domain.state import SessionState
from ..domain.values import Participant, SessionConfig, SessionStatus, Topic
from ..errors import UsageError
from ..ledger import Ledger, SessionSummary
from .autosave import Warn, autosaver, log_notice, log_warning
from .participants import add_participants, update_participants
from .stores import Store, opened

if TYPE_CHECKING:
    from ..orchestrator import Orchestrator, Subscriber
    from ..providers import Provider

__all__ = [
    "Running",
    "Runtime",
    "check_start",
    "in_progress_session",
    "resume",
    "resume_session",
    "start",
    "start_session",
]

Running = Callable[["Provider"], contextlib.AbstractContextManager[Any]]
"""What is held while the models are called, made from the provider that calls them (the CLI's
live view, which learns from it which models have no known price)."""


@dataclass(frozen=True)
class Runtime:
    """How a session runs: the injectable sources and hooks of its orchestrator.

    ``on_checkpoint`` is called with the state at each phase change and at the end, after the
    export and document file are written (``autosave``; with ``files_when_stopped``, only when
    the session ends or pauses; the read model beside a SQLite store is then brought up to
    date too, unless ``views_when_stopped`` is off, as for a study's sessions, whose study
    does it once at its end); ``hmac_key`` keys the seal of a session
    that ends; ``warn`` hears what must not stop a session (a failed export), ``inform`` what a
    person may want to know (a demo's scripted server started again).
    """

    clock: Clock | None = None
    ids: IdSource | None = None
    subscribers: Sequence[Subscriber] = ()
    on_checkpoint: Callable[[SessionState], None] | None = None
    hmac_key: bytes | None = None
    autosave: bool = True
    files_when_stopped: bool = False
    views_when_stopped: bool = True
    warn: Warn = log_warning
    inform: Warn = log_notice

    def orchestrator(self, ledger: Ledger, provider: Provider) -> Orchestrator:
        """The orchestrator for one run."""
        from ..orchestrator import KeyedSeal, Orchestrator

        return Orchestrator(
            ledger,
            provider,
            clock=self.clock,
            ids=self.ids,
            subscribers=self.subscribers,
            on_checkpoint=self._checkpoint(ledger),
            seal=KeyedSeal(self.hmac_key),
        )

    def _checkpoint(self, ledger: Ledger) -> Callable[[SessionState], None] | None:
        save = (
            autosaver(
                ledger,
                self.warn,
                when_stopped=self.files_when_stopped,
                views=self.views_when_stopped,
            )
            if self.autosave
            else None
        )
        hook = self.on_checkpoint
        if save is None or hook is None:
            return save or hook

        def both(state: SessionState) -> None:
            save(state)
            hook(state)

        return both


@contextlib.asynccontextmanager
async def _provided(provider: Provider | None) -> AsyncIterator[Provider]:
    """The provider of one run: the one given, or one made here and closed here."""
    from ..providers import get_provider

    prov = provider or get_provider()
    try:
        yield prov
    finally:
        if provider is None:
            await prov.aclose()


def _held(running: Running | None, provider: Provider) -> contextlib.AbstractContextManager[Any]:
    return running(provider) if running is not None else contextlib.nullcontext()


def check_start(
    topic: Topic,
    config: SessionConfig,
    participants: Sequence[Participant],
    *,
    given: frozenset[str] = frozenset(),
    allow_unpriced: bool = False,
    provider_given: bool = False,
) -> list[str]:
    """The pre-flight of a new session: raise :class:`~forge_ledger.panel.preflight.PreflightError`
    listing every problem; return the warnings about the panel that do not stop it (a panel
    of one).

    The settings are always checked against the participants. Keys, URLs, prices and the
    budget of the first call are what the real provider needs; a ``provider_given`` (a
    scripted one, a replay) answers without them, so they are not asked for. :func:`start_session`
    runs this; a caller that must know before it creates anything (the CLI, before it creates a
    store) runs it first.
    """
    from ..panel.preflight import PreflightError, check_participants, check_session, panel_warnings

    if provider_given:
        problems = check_session(config, participants, given)
        if problems:
            raise PreflightError(problems)
    else:
        check_participants(
            participants, config, given=given, allow_unpriced=allow_unpriced, topic=topic
        )
    return panel_warnings(participants)


async def start_session(
    ledger: Store,
    topic: Topic,
    config: SessionConfig,
    participants: Sequence[Participant],
    *,
    provider: Provider | None = None,
    runtime: Runtime | None = None,
    source: str = "run",
    given: frozenset[str] = frozenset(),
    allow_unpriced: bool = False,
    on_start: Callable[[UUID], None] | None = None,
    running: Running | None = None,
) -> SessionState:
    """Check, record and run a new session until it converges, ends or pauses.

    Settings (and, for the real provider, keys, URLs and prices) are checked before anything
    is recorded (:func:`check_start`; ``given`` names the config fields a person set,
    ``allow_unpriced`` lets a budget run with models of unknown price).
    ``on_start`` learns the new session's id as soon as it is recorded.
    """
    check_start(
        topic,
        config,
        participants,
        given=given,
        allow_unpriced=allow_unpriced,
        provider_given=provider is not None,
    )
    rt = runtime or Runtime()
    with opened(ledger, create=True) as led:
        async with _provided(provider) as prov:
            orch = rt.orchestrator(led, prov)
            sid = orch.start(topic, config, participants, source=source)
            if on_start is not None:
                on_start(sid)
            with led.lease(sid), _held(running, prov):
                return await orch.run(sid)


async def resume_session(
    ledger: Store,
    session_id: UUID | str,
    *,
    provider: Provider | None = None,
    runtime: Runtime | None = None,
    swaps: Sequence[str] = (),
    add: Sequence[Participant] = (),
    api_base: str | None = None,
    claim: bool = True,
    running: Running | None = None,
) -> SessionState:
    """Continue a paused or interrupted session until it converges, ends or pauses.

    Only what is missing is called; a session that already ended only gets what its end left
    undone (seal, exports). Before it goes on, ``swaps`` (``NAME=MODEL``) change models,
    ``api_base`` every participant's endpoint, and ``add`` joins participants (checked first);
    a demo session whose scripted server is gone gets it started again. The session is claimed
    (its lease) for all of it unless the caller already holds the claim (``claim=False``).
    """
    rt = runtime or Runtime()
    with opened(ledger) as led:
        sid = led.resolve(session_id)
        lease = led.lease(sid) if claim else contextlib.nullcontext()
        with lease, contextlib.ExitStack() as stack:
            if not led.state(sid).status.terminal:
                # the keys and URLs of added participants are the real provider's concern
                _prepare(
                    led,
                    sid,
                    stack,
                    rt,
                    swaps=swaps,
                    add=add,
                    api_base=api_base,
                    check_added=provider is None,
                )
            async with _provided(provider) as prov:
                orch = rt.orchestrator(led, prov)
                with _held(running, prov):
                    return await orch.resume(sid)


def _prepare(
    ledger: Ledger,
    sid: UUID,
    stack: contextlib.ExitStack,
    runtime: Runtime,
    *,
    swaps: Sequence[str],
    add: Sequence[Participant],
    api_base: str | None,
    check_added: bool,
) -> None:
    """The participant changes a resume makes before the session goes on; with
    ``check_added`` the added participants' keys and URLs are checked before they join."""
    from ..panel.preflight import check_participants
    from .demo import restarted_demo_server

    state = ledger.state(sid)
    if api_base is None:
        api_base = stack.enter_context(restarted_demo_server(state))
        if api_base is not None:
            runtime.inform(f"a demo session: its scripted server runs again at {api_base}")
            add = [
                p.model_copy(update={"api_base": api_base}) if p.api_base is None else p
                for p in add
            ]
    if add and check_added:
        check_participants(add)
    clock = runtime.clock
    update_participants(
        ledger,
        sid,
        swaps=swaps,
        api_base=api_base,
        reason=_update_reason(swaps, api_base),
        clock=clock,
    )
    if add:
        add_participants(ledger, sid, add, clock=clock)
    if not ledger.state(sid).participants:
        raise UsageError(
            f"session {str(sid)[:8]} has no participants",
            hint="add them: forge-ledger resume SESSION -m MODEL… or --participants FILE",
        )


def _update_reason(swaps: Sequence[str], api_base: str | None) -> str:
    """The recorded reason of a resume's participant changes, in the command line's terms."""
    return " ".join(
        [*(f"-m {s}" for s in swaps), *([f"--api-base {api_base}"] if api_base else [])]
    )


_LIVE = frozenset({SessionStatus.INITIALIZED, SessionStatus.IN_PROGRESS, SessionStatus.PAUSED})


def in_progress_session(ledger: Store, slug: str) -> SessionSummary | None:
    """The first session on the topic ``slug`` that has not ended, if any (a damaged session,
    whose status cannot be read, is none)."""
    with opened(ledger) as led:
        for s in led.summaries():
            if s.slug == slug and _status(s) in _LIVE:
                return s
    return None


def _status(summary: SessionSummary) -> SessionStatus | None:
    try:
        return SessionStatus(summary.status)
    except ValueError:  # "damaged"
        return None


def start(
    ledger: Store,
    topic: Topic,
    config: SessionConfig,
    participants: Sequence[Participant],
    **options: Any,
) -> SessionState:
    """:func:`start_session` for code without an event loop (a script, a notebook cell)."""
    return asyncio.run(start_session(ledger, topic, config, participants, **options))


def resume(ledger: Store, session_id: UUID | str, **options: Any) -> SessionState:
    """:func:`resume_session` for code without an event loop."""
    return asyncio.run(resume_session(ledger, session_id, **options))
