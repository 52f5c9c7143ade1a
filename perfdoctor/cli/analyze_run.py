"""What ``perfdoctor analyze`` does once its arguments are read, by typer
(:func:`perfdoctor.cli.analyze.analyze_command`) or, for a plain command line, without it
(:mod:`perfdoctor.cli.early`): diagnose the trace, print the report, write the JSON.
Imports no typer.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from perfdoctor.cli import outputs
from perfdoctor.io import check_outputs

if TYPE_CHECKING:
    from perfdoctor.pipeline import Diagnosis


def run_analyze(path: Path, step: Optional[str] = None, json_out: Optional[Path] = None, tokens_per_step: Optional[float] = None,
                rules: Sequence[Path] = (), threshold: Sequence[str] = (), workload: Optional[str] = None, top: int = 1,
                brief: bool = False) -> None:
    """``perfdoctor analyze``: metrics, step latency, top kernels, gaps and findings on the
    terminal, ``json_out`` the metrics (or, for several ranks, perfdoctor.ranks/1)."""
    from perfdoctor.pipeline import diagnose

    check_outputs(outputs.files([json_out]), [path, *rules])  # never write over an input
    # The report's modules (rich) import before diagnose: a large trace's decoders are at work
    # by now (program() began its load before the command line was parsed).
    from perfdoctor.reports.summary import gaps_owner, render_summary
    from perfdoctor.reports import attribution, bounds
    from perfdoctor.reports.common import named_not_evaluated
    from perfdoctor.reports.terminal import brief_renderable, findings_renderable, verdict_text

    d = diagnose(path, step=step, tokens_per_step=tokens_per_step, rules=rules, thresholds=threshold, workload=workload)
    if d.cross_rank is not None:  # several ranks: a multi-rank bundle, a folder of per-rank traces, an nsys export of several processes
        _report_ranks(d, json_out)
        return
    console = outputs.report_console(json_out)
    if brief:
        console.print(brief_renderable(d.findings, d.analysis, f"perfdoctor analyze {path}"))
        if json_out is not None:
            outputs.emit_json(json_out, d.analysis.to_json())
            outputs.wrote(json_out)
        return
    console.print(verdict_text(d.findings, d.analysis))  # the verdict first: a crash is the first thing read
    console.print(attribution.terminal(d.analysis, blank_after=False))  # then where the step went
    console.print(bounds.terminal(d.analysis))  # and what bounds each kernel class
    # One gap table: the summary's, unless a finding prints the same table as its evidence.
    render_summary(d.analysis, console, gaps_shown_by=gaps_owner(d.findings), named_below=named_not_evaluated(d.findings))
    console.print(findings_renderable(d.findings, d.analysis, with_verdict=False, top=top or None), crop=False)  # code is never cropped
    if json_out is not None:
        outputs.emit_json(json_out, d.analysis.to_json())
        outputs.wrote(json_out)


def _report_ranks(d: Diagnosis, json_out: Optional[Path]) -> None:
    from perfdoctor.reports.json import finding_json
    from perfdoctor.reports.ranks import render_ranks

    render_ranks(d, outputs.report_console(json_out))
    if json_out is not None:
        payload = d.cross_rank.to_json()
        payload["findings"] = {str(r): [finding_json(f) for f in found] for r, found in d.rank_findings.items()}
        outputs.emit_json(json_out, payload)
        outputs.wrote(json_out)
