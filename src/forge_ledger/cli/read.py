"""Read-side commands: ``show``, ``log`` and ``verify`` (``sessions`` is :mod:`.listing`).

These commands only read the ledger (opened with ``create=False``, so a mistyped ``--store``
never leaves an empty database behind) and never import litellm: they must stay fast and work
on machines without provider credentials. Everything printed is a projection of stored events:
``show`` folds them into :class:`~forge_ledger.domain.state.SessionState` (optionally as of an
earlier event, iteration or time) or, for the present, reads the read model's rows when it is
current (the same :class:`~forge_ledger.projections.SessionView` either way), ``log`` prints
them as stored, ``verify`` recomputes the hash chain.

The JSON documents built here (:func:`session_json`, and
each event's :meth:`~forge_ledger.ledger.RecordedEvent.as_json` for ``log --json``) are the
stable, scriptable face of the ledger; the rich tables are for people and may change.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any
from uuid import UUID

import click
from rich.table import Table
from rich.text import Text

from ..domain import events as ev
from ..domain.state import ContributionState, DivergenceState, RoundState, SessionState
from ..errors import ChainBrokenError, UsageError
from ..ledger import ChainReport, Ledger, RecordedEvent
from ..ledger import verify_store as _verify_store
from ..ledger.outputs import store_outputs
from ..projections import (
    SessionView,
    current_session_view,
    session_ems,
    session_view,
)
from ..projections.show_view import preview as _preview
from . import cli
from ._common import (
    HMAC_KEY_ENV,
    add_row,
    emit_json,
    err_console,
    hmac_key,
    json_option,
    money,
    open_ledger,
    out_console,
    parse_iso,
    print_table,
    printable,
    shown,
    store_option,
    when,
)
from ._integrity import chain_broken, check_chain

__all__ = [
    "HMAC_KEY_ENV",
    "log",
    "session_json",
    "show",
    "verify",
]

_LOG_OMITS = ("session_id", "notification_id")
"""What ``log --json`` leaves out of each event: the session is the one asked for."""


# --------------------------------------------------------------------------- EMS (one place)


# --------------------------------------------------------------------------- JSON documents


def _contribution_json(state: SessionState, c: ContributionState) -> dict[str, Any]:
    from ..engine import cost_fields

    r = c.response
    out: dict[str, Any] = {
        "participant": c.participant,
        "attempt": c.attempt,
        "purpose": c.purpose,
        "position": c.position,
        "at": c.at.isoformat(),
        "model": c.model,
        "tokens": {"input": r.tokens.input, "output": r.tokens.output},
        **cost_fields(r.cost_usd, int(c.unpriced)),
        "duration_ms": r.duration_ms,
        "stop_reason": r.stop_reason.value,
        "content": state.answer(c),
    }
    if c.critique is not None:
        out["critique"] = c.critique.model_dump(mode="json")
    if c.opinion is not None:
        out["opinion"] = c.opinion.model_dump(mode="json")
    if c.vote is not None:
        out["vote"] = c.vote.model_dump(mode="json")
    if c.parse_error is not None:
        out["parse_error"] = c.parse_error
    return out


def _round_json(state: SessionState, r: RoundState) -> dict[str, Any]:
    return {
        "number": r.number,
        "kind": r.kind.value,
        "iteration": r.iteration,
        "status": r.status.value,
        "depth": r.depth,
        "superseded": r.superseded,
        "expected": list(r.expected),
        "targets": dict(r.targets),
        "abstained": list(r.abstained),
        "contributions": [_contribution_json(state, c) for c in r.contributions],
    }


def _dissent_json(d: DivergenceState) -> dict[str, Any]:
    return {
        "id": d.id,
        "topic": d.topic,
        "status": d.status.value,
        "strongest": d.strongest.value,
        "opened_round": d.opened_round,
        "positions": [p.model_dump(mode="json") for p in d.positions],
    }


def session_json(state: SessionState, *, ems: int | None) -> dict[str, Any]:
    """The ``show --json`` document for ``state`` (now or as of a past point)."""
    latest = state.latest_convergence
    convergence = (
        None
        if latest is None
        else {
            "score": latest.score,
            "converged": latest.converged,
            "majority_agrees": latest.majority_agrees,
            "agree": latest.agree,
            "disagree": latest.disagree,
            "partial": latest.partial,
            "abstain": latest.abstain,
            "threshold": latest.threshold,
            "round": latest.round,
            "iteration": latest.iteration,
            "blocking": list(latest.blocking),
            "remaining_issues": list(latest.remaining_issues),
        }
    )
    from ..engine import cost_fields

    origin = state.fork_origin
    last = state.last_round
    return {
        "id": state.id,
        "slug": state.slug,
        "title": state.topic.title,
        "description": state.topic.description,
        "status": state.status.value,
        "status_reason": state.status_reason,
        "phase": state.phase,
        "iteration": state.iteration,
        "round": last.number if last is not None else 0,
        "version": state.version,
        "head_hash": state.head_hash,
        "created": state.created_at.isoformat(),
        "updated": state.updated_at.isoformat(),
        "ems": ems,
        "participants": [
            {"name": p.name, "model": p.model, "role": p.role.value} for p in state.participants
        ],
        "rounds": [_round_json(state, r) for r in state.rounds],
        "convergence": convergence,
        "open_dissent": [_dissent_json(d) for d in state.open_divergences],
        "tokens": {"input": state.tokens.input, "output": state.tokens.output},
        **cost_fields(state.cost_usd, state.unpriced_calls),
        "document_truncated": state.document_truncated,
        "lineage": (
            None
            if origin is None
            else {"parent_id": origin.parent_id, "parent_position": origin.parent_position}
        ),
    }


# --------------------------------------------------------------------------- helpers


def _resolve_types(types: Sequence[str]) -> set[str]:
    """``--type`` values → exact event type names (case-insensitive); unknown names refused."""
    by_lower = {name.lower(): name for name in ev.EVENT_TYPES}
    chosen: set[str] = set()
    for t in types:
        name = by_lower.get(t.strip().lower())
        if name is None:
            close = [n for n in ev.EVENT_TYPES if t.strip().lower() in n.lower()]
            hint = (
                f"did you mean {', '.join(sorted(close)[:4])}?"
                if close
                else "e.g. SessionStarted, RoundStarted, ContributionRecorded, VoteRecorded"
            )
            raise UsageError(f"unknown event type {t!r} for --type", hint=hint)
        chosen.add(name)
    return chosen


# --------------------------------------------------------------------------- show


@cli.command()
@click.argument("session")
@click.option("--at-event", type=click.IntRange(min=1), default=None, metavar="N",
              help="Show the session as of event position N.")
@click.option("--at-iteration", type=click.IntRange(min=1), default=None, metavar="K",
              help="Show the session as it was at the end of iteration K.")
@click.option("--at-time", default=None, metavar="ISO",
              help="Show the session as of a time (ISO 8601 with a timezone, e.g. "
              "2026-01-09T10:30Z).")
@store_option
@json_option
def show(
    session: str,
    at_event: int | None,
    at_iteration: int | None,
    at_time: str | None,
    store: str | None,
    as_json: bool,
) -> None:
    """Show SESSION (full id or unique prefix), now or as of a past point.

    The present view comes from the read model when 'projections update' has brought it up
    to date with the store (the same output, without folding the session's events); --json
    and the --at-* options read the ledger.

    EMS is the document's maturity, 0-100: a weighted mean of the critics' latest scores
    (clarity, 25%), the share of their suggestions a later round could answer (coverage,
    25%), the latest convergence score (consensus, 30%) and the share of divergences closed,
    an addressed one counting half (resolution, 20%). An axis under 50 suggests a technique
    for the next refinement.
    """
    points = {"--at-event": at_event, "--at-iteration": at_iteration, "--at-time": at_time}
    as_of = next((option for option, value in points.items() if value is not None), None)
    when = parse_iso(at_time, "--at-time") if at_time is not None else None
    with open_ledger(store, create=False) as ledger:
        sid = check_chain(ledger, session)
        view = (
            None
            if as_json or as_of or chain_broken()
            else current_session_view(ledger, store_outputs(ledger.location).views, sid)
        )
        if view is None:
            state = ledger.state(sid, at_event=at_event, at_iteration=at_iteration, at_time=when)
            if as_json:
                emit_json(session_json(state, ems=session_ems(state)))
                return
            view = session_view(state)
    _print_session(view, as_of=as_of)


def _print_session(view: SessionView, *, as_of: str | None) -> None:
    header = Table.grid(padding=(0, 2))
    header.add_column(style="bold")
    header.add_column()
    add_row(header, "Session", f"{view.id}  ({view.slug})")
    add_row(header, "Topic", view.title)
    status = view.status + (f" — {view.status_reason}" if view.status_reason else "")
    add_row(header, "Status", status)
    add_row(header, "Phase", f"{view.phase}, iteration {view.iteration}")
    add_row(header, "As of", f"event {view.version} ({when(view.updated_at)})"
                   + (f", selected by {as_of}" if as_of else ""))
    add_row(header, "EMS", f"{view.ems}/100 (maturity: critique scores, suggestions answered, "
            "consensus, dissent closed; see show --help)")
    add_row(header,
        "Usage",
        f"{view.tokens_in} in / {view.tokens_out} out tokens, "
        f"{money(view.cost_usd, unpriced=view.unpriced)}",
    )
    if view.fork_origin is not None:
        parent_id, parent_position = view.fork_origin
        add_row(header, "Forked from", f"{parent_id} at event {parent_position}")
    print_table(header)

    people = Table(title="Participants", title_justify="left")
    for col in ("name", "model", "role"):
        people.add_column(col)
    for name, model, role in view.participants:
        add_row(people, name, model, role)
    print_table(people)

    out_console.print(Text("Rounds", style="bold"))
    if not view.rounds and view.status_reason == "imported":
        out_console.print(
            "  none in this ledger: the session came from a file, whose history 'export' "
            "gives back (replay needs the original ledger)"
        )
    elif not view.rounds:
        out_console.print("  none yet")
    for r in view.rounds:
        flags = [r.status] + (["superseded"] if r.superseded else [])
        out_console.print(
            shown(f"  #{r.number} {r.kind}, iteration {r.iteration} ({', '.join(flags)})")
        )
        width = max((len(printable(c.participant)) for c in r.lines), default=0)
        for c in r.lines:
            line = shown(f"    {printable(c.participant):<{width}}  {c.tokens:>6} tok  ")
            line.append_text(shown(c.preview, style="red" if c.failed else ""))
            out_console.print(line)
    latest = view.convergence
    if latest is None:
        out_console.print("Convergence: no vote yet")
    else:
        verdict = "converged" if latest.converged else "not converged"
        majority = "agrees" if latest.majority_agrees else "does not agree"
        out_console.print(
            f"Convergence (round {latest.round}, iteration {latest.iteration}): weighted score "
            f"{latest.score:.2f} (threshold {latest.threshold:.2f}) → {verdict}; plain majority "
            f"{majority} ({latest.agree} agree, {latest.disagree} disagree, "
            f"{latest.partial} partial, {latest.abstain} abstain)"
        )

    dissent = view.dissent
    if not dissent:
        out_console.print("Open dissent: none")
        return
    table = Table(title="Open dissent", title_justify="left")
    for col in ("id", "topic", "status", "positions"):
        table.add_column(col)
    for d in dissent:
        positions = "; ".join(f"{who}: {pos} ({stance})" for who, pos, stance in d.positions)
        add_row(table, d.id, d.topic, d.status, positions)
    print_table(table)


# --------------------------------------------------------------------------- log


@cli.command()
@click.argument("session")
@click.option("--type", "types", multiple=True, metavar="T",
              help="Only events of type T (repeatable), e.g. --type VoteRecorded.")
@store_option
@json_option
def log(session: str, types: tuple[str, ...], store: str | None, as_json: bool) -> None:
    """Print SESSION's events in order (full id or unique prefix)."""
    wanted = _resolve_types(types)
    with open_ledger(store, create=False) as ledger:
        sid = check_chain(ledger, session)
        events = [e for e in ledger.events(sid) if not wanted or e.type in wanted]
    if as_json:
        emit_json([e.as_json(exclude=_LOG_OMITS) for e in events])
        return
    table = Table(title=f"Events of {sid}", title_justify="left")
    for col in ("pos", "time", "type", "summary", "hash"):
        table.add_column(col, justify="right" if col == "pos" else "left")
    for e in events:
        add_row(table,
            str(e.position), when(e.timestamp), e.type, _event_summary(e), e.hash[:12]
        )
    print_table(table)


def _event_summary(e: RecordedEvent) -> str:
    d = e.data
    parts: list[str] = []
    if "round" in d and isinstance(d["round"], int):
        parts.append(f"round {d['round']}")
    if "number" in d:
        parts.append(f"round {d['number']}")
    if "kind" in d:
        parts.append(str(d["kind"]))
    if "participant" in d:
        p = d["participant"]
        parts.append(p["name"] if isinstance(p, dict) else str(p))
    if "divergence_id" in d:
        parts.append(str(d["divergence_id"]))
    if "score" in d and e.type == "ConvergenceEvaluated":
        parts.append(f"score {d['score']}")
    if "topic" in d and isinstance(d["topic"], dict):
        parts.append(_preview(str(d["topic"].get("title", "")), 40))
    if d.get("reason"):
        parts.append(_preview(str(d["reason"]), 40))
    return ", ".join(parts)


# --------------------------------------------------------------------------- verify


@cli.command()
@click.argument("session", required=False)
@click.option("--key-env", default=HMAC_KEY_ENV, show_default=True, metavar="NAME",
              help="Environment variable holding the HMAC key that checks seals.")
@click.option("--export", "export_file", type=click.Path(dir_okay=False), default=None,
              metavar="FILE", help="Check a YAML export against the store (as verify-export).")
@click.option("--drop-bad-snapshots", is_flag=True,
              help="Delete the snapshots that do not match their events, then verify again.")
@store_option
@json_option
@click.pass_context
def verify(
    ctx: click.Context,
    session: str | None,
    key_env: str,
    export_file: str | None,
    drop_bad_snapshots: bool,
    store: str | None,
    as_json: bool,
) -> None:
    """Recompute the hash chain of SESSION, of every session in the store, or check an export.

    Also checks each snapshot (a copy of the events' fold, which loads start from) against the
    events up to it. Exits 0 when every chain and snapshot verifies, 1 otherwise (naming the
    session, the first bad position and what is wrong).
    """
    if export_file is not None:
        if session is not None:
            raise UsageError("give either SESSION or --export FILE, not both")
        if drop_bad_snapshots:
            raise UsageError("--drop-bad-snapshots checks sessions, not an export: drop --export")
        from .record_cmds import verify_export_cmd

        ctx.invoke(verify_export_cmd, file=export_file, store=store, as_json=as_json)
        return
    key = hmac_key(key_env)
    with open_ledger(store, create=False) as ledger:
        reports = _run_verify(ledger, session, key)
        dropped = _drop_bad_snapshots(ledger, reports) if drop_bad_snapshots else {}
        if dropped:
            reports = _run_verify(ledger, session, key)
        location = ledger.location.display
    broken = [r for r in reports if not r.ok]
    if as_json:
        emit_json(
            {
                "store": location,
                "ok": not broken,
                "keyed": key is not None,
                "sessions": [r.as_json() for r in reports],
                **({"dropped_snapshots": dropped} if drop_bad_snapshots else {}),
            }
        )
        if broken:
            sys.exit(ChainBrokenError.exit_code)
        return
    _print_reports(reports, location, keyed=key is not None)
    if broken:
        _raise_broken(broken)


def _drop_bad_snapshots(ledger: Ledger, reports: list[ChainReport]) -> dict[str, list[int]]:
    """Delete the snapshots ``verify`` found not matching their events (their events verify);
    returns session id → the positions dropped."""
    dropped: dict[str, list[int]] = {}
    for r in reports:
        if r.bad_snapshots:
            ledger.drop_snapshots(UUID(r.session_id), r.bad_snapshots)
            dropped[r.session_id] = list(r.bad_snapshots)
            err_console.print(
                f"dropped {len(r.bad_snapshots)} snapshot(s) of session {r.session_id} "
                f"(at event {', '.join(map(str, r.bad_snapshots))})",
                markup=False,
            )
    return dropped


def _raise_broken(broken: list[ChainReport]) -> None:
    first = broken[0]
    others = len(broken) - 1
    more = f" ({others} more broken session(s) listed above)" if others else ""
    if first.bad_snapshots:
        raise ChainBrokenError(
            f"session {first.session_id}: its events verify, but {first.problem}{more}",
            hint=(
                "a snapshot is a copy of the events' fold: 'forge-ledger verify "
                f"{first.session_id[:8]} --drop-bad-snapshots' deletes the ones that differ"
            ),
        )
    raise ChainBrokenError(
        f"session {first.session_id} is broken at position {first.position}: "
        f"{first.problem}{more}",
        hint="restore the store from a backup; 'forge-ledger log' shows the events",
    )


def _run_verify(ledger: Ledger, session: str | None, key: bytes | None) -> list[ChainReport]:
    if session is not None:
        from ..app.records import verify as verify_one

        return [verify_one(ledger, session, key=key, snapshots=True)]
    return _verify_store(ledger, key=key, snapshots=True)


def _snapshots_cell(r: ChainReport) -> str:
    if r.snapshots is None:
        return "not checked"
    if r.bad_snapshots:
        return f"{len(r.bad_snapshots)} of {r.snapshots} differ"
    return f"{r.snapshots} ok" if r.snapshots else "none"


def _print_reports(reports: list[ChainReport], location: str, *, keyed: bool) -> None:
    if not reports:
        err_console.print(f"no sessions in {printable(location)}", markup=False)
        return
    table = Table(title=f"Hash chains in {printable(location)}", title_justify="left")
    for col in ("session", "events", "result", "sealed", "snapshots", "head"):
        table.add_column(col, justify="right" if col == "events" else "left")
    for r in reports:
        result = "ok" if r.ok else f"BROKEN at {r.position}: {r.problem}"
        if r.bad_snapshots:
            result = f"events ok; {r.problem}"
        sealed = "no"
        if r.sealed:
            sealed = "yes" + (" (hmac ok)" if r.hmac_ok else "" if not keyed else " (hmac bad)")
        add_row(table, r.session_id, str(r.events), result, sealed, _snapshots_cell(r),
             r.head_hash[:12])
    print_table(table)
    good = sum(r.ok for r in reports)
    total_events = sum(r.events for r in reports)
    out_console.print(
        f"{good}/{len(reports)} session(s) verified, {total_events} event(s)"
        + (", seals checked with the HMAC key" if keyed else "")
    )
