"""The study's calls budget in one process: each call counted before it starts.

Cells that run side by side in one process share one count, which starts at what the study's
events count; a call the budget (:func:`~.budget.calls_spent`, the one rule) no longer allows
is never made: it fails as ``budget_calls``, its session pauses, and the runner records the
study's stop. Workers on PostgreSQL count in the database instead (:mod:`.rates`), since
they are many processes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..providers import ProviderCallError
from .budget import calls_spent

if TYPE_CHECKING:
    from ..domain.values import ModelResponse, Participant, Price
    from ..providers import Provider, ProviderCall
    from .plan import Budget

__all__ = ["CountedCalls"]


class CountedCalls:
    """A provider whose calls start only while the study's calls budget allows; ``refused``
    says why one did not."""

    def __init__(self, inner: Provider, budget: Budget, made: int) -> None:
        self.inner = inner
        self.budget = budget
        self.made = made
        self.refused = ""

    async def complete(
        self, call: ProviderCall, on_delta: Callable[[str], None] | None = None
    ) -> ModelResponse:
        why = calls_spent(self.budget, self.made)
        if why is not None:
            self.refused = why
            raise ProviderCallError("budget_calls", f"call refused: {why}", retryable=False)
        self.made += 1
        return await self.inner.complete(call, on_delta)

    def price(self, participant: Participant) -> Price | None:
        return self.inner.price(participant)

    async def aclose(self) -> None:
        """The inner provider belongs to the caller, which closes it."""
