"""The terminal summary of one analysis: what the GPU spent its time on.

A metric table (value, unit, source, or why it is absent), the step latency
distribution, the top kernels per step and the largest gaps.
"""

from __future__ import annotations

import numpy as np
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from perfdoctor.breakdown import largest_gaps, normalize_kernel_name, top_kernels
from perfdoctor.metrics import Analysis, Metric
from perfdoctor.text import rich as esc  # untrusted text (paths, names) in rich markup


def format_value(m: Metric) -> str:
    """A metric's value for people: ratios as %, big counts with separators."""
    v = m.value
    if v is None:
        return "—"
    if m.unit == "ratio":
        return f"{v * 100:.2f} %"
    if m.unit == "bytes":
        return _bytes(v)
    if m.unit == "count":
        return f"{v:,.0f}" if float(v).is_integer() else f"{v:,.2f}"
    if abs(v) >= 100:
        return f"{v:,.1f}"
    return f"{v:.4g}"


def _bytes(v: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if v >= scale:
            return f"{v / scale:.2f} {unit}"
    return f"{v:.0f} B"


def metric_table(analysis: Analysis) -> Table:
    t = Table(title="Metrics", title_justify="left", show_lines=False)
    t.add_column("metric")
    t.add_column("value", justify="right")
    t.add_column("unit")
    t.add_column("source / why absent", overflow="fold")
    for key, m in analysis.metrics.items():
        if m.value is None:
            t.add_row(key, "—", m.unit, Text(m.reason or "absent", style="dim"))
        else:
            where = m.source + (f" ({m.note})" if m.note else "")
            t.add_row(key, format_value(m), "" if m.unit in ("ratio", "bytes") else m.unit, Text(where))
    return t


def latency_table(analysis: Analysis) -> Table | None:
    w = analysis.steps.table
    w = w[w["gpu_end_ns"].notna()]
    if w.empty:
        return None
    lat = (w["gpu_end_ns"].astype("int64") - w["host_start_ns"]).to_numpy(np.float64) / 1e6
    gpu = (w["gpu_end_ns"] - w["gpu_start_ns"]).astype("int64").to_numpy(np.float64) / 1e6
    t = Table(title=f"Step latency ({len(lat)} steps of {esc(repr(analysis.steps.name))})", title_justify="left")
    for col in ("", "min", "p50", "p90", "p99", "max"):
        t.add_column(col, justify="right")
    for label, v in (("latency ms", lat), ("GPU window ms", gpu)):
        t.add_row(label, *(f"{x:.3f}" for x in (v.min(), *np.percentile(v, [50, 90, 99]), v.max())))
    return t


def kernels_table(analysis: Analysis, n: int = 10) -> Table | None:
    k = top_kernels(analysis, n)
    if k.empty:
        return None
    t = Table(title="Top kernels by time per step", title_justify="left")
    t.add_column("kernel", overflow="fold", max_width=70)
    t.add_column("count/step", justify="right")
    t.add_column("ms/step", justify="right")
    t.add_column("mean µs", justify="right")
    t.add_column("share", justify="right")
    for r in k.itertuples():
        t.add_row(Text(r.kernel), f"{r.count_per_step:.1f}", f"{r.ms_per_step:.3f}", f"{r.mean_us:.1f}", f"{r.share * 100:.1f} %")
    return t


def gaps_table(analysis: Analysis, n: int = 5) -> Table | None:
    g = largest_gaps(analysis, n)
    if g.empty:
        return None
    t = Table(title="Largest GPU idle gaps", title_justify="left")
    t.add_column("gap µs", justify="right")
    t.add_column("step", justify="right")
    t.add_column("after kernel", overflow="fold", max_width=40)
    t.add_column("host calls during the gap", overflow="fold", max_width=40)
    for r in g.itertuples():
        t.add_row(
            f"{r.gap_ns / 1e3:.1f}",
            "—" if r.step < 0 else str(r.step),
            Text(normalize_kernel_name(r.before)),
            Text(r.host_calls),
        )
    return t


def render_summary(analysis: Analysis, console: Console) -> None:
    """Print the analysis summary: header, metrics, latency, kernels, gaps."""
    dev = analysis.device.get("name") or "unknown device"
    src = analysis.profile.meta.get("source", "?")
    steps = analysis.steps
    head = f"[bold]{esc(analysis.profile.meta.get('path', ''))}[/] — {esc(src)} trace, {esc(dev)}"
    if steps.name:
        head += f", {steps.count} steps of [bold]{esc(steps.name)}[/]"
    else:
        head += f" — [yellow]{esc(steps.reason)}[/]"
    console.print(head)
    parts = [metric_table(analysis), latency_table(analysis), kernels_table(analysis), gaps_table(analysis)]
    console.print(Group(*(p for p in parts if p is not None)))
