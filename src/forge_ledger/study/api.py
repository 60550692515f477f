"""The study from Python (a notebook, a script): plan it and run it in one call.

:func:`study` is what ``forge_ledger.open(store).study(...)`` calls; :func:`run_plan` is the
same for code already inside an event loop (a notebook cell can ``await`` it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ._sessions import SessionHooks
from .plan import StudyPlan, load_plan, plan_from_document
from .runner import Progress, plan_study, run_study
from .state import StudyState

if TYPE_CHECKING:
    from ..clock import Clock
    from ..ledger import Ledger
    from ..providers import Provider

__all__ = ["as_plan", "run_plan", "study"]


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


async def run_plan(
    ledger: Ledger,
    plan: StudyPlan | Path | str | Mapping[str, Any],
    *,
    provider: Provider | None = None,
    concurrency: int = 4,
    clock: Clock | None = None,
    hmac_key: bytes | None = None,
    on_progress: Callable[[Progress], Any] | None = None,
) -> StudyState:
    """Record the plan (or find it recorded) and run its cells not finished yet."""
    checked = as_plan(plan)
    study_id = plan_study(ledger, checked, clock=clock)
    own = provider is None
    if provider is None:
        from ..providers import get_provider

        provider = get_provider()
    try:
        return await run_study(
            ledger,
            study_id,
            provider=provider,
            concurrency=concurrency,
            clock=clock,
            hooks=SessionHooks(clock=clock, hmac_key=hmac_key),
            on_progress=on_progress,
        )
    finally:
        if own:
            await provider.aclose()


def study(
    ledger: Ledger,
    plan: StudyPlan | Path | str | Mapping[str, Any],
    **options: Any,
) -> StudyState:
    """:func:`run_plan` to the end, from code that is not inside an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run_plan(ledger, plan, **options))
    raise UsageError(
        "study() cannot run inside a running event loop",
        hint="in a notebook, use: await forge_ledger.study.run_plan(ledger, plan)",
    )
