"""A CPU-only run in words: where the step went operator by operator, the step latency from
the traced step ranges, and what the breakdown shows (:mod:`perfdoctor.analysis.cpu`), as
terminal tables, Markdown, HTML and the JSON block. GPU metrics are said absent once, with why."""

from __future__ import annotations

import numpy as np
import pandas as pd
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from perfdoctor.analysis.cpu import CpuView, Observation
from perfdoctor.analysis.metrics import OVERHEAD_NOTE_RATIO, another_regime
from perfdoctor.reports.format import html as html_text, md_cell
from perfdoctor.text import clean, count, num, value

TITLE = "Where the step went (CPU)"
NO_GPU = "GPU metrics and checks: absent, no GPU ran in this trace (no GPU activity, no CUDA call)"


def tracer_cost(analysis) -> str:
    """What the traced steps' times hold beside the program's work, where the light pass timed
    the same steps untraced and the tracer stretched them past ``OVERHEAD_NOTE_RATIO``: on a
    CPU every operator is the tracer's event (Pyro's SVI loop: 7.3 ms traced against 1.95 ms
    untraced, 2026-12-06), and the breakdown's milliseconds are the traced ones."""
    ratio, light = analysis.value("profiler_overhead_ratio"), analysis.value("step_latency_ms_p50")
    if not ratio or not light:
        return ""
    if another_regime(ratio):  # the header's trace-window line says why
        return f"; not the steady state: untraced, the light pass's p50 is {value(light, 'ms')}"
    if ratio > OVERHEAD_NOTE_RATIO:
        return f"; the tracer's own cost is in them: untraced, the light pass's p50 is {value(light, 'ms')}"
    return ""


def headline(view: CpuView, cost: str = "") -> str:
    """``cost``: :func:`tracer_cost`'s clause, or empty."""
    mean = view.mean_ms
    share = view.op_self_ms / mean if mean else 0.0
    threads = f"; on {view.op_threads} threads at once, at least one running {value(view.op_busy_ms, 'ms')}" if view.overlapping else ""
    return (f"{value(mean, 'ms')} per step (traced step ranges, mean of {view.steps} steps{cost}): operators "
            f"{value(view.op_self_ms, 'ms')} self time ({value(share, 'ratio')}{threads}), no operator running {value(view.outside_ops_ms, 'ms')}"
            + (f", waiting for other threads or processes {value(view.waits_ms, 'ms')}" if view.waits_ms else ""))


def _latency(view: CpuView) -> str:
    return ", ".join(f"{k} {num(v)}" for k, v in view.latency().items())


def _ms(v: float) -> str:
    return num(v) if np.isfinite(v) else ""


def _rows(df) -> list[tuple[str, str, str, str, str]]:
    return [(clean(r.name), count(r.calls), _ms(r.self_ms), _ms(r.total_ms), value(r.self_share, "ratio") if np.isfinite(r.self_share) else "")
            for r in df.itertuples()]


COLUMNS = ("calls/step", "self ms/step", "total ms/step", "self % of step")


def _table(title: str, first: str, df) -> Table:
    t = Table(title=Text(title), title_justify="left", title_style="bold", show_edge=False)
    t.add_column(first, overflow="fold")
    for col in COLUMNS:
        t.add_column(col, justify="right")
    for row in _rows(df):
        t.add_row(Text(row[0]), *row[1:])
    return t


def terminal(view: CpuView) -> RenderableType:
    """The CPU section of ``analyze`` after the header (the headline is the attribution's
    line, :func:`perfdoctor.reports.attribution.terminal`): latency, operators, modules,
    observations."""
    parts: list[RenderableType] = [Text(NO_GPU, style="dim")]
    parts.append(Text("step latency ms (traced): " + _latency(view)))
    parts.append(_table("Operators per step, by self time", "operator", view.ops))
    if len(view.modules):
        parts.append(_table("Modules and ranges per step, by self time", "module / range", view.modules))
    if view.data_loading_ms:
        parts.append(Text(f"DataLoader __next__: {value(view.data_loading_ms, 'ms')} per step", style="dim"))
    for i, o in enumerate(view.observations, start=1):
        parts.append(observation_line(i, o))
        parts.append(Text(f"   what to do: {o.advice}"))
    return Group(*parts, Text(""))


def observation_line(rank: int, o: Observation) -> Text:
    """An observation in one line, as analyze and --brief print it: rank, title, evidence."""
    return Text.assemble((f"CPU {rank}. {o.title}", "bold"), f" — {o.evidence}")


def _tables(view: CpuView) -> list[tuple[str, str, pd.DataFrame]]:
    """The Markdown's and the HTML's tables: title, first column, rows; an empty one left out."""
    return [(title, first, df) for title, first, df in (
        ("Operators per step, by self time", "operator", view.ops),
        ("Modules and ranges per step, by self time", "module / range", view.modules)) if len(df)]


def markdown(view: CpuView) -> list[str]:
    """The CPU section of the Markdown report, after the attribution's headline."""
    out = [f"<sub>{md_cell(NO_GPU)}</sub>", "",
           "Step latency ms (traced): " + _latency(view), ""]
    for title, first, df in _tables(view):
        out += [f"**{title}**", "", f"| {first} | " + " | ".join(COLUMNS) + " |", "|---|" + "---:|" * len(COLUMNS)]
        out += ["| " + " | ".join(md_cell(c) for c in row) + " |"
                for row in _rows(df)]  # names from the trace: cleaned (_rows), then no table-breaking character
        out.append("")
    for o in view.observations:
        out.append(f"- **{md_cell(o.title)}** — {md_cell(o.evidence)}; what to do: {md_cell(o.advice)}")
    return out + ([""] if view.observations else [])


def html(view: CpuView, cost: str = "") -> str:
    """The CPU section of the HTML report (the attribution's place): the Markdown's numbers,
    from the same row builder, every name from the trace escaped."""
    out = [f'<section class="pd-where"><p><b>{html_text(TITLE)}:</b> {html_text(headline(view, cost))}</p>',
           f'<p class="muted">{html_text(NO_GPU)}</p>',
           "<p>Step latency ms (traced): " + html_text(_latency(view)) + "</p>"]
    for title, first, df in _tables(view):
        out.append(f"<h3>{html_text(title)}</h3><table><tr><th>{html_text(first)}</th>"
                   + "".join(f"<th>{html_text(c)}</th>" for c in COLUMNS) + "</tr>")
        out += ["<tr>" + "".join(f"<td>{html_text(c)}</td>" for c in row) + "</tr>" for row in _rows(df)]
        out.append("</table>")
    if view.data_loading_ms:
        out.append(f'<p class="muted">DataLoader __next__: {value(view.data_loading_ms, "ms")} per step</p>')
    if view.observations:
        out.append("<ul>" + "".join(f"<li><b>{html_text(o.title)}</b> — {html_text(o.evidence)}; what to do: {html_text(o.advice)}</li>"
                                    for o in view.observations) + "</ul>")
    return "".join(out) + "</section>"
