"""Map a field path of a YAML document to the line it sits on.

pydantic names the bad field (``session.ideas[1].score``); people fix files by line number.
Composing the document into nodes (no object construction, so it is as safe as
``safe_load``) gives every mapping value and sequence item its start mark.
"""

from __future__ import annotations

from collections.abc import Sequence

import yaml

__all__ = ["format_path", "line_of", "path_lines"]


def path_lines(text: str) -> dict[tuple[str | int, ...], int]:
    """Every path (keys and list indices) of ``text`` → 1-based line number."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return {}
    out: dict[tuple[str | int, ...], int] = {}

    def walk(node: yaml.Node, path: tuple[str | int, ...]) -> None:
        out.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                child = (*path, str(key.value))
                out[child] = key.start_mark.line + 1
                walk(value, child)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, (*path, i))

    if root is not None:
        walk(root, ())
    return out


def line_of(lines: dict[tuple[str | int, ...], int], loc: Sequence[str | int]) -> int | None:
    """The line of ``loc`` or of its deepest existing parent (a missing key → its mapping)."""
    path = tuple(loc)
    while True:
        if path in lines:
            return lines[path]
        if not path:
            return None
        path = path[:-1]


def format_path(loc: Sequence[str | int]) -> str:
    """``('session', 'ideas', 1, 'score')`` → ``session.ideas[1].score``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(document)"
