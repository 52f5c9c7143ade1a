"""``perfdoctor doctor`` and the root ``--version``: what this machine offers perfdoctor
(the facts are gathered by :mod:`perfdoctor.record.doctor`)."""

from __future__ import annotations

import sys

import typer

from perfdoctor import __version__
from perfdoctor.io import dumps_json


def doctor_command(
    as_json: bool = typer.Option(False, "--json", help="Print the facts as JSON (schema perfdoctor.doctor/1)."),
) -> None:
    """What this machine offers perfdoctor: GPU and driver (NVML), GPM counters, nsys and ncu, the torch build, the cached calibration, Python. Says why each collector of `perfdoctor run` is unavailable. Always exits 0."""
    from perfdoctor.record.doctor import gather, render

    facts = gather()
    if as_json:
        sys.stdout.write(dumps_json(facts))
    else:
        sys.stdout.write(render(facts))


def _print_version(value: bool) -> None:
    if value:
        print(f"perfdoctor {__version__}")
        raise typer.Exit()


def root_callback(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True, help="Print perfdoctor's version and exit."),
) -> None:
    """Keep perfdoctor a group of subcommands; --version."""
