"""``perfdoctor diff BEFORE AFTER``: what a change did (the model is :mod:`perfdoctor.compare.diff`)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from perfdoctor.cli import options
from perfdoctor.cli import outputs
from perfdoctor.io import check_outputs


def diff_command(
    before: Path = typer.Argument(..., help="The baseline: a run bundle, Kineto trace (.json, .json.gz) or nsys export (.sqlite, .nsys-rep)."),
    after: Path = typer.Argument(..., help="The run to compare with it (any of the same kinds; mixing kinds is fine)."),
    step: Optional[str] = options.step("for both runs"),
    step_before: Optional[str] = typer.Option(None, "--step-before", help="Step range for BEFORE only (overrides --step)."),
    step_after: Optional[str] = typer.Option(None, "--step-after", help="Step range for AFTER only (overrides --step)."),
    tokens_per_step: Optional[float] = options.tokens_per_step("for both runs"),
    workload: Optional[str] = options.WORKLOAD,
    rules: List[Path] = options.RULES,
    no_rules: bool = typer.Option(False, "--no-rules", help="Do not evaluate rules (no findings section)."),
    noise_floor: Optional[float] = options.noise_floor(),
    md: Optional[Path] = typer.Option(None, "--md", help="Also write the diff as Markdown (fits a PR comment)."),
    json_out: Optional[Path] = options.json_out("the diff as JSON too (schema perfdoctor.diff/1)"),
) -> None:
    """What a change did: metrics before and after, whether step latency moved beyond noise, which kernels changed.

    Step-level samples (latency, GPU time, completion interval, kernels and launches per step) are compared with a Mann-Whitney U test and a bootstrap 95 % interval of the median ratio. Verdicts: improved, regressed, no significant change, or "inconclusive — need more steps" (fewer than 5 steps on a side; a single step is called out as such). A significant shift within the run-to-run noise floor (--noise-floor) is "no significant change": the test sees only the spread within each run, and two processes of one program differ by more than that under a tracer. When both runs are bundles with a light timing pass (no tracer), its latencies are compared too and lead the headline.

    Kernels are matched by normalized name (template arguments, argument lists and numeric, hex or Triton suffixes removed), with count and time per step before and after, and the ones that appeared or vanished. The rules (seed pack plus --rules) run on both sides: findings fixed and new are listed. Runs on different drivers, CUDA or torch versions, step names or tokens per step get a loud warning. Runs that are not comparable (another GPU or vendor, world size or workload kind, a whole-trace window against steps) are said to be "not comparable" before anything else and get no verdict; steps that cover different fractions of the profiled span make the span's ratios (gpu_idle_ratio, kernel_time_ratio, ...) "not comparable", said first too. What changed in kernels and copies per step leads the report ("-1 kernel `x` per step (4 µs)"). Across vendors, kernels that find no partner by name are matched by family and op (GEMM, attention, all-reduce, ...), and the names that cannot be matched are listed. --workload sets the workload kind of both runs. Two multi-rank bundles of one world size are compared rank by rank (rank k with rank k).

    Exit codes: 0 the diff was produced (whatever it says; use `perfdoctor gate` to fail CI); 2 usage or input error.

    Example: perfdoctor diff eager.json.gz graph.json.gz --step decode_step --md diff.md --json diff.json
    """
    from perfdoctor import pipeline
    from perfdoctor.compare.diff import diff_runs
    from perfdoctor.reports.diff_report import document, print_terminal, render_markdown
    from perfdoctor.reports.terminal import heading

    check_outputs(outputs.files([md, json_out]), [before, after, *rules])  # never write over an input
    console = outputs.report_console(md, json_out)
    sources = pipeline.open(before), pipeline.open(after)
    # both sides are evaluated with the same rules, parsed once, rather than reading a bundle's
    # findings.json, so a finding "fixed" is never just a changed threshold
    ruleset = None if no_rules else pipeline.load_ruleset(rules)
    results = {}
    for rank, (b, a) in pipeline.paired_ranks(*sources).items():  # like ranks of multi-rank runs, else the one pair
        before_run = pipeline.diagnose(sources[0], rank=b, step=step_before or step, tokens_per_step=tokens_per_step,
                                       workload=workload, rules=None, ruleset=ruleset)
        after_run = pipeline.diagnose(sources[1], rank=a, step=step_after or step, tokens_per_step=tokens_per_step,
                                      workload=workload, rules=None, ruleset=ruleset)
        results[rank] = diff_runs(before_run, after_run, options.fraction(noise_floor))
        if rank is not None:
            console.print(heading(f"rank {rank}"))
        print_terminal(results[rank], console)
    if md is not None:
        outputs.emit_text(md, "\n".join((f"## Rank {k}\n\n" if k is not None else "") + render_markdown(r) for k, r in results.items()))
    if json_out is not None:
        if list(results) == [None]:
            outputs.emit_json(json_out, document(results[None]))
        else:
            outputs.emit_json(json_out, {"schema": "perfdoctor.diff-ranks/1", "ranks": {str(k): document(r) for k, r in results.items()}})
