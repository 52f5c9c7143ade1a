"""The findings in a terminal (rich): verdict, ranked failures with evidence and fixes,
advice, passed checks, and the checks that could not be evaluated (with how to collect).

``findings_renderable`` returns a rich renderable the CLI prints after its metric table;
``render`` returns plain text (for tests, logs and files).
"""

from __future__ import annotations

import io
from typing import Sequence

from rich.console import Console, Group, RenderableType
from rich.constrain import Constrain
from rich.padding import Padding
from rich.rule import Rule as HRule
from rich.table import Table
from rich.text import Text

from perfdoctor.analysis.metrics import Analysis
from perfdoctor.reports import attribution, bounds, common
from perfdoctor.reports.code import Code
from perfdoctor.reports.estimates import formula
from perfdoctor.reports import evidence as words
from perfdoctor.rules.engine import Finding
from perfdoctor.rules.evidence import Evidence
from perfdoctor.text import clean

SEVERITY_STYLE = {"critical": "bold white on red", "error": "bold red", "warning": "yellow", "info": "cyan"}


def _evidence_table(e: Evidence) -> RenderableType:
    t = Table(title=Text(clean(words.title(e))), title_justify="left", title_style="bold", show_edge=False, pad_edge=False)
    for col in e.columns:
        # Names from the trace are untrusted text: Text(...) never interprets rich markup.
        t.add_column(Text(clean(col)), overflow="fold")
    for row in e.rows:
        t.add_row(*(Text(clean(common.cell(v))) for v in row))
    parts: list[RenderableType] = [t] if e.rows else [Text(words.title(e), style="bold")]
    note = words.note(e)
    if note:
        parts.append(Text(note, style="dim"))
    return Group(*parts)


def _finding(f: Finding, analysis: Analysis, shown_before: dict[tuple[str, str], str], same: Sequence[Finding] = ()) -> RenderableType:
    head = Text()
    head.append(f"{f.rank}. ", style="bold")
    head.append(f"[{f.severity}] ", style=SEVERITY_STYLE.get(f.severity, ""))
    head.append(f"{f.rule_id}", style="bold")
    head.append(f" — {f.title}")
    lines: list[RenderableType] = [head]
    body = Text()
    body.append(f"{common.measured(f)}   target {common.condition(f)}  ", style="")
    body.append(f"[{f.threshold_origin}]", style="dim")
    lines.append(body)
    if common.context_values(f):
        lines.append(Text(common.context_values(f), style="dim"))
    if common.finding_reason(f):
        lines.append(Text(common.finding_reason(f), style="dim"))
    est = common.estimate_line(f, analysis)
    if est:
        lines.append(Text(f"Estimate: {est}", style="green"))
        lines.append(Text(f"  {formula(f.estimate)}", style="dim"))
    if common.no_estimate_line(f):
        lines.append(Text(common.no_estimate_line(f), style="dim"))
    named = {s.rule_id for s in same}
    if common.overlap_line(f) and not set(f.overlaps) <= named:  # else "Same cause" below says it
        lines.append(Text(f"  {common.overlap_line(f)}", style="dim"))
    if same:
        lines.append(_same_cause(same))
    lines.append(Text(f"Cite: {f.citation}", style="dim"))
    for e in f.evidence:
        owner = shown_before.get((f.rule_id, e.kind))
        lines.append(Text(f"{words.title(e)}: see {owner} above", style="dim") if owner else Padding(_evidence_table(e), (0, 0, 0, 2), expand=False))
    if f.remediation is not None:
        lines.append(Text("Fix:", style="bold"))
        for i, step in enumerate(f.remediation.steps, start=1):
            lines.append(Text(f"  {i}. {step}"))
        if f.remediation.snippet:
            lines.append(Code(f.remediation.snippet, indent=4))  # never in a Padding: it crops
    return Group(*lines, Text(""))


HEADING_WIDTH = 100


def heading(title: str) -> RenderableType:
    """A section rule, at most 100 columns: a console that is not a terminal is as wide as
    its longest line (:func:`perfdoctor.console.stdout_console`) and a rule would span it."""
    return Constrain(HRule(title, align="left"), width=HEADING_WIDTH)


VERDICT_STYLE = {"crashed": "bold white on red", "fail": "bold red", "inconclusive": "bold yellow", "pass": "bold green",
                 "not_evaluated": "bold yellow"}


def verdict_text(findings: Sequence[Finding], analysis: Analysis) -> Text:
    """The verdict line, styled: the first line ``analyze`` prints (a crash before anything)."""
    return Text(common.verdict_line(findings, analysis), style=VERDICT_STYLE[common.outcome(findings, analysis)])


def finding_line(f: Finding, analysis: Analysis, same: Sequence[Finding] = ()) -> Text:
    """A finding in one line: rank, severity, rule, title, what fixing it wins back, and the
    rules of the same cause."""
    est = common.estimate_line(f, analysis)
    also = f"; same cause: {', '.join(s.rule_id for s in same)}" if same else ""
    return Text.assemble(f"{f.rank}. ", (f"[{f.severity}] ", SEVERITY_STYLE.get(f.severity, "")), (f.rule_id, "bold"),
                         f" — {f.title}", (f" ({est})" if est else "", "green"), (also, "dim"))


def _same_cause(same: Sequence[Finding]) -> RenderableType:
    """The rules that share the lead's estimate: each named with its own measurement."""
    lines = [Text("Same cause, same estimate (one fix):", style="bold")]
    lines.extend(Text.assemble("  ", (s.rule_id, "bold"), f" — {s.title}: ", (f"{common.measured(s)}   target {common.condition(s)}", "dim"))
                 for s in same)
    return Group(*lines)


# The top findings --brief shows: what a reader acts on first.
BRIEF_TOP = 3


def brief_renderable(findings: Sequence[Finding], analysis: Analysis, command: str) -> RenderableType:
    """``--brief``: the verdict, where the step went (:mod:`perfdoctor.reports.attribution`),
    and the top three findings, one line each."""
    groups = common.causes(common.by_status(findings, "fail"))
    parts: list[RenderableType] = [verdict_text(findings, analysis), attribution.terminal(analysis)]
    parts.extend(finding_line(f, analysis, same) for f, same in groups[:BRIEF_TOP])
    if len(groups) > BRIEF_TOP:
        parts.append(Text(f"and {len(groups) - BRIEF_TOP} more causes: {clean(command)} (without --brief) shows all", style="dim"))
    if analysis.cpu is not None:  # a CPU-only run: what its breakdown shows, one line each
        from perfdoctor.reports import cpu

        parts.extend(cpu.observation_line(i, o) for i, o in enumerate(analysis.cpu.observations[:BRIEF_TOP], start=1))
    return Group(*parts)


def findings_renderable(findings: Sequence[Finding], analysis: Analysis, *, with_verdict: bool = True,
                        top: int | None = None) -> RenderableType:
    """Everything the findings part of `perfdoctor analyze` / `report` prints; ``with_verdict``
    False where the verdict was printed already, as analyze's first line. ``top``: only
    the first N failing findings in full, the rest one line each."""
    failing = common.by_status(findings, "fail")
    # The verdict, then where the step went (the attribution), before any finding; analyze
    # prints both itself, first, and passes with_verdict=False.
    parts: list[RenderableType] = ([verdict_text(findings, analysis), Text(""), attribution.terminal(analysis, blank_after=False), bounds.terminal(analysis)]
                                   if with_verdict else [])
    if with_verdict and analysis.cpu is not None:  # report: no summary before it, so the CPU breakdown here
        from perfdoctor.reports import cpu

        parts.append(cpu.terminal(analysis.cpu))
    groups = common.causes(failing)
    full = groups if top is None else groups[:top]
    shown_before = common.evidence_owner([f for f, _ in full])
    if failing:
        parts.append(heading("Findings, ranked by time recoverable per step"))
        for f, same in full:
            parts.append(_finding(f, analysis, shown_before, same))
        if len(full) < len(groups):
            parts.append(Text(f"Also failing (--top {len(groups)} shows them in full):", style="bold"))
            parts.extend(finding_line(f, analysis, same) for f, same in groups[len(full):])
            parts.append(Text(""))
    advice = common.by_status(findings, "advisory")
    if advice:
        parts.append(heading("Advice"))
        for f in advice:
            parts.append(Text.assemble((f"{f.rule_id}", "bold"), f" — {f.title}  ", (common.context_values(f) or common.measured(f), "dim")))
            for e in f.evidence:
                parts.append(Padding(_evidence_table(e), (0, 0, 0, 2), expand=False))
            if f.remediation:
                parts.extend(Text(f"  • {s}") for s in f.remediation.steps)
            parts.append(Text(f"  Cite: {f.citation}", style="dim"))
        parts.append(Text(""))
    passed = common.by_status(findings, "pass")
    if passed:
        # One paragraph, and a threshold's origin only where it is not the seed default (said once).
        seed = next((f.threshold_origin for f in passed if f.threshold_origin.startswith("seed default")), None)
        line = Text.assemble(("Passed checks", "bold"), f" (thresholds: {seed}, unless named): " if seed else ": ")
        for i, f in enumerate(passed):
            origin = "" if f.threshold_origin == seed else f" [{f.threshold_origin}]"
            line.append(("; " if i else "") + f"{f.rule_id} ({common.measured(f)} {common.condition(f)}{origin})")
        parts.extend([line, Text("")])
    missing = common.by_status(findings, "not_evaluated")
    if missing:
        parts.append(_not_evaluated(missing, analysis.cpu is not None))
    return Group(*parts)


def _not_evaluated(missing: Sequence[Finding], no_gpu: bool) -> RenderableType:
    """The checks that could not be evaluated, one row per cause; where no GPU ran, the
    checks of GPU work in one line (:func:`perfdoctor.reports.common.not_evaluated_view`)."""
    gpu, rows = common.not_evaluated_view(missing, no_gpu)
    lead: list[RenderableType] = []
    if gpu:
        lead.append(Text.assemble(("Not evaluated: no GPU ran", "bold"), f" ({len(gpu)} checks of GPU work): ", (", ".join(gpu), "dim")))
    if not rows:
        return Group(*lead)
    t = Table(title="Not evaluated (never counted as passed)", title_justify="left", show_edge=False)
    t.add_column("rule")
    t.add_column("why / how to collect", overflow="fold")
    for ids, reason in rows:
        t.add_row(Text(", ".join(ids)), Text(clean(reason), style="dim"))  # the title says "not evaluated"
    return Group(*lead, t)


def render(findings: Sequence[Finding], analysis: Analysis, *, width: int = 110, color: bool = False) -> str:
    """The terminal report as a string (ANSI colours only when ``color``)."""
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=color, color_system="standard" if color else None, highlight=False)
    console.print(findings_renderable(findings, analysis), crop=False)  # code is never cropped
    return buf.getvalue()
