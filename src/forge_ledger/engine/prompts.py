"""Prompt templates: the exact messages each participant receives in each round.

Prompts are part of the record (every contribution stores its messages and their hash) and a
replay rebuilds them to find its recorded answers, so :func:`build_messages` is a pure function
of the events recorded *before the round started*: the same state gives the same bytes, and a
later event (a divergence resolved afterwards, a human note added later) never changes the
prompt of an earlier round. Changing a template changes prompt hashes, which is exactly what
replay's non-determinism report is meant to show.

What each round sees (the research notes: keep drafts blind, never let a participant judge its
own work):

* draft — the topic only, never another draft;
* critique — the one draft it was assigned (never its own);
* response — the critiques its draft received, with reviewers anonymised;
* synthesis — drafts, critiques and responses (or the previous synthesis and the refinements),
  open dissent, the human's answers, the technique to apply; the facilitator persona shapes
  the synthesizer's system prompt;
* refinement — the latest synthesis and that participant's own open concerns;
* convergence — the latest synthesis and a request for a vote.

With ``SessionConfig.anonymize`` on, critique and convergence prompts name other participants'
work only by its recorded label ("Response A", …; :mod:`.anonymity`), never by name or model.

The first line of every user prompt is ``Round {n} · {kind} · iteration {k}`` (scripted test
models key their answers on it). Structured answers are requested with the JSON schema inline.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel

from ..domain.state import ContributionState, DivergenceState, RoundState, SessionState
from ..domain.values import (
    ChatMessage,
    Critique,
    DivergenceStatus,
    Mode,
    Opinion,
    Participant,
    ParticipantRole,
    Persona,
    RoundKind,
    Topic,
)
from .anonymity import label_for
from .parsing import output_schema
from .techniques import get_technique

__all__ = [
    "Prompt",
    "build_messages",
    "build_prompt",
    "header",
    "repair_messages",
    "schema_text",
    "text_under_vote",
]

_MODE_TEXT: dict[Mode, str] = {
    Mode.STANDARD: (
        "Deliberation mode: standard. Work independently and give your own considered view."
    ),
    Mode.PARTY: (
        "Deliberation mode: party. Participants speak as distinct personalities; keep your "
        "own voice and perspective, and engage with the others' points directly."
    ),
    Mode.PANEL: (
        "Deliberation mode: panel. You sit on an expert panel; speak from your expertise, be "
        "concise, and say where your expertise ends."
    ),
}

_PERSONA_TEXT: dict[Persona, str] = {
    Persona.ARCHITECTE: (
        "Facilitator persona: architecte. Structure the synthesis: clear sections, explicit "
        "decisions, and the rationale of each trade-off."
    ),
    Persona.SPARRING: (
        "Facilitator persona: sparring. Challenge weak points openly and state which "
        "objections remain unresolved and why, rather than smoothing them over."
    ),
    Persona.PRAGMATIQUE: (
        "Facilitator persona: pragmatique. Favour what can be done now: concrete steps, "
        "priorities, and the simplest option that meets the constraints."
    ),
}


def header(round: RoundState) -> str:
    """The first line of the user prompt."""
    return f"Round {round.number} · {round.kind.value} · iteration {round.iteration}"


@functools.cache
def schema_text(model: type[BaseModel]) -> str:
    """The model's JSON schema, serialised deterministically.

    Cached per class: generating a pydantic JSON schema costs milliseconds and every
    structured prompt embeds one, which made it the main cost of a replay. The text is a
    pure function of the (immutable) class, so the cache cannot change a prompt."""
    return json.dumps(model.model_json_schema(), sort_keys=True, indent=2, ensure_ascii=False)


# --------------------------------------------------------------------------- system prompt


def _system(state: SessionState, round: RoundState, p: Participant) -> str:
    parts = [
        f"You are {p.name}, one of {len(state.participants)} participants in a structured "
        "deliberation. Every message is recorded for audit; be precise and honest about "
        "uncertainty."
    ]
    if p.role.system_prompt_modifier:
        parts.append(p.role.system_prompt_modifier)
    if p.expertise:
        parts.append(f"Your expertise: {p.expertise}.")
    if p.framework:
        parts.append(f"Work within this framework: {p.framework}.")
    parts.append(_MODE_TEXT[state.config.mode])
    if round.kind is RoundKind.SYNTHESIS:
        parts.append(_PERSONA_TEXT[state.config.persona])
    return "\n\n".join(parts)


# --------------------------------------------------------------------------- pieces


def _topic(topic: Topic) -> str:
    lines = [f"Topic: {topic.title}", f"Expected output: {topic.output_type.value}"]
    if topic.description:
        lines += ["", "Description:", topic.description]
    if topic.constraints:
        lines += ["", "Constraints:", *(f"- {c}" for c in topic.constraints)]
    if topic.references:
        lines += ["", "References:"]
        for ref in topic.references:
            lines += [f"### {ref.name} ({ref.ref_type.value})", ref.content]
    return "\n".join(lines)


def _before(state: SessionState, round: RoundState) -> list[RoundState]:
    return [r for r in state.active_rounds if r.number < round.number]


def _latest(rounds: list[RoundState], kind: RoundKind) -> RoundState | None:
    for r in reversed(rounds):
        if r.kind is kind and r.contributions:
            return r
    return None


def _answer(r: RoundState, name: str) -> ContributionState | None:
    c = r.contribution_of(name)
    return None if c is None or name in r.abstained else c


class _Quoting:
    """The answers a prompt quotes, noted as the prompt takes them in: a critique or an
    opinion rendered from its parsed value quotes its answer's prose too."""

    def __init__(self, state: SessionState) -> None:
        self.state = state
        self.quoted: dict[str, None] = {}

    def answer(self, c: ContributionState) -> str:
        self.quoted[c.answer_sha256] = None
        return self.state.answer(c)

    def critique(self, c: ContributionState) -> str:
        if c.critique is None:
            return self.answer(c).strip()
        self.quoted[c.answer_sha256] = None
        return _render_critique(c.critique)

    def opinion(self, c: ContributionState) -> str:
        if c.opinion is None:
            return self.answer(c).strip()
        self.quoted[c.answer_sha256] = None
        return _opinion_text(c.opinion)


def _render_critique(cr: Critique) -> str:
    lines = [f"Score: {cr.score}/100"]
    if cr.strengths:
        lines += ["Strengths:", *(f"- {s}" for s in cr.strengths)]
    if cr.weaknesses:
        lines += ["Weaknesses:", *(f"- {w}" for w in cr.weaknesses)]
    if cr.suggestions:
        lines.append("Suggestions:")
        for s in cr.suggestions:
            where = f" [{s.section}]" if s.section else ""
            lines.append(f"- (priority {s.priority}, {s.category.value}){where} {s.text}")
    return "\n".join(lines)


def _opinion_text(o: Opinion) -> str:
    lines = [f"Stance: {o.stance.value}"]
    if o.reasoning:
        lines.append(f"Reasoning: {o.reasoning}")
    if o.concerns:
        lines += ["Concerns:", *(f"- {x}" for x in o.concerns)]
    return "\n".join(lines)


def _open_at(
    state: SessionState, position: int, anonymous: bool = False
) -> list[tuple[DivergenceState, str]]:
    """Divergences open as of ``position``, with their status then (not now); with
    ``anonymous``, each side is named by its review label."""
    out: list[tuple[DivergenceState, str]] = []
    for d in state.divergences:
        if d.opened_position >= position:
            continue
        status = DivergenceStatus.OPEN
        for h in d.history:
            if h.position < position:
                status = h.status
        if status.closed:
            continue
        sides = "; ".join(
            f"{_who(state, p.participant, anonymous)} ({p.stance.value}): {p.position}"
            for p in d.positions
        )
        out.append((d, f"- [{d.id}] {d.topic} ({status.value}) — {sides}"))
    return out


def _who(state: SessionState, name: str, anonymous: bool) -> str:
    return (label_for(state, name) or "another participant") if anonymous else name


def _open_dissent(state: SessionState, position: int, anonymous: bool = False) -> list[str]:
    return [line for _, line in _open_at(state, position, anonymous)]


def _human(state: SessionState, position: int) -> list[str]:
    out: list[str] = []
    for h in state.human_inputs:
        if h.position >= position:
            continue
        asked = f" (answering: {' | '.join(h.questions)})" if h.questions else ""
        out.append(f"- iteration {h.iteration}, {h.kind} from {h.author}{asked}: {h.text}")
    return out


def _technique(round: RoundState) -> list[str]:
    if not round.technique:
        return []
    t = get_technique(round.technique)
    if t is None:
        return ["", f"Apply the deliberation technique '{round.technique}'."]
    return ["", f"Technique to apply: {t.slug} ({t.category}) — {t.description}", t.prompt]


def _json_request(kind: RoundKind, intro: str) -> list[str]:
    schema = output_schema(kind)
    assert schema is not None
    return [
        "",
        intro,
        "Answer with ONE JSON object that validates against this JSON schema "
        f"({schema.__name__}); you may add prose before it, but the JSON must be complete:",
        schema_text(schema),
    ]


def _section(title: str, body: Sequence[str]) -> list[str]:
    return ["", f"## {title}", *body] if body else []


# --------------------------------------------------------------------------- per round kind


def _draft(q: _Quoting, round: RoundState, _name: str) -> list[str]:
    state = q.state
    return [
        _topic(state.topic),
        *_earlier_history(state, round),
        "",
        f"Write your own complete proposal ({state.topic.output_type.value}) for this topic. "
        "Other participants are drafting independently; you will not see their drafts now. "
        "Be specific and actionable, and state your assumptions.",
    ]


def _earlier_history(state: SessionState, round: RoundState) -> list[str]:
    """What a session imported from a YAML file had settled before any round: each earlier
    iteration's questions and the human's answers, and the ideas kept with their scores."""
    if state.imported is None:
        return []
    lines: list[str] = []
    for iteration, questions in state.asked:
        if iteration >= round.iteration:
            continue
        answers = [h.text for h in state.human_inputs if h.iteration == iteration]
        lines.append(f"Iteration {iteration}:")
        lines.extend(f"- Q: {q}" for q in questions)
        lines.extend(f"- A: {a}" for a in answers)
    ideas = [f"- {i['content']} (score {i['score']}/10)" for i in state.ideas]
    return [
        *_section("Earlier iterations (questions and answers)", lines),
        *_section("Ideas kept so far", ideas),
    ]


def _critique(q: _Quoting, round: RoundState, name: str) -> list[str]:
    state = q.state
    target = round.targets.get(name, "")
    draft_round = _latest(_before(state, round), RoundKind.DRAFT)
    c = _answer(draft_round, target) if draft_round is not None and target else None
    draft = q.answer(c) if c is not None else "(the draft is missing)"
    label = label_for(state, target) if target else None
    if label is not None:
        target = label
    return [
        _topic(state.topic),
        *_section(f"{label} to critique" if label else f"Draft by {target} to critique", [draft]),
        *_json_request(
            RoundKind.CRITIQUE,
            f"Review this draft critically: strengths, weaknesses, and concrete suggestions "
            f"(each with the section it concerns, a priority from 1 = critical to 5 = minor, "
            f"and a category). Score it from 0 to 100. Set \"target\" to \"{target}\".",
        ),
    ]


def _response(q: _Quoting, round: RoundState, name: str) -> list[str]:
    state = q.state
    before = _before(state, round)
    crit_round = _latest(before, RoundKind.CRITIQUE)
    received: list[str] = []
    if crit_round is not None:
        k = 0
        for critic in crit_round.expected:
            if crit_round.targets.get(critic) != name:
                continue
            c = _answer(crit_round, critic)
            if c is None:
                continue
            k += 1
            received += [f"### Reviewer {k}", q.critique(c)]
    draft_round = _latest(before, RoundKind.DRAFT)
    own = _answer(draft_round, name) if draft_round is not None else None
    return [
        _topic(state.topic),
        *_section("Your draft", [q.answer(own) if own else "(missing)"]),
        *_section("Critiques of your draft", received or ["(none)"]),
        *_json_request(
            RoundKind.RESPONSE,
            "Answer the critiques: which do you accept and how would you revise; which do you "
            "reject and why. \"stance\" is your stance towards the critiques (agree = you "
            "accept them); list the points you still dispute in \"concerns\" and short labels "
            "of the points discussed in \"topics\".",
        ),
    ]


def _synthesis(q: _Quoting, round: RoundState, _name: str) -> list[str]:
    state = q.state
    before = _before(state, round)
    body: list[str] = [_topic(state.topic)]
    current = [r for r in before if r.iteration == round.iteration]
    previous = _latest([r for r in before if r.iteration < round.iteration], RoundKind.SYNTHESIS)
    if previous is not None:
        c = _answer(previous, previous.expected[0])
        body += _section("Previous synthesis", [q.answer(c) if c else "(missing)"])
    for r in current:
        items: list[str] = []
        for p in r.expected:
            c = _answer(r, p)
            if c is None:
                continue
            if r.kind is RoundKind.DRAFT:
                items += [f"### Draft by {p}", q.answer(c)]
            elif r.kind is RoundKind.CRITIQUE:
                items += [f"### Critique by {p} of {r.targets.get(p, '?')}'s draft", q.critique(c)]
            elif r.kind in (RoundKind.RESPONSE, RoundKind.REFINEMENT):
                items += [f"### {p}", q.opinion(c)]
        title = {
            RoundKind.DRAFT: "Drafts",
            RoundKind.CRITIQUE: "Critiques",
            RoundKind.RESPONSE: "Authors' responses to critiques",
            RoundKind.REFINEMENT: "Refinements from dissenters",
        }.get(r.kind)
        if title is not None:
            body += _section(f"{title} (round {r.number})", items)
    body += _section("Open dissent", _open_dissent(state, round.started_position))
    body += _section("Human input", _human(state, round.started_position))
    if round.focus:
        body += ["", f"Focus on: {round.focus}"]
    body += _technique(round)
    body += [
        "",
        f"Write ONE unified {state.topic.output_type.value} that merges the best elements, "
        "answers the critiques and the open dissent, and says explicitly how each open "
        "divergence is handled (or why it is left open). Give the complete text, not a diff.",
    ]
    return body


def _refinement(q: _Quoting, round: RoundState, name: str) -> list[str]:
    state = q.state
    before = _before(state, round)
    synth = _latest(before, RoundKind.SYNTHESIS)
    c = _answer(synth, synth.expected[0]) if synth is not None else None
    vote_round = _latest(before, RoundKind.CONVERGENCE)
    own: list[str] = []
    if vote_round is not None:
        v = _answer(vote_round, name)
        if v is not None and v.vote is not None:
            q.quoted[v.answer_sha256] = None
            stance = v.vote.effective_stance.value
            own.append(f"Your vote: {stance}. {v.vote.reasoning}".rstrip())
            own += [f"- {x}" for x in v.vote.concerns]
    mine = [
        line
        for d, line in _open_at(state, round.started_position)
        if any(p.participant == name for p in d.positions)
    ]
    return [
        _topic(state.topic),
        *_section("Current synthesis", [q.answer(c) if c else "(missing)"]),
        *_section("Your concerns", own or ["(none recorded)"]),
        *_section("Open divergences you are part of", mine),
        *(["", f"Focus on: {round.focus}"] if round.focus else []),
        *_technique(round),
        *_json_request(
            RoundKind.REFINEMENT,
            "You did not agree with this synthesis. Respond to it: propose precise changes "
            "that would resolve your concerns, or withdraw those that are answered. "
            "\"stance\" is your stance towards the synthesis now; keep in \"concerns\" only "
            "what still stands and label the points in \"topics\".",
        ),
    ]


def text_under_vote(state: SessionState, round: RoundState) -> ContributionState | None:
    """The synthesis a convergence round votes on: the latest one before the round."""
    synth = _latest(_before(state, round), RoundKind.SYNTHESIS)
    return _answer(synth, synth.expected[0]) if synth is not None else None


def _convergence(q: _Quoting, round: RoundState, _name: str) -> list[str]:
    state = q.state
    c = text_under_vote(state, round)
    anonymous = state.config.anonymize
    label = label_for(state, c.participant) if c is not None else None
    title = f"Proposed final text ({label})" if label else "Proposed final text"
    return [
        _topic(state.topic),
        *_section(title, [q.answer(c) if c else "(missing)"]),
        *_section("Open dissent", _open_dissent(state, round.started_position, anonymous)),
        *_json_request(
            RoundKind.CONVERGENCE,
            "Vote: does this text adequately address the topic? Set \"agrees\", a \"stance\" "
            "(strongly_agree … strongly_disagree; use strongly_disagree only for a blocking "
            "objection), a 0-100 \"score\", your \"reasoning\", and list what is missing in "
            "\"concerns\".",
        ),
    ]


_BUILDERS = {
    RoundKind.DRAFT: _draft,
    RoundKind.CRITIQUE: _critique,
    RoundKind.RESPONSE: _response,
    RoundKind.SYNTHESIS: _synthesis,
    RoundKind.REFINEMENT: _refinement,
    RoundKind.CONVERGENCE: _convergence,
}


@dataclass(frozen=True)
class Prompt:
    """A call's messages and the answers they quote (their texts' addresses, in the order the
    prompt takes them in): the ledger stores the prompt against those answers, told rather
    than left to find them."""

    messages: tuple[ChatMessage, ...]
    quotes: tuple[str, ...] = ()


def build_prompt(state: SessionState, round: RoundState, participant: str) -> Prompt:
    """System and user messages for ``participant`` in ``round`` (see module docstring), with
    the answers the user message quotes."""
    p = state.participant(participant) or Participant(
        name=participant, model="unknown", role=ParticipantRole.GENERALIST
    )
    q = _Quoting(state)
    lines = [header(round), *_BUILDERS[round.kind](q, round, participant)]
    messages = (
        ChatMessage(role="system", content=_system(state, round, p)),
        ChatMessage(role="user", content="\n".join(lines)),
    )
    return Prompt(messages, tuple(q.quoted))


def build_messages(
    state: SessionState, round: RoundState, participant: str
) -> tuple[ChatMessage, ...]:
    """:func:`build_prompt`'s messages alone."""
    return build_prompt(state, round, participant).messages


def repair_messages(
    original: Sequence[ChatMessage], bad_text: str, error: str, kind: RoundKind
) -> tuple[ChatMessage, ...]:
    """The one repair attempt: the original prompt, the unusable answer, and a request for the
    JSON alone. Its user prompt starts with the original first line plus `` · repair``."""
    first = next((m.content.split("\n", 1)[0] for m in original if m.role == "user"), "")
    schema = output_schema(kind)
    name = schema.__name__ if schema is not None else "JSON"
    lines = [
        f"{first} · repair" if first else f"{kind.value} · repair",
        f"Your previous answer could not be used: {error}.",
        f"Reply with ONLY one JSON object ({name}) — no prose, no code fences.",
    ]
    if schema is not None:
        lines += ["JSON schema:", schema_text(schema)]
    return (
        *original,
        ChatMessage(role="assistant", content=bad_text),
        ChatMessage(role="user", content="\n".join(lines)),
    )
