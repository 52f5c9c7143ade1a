"""Repeated light passes: ``perfdoctor run --repeat N`` and ``perfdoctor compare-programs``.

A program's median step differs from process to process (clocks, CPU placement, allocator
and cache state), by more than its steps differ inside one process. So the unit of
replication is the process: ``--repeat N`` runs the light timing pass (no tracer) N times,
each a fresh ``python`` process, and the traced passes once. The bundle keeps every
process's step series, laid out as::

    raw/light.json, raw/light-2.json ... raw/light-N.json   what each light process saw
                                                            (the full step series)
    raw/light-K.config.json, raw/light-K.log               its config and its output
    manifest.json "repeat": {"requested": N, "order": ["light", "light-2", ...],
                             "processes": [{"pass", "file", "step_name", "steps_seen",
                                            "steady_start", "warmup", "exit_code",
                                            "step_latency_ms": [steady steps, ms]}
                                           | {..., "excluded": "why"}],
                             "pairing": {"id", "side": "A" | "B"} (compare-programs only),
                             "summary": {"step_latency_ms_p50": {"values": [one per
                                         process], "median", "min", "max",
                                         "max_over_min", "cv", "processes"}, ...p90, p99}}
    metrics.json "processes": the same summary, beside the metrics of the first process

Process 1 is the ordinary light pass (``light_pass`` in the manifest, whose steady state
places the traced window); processes 2..N run with the same configuration. Each process
finds its own steady state (:func:`perfdoctor.record.light.light_summary`). A process that fails, or
whose step is not the first process's, is kept in the list with ``excluded`` and left out
of the statistics. ``compare-programs A B`` runs A's and B's passes, then their further
light processes interleaved (A B A B ...), so drift of the machine hits both alike; with
``--lockstep`` the compared pairs run at once on one CPU, taking turns step by step
(:mod:`perfdoctor.record.lockstep`; each such process's entry has ``"lockstep": {"side", "cpu",
"turns", "free_after"}``, and ``pairing`` has ``"lockstep": true``).
How two repeated bundles are compared is :mod:`perfdoctor.compare.processes`.
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console

from perfdoctor.bundle import layout as bundles
from perfdoctor.bundle.protocol import LightPass, Manifest, Pairing, PassConfig, PassRun, RepeatProcess
from perfdoctor.compare.processes import PROCESS_METRICS, per_process, process_latencies, spread
from perfdoctor.record.lockstep import Pair, pick_cpu
from perfdoctor.record.light import light_summary
from perfdoctor.record.options import RunOptions
from perfdoctor.record.passes import pass_entry, program_failure
from perfdoctor.record.run import execute
from perfdoctor.record.runner import Runner
from perfdoctor.record.stdin import ReplayedStdin
from perfdoctor.record.target import target_name
from perfdoctor.text import rich, value


def _first_process(manifest: Manifest) -> dict[str, Any]:
    light = manifest.light_pass or LightPass()
    first = next((run for run in map(PassRun.from_json, manifest.passes) if run.name == "light"), PassRun())
    entry = RepeatProcess(pass_="light", file=f"{bundles.RAW}/light.json", exit_code=first.exit_code, step_name=light.step_name,
                          steps_seen=light.steps_seen, steady_start=light.steady_start, warmup=light.warmup)
    if light.step_name is None:
        entry.excluded = light.reason or "no step seen"
    else:
        entry.step_latency_ms = light.step_latency_ms or []
    return entry.to_json()


def repeat_of(manifest: Manifest) -> dict[str, Any]:
    """The manifest's ``repeat``, begun with process 1 (the ordinary light pass) if new."""
    if manifest.repeat is None:
        manifest.repeat = {"order": ["light"], "processes": [_first_process(manifest)]}
    return manifest.repeat


def add_process(runner: Runner, lockstep: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run one more light process into ``runner``'s bundle; returns its ``repeat.processes``
    entry. ``lockstep``: one side of a :class:`perfdoctor.record.lockstep.Pair`, whose other side
    runs at the same time."""
    manifest, raw = runner.manifest, runner.raw
    repeat = repeat_of(manifest)
    name = f"light-{len(repeat['order']) + 1}"
    config = PassConfig.from_json(json.loads((raw / "light.config.json").read_text()))  # as process 1 ran
    if lockstep is not None:
        config = replace(config, lockstep=lockstep)
    result = runner.run_pass(name, [], config, None, mode="light", keep_fds=Pair.fds(lockstep) if lockstep else ())
    manifest.passes.append(pass_entry(result))
    summary = light_summary(result.results, runner.options)
    if result.results.modules is not None and summary.module:
        bundles.write_json_atomic(raw / f"{name}.json", result.results.to_json())  # the module step's series, as for light.json
    entry = RepeatProcess(pass_=name, file=f"{bundles.RAW}/{name}.json", exit_code=result.exit_code, step_name=summary.step_name,
                          steps_seen=summary.steps_seen, steady_start=summary.steady_start, warmup=summary.warmup)
    if lockstep is not None:
        entry.lockstep = result.results.lockstep or {"turns": 0, "free_after": "the program wrote no results"}
    want = manifest.light_pass and manifest.light_pass.step_name
    failure = program_failure(result)
    if runner.interrupted:
        entry.excluded = f"interrupted (signal {runner.interrupted})"
    elif failure:
        entry.excluded = failure
    elif summary.step_name is None or summary.step_name != want:
        entry.excluded = f"its step was {summary.step_name!r}, process 1's {want!r}"
    else:
        entry.step_latency_ms = summary.step_latency_ms
    repeat["order"].append(name)
    repeat["processes"].append(entry.to_json())
    runner.save()
    return repeat["processes"][-1]


def summarize(runner: Runner) -> None:
    """``repeat.summary`` in the manifest and ``processes`` in metrics.json: per process
    metric, each process's value and their spread."""
    repeat = runner.manifest.repeat
    if repeat is None:
        return
    latencies = process_latencies(runner.manifest)
    summary = {metric: spread(per_process(latencies, q)) for metric, q in PROCESS_METRICS.items()}
    excluded = sum(bool(RepeatProcess.from_json(p).excluded) for p in repeat["processes"])
    repeat["summary"] = summary
    runner.save()
    metrics_file = runner.bundle / "metrics.json"
    if metrics_file.exists():
        doc = json.loads(metrics_file.read_text())
        doc["processes"] = {
            "source": "light timing pass, one value per process (manifest.json repeat)",
            "excluded": excluded,
            **summary,
        }
        bundles.write_json_atomic(metrics_file, doc)


def run_repeated(options: RunOptions, repeat: int, console: Console) -> tuple[int, Path]:
    """``perfdoctor run --repeat N``: every pass once (:func:`perfdoctor.record.run.execute`), then
    N - 1 more light processes into the same bundle. Returns (exit code, bundle): the
    program's, as for one run, or 128 + N when signal N stopped the repeats."""
    with ReplayedStdin(replay=options.ranks is None) as stdin:  # every process reads what the first read
        code, bundle = execute(options, console, stdin)
        runner = reopen(bundle, options, console, stdin)
        with runner.forwarding_signals():
            for _ in range(repeat - 1):
                if runner.interrupted or code != 0:  # a failed program: its repeats would fail alike
                    break
                add_process(runner)
                _say_process(runner)
    repeat_of(runner.manifest)["requested"] = repeat
    if runner.interrupted:
        runner.manifest.status = "interrupted"
        code = code or 128 + runner.interrupted
    summarize(runner)
    return code, bundle


def _say_process(runner: Runner) -> None:
    # Pass names, reasons and the program's own error text are user text in rich markup:
    # each goes through text.rich (a "[/]" in a step name once raised MarkupError and the
    # remaining processes never ran).
    entry = RepeatProcess.from_json(repeat_of(runner.manifest)["processes"][-1])
    turns = entry.lockstep
    name = rich(entry.pass_)
    if turns is not None and not turns.get("turns"):
        runner.say(f"[yellow]{name}[/]: took no turns ({rich(turns.get('free_after') or 'no step marker reached it')}): "
                   "left out of the lockstep pairs; mark the steps with perfdoctor.region or record_function")
    elif turns is not None and turns.get("free_after"):
        runner.say(f"{name}: lockstep for {rich(turns['turns'])} steps, then alone: {rich(turns['free_after'])}")
    if entry.excluded:
        runner.say(f"[yellow]{name}[/]: left out of the statistics: {rich(entry.excluded)}")
    elif entry.step_latency_ms:
        ms = sorted(entry.step_latency_ms)
        runner.say(f"{name}: p50 {value(ms[len(ms) // 2], 'ms')} over {len(ms)} steady steps")


def reopen(bundle: Path, options: RunOptions, console: Console, stdin: ReplayedStdin | None = None) -> Runner:
    """A Runner on a finished bundle, to add light processes to it (reading ``stdin``: the
    command's, which its first pass read)."""
    runner = Runner(options, console, bundle=bundle, stdin=stdin)
    path = bundle / bundles.MANIFEST
    runner.manifest = Manifest.from_json(json.loads(path.read_text()), str(path), clean=False)
    return runner


def compare_programs(a: RunOptions, b: RunOptions, repeat: int, console: Console,
                     lockstep: bool = False) -> tuple[int, Path, Path | None]:
    """Run A and B with ``repeat`` light processes each, interleaved A B A B ...: A's
    passes, B's passes, then A's and B's further light processes in turn. Returns (exit
    code: 0, else the first non-zero program exit; bundle A, bundle B — None when the user
    stopped the run before B started).

    ``lockstep``: after the passes, ``repeat`` more pairs of light processes, the two of a
    pair at once on one CPU taking turns step by step (:mod:`perfdoctor.record.lockstep`); those
    pairs are what diff and gate compare."""
    # B, and every further process, reads the stdin A's first pass read: one input for both
    with ReplayedStdin(replay=a.ranks is None and b.ranks is None) as stdin:
        return _compare_programs(a, b, repeat, console, lockstep, stdin)


def _compare_programs(a: RunOptions, b: RunOptions, repeat: int, console: Console, lockstep: bool,
                      stdin: ReplayedStdin) -> tuple[int, Path, Path | None]:
    sides = []
    for options, tag in ((a, "A"), (b, "B")):
        named = replace(options, name=f"{options.name or target_name(options.target)}-{tag}")
        code, bundle = execute(named, console, stdin)
        sides.append((code, reopen(bundle, named, console, stdin)))
        if sides[-1][1].manifest.status == "interrupted":
            break
    if len(sides) < 2:
        return sides[0][0], sides[0][1].bundle, None
    runners = [r for _, r in sides]
    further = (repeat if lockstep else repeat - 1) if all(c == 0 for c, _ in sides) else 0
    cpu = pick_cpu() if lockstep else None
    for _ in range(further):
        if any(r.interrupted for r in runners):
            break
        if cpu is not None:
            _lockstep_pair(runners, cpu)
            continue
        for runner in runners:
            with runner.forwarding_signals():
                add_process(runner)
            _say_process(runner)
    interrupted = next((r.interrupted for r in runners if r.interrupted), None)
    pair_id = uuid.uuid4().hex
    for runner, side in zip(runners, "AB"):
        # processes k of A and B ran side by side: diff and gate compare them pair by pair
        repeat_of(runner.manifest).update(requested=repeat, pairing=Pairing(pair_id, side, lockstep).to_json())
        if interrupted and runner.manifest.status == "done":
            runner.manifest.status = "interrupted"
        summarize(runner)
    code = next((c for c, _ in sides if c), 128 + interrupted if interrupted else 0)
    return code, runners[0].bundle, runners[1].bundle


def _lockstep_pair(runners: list[Runner], cpu: int) -> None:
    """One light process of A and one of B at once, on ``cpu``, taking turns step by step."""
    pair = Pair(cpu)
    errors: list[BaseException] = []

    def side(runner: Runner, config: dict[str, Any]) -> None:
        try:
            add_process(runner, config)
        except BaseException as exc:  # noqa: BLE001 - raised again on the main thread below
            errors.append(exc)

    threads = []
    for runner, config in zip(runners, pair.configs):
        runner.spinner = False  # two passes at once: rich shows one live display at a time
        threads.append(threading.Thread(target=side, args=(runner, config), daemon=True))
    with runners[0].forwarding_signals(runners[1]):
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(0.2)  # short joins: the main thread must stay free to take signals
    if errors:
        raise errors[0]
    for runner in runners:
        _say_process(runner)
