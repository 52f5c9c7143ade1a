"""Waits for another thread, timed in the light pass and marked in the traced ones: :class:`Waits`.

A server's worker thread blocks on its request queue between requests (``queue.Queue.get``,
or a ``ThreadPoolExecutor``'s work queue): that time is no work of the step's. The light
pass times a step found as a call (a module's forward) as the loop iteration, the call and
the host work until the next call, so without knowing of the wait it read the time the
worker slept as service time (tests/programs/real/threaded_server.py: a 3.7 ms median step
for requests the program served in 0.9 ms). A thread's blocking waits for another thread
go through ``threading.Condition.wait`` (``queue.Queue.get``, ``Event.wait``, a
semaphore, a future's ``result()``) or ``queue.SimpleQueue.get`` (the executor's work
queue, in C: replaced by a subclass whose ``get`` is timed). Waits on a socket, a selector
or a lock's ``acquire`` are not seen.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

from perfdoctor import api
from perfdoctor.names import ranges as rangenames


class Waits:
    """The waits of every thread. Light pass: three lists (thread, start, end in host ns on
    the steps' clock), appended by the thread that waited (a list append is atomic), read
    once at the end. Traced passes: each wait is a range named
    :data:`perfdoctor.names.ranges.WAIT_RANGE` on its thread, so a trace shows it too. A
    forked child (``disabled``) is left alone."""

    def __init__(self, session: Any) -> None:
        self.tid: list[int] = []
        self.start_ns: list[int] = []
        self.end_ns: list[int] = []
        self.condition_wait = original = threading.Condition.wait
        self.simple_queue = simple = queue.SimpleQueue
        begin, finish = (time.perf_counter_ns, self.ended) if session.mode == "light" else (self.push, self.pop)

        def wait(condition: Any, timeout: float | None = None) -> bool:
            if session.disabled:
                return original(condition, timeout)
            began = begin()
            try:
                return original(condition, timeout)
            finally:
                finish(began)

        class SimpleQueue(simple):  # type: ignore[misc, valid-type]
            __doc__ = simple.__doc__

            def get(self, block: bool = True, timeout: float | None = None) -> Any:
                if session.disabled or not block:
                    return super().get(block, timeout)
                began = begin()
                try:
                    return super().get(block, timeout)
                finally:
                    finish(began)

        threading.Condition.wait = wait  # type: ignore[method-assign]
        queue.SimpleQueue = SimpleQueue  # type: ignore[misc]

    def ended(self, began: int) -> None:
        """A wait that began at ``began`` (host ns) ends now (light pass)."""
        end = time.perf_counter_ns()
        self.tid.append(threading.get_ident())
        self.start_ns.append(began)
        self.end_ns.append(end)

    @staticmethod
    def push() -> Any:
        return api.marks().push(rangenames.WAIT_RANGE)

    @staticmethod
    def pop(handle: Any) -> None:
        api.marks().pop(handle)

    def series(self) -> dict[str, list[int]] | None:
        """``{"tid", "start_ns", "end_ns"}`` of every wait, or None when there was none."""
        n = min(len(self.tid), len(self.start_ns), len(self.end_ns))
        return {"tid": self.tid[:n], "start_ns": self.start_ns[:n], "end_ns": self.end_ns[:n]} if n else None

    def uninstall(self) -> None:
        threading.Condition.wait = self.condition_wait  # type: ignore[method-assign]
        queue.SimpleQueue = self.simple_queue  # type: ignore[misc]
