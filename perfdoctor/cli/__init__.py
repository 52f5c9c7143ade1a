"""The ``perfdoctor`` command line: :func:`program`, the executable; the app and its
:func:`~perfdoctor.cli.commands.main` are :mod:`perfdoctor.cli.commands`.

This module imports neither typer nor any command: ``perfdoctor analyze`` begins reading its
trace (:mod:`perfdoctor.cli.early`) before the app is imported, and a plain analyze command
line runs without the app (typer) at all.

May import every room.
"""

from __future__ import annotations

import errno
import sys
import threading
from typing import Any, Dict

from perfdoctor.cli.exits import fail, finish


def program() -> None:
    """The ``perfdoctor`` executable (and ``python -m perfdoctor``): :func:`.commands.main`
    on the process's own arguments, then :func:`perfdoctor.console.leave` with its exit
    status, which skips the interpreter's teardown (0.1-0.2 s after a large analysis, time a
    user waits for nothing). A thread still running is waited for the ordinary way.

    ``perfdoctor analyze`` begins reading its trace before the app is imported and click
    parses the command line (:func:`perfdoctor.cli.early.start_early`); on a plain command
    line it runs without them (:func:`_analyze_plainly`)."""
    plain = None
    if sys.argv[1:2] == ["analyze"]:
        from perfdoctor.cli.early import start_early

        plain = start_early(sys.argv[2:])
    from perfdoctor.console import leave
    from perfdoctor.pipeline import drop_early

    try:
        if plain is not None:
            finish(lambda: _analyze_plainly(plain))
        else:
            from perfdoctor.cli.commands import main

            main()
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    finally:
        drop_early()  # a load begun early that the command never took (it failed first)
    if threading.active_count() > 1:
        sys.exit(code)
    leave(code)


def _analyze_plainly(arguments: Dict[str, Any]) -> Any:
    """:func:`perfdoctor.cli.analyze_run.run_analyze` with the arguments typer would have
    given it, and what click's main does around a command (``typer.core._main``): Ctrl-C is
    exit code 130, an EOFError a blank line and "aborted" (130), a closed stderr exit code 1."""
    from perfdoctor.cli.analyze_run import run_analyze

    try:
        return run_analyze(**arguments)
    except KeyboardInterrupt:
        return 130
    except EOFError:
        print(file=sys.stderr)
        fail("aborted", 130)
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
        sys.exit(1)
