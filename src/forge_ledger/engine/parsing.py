"""Turning a model's text into a ``Critique``, ``Opinion`` or ``ConvergenceVote`` — tolerantly.

Models asked for JSON wrap it in fences, add prose before and after, use ``"Agree"`` for
``"agree"``, ``rationale`` for ``reasoning``, a 0–1 score where 0–100 was asked… Rejecting
all of that would waste paid calls, so :func:`parse_output` tries, in order: fenced blocks,
then every balanced ``{...}`` in the text (outermost first, strings respected), each as JSON
and then with trailing commas removed; the first object that validates after key and value
normalisation wins. It never raises: a failure is returned as ``error`` (which goes into the
one repair prompt, then into a ``ParseFailed`` event). The raw text is always kept by the
caller in the contribution, so nothing parsed here replaces what the model said.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from ..domain.values import (
    ConvergenceVote,
    Critique,
    Opinion,
    RoundKind,
    Stance,
    SuggestionCategory,
)
from ..errors import validation_summary

__all__ = ["ParsedOutput", "json_candidates", "output_schema", "parse_output"]

_SCHEMAS: dict[RoundKind, type[BaseModel]] = {
    RoundKind.CRITIQUE: Critique,
    RoundKind.RESPONSE: Opinion,
    RoundKind.REFINEMENT: Opinion,
    RoundKind.CONVERGENCE: ConvergenceVote,
}

_MAX_CANDIDATES = 20
_FENCE = re.compile(r"```[ \t]*(?:json|JSON|javascript|js)?[ \t]*\r?\n?(.*?)```", re.DOTALL)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")


@dataclass(frozen=True)
class ParsedOutput:
    """The parsed value, or ``None`` with the reason in ``error`` (kinds without a schema
    give ``None`` and no error)."""

    value: Critique | Opinion | ConvergenceVote | None
    error: str | None


def output_schema(kind: RoundKind) -> type[BaseModel] | None:
    """The structure a round kind's answer must contain (draft and synthesis are free text)."""
    return _SCHEMAS.get(kind)


# --------------------------------------------------------------------------- extraction


def _balanced_objects(text: str) -> list[str]:
    """Every top-level balanced ``{...}`` span, honouring JSON strings and escapes."""
    out: list[str] = []
    depth = 0
    start = -1
    in_str = False
    esc = False
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"' and depth > 0:
            in_str = True
        elif ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                out.append(text[start : i + 1])
                if len(out) >= _MAX_CANDIDATES:
                    break
    return out


def json_candidates(text: str) -> list[str]:
    """Candidate JSON object texts, most likely first (fenced blocks, then bare objects)."""
    seen: list[str] = []
    for block in _FENCE.findall(text):
        for obj in _balanced_objects(block) or [block.strip()]:
            if obj not in seen:
                seen.append(obj)
    for obj in _balanced_objects(text):
        if obj not in seen:
            seen.append(obj)
    return seen[:_MAX_CANDIDATES]


def _loads(candidate: str) -> Any:
    try:
        return json.loads(candidate)
    except ValueError:
        return json.loads(_TRAILING_COMMA.sub(r"\1", candidate))


# --------------------------------------------------------------------------- normalisation


def _key(k: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", k.strip().lower()).strip("_")


_ALIASES: dict[str, str] = {
    # opinion / vote
    "position": "stance",
    "verdict": "stance",
    "rationale": "reasoning",
    "reason": "reasoning",
    "reasons": "reasoning",
    "explanation": "reasoning",
    "justification": "reasoning",
    "comment": "reasoning",
    "comments": "reasoning",
    "issues": "concerns",
    "objections": "concerns",
    "remaining_issues": "concerns",
    "blocking_concerns": "concerns",
    "concern": "concerns",
    "confidence": "strength",
    "conviction": "strength",
    "topic": "topics",
    "points": "topics",
    "agree": "agrees",
    "agreed": "agrees",
    "agreement": "agrees",
    "approve": "agrees",
    "approved": "agrees",
    "vote": "agrees",
    # critique
    "strength_points": "strengths",
    "pros": "strengths",
    "positives": "strengths",
    "weakness": "weaknesses",
    "cons": "weaknesses",
    "negatives": "weaknesses",
    "gaps": "weaknesses",
    "suggestion": "suggestions",
    "recommendations": "suggestions",
    "improvements": "suggestions",
    "rating": "score",
    "overall_score": "score",
    "critiqued": "target",
    "author": "target",
}

_SUGGESTION_ALIASES = {
    "suggestion": "text",
    "description": "text",
    "recommendation": "text",
    "change": "text",
    "area": "section",
    "location": "section",
    "severity": "priority",
    "importance": "priority",
    "type": "category",
    "kind": "category",
}

_PRIORITY_WORDS = {
    "critical": 1, "blocker": 1, "highest": 1, "high": 2, "major": 2, "medium": 3,
    "moderate": 3, "normal": 3, "low": 4, "minor": 4, "lowest": 5, "trivial": 5, "nit": 5,
}

_TRUE = {"true", "yes", "y", "agree", "agrees", "approve", "approved", "accept", "1"}
_FALSE = {"false", "no", "n", "disagree", "disagrees", "reject", "rejected", "0"}


def _rename(obj: dict[str, Any], aliases: dict[str, str], fields: set[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for raw, value in obj.items():
        k = _key(str(raw))
        k = k if k in fields else aliases.get(k, k)
        if k in fields and k not in out:
            out[k] = value
    return out


def _stance(value: Any) -> Stance | None:
    if isinstance(value, Stance):
        return value
    if isinstance(value, bool):
        return Stance.AGREE if value else Stance.DISAGREE
    if not isinstance(value, str):
        return None
    k = _key(value)
    k = {
        "strong_agree": "strongly_agree", "strongly_agrees": "strongly_agree",
        "agrees": "agree", "yes": "agree", "approve": "agree", "accept": "agree",
        "partially_agree": "partial", "partly_agree": "partial", "partial_agreement": "partial",
        "partially": "partial", "mixed": "partial", "neutral": "partial",
        "disagrees": "disagree", "no": "disagree", "reject": "disagree",
        "strong_disagree": "strongly_disagree", "strongly_disagrees": "strongly_disagree",
    }.get(k, k)
    try:
        return Stance(k)
    except ValueError:
        return None


def _str_tuple(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,) if value.strip() else ()
    if isinstance(value, list | tuple):
        out: list[str] = []
        for v in value:
            if isinstance(v, str):
                if v.strip():
                    out.append(v)
            elif isinstance(v, dict):
                text = next((x for x in v.values() if isinstance(x, str) and x.strip()), None)
                if text is not None:
                    out.append(text)
            elif v is not None:
                out.append(str(v))
        return tuple(out)
    return (str(value),)


def _text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return " ".join(str(v) for v in value)
    return "" if value is None else str(value)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        m = re.search(r"-?\d+(?:\.\d+)?", value)
        return float(m.group()) if m else None
    return None


def _score_100(value: Any) -> int | None:
    """A 0–100 score; a fraction in (0, 1] is read as a share of 100, a 0–10 grade ×10."""
    x = _number(value)
    if x is None:
        return None
    if isinstance(value, float) and 0 < x <= 1:
        x *= 100
    elif isinstance(value, str) and "/10" in value.replace(" ", "") and x <= 10:
        x *= 10
    return round(min(100.0, max(0.0, x)))


def _fraction(value: Any) -> float | None:
    x = _number(value)
    if x is None:
        return None
    if x > 1:
        x = x / 100 if x <= 100 else 1.0
    return min(1.0, max(0.0, x))


def _suggestion(v: Any) -> dict[str, Any] | None:
    if isinstance(v, str):
        return {"text": v} if v.strip() else None
    if not isinstance(v, dict):
        return None
    s = _rename(v, _SUGGESTION_ALIASES, {"text", "section", "priority", "category"})
    if not isinstance(s.get("text"), str) or not s["text"].strip():
        return None
    out: dict[str, Any] = {"text": s["text"]}
    if isinstance(s.get("section"), str) and s["section"].strip():
        out["section"] = s["section"]
    p = s.get("priority")
    if isinstance(p, str) and _key(p) in _PRIORITY_WORDS:
        out["priority"] = _PRIORITY_WORDS[_key(p)]
    elif (n := _number(p)) is not None:
        out["priority"] = int(min(5, max(1, round(n))))
    cat = s.get("category")
    if isinstance(cat, str):
        k = _key(cat)
        out["category"] = k if k in {c.value for c in SuggestionCategory} else "other"
    return out


def _normalise(kind: RoundKind, obj: dict[str, Any]) -> dict[str, Any]:
    if kind is RoundKind.CRITIQUE:
        d = _rename(obj, _ALIASES, {"target", "strengths", "weaknesses", "suggestions", "score"})
        out: dict[str, Any] = {
            "strengths": _str_tuple(d.get("strengths")),
            "weaknesses": _str_tuple(d.get("weaknesses")),
        }
        raw = d.get("suggestions")
        items = raw if isinstance(raw, list) else ([raw] if raw is not None else [])
        out["suggestions"] = [s for s in (_suggestion(i) for i in items) if s is not None]
        if (score := _score_100(d.get("score"))) is not None:
            out["score"] = score
        if isinstance(d.get("target"), str) and d["target"].strip():
            out["target"] = d["target"]
        return out
    if kind in (RoundKind.RESPONSE, RoundKind.REFINEMENT):
        d = _rename(obj, _ALIASES, {"stance", "reasoning", "concerns", "strength", "topics"})
        out = {
            "stance": _stance(d.get("stance")),
            "reasoning": _text(d.get("reasoning")),
            "concerns": _str_tuple(d.get("concerns")),
            "topics": _str_tuple(d.get("topics")),
        }
        if (strength := _fraction(d.get("strength"))) is not None:
            out["strength"] = strength
        return out
    d = _rename(obj, _ALIASES, {"agrees", "score", "concerns", "stance", "reasoning"})
    stance = _stance(d.get("stance"))
    agrees = d.get("agrees")
    if isinstance(agrees, str):
        k = _key(agrees)
        as_stance = _stance(agrees)
        if as_stance is not None and k not in _TRUE | _FALSE:
            stance = stance or as_stance
            agrees = as_stance.agrees
        else:
            agrees = True if k in _TRUE else (False if k in _FALSE else None)
    elif not isinstance(agrees, bool):
        agrees = None
    if agrees is None and stance is not None:
        agrees = stance.agrees
    out = {
        "agrees": agrees,
        "stance": stance,
        "concerns": _str_tuple(d.get("concerns")),
        "reasoning": _text(d.get("reasoning")),
    }
    if (score := _score_100(d.get("score"))) is not None:
        out["score"] = score
    return out


# --------------------------------------------------------------------------- entry point


def parse_output(kind: RoundKind, text: str) -> ParsedOutput:
    """Parse ``text`` as the structure ``kind`` asks for; never raises (see module docstring)."""
    schema = _SCHEMAS.get(kind)
    if schema is None:
        return ParsedOutput(None, None)
    try:
        candidates = json_candidates(text)
        if not candidates:
            return ParsedOutput(None, f"no JSON object found in the answer (expected a "
                                      f"{schema.__name__})")
        errors: list[str] = []
        for cand in candidates:
            try:
                obj = _loads(cand)
            except (ValueError, RecursionError) as exc:
                errors.append(f"invalid JSON ({str(exc).splitlines()[0][:120]})")
                continue
            if not isinstance(obj, dict):
                errors.append("the JSON is not an object")
                continue
            try:
                value = schema.model_validate(_normalise(kind, obj))
            except ValidationError as exc:
                problems = validation_summary(exc, most=3)
                errors.append(f"{schema.__name__} does not validate ({problems})")
                continue
            assert isinstance(value, Critique | Opinion | ConvergenceVote)
            return ParsedOutput(value, None)
        return ParsedOutput(None, errors[0] if errors else "no usable JSON object")
    except Exception as exc:  # the contract is "never raises": a parser bug becomes a failure
        return ParsedOutput(None, f"unparseable answer ({type(exc).__name__})")
