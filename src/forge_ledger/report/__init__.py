"""The audit as a page: one self-contained HTML file with charts and the document's provenance.

:func:`gather` reads what the page shows from the ledger into a :class:`ReportModel`;
:func:`render_html` turns it into the page. Rendering imports altair, vl-convert, Jinja2 and
markdown-it-py, so this package is only imported by the ``report`` command and by library
users who ask for it. Its parts for another page are the palettes (``_palettes``), a chart with
its table and the too-little-data rule (``_figure``), the Markdown renderer that keeps each
sentence's span (``_markdown``) and the template macros (``templates/macros.html.j2``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._gather import gather
from ._model import ReportModel

if TYPE_CHECKING:
    from ._render import render_html

__all__ = ["ReportModel", "gather", "render_html"]


def __getattr__(name: str) -> Any:
    if name == "render_html":
        from ._render import render_html

        return render_html
    raise AttributeError(name)
