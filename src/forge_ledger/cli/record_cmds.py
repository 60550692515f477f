"""Commands on a session's record: ``fork``, ``diff``, ``audit``, ``seal`` and ``verify-export``.

``diff``, ``audit`` and ``verify-export`` only read the store; ``fork`` and ``seal`` append
events (a new session, a seal) and never call a model. None of them imports litellm.

Model swaps on ``fork`` (``-m``, repeatable): ``-m NAME=MODEL`` gives participant NAME the model
MODEL; a bare ``-m MODEL`` replaces models positionally, the first bare ``-m`` the first
participant's model, the second the second's, in the session's participant order.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.table import Table

from ..errors import ChainBrokenError, UsageError
from . import cli
from ._common import (
    HMAC_KEY_ENV,
    add_row,
    document_output,
    emit_json,
    err_console,
    hmac_key,
    json_option,
    open_ledger,
    out_console,
    print_markdown,
    print_table,
    printable,
    store_option,
)
from ._integrity import chain_broken, check_chain

if TYPE_CHECKING:
    from uuid import UUID

    from ..audit.counterfactual import ForkComparison
    from ..ledger import Ledger
    from ..records.lineage import IterationPoint, SessionDiff

# Each command imports what it alone uses (the audit, the lineage, sealing) when it runs: an
# audit does not load what a fork needs, nor the reverse.

__all__ = ["HMAC_KEY_ENV", "audit", "diff", "fork_cmd", "seal", "verify_export_cmd"]

# --------------------------------------------------------------------------- fork


@cli.command("fork")
@click.argument("session")
@click.option("--at-iteration", type=click.IntRange(min=1), default=None, metavar="K",
              help="Fork from the end of iteration K.")
@click.option("--at-event", type=click.IntRange(min=1), default=None, metavar="N",
              help="Fork from event position N (no round may be open there).")
@click.option("-m", "--model", "models", multiple=True, metavar="[NAME=]MODEL",
              help="Swap a model: NAME=MODEL, or MODEL positionally in participant order.")
@click.option("--without", "without", multiple=True, metavar="NAME",
              help="NAME leaves the fork from its fork point (repeatable; at least two stay).")
@click.option("--api-base", default=None, metavar="URL",
              help="Base URL for every participant of the fork.")
@click.option("--max-rounds", type=click.IntRange(min=1), default=None, metavar="N")
@click.option("--threshold", type=click.FloatRange(0, 1), default=None, metavar="F",
              help="Convergence threshold (0..1).")
@click.option("--max-cost", type=click.FloatRange(min=0), default=None, metavar="USD")
@click.option("--min-consensus", type=click.IntRange(min=1), default=None, metavar="N")
@store_option
@json_option
def fork_cmd(
    session: str,
    at_iteration: int | None,
    at_event: int | None,
    models: tuple[str, ...],
    without: tuple[str, ...],
    api_base: str | None,
    max_rounds: int | None,
    threshold: float | None,
    max_cost: float | None,
    min_consensus: int | None,
    store: str | None,
    as_json: bool,
) -> None:
    """Start a new session from SESSION as of a past point; prints the new session's id.

    The fork shares its parent's history up to that point (recorded with the parent's event
    hash there) and is left paused, so 'forge-ledger resume' continues it.
    """
    if (at_iteration is None) == (at_event is None):
        raise UsageError("give exactly one of --at-iteration K or --at-event N")
    overrides: dict[str, Any] = {
        k: v
        for k, v in {
            "max_rounds": max_rounds,
            "convergence_threshold": threshold,
            "max_cost_usd": max_cost,
            "min_consensus": min_consensus,
        }.items()
        if v is not None
    }
    from ..app.records import fork

    with open_ledger(store, create=False) as ledger:
        new_id = fork(
            ledger,
            session,
            at_iteration=at_iteration,
            at_event=at_event,
            model_swaps=models,
            config_overrides=overrides,
            api_base=api_base,
            without=without,
        )
        origin = ledger.state(new_id).fork_origin
    assert origin is not None
    if as_json:
        emit_json(
            {
                "session_id": str(new_id),
                "parent_id": origin.parent_id,
                "parent_position": origin.parent_position,
                "parent_iteration": origin.parent_iteration,
                "parent_hash": origin.parent_hash,
                "without": list(without),
            }
        )
        return
    err_console.print(
        f"forked {origin.parent_id} at event {origin.parent_position} "
        f"(iteration {origin.parent_iteration})"
        + (f" without {', '.join(without)}" if without else "")
        + "; the fork is paused"
    )
    click.echo(str(new_id))


# --------------------------------------------------------------------------- diff


def _point_cells(p: IterationPoint | None) -> list[str]:
    if p is None:
        return ["—", "—", "—", "—", "—"]
    score = f"{p.weighted_score:.2f}" if p.weighted_score is not None else "—"
    majority = "—" if p.majority_agrees is None else (
        f"{'yes' if p.majority_agrees else 'no'} ({p.agree}/{p.disagree}/{p.partial})"
    )
    ems = str(p.ems) if p.ems is not None else "—"
    dissent = str(p.open_dissent) + (
        f": {', '.join(p.open_dissent_topics)}" if p.open_dissent_topics else ""
    )
    changed = ", ".join(
        f"{c.participant} {c.before.value}→{c.after.value}" for c in p.changed_stance
    ) or "—"
    return [score, majority, ems, dissent, changed]


def _print_diff(d: SessionDiff) -> None:
    """One row per iteration and session (A above B), so the table fits a terminal."""
    table = Table(title=f"Consensus paths: A={d.a} vs B={d.b}", title_justify="left")
    for col in ("it", "", "score", "majority (a/d/p)", "EMS", "open dissent", "stance changes"):
        table.add_column(col, justify="right" if col in ("it", "score", "EMS") else "left")
    for k in d.iterations:
        a, b = d.path_a.get(k), d.path_b.get(k)
        same = a == b
        add_row(table, str(k), "A=B" if same else "A", *_point_cells(a), end_section=same)
        if not same:
            add_row(table, "", "B", *_point_cells(b), end_section=True)
    print_table(table)
    if d.common_ancestor:
        out_console.print(f"shared history up to {d.common_ancestor}")


def _print_fork_comparison(c: ForkComparison) -> None:
    """The fork beside its parent: outcome, document, rounds and cost, dissent."""
    table = Table(title="Fork against its parent", title_justify="left")
    for col in ("", "parent", "fork"):
        table.add_column(col)

    def yes(v: bool | None) -> str:
        return "—" if v is None else "yes" if v else "no"

    def usd(v: float | None) -> str:
        return "unpriced" if v is None else f"${v:.4f}"

    p, f = c.parent, c.fork
    for label, pv, fv in (
        ("status", p.status, f.status),
        ("converged", yes(p.converged), yes(f.converged)),
        ("final majority agrees", yes(p.final_majority_agrees), yes(f.final_majority_agrees)),
        ("rounds (after the fork point)", f"{p.rounds} ({p.rounds_after_fork})",
         f"{f.rounds} ({f.rounds_after_fork})"),
        ("cost (after the fork point)", f"{usd(p.cost_usd)} ({usd(p.cost_after_fork_usd)})",
         f"{usd(f.cost_usd)} ({usd(f.cost_after_fork_usd)})"),
    ):
        add_row(table, label, pv, fv)
    print_table(table)
    sim = "—" if c.document_similarity is None else f"{c.document_similarity:.2f}"
    out_console.print(
        f"outcome {'changed' if c.outcome_changed else 'unchanged'}; final documents' "
        f"similarity {sim}"
        + (f"; without {', '.join(c.without)}" if c.without else ""),
        markup=False,
    )
    for d in c.dissent:
        out_console.print(
            f"dissent {printable(d.id)} ({printable(d.topic)}): parent {d.parent_status}, "
            f"fork {d.fork_status or '—'}",
            markup=False,
        )


@cli.command()
@click.argument("a")
@click.argument("b")
@store_option
@json_option
def diff(a: str, b: str, store: str | None, as_json: bool) -> None:
    """Compare the consensus paths of sessions A and B, iteration by iteration.

    When one is a fork of the other, also the fork against its parent: converged or not, the
    final vote's majority, the final documents' similarity, rounds and cost, and the parent's
    open dissent on each side.
    """
    from ..app.records import fork_comparison
    from ..records.lineage import diff_sessions

    with open_ledger(store, create=False) as ledger:
        ia, ib = check_chain(ledger, a), check_chain(ledger, b)
        d = diff_sessions(ledger, ia, ib)
        against = fork_comparison(ledger, ia, ib)
    if as_json:
        doc = d.model_dump(mode="json")
        if against is not None:
            doc["fork_comparison"] = against.model_dump(mode="json")
        emit_json(doc)
        return
    _print_diff(d)
    if against is not None:
        _print_fork_comparison(against)


# --------------------------------------------------------------------------- audit


@cli.command()
@click.argument("session")
@click.option("--markdown", "as_markdown", is_flag=True, help="Print the report as Markdown.")
@store_option
@json_option
def audit(session: str, as_markdown: bool, store: str | None, as_json: bool) -> None:
    """How consensus formed in SESSION: scores beside majorities, who moved whom, conformity.

    Also whether deliberation helped, self-preference and anonymized-review labels; ends with
    a minority report of the dissent still unresolved.
    """
    if as_json and as_markdown:
        raise UsageError("give at most one of --json and --markdown")
    with open_ledger(store, create=False) as ledger:
        sid = check_chain(ledger, session)
        markdown = None if as_json or chain_broken() else _kept_audit(ledger, sid)
        if markdown is None:
            from ..app.records import audit as audit_session
            from ..audit import render_markdown

            report = audit_session(ledger, sid)
            if as_json:
                emit_json(report.model_dump(mode="json"))
                return
            markdown = render_markdown(report)
    if as_markdown:
        with document_output():
            sys.stdout.write(markdown)
    else:
        print_markdown(markdown)


def _kept_audit(ledger: Ledger, session_id: UUID) -> str | None:
    """The session's audit from the store's read model, when it was made at the session's
    head (see :mod:`forge_ledger.app.audit_views`); None: audit it here."""
    from ..app.audit_views import current_audit
    from ..ledger.outputs import store_outputs

    return current_audit(ledger, store_outputs(ledger.location).views, session_id)


# --------------------------------------------------------------------------- seal


@cli.command()
@click.argument("session")
@store_option
@json_option
def seal(session: str, store: str | None, as_json: bool) -> None:
    """Verify the chain of a finished SESSION and close it with a seal.

    With FORGE_LEDGER_HMAC_KEY set, the seal carries an HMAC of the chain's root hash, so
    nobody without the key can rewrite the history and seal it again.
    """
    from ..app.records import seal as seal_session

    key = hmac_key()
    with open_ledger(store, create=False) as ledger:
        report = seal_session(ledger, session, key=key)
    if as_json:
        emit_json({**report.as_json(), "keyed": key is not None})
        return
    if key is None:
        err_console.print(
            f"warning: {HMAC_KEY_ENV} is not set; the seal has no HMAC "
            "(it detects accidents and naive edits, not deliberate tampering)"
        )
    out_console.print(
        f"sealed {report.session_id}: {report.events} events, root hash "
        f"{report.head_hash[:16]}…" + (" (HMAC)" if key else "")
    )


# --------------------------------------------------------------------------- verify-export


@cli.command("verify-export")
@click.argument("file", type=click.Path(dir_okay=False))
@store_option
@json_option
def verify_export_cmd(file: str, store: str | None, as_json: bool) -> None:
    """Check a sealed session's YAML export, or a document file, against the chain in the store.

    Recomputes the session's hash chain, checks the export's 'ledger:' block against the
    stored seal (and its HMAC when FORGE_LEDGER_HMAC_KEY is set). Exits 1 on a mismatch.
    """
    from ..records.sealing import verify_export
    from ..records.spec import read_front_matter, verify_spec

    key = hmac_key()
    is_document = read_front_matter(Path(file)) is not None
    with open_ledger(store, create=False) as ledger:
        report = verify_spec(ledger, file, key) if is_document else verify_export(ledger, file, key)
    if as_json:
        emit_json({**report.as_json(), "keyed": key is not None})
        if not report.ok:
            sys.exit(ChainBrokenError.exit_code)
        return
    file = printable(file)
    if report.ok and is_document:
        click.echo(f"{file}: matches the chain of {report.session_id} (the document as of its "
                   "header's event, head hash checked)")
        return
    if report.ok:
        out_console.print(
            f"{file}: matches the sealed chain of {report.session_id}"
            + (" (HMAC checked)" if report.hmac_ok else "")
            + ("" if report.content_checked else "; content not compared (no exporter)")
        )
        return
    raise ChainBrokenError(f"{file} does not match the store: {'; '.join(report.problems)}")
