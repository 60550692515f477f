"""Rendering of the audit report: Markdown for people (the terminal shows it through Rich).

Only :class:`~.model.AuditReport` is read here, never the ledger: whatever the report says,
every rendering says. Model output is untrusted text: table cells have ``|`` escaped and
newlines flattened, and the terminal rendering goes through Rich's Markdown, which renders text
and never interprets console markup.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..domain.text import clip
from .model import AuditReport, DeliberationEffect, VoteSummary

__all__ = ["excerpt", "render_markdown"]

_EXCERPT_CHARS = 160


def excerpt(text: str, limit: int = _EXCERPT_CHARS) -> str:
    """Whitespace collapsed, cut at ``limit`` characters with an ellipsis."""
    return clip(text, limit, rstrip=True)


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


def _table_section(
    title: str,
    headers: Sequence[str],
    rows: Sequence[Sequence[object]],
    *,
    empty: str,
    intro: str = "",
) -> list[str]:
    """A section of one table (after its introduction, if any); ``empty`` stands in for the
    table when there are no rows, so the reader learns there was nothing, not a gap."""
    out = [f"## {title}", "", *((intro, "") if intro else ())]
    if not rows:
        return [*out, empty, ""]
    return out + _table(headers, rows)


def _opt(x: float | None, fmt: str = "{:.2f}") -> str:
    return "—" if x is None else fmt.format(x)


def _header(r: AuditReport) -> list[str]:
    meta = [
        ("Session", f"`{r.session_id}`"),
        ("Status", r.status + (f" ({r.status_reason})" if r.status_reason else "")),
        ("Events", str(r.events)),
        ("Head hash", f"`{r.head_hash[:16]}…`"),
        ("Sealed", "yes" if r.sealed else "no"),
        ("Iterations", str(r.iterations)),
        *([("Document", "truncated: cut off at its token limit, its end is missing")]
          if r.document_truncated else []),
        ("Total", f"{r.total.input_tokens} in / {r.total.output_tokens} out tokens, "
                  f"{r.total.cost_text}, {r.total.failed_calls} failed call(s)"),
    ]
    if r.anonymized:
        meta.append(("Anonymized review", "; ".join(f"{k} = {v}" for k, v in r.labels.items())
                     or "yes (no label recorded yet)"))
    if r.fork_origin is not None:
        o = r.fork_origin
        meta.append(
            ("Forked from", f"`{o.parent_id}` at event {o.parent_position} (iteration "
                            f"{o.parent_iteration}); rounds 1–{r.inherited_rounds} are inherited "
                            "and their positions refer to the parent")
        )
    return [f"# Audit: {' '.join(r.title.split())}", "", *_table(("", ""), meta)]


def _consensus(r: AuditReport) -> list[str]:
    return _table_section(
        "Consensus per iteration",
        ("Iteration", "Round", "Weighted score", "Threshold", "Majority",
         "Agree / disagree / partial / abstain", "Converged"),
        [(c.iteration, c.round, f"{c.weighted_score:.2f}", f"{c.threshold:.2f}",
          "agrees" if c.majority_agrees else "does not agree",
          f"{c.agree} / {c.disagree} / {c.partial} / {c.abstain}",
          "yes" if c.converged else "no") for c in r.consensus],
        empty="No convergence vote was evaluated.",
        intro="The weighted score (by role) beside the plain majority of the vote.",
    )


def _trajectories(r: AuditReport) -> list[str]:
    out = ["## Stance trajectories", ""]
    vote_rounds = sorted({v.round for t in r.trajectories for v in t.votes})
    if not vote_rounds:
        return [*out, "No votes were recorded.", ""]
    rows = []
    for t in r.trajectories:
        by_round = {v.round: v.stance.value + (" ⚠" if v.contradiction else "") for v in t.votes}
        rows.append((f"{t.participant} ({t.model})", *(by_round.get(n, "—") for n in vote_rounds)))
    out += _table(("Participant", *(f"round {n}" for n in vote_rounds)), rows)
    contradictions = [
        f"- ⚠ {t.participant}, round {v.round}: {v.contradiction}"
        for t in r.trajectories for v in t.votes if v.contradiction
    ]
    if contradictions:
        out += ["Votes whose score contradicts their stance (the score counts in the weighted "
                "outcome, the stance in the majority and the dissent log):", "",
                *contradictions, ""]
    return out


def _changes(r: AuditReport) -> list[str]:
    out = ["## Stance changes", ""]
    if not r.stance_shifts:
        return [*out, "No participant changed its stance.", ""]
    for s in r.stance_shifts:
        flag = " — ⚠ **conformity flag**" if s.conformity else ""
        out += [f"### {s.participant}: {s.before.value} → {s.after.value} "
                f"(round {s.from_round} → {s.to_round}, event {s.position}){flag}", "",
                f"{s.reason[:1].upper()}{s.reason[1:]}.", ""]
        for i in s.influences:
            where = f"round {i.round} ({i.kind})" if i.round is not None else "human input"
            out.append(f"- {where}, {i.from_}, event {i.position}, on “{i.topic}”: "
                       f"“{' '.join(i.quote.split())}”")
        out += [f"- own argument: {a}" for a in s.own_arguments]
        if s.influences or s.own_arguments:
            out.append("")
    return out


def _influence(r: AuditReport) -> list[str]:
    return _table_section(
        "Who moved whom",
        ("From", "To", "Round", "Topic", "Quote", "Event"),
        [(i.from_, i.to, i.round if i.round is not None else "human", i.topic,
          f"“{excerpt(i.quote, 120)}”", i.position) for i in r.influence],
        empty="No stance change followed a matching argument.",
        intro="Contributions between two votes that argued toward the new stance, matched by "
        "topic. Quotes are verbatim (the table shortens long ones; the stance changes "
        "above give them whole).",
    )


def _conformity(r: AuditReport) -> list[str]:
    return _table_section(
        "Conformity flags",
        ("Participant", "Round", "From", "To", "Why"),
        [(c.participant, c.round, c.from_.value, c.to.value, c.reason) for c in r.conformity],
        empty="None.",
        intro="A stance that moved toward the previous vote's majority with no new argument.",
    )


def _effect_rows(e: DeliberationEffect) -> list[tuple[str, str]]:
    def vote(v: VoteSummary | None) -> str:
        if v is None:
            return "—"
        side = "agrees" if v.majority_agrees else "does not agree"
        return (f"round {v.round}: majority {side} ({v.agree}/{v.disagree}/{v.partial}), "
                f"score {v.weighted_score:.2f}")

    docs = ", ".join(
        f"it. {d.iteration}: {_opt(d.similarity)}" for d in e.document_change
    ) or "—"
    rate = "—" if e.conformity_rate is None else f"{e.conformity_rate:.0%}"
    return [
        ("First vote", vote(e.first_vote)),
        ("Final vote", vote(e.final_vote)),
        ("Outcome", e.outcome),
        ("Score and majority disagreed", "rounds " + ", ".join(map(str, e.disagreement_rounds))
         if e.score_majority_disagreed else "never"),
        ("Document similarity to the previous iteration", docs),
        ("Conformity rate", f"{rate} ({e.conformity_flags} of {e.stance_changes} changes)"),
        ("Dissent", f"{e.dissents.resolved} resolved, {e.dissents.overruled} overruled, "
                    f"{e.dissents.withdrawn} withdrawn, {e.dissents.open} still open"),
    ]


def _effect(r: AuditReport) -> list[str]:
    return ["## Did deliberation help?", "", *_table(("", ""), _effect_rows(r.deliberation_effect))]


def _self_preference(r: AuditReport) -> list[str]:
    out = ["## Self-preference", "",
           "Mean score (and share of agreeing votes) each participant gave its own text and "
           "others' texts.", ""]
    rows = [(p.participant, p.own_judgements, _opt(p.own_mean_score, "{:.1f}"),
             _opt(p.own_agree_rate, "{:.0%}"), p.others_judgements,
             _opt(p.others_mean_score, "{:.1f}"), _opt(p.others_agree_rate, "{:.0%}"),
             _opt(p.score_gap, "{:+.1f}")) for p in r.self_preference]
    return out + _table(("Participant", "Own n", "Own score", "Own agree", "Others n",
                         "Others score", "Others agree", "Gap"), rows)


def _dissent(r: AuditReport) -> list[str]:
    return _table_section(
        "Dissent",
        ("Id", "Topic", "Held by", "Opened", "Addressed by", "Ended"),
        [(d.id, d.topic, d.holders(), f"round {d.opened_round}, event {d.opened_position}",
          d.addressed_by(), d.ended())
         for d in r.dissent],
        empty="No dissent was recorded.",
    )


def _human(r: AuditReport) -> list[str]:
    return _table_section(
        "Human interventions",
        ("Event", "Kind", "Author", "Iteration", "What"),
        [(h.position, h.kind, h.author or "—", h.iteration if h.iteration is not None else "—",
          excerpt(h.text)) for h in r.human_interventions],
        empty="None.",
    )


def _usage(r: AuditReport) -> list[str]:
    out = ["## Tokens and cost", "", "### Per participant", ""]
    out += _table(
        ("Participant", "Model", "Calls", "Failed", "Input tokens", "Output tokens", "Cost"),
        [(u.participant, u.model, u.calls, u.failed_calls, u.input_tokens, u.output_tokens,
          u.cost_text) for u in r.usage_by_participant],
    )
    out += ["### Per round", ""]
    return out + _table(
        ("Round", "Kind", "Iteration", "Calls", "Failed", "Input tokens", "Output tokens", "Cost"),
        [(u.round, u.kind.value, u.iteration, u.calls, u.failed_calls, u.input_tokens,
          u.output_tokens, u.cost_text) for u in r.usage_by_round],
    )


def _failures(r: AuditReport) -> list[str]:
    return _table_section(
        "Failed calls",
        ("Event", "Round", "Participant", "Attempt", "Error", "Message", "Retried"),
        [(f.position, f.round, f.participant, f.attempt, f.error_type, excerpt(f.message, 80),
          "yes" if f.will_retry else "no") for f in r.failed_calls],
        empty="None.",
    )


def _minority(r: AuditReport) -> list[str]:
    out = ["## Minority report", ""]
    if not r.minority_report:
        return [*out, "No unresolved dissent.", ""]
    out += ["Dissent still unresolved when the record ends.", ""]
    return out + _table(
        ("Who", "Concern", "Since", "Source"),
        [(", ".join(m.who), m.concern,
          f"iteration {m.since_iteration}, round {m.since_round}, event {m.since_position}",
          f"dissent {m.divergence_id}" if m.divergence_id else "last vote")
         for m in r.minority_report],
    )


def render_markdown(report: AuditReport) -> str:
    """A document a person reads top to bottom: headings, tables, the minority report last."""
    parts = (_header, _consensus, _effect, _trajectories, _changes, _influence, _conformity,
             _self_preference, _dissent, _human, _usage, _failures, _minority)
    out: list[str] = []
    for part in parts:
        out += part(report)
    return "\n".join(out).rstrip() + "\n"
