"""Work in forked child processes, for the loaders: each child runs one function and sends
back the pieces of bytes it yields, each as soon as it is made.

Decoding JSON holds the GIL (msgspec builds Python objects), so threads cannot share the
decode of a large trace; forked processes can. A child inherits the parent's memory
copy-on-write — the file's bytes, the decoders — so nothing is sent to it, and it sends
back only what it kept, serialized. Used only where forking is safe and cheap: a POSIX
``fork``, more than one CPU for this process, and no other Python thread running (a child
of a threaded process could inherit a lock some other thread held).

A piece goes into an unlinked file the two processes share, and only its length through
the pipe: a pipe holds 64 KB, so a child sending its pieces there would wait for a parent
still busy elsewhere, while lengths never fill it. The parent takes the pieces sent so far
without waiting (:meth:`Child.ready`), so it reads the first ones while the child works on
the last: on HF 80 MB the child's decoder had pickled its 7 spans at its end (0.024 s) and
sent them through the pipe (0.025 s), all after its decode and before the parent's
unpickling (0.02 s) — ~0.07 s that nobody overlapped.

:class:`Tickets` shares out work between the parent and its children as they go: a
process that runs faster (CPUs of a VM change speed on their own) takes more of it.

A child never returns into the caller's code: it leaves through ``os._exit`` (no atexit
handlers, no flushing of the parent's buffered output), status 0 with its result written,
1 on any exception — the parent then does the work itself.
"""

from __future__ import annotations

import gc
import os
import signal
import threading
import warnings
from contextlib import contextmanager
from typing import BinaryIO, Callable, Iterable, Iterator


def usable_cpus() -> int:
    """How many processes may usefully run at once here: the CPUs this process may use,
    1 where forking is not possible or not safe (see the module docstring)."""
    if not hasattr(os, "fork") or threading.active_count() > 1:
        return 1
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity call (macOS)
        return max(1, os.cpu_count() or 1)


class Child:
    """One forked child running ``fn``; :meth:`ready` and :meth:`result` take the pieces
    it yields."""

    LENGTH = 8  # bytes of a piece's length in the pipe: one write each, below PIPE_BUF, so it arrives whole

    def __init__(self, fn: Callable[[], Iterable[bytes]]) -> None:
        read, write = os.pipe()
        self._pieces = _scratch()
        with warnings.catch_warnings():  # Python >= 3.12 warns on fork when it sees other OS threads (BLAS pools): ours run no Python code in the child
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            code = 1
            try:
                # Short-lived: a collection would walk (and so copy) every object inherited from the parent.
                gc.disable()
                os.close(read)
                for piece in fn():
                    self._pieces.write(piece)
                    self._pieces.flush()
                    os.write(write, len(piece).to_bytes(self.LENGTH, "little"))
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        self.pid = pid
        self._read: int | None = read
        self._offset = 0  # where the next piece starts in the file

    def _taken(self, lengths: bytes) -> list[bytes]:
        out = []
        for at in range(0, len(lengths), self.LENGTH):
            n = int.from_bytes(lengths[at : at + self.LENGTH], "little")
            out.append(os.pread(self._pieces.fileno(), n, self._offset))
            self._offset += n
        return out

    def ready(self) -> list[bytes]:
        """The pieces sent since the last call, without waiting for more. Use them only once
        :meth:`result` says the child succeeded."""
        assert self._read is not None, "ready() after result()"
        os.set_blocking(self._read, False)
        lengths = b""
        try:
            while chunk := os.read(self._read, 1 << 16):  # a multiple of LENGTH: whole lengths only
                lengths += chunk
        except BlockingIOError:  # none left for now
            pass
        finally:
            os.set_blocking(self._read, True)
        return self._taken(lengths)

    def result(self) -> list[bytes] | None:
        """The pieces :meth:`ready` did not take, once the child has ended; None when ``fn``
        raised (or the child died)."""
        assert self._read is not None, "result() called twice"
        with os.fdopen(self._read, "rb") as pipe:
            self._read = None
            lengths = pipe.read()
        _, status = os.waitpid(self.pid, 0)
        with self._pieces:
            return self._taken(lengths) if os.waitstatus_to_exitcode(status) == 0 else None

    def cancel(self) -> None:
        """Stop the child if its result was not collected (the parent gave up on it)."""
        if self._read is None:
            return
        os.close(self._read)
        self._read = None
        self._pieces.close()
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:  # already gone (and a zombie until waited for)
            pass
        os.waitpid(self.pid, 0)


def _scratch() -> BinaryIO:
    """A file no name leads to, gone with its last descriptor: in memory where the system
    has ``memfd_create`` (Linux), else a temporary file."""
    if hasattr(os, "memfd_create"):
        return open(os.memfd_create("perfdoctor-pieces", os.MFD_CLOEXEC), "w+b")
    import tempfile  # only here: the decoders fork before it would be needed (perfdoctor.io, _late)

    return tempfile.TemporaryFile()


@contextmanager
def children(fns: list[Callable[[], Iterable[bytes]]]) -> Iterator[list[Child]]:
    """One child per function, started now; any child whose result was not collected when
    the block ends (an exception in the parent) is stopped and reaped."""
    started: list[Child] = []
    try:
        for fn in fns:
            started.append(Child(fn))
        yield started
    finally:
        for child in started:
            child.cancel()


class Tickets:
    """The numbers ``0 … n-1``, each handed out once, to whichever process asks first: the
    parent and the children forked after this was made share one pipe holding one byte per
    number. Reading one byte from a pipe is atomic, so no number is handed out twice, and a
    process that is faster simply takes more. At most 256 numbers."""

    LIMIT = 256

    def __init__(self, n: int) -> None:
        if not 0 <= n <= self.LIMIT:
            raise ValueError(f"Tickets holds 0 to {self.LIMIT} numbers, not {n}")
        read, write = os.pipe()  # 256 bytes: far below a pipe's buffer, so the write never blocks
        os.write(write, bytes(range(n)))
        os.close(write)  # an empty pipe with no writer reads as end of file: no number left
        self._read: int | None = read

    def take(self) -> int | None:
        """The next number not yet handed out to any process, or None when none is left."""
        if self._read is None:
            return None
        got = os.read(self._read, 1)
        return got[0] if got else None

    def close(self) -> None:
        if self._read is not None:
            os.close(self._read)
            self._read = None

    def __enter__(self) -> "Tickets":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
