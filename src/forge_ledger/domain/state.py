"""Session state: what is known about a session after some prefix of its events.

``SessionState`` is what the aggregate holds, what time travel returns, what the engine
reasons over and what ``show`` prints. :mod:`forge_ledger.domain.fold` builds it from the
events, one at a time; the models here only hold and answer questions about it.
"""

# No postponed annotations here: pydantic then reads the models' annotations as objects
# rather than compiling each from a string, which makes importing them (every command) faster.

import json
from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from . import events as ev
from .texts import TextPool, TextSource, text_address
from .values import (
    NO_TOKENS,
    ConvergenceVote,
    Critique,
    DivergenceStatus,
    DivergentPosition,
    ModelResponse,
    Opinion,
    Participant,
    ResponseAccounting,
    RoundKind,
    RoundStatus,
    SessionConfig,
    SessionStatus,
    Stance,
    TokenCount,
    Topic,
)

__all__ = [
    "CallFailure",
    "ContributionState",
    "DivergenceChange",
    "DivergenceState",
    "HumanInput",
    "RoundState",
    "SessionState",
    "after_iteration",
    "answers_apart",
]


class _State(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=False, defer_build=True)


_EMPTY = text_address("")


def after_iteration(round_iteration: int, iteration: int) -> bool:
    """Whether a round of iteration ``round_iteration`` lies past the end of ``iteration``.

    The one rule of where an iteration ends: just before the first round of a later iteration
    starts. Time travel (``--at-iteration``), the document as of an iteration, and a rewind
    (which undoes the rounds past the iteration it returns to) all cut a session here.
    """
    return round_iteration > iteration


class ContributionState(_State):
    """One recorded answer, by reference to its prompt and to its text.

    The prompt (system prompt, schema, quoted answers: most of a session's bytes) stays in
    the ``ContributionRecorded`` event at ``position``; the state keeps only its
    ``prompt_hash``. Holding every prompt made the state, every snapshot of it and every
    load grow several times faster than the answers themselves, so a long live session
    cost more per round the longer it ran.

    The answer's text is held the same way: ``response`` is its accounting only and
    ``answer_sha256`` the text's address; :meth:`SessionState.answer` reads the text. A state
    written with its texts inline is read by :func:`answers_apart`.
    """

    participant: str
    attempt: int
    position: int
    at: datetime
    model: str
    prompt_hash: str
    response: ResponseAccounting
    answer_sha256: str
    """Address of the answer's text (:func:`~forge_ledger.domain.texts.text_address`)."""
    purpose: str = "answer"
    critique: Critique | None = None
    opinion: Opinion | None = None
    vote: ConvergenceVote | None = None
    parse_error: str | None = None

    @property
    def abstained(self) -> bool:
        return self.parse_error is not None

    @property
    def unpriced(self) -> bool:
        """Whether the call was charged at no known price (its cost is then a lower bound)."""
        return self.response.price is None

    @property
    def blank(self) -> bool:
        """Whether the answer's text is empty (known from its address, without reading it)."""
        return self.answer_sha256 == _EMPTY


class CallFailure(_State):
    round: int
    participant: str
    attempt: int
    position: int
    error_type: str
    message: str
    will_retry: bool
    partial_text: str = ""


class RoundState(_State):
    number: int
    kind: RoundKind
    iteration: int
    depth: int = 0
    focus: str = ""
    technique: str | None = None
    status: RoundStatus = RoundStatus.IN_PROGRESS
    expected: list[str]
    targets: dict[str, str] = Field(default_factory=dict)
    contributions: list[ContributionState] = Field(default_factory=list)
    abstained: list[str] = Field(default_factory=list)
    started_position: int
    started_at: datetime
    completed_at: datetime | None = None
    superseded: bool = False
    """True once a rewind went back past this round's iteration (kept for audit)."""
    replaced: list[str] = Field(default_factory=list)
    """Authors a fallback took the round over from (``FallbackChosen``): never called again."""

    def contribution_of(self, participant: str) -> ContributionState | None:
        """The participant's answer in this round (the repair attempt replaces the answer).

        Searched from the end: the latest contribution wins, and it is usually the last one
        recorded, so appending to a long round stays cheap.
        """
        for c in reversed(self.contributions):
            if c.participant == participant:
                return c
        return None

    def latest_answers(self) -> dict[str, ContributionState]:
        """Each participant's answer in this round (as :meth:`contribution_of` finds it), in
        the order the participants first answered: one pass for a question about everyone."""
        latest: dict[str, ContributionState] = {}
        for c in self.contributions:
            latest[c.participant] = c  # a later answer replaces, and keeps the first's place
        return latest

    @property
    def contributors(self) -> list[str]:
        return list(self.latest_answers())

    @property
    def missing(self) -> list[str]:
        done = set(self.contributors) | set(self.abstained)
        return [p for p in self.expected if p not in done]


class DivergenceChange(_State):
    status: DivergenceStatus
    position: int
    round: int
    note: str = ""
    by: str = ""


class DivergenceState(_State):
    id: str
    topic: str
    positions: list[DivergentPosition]
    strongest: Stance
    status: DivergenceStatus = DivergenceStatus.OPEN
    opened_round: int
    opened_position: int
    history: list[DivergenceChange] = Field(default_factory=list)

    @property
    def is_open(self) -> bool:
        return not self.status.closed

    @property
    def strong(self) -> bool:
        return self.strongest is Stance.STRONGLY_DISAGREE


class HumanInput(_State):
    author: str
    text: str
    kind: str
    iteration: int
    position: int
    at: datetime
    questions: list[str] = Field(default_factory=list)


class ConvergenceResult(_State):
    round: int
    iteration: int
    score: float
    converged: bool
    majority_agrees: bool
    agree: int
    disagree: int
    partial: int
    abstain: int
    threshold: float
    blocking: list[str]
    remaining_issues: list[str]
    position: int


class Technique(_State):
    iteration: int
    technique_slug: str
    category: str
    suggested_reason: str
    weak_axes: list[str]
    source: str
    applied: bool


class Rewind(_State):
    from_iteration: int
    to_iteration: int
    steps: int
    position: int
    at: datetime


def answers_apart(data: dict[str, Any], pool: TextPool) -> dict[str, Any]:
    """A state written with its texts inline, in the one layout of the state: each answer's
    text (``response.content``) moved into ``pool`` and named by its address, each prompt
    (``messages``, which its event holds) left out. A fork's ``SessionForked`` carries its
    parent's state so (:meth:`SessionState.model_dump_with_answers`); so did snapshots of
    stores written before answers were held by address, and prompts were left out."""
    if "rounds" not in data:
        return data

    def contributions(r: Any) -> Any:
        if not isinstance(r, dict) or "contributions" not in r:
            return r
        return {**r, "contributions": _each(r["contributions"], partial(_answer_apart, pool))}

    return {**data, "rounds": _each(data["rounds"], contributions)}


def _each(items: Any, change: Callable[[Any], Any]) -> Any:
    """``items`` each changed (anything but a list as it is)."""
    if isinstance(items, list):
        return [change(item) for item in items]
    return items


def _answer_apart(pool: TextPool, c: Any) -> Any:
    if not isinstance(c, dict):
        return c
    c = {k: v for k, v in c.items() if k != "messages"}
    response = c.get("response")
    if isinstance(response, dict) and "content" in response:
        c["response"] = {k: v for k, v in response.items() if k != "content"}
        c["answer_sha256"] = pool.add(str(response["content"]))
    return c


class SessionState(_State):
    """Everything known about one session after some prefix of its events.

    Answers are held by address; their texts live in a private :class:`TextPool` (never
    serialized: a snapshot holds references only) that the fold fills and that falls back
    to the store's texts for a state restored from a snapshot. :meth:`answer` is the one way
    to read an answer's text.
    """

    id: str
    slug: str
    topic: Topic
    config: SessionConfig
    source: str = "run"
    status: SessionStatus = SessionStatus.INITIALIZED
    status_reason: str = ""
    participants: list[Participant] = Field(default_factory=list)
    rounds: list[RoundState] = Field(default_factory=list)
    failures: list[CallFailure] = Field(default_factory=list)
    divergences: list[DivergenceState] = Field(default_factory=list)
    convergence: list[ConvergenceResult] = Field(default_factory=list)
    human_inputs: list[HumanInput] = Field(default_factory=list)
    pending_questions: list[str] = Field(default_factory=list)
    fault: ev.PauseFault | None = None
    """The provider fault the session is paused on (None when not paused by a fault)."""
    resumed_position: int = 0
    """Position of the latest ``SessionResumed``: failures before it no longer count as giving
    up, so a resumed round gets a fresh set of attempts."""
    asked: list[tuple[int, list[str]]] = Field(default_factory=list)
    techniques: list[Technique] = Field(default_factory=list)
    rewinds: list[Rewind] = Field(default_factory=list)
    budget_exhausted: dict[str, Any] | None = None
    fork_origin: ev.ForkOrigin | None = None
    seal: dict[str, Any] | None = None
    ideas: list[dict[str, Any]] = Field(default_factory=list)
    review_labels: dict[str, str] = Field(default_factory=dict)
    """Anonymized review: label ("Response A") → participant, as recorded."""
    """Ideas kept with a 0-10 score (``IdeaRecorded``): ``{id, content, score}``."""
    imported: dict[str, Any] | None = None
    """The ``SessionImported`` payload when the session came from a YAML file."""
    iteration: int = 0
    tokens: TokenCount = NO_TOKENS
    cost_usd: float = 0.0
    created_at: datetime
    updated_at: datetime
    version: int = 0
    head_hash: str = ""
    _texts: TextPool = PrivateAttr(default_factory=TextPool)
    _active: list[RoundState] = PrivateAttr(default_factory=list)
    _active_key: tuple[int, int] = PrivateAttr(default=(-1, -1))

    def __eq__(self, other: object) -> bool:
        """Equal fields are equal states: the text pool is a cache of what the answers'
        addresses name (a restored state reads from the store what a folded one holds)."""
        if not isinstance(other, SessionState):
            return NotImplemented
        return self.__dict__ == other.__dict__

    # ------------------------------------------------------------------ texts

    @classmethod
    def load(
        cls,
        data: str | bytes | dict[str, Any],
        fallback: TextSource | None = None,
        *,
        inline: bool = False,
        context: dict[str, Any] | None = None,
    ) -> "SessionState":
        """A state as JSON (a fork's copy, a test's), its answers read from ``fallback``; with
        ``inline``, a state written with its texts inline (see :func:`answers_apart`).
        ``context`` is pydantic's validation context, for a subclass's fields."""
        pool = TextPool(fallback)
        if inline:
            data = answers_apart(json.loads(data) if not isinstance(data, dict) else data, pool)
        if isinstance(data, dict):
            state = cls.model_validate(data, context=context)
        else:
            state = cls.model_validate_json(data, context=context)
        state.text_pool = pool
        return state

    def _private(self) -> dict[str, Any]:
        """The private attributes' values, read directly: pydantic's own read of a private
        attribute probes it for a descriptor every time (pydantic issue 12081), about 3 µs a
        read, and the fold reads them for every event it applies."""
        return cast(dict[str, Any], self.__pydantic_private__)

    @property
    def text_pool(self) -> TextPool:
        """The texts this state has folded or read (for the ledger's snapshots)."""
        return cast(TextPool, self._private()["_texts"])

    @text_pool.setter
    def text_pool(self, pool: TextPool) -> None:
        self._texts = pool

    @property
    def unpriced_calls(self) -> int:
        """Answers charged at no known price: the session's cost is then a part only."""
        return sum(1 for r in self.rounds for c in r.contributions if c.unpriced)

    def answer(self, c: ContributionState) -> str:
        """The text of a recorded answer (``c`` is one of this state's contributions)."""
        return self.text_pool.text(c.answer_sha256)

    def response(self, c: ContributionState) -> ModelResponse:
        """A recorded answer as the :class:`ModelResponse` it was (accounting and text)."""
        return c.response.with_content(self.answer(c))

    def answer_addresses(self) -> list[str]:
        """Addresses of every answer the state refers to, in recorded order (no repeats)."""
        seen: dict[str, None] = {}
        for r in self.rounds:
            for c in r.contributions:
                seen[c.answer_sha256] = None
        return list(seen)

    def model_dump_with_answers(self) -> dict[str, Any]:
        """The state as JSON with every answer's text inline (``response.content``), as a
        fork's ``SessionForked`` carries it: the fork stays self-contained, and the ledger
        stores those texts by reference like any event's (``content`` is a text key)."""
        self.answer_addresses()  # every answer read first: an error raised while reading one
        data = self.model_dump(mode="json")  # reaches the caller as it is, not as pydantic's
        for r, rd in zip(self.rounds, data["rounds"], strict=True):
            for c, cd in zip(r.contributions, rd["contributions"], strict=True):
                del cd["answer_sha256"]
                cd["response"] = {"content": self.answer(c), **cd["response"]}
        return data

    # ------------------------------------------------------------------ queries

    def evaluation(self, number: int) -> ConvergenceResult | None:
        """Round ``number``'s convergence evaluation, if it has one (a round is evaluated at
        most once: ``Deliberation.evaluate`` refuses a second). Searched from the newest: the
        round asked about is usually the last one voted."""
        for c in reversed(self.convergence):
            if c.round == number:
                return c
        return None

    def participant(self, name: str) -> Participant | None:
        for p in self.participants:
            if p.name == name:
                return p
        return None

    @property
    def participant_names(self) -> list[str]:
        return [p.name for p in self.participants]

    def rounds_through(self, iteration: int) -> list[RoundState]:
        """The active rounds up to the end of ``iteration`` (see :func:`after_iteration`)."""
        return [r for r in self.active_rounds if not after_iteration(r.iteration, iteration)]

    @property
    def active_rounds(self) -> list[RoundState]:
        """Rounds not undone by a rewind: what the deliberation builds on.

        Asked several times per step, so kept until the rounds change: a round is only ever
        appended (``RoundStarted``) and only a rewind supersedes one, so the pair of counts
        says when the list is stale. Rebuilding it every time made each step cost as much as
        the session was long; rounds started since it was kept are added to it, as long as no
        rewind came in between (a rebuild of the projections asks once per round).
        """
        rounds = self.rounds
        key = (len(rounds), len(self.rewinds))
        private = self._private()
        known, rewinds = private["_active_key"]
        if (known, rewinds) != key:
            if rewinds == key[1] and 0 <= known < key[0]:  # rounds appended: add them
                private["_active"] = [
                    *private["_active"],
                    *(r for r in rounds[known:] if not r.superseded),
                ]
            else:
                private["_active"] = [r for r in rounds if not r.superseded]
            private["_active_key"] = key
        return cast(list[RoundState], private["_active"])

    @property
    def open_round(self) -> RoundState | None:
        if self.rounds and self.rounds[-1].status is RoundStatus.IN_PROGRESS:
            return self.rounds[-1]
        return None

    @property
    def last_round(self) -> RoundState | None:
        return self.rounds[-1] if self.rounds else None

    def round(self, number: int) -> RoundState | None:
        rounds = self.rounds
        if 1 <= number <= len(rounds):
            r = rounds[number - 1]  # round n is the n-th, unless a store holds a gap
            if r.number == number:
                return r
        for r in rounds:
            if r.number == number:
                return r
        return None

    def divergence(self, divergence_id: str) -> DivergenceState | None:
        for d in self.divergences:
            if d.id == divergence_id:
                return d
        return None

    @property
    def open_divergences(self) -> list[DivergenceState]:
        return [d for d in self.divergences if d.is_open]

    @property
    def latest_convergence(self) -> ConvergenceResult | None:
        return self.convergence[-1] if self.convergence else None

    @property
    def document_source(self) -> tuple[RoundState, ContributionState] | None:
        """The contribution whose text *is* the forged document, and its round.

        The one rule for "the document": the newest synthesis; before any synthesis, the
        newest draft or response (an author's revised draft). A response recorded as a
        structured opinion (its ``OpinionRecorded``: what the response prompt asks for) is an
        answer to the critiques, not a text, so it never becomes the document. Rounds undone by
        a rewind do not count. Within a round the last answer wins (a repair call replaces its
        first try); an abstention (unparseable answer) never becomes the document. Every
        consumer (``spec``, the audit's document similarity, the report) asks here.
        """
        fallback: tuple[RoundState, ContributionState] | None = None
        for r in reversed(self.active_rounds):
            if r.kind is RoundKind.SYNTHESIS:
                found = _last_answer(r)
                if found is not None:
                    return r, found
            elif fallback is None and r.kind in (RoundKind.DRAFT, RoundKind.RESPONSE):
                found = _last_answer(r)
                if found is not None and found.opinion is None:
                    fallback = (r, found)
        return fallback

    @property
    def document_truncated(self) -> bool:
        """Whether the forged document was cut off at its token limit (its end is missing):
        the call that ended it stopped at ``max_tokens`` and continuing it did not finish it.
        Every reader of the document (``spec``, ``show``, ``audit``, the report) says so."""
        source = self.document_source
        return source is not None and source[1].response.truncated

    @property
    def latest_text(self) -> str | None:
        """The forged document's text as of this state (see :attr:`document_source`); an
        imported session with no round of its own yet has the text its file carried."""
        source = self.document_source
        if source is None and self.imported is not None:
            text = self.imported.get("document")
            return text if isinstance(text, str) else None
        return self.answer(source[1]) if source is not None else None

    @property
    def phase(self) -> str:
        """divergent | transition | convergent, from the kind of the latest round (for an
        imported session not resumed yet: the phase its file gave)."""
        last = self.active_rounds[-1] if self.active_rounds else None
        if last is None and self.imported is not None:  # as the imported file said
            return str(self.imported.get("phase", "divergent"))
        if last is None or last.kind in (RoundKind.DRAFT, RoundKind.CRITIQUE, RoundKind.RESPONSE):
            return "divergent"
        if last.kind is RoundKind.SYNTHESIS:
            return "transition"
        return "convergent"


def _last_answer(rnd: RoundState) -> ContributionState | None:
    """The round's last contribution that answered (not a failed parse)."""
    for c in reversed(rnd.contributions):
        if not c.abstained and not c.blank:
            return c
    return None
