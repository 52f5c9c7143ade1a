"""``perfdoctor run [OPTIONS] SCRIPT [ARGS]...``: profile a program as it is (the passes
and the bundle are :mod:`perfdoctor.record.run`)."""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from perfdoctor.cli import options
from perfdoctor.console import stdout_console
from perfdoctor.errors import UsageError
from perfdoctor.text import clean

if TYPE_CHECKING:  # the domain modules load when the command runs (see perfdoctor.cli)
    from perfdoctor.record.launch import Launch


def run_command(
    args: Optional[list[str]] = typer.Argument(None, metavar="SCRIPT [ARGS]...", help="The program and its arguments, as you would give them to python."),
    module: bool = typer.Option(False, "-m", help="Run a module, as python -m MODULE ARGS... (the first argument is the module)."),
    collect: Optional[str] = typer.Option(None, "--collect", help="Collectors, comma-separated from torch,nvml,nsys,ncu. Default: every one available here."),
    light: bool = typer.Option(True, "--light/--no-light", help="Run the light timing pass (no tracer) first."),
    warmup: Optional[int] = typer.Option(None, "--warmup", min=0, help="Steps to let run before tracing starts. Default: where the light pass found the steady state to start (1 without a light pass)."),
    steps: int = typer.Option(10, "--steps", min=0, help="Steps to trace (0: all after the warm-up)."),
    step: Optional[str] = options.step("(record_function, NVTX or perfdoctor.region)", "Default: perfdoctor.region/step, --step-fn, else the most frequent range."),
    step_fn: Optional[str] = typer.Option(None, "--step-fn", help="module:function (or module:Class.method); every call is one step. Use __main__ for the script itself."),
    out: Path = typer.Option(Path("perfdoctor-runs"), "--out", help="Folder that receives the run bundle."),
    name: Optional[str] = typer.Option(None, "--name", help="Bundle name suffix (default: the script or module name)."),
    ncu_steps: int = typer.Option(1, "--ncu-steps", min=1, help="Steps whose kernels Nsight Compute replays."),
    ncu_kernels: int = typer.Option(2000, "--ncu-kernels", min=1, help="Nsight Compute without a torch or nsys pass of the run to take the step's distinct kernels from: at most this many launches."),
    nvml_interval_ms: int = typer.Option(50, "--nvml-interval-ms", min=5, help="NVML sampling period."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress on stderr."),
    tokens_per_step: Optional[float] = options.tokens_per_step(declared="used when the program does not declare it (e.g. 1 for a Hugging Face generate step)"),
    nproc_per_node: Optional[int] = typer.Option(None, "--nproc-per-node", min=1, help="Run N ranks under torchrun (--standalone), each under perfdoctor: one bundle with raw/rank<k>/. For your own torchrun line: perfdoctor run [OPTIONS] -- torchrun ... SCRIPT ARGS."),
    timeout: Optional[float] = typer.Option(None, "--timeout", min=1, help="Stop a pass still running after this many seconds (a hung rank) and exit 124; the bundle keeps what every rank wrote."),
    duration: Optional[float] = typer.Option(None, "--duration", min=1, metavar="SECONDS", help="For a program that runs long or never ends (a server, a training of many epochs): stop it after this many seconds in each pass and go on. The light pass times the steps run by then; the traced passes stop it as soon as their steps are traced (a window under way at SECONDS is let finish, up to --timeout or SECONDS more). A stop is not a failure: the exit code is 0 unless the program failed first."),
    trace_budget: int = typer.Option(512, "--trace-budget", min=0, metavar="MB", help="With no step found by the light pass, the torch pass traces from the program's start: it stops tracing once its events (0.7-16 KB each on a CPU) fill this much memory over what the program and the profiler hold alone, and lets the program run on untraced. 0: trace to the end."),
    repeat: int = options.REPEAT,
) -> None:
    """Profile a program as it is: perfdoctor run [OPTIONS] SCRIPT [ARGS]... or -m MODULE [ARGS]...

    Runs the program once per pass (a light timing pass with no tracer, then the torch profiler, Nsight Systems and Nsight Compute, as available here), samples NVML alongside, and writes a run bundle (manifest.json, raw/, metrics.json) under --out. Everything after SCRIPT goes to the program. The exit code is the program's.

    With --repeat N the light pass runs N times, each a fresh process, and the traced passes once: diff and gate then compare the runs over processes (a confidence interval of the ratio of per-process medians), which is what a CI budget needs (docs/ci.md).

    Example: perfdoctor run --step decode_step --steps 20 infer.py --tokens 128

    Several ranks: perfdoctor run --nproc-per-node 2 train.py, or perfdoctor run -- torchrun --nproc-per-node 2 train.py (then perfdoctor analyze BUNDLE shows every rank and the straggler).

    Hugging Face's launcher as written: perfdoctor run -- accelerate launch [--mixed_precision bf16 ...] train.py ARGS (accelerate reads its options and config; the program gets the environment it sets).
    """
    from perfdoctor.record.repeats import run_repeated
    from perfdoctor.record.options import RunOptions, parse_collect
    from perfdoctor.record.run import execute
    from perfdoctor.record.target import check_importable

    if step_fn is not None and (":" not in step_fn or not all(step_fn.partition(":")[::2])):
        raise UsageError(f"--step-fn {step_fn!r}: expected module:function")
    ranks, target = run_launch(list(args or []), module, nproc_per_node)
    check_importable(target, step_fn)
    options = RunOptions(
        target=target,
        collect=parse_collect(collect),
        light=light,
        warmup=warmup,
        steps=steps,
        step=step,
        step_fn=step_fn,
        out=out,
        name=name,
        ncu_steps=ncu_steps,
        ncu_kernels=ncu_kernels,
        nvml_interval_ms=nvml_interval_ms,
        quiet=quiet,
        tokens_per_step=tokens_per_step,
        ranks=ranks,
        timeout_s=timeout,
        duration_s=duration,
        trace_budget_mb=trace_budget,
    )
    if repeat > 1 and not light:
        raise UsageError("--repeat repeats the light timing pass: it cannot go with --no-light")
    if repeat > 1 and ranks is not None:
        raise UsageError("--repeat with several ranks is not supported yet: repeat single-process runs, or run the job N times")
    if not options.light and options.collect is not None and set(options.collect) <= {"nvml"}:
        raise UsageError("--no-light with only nvml collects nothing: keep the light pass or add a tracer")
    # Unwrapped when piped (CI logs): a bundle path or a pass's command cut across lines cannot be copied.
    console = stdout_console(stderr=True)
    try:
        code, bundle = run_repeated(options, repeat, console) if repeat > 1 else execute(options, console)
    except OSError as exc:
        # The bundle folder cannot be made or written (read-only, --out is a file, disk full).
        where = f": {exc.filename}" if exc.filename else ""
        gone = _removed_bundle(Path(exc.filename), options.out) if exc.errno == errno.ENOENT and exc.filename else None
        if gone is not None:
            raise UsageError(f"the run bundle {gone} was removed while the run was writing it (by the program?): "
                             "this run is lost, nothing else was touched") from None
        raise UsageError(f"cannot write the run bundle in {options.out} ({exc.strerror or exc}){where}") from None
    if not quiet:
        console.print(f"bundle written: {clean(bundle)}\nnext: perfdoctor analyze {clean(bundle)}", highlight=False, markup=False)
    raise typer.Exit(code)


def _removed_bundle(failed: Path, out: Path) -> Path | None:
    """The bundle folder under ``out`` that held ``failed``, when it no longer exists."""
    try:
        bundle = out / failed.resolve().relative_to(out.resolve()).parts[0]
    except (ValueError, IndexError):  # not under --out
        return None
    return None if bundle.exists() else bundle


PYTHON = re.compile(r"python(\d+(\.\d+)*)?(\.exe)?")


def python_line(args: list[str], module: bool) -> tuple[list[str], bool]:
    """``perfdoctor run -- python app.py ARGS`` (or ``python -m MODULE``), as a user writes a
    command line: the program is app.py (or MODULE), run by perfdoctor's interpreter, which
    is where perfdoctor and the program's packages are; the word python is not a script."""
    if not args or module or not PYTHON.fullmatch(os.path.basename(args[0])):
        return args, module
    rest = args[1:]
    if rest[:1] == ["-m"]:
        return rest[1:], True
    if rest[:1] and rest[0].startswith("-"):
        raise UsageError(f"perfdoctor run -- {args[0]} {rest[0]}: interpreter options are not passed on; give the script (or -m MODULE) after python")
    return rest, False


def run_launch(args: list[str], module: bool, nproc_per_node: Optional[int]) -> tuple[Optional[Launch], list[str]]:
    """(how the ranks start, the target): a torchrun line after ``--``, an ``accelerate
    launch`` line (its environment set here), ``--nproc-per-node``, or a single process (no launch)."""
    from perfdoctor.record.launch import from_accelerate, from_command, from_nproc, is_accelerate_line, is_torchrun_line
    from perfdoctor.record.target import parse_target

    torchrun = is_torchrun_line(args) is not None
    if torchrun or is_accelerate_line(args) is not None:
        if nproc_per_node is not None or module:
            raise UsageError("give either a torchrun or accelerate launch command line or --nproc-per-node/-m, not both")
        if torchrun:
            return from_command(args)
        launch, target, env = from_accelerate(args)
        # what accelerate's launcher gives the program (ACCELERATE_MIXED_PRECISION, ...): every
        # pass's process inherits it from here
        os.environ.update(env)
        return launch, target
    args, module = python_line(args, module)
    target = parse_target(args, module)
    return (from_nproc(nproc_per_node) if nproc_per_node is not None else None), target
