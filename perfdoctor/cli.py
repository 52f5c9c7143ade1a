"""The ``perfdoctor`` command line.

Each command is a thin layer: load (``collectors``), measure (``metrics``), then print or
write. Bad input raises :class:`~perfdoctor.errors.UsageError`, which becomes one line on
stderr and exit code 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import orjson
import typer
from rich.console import Console

from perfdoctor.errors import UsageError
from perfdoctor.rules.cli import RULES_OPTION, THRESHOLD_OPTION

app = typer.Typer(
    help=(
        "A doctor for GPU inference performance: profile a program or read a trace, measure "
        "what matters for low latency, and rank the fixes by the time they win back."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Keep perfdoctor a group of subcommands even while it has one."""


@app.command()
def analyze(
    path: Path = typer.Argument(..., help="A Kineto trace (.json, .json.gz), an Nsight Systems export (.sqlite, .nsys-rep) or a run bundle."),
    step: Optional[str] = typer.Option(None, "--step", help="Step range name or glob (e.g. 'decode_step', 'step*'). Default: ProfilerStep#N, else the most frequent repeated range with GPU work."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write metrics.json (schema perfdoctor.metrics/1) here."),
    tokens_per_step: Optional[float] = typer.Option(None, "--tokens-per-step", min=0, help="Tokens one step produces (enables tokens_per_s); overrides what the workload declared."),
    rules: Optional[List[Path]] = RULES_OPTION,
    threshold: Optional[List[str]] = THRESHOLD_OPTION,
) -> None:
    """What the GPU spent its time on: metrics, step latency, top kernels, the largest gaps,
    and the ranked findings of the rule packs.

    Example: perfdoctor analyze trace.json.gz --step decode_step --json metrics.json
    """
    from perfdoctor.collectors import load_trace
    from perfdoctor.metrics import analyze as analyze_profile
    from perfdoctor.reports.summary import render_summary
    from perfdoctor.reports.terminal import findings_renderable
    from perfdoctor.rules.engine import evaluate, load_rules

    ruleset = load_rules(rules or (), threshold or ())  # a bad pack fails before the trace loads
    analysis = analyze_profile(load_trace(path), step=step, tokens_per_step=tokens_per_step)
    console = Console()
    render_summary(analysis, console)
    console.print(findings_renderable(evaluate(ruleset, analysis), analysis))
    if json_out is not None:
        write_json(json_out, analysis.to_json())
        Console(stderr=True).print(f"wrote {json_out}")


from perfdoctor.demo import demo_command  # noqa: E402
from perfdoctor.diff import diff_command  # noqa: E402
from perfdoctor.gate import gate_command  # noqa: E402
from perfdoctor.rules.cli import report_command, rules_app  # noqa: E402
from perfdoctor.calibrate import calibrate_command  # noqa: E402
from perfdoctor.run import run_command  # noqa: E402

# Everything after the script (or -m module) belongs to the target program.
app.command("run", context_settings={"allow_interspersed_args": False})(run_command)
app.command("demo")(demo_command)
app.command("calibrate")(calibrate_command)
app.command("report")(report_command)
app.command("diff")(diff_command)
app.command("gate")(gate_command)
app.add_typer(rules_app, name="rules")
from perfdoctor.doctor import doctor_command, root_callback  # noqa: E402

app.command("doctor")(doctor_command)
app.callback()(root_callback)  # the root group, now with --version


def write_json(path: Path, payload: object) -> None:
    """Write JSON, turning an unwritable destination into a usage error."""
    try:
        path.write_bytes(orjson.dumps(payload, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    except OSError as exc:
        raise UsageError(f"{path}: cannot write ({exc.strerror})") from None


def main() -> None:
    """Entry point: run the app, mapping usage errors to one line and exit code 2."""
    try:
        app()
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
