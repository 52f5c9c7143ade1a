"""The findings as GitHub-flavoured Markdown, sized for a pull-request comment.

Failures come first with their number, estimate and fix; evidence tables and code sit in
``<details>`` blocks so the comment stays short until someone opens them. Text from the
trace (kernel and range names, paths) is HTML-escaped: GitHub renders inline HTML, and a
kernel name such as ``foo<float>`` would otherwise vanish, or worse, inject markup.
"""

from __future__ import annotations

from typing import Sequence

from perfdoctor.analysis.metrics import Analysis
from perfdoctor.reports import attribution, bounds, common
from perfdoctor.reports.format import md_cell, md_text
from perfdoctor.reports.estimates import formula
from perfdoctor.reports import evidence as words
from perfdoctor.reports.summary import trace_window_lines, uneven_steps_lines, workload_lines
from perfdoctor.rules.engine import Finding
from perfdoctor.rules.evidence import Evidence
from perfdoctor.text import clean_block

MAX_CHARS = 60_000  # GitHub rejects comments over 65,536 characters


def _table(e: Evidence) -> list[str]:
    out = [f"**{md_cell(words.title(e))}**", ""]
    if e.rows:
        out.append("| " + " | ".join(md_cell(c) for c in e.columns) + " |")
        out.append("|" + "---|" * len(e.columns))
        out.extend("| " + " | ".join(md_cell(common.cell(v)) for v in row) + " |" for row in e.rows)
        out.append("")
    note = words.note(e)
    if note:
        out += [f"_{md_text(note)}_", ""]
    return out


def _snippet(code: str) -> list[str]:
    code = clean_block(code)
    fence = "````" if "```" in code else "```"
    return [f"{fence}python", code, fence]


def _finding(f: Finding, analysis: Analysis, shown_before: dict[tuple[str, str], str]) -> list[str]:
    out = [f"### {f.rank}. `{f.rule_id}` — {md_text(f.title)} ({f.severity})", ""]
    out.append(f"- **Measured:** {md_text(common.measured(f))} — target {md_cell(common.condition(f))} ({md_text(f.threshold_origin)})")
    if common.context_values(f):
        out.append(f"- **Also:** {md_text(common.context_values(f))}")
    if common.finding_reason(f):
        out.append(f"- **Note:** {md_text(common.finding_reason(f))}")
    est = common.estimate_line(f, analysis)
    if est:
        out.append(f"- **Estimate:** {md_text(est)}. _{md_text(formula(f.estimate))}_")
    if common.no_estimate_line(f):
        out.append(f"- **Estimate:** none. {md_text(common.estimate_reason(f))}")
    if common.overlap_line(f):
        out.append(f"- {md_text(common.overlap_line(f))}")
    out.append(f"- **Cite:** {md_text(f.citation)}")
    if f.remediation:
        out.append("- **Fix:**")
        out.extend(f"  {i}. {md_text(s)}" for i, s in enumerate(f.remediation.steps, start=1))
    out.append("")
    details: list[str] = []
    for e in f.evidence:
        owner = shown_before.get((f.rule_id, e.kind))
        details += [f"_{md_cell(words.title(e))}: see `{owner}` above._", ""] if owner else _table(e)
    if f.remediation and f.remediation.snippet:
        details += _snippet(f.remediation.snippet) + [""]
    if details:
        out += ["<details><summary>Evidence and code</summary>", "", *details, "</details>", ""]
    return out


def render(findings: Sequence[Finding], analysis: Analysis) -> str:
    """The Markdown report."""
    failing = common.by_status(findings, "fail")
    icon = {"crashed": "💥", "fail": "❌", "inconclusive": "⚠️", "pass": "✅", "not_evaluated": "⚠️"}[common.outcome(findings, analysis)]
    out = [
        "## perfdoctor findings",
        "",
        f"{icon} **{md_text(common.verdict_line(findings, analysis))}**",
        "",
        f"<sub>{md_cell(common.source_line(analysis))}</sub>",
        f"<sub>step time: {md_cell(analysis.time_source)}</sub>",
        *[f"<sub>{md_cell(line)}</sub>" for line in uneven_steps_lines(analysis) + trace_window_lines(analysis)],
        *[f"<sub>{md_cell(line)}</sub>" for line in workload_lines(analysis)],
        "",
        *attribution.markdown(analysis),
        *bounds.markdown(analysis),
    ]
    shown_before = common.evidence_owner(failing)
    for f in failing:
        out += _finding(f, analysis, shown_before)
    advice = common.by_status(findings, "advisory")
    if advice:
        out += ["### Advice", ""]
        for f in advice:
            out.append(f"- `{f.rule_id}` — {md_text(f.title)}: {md_text(common.context_values(f) or common.measured(f))}")
            if f.remediation:
                out.extend(f"  - {md_text(s)}" for s in f.remediation.steps)
            for e in f.evidence:
                out += [""] + ["  " + line if line else "" for line in _table(e)]
            out.append(f"  - _Cite: {md_text(f.citation)}_")
        out.append("")
    passed = common.by_status(findings, "pass")
    if passed:
        out += ["<details><summary>Passed checks (" + str(len(passed)) + ")</summary>", "",
                "| rule | value | target | threshold from |", "|---|---|---|---|"]
        out += [f"| `{f.rule_id}` | {md_cell(common.measured(f))} | {md_cell(common.condition(f))} | {md_cell(f.threshold_origin)} |" for f in passed]
        out += ["", "</details>", ""]
    missing = common.by_status(findings, "not_evaluated")
    if missing:
        gpu, rows = common.not_evaluated_view(missing, analysis.cpu is not None)
        out += ["<details><summary>Not evaluated (" + str(len(missing)) + ") — never counted as passed</summary>", ""]
        if gpu:
            out += [f"No GPU ran: {len(gpu)} checks of GPU work not evaluated: " + ", ".join(f"`{i}`" for i in gpu), ""]
        if rows:
            out += ["| rule | why / how to collect |", "|---|---|"]
            out += ["| " + ", ".join(f"`{i}`" for i in ids) + f" | {md_cell(reason)} |" for ids, reason in rows]
        out += ["", "</details>", ""]
    doc = "\n".join(out)
    if len(doc) > MAX_CHARS:
        # Keep the comment postable: cut at a line boundary and say so.
        doc = doc[: doc.rfind("\n", 0, MAX_CHARS)] + "\n\n_(truncated to fit a comment; see report.html / findings.json)_\n"
    return doc
