"""Runs inside the target's interpreter: sets up collection, then runs the program.

``perfdoctor run`` starts ``python -m perfdoctor.record.bootstrap.main CONFIG.json SCRIPT ARGS...`` (or
``... CONFIG.json -m MODULE ARGS...``). The program then runs as ``python SCRIPT ARGS`` would
run it: same interpreter, ``sys.argv``, ``sys.path[0]``, working directory, environment,
stdin and stdout, ``__name__ == "__main__"``, exit code (a ``sys.exit(3)`` exits 3, an
uncaught exception prints its traceback and exits 1, Ctrl-C dies of SIGINT).

Around it the bootstrap does what the pass in CONFIG asks:

* follows the program's steps — ``perfdoctor.region`` / ``perfdoctor.step()`` (always), every
  call of ``--step-fn module:function``, and ``record_function`` / NVTX ranges whose name
  matches ``--step``;
* ``light``: times every step (host start to the end of its GPU work) with no tracer, and
  leaves torch's import to the program (its hooks follow it: :func:`when_imported`);
* ``torch``: runs ``torch.profiler`` over the ``--warmup``/``--steps`` window (the whole
  program when no step shows up) and mirrors NVTX ranges into it;
* ``nsys``: mirrors ``record_function`` into NVTX and, with a window, brackets it with
  ``cudaProfilerStart/Stop`` for ``nsys --capture-range=cudaProfilerApi``;
* ``ncu``: pushes an NVTX range ``perfdoctor_ncu`` around the first ``ncu_steps`` steps after
  the warm-up, which ``ncu --nvtx-include perfdoctor_ncu/`` selects.

Whatever happens to the program (exit, exception, SIGINT, SIGTERM), the trace is exported
and a results JSON written before the process ends, so the bundle stays readable.

This module is the entry point: it reads CONFIG, installs the hooks and runs the program
(:func:`main`). The hooks and the state live beside it: :mod:`.session` (the pass's state and
its results), :mod:`.clock` (the light pass's step timing), :mod:`.ranges` (range hooks and
mirroring) and :mod:`.steps` (module calls, compiled functions, CUDA graph replays and
``--step-fn`` as steps).
"""

from __future__ import annotations

import functools
import gc
import importlib.abc
import importlib.util
import json
import os
import runpy
import signal
import sys
import threading
import time
import traceback
from typing import Any, Callable

from perfdoctor import api
from perfdoctor.bundle.protocol import CHILD_PROGRAM, PassConfig
from perfdoctor.console import leave
from perfdoctor.names import ranges as rangenames
from perfdoctor.record.bootstrap.clock import FullCollections, TimedCalls
from perfdoctor.record.bootstrap.ranges import hook_ranges
from perfdoctor.record.bootstrap.session import Session
from perfdoctor.record.bootstrap.steps import (
    WINDOWING_FUNCTIONS, ModuleSteps, install_aoti_steps, install_backward_calls, install_compiled_steps, install_graph_replays,
    install_optimizer_steps, install_step_fn, install_windowing,
)
from perfdoctor.record.bootstrap.waits import Waits
from perfdoctor.record.launch import rank_config
from perfdoctor.record.stdin import record_stdin


class Terminated(BaseException):
    """Raised in the main thread on SIGTERM so ``finally`` blocks run and the trace is saved."""


# --- running the program -----------------------------------------------------------------


def prepare_target(target: list[str]) -> None:
    """``sys.argv`` and ``sys.path[0]`` as ``python SCRIPT ARGS`` / ``python -m MODULE ARGS`` set them."""
    if target[0] == "-m":
        sys.argv = [target[1], *target[2:]]
        sys.path[0] = os.getcwd()
    else:
        sys.argv = list(target)
        sys.path[0] = os.path.dirname(os.path.abspath(target[0]))


def program_excepthook(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
    """An exception the program did not catch, printed as ``python SCRIPT`` prints it: the
    frames of this bootstrap and of runpy, above the program's first, left out (a SyntaxError
    in the script keeps none, as Python prints it). The program may set its own hook."""
    ours = (os.path.dirname(os.path.abspath(__file__)), os.path.abspath(runpy.__file__), "<frozen runpy>")
    while tb is not None and (tb.tb_frame.f_code.co_filename == ours[2] or os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(ours[:2])):
        tb = tb.tb_next
    sys.__excepthook__(kind, exc.with_traceback(tb), tb)  # Python prints the exception's own traceback


def run_target(target: list[str]) -> None:
    """Run the program as ``__main__``."""
    if target[0] == "-m":
        runpy.run_module(target[1], run_name="__main__", alter_sys=True)
    else:
        runpy.run_path(target[0], run_name="__main__")


def collect_imports(light: bool) -> None:
    """Start the program with no garbage-collection debt. Importing torch, perfdoctor's own
    modules and (the torch pass) the profiler's before the program leaves ~160k objects
    (~290k) counted toward the next full collection; alone, a program pays that debt where
    its own allocations put it, and the light pass's few extra allocations per step moved it
    into the loop: an evaluation loop that alone ran no collection in its 192 batches held a
    60-100 ms full one in a batch under the light pass (its own mean 0.77 ms against 0.42
    alone, on the CPU). Collected before the first step (and before :class:`FullCollections`
    listens), the debt is paid outside the program's time; the collections its own
    allocations cause come as they would.

    The light pass leaves torch's import to the program (:func:`when_imported`), whose
    collections should then fall where they fall alone. Collected only, perfdoctor's objects
    stayed in the count a full collection waits on (the objects alive after the last one: a
    quarter of them new before the next), so each of the program's set-up collections came
    later than alone: Keras 3's fit on a DataLoader, whose last one alone ends its set-up, had
    it (178 ms) in a training step, 5 runs of 5. So the light pass freezes them (``gc.freeze``:
    kept out of every collection and its count) and collects again, which leaves that count at
    none, as at the interpreter's start."""
    gc.collect()
    if light:
        gc.freeze()
        gc.collect()


# The checkpoint saves timed beside torch.save, once their module is imported: safetensors'
# (transformers' Trainer saves its model with it), torch.distributed.checkpoint's (torchtitan's)
CHECKPOINT_SAVES = (("safetensors.torch", ("save_file",)), ("torch.distributed.checkpoint", ("save", "async_save")))


def time_saves(session: Session, module: str, names: tuple[str, ...]) -> None:
    """The light pass's timer of checkpoint saves (torch.save's, :class:`TimedCalls`) takes
    ``module``'s functions ``names`` too. Both modules import torch first, so the timer is
    there (hook_torch) to take them."""
    if session.saves is not None:
        for name in names:
            if hasattr(sys.modules[module], name):  # async_save: torch >= 2.3
                session.saves.add(sys.modules[module], name)


def watch_libraries(session: Session) -> None:
    """The light pass's hooks into libraries, each once the program imports it: their
    checkpoint saves (:func:`time_saves`) and sliding-window functions (:func:`install_windowing`)."""
    for module, names in CHECKPOINT_SAVES:
        when_imported(module, functools.partial(time_saves, session, module, names))
    for module, name in WINDOWING_FUNCTIONS:
        when_imported(module, functools.partial(install_windowing, session, module, name))


def when_imported(name: str, then: Callable[[], None]) -> None:
    """Run ``then`` once the module ``name`` is imported, right after its body ran,
    before the importing statement goes on (so ``from torch.cuda.nvtx import range_push``
    binds what ``then`` hooked).

    The light pass imports torch where the program does, not before it: importing it first
    (and collecting its ~170k objects) shifted Python's full collections. Lightning's imports
    (~410k objects) run six alone, the last before ``fit``; after torch's early import they
    ran four, larger, and the last (0.2 s) landed in one of the first training steps, in the
    program's own timer too (its mean per batch 10 ms against 2.5 alone)."""

    class After(importlib.abc.MetaPathFinder):
        busy = False

        def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
            if fullname != name or self.busy:
                return None
            self.busy = True
            try:
                spec = importlib.util.find_spec(fullname)  # the finders after this one
            finally:
                self.busy = False
            loader = spec.loader if spec is not None else None
            if loader is None or not hasattr(loader, "exec_module"):
                return spec
            run = loader.exec_module

            def exec_module(module: Any) -> None:
                try:
                    run(module)
                finally:
                    del loader.exec_module  # the loader's own method again
                    if finder in sys.meta_path:
                        sys.meta_path.remove(finder)
                then()

            loader.exec_module = exec_module
            return spec

    finder = After()
    sys.meta_path.insert(0, finder)


def hook_torch(session: Session, config: PassConfig, torch_ranges: Callable[[], None] | None) -> None:
    """What follows torch: its ranges (``torch_ranges``, :func:`hook_ranges`'s, unless
    hooked already), compiled functions, AOTInductor models, CUDA graph replays, optimizer
    steps, backward calls and module calls as steps, and (the torch pass) the program's own profiler."""
    if torch_ranges is not None:
        torch_ranges()
    if session.mode == "torch":
        session.guard_program_profiler()
    install_compiled_steps(session)
    install_aoti_steps(session)
    session.replays = install_graph_replays(session)
    session.optimizers = install_optimizer_steps(session)
    session.backwards = install_backward_calls(session)
    if session.mode == "light":
        session.saves = TimedCalls(sys.modules["torch"], "save")
    if config.module_step and session.mode != "light":
        session.modules = ModuleSteps(session, mark=config.module_step)
    elif session.mode == "light" and not config.step_fn and (not config.step or config.step.startswith(rangenames.DATA_LOADER_PREFIX)):
        # a data loader's fetch named by --step is timed as the loop iteration, as when it
        # is chosen: the module calls tell the fetch a `break` left (no work after it)
        session.modules = ModuleSteps(session)


def install_signals(session: Session) -> None:
    """SIGTERM becomes an exception in the main thread (SIGINT already is), so the program's
    own ``finally`` blocks and ours run. ``perfdoctor run`` forwards the signals it gets, so
    one Ctrl-C can arrive twice (from the terminal and forwarded): a repeat within half a
    second of the first is dropped instead of interrupting the unwinding. A forked child gets
    the signals' own behaviour back (:meth:`Session.forked`)."""
    last: dict[int, float] = {}

    def repeated(signum: int) -> bool:
        now = time.monotonic()
        again = now - last.get(signum, -1.0) < 0.5
        last[signum] = now
        return again or session.finished

    def on_term(signum: int, frame: Any) -> None:
        if not repeated(signum):
            raise Terminated()

    def on_int(signum: int, frame: Any) -> None:
        if not repeated(signum):
            raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    session.signal_handlers[signal.SIGTERM] = (on_term, signal.SIG_DFL)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, on_int)
        session.signal_handlers[signal.SIGINT] = (on_int, signal.default_int_handler)


def install_os_exit(session: Session) -> None:
    """``os._exit`` finishes the session first: it skips ``finally`` blocks and atexit, so a
    program that leaves by it (to skip a slow teardown, or from a worker pool's shutdown)
    lost both passes — the light pass said "no step seen" and the torch pass "no trace
    written". Only in the process perfdoctor started: a forked child (a DataLoader worker
    ends by ``os._exit``) goes straight out, as :meth:`Session.finish` checks. From another
    thread the results are written but the torch profiler is left running: stopped there,
    Kineto crashed the program (SIGSEGV, 1 run in 3 on the CPU machine)."""
    real = os._exit

    def _exit(code: int) -> None:
        if os.getpid() == session.pid and not session.finished:
            session.exit_code = code
            main = threading.current_thread() is threading.main_thread()
            if main:  # signal() works there only
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # let the export finish
            session.finish(trace=main)
        real(code)

    os._exit = _exit


# Process targets that are part of the program's own loop, not its work moved elsewhere:
# DataLoader workers (their fetches are the loader's steps) and torch's compile workers.
HELPER_TARGETS = ("torch.utils.data._utils.worker._worker_loop", "torch._inductor.")
START_METHODS = {"SpawnProcess": "spawn", "ForkProcess": "fork", "ForkServerProcess": "forkserver"}


def process_work(process: Any) -> str | None:
    """What a multiprocessing process about to start will run, as ``module.function (method)``,
    or None for a helper of the program's own loop (:data:`HELPER_TARGETS`).
    ``torch.multiprocessing.spawn`` starts its ``_wrap(fn, i, args, queue)``: the work is ``fn``."""
    target, args = getattr(process, "_target", None), getattr(process, "_args", ())
    module = getattr(target, "__module__", None) or ""
    if getattr(target, "__qualname__", None) == "_wrap" and module.startswith("torch.multiprocessing") and args:
        target = args[0]
    elif module == "concurrent.futures.process" and len(args) > 2 and (getattr(args[2], "__module__", None) or "").startswith(HELPER_TARGETS):
        # a ProcessPoolExecutor's worker (call queue, result queue, initializer, ...): inductor's
        # pool, with worker_start_method="fork", is known by its initializer
        return None
    if target is None:
        name = f"{type(process).__module__}.{type(process).__qualname__}.run"
    else:
        name = f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', repr(target))}"
    if name.startswith(HELPER_TARGETS):
        return None
    method = START_METHODS.get(type(process).__name__)
    if method is None:  # the default context's Process
        import multiprocessing

        method = multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]  # the first: the default
    return f"{name.replace('__mp_main__.', '__main__.')} ({method})"


# The programs that run a Python program's work (an interpreter, torch's and its peers'
# launchers), counted when the program starts one; git, nvidia-smi or ffmpeg are not its model.
PYTHON_LAUNCHERS = ("python", "torchrun", "accelerate", "deepspeed")


def program_work(args: Any) -> str | None:
    """What a program started through ``subprocess`` runs, from its command line (a list or a
    shell string): a Python interpreter's script or module (``python train.py``, ``python -m
    pkg.train``), a launcher's name (``torchrun``); None for any other program."""
    if isinstance(args, (str, bytes)):
        words = os.fsdecode(args).split()
    elif isinstance(args, os.PathLike):
        words = [os.fsdecode(args)]
    else:
        words = [os.fsdecode(a) if isinstance(a, (str, bytes, os.PathLike)) else str(a) for a in args]
    exe = os.path.basename(words[0]) if words else ""
    if not exe.startswith(PYTHON_LAUNCHERS):
        return None
    if not exe.startswith("python"):
        return exe
    rest = iter(words[1:])
    for word in rest:
        if word == "-m":
            return f"{exe} -m {next(rest, '')}".rstrip()
        if not word.startswith("-"):
            return f"{exe} {word}"
    return exe


def _program_frame() -> bool:
    """Whether the code starting a subprocess (the first caller outside ``subprocess``) is the
    program's own, not the standard library's or an installed package's (a compiler that
    torch's inductor or Triton runs)."""
    import sysconfig

    libraries = tuple({sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")})
    frame = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__") == "subprocess":
        frame = frame.f_back
    return frame is not None and not frame.f_code.co_filename.startswith(libraries)


def watch_children(session: Session) -> None:
    """Count the processes the program starts through ``multiprocessing`` (``Process``,
    ``torch.multiprocessing.spawn``, ``Pool``, ``ProcessPoolExecutor``) by what they run, and
    the Python programs its own code starts through ``subprocess`` (a launcher that runs
    ``python train.py``; :data:`PYTHON_LAUNCHERS`, :data:`perfdoctor.bundle.protocol.CHILD_PROGRAM`), and give
    :class:`Waits` the ``multiprocessing`` ones' pids. perfdoctor times and traces
    the process it started; a program whose model runs in such a child (the DDP tutorial's
    ``mp.spawn``, a serving worker, a launched script) shows nothing here, and the light pass
    says why (:func:`perfdoctor.record.light.light_summary`) instead of "no step seen" alone."""
    import subprocess
    from multiprocessing.process import BaseProcess

    def note(work: str | None) -> None:
        if work is not None:
            session.children[work] = session.children.get(work, 0) + 1

    real_popen = subprocess.Popen.__init__

    def popen(self: Any, args: Any, *more: Any, **kw: Any) -> None:
        if os.getpid() == session.pid:
            try:
                work = program_work(args) if _program_frame() else None
            except Exception:  # noqa: BLE001 - an odd command line must not stop the program's call
                work = None
            note(None if work is None else work + CHILD_PROGRAM)
        real_popen(self, args, *more, **kw)

    subprocess.Popen.__init__ = popen  # type: ignore[method-assign]
    real = BaseProcess.start

    def start(self: Any) -> None:
        mine = os.getpid() == session.pid
        if mine:
            try:
                note(process_work(self))
            except Exception:  # noqa: BLE001 - an odd target must not stop the program's process
                note("a process (its target could not be named)")
        real(self)
        if mine and session.waits is not None:
            session.waits.child_started(self.pid)  # its work counts toward our waits (a producer process)

    BaseProcess.start = start  # type: ignore[method-assign]


def main(argv: list[str]) -> None:
    if len(argv) < 3:
        raise SystemExit("usage: python -m perfdoctor.record.bootstrap.main CONFIG.json (SCRIPT | -m MODULE) [ARGS...]")
    with open(argv[1]) as f:
        config = rank_config(PassConfig.from_json(json.load(f), argv[1]), os.environ)
    target = argv[2:]
    session = Session(config)
    if session.turns is not None:
        session.turns.pin()  # before torch starts its thread pool
    # The traced passes import torch first, so its range functions are hooked before the
    # program binds them (`from torch.cuda.nvtx import range_push`) and the tracer's set-up
    # is paid before the program; the light pass hooks them as the program imports torch
    # (when_imported), which leaves Python's collections where they fall alone.
    found = "torch" not in sys.modules and importlib.util.find_spec("torch") is not None
    later = found and session.mode == "light"
    if found and not later:
        import torch  # noqa: F401

    api.marks()  # bind the original range functions before hook_ranges patches them
    api.subscribe(session)
    torch_ranges = hook_ranges(session, nvtx_to_torch=session.mode == "torch", torch_to_nvtx=session.mode in ("nsys", "ncu"))
    install_signals(session)
    install_os_exit(session)
    watch_children(session)
    session.waits = Waits(session)
    if session.mode == "torch" and "torch" in sys.modules:
        session.warm_profiler()  # its imports too are paid before the program (collect_imports)
    collect_imports(session.mode == "light")
    if session.mode == "light":
        session.full_gcs = FullCollections()
        watch_libraries(session)
    if config.stdin_record:
        record_stdin(config.stdin_record)
    prepare_target(target)
    sys.excepthook = program_excepthook
    if config.step_fn:
        main_module = target[1] if target[0] == "-m" else os.path.splitext(os.path.basename(target[0]))[0]
        install_step_fn(config.step_fn, main_module)
    if later:
        when_imported("torch", lambda: hook_torch(session, config, torch_ranges))
    elif "torch" in sys.modules:
        hook_torch(session, config, None)
    terminated = False
    try:
        session.begin()
        run_target(target)
        session.exit_code = 0
    except Terminated:
        terminated = session.terminated = True
    except SystemExit as exc:
        session.exit_code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if session.inherited_profiler and os.getpid() != session.pid:
            leave(exc.code)
        raise  # the program's own exit status, whatever it is
    except BaseException as exc:
        if session.inherited_profiler and os.getpid() != session.pid:
            traceback.print_exc()
            leave(1)
        session.program_error = f"{type(exc).__name__}: {exc}"[:500]
        session.exit_code = None if isinstance(exc, KeyboardInterrupt) else 1
        raise
    finally:
        if os.getpid() == session.pid:
            on_int = signal.signal(signal.SIGINT, signal.SIG_IGN)  # let the export finish
            session.finish()
            signal.signal(signal.SIGINT, on_int)
    if session.inherited_profiler and os.getpid() != session.pid:
        leave(0)
    if terminated and session.stopped:
        # --duration: the pass ended the program itself, its window traced (stop_after_window):
        # a normal end for the tool around it (Nsight Compute printed no counters for a program
        # that died of the SIGTERM, H100), without waiting for threads that never end (a server's)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    if terminated:
        # Die of SIGTERM like the program would have, so the exit status says so.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


if __name__ == "__main__":
    main(sys.argv)
