"""Who takes part, as a person writes it: a participants file, or a list of model names.

Both the application layer (``run -p``, ``resume --add``) and study plans (each panel is a
participants file) read panels through these two functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..domain.values import Participant, ParticipantRole, slugify
from ..errors import ConfigError, validation_summary

__all__ = ["load_participants", "participants_from_models"]


def load_participants(path: Path, api_base: str | None = None) -> list[Participant]:
    """Read a participants YAML file (``participants: [{name, model, role, …}]``).

    ``api_base`` is given to every participant that names none.
    """
    from pydantic import ValidationError

    from ..untrusted.bounded_yaml import load_settings_file

    doc = load_settings_file(path)
    items = doc.get("participants") if isinstance(doc, dict) else doc
    if not isinstance(items, list) or not items:
        raise ConfigError(
            f"{path} has no participants", hint="write 'participants:' followed by a list"
        )
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ConfigError(f"{path}: participants[{i}] must be a mapping")
        if api_base and "api_base" not in item:
            item = {**item, "api_base": api_base}
        try:
            out.append(Participant.model_validate(item))
        except ValidationError as e:
            raise ConfigError(f"{path}: participants[{i}].{validation_summary(e)}") from None
    return out


def participants_from_models(models: Sequence[str], api_base: str | None) -> list[Participant]:
    """Participants named after their models (made unique); roles rotate sensibly."""
    roles = [
        ParticipantRole.DRAFTER,
        ParticipantRole.CRITIC,
        ParticipantRole.SYNTHESIZER,
        ParticipantRole.DEVILS_ADVOCATE,
        ParticipantRole.DOMAIN_EXPERT,
    ]
    out: list[Participant] = []
    used: set[str] = set()
    for i, model in enumerate(models):
        base = slugify(model.rsplit("/", 1)[-1])[:56] or f"p{i + 1}"
        name, n = base, 2
        while name in used:
            name, n = f"{base}-{n}", n + 1
        used.add(name)
        role = roles[i] if len(models) > 1 and i < len(roles) else ParticipantRole.GENERALIST
        out.append(Participant(name=name, model=model, role=role, api_base=api_base))
    return out
