"""Commands that run deliberations: ``run``, ``resume``, ``answer`` and ``abort``.

These are the only commands (with ``demo``) that may call models. What they do to a session
they do through :mod:`forge_ledger.app` (which loads the orchestrator and, through the
provider, litellm only when a session runs); this module parses options, shows the live view,
prints outcomes and chooses exit codes.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

import click
from click.core import ParameterSource
from rich.text import Text

from ..app.interventions import abort as abort_session
from ..app.interventions import answer as record_answer
from ..app.participants import load_participants, participants_from_models
from ..app.running import Runtime, check_start, in_progress_session
from ..domain.values import (
    Mode,
    Participant,
    Persona,
    SessionConfig,
    SessionStatus,
    Topic,
)
from ..errors import (
    InvariantViolation,
    Loc,
    RunInterrupted,
    SessionPausedError,
    UsageError,
    validation_summary,
)
from . import cli
from ._common import (
    emit_json,
    err_console,
    hmac_key,
    json_option,
    money,
    open_ledger,
    printable,
    shown,
    store_option,
)
from ._interrupt import (
    abandoned_calls_are_quiet,
    interrupt_reported_once,
    second_interrupt_exits,
    survives_closed_output,
)

if TYPE_CHECKING:
    from ..domain.state import SessionState
    from ..ledger import Ledger, SessionSummary

__all__ = ["exit_for_outcome", "resume_instead", "run_session"]

# --------------------------------------------------------------------------- participants


def file_anonymize(path: Path) -> bool:
    """``anonymize: true`` at the top of a participants file turns on anonymized review."""
    import yaml

    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    return isinstance(doc, dict) and doc.get("anonymize") is True


# --------------------------------------------------------------------------- running


def run_session(
    ledger: Ledger,
    *,
    session_id: Any = None,
    start: tuple[Topic, SessionConfig, list[Participant]] | None = None,
    provider: Any = None,
    clock: Any = None,
    ids: Any = None,
    quiet: bool = False,
    autosave: bool = True,
    source: str = "run",
    given: frozenset[str] = frozenset(),
    allow_unpriced: bool = False,
    changes: dict[str, Any] | None = None,
) -> SessionState:
    """Start or resume a session with the live terminal view; returns the final state.

    Starting runs :func:`~forge_ledger.app.start_session`, resuming
    :func:`~forge_ledger.app.resume_session` (with the participant ``changes`` it takes).
    Ctrl-C becomes :class:`RunInterrupted`, naming the session to resume; a second Ctrl-C
    exits at once.
    """
    from ..app.running import resume_session, start_session
    from ._live_view import LiveView

    view = LiveView(err_console, enabled=not quiet)
    runtime = Runtime(
        clock=clock, ids=ids, subscribers=[view.handle], hmac_key=hmac_key(),
        autosave=autosave, warn=_warn, inform=_inform,
    )
    current: list[Any] = [session_id]

    def started(sid: Any) -> None:
        current[0] = sid
        assert start is not None
        view.started(str(sid), start[0].title, start[2])

    def watching(prov: Any) -> LiveView:
        people = start[2] if start is not None else ledger.state(current[0]).participants
        view.unpriced = frozenset(p.name for p in people if prov.price(p) is None)
        return view

    async def go() -> SessionState:
        interrupt_reported_once(asyncio.get_running_loop())
        if start is not None:
            topic, config, participants = start
            return await start_session(
                ledger, topic, config, participants, provider=provider, runtime=runtime,
                source=source, given=given, allow_unpriced=allow_unpriced, on_start=started,
                running=watching,
            )
        return await resume_session(ledger, session_id, provider=provider, runtime=runtime,
                                    running=watching, **(changes or {}))

    try:
        with second_interrupt_exits():
            return asyncio.run(go())
    except KeyboardInterrupt:
        abandoned_calls_are_quiet()
        raise _interrupted(current[0]) from None


def _warn(message: str) -> None:
    err_console.print(Text("warning: ", style="yellow") + shown(message))


def _inform(message: str) -> None:
    err_console.print(printable(message))


def _interrupted(session_id: Any) -> RunInterrupted:
    if session_id is None:
        return RunInterrupted("interrupted before the session was recorded; nothing to resume")
    short = str(session_id)[:8]
    return RunInterrupted(
        f"interrupted; session {short} keeps everything recorded so far",
        hint=f"continue with: forge-ledger resume {short}",
    )


def summary(state: SessionState) -> dict[str, Any]:
    from ..engine import cost_fields

    return {
        "session_id": state.id,
        "status": state.status.value,
        "reason": state.status_reason,
        "iterations": state.iteration,
        "rounds": len(state.rounds),
        "events": state.version,
        **cost_fields(round(state.cost_usd, 6), state.unpriced_calls),
        "converged": state.status is SessionStatus.CONVERGED,
        "pending_questions": list(state.pending_questions),
        "fault": state.fault.model_dump(mode="json") if state.fault is not None else None,
    }


def print_outcome(state: SessionState, *, as_json: bool) -> None:
    doc = summary(state)
    if as_json:
        emit_json(doc)
        return
    short = state.id[:8]
    conv = state.latest_convergence
    click.echo(f"session {state.id}")
    click.echo(
        f"status: {state.status.value}"
        + (f" ({printable(state.status_reason)})" if state.status_reason else "")
        + f" · iterations {state.iteration} · rounds {len(state.rounds)} · events {state.version}"
        + f" · cost {money(state.cost_usd, unpriced=state.unpriced_calls)}"
    )
    if conv is not None:
        click.echo(
            f"last vote: weighted score {conv.score:.2f} (threshold {conv.threshold:.2f}) · "
            f"majority {'agrees' if conv.majority_agrees else 'does not agree'} "
            f"({conv.agree} agree, {conv.partial} partial, {conv.disagree} disagree)"
        )
    if state.status is SessionStatus.PAUSED and state.pending_questions:
        click.echo("questions for you:")
        for q in state.pending_questions:
            click.echo(f"  - {printable(q)}")
        click.echo(f'answer with: forge-ledger answer {short} "..." && forge-ledger resume {short}')


# --------------------------------------------------------------------------- run options

_OPTION_OF_FIELD = {
    "max_rounds": "--max-rounds",
    "max_cost_usd": "--max-cost",
    "max_time_secs": "--max-time",
    "convergence_threshold": "--threshold",
    "min_consensus": "--min-consensus",
    "max_concurrency": "--max-concurrency",
    "max_tokens": "--max-tokens",
    "max_attempts": "--max-attempts",
    "call_timeout_secs": "--call-timeout",
    "mode": "--mode",
    "persona": "--persona",
}
"""Each ``run`` option that sets a :class:`SessionConfig` field (errors name the option)."""


def _default(field: str) -> Any:
    """The option's default, read from :class:`SessionConfig` (one source, shown in --help)."""
    value = SessionConfig.model_fields[field].default
    return getattr(value, "value", value)


def _config_option(
    field: str, metavar: str, kind: Any, text: str
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return click.option(
        _OPTION_OF_FIELD[field],
        field,
        type=kind,
        default=_default(field),
        metavar=metavar,
        show_default=True,
        help=text,
    )


def _session_config(settings: dict[str, Any], **flags: bool) -> SessionConfig:
    """The session's config from the ``run`` options; on/off ``flags`` are set only when on."""
    from pydantic import ValidationError

    overrides = dict(settings)
    overrides.update({name: True for name, on in flags.items() if on})
    try:
        return SessionConfig(**overrides)
    except ValidationError as e:

        def option(loc: Loc) -> str:
            field = str(loc[0])
            return f"{_OPTION_OF_FIELD.get(field, field)} {overrides.get(field)!r}"

        raise UsageError(f"invalid {validation_summary(e, where=option)}") from None


def _topic(title: str, description: str, constraints: tuple[str, ...],
           output_type: str | None) -> Topic:
    from pydantic import ValidationError

    try:
        topic_value = Topic(title=title, description=description, constraints=constraints)
        if output_type:
            topic_value = topic_value.model_copy(update={"output_type": output_type})
    except ValidationError as e:
        problem = validation_summary(e, where=lambda loc: str(loc[0]))
        raise UsageError(f"invalid {problem}") from None
    return topic_value


def _participants(
    models: tuple[str, ...], participants_file: Path | None, api_base: str | None,
    prices: tuple[str, ...],
) -> list[Participant]:
    from ..panel.preflight import apply_prices, parse_price

    if participants_file is not None:
        participants = load_participants(participants_file, api_base)
    elif models:
        participants = participants_from_models(models, api_base)
    else:
        raise UsageError(
            "no participants", hint="give -m MODEL (repeatable) or --participants FILE"
        )
    return apply_prices(participants, [parse_price(p) for p in prices])


# --------------------------------------------------------------------------- commands


@cli.command()
@click.argument("topic")
@click.option("--description", default="", help="What the document should cover.")
@click.option(
    "-m",
    "--model",
    "models",
    multiple=True,
    metavar="MODEL",
    help="A participant's model as litellm names it (repeat for several).",
)
@click.option(
    "--participants",
    "participants_file",
    type=click.Path(path_type=Path),
    help="YAML file with participants (name, model, role, temperature, price…).",
)
@click.option("--api-base", default=None, metavar="URL",
              help="Base URL of an OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1.")
@_config_option("max_rounds", "N", int, "Stop after this many rounds.")
@_config_option("max_cost_usd", "USD", float,
                "Budget in USD; when given, every model needs a known price (see --price).")
@_config_option("max_time_secs", "SECS", int, "Budget in seconds of wall-clock time.")
@_config_option("convergence_threshold", "F", float,
                "Weighted agreement (0..1) needed to converge.")
@_config_option("min_consensus", "N", int,
                "Participants who must agree to converge (at most the participant count).")
@_config_option("max_concurrency", "N", int, "Model calls running at once within a round.")
@_config_option("max_tokens", "N", int, "Output tokens per call (a participant's own wins).")
@_config_option("max_attempts", "N", int, "Attempts per call before the call has failed.")
@_config_option("call_timeout_secs", "SECS", float, "Time-out of one call, whole stream.")
@click.option(
    "--price", "prices", multiple=True, metavar="MODEL=IN:OUT",
    help="Price of MODEL in USD per million input:output tokens (repeatable), for models "
    "litellm has no price for.",
)
@click.option("--allow-unpriced", is_flag=True,
              help="Run with --max-cost even if a model has no known price (shown 'unpriced').")
@click.option("--attended", is_flag=True, help="Pause after each iteration for your answers.")
@click.option("--anonymize", is_flag=True,
              help='Show others\' work as "Response A", "Response B"… in reviews and votes.')
@click.option("--fallback", is_flag=True,
              help="If a draft's or synthesis's author fails, another participant takes over.")
@_config_option("mode", "MODE", click.Choice([m.value for m in Mode]),
                "How participants take part: standard, party or panel.")
@_config_option("persona", "PERSONA", click.Choice([p.value for p in Persona]),
                "The facilitator persona shaping the synthesis.")
@click.option(
    "--output-type",
    default=None,
    type=click.Choice(["specification", "code", "documentation", "design", "freeform"]),
    help="What kind of document is forged [default: specification].",
)
@click.option("--constraint", "constraints", multiple=True, help="A constraint (repeatable).")
@click.option(
    "--resume/--new",
    "resume_choice",
    default=None,
    help="If a session on this topic is in progress: continue it, or start anew.",
)
@store_option
@json_option
@click.pass_context
@survives_closed_output
def run(
    ctx: click.Context,
    /,
    topic: str,
    description: str,
    models: tuple[str, ...],
    participants_file: Path | None,
    api_base: str | None,
    prices: tuple[str, ...],
    allow_unpriced: bool,
    attended: bool,
    anonymize: bool,
    fallback: bool,
    output_type: str | None,
    constraints: tuple[str, ...],
    resume_choice: bool | None,
    store: str | None,
    as_json: bool,
    **settings: Any,
) -> None:
    """Run a deliberation on TOPIC with the given participants.

    Keys, URLs, prices and settings are checked before anything is recorded.
    """
    participants = _participants(models, participants_file, api_base, prices)
    anonymize = anonymize or (
        participants_file is not None and file_anonymize(participants_file)
    )
    config = _session_config(
        settings, attended=attended, anonymize=anonymize, fallback=fallback
    )
    topic_value = _topic(topic, description, constraints, output_type)
    given = frozenset(
        f for f in settings if ctx.get_parameter_source(f) is not ParameterSource.DEFAULT
    )
    for warning in check_start(
        topic_value, config, participants, given=given, allow_unpriced=allow_unpriced
    ):
        err_console.print(f"warning: {printable(warning)}", markup=False)
    with open_ledger(store, create=True) as ledger:
        existing = in_progress_session(ledger, topic_value.slug)
        if existing is not None and resume_choice is None:
            resume_choice = resume_instead(existing, topic_value.slug, as_json)
        if existing is not None and resume_choice:
            state = run_session(ledger, session_id=UUID(existing.id), quiet=as_json)
        else:
            state = run_session(ledger, start=(topic_value, config, participants),
                                quiet=as_json, given=given, allow_unpriced=allow_unpriced)
        state = _attend(ledger, state, as_json)
        print_outcome(state, as_json=as_json)
    exit_for_outcome(state)


def resume_instead(existing: SessionSummary, slug: str, as_json: bool) -> bool:
    """Asked at a terminal: resume the session in progress on the same topic? Elsewhere the
    choice must be given (--resume or --new)."""
    if sys.stdin.isatty() and not as_json:
        err_console.print(
            f"A session on '{printable(slug)}' is in progress: "
            f"{existing.id[:8]} (iteration {existing.iteration}, {existing.status})."
        )
        return click.confirm("Resume it instead of starting a new one?", default=True, err=True)
    raise UsageError(
        f"session {existing.id[:8]} on '{slug}' is in progress",
        hint="pass --resume to continue it or --new to start another",
    )


def exit_for_outcome(state: SessionState) -> None:
    """The exit of a deliberation command once the outcome is printed: an aborted session
    fails with one clear line; a session paused on a provider fault exits 3 with one line
    saying what failed and how to go on (it is kept and resumable)."""
    if state.status is SessionStatus.ABORTED:
        raise InvariantViolation(
            f"session {state.id[:8]} was aborted: {state.status_reason or 'no reason recorded'}",
            hint=_fork_hint(state),
        )
    if state.status is SessionStatus.PAUSED and state.fault is not None:
        fault = state.fault
        raise SessionPausedError(
            f"session {state.id[:8]} paused: round {fault.round} ({fault.kind.value}) has no "
            f"answer from {fault.others_without_answer}{fault.participant} after "
            f"{fault.attempts} attempt(s): {fault.message}",
            hint=_fix_hint(state.id[:8], fault),
        )


def _fork_hint(state: SessionState) -> str:
    """What a person can do with an aborted session: it never goes on, but a fork of it
    continues from its last complete iteration (or from an event, before any)."""
    short = state.id[:8]
    last = state.latest_convergence
    if last is not None:
        where = f"--at-iteration {last.iteration}"
    else:
        where = f"--at-event N (a point between rounds: forge-ledger log {short})"
    return (f"an aborted session does not go on; fork it to continue from an earlier point: "
            f"forge-ledger fork {short} {where}")


def _fix_hint(short: str, fault: Any) -> str:
    """What a person does about the fault: a key, another model, or just resuming later."""
    resume = f"forge-ledger resume {short}"
    if fault.error_type == "auth":
        from ..providers import api_key_names

        keys = " or ".join(api_key_names(fault.model)) or "the provider's API key"
        return f"set {keys} in the environment, then: {resume}"
    if fault.error_type in ("bad_request", "context_window", "unknown"):
        return f"swap the model, e.g.: {resume} -m {fault.participant}=MODEL"
    if fault.error_type == "connection":
        return f"check the endpoint is reachable, then: {resume} (--api-base URL to change it)"
    return f"continue with: {resume}"


def _attend(ledger: Ledger, state: SessionState, as_json: bool) -> SessionState:
    """Interactive attended mode: answer the pending questions at the prompt, then go on."""
    while (
        state.status is SessionStatus.PAUSED
        and state.pending_questions
        and sys.stdin.isatty()
        and not as_json
    ):
        err_console.print(Text(f"\nIteration {state.iteration}: questions for you", style="bold"))
        for q in state.pending_questions:
            err_console.print(f"  - {printable(q)}")
        text = click.prompt(
            "Your answer (empty to stop here)", default="", show_default=False, err=True
        )
        if not text.strip():
            break
        record_answer(ledger, state.id, text, author=_author())
        state = run_session(ledger, session_id=UUID(state.id))
    return state


def _author() -> str:
    return os.environ.get("FORGE_LEDGER_AUTHOR") or os.environ.get("USER") or "human"


@cli.command()
@click.argument("session")
@click.option("-m", "--model", "models", multiple=True, metavar="[NAME=]MODEL",
              help="NAME=MODEL swaps participant NAME's model; a bare MODEL adds a participant "
              "(e.g. to an imported session). Repeatable.")
@click.option("--participants", "participants_file", type=click.Path(path_type=Path),
              help="Add the participants of this YAML file before resuming.")
@click.option("--api-base", default=None,
              help="Base URL for every participant from now on (and for added ones).")
@store_option
@json_option
@survives_closed_output
def resume(
    session: str,
    models: tuple[str, ...],
    participants_file: Path | None,
    api_base: str | None,
    store: str | None,
    as_json: bool,
) -> None:
    """Continue a paused or interrupted session (calls only what is missing).

    A session paused on a provider fault retries the open round with a fresh set of attempts.
    A session that already ended only gets what its end left undone (seal, exports).
    A session imported from a YAML file has no participants yet: add them with -m or
    --participants (they join the session as events, then it resumes).
    """
    swaps = tuple(m for m in models if "=" in m)
    added_models = tuple(m for m in models if "=" not in m)
    added = (
        load_participants(participants_file, api_base)
        if participants_file is not None
        else participants_from_models(added_models, api_base)
        if added_models
        else []
    )
    with open_ledger(store) as ledger:
        sid = ledger.resolve(session)
        if ledger.state(sid).status.terminal:
            state = run_session(ledger, session_id=sid, quiet=True)
            print_outcome(state, as_json=as_json)
            err_console.print(
                f"session {state.id[:8]} had already ended ({state.status.value}); "
                "its seal and exports are complete"
            )
        else:
            changes = {"swaps": swaps, "add": added, "api_base": api_base}
            state = run_session(ledger, session_id=sid, quiet=as_json, changes=changes)
            state = _attend(ledger, state, as_json)
            print_outcome(state, as_json=as_json)
    exit_for_outcome(state)


@cli.command()
@click.argument("session")
@click.argument("text")
@click.option("--author", default=None, help="Who answers (default $FORGE_LEDGER_AUTHOR/$USER).")
@click.option(
    "--overrule",
    multiple=True,
    metavar="DIVERGENCE_ID",
    help="Overrule an open dissent (repeatable); your text is the reason.",
)
@store_option
@json_option
def answer(
    session: str,
    text: str,
    author: str | None,
    overrule: tuple[str, ...],
    store: str | None,
    as_json: bool,
) -> None:
    """Record your answer to a paused session's questions (then run 'resume')."""
    if not text.strip():
        raise UsageError("the answer is empty")
    ledger = open_ledger(store)
    try:
        state = record_answer(ledger, session, text, author=author or _author(), overrule=overrule)
        if as_json:
            emit_json(
                {
                    "session_id": state.id,
                    "status": state.status.value,
                    "events": state.version,
                    "overruled": list(overrule),
                }
            )
        else:
            click.echo(f"recorded; continue with: forge-ledger resume {state.id[:8]}")
    finally:
        ledger.close()


@cli.command()
@click.argument("session")
@click.option("--reason", required=True, help="Why the session ends here (recorded).")
@click.option("--author", default=None, help="Who decides (default $FORGE_LEDGER_AUTHOR/$USER).")
@store_option
@json_option
def abort(
    session: str, reason: str, author: str | None, store: str | None, as_json: bool
) -> None:
    """End a session for good, with your reason (recorded, then sealed).

    A provider fault only pauses a session; ending it is a person's decision. Fork it to
    continue from an earlier point.
    """
    if not reason.strip():
        raise UsageError("the reason is empty", hint='e.g. --reason "the provider is gone"')
    ledger = open_ledger(store)
    try:
        state = abort_session(
            ledger, session, reason=reason, author=author or _author(), hmac_key=hmac_key(),
            warn=_warn,
        )
        if as_json:
            emit_json(summary(state))
        else:
            click.echo(f"session {state.id[:8]} aborted: {printable(reason)}")
    finally:
        ledger.close()
