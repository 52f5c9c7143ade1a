"""The ``perfdoctor`` command line.

Each command is a thin layer: load (``collectors``), measure (``metrics``), then print or
write. Bad input raises :class:`~perfdoctor.errors.UsageError`, which becomes one line on
stderr and exit code 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

try:  # typer >= 0.20 vendors click; older typers use click itself
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover
    from click import exceptions as click_exceptions
from rich.console import Console

from perfdoctor.console import finite_option, install_pipe_guard, note, report_load_warnings
from perfdoctor.errors import UsageError
from perfdoctor.io import check_outputs, write_json
from perfdoctor.text import clean
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
    json_out: Optional[Path] = typer.Option(None, "--json", help="Write metrics.json (schema perfdoctor.metrics/2) here."),
    tokens_per_step: Optional[float] = typer.Option(None, "--tokens-per-step", min=0, callback=finite_option, help="Tokens one step produces (enables tokens_per_s); overrides what the workload declared."),
    rules: Optional[List[Path]] = RULES_OPTION,
    threshold: Optional[List[str]] = THRESHOLD_OPTION,
) -> None:
    """What the GPU spent its time on: metrics, step latency, top kernels, the largest gaps,
    and the ranked findings of the rule packs.

    Example: perfdoctor analyze trace.json.gz --step decode_step --json metrics.json
    """
    from perfdoctor.collectors import load_trace
    from perfdoctor.metrics import analyze as analyze_profile
    from perfdoctor.reports.summary import gaps_owner, render_summary
    from perfdoctor.reports.terminal import findings_renderable
    from perfdoctor.rules.engine import evaluate, load_rules

    check_outputs([json_out], [path, *(rules or ())])  # never write over an input
    ruleset = load_rules(rules or (), threshold or ())  # a bad pack fails before the trace loads
    profile = load_trace(path)
    report_load_warnings(profile)
    analysis = analyze_profile(profile, step=step, tokens_per_step=tokens_per_step)
    console = Console()
    findings = evaluate(ruleset, analysis)
    # One gap table: the summary's, unless a finding prints the same table as its evidence.
    render_summary(analysis, console, gaps_shown_by=gaps_owner(findings))
    console.print(findings_renderable(findings, analysis))
    if json_out is not None:
        write_json(json_out, analysis.to_json())
        note(f"wrote {json_out}")


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


def _click_error(exc: click_exceptions.ClickException) -> str:
    """A click usage error as one line: ``no such option --foo (see perfdoctor analyze --help)``."""
    message = " ".join(exc.format_message().split()).rstrip(".")
    if message[:1].isupper() and message[1:2].islower():
        message = message[0].lower() + message[1:]
    ctx = getattr(exc, "ctx", None)
    if ctx is not None:
        message += f" (see {ctx.command_path} --help)"
    return message


def main(argv: Optional[List[str]] = None) -> None:
    """Entry point: run the app; bad input (ours or click's) is one line on stderr and exit
    code 2. A closed stdout does not change the exit code (see ``docs/safety.md``)."""
    install_pipe_guard()
    try:
        code = app(args=argv, prog_name="perfdoctor", standalone_mode=False)
    except UsageError as exc:
        _fail(str(exc))
    except click_exceptions.NoArgsIsHelpError as exc:  # `perfdoctor` / `perfdoctor rules`: the help
        print(exc.ctx.get_help() if exc.ctx else str(exc), file=sys.stderr)
        sys.exit(2)
    except click_exceptions.ClickException as exc:
        _fail(_click_error(exc), exc.exit_code if exc.exit_code else 2)
    except typer.Abort:
        _fail("aborted", 130)
    sys.stdout.flush()
    sys.exit(code if isinstance(code, int) else 0)


def _fail(message: str, code: int = 2) -> None:
    sys.stdout.flush()
    print(f"error: {clean(message)}", file=sys.stderr)
    sys.exit(code)
