"""``perfdoctor analyze PATH``: metrics, step latency, top kernels, gaps and findings on the terminal."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from perfdoctor.cli import options
from perfdoctor.cli.analyze_run import run_analyze

def analyze_command(
    path: Path = typer.Argument(..., help="A Kineto trace (.json, .json.gz), an Nsight Systems export (.sqlite, .nsys-rep), a run bundle (several ranks too), or a folder of per-rank traces (*.pt.trace.json[.gz], as tensorboard_trace_handler writes them)."),
    step: Optional[str] = options.step(),
    json_out: Optional[Path] = options.json_out("metrics.json (schema perfdoctor.metrics/2)"),
    tokens_per_step: Optional[float] = options.tokens_per_step(),
    rules: List[Path] = options.RULES,
    threshold: List[str] = options.THRESHOLD,
    workload: Optional[str] = options.WORKLOAD,
    top: int = typer.Option(1, "--top", min=0, metavar="N", help="Show the first N causes (failing findings; rules sharing one estimate are one) in full, the rest one line each (0: all)."),
    brief: bool = typer.Option(False, "--brief", help="Only the verdict and the top three findings, one line each."),
) -> None:
    """What the GPU spent its time on: metrics, step latency, top kernels, the largest gaps,
    and the ranked findings of the rule packs.

    Example: perfdoctor analyze trace.json.gz --step decode_step --json metrics.json

    Several ranks (a bundle of perfdoctor run --nproc-per-node, or a folder of per-rank traces): a table per rank, the straggler and the collective that waits for it, then the findings; --json writes perfdoctor.ranks/1.
    """
    run_analyze(path, step=step, json_out=json_out, tokens_per_step=tokens_per_step, rules=rules, threshold=threshold,
                workload=workload, top=top, brief=brief)
