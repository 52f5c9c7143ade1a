"""perfdoctor.record.bootstrap.waits in this process: which waits the light pass times, on
which thread, and that a poll (a zero timeout, a non-blocking call) and a forked child's
calls are not waits. Each test installs :class:`Waits` and uninstalls it."""

from __future__ import annotations

import asyncio
import multiprocessing
import queue
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest

from perfdoctor.record.bootstrap.waits import Waits

NAP = 0.02  # s: a wait this long is well over the timer's noise


@pytest.fixture
def waits():
    session = SimpleNamespace(mode="light", disabled=False)
    w = Waits(session)
    w.session = session
    try:
        yield w
    finally:
        w.uninstall()


def _long(w: Waits, tid: int | None = None) -> list[int]:
    """The waits of thread ``tid`` (any: None) of at least half a nap, in ns."""
    s = w.series() or {"tid": [], "start_ns": [], "end_ns": []}
    return [e - b for t, b, e in zip(s["tid"], s["start_ns"], s["end_ns"]) if (tid is None or t == tid) and e - b >= NAP * 5e8]


def _later(fn) -> threading.Thread:
    def run():
        time.sleep(NAP)
        fn()
    t = threading.Thread(target=run)
    t.start()
    return t


def test_event_wait_queue_get_and_a_pools_work_queue_are_waits(waits: Waits) -> None:
    me = threading.get_ident()
    event = threading.Event()
    _later(event.set)
    assert event.wait()
    q: queue.Queue = queue.Queue()
    _later(lambda: q.put(1))
    assert q.get() == 1
    assert len(_long(waits, me)) == 2  # Event.wait and Queue.get go through Condition.wait
    # a ThreadPoolExecutor's worker blocks in its SimpleQueue (a subclass now) between tasks
    with ThreadPoolExecutor(max_workers=1) as pool:
        worker = pool.submit(threading.get_ident).result()
        time.sleep(NAP)
        pool.submit(int).result()
    assert len(_long(waits, worker)) >= 1
    assert isinstance(queue.SimpleQueue(), queue.SimpleQueue) and queue.SimpleQueue[int] is not None


def test_a_zero_timeout_is_a_poll_not_a_wait(waits: Waits) -> None:
    # ThreadPoolExecutor.submit polls its idle semaphore (Condition.wait(0)) on the submitting
    # thread: a step that submits work must not end there
    cond = threading.Condition()
    with cond:
        cond.wait(0)
    sq = queue.SimpleQueue()
    with pytest.raises(queue.Empty):
        sq.get(timeout=0)
    with pytest.raises(queue.Empty):
        sq.get(block=False)
    threading.Semaphore(0).acquire(timeout=0)
    assert waits.series() is None


def test_an_event_loops_select_is_a_wait_of_its_thread_once_it_has_slept(waits: Waits) -> None:
    me = threading.get_ident()

    # a loop driven step by step, awaiting nothing: its select(0) polls are no waits, so a
    # step's iteration keeps the host work around run_until_complete
    async def step() -> int:
        await asyncio.sleep(0)
        return 1

    loop = asyncio.new_event_loop()
    try:
        assert sum(loop.run_until_complete(step()) for _ in range(20)) == 20
    finally:
        loop.close()
    assert waits.series() is None

    # an asyncio server's worker awaiting an empty queue: the loop sleeps in its selector;
    # from then on each return to the loop (select(0): other coroutines are ready) ends the
    # worker's work there too
    async def serve() -> int:
        q: asyncio.Queue = asyncio.Queue()
        asyncio.get_running_loop().call_later(NAP, q.put_nowait, 1)
        got = await q.get()
        for _ in range(50):
            await asyncio.sleep(0)
        return got

    assert asyncio.run(serve()) == 1
    assert len(_long(waits, me)) == 1
    assert len(waits.series()["tid"]) >= 50

    # run_in_executor: the loop's thread waits in select while the executor's thread works
    async def offload() -> int:
        return await asyncio.get_running_loop().run_in_executor(None, time.sleep, NAP) or 2

    assert asyncio.run(offload()) == 2
    assert len(_long(waits, me)) == 2


def test_a_blocking_sockets_recv_and_accept_are_waits_a_nonblocking_ones_not(waits: Waits) -> None:
    me = threading.get_ident()  # the sender's time.sleep is its own thread's wait
    a, b = socket.socketpair()
    with a, b:
        _later(lambda: b.sendall(b"x"))
        assert a.recv(1) == b"x"
        assert len(_long(waits, me)) == 1
        a.setblocking(False)
        n = len(waits.series()["tid"])
        with pytest.raises(BlockingIOError):
            a.recv(1)
        assert len(waits.series()["tid"]) == n
    server = socket.create_server(("127.0.0.1", 0))
    with server:
        port = server.getsockname()[1]
        _later(lambda: socket.create_connection(("127.0.0.1", port)).close())
        conn, _ = server.accept()
        conn.close()
    assert len(_long(waits, me)) == 2


def test_time_sleep_is_a_wait_of_its_thread_a_zero_or_bad_one_not(waits: Waits) -> None:
    """A loop paced to a rate sleeps between its steps (a camera's frames): idle, not work.
    sleep(0) is a yield, and anything but a positive number reaches time.sleep unchanged,
    its own error included."""
    from time import sleep  # bound after the install, as a program's own import is

    me = threading.get_ident()
    time.sleep(NAP)
    sleep(NAP)
    assert len(_long(waits, me)) == 2
    n = len(waits.series()["tid"])
    time.sleep(0)
    with pytest.raises(ValueError, match="must be non-negative"):
        time.sleep(-1)
    with pytest.raises(TypeError):
        time.sleep("1")
    assert len(waits.series()["tid"]) == n
    assert time.sleep.__name__ == "sleep" and time.sleep.__doc__.startswith("sleep(seconds)")


def test_uninstall_restores_everything_and_a_forked_child_times_nothing(waits: Waits) -> None:
    waits.session.disabled = True  # what Session.forked sets
    q: queue.Queue = queue.Queue()
    _later(lambda: q.put(1))
    q.get()
    assert waits.series() is None
    waits.uninstall()
    waits.uninstall()  # twice: a forked child's finish uninstalls again
    assert "recv" not in socket.socket.__dict__ and socket.socket.accept.__module__ == "socket"
    assert queue.SimpleQueue.__module__ == "_queue" and threading.Condition.wait.__module__ == "threading"
    assert type(time.sleep).__name__ == "builtin_function_or_method"
    assert asyncio.selector_events.BaseSelectorEventLoop.__init__.__module__ == "asyncio.selector_events"


def test_a_traced_pass_marks_a_wait_for_another_processs_message_the_light_pass_not() -> None:
    # a DataLoader's fetch polls its workers' queue with a timeout: the traced passes mark that
    # wait (what part of a fetch waited and what part took the batch in); a poll that only looks
    # (poll(), poll(0)) is no wait; the light pass leaves connections alone (a step waits for
    # its data); uninstall gives the method back
    import multiprocessing.connection as mp_connection

    import torch

    from perfdoctor.names.ranges import PROCESS_WAIT_RANGE

    poll = mp_connection._ConnectionBase.poll
    light = Waits(SimpleNamespace(mode="light", disabled=False))
    assert mp_connection._ConnectionBase.poll is poll
    light.uninstall()
    traced = Waits(SimpleNamespace(mode="torch", disabled=False))
    try:
        reader, writer = multiprocessing.Pipe(duplex=False)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            assert not reader.poll() and not reader.poll(0)
            _later(lambda: writer.send(1))
            assert reader.poll(5) and reader.recv() == 1
        marked = [e for e in prof.events() if e.name == PROCESS_WAIT_RANGE]
        assert len(marked) == 1 and marked[0].time_range.elapsed_us() >= NAP * 1e6 * 0.5, marked
    finally:
        traced.uninstall()
    assert mp_connection._ConnectionBase.poll is poll


def test_a_wait_while_another_thread_works_is_marked_worked_one_while_it_sleeps_not(waits: Waits) -> None:
    """The consumer of a producer thread waits on its queue while the producer works (~1
    CPU): worked 1, the step's own wait for its input. A server's worker waits while the rest
    sleeps: worked 0. A wait under WORKED_MIN_NS is never worked (its CPU time is mostly the
    wrapper's own)."""
    me = threading.get_ident()

    def burn() -> None:  # pure Python holds the GIL: the waiting thread uses no CPU meanwhile
        deadline = time.perf_counter() + 2 * NAP
        while time.perf_counter() < deadline:
            pass

    def got(put_by) -> list[int]:  # the worked verdicts of this thread's long waits in one get
        q: queue.Queue = queue.Queue()
        put_by(q)  # Thread.start waits for the thread to start: a wait of its own, before the get's
        before = len((waits.series() or {"tid": []})["tid"])
        q.get()
        s = waits.series()
        return [w for t, b, e, w in list(zip(s["tid"], s["start_ns"], s["end_ns"], s["worked"]))[before:] if t == me and e - b >= NAP * 5e8]

    assert got(lambda q: threading.Thread(target=lambda: (burn(), q.put(1))).start()) == [1]
    assert got(lambda q: _later(lambda: q.put(2))) == [0]  # the other thread sleeps, then puts
    q: queue.Queue = queue.Queue()
    q.put(3)
    q.get()  # no wait at all: the item is there
    threading.Event().wait(0.0001)  # 0.1 ms: under the floor
    assert waits.series()["worked"][-1] == 0


def _spin(seconds: float) -> None:
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        pass


@pytest.mark.parametrize("child, expected", [(_spin, 1), (time.sleep, 0)])
def test_a_wait_while_a_child_process_works_is_marked_worked(waits: Waits, child, expected: int) -> None:
    """A process pool's consumer waits for its result while the worker process computes it:
    this process uses no CPU meanwhile, its child does (worked 1). A child that sleeps meanwhile
    (an idle pool's worker) does not (0). No other Python thread runs here: only the child's
    CPU time can count."""
    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=child, args=(4 * NAP,))
    proc.start()
    waits.child_started(proc.pid)  # what the bootstrap's multiprocessing hook does
    if expected:
        # a loaded box may not run the new child at once (failed 1 clean-clone run in 5: worked 0)
        stat = Path(f"/proc/{proc.pid}/stat")
        deadline = time.perf_counter() + 2.0
        while time.perf_counter() < deadline and int(stat.read_text().rsplit(")", 1)[1].split()[11]) == 0:
            time.sleep(0.001)
    try:
        threading.Event().wait(3 * NAP)
    finally:
        proc.join()
    s = waits.series()
    assert s["tid"][-1] == threading.get_ident() and s["worked"][-1] == expected
    # the child has exited: its file is closed on the next read, and a wait with no child is idle
    threading.Event().wait(NAP)
    assert waits.children == [] and waits.series()["worked"][-1] == 0


def test_the_children_read_stay_bounded_and_the_exited_ones_are_dropped(waits: Waits, monkeypatch) -> None:
    """A program that starts a process per task keeps at most MAX_CHILDREN files open: the
    exited children are dropped to make room, the live ones kept."""
    monkeypatch.setattr(Waits, "MAX_CHILDREN", 2)
    ctx = multiprocessing.get_context("fork")
    # the live child runs until it is told to end (it slept 10 naps before, which the three
    # short children's starts outlasted once on the loaded CI box: it had exited and was dropped)
    release, told = ctx.Pipe()
    live = ctx.Process(target=told.recv)
    live.start()
    waits.child_started(live.pid)
    for _ in range(3):  # each exits before the next starts
        done = ctx.Process(target=int)
        done.start()
        waits.child_started(done.pid)
        done.join()
    assert len(waits.children) == 2  # the live one and the last, its exit not yet read
    release.send(None)
    live.join()
    waits.children_cpu_ns()
    assert waits.children == []


FORK_WHILE_HELD = """
import os, threading, time
from perfdoctor.bundle.protocol import PassConfig
from perfdoctor.record.bootstrap.session import Session
from perfdoctor.record.bootstrap.steps import ModuleSteps
from perfdoctor.record.bootstrap.waits import Waits

session = Session(PassConfig(pass_="light", results=os.devnull))
session.waits, session.modules = Waits(session), ModuleSteps(session)
held, release = threading.Event(), threading.Event()

def hold():  # another thread inside the hooks' critical sections at the fork
    with session.waits.dropping, session.modules.narrowing, session.modules.instances.lock, session.lock:
        held.set()
        release.wait()

threading.Thread(target=hold, daemon=True).start()
held.wait()
pid = os.fork()  # the child's at-fork handler (Session.forked) uninstalls every hook
if pid == 0:
    os.write(1, b"child past its fork handler\\n")
    os._exit(0)
release.set()
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        print("child exit status", os.waitstatus_to_exitcode(status))
        break
    time.sleep(0.05)
else:
    os.kill(pid, 9)
    print("child hung")
"""


def test_a_child_forked_while_another_thread_holds_a_hooks_lock_does_not_hang():
    # fastai's training under perfdoctor hung in 5 runs of 12: a DataLoader worker forked
    # while a queue's feeder thread, in a timed wait, held Waits.dropping; the worker's
    # Session.forked then waited on that lock for ever (a child has no such thread)
    done = subprocess.run([sys.executable, "-c", FORK_WHILE_HELD], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "child past its fork handler" in done.stdout and "child exit status 0" in done.stdout, done.stdout
