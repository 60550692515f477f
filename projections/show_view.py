"""What ``show`` prints of a session, as plain values: one shape for two sources.

``show`` prints a session from its folded state (the ledger) or, when the read model is
current, from the rows the read-model projection wrote. Both sources become the same
:class:`SessionView`, and the command prints only that, so the two paths cannot print
differently. The values that need the whole state (the EMS, a contribution's one-line preview
with its vote, critique or opinion) are computed here once, by the functions the projection
calls too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from forge_ledger.domain import SessionState
from forge_ledger.domain.state import ContributionState, ConvergenceResult
from forge_ledger.domain.text import clip
from forge_ledger.domain.values import ConvergenceVote

__all__ = [
    "ContributionLine",
    "ConvergenceLine",
    "DissentRow",
    "RoundView",
    "SessionView",
    "contribution_line",
    "convergence_from_json",
    "convergence_json",
    "dissent_from_json",
    "dissent_json",
    "dissent_rows",
    "preview",
    "session_ems",
    "session_view",
]

PREVIEW_CHARS = 72


@dataclass(frozen=True)
class ContributionLine:
    """One contribution as a round lists it: who, how many tokens, what it said."""

    participant: str
    tokens: int
    preview: str
    failed: bool
    """The answer did not parse (the preview says so, shown as an error)."""
    unpriced: bool
    """The call was charged at no known price."""


@dataclass(frozen=True)
class RoundView:
    """A round's heading and its contributions' lines, in recorded order."""

    number: int
    kind: str
    iteration: int
    status: str
    superseded: bool
    lines: tuple[ContributionLine, ...]


@dataclass(frozen=True)
class DissentRow:
    """An open divergence; ``positions`` as (participant, position, stance) triples."""

    id: str
    topic: str
    status: str
    positions: tuple[tuple[str, str, str], ...]


@dataclass(frozen=True)
class ConvergenceLine:
    """The latest convergence evaluation as ``show`` prints it: plain values, so a view read
    from the read model builds no pydantic model (the first model validated in a process costs
    pydantic's plugin discovery, which imports half the standard library)."""

    round: int
    iteration: int
    score: float
    threshold: float
    converged: bool
    majority_agrees: bool
    agree: int
    disagree: int
    partial: int
    abstain: int

    @classmethod
    def of(cls, result: ConvergenceResult) -> ConvergenceLine:
        return cls(**{name: getattr(result, name) for name in _LINE_FIELDS})


_LINE_FIELDS = tuple(ConvergenceLine.__dataclass_fields__)


@dataclass(frozen=True)
class SessionView:
    """Everything ``show`` prints of a session (see the module docstring)."""

    id: str
    slug: str
    title: str
    status: str
    status_reason: str
    phase: str
    iteration: int
    version: int
    updated_at: datetime
    ems: int
    tokens_in: int
    tokens_out: int
    cost_usd: float
    fork_origin: tuple[str, int] | None
    participants: tuple[tuple[str, str, str], ...]
    """(name, model, role) in joining order."""
    rounds: tuple[RoundView, ...]
    convergence: ConvergenceLine | None
    """The latest convergence evaluation."""
    dissent: tuple[DissentRow, ...]

    @property
    def unpriced(self) -> bool:
        """Whether any contribution was charged at no known price (the cost then says so):
        read off the lines, which hold every contribution, superseded rounds' too."""
        return any(line.unpriced for r in self.rounds for line in r.lines)


_LINE_BREAK = re.compile("[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
"""What ``str.splitlines`` breaks lines at."""


PREVIEW_SLACK = 32
"""A preview first reads ``width + PREVIEW_SLACK`` characters of the answer's first line:
enough for prose, which collapsing hardly shortens; when the window's collapsed text is too
short to decide the preview, it reads the whole line."""


def preview(text: str, width: int = PREVIEW_CHARS) -> str:
    """The first non-empty line of ``text``, whitespace-collapsed and cut to ``width``.

    Found from the first non-blank character to the next line break, without splitting the
    whole answer into lines: the projection makes a preview for every recorded answer. Only a
    window of the line is read: once the window's collapsed text is longer than ``width``, the
    line's collapsed text begins with it (collapsing a prefix gives a prefix), so the cut is
    the same as the whole line's.
    """
    start = len(text) - len(text.lstrip())
    stop = start + max(width, 0) + PREVIEW_SLACK
    end = _LINE_BREAK.search(text, start, stop)
    if end is not None:
        return clip(text[start : end.start()], width)
    if stop < len(text):
        flat = " ".join(text[start:stop].split())
        if len(flat) > width >= 1:
            return clip(flat, width, collapse=False)
        end = _LINE_BREAK.search(text, stop)
    return clip(text[start : end.start() if end is not None else len(text)], width)


CUT_OFF = "[cut off at its token limit] "
"""Before the preview of an answer that stopped at ``max_tokens`` (continued or not, its
end is missing)."""


def _preview_of(state: SessionState, c: ContributionState) -> str:
    """What the answer parsed into (vote, critique, opinion) before the start of its text:
    a round reads at a glance. An answer cut off at its token limit says so first."""
    cut = CUT_OFF if c.response.truncated else ""
    return cut + _parsed_preview(state, c)


def _parsed_preview(state: SessionState, c: ContributionState) -> str:
    if c.parse_error is not None:
        return f"[unparsed: {preview(c.parse_error, 40)}]"
    text = state.answer(c)
    if c.vote is not None:
        return _vote_line(c.vote, text)
    if c.critique is not None:
        target = f" → {c.critique.target}" if c.critique.target else ""
        return f"critique{target} ({c.critique.score}): {preview(text, 40)}"
    if c.opinion is not None:
        return f"{c.opinion.stance.value}: {preview(text, 48)}"
    return preview(text)


def _vote_line(vote: ConvergenceVote, text: str) -> str:
    """A vote as a person reads it: its stance, its score, and the first line of its reason
    (else of its first concern, else of the answer), never the JSON it was parsed from.
    Built when a view is made from a state, so the engine's rule loads only then."""
    from forge_ledger.engine.votes import score_contradiction

    why = next((t for t in (vote.reasoning, *vote.concerns) if t.strip()), text)
    first = why.strip().splitlines()[0] if why.strip() else ""
    line = f"vote: {vote.effective_stance.value} ({vote.score}) — {preview(first, 48)}"
    contradiction = score_contradiction(vote.effective_stance, vote.score)
    return f"{line} ⚠ {contradiction}" if contradiction else line


def contribution_line(state: SessionState, c: ContributionState) -> ContributionLine:
    """``c`` (one of ``state``'s contributions) as its round's line shows it."""
    return ContributionLine(
        participant=c.participant,
        tokens=c.response.tokens.total,
        preview=_preview_of(state, c),
        failed=c.parse_error is not None,
        unpriced=c.unpriced,
    )


def dissent_rows(state: SessionState) -> tuple[DissentRow, ...]:
    """The open divergences: what still blocks agreement."""
    return tuple(
        DissentRow(
            id=d.id,
            topic=d.topic,
            status=d.status.value,
            positions=tuple((p.participant, p.position, p.stance.value) for p in d.positions),
        )
        for d in state.open_divergences
    )


def session_ems(state: SessionState) -> int:
    """The session's EMS (0–100), the engine's rule (``engine.ems``): loaded here, as only a
    view built from a state needs it (one read from the read model holds the figure)."""
    from forge_ledger.engine.ems import ems_score

    return int(ems_score(state).score)


def session_view(state: SessionState) -> SessionView:
    """``state`` as ``show`` prints it."""
    origin = state.fork_origin
    return SessionView(
        id=state.id,
        slug=state.slug,
        title=state.topic.title,
        status=state.status.value,
        status_reason=state.status_reason,
        phase=state.phase,
        iteration=state.iteration,
        version=state.version,
        updated_at=state.updated_at,
        ems=session_ems(state),
        tokens_in=state.tokens.input,
        tokens_out=state.tokens.output,
        cost_usd=state.cost_usd,
        fork_origin=None if origin is None else (origin.parent_id, origin.parent_position),
        participants=tuple((p.name, p.model, p.role.value) for p in state.participants),
        rounds=tuple(
            RoundView(
                number=r.number,
                kind=r.kind.value,
                iteration=r.iteration,
                status=r.status.value,
                superseded=r.superseded,
                lines=tuple(contribution_line(state, c) for c in r.contributions),
            )
            for r in state.rounds
        ),
        convergence=(
            None if state.latest_convergence is None
            else ConvergenceLine.of(state.latest_convergence)
        ),
        dissent=dissent_rows(state),
    )


def convergence_json(state: SessionState) -> Any:
    """The latest convergence evaluation as JSON (a read-model column), or None."""
    latest = state.latest_convergence
    return None if latest is None else latest.model_dump(mode="json")


def convergence_from_json(data: Any) -> ConvergenceLine | None:
    """The column (the state's value as JSON) back as the line ``show`` prints, each value
    checked: the file may be damaged, and a damaged value raises (the reader falls back)."""
    if data is None:
        return None
    values = {name: data[name] for name in _LINE_FIELDS}
    for name, value in values.items():
        kinds = (bool,) if name in _FLAGS else (int, float) if name in _REALS else (int,)
        if type(value) not in kinds:
            raise TypeError(f"convergence {name} is not a {kinds[0].__name__}")
    return ConvergenceLine(**values)


_FLAGS = frozenset({"converged", "majority_agrees"})
_REALS = frozenset({"score", "threshold"})


def dissent_json(dissent: tuple[DissentRow, ...]) -> Any:
    """The open dissent as JSON (a read-model column)."""
    return [[d.id, d.topic, d.status, [list(p) for p in d.positions]] for d in dissent]


def dissent_from_json(data: Any) -> tuple[DissentRow, ...]:
    """The column back as rows (a damaged value raises, and the reader falls back)."""
    rows = tuple(
        DissentRow(id=i, topic=t, status=s, positions=tuple((a, b, c) for a, b, c in ps))
        for i, t, s, ps in data
    )
    texts = [v for d in rows for v in (d.id, d.topic, d.status)]
    texts += [v for d in rows for p in d.positions for v in p]
    if not all(isinstance(v, str) for v in texts):
        raise TypeError("open dissent holds a value that is not text")
    return rows
