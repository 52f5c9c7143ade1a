"""Work in forked child processes, for the loaders: each child runs one function and sends
back the bytes it returns.

Decoding JSON holds the GIL (msgspec builds Python objects), so threads cannot share the
decode of a large trace; forked processes can. A child inherits the parent's memory
copy-on-write — the file's bytes, the decoders — so nothing is sent to it, and it sends
back only what it kept, serialized. Used only where forking is safe and cheap: a POSIX
``fork``, more than one CPU for this process, and no other Python thread running (a child
of a threaded process could inherit a lock some other thread held).

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
from typing import Callable, Iterator


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
    """One forked child running ``fn``; :meth:`result` waits for its bytes."""

    def __init__(self, fn: Callable[[], bytes]) -> None:
        read, write = os.pipe()
        with warnings.catch_warnings():  # Python >= 3.12 warns on fork when it sees other OS threads (BLAS pools): ours run no Python code in the child
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            code = 1
            try:
                # Short-lived: a collection would walk (and so copy) every object inherited from the parent.
                gc.disable()
                os.close(read)
                data = fn()
                with os.fdopen(write, "wb") as out:
                    out.write(data)
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        self.pid = pid
        self._read: int | None = read

    def result(self) -> bytes | None:
        """What ``fn`` returned, or None when it raised (or the child died)."""
        assert self._read is not None, "result() called twice"
        with os.fdopen(self._read, "rb") as pipe:
            self._read = None
            data = pipe.read()
        _, status = os.waitpid(self.pid, 0)
        return data if os.waitstatus_to_exitcode(status) == 0 else None

    def cancel(self) -> None:
        """Stop the child if its result was not collected (the parent gave up on it)."""
        if self._read is None:
            return
        os.close(self._read)
        self._read = None
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:  # already gone (and a zombie until waited for)
            pass
        os.waitpid(self.pid, 0)


@contextmanager
def children(fns: list[Callable[[], bytes]]) -> Iterator[list[Child]]:
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
