"""Waits for another thread, for I/O or in time.sleep, timed in the light pass and marked in the traced ones: :class:`Waits`.

A server's worker thread blocks on its request queue between requests (``queue.Queue.get``,
or a ``ThreadPoolExecutor``'s work queue): that time is no work of the step's. The light
pass times a step found as a call (a module's forward) as the loop iteration, the call and
the host work until the next call, so without knowing of the wait it read the time the
worker slept as service time (tests/programs/real/threaded_server.py: a 3.7 ms median step
for requests the program served in 0.9 ms). What is timed, each only when it may block (a
zero timeout or a non-blocking call is a poll, not a wait: a ``ThreadPoolExecutor``'s
``submit`` polls its idle semaphore with ``Condition.wait(0)`` on the submitting thread):

- ``threading.Condition.wait``: ``queue.Queue.get``, ``Event.wait``, a semaphore, a
  future's ``result()``;
- ``queue.SimpleQueue.get`` (the executor's work queue, in C: replaced by a subclass whose
  ``get`` is timed; ``get_nowait`` and ``put`` stay C);
- an asyncio event loop's selector: ``select(timeout)`` of a loop made after the bootstrap
  (``asyncio.run``): with a timeout that is not 0 the loop's thread sleeps until a timer or
  I/O (an asyncio server's worker coroutine awaiting ``queue.get()`` on an empty queue:
  tests/programs/real/async_server.py read a 5.1 ms median step for requests it served in
  1.1 ms). Once a loop has slept so (a server's loop), its ``select(0)`` counts too: every
  return to the loop is where the worker coroutine handed the thread to other coroutines
  (the next request's arrival, the last one's reply), and without it a step held their
  work (0.16 ms per request there, 22 % of its 0.72 ms). A loop that never slept (driven
  step by step by ``run_until_complete``, awaiting nothing) keeps its iterations whole,
  the host work around the loop included. Only the loop's own selector is wrapped (its
  instance's ``select``, set in ``BaseSelectorEventLoop.__init__``), never the
  ``selectors`` classes, which ``multiprocessing.connection.wait`` uses for a DataLoader's
  worker queues: a step that waits for its data keeps that time. uvloop's loop (C) and
  the Windows proactor are not seen;
- a blocking socket's ``recv``, ``recv_into``, ``recvfrom``, ``recvfrom_into`` and
  ``accept`` (``socket.socket``'s, not a non-blocking socket's as asyncio's transports use,
  nor TLS sockets' reads): a worker blocked on its connection for the next request;
- ``time.sleep`` of a positive time: a loop paced to a rate (a camera's frames, a request
  generator) sleeps between its steps, and a poll sleeps until other work is done. A
  real-time demo's 1.3 ms inference per frame read as the 33 ms frame period, all of it
  its step's. Bound by ``from time import sleep`` too, when that import runs after the
  bootstrap (the program's own); a library that took ``sleep`` before keeps the original.

Traced passes also mark a wait for another process's message on a ``multiprocessing``
connection (``Connection.poll`` with a timeout, which a ``multiprocessing.Queue``'s ``get``
makes: a DataLoader's fetch waiting for its workers' batch) as
:data:`~perfdoctor.names.ranges.PROCESS_WAIT_RANGE`: what part of a fetch waited for the
workers and what part took the batch in (unpickled it), which ask for different fixes
(:func:`perfdoctor.analysis.cpu.loader_waits`). Not the light pass: a step waits for its
data, and the light pass's waits end iterations.

A lock's ``acquire`` handed over between threads is not seen (``_thread.lock`` is C and
cannot be wrapped without replacing every lock).
"""

from __future__ import annotations

import asyncio.selector_events as selector_events
import multiprocessing.connection as mp_connection
import numbers
import os
import queue
import socket
import threading
import time
from typing import Any

from perfdoctor import api
from perfdoctor.names import ranges as rangenames


# socket.socket's calls that block until a peer sends or connects
SOCKET_WAITS = ("recv", "recv_into", "recvfrom", "recvfrom_into", "accept")


def _timed(call: Any, blocks: Any, begin: Any, finish: Any) -> Any:
    """``call``, timed as a wait (``begin()`` before it, ``finish(began)`` after) whenever
    ``blocks(*args, **kwargs)`` says that call may block; its name and docstring kept."""

    def timed(*args: Any, **kwargs: Any) -> Any:
        if not blocks(*args, **kwargs):
            return call(*args, **kwargs)
        began = begin()
        try:
            return call(*args, **kwargs)
        finally:
            finish(began)

    timed.__name__, timed.__qualname__, timed.__doc__ = call.__name__, call.__qualname__, call.__doc__
    return timed


class Waits:
    """The waits of every thread. Light pass: one list of (thread, start, end in host ns on
    the steps' clock, :meth:`Waits.worked`), appended by the thread that waited (a list append is
    atomic), read once at the end. Traced passes: each wait is a range named
    :data:`perfdoctor.names.ranges.WAIT_RANGE` on its thread, so a trace shows it too, with
    :data:`~perfdoctor.names.ranges.WORKED_RANGE` inside it where it worked. A forked child
    (``disabled``) is left alone."""

    # Children whose CPU time is read at most (a file each, open): a program that starts a
    # process per task, joining each, must not run out of file descriptors; the exited ones
    # are dropped first.
    MAX_CHILDREN = 64

    def __init__(self, session: Any) -> None:
        self.timed: list[tuple[int, int, int, int]] = []  # (thread, start, end, worked): one append per wait, whole
        self.waiting: set[int] = set()  # the threads inside a wait now
        self.children: list[int] = []  # /proc/<pid>/schedstat of the program's child processes, open
        self.dropping = threading.Lock()
        self.condition_wait = original = threading.Condition.wait
        self.simple_queue = simple = queue.SimpleQueue
        self.loop_init = loop_init = selector_events.BaseSelectorEventLoop.__init__
        self.socket_methods = {m: socket.socket.__dict__.get(m) for m in SOCKET_WAITS}
        self.time_sleep = sleep = time.sleep
        begin, finish = (self.began, self.ended) if session.mode == "light" else (self.push, self.pop)

        wait = _timed(original, lambda condition, timeout=None: not session.disabled and (timeout is None or timeout > 0), begin, finish)
        # a non-blocking socket never waits; anything but a positive time goes to time.sleep
        # as it is (its own errors, sleep(0)'s yield)
        socket_blocks = lambda sock, *args, **kwargs: not session.disabled and sock.timeout != 0  # noqa: E731
        sleeps = lambda *args, **kwargs: (  # noqa: E731
            not session.disabled and len(args) == 1 and not kwargs and isinstance(args[0], numbers.Real) and args[0] > 0)

        class SimpleQueue(simple):  # type: ignore[misc, valid-type]
            __doc__ = simple.__doc__

            def get(self, block: bool = True, timeout: float | None = None) -> Any:
                if session.disabled or not block or (timeout is not None and timeout <= 0):
                    return super().get(block, timeout)
                began = begin()
                try:
                    return super().get(block, timeout)
                finally:
                    finish(began)

        def timed_select(select: Any) -> Any:
            slept = False  # this loop has waited in select with a timeout: a server's loop

            def timed(timeout: float | None = None) -> Any:
                nonlocal slept
                if session.disabled or (not slept and timeout is not None and timeout <= 0):
                    return select(timeout)
                slept = True
                began = begin()
                try:
                    return select(timeout)
                finally:
                    finish(began)

            return timed

        def init(loop: Any, *args: Any, **kwargs: Any) -> None:
            loop_init(loop, *args, **kwargs)
            selector = getattr(loop, "_selector", None)
            if selector is not None and not session.disabled:
                selector.select = timed_select(selector.select)

        self.connection_poll = poll = mp_connection._ConnectionBase.poll
        if session.mode != "light":
            # a poll with a timeout blocks; poll() and poll(0) only look
            polls = lambda connection, timeout=0.0: not session.disabled and (timeout is None or timeout > 0)  # noqa: E731
            marked = lambda: api.marks().push(rangenames.PROCESS_WAIT_RANGE)  # noqa: E731
            mp_connection._ConnectionBase.poll = _timed(poll, polls, marked, lambda handle: api.marks().pop(handle))  # type: ignore[method-assign]
        time.sleep = _timed(sleep, sleeps, begin, finish)
        threading.Condition.wait = wait  # type: ignore[method-assign]
        queue.SimpleQueue = SimpleQueue  # type: ignore[misc]
        selector_events.BaseSelectorEventLoop.__init__ = init  # type: ignore[method-assign]
        for m in SOCKET_WAITS:
            setattr(socket.socket, m, _timed(getattr(socket.socket, m), socket_blocks, begin, finish))

    def began(self) -> tuple[int, int, bool, bool]:
        """When a wait begins: the host clock, the CPU time of whatever may work meanwhile
        (:meth:`cpu_ns`), whether another Python thread is running (in no wait of these) and
        whether a child process is alive: a producer works through the wait (a thread, or a
        process pool's workers), a server's request generator sleeps in one."""
        running = threading.active_count() - 1 > len(self.waiting)  # this thread is in none yet
        children = bool(self.children)
        self.waiting.add(threading.get_ident())
        return time.perf_counter_ns(), self.cpu_ns(running, children), running, children

    def cpu_ns(self, running: bool, children: bool) -> int:
        """The process's CPU time (every thread's) where another Python thread runs, plus its
        children's; 0 where neither: each read is a system call (~0.6 us), made only where it
        can matter."""
        return (time.process_time_ns() if running else 0) + (self.children_cpu_ns() if children else 0)

    def child_started(self, pid: int | None) -> None:
        """A process the program started (``multiprocessing``: a ``Pool``'s or a
        ``ProcessPoolExecutor``'s workers): its CPU time counts toward the waits of this one.
        Its ``schedstat`` stays open, read by ``pread`` (one system call, the file's offset
        untouched), and refers to that process alone, whatever reuses its pid. Not Linux: the
        waits for a producer process read as idle."""
        if pid is None:
            return
        if len(self.children) >= self.MAX_CHILDREN:
            self.children_cpu_ns()  # drops the exited ones
            if len(self.children) >= self.MAX_CHILDREN:
                return
        try:
            self.children.append(os.open(f"/proc/{pid}/schedstat", os.O_RDONLY | os.O_CLOEXEC))
        except OSError:
            pass

    def children_cpu_ns(self) -> int:
        """The CPU time of the live children (their main threads, where a pool's worker runs
        its tasks), ns; an exited child is dropped (its time leaves the sum: a wait it ends
        in reads as idle)."""
        total = 0
        for fd in list(self.children):
            try:
                total += int(os.pread(fd, 64, 0).split()[0])
            except (OSError, ValueError, IndexError):
                self.drop(fd)
        return total

    def drop(self, fd: int) -> None:
        with self.dropping:  # two threads may find the same child gone: close it once
            if fd in self.children:
                self.children.remove(fd)
                os.close(fd)

    def worked(self, began: tuple[int, int, bool, bool], end_ns: int) -> bool:
        """Whether the rest of the process worked during a wait from ``began`` (host ns, CPU ns,
        another Python thread running, a child process alive: :meth:`began`) to ``end_ns``:
        another Python thread was running or a child process was alive when it began, and
        they used at least :data:`~perfdoctor.names.ranges.WORKED_SHARE` of a CPU over a wait
        of at least :data:`~perfdoctor.names.ranges.WORKED_MIN_NS` (a shorter one's CPU time
        is mostly the wrapper's own). A waiting thread uses none: the CPU time is its
        producer's (a thread decoding the next batch, a process pool's workers making the next
        features). This process's own CPU time counts only where another Python thread runs:
        torch's OpenMP threads spin after each op (a CPU server with two intra-op threads: 85
        of 126 idle waits used half a CPU), and they are no Python thread. A server's worker
        waits while its request generator sleeps in a wait, and an idle pool's workers wait
        for tasks."""
        wall = end_ns - began[0]
        if not (began[2] or began[3]) or wall < rangenames.WORKED_MIN_NS:
            return False  # the CPU clock is read only where it can count
        return self.cpu_ns(began[2], began[3]) - began[1] >= rangenames.WORKED_SHARE * wall

    def ended(self, began: tuple[int, int, bool, bool]) -> None:
        """A wait that began at ``began`` ends now (light pass)."""
        end = time.perf_counter_ns()
        me = threading.get_ident()
        self.waiting.discard(me)
        # One append of the four: appends from two threads could interleave, and pair one
        # thread's start with another's end.
        self.timed.append((me, began[0], end, int(self.worked(began, end))))

    def push(self) -> tuple[Any, tuple[int, int, bool, bool]]:
        return api.marks().push(rangenames.WAIT_RANGE), self.began()

    def pop(self, token: tuple[Any, tuple[int, int, bool, bool]]) -> None:
        handle, began = token
        self.waiting.discard(threading.get_ident())
        marks = api.marks()
        if self.worked(began, time.perf_counter_ns()):
            marks.pop(marks.push(rangenames.WORKED_RANGE))
        marks.pop(handle)

    def series(self) -> dict[str, list[int]] | None:
        """``{"tid", "start_ns", "end_ns", "worked"}`` of every wait (worked: 1 where the
        rest of the process worked meanwhile, :meth:`worked`), or None when there was none."""
        timed = list(self.timed)
        if not timed:
            return None
        tid, start, end, busy = (list(column) for column in zip(*timed))
        return {"tid": tid, "start_ns": start, "end_ns": end, "worked": busy}

    def renew_locks(self) -> None:
        """A forked child's own lock (Session.forked)."""
        self.dropping = threading.Lock()

    def uninstall(self) -> None:
        for fd in list(self.children):
            self.drop(fd)
        time.sleep = self.time_sleep
        mp_connection._ConnectionBase.poll = self.connection_poll  # type: ignore[method-assign]
        threading.Condition.wait = self.condition_wait  # type: ignore[method-assign]
        queue.SimpleQueue = self.simple_queue  # type: ignore[misc]
        selector_events.BaseSelectorEventLoop.__init__ = self.loop_init  # type: ignore[method-assign]
        for m, method in self.socket_methods.items():
            if method is None:
                if m in socket.socket.__dict__:
                    delattr(socket.socket, m)  # the C base's again
            else:
                setattr(socket.socket, m, method)
