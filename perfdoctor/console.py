"""Small pieces every command shares for talking to the user.

- :func:`note` / :func:`warn`: one clean line on stderr (never rich markup: a path or a
  name with ``[/]`` in it is just text).
- :func:`report_load_warnings`: what a loader dropped or could not read, said out loud —
  a bundle whose trace is missing or damaged says "no trace: <why>" instead of passing for
  a CPU-only run.
- :func:`install_pipe_guard`: a closed stdout (``perfdoctor gate ... | head -1``) must not
  change a command's exit code; output to it is dropped and the command finishes (see
  ``docs/safety.md``).
- :func:`stdout_console`: the rich console for a report on stdout. On a terminal, its
  width; anywhere else (a pipe, a CI log, a file) as wide as the content, so no table
  cell is cut to "…" and no line is wrapped at an 80-column guess (``COLUMNS`` included).
- :func:`leave`: end the process now with a ``sys.exit`` status, its ``atexit`` functions
  run and its output flushed, without the interpreter's teardown.
"""

from __future__ import annotations

import atexit
import os
import sys
from typing import Any

from perfdoctor.text import clean


def note(text: str) -> None:
    print(clean(text), file=sys.stderr)


def warn(text: str) -> None:
    print(f"warning: {clean(text)}", file=sys.stderr)


def report_load_warnings(profile: Any) -> None:
    """Print a profile's loader warnings (and a bundle without a trace) on stderr."""
    origin = profile.origin
    where = origin.path or ""
    bundle = origin.bundle
    why = None
    if bundle is not None and bundle.activities_from is None:
        why = bundle.reason or "; ".join(origin.warnings) or "no trace in the bundle"
    for w in origin.warnings:
        if why is None or w not in why:
            warn(f"{where}: {w}")
    if why is not None:
        # "not a CPU-only run" only where the run saw a GPU (its manifest names one); on a
        # CPU machine that would be false.
        gpu = (getattr(profile, "device", None) or {}).get("name")
        cpu = f" (the run had a GPU, {gpu}: this is not a CPU-only run)" if gpu else ""
        warn(f"{where}: no trace: {why} — the GPU metrics are absent, not zero{cpu}")


# The width of text perfdoctor lays out itself, in columns (the demo, `perfdoctor doctor`):
# a terminal's classic width, so neither wraps in one.
LAYOUT_WIDTH = 80

# Wide enough for any line a report prints; tables do not expand, so each is only as wide
# as its content. (Full-width rules would span it: reports print headings as text.)
UNBOUNDED_WIDTH = 100_000


def stdout_console(stderr: bool = False) -> Any:
    """The console a report prints on: the terminal's width on a terminal, unbounded otherwise."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    if tty:
        return Console(stderr=stderr, highlight=False)
    return Console(stderr=stderr, width=UNBOUNDED_WIDTH, highlight=False, soft_wrap=False)


class _PipeSafeStream:
    """Delegates to a text stream; once the reader has gone (EPIPE), drops what is written."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.closed_by_reader = False

    def _gone(self) -> None:
        self.closed_by_reader = True
        try:  # later flushes (and the one at exit) write to /dev/null instead of failing
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass

    def write(self, text: str) -> int:
        if self.closed_by_reader:
            return len(text)
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._gone()
            return len(text)
        except UnicodeEncodeError:  # a character the terminal's encoding lacks (text.clean already escaped the bytes of non-UTF-8 paths)
            encoding = getattr(self._stream, "encoding", None) or "utf-8"
            return self._stream.write(text.encode(encoding, "backslashreplace").decode(encoding))

    def flush(self) -> None:
        if self.closed_by_reader:
            return
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._gone()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def install_pipe_guard() -> None:
    if not isinstance(sys.stdout, _PipeSafeStream) and sys.stdout is not None:
        sys.stdout = _PipeSafeStream(sys.stdout)  # type: ignore[assignment]


def leave(code: Any) -> None:
    """End this process as ``sys.exit(code)`` would, minus the interpreter's teardown.

    The ``atexit`` functions run (temporary folders, logging, multiprocessing) and stdout
    and stderr are flushed, then ``os._exit``: no module is torn down and no object freed
    one by one. That teardown is what it skips: ~0.1-0.2 s after ``perfdoctor analyze`` of
    a large trace (pandas' and numpy's modules, the analysis), and in a forked child of a
    traced program, the inherited profiler's C++ destructors, which hang there."""
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # sys.exit("message"): the message on stderr, status 1
        print(code, file=sys.stderr)
        status = 1
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001, S110 - a closed stream: nothing to flush
                pass
        os._exit(status & 0xFF)
