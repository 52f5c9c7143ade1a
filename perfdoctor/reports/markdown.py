"""The findings as GitHub-flavoured Markdown, sized for a pull-request comment.

Failures come first with their number, estimate and fix; evidence tables and code sit in
``<details>`` blocks so the comment stays short until someone opens them. Text from the
trace (kernel and range names, paths) is HTML-escaped: GitHub renders inline HTML, and a
kernel name such as ``foo<float>`` would otherwise vanish, or worse, inject markup.
"""

from __future__ import annotations

from html import escape
from typing import Sequence

from perfdoctor.analysis.metrics import Analysis
from perfdoctor.reports import attribution, bounds, common
from perfdoctor.reports.summary import workload_lines
from perfdoctor.rules.engine import Finding
from perfdoctor.rules.evidence import Evidence
from perfdoctor.text import clean, clean_block

MAX_CHARS = 60_000  # GitHub rejects comments over 65,536 characters


def cell(value: object) -> str:
    """One table cell: escaped, no pipes or newlines that would break the table."""
    return escape(clean(value), quote=False).replace("|", "&#124;").replace("`", "&#96;")


def text(value: object) -> str:
    """Running text from the trace or a pack: escaped, markdown emphasis characters neutralised."""
    return cell(value).replace("*", "\\*").replace("_", "\\_")


def _table(e: Evidence) -> list[str]:
    out = [f"**{cell(e.title)}**", ""]
    if e.rows:
        out.append("| " + " | ".join(cell(c) for c in e.columns) + " |")
        out.append("|" + "---|" * len(e.columns))
        out.extend("| " + " | ".join(cell(v) for v in row) + " |" for row in e.rows)
        out.append("")
    if e.note:
        out += [f"_{text(e.note)}_", ""]
    return out


def _snippet(code: str) -> list[str]:
    code = clean_block(code)
    fence = "````" if "```" in code else "```"
    return [f"{fence}python", code, fence]


def _finding(f: Finding, analysis: Analysis, shown_before: dict[tuple[str, str], str]) -> list[str]:
    out = [f"### {f.rank}. `{f.rule_id}` — {text(f.title)} ({f.severity})", ""]
    out.append(f"- **Measured:** {text(common.measured(f))} — target {cell(common.condition(f))} ({text(f.threshold_origin)})")
    if common.context_values(f):
        out.append(f"- **Also:** {text(common.context_values(f))}")
    if f.reason:
        out.append(f"- **Note:** {text(f.reason)}")
    est = common.estimate_line(f, analysis)
    if est:
        out.append(f"- **Estimate:** {text(est)}. _{text(f.estimate.formula)}_")
    if common.no_estimate_line(f):
        out.append(f"- **Estimate:** none. {text(f.estimate_reason)}")
    if common.overlap_line(f):
        out.append(f"- {text(common.overlap_line(f))}")
    out.append(f"- **Cite:** {text(f.citation)}")
    if f.remediation:
        out.append("- **Fix:**")
        out.extend(f"  {i}. {text(s)}" for i, s in enumerate(f.remediation.steps, start=1))
    out.append("")
    details: list[str] = []
    for e in f.evidence:
        owner = shown_before.get((f.rule_id, e.kind))
        details += [f"_{cell(e.title)}: see `{owner}` above._", ""] if owner else _table(e)
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
        f"{icon} **{text(common.verdict_line(findings, analysis))}**",
        "",
        f"<sub>{cell(common.source_line(analysis))}</sub>",
        f"<sub>step time: {cell(analysis.time_source)}</sub>",
        *[f"<sub>{cell(line)}</sub>" for line in workload_lines(analysis)],
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
            out.append(f"- `{f.rule_id}` — {text(f.title)}: {text(common.context_values(f) or common.measured(f))}")
            if f.remediation:
                out.extend(f"  - {text(s)}" for s in f.remediation.steps)
            for e in f.evidence:
                out += [""] + ["  " + line if line else "" for line in _table(e)]
            out.append(f"  - _Cite: {text(f.citation)}_")
        out.append("")
    passed = common.by_status(findings, "pass")
    if passed:
        out += ["<details><summary>Passed checks (" + str(len(passed)) + ")</summary>", "",
                "| rule | value | target | threshold from |", "|---|---|---|---|"]
        out += [f"| `{f.rule_id}` | {cell(common.measured(f))} | {cell(common.condition(f))} | {cell(f.threshold_origin)} |" for f in passed]
        out += ["", "</details>", ""]
    missing = common.by_status(findings, "not_evaluated")
    if missing:
        gpu, rows = common.not_evaluated_view(missing, analysis.cpu is not None)
        out += ["<details><summary>Not evaluated (" + str(len(missing)) + ") — never counted as passed</summary>", ""]
        if gpu:
            out += [f"No GPU ran: {len(gpu)} checks of GPU work not evaluated: " + ", ".join(f"`{i}`" for i in gpu), ""]
        if rows:
            out += ["| rule | why / how to collect |", "|---|---|"]
            out += ["| " + ", ".join(f"`{i}`" for i in ids) + f" | {cell(reason)} |" for ids, reason in rows]
        out += ["", "</details>", ""]
    doc = "\n".join(out)
    if len(doc) > MAX_CHARS:
        # Keep the comment postable: cut at a line boundary and say so.
        doc = doc[: doc.rfind("\n", 0, MAX_CHARS)] + "\n\n_(truncated to fit a comment; see report.html / findings.json)_\n"
    return doc
