"""Where the step went (:mod:`perfdoctor.analysis.attribution`), as the first thing every
report shows: a terminal table, Markdown lines, HTML (a table and one stacked bar per step),
and the JSON block. The numbers are the analysis's; this module only words and draws them.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from perfdoctor.analysis.attribution import BUSY_PARTS, LABELS, PARTS, Attribution
from perfdoctor.reports import cpu
from perfdoctor.reports.format import html as html_text, md_cell, svg_number as at  # at: a coordinate in the SVG
from perfdoctor.text import num, value

TITLE = "Where the step went"
BAR = 30  # characters of the terminal's share bar
# One colour per part: busy parts blue-green-purple, waiting parts warm, unattributed grey.
COLOURS = {
    "gemm": "#4e79a7", "convolution": "#59a14f", "attention": "#76b7b2", "normalisation": "#edc948",
    "elementwise": "#b07aa1", "layout_transform": "#ff9da7", "reduction_sampling": "#9c755f",
    "memcpy_memset": "#f28e2b", "communication": "#8cd17d", "other": "#bab0ac", "data_loading": "#e15759",
    "host_sync": "#d37295", "comm_wait": "#a0cbe8", "host_python": "#f1ce63", "host_late": "#ff6b3d", "host_before_launch": "#ffbe7d",
    "launch_cadence": "#fabfd2", "unattributed": "#79706e",
}


def _rows(a: Attribution) -> list[tuple[str, float, float]]:
    """(label, ms per step, share) of every non-zero part, largest first."""
    rows = [(p, a.step[p]) for p in PARTS if a.step[p] > 0 or p == "unattributed"]
    return [(LABELS[p], ms, ms / a.step_ms if a.step_ms else 0.0) for p, ms in sorted(rows, key=lambda kv: -kv[1])]


def headline(a: Attribution) -> str:
    busy = a.busy_ms
    return (f"{value(a.step_ms, 'ms')} per step ({'untraced, light pass' if a.source == 'light' else 'traced critical path, p50'}): "
            f"GPU busy {value(busy, 'ms')} ({value(busy / a.step_ms, 'ratio')}), waiting {value(a.step_ms - busy, 'ms')}" if a.step_ms else "no step time")


def terminal(analysis, blank_after: bool = True) -> RenderableType:
    """The attribution table; ``blank_after`` False where the kernel-class bounds follow
    directly under it (they end the block)."""
    a = analysis.attribution
    if a.reason and analysis.cpu is not None:  # no GPU ran: the step went to CPU operators
        return Text(f"{cpu.TITLE}: {cpu.headline(analysis.cpu, cpu.tracer_cost(analysis))}", style="bold")
    if a.reason:
        return Group(Text(f"{TITLE}: not available — {a.reason}", style="dim"), Text(""))
    title = Text(f"{TITLE}: {headline(a)}", style="bold")  # a line of its own: a table title wraps at the table's width
    t = Table(show_edge=False)
    for col, just in (("part", "left"), ("ms/step", "right"), ("share", "right"), ("", "left")):
        t.add_column(col, justify=just)
    for label, ms, share in _rows(a):
        t.add_row(Text(label), num(ms), value(share, "ratio"), Text("█" * max(int(round(share * BAR)), 0), style="cyan"))
    parts: list[RenderableType] = [title, t]
    if a.sites:
        parts.append(Text("host Python call sites: " + "; ".join(f"{s} {value(ms, 'ms')}" for s, ms in a.sites[:3]), style="dim"))
    if a.note:
        parts.append(Text(a.note, style="dim"))
    return Group(*parts, *([Text("")] if blank_after else []))


def markdown(analysis) -> list[str]:
    a = analysis.attribution
    if a.reason and analysis.cpu is not None:
        return [f"### {cpu.TITLE}", "", md_cell(cpu.headline(analysis.cpu, cpu.tracer_cost(analysis))), "", *cpu.markdown(analysis.cpu)]
    if a.reason:
        return [f"**{TITLE}:** not available — {md_cell(a.reason)}", ""]
    out = [f"### {TITLE}", "", f"{md_cell(headline(a))}", "", "| part | ms/step | share |", "|---|---:|---:|"]
    out += [f"| {md_cell(label)} | {num(ms)} | {value(share, 'ratio')} |" for label, ms, share in _rows(a)]
    if a.sites:
        out += ["", "Host Python call sites: " + "; ".join(f"<code>{md_cell(s)}</code> {value(ms, 'ms')}" for s, ms in a.sites[:3])]
    if a.note:
        out += ["", f"<sub>{md_cell(a.note)}</sub>"]
    return out + [""]


def _bar(y: float, parts: dict[str, float], total: float, scale: float, x0: float, label: str) -> list[str]:
    out = [f'<text x="2" y="{at(y + 11, 1)}" font-size="10">{html_text(label)}</text>']
    x = x0
    for p in PARTS:
        w = parts.get(p, 0.0) * scale
        if w <= 0:
            continue
        tip = f"{LABELS[p]}: {value(parts[p], 'ms')} ({value(parts[p] / total, 'ratio')})" if total else LABELS[p]
        out.append(f'<rect x="{at(x, 2)}" y="{at(y, 1)}" width="{at(w, 2)}" height="14" fill="{COLOURS[p]}"><title>{html_text(tip)}</title></rect>')
        x += w
    return out


def _svg(body: list[str], width: float, height: float, label: str) -> str:
    return (f'<svg class="pd-attribution" role="img" aria-label="{html_text(label)}" width="100%" '
            f'style="max-width:{at(width, 0)}px" viewBox="0 0 {at(width, 0)} {at(height, 0)}" xmlns="http://www.w3.org/2000/svg">'
            + "".join(body) + "</svg>")


def html(analysis) -> str:
    """The headline step's stacked bar with its legend, then (folded, so the timeline stays in
    the first screen) the table and one stacked bar per traced step, on one scale."""
    a = analysis.attribution
    if a.reason and analysis.cpu is not None:  # no GPU ran: the step went to CPU operators
        return cpu.html(analysis.cpu, cpu.tracer_cost(analysis))
    if a.reason:
        return f'<p class="muted"><b>{TITLE}:</b> not available: {html_text(a.reason)}</p>'
    rows = "".join(f"<tr><td>{html_text(label)}</td><td>{num(ms)}</td><td>{value(share, 'ratio')}</td></tr>" for label, ms, share in _rows(a))
    steps = a.per_step.head(50)
    longest = max([a.step_ms, *steps["step_ms"].tolist()])
    width, x0 = 760.0, 70.0
    scale = (width - x0 - 10) / longest if longest > 0 else 0.0
    head = _svg(_bar(2, a.step, a.step_ms, scale, x0, "step"), width, 18, f"{TITLE}: the step")
    body: list[str] = []
    for i, r in enumerate(steps.itertuples(index=False)):
        body += _bar(2 + 18 * i, {p: getattr(r, p) for p in PARTS}, r.step_ms, scale, x0, f"#{r.step}")
    per_step = _svg(body, width, 6 + 18 * len(steps), f"{TITLE}: one stacked bar per step")
    legend = "".join(f'<span><i style="background:{COLOURS[p]}"></i>{html_text(LABELS[p])}</span>' for p in PARTS if a.step[p] > 0)
    note = f'<p class="muted">{html_text(a.note)}</p>' if a.note else ""
    top = ", ".join(f"{LABELS[p]} {value(ms, 'ms')}" for p, ms in a.largest(3))
    # Compact (a line, a bar, a fold) so the timeline below stays in the first screen.
    return (f'<section class="pd-where"><p><b>{TITLE}:</b> {html_text(headline(a))}. Largest: {html_text(top)}.</p>{head}'
            f"<details><summary>every part, its colour, and one bar per traced step</summary>"
            f'<p class="legend">{legend}</p><table><tr><th>part</th><th>ms/step</th><th>share</th></tr>{rows}</table>'
            f"{per_step}{note}</details></section>")


def json_block(analysis) -> dict[str, Any]:
    """The attribution of findings.json: the headline step, its parts largest first."""
    a = analysis.attribution
    doc = a.to_json()
    doc.pop("steps", None)  # per-step rows live in metrics.json
    if not a.reason:
        doc["largest"] = [{"part": p, "ms_per_step": ms} for p, ms in a.largest(3)]
        doc["busy_ms"] = sum(a.step[p] for p in BUSY_PARTS)
    return doc
