"""``perfdoctor rules list | explain ID``: the rules perfdoctor checks."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import List

import typer

from perfdoctor.cli import options
from perfdoctor.console import stdout_console
from perfdoctor.pipeline import load_ruleset as _load
from perfdoctor.text import clean, setting

rules_app = typer.Typer(help="The rules perfdoctor checks: list them, explain one.", no_args_is_help=True)


@rules_app.command("list")
def list_rules(
    rules: List[Path] = options.RULES,
    threshold: List[str] = options.THRESHOLD,
) -> None:
    """Every rule: its pass condition, severity and citation."""
    from rich.table import Table
    from rich.text import Text

    from perfdoctor.reports.common import rule_condition

    ruleset = _load(rules, threshold)
    t = Table(title=Text(clean(f"{len(ruleset)} rules from {', '.join(ruleset.packs)}")), title_justify="left")
    for col in ("id", "severity", "passes when", "citation"):
        t.add_column(col, overflow="fold")
    for r in ruleset:
        t.add_row(r.id, r.severity, rule_condition(r), Text(r.citation))
    stdout_console().print(t)


def _fix_lines(remediation) -> list[str]:
    """A fix's numbered steps as `rules explain` prints them: each with its condition, if any
    (``needs``), and the top-finding placeholder named."""
    from perfdoctor.rules.engine import TOP_FINDING

    return [
        f"  {i}. {f'[only where {cond}] ' if cond else ''}{step.replace(TOP_FINDING, '<the top-ranked other finding>')}"
        for i, (step, cond) in enumerate(zip(remediation.steps, remediation.conditions()), start=1)
    ]


def _snippet_text(remediation) -> str:
    """A fix's snippet as `rules explain` prints it: each part that has a condition after a
    comment naming it."""
    if not remediation.snippet_parts:
        return remediation.snippet
    return "\n".join(f"# [only where {cond}]\n{code}" if cond else code for code, cond in remediation.snippet_parts)


@rules_app.command("explain")
def explain_rule(
    rule_id: str = typer.Argument(..., help="Rule id, e.g. memory-bubbles (see `perfdoctor rules list`)."),
    rules: List[Path] = options.RULES,
    threshold: List[str] = options.THRESHOLD,
    original: bool = typer.Option(False, "--original", help="Also print each cited source's original title and words (the seed documents are in Chinese)."),
) -> None:
    """Everything about one rule: what it measures, its threshold and where it comes from, the fix."""
    from rich.text import Text

    from perfdoctor.reports.code import Code
    from perfdoctor.reports.common import rule_condition
    from perfdoctor.rules.engine import PREDICATES
    from perfdoctor.rules.estimates import ESTIMATES
    from perfdoctor.rules.signals import KNOWN_INPUTS, meaning

    r = _load(rules, threshold).get(rule_id)
    c = stdout_console()
    c.print(Text(f"{r.id} — {r.title}", style="bold"))
    if r.description:
        c.print(Text(r.description))
    c.print(Text.assemble(("passes when: ", "bold"), rule_condition(r), (f"   [{r.threshold_origin}]" if r.threshold_origin else "", "dim")))
    c.print(Text.assemble(("severity: ", "bold"), r.severity, ("   defined in: ", "bold"), r.origin))
    for key in r.metrics + r.show:
        role = "reads" if key in r.metrics else "shows"
        c.print(Text(f"  {role} {key} [{KNOWN_INPUTS[key]}]: {meaning(key) or 'defined in the metric contract (docs: metrics.md)'}"))
    if len(r.metrics) > 1:
        c.print(Text(f"  the first of {', '.join(r.metrics)} that was measured is compared", style="dim"))
    c.print(Text.assemble(("citation: ", "bold"), r.citation))
    for cite in r.cites:
        src = cite.source
        if src.url:
            c.print(Text(f"  {src.title}: {src.url}", style="dim"))
        if original and (src.original_title or cite.original):
            # Printed only on request: a terminal without CJK fonts shows these as boxes.
            section = src.section(cite.section)
            c.print(Text(f"  original: {src.original_title} §{cite.section} {section[1] if section else ''}: {cite.original}"))
    if r.collect:
        c.print(Text.assemble(("collect with: ", "bold"), r.collect))
    if r.evidence:
        c.print(Text.assemble(("evidence: ", "bold"), ", ".join(r.evidence)))
    if r.estimate:
        fn = ESTIMATES[r.estimate.kind][0]
        params = ", ".join(f"{k}={setting(v)}" for k, v in r.estimate.params)
        c.print(Text.assemble(("estimate: ", "bold"), f"{r.estimate.kind}({params}) — ", inspect.getdoc(fn).split("\n\n")[0]))
    else:
        c.print(Text.assemble(("estimate: ", "bold"), "none (ranked after failures with an estimate)"))
    c.print(Text("fix:", style="bold"))
    for line in _fix_lines(r.remediation):
        c.print(Text(line))
    if r.remediation.snippet:
        c.print(Code(_snippet_text(r.remediation)), crop=False)  # code is never cropped
    for v in r.variants:
        c.print(Text(f"when {v.when} ({PREDICATES[v.when][1]}):", style="bold"))
        if v.title:
            c.print(Text(f"  title: {v.title}"))
        if v.severity:
            c.print(Text(f"  severity: {v.severity}"))
        if v.remediation:
            for line in _fix_lines(v.remediation):
                c.print(Text(line))
        if v.estimate:
            c.print(Text(f"  estimate: {v.estimate.kind}({', '.join(f'{k}={setting(x)}' for k, x in v.estimate.params)})"))
