"""Render a :class:`perfdoctor.compare.diff.Diff` for a terminal (rich) or as Markdown (a PR comment).

Both renderings say the same things in the same order: "not comparable" first when the
runs are not (no verdict follows), the comparability warning (a diff across unlike runs
should not be read without it), what changed in kernels and copies per step, the latency
verdict, the metric table, the step statistics, the kernel diff, and the findings fixed or new.
Every name from a trace is untrusted text: escaped for rich markup and for Markdown.
"""

from __future__ import annotations

from typing import Any

from perfdoctor.analysis.metrics import jsonable
from perfdoctor.console import stdout_console
from perfdoctor.compare.comparability import Coverage, Mismatch, UnknownFact
from perfdoctor.compare.diff import SCHEMA, Diff, MetricChange, Missing, NotComparable
from perfdoctor.compare.kernels import KernelChange, KernelDiff
from perfdoctor.compare.processes import ProcessComparison, spread
from perfdoctor.compare.samples import LIGHT_SAMPLE, SAMPLE_UNITS
from perfdoctor.compare.stats import Comparison, LogRatioInterval, Why
from perfdoctor.reports.format import md_cell
from perfdoctor.text import count, duration_us, interval, num, percent, ratio, relative, setting, value

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


# --------------------------------------------------------------------------- reasons
#
# compare/ hands up numbers and reasons (a Why, a mismatch's field, where an interval lies);
# each becomes a sentence here, once, for the terminal, Markdown, diff.json and gate.json.

# Why a mismatched fact matters, by field: the window facts (compare.comparability.WINDOW_FIELDS)
# first, then the stack (COMPARABILITY_FIELDS).
MISMATCH_WHY = {
    "vendor": "different GPU vendors: the diff measures the hardware and its software stack, not your change",
    "world_size": "different world sizes: each rank does a different share of the job, not comparable",
    "workload": "different workload kinds: a training step and an inference step are different work (--workload sets one)",
    "step_kind": "the steps were found differently: the runs do not measure the same window (one side has no steps: use --step NAME)",
    "step_coverage": "the steps cover different fractions of the profiled span: ratios such as gpu_idle_ratio "
    "count different windows",
    "gpu": "different GPU models: the diff measures the hardware, not your change",
    "driver": "different NVIDIA drivers: launch latency and clocks can differ",
    "cuda_driver": "different CUDA driver versions: launch latency and kernels can differ",
    "cuda_runtime": "different CUDA runtimes: libraries pick different kernels",
    "torch": "different torch versions: operators and kernels can differ",
    "step_name": "different step ranges: the runs may not measure the same unit of work",
    "tokens_per_step": "different tokens per step: per-step numbers are not comparable",
}

ONE_PROCESS_NOTE = (
    "one process per side: process-to-process noise cannot be told apart from a change "
    "(perfdoctor run --repeat N gives a confidence interval over processes)"
)


def fact(v: Any) -> Any:
    """A side of a mismatch as the lines and diff.json show it: a step coverage worded, any
    other fact as it is."""
    if isinstance(v, Coverage):
        return f"{percent(v.fraction)} of the profiled span inside {v.steps} step{'s' if v.steps != 1 else ''}"
    return v


def mismatch_why(m: Mismatch) -> str:
    """Why a mismatch of this fact matters."""
    return MISMATCH_WHY[m.field]


def unknown_fact(u: UnknownFact) -> str:
    """``world_size: before 1, after unknown``."""
    return f"{u.field}: before {u.before if u.before is not None else 'unknown'}, after {u.after if u.after is not None else 'unknown'}"


def excluded(nc: NotComparable) -> str:
    """Why a metric is not compared (diff.json's ``not_comparable_metrics``): ``gpu differs``
    under a blocking mismatch, ``step_coverage differs: before X, after Y`` under a scoped one."""
    return "; ".join(f"{m.field} differs" if m.blocking else f"{m.field} differs: before {fact(m.before)}, after {fact(m.after)}"
                     for m in nc.mismatches)


def refusal(nc: NotComparable) -> str:
    """``not comparable: <field>: before X, after Y (why); ...`` for the whole diff; for one
    metric, ``not comparable: `` and :func:`excluded`."""
    if nc.metric is not None:
        return f"not comparable: {excluded(nc)}"
    return "not comparable: " + "; ".join(f"{m.field}: before {fact(m.before)}, after {fact(m.after)} ({mismatch_why(m)})"
                                          for m in nc.mismatches)


def sample_reason(c: Comparison) -> str:
    """One sentence a user reads: why a step sample's comparison has its verdict."""
    nb, na = c.n_before, c.n_after
    if c.why is Why.NO_SAMPLES:
        return f"inconclusive — no samples on the {'before' if nb == 0 else 'after'} side"
    if c.why is Why.SINGLE_STEP:
        return (f"inconclusive — need more steps: the {'before' if nb == 1 else 'after'} side has a single step, "
                "which has no spread, so noise cannot be told from change")
    if c.why is Why.TOO_FEW:
        return f"inconclusive — need more steps: {nb} before and {na} after, at least {c.min_samples} per side are needed for a test"
    assert c.p_value is not None
    if c.why is Why.NOT_SIGNIFICANT:
        return f"p = {num(c.p_value)} ≥ {setting(c.alpha)} (Mann-Whitney U, {nb} vs {na} samples)"
    if c.why is Why.SIGNIFICANT:
        return f"p = {num(c.p_value)} < {setting(c.alpha)} (Mann-Whitney U, {nb} vs {na} samples)"
    assert c.median_before and c.median_after
    moved = c.median_after / c.median_before - 1.0
    return (f"p = {num(c.p_value)} < {setting(c.alpha)} within the runs, but the median moved {relative(moved)}, "
            f"inside the run-to-run noise floor (a factor {ratio(1.0 + c.noise_floor)} either way)")


def _pair_kind(lockstep: bool) -> str:
    """How the two processes of a compared pair ran: at once taking turns, or one after the other."""
    return "lockstep" if lockstep else "interleaved"


def process_reason(c: ProcessComparison) -> str:
    """Why a comparison over processes has its verdict: too few processes, or the interval of
    the ratio after/before against 1."""
    i = c.interval
    if i is None:
        why = ONE_PROCESS_NOTE if min(len(c.before), len(c.after)) == 1 else "no process with steps on one side"
        return f"inconclusive — {why}"
    what = f"{i.n_before} {_pair_kind(c.lockstep)} pairs" if c.paired else f"{i.n_before} vs {i.n_after} processes"
    where = {"regressed": "lies above 1", "improved": "lies below 1"}.get(c.verdict, "contains 1")
    return f"{interval(i.ratio, i.low, i.high, i.level)} over {what}: the interval {where}"


def reason(r: Missing | Comparison | ProcessComparison | NotComparable | None) -> str | None:
    """Any reason compare/ hands up, as its sentence (None: no reason)."""
    if r is None:
        return None
    if isinstance(r, Missing):
        return f"{r.side}: {r.reason}" if r.side else r.reason
    if isinstance(r, Comparison):
        return sample_reason(r)
    if isinstance(r, ProcessComparison):
        return process_reason(r)
    return refusal(r)


def sample_json(c: Comparison) -> dict[str, Any]:
    """A step sample's comparison as diff.json and gate.json have it."""
    out: dict[str, Any] = {
        "n_before": c.n_before,
        "n_after": c.n_after,
        "median_before": c.median_before,
        "median_after": c.median_after,
        "p_value": c.p_value,
        "test": f"mann-whitney-u ({c.method})" if c.method else None,
        "verdict": c.verdict,
        "reason": sample_reason(c),
        "noise_floor": c.noise_floor,
    }
    if c.interval is not None:
        i = c.interval
        out["median_ratio"] = {"value": i.ratio, "low": i.low, "high": i.high, "level": i.level, "resamples": i.resamples}
    return out


def process_json(c: ProcessComparison) -> dict[str, Any]:
    """A metric compared over processes as diff.json and gate.json have it."""
    out: dict[str, Any] = {
        "metric": c.metric,
        "unit": "process",
        "before": spread(c.before),
        "after": spread(c.after),
        "verdict": c.verdict,
        "reason": process_reason(c),
        "test": f"paired t-interval on log ratios of {_pair_kind(c.lockstep)} process pairs" if c.paired
        else "welch t-interval on log per-process values",
    }
    if c.interval is not None:
        i = c.interval
        out["ratio"] = {"value": i.ratio, "low": i.low, "high": i.high, "level": i.level, "df": i.df, "se_log": i.se_log}
    return out


def document(diff: Diff) -> dict[str, Any]:
    """diff.json (schema perfdoctor.diff/1): the diff's numbers and reasons worded, its verdict
    line third after the labels (where diff.json has always had it), and the lines it leads with."""
    refused = diff.not_comparable()
    body = jsonable(
        {
            "comparable": diff.comparable,
            "not_comparable": refusal(refused) if refused is not None else None,
            "not_comparable_metrics": {k: excluded(nc) for k, nc in diff.not_comparable_metrics.items()},
            "mismatches": [{"field": m.field, "before": fact(m.before), "after": fact(m.after), "message": mismatch_why(m),
                            "blocking": m.blocking, "metrics": m.metrics} for m in diff.mismatches],
            "unknown_facts": [unknown_fact(u) for u in diff.unknown_facts],
            "facts": {"before": diff.facts_before, "after": diff.facts_after},
            "metrics": {m.key: dict(m.__dict__, reason=reason(m.reason)) for m in diff.metrics},
            "samples": {k: dict(sample_json(c), unit=SAMPLE_UNITS.get(k)) for k, c in diff.samples.items()},
            "kernels": diff.kernels.to_json(),
            "copies": [c.to_json() for c in diff.copies],
            "findings": diff.findings.to_json() if diff.findings else None,
            "processes": {k: process_json(c) for k, c in diff.processes.items()},
        }
    )
    head = {"schema": SCHEMA, "before": diff.before, "after": diff.after, "verdict": verdict(diff)}
    return {**head, **body, "lead": lead_lines(diff)}


def verdict(diff: Diff) -> str:
    """One line on step latency: the headline a PR comment starts with.

    Runs that are not comparable get no verdict: the line says why. Over processes when
    both runs are repeated bundles (``perfdoctor run --repeat``); else on
    :attr:`~perfdoctor.compare.diff.Diff.latency_sample`. A bundle of one process says it
    cannot tell process noise from a change.
    """
    refused = diff.not_comparable()
    if refused is not None:
        return f"no verdict — {refusal(refused)}"
    p50 = diff.processes.get("step_latency_ms_p50")
    if p50 is not None and p50.repeated:
        return f"step latency p50 over processes (light pass, no tracer): {p50.verdict}, {process_reason(p50)}"
    note = f"; {ONE_PROCESS_NOTE}" if p50 is not None else ""
    return _step_verdict(diff) + note


def _step_verdict(diff: Diff) -> str:
    name = diff.latency_sample
    what = "step latency (light pass, no tracer)" if name == LIGHT_SAMPLE else "step latency"
    c = diff.samples.get(name)
    if c is None:
        return f"{what}: not measured (no steps on one side)"
    if c.verdict == "inconclusive":
        return f"{what}: {sample_reason(c)}"
    if c.verdict == "no significant change":
        return f"{what}: no significant change ({sample_reason(c)})"
    word = "improved" if c.verdict == "lower" else "regressed"
    i = c.interval
    size = f" ({interval(i.ratio, i.low, i.high, i.level)})" if i else ""
    return f"{what} {word}: median {value(c.median_before, 'ms')} → {value(c.median_after, 'ms')}{size}, {sample_reason(c)}"


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
    lines = [_mismatch_line(m) for m in diff.mismatches if not m.blocking and not m.metrics]
    lines += [f"unknown {unknown_fact(u)}" for u in diff.unknown_facts]
    return lines


def not_comparable_lines(diff: Diff) -> list[str]:
    """One line per mismatch that makes numbers not comparable: blocking ones (no verdict),
    then those that exclude some metrics (which ones, said)."""
    lines = [_mismatch_line(m) for m in diff.blocking]
    for m in diff.scoped:
        keys = [k for k in m.metrics if k in diff.not_comparable_metrics]
        if keys:
            lines.append(f"{_mismatch_line(m)}; not compared: {', '.join(keys)}")
    return lines


def _mismatch_line(m: Mismatch) -> str:
    return f"{m.field}: before {fact(m.before)!s}, after {fact(m.after)!s} — {mismatch_why(m)}"


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
