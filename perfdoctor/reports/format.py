"""Where untrusted text becomes Markdown or HTML, and a coordinate SVG markup: once.

Numbers become words in :mod:`perfdoctor.text` (``value``, ``num``, ``count``,
``duration_us``, ``percent``, ...): the analysis, the rules and compare word numbers too, and
they sit below reports/.
"""

from __future__ import annotations

from html import escape

from perfdoctor.text import clean


def md_cell(text: object) -> str:
    """Untrusted text in a Markdown table cell or line: HTML-escaped (GitHub renders inline
    HTML), no pipe or backtick that would end the cell or a code span. In code, put it in
    ``<code>``, not backticks: a code span would show the entities as typed."""
    return escape(clean(text), quote=False).replace("|", "&#124;").replace("`", "&#96;")


def md_text(text: object) -> str:
    """Running Markdown text from a trace or a pack: :func:`md_cell`, and no emphasis."""
    return md_cell(text).replace("*", "\\*").replace("_", "\\_")


def html(text: object) -> str:
    """Untrusted text for HTML element text and quoted attribute values."""
    return escape(clean(text), quote=True)


def svg_number(v: float, places: int = 2) -> str:
    """A coordinate or a size in SVG markup (``x``, ``width``, ``viewBox``, a polyline's
    points): a position for the browser, not a word for a person, so fixed places rather than
    a formatter of :mod:`perfdoctor.text`."""
    return f"{v:.{places}f}"
