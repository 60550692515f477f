"""The page: Jinja2 templates (autoescaped) around the chart SVGs and the rendered document.

Every value from the model is escaped by Jinja2's autoescaping. Two kinds of markup go in as
they are: the SVG that vl-convert produced from the chart data (Vega escapes all text), and
the document as :func:`._markdown.render_markdown` renders it (the Markdown elements it allows
around escaped text). The page's Content-Security-Policy forbids every script and every fetch,
so even a slip in escaping could not run model text or reach the network.
"""

from __future__ import annotations

from datetime import datetime

import jinja2
from markupsafe import Markup, escape

from .. import __version__
from ._charts import charts
from ._markdown import render_markdown
from ._model import ReportModel
from ._palettes import participant_colors

__all__ = ["render_html"]


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC") if value is not None else "—"


def _source(text: str) -> Markup:
    """Text for a ``<pre>`` that reads back exactly: a carriage return as a character
    reference (a browser turns a literal one into a line feed)."""
    return escape(text).replace("\r", Markup("&#13;"))


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("forge_ledger.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = _when
    env.filters["source"] = _source
    return env


def render_html(model: ReportModel) -> str:
    """The whole page for ``model``: one self-contained HTML document."""
    rendered = charts(model)
    doc = model.document
    template = _environment().get_template("report.html.j2")
    return template.render(
        m=model,
        charts={c.key: c for c in rendered},
        colors=participant_colors([p.name for p in model.participants]),
        doc_pieces=render_markdown(doc.text, [s.start for s in doc.sentences]) if doc else [],
        version=__version__,
    )
