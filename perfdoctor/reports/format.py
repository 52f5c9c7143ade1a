"""Where a number becomes text, and where untrusted text becomes Markdown or HTML: once.

Every output (analyze's terminal, report's Markdown and HTML, diff, gate's messages in the
terminal, JSON and JUnit, the demo) renders a metric through :func:`value`, so one number
reads the same everywhere (``memory_bubble_ratio`` is ``91.7 %`` in each, ``kernels_per_step``
``863``, a step ``25.1 ms``). The numeric JSON values stay numbers; only words come from here.
"""

from __future__ import annotations

from html import escape

from perfdoctor.text import clean


def num(v: float) -> str:
    """3 significant digits, no exponent for everyday magnitudes: ``0.25``, ``37.4``, ``1,980``."""
    # From 100 up, whole numbers: ".3g" would print 999.6 as "1e+03".
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def count(x: float, signed: bool = False) -> str:
    """A count: whole as ``863`` or ``4,590``; a per-step mean that is not whole keeps its
    fraction (``863.5``, ``0.02``: a rare sync must not read as 0). ``signed``: ``+0``, ``-1``."""
    sign = "+" if signed else ""
    if abs(x - round(x)) < 1e-9:
        return f"{x:{sign},.0f}"
    return f"{x:{sign},.1f}" if abs(x) >= 100 else f"{x:{sign}.3g}"


def duration_us(us: float, signed: bool = False) -> str:
    """A duration given in µs, in µs below a millisecond: ``4 µs``, ``12.3 ms``;
    ``signed``: ``+12.3 ms``, ``-4 µs``."""
    text = f"{num(abs(us) / 1e3)} ms" if abs(us) >= 1000 else f"{num(abs(us))} µs"
    return (("+" if us > 0 else "-") + text) if signed and us else text


def relative(x: float, places: int = 1) -> str:
    """A relative change, signed, in percent: ``+3.1%``, ``-75.2%``. A budget's check shows
    ``places=2``: a +5.04 % rise that fails a +5 % budget must not read ``+5.0%``."""
    return f"{x:+.{places}%}"


def nbytes(v: float) -> str:
    """Bytes in decimal units: ``1.2 GB``, ``512 B``."""
    for suffix, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:.3g} {suffix}"
    return f"{v:.0f} B"


def value(v: float | None, unit: str) -> str:
    """A metric's value in its unit, for people: ratios as %, counts whole, bytes and rates
    scaled, absent as ``—``."""
    if v is None:
        return "—"
    v = float(v)
    if unit == "ratio":
        # below 1 % the digits that matter are after the point: 0.0042 is 0.42 %, not 0.4 %
        return f"{v * 100:.3g} %" if abs(v) < 0.01 and v != 0 else f"{v * 100:.1f} %"
    if unit == "bytes":
        return nbytes(v)
    if unit == "flag":
        return "yes" if v else "no"
    if unit == "count":
        return count(v)
    if unit == "1/s":
        return f"{num(v)} /s"
    return f"{num(v)} {unit}".rstrip()


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
