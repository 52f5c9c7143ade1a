"""Commands for the rules and the findings report, mounted by ``perfdoctor.cli``:

    app.add_typer(rules_app, name="rules")       # perfdoctor rules list | explain ID
    app.command("report")(report_command)        # perfdoctor report PATH --format ...

Bad input raises :class:`~perfdoctor.errors.UsageError` (one line, exit 2, printed by
``perfdoctor.cli.main``).
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from perfdoctor.console import finite_option, note, report_load_warnings, warn
from perfdoctor.errors import UsageError
from perfdoctor.io import check_outputs, write_text
from perfdoctor.text import clean
from perfdoctor.rules.engine import PREDICATES, TOP_FINDING, RuleSet, load_rules
from perfdoctor.rules.estimates import ESTIMATES
from perfdoctor.rules.signals import KNOWN_INPUTS, SIGNALS

FORMATS = ("terminal", "md", "html", "json")

rules_app = typer.Typer(help="The rules perfdoctor checks: list them, explain one.", no_args_is_help=True)

RULES_OPTION = typer.Option(None, "--rules", help="Extra rule pack (TOML); repeatable, later packs override rules by id.")
THRESHOLD_OPTION = typer.Option(None, "--threshold", help="Override a threshold: RULE_ID=VALUE (e.g. dram-bandwidth=0.8); repeatable.")


def _load(rules: Optional[List[Path]], threshold: Optional[List[str]]) -> RuleSet:
    return load_rules(rules or (), threshold or ())


@rules_app.command("list")
def list_rules(
    rules: Optional[List[Path]] = RULES_OPTION,
    threshold: Optional[List[str]] = THRESHOLD_OPTION,
) -> None:
    """Every rule: its pass condition, severity and citation."""
    ruleset = _load(rules, threshold)
    t = Table(title=Text(clean(f"{len(ruleset)} rules from {', '.join(ruleset.packs)}")), title_justify="left")
    for col in ("id", "severity", "passes when", "citation"):
        t.add_column(col, overflow="fold")
    for r in ruleset:
        t.add_row(r.id, r.severity, r.condition(), Text(r.citation))
    Console().print(t)


@rules_app.command("explain")
def explain_rule(
    rule_id: str = typer.Argument(..., help="Rule id, e.g. memory-bubbles (see `perfdoctor rules list`)."),
    rules: Optional[List[Path]] = RULES_OPTION,
    threshold: Optional[List[str]] = THRESHOLD_OPTION,
) -> None:
    """Everything about one rule: what it measures, its threshold and where it comes from, the fix."""
    r = _load(rules, threshold).get(rule_id)
    c = Console()
    c.print(Text(f"{r.id} — {r.title}", style="bold"))
    if r.description:
        c.print(Text(r.description))
    c.print(Text.assemble(("passes when: ", "bold"), r.condition(), (f"   [{r.threshold_origin}]" if r.threshold_origin else "", "dim")))
    c.print(Text.assemble(("severity: ", "bold"), r.severity, ("   defined in: ", "bold"), r.origin))
    for key in r.metrics + r.show:
        role = "reads" if key in r.metrics else "shows"
        meaning = SIGNALS[key][2] if key in SIGNALS else "defined in the metric contract (docs: metrics.md)"
        c.print(Text(f"  {role} {key} [{KNOWN_INPUTS[key]}]: {meaning}"))
    if len(r.metrics) > 1:
        c.print(Text(f"  the first of {', '.join(r.metrics)} that was measured is compared", style="dim"))
    c.print(Text.assemble(("citation: ", "bold"), r.citation))
    if r.collect:
        c.print(Text.assemble(("collect with: ", "bold"), r.collect))
    if r.evidence:
        c.print(Text.assemble(("evidence: ", "bold"), ", ".join(r.evidence)))
    if r.estimate:
        fn = ESTIMATES[r.estimate.kind][0]
        params = ", ".join(f"{k}={v:g}" for k, v in r.estimate.params)
        c.print(Text.assemble(("estimate: ", "bold"), f"{r.estimate.kind}({params}) — ", inspect.getdoc(fn).split("\n\n")[0]))
    else:
        c.print(Text.assemble(("estimate: ", "bold"), "none (ranked after failures with an estimate)"))
    c.print(Text("fix:", style="bold"))
    for i, step in enumerate(r.remediation.steps, start=1):
        c.print(Text(f"  {i}. {step.replace(TOP_FINDING, '<the top-ranked other finding>')}"))
    if r.remediation.snippet:
        c.print(Syntax(r.remediation.snippet, "python", theme="ansi_dark", background_color="default"))
    for v in r.variants:
        c.print(Text(f"when {v.when} ({PREDICATES[v.when][1]}):", style="bold"))
        if v.title:
            c.print(Text(f"  title: {v.title}"))
        if v.remediation:
            for i, step in enumerate(v.remediation.steps, start=1):
                c.print(Text(f"  {i}. {step}"))
        if v.estimate:
            c.print(Text(f"  estimate: {v.estimate.kind}({', '.join(f'{k}={x:g}' for k, x in v.estimate.params)})"))


def report_command(
    path: Path = typer.Argument(..., help="A trace (Kineto .json/.json.gz, nsys .sqlite/.nsys-rep) or a run bundle directory."),
    fmt: str = typer.Option("terminal", "--format", "-f", help="terminal | md | html | json"),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the report here instead of stdout."),
    rules: Optional[List[Path]] = RULES_OPTION,
    threshold: Optional[List[str]] = THRESHOLD_OPTION,
    step: Optional[str] = typer.Option(None, "--step", help="Step range name or glob (default: ProfilerStep#N, else the most frequent repeated range with GPU work)."),
    tokens_per_step: Optional[float] = typer.Option(None, "--tokens-per-step", min=0, callback=finite_option, help="Tokens one step produces (enables tokens/s projections)."),
) -> None:
    """Diagnose a trace or a run bundle: ranked findings with evidence and fixes.

    For a bundle directory, report.md, report.html and findings.json are (re)written into it
    (skipped with a warning when the bundle is read-only). -o never writes over an input, a
    trace or a rule pack (see docs/safety.md).

    Example: perfdoctor report trace.json.gz --format html -o report.html --threshold dram-bandwidth=0.8
    """
    from perfdoctor.collectors import load_trace
    from perfdoctor.metrics import analyze
    from perfdoctor.reports import html, json, markdown, terminal
    from perfdoctor.reports.bundle import write_reports
    from perfdoctor.rules.engine import evaluate

    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt!r}: use one of {', '.join(FORMATS)}")
    check_outputs([output], [path, *(rules or ())])  # never write over an input
    ruleset = _load(rules, threshold)  # before the (slower) trace load: a bad pack fails fast
    profile = load_trace(path)
    report_load_warnings(profile)
    analysis = analyze(profile, step=step, tokens_per_step=tokens_per_step)
    findings = evaluate(ruleset, analysis)
    if path.is_dir():
        try:
            written = write_reports(path, findings, analysis, ruleset.packs)
            note(f"wrote {', '.join(str(p) for p in written)}")
        except UsageError as exc:  # a read-only bundle: the report still goes to stdout / -o
            warn(f"reports not written into the bundle: {exc}")
    if fmt == "terminal" and output is None:
        Console().print(terminal.findings_renderable(findings, analysis))
        return
    text = {
        "terminal": lambda: terminal.render(findings, analysis),
        "md": lambda: markdown.render(findings, analysis),
        "html": lambda: html.render(findings, analysis, ruleset.packs),
        "json": lambda: json.render(findings, analysis, ruleset.packs),
    }[fmt]()
    if output is None:
        sys.stdout.write(text)
    else:
        write_text(output, text)
        note(f"wrote {output}")
