"""``perfdoctor run``: profile an unmodified program, pass by pass, into a run bundle.

The program runs once per pass, each time exactly as ``python SCRIPT ARGS`` would run it
(through :mod:`perfdoctor.record.bootstrap.main`):

1. ``light`` — no tracer. Step latencies (host start to end of the step's GPU work) and
   NVML samples: the numbers that are not perturbed by tracing. It also finds the step
   name the later passes window on (``--step``, the perfdoctor API, ``--step-fn``, else
   the most frequent range).
2. ``torch`` — torch.profiler over the ``--warmup``/``--steps`` window (+ NVML samples).
3. ``nsys`` — the whole command under ``nsys profile``, exported to SQLite.
4. ``ncu`` — the command under ``ncu``, replaying the kernels of ``--ncu-steps`` steps.

Each collector gets a status in ``manifest.json``: ``ok``, ``unavailable: why`` or
``failed: the tool's stderr tail``. The manifest is written before the first pass and after
each one, so a crash or Ctrl-C leaves a bundle ``perfdoctor analyze`` can read. The exit
code is the program's (from the first pass); a program killed by signal N gives 128 + N;
``--timeout`` stops a pass still running after that long, skips the later passes and exits
124. A torchrun job (``--nproc-per-node`` or a torchrun command line) runs every rank under
the bootstrap into ``raw/rank<k>/``: see :mod:`perfdoctor.record.launch`.
"""

from __future__ import annotations

import contextlib
import fnmatch
import importlib.util
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

from rich.console import Console

from perfdoctor.bundle import layout as bundles
from perfdoctor.bundle.protocol import LightPass, PassConfig, PassResults
from perfdoctor.record import launch
from perfdoctor.analysis import steady, steps
from perfdoctor.names import ranges as rangenames
from perfdoctor.collectors import ncu, nsys_run, nvml
from perfdoctor.record import progress
from perfdoctor.errors import UsageError
from perfdoctor.text import rich as esc  # program arguments, paths and step names are untrusted

COLLECTORS = ("torch", "nvml", "nsys", "ncu")
TAIL_CHARS = 2000
DEFAULT_WARMUP = 1  # steps skipped before the traced window when no light pass found the steady state
# Below this many steps the scout does not move the window: the reference steady_start
# compares against (the median of the second half) then rests on four steps or fewer, and a
# noisy loop (an 8-step CPU loop on a shared machine put its steady start anywhere in 0-4
# over three runs) would move the window at random.
SCOUT_MIN_STEPS = 10
TIMEOUT_GRACE_S = 10  # after --timeout's SIGTERM, the ranks have this long to write their results


@dataclass
class RunOptions:
    """What ``perfdoctor run`` was asked to do (validated by :func:`options_from_cli`)."""

    target: list[str]  # ["script.py", *args] or ["-m", "module", *args]
    collect: list[str] | None = None  # None: every available collector
    light: bool = True
    warmup: int | None = None  # None: the light pass's steady-state start (DEFAULT_WARMUP without it)
    steps: int = 10  # 0: every step after the warm-up
    step: str | None = None
    step_fn: str | None = None
    out: Path = Path("perfdoctor-runs")
    name: str | None = None
    ncu_steps: int = 1
    ncu_kernels: int = 2000
    nvml_interval_ms: int = 50
    quiet: bool = False
    tokens_per_step: float | None = None
    ranks: launch.Launch | None = None  # a torchrun job: every rank under the bootstrap (perfdoctor.record.launch)
    timeout_s: float | None = None  # a pass still running after this long is stopped (a hung rank)


@dataclass
class PassResult:
    name: str
    command: list[str]
    exit_code: int | None = None
    seconds: float = 0.0
    steps: int = 0
    stderr_tail: str = ""
    results: PassResults = field(default_factory=PassResults)  # rank 0's in a multi-rank run
    ranks: dict[int, PassResults | None] = field(default_factory=dict)  # every rank's results; None: it wrote none


# --- availability -----------------------------------------------------------------------


def gpu_present() -> bool:
    """An NVIDIA GPU is visible (driver /proc entries or device nodes), without importing torch."""
    try:
        if os.listdir("/proc/driver/nvidia/gpus"):
            return True
    except OSError:
        pass
    return any(name[6:].isdigit() for name in os.listdir("/dev") if name.startswith("nvidia"))


def availability() -> dict[str, str | None]:
    """Per collector: None when it can run here, else why not."""
    gpu = gpu_present()
    no_gpu = "no NVIDIA GPU on this machine (no /proc/driver/nvidia/gpus, no /dev/nvidiaN)"
    torch_missing = None if importlib.util.find_spec("torch") else f"torch is not installed for {sys.executable}"
    nsys_missing = None if nsys_run.find_nsys() else f"nsys not found (looked in {nsys_run.where_looked()})"
    ncu_missing = None if ncu.find_ncu() else "ncu not found ($NCU, PATH, /opt/nvidia/nsight-compute, /usr/local/cuda*/bin)"
    return {
        "torch": torch_missing,
        "nvml": nvml.probe(),
        "nsys": nsys_missing or (None if gpu else no_gpu),
        "ncu": ncu_missing or (None if gpu else no_gpu),
    }


# --- the step of the light pass -----------------------------------------------------------


def choose_module(modules: dict[str, dict[str, Any]]) -> tuple[int, str] | None:
    """The outermost repeating module call: the shallowest depth (0, then 1) whose most
    frequent class completed at least two calls, and that class. Depth 1 wins only when no
    depth-0 call repeats (a wrapper module whose one call runs the whole loop)."""
    for depth in sorted(modules, key=int):
        counts = {name: len(s["gpu_end_ns"]) for name, s in modules[depth].items()}
        name = max(counts, key=lambda n: counts[n], default=None)  # ties: the first seen
        if name is not None and counts[name] >= 2:
            return int(depth), name
    return None


def find_step(results: PassResults, options: RunOptions) -> tuple[str | None, str | None, dict[str, Any] | None, bool]:
    """(step name, how it was found, the module step, whether its series was rewritten: timed
    as the loop iteration or merged from serving ranges) from the light pass's results.

    The choice is :func:`perfdoctor.analysis.steps.choose_step`, the one ``analyze`` makes on
    a trace: the user's markers (``--step``, perfdoctor.region/step, ``--step-fn``), serving
    ranges, calls of a torch.compile-d function, ..., the outermost repeating module call
    last. A name that marks the loop iteration (a compiled call, torch's data loader or
    optimizer range, a module call) gets a series timed as the iteration, written back into
    ``results.series``."""
    series = results.step_series()
    counts = {name: len(s["gpu_end_ns"]) for name, s in series.items()}
    api_counts = results.step_counts or {}
    if options.step is not None:
        user = [n for n in counts if n == options.step or fnmatch.fnmatchcase(n, options.step)]
        if not user:
            return None, None, None, False
    else:
        user = [n for n in api_counts if counts.get(n)]
    modules: dict[str, int] = {}
    found = choose_module(results.modules or {}) if options.step is None and options.step_fn is None else None
    if found is not None:
        modules[found[1]] = len(results.modules[str(found[0])][found[1]]["gpu_end_ns"])  # type: ignore[index]
    choice = steps.choose_step(counts, user=user, modules=modules)
    if choice is None:
        return None, None, None, False
    name = choice.name
    if choice.kind == "user":
        how = "--step" if options.step is not None else "--step-fn" if options.step_fn is not None else (
            "perfdoctor.region" if name in api_counts else "range")
        return name, how, None, False
    if choice.kind == "serving":
        series[name] = serving_series(series)
        results.series = series
        return name, choice.how, None, True
    module = None
    if choice.kind == "module":
        depth = found[0]  # type: ignore[index]
        calls = results.modules[str(depth)][name]  # type: ignore[index]
        path = (results.module_classes or {}).get(name, name)
        module = {"name": name, "depth": depth, "class": path, "span": "the loop iteration: each call and the host work until the next call"}
    else:
        calls = series[name]
    if choice.iteration:
        # The step is the loop iteration: the call and the host work until the next one
        # (on the H200 an HF generate spent ~0.5 ms per token between forward calls).
        # Without CUDA (host clock) the next call's host start marks the iteration's end.
        starts = calls["gpu_start_ns"] if calls.get("gpu_start_ns") is not None else calls["host_start_ns"]
        ends = steady.iteration_ends_ns(starts, calls["gpu_end_ns"], stop_at_pauses=choice.kind != "loop").tolist()
        timed = {**calls, "gpu_end_ns": ends}
        if choice.kind == "loop":
            # torch's own range is only a part of the iteration (the batch's fetch): the last
            # one has no next start to end its iteration, so it is left out
            timed = {k: (v[:-1] if isinstance(v, list) else v) for k, v in timed.items()}
        if module is None:
            # the calls as measured stay in raw/light.json beside the iteration (a module
            # step's are under "modules"): a later reading can re-derive the iteration
            results.call_series = {**(results.call_series or {}), name: calls}
        series[name] = timed
        results.series = series
    how = choice.how if module is None else f"module: {name.removesuffix('.forward')}"
    return name, how, module, choice.iteration


def serving_series(series: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One series from the serving ranges of one engine (the most frequent): the names
    differ step by step, the steps are one loop. SGLang also writes a vLLM-style range
    around each of its own, so one engine's names only, or each step would count twice."""
    by_engine: dict[str, list[str]] = {}
    for name in series:
        parsed = rangenames.parse_serving(name)
        if parsed is not None:
            by_engine.setdefault(parsed[0], []).append(name)
    names = max(by_engine.values(), key=lambda ns: sum(len(series[n]["host_start_ns"]) for n in ns))
    rows = sorted(
        (h, (series[n]["gpu_start_ns"] or [None] * len(series[n]["host_start_ns"]))[i], series[n]["gpu_end_ns"][i])
        for n in names
        for i, h in enumerate(series[n]["host_start_ns"][: len(series[n]["gpu_end_ns"])])
    )
    cuda = any(series[n]["gpu_start_ns"] is not None for n in names)
    return {
        "host_start_ns": [r[0] for r in rows],
        "gpu_start_ns": [r[1] for r in rows] if cuda else None,
        "gpu_end_ns": [r[2] for r in rows],
    }


def light_summary(results: PassResults, options: RunOptions) -> LightPass:
    """``manifest.light_pass`` from the light pass's results: the scout's report.

    The step (and how it was found), its critical-path times, where its steady state starts
    (:func:`perfdoctor.analysis.steady.steady_start`) and the warm-up the traced passes skip: the
    user's ``--warmup`` when given, else the steady state's start.
    """
    name, how, module, rewritten = find_step(results, options)
    clock = results.step_end_clock
    summary = LightPass(
        step_name=name,
        how=how,
        step_end_clock=clock,
        timing=(
            "critical path per step: end of its GPU work minus the later of its host start and the previous "
            "step's GPU end (CUDA events, no sync added), no tracer"
            if clock == "cuda-event"
            else "host start to host end (the program used no GPU), no tracer"
        ),
        steps_seen=0,
        warmup_explicit=options.warmup is not None,
        module=module,
        iteration=rewritten or None,  # raw/light.json then carries the rewritten series
    )
    if name is None:
        summary = replace(
            summary,
            reason="no step seen (annotate with perfdoctor.region, or pass --step / --step-fn; no record_function/NVTX "
            "range and no torch.nn.Module call repeated)",
            steady_start=0, steady_reason="no step", warmup=options.warmup or 0, step_latency_ms=[],
        )
    else:
        s = results.series[name]  # type: ignore[index]
        cp = steady.critical_path_ns(s["host_start_ns"], s["gpu_end_ns"])
        found = steady.steady_start(cp, steady.paused_before(s["host_start_ns"], s["gpu_end_ns"], s.get("gpu_start_ns")))
        if options.warmup is not None:
            warmup, why = options.warmup, "--warmup"
        elif len(cp) >= SCOUT_MIN_STEPS:
            warmup, why = found.start, "the steady state's start"
        else:
            warmup, why = DEFAULT_WARMUP, f"fewer than {SCOUT_MIN_STEPS} steps: too few to place the window by the steady state"
        threads = (results.worker_steps or {}).get(name, 0)
        summary = replace(
            summary,
            warmup_reason=why,
            steps_seen=len(cp),
            steady_start=found.start,
            steady_reason=found.reason,
            warmup=warmup,
            step_latency_ms=[round(v / 1e6, 6) for v in cp[warmup:].tolist()],
            step_thread="worker" if threads else "main",
        )
    if options.tokens_per_step is not None:
        summary.declared = {"tokens": options.tokens_per_step, "source": "--tokens-per-step"}
    elif name is not None and (results.declared or {}).get(name):
        summary.declared = {**results.declared[name], "source": "the program"}  # type: ignore[index]
    summary.timing_error = results.timing_error or None
    return summary


def steady_steps(results: PassResults, light: LightPass) -> list[tuple[int, int]]:
    """The critical-path interval of every steady step: ``[max(h[k], g[k-1]), g[k]]`` from
    the light pass's warm-up on (the time the steps occupied; pauses between them are not in it)."""
    name = light.step_name
    if name is None:
        return []
    s = results.series[name]  # type: ignore[index]
    h, g = s["host_start_ns"], s["gpu_end_ns"]
    first = light.warmup or 0
    return [(max(h[k], g[k - 1]) if k else h[k], g[k]) for k in range(first, len(g))]


def steady_counters(samples_file: Path, steps: list[tuple[int, int]]) -> tuple[dict[str, Any], str | None]:
    """``light_pass.counters``: each GPM metric over exactly the steady steps (see
    :func:`perfdoctor.collectors.nvml.steps_mean`); plus why there are none."""
    if not steps:
        return {}, "no steady steps"
    if not samples_file.exists():
        return {}, "the light pass had no NVML sampler"
    intervals = nvml.read_intervals(samples_file)
    if not intervals:
        return {}, "no GPM samples (GPM unsupported here, or the pass ended before two samples)"
    out = {}
    for metric in ("dram_bw_util", "sm_occupancy", "sm_util"):
        if metric in intervals:
            out[metric] = {"source": "nvml-gpm", **nvml.steps_mean(intervals[metric], steps)}
    return out, None


# --- running one pass -----------------------------------------------------------------------


class Runner:
    """Runs the passes, keeps the manifest current, and turns signals into a clean stop."""

    def __init__(self, options: RunOptions, console: Console, bundle: Path | None = None) -> None:
        """A new bundle under ``options.out``; or ``bundle``, an existing one to add passes to."""
        self.options = options
        self.console = console
        self.child: subprocess.Popen[bytes] | None = None
        self.interrupted: int | None = None  # the signal that stopped the run
        self.bundle = bundle or bundles.new_bundle_dir(options.out, options.name or target_name(options.target))
        self.raw = self.bundle / bundles.RAW
        self.manifest: dict[str, Any] = {}
        self.spinner = True  # False while another runner's pass runs at the same time (lockstep)

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
        bundles.write_json_atomic(self.bundle / bundles.MANIFEST, self.manifest)

    def say(self, text: str) -> None:
        if not self.options.quiet:
            self.console.print(text, highlight=False)

    @contextlib.contextmanager
    def live(self, name: str, first: bool, ticks: progress.Ticks, start: float) -> Iterator[None]:
        """Progress while the pass runs (:mod:`perfdoctor.record.progress`): steps done,
        elapsed, time left, on stderr. A spinner on a terminal, for passes whose program
        output goes to a log; a line every period otherwise (a log, or the first pass, whose
        program owns the terminal)."""
        if self.options.quiet or not self.spinner:
            yield
            return
        light = next((p for p in self.manifest.get("passes", []) if p["name"] == "light"), None)
        expected = progress.expected_of(self.manifest.get("light_pass"), light and light["seconds"])
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

        The first pass owns the terminal (the program's stdin, stdout and stderr); later
        passes read no stdin and write the program's and the tool's output to
        ``raw/<pass>.log``, so the program's output appears once.
        """
        config_path = self.raw / f"{name}.config.json"
        read_fd, write_fd = os.pipe()
        results = self.raw / f"{name}.json"
        # Under a tool the pipe may not reach the program, and its fd number may then name
        # another file there: the bootstrap writes ticks only to the pipe with this identity.
        # Ranks would tick once each per step: none.
        tick_fd = None if self.options.ranks else write_fd
        pipe = os.fstat(write_fd)
        config = replace(config, pass_=mode or name, results=str(results.resolve()), progress_fd=tick_fd,
                         progress_pipe=[pipe.st_dev, pipe.st_ino])
        bundles.write_json_atomic(config_path, config.to_json())
        if self.options.ranks is not None:
            program = self.options.ranks.command(config_path.resolve(), self.options.target, self.raw.resolve() / launch.FAILURES.format(name))
        else:
            program = [sys.executable, "-m", "perfdoctor.record.bootstrap.main", str(config_path.resolve()), *self.options.target]
        result = PassResult(name, [*wrapper, *program])
        first = not self.manifest["passes"]
        log = None if first else self.raw / f"{name}.log"
        ticks = progress.Ticks()
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
            with open(log if log else os.devnull, "wb") as out, self.live(name, first, ticks, start):
                redirect: dict[str, Any] = {} if first else {"stdin": subprocess.DEVNULL, "stdout": out, "stderr": subprocess.STDOUT}
                try:
                    # A torchrun job gets a session of its own, so that --timeout can stop every rank at once.
                    self.child = subprocess.Popen(result.command, pass_fds=((write_fd,) if tick_fd is not None else ()) + keep_fds,
                                                  start_new_session=self.options.ranks is not None, **redirect)
                except OSError as exc:
                    result.stderr_tail = f"could not start {result.command[0]}: {exc}"
                else:
                    for fd in keep_fds:  # the program's now: its end-of-file must reach the other program
                        os.close(fd)
                    keep_fds = ()
                    result.exit_code = self.wait(self.child, name)
                finally:
                    os.close(write_fd)
                    for fd in keep_fds:
                        os.close(fd)
        finally:
            self.child = None
            if sampler is not None:
                sampler.stop()
            reader.join(timeout=2)
            os.close(read_fd)
        result.seconds = round(time.monotonic() - start, 3)
        result.steps = ticks.done
        if log is not None and log.exists():
            result.stderr_tail = log.read_text(errors="replace")[-TAIL_CHARS:]
        if self.options.ranks is not None:
            result.ranks = launch.gather(self.raw, name)
            result.results = result.ranks.get(0) or result.results
            launch.record_pass(self.manifest, name, result.ranks, launch.torchrun_failures(self.raw, name))
        if result.ranks.get(0) is None:
            try:
                result.results = PassResults.from_json(json.loads(results.read_text()), str(results))
            except (OSError, ValueError, UsageError):
                pass  # the program died before the bootstrap could write it (or wrote over it)
        # torch / CUDA versions as the program saw them (perfdoctor itself never imports torch).
        for key, value in (result.results.environment or {}).items():
            self.manifest["environment"].setdefault(key, value)
        code = result.exit_code
        how = f"exit {code}" if code is None or code >= 0 else f"killed by signal {-code}"
        counted = f"{result.steps} steps, " if result.steps else ""
        self.say(f"[bold]{name}[/] pass: {counted}{result.seconds:.1f} s, {how}")
        return result

    def wait(self, child: subprocess.Popen[bytes], name: str) -> int:
        """The child's exit status; past ``--timeout`` it gets SIGTERM (a torchrun job: its
        whole session, every rank at once, whose bootstraps then write their results), then
        SIGKILL after :data:`TIMEOUT_GRACE_S` (a rank blocked inside a collective never
        returns to Python to handle the SIGTERM)."""
        def stop(sig: int) -> None:
            with contextlib.suppress(OSError):
                os.killpg(child.pid, sig) if self.options.ranks is not None else child.send_signal(sig)

        try:
            return child.wait(timeout=self.options.timeout_s)
        except subprocess.TimeoutExpired:
            self.manifest["timed_out"] = {"pass": name, "after_s": self.options.timeout_s}
            self.say(f"[yellow]{name} pass: still running after --timeout {self.options.timeout_s:g} s: stopping it[/]")
            stop(signal.SIGTERM)
            try:
                return child.wait(timeout=TIMEOUT_GRACE_S)
            except subprocess.TimeoutExpired:
                stop(signal.SIGKILL)
                return child.wait()


def target_name(target: list[str]) -> str:
    return target[1] if target[0] == "-m" else Path(target[0]).stem


def shell_code(returncode: int | None) -> int:
    """A process's status as a shell reports it: 128 + N when signal N killed it."""
    if returncode is None:
        return 1
    return 128 - returncode if returncode < 0 else returncode


def environment() -> dict[str, Any]:
    env: dict[str, Any] = {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "platform": platform.platform(),
        "host": platform.node(),
    }
    try:
        from importlib.metadata import version

        env["perfdoctor"] = version("perfdoctor")
    except Exception:  # noqa: BLE001 - running from a source tree
        pass
    return env


def collector_status(reason: str | None, selected: bool) -> dict[str, Any]:
    if reason is not None:
        return {"status": f"unavailable: {reason}"}
    return {"status": "pending" if selected else "unavailable: not selected (--collect)"}


def execute(options: RunOptions, console: Console) -> tuple[int, Path]:
    """Run every pass; returns (exit code, bundle directory)."""
    runner = Runner(options, console)
    reasons = availability()
    if options.ranks is not None:
        reasons.update(launch.unsupported(reasons))
    selected = list(options.collect) if options.collect is not None else [c for c in COLLECTORS if reasons[c] is None]
    for c in selected:
        if reasons[c] is not None:
            runner.say(f"[yellow]{c}[/]: unavailable: {reasons[c]}")
    runner.manifest = {
        "schema": bundles.SCHEMA,
        "status": "running",
        "command": ["perfdoctor", "run", *options.target],
        "target": options.target,
        "cwd": os.getcwd(),
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(options).items()},
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "exit_code": None,
        "environment": environment(),
        "collectors": {c: collector_status(reasons[c], c in selected) for c in COLLECTORS},
        "passes": [],
    }
    if options.ranks is not None:
        runner.manifest["launch"] = options.ranks.to_json()
        runner.manifest["world_size"] = options.ranks.world_size
    if reasons["nvml"] is None:
        try:
            runner.manifest["gpu"] = nvml.device_info()
        except Exception as exc:  # noqa: BLE001 - the manifest just lacks the GPU facts
            runner.manifest["gpu_error"] = str(exc)
    runner.manifest["calibration"] = cached_calibration(runner.manifest.get("gpu"))
    runner.save()
    runner.say(f"bundle: {esc(runner.bundle)}")

    try:
        with runner.forwarding_signals():
            run_passes(runner, selected, reasons)
    except Exception as exc:
        # A perfdoctor bug: keep the bundle readable and say so, then show the traceback.
        runner.manifest["status"] = f"error: {type(exc).__name__}: {exc}"
        runner.save()
        raise
    passes = runner.manifest["passes"]
    first = passes[0]["exit_code"] if passes else None
    code = 128 + runner.interrupted if runner.interrupted and first in (None, 0) else shell_code(first)
    if options.ranks is not None and runner.interrupted:
        code = 128 + runner.interrupted  # Ctrl-C on a job: every rank ends on the signal, none is to blame
    elif options.ranks is not None and passes:  # the job's code is that of the rank that failed first
        failed = launch.failed_rank(runner.manifest, passes[0]["name"])
        code = shell_code(failed[1]) if failed and failed[1] is not None else code  # code unknown: torchrun's
        runner.manifest["failed_rank"] = failed and {"rank": failed[0], "exit_code": failed[1]}
    if runner.manifest.get("timed_out"):
        code = launch.TIMEOUT_EXIT
    runner.manifest["exit_code"] = code
    runner.manifest["target_exit_code"] = first
    runner.manifest["status"] = "interrupted" if runner.interrupted else "timed out" if runner.manifest.get("timed_out") else "done"
    runner.manifest["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    runner.manifest["step"] = (runner.manifest.get("light_pass") or {}).get("step_name") or options.step or next(
        (p["window_step"] for p in passes if p["window_step"]), None
    )
    runner.save()
    write_metrics(runner)
    if options.ranks is not None and (why := launch.write_cross_rank(runner.bundle)):
        runner.manifest["ranks_error"] = why
        runner.save()
    return code, runner.bundle


def pass_entry(result: PassResult) -> dict[str, Any]:
    """A pass as ``manifest.passes`` lists it."""
    return {
        "name": result.name,
        "command": result.command,
        "exit_code": result.exit_code,
        "seconds": result.seconds,
        "steps": result.steps,
        "window_step": result.results.window_step,
        **({"program_error": result.results.program_error} if result.results.program_error else {}),
        **({"trace_scope": result.results.trace_scope} if result.results.trace_scope else {}),
    }


def run_passes(runner: Runner, selected: list[str], reasons: dict[str, str | None]) -> None:
    options, raw, manifest = runner.options, runner.raw, runner.manifest
    use_nvml = "nvml" in selected and reasons["nvml"] is None
    interval = options.nvml_interval_ms / 1000
    nvml_ok = False
    base = PassConfig(
        warmup=options.warmup if options.warmup is not None else DEFAULT_WARMUP,
        steps=options.steps,
        step=options.step,
        step_fn=options.step_fn,
        tokens_per_step=options.tokens_per_step,
        ranks=options.ranks is not None,  # each rank writes into raw/rank<k>/ (perfdoctor.record.launch)
    )
    windowed = options.step is not None or options.step_fn is not None

    def sampler(pass_name: str, gpm: bool = True) -> nvml.Sampler | None:
        if not use_nvml:
            return None
        try:
            return nvml.Sampler(raw / f"nvml-{pass_name}.jsonl", interval, gpm=gpm)
        except Exception as exc:  # noqa: BLE001 - NVML worked at the probe; say what broke
            manifest.setdefault("nvml_errors", []).append(f"{pass_name}: {exc}")
            return None

    def record(result: PassResult, collector: str | None, status: str | None = None, **extra: Any) -> None:
        manifest["passes"].append(pass_entry(result))
        if collector is not None:
            manifest["collectors"][collector] = {"status": status, "command": result.command, **extra}
        runner.save()

    planned = [p for p in bundles.PASSES if (p == "light" and options.light) or (p in selected and reasons[p] is None)]
    for pass_name in planned:
        if runner.interrupted or manifest.get("timed_out"):
            break
        if pass_name == "light":
            # The light pass samples NVML (and GPM) in perfdoctor's own process: measured on
            # the H200, the program ran as fast with the sampler beside it as without.
            s = sampler("light")
            result = runner.run_pass("light", [], replace(base, windowed=windowed), s)
            light = light_summary(result.results, options)
            if options.ranks is not None:
                launch.rank_lights(manifest, result.ranks, lambda r, w: light_summary(r, replace(options, warmup=w)), light, raw)
            if light.iteration:
                # the chosen series, timed as the loop iteration, joins the named steps, where readers look
                bundles.write_json_atomic(raw / "light.json", result.results.to_json())
            if light.step_name is not None:
                ms = sorted(light.step_latency_ms or [])
                p50 = f", p50 {ms[len(ms) // 2]:.3f} ms" if ms else ""
                runner.say(
                    f"light pass: step {esc(repr(light.step_name))} ({esc(light.how)}) seen {light.steps_seen} times, "
                    f"steady from step {light.steady_start}{p50}"
                )
            light.nvml_sampled = s is not None
            if s is not None:
                steps = steady_steps(result.results, light)
                light.counters, light.counters_reason = steady_counters(raw / "nvml-light.jsonl", steps)
                light.gpm_interval_ms = round(s.gpm_interval_s * 1e3, 3) if s.gpm else None
                light.nvml_means = window_means(raw / "nvml-light.jsonl", steps)
                nvml_ok = nvml_ok or s.error is None
            else:
                light.counters = {}
                light.counters_reason = "no NVML sampler in the light pass (nvml not selected or unavailable)"
            manifest["light_pass"] = light.to_json()
            if s is not None and s.error:  # after light_pass: the manifest's key order is the files' own
                manifest.setdefault("nvml_errors", []).append(f"light: {s.error}")
            if light.step_name is not None:
                # The later passes window on the step the light pass found, inside its steady state.
                base = replace(base, step=light.step_name, warmup=light.warmup or 0, step_thread=light.step_thread,
                               module_step=light.module or None)
                windowed = True
            runner.save()
            record(result, None)
        elif pass_name == "torch":
            trace = raw / bundles.TORCH_TRACE
            s = sampler("torch")
            result = runner.run_pass("torch", [], replace(base, windowed=windowed, trace=str(trace.resolve())), s)
            nvml_ok = nvml_ok or (s is not None and s.error is None)
            if s is not None and s.error:
                manifest.setdefault("nvml_errors", []).append(f"torch: {s.error}")
            if options.ranks is not None:
                status, files = launch.trace_status(result.ranks, raw, bundles.TORCH_TRACE, lambda r, t: torch_status(
                    PassResult("torch", result.command, result.exit_code if r is None else r.exit_code, stderr_tail=result.stderr_tail,
                               results=r or PassResults()), t,
                    runner.interrupted))
                record(result, "torch", status, files=files)
            else:
                record(result, "torch", torch_status(result, trace, runner.interrupted), files=[str(trace.relative_to(runner.bundle))])
        elif pass_name == "nsys":
            run_nsys(runner, base, windowed, sampler("nsys", gpm=False), record)
        elif pass_name == "ncu":
            run_ncu(runner, base, record)
    for name, entry in manifest["collectors"].items():
        if entry.get("status") == "pending" and name != "nvml":
            why = f"the run was interrupted (signal {runner.interrupted})" if runner.interrupted else "an earlier pass timed out (--timeout)"
            entry["status"] = f"failed: not run, {why}"
    if use_nvml:
        files = sorted(str(p.relative_to(runner.bundle)) for p in raw.glob("nvml-*.jsonl"))
        errors = manifest.get("nvml_errors") or []
        manifest["collectors"]["nvml"] = {
            "status": "ok" if nvml_ok and files else f"failed: {'; '.join(errors) or 'no pass ran with the NVML sampler'}",
            "files": files,
            "interval_ms": options.nvml_interval_ms,
        }
        runner.save()


def program_failure(result: PassResult, interrupted: int | None = None) -> str | None:
    """Why a pass is not "ok" whatever its tool wrote: the program exited non-zero, died of a
    signal, or raised; None when it ran to a clean end, or when it stopped because the user
    stopped the run (``interrupted``: the signal perfdoctor run got and passed on)."""
    code = result.exit_code
    error = result.results.program_error
    if interrupted and code in (-interrupted, 128 + interrupted):
        return None
    if interrupted == signal.SIGINT and error and error.startswith("KeyboardInterrupt"):
        return None
    if code is None:
        return result.stderr_tail[-300:] or "the program did not start"
    if code < 0:
        return f"the program was killed by signal {-code}"
    if code != 0:
        return f"the program exited {code}" + (f" ({error})" if error else "")
    return None


def torch_status(result: PassResult, trace: Path, interrupted: int | None = None) -> str:
    r = result.results
    failure = program_failure(result, interrupted)
    if r.trace_error:
        return f"failed: {r.trace_error}"
    if trace.exists():
        return f"failed: {failure} (a trace was written)" if failure else "ok"
    if r.window_state == "before" and not r.whole_program:
        return f"failed: no step reached the window (warmup {r.window_step!r}: {r.step_counts})"
    if failure:
        return f"failed: {failure}, no trace written; output: {result.stderr_tail[-500:]}"
    return f"failed: no trace written (exit {result.exit_code}); output: {result.stderr_tail[-500:]}"


def run_nsys(runner: Runner, base: PassConfig, windowed: bool, sampler: nvml.Sampler | None, record: Any) -> None:
    nsys = nsys_run.find_nsys()
    assert nsys is not None
    report = runner.raw / "nsys"
    sqlite = runner.raw / bundles.NSYS_SQLITE
    metrics_device = str(nvml.device_index()) if isinstance(nvml.device_index(), int) else None
    wrapper = nsys_run.profile_command(nsys, report.resolve(), capture_range=windowed, gpu_metrics_device=metrics_device)
    result = runner.run_pass("nsys", wrapper, replace(base, windowed=windowed, capture_range=windowed), sampler)
    rep = report.with_suffix(".nsys-rep")
    if not rep.exists():
        record(result, "nsys", f"failed: no report written; output: {result.stderr_tail[-800:]}")
        return
    export = nsys_run.export_command(nsys, rep, sqlite)
    done = subprocess.run(export, capture_output=True, text=True)
    failure = program_failure(result, runner.interrupted)
    if done.returncode != 0 or not sqlite.exists():
        status = f"failed: nsys export: {(done.stderr or done.stdout)[-800:]}"
    else:
        status = f"failed: {failure} (a report was written)" if failure else "ok"
    record(result, "nsys", status, export_command=export, files=[str(p.relative_to(runner.bundle)) for p in (rep, sqlite) if p.exists()])


def run_ncu(runner: Runner, base: PassConfig, record: Any) -> None:
    tool = ncu.find_ncu()
    assert tool is not None
    opts = runner.options
    csv = runner.raw / bundles.NCU_CSV
    config = replace(base, windowed=True, ncu_steps=opts.ncu_steps)
    if base.step is None and opts.step_fn is None:
        manifest_light = runner.manifest.get("light_pass") or {}
        if opts.light and manifest_light.get("step_name") is None:
            runner.manifest["collectors"]["ncu"] = {"status": "unavailable: no step found to select kernels (pass --step or --step-fn)"}
            runner.save()
            return
    kernels, source = step_kernels(runner.raw)
    replay = ncu_plan(kernels, source, opts.ncu_kernels)
    runner.say(f"ncu pass: {esc(replay)}")
    result = runner.run_pass("ncu", ncu.command(tool, csv.resolve(), kernels, opts.ncu_kernels), config, None)
    counters = ncu.parse_csv(csv.read_text(errors="replace")) if csv.exists() else None
    if counters is None or counters.empty:
        tail = (csv.read_text(errors="replace")[-800:] if csv.exists() else "") or result.stderr_tail[-800:]
        record(result, "ncu", f"failed: no kernel profiled; {tail}", replay=replay)
        return
    failure = program_failure(result, runner.interrupted)
    status = f"failed: {failure} (counters were written)" if failure else "ok"
    record(result, "ncu", status, files=[str(csv.relative_to(runner.bundle))], kernels=int(counters["correlation"].nunique()),
           step_index=config.warmup, replay=replay)


def step_kernels(raw: Path) -> tuple[ncu.KernelSet | None, str | None]:
    """The distinct kernels of the traced steps, from this run's torch pass (else its nsys
    pass), and which pass; (None, None) when neither left a trace that reads."""
    from perfdoctor.pipeline import load_trace

    for source, path in (("torch", raw / bundles.TORCH_TRACE), ("nsys", raw / bundles.NSYS_SQLITE)):
        if not path.is_file():
            continue
        try:
            return ncu.kernel_set(load_trace(path).kernels), source
        except Exception:  # noqa: BLE001 - a damaged trace: the next one, else the capped replay
            continue
    return None, None


def ncu_plan(kernels: ncu.KernelSet | None, source: str | None, max_kernels: int) -> str:
    """What the ncu pass will replay, in words (said before it runs, kept in the manifest)."""
    if kernels is None:
        return (f"the first {max_kernels} kernel launches of the step window (no torch or nsys trace of this run "
                "to take the step's distinct kernels from)")
    capped = (f", the {len(kernels.names)} largest by GPU time ({kernels.capped} more left out: at most "
              f"{ncu.MAX_DISTINCT} kernels)") if kernels.capped else ""
    return (f"each distinct launch (kernel, grid, block) of the step once: up to {kernels.launches} launches of "
            f"{len(kernels.names) + kernels.capped} kernels, from the {source} pass{capped}")


def window_means(samples_file: Path, steps: list[tuple[int, int]]) -> dict[str, Any]:
    """Plain mean of each NVML metric's samples stamped inside the steady steps' span (kept
    for readers of perfdoctor 0.1 bundles; ``counters`` is the time-weighted GPM value).
    perf_counter and the sampler's CLOCK_MONOTONIC are the same clock on Linux."""
    if not samples_file.exists() or not steps:
        return {}
    table = nvml.read_samples(samples_file)
    inside = table[(table["time_ns"] >= steps[0][0]) & (table["time_ns"] <= steps[-1][1])]
    return {
        metric: {"mean": float(group["value"].mean()), "samples": int(len(group)), "source": str(group["source"].iloc[0])}
        for metric, group in inside.groupby("metric")
    }


def cached_calibration(gpu: dict[str, Any] | None) -> dict[str, Any] | None:
    if not gpu or "uuid" not in gpu:
        return None
    from perfdoctor.record.calibrate import load_calibration

    return load_calibration(gpu["uuid"])


def write_metrics(runner: Runner) -> None:
    """metrics.json from the bundle, when the analysis can run on what was collected."""
    try:
        from perfdoctor.analysis.metrics import analyze
    except ImportError:
        return
    from perfdoctor.collectors.bundle import load_bundle

    try:
        profile = load_bundle(runner.bundle)
        if profile.origin.bundle.activities_from is None:
            runner.manifest["metrics_error"] = profile.origin.bundle.reason
            runner.save()
            return
        analysis = analyze(profile, step=runner.manifest.get("step"))
        bundles.write_json_atomic(runner.bundle / "metrics.json", analysis.to_json())
    except Exception as exc:  # noqa: BLE001 - the bundle stays; analyze can be rerun on it
        runner.manifest["metrics_error"] = f"{type(exc).__name__}: {exc}"
        runner.save()
        runner.say(f"[yellow]metrics not written[/]: {esc(exc)}")


# --- the command line ---------------------------------------------------------------------


def parse_target(args: list[str], module: bool) -> list[str]:
    """``python``'s own argv shape: [SCRIPT, *ARGS] or ["-m", MODULE, *ARGS].

    ``-m`` is a flag, not an option with a value, so that option parsing stops at the
    module name and everything after it reaches the module, as with ``python -m``.
    """
    if not args:
        raise UsageError("nothing to run: give a SCRIPT (or -m MODULE) and its arguments")
    if module:
        return ["-m", *args]
    script = Path(args[0])
    if not script.is_file():
        raise UsageError(f"{script}: no such script")
    return list(args)


CHECK_IMPORT = """
import importlib, importlib.util, sys
sys.path[0] = sys.argv[1]
kind, name, attr = sys.argv[2:5]
try:
    spec = importlib.util.find_spec(name)
except (ImportError, ValueError) as exc:
    print(f"{type(exc).__name__}: {exc}"); sys.exit(1)
if spec is None:
    print(f"no module named {name}"); sys.exit(1)
if kind == "attr":
    try:
        obj = importlib.import_module(name)
    except BaseException as exc:
        print(f"importing {name} failed: {type(exc).__name__}: {exc}"); sys.exit(1)
    for part in attr.split("."):
        if not hasattr(obj, part):
            print(f"{name} has no attribute {attr}"); sys.exit(1)
        obj = getattr(obj, part)
"""


def check_importable(target: list[str], step_fn: str | None) -> None:
    """Before anything runs: ``-m MODULE`` names a module Python can find, and ``--step-fn
    module:function`` (other than the program itself) names an importable module with that
    attribute. Checked in a separate interpreter with the program's ``sys.path[0]`` (its
    folder, or the working directory for ``-m``), so importing the user's module neither
    slows nor changes perfdoctor's own process."""
    path0 = os.getcwd() if target[0] == "-m" else os.path.dirname(os.path.abspath(target[0]))
    checks: list[tuple[str, str, str, str]] = []
    if target[0] == "-m":
        checks.append(("spec", target[1], "", f"-m {target[1]}"))
    if step_fn is not None:
        mod, _, attr = step_fn.partition(":")
        own = target[1] if target[0] == "-m" else Path(target[0]).stem
        if mod not in ("__main__", own):
            checks.append(("attr", mod, attr, f"--step-fn {step_fn}"))
    for kind, name, attr, what in checks:
        try:
            done = subprocess.run([sys.executable, "-c", CHECK_IMPORT, path0, kind, name, attr],
                                  capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise UsageError(f"{what}: could not be checked ({exc})") from None
        if done.returncode != 0:
            why = (done.stdout.strip().splitlines() or done.stderr.strip().splitlines() or ["not importable"])[-1]
            raise UsageError(f"{what}: {why}")


def parse_collect(text: str | None) -> list[str] | None:
    if text is None:
        return None
    names = [c.strip() for c in text.split(",") if c.strip()]
    unknown = [c for c in names if c not in COLLECTORS]
    if unknown or not names:
        raise UsageError(f"--collect: unknown collector {', '.join(unknown) or repr(text)}; choose from {','.join(COLLECTORS)}")
    return names


def main() -> None:
    """``python -m perfdoctor.record.run ARGS``: the same as ``python -m perfdoctor run ARGS``.

    The command itself lives in :mod:`perfdoctor.cli.run`, above this module; the entry is
    dispatched by module name (runpy), so this module does not import the CLI back.
    """
    import runpy

    sys.argv = ["perfdoctor", "run", *sys.argv[1:]]
    runpy.run_module("perfdoctor", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
