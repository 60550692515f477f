"""Sphinx configuration of the forge-ledger documentation (MyST Markdown, the furo theme).

The command reference is generated from the click application itself (sphinx-click) and the
Python API from the docstrings (autodoc), so neither can drift from the code. Build with
``.venv/bin/sphinx-build -W -b html docs docs/_build/html``.
"""

from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from forge_ledger import __version__  # noqa: E402

project = "forge-ledger"
author = "the forge-ledger authors"
release = __version__
version = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx_click",
]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence", "deflist"]
suppress_warnings = ["myst.header"]

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"show-inheritance": True}

html_theme = "furo"
html_title = f"forge-ledger {__version__}"
html_static_path: list[str] = []


def _drop_unnamed_arguments(app: Any, ctx: Any, lines: list[str]) -> None:
    """An argument with an empty metavar (``spec``'s optional second ``--diff`` iteration) is
    left out of ``--help``'s usage line; leave it out of the reference too."""
    kept: list[str] = []
    skipping = False
    for line in lines:
        if line.startswith(".. option::"):
            skipping = not line[len(".. option::"):].strip()
        elif line and not line.startswith(" "):
            skipping = False
        if not skipping:
            kept.append(line)
    lines[:] = kept


def _examples_as_code(app: Any, ctx: Any, lines: list[str]) -> None:
    """A command's examples (its help's epilog, ``cli/_examples.py``) as a literal block, so a
    reader copies them as typed (no line block, no typographic quotes or dashes)."""
    plain = [line[2:] if line.startswith("| ") else line for line in lines]
    if "Examples:" not in (line.strip() for line in plain):
        return
    start = [line.strip() for line in plain].index("Examples:")
    examples = [line.strip() for line in plain[start + 1:] if line.strip()]
    lines[:] = [*lines[:start], ".. rubric:: Examples", "", ".. code-block:: text", "",
                *(f"    {e}" for e in examples), ""]


def setup(app: Any) -> None:
    app.connect("sphinx-click-process-arguments", _drop_unnamed_arguments)
    app.connect("sphinx-click-process-epilog", _examples_as_code)
