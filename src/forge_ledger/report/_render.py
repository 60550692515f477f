"""The page: Jinja2 templates (autoescaped) around the chart SVGs, in one HTML file.

Every value from the model is escaped by Jinja2's autoescaping; the only markup inserted as is
is the SVG that vl-convert produced from the chart data, in which Vega escapes all text. The
page's Content-Security-Policy forbids every script and every fetch, so even a slip in escaping
could not run model text or reach the network.
"""

from __future__ import annotations

from datetime import datetime

import jinja2
from markupsafe import Markup

from .. import __version__
from ._charts import charts, participant_colors
from ._model import ReportModel

__all__ = ["render_html"]


def _usd(value: float) -> str:
    return f"${value:.4f}"


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC") if value is not None else "—"


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("forge_ledger.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["usd"] = _usd
    env.filters["when"] = _when
    return env


def render_html(model: ReportModel) -> str:
    """The whole page for ``model``: one self-contained HTML document."""
    rendered = charts(model)
    template = _environment().get_template("report.html.j2")
    return template.render(
        m=model,
        charts={c.key: c for c in rendered},
        svgs={c.key: Markup(c.svg) for c in rendered},
        colors=participant_colors([p.name for p in model.participants]),
        version=__version__,
    )
