"""How a command's outcome becomes the process's exit code and its one-line errors, for the
app (:func:`perfdoctor.cli.commands.main`) and for analyze run without it
(:func:`perfdoctor.cli.program`). Imports no typer.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from typing import Any, Callable

from perfdoctor.console import install_pipe_guard
from perfdoctor.errors import UsageError
from perfdoctor.text import clean


def finish(command: Callable[[], Any]) -> None:
    """Run a command and leave with its exit code (an int it returns; else 0). Bad input
    (:class:`~perfdoctor.errors.UsageError`) is one line on stderr and exit code 2, and so is
    a full disk under stdout; a closed stdout does not change the exit code (see
    ``docs/safety.md``)."""
    install_pipe_guard()
    try:
        code = command()
    except UsageError as exc:
        fail(str(exc))
    except OSError as exc:
        if exc.errno not in _FULL:
            raise
        fail(f"cannot write the output ({exc.strerror})")  # `> /dev/full`, a full disk under stdout
    try:
        sys.stdout.flush()
    except OSError as exc:
        if exc.errno not in _FULL:
            raise
        fail(f"cannot write the output ({exc.strerror})")
    sys.exit(code if isinstance(code, int) else 0)


# Writing stdout failed for lack of room, not for a bug: one line, exit 2.
_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)


def fail(message: str, code: int = 2) -> None:
    """``error: MESSAGE`` on stderr, then exit ``code`` (what stdout still holds is written
    first, or dropped if stdout is what failed)."""
    try:
        sys.stdout.flush()
    except OSError:  # stdout is what failed: drop what it holds, the message goes to stderr
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    print(f"error: {clean(message)}", file=sys.stderr)
    sys.exit(code)
