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

This module is the command: :func:`execute` opens the manifest, runs the passes
(:mod:`perfdoctor.record.passes`, each through :class:`perfdoctor.record.runner.Runner`),
closes the manifest with the run's exit code and writes metrics.json; ``python -m
perfdoctor.record.run`` is the entry. The rest of ``perfdoctor run`` lives beside it:
options (what was asked), target (the program's command line), tools (what this machine
offers), light (the light pass's scout).
"""

from __future__ import annotations

import os
import platform
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from perfdoctor.bundle import layout as bundles
from perfdoctor.bundle.protocol import Collector, FailedRank, Manifest, PassRun
from perfdoctor.collectors import nvml
from perfdoctor.record import launch
from perfdoctor.record.options import COLLECTORS, RunOptions
from perfdoctor.record.passes import run_passes
from perfdoctor.record.runner import Runner, shell_code
from perfdoctor.record.stdin import ReplayedStdin
from perfdoctor.record.tools import availability
from perfdoctor.text import rich as esc  # program arguments, paths and step names are untrusted

if TYPE_CHECKING:  # the analysis loads when the run is over, not at import
    from perfdoctor.analysis.ranks import CrossRank
    from perfdoctor.pipeline import Source


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
        return Collector(status=f"unavailable: {reason}").to_json()
    return Collector(status="pending" if selected else "unavailable: not selected (--collect)").to_json()


def execute(options: RunOptions, console: Console, stdin: ReplayedStdin | None = None) -> tuple[int, Path]:
    """Run every pass; returns (exit code, bundle directory). ``stdin``: the command's, when
    more passes than this run's read it (:func:`perfdoctor.record.repeats.run_repeated`)."""
    runner = Runner(options, console, stdin=stdin)
    reasons = availability()
    if options.ranks is not None:
        reasons.update(launch.unsupported(reasons))
    selected = list(options.collect) if options.collect is not None else [c for c in COLLECTORS if reasons[c] is None]
    for c in selected:
        if reasons[c] is not None:
            runner.say(f"[yellow]{c}[/]: unavailable: {reasons[c]}")
    manifest = runner.manifest = Manifest(
        status="running",
        command=["perfdoctor", "run", *options.target],
        target=options.target,
        cwd=os.getcwd(),
        options={k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(options).items()},
        started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        environment=environment(),
        collectors={c: collector_status(reasons[c], c in selected) for c in COLLECTORS},
    )
    if options.ranks is not None:
        manifest.launch = options.ranks.to_json()
        manifest.world_size = options.ranks.world_size
    if reasons["nvml"] is None:
        try:
            manifest.gpu = nvml.device_info()
        except Exception as exc:  # noqa: BLE001 - the manifest just lacks the GPU facts
            manifest.gpu_error = str(exc)
    manifest.calibration = cached_calibration(manifest.gpu)
    runner.save()
    runner.say(f"bundle: {esc(runner.bundle)}")

    try:
        with runner.forwarding_signals():
            run_passes(runner, selected, reasons)
    except Exception as exc:
        # A perfdoctor bug: keep the bundle readable and say so, then show the traceback.
        manifest.status = f"error: {type(exc).__name__}: {exc}"
        runner.save()
        raise
    finally:
        if stdin is None:
            runner.stdin.close()
    passes = [PassRun.from_json(p) for p in manifest.passes]
    first = passes[0].exit_code if passes else None
    ran = 0 if passes and passes[0].stopped else first  # --duration: the program ran until perfdoctor stopped it
    code = 128 + runner.interrupted if runner.interrupted and ran in (None, 0) else shell_code(ran)
    if options.ranks is not None and runner.interrupted:
        code = 128 + runner.interrupted  # Ctrl-C on a job: every rank ends on the signal, none is to blame
    elif options.ranks is not None and passes:  # the job's code is that of the rank that failed first
        failed = launch.failed_rank(manifest, passes[0].name)
        code = shell_code(failed[1]) if failed and failed[1] is not None else code  # code unknown: torchrun's
        manifest.failed_rank = failed and FailedRank(rank=failed[0], exit_code=failed[1]).to_json()
    if manifest.timed_out:
        code = launch.TIMEOUT_EXIT
    manifest.exit_code = code
    manifest.target_exit_code = first
    manifest.status = "interrupted" if runner.interrupted else "timed out" if manifest.timed_out else "done"
    manifest.finished_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    manifest.step = (manifest.light_pass and manifest.light_pass.step_name) or options.step or next(
        (p.window_step for p in passes if p.window_step), None
    )
    runner.save()
    write_metrics(runner, several=options.ranks is not None)
    return code, runner.bundle


def cached_calibration(gpu: dict[str, Any] | None) -> dict[str, Any] | None:
    if not gpu or "uuid" not in gpu:
        return None
    from perfdoctor.record.calibrate import load_calibration

    return load_calibration(gpu["uuid"])


def write_metrics(runner: Runner, several: bool = False) -> None:
    """metrics.json from the bundle, when the analysis can run on what was collected: the
    door's analysis (:func:`perfdoctor.pipeline.diagnose`, as every command's), without rules
    (metrics.json holds no findings) and without the load's warnings on the terminal.

    ``several`` (a multi-rank job): also ranks.json, the view across ranks
    (:func:`perfdoctor.record.launch.write_cross_rank`), its reason in ``ranks_error`` when
    there is none. Both from one :func:`~perfdoctor.pipeline.open` and one diagnosis of every
    rank: metrics.json is the lowest rank's own analysis in it, so no rank is loaded twice."""
    try:
        import perfdoctor.analysis.metrics  # noqa: F401 - the analysis's dependencies, else no metrics.json
    except ImportError as exc:
        if several:  # the bundle is still whole; analyze can redo both once they are installed
            ranks_failed(runner, exc)
        return
    from perfdoctor import pipeline
    from perfdoctor.collectors.bundle import NO_TRACE, picked_rank

    try:
        # open() checks the bundle as analyze does: one whose raw/ the program left a dangling
        # link or a FIFO in gets the reason in metrics_error, not metrics analyze would refuse
        source = pipeline.open(runner.bundle)
    except Exception as exc:  # noqa: BLE001 - the bundle stays; analyze can be rerun on it
        metrics_failed(runner, exc)
        if several:  # the view reads the same bundle
            ranks_failed(runner, exc)
        return
    rank = None
    try:
        # A multi-rank bundle: metrics.json is its lowest rank's, as load_bundle picks it when
        # asked for no rank (the view across ranks is ranks.json).
        rank = min(source.ranks) if source.ranks else None
        view = every_rank(runner, source) if several else None
        run = next((r for r in view.runs if r.rank == rank), None) if view is not None else None
        if run is not None:
            # analysed on the step the one-rank door would use: the view's first rank on the
            # bundle's step (Origin.bundle.step), which load_bundle takes from manifest.step
            doc = run.own_json()
        else:  # a single-process run; the lowest rank without a trace (NoTrace says why); no view
            # the user's --step (None: the step the run recorded, as analyze reads the bundle)
            d = pipeline.diagnose(source, step=runner.manifest.asked_step(), rules=None, warnings=False, rank=rank, traced=True)
            doc = d.analysis.to_json()
        bundles.write_json_atomic(runner.bundle / "metrics.json", doc)
    except pipeline.NoTrace as exc:
        why = exc.reason
        if rank is not None:  # as load_bundle asked for no rank says it: the rank it picked comes first
            why = "; ".join([picked_rank(len(source.ranks), rank)] + ([] if why == NO_TRACE else [why]))
        runner.manifest.metrics_error = why
        runner.save()
    except Exception as exc:  # noqa: BLE001 - the bundle stays; analyze can be rerun on it
        metrics_failed(runner, exc)


def every_rank(runner: Runner, source: Source) -> CrossRank | None:
    """The door's diagnosis of every rank of ``source`` (a :class:`perfdoctor.pipeline.Source`),
    without rules: its view across ranks written to ranks.json and returned; None, with the
    reason in ``ranks_error``, when it cannot be measured (a rank without a trace, a damaged
    trace: analyze says more)."""
    from perfdoctor import pipeline
    from perfdoctor.analysis import ranks

    try:
        if not source.ranks:  # no rank registered: the view's own refusal (no rank has a trace)
            ranks.load_profiles(source.path, source.manifest)
        view = pipeline.diagnose(source, rules=None, warnings=False).cross_rank
        launch.write_cross_rank(runner.bundle, view)
    except Exception as exc:  # noqa: BLE001 - metrics.json is still read from the lowest rank alone
        ranks_failed(runner, exc)
        return None
    return view


def metrics_failed(runner: Runner, exc: BaseException) -> None:
    runner.manifest.metrics_error = f"{type(exc).__name__}: {exc}"
    runner.save()
    runner.say(f"[yellow]metrics not written[/]: {esc(exc)}")


def ranks_failed(runner: Runner, exc: BaseException) -> None:
    runner.manifest.ranks_error = f"{type(exc).__name__}: {exc}"
    runner.save()


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
