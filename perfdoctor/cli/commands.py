"""The ``perfdoctor`` app, assembled from one module per command, and :func:`main`, which
runs it (:func:`perfdoctor.cli.program` is the executable).

Each command is a thin layer over the domain modules: load, measure and diagnose
(:func:`perfdoctor.pipeline.diagnose`), then print or write (``perfdoctor.reports``). The
options several commands share are declared once, in :mod:`perfdoctor.cli.options`. Bad
input raises :class:`~perfdoctor.errors.UsageError`, which :func:`main` turns into one line
on stderr and exit code 2.

May import every room.
"""

from __future__ import annotations

import sys
from typing import Any, List, Optional

import typer

try:  # typer >= 0.20 vendors click; older typers use click itself
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover
    from click import exceptions as click_exceptions

# Every command module is imported to build the app: what a command alone needs (rich, its
# domain module) is imported in its body, so it loads in a large trace's decoders' shadow
# (:func:`perfdoctor.cli.program`) or not at all.
from perfdoctor.cli.analyze import analyze_command
from perfdoctor.cli.calibrate import calibrate_command
from perfdoctor.cli.compare import compare_command
from perfdoctor.cli.demo import demo_command
from perfdoctor.cli.diff import diff_command
from perfdoctor.cli.doctor import doctor_command, root_callback
from perfdoctor.cli.gate import gate_command
from perfdoctor.cli.report import report_command
from perfdoctor.cli.rules import rules_app
from perfdoctor.cli.exits import fail, finish
from perfdoctor.cli.run import run_command

app = typer.Typer(
    help=(
        "A doctor for GPU inference performance: profile a program or read a trace, measure "
        "what matters for low latency, and rank the fixes by the time they win back."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain click help: it wraps whole words at the terminal's width (80 columns and a pipe
    # too) and shows no type noise (<bool>, <list[str]>); rich's boxed panels squeezed the
    # help text into a third of the width and cut option text with "…".
    rich_markup_mode=None,
)


app.callback()(root_callback)  # the root group (a group even with one command), with --version
app.command("analyze")(analyze_command)
# Everything after the script (or -m module) belongs to the target program.
app.command("run", context_settings={"allow_interspersed_args": False})(run_command)
app.command("demo")(demo_command)
app.command("calibrate")(calibrate_command)
app.command("report")(report_command)
app.command("diff")(diff_command)
app.command("gate")(gate_command)
app.command("compare-programs")(compare_command)
app.add_typer(rules_app, name="rules")
app.command("doctor")(doctor_command)


def _click_error(exc: click_exceptions.ClickException) -> str:
    """A click usage error as one line: ``no such option --foo (see perfdoctor analyze --help)``."""
    message = " ".join(exc.format_message().split()).rstrip(".")
    if message[:1].isupper() and message[1:2].islower():
        message = message[0].lower() + message[1:]
    ctx = getattr(exc, "ctx", None)
    if ctx is not None:
        message += f" (see {ctx.command_path} --help)"
    return message


# A value's metavar, where the option names none: click's plain words, not typer's type
# notation ("<int range>", "<list[str]>"). Typer's parameters differ between versions: a
# click parameter type (``param.type.name``: "integer", "float range", "path", ...) in the
# typers that use click itself, a ``display_type`` ("<int range>", "<list[Path]>") in the
# ones that vendor it (0.29).
METAVARS = {"integer": "N", "int": "N", "float": "NUM", "path": "PATH", "Path": "PATH", "filename": "PATH", "file": "PATH",
            "directory": "DIR", "dir": "DIR"}


def _metavar(param: Any) -> str | None:
    kind = getattr(param, "type", None)
    if kind is not None:
        name = getattr(kind, "name", "text")
    else:
        name = param.display_type(None).strip("<>").removeprefix("list[").removesuffix("]")
    if name == "choice":
        return None  # click lists the choices itself
    return METAVARS.get(name.split(" ")[0], "TEXT")


def plain_help(command: Any) -> Any:
    """Every option of ``command`` (and its subcommands) that names no metavar gets a plain
    one (N, NUM, PATH, TEXT); arguments show no type after their name."""
    for param in command.params:
        if param.param_type_name == "argument":
            param.display_type_rich = lambda ctx: None  # type: ignore[method-assign]
        elif param.metavar is None and not getattr(param, "is_flag", False):
            param.metavar = _metavar(param)
    for sub in getattr(command, "commands", {}).values():
        plain_help(sub)
    return command


def main(argv: Optional[List[str]] = None) -> None:
    """Entry point: run the app (:func:`perfdoctor.cli.exits.finish` maps its outcome to the exit
    code); click's usage errors are one line on stderr and exit code 2."""
    finish(lambda: _click_main(argv))


def _click_main(argv: Optional[List[str]]) -> Any:
    try:
        return plain_help(typer.main.get_command(app)).main(args=argv, prog_name="perfdoctor", standalone_mode=False)
    except click_exceptions.NoArgsIsHelpError as exc:  # `perfdoctor` / `perfdoctor rules`: the help
        print(exc.ctx.get_help() if exc.ctx else str(exc), file=sys.stderr)
        sys.exit(2)
    except click_exceptions.ClickException as exc:
        fail(_click_error(exc), exc.exit_code if exc.exit_code else 2)
    except typer.Abort:
        fail("aborted", 130)
