"""Checks made before a session is recorded: everything a run needs that can be known
without calling a model.

A session that starts and then fails on its first call has already been recorded (and, with a
missing key, fails for every participant in turn). So ``run`` — and ``resume`` when it adds
participants — ask here first, and a problem found here writes nothing:

- each ``api_base`` is an ``http(s)://host…`` URL;
- litellm knows which provider serves each model, and finds that provider's keys in the
  environment (litellm's own ``validate_environment``; a local OpenAI-compatible server on a
  loopback address needs no key, as in a real call);
- the budget can work: ``max_cost_usd`` above 0, ``min_consensus`` no more than the
  participants, and, when the user set a USD budget, a known price for every model (the
  participant's ``price:``, else litellm's table). A model without a price would be charged
  $0 and the budget would silently not bind; ``allow_unpriced`` accepts that knowingly;
- the budget covers the worst case of the session's first call (below it no call is made).

Every problem is collected and reported, one line each, naming what to change. litellm is
reached only through :mod:`forge_ledger.providers` (imported lazily there).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlparse
from uuid import UUID

from ..domain.values import MAX_PARTICIPANTS, Participant, Price, SessionConfig, Topic
from ..errors import ConfigError

__all__ = [
    "PreflightError",
    "PriceOption",
    "apply_prices",
    "bad_api_base",
    "check_participants",
    "check_session",
    "panel_warnings",
    "parse_price",
]


class PreflightError(ConfigError):
    """One or more problems found before anything was recorded; each is one line."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__(self.problems[0] if len(self.problems) == 1 else
                         f"{len(self.problems)} problems: " + " | ".join(self.problems))

    def lines(self) -> list[str]:
        return list(self.problems) + (["nothing was recorded"] if len(self.problems) > 1 else [])


@dataclass(frozen=True)
class PriceOption:
    """``--price MODEL=IN:OUT``: USD per million input and output tokens for one model."""

    model: str
    price: Price


def parse_price(text: str) -> PriceOption:
    """Parse ``MODEL=IN:OUT`` (USD per million tokens, as providers publish them)."""
    model, sep, amounts = text.rpartition("=")
    inp, colon, out = amounts.partition(":")
    try:
        if not (sep and colon and model):
            raise ValueError
        per_million = (float(inp), float(out))
        if min(per_million) < 0:
            raise ValueError
    except ValueError:
        raise ConfigError(
            f"--price {text!r} is not MODEL=IN:OUT",
            hint="USD per million input and output tokens, e.g. --price openai/gpt-4o=2.5:10",
        ) from None
    return PriceOption(
        model=model,
        price=Price(
            input_cost_per_token=per_million[0] / 1e6,
            output_cost_per_token=per_million[1] / 1e6,
            source="user",
        ),
    )


def apply_prices(
    participants: Sequence[Participant], prices: Sequence[PriceOption]
) -> list[Participant]:
    """Participants with the ``--price`` of their model (a participant's own ``price:`` wins)."""
    by_model = {p.model: p.price for p in prices}
    unknown = sorted(set(by_model) - {p.model for p in participants})
    if unknown:
        raise ConfigError(
            f"--price names {', '.join(unknown)}, which no participant uses",
            hint="use a participant's model name exactly as given to -m or in the file",
        )
    return [
        p if p.price is not None or p.model not in by_model
        else p.model_copy(update={"price": by_model[p.model]})
        for p in participants
    ]


def bad_api_base(url: str) -> bool:
    """True unless ``url`` is an http(s) URL with a host (what litellm can call)."""
    parsed = urlparse(url)
    return parsed.scheme not in ("http", "https") or not parsed.hostname


def _who(p: Participant) -> str:
    return p.name if p.name == p.model else f"{p.name} ({p.model})"


def _url_problems(participants: Sequence[Participant]) -> list[str]:
    """One line per bad ``api_base`` (several participants usually share the CLI's)."""
    users: dict[str, list[str]] = {}
    for p in participants:
        if p.api_base and bad_api_base(p.api_base):
            users.setdefault(p.api_base, []).append(p.name)
    return [
        f"api_base {url!r} (of {', '.join(names)}) is not a URL; give http(s)://host[:port]/…, "
        "e.g. --api-base http://127.0.0.1:8000/v1"
        for url, names in users.items()
    ]


def _key_problem(p: Participant) -> str | None:
    from ..providers import ProviderCallError, missing_keys

    try:
        keys = missing_keys(p)
    except ProviderCallError as e:
        return (
            f"{_who(p)}: {e.message}; name it as litellm does, e.g. openai/gpt-4o-mini, "
            "anthropic/claude-3-5-sonnet-20241022"
        )
    if not keys:
        return None
    return f"{_who(p)}: {' or '.join(keys)} is not set; export it" + (
        ", or give --api-base for a local OpenAI-compatible server" if p.api_base is None else ""
    )


def _price_problem(p: Participant) -> str | None:
    from ..providers import table_price

    if p.price is not None or table_price(p.model) is not None:
        return None
    return (
        f"{_who(p)}: no known price, so --max-cost cannot bind; give one with "
        f"--price {p.model}=IN:OUT (USD per million tokens) or price: in a "
        "participants file, or run anyway with --allow-unpriced"
    )


def check_session(
    config: SessionConfig, participants: Sequence[Participant], given: frozenset[str]
) -> list[str]:
    """Contradictions between the session's settings and its participants (pure).

    ``given`` names the settings the user chose: the default ``min_consensus`` is capped at
    the number of voters by the engine, a chosen one that cannot be reached is a mistake.
    """
    problems: list[str] = []
    if len(participants) > MAX_PARTICIPANTS:  # the aggregate's bound, told before recording
        problems.append(
            f"{len(participants)} participants is more than a session takes "
            f"({MAX_PARTICIPANTS}); deliberate with fewer models"
        )
    if config.max_cost_usd <= 0:
        problems.append(
            "--max-cost 0 allows no model call at all; give a budget above 0 (USD)"
        )
    if "min_consensus" in given and config.min_consensus > len(participants):
        problems.append(
            f"--min-consensus {config.min_consensus} is more than the {len(participants)} "
            f"participant(s), so the session could never converge; give at most "
            f"{len(participants)}"
        )
    return problems


def panel_warnings(participants: Sequence[Participant]) -> list[str]:
    """What a session with these participants can run but not deliberate about (pure): a
    panel of one has nobody to critique its draft or vote against it, so it converges on its
    own text."""
    if len(participants) == 1:
        return [
            f"one participant ({participants[0].name}) cannot deliberate: nobody critiques "
            "its draft or votes against it, so the session converges on its own text; add "
            "another with -m"
        ]
    return []


def check_participants(
    participants: Sequence[Participant],
    config: SessionConfig | None = None,
    *,
    given: frozenset[str] = frozenset(),
    allow_unpriced: bool = False,
    topic: Topic | None = None,
) -> None:
    """Raise :class:`PreflightError` listing every problem; return quietly when none.

    ``config`` is given when a session is about to start (its settings are checked against
    the participants); ``given`` names the :class:`SessionConfig` fields the user set. With
    ``max_cost_usd`` among them every model needs a price, unless ``allow_unpriced``. With
    the ``topic`` too, the budget must cover the worst case of the session's first call.
    """
    needs_price = (
        "max_cost_usd" in given
        and not allow_unpriced
        and (config is None or config.max_cost_usd > 0)  # a zero budget is reported as such
    )
    problems = [] if config is None else check_session(config, participants, given)
    problems += _url_problems(participants)
    for p in participants:
        if p.api_base and bad_api_base(p.api_base):
            continue
        problem = _key_problem(p)
        if problem is None and needs_price:
            problem = _price_problem(p)
        if problem is not None:
            problems.append(problem)
    if not problems and config is not None and topic is not None:
        problem = _first_call_problem(topic, config, participants)
        if problem is not None:
            problems.append(problem)
    if problems:
        raise PreflightError(problems)


def _first_call_problem(
    topic: Topic, config: SessionConfig, participants: Sequence[Participant]
) -> str | None:
    """A budget below what the orchestrator reserves for the session's first call would
    refuse every call: the session would be recorded, call no model and end with no
    document. Said here instead, with the least budget that lets the first call be made."""
    from ..domain.aggregate import Deliberation
    from ..engine import first_call
    from ..providers import resolve_price, table_price

    if config.max_cost_usd <= 0:
        return None  # reported as such by check_session
    started = Deliberation.start(
        session_id=UUID(int=0), topic=topic, config=config, participants=participants,
        at=datetime(2000, 1, 1, tzinfo=UTC),
    )
    first = first_call(started.state, lambda p: resolve_price(p, table_price))
    if first is None or first.worst_case_usd <= config.max_cost_usd:
        return None
    return (
        f"--max-cost {config.max_cost_usd:g} is below the worst case of the first call "
        f"(${first.worst_case_usd:.4f}: {first.participant}'s {first.kind.value}), so no "
        f"model could be called; give --max-cost {_at_least(first.worst_case_usd)} or more"
    )


def _at_least(usd: float) -> str:
    """``usd`` rounded up to four decimals (a budget of exactly that lets the call be made)."""
    return f"{math.ceil(usd * 10_000) / 10_000:.4f}"
