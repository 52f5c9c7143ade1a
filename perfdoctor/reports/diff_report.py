"""Render a :class:`perfdoctor.compare.diff.Diff` for a terminal (rich) or as Markdown (a PR comment).

Both renderings say the same things in the same order: "not comparable" first when the
runs are not (no verdict follows), the comparability warning (a diff across unlike runs
should not be read without it), what changed in kernels and copies per step, the latency
verdict, the metric table, the step statistics, the kernel diff, and the findings fixed or new.
Every name from a trace is untrusted text: escaped for rich markup and for Markdown.
"""

from __future__ import annotations

from typing import Any

from perfdoctor.console import stdout_console
from perfdoctor.compare.diff import SCHEMA, Diff, MetricChange
from perfdoctor.compare.kernels import KernelChange, KernelDiff
from perfdoctor.compare.processes import ONE_PROCESS_NOTE
from perfdoctor.compare.samples import LIGHT_SAMPLE, SAMPLE_UNITS
from perfdoctor.compare.stats import LogRatioInterval
from perfdoctor.reports.format import md_cell
from perfdoctor.text import count, duration_us, interval, num, ratio, relative, value

KERNEL_ROWS = 15  # the kernel table shows the largest movers; JSON has every row
LEAD_LINES = 3  # a headline, not a table: the full kernel and copy tables follow
MIN_COUNT_CHANGE = 0.5  # per step: a count that moved less than this is rounding, not a change
NAME_WIDTH = 70


def fmt_change(m: MetricChange) -> str:
    """Relative change when defined; the absolute change when the baseline is 0."""
    if m.change is None:
        return {"added": "added", "removed": "removed"}.get(m.status, "—")
    if m.change == 0:
        return "0"
    if m.change_rel is not None:
        return relative(m.change_rel)
    return f"{num(m.change, signed=True)} (from 0)"


def direction(m: MetricChange) -> str:
    return {True: "higher is better", False: "lower is better"}.get(m.higher_is_better, "—")


def assessment(m: MetricChange) -> str:
    """The verdict a reader acts on: a tested verdict when the metric has step samples."""
    if m.verdict:
        return m.verdict
    if m.status in ("better", "worse"):
        return f"{m.status} (single value, not tested)"
    return m.status


def short(name: str, width: int = NAME_WIDTH) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def document(diff: Diff) -> dict[str, Any]:
    """diff.json (schema perfdoctor.diff/1): the diff's numbers, its verdict line third after
    the labels (where diff.json has always had it: a dict keeps a key's first place), and the
    lines it leads with."""
    head = {"schema": SCHEMA, "before": diff.before, "after": diff.after, "verdict": verdict(diff)}
    return {**head, **diff.to_json(), "lead": lead_lines(diff)}


def verdict(diff: Diff) -> str:
    """One line on step latency: the headline a PR comment starts with.

    Runs that are not comparable get no verdict: the line says why. Over processes when
    both runs are repeated bundles (``perfdoctor run --repeat``); else on
    :attr:`~perfdoctor.compare.diff.Diff.latency_sample`. A bundle of one process says it
    cannot tell process noise from a change.
    """
    refusal = diff.not_comparable()
    if refusal is not None:
        return f"no verdict — {refusal}"
    p50 = diff.processes.get("step_latency_ms_p50")
    if p50 is not None and p50.repeated:
        return f"step latency p50 over processes (light pass, no tracer): {p50.verdict}, {p50.reason}"
    note = f"; {ONE_PROCESS_NOTE}" if p50 is not None else ""
    return _step_verdict(diff) + note


def _step_verdict(diff: Diff) -> str:
    name = diff.latency_sample
    what = "step latency (light pass, no tracer)" if name == LIGHT_SAMPLE else "step latency"
    c = diff.samples.get(name)
    if c is None:
        return f"{what}: not measured (no steps on one side)"
    if c.verdict == "inconclusive":
        return f"{what}: {c.reason}"
    if c.verdict == "no significant change":
        return f"{what}: no significant change ({c.reason})"
    word = "improved" if c.verdict == "lower" else "regressed"
    i = c.interval
    size = f" ({interval(i.ratio, i.low, i.high, i.level)})" if i else ""
    return f"{what} {word}: median {value(c.median_before, 'ms')} → {value(c.median_after, 'ms')}{size}, {c.reason}"


def lead_lines(diff: Diff) -> list[str]:
    """Sentences for the kernel and copy count changes whose count moved by at least half a
    unit per step, largest time change first. A kernel that vanished or appeared shows the
    time it took ("-1 kernel `x` per step (4 µs)"); a count that moved shows the change of
    time ("+4,590 device-to-device copies per step (+12.3 ms)")."""
    per = diff.kernels.per
    items: list[tuple[float, str]] = []
    for r in diff.kernels.rows:
        dn = r.count_after - r.count_before
        if abs(dn) < MIN_COUNT_CHANGE:
            continue
        noun = "kernel" if abs(round(dn)) == 1 else "kernels"
        if r.status in ("appeared", "vanished"):
            took = duration_us(r.time_us_after if r.status == "appeared" else r.time_us_before)
        else:
            took = duration_us(r.time_change_us, signed=True)
        items.append((abs(r.time_change_us), f"{count(dn, signed=True)} {noun} `{r.name}` per {per} ({took})"))
    for c in diff.copies:
        if abs(c.count_change) < MIN_COUNT_CHANGE:
            continue
        label = c.label if abs(round(c.count_change)) != 1 else c.label.replace("copies", "copy").replace("memsets", "memset")
        items.append((abs(c.time_change_us), f"{count(c.count_change, signed=True)} {label} per {per} ({duration_us(c.time_change_us, signed=True)})"))
    items.sort(key=lambda t: -t[0])
    return [text for _, text in items[:LEAD_LINES]]


def kernel_summary(k: KernelDiff) -> str:
    """One line: ``launches/step 863 → 1; kernels/step 863 (15 names) → 880 (16 names); 0 vanished, 1 appeared``."""
    launches = ""
    if k.launches_before is not None and k.launches_after is not None:
        launches = f"launches/step {count(k.launches_before)} → {count(k.launches_after)}; "
    text = (
        f"{launches}kernels/{k.per} {count(k.kernels_before)} ({k.names_before} names) → "
        f"{count(k.kernels_after)} ({k.names_after} names); "
        f"{len(k.vanished)} vanished, {len(k.appeared)} appeared"
    )
    if k.vendors:  # across vendors: what was matched by family, and what could not be matched
        b, a = k.vendors
        text += f"; {b} → {a}: kernel names differ across vendors, {len(k.matched_by_family)} families matched by family and op"
        if k.unmatched:
            text += f", {len(k.unmatched)} kernel names could not be matched"
    return text


def comparability_lines(diff: Diff) -> list[str]:
    """The non-blocking mismatches and the unknown facts (blocking ones: :func:`not_comparable_lines`)."""
    lines = [
        f"{m.field}: before {m.before!s}, after {m.after!s} — {m.message}"
        for m in diff.mismatches if not m.blocking and not m.metrics
    ]
    lines += [f"unknown {u}" for u in diff.unknown_facts]
    return lines


def not_comparable_lines(diff: Diff) -> list[str]:
    """One line per mismatch that makes numbers not comparable: blocking ones (no verdict),
    then those that exclude some metrics (which ones, said)."""
    lines = [f"{m.field}: before {m.before!s}, after {m.after!s} — {m.message}" for m in diff.blocking]
    for m in diff.scoped:
        keys = [k for k in m.metrics if k in diff.not_comparable_metrics]
        if keys:
            lines.append(f"{m.field}: before {m.before!s}, after {m.after!s} — {m.message}; not compared: {', '.join(keys)}")
    return lines


def not_comparable_title(diff: Diff) -> str | None:
    """``not comparable: no verdict`` (blocking), ``not comparable: gpu_idle_ratio, ...``, or None."""
    if diff.blocking:
        return "not comparable: no verdict"
    if diff.not_comparable_metrics:
        return "not comparable: " + ", ".join(diff.not_comparable_metrics)
    return None


def _sample_rows(diff: Diff) -> list[tuple[str, str, str, str, str, str]]:
    rows = []
    for name, c in diff.samples.items():
        unit = SAMPLE_UNITS.get(name, "")
        p = num(c.p_value) if c.p_value is not None else "—"
        rows.append(
            (
                name,
                f"{c.n_before} / {c.n_after}",
                f"{value(c.median_before, unit)} → {value(c.median_after, unit)}",
                _ratio_cell(c.interval),
                p,
                _short_verdict(c),
            )
        )
    return rows


def _short_verdict(c) -> str:
    if c.verdict != "inconclusive":
        return c.verdict
    if min(c.n_before, c.n_after) == 0:
        return "inconclusive — no samples"
    if min(c.n_before, c.n_after) == 1:
        return "inconclusive — a single step has no spread"
    return f"inconclusive — need more steps (< 5 per side)"


PROCESS_TITLE = "over processes (Welch t-interval on log per-process values; 95 % CI of the ratio after/before)"


def _process_rows(diff: Diff) -> list[list[str]]:
    """One row per process metric of repeated bundles: processes, values, ratio [CI], verdict."""
    rows = []
    for key, c in diff.processes.items():
        values = f"{' '.join(num(v) for v in c.before)} → {' '.join(num(v) for v in c.after)}"
        rows.append([key, f"{len(c.before)} / {len(c.after)}", values, _ratio_cell(c.interval), c.verdict])
    return rows


def _ratio_cell(i: LogRatioInterval | None) -> str:
    """An after/before ratio and its interval in a table whose header names the level."""
    return f"{ratio(i.ratio)}x [{ratio(i.low)}, {ratio(i.high)}]" if i else "—"


def _kernel_times(r: KernelChange) -> tuple[str, str]:
    """A kernel row's time per step before → after, and its change: durations as the lead
    lines word them."""
    return f"{duration_us(r.time_us_before)} → {duration_us(r.time_us_after)}", duration_us(r.time_change_us, signed=True)


def render_markdown(diff: Diff) -> str:
    """The diff as GitHub-flavoured Markdown (fits a PR comment or a step summary)."""
    out = [f"## perfdoctor diff", "", f"**before** <code>{md_cell(diff.before)}</code> → **after** <code>{md_cell(diff.after)}</code>", ""]
    warnings = comparability_lines(diff)
    title = not_comparable_title(diff)
    if title:
        out += ["> [!CAUTION]", f"> **{md_cell(title)}.** These runs measure different things:"]
        out += [f"> - {md_cell(w)}" for w in not_comparable_lines(diff)]
        out.append("")
    if diff.mismatches and warnings:
        out += ["> [!WARNING]", "> **These runs are not like for like.** Read every number below with that in mind:"]
        out += [f"> - {md_cell(w)}" for w in warnings]
        out.append("")
    elif warnings:
        out += ["Comparability could not be fully checked:"] + [f"- {md_cell(w)}" for w in warnings] + [""]
    lead = lead_lines(diff)
    if lead:
        out += ["**What changed:**", ""] + [f"- {_md_lead(line)}" for line in lead] + [""]
    out += [f"**{md_cell(verdict(diff))}**", ""]

    out += ["### Metrics", "", "| metric | before | after | change | direction | verdict |", "|---|---|---|---|---|---|"]
    for m in diff.metrics:
        if m.status == "absent":
            continue
        out.append(
            f"| `{m.key}` | {value(m.before, m.unit)} | {value(m.after, m.unit)} | {fmt_change(m)} "
            f"| {direction(m)} | {md_cell(assessment(m))} |"
        )
    absent = [m.key for m in diff.metrics if m.status == "absent"]
    if absent:
        out += ["", f"Not measured on either side: {', '.join(f'`{k}`' for k in absent)}."]

    if any(c.repeated for c in diff.processes.values()):
        out += ["", "### Over processes", "", PROCESS_TITLE[len("over processes ("):-1] + ".", ""]
        out += ["| metric | processes before / after | per-process values (ms) | ratio [95 % CI] | verdict |", "|---|---|---|---|---|"]
        out += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in _process_rows(diff)]

    out += ["", "### Step statistics", "", "Mann-Whitney U (two-sided) and a bootstrap 95 % interval of median(after)/median(before).", ""]
    out += ["| sample | n before / after | median | ratio [95 % CI] | p | verdict |", "|---|---|---|---|---|---|"]
    for row in _sample_rows(diff):
        out.append("| " + " | ".join(md_cell(c) for c in row) + " |")

    k = diff.kernels
    out += ["", "### Kernels", "", md_cell(kernel_summary(k)), ""]
    out += [f"| kernel (normalized) | status | count/{k.per} | time/{k.per} | Δ time |", "|---|---|---|---|---|"]
    for r in k.rows[:KERNEL_ROWS]:
        out.append(
            f"| <code>{md_cell(short(r.name))}</code> | {r.status} | {count(r.count_before)} → {count(r.count_after)} "
            f"| {' | '.join(_kernel_times(r))} |"
        )
    if len(k.rows) > KERNEL_ROWS:
        out.append(f"\n{len(k.rows) - KERNEL_ROWS} more kernel names in the JSON output.")

    out += ["", "### Findings", ""]
    if diff.findings is None:
        out.append("Rules did not run on both sides; no findings to compare.")
    else:
        out += [f"- {line}" for line in map(md_cell, findings_lines(diff))]
    return "\n".join(out) + "\n"


def _md_lead(line: str) -> str:
    """A lead line with its kernel name in code: ``-1 kernel `x` per step`` shows ``x`` as code."""
    head, sep, rest = line.partition(" `")
    if not sep:
        return md_cell(line)
    name, _, tail = rest.partition("` ")
    return f"{md_cell(head)} <code>{md_cell(short(name))}</code> {md_cell(tail)}"


def findings_lines(diff: Diff) -> list[str]:
    f = diff.findings
    assert f is not None
    lines = [
        f"fixed: {', '.join(f.fixed) or 'none'}",
        f"new: {', '.join(f.new) or 'none'}",
        f"still failing: {', '.join(f.persisting) or 'none'}",
    ]
    if f.unknown:
        lines.append(f"failing on one side, not evaluated on the other: {', '.join(f.unknown)}")
    return lines


def print_terminal(diff: Diff, console=None) -> None:
    """The diff as rich tables on the terminal."""
    from rich import box
    from rich.panel import Panel
    from rich.table import Table

    from perfdoctor.text import rich as escape

    console = console or stdout_console()
    console.print(f"[bold]perfdoctor diff[/]  {escape(diff.before)} → {escape(diff.after)}")
    warnings = comparability_lines(diff)
    title = not_comparable_title(diff)
    if title:
        console.print(Panel("\n".join(escape(w) for w in not_comparable_lines(diff)), title=escape(title), border_style="bold red", expand=False))
    if diff.mismatches and warnings:
        console.print(
            Panel("\n".join(escape(w) for w in warnings), title="NOT LIKE FOR LIKE", border_style="bold red", expand=False)
        )
    elif warnings:
        console.print("[yellow]comparability not fully checked:[/] " + escape("; ".join(warnings)))
    lead = lead_lines(diff)
    if lead:
        console.print("[bold]what changed:[/] " + escape("; ".join(lead)))
    console.print(f"[bold]{escape(verdict(diff))}[/]")

    colors = {"improved": "green", "better": "green", "regressed": "red", "worse": "red"}
    t = Table(title="metrics", title_justify="left", box=box.SIMPLE_HEAD)
    t.add_column("metric (↑/↓ better)", overflow="fold")
    for col in ("before", "after", "change"):
        t.add_column(col, justify="right", overflow="fold")
    t.add_column("verdict", min_width=22)
    for m in diff.metrics:
        if m.status == "absent":
            continue
        said = assessment(m)
        color = colors.get(said.split(" ")[0], "")
        arrow = {True: " ↑", False: " ↓"}.get(m.higher_is_better, "")
        t.add_row(m.key + arrow, value(m.before, m.unit), value(m.after, m.unit), fmt_change(m),
                  f"[{color}]{escape(said)}[/]" if color else escape(said))
    console.print(t)

    if any(c.repeated for c in diff.processes.values()):
        pt = Table(title=PROCESS_TITLE, title_justify="left", box=box.SIMPLE_HEAD)
        for col in ("metric", "processes", "per-process values (ms)", "ratio [CI]"):
            pt.add_column(col, overflow="fold")
        pt.add_column("verdict", min_width=22)
        for row in _process_rows(diff):
            pt.add_row(*(escape(c) for c in row))
        console.print(pt)

    s = Table(title="step statistics (Mann-Whitney U; bootstrap 95% CI of median after/before)",
              title_justify="left", box=box.SIMPLE_HEAD)
    s.add_column("sample", overflow="fold")
    for col in ("n", "median", "ratio [CI]", "p"):
        s.add_column(col, overflow="fold")
    s.add_column("verdict", min_width=22)
    for row in _sample_rows(diff):
        s.add_row(*(escape(c) for c in row))
    console.print(s)

    k = diff.kernels
    kt = Table(title=f"kernels: {escape(kernel_summary(k))}", title_justify="left", box=box.SIMPLE_HEAD)
    kt.add_column("kernel (normalized)", overflow="fold")
    kt.add_column("status")
    for col in (f"count/{k.per}", f"time/{k.per}", "Δ time"):
        kt.add_column(col, justify="right", overflow="fold")
    for r in k.rows[:KERNEL_ROWS]:
        kt.add_row(escape(r.name), r.status,  # whole: the column folds on a terminal
                   f"{count(r.count_before)} → {count(r.count_after)}", *_kernel_times(r))
    console.print(kt)
    if diff.findings is not None:
        console.print("[bold]findings[/] (rules on both runs)")
        for line in findings_lines(diff):
            console.print(f"  {escape(line)}")
