"""The terminal summary of one analysis: what the GPU spent its time on.

A header (the steps, how they were found, where step time comes from), the metric table
(value, unit, source, or why it is absent), the step latency distribution, the top
kernels per step and the largest gaps — every table read from the analysis's timeline
(:mod:`perfdoctor.analysis.timeline`), so it agrees with the findings below it. The largest-gaps
table is the rules' evidence table (:func:`perfdoctor.rules.evidence.largest_gaps`); when
a finding prints it, the summary points there instead of printing it twice.
"""

from __future__ import annotations

from typing import AbstractSet as Set, Sequence

import numpy as np
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from perfdoctor.analysis.metrics import FASTER_TRACE, Analysis, another_regime
from perfdoctor.analysis.steady import in_flight
from perfdoctor.analysis.steps import no_trace
from perfdoctor.reports.common import fmt_metric
from perfdoctor.text import clean, count, num, percent, times, value
from perfdoctor.text import rich as esc  # untrusted text in rich markup (a table title)


def metric_table(analysis: Analysis, named_below: Set[str] = frozenset()) -> Table:
    """The present metrics, each with its source, less those the latency table shows
    (:func:`latency_table` names them); the absent ones in one caption, less those a
    not-evaluated check names as missing (``named_below``: said there, with why). Where no GPU
    ran, the CPU section says once that the GPU metrics are absent."""
    shown = set(_latency_keys(analysis))
    t = Table(title="Metrics", title_justify="left", show_edge=False)
    t.add_column("metric")
    t.add_column("value", justify="right")
    t.add_column("source / why absent", overflow="fold")
    absent = [key for key, m in analysis.metrics.items() if m.value is None]
    here = [key for key in absent if key not in named_below]
    if absent and analysis.cpu is None:  # one line, not a row each: the reasons (how to collect) are said once, under Not evaluated
        t.caption = f"absent, not zero: {', '.join(here) or 'none other'}" + (
            f"; {len(absent) - len(here)} more under 'Not evaluated' below" if len(here) < len(absent) else "")
        t.caption_justify = "left"
    for key, m in analysis.metrics.items():
        if m.value is not None and key not in shown:
            where = m.source + (f" ({m.note})" if m.note else "")
            t.add_row(key, fmt_metric(m), Text(where))
    return t


# The latency table's statistics that are metrics too: (row, statistic) -> metric key.
LATENCY_METRICS = {("critical path ms", "p50"): ("step_latency_ms_p50", "traced_step_latency_ms_p50"),
                   ("critical path ms", "p90"): ("step_latency_ms_p90",), ("critical path ms", "p99"): ("step_latency_ms_p99",),
                   ("GPU window ms", "p50"): ("step_gpu_ms_p50",)}


def _latency_stats(analysis: Analysis) -> dict[str, dict[str, float]]:
    """Per row of the latency table, min, p50, p90, p99 and max (ms); empty without GPU work."""
    w = analysis.timeline.with_gpu
    if w.empty:
        return {}
    rows = {"critical path ms": w["critical_path_ns"].to_numpy(np.float64) / 1e6,
            "GPU window ms": (w["gpu_end_ns"] - w["gpu_start_ns"]).astype("int64").to_numpy(np.float64) / 1e6,
            "GPU busy ms": w["busy_ns"].to_numpy(np.float64) / 1e6}
    return {label: dict(zip(("min", "p50", "p90", "p99", "max"), (v.min(), *np.percentile(v, [50, 90, 99]), v.max())))
            for label, v in rows.items()}


def _latency_keys(analysis: Analysis) -> dict[str, tuple[str, str]]:
    """The metrics whose value is a cell of the latency table (a light pass's step time is
    not: it is its own measurement), with that cell."""
    stats = _latency_stats(analysis)
    keys = {}
    for (row, stat), names in LATENCY_METRICS.items():
        for key in names:
            v = analysis.value(key)
            if stats and v is not None and np.isclose(v, stats[row][stat], rtol=1e-9, atol=0):
                keys[key] = (row, stat)
    return keys


def latency_table(analysis: Analysis) -> Table | None:
    """Per-step critical-path time and GPU window of the traced steps (the timeline's step
    table); a row names the metrics that are its cells."""
    stats = _latency_stats(analysis)
    if not stats:
        return None
    keys = _latency_keys(analysis)
    n = len(analysis.timeline.with_gpu)
    t = Table(title=f"Traced step latency ({n} steps of {esc(repr(analysis.steps.name))})", title_justify="left", show_edge=False)
    for col in ("", "min", "p50", "p90", "p99", "max", "metrics"):
        t.add_column(col, justify="left" if col == "metrics" else "right")
    for label, v in stats.items():
        named = ", ".join(f"{k} = {stat}" for k, (row, stat) in keys.items() if row == label)
        t.add_row(label, *(num(x) for x in v.values()), Text(named, style="dim"))
    return t


def kernels_table(analysis: Analysis, n: int = 10) -> Table | None:
    k = analysis.timeline.kernels.head(n)
    if k.empty:
        return None
    t = Table(title="Top kernels by time per step", title_justify="left", show_edge=False)
    t.add_column("kernel", overflow="fold", max_width=70)
    t.add_column("family")
    t.add_column("count/step", justify="right")
    t.add_column("ms/step", justify="right")
    t.add_column("mean µs", justify="right")
    t.add_column("share", justify="right")
    for r in k.itertuples():
        t.add_row(Text(r.kernel), r.family, count(r.per_step), num(r.ms_per_step), num(r.mean_ns / 1e3), percent(r.share))
    return t


def gaps_table(analysis: Analysis) -> Table | None:
    """The largest gaps: the rules' evidence table, so there is one gap table and one algorithm."""
    from perfdoctor.reports.terminal import _evidence_table
    from perfdoctor.rules.evidence import largest_gaps

    ev = largest_gaps(analysis)
    if not ev.rows:
        return None
    return _evidence_table(ev)


def serving_lines(analysis: Analysis) -> list[str]:
    """Serving steps (vLLM/SGLang names): per kind, steps, tokens (from the names), tokens/s
    and ms per token over the traced critical-path time (:func:`perfdoctor.analysis.serving.totals`)."""
    from perfdoctor.analysis import serving

    if analysis.steps.name != serving.STEP_NAME or analysis.steps.count == 0:
        return []
    t = analysis.timeline.steps
    cp = t["critical_path_ns"].astype("float64").fillna(0.0).to_numpy()
    tot = serving.totals(serving.throughput(analysis.steps.table, cp))
    parts = []
    for kind, v in tot.items():
        if kind == "all" or not v["steps"]:
            continue
        rate = f", {value(v['tokens_per_s'], 'tokens/s')}, {value(v['ms_per_token'], 'ms')}/token" if np.isfinite(v["tokens_per_s"]) else ""
        parts.append(f"{kind} {v['steps']} steps, {count(v['tokens'])} tokens{rate}")
    return [f"serving (traced): {'; '.join(parts)}"] if parts else []


def workload_lines(analysis: Analysis) -> list[str]:
    """The workload with its evidence ("workload: training (152 backward ops, ...)") and,
    for a trace of a CUDA-graph capture (or without recognised launches), what that means.
    Raw text: callers clean or escape it (names come from traces)."""
    lines = []
    w = getattr(analysis, "workload", None)
    if w is not None:
        ev = ", ".join(w.evidence)
        lines.append(f"workload: {w.kind}" + (f" ({ev})" if ev else ""))
    lines.extend(serving_lines(analysis))
    g = getattr(analysis, "graph_state", None)
    if g is not None and g.kind in ("capture", "capture+replay", "no-launches") and g.message:
        lines.append(f"graphs: {g.message}")
    return lines


# The median and the mean step further apart than this: the report gives both. Below the 5 %
# a user's check of a median against a mean timer allows (train_loop.py without workers on
# the H200: median 320.4 ms, mean 304.5, the program's own 297.7).
UNEVEN = 0.03


def uneven_steps_lines(analysis: Analysis) -> list[str]:
    """The mean step beside the median when they part by more than UNEVEN: a program's own
    "ms per iteration" is a timer around its loop, a mean (1 / ``steps_per_s``), and on
    uneven steps (a training loop that waits for its DataLoader every few iterations: 47 ms
    steps and 150-190 ms ones, on the H200) the median is not what that timer reads. Only
    for the light pass's steps: the program's timer runs untraced too (a trace's steps are
    stretched by its tracer, and few)."""
    p50, rate = analysis.value("step_latency_ms_p50"), analysis.value("steps_per_s")
    light, series = analysis.light, analysis.light_series
    if light is None or not p50 or not rate:
        return []
    mean = 1e3 / rate
    if light.threads is not None and series is not None and series.steps is not None:
        at_once = float(np.median(in_flight(light.host_start_ns, light.gpu_end_ns)[series.steps]))
        if at_once > 1:
            # a pool's requests: each its own time, the rate all of them together
            cpus = f" on {count(light.cpus)} CPUs" if light.cpus else ""
            return [f"steps at once: {num(at_once)} (median, on {count(np.unique(light.threads).size)} threads{cpus}): "
                    f"each step takes the median {value(p50, 'ms')}; 1 / steps_per_s ({value(mean, 'ms')}) is the interval "
                    "between steps, no step's time"]
    if abs(mean / p50 - 1) <= UNEVEN:
        return []
    return [f"uneven steps: median {value(p50, 'ms')}, mean {value(mean, 'ms')} (1 / steps_per_s): "
            "a timer around the whole loop reads the mean"]


def trace_window_lines(analysis: Analysis) -> list[str]:
    """A warning when the traced steps ran much faster than the untraced ones, or far slower
    than a tracer makes them: the breakdowns below describe the window, which the light
    pass's steady state is not."""
    ratio = analysis.metrics.get("profiler_overhead_ratio")
    if ratio is None or ratio.value is None or not another_regime(ratio.value):
        return []
    traced, light = analysis.value("traced_step_latency_ms_p50"), analysis.value("step_latency_ms_p50")
    why = ("a producer had run ahead, a backlog drained, late work ran back to back" if ratio.value < FASTER_TRACE else
           "more than a tracer adds: a slow stretch, another process's load, a warm-up the light pass had left behind")
    waited = _light_cpu_wait_ms(analysis)
    if ratio.value < FASTER_TRACE and waited is not None and light and waited >= CONTENDED_SHARE * light:
        # a datasets.map over a BERT on a shared CPU: 8.76 ms of its 25.4 ms steps waited, and
        # the window (14.1 ms) ran with less load; no producer ran ahead
        why = (f"the light pass's steps waited for a CPU, median {value(waited, 'ms')} of its {value(light, 'ms')}: another "
               "process on its cores; the window ran with less load")
    return [f"trace window: its steps took {times(ratio.value)} the untraced steps' time (p50 {value(traced, 'ms')} "
            f"against {value(light, 'ms')}): the traced steps are not the steady state the light pass timed ({why}), so "
            "the breakdowns describe the window; perfdoctor run --warmup N traces later steps"]


# The light pass's median wait for a CPU, against its p50, from which a traced window faster
# than the untraced steps is said to have run with less load than the light pass
CONTENDED_SHARE = 0.2


def _light_cpu_wait_ms(analysis: Analysis) -> float | None:
    """The median over the light pass's steady steps of their thread's wait for a CPU (ms),
    None where the run noted none."""
    light, series = analysis.light, analysis.light_series
    if light is None or series is None or light.cpu_wait_ns is None or series.steps is None or not series.steps.size:
        return None
    return float(np.median(light.cpu_wait_ns[series.steps])) / 1e6


def header_lines(analysis: Analysis) -> list[str]:
    """How the steps were found, where step time comes from, and what to watch out for."""
    lines = [f"step time: {analysis.time_source}"]  # how the steps were found: the head line says (render_summary)
    lines.extend(uneven_steps_lines(analysis))
    lines.extend(trace_window_lines(analysis))
    lines.extend(workload_lines(analysis))
    first = analysis.first_step_note()
    if first:
        lines.append(f"note: {first}")
    idle = analysis.metrics.get("gpu_idle_ratio")
    if idle is not None and idle.note and "corrected" in idle.note:
        lines.append(f"idle: {idle.note}")
    return lines


def render_summary(analysis: Analysis, console: Console, gaps_shown_by: str | None = None,
                   named_below: Set[str] = frozenset()) -> None:
    """Print the analysis summary: header, metrics, latency, kernels, gaps (where no GPU ran:
    metrics, then the CPU breakdown, :mod:`perfdoctor.reports.cpu`).

    ``gaps_shown_by``: the finding that will print the largest-gaps table below; the summary
    then points to it rather than printing the same table twice. ``named_below``: metrics a
    not-evaluated check below names as missing (:func:`metric_table`).
    """
    dev = analysis.device.get("name") or "unknown device"
    src = analysis.profile.origin.source or "?"
    steps = analysis.steps
    # Text, not markup, and every untrusted string cleaned: names and paths come from traces.
    head = Text()
    head.append(clean(analysis.profile.origin.path or ""), style="bold")
    # a run bundle whose passes left no trace is no "bundle trace" (steps.reason says why)
    head.append(f" — {'run bundle' if no_trace(analysis.profile) else clean(src) + ' trace'}, {clean(dev)}")
    if steps.name:
        head.append(f", {steps.count} steps of ")
        head.append(clean(steps.name), style="bold")
        head.append(f" — {clean(steps.how or 'found')}")
    else:
        head.append(f" — {clean(steps.reason)}", style="yellow")
    console.print(head)
    for line in header_lines(analysis):
        console.print(Text(clean(line), style="dim"))
    if analysis.cpu is not None:
        from perfdoctor.reports import cpu

        console.print(Group(metric_table(analysis, named_below), cpu.terminal(analysis.cpu)))
        return
    parts = [metric_table(analysis, named_below), latency_table(analysis), kernels_table(analysis)]
    if gaps_shown_by is None:
        parts.append(gaps_table(analysis))
    # Where a finding shows the largest gaps, its evidence table is their one place.
    console.print(Group(*(p for p in parts if p is not None)))


def gaps_owner(findings: Sequence) -> str | None:
    """The first printed finding (failing or advisory) whose evidence has the largest gaps."""
    for f in findings:
        if f.status in ("fail", "advisory") and "largest_gaps" in f.evidence_kinds:
            return f.rule_id
    return None
