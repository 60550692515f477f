"""Studies from the application layer: plan one, run it, continue it (the CLI's ``study run``
and ``study resume``, a worker, a notebook).

A study's cells run through :data:`SESSIONS`, the same :func:`~.running.start_session` and
:func:`~.running.resume_session` every other entry point calls, so a cell gets the pre-flight,
lease, exports and seal of a session run by hand. The study package below this layer only
knows the shape of those functions (:class:`~forge_ledger.study._sessions.SessionFunctions`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

from ..errors import UsageError
from ..study._sessions import SessionHooks
from ..study.plan import StudyPlan, load_plan, plan_from_document
from ..study.runner import Progress, plan_study, run_study
from ..study.state import StudyState
from ..study.stream import StudyStream
from .running import Runtime, resume_session, start_session
from .stores import Store, opened

if TYPE_CHECKING:
    from ..clock import Clock
    from ..domain.state import SessionState
    from ..domain.values import Participant, SessionConfig, Topic
    from ..ledger import Ledger
    from ..providers import Provider

__all__ = ["SESSIONS", "as_plan", "continue_study", "run_plan", "study"]


class _AssignedId:
    """The id source of a cell's session: the id its assignment recorded."""

    def __init__(self, session_id: UUID) -> None:
        self.session_id = session_id

    def new_id(self) -> UUID:
        return self.session_id


def _runtime(hooks: SessionHooks, session_id: UUID | None = None) -> Runtime:
    return Runtime(
        clock=hooks.clock,
        ids=_AssignedId(session_id) if session_id else None,
        on_checkpoint=hooks.on_checkpoint,
        hmac_key=hooks.hmac_key,
    )


class _AppSessions:
    """The study's session functions: this layer's own start and resume."""

    async def start(
        self,
        ledger: Ledger,
        session_id: UUID,
        topic: Topic,
        config: SessionConfig,
        participants: Sequence[Participant],
        *,
        provider: Provider,
        hooks: SessionHooks,
    ) -> SessionState:
        return await start_session(
            ledger,
            topic,
            config,
            participants,
            provider=provider,
            runtime=_runtime(hooks, session_id),
        )

    async def resume(
        self, ledger: Ledger, session_id: UUID, *, provider: Provider, hooks: SessionHooks
    ) -> SessionState:
        return await resume_session(ledger, session_id, provider=provider, runtime=_runtime(hooks))


SESSIONS = _AppSessions()
"""What every study runs its cells through (the runner in one process, a worker's job)."""


def as_plan(
    plan: StudyPlan | Path | str | Mapping[str, Any], *, base: Path | None = None
) -> StudyPlan:
    """A checked plan from a plan, a plan file's path, or a plan as a dict (its files
    relative to ``base``, the current folder by default)."""
    if isinstance(plan, StudyPlan):
        return plan
    if isinstance(plan, str | Path):
        return load_plan(Path(plan))
    return plan_from_document(dict(plan), base=base or Path.cwd())


async def continue_study(
    store: Store,
    study: str | UUID,
    *,
    provider: Provider | None = None,
    concurrency: int = 4,
    clock: Clock | None = None,
    hmac_key: bytes | None = None,
    on_progress: Callable[[Progress], Any] | None = None,
    processes: int = 1,
    share: tuple[int, int] = (0, 1),
) -> StudyState:
    """Run the cells of a recorded study (id, prefix or name) not finished yet; a provider
    made here is closed here. ``processes`` > 1 runs them over that many local processes
    (:mod:`.study_processes`); ``share`` is what one of those processes is given."""
    from ..providers import get_provider
    from .study_processes import in_processes, refused

    prov = provider or get_provider()
    try:
        with opened(store, create=False) as ledger:
            refused(ledger.location, processes=processes, provider=provider)
            run = partial(
                run_study,
                ledger,
                provider=prov,
                concurrency=concurrency,
                sessions=SESSIONS,
                clock=clock,
                hooks=SessionHooks(clock=clock, hmac_key=hmac_key),
                on_progress=on_progress,
            )
            if processes <= 1:
                return await run(study, share=share)
            return await in_processes(
                ledger,
                StudyStream(ledger).resolve(study),
                run,
                processes=processes,
                concurrency=concurrency,
                clock=clock,
                on_progress=on_progress,
            )
    finally:
        if provider is None:
            await prov.aclose()


async def run_plan(
    store: Store,
    plan: StudyPlan | Path | str | Mapping[str, Any],
    **options: Any,
) -> StudyState:
    """Record the plan (or find it recorded) and run its cells not finished yet; ``options``
    are :func:`continue_study`'s."""
    from .study_processes import refused

    checked = as_plan(plan)
    with opened(store, create=True) as ledger:
        processes, provider = options.get("processes", 1), options.get("provider")
        refused(ledger.location, processes=processes, provider=provider)
        study_id = plan_study(ledger, checked, clock=options.get("clock"))
        return await continue_study(ledger, study_id, **options)


def study(
    store: Store,
    plan: StudyPlan | Path | str | Mapping[str, Any],
    **options: Any,
) -> StudyState:
    """:func:`run_plan` to the end, from code that is not inside an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run_plan(store, plan, **options))
    raise UsageError(
        "study() cannot run inside a running event loop",
        hint="in a notebook, use: await forge_ledger.app.studies.run_plan(store, plan)",
    )
