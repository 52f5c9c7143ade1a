"""What a gate says, for CI: JUnit XML, a Markdown job summary, GitHub workflow commands,
and the terminal table (the model is :mod:`perfdoctor.compare.gate`).

Every check message can carry untrusted trace text: escaped for XML, Markdown, workflow
commands and rich markup by :mod:`perfdoctor.text`.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from perfdoctor.console import stdout_console
from perfdoctor.compare.gate import EXIT_INCONCLUSIVE, GateResult
from perfdoctor.io import dumps_json
from perfdoctor.reports.diff_report import document as diff_document, kernel_summary, verdict
from perfdoctor.reports.format import md_cell
from perfdoctor.text import NEWLINE_MARK, github_data, github_property
from perfdoctor.text import xml as xml_text

MAX_ANNOTATIONS = 10  # GitHub shows only the first few per step anyway; more is noise


def _xml_text(text: str) -> str:
    """Untrusted text made inert and XML 1.0-safe (see :mod:`perfdoctor.text`)."""
    return xml_text(text)


def document(result: GateResult) -> dict[str, Any]:
    """gate.json (schema perfdoctor.gate/1): the checks, and the diff against the baseline as
    diff.json has it."""
    doc = result.to_json()  # its "diff" is the diff's numbers; diff.json words them
    if result.diff is not None:
        doc["diff"] = diff_document(result.diff)
    return doc


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
            failure = ET.SubElement(case, "failure", message=_xml_text(c.message), type=c.kind)
            failure.text = xml_text(dumps_json(c.details)).replace(NEWLINE_MARK, "\n")
        elif c.status in ("skip", "inconclusive"):  # undecided: not a failure, not a pass
            ET.SubElement(case, "skipped", message=_xml_text(c.message))
        else:
            ET.SubElement(case, "system-out").text = _xml_text(c.message)
    root = ET.Element("testsuites", name="perfdoctor", tests=suite.get("tests"), failures=suite.get("failures"))
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def summary_markdown(result: GateResult) -> str:
    """The gate as Markdown for ``$GITHUB_STEP_SUMMARY`` or a PR comment."""
    icon = {"pass": "✅ pass", "fail": "❌ fail", "inconclusive": "⚠️ inconclusive", "skip": "⚪ skip"}
    head = "✅" if result.passed else "⚠️" if result.exit_code == EXIT_INCONCLUSIVE else "❌"
    out = [f"## {head} {md_cell(result.headline())}", ""]
    out.append(f"Run <code>{md_cell(result.run)}</code>" + (f" against baseline <code>{md_cell(result.baseline)}</code>" if result.baseline else ""))
    out.append("")
    if result.warnings:
        out += ["> [!WARNING]"] + [f"> {md_cell(w)}" for w in result.warnings] + [""]
    out += ["| check | result | details |", "|---|---|---|"]
    # Failures first: the reader came for them.
    for c in sorted(result.checks, key=lambda c: {"fail": 0, "inconclusive": 1, "pass": 2, "skip": 3}[c.status]):
        out.append(f"| <code>{md_cell(c.name)}</code> | {icon[c.status]} | {md_cell(c.message)} |")
    if result.diff is not None:
        out += ["", f"**{md_cell(verdict(result.diff))}**", "", md_cell(kernel_summary(result.diff.kernels))]
    return "\n".join(out) + "\n"


_escape_data = github_data  # workflow-command escaping of untrusted text: perfdoctor.text
_escape_property = github_property


def github_annotations(result: GateResult) -> list[str]:
    """Workflow commands: one ``::error`` per failed check (at most MAX_ANNOTATIONS), and a
    ``::warning`` per comparability problem."""
    lines = [f"::warning title={_escape_property('perfdoctor: runs not like for like')}::{_escape_data(w)}" for w in result.warnings]
    for c in result.failed[:MAX_ANNOTATIONS]:
        lines.append(f"::error title={_escape_property(c.name)}::{_escape_data(c.message)}")
    rest = len(result.failed) - MAX_ANNOTATIONS
    if rest > 0:
        lines.append(f"::notice title=perfdoctor gate::{rest} more failed checks: see the job summary")
    return lines


def print_result(result: GateResult, console=None) -> None:
    from rich.table import Table

    from perfdoctor.text import rich as escape

    console = console or stdout_console()
    for w in result.warnings:
        console.print(f"[bold red]WARNING[/] {escape(w)}")
    t = Table(title_justify="left")
    t.add_column("check")
    t.add_column("result")
    t.add_column("details")
    style = {"pass": "[green]pass[/]", "fail": "[bold red]FAIL[/]", "inconclusive": "[bold yellow]INCONCLUSIVE[/]", "skip": "[dim]skip[/]"}
    for c in result.checks:
        t.add_row(escape(c.name), style[c.status], escape(c.message))
    console.print(t)
    color = "green" if result.passed else "yellow" if result.exit_code == EXIT_INCONCLUSIVE else "red"
    console.print(f"[bold {color}]{escape(result.headline())}[/]")
