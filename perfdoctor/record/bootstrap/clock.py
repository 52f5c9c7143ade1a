"""The light pass's clock: when each step started on the host, and when the GPU reached it
and finished its work, with no synchronization inside the program's steps.

:class:`StepTimes` keeps one series per step name, on a :class:`Timer` that every series
shares; :class:`GpuClock` puts CUDA events on the host clock and :func:`stream_ops` records
them (and asks whether the stream is idle) cheaply. A module of its own because this is the
one path the light pass adds to every step of the program (two marks a step), and it needs
nothing of the session: the standard library, and torch only once the program has imported
it and initialised CUDA.
"""

from __future__ import annotations

import bisect
import functools
import gc
import os
import random
import statistics
import sys
import threading
import time
from typing import Any, Callable


class GpuClock:
    """Host-clock time at which the GPU reached a CUDA event, without a sync.

    A CUDA event completes when its stream reaches it. Its time relative to a reference
    event, recorded right after a ``synchronize()`` at a known host time, puts it on the host
    clock: ``t0 + ref.elapsed_time(event)``. So the light pass measures, per step, when the
    GPU reached the step's start and finished its work, without adding a synchronization
    that would stop the program from overlapping steps. Work on streams other than the one
    current at the step's start and end is not seen.

    Events are recycled: once resolved, an event goes back to a pool, so a long run records
    into a few hundred events instead of creating two per step. The pool is filled before
    the first step: torch creates a CUDA event at its first record, and a run shorter than
    the settle interval (a 100-iteration benchmark) otherwise created two per step.
    """

    # Two marks per step and a settle every Timer.SETTLE_EVERY step ends: enough events for
    # the steps between two settles and the ones still queued on the GPU at a settle.
    POOL = 320

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        # The C function behind torch.cuda.is_current_stream_capturing(), without its
        # Python wrapper: it runs twice per step.
        self.capturing_now = getattr(torch._C, "_cuda_isCurrentStreamCapturing", torch.cuda.is_current_stream_capturing)
        self.stream, self.record_on, self.query = stream_ops(torch)
        self.pool = [torch.cuda.Event(enable_timing=True) for _ in range(self.POOL)]
        for event in self.pool:
            self.record(event)  # creates it
        self.ref = torch.cuda.Event(enable_timing=True)
        # The first record creates the CUDA event. Done before t0 is read: on the H200 that
        # creation put the reference ~58 us late, and every light-pass step 58 us short.
        self.record(self.ref)
        torch.cuda.synchronize()
        self.t0_ns = time.perf_counter_ns()
        self.record(self.ref)
        self.edge = self.edges()
        capturing = self.capturing_now

        def skip() -> str:
            """What an edge left unmeasured records (:data:`UNSAMPLED`): no driver call but
            the capture check, so a step inside a capture is still no step."""
            return CAPTURED if capturing() else UNSAMPLED

        self.skip = skip

    def capturing(self) -> bool:
        """The current stream is capturing a CUDA graph: an event recorded now would be a
        graph node, not a time (and querying one would fail the capture)."""
        return bool(self.capturing_now())

    def record(self, event: Any) -> None:
        self.record_on(event, self.stream())

    def idle(self) -> bool:
        """The current stream has nothing left to run."""
        return bool(self.query(self.stream()))

    def mark(self) -> Any:
        event = self.pool.pop() if self.pool else self.torch.cuda.Event(enable_timing=True)
        self.record(event)
        return event

    def edges(self) -> Any:
        """``edge(host_ns)``: what a step records at its start or end, the one function the
        light pass adds to each edge of every step once CUDA is up. CAPTURED inside a CUDA
        graph capture of the current stream (an event there would be a graph node, and a
        query would fail the capture); ``host_ns`` itself when the stream has nothing left
        to run; else a CUDA event recorded on it.

        Why no event on an idle stream: one recorded there completes at once, so its time
        is the host's (a few us of launch latency later), and there it cost the most:
        4.5-7 us of host time at a start and ~10 at an end (the GPU's front end woken for
        one event), where the stream query costs ~1. At a start the host time is exact: the
        step's work begins after it. At an end it is a bound the event's time exceeded: the
        stream finished the step's work before the query, and the program could not go on
        before its host returned, so the step's critical path ends there. The case is the
        host-paced program, the one where the light pass's host time is the program's time
        (ViT-small at batch 1: the two events were 30 of the light pass's 42 us per 2.3 ms
        step on the H200; the start's query saved 6-19 us, docs/performance.md, eighth
        reading). A GPU-bound program, whose host cost hides behind the GPU, still gets its
        events.

        One closure, its names bound once, the stream looked up once for the query and the
        record, where Timer.mark went through four methods and two closures: see
        :meth:`StepTimes.lane` for why and what it saved."""
        capturing, stream, query, record, pool = self.capturing_now, self.stream, self.query, self.record_on, self.pool
        event_of = self.torch.cuda.Event

        def edge(host_ns: int) -> Any:
            if capturing():
                return CAPTURED
            on = stream()
            if query(on):
                return host_ns
            event = pool.pop() if pool else event_of(enable_timing=True)
            record(event, on)
            return event

        return edge

    def resolve(self, event: Any, complete: bool = False) -> int:
        if not complete:
            event.synchronize()
        ns = self.t0_ns + int(self.ref.elapsed_time(event) * 1e6)
        self.pool.append(event)
        return ns

    def settle(self, marks: list[Any], first: int) -> int:
        """Turn the completed events of ``marks[first:]`` into host ns; returns the index of
        the first one still pending (events on one stream complete in order)."""
        for i in range(first, len(marks)):
            if not isinstance(marks[i], (int, str)):
                if not marks[i].query():
                    return i
                marks[i] = self.resolve(marks[i], complete=True)
        return len(marks)


def stream_ops(torch: Any) -> tuple[Any, Any, Any]:
    """``(stream, record, query)``: ``stream()`` the current stream, ``record(event, stream)``
    and ``query(stream)`` (True: it has nothing left to run), without torch's Python lookup
    of the current stream: ``torch.cuda.current_stream()`` builds a ``Stream`` object
    through ``_get_device_index`` on every call. Measured on the H200 host (2026-12-02,
    torch 2.11): ``Event.record()`` 8.3-10.8 us, this 2.6 us; a light-pass step (two
    records) cost 43.7 us, ~1.3 % of a 3.4 ms ResNet-50 forward at batch 1. The current
    stream is still read on every call (a program may switch streams), only its ``Stream``
    object is kept. Tried once on a scratch event; any difference in torch's private API
    falls back to the public calls."""

    def plain_record(event: Any, stream: Any) -> None:
        event.record(stream)

    def plain_query(stream: Any) -> bool:
        return stream.query()

    plain = (torch.cuda.current_stream, plain_record, plain_query)
    C = torch._C
    device = getattr(C, "_cuda_getDevice", None)
    current = getattr(C, "_cuda_getCurrentStream", None)
    record = getattr(getattr(C, "_CudaEventBase", None), "record", None)
    query = getattr(getattr(C, "_CudaStreamBase", None), "query", None)
    if device is None or current is None or record is None or query is None:
        return plain
    streams: dict[Any, Any] = {}

    def stream() -> Any:
        key = current(device())  # (stream id, device index, device type)
        found = streams.get(key)
        if found is None:
            if len(streams) > 64:  # a program that makes a stream per request
                streams.clear()
            found = streams[key] = torch.cuda.Stream(stream_id=key[0], device_index=key[1], device_type=key[2])
        return found

    try:
        on = stream()
        record(torch.cuda.Event(enable_timing=True), on)
        query(on)
    except Exception:  # noqa: BLE001 - another torch's private API: the public path
        return plain
    return stream, record, query


CAPTURED = "captured"  # a step mark taken while the stream was capturing a CUDA graph
UNSAMPLED = "unsampled"  # an edge of a sparse lane's step left unmeasured (StepTimes.lane)


# Once a lane's GPU lags are steady (steady_lags), one step in each SPARSE_EVERY has its GPU
# edges measured, at a random place in the block (one fixed draw, SAMPLED), so that no period
# of the program's lines up with the sampling and keeps its odd steps out of every sample.
SPARSE_EVERY = 8


def _sampled(blocks: int = 128) -> tuple[bool, ...]:
    draw = random.Random(29)
    places = [draw.randrange(SPARSE_EVERY) for _ in range(blocks)]
    return tuple(i % SPARSE_EVERY == places[i // SPARSE_EVERY] for i in range(blocks * SPARSE_EVERY))


SAMPLED = _sampled()
# steady: the middle 90 % of the edges' lags behind their host times spans at most this share
# of the loop's period, so a step's lag read between two samples is off by no more
STEADY_SHARE = 0.02
STEADY_SAMPLES = 16  # fewer measured edges in a settle's window: no judgement, the lane stays as it is
JUDGED_MAX = 1024  # the most edges a judgement weighs (the latest)


def steady_lags(host: list[int], gpu: list[Any], tid: list[int], period_ns: float) -> bool | None:
    """Whether the measured edges among ``gpu`` (host ns, resolved: ints) lag their host times
    ``host`` steadily: one thread, and the 5th to 95th percentile of ``gpu - host`` within
    :data:`STEADY_SHARE` of ``period_ns``. None with fewer than :data:`STEADY_SAMPLES` measured."""
    lags = sorted(g - h for g, h in zip(gpu, host) if type(g) is int)
    if len(lags) < STEADY_SAMPLES:
        return None
    if len(set(tid)) > 1 or period_ns <= 0:
        return False
    n = len(lags) - 1
    return lags[round(0.95 * n)] - lags[round(0.05 * n)] <= STEADY_SHARE * period_ns


def estimated(marks: list[Any], host_ns: list[int], tid: list[int], ns: Callable[[Any], int]) -> list[int]:
    """Each edge's GPU time, host ns: ``ns(mark)`` where it was measured; where it was not
    (:data:`UNSAMPLED`), its host time plus its thread's lag behind the host (GPU time less
    host time) at that host time, linear between the measured edges around it (:func:`filled`;
    none measured on its thread: the host time)."""
    lags = [None if m is UNSAMPLED else ns(m) - h for m, h in zip(marks, host_ns)]
    return [h + lag for h, lag in zip(host_ns, filled(lags, host_ns, tid, missing=0))]  # type: ignore[arg-type]


class RunQueue:
    """How long each thread has waited for a CPU while runnable: Linux's per-thread
    ``schedstat``, its second field (ns on a run queue). Another process's load stretches
    the time between two of the program's calls without the program doing anything else
    there; the step series subtract it before calling that time a pause
    (:func:`perfdoctor.analysis.steady.iteration_ends_ns`). A 2-core box under two busy
    loops stretched 2 ms gaps of a training loop to 15 ms, and the backward in them was
    left out of the step. One ``pread`` of a file held open per thread, ~1.3 us; the raw
    bytes are kept and read after the run. None where the file is missing (not Linux).
    At most :data:`OPEN` files, for as many threads (a thread past them reads None): a
    server that started a thread per request would otherwise run the program out of file
    descriptors. CPython reuses a thread's ident after it ends, and the new thread reopens
    the file (the old one reads ESRCH). A file is only ever read and closed by the live
    thread of its ident, so the reads take no lock; opening does (the count)."""

    PATH = "/proc/thread-self/schedstat"
    OPEN = 64
    # A lane (StepTimes.lane) reads its thread at a step's start when it last did this long
    # ago, or after a gap this long since the lane's last step ended; the starts between are
    # interpolated (run_delays_ns). Inside a host-paced forward the read cost far more than
    # alone: 8-17 us a step on the H200 for ViT-small b1 (2.3 ms), where a loop of reads
    # takes 0.89 us (docs/performance.md, fifteenth reading). Such a loop now reads one step
    # in two or three; a step of 5 ms or more, or one after a gap of 1 ms or more (the gaps
    # the pause rule weighs), is read as before.
    EVERY_NS = 5_000_000
    GAP_NS = 1_000_000

    def __init__(self) -> None:
        self.fds: dict[int, int] = {}
        self.lock = threading.Lock()
        self.ok = os.path.exists(self.PATH)

    def read(self, ident: int) -> bytes | None:
        if not self.ok:
            return None
        fd = self.fds.get(ident)
        try:
            if fd is None and (fd := self.open(ident)) is None:
                return None
            return os.pread(fd, 64, 0)
        except OSError:
            # a thread's ident reused after it ended: the file held open was the old thread's
            self.close(ident)
            try:
                return os.pread(fd, 64, 0) if (fd := self.open(ident)) is not None else None
            except OSError:
                return None

    def open(self, ident: int) -> int | None:
        with self.lock:
            if len(self.fds) >= self.OPEN:
                return None
            fd = self.fds[ident] = os.open(self.PATH, os.O_RDONLY)
            return fd

    def close(self, ident: int) -> None:
        with self.lock:
            fd = self.fds.pop(ident, None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


class FullCollections:
    """When Python's garbage collector ran a full collection (generation 2), host ns. It
    stops every Python thread, for tens to hundreds of ms in a torch process with a big
    heap, and it falls where the program's allocations put it: between two steps it is the
    program's own time, no pause (:func:`perfdoctor.analysis.steady.iteration_ends_ns`). A
    loop keeping records of each iteration collected in 140-230 ms among 1.8 ms steps, and
    the light pass read those gaps as pauses: 200 ms of steps for the program's 1,180. A
    ``gc.callbacks`` entry, ~0.5 us per collection (young ones return at once; a ViT's
    forwards ran none). At most :data:`KEPT` collections."""

    KEPT = 100_000

    def __init__(self) -> None:
        self.start_ns: list[int] = []
        self.end_ns: list[int] = []
        gc.callbacks.append(self.seen)

    def seen(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            if len(self.start_ns) < self.KEPT:
                self.start_ns.append(time.perf_counter_ns())
        elif len(self.end_ns) < len(self.start_ns):
            self.end_ns.append(time.perf_counter_ns())

    def uninstall(self) -> None:
        if self.seen in gc.callbacks:
            gc.callbacks.remove(self.seen)

    def series(self) -> dict[str, list[int]] | None:
        """``{"start_ns", "end_ns"}`` of every full collection that ended; None when none did."""
        n = len(self.end_ns)
        return {"start_ns": self.start_ns[:n], "end_ns": self.end_ns[:n]} if n else None


class TimedCalls:
    """When each call of ``owner.attr`` ran, host ns: the light pass wraps the functions that
    save a checkpoint so (``torch.save``; :meth:`add`: safetensors' ``save_file``, which
    transformers' Trainer saves its model with, and torch.distributed.checkpoint's ``save``
    and ``async_save``, torchtitan's), because a checkpoint saved inside a step is what
    makes that step slow (a loop saving every N steps; the Trainer every ``save_steps``),
    and uneven-steps' evidence names it as it names full collections. One wrapper call and
    two clock reads per save; nothing else. A call inside another (DCP's writer saves the
    non-tensor items with ``torch.save``) is part of it, not counted twice. At most
    :data:`KEPT` calls, of every function wrapped."""

    KEPT = 100_000

    def __init__(self, owner: Any, attr: str) -> None:
        self.calls: list[tuple[int, int]] = []  # (start, end): one append per call, whatever the threads
        self.wrapped: list[tuple[Any, str, Any, Any]] = []  # (owner, attr, original, wrapper)
        self.running = [0]  # timed calls running now, over every thread (a save's writer threads)
        self.add(owner, attr)

    def add(self, owner: Any, attr: str) -> None:
        """Times the calls of ``owner.attr`` too (into the same calls)."""
        original = getattr(owner, attr)
        calls, clock, kept, running = self.calls, time.perf_counter_ns, self.KEPT, self.running

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if len(calls) >= kept or running[0]:
                return original(*args, **kwargs)
            running[0] += 1
            begun = clock()
            try:
                return original(*args, **kwargs)
            finally:
                calls.append((begun, clock()))
                running[0] -= 1

        self.wrapped.append((owner, attr, original, timed))
        setattr(owner, attr, timed)

    def uninstall(self) -> None:
        for owner, attr, original, wrapper in self.wrapped:
            if getattr(owner, attr, None) is wrapper:  # not if someone replaced it since
                setattr(owner, attr, original)

    def series(self) -> dict[str, list[int]] | None:
        """``{"start_ns", "end_ns"}`` of every call that returned or raised; None when none did."""
        calls = sorted(self.calls)
        return {"start_ns": [a for a, _ in calls], "end_ns": [b for _, b in calls]} if calls else None


def run_delays_ns(raw: list[bytes | None], at_ns: list[int] | None = None, tid: list[int] | None = None) -> list[int] | None:
    """:class:`RunQueue` readings as ns. A start not read (None: :attr:`RunQueue.EVERY_NS`)
    gets its thread's (``tid``) reading at its host time ``at_ns`` (:func:`filled`: the delay
    only grows). None when a thread has no reading, or one cannot be parsed."""
    try:
        values = [None if r is None else int(r.split()[1]) for r in raw]
    except (AttributeError, IndexError, ValueError):
        return None
    if all(v is not None for v in values):
        return values  # type: ignore[return-value]
    if at_ns is None:
        return None
    return filled(values, at_ns, tid)


def filled(values: list[int | None], at_ns: list[int], tid: list[int] | None = None,
           missing: int | None = None) -> list[int] | None:
    """``values`` with each None replaced by its thread's (``tid``) known values at its host
    time ``at_ns``: linear between the known ones around it, held at the nearest one before the
    first or after the last. A thread with no known value gets ``missing``; None when that is
    None."""
    rows_of: dict[int, list[int]] = {}
    for i, thread in enumerate(tid if tid is not None else [0] * len(values)):
        rows_of.setdefault(thread, []).append(i)
    out = list(values)
    for rows in rows_of.values():
        known = [i for i in rows if values[i] is not None]
        if not known:
            if missing is None:
                return None
            for i in rows:
                out[i] = missing
            continue
        k = 0  # known[k]: the first row known at or after this one
        for i in rows:
            while k < len(known) and known[k] < i:
                k += 1
            if values[i] is not None:
                continue
            lo, hi = (known[k - 1] if k else None), (known[k] if k < len(known) else None)
            if lo is None or hi is None:
                out[i] = values[hi if lo is None else lo]
            else:
                span = at_ns[hi] - at_ns[lo]
                share = min(max((at_ns[i] - at_ns[lo]) / span, 0.0), 1.0) if span > 0 else 0.0
                out[i] = values[lo] + round(share * (values[hi] - values[lo]))  # type: ignore[operator]
    return out  # type: ignore[return-value]


class Timer:
    """The light pass's clock, shared by every step series: host ns, plus a CUDA event once
    the program has initialised CUDA (never before: the bootstrap must not initialise it).

    ``mark(host_ns)`` is what a step records at its start or end: the host time before the
    program uses CUDA, CAPTURED when CUDA is up but a capture keeps the clock from being
    set up, then :meth:`GpuClock.edges`'s ``edge`` itself, called with no method in between."""

    # measured step ends between settling the CUDA events of finished steps; each settle
    # also judges whether a lane samples (StepTimes.settle): a 100-forward benchmark is judged
    # after its first 32 steps, again after 64 (its warm-up's lags are no steady ones)
    SETTLE_EVERY = 32
    # whether settles may make a lane sparse: off, every step is measured (bench/light_pass.py's
    # "dense", the GPU test comparing the two on one loop)
    sampling = True

    def __init__(self) -> None:
        self.clock: GpuClock | None = None
        self.series: list[StepTimes] = []
        self.unsettled = 0
        self.run_queue = RunQueue()
        self.mark: Any = self.first_marks

    def gpu_clock(self) -> GpuClock | None:
        if self.clock is None:
            torch = sys.modules.get("torch")
            if torch is not None and torch.cuda.is_initialized():
                if torch.cuda.is_current_stream_capturing():
                    return None  # no synchronize() inside a capture: the next mark sets it up
                self.clock = GpuClock(torch)
        return self.clock

    def first_marks(self, host_ns: int) -> Any:
        """``mark`` until the GPU clock is set up, which then becomes its ``edge``."""
        clock = self.clock or self.gpu_clock()
        if clock is None:
            torch = sys.modules.get("torch")
            if torch is not None and torch.cuda.is_initialized():
                return CAPTURED  # CUDA is up but capturing: gpu_clock() declined
            return host_ns
        self.mark = clock.edge
        return clock.edge(host_ns)

    def ended(self) -> None:
        """A measured step end, the GPU clock up (StepTimes.lane): every SETTLE_EVERY, a settle."""
        self.unsettled += 1
        if self.unsettled >= self.SETTLE_EVERY:
            self.unsettled = 0
            for times in self.series:
                times.settle(self.clock)  # type: ignore[arg-type]


class StepTimes:
    """Per step name: host start, GPU start and GPU end of every step, and the thread it ran on.

    At a step's start: the host time, then a CUDA event (the stream reaching the step); at
    its end: a CUDA event (the stream finishing the step's work); at either, the host time
    again when the stream is idle (:meth:`GpuClock.edges`). Before the program has initialised
    CUDA there are no events: the GPU start of such a step is its host start (no GPU work
    was queued, so the stream was idle) and its end is the host end.
    """

    def __init__(self, timer: Timer) -> None:
        self.timer = timer
        timer.series.append(self)
        self.host: dict[str, list[int]] = {}
        self.gpu_start: dict[str, list[Any]] = {}
        self.gpu_end: dict[str, list[Any]] = {}
        # the thread of each step: which waits for another thread lie between its steps
        # (perfdoctor.record.bootstrap.waits), and whether it ran off the main thread
        self.tid: dict[str, list[int]] = {}
        # the host time each step ended: what a loop's iteration holds after its fetch
        # (perfdoctor.analysis.steady.holds_work), whatever the GPU end
        self.host_end: dict[str, list[int]] = {}
        # the thread of each end, in the order steps end: on several threads at once (a
        # pool's requests) that is not the order they began (:meth:`ends`)
        self.end_tid: dict[str, list[int]] = {}
        self.done: dict[str, list[int]] = {}  # per name: [gpu_start, gpu_end] settled up to
        # the thread's time waiting for a CPU when each step started (RunQueue's raw reading)
        self.delay: dict[str, list[bytes | None]] = {}
        self.lanes: dict[str, tuple[Any, Any]] = {}  # per name: its lane()
        self.sparse: dict[str, list[Any]] = {}  # per name: its lane's sampling (lane(), settle())
        self.judged: dict[str, list[int]] = {}  # per name: [start, end] settled up to at its last judgement

    def lane(self, name: str) -> tuple[Any, Any]:
        """``(start, end)``: functions of no argument that record one start and one end of
        ``name``'s steps, its lists and the clock bound once. A caller whose step keeps its
        name (a narrowed module step, :class:`perfdoctor.record.bootstrap.steps.ModuleSteps`)
        holds them and calls them directly: each step then enters four Python functions of
        the light pass's (these two and the clock's edge, twice; RunQueue.read too on a
        start that reads, RunQueue.EVERY_NS), where the methods, the run-queue read and the
        clock's edge took up to fourteen. After a host-paced
        program's forward has filled the CPU's caches with its own path, each function
        entered, each driver call and each system call costs far more than it does in a loop
        of its own: on the H200, inside ViT-small b1's forward, a ``pread`` 8-17 us, two
        stream queries ~10-20, where a loop of them reads 0.89 and ~0.8 each. These lanes
        and the one edge took 3.5-17 us a step off ViT-small b1's ~2.4 ms, median 15, in
        five processes (docs/performance.md, fifteenth reading)."""
        found = self.lanes.get(name)
        if found is not None:
            return found
        host, gpu_start, gpu_end, tid, host_end, end_tid, delay = [], [], [], [], [], [], []  # type: ignore[var-annotated]
        self.host[name], self.gpu_start[name], self.gpu_end[name], self.tid[name] = host, gpu_start, gpu_end, tid
        self.host_end[name], self.end_tid[name], self.delay[name], self.done[name] = host_end, end_tid, delay, [0, 0]
        timer, queue = self.timer, self.timer.run_queue
        clock, ident_of, read = time.perf_counter_ns, threading.get_ident, queue.read
        every, gap, read_at = queue.EVERY_NS, queue.GAP_NS, {}  # read_at: per thread, when this lane last read it
        # [the clock's skip] once this lane's lags are steady (settle), [None] while each edge is measured
        sparse, sampled, mask, unsampled = self.sparse.setdefault(name, [None]), SAMPLED, len(SAMPLED) - 1, UNSAMPLED

        def start() -> None:
            now = clock()
            ident = ident_of()
            n = len(host)
            host.append(now)
            tid.append(ident)
            if queue.ok and (now - read_at.get(ident, now - every) >= every or (host_end and now - host_end[-1] >= gap)):
                read_at[ident] = now
                delay.append(read(ident))
            else:
                delay.append(None)  # interpolated (run_delays_ns)
            skip = sparse[0]
            gpu_start.append(timer.mark(now) if skip is None or sampled[n & mask] else skip())

        def end() -> None:
            now = clock()
            skip = sparse[0]
            mark = timer.mark(now) if skip is None or sampled[len(host_end) & mask] else skip()
            host_end.append(now)
            gpu_end.append(mark)
            end_tid.append(ident_of())
            # every measured end once the GPU clock is up, an idle stream's too (a lane with no event
            # samples too); none before it (a CPU program's steps: nothing to settle or judge)
            if timer.clock is not None and mark is not unsampled:
                timer.ended()

        found = self.lanes[name] = (start, end)
        return found

    def start(self, name: str) -> None:
        self.lane(name)[0]()

    def end(self, name: str) -> None:
        found = self.lanes.get(name)
        if found is not None:  # else an end without a start (a range opened before the hooks)
            found[1]()

    def count(self, name: str) -> int:
        return len(self.gpu_end.get(name, ()))

    def move_last(self, name: str, to: StepTimes) -> None:
        """The last completed step of ``name`` becomes ``to``'s, marks and all (its events
        settle there)."""
        if not self.gpu_end.get(name) or len(self.host[name]) != len(self.gpu_end[name]):
            return  # nothing completed, or one still open (nested): leave the series whole
        to.lane(name)
        for mine, theirs in ((self.host, to.host), (self.gpu_start, to.gpu_start), (self.gpu_end, to.gpu_end), (self.tid, to.tid),
                             (self.host_end, to.host_end), (self.end_tid, to.end_tid), (self.delay, to.delay)):
            theirs[name].append(mine[name].pop())
        done = self.done[name]
        done[0], done[1] = min(done[0], len(self.gpu_start[name])), min(done[1], len(self.gpu_end[name]))

    def settle(self, clock: GpuClock) -> None:
        """Resolve the completed events of every name's steps, then judge from the edges just
        resolved whether its lane measures one step in :data:`SPARSE_EVERY` from now on (its
        lags steady: :func:`steady_lags`) or every step.

        Why sample: in a host-paced program every host us of the light pass is the program's,
        and the events are half of them (ViT-small b1 at a loop's cadence on an H100: +48 us a
        2 ms forward with an event at each edge, +25 without: docs/performance.md, session 36).
        Where the lags are steady, a step between two samples has its GPU edges at its host
        times plus the lags read around it (:meth:`series`), off by less than the lags' spread;
        a GPU-bound program whose lags wander keeps an event at every edge, where they cost it
        nothing (its host runs ahead of the GPU)."""
        for name, done in list(self.done.items()):  # another thread may add a name meanwhile
            done[0] = clock.settle(self.gpu_start[name], done[0])
            done[1] = clock.settle(self.gpu_end[name], done[1])
            first = self.judged.setdefault(name, [0, 0])  # the edges since the last judgement
            # but none from before the GPU clock (host times, no GPU work yet: they say nothing of
            # the lags to come), and no more than JUDGED_MAX: a lane whose edges are seldom
            # measured (inside a capture) would otherwise slice an ever longer window at each settle
            for k, times in ((0, self.host[name]), (1, self.host_end[name])):
                lo = max(first[k], done[k] - JUDGED_MAX)
                first[k] = bisect.bisect_left(times, clock.t0_ns, lo, max(lo, done[k]))
            host = self.host[name][first[0]:done[0]]
            period = statistics.median(b - a for a, b in zip(host, host[1:])) if len(host) > 2 else 0.0
            verdicts = (steady_lags(host, self.gpu_start[name][first[0]:done[0]], self.tid[name][first[0]:done[0]], period),
                        steady_lags(self.host_end[name][first[1]:done[1]], self.gpu_end[name][first[1]:done[1]],
                                    self.end_tid[name][first[1]:done[1]], period))
            if None not in verdicts:  # else too few measured yet (a sparse lane's few): judged at a later settle
                self.sparse[name][0] = clock.skip if all(verdicts) and self.timer.sampling else None
                first[:] = done

    def ends(self, name: str) -> list[int]:
        """Per start of ``name``'s steps, the position of its end (-1: not ended). Ends are
        noted as steps end; a thread's steps end in the order they began, but on several
        threads at once (a thread pool's requests) the i-th end is not the i-th start's: paired
        by position, 8 threads' steps read one request's start to another's end."""
        starts, ended = self.tid[name], self.end_tid.get(name, [])
        if len(set(starts)) < 2:
            return [i if i < len(ended) else -1 for i in range(len(starts))]
        by_thread: dict[int, list[int]] = {}
        for j, t in enumerate(ended):
            by_thread.setdefault(t, []).append(j)
        seen: dict[int, int] = {}
        out = []
        for t in starts:
            k = seen[t] = seen.get(t, -1) + 1
            mine = by_thread.get(t, ())
            out.append(mine[k] if k < len(mine) else -1)
        return out

    def kept(self, name: str, ends: list[int] | None = None) -> list[int]:
        """The positions of ``name``'s steps (their starts) that :meth:`series` keeps: completed,
        and not inside a CUDA graph capture (such a step ran no work: it is not a step).
        ``ends``: :meth:`ends`, where the caller has it already."""
        ends = self.ends(name) if ends is None else ends
        return [i for i, j in enumerate(ends) if j >= 0 and self.gpu_start[name][i] is not CAPTURED and self.gpu_end[name][j] is not CAPTURED]

    def off_thread(self, ident: int | None) -> dict[str, int]:
        """Per name, its steps that ran on a thread other than ``ident`` (the main one)."""
        return {name: n for name, tids in self.tid.items() if (n := sum(t != ident for t in tids))}

    def series(self) -> tuple[dict[str, dict[str, Any]], str | None]:
        """Per name ``{"host_start_ns", "gpu_start_ns", "gpu_end_ns", "tid", "host_end_ns",
        "run_delay_ns", "run_delay_read"}`` on the host clock (CLOCK_MONOTONIC), completed steps only;
        ``gpu_start_ns`` is None when the program never used CUDA, ``run_delay_ns``
        (:class:`RunQueue`, at each start; ``run_delay_read``: which starts read it, the
        others interpolated) when the system does not say. Plus why some are
        missing (e.g. the program died of a CUDA error, so its events never complete).

        A step a sparse lane left unmeasured (:meth:`settle`) has each GPU edge at its host
        time plus the lag read around it (:func:`estimated`); then ``gpu_measured`` says, per
        step, whether both of its GPU edges were measured."""
        clock = self.timer.clock
        out: dict[str, dict[str, Any]] = {}

        def ns(v: Any) -> int:
            return v if isinstance(v, int) else clock.resolve(v)  # type: ignore[union-attr]

        try:
            for name, host in self.host.items():
                ends = self.ends(name)
                keep = self.kept(name, ends)
                starts_at, tid = [host[i] for i in keep], [self.tid[name][i] for i in keep]
                ends_at = [self.host_end[name][ends[i]] for i in keep]
                marks = [self.gpu_start[name][i] for i in keep], [self.gpu_end[name][ends[i]] for i in keep]
                out[name] = {
                    "host_start_ns": starts_at,
                    "gpu_start_ns": estimated(marks[0], starts_at, tid, ns) if clock is not None else None,
                    "gpu_end_ns": estimated(marks[1], ends_at, tid, ns),
                    "tid": tid,
                    "host_end_ns": ends_at,
                    "run_delay_ns": run_delays_ns([self.delay[name][i] for i in keep], starts_at, tid),
                    "run_delay_read": [self.delay[name][i] is not None for i in keep],
                }
                if any(m is UNSAMPLED for m in (*marks[0], *marks[1])):
                    out[name]["gpu_measured"] = [a is not UNSAMPLED and b is not UNSAMPLED for a, b in zip(*marks)]
        except Exception as exc:  # noqa: BLE001 - said in the manifest
            return out, f"{type(exc).__name__}: {exc}"
        return out, None
