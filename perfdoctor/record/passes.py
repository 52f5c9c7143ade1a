"""The passes, one function each: :func:`light_pass`, :func:`torch_pass`, :func:`nsys_pass`
and :func:`ncu_pass`, run in that order by :func:`run_passes`; each runs the program once
(:meth:`perfdoctor.record.runner.Runner.run_pass`) and records the pass and its collector's
status in the manifest."""

from __future__ import annotations

import signal
import statistics
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from perfdoctor.bundle import layout as bundles
from perfdoctor.bundle.protocol import Collector, PassConfig, PassResults, PassRun
from perfdoctor.collectors import ncu, nsys_run, nvml
from perfdoctor.record import launch
from perfdoctor.record.light import carries_series, light_summary, steady_counters, steady_steps, window_means, window_warmup
from perfdoctor.record.options import DEFAULT_WARMUP
from perfdoctor.record.runner import PassResult, Runner
from perfdoctor.collectors.tools import find_tool
from perfdoctor.names import ranges as rangenames
from perfdoctor.text import rich as esc  # program arguments, paths and step names are untrusted
from perfdoctor.text import value


def pass_entry(result: PassResult) -> dict[str, Any]:
    """A pass as ``manifest.passes`` lists it."""
    return PassRun(
        name=result.name,
        command=result.command,
        exit_code=result.exit_code,
        seconds=result.seconds,
        steps=result.steps,
        window_step=result.results.window_step,
        program_error=result.results.program_error or None,
        trace_scope=result.results.trace_scope or None,
        stopped=result.stopped,
    ).to_json()


@dataclass
class Plan:
    """What the passes share: the runner, the config each pass starts from (the light pass
    narrows it to the step it found) and the NVML sampling."""

    runner: Runner
    base: PassConfig
    windowed: bool  # the window is known before the program runs
    use_nvml: bool
    nvml_ok: bool = False  # a pass sampled NVML without an error
    # the program failed in the light pass before any step (a missing file, a bad argument, an
    # import error): the traced passes would fail the same way, after the same start-up
    failed: str | None = None
    light_rss_mb: float | None = None  # the light pass's peak memory (PassResults.max_rss_mb)

    def unwindowed(self) -> None:
        """The traced passes from here on trace from the program's start, with no step: a
        torch trace stops at the light pass's peak memory plus --trace-budget."""
        budget = self.runner.options.trace_budget_mb
        limit = self.light_rss_mb + budget if self.light_rss_mb is not None and budget else None
        self.base = replace(self.base, step=None, module_step=None, step_thread=None, trains=None, backward_marks=None,
                            trace_rss_mb=limit)
        self.windowed = False

    def sampler(self, pass_name: str, gpm: bool = True) -> nvml.Sampler | None:
        if not self.use_nvml:
            return None
        try:
            return nvml.Sampler(self.runner.raw / f"nvml-{pass_name}.jsonl", self.runner.options.nvml_interval_ms / 1000, gpm=gpm)
        except Exception as exc:  # noqa: BLE001 - NVML worked at the probe; say what broke
            self.nvml_error(f"{pass_name}: {exc}")
            return None

    def nvml_error(self, text: str) -> None:
        manifest = self.runner.manifest
        manifest.nvml_errors = [*(manifest.nvml_errors or []), text]

    def record(self, result: PassResult, collector: str | None, status: str | None = None, **extra: Any) -> None:
        manifest = self.runner.manifest
        manifest.passes.append(pass_entry(result))
        if collector is not None:
            manifest.collectors[collector] = Collector(status=status, command=result.command, **extra).to_json()
        self.runner.save()


def run_passes(runner: Runner, selected: list[str], reasons: dict[str, str | None]) -> None:
    options, manifest = runner.options, runner.manifest
    base = PassConfig(
        warmup=options.warmup if options.warmup is not None else DEFAULT_WARMUP,
        steps=options.steps,
        step=options.step,
        step_fn=options.step_fn,
        tokens_per_step=options.tokens_per_step,
        ranks=options.ranks is not None,  # each rank writes into raw/rank<k>/ (perfdoctor.record.launch)
        # --duration: a traced pass ends the program once its window is traced; not a rank, whose
        # peers would wait for it in their next collective (the runner stops them all at once)
        stop_after_window=options.duration_s is not None and options.ranks is None or None,
    )
    plan = Plan(runner, base, windowed=options.step is not None or options.step_fn is not None,
                use_nvml="nvml" in selected and reasons["nvml"] is None)
    planned = [p for p in bundles.PASSES if (p == "light" and options.light) or (p in selected and reasons[p] is None)]
    for pass_name in planned:
        if runner.interrupted or manifest.timed_out or plan.failed:
            break
        PASSES[pass_name](plan)
    for name, entry in manifest.collectors.items():
        if Collector.from_json(entry).status == "pending" and name != "nvml":
            why = (f"the run was interrupted (signal {runner.interrupted})" if runner.interrupted else "an earlier pass timed out (--timeout)"
                   if manifest.timed_out else f"the program failed in the light pass before any step: {plan.failed}")
            manifest.collectors[name] = Collector(status=f"failed: not run, {why}").to_json()
    if plan.use_nvml:
        files = sorted(str(p.relative_to(runner.bundle)) for p in runner.raw.glob("nvml-*.jsonl"))
        errors = manifest.nvml_errors or []
        manifest.collectors["nvml"] = Collector(
            status="ok" if plan.nvml_ok and files else f"failed: {'; '.join(errors) or 'no pass ran with the NVML sampler'}",
            files=files,
            interval_ms=options.nvml_interval_ms,
        ).to_json()
        runner.save()


def light_pass(plan: Plan) -> None:
    runner, options, raw, manifest = plan.runner, plan.runner.options, plan.runner.raw, plan.runner.manifest
    # The light pass samples NVML (and GPM) in perfdoctor's own process: measured on
    # the H200, the program ran as fast with the sampler beside it as without.
    s = plan.sampler("light")
    result = runner.run_pass("light", [], replace(plan.base, windowed=plan.windowed, stop_after_window=None), s)
    light = light_summary(result.results, options)
    failure = program_failure(result, runner.interrupted)
    if light.step_name is None and result.results.pid is None:
        # the bootstrap writes what it saw at the program's exit: a program killed (SIGKILL,
        # a crash) never got there, and "no module call repeated" would be a wrong reason
        oom = " (SIGKILL: often the out-of-memory killer)" if result.exit_code == -signal.SIGKILL else ""
        light.reason = (f"no step seen: {failure or 'the program ended'}{oom} before the light pass could "
                        "write what it saw, at its exit")
    elif light.step_name is None and failure:
        light.reason = f"no step seen: {failure} before any step"  # not "no module call repeated": it failed
    elif light.step_name is None and result.stopped:
        # no step in the time allowed: most often a start-up (a model's load) longer than it
        light.reason = (f"no step seen before --duration stopped the program ({result.stopped}): a longer --duration lets "
                        f"its start-up finish; {(light.reason or 'no step repeated').removeprefix('no step seen: ')}")
    if options.ranks is not None:
        launch.rank_lights(manifest, result.ranks, lambda r, w: light_summary(r, replace(options, warmup=w)), light, raw, carries_series,
                           result.results)
    if carries_series(light, result.results):
        # the chosen series, timed as the loop iteration (or its steps noted: noted_steps),
        # joins the named steps, where readers look
        bundles.write_json_atomic(raw / "light.json", result.results.to_json())
    if light.step_name is not None:
        ms = light.step_latency_ms or []
        p50 = f", p50 {value(statistics.median(ms), 'ms')}" if ms else ""  # analyze's step_latency_ms_p50 (np.percentile's 50th)
        runner.say(
            f"light pass: step {esc(repr(light.step_name))} ({esc(light.how)}) seen {light.steps_seen} times, "
            f"steady from step {light.steady_start}{p50}"
        )
        if light.other_phase:
            runner.say(f"light pass: {esc(light.other_phase)}")
    elif light.reason:
        runner.say(f"light pass: {esc(light.reason)}")  # else the bundle's step is silently the trace's guess
    if light.step_name is None and failure and options.ranks is None:
        plan.failed = failure
        runner.say("light pass: the traced passes are not run (they would fail the same way): fix the program or its arguments and run again")
    light.nvml_sampled = s is not None
    if s is not None:
        steps = steady_steps(result.results, light)
        light.counters, light.counters_reason = steady_counters(raw / "nvml-light.jsonl", steps)
        light.gpm_interval_ms = round(s.gpm_interval_s * 1e3, 3) if s.gpm else None
        light.nvml_means = window_means(raw / "nvml-light.jsonl", steps)
        plan.nvml_ok = plan.nvml_ok or s.error is None
    else:
        light.counters = {}
        light.counters_reason = "no NVML sampler in the light pass (nvml not selected or unavailable)"
    manifest.light_pass = light
    if s is not None and s.error:
        plan.nvml_error(f"light: {s.error}")
    plan.light_rss_mb = result.results.max_rss_mb
    if light.step_name is None:
        # no step to window on: the torch pass traces from the program's start, and stops
        # where its buffers outgrow what the program held alone (Session.watch_trace)
        plan.unwindowed()
    else:
        # The later passes window on the step the light pass found, inside its steady state.
        # --steps counts steps; the traced passes count the step range's occurrences
        plan.base = replace(plan.base, step=light.step_name, warmup=window_warmup(result.results, light, plan.base.steps), step_thread=light.step_thread,
                            steps=plan.base.steps * (light.marks_per_step or 1),
                            module_step=light.module or None, trains=light.trains)
        if (light.step_name.startswith(rangenames.DATA_LOADER_PREFIX) and not light.trains
                and rangenames.BACKWARD_RANGE in (result.results.series or {})):
            # the traced passes count the training batches as the light pass did (d2l's
            # train_ch3, fastai's own Adam): each fetch ticks at its iteration's backward
            plan.base = replace(plan.base, trains=True, backward_marks=True)
        plan.windowed = True
    runner.save()
    plan.record(result, None)


def torch_pass(plan: Plan) -> None:
    runner = plan.runner
    trace = runner.raw / bundles.TORCH_TRACE
    result = run_torch(plan, trace)
    if (plan.windowed and runner.options.ranks is None and not (runner.interrupted or runner.manifest.timed_out or result.stopped)
            and program_failure(result) is None and never_windowed(result.results, trace)):
        # The light pass's step never reached its window here: the traced pass did not see
        # the step as the light pass did (Ultralytics' model, before 7080319: a layer the
        # light pass found outermost runs inside the predictor's module). No trace at all is
        # the worst reading; trace the program from its start, as with no step, and keep the
        # windowed run's files beside (raw/torch-window.*)
        plan.record(result, None)
        for old in runner.raw.glob("torch.*"):
            old.rename(old.with_name(old.name.replace("torch.", "torch-window.", 1)))
        runner.say(f"[yellow]torch pass: the light pass's step {esc(repr(plan.base.step))} never reached its window here "
                   f"({esc(str(result.results.step_counts or 'not one seen'))}): tracing the program from its start instead, "
                   "as with no step, and so do the later passes[/]")
        plan.unwindowed()
        result = run_torch(plan, trace)
    if (cut := result.results.trace_cut) is not None:
        result.results.trace_scope = (f"the program's first {value(cut['seconds'], 's')}: with no step to window on the trace began with "
                                      f"the program, and stopped when the process held {value(cut['rss_mb'], 'MB')}, mostly the "
                                      "tracer's events; the program ran on untraced")
        runner.say(f"torch pass: with no step to window on, the trace began with the program; it was stopped "
                   f"{value(cut['seconds'], 's')} in, when its events had filled --trace-budget ({value(runner.options.trace_budget_mb, 'MB')} over what "
                   "the program and the profiler hold alone), and the program ran on untraced. To trace steps "
                   "instead, name one: --step-fn, --step, or perfdoctor.region around the loop's body")
    if runner.options.ranks is not None:
        status, files = launch.trace_status(result.ranks, runner.raw, bundles.TORCH_TRACE, lambda r, t: torch_status(
            PassResult("torch", result.command, result.exit_code if r is None else r.exit_code, stderr_tail=result.stderr_tail,
                       results=r or PassResults(), stopped=result.stopped), t,
            runner.interrupted, plan.base))
        plan.record(result, "torch", status, files=files)
    else:
        plan.record(result, "torch", torch_status(result, trace, runner.interrupted, plan.base), files=[str(trace.relative_to(runner.bundle))])


def run_torch(plan: Plan, trace: Path) -> PassResult:
    s = plan.sampler("torch")
    result = plan.runner.run_pass("torch", [], replace(plan.base, windowed=plan.windowed, trace=str(trace.resolve())), s)
    plan.nvml_ok = plan.nvml_ok or (s is not None and s.error is None)
    if s is not None and s.error:
        plan.nvml_error(f"torch: {s.error}")
    return result


def program_failure(result: PassResult, interrupted: int | None = None) -> str | None:
    """Why a pass is not "ok" whatever its tool wrote: the program exited non-zero, died of a
    signal, or raised; None when it ran to a clean end, when it stopped because the user
    stopped the run (``interrupted``: the signal perfdoctor run got and passed on), or when
    --duration stopped it."""
    code = result.exit_code
    error = result.results.program_error
    if result.stopped:
        return None  # --duration ended it, as asked
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


def never_windowed(r: PassResults, trace: Path) -> bool:
    """The pass's window never opened, and it wrote no trace (nor kept the program's own)."""
    return r.window_state == "before" and not r.whole_program and not r.trace_error and not trace.exists()


def torch_status(result: PassResult, trace: Path, interrupted: int | None = None, base: PassConfig | None = None) -> str:
    """The torch collector's status; ``base``: the pass's config, whose step and warm-up say
    where the window would have opened."""
    r = result.results
    failure = program_failure(result, interrupted)
    if r.trace_error:
        return f"failed: {r.trace_error}"
    if trace.exists():
        return f"failed: {failure} (a trace was written)" if failure else "ok"
    if never_windowed(r, trace):
        # what it waited for, what came, and, where --duration ended the program first, the fix
        # (it printed "warmup None" here: the name of a window that never opened)
        opens = f", which opens after {base.warmup} warm-up steps of {base.step!r}" if base is not None and base.step else ""
        early = (f"; the program was stopped {result.stopped} first: a longer --duration lets it reach the window"
                 if result.stopped and result.stopped.startswith("at ") else "")
        return f"failed: no step reached the window{opens} (steps begun: {r.step_counts or 'none'}){early}"
    if failure:
        return f"failed: {failure}, no trace written; output: {result.stderr_tail[-500:]}"
    return f"failed: no trace written (exit {result.exit_code}); output: {result.stderr_tail[-500:]}"


def nsys_pass(plan: Plan) -> None:
    runner, base, windowed = plan.runner, plan.base, plan.windowed
    sampler = plan.sampler("nsys", gpm=False)
    nsys = find_tool("nsys")
    assert nsys is not None
    report = runner.raw / "nsys"
    sqlite = runner.raw / bundles.NSYS_SQLITE
    metrics_device = str(nvml.device_index()) if isinstance(nvml.device_index(), int) else None
    wrapper = nsys_run.profile_command(nsys, report.resolve(), capture_range=windowed, gpu_metrics_device=metrics_device)
    result = runner.run_pass("nsys", wrapper, replace(base, windowed=windowed, capture_range=windowed), sampler)
    rep = report.with_suffix(".nsys-rep")
    if not rep.exists():
        plan.record(result, "nsys", f"failed: no report written; output: {result.stderr_tail[-800:]}")
        return
    export = nsys_run.export_command(nsys, rep, sqlite)
    done = subprocess.run(export, capture_output=True, text=True)
    failure = program_failure(result, runner.interrupted)
    if done.returncode != 0 or not sqlite.exists():
        status = f"failed: nsys export: {(done.stderr or done.stdout)[-800:]}"
    else:
        status = f"failed: {failure} (a report was written)" if failure else "ok"
    plan.record(result, "nsys", status, export_command=export, files=[str(p.relative_to(runner.bundle)) for p in (rep, sqlite) if p.exists()])


def ncu_pass(plan: Plan) -> None:
    runner, base = plan.runner, plan.base
    tool = find_tool("ncu")
    assert tool is not None
    opts = runner.options
    csv = runner.raw / bundles.NCU_CSV
    config = replace(base, windowed=True, ncu_steps=opts.ncu_steps)
    if base.step is None and opts.step_fn is None:
        found = runner.manifest.light_pass
        if opts.light and (found is None or found.step_name is None):
            runner.manifest.collectors["ncu"] = Collector(status="unavailable: no step found to select kernels (pass --step or --step-fn)").to_json()
            runner.save()
            return
    kernels, source = step_kernels(runner.raw)
    replay = ncu_plan(kernels, source, opts.ncu_kernels)
    runner.say(f"ncu pass: {esc(replay)}")
    result = runner.run_pass("ncu", ncu.command(tool, csv.resolve(), kernels, opts.ncu_kernels), config, None)
    counters = ncu.parse_csv(csv.read_text(errors="replace")) if csv.exists() else None
    if counters is None or counters.empty:
        tail = (csv.read_text(errors="replace")[-800:] if csv.exists() else "") or result.stderr_tail[-800:]
        plan.record(result, "ncu", f"failed: no kernel profiled; {tail}", replay=replay)
        return
    failure = program_failure(result, runner.interrupted)
    status = f"failed: {failure} (counters were written)" if failure else "ok"
    plan.record(result, "ncu", status, files=[str(csv.relative_to(runner.bundle))], kernels=int(counters["correlation"].nunique()),
           step_index=config.warmup, replay=replay)


PASSES = {"light": light_pass, "torch": torch_pass, "nsys": nsys_pass, "ncu": ncu_pass}  # each runs the program once


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
