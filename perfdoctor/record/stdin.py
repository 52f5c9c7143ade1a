"""The program's standard input, the same in every pass.

``perfdoctor run`` runs the program several times (the light pass, then the traced ones). A
program that reads its data from stdin (``cat prompts.txt | perfdoctor run infer.py``) read
it in the first pass only: the later passes got nothing, traced a run that did no work, and
the bundle read "no trace". :class:`ReplayedStdin` gives every pass what the first one read:

- a regular file (``< prompts.txt``): each pass reads it from where it started;
- a pipe or a socket: the first pass reads it itself, through :func:`record_stdin` in the
  bootstrap, which keeps every byte the program takes in a temporary file (deleted with the
  run, never in the bundle: it is the user's data) that the later passes read. Nothing is
  read ahead for the program: a script's loop that feeds ``perfdoctor run`` from the same
  pipe (``... | while read f; do perfdoctor run "$f"; done``) keeps the lines the program
  did not take, as without perfdoctor;
- a terminal: the first pass's alone (what a person types is not replayed); later passes
  read nothing, as a program run with ``< /dev/null`` does;
- anything else (``/dev/null``, no stdin at all): inherited by every pass.

This module only uses the standard library: the bootstrap imports it in the program.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from typing import IO, Any


class ReplayedStdin:
    """perfdoctor's standard input (fd ``fd``), handed to each pass by :meth:`for_pass`."""

    def __init__(self, fd: int = 0, replay: bool = True) -> None:
        """``replay`` False: the first pass's alone, whatever it is (a torchrun job: every
        rank would record into one file). One object serves every pass of a command: ``run
        --repeat N``'s further processes, and both programs of ``compare-programs``, which
        read what A's first pass read."""
        self.fd = fd
        self.offset = 0
        self.record: IO[bytes] | None = None  # a pipe's bytes the first pass read (deleted when closed)
        self.closed = False
        # first-only (not replayed, or a terminal), file, pipe, or inherit (anything else)
        self.kind = "inherit" if replay else "first-only"
        if not replay:
            return
        with contextlib.suppress(OSError):
            st = os.fstat(fd)
            if os.isatty(fd):
                self.kind = "first-only"
            elif stat.S_ISREG(st.st_mode):
                self.kind = "file"
                self.offset = os.lseek(fd, 0, os.SEEK_CUR)
            elif stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode):
                self.kind = "pipe"

    def __enter__(self) -> "ReplayedStdin":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Delete the recorded input (also done when this object is collected)."""
        self.closed = True
        if self.record is not None:
            self.record.close()
            self.record = None

    @contextlib.contextmanager
    def for_pass(self, first: bool) -> Iterator[tuple[Any, str | None]]:
        """(what ``subprocess.Popen``'s ``stdin`` is for one pass, None: perfdoctor's own;
        the file the bootstrap records the program's reads into, or None). ``first``: the
        pass owns the terminal (a bundle's first pass); a pipe is recorded by the first pass
        that reads it, and replayed to every later one."""
        if self.kind == "file":
            os.lseek(self.fd, self.offset, os.SEEK_SET)
            yield None, None
        elif self.kind == "first-only":
            yield (None if first else subprocess.DEVNULL), None
        elif self.kind == "pipe" and self.record is not None:
            with open(self.record.name, "rb") as recorded:
                yield recorded, None
        elif self.kind == "pipe" and not self.closed:
            self.record = tempfile.NamedTemporaryFile(prefix="perfdoctor-stdin-")  # noqa: SIM115 - for the command's life
            yield None, self.record.name
        elif self.kind == "pipe":  # passes added after the command's end: the first pass's input is gone
            yield subprocess.DEVNULL, None
        else:
            yield None, None


class _Recorded(io.RawIOBase):
    """fd 0 as the program reads it, each byte also written to ``out``."""

    def __init__(self, out: IO[bytes]) -> None:
        super().__init__()
        self.raw = io.FileIO(0, "rb", closefd=False)
        self.out: IO[bytes] | None = out

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        n = self.raw.readinto(buffer)
        if n and self.out is not None:
            try:
                self.out.write(memoryview(buffer)[:n])
                self.out.flush()  # a program that dies mid-run still leaves what it read
            except OSError:  # a full disk stops the copy, never the program's read
                self.out = None
        return n

    def fileno(self) -> int:
        return 0

    def isatty(self) -> bool:
        return False


def record_stdin(path: str) -> None:
    """In the first pass's program: ``sys.stdin`` reads fd 0 as before and keeps every byte
    it takes in ``path`` (:class:`ReplayedStdin`). A program that reads fd 0 itself
    (``os.read(0, ...)``) bypasses it: its later passes read what ``sys.stdin`` took."""
    old = sys.stdin
    if old is None:
        return
    try:
        out = open(path, "ab")  # noqa: SIM115 - for the program's life
    except OSError:
        return  # the later passes then read what was recorded: nothing
    buffered = io.BufferedReader(_Recorded(out))
    # newline as CPython opens stdin: "\n" (no translation) but on Windows
    sys.stdin = io.TextIOWrapper(buffered, encoding=old.encoding, errors=old.errors, newline=None if os.name == "nt" else "\n",
                                 line_buffering=old.line_buffering)
