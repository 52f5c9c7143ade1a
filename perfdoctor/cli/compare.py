"""``perfdoctor compare-programs A B``: two programs run interleaved, then their diff (the
runs are :func:`perfdoctor.record.repeats.compare_programs`, the comparison :mod:`perfdoctor.compare.diff`)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Optional

import typer

from perfdoctor.cli import options
from perfdoctor.cli import outputs
from perfdoctor.errors import UsageError
from perfdoctor.text import clean


def program(text: str, what: str) -> list[str]:
    """A program as one shell-quoted string: ``"infer.py --tokens 64"`` or ``"-m pkg.mod --x"``."""
    from perfdoctor.record.target import check_importable, parse_target

    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"{what} {text!r}: {exc}") from None
    module = bool(words) and words[0] == "-m"
    target = parse_target(words[1:] if module else words, module)
    check_importable(target, None)
    return target


def compare_command(
    a: str = typer.Argument(..., metavar="A", help="The baseline program and its arguments, as one quoted string: 'infer.py --tokens 64' or '-m pkg.module ARGS'."),
    b: str = typer.Argument(..., metavar="B", help="The program to compare with it, the same way."),
    repeat: int = typer.Option(5, "--repeat", min=2, max=100, metavar="N", help="Light processes per program, interleaved A B A B ... (at least 2: a spread over processes needs two)."),
    collect: Optional[str] = typer.Option("nvml", "--collect", help="Collectors for each program's traced passes (torch,nvml,nsys,ncu). Default nvml: light passes only, the fastest way to compare step time."),
    warmup: Optional[int] = typer.Option(None, "--warmup", min=0, help="Steps left out as warm-up. Default: where each process's steady state starts."),
    steps: int = typer.Option(10, "--steps", min=0, help="Steps to trace in the traced passes (0: all after the warm-up)."),
    step: Optional[str] = options.step("(record_function, NVTX or perfdoctor.region), both programs", "Default: perfdoctor.region/step, else the most frequent range."),
    out: Path = typer.Option(Path("perfdoctor-runs"), "--out", help="Folder that receives the two run bundles (NAME-A, NAME-B)."),
    lockstep: bool = typer.Option(False, "--lockstep", help="For programs the CPU paces, on a shared runner: the --repeat processes compared run in pairs, A and B at once on one CPU taking turns step by step, so a core that changes speed changes it for both (perfdoctor.record.lockstep, docs/ci.md). Needs step markers (perfdoctor.region/step or record_function/NVTX ranges)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress on stderr."),
    json_out: Optional[Path] = options.json_out("the diff as JSON too (schema perfdoctor.diff/1)"),
) -> None:
    """Run two programs interleaved (A B A B ...) and diff them over processes: how a change is checked locally.

    Each program runs its passes once (the light pass, and the tracers --collect names), then both get --repeat - 1 more light processes in turn, so a machine that drifts (clocks, other jobs) slows both alike. Writes two run bundles under --out and prints their diff: step latency compared over processes, with a 95 % interval of the ratio B/A (docs/ci.md). Use the bundles with perfdoctor gate for a budget.

    Exit codes: 0 both programs ran; otherwise the first non-zero exit of a program; 2 usage error.

    A program given as '-m MODULE ...' starts with a dash: put the options first and -- before A and B, as in the second example.

    Examples: perfdoctor compare-programs infer.py 'infer.py --fused' --repeat 5

    perfdoctor compare-programs --repeat 5 -- '-m perfdoctor.engine --variant graph' '-m perfdoctor.engine --variant fused'

    perfdoctor compare-programs --lockstep --repeat 5 train.py 'train.py --new-loss'   (CPU programs on a noisy runner)
    """
    from perfdoctor.compare.diff import diff_runs
    from perfdoctor.pipeline import diagnose
    from perfdoctor.io import check_outputs
    from perfdoctor.reports.diff_report import document, print_terminal
    from perfdoctor.record.repeats import compare_programs
    from perfdoctor.record.options import RunOptions, parse_collect

    targets = [program(text, what) for text, what in ((a, "A"), (b, "B"))]
    # Every file among the programs' words is an input: --json a.py must not overwrite the program it runs.
    check_outputs(outputs.files([json_out]), [word for target in targets for word in target if os.path.isfile(word)])
    if lockstep and not hasattr(os, "sched_setaffinity"):
        raise UsageError("--lockstep pins both programs to one CPU, which needs Linux (os.sched_setaffinity)")
    sides = [
        RunOptions(target=target, collect=parse_collect(collect), warmup=warmup, steps=steps, step=step, out=out, quiet=quiet)
        for target in targets
    ]
    from rich.console import Console

    console = Console(stderr=True)
    try:
        code, bundle_a, bundle_b = compare_programs(sides[0], sides[1], repeat, console, lockstep=lockstep)
    except OSError as exc:
        raise UsageError(f"cannot write the run bundles in {out} ({exc.strerror or exc})") from None
    if bundle_b is None:
        console.print(clean(f"stopped before B ran; bundle A: {bundle_a}"), highlight=False, markup=False)
        raise typer.Exit(code)
    result = diff_runs(*(diagnose(bundle, step=step, rules=None) for bundle in (bundle_a, bundle_b)))
    print_terminal(result, outputs.report_console(json_out))
    if json_out is not None:
        outputs.emit_json(json_out, document(result))
    if not quiet:
        console.print(f"bundles written: A {clean(bundle_a)}\n                 B {clean(bundle_b)}", highlight=False, markup=False)
    raise typer.Exit(code)
