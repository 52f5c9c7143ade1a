"""What bounds each kernel class (:mod:`perfdoctor.analysis.bounds`), under the attribution:
a short terminal table and its Markdown twin. The numbers are the analysis's; this module
only words them.
"""

from __future__ import annotations

from html import escape

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from perfdoctor.analysis.attribution import LABELS
from perfdoctor.analysis.bounds import Bounds, ClassBound

TITLE = "What bounds each kernel class"
COLUMNS = ("class", "ms/step", "TB/s", "TFLOP/s", "FLOP/B", "bound", "of its ceiling")


def ceilings(b: Bounds) -> str:
    p = b.peaks
    if p is None:
        return "no ceilings"
    bw = f"{p.bw_gbps / 1e3:.3g} TB/s ({p.bw_source})" if p.bw_gbps else f"bandwidth {p.bw_source}"
    fl = f"{p.tflops:.4g} TFLOP/s ({p.tflops_source})" if p.tflops else f"matmul rate {p.tflops_source}"
    ridge = f"; ridge {p.ridge:.0f} FLOP/B" if p.ridge else ""
    return f"ceilings: {bw}, {fl}{ridge}"


def _num(v: float | None, fmt: str) -> str:
    return "—" if v is None else format(v, fmt)


def _verdict(c: ClassBound) -> tuple[str, str]:
    if c.bound is None:
        return "not judged", ""
    of = "" if c.util is None else f"{c.util:.0%} of " + ("matmul rate" if c.bound == "compute" else "bandwidth")
    if c.bound == "latency":
        return "latency", f"median kernel {c.median_us:.3g} µs" + (f", {of}" if of else "")
    return f"{c.bound}", of


def rows(b: Bounds) -> list[tuple[str, ...]]:
    out = []
    for c in sorted(b.classes, key=lambda c: -c.time_ms):
        bound, of = _verdict(c)
        out.append((LABELS[c.part], f"{c.time_ms:.4g}", _num(c.tbps, ".3g"), _num(c.tflops, ".3g"), _num(c.intensity, ".3g"), bound, of))
    return out


def _reasons(b: Bounds) -> list[str]:
    lines = [f"{LABELS[c.part]}: {c.reason}" for c in b.classes if c.bound is None and c.reason and c.part != "communication"]
    lines += [f"{LABELS[c.part]}: {c.note}" for c in b.classes if c.note]
    return lines + b.notes


def terminal(analysis) -> RenderableType:
    b = analysis.bounds
    if b.reason or not b.classes:
        return Group(Text(f"{TITLE}: not available — {b.reason or 'no kernels'}", style="dim"), Text(""))
    t = Table(title=Text(f"{TITLE} ({ceilings(b)})"), title_justify="left", title_style="bold", show_edge=False)
    for col in COLUMNS:
        t.add_column(col, justify="left" if col in ("class", "bound", "of its ceiling") else "right")
    for r in rows(b):
        t.add_row(*r)
    return Group(t, *(Text(line, style="dim") for line in _reasons(b)), Text(""))


def markdown(analysis) -> list[str]:
    b = analysis.bounds
    if b.reason or not b.classes:
        return [f"**{TITLE}:** not available — {escape(b.reason or 'no kernels')}", ""]
    out = [f"### {TITLE}", "", escape(ceilings(b)), "", "| " + " | ".join(COLUMNS) + " |", "|---|---:|---:|---:|---:|---|---|"]
    out += ["| " + " | ".join(escape(x) for x in r) + " |" for r in rows(b)]
    reasons = _reasons(b)
    if reasons:
        out += ["", "<sub>" + escape("; ".join(reasons)) + "</sub>"]
    return out + [""]
