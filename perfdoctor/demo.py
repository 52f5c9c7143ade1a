"""``perfdoctor demo``: the whole job on the bundled reference engine.

Profiles the engine's decode loop with ``perfdoctor run`` — the eager and CUDA-graph
variants of Llama-3.2-1B on a GPU, the tiny config on a CPU-only machine — prints the
ranked report of each run, then the diff between them. It is what a new user runs first
and what the README shows.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.rule import Rule


def _variants(gpu: bool) -> list[tuple[str, list[str]]]:
    """(label, engine arguments) of the runs to profile and compare."""
    if gpu:
        common = ["--config", "llama-3.2-1b", "--device", "cuda", "--tokens", "48", "--ctx", "2048"]
        return [("eager", ["--variant", "eager", *common]), ("graph", ["--variant", "graph", *common])]
    # No GPU: the graph variant needs CUDA, so compare two runs of the same program; the
    # diff then shows what run-to-run noise looks like (no significant change).
    common = ["--variant", "eager", "--config", "tiny", "--device", "cpu", "--tokens", "24", "--ctx", "256"]
    return [("eager", common), ("eager-again", common)]


def demo_command(
    out: Path = typer.Option(Path("perfdoctor-runs"), "--out", help="Folder that receives the two run bundles."),
    steps: int = typer.Option(12, "--steps", min=2, help="decode steps to trace in each run."),
) -> None:
    """Profile the bundled Llama-3.2-1B engine, rank what is wrong, and show what a CUDA graph changes.

    On a GPU: `perfdoctor run` of the eager and the graph variant, the ranked findings of
    each, then `perfdoctor diff` between them. On a CPU-only machine: the tiny config, twice,
    so the diff shows run-to-run noise (the graph variant needs CUDA).
    """
    from perfdoctor.collectors import load_trace
    from perfdoctor.diff import diff_runs, load_run
    from perfdoctor.metrics import analyze
    from perfdoctor.reports.diff_report import print_terminal
    from perfdoctor.reports.summary import metric_table
    from perfdoctor.reports.terminal import findings_renderable
    from perfdoctor.rules.engine import evaluate, load_rules
    from perfdoctor.run import RunOptions, execute, gpu_present

    console = Console()
    progress = Console(stderr=True)
    gpu = gpu_present()
    ruleset = load_rules()
    bundles: list[Path] = []
    for label, args in _variants(gpu):
        console.print(Rule(f"perfdoctor run -m perfdoctor.engine {' '.join(args)}"))
        options = RunOptions(
            target=["-m", "perfdoctor.engine", *args],
            warmup=2,
            steps=steps,
            step="decode_step",
            out=out,
            name=f"demo-{label}",
            collect=["torch", "nvml"] if gpu else ["torch"],
        )
        code, bundle = execute(options, progress)
        if code != 0:
            raise typer.Exit(code)
        analysis = analyze(load_trace(bundle), step="decode_step")
        console.print(metric_table(analysis))
        console.print(findings_renderable(evaluate(ruleset, analysis), analysis))
        bundles.append(bundle)
    before, after = bundles
    console.print(Rule(f"perfdoctor diff {before} {after}"))
    if not gpu:
        console.print(
            "[yellow]No GPU here: both runs are the same CPU program, so whatever the diff calls "
            "improved or regressed is this machine's run-to-run noise.[/]"
        )
    print_terminal(diff_runs(load_run(before, step="decode_step"), load_run(after, step="decode_step")), console)
    console.print(f"\nbundles: {before}  {after}\nnext: perfdoctor report {after} --format html -o report.html")
