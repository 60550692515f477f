"""Who takes part in a session: participants read from a file or named after their models,
joined to a session or changed before it goes on."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from uuid import UUID

from ..clock import Clock, SystemClock
from ..domain.state import SessionState
from ..domain.values import Participant, ParticipantRole, slugify
from ..errors import ConfigError, validation_summary
from ..lineage import apply_model_swaps
from .stores import Store, opened

__all__ = [
    "add_participants",
    "load_participants",
    "participants_from_models",
    "update_participants",
]


def load_participants(path: Path, api_base: str | None = None) -> list[Participant]:
    """Read a participants YAML file (``participants: [{name, model, role, …}]``).

    ``api_base`` is given to every participant that names none.
    """
    import yaml
    from pydantic import ValidationError

    from ..bounded_yaml import load_yaml, read_yaml_file

    try:
        doc = load_yaml(read_yaml_file(path), name=str(path))
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not UTF-8 text", hint="save it as UTF-8") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path} is not valid YAML: {str(e).splitlines()[0]}") from None
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


def add_participants(
    store: Store,
    session: str | UUID,
    participants: Sequence[Participant],
    *,
    clock: Clock | None = None,
) -> SessionState:
    """Join participants to an existing session (e.g. one imported from a YAML file)."""
    clk = clock or SystemClock()
    with opened(store) as ledger:
        agg = ledger.get(session)
        for p in participants:
            agg.join(p, at=clk.now())
        ledger.save(agg)
    return agg.state


def update_participants(
    store: Store,
    session: str | UUID,
    *,
    swaps: Sequence[str] = (),
    api_base: str | None = None,
    reason: str = "participants updated",
    clock: Clock | None = None,
) -> SessionState | None:
    """Change models (``NAME=MODEL``, see :func:`~forge_ledger.lineage.apply_model_swaps`)
    and endpoints (``api_base`` for every participant) before the session goes on.

    Each change is a ``ParticipantUpdated`` event carrying ``reason``, so a replay sees
    exactly the participants each call was made with. Nothing to change: nothing recorded
    (``None``).
    """
    if not swaps and api_base is None:
        return None
    clk = clock or SystemClock()
    with opened(store) as ledger:
        agg = ledger.get(session)
        people = apply_model_swaps(agg.state.participants, swaps)
        if api_base is not None:
            people = [p.model_copy(update={"api_base": api_base}) for p in people]
        for p in people:
            agg.update_participant(p, at=clk.now(), reason=reason)
        ledger.save(agg)
    return agg.state
