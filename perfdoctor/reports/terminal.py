"""The findings in a terminal (rich): verdict, ranked failures with evidence and fixes,
advice, passed checks, and the checks that could not be evaluated (with how to collect).

``findings_renderable`` returns a rich renderable the CLI prints after its metric table;
``render`` returns plain text (for tests, logs and files).
"""

from __future__ import annotations

import io
from typing import Sequence

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.rule import Rule as HRule
from rich.table import Table
from rich.text import Text

from perfdoctor.analysis.metrics import Analysis
from perfdoctor.reports import attribution, common
from perfdoctor.reports.code import Code
from perfdoctor.rules.engine import Finding, verdict
from perfdoctor.rules.evidence import Evidence
from perfdoctor.text import clean

SEVERITY_STYLE = {"critical": "bold white on red", "error": "bold red", "warning": "yellow", "info": "cyan"}


def _evidence_table(e: Evidence) -> RenderableType:
    t = Table(title=Text(clean(e.title)), title_justify="left", title_style="bold", show_edge=False, pad_edge=False)
    for col in e.columns:
        # Names from the trace are untrusted text: Text(...) never interprets rich markup.
        t.add_column(Text(clean(col)), overflow="fold")
    for row in e.rows:
        t.add_row(*(Text(clean(v)) for v in row))
    parts: list[RenderableType] = [t] if e.rows else [Text(e.title, style="bold")]
    if e.note:
        parts.append(Text(e.note, style="dim"))
    return Group(*parts)


def _finding(f: Finding, analysis: Analysis, shown_before: dict[tuple[str, str], str]) -> RenderableType:
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
    if f.reason:
        lines.append(Text(f.reason, style="dim"))
    est = common.estimate_line(f, analysis)
    if est:
        lines.append(Text(f"Estimate: {est}", style="green"))
        lines.append(Text(f"  {f.estimate.formula}", style="dim"))
    if common.no_estimate_line(f):
        lines.append(Text(common.no_estimate_line(f), style="dim"))
    if common.overlap_line(f):
        lines.append(Text(f"  {common.overlap_line(f)}", style="dim"))
    lines.append(Text(f"Cite: {f.citation}", style="dim"))
    for e in f.evidence:
        owner = shown_before.get((f.rule_id, e.kind))
        lines.append(Text(f"{e.title}: see {owner} above", style="dim") if owner else Padding(_evidence_table(e), (0, 0, 0, 2)))
    if f.remediation is not None:
        lines.append(Text("Fix:", style="bold"))
        for i, step in enumerate(f.remediation.steps, start=1):
            lines.append(Text(f"  {i}. {step}"))
        if f.remediation.snippet:
            lines.append(Padding(Code(f.remediation.snippet), (0, 0, 0, 4)))
    return Group(*lines, Text(""))


def findings_renderable(findings: Sequence[Finding], analysis: Analysis) -> RenderableType:
    """Everything the findings part of `perfdoctor analyze` / `report` prints."""
    v = common.verdict_line(findings, analysis)
    failing = common.by_status(findings, "fail")
    style = {"fail": "bold red", "pass": "bold green", "not_evaluated": "bold yellow"}[verdict(findings)["status"]]
    parts: list[RenderableType] = [attribution.terminal(analysis), Text(v, style=style), Text("")]
    shown_before = common.evidence_owner(failing)
    if failing:
        parts.append(HRule("Findings, ranked by time recoverable per step", align="left"))
        parts.extend(_finding(f, analysis, shown_before) for f in failing)
    advice = common.by_status(findings, "advisory")
    if advice:
        parts.append(HRule("Advice", align="left"))
        for f in advice:
            parts.append(Text.assemble((f"{f.rule_id}", "bold"), f" — {f.title}  ", (common.context_values(f) or common.measured(f), "dim")))
            for e in f.evidence:
                parts.append(Padding(_evidence_table(e), (0, 0, 0, 2)))
            if f.remediation:
                parts.extend(Text(f"  • {s}") for s in f.remediation.steps)
            parts.append(Text(f"  Cite: {f.citation}", style="dim"))
        parts.append(Text(""))
    passed = common.by_status(findings, "pass")
    if passed:
        t = Table(title="Passed checks", title_justify="left", show_edge=False)
        for col in ("rule", "value", "target", "threshold from"):
            t.add_column(col, overflow="fold")
        for f in passed:
            t.add_row(Text(f.rule_id), Text(common.measured(f)), Text(common.condition(f)), Text(f.threshold_origin, style="dim"))
        parts.extend([t, Text("")])
    missing = common.by_status(findings, "not_evaluated")
    if missing:
        t = Table(title="Not evaluated (never counted as passed)", title_justify="left", show_edge=False)
        t.add_column("rule")
        t.add_column("why / how to collect", overflow="fold")
        for f in missing:
            t.add_row(Text(f.rule_id), Text(clean(f"not evaluated — {f.reason}"), style="dim"))
        parts.append(t)
    return Group(*parts)


def render(findings: Sequence[Finding], analysis: Analysis, *, width: int = 110, color: bool = False) -> str:
    """The terminal report as a string (ANSI colours only when ``color``)."""
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=color, color_system="standard" if color else None, highlight=False)
    console.print(findings_renderable(findings, analysis))
    return buf.getvalue()
