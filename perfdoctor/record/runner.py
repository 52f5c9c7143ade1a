"""Running the program once, as a process: :class:`Runner` starts a pass under the
bootstrap (and a tool's wrapper), forwards signals to it, stops it at ``--timeout``, shows
its progress, reads back its :class:`~perfdoctor.bundle.protocol.PassResults`, and keeps the
manifest it writes after each step of the run."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from perfdoctor.bundle import layout as bundles
from perfdoctor.bundle.protocol import Manifest, PassConfig, PassResults, PassRun, TimedOut
from perfdoctor.collectors import nvml
from perfdoctor.errors import UsageError
from perfdoctor.record import launch, progress
from perfdoctor.record.options import RunOptions
from perfdoctor.record.stdin import ReplayedStdin
from perfdoctor.record.target import target_name
from perfdoctor.text import rich as esc  # program arguments, paths and step names are untrusted
from perfdoctor.text import setting, value

TAIL_CHARS = 2000
TIMEOUT_GRACE_S = 10  # after --timeout's SIGTERM, the ranks have this long to write their results
RANK_POLL_S = 1.0  # how often a multi-rank job's ranks are looked at for one that runs on alone


@dataclass
class PassResult:
    name: str
    command: list[str]
    exit_code: int | None = None
    seconds: float = 0.0
    steps: int = 0
    stderr_tail: str = ""
    results: PassResults = field(default_factory=PassResults)  # rank 0's in a multi-rank run
    stopped: str | None = None  # --duration ended the program: "after its window" or "at --duration N s"
    ranks: dict[int, PassResults | None] = field(default_factory=dict)  # every rank's results; None: it wrote none


class Runner:
    """Runs the passes, keeps the manifest current, and turns signals into a clean stop."""

    def __init__(self, options: RunOptions, console: Console, bundle: Path | None = None, stdin: ReplayedStdin | None = None) -> None:
        """A new bundle under ``options.out``; or ``bundle``, an existing one to add passes to.
        ``stdin``: the command's, shared by its runners (else one of its own; its owner
        closes it)."""
        self.options = options
        self.console = console
        self.child: subprocess.Popen[bytes] | None = None
        self.interrupted: int | None = None  # the signal that stopped the run
        self.stdin = stdin or ReplayedStdin(replay=options.ranks is None)  # the same input for every pass
        self.bundle = bundle or bundles.new_bundle_dir(options.out, options.name or target_name(options.target))
        self.raw = self.bundle / bundles.RAW
        self.manifest = Manifest()  # execute's, or the reopened bundle's
        self.spinner = True  # False while another runner's pass runs at the same time (lockstep)
        self.window: progress.Window | None = None  # the running pass's traced window, where it stops after it

    @contextlib.contextmanager
    def forwarding_signals(self, *others: Runner) -> Iterator[None]:
        """SIGINT and SIGTERM go to the running program (and to those of ``others``, runners
        whose passes run at the same time), and stop the run after it."""
        def on_signal(signum: int, frame: Any) -> None:
            for runner in (self, *others):
                runner._on_signal(signum, frame)

        old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, handler in old.items():
                signal.signal(s, handler)

    # -- signals: the program gets them (same process group, or forwarded); we stop after it --

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.interrupted = signum
        child = self.child
        if child is not None and child.poll() is None:
            try:
                child.send_signal(signum)
            except OSError:
                pass

    def save(self) -> None:
        bundles.write_json_atomic(self.bundle / bundles.MANIFEST, self.manifest.to_json())

    def say(self, text: str) -> None:
        if not self.options.quiet:
            self.console.print(text, highlight=False)

    @contextlib.contextmanager
    def live(self, name: str, first: bool, ticks: progress.Ticks, start: float, until: int | None = None) -> Iterator[None]:
        """Progress while the pass runs (:mod:`perfdoctor.record.progress`): steps done,
        elapsed, time left, on stderr. A spinner on a terminal, for passes whose program
        output goes to a log; a line every period otherwise (a log, or the first pass, whose
        program owns the terminal). ``until``: the steps after which the pass stops the
        program (--duration's traced passes)."""
        if self.options.quiet or not self.spinner:
            yield
            return
        light = next((run for run in map(PassRun.from_json, self.manifest.passes) if run.name == "light"), None)
        expected = progress.expected_of(self.manifest.light_pass, light and light.seconds, until, self.options.duration_s)
        stop = threading.Event()

        def text() -> str:
            return progress.line(name, ticks, time.monotonic() - start, expected)

        with contextlib.ExitStack() as stack:
            if self.console.is_terminal and not first:
                status = stack.enter_context(self.console.status(f"{name} pass"))
                period, show = 0.5, lambda: status.update(text())
            else:
                period, show = progress.period_s(), lambda: self.console.print(text(), highlight=False, markup=False)

            def tick() -> None:
                while not stop.wait(period):
                    show()

            ticker = threading.Thread(target=tick, daemon=True)
            ticker.start()
            try:
                yield
            finally:
                stop.set()
                ticker.join()

    def run_pass(self, name: str, wrapper: list[str], config: PassConfig, sampler: nvml.Sampler | None,
                 mode: str | None = None, keep_fds: tuple[int, ...] = ()) -> PassResult:
        """Run the program once, under ``wrapper`` (a tool's command line) if given.

        ``name`` names its files in ``raw/``; ``mode`` is what the bootstrap does (default
        ``name``: a repeated light pass ``light-2`` runs in mode ``light``). ``keep_fds`` go
        to the program (its lockstep pipes) and are closed here once it started.

        The first pass owns the terminal (the program's stdout and stderr); later passes
        write the program's and the tool's output to ``raw/<pass>.log``, so the program's
        output appears once. Every pass reads the same stdin (:class:`ReplayedStdin`; a
        terminal's: the first pass only).
        """
        first = not self.manifest.passes
        with self.stdin.for_pass(first) as (stdin, record):
            return self._run_pass(name, wrapper, replace(config, stdin_record=record), sampler, mode, keep_fds, first, stdin)

    def _run_pass(self, name: str, wrapper: list[str], config: PassConfig, sampler: nvml.Sampler | None, mode: str | None,
                  keep_fds: tuple[int, ...], first: bool, stdin: Any) -> PassResult:
        read_fd, write_fd = os.pipe()
        results = self.raw / f"{name}.json"
        # Under a tool the pipe may not reach the program, and its fd number may then name
        # another file there: the bootstrap writes ticks only to the pipe with this identity.
        # Ranks would tick once each per step: none.
        tick_fd = None if self.options.ranks else write_fd
        pipe = os.fstat(write_fd)
        config = replace(config, pass_=mode or name, results=str(results.resolve()), progress_fd=tick_fd,
                         progress_pipe=[pipe.st_dev, pipe.st_ino])
        result = PassResult(name, [*wrapper, *self.program(name, config)])
        log = None if first else self.raw / f"{name}.log"
        ticks = progress.Ticks(per=(not first and self.manifest.light_pass and self.manifest.light_pass.marks_per_step) or 1)
        start = time.monotonic()

        def count_steps() -> None:
            while chunk := os.read(read_fd, 4096):
                ticks.add(len(chunk), time.monotonic() - start)

        reader = threading.Thread(target=count_steps, daemon=True)
        reader.start()
        self.say(f"[bold]{name}[/] pass: {esc(' '.join(result.command[: len(wrapper) + 1] if wrapper else self.options.target))}")
        if sampler is not None:
            sampler.start()
        try:
            until = (config.warmup + config.steps) // ticks.per if config.stop_after_window and config.steps else None
            self.window = progress.Window(ticks, config.warmup // ticks.per, until) if until else None
            with open(log if log else os.devnull, "wb") as out, self.live(name, first, ticks, start, until):
                redirect: dict[str, Any] = {"stdin": stdin, **({} if first else {"stdout": out, "stderr": subprocess.STDOUT})}
                self.spawn(result, redirect, write_fd, ((write_fd,) if tick_fd is not None else ()) + keep_fds, keep_fds)
        finally:
            self.child, self.window = None, None
            if sampler is not None:
                sampler.stop()
            reader.join(timeout=2)
            os.close(read_fd)
        result.seconds = round(time.monotonic() - start, 3)
        result.steps = ticks.done
        if log is not None and log.exists():
            result.stderr_tail = log.read_text(errors="replace")[-TAIL_CHARS:]
        self.read_results(result, results)
        result.stopped = result.stopped or ("after its window" if result.results.stopped_after_window else None)
        code = result.exit_code
        how = f"stopped {result.stopped}" if result.stopped else f"exit {code}" if code is None or code >= 0 else f"killed by signal {-code}"
        counted = f"{result.steps} steps, " if result.steps else ""
        self.say(f"[bold]{name}[/] pass: {counted}{value(result.seconds, 's')}, {how}")
        if not (first or wrapper or self.interrupted) and code and code > 0 and PassRun.from_json(self.manifest.passes[0]).exit_code == 0:
            # the same program ran to its end in the first pass: what changed is what that run
            # left behind (under nsys or ncu the status may be the tool's own: not said there)
            error = result.results.program_error or (result.stderr_tail.strip().splitlines() or [""])[-1]
            self.say(f"[yellow]{name} pass: the program failed here{f' ({esc(error[:300])})' if error else ''} but ran to its end in "
                     f"the first pass: something an earlier pass left (a file or folder it made, a port it holds) may stop a "
                     f"second run; its output: {esc(log)}[/]")
        return result

    def program(self, name: str, config: PassConfig) -> list[str]:
        """The bootstrap's command line for one pass (every rank's under torchrun), with
        ``config`` written where it reads it."""
        config_path = self.raw / f"{name}.config.json"
        bundles.write_json_atomic(config_path, config.to_json())
        if self.options.ranks is not None:
            return self.options.ranks.command(config_path.resolve(), self.options.target, self.raw.resolve() / launch.FAILURES.format(name))
        return [sys.executable, "-m", "perfdoctor.record.bootstrap.main", str(config_path.resolve()), *self.options.target]

    def spawn(self, result: PassResult, redirect: dict[str, Any], write_fd: int, pass_fds: tuple[int, ...],
              keep_fds: tuple[int, ...]) -> None:
        """Start ``result.command`` and wait for it; ``write_fd`` (the tick pipe's write end)
        and ``keep_fds`` are closed here, the latter as soon as the program holds them."""
        try:
            # A torchrun job gets a session of its own, so that --timeout can stop every rank at once.
            self.child = subprocess.Popen(result.command, pass_fds=pass_fds, start_new_session=self.options.ranks is not None,
                                          **redirect)
        except OSError as exc:
            result.stderr_tail = f"could not start {result.command[0]}: {exc}"
        else:
            for fd in keep_fds:  # the program's now: its end-of-file must reach the other program
                os.close(fd)
            keep_fds = ()
            result.exit_code = self.wait(self.child, result)
        finally:
            os.close(write_fd)
            for fd in keep_fds:
                os.close(fd)

    def read_results(self, result: PassResult, results: Path) -> None:
        """The pass's results (every rank's in a torchrun job) into ``result``, and the
        program's environment into the manifest."""
        if self.options.ranks is not None:
            result.ranks = launch.gather(self.raw, result.name)
            result.results = result.ranks.get(0) or result.results
            launch.record_pass(self.manifest, result.name, result.ranks, launch.torchrun_failures(self.raw, result.name), result.stopped)
        if result.ranks.get(0) is None:
            try:
                result.results = PassResults.from_json(json.loads(results.read_text()), str(results))
            except (OSError, ValueError, UsageError):
                pass  # the program died before the bootstrap could write it (or wrote over it)
        # torch / CUDA versions as the program saw them (perfdoctor itself never imports torch).
        for key, value in (result.results.environment or {}).items():
            self.manifest.environment.setdefault(key, value)

    def wait(self, child: subprocess.Popen[bytes], result: PassResult) -> int:
        """The child's exit status; past ``--duration`` or ``--timeout``, whichever comes
        first, it gets SIGTERM (a torchrun job: its whole session, every rank at once, whose
        bootstraps then write their results), then SIGKILL after :data:`TIMEOUT_GRACE_S` (a
        rank blocked inside a collective never returns to Python to handle the SIGTERM).
        --duration's stop is planned (``result.stopped``), --timeout's a failure.

        A traced pass that --duration reaches inside its window gets the time to finish it
        (it then stops the program itself, :meth:`PassConfig.stop_after_window`): up to
        --timeout, or as long again as --duration without one. Stopped inside it, the pass
        kept a window cut short (the torch pass 4 of its 6 steps) or, under ncu, nothing."""
        name, duration, timeout = result.name, self.options.duration_s, self.options.timeout_s
        limit = min((t for t in (duration, timeout) if t is not None), default=None)

        def stop(sig: int) -> None:
            with contextlib.suppress(OSError):
                os.killpg(child.pid, sig) if self.options.ranks is not None else child.send_signal(sig)

        try:
            return self._wait_watching_ranks(child, name, limit) if self.options.ranks is not None else child.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            if duration is not None and limit == duration:
                window, grace = self.window, (timeout - duration) if timeout is not None else duration
                if window is not None and window.under_way() and grace > 0:
                    self.say(f"{name} pass: --duration {setting(duration)} s reached inside its traced window ({window.ticks.done} "
                             f"of {window.closes} steps): letting the window finish, {setting(grace)} s more at most")
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        return child.wait(timeout=grace)
                result.stopped = f"at --duration {setting(duration)} s"
                self.say(f"{name} pass: --duration {setting(duration)} s reached: stopping the program")
            else:
                self.manifest.timed_out = TimedOut(pass_=name, after_s=timeout).to_json()
                self.say(f"[yellow]{name} pass: still running after --timeout {setting(timeout)} s: stopping it[/]")
            stop(signal.SIGTERM)
            try:
                return child.wait(timeout=TIMEOUT_GRACE_S)
            except subprocess.TimeoutExpired:
                stop(signal.SIGKILL)
                return child.wait()

    def _wait_watching_ranks(self, child: subprocess.Popen[bytes], name: str, limit: float | None) -> int:
        """``child.wait(timeout=limit)`` for a multi-rank job, saying once when a rank runs
        on :func:`perfdoctor.record.progress.straggler_s` after another rank's program ended
        (or the job after every rank's did): a rank blocked for good in a collective looks
        like a run that never ends."""
        deadline = None if limit is None else time.monotonic() + limit
        first_end, said = None, False
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(child.args, limit or 0)
            try:
                return child.wait(timeout=RANK_POLL_S if left is None else min(RANK_POLL_S, left))
            except subprocess.TimeoutExpired:
                pass
            if said:
                continue
            ended, running = launch.ended_ranks(self.raw, name)
            now = time.monotonic()
            first_end = first_end if first_end is not None or not ended else now
            if first_end is not None and now - first_end >= progress.straggler_s():
                self.say(f"[yellow]{name} pass: {esc(progress.straggler_note(running, ended, now - first_end))}[/]")
                said = True


def shell_code(returncode: int | None) -> int:
    """A process's status as a shell reports it: 128 + N when signal N killed it."""
    if returncode is None:
        return 1
    return 128 - returncode if returncode < 0 else returncode
