"""What bounds each kernel class (:mod:`perfdoctor.analysis.bounds`), under the attribution:
a short terminal table and its Markdown twin. The numbers are the analysis's; this module
only words them.
"""

from __future__ import annotations


from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from perfdoctor.analysis.attribution import LABELS
from perfdoctor.analysis.bounds import Bounds, ClassBound
from perfdoctor.reports.format import md_cell
from perfdoctor.text import duration_us, num, value

TITLE = "What bounds each kernel class"
COLUMNS = ("class", "ms/step", "TB/s", "TFLOP/s", "FLOP/B", "bound", "of its ceiling")
# The terminal's narrower table (80 columns): the bound and its share of the ceiling in one cell.
TERMINAL_COLUMNS = ("class", "ms/step", "TB/s", "TFLOP/s", "FLOP/B", "bound, share of its ceiling")


def ceilings(b: Bounds) -> str:
    p = b.peaks
    if p is None:
        return "no ceilings"
    bw = f"{value(p.bw_gbps / 1e3, 'TB/s')} ({p.bw_source})" if p.bw_gbps else f"bandwidth {p.bw_source}"
    fl = f"{value(p.tflops, 'TFLOP/s')} ({p.tflops_source})" if p.tflops else f"matmul rate {p.tflops_source}"
    ridge = f"; ridge {value(p.ridge, 'FLOP/B')}" if p.ridge else ""
    return f"ceilings: {bw}, {fl}{ridge}"


def short_ceilings(b: Bounds) -> str:
    """The ceilings in a few words, for the terminal table's title: one source named once."""
    p = b.peaks
    if p is None or not (p.bw_gbps or p.tflops):
        return "no ceilings: " + (p.bw_source if p else "unknown")
    bw = value(p.bw_gbps / 1e3, "TB/s") if p.bw_gbps else "bandwidth unknown"
    fl = f"{value(p.tflops, 'TFLOP/s')} bf16" if p.tflops else "matmul rate unknown"
    a, c = p.bw_source.split(" (")[0], p.tflops_source.split(" (")[0]
    where = a if a == c else f"{a}; {c}"
    ridge = f"; ridge {value(p.ridge, 'FLOP/B')}" if p.ridge else ""
    return f"{bw}, {fl}: {where}{ridge}"


def _of(c: ClassBound) -> str:
    if c.util is None:
        return ""
    return f"{value(c.util, 'ratio')} of " + {"compute": "matmul rate", "memory": "bandwidth"}.get(c.bound or "", "its roofline")


def _bound(c: ClassBound) -> str:
    """memory / compute / latency (with its median kernel's time and work at the ceilings)."""
    return f"latency ({duration_us(c.median_us)} kernels, {duration_us(c.work_us)} of work)" if c.bound == "latency" else str(c.bound)


def judged(b: Bounds) -> list[ClassBound]:
    """The classes with a number to show, longest first."""
    return sorted((c for c in b.classes if c.tbps is not None or c.tflops is not None), key=lambda c: -c.time_ms)


def rows(b: Bounds) -> list[tuple[str, ...]]:
    # value(v, ""): the number alone (the column names the unit), or "—" where there is none
    return [(LABELS[c.part], num(c.time_ms), value(c.tbps, ""), value(c.tflops, ""), value(c.intensity, ""),
             _bound(c) if c.bound else "not judged", _of(c) if c.bound else (c.reason or "")) for c in judged(b)]


def _reasons(b: Bounds) -> list[str]:
    """Why the other classes are not judged, one line per reason; the notes."""
    why: dict[str, list[str]] = {}
    for c in b.classes:
        if c.tbps is None and c.tflops is None and c.reason:
            why.setdefault(c.reason, []).append(LABELS[c.part])
    lines = [f"{', '.join(parts)}: {reason}" for reason, parts in why.items()]
    lines += [f"{LABELS[c.part]}: {c.note}" for c in b.classes if c.note]
    return lines + b.notes


def terminal(analysis) -> RenderableType:
    b = analysis.bounds
    if b.reason or not b.classes:
        return Group(Text(f"{TITLE}: not available — {b.reason or 'no kernels'}", style="dim"), Text(""))
    lines: list[RenderableType] = []
    judged_rows = rows(b) if judged(b) else []
    if len(judged_rows) == 1:  # one class judged: a line, not a table of one row
        r = judged_rows[0]
        judged_text = f"{r[0]} {r[1]} ms/step, " + ", ".join(x for x in r[5:] if x)
        return Group(Text("; ".join([f"{TITLE} ({short_ceilings(b)}): {judged_text}", *_reasons(b)])), Text(""))
    elif judged_rows:
        t = Table(title=Text(f"Bounds per kernel class ({short_ceilings(b)})"), title_justify="left", title_style="bold", show_edge=False)
        for i, col in enumerate(TERMINAL_COLUMNS):
            t.add_column(col, justify="left" if i in (0, 5) else "right")
        for r in judged_rows:
            t.add_row(*r[:5], ", ".join(x for x in r[5:] if x))
        lines.append(t)
    else:
        lines.append(Text(f"{TITLE}: no class has bytes or FLOPs to judge", style="bold"))
    return Group(*lines, *(Text(line, style="dim") for line in _reasons(b)), Text(""))


def markdown(analysis) -> list[str]:
    b = analysis.bounds
    if b.reason or not b.classes:
        return [f"**{TITLE}:** not available — {md_cell(b.reason or 'no kernels')}", ""]
    out = [f"### {TITLE}", "", md_cell(ceilings(b)), ""]
    if judged(b):
        out += ["| " + " | ".join(COLUMNS) + " |", "|---|---:|---:|---:|---:|---|---|"]
        out += ["| " + " | ".join(md_cell(x) for x in r) + " |" for r in rows(b)]
    reasons = _reasons(b)
    if reasons:
        out += ["", "<sub>" + md_cell("; ".join(reasons)) + "</sub>"]
    return out + [""]
