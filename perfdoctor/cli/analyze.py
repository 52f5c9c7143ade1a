"""``perfdoctor analyze PATH``: metrics, step latency, top kernels, gaps and findings on the terminal."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from perfdoctor.cli import options
from perfdoctor.console import note
from perfdoctor.io import check_outputs, write_json


def analyze_command(
    path: Path = typer.Argument(..., help="A Kineto trace (.json, .json.gz), an Nsight Systems export (.sqlite, .nsys-rep) or a run bundle."),
    step: Optional[str] = options.step(),
    json_out: Optional[Path] = options.json_out("metrics.json (schema perfdoctor.metrics/2)"),
    tokens_per_step: Optional[float] = options.tokens_per_step(),
    rules: List[Path] = options.RULES,
    threshold: List[str] = options.THRESHOLD,
    workload: Optional[str] = options.WORKLOAD,
) -> None:
    """What the GPU spent its time on: metrics, step latency, top kernels, the largest gaps,
    and the ranked findings of the rule packs.

    Example: perfdoctor analyze trace.json.gz --step decode_step --json metrics.json
    """
    from rich.console import Console

    from perfdoctor.pipeline import diagnose
    from perfdoctor.reports.summary import gaps_owner, render_summary
    from perfdoctor.reports.terminal import findings_renderable

    check_outputs([json_out], [path, *rules])  # never write over an input
    d = diagnose(path, step=step, tokens_per_step=tokens_per_step, rules=rules, thresholds=threshold, workload=workload)
    console = Console()
    # One gap table: the summary's, unless a finding prints the same table as its evidence.
    render_summary(d.analysis, console, gaps_shown_by=gaps_owner(d.findings))
    console.print(findings_renderable(d.findings, d.analysis))
    if json_out is not None:
        write_json(json_out, d.analysis.to_json())
        note(f"wrote {json_out}")
