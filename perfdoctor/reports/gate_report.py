"""What a gate says, for CI: gate.json, JUnit XML, a Markdown job summary, GitHub workflow
commands, and the terminal table (the model is :mod:`perfdoctor.compare.gate`). Each check's
sentence (:func:`message`) and the headline are worded here, once, for all of them.

Every check message can carry untrusted trace text: escaped for XML, Markdown, workflow
commands and rich markup by :mod:`perfdoctor.text`.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from perfdoctor.console import stdout_console
from perfdoctor.analysis.metrics import HIGHER_IS_BETTER, METRIC_UNITS
from perfdoctor.compare.comparability import Mismatch
from perfdoctor.compare.gate import EXIT_INCONCLUSIVE, SCHEMA, Budget, Check, GateResult
from perfdoctor.compare.processes import BudgetJudgement
from perfdoctor.io import dumps_json
from perfdoctor.reports.diff_report import (
    document as diff_document, fact, kernel_summary, mismatch_why, process_json, reason, refusal, sample_json,
    sample_reason, verdict,
)
from perfdoctor.reports.common import condition as pass_condition, finding_reason, unit_of
from perfdoctor.reports.format import md_cell
from perfdoctor.text import NEWLINE_MARK, github_data, github_property, interval, num, ratio, relative, setting, value
from perfdoctor.text import xml as xml_text

MAX_ANNOTATIONS = 10  # GitHub shows only the first few per step anyway; more is noise


def _xml_text(text: str) -> str:
    """Untrusted text made inert and XML 1.0-safe (see :mod:`perfdoctor.text`)."""
    return xml_text(text)


def document(result: GateResult) -> dict[str, Any]:
    """gate.json (schema perfdoctor.gate/1): the checks with their sentences, and the diff
    against the baseline as diff.json has it."""
    return {
        "schema": SCHEMA,
        "passed": result.passed,
        "inconclusive": [c.name for c in result.inconclusive],
        "exit_code": result.exit_code,
        "refused": refusal(result.refused) if result.refused is not None else None,
        "run": result.run,
        "baseline": result.baseline,
        "checks": [{"name": c.name, "kind": c.kind, "status": c.status, "message": message(c), "details": details(c)}
                   for c in result.checks],
        "warnings": warnings(result),
        "diff": diff_document(result.diff) if result.diff is not None else None,
    }


def headline(result: GateResult) -> str:
    """The gate's one line: NO VERDICT, NOTHING CHECKED, INCONCLUSIVE, PASSED or FAILED, with counts."""
    n = len(result.checks)
    if result.refused is not None:
        return f"perfdoctor gate: NO VERDICT ({refusal(result.refused)})"
    if not result.evaluated:
        return f"perfdoctor gate: NOTHING CHECKED (all {n} checks skipped: the runs lack what they need)"
    if not result.failed and result.inconclusive and result.inconclusive_policy != "pass":
        counted = " (counted as failed: --inconclusive fail)" if result.inconclusive_policy == "fail" else ""
        return (f"perfdoctor gate: INCONCLUSIVE ({len(result.inconclusive)} of {n} checks undecided: "
                f"{', '.join(c.name for c in result.inconclusive)}; more processes would decide){counted}")
    if result.passed:
        skipped = sum(c.status == "skip" for c in result.checks)
        extra = f", {skipped} skipped" if skipped else ""
        return f"perfdoctor gate: PASSED ({n - skipped} of {n} checks passed{extra})"
    return f"perfdoctor gate: FAILED ({len(result.failed)} of {n} checks failed: {', '.join(c.name for c in result.failed)})"


def warnings(result: GateResult) -> list[str]:
    """One line per fact that differs between baseline and run, each said once (a gate over
    ranks holds every rank's)."""
    out: list[str] = []
    for m in result.warnings:
        line = _warning(m)
        if line not in out:
            out.append(line)
    return out


def _warning(m: Mismatch) -> str:
    kind = "not comparable" if m.blocking or m.metrics else "not like for like"
    return f"{kind} — {m.field}: baseline {fact(m.before)}, run {fact(m.after)} ({mismatch_why(m)})"


def budget_text(b: Budget) -> str:
    """What a budget allows: ``fails if step_latency_ms_p99 rises by more than 5 %``."""
    way = "rises" if b.sign > 0 else "falls"
    size = f"{setting(b.amount)} %" if b.relative else f"{setting(b.amount)} {METRIC_UNITS[b.metric]}"
    return f"fails if {b.metric} {way} by more than {size}"


def details(c: Check) -> dict[str, Any]:
    """A check's numbers, as gate.json has them."""
    if c.kind == "rule":
        f = c.finding
        assert f is not None
        return {"rule": f.rule_id, "severity": f.severity, "metric": f.metric, "value": f.value,
                "comparator": f.comparator, "threshold": f.threshold, "citation": f.citation}
    b, m = c.budget, c.measured
    assert b is not None
    if m is None:  # not compared
        return {"metric": b.metric}
    out: dict[str, Any] = {
        "metric": b.metric,
        "measured_as": m.key if c.processes is None
        else f"{b.metric} per process, light pass (no tracer); geometric mean over processes",
        "budget": budget_text(b),
        "baseline": m.before,
        "value": m.after,
        "change": m.change,
        "change_rel": m.change_rel,
        "unit": m.unit,
    }
    if c.processes is not None:
        out.update(verdict=m.verdict, processes=process_json(c.processes))
    if c.significance is not None:
        out["significance"] = dict(sample_json(c.significance), sample=m.sample)
    return out


def judgement_text(j: BudgetJudgement, b: Budget) -> str:
    """A budget judged over processes: where the interval of the ratio lies against the bound."""
    i = j.interval
    ci = f"{interval(i.ratio, i.low, i.high, i.level)} over {i.n_before} vs {i.n_after} processes"
    if j.where == "beyond":
        return f"regressed past its budget: {ci}, all beyond {ratio(j.bound)} ({b.text})"
    if j.where == "within":
        return f"within budget: {ci}, all on the allowed side of {ratio(j.bound)} ({j.verdict})"
    more = f"about {j.needed} processes per side would decide it at this spread" if j.needed else "the ratio sits on the budget"
    return (f"{j.verdict}: {ci} straddles {ratio(j.bound)}; not failed, since the interval "
            f"does not lie beyond the budget ({more})")


def message(c: Check) -> str:
    """One sentence for a check: the numbers, and why this status."""
    return _rule_message(c) if c.kind == "rule" else _budget_message(c)


_ONE_SIDE = {
    "absent": "not measured in either run",
    "added": "added: measured in this run only, not in the baseline",
    "removed": "removed: measured in the baseline only, not in this run",
}


def _budget_message(c: Check) -> str:
    b, m = c.budget, c.measured
    assert b is not None
    if c.outcome == "not comparable":
        return f"{reason(c.why)}: the budget is not judged"
    assert m is not None
    if isinstance(c.why, BudgetJudgement):  # judged over processes
        return f"{b.metric} {judgement_text(c.why, b)} [per-process values, light timing pass, no tracer]"
    why = reason(c.why)
    if c.outcome in _ONE_SIDE:
        return f"{b.metric} {_ONE_SIDE[c.outcome]}" + (f" ({why})" if why else "")
    if c.outcome == "not finite":
        return (f"cannot evaluate: {b.metric} is not a finite number (baseline {m.before}, run {m.after}); "
                "failing closed")
    sign = "+" if b.sign > 0 else "-"
    change = f"{value(m.before, m.unit)} → {value(m.after, m.unit)}"
    if b.relative and m.before == 0:
        change += f" (baseline 0: relative change undefined; absolute change {num(m.change, signed=True)})"
        if c.outcome != "within":
            change += f" — any move from 0 exceeds a relative budget; use an absolute budget ({b.metric}:{sign}N) to allow some"
    elif b.relative:
        change += f" ({relative(m.change_rel, 2)}, budget {sign}{setting(b.amount)} %)"
    else:
        # 4 digits, as relative's 2 places: a change that fails the budget must not read as it
        change += f" ({num(m.change, signed=True, digits=4)}, budget {sign}{setting(b.amount)})"
    if m.key != b.metric:
        change += " [light timing pass, no tracer]"
    note = ""
    better = HIGHER_IS_BETTER.get(b.metric)
    if better is not None and (b.sign > 0) == better:
        note = f" Note: {'higher' if better else 'lower'} is better for {b.metric}, so this budget fails on an improvement."
    if why is not None:
        note += f" Note: {why.removeprefix('inconclusive — ')}."
    test = c.significance
    tested = f"{m.sample}: {sample_reason(test)}" if test is not None else ""
    if c.outcome == "within":
        return f"{b.metric} within budget: {change}.{note}"
    if c.outcome == "untested":
        return f"{b.metric} over budget: {change}; not tested for significance ({tested}).{note}"
    if c.outcome == "noise":
        return f"{b.metric} over budget but not a significant change ({tested}): {change}; treated as run-to-run noise.{note}"
    return f"{b.metric} regressed past its budget: {change}" + (f"; significant ({tested})" if test is not None else "") + f".{note}"


def _rule_message(c: Check) -> str:
    f = c.finding
    assert f is not None
    if c.outcome == "not_evaluated":
        return f"not evaluated: {finding_reason(f)}"
    if c.outcome not in ("pass", "fail", "not gating"):
        return f"advisory (no threshold): {f.title}"
    condition = (f"{f.metric} = {value(f.value, unit_of(f))}, passes when {pass_condition(f)}"
                 if f.value is not None and f.comparator is not None else "")
    if c.outcome == "pass":
        return f"{f.title}: {condition}"
    recovered = f" (fixing it should win back ~{value(f.recovered_ms, 'ms')} per step)" if f.recovered_ms else ""
    text = f"{f.title} [{f.severity}]: {condition}{recovered}"
    if c.outcome == "not gating":
        return f"not gating (severity {f.severity} < --min-severity {c.min_severity}): {text}"
    return text


def junit_xml(result: GateResult) -> str:
    """JUnit XML: one test suite, one test case per check (failure / skipped / pass)."""
    suite = ET.Element(
        "testsuite",
        name="perfdoctor gate",
        tests=str(len(result.checks)),
        failures=str(len(result.failed)),
        errors="0",
        skipped=str(sum(c.status in ("skip", "inconclusive") for c in result.checks)),
    )
    for c in result.checks:
        case = ET.SubElement(suite, "testcase", classname=f"perfdoctor.compare.gate.{c.kind}", name=_xml_text(c.name), time="0")
        if c.status == "fail":
            failure = ET.SubElement(case, "failure", message=_xml_text(message(c)), type=c.kind)
            failure.text = xml_text(dumps_json(details(c))).replace(NEWLINE_MARK, "\n")
        elif c.status in ("skip", "inconclusive"):  # undecided: not a failure, not a pass
            ET.SubElement(case, "skipped", message=_xml_text(message(c)))
        else:
            ET.SubElement(case, "system-out").text = _xml_text(message(c))
    root = ET.Element("testsuites", name="perfdoctor", tests=suite.get("tests"), failures=suite.get("failures"))
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def summary_markdown(result: GateResult) -> str:
    """The gate as Markdown for ``$GITHUB_STEP_SUMMARY`` or a PR comment."""
    icon = {"pass": "✅ pass", "fail": "❌ fail", "inconclusive": "⚠️ inconclusive", "skip": "⚪ skip"}
    head = "✅" if result.passed else "⚠️" if result.exit_code == EXIT_INCONCLUSIVE else "❌"
    out = [f"## {head} {md_cell(headline(result))}", ""]
    out.append(f"Run <code>{md_cell(result.run)}</code>" + (f" against baseline <code>{md_cell(result.baseline)}</code>" if result.baseline else ""))
    out.append("")
    if result.warnings:
        out += ["> [!WARNING]"] + [f"> {md_cell(w)}" for w in warnings(result)] + [""]
    out += ["| check | result | details |", "|---|---|---|"]
    # Failures first: the reader came for them.
    for c in sorted(result.checks, key=lambda c: {"fail": 0, "inconclusive": 1, "pass": 2, "skip": 3}[c.status]):
        out.append(f"| <code>{md_cell(c.name)}</code> | {icon[c.status]} | {md_cell(message(c))} |")
    if result.diff is not None:
        out += ["", f"**{md_cell(verdict(result.diff))}**", "", md_cell(kernel_summary(result.diff.kernels))]
    return "\n".join(out) + "\n"


_escape_data = github_data  # workflow-command escaping of untrusted text: perfdoctor.text
_escape_property = github_property


def github_annotations(result: GateResult) -> list[str]:
    """Workflow commands: one ``::error`` per failed check (at most MAX_ANNOTATIONS), and a
    ``::warning`` per comparability problem."""
    lines = [f"::warning title={_escape_property('perfdoctor: runs not like for like')}::{_escape_data(w)}" for w in warnings(result)]
    for c in result.failed[:MAX_ANNOTATIONS]:
        lines.append(f"::error title={_escape_property(c.name)}::{_escape_data(message(c))}")
    rest = len(result.failed) - MAX_ANNOTATIONS
    if rest > 0:
        lines.append(f"::notice title=perfdoctor gate::{rest} more failed checks: see the job summary")
    return lines


def print_result(result: GateResult, console=None) -> None:
    from rich.table import Table

    from perfdoctor.text import rich as escape

    console = console or stdout_console()
    for w in warnings(result):
        console.print(f"[bold red]WARNING[/] {escape(w)}")
    t = Table(title_justify="left")
    t.add_column("check")
    t.add_column("result")
    t.add_column("details")
    style = {"pass": "[green]pass[/]", "fail": "[bold red]FAIL[/]", "inconclusive": "[bold yellow]INCONCLUSIVE[/]", "skip": "[dim]skip[/]"}
    for c in result.checks:
        t.add_row(escape(c.name), style[c.status], escape(message(c)))
    console.print(t)
    color = "green" if result.passed else "yellow" if result.exit_code == EXIT_INCONCLUSIVE else "red"
    console.print(f"[bold {color}]{escape(headline(result))}[/]")
