"""How consensus formed: the audit of one session.

Research on multi-agent debate (notes/anchors.md) says much of the gain is the vote itself and
that agents often conform to the majority. An auditor therefore needs, beside the weighted
convergence score, the plain majority; each participant's stance across votes; for every stance
change, who moved it (influence edges with verbatim quotes) or a conformity flag when nothing
did; whether deliberation changed the outcome and the document; self-preference; and, last, a
minority report of the dissent never resolved.

- :mod:`.model` — the report (pydantic); ``model_dump(mode="json")`` is ``audit --json``;
- :mod:`.analysis` — :func:`audit_report`, a pure function of the session's events, built on
  the projections (session state, consensus trail, dissent log) and the engine's one
  conformity rule;
- :mod:`.render` — the Markdown rendering (the terminal shows it through Rich);
- :mod:`.counterfactual` — a fork beside its parent (:func:`compare_fork`);
- :mod:`.metrics` — tidy rows per session and per participant, from an audit;
- :mod:`.aggregates` — means of those rows with bootstrap intervals (loads scipy when used).

Each name loads with its own module on first use (see :mod:`forge_ledger._lazy`): printing
one session's audit does not load the fork comparison or the metrics rows.

Forks: a fork's state carries its parent's rounds up to the fork point; the fork's own events
begin at ``SessionForked``, which stands at the fork point's position (a fork's positions
continue its parent's). Items from those inherited rounds (``round <= inherited_rounds``) carry
the positions they have in the parent, which are the fork's too.
"""

from typing import TYPE_CHECKING

from .. import _lazy
from .model import __all__ as _model_all

if TYPE_CHECKING:
    from .analysis import audit_report, document_similarity
    from .counterfactual import DissentFate, ForkComparison, SideOutcome, compare_fork
    from .metrics import ParticipantMetrics, SessionMetrics, participant_rows, session_row
    from .model import *  # noqa: F403
    from .render import excerpt, render_markdown

__getattr__, __dir__ = _lazy.exports(
    __name__,
    {
        "analysis": ("audit_report", "document_similarity"),
        "counterfactual": ("DissentFate", "ForkComparison", "SideOutcome", "compare_fork"),
        "metrics": ("ParticipantMetrics", "SessionMetrics", "participant_rows", "session_row"),
        "model": _model_all,
        "render": ("excerpt", "render_markdown"),
    },
)

__all__ = [
    *_model_all,
    "DissentFate",
    "ForkComparison",
    "ParticipantMetrics",
    "SessionMetrics",
    "SideOutcome",
    "audit_report",
    "compare_fork",
    "document_similarity",
    "excerpt",
    "participant_rows",
    "render_markdown",
    "session_row",
]
