"""One pass's state inside the program: :class:`Session` counts the steps, opens and closes
the trace window (the torch profiler, nsys's capture range, ncu's NVTX range), sends step
ticks to ``perfdoctor run`` and writes the pass's results at the end.

The hooks (:mod:`.ranges`, :mod:`.steps` and :mod:`perfdoctor.api`'s step listeners) call
the session; it imports neither hook module (they import it), and reaches the module steps
only through the ``ModuleSteps`` that main hands it as ``Session.modules``.
"""

from __future__ import annotations

import _thread
import contextlib
import json
import os
import resource
import signal
import stat
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from perfdoctor import api
from perfdoctor.bundle.layout import CLOCK_SYNC_RANGE, NCU_RANGE
from perfdoctor.bundle.protocol import PassConfig, PassResults
from perfdoctor.declare import DECLARE_PREFIX, parse_declaration
from perfdoctor.names import ranges as rangenames
from perfdoctor.record.bootstrap.clock import StepTimes, Timer
from perfdoctor.record.launch import rank_device
from perfdoctor.record.lockstep import Turns


def progress_pipe(fd: int | None, identity: list[int] | None = None) -> int | None:
    """The fd ``perfdoctor run`` reads step ticks from, if it is still that pipe here: a
    FIFO, with the (device, inode) ``perfdoctor run`` saw (under nsys or ncu the number may
    name another file, or nothing)."""
    try:
        st = os.fstat(fd) if fd is not None else None
    except OSError:
        return None
    if st is None or not stat.S_ISFIFO(st.st_mode) or (identity is not None and [st.st_dev, st.st_ino] != list(identity)):
        return None
    return fd


# The signal slot through which the trace-memory watch asks the main thread to stop the
# tracer (_thread.interrupt_main: no signal is sent). The OS sends SIGURG only for a socket's
# out-of-band data, and by default ignores it, as the slot's handler then does.
TRACE_CUT_SIGNAL = signal.SIGURG
# How often the watch reads the process's memory (/proc/self/status: ~30 us, 0.1 % of a CPU
# at this rate, beside a tracer's own cost). A tracer on a fast CPU fills memory at GB/s: a
# jacobi_solve.py loop of 3,000 sweeps grew its process by 547 MB in 0.18 s, under one read
# every 0.2 s, and its trace ran whole past a 16 MB budget.
TRACE_WATCH_S = 0.05


def max_rss_mb() -> float:
    """The process's peak resident memory: Linux's VmHWM, the program's own. Its ru_maxrss
    starts at what the parent held when it forked, kept across exec: a pass started by a
    process holding 600 MB read a peak of 613 MB for a 14 MB program (2026-12-06), and
    ``perfdoctor run``'s own ~150 MB was every small program's floor. ru_maxrss (KiB) where
    /proc does not say."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def gzip_into(path: str, trace: str) -> None:
    """The trace file at ``path`` copied to ``trace``, gzipped at level 1 unless it already is."""
    import gzip
    import shutil

    with open(path, "rb") as src:
        gz = src.read(2) == b"\x1f\x8b"
        src.seek(0)
        with open(trace, "wb") if gz else gzip.open(trace, "wb", compresslevel=1) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)


@contextlib.contextmanager
def compiler_left_unloaded() -> Iterator[None]:
    """torch.profiler's ``prepare_trace`` asks ``hasattr(torch, "_inductor")`` to learn whether
    a compiled program may replay CUDA graphs, and torch's lazy module ``__getattr__`` answers
    by importing torch._inductor, torch._dynamo and sympy (~890 modules, 126k objects): 1.7 s
    of every traced process on the 2-CPU box, where the start itself takes 0.7 ms (torch 2.13),
    and a program that never compiles left with a compiler loaded that it does not have untraced.
    A program that compiled has imported it and the attribute is there; for any other, the
    answer is no, given here without the import."""
    torch = sys.modules["torch"]
    lazy = torch.__dict__.get("__getattr__")
    if lazy is None:  # a torch without lazy submodules: nothing is imported by asking
        yield
        return

    def unloaded(name: str) -> Any:
        if name == "_inductor":
            raise AttributeError(name)
        return lazy(name)

    torch.__getattr__ = unloaded
    try:
        yield
    finally:
        torch.__getattr__ = lazy


def on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


class Session:
    """State of one pass: which step we are in, the tracer, what to write at the end."""

    def __init__(self, config: PassConfig) -> None:
        self.config = config
        self.mode: str = config.pass_
        self.warmup: int = int(config.warmup or 0)
        self.steps: int = int(config.steps or 0)  # 0: all steps after the warm-up
        self.pattern: str | None = config.step
        self.timer = Timer()
        self.times = StepTimes(self.timer)
        self.started_ns = time.perf_counter_ns()  # the steps' clock, before the program runs
        # a traced pass's module step (its calls marked: ModuleSteps.mark_call), each timed as its loop iteration
        self.module_step = (config.module_step or {}).get("name") if self.mode != "light" else None
        self.exhausted = StepTimes(self.timer)  # data loader fetches that raised StopIteration
        self.last_batches: dict[str, list[int]] = {}  # host starts of the fetches that yielded a pass's last batch
        # per data loader iterator (its id), its last batch's note: taken back where it yields more
        self.last_batch_of: dict[int, tuple[str, int]] = {}
        self.profiler_exit = StepTimes(self.timer)  # ProfilerStep#N ranges torch.profiler's exit closed
        self.counts: dict[str, int] = {}
        self.serving_depth: dict[tuple[int | None, str | None], int] = {}  # open serving ranges per thread
        self.worker_steps: dict[str, int] = {}  # per step name: steps that ran off the main thread
        self.declarations: dict[str, None] = {}  # declaration ranges seen (perfdoctor.declare ...)
        self.window_name: str | None = None  # the step name that opened the window
        self.window_state = "before"  # before -> open -> closed
        self.whole_program = False
        self.trace_scope: str | None = None  # why the trace is not just the window, when it is not
        self.profiler: Any = None
        self.program_profiler: Any = None  # the program's own torch profiler, once it began tracing
        self.program_trace_kept = False
        self.own_tracer_call = False  # perfdoctor's own profiler is starting (its _prepare_trace)
        self.trace_error: str | None = None
        self.trace_cut: dict[str, float] | None = None  # a whole-program trace stopped by watch_trace
        self.torch_rss_mb: float | None = None  # the process's peak memory with torch imported, before the profiler's
        self.clock_sync: dict[str, int] | None = None
        self.finished = False
        self.lock = threading.RLock()
        self.progress_fd = progress_pipe(config.progress_fd, config.progress_pipe)
        self.unsent_ticks = 0
        self.last_tick_ns = 0
        self.tick_lock = threading.Lock()
        # A data loader's fetch as the step of a run that trains: the report counts the
        # training iterations, not the validation's batches nor a fetch that ended a pass
        # (analysis.steps.training_loop), so once an optimizer mark was seen (a traced pass:
        # from the start, the light pass saw them) a fetch's tick waits for its iteration's
        # mark (untallied: the fetch whose iteration holds none yet)
        self.trained = bool(config.trains)
        self.untallied: str | None = None
        # the window's fetches whose iteration held a mark: a training run's window of a fetch
        # step counts these, not every fetch (mmengine's Runner: a window of 10 fetches from
        # the epoch's last training batch held 9 validation batches, 2026-12-06)
        self.window_trained = 0
        # steps.ModuleSteps, when main installs one (typed Any: steps imports this module, not the reverse)
        self.modules: Any = None
        self.replays: Any = None  # steps.GraphReplays, likewise
        self.optimizers: Any = None  # steps.OptimizerSteps, likewise
        self.backwards: Any = None  # steps.BackwardCalls, likewise
        self.waits: Any = None  # waits.Waits, in the light pass
        self.compiles: Any = None  # steps.Compiles, in the light pass once torch.compile is called
        self.full_gcs: Any = None  # clock.FullCollections, in the light pass
        self.saves: Any = None  # clock.TimedCalls of torch.save (and safetensors' save_file, DCP's save), in the light pass
        # compiled calls of a whole module (steps.install_compiled_steps): once one repeats,
        # the light pass keeps timing that module's eager calls (stop_module_timing)
        self.compiled_modules: set[str] = set()
        self.keep_modules = False
        self.children: dict[str, int] = {}  # multiprocessing processes started, by what they run (main.watch_children)
        self.program_error: str | None = None  # an exception the program did not catch
        self.exit_code: int | None = None  # the program's exit status, as far as it is known here
        self.terminated = False  # SIGTERM ended it (torchrun stopping the ranks, perfdoctor's timeout)
        self.stopped = False  # that SIGTERM was stop_after_window's
        # A forked child of the program runs the program's code, not ours: it must leave
        # the parent's collection alone (its inherited profiler, the results file, the tick pipe).
        self.pid = os.getpid()
        self.main_ident = threading.main_thread().ident
        self.disabled = False
        self.inherited_profiler = False
        self.profiler_used = False
        # compare-programs --lockstep: steps taken in turn with another program (perfdoctor.record.lockstep)
        self.turns = Turns(config.lockstep) if config.lockstep and self.mode == "light" else None
        # the handlers install_signals set, per signal (ours, the signal's own behaviour)
        self.signal_handlers: dict[int, tuple[Any, Any]] = {}
        os.register_at_fork(after_in_child=self.forked)

    def forked(self) -> None:
        # A forked child (a multiprocessing Pool's worker, which Pool.terminate() ends by
        # SIGTERM) dies of the signal, as without perfdoctor. A Python-level handler runs only
        # between bytecodes: one that arrived just before the worker blocked on its task
        # queue's lock waited there for ever, and so did the pool's shutdown and the program
        # (pool_classify.py --workers 3: 1 run in 6-15 hung); or it raised inside that lock.
        for signum, (ours, own) in self.signal_handlers.items():
            if signal.getsignal(signum) is ours:
                signal.signal(signum, own)
        self.disabled = True
        self.progress_fd = None
        # The torch profiler's library (Kineto) does not survive a fork: a child that exits
        # normally hangs in its C++ exit-time destructors (seen: ~ConfigLoader waiting on a
        # condition variable of the parent's Kineto thread). See leave().
        # Its threads outlive a stopped profiler, so any profiler start before the fork counts.
        self.inherited_profiler = self.profiler_used
        # A lock that another thread of the parent held at the fork stays held in the child,
        # where that thread does not exist: the uninstall below waited on it for ever (a
        # DataLoader worker forked while a queue's feeder thread, in a timed wait, closed a
        # gone worker's file under Waits.dropping: fastai's training hung in 5 runs of 12).
        # The child has one thread: every lock it may take is made anew.
        self.lock, self.tick_lock = threading.RLock(), threading.Lock()
        for hooks in (self.modules, self.waits):
            if hooks is not None:
                hooks.renew_locks()
        self.uninstall_hooks()

    def uninstall_hooks(self) -> None:
        """The program's module calls and graph replays go straight to torch again."""
        if self.modules is not None:
            self.modules.uninstall()
        if self.replays is not None:
            self.replays.uninstall()
        if self.waits is not None:
            self.waits.uninstall()
        if self.full_gcs is not None:
            self.full_gcs.uninstall()
        if self.optimizers is not None:
            self.optimizers.uninstall()
        if self.backwards is not None:
            self.backwards.uninstall()
        if self.saves is not None:
            self.saves.uninstall()

    def matches(self, name: str) -> bool:
        # "serving step" (the light pass chose the serving ranges): every one of them
        return self.pattern is not None and rangenames.matches_step(name, self.pattern)

    def step_key(self, name: str) -> str:
        """The name a matching range's step is counted under: torch.profiler's steps are
        one loop whose every step has a name of its own (ProfilerStep#0, #1, ...), counted
        under the glob, as the light pass's series is; counted per name, the window would
        never reach its warm-up."""
        return self.pattern if self.pattern == rangenames.PROFILER_STEP_GLOB else name

    def family_step(self, name: str, opening: bool) -> str | None:
        """The step a serving range opens or closes, or None when it is nested in another
        serving range of the same thread (SGLang writes a vLLM-style
        ``execute_32_context_0(...)_generation_32(...)`` around each ``step[DECODE bs=32]``:
        one iteration, one step). The serving ranges are one family whose names change
        step by step, so the step is counted under the family's name: counted per name,
        the window would open on the first range and never reach its warm-up or its end."""
        key = (threading.get_ident(), self.pattern)
        depth = self.serving_depth.get(key, 0)
        self.serving_depth[key] = depth + 1 if opening else max(depth - 1, 0)
        outermost = depth == 0 if opening else depth == 1
        return self.pattern if outermost else None

    # -- api.StepListener: perfdoctor.region / perfdoctor.step / --step-fn --

    def step_start(self, name: str) -> None:
        if not self.disabled and (self.pattern is None or self.matches(name)):
            self.begin_step(name)

    def step_end(self, name: str) -> None:
        if not self.disabled and (self.pattern is None or self.matches(name)):
            self.end_step(name)

    def declared(self, name: str) -> None:
        """A new declaration goes straight into a running trace; nothing else to do."""

    # -- record_function / NVTX ranges (see ranges.hook_ranges) --

    def range_start(self, name: str) -> None:
        if self.disabled:
            return
        if name.startswith(rangenames.LOOP_PREFIXES[1:]):
            self.tally_mark()
        if self.matches(name):
            if self.pattern != rangenames.SERVING_STEP:
                self.begin_step(self.step_key(name))
            elif (step := self.family_step(name, opening=True)) is not None:
                self.begin_step(step)
        elif name.startswith(DECLARE_PREFIX):
            self.declarations[name] = None
        elif self.mode == "light" and not name.startswith("perfdoctor."):
            self.start_timing(name)  # the light pass times every range: the step may be any

    def range_end(self, name: str, exhausted: bool = False, profiler_exit: bool = False, last_batch: tuple[int, bool] | None = None) -> None:
        """A range closes. ``exhausted``: a data loader's fetch that raised StopIteration;
        ``profiler_exit``: a ProfilerStep#N that torch.profiler's exit closed. Neither is a
        step, the step named by ``--step`` or not: the light pass keeps each apart from
        ``series`` (a fetch named by --step: its pass's end, as when the step is chosen).
        ``last_batch``: a data loader's fetch that yielded its pass's last batch by its length,
        (its iterator's id, True): the light pass notes its host start (``last_batches``); or
        one past that length, (its id, False): the length was an estimate, and the note made
        for that iterator is taken back (:func:`perfdoctor.record.bootstrap.ranges._yielded_all`)."""
        if self.disabled:
            return
        exhausted = exhausted and name.startswith(rangenames.DATA_LOADER_PREFIX)
        apart = self.exhausted if exhausted else self.profiler_exit if profiler_exit else None
        if self.matches(name):
            if self.pattern != rangenames.SERVING_STEP:
                key = self.step_key(name)
                self.end_step(key, step=apart is None)
                if apart is not None and self.mode == "light":
                    self.times.move_last(key, apart)
            elif (step := self.family_step(name, opening=False)) is not None:
                self.end_step(step)
        elif self.mode == "light" and not name.startswith("perfdoctor."):
            self.end_timing(name)
            if apart is not None:
                self.times.move_last(name, apart)
        if last_batch is not None and self.times.host.get(name):
            iterator, last = last_batch
            if last:
                self.last_batches.setdefault(name, []).append(self.times.host[name][-1])
                self.last_batch_of[iterator] = (name, self.times.host[name][-1])
            elif (noted := self.last_batch_of.pop(iterator, None)) is not None:
                self.last_batches[noted[0]].remove(noted[1])

    def start_timing(self, name: str) -> None:
        """The light pass: a step or range starts (after waiting for its lockstep turn, so
        the wait lies before the step's clock)."""
        if self.turns is not None:
            self.turns.acquire()
        self.times.start(name)

    def end_timing(self, name: str) -> None:
        self.times.end(name)
        if self.turns is not None:
            self.turns.release()
        self.stop_module_timing(name)

    def stop_module_timing(self, name: str) -> None:
        """A range or a perfdoctor step repeats: it is the step (module calls come last in
        the order of metrics.md), so the light pass stops timing module calls. Not a
        library's range (``nccl:_all_gather_base`` inside every forward of a sharded model)
        nor a warm-up range: those are never the step. Nor a CUDA graph's replays: they are
        the step only when one graph is nearly all of them, and a module compiled with
        ``mode="reduce-overhead"`` replays its graphs inside each of its calls. Nor the
        backward calls: they come after module calls (a model's forward is the step of a
        loop that updates its parameters by hand). A module's
        compiled ``__call__`` narrows module timing instead of ending it: its eager calls
        are the same step."""
        if (
            self.modules is not None
            and self.modules.active
            and not self.keep_modules
            and self.times.count(name) >= 2
            and rangenames.kind(name) not in (rangenames.LIBRARY, rangenames.WARMUP, rangenames.REPLAY, rangenames.BACKWARD)
        ):
            if name in self.compiled_modules:
                # A module's compiled call (transformers' generate compiles the model's
                # __call__ for the decode steps and runs the prefill eager): its eager calls
                # are the same step, so its class stays timed — narrowed, at one wrapper per
                # eager call of a depth-0 class; a compiled call runs no Module.__call__.
                self.keep_modules = True
                self.modules.narrow()
            elif rangenames.kind(name) == rangenames.LOOP:
                # torch's loop ranges: the step is the loop iteration, and whether one holds
                # the model's work tells a fetch that `break` left (no batch used) from others;
                # an iteration that trained nothing (no backward, no optimizer step) keeps its
                # model's calls timed: a generator's tokens may be the steps
                self.keep_modules = True
                self.modules.keep_work(timed=not rangenames.trains(list(self.times.host)))
            else:
                self.modules.uninstall()

    # -- steps --

    def begin_step(self, name: str) -> None:
        with self.lock:
            index = self.counts.get(name, 0)
            self.counts[name] = index + 1
            if threading.get_ident() != self.main_ident:
                self.worker_steps[name] = self.worker_steps.get(name, 0) + 1
            if self.window_state == "before" and index == self.warmup:
                self.window_name = name
                self.open_window()
            if self.mode == "ncu" and name == self.window_name:
                self.ncu_range(index, begin=True)
        if self.mode == "light":
            self.start_timing(name)

    def end_step(self, name: str, step: bool = True) -> None:
        """A step ends (``step``: False for a range that began as one and holds no step, the
        ProfilerStep#N the profiler's exit closed: no tick for it)."""
        if self.mode == "light":
            self.end_timing(name)
        training_fetch = self.trained and name.startswith(rangenames.DATA_LOADER_PREFIX)
        with self.lock:
            index = self.counts.get(name, 1) - 1
            if self.mode == "ncu" and name == self.window_name:
                self.ncu_range(index, begin=False)
            # the window's whole steps: a loop mark that opens its iteration (a fetch, a
            # zero_grad at the top) ends the one before it, so --steps N holds N of them and the
            # mark of the next (before: N - 1, the last range's iteration cut by the window's end);
            # so does a module step's call, timed as the loop iteration too (word_language_model's
            # forward: --steps 10 traced 9, the 10th call's backward and update after the window)
            if training_fetch:
                held = self.window_trained  # the training iterations; this fetch ended the last
            elif (rangenames.kind(name) == rangenames.LOOP and not rangenames.closes_iteration(name)) or name == self.module_step:
                held = index - self.warmup
            else:
                held = index + 1 - self.warmup
            closed = self.window_state == "open" and name == self.window_name and self.steps and held >= self.steps
            if closed:
                self.close_window()
        if step and training_fetch:
            self.untallied = name  # ticked by its iteration's optimizer mark, if one comes
        elif step:
            self.tick()
        if closed and self.config.stop_after_window and not self.disabled and os.getpid() == self.pid:  # never from a fork
            self.stop_after_window()

    def tally_mark(self) -> None:
        """An optimizer's ``step`` or ``zero_grad`` begins: the fetch whose iteration it is in
        is a training step (one tick); from now on only such fetches tick."""
        self.trained = True
        if self.untallied is not None:
            self.window_trained += self.window_state == "open" and self.untallied == self.window_name
            self.untallied = None
            self.tick()

    def tick(self, flush: bool = False) -> None:
        """Tell ``perfdoctor run`` a step ended: one byte per step, written at most every
        0.1 s (a write per step would be a syscall inside every step of the program)."""
        if self.progress_fd is None:
            return
        self.unsent_ticks += not flush
        now = time.perf_counter_ns()
        if self.unsent_ticks and (flush or now - self.last_tick_ns >= 100_000_000):
            # steps end on several threads at once (a pool's requests): one of them sends,
            # where each sent the same count (2,978 dots for 2,000 steps)
            with self.tick_lock:
                if not flush and now - self.last_tick_ns < 100_000_000:
                    return  # another thread sent them meanwhile
                sent, self.unsent_ticks, self.last_tick_ns = self.unsent_ticks, 0, now
            try:
                os.write(self.progress_fd, b"." * sent)
            except OSError:
                self.progress_fd = None

    def ncu_range(self, index: int, begin: bool) -> None:
        """The NVTX range ``perfdoctor_ncu`` around the ``ncu_steps`` steps after the warm-up,
        the kernels ncu's filter keeps (torch.cuda.nvtx: the default domain, which the filter
        names). A loop marker (the data loader's ``__next__``, an optimizer's ``zero_grad`` or
        ``step``) only marks where an iteration starts, its range holding none of the
        iteration's kernels (a DataLoader's fetch, H100: "no kernel profiled"): for those the
        range runs from the first marked occurrence to the occurrence after the last step."""
        first, stop = self.warmup, self.warmup + int(self.config.ncu_steps or 1)
        nvtx = sys.modules["torch"].cuda.nvtx
        if rangenames.kind(self.window_name) == rangenames.LOOP:
            if begin and index == stop:
                nvtx.range_pop()
            if begin and index == first:
                nvtx.range_push(NCU_RANGE)
        elif first <= index < stop and begin:
            nvtx.range_push(NCU_RANGE)
        elif first <= index < stop:
            nvtx.range_pop()

    # -- the window --

    def open_window(self) -> None:
        self.window_state = "open"
        if self.mode == "torch":
            if on_main_thread():
                self.stop_profiler(export=False)  # a whole-program trace started "just in case"
                self.start_profiler()
            elif self.profiler is not None:
                # Kineto must start and stop on the thread that registered it (a start on a
                # worker thread crashed a CUDA program with SIGSEGV): keep the trace that
                # began on the main thread at program start, covering every thread.
                self.trace_scope = "the whole program: the steps ran on a worker thread, and the profiler only starts and stops on the main thread"
                self.redeclare()
            else:
                self.trace_error = "the steps ran on a worker thread and no trace was started on the main thread"
        elif self.mode == "nsys" and self.config.capture_range:
            sys.modules["torch"].cuda.profiler.start()
            self.mark_clock()
            self.redeclare()

    def close_window(self) -> None:
        self.window_state = "closed"
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()  # the last step's kernels finish inside the trace
        if self.mode == "torch":
            if on_main_thread():
                self.stop_profiler(export=True)
            # else: stopped and exported on the main thread when the program ends
        elif self.mode == "nsys" and self.config.capture_range:
            sys.modules["torch"].cuda.profiler.stop()

    def stop_after_window(self) -> None:
        """--duration: the window is traced (the torch trace exported, nsys's range closed),
        so the rest of a long program is of no use to this pass: end it as perfdoctor's
        timeout would, by SIGTERM (main.install_signals: an exception in the main thread,
        whichever thread closed the window), so that its own ``finally`` blocks run."""
        self.stopped = True
        os.kill(self.pid, signal.SIGTERM)

    def mark_clock(self) -> None:
        """A tiny range whose start we also read on CLOCK_MONOTONIC: it lets the bundle put
        NVML samples (taken by another process) on the trace's clock."""
        mono = time.monotonic_ns()
        m = api.marks()
        m.pop(m.push(CLOCK_SYNC_RANGE))
        self.clock_sync = {"monotonic_ns": mono}

    def redeclare(self) -> None:
        """Every step declaration seen so far, again, into the trace that just started: a
        window that opens after the program declared its steps must still carry them."""
        api.redeclare()
        m = api.marks()
        for name in self.declarations:
            m.pop(m.push(name))

    def start_profiler(self) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)
        extra: dict[str, Any] = {}
        if self.config.step_thread != "main":
            # Steps on a worker thread (or not known to be on the main one): record the ops
            # of every thread, not just the one that starts the profiler.
            try:
                from torch._C._profiler import _ExperimentalConfig

                extra["experimental_config"] = _ExperimentalConfig(profile_all_threads=True)
            except (ImportError, TypeError):  # an older torch: the main thread only
                pass
        if self.program_profiler is not None:
            return  # the program traces itself: its trace is the pass's (guard_program_profiler)
        self.profiler = profile(activities=activities, record_shapes=True, **extra)
        self.profiler_used = True
        self.own_tracer_call = True
        try:
            with compiler_left_unloaded():
                self.profiler.start()
        finally:
            self.own_tracer_call = False
        self.mark_clock()
        self.redeclare()

    def warm_profiler(self) -> None:
        """Start and stop a CPU-only torch profiler once, before the program (the torch pass):
        a process's first start loads Kineto, paid here rather than inside a step of the
        program's once the window opens. That first start took 1.7 s on this 2-CPU box (2 s
        under load, 3.7 s on the H200): a loop paced to 30 fps held a 1 s frame, and a producer
        ran ahead meanwhile (a ``Pool.imap`` made every batch, and the window saw no wait for
        one). Most of it was torch importing its compiler (:func:`compiler_left_unloaded`); what
        is left is 1 ms. CPU activity only: CUDA's profiling interface would initialise CUDA,
        which the program may still configure (``CUDA_VISIBLE_DEVICES`` set in its own code)."""
        from torch.profiler import ProfilerActivity, profile

        self.torch_rss_mb = max_rss_mb()  # before the profiler's own share (watch_trace)
        self.own_tracer_call = True  # not the program's profiler (guard_program_profiler)
        try:
            with compiler_left_unloaded(), profile(activities=[ProfilerActivity.CPU]):
                pass
        finally:
            self.own_tracer_call = False

    def stop_profiler(self, export: bool) -> None:
        if self.profiler is None:
            return
        prof, self.profiler = self.profiler, None
        try:
            prof.stop()
            if export:
                self.export_trace(prof)
        except Exception as exc:  # noqa: BLE001 - the reason goes into the manifest
            self.trace_error = f"{type(exc).__name__}: {exc}"

    def export_trace(self, prof: Any) -> None:
        """JSON first, then gzip at level 1 (gzip_into): torch's own ".gz" export compresses
        at level 9, 5x slower for a 1.8x smaller file; a whole-program trace of a loop of
        small ops (1.4 GB of JSON) spent ~30 s there."""
        part = self.config.trace + ".part.json"
        try:
            prof.export_chrome_trace(part)
            gzip_into(part, self.config.trace)
        finally:
            if os.path.exists(part):
                os.remove(part)

    def guard_program_profiler(self) -> None:
        """Kineto keeps one profiling session per process: a program that runs its own
        torch profiler (the tutorial's ``with profile(schedule=...) as prof: ... prof.step()``)
        crashed under perfdoctor's (SIGSEGV, torch 2.13 on the CPU). So perfdoctor's tracer
        steps aside: when the program's profiler begins tracing, perfdoctor stops its own
        and starts none after, and the program's first trace becomes the pass's — with the
        program's own activities and schedule, which the manifest's trace scope says. Both
        torch.profiler.profile and torch.autograd.profiler.profile go through the hooked
        methods. A trace saves once, so the program's own export (on_trace_ready) is copied,
        and one the program never exports is saved when it has ended."""
        from torch.autograd import profiler as autograd_profiler

        cls = autograd_profiler.profile
        prepare, export = cls._prepare_trace, cls.export_chrome_trace
        session = self

        def _prepare_trace(prof: Any) -> Any:
            if not session.own_tracer_call and session.program_profiler is None:
                session.program_profiler = prof
                session.stop_profiler(export=False)
                session.trace_scope = (
                    "the program's own torch profiler trace (its activities and schedule): Kineto traces once per "
                    "process, so perfdoctor's tracer stepped aside"
                )
            return prepare(prof)

        def export_chrome_trace(prof: Any, path: Any, *args: Any, **kwargs: Any) -> Any:
            result = export(prof, path, *args, **kwargs)
            if prof is session.program_profiler and not session.program_trace_kept:
                session.keep_program_trace(str(path))
            return result

        cls._prepare_trace, cls.export_chrome_trace = _prepare_trace, export_chrome_trace

    def keep_program_trace(self, path: str) -> None:
        """A trace file of the program's profiler, copied (gzipped) where the pass's goes."""
        self.program_trace_kept = True
        try:
            gzip_into(path, self.config.trace)
        except Exception as exc:  # noqa: BLE001 - the reason goes into the manifest
            self.trace_error = f"the program's own torch profiler trace could not be kept: {type(exc).__name__}: {exc}"

    def save_program_trace(self) -> None:
        """At the end: the trace of a program's profiler that the program never exported."""
        prof = self.program_profiler
        if prof is None or self.program_trace_kept:
            return
        part = self.config.trace + ".part.json"
        try:
            prof.export_chrome_trace(part)  # copied by the hook above
        except Exception as exc:  # noqa: BLE001 - the reason goes into the manifest
            self.trace_error = (f"the program's own torch profiler trace could not be kept (perfdoctor's tracer "
                                f"stepped aside for it): {type(exc).__name__}: {exc}")
        finally:
            if os.path.exists(part):
                os.remove(part)

    # -- lifecycle --

    def begin(self) -> None:
        """Before the program: with no step known in advance, or a step that may run on a
        worker thread, trace the whole program from the main thread until (and unless) a
        step opens the window on the main thread."""
        if self.tokens_per_step() is not None:
            api._declare(self.pattern, self.tokens_per_step(), None)  # type: ignore[arg-type]
        if self.mode == "torch" and (not self.config.windowed or self.config.step_thread != "main"):
            self.whole_program = True
            self.start_profiler()
            if not self.config.windowed and self.config.trace_rss_mb is not None and self.profiler is not None:
                # the profiler's own memory (Kineto's start) is no event's
                fixed = max_rss_mb() - self.torch_rss_mb if self.torch_rss_mb is not None else 0.0
                self.watch_trace(self.config.trace_rss_mb + fixed)
        elif self.mode == "nsys" and not self.config.capture_range:
            self.mark_clock()

    def watch_trace(self, limit_mb: float) -> None:
        """A trace begun with the program because no step was known holds every op the
        program runs: a 2 s loop of small CPU ops (jacobi_solve.py --device cpu --n 64
        --sweeps 50000) made 2.1M events, a 48 s torch pass and 1.4 GB of JSON. The tracer
        keeps its events in the process's memory (0.7-16 KB per op measured on the CPU: with
        record_shapes it holds on to each output's memory), so a thread reads the process's
        peak resident memory; once it reaches ``limit_mb`` (the light pass's peak, the
        profiler's own share and --trace-budget) the trace is stopped and exported, and
        the program runs on untraced. Kineto stops only on the thread that started it, the
        main one: ``_thread.interrupt_main`` runs the slot's handler there at its next
        bytecode, with no OS signal to interrupt a system call of the program's."""
        began = time.monotonic()
        due = threading.Event()

        def cut(signum: int, frame: Any) -> None:
            if not due.is_set():
                return  # the OS's own SIGURG: ignored, as by default
            signal.signal(TRACE_CUT_SIGNAL, previous)
            if self.profiler is None or self.window_state != "before" or self.finished:
                return  # the program's own profiler took over, or the program is ending
            self.trace_cut = {"seconds": round(time.monotonic() - began, 3), "rss_mb": round(max_rss_mb(), 1)}
            self.stop_profiler(export=True)
            self.window_state = "closed"  # its scope is worded by the runner (record.passes.torch_pass)
            if self.config.stop_after_window:
                self.stop_after_window()

        def watch() -> None:
            while self.profiler is not None and not self.finished:
                if max_rss_mb() >= limit_mb:
                    due.set()
                    if signal.getsignal(TRACE_CUT_SIGNAL) is cut:  # else the program took the slot: trace on
                        _thread.interrupt_main(TRACE_CUT_SIGNAL)
                    return
                time.sleep(TRACE_WATCH_S)

        if signal.getsignal(TRACE_CUT_SIGNAL) not in (signal.SIG_DFL, signal.SIG_IGN):
            return  # the program's own handler (set before us: a parent's, inherited) keeps the slot
        previous = signal.signal(TRACE_CUT_SIGNAL, cut)
        self.signal_handlers[TRACE_CUT_SIGNAL] = (cut, previous)
        threading.Thread(target=watch, name="perfdoctor-trace-memory", daemon=True).start()

    def tokens_per_step(self) -> float | None:
        tokens = self.config.tokens_per_step
        return float(tokens) if tokens is not None and self.pattern and self.mode != "light" else None

    def finish(self, trace: bool = True) -> None:
        """Close open steps, stop tracing, export, write results. Runs exactly once, and
        only in the process perfdoctor started (never in a forked child). ``trace`` False:
        leave the torch profiler alone (stopped from a thread other than the one that
        started it, Kineto crashed: SIGSEGV), the results say why there is no trace."""
        with self.lock:
            if self.finished or self.disabled or os.getpid() != self.pid:
                return
            self.finished = True
        self.uninstall_hooks()
        api.end_step()
        self.tick(flush=True)
        if self.mode == "torch" and not trace:
            self.trace_error = "the program left by os._exit from a thread other than its main one, where the profiler cannot be stopped: no trace"
        elif self.mode == "torch":
            self.stop_profiler(export=self.window_state != "before" or self.whole_program)
            self.save_program_trace()
        elif self.mode == "nsys" and self.window_state == "open" and self.config.capture_range:
            sys.modules["torch"].cuda.profiler.stop()
        self.write_results()

    def write_results(self) -> None:
        torch = sys.modules.get("torch")
        env: dict[str, Any] = {}
        if torch is not None:
            env = {"torch": torch.__version__, "cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available()}
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                env["device_name"] = torch.cuda.get_device_name()
        # the CPUs the program may run on: steps on more threads at once than these wait for each other
        env["cpus"] = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        results = PassResults(
            pass_=self.mode,
            pid=self.pid,
            step_counts=self.counts,
            worker_steps=self.worker_steps,
            window_step=self.window_name,
            window_state=self.window_state,
            whole_program=self.whole_program and self.window_state == "before",
            trace_scope=self.trace_scope,
            trace_error=self.trace_error,
            trace_cut=self.trace_cut,
            max_rss_mb=round(max_rss_mb(), 1),
            clock_sync=self.clock_sync,
            environment=env,
            program_error=self.program_error,
            exit_code=self.exit_code,
            terminated=self.terminated,
            stopped_after_window=self.stopped or None,
            children=self.children or None,
            ended_at_ns=time.time_ns(),  # wall clock: which rank of a job failed first
        )
        if self.config.rank:  # a rank of a torchrun job (perfdoctor.record.launch)
            results.rank = self.config.rank
            results.device = rank_device(torch)
        if self.turns is not None:
            results.lockstep = self.turns.summary()
        if self.mode == "light":
            results.series, error = self.times.series()
            if self.optimizers is not None:
                self.optimizers.annotate(results.series, self.times)
            exhausted, exhausted_error = self.exhausted.series()
            results.exhausted = exhausted or None
            results.last_batches = self.last_batches or None
            profiler_exit, exit_error = self.profiler_exit.series()
            results.profiler_exit = profiler_exit or None
            error = error or exhausted_error or exit_error
            results.step_end_clock = "cuda-event" if self.timer.clock is not None else "host"
            results.declared = self.declared_steps()
            # the steps off the main thread, each step's thread as timed (module calls too:
            # a server's worker runs its model's forward)
            results.worker_steps = self.times.off_thread(self.main_ident)
            if self.modules is not None:
                results.modules, module_error = self.modules.series()
                results.module_classes = self.modules.classes
                results.worker_steps.update(self.modules.times[0].off_thread(self.main_ident))
                results.module_work_ns = self.modules.work_ns or None
                results.module_work_grad = self.modules.work_grad or None
                results.module_work_end_ns = self.modules.work_end_ns or None
                error = error or module_error
            results.waits = self.waits.series() if self.waits is not None else None
            results.compiles = self.compiles.series() if self.compiles is not None else None
            results.full_gcs = self.full_gcs.series() if self.full_gcs is not None else None
            results.saves = self.saves.series() if self.saves is not None else None
            results.program_ns = [self.started_ns, time.perf_counter_ns()]
            results.timing_error = error
        try:
            with open(self.config.results, "w") as f:
                json.dump(results.to_json(), f)
        except OSError as exc:  # the bundle is gone (the program removed it) or unwritable: perfdoctor run says so
            print(f"perfdoctor: this pass's results could not be written ({exc.strerror or exc}: {exc.filename})", file=sys.stderr)

    def declared_steps(self) -> dict[str, dict[str, float]]:
        """Per step name, the tokens and bytes the program declared (perfdoctor.region's
        arguments, or ``perfdoctor.declare`` ranges such as the bundled engine's)."""
        out = {name: dict(values) for name, values in api._declarations.items()}
        for text in self.declarations:
            parsed = parse_declaration(text)
            if parsed is not None:
                out.setdefault(parsed[0], {}).update(parsed[1])
        return out
