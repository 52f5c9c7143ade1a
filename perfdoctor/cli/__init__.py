"""The ``perfdoctor`` command line: :func:`program`, the executable; the app and its
:func:`~perfdoctor.cli.commands.main` are :mod:`perfdoctor.cli.commands`.

This module imports neither typer nor any command: ``perfdoctor analyze`` begins reading its
trace (:mod:`perfdoctor.cli.early`) before the app is imported, so typer's and the command
modules' imports run while the trace's decoders work.

May import every room.
"""

from __future__ import annotations

import sys
import threading


def program() -> None:
    """The ``perfdoctor`` executable (and ``python -m perfdoctor``): :func:`.commands.main`
    on the process's own arguments, then :func:`perfdoctor.console.leave` with its exit
    status, which skips the interpreter's teardown (0.1-0.2 s after a large analysis, time a
    user waits for nothing). A thread still running is waited for the ordinary way.

    ``perfdoctor analyze`` begins reading its trace before the app is imported and click
    parses the command line (:func:`perfdoctor.cli.early.start_early`)."""
    if sys.argv[1:2] == ["analyze"]:
        from perfdoctor.cli.early import start_early

        start_early(sys.argv[2:])
    from perfdoctor.cli.commands import main
    from perfdoctor.console import leave
    from perfdoctor.pipeline import drop_early

    try:
        main()
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    finally:
        drop_early()  # a load begun early that the command never took (it failed first)
    if threading.active_count() > 1:
        sys.exit(code)
    leave(code)
