"""How consensus formed: the audit report of one session, and its Markdown rendering.

Research on multi-agent debate (notes/anchors.md) says much of the gain is the vote itself and
that agents often conform to the majority. An auditor therefore needs, beside the weighted
convergence score, the plain majority; each participant's stance across votes; for every stance
change, what was said in between (critiques, responses, syntheses, refinements, human input);
and a flag on changes that came with no new argument at all. Dissent that was never resolved is
listed at the end as a minority report, so it is not lost under a "converged" status.

:func:`audit_report` is a pure function of the session's events and its folded state (no
clock, no I/O): the same ledger always gives the same report. ``render_markdown`` is for people,
``report.model_dump(mode="json")`` for programs.

Forks: a fork's state carries its parent's rounds up to the fork point; the fork's own events
begin at ``SessionForked``. Items from those inherited rounds (``round <= inherited_rounds``)
carry positions in the *parent's* ledger.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from .domain.events import ForkOrigin
from .domain.state import ContributionState, DivergenceChange, RoundState, SessionState
from .domain.values import DivergenceStatus, RoundKind, Stance
from .ledger import RecordedEvent

__all__ = [
    "AuditReport",
    "ConsensusPoint",
    "DissentRecord",
    "FailedCall",
    "HumanIntervention",
    "Influence",
    "MinorityEntry",
    "RoundUsage",
    "StancePoint",
    "StanceShift",
    "Trajectory",
    "Usage",
    "audit_report",
    "excerpt",
    "render_markdown",
]

_EXCERPT_CHARS = 160
_ARGUMENT_KINDS = (
    RoundKind.CRITIQUE, RoundKind.RESPONSE, RoundKind.SYNTHESIS, RoundKind.REFINEMENT
)


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ConsensusPoint(_Model):
    """One convergence evaluation: the weighted score beside the plain majority."""

    iteration: int
    round: int
    position: int
    weighted_score: float
    threshold: float
    majority_agrees: bool
    agree: int
    disagree: int
    partial: int
    abstain: int
    converged: bool
    blocking: tuple[str, ...] = ()


class StancePoint(_Model):
    iteration: int
    round: int
    position: int
    stance: Stance
    agrees: bool
    score: int
    reasoning: str = ""
    concerns: tuple[str, ...] = ()


class Trajectory(_Model):
    participant: str
    model: str
    role: str
    votes: tuple[StancePoint, ...]


class Influence(_Model):
    """Something said between two votes of a participant that may have moved it."""

    round: int | None
    kind: str
    """A round kind (critique, response, synthesis, refinement) or ``human:<kind>``."""
    author: str
    position: int
    excerpt: str
    addressed_to_participant: bool = False
    """A critique of this participant's work, or a response to a critique it wrote."""


class StanceShift(_Model):
    participant: str
    iteration: int
    from_round: int
    to_round: int
    position: int
    before: Stance
    after: Stance
    toward_majority: bool
    """The new stance sides with the previous vote's majority and the old one did not."""
    influences: tuple[Influence, ...]
    conformity: bool
    """No new argument reached the participant between its two votes."""
    reasons: tuple[str, ...] = ()


class DissentRecord(_Model):
    id: str
    topic: str
    strongest: Stance
    who: tuple[str, ...]
    positions: dict[str, str]
    status: DivergenceStatus
    opened_round: int
    opened_iteration: int | None
    opened_position: int
    closed_position: int | None
    history: tuple[DivergenceChange, ...]


class HumanIntervention(_Model):
    kind: str
    """``input:<answer|note|steer|overrule>``, ``overrule`` (of a dissent) or ``rewind``."""
    author: str
    position: int
    iteration: int | None
    text: str


class Usage(_Model):
    calls: int = 0
    failed_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0


class ParticipantUsage(Usage):
    participant: str
    model: str


class RoundUsage(Usage):
    round: int
    kind: RoundKind
    iteration: int


class FailedCall(_Model):
    round: int
    participant: str
    attempt: int
    position: int
    error_type: str
    message: str
    will_retry: bool
    model: str | None = None
    cost_usd: float | None = None


class MinorityEntry(_Model):
    who: tuple[str, ...]
    concern: str
    since_iteration: int | None
    since_round: int
    since_position: int
    source: str
    """``dissent`` (an open divergence) or ``vote`` (a participant's last vote still disagrees)."""
    divergence_id: str | None = None
    strongest: Stance | None = None


class AuditReport(_Model):
    session_id: str
    title: str
    status: str
    status_reason: str
    events: int
    head_hash: str
    iterations: int
    fork_origin: ForkOrigin | None
    inherited_rounds: int
    sealed: bool
    consensus: tuple[ConsensusPoint, ...]
    trajectories: tuple[Trajectory, ...]
    stance_shifts: tuple[StanceShift, ...]
    dissent: tuple[DissentRecord, ...]
    human_interventions: tuple[HumanIntervention, ...]
    usage_by_participant: tuple[ParticipantUsage, ...]
    usage_by_round: tuple[RoundUsage, ...]
    total: Usage
    failed_calls: tuple[FailedCall, ...]
    minority_report: tuple[MinorityEntry, ...]

    @property
    def conformity_flags(self) -> list[StanceShift]:
        return [s for s in self.stance_shifts if s.conformity]


# --------------------------------------------------------------------------- building


def excerpt(text: str, limit: int = _EXCERPT_CHARS) -> str:
    """Whitespace collapsed, cut at ``limit`` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def _event_positions(events: Sequence[RecordedEvent]) -> dict[tuple[str, int, str], int]:
    """(type, round, participant) → position of the newest such event."""
    out: dict[tuple[str, int, str], int] = {}
    for e in events:
        if "round" in e.data and "participant" in e.data:
            out[(e.type, int(e.data["round"]), str(e.data["participant"]))] = e.position
    return out


def _inherited_rounds(events: Sequence[RecordedEvent]) -> int:
    if events and events[0].type == "SessionForked":
        return len(events[0].data.get("state", {}).get("rounds", []))
    return 0


def _vote_rounds(state: SessionState) -> list[RoundState]:
    return [r for r in state.rounds if r.kind is RoundKind.CONVERGENCE]


def _trajectories(
    state: SessionState, positions: dict[tuple[str, int, str], int]
) -> list[Trajectory]:
    out = []
    for p in state.participants:
        points = []
        for r in _vote_rounds(state):
            c = r.contribution_of(p.name)
            if c is None or c.vote is None:
                continue
            points.append(
                StancePoint(
                    iteration=r.iteration,
                    round=r.number,
                    position=positions.get(("VoteRecorded", r.number, p.name), c.position),
                    stance=c.vote.effective_stance,
                    agrees=c.vote.agrees,
                    score=c.vote.score,
                    reasoning=c.vote.reasoning,
                    concerns=c.vote.concerns,
                )
            )
        out.append(
            Trajectory(participant=p.name, model=p.model, role=p.role.value, votes=tuple(points))
        )
    return out


def _majority_side(state: SessionState, round_no: int) -> bool | None:
    for c in state.convergence:
        if c.round == round_no:
            return c.majority_agrees
    return None


def _addressed_to(r: RoundState, c: ContributionState, participant: str) -> bool:
    target = r.targets.get(c.participant)
    if c.critique is not None and c.critique.target is not None:
        target = c.critique.target
    if r.kind is RoundKind.CRITIQUE:
        return target == participant
    if r.kind is RoundKind.RESPONSE:
        return target == participant
    return False


def _influences(
    state: SessionState, participant: str, from_round: int, to_round: int, from_pos: int,
    to_pos: int,
) -> list[Influence]:
    found: list[Influence] = []
    for r in state.rounds:
        if not from_round < r.number < to_round or r.kind not in _ARGUMENT_KINDS:
            continue
        for c in r.contributions:
            if c.participant == participant:
                continue
            found.append(
                Influence(
                    round=r.number,
                    kind=r.kind.value,
                    author=c.participant,
                    position=c.position,
                    excerpt=excerpt(c.response.content),
                    addressed_to_participant=_addressed_to(r, c, participant),
                )
            )
    for h in state.human_inputs:
        if from_pos < h.position < to_pos:
            found.append(
                Influence(
                    round=None,
                    kind=f"human:{h.kind}",
                    author=h.author,
                    position=h.position,
                    excerpt=excerpt(h.text),
                )
            )
    return sorted(found, key=lambda i: i.position)


def _shifts(state: SessionState, trajectories: list[Trajectory]) -> list[StanceShift]:
    shifts = []
    for t in trajectories:
        for prev, cur in zip(t.votes, t.votes[1:], strict=False):
            if prev.stance is cur.stance:
                continue
            influences = _influences(
                state, t.participant, prev.round, cur.round, prev.position, cur.position
            )
            majority = _majority_side(state, prev.round)
            toward = majority is not None and cur.agrees == majority and prev.agrees != majority
            reasons = []
            if not influences:
                reasons.append(
                    f"no critique, response, synthesis, refinement or human input between "
                    f"round {prev.round} and round {cur.round}"
                )
                if toward:
                    reasons.append("moved to the previous vote's majority")
                if not cur.reasoning.strip():
                    reasons.append("the vote gives no reasoning")
            shifts.append(
                StanceShift(
                    participant=t.participant,
                    iteration=cur.iteration,
                    from_round=prev.round,
                    to_round=cur.round,
                    position=cur.position,
                    before=prev.stance,
                    after=cur.stance,
                    toward_majority=toward,
                    influences=tuple(influences),
                    conformity=not influences,
                    reasons=tuple(reasons),
                )
            )
    return sorted(shifts, key=lambda s: (s.to_round, s.participant))


def _dissent(state: SessionState) -> list[DissentRecord]:
    out = []
    for d in state.divergences:
        opened = state.round(d.opened_round)
        closing = [h for h in d.history if h.status.closed]
        out.append(
            DissentRecord(
                id=d.id,
                topic=d.topic,
                strongest=d.strongest,
                who=tuple(p.participant for p in d.positions),
                positions={p.participant: p.position for p in d.positions},
                status=d.status,
                opened_round=d.opened_round,
                opened_iteration=opened.iteration if opened is not None else None,
                opened_position=d.opened_position,
                closed_position=closing[-1].position if closing and not d.is_open else None,
                history=tuple(h.model_copy() for h in d.history),
            )
        )
    return out


def _human(state: SessionState) -> list[HumanIntervention]:
    out = [
        HumanIntervention(
            kind=f"input:{h.kind}",
            author=h.author,
            position=h.position,
            iteration=h.iteration,
            text=h.text,
        )
        for h in state.human_inputs
    ]
    for d in state.divergences:
        for h in d.history:
            if h.status is DivergenceStatus.OVERRULED:
                r = state.round(h.round)
                out.append(
                    HumanIntervention(
                        kind="overrule",
                        author=h.by,
                        position=h.position,
                        iteration=r.iteration if r is not None else None,
                        text=f"overruled dissent {d.id} ({d.topic})"
                        + (f": {h.note}" if h.note else ""),
                    )
                )
    for w in state.rewinds:
        out.append(
            HumanIntervention(
                kind="rewind",
                author="",
                position=w.position,
                iteration=w.from_iteration,
                text=f"back {w.steps}: iteration {w.from_iteration} → {w.to_iteration}",
            )
        )
    return sorted(out, key=lambda h: h.position)


def _failed_calls(state: SessionState, events: Sequence[RecordedEvent]) -> list[FailedCall]:
    by_position = {e.position: e for e in events if e.type == "ProviderCallFailed"}
    out = []
    for f in state.failures:
        e = by_position.get(f.position)
        same = (
            e is not None
            and int(e.data["round"]) == f.round
            and e.data["participant"] == f.participant
            and int(e.data["attempt"]) == f.attempt
        )
        out.append(
            FailedCall(
                round=f.round,
                participant=f.participant,
                attempt=f.attempt,
                position=f.position,
                error_type=f.error_type,
                message=f.message,
                will_retry=f.will_retry,
                model=str(e.data["model"]) if same and e is not None else None,
                cost_usd=float(e.data.get("cost_usd", 0.0)) if same and e is not None else None,
            )
        )
    return out


def _usage(
    state: SessionState, failed: list[FailedCall], events: Sequence[RecordedEvent]
) -> tuple[list[ParticipantUsage], list[RoundUsage]]:
    fail_tokens: dict[int, tuple[int, int]] = {}
    for e in events:
        if e.type == "ProviderCallFailed":
            t = e.data.get("tokens") or {}
            fail_tokens[e.position] = (int(t.get("input", 0)), int(t.get("output", 0)))
    per_p: dict[str, dict[str, Any]] = {
        p.name: {"participant": p.name, "model": p.model} for p in state.participants
    }
    per_r: dict[int, dict[str, Any]] = {
        r.number: {"round": r.number, "kind": r.kind, "iteration": r.iteration}
        for r in state.rounds
    }

    def add(acc: dict[str, Any], calls: int, failed_: int, tin: int, tout: int, usd: float) -> None:
        acc["calls"] = acc.get("calls", 0) + calls
        acc["failed_calls"] = acc.get("failed_calls", 0) + failed_
        acc["input_tokens"] = acc.get("input_tokens", 0) + tin
        acc["output_tokens"] = acc.get("output_tokens", 0) + tout
        acc["cost_usd"] = acc.get("cost_usd", 0.0) + usd

    for r in state.rounds:
        for c in r.contributions:
            t = c.response.tokens
            args = (1, 0, t.input, t.output, c.response.cost_usd)
            add(per_p.setdefault(c.participant, {"participant": c.participant, "model": c.model}),
                *args)
            add(per_r[r.number], *args)
    for f in failed:
        tin, tout = fail_tokens.get(f.position, (0, 0)) if f.model is not None else (0, 0)
        args = (1, 1, tin, tout, f.cost_usd or 0.0)
        add(per_p.setdefault(f.participant, {"participant": f.participant, "model": ""}), *args)
        if f.round in per_r:
            add(per_r[f.round], *args)
    return (
        [ParticipantUsage.model_validate(v) for v in per_p.values()],
        [RoundUsage.model_validate(per_r[k]) for k in sorted(per_r)],
    )


def _minority(
    state: SessionState, dissent: list[DissentRecord], trajectories: list[Trajectory]
) -> list[MinorityEntry]:
    out = [
        MinorityEntry(
            who=d.who,
            concern=d.topic
            + ("" if not d.positions else " — " + "; ".join(d.positions.values())),
            since_iteration=d.opened_iteration,
            since_round=d.opened_round,
            since_position=d.opened_position,
            source="dissent",
            divergence_id=d.id,
            strongest=d.strongest,
        )
        for d in dissent
        if not d.status.closed
    ]
    for t in trajectories:
        if not t.votes or t.votes[-1].agrees:
            continue
        streak = t.votes
        first = len(streak) - 1
        while first > 0 and not streak[first - 1].agrees:
            first -= 1
        last, since = t.votes[-1], t.votes[first]
        concern = "; ".join(last.concerns) or last.reasoning or f"votes {last.stance.value}"
        out.append(
            MinorityEntry(
                who=(t.participant,),
                concern=concern,
                since_iteration=since.iteration,
                since_round=since.round,
                since_position=since.position,
                source="vote",
                strongest=last.stance,
            )
        )
    return out


def audit_report(events: Sequence[RecordedEvent], state: SessionState) -> AuditReport:
    """The audit of one session from its own events and its state as of the last of them."""
    positions = _event_positions(events)
    trajectories = _trajectories(state, positions)
    dissent = _dissent(state)
    failed = _failed_calls(state, events)
    by_participant, by_round = _usage(state, failed, events)
    total = Usage(
        calls=sum(u.calls for u in by_participant),
        failed_calls=sum(u.failed_calls for u in by_participant),
        input_tokens=state.tokens.input,
        output_tokens=state.tokens.output,
        cost_usd=state.cost_usd,
    )
    return AuditReport(
        session_id=state.id,
        title=state.topic.title,
        status=state.status.value,
        status_reason=state.status_reason,
        events=state.version,
        head_hash=state.head_hash,
        iterations=state.iteration,
        fork_origin=state.fork_origin,
        inherited_rounds=_inherited_rounds(events),
        sealed=state.seal is not None,
        consensus=tuple(
            ConsensusPoint(
                iteration=c.iteration,
                round=c.round,
                position=c.position,
                weighted_score=c.score,
                threshold=c.threshold,
                majority_agrees=c.majority_agrees,
                agree=c.agree,
                disagree=c.disagree,
                partial=c.partial,
                abstain=c.abstain,
                converged=c.converged,
                blocking=tuple(c.blocking),
            )
            for c in state.convergence
        ),
        trajectories=tuple(trajectories),
        stance_shifts=tuple(_shifts(state, trajectories)),
        dissent=tuple(dissent),
        human_interventions=tuple(_human(state)),
        usage_by_participant=tuple(by_participant),
        usage_by_round=tuple(by_round),
        total=total,
        failed_calls=tuple(failed),
        minority_report=tuple(_minority(state, dissent, trajectories)),
    )


# --------------------------------------------------------------------------- Markdown


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


def _usd(x: float) -> str:
    return f"${x:.4f}"


def render_markdown(report: AuditReport) -> str:
    """A document a person reads top to bottom: headings, tables, the minority report last."""
    r = report
    out = [f"# Audit: {r.title}", ""]
    meta = [
        ("Session", f"`{r.session_id}`"),
        ("Status", r.status + (f" ({r.status_reason})" if r.status_reason else "")),
        ("Events", str(r.events)),
        ("Head hash", f"`{r.head_hash[:16]}…`"),
        ("Sealed", "yes" if r.sealed else "no"),
        ("Iterations", str(r.iterations)),
        ("Total", f"{r.total.input_tokens} in / {r.total.output_tokens} out tokens, "
                  f"{_usd(r.total.cost_usd)}, {r.total.failed_calls} failed call(s)"),
    ]
    if r.fork_origin is not None:
        o = r.fork_origin
        meta.append(
            ("Forked from", f"`{o.parent_id}` at event {o.parent_position} (iteration "
                            f"{o.parent_iteration}); rounds 1–{r.inherited_rounds} are inherited "
                            "and their positions refer to the parent")
        )
    out += _table(("", ""), meta)

    out += ["## Consensus per iteration", "",
            "The weighted score (by role) beside the plain majority of the vote.", ""]
    if r.consensus:
        out += _table(
            ("Iteration", "Round", "Weighted score", "Threshold", "Majority",
             "Agree / disagree / partial / abstain", "Converged"),
            [
                (c.iteration, c.round, f"{c.weighted_score:.2f}", f"{c.threshold:.2f}",
                 "agrees" if c.majority_agrees else "does not agree",
                 f"{c.agree} / {c.disagree} / {c.partial} / {c.abstain}",
                 "yes" if c.converged else "no")
                for c in r.consensus
            ],
        )
    else:
        out += ["No convergence vote was evaluated.", ""]

    out += ["## Stance trajectories", ""]
    vote_rounds = sorted({v.round for t in r.trajectories for v in t.votes})
    if vote_rounds:
        rows = []
        for t in r.trajectories:
            by_round = {v.round: v.stance.value for v in t.votes}
            cells = (by_round.get(n, "—") for n in vote_rounds)
            rows.append((f"{t.participant} ({t.model})", *cells))
        out += _table(("Participant", *(f"round {n}" for n in vote_rounds)), rows)
    else:
        out += ["No votes were recorded.", ""]

    out += ["## Stance changes", ""]
    if not r.stance_shifts:
        out += ["No participant changed its stance.", ""]
    for s in r.stance_shifts:
        flag = " — ⚠ **conformity flag**" if s.conformity else ""
        out.append(
            f"### {s.participant}: {s.before.value} → {s.after.value} "
            f"(round {s.from_round} → {s.to_round}, event {s.position}){flag}"
        )
        out.append("")
        if s.toward_majority and not s.conformity:
            out += ["Moved to the previous vote's majority.", ""]
        for reason in s.reasons:
            out.append(f"- {reason}")
        for i in s.influences:
            where = f"round {i.round} ({i.kind})" if i.round is not None else i.kind
            to_it = " — addressed to this participant" if i.addressed_to_participant else ""
            out.append(f"- {where}, {i.author}, event {i.position}{to_it}: “{i.excerpt}”")
        out.append("")

    out += ["## Conformity flags", ""]
    flags = r.conformity_flags
    if flags:
        out += _table(
            ("Participant", "Change", "Rounds", "Toward majority"),
            [(s.participant, f"{s.before.value} → {s.after.value}",
              f"{s.from_round} → {s.to_round}", "yes" if s.toward_majority else "no")
             for s in flags],
        )
    else:
        out += ["None: every stance change followed a new argument.", ""]

    out += ["## Dissent", ""]
    if r.dissent:
        out += _table(
            ("Id", "Topic", "Who", "Strongest", "Opened", "Status", "Closed at"),
            [(d.id, d.topic, ", ".join(d.who), d.strongest.value,
              f"round {d.opened_round}, event {d.opened_position}", d.status.value,
              f"event {d.closed_position}" if d.closed_position is not None else "—")
             for d in r.dissent],
        )
    else:
        out += ["No dissent was recorded.", ""]

    out += ["## Human interventions", ""]
    if r.human_interventions:
        out += _table(
            ("Event", "Kind", "Author", "Iteration", "What"),
            [(h.position, h.kind, h.author or "—", h.iteration if h.iteration is not None else "—",
              excerpt(h.text)) for h in r.human_interventions],
        )
    else:
        out += ["None.", ""]

    out += ["## Tokens and cost", "", "### Per participant", ""]
    out += _table(
        ("Participant", "Model", "Calls", "Failed", "Input tokens", "Output tokens", "Cost"),
        [(u.participant, u.model, u.calls, u.failed_calls, u.input_tokens, u.output_tokens,
          _usd(u.cost_usd)) for u in r.usage_by_participant],
    )
    out += ["### Per round", ""]
    out += _table(
        ("Round", "Kind", "Iteration", "Calls", "Failed", "Input tokens", "Output tokens", "Cost"),
        [(u.round, u.kind.value, u.iteration, u.calls, u.failed_calls, u.input_tokens,
          u.output_tokens, _usd(u.cost_usd)) for u in r.usage_by_round],
    )

    out += ["## Failed calls", ""]
    if r.failed_calls:
        out += _table(
            ("Event", "Round", "Participant", "Attempt", "Error", "Message", "Retried"),
            [(f.position, f.round, f.participant, f.attempt, f.error_type, excerpt(f.message, 80),
              "yes" if f.will_retry else "no") for f in r.failed_calls],
        )
    else:
        out += ["None.", ""]

    out += ["## Minority report", ""]
    if r.minority_report:
        out += ["Dissent still unresolved when the record ends.", ""]
        out += _table(
            ("Who", "Concern", "Since", "Source"),
            [(", ".join(m.who), m.concern,
              f"iteration {m.since_iteration}, round {m.since_round}, event {m.since_position}",
              f"dissent {m.divergence_id}" if m.divergence_id else "last vote")
             for m in r.minority_report],
        )
    else:
        out += ["No unresolved dissent.", ""]
    return "\n".join(out).rstrip() + "\n"
