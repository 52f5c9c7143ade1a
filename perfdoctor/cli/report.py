"""``perfdoctor report PATH --format terminal|md|html|json``: the findings report."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from perfdoctor.cli import options
from perfdoctor.console import note, stdout_console, warn
from perfdoctor.errors import UsageError
from perfdoctor.cli import outputs
from perfdoctor.io import check_outputs

FORMATS = ("terminal", "md", "html", "json")


def report_command(
    path: Path = typer.Argument(..., help="A trace (Kineto .json/.json.gz, nsys .sqlite/.nsys-rep) or a run bundle directory."),
    fmt: str = typer.Option("terminal", "--format", "-f", help="terminal | md | html | json"),
    output: Optional[Path] = typer.Option(None, "--output", "-o", metavar="PATH", help="Write the report here instead of stdout ('-': stdout). With -o a bundle is left as it is."),
    rules: List[Path] = options.RULES,
    threshold: List[str] = options.THRESHOLD,
    workload: Optional[str] = options.WORKLOAD,
    step: Optional[str] = options.step(),
    tokens_per_step: Optional[float] = options.tokens_per_step(),
) -> None:
    """Diagnose a trace or a run bundle: ranked findings with evidence and fixes.

    For a bundle directory without -o, report.md, report.html and findings.json are
    (re)written into it (skipped with a warning when the bundle is read-only); with -o the
    report goes only where -o points. -o never writes over an input, a
    trace or a rule pack (see docs/safety.md).

    Example: perfdoctor report trace.json.gz --format html -o report.html --threshold dram-bandwidth=0.8
    """
    from perfdoctor.pipeline import diagnose
    from perfdoctor.reports import html, json, markdown, terminal
    from perfdoctor.reports.bundle import write_reports

    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt!r}: use one of {', '.join(FORMATS)}")
    check_outputs(outputs.files([output]), [path, *rules])  # never write over an input
    d = diagnose(path, step=step, tokens_per_step=tokens_per_step, rules=rules, thresholds=threshold, workload=workload)
    findings, analysis = d.findings, d.analysis
    if d.manifest is not None and output is None:  # a bundle (never a folder of traces); -o: the user pointed elsewhere, the bundle stays as it is
        try:
            written = write_reports(path, findings, analysis, d.packs)
            note(f"wrote {', '.join(str(p) for p in written)}")
        except UsageError as exc:  # a read-only bundle: the report still goes to stdout / -o
            warn(f"reports not written into the bundle: {exc}")
    if fmt == "terminal" and (output is None or outputs.is_stdout(output)):
        stdout_console().print(terminal.findings_renderable(findings, analysis), crop=False)  # code is never cropped
        return
    text = {
        "terminal": lambda: terminal.render(findings, analysis),
        "md": lambda: markdown.render(findings, analysis),
        "html": lambda: html.render(findings, analysis, d.packs),
        "json": lambda: json.render(findings, analysis, d.packs),
    }[fmt]()
    target = output if output is not None else Path(outputs.STDOUT)
    outputs.emit_text(target, text)
    outputs.wrote(target)
